//! `cutesmith run W` (the main job) and `cutesmith resume runs/<id>`: what was asked on
//! the command line and in the config turned into a session ([`crate::agent::launch`]),
//! run to its end on a tokio runtime, and where it is printed. Ctrl-C stops after saving
//! the state; `resume` continues.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;

use super::console::ConsoleSink;
use super::{ensure_toolchain, EXIT_ERROR, EXIT_GOAL_NOT_MET, EXIT_OK};
use crate::agent::engine::Engine;
use crate::agent::evaluator::{Evaluator, TEST_EVALUATOR_ENV};
use crate::agent::launch::{self, Plan};
use crate::agent::machine::{Budgets, Stage};
use crate::agent::session::{ProviderSpec, ReplyMode, SessionDir, State};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::events::{EventSink, Fanout, JsonlSink};
use crate::spec::Workload;
use crate::toolchain::compile;
use crate::toolchain::ToolchainOptions;

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
    /// Built-in provider: candidates to compile and try, the most promising first (the
    /// cost model's and the tuning database's order); `--budget` is the same.
    #[arg(long, visible_alias = "budget", default_value_t = 4)]
    pub max_candidates: usize,
    /// How the model answers optimize and debug requests: `auto` (edits against the
    /// numbered source once a version is correct), `edits`, or `whole` (whole files only).
    /// Whole files are accepted in every mode. Default: `[model] reply_mode` in the config,
    /// else auto.
    #[arg(long, value_enum, value_name = "MODE")]
    pub reply_mode: Option<crate::agent::session::ReplyMode>,
    /// Optimization rounds.
    #[arg(long, default_value_t = 8)]
    pub rounds: u32,
    /// Replies asked for per optimization round, each compiled and evaluated; the fastest
    /// correct one is kept. The built-in provider on a pool of several GPUs offers one
    /// candidate per GPU by default.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub samples: u32,
    /// First generation from a population: the model proposes N distinct strategies
    /// (strategy blocks only), each is implemented and evaluated, and the best becomes
    /// the evolving kernel. 0: one first kernel.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub population: u32,
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
    /// Do not profile accepted versions under Nsight Compute (faster).
    #[arg(long)]
    pub no_profile: bool,
    /// GPUs to use: `all` (the default: every visible GPU, which must be of one model) or
    /// ordinals like `0,2,3`. A suite spreads its workloads over them, one session per GPU
    /// at a time; a single session runs on the first.
    #[arg(long, value_name = "all|LIST")]
    pub gpus: Option<String>,
    #[command(flatten)]
    pub view: ViewArgs,
    #[command(flatten)]
    pub slurm: super::slurm::SlurmArgs,
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

