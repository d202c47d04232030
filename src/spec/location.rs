//! toml errors turned into `field "x": what is wrong; allowed: ...` with the line, and
//! the line of a field for the rules' errors: a line-based look at a spec file.

use std::path::Path;

use std::collections::BTreeMap;

use super::error::WorkloadError;
use super::schema::{DType, Family};

// ---------------------------------------------------------------------------------
// toml errors -> `field "x": ...; allowed: ...`.

/// Rewrites a toml/serde error into `field "<toml path>": <what>; allowed: <values>`,
/// finding the field from the error's span (the table header above it and the key on
/// its line) and the line number from the span.
pub(super) fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> WorkloadError {
    // A missing root field comes with the empty span 0..0: no position, no table.
    let loc = e
        .span()
        .filter(|s| s.end > 0)
        .map(|s| locate(text, s.start));
    let line = loc.as_ref().map(|l| l.line);
    let msg = e.message().trim();

    let backticked = |s: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = s;
        while let Some(a) = rest.find('`') {
            let after = &rest[a + 1..];
            let Some(b) = after.find('`') else { break };
            out.push(after[..b].to_string());
            rest = &after[b + 1..];
        }
        out
    };
    let field_at = |leaf: Option<&str>| -> Option<String> {
        let loc = loc.as_ref()?;
        let mut f = match &loc.key {
            Some(k) => join_path(&loc.table, k),
            None => loc.table.clone(),
        };
        if let Some(leaf) = leaf {
            if f.rsplit('.').next() != Some(leaf) {
                f = join_path(&f, leaf);
            }
        }
        (!f.is_empty()).then_some(f)
    };

    let message = if let Some(rest) = msg.strip_prefix("unknown variant ") {
        let names = backticked(rest);
        let value = names.first().cloned().unwrap_or_default();
        let allowed = names.get(1..).unwrap_or_default().join(", ");
        let field = field_at(None).unwrap_or_else(|| "?".into());
        format!("field \"{field}\": unknown value \"{value}\"; allowed: {allowed}")
    } else if let Some(rest) = msg.strip_prefix("unknown field ") {
        let names = backticked(rest);
        let key = names.first().cloned().unwrap_or_default();
        let allowed = names.get(1..).unwrap_or_default().join(", ");
        let field = field_at(Some(&key)).unwrap_or(key);
        format!("field \"{field}\": unknown field; allowed: {allowed}")
    } else if let Some(rest) = msg.strip_prefix("missing field ") {
        let key = backticked(rest).first().cloned().unwrap_or_default();
        let table = loc.as_ref().map(|l| l.table.clone()).unwrap_or_default();
        let field = join_path(&table, &key);
        let allowed = match field.as_str() {
            "family" => Some(Family::ALL.map(Family::name).join(", ")),
            "dtype" => Some(DType::SPEC.map(DType::name).join(", ")),
            _ => None,
        };
        match allowed {
            Some(a) => format!("field \"{field}\": missing (required); allowed: {a}"),
            None => format!("field \"{field}\": missing (required)"),
        }
    } else if msg.starts_with("invalid type")
        || msg.starts_with("invalid value")
        || msg.starts_with("invalid length")
    {
        let plain = msg
            .replace("expected i64", "expected an integer")
            .replace("expected f32", "expected a number")
            .replace("expected f64", "expected a number")
            .replace("expected a sequence", "expected an array");
        match field_at(None) {
            Some(f) => format!("field \"{f}\": {plain}"),
            None => plain,
        }
    } else if msg == "duplicate key" {
        match field_at(None) {
            Some(f) => format!("field \"{f}\": set twice"),
            None => msg.to_string(),
        }
    } else {
        format!("invalid TOML: {msg}")
    };
    WorkloadError::Parse {
        path: path.to_path_buf(),
        line,
        message,
    }
}

/// Where an offset falls in a spec: its line, the TOML path of the table around it
/// (`layout`, `shapes[1]`) and the key being set there.
struct Location {
    line: usize,
    table: String,
    key: Option<String>,
}

