//! The candidate space of a workload: the strategies worth trying, most promising first,
//! each with the verdict of the rules.

use super::{check, Strategy};
use crate::spec::{DType, Family, Layout, Workload};

/// Which part of the space a shape's candidates come from: 0 for a small side of at most
/// 32 (split-K streams the long operand first), 1 for 33 to 64 (64-row tiles first), 2 for
/// the rest. What won in one regime says little of another, so the tuning history ranks
/// candidates only with measurements from the same one.
pub fn shape_regime(m: u64, n: u64) -> u8 {
    match m.min(n) {
        0..=32 => 0,
        33..=64 => 1,
        _ => 2,
    }
}

/// `CS_EPI_ALIGN1=1` for the CUTLASS 3 template where the headline's D lines are off 16
/// bytes and no chain needs the visitor tree (the rules' `unaligned_output_lines`).
fn align1_epilogue(w: &Workload) -> Vec<(&'static str, i64)> {
    if super::rules::unaligned_output_lines(w).is_some() && w.chain().is_identity() {
        vec![("CS_EPI_ALIGN1", 1)]
    } else {
        Vec::new()
    }
}

/// The most workspace the 3xF16 candidates' split parts may take (the worker grants at
/// most 4 GiB; the rest is room for the tile scheduler's and the scale vectors).
const F32_SPLIT_WORKSPACE_MAX: u64 = 3 << 30;

/// Whether 3xF16's split parts (4 bytes an element of A and B, rows padded to 8) fit the
/// workspace on every shape of `w`; where they do not, its fp32 GEMMs run 3xTF32, which
/// reads A and B in place.
fn f16_split_fits(w: &Workload) -> bool {
    w.shapes()
        .iter()
        .map(|s| s.batch.max(1) * (s.m + s.n) * s.k.next_multiple_of(8) * 4)
        .max()
        .unwrap_or(0)
        <= F32_SPLIT_WORKSPACE_MAX
}

/// Below this many FLOPs (2 m n k batch of the headline) 3xTF32 leads the fp32 GEMMs and
/// 3xF16 comes second: 3xF16's split pass (a few launches and a pass over A and B) costs
/// more than its faster products save. H100 (bench/fp32-3xf16-h100.md run 9): 3xTF32
/// ahead at 1024^3 (40.74 against 45.54 us) and 256x4096x1024 (41.25 / 51.23), 3xF16 at
/// 2048^3 (158.27 / 170.98) and beyond.
const F32_SPLIT_MIN_FLOPS: f64 = 8e9;

/// The two fp32-accurate mainloops' rates on an H100 at 4096^3 (3xF16 722.94 us, 190
/// TFLOP/s; 3xTF32 1351.78 us, 102 TFLOP/s: bench/fp32-3xf16-h100.md run 15), and the
/// rate a streaming pass moves bytes at: the DRAM rate the tile model uses too.
const F16_SPLIT_FLOPS_PER_S: f64 = 190e12;
const TF32_SPLIT_FLOPS_PER_S: f64 = 102e12;
const PASS_BYTES_PER_S: f64 = super::tuner::DRAM_BYTES_PER_S;

/// K below which 3xTF32 leads however the estimates compare: with one or two k-tiles an
/// output tile, 3xF16's tiles (four fp16 operand tiles a stage and a tile coordinate
/// handed over at each) run far below its rate. H100, KernelBench level 1 problem 9
/// (32768 x 32768 x 32): 3xF16 4586 us, 3xTF32 1739, cuBLAS fp32 2516
/// (bench/kernelbench-h100.md).
const F16_MIN_K: u64 = 256;

/// Estimated seconds of the headline on 3xF16 and on 3xTF32: 3xF16 first splits A and B
/// (each element read in fp32 and written as two fp16 parts: 8 bytes), then each GEMM
/// takes the longer of its products at its rate and its bytes (A and B once, D, the
/// chain's tensors) at the pass rate. With few rows against a large weight the split pass
/// costs more than 3xF16's faster products save (128 x 16384 x 16384 with a chain: 3xF16
/// 1512 us, 3xTF32 921, cuBLAS fp32 1365; bench/kernelbench-h100.md).
pub fn f32_estimates(w: &Workload) -> (f64, f64) {
    let h = w.headline();
    let (m, n, k, b) = (h.m as f64, h.n as f64, h.k as f64, h.batch.max(1) as f64);
    let lay = w.layouts();
    let elements =
        m * k * if lay.shared_a { 1.0 } else { b } + k * n * if lay.shared_b { 1.0 } else { b };
    let flops = 2.0 * m * n * k * b;
    let bytes = w.min_bytes(h) / PASS_BYTES_PER_S;
    let f16 = 8.0 * elements / PASS_BYTES_PER_S + (flops / F16_SPLIT_FLOPS_PER_S).max(bytes);
    let tf32 = (flops / TF32_SPLIT_FLOPS_PER_S).max(bytes);
    (f16, tf32)
}

/// A gemm_softmax / gemm_reduce candidate for a headline with a single row of tiles: no
/// cluster along M, whose second CTA would have no rows (H100, KernelBench level 2's
/// 128 x 32768 x 32768 GEMM + row sum on 3xTF32 stream-K 128 x 192: 7164 us with a 2x1
/// cluster, where the GEMM family's 1x1 ran the same product in 2649;
/// bench/kernelbench-h100.md).
fn one_row_of_tiles(w: &Workload, s: &mut Strategy) {
    let tm = s.get("CS_TILE_M", 128).max(1) as u64;
    if w.headline().m.div_ceil(tm) == 1 && s.get("CS_CLUSTER_M", 1) > 1 {
        s.params.insert("CS_CLUSTER_M".into(), 1);
        s.rationale = format!(
            "{} (no cluster: one row of tiles)",
            s.rationale.replace(", cluster 2x1", "")
        );
    }
}

