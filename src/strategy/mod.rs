//! Strategies as data: which template a kernel instance comes from and the values of its
//! parameters (tile shape, stages, cluster, schedule, vector width, ...), with the validity
//! rules checked before anything is compiled (shared-memory budget, divisibility,
//! alignment, what the template supports). `cutesmith strategies W` lists the space.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::spec::{Activation, DType, Family, Layout, Workload};

/// Shared memory one block may use on Hopper (227 KiB).
pub const SMEM_BUDGET: i64 = 227 * 1024;

/// One kernel instance: a template and its parameters (passed as `-D NAME=VALUE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Strategy {
    /// The template's file stem in `cutlass-templates/`.
    pub template: String,
    /// Parameter values; absent parameters take the template's defaults.
    pub params: BTreeMap<String, i64>,
    /// Why this instance is worth trying, in a sentence.
    pub rationale: String,
}

impl Strategy {
    /// The `-D` definitions that instantiate it.
    pub fn defines(&self) -> Vec<String> {
        self.params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    }

    /// A short label: `template K=V K=V`.
    pub fn label(&self) -> String {
        let mut s = self.template.clone();
        for (k, v) in &self.params {
            s.push_str(&format!(" {}={v}", k.trim_start_matches("CS_")));
        }
        s
    }

    /// The template source file.
    pub fn source_path(&self) -> PathBuf {
        crate::toolchain::abi_include_dir()
            .parent()
            .map(|p| p.join(format!("{}.cu", self.template)))
            .unwrap_or_default()
    }

    fn get(&self, name: &str, default: i64) -> i64 {
        self.params.get(name).copied().unwrap_or(default)
    }
}

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

