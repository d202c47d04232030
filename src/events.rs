//! Typed events the engine and the providers emit as they work, and the sinks that carry
//! them. Front ends consume them (the console printer and the suite's progress bar live
//! in the front ends, `cli/`); every session also writes them to `runs/<id>/events.jsonl`.
//! [`Event::line`] is the one rendering of an event as text.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{IoContext, Result};

fn sandboxed_default() -> bool {
    true
}

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    SessionStarted {
        id: String,
        workload: String,
        provider: String,
        evaluator: String,
        resumed: bool,
        /// False under `--no-sandbox`.
        #[serde(default = "sandboxed_default")]
        sandboxed: bool,
    },
    StageStarted {
        stage: String,
        version: Option<u32>,
    },
    StageFinished {
        stage: String,
        version: Option<u32>,
        outcome: String,
        seconds: f64,
    },
    ModelRequest {
        purpose: String,
        version: u32,
        attempt: u32,
    },
    /// Streamed reply text (the console shows it; the JSONL keeps only the totals).
    ModelDelta {
        text: String,
    },
    ModelRetry {
        attempt: u32,
        reason: String,
        wait_s: f64,
    },
    ModelReply {
        version: u32,
        prompt_tokens: u64,
        completion_tokens: u64,
        cost_usd: f64,
        seconds: f64,
    },
    Compiled {
        version: u32,
        ok: bool,
        cached: bool,
        seconds: f64,
        summary: String,
    },
    Validated {
        version: u32,
        passed: bool,
        fault: Option<String>,
        summary: String,
    },
    Timed {
        version: u32,
        median_us: f64,
        vendor: Option<String>,
        vendor_us: Option<f64>,
        roofline_fraction: Option<f64>,
    },
    VersionAccepted {
        version: u32,
        median_us: Option<f64>,
        reason: String,
    },
    VersionRejected {
        version: u32,
        reason: String,
    },
    Reverted {
        to_version: u32,
        reason: String,
    },
    Note {
        text: String,
    },
    SessionStopped {
        reason: String,
        best_version: Option<u32>,
        best_us: Option<f64>,
    },
}

impl Event {
    /// One line for a person watching the session.
    pub fn line(&self) -> Option<String> {
        Some(match self {
            Event::SessionStarted {
                id,
                workload,
                provider,
                evaluator,
                resumed,
                sandboxed,
            } => format!(
                "session {id} {} for {workload}: provider {provider}, evaluator {evaluator}{}",
                if *resumed { "resumed" } else { "started" },
                if *sandboxed {
                    ""
                } else {
                    " (NO SANDBOX: kernels run with your rights)"
                }
            ),
            Event::StageStarted { stage, version } => match version {
                Some(v) => format!("[v{v}] {stage} ..."),
                None => format!("{stage} ..."),
            },
            // Compile and validate report through their own events.
            Event::StageFinished { stage, .. } if stage == "compile" || stage == "validate" => {
                return None
            }
            Event::StageFinished {
                stage,
                version,
                outcome,
                seconds,
            } => format!(
                "{}{stage}: {outcome} ({seconds:.1} s)",
                version.map(|v| format!("[v{v}] ")).unwrap_or_default()
            ),
            Event::ModelRequest {
                purpose,
                version,
                attempt,
            } => format!(
                "[v{version}] asking the model ({purpose}{})",
                if *attempt > 1 {
                    format!(", attempt {attempt}")
                } else {
                    String::new()
                }
            ),
            Event::ModelDelta { .. } => return None,
            Event::ModelRetry {
                attempt,
                reason,
                wait_s,
            } => format!("  model request failed ({reason}); attempt {attempt} in {wait_s:.1} s"),
            Event::ModelReply {
                version,
                prompt_tokens,
                completion_tokens,
                cost_usd,
                seconds,
            } => format!(
                "[v{version}] reply: {prompt_tokens} prompt + {completion_tokens} completion tokens, ${cost_usd:.4}, {seconds:.1} s"
            ),
            Event::Compiled {
                version,
                ok,
                cached,
                seconds,
                summary,
            } => format!(
                "[v{version}] compile {} ({seconds:.1} s{}): {summary}",
                if *ok { "ok" } else { "FAILED" },
                if *cached { ", cached" } else { "" }
            ),
            Event::Validated {
                version,
                passed,
                fault,
                summary,
            } => format!(
                "[v{version}] {}{}: {summary}",
                if *passed { "correct" } else { "WRONG" },
                fault.as_ref().map(|f| format!(" ({f})")).unwrap_or_default()
            ),
            Event::Timed {
                version,
                median_us,
                vendor,
                vendor_us,
                roofline_fraction,
            } => {
                let mut s = format!("[v{version}] {median_us:.2} us");
                if let (Some(n), Some(t)) = (vendor, vendor_us) {
                    s.push_str(&format!(", {n} {t:.2} us ({:.2}x)", t / median_us));
                }
                if let Some(f) = roofline_fraction {
                    s.push_str(&format!(", {:.0}% of the roofline floor", f * 100.0));
                }
                s
            }
            Event::VersionAccepted {
                version, reason, ..
            } => format!("[v{version}] ACCEPTED: {reason}"),
            Event::VersionRejected { version, reason } => {
                format!("[v{version}] rejected: {reason}")
            }
            Event::Reverted { to_version, reason } => {
                format!("reverted to v{to_version}: {reason}")
            }
            Event::Note { text } => format!("note: {text}"),
            Event::SessionStopped {
                reason,
                best_version,
                best_us,
            } => match (best_version, best_us) {
                (Some(v), Some(t)) => format!("stopped ({reason}); best v{v} at {t:.2} us"),
                (Some(v), None) => format!("stopped ({reason}); best v{v}"),
                _ => format!("stopped ({reason}); no correct version"),
            },
        })
    }
}

