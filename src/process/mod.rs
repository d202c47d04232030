//! Running a subprocess the way every tool call in cutesmith must: in its own process
//! group, with a wall-clock timeout that kills the whole group, and with captured output
//! capped (its beginning and its end kept) so a runaway tool cannot fill memory; and, for
//! workers, ceilings on the memory and the process count of the whole tree ([`run_limited`]):
//! a cgroup v2 `memory.max` where one can be made (the `cgroup` submodule), else a
//! sampled one.

mod cgroup;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a finished (or killed) subprocess left behind.
#[derive(Debug, Clone)]
pub struct ProcessOutput {
    /// Exit status; `None` when the process was killed for running past its timeout.
    pub status: Option<ExitStatus>,
    /// Captured standard output, at most the cap, lossily decoded.
    pub stdout: String,
    /// Captured standard error, at most the cap, lossily decoded.
    pub stderr: String,
    /// True when the timeout fired and the process group was killed.
    pub timed_out: bool,
    /// True when either stream was longer than the cap and was cut.
    pub truncated: bool,
    /// Wall-clock time from spawn to exit.
    pub elapsed: Duration,
    /// The largest resident memory the process and its descendants held together, as
    /// sampled while it ran (Linux `/proc`; 0 where that cannot be read).
    pub peak_rss: u64,
    /// `Some((held, limit))` when the process tree went over its memory limit and was
    /// stopped for it: `held` is the sampled resident memory over the limit, or, under a
    /// cgroup, the cgroup's `memory.peak` (the sampled peak where the kernel lacks it).
    pub over_memory: Option<(u64, u64)>,
    /// `Some((count, limit))` when the process tree held more processes than its limit
    /// and was killed for it.
    pub over_processes: Option<(usize, usize)>,
    /// What enforced the memory limit; `None` when there was none.
    pub memory_ceiling: Option<MemoryCeiling>,
}

/// The mechanism that held a process tree to its memory limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mechanism", rename_all = "snake_case")]
pub enum MemoryCeiling {
    /// A cgroup v2 `memory.max` (without swap): the kernel's OOM killer ends the tree at
    /// the limit. `path` is the cgroup's directory (removed after the run); `peak` its
    /// `memory.peak` in bytes, where the kernel has it (5.19+).
    Cgroup { path: PathBuf, peak: Option<u64> },
    /// The parent sampled the tree's resident memory every few milliseconds and killed
    /// it over the limit, because no cgroup could be made: `why_not_cgroup` says why.
    Sampled { why_not_cgroup: String },
}

impl MemoryCeiling {
    /// The mechanism in a few words, for messages.
    pub fn mechanism(&self) -> &'static str {
        match self {
            MemoryCeiling::Cgroup { .. } => "cgroup v2 memory.max",
            MemoryCeiling::Sampled { .. } => "sampled resident memory",
        }
    }
}

/// Ceilings [`run_limited`] enforces on a process tree.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// Bytes of the whole tree: a cgroup v2 `memory.max` where one can be made, else its
    /// sampled resident memory.
    pub memory: Option<u64>,
    /// Processes in the tree (a fork bomb is stopped within a sampling period).
    pub processes: Option<usize>,
}

impl ProcessOutput {
    /// True when the process ran to completion and exited with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Standard output and standard error, one after the other.
    pub fn combined(&self) -> String {
        let mut s = self.stdout.clone();
        if !s.is_empty() && !s.ends_with('\n') {
            s.push('\n');
        }
        s.push_str(&self.stderr);
        s
    }
}

/// Process groups started by [`run`] and not yet ended: what [`kill_all`] ends when the
/// program is interrupted.
static LIVE: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// Kills every process group [`run`] started that is still running (on Ctrl-C, before
/// exiting, so no nvcc or worker outlives cutesmith).
pub fn kill_all() {
    if let Ok(live) = LIVE.lock() {
        for pid in live.iter() {
            kill_group(*pid);
        }
    }
}

/// Default cap on each captured stream: CuTe template backtraces run to megabytes.
pub const DEFAULT_OUTPUT_CAP: usize = 8 << 20;

/// Runs `cmd` to completion or until `timeout`, killing its whole process group then.
///
/// Standard input is closed; both output streams are captured up to `cap` bytes each
/// (the rest is read and dropped so the child never blocks on a full pipe).
pub fn run(cmd: Command, timeout: Duration, cap: usize) -> Result<ProcessOutput> {
    run_limited(cmd, timeout, cap, Limits::default())
}

