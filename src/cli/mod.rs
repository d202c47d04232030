//! The command line: flags parsed by clap, each subcommand run, and its exit code.
//!
//! Exit codes: 0 ok; 1 the goal was not met (a kernel failed to compile); 2 an error
//! (a missing tool, a bad flag, an unreadable file).

pub mod bench;
pub mod check;
pub mod doctor;
pub mod profile;
pub mod run;
pub mod session;
pub mod suite;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::Config;
use crate::cli::doctor::DoctorReport;
use crate::error::{Error, Result};
use crate::toolchain::cache::CompileCache;
use crate::toolchain::compile::{
    self, CompileOptions, CompileOutcome, CompileRequest, CompileStatus,
};
use crate::toolchain::{self, setup, Toolchain, ToolchainOptions};
use crate::spec::Workload;

/// Exit code: everything asked for was done.
pub const EXIT_OK: i32 = 0;
/// Exit code: the tool worked but the goal was not met (a compile failed).
pub const EXIT_GOAL_NOT_MET: i32 = 1;
/// Exit code: an error stopped the command.
pub const EXIT_ERROR: i32 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "cutesmith",
    version,
    about = "Writes, checks and optimizes CuTe GPU kernels for one workload",
    after_help = "Exit codes: 0 ok, 1 goal not met (e.g. a kernel failed to compile), 2 error."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// nvcc to use (else $CUTESMITH_NVCC, $CUDA_HOME, PATH, /usr/local/cuda, the cache).
    #[arg(long, global = true, value_name = "PATH")]
    pub nvcc: Option<PathBuf>,
    /// CUDA installation whose bin/nvcc to use.
    #[arg(long, global = true, value_name = "DIR")]
    pub cuda_home: Option<PathBuf>,
    /// CUTLASS checkout or include directory (else $CUTLASS_DIR, the system, the cache).
    #[arg(long, global = true, value_name = "DIR")]
    pub cutlass_dir: Option<PathBuf>,
    /// Config file (else ./cutesmith.toml, ~/.config/cutesmith/config.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Never install a missing toolkit; stop and say how instead.
    #[arg(
        long,
        global = true,
        env = "CUTESMITH_NO_INSTALL",
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub no_install: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Install the pinned CUDA 13.0 compiler and CUTLASS 4.2 headers into the user cache.
    Setup {
        /// Reinstall even if the cache already holds a complete toolkit.
        #[arg(long)]
        force: bool,
    },
    /// Report the toolchain, GPU, vendor libraries and model endpoint found.
    Doctor {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List the workload specs.
    Workloads {
        /// Directory of workload specs.
        #[arg(long, default_value = "workloads")]
        dir: PathBuf,
    },
    /// Compile kernel sources to shared objects; print resources, SASS facts or diagnostics.
    Compile(CompileArgs),
    /// Compile a kernel, validate it on the GPU, time it against cuBLAS/cuDNN, compare.
    Check(CheckArgs),
    /// Time the vendor baselines of a workload and print its roofline floor (GPU).
    Baseline(BaselineArgs),
    /// Show where the compile cache is and how much it holds; `--clear` empties it.
    Cache {
        #[arg(long)]
        clear: bool,
    },
    /// List the candidate strategies for a workload, with the rule that rejects each invalid one.
    Strategies {
        /// Workload name or spec path.
        workload: String,
        #[arg(long, default_value = "workloads")]
        workloads_dir: PathBuf,
    },
    /// Run the built-in provider over a suite (GPU) and write bench/<suite>.md and .json.
    Bench {
        /// Suite name (workloads/suites/NAME.toml) or path.
        suite: String,
        #[arg(long, default_value = "workloads")]
        workloads_dir: PathBuf,
        /// Where the Markdown and JSON tables go.
        #[arg(long, default_value = "bench")]
        out: PathBuf,
        /// Override the suite's number of candidates per workload.
        #[arg(long)]
        max_candidates: Option<usize>,
        /// Parallel nvcc processes (default: one per core).
        #[arg(short, long)]
        jobs: Option<usize>,
    },
    /// The main job: refine a kernel for a workload through generate -> compile ->
    /// validate -> debug -> optimize, with the configured model or the built-in provider;
    /// the session is saved under runs/<id>/.
    Run(crate::cli::run::RunArgs),
    /// Profile a kernel (GPU): timing and roofline placement, one launch under Nsight
    /// Compute, static facts, and the findings that matter most.
    Profile(crate::cli::profile::ProfileArgs),
    /// Steer one session by hand over stdin/stdout: step, run N, hint, edit, show, diff,
    /// history, profile, rollback, export, quit. WORKLOAD may be a runs/<id> directory.
    Session(crate::cli::run::RunArgs),
    /// Markdown + self-contained HTML (SVG charts) over sessions: speedups, % of the
    /// roofline, each version's time and strategy.
    Report(crate::report::ReportArgs),
    /// Write the best kernel of a session as a standalone drop-in: the .cu (with its
    /// launch entry), the ABI header, and a README with how to build and call it.
    Export {
        /// The session directory (runs/<id>).
        session: PathBuf,
        /// Where the files go.
        #[arg(long, default_value = "export")]
        out: PathBuf,
    },
    /// Continue a session after a crash, a kill or Ctrl-C, losing at most the step in flight.
    Resume(crate::cli::run::ResumeArgs),
    /// Run one evaluation job in this process (the child the agent starts; internal).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        job: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The kernel source (.cu) implementing the cutesmith ABI.
    pub kernel: PathBuf,
    /// Workload name (from --workloads-dir) or path to a spec.
    #[arg(short, long)]
    pub workload: String,
    /// Directory of workload specs.
    #[arg(long, default_value = "workloads")]
    pub workloads_dir: PathBuf,
    /// Random seeds per shape (fresh inputs each).
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Validate only the headline shape (faster); default: every shape in the spec.
    #[arg(long)]
    pub headline_only: bool,
    /// Timed runs per contender (at least 20).
    #[arg(long, default_value_t = 30)]
    pub runs: u32,
    /// Seconds before the worker is killed (a hanging kernel).
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Validate only; no timing.
    #[arg(long)]
    pub no_timing: bool,
    /// Also run the smallest shape under compute-sanitizer (repeatable: memcheck,
    /// racecheck, synccheck); findings name the source line.
    #[arg(long, value_enum)]
    pub sanitize: Vec<crate::eval::sanitizer::Tool>,
    /// Print the evaluation as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BaselineArgs {
    /// Workload names or spec paths.
    #[arg(required = true)]
    pub workloads: Vec<String>,
    #[arg(long, default_value = "workloads")]
    pub workloads_dir: PathBuf,
    #[arg(long, default_value_t = 30)]
    pub runs: u32,
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CompileArgs {
    /// Kernel sources (.cu); several compile in parallel.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Target architecture.
    #[arg(long, default_value = "sm_90a")]
    pub arch: String,
    /// Preprocessor definitions (NAME or NAME=VALUE), e.g. strategy parameters.
    #[arg(short = 'D', long = "define", value_name = "NAME[=VALUE]")]
    pub defines: Vec<String>,
    /// Extra nvcc flag (repeatable).
    #[arg(long = "nvcc-flag", value_name = "FLAG", allow_hyphen_values = true)]
    pub nvcc_flags: Vec<String>,
    /// Seconds before nvcc is killed.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Compile even if the cache holds this input.
    #[arg(long)]
    pub no_cache: bool,
    /// Parallel nvcc processes (default: one per core).
    #[arg(short, long)]
    pub jobs: Option<usize>,
    /// Print the full diagnostics list as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_ERROR
        }
    }
}

