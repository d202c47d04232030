//! The evaluation service: a compiled candidate validated and timed on the GPU, and what
//! was found, as one [`Evaluation`].
//!
//! The parent side (this process): the [`job`] to run, the shared object's [`inspect`]ion
//! before anything loads it, the worker process ([`spawn`]), [`sanitizer`] runs, and the
//! text of an evaluation ([`render`]). The worker side (the child process, `cutesmith
//! worker`): the job loop, validation and timing ([`worker`]) on the device ([`gpu`], the
//! only code that talks to the CUDA driver and the vendor libraries), and the comparison
//! of outputs with references ([`compare`]). A candidate runs only in the child: whatever
//! the kernel does (fault, hang, abort, print garbage), this process survives and gets a
//! classified [`Fault`].
//!
//! One entry point, [`run`] (with [`evaluate`] for the plain case), serves `check`,
//! `profile`, `bench` and the engine.

pub mod compare;
pub mod gpu;
pub mod inspect;
pub mod job;
pub mod render;
pub mod sanitizer;
mod spawn;
pub mod worker;

pub use spawn::{spawn_program, worker_env, worker_exe};

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::spec::Workload;
use job::{Fault, FaultKind, Job, Mode, TimingConfig, WorkerReport};

/// What an evaluation found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Evaluation {
    /// The worker's report, when it answered.
    pub report: Option<WorkerReport>,
    /// The fault that decides the outcome (from inspection, the parent, or the worker).
    pub fault: Option<Fault>,
    pub inspect: Option<inspect::InspectReport>,
    /// The end of the worker's standard error (progress lines, crash messages).
    pub stderr_tail: String,
    pub seconds: f64,
    /// The wrapper's output (compute-sanitizer prints its report on stdout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sanitizer_output: Option<String>,
    /// The largest host memory the worker (with what it started) held, sampled (bytes).
    #[serde(default)]
    pub peak_rss: u64,
    /// What held the worker to its host memory limit (a cgroup, or sampling and why no
    /// cgroup); `None` when no worker ran or no limit was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_ceiling: Option<crate::process::MemoryCeiling>,
}

impl Evaluation {
    /// True when the candidate passed everything asked of it.
    pub fn passed(&self) -> bool {
        self.fault.is_none() && self.report.as_ref().is_some_and(|r| r.passed())
    }
}

/// What the worker process runs under.
#[derive(Debug, Clone)]
pub enum Under<'a> {
    /// The worker alone: validation and timing.
    Plain,
    /// compute-sanitizer's `tool`; the job should be small (one shape, one seed), since
    /// the sanitizer slows kernels down a lot. Its output is kept in
    /// [`Evaluation::sanitizer_output`]; [`sanitized`] parses it.
    Sanitizer {
        exe: &'a Path,
        tool: sanitizer::Tool,
    },
    /// A profiler (Nsight Compute): `exe args... cutesmith worker --job ...`.
    Profiler { exe: &'a Path, args: Vec<String> },
}

/// Evaluates a job in a worker process with nothing around it (see [`run`]).
pub fn evaluate(job: &Job, timeout: Duration) -> Result<Evaluation> {
    run(job, timeout, Under::Plain)
}

/// The one way a candidate is evaluated, used by `check`, `profile`, the engine and
/// `bench`: its shared object is inspected first (one inspection: a shared object that
/// links or opens a vendor library, or lacks an ABI entry point, is rejected before
/// anything loads it), then the job runs in a worker process, under `under`.
pub fn run(job: &Job, timeout: Duration, under: Under<'_>) -> Result<Evaluation> {
    let mut inspected = None;
    if let Some(so) = &job.shared_object {
        let rep = inspect::inspect(so)
            .map_err(|e| Error::Usage(format!("cannot inspect {}: {e}", so.display())))?;
        if let Some(fault) = rejection(&rep) {
            return Ok(Evaluation {
                report: None,
                fault: Some(fault),
                inspect: Some(rep),
                stderr_tail: String::new(),
                seconds: 0.0,
                sanitizer_output: None,
                peak_rss: 0,
                memory_ceiling: None,
            });
        }
        inspected = Some(rep);
    }
    let wrapper = match under {
        Under::Plain => None,
        Under::Sanitizer { exe, tool } => Some((
            exe,
            vec![
                "--tool".to_string(),
                tool.name().to_string(),
                "--print-limit".to_string(),
                "20".to_string(),
            ],
        )),
        Under::Profiler { exe, args } => Some((exe, args)),
    };
    let mut eval = spawn::spawn_worker(job, timeout, wrapper)?;
    eval.inspect = inspected;
    Ok(eval)
}

/// The fault that keeps a shared object from being loaded at all, if any.
fn rejection(rep: &inspect::InspectReport) -> Option<Fault> {
    if !rep.forbidden.is_empty() {
        Some(Fault {
            kind: FaultKind::ForbiddenLibrary,
            message: format!("rejected before loading: {}", rep.summary()),
        })
    } else if !rep.missing_entry_points.is_empty() {
        Some(Fault {
            kind: FaultKind::AbiMismatch,
            message: format!(
                "the shared object does not export {}",
                rep.missing_entry_points.join(", ")
            ),
        })
    } else {
        None
    }
}

