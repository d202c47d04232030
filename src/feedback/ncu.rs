//! Nsight Compute: the metrics asked for, the command line, and the CSV it prints turned
//! into a typed [`KernelProfile`] per kernel launch.
//!
//! `ncu --csv` prints one row per (launch, metric): `"ID","Process ID","Process Name",
//! "Host Name","Kernel Name",...,"Metric Name","Metric Unit","Metric Value"`, numbers
//! with thousands separators. Lines before the header (`==PROF==` notes, the program's
//! own output) are skipped. Columns are found by their header names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The small metric set: enough for a roofline position and the main limiter.
pub const METRICS_SMALL: &[&str] = &[
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_dynamic",
    "launch__shared_mem_per_block_static",
    "launch__block_size",
    "launch__grid_size",
    "l1tex__t_sector_hit_rate.pct",
    "lts__t_sector_hit_rate.pct",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "dram__bytes.sum",
    r"regex:sm__pipe_tensor_op_.*_cycles_active\.avg\.pct_of_peak_sustained_active",
    r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio",
];

/// The fuller set adds ncu's own sections (`--full`).
pub const SECTIONS_FULL: &[&str] = &[
    "SpeedOfLight",
    "MemoryWorkloadAnalysis",
    "ComputeWorkloadAnalysis",
    "Occupancy",
    "WarpStateStats",
    "LaunchStats",
    "SchedulerStats",
];

/// ncu's arguments (before the profiled program) for kernels whose mangled names are
/// `kernels` (empty: every kernel), writing CSV to `log`.
pub fn args(kernels: &[String], full: bool, log: &std::path::Path) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--csv".into(),
        "--clock-control".into(),
        "none".into(),
        "--target-processes".into(),
        "all".into(),
        "--log-file".into(),
        log.display().to_string(),
        "--metrics".into(),
        METRICS_SMALL.join(","),
    ];
    if full {
        for s in SECTIONS_FULL {
            a.push("--section".into());
            a.push((*s).into());
        }
    }
    if !kernels.is_empty() {
        a.push("--kernel-name-base".into());
        a.push("mangled".into());
        a.push("--kernel-name".into());
        let alts: Vec<String> = kernels.iter().map(|k| regex::escape(k)).collect();
        a.push(format!("regex:^({})$", alts.join("|")));
    }
    a
}

/// One metric value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub unit: String,
    pub value: f64,
}

/// Every metric of one kernel launch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelProfile {
    pub id: u32,
    pub kernel: String,
    pub metrics: BTreeMap<String, Metric>,
}

impl KernelProfile {
    pub fn get(&self, name: &str) -> Option<f64> {
        self.metrics.get(name).map(|m| m.value)
    }

    /// Duration in microseconds (ncu reports ns, us or ms).
    pub fn duration_us(&self) -> Option<f64> {
        let m = self.metrics.get("gpu__time_duration.sum")?;
        Some(match m.unit.as_str() {
            "nsecond" | "ns" => m.value / 1e3,
            "msecond" | "ms" => m.value * 1e3,
            "second" | "s" => m.value * 1e6,
            _ => m.value,
        })
    }

    /// Tensor pipe utilization: the largest of the tensor-pipe metrics present.
    pub fn tensor_pct(&self) -> Option<f64> {
        self.metrics
            .iter()
            .filter(|(k, _)| k.starts_with("sm__pipe_tensor_op_") && k.contains("pct_of_peak"))
            .map(|(_, m)| m.value)
            .reduce(f64::max)
    }

    /// Shared memory per block (static + dynamic), bytes.
    pub fn smem_bytes(&self) -> Option<f64> {
        let s = self.metrics.get("launch__shared_mem_per_block_static");
        let d = self.metrics.get("launch__shared_mem_per_block_dynamic");
        if s.is_none() && d.is_none() {
            return None;
        }
        let bytes = |m: Option<&Metric>| {
            m.map_or(0.0, |m| match m.unit.as_str() {
                "Kbyte" | "KB" => m.value * 1e3,
                "Mbyte" | "MB" => m.value * 1e6,
                "Kibyte" | "KiB" => m.value * 1024.0,
                _ => m.value,
            })
        };
        Some(bytes(s) + bytes(d))
    }