/// [`run`] with ceilings on the memory of the process and its descendants together and on
/// their number; over one, the whole group is killed and the output says which
/// (`over_memory`, `over_processes`).
///
/// The memory ceiling is a cgroup v2 `memory.max` when a child cgroup can be made under
/// this process's own (the child joins it between fork and exec; the kernel's OOM killer
/// enforces it; the cgroup is removed afterwards); otherwise, and whenever any step of
/// that fails, the parent samples the tree's resident memory every few milliseconds and
/// kills it over the limit. `memory_ceiling` says which held, and why not the cgroup.
/// The sampling runs in both cases: it measures the resident peak and counts the
/// processes.
pub fn run_limited(
    mut cmd: Command,
    timeout: Duration,
    cap: usize,
    limits: Limits,
) -> Result<ProcessOutput> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: the closure runs in the child between fork and exec and only calls
    // prctl(2), which is async-signal-safe. It makes the child die with SIGKILL when the
    // thread that started it goes away (cutesmith killed with -9): a hung worker must not
    // hold the GPU after its parent is gone.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
    let mut ceiling = None;
    let mut worker_cgroup = None;
    if let Some(memory) = limits.memory {
        match cgroup::WorkerCgroup::create(memory, limits.processes) {
            Ok(cg) => {
                let (procs, status) = cg.join_fds();
                // Registered after the caller's closures: under the sandbox it runs in the
                // sandboxed program (the sandbox's two waiting processes stay outside).
                // SAFETY: `join` makes two write(2) calls on descriptors that `cg`
                // opened before the fork and keeps open until after the spawn.
                unsafe {
                    cmd.pre_exec(move || {
                        cgroup::join(procs, status);
                        Ok(())
                    });
                }
                worker_cgroup = Some(cg);
            }
            Err(why_not_cgroup) => ceiling = Some(MemoryCeiling::Sampled { why_not_cgroup }),
        }
    }
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| Error::Spawn {
        program: program.clone(),
        source,
    })?;
    let pid = child.id() as i32;
    if let Some(cg) = &worker_cgroup {
        let running = matches!(child.try_wait(), Ok(None));
        if let Err(why_not_cgroup) = cg.check_joined(running) {
            // The child runs outside the cgroup: the sampler holds the ceiling instead.
            ceiling = Some(MemoryCeiling::Sampled { why_not_cgroup });
            worker_cgroup = None;
        }
    }
    if let Ok(mut live) = LIVE.lock() {
        live.push(pid);
    }
    let out_reader = child.stdout.take().map(|s| reader_thread(s, cap));
    let err_reader = child.stderr.take().map(|s| reader_thread(s, cap));

    let mut timed_out = false;
    let mut peak_rss = 0u64;
    let mut over_memory = None;
    let mut over_processes = None;
    let status = loop {
        let (rss, count) = tree_usage(pid);
        peak_rss = peak_rss.max(rss);
        if let Some(limit) = limits.memory {
            over_memory = match &worker_cgroup {
                Some(cg) => cg
                    .oom_killed()
                    .then(|| (cg.peak().unwrap_or(peak_rss), limit)),
                None => (rss > limit).then_some((rss, limit)),
            };
        }
        if let Some(limit) = limits
            .processes
            .filter(|l| over_memory.is_none() && count > *l)
        {
            over_processes = Some((count, limit));
        }
        if over_memory.is_some() || over_processes.is_some() {
            kill_group(pid);
            let _ = child.wait();
            break None;
        }
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(source) => {
                kill_group(pid);
                if let Ok(mut live) = LIVE.lock() {
                    live.retain(|p| *p != pid);
                }
                return Err(Error::Spawn { program, source });
            }
        }
        if start.elapsed() >= timeout {
            timed_out = true;
            kill_group(pid);
            // Reap the child so it does not linger as a zombie.
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(15));
    };
    // The group may still hold grandchildren (nvcc's cicc, ptxas): end them too.
    kill_group(pid);
    if let Some(cg) = worker_cgroup.take() {
        // An OOM kill the loop did not see before the child's exit still decides.
        if over_memory.is_none() && cg.oom_killed() {
            over_memory = limits
                .memory
                .map(|limit| (cg.peak().unwrap_or(peak_rss), limit));
        }
        ceiling = Some(MemoryCeiling::Cgroup {
            path: cg.path().to_path_buf(),
            peak: cg.peak(),
        });
        // Dropping it ends what is left in it and removes the directory.
        drop(cg);
    }
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|p| *p != pid);
    }
    let elapsed = start.elapsed();
    let (stdout, t1) = join_reader(out_reader);
    let (stderr, t2) = join_reader(err_reader);
    Ok(ProcessOutput {
        status,
        stdout,
        stderr,
        timed_out,
        truncated: t1 || t2,
        elapsed,
        peak_rss,
        over_memory,
        over_processes,
        memory_ceiling: ceiling,
    })
}

/// Resident bytes of process `pid` and every descendant (its threads' children, walked
/// through `/proc/<pid>/task/<tid>/children`), and how many processes that is; 0 bytes
/// when `/proc` cannot be read. The walk stops counting past 65536 processes.
pub fn tree_usage(pid: i32) -> (u64, usize) {
    let page = page_size();
    let mut total = 0u64;
    let mut stack = vec![pid];
    let mut seen = 0usize;
    while let Some(p) = stack.pop() {
        seen += 1;
        if seen > 65536 {
            break;
        }
        if let Ok(statm) = std::fs::read_to_string(format!("/proc/{p}/statm")) {
            let resident: u64 = statm
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            total += resident * page;
        }
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                if let Ok(children) = std::fs::read_to_string(t.path().join("children")) {
                    stack.extend(
                        children
                            .split_whitespace()
                            .filter_map(|c| c.parse::<i32>().ok()),
                    );
                }
            }
        }
    }
    (total, seen)
}

