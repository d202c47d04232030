//! Reading a provider's reply: the strategy block the prompts ask for (what changes,
//! why, the expected gain) and the kernel source. A reply without usable code is an
//! outcome ([`Parsed::missing`] says what was missing), answered with one repair request.
//!
//! Accepted strategy block (first fenced block tagged `strategy`, as `key: value` lines
//! or as JSON):
//!
//! ````text
//! ```strategy
//! change: 2-stage cp.async pipeline for A and B
//! why: the profile shows long scoreboard stalls on global loads
//! expected_gain: 1.3x
//! ```
//! ````
//!
//! The code is the longest fenced block tagged `cuda`, `cu`, `cpp`, `c++` or `c` (or
//! untagged) that defines `cutesmith_launch`.

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// The stated strategy of a version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StrategyNote {
    /// What changes, in a sentence.
    pub change: String,
    #[serde(default)]
    pub why: String,
    #[serde(default)]
    pub expected_gain: String,
}

/// What was found in a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub strategy: Option<StrategyNote>,
    pub code: Option<String>,
}

impl Parsed {
    /// What a repair request must ask for, or `None` when the reply is usable.
    pub fn missing(&self) -> Option<String> {
        match &self.code {
            None => Some(
                "the reply had no complete kernel: put the whole .cu file in one ```cuda block \
                 that includes \"cutesmith_abi.h\" and defines cutesmith_abi_version, \
                 cutesmith_workspace_bytes and cutesmith_launch"
                    .into(),
            ),
            Some(_) => None,
        }
    }
}

// An opening fence with an optional tag, the body, and the closing fence. (Literal
// patterns, exercised by the tests: `None` never happens.)
static FENCE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?ms)^[ \t]*```[ \t]*([A-Za-z0-9_+\-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$").ok()
});

static KEY_VALUE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^\s*[-*]?\s*([A-Za-z_ ]+?)\s*[:=]\s*(.*)$").ok());

/// Parses a reply's text.
pub fn parse(text: &str) -> Parsed {
    let mut strategy = None;
    let mut code: Option<String> = None;
    let Some(fence) = FENCE.as_ref() else {
        return Parsed { strategy, code };
    };
    for c in fence.captures_iter(text) {
        let tag = c.get(1).map_or("", |m| m.as_str()).to_ascii_lowercase();
        let body = c.get(2).map_or("", |m| m.as_str());
        if tag == "strategy" || tag == "json" && body.contains("\"change\"") {
            if strategy.is_none() {
                strategy = parse_strategy(body);
            }
            continue;
        }
        let code_tag = matches!(
            tag.as_str(),
            "" | "cuda" | "cu" | "cpp" | "c++" | "c" | "cxx"
        );
        if code_tag && body.contains("cutesmith_launch") {
            let longer = code.as_ref().is_none_or(|c| body.len() > c.len());
            if longer {
                code = Some(body.to_string());
            }
        }
    }
    // A reply that is nothing but a kernel (no fences) is accepted as code.
    if code.is_none() && !text.contains("```") && text.contains("cutesmith_launch") {
        code = Some(text.to_string());
    }
    Parsed { strategy, code }
}

fn parse_strategy(body: &str) -> Option<StrategyNote> {
    if let Ok(n) = serde_json::from_str::<StrategyNote>(body.trim()) {
        return Some(n);
    }
    let mut note = StrategyNote::default();
    let mut last: Option<&'static str> = None;
    for line in body.lines() {
        if let Some(c) = KEY_VALUE.as_ref().and_then(|r| r.captures(line)) {
            let key = c[1].trim().to_ascii_lowercase().replace(' ', "_");
            let field = match key.as_str() {
                "change" | "what" | "what_changes" | "strategy" => Some("change"),
                "why" | "reason" | "rationale" => Some("why"),
                "expected_gain" | "expected" | "gain" | "expected_speedup" => Some("expected_gain"),
                _ => None,
            };
            if let Some(f) = field {
                set(&mut note, f, c[2].trim());
                last = Some(f);
                continue;
            }
        }
        if let Some(f) = last {
            if !line.trim().is_empty() {
                let cur = get(&note, f);
                set(&mut note, f, &format!("{cur} {}", line.trim()));
            }
        }
    }
    (!note.change.is_empty()).then_some(note)
}

fn get(n: &StrategyNote, f: &str) -> String {
    match f {
        "change" => n.change.clone(),
        "why" => n.why.clone(),
        _ => n.expected_gain.clone(),
    }
}

fn set(n: &mut StrategyNote, f: &str, v: &str) {
    let v = v.trim().to_string();
    match f {
        "change" => n.change = v,
        "why" => n.why = v,
        _ => n.expected_gain = v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: &str =
        "#include \"cutesmith_abi.h\"\nextern \"C\" int cutesmith_launch() { return 0; }\n";

    #[test]
    fn strategy_and_code_are_found() {
        let text = format!(
            "Here is my plan.\n```strategy\nchange: vectorize loads to 16 bytes\nwhy: the copy\n  is scalar\nexpected_gain: 2x\n```\nAnd the kernel:\n```cuda\n{KERNEL}```\nDone."
        );
        let p = parse(&text);
        assert!(p.missing().is_none());
        let s = p.strategy.clone().unwrap();
        assert_eq!(s.change, "vectorize loads to 16 bytes");
        assert_eq!(s.why, "the copy is scalar");
        assert_eq!(s.expected_gain, "2x");
        assert_eq!(p.code.as_deref(), Some(KERNEL));
    }

    #[test]
    fn json_strategy_and_untagged_code() {
        let text = format!(
            "```json\n{{\"change\": \"split-K by 4\", \"why\": \"skinny\", \"expected_gain\": \"1.5x\"}}\n```\n```\n{KERNEL}```"
        );
        let p = parse(&text);
        assert_eq!(p.strategy.unwrap().change, "split-K by 4");
        assert!(p.code.is_some());
    }

    #[test]
    fn a_reply_without_code_asks_for_repair() {
        let p = parse("I would use a larger tile.\n```strategy\nchange: bigger tile\n```\n");
        assert!(p.code.is_none());
        assert!(p.missing().unwrap().contains("```cuda"));
        // A code block without the launch entry is not the kernel.
        let p = parse("```cuda\n__global__ void k() {}\n```\n");
        assert!(p.code.is_none());
    }

    #[test]
    fn the_longest_kernel_block_wins() {
        let long = format!("{KERNEL}// more\n// more\n");
        let p = parse(&format!("```cpp\n{KERNEL}```\n```cuda\n{long}```\n"));
        assert_eq!(p.code.as_deref(), Some(long.as_str()));
    }
}