fn toolchain_options(g: &GlobalArgs, config: &Config) -> ToolchainOptions {
    ToolchainOptions {
        nvcc: g.nvcc.clone(),
        cuda_home: g.cuda_home.clone(),
        cutlass_dir: g.cutlass_dir.clone(),
        config: config.toolchain.clone(),
    }
}

/// Finds the toolchain; when none is found and installing is allowed, installs the
/// pinned one into the cache first, saying so.
pub fn ensure_toolchain(opts: &ToolchainOptions, no_install: bool) -> Result<Toolchain> {
    match Toolchain::discover(opts) {
        Ok(tc) => Ok(tc),
        Err(Error::ToolMissing { what, hint }) if !no_install && !explicitly_named(opts) => {
            eprintln!("cutesmith: {what} not found; installing the pinned toolkit (as `cutesmith setup` does)");
            setup::install(&toolchain::cache_toolkit_dir(), false, &mut |m| {
                eprintln!("cutesmith: {m}")
            })
            .map_err(|e| {
                Error::Setup(format!(
                    "{e}\n(before installing: {what} not found: {hint})"
                ))
            })?;
            Toolchain::discover(opts)
        }
        Err(e) => Err(e),
    }
}

/// When the user named a path, a missing tool there is their mistake: do not paper over
/// it with an install.
fn explicitly_named(opts: &ToolchainOptions) -> bool {
    let pinned = &opts.config;
    opts.nvcc.is_some()
        || opts.cuda_home.is_some()
        || opts.cutlass_dir.is_some()
        || pinned.nvcc.is_some()
        || pinned.cuda_home.is_some()
        || pinned.cutlass_dir.is_some()
        || toolchain::non_empty_env("CUTESMITH_NVCC").is_some()
        || toolchain::non_empty_env("CUTLASS_DIR").is_some()
}

