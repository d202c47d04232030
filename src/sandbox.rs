//! The sandbox every process that runs model-written code starts in: the worker (which
//! loads a candidate's shared object) and nvcc (which reads a candidate's source).
//!
//! Three layers, all set up in the child between fork and exec ([`apply`]):
//!
//! 1. **Namespaces**: new user, mount, PID, network, IPC and UTS namespaces. The program
//!    runs under a minimal init (process 1) of its own PID namespace with a fresh `/proc`,
//!    so no other process of the machine (its parent `cutesmith` included) is visible; its network namespace has
//!    only a loopback interface (down, unless the policy brings it up for a profiler that
//!    talks to its target over loopback).
//! 2. **Landlock** (Linux 5.13+): reads and execution only beneath the policy's read
//!    paths (the system's libraries, the toolkit, the CUTLASS headers, the one shared
//!    object), writes only beneath its write paths (the process's own temp directory),
//!    the namespace's own `/proc` and private `/dev/shm` and, for GPU processes, the
//!    `/dev` nodes with device ioctls; from Landlock ABI 4 on, TCP bind and connect are
//!    denied too.
//! 3. **seccomp**: `socket(2)` for the internet, packet and netlink families and
//!    `io_uring_setup(2)` fail with EACCES.
//!
//! Everything the child needs is prepared before the fork (paths as C strings, the map
//! lines, the BPF program): between fork and exec the closure only makes system calls.
//! [`status`] probes once whether this machine can do all of it; where it cannot, a
//! sandboxed spawn is an error naming `--no-sandbox` ([`disable`]).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::error::{Error, Result};

// ---------------------------------------------------------------------------------------
// Policy
// ---------------------------------------------------------------------------------------

/// What a sandboxed process may touch.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    gpu: bool,
    loopback: bool,
}

/// System trees every process needs to read: the dynamic loader and libraries, the
/// compilers, `/etc` (the loader cache, locale), and `/opt` where vendor toolkits live.
const SYSTEM_READ: &[&str] = &[
    "/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/opt",
];

impl Policy {
    /// A policy with read access to the system trees and nothing else.
    pub fn new() -> Self {
        Policy {
            read: SYSTEM_READ.iter().map(PathBuf::from).collect(),
            ..Policy::default()
        }
    }

    /// Allows reading and executing beneath `path` (a directory) or `path` itself (a file).
    pub fn read(mut self, path: impl Into<PathBuf>) -> Self {
        self.read.push(path.into());
        self
    }

    /// Allows everything beneath `path` (the process's own temp directory).
    pub fn write(mut self, path: impl Into<PathBuf>) -> Self {
        self.write.push(path.into());
        self
    }

    /// Opens the GPU: read, write and device ioctls on `/dev`, reads of `/sys`.
    pub fn gpu(mut self) -> Self {
        self.gpu = true;
        self
    }

    /// Brings up the loopback interface of the private network namespace and lets TCP
    /// through (Nsight Compute and compute-sanitizer talk to the program they wrap over
    /// loopback); the machine's own network stays out of reach.
    pub fn loopback(mut self) -> Self {
        self.loopback = true;
        self
    }

    /// The read paths, for messages.
    pub fn read_paths(&self) -> &[PathBuf] {
        &self.read
    }
}

// ---------------------------------------------------------------------------------------
// Enforcement and the machine's ability
// ---------------------------------------------------------------------------------------

static DISABLED: AtomicBool = AtomicBool::new(false);

/// Turns the sandbox off for this process (`--no-sandbox`): model-written code then
/// runs with the user's rights.
pub fn disable() {
    DISABLED.store(true, Ordering::SeqCst);
}

/// Whether `--no-sandbox` turned the sandbox off.
pub fn disabled() -> bool {
    DISABLED.load(Ordering::SeqCst)
}

/// What this machine offers, probed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Namespaces and Landlock work; the Landlock ABI version.
    Available { landlock_abi: u32 },
    /// The sandbox cannot be set up here, and why.
    Unavailable(String),
}

