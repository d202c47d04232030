//! The validity rules: whether a strategy can run a workload, and if not, exactly which
//! feature of the workload the template lacks (family, dtype, layout, chain operand,
//! orientation) or which limit a parameter breaks (shared-memory budget, divisibility,
//! alignment), checked before anything is compiled.

use super::{Strategy, SMEM_BUDGET};
use crate::spec::{DType, Family, Layout, Workload};

/// What each template takes, as the template files document it (and check at run time:
/// anything else they return CS_ERR_UNSUPPORTED for, or hand to their predicated
/// fallback when the layouts are the ones it takes too).
struct Takes {
    families: &'static [Family],
    /// Operand dtypes.
    dtypes: &'static [DType],
    /// Output dtypes (`None`: the operand dtype or f32).
    out: Option<&'static [DType]>,
    /// Whether C/D may be column-major.
    cd_col: bool,
    /// Whether A and B may be stored in any order (else only A row, B column: TN).
    any_ab_layout: bool,
    /// Which epilogue chains a GEMM template runs.
    chain: ChainTakes,
    /// Whether an operand may be shared by every batch (batch stride 0).
    shared: bool,
}

/// The epilogue chains a GEMM template runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ChainTakes {
    /// None: D = alpha A B + beta C.
    Identity,
    /// Any chain (`cs_chain_at` in the template's epilogue, or a visitor-tree node in a
    /// library epilogue).
    Any,
}

fn takes(template: &str) -> Option<Takes> {
    const GEMMS: &[Family] = &[Family::Gemm, Family::GemmBiasAct];
    const HALF: &[DType] = &[DType::BF16, DType::F16];
    Some(match template {
        "gemm_sm90_cutlass3_ws" => Takes {
            families: GEMMS,
            dtypes: &[
                DType::BF16,
                DType::F16,
                DType::F32,
                DType::E4M3,
                DType::E5M2,
            ],
            // An fp8 D from fp8 operands (the spec refuses it from any other).
            out: Some(&[
                DType::BF16,
                DType::F16,
                DType::F32,
                DType::E4M3,
                DType::E5M2,
            ]),
            cd_col: true,
            any_ab_layout: true,
            chain: ChainTakes::Any,
            shared: true,
        },
        "gemm_sm90_tma_wgmma" => Takes {
            families: GEMMS,
            dtypes: HALF,
            out: Some(&[DType::BF16, DType::F16, DType::F32]),
            cd_col: true,
            any_ab_layout: true,
            chain: ChainTakes::Any,
            shared: true,
        },
        "gemm_skinny_splitk" => Takes {
            families: GEMMS,
            dtypes: HALF,
            out: Some(&[DType::BF16, DType::F16, DType::F32]),
            cd_col: true,
            any_ab_layout: true,
            chain: ChainTakes::Any,
            shared: true,
        },
        "gemm_f32_3xtf32" => Takes {
            families: GEMMS,
            dtypes: &[DType::F32],
            out: Some(&[DType::F32]),
            cd_col: true,
            any_ab_layout: true,
            chain: ChainTakes::Any,
            shared: true,
        },
        "gemm_softmax" => Takes {
            families: &[Family::GemmSoftmax, Family::GemmReduce, Family::GemmNorm],
            dtypes: &[DType::BF16, DType::F16, DType::F32],
            out: None,
            cd_col: false,
            any_ab_layout: true,
            // The chain runs in the row kernel, on the GEMM's fp32 result.
            chain: ChainTakes::Any,
            shared: false,
        },
        "gemm_glu" => Takes {
            families: &[Family::GemmGlu],
            dtypes: HALF,
            out: None,
            cd_col: false,
            any_ab_layout: true,
            chain: ChainTakes::Identity,
            shared: true,
        },
        "elementwise_activation" => Takes {
            families: &[Family::Activation],
            dtypes: &[DType::BF16, DType::F16, DType::F32],
            out: Some(&[DType::BF16, DType::F16, DType::F32]),
            cd_col: false,
            any_ab_layout: true,
            chain: ChainTakes::Any,
            shared: true,
        },
        "softmax_rows" => Takes {
            families: &[Family::Softmax, Family::LogSoftmax],
            dtypes: &[DType::BF16, DType::F16, DType::F32],
            out: None,
            cd_col: false,
            any_ab_layout: true,
            chain: ChainTakes::Identity,
            shared: true,
        },
        "norm_rows" => Takes {
            families: &[Family::Norm],
            dtypes: &[DType::BF16, DType::F16, DType::F32],
            out: None,
            cd_col: true,
            any_ab_layout: true,
            chain: ChainTakes::Any,
            shared: false,
        },
        "reduce_rows" => Takes {
            families: &[Family::Reduce],
            dtypes: &[DType::BF16, DType::F16, DType::F32],
            out: None,
            cd_col: false,
            any_ab_layout: true,
            chain: ChainTakes::Any,
            shared: false,
        },
        "scan_rows" => Takes {
            families: &[Family::Scan],
            dtypes: &[DType::BF16, DType::F16, DType::F32],
            out: None,
            cd_col: true,
            any_ab_layout: true,
            chain: ChainTakes::Any,
            shared: false,
        },
        _ => return None,
    })
}