/// The fp32-accurate Hopper candidates in order: 3xF16's (`f16`, empty where it does not
/// apply) then 3xTF32's where 3xF16 is expected ahead (a large problem, K of at least
/// [`F16_MIN_K`], and [`f32_estimates`] in its favour); otherwise 3xTF32's first,
/// 3xF16's first next, then the rest of each.
fn f32_order(f16: Vec<Strategy>, tf32: Vec<Strategy>, w: &Workload) -> Vec<Strategy> {
    let h = w.headline();
    let flops = 2.0 * h.m as f64 * h.n as f64 * h.k as f64 * h.batch.max(1) as f64;
    let (t16, t32) = f32_estimates(w);
    let f16_first = flops >= F32_SPLIT_MIN_FLOPS && h.k >= F16_MIN_K && t16 < t32;
    if f16.is_empty() || f16_first {
        return f16.into_iter().chain(tf32).collect();
    }
    let (mut f16, mut tf32) = (f16.into_iter(), tf32.into_iter());
    let mut out: Vec<Strategy> = tf32.next().into_iter().chain(f16.next()).collect();
    out.extend(tf32);
    out.extend(f16);
    out
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
    let regime = shape_regime(w.headline().m, w.headline().n);
    let skinny = regime < 2;
    // Above 32 rows on the small side the CUTLASS 3 64-row ping-pong tiles beat the split-K
    // template (measured on the H200, bench/llm-run1.md: M = 64 at 0.31-0.45x cuBLAS with
    // split-K); at 32 and below split-K streams the long operand best.
    let skinny_first = regime == 0;
    let skinny_all = w.shapes().iter().all(|sh| sh.m <= 64 || sh.n <= 64);
    let gemm = matches!(w.family(), Family::Gemm | Family::GemmBiasAct);
    if gemm && skinny && skinny_all && !w.dtype().is_fp8() {
        // First, K slices sized to the headline: about two waves of CTAs on a 132-SM
        // GPU over the long side's 64-column blocks, the headline's K a multiple of
        // 8 x slices (other shapes that are not take the template's fallback), at least
        // 1024 K per slice.
        let h = w.headline();
        let blocks = (if h.m <= 64 { h.n } else { h.m }).div_ceil(64).max(1);
        let mut split = 1i64;
        while split * 2 * blocks as i64 <= 264 && split < 64 {
            split *= 2;
        }
        while split > 1 && (h.k % (8 * split as u64) != 0 || h.k / (split as u64) < 1024) {
            split /= 2;
        }
        // The persistent TMA stream kernel: every SM gets an equal run of (column block,
        // K chunk) units, so it has no wave quantization, but it costs a few microseconds
        // more to start and finish than split-K. It takes a small side <= 32 in either
        // storage order and streams the long side's operand, which must keep K contiguous.
        // Measured on the H100 (bench/stream-h100.md), us against split-K's best:
        //   - first where K is long (2^16 or more): 8 x 512 x 2^20 392 against 432
        //     (cuBLAS 384), 1024 x 8 x 2^20 752 against 839 (cuBLAS 771);
        //   - second where the streamed operand is 128 MiB or more: 16 x 18944 x 3584
        //     (130 MiB) 66.2 against 74.4 (cuBLAS 62.8; with the L2 flushed clean 60.7
        //     against 70.1, cuBLAS 53.4, and the ping-pong 64x64 tile 58.5 leads, below);
        //   - behind on smaller ones, so not offered: 16 x 6144 x 4096 36.7 against 28.9,
        //     16 x 4608 x 3584 29.4 / 22.8, 32 x 11008 x 4096 + bias + SiLU 62.5 / 55.1,
        //     16 x 4096 x 4096 27.0 / 21.6.
        let lay = w.layouts();
        let long_kmajor = if h.m <= h.n {
            lay.b == Layout::Col
        } else {
            lay.a == Layout::Row
        };
        let streamed_bytes = h.m.max(h.n) * h.k * w.dtype().bytes();
        let stream = (h.m.min(h.n) <= 32 && long_kmajor).then(|| {
            mk(
                "gemm_skinny_splitk",
                with(&[("CS_SPLIT_K", 1), ("CS_STREAM", 1)], &fp16),
                "persistent stream kernel: every SM gets an equal run of (column block, 256-wide K chunk) units, TMA boxes into an 8-deep stage ring, split blocks summed in an fp32 workspace by the last arrival",
            )
        });
        let long_k = h.k >= 1 << 16;
        let first_skinny = out.len();
        if let (true, Some(st)) = (long_k, &stream) {
            out.push(st.clone());
        }
        if split != 4 {
            out.push(mk(
                "gemm_skinny_splitk",
                with(&[("CS_SPLIT_K", split), ("CS_BLOCK_N", 64)], &fp16),
                "split-K sized to the shape: about two waves of CTAs over the 64-column blocks, the last CTA of a column block sums the splits",
            ));
        }
        for (p, why) in [
            (
                &[("CS_SPLIT_K", 4), ("CS_BLOCK_N", 64)][..],
                "split-K over 64-column blocks (more K slices for long K), the last CTA of a column block sums the splits (no second kernel), B loads with the L2 256-byte prefetch hint",
            ),
            (
                &[("CS_SPLIT_K", 4), ("CS_BLOCK_N", 64), ("CS_FUSED_REDUCE", 0), ("CS_PDL", 1)][..],
                "split-K with a separate reduce kernel chained by programmatic dependent launch",
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
        if let (false, true, Some(mut st)) = (long_k, streamed_bytes >= 128 << 20, stream) {
            // Narrower column blocks (4 x 16 columns) measured ahead at K = 3584-4096.
            st.params.insert("CS_STREAM_WN".into(), 16);
            out.insert(first_skinny + 1, st);
        }
    }
    match w.family() {
        Family::Gemm | Family::GemmBiasAct if w.dtype() == DType::F32 => {
            // The Hopper 3xTF32 mainloop under CUTLASS 3's cooperative kernel, its tile /
            // cluster / stream-K space ranked by the cost model; then the Ampere-style
            // 3xTF32 template (warp-level MMA, no TMA).
            let h = w.headline();
            let math = if w.allow_tf32() {
                "TF32 WGMMA (the workload allows TF32 rounding)"
            } else {
                "3xTF32 WGMMA (fp32-accurate: hi*hi + lo*hi + hi*lo, split once per stage)"
            };
            // D's lines off 16 bytes (N = 5921, say): the alignment-1 epilogue.
            let align1 = align1_epilogue(w);
            let ranked = super::tuner::ranked(h, DType::F32, DType::F32);
            let mut f16 = Vec::new();
            // 3xF16 first where fp32 accuracy is asked for: the same products from fp16
            // parts (scaled per K-vector, split before the GEMM) run at twice the TF32
            // rate and round each product closer (H100, fp32_4096: 766.56 us against
            // 1229.63 for 3xTF32 in one run; bench/fp32-3xf16-h100.md). A workload that
            // allows TF32 rounding takes plain TF32 first, which is faster still; a
            // problem whose split parts do not fit the workspace runs 3xTF32.
            if !w.allow_tf32() && f16_split_fits(w) {
                // The tile model's estimate is 3xTF32's; say how 3xF16 differs from it.
                let (t16, t32) = f32_estimates(w);
                let note = format!(
                    "; that estimate is 3xTF32's: whole-problem estimate {:.1} us for 3xF16 (split pass included) against {:.1} us for 3xTF32",
                    t16 * 1e6,
                    t32 * 1e6
                );
                for (c, _, why) in &ranked {
                    let mut extra = align1.clone();
                    extra.push(("CS_F32_MODE", 1));
                    f16.push(mk(
                        "gemm_sm90_cutlass3_ws",
                        with(&c.params(), &extra),
                        &format!("3xF16 WGMMA (fp32-accurate: scaled fp16 hi + lo, hi*hi + lo*hi + hi*lo), {why}{note}"),
                    ));
                }
            }
            let tf32: Vec<Strategy> = ranked
                .into_iter()
                .map(|(c, _, why)| {
                    mk(
                        "gemm_sm90_cutlass3_ws",
                        with(&c.params(), &align1),
                        &format!("{math}, {why}"),
                    )
                })
                .collect();
            let hopper = f32_order(f16, tf32, w);
            let mut ampere = Vec::new();
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
                ampere.push(mk("gemm_f32_3xtf32", with(p, &[]), why));
            }
            // A GEMV-like workload (a side of at most 64 everywhere) gets the Ampere-style
            // template first: it hands such shapes to the split-K GEMV of its fallback,
            // where the Hopper kernel would run a handful of output tiles.
            if skinny_all {
                out.extend(ampere);
                out.extend(hopper);
            } else {
                out.extend(hopper);
                out.extend(ampere);
            }
        }
        Family::Gemm | Family::GemmBiasAct => {
            let h = w.headline();
            let align1 = align1_epilogue(w);
            let mut extra = fp16.clone();
            extra.extend(align1.iter().copied());
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
            if w.dtype().is_fp8() {
                // fp8: tiles whose two accumulator sets fit (the accurate mainloop), and the
                // large tiles with fast accumulation (one set; validation judges its error),
                // then the hand-picked tiles (the rules keep those that fit fp8).
                // In the cost model's order for the headline shape (stable: the large tile
                // first where they tie): with few rows the large tile leaves most SMs idle
                // (256 x 4096 x 4096 e5m2 on an H100: 26.14 us for 128x256 in 32 tiles,
                // 17.12 for the 64x128 ping-pong tile).
                let mut fp8: Vec<Strategy> = FP8_TILES
                    .iter()
                    .map(|(p, why)| mk("gemm_sm90_cutlass3_ws", with(p, &extra), why))
                    .collect();
                fp8.sort_by(|a, b| fp8_estimate(a, w).total_cmp(&fp8_estimate(b, w)));
                out.extend(fp8);
                let order = if skinny {
                    [3, 2, 1, 0, 4, 5, 6, 7]
                } else {
                    [0, 4, 2, 5, 6, 7, 1, 3]
                };
                for i in order {
                    let (p, why) = cutlass[i];
                    out.push(mk("gemm_sm90_cutlass3_ws", with(p, &extra), why));
                }
            } else {
                // 16-bit operands: the whole space, ranked by the cost model
                // (super::tuner), then the raster / swizzle variants of the large tile.
                // (With 33-64 rows on the small side the best 64-row ping-pong tile is
                // moved first below, as measured in bench/llm-run1.md.)
                // Swapped tiles have run on a GPU with the nn.Linear layouts only (A row,
                // B column, D row), like the swapped basic tile below.
                let linear = linear_layouts(w);
                let ranked = super::tuner::ranked(h, w.dtype(), w.out_dtype());
                let tuned = ranked
                    .iter()
                    .filter(|(c, _, _)| linear || !c.swap)
                    .map(|(c, _, why)| mk("gemm_sm90_cutlass3_ws", with(&c.params(), &extra), why));
                let variants = [6, 7].into_iter().map(|i| {
                    mk(
                        "gemm_sm90_cutlass3_ws",
                        with(cutlass[i].0, &extra),
                        cutlass[i].1,
                    )
                });
                let mut seen: Vec<String> = Vec::new();
                for st in tuned.chain(variants).collect::<Vec<_>>() {
                    if !seen.contains(&st.label()) {
                        seen.push(st.label());
                        out.push(st);
                    }
                }
            }
            // The raw CuTe template (the model's seed for GEMM sessions).
            for (p, why) in [
                (
                    &[("CS_TILE_M", 128), ("CS_TILE_N", 256), ("CS_STAGES", 4)][..],
                    "raw CuTe TMA + WGMMA, warp-specialized, persistent, TMA-store epilogue, 128x256x64, 4 stages (H100, 4096^3: 187.0-191.1 us, 0.92-0.94x cuBLAS)",
                ),
                (
                    &[("CS_TILE_M", 128), ("CS_TILE_N", 128), ("CS_STAGES", 4)][..],
                    "raw CuTe TMA + WGMMA, warp-specialized, 128x128x64, 4 stages",
                ),
            ] {
                out.push(mk("gemm_sm90_tma_wgmma", with(p, &fp16), why));
            }
        }
        Family::Activation => {
            // A chain that reads vectors or matrices holds more registers a thread (four
            // blocks of 256 an SM, not eight), so each thread carries four 16-byte
            // vectors instead of two to keep as many bytes in flight. Measured on the H100
            // (bench/small-m-h100.md), gelu_tanh * row + col over 4096 x 4096 bf16: 23.2 us
            // against 25.3-25.9 with two, copy 20.8.
            if w.chain().reads_tensors() {
                out.push(mk(
                    "elementwise_activation",
                    vec![
                        ("CS_VECS_PER_THREAD".into(), 4),
                        ("CS_BLOCKS_PER_SM".into(), 0),
                    ],
                    "a block of 256 per 4 x 256 x 16 B, no loop: four loads in flight per thread, for chains whose operand reads cost registers",
                ));
            }
            for (v, b, why) in [
                (
                    2,
                    0,
                    "a block of 256 per 2 x 256 x 16 B, no loop: two loads in flight per thread",
                ),
                (
                    1,
                    0,
                    "a block of 256 per 256 x 16 B, no loop: the shape of a device copy",
                ),
                (
                    4,
                    4,
                    "persistent: 4 blocks of 256 per SM walk the chunks, 4 x 16 B in flight",
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
        Family::GemmGlu => {
            let first = out.len();
            for (p, why) in [
                (
                    &[("CS_DUAL", 1), ("CS_TILE_M", 128), ("CS_TILE_N", 128), ("CS_CLUSTER_M", 2)][..],
                    "one kernel for both products: per k-tile A, B and B2 tiles, two accumulators sharing A, the gate on the registers; 128x128 output tiles, cluster 2x1",
                ),
                (
                    &[("CS_DUAL", 1), ("CS_TILE_M", 128), ("CS_TILE_N", 64), ("CS_CLUSTER_M", 1)][..],
                    "one kernel for both products, 128x64 output tiles: more tiles for smaller problems",
                ),
                (
                    &[("CS_DUAL", 0), ("CS_TILE_M", 128), ("CS_TILE_N", 256), ("CS_CLUSTER_M", 2)][..],
                    "two CUTLASS 3 GEMMs 128x256, cluster 2x1: the first product through an fp32 workspace into the second's epilogue",
                ),
                (
                    &[("CS_DUAL", 1), ("CS_TILE_M", 128), ("CS_TILE_N", 128), ("CS_CLUSTER_M", 2), ("CS_STREAMK", 1)][..],
                    "one kernel for both products, 128x128 output tiles, cluster 2x1, stream-K: the last wave's K loops split over the SMs that would idle, the gate after the partial sums are added",
                ),
            ] {
                out.push(mk("gemm_glu", with(p, &fp16), why));
            }
            // Fewer 128x128 output tiles than SMs: the 128x64 tile first, so that every SM
            // works. On the H100, 512 x 768 x 512 (24 tiles): 9.47 us against 13.63; at
            // 4096 x 14336 x 4096 (3584 tiles) the 128x128 tile leads, 1316 us against 1607.
            let h = w.headline();
            let tiles = h.m.div_ceil(128) * h.n.div_ceil(128) * h.batch.max(1);
            if tiles < super::tuner::SMS {
                out.swap(first, first + 1);
            }
        }
        Family::GemmSoftmax | Family::GemmReduce | Family::GemmNorm if w.dtype() == DType::F32 => {
            // The two widest tiles whose two stages fit (an MN-major operand's split
            // buffers take more shared memory; at the template's 16 floats of K a stage,
            // 128x192 fits twice in every layout).
            let fits: Vec<i64> = [192, 128, 64]
                .into_iter()
                .filter(|&tn| {
                    2 * super::rules::f32_softmax_stage_bytes(w, tn, 16)
                        <= super::rules::F32_SOFTMAX_STAGES_BUDGET
                })
                .take(2)
                .collect();
            // 3xF16 (the fp32 GEMM family's faster mainloop; its stage is the same for
            // every layout) where its split parts fit, and 3xTF32, in f32_order's order.
            let (mut f16, mut tf32) = (Vec::new(), Vec::new());
            let f16_tiles: &[i64] = if f16_split_fits(w) { &[192, 128] } else { &[] };
            for &tn in f16_tiles {
                let p = [
                    ("CS_TILE_M", 128),
                    ("CS_TILE_N", tn),
                    ("CS_CLUSTER_M", 2),
                    ("CS_F32_MODE", 1),
                ];
                let why = format!(
                    "3xF16 GEMM (fp32-accurate: scaled fp16 hi + lo) 128x{tn}, cluster 2x1, then the second stage"
                );
                f16.push(mk("gemm_softmax", with(&p, &fp16), &why));
            }
            for tn in fits {
                let p = [("CS_TILE_M", 128), ("CS_TILE_N", tn), ("CS_CLUSTER_M", 2)];
                let why = format!(
                    "3xTF32 GEMM (fp32-accurate) 128x{tn}, cluster 2x1, then the second stage"
                );
                tf32.push(mk("gemm_softmax", with(&p, &fp16), &why));
            }
            // Fewer 128-row tiles than two waves of SMs (few rows against a long K): each
            // mainloop's first tile on the stream-K scheduler first, so that every SM works;
            // but where that tile leaves between half and all of the SMs a tile, stream-K
            // would cut each K loop into two unequal parts whose tiles finish in a chain
            // (`tuner::STREAMK_CHAIN`): then the narrower tile that fills one wave as it is
            // runs first, and the wide tile's stream-K comes last (H200, 128 x 16384 x 16384
            // f32: 128 x 128 in 675.7-689.9 us, stream-K 128 x 192 in 926.7;
            // `bench/f32-small-m-h200.md`).
            let h = w.headline();
            let tiles_of = |s: &Strategy| {
                let tn = s.params.get("CS_TILE_N").copied().unwrap_or(192).max(1) as u64;
                h.m.div_ceil(128) * h.n.div_ceil(tn) * h.batch.max(1)
            };
            let sms = super::tuner::SMS;
            for list in [&mut f16, &mut tf32] {
                let Some(first) = list.first().cloned() else {
                    continue;
                };
                let tiles = tiles_of(&first);
                if tiles >= 2 * sms {
                    continue;
                }
                // Where stream-K would chain, the narrower one-wave tile leads instead.
                let one_wave = (2 * tiles > sms && tiles < sms)
                    .then(|| list.iter().position(|s| (tiles + 1..=sms).contains(&tiles_of(s))))
                    .flatten();
                let mut sk = first;
                sk.params.insert("CS_STREAMK".into(), 1);
                let why = if one_wave.is_some() {
                    "two unequal parts a tile, measured slower"
                } else {
                    "the K loops split over every SM"
                };
                sk.rationale = format!("{}; stream-K ({tiles} tiles: {why})", sk.rationale);
                match one_wave {
                    Some(i) => {
                        let mut lead = list.remove(i);
                        lead.rationale = format!(
                            "{} ({} tiles: one wave, where the wider tile's {tiles} would leave stream-K two unequal parts a tile)",
                            lead.rationale,
                            tiles_of(&lead)
                        );
                        list.insert(0, lead);
                        list.push(sk);
                    }
                    None => list.insert(0, sk),
                }
            }
            let mut ordered = f32_order(f16, tf32, w);
            ordered.iter_mut().for_each(|s| one_row_of_tiles(w, s));
            out.extend(ordered);
        }
        Family::GemmSoftmax | Family::GemmReduce | Family::GemmNorm => {
            for (p, why) in [
                (
                    &[("CS_TILE_M", 128), ("CS_TILE_N", 256), ("CS_CLUSTER_M", 2)][..],
                    "CUTLASS 3 GEMM 128x256, cluster 2x1, then the second stage",
                ),
                (
                    &[("CS_TILE_M", 128), ("CS_TILE_N", 128), ("CS_CLUSTER_M", 1)][..],
                    "CUTLASS 3 GEMM 128x128, then the second stage: more tiles for smaller problems",
                ),
            ] {
                let mut s = mk("gemm_softmax", with(p, &fp16), why);
                one_row_of_tiles(w, &mut s);
                out.push(s);
            }
        }
        Family::Norm => {
            // The template sizes CTAs itself (CS_THREADS 0): 512 threads where the chain
            // reads tensor operands (128 registers for them), else 1024; then the other.
            let other = if w.chain().reads_tensors() { 1024 } else { 512 };
            for (p, why) in [
                (
                    &[("CS_THREADS", 0)][..],
                    "a row per warp (short rows), per CTA with the row in registers, or split over CTAs (long rows); rows side by side per thread; CTAs of 512 threads where the chain reads operands, else 1024",
                ),
                (
                    &[("CS_THREADS", other)][..],
                    "the same with the other CTA size",
                ),
            ] {
                out.push(mk("norm_rows", with(p, &[]), why));
            }
        }
        Family::Reduce => {
            // Rows side by side measured faster with 512 threads and 16 steps of k in
            // flight (KernelBench's sum over dim 1: 88% of copy against 80%), row-major rows
            // with 256 (bench/reduce-h100.md): that one first.
            let mut cands = [
                (
                    &[("CS_THREADS", 256)][..],
                    "row-major rows: 4-32 lanes a row, 16-byte vectors, 4 in flight a lane; rows side by side: adjacent rows a thread, warps splitting k; rows split over CTAs when too few to fill the GPU",
                ),
                (
                    &[("CS_THREADS", 512), ("CS_ROW_VECS", 8), ("CS_COL_UNROLL", 16)][..],
                    "CTAs of 512, 8 vectors a lane and 16 steps of k a thread in flight: rows side by side's best (row-major rows: 4-32 lanes a row; k split over CTAs when the rows are too few)",
                ),
            ];
            if w.layouts().a == Layout::Col {
                cands.reverse();
            }
            for (p, why) in cands {
                out.push(mk("reduce_rows", with(p, &[]), why));
            }
        }
        Family::Scan if !w.before_chain().is_identity() => {
            // [[before]] ops add their operands' loads (prefetched beside A's vector) and
            // registers: both candidates keep a register budget that leaves the SM two
            // CTAs of 512 threads (or three of 256) of warps to hide the loads' latency.
            for (p, why) in [
                (
                    &[("CS_THREADS", 512), ("CS_AHEAD", 2), ("CS_MIN_BLOCKS", 2), ("CS_COL_UNROLL", 8)][..],
                    "the ops on each element as it is read, their operands' runs prefetched beside A's vector; 2 steps in flight a lane within 64 registers (two CTAs of 512 an SM); rows side by side: 8 positions a warp a tile",
                ),
                (
                    &[("CS_THREADS", 256), ("CS_AHEAD", 3), ("CS_MIN_BLOCKS", 3), ("CS_COL_UNROLL", 16)][..],
                    "3 steps in flight a lane within 85 registers (three CTAs of 256 an SM); rows side by side: 16 positions a warp a tile",
                ),
            ] {
                out.push(mk("scan_rows", with(p, &[]), why));
            }
        }
        Family::Scan => {
            // Measured on the H100 (bench/scan-variants-h100.md): KernelBench's cumsum of
            // 32768 x 32768 f32 at 0.87-0.89 of the copy with two steps in flight a lane
            // (0.79 with four: more registers, fewer warps); rows side by side in bf16 at
            // 0.77 with 8 positions a warp a tile against 0.72 with 16.
            for (p, why) in [
                (
                    &[("CS_THREADS", 512), ("CS_AHEAD", 2), ("CS_COL_UNROLL", 8)][..],
                    "row-major rows: a warp a row, steps of 32 16-byte vectors (a lane scans its vector, the warp by shuffles, the carry compensated), 2 steps in flight a lane; rows side by side: 32 adjacent rows a CTA of 512 threads, 8 consecutive positions a warp a tile; rows split into parts (totals first) when too few to fill the GPU",
                ),
                (
                    &[("CS_THREADS", 512), ("CS_AHEAD", 3), ("CS_MIN_BLOCKS", 2), ("CS_COL_UNROLL", 16)][..],
                    "3 steps of vectors in flight a lane within 64 registers (two CTAs an SM; row-major rows); 16 positions a warp a tile (rows side by side)",
                ),
            ] {
                out.push(mk("scan_rows", with(p, &[]), why));
            }
        }
        // With ops before the softmax (path 4: a warp or a CTA a row, the values after the
        // ops in registers as f32, streamed past 32 a thread): CS_THREADS caps the CTA and
        // its registers (64 a thread at 1024, 128 at 512); path 4 keeps no row in shared
        // memory, whatever CS_CACHE_ROW_IN_SMEM says.
        Family::Softmax | Family::LogSoftmax if !w.chain().is_identity() => {
            for (t, why) in [
                (
                    1024,
                    "the ops on each element as the row is read: a warp a short row, else a CTA of up to 1024 threads, the row's values in registers",
                ),
                (
                    512,
                    "the same with CTAs of up to 512 threads, 128 registers a thread",
                ),
            ] {
                out.push(mk(
                    "softmax_rows",
                    vec![("CS_THREADS".into(), t), ("CS_CACHE_ROW_IN_SMEM".into(), 1)],
                    why,
                ));
            }
        }
        Family::Softmax | Family::LogSoftmax => {
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
    // With a small side of 32 or less, the CUTLASS 3 64-row ping-pong tile the cost model
    // ranks best (its width sized to one wave where that fits, super::tuner::sized) leads
    // where the long side gives at least 96 tiles of 64 columns and K is short enough
    // that split-K has nothing to gain. On the H100, with the L2 flushed clean (us, this
    // tile / the sized split-K / cuBLAS; bench/small-m-h100.md): 32 x 11008 x 4096 + bias
    // + SiLU 44.6 (96 columns; 64: 46.3) / 53.7 / 37.5, 16 x 18944 x 3584 55.7 (144; 64:
    // 58.5) / 70.1 / 53.7, 16 x 14336 x 4096 49.0 (112; 64: 50.1) / - / 44.7. With fewer
    // tiles it ties or loses: 16 x 4096 x 4096 20.9 (32 columns) / 19.7 / 17.5, and 16 x
    // 4096 x 14336 keeps split-K (62.2 against 50.9, cuBLAS 45.7).
    let wide = {
        let h = w.headline();
        skinny_first && h.m.max(h.n).div_ceil(64) >= 96 && h.k < 1 << 16
    };
    // A CUTLASS 3 64-row ping-pong tile.
    let pp64 = |s: &Strategy| {
        s.template == "gemm_sm90_cutlass3_ws"
            && s.get("CS_TILE_M", 128) == 64
            && s.get("CS_SCHEDULE", 0) == 1
    };
    if gemm && skinny_first && wide {
        // The best-ranked 64-row ping-pong tile ahead of the split-K candidates (see
        // `skinny_first`); 33-64 rows take all of them first, below.
        if let Some(i) = out.iter().position(pp64) {
            let s = out.remove(i);
            out.insert(0, s);
        }
    }
    // With 33-64 rows, the 64-row ping-pong tiles first, the fixed 64 x 64 one in a cluster
    // 1 x 2 second, then the rest. On the H100 (bench/llm-h100.md, us):
    // - the split-K template trails the 64-row tiles by 2-3x (its best against the first
    //   tile): 64 x 4096 x 4096 37.3 / 17.6, 64 x 6144 x 4096 51.4 / 23.5, 64 x 14336 x 4096
    //   106.3 / 47.7, 64 x 4096 x 14336 109.4 / 45.7, 64 x 4608 x 3584 62.8 / 18.9; it stays
    //   in the space, behind the first three CUTLASS 3 candidates;
    // - 128-row tiles, half of whose rows are padding, lost by 25-60%: stream-K 128 x 128
    //   59.6 against 45.7 at 64 x 4096 x 14336, 128 x 64 27.6 against 17.6 at 64 x 4096 x
    //   4096, stream-K 128 x 256 60.6 against 47.7 at 64 x 14336 x 4096;
    // - the 64 x 64 tile ran within 1.5% of the wave-sized width the cost model ranks
    //   first, or ahead of it: 64 x 6144 x 4096 23.8 / 23.5, 64 x 4096 x 14336 46.1 / 45.7,
    //   64 x 4608 x 3584 17.1 / 19.1 (bench/variants-2026-11-27-h100.md).
    if gemm && regime == 1 {
        let (split_k, rest): (Vec<Strategy>, Vec<Strategy>) = out
            .drain(..)
            .partition(|s| s.template == "gemm_skinny_splitk");
        let (mut tiles, others): (Vec<Strategy>, Vec<Strategy>) = rest.into_iter().partition(pp64);
        let square = tiles.iter().position(|s| {
            s.get("CS_TILE_N", 0) == 64
                && s.get("CS_CLUSTER_M", 0) == 1
                && s.get("CS_CLUSTER_N", 1) == 2
        });
        if let Some(i) = square.filter(|&i| i > 1) {
            let s = tiles.remove(i);
            tiles.insert(1, s);
        }
        tiles.extend(others);
        let at = tiles.len().min(3);
        tiles.splice(at..at, split_k);
        out = tiles;
    }
    // With at most 32 rows against a long N, the other orientation first: the kernel
    // computes D^T = B^T A^T (CS_SWAP_AB), so the weight rows fill WGMMA's 64-row side and
    // the few tokens its narrow N side (16 or 32 columns), as cuBLAS runs these shapes;
    // one non-persistent CTA a 64-row tile with a short stage ring (CS_SCHEDULE=2), so
    // that two or three CTAs share an SM. On the H100 (bench/small-m-h100.md, us, against
    // the previous first / cuBLAS): 32 x 11008 x 4096 + bias + SiLU 39.0 / 46.2 / 37.4
    // (1.21x the unfused sequence); 16 x 4096 x 4096 17.6 / 19.7 / 17.6.
    // Validated on a GPU with A row-major, B column-major and D row-major (nn.Linear) only;
    // other layouts compile (A and B both row- or both column-major) but keep the earlier
    // order until they have run.
    let h = w.headline();
    let linear = linear_layouts(w);
    if gemm
        && linear
        && h.m <= 32
        && h.n > 64
        && h.k < 1 << 16
        && matches!(w.dtype(), DType::BF16 | DType::F16)
    {
        let (tn, stages) = if h.m <= 16 { (16, 8) } else { (32, 6) };
        out.insert(
            0,
            mk(
                "gemm_sm90_cutlass3_ws",
                with(
                    &[
                        ("CS_SWAP_AB", 1),
                        ("CS_TILE_M", 64),
                        ("CS_TILE_N", tn),
                        ("CS_SCHEDULE", 2),
                        ("CS_CLUSTER_M", 1),
                        ("CS_STAGES", stages),
                    ],
                    &fp16,
                ),
                &format!("D^T = B^T A^T: 64 weight rows a CTA against the {tn}-column token tile, {stages} stages, not persistent (two or three CTAs an SM)"),
            ),
        );
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

/// How well the built-in provider covers a workload: `Ok(n)` valid candidates, or
/// `Err(what is missing)`, naming the feature of the workload no template has (from the
/// most promising template's rule).
pub fn coverage(w: &Workload) -> Result<usize, String> {
    let space = space(w);
    let valid = space.iter().filter(|(_, v)| v.is_ok()).count();
    if valid > 0 {
        return Ok(valid);
    }
    // One reason per template, in the space's order.
    let mut reasons: Vec<String> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (s, v) in space {
        if let Err(why) = v {
            if !seen.contains(&s.template) {
                reasons.push(format!("{}: {why}", s.template));
                seen.push(s.template);
            }
        }
    }
    if reasons.is_empty() {
        Err(format!(
            "no built-in template computes family {}",
            w.family()
        ))
    } else {
        Err(reasons.join("; "))
    }
}

/// The valid candidates, in order.
/// Whether `w` has nn.Linear's layouts (A row-major, B column-major, D row-major): the
/// only ones the swapped orientation has run with on a GPU.
fn linear_layouts(w: &Workload) -> bool {
    let lay = w.layouts();
    lay.a == Layout::Row && lay.b == Layout::Col && lay.c == Layout::Row
}

pub fn candidates(w: &Workload) -> Vec<Strategy> {
    space(w)
        .into_iter()
        .filter(|(_, v)| v.is_ok())
        .map(|(s, _)| s)
        .collect()
}

/// The three fp8 tiles of the CUTLASS 3 template: the large tile with fast accumulation,
/// and two with the accurate mainloop's two accumulator sets.
const FP8_TILES: [(&[(&str, i64)], &str); 3] = [
    (&[("CS_TILE_M", 128), ("CS_TILE_N", 256), ("CS_CLUSTER_M", 2), ("CS_FP8_FAST_ACCUM", 1)], "fp8 cooperative 128x256x128, cluster 2x1, fast accumulation: one accumulator set over all of K, the large tile"),
    (&[("CS_TILE_M", 64), ("CS_TILE_N", 128), ("CS_CLUSTER_M", 2), ("CS_SCHEDULE", 1)], "fp8 ping-pong 64x128x128, cluster 2x1, accurate accumulation: one warpgroup's epilogue under the other's MMAs"),
    (&[("CS_TILE_M", 128), ("CS_TILE_N", 128), ("CS_CLUSTER_M", 1), ("CS_CLUSTER_N", 2)], "fp8 cooperative 128x128x128, cluster 1x2, accurate accumulation: A tiles multicast"),
];

/// The tuner's estimate for an fp8 tile on `w`'s headline shape (fast accumulation does
/// not change the tile's work; infinite where the model does not cover the parameters).
fn fp8_estimate(s: &Strategy, w: &Workload) -> f64 {
    let mut params = s.params.clone();
    params.remove("CS_FP8_FAST_ACCUM");
    super::tuner::Config::from_params(&params).map_or(f64::INFINITY, |c| {
        super::tuner::estimate(&c, w.headline(), w.dtype(), w.out_dtype()).us
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn workloads_dir() -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/workloads"))
    }

    /// The label of the first built-in candidate for the committed workload `name`.
    fn first(name: &str) -> String {
        let w = Workload::find(workloads_dir(), name).unwrap();
        candidates(&w)[0].label()
    }

    #[test]
    fn stream_k_joins_where_large_tiles_leave_sms_idle() {
        use crate::spec::Shape;
        assert_eq!(
            super::super::tuner::wave_efficiency(&Shape::gemm(4096, 4096, 4096), 128, 256, 132),
            512.0 / 528.0
        );
        assert!(
            (super::super::tuner::wave_efficiency(&Shape::gemm(256, 4096, 4096), 128, 256, 132)
                - 32.0 / 132.0)
                .abs()
                < 1e-12
        );
        let labels = |name: &str| -> Vec<String> {
            let w = Workload::find(workloads_dir(), name).unwrap();
            candidates(&w).iter().map(|s| s.label()).collect()
        };
        // 4096^3: every wave nearly full; the 128 x 256 cooperative tile with a cluster of
        // two first (the measured winner), stream-K well behind it.
        let square = labels("gemm_bf16_rc");
        assert_eq!(
            square[0],
            "gemm_sm90_cutlass3_ws CLUSTER_M=2 TILE_M=128 TILE_N=256"
        );
        assert!(
            square.iter().position(|l| l.contains("STREAMK")) > Some(3),
            "{square:?}"
        );
        // The whole space is there (every tile, schedule and cluster that fits).
        assert!(square.len() > 25, "{}", square.len());
        // M = 64: the 64-row ping-pong tile first; M = 16: the swapped orientation, then
        // split-K.
        assert!(labels("llm_llama3_8b_o_m64")[0].contains("SCHEDULE=1 TILE_M=64"));
        let m16 = labels("llm_llama3_8b_o_m16");
        assert_eq!(
            m16[0],
            "gemm_sm90_cutlass3_ws CLUSTER_M=1 SCHEDULE=2 STAGES=8 SWAP_AB=1 TILE_M=64 TILE_N=16"
        );
        assert!(m16[1].starts_with("gemm_skinny_splitk"), "{m16:?}");
        // M = 256 against N = 4096: a quarter of the SMs busy with 128 x 256 tiles; smaller
        // tiles or stream-K first (the cost model's order).
        let small = labels("llm_llama3_8b_o_m256");
        assert!(
            small[0].contains("TILE_N=64") || small[0].contains("STREAMK=1"),
            "{small:?}"
        );
        assert!(
            small.iter().take(4).any(|l| l.contains("STREAMK=1")),
            "{small:?}"
        );
    }

    #[test]
    fn every_shipped_suite_names_existing_workloads_with_candidates() {
        let dir = workloads_dir();
        let mut n = 0;
        for entry in std::fs::read_dir(dir.join("suites")).unwrap().flatten() {
            let stem = entry
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let (_, spec) = crate::spec::suite::load(&dir, &stem).unwrap();
            assert!(!spec.workloads.is_empty(), "{stem}");
            for w in &spec.workloads {
                let wl = Workload::find(&dir, w).unwrap_or_else(|e| panic!("{stem}: {e}"));
                // The coverage suite measures what the built-in templates reach: a
                // workload without a candidate is reported there, with the reason.
                match coverage(&wl) {
                    Ok(n) => assert!(n > 0 && !candidates(&wl).is_empty()),
                    Err(why) => {
                        assert!(stem == "coverage", "{stem}: no candidate for {w}: {why}");
                        assert!(!why.is_empty());
                    }
                }
            }
            n += 1;
        }
        assert!(n >= 4);
    }

    #[test]
    fn the_dual_glu_kernel_takes_narrower_tiles_when_the_wide_ones_leave_sms_idle() {
        // 4096 x 14336 x 4096: 3584 output tiles of 128x128.
        assert_eq!(
            first("gemm_glu_swiglu_bf16"),
            "gemm_glu CLUSTER_M=2 DUAL=1 TILE_M=128 TILE_N=128"
        );
        // 512 x 768 x 512: 24 of them.
        let w = Workload::load(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/workloads/glu_bf16_small.toml"
        ))
        .unwrap();
        assert_eq!(
            candidates(&w)[0].label(),
            "gemm_glu CLUSTER_M=1 DUAL=1 TILE_M=128 TILE_N=64"
        );
    }

    #[test]
    fn strict_fp32_gemms_take_3xf16_first_and_tf32_workloads_plain_tf32() {
        let strict = Workload::find(workloads_dir(), "fp32_4096").unwrap();
        let c = candidates(&strict);
        assert_eq!(c[0].get("CS_F32_MODE", 0), 1, "{}", c[0].label());
        assert!(c[0].rationale.starts_with("3xF16"), "{}", c[0].rationale);
        // The 3xTF32 candidates follow, the same configurations.
        assert!(c
            .iter()
            .any(|s| s.template == "gemm_sm90_cutlass3_ws" && s.get("CS_F32_MODE", 0) == 0));
        // Split parts past the workspace cap: 3xTF32 first (it reads A and B in place).
        let huge = Workload::parse(
            "workloads/fp32_huge.toml",
            "description = \"x\"\nfamily = \"gemm\"\ndtype = \"f32\"\n[[shapes]]\nm = 32768\nn = 32768\nk = 32768\n",
        )
        .unwrap();
        let c = candidates(&huge);
        assert_eq!(c[0].template, "gemm_sm90_cutlass3_ws");
        assert!(
            c.iter().all(|s| s.get("CS_F32_MODE", 0) == 0),
            "{}",
            c[0].label()
        );
        // A small problem: 3xTF32 first, 3xF16 second (the split pass's launches cost
        // more than its products save there).
        let small = Workload::parse(
            "workloads/fp32_small.toml",
            "description = \"x\"\nfamily = \"gemm\"\ndtype = \"f32\"\n[[shapes]]\nm = 1024\nn = 1024\nk = 1024\n",
        )
        .unwrap();
        let c = candidates(&small);
        assert_eq!(c[0].get("CS_F32_MODE", 0), 0, "{}", c[0].label());
        assert_eq!(c[1].get("CS_F32_MODE", 0), 1, "{}", c[1].label());
        // The same cap for GEMM + softmax: split parts past it leave 3xTF32 alone.
        let huge_softmax = Workload::parse(
            "workloads/fp32_huge_softmax.toml",
            "description = \"x\"\nfamily = \"gemm_softmax\"\ndtype = \"f32\"\n[[shapes]]\nm = 32768\nn = 32768\nk = 32768\n",
        )
        .unwrap();
        let c = candidates(&huge_softmax);
        assert!(!c.is_empty());
        assert!(
            c.iter().all(|s| s.get("CS_F32_MODE", 0) == 0),
            "{}",
            c[0].label()
        );
        let tf32 = Workload::find(workloads_dir(), "gemm_tf32_4096").unwrap();
        assert!(candidates(&tf32)
            .iter()
            .all(|s| s.get("CS_F32_MODE", 0) == 0));
    }

    /// Which fp32 mainloop leads follows the estimated time, split pass included: 3xF16
    /// at 4096^3, 3xTF32 where a large weight meets few rows (the split moves more bytes
    /// than its products save) and where K is a k-tile or two; few tiles of a GEMM +
    /// softmax or + reduction take the stream-K scheduler first.
    #[test]
    fn the_fp32_mainloop_order_follows_the_estimates() {
        let gemm = |m: u64, n: u64, k: u64, family: &str| {
            Workload::parse(
                "workloads/x.toml",
                &format!(
                    "description = \"x\"\nfamily = \"{family}\"\ndtype = \"f32\"\n{}[[shapes]]\nm = {m}\nn = {n}\nk = {k}\n",
                    if family == "gemm_reduce" { "[params]\nreduce = \"sum\"\n" } else { "" }
                ),
            )
            .unwrap()
        };
        let square = gemm(4096, 4096, 4096, "gemm");
        let (t16, t32) = f32_estimates(&square);
        assert!(t16 < t32 && (t32 / t16) > 1.5, "{t16} {t32}");
        assert_eq!(candidates(&square)[0].get("CS_F32_MODE", 0), 1);
        // KernelBench level 2's 128 x 16384 x 16384 and level 1's 256 x 256 x 2^19.
        for w in [
            gemm(128, 16384, 16384, "gemm"),
            gemm(256, 256, 524288, "gemm"),
        ] {
            let (t16, t32) = f32_estimates(&w);
            assert!(t32 < t16, "{t16} {t32}");
            let c = candidates(&w);
            assert_eq!(c[0].get("CS_F32_MODE", 0), 0, "{}", c[0].label());
            assert_eq!(c[1].get("CS_F32_MODE", 0), 1, "{}", c[1].label());
        }
        // K of 32: 3xTF32 first whatever the estimate.
        let c = candidates(&gemm(32768, 32768, 32, "gemm"));
        assert_eq!(c[0].get("CS_F32_MODE", 0), 0, "{}", c[0].label());
        // GEMM + reduction over 86 tiles of 128 x 192: stream-K would split each K loop in
        // two unequal parts (measured slower on the H200), so the 128 x 128 tile, 128 tiles
        // in one wave, leads without it; over 171 tiles (128 x 32768 x 32768) stream-K of
        // the wide tile leads; 1024 x 8192 needs neither.
        let c = candidates(&gemm(128, 16384, 16384, "gemm_reduce"));
        assert_eq!(c[0].template, "gemm_softmax");
        assert_eq!(c[0].get("CS_STREAMK", 0), 0, "{}", c[0].label());
        assert_eq!(c[0].get("CS_TILE_N", 0), 128, "{}", c[0].label());
        // The moved tile has no cluster along M (one row of tiles), and the wide tile's
        // stream-K is still offered, last of its mainloop's list.
        assert_eq!(c[0].get("CS_CLUSTER_M", 1), 1, "{}", c[0].label());
        let last_tf32 = c
            .iter()
            .rev()
            .find(|s| s.get("CS_F32_MODE", 0) == 0)
            .unwrap();
        assert_eq!(
            (
                last_tf32.get("CS_STREAMK", 0),
                last_tf32.get("CS_TILE_N", 0)
            ),
            (1, 192),
            "{}",
            last_tf32.label()
        );
        let c = candidates(&gemm(128, 32768, 32768, "gemm_reduce"));
        assert_eq!(c[0].get("CS_STREAMK", 0), 1, "{}", c[0].label());
        assert_eq!(c[0].get("CS_TILE_N", 0), 192, "{}", c[0].label());
        // One row of 128-row tiles: no cluster along M (its second CTA would have no rows).
        assert!(
            c.iter().all(|s| s.get("CS_CLUSTER_M", 1) == 1),
            "{}",
            c[0].label()
        );
        let bf16 = Workload::parse(
            "workloads/x.toml",
            "description = \"x\"\nfamily = \"gemm_softmax\"\ndtype = \"bf16\"\n[[shapes]]\nm = 100\nn = 32000\nk = 4096\n",
        )
        .unwrap();
        assert!(candidates(&bf16)
            .iter()
            .all(|s| s.get("CS_CLUSTER_M", 1) == 1));
        let c = candidates(&gemm(1024, 8192, 8192, "gemm_reduce"));
        assert_eq!(c[0].get("CS_CLUSTER_M", 1), 2, "{}", c[0].label());
        assert_eq!(c[0].get("CS_STREAMK", 0), 0, "{}", c[0].label());
    }

    #[test]
    fn the_3xf16_rules_take_whole_swizzle_rows_and_stages_that_fit() {
        let f32w = Workload::find(workloads_dir(), "fp32_4096").unwrap();
        let st = |p: &[(&str, i64)]| Strategy {
            template: "gemm_sm90_cutlass3_ws".into(),
            params: p.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            rationale: String::new(),
        };
        let f16 = |k: i64, n: i64| {
            st(&[
                ("CS_TILE_M", 128),
                ("CS_TILE_N", n),
                ("CS_CLUSTER_M", 2),
                ("CS_F32_MODE", 1),
                ("CS_TILE_K", k),
            ])
        };
        assert_eq!(check(&f16(32, 192), &f32w), Ok(()));
        assert_eq!(check(&f16(64, 192), &f32w), Ok(()));
        let why = check(&f16(16, 192), &f32w).unwrap_err();
        assert!(why.contains("32 halves"), "{why}");
        // Four 128x192 tiles of 128 halves a stage: two stages do not fit.
        let why = check(&f16(128, 192), &f32w).unwrap_err();
        assert!(why.contains("two stages"), "{why}");
        let why = check(&f16(32, 256), &f32w).unwrap_err();
        assert!(why.contains("at most 128x192"), "{why}");
        let mut bad = f16(32, 192);
        bad.params.insert("CS_F32_MODE".into(), 2);
        assert!(check(&bad, &f32w).unwrap_err().contains("CS_F32_MODE 2"));
    }

    #[test]
    fn the_cutlass3_rules_take_sized_widths_swapped_operands_and_stage_counts() {
        let w = Workload::find(workloads_dir(), "gemm_bf16_decode_bias_silu").unwrap();
        let f32w = Workload::find(workloads_dir(), "gemm_f32_rr").unwrap();
        let st = |p: &[(&str, i64)]| Strategy {
            template: "gemm_sm90_cutlass3_ws".into(),
            params: p.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            rationale: String::new(),
        };
        let pp = |n| {
            st(&[
                ("CS_TILE_M", 64),
                ("CS_TILE_N", n),
                ("CS_SCHEDULE", 1),
                ("CS_CLUSTER_M", 1),
            ])
        };
        for n in [16, 48, 96, 144, 160, 256] {
            assert_eq!(check(&pp(n), &w), Ok(()), "TILE_N {n}");
        }
        for n in [8, 88, 272] {
            let why = check(&pp(n), &w).unwrap_err();
            assert!(why.contains("multiple of 16"), "{n}: {why}");
        }
        // fp32 (3xTF32) keeps the fixed widths, and 192 (two accumulator sets of 96).
        let coop = |n| st(&[("CS_TILE_M", 128), ("CS_TILE_N", n), ("CS_CLUSTER_M", 1)]);
        assert!(check(&coop(96), &f32w).is_err());
        assert_eq!(check(&coop(128), &f32w), Ok(()));
        assert_eq!(check(&coop(192), &f32w), Ok(()));
        let why = check(&coop(256), &f32w).unwrap_err();
        assert!(why.contains("at most 128x192"), "{why}");
        assert!(check(&coop(192), &w).is_ok(), "16-bit: any multiple of 16");
        // The other orientation: 16-bit operands and the TMA epilogue.
        let swap = st(&[
            ("CS_TILE_M", 128),
            ("CS_TILE_N", 32),
            ("CS_CLUSTER_M", 1),
            ("CS_SWAP_AB", 1),
        ]);
        assert_eq!(check(&swap, &w), Ok(()));
        // One parameter changed, and the rules' verdict on it.
        let set = |s: &Strategy, k: &str, v: i64| {
            let mut t = s.clone();
            t.params.insert(k.into(), v);
            check(&t, if k == "CS_TILE_N" { &f32w } else { &w })
        };
        // The swap with fp32 operands; the basic (non-persistent) schedule; no fourth
        // schedule; stream-K only cooperative; stage counts from two to what fits.
        for (base, k, v, refused) in [
            (swap.clone(), "CS_TILE_N", 128, Some("CS_SWAP_AB")),
            (pp(32), "CS_SCHEDULE", 2, None),
            (pp(32), "CS_SCHEDULE", 3, Some("CS_SCHEDULE 3")),
            (pp(64), "CS_STREAMK", 1, Some("CS_STREAMK")),
            (pp(96), "CS_STAGES", 4, None),
            (pp(96), "CS_STAGES", 20, Some("CS_STAGES")),
        ] {
            match (set(&base, k, v), refused) {
                (Ok(()), None) => {}
                (Err(why), Some(w)) if why.contains(w) => {}
                (r, want) => panic!("{k}={v}: {r:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn glu_weights_shared_by_the_batch_need_a_row_major_a() {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/workloads/glu_bf16_shared_small.toml"
        );
        let text = std::fs::read_to_string(fixture).unwrap();
        // A row-major: the batches' rows stack; every GLU candidate is valid.
        let w = Workload::parse(fixture, &text).unwrap();
        let space = space(&w);
        assert!(!space.is_empty());
        assert!(space.iter().all(|(_, v)| v.is_ok()), "{space:?}");
        // A column-major: nothing to stack, the rule says why.
        let col = Workload::parse(fixture, &text.replace("a = \"row\"", "a = \"col\"")).unwrap();
        let why = space_first_error(&col);
        assert!(why.contains("needs a = row"), "{why}");
        // A shared: not taken.
        let a = Workload::parse(
            fixture,
            &text.replace("shared = [\"b\"]", "shared = [\"a\"]"),
        )
        .unwrap();
        let why = space_first_error(&a);
        assert!(why.contains("shared weights (b) only"), "{why}");
    }

    #[test]
    fn glu_operands_need_rows_of_16_bytes_and_softmax_takes_any() {
        // gemm_softmax: rows TMA cannot read (A column-major with m = 100 f16 elements,
        // 200 bytes; B row-major with n = 260, 520 bytes) go to its edge kernel.
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/workloads/gemm_softmax_f16_cr_small.toml"
        );
        let text = std::fs::read_to_string(fixture).unwrap();
        for t in [
            text.clone(),
            text.replace("m = 64", "m = 100"),
            text.replace("n = 264", "n = 260"),
        ] {
            let w = Workload::parse(fixture, &t).unwrap();
            assert!(space(&w).iter().all(|(_, v)| v.is_ok()), "{t}");
        }
        // The GLU template writes D by TMA too: n = 203 of bf16 with K-major operands.
        let glu = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/workloads/glu_bf16_small.toml"
        );
        let text = std::fs::read_to_string(glu).unwrap();
        assert!(space(&Workload::parse(glu, &text).unwrap())
            .iter()
            .all(|(_, v)| v.is_ok()));
        let odd_d = Workload::parse(glu, &text.replace("n = 200", "n = 203")).unwrap();
        let why = space_first_error(&odd_d);
        assert!(
            why.contains("D's contiguous extent n = 203 elements is 406 bytes"),
            "{why}"
        );
    }

    #[test]
    fn f32_gemm_softmax_takes_3xtf32_tiles_whose_two_stages_fit() {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/workloads/gemm_softmax_f32_small.toml"
        );
        let text = std::fs::read_to_string(fixture).unwrap();
        // The 3xTF32 candidates' tiles (3xF16's are 128x192 and 128x128 in every layout:
        // the split pass makes both operands K-major). A problem this small leads with
        // 3xTF32, 3xF16 second.
        let tiles = |w: &Workload| -> Vec<i64> {
            let c = candidates(w);
            assert_eq!(c[0].get("CS_F32_MODE", 0), 0, "{}", c[0].label());
            assert_eq!(c[1].get("CS_F32_MODE", 0), 1, "{}", c[1].label());
            // (A problem this small has few tiles: each mainloop's first tile comes on the
            // stream-K scheduler too, ahead of the rest.)
            let plain = |s: &&Strategy| s.get("CS_STREAMK", 0) == 0;
            let f16: Vec<i64> = c
                .iter()
                .filter(plain)
                .filter(|s| s.get("CS_F32_MODE", 0) == 1)
                .map(|s| s.get("CS_TILE_N", 0))
                .collect();
            assert_eq!(f16, [192, 128], "{}", c[0].label());
            c.iter()
                .filter(plain)
                .filter(|s| s.get("CS_F32_MODE", 0) == 0)
                .map(|s| s.get("CS_TILE_N", 0))
                .collect()
        };
        // K-major operands: 128x192 and 128x128.
        let w = Workload::parse(fixture, &text).unwrap();
        assert_eq!(tiles(&w), [192, 128]);
        assert!(candidates(&w).iter().all(|s| s.template == "gemm_softmax"));
        // B row-major: its split writes hi and lo; at 16 floats of K a stage 128x192 still
        // fits twice (at 32 it did not: such a strategy is refused).
        let rr_fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/workloads/gemm_softmax_f32_rr_small.toml"
        );
        let rr_text = std::fs::read_to_string(rr_fixture).unwrap();
        let rr = Workload::parse(rr_fixture, &rr_text).unwrap();
        assert_eq!(tiles(&rr), [192, 128]);
        let mut wide = candidates(&w)
            .into_iter()
            .find(|s| s.get("CS_F32_MODE", 0) == 0 && s.get("CS_TILE_N", 0) == 192)
            .unwrap();
        assert!(check(&wide, &rr).is_ok());
        wide.params.insert("CS_TILE_K".into(), 32);
        let why = check(&wide, &rr).unwrap_err();
        assert!(why.contains("two do not fit"), "{why}");
        wide.params.insert("CS_TILE_K".into(), 24);
        let why = check(&wide, &w).unwrap_err();
        assert!(why.contains("64-byte swizzle rows"), "{why}");
        // 3xF16 keeps whole rows of 32 halves: 16 (a 3xTF32 row) is refused there.
        let mut f16 = candidates(&w)
            .into_iter()
            .find(|s| s.get("CS_F32_MODE", 0) == 1)
            .unwrap();
        assert!(check(&f16, &w).is_ok());
        f16.params.insert("CS_TILE_K".into(), 16);
        let why = check(&f16, &w).unwrap_err();
        assert!(why.contains("32 halves"), "{why}");
        // Both MN-major: the same two tiles.
        let cr =
            Workload::parse(rr_fixture, &rr_text.replace("a = \"row\"", "a = \"col\"")).unwrap();
        assert_eq!(tiles(&cr), [192, 128]);
    }

    fn space_first_error(w: &Workload) -> String {
        let space = space(w);
        assert!(space.iter().all(|(_, v)| v.is_err()), "{space:?}");
        space[0].1.clone().unwrap_err()
    }

    #[test]
    fn the_stream_kernel_leads_only_long_reductions() {
        let labels = |name: &str| -> Vec<String> {
            let w = Workload::find(workloads_dir(), name).unwrap();
            candidates(&w).iter().map(|s| s.label()).collect()
        };
        // 8 x 512 x 2^20, A row-major: the stream kernel first, split-K after it.
        let gemv = labels("gemv_bf16_m8_k1m");
        assert_eq!(gemv[0], "gemm_skinny_splitk SPLIT_K=1 STREAM=1");
        assert!(
            gemv[1].starts_with("gemm_skinny_splitk BLOCK_N=64"),
            "{gemv:?}"
        );
        // 1024 x 8 x 2^20, A and B row-major: the streamed A keeps K contiguous, the small
        // operand (B) is M-major: offered too.
        assert_eq!(
            labels("gemv_bf16_n8_k1m")[0],
            "gemm_skinny_splitk SPLIT_K=1 STREAM=1"
        );
        // 16 x 18944 x 3584 (a 130 MiB weight): after the swapped orientation, the
        // ping-pong tile sized to one wave (144 columns, 132 tiles) and the sized split-K.
        let big = labels("llm_qwen2_7b_up_m16");
        assert_eq!(
            big[0],
            "gemm_sm90_cutlass3_ws CLUSTER_M=1 SCHEDULE=2 STAGES=8 SWAP_AB=1 TILE_M=64 TILE_N=16"
        );
        assert_eq!(
            big[1],
            "gemm_sm90_cutlass3_ws CLUSTER_M=1 CLUSTER_N=2 SCHEDULE=1 TILE_M=64 TILE_N=144"
        );
        assert!(
            big[2].starts_with("gemm_skinny_splitk BLOCK_N=64"),
            "{big:?}"
        );
        assert_eq!(big[3], "gemm_skinny_splitk SPLIT_K=1 STREAM=1 STREAM_WN=16");
        // 16 x 4096 x 4096 (64 tiles of 64 columns): split-K right after the swapped tile.
        assert!(labels("llm_llama3_8b_o_m16")[1].starts_with("gemm_skinny_splitk"));
        // 32 rows (the decode GEMM + bias + SiLU): the 32-column token tile, 6 stages.
        assert_eq!(
            labels("gemm_bf16_decode_bias_silu")[0],
            "gemm_sm90_cutlass3_ws CLUSTER_M=1 SCHEDULE=2 STAGES=6 SWAP_AB=1 TILE_M=64 TILE_N=32"
        );
        assert!(!labels("llm_llama3_8b_qkv_m16")
            .iter()
            .any(|l| l.contains("STREAM=1")));
        // K = 4096 decode shapes: not offered (it measured behind split-K there).
        assert!(!labels("llm_llama3_8b_o_m16")
            .iter()
            .any(|l| l.contains("STREAM=1")));
        assert!(!labels("gemm_bf16_decode_bias_silu")
            .iter()
            .any(|l| l.contains("STREAM=1")));
    }

    #[test]
    fn fp8_tiles_come_in_the_cost_models_order() {
        // 256 x 4096 x 4096: the large tile would fill 32 of 132 SMs (it ran 26.14 us there
        // on an H100, the 64 x 128 ping-pong tile 17.38).
        assert!(
            !first("gemm_e5m2_m256").contains("TILE_N=256"),
            "{}",
            first("gemm_e5m2_m256")
        );
        // 4096^3: the large tile with fast accumulation leads.
        assert_eq!(
            first("gemm_e4m3_4096"),
            "gemm_sm90_cutlass3_ws CLUSTER_M=2 FP8_FAST_ACCUM=1 TILE_M=128 TILE_N=256"
        );
    }

    #[test]
    fn sixty_four_rows_try_the_64_row_tiles_before_split_k_and_128_row_tiles() {
        let labels = |name: &str| -> Vec<String> {
            let w = Workload::find(workloads_dir(), name).unwrap();
            candidates(&w).iter().map(|s| s.label()).collect()
        };
        for name in [
            "llm_qwen2_7b_qkv_m64",
            "llm_llama3_8b_o_m64",
            "llm_llama3_8b_down_m64",
        ] {
            let l = labels(name);
            // The cost model's sized tile, then the fixed 64 x 64 one in a cluster 1 x 2.
            assert!(l[0].contains("SCHEDULE=1 TILE_M=64"), "{name}: {l:?}");
            assert_eq!(
                l[1],
                "gemm_sm90_cutlass3_ws CLUSTER_M=1 CLUSTER_N=2 SCHEDULE=1 TILE_M=64 TILE_N=64",
                "{name}"
            );
            // Split-K, and the 128-row tiles, come after the first three.
            assert!(
                l[..3]
                    .iter()
                    .all(|s| !s.starts_with("gemm_skinny_splitk") && !s.contains("TILE_M=128")),
                "{name}: {l:?}"
            );
            assert!(
                l.iter().any(|s| s.starts_with("gemm_skinny_splitk")),
                "{name}"
            );
        }
    }
}
