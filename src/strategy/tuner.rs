//! The CUTLASS 3 GEMM space and the cost model that ranks it.
//!
//! [`cutlass3_space`] enumerates the Hopper GEMM template's configurations (CTA tile,
//! cooperative / ping-pong / stream-K schedule, cluster shape), leaving out what cannot
//! work (a cooperative tile under 128 rows, more than 128 fp32 accumulators per consumer
//! thread); [`estimate`] predicts each one's time on the headline shape from what decides
//! it on an H100-class GPU:
//!
//! - **compute**: a tile's MMAs at the SM's peak rate, discounted by how much operand
//!   traffic from shared memory a tile of that shape needs per FLOP, `(TM + TN) / (TM TN)`
//!   (small tiles feed the tensor cores worse), with a small bonus for a cluster of two
//!   (one operand multicast);
//! - **wave quantization**: a persistent grid (of whole clusters) runs the tiles in waves of one tile per SM
//!   (two half-size ones for ping-pong, which alternates two warpgroups), so 32 tiles on
//!   132 SMs cost a whole wave; stream-K splits the K loop of all tiles over all SMs at the
//!   price of a fix-up (10%);
//! - **memory**: the operands and the output at least once from DRAM, and the operand
//!   tiles from L2: A once per column of tiles, B once per row of tiles (halved for the
//!   operand a cluster of two multicasts), which is what makes small tiles lose on
//!   memory-bound shapes; and what the busiest SM streams from DRAM at the rate one SM
//!   reaches with this template's TMA mainloop, which is what makes two tiles on some SMs
//!   lose to one on each where the weights of a small-M GEMM dominate the bytes.
//!
//! Beside the fixed tiles, [`sized`] adds 64-row ping-pong tiles whose width is chosen for
//! the shape: the narrowest multiple of 16 that fits all tiles in one wave of one tile
//! per SM (32 x 11008: 96 columns, 115 tiles); [`sized_wide`] adds 128-row cooperative
//! tiles, for each number of waves up to six the narrowest width (a multiple of 16) that
//! fits them (256 x 6144: 128 x 96, 128 tiles in one wave; 256 x 4608: 128 x 80).
//!
//! The estimate is the larger of the compute and memory times. It ranks; it does not
//! promise: the tuning database (measured times on the same GPU, `src/tuning/`) reorders
//! what it ranked, and the session measures. Calibrated against the winners of the LLM
//! suite on the H200 (`bench/llm-run1.md`) and on the H100: small tiles or stream-K where
//! 128 x 256 tiles leave most SMs idle (M = 256, and M = 1024 against N = 6144), the
//! 128 x 256 cooperative tile where the waves are full (4096^3, 1024 x 4096 x 4096).

use crate::spec::{DType, Shape};

/// SMs of the GPU the model assumes (H100 SXM and H200: 132).
pub const SMS: u64 = 132;
/// Dense 16-bit tensor-core FLOP/s of one SM (989 TFLOP/s over 132 SMs; fp8 twice).
const SM_FLOPS_16BIT: f64 = 989.4e12 / 132.0;
/// DRAM bandwidth reached by a streaming kernel (bytes/s); the whole-problem fp32 estimate
/// (`space::f32_estimates`) moves its split pass's bytes at this rate too.
pub(crate) const DRAM_BYTES_PER_S: f64 = 3.0e12;
/// L2 to SM bandwidth for the operand tiles (bytes/s).
const L2_BYTES_PER_S: f64 = 12.0e12;
/// Operand traffic penalty: efficiency = 1 / (1 + C (TM + TN) / (TM TN)).
const SMEM_PENALTY: f64 = 8.0;
/// The same for fp32 operands (3xTF32): four bytes an element at a quarter of the 16-bit
/// FLOP rate per byte, read three times a k-tile and split through shared memory, so the
/// tile's width weighs far more. Fitted on the H100 at 4096^3: 128x192 tiles ran 1.10x
/// faster per tile than 128x128 (`bench/fp32-tiles-h100.md`).
const SMEM_PENALTY_F32: f64 = 40.0;
/// What the stream-K fix-up (partial tiles written and summed) costs beyond its traffic.
const STREAMK_FIXUP: f64 = 1.10;
/// The same for fp32 (3xTF32): a K loop three times as long hides more of the fix-up
/// (H100, 4096^3: stream-K 128x128 at 1.05x the time of the cooperative one, not 1.10x).
const STREAMK_FIXUP_F32: f64 = 1.05;
/// Stream-K with fewer tiles than SMs but more than half as many (86 tiles of 128 x 192 on
/// 132 SMs): each tile's K loop is cut into two unequal parts on two SMs, and the SM with
/// a tile's last part waits for the partial of the SM before it, which is itself busy
/// with the last part of the tile before: the tiles finish in a chain. The model then
/// takes `w + STREAMK_CHAIN (1 - w)` of one tile's time, w = tiles / SMs (counting a
/// cluster's empty tiles), instead of w. Fitted on the H200 with fp32 (3xTF32) at 128 x
/// 16384 x 16384 and 256 x 8192 x 8192 (86 tiles of 128 x 192): stream-K ran 926.7 and
/// 460.9 us, 1.37x the 128 x 128 tiles' one wave (675.7 and 335.8), where the unchained
/// model had it ahead; 0.7 puts it at 0.94 of the model's 128 x 192 tile time, 926 us
/// (`bench/f32-small-m-h200.md`). It applies to every operand type, measured on fp32 only;
/// no 16-bit first choice of the workloads in `workloads/` changed with it.
const STREAMK_CHAIN: f64 = 0.7;
/// One SM's rate for writing and reading back its partial tiles (bytes/s).
const SM_PARTIAL_BYTES_PER_S: f64 = 100.0e9;
/// What one SM streams from DRAM with the template's persistent TMA mainloop (bytes/s).
/// Measured on the H100 (bench/small-m-h100.md), from the slope over K = 4096-65536: the
/// 64x32 ping-pong tile on 128 SMs 16 GB/s an SM, the sized 64x96 tile on 115 SMs 22;
/// cuBLAS's kernels reach 23-38 there.
const SM_STREAM_BYTES_PER_S: f64 = 20.0e9;

