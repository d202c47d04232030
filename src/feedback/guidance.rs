//! Guidance: the two or three findings that matter most for the next change, picked for
//! the workload's class from the roofline placement, the Nsight Compute profile and the
//! static facts. The rest stays in the session files, so prompts stay short.

use serde::{Deserialize, Serialize};

use super::ncu::KernelProfile;
use super::roofline::{Bound, Placement};
use super::static_facts::{Hint, Severity};

/// One finding, with how much it matters (higher first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub weight: f64,
    pub text: String,
}

/// What a stall reason means and what to do about it.
fn stall_advice(reason: &str, bound: Bound) -> &'static str {
    match (reason, bound) {
        ("long_scoreboard", Bound::Memory) => {
            "warps wait on global loads: put more bytes in flight (16-byte vectors, several loads issued before first use, more resident warps)"
        }
        ("long_scoreboard", Bound::Compute) => {
            "warps wait on global/local memory: operands are not staged ahead; deepen the TMA/cp.async pipeline (more stages) or check for spills"
        }
        ("barrier", _) => {
            "warps wait at __syncthreads: split producer and consumer (warp specialization with mbarriers) or balance the work between warps"
        }
        ("gmma", _) => {
            "warps wait on WGMMA results: issue more WGMMAs before waiting (wgmma.wait_group with a depth > 0) and overlap the next tile's loads"
        }
        ("math_pipe_throttle", _) => {
            "the math pipe is saturated: the kernel is at its arithmetic limit for this instruction mix; use the tensor pipe or fewer instructions per result"
        }
        ("mio_throttle", _) | ("short_scoreboard", _) => {
            "shared-memory/MIO pressure: fewer shared-memory instructions (wider ldmatrix/vector accesses, swizzled layouts against bank conflicts)"
        }
        ("lg_throttle", _) => {
            "the load/store queue is full of narrow accesses: use 16-byte vectors so fewer instructions move the same bytes"
        }
        ("wait", _) => "fixed-latency dependencies: interleave independent work (unroll, more accumulators)",
        ("membar", _) => "memory fences: remove or narrow __threadfence / fence.proxy where ordering is not needed",
        ("sleeping", _) => "warps sleep (nanosleep or mbarrier try_wait back-off): the producer is late; check the pipeline's stage count",
        ("not_selected", _) | ("dispatch_stall", _) => "warps are ready but not selected: the SM is busy; this is not the limiter",
        ("no_instruction", _) | ("imc_miss", _) | ("branch_resolving", _) => {
            "instruction fetch or branches: the kernel's code is large or divergent; simplify the inner loop"
        }
        _ => "see the Nsight Compute WarpStateStats section",
    }
}

