//! nvcc diagnostics: parsing compiler output into (file, line, severity, message) and
//! condensing CuTe template backtraces to what a person or a model needs.
//!
//! One nvcc run prints diagnostics from several programs, each in its own format:
//! the EDG front end (`file(LINE): error: msg`, continued by indented lines, a source
//! excerpt with a caret and a "detected during:" instantiation backtrace), the host
//! compiler (gcc's `file:line:col: error: msg`, with "In instantiation of" / "required
//! from" context *before* the error), ptxas (`ptxas error   : ...`), the linkers (nvlink,
//! ld, collect2) and the driver itself (`nvcc fatal   : ...`). [`parse`] reads them all
//! in log order; [`condense`] makes a bounded text of them; [`primary_location`] names the
//! user line to fix. Pure text processing: nothing here spawns a process.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// How bad a diagnostic is. `Fatal` stops the tool that printed it (EDG's "catastrophic
/// error", gcc's "fatal error", `ptxas fatal`, `nvcc fatal`); it counts as an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Remark,
    Fatal,
    Note,
}

impl Severity {
    /// True for the severities that make a compile fail.
    pub fn is_error(self) -> bool {
        matches!(self, Severity::Error | Severity::Fatal)
    }

    fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Remark => "remark",
            Severity::Fatal => "fatal",
            Severity::Note => "note",
        }
    }
}

/// Which program printed a diagnostic: it decides the format and who can act on it
/// (a front-end error is in C++ source, a ptxas error in generated PTX or resources).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// nvcc's EDG front end (cudafe++/cicc): `file(LINE): error: msg`.
    Frontend,
    /// The host compiler (gcc/g++): `file:line:col: error: msg`.
    HostCompiler,
    /// The PTX assembler: `ptxas error   : ...`, `ptxas FILE, line N; error   : ...`.
    Ptxas,
    /// nvlink, ld or collect2.
    Linker,
    /// nvcc itself and its other helpers (`nvcc fatal   : ...`, `fatbinary fatal ...`).
    Driver,
}

impl Origin {
    fn tool(self) -> &'static str {
        match self {
            Origin::Frontend | Origin::Driver => "nvcc",
            Origin::HostCompiler => "host compiler",
            Origin::Ptxas => "ptxas",
            Origin::Linker => "linker",
        }
    }
}

/// One step of a template instantiation backtrace, innermost first: `what` was
/// instantiated (or required) at `file:line`. The outermost frames usually lie in the
/// user's file, which is where a CuTe error has to be fixed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// The file holding the line that caused this instantiation; empty if not printed.
    pub file: String,
    pub line: Option<u32>,
    /// E.g. `instantiation of "void f<T>(T) [with T=int]"`.
    pub what: String,
}

/// One diagnostic with its location, full message and backtrace, so callers can map it
/// back to a source line without reading the raw log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// Source (or PTX) file as printed; empty when the tool named none (driver, ptxas
    /// resource errors, linker).
    pub file: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub severity: Severity,
    /// The message; EDG's indented continuation lines (e.g. "argument types are: ...")
    /// are joined with "; ".
    pub message: String,
    /// Instantiation backtrace, innermost first.
    pub instantiation: Vec<Frame>,
    pub origin: Origin,
    /// The source excerpt and caret line the compiler printed, if any.
    pub snippet: Option<String>,
    /// The front end's diagnostic number (e.g. `177-D`), usable with `-diag-suppress`.
    pub code: Option<String>,
}

impl Diagnostic {
    fn new(origin: Origin, severity: Severity, message: &str) -> Diagnostic {
        Diagnostic {
            file: String::new(),
            line: None,
            column: None,
            severity,
            message: message.trim().to_string(),
            instantiation: Vec::new(),
            origin,
            snippet: None,
            code: None,
        }
    }
}

fn regex(pattern: &str) -> Option<Regex> {
    Regex::new(pattern).ok()
}

/// EDG: `file(12): error #20-D: message` (also warning, remark, note, catastrophic error).
static EDG_HEADER: LazyLock<Option<Regex>> = LazyLock::new(|| {
    regex(
        r"^(.+?)\((\d+)\): (catastrophic error|internal error|fatal error|error|warning|remark|note)(?: #([0-9A-Za-z-]+))?: (.*)$",
    )
});
/// gcc: `file:12:3: error: message`.
static GCC_HEADER: LazyLock<Option<Regex>> = LazyLock::new(|| {
    regex(
        r"^([^\s:][^:]*?):(\d+):(?:(\d+):)? (fatal error|error|warning|note|sorry, unimplemented): (.*)$",
    )
});
/// gcc backtrace step: `file:12:3:   required from here`.
static GCC_FRAME: LazyLock<Option<Regex>> = LazyLock::new(|| {
    regex(
        r"^([^\s:][^:]*?):(\d+):(?:\d+:)?\s+((?:recursively )?required (?:from|by) .*|in .*expansion of .*)$",
    )
});
/// gcc context header: `file: In instantiation of 'X':`, `file: In function 'f':`.
static GCC_CONTEXT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    regex(
        r"^([^\s:][^:]*?): (?:(In instantiation of|In substitution of) (.*)|In [a-z ]+ .*|At global scope):$",
    )
});
/// gcc source excerpt: `   17 |   return x;` or `      |   ^~~`.
static GCC_SNIPPET: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"^\s*(?:\d+\s*)?\|"));
/// `ptxas /tmp/x.ptx, line 28; error   : message`.
static PTXAS_LOCATED: LazyLock<Option<Regex>> =
    LazyLock::new(|| regex(r"^ptxas (.+?), line (\d+); (error|warning|fatal)\s*: (.*)$"));
