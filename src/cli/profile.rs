//! `cutesmith profile KERNEL.cu -w W`: compile, time against the vendor library (the
//! roofline placement), profile one launch of the headline shape under Nsight Compute,
//! read the static facts of the compile, and print the two or three findings that matter
//! ([`crate::feedback::profile`]). Without ncu (or without permission to read the
//! counters) it says so and goes on with event timing and the static facts.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use super::{EXIT_GOAL_NOT_MET, EXIT_OK};
use crate::error::{Error, Result};
use crate::eval::{self, job::Mode};
use crate::feedback::profile::{ncu_launch, Profile};
use crate::spec::Workload;
use crate::toolchain::ToolchainOptions;

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// The kernel source (.cu) implementing the cutesmith ABI.
    pub kernel: PathBuf,
    /// Workload name (from --workloads-dir) or path to a spec.
    #[arg(short, long)]
    pub workload: String,
    #[arg(long, default_value = "workloads")]
    pub workloads_dir: PathBuf,
    /// Also collect ncu's sections (SpeedOfLight, MemoryWorkloadAnalysis, Occupancy,
    /// WarpStateStats, ...): slower.
    #[arg(long)]
    pub full: bool,
    /// Seconds before a worker is killed.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Print the profile as JSON.
    #[arg(long)]
    pub json: bool,
    /// Keep ncu's raw CSV here.
    #[arg(long, value_name = "FILE")]
    pub save_csv: Option<PathBuf>,
}

/// Everything `profile` found (the JSON of `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct ProfileReport {
    pub kernel: PathBuf,
    #[serde(flatten)]
    pub profile: Profile,
}

pub fn cmd_profile(opts: &ToolchainOptions, no_install: bool, args: ProfileArgs) -> Result<i32> {
    let workload = Workload::find(&args.workloads_dir, &args.workload)?;
    let tc = super::ensure_toolchain(opts, no_install)?;
    crate::eval::gpu::require_gpu()?;
    let Some(out) = super::check::compile_kernel(&tc, &args.kernel)? else {
        return Ok(EXIT_GOAL_NOT_MET);
    };
    let so = out
        .shared_object
        .clone()
        .ok_or_else(|| Error::Usage("the compile produced no shared object".into()))?;
    let timeout = Duration::from_secs(args.timeout);

    eprintln!("timing the headline shape against the vendor library ...");
    let mut job = eval::job_for(&workload, Mode::Check, Some(so.clone()), 1, 30)?;
    job.shapes = vec![0];
    let e = eval::evaluate(&job, timeout)?;
    if !e.passed() {
        print!("{}", e.render());
        println!("profile needs a correct kernel: fix the fault above first (`cutesmith check`)");
        return Ok(EXIT_GOAL_NOT_MET);
    }
    let kernels: Vec<String> = out.resources.iter().map(|r| r.mangled.clone()).collect();
    let ncu = match crate::toolchain::find_extra_tools(opts).ncu {
        None => Err("ncu (Nsight Compute) not found beside nvcc or on PATH".to_string()),
        Some(exe) => {
            eprintln!("profiling one launch under ncu ...");
            let run = ncu_launch(
                &exe.path, &workload, args.full, &kernels, &so, timeout, None,
            );
            if let Some(keep) = &args.save_csv {
                if let Err(e) = std::fs::write(keep, &run.csv) {
                    eprintln!("could not keep the CSV at {}: {e}", keep.display());
                }
            }
            run.profiles
        }
    };
    let ncu = ncu.map_err(|why| format!("{why}; event timing and static facts only"));
    let report = ProfileReport {
        kernel: args.kernel.clone(),
        profile: Profile::assemble(&workload, Some(&e), Some(&out), ncu),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| Error::Format {
                context: "profile".into(),
                message: e.to_string(),
            })?
        );
    } else {
        print!("{}", report.profile.render(&report.kernel));
    }
    Ok(EXIT_OK)
}
