//! The agent: one evolving kernel refined through the stage machine
//! ([`machine`]: generate -> compile -> validate -> debug -> optimize), by a
//! [`crate::provider::Provider`], with prompts rendered from template files ([`prompts`]),
//! a strategy memory ([`memory`]), typed events ([`crate::events`]) and a session
//! directory that survives a crash or a kill ([`session`]). [`engine::Engine`] ties them
//! together; [`launch`] builds one from what was asked of it, [`evaluator`] is the
//! engine's view of the evaluation service, [`export`] writes the best kernel out.

pub mod engine;
pub mod evaluator;
pub mod export;
pub mod launch;
pub mod machine;
pub mod memory;
pub mod prompts;
pub mod reply;
pub mod session;

pub use crate::clock::{now_rfc3339, now_utc};