/// Probes (once) whether a child can be started in the sandbox: Landlock offered by the
/// kernel, and `/bin/true` run to completion inside the namespaces and the rules.
pub fn status() -> &'static Status {
    static STATUS: OnceLock<Status> = OnceLock::new();
    STATUS.get_or_init(probe)
}

fn probe() -> Status {
    let abi = landlock_abi();
    if abi < 1 {
        return Status::Unavailable(
            "the kernel offers no Landlock (Linux 5.13 or later with Landlock enabled in the \
             LSM list)"
                .into(),
        );
    }
    let Some(truth) = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
    else {
        return Status::Unavailable("no /bin/true to probe with".into());
    };
    let mut cmd = Command::new(truth);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if let Err(e) = install(&mut cmd, &Policy::new()) {
        return Status::Unavailable(e.to_string());
    }
    match cmd.status() {
        Ok(s) if s.success() => Status::Available { landlock_abi: abi },
        Ok(s) => Status::Unavailable(format!("a probe in the sandbox ended with {s}")),
        Err(e) => Status::Unavailable(format!(
            "a probe could not start in the sandbox: {e} (user namespaces disabled? see \
             /proc/sys/kernel/unprivileged_userns_clone and \
             /proc/sys/user/max_user_namespaces)"
        )),
    }
}

/// One line for `cutesmith doctor`: what the sandbox does here, or why it cannot.
pub fn describe() -> String {
    if disabled() {
        return "OFF (--no-sandbox): model-written code runs with your rights".into();
    }
    match status() {
        Status::Available { landlock_abi } => {
            let cost = overhead_ms()
                .map(|(bare, boxed)| format!("; start {boxed:.1} ms vs {bare:.1} ms bare"))
                .unwrap_or_default();
            format!(
                "on: user, mount, PID, network, IPC and UTS namespaces, Landlock ABI \
                 {landlock_abi}, seccomp socket filter{cost}"
            )
        }
        Status::Unavailable(why) => format!(
            "UNAVAILABLE: {why}; model-written code is refused unless --no-sandbox is given"
        ),
    }
}

/// Median start-to-exit time of `/bin/true` bare and in the sandbox, in ms (5 runs each).
pub fn overhead_ms() -> Option<(f64, f64)> {
    let truth = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).is_file())?;
    let time = |boxed: bool| -> Option<f64> {
        let mut t = Vec::new();
        for _ in 0..5 {
            let mut cmd = Command::new(truth);
            if boxed {
                install(&mut cmd, &Policy::new()).ok()?;
            }
            let start = std::time::Instant::now();
            cmd.status().ok()?.success().then_some(())?;
            t.push(start.elapsed().as_secs_f64() * 1e3);
        }
        t.sort_by(f64::total_cmp);
        Some(t[t.len() / 2])
    };
    Some((time(false)?, time(true)?))
}