/// Whether a GEMM template running `chain` kind can compute `w`'s epilogue chain; if not,
/// what it lacks.
fn chain_ok(t: &Takes, w: &Workload) -> Result<(), String> {
    let chain = w.chain();
    if chain.is_identity() || t.chain == ChainTakes::Any {
        return Ok(());
    }
    Err(format!(
        "epilogue {}: the template computes alpha A B + beta C only",
        chain.describe()
    ))
}

/// Whether `s` can run `w`, and if not, why (checked before compiling).
pub fn check(s: &Strategy, w: &Workload) -> Result<(), String> {
    let t = takes(&s.template).ok_or_else(|| format!("unknown template {}", s.template))?;
    let fam = w.family();
    let (dt, out) = (w.dtype(), w.out_dtype());
    let lay = w.layouts();
    let names = |fs: &[Family]| fs.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ");
    let dnames = |ds: &[DType]| ds.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ");
    if !t.families.contains(&fam) {
        return Err(format!(
            "family {fam}: the template computes {} only",
            names(t.families)
        ));
    }
    if !t.dtypes.contains(&dt) {
        return Err(format!(
            "dtype {dt}: the template takes {} operands",
            dnames(t.dtypes)
        ));
    }
    let outs_ok = match t.out {
        Some(outs) => outs.contains(&out),
        // i64: the indices of an argmax / argmin (the spec's rules allow it nowhere else).
        None => out == dt || out == DType::F32 || out == DType::I64 && fam == Family::Reduce,
    };
    if !outs_ok {
        return Err(format!(
            "out_dtype {out}: the template writes {}",
            t.out.map_or_else(|| format!("{dt} or f32"), dnames)
        ));
    }
    if fam.is_gemm() {
        if lay.c == Layout::Col && !t.cd_col {
            return Err("layout c = col: the template writes row-major D only".into());
        }
        if !(t.any_ab_layout || lay.a == Layout::Row && lay.b == Layout::Col) {
            return Err(format!(
                "layouts a = {}, b = {} ({}): the template takes A row and B col (TN) only",
                lay.a.name(),
                lay.b.name(),
                lay.blas_name()
            ));
        }
        if (lay.shared_a || lay.shared_b) && !t.shared {
            return Err(
                "layout shared: the template takes no batch-shared (stride 0) operand".into(),
            );
        }
        chain_ok(&t, w)?;
        if dt.is_fp8() && !(lay.a == Layout::Row && lay.b == Layout::Col) {
            return Err(format!(
                "fp8 with layouts a = {}, b = {}: fp8 WGMMA needs K-major operands (A row, \
                 B col)",
                lay.a.name(),
                lay.b.name()
            ));
        }
    }
    match s.template.as_str() {
        "gemm_sm90_tma_wgmma" => {
            raw_cute(s)?;
            batch_limit(w)?;
            // WGMMA sums the whole K in its fp32 accumulators, whose additions truncate, and
            // this template never promotes them: measured on the H100 at 2048 x 24 x 131072,
            // 1 of 128 sampled entries outside the fp32 bound (1.33e-6 against 9.54e-7);
            // K = 65536 passed.
            if let Some(sh) = w.shapes().iter().find(|sh| sh.k > 65536) {
                return Err(format!(
                    "shape {sh}: K above 65536 (the template sums all of K in WGMMA's truncating \
                     accumulators, outside the fp32 bound at K = 131072)"
                ));
            }
            Ok(())
        }
        "gemm_sm90_cutlass3_ws" => cutlass3(s, w),
        "gemm_f32_3xtf32" => {
            batch_limit(w)?;
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
            batch_limit(w)?;
            // Every shape is validated: each must be skinny in one orientation.
            if let Some(sh) = w.shapes().iter().find(|sh| sh.m > 64 && sh.n > 64) {
                return Err(format!(
                    "for M <= 64 or N <= 64 (a GEMV-like shape); shape {sh} is neither"
                ));
            }
            // The tensor-core path streams the long side's operand, which must keep K
            // contiguous (B column-major when M <= N, A row-major when N < M); the small
            // one is staged from either order. The rest runs on the split-K GEMV path,
            // which needs a side of at most 16, or the slow predicated fallback.
            let lay = w.layouts();
            let tensor_cores = |sh: &crate::spec::Shape| {
                if sh.n < sh.m {
                    lay.a == Layout::Row
                } else {
                    lay.b == Layout::Col
                }
            };
            let gemv = |sh: &crate::spec::Shape| sh.m.min(sh.n) <= 16 && sh.k >= 4096;
            if let Some(sh) = w.shapes().iter().find(|sh| !(gemv(sh) || tensor_cores(sh))) {
                return Err(format!(
                    "shape {sh} with layouts a = {}, b = {}: the tensor-core path streams the \
                     long side's operand with K contiguous (b = col when M <= N, a = row when \
                     N < M); anything else runs the GEMV path (a side <= 16, K >= 4096) or the \
                     slow predicated fallback",
                    lay.a.name(),
                    lay.b.name()
                ));
            }
            Ok(())
        }
        "softmax_rows" if out != dt => Err(format!(
            "out_dtype {out}: the template writes the input's type ({dt}) only"
        )),
        "gemm_softmax" | "gemm_glu" => {
            if s.template == "gemm_glu" && w.params().beta != 0.0 {
                return Err("params.beta: the template takes beta = 0 only".into());
            }
            let lay = w.layouts();
            if s.template == "gemm_glu" && lay.shared_a {
                return Err(
                    "layout shared = [\"a\"]: the template takes shared weights (b) only".into(),
                );
            }
            if s.template == "gemm_glu" && lay.shared_b && lay.a != Layout::Row {
                return Err("layout shared = [\"b\"]: the template stacks the batches' rows of A and D into one GEMM, which needs a = row".into());
            }
            if s.template == "gemm_glu" {
                tma_rows(s, w)?;
            }
            if s.template == "gemm_softmax" {
                let streamk = s.get("CS_STREAMK", 0);
                if !(0..=1).contains(&streamk) || (streamk == 1 && s.get("CS_SCHEDULE", 0) != 0) {
                    return Err(format!(
                        "CS_STREAMK {streamk}: 0, or 1 with the cooperative schedule (CS_SCHEDULE=0)"
                    ));
                }
            }
            if s.template == "gemm_softmax" && w.dtype() == DType::F32 {
                // The 3xTF32 mainloop: two accumulator sets a thread, two consumer
                // warpgroups of 64 rows.
                let (tm, tn) = (s.get("CS_TILE_M", 128), s.get("CS_TILE_N", 256));
                if s.get("CS_SCHEDULE", 0) != 0 || tm != 128 || tn > 192 {
                    return Err(format!(
                        "f32 with a {tm}x{tn} tile (schedule {}): the 3xTF32 GEMM takes cooperative 128-row tiles of at most 192 columns",
                        s.get("CS_SCHEDULE", 0)
                    ));
                }
                let mode = s.get("CS_F32_MODE", 0);
                if !(0..=1).contains(&mode) {
                    return Err(format!("CS_F32_MODE {mode}: 0 (3xTF32) or 1 (3xF16)"));
                }
                // 3xF16: four fp16 tiles of 32 halves a stage, whatever the layouts (the
                // split pass makes both operands K-major).
                let k = f32_tile_k(s, mode)?;
                let stage = if mode == 1 {
                    f16_split_stage_bytes(tm, tn, k)
                } else {
                    f32_softmax_stage_bytes(w, tn, k)
                };
                if 2 * stage > F32_SOFTMAX_STAGES_BUDGET {
                    return Err(format!(
                        "f32 with a 128x{tn}x{k} tile and layouts a = {}, b = {}: a stage of the GEMM takes {stage} B of shared memory (the split's buffers; an MN-major operand's hi and lo transposed), and two do not fit beside the epilogue; take a narrower tile or less of K a stage (CS_TILE_K)",
                        w.layouts().a.name(),
                        w.layouts().b.name()
                    ));
                }
            }
            if s.template == "gemm_glu" {
                let streamk = s.get("CS_STREAMK", 0);
                if !(0..=1).contains(&streamk) {
                    return Err(format!("CS_STREAMK {streamk}: 0 or 1"));
                }
                if streamk == 1 && s.get("CS_DUAL", 1) != 1 {
                    return Err("CS_STREAMK=1 with CS_DUAL=0: stream-K is the dual kernel's".into());
                }
            }
            if s.template == "gemm_glu" && s.get("CS_DUAL", 1) == 1 {
                if s.get("CS_TILE_N", 128) > 128 {
                    return Err("CS_TILE_N above 128 with CS_DUAL=1: B's and B2's tiles side by side make one WGMMA of 2 x TILE_N columns, at most 256; use 128 or less, or CS_DUAL=0".into());
                }
                if s.get("CS_SCHEDULE", 0) != 0 {
                    return Err(
                        "CS_SCHEDULE=1 with CS_DUAL=1: the dual kernel is cooperative only".into(),
                    );
                }
            }
            Ok(())
        }
        "elementwise_activation" | "softmax_rows" | "norm_rows" | "reduce_rows" | "scan_rows" => {
            Ok(())
        }
        other => Err(format!("unknown template {other}")),
    }
}