/// `nvcc fatal   : msg`, `ptxas error   : msg`, `nvlink error   : msg`, ...
static TOOL_LINE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    regex(
        r"^(nvcc|ptxas|nvlink|fatbinary|cicc|cudafe\+\+|nvdisasm|cuobjdump|nvprune) (error|warning|fatal|info)\s*: (.*)$",
    )
});
/// `/usr/bin/ld: cannot find -lfoo`, `collect2: error: ld returned 1 exit status`.
static LD_LINE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    regex(r"^(?:\S*/)?(?:ld(?:\.\w+)?|collect2)(?:\.exe)?: (?:(error|warning|fatal error): )?(.*)$")
});
/// `foo.o:(.text+0x1c): undefined reference to 'bar'` or `foo.cpp:(.text+0x1c): ...`.
static LD_REF: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"^([^\s:]+):\(([^)]*)\): (.*)$"));
/// Terminal colour codes (gcc with `-fdiagnostics-color=always`).
static ANSI: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"\x1b\[[0-9;]*[A-Za-z]"));
/// A mangled C++ name inside a message.
static MANGLED: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"\b_Z[A-Za-z0-9_]+"));

fn caps<'t>(re: &LazyLock<Option<Regex>>, line: &'t str) -> Option<regex::Captures<'t>> {
    re.as_ref().and_then(|r| r.captures(line))
}

fn severity_of(word: &str) -> Severity {
    match word {
        "warning" => Severity::Warning,
        "remark" => Severity::Remark,
        "note" => Severity::Note,
        "catastrophic error" | "internal error" | "fatal error" | "fatal" => Severity::Fatal,
        _ => Severity::Error,
    }
}

fn num(m: Option<regex::Match<'_>>) -> Option<u32> {
    m.and_then(|m| m.as_str().parse().ok())
}

/// The EDG diagnostic whose indented continuation lines are being read.
struct EdgBlock {
    idx: usize,
    body: Vec<String>,
    in_backtrace: bool,
}

