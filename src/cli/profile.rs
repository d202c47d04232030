//! `cutesmith profile KERNEL.cu -w W`: compile, time against the vendor library (the
//! roofline placement), profile one launch of the headline shape under Nsight Compute,
//! read the static facts of the compile, and print the two or three findings that matter.
//! Without ncu (or without permission to read the counters) it says so and goes on with
//! event timing and the static facts.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::feedback::guidance::{self, Finding};
use crate::feedback::ncu::{self, KernelProfile};
use crate::feedback::roofline::Placement;
use crate::feedback::static_facts::{self, Hint};
use crate::cli::{EXIT_GOAL_NOT_MET, EXIT_OK};
use crate::error::{Error, Result};
use crate::eval::job::Mode;
use crate::eval::{self, Evaluation};
use crate::toolchain::compile::CompileOutcome;
use crate::toolchain::ToolchainOptions;
use crate::spec::Workload;

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

/// Everything `profile` found.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileReport {
    pub kernel: PathBuf,
    pub workload: String,
    pub median_us: Option<f64>,
    pub vendor: Vec<(String, f64)>,
    pub placement: Option<Placement>,
    /// One entry per profiled launch of the candidate's kernels.
    pub ncu: Vec<KernelProfile>,
    /// Why there is no ncu profile, or what was odd about it.
    pub ncu_note: Option<String>,
    pub static_facts: Vec<Hint>,
    pub guidance: Vec<Finding>,
}

pub fn cmd_profile(opts: &ToolchainOptions, no_install: bool, args: ProfileArgs) -> Result<i32> {
    let workload = Workload::find(&args.workloads_dir, &args.workload)?;
    let tc = crate::cli::ensure_toolchain(opts, no_install)?;
    crate::cli::check::require_gpu()?;
    let Some(out) = crate::cli::check::compile_kernel(&tc, &args.kernel)? else {
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
        print!("{}", crate::cli::check::render_evaluation(&e));
        println!("profile needs a correct kernel: fix the fault above first (`cutesmith check`)");
        return Ok(EXIT_GOAL_NOT_MET);
    }
    let report = gather(&tc_extra(opts), &workload, &args, &out, &e, &so, timeout);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| Error::Format {
                context: "profile".into(),
                message: e.to_string(),
            })?
        );
    } else {
        print!("{}", render(&report));
    }
    Ok(EXIT_OK)
}

fn tc_extra(opts: &ToolchainOptions) -> Option<PathBuf> {
    crate::toolchain::find_extra_tools(opts).ncu.map(|t| t.path)
}

fn gather(
    ncu_exe: &Option<PathBuf>,
    w: &Workload,
    args: &ProfileArgs,
    out: &CompileOutcome,
    e: &Evaluation,
    so: &std::path::Path,
    timeout: Duration,
) -> ProfileReport {
    let r = e.report.as_ref();
    let timing = r.and_then(|r| r.timing.as_ref());
    let placement = match (timing, r.and_then(|r| r.ceilings.as_ref())) {
        (Some(t), Some(c)) => Placement::new(t, c),
        _ => None,
    };
    let kernels: Vec<String> = out.resources.iter().map(|r| r.mangled.clone()).collect();
    let got = match ncu_exe {
        None => Err("ncu (Nsight Compute) not found beside nvcc or on PATH".to_string()),
        Some(exe) => {
            eprintln!("profiling one launch under ncu ...");
            ncu_profile(
                exe,
                w,
                args.full,
                &kernels,
                so,
                timeout,
                args.save_csv.as_deref(),
            )
        }
    };
    let (profiles, ncu_note) = match got {
        Ok(p) => (p, None),
        Err(why) => (
            Vec::new(),
            Some(format!("{why}; event timing and static facts only")),
        ),
    };
    let facts = static_facts::hints(w.family(), w.dtype(), &out.resources, out.sass.as_ref());
    let main = profiles.iter().max_by(|a, b| {
        a.duration_us()
            .unwrap_or(0.0)
            .total_cmp(&b.duration_us().unwrap_or(0.0))
    });
    let guidance = guidance::select(placement.as_ref(), main, &facts, 3);
    ProfileReport {
        kernel: args.kernel.clone(),
        workload: w.name().to_string(),
        median_us: timing.and_then(|t| t.candidate.as_ref().map(|c| c.median_us)),
        vendor: timing
            .map(|t| {
                t.baselines
                    .iter()
                    .map(|b| (b.name.clone(), b.stats.median_us))
                    .collect()
            })
            .unwrap_or_default(),
        placement,
        ncu: profiles,
        ncu_note,
        static_facts: facts,
        guidance,
    }
}

