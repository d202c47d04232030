//! `cutesmith check` and `cutesmith baseline`: compile a kernel, evaluate it in a worker
//! process on the GPU, and print what was found: validation per shape and seed, the
//! fault if any, and the timing against the vendor libraries and the roofline.

use std::time::Duration;

use crate::cli::{BaselineArgs, CheckArgs, EXIT_ERROR, EXIT_GOAL_NOT_MET, EXIT_OK};
use crate::error::{Error, Result};
use crate::eval::job::{Fault, FaultKind, Job, Mode, TimingReport};
use crate::eval::sanitizer::{SanitizerReport, Tool};
use crate::eval::{self, Evaluation};
use crate::toolchain::cache::CompileCache;
use crate::toolchain::compile::{self, CompileOptions, CompileRequest};
use crate::toolchain::ToolchainOptions;
use crate::spec::Workload;

/// Stops GPU commands early, with exit code 2, on a machine without a GPU.
pub fn require_gpu() -> Result<()> {
    if !crate::eval::gpu::driver_present() {
        return Err(Error::NoGpu(
            "this command runs kernels on an NVIDIA GPU, and this machine has no CUDA driver \
             (libcuda.so); run it on a machine with one (`cutesmith doctor` shows what is found)"
                .into(),
        ));
    }
    Ok(())
}

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
        print!(
            "{}",
            crate::cli::render_outcome(&kernel.display().to_string(), &outcome)
        );
        return Ok(None);
    }
    Ok(Some(outcome))
}

pub fn cmd_check(opts: &ToolchainOptions, no_install: bool, args: CheckArgs) -> Result<i32> {
    require_gpu()?;
    let workload = Workload::find(&args.workloads_dir, &args.workload)?;
    let tc = crate::cli::ensure_toolchain(opts, no_install)?;
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
        print!("{}", render_evaluation(&eval));
        for rep in &findings {
            print!("{}", rep.summary());
        }
    }
    Ok(if eval.passed() {
        EXIT_OK
    } else {
        EXIT_GOAL_NOT_MET
    })
}

/// Runs the workload's cheapest shape under each requested compute-sanitizer tool; a
/// finding refines the evaluation's fault with the source line it names.
fn sanitize(
    opts: &ToolchainOptions,
    args: &CheckArgs,
    workload: &Workload,
    job: &Job,
    eval: &mut Evaluation,
) -> Result<Vec<SanitizerReport>> {
    let mut findings = Vec::new();
    let rejected = eval
        .fault
        .as_ref()
        .is_some_and(|f| matches!(f.kind, FaultKind::ForbiddenLibrary | FaultKind::AbiMismatch));
    if args.sanitize.is_empty() || rejected {
        return Ok(findings);
    }
    let tool = crate::toolchain::find_extra_tools(opts)
        .compute_sanitizer
        .ok_or_else(|| Error::ToolMissing {
            what: "compute-sanitizer".into(),
            hint: "it ships with the CUDA toolkit (e.g. /usr/local/cuda/bin); put it on PATH"
                .into(),
        })?;
    let smallest = smallest_shape(workload);
    for t in &args.sanitize {
        let mut small = job.clone();
        small.mode = Mode::Validate;
        small.seeds = vec![1];
        small.shapes = vec![smallest];
        small.nonce = eval::nonce();
        eprintln!(
            "running {} of {} under compute-sanitizer {} ...",
            workload.shapes()[smallest],
            workload.name(),
            t.name()
        );
        let (_, rep) = eval::evaluate_sanitized(
            &small,
            &tool.path,
            *t,
            Duration::from_secs(args.timeout.max(600)),
        )?;
        if !rep.findings.is_empty() {
            let kind = match t {
                Tool::Racecheck => FaultKind::Race,
                _ => FaultKind::OutOfBounds,
            };
            let refine = eval.fault.as_ref().is_none_or(|f| {
                matches!(
                    f.kind,
                    FaultKind::Mismatch
                        | FaultKind::Race
                        | FaultKind::KernelError
                        | FaultKind::OutOfBounds
                )
            });
            if refine {
                eval.fault = Some(Fault {
                    kind,
                    message: rep.summary(),
                });
            }
        }
        findings.push(rep);
    }
    Ok(findings)
}