/// Parses every diagnostic in a compiler log, in the order printed.
///
/// Lines that are no diagnostic (ptxas info, summaries like "1 error detected", the
/// command line) are skipped. Notes stay separate diagnostics; an EDG backtrace printed
/// after notes belongs to the error before them.
pub fn parse(log: &str) -> Vec<Diagnostic> {
    let mut out: Vec<Diagnostic> = Vec::new();
    let mut edg: Option<EdgBlock> = None;
    // Index of the last front-end diagnostic that is not a note.
    let mut edg_primary: Option<usize> = None;
    // gcc prints instantiation context before the error it explains.
    let mut gcc_frames: Vec<Frame> = Vec::new();
    let mut gcc_pending: Option<String> = None;
    // The last gcc diagnostic, to which source-excerpt lines belong.
    let mut gcc_last: Option<usize> = None;

    for raw in log.lines() {
        let plain;
        let line = match (raw.contains('\x1b'), ANSI.as_ref()) {
            (true, Some(re)) => {
                plain = re.replace_all(raw, "");
                plain.trim_end()
            }
            _ => raw.trim_end(),
        };

        // EDG continuation: indented lines after an EDG header.
        if let Some(block) = edg.as_mut() {
            if line.is_empty() {
                finish_edg(&mut out, edg.take());
                continue;
            }
            if line.starts_with(' ') || line.starts_with('\t') {
                let t = line.trim();
                let target = match out.get(block.idx) {
                    Some(d) if d.severity == Severity::Note => edg_primary.unwrap_or(block.idx),
                    _ => block.idx,
                };
                let diag_file = out.get(target).map(|d| d.file.clone()).unwrap_or_default();
                if t == "detected during:" {
                    block.in_backtrace = true;
                } else if let Some(rest) = t.strip_prefix("detected during ") {
                    block.in_backtrace = true;
                    if let Some(d) = out.get_mut(target) {
                        d.instantiation.push(edg_frame(rest, &diag_file));
                    }
                } else if block.in_backtrace {
                    // "[ 12 instantiation contexts not shown ]" carries no location.
                    if !(t.starts_with('[') && t.ends_with(']')) {
                        if let Some(d) = out.get_mut(target) {
                            d.instantiation.push(edg_frame(t, &diag_file));
                        }
                    }
                } else {
                    block.body.push(line.to_string());
                }
                continue;
            }
            finish_edg(&mut out, edg.take());
        }
        if line.is_empty() {
            continue;
        }

        if let Some(c) = caps(&EDG_HEADER, line) {
            let severity = severity_of(&c[3]);
            let mut d = Diagnostic::new(Origin::Frontend, severity, &c[5]);
            d.file = c[1].to_string();
            d.line = num(c.get(2));
            d.code = c.get(4).map(|m| m.as_str().to_string());
            out.push(d);
            let idx = out.len() - 1;
            if severity != Severity::Note {
                edg_primary = Some(idx);
            }
            edg = Some(EdgBlock {
                idx,
                body: Vec::new(),
                in_backtrace: false,
            });
            gcc_last = None;
            continue;
        }
        if let Some(c) = caps(&PTXAS_LOCATED, line) {
            let mut d = Diagnostic::new(Origin::Ptxas, severity_of(&c[3]), &c[4]);
            d.file = c[1].to_string();
            d.line = num(c.get(2));
            out.push(d);
            gcc_last = None;
            continue;
        }
        if let Some(c) = caps(&TOOL_LINE, line) {
            if &c[2] != "info" {
                let origin = match &c[1] {
                    "ptxas" => Origin::Ptxas,
                    "nvlink" => Origin::Linker,
                    _ => Origin::Driver,
                };
                out.push(Diagnostic::new(origin, severity_of(&c[2]), &c[3]));
            }
            gcc_last = None;
            continue;
        }
        if let Some(c) = caps(&GCC_CONTEXT, line) {
            gcc_frames.clear();
            gcc_pending = match (c.get(2), c.get(3)) {
                (Some(kind), Some(what)) => {
                    let kind = kind.as_str().trim_start_matches("In ");
                    Some(format!("{kind} {}", what.as_str()))
                }
                _ => None,
            };
            gcc_last = None;
            continue;
        }
        if let Some(c) = caps(&GCC_FRAME, line) {
            let text = c[3].to_string();
            let what = match gcc_pending.take() {
                Some(p) => format!("{p} {text}"),
                None => text.clone(),
            };
            gcc_frames.push(Frame {
                file: c[1].to_string(),
                line: num(c.get(2)),
                what,
            });
            if let Some(from) = text.strip_prefix("required from ") {
                if from != "here" {
                    gcc_pending = Some(format!("instantiation of {from}"));
                }
            }
            continue;
        }
        if let Some(c) = caps(&GCC_HEADER, line) {
            let severity = severity_of(&c[4]);
            let mut d = Diagnostic::new(Origin::HostCompiler, severity, &c[5]);
            d.file = c[1].to_string();
            d.line = num(c.get(2));
            d.column = num(c.get(3));
            if severity != Severity::Note {
                d.instantiation = std::mem::take(&mut gcc_frames);
                gcc_pending = None;
            }
            out.push(d);
            gcc_last = Some(out.len() - 1);
            continue;
        }
        if let Some(idx) = gcc_last {
            if caps(&GCC_SNIPPET, line).is_some() {
                if let Some(d) = out.get_mut(idx) {
                    let s = d.snippet.get_or_insert_with(String::new);
                    if !s.is_empty() {
                        s.push('\n');
                    }
                    s.push_str(line);
                }
                continue;
            }
        }
        if let Some(c) = caps(&LD_LINE, line) {
            let msg = &c[2];
            // "/usr/bin/ld: x.o: in function `f':" only introduces the next line.
            if !msg.ends_with("':") {
                let severity = c
                    .get(1)
                    .map_or(Severity::Error, |m| severity_of(m.as_str()));
                out.push(Diagnostic::new(Origin::Linker, severity, msg));
            }
            gcc_last = None;
            continue;
        }
        if let Some(c) = caps(&LD_REF, line) {
            let mut d = Diagnostic::new(Origin::Linker, Severity::Error, &c[3]);
            d.file = c[1].to_string();
            out.push(d);
            gcc_last = None;
            continue;
        }
        gcc_last = None;
    }
    finish_edg(&mut out, edg.take());
    out
}

/// `instantiation of "X" at line 12 of file.cu`; a missing "of FILE" means the file of
/// the diagnostic itself.
fn edg_frame(text: &str, diag_file: &str) -> Frame {
    if let Some(pos) = text.rfind(" at line ") {
        let rest = &text[pos + " at line ".len()..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(line) = digits.parse::<u32>() {
            let after = &rest[digits.len()..];
            let file = after
                .strip_prefix(" of ")
                .map_or_else(|| diag_file.to_string(), |f| f.trim().to_string());
            return Frame {
                file,
                line: Some(line),
                what: text[..pos].trim().to_string(),
            };
        }
    }
    Frame {
        file: String::new(),
        line: None,
        what: text.trim().to_string(),
    }
}

fn is_caret_line(s: &str) -> bool {
    let t = s.trim();
    t.contains('^') && t.chars().all(|c| c == '^' || c == '~' || c == ' ')
}

/// Splits an EDG block's indented body into message continuation and snippet.
fn finish_edg(out: &mut [Diagnostic], block: Option<EdgBlock>) {
    let Some(block) = block else { return };
    let Some(d) = out.get_mut(block.idx) else {
        return;
    };
    let mut body = block.body;
    if body.len() >= 2 && body.last().is_some_and(|l| is_caret_line(l)) {
        let caret = body.pop().unwrap_or_default();
        let source = body.pop().unwrap_or_default();
        d.snippet = Some(format!("{source}\n{caret}"));
    }
    for l in body {
        let t = l.trim();
        if !t.is_empty() {
            d.message.push_str("; ");
            d.message.push_str(t);
        }
    }
}

/// True when `file` names one of `user_files` (equal, or one is a path suffix of the other).
fn is_user_file(file: &str, user_files: &[&str]) -> bool {
    !file.is_empty()
        && user_files.iter().any(|u| {
            !u.is_empty()
                && (file == *u
                    || file.ends_with(&format!("/{u}"))
                    || u.ends_with(&format!("/{file}")))
        })
}

/// The user-file location most likely to need the fix: for the first error that maps to
/// user code, its own location if it lies in a user file, else the innermost
/// instantiation frame in a user file (for an error deep inside CuTe, the user's call).
pub fn primary_location(diags: &[Diagnostic], user_files: &[&str]) -> Option<(String, u32)> {
    for d in diags.iter().filter(|d| d.severity.is_error()) {
        if let (true, Some(line)) = (is_user_file(&d.file, user_files), d.line) {
            return Some((d.file.clone(), line));
        }
        if let Some(f) = first_user_frame(d, user_files) {
            return Some((f.1.file.clone(), f.1.line.unwrap_or(0)));
        }
    }
    None
}

fn first_user_frame<'d>(d: &'d Diagnostic, user_files: &[&str]) -> Option<(usize, &'d Frame)> {
    d.instantiation
        .iter()
        .enumerate()
        .find(|(_, f)| f.line.is_some() && is_user_file(&f.file, user_files))
}