/// The K a stage of an fp32 Hopper mainloop takes (`CS_TILE_K`): whole 64-byte swizzle rows,
/// 16 floats on 3xTF32 (mode 0, the default 16) and 32 halves on 3xF16 (mode 1, default 32).
fn f32_tile_k(s: &Strategy, mode: i64) -> Result<i64, String> {
    let (unit, what) = if mode == 1 {
        (
            32,
            "3xF16 TILE_K {k}: must span whole 64-byte swizzle rows (32 halves)",
        )
    } else {
        (
            16,
            "fp32 TILE_K {k}: must span whole 64-byte swizzle rows (16 floats)",
        )
    };
    let k = s.get("CS_TILE_K", unit);
    if k <= 0 || k % unit != 0 {
        return Err(what.replace("{k}", &k.to_string()));
    }
    Ok(k)
}

/// Shared memory the f32 gemm_softmax's stages may take (of the 227 KiB an SM has, the
/// rest for the epilogue's buffers and the pipeline's barriers).
pub(super) const F32_SOFTMAX_STAGES_BUDGET: i64 = 190_000;

/// One stage of the f32 gemm_softmax's 3xTF32 mainloop with a 128 x `tile_n` x `tile_k`
/// tile (the template's TILE_K is 16): the TMA stage and lo buffer of each operand, and a
/// hi buffer for an MN-major one (as the template counts it).
pub(super) fn f32_softmax_stage_bytes(w: &Workload, tile_n: i64, tile_k: i64) -> i64 {
    let lay = w.layouts();
    let a = 2 + i64::from(lay.a != Layout::Row);
    let b = 2 + i64::from(lay.b != Layout::Col);
    (128 * a + tile_n * b) * tile_k * 4
}

