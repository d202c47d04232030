//! A cgroup v2 memory ceiling for one process tree: a child cgroup of this process's own
//! cgroup with `memory.max` set to the limit, which the child joins between fork and exec,
//! so that the kernel (its OOM killer) holds the tree to the ceiling instead of the
//! parent's sampling.
//!
//! Whether one can be made depends on the host: `/sys/fs/cgroup` must be the unified
//! (v2) hierarchy, this process's cgroup must offer the `memory` controller, and that
//! controller must be (or become) enabled for its children. cgroup v2 lets a non-root
//! cgroup hand controllers to children only while it holds no processes itself, and this
//! code never moves the running program to make room: where any step fails,
//! [`WorkerCgroup::create`] says why, and the caller falls back to the sampled ceiling.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where the cgroup file system is mounted.
const MOUNT: &str = "/sys/fs/cgroup";

/// `statfs(2)` file system types (from the kernel's `magic.h`).
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// `pids.max` counts threads as well as processes (a CUDA process runs dozens), so it is
/// set to this many times the process limit: a backstop that stops a fork bomb between
/// two samples, while the sampled process count decides the verdict.
const TASKS_PER_PROCESS: usize = 16;

/// Numbers the cgroups this process makes, so that concurrent runs never share one.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// The counters of a cgroup's `memory.events` this code reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemoryEvents {
    /// Times the usage was about to pass `memory.max` (reclaim was forced).
    pub max: u64,
    /// Times reclaim could not keep the usage under `memory.max`.
    pub oom: u64,
    /// Processes the OOM killer ended in the cgroup and its descendants.
    pub oom_kill: u64,
}

/// Parses the text of a `memory.events` file (`key value` lines); missing or malformed
/// counters read as 0.
pub(crate) fn parse_memory_events(text: &str) -> MemoryEvents {
    let mut ev = MemoryEvents::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(key), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        match key {
            "max" => ev.max = value,
            "oom" => ev.oom = value,
            "oom_kill" => ev.oom_kill = value,
            _ => {}
        }
    }
    ev
}

/// This process's cgroup v2 path (`/` or `/a/b`, relative to the cgroup mount) from the
/// text of `/proc/self/cgroup`, or why it cannot be used for a memory ceiling: no
/// `0::` line (no unified hierarchy), or the memory controller bound to a cgroup v1
/// hierarchy (a hybrid setup, where the unified one holds no memory controller).
pub(crate) fn parse_proc_cgroup(text: &str) -> Result<String, String> {
    let mut unified = None;
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            unified = Some(path);
        } else if controllers.split(',').any(|c| c == "memory") {
            return Err(format!(
                "the memory controller is on a cgroup v1 hierarchy (`{line}` in \
                 /proc/self/cgroup)"
            ));
        }
    }
    let path = unified.ok_or_else(|| {
        "/proc/self/cgroup has no `0::` line: this process is in no cgroup v2 hierarchy".to_string()
    })?;
    if !path.starts_with('/') || path.split('/').any(|part| part == "..") {
        return Err(format!(
            "this process's cgroup v2 path `{path}` lies outside its cgroup namespace"
        ));
    }
    Ok(path.to_string())
}

/// Ok when `mount` is a cgroup2 file system; otherwise what it is instead.
fn check_cgroup2(mount: &Path) -> Result<(), String> {
    let c_path = std::ffi::CString::new(mount.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{} holds a NUL byte", mount.display()))?;
    // SAFETY: statfs(2) on a NUL-terminated path, writing into a zeroed struct we own.
    // (`f_type` is an i64 on x86-64 and aarch64, another width elsewhere.)
    #[allow(clippy::unnecessary_cast)]
    let (r, f_type) = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        let r = libc::statfs(c_path.as_ptr(), &mut st);
        (r, st.f_type as i64)
    };
    if r != 0 {
        return Err(format!(
            "cannot statfs {}: {}",
            mount.display(),
            io::Error::last_os_error()
        ));
    }
    match f_type {
        CGROUP2_SUPER_MAGIC => Ok(()),
        TMPFS_MAGIC => Err(format!(
            "{} is a tmpfs holding cgroup v1 hierarchies (a legacy or hybrid setup), not \
             the cgroup v2 file system",
            mount.display()
        )),
        CGROUP_SUPER_MAGIC => Err(format!(
            "{} is a cgroup v1 hierarchy, not the cgroup v2 file system",
            mount.display()
        )),
        other => Err(format!(
            "{} is not the cgroup v2 file system (file system type {other:#x})",
            mount.display()
        )),
    }
}

