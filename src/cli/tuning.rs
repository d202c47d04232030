//! `cutesmith tuning show|export|import`: the tuning database (see [`crate::tuning`]).

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::EXIT_OK;
use crate::error::{Error, Result};
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
    /// Add the rows of a JSON-lines FILE (from `export`); rows already present are skipped.
    Import { file: PathBuf },
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
        TuningAction::Import { file } => {
            let rows = read_rows(&file)?;
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

/// The rows of a JSON-lines export; a bad line is an error naming the file and the line,
/// and nothing is imported then.
fn read_rows(file: &Path) -> Result<Vec<Record>> {
    let text = std::fs::read_to_string(file).map_err(|source| Error::Io {
        path: file.to_path_buf(),
        source,
    })?;
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
