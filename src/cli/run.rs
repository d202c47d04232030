//! `cutesmith run W` (the main job) and `cutesmith resume runs/<id>`: build the engine's
//! parts from the command line and the config (provider, evaluator, toolchain, event
//! sinks), run the session to its end on a tokio runtime, and print where it is.
//! Ctrl-C stops after saving the state; `resume` continues.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::agent::engine::{Engine, Parts};
use crate::agent::evaluator::{self, Evaluator, GpuEvaluator, GPU_EVALUATOR, TEST_EVALUATOR_ENV};
use crate::events::{ConsoleSink, EventSink, Fanout, JsonlSink};
use crate::agent::machine::Budgets;
use crate::agent::session::{self, ProviderSpec, SessionDir, SessionSpec};
use crate::cli::{EXIT_ERROR, EXIT_GOAL_NOT_MET, EXIT_OK};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::provider::builtin::BuiltinProvider;
use crate::provider::openai::OpenAiProvider;
use crate::provider::replay::ReplayProvider;
use crate::provider::Provider;
use crate::eval::Evaluation;
use crate::toolchain::cache::CompileCache;
use crate::toolchain::compile;
use crate::toolchain::{Toolchain, ToolchainOptions};
use crate::spec::Workload;

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Workload name (from --workloads-dir) or path to a spec; `run` also takes a suite
    /// (workloads/suites/NAME.toml) and `session` a session directory.
    #[arg(required_unless_present = "resume", default_value = "")]
    pub workload: String,
    /// Continue the session in this directory (runs/<id>) instead of starting one.
    #[arg(long, value_name = "DIR", conflicts_with = "workload")]
    pub resume: Option<PathBuf>,
    #[arg(long, default_value = "workloads")]
    pub workloads_dir: PathBuf,
    /// Where sessions go (each in its own runs/<id>/).
    #[arg(long, default_value = "runs")]
    pub runs_dir: PathBuf,
    /// Use the built-in provider even if a model is configured.
    #[arg(long, conflicts_with = "replay")]
    pub builtin: bool,
    /// Play the replies of a transcript (a session's transcript.jsonl or a .toml file).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Try this many built-in strategies first; the model then starts from the best.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed_from_builtin: usize,
    /// Built-in provider: candidates to try (the most promising first).
    #[arg(long, default_value_t = 4)]
    pub max_candidates: usize,
    /// Optimization rounds.
    #[arg(long, default_value_t = 8)]
    pub rounds: u32,
    /// Failed debug attempts in a row before reverting to the best version.
    #[arg(long, default_value_t = 3)]
    pub debug_attempts: u32,
    /// Stop after this many rounds in a row without an accepted version.
    #[arg(long, default_value_t = 4)]
    pub patience: u32,
    /// Model token budget (prompt + completion); 0 = none.
    #[arg(long, default_value_t = 0)]
    pub max_tokens: u64,
    /// Dollar budget (needs prices in the config); 0 = none.
    #[arg(long, default_value_t = 0.0)]
    pub max_cost: f64,
    /// Wall-clock budget in seconds; 0 = none.
    #[arg(long, default_value_t = 0.0)]
    pub max_time: f64,
    /// Stop when the best version reaches this fraction of the roofline floor.
    #[arg(long, default_value_t = 0.95)]
    pub roofline_target: f64,
    /// Random seeds per shape in validation.
    #[arg(long, default_value_t = 2)]
    pub seeds: u64,
    /// Timed runs per contender.
    #[arg(long, default_value_t = 30)]
    pub timing_runs: u32,
    /// Seconds before a worker (a hanging kernel) is killed.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Parallel nvcc processes for the built-in provider's pre-compile.
    #[arg(short, long)]
    pub jobs: Option<usize>,
    #[command(flatten)]
    pub view: ViewArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ViewArgs {
    /// Print the model's reply as it streams.
    #[arg(long)]
    pub stream: bool,
    /// Print nothing but the final summary.
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The session directory (runs/<id>).
    pub session: PathBuf,
    #[command(flatten)]
    pub view: ViewArgs,
}

fn sinks(
    dir: &Path,
    view: &ViewArgs,
    extra: Vec<Box<dyn EventSink>>,
) -> Result<Arc<dyn EventSink>> {
    let mut v: Vec<Box<dyn EventSink>> =
        vec![Box::new(JsonlSink::open(&dir.join("events.jsonl"))?)];
    v.extend(extra);
    if !view.quiet {
        v.push(Box::new(ConsoleSink {
            stream: view.stream,
        }));
    }
    Ok(Arc::new(Fanout(v)))
}

