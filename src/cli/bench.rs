//! `cutesmith bench SUITE`: a suite of sessions with the built-in provider (each tries
//! the workload's candidate strategies through the engine, and keeps the best beyond the
//! noise, exactly as `cutesmith run W --builtin` does), and a table made from those
//! sessions (workload, best strategy, its time, the vendor library's time measured in the
//! same worker, speedup, fraction of the copy bandwidth and of the roofline floor)
//! written as Markdown and JSON under `bench/`.

use std::path::{Path, PathBuf};

use clap::Args;
use serde::{Deserialize, Serialize};

use super::run::{RunArgs, ViewArgs};
use super::suite::{self, SuiteRow};
use super::{ensure_toolchain, EXIT_OK};
use crate::agent::session::{SessionDir, State};
use crate::config::Config;
use crate::error::{Error, IoContext, Result};
use crate::eval::job::TimingReport;
use crate::eval::Evaluation;
use crate::spec::Workload;
use crate::strategy::{self, Strategy};
use crate::toolchain::cache::CompileCache;
use crate::toolchain::compile::{self, CompileOutcome, CompileRequest};
use crate::toolchain::ToolchainOptions;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Suite name (workloads/suites/NAME.toml) or path.
    pub suite: String,
    #[arg(long, default_value = "workloads")]
    pub workloads_dir: PathBuf,
    /// Where the Markdown and JSON tables go.
    #[arg(long, default_value = "bench")]
    pub out: PathBuf,
    /// Where the sessions go (each in its own runs/<id>/).
    #[arg(long, default_value = "runs")]
    pub runs_dir: PathBuf,
    /// Override the suite's number of candidates per workload (`--budget` is the same).
    #[arg(long, visible_alias = "budget")]
    pub max_candidates: Option<usize>,
    /// Parallel nvcc processes (default: one per core).
    #[arg(short, long)]
    pub jobs: Option<usize>,
    /// Keep the rows already in OUT/<suite>.json (from an interrupted run on the same
    /// device) and run only the suite's other workloads.
    #[arg(long)]
    pub resume: bool,
    /// GPUs to spread the suite's workloads over: `all` (default: every visible GPU, of
    /// one model) or ordinals like `0,1`; each workload's session runs on one of them.
    #[arg(long, value_name = "all|LIST")]
    pub gpus: Option<String>,
    /// Measure only the suite's workloads whose names match (`*` any run of characters,
    /// `?` one; repeatable, e.g. `--only '*_m256'`). The other rows of OUT/<suite>.json,
    /// measured on the same device, are kept, so the table stays whole.
    #[arg(long, value_name = "GLOB")]
    pub only: Vec<String>,
}

/// `pattern` as a regular expression for a whole name: `*` any run of characters (the
/// empty one too), `?` exactly one, everything else itself.
fn glob(pattern: &str) -> Result<regex::Regex> {
    let re = regex::escape(pattern)
        .replace(r"\*", ".*")
        .replace(r"\?", ".");
    regex::Regex::new(&format!("^(?s:{re})$"))
        .map_err(|e| Error::Usage(format!("--only '{pattern}': {e}")))
}

/// The suite's workloads `--only` selects (all of them without patterns); a pattern that
/// matches none is an error naming it and the suite's workloads.
fn select(suite: &str, workloads: &[String], only: &[String]) -> Result<Vec<String>> {
    let patterns = only
        .iter()
        .map(|p| Ok((p, glob(p)?)))
        .collect::<Result<Vec<_>>>()?;
    if let Some((p, _)) = patterns
        .iter()
        .find(|(_, re)| !workloads.iter().any(|w| re.is_match(w)))
    {
        return Err(Error::Usage(format!(
            "--only '{p}': no workload of suite {suite} matches it (its workloads: {})",
            workloads.join(", ")
        )));
    }
    Ok(workloads
        .iter()
        .filter(|w| patterns.is_empty() || patterns.iter().any(|(_, re)| re.is_match(w)))
        .cloned()
        .collect())
}

/// What happened to one candidate (a version of the workload's session).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tried {
    pub strategy: Strategy,
    /// "compile failed", "correct", or the fault's name.
    pub outcome: String,
    pub detail: String,
    pub timing: Option<TimingReport>,
    pub compile_seconds: f64,
    pub evaluate_seconds: f64,
    /// fp32 workloads: per validated shape, the kernel's error against fp64 beside cuBLAS
    /// fp32's on the same inputs (the seed with the largest RMS ratio).
    #[serde(default)]
    pub accuracy: Vec<(String, crate::eval::job::ErrorVsLibrary)>,
}

impl Tried {
    /// The candidate's median time in microseconds, when it was correct and timed.
    pub fn median_us(&self) -> Option<f64> {
        (self.outcome == "correct")
            .then(|| {
                self.timing
                    .as_ref()?
                    .candidate
                    .as_ref()
                    .map(|c| c.median_us)
            })
            .flatten()
    }
}

/// Every candidate of one workload's session.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchOutcome {
    pub workload: String,
    pub tried: Vec<Tried>,
    /// Index into `tried` of the session's best version.
    pub best: Option<usize>,
    /// Strategies rejected before compiling, with the rule that rejected them.
    pub rejected: Vec<(Strategy, String)>,
}

impl SearchOutcome {
    pub fn best(&self) -> Option<&Tried> {
        self.best.and_then(|i| self.tried.get(i))
    }
}

/// One row of the bench table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRow {
    pub workload: String,
    pub shape: String,
    /// The session the row comes from (`runs/<id>`); empty when it failed to start.
    #[serde(default)]
    pub session: String,
    pub best: Option<String>,
    pub best_us: Option<f64>,
    /// (baseline name, median us, baseline / best)
    pub baselines: Vec<(String, f64, Option<f64>)>,
    pub roofline_fraction: Option<f64>,
    pub tflops: Option<f64>,
    pub tb_per_s: Option<f64>,
    /// The workload's goal, and whether the best candidate met it.
    pub goal: String,
    /// The baseline the goal is measured against (`Workload::goal_baseline`); absent in
    /// rows written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal_vs: Option<String>,
    pub met: bool,
    /// False where a correct kernel ran but the goal's library did not run beside it:
    /// the row is neither met nor missed (`Workload::goal_judged`; rows written before it
    /// was recorded read true).
    #[serde(default = "judged_by_default")]
    pub judged: bool,
    pub search: SearchOutcome,
}