/// The index of the workload's cheapest shape (for sanitizer runs).
fn smallest_shape(w: &Workload) -> usize {
    w.shapes()
        .iter()
        .enumerate()
        .min_by(|a, b| {
            w.flops(a.1)
                .total_cmp(&w.flops(b.1))
                .then(w.min_bytes(a.1).total_cmp(&w.min_bytes(b.1)))
        })
        .map_or(0, |(i, _)| i)
}

pub fn cmd_baseline(args: BaselineArgs) -> Result<i32> {
    require_gpu()?;
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
            print!("{}", render_evaluation(&eval));
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

/// The text report of an evaluation.
pub fn render_evaluation(e: &Evaluation) -> String {
    let mut s = String::new();
    if let Some(r) = &e.report {
        if let Some(d) = &r.device {
            s.push_str(&format!(
                "device: {} ({} SMs, sm_{}{})\n",
                d.name, d.sm_count, d.compute_capability.0, d.compute_capability.1
            ));
        }
        if let Some(c) = &r.ceilings {
            s.push_str(&format!(
                "ceilings: copy {:.2} TB/s (measured), peak {}\n",
                c.copy_bytes_per_s / 1e12,
                c.peak_note
            ));
        }
        for v in &r.validations {
            s.push_str(&validation_line(v));
        }
        if let Some(t) = &r.timing {
            s.push_str(&render_timing(t));
        }
        if let Some(v) = &r.revalidation {
            s.push_str("after timing, on fresh inputs:\n");
            s.push_str(&validation_line(v));
        }
        for n in &r.notes {
            s.push_str(&format!("note: {n}\n"));
        }
    }
    match &e.fault {
        Some(f) => {
            s.push_str(&format!("FAULT: {}\n", f.kind.name()));
            for l in f.message.lines() {
                s.push_str(&format!("  {l}\n"));
            }
        }
        None if e.passed() => s.push_str("result: correct on every shape and seed\n"),
        None => {}
    }
    if e.report.is_none() && !e.stderr_tail.is_empty() {
        s.push_str(&format!("worker stderr:\n{}\n", e.stderr_tail));
    }
    s
}

fn validation_line(v: &crate::eval::job::ShapeValidation) -> String {
    let status = if v.passed { "ok" } else { "FAILED" };
    let detail = match &v.comparison {
        Some(c) => format!(
            "max abs err {:.3e}, max rel err {:.3e}",
            c.max_abs_err, c.max_rel_err
        ),
        None => String::new(),
    };
    let fp64 = v
        .fp64
        .as_ref()
        .map(|f| {
            format!(
                ", fp64 check {}/{} within {:.1e}",
                f.samples - f.failed,
                f.samples,
                f.bound
            )
        })
        .unwrap_or_default();
    format!("  {} seed {}: {status} {detail}{fp64}\n", v.shape, v.seed)
}

fn render_timing(t: &TimingReport) -> String {
    let mut s = format!(
        "timing {} ({:.3} GFLOP, {:.1} MB minimum traffic, roofline floor {:.2} us):\n",
        t.shape,
        t.flops / 1e9,
        t.min_bytes / 1e6,
        t.floor_s * 1e6
    );
    s.push_str("  | who | median us | p10-p90 us | TFLOP/s | TB/s | speedup of candidate |\n");
    s.push_str("  | --- | --- | --- | --- | --- | --- |\n");
    let row = |name: &str, st: &crate::eval::job::Stats, sp: Option<f64>| {
        let sec = st.median_us * 1e-6;
        format!(
            "  | {name} | {:.2} | {:.2}-{:.2} | {:.1} | {:.2} | {} |\n",
            st.median_us,
            st.p10_us,
            st.p90_us,
            t.flops / sec / 1e12,
            t.min_bytes / sec / 1e12,
            sp.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
        )
    };
    if let Some(c) = &t.candidate {
        s.push_str(&row("candidate", c, None));
    }
    for b in &t.baselines {
        s.push_str(&row(&b.name, &b.stats, b.speedup));
        if let Some(n) = &b.note {
            s.push_str(&format!("    ({}: {n})\n", b.name));
        }
    }
    if let Some(f) = t.roofline_fraction {
        s.push_str(&format!(
            "  candidate at {:.0}% of the roofline floor\n",
            f * 100.0
        ));
    }
    s
}
