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
//!
//! Instead of the whole file a reply may carry edits against the source the prompt showed
//! (fenced blocks tagged `edit`, each holding one or more search/replace pairs; the
//! numbered source in the prompt is for reference, the numbers are not part of it):
//!
//! ````text
//! ```edit
//! <<<<<<< SEARCH
//!   for (int k = 0; k < K; ++k) {
//! =======
//!   #pragma unroll 4
//!   for (int k = 0; k < K; ++k) {
//! >>>>>>> REPLACE
//! ```
//! ````
//!
//! [`apply_edits`] applies them in order, exactly: each SEARCH text must be whole lines
//! found exactly once in the file as the earlier edits left it; otherwise the reply gets
//! one repair request naming the edit.

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

/// One search/replace pair of an edit reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    /// Whole lines of the current source, without line numbers.
    pub search: String,
    /// What replaces them (may be empty: a deletion).
    pub replace: String,
}

/// What was found in a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub strategy: Option<StrategyNote>,
    pub code: Option<String>,
    /// Edits against the source the prompt showed (used when there is no whole file).
    pub edits: Vec<Edit>,
    /// Why an `edit` block could not be read (a marker missing or out of order).
    pub edit_error: Option<String>,
}

impl Parsed {
    /// The kernel the reply gives: its whole file, or its edits applied to `base` (the
    /// source the prompt showed); `Err(what a repair request must say)` otherwise.
    pub fn kernel(&self, base: Option<&str>) -> Result<String, String> {
        if let Some(code) = &self.code {
            return Ok(code.clone());
        }
        if let Some(missing) = self.missing() {
            return Err(missing);
        }
        match base {
            Some(b) => apply_edits(b, &self.edits),
            None => Err(
                "the reply had edits, but there is no earlier version to apply them to: give the whole .cu file in one ```cuda block"
                    .into(),
            ),
        }
    }