fn judged_by_default() -> bool {
    true
}

/// The whole bench result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    pub suite: String,
    pub description: String,
    pub device: String,
    pub date: String,
    pub rows: Vec<BenchRow>,
    /// The suite's `stages` (one Model's workloads in the order they run, with repeats).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<String>,
}

/// `cutesmith bench SUITE`.
pub fn cmd_bench(
    opts: &ToolchainOptions,
    no_install: bool,
    config: &Config,
    args: BenchArgs,
) -> Result<i32> {
    crate::eval::gpu::require_gpu()?;
    let tc = ensure_toolchain(opts, no_install)?;
    let (name, mut spec) = crate::spec::suite::load(&args.workloads_dir, &args.suite)?;
    // The command line wins over the suite file, which wins over the default.
    let candidates = args.max_candidates.or(spec.max_candidates).unwrap_or(4);
    spec.max_candidates = Some(candidates);
    spec.provider = Some("builtin".into());
    // The device the table names: the first GPU of the pool (--gpus), all of one model.
    let pool = crate::agent::launch::gpus(args.gpus.as_deref())?;
    let first = crate::eval::gpu::devices()?
        .into_iter()
        .nth(pool.first().map_or(0, |g| g.ordinal));
    let device = first.as_ref().map(|d| d.name.clone()).unwrap_or_default();
    let arch = first
        .as_ref()
        .map(|d| d.arch())
        .unwrap_or_else(|| "sm_90a".into());
    let jobs = args.jobs.unwrap_or_else(compile::default_jobs);
    // Rows of an earlier, interrupted run of this suite on this device; with --only, the
    // rows of the workloads it leaves out.
    let selected = select(&name, &spec.workloads, &args.only)?;
    let mut kept: Vec<BenchRow> = if args.resume || !args.only.is_empty() {
        previous_rows(&args.out, &name, &device, &spec.workloads)?
    } else {
        Vec::new()
    };
    if !args.only.is_empty() && !args.resume {
        kept.retain(|r| !selected.contains(&r.workload));
    }
    if !kept.is_empty() {
        eprintln!(
            "keeping {} of {} workloads' rows from {}/{name}.json (measured there on this GPU model; not measured again)",
            kept.len(),
            spec.workloads.len(),
            args.out.display()
        );
    }
    let order = spec.workloads.clone();
    spec.workloads
        .retain(|n| selected.contains(n) && !kept.iter().any(|r| &r.workload == n));
    let workloads = spec
        .workloads
        .iter()
        .map(|n| Workload::find(&args.workloads_dir, n).map_err(Error::from))
        .collect::<Result<Vec<_>>>()?;
    precompile(&tc, &workloads, candidates, &arch, jobs);
    // Each session tries every candidate: no round, patience or roofline stop before the
    // candidates run out, and no debug budget (the built-in provider answers a debug
    // request with its next candidate).
    let rounds = u32::try_from(candidates).unwrap_or(u32::MAX);
    let run = RunArgs {
        workload: String::new(),
        resume: None,
        workloads_dir: args.workloads_dir.clone(),
        runs_dir: args.runs_dir.clone(),
        builtin: true,
        replay: None,
        seed_from_builtin: 0,
        max_candidates: candidates,
        reply_mode: None,
        slurm: Default::default(),
        rounds,
        samples: 1,
        population: 0,
        debug_attempts: rounds,
        patience: rounds,
        max_tokens: 0,
        max_cost: 0.0,
        max_time: 0.0,
        roofline_target: 0.0,
        seeds: 2,
        timing_runs: 30,
        timeout: 300,
        jobs: Some(jobs),
        no_profile: true,
        gpus: args.gpus.clone(),
        view: ViewArgs {
            stream: false,
            quiet: true,
        },
    };
    let date = crate::clock::today();
    let report = |rows: &[SuiteRow]| {
        let mut all: Vec<BenchRow> = kept.clone();
        all.extend(rows.iter().map(row));
        // In the suite's order.
        all.sort_by_key(|r| order.iter().position(|n| n == &r.workload));
        BenchReport {
            suite: name.clone(),
            description: spec.description.clone(),
            device: device.clone(),
            date: date.clone(),
            rows: all,
            stages: spec.stages.clone(),
        }
    };
    // While the sessions measure, the next workloads' kernels compile on the idle cores,
    // planned with what the tuning database has learned by then (the sessions reorder
    // their candidates by it, past what the precompile saw). The lookahead hears how many
    // workloads finished, and stops once this sender is gone (the sessions ended, or
    // panicked).
    let (finished, heard) = std::sync::mpsc::channel::<usize>();
    let (rows, _) = std::thread::scope(|scope| {
        scope.spawn(|| lookahead(&tc, &workloads, candidates, &arch, jobs, heard));
        let finished = finished;
        suite::run_sessions(opts, no_install, config, &run, &name, &spec, &mut |rows| {
            let _ = finished.send(rows.len());
            // Written after every workload: a crash loses at most the one in flight.
            write(&args.out, &report(rows))
        })
    })?;
    let report = report(&rows);
    print!("{}", markdown(&report));
    eprintln!(
        "written: {}/{}.md and .json",
        args.out.display(),
        report.suite
    );
    Ok(if report.rows.iter().all(|r| r.met) {
        EXIT_OK
    } else {
        suite::exit_code(&rows).max(super::EXIT_GOAL_NOT_MET)
    })
}

/// The rows of `dir/<suite>.json` (for `--resume` and `--only`) for workloads still in the
/// suite, when that report was measured on `device`; none when there is no report. A
/// report from another device is an error (ratios are measured on one kind of GPU), as is
/// one that cannot be read.
fn previous_rows(dir: &Path, suite: &str, device: &str, names: &[String]) -> Result<Vec<BenchRow>> {
    let path = dir.join(format!("{suite}.json"));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).at(&path),
    };
    let old: BenchReport = serde_json::from_str(&text).map_err(|e| Error::Format {
        context: format!("{} (--resume, --only)", path.display()),
        message: e.to_string(),
    })?;
    if old.device != device {
        return Err(Error::Format {
            context: format!("{} (--resume, --only)", path.display()),
            message: format!(
                "measured on {}, this run is on {device}: run without --resume and --only, or with another --out",
                old.device
            ),
        });
    }
    Ok(old
        .rows
        .into_iter()
        .filter(|r| names.contains(&r.workload))
        .collect())
}

