//! The sandbox, tested without a GPU: a probe program started through the worker's own
//! spawn path tries what a hostile kernel's host code would, and nvcc is refused a file
//! outside the allowed trees.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cutesmith::eval::{self, job::Mode};
use cutesmith::process::MemoryCeiling;
use cutesmith::sandbox::{self, Status};
use cutesmith::spec::Workload;
use cutesmith::toolchain::cache::CompileCache;
use cutesmith::toolchain::compile::{self, CompileRequest};

use super::common::{root, toolchain};
use crate::require_tool;

/// Whether this machine sandboxes; fails under CI when it does not.
fn sandbox_available() -> bool {
    match sandbox::status() {
        Status::Available { .. } => true,
        Status::Unavailable(why) => require_tool(&format!("the sandbox ({why})"), false),
    }
}

/// A C compiler on this machine (`cc`, `gcc` or `clang`); fails under CI when none is.
fn c_compiler() -> Option<&'static str> {
    let cc = ["cc", "gcc", "clang"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok());
    if require_tool("a C compiler", cc.is_some()) {
        cc
    } else {
        None
    }
}

/// Builds the C program `src` with `flags` in a new temporary directory; the directory
/// and the program's path. `None` (after `c_compiler` said why) without a compiler.
fn build_c(name: &str, src: &str, flags: &[String]) -> Option<(tempfile::TempDir, PathBuf)> {
    let cc = c_compiler()?;
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join(format!("{name}.c"));
    std::fs::write(&source, src).unwrap();
    let exe = dir.path().join(name);
    let built = Command::new(cc)
        .arg("-O1")
        .args(flags)
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    Some((dir, exe))
}

/// Runs the stub `exe` through the worker's spawn path (sandbox and limits) on a
/// validation job, after `adjust` has set the job's limits.
fn run_stub(exe: &Path, adjust: impl FnOnce(&mut eval::job::Job)) -> eval::Evaluation {
    let w = Workload::find(root().join("workloads"), "act_relu_bf16").unwrap();
    let mut job = eval::job_for(&w, Mode::Validate, None, 1, 1).unwrap();
    adjust(&mut job);
    eval::spawn_program(exe, &job, Duration::from_secs(60), None).unwrap()
}

/// The probe's C source: each attempt prints `name: ok` or `name: denied (errno)`, and
/// `name: LEAKED` when it read the secret.
const PROBE: &str = r#"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void report(const char* what, int ok) {
  if (ok) fprintf(stderr, "%s: ok\n", what);
  else fprintf(stderr, "%s: denied (%s)\n", what, strerror(errno));
}

/* Reads `path`; 1 when it could, and prints LEAKED when the text holds the secret. */
static int read_secret(const char* what, const char* path) {
  char buf[65536];
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0) return 0;
  buf[n] = 0;
  for (ssize_t i = 0; i < n; ++i) if (buf[i] == 0) buf[i] = ' ';
  if (strstr(buf, SECRET)) fprintf(stderr, "%s: LEAKED\n", what);
  return 1;
}