/// gemm_glu has no fallback GEMM: TMA reads every row of A and B and writes every row of
/// D in 16-byte steps, so with packed operands the contiguous extent of each (k for A
/// row-major and B column-major, m for A column-major, n for B row-major and D) must be a
/// multiple of 16 bytes. (gemm_softmax computes what TMA cannot read with its edge kernel.)
fn tma_rows(s: &Strategy, w: &Workload) -> Result<(), String> {
    let lay = w.layouts();
    let (ab, d) = (w.dtype().bytes(), w.out_dtype().bytes());
    for sh in w.shapes() {
        let mut need = vec![
            (
                "A",
                if lay.a == Layout::Row {
                    ("k", sh.k)
                } else {
                    ("m", sh.m)
                },
                ab,
            ),
            (
                "B",
                if lay.b == Layout::Row {
                    ("n", sh.n)
                } else {
                    ("k", sh.k)
                },
                ab,
            ),
        ];
        if s.template == "gemm_glu" {
            need.push(("D", ("n", sh.n), d));
        }
        if let Some((op, (dim, v), _)) = need.into_iter().find(|(_, (_, v), b)| v * b % 16 != 0) {
            return Err(format!(
                "shape {sh}: {op}'s contiguous extent {dim} = {v} elements is {} bytes, not a \
                 multiple of 16; the template reads (and writes) rows by TMA and has no fallback",
                v * if op == "D" { d } else { ab }
            ));
        }
    }
    Ok(())
}