/// How a configuration runs its tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// Two consumer warpgroups share one tile.
    Cooperative,
    /// Each consumer warpgroup owns a tile; their mainloops and epilogues alternate.
    PingPong,
    /// Cooperative tiles whose K loops are split over all SMs.
    StreamK,
}

/// One configuration of the CUTLASS 3 template.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub tile_m: u64,
    pub tile_n: u64,
    pub schedule: Schedule,
    pub cluster_m: u64,
    pub cluster_n: u64,
    /// The kernel computes D^T = B^T A^T (`CS_SWAP_AB`): its M runs along D's columns
    /// (the weights of an nn.Linear), its N along D's rows (the tokens); tile and cluster
    /// are the kernel's.
    pub swap: bool,
}

impl Config {
    /// An unswapped cooperative tile.
    pub fn cooperative(tile_m: u64, tile_n: u64, cluster_m: u64, cluster_n: u64) -> Config {
        Config {
            tile_m,
            tile_n,
            schedule: Schedule::Cooperative,
            cluster_m,
            cluster_n,
            swap: false,
        }
    }

    /// The problem the kernel tiles for `h`: the transposed one when swapped.
    pub fn kernel_shape(&self, h: &Shape) -> Shape {
        if self.swap {
            Shape {
                m: h.n,
                n: h.m,
                ..*h
            }
        } else {
            *h
        }
    }

    /// The template's parameters for it.
    pub fn params(&self) -> Vec<(&'static str, i64)> {
        let mut p = vec![
            ("CS_TILE_M", self.tile_m as i64),
            ("CS_TILE_N", self.tile_n as i64),
            ("CS_CLUSTER_M", self.cluster_m as i64),
        ];
        if self.cluster_n != 1 {
            p.push(("CS_CLUSTER_N", self.cluster_n as i64));
        }
        match self.schedule {
            Schedule::Cooperative => {}
            Schedule::PingPong => p.push(("CS_SCHEDULE", 1)),
            Schedule::StreamK => p.push(("CS_STREAMK", 1)),
        }
        if self.swap {
            p.push(("CS_SWAP_AB", 1));
        }
        if self.extended_mma() {
            p.push(("CS_EXT_MMA", 1));
        }
        p
    }

    /// Whether the tile's width needs CuTe's extended WGMMA shapes to run as one WGMMA
    /// (the 128-row cooperative kinds only: measured on the H100, a 64 x 144 ping-pong
    /// tile ran 58.08 us with them and 55.23 without at 64 x 18944 x 3584, where a
    /// 128 x 144 cooperative one ran 50.18 with them and 100.5 without at 1024 x 4608 x
    /// 3584; `bench/llm-tuning-h100.md`).
    pub fn extended_mma(&self) -> bool {
        self.schedule != Schedule::PingPong && !STANDARD_WGMMA_N.contains(&self.tile_n)
    }

    /// The configuration a CUTLASS 3 strategy's parameters describe, where the cost model
    /// covers it: `None` for parameters it does not model (the non-persistent kernel, a
    /// fixed stage count, raster or swizzle variants, fp8 or fp32 switches), and without an
    /// explicit `CS_CLUSTER_M` (the template's default, 2, is not the model's to guess).
    pub fn from_params(params: &std::collections::BTreeMap<String, i64>) -> Option<Config> {
        let get = |k: &str| params.get(k).copied();
        let known = [
            "CS_TILE_M",
            "CS_TILE_N",
            "CS_CLUSTER_M",
            "CS_CLUSTER_N",
            "CS_SCHEDULE",
            "CS_STREAMK",
            "CS_SWAP_AB",
            "CS_EXT_MMA",
            // Neither changes the tile's work: f16 for bf16, the epilogue's alignment.
            "CS_GEMM_FP16",
            "CS_EPI_ALIGN1",
        ];
        if params.keys().any(|k| !known.contains(&k.as_str())) {
            return None;
        }
        let schedule = match (
            get("CS_SCHEDULE").unwrap_or(0),
            get("CS_STREAMK").unwrap_or(0),
        ) {
            (0, 0) => Schedule::Cooperative,
            (1, 0) => Schedule::PingPong,
            (0, 1) => Schedule::StreamK,
            _ => return None,
        };
        let dim = |k: &str, default: i64| -> Option<u64> {
            u64::try_from(get(k).unwrap_or(default))
                .ok()
                .filter(|v| *v > 0)
        };
        let c = Config {
            tile_m: dim("CS_TILE_M", 0)?,
            tile_n: dim("CS_TILE_N", 0)?,
            schedule,
            cluster_m: dim("CS_CLUSTER_M", 0)?,
            cluster_n: dim("CS_CLUSTER_N", 1)?,
            swap: get("CS_SWAP_AB").unwrap_or(0) != 0,
        };
        // The extended shapes are the configuration's own choice, not a free switch.
        (get("CS_EXT_MMA").unwrap_or(0) != 0 && c.extended_mma()
            || get("CS_EXT_MMA").unwrap_or(0) == 0 && !c.extended_mma())
        .then_some(c)
    }

