//! The OpenAI-compatible provider: chat completions, streamed, through async-openai, so
//! it talks to OpenAI, vLLM, SGLang, Ollama and llama.cpp's server alike.
//!
//! - The request is plain JSON (async-openai's `byot` calls), so endpoint-specific fields
//!   (`reasoning_effort`) go through and reasoning text in the reply
//!   (`reasoning_content` / `reasoning`) is kept rather than dropped by a typed parser.
//! - Timeouts are a connect timeout and a read timeout (between two pieces of the stream):
//!   a total timeout would cut off a long, healthy streamed reply.
//! - Retries: async-openai itself retries 429 and 5xx a few times with short backoff; on
//!   top of that every request gets `max_attempts` tries, with exponential backoff, on
//!   429 / 5xx, timeouts, connection errors and a stream that ends before the reply does
//!   (no `finish_reason`). 4xx other than 429 stops at once with what to check.
//! - Usage comes from the final streamed chunk (`stream_options.include_usage`); an
//!   endpoint that sends none gets an estimate (4 characters a token), flagged as such.

use std::time::{Duration, Instant};

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::Client;
use futures::StreamExt;
use serde_json::{json, Value};

use super::{Ask, Provider, Reply, Usage};
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::events::{Event, EventSink};

/// A chat-completions endpoint.
pub struct OpenAiProvider {
    client: Client<OpenAIConfig>,
    cfg: ModelConfig,
    /// First retry delay; doubles per attempt, capped at 30 s.
    pub retry_base: Duration,
}

/// Why one attempt failed.
#[derive(Debug)]
enum Failure {
    Retry(String),
    Fatal(String),
}

impl OpenAiProvider {
    /// A client for `cfg`; the key is read from the environment variable the config names
    /// (local servers usually need none).
    pub fn new(cfg: ModelConfig) -> Result<OpenAiProvider> {
        // rustls without a default crypto provider (no aws-lc C build): install ring once.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(cfg.connect_timeout_s.unwrap_or(20)))
            .read_timeout(Duration::from_secs(cfg.read_timeout_s.unwrap_or(300)))
            .build()
            .map_err(|e| Error::Model(format!("cannot build the HTTP client: {e}")))?;
        let key = std::env::var(&cfg.api_key_env).unwrap_or_default();
        let config = OpenAIConfig::new()
            .with_api_base(cfg.base_url.trim_end_matches('/'))
            .with_api_key(key);
        Ok(OpenAiProvider {
            client: Client::build(http, config),
            cfg,
            retry_base: Duration::from_millis(500),
        })
    }

