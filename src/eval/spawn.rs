//! The worker process: `cutesmith worker --job FILE` started (optionally under a wrapper
//! such as compute-sanitizer or Nsight Compute) in a fresh temp directory, with a
//! scrubbed environment, a wall-clock timeout that kills its whole process group and
//! capped output; its one result line read back, and a death without one filed as a
//! [`FaultKind::Crash`] or a [`FaultKind::Timeout`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::job::{Fault, FaultKind, Job, WorkerReport, RESULT_MARKER};
use super::Evaluation;
use crate::error::{Error, IoContext, Result};
use crate::process;

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
    // Where validation records its sampled entries (see `validate::record_samples`).
    "CUTESMITH_RECORD_SAMPLES",
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
    // NVIDIA_TF32_OVERRIDE is dropped with the rest: every cuBLAS call names its compute
    // type (pedantic fp32 for the reference, fp32 for fp32 baselines, TF32 only where the
    // workload allows it or for the labelled reference row), and a global override would
    // silently change one of them (set to 0, it slowed cuBLAS's TF32 baseline down to
    // fp32 speed).
    env
}

/// The executable that runs workers: this program (`CUTESMITH_WORKER_EXE` overrides it,
/// for tests that drive the library from another binary).
pub fn worker_exe() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("CUTESMITH_WORKER_EXE") {
        return Ok(PathBuf::from(p));
    }
    std::env::current_exe().map_err(|e| Error::io("current executable", e))
}

/// Starts `cutesmith worker` (optionally under a wrapper program such as
/// compute-sanitizer) in a fresh temp directory with a scrubbed environment.
/// The processes a worker may hold at once (itself, the sandbox's two, a profiler and
/// its helpers): more is a fork bomb.
pub const WORKER_MAX_PROCESSES: usize = 256;

pub(super) fn spawn_worker(
    job: &Job,
    timeout: Duration,
    wrapper: Option<(&Path, Vec<String>)>,
) -> Result<Evaluation> {
    spawn_program(&worker_exe()?, job, timeout, wrapper)
}

/// [`spawn_worker`] with another program in the worker's place (`exe worker --job FILE`,
/// same directory, environment and sandbox): how tests probe what a worker can reach.
pub fn spawn_program(
    exe: &Path,
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
        Some((wrapper_exe, args)) => {
            let mut c = Command::new(wrapper_exe);
            c.args(args).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.arg("worker")
        .arg("--job")
        .arg(&job_path)
        .current_dir(dir.path())
        .env_clear()
        .envs(worker_env(std::env::vars(), dir.path()));
    if let Some(device) = &job.device {
        // Pinned to one GPU of a pool: the worker sees that device only, as its device 0.
        cmd.env("CUDA_VISIBLE_DEVICES", device);
    }
    // Hard limits the kernel enforces on the worker and all it starts: CPU time (a
    // backstop behind the wall-clock timeout: four cores busy for all of it) and the size
    // of any file written.
    let cpu_seconds = 4 * timeout.as_secs().max(1) + 60;
    let file_size = job.file_size_limit;
    // SAFETY: the closure runs in the child between fork and exec and only calls
    // setrlimit(2), which is async-signal-safe, on values computed before the fork.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            let cpu = libc::rlimit {
                rlim_cur: cpu_seconds as libc::rlim_t,
                rlim_max: (cpu_seconds + 10) as libc::rlim_t,
            };
            libc::setrlimit(libc::RLIMIT_CPU, &cpu);
            if let Some(bytes) = file_size {
                let f = libc::rlimit {
                    rlim_cur: bytes as libc::rlim_t,
                    rlim_max: bytes as libc::rlim_t,
                };
                libc::setrlimit(libc::RLIMIT_FSIZE, &f);
            }
            Ok(())
        });
    }
    crate::sandbox::apply(
        &mut cmd,
        &worker_policy(exe, job, dir.path(), wrapper.as_ref()),
    )?;
    let limits = process::Limits {
        memory: job.host_memory_limit,
        processes: Some(WORKER_MAX_PROCESSES),
    };
    let out = process::run_limited(cmd, timeout, 16 << 20, limits)?;
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
    if let Some(why) = report.as_ref().and_then(|r| r.environment.clone()) {
        // Not the kernel's fault: stop with the environment's error (exit 2), spending
        // no debug round on the kernel.
        return Err(Error::NoGpu(why));
    }
    let fault = if let Some((held, limit)) = out.over_memory {
        Some(Fault {
            kind: FaultKind::Resource,
            message: memory_message(held, limit, out.memory_ceiling.as_ref()),
        })
    } else if let Some((count, limit)) = out.over_processes {
        Some(Fault {
            kind: FaultKind::Resource,
            message: format!(
                "the worker and what it started grew to {count} processes, over the limit of \
                 {limit}, and were stopped: a kernel's host code must not fork"
            ),
        })
    } else if let Some(limit) = limit_signal(out.status, cpu_seconds, file_size) {
        Some(Fault {
            kind: FaultKind::Resource,
            message: limit,
        })
    } else if out.timed_out {
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
        peak_rss: out.peak_rss,
        memory_ceiling: out.memory_ceiling,
    })
}