fn evaluator_for(
    opts: &ToolchainOptions,
    seeds: u64,
    runs: u32,
    timeout: u64,
) -> Result<Arc<dyn Evaluator>> {
    let ev = evaluator::from_env(GpuEvaluator {
        seeds,
        runs,
        timeout: Duration::from_secs(timeout),
        ncu: crate::toolchain::find_extra_tools(opts).ncu.map(|t| t.path),
    });
    // The evaluator that was chosen decides, not the variable's mere presence.
    if ev.name() != GPU_EVALUATOR {
        eprintln!(
            "cutesmith: WARNING: {TEST_EVALUATOR_ENV} is set: kernels are NOT run on a GPU; \
             every figure in this session comes from a test double"
        );
    } else {
        crate::cli::check::require_gpu()?;
    }
    Ok(Arc::from(ev))
}

/// One provider of a session: the built-in one compiles its candidates up front (`tc`,
/// `cache`, `jobs`, `arch`); a replay resumes after the `skip` replies already used.
fn provider_for(
    spec: &ProviderSpec,
    w: &Workload,
    max_candidates: usize,
    (tc, cache, jobs, arch): (&Toolchain, &CompileCache, usize, &str),
    skip: usize,
) -> Result<Box<dyn Provider>> {
    Ok(match spec {
        ProviderSpec::Builtin => Box::new(BuiltinProvider::new(w, max_candidates).with_precompile(
            tc.clone(),
            cache.clone(),
            jobs,
            arch,
        )),
        ProviderSpec::Model { model } => Box::new(OpenAiProvider::new(model.clone())?),
        ProviderSpec::Replay { transcript } => {
            let mut r = ReplayProvider::load(transcript)?;
            r.skip(skip);
            Box::new(r)
        }
    })
}

/// The engine's parts for the session `spec` describes: its provider (a replay skipping
/// `replay_skip` replies), the built-in seed provider when asked for, and the rest.
fn parts_for(
    spec: &SessionSpec,
    w: &Workload,
    tc: Toolchain,
    evaluator: Arc<dyn Evaluator>,
    jobs: usize,
    replay_skip: usize,
    events: Arc<dyn EventSink>,
) -> Result<Parts> {
    let cache = CompileCache::default_location();
    let build = (&tc, &cache, jobs, spec.arch.as_str());
    let provider = provider_for(&spec.provider, w, spec.max_candidates, build, replay_skip)?;
    let seed = (spec.seed_from_builtin > 0 && spec.provider != ProviderSpec::Builtin)
        .then(|| provider_for(&ProviderSpec::Builtin, w, spec.seed_from_builtin, build, 0))
        .transpose()?;
    Ok(Parts {
        provider,
        seed,
        evaluator,
        toolchain: tc,
        cache,
        events,
    })
}

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::io("tokio runtime", e))
}

/// `cutesmith run W`.
pub fn cmd_run(
    opts: &ToolchainOptions,
    no_install: bool,
    config: &Config,
    args: RunArgs,
) -> Result<i32> {
    if let Some(dir) = &args.resume {
        return cmd_resume(
            opts,
            no_install,
            ResumeArgs {
                session: dir.clone(),
                view: args.view.clone(),
            },
        );
    }
    if let Some((name, suite)) = as_suite(&args)? {
        return crate::cli::suite::run_suite(opts, no_install, config, args, &name, suite);
    }
    let engine = new_session(opts, no_install, config, &args)?;
    drive(engine)
}

/// The suite `args.workload` names, when it names one (`workloads/suites/NAME.toml` with
/// no workload of that name, or a `.toml` file with a `workloads` list).
fn as_suite(args: &RunArgs) -> Result<Option<(String, crate::cli::bench::SuiteSpec)>> {
    let w = &args.workload;
    let path = if w.ends_with(".toml") {
        PathBuf::from(w)
    } else {
        if args.workloads_dir.join(format!("{w}.toml")).is_file() {
            return Ok(None);
        }
        args.workloads_dir.join("suites").join(format!("{w}.toml"))
    };
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let is_suite = toml::from_str::<toml::Table>(&text)
        .map(|t| t.contains_key("workloads"))
        .unwrap_or(false);
    if !is_suite {
        return Ok(None);
    }
    crate::cli::bench::load_suite(&args.workloads_dir, &path.display().to_string()).map(Some)
}

/// A new session's engine, from the command line and the config.
pub fn new_session(
    opts: &ToolchainOptions,
    no_install: bool,
    config: &Config,
    args: &RunArgs,
) -> Result<Engine> {
    new_session_with(opts, no_install, config, args, Vec::new())
}

