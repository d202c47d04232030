//! Where kernels come from, behind one trait: the engine (`agent/`) asks a
//! [`Provider`] for the next version of the kernel and gets back a reply in one format,
//! whoever wrote it:
//!
//! - [`openai::OpenAiProvider`]: any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang,
//!   Ollama, llama.cpp server) through async-openai, streamed, with retries;
//! - [`builtin::BuiltinProvider`]: no model; CuTe templates instantiated from strategies;
//! - [`replay::ReplayProvider`]: replies read from a recorded or hand-written transcript.
//!
//! Every reply is text in the same shape (a ```strategy block, then a ```cuda block), so
//! the engine parses them all the same way and the session log looks the same.

pub mod builtin;
pub mod openai;
pub mod replay;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::events::EventSink;

/// Why the engine is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// A first kernel for the workload.
    Generate,
    /// Fix the current version (compile diagnostics or a validation report attached).
    Debug,
    /// Make the best version faster (profile and strategy history attached).
    Optimize,
    /// The last reply had no usable code: ask once more, saying what was missing.
    Repair,
    /// Distinct strategies for a first kernel, strategy blocks only (`--population`).
    Population,
}

impl Purpose {
    pub fn name(self) -> &'static str {
        match self {
            Purpose::Generate => "generate",
            Purpose::Debug => "debug",
            Purpose::Optimize => "optimize",
            Purpose::Repair => "repair",
            Purpose::Population => "population",
        }
    }
}

/// A chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn system(s: impl Into<String>) -> Self {
        Message {
            role: "system".into(),
            content: s.into(),
        }
    }
    pub fn user(s: impl Into<String>) -> Self {
        Message {
            role: "user".into(),
            content: s.into(),
        }
    }
    pub fn assistant(s: impl Into<String>) -> Self {
        Message {
            role: "assistant".into(),
            content: s.into(),
        }
    }
}

/// One request to a provider: the rendered prompts (for model providers) and the
/// structured facts a provider without a model needs.
#[derive(Debug, Clone)]
pub struct Ask {
    pub purpose: Purpose,
    /// The version number the reply will become.
    pub version: u32,
    pub messages: Vec<Message>,
    /// Labels of every strategy already tried in this session (the built-in provider
    /// skips them; model providers see them in the prompt).
    pub tried: Vec<String>,
}

/// Token counts of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// A provider's answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Reply {
    /// The reply text: a strategy block and a code block, as the prompts ask.
    pub text: String,
    /// A reasoning model's separate reasoning text, when the endpoint sends one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    pub usage: Usage,
    /// True when the endpoint sent no token counts and they were estimated from lengths.
    #[serde(default)]
    pub usage_estimated: bool,
    /// Dollars, from the configured prices (0 when none are configured).
    pub cost_usd: f64,
    /// HTTP attempts it took (1 = first try).
    pub attempts: u32,
    /// The model that answered, as the endpoint reports it, or the provider's name.
    pub model: String,
}

/// A source of kernels.
#[async_trait::async_trait]
pub trait Provider: Send {
    /// A short name for logs and reports (`openai:gpt-x@host`, `builtin`, `replay:file`).
    fn name(&self) -> String;

    /// The next reply, or `None` when the provider has nothing more to offer (the
    /// built-in provider has tried its whole strategy space, a transcript has ended).
    async fn propose(&mut self, ask: &Ask, events: &dyn EventSink) -> Result<Option<Reply>>;

    /// Whether prompts matter to this provider (false: the rendering can be skipped).
    fn reads_prompts(&self) -> bool {
        true
    }
}
