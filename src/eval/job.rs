//! What the agent asks of a worker process and what the worker answers, as JSON: the
//! contract between the parent (this crate's [`crate::eval`]) and the child
//! (`cutesmith worker`, [`crate::eval::worker`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::eval::compare::Comparison;
use crate::eval::gpu::DeviceInfo;
use crate::spec::Shape;

/// What the worker should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Validate on every shape and seed; stop at the first fault.
    Validate,
    /// Validate, then time the headline shape against the baselines, then re-validate
    /// on fresh inputs.
    Check,
    /// Time the baselines (and measure the ceilings) only; no kernel.
    Baseline,
}

/// How to time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimingConfig {
    /// Untimed launches first (module load, caches, clocks).
    pub warmup: u32,
    /// Timed launches per contender (at least 20 is enforced by the worker).
    pub runs: u32,
    /// Flush the L2 cache before every timed launch.
    pub flush_l2: bool,
    /// Below this single-launch time (microseconds), time CUDA-graph replays instead.
    #[serde(default = "default_graph_below_us")]
    pub graph_below_us: f64,
}

fn default_graph_below_us() -> f64 {
    20.0
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig {
            warmup: 5,
            runs: 30,
            flush_l2: true,
            graph_below_us: default_graph_below_us(),
        }
    }
}

/// One evaluation request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    /// A random string: the worker's answer is the stdout line that starts with
    /// `CUTESMITH-RESULT <nonce> `, so nothing a kernel prints can pass for it.
    pub nonce: String,
    pub mode: Mode,
    /// The candidate's shared object (absent in baseline mode).
    pub shared_object: Option<PathBuf>,
    /// The workload spec's path (for messages) and its text (parsed by the worker).
    pub workload_path: PathBuf,
    pub workload_toml: String,
    /// Indices into the workload's shapes to validate on; empty means all.
    pub shapes: Vec<usize>,
    /// Random seeds: each shape is validated once per seed with fresh inputs.
    pub seeds: Vec<u64>,
    pub timing: TimingConfig,
    /// Sampled entries of every GEMM output checked against an fp64 reference.
    pub fp64_samples: usize,
    /// Validate on the host (inputs generated there, whole outputs compared on the CPU)
    /// instead of on the device; `CUTESMITH_HOST_VALIDATION=1` sets it.
    #[serde(default)]
    pub host_validation: bool,
    /// The host memory the worker and everything it starts may hold together; over it
    /// the parent kills it and files a `resource` fault (`None`: no ceiling). A host
    /// validation run that would not fit validates on the device instead.
    #[serde(default)]
    pub host_memory_limit: Option<u64>,
    /// The largest file the worker (and what it starts) may write, in bytes
    /// (`RLIMIT_FSIZE`; over it the write fails with SIGXFSZ and the fault is `resource`).
    #[serde(default)]
    pub file_size_limit: Option<u64>,
    /// The GPU the worker may see (its `CUDA_VISIBLE_DEVICES`, as this process names the
    /// device); `None` leaves the variable as this process has it.
    #[serde(default)]
    pub device: Option<String>,
}

