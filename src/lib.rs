//! cutesmith: an agent that writes, checks and optimizes CuTe GPU kernels.
//!
//! The data path reads straight through the modules: workload spec ([`spec`]) -> prompt
//! and reply ([`agent`], [`provider`]) -> source -> shared object ([`toolchain`]) ->
//! worker process and evaluation ([`eval`]) -> profile ([`feedback`]) -> next prompt.
//! Front ends ([`cli`]) and reports ([`report`]) sit on top. Layers point down only; see
//! ARCHITECTURE.md. Every kernel implements the C ABI in
//! `cutlass-templates/include/cutesmith_abi.h`, mirrored in [`abi`].

pub mod abi;
pub mod agent;
pub mod cli;
pub mod clock;
pub mod config;
pub mod error;
pub mod eval;
pub mod events;
pub mod feedback;
pub mod process;
pub mod provider;
pub mod pytorch;
pub mod report;
pub mod sandbox;
pub mod spec;
pub mod strategy;
pub mod toolchain;
pub mod tuning;

pub use error::{Error, Result};