/// The session's event sinks: its events file, then `extra`, then the console.
pub fn sinks(
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

/// Says loudly when the session's evaluator is the test double (no GPU ran).
pub fn warn_if_test_double(ev: &Arc<dyn Evaluator>) {
    if launch::is_test_double(ev.as_ref()) {
        eprintln!(
            "cutesmith: WARNING: {TEST_EVALUATOR_ENV} is set: kernels are NOT run on a GPU; \
             every figure in this session comes from a test double"
        );
    }
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
    if let Some((name, suite)) = crate::spec::suite::named(&args.workloads_dir, &args.workload)? {
        if args.slurm.slurm {
            return super::slurm::cmd_run_slurm(&args, &name, &suite);
        }
        return super::suite::cmd_run_suite(opts, no_install, config, args, &name, suite);
    }
    if args.slurm.slurm {
        return Err(Error::Usage(format!(
            "--slurm runs a suite (workloads/suites/NAME.toml), one task per workload; {} is a single workload: run it here, or in a one-line suite",
            args.workload
        )));
    }
    let engine = new_session(opts, no_install, config, &args, Vec::new())?;
    drive(engine)
}

/// The provider the command line and the config ask for: `--replay`, `--builtin`, the
/// configured model, else the built-in one.
fn provider_spec(config: &Config, args: &RunArgs) -> Result<ProviderSpec> {
    Ok(if let Some(t) = &args.replay {
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
    })
}

/// A new session's engine, from the command line and the config, with `extra` event
/// sinks (a suite's progress bar and events file).
pub fn new_session(
    opts: &ToolchainOptions,
    no_install: bool,
    config: &Config,
    args: &RunArgs,
    extra: Vec<Box<dyn EventSink>>,
) -> Result<Engine> {
    let workload = Workload::find(&args.workloads_dir, &args.workload)?;
    // The toolkit first (installed if missing, saying so), then the GPU.
    let tc = ensure_toolchain(opts, no_install)?;
    // The pool (--gpus, default every visible GPU; a suite gives each session one): the
    // session runs on the first, and evaluates a batch (samples, a population) on all.
    let mut evs = launch::evaluators(
        opts,
        args.seeds,
        args.timing_runs,
        args.timeout,
        !args.no_profile,
        args.gpus.as_deref(),
    )?;
    let others = evs.split_off(1);
    let ev = evs.remove(0);
    warn_if_test_double(&ev);
    let provider = provider_spec(config, args)?;
    // The built-in provider on a pool: a round offers as many candidates as there are
    // GPUs (evaluated at once), unless --samples says otherwise.
    let samples = if args.samples == 1 && !others.is_empty() && provider == ProviderSpec::Builtin {
        u32::try_from(others.len() + 1).unwrap_or(u32::MAX)
    } else {
        args.samples
    };
    let plan = Plan {
        provider,
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
        arch: crate::eval::gpu::target_arch(),
        seed_from_builtin: args.seed_from_builtin,
        seeds: args.seeds,
        timing_runs: args.timing_runs,
        timeout_s: args.timeout,
        max_candidates: args.max_candidates,
        reply_mode: match args.reply_mode {
            Some(m) => m,
            None => config_reply_mode(config)?,
        },
        samples,
        population: args.population,
        gpus: args.gpus.clone(),
    };
    let jobs = args.jobs.unwrap_or_else(compile::default_jobs);
    Ok(
        launch::create(&args.runs_dir, &workload, plan, tc, ev, jobs, |dir| {
            sinks(dir, &args.view, extra)
        })?
        .with_pool(others),
    )
}

/// `[model] reply_mode` from the config file (auto when absent); a value that is not a mode
/// is an error naming the file and the key.
fn config_reply_mode(config: &Config) -> Result<ReplyMode> {
    let Some(text) = config.reply_mode.as_deref() else {
        return Ok(ReplyMode::Auto);
    };
    <ReplyMode as clap::ValueEnum>::from_str(text, true).map_err(|_| {
        Error::Usage(format!(
            "{}: [model] reply_mode = {text:?}: expected \"auto\", \"edits\" or \"whole\"",
            config
                .file
                .as_ref()
                .map_or_else(|| "the config".to_string(), |f| f.display().to_string())
        ))
    })
}

/// `cutesmith resume runs/<id>`.
pub fn cmd_resume(opts: &ToolchainOptions, no_install: bool, args: ResumeArgs) -> Result<i32> {
    let dir = SessionDir::open(&args.session)?;
    let state = dir.load_state()?;
    if state.stage == Stage::Done {
        println!("{}", summary(&dir, &state));
        return Ok(exit_code(&dir, &state));
    }
    let engine = open_session(opts, no_install, &args.session, &args.view)?;
    drive(engine)
}

/// An existing session's engine.
pub fn open_session(
    opts: &ToolchainOptions,
    no_install: bool,
    root: &Path,
    view: &ViewArgs,
) -> Result<Engine> {
    let tc = ensure_toolchain(opts, no_install)?;
    launch::open(
        root,
        tc,
        |spec| {
            // The GPUs the session was started on (a suite's: its one GPU).
            let evs = launch::evaluators(
                opts,
                spec.seeds,
                spec.timing_runs,
                spec.timeout_s,
                true,
                spec.gpus.as_deref(),
            )?;
            if let Some(ev) = evs.first() {
                warn_if_test_double(ev);
            }
            Ok(evs)
        },
        compile::default_jobs(),
        |dir| sinks(dir, view, Vec::new()),
    )
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
pub fn exit_code(dir: &SessionDir, state: &State) -> i32 {
    match dir.goal(state) {
        Some((_, true)) => EXIT_OK,
        _ => EXIT_GOAL_NOT_MET,
    }
}

/// The closing summary: the version table, the goal, what was spent.
pub fn summary(dir: &SessionDir, state: &State) -> String {
    let mut s = format!(
        "session {} ({}): stopped: {}\n",
        dir.root.display(),
        state.stage.name(),
        state.stop_reason.clone().unwrap_or_default()
    );
    s.push_str(&crate::report::md_table(
        &crate::report::VERSION_HEAD,
        &crate::report::version_rows(state),
    ));
    match dir.goal(state) {
        Some((g, met)) => s.push_str(&format!(
            "goal {g}: {}; best kernel: {}\n",
            if met { "met" } else { "NOT met" },
            dir.path("best.cu").display()
        )),
        None => s.push_str("no correct version\n"),
    }
    s.push_str(&format!(
        "spent: {}\n",
        crate::report::cost_line(&state.spent)
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_reply_mode_is_read_or_refused_naming_the_file() {
        let mut config = Config::default();
        assert_eq!(config_reply_mode(&config).unwrap(), ReplyMode::Auto);
        config.reply_mode = Some("Edits".into());
        assert_eq!(config_reply_mode(&config).unwrap(), ReplyMode::Edits);
        config.reply_mode = Some("diff".into());
        config.file = Some(PathBuf::from("/home/u/cutesmith.toml"));
        let e = config_reply_mode(&config).unwrap_err().to_string();
        assert!(
            e.contains("/home/u/cutesmith.toml: [model] reply_mode = \"diff\"")
                && e.contains("\"auto\", \"edits\" or \"whole\""),
            "{e}"
        );
    }

    #[test]
    fn auto_invites_edits_only_once_a_version_is_correct() {
        assert!(!ReplyMode::Auto.invites_edits(false));
        assert!(ReplyMode::Auto.invites_edits(true));
        assert!(ReplyMode::Edits.invites_edits(false));
        assert!(!ReplyMode::Whole.invites_edits(true));
    }
}