    /// The warp stall reasons, largest first: (reason, cycles per issued instruction).
    pub fn stalls(&self) -> Vec<(String, f64)> {
        let mut v: Vec<(String, f64)> = self
            .metrics
            .iter()
            .filter_map(|(k, m)| {
                let r = k
                    .strip_prefix("smsp__average_warps_issue_stalled_")?
                    .strip_suffix("_per_issue_active.ratio")?;
                Some((r.to_string(), m.value))
            })
            .filter(|(r, _)| r != "selected")
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }
}

/// Why the CSV could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses `ncu --csv` output into one profile per launch, in launch order.
pub fn parse_csv(text: &str) -> Result<Vec<KernelProfile>, ParseError> {
    let start = text
        .find("\"ID\",")
        .ok_or_else(|| ParseError("no ncu CSV header (\"ID\",...) in the output".into()))?;
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(&text.as_bytes()[start..]);
    let headers = rdr
        .headers()
        .map_err(|e| ParseError(format!("ncu CSV header: {e}")))?
        .clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| ParseError(format!("ncu CSV has no column {name:?}")))
    };
    let (c_id, c_kernel, c_name, c_unit, c_value) = (
        col("ID")?,
        col("Kernel Name")?,
        col("Metric Name")?,
        col("Metric Unit")?,
        col("Metric Value")?,
    );
    let mut out: Vec<KernelProfile> = Vec::new();
    for rec in rdr.records() {
        let Ok(rec) = rec else { continue };
        let Some(id) = rec.get(c_id).and_then(|s| s.trim().parse::<u32>().ok()) else {
            continue;
        };
        let name = rec.get(c_name).unwrap_or_default().to_string();
        let unit = rec.get(c_unit).unwrap_or_default().to_string();
        if out.last().is_none_or(|k| k.id != id) {
            out.push(KernelProfile {
                id,
                kernel: rec.get(c_kernel).unwrap_or_default().to_string(),
                metrics: BTreeMap::new(),
            });
        }
        let Some(value) = number(rec.get(c_value).unwrap_or_default()) else {
            continue;
        };
        if let Some(k) = out.last_mut() {
            k.metrics.insert(name, Metric { unit, value });
        }
    }
    if out.is_empty() {
        return Err(ParseError(
            "ncu profiled no kernel (did the filter match the kernel's name?)".into(),
        ));
    }
    Ok(out)
}

/// A number as ncu prints it: `1,234.5`, `12.3`, `n/a` (None).
fn number(s: &str) -> Option<f64> {
    let t: String = s.trim().chars().filter(|c| *c != ',').collect();
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rows_with_separators_and_skips_noise() {
        let text = "==PROF== Connected to process 1\nworker output\n\
\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n\
\"0\",\"7\",\"cutesmith\",\"h\",\"k1\",\"1\",\"13\",\"(256, 1, 1)\",\"(132, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"usecond\",\"1,234.50\"\n\
\"0\",\"7\",\"cutesmith\",\"h\",\"k1\",\"1\",\"13\",\"(256, 1, 1)\",\"(132, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio\",\"\",\"3.5\"\n\
\"0\",\"7\",\"cutesmith\",\"h\",\"k1\",\"1\",\"13\",\"(256, 1, 1)\",\"(132, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio\",\"\",\"0.5\"\n\
\"1\",\"7\",\"cutesmith\",\"h\",\"k2\",\"1\",\"13\",\"(128, 1, 1)\",\"(1, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"nsecond\",\"n/a\"\n";
        let p = parse_csv(text).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].kernel, "k1");
        assert_eq!(p[0].duration_us(), Some(1234.5));
        assert_eq!(p[0].stalls()[0], ("long_scoreboard".to_string(), 3.5));
        assert!(p[1].metrics.is_empty());
        assert!(parse_csv("no csv here").is_err());
    }

    #[test]
    fn the_kernel_filter_is_an_anchored_alternation() {
        let a = args(
            &["_Z1kv".into(), "_Z1j$v".into()],
            false,
            "/tmp/x.csv".as_ref(),
        );
        let i = a.iter().position(|x| x == "--kernel-name").unwrap();
        assert_eq!(a[i + 1], r"regex:^(_Z1kv|_Z1j\$v)$");
        assert!(a.contains(&"--clock-control".to_string()));
    }
}