/// Makes `cmd` start in the sandbox described by `policy`; with `--no-sandbox` it does
/// nothing. An error when the machine cannot sandbox.
pub fn apply(cmd: &mut Command, policy: &Policy) -> Result<()> {
    if disabled() {
        return Ok(());
    }
    match status() {
        Status::Available { .. } => install(cmd, policy),
        Status::Unavailable(why) => Err(Error::Sandbox(format!(
            "{why}; model-written code is not run outside the sandbox unless you pass \
             --no-sandbox (it then runs with your rights, and the session records that)"
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// Landlock, seccomp and namespace constants (from the kernel's UAPI headers)
// ---------------------------------------------------------------------------------------

const LL_EXECUTE: u64 = 1 << 0;
const LL_WRITE_FILE: u64 = 1 << 1;
const LL_READ_FILE: u64 = 1 << 2;
const LL_READ_DIR: u64 = 1 << 3;
const LL_TRUNCATE: u64 = 1 << 14;
const LL_IOCTL_DEV: u64 = 1 << 15;
/// Rights that apply to a regular file (a rule on a file may hold only these).
const LL_FILE_RIGHTS: u64 = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV;
const LL_NET_BIND_TCP: u64 = 1 << 0;
const LL_NET_CONNECT_TCP: u64 = 1 << 1;
const LL_RULE_PATH_BENEATH: libc::c_int = 1;
const LL_CREATE_RULESET_VERSION: u32 = 1 << 0;

/// Every filesystem right the kernel's Landlock ABI `abi` knows.
fn fs_rights(abi: u32) -> u64 {
    let mut r = (1u64 << 13) - 1; // ABI 1: execute .. make_sym
    if abi >= 2 {
        r |= 1 << 13; // refer
    }
    if abi >= 3 {
        r |= LL_TRUNCATE;
    }
    if abi >= 5 {
        r |= LL_IOCTL_DEV;
    }
    r
}

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The kernel's Landlock ABI version, 0 when it offers none.
fn landlock_abi() -> u32 {
    // SAFETY: the documented version query: NULL attribute, size 0.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            LL_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 {
        0
    } else {
        v as u32
    }
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// socket(2) families refused inside: internet, packet, netlink... everything but local
/// (AF_UNIX) sockets, which CUDA's libraries use.
const DENIED_FAMILIES: &[libc::c_int] = &[
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_PACKET,
    libc::AF_NETLINK,
    libc::AF_VSOCK,
];

fn bpf(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The seccomp program: another architecture's system calls are killed; `socket` of a
/// denied family and `io_uring_setup` (whose operations would bypass the filter) fail
/// with EACCES; everything else is allowed.
fn seccomp_program() -> Vec<libc::sock_filter> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    const NR: u32 = 0; // offsetof(struct seccomp_data, nr)
    const ARCH: u32 = 4;
    const ARG0: u32 = 16;
    let deny = libc::SECCOMP_RET_ERRNO | (libc::EACCES as u32 & libc::SECCOMP_RET_DATA);
    let n = DENIED_FAMILIES.len() as u8;
    let mut p = vec![
        bpf(BPF_LD | BPF_W | BPF_ABS, 0, 0, ARCH),
        bpf(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, AUDIT_ARCH),
        bpf(BPF_RET | BPF_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        bpf(BPF_LD | BPF_W | BPF_ABS, 0, 0, NR),
        bpf(
            BPF_JMP | BPF_JEQ | BPF_K,
            0,
            1,
            libc::SYS_io_uring_setup as u32,
        ),
        bpf(BPF_RET | BPF_K, 0, 0, deny),
        // Not socket(2): to the allow after the family checks.
        bpf(BPF_JMP | BPF_JEQ | BPF_K, 0, n + 1, libc::SYS_socket as u32),
        bpf(BPF_LD | BPF_W | BPF_ABS, 0, 0, ARG0),
    ];
    for (i, fam) in DENIED_FAMILIES.iter().enumerate() {
        // A match jumps to the deny after the remaining checks and the allow.
        let to_deny = (DENIED_FAMILIES.len() - i) as u8;
        p.push(bpf(BPF_JMP | BPF_JEQ | BPF_K, to_deny, 0, *fam as u32));
    }
    p.push(bpf(BPF_RET | BPF_K, 0, 0, libc::SECCOMP_RET_ALLOW));
    p.push(bpf(BPF_RET | BPF_K, 0, 0, deny));
    p
}

// ---------------------------------------------------------------------------------------
// The child's side
// ---------------------------------------------------------------------------------------

/// One Landlock rule: a path opened in the child, and the rights beneath it.
struct Rule {
    path: CString,
    access: u64,
}

/// Everything the child needs, built before the fork.
struct Prepared {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    rules: Vec<Rule>,
    tmpfs: CString,
    dev_shm: CString,
    abi: u32,
    handled_fs: u64,
    handled_net: u64,
    filter: Vec<libc::sock_filter>,
    loopback: bool,
    hostname: &'static [u8],
    setgroups: CString,
    uid_map_path: CString,
    gid_map_path: CString,
    proc_src: CString,
    proc_dir: CString,
    root: CString,
}

fn cstring(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

fn prepare(policy: &Policy) -> Result<Prepared> {
    let abi = landlock_abi();
    let all = fs_rights(abi);
    let read_dir = (LL_EXECUTE | LL_READ_FILE | LL_READ_DIR) & all;
    let mut rules = Vec::new();
    let mut add = |p: &Path, access: u64| {
        // Paths that do not exist here (no /lib32) need no rule.
        let Ok(meta) = std::fs::metadata(p) else {
            return;
        };
        let access = if meta.is_dir() {
            access
        } else {
            access & LL_FILE_RIGHTS
        };
        if let Some(path) = cstring(p) {
            rules.push(Rule { path, access });
        }
    };
    for p in &policy.read {
        add(p, read_dir);
    }
    for p in &policy.write {
        add(p, all);
    }
    if policy.gpu {
        add(Path::new("/sys"), read_dir);
        add(
            Path::new("/dev"),
            (LL_READ_FILE | LL_WRITE_FILE | LL_READ_DIR | LL_IOCTL_DEV | LL_TRUNCATE) & all,
        );
    } else {
        // /dev/null, /dev/urandom and the like.
        add(
            Path::new("/dev"),
            (LL_READ_FILE | LL_WRITE_FILE | LL_READ_DIR) & all,
        );
    }
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let c = |s: &str| CString::new(s).map_err(|e| Error::Sandbox(e.to_string()));
    Ok(Prepared {
        uid_map: format!("{uid} {uid} 1\n").into_bytes(),
        gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        rules,
        tmpfs: c("tmpfs")?,
        dev_shm: c("/dev/shm")?,
        abi,
        handled_fs: all,
        handled_net: if abi >= 4 && !policy.loopback {
            LL_NET_BIND_TCP | LL_NET_CONNECT_TCP
        } else {
            0
        },
        filter: seccomp_program(),
        loopback: policy.loopback,
        hostname: b"cutesmith-sandbox",
        setgroups: c("/proc/self/setgroups")?,
        uid_map_path: c("/proc/self/uid_map")?,
        gid_map_path: c("/proc/self/gid_map")?,
        proc_src: c("proc")?,
        proc_dir: c("/proc")?,
        root: c("/")?,
    })
}

/// The last OS error, for the closure's early returns.
fn os_err() -> io::Error {
    io::Error::last_os_error()
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(os_err())
    } else {
        Ok(())
    }
}

/// Writes `data` to the file at `path` (async-signal-safe).
fn write_file(path: &CString, data: &[u8]) -> io::Result<()> {
    // SAFETY: plain system calls on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(os_err());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = if n < 0 || n as usize != data.len() {
            Some(os_err())
        } else {
            None
        };
        libc::close(fd);
        err.map_or(Ok(()), Err)
    }
}

/// Runs in the child between fork and exec: only system calls on prepared data.
fn enter(p: &Prepared) -> io::Result<()> {
    // SAFETY: every call below is a system call on data prepared before the fork (no
    // allocation, no locks); the middle process only waits and exits.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        check(libc::unshare(
            libc::CLONE_NEWUSER
                | libc::CLONE_NEWNS
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWNET
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS,
        ))?;
        write_file(&p.setgroups, b"deny")?;
        write_file(&p.uid_map_path, &p.uid_map)?;
        write_file(&p.gid_map_path, &p.gid_map)?;

        // The new PID namespace takes effect for children: fork once more. The middle
        // process (outside the namespace) waits for its init and leaves with the status
        // of the sandboxed program, which the init sends through `status`.
        let mut status = [0 as libc::c_int; 2];
        check(libc::pipe2(status.as_mut_ptr(), libc::O_CLOEXEC))?;
        let pid = libc::fork();
        if pid < 0 {
            return Err(os_err());
        }
        if pid > 0 {
            // Keep only the status pipe (the spawn's error pipe closes, so that the parent
            // sees the program's exec), then mirror the program's end.
            keep_only(status[0]);
            let mut st: libc::c_int = 0;
            wait_for(pid, &mut st);
            let mut program: libc::c_int = 0;
            let n = libc::read(3, (&mut program as *mut libc::c_int).cast(), 4);
            if n == 4 {
                st = program;
            }
            if libc::WIFSIGNALED(st) {
                let sig = libc::WTERMSIG(st);
                libc::signal(sig, libc::SIG_DFL);
                libc::kill(libc::getpid(), sig);
            }
            libc::_exit(if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st)
            } else {
                125
            });
        }

        // The sandboxed process: PID 1 of its namespace.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        check(libc::mount(
            std::ptr::null(),
            p.root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            p.proc_src.as_ptr(),
            p.proc_dir.as_ptr(),
            p.proc_src.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ))?;
        // A private /dev/shm (POSIX shared memory of the CUDA libraries and profilers),
        // gone with the namespace; the machine's own stays out of reach.
        let shm_private = libc::mount(
            p.tmpfs.as_ptr(),
            p.dev_shm.as_ptr(),
            p.tmpfs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            std::ptr::null(),
        ) == 0;
        check(libc::sethostname(
            p.hostname.as_ptr().cast(),
            p.hostname.len(),
        ))?;
        if p.loopback {
            loopback_up()?;
        }

        // PID 1 stays a plain init: the program runs as its child, so that signals reach
        // it as they would outside (a process 1 ignores the ones it has no handler for)
        // and its orphans are reaped; when the init leaves, the kernel ends them all.
        let program = libc::fork();
        if program < 0 {
            return Err(os_err());
        }
        if program > 0 {
            keep_only(status[1]);
            let mut st: libc::c_int = 0;
            wait_for(program, &mut st);
            libc::write(3, (&st as *const libc::c_int).cast(), 4);
            libc::_exit(0);
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        libc::close(status[0]);
        libc::close(status[1]);

        // Landlock.
        let attr = RulesetAttr {
            handled_access_fs: p.handled_fs,
            handled_access_net: p.handled_net,
        };
        let size = if p.abi >= 4 {
            std::mem::size_of::<RulesetAttr>()
        } else {
            std::mem::size_of::<u64>()
        };
        let ruleset = libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        ) as libc::c_int;
        if ruleset < 0 {
            return Err(os_err());
        }
        let add = |path: &CString, access: u64| -> io::Result<()> {
            let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
            if fd < 0 {
                // Gone since the policy was prepared: nothing to allow.
                return Ok(());
            }
            let rule = PathBeneathAttr {
                allowed_access: access,
                parent_fd: fd,
            };
            let r = libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset,
                LL_RULE_PATH_BENEATH,
                &rule as *const PathBeneathAttr,
                0u32,
            );
            libc::close(fd);
            if r < 0 {
                Err(os_err())
            } else {
                Ok(())
            }
        };
        for r in &p.rules {
            add(&r.path, r.access)?;
        }
        // The namespace's own /proc: it shows only this process and its children (a
        // profiler's target among them), whose entries CUDA opens for writing with
        // truncation (read and write alone make cuInit fail with "OS call failed").
        add(&p.proc_dir, p.handled_fs)?;
        if shm_private {
            add(&p.dev_shm, p.handled_fs)?;
        }
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) < 0 {
            return Err(os_err());
        }
        libc::close(ruleset);

        // seccomp.
        if !p.loopback {
            let prog = libc::sock_fprog {
                len: p.filter.len() as libc::c_ushort,
                filter: p.filter.as_ptr() as *mut libc::sock_filter,
            };
            check(libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ))?;
        }
    }
    Ok(())
}