/// Every GEMM template hands what its fast path cannot take (a contiguous extent or
/// leading dimension off the TMA alignment, an unaligned pointer) to the predicated
/// fallback GEMM of `cutesmith_fallback_gemm.cuh`, which takes every layout and chain but
/// puts the batch on the grid's z dimension.
fn batch_limit(w: &Workload) -> Result<(), String> {
    match w.shapes().iter().find(|sh| sh.batch > 65535) {
        Some(sh) => Err(format!(
            "shape {sh}: batch above 65535 (the grid's z dimension)"
        )),
        None => Ok(()),
    }
}

fn raw_cute(s: &Strategy) -> Result<(), String> {
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
        return Err(format!(
            "{stages} stages of {m}x{k} + {n}x{k} need {smem} B of shared memory (> {SMEM_BUDGET})"
        ));
    }
    if (m / (64 * wg)) * n / 2 > 256 {
        return Err("accumulators would exceed the register file per thread".into());
    }
    Ok(())
}

/// One stage of the 3xF16 mainloop (cutesmith_sm90_3xf16.cuh) with an m x n tile and k
/// of K: hi and lo of both operands, two bytes an element, and the stage's coordinate
/// slot.
pub(super) fn f16_split_stage_bytes(m: i64, n: i64, k: i64) -> i64 {
    (m + n) * k * 4 + 16
}

