//! A scripted OpenAI-compatible server for the agent tests: wiremock on 127.0.0.1
//! answering `POST /v1/chat/completions` with the next of a list of responses.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Answers each request with the next scripted response (then 500).
struct Script(Mutex<VecDeque<ResponseTemplate>>);

impl Respond for Script {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        self.0
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| ResponseTemplate::new(500).set_body_string("script exhausted"))
    }
}

/// A server answering with `responses` in order; its base URL is `{uri}/v1`.
pub async fn serve(responses: Vec<ResponseTemplate>) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Script(Mutex::new(VecDeque::from(responses))))
        .mount(&server)
        .await;
    server
}

fn chunk(delta: Value, finish: Value) -> String {
    let c = json!({"id": "c1", "object": "chat.completion.chunk", "created": 0,
        "model": "mock-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {c}\n\n")
}

/// A streamed reply: the text in pieces, a finish, the usage (100 + 50 tokens), [DONE].
pub fn sse(text: &str) -> ResponseTemplate {
    sse_with_usage(text, 50)
}

/// Completion tokens of `text` as a tokenizer would count them, roughly: every word and
/// every punctuation mark (a run of spaces is free). Real BPE tokenizers split code into
/// about as many pieces.
pub fn token_estimate(text: &str) -> u64 {
    let mut n = 0u64;
    let mut in_word = false;
    for c in text.chars() {
        if c.is_alphanumeric() || c == '_' {
            if !in_word {
                n += 1;
            }
            in_word = true;
        } else {
            in_word = false;
            if !c.is_whitespace() {
                n += 1;
            }
        }
    }
    n
}

/// [`sse`] whose usage reports [`token_estimate`] completion tokens for the text.
pub fn sse_counted(text: &str) -> ResponseTemplate {
    sse_with_usage(text, token_estimate(text))
}

fn sse_with_usage(text: &str, completion_tokens: u64) -> ResponseTemplate {
    let mut body = String::new();
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(300) {
        let s: String = piece.iter().collect();
        body.push_str(&chunk(json!({"content": s}), Value::Null));
    }
    body.push_str(&chunk(json!({}), json!("stop")));
    let usage = json!({"id": "c1", "object": "chat.completion.chunk", "created": 0,
        "model": "mock-model", "choices": [],
        "usage": {"prompt_tokens": 100, "completion_tokens": completion_tokens,
                  "total_tokens": 100 + completion_tokens}});
    body.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(body)
}

/// A stream that stops half-way: no finish_reason, no [DONE].
pub fn cut(text: &str) -> ResponseTemplate {
    let half: String = text.chars().take(text.len() / 2).collect();
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(chunk(json!({"content": half}), Value::Null))
}