/// A header path shortened to the part a reader recognises: `.../include/cute/layout.hpp`
/// becomes `cute/layout.hpp`.
fn display_path(file: &str) -> String {
    for marker in ["/cute/", "/cutlass/", "/cub/", "/thrust/", "/cuda/std/"] {
        if let Some(pos) = file.rfind(marker) {
            return file[pos + 1..].to_string();
        }
    }
    file.to_string()
}

/// Where a file lives, for "N frames in cute/ omitted".
fn area(file: &str, user_files: &[&str]) -> String {
    if is_user_file(file, user_files) {
        return "your code".into();
    }
    let shown = display_path(file);
    match shown.split_once('/') {
        Some((top, _)) if shown != file => format!("{top}/"),
        _ => "other files".into(),
    }
}

/// Shortens C++ type names for reading: drops `cute::`/`cutlass::` qualifiers, collapses
/// template argument lists nested deeper than one level to `<…>` (short ones, up to 24
/// characters such as `tuple<C<16>, C<16>>`, stay), and caps the result at `max_chars`
/// characters.
pub fn shorten_cpp(text: &str, max_chars: usize) -> String {
    let stripped = text.replace("cute::", "").replace("cutlass::", "");
    let chars: Vec<char> = stripped.chars().collect();
    let mut out = String::with_capacity(stripped.len());
    let mut depth = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let prev = if i > 0 { chars[i - 1] } else { ' ' };
        if c == '<' && (prev.is_alphanumeric() || prev == '_') {
            if depth >= 1 {
                if let Some(close) = matching_angle(&chars, i) {
                    let inner: String = chars[i + 1..close].iter().collect();
                    if inner.chars().count() <= 24 {
                        out.push('<');
                        out.push_str(&inner);
                        out.push('>');
                    } else {
                        out.push_str("<…>");
                    }
                    i = close + 1;
                    continue;
                }
            }
            depth += 1;
        } else if c == '>' && prev != '-' && depth > 0 {
            depth -= 1;
        }
        out.push(c);
        i += 1;
    }
    cap_chars(&out, max_chars)
}

/// Index of the `>` closing the template list opened at `open`.
fn matching_angle(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        let prev = if j > 0 { chars[j - 1] } else { ' ' };
        if c == '<' && (j == open || prev.is_alphanumeric() || prev == '_') {
            depth += 1;
        } else if c == '>' && prev != '-' {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return Some(j);
            }
        }
    }
    None
}

fn cap_chars(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max_chars.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A message for display: mangled names demangled, types shortened, capped at ~400 chars.
fn display_message(msg: &str) -> String {
    let demangled = match MANGLED.as_ref() {
        Some(re) => re
            .replace_all(msg, |c: &regex::Captures<'_>| {
                crate::toolchain::ptxas::demangle(&c[0], true).unwrap_or_else(|| c[0].to_string())
            })
            .into_owned(),
        None => msg.to_string(),
    };
    shorten_cpp(&demangled, 400)
}

fn location(d: &Diagnostic) -> String {
    match (d.file.is_empty(), d.line) {
        (true, _) => d.origin.tool().to_string(),
        (false, Some(l)) => format!("{}:{l}", display_path(&d.file)),
        (false, None) => display_path(&d.file),
    }
}

/// A frame's `what` for display: `instantiation of "X"` becomes `X`, types shortened.
fn frame_what(f: &Frame, max_chars: usize) -> String {
    let what = match f.what.strip_prefix("instantiation of ") {
        Some(rest) => rest.replace('"', ""),
        None => f.what.clone(),
    };
    shorten_cpp(&what, max_chars)
}

fn frame_location(f: &Frame) -> String {
    match f.line {
        Some(l) => format!("{}:{l}", display_path(&f.file)),
        None => display_path(&f.file),
    }
}

/// The header line of a diagnostic: `file:line: error: message (+N similar)`.
fn header(d: &Diagnostic, similar: usize) -> String {
    let code = d
        .code
        .as_ref()
        .map(|c| format!(" #{c}"))
        .unwrap_or_default();
    let more = if similar > 0 {
        format!(" (+{similar} similar)")
    } else {
        String::new()
    };
    format!(
        "{}: {}{code}: {}{more}",
        location(d),
        d.severity.as_str(),
        display_message(&d.message)
    )
}