/// fp32 operands in the CUTLASS 3 template: the 3xTF32 mainloop (`CS_F32_MODE=0`: the
/// operands split in the kernel, the split buffers doubling each stage) or 3xF16 (`1`:
/// split into scaled fp16 parts before the GEMM, four fp16 tiles a stage). Both run
/// under the cooperative kernel and keep two accumulator sets per consumer thread.
fn f32_mainloop(s: &Strategy, w: &Workload, m: i64, n: i64) -> Result<(), String> {
    if s.get("CS_SCHEDULE", 0) != 0 {
        return Err("fp32 operands (3xTF32 / 3xF16): the cooperative schedule only".into());
    }
    // The fp32 sum and WGMMA's partial: 96 each (128x192) fit beside the rest without
    // spilling, 128 each do not.
    if m * n > 128 * 192 {
        return Err(format!(
            "fp32 tile {m}x{n}: at most 128x192 (two accumulator sets per thread)"
        ));
    }
    let mode = s.get("CS_F32_MODE", 0);
    let stage = match mode {
        0 => {
            let terms = s.get("CS_F32_TERMS", if w.allow_tf32() { 1 } else { 3 });
            if terms == 1 && !w.allow_tf32() {
                return Err("CS_F32_TERMS=1 rounds fp32 operands to TF32: a precision downgrade for a workload without allow_tf32".into());
            }
            let k = f32_tile_k(s, 0)?;
            let lay = w.layouts();
            let extra = i64::from(terms == 3);
            // An MN-major operand is copied K-major first (CS_F32_KMAJOR_COPY, the
            // default), else split into K-major hi and lo buffers.
            let copy = s.get("CS_F32_KMAJOR_COPY", 1) == 1;
            let hi_a = i64::from(!copy && lay.a == Layout::Col);
            let hi_b = i64::from(!copy && lay.b == Layout::Row);
            m * k * 4 * (1 + extra + hi_a) + n * k * 4 * (1 + extra + hi_b)
        }
        1 => f16_split_stage_bytes(m, n, f32_tile_k(s, 1)?),
        _ => return Err(format!("CS_F32_MODE {mode}: 0 (3xTF32) or 1 (3xF16)")),
    };
    // Beside the epilogue's staging (about 32 KiB of fp32 subtiles).
    if 2 * stage > SMEM_BUDGET - 32 * 1024 {
        return Err(format!(
            "fp32 tile {m}x{n}: two stages need {} B of shared memory",
            2 * stage
        ));
    }
    Ok(())
}