/// The controllers to enable in a cgroup's `cgroup.subtree_control` before a child of it
/// can carry a memory ceiling (and a task limit when `pids` is offered), given the texts
/// of its `cgroup.controllers` and `cgroup.subtree_control`; an error when `memory` is not
/// offered at all.
pub(crate) fn controllers_to_enable(
    controllers: &str,
    subtree_control: &str,
) -> Result<Vec<&'static str>, String> {
    let offered: Vec<&str> = controllers.split_whitespace().collect();
    let enabled: Vec<&str> = subtree_control.split_whitespace().collect();
    if !offered.contains(&"memory") {
        return Err(format!(
            "the memory controller is not offered to this process's cgroup (its \
             controllers: {})",
            if offered.is_empty() {
                "none".to_string()
            } else {
                offered.join(" ")
            }
        ));
    }
    Ok(["memory", "pids"]
        .into_iter()
        .filter(|c| offered.contains(c) && !enabled.contains(c))
        .collect())
}

/// A cgroup made for one child process tree, removed when dropped.
#[derive(Debug)]
pub(crate) struct WorkerCgroup {
    dir: PathBuf,
    /// The cgroup's `cgroup.procs`, open for writing before the fork (see [`join`]).
    procs: File,
    /// A pipe on which [`join`] reports a failure to join (an `errno`, 4 bytes).
    status_read: OwnedFd,
    status_write: OwnedFd,
    /// `oom_kill` of `memory.events` when the cgroup was made.
    oom_kills_before: u64,
}

impl WorkerCgroup {
    /// Makes a cgroup under this process's own one that holds whoever joins it to
    /// `memory` bytes (without swap) and, when `processes` is given, to a task count well
    /// above it; or says why none can be made here.
    pub(crate) fn create(memory: u64, processes: Option<usize>) -> Result<Self, String> {
        let mount = Path::new(MOUNT);
        check_cgroup2(mount)?;
        let text = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let own = parse_proc_cgroup(&text)?;
        Self::create_under(&mount.join(own.trim_start_matches('/')), memory, processes)
    }

    /// [`create`](Self::create) under the cgroup directory `parent`.
    fn create_under(parent: &Path, memory: u64, processes: Option<usize>) -> Result<Self, String> {
        let read = |name: &str| {
            let p = parent.join(name);
            std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        };
        let subtree = parent.join("cgroup.subtree_control");
        let mut enabled = read("cgroup.subtree_control")?;
        for controller in controllers_to_enable(&read("cgroup.controllers")?, &enabled)? {
            match std::fs::write(&subtree, format!("+{controller}")) {
                Ok(()) => {
                    enabled.push(' ');
                    enabled.push_str(controller);
                }
                // The task limit is a backstop: without it the ceiling still stands.
                Err(_) if controller != "memory" => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    return Err(format!(
                        "cannot enable the memory controller for the children of {}: this \
                         process is a member of that cgroup, and cgroup v2 lets a non-root \
                         cgroup hand controllers to its children only while it holds no \
                         processes ({e})",
                        parent.display()
                    ))
                }
                Err(e) => {
                    return Err(format!(
                        "cannot enable the memory controller in {}: {e}",
                        subtree.display()
                    ))
                }
            }
        }
        let dir = parent.join(format!(
            "cutesmith-worker-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        // From here on a failure removes the directory again.
        let guard = DirGuard(dir.clone());
        let set = |name: &str, value: String| {
            let p = dir.join(name);
            std::fs::write(&p, value).map_err(|e| format!("cannot write {}: {e}", p.display()))
        };
        set("memory.max", memory.to_string())?;
        // Absent without swap accounting; then there is no swap to escape to either.
        let _ = set("memory.swap.max", "0".into());
        // The OOM killer ends the whole tree at once, as the sampled ceiling does.
        let _ = set("memory.oom.group", "1".into());
        if let Some(n) = processes {
            if enabled.split_whitespace().any(|c| c == "pids") {
                set("pids.max", n.saturating_mul(TASKS_PER_PROCESS).to_string())?;
            }
        }
        let procs_path = dir.join("cgroup.procs");
        // The kernel provides the file; `create` only matters in a stand-in directory.
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&procs_path)
            .map_err(|e| format!("cannot open {}: {e}", procs_path.display()))?;
        let (status_read, status_write) =
            status_pipe().map_err(|e| format!("cannot make a pipe: {e}"))?;
        let oom_kills_before = events_in(&dir).oom_kill;
        std::mem::forget(guard);
        Ok(WorkerCgroup {
            dir,
            procs,
            status_read,
            status_write,
            oom_kills_before,
        })
    }

    /// The cgroup's directory.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// The descriptors [`join`] takes in the child: `cgroup.procs` and the status pipe.
    pub(crate) fn join_fds(&self) -> (RawFd, RawFd) {
        (self.procs.as_raw_fd(), self.status_write.as_raw_fd())
    }