/// Parsers against ncu CSV recorded on an H100 (`cutesmith profile --save-csv`,
/// tests/fixtures/ncu/, 2026-11-22).
#[cfg(test)]
mod recorded {
    use super::*;
    use crate::feedback::guidance;
    use crate::feedback::roofline::{Bound, Placement};

    fn load(name: &str) -> Vec<KernelProfile> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/ncu")
            .join(name);
        parse_csv(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    #[test]
    fn the_tutorial_grade_gemm_starves_its_tensor_cores() {
        let p = load("raw_cute_gemm.csv");
        assert_eq!(p.len(), 1, "one launch of the kernel's own function");
        let k = &p[0];
        assert!(k.kernel.contains("cs_gemm_sm90_kernel"), "{}", k.kernel);
        let d = k.duration_us().unwrap();
        assert!((d - 285.57).abs() < 0.5, "{d}");
        assert!((k.tensor_pct().unwrap() - 55.0).abs() < 1.0);
        assert_eq!(k.get("launch__registers_per_thread"), Some(90.0));
        assert_eq!(k.stalls()[0].0, "long_scoreboard");
        assert!(k.smem_bytes().unwrap() > 100_000.0);
    }

    #[test]
    fn the_builtin_gemm_keeps_them_busy_and_gets_other_guidance() {
        let slow = load("raw_cute_gemm.csv");
        let fast = load("best_gemm.csv");
        let k = &fast[0];
        assert!(k.kernel.contains("GemmUniversal"), "{}", k.kernel);
        assert!(k.tensor_pct().unwrap() > 90.0);
        assert_eq!(k.stalls()[0].0, "barrier");
        let at = |f: f64| Placement {
            intensity: 1365.0,
            ridge: 358.0,
            bound: Bound::Compute,
            achieved_tflops: 0.0,
            achieved_tb_per_s: 0.0,
            peak_tflops: 1071.0,
            copy_tb_per_s: 3.0,
            floor_us: 128.4,
            time_us: 128.4 / f,
            fraction: f,
            headroom: 1.0 - f,
        };
        let gs = guidance::select(Some(&at(0.44)), Some(&slow[0]), &[], 3);
        let gf = guidance::select(Some(&at(0.71)), Some(&fast[0]), &[], 3);
        assert!(gs[0].text.contains("tensor pipe active 55%"), "{gs:?}");
        assert!(
            !gf.iter().any(|g| g.text.contains("tensor cores starve")),
            "{gf:?}"
        );
        assert_ne!(gs[0].text, gf[0].text);
    }

    #[test]
    fn the_activation_is_memory_bound_and_latency_limited() {
        let k = &load("silu.csv")[0];
        assert!(k.kernel.contains("cs_act_flat_kernel"));
        let dram = k
            .get("dram__throughput.avg.pct_of_peak_sustained_elapsed")
            .unwrap();
        assert!((dram - 84.0).abs() < 1.0, "{dram}");
        assert_eq!(k.tensor_pct(), Some(0.0));
        assert_eq!(k.stalls()[0].0, "long_scoreboard");
    }
}
