//! `cutesmith tuning show|export|import`: the tuning database (see [`crate::tuning`]).

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::bench::BenchReport;
use super::EXIT_OK;
use crate::error::{Error, Result};
use crate::spec::Workload;
use crate::tuning::{self, Record, TuningDb};

#[derive(Debug, Subcommand)]
pub enum TuningAction {
    /// Where the database is and what it holds: per workload class and GPU, the best
    /// strategy of each measured shape with its time and the vendor library's.
    Show {
        /// Only rows whose workload name contains this.
        #[arg(long)]
        workload: Option<String>,
    },
    /// Write every row to FILE as JSON lines (one evaluation a line).
    Export { file: PathBuf },
    /// Add the rows of FILE: a JSON-lines export (from `export`), or a bench report
    /// (`bench/<suite>.json` from `cutesmith bench`), whose every evaluated candidate
    /// becomes a row (its workloads are read from --workloads-dir for their class). Rows
    /// already present are skipped.
    Import {
        file: PathBuf,
        #[arg(long, default_value = "workloads")]
        workloads_dir: PathBuf,
    },
}

fn open() -> Result<TuningDb> {
    let path = tuning::default_path().ok_or_else(|| {
        Error::Usage(
            "the tuning database is off (CUTESMITH_TUNING_DB=off): unset it to use the default in the cache directory"
                .into(),
        )
    })?;
    TuningDb::open(&path)
}

pub fn cmd_tuning(action: TuningAction) -> Result<i32> {
    match action {
        TuningAction::Show { workload } => show(&open()?, workload.as_deref()),
        TuningAction::Export { file } => {
            let db = open()?;
            let rows = db.rows(None)?;
            let mut text = String::new();
            for r in &rows {
                let line = serde_json::to_string(r).map_err(|e| Error::Format {
                    context: "a tuning row".into(),
                    message: e.to_string(),
                })?;
                text.push_str(&line);
                text.push('\n');
            }
            std::fs::write(&file, text).map_err(|source| Error::Io {
                path: file.clone(),
                source,
            })?;
            println!("wrote {} rows to {}", rows.len(), file.display());
            Ok(EXIT_OK)
        }
        TuningAction::Import {
            file,
            workloads_dir,
        } => {
            let rows = read_rows(&file, &workloads_dir)?;
            let db = open()?;
            let added = db.import(&rows)?;
            println!(
                "{}: {} rows read, {added} added to {} ({} already there)",
                file.display(),
                rows.len(),
                db.path().display(),
                rows.len() - added
            );
            Ok(EXIT_OK)
        }
    }
}

/// The rows of a JSON-lines export, or of a bench report (one JSON object with `rows`);
/// a bad line is an error naming the file and the line, and nothing is imported then.
fn read_rows(file: &Path, workloads_dir: &Path) -> Result<Vec<Record>> {
    let text = std::fs::read_to_string(file).map_err(|source| Error::Io {
        path: file.to_path_buf(),
        source,
    })?;
    // A bench report is one JSON object with the suite's rows.
    let is_report = serde_json::from_str::<serde_json::Value>(&text)
        .is_ok_and(|v| v.get("rows").is_some() && v.get("suite").is_some());
    if is_report {
        let report: BenchReport = serde_json::from_str(&text).map_err(|e| Error::Format {
            context: file.display().to_string(),
            message: format!("{e}: not a report of `cutesmith bench`; nothing was imported"),
        })?;
        return bench_rows(&report, workloads_dir).map_err(|e| match e {
            Error::Usage(m) => {
                Error::Usage(format!("{}: {m}; nothing was imported", file.display()))
            }
            other => other,
        });
    }
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: Record = serde_json::from_str(line).map_err(|e| Error::Format {
            context: format!("{} line {}", file.display(), i + 1),
            message: format!("{e}: not a row of `cutesmith tuning export`; nothing was imported"),
        })?;
        rows.push(r);
    }
    Ok(rows)
}