/// What a worker may touch: the system's and CUDA's libraries (the library path, the
/// CUDA installation, the toolkit `cutesmith setup` installs), this program, the one
/// shared object, the GPU; it writes only its temp directory (and, under a profiler, the
/// profiler's log file), and talks only to the wrapper over its own loopback.
fn worker_policy(
    exe: &Path,
    job: &Job,
    dir: &Path,
    wrapper: Option<&(&Path, Vec<String>)>,
) -> crate::sandbox::Policy {
    let mut p = crate::sandbox::Policy::new()
        .gpu()
        .write(dir)
        .read(exe)
        .read(crate::toolchain::cache_toolkit_dir());
    if let Some(so) = &job.shared_object {
        p = p.read(so);
    }
    for var in ["LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var) {
            for d in std::env::split_paths(&v).filter(|d| d.is_absolute()) {
                p = p.read(d);
            }
        }
    }
    if let Some((exe, args)) = wrapper {
        // The wrapper's own installation (bin/ and its siblings), and its log file.
        if let Some(root) = exe.parent().and_then(Path::parent) {
            p = p.read(root);
        }
        for pair in args.windows(2) {
            if pair[0] == "--log-file" {
                if let Some(parent) = Path::new(&pair[1]).parent() {
                    p = p.write(parent);
                }
            }
        }
        p = p.loopback();
    }
    p
}

/// The resource fault's text for a worker stopped at its host memory limit: the memory it
/// held, the limit, and the mechanism that enforced it.
fn memory_message(held: u64, limit: u64, ceiling: Option<&process::MemoryCeiling>) -> String {
    let held = crate::spec::human_bytes(held as f64);
    let limit = crate::spec::human_bytes(limit as f64);
    let how = "--host-memory, or [limits] host_memory in cutesmith.toml; default half of the \
               host's available memory";
    let advice = "raise the limit, or validate fewer or smaller shapes";
    match ceiling {
        Some(c @ process::MemoryCeiling::Cgroup { .. }) => format!(
            "the worker reached its limit of {limit} of host memory (enforced by the {}, \
             peak {held}; {how}) and the kernel's OOM killer stopped it: {advice}",
            c.mechanism()
        ),
        _ => format!(
            "the worker held {held} of host memory, over its limit of {limit} (enforced on \
             sampled resident memory; {how}), and was stopped: {advice}"
        ),
    }
}

/// The limit that ended the worker, when a limit's signal did: SIGXCPU (CPU time) or
/// SIGXFSZ (file size), named with its value.
fn limit_signal(
    status: Option<std::process::ExitStatus>,
    cpu_seconds: u64,
    file_size: Option<u64>,
) -> Option<String> {
    use std::os::unix::process::ExitStatusExt;
    match status?.signal()? {
        libc::SIGXCPU => Some(format!(
            "the worker used its {cpu_seconds} s of CPU time (four times the timeout, plus a \
             minute) and was stopped: the host code spins or computes far too much"
        )),
        libc::SIGXFSZ => Some(format!(
            "the worker tried to write a file larger than its limit of {} and was stopped",
            file_size.map_or_else(
                || "the limit".into(),
                |b| crate::spec::human_bytes(b as f64)
            )
        )),
        _ => None,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_env_drops_secrets_and_the_tf32_override() {
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
        assert!(!keys.contains(&"NVIDIA_TF32_OVERRIDE"));
        assert!(env.contains(&("HOME".to_string(), "/tmp/w".to_string())));
    }

    #[test]
    fn a_limit_signal_is_a_resource_fault_and_others_are_not() {
        use std::os::unix::process::ExitStatusExt;
        let status = |raw: i32| Some(std::process::ExitStatus::from_raw(raw));
        let cpu = limit_signal(status(libc::SIGXCPU), 1260, None).unwrap();
        assert!(cpu.contains("1260 s of CPU time"), "{cpu}");
        let fsize = limit_signal(status(libc::SIGXFSZ), 1260, Some(16 << 30)).unwrap();
        assert!(fsize.contains("limit of 17.2 GB"), "{fsize}");
        assert!(limit_signal(status(libc::SIGSEGV), 1260, None).is_none());
        assert!(limit_signal(status(3 << 8), 1260, None).is_none());
        assert!(limit_signal(None, 1260, None).is_none());
    }

    #[test]
    fn the_memory_fault_names_the_mechanism_that_held_the_limit() {
        let cgroup = process::MemoryCeiling::Cgroup {
            path: PathBuf::from("/sys/fs/cgroup/cutesmith-worker-1-0"),
            peak: Some(268_000_000),
        };
        let m = memory_message(268_000_000, 268_435_456, Some(&cgroup));
        assert!(m.contains("cgroup v2 memory.max"), "{m}");
        assert!(m.contains("limit of 268.4 MB"), "{m}");
        assert!(m.contains("peak 268.0 MB"), "{m}");
        let sampled = process::MemoryCeiling::Sampled {
            why_not_cgroup: "no cgroup v2 here".into(),
        };
        let m = memory_message(300_000_000, 268_435_456, Some(&sampled));
        assert!(m.contains("sampled resident memory"), "{m}");
        assert!(m.contains("held 300.0 MB"), "{m}");
        assert!(m.contains("over its limit of 268.4 MB"), "{m}");
        assert_eq!(m, memory_message(300_000_000, 268_435_456, None));
    }

    #[test]
    fn tail_keeps_the_end() {
        assert_eq!(tail("abcdef", 3), "...def");
        assert_eq!(tail("ab", 3), "ab");
    }
}