    /// What a repair request must ask for, or `None` when the reply is usable (a whole
    /// file, or well-formed edits; whether the edits apply is [`apply_edits`]'s question).
    pub fn missing(&self) -> Option<String> {
        if self.code.is_none() {
            if let Some(e) = &self.edit_error {
                return Some(e.clone());
            }
            if !self.edits.is_empty() {
                return None;
            }
        }
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
    let mut edits = Vec::new();
    let mut edit_error = None;
    let Some(fence) = FENCE.as_ref() else {
        return Parsed {
            strategy,
            code,
            edits,
            edit_error,
        };
    };
    let mut edit_blocks = 0;
    for c in fence.captures_iter(text) {
        let tag = c.get(1).map_or("", |m| m.as_str()).to_ascii_lowercase();
        let body = c.get(2).map_or("", |m| m.as_str());
        if tag == "strategy" || tag == "json" && body.contains("\"change\"") {
            if strategy.is_none() {
                strategy = parse_strategy(body);
            }
            continue;
        }
        if tag == "edit" {
            edit_blocks += 1;
            match parse_edit_block(body, edits.len()) {
                Ok(mut e) => edits.append(&mut e),
                Err(why) => {
                    edit_error.get_or_insert(format!("edit block {edit_blocks}: {why}"));
                }
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
    Parsed {
        strategy,
        code,
        edits,
        edit_error,
    }
}

const SEARCH: &str = "<<<<<<< SEARCH";
const DIVIDER: &str = "=======";
const REPLACE: &str = ">>>>>>> REPLACE";

/// The search/replace pairs of one `edit` block (`before`: edits in earlier blocks, for
/// the numbering in messages).
fn parse_edit_block(body: &str, before: usize) -> Result<Vec<Edit>, String> {
    #[derive(PartialEq)]
    enum At {
        Outside,
        Search,
        Replace,
    }
    let mut out = Vec::new();
    let mut at = At::Outside;
    let (mut search, mut replace) = (Vec::new(), Vec::new());
    for line in body.lines() {
        let marker = line.trim_end();
        match (&at, marker) {
            (At::Outside, SEARCH) => at = At::Search,
            (At::Outside, l) if l.trim().is_empty() => {}
            (At::Outside, _) => {
                return Err(format!(
                    "text outside a pair: every edit is `{SEARCH}`, the lines to find, `{DIVIDER}`, the new lines, `{REPLACE}`"
                ))
            }
            (At::Search, DIVIDER) => at = At::Replace,
            (At::Search, _) => search.push(line),
            (At::Replace, REPLACE) => {
                if search.is_empty() {
                    return Err(format!(
                        "edit {} has an empty SEARCH: quote the lines to replace",
                        before + out.len() + 1
                    ));
                }
                out.push(Edit {
                    search: search.join("\n"),
                    replace: replace.join("\n"),
                });
                search.clear();
                replace.clear();
                at = At::Outside;
            }
            (At::Replace, _) => replace.push(line),
        }
    }
    if at != At::Outside {
        return Err(format!(
            "edit {} is not closed: it needs `{DIVIDER}` and `{REPLACE}` lines",
            before + out.len() + 1
        ));
    }
    if out.is_empty() {
        return Err(format!("no `{SEARCH}` ... `{REPLACE}` pair in it"));
    }
    Ok(out)
}

/// Where `needle` (whole lines) occurs in `hay`: byte offsets of line-aligned matches.
fn line_matches(hay: &str, needle: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = hay[from..].find(needle).map(|i| i + from) {
        let starts_line = i == 0 || hay.as_bytes()[i - 1] == b'\n';
        let end = i + needle.len();
        let ends_line = end == hay.len() || hay.as_bytes()[end] == b'\n';
        if starts_line && ends_line {
            out.push(i);
        }
        from = i + 1;
    }
    out
}

/// `base` with `edits` applied in order; the error names the first edit that does not
/// apply, and why (its SEARCH lines are not in the file, or are there more than once, with
/// the line numbers of each place).
pub fn apply_edits(base: &str, edits: &[Edit]) -> Result<String, String> {
    let mut text = base.to_string();
    for (i, e) in edits.iter().enumerate() {
        let found = line_matches(&text, &e.search);
        let first_line = e.search.lines().next().unwrap_or("").trim();
        match found.as_slice() {
            [at] => {
                let mut end = *at + e.search.len();
                // Deleted lines go with their line breaks.
                if e.replace.is_empty() && text.as_bytes().get(end) == Some(&b'\n') {
                    end += 1;
                }
                text.replace_range(*at..end, &e.replace);
            }
            [] => {
                return Err(format!(
                    "edit {} does not apply: its SEARCH lines (starting `{first_line}`) are not in the current source{}; copy them exactly, whole lines, without line numbers",
                    i + 1,
                    if i > 0 { " as the earlier edits left it" } else { "" }
                ))
            }
            many => {
                let lines: Vec<String> = many
                    .iter()
                    .map(|at| (text[..*at].matches('\n').count() + 1).to_string())
                    .collect();
                return Err(format!(
                    "edit {} is ambiguous: its SEARCH lines (starting `{first_line}`) occur {} times, at lines {}; include more lines so they match one place",
                    i + 1,
                    many.len(),
                    lines.join(", ")
                ));
            }
        }
    }
    Ok(text)
}

/// The source with right-aligned line numbers, as the prompts show it for edits.
pub fn numbered(source: &str) -> String {
    let width = source.lines().count().max(1).to_string().len();
    source
        .lines()
        .enumerate()
        .map(|(i, l)| format!("{:>width$}| {l}\n", i + 1))
        .collect()
}

/// Every strategy block of a reply, in order (a population reply holds several).
pub fn strategies(text: &str) -> Vec<StrategyNote> {
    let Some(fence) = FENCE.as_ref() else {
        return Vec::new();
    };
    fence
        .captures_iter(text)
        .filter(|c| {
            let tag = c.get(1).map_or("", |m| m.as_str()).to_ascii_lowercase();
            let body = c.get(2).map_or("", |m| m.as_str());
            tag == "strategy" || tag == "json" && body.contains("\"change\"")
        })
        .filter_map(|c| parse_strategy(c.get(2).map_or("", |m| m.as_str())))
        .filter(|s| !s.change.trim().is_empty())
        .collect()
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

    const BASE: &str = "#include \"cutesmith_abi.h\"\nint a = 1;\nint b = 2;\nint a = 1;\nextern \"C\" int cutesmith_launch() { return 0; }\n";

    #[test]
    fn edits_apply_in_order_exactly() {
        let text = "```strategy\nchange: b to 3, drop the include\n```\n```edit\n<<<<<<< SEARCH\nint b = 2;\n=======\nint b = 3;\nint c = 4;\n>>>>>>> REPLACE\n```\nand\n```edit\n<<<<<<< SEARCH\nint b = 3;\nint c = 4;\n=======\nint b = 5;\n>>>>>>> REPLACE\n<<<<<<< SEARCH\n#include \"cutesmith_abi.h\"\n=======\n>>>>>>> REPLACE\n```\n";
        let p = parse(text);
        assert!(p.code.is_none() && p.missing().is_none(), "{p:?}");
        assert_eq!(p.edits.len(), 3);
        let out = apply_edits(BASE, &p.edits).unwrap();
        assert_eq!(
            out,
            "int a = 1;\nint b = 5;\nint a = 1;\nextern \"C\" int cutesmith_launch() { return 0; }\n"
        );
    }

    #[test]
    fn a_missing_or_ambiguous_anchor_is_named_never_guessed() {
        let edit = |s: &str| Edit {
            search: s.into(),
            replace: "x".into(),
        };
        let e = apply_edits(BASE, &[edit("int b = 2;"), edit("int a = 1;")]).unwrap_err();
        assert!(
            e.contains("edit 2 is ambiguous") && e.contains("2 times, at lines 2, 4"),
            "{e}"
        );
        let e = apply_edits(BASE, &[edit("int b  = 2;")]).unwrap_err();
        assert!(
            e.contains("edit 1 does not apply") && e.contains("`int b  = 2;`"),
            "{e}"
        );
        // Part of a line is not a line.
        let e = apply_edits(BASE, &[edit("b = 2;")]).unwrap_err();
        assert!(e.contains("edit 1 does not apply"), "{e}");
    }

    #[test]
    fn a_malformed_edit_block_asks_for_repair() {
        let p = parse("```edit\n<<<<<<< SEARCH\nint b = 2;\n>>>>>>> REPLACE\n```\n");
        let why = p.missing().unwrap();
        assert!(
            why.contains("edit block 1") && why.contains("not closed"),
            "{why}"
        );
        let p = parse("```edit\n12| int b = 2;\n```\n");
        assert!(p.missing().unwrap().contains("outside a pair"));
        // A whole file wins over edits in the same reply.
        let p = parse(&format!("```edit\nnonsense\n```\n```cuda\n{KERNEL}```\n"));
        assert!(p.missing().is_none() && p.code.is_some());
    }

    #[test]
    fn numbered_source_aligns_the_numbers() {
        let src = (1..=10).map(|i| format!("l{i}\n")).collect::<String>();
        let n = numbered(&src);
        assert!(n.starts_with(" 1| l1\n") && n.ends_with("10| l10\n"), "{n}");
    }

    #[test]
    fn the_longest_kernel_block_wins() {
        let long = format!("{KERNEL}// more\n// more\n");
        let p = parse(&format!("```cpp\n{KERNEL}```\n```cuda\n{long}```\n"));
        assert_eq!(p.code.as_deref(), Some(long.as_str()));
    }
}
