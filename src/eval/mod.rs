//! The parent side of evaluation: a candidate runs only in a child process
//! (`cutesmith worker`), started here in its own temp directory with a scrubbed
//! environment, a wall-clock timeout that kills its whole process group, and capped
//! output. Before anything loads the shared object, its imports are inspected.
//!
//! Whatever the kernel does (fault, hang, abort, print garbage), the agent's process
//! survives and gets a classified [`Fault`].

pub mod compare;
pub mod gpu;
pub mod inspect;
pub mod job;
pub mod sanitizer;
pub mod worker;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::process;
use crate::spec::Workload;
use job::{Fault, FaultKind, Job, Mode, TimingConfig, WorkerReport, RESULT_MARKER};

/// Environment variables a worker may see; everything else (API keys, tokens) is dropped.
const ENV_ALLOWED: &[&str] = &[
    "PATH",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_HOME",
    "CUDA_PATH",
    "LANG",
    "LC_ALL",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
];

/// The worker's environment: the allowed variables of `from`, plus fixed settings.
pub fn worker_env(
    from: impl Iterator<Item = (String, String)>,
    home: &Path,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = from
        .filter(|(k, _)| ENV_ALLOWED.contains(&k.as_str()))
        .collect();
    let home = home.display().to_string();
    env.push(("HOME".into(), home.clone()));
    env.push(("TMPDIR".into(), home));
    // cuBLAS must not switch fp32 work to TF32 behind the reference's back.
    env.push(("NVIDIA_TF32_OVERRIDE".into(), "0".into()));
    env
}

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
}

impl Evaluation {
    /// True when the candidate passed everything asked of it.
    pub fn passed(&self) -> bool {
        self.fault.is_none() && self.report.as_ref().is_some_and(|r| r.passed())
    }
}

/// The executable that runs workers: this program (`CUTESMITH_WORKER_EXE` overrides it,
/// for tests that drive the library from another binary).
pub fn worker_exe() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("CUTESMITH_WORKER_EXE") {
        return Ok(PathBuf::from(p));
    }
    std::env::current_exe().map_err(|e| Error::io("current executable", e))
}

/// Inspects the shared object, then runs the job in a worker process.
pub fn evaluate(job: &Job, timeout: Duration) -> Result<Evaluation> {
    let mut inspected = None;
    if let Some(so) = &job.shared_object {
        match inspect::inspect(so) {
            Ok(rep) => {
                let fault = if !rep.forbidden.is_empty() {
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
                };
                if fault.is_some() {
                    return Ok(Evaluation {
                        report: None,
                        fault,
                        inspect: Some(rep),
                        stderr_tail: String::new(),
                        seconds: 0.0,
                        sanitizer_output: None,
                    });
                }
                inspected = Some(rep);
            }
            Err(e) => {
                return Err(Error::Usage(format!(
                    "cannot inspect {}: {e}",
                    so.display()
                )));
            }
        }
    }
    let mut eval = spawn_worker(job, timeout, None)?;
    eval.inspect = inspected;
    Ok(eval)
}

/// Runs the job's worker under compute-sanitizer `tool` and parses its findings. The
/// job should be small (one shape, one seed): the sanitizer slows kernels down a lot.
pub fn evaluate_sanitized(
    job: &Job,
    sanitizer_exe: &Path,
    tool: sanitizer::Tool,
    timeout: Duration,
) -> Result<(Evaluation, sanitizer::SanitizerReport)> {
    let args = vec![
        "--tool".to_string(),
        tool.name().to_string(),
        "--print-limit".to_string(),
        "20".to_string(),
    ];
    let eval = spawn_worker(job, timeout, Some((sanitizer_exe, args)))?;
    let text = format!(
        "{}\n{}",
        eval.sanitizer_output.as_deref().unwrap_or_default(),
        eval.stderr_tail
    );
    let report = sanitizer::parse(&text, Some(tool));
    Ok((eval, report))
}

/// Runs the job in a worker under a profiler (Nsight Compute): `exe args... cutesmith
/// worker --job ...`. The shared object is inspected first, as in [`evaluate`].
pub fn evaluate_under(
    job: &Job,
    exe: &Path,
    args: Vec<String>,
    timeout: Duration,
) -> Result<Evaluation> {
    if let Some(so) = &job.shared_object {
        let rep = inspect::inspect(so).map_err(|e| Error::Format {
            context: so.display().to_string(),
            message: e,
        })?;
        if !rep.forbidden.is_empty() {
            return Ok(Evaluation {
                report: None,
                fault: Some(Fault {
                    kind: FaultKind::ForbiddenLibrary,
                    message: format!("rejected before loading: {}", rep.summary()),
                }),
                inspect: Some(rep),
                stderr_tail: String::new(),
                seconds: 0.0,
                sanitizer_output: None,
            });
        }
    }
    spawn_worker(job, timeout, Some((exe, args)))
}