/// Where events go.
pub trait EventSink: Send + Sync {
    fn emit(&self, e: &Event);
}

/// Discards everything.
pub struct NullSink;
impl EventSink for NullSink {
    fn emit(&self, _: &Event) {}
}

/// Appends events to a JSONL file, one object per line with a timestamp, flushed at
/// once so a killed process leaves every event it emitted. Streamed text is left out.
pub struct JsonlSink {
    file: Mutex<std::fs::File>,
}

impl JsonlSink {
    pub fn open(path: &Path) -> Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .at(path)?;
        Ok(JsonlSink {
            file: Mutex::new(file),
        })
    }
}

impl EventSink for JsonlSink {
    fn emit(&self, e: &Event) {
        if matches!(e, Event::ModelDelta { .. }) {
            return;
        }
        let mut v = match serde_json::to_value(e) {
            Ok(v) => v,
            Err(_) => return,
        };
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "ts".into(),
                serde_json::Value::from(crate::clock::now_rfc3339()),
            );
        }
        if let Ok(mut f) = self.file.lock() {
            let _ = writeln!(f, "{v}");
            let _ = f.flush();
        }
    }
}

/// Sends every event to each of several sinks.
pub struct Fanout(pub Vec<Box<dyn EventSink>>);

impl EventSink for Fanout {
    fn emit(&self, e: &Event) {
        for s in &self.0 {
            s.emit(e);
        }
    }
}

/// Reads a session's events file back.
pub fn read_jsonl(path: &Path) -> Result<Vec<Event>> {
    let text = std::fs::read_to_string(path).at(path)?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Event>(l).ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_round_trips_and_skips_deltas() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("events.jsonl");
        let sink = JsonlSink::open(&p).unwrap();
        sink.emit(&Event::ModelDelta { text: "x".into() });
        sink.emit(&Event::VersionRejected {
            version: 3,
            reason: "slower by 4.0%".into(),
        });
        let back = read_jsonl(&p).unwrap();
        assert_eq!(
            back,
            vec![Event::VersionRejected {
                version: 3,
                reason: "slower by 4.0%".into()
            }]
        );
        let raw = std::fs::read_to_string(&p).unwrap();
        assert!(raw.contains("\"event\":\"version_rejected\""));
        assert!(raw.contains("\"ts\""));
    }
}