    fn name(&self) -> String {
        let s = match self.schedule {
            Schedule::Cooperative => "cooperative",
            Schedule::PingPong => "ping-pong",
            Schedule::StreamK => "stream-K",
        };
        format!(
            "{}{s} {}x{}, cluster {}x{}{}",
            if self.swap {
                "swapped (D^T = B^T A^T) "
            } else {
                ""
            },
            self.tile_m,
            self.tile_n,
            self.cluster_m,
            self.cluster_n,
            if self.extended_mma() {
                ", one extended-shape WGMMA per k-step"
            } else {
                ""
            }
        )
    }
}

/// 64-row ping-pong tiles sized to `h` for 16-bit operands with M <= 64: the narrowest
/// width (a multiple of 16, at most 256) that puts every tile in one wave of one tile per
/// SM, with a cluster of two along N (the A tile multicast) and without. Empty where that
/// width is one of the fixed space's or no width fits one wave.
pub fn sized(h: &Shape, ab: DType) -> Vec<Config> {
    // Measured with one row of 64-row tiles (M <= 64, one batch) only.
    if ab == DType::F32 || ab.is_fp8() || h.m > 64 || h.batch > 1 {
        return Vec::new();
    }
    let rows = 1;
    let tn = (rows * h.n).div_ceil(SMS).next_multiple_of(16).max(16);
    if tn > 256 || [64, 128, 256].contains(&tn) || rows * h.n.div_ceil(tn) > SMS {
        return Vec::new();
    }
    [(1, 2), (1, 1)]
        .into_iter()
        .map(|(cm, cn)| Config {
            tile_m: 64,
            tile_n: tn,
            schedule: Schedule::PingPong,
            cluster_m: cm,
            cluster_n: cn,
            swap: false,
        })
        .collect()
}

/// The narrowest and widest widths a wave-sized 128-row cooperative tile may take.
/// CuTe's WGMMA has every multiple of 8 up to 256; CUTLASS's TMA-store epilogue takes
/// only multiples of 16 (72 and 88 fail its tile-shape checks under nvcc 13.0), and the
/// fixed space already has 64, 128 and 256.
const SIZED_WIDE_MIN: u64 = 80;
const SIZED_WIDE_MAX: u64 = 240;

/// The WGMMA widths CuTe has without its extended shapes.
pub const STANDARD_WGMMA_N: [u64; 8] = [8, 16, 32, 64, 96, 128, 192, 256];

/// Below this fraction of busy SM slots a sized width is not offered.
const SIZED_MIN_EFFICIENCY: f64 = 0.85;

/// Waves up to which widths are sized: past six, any width's last wave costs under 17%.
const SIZED_WIDE_MAX_WAVES: u64 = 6;

/// 128-row cooperative tiles of 16-bit operands (more than 64 rows) sized to the shape's
/// waves: for each number of waves w up to [`SIZED_WIDE_MAX_WAVES`], the narrowest width
/// (a multiple of 16 in [`SIZED_WIDE_MIN`]..=[`SIZED_WIDE_MAX`], not one of the fixed
/// widths) whose tiles fit in w waves of one tile per SM, where they keep at least 85% of
/// the SM slots busy; under 128 columns only for one wave. In a cluster of two along M (B
/// multicast) where the rows of tiles pair up, else alone.
///
/// A tile's time is about (its waves) x (its width), so for a given number of waves the
/// narrowest width that fits is the one to try; the cost model then weighs the waves
/// against the wider tile's better operand feed. Examples: 256 x 6144, 96 columns (128
/// tiles in one wave, where 128 x 128 runs 96); 256 x 4608, 80 (116 tiles, where every
/// fixed width leaves a wave 55% busy); 1024 x 6144, 192 (two waves).
///
/// Measured on the H100:
/// - 96 and 192 ran at the fixed tiles' rate per FLOP (`bench/llm-tuning-h100.md`; 256 x
///   6144 x 4096: 128 x 96 25.7 us against 28.2 for the best fixed tile; 1024 x 6144 x
///   4096: 128 x 192 70.2 against 74.3);
/// - the widths outside [`STANDARD_WGMMA_N`] run with the template's `CS_EXT_MMA=1`, one
///   WGMMA a k-step (1024 x 4608 x 3584: 128 x 144 50.18 us against 59.74 for the best
///   fixed tile; without it nine 64x16x16 WGMMAs ran 25-30% slower per tile);
/// - under 128 columns over several waves the narrow tiles ran 19-29% behind a wider sized
///   one (1024 x 6144 x 4096: 96 90.4 us, 192 70.3; 1024 x 4608 x 3584: 96 60.6, 144 50.1;
///   1024 x 3584 x 3584: 112 45.4, 224 38.3; `bench/variants-2026-11-27-h100.md`,
///   `bench/llm-run5-partial-h100.md`), where in one wave they lead (256 x 4608: 80).
pub fn sized_wide(h: &Shape, ab: DType) -> Vec<Config> {
    if !matches!(ab, DType::BF16 | DType::F16) || h.m <= 64 {
        return Vec::new();
    }
    let cluster_m = if h.m.div_ceil(128) % 2 == 0 { 2 } else { 1 };
    let rows = h.m.div_ceil(128) * h.batch.max(1);
    let mut widths: Vec<u64> = Vec::new();
    for waves in 1..=SIZED_WIDE_MAX_WAVES {
        // The fewest columns of tiles the waves take, and the width that gives them.
        let cols = (waves * SMS / rows).max(1);
        let tn = h.n.div_ceil(cols).next_multiple_of(16);
        if tn < SIZED_WIDE_MIN {
            break;
        }
        if tn > SIZED_WIDE_MAX
            || (waves > 1 && tn < 128)
            || [64, 128, 256].contains(&tn)
            || widths.contains(&tn)
            || wave_efficiency(h, 128, tn, SMS) < SIZED_MIN_EFFICIENCY
        {
            continue;
        }
        widths.push(tn);
    }
    widths
        .into_iter()
        .map(|tn| Config {
            tile_m: 128,
            tile_n: tn,
            schedule: Schedule::Cooperative,
            cluster_m,
            cluster_n: 1,
            swap: false,
        })
        .collect()
}