/// "in your code at FILE:LINE (instantiated from ...)" for a diagnostic outside the
/// user's files whose backtrace reaches them.
fn promoted_line(d: &Diagnostic, user_files: &[&str]) -> Option<(usize, String)> {
    if is_user_file(&d.file, user_files) {
        return None;
    }
    let (k, f) = first_user_frame(d, user_files)?;
    let via = match d.instantiation.get(k + 1) {
        Some(outer) if outer.line.is_some() => format!(
            "instantiated from {}: {}",
            frame_location(outer),
            frame_what(outer, 200)
        ),
        Some(outer) => format!("instantiated from {}", frame_what(outer, 200)),
        None => format!("instantiating {}", frame_what(f, 200)),
    };
    Some((
        k,
        format!("  in your code at {} ({via})", frame_location(f)),
    ))
}

/// Full rendering of one error: header, source line, promoted user frame, a short
/// backtrace with its long middle omitted.
fn render_full(d: &Diagnostic, similar: usize, user_files: &[&str]) -> String {
    let mut lines = vec![header(d, similar)];
    if let Some(src) = d.snippet.as_deref().and_then(|s| s.lines().next()) {
        let src = src.trim();
        if !src.is_empty() {
            lines.push(format!("    {}", cap_chars(src, 160)));
        }
    }
    let promoted = promoted_line(d, user_files);
    let mut shown: Vec<usize> = Vec::new();
    if let Some((k, text)) = &promoted {
        lines.push(text.clone());
        shown.push(*k);
        shown.push(k + 1);
    }
    let mut user_shown = 0;
    let mut omitted: BTreeMap<String, usize> = BTreeMap::new();
    for (i, f) in d.instantiation.iter().enumerate() {
        if shown.contains(&i) {
            continue;
        }
        let user = is_user_file(&f.file, user_files);
        if (i == 0 && promoted.as_ref().is_none_or(|(k, _)| *k != 0)) || (user && user_shown < 2) {
            if user {
                user_shown += 1;
            }
            lines.push(format!(
                "  at {}: {}",
                frame_location(f),
                frame_what(f, 160)
            ));
        } else {
            *omitted.entry(area(&f.file, user_files)).or_default() += 1;
        }
    }
    for (where_, n) in omitted {
        let s = if n == 1 { "" } else { "s" };
        lines.push(format!("  ... {n} frame{s} in {where_} omitted"));
    }
    lines.join("\n")
}

/// One line (plus the promoted user frame) when the full rendering does not fit.
fn render_compact(d: &Diagnostic, similar: usize, user_files: &[&str]) -> String {
    let mut s = cap_chars(&header(d, similar), 240);
    if let Some((_, p)) = promoted_line(d, user_files) {
        s.push('\n');
        s.push_str(&cap_chars(&p, 200));
    }
    s
}

/// Groups identical diagnostics (same severity, file, line and message), keeping
/// first-seen order; the count is of the repeats.
fn dedupe<'d>(diags: impl Iterator<Item = &'d Diagnostic>) -> Vec<(&'d Diagnostic, usize)> {
    let mut groups: Vec<(&Diagnostic, usize)> = Vec::new();
    let mut index: HashMap<(Severity, &str, Option<u32>, &str), usize> = HashMap::new();
    for d in diags {
        let key = (d.severity, d.file.as_str(), d.line, d.message.as_str());
        match index.get(&key) {
            Some(&i) => {
                if let Some(g) = groups.get_mut(i) {
                    g.1 += 1;
                }
            }
            None => {
                index.insert(key, groups.len());
                groups.push((d, 0));
            }
        }
    }
    groups
}

