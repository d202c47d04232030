//! The validate stage's view of the GPU: [`GpuEvaluator`] runs each version in a worker
//! process ([`crate::eval`]) exactly as `cutesmith check` does. [`ScriptedEvaluator`] is
//! a test double for machines without a GPU: it answers from markers in the kernel's
//! source and is never chosen unless `CUTESMITH_TEST_EVALUATOR=scripted` is set; every
//! session it touches says so in its files and every report line it makes says
//! "TEST DOUBLE".

use std::path::Path;
use std::time::Duration;

use crate::error::Result;
use crate::eval::gpu::DeviceInfo;
use crate::eval::job::{
    BaselineTiming, Ceilings, Fault, FaultKind, Mode, ShapeValidation, Stats, TimingReport,
    WorkerReport,
};
use crate::eval::{self, Evaluation};
use crate::feedback::ncu::KernelProfile;
use crate::spec::Workload;

/// The name of the real evaluator (as sessions record it).
pub const GPU_EVALUATOR: &str = "gpu";

/// The environment variable that selects the scripted test double.
pub const TEST_EVALUATOR_ENV: &str = "CUTESMITH_TEST_EVALUATOR";

/// Validates and times versions.
pub trait Evaluator: Send + Sync {
    /// A name for logs (`gpu` or `scripted test double (no GPU)`).
    fn name(&self) -> String;
    /// The device's facts, the ceilings and the vendor baselines, before any version.
    fn probe(&self, w: &Workload) -> Result<Evaluation>;
    /// Validates (every shape and seed) and times one compiled version.
    fn evaluate(&self, w: &Workload, shared_object: &Path, source: &str) -> Result<Evaluation>;

    /// Whether its results are measurements worth keeping in the tuning database (a test
    /// double's are not).
    fn measures(&self) -> bool {
        true
    }

    /// Profiles one launch of a correct version under Nsight Compute, when the evaluator
    /// can: `Ok(profiles)`, or `Err(why not)`, which the session records and goes on.
    fn profile(
        &self,
        _w: &Workload,
        _shared_object: &Path,
        _kernels: &[String],
    ) -> std::result::Result<Vec<KernelProfile>, String> {
        Err("this evaluator does not profile".into())
    }
}

/// The real thing: one worker process per evaluation.
pub struct GpuEvaluator {
    pub seeds: u64,
    pub runs: u32,
    pub timeout: Duration,
    /// Nsight Compute, when found: accepted versions are profiled with it.
    pub ncu: Option<std::path::PathBuf>,
    /// The one GPU of a pool its workers see (`CUDA_VISIBLE_DEVICES`); `None`: whatever
    /// this process sees.
    pub device: Option<String>,
}

impl Default for GpuEvaluator {
    fn default() -> Self {
        GpuEvaluator {
            seeds: 2,
            runs: 30,
            timeout: Duration::from_secs(300),
            ncu: None,
            device: None,
        }
    }
}

impl Evaluator for GpuEvaluator {
    fn name(&self) -> String {
        GPU_EVALUATOR.into()
    }

    fn probe(&self, w: &Workload) -> Result<Evaluation> {
        let mut job = eval::job_for(w, Mode::Baseline, None, 1, self.runs)?;
        job.device = self.device.clone();
        eval::evaluate(&job, self.timeout)
    }

    fn evaluate(&self, w: &Workload, so: &Path, _source: &str) -> Result<Evaluation> {
        let mut job = eval::job_for(
            w,
            Mode::Check,
            Some(so.to_path_buf()),
            self.seeds,
            self.runs,
        )?;
        job.device = self.device.clone();
        eval::evaluate(&job, self.timeout)
    }

    fn profile(
        &self,
        w: &Workload,
        so: &Path,
        kernels: &[String],
    ) -> std::result::Result<Vec<KernelProfile>, String> {
        let Some(exe) = &self.ncu else {
            return Err(
                "ncu (Nsight Compute) not found: event timing and static facts only".into(),
            );
        };
        crate::feedback::profile::ncu_launch(
            exe,
            w,
            false,
            kernels,
            so,
            self.timeout,
            self.device.as_deref(),
        )
        .profiles
    }
}

/// The evaluator a session uses: the test double only when the environment asks for it.
pub fn from_env(gpu: GpuEvaluator) -> Box<dyn Evaluator> {
    match std::env::var(TEST_EVALUATOR_ENV).ok().as_deref() {
        Some("scripted") => Box::new(ScriptedEvaluator::from_env()),
        _ => Box::new(gpu),
    }
}

/// A test double answering from markers in the source:
/// `// cutesmith-test: wrong` (a mismatch), `// cutesmith-test: fault=out_of_bounds`,
/// `// cutesmith-test: median_us=80`. A source without markers is correct at 100 us.
/// The vendor baseline is a fixed 100 us; the roofline floor is 10 us.
pub struct ScriptedEvaluator {
    /// Extra seconds each evaluation takes (to let tests kill a session mid-step).
    pub delay: Duration,
}