int main(void) {
  char path[256];
  snprintf(path, sizeof path, "/proc/%d/environ", PARENT_PID);
  report("parent_environ", read_secret("parent_environ", path));
  report("home_file", read_secret("home_file", HOME_FILE));

  int fd = open(OUTSIDE, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  report("write_outside", fd >= 0);
  if (fd >= 0) close(fd);

  fd = open("inside.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  report("write_inside", fd >= 0 && write(fd, "x", 1) == 1);
  if (fd >= 0) close(fd);

  report("read_self", read_secret("read_self", "/proc/self/status"));

  int s = socket(AF_INET, SOCK_STREAM, 0);
  int connected = 0;
  if (s >= 0) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(PORT);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected = connect(s, (struct sockaddr*)&a, sizeof a) == 0;
    close(s);
  }
  report("connect_loopback", connected);
  return 0;
}
"#;

#[test]
fn a_worker_cannot_reach_secrets_files_or_the_network() {
    if !sandbox_available() {
        return;
    }
    if c_compiler().is_none() {
        return;
    }
    let secret = format!("sk-cutesmith-probe-{}", std::process::id());
    let home = std::env::var_os("HOME").expect("HOME");
    let home_file = Path::new(&home).join(format!(".cutesmith-probe-{}", std::process::id()));
    std::fs::write(&home_file, format!("token = {secret}\n")).unwrap();
    let outside = std::env::temp_dir().join(format!("cutesmith-probe-out-{}", std::process::id()));
    let _ = std::fs::remove_file(&outside);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();

    let flags = [
        format!("-DPARENT_PID={}", std::process::id()),
        format!("-DSECRET=\"{secret}\""),
        format!("-DHOME_FILE=\"{}\"", home_file.display()),
        format!("-DOUTSIDE=\"{}\"", outside.display()),
        format!("-DPORT={port}"),
    ];
    let Some((dir, exe)) = build_c("probe", PROBE, &flags) else {
        return;
    };
    // Without the sandbox every attempt succeeds (so the attempts themselves work):
    // this process's environment (where the model's API key lives) is readable, the
    // planted file leaks, the write and the connection go through.
    let bare = Command::new(&exe).current_dir(dir.path()).output().unwrap();
    let bare = String::from_utf8_lossy(&bare.stderr).into_owned();
    for line in [
        "parent_environ: ok",
        "home_file: LEAKED",
        "write_outside: ok",
        "connect_loopback: ok",
    ] {
        assert!(
            bare.contains(line),
            "unsandboxed probe: {line} missing in\n{bare}"
        );
    }
    let _ = std::fs::remove_file(&outside);
    while listener.accept().is_ok() {}

    let w = Workload::find(root().join("workloads"), "act_relu_bf16").unwrap();
    let job = eval::job_for(&w, Mode::Validate, None, 1, 1).unwrap();
    let e = eval::spawn_program(&exe, &job, Duration::from_secs(60), None).unwrap();
    let out = e.stderr_tail.clone();
    eprintln!("sandboxed probe:\n{out}");
    std::fs::remove_file(&home_file).unwrap();
    for line in [
        "parent_environ: denied",
        "home_file: denied",
        "write_outside: denied",
        "connect_loopback: denied",
        "write_inside: ok",
        "read_self: ok",
    ] {
        assert!(
            out.contains(line),
            "sandboxed probe: {line} missing in\n{out}"
        );
    }
    assert!(!out.contains("LEAKED"), "{out}");
    assert!(!outside.exists(), "the probe wrote {}", outside.display());
    assert!(
        listener.accept().is_err(),
        "the probe reached the test's loopback listener"
    );
}

#[test]
fn nvcc_is_refused_a_file_outside_the_allowed_trees() {
    let Some(tc) = toolchain() else { return };
    if !sandbox_available() {
        return;
    }
    let home = std::env::var_os("HOME").expect("HOME");
    let secret = format!("cutesmith_probe_secret_{}", std::process::id());
    let planted = Path::new(&home).join(format!(".cutesmith-probe-{}.h", std::process::id()));
    std::fs::write(&planted, format!("int {secret} = 42;\n")).unwrap();
    let source = format!("#include \"{}\"\n", planted.display());
    let req = CompileRequest::version(&source, "sm_90a");
    let o = compile::compile(&tc, &CompileCache::default_location(), &req);
    std::fs::remove_file(&planted).unwrap();
    let o = o.unwrap();
    assert!(!o.ok(), "a source including {} compiled", planted.display());
    assert!(o.condensed.contains("sandbox"), "{}", o.condensed);
    assert!(!o.condensed.contains(&secret), "{}", o.condensed);
    let log = std::fs::read_to_string(&o.log_path).unwrap();
    assert!(!log.contains(&secret), "the kept log holds the file: {log}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_hostile_kernel_is_validated_and_every_attempt_fails() {
    if std::env::var_os("CUTESMITH_WORKER_EXE").is_none() {
        std::env::set_var("CUTESMITH_WORKER_EXE", env!("CARGO_BIN_EXE_cutesmith"));
    }
    let tc = toolchain().expect("toolchain");
    assert!(sandbox_available(), "{:?}", sandbox::status());
    let home = std::env::var_os("HOME").expect("HOME");
    let pid = std::process::id();
    let planted = Path::new(&home).join(format!(".cutesmith-hostile-{pid}"));
    std::fs::write(&planted, "token = sk-hostile\n").unwrap();
    let outside = std::env::temp_dir().join(format!("cutesmith-hostile-out-{pid}"));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let path = super::common::fixture("hostile/probe_relu.cu");
    let mut req = CompileRequest::from_file(&path, Default::default()).unwrap();
    req.options.defines = vec![
        format!("CS_PARENT_PID={pid}"),
        format!("CS_HOME_FILE=\"{}\"", planted.display()),
        format!("CS_OUTSIDE=\"{}\"", outside.display()),
        format!("CS_PORT={port}"),
    ];
    let o = compile::compile(&tc, &CompileCache::default_location(), &req).unwrap();
    assert!(o.ok(), "{}", o.condensed);
    let w = Workload::find(root().join("workloads"), "act_relu_bf16").unwrap();
    let job = eval::job_for(&w, Mode::Validate, o.shared_object.clone(), 2, 1).unwrap();
    let e = eval::run(&job, Duration::from_secs(300), eval::Under::Plain).unwrap();
    std::fs::remove_file(&planted).unwrap();
    eprintln!("{}\nworker stderr:\n{}", e.render(), e.stderr_tail);
    assert!(e.fault.is_none(), "{}", e.render());
    assert!(
        std::env::var_os("CUTESMITH_HOSTILE_SECRET").is_some(),
        "export CUTESMITH_HOSTILE_SECRET=... before the test binary starts"
    );
    assert!(e.stderr_tail.contains("hostile secret_search: not found"));
    for what in ["parent_environ", "home_file", "write_outside", "connect"] {
        let line = format!("hostile {what}: denied");
        assert!(e.stderr_tail.contains(&line), "{line} missing");
    }
    assert!(!outside.exists());
    assert!(
        listener.accept().is_err(),
        "the kernel reached the listener"
    );
}

/// A stub worker that only allocates and touches memory, 16 MiB at a time.
const HOG: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(void) {
  for (int i = 0; i < 256; ++i) {
    char* p = malloc(16u << 20);
    if (!p) return 3;
    memset(p, i + 1, 16u << 20);
    usleep(2000);
  }
  return 0;
}
"#;

#[test]
fn a_worker_over_its_host_memory_limit_gets_the_resource_verdict() {
    let Some((_dir, exe)) = build_c("hog", HOG, &[]) else {
        return;
    };
    let start = std::time::Instant::now();
    let e = run_stub(&exe, |job| job.host_memory_limit = Some(256 << 20));
    let ceiling = e
        .memory_ceiling
        .clone()
        .expect("the mechanism of the memory limit");
    eprintln!("the hog's memory ceiling: {ceiling:?}");
    let f = e.fault.expect("a fault");
    assert_eq!(f.kind, eval::job::FaultKind::Resource, "{}", f.message);
    assert!(f.message.contains("limit of 268.4 MB"), "{}", f.message);
    assert!(
        f.message.contains(ceiling.mechanism()),
        "{}: {}",
        ceiling.mechanism(),
        f.message
    );
    match &ceiling {
        MemoryCeiling::Cgroup { path, peak } => {
            // The kernel held the tree to memory.max; the cgroup is gone afterwards.
            assert!(f.message.contains("cgroup v2 memory.max"), "{}", f.message);
            assert!(!path.exists(), "{} was left behind", path.display());
            if let Some(peak) = peak {
                assert!(*peak > 128 << 20 && *peak < 320 << 20, "cgroup peak {peak}");
            }
            assert!(e.peak_rss > 64 << 20, "peak {}", e.peak_rss);
        }
        MemoryCeiling::Sampled { why_not_cgroup } => {
            assert!(
                !why_not_cgroup.trim().is_empty(),
                "no reason for the fallback"
            );
            assert!(
                f.message.contains("sampled resident memory"),
                "{}",
                f.message
            );
            assert!(
                f.message.contains("over its limit of 268.4 MB"),
                "{}",
                f.message
            );
            assert!(e.peak_rss > 256 << 20, "peak {}", e.peak_rss);
        }
    }
    assert!(e.peak_rss < 1 << 30, "stopped late: peak {}", e.peak_rss);
    assert!(start.elapsed() < Duration::from_secs(30));

    // Under a limit it does not reach, the same program runs to its end under the same
    // mechanism, and its peak (4 GiB of touched pages, 16 MiB at a time) is measured.
    let e = run_stub(&exe, |job| job.host_memory_limit = Some(8 << 30));
    let kind = e.fault.as_ref().map(|f| f.kind);
    assert_ne!(kind, Some(eval::job::FaultKind::Resource));
    assert!(e.peak_rss > 2 << 30, "peak {}", e.peak_rss);
    assert_eq!(
        e.memory_ceiling.as_ref().map(MemoryCeiling::mechanism),
        Some(ceiling.mechanism())
    );
}

/// A stub worker that writes a 64 MiB file into its directory, 1 MiB at a time.
const WRITER: &str = r#"
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
int main(void) {
  static char buf[1 << 20];
  memset(buf, 7, sizeof buf);
  int fd = open("big.bin", O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return 3;
  for (int i = 0; i < 64; ++i)
    if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) return 4;
  close(fd);
  return 0;
}
"#;

#[test]
fn a_worker_writing_past_its_file_size_limit_gets_the_resource_verdict() {
    let Some((_dir, exe)) = build_c("writer", WRITER, &[]) else {
        return;
    };
    let e = run_stub(&exe, |job| job.file_size_limit = Some(4 << 20));
    let f = e.fault.expect("a fault");
    assert_eq!(f.kind, eval::job::FaultKind::Resource, "{}", f.message);
    assert!(
        f.message.contains("larger than its limit of 4.19 MB"),
        "{}",
        f.message
    );
    // With the default limit the same program writes its file and ends normally (its
    // missing report is a crash, not a resource fault).
    let e = run_stub(&exe, |job| {
        job.file_size_limit = Some(eval::WORKER_FILE_SIZE_LIMIT)
    });
    assert_eq!(e.fault.map(|f| f.kind), Some(eval::job::FaultKind::Crash));
}

/// A stub worker that forks 600 children which sleep, then waits for them.
const FORKER: &str = r#"
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
  for (int i = 0; i < 600; ++i) {
    pid_t p = fork();
    if (p == 0) { sleep(20); _exit(0); }
    if (p < 0) break;
    usleep(1000);
  }
  while (wait(0) > 0) {}
  return 0;
}
"#;

#[test]
fn a_worker_that_forks_too_many_processes_gets_the_resource_verdict() {
    let Some((_dir, exe)) = build_c("forker", FORKER, &[]) else {
        return;
    };
    let start = std::time::Instant::now();
    let e = run_stub(&exe, |_| {});
    let f = e.fault.expect("a fault");
    assert_eq!(f.kind, eval::job::FaultKind::Resource, "{}", f.message);
    assert!(f.message.contains("over the limit of 256"), "{}", f.message);
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
}