fn join_path(table: &str, key: &str) -> String {
    match (table.is_empty(), key.is_empty()) {
        (true, _) => key.to_string(),
        (false, true) => table.to_string(),
        (false, false) => format!("{table}.{key}"),
    }
}

/// One line of a spec as [`scan`] sees it.
struct ScannedLine<'a> {
    text: &'a str,
    start: usize,
    table: String,
    /// The key set on this line, or the last one above it in the same table (for the
    /// continuation lines of a multi-line array).
    key: Option<String>,
    /// Whether this line is a table header or sets a key itself.
    defines: bool,
}

/// A line-based look at a spec: good enough for spec files (tables, arrays of tables,
/// `key = value`, dotted keys, one-line inline tables, multi-line arrays); the exact
/// grammar is toml's business.
fn scan(text: &str) -> Vec<ScannedLine<'_>> {
    let mut out = Vec::new();
    let mut table = String::new();
    let mut array_counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut key: Option<String> = None;
    let mut start = 0usize;
    for line in text.split_inclusive('\n') {
        let code = strip_comment(line).trim();
        let mut defines = true;
        if let Some(h) = code.strip_prefix("[[").and_then(|h| h.strip_suffix("]]")) {
            let h = unquote(h.trim());
            let n = array_counts.entry(h.clone()).or_insert(0);
            table = format!("{h}[{n}]");
            *n += 1;
            key = None;
        } else if let Some(h) = code.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            table = unquote(h.trim());
            key = None;
        } else if let Some(eq) = code.find('=') {
            key = Some(unquote(code[..eq].trim()));
        } else {
            defines = false;
        }
        out.push(ScannedLine {
            text: line,
            start,
            table: table.clone(),
            key: key.clone(),
            defines,
        });
        start += line.len();
    }
    out
}

/// The line, table and key at byte `offset` of `text`.
fn locate(text: &str, offset: usize) -> Location {
    let lines = scan(text);
    let Some(i) = lines
        .iter()
        .position(|l| offset < l.start + l.text.len())
        .or(lines.len().checked_sub(1))
    else {
        return Location {
            line: 1,
            table: String::new(),
            key: None,
        };
    };
    let l = &lines[i];
    let mut key = l.key.clone();
    // An inline array of tables on one line: `shapes = [{...}, {...}]`.
    if let (Some(k), Some(eq)) = (key.as_mut(), l.text.find('=')) {
        let col = offset.saturating_sub(l.start).min(l.text.len());
        if col > eq && l.text[eq..].trim_start_matches(['=', ' ']).starts_with('[') {
            let opened = l.text[eq..col].matches('{').count();
            if opened > 0 {
                *k = format!("{k}[{}]", opened - 1);
            }
        }
    }
    Location {
        line: i + 1,
        table: l.table.clone(),
        key,
    }
}

/// The 1-based line that sets `field` (a TOML path such as `shapes[2].k`), or failing
/// that the line of its closest enclosing table (`shapes[2]` when k is missing).
pub(super) fn line_of(text: &str, field: &str) -> Option<usize> {
    let lines = scan(text);
    let mut want = field;
    loop {
        let hit = lines.iter().position(|l| {
            l.defines
                && match &l.key {
                    Some(k) => join_path(&l.table, k) == want,
                    None => l.table == want,
                }
        });
        if let Some(i) = hit {
            return Some(i + 1);
        }
        // `shapes[2].k` -> `shapes[2]`; `shapes[2]` -> `shapes`; `layout.a` -> `layout`.
        want = match (want.rfind('.'), want.rfind('[')) {
            (Some(d), Some(b)) => &want[..d.max(b)],
            (Some(i), None) | (None, Some(i)) => &want[..i],
            (None, None) => return None,
        };
        if want.is_empty() {
            return None;
        }
    }
}

fn strip_comment(line: &str) -> &str {
    // Good enough for spec files: a '#' outside quotes starts a comment.
    let mut quote: Option<char> = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '#') => return &line[..i],
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    line
}

fn unquote(key: &str) -> String {
    key.split('.')
        .map(|part| part.trim().trim_matches(['"', '\'']))
        .collect::<Vec<_>>()
        .join(".")
}
