//! compute-sanitizer: running a worker under memcheck / racecheck / synccheck and turning
//! its report into findings (kind, kernel, source file and line, access) that a person or
//! a model can act on. Kernels are built with `-lineinfo`, so findings name source lines.

use serde::{Deserialize, Serialize};

/// Which compute-sanitizer tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    Memcheck,
    Racecheck,
    Synccheck,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Memcheck => "memcheck",
            Tool::Racecheck => "racecheck",
            Tool::Synccheck => "synccheck",
        }
    }
}

/// One problem the sanitizer reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The headline, e.g. "Invalid __global__ read of size 2 bytes" or
    /// "Race reported between Write access ... and Read access ...".
    pub what: String,
    /// The kernel (function name as the sanitizer printed it, shortened).
    pub kernel: Option<String>,
    /// Source location of the faulting access (needs -lineinfo).
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Further detail lines (thread/block, address, the other access of a race).
    pub detail: Vec<String>,
    /// How many times the sanitizer reported this same access (other threads, blocks).
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

/// Adds a finding, folding it into an earlier one at the same place.
fn push_finding(list: &mut Vec<Finding>, f: Finding) {
    match list
        .iter_mut()
        .find(|g| g.what == f.what && g.file == f.file && g.line == f.line)
    {
        Some(g) => g.count += 1,
        None => list.push(f),
    }
}

/// The parsed report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SanitizerReport {
    pub tool: Option<Tool>,
    pub findings: Vec<Finding>,
    /// From "ERROR SUMMARY: N errors" (racecheck counts hazards there).
    pub error_summary: Option<u64>,
    /// The sanitizer's own lines (`=========`), at most 64 KiB, kept for the session files.
    #[serde(default)]
    pub raw: String,
}

impl SanitizerReport {
    /// A short text for reports and prompts (at most ~1500 bytes).
    pub fn summary(&self) -> String {
        let mut s = format!(
            "compute-sanitizer {}: {} finding(s){}\n",
            self.tool.map_or("?", |t| t.name()),
            self.findings.len(),
            self.error_summary
                .map(|n| format!(", error summary {n}"))
                .unwrap_or_default()
        );
        for f in self.findings.iter().take(5) {
            let at = match (&f.file, f.line) {
                (Some(file), Some(line)) => format!(" at {file}:{line}"),
                _ => String::new(),
            };
            let times = if f.count > 1 {
                format!(" ({} times)", f.count)
            } else {
                String::new()
            };
            s.push_str(&format!("- {}{at}{times}\n", f.what));
            for d in f.detail.iter().take(2) {
                s.push_str(&format!("    {d}\n"));
            }
            if s.len() > 1400 {
                break;
            }
        }
        s
    }
}

/// `name(args)+0x1a0 in /path/file.cu:57` -> (kernel, file, line)
fn location(text: &str) -> (Option<String>, Option<String>, Option<u32>) {
    let (head, tail) = match text.rsplit_once(" in ") {
        Some((h, t)) => (h, Some(t)),
        None => (text, None),
    };
    let kernel = head
        .trim()
        .trim_start_matches("at ")
        .split('(')
        .next()
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty());
    let (file, line) = match tail.and_then(|t| t.trim().rsplit_once(':')) {
        Some((f, l)) => {
            let digits: String = l.chars().take_while(|c| c.is_ascii_digit()).collect();
            let file = f.rsplit('/').next().unwrap_or(f).to_string();
            (Some(file), digits.parse().ok())
        }
        None => (None, None),
    };
    (kernel, file, line)
}