impl ScriptedEvaluator {
    pub fn from_env() -> Self {
        let ms = std::env::var("CUTESMITH_TEST_EVALUATOR_DELAY_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        ScriptedEvaluator {
            delay: Duration::from_millis(ms),
        }
    }

    fn device() -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: "TEST DOUBLE (no GPU ran)".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            memory_bytes: 80 << 30,
            l2_bytes: 50 << 20,
            smem_per_block_optin: 227 << 10,
            clock_khz: 1_980_000,
            driver_cuda_version: 13000,
        }
    }

    fn ceilings() -> Ceilings {
        Ceilings {
            copy_bytes_per_s: 3.0e12,
            peak_flops_per_s: 989e12,
            peak_note: "TEST DOUBLE: fixed figures, no GPU ran".into(),
        }
    }

    fn stats(median: f64) -> Stats {
        Stats {
            runs: 30,
            median_us: median,
            min_us: median * 0.99,
            p10_us: median * 0.995,
            p90_us: median * 1.005,
            spread: 0.01,
        }
    }

    fn marker<'a>(source: &'a str, key: &str) -> Option<&'a str> {
        source.lines().find_map(|l| {
            let rest = l.trim().strip_prefix("// cutesmith-test:")?.trim();
            if rest == key {
                return Some("");
            }
            rest.strip_prefix(key)?.strip_prefix('=').map(str::trim)
        })
    }
}

impl Evaluator for ScriptedEvaluator {
    fn measures(&self) -> bool {
        false
    }

    fn name(&self) -> String {
        "scripted test double (no GPU)".into()
    }

    fn probe(&self, w: &Workload) -> Result<Evaluation> {
        let shape = *w.headline();
        let report = WorkerReport {
            device: Some(Self::device()),
            ceilings: Some(Self::ceilings()),
            validations: Vec::new(),
            timing: Some(TimingReport {
                shape,
                flops: w.flops(&shape),
                min_bytes: w.min_bytes(&shape),
                floor_s: 10e-6,
                candidate: None,
                roofline_fraction: None,
                achieved_tflops: None,
                achieved_tb_per_s: None,
                baselines: vec![BaselineTiming {
                    name: "vendor (TEST DOUBLE)".into(),
                    stats: Self::stats(100.0),
                    speedup: None,
                    note: None,
                }],
                retimed: None,
            }),
            revalidation: None,
            fault: None,
            notes: vec!["TEST DOUBLE: no GPU ran".into()],
            environment: None,
        };
        Ok(Evaluation {
            report: Some(report),
            fault: None,
            inspect: None,
            stderr_tail: String::new(),
            seconds: 0.0,
            sanitizer_output: None,
            peak_rss: 0,
            memory_ceiling: None,
        })
    }

    fn evaluate(&self, w: &Workload, _so: &Path, source: &str) -> Result<Evaluation> {
        std::thread::sleep(self.delay);
        let shape = *w.headline();
        let fault = if Self::marker(source, "wrong").is_some() {
            Some(Fault {
                kind: FaultKind::Mismatch,
                message: format!(
                    "TEST DOUBLE mismatch on {shape} seed 1: 4096 of 16384 elements wrong \
                     (25.0%), max abs err 2.5e+00 at (0, 64), wrong tiles: every column block \
                     64..127"
                ),
            })
        } else {
            Self::marker(source, "fault").map(|k| Fault {
                kind: serde_json::from_value(serde_json::Value::from(k))
                    .unwrap_or(FaultKind::KernelError),
                message: format!("TEST DOUBLE fault {k} on {shape}"),
            })
        };
        let median = Self::marker(source, "median_us")
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(100.0);
        let passed = fault.is_none();
        let validations = vec![ShapeValidation {
            shape,
            seed: 1,
            passed,
            comparison: None,
            fp64: None,
            canaries_intact: true,
            fault: fault.clone(),
            seconds: 0.0,
        }];
        let timing = passed.then(|| TimingReport {
            shape,
            flops: w.flops(&shape),
            min_bytes: w.min_bytes(&shape),
            floor_s: 10e-6,
            candidate: Some(Self::stats(median)),
            roofline_fraction: Some(10.0 / median),
            achieved_tflops: Some(w.flops(&shape) / (median * 1e-6) / 1e12),
            achieved_tb_per_s: Some(w.min_bytes(&shape) / (median * 1e-6) / 1e12),
            baselines: vec![BaselineTiming {
                name: "vendor (TEST DOUBLE)".into(),
                stats: Self::stats(100.0),
                speedup: Some(100.0 / median),
                note: None,
            }],
            retimed: None,
        });
        Ok(Evaluation {
            report: Some(WorkerReport {
                device: Some(Self::device()),
                ceilings: Some(Self::ceilings()),
                validations,
                timing,
                revalidation: None,
                fault: fault.clone(),
                notes: vec!["TEST DOUBLE: no GPU ran".into()],
                environment: None,
            }),
            fault,
            inspect: None,
            stderr_tail: String::new(),
            seconds: self.delay.as_secs_f64(),
            sanitizer_output: None,
            peak_rss: 0,
            memory_ceiling: None,
        })
    }
}
