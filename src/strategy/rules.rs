//! The validity rules: whether a strategy can run a workload, and if not, why, checked
//! before anything is compiled (family, dtype, layout, shared-memory budget,
//! divisibility, alignment).

use super::{Strategy, SMEM_BUDGET};
use crate::spec::{Activation, DType, Family, Layout, Workload};

/// Whether `s` can run `w`, and if not, why (checked before compiling).
pub fn check(s: &Strategy, w: &Workload) -> Result<(), String> {
    let fam = w.family();
    let dt = w.dtype();
    let lay = w.layouts();
    let gemm_tn = || -> Result<(), String> {
        if !(lay.a == Layout::Row && lay.b == Layout::Col && lay.c == Layout::Row) {
            return Err(format!(
                "the template takes TN operands only, not {}",
                lay.blas_name()
            ));
        }
        if !matches!(dt, DType::BF16 | DType::F16) {
            return Err(format!("the template takes bf16 or f16, not {}", dt.name()));
        }
        // Shapes TMA cannot take (K or leading dimensions not multiples of 8) run on the
        // templates' predicated fallback (cutesmith_fallback_gemm.cuh).
        Ok(())
    };
    match s.template.as_str() {
        "gemm_sm90_tma_wgmma" => {
            if fam != Family::Gemm {
                return Err("plain GEMM only (no fused epilogue)".into());
            }
            gemm_tn()?;
            let (m, n, k) = (
                s.get("CS_TILE_M", 128),
                s.get("CS_TILE_N", 128),
                s.get("CS_TILE_K", 64),
            );
            let (stages, wg) = (s.get("CS_STAGES", 4), s.get("CS_WARPGROUPS", 2));
            if m % (64 * wg) != 0 {
                return Err(format!(
                    "TILE_M {m} is not a multiple of 64 x {wg} warpgroups"
                ));
            }
            if n % 8 != 0 || n > 256 {
                return Err(format!(
                    "TILE_N {n}: WGMMA N must be a multiple of 8 up to 256"
                ));
            }
            if (k * 2) % 128 != 0 {
                return Err(format!("TILE_K {k}: must span whole 128-byte swizzle rows"));
            }
            let smem = (m + n) * k * 2 * stages + 1024;
            if smem > SMEM_BUDGET {
                return Err(format!("{stages} stages of {m}x{k} + {n}x{k} need {smem} B of shared memory (> {SMEM_BUDGET})"));
            }
            if (m / (64 * wg)) * n / 2 > 256 {
                return Err("accumulators would exceed the register file per thread".into());
            }
            Ok(())
        }
        "gemm_sm90_cutlass3_ws" => {
            gemm_tn()?;
            let fused = s.get("CS_FUSED_BIAS_ACT", 0) == 1;
            match (fam, fused) {
                (Family::Gemm, false) => {}
                (Family::GemmBiasAct, true) => {
                    let want = w.params().activation.abi_value() as i64;
                    if s.get("CS_ACT", 0) != want {
                        return Err(format!(
                            "built for activation {}, workload wants {want}",
                            s.get("CS_ACT", 0)
                        ));
                    }
                    if !matches!(
                        w.params().activation,
                        Activation::Identity
                            | Activation::Relu
                            | Activation::GeluErf
                            | Activation::Silu
                    ) {
                        return Err(format!(
                            "no fused {} epilogue",
                            w.params().activation.name()
                        ));
                    }
                }
                (Family::GemmBiasAct, false) => {
                    return Err("the workload needs the fused bias + activation build".into())
                }
                _ => return Err(format!("not a {} template", fam.name())),
            }
            let (m, n) = (s.get("CS_TILE_M", 128), s.get("CS_TILE_N", 256));
            if s.get("CS_SCHEDULE", 0) == 0 && m < 128 {
                return Err("the cooperative schedule needs TILE_M >= 128".into());
            }
            if ![64, 128, 256].contains(&m) || ![64, 128, 256].contains(&n) {
                return Err("tile sides must be 64, 128 or 256".into());
            }
            if fused && s.get("CS_EPI_ALIGN1", 0) == 1 {
                return Err("the alignment-1 epilogue cannot fuse bias + activation".into());
            }
            // Other shapes with N not a multiple of 8 run on the template's fallback; the
            // headline shape must get the fast path.
            if w.headline().n % 8 != 0 && s.get("CS_EPI_ALIGN1", 0) == 0 {
                return Err("the headline shape has N not a multiple of 8: needs the alignment-1 epilogue (EPI_ALIGN1=1)".into());
            }
            Ok(())
        }
        "gemm_f32_3xtf32" => {
            if fam != Family::Gemm || dt != DType::F32 {
                return Err("f32 GEMM only".into());
            }
            if !(lay.a == Layout::Row && lay.b == Layout::Col && lay.c == Layout::Row) {
                return Err(format!(
                    "the template takes TN operands only, not {}",
                    lay.blas_name()
                ));
            }
            let (m, n, k, stages) = (
                s.get("CS_TILE_M", 128),
                s.get("CS_TILE_N", 128),
                s.get("CS_TILE_K", 32),
                s.get("CS_STAGES", 3),
            );
            // 3xTF32 keeps A and B tiles in fp32 shared memory.
            let smem = (m + n) * k * 4 * stages;
            if smem > SMEM_BUDGET {
                return Err(format!(
                    "{stages} stages of {m}x{k} + {n}x{k} f32 need {smem} B of shared memory"
                ));
            }
            Ok(())
        }
        "gemm_skinny_splitk" => {
            if fam != Family::Gemm {
                return Err("plain GEMM only (no fused epilogue)".into());
            }
            gemm_tn()?;
            if w.headline().m > 64 {
                return Err(format!(
                    "for M <= 64; the headline has M = {}",
                    w.headline().m
                ));
            }
            let split = s.get("CS_SPLIT_K", 4);
            if w.headline().k % (8 * split as u64) != 0 {
                return Err(format!(
                    "K = {} is not a multiple of 8 x SPLIT_K = {}",
                    w.headline().k,
                    8 * split
                ));
            }
            Ok(())
        }
        "elementwise_activation" => {
            if fam != Family::Activation {
                return Err("activation workloads only".into());
            }
            Ok(())
        }
        "softmax_rows" => {
            if fam != Family::Softmax {
                return Err("softmax workloads only".into());
            }
            Ok(())
        }
        other => Err(format!("unknown template {other}")),
    }
}