fn cutlass3(s: &Strategy, w: &Workload) -> Result<(), String> {
    let (m, n) = (s.get("CS_TILE_M", 128), s.get("CS_TILE_N", 256));
    let (dt, out) = (w.dtype(), w.out_dtype());
    if dt == DType::F32 && out != dt {
        return Err(format!(
            "out_dtype {out}: with f32 operands the template writes f32"
        ));
    }
    if dt.is_fp8() {
        // Accumulators per thread: a cooperative tile is split over two warpgroups, a
        // ping-pong tile held by one.
        let per_thread = m * n
            / if s.get("CS_SCHEDULE", 0) == 1 {
                128
            } else {
                256
            };
        if per_thread > 64 && s.get("CS_FP8_FAST_ACCUM", 0) == 0 {
            return Err(format!(
                "fp8 tile {m}x{n}: the accurate fp8 mainloop keeps a second set of accumulators (promoted every few k-blocks); above 64 per thread ({per_thread} here) they spill"
            ));
        }
    }
    if dt == DType::F32 {
        f32_mainloop(s, w, m, n)?;
    }
    // 0 cooperative, 1 ping-pong (persistent), 2 basic (one CTA a tile, not persistent).
    let schedule = s.get("CS_SCHEDULE", 0);
    if !(0..=2).contains(&schedule) {
        return Err(format!(
            "CS_SCHEDULE {schedule}: 0 cooperative, 1 ping-pong or 2 basic"
        ));
    }
    if schedule != 0 && s.get("CS_STREAMK", 0) != 0 {
        return Err("CS_STREAMK needs the cooperative schedule (CS_SCHEDULE=0)".into());
    }
    if s.get("CS_SCHEDULE", 0) == 0 && m < 128 {
        return Err("the cooperative schedule needs TILE_M >= 128".into());
    }
    // TILE_M is WGMMA's 64 rows a warpgroup; TILE_N any multiple of 16 up to 256 for
    // 16-bit operands (the epilogue's subtiles must divide it: 88 fails to compile, 48,
    // 96, 112, 144 and 160 compile and validate), 64, 128 or 256 otherwise, and 192 for
    // fp32 (the widest 3xTF32 tile whose two accumulator sets fit).
    let half = matches!(dt, DType::BF16 | DType::F16);
    if ![64, 128, 256].contains(&m) {
        return Err(format!("TILE_M {m}: must be 64, 128 or 256"));
    }
    let sized_n = half && n % 16 == 0 && (16..=256).contains(&n);
    let f32_n = dt == DType::F32 && n == 192;
    if !(sized_n || f32_n || [64, 128, 256].contains(&n)) {
        return Err(format!(
            "TILE_N {n}: a multiple of 16 from 16 to 256 with bf16 / f16 operands, 192 with f32, else 64, 128 or 256"
        ));
    }
    if s.get("CS_SWAP_AB", 0) != 0 {
        if !half {
            return Err("CS_SWAP_AB: bf16 / f16 operands only".into());
        }
        if s.get("CS_EPI_ALIGN1", 0) == 1 {
            return Err("CS_SWAP_AB needs the TMA epilogue, not CS_EPI_ALIGN1".into());
        }
    }
    if let (true, Some(&stages)) = (half, s.params.get("CS_STAGES")) {
        let k = s.get("CS_TILE_K", 64);
        let need = (m + n) * k * 2 * stages;
        if stages < 2 || need > SMEM_BUDGET - 32 * 1024 {
            return Err(format!(
                "CS_STAGES {stages}: between 2 and what fits beside the epilogue ({need} B of {m}x{k} + {n}x{k} tiles)"
            ));
        }
    }
    let chained = !w.chain().is_identity();
    // A shared operand reaches TMA (which has no stride-0 dimension) as one GEMM with the
    // batches stacked: rows of A and D for a shared B, columns of B and D for a shared A.
    let lay = w.layouts();
    if lay.shared_b && !(lay.a == Layout::Row && lay.c == Layout::Row && !lay.shared_a) {
        return Err("layout shared = [\"b\"]: the template stacks the batches' rows of A and D into one GEMM, which needs a = row and c = row".into());
    }
    if lay.shared_a && !(lay.b == Layout::Col && lay.c == Layout::Col && !lay.shared_b) {
        return Err("layout shared = [\"a\"]: the template stacks the batches' columns of B and D into one GEMM, which needs b = col and c = col".into());
    }
    let align1 = s.get("CS_EPI_ALIGN1", 0) == 1;
    if chained && align1 {
        return Err("the alignment-1 epilogue cannot run an epilogue chain".into());
    }
    // Shapes whose D lines are not whole 16-byte units run on the template's fallback; the
    // headline shape must get the fast path unless a chain rules the alignment-1 epilogue out.
    if let Some(unit) = unaligned_output_lines(w) {
        if !align1 && !chained {
            return Err(format!("the headline's output rows are not a multiple of {unit} elements (16 bytes): needs the alignment-1 epilogue (EPI_ALIGN1=1)"));
        }
    }
    Ok(())
}

/// Whether the headline's D lines (rows of a row-major D, columns of a column-major one)
/// are not whole 16-byte units, which a TMA store needs: `Some(elements a unit)` (8 16-bit
/// elements, 4 fp32 ones) when they are not.
pub(super) fn unaligned_output_lines(w: &Workload) -> Option<u64> {
    let h = w.headline();
    let contiguous = if w.layouts().c == Layout::Row {
        h.n
    } else {
        h.m
    };
    let unit = (16 / w.out_dtype().bytes()).max(1);
    (contiguous % unit != 0).then_some(unit)
}