/// A text of at most `max_bytes` for a person or a model: errors first (identical ones
/// merged), each with the user line that instantiated it when the error lies inside
/// CuTe/CUTLASS, type names shortened and backtraces cut; warnings only if room
/// remains; a closing count line. The caller keeps the full log.
pub fn condense(diags: &[Diagnostic], user_files: &[&str], max_bytes: usize) -> String {
    let errors: Vec<&Diagnostic> = diags.iter().filter(|d| d.severity.is_error()).collect();
    let warnings: Vec<&Diagnostic> = diags
        .iter()
        .filter(|d| matches!(d.severity, Severity::Warning | Severity::Remark))
        .collect();
    let error_groups = dedupe(errors.iter().copied());
    let warning_groups = dedupe(warnings.iter().copied());

    // Reserve room for the closing line at its longest.
    let budget = max_bytes.saturating_sub(120);
    let mut used = 0usize;
    let cost = |text: &str| text.len() + 1;

    // Every error gets at least its header line before any gets details, except the
    // first, which is most often the cause of the rest.
    let mut shown: Vec<Option<String>> = Vec::with_capacity(error_groups.len());
    for (i, (d, similar)) in error_groups.iter().enumerate() {
        let mut text = render_compact(d, *similar, user_files);
        if i == 0 {
            let full = render_full(d, *similar, user_files);
            if used + cost(&full) <= budget {
                text = full;
            }
        }
        if used + cost(&text) <= budget {
            used += cost(&text);
            shown.push(Some(text));
        } else {
            shown.push(None);
        }
    }
    for (slot, (d, similar)) in shown.iter_mut().zip(&error_groups).skip(1) {
        let Some(compact) = slot.as_ref() else {
            continue;
        };
        let full = render_full(d, *similar, user_files);
        let extra = full.len().saturating_sub(compact.len());
        if full.len() > compact.len() && used + extra <= budget {
            used += extra;
            *slot = Some(full);
        }
    }
    let errors_hidden: usize = shown
        .iter()
        .zip(&error_groups)
        .filter(|(slot, _)| slot.is_none())
        .map(|(_, (_, similar))| 1 + similar)
        .sum();
    let mut blocks: Vec<String> = shown.into_iter().flatten().collect();

    let mut warnings_hidden = 0usize;
    for (d, similar) in &warning_groups {
        let text = render_compact(d, *similar, user_files);
        if used + cost(&text) <= budget {
            used += cost(&text);
            blocks.push(text);
        } else {
            warnings_hidden += 1 + similar;
        }
    }

    let plural = |n: usize, word: &str| {
        if n == 1 {
            format!("{n} {word}")
        } else {
            format!("{n} {word}s")
        }
    };
    let hidden = match (errors_hidden, warnings_hidden) {
        (0, 0) => String::new(),
        (e, 0) => format!("{} not shown; ", plural(e, "error")),
        (0, w) => format!("{} not shown; ", plural(w, "warning")),
        (e, w) => format!(
            "{} and {} not shown; ",
            plural(e, "error"),
            plural(w, "warning")
        ),
    };
    let footer = format!(
        "{}, {} ({hidden}full log kept)",
        plural(errors.len(), "error"),
        plural(warnings.len(), "warning")
    );
    blocks.push(footer);
    let text = blocks.join("\n");
    truncate_bytes(&text, max_bytes)
}

