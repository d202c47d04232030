//! Static facts: rules that turn the ptxas resource report and the SASS summary of a
//! compiled kernel into short, specific hints ("no HGMMA in SASS: the kernel is not using
//! WGMMA", "1.2 KB spilled: reduce the accumulator tile"), workload-aware so a GEMM is not
//! told about vector widths and an activation is not told about tensor cores.

use serde::{Deserialize, Serialize};

use crate::spec::{DType, Family};
use crate::toolchain::ptxas::KernelResources;
use crate::toolchain::sass::SassSummary;

/// How much a finding matters for the next change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Likely the main limiter.
    High,
    /// Worth fixing once the main limiter is gone.
    Medium,
    /// A fact, reported for completeness.
    Info,
}

/// One hint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hint {
    pub severity: Severity,
    /// The evidence and what to do, in one sentence.
    pub text: String,
}

/// Hints for a kernel of `family` / `dtype` from its compile outcome, most important first.
pub fn hints(
    family: Family,
    dtype: DType,
    resources: &[KernelResources],
    sass: Option<&SassSummary>,
) -> Vec<Hint> {
    let mut out = Vec::new();
    let mut push = |severity, text: String| out.push(Hint { severity, text });
    let spill: u64 = resources.iter().map(|r| r.spill_bytes()).sum();
    if spill > 0 {
        let worst = resources
            .iter()
            .max_by_key(|r| r.spill_bytes())
            .map(|r| format!(" (worst: {}, {} registers)", r.name, r.registers))
            .unwrap_or_default();
        push(
            Severity::High,
            format!(
                "{spill} B spilled to local memory{worst}: reduce the accumulator tile or the values \
                 kept live per thread, or raise the register cap (__launch_bounds__)"
            ),
        );
    }
    let stack: u64 = resources
        .iter()
        .map(|r| r.stack_frame_bytes)
        .max()
        .unwrap_or(0);
    if stack > 0 && spill == 0 {
        push(
            Severity::Medium,
            format!(
                "{stack} B stack frame: a register array indexed at run time went to local \
                 memory; index it with compile-time constants (unrolled loops)"
            ),
        );
    }
    let Some(t) = sass.map(SassSummary::totals) else {
        push(Severity::Info, "no SASS summary (cuobjdump missing)".into());
        return out;
    };
    if t.ldl + t.stl > 0 && spill == 0 {
        push(
            Severity::Medium,
            format!(
                "{} local loads / {} local stores in SASS: local memory traffic",
                t.ldl, t.stl
            ),
        );
    }
    match family {
        Family::Gemm
        | Family::GemmBiasAct
        | Family::GemmSoftmax
        | Family::GemmGlu
        | Family::GemmReduce
        | Family::GemmNorm
            if dtype != DType::F32 =>
        {
            if t.hgmma == 0 && t.hmma > 0 {
                push(
                    Severity::High,
                    format!(
                        "no HGMMA in SASS ({} HMMA): the kernel uses warp-level mma.sync, not \
                         Hopper's WGMMA; use a GMMA atom (SM90_64xNx16 ...) issued by a warpgroup",
                        t.hmma
                    ),
                );
            } else if t.hgmma == 0 && t.hmma == 0 {
                push(
                    Severity::High,
                    format!(
                        "no tensor-core instruction in SASS ({} FFMA): the GEMM runs on CUDA \
                         cores; use WGMMA (HGMMA) through a CuTe GMMA atom",
                        t.ffma
                    ),
                );
            }
            if t.hgmma > 0 && t.utmaldg == 0 {
                push(
                    Severity::Medium,
                    "HGMMA without TMA loads (no UTMALDG): operands reach shared memory through \
                     ordinary loads; use SM90_TMA_LOAD with an mbarrier pipeline"
                        .into(),
                );
            }
        }
        Family::Gemm
        | Family::GemmBiasAct
        | Family::GemmSoftmax
        | Family::GemmGlu
        | Family::GemmReduce
        | Family::GemmNorm => {
            if t.hmma == 0 && t.hgmma == 0 {
                push(
                    Severity::Info,
                    "fp32 GEMM on CUDA cores (FFMA only): split operands on tensor cores \
                     (3xF16 or 3xTF32: hi*hi + lo*hi + hi*lo) keep fp32 accuracy at several \
                     times the rate"
                        .into(),
                );
            }
        }
        // A reduction writes one value a row: only its loads need to be vectors.
        Family::Activation
        | Family::Softmax
        | Family::LogSoftmax
        | Family::Norm
        | Family::Reduce
        | Family::Scan => {
            if t.ldg_128 == 0 && t.ldg > 0 {
                push(
                    Severity::High,
                    format!(
                        "no 128-bit global loads ({} narrower LDG): a memory-bound kernel needs \
                         16-byte vector loads and stores per thread",
                        t.ldg
                    ),
                );
            }
            if t.stg_128 == 0 && t.stg > 0 && family != Family::Reduce {
                push(
                    Severity::Medium,
                    format!(
                        "no 128-bit global stores ({} narrower STG): store 16-byte vectors",
                        t.stg
                    ),
                );
            }
        }
    }
    out.sort_by_key(|h| h.severity);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolchain::{ptxas, sass};

    #[test]
    fn a_wgmma_tma_gemm_gets_no_tensor_core_complaint() {
        let s = sass::parse(include_str!("../../tests/fixtures/nvcc/gemm_ok.sass"));
        let r = ptxas::parse(include_str!("../../tests/fixtures/nvcc/gemm_ok.log"));
        let h = hints(Family::Gemm, DType::BF16, &r, Some(&s));
        assert!(h.iter().all(|h| !h.text.contains("HGMMA")), "{h:?}");
        assert!(h.iter().all(|h| h.severity != Severity::High), "{h:?}");
    }

    #[test]
    fn spills_and_missing_tensor_cores_are_high() {
        let s = sass::parse(include_str!(
            "../../tests/fixtures/parsers/plain_kernels.sass"
        ));
        let r = ptxas::parse(include_str!(
            "../../tests/fixtures/parsers/plain_kernels.log"
        ));
        let h = hints(Family::Gemm, DType::BF16, &r, Some(&s));
        assert_eq!(h[0].severity, Severity::High);
        assert!(h.iter().any(|h| h.text.contains("B spilled")), "{h:?}");
        assert!(
            h.iter()
                .any(|h| h.text.contains("no tensor-core instruction")),
            "{h:?}"
        );
        // The same kernels as an activation: the vector-width rules apply instead.
        let a = hints(Family::Activation, DType::BF16, &r, Some(&s));
        assert!(a.iter().all(|h| !h.text.contains("tensor")), "{a:?}");
    }

    #[test]
    fn without_sass_it_says_so() {
        let h = hints(Family::Softmax, DType::F32, &[], None);
        assert_eq!(h.len(), 1);
        assert!(h[0].text.contains("no SASS"));
    }
}