/// How a candidate failed, as data. The agent routes on this; it is never an `Err`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// nvcc rejected the source.
    CompileError,
    /// The shared object links or loads cuBLAS / cuBLASLt / cuDNN.
    ForbiddenLibrary,
    /// An ABI entry point is missing, or the ABI version differs.
    AbiMismatch,
    /// The kernel declined the problem (CS_ERR_UNSUPPORTED).
    Unsupported,
    /// The workspace request was unreasonable or the kernel reported CS_ERR_WORKSPACE.
    WrongWorkspace,
    /// The launch entry returned a CUDA error.
    LaunchError,
    /// The kernel read or wrote an address it must not (CUDA error 700), or wrote
    /// outside its output (guard canaries changed), or compute-sanitizer said so.
    OutOfBounds,
    /// A misaligned access (CUDA error 716).
    MisalignedAddress,
    /// Any other error raised while the kernel ran.
    KernelError,
    /// The worker ran past its wall-clock limit and was killed (a hang).
    Timeout,
    /// The worker died (a signal, an abort) without answering.
    Crash,
    /// Part of the output was never written (still the NaN poison).
    PartialWrite,
    /// NaN or Inf where the reference is finite.
    NanInf,
    /// Wrong values.
    Mismatch,
    /// The output equals the answer for earlier inputs: a replayed or cached result.
    StaleOutput,
    /// Right within the workload's tolerance but less precise than its arithmetic
    /// demands (e.g. TF32 or fp16 inside an fp32 workload), by the fp64 check.
    Precision,
    /// A data race, found by compute-sanitizer racecheck (or results that move between
    /// runs on the same inputs).
    Race,
    /// A barrier or warp-synchronization misuse, found by compute-sanitizer synccheck.
    SyncError,
    /// Timed faster than the roofline floor allows: a measurement or correctness bug.
    BelowRoofline,
    /// A timed launch's output differs from the validated answer for its inputs: the
    /// kernel skips work when it recognizes repeated inputs, so its time is not its cost.
    TimingInconsistent,
    /// A limit of the machine stopped the evaluation, not the kernel: the GPU lacks the
    /// free memory the problem needs, or the worker went over its host memory limit.
    /// The message names the limit and the figures. Never debugged against the kernel.
    Resource,
}

impl FaultKind {
    /// The snake_case name used in fixtures, JSON and prompts.
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// A classified failure with what a person or a model needs to fix it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fault {
    pub kind: FaultKind,
    pub message: String,
}

/// The fp64 CPU cross-check of sampled GEMM entries.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fp64Check {
    pub samples: usize,
    /// Samples over the bound.
    pub failed: usize,
    /// Largest |got - ref64| / (sum_k |a_ik b_kj| + |beta c|) seen, after allowing for
    /// the rounding of the output type.
    pub max_normalized_error: f64,
    /// The median of the same: rounding-level (precision) or bug-level (mismatch).
    pub median_normalized_error: f64,
    /// The bound that error must stay under, from the output type and fp32 accumulation.
    pub bound: f64,
    /// Which arithmetic the error looks like (fp32, tf32/fp16, bf16).
    pub hint: Option<String>,
    /// For fp32 workloads: the kernel's error on the sampled entries beside the vendor
    /// library's fp32 GEMM on the same inputs.
    #[serde(default)]
    pub accuracy: Option<ErrorVsLibrary>,
}

/// Errors against the fp64 reference over the sampled entries of one validation: the
/// kernel's and, on the same inputs, the vendor library's fp32 GEMM's (cuBLAS without
/// TF32), both as absolute errors of the output.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ErrorVsLibrary {
    pub max: f64,
    pub rms: f64,
    pub library_max: f64,
    pub library_rms: f64,
}

impl ErrorVsLibrary {
    /// How many times the library's RMS error the kernel's is (0 when both are exact).
    pub fn rms_ratio(&self) -> f64 {
        if self.library_rms > 0.0 {
            self.rms / self.library_rms
        } else if self.rms > 0.0 {
            f64::INFINITY
        } else {
            0.0
        }
    }
}

/// One validation run: one shape, one seed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShapeValidation {
    pub shape: Shape,
    pub seed: u64,
    pub passed: bool,
    pub comparison: Option<Comparison>,
    pub fp64: Option<Fp64Check>,
    /// Guard regions around the output still hold their pattern.
    pub canaries_intact: bool,
    pub fault: Option<Fault>,
    /// Kernel wall time of this (untimed) launch, for progress display.
    pub seconds: f64,
}

/// Order statistics of repeated timings, in microseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stats {
    pub runs: usize,
    pub median_us: f64,
    pub min_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
    /// (p90 - p10) / median: the spread a speedup must exceed to mean anything.
    pub spread: f64,
}

impl Stats {
    /// Statistics of a set of samples (microseconds).
    pub fn from_samples(samples: &[f64]) -> Option<Stats> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        let median = q(0.5);
        Some(Stats {
            runs: v.len(),
            median_us: median,
            min_us: v[0],
            p10_us: q(0.1),
            p90_us: q(0.9),
            spread: if median > 0.0 {
                (q(0.9) - q(0.1)) / median
            } else {
                0.0
            },
        })
    }
}

