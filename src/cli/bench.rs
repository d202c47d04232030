//! `cutesmith bench SUITE`: the built-in provider over a suite of workloads, with a table
//! (workload, best strategy, its time, the vendor library's time measured in the same
//! worker, speedup, fraction of the copy bandwidth and of the roofline floor) written as
//! Markdown and JSON under `bench/`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::provider::builtin::{self, SearchOptions, SearchOutcome};
use crate::toolchain::cache::CompileCache;
use crate::toolchain::Toolchain;
use crate::spec::{Family, Workload};

/// A suite file (`workloads/suites/*.toml`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteSpec {
    pub description: String,
    pub workloads: Vec<String>,
    #[serde(default)]
    pub max_candidates: Option<usize>,
    #[serde(default)]
    pub seeds: Option<u64>,
    /// `cutesmith run SUITE`: "builtin" or "model" (default: the model when one is
    /// configured, else the built-in provider).
    #[serde(default)]
    pub provider: Option<String>,
    /// `cutesmith run SUITE`: optimization rounds per workload.
    #[serde(default)]
    pub rounds: Option<u32>,
    /// `cutesmith run SUITE`: wall-clock seconds per workload.
    #[serde(default)]
    pub max_time_s: Option<f64>,
    /// `cutesmith run SUITE`: model tokens per workload.
    #[serde(default)]
    pub max_tokens: Option<u64>,
}

/// Finds a suite by name (in `workloads/suites/`) or path.
pub fn load_suite(dir: &Path, name: &str) -> Result<(String, SuiteSpec)> {
    let path = if name.ends_with(".toml") {
        PathBuf::from(name)
    } else {
        dir.join("suites").join(format!("{name}.toml"))
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        let avail: Vec<String> = std::fs::read_dir(dir.join("suites"))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        e.path()
                            .file_stem()
                            .map(|s| s.to_string_lossy().into_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        Error::Usage(format!(
            "suite {}: {e}; available: {}",
            path.display(),
            avail.join(", ")
        ))
    })?;
    let spec: SuiteSpec = toml::from_str(&text).map_err(|e| Error::Format {
        context: path.display().to_string(),
        message: e.to_string(),
    })?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "suite".into());
    Ok((stem, spec))
}

/// One row of the bench table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRow {
    pub workload: String,
    pub shape: String,
    pub best: Option<String>,
    pub best_us: Option<f64>,
    /// (baseline name, median us, baseline / best)
    pub baselines: Vec<(String, f64, Option<f64>)>,
    pub roofline_fraction: Option<f64>,
    pub tflops: Option<f64>,
    pub tb_per_s: Option<f64>,
    /// The workload's goal, and whether the best candidate met it.
    pub goal: String,
    pub met: bool,
    pub search: SearchOutcome,
}

/// The whole bench result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    pub suite: String,
    pub description: String,
    pub device: String,
    pub date: String,
    pub rows: Vec<BenchRow>,
}

