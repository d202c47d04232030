//! cutesmith: an agent that writes, checks and optimizes CuTe GPU kernels.
//!
//! The data path reads straight through the modules:
//! workload ([`workload`]) -> source -> shared object ([`toolchain`]) -> device facts
//! ([`gpu`]) -> report ([`doctor`], [`cli`]). Every kernel implements the C ABI in
//! `cutlass-templates/include/cutesmith_abi.h`, mirrored in [`abi`].

pub mod abi;
pub mod agent;
pub mod bench;
pub mod check;
pub mod cli;
pub mod clock;
pub mod config;
pub mod doctor;
pub mod error;
pub mod gpu;
pub mod interactive;
pub mod profile;
pub mod provider;
pub mod report;
pub mod run;
pub mod runner;
pub mod strategy;
pub mod suite;
pub mod toolchain;
pub mod validate;
pub mod workload;

pub use error::{Error, Result};