/// Starts `cutesmith worker` (optionally under a wrapper program such as
/// compute-sanitizer) in a fresh temp directory with a scrubbed environment.
fn spawn_worker(
    job: &Job,
    timeout: Duration,
    wrapper: Option<(&Path, Vec<String>)>,
) -> Result<Evaluation> {
    let dir = tempfile::Builder::new()
        .prefix("cutesmith-worker-")
        .tempdir()
        .map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let job_path = dir.path().join("job.json");
    let text = serde_json::to_string(job).map_err(|e| Error::Format {
        context: "job".into(),
        message: e.to_string(),
    })?;
    std::fs::write(&job_path, text).at(&job_path)?;
    let mut cmd = match &wrapper {
        Some((exe, args)) => {
            let mut c = Command::new(exe);
            c.args(args).arg(worker_exe()?);
            c
        }
        None => Command::new(worker_exe()?),
    };
    cmd.arg("worker")
        .arg("--job")
        .arg(&job_path)
        .current_dir(dir.path())
        .env_clear()
        .envs(worker_env(std::env::vars(), dir.path()));
    let out = process::run(cmd, timeout, 16 << 20)?;
    let stderr_tail = tail(&out.stderr, 4000);
    let marker = format!("{RESULT_MARKER} {} ", job.nonce);
    let line = out
        .stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(&marker));
    let parsed: Option<std::result::Result<WorkerReport, String>> =
        line.map(|json| serde_json::from_str(json).map_err(|e| e.to_string()));
    if let Some(Err(e)) = &parsed {
        // The worker answered but its answer does not parse: that is our bug, not the
        // kernel's, and must not be filed as a kernel fault.
        return Err(Error::Format {
            context: "the worker's report".into(),
            message: e.clone(),
        });
    }
    let report = parsed.and_then(|r| r.ok());
    let fault = if out.timed_out {
        Some(Fault {
            kind: FaultKind::Timeout,
            message: format!(
                "the worker ran past {} s and was killed: the kernel hangs (or the problem is far too slow)",
                timeout.as_secs()
            ),
        })
    } else if let Some(r) = &report {
        r.fault.clone()
    } else {
        Some(Fault {
            kind: FaultKind::Crash,
            message: format!(
                "the worker died without a report ({}); last output:\n{}",
                describe_status(out.status),
                tail(&out.stderr, 1500)
            ),
        })
    };
    Ok(Evaluation {
        report,
        fault,
        inspect: None,
        stderr_tail,
        seconds: out.elapsed.as_secs_f64(),
        sanitizer_output: wrapper.map(|_| tail(&out.stdout, 64 * 1024)),
    })
}

fn describe_status(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        None => "killed".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exit code {c}"),
            (None, Some(sig)) => format!("signal {sig}"),
            _ => "unknown status".into(),
        },
    }
}

fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = text.len() - max;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    format!("...{}", &text[cut..])
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_env_drops_secrets_and_pins_tf32_off() {
        let from = vec![
            ("PATH".to_string(), "/usr/bin".to_string()),
            ("OPENAI_API_KEY".to_string(), "sk-secret".to_string()),
            ("GITHUB_TOKEN".to_string(), "ghp".to_string()),
            ("CUDA_VISIBLE_DEVICES".to_string(), "0".to_string()),
            ("NVIDIA_TF32_OVERRIDE".to_string(), "1".to_string()),
        ];
        let env = worker_env(from.into_iter(), Path::new("/tmp/w"));
        let keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert!(keys.contains(&"PATH"));
        assert!(keys.contains(&"CUDA_VISIBLE_DEVICES"));
        assert!(!keys.contains(&"OPENAI_API_KEY"));
        assert!(!keys.contains(&"GITHUB_TOKEN"));
        let tf32: Vec<&str> = env
            .iter()
            .filter(|(k, _)| k == "NVIDIA_TF32_OVERRIDE")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(tf32, vec!["0"]);
        assert!(env.contains(&("HOME".to_string(), "/tmp/w".to_string())));
    }

    #[test]
    fn tail_keeps_the_end() {
        assert_eq!(tail("abcdef", 3), "...def");
        assert_eq!(tail("ab", 3), "ab");
    }
}
