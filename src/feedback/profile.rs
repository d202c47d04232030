//! One profile of a correct kernel, assembled once from what the other stages recorded
//! (the evaluation's timing and ceilings, the compile's resources and SASS facts, the
//! Nsight Compute launches) and rendered two ways: in full for `cutesmith profile`, and
//! short for the optimize prompt. Also runs the one profiled launch under ncu.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::guidance::{self, Finding};
use super::ncu::{self, KernelProfile};
use super::roofline::Placement;
use super::static_facts::{self, Hint};
use crate::eval::job::{Mode, TimingReport};
use crate::eval::{self, Evaluation, Under};
use crate::spec::Workload;
use crate::toolchain::compile::CompileOutcome;
use crate::toolchain::ptxas::KernelResources;

/// Findings a profile keeps (the few that matter most).
const FINDINGS: usize = 3;

/// Everything known about where a correct kernel's time goes.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
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
    /// The headline timing the figures above come from.
    #[serde(skip)]
    pub timing: Option<TimingReport>,
    /// The compile's per-kernel resources.
    #[serde(skip)]
    pub resources: Vec<KernelResources>,
}

impl Profile {
    /// Puts the pieces together: the roofline placement (from the evaluation's headline
    /// timing and the measured ceilings), the static facts of the compile, the ncu
    /// launches (or why there are none), and the findings selected from all three.
    pub fn assemble(
        w: &Workload,
        eval: Option<&Evaluation>,
        compile: Option<&CompileOutcome>,
        ncu: Result<Vec<KernelProfile>, String>,
    ) -> Profile {
        let report = eval.and_then(|e| e.report.as_ref());
        let timing = report.and_then(|r| r.timing.clone());
        let placement = match (timing.as_ref(), report.and_then(|r| r.ceilings.as_ref())) {
            (Some(t), Some(c)) => Placement::new(t, c),
            _ => None,
        };
        let static_facts = compile
            .map(|c| static_facts::hints(w.family(), w.dtype(), &c.resources, c.sass.as_ref()))
            .unwrap_or_default();
        let (ncu, ncu_note) = match ncu {
            Ok(p) => (p, None),
            Err(why) => (Vec::new(), Some(why)),
        };
        let mut p = Profile {
            workload: w.name().to_string(),
            median_us: timing
                .as_ref()
                .and_then(|t| t.candidate.as_ref().map(|c| c.median_us)),
            vendor: timing
                .as_ref()
                .map(|t| {
                    t.baselines
                        .iter()
                        .map(|b| (b.name.clone(), b.stats.median_us))
                        .collect()
                })
                .unwrap_or_default(),
            placement,
            ncu,
            ncu_note,
            static_facts,
            guidance: Vec::new(),
            timing,
            resources: compile.map(|c| c.resources.clone()).unwrap_or_default(),
        };
        p.guidance = guidance::select(p.placement.as_ref(), p.main(), &p.static_facts, FINDINGS);
        p
    }

    /// The launch that took longest: the one the findings speak of.
    pub fn main(&self) -> Option<&KernelProfile> {
        self.ncu.iter().max_by(|a, b| {
            a.duration_us()
                .unwrap_or(0.0)
                .total_cmp(&b.duration_us().unwrap_or(0.0))
        })
    }