    /// The request body for `ask`.
    pub fn body(&self, ask: &Ask) -> Value {
        let messages: Vec<Value> = ask
            .messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        let mut b = json!({
            "model": self.cfg.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if let Some(o) = b.as_object_mut() {
            if let Some(t) = self.cfg.temperature {
                o.insert("temperature".into(), json!(t));
            }
            if let Some(n) = self.cfg.max_tokens {
                o.insert("max_tokens".into(), json!(n));
            }
            if let Some(r) = &self.cfg.reasoning_effort {
                o.insert("reasoning_effort".into(), json!(r));
            }
        }
        b
    }

    async fn once(&self, body: &Value, events: &dyn EventSink) -> Result<Reply, Failure> {
        let mut stream = self
            .client
            .chat()
            .create_stream_byot::<Value, Value>(body.clone())
            .await
            .map_err(|e| self.classify(e))?;
        let mut reply = Reply::default();
        let mut usage: Option<Usage> = None;
        let mut finished = false;
        let mut reasoning = String::new();
        while let Some(item) = stream.next().await {
            let chunk = item.map_err(|e| self.classify(e))?;
            if let Some(m) = chunk.get("model").and_then(Value::as_str) {
                reply.model = m.to_string();
            }
            if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
                usage = Some(Usage {
                    prompt_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
                    completion_tokens: u
                        .get("completion_tokens")
                        .and_then(Value::as_u64)
                        .unwrap_or(0),
                });
            }
            for c in chunk
                .get("choices")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let delta = c.get("delta");
                if let Some(t) = delta.and_then(|d| d.get("content")).and_then(Value::as_str) {
                    reply.text.push_str(t);
                    events.emit(&Event::ModelDelta {
                        text: t.to_string(),
                    });
                }
                for key in ["reasoning_content", "reasoning"] {
                    if let Some(t) = delta.and_then(|d| d.get(key)).and_then(Value::as_str) {
                        reasoning.push_str(t);
                    }
                }
                if c.get("finish_reason").is_some_and(|f| !f.is_null()) {
                    finished = true;
                }
            }
        }
        if !finished {
            return Err(Failure::Retry(format!(
                "the stream ended before the reply did (no finish_reason after {} characters)",
                reply.text.len()
            )));
        }
        match usage {
            Some(u) => reply.usage = u,
            None => {
                reply.usage_estimated = true;
                let prompt_chars: usize = body
                    .get("messages")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|m| m.get("content").and_then(Value::as_str))
                    .map(str::len)
                    .sum();
                reply.usage = Usage {
                    prompt_tokens: (prompt_chars / 4) as u64,
                    completion_tokens: ((reply.text.len() + reasoning.len()) / 4) as u64,
                };
            }
        }
        if !reasoning.is_empty() {
            reply.reasoning = Some(reasoning);
        }
        reply.cost_usd = reply.usage.prompt_tokens as f64 / 1e6
            * self.cfg.price_prompt_per_mtok.unwrap_or(0.0)
            + reply.usage.completion_tokens as f64 / 1e6
                * self.cfg.price_completion_per_mtok.unwrap_or(0.0);
        if reply.model.is_empty() {
            reply.model = self.cfg.model.clone();
        }
        Ok(reply)
    }

    fn classify(&self, e: OpenAIError) -> Failure {
        match e {
            OpenAIError::ApiError(a) => {
                let code = a.status_code.as_u16();
                let msg = format!("HTTP {code}: {}", a.api_error.message);
                if code == 429 || code >= 500 {
                    Failure::Retry(msg)
                } else if code == 401 || code == 403 {
                    Failure::Fatal(format!(
                        "{msg} (the endpoint refused the key: set ${} to a valid key)",
                        self.cfg.api_key_env
                    ))
                } else if code == 404 {
                    Failure::Fatal(format!(
                        "{msg} (check base_url {} and model {:?}: the endpoint has no such route or model)",
                        self.cfg.base_url, self.cfg.model
                    ))
                } else {
                    Failure::Fatal(msg)
                }
            }
            OpenAIError::Reqwest(r) => Failure::Retry(format!(
                "{}{}",
                if r.is_timeout() {
                    "timed out: "
                } else if r.is_connect() {
                    "cannot connect: "
                } else {
                    ""
                },
                r
            )),
            OpenAIError::StreamError(s) => Failure::Retry(format!("stream error: {s}")),
            OpenAIError::JSONDeserialize(e, body) => Failure::Retry(format!(
                "unreadable reply ({e}): {}",
                body.chars().take(200).collect::<String>()
            )),
            other => Failure::Fatal(other.to_string()),
        }
    }
}

#[async_trait::async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> String {
        format!("model {} at {}", self.cfg.model, self.cfg.base_url)
    }

    async fn propose(&mut self, ask: &Ask, events: &dyn EventSink) -> Result<Option<Reply>> {
        let body = self.body(ask);
        let attempts = self.cfg.max_attempts.unwrap_or(4).max(1);
        let mut last = String::new();
        for attempt in 1..=attempts {
            events.emit(&Event::ModelRequest {
                purpose: ask.purpose.name().into(),
                version: ask.version,
                attempt,
            });
            let t0 = Instant::now();
            match self.once(&body, events).await {
                Ok(mut r) => {
                    r.attempts = attempt;
                    events.emit(&Event::ModelReply {
                        version: ask.version,
                        prompt_tokens: r.usage.prompt_tokens,
                        completion_tokens: r.usage.completion_tokens,
                        cost_usd: r.cost_usd,
                        seconds: t0.elapsed().as_secs_f64(),
                    });
                    return Ok(Some(r));
                }
                Err(Failure::Fatal(m)) => return Err(Error::Model(m)),
                Err(Failure::Retry(m)) => {
                    last = m;
                    if attempt < attempts {
                        let wait = self
                            .retry_base
                            .saturating_mul(1 << (attempt - 1).min(6))
                            .min(Duration::from_secs(30));
                        events.emit(&Event::ModelRetry {
                            attempt: attempt + 1,
                            reason: last.clone(),
                            wait_s: wait.as_secs_f64(),
                        });
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        }
        Err(Error::Model(format!(
            "{} at {}: {attempts} attempts failed, the last with: {last}. The session is saved; \
             run `cutesmith resume` once the endpoint answers",
            self.cfg.model, self.cfg.base_url
        )))
    }
}