fn dispatch(cli: Cli) -> Result<i32> {
    let config = Config::load(cli.global.config.as_deref())?;
    let opts = toolchain_options(&cli.global, &config);
    match cli.command {
        Command::Setup { force } => cmd_setup(&opts, force),
        Command::Doctor { json } => {
            let report = DoctorReport::gather(&opts, &config);
            if json {
                println!("{}", to_json(&report)?);
            } else {
                print!("{}", report.render());
            }
            Ok(if report.can_compile() {
                EXIT_OK
            } else {
                EXIT_ERROR
            })
        }
        Command::Workloads { dir } => {
            let workloads = Workload::load_dir(&dir)?;
            println!("{}", Workload::summary_header());
            for w in &workloads {
                println!("{}", w.summary_line());
            }
            eprintln!("{} workloads in {}", workloads.len(), dir.display());
            Ok(EXIT_OK)
        }
        Command::Compile(args) => cmd_compile(&opts, cli.global.no_install, args),
        Command::Check(args) => crate::cli::check::cmd_check(&opts, cli.global.no_install, args),
        Command::Baseline(args) => crate::cli::check::cmd_baseline(args),
        Command::Run(args) => crate::cli::run::cmd_run(&opts, cli.global.no_install, &config, args),
        Command::Profile(args) => {
            crate::cli::profile::cmd_profile(&opts, cli.global.no_install, args)
        }
        Command::Session(args) => {
            crate::cli::session::cmd_session(&opts, cli.global.no_install, &config, args)
        }
        Command::Report(args) => crate::report::cmd_report(args),
        Command::Export { session, out } => {
            let dir = crate::agent::session::SessionDir::open(&session)?;
            for f in crate::agent::engine::export(&dir, &toolchain::abi_include_dir(), &out)? {
                println!("wrote {}", f.display());
            }
            Ok(EXIT_OK)
        }
        Command::Resume(args) => crate::cli::run::cmd_resume(&opts, cli.global.no_install, args),
        Command::Worker { job } => Ok(crate::eval::worker::main(&job)),
        Command::Cache { clear } => {
            let cache = CompileCache::default_location();
            let (entries, bytes) = cache.usage();
            println!(
                "compile cache {}: {entries} entries, {:.1} MB",
                cache.root().display(),
                bytes as f64 / 1e6
            );
            if clear {
                let n = cache.clear()?;
                println!("removed {n} directories");
            }
            Ok(EXIT_OK)
        }
        Command::Strategies {
            workload,
            workloads_dir,
        } => {
            let w = Workload::find(&workloads_dir, &workload)?;
            println!(
                "{} ({}, {}, headline {}):",
                w.name(),
                w.family().name(),
                w.dtype().name(),
                w.headline()
            );
            let space = crate::strategy::space(&w);
            for (i, (s, v)) in space.iter().enumerate() {
                match v {
                    Ok(()) => println!(
                        "  {:>2}. {}
      {}",
                        i + 1,
                        s.label(),
                        s.rationale
                    ),
                    Err(why) => println!("  {:>2}. {} -- INVALID: {why}", i + 1, s.label()),
                }
            }
            if space.iter().all(|(_, v)| v.is_err()) {
                println!("  no template handles this workload yet");
                return Ok(EXIT_GOAL_NOT_MET);
            }
            Ok(EXIT_OK)
        }
        Command::Bench {
            suite,
            workloads_dir,
            out,
            max_candidates,
            jobs,
        } => {
            crate::cli::check::require_gpu()?;
            let tc = ensure_toolchain(&opts, cli.global.no_install)?;
            let mut so = crate::provider::builtin::SearchOptions::default();
            if let Some(j) = jobs {
                so.jobs = j;
            }
            let report = crate::cli::bench::run(&tc, &workloads_dir, &suite, &out, so, max_candidates)?;
            print!("{}", crate::cli::bench::markdown(&report));
            eprintln!("written: {}/{}.md and .json", out.display(), report.suite);
            Ok(if report.rows.iter().all(|r| r.met) {
                EXIT_OK
            } else {
                EXIT_GOAL_NOT_MET
            })
        }
    }
}

