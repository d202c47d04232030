//! `cutesmith check` and `cutesmith baseline`: compile a kernel, evaluate it in a worker
//! process on the GPU, and print what was found: validation per shape and seed, the
//! fault if any, and the timing against the vendor libraries and the roofline.

use std::time::Duration;

use super::{BaselineArgs, CheckArgs, EXIT_ERROR, EXIT_GOAL_NOT_MET, EXIT_OK};
use crate::error::{Error, Result};
use crate::eval::job::{FaultKind, Job, Mode};
use crate::eval::sanitizer::SanitizerReport;
use crate::eval::{self, Evaluation};
use crate::spec::Workload;
use crate::toolchain::cache::CompileCache;
use crate::toolchain::compile::{self, CompileOptions, CompileRequest};
use crate::toolchain::ToolchainOptions;

/// Compiles a kernel file for this machine's GPU through the cache; on failure prints
/// the condensed diagnostics and returns `None`.
pub fn compile_kernel(
    tc: &crate::toolchain::Toolchain,
    kernel: &std::path::Path,
) -> Result<Option<crate::toolchain::compile::CompileOutcome>> {
    let req = CompileRequest::from_file(
        kernel,
        CompileOptions {
            arch: crate::eval::gpu::target_arch(),
            ..CompileOptions::default()
        },
    )?;
    eprintln!("compiling {} ...", kernel.display());
    let outcome = compile::compile(tc, &CompileCache::default_location(), &req)?;
    if !outcome.ok() {
        print!("{}", outcome.render(&kernel.display().to_string()));
        return Ok(None);
    }
    Ok(Some(outcome))
}

pub fn cmd_check(opts: &ToolchainOptions, no_install: bool, args: CheckArgs) -> Result<i32> {
    crate::eval::gpu::require_gpu()?;
    let workload = Workload::find(&args.workloads_dir, &args.workload)?;
    let tc = super::ensure_toolchain(opts, no_install)?;
    let Some(outcome) = compile_kernel(&tc, &args.kernel)? else {
        println!(
            "fault: {} (the kernel did not compile)",
            FaultKind::CompileError.name()
        );
        return Ok(EXIT_GOAL_NOT_MET);
    };
    let facts = crate::feedback::static_facts::hints(
        workload.family(),
        workload.dtype(),
        &outcome.resources,
        outcome.sass.as_ref(),
    );
    if !args.json {
        for h in &facts {
            println!("static fact ({:?}): {}", h.severity, h.text);
        }
    }
    let so = outcome.shared_object.clone();
    let mode = if args.no_timing {
        Mode::Validate
    } else {
        Mode::Check
    };
    let mut job = eval::job_for(&workload, mode, so, args.seeds, args.runs)?;
    if args.headline_only {
        job.shapes = vec![0];
    }
    eprintln!(
        "evaluating on {} ({} shapes x {} seeds) in a worker process ...",
        workload.name(),
        if args.headline_only {
            1
        } else {
            workload.shapes().len()
        },
        job.seeds.len()
    );
    let mut eval = eval::evaluate(&job, Duration::from_secs(args.timeout))?;
    let findings = sanitize(opts, &args, &workload, &job, &mut eval)?;
    if args.json {
        let out = serde_json::json!({ "evaluation": &eval, "sanitizer": &findings });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| Error::Format {
                context: "evaluation".into(),
                message: e.to_string()
            })?
        );
    } else {
        print!("{}", eval.render());
        for rep in &findings {
            print!("{}", rep.summary());
        }
        println!("{}", memory_line(&eval, job.host_memory_limit));
    }
    // A limit of the machine, not the kernel: an environment error.
    if eval
        .fault
        .as_ref()
        .is_some_and(|f| f.kind == FaultKind::Resource)
    {
        return Ok(EXIT_ERROR);
    }
    Ok(if eval.passed() {
        EXIT_OK
    } else {
        EXIT_GOAL_NOT_MET
    })
}

/// What the run cost the host: the worker's peak resident memory, its limit, and what
/// enforced the limit (and why not a cgroup, where it was not one).
fn memory_line(eval: &eval::Evaluation, limit: Option<u64>) -> String {
    let peak = crate::spec::human_bytes(eval.peak_rss as f64);
    let enforced = match &eval.memory_ceiling {
        Some(c @ crate::process::MemoryCeiling::Cgroup { .. }) => {
            format!(", enforced by a {}", c.mechanism())
        }
        Some(c @ crate::process::MemoryCeiling::Sampled { why_not_cgroup }) => {
            format!(", enforced on {} ({why_not_cgroup})", c.mechanism())
        }
        None => String::new(),
    };
    match limit {
        Some(l) => format!(
            "host memory: the worker's peak resident set was {peak} (limit {}, \
             --host-memory{enforced})",
            crate::spec::human_bytes(l as f64)
        ),
        None => format!("host memory: the worker's peak resident set was {peak}"),
    }
}

/// Runs the cheapest shape under each compute-sanitizer tool asked for
/// ([`eval::sanitize`]).
fn sanitize(
    opts: &ToolchainOptions,
    args: &CheckArgs,
    workload: &Workload,
    job: &Job,
    eval: &mut Evaluation,
) -> Result<Vec<SanitizerReport>> {
    if args.sanitize.is_empty() {
        return Ok(Vec::new());
    }
    let tool = crate::toolchain::find_extra_tools(opts).compute_sanitizer;
    eval::sanitize(
        job,
        workload,
        tool.as_ref().map(|t| t.path.as_path()),
        &args.sanitize,
        Duration::from_secs(args.timeout.max(600)),
        eval,
        &|m| eprintln!("{m}"),
    )
}

pub fn cmd_baseline(args: BaselineArgs) -> Result<i32> {
    crate::eval::gpu::require_gpu()?;
    let mut code = EXIT_OK;
    for name in &args.workloads {
        let workload = Workload::find(&args.workloads_dir, name)?;
        let job = eval::job_for(&workload, Mode::Baseline, None, 1, args.runs)?;
        eprintln!("timing baselines of {} ...", workload.name());
        let eval = eval::evaluate(&job, Duration::from_secs(args.timeout))?;
        if args.json {
            println!(
                "{}",
                serde_json::to_string(&eval).map_err(|e| Error::Format {
                    context: "evaluation".into(),
                    message: e.to_string()
                })?
            );
        } else {
            print!("{}", eval.render());
        }
        if eval
            .report
            .as_ref()
            .and_then(|r| r.timing.as_ref())
            .is_none()
        {
            code = EXIT_ERROR;
        }
    }
    Ok(code)
}
