//! The replay provider: answers with the replies of a transcript, in order, whatever it
//! is asked; `None` once they run out. Two formats:
//!
//! - a session's `transcript.jsonl` (one exchange per line; its `reply.text` is played),
//!   to reproduce a recorded session;
//! - a TOML file written by hand, for tests and demonstrations:
//!
//! ````toml
//! [[reply]]
//! text = '''
//! ```strategy
//! change: first attempt
//! ```
//! ```cuda
//! ...
//! ```
//! '''
//! ````

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{Ask, Provider, Reply};
use crate::error::{Error, IoContext, Result};
use crate::events::EventSink;

pub struct ReplayProvider {
    path: PathBuf,
    replies: Vec<String>,
    next: usize,
}

#[derive(Deserialize)]
struct TomlTranscript {
    reply: Vec<TomlReply>,
}

#[derive(Deserialize)]
struct TomlReply {
    text: String,
}

impl ReplayProvider {
    pub fn load(path: &Path) -> Result<ReplayProvider> {
        let text = std::fs::read_to_string(path).at(path)?;
        let bad = |m: String| Error::Format {
            context: path.display().to_string(),
            message: m,
        };
        let replies = if path.extension().is_some_and(|e| e == "toml") {
            toml::from_str::<TomlTranscript>(&text)
                .map_err(|e| bad(e.to_string()))?
                .reply
                .into_iter()
                .map(|r| r.text)
                .collect()
        } else {
            let mut v = Vec::new();
            for (i, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                let x: serde_json::Value =
                    serde_json::from_str(line).map_err(|e| bad(format!("line {}: {e}", i + 1)))?;
                if let Some(t) = x
                    .get("reply")
                    .and_then(|r| r.get("text"))
                    .and_then(|t| t.as_str())
                {
                    v.push(t.to_string());
                }
            }
            v
        };
        if replies.is_empty() {
            return Err(bad("no replies in the transcript".into()));
        }
        Ok(ReplayProvider {
            path: path.to_path_buf(),
            replies,
            next: 0,
        })
    }

    /// Skips the replies an interrupted session already used (on resume).
    pub fn skip(&mut self, n: usize) {
        self.next = n.min(self.replies.len());
    }
}

#[async_trait::async_trait]
impl Provider for ReplayProvider {
    fn name(&self) -> String {
        format!("replay of {}", self.path.display())
    }

    async fn propose(&mut self, _ask: &Ask, _events: &dyn EventSink) -> Result<Option<Reply>> {
        let Some(text) = self.replies.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        Ok(Some(Reply {
            text: text.clone(),
            attempts: 1,
            model: "replay".into(),
            ..Reply::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::NullSink;
    use crate::provider::Purpose;

    #[tokio::test]
    async fn plays_a_toml_transcript_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(&p, "[[reply]]\ntext = 'one'\n[[reply]]\ntext = '''two'''\n").unwrap();
        let mut r = ReplayProvider::load(&p).unwrap();
        let ask = Ask {
            purpose: Purpose::Generate,
            version: 1,
            messages: vec![],
            tried: vec![],
        };
        assert_eq!(
            r.propose(&ask, &NullSink).await.unwrap().unwrap().text,
            "one"
        );
        assert_eq!(
            r.propose(&ask, &NullSink).await.unwrap().unwrap().text,
            "two"
        );
        assert!(r.propose(&ask, &NullSink).await.unwrap().is_none());
    }
}