fn page_size() -> u64 {
    // SAFETY: sysconf(3) with a constant name reads a system constant.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as u64
    } else {
        4096
    }
}

/// Bytes of memory available to new work on this host (`MemAvailable` of
/// `/proc/meminfo`), when it can be read.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Sends SIGKILL to every process of the group led by `pid`.
pub fn kill_group(pid: i32) {
    if pid > 0 {
        // SAFETY: kill(2) with a negative pid addresses a process group; it touches no
        // memory of ours and its failure (ESRCH: the group is gone) is harmless.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

type Reader = std::thread::JoinHandle<(Vec<u8>, bool)>;

/// Reads a stream to its end, keeping at most `cap` bytes: the first half and the last
/// half when it is longer (a child's final line, such as a worker's result, survives any
/// amount of output before it), with a marker where the middle was cut.
fn reader_thread<R: Read + Send + 'static>(mut stream: R, cap: usize) -> Reader {
    std::thread::spawn(move || {
        let half = cap / 2;
        let mut head = Vec::new();
        let mut tail: Vec<u8> = Vec::new();
        let mut cut: u64 = 0;
        let mut buf = [0u8; 64 * 1024];
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut chunk = &buf[..n];
                    let room = half.saturating_sub(head.len());
                    if room > 0 {
                        let take = room.min(chunk.len());
                        head.extend_from_slice(&chunk[..take]);
                        chunk = &chunk[take..];
                    }
                    tail.extend_from_slice(chunk);
                    let keep = cap - half;
                    if tail.len() > 2 * keep.max(1) {
                        let drop = tail.len() - keep;
                        cut += drop as u64;
                        tail.drain(..drop);
                    }
                }
            }
        }
        let keep = cap - half;
        if tail.len() > keep {
            let drop = tail.len() - keep;
            cut += drop as u64;
            tail.drain(..drop);
        }
        let truncated = cut > 0;
        if truncated {
            head.extend_from_slice(format!("\n[... {cut} bytes cut ...]\n").as_bytes());
        }
        head.extend_from_slice(&tail);
        (head, truncated)
    })
}

fn join_reader(reader: Option<Reader>) -> (String, bool) {
    match reader.map(|r| r.join()) {
        Some(Ok((bytes, truncated))) => (String::from_utf8_lossy(&bytes).into_owned(), truncated),
        _ => (String::new(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_both_streams_and_status() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let out = run(cmd, Duration::from_secs(10), 1024).unwrap();
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(out.status.unwrap().code(), Some(3));
        assert!(!out.timed_out);
        assert!(!out.success());
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survived");
        let mut cmd = Command::new("sh");
        // A grandchild that would write the marker after 2 s if it survived the kill.
        cmd.arg("-c")
            .arg(format!("(sleep 2; touch {}) & sleep 30", marker.display()));
        let out = run(cmd, Duration::from_millis(300), 1024).unwrap();
        assert!(out.timed_out);
        assert!(out.status.is_none());
        assert!(out.elapsed < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(2500));
        assert!(!marker.exists(), "a grandchild outlived the group kill");
    }

    #[test]
    fn output_is_capped_and_keeps_the_end() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "yes x | head -c 100000; echo RESULT-LINE"]);
        let out = run(cmd, Duration::from_secs(10), 1000).unwrap();
        assert!(out.truncated);
        assert!(out.stdout.len() < 1100, "{}", out.stdout.len());
        assert!(out.stdout.starts_with("x\nx\n"));
        assert!(
            out.stdout.ends_with("RESULT-LINE\n"),
            "the last line must survive"
        );
        assert!(out.stdout.contains("bytes cut ..."));
    }

    #[test]
    fn the_memory_ceiling_names_its_mechanism() {
        let quick = || {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "echo ok"]);
            cmd
        };
        let out = run(quick(), Duration::from_secs(10), 1024).unwrap();
        assert_eq!(out.memory_ceiling, None);
        let limits = Limits {
            memory: Some(1 << 30),
            processes: Some(64),
        };
        let out = run_limited(quick(), Duration::from_secs(10), 1024, limits).unwrap();
        assert_eq!(out.stdout, "ok\n");
        assert!(out.over_memory.is_none());
        match out.memory_ceiling {
            Some(MemoryCeiling::Cgroup { path, .. }) => {
                assert!(!path.exists(), "{} was left behind", path.display());
            }
            Some(MemoryCeiling::Sampled { why_not_cgroup }) => {
                assert!(!why_not_cgroup.trim().is_empty());
            }
            None => panic!("a memory limit without a mechanism"),
        }
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        let cmd = Command::new("/nonexistent/cutesmith-no-such-tool");
        let err = run(cmd, Duration::from_secs(1), 10).unwrap_err();
        assert!(err.to_string().contains("could not run"));
    }
}