/// One validation launch of the headline shape in a worker under ncu, filtered to the
/// kernels of this shared object (their mangled names from the ptxas report).
pub fn ncu_profile(
    exe: &std::path::Path,
    w: &Workload,
    full: bool,
    kernels: &[String],
    so: &std::path::Path,
    timeout: Duration,
    save_csv: Option<&std::path::Path>,
) -> std::result::Result<Vec<KernelProfile>, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let log = dir.path().join("ncu.csv");
    let mut job = eval::job_for(w, Mode::Validate, Some(so.to_path_buf()), 1, 20)
        .map_err(|e| e.to_string())?;
    job.shapes = vec![0];
    let e = eval::evaluate_under(&job, exe, ncu::args(kernels, full, &log), timeout)
        .map_err(|e| format!("ncu run failed: {e}"))?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    if let Some(keep) = save_csv {
        if let Err(e) = std::fs::write(keep, &text) {
            eprintln!("could not keep the CSV at {}: {e}", keep.display());
        }
    }
    match ncu::parse_csv(&text) {
        Ok(p) => Ok(p),
        Err(why) => {
            let err = text
                .lines()
                .chain(e.stderr_tail.lines())
                .find(|l| l.contains("==ERROR=="))
                .map(|l| format!(" ({})", l.trim()))
                .unwrap_or_default();
            Err(format!("ncu gave no profile: {why}{err}"))
        }
    }
}

/// The report as text.
pub fn render(r: &ProfileReport) -> String {
    let mut s = format!("profile of {} on {}\n", r.kernel.display(), r.workload);
    if let Some(t) = r.median_us {
        s.push_str(&format!("time: {t:.2} us (median of 30, L2 flushed)"));
        for (n, v) in &r.vendor {
            s.push_str(&format!("; {n} {v:.2} us ({:.2}x)", v / t));
        }
        s.push('\n');
    }
    if let Some(p) = &r.placement {
        s.push_str(&format!("roofline: {}\n", p.sentence()));
    }
    if let Some(n) = &r.ncu_note {
        s.push_str(&format!("ncu: {n}\n"));
    }
    for k in &r.ncu {
        let f = |name: &str| {
            k.get(name)
                .map(|v| format!("{v:.0}"))
                .unwrap_or_else(|| "n/a".into())
        };
        s.push_str(&format!(
            "ncu launch {}: {}\n  duration {} us | SM {}% | DRAM {}% | tensor pipe {} | occupancy {}% | {} regs/thread | {} B smem/block | L1 hit {}% | L2 hit {}% | smem bank conflicts {}\n",
            k.id,
            short(&k.kernel),
            k.duration_us().map(|d| format!("{d:.2}")).unwrap_or_else(|| "n/a".into()),
            f("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
            f("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
            k.tensor_pct().map(|t| format!("{t:.0}%")).unwrap_or_else(|| "n/a".into()),
            f("sm__warps_active.avg.pct_of_peak_sustained_active"),
            f("launch__registers_per_thread"),
            k.smem_bytes().map(|b| format!("{b:.0}")).unwrap_or_else(|| "n/a".into()),
            f("l1tex__t_sector_hit_rate.pct"),
            f("lts__t_sector_hit_rate.pct"),
            f("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"),
        ));
        let stalls: Vec<String> = k
            .stalls()
            .iter()
            .take(3)
            .map(|(r, v)| format!("{r} {v:.2}"))
            .collect();
        if !stalls.is_empty() {
            s.push_str(&format!(
                "  top stalls (cycles per issued instruction): {}\n",
                stalls.join(", ")
            ));
        }
    }
    if !r.static_facts.is_empty() {
        s.push_str("static facts:\n");
        for h in &r.static_facts {
            s.push_str(&format!("  [{:?}] {}\n", h.severity, h.text));
        }
    }
    s.push_str("guidance:\n");
    if r.guidance.is_empty() {
        s.push_str("  (nothing stands out)\n");
    }
    for (i, g) in r.guidance.iter().enumerate() {
        s.push_str(&format!("  {}. {}\n", i + 1, g.text));
    }
    s
}

fn short(name: &str) -> String {
    if name.len() <= 100 {
        name.to_string()
    } else {
        format!(
            "{}...",
            &name[..name.char_indices().nth(97).map_or(name.len(), |c| c.0)]
        )
    }
}