/// Every candidate a bench report evaluated, as the rows its sessions would have added:
/// the workload's class from its spec in `workloads_dir`, the shape it was timed on, the
/// fastest vendor baseline of the same worker. The report's date stands for the time.
fn bench_rows(report: &BenchReport, workloads_dir: &Path) -> Result<Vec<Record>> {
    let at = crate::clock::days_of(&report.date)
        .map(|d| d * 86_400)
        .ok_or_else(|| {
            Error::Usage(format!(
                "its `date` is {:?}, not a YYYY-MM-DD day (the time its rows are recorded at)",
                report.date
            ))
        })?;
    let mut out = Vec::new();
    for row in &report.rows {
        let w = Workload::find(workloads_dir, &row.workload).map_err(|e| {
            Error::Usage(format!(
                "workload {} of the report: {e} (pass --workloads-dir where its spec is)",
                row.workload
            ))
        })?;
        for t in &row.search.tried {
            // Only what a GPU evaluated, as a session records it: a compile failure or a
            // version an interrupted run never evaluated says nothing of its speed.
            if matches!(
                t.outcome.as_str(),
                "compile failed" | "proposed" | "compiled"
            ) {
                continue;
            }
            let timing = t.timing.as_ref();
            let shape = timing.map_or(*w.headline(), |t| t.shape);
            out.push(Record {
                at,
                gpu: report.device.clone(),
                strategy: t.strategy.label(),
                provider: "builtin".into(),
                outcome: t.outcome.clone(),
                ..Record::timed(&w, shape, timing)
            });
        }
    }
    Ok(out)
}

/// GPU, workload class, workload name and shape (m, n, k, batch).
type GroupKey = (String, String, String, [u64; 4]);

fn show(db: &TuningDb, workload: Option<&str>) -> Result<i32> {
    let rows: Vec<Record> = db
        .rows(None)?
        .into_iter()
        .filter(|r| workload.is_none_or(|w| r.workload.contains(w)))
        .collect();
    println!(
        "tuning database {}: {} rows",
        db.path().display(),
        rows.len()
    );
    // The best correct row per (gpu, class, shape), and how many were evaluated there.
    let mut groups: std::collections::BTreeMap<GroupKey, (usize, Option<&Record>)> =
        std::collections::BTreeMap::new();
    for r in &rows {
        let e = groups
            .entry((
                r.gpu.clone(),
                r.class.clone(),
                r.workload.clone(),
                [r.m, r.n, r.k, r.batch],
            ))
            .or_insert((0, None));
        e.0 += 1;
        if r.outcome == "correct" && r.median_us.is_some() {
            let better = e.1.is_none_or(|b| r.median_us < b.median_us);
            if better {
                e.1 = Some(r);
            }
        }
    }
    for ((gpu, _class, name, [m, n, k, b]), (count, best)) in &groups {
        let shape = crate::spec::Shape {
            m: *m,
            n: *n,
            k: *k,
            batch: *b,
            dims: Default::default(),
        };
        match best {
            Some(r) => {
                let us = r.median_us.unwrap_or(f64::NAN);
                let vendor = match (&r.vendor, r.vendor_us) {
                    (Some(v), Some(vu)) => format!(", {v} {vu:.2} us ({:.2}x)", vu / us),
                    _ => String::new(),
                };
                println!(
                    "  {gpu} | {name} {shape}: {count} evaluated; best {} at {us:.2} us{vendor}",
                    r.strategy
                );
            }
            None => println!("  {gpu} | {name} {shape}: {count} evaluated, none correct"),
        }
    }
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(p: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
    }

    #[test]
    fn a_bench_report_imports_as_one_row_per_evaluated_candidate() {
        // The committed H100 llm run: 42 workloads, 122 candidates evaluated.
        let rows = read_rows(&repo("bench/llm-run2-h100.json"), &repo("workloads")).unwrap();
        assert_eq!(rows.len(), 122);
        assert!(rows.iter().all(|r| r.gpu == "NVIDIA H100 80GB HBM3"
            && r.class == "gemm|bf16>bf16|rowcolrow|none"
            && r.provider == "builtin"));
        let r = rows
            .iter()
            .find(|r| r.workload == "llm_qwen2_7b_qkv_m256" && r.strategy.contains("TILE_N=64 "))
            .or_else(|| rows.iter().find(|r| r.workload == "llm_qwen2_7b_qkv_m256"))
            .unwrap();
        assert_eq!((r.m, r.n, r.k, r.batch), (256, 4608, 3584, 1));
        assert_eq!(r.outcome, "correct");
        assert!(r.median_us.is_some_and(|us| us > 10.0) && r.vendor_us.is_some());
        assert_eq!(crate::clock::civil_date(r.at / 86_400), "2026-11-26");
        // A report naming a workload the directory lacks imports nothing and says where.
        let err = read_rows(&repo("bench/llm-run2-h100.json"), &repo("src")).unwrap_err();
        assert!(err.to_string().contains("--workloads-dir"), "{err}");
        // A malformed report is named as one.
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, r#"{"suite": "x", "rows": 3}"#).unwrap();
        let err = read_rows(&bad, &repo("workloads")).unwrap_err();
        assert!(
            err.to_string()
                .contains("not a report of `cutesmith bench`"),
            "{err}"
        );
    }
}