/// A baseline's timing on the same shape, in the same process, interleaved with the
/// candidate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaselineTiming {
    /// e.g. "cublas", "cublaslt (best of 8 heuristic algorithms)", "cudnn", "copy".
    pub name: String,
    pub stats: Stats,
    /// Baseline median / candidate median (absent in baseline mode).
    pub speedup: Option<f64>,
    pub note: Option<String>,
}

pub use crate::spec::TF32_REFERENCE;

impl BaselineTiming {
    /// The device-to-device copy: a bandwidth ceiling, not a vendor implementation.
    pub fn is_copy(&self) -> bool {
        self.name == "copy"
    }

    /// A row shown for reference, never the one a speedup is taken against: the copy, and
    /// cuBLAS on TF32 beside an fp32 workload (faster, but not what the workload asks).
    pub fn is_reference_only(&self) -> bool {
        self.is_copy() || self.name == TF32_REFERENCE
    }
}

/// Timing of the headline shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimingReport {
    pub shape: Shape,
    pub flops: f64,
    pub min_bytes: f64,
    /// The roofline floor: max(min_bytes / copy bandwidth, flops / peak), seconds.
    pub floor_s: f64,
    pub candidate: Option<Stats>,
    /// floor / candidate median.
    pub roofline_fraction: Option<f64>,
    pub achieved_tflops: Option<f64>,
    pub achieved_tb_per_s: Option<f64>,
    pub baselines: Vec<BaselineTiming>,
    /// Set when a disturbed batch of rounds was timed again: which batches were timed
    /// and which one the figures come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retimed: Option<String>,
}

impl TimingReport {
    /// The fastest vendor library (cuBLAS, cuBLASLt, cuDNN), the reference-only rows (the
    /// copy, TF32 beside an fp32 workload) left out.
    pub fn fastest_vendor(&self) -> Option<&BaselineTiming> {
        self.baselines
            .iter()
            .filter(|b| !b.is_reference_only())
            .min_by(|a, b| a.stats.median_us.total_cmp(&b.stats.median_us))
    }
}

/// The machine's ceilings, measured or derived in this run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ceilings {
    /// Device-to-device copy, bytes read + written per second, measured now.
    pub copy_bytes_per_s: f64,
    /// Peak FLOP/s for the workload's arithmetic (from SM count x clock x per-SM rate).
    pub peak_flops_per_s: f64,
    pub peak_note: String,
}

/// Everything the worker found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerReport {
    pub device: Option<DeviceInfo>,
    pub ceilings: Option<Ceilings>,
    pub validations: Vec<ShapeValidation>,
    pub timing: Option<TimingReport>,
    /// The validation after timing, on inputs never seen before.
    pub revalidation: Option<ShapeValidation>,
    /// The first fault, if any: it stopped the evaluation.
    pub fault: Option<Fault>,
    /// Human-readable notes (degraded features, skipped baselines).
    pub notes: Vec<String>,
    /// Why the worker could not evaluate anything on this machine (no usable GPU, the
    /// ceilings could not be measured): the environment's failure, never the kernel's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
}

impl WorkerReport {
    /// True when every validation passed and nothing faulted.
    pub fn passed(&self) -> bool {
        self.fault.is_none()
            && !self.validations.is_empty()
            && self.validations.iter().all(|v| v.passed)
            && self.revalidation.as_ref().is_none_or(|v| v.passed)
    }
}

/// The marker that starts the worker's result line on stdout.
pub const RESULT_MARKER: &str = "CUTESMITH-RESULT";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_order_statistics() {
        let s = Stats::from_samples(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(s.median_us, 3.0);
        assert_eq!(s.min_us, 1.0);
        assert_eq!(s.runs, 5);
        assert!(Stats::from_samples(&[]).is_none());
        assert!(Stats::from_samples(&[f64::NAN]).is_none());
    }

    #[test]
    fn fault_names_are_snake_case() {
        assert_eq!(FaultKind::StaleOutput.name(), "stale_output");
        assert_eq!(FaultKind::OutOfBounds.name(), "out_of_bounds");
        assert_eq!(FaultKind::ForbiddenLibrary.name(), "forbidden_library");
    }
}