/// Parses compute-sanitizer's text output (the lines starting with `=========`).
pub fn parse(output: &str, tool: Option<Tool>) -> SanitizerReport {
    let mut report = SanitizerReport {
        tool,
        ..Default::default()
    };
    let mut current: Option<Finding> = None;
    for raw in output.lines() {
        let Some(body) = raw.strip_prefix("=========") else {
            continue;
        };
        let indented = body.starts_with("    ") || body.starts_with('\t');
        let text = body.trim();
        if text.is_empty() {
            continue;
        }
        if let Some(rest) = text.strip_prefix("ERROR SUMMARY:") {
            report.error_summary = rest.split_whitespace().next().and_then(|n| n.parse().ok());
            continue;
        }
        if text.contains("SUMMARY:") {
            continue;
        }
        let headline = !indented
            && (text.starts_with("Invalid ")
                || text.starts_with("Error:")
                || text.starts_with("Warning:")
                || text.starts_with("Race reported")
                || text.starts_with("Barrier error")
                || text.starts_with("Program hit")
                || text.contains("hazard"));
        if headline {
            if let Some(f) = current.take() {
                push_finding(&mut report.findings, f);
            }
            let what = text.trim_start_matches("Error: ").to_string();
            let mut f = Finding {
                what,
                kernel: None,
                file: None,
                line: None,
                detail: Vec::new(),
                count: 1,
            };
            // racecheck puts the first access's location on the headline itself.
            if let Some(idx) = text.find(" at ") {
                let (k, file, line) = location(&text[idx + 4..]);
                f.kernel = k;
                f.file = file;
                f.line = line;
            }
            current = Some(f);
            continue;
        }
        let Some(f) = current.as_mut() else { continue };
        if f.line.is_none() && text.starts_with("at ") {
            let (k, file, line) = location(text);
            f.kernel = k.or(f.kernel.take());
            f.file = file;
            f.line = line;
        } else if !text.starts_with("Saved host backtrace")
            && !text.starts_with("Host Frame")
            && f.detail.len() < 6
        {
            f.detail.push(text.to_string());
        }
    }
    if let Some(f) = current.take() {
        push_finding(&mut report.findings, f);
    }
    let mut raw = String::new();
    for l in output.lines().filter(|l| l.starts_with("=========")) {
        if raw.len() + l.len() > 64 * 1024 {
            break;
        }
        raw.push_str(l);
        raw.push('\n');
    }
    report.raw = raw;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMCHECK: &str = "========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 2 bytes
=========     at gemm_tn_kernel(const __nv_bfloat16 *, int)+0x1a0 in /tmp/cutesmith-nvcc-x/oob_read.cu:57
=========     by thread (31,0,0) in block (1,0,0)
=========     Address 0x7f2c40000000 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f2b6f] in libcuda.so.1
=========
========= ERROR SUMMARY: 1 error
";

    const RACECHECK: &str = "========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at gemm_tn_kernel(const float *)+0x450 in /x/race.cu:61
=========     and Read access at gemm_tn_kernel(const float *)+0x6f0 in /x/race.cu:70 [16384 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
";

    #[test]
    fn memcheck_finding_names_the_line() {
        let r = parse(MEMCHECK, Some(Tool::Memcheck));
        assert_eq!(r.error_summary, Some(1));
        assert_eq!(r.findings.len(), 1);
        let f = &r.findings[0];
        assert_eq!(f.what, "Invalid __global__ read of size 2 bytes");
        assert_eq!(f.kernel.as_deref(), Some("gemm_tn_kernel"));
        assert_eq!(f.file.as_deref(), Some("oob_read.cu"));
        assert_eq!(f.line, Some(57));
        assert!(f.detail.iter().any(|d| d.contains("out of bounds")));
        assert!(r.summary().contains("oob_read.cu:57"));
    }

    #[test]
    fn racecheck_finding_names_the_line() {
        let r = parse(RACECHECK, Some(Tool::Racecheck));
        assert_eq!(r.findings.len(), 1);
        let f = &r.findings[0];
        assert!(f.what.starts_with("Race reported between Write access"));
        assert_eq!(f.file.as_deref(), Some("race.cu"));
        assert_eq!(f.line, Some(61));
        assert!(f.detail[0].contains("race.cu:70"));
    }

    /// Recorded on an H100 with compute-sanitizer 2025.3.1 on tests/fixtures/faults.
    #[test]
    fn recorded_memcheck_names_the_out_of_bounds_line() {
        let text = include_str!("../../tests/fixtures/sanitizer/memcheck_oob_read.txt");
        let r = parse(text, Some(Tool::Memcheck));
        assert!(!r.findings.is_empty());
        let f = &r.findings[0];
        assert_eq!(f.what, "Invalid __global__ read of size 2 bytes");
        assert_eq!(
            (f.file.as_deref(), f.line),
            (Some("oob_read.cu"), Some(103))
        );
        assert_eq!(f.kernel.as_deref(), Some("cs_gemm_tiled_kernel"));
        assert!(f.count > 1, "repeats are folded: {}", f.count);
        assert!(f.detail.iter().any(|d| d.contains("out of bounds")));
        assert!(r.summary().len() < 1600);
    }

    #[test]
    fn recorded_racecheck_names_the_racing_lines() {
        let text = include_str!("../../tests/fixtures/sanitizer/racecheck_race.txt");
        let r = parse(text, Some(Tool::Racecheck));
        assert!(!r.findings.is_empty());
        let f = &r.findings[0];
        assert!(f.what.starts_with("Race reported between Write access"));
        assert_eq!((f.file.as_deref(), f.line), (Some("race.cu"), Some(74)));
        assert!(f.detail.iter().any(|d| d.contains("race.cu:84")));
    }

    #[test]
    fn clean_output_has_no_findings() {
        let r = parse(
            "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n",
            None,
        );
        assert!(r.findings.is_empty());
        assert_eq!(r.error_summary, Some(0));
    }
}