    /// After the spawn: Ok when the child joined, or why it did not (the failure
    /// [`join`] reported, or an empty cgroup while the child still runs).
    pub(crate) fn check_joined(&self, child_running: bool) -> Result<(), String> {
        let mut errno = [0u8; 4];
        // SAFETY: a read(2) into a local buffer from a non-blocking pipe we own.
        let n = unsafe {
            libc::read(
                self.status_read.as_raw_fd(),
                errno.as_mut_ptr().cast(),
                errno.len(),
            )
        };
        if n == 4 {
            return Err(format!(
                "the child could not join {}: {}",
                self.dir.display(),
                io::Error::from_raw_os_error(i32::from_ne_bytes(errno))
            ));
        }
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        if child_running && procs.trim().is_empty() {
            return Err(format!(
                "the child started but is not in {}",
                self.dir.display()
            ));
        }
        Ok(())
    }

    /// True when the OOM killer has ended a process of the cgroup since it was made.
    pub(crate) fn oom_killed(&self) -> bool {
        events_in(&self.dir).oom_kill > self.oom_kills_before
    }

    /// The most memory the cgroup was charged at once (`memory.peak`, Linux 5.19+).
    pub(crate) fn peak(&self) -> Option<u64> {
        std::fs::read_to_string(self.dir.join("memory.peak"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for WorkerCgroup {
    /// Ends whatever is still in the cgroup (`cgroup.kill`, Linux 5.14+) and removes it.
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        remove_dir(&self.dir);
    }
}

/// Removes a half-made cgroup directory unless forgotten.
struct DirGuard(PathBuf);

impl Drop for DirGuard {
    fn drop(&mut self) {
        remove_dir(&self.0);
    }
}

/// Removes a cgroup directory, retrying for up to two seconds while it is busy (its last
/// processes are still exiting); gives up silently after that or on any other error.
fn remove_dir(dir: &Path) {
    let start = Instant::now();
    loop {
        match std::fs::remove_dir(dir) {
            Err(e)
                if e.raw_os_error() == Some(libc::EBUSY)
                    && start.elapsed() < Duration::from_secs(2) =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => return,
        }
    }
}

/// The `memory.events` counters of the cgroup at `dir` (zeros when unreadable).
fn events_in(dir: &Path) -> MemoryEvents {
    std::fs::read_to_string(dir.join("memory.events"))
        .map(|t| parse_memory_events(&t))
        .unwrap_or_default()
}

/// A non-blocking, close-on-exec pipe: its read end and its write end.
fn status_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2(2) fills the two-element array; each descriptor it returns is new
    // and owned by exactly one OwnedFd.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is open as `procs`;
/// when the kernel refuses, writes the `errno` to `status` for
/// [`WorkerCgroup::check_joined`] and carries on (the parent then samples instead).
///
/// # Safety
///
/// Meant for the child between fork and exec: it makes only write(2) calls on
/// descriptors opened before the fork, and allocates nothing.
pub(crate) unsafe fn join(procs: RawFd, status: RawFd) {
    let n = libc::write(procs, b"0".as_ptr().cast(), 1);
    if n != 1 {
        let errno = (*libc::__errno_location()).to_ne_bytes();
        libc::write(status, errno.as_ptr().cast(), errno.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unified_path_is_read_from_a_pure_v2_host() {
        assert_eq!(
            parse_proc_cgroup("0::/user.slice/user-1000.slice/session-2.scope\n").unwrap(),
            "/user.slice/user-1000.slice/session-2.scope"
        );
        assert_eq!(parse_proc_cgroup("0::/\n").unwrap(), "/");
    }

    #[test]
    fn a_hybrid_host_with_memory_on_v1_is_refused_with_the_line() {
        let hybrid = "9:name=systemd:/\n8:pids:/\n4:memory:/x\n1:cpu,cpuacct:/\n0::/\n";
        let why = parse_proc_cgroup(hybrid).unwrap_err();
        assert!(why.contains("cgroup v1"), "{why}");
        assert!(why.contains("4:memory:/x"), "{why}");
        // A v1 hierarchy without the memory controller leaves the unified path usable.
        assert_eq!(parse_proc_cgroup("8:pids:/\n0::/w\n").unwrap(), "/w");
    }

    #[test]
    fn a_pure_v1_host_and_odd_paths_are_refused() {
        let why = parse_proc_cgroup("5:cpu:/\n4:pids:/x\n").unwrap_err();
        assert!(why.contains("no `0::` line"), "{why}");
        assert!(parse_proc_cgroup("").is_err());
        let why = parse_proc_cgroup("0::/../../outside\n").unwrap_err();
        assert!(why.contains("outside its cgroup namespace"), "{why}");
    }

    #[test]
    fn memory_events_are_parsed_and_unknown_lines_skipped() {
        let text = "low 0\nhigh 0\nmax 17\noom 2\noom_kill 1\noom_group_kill 1\n";
        assert_eq!(
            parse_memory_events(text),
            MemoryEvents {
                max: 17,
                oom: 2,
                oom_kill: 1
            }
        );
        assert_eq!(parse_memory_events(""), MemoryEvents::default());
        assert_eq!(parse_memory_events("oom_kill x\nmax\n").oom_kill, 0);
    }

    #[test]
    fn controllers_are_enabled_only_where_missing_and_memory_is_required() {
        assert_eq!(
            controllers_to_enable("cpu io memory pids\n", "\n").unwrap(),
            vec!["memory", "pids"]
        );
        assert_eq!(
            controllers_to_enable("cpu memory pids", "memory").unwrap(),
            vec!["pids"]
        );
        assert!(controllers_to_enable("memory", "memory")
            .unwrap()
            .is_empty());
        let why = controllers_to_enable("cpu pids", "").unwrap_err();
        assert!(why.contains("controllers: cpu pids"), "{why}");
        let why = controllers_to_enable("", "").unwrap_err();
        assert!(why.contains("controllers: none"), "{why}");
    }

    #[test]
    fn a_cgroup_is_laid_out_and_read_back_in_a_stand_in_directory() {
        // A plain directory standing in for a cgroup: the files the kernel would provide
        // are plain files here, so what `create_under` writes can be read back.
        let parent = tempfile::tempdir().unwrap();
        std::fs::write(
            parent.path().join("cgroup.controllers"),
            "cpu memory pids\n",
        )
        .unwrap();
        std::fs::write(parent.path().join("cgroup.subtree_control"), "\n").unwrap();
        let cg = WorkerCgroup::create_under(parent.path(), 256 << 20, Some(256)).unwrap();
        let dir = cg.path().to_path_buf();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(&format!("cutesmith-worker-{}-", std::process::id())),
            "{name}"
        );
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("memory.max"), (256u64 << 20).to_string());
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("pids.max"), "4096");
        // The last controller written; the kernel would have kept both.
        assert_eq!(
            std::fs::read_to_string(parent.path().join("cgroup.subtree_control")).unwrap(),
            "+pids"
        );
        assert!(!cg.oom_killed());
        assert_eq!(cg.peak(), None);
        std::fs::write(dir.join("memory.events"), "max 3\noom 1\noom_kill 1\n").unwrap();
        std::fs::write(dir.join("memory.peak"), "268435456\n").unwrap();
        assert!(cg.oom_killed());
        assert_eq!(cg.peak(), Some(256 << 20));
        // Nothing joined: the empty cgroup.procs is noticed while the child runs.
        let why = cg.check_joined(true).unwrap_err();
        assert!(why.contains("is not in"), "{why}");
        assert!(cg.check_joined(false).is_ok());
        // A failure the child reports through the pipe is named.
        let (_, status) = cg.join_fds();
        let errno = libc::EACCES.to_ne_bytes();
        // SAFETY: a write(2) of a local buffer to the pipe the cgroup owns.
        assert_eq!(
            unsafe { libc::write(status, errno.as_ptr().cast(), errno.len()) },
            4
        );
        let why = cg.check_joined(false).unwrap_err();
        assert!(why.contains("could not join"), "{why}");
        assert!(why.contains("ermission denied"), "{why}");
    }

    #[test]
    fn no_cgroup_is_made_where_memory_is_not_offered() {
        let parent = tempfile::tempdir().unwrap();
        std::fs::write(parent.path().join("cgroup.controllers"), "cpu io\n").unwrap();
        std::fs::write(parent.path().join("cgroup.subtree_control"), "").unwrap();
        let why = WorkerCgroup::create_under(parent.path(), 1 << 30, None).unwrap_err();
        assert!(why.contains("not offered"), "{why}");
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 2);
    }

    #[test]
    fn this_host_makes_a_cgroup_or_says_why_not() {
        match WorkerCgroup::create(64 << 20, Some(16)) {
            Ok(cg) => {
                let dir = cg.path().to_path_buf();
                let max = std::fs::read_to_string(dir.join("memory.max")).unwrap();
                assert_eq!(max.trim(), (64u64 << 20).to_string());
                drop(cg);
                assert!(!dir.exists(), "{} was left behind", dir.display());
            }
            Err(why) => {
                eprintln!("no cgroup here: {why}");
                assert!(!why.trim().is_empty());
            }
        }
    }
}