/// The findings, most important first, at most `max`.
pub fn select(
    placement: Option<&Placement>,
    profile: Option<&KernelProfile>,
    hints: &[Hint],
    max: usize,
) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    let bound = placement.map_or(Bound::Compute, |p| p.bound);
    if let Some(p) = placement {
        if p.headroom < 0.1 {
            out.push(Finding {
                weight: 10.0,
                text: format!(
                    "at {:.0}% of the roofline floor: little is left to gain; only a change of algorithm (fewer bytes or FLOPs) would help",
                    p.fraction * 100.0
                ),
            });
        }
    }
    for h in hints {
        let weight = match h.severity {
            Severity::High => 8.0,
            Severity::Medium => 4.0,
            Severity::Info => 0.5,
        };
        out.push(Finding {
            weight,
            text: h.text.clone(),
        });
    }
    if let Some(k) = profile {
        let sm = k.get("sm__throughput.avg.pct_of_peak_sustained_elapsed");
        let dram = k.get("dram__throughput.avg.pct_of_peak_sustained_elapsed");
        let tensor = k.tensor_pct();
        let occ = k.get("sm__warps_active.avg.pct_of_peak_sustained_active");
        match bound {
            Bound::Compute => {
                if let Some(t) = tensor {
                    if t < 70.0 {
                        out.push(Finding {
                            weight: 7.0 + (70.0 - t) / 20.0,
                            text: format!(
                                "tensor pipe active {t:.0}% of the time (SM throughput {}): the tensor cores starve; keep more WGMMAs in flight and the operand pipeline deeper",
                                sm.map(|s| format!("{s:.0}%")).unwrap_or_else(|| "n/a".into())
                            ),
                        });
                    }
                }
                if let Some(t) = tensor.filter(|t| *t >= 85.0) {
                    out.push(Finding {
                        weight: 6.5,
                        text: format!(
                            "tensor pipe busy {t:.0}% of the kernel: the mainloop is near its peak; what is left is the prologue and epilogue around it (overlap the epilogue with the next tile's mainloop: ping-pong schedule or a persistent kernel with a TMA-store epilogue) and the clock the chip sustains"
                        ),
                    });
                }
                if let (Some(d), Some(t)) = (dram, tensor) {
                    if d > 70.0 && t < 60.0 {
                        out.push(Finding {
                            weight: 6.0,
                            text: format!(
                                "DRAM {d:.0}% busy while the tensor pipe is {t:.0}%: operands are re-read from memory; larger tiles, clusters with TMA multicast, or a rasterized tile order raise reuse"
                            ),
                        });
                    }
                }
            }
            Bound::Memory => {
                if let Some(d) = dram {
                    if d < 80.0 {
                        out.push(Finding {
                            weight: 7.0 + (80.0 - d) / 20.0,
                            text: format!(
                                "DRAM throughput {d:.0}% of peak: not enough bytes in flight to saturate memory"
                            ),
                        });
                    }
                }
            }
        }
        if let Some(o) = occ {
            if o < 25.0 {
                let regs = k.get("launch__registers_per_thread");
                out.push(Finding {
                    weight: 3.0,
                    text: format!(
                        "achieved occupancy {o:.0}%{}: few warps hide latency; fine for a pipelined TMA/WGMMA kernel, a limiter for anything else",
                        regs.map(|r| format!(" ({r:.0} registers/thread)")).unwrap_or_default()
                    ),
                });
            }
        }
        if let Some(c) = k.get("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum") {
            if c > 1e5 {
                out.push(Finding {
                    weight: 4.0,
                    text: format!(
                        "{c:.0} shared-memory bank conflicts: swizzle the shared-memory layout (CuTe Swizzle<3,4,3> for 128-byte rows)"
                    ),
                });
            }
        }
        if let Some((reason, v)) = k.stalls().first() {
            if *v > 0.5 {
                out.push(Finding {
                    weight: 5.0 + v.min(10.0) / 2.0,
                    text: format!(
                        "top warp stall: {reason} ({v:.1} cycles per issued instruction): {}",
                        stall_advice(reason, bound)
                    ),
                });
            }
        }
    }
    out.sort_by(|a, b| b.weight.total_cmp(&a.weight));
    out.truncate(max);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feedback::ncu::Metric;

    fn profile(pairs: &[(&str, f64)]) -> KernelProfile {
        let mut k = KernelProfile::default();
        for (n, v) in pairs {
            k.metrics.insert(
                n.to_string(),
                Metric {
                    unit: String::new(),
                    value: *v,
                },
            );
        }
        k
    }

    fn placement(bound: Bound, fraction: f64) -> Placement {
        Placement {
            intensity: 1.0,
            ridge: 300.0,
            bound,
            achieved_tflops: 0.0,
            achieved_tb_per_s: 0.0,
            peak_tflops: 989.0,
            copy_tb_per_s: 3.0,
            floor_us: 10.0,
            time_us: 10.0 / fraction,
            fraction,
            headroom: 1.0 - fraction,
        }
    }

    #[test]
    fn a_starved_gemm_and_a_good_one_get_different_guidance() {
        let slow = profile(&[
            (
                "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                35.0,
            ),
            ("sm__throughput.avg.pct_of_peak_sustained_elapsed", 40.0),
            (
                "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
                6.0,
            ),
            (
                "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
                2.0,
            ),
        ]);
        let g = select(Some(&placement(Bound::Compute, 0.4)), Some(&slow), &[], 3);
        assert!(g[0].text.contains("tensor pipe active 35%"), "{g:?}");
        assert!(
            g.iter().any(|f| f.text.contains("long_scoreboard")),
            "{g:?}"
        );
        let fast = profile(&[
            (
                "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                88.0,
            ),
            (
                "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio",
                1.0,
            ),
        ]);
        let h = select(Some(&placement(Bound::Compute, 0.95)), Some(&fast), &[], 3);
        assert!(h[0].text.contains("little is left"), "{h:?}");
        assert!(
            !h.iter().any(|f| f.text.contains("tensor pipe active")),
            "{h:?}"
        );
    }

    #[test]
    fn memory_bound_kernels_hear_about_bytes_in_flight() {
        let k = profile(&[("dram__throughput.avg.pct_of_peak_sustained_elapsed", 45.0)]);
        let g = select(Some(&placement(Bound::Memory, 0.45)), Some(&k), &[], 2);
        assert!(g[0].text.contains("DRAM throughput 45%"), "{g:?}");
    }
}