/// Runs the suite; returns the report (also written under `out_dir`). `max_candidates`
/// overrides the suite's own setting.
pub fn run(
    tc: &Toolchain,
    workloads_dir: &Path,
    suite: &str,
    out_dir: &Path,
    mut opts: SearchOptions,
    max_candidates: Option<usize>,
) -> Result<BenchReport> {
    let (name, spec) = load_suite(workloads_dir, suite)?;
    // The command line wins over the suite file, which wins over the default.
    if let Some(n) = max_candidates.or(spec.max_candidates) {
        opts.max_candidates = n;
    }
    if let Some(s) = spec.seeds {
        opts.seeds = s;
    }
    let first = crate::eval::gpu::devices()?.into_iter().next();
    let device = first.as_ref().map(|d| d.name.clone()).unwrap_or_default();
    // Compile for the GPU that will run the candidates.
    if let Some(d) = &first {
        opts.arch = d.arch();
    }
    let cache = CompileCache::default_location();
    // Compile every candidate of every workload first, all cores at once; the searches
    // below then find them in the cache.
    let workloads = spec
        .workloads
        .iter()
        .map(|n| Workload::find(workloads_dir, n).map_err(Error::from))
        .collect::<Result<Vec<_>>>()?;
    let mut requests = Vec::new();
    for w in &workloads {
        for (_, req) in builtin::plan(w, &opts)? {
            if !requests
                .iter()
                .any(|r: &crate::toolchain::compile::CompileRequest| {
                    r.source == req.source && r.options.defines == req.options.defines
                })
            {
                requests.push(req);
            }
        }
    }
    eprintln!(
        "compiling {} distinct kernel instances, {} at a time",
        requests.len(),
        opts.jobs
    );
    let done = std::sync::atomic::AtomicUsize::new(0);
    let _ = crate::toolchain::compile::compile_many(tc, &cache, &requests, opts.jobs, &|i, r| {
        let n = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let status = match r {
            Ok(o) if o.ok() => "ok",
            Ok(_) => "FAILED",
            Err(_) => "error",
        };
        eprintln!(
            "  compiled {n}/{}: {} {} {status}",
            requests.len(),
            requests[i].file_name,
            requests[i].options.defines.join(" ")
        );
    });
    let mut rows = Vec::new();
    for (i, wname) in spec.workloads.iter().enumerate() {
        let w = Workload::find(workloads_dir, wname)?;
        eprintln!("[{}/{}] {}", i + 1, spec.workloads.len(), w.name());
        let outcome = builtin::search(tc, &cache, &w, &opts, &|m| eprintln!("{m}"))?;
        rows.push(row(&w, outcome));
        let report = BenchReport {
            suite: name.clone(),
            description: spec.description.clone(),
            device: device.clone(),
            date: crate::clock::today(),
            rows: rows.clone(),
        };
        // Written after every workload: a crash loses at most the one in flight.
        write(out_dir, &report)?;
    }
    Ok(BenchReport {
        suite: name,
        description: spec.description,
        device,
        date: crate::clock::today(),
        rows,
    })
}

fn row(w: &Workload, search: SearchOutcome) -> BenchRow {
    let best = search.best();
    let timing = best.and_then(|b| b.timing.clone());
    let best_us = best.and_then(|b| b.median_us());
    let baselines: Vec<(String, f64, Option<f64>)> = timing
        .as_ref()
        .map(|t| {
            t.baselines
                .iter()
                .map(|b| (b.name.clone(), b.stats.median_us, b.speedup))
                .collect()
        })
        .unwrap_or_default();
    let (goal, met) = goal(w, best_us, &baselines);
    BenchRow {
        workload: w.name().to_string(),
        shape: w.headline().to_string(),
        best: best.map(|b| b.strategy.label()),
        best_us,
        baselines,
        roofline_fraction: timing.as_ref().and_then(|t| t.roofline_fraction),
        tflops: timing.as_ref().and_then(|t| t.achieved_tflops),
        tb_per_s: timing.as_ref().and_then(|t| t.achieved_tb_per_s),
        goal,
        met,
        search,
    }
}

/// The goal of a workload in words and whether it was met: GEMMs against the spec's
/// speedup target over cuBLAS; memory-bound ops against 90% (softmax 80%) of the copy.
pub fn goal(
    w: &Workload,
    best_us: Option<f64>,
    baselines: &[(String, f64, Option<f64>)],
) -> (String, bool) {
    let Some(_) = best_us else {
        return ("no correct candidate".into(), false);
    };
    let speedup_of = |name: &str| {
        baselines
            .iter()
            .find(|b| b.0.starts_with(name))
            .and_then(|b| b.2)
    };
    match w.family() {
        Family::Gemm | Family::GemmBiasAct => {
            let t = w.target();
            let want = t.min_speedup;
            let vs = t.speedup_vs.name();
            let got = speedup_of(vs);
            (format!("{want:.2}x {vs}"), got.is_some_and(|g| g >= want))
        }
        Family::Activation | Family::Softmax => {
            let want = if w.family() == Family::Softmax {
                0.8
            } else {
                0.9
            };
            let got = speedup_of("copy");
            (
                format!("{:.0}% of copy", want * 100.0),
                got.is_some_and(|g| g >= want),
            )
        }
    }
}

/// Writes `<suite>.md` and `<suite>.json` into `dir`.
pub fn write(dir: &Path, r: &BenchReport) -> Result<()> {
    std::fs::create_dir_all(dir).at(dir)?;
    let json = serde_json::to_string_pretty(r).map_err(|e| Error::Format {
        context: "bench report".into(),
        message: e.to_string(),
    })?;
    let jp = dir.join(format!("{}.json", r.suite));
    std::fs::write(&jp, json).at(&jp)?;
    let mp = dir.join(format!("{}.md", r.suite));
    std::fs::write(&mp, markdown(r)).at(&mp)?;
    Ok(())
}

