//! `run SUITE --slurm` on a real one-node Slurm cluster (Debian's slurm-wlm and munge,
//! which `.ci/run` installs): the test starts munged, slurmctld and slurmd as root with a
//! generated configuration, runs suites through sbatch with the scripted evaluator in
//! place of the GPU, cancels a task with scancel and resubmits it alone, and stops the
//! daemons it started.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cutesmith::agent::machine::Stage;
use cutesmith::agent::session::SessionDir;

use super::common::{fixture, output_text, toolchain};
use crate::require_tool;

/// The daemons of a one-node cluster, stopped on drop.
struct Cluster {
    _dir: tempfile::TempDir,
    conf: PathBuf,
    daemons: Vec<Child>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

fn ok(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts munged (unless one answers), slurmctld and slurmd in the foreground on ports of
/// their own; `None` (after require_tool) when this machine cannot.
fn start_cluster() -> Option<Cluster> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let tools = [
        "slurmctld",
        "slurmd",
        "munged",
        "sbatch",
        "squeue",
        "scancel",
        "sinfo",
    ]
    .iter()
    .all(|t| ok(Command::new("sh").args(["-c", &format!("command -v {t}")])));
    if !require_tool(
        "a one-node Slurm (slurm-wlm and munge, run as root)",
        root && tools && ok(Command::new("sh").args(["-c", "command -v setpriv"])),
    ) {
        return None;
    }
    let mut daemons = Vec::new();
    if !ok(Command::new("sh").args(["-c", "munge -n | unmunge"])) {
        for d in ["/run/munge", "/var/log/munge", "/var/lib/munge"] {
            std::fs::create_dir_all(d).unwrap();
            assert!(ok(Command::new("chown").args(["munge:munge", d])));
        }
        daemons.push(
            // setpriv execs munged in its own process (killed with the cluster).
            Command::new("setpriv")
                .args([
                    "--reuid=munge",
                    "--regid=munge",
                    "--clear-groups",
                    "munged",
                    "--foreground",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let t0 = Instant::now();
        while !ok(Command::new("sh").args(["-c", "munge -n | unmunge"])) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "munged did not start"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["state", "spool"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem_kb: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    // Ports of our own, away from a cluster the machine may already run.
    let port = 20000 + (std::process::id() % 5000) * 2;
    let conf = d.join("slurm.conf");
    std::fs::write(
        &conf,
        format!(
            "ClusterName=cutesmith-test\nSlurmctldHost={host}\nSlurmctldPort={port}\n\
             SlurmdPort={}\nSlurmUser=root\nAuthType=auth/munge\nStateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\nSlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\nSlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\nProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             ReturnToService=2\nMpiDefault=none\nJobCompType=jobcomp/none\n\
             AccountingStorageType=accounting_storage/none\n\
             NodeName={host} CPUs={cpus} RealMemory={} State=UNKNOWN\n\
             PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
            port + 1,
            mem_kb / 1024 - 512,
            d = d.display()
        ),
    )
    .unwrap();
    for daemon in ["slurmctld", "slurmd"] {
        daemons.push(
            Command::new(daemon)
                .arg("-D")
                .arg("-f")
                .arg(&conf)
                .env("SLURM_CONF", &conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    let cluster = Cluster {
        _dir: dir,
        conf,
        daemons,
    };
    let t0 = Instant::now();
    loop {
        let states = cluster.slurm("sinfo", &["-h", "-o", "%T"]);
        if String::from_utf8_lossy(&states.stdout).contains("idle") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the node never became idle: {}",
            std::fs::read_to_string(cluster.conf.with_file_name("slurmd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    Some(cluster)
}

impl Cluster {
    fn slurm(&self, program: &str, args: &[&str]) -> Output {
        Command::new(program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap()
    }

    /// `cutesmith` with the cluster's configuration and the scripted evaluator (the tasks
    /// inherit the environment through sbatch).
    fn cutesmith(&self, tmp: &Path, delay_ms: u32) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cutesmith"));
        c.env("SLURM_CONF", &self.conf)
            .env("CUTESMITH_TEST_EVALUATOR", "scripted")
            .env("CUTESMITH_TEST_EVALUATOR_DELAY_MS", delay_ms.to_string())
            .env("CUTESMITH_SLURM_POLL_MS", "300")
            .env("CUTESMITH_TUNING_DB", tmp.join("tuning.sqlite"));
        c
    }

    /// Waits until squeue lists nothing.
    fn drain(&self) {
        let t0 = Instant::now();
        while !self.slurm("squeue", &["-h"]).stdout.is_empty() {
            assert!(t0.elapsed() < Duration::from_secs(600), "jobs never ended");
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// Three copies of the small ReLU workload and a suite of them.
fn trio(tmp: &Path) -> PathBuf {
    let w = tmp.join("workloads");
    std::fs::create_dir_all(w.join("suites")).unwrap();
    let spec: String = std::fs::read_to_string(fixture("workloads/relu_bf16_small.toml"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("name ="))
        .map(|l| format!("{l}\n"))
        .collect();
    for n in ["relu_a", "relu_b", "relu_c"] {
        std::fs::write(w.join(format!("{n}.toml")), &spec).unwrap();
    }
    std::fs::write(
        w.join("suites/trio.toml"),
        "description = \"three\"\nprovider = \"builtin\"\nmax_candidates = 1\n\
         workloads = [\"relu_a\", \"relu_b\", \"relu_c\"]\n",
    )
    .unwrap();
    w
}

/// Session directories of workload `w` under `runs`.
fn sessions_of(runs: &Path, w: &str) -> Vec<PathBuf> {
    std::fs::read_dir(runs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{w}-")))
        })
        .collect()
}

#[test]
fn a_suite_runs_on_a_real_slurm_and_a_cancelled_task_is_resubmitted_alone() {
    let Some(_tc) = toolchain() else { return };
    let Some(cluster) = start_cluster() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let w = trio(tmp.path());
    let args = |runs: &Path| {
        vec![
            "run".to_string(),
            "trio".into(),
            "--slurm".into(),
            "--gpus-per-task".into(),
            "0".into(),
            "--no-profile".into(),
            "--workloads-dir".into(),
            w.display().to_string(),
            "--runs-dir".into(),
            runs.display().to_string(),
        ]
    };

    // 1. All three tasks run and finish; the report over the runs holds all three.
    let runs = tmp.path().join("runs1");
    let out = cluster
        .cutesmith(tmp.path(), 500)
        .args(args(&runs))
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{text}");
    assert!(text.contains("submitted job array"), "{text}");
    for (i, n) in ["relu_a", "relu_b", "relu_c"].iter().enumerate() {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("| {n} | {i} | ENDED |"))),
            "{n}: {text}"
        );
        assert_eq!(sessions_of(&runs, n).len(), 1, "{n}");
        assert!(runs.join("slurm/done").join(n).exists(), "{n}");
    }
    let report = tmp.path().join("report");
    let rep = Command::new(env!("CARGO_BIN_EXE_cutesmith"))
        .arg("report")
        .arg(&runs)
        .arg("--out")
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    for n in ["relu_a", "relu_b", "relu_c"] {
        assert!(md.contains(n), "{n} missing from the report:\n{md}");
    }

    // 2. Task 1 is cancelled while it runs: reported, with the command that resubmits it
    // alone; that command runs relu_b only, and nothing finished is redone.
    let runs = tmp.path().join("runs2");
    let child = cluster
        .cutesmith(tmp.path(), 6000)
        .args(args(&runs))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let task1 = loop {
        let q = cluster.slurm("squeue", &["-h", "-r", "-o", "%i %T"]);
        let q = String::from_utf8_lossy(&q.stdout).to_string();
        if let Some(l) = q
            .lines()
            .find(|l| l.contains("_1 ") && l.contains("RUNNING"))
        {
            break l.split_whitespace().next().unwrap().to_string();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "task 1 never ran: {q}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(cluster.slurm("scancel", &[&task1]).status.success());
    let out = child.wait_with_output().unwrap();
    let text = output_text(&out);
    assert!(text.contains("| relu_a | 0 | ENDED |"), "{text}");
    assert!(text.contains("| relu_c | 2 | ENDED |"), "{text}");
    assert!(!text.contains("| relu_b | 1 | ENDED |"), "{text}");
    assert!(!runs.join("slurm/done/relu_b").exists());
    let script = runs.join("slurm/trio.sbatch");
    let hint = format!("sbatch --array=1 {}", script.display());
    assert!(
        text.contains(&hint),
        "no resubmit command `{hint}` in:\n{text}"
    );
    let before_a = sessions_of(&runs, "relu_a").len();
    let before_c = sessions_of(&runs, "relu_c").len();
    let sb = Command::new("sbatch")
        .args(["--array=1"])
        .arg(&script)
        .env("SLURM_CONF", &cluster.conf)
        .env("CUTESMITH_TEST_EVALUATOR", "scripted")
        .env("CUTESMITH_TEST_EVALUATOR_DELAY_MS", "500")
        .env("CUTESMITH_TUNING_DB", tmp.path().join("tuning.sqlite"))
        .output()
        .unwrap();
    assert!(
        sb.status.success(),
        "{}",
        String::from_utf8_lossy(&sb.stderr)
    );
    cluster.drain();
    assert!(
        runs.join("slurm/done/relu_b").exists(),
        "the resubmitted task did not finish"
    );
    assert_eq!(
        sessions_of(&runs, "relu_a").len(),
        before_a,
        "relu_a was redone"
    );
    assert_eq!(
        sessions_of(&runs, "relu_c").len(),
        before_c,
        "relu_c was redone"
    );
    // The resubmitted session finished (the cancelled one, if it had started, did not).
    let finished = sessions_of(&runs, "relu_b").iter().any(|p| {
        SessionDir::open(p)
            .and_then(|d| d.load_state())
            .is_ok_and(|s| s.stage == Stage::Done)
    });
    assert!(finished, "no finished relu_b session");
}