/// What a swapped kernel is estimated to take against an unswapped one of the same tile
/// count. Measured on the H100 (`bench/llm-tuning-h100.md`), 256 x 4096 x 4096: swapped
/// 128 x 64 (the weights on WGMMA's 64-row side, 128 tiles) 19.58 us against 23.30 for the
/// unswapped 128 x 64 in a cluster 1 x 2 (128 tiles), the arrangement cuBLAS picks for
/// these shapes (`bench/small-m-h100.md`).
const SWAP_FACTOR: f64 = 0.85;

/// Swapped cooperative tiles (D^T = B^T A^T) for 16-bit operands with 65-256 rows and one
/// batch, where the other side is the long one: the weights of an nn.Linear on the kernel's
/// M side, 128 or 256 of them a tile, the tokens 64 or 128 a tile, alone or in a cluster
/// of two along the tokens (the weight tile multicast). The cost model ranks them with the
/// rest (estimated on the transposed problem).
pub fn swapped(h: &Shape, ab: DType) -> Vec<Config> {
    if !matches!(ab, DType::BF16 | DType::F16)
        || h.m <= 64
        || h.m > 256
        || h.batch > 1
        || h.n < 4 * h.m
    {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (tm, tn) in [(128, 64), (128, 128), (256, 64)] {
        for cn in [1, 2] {
            if cn == 2 && h.m.div_ceil(tn) % 2 != 0 {
                continue;
            }
            out.push(Config {
                tile_m: tm,
                tile_n: tn,
                schedule: Schedule::Cooperative,
                cluster_m: 1,
                cluster_n: cn,
                swap: true,
            });
        }
    }
    out
}

/// Every configuration worth compiling for operands of type `ab`, in a fixed order: for
/// 16-bit and fp8 operands all three schedules; for fp32 (the 3xTF32 mainloop, which runs
/// under the cooperative kernel only) the cooperative and stream-K ones, with the 128x192
/// tile (the widest whose two accumulator sets fit) in both, stream-K also in a cluster.
pub fn space_for(ab: DType) -> Vec<Config> {
    let mut v = cutlass3_space();
    if ab == DType::F32 {
        // Two accumulator sets per consumer thread (the fp32 sum and WGMMA's partial).
        v.retain(|c| c.schedule != Schedule::PingPong && c.tile_m * c.tile_n <= 128 * 128);
        let wide = |schedule, cluster_m, cluster_n| Config {
            tile_m: 128,
            tile_n: 192,
            schedule,
            cluster_m,
            cluster_n,
            swap: false,
        };
        for (cm, cn) in [(2, 1), (1, 2), (1, 1)] {
            v.push(wide(Schedule::Cooperative, cm, cn));
        }
        for (cm, cn) in [(2, 1), (1, 1)] {
            v.push(wide(Schedule::StreamK, cm, cn));
        }
    }
    v
}

/// Every configuration worth compiling for 16-bit operands, in a fixed order.
pub fn cutlass3_space() -> Vec<Config> {
    let mut out = Vec::new();
    let clusters = [(2, 1), (1, 2), (1, 1)];
    for (tm, tn) in [(128, 256), (256, 128), (128, 128), (128, 64), (256, 64)] {
        for (cm, cn) in clusters {
            out.push(Config::cooperative(tm, tn, cm, cn));
        }
    }
    for (tm, tn) in [(64, 128), (128, 128), (64, 256), (64, 64), (128, 64)] {
        for (cm, cn) in clusters {
            out.push(Config {
                tile_m: tm,
                tile_n: tn,
                schedule: Schedule::PingPong,
                cluster_m: cm,
                cluster_n: cn,
                swap: false,
            });
        }
    }
    for (tm, tn) in [(128, 128), (128, 256)] {
        out.push(Config {
            tile_m: tm,
            tile_n: tn,
            schedule: Schedule::StreamK,
            cluster_m: 1,
            cluster_n: 1,
            swap: false,
        });
    }
    // fp32 accumulators per consumer thread: a cooperative tile over 256 threads, a
    // ping-pong tile over 128; above 128 they spill.
    out.retain(|c| {
        let threads = if c.schedule == Schedule::PingPong {
            128
        } else {
            256
        };
        c.tile_m * c.tile_n / threads <= 128
            && (c.schedule == Schedule::PingPong || c.tile_m >= 128)
    });
    out
}

/// The model's time for `c` on `h`, in microseconds, with its parts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub us: f64,
    pub compute_us: f64,
    pub memory_us: f64,
    /// The operand tiles' time from L2 (part of `memory_us`).
    pub l2_us: f64,
    pub tiles: u64,
    pub waves: u64,
}