/// Compiles every candidate of every workload first, all cores at once, exactly as the
/// sessions will ask for them ([`Strategy::instantiate`] for `arch`), so each session
/// finds its candidates in the compile cache. A failure here is not an error: the
/// session meets it again and records it.
fn precompile(
    tc: &crate::toolchain::Toolchain,
    workloads: &[Workload],
    candidates: usize,
    arch: &str,
    jobs: usize,
) {
    let mut requests: Vec<CompileRequest> = Vec::new();
    // A kernel several workloads instantiate alike (same dtypes, layouts, chain and
    // parameters) has one cache key: compiled once for all of them.
    let mut keys = std::collections::HashSet::new();
    let db = crate::tuning::default_path();
    let (mut ranked, mut total) = (0, 0);
    for w in workloads {
        let (planned, known) = plan_requests(tc, w, candidates, db.as_deref(), arch);
        ranked += known;
        total += planned.len();
        for (key, req) in planned {
            if keys.insert(key) {
                requests.push(req);
            }
        }
    }
    eprintln!(
        "compiling {} distinct kernel instances for {total} candidates, {jobs} at a time ({ranked} candidates ordered by what the tuning database measured before)",
        requests.len()
    );
    let done = std::sync::atomic::AtomicUsize::new(0);
    let cache = CompileCache::default_location();
    let _ = compile::compile_many(tc, &cache, &requests, jobs, &|i, r| {
        let n = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let status = match r {
            Ok(o) if o.ok() => "ok",
            Ok(_) => "FAILED",
            Err(_) => "error",
        };
        let label = requests[i]
            .source
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("// cutesmith built-in strategy: "))
            .unwrap_or("");
        eprintln!("  compiled {n}/{}: {label} {status}", requests.len());
    });
}

/// How many workloads ahead of the last finished one [`lookahead`] compiles.
const LOOKAHEAD: usize = 2;

/// Compiles the kernels of each unfinished workload (in the suite's order) that its plan
/// asks for and the compile cache lacks, `jobs` at a time, once at most [`LOOKAHEAD`]
/// workloads before it remain unfinished, so that the plan sees the tuning database as
/// the session will. `finished` brings the count of finished workloads; the lookahead
/// ends when every workload is planned or its sender is gone. Failures are left to the
/// sessions, which meet them again.
fn lookahead(
    tc: &crate::toolchain::Toolchain,
    workloads: &[Workload],
    candidates: usize,
    arch: &str,
    jobs: usize,
    finished: std::sync::mpsc::Receiver<usize>,
) {
    use std::sync::mpsc::TryRecvError;
    let db = crate::tuning::default_path();
    let cache = CompileCache::default_location();
    let mut done = 0;
    for (i, w) in workloads.iter().enumerate() {
        // The latest count; wait for more while this workload is too far ahead.
        loop {
            match finished.try_recv() {
                Ok(n) => done = n,
                Err(TryRecvError::Disconnected) => return,
                Err(TryRecvError::Empty) if done + LOOKAHEAD < i => match finished.recv() {
                    Ok(n) => done = n,
                    Err(_) => return,
                },
                Err(TryRecvError::Empty) => break,
            }
        }
        // Its session has finished (or is running, with its own kernels compiled).
        if i <= done {
            continue;
        }
        let missing = missing_requests(tc, &cache, w, candidates, db.as_deref(), arch);
        if !missing.is_empty() {
            let _ = compile::compile_many(tc, &cache, &missing, jobs, &|_, _| {});
        }
    }
}

/// The compile requests of `w`'s planned candidates (at most `candidates`, ordered by the
/// tuning database at `db`) whose kernels are not in `cache`.
pub fn missing_requests(
    tc: &crate::toolchain::Toolchain,
    cache: &CompileCache,
    w: &Workload,
    candidates: usize,
    db: Option<&Path>,
    arch: &str,
) -> Vec<CompileRequest> {
    plan_requests(tc, w, candidates, db, arch)
        .0
        .into_iter()
        .filter(|(key, _)| cache.lookup(key).is_none())
        .map(|(_, req)| req)
        .collect()
}

/// Each of `w`'s planned candidates (at most `candidates`, ordered by the tuning database
/// at `db`) as its cache key and compile request, exactly as the session will ask
/// ([`Strategy::compile_request`] for `arch`), and how many of them the database ranked.
pub fn plan_requests(
    tc: &crate::toolchain::Toolchain,
    w: &Workload,
    candidates: usize,
    db: Option<&Path>,
    arch: &str,
) -> (Vec<(String, CompileRequest)>, usize) {
    let (planned, known) = crate::tuning::planned(w, candidates, db);
    let requests = planned
        .iter()
        .filter_map(|s| s.compile_request(w, arch).ok())
        .map(|req| (compile::cache_key(tc, &req), req))
        .collect();
    (requests, known)
}