/// Closes every descriptor but `fd`, which becomes descriptor 3 (async-signal-safe).
unsafe fn keep_only(fd: libc::c_int) {
    if fd != 3 {
        libc::dup2(fd, 3);
    }
    if libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) != 0 {
        for other in 4..1024 {
            libc::close(other);
        }
    }
    for std_fd in 0..3 {
        libc::close(std_fd);
    }
}

/// Waits for `pid`, through interruptions; `_exit(125)` if it cannot.
unsafe fn wait_for(pid: libc::pid_t, st: &mut libc::c_int) {
    loop {
        let r = libc::waitpid(pid, st, 0);
        if r == pid {
            return;
        }
        if r < 0 && *libc::__errno_location() != libc::EINTR {
            libc::_exit(125);
        }
    }
}

/// Brings up `lo` in the private network namespace.
fn loopback_up() -> io::Result<()> {
    // SAFETY: a datagram socket and two interface ioctls on a zeroed, named ifreq.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(os_err());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        req.ifr_name[0] = b'l' as libc::c_char;
        req.ifr_name[1] = b'o' as libc::c_char;
        let mut r = libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req);
        if r == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            r = libc::ioctl(s, libc::SIOCSIFFLAGS, &req);
        }
        let err = if r < 0 { Some(os_err()) } else { None };
        libc::close(s);
        err.map_or(Ok(()), Err)
    }
}

