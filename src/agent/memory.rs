//! Strategy memory: every strategy a session tried, with what came of it, kept in the
//! session state and summarized into later prompts so the loop never repeats a failed
//! idea. The built-in provider skips labels that are already here.

use serde::{Deserialize, Serialize};

/// What came of a strategy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// The reply had no usable code, even after the repair request.
    NoCode,
    CompileFailed {
        first_error: String,
    },
    /// Validation failed (mismatch, out of bounds, race, timeout, ...).
    Wrong {
        fault: String,
    },
    /// The first correct version of the session.
    FirstCorrect {
        median_us: Option<f64>,
    },
    /// Correct and faster than the best beyond the noise: accepted.
    Faster {
        percent: f64,
        median_us: f64,
    },
    /// Correct but slower (or not faster beyond the noise): rejected.
    Slower {
        percent: f64,
        median_us: f64,
    },
}

impl Verdict {
    pub fn describe(&self) -> String {
        match self {
            Verdict::NoCode => "no usable code in the reply".into(),
            Verdict::CompileFailed { first_error } => format!("compile failed: {first_error}"),
            Verdict::Wrong { fault } => format!("wrong results ({fault})"),
            Verdict::FirstCorrect { median_us } => match median_us {
                Some(t) => format!("first correct version, {t:.2} us"),
                None => "first correct version".into(),
            },
            Verdict::Faster { percent, median_us } => {
                format!("faster by {percent:.1}% ({median_us:.2} us): accepted")
            }
            Verdict::Slower { percent, median_us } => {
                if *percent <= 0.0 {
                    format!(
                        "not faster beyond the noise ({:.1}% faster, {median_us:.2} us): rejected",
                        -percent
                    )
                } else {
                    format!("slower by {percent:.1}% ({median_us:.2} us): rejected")
                }
            }
        }
    }

    /// A failed idea the loop must not repeat.
    pub fn failed(&self) -> bool {
        !matches!(self, Verdict::FirstCorrect { .. } | Verdict::Faster { .. })
    }
}

/// One strategy and its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub version: u32,
    /// generate / debug / optimize / human.
    pub origin: String,
    /// The stated change (the strategy block's `change`, or the built-in label).
    pub change: String,
    pub verdict: Verdict,
}

/// The session's strategy history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub attempts: Vec<Attempt>,
}

impl Memory {
    pub fn record(&mut self, a: Attempt) {
        self.attempts.push(a);
    }

    /// The labels of every strategy tried.
    pub fn tried(&self) -> Vec<String> {
        self.attempts.iter().map(|a| a.change.clone()).collect()
    }

    /// An earlier failed attempt with the same stated change (case and spacing ignored).
    pub fn repeats_failure(&self, change: &str) -> Option<&Attempt> {
        let key = normalize(change);
        self.attempts
            .iter()
            .find(|a| a.verdict.failed() && !key.is_empty() && normalize(&a.change) == key)
    }

    /// The history as prompt lines, newest last, at most `max` (the oldest dropped first,
    /// with a count of what was dropped).
    pub fn summary(&self, max: usize) -> String {
        if self.attempts.is_empty() {
            return "(nothing tried yet)".into();
        }
        let skip = self.attempts.len().saturating_sub(max);
        let mut s = String::new();
        if skip > 0 {
            s.push_str(&format!("({skip} earlier attempts not shown)\n"));
        }
        for a in &self.attempts[skip..] {
            s.push_str(&format!(
                "- v{} [{}] {} -> {}\n",
                a.version,
                a.origin,
                a.change,
                a.verdict.describe()
            ));
        }
        s
    }
}

fn normalize(s: &str) -> String {
    s.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_repeats() {
        let mut m = Memory::default();
        m.record(Attempt {
            version: 1,
            origin: "generate".into(),
            change: "naive kernel".into(),
            verdict: Verdict::FirstCorrect {
                median_us: Some(100.0),
            },
        });
        m.record(Attempt {
            version: 2,
            origin: "optimize".into(),
            change: "Use 4 stages.".into(),
            verdict: Verdict::Slower {
                percent: 3.5,
                median_us: 103.5,
            },
        });
        let s = m.summary(10);
        assert!(s.contains("- v2 [optimize] Use 4 stages. -> slower by 3.5% (103.50 us): rejected"));
        assert_eq!(
            m.repeats_failure("use 4   stages").map(|a| a.version),
            Some(2)
        );
        assert!(m.repeats_failure("naive kernel").is_none());
        assert!(m.summary(1).starts_with("(1 earlier attempts not shown)"));
    }
}