/// Predicts `c` on the problem `h` with operands of type `ab` and output `cd`.
pub fn estimate(c: &Config, h: &Shape, ab: DType, cd: DType) -> Estimate {
    if c.swap {
        // The kernel's problem is the transposed one.
        // The factor speeds the tiles' arithmetic, not the bytes: the memory floor stays.
        let e = estimate(&Config { swap: false, ..*c }, &c.kernel_shape(h), ab, cd);
        let compute_us = e.compute_us * SWAP_FACTOR;
        return Estimate {
            us: compute_us.max(e.memory_us),
            compute_us,
            ..e
        };
    }
    let (tm, tn) = (c.tile_m, c.tile_n);
    // The grid covers whole clusters: with one row of tiles, a cluster of two along M
    // runs an empty tile beside every real one.
    let tiles = h.m.div_ceil(tm).next_multiple_of(c.cluster_m)
        * h.n.div_ceil(tn).next_multiple_of(c.cluster_n)
        * h.batch.max(1);
    // fp8 runs at twice the 16-bit rate; fp32 as 3xTF32 at a third of TF32's (half the
    // 16-bit rate).
    let rate = SM_FLOPS_16BIT
        * match ab {
            DType::F32 => 1.0 / 6.0,
            d if d.is_fp8() => 2.0,
            _ => 1.0,
        };
    let (penalty, fixup) = if ab == DType::F32 {
        (SMEM_PENALTY_F32, STREAMK_FIXUP_F32)
    } else {
        (SMEM_PENALTY, STREAMK_FIXUP)
    };
    let feed = 1.0 / (1.0 + penalty * (tm + tn) as f64 / (tm * tn) as f64);
    let multicast = if c.cluster_m * c.cluster_n > 1 {
        1.02
    } else {
        1.0
    };
    let tile_s = 2.0 * (tm * tn * h.k.max(1)) as f64 / (rate * feed * multicast);
    let cluster = c.cluster_m * c.cluster_n;
    let slots = (SMS / cluster) * cluster;
    let (compute_s, waves) = match c.schedule {
        Schedule::Cooperative => {
            let waves = tiles.div_ceil(slots).max(1);
            (waves as f64 * tile_s, waves)
        }
        // Two tiles per SM at a time, each at half the SM's rate.
        Schedule::PingPong => {
            let waves = tiles.div_ceil(2 * slots).max(1);
            (waves as f64 * 2.0 * tile_s, waves)
        }
        // Every SM also writes (and one reads back) a partial fp32 tile per split of a
        // tile: with few tiles (32 of 128 x 256 over 132 SMs, four splits each) that
        // traffic decides (measured on the H100, 256 x 4096 x 4096: 41.7 us against
        // 31.3 for 128 x 128 tiles).
        Schedule::StreamK => {
            let splits = (SMS as f64 / tiles as f64).max(1.0);
            let fixup_s = splits * (tm * tn * 4 * 2) as f64 / SM_PARTIAL_BYTES_PER_S;
            let share = tiles as f64 / SMS as f64;
            let share = if splits > 1.0 && splits < 2.0 {
                share + STREAMK_CHAIN * (1.0 - share)
            } else {
                share
            };
            (
                (share * tile_s).max(tile_s / h.k.max(1) as f64) * fixup + fixup_s,
                1,
            )
        }
    };
    let bytes = (h.m * h.k + h.k * h.n) * h.batch.max(1) * ab.bytes()
        + h.m * h.n * h.batch.max(1) * cd.bytes();
    let (a_bytes, b_bytes) = (
        (h.m * h.k * h.batch.max(1) * ab.bytes()) as f64,
        (h.k * h.n * h.batch.max(1) * ab.bytes()) as f64,
    );
    // Cluster (2, 1) multicasts B tiles across its two CTAs of one column; (1, 2) A tiles.
    let l2_bytes = a_bytes * h.n.div_ceil(tn) as f64 / c.cluster_n as f64
        + b_bytes * h.m.div_ceil(tm) as f64 / c.cluster_m as f64;
    let l2_s = l2_bytes / L2_BYTES_PER_S;
    // The busiest SM's share of the DRAM bytes: each tile reads its A panel (shared with
    // the other column tiles) and its B panel (shared with the other row tiles).
    let (row_tiles, col_tiles) = (h.m.div_ceil(tm).max(1), h.n.div_ceil(tn).max(1));
    let tile_dram = (tm.min(h.m) * h.k) as f64 * ab.bytes() as f64 / col_tiles as f64
        + (tn.min(h.n) * h.k) as f64 * ab.bytes() as f64 / row_tiles as f64;
    let per_sm = match c.schedule {
        Schedule::StreamK => tiles as f64 / SMS as f64,
        _ => tiles.div_ceil(slots).max(1) as f64,
    };
    // Measured (and applied) where the tiles form one row or one column, so that every
    // panel of the long operand is read by one tile only.
    let stream_s = if row_tiles == 1 || col_tiles == 1 {
        per_sm * tile_dram / SM_STREAM_BYTES_PER_S
    } else {
        0.0
    };
    let memory_s = (bytes as f64 / DRAM_BYTES_PER_S).max(l2_s).max(stream_s);
    Estimate {
        us: compute_s.max(memory_s) * 1e6,
        compute_us: compute_s * 1e6,
        memory_us: memory_s * 1e6,
        l2_us: l2_s * 1e6,
        tiles,
        waves,
    }
}

/// The fraction of SM slots doing work over the waves of `tm` x `tn` tiles of the headline
/// shape on `sms` SMs, one tile per SM at a time (1.0: every wave full).
pub fn wave_efficiency(h: &crate::spec::Shape, tm: u64, tn: u64, sms: u64) -> f64 {
    let tiles = h.m.div_ceil(tm) * h.n.div_ceil(tn) * h.batch.max(1);
    let waves = tiles.div_ceil(sms).max(1);
    tiles as f64 / (waves * sms) as f64
}