fn install(cmd: &mut Command, policy: &Policy) -> Result<()> {
    let prepared = prepare(policy)?;
    // SAFETY: `enter` makes only system calls on `prepared`, which the closure owns.
    unsafe {
        cmd.pre_exec(move || enter(&prepared));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on one (arch, nr, arg0) the way the kernel would.
    fn run_filter(p: &[libc::sock_filter], arch: u32, nr: u32, arg0: u32) -> u32 {
        let mut pc = 0;
        let mut acc = 0u32;
        loop {
            let ins = &p[pc];
            let code = u32::from(ins.code);
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    acc = match ins.k {
                        0 => nr,
                        4 => arch,
                        16 => arg0,
                        k => panic!("load of offset {k}"),
                    };
                    pc += 1;
                }
                c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                    let skip = if acc == ins.k { ins.jt } else { ins.jf };
                    pc += 1 + usize::from(skip);
                }
                c if c == libc::BPF_RET | libc::BPF_K => return ins.k,
                c => panic!("unexpected instruction {c:#x}"),
            }
            assert!(pc < p.len(), "the program runs off its end");
        }
    }

    #[test]
    fn the_seccomp_program_denies_network_sockets_only() {
        let p = seccomp_program();
        let deny = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
        let socket = libc::SYS_socket as u32;
        for fam in DENIED_FAMILIES {
            assert_eq!(
                run_filter(&p, AUDIT_ARCH, socket, *fam as u32),
                deny,
                "family {fam}"
            );
        }
        assert_eq!(
            run_filter(&p, AUDIT_ARCH, socket, libc::AF_UNIX as u32),
            libc::SECCOMP_RET_ALLOW
        );
        let uring = libc::SYS_io_uring_setup as u32;
        assert_eq!(run_filter(&p, AUDIT_ARCH, uring, 0), deny);
        for nr in [
            libc::SYS_read,
            libc::SYS_openat,
            libc::SYS_ioctl,
            libc::SYS_mmap,
        ] {
            let got = run_filter(&p, AUDIT_ARCH, nr as u32, libc::AF_INET as u32);
            assert_eq!(got, libc::SECCOMP_RET_ALLOW, "syscall {nr}");
        }
        assert_eq!(
            run_filter(&p, 0x4000_0003, socket, libc::AF_INET as u32),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }

    #[test]
    fn file_rules_hold_file_rights_only() {
        let exe = std::env::current_exe().unwrap();
        let p = prepare(&Policy::new().read(&exe).write("/nonexistent/cutesmith")).unwrap();
        let rule = p
            .rules
            .iter()
            .find(|r| r.path.as_bytes() == exe.as_os_str().as_bytes())
            .unwrap();
        assert_eq!(rule.access & !LL_FILE_RIGHTS, 0);
        assert!(p
            .rules
            .iter()
            .all(|r| r.path.as_bytes() != b"/nonexistent/cutesmith"));
    }
}