/// The bench row of one workload, from its session.
fn row(r: &SuiteRow) -> BenchRow {
    let (root, state) = match &r.result {
        Ok((root, _, state)) => (Some(root.as_path()), Some(state)),
        Err(_) => (None, None),
    };
    let dir = root.and_then(|p| SessionDir::open(p).ok());
    let workload = dir
        .as_ref()
        .and_then(|d| d.workload(&d.load_spec().ok()?).ok());
    let search = match (&dir, &workload, state) {
        (Some(d), Some(w), Some(st)) => search_of(d, w, st),
        _ => SearchOutcome {
            workload: r.workload.clone(),
            tried: Vec::new(),
            best: None,
            rejected: Vec::new(),
        },
    };
    let best = search.best();
    let timing = best.and_then(|b| b.timing.clone());
    let best_us = best.and_then(|b| b.median_us());
    let baselines: Vec<(String, f64, Option<f64>)> = timing
        .as_ref()
        .map(|t| {
            t.baselines
                .iter()
                .map(|b| (b.name.clone(), b.stats.median_us, b.speedup))
                .collect()
        })
        .unwrap_or_default();
    let (goal, met) = match (&workload, &r.result) {
        (Some(w), _) => w.goal(
            best_us,
            &baselines,
            timing.as_ref().and_then(|t| t.roofline_fraction),
        ),
        (None, Err(e)) => (format!("error: {e}"), false),
        (None, Ok(_)) => ("no correct candidate".into(), false),
    };
    let judged = workload
        .as_ref()
        .is_none_or(|w| w.goal_judged(best_us, &baselines));
    BenchRow {
        workload: r.workload.clone(),
        shape: workload
            .as_ref()
            .map(|w| w.headline().to_string())
            .unwrap_or_default(),
        session: root.map(|p| p.display().to_string()).unwrap_or_default(),
        best: best.map(|b| b.strategy.label()),
        best_us,
        baselines,
        roofline_fraction: timing.as_ref().and_then(|t| t.roofline_fraction),
        tflops: timing.as_ref().and_then(|t| t.achieved_tflops),
        tb_per_s: timing.as_ref().and_then(|t| t.achieved_tb_per_s),
        goal,
        goal_vs: workload.as_ref().map(|w| w.goal_baseline().to_string()),
        met,
        judged,
        search,
    }
}

/// Every version of a built-in session as a tried candidate, and the strategies the
/// rules rejected before compiling.
fn search_of(dir: &SessionDir, w: &Workload, state: &State) -> SearchOutcome {
    let space = strategy::space(w);
    let tried: Vec<Tried> = state
        .versions
        .iter()
        .map(|v| {
            let d = dir.version_dir(v.n);
            let compiled: Option<CompileOutcome> = dir.read_json(&d.join("compile.json")).ok();
            let evaluated: Option<Evaluation> = dir.read_json(&d.join("evaluation.json")).ok();
            let strategy = space
                .iter()
                .find(|(s, _)| s.label() == v.change)
                .map(|(s, _)| s.clone())
                .unwrap_or_else(|| Strategy {
                    template: v.change.clone(),
                    params: Default::default(),
                    rationale: String::new(),
                });
            let (outcome, detail) = match (v.status.as_str(), &compiled, &evaluated) {
                ("compile_failed", Some(c), _) => {
                    ("compile failed".to_string(), c.condensed.clone())
                }
                ("correct", _, _) => ("correct".to_string(), String::new()),
                (status, _, Some(e)) => (
                    status.to_string(),
                    e.fault
                        .as_ref()
                        .map(|f| f.message.lines().take(6).collect::<Vec<_>>().join("\n"))
                        .unwrap_or_default(),
                ),
                (status, _, None) => (status.to_string(), String::new()),
            };
            Tried {
                strategy,
                outcome,
                detail,
                timing: evaluated
                    .as_ref()
                    .and_then(|e| e.report.as_ref()?.timing.clone()),
                compile_seconds: compiled.as_ref().map_or(0.0, |c| c.nvcc_seconds),
                evaluate_seconds: evaluated.as_ref().map_or(0.0, |e| e.seconds),
                accuracy: evaluated
                    .as_ref()
                    .and_then(|e| e.report.as_ref())
                    .map(|r| accuracy_of(&r.validations))
                    .unwrap_or_default(),
            }
        })
        .collect();
    let best = state
        .best
        .and_then(|b| state.versions.iter().position(|v| v.n == b));
    SearchOutcome {
        workload: w.name().to_string(),
        tried,
        best,
        rejected: space
            .into_iter()
            .filter_map(|(s, v)| v.err().map(|why| (s, why)))
            .collect(),
    }
}

/// Per validated shape, the accuracy of the seed whose RMS error is furthest above the
/// library's, in the order the shapes were validated.
fn accuracy_of(
    validations: &[crate::eval::job::ShapeValidation],
) -> Vec<(String, crate::eval::job::ErrorVsLibrary)> {
    let mut out: Vec<(String, crate::eval::job::ErrorVsLibrary)> = Vec::new();
    for v in validations {
        let Some(a) = v.fp64.as_ref().and_then(|f| f.accuracy) else {
            continue;
        };
        let shape = v.shape.to_string();
        match out.iter_mut().find(|(s, _)| *s == shape) {
            Some((_, kept)) if a.rms_ratio() > kept.rms_ratio() => *kept = a,
            Some(_) => {}
            None => out.push((shape, a)),
        }
    }
    out
}

/// Writes `<suite>.md` and `<suite>.json` into `dir`.
pub fn write(dir: &Path, r: &BenchReport) -> Result<()> {
    std::fs::create_dir_all(dir).at(dir)?;
    let json = serde_json::to_string_pretty(r).map_err(|e| Error::Format {
        context: "bench report".into(),
        message: e.to_string(),
    })?;
    let jp = dir.join(format!("{}.json", r.suite));
    std::fs::write(&jp, json).at(&jp)?;
    let mp = dir.join(format!("{}.md", r.suite));
    std::fs::write(&mp, markdown(r)).at(&mp)?;
    Ok(())
}

/// The baseline a row's goal is measured against, and the row's speedup over it.
fn goal_speedup(row: &BenchRow) -> Option<(String, f64)> {
    let name = row.goal_vs.as_deref()?;
    let b = row
        .baselines
        .iter()
        .find(|b| b.0.split(' ').next() == Some(name) && b.0 != crate::eval::job::TF32_REFERENCE)?;
    Some((name.to_string(), b.2?))
}