/// [`new_session`] with more event sinks (a suite's progress bar and events file).
pub fn new_session_with(
    opts: &ToolchainOptions,
    no_install: bool,
    config: &Config,
    args: &RunArgs,
    extra: Vec<Box<dyn EventSink>>,
) -> Result<Engine> {
    let workload = Workload::find(&args.workloads_dir, &args.workload)?;
    // The toolkit first (installed if missing, saying so), then the GPU.
    let tc = crate::cli::ensure_toolchain(opts, no_install)?;
    let evaluator = evaluator_for(opts, args.seeds, args.timing_runs, args.timeout)?;
    let arch = crate::eval::gpu::target_arch();
    let provider_spec = if let Some(t) = &args.replay {
        ProviderSpec::Replay {
            transcript: std::fs::canonicalize(t).map_err(|e| Error::io(t, e))?,
        }
    } else if args.builtin {
        ProviderSpec::Builtin
    } else {
        match &config.model {
            Some(m) => ProviderSpec::Model { model: m.clone() },
            None => ProviderSpec::Builtin,
        }
    };
    let spec = SessionSpec {
        id: session::new_id(workload.name()),
        created: crate::clock::now_rfc3339(),
        workload: workload.name().to_string(),
        workload_source: workload.path().to_path_buf(),
        provider: provider_spec,
        evaluator: evaluator.name(),
        budgets: Budgets {
            debug_attempts: args.debug_attempts,
            regenerations: 2,
            rounds: args.rounds,
            patience: args.patience,
            tokens: args.max_tokens,
            cost_usd: args.max_cost,
            wall_s: args.max_time,
            roofline_target: args.roofline_target,
        },
        arch,
        seed_from_builtin: args.seed_from_builtin,
        seeds: args.seeds,
        timing_runs: args.timing_runs,
        timeout_s: args.timeout,
        max_candidates: args.max_candidates,
    };
    let dir = SessionDir::create(&args.runs_dir, &spec.id)?;
    let events = sinks(&dir.root, &args.view, extra)?;
    let jobs = args.jobs.unwrap_or_else(compile::default_jobs);
    let parts = parts_for(&spec, &workload, tc, evaluator, jobs, 0, events)?;
    Engine::create(dir, spec, &workload, parts)
}

/// `cutesmith resume runs/<id>`.
pub fn cmd_resume(opts: &ToolchainOptions, no_install: bool, args: ResumeArgs) -> Result<i32> {
    let dir = SessionDir::open(&args.session)?;
    let state = dir.load_state()?;
    if state.stage == crate::agent::machine::Stage::Done {
        println!("{}", summary(&dir, &state));
        return Ok(exit_code(&dir, &state));
    }
    let engine = open_session(opts, no_install, &args.session, &args.view)?;
    drive(engine)
}

/// An existing session's engine, its provider rebuilt from session.json.
pub fn open_session(
    opts: &ToolchainOptions,
    no_install: bool,
    root: &Path,
    view: &ViewArgs,
) -> Result<Engine> {
    let dir = SessionDir::open(root)?;
    let spec = dir.load_spec()?;
    let state = dir.load_state()?;
    let copy = dir.path(&format!("{}.toml", spec.workload));
    let workload = Workload::load(&copy)?;
    let tc = crate::cli::ensure_toolchain(opts, no_install)?;
    let evaluator = evaluator_for(opts, spec.seeds, spec.timing_runs, spec.timeout_s)?;
    if evaluator.name() != spec.evaluator {
        return Err(Error::Usage(format!(
            "{} was run with the {} evaluator and would now resume with the {} one: one \
             session never mixes figures from both ({TEST_EVALUATOR_ENV} decides)",
            root.display(),
            spec.evaluator,
            evaluator.name()
        )));
    }
    let used = match spec.provider {
        ProviderSpec::Replay { .. } => transcript_replies(&dir, state.next_version),
        _ => 0,
    };
    let events = sinks(&dir.root, view, Vec::new())?;
    let parts = parts_for(
        &spec,
        &workload,
        tc,
        evaluator,
        compile::default_jobs(),
        used,
        events,
    )?;
    Engine::open(&dir.root, parts)
}