fn cmd_setup(opts: &ToolchainOptions, force: bool) -> Result<i32> {
    if !force {
        if let Ok(tc) = Toolchain::discover(opts) {
            if tc.nvcc.source != toolchain::Source::Cache {
                println!(
                    "toolchain already present: nvcc {} ({}), CUTLASS {} ({}); nothing to install \
                     (use --force to install the pinned one into the cache anyway)",
                    tc.nvcc.version, tc.nvcc.source, tc.cutlass.version, tc.cutlass.source
                );
                return Ok(EXIT_OK);
            }
        }
    }
    let dir = toolchain::cache_toolkit_dir();
    match setup::install(&dir, force, &mut |m| println!("{m}"))? {
        setup::SetupOutcome::AlreadyPresent { nvcc, cutlass } => println!(
            "already installed: {} and {}",
            nvcc.display(),
            cutlass.display()
        ),
        setup::SetupOutcome::Installed { dir, seconds } => {
            println!("installed into {} in {seconds:.0} s", dir.display())
        }
    }
    let tc = Toolchain::discover(opts)?;
    println!(
        "nvcc {} ({}), CUTLASS {} ({})",
        tc.nvcc.version,
        tc.nvcc.path.display(),
        tc.cutlass.version,
        tc.cutlass.include.display()
    );
    Ok(EXIT_OK)
}

fn cmd_compile(opts: &ToolchainOptions, no_install: bool, args: CompileArgs) -> Result<i32> {
    let tc = ensure_toolchain(opts, no_install)?;
    let options = CompileOptions {
        arch: args.arch.clone(),
        defines: args.defines.clone(),
        extra_flags: args.nvcc_flags.clone(),
        timeout_secs: args.timeout,
        use_cache: !args.no_cache,
        sass: true,
    };
    let requests = args
        .files
        .iter()
        .map(|f| CompileRequest::from_file(f, options.clone()))
        .collect::<Result<Vec<_>>>()?;
    let cache = CompileCache::default_location();
    let jobs = args.jobs.unwrap_or_else(compile::default_jobs);
    if requests.len() > 1 {
        eprintln!("compiling {} files, {jobs} at a time", requests.len());
    } else {
        eprintln!(
            "compiling {} with nvcc {} ...",
            args.files[0].display(),
            tc.nvcc.version
        );
    }
    let start = std::time::Instant::now();
    let results = compile::compile_many(&tc, &cache, &requests, jobs, &|i, r| {
        if requests.len() > 1 {
            let what = match r {
                Ok(o) if o.ok() => "ok",
                Ok(_) => "FAILED",
                Err(_) => "ERROR",
            };
            eprintln!("  {}: {what}", args.files[i].display());
        }
    });
    let mut code = EXIT_OK;
    for (file, result) in args.files.iter().zip(results) {
        let outcome = result?;
        if args.json {
            println!("{}", to_json(&outcome)?);
        } else {
            print!("{}", render_outcome(&file.display().to_string(), &outcome));
        }
        if !outcome.ok() {
            code = EXIT_GOAL_NOT_MET;
        }
    }
    eprintln!("done in {:.2} s", start.elapsed().as_secs_f64());
    Ok(code)
}

/// The text `cutesmith compile` prints for one outcome.
pub fn render_outcome(file: &str, o: &CompileOutcome) -> String {
    let mut s = String::new();
    let how = if o.cached {
        "cache hit, no nvcc run".to_string()
    } else {
        format!("nvcc {:.1} s", o.nvcc_seconds)
    };
    match o.status {
        CompileStatus::Success => {
            s.push_str(&format!("{file}: compiled ({how})\n"));
            if let Some(so) = &o.shared_object {
                s.push_str(&format!("  shared object: {}\n", so.display()));
            }
            s.push_str("  resources:\n");
            if o.resources.is_empty() {
                s.push_str("    (no kernel entry in the ptxas report)\n");
            }
            for r in &o.resources {
                s.push_str(&format!("    {}\n", r.report_line()));
            }
            match (&o.sass, &o.sass_note) {
                (Some(sass), _) => s.push_str(&format!("  SASS: {}\n", sass.summary_line())),
                (None, Some(note)) => s.push_str(&format!("  SASS: {note}\n")),
                (None, None) => {}
            }
            if !o.condensed.is_empty() {
                s.push_str("  warnings:\n");
                for l in o.condensed.lines() {
                    s.push_str(&format!("    {l}\n"));
                }
            }
        }
        CompileStatus::Failed | CompileStatus::TimedOut => {
            let what = if o.status == CompileStatus::TimedOut {
                "timed out"
            } else {
                "FAILED"
            };
            s.push_str(&format!("{file}: {what} ({how})\n"));
            if let Some((f, l)) = &o.primary_location {
                s.push_str(&format!("  fix here: {f}:{l}\n"));
            }
            for l in o.condensed.lines() {
                s.push_str(&format!("  {l}\n"));
            }
        }
    }
    s.push_str(&format!("  full log: {}\n", o.log_path.display()));
    s
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string_pretty(v).map_err(|e| Error::Format {
        context: "JSON output".into(),
        message: e.to_string(),
    })
}
