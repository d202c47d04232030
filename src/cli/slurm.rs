//! `cutesmith run SUITE --slurm`: a suite on a GPU cluster through the scheduler it already
//! runs. One sbatch job array, one task per workload; each task runs `cutesmith run W`
//! into the shared runs directory with the suite's settings, records that it finished, and
//! keeps its tuning results in a database of its own. cutesmith submits the script, follows
//! the array with `squeue` (a progress bar), reads each task's end with `sacct`, merges the
//! tasks' tuning databases into this machine's and prints the suite's table. A failed task
//! is reported with the command that resubmits it alone; a resubmitted array skips the
//! workloads that already finished. No scheduler of our own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::run::RunArgs;
use super::{EXIT_ERROR, EXIT_OK};
use crate::agent::session::SessionDir;
use crate::error::{Error, Result};
use crate::spec::suite::SuiteSpec;

/// The `--slurm` flags of `run`.
#[derive(Debug, Clone, Default, Args)]
pub struct SlurmArgs {
    /// Run a suite as a Slurm job array (one task per workload) instead of here.
    #[arg(long)]
    pub slurm: bool,
    /// Slurm partition for the array.
    #[arg(long, requires = "slurm", value_name = "P")]
    pub partition: Option<String>,
    /// GPUs each task gets (0: ask for none, for a cluster without GPU scheduling).
    #[arg(long, requires = "slurm", default_value_t = 1, value_name = "N")]
    pub gpus_per_task: u32,
    /// Time limit of each task, as sbatch takes it (e.g. 2:00:00).
    #[arg(long, requires = "slurm", value_name = "T")]
    pub time: Option<String>,
    /// Print the sbatch script and submit nothing.
    #[arg(long, requires = "slurm")]
    pub dry_run: bool,
}

/// What goes into the script besides the workloads.
pub struct ScriptPlan<'a> {
    pub suite: &'a str,
    pub workloads: &'a [String],
    /// The cutesmith binary the tasks run (an absolute path).
    pub exe: &'a Path,
    /// Where the tasks start (absolute).
    pub workdir: &'a Path,
    /// The shared runs directory (absolute).
    pub runs: &'a Path,
    /// The arguments after `run W` for every task.
    pub task_args: &'a [String],
    pub slurm: &'a SlurmArgs,
}