/// Cuts `s` to at most `max` bytes on a character boundary.
fn truncate_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUTE_ERR: &str = parser_fixture!("cute_err.log");

    fn count(d: &[Diagnostic], s: Severity) -> usize {
        d.iter().filter(|x| x.severity == s).count()
    }

    #[test]
    fn cute_error_backtraces() {
        let d = parse(CUTE_ERR);
        assert_eq!(count(&d, Severity::Error), 8);
        assert_eq!(count(&d, Severity::Note), 14);
        assert!(d.iter().all(|x| x.origin == Origin::Frontend));

        let first = &d[0];
        assert!(first.file.ends_with("/include/cute/atom/copy_atom.hpp"));
        assert_eq!(first.line, Some(111));
        assert_eq!(first.column, None);
        assert!(first
            .message
            .starts_with("static assertion failed with \"CopyAtom: Src/Dst"));
        assert!(first.snippet.as_deref().is_some_and(|s| s
            .contains("static_assert(dependent_false<SEngine>,")
            && s.ends_with('^')));
        let frames = &first.instantiation;
        assert_eq!(frames.len(), 7);
        assert!(frames[0].file.ends_with("cute/algorithm/copy.hpp"));
        assert_eq!(frames[0].line, Some(196));
        // "at line 109" without a file: the diagnostic's own file.
        assert_eq!(frames[2].file, first.file);
        assert_eq!(frames[2].line, Some(109));
        assert_eq!(
            (frames[5].file.as_str(), frames[5].line),
            ("cute_err.cu", Some(16))
        );
        assert!(frames[5]
            .what
            .starts_with("instantiation of \"void cute::copy("));
        assert_eq!(
            (frames[6].file.as_str(), frames[6].line),
            ("cute_err.cu", Some(22))
        );

        // Continuation lines join the message; the backtrace after the notes belongs to
        // the error, not to the last note.
        let make_layout = d
            .iter()
            .find(|x| {
                x.message
                    .starts_with("no instance of overloaded function \"cute::make_layout\"")
            })
            .unwrap();
        assert_eq!(make_layout.line, Some(743));
        assert!(make_layout
            .message
            .contains("argument list; argument types are: (cute::Layout<"));
        assert_eq!(make_layout.instantiation.len(), 8);
        let note = d.iter().find(|x| x.severity == Severity::Note).unwrap();
        assert_eq!(note.code.as_deref(), Some("3327-D"));
        assert!(note.instantiation.is_empty());

        let last = d.last().unwrap();
        assert_eq!((last.file.as_str(), last.line), ("cute_err.cu", Some(17)));
        assert_eq!(last.message, "cannot deduce class template arguments");
        assert_eq!(last.instantiation.len(), 1);
        assert_eq!(
            (
                last.instantiation[0].file.as_str(),
                last.instantiation[0].line
            ),
            ("cute_err.cu", Some(22))
        );

        assert_eq!(
            primary_location(&d, &["cute_err.cu"]),
            Some(("cute_err.cu".into(), 16))
        );
        assert_eq!(
            primary_location(&d, &["/home/u/k/cute_err.cu"]),
            Some(("cute_err.cu".into(), 16))
        );
        assert_eq!(primary_location(&d, &["other.cu"]), None);
    }

    #[test]
    fn cute_error_condensed() {
        let d = parse(CUTE_ERR);
        let c = condense(&d, &["cute_err.cu"], 4096);
        assert!(c.len() <= 4096, "{} bytes", c.len());
        assert!(c.starts_with("cute/atom/copy_atom.hpp:111: error: static assertion failed"));
        assert!(c.contains("in your code at cute_err.cu:16 (instantiated from cute_err.cu:22"));
        assert!(c.contains("cute_err.cu:17: error: cannot deduce class template arguments"));
        assert!(c.contains("frames in cute/ omitted"));
        assert!(!c.contains("cute::"));
        assert!(!c.contains("note"));
        assert!(c
            .trim_end()
            .ends_with("8 errors, 0 warnings (full log kept)"));
        for max in [200, 600, 1500] {
            let small = condense(&d, &["cute_err.cu"], max);
            assert!(small.len() <= max);
            assert!(small.contains("8 errors"), "{small}");
        }
        let small = condense(&d, &["cute_err.cu"], 600);
        assert!(small.contains("cute_err.cu:16"), "{small}");
    }

    #[test]
    fn user_template_error() {
        let d = parse(parser_fixture!("fe_tmpl.log"));
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].file.as_str(), d[0].line), ("fe_tmpl.cu", Some(4)));
        let lines: Vec<_> = d[0]
            .instantiation
            .iter()
            .map(|f| (f.file.as_str(), f.line))
            .collect();
        assert_eq!(lines, [("fe_tmpl.cu", Some(10)), ("fe_tmpl.cu", Some(16))]);
        assert_eq!(
            primary_location(&d, &["fe_tmpl.cu"]),
            Some(("fe_tmpl.cu".into(), 4))
        );
        let c = condense(&d, &["fe_tmpl.cu"], 4096);
        assert!(c.contains("fe_tmpl.cu:4: error: static assertion failed with \"tile size must be a multiple of 16\""));
        assert!(c.contains("  at fe_tmpl.cu:10: class Tile<N> [with N=24]\n"));
        assert!(c.contains("  at fe_tmpl.cu:16: void scale<N>(float *, float) [with N=24]\n"));
    }

    #[test]
    fn frontend_error_and_warning() {
        let d = parse(parser_fixture!("fe_err.log"));
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[0].file.as_str(), d[0].line, d[0].severity),
            ("fe_err.cu", Some(16), Severity::Error)
        );
        assert_eq!(d[0].message, "identifier \"missing_scale\" is undefined");
        assert_eq!(
            d[0].snippet.as_deref(),
            Some("    p[threadIdx.x] = missing_scale * 2.0f;\n                     ^")
        );
        assert_eq!((d[1].line, d[1].severity), (Some(22), Severity::Warning));
        assert_eq!(d[1].code.as_deref(), Some("2361-D"));
        let c = condense(&d, &["fe_err.cu"], 4096);
        assert!(c.starts_with("fe_err.cu:16: error: identifier \"missing_scale\" is undefined\n"));
        assert!(c.contains("fe_err.cu:22: warning #2361-D: invalid narrowing conversion"));
        assert!(c.ends_with("1 error, 1 warning (full log kept)"));

        let ok = parse(parser_fixture!("plain_kernels.log"));
        assert_eq!(ok.len(), 1);
        assert_eq!((ok[0].line, ok[0].severity), (Some(9), Severity::Warning));
        assert_eq!(ok[0].code.as_deref(), Some("177-D"));
        assert_eq!(primary_location(&ok, &["plain_kernels.cu"]), None);
    }

    #[test]
    fn host_compiler() {
        let d = parse(parser_fixture!("host_err.log"));
        assert_eq!(d.len(), 2);
        assert!(d.iter().all(|x| x.origin == Origin::HostCompiler));
        assert_eq!(
            (d[0].line, d[0].column, d[0].severity),
            (Some(7), Some(2), Severity::Warning)
        );
        assert_eq!(
            (d[1].line, d[1].column, d[1].severity),
            (Some(8), Some(2), Severity::Error)
        );
        assert_eq!(
            d[1].message,
            "#error \"host pass: CUTESMITH_TILE must be defined\""
        );
        assert!(d[1]
            .snippet
            .as_deref()
            .is_some_and(|s| s.starts_with("    8 | #error")));

        let d = parse(parser_fixture!("host_tmpl.log"));
        let sev: Vec<_> = d.iter().map(|x| (x.line, x.severity)).collect();
        assert_eq!(
            sev,
            [
                (Some(17), Severity::Error),
                (Some(16), Severity::Warning),
                (Some(8), Severity::Error)
            ]
        );
        assert!(d[0].instantiation.is_empty());
        assert_eq!(d[2].column, Some(47));
        assert_eq!(d[2].instantiation.len(), 1);
        assert_eq!(
            (
                d[2].instantiation[0].file.as_str(),
                d[2].instantiation[0].line
            ),
            ("host_tmpl.cpp", Some(15))
        );
        assert!(d[2].instantiation[0]
            .what
            .starts_with("instantiation of ‘int Launcher<T>::tiles() const"));
        assert_eq!(
            primary_location(&d, &["host_tmpl.cpp"]),
            Some(("host_tmpl.cpp".into(), 17))
        );
    }

    #[test]
    fn ptxas_linker_driver() {
        let d = parse(parser_fixture!("ptxas_smem.log"));
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].origin, d[0].severity, d[0].file.as_str()),
            (Origin::Ptxas, Severity::Error, "")
        );
        let c = condense(&d, &[], 4096);
        assert!(c.starts_with("ptxas: error: Entry function 'too_much_smem(float*)' uses too much shared data (0x40000 bytes, 0x38c00 max)"), "{c}");

        let d = parse(parser_fixture!("ptxas_asm.log"));
        assert_eq!(d.len(), 3);
        assert!(d[0].file.ends_with("_ptxas_asm.ptx"));
        assert_eq!((d[0].line, d[0].severity), (Some(28), Severity::Error));
        assert_eq!(d[1].message, "Not a name of any known instruction: 'bogus'");
        assert_eq!(
            (d[2].severity, d[2].message.as_str()),
            (Severity::Fatal, "Ptx assembly aborted due to errors")
        );

        let d = parse(parser_fixture!("ptxas_warn.log"));
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].origin, d[0].severity),
            (Origin::Ptxas, Severity::Warning)
        );

        let d = parse(parser_fixture!("nvlink_err.log"));
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].origin, d[0].severity),
            (Origin::Linker, Severity::Error)
        );
        assert!(condense(&d, &[], 4096).contains("Undefined reference to 'scale_factor(int)'"));

        let d = parse(parser_fixture!("ld_missing_lib.log"));
        assert_eq!(d.len(), 3);
        assert!(d
            .iter()
            .all(|x| x.origin == Origin::Linker && x.severity == Severity::Error));
        assert_eq!(d[2].message, "ld returned 1 exit status");

        let d = parse(parser_fixture!("driver_err.log"));
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].origin, d[0].severity),
            (Origin::Driver, Severity::Fatal)
        );
        assert_eq!(d[0].message, "Unsupported gpu architecture 'compute_999'");
        assert_eq!(condense(&d, &[], 4096), "nvcc: fatal: Unsupported gpu architecture 'compute_999'\n1 error, 0 warnings (full log kept)");
    }

    #[test]
    fn dedupes_identical_errors() {
        let d = parse(parser_fixture!("fe_tmpl.log"));
        let three: Vec<Diagnostic> = d.iter().cycle().take(3).cloned().collect();
        let c = condense(&three, &["fe_tmpl.cu"], 4096);
        assert!(c.contains("(+2 similar)"));
        assert_eq!(c.matches("static assertion failed").count(), 1);
        assert!(c.ends_with("3 errors, 0 warnings (full log kept)"));
    }

    #[test]
    fn colour_codes_are_ignored() {
        let log = "\x1b[01m\x1b[Khost.cpp:3:5:\x1b[m\x1b[K \x1b[01;31m\x1b[Kerror: \x1b[m\x1b[Kbad thing\n";
        let d = parse(log);
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].file.as_str(), d[0].line, d[0].column),
            ("host.cpp", Some(3), Some(5))
        );
        assert_eq!(d[0].message, "bad thing");
    }

    #[test]
    fn shortens_types() {
        let s = "void f(cute::Tensor<cute::ViewEngine<cute::gmem_ptr<const float *>>, cute::Layout<cute::tuple<cute::C<64>, cute::C<64>>, cute::tuple<cute::_1, cute::C<64>>>>) [with T=cute::tuple<cute::C<16>, cute::C<16>>, F=lambda [](const auto &)->auto]";
        assert_eq!(
            shorten_cpp(s, 400),
            "void f(Tensor<ViewEngine<gmem_ptr<const float *>>, Layout<…>>) [with T=tuple<C<16>, C<16>>, F=lambda [](const auto &)->auto]"
        );
        assert_eq!(shorten_cpp("a < b && c > d", 400), "a < b && c > d");
        assert_eq!(shorten_cpp(&"x".repeat(500), 400).chars().count(), 400);
    }

    #[test]
    fn serializes_lowercase() {
        assert_eq!(
            serde_json::to_string(&Severity::Fatal).unwrap(),
            "\"fatal\""
        );
        assert_eq!(
            serde_json::to_string(&Origin::HostCompiler).unwrap(),
            "\"host_compiler\""
        );
        let d = parse(parser_fixture!("fe_tmpl.log"));
        let back: Vec<Diagnostic> =
            serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
    }

    /// The broken Hopper GEMM fixture of `tests/fixtures/nvcc`: the real nvcc log.
    #[test]
    fn broken_hopper_gemm_fixture() {
        let log = include_str!("../../tests/fixtures/nvcc/broken_cute.log");
        let src = include_str!("../../tests/fixtures/kernels/broken_cute.cu");
        let broken = src.lines().position(|l| l.contains("// BROKEN:")).unwrap() as u32 + 1;
        let d = parse(log);
        assert!(d.iter().any(|x| x.severity.is_error()));
        let (file, line) = primary_location(&d, &["broken_cute.cu"]).unwrap();
        assert!(file.ends_with("broken_cute.cu"));
        assert_eq!(line, broken);
        let c = condense(&d, &["broken_cute.cu"], 4096);
        assert!(c.len() <= 4096);
        assert!(c.contains(&format!("broken_cute.cu:{broken}")));
        assert!(!c.contains("from : "));

        let log = include_str!("../../tests/fixtures/nvcc/simple_error.log");
        let d = parse(log);
        let errors: Vec<_> = d.iter().filter(|x| x.severity.is_error()).collect();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].file.ends_with("simple_error.cu"));
        assert!(primary_location(&d, &["simple_error.cu"]).is_some());
    }
}