/// Runs the job under compute-sanitizer `tool` and parses its findings.
pub fn sanitized(
    job: &Job,
    sanitizer_exe: &Path,
    tool: sanitizer::Tool,
    timeout: Duration,
) -> Result<(Evaluation, sanitizer::SanitizerReport)> {
    let eval = run(
        job,
        timeout,
        Under::Sanitizer {
            exe: sanitizer_exe,
            tool,
        },
    )?;
    let text = format!(
        "{}\n{}",
        eval.sanitizer_output.as_deref().unwrap_or_default(),
        eval.stderr_tail
    );
    let report = sanitizer::parse(&text, Some(tool));
    Ok((eval, report))
}

/// Runs the workload's cheapest shape (one seed) under each compute-sanitizer tool in
/// `tools`; a finding refines `eval`'s fault with the source line it names (a race or an
/// out-of-bounds access explains a mismatch or a kernel error better than the symptom).
/// Nothing runs when the shared object was rejected before loading; otherwise a missing
/// compute-sanitizer (`sanitizer_exe` of `None`) is an error.
pub fn sanitize(
    job: &Job,
    workload: &Workload,
    sanitizer_exe: Option<&Path>,
    tools: &[sanitizer::Tool],
    timeout: Duration,
    eval: &mut Evaluation,
    say: &dyn Fn(&str),
) -> Result<Vec<sanitizer::SanitizerReport>> {
    let mut findings = Vec::new();
    let rejected = eval
        .fault
        .as_ref()
        .is_some_and(|f| matches!(f.kind, FaultKind::ForbiddenLibrary | FaultKind::AbiMismatch));
    if tools.is_empty() || rejected {
        return Ok(findings);
    }
    let sanitizer_exe = sanitizer_exe.ok_or_else(|| Error::ToolMissing {
        what: "compute-sanitizer".into(),
        hint: "it ships with the CUDA toolkit (e.g. /usr/local/cuda/bin); put it on PATH".into(),
    })?;
    let smallest = workload.smallest_shape();
    for t in tools {
        let mut small = job.clone();
        small.mode = Mode::Validate;
        small.seeds = vec![1];
        small.shapes = vec![smallest];
        small.nonce = nonce();
        say(&format!(
            "running {} of {} under compute-sanitizer {} ...",
            workload.shapes()[smallest],
            workload.name(),
            t.name()
        ));
        let (_, rep) = sanitized(&small, sanitizer_exe, *t, timeout)?;
        if !rep.findings.is_empty() {
            let kind = match t {
                sanitizer::Tool::Racecheck => FaultKind::Race,
                sanitizer::Tool::Synccheck => FaultKind::SyncError,
                _ => FaultKind::OutOfBounds,
            };
            let refine = eval.fault.as_ref().is_none_or(|f| {
                matches!(
                    f.kind,
                    FaultKind::Mismatch
                        | FaultKind::Race
                        | FaultKind::SyncError
                        | FaultKind::KernelError
                        | FaultKind::OutOfBounds
                )
            });
            if refine {
                eval.fault = Some(Fault {
                    kind,
                    message: rep.summary(),
                });
            }
        }
        findings.push(rep);
    }
    Ok(findings)
}

/// The host memory a worker may hold (with everything it starts), set once from
/// `--host-memory` / `[limits] host_memory`; unset, half of the memory the host has
/// available when the job is made.
static HOST_BUDGET: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Sets the host memory budget of every worker this process starts (first call wins).
pub fn set_host_budget(bytes: u64) {
    let _ = HOST_BUDGET.set(bytes);
}

/// The host memory budget of a worker: the one set, or half of `MemAvailable`.
pub fn host_budget() -> Option<u64> {
    HOST_BUDGET
        .get()
        .copied()
        .or_else(|| crate::process::mem_available().map(|b| b / 2))
}

/// The largest file a worker writes by default: its job and report are kilobytes; a
/// profiler's log under `profile` stays far below this.
pub const WORKER_FILE_SIZE_LIMIT: u64 = 16 << 30;

/// Builds a job for a workload: its spec's text, seeds 1..=`seeds`, `runs` timed runs.
pub fn job_for(
    workload: &Workload,
    mode: Mode,
    so: Option<std::path::PathBuf>,
    seeds: u64,
    runs: u32,
) -> Result<Job> {
    let toml =
        std::fs::read_to_string(workload.path()).map_err(|e| Error::io(workload.path(), e))?;
    Ok(Job {
        nonce: nonce(),
        mode,
        shared_object: so,
        workload_path: workload.path().to_path_buf(),
        workload_toml: toml,
        shapes: Vec::new(),
        seeds: (1..=seeds.max(1)).collect(),
        timing: TimingConfig {
            runs,
            ..TimingConfig::default()
        },
        fp64_samples: 256,
        host_validation: std::env::var("CUTESMITH_HOST_VALIDATION").is_ok_and(|v| v == "1"),
        host_memory_limit: host_budget(),
        file_size_limit: Some(WORKER_FILE_SIZE_LIMIT),
        device: None,
    })
}

/// A random nonce for a job.
pub fn nonce() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    blake3::hash(format!("{t}-{}", std::process::id()).as_bytes()).to_hex()[..16].to_string()
}