/// Single-quoted for bash.
fn sh(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Where an array's bookkeeping lives under the runs directory.
fn slurm_dir(runs: &Path) -> PathBuf {
    runs.join("slurm")
}

/// The sbatch script of the array.
pub fn script(p: &ScriptPlan) -> String {
    let dir = slurm_dir(p.runs);
    let mut s = String::from("#!/bin/bash\n");
    s.push_str(&format!("#SBATCH --job-name=cutesmith-{}\n", p.suite));
    s.push_str(&format!(
        "#SBATCH --array=0-{}\n",
        p.workloads.len().saturating_sub(1)
    ));
    s.push_str("#SBATCH --ntasks=1\n");
    if p.slurm.gpus_per_task > 0 {
        s.push_str(&format!(
            "#SBATCH --gpus-per-task={}\n",
            p.slurm.gpus_per_task
        ));
    }
    if let Some(part) = &p.slurm.partition {
        s.push_str(&format!("#SBATCH --partition={part}\n"));
    }
    if let Some(t) = &p.slurm.time {
        s.push_str(&format!("#SBATCH --time={t}\n"));
    }
    s.push_str(&format!(
        "#SBATCH --output={}/%x-%A_%a.out\n",
        dir.join("logs").display()
    ));
    s.push_str(&format!(
        "# cutesmith suite {}: {} workloads, one task each. Resubmitting runs only the\n# workloads without a mark in {}.\nset -u\n",
        p.suite,
        p.workloads.len(),
        dir.join("done").display()
    ));
    s.push_str("WORKLOADS=(");
    for w in p.workloads {
        s.push_str(&format!(" {}", sh(w)));
    }
    s.push_str(" )\n");
    s.push_str("W=${WORKLOADS[$SLURM_ARRAY_TASK_ID]}\n");
    s.push_str(&format!(
        "DONE={}/\"$W\"\n",
        sh(&dir.join("done").display().to_string())
    ));
    s.push_str("if [ -e \"$DONE\" ]; then echo \"$W: finished earlier ($DONE)\"; exit 0; fi\n");
    s.push_str(&format!(
        "export CUTESMITH_TUNING_DB={}/\"$W\".sqlite\n",
        sh(&dir.join("tuning").display().to_string())
    ));
    s.push_str(&format!("cd {}\n", sh(&p.workdir.display().to_string())));
    let args: Vec<String> = p.task_args.iter().map(|a| sh(a)).collect();
    s.push_str(&format!(
        "{} run \"$W\" {}\n",
        sh(&p.exe.display().to_string()),
        args.join(" ")
    ));
    s.push_str(
        "rc=$?\n# 0: the goal was met, 1: not met: both are finished sessions (the goal is read from\n# the session), so the task succeeded. 2: an error: the task failed.\nif [ $rc -le 1 ]; then touch \"$DONE\"; exit 0; fi\nexit $rc\n",
    );
    s
}

/// The flags every task passes after `run W`: the session settings of `a` (the suite's
/// applied, see `suite::args_for`), with the shared runs directory.
pub fn task_args(a: &RunArgs, runs: &Path, workloads_dir: &Path) -> Vec<String> {
    let mut v = vec![
        "--workloads-dir".to_string(),
        workloads_dir.display().to_string(),
        "--runs-dir".to_string(),
        runs.display().to_string(),
        "--rounds".into(),
        a.rounds.to_string(),
        "--seeds".into(),
        a.seeds.to_string(),
        "--max-candidates".into(),
        a.max_candidates.to_string(),
        "--timeout".into(),
        a.timeout.to_string(),
        "--timing-runs".into(),
        a.timing_runs.to_string(),
        "--roofline-target".into(),
        a.roofline_target.to_string(),
        "--max-tokens".into(),
        a.max_tokens.to_string(),
        "--max-cost".into(),
        a.max_cost.to_string(),
        "--max-time".into(),
        a.max_time.to_string(),
        "--samples".into(),
        a.samples.to_string(),
        "--population".into(),
        a.population.to_string(),
        "-q".into(),
    ];
    if a.builtin {
        v.push("--builtin".into());
    }
    if a.no_profile {
        v.push("--no-profile".into());
    }
    if let Some(m) = a.reply_mode {
        v.push("--reply-mode".into());
        v.push(format!("{m:?}").to_ascii_lowercase());
    }
    v
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|e| Error::io(p, e))
}

/// Runs a Slurm command, its stdout on success.
fn slurm_cmd(program: &str, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let out = crate::process::run(cmd, Duration::from_secs(120), 1 << 20).map_err(|e| {
        Error::Usage(format!(
            "{program} could not be run ({e}): --slurm needs the Slurm client commands (sbatch, squeue, sacct) on PATH"
        ))
    })?;
    if !out.success() {
        return Err(Error::Usage(format!(
            "{program} {} failed: {}",
            args.join(" "),
            out.combined().trim()
        )));
    }
    Ok(out.stdout)
}

/// One array task's end, from `sacct -P` lines `JOBID_K|STATE|EXIT`.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEnd {
    pub index: usize,
    pub state: String,
    pub exit: String,
}

/// The array tasks' ends in `sacct -n -P --format=JobID,State,ExitCode` output (job steps
/// such as `.batch` skipped).
pub fn parse_sacct(text: &str, job: &str) -> Vec<TaskEnd> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.trim().split('|').collect();
        if f.len() < 3 {
            continue;
        }
        let Some(k) = f[0].strip_prefix(&format!("{job}_")) else {
            continue;
        };
        let Ok(index) = k.parse::<usize>() else {
            continue;
        };
        out.push(TaskEnd {
            index,
            state: f[1].split_whitespace().next().unwrap_or("").to_string(),
            exit: f[2].to_string(),
        });
    }
    out.sort_by_key(|t| t.index);
    out.dedup_by_key(|t| t.index);
    out
}

/// The newest session of workload `w` under `runs` (session ids start with the name).
fn latest_session(runs: &Path, w: &str) -> Option<PathBuf> {
    let prefix = format!("{w}-");
    let mut found: Vec<PathBuf> = std::fs::read_dir(runs)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n[prefix.len()..].starts_with("20"))
        })
        .collect();
    found.sort();
    found.pop()
}