/// The geometric mean and the lowest of positive speedups (`xs` not empty).
fn geomean_and_lowest(xs: &[f64]) -> (f64, f64) {
    let geo = (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp();
    (geo, xs.iter().copied().fold(f64::INFINITY, f64::min))
}

/// The lines under the table: how many rows met their goal, and per goal baseline the
/// geometric mean and the lowest of the rows' speedups over it.
fn summary(rows: &[BenchRow]) -> String {
    let met = rows.iter().filter(|r| r.met).count();
    let unjudged = rows.iter().filter(|r| !r.judged).count();
    let mut s = format!(
        "
{met} of {} rows meet their goal{}.",
        rows.len(),
        if unjudged > 0 {
            format!(
                " ({unjudged} not judged: the goal's library did not run beside {})",
                if unjudged == 1 { "it" } else { "them" }
            )
        } else {
            String::new()
        }
    );
    let mut groups: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for (name, x) in rows.iter().filter_map(goal_speedup) {
        if x > 0.0 {
            groups.entry(name).or_default().push(x);
        }
    }
    if !groups.is_empty() {
        s.push_str(
            " Against each row's goal baseline, the geometric mean (lowest) of the speedups:",
        );
        let parts: Vec<String> = groups
            .iter()
            .map(|(name, xs)| {
                let (geo, low) = geomean_and_lowest(xs);
                let (g, l) = if name == "copy" {
                    (
                        format!("{:.0}%", geo * 100.0),
                        format!("{:.0}%", low * 100.0),
                    )
                } else {
                    (format!("{geo:.2}x"), format!("{low:.2}x"))
                };
                format!(" {name} {g} ({l}) over {} rows", xs.len())
            })
            .collect();
        s.push_str(&parts.join(";"));
        s.push('.');
    }
    // The rows counted against cuBLAS above, also against cuBLASLt (the best of its
    // heuristic's algorithms), where it ran beside them.
    let lt: Vec<f64> = rows
        .iter()
        .filter(|r| goal_speedup(r).is_some_and(|(name, x)| name == "cublas" && x > 0.0))
        .filter_map(|r| r.baselines.iter().find(|b| b.0.starts_with("cublaslt"))?.2)
        .filter(|x| *x > 0.0)
        .collect();
    if !lt.is_empty() {
        let (geo, low) = geomean_and_lowest(&lt);
        s.push_str(&format!(
            " The rows judged against cublas, against cublaslt: {geo:.2}x ({low:.2}x) over {} rows.",
            lt.len()
        ));
    }
    s.push('\n');
    s
}

/// A stage's library time: what a PyTorch user runs for it today, the unfused library
/// sequence where the row has one, else the vendor library (cuBLAS before cuBLASLt; not
/// TF32's reference, which is not fp32-accurate, nor the copy).
fn library_us(row: &BenchRow) -> Option<(String, f64)> {
    let named = |n: &str| {
        row.baselines
            .iter()
            .find(|b| b.0.split(' ').next() == Some(n) && b.0 != crate::eval::job::TF32_REFERENCE)
            .map(|b| (n.to_string(), b.1))
    };
    named("unfused").or_else(|| {
        row.baselines
            .iter()
            .find(|b| b.0 != "copy" && b.0 != crate::eval::job::TF32_REFERENCE)
            .map(|b| (b.0.split(' ').next().unwrap_or("").to_string(), b.1))
    })
}

/// For a suite of one Model's stages: their best times added up in the order they run
/// (a workload once per stage it runs as), beside the library's. A stage with no library
/// time beside it (a copy of a strided view, which torch makes with its own copy kernel; a
/// norm or a reduction timed against the copy alone) counts the device copy of its bytes
/// for the library: no library kernel moves them faster, so the library total is then a
/// lower bound and the speedup over it a conservative one.
fn stage_total(r: &BenchReport) -> String {
    if r.stages.is_empty() {
        return String::new();
    }
    let mut ours = 0.0;
    let mut lib = 0.0;
    let mut libs: Vec<String> = Vec::new();
    let mut missing: Vec<&str> = Vec::new();
    let mut stand_ins: Vec<&str> = Vec::new();
    for st in &r.stages {
        let Some(row) = r.rows.iter().find(|row| &row.workload == st) else {
            missing.push(st);
            continue;
        };
        let copy = || {
            row.baselines
                .iter()
                .find(|b| b.0 == "copy")
                .map(|b| ("copy".to_string(), b.1))
        };
        let found = library_us(row);
        let stand_in = found.is_none();
        match (row.best_us, found.or_else(copy)) {
            (Some(b), Some((name, l))) => {
                ours += b;
                lib += l;
                if stand_in {
                    if !stand_ins.contains(&st.as_str()) {
                        stand_ins.push(st);
                    }
                } else if !libs.contains(&name) {
                    libs.push(name);
                }
            }
            _ => missing.push(st),
        }
    }
    let n = r.stages.len();
    let order = r.stages.join(", ");
    if !missing.is_empty() {
        let mut seen = std::collections::HashSet::new();
        missing.retain(|m| seen.insert(*m));
        // Our kernels' sum where every stage has one, without the library's.
        let ours_all: Option<f64> = r
            .stages
            .iter()
            .map(|st| r.rows.iter().find(|row| &row.workload == st)?.best_us)
            .sum();
        let lacking = if missing.len() == 1 { "has" } else { "have" };
        return match ours_all {
            Some(t) => format!(
                "\n\nThe Model as its {n} stages run one after another ({order}): the best \
                 kernels take {t:.1} us; no library total, {} {lacking} no library time \
                 beside {} (time the Model in eager PyTorch: \
                 scripts/probes/torch_model.py).\n",
                missing.join(", "),
                if missing.len() == 1 { "it" } else { "them" }
            ),
            None => format!(
                "\n\nThe Model as its {n} stages run one after another: no total, {} {lacking} \
                 no correct kernel or no library time beside {}.\n",
                missing.join(", "),
                if missing.len() == 1 { "it" } else { "them" }
            ),
        };
    }
    let per_stage = match (libs.is_empty(), stand_ins.is_empty()) {
        (_, true) => format!("{} per stage", libs.join(" or ")),
        (true, false) => "the copy of each stage's bytes, as none has a library time: a lower \
                          bound"
            .to_string(),
        (false, false) => format!(
            "{} per stage, and the copy of its bytes for {}, which {} no library time: a lower \
             bound",
            libs.join(" or "),
            stand_ins.join(", "),
            if stand_ins.len() == 1 { "has" } else { "have" }
        ),
    };
    format!(
        "\n\nThe Model as its {n} stages run one after another ({order}): the best kernels take \
         {ours:.1} us, the library sequence ({per_stage}) {lib:.1} us: {:.2}x. (PyTorch may \
         run the Model otherwise, such as attention as one fused kernel: \
         scripts/probes/torch_model.py times it in eager PyTorch.)\n",
        lib / ours
    )
}

/// The Markdown table.
pub fn markdown(r: &BenchReport) -> String {
    let mut s = format!(
        "# cutesmith bench `{}` on {} ({})\n\n{}\n\nEach row: the built-in provider's fastest correct \
         strategy, timed in the same worker process as the vendor library (interleaved, L2 \
         flushed, median of 30). Speedup = library time / best time; for memory-bound ops the \
         `copy` column is the fraction of a device-to-device copy of the same bytes.\n\n",
        r.suite, r.device, r.date, r.description
    );
    s.push_str("| workload | shape | best strategy | best us | vendor us (speedup) | copy us (fraction) | TFLOP/s | TB/s | % roofline | goal | met |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for row in &r.rows {
        let vendor: Vec<String> = row
            .baselines
            .iter()
            .filter(|b| b.0 != "copy")
            .map(|b| {
                format!(
                    "{} {:.1} ({})",
                    // The first word names the library, but TF32's row keeps its label.
                    if b.0 == crate::eval::job::TF32_REFERENCE {
                        b.0.as_str()
                    } else {
                        b.0.split(' ').next().unwrap_or("")
                    },
                    b.1,
                    b.2.map(|x| format!("{x:.2}x")).unwrap_or_default()
                )
            })
            .collect();
        let copy = row
            .baselines
            .iter()
            .find(|b| b.0 == "copy")
            .map(|b| {
                format!(
                    "{:.1} ({})",
                    b.1,
                    b.2.map(|x| format!("{:.0}%", x * 100.0))
                        .unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "-".into());
        let f =
            |x: Option<f64>, d: usize| x.map(|v| format!("{v:.d$}")).unwrap_or_else(|| "-".into());
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.workload,
            row.shape,
            row.best.clone().unwrap_or_else(|| "none correct".into()),
            f(row.best_us, 2),
            if vendor.is_empty() {
                "-".into()
            } else {
                vendor.join("; ")
            },
            copy,
            f(row.tflops, 1),
            f(row.tb_per_s, 2),
            f(row.roofline_fraction.map(|x| x * 100.0), 0),
            row.goal,
            if !row.judged {
                "-"
            } else if row.met {
                "yes"
            } else {
                "NO"
            }
        ));
    }
    s.push_str(&summary(&r.rows));
    s.push_str(&stage_total(r));
    // fp32 workloads: the best kernel's error beside cuBLAS fp32's, shape by shape.
    let accuracy: Vec<(&str, &Tried)> = r
        .rows
        .iter()
        .filter_map(|row| {
            let best = row.search.best()?;
            (!best.accuracy.is_empty()).then_some((row.workload.as_str(), best))
        })
        .collect();
    if !accuracy.is_empty() {
        s.push_str("\n## Accuracy against fp64\n\nThe best kernel's error on the sampled entries of each validated shape (absolute, over 256 samples; the seed with the largest RMS ratio), beside cuBLAS fp32's (no TF32) on the same inputs. RMS ratios above 4 are rejected as a precision downgrade; the goal for 3xTF32 kernels is 2 or less.\n\n| workload | shape | max err | RMS err | cuBLAS fp32 max | cuBLAS fp32 RMS | RMS ratio | max ratio |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for (w, t) in accuracy {
            for (shape, a) in &t.accuracy {
                let max_ratio = if a.library_max > 0.0 {
                    format!("{:.2}", a.max / a.library_max)
                } else {
                    "-".into()
                };
                s.push_str(&format!(
                    "| {w} | {shape} | {:.2e} | {:.2e} | {:.2e} | {:.2e} | {:.2} | {max_ratio} |\n",
                    a.max,
                    a.rms,
                    a.library_max,
                    a.library_rms,
                    a.rms_ratio()
                ));
            }
        }
    }
    s.push_str("\n## Every candidate\n\n| workload | strategy | outcome | us |\n| --- | --- | --- | --- |\n");
    for row in &r.rows {
        for t in &row.search.tried {
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                row.workload,
                t.strategy.label(),
                t.outcome,
                t.median_us()
                    .map(|v| format!("{v:.2}"))
                    .unwrap_or_else(|| "-".into())
            ));
        }
    }
    // Timings whose first batch was disturbed: said beside the table, not hidden.
    let retimed: Vec<String> = r
        .rows
        .iter()
        .flat_map(|row| {
            row.search.tried.iter().filter_map(move |t| {
                let why = t.timing.as_ref()?.retimed.as_ref()?;
                Some(format!(
                    "- {} {}: {why}\n",
                    row.workload,
                    t.strategy.label()
                ))
            })
        })
        .collect();
    if !retimed.is_empty() {
        s.push_str(&format!(
            "\n{} timing{} re-timed after a disturbed batch:\n\n",
            retimed.len(),
            if retimed.len() == 1 { " was" } else { "s were" }
        ));
        s.extend(retimed);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_selects_workloads_by_glob_and_names_a_pattern_that_matches_none() {
        let glob_match = |p: &str, n: &str| glob(p).unwrap().is_match(n);
        assert!(glob_match("*_m256", "llm_qwen2_7b_qkv_m256"));
        assert!(!glob_match("*_m256", "llm_qwen2_7b_qkv_m2560"));
        assert!(glob_match("llm_*_qkv_m?4", "llm_llama3_8b_qkv_m64"));
        assert!(!glob_match("llm_*_qkv_m?4", "llm_llama3_8b_qkv_m1024"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "a_x_b_y_c"));
        assert!(!glob_match("a*b*c", "a_x_b_y_d"));
        assert!(glob_match("exact", "exact") && !glob_match("exact", "exactly"));
        let suite: Vec<String> = ["a_m16", "a_m256", "b_m256", "b_m1024"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(select("s", &suite, &[]).unwrap(), suite);
        assert_eq!(
            select("s", &suite, &["*_m256".into(), "a_m16".into()]).unwrap(),
            vec!["a_m16", "a_m256", "b_m256"]
        );
        let e = select("s", &suite, &["*_m64".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--only '*_m64'") && e.contains("a_m16, a_m256"),
            "{e}"
        );
    }

    #[test]
    fn the_summary_takes_each_row_against_its_goal_baseline() {
        let row = |goal: &str, vs: Option<&str>, baselines: Vec<(&str, f64)>, met: bool| BenchRow {
            workload: "w".into(),
            shape: "s".into(),
            session: String::new(),
            best: Some("x".into()),
            best_us: Some(1.0),
            baselines: baselines
                .into_iter()
                .map(|(n, x)| (n.to_string(), 1.0, Some(x)))
                .collect(),
            roofline_fraction: None,
            tflops: None,
            tb_per_s: None,
            goal: goal.into(),
            goal_vs: vs.map(String::from),
            met,
            judged: true,
            search: SearchOutcome {
                workload: "w".into(),
                tried: Vec::new(),
                best: None,
                rejected: Vec::new(),
            },
        };
        let rows = vec![
            row(
                "1.00x cublas",
                Some("cublas"),
                vec![("cublas", 0.98), ("cublaslt (best of 8)", 0.99)],
                false,
            ),
            row(
                "1.00x cublas",
                Some("cublas"),
                vec![("cublas", 2.0), (crate::eval::job::TF32_REFERENCE, 0.25)],
                true,
            ),
            row(
                "1.20x unfused",
                Some("unfused"),
                vec![("cublas", 0.9), ("unfused", 1.5)],
                true,
            ),
            row("90% of copy", Some("copy"), vec![("copy", 0.88)], false),
            row("no correct candidate", None, vec![], false),
        ];
        let s = summary(&rows);
        // cublas: sqrt(0.98 * 2.0) = 1.40; the fused row counts against unfused only.
        assert!(s.contains("2 of 5 rows meet their goal."), "{s}");
        // A row whose goal's library did not run is neither met nor missed.
        let mut unjudged = rows.clone();
        unjudged.push(BenchRow {
            judged: false,
            ..row(
                "1.00x cublaslt: no cublaslt ran beside it, not judged",
                Some("cublaslt"),
                vec![],
                false,
            )
        });
        let u = summary(&unjudged);
        assert!(
            u.contains(
                "2 of 6 rows meet their goal (1 not judged: the goal's library did not run beside it)."
            ),
            "{u}"
        );
        assert!(s.contains("copy 88% (88%) over 1 rows"), "{s}");
        assert!(s.contains("cublas 1.40x (0.98x) over 2 rows"), "{s}");
        assert!(s.contains("unfused 1.50x (1.50x) over 1 rows"), "{s}");
        // cuBLASLt ran beside one of the two rows judged against cuBLAS.
        assert!(
            s.contains(
                " The rows judged against cublas, against cublaslt: 0.99x (0.99x) over 1 rows.\n"
            ),
            "{s}"
        );
    }

    /// A row judged against cuBLAS (met), its candidates not listed.
    fn test_row(
        workload: &str,
        best_us: Option<f64>,
        baselines: Vec<(String, f64, Option<f64>)>,
    ) -> BenchRow {
        BenchRow {
            workload: workload.into(),
            shape: "64x64x64".into(),
            session: String::new(),
            best: best_us.map(|_| "gemm".into()),
            best_us,
            baselines,
            roofline_fraction: None,
            tflops: None,
            tb_per_s: None,
            goal: "1.00x cublas".into(),
            goal_vs: Some("cublas".into()),
            met: true,
            judged: true,
            search: SearchOutcome {
                workload: workload.into(),
                tried: Vec::new(),
                best: None,
                rejected: Vec::new(),
            },
        }
    }

    #[test]
    fn a_models_stages_add_up_against_the_library_sequence() {
        let row = test_row;
        let tf32 = (crate::eval::job::TF32_REFERENCE.to_string(), 1.0, Some(9.0));
        let mut r = BenchReport {
            suite: "m".into(),
            description: "d".into(),
            device: "GPU".into(),
            date: "2026-11-29".into(),
            // The second workload runs twice.
            stages: vec!["m_s1".into(), "m_s2".into(), "m_s2".into()],
            rows: vec![
                // A fused stage: its unfused sequence is what PyTorch runs.
                row(
                    "m_s1",
                    Some(10.0),
                    vec![
                        ("cublas".into(), 8.0, Some(0.8)),
                        ("unfused".into(), 15.0, Some(1.5)),
                    ],
                ),
                // A plain GEMM: cuBLAS, never TF32's reference.
                row(
                    "m_s2",
                    Some(20.0),
                    vec![tf32, ("cublas".into(), 30.0, Some(1.5))],
                ),
            ],
        };
        let md = markdown(&r);
        assert!(
            md.contains(
                "The Model as its 3 stages run one after another (m_s1, m_s2, m_s2): the best \
                 kernels take 50.0 us, the library sequence (unfused or cublas per stage) 75.0 \
                 us: 1.50x."
            ),
            "{md}"
        );
        // A copy of a strided view: the copy of its bytes stands in for torch's own.
        r.stages.push("m_s3".into());
        r.rows.push(row(
            "m_s3",
            Some(5.0),
            vec![("copy".into(), 4.0, Some(0.8))],
        ));
        let md = markdown(&r);
        assert!(
            md.contains(
                "the best kernels take 55.0 us, the library sequence (unfused or cublas per \
                 stage, and the copy of its bytes for m_s3, which has no library time: a lower \
                 bound) 79.0 us: 1.44x."
            ),
            "{md}"
        );
        r.stages.pop();
        r.rows.pop();
        // A stage without a correct kernel leaves no total, naming it.
        r.rows[1].best_us = None;
        let md = markdown(&r);
        assert!(md.contains("no total, m_s2 has no correct kernel"), "{md}");
        // Other suites say nothing of stages.
        r.stages.clear();
        assert!(!markdown(&r).contains("stages run"));
    }

    #[test]
    fn the_table_shows_every_candidate_and_the_goal() {
        let t = Tried {
            strategy: Strategy {
                template: "elementwise_activation".into(),
                params: [("CS_VECS_PER_THREAD".to_string(), 4)]
                    .into_iter()
                    .collect(),
                rationale: String::new(),
            },
            outcome: "out_of_bounds".into(),
            detail: "bad".into(),
            timing: None,
            compile_seconds: 1.0,
            evaluate_seconds: 2.0,
            accuracy: Vec::new(),
        };
        let r = BenchReport {
            suite: "s".into(),
            description: "d".into(),
            device: "GPU".into(),
            date: "2026-11-23".into(),
            stages: Vec::new(),
            rows: vec![BenchRow {
                workload: "act".into(),
                shape: "1024".into(),
                session: "runs/act-1".into(),
                best: None,
                best_us: None,
                baselines: vec![("copy".into(), 10.0, None)],
                roofline_fraction: None,
                tflops: None,
                tb_per_s: None,
                goal: "90% of copy".into(),
                goal_vs: Some("copy".into()),
                met: false,
                judged: true,
                search: SearchOutcome {
                    workload: "act".into(),
                    tried: vec![t],
                    best: None,
                    rejected: Vec::new(),
                },
            }],
        };
        let md = markdown(&r);
        assert!(md.contains("\n0 of 1 rows meet their goal.\n"), "{md}");
        assert!(!md.contains("## Accuracy"), "{md}");
        assert!(md.contains("| act | 1024 | none correct |"), "{md}");
        assert!(md.contains("| 90% of copy | NO |"), "{md}");
        assert!(
            md.contains("| act | elementwise_activation VECS_PER_THREAD=4 | out_of_bounds | - |"),
            "{md}"
        );
        assert!(!md.contains("re-timed"), "{md}");
        // A timing whose first batch was disturbed is named under the table.
        let mut again = r.clone();
        let tried = &mut again.rows[0].search.tried[0];
        tried.outcome = "correct".into();
        tried.timing = Some(TimingReport {
            shape: crate::spec::Shape::gemm(1024, 1, 1),
            flops: 0.0,
            min_bytes: 0.0,
            floor_s: 0.0,
            candidate: crate::eval::job::Stats::from_samples(&[12.0]),
            roofline_fraction: None,
            achieved_tflops: None,
            achieved_tb_per_s: None,
            baselines: Vec::new(),
            retimed: Some("3 batches were timed".into()),
        });
        let md = markdown(&again);
        assert!(
            md.contains("1 timing was re-timed after a disturbed batch:\n\n- act elementwise_activation VECS_PER_THREAD=4: 3 batches were timed\n"),
            "{md}"
        );

        // --resume keeps the rows of workloads still in the suite, from the same device.
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &r).unwrap();
        let names = vec!["act".to_string(), "gemm".to_string()];
        let kept = previous_rows(dir.path(), "s", "GPU", &names).unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].workload, "act");
        assert!(previous_rows(dir.path(), "s", "GPU", &["gemm".to_string()])
            .unwrap()
            .is_empty());
        assert!(previous_rows(dir.path(), "other", "GPU", &names)
            .unwrap()
            .is_empty());
        let err = previous_rows(dir.path(), "s", "Another GPU", &names).unwrap_err();
        assert!(err.to_string().contains("measured on GPU"), "{err}");
        std::fs::write(dir.path().join("s.json"), "{ truncated").unwrap();
        let err = previous_rows(dir.path(), "s", "GPU", &names).unwrap_err();
        assert!(err.to_string().contains("s.json"), "{err}");
    }

    #[test]
    fn an_fp32_row_shows_its_error_beside_the_library_per_shape() {
        use crate::eval::job::{ErrorVsLibrary, Fp64Check, ShapeValidation};
        use crate::spec::Shape;
        let acc = |rms: f64| ErrorVsLibrary {
            max: 4.0 * rms,
            rms,
            library_max: 3e-4,
            library_rms: 6e-5,
        };
        let v = |shape: Shape, seed: u64, rms: f64| ShapeValidation {
            shape,
            seed,
            passed: true,
            comparison: None,
            fp64: Some(Fp64Check {
                samples: 256,
                failed: 0,
                max_normalized_error: 0.0,
                median_normalized_error: 0.0,
                bound: 1e-6,
                hint: None,
                accuracy: Some(acc(rms)),
            }),
            canaries_intact: true,
            fault: None,
            seconds: 0.0,
        };
        let big = Shape::gemm(4096, 4096, 4096);
        let small = Shape::gemm(127, 255, 64);
        // Per shape, the seed with the largest RMS ratio is kept, in validation order.
        let a = accuracy_of(&[v(big, 1, 2e-5), v(small, 1, 1e-6), v(big, 2, 3e-5)]);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].0, big.to_string());
        assert_eq!(a[0].1.rms, 3e-5);
        assert_eq!(a[1].0, small.to_string());

        let t = Tried {
            strategy: Strategy {
                template: "gemm_sm90_cutlass3_ws".into(),
                params: Default::default(),
                rationale: String::new(),
            },
            outcome: "correct".into(),
            detail: String::new(),
            timing: None,
            compile_seconds: 1.0,
            evaluate_seconds: 2.0,
            accuracy: a,
        };
        let r = BenchReport {
            suite: "fp32".into(),
            description: "d".into(),
            device: "GPU".into(),
            date: "2026-11-25".into(),
            stages: Vec::new(),
            rows: vec![BenchRow {
                shape: big.to_string(),
                session: "runs/x".into(),
                best: Some("gemm_sm90_cutlass3_ws".into()),
                search: SearchOutcome {
                    workload: "fp32_4096".into(),
                    tried: vec![t],
                    best: Some(0),
                    rejected: Vec::new(),
                },
                ..test_row(
                    "fp32_4096",
                    Some(1366.7),
                    vec![
                        ("cublas".into(), 2700.5, Some(1.98)),
                        (crate::eval::job::TF32_REFERENCE.into(), 339.2, Some(0.25)),
                    ],
                )
            }],
        };
        let md = markdown(&r);
        assert!(md.contains("## Accuracy against fp64"), "{md}");
        assert!(
            md.contains(&format!(
                "| fp32_4096 | {big} | 1.20e-4 | 3.00e-5 | 3.00e-4 | 6.00e-5 | 0.50 | 0.40 |"
            )),
            "{md}"
        );
        // The TF32 row keeps its label; the plain one is named by its library.
        assert!(
            md.contains("cublas 2700.5 (1.98x); cublas tf32 (not fp32-accurate) 339.2 (0.25x)"),
            "{md}"
        );
    }
}