/// Replies a session has already turned into versions (or spent on them): a replayed
/// session resumes after them. A reply for the version that was in flight when the
/// process died (`version >= next_version`) is played again.
fn transcript_replies(dir: &SessionDir, next_version: u32) -> usize {
    std::fs::read_to_string(dir.path("transcript.jsonl"))
        .map(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|v| v.get("reply").is_some_and(|r| !r.is_null()))
                .filter(|v| {
                    v.get("version")
                        .and_then(|x| x.as_u64())
                        .is_some_and(|n| n < u64::from(next_version))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Runs `work` (which owns the session's engine) in its own task, so Ctrl-C is seen at
/// once even while a stage blocks on nvcc or a worker. On Ctrl-C: every nvcc/worker
/// process group still running is killed, the saved state (the last completed step) is
/// named with how to resume it, and the process exits with 130. Every front end (run,
/// resume, a suite, the interactive session) goes through here.
pub fn interruptible<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    root: &Path,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T> {
    let done = rt.block_on(async move {
        let task = tokio::spawn(work);
        tokio::select! {
            r = task => Some(r),
            _ = tokio::signal::ctrl_c() => None,
        }
    });
    match done {
        Some(Ok(t)) => Ok(t),
        Some(Err(e)) => Err(Error::Usage(format!("the session task failed: {e}"))),
        None => {
            crate::process::kill_all();
            let stage = SessionDir::open(root)
                .and_then(|d| d.load_state())
                .map(|s| s.stage.name())
                .unwrap_or("unknown");
            eprintln!(
                "interrupted: the state is saved (stage {stage}); continue with `cutesmith resume {}`",
                root.display()
            );
            std::process::exit(130)
        }
    }
}

pub fn drive(mut engine: Engine) -> Result<i32> {
    let rt = runtime()?;
    let root = engine.dir.root.clone();
    let result = interruptible(&rt, &root, async move { engine.run().await })?;
    let dir = SessionDir::open(&root)?;
    let state = dir.load_state()?;
    match result {
        Ok(()) => {
            println!("{}", summary(&dir, &state));
            Ok(exit_code(&dir, &state))
        }
        Err(e) => {
            eprintln!(
                "error: {e}\nthe session is saved at {}; continue with `cutesmith resume {}`",
                root.display(),
                root.display()
            );
            Ok(EXIT_ERROR)
        }
    }
}

/// 0 when the best version meets the workload's goal, 1 when it does not or nothing is
/// correct.
pub fn exit_code(dir: &SessionDir, state: &crate::agent::session::State) -> i32 {
    match goal(dir, state) {
        Some((_, true)) => EXIT_OK,
        _ => EXIT_GOAL_NOT_MET,
    }
}

pub fn goal(dir: &SessionDir, state: &crate::agent::session::State) -> Option<(String, bool)> {
    let spec = dir.load_spec().ok()?;
    let w = Workload::load(dir.path(&format!("{}.toml", spec.workload))).ok()?;
    let best = state.best?;
    let e: Evaluation = dir
        .read_json(&dir.version_dir(best).join("evaluation.json"))
        .ok()?;
    let t = e.report?.timing?;
    let baselines: Vec<(String, f64, Option<f64>)> = t
        .baselines
        .iter()
        .map(|b| (b.name.clone(), b.stats.median_us, b.speedup))
        .collect();
    Some(crate::cli::bench::goal(
        &w,
        t.candidate.map(|c| c.median_us),
        &baselines,
    ))
}

/// The closing summary: versions, verdicts, the best, the goal.
pub fn summary(dir: &SessionDir, state: &crate::agent::session::State) -> String {
    let mut s = format!(
        "session {} ({}): stopped: {}\n",
        dir.root.display(),
        state.stage.name(),
        state.stop_reason.clone().unwrap_or_default()
    );
    s.push_str("| version | origin | change | status | us | vendor us | verdict |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- |\n");
    for v in &state.versions {
        s.push_str(&format!(
            "| v{}{} | {} | {} | {} | {} | {} | {} |\n",
            v.n,
            if Some(v.n) == state.best {
                " (best)"
            } else {
                ""
            },
            v.origin,
            v.change.replace('|', "/"),
            v.status,
            v.median_us
                .map(|t| format!("{t:.2}"))
                .unwrap_or_else(|| "-".into()),
            v.vendor_us
                .map(|t| format!("{t:.2}"))
                .unwrap_or_else(|| "-".into()),
            v.verdict
        ));
    }
    match goal(dir, state) {
        Some((g, met)) => s.push_str(&format!(
            "goal {g}: {}; best kernel: {}\n",
            if met { "met" } else { "NOT met" },
            dir.path("best.cu").display()
        )),
        None => s.push_str("no correct version\n"),
    }
    s.push_str(&format!(
        "spent: {} model requests, {} + {} tokens, ${:.4}, {:.0} s\n",
        state.spent.model_requests,
        state.spent.prompt_tokens,
        state.spent.completion_tokens,
        state.spent.cost_usd,
        state.spent.wall_s
    ));
    s
}