    /// The full text `cutesmith profile` prints for `kernel`.
    pub fn render(&self, kernel: &Path) -> String {
        let mut s = format!("profile of {} on {}\n", kernel.display(), self.workload);
        if let Some(t) = self.median_us {
            s.push_str(&format!("time: {t:.2} us (median of 30, L2 flushed)"));
            for (n, v) in &self.vendor {
                s.push_str(&format!("; {n} {v:.2} us ({:.2}x)", v / t));
            }
            s.push('\n');
        }
        if let Some(p) = &self.placement {
            s.push_str(&format!("roofline: {}\n", p.sentence()));
        }
        if let Some(n) = &self.ncu_note {
            s.push_str(&format!("ncu: {n}\n"));
        }
        for k in &self.ncu {
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
        if !self.static_facts.is_empty() {
            s.push_str("static facts:\n");
            for h in &self.static_facts {
                s.push_str(&format!("  [{:?}] {}\n", h.severity, h.text));
            }
        }
        s.push_str("guidance:\n");
        if self.guidance.is_empty() {
            s.push_str("  (nothing stands out)\n");
        }
        for (i, g) in self.guidance.iter().enumerate() {
            s.push_str(&format!("  {}. {}\n", i + 1, g.text));
        }
        s
    }

    /// The short form for the optimize prompt: the roofline position, the Nsight Compute
    /// summary of the main launch, the findings that matter most, the timing against the
    /// vendor library, and the resources of the compile.
    pub fn prompt_text(&self) -> String {
        let mut s = String::new();
        if let Some(p) = &self.placement {
            s.push_str(&format!("- roofline: {}\n", p.sentence()));
        }
        if let Some(k) = self.main() {
            let pct = |m: &str| k.get(m).map_or("n/a".to_string(), |v| format!("{v:.0}%"));
            s.push_str(&format!(
                "- Nsight Compute: SM {}, DRAM {}, tensor pipe {}, occupancy {}, top stalls: {}\n",
                pct("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
                pct("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                k.tensor_pct()
                    .map_or("n/a".to_string(), |t| format!("{t:.0}%")),
                pct("sm__warps_active.avg.pct_of_peak_sustained_active"),
                k.stalls()
                    .iter()
                    .take(3)
                    .map(|(r, v)| format!("{r} {v:.1}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !self.guidance.is_empty() {
            s.push_str("- what matters most now:\n");
            for g in &self.guidance {
                s.push_str(&format!("  * {}\n", g.text));
            }
        }
        if let (Some(t), Some(_)) = (&self.timing, &self.placement) {
            if let Some(c) = &t.candidate {
                s.push_str(&format!(
                    "- {:.2} us median (p10-p90 {:.2}-{:.2}) on {}\n",
                    c.median_us, c.p10_us, c.p90_us, t.shape
                ));
            }
            for b in &t.baselines {
                s.push_str(&format!(
                    "- {}: {:.2} us{}\n",
                    b.name,
                    b.stats.median_us,
                    b.speedup
                        .map(|x| format!(" (this version is {x:.2}x of it)"))
                        .unwrap_or_default()
                ));
            }
        }
        for r in &self.resources {
            s.push_str(&format!(
                "- {}: {} registers, {} B spilled, {} B shared memory\n",
                r.name,
                r.registers,
                r.spill_bytes(),
                r.shared_bytes
            ));
        }
        if s.is_empty() {
            s.push_str("(no profile recorded)\n");
        }
        s
    }
}

/// What one profiled launch gave: the parsed launches (or why there are none) and
/// ncu's raw CSV.
pub struct NcuRun {
    pub profiles: Result<Vec<KernelProfile>, String>,
    pub csv: String,
}

/// One validation launch of the headline shape in a worker under Nsight Compute
/// (`exe`), filtered to the kernels of this shared object (their mangled names from the
/// ptxas report); `full` adds ncu's sections.
pub fn ncu_launch(
    exe: &Path,
    w: &Workload,
    full: bool,
    kernels: &[String],
    so: &Path,
    timeout: Duration,
    device: Option<&str>,
) -> NcuRun {
    let failed = |why: String| NcuRun {
        profiles: Err(why),
        csv: String::new(),
    };
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return failed(format!("temp dir: {e}")),
    };
    let log = dir.path().join("ncu.csv");
    let mut job = match eval::job_for(w, Mode::Validate, Some(so.to_path_buf()), 1, 20) {
        Ok(j) => j,
        Err(e) => return failed(e.to_string()),
    };
    job.shapes = vec![0];
    job.device = device.map(str::to_string);
    let under = Under::Profiler {
        exe,
        args: ncu::args(kernels, full, &log),
    };
    let e = match eval::run(&job, timeout, under) {
        Ok(e) => e,
        Err(e) => return failed(format!("ncu run failed: {e}")),
    };
    let csv = std::fs::read_to_string(&log).unwrap_or_default();
    let profiles = ncu::parse_csv(&csv).map_err(|why| {
        let err = csv
            .lines()
            .chain(e.stderr_tail.lines())
            .find(|l| l.contains("==ERROR=="))
            .map(|l| format!(" ({})", l.trim()))
            .unwrap_or_default();
        format!("ncu gave no profile: {why}{err}")
    });
    NcuRun { profiles, csv }
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