/// The Markdown table.
pub fn markdown(r: &BenchReport) -> String {
    let mut s = format!(
        "# cutesmith bench `{}` on {} ({})\n\n{}\n\nEach row: the built-in provider's fastest correct \
         strategy, timed in the same worker process as the vendor library (interleaved, L2 \
         flushed, median of 30). Speedup = library time / best time; for memory-bound ops the \
         `copy` column is the fraction of a device-to-device copy of the same bytes.\n\n",
        r.suite, r.device, r.date, r.description
    );
    s.push_str("| workload | shape | best strategy | best us | vendor us (speedup) | copy us (fraction) | TFLOP/s | TB/s | % roofline | goal | met |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for row in &r.rows {
        let vendor: Vec<String> = row
            .baselines
            .iter()
            .filter(|b| b.0 != "copy")
            .map(|b| {
                format!(
                    "{} {:.1} ({})",
                    b.0.split(' ').next().unwrap_or(""),
                    b.1,
                    b.2.map(|x| format!("{x:.2}x")).unwrap_or_default()
                )
            })
            .collect();
        let copy = row
            .baselines
            .iter()
            .find(|b| b.0 == "copy")
            .map(|b| {
                format!(
                    "{:.1} ({})",
                    b.1,
                    b.2.map(|x| format!("{:.0}%", x * 100.0))
                        .unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "-".into());
        let f =
            |x: Option<f64>, d: usize| x.map(|v| format!("{v:.d$}")).unwrap_or_else(|| "-".into());
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.workload,
            row.shape,
            row.best.clone().unwrap_or_else(|| "none correct".into()),
            f(row.best_us, 2),
            if vendor.is_empty() {
                "-".into()
            } else {
                vendor.join("; ")
            },
            copy,
            f(row.tflops, 1),
            f(row.tb_per_s, 2),
            f(row.roofline_fraction.map(|x| x * 100.0), 0),
            row.goal,
            if row.met { "yes" } else { "NO" }
        ));
    }
    s.push_str("\n## Every candidate\n\n| workload | strategy | outcome | us |\n| --- | --- | --- | --- |\n");
    for row in &r.rows {
        for t in &row.search.tried {
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                row.workload,
                t.strategy.label(),
                t.outcome,
                t.median_us()
                    .map(|v| format!("{v:.2}"))
                    .unwrap_or_else(|| "-".into())
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workloads_dir() -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/workloads"))
    }

    #[test]
    fn every_shipped_suite_names_existing_workloads_with_candidates() {
        let dir = workloads_dir();
        let mut n = 0;
        for entry in std::fs::read_dir(dir.join("suites")).unwrap().flatten() {
            let stem = entry
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let (_, spec) = load_suite(&dir, &stem).unwrap();
            assert!(!spec.workloads.is_empty(), "{stem}");
            for w in &spec.workloads {
                let wl = Workload::find(&dir, w).unwrap_or_else(|e| panic!("{stem}: {e}"));
                assert!(
                    !crate::strategy::candidates(&wl).is_empty(),
                    "{stem}: no candidate for {w}"
                );
            }
            n += 1;
        }
        assert!(n >= 4);
    }

    #[test]
    fn a_missing_suite_lists_the_available_ones() {
        let e = load_suite(&workloads_dir(), "nope")
            .unwrap_err()
            .to_string();
        assert!(e.contains("available:") && e.contains("gemm"), "{e}");
    }

    #[test]
    fn goals_follow_the_family() {
        let dir = workloads_dir();
        let gemm = Workload::find(&dir, "gemm_bf16_4096").unwrap();
        let b = vec![("cublas".to_string(), 100.0, Some(1.05))];
        assert_eq!(
            goal(&gemm, Some(95.0), &b),
            ("1.00x cublas".to_string(), true)
        );
        let slow = vec![("cublas".to_string(), 100.0, Some(0.98))];
        assert!(!goal(&gemm, Some(102.0), &slow).1);
        let sm = Workload::find(&dir, "softmax_bf16_4096x65536").unwrap();
        let copy = vec![("copy".to_string(), 100.0, Some(0.85))];
        assert_eq!(
            goal(&sm, Some(118.0), &copy),
            ("80% of copy".to_string(), true)
        );
        let act = Workload::find(&dir, "act_relu_bf16").unwrap();
        assert!(!goal(&act, Some(118.0), &copy).1, "activations need 90%");
        assert!(!goal(&act, None, &copy).1);
    }
}