/// The candidate space for a workload, most promising first, each with its validity.
pub fn space(w: &Workload) -> Vec<(Strategy, Result<(), String>)> {
    let mut out = Vec::new();
    let fp16 = if w.dtype() == DType::F16 {
        vec![("CS_GEMM_FP16", 1)]
    } else {
        vec![]
    };
    let with = |base: &[(&str, i64)], extra: &[(&'static str, i64)]| -> Vec<(String, i64)> {
        base.iter()
            .chain(extra.iter())
            .map(|(k, v)| (k.to_string(), *v))
            .collect()
    };
    let mk = |template: &str, params: Vec<(String, i64)>, why: &str| Strategy {
        template: template.into(),
        params: params.into_iter().collect(),
        rationale: why.into(),
    };
    match w.family() {
        Family::Gemm if w.dtype() == DType::F32 => {
            for (p, why) in [
                (
                    &[
                        ("CS_TILE_M", 128),
                        ("CS_TILE_N", 128),
                        ("CS_TILE_K", 32),
                        ("CS_STAGES", 3),
                    ][..],
                    "3xTF32 on tensor cores (fp32-accurate), 128x128x32, warps 64x32, 3 stages",
                ),
                (
                    &[
                        ("CS_TILE_M", 128),
                        ("CS_TILE_N", 64),
                        ("CS_TILE_K", 32),
                        ("CS_STAGES", 4),
                    ][..],
                    "3xTF32, 128x64x32, 4 stages: 4 warps, several CTAs per SM",
                ),
                (
                    &[
                        ("CS_TILE_M", 256),
                        ("CS_TILE_N", 64),
                        ("CS_TILE_K", 32),
                        ("CS_STAGES", 3),
                    ][..],
                    "3xTF32, 256x64x32: taller tiles",
                ),
            ] {
                out.push(mk("gemm_f32_3xtf32", with(p, &[]), why));
            }
        }
        Family::Gemm | Family::GemmBiasAct => {
            let fused: Vec<(&'static str, i64)> = if w.family() == Family::GemmBiasAct {
                vec![
                    ("CS_FUSED_BIAS_ACT", 1),
                    ("CS_ACT", w.params().activation.abi_value() as i64),
                ]
            } else {
                vec![]
            };
            let align1 = if w.headline().n % 8 != 0 && fused.is_empty() {
                vec![("CS_EPI_ALIGN1", 1)]
            } else {
                vec![]
            };
            let mut extra = fp16.clone();
            extra.extend(fused.iter().copied());
            extra.extend(align1.iter().copied());
            let skinny = w.headline().m <= 64 || w.headline().n <= 64;
            let cutlass = [
                (&[("CS_TILE_M", 128), ("CS_TILE_N", 256), ("CS_CLUSTER_M", 2)][..], "cooperative 128x256x64, cluster 2x1: the large-tile path that beats cuBLAS at 4096^3"),
                (&[("CS_TILE_M", 128), ("CS_TILE_N", 128), ("CS_CLUSTER_M", 2)][..], "cooperative 128x128x64, cluster 2x1: more tiles for mid-size problems"),
                (&[("CS_TILE_M", 128), ("CS_TILE_N", 128), ("CS_CLUSTER_M", 1), ("CS_SCHEDULE", 1)][..], "ping-pong 128x128x64: overlaps one warpgroup's epilogue with the other's MMAs"),
                (&[("CS_TILE_M", 64), ("CS_TILE_N", 128), ("CS_CLUSTER_M", 1), ("CS_SCHEDULE", 1)][..], "ping-pong 64x128: small tiles for skinny or small problems"),
                (&[("CS_TILE_M", 128), ("CS_TILE_N", 256), ("CS_CLUSTER_M", 1), ("CS_CLUSTER_N", 2)][..], "cooperative 128x256x64, cluster 1x2: B tiles multicast instead of A"),
                (&[("CS_TILE_M", 256), ("CS_TILE_N", 128), ("CS_CLUSTER_M", 2)][..], "cooperative 256x128x64, cluster 2x1: the transposed large tile"),
                (&[("CS_TILE_M", 128), ("CS_TILE_N", 256), ("CS_CLUSTER_M", 2), ("CS_RASTER", 2), ("CS_SWIZZLE", 4)][..], "cooperative 128x256, cluster 2x1, tiles rastered along N with swizzle 4: L2 reuse of A"),
                (&[("CS_TILE_M", 128), ("CS_TILE_N", 256), ("CS_CLUSTER_M", 2), ("CS_RASTER", 1), ("CS_SWIZZLE", 2)][..], "cooperative 128x256, cluster 2x1, rastered along M with swizzle 2: L2 reuse of B"),
            ];
            if skinny && w.family() == Family::Gemm {
                for (p, why) in [
                    (
                        &[("CS_SPLIT_K", 4), ("CS_BLOCK_N", 64)][..],
                        "split-K x4 over 64-column blocks, the last CTA of a column block sums the splits (no second kernel), B loads with the L2 256-byte prefetch hint",
                    ),
                    (
                        &[("CS_SPLIT_K", 4), ("CS_BLOCK_N", 64), ("CS_FUSED_REDUCE", 0), ("CS_PDL", 1)][..],
                        "split-K x4 with a separate reduce kernel chained by programmatic dependent launch",
                    ),
                    (
                        &[("CS_SPLIT_K", 8), ("CS_BLOCK_N", 32)][..],
                        "split-K x8 over 32-column blocks: more CTAs, more bytes in flight",
                    ),
                    (
                        &[("CS_SPLIT_K", 2), ("CS_BLOCK_N", 64)][..],
                        "split-K x2: fewer partial sums to reduce",
                    ),
                ] {
                    out.push(mk("gemm_skinny_splitk", with(p, &fp16), why));
                }
            }
            let order: Vec<usize> = if skinny {
                vec![3, 2, 1, 0, 4, 5, 6, 7]
            } else {
                vec![0, 4, 2, 5, 6, 7, 1, 3]
            };
            for i in order {
                let (p, why) = cutlass[i];
                out.push(mk("gemm_sm90_cutlass3_ws", with(p, &extra), why));
            }
            for (p, why) in [
                (
                    &[("CS_TILE_M", 128), ("CS_TILE_N", 128), ("CS_STAGES", 4)][..],
                    "raw CuTe TMA + WGMMA, 128x128x64, 4 stages",
                ),
                (
                    &[("CS_TILE_M", 128), ("CS_TILE_N", 256), ("CS_STAGES", 3)][..],
                    "raw CuTe TMA + WGMMA, 128x256x64, 3 stages",
                ),
            ] {
                out.push(mk("gemm_sm90_tma_wgmma", with(p, &fp16), why));
            }
        }
        Family::Activation => {
            for (v, b, why) in [
                (
                    4,
                    4,
                    "4 x 16 B in flight per thread, 4 blocks of 256 per SM",
                ),
                (8, 4, "8 x 16 B in flight per thread: more bytes in flight"),
                (
                    2,
                    8,
                    "2 x 16 B per thread, 8 blocks per SM: more threads, fewer registers",
                ),
            ] {
                out.push(mk(
                    "elementwise_activation",
                    vec![
                        ("CS_VECS_PER_THREAD".into(), v),
                        ("CS_BLOCKS_PER_SM".into(), b),
                    ],
                    why,
                ));
            }
        }
        Family::Softmax => {
            for (t, c, why) in [
                (
                    1024,
                    1,
                    "a row per CTA of 1024 threads, the row cached in shared memory when it fits",
                ),
                (
                    512,
                    1,
                    "a row per CTA of 512 threads, row cached in shared memory when it fits",
                ),
                (
                    1024,
                    0,
                    "a row per CTA, second pass re-reads the row from L2",
                ),
            ] {
                out.push(mk(
                    "softmax_rows",
                    vec![("CS_THREADS".into(), t), ("CS_CACHE_ROW_IN_SMEM".into(), c)],
                    why,
                ));
            }
        }
    }
    out.into_iter()
        .map(|s| {
            let v = check(&s, w).and_then(|()| {
                if s.source_path().is_file() {
                    Ok(())
                } else {
                    Err(format!(
                        "template file {} not found",
                        s.source_path().display()
                    ))
                }
            });
            (s, v)
        })
        .collect()
}

/// The valid candidates, in order.
pub fn candidates(w: &Workload) -> Vec<Strategy> {
    space(w)
        .into_iter()
        .filter(|(_, v)| v.is_ok())
        .map(|(s, _)| s)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strategy(template: &str, params: &[(&str, i64)], rationale: &str) -> Strategy {
        Strategy {
            template: template.to_string(),
            params: params.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            rationale: rationale.to_string(),
        }
    }

    fn wl(name: &str) -> Workload {
        Workload::find(concat!(env!("CARGO_MANIFEST_DIR"), "/workloads"), name).unwrap()
    }

    #[test]
    fn defines_and_labels() {
        let s = strategy(
            "gemm_sm90_tma_wgmma",
            &[("CS_TILE_M", 128), ("CS_STAGES", 3)],
            "x",
        );
        assert_eq!(s.defines(), vec!["CS_STAGES=3", "CS_TILE_M=128"]);
        assert_eq!(s.label(), "gemm_sm90_tma_wgmma STAGES=3 TILE_M=128");
    }

    #[test]
    fn shared_memory_budget_is_enforced() {
        let w = wl("gemm_bf16_4096");
        let ok = strategy(
            "gemm_sm90_tma_wgmma",
            &[("CS_TILE_M", 128), ("CS_TILE_N", 128), ("CS_STAGES", 4)],
            "",
        );
        assert!(check(&ok, &w).is_ok());
        let big = strategy(
            "gemm_sm90_tma_wgmma",
            &[("CS_TILE_M", 256), ("CS_TILE_N", 256), ("CS_STAGES", 4)],
            "",
        );
        let e = check(&big, &w).unwrap_err();
        assert!(e.contains("shared memory"), "{e}");
    }

    #[test]
    fn odd_n_needs_the_align1_epilogue() {
        let w = wl("gemm_bf16_odd");
        let plain = strategy(
            "gemm_sm90_cutlass3_ws",
            &[("CS_TILE_M", 128), ("CS_TILE_N", 256)],
            "",
        );
        assert!(check(&plain, &w).unwrap_err().contains("EPI_ALIGN1"));
        let a1 = strategy(
            "gemm_sm90_cutlass3_ws",
            &[("CS_TILE_M", 128), ("CS_TILE_N", 256), ("CS_EPI_ALIGN1", 1)],
            "",
        );
        assert!(check(&a1, &w).is_ok());
    }

    #[test]
    fn families_and_dtypes_are_matched() {
        let relu = wl("act_relu_bf16");
        let gemm = strategy("gemm_sm90_tma_wgmma", &[], "");
        assert!(check(&gemm, &relu).is_err());
        let f32 = wl("gemm_f32_4096");
        assert!(check(&gemm, &f32).unwrap_err().contains("bf16 or f16"));
        let fused = wl("gemm_bias_gelu_bf16");
        let unfused = strategy("gemm_sm90_cutlass3_ws", &[], "");
        assert!(check(&unfused, &fused).is_err());
    }

    #[test]
    fn every_workload_has_a_space_and_gemms_put_cutlass_first() {
        let w = wl("gemm_bf16_4096");
        let space = space(&w);
        assert!(space.len() >= 5);
        assert_eq!(space[0].0.template, "gemm_sm90_cutlass3_ws");
        let f16 = wl("gemm_f16_4096");
        assert!(space_of(&f16)
            .iter()
            .all(|s| s.params.get("CS_GEMM_FP16") == Some(&1)));
    }

    fn space_of(w: &Workload) -> Vec<Strategy> {
        space(w).into_iter().map(|(s, _)| s).collect()
    }
}
