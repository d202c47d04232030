//! The agent: one evolving kernel refined through the stage machine
//! ([`machine`]: generate -> compile -> validate -> debug -> optimize), by a
//! [`crate::provider::Provider`], with prompts rendered from template files ([`prompts`]),
//! a strategy memory ([`memory`]), typed events ([`events`]) and a session directory that
//! survives a crash or a kill ([`session`]). [`engine::Engine`] ties them together.

pub mod engine;
pub mod evaluator;
pub mod machine;
pub mod memory;
pub mod prompts;
pub mod reply;
pub mod session;

use crate::toolchain::compile::{CompileOptions, CompileRequest};

pub use crate::clock::{now_rfc3339, now_utc};

/// The compile request for a version's source: the same for the compile stage and for the
/// built-in provider's parallel pre-compile, so the two meet in the compile cache.
pub fn compile_request(source: &str, arch: &str) -> CompileRequest {
    CompileRequest {
        source: source.to_string(),
        file_name: "kernel.cu".into(),
        options: CompileOptions {
            arch: arch.to_string(),
            ..CompileOptions::default()
        },
    }
}