/// The space ranked by the model for `h`, fastest first; at equal estimates (a
/// memory-bound shape) the one with more headroom (less compute plus L2 time), then the
/// space's order. Each with a rationale naming the estimate.
pub fn ranked(h: &Shape, ab: DType, cd: DType) -> Vec<(Config, Estimate, String)> {
    let mut v: Vec<(Config, Estimate, String)> = space_for(ab)
        .into_iter()
        .chain(sized(h, ab))
        .chain(sized_wide(h, ab))
        .chain(swapped(h, ab))
        .map(|c| {
            let e = estimate(&c, h, ab, cd);
            let why = format!(
                "{} (cost model: {} tiles, {}, est. {:.1} us: compute {:.1}, memory {:.1})",
                c.name(),
                e.tiles,
                if c.schedule == Schedule::StreamK {
                    "the K loops split over all SMs".to_string()
                } else {
                    // Ping-pong runs two tiles per SM at a time.
                    let per_sm = if c.schedule == Schedule::PingPong {
                        2
                    } else {
                        1
                    };
                    // A swapped kernel tiles the transposed problem.
                    let kernel_shape = c.kernel_shape(h);
                    format!(
                        "{} wave{}, {:.0}% of the SM slots busy",
                        e.waves,
                        if e.waves == 1 { "" } else { "s" },
                        100.0 * wave_efficiency(&kernel_shape, c.tile_m, c.tile_n, per_sm * SMS)
                    )
                },
                e.us,
                e.compute_us,
                e.memory_us
            );
            (c, e, why)
        })
        .collect();
    v.sort_by(|a, b| {
        a.1.us
            .total_cmp(&b.1.us)
            .then((a.1.compute_us + a.1.l2_us).total_cmp(&(b.1.compute_us + b.1.l2_us)))
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(m: u64, n: u64, k: u64) -> Config {
        ranked(&Shape::gemm(m, n, k), DType::BF16, DType::BF16)[0].0
    }

    fn rank_of(m: u64, n: u64, k: u64, f: impl Fn(&Config) -> bool) -> usize {
        ranked(&Shape::gemm(m, n, k), DType::BF16, DType::BF16)
            .iter()
            .position(|(c, _, _)| f(c))
            .unwrap()
    }

    #[test]
    fn the_space_keeps_only_what_fits() {
        let s = cutlass3_space();
        assert!(s.len() >= 25, "{}", s.len());
        for c in &s {
            if c.schedule != Schedule::PingPong {
                assert!(c.tile_m >= 128, "{c:?}");
            }
        }
        // 256 x 256 cooperative (256 accumulators a thread) and 128 x 256 ping-pong are out.
        assert!(!s.iter().any(|c| c.tile_m == 256 && c.tile_n == 256));
        assert!(!s
            .iter()
            .any(|c| c.schedule == Schedule::PingPong && c.tile_m * c.tile_n > 128 * 128));
    }

    #[test]
    fn fp32_ranks_the_wide_stream_k_tile_and_the_square_cooperative_one_first() {
        // Measured on the H100 at 4096^3 (bench/fp32-tiles-h100.md): stream-K 128x192 in
        // a cluster of two 1289 us, cooperative 128x128 1357, stream-K 128x128 1420.
        let r = ranked(&Shape::gemm(4096, 4096, 4096), DType::F32, DType::F32);
        let top: Vec<_> = r
            .iter()
            .take(2)
            .map(|(c, _, _)| (c.tile_n, c.schedule))
            .collect();
        assert_eq!(
            top,
            vec![(192, Schedule::StreamK), (128, Schedule::Cooperative)]
        );
        // Two accumulator sets of at most 96 a thread, and no ping-pong.
        assert!(r
            .iter()
            .all(|(c, _, _)| c.tile_m * c.tile_n <= 128 * 192 && c.schedule != Schedule::PingPong));
        // The 16-bit space has no 192-wide tile.
        assert!(space_for(DType::BF16).iter().all(|c| c.tile_n != 192));
    }

    #[test]
    fn stream_k_of_between_half_and_one_tile_an_sm_chains() {
        // Measured on the H200 (bench/f32-small-m-h200.md), fp32: 128 x 16384 x 16384 and
        // 256 x 8192 x 8192 as 86 tiles of 128 x 192 on stream-K 926.7 and 460.9 us,
        // cooperative 128 x 128 tiles (one wave) 675.7-689.9 and 335.8-341.3; at
        // 128 x 32768 x 32768 (171 tiles) stream-K 128 x 192 led, 2496.9 against 2682.7.
        for (m, n, k) in [(128, 16384, 16384), (256, 8192, 8192)] {
            let r = ranked(&Shape::gemm(m, n, k), DType::F32, DType::F32);
            let (c, e, _) = &r[0];
            assert_eq!(
                (c.tile_n, c.schedule),
                (128, Schedule::Cooperative),
                "{m} x {n} x {k}"
            );
            let sk = r
                .iter()
                .find(|(c, _, _)| c.tile_n == 192 && c.schedule == Schedule::StreamK)
                .map(|(_, e, _)| e.us)
                .unwrap();
            // The chain puts stream-K 128 x 192 about 1.3x behind, as measured (1.37x).
            assert!(sk > 1.25 * e.us, "{m} x {n} x {k}: {sk} against {}", e.us);
        }
        let r = ranked(&Shape::gemm(128, 32768, 32768), DType::F32, DType::F32);
        assert_eq!((r[0].0.tile_n, r[0].0.schedule), (192, Schedule::StreamK));
        // Stream-K whose tiles each split into two or more parts is not chained: at
        // 128 x 4096 x 4096, 32 tiles of 128 x 128 (about four parts each) take about a
        // quarter of the one wave of cooperative tiles that leaves 100 SMs idle (measured:
        // stream-K 128 x 128 64.22 us led there). Chained, it would be 0.77 of it.
        let c = Config {
            schedule: Schedule::StreamK,
            ..Config::cooperative(128, 128, 1, 1)
        };
        let h = Shape::gemm(128, 4096, 4096);
        let sk = estimate(&c, &h, DType::F32, DType::F32);
        let coop = estimate(
            &Config::cooperative(128, 128, 1, 1),
            &h,
            DType::F32,
            DType::F32,
        );
        assert!(
            sk.compute_us < 0.4 * coop.compute_us,
            "{} {}",
            sk.compute_us,
            coop.compute_us
        );
    }

    #[test]
    fn full_waves_favour_the_large_tile_and_empty_ones_stream_k() {
        // 4096^3: 512 tiles of 128 x 256 in four waves of 132: the large cooperative tile
        // with a cluster of two first (the measured winner).
        let c = first(4096, 4096, 4096);
        assert_eq!(
            (c.tile_m * c.tile_n, c.schedule),
            (128 * 256, Schedule::Cooperative)
        );
        assert_eq!(c.cluster_m * c.cluster_n, 2);
        // 1024 x 4096 x 4096: 128 tiles, one full wave: still the large tile, ahead of
        // stream-K (measured: 128 x 256 won).
        let big = rank_of(1024, 4096, 4096, |c| {
            c.tile_m * c.tile_n == 128 * 256 && c.schedule == Schedule::Cooperative
        });
        let sk = rank_of(1024, 4096, 4096, |c| c.schedule == Schedule::StreamK);
        assert!(big < sk, "{big} {sk}");
        // M = 256 against N = 4096: 32 large tiles for 132 SMs. Measured on the H100:
        // cooperative 128 x 64 (cluster 1x2) 29.6 us, stream-K 128 x 128 31.3, stream-K
        // 128 x 256 41.7: the small cooperative tile first, stream-K 128 x 256 (four
        // splits a tile) behind stream-K 128 x 128.
        let c = first(256, 4096, 4096);
        assert_eq!(
            (c.tile_m, c.tile_n, c.schedule),
            (128, 64, Schedule::Cooperative)
        );
        let sk128 = rank_of(256, 4096, 4096, |c| {
            c.schedule == Schedule::StreamK && c.tile_n == 128
        });
        let sk256 = rank_of(256, 4096, 4096, |c| {
            c.schedule == Schedule::StreamK && c.tile_n == 256
        });
        assert!(sk128 < sk256, "{sk128} {sk256}");
        // 1024 x 6144 x 4096: 192 tiles, a second wave of 60: stream-K ahead of the
        // large cooperative tile (measured on the H200: stream-K 128 x 128 won among the
        // four tried); the model's first, cooperative 128 x 128 with a cluster of two,
        // measured 79.0 us on the H100 against 81.2 for stream-K 128 x 128.
        let big = rank_of(1024, 6144, 4096, |c| {
            c.tile_m * c.tile_n == 128 * 256 && c.schedule == Schedule::Cooperative
        });
        let sk = rank_of(1024, 6144, 4096, |c| c.schedule == Schedule::StreamK);
        assert!(sk < big, "{sk} {big}");
        // Ahead of both now: 128 x 192 (sized_wide), 256 tiles in two full waves.
        let c = first(1024, 6144, 4096);
        assert_eq!(
            (c.tile_m, c.tile_n, c.schedule),
            (128, 192, Schedule::Cooperative)
        );
        let coop128 = rank_of(1024, 6144, 4096, |c| {
            c.tile_m * c.tile_n == 128 * 128 && c.schedule == Schedule::Cooperative
        });
        assert!(coop128 < big, "{coop128} {big}");
    }

    #[test]
    fn wider_m_gets_a_cooperative_width_that_fills_its_waves() {
        let w = |m, n| {
            sized_wide(&Shape::gemm(m, n, 4096), DType::BF16)
                .iter()
                .map(|c| (c.tile_n, c.cluster_m))
                .collect::<Vec<_>>()
        };
        // 256 x 6144: 128 tiles of 96 columns in one wave (97%); 80 columns would take two.
        assert_eq!(w(256, 6144), vec![(96, 2)]);
        // 256 x 4608: 116 tiles of 80 columns (88%), where 64, 128 and 256 leave their last
        // wave 55% busy or less (144, 72, 36 tiles).
        assert_eq!(w(256, 4608), vec![(80, 2)]);
        // 1024 x 6144: 192 for two waves (96 and 80 would take four and five: under 128
        // columns only one wave is sized); 1024 x 4608: 144 (two); 1024 x 14336: 224 (four
        // waves), 176, 160 (five, six).
        assert_eq!(w(1024, 6144), vec![(192, 2)]);
        assert_eq!(w(1024, 4608), vec![(144, 2)]);
        assert_eq!(w(1024, 14336), vec![(224, 2), (176, 2), (160, 2)]);
        // Only the widths outside CuTe's standard WGMMA shapes ask for the extended ones.
        let ext: Vec<bool> = sized_wide(&Shape::gemm(1024, 14336, 4096), DType::BF16)
            .iter()
            .chain(&sized_wide(&Shape::gemm(256, 6144, 4096), DType::BF16))
            .map(|c| c.params().contains(&("CS_EXT_MMA", 1)))
            .collect();
        assert_eq!(ext, vec![true, true, true, false]);
        // An odd number of tile rows: no cluster along M.
        assert_eq!(w(384, 4224), vec![(96, 1)]);
        // 1024 x 3584: 224 (128 tiles in one wave).
        assert_eq!(w(1024, 3584), vec![(224, 2)]);
        // Many waves: every width's last wave costs little; none is sized.
        assert!(w(4096, 14336).is_empty());
        // 64 rows and fp32 are not sized here; no width between 80 and 240 fits 256 x 3584.
        assert!(w(256, 3584).is_empty());
        assert!(w(64, 6144).is_empty());
        assert!(sized_wide(&Shape::gemm(1024, 6144, 4096), DType::F32).is_empty());
    }

    #[test]
    fn small_m_gets_a_tile_width_sized_to_one_wave() {
        let w = |m, n| {
            sized(&Shape::gemm(m, n, 4096), DType::BF16)
                .first()
                .map(|c| c.tile_n)
        };
        // 11008 / 132 = 83.4 columns an SM: 96 (115 tiles); 18944: 144 (132 tiles).
        assert_eq!(w(32, 11008), Some(96));
        assert_eq!(w(16, 18944), Some(144));
        assert_eq!(w(64, 6144), Some(48));
        assert_eq!(w(16, 14336), Some(112));
        assert_eq!(w(16, 4096), Some(32));
        // 64 columns are in the fixed space already; no width fits 16 x 65536 in one wave;
        // more than 64 rows: not measured, not offered.
        assert_eq!(w(16, 8192), None);
        assert_eq!(w(16, 65536), None);
        assert_eq!(w(128, 4096), None);
        assert_eq!(w(512, 512), None);
        assert!(sized(&Shape::gemm(32, 11008, 4096), DType::F32).is_empty());
        // Measured on the H100 (bench/small-m-h100.md, us, with cuBLAS beside): 32 x 11008
        // x 4096 + bias + SiLU 44.6 against 46.2 for 64 x 64 (cluster 1x2); 64 x 6144 x
        // 4096 23.4 against 30.1 for 64 x 64 (cluster 2x1). The model puts the sized tile
        // ahead of every other 64-row ping-pong tile there.
        for (m, n) in [(32, 11008), (64, 6144), (16, 18944)] {
            let first_pp64 = ranked(&Shape::gemm(m, n, 4096), DType::BF16, DType::BF16)
                .into_iter()
                .find(|(c, _, _)| c.schedule == Schedule::PingPong && c.tile_m == 64)
                .map(|(c, _, _)| c.tile_n);
            assert_eq!(first_pp64, w(m, n), "{m} x {n}");
        }
    }

    #[test]
    fn estimates_are_bounded_by_memory_and_compute() {
        let h = Shape::gemm(4096, 4096, 4096);
        let e = estimate(&cutlass3_space()[0], &h, DType::BF16, DType::BF16);
        // 137 GFLOP at 989 TFLOP/s is 139 us; four waves of 128 x 256 tiles a little more.
        assert!(e.compute_us > 139.0 && e.compute_us < 200.0, "{e:?}");
        assert!(e.us >= e.memory_us && e.us >= e.compute_us);
        // fp8 halves the compute time of the same tile.
        let f = estimate(&cutlass3_space()[0], &h, DType::E4M3, DType::BF16);
        assert!((f.compute_us * 2.0 - e.compute_us).abs() < 1e-6);
    }

    #[test]
    fn parameters_map_back_to_the_configuration_they_came_from() {
        let h = Shape::gemm(256, 14336, 4096);
        for c in space_for(DType::BF16)
            .into_iter()
            .chain(space_for(DType::F32))
            .chain(swapped(&h, DType::BF16))
            .chain(sized_wide(&Shape::gemm(1024, 14336, 4096), DType::BF16))
        {
            let params: std::collections::BTreeMap<String, i64> = c
                .params()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            assert_eq!(Config::from_params(&params), Some(c));
        }
        let with = |extra: &[(&str, i64)]| {
            let mut p: std::collections::BTreeMap<String, i64> = [
                ("CS_TILE_M".to_string(), 128),
                ("CS_TILE_N".to_string(), 128),
                ("CS_CLUSTER_M".to_string(), 1),
            ]
            .into();
            p.extend(extra.iter().map(|(k, v)| (k.to_string(), *v)));
            Config::from_params(&p)
        };
        assert!(with(&[("CS_GEMM_FP16", 1)]).is_some());
        let swapped = with(&[("CS_SWAP_AB", 1)]).unwrap();
        assert!(swapped.swap && swapped.schedule == Schedule::Cooperative);
        // The extended WGMMA shapes belong to the width: asked for at 128, not modelled.
        assert_eq!(with(&[("CS_EXT_MMA", 1)]), None);
        // What the model does not cover has no configuration.
        assert_eq!(with(&[("CS_STAGES", 8)]), None);
        assert_eq!(with(&[("CS_SCHEDULE", 2)]), None);
        assert_eq!(with(&[("CS_SCHEDULE", 1), ("CS_STREAMK", 1)]), None);
        assert_eq!(with(&[("CS_CLUSTER_M", 0)]), None);
    }

    #[test]
    fn a_half_empty_cluster_is_far_from_the_best_estimate() {
        // 256 x 4608 x 3584 on an H100 (bench/llm-run2-h100.md): 256 x 64 in a cluster of two
        // along M ran 70.5 us, the model's picks 25-31; the planner's FAR_FROM_MODEL (1.5)
        // must rule it out from its estimate.
        let h = Shape::gemm(256, 4608, 3584);
        let r = ranked(&h, DType::BF16, DType::BF16);
        let best = r[0].1.us;
        let est = |tm, tn, cm, cn| {
            estimate(
                &Config::cooperative(tm, tn, cm, cn),
                &h,
                DType::BF16,
                DType::BF16,
            )
            .us / best
        };
        assert!(est(256, 64, 2, 1) > 2.0, "{}", est(256, 64, 2, 1));
        assert!(est(128, 64, 1, 2) < 1.5, "{}", est(128, 64, 1, 2));
    }
}
