//! The front end: flags parsed by clap, each subcommand run by its own module, and its
//! exit code. The only layer that prints to the terminal, reads flags or knows exit
//! codes; everything it shows is rendered by the layer that owns the data.
//!
//! Exit codes: 0 ok; 1 the goal was not met (a kernel failed to compile); 2 an error
//! (a missing tool, a bad flag, an unreadable file); 130 a session stopped by Ctrl-C.

pub mod bench;
pub mod cache;
pub mod check;
pub mod compile;
pub mod console;
pub mod doctor;
pub mod export;
pub mod import;
pub mod profile;
pub mod report;
pub mod run;
pub mod session;
pub mod setup;
pub mod slurm;
pub mod strategies;
pub mod suite;
pub mod tuning;
pub mod workloads;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::toolchain::{self, Toolchain, ToolchainOptions};

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
    /// Run model-written code (and nvcc on it) without the sandbox, with your rights:
    /// only where the machine cannot sandbox (`cutesmith doctor` says why). Sessions
    /// record it.
    #[arg(
        long,
        global = true,
        env = "CUTESMITH_NO_SANDBOX",
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub no_sandbox: bool,
    /// Host memory a worker (with everything it starts) may hold, e.g. 16G or 512M; over
    /// it the worker is stopped with a `resource` fault (default: [limits] host_memory in
    /// cutesmith.toml, else half of the host's available memory).
    #[arg(
        long,
        global = true,
        env = "CUTESMITH_HOST_MEMORY",
        value_name = "SIZE"
    )]
    pub host_memory: Option<String>,
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
    /// Show, export or import the tuning database (every evaluated candidate, by GPU,
    /// workload class and shape), which orders the built-in candidates of later runs.
    Tuning {
        #[command(subcommand)]
        action: tuning::TuningAction,
    },
    /// List the candidate strategies for a workload, with the rule that rejects each invalid one.
    Strategies {
        /// Workload name or spec path.
        workload: String,
        #[arg(long, default_value = "workloads")]
        workloads_dir: PathBuf,
        /// Also write each valid strategy's kernel source (workload block, parameters,
        /// template) to DIR as NN-<template>.cu, ready for `cutesmith compile` or `check`.
        #[arg(long, value_name = "DIR")]
        emit: Option<PathBuf>,
    },
    /// Run the built-in provider over a suite (GPU) and write bench/<suite>.md and .json.
    Bench(bench::BenchArgs),
    /// The main job: refine a kernel for a workload through generate -> compile ->
    /// validate -> debug -> optimize, with the configured model or the built-in provider;
    /// the session is saved under runs/<id>/.
    Run(run::RunArgs),
    /// Profile a kernel (GPU): timing and roofline placement, one launch under Nsight
    /// Compute, static facts, and the findings that matter most.
    Profile(profile::ProfileArgs),
    /// Steer one session by hand over stdin/stdout: step, run N, hint, edit, show, diff,
    /// history, profile, rollback, export, quit. WORKLOAD may be a runs/<id> directory.
    Session(run::RunArgs),
    /// Markdown + self-contained HTML (SVG charts) over sessions: speedups, % of the
    /// roofline, each version's time and strategy.
    Report(report::ReportArgs),
    /// Write the best kernel of a session as a standalone drop-in: the .cu (with its
    /// launch entry), the ABI header, and a README with how to build and call it.
    ///
    /// With --torch DIR: a Python package around the kernel instead, a PyTorch custom
    /// operator (torch.library) built with torch.utils.cpp_extension, with test_kernel.py
    /// (checks it against the workload's PyTorch reference and times both) and a README.
    Export {
        /// The session directory (runs/<id>).
        session: PathBuf,
        /// Where the files go.
        #[arg(long, default_value = "export")]
        out: PathBuf,
        /// Write a PyTorch package into DIR (the kernel, its headers, the operator, the
        /// build, test_kernel.py, README.md) instead of the plain drop-in.
        #[arg(long, value_name = "DIR", conflicts_with = "out")]
        torch: Option<PathBuf>,
    },
    /// Turn a PyTorch problem file (KernelBench convention: class Model, get_inputs(),
    /// get_init_inputs()) into a workload spec: traced on the meta device (no GPU), every
    /// node mapped or named; needs a Python with torch (CUTESMITH_PYTHON or python3).
    Import {
        /// The problem file (.py).
        problem: PathBuf,
        /// The spec to write (default: workloads/<file stem>.toml).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Replace the spec if it exists.
        #[arg(long)]
        force: bool,
        /// Trace the Model in training mode (nn.Module's default, as KernelBench runs it):
        /// a BatchNorm normalizes with the batch's statistics. Default: eval mode.
        #[arg(long)]
        train: bool,
    },
    /// Continue a session after a crash, a kill or Ctrl-C, losing at most the step in flight.
    Resume(run::ResumeArgs),
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