/// `cutesmith run SUITE --slurm`.
pub fn cmd_run_slurm(args: &RunArgs, name: &str, suite: &SuiteSpec) -> Result<i32> {
    let runs = absolute(&args.runs_dir)?;
    let workloads_dir = absolute(&args.workloads_dir)?;
    let workdir = std::env::current_dir().map_err(|e| Error::io(Path::new("."), e))?;
    let exe = std::env::current_exe().map_err(|e| Error::io(Path::new("cutesmith"), e))?;
    let per_task = super::suite::args_for(args, suite, "");
    let targs = task_args(&per_task, &runs, &workloads_dir);
    let text = script(&ScriptPlan {
        suite: name,
        workloads: &suite.workloads,
        exe: &exe,
        workdir: &workdir,
        runs: &runs,
        task_args: &targs,
        slurm: &args.slurm,
    });
    if args.slurm.dry_run {
        print!("{text}");
        return Ok(EXIT_OK);
    }
    let dir = slurm_dir(&runs);
    for sub in ["logs", "done", "tuning"] {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
    }
    let script_path = dir.join(format!("{name}.sbatch"));
    std::fs::write(&script_path, &text).map_err(|e| Error::io(&script_path, e))?;
    let sp = script_path.display().to_string();
    let submitted = slurm_cmd("sbatch", &["--parsable", &sp])?;
    let job = submitted.trim().split(';').next().unwrap_or("").to_string();
    if job.is_empty() {
        return Err(Error::Usage(format!(
            "sbatch printed no job id for {sp}: {submitted}"
        )));
    }
    eprintln!(
        "suite {name}: submitted job array {job} ({} tasks), script {sp}; task logs in {}",
        suite.workloads.len(),
        dir.join("logs").display()
    );
    // Follow the array until squeue no longer lists it.
    let total = suite.workloads.len() as u64;
    let pb = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} tasks ended {msg}") {
        pb.set_style(style);
    }
    let poll = std::env::var("CUTESMITH_SLURM_POLL_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(10_000);
    loop {
        let listed = slurm_cmd("squeue", &["-h", "-r", "-j", &job, "-o", "%i %T"])?;
        let waiting = listed.lines().filter(|l| !l.trim().is_empty()).count() as u64;
        pb.set_position(total.saturating_sub(waiting));
        let running = listed.lines().filter(|l| l.contains("RUNNING")).count();
        pb.set_message(format!("({running} running)"));
        if waiting == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(poll));
    }
    pb.finish_and_clear();
    // Each task's end from the accounting; a cluster without accounting storage still
    // has the done marks, which decide what finished.
    let ends = match slurm_cmd(
        "sacct",
        &["-n", "-P", "-j", &job, "--format=JobID,State,ExitCode"],
    ) {
        Ok(acct) => parse_sacct(&acct, &job),
        Err(e) => {
            eprintln!("suite {name}: no task states from sacct ({e}); the done marks decide what finished");
            Vec::new()
        }
    };
    // Merge the tasks' tuning results into this machine's database.
    let mut merged = 0;
    if let Some(db_path) = crate::tuning::default_path() {
        let db = crate::tuning::TuningDb::open(&db_path)?;
        for w in &suite.workloads {
            let p = dir.join("tuning").join(format!("{w}.sqlite"));
            if p.is_file() {
                let rows = crate::tuning::TuningDb::open(&p)?.rows(None)?;
                merged += db.import(&rows)?;
            }
        }
    }
    println!("suite {name} (Slurm job {job}):\n| workload | task | state | session | best | goal |\n| --- | --- | --- | --- | --- | --- |");
    let mut failed = Vec::new();
    let mut worst = EXIT_OK;
    for (k, w) in suite.workloads.iter().enumerate() {
        let end = ends.iter().find(|t| t.index == k);
        let finished = dir.join("done").join(w).exists();
        let state = end.map_or(if finished { "ENDED" } else { "NOT FINISHED" }, |t| {
            t.state.as_str()
        });
        let session = latest_session(&runs, w);
        let (best, goal) = match session
            .as_ref()
            .and_then(|s| SessionDir::open(s).ok())
            .and_then(|d| d.load_state().ok().map(|st| (d, st)))
        {
            Some((d, st)) if finished => {
                let code = super::run::exit_code(&d, &st);
                worst = worst.max(code);
                (
                    st.best
                        .map(|b| format!("v{b} {:.2} us", st.best_us.unwrap_or(f64::NAN)))
                        .unwrap_or_else(|| "none".into()),
                    if code == EXIT_OK { "met" } else { "NOT met" }.to_string(),
                )
            }
            _ => ("-".into(), "-".into()),
        };
        if !finished {
            failed.push(k);
        }
        println!(
            "| {w} | {k} | {state}{} | {} | {best} | {goal} |",
            end.map(|t| format!(" (exit {})", t.exit))
                .unwrap_or_default(),
            session.map_or("-".into(), |s| s.display().to_string()),
        );
    }
    println!(
        "tuning: {merged} new rows merged from the tasks' databases; `cutesmith report {}` for the full report",
        runs.display()
    );
    if failed.is_empty() {
        return Ok(worst);
    }
    let list: Vec<String> = failed.iter().map(|k| k.to_string()).collect();
    println!(
        "{} task(s) did not finish (logs in {}); resubmit them alone with: sbatch --array={} {sp}",
        failed.len(),
        dir.join("logs").display(),
        list.join(",")
    );
    Ok(EXIT_ERROR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_runs_one_workload_per_task_and_skips_finished_ones() {
        let workloads = vec!["gemm_a".to_string(), "it's".to_string()];
        let slurm = SlurmArgs {
            slurm: true,
            partition: Some("gpu".into()),
            gpus_per_task: 2,
            time: Some("1:00:00".into()),
            dry_run: true,
        };
        let args = vec!["--runs-dir".to_string(), "/shared/runs".to_string()];
        let s = script(&ScriptPlan {
            suite: "llm",
            workloads: &workloads,
            exe: Path::new("/opt/cutesmith"),
            workdir: Path::new("/home/u/proj"),
            runs: Path::new("/shared/runs"),
            task_args: &args,
            slurm: &slurm,
        });
        for line in [
            "#!/bin/bash",
            "#SBATCH --job-name=cutesmith-llm",
            "#SBATCH --array=0-1",
            "#SBATCH --gpus-per-task=2",
            "#SBATCH --partition=gpu",
            "#SBATCH --time=1:00:00",
            "#SBATCH --output=/shared/runs/slurm/logs/%x-%A_%a.out",
            "WORKLOADS=( 'gemm_a' 'it'\\''s' )",
            "W=${WORKLOADS[$SLURM_ARRAY_TASK_ID]}",
            "DONE='/shared/runs/slurm/done'/\"$W\"",
            "if [ -e \"$DONE\" ]; then echo \"$W: finished earlier ($DONE)\"; exit 0; fi",
            "export CUTESMITH_TUNING_DB='/shared/runs/slurm/tuning'/\"$W\".sqlite",
            "cd '/home/u/proj'",
            "'/opt/cutesmith' run \"$W\" '--runs-dir' '/shared/runs'",
            "if [ $rc -le 1 ]; then touch \"$DONE\"; exit 0; fi",
        ] {
            assert!(s.lines().any(|l| l == line), "missing {line:?} in:\n{s}");
        }
        // Without a partition, a time limit or GPUs those lines are absent.
        let plain = SlurmArgs {
            slurm: true,
            gpus_per_task: 0,
            ..SlurmArgs::default()
        };
        let s = script(&ScriptPlan {
            suite: "x",
            workloads: &workloads,
            exe: Path::new("/c"),
            workdir: Path::new("/w"),
            runs: Path::new("/r"),
            task_args: &[],
            slurm: &plain,
        });
        assert!(
            !s.contains("--partition") && !s.contains("--time") && !s.contains("--gpus"),
            "{s}"
        );
    }

    #[test]
    fn sacct_lines_give_each_task_its_end() {
        let text = "77_0|COMPLETED|0:0\n77_0.batch|COMPLETED|0:0\n77_1|FAILED|2:0\n77_2|CANCELLED by 0|0:15\n12_0|COMPLETED|0:0\n";
        let ends = parse_sacct(text, "77");
        assert_eq!(
            ends,
            vec![
                TaskEnd {
                    index: 0,
                    state: "COMPLETED".into(),
                    exit: "0:0".into()
                },
                TaskEnd {
                    index: 1,
                    state: "FAILED".into(),
                    exit: "2:0".into()
                },
                TaskEnd {
                    index: 2,
                    state: "CANCELLED".into(),
                    exit: "0:15".into()
                },
            ]
        );
    }
}