/// Finds the toolchain, installing the pinned one first when none is found and
/// installing is allowed, saying so on stderr.
pub fn ensure_toolchain(opts: &ToolchainOptions, no_install: bool) -> Result<Toolchain> {
    toolchain::ensure(opts, no_install, &mut |m| eprintln!("cutesmith: {m}"))
}

fn dispatch(cli: Cli) -> Result<i32> {
    // Other processes of the user (a model-written kernel among them, were it to escape)
    // cannot read this process's memory or /proc/<pid>/environ (the model's API key).
    // The worker stays dumpable: it holds no secret, and profilers attach to it.
    if !matches!(cli.command, Command::Worker { .. }) {
        // SAFETY: prctl(2) with constant arguments.
        unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        }
    }
    if cli.global.no_sandbox {
        crate::sandbox::disable();
    }
    let config = Config::load(cli.global.config.as_deref())?;
    // The workers' host memory budget: the flag, else the config file's.
    if let Some(text) = &cli.global.host_memory {
        let bytes = crate::config::parse_size(text)
            .map_err(|e| Error::Usage(format!("--host-memory: {e}")))?;
        crate::eval::set_host_budget(bytes);
    } else if let Some(text) = &config.host_memory {
        let file = config.file.as_ref().map_or_else(
            || "the config file".to_string(),
            |f| f.display().to_string(),
        );
        let bytes = crate::config::parse_size(text)
            .map_err(|e| Error::Usage(format!("{file}: [limits] host_memory: {e}")))?;
        crate::eval::set_host_budget(bytes);
    }
    let opts = toolchain_options(&cli.global, &config);
    let no_install = cli.global.no_install;
    match cli.command {
        Command::Setup { force } => setup::cmd_setup(&opts, force),
        Command::Doctor { json } => doctor::cmd_doctor(&opts, &config, json),
        Command::Workloads { dir } => workloads::cmd_workloads(&dir),
        Command::Compile(args) => compile::cmd_compile(&opts, no_install, args),
        Command::Check(args) => check::cmd_check(&opts, no_install, args),
        Command::Baseline(args) => check::cmd_baseline(args),
        Command::Run(args) => run::cmd_run(&opts, no_install, &config, args),
        Command::Profile(args) => profile::cmd_profile(&opts, no_install, args),
        Command::Session(args) => session::cmd_session(&opts, no_install, &config, args),
        Command::Report(args) => report::cmd_report(args),
        Command::Export {
            session,
            out,
            torch,
        } => match torch {
            Some(dir) => export::cmd_export_torch(&opts, &session, &dir),
            None => export::cmd_export(&session, &out),
        },
        Command::Import {
            problem,
            out,
            force,
            train,
        } => import::cmd_import(&problem, out, force, train),
        Command::Resume(args) => run::cmd_resume(&opts, no_install, args),
        Command::Worker { job } => Ok(crate::eval::worker::main(&job)),
        Command::Cache { clear } => cache::cmd_cache(clear),
        Command::Tuning { action } => tuning::cmd_tuning(action),
        Command::Strategies {
            workload,
            workloads_dir,
            emit,
        } => strategies::cmd_strategies(&workloads_dir, &workload, emit.as_deref()),
        Command::Bench(args) => bench::cmd_bench(&opts, no_install, &config, args),
    }
}

/// Pretty JSON for `--json` output.
pub fn to_json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string_pretty(v).map_err(|e| Error::Format {
        context: "JSON output".into(),
        message: e.to_string(),
    })
}
