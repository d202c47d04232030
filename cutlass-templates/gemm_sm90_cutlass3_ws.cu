// cutesmith template: Hopper (sm_90a) GEMM on CUTLASS 3 collective builders.
//
//   D[l] (m x n, row-major) = alpha * A[l] (m x k, row-major) * B[l] (k x n, col-major)
//                           + beta * C[l] (m x n, row-major)          for l in [0, batch)
//
//   with -DCS_FUSED_BIAS_ACT=1 (family CS_FAMILY_GEMM_BIAS_ACT):
//   D[l] = act(alpha * A[l] * B[l] + beta * C[l] + bias),  bias[n]: one value per column
//                                                         of D, broadcast along M and L
//   with an epilogue chain (CS_WL_CHAIN, from the workload block):
//   D[l] = chain(alpha * A[l] * B[l] + beta * C[l]), the chain reading its tensor operands
//          (row / column vectors, matrices) at each element: a visitor-tree node below
//
// Storage orders: A row- or column-major, B row- or column-major (CS_WL_LAYOUT_A /
// CS_WL_LAYOUT_B from the workload block; default A row, B column: "TN", both K-major).
// TMA and WGMMA take K-major and MN-major 16-bit operands alike, so every combination
// runs the same mainloop. C/D row-major, or column-major (CS_WL_LAYOUT_CD = 1): then the
// kernel computes the row-major D^T = B^T A^T. CS_SWAP_AB=1 takes the other orientation:
// the kernel's M runs along D's columns (a row-major D is computed as D^T = B^T A^T and
// stored column-major, a column-major D directly). With few rows (a decode step's 16-64
// tokens against a weight matrix) that puts the weight rows on WGMMA's 64-row side and
// the tokens on its narrow N side, so no MMA row is padding and the shared-memory ring
// holds weight tiles instead of zero-filled token rows. bf16
// inputs by default (-DCS_GEMM_FP16 for fp16), fp32 accumulation, C, D and bias in the
// workload's output type (bf16, f16 or f32; without CS_WL_DTYPE_CD the input type); fp8
// (e4m3 / e5m2, A row and B column only) writes bf16, f16, f32, or an fp8 D (scale_d times
// the result, saturated; the chain epilogue, never the fused bias + activation).
// Batches: any batch strides; a shared B (stride 0) with A and D row-major, or a shared A
// with B and D column-major, runs as one GEMM with the batches stacked (TMA has no
// stride-0 dimension); other shared operands take the fallback.
//
// Strategy: CUTLASS 3's Sm90 collective builders (CuTe inside). The mainloop is the
// warp-specialized TMA + WGMMA collective: one producer warpgroup issues TMA loads (with
// multicast across the cluster) into a StageCountAutoCarveout-deep shared memory ring,
// consumer warpgroups issue WGMMA from shared memory. The kernel is persistent: a grid of
// about sm_count CTAs walks the output tiles in a (swizzled, rastered) order given by the
// tile scheduler. Three consumer schedules:
//   CS_SCHEDULE=0  cooperative: both consumer warpgroups split one TILE_M x TILE_N tile
//   CS_SCHEDULE=1  ping-pong:   each consumer warpgroup owns a whole tile; their mainloop
//                               and epilogue alternate, hiding the epilogue
//   CS_SCHEDULE=2  basic:       not persistent, one CTA a tile with one consumer
//                               warpgroup (256 threads): with CS_STAGES small enough, two
//                               CTAs share an SM
// The epilogue is the TMA warp-specialized collective (smem-staged, TMA store of D, TMA
// load of C), which needs 16-byte aligned D/C rows; CS_EPI_ALIGN1=1 swaps in the
// register-direct epilogue (NoSmemWarpSpecialized, alignment 1) so that any n / ldd works.
// TMA zero-fills out-of-bounds rows/columns of A and B, which handles M, N and K residues.
//
// Notes on the CUTLASS view of the ABI operands (problem shape (M,N,K,L)):
//   A: cutlass::layout::RowMajor    -> StrideA (M,K,L) = (lda, 1, batch_stride_a)
//   B: cutlass::layout::ColumnMajor -> StrideB (N,K,L) = (ldb, 1, batch_stride_b)
//   C, D: cutlass::layout::RowMajor -> StrideC/D (M,N,L) = (ldc|ldd, 1, batch_stride_c|d)
//         (CS_SWAP_AB=1: ColumnMajor -> (1, ldc|ldd, batch_stride_c|d))
//   bias: per column of the kernel's D, StrideBias (M,N,L) = (0, 1, 0); per row (1, 0, 0)
//         when the kernel computes D^T

// Device code is built without assert(): a call to __assertfail inside the consumer loop
// makes ptxas serialize every WGMMA (C7510 "wgmma pipeline crossing function boundary"),
// and CUTLASS's pipeline debug checks add brkpt branches. Host asserts stay (a failed TMA
// descriptor aborts rather than launching garbage); cs_gemm_check rejects those cases first.
#if defined(__CUDA_ARCH__) && !defined(NDEBUG)
#define NDEBUG
#endif

// CS_EXT_MMA=1: CuTe's extended WGMMA shapes, so a tile width outside {8, 16, 32, 64, 96,
// 128, 192, 256} is one WGMMA of that width (144: one 64x144x16, not nine 64x16x16; 224:
// one 64x224x16, not seven 64x32x16; nvcc 13.0, SASS HGMMA count 72 -> 8 and 56 -> 8).
// Not yet measured on a GPU; 0 keeps CuTe's standard shapes.
#ifndef CS_EXT_MMA
#define CS_EXT_MMA 0
#endif
#if CS_EXT_MMA && !defined(CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED)
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>

#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cutlass/kernel_hardware_info.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include "cutesmith_abi.h"
#include "cutesmith_fallback_gemm.cuh"
#include "cutesmith_sm90_3xtf32.cuh"
#include "cutesmith_sm90_3xf16.cuh"
#include "cutesmith_sm90_host.cuh"

using namespace cute;

// ---------------------------------------------------------------------------------------
// Strategy parameters (override with -DNAME=VALUE)
// ---------------------------------------------------------------------------------------

#ifndef CS_SCHEDULE
#define CS_SCHEDULE 0      // 0: KernelTmaWarpSpecializedCooperative, 1: ...Pingpong, 2: ...(basic)
#endif
#ifndef CS_TILE_M
#define CS_TILE_M 128      // CTA tile rows of D (cooperative: multiple of 128; ping-pong: 64)
#endif
#ifndef CS_TILE_N
#if CS_SCHEDULE != 0
#define CS_TILE_N 128      // ping-pong: one warpgroup holds a whole tile's accumulators
#else
#define CS_TILE_N 256      // CTA tile columns of D (WGMMA N: multiple of 8, <= 256)
#endif
#endif
#if defined(CS_WL_DTYPE_AB) && (CS_WL_DTYPE_AB == 4 || CS_WL_DTYPE_AB == 5)
#define CS_FP8 1           // e4m3 / e5m2 operands (the workload block says so)
#else
#define CS_FP8 0
#endif
#if defined(CS_WL_DTYPE_AB) && CS_WL_DTYPE_AB == 0
#define CS_F32 1           // fp32 operands: the 3xTF32 mainloop (cutesmith_sm90_3xtf32.cuh)
#else
#define CS_F32 0
#endif
// fp32: which fp32-accurate mainloop. 0: 3xTF32 (cutesmith_sm90_3xtf32.cuh: the operands
// split into TF32 parts inside the kernel); 1: 3xF16 (cutesmith_sm90_3xf16.cuh: split
// into scaled fp16 parts by a pass before the GEMM, three fp16 WGMMAs a k-step).
#ifndef CS_F32_MODE
#define CS_F32_MODE 0
#endif
#define CS_F16SPLIT (CS_F32 && CS_F32_MODE == 1)
#ifndef CS_F32_TERMS
#if defined(CS_WL_ALLOW_TF32) && CS_WL_ALLOW_TF32
#define CS_F32_TERMS 1     // the workload allows TF32 rounding: one TF32 product
#else
#define CS_F32_TERMS 3     // fp32 accuracy: hi*hi + lo*hi + hi*lo
#endif
#endif
#ifndef CS_F32_SPLIT
#define CS_F32_SPLIT 1     // fp32 split: 0 truncation, 1 lo rounded, 2 hi and lo rounded
#endif
// fp32: how the consumers wait for each other's share of the split (cutesmith_sm90_3xtf32.cuh):
// 1, a "split done" mbarrier per stage (the warpgroups out of step), measured faster with
// 128x192 tiles; 0, a named barrier (in step), faster with 128x128 ones.
#ifndef CS_F32_SPLIT_SYNC
#define CS_F32_SPLIT_SYNC (CS_TILE_N >= 192 ? 1 : 0)
#endif
#ifndef CS_F32_PROMOTE
#define CS_F32_PROMOTE 1   // fp32: k-tiles WGMMA sums before FADD promotes the partial. 4 is 2%
                           // faster at 4096^3 (H100: 1327 against 1352 us) but its RMS error
                           // reaches 2.5-2.8x cuBLAS fp32's at 512^3 and 4.0x at K = 64
                           // (gemm_f32_small), past the 2x that fp32 workloads are held to
#endif
// fp32: the promotion interval by K (CS_F32_PROMOTE_MIN_K, _LARGE_K, _MAX): see
// cutesmith_sm90_3xtf32.cuh.
// fp32 (3xTF32): K below CS_F32_MIN_K goes to the fallback (see cutesmith_sm90_3xtf32.cuh
// and cs_gemm_check_effective).
#ifndef CS_TILE_K
#if CS_FP8
#define CS_TILE_K 128      // K per stage: 128 fp8 = 128 bytes = one SW128 row
#elif CS_F16SPLIT
#define CS_TILE_K 32       // K per stage: 32 fp16 = 64 bytes = one SW64 row (four tiles a stage)
#elif CS_F32
#define CS_TILE_K 16       // K per stage: 16 fp32 = 64 bytes = one SW64 row (stage + lo buffer)
#else
#define CS_TILE_K 64       // K per stage: 64 bf16 = 128 bytes = one SW128 row
#endif
#endif
#ifndef CS_CLUSTER_M
#define CS_CLUSTER_M 2     // cluster shape: B tiles are TMA-multicast across the M CTAs,
#endif
#ifndef CS_CLUSTER_N
#define CS_CLUSTER_N 1     // A tiles across the N CTAs
#endif
#ifndef CS_SWIZZLE
#define CS_SWIZZLE 1       // tile scheduler max_swizzle_size (1, 2, 4 or 8)
#endif
#ifndef CS_RASTER
#define CS_RASTER 0        // tile scheduler raster order: 0 heuristic, 1 along M, 2 along N
#endif
#ifndef CS_STREAMK
#define CS_STREAMK 0       // 1: stream-K tile scheduler (cooperative only; uses the workspace)
#endif
#ifndef CS_SWAP_AB
#define CS_SWAP_AB 0       // 1: the kernel's M along D's columns, its D column-major (above)
#endif
#ifndef CS_EPI_ALIGN1
#define CS_EPI_ALIGN1 0    // 1: register-direct epilogue, C/D alignment 1 (odd n / ldd)
#endif
// The workload block (when present) decides the build: f16 operands, and an epilogue
// chain that is a per-column bias then one activation (CS_WL_BIAS_ACT, with the
// activation's parameters in CS_WL_BIAS_ACT_P0 and CS_WL_BIAS_ACT_P1).
#if defined(CS_WL_DTYPE_AB) && CS_WL_DTYPE_AB == 1 && !defined(CS_GEMM_FP16)
#define CS_GEMM_FP16 1
#endif
#if defined(CS_WL_BIAS_ACT) && !defined(CS_FUSED_BIAS_ACT)
#define CS_FUSED_BIAS_ACT 1
#define CS_ACT CS_WL_BIAS_ACT
#endif
#ifndef CS_FUSED_BIAS_ACT
#define CS_FUSED_BIAS_ACT 0  // 1: D = act(alpha*A*B + beta*C + bias[n]), CS_FAMILY_GEMM_BIAS_ACT
#endif
// Any other epilogue chain (scales, clamps, activations, the pre-activation value, row /
// column vectors and residual matrices) runs element by element inside the TMA epilogue
// as a visitor-tree node: D = chain(z), z = alpha * acc + beta * C.
#if (defined(CS_WL_CHAIN) || defined(CS_WL_CHAIN_FREE)) && !CS_FUSED_BIAS_ACT
#define CS_CHAIN_EPI 1
#else
#define CS_CHAIN_EPI 0
#endif
#ifndef CS_ACT
#define CS_ACT 0           // cs_activation of the fused build (0..7; 8..15 from a workload block)
#endif

#if CS_F32
using ElementAB = float;
using FallbackElement = float;
static constexpr cs_dtype kDtypeAB = CS_DTYPE_F32;
#elif CS_FP8 && CS_WL_DTYPE_AB == 4
using ElementAB = cutlass::float_e4m3_t;
using FallbackElement = __nv_fp8_e4m3;   // the same bits
static constexpr cs_dtype kDtypeAB = CS_DTYPE_E4M3;
#elif CS_FP8
using ElementAB = cutlass::float_e5m2_t;
using FallbackElement = __nv_fp8_e5m2;
static constexpr cs_dtype kDtypeAB = CS_DTYPE_E5M2;
#elif defined(CS_GEMM_FP16)
using ElementAB = cutlass::half_t;
using FallbackElement = __half;          // the same bits as cutlass::half_t
static constexpr cs_dtype kDtypeAB = CS_DTYPE_F16;
#else
using ElementAB = cutlass::bfloat16_t;
using FallbackElement = __nv_bfloat16;   // the same bits as cutlass::bfloat16_t
static constexpr cs_dtype kDtypeAB = CS_DTYPE_BF16;
#endif
// C and D: the workload's output type (CS_WL_DTYPE_CD: bf16, f16 or f32) for 16-bit and
// fp8 inputs; without one, the input type (bf16 for fp8 inputs). f32 inputs write f32.
#if !CS_F32 && defined(CS_WL_DTYPE_CD) && CS_WL_DTYPE_CD == 0
using ElementCD = float;
using FallbackCD = float;
static constexpr cs_dtype kDtypeCD = CS_DTYPE_F32;
#elif !CS_F32 && defined(CS_WL_DTYPE_CD) && CS_WL_DTYPE_CD == 1
using ElementCD = cutlass::half_t;
using FallbackCD = __half;
static constexpr cs_dtype kDtypeCD = CS_DTYPE_F16;
#elif !CS_F32 && defined(CS_WL_DTYPE_CD) && CS_WL_DTYPE_CD == 2
using ElementCD = cutlass::bfloat16_t;
using FallbackCD = __nv_bfloat16;
static constexpr cs_dtype kDtypeCD = CS_DTYPE_BF16;
#elif CS_FP8 && defined(CS_WL_DTYPE_CD) && CS_WL_DTYPE_CD == 4
// An fp8 D stores the result times scale_d, rounded to nearest and saturated to the
// largest finite value (cvt .satfinite), as cuBLASLt's fp8 output does.
using ElementCD = cutlass::float_e4m3_t;
using FallbackCD = __nv_fp8_e4m3;
static constexpr cs_dtype kDtypeCD = CS_DTYPE_E4M3;
#elif CS_FP8 && defined(CS_WL_DTYPE_CD) && CS_WL_DTYPE_CD == 5
using ElementCD = cutlass::float_e5m2_t;
using FallbackCD = __nv_fp8_e5m2;
static constexpr cs_dtype kDtypeCD = CS_DTYPE_E5M2;
#elif CS_FP8
#if defined(CS_WL_DTYPE_CD)
#error "fp8 builds write bf16, f16, f32, e4m3 or e5m2 D (CS_WL_DTYPE_CD 2, 1, 0, 4 or 5)"
#endif
using ElementCD = cutlass::bfloat16_t;
using FallbackCD = __nv_bfloat16;
static constexpr cs_dtype kDtypeCD = CS_DTYPE_BF16;
#else
using ElementCD = ElementAB;
using FallbackCD = FallbackElement;
static constexpr cs_dtype kDtypeCD = kDtypeAB;
#endif
// An fp8 D is scaled by scale_d before its rounding (the chain's result, or alpha and beta).
static constexpr bool kFp8D = kDtypeCD == CS_DTYPE_E4M3 || kDtypeCD == CS_DTYPE_E5M2;
static_assert(!kFp8D || !CS_FUSED_BIAS_ACT,
              "an fp8 D takes the chain epilogue (scale_d after the activation), not the fused bias + activation");
using ElementBias    = ElementCD;   // bias in D's type
using ElementAcc     = float;
using ElementCompute = float;       // epilogue math
using ElementScalar  = float;       // alpha, beta

// Storage orders (cs_layout) from the workload block; default TN with row-major D.
#ifndef CS_WL_LAYOUT_A
#define CS_WL_LAYOUT_A 0
#endif
#ifndef CS_WL_LAYOUT_B
#define CS_WL_LAYOUT_B 1
#endif
#ifndef CS_WL_LAYOUT_CD
#define CS_WL_LAYOUT_CD 0
#endif
static constexpr int kLayoutA = CS_WL_LAYOUT_A, kLayoutB = CS_WL_LAYOUT_B, kLayoutCD = CS_WL_LAYOUT_CD;
// A column-major D is computed as its row-major transpose, D^T = B^T A^T: the kernel's
// A' is B^T (n x k) and its B' is A^T (k x m), each read in the other storage order.
// CS_SWAP_AB=1 flips the choice, and the kernel's D is then column-major.
static constexpr bool kKernDColMajor = CS_SWAP_AB != 0;
static constexpr bool kSwap = (kLayoutCD == CS_LAYOUT_COL) != kKernDColMajor;
static constexpr bool kAKMajor = kSwap ? kLayoutB == CS_LAYOUT_COL : kLayoutA == CS_LAYOUT_ROW;
static constexpr bool kBKMajor = kSwap ? kLayoutA == CS_LAYOUT_ROW : kLayoutB == CS_LAYOUT_COL;
// fp8 WGMMA reads K-major operands only. A row and B column are K-major in both
// orientations (a column-major D swaps them into B^T and A^T, still K-major).
#if CS_FP8 && (CS_WL_LAYOUT_A != 0 || CS_WL_LAYOUT_B != 1)
#error "fp8 WGMMA takes K-major operands only: A row-major and B column-major (CS_WL_LAYOUT_A 0, CS_WL_LAYOUT_B 1)"
#endif
static_assert(!CS_FP8 || (kAKMajor && kBKMajor), "fp8: both kernel operands must be K-major");
#if CS_SWAP_AB && CS_EPI_ALIGN1
#error "CS_SWAP_AB needs the TMA epilogue (the column-major D of the kernel)"
#endif

// The kernel's operands: K-major (K contiguous) or MN-major (M or N contiguous), both of
// which TMA and WGMMA take for 16-bit types.
// fp32: TF32 WGMMA reads K-major operands only. An MN-major operand is copied K-major
// into the workspace first (CS_F32_KMAJOR_COPY=1, the default: one pass over it, a few
// percent of the GEMM), or split into K-major buffers inside the mainloop (0: a transpose
// through shared memory on every k-tile).
#ifndef CS_F32_KMAJOR_COPY
#define CS_F32_KMAJOR_COPY 1
#endif
#ifndef CS_F32_COPY_VEC
#define CS_F32_COPY_VEC 1   // the transposing copy with 16-byte accesses where the source allows
#endif
static constexpr bool kCopyA = CS_F32 && !CS_F16SPLIT && CS_F32_KMAJOR_COPY && !kAKMajor;
static constexpr bool kCopyB = CS_F32 && !CS_F16SPLIT && CS_F32_KMAJOR_COPY && !kBKMajor;
// The majorness of what the kernel reads (the copy, when there is one; 3xF16's split
// parts are always K-major).
static constexpr bool kKernAKMajor = kAKMajor || kCopyA || CS_F16SPLIT;
static constexpr bool kKernBKMajor = kBKMajor || kCopyB || CS_F16SPLIT;
using LayoutA = std::conditional_t<kKernAKMajor, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
using LayoutB = std::conditional_t<kKernBKMajor, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
// (M,N): N contiguous (D itself, or D^T), or M contiguous with CS_SWAP_AB.
using LayoutC = std::conditional_t<kKernDColMajor, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
using LayoutD = LayoutC;

static constexpr int kAlignAB = 128 / cutlass::sizeof_bits<ElementAB>::value;   // 8: 16 bytes
static constexpr int kAlignCD = CS_EPI_ALIGN1 ? 1 : 128 / cutlass::sizeof_bits<ElementCD>::value;

static constexpr int kTileM    = CS_TILE_M;
static constexpr int kTileN    = CS_TILE_N;
static constexpr int kTileK    = CS_TILE_K;
static constexpr int kClusterM = CS_CLUSTER_M;
static constexpr int kClusterN = CS_CLUSTER_N;

static_assert(CS_SCHEDULE >= 0 && CS_SCHEDULE <= 2, "CS_SCHEDULE: 0 cooperative, 1 ping-pong, 2 basic");
static_assert(CS_SCHEDULE != 0 || kTileM % 128 == 0, "cooperative: TILE_M must be a multiple of 128");
static_assert(kTileM % 64 == 0, "TILE_M must be a multiple of 64");
static_assert(kTileN % 8 == 0 && kTileN <= 256, "TILE_N must be a multiple of 8, at most 256");
static_assert(kTileK * sizeof(ElementAB) % (CS_F32 ? 64 : 128) == 0,
              "TILE_K must span whole swizzle rows (128 bytes; 64 for fp32)");
static_assert(!CS_F32 || CS_SCHEDULE == 0, "fp32 (3xTF32): the cooperative schedule only");
// fp32 keeps two accumulator sets per consumer thread (the fp32 sum and WGMMA's partial):
// two sets of 96 (128x192) fit in the consumers' registers without spilling.
static_assert(!CS_F32 || kTileM * kTileN / 256 <= 96, "fp32: TILE_M x TILE_N at most 24576 (two accumulator sets)");
static_assert(CS_F32_TERMS == 1 || CS_F32_TERMS == 3, "CS_F32_TERMS: 3 (3xTF32) or 1 (plain TF32)");
static_assert(kClusterM * kClusterN <= 8 && kClusterM >= 1 && kClusterN >= 1, "portable cluster sizes only");
static_assert(CS_RASTER >= 0 && CS_RASTER <= 2, "CS_RASTER: 0 heuristic, 1 along M, 2 along N");
static_assert(!CS_STREAMK || CS_SCHEDULE == 0, "stream-K needs the cooperative schedule");
#if (CS_FUSED_BIAS_ACT || CS_CHAIN_EPI) && CS_EPI_ALIGN1
#error "CS_FUSED_BIAS_ACT needs the TMA epilogue: the NoSmem (alignment 1) builder only does alpha*acc + beta*C"
#endif

using TileShape    = Shape<Int<kTileM>, Int<kTileN>, Int<kTileK>>;
using ClusterShape = Shape<Int<kClusterM>, Int<kClusterN>, _1>;

// ---------------------------------------------------------------------------------------
// Schedules
// ---------------------------------------------------------------------------------------

// fp8: the plain schedules make the builder pick the accurate fp8 mainloop
// (MainloopSm90TmaGmmaWarpSpecializedFP8, which adds the WGMMA accumulators into a second,
// fp32 set after every k-block: two accumulator sets per thread, so at most 64
// accumulators per thread fit without spilling); CS_FP8_FAST_ACCUM=1 takes the
// FP8FastAccum schedules: one set that WGMMA accumulates into over all of K (the 16-bit
// tiles fit again; less accurate for long K, which validation judges). 16-bit builds
// ignore it.
#ifndef CS_FP8_FAST_ACCUM
#define CS_FP8_FAST_ACCUM 0
#endif
static constexpr bool kFp8FastAccum = CS_FP8 && CS_FP8_FAST_ACCUM;
#if CS_SCHEDULE == 1
using MainloopSchedule = std::conditional_t<kFp8FastAccum,
    cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum,
    cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
using TmaEpiSchedule   = cutlass::epilogue::TmaWarpSpecialized;
#elif CS_SCHEDULE == 2
using MainloopSchedule = std::conditional_t<kFp8FastAccum,
    cutlass::gemm::KernelTmaWarpSpecializedFP8FastAccum,
    cutlass::gemm::KernelTmaWarpSpecialized>;
using TmaEpiSchedule   = cutlass::epilogue::TmaWarpSpecialized;
#else
using MainloopSchedule = std::conditional_t<kFp8FastAccum,
    cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
using TmaEpiSchedule   = cutlass::epilogue::TmaWarpSpecializedCooperative;
#endif

// EpilogueScheduleAuto would pick NoSmemWarpSpecialized on Sm90, so the TMA epilogue is
// named explicitly (and must pair with the mainloop schedule).
#if CS_EPI_ALIGN1
using EpilogueSchedule = cutlass::epilogue::NoSmemWarpSpecialized;
#else
using EpilogueSchedule = TmaEpiSchedule;
#endif

#if CS_STREAMK
using TileSchedulerTag = cutlass::gemm::StreamKScheduler;
#else
using TileSchedulerTag = cutlass::gemm::PersistentScheduler;
#endif

// ---------------------------------------------------------------------------------------
// Epilogue fusion
// ---------------------------------------------------------------------------------------

#if CS_FUSED_BIAS_ACT
// A CUTLASS activation functor from a cutesmith one (cutesmith_chain.cuh), element by
// element: relu with the NaN-keeping max of the reference (CUTLASS's ReLu drops a NaN),
// GELU's erf form in its fast branch-free form for a 16-bit D, and tanh and GELU's tanh
// form as the chain evaluates them. CUTLASS's Tanh and GELU_taylor use tanh.approx.f32
// (absolute error near 2^-11): GELU_taylor's 0.5 (z + z tanh u) then cancels to garbage in
// the negative tail (an f16 GPT-2 MLP's bias + GELU failed the fp64 check by 0.014 of its
// dot product's magnitude), and tanh is 2^-11 off where an f32 D needs 2^-24.
// The other activations (SiLU with a beta other than 1, SELU, ELU, the hard ones,
// softplus, softsign, mish) are the chain's own functions with the workload's parameters
// as constants (CS_WL_BIAS_ACT_P0 / _P1).
#ifndef CS_WL_BIAS_ACT_P0
#define CS_WL_BIAS_ACT_P0 0.0f
#endif
#ifndef CS_WL_BIAS_ACT_P1
#define CS_WL_BIAS_ACT_P1 0.0f
#endif
template <class T, int Act> struct CsEltAct {
  static const bool kIsHeavy = Act != CS_ACT_RELU && Act != CS_ACT_HARDTANH;
  CUTLASS_HOST_DEVICE T operator()(T const& x) const {
    // cs_activate with a constant Act is the one function (relu, tanh, GELU's tanh form,
    // ...); GELU's erf form is taken in its fast form (this build's D is 16-bit).
    if constexpr (Act == CS_ACT_GELU_ERF) return T(cs_gelu_erf_fast(float(x)));
    else return T(cs_activate(Act, float(x), CS_WL_BIAS_ACT_P0, CS_WL_BIAS_ACT_P1));
  }
};
template <class T, int N, int Act> struct CsEltAct<cutlass::Array<T, N>, Act> {
  static const bool kIsHeavy = CsEltAct<T, Act>::kIsHeavy;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x) const {
    cutlass::Array<T, N> y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) y[i] = CsEltAct<T, Act>{}(x[i]);
    return y;
  }
};
#if   CS_ACT == 0
template <class T> using ActivationFn = cutlass::epilogue::thread::Identity<T>;
#elif CS_ACT == 1
template <class T> using ActivationFn = CsEltAct<T, CS_ACT_RELU>;
#elif CS_ACT == 2
template <class T> using ActivationFn = cutlass::epilogue::thread::LeakyReLU<T>;  // slope: act_alpha
#elif CS_ACT == 3 && (CS_F32 || (defined(CS_WL_DTYPE_CD) && CS_WL_DTYPE_CD == 0))
template <class T> using ActivationFn = cutlass::epilogue::thread::GELU<T>;        // erf form, f32 D
#elif CS_ACT == 3
template <class T> using ActivationFn = CsEltAct<T, CS_ACT_GELU_ERF>;             // erf form, 16-bit D
#elif CS_ACT == 4
template <class T> using ActivationFn = CsEltAct<T, CS_ACT_GELU_TANH>;             // tanh form
#elif CS_ACT == 5
// CUTLASS's SiLu where beta is 1 (or compiled without a workload block), else swish(beta).
#if defined(CS_WL_BIAS_ACT)
static constexpr bool kSiluBetaOne = CS_WL_BIAS_ACT_P0 == 1.0f;
#else
static constexpr bool kSiluBetaOne = true;
#endif
template <class T> using ActivationFn =
    std::conditional_t<kSiluBetaOne, cutlass::epilogue::thread::SiLu<T>, CsEltAct<T, CS_ACT_SILU>>;
#elif CS_ACT == 6
template <class T> using ActivationFn = cutlass::epilogue::thread::Sigmoid<T>;
#elif CS_ACT == 7
template <class T> using ActivationFn = CsEltAct<T, CS_ACT_TANH>;
#elif CS_ACT >= 8 && CS_ACT <= 15 && defined(CS_WL_BIAS_ACT)
template <class T> using ActivationFn = CsEltAct<T, CS_ACT>;
#elif CS_ACT >= 8 && CS_ACT <= 15
#error "CS_ACT 8..15 take their parameters from the workload block (CS_WL_BIAS_ACT_P0 / _P1)"
#else
#error "CS_ACT must be a cs_activation value (0..15)"
#endif
// activation(beta * C + (alpha * acc + bias)), bias: stride (0,1,0) over (M,N,L), or
// (1,0,0) when the kernel computes D^T (D's columns are then the kernel's rows).
template <template <class> class Act, class... T>
using BiasEltAct = std::conditional_t<kSwap,
    cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<Act, T...>,
    cutlass::epilogue::fusion::LinCombPerColBiasEltAct<Act, T...>>;
using FusionOp = BiasEltAct<ActivationFn, ElementCD, ElementCompute, ElementBias, ElementCD, ElementScalar>;
[[maybe_unused]] static constexpr cs_family kFamily = CS_FAMILY_GEMM_BIAS_ACT;
#elif CS_CHAIN_EPI
// The workload's epilogue chain as one node of an epilogue visitor tree (EVT): for each
// element the consumer warps hold, the node takes z (alpha * acc + beta * C) from its
// child and stores cs_chain::apply(z, t) rounded once to D's type. The chain's tensor
// operands (row / column vectors, matrices) are loaded from global memory at the elements'
// logical (row, col, batch), all of a subtile's at once before it is visited (one memory
// latency per subtile, not per element). One matrix operand of D's type may instead take
// the place of C (CS_CHAIN_C_OPERAND, when beta is 0): the collective then brings its
// tiles into shared memory by TMA, pipelined with the mainloop, as it would bring C.
// Everything runs inside the TMA warp-specialized epilogue, so the chain costs one read of
// each operand and no extra pass over D.
#if defined(CS_WL_CHAIN_C_OPERAND)
#define CS_CHAIN_C_OPERAND CS_WL_CHAIN_C_OPERAND
#else
#define CS_CHAIN_C_OPERAND -1
#endif
static constexpr int kCOperand = CS_CHAIN_C_OPERAND;
static_assert(kCOperand < cs_chain::kOperands, "CS_CHAIN_C_OPERAND names no chain operand");
static_assert(kCOperand < 0 || cs_chain_kind<cs_chain>(kCOperand) == CS_OPERAND_MATRIX,
              "CS_CHAIN_C_OPERAND must name a matrix operand");
static_assert(kCOperand < 0 || cs_chain_dtype<cs_chain>(kCOperand) == int(kDtypeCD),
              "CS_CHAIN_C_OPERAND must name an operand of D's type");
namespace cs_evt {
using namespace cutlass::epilogue::fusion;

struct ChainArguments {
  cs_operand operands[CS_MAX_OPERANDS];   // the chain's tensor operands (cs_problem's)
  int32_t layout_cd;                      // D's storage order, for matrix operands
  float scale_out;                        // scale_d for an fp8 D, else 1
  // Batches stacked into one GEMM (cs_fold_batch): each batch's m and n, by which an index
  // op's positions are taken within their batch; 0 when nothing is stacked.
  int64_t batch_m, batch_n;
};

// Operands loaded from global memory by the node (all but the one in C's place).
static constexpr int kLoaded = cs_chain::kOperands - (kCOperand >= 0 ? 1 : 0);

template <class ElementOutput>
struct Sm90CsChain {
  struct SharedStorage {};
  using Arguments = ChainArguments;
  using Params = ChainArguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) { return true; }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) { return 0; }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE Sm90CsChain() {}
  CUTLASS_HOST_DEVICE Sm90CsChain(Params const& params, SharedStorage const&) : params(params) {}

  Params params;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(ProducerLoadArgs<Args...> const&) {
    return EmptyProducerLoadCallbacks{};
  }

  // tCcD: this thread's coordinates, relative to its first element; residue: the problem's
  // (M, N) minus that first element (an element is inside the problem iff its relative
  // coordinate is below the residue).
  template <class CTensor, class ThrResidue>
  struct ConsumerStoreCallbacks : EmptyConsumerStoreCallbacks {
    // Elements of one epilogue subtile this thread holds.
    static constexpr int kVals = decltype(size(take<0, 3>(shape(std::declval<CTensor>()))))::value;

    CUTLASS_DEVICE ConsumerStoreCallbacks(CTensor tCcD, ThrResidue residue, int64_t m0, int64_t n0,
                                          int64_t l, Params const& params)
        : tCcD(tCcD), residue(residue), m0(m0), n0(n0), l(l), params(params) {}

    CTensor tCcD;                 // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
    ThrResidue residue;
    int64_t m0, n0, l;            // the thread's first element in the kernel's (M, N, L)
    Params const& params;
    float vals[kLoaded > 0 ? kLoaded : 1][kLoaded > 0 ? kVals : 1];
    int sub_m = 0, sub_n = 0;     // the subtile being visited (an index op reads positions)

    // Before a subtile is visited: every loaded operand at every element of it.
    CUTLASS_DEVICE void previsit(int epi_m, int epi_n, int, bool) {
      sub_m = epi_m;
      sub_n = epi_n;
      if constexpr (kLoaded > 0) {
        Tensor tCcD_mn = tCcD(_, _, _, epi_m, epi_n);
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < kVals; ++i) {
          // An element outside the problem (a ragged tile) reads the nearest inside (its
          // value is never stored): no branch around the loads, so a subtile's loads issue
          // back to back instead of each waiting out its latency in its own branch. m0 +
          // residue is the problem's extent, so this is min(m0 + c, M - 1).
          auto const c = tCcD_mn(i);
          int64_t const km = m0 + cute::min(int64_t(get<0>(c)), int64_t(get<0>(residue)) - 1);
          int64_t const kn = n0 + cute::min(int64_t(get<1>(c)), int64_t(get<1>(residue)) - 1);
          // The kernel's (m, n) is D's (row, col), or (col, row) when D is computed
          // transposed.
          int64_t const row = kSwap ? kn : km, col = kSwap ? km : kn;
          cute::for_each(cute::make_int_sequence<cs_chain::kOperands>{}, [&](auto J) {
            constexpr int j = decltype(J)::value;
            if constexpr (j != kCOperand) {
              constexpr int slot = (kCOperand >= 0 && j > kCOperand) ? j - 1 : j;
              vals[slot][i] = cs_operand_at<cs_chain_kind<cs_chain>(j), cs_chain_dtype<cs_chain>(j)>(
                  params.operands[j], params.layout_cd, l, row, col);
            }
          });
        }
      }
    }

    template <int FragmentSize, class FrgC>
    CUTLASS_DEVICE cutlass::Array<ElementOutput, FragmentSize>
    apply(int epi_v, cutlass::Array<float, FragmentSize> const& z, FrgC const& frg_c) {
      cutlass::Array<ElementOutput, FragmentSize> out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        float t[CS_MAX_OPERANDS] = {0.0f, 0.0f, 0.0f, 0.0f};
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < cs_chain::kOperands; ++j) {
          if (j == kCOperand) {
            if constexpr (kCOperand >= 0) t[j] = float(frg_c[i]);
          } else if constexpr (kLoaded > 0) {
            int const slot = (kCOperand >= 0 && j > kCOperand) ? j - 1 : j;
            t[j] = vals[slot][epi_v * FragmentSize + i];
          }
        }
        int64_t row = 0, col = 0;
        if constexpr (cs_chain::kPositional) {
          // An index op (triu, tril): the element's logical (row, col) of D. An element
          // outside the problem is never stored, so its position needs no clamp.
          auto const c = tCcD(_, _, _, sub_m, sub_n)(epi_v * FragmentSize + i);
          int64_t const km = m0 + int64_t(get<0>(c)), kn = n0 + int64_t(get<1>(c));
          row = kSwap ? kn : km;
          col = kSwap ? km : kn;
          if (params.batch_m > 0) {   // stacked batches: the position within its batch
            row %= params.batch_m;
            col %= params.batch_n;
          }
        }
        float const v = cs_chain::apply(z[i], t, row, col);
        out[i] = ElementOutput(kFp8D ? v * params.scale_out : v);
      }
      return out;
    }

    template <typename ElementAccumulator, typename ElementInput, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<ElementOutput, FragmentSize>
    visit(cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int,
          cutlass::Array<ElementInput, FragmentSize> const& frg_z) {
      cutlass::NumericArrayConverter<float, ElementInput, FragmentSize> to_f32;
      return apply<FragmentSize>(epi_v, to_f32(frg_z), frg_z);
    }

    // With the matrix operand in C's place: z and that operand.
    template <typename ElementAccumulator, typename ElementInput, typename ElementC, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<ElementOutput, FragmentSize>
    visit(cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int,
          cutlass::Array<ElementInput, FragmentSize> const& frg_z,
          cutlass::Array<ElementC, FragmentSize> const& frg_c) {
      cutlass::NumericArrayConverter<float, ElementInput, FragmentSize> to_f32;
      return apply<FragmentSize>(epi_v, to_f32(frg_z), frg_c);
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(ConsumerStoreArgs<Args...> const& args) {
    auto [M, N, K, L] = args.problem_shape_mnkl;
    int64_t const m0 = int64_t(M) - int64_t(get<0>(args.residue_tCcD));
    int64_t const n0 = int64_t(N) - int64_t(get<1>(args.residue_tCcD));
    int64_t const l = int64_t(get<3>(args.tile_coord_mnkl));
    return ConsumerStoreCallbacks<decltype(args.tCcD), decltype(args.residue_tCcD)>(
        args.tCcD, args.residue_tCcD, m0, n0, l, params);
  }
};
}  // namespace cs_evt

#if CS_CHAIN_C_OPERAND >= 0
// chain(alpha * acc, C = the matrix operand), D = its result rounded once.
using FusionOp = cutlass::epilogue::fusion::Sm90EVT<
    cs_evt::Sm90CsChain<ElementCD>,
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, ElementCompute, ElementCompute,
                                               cutlass::FloatRoundStyle::round_to_nearest>,
        cutlass::epilogue::fusion::Sm90ScalarBroadcast<ElementScalar, Stride<_0, _0, int64_t>>,
        cutlass::epilogue::fusion::Sm90AccFetch>,
    cutlass::epilogue::fusion::Sm90SrcFetch<ElementCD>>;
#else
// chain(alpha * acc + beta * C), D = its result rounded once.
using FusionOp = cutlass::epilogue::fusion::Sm90EVT<
    cs_evt::Sm90CsChain<ElementCD>,
    cutlass::epilogue::fusion::Sm90LinearCombination<ElementCompute, ElementCompute, ElementCD, ElementScalar>>;
#endif
[[maybe_unused]] static constexpr cs_family kFamily = CS_FAMILY_GEMM;
#else
using FusionOp = cutlass::epilogue::fusion::LinearCombination<
    ElementCD, ElementCompute, ElementCD, ElementScalar>;
static constexpr cs_family kFamily = CS_FAMILY_GEMM;
#endif

// ---------------------------------------------------------------------------------------
// Kernel assembly
// ---------------------------------------------------------------------------------------

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto,
    ElementAcc, ElementCompute,
    ElementCD, LayoutC, kAlignCD,
    ElementCD, LayoutD, kAlignCD,
    EpilogueSchedule,
    FusionOp
  >::CollectiveOp;

#if CS_F32
// fp32 under CUTLASS's cooperative kernel, on 3xF16 (cutesmith_sm90_3xf16.cuh: four fp16
// tiles a stage) or 3xTF32 (cutesmith_sm90_3xtf32.cuh: the TMA stage, plus the split
// buffers, lo, and hi too for an MN-major operand); as many stages as fit beside the
// epilogue (at most 8), or CS_STAGES.
#if CS_F16SPLIT
static constexpr int kF32StageBytes = cs_3xf16::stage_bytes<kTileM, kTileN, kTileK>();
#else
static constexpr int kF32StageBytes =
    cs_3xtf32::stage_bytes<kTileM, kTileN, kTileK, kKernAKMajor, kKernBKMajor, CS_F32_TERMS>();
#endif
#ifdef CS_STAGES
static constexpr int kStages = CS_STAGES;
#else
static constexpr int kStages =
    cs_sm90::stages_fit<typename CollectiveEpilogue::SharedStorage>(kF32StageBytes);
#endif
static_assert(kStages >= 2, "fp32: fewer than 2 stages fit in shared memory (smaller tiles or TILE_K)");
#if CS_F16SPLIT
using CollectiveMainloop = cs_3xf16::Mainloop<
    cs_3xf16::MainloopSm90Tma3xF16<kStages, ClusterShape, MainloopSchedule>, TileShape,
    CS_F32_PROMOTE, CS_F32_PROMOTE_LARGE_K, CS_F32_PROMOTE_MIN_K, CS_F32_PROMOTE_MAX>;
#else
using CollectiveMainloop = cs_3xtf32::Mainloop<
    cs_3xtf32::MainloopSm90Tma3xTF32<kStages, ClusterShape, MainloopSchedule>,
    TileShape, cutlass::detail::TagToStrideA_t<LayoutA>, cutlass::detail::TagToStrideB_t<LayoutB>,
    CS_F32_TERMS, CS_F32_PROMOTE, CS_F32_SPLIT, CS_F32_SPLIT_SYNC, CS_F32_PROMOTE_LARGE_K,
    CS_F32_PROMOTE_MIN_K, CS_F32_PROMOTE_MAX>;
#endif
#else
using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementAB, LayoutA, kAlignAB,
    ElementAB, LayoutB, kAlignAB,
    ElementAcc,
    TileShape, ClusterShape,
#ifdef CS_STAGES
    cutlass::gemm::collective::StageCount<CS_STAGES>,
#else
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
#endif
    MainloopSchedule
  >::CollectiveOp;
#endif

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>,   // (M,N,K,L)
    CollectiveMainloop,
    CollectiveEpilogue,
    TileSchedulerTag>;

using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

using StrideA = typename GemmKernel::StrideA;   // (M,K,L): (lda, _1, batch_stride_a)
using StrideB = typename GemmKernel::StrideB;   // (N,K,L): (ldb, _1, batch_stride_b)
using StrideC = typename GemmKernel::StrideC;   // (M,N,L): (ldc, _1, batch_stride_c)
using StrideD = typename GemmKernel::StrideD;   // (M,N,L): (ldd, _1, batch_stride_d)

// ---------------------------------------------------------------------------------------
// Host side: problem checks
// ---------------------------------------------------------------------------------------

static inline bool cs_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 0xF) == 0;
}

// A TMA global stride (given in elements of A/B, or of C/D): a multiple of 16 bytes and
// below 2^40 bytes.
static inline bool cs_tma_stride_ok(int64_t elems, int64_t elem_bytes = int64_t(sizeof(ElementAB))) {
  return elems >= 0 && elems < (int64_t(1) << 40) / elem_bytes && (elems * elem_bytes) % 16 == 0;
}
static inline bool cs_tma_stride_cd_ok(int64_t elems) {
  return cs_tma_stride_ok(elems, int64_t(sizeof(ElementCD)));
}

// The batch (L) stride handed to CUTLASS: the ABI's, or for a single batch a never-stepped
// value that is still a valid TMA stride (ld * rows).
static inline int64_t cs_batch_stride(const cs_problem& p, int64_t batch_stride, int64_t ld, int64_t rows) {
  return p.batch > 1 ? batch_stride : ld * rows;
}

// A batch whose B is shared (batch stride 0) is one GEMM with the batches' rows stacked
// when A, C, D and every chain operand step by exactly one batch of rows: (batch * m) x n
// = (batch * m) x k times k x n. The same with A shared and a column-major D, stacking
// columns. TMA has no stride-0 dimension, so this is how a shared operand reaches the fast
// path; other shared cases take the fallback.
// Whether batch l of every batch-strided tensor starts exactly `extent` rows (or columns)
// of D after batch l-1: the stacked operand (its batch stride and leading dimension), D, C
// and the chain's operands (a vector indexed along the stacked side, `along`, steps by
// `extent`; the other kind of vector is shared; a matrix steps by `extent` of its ld).
static bool cs_batches_stack(const cs_problem& p, int64_t stacked_stride, int64_t stacked_ld,
                             int64_t extent, int32_t along)
{
  bool ok = stacked_stride == stacked_ld * extent && p.batch_stride_d == p.ldd * extent &&
            (p.beta == 0.0f || p.batch_stride_c == p.ldc * extent);
  for (int i = 0; ok && i < p.num_operands && i < CS_MAX_OPERANDS; ++i) {
    cs_operand const& o = p.operands[i];
    ok = o.kind == along                ? o.batch_stride == extent
       : o.kind == CS_OPERAND_MATRIX    ? o.batch_stride == o.ld * extent
       : o.kind == CS_OPERAND_ROW ||
         o.kind == CS_OPERAND_COL       ? o.batch_stride == 0
                                        : false;
  }
  return ok;
}

static cs_problem cs_fold_batch(const cs_problem& p)
{
  if (p.batch <= 1 || p.m <= 0 || p.n <= 0) return p;
  cs_problem q = p;
  if (p.batch_stride_b == 0 && p.batch_stride_a != 0 && p.layout_a == CS_LAYOUT_ROW &&
      p.layout_cd == CS_LAYOUT_ROW &&
      cs_batches_stack(p, p.batch_stride_a, p.lda, p.m, CS_OPERAND_COL)) {
    // Rows stack: A[l] row i is row l*m + i of one (batch*m) x k matrix, and so on.
    q.m = p.m * p.batch;
  } else if (p.batch_stride_a == 0 && p.batch_stride_b != 0 && p.layout_b == CS_LAYOUT_COL &&
             p.layout_cd == CS_LAYOUT_COL &&
             cs_batches_stack(p, p.batch_stride_b, p.ldb, p.n, CS_OPERAND_ROW)) {
    // Columns stack: B[l] column j is column l*n + j of one k x (batch*n) matrix.
    q.n = p.n * p.batch;
  } else {
    return p;
  }
  q.batch = 1;
  q.batch_stride_a = q.batch_stride_b = q.batch_stride_c = q.batch_stride_d = 0;
  return q;
}

// The problem as the kernel computes it: `p` itself (batches folded, above), or for a
// column-major D its transpose (m and n, A and B swapped; D^T is row-major with D's
// leading dimension).
static cs_problem cs_effective(const cs_problem& problem)
{
#if CS_CHAIN_EPI && CS_CHAIN_C_OPERAND >= 0
  // The chain's matrix operand in C's place (beta is 0: the caller checks): read like C.
  cs_problem with_c = problem;
  cs_operand const& o = problem.operands[CS_CHAIN_C_OPERAND];
  with_c.c = o.ptr;
  with_c.ldc = o.ld;
  with_c.batch_stride_c = o.batch_stride;
  with_c.beta = 1.0f;
  cs_problem const p = cs_fold_batch(with_c);
#else
  cs_problem const p = cs_fold_batch(problem);
#endif
  if constexpr (!kSwap) {
    return p;
  } else {
    cs_problem q = p;
    q.m = p.n;
    q.n = p.m;
    q.a = p.b;
    q.b = p.a;
    q.lda = p.ldb;
    q.ldb = p.lda;
    q.batch_stride_a = p.batch_stride_b;
    q.batch_stride_b = p.batch_stride_a;
    q.layout_a = kAKMajor ? CS_LAYOUT_ROW : CS_LAYOUT_COL;
    q.layout_b = kBKMajor ? CS_LAYOUT_COL : CS_LAYOUT_ROW;
    q.layout_cd = kKernDColMajor ? CS_LAYOUT_COL : CS_LAYOUT_ROW;
    return q;
  }
}

static int32_t cs_gemm_check_effective(const cs_problem& p, bool check_pointers);

// ---------------------------------------------------------------------------------------
// fp32: K-major copies of MN-major operands (see CS_F32_KMAJOR_COPY)
// ---------------------------------------------------------------------------------------

// A copy's rows: K padded to 4 floats (16 bytes, a TMA stride); the padding is never read
// (the TMA tensor's extent is K).
static inline int64_t cs_kpad(int64_t k) { return (k + 3) / 4 * 4; }
static inline size_t cs_round256(size_t x) { return (x + 255) / 256 * 256; }
// A K-major fp32 operand whose rows TMA cannot address (a leading dimension or batch
// stride off 16 bytes, as in A @ B with K = 2949) is copied too, into rows of K padded to
// 16 bytes: one pass over it instead of the fallback GEMM.
static inline bool cs_rows_unaligned(int64_t ld, int64_t batch_stride, int64_t batch) {
  return ld % 4 != 0 || (batch > 1 && batch_stride % 4 != 0);
}
// Whether the kernel reads a copy of A (B): an MN-major operand always (kCopyA), a K-major
// one whose rows are unaligned.
// (A batch stride of 0 is one operand shared by several batches, which the kernel does
// not take; with one batch it is only unset, as the PyTorch operator leaves it.)
template <bool Copy, bool KMajor>
static inline bool cs_copy_needed(int64_t ld, int64_t batch_stride, int64_t batch) {
  return Copy || (CS_F32 && !CS_F16SPLIT && CS_F32_KMAJOR_COPY && KMajor && (batch == 1 || batch_stride != 0) &&
                  cs_rows_unaligned(ld, batch_stride, batch));
}
static inline bool cs_copy_a(const cs_problem& e) {
  return cs_copy_needed<kCopyA, kAKMajor>(e.lda, e.batch_stride_a, e.batch);
}
static inline bool cs_copy_b(const cs_problem& e) {
  return cs_copy_needed<kCopyB, kBKMajor>(e.ldb, e.batch_stride_b, e.batch);
}
[[maybe_unused]] static inline size_t cs_copy_bytes_a(const cs_problem& e) {
  return cs_copy_a(e) ? cs_round256(size_t(e.batch) * size_t(e.m) * size_t(cs_kpad(e.k)) * 4) : 0;
}
[[maybe_unused]] static inline size_t cs_copy_bytes_b(const cs_problem& e) {
  return cs_copy_b(e) ? cs_round256(size_t(e.batch) * size_t(e.n) * size_t(cs_kpad(e.k)) * 4) : 0;
}

#if CS_F16SPLIT
// 3xF16: the workspace holds A's hi and lo parts, B's, then each K-vector's largest |x|
// (cutesmith_sm90_3xf16.cuh), for the effective problem `e`.
struct CsSplit {
  cutlass::half_t *a_hi, *a_lo, *b_hi, *b_lo;
  float *amax_a, *amax_b;
  int64_t kp;   // a part's row: K padded to 8 halves
};
static inline size_t cs_split_part_bytes(const cs_problem& e, int64_t rows) {
  return cs_round256(size_t(e.batch) * size_t(rows) * size_t(cs_3xf16::kpad(e.k)) * 2);
}
static inline size_t cs_split_amax_bytes(const cs_problem& e, int64_t rows) {
  return cs_round256(size_t(e.batch) * size_t(rows) * 4);
}
static CsSplit cs_split_at(const cs_problem& e, char* base)
{
  size_t const ha = cs_split_part_bytes(e, e.m), hb = cs_split_part_bytes(e, e.n);
  size_t const fa = cs_split_amax_bytes(e, e.m);
  CsSplit s;
  s.a_hi = reinterpret_cast<cutlass::half_t*>(base);
  s.a_lo = reinterpret_cast<cutlass::half_t*>(base + ha);
  s.b_hi = reinterpret_cast<cutlass::half_t*>(base + 2 * ha);
  s.b_lo = reinterpret_cast<cutlass::half_t*>(base + 2 * ha + hb);
  s.amax_a = reinterpret_cast<float*>(base + 2 * ha + 2 * hb);
  s.amax_b = reinterpret_cast<float*>(base + 2 * ha + 2 * hb + fa);
  s.kp = cs_3xf16::kpad(e.k);
  return s;
}
static inline size_t cs_copies_bytes(const cs_problem& e) {
  return 2 * cs_split_part_bytes(e, e.m) + 2 * cs_split_part_bytes(e, e.n) + cs_split_amax_bytes(e, e.m) +
         cs_split_amax_bytes(e, e.n);
}
// The split pass over both operands (as stored: K- or MN-major, any batch strides).
static cudaError_t cs_split_operands(const cs_problem& e, char* base, cudaStream_t stream)
{
  CsSplit const s = cs_split_at(e, base);
  cudaError_t err = cs_3xf16::split_operand(static_cast<const float*>(e.a), kAKMajor, e.lda, e.batch_stride_a, e.m,
                                            e.k, e.batch, reinterpret_cast<__half*>(s.a_hi),
                                            reinterpret_cast<__half*>(s.a_lo), s.amax_a, stream);
  if (err != cudaSuccess) return err;
  return cs_3xf16::split_operand(static_cast<const float*>(e.b), kBKMajor, e.ldb, e.batch_stride_b, e.n, e.k,
                                 e.batch, reinterpret_cast<__half*>(s.b_hi), reinterpret_cast<__half*>(s.b_lo),
                                 s.amax_b, stream);
}
#else
// Workspace for the copies of the effective problem `e` (0 without copies).
static inline size_t cs_copies_bytes(const cs_problem& e) { return cs_copy_bytes_a(e) + cs_copy_bytes_b(e); }
#endif

// The operands as the kernel reads them: `e` itself, with each copied operand replaced by
// its K-major copy in `copies` (A's, then B's); for 3xF16, by its hi part (the lo part and
// the scales are the mainloop's own arguments).
static cs_problem cs_kernel_view(const cs_problem& e, char* copies)
{
  cs_problem q = e;
#if CS_F16SPLIT
  CsSplit const s = cs_split_at(e, copies);
  q.a = s.a_hi;
  q.lda = s.kp;
  q.batch_stride_a = e.m * s.kp;
  q.b = s.b_hi;
  q.ldb = s.kp;
  q.batch_stride_b = e.n * s.kp;
  return q;
#endif
  int64_t const kp = cs_kpad(e.k);
  if (cs_copy_a(e)) {
    q.a = copies;
    q.lda = kp;
    q.batch_stride_a = e.m * kp;
  }
  if (cs_copy_b(e)) {
    q.b = copies + cs_copy_bytes_a(e);
    q.ldb = kp;
    q.batch_stride_b = e.n * kp;
  }
  return q;
}

// out[b][r][k] = x[b * bs + k * ld + r] for r < rows, k < kk: an MN-major operand (rows
// contiguous) into K-major rows of kp floats. 32 x 32 tiles through shared memory, both
// the reads and the writes coalesced.
__global__ void cs_kmajor_copy(const float* __restrict__ x, int64_t ld, int64_t bs, int64_t rows, int64_t kk,
                               int64_t kp, float* __restrict__ out)
{
  __shared__ float tile[32][33];
  int64_t const b = blockIdx.z;
  int64_t const r0 = int64_t(blockIdx.x) * 32, k0 = int64_t(blockIdx.y) * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    int64_t const k = k0 + i, r = r0 + threadIdx.x;
    if (k < kk && r < rows) tile[i][threadIdx.x] = x[b * bs + k * ld + r];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    int64_t const r = r0 + i, k = k0 + threadIdx.x;
    if (r < rows && k < kk) out[(b * rows + r) * kp + k] = tile[threadIdx.x][i];
  }
}

// The same transpose with 16-byte global loads and stores, for a source whose lines and
// batches start on 16-byte boundaries (ld and bs multiples of 4, x 16-byte aligned; the
// rows of kp floats always are). A 32 x 32 tile, 256 threads: each loads 4 consecutive r
// of one k as a float4 and stores 4 consecutive k of one r as a float4. With the tile's
// rows padded to 33 floats, both passes through shared memory are free of bank conflicts
// (a warp's 32 scalar accesses of one pass fall on 32 distinct banks). Elements past rows
// or kk go one by one.
__global__ void __launch_bounds__(256) cs_kmajor_copy4(const float* __restrict__ x, int64_t ld, int64_t bs,
                                                       int64_t rows, int64_t kk, int64_t kp,
                                                       float* __restrict__ out)
{
  __shared__ float tile[32][33];   // [k][r]
  int64_t const b = blockIdx.z;
  int64_t const r0 = int64_t(blockIdx.x) * 32, k0 = int64_t(blockIdx.y) * 32;
  int const t = threadIdx.x;
  {
    int const k = t / 8, r4 = (t % 8) * 4;
    int64_t const gk = k0 + k, gr = r0 + r4;
    const float* src = x + b * bs + gk * ld + gr;
    if (gk < kk && gr + 3 < rows) {
      float4 const v = __ldg(reinterpret_cast<const float4*>(src));
      tile[k][r4] = v.x;
      tile[k][r4 + 1] = v.y;
      tile[k][r4 + 2] = v.z;
      tile[k][r4 + 3] = v.w;
    } else if (gk < kk) {
      for (int j = 0; j < 4 && gr + j < rows; ++j) tile[k][r4 + j] = src[j];
    }
  }
  __syncthreads();
  {
    int const r = t / 8, k4 = (t % 8) * 4;
    int64_t const gr = r0 + r, gk = k0 + k4;
    if (gr >= rows) return;
    float* dst = out + (b * rows + gr) * kp + gk;
    if (gk + 3 < kk) {
      *reinterpret_cast<float4*>(dst) = make_float4(tile[k4][r], tile[k4 + 1][r], tile[k4 + 2][r], tile[k4 + 3][r]);
    } else {
      for (int j = 0; j < 4 && gk + j < kk; ++j) dst[j] = tile[k4 + j][r];
    }
  }
}

// out[b][r][k] = x[b * bs + r * ld + k] for r < rows, k < kk: a K-major operand with
// unaligned rows into rows of kp floats. Consecutive threads copy consecutive k (both
// sides coalesced); the grid strides over the batches' rows.
__global__ void cs_krow_copy(const float* __restrict__ x, int64_t ld, int64_t bs, int64_t rows, int64_t batch,
                             int64_t kk, int64_t kp, float* __restrict__ out)
{
  for (int64_t row = blockIdx.y; row < batch * rows; row += gridDim.y) {
    int64_t const b = row / rows, r = row - b * rows;
    const float* src = x + b * bs + r * ld;
    float* dst = out + row * kp;
    for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < kk; k += int64_t(gridDim.x) * blockDim.x)
      dst[k] = src[k];
  }
}

// Whether a source can be copied: `inner` contiguous elements a line, ld at least that.
static inline bool cs_copy_source_ok(const void* x, int64_t ld, int64_t inner, bool check_pointers) {
  return ld >= inner && (!check_pointers || x != nullptr);
}

// One operand's copy: a transpose (MN-major) or a row copy (K-major, unaligned rows).
template <bool KMajor>
static void cs_copy_operand(const void* x, int64_t ld, int64_t bs, int64_t rows, const cs_problem& e,
                            float* out, cudaStream_t stream)
{
  int64_t const kp = cs_kpad(e.k);
  if constexpr (KMajor) {
    dim3 const grid(unsigned(std::min<int64_t>((e.k + 255) / 256, 8)),
                    unsigned(std::min<int64_t>(e.batch * rows, 65535)));
    cs_krow_copy<<<grid, 256, 0, stream>>>(static_cast<const float*>(x), ld, bs, rows, e.batch, e.k, kp, out);
  } else {
    dim3 const grid(unsigned((rows + 31) / 32), unsigned((e.k + 31) / 32), unsigned(e.batch));
    bool const vec = CS_F32_COPY_VEC && ld % 4 == 0 && bs % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0;
    if (vec)
      cs_kmajor_copy4<<<grid, 256, 0, stream>>>(static_cast<const float*>(x), ld, bs, rows, e.k, kp, out);
    else
      cs_kmajor_copy<<<grid, dim3(32, 8), 0, stream>>>(static_cast<const float*>(x), ld, bs, rows, e.k, kp, out);
  }
}

[[maybe_unused]] static cudaError_t cs_copy_operands(const cs_problem& e, char* copies, cudaStream_t stream)
{
  if (cs_copy_a(e))
    cs_copy_operand<kAKMajor>(e.a, e.lda, e.batch_stride_a, e.m, e, reinterpret_cast<float*>(copies), stream);
  if (cs_copy_b(e))
    cs_copy_operand<kBKMajor>(e.b, e.ldb, e.batch_stride_b, e.n, e,
                              reinterpret_cast<float*>(copies + cs_copy_bytes_a(e)), stream);
  return cudaGetLastError();
}

// Everything the TMA descriptors and CUTLASS need; CS_OK when this kernel handles `p`
// (in this build's storage orders). Every failure that make_tma_copy would assert on is
// rejected here first.
static int32_t cs_gemm_check(const cs_problem& p, bool check_pointers)
{
  if (p.layout_a != kLayoutA || p.layout_b != kLayoutB || p.layout_cd != kLayoutCD)
    return CS_ERR_UNSUPPORTED;
#if CS_CHAIN_EPI && CS_CHAIN_C_OPERAND >= 0
  // C's place is taken by the chain's matrix operand.
  if (p.beta != 0.0f || p.num_operands <= CS_CHAIN_C_OPERAND) return CS_ERR_UNSUPPORTED;
#endif
  cs_problem const e = cs_effective(p);
#if CS_F16SPLIT
  // The split pass: one CTA a K-vector (K-major), or 32 x 32 tiles with K / 32 along y and
  // the batch along z (MN-major); sources read in place.
  if (int64_t(e.batch) * std::max(e.m, e.n) > 0x7fffffffLL || (e.k + 31) / 32 > 65535 || e.batch > 65535)
    return CS_ERR_UNSUPPORTED;
  if (!cs_copy_source_ok(e.a, e.lda, kAKMajor ? e.k : e.m, check_pointers) ||
      !cs_copy_source_ok(e.b, e.ldb, kBKMajor ? e.k : e.n, check_pointers))
    return CS_ERR_UNSUPPORTED;
#endif
  if (cs_copy_a(e) || cs_copy_b(e)) {
    // The transposes' grids: K / 32 blocks along y, the batch along z.
    if ((e.k + 31) / 32 > 65535 || e.batch > 65535) return CS_ERR_UNSUPPORTED;
    if (cs_copy_a(e) && !cs_copy_source_ok(e.a, e.lda, kAKMajor ? e.k : e.m, check_pointers))
      return CS_ERR_UNSUPPORTED;
    if (cs_copy_b(e) && !cs_copy_source_ok(e.b, e.ldb, kBKMajor ? e.k : e.n, check_pointers))
      return CS_ERR_UNSUPPORTED;
  }
  // The kernel's view, the copies at a stand-in (aligned, non-null) address.
  return cs_gemm_check_effective(cs_kernel_view(e, reinterpret_cast<char*>(uintptr_t(256))), check_pointers);
}

static int32_t cs_gemm_check_effective(const cs_problem& p, bool check_pointers)
{
  constexpr int64_t kMaxInt = 0x7fffffffLL;

#if CS_FUSED_BIAS_ACT
  // The bias is the chain's one operand (a row of the operand type, shared by every
  // batch); the activation is the build's (from the workload block, or -DCS_ACT checked
  // against the problem's when compiled alone).
  if (p.family != CS_FAMILY_GEMM && p.family != CS_FAMILY_GEMM_BIAS_ACT) return CS_ERR_UNSUPPORTED;
  if (p.num_operands != 1 || p.operands[0].kind != CS_OPERAND_ROW ||
      p.operands[0].dtype != kDtypeCD || p.operands[0].batch_stride != 0)
    return CS_ERR_UNSUPPORTED;
#ifndef CS_WL_BIAS_ACT
  if (p.activation != CS_ACT) return CS_ERR_UNSUPPORTED;
#endif
#elif CS_CHAIN_EPI
  // The chain runs in the epilogue and reads its operands at logical coordinates.
  if (p.family != CS_FAMILY_GEMM && p.family != CS_FAMILY_GEMM_BIAS_ACT) return CS_ERR_UNSUPPORTED;
  if (cs_fallback::chain_check<cs_chain>(p, check_pointers) != CS_OK) return CS_ERR_UNSUPPORTED;
#else
  // No epilogue chain in this build.
  if (p.family != kFamily || p.num_operands != 0) return CS_ERR_UNSUPPORTED;
#if defined(CS_CHAIN_DEFINED)
  if (!cs_chain::kIdentity) return CS_ERR_UNSUPPORTED;
#endif
#endif
  if (p.dtype_ab != kDtypeAB || p.dtype_cd != kDtypeCD || p.dtype_acc != CS_DTYPE_F32)
    return CS_ERR_UNSUPPORTED;

  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.k == 0) return CS_ERR_UNSUPPORTED;                   // would need a beta*C-only path
#if CS_F32 && CS_F32_TERMS == 3
  // 3xTF32 drops up to about 2^-20 of every product (lo*lo, lo's rounding), where fp32
  // rounds each to 2^-24: with only a few products a dot, that is the whole error, several
  // times fp32's. H100 (bench/fp32-tiles-h100.md run 21), RMS error against cuBLAS fp32's:
  // 4.9x at K = 7, 2.7-2.8x at 16, 1.9-2.3x at 24, 1.8x at 32. Smaller K go to the
  // fallback (fp32 FMAs), whose work is small there.
  if (p.k < CS_F32_MIN_K) return CS_ERR_UNSUPPORTED;
#endif
  if (p.m > kMaxInt || p.n > kMaxInt || p.k > kMaxInt || p.batch > kMaxInt) return CS_ERR_UNSUPPORTED;
  bool const has_c = (p.beta != 0.0f);

  // Mainloop (TMA): each operand's contiguous extent a multiple of 16 bytes, its leading
  // dimension (the stride of its other extent) a 16-byte multiple and at least that
  // extent. A (m x k): k contiguous when K-major, m otherwise; B (k x n): k or n.
  int64_t const a_inner = kKernAKMajor ? p.k : p.m, a_outer = kKernAKMajor ? p.m : p.k;
  int64_t const b_inner = kKernBKMajor ? p.k : p.n, b_outer = kKernBKMajor ? p.n : p.k;
  // (fp32: the 3xTF32 mainloop reads a ragged extent with TMA's zero fill; only the
  // strides must be 16-byte multiples.)
  if (!CS_F32 && (a_inner % kAlignAB != 0 || b_inner % kAlignAB != 0)) return CS_ERR_UNSUPPORTED;
  if (p.lda < a_inner || !cs_tma_stride_ok(p.lda)) return CS_ERR_UNSUPPORTED;
  if (p.ldb < b_inner || !cs_tma_stride_ok(p.ldb)) return CS_ERR_UNSUPPORTED;
  if (p.lda > INT64_MAX / a_outer || p.ldb > INT64_MAX / b_outer) return CS_ERR_UNSUPPORTED;
  // Broadcast operands (batch stride 0) would need a stride-0 TMA dimension: not handled.
  if (!cs_tma_stride_ok(cs_batch_stride(p, p.batch_stride_a, p.lda, a_outer)) ||
      (p.batch > 1 && p.batch_stride_a == 0)) return CS_ERR_UNSUPPORTED;
  if (!cs_tma_stride_ok(cs_batch_stride(p, p.batch_stride_b, p.ldb, b_outer)) ||
      (p.batch > 1 && p.batch_stride_b == 0)) return CS_ERR_UNSUPPORTED;

  // Epilogue: the kernel's D (and C) has d_inner contiguous elements per line (n, or m
  // with CS_SWAP_AB) and d_outer lines.
  int64_t const d_inner = kKernDColMajor ? p.m : p.n, d_outer = kKernDColMajor ? p.n : p.m;
  if (p.ldd < d_inner) return CS_ERR_UNSUPPORTED;
  if (has_c && p.ldc < d_inner) return CS_ERR_UNSUPPORTED;
  if (p.batch > 1 && p.batch_stride_d == 0) return CS_ERR_UNSUPPORTED;   // D batches would race
#if !CS_EPI_ALIGN1
  // TMA store of D / load of C: 16-byte lines (CUTLASS also checks the contiguous extent
  // % 8) and strides.
  if (d_inner % kAlignCD != 0) return CS_ERR_UNSUPPORTED;
  if (!cs_tma_stride_cd_ok(p.ldd)) return CS_ERR_UNSUPPORTED;
  if (p.ldd > INT64_MAX / d_outer) return CS_ERR_UNSUPPORTED;
  if (!cs_tma_stride_cd_ok(cs_batch_stride(p, p.batch_stride_d, p.ldd, d_outer))) return CS_ERR_UNSUPPORTED;
  if (has_c) {
    if (!cs_tma_stride_cd_ok(p.ldc)) return CS_ERR_UNSUPPORTED;
    if (p.ldc > INT64_MAX / d_outer) return CS_ERR_UNSUPPORTED;
    if (!cs_tma_stride_cd_ok(cs_batch_stride(p, p.batch_stride_c, p.ldc, d_outer)) ||
        (p.batch > 1 && p.batch_stride_c == 0)) return CS_ERR_UNSUPPORTED;
  }
#endif

  if (check_pointers) {
    if (p.a == nullptr || p.b == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    if (!cs_aligned16(p.a) || !cs_aligned16(p.b)) return CS_ERR_UNSUPPORTED;
    if (has_c && p.c == nullptr) return CS_ERR_UNSUPPORTED;
#if !CS_EPI_ALIGN1
    if (!cs_aligned16(p.d)) return CS_ERR_UNSUPPORTED;
    if (has_c && !cs_aligned16(p.c)) return CS_ERR_UNSUPPORTED;
#endif
#if CS_FUSED_BIAS_ACT
    // The bias row is read with 16-byte vectors.
    if (p.operands[0].ptr == nullptr || !cs_aligned16(p.operands[0].ptr)) return CS_ERR_UNSUPPORTED;
#endif
  }
  return CS_OK;
}

// ---------------------------------------------------------------------------------------
// Host side: CUTLASS arguments
// ---------------------------------------------------------------------------------------

// An operand's CuTe stride: (ld, 1, L) when K-major, (1, ld, L) when MN-major.
template <bool KMajor, class Stride>
static void cs_set_stride(Stride& d, int64_t ld, int64_t batch_stride)
{
  if constexpr (KMajor) {
    get<0>(d) = ld;
  } else {
    get<1>(d) = ld;
  }
  get<2>(d) = batch_stride;
}

static typename Gemm::Arguments cs_make_arguments(const cs_problem& problem, char* copies)
{
  cs_problem const p = cs_kernel_view(cs_effective(problem), copies);
#if CS_F16SPLIT
  CsSplit const split = cs_split_at(cs_effective(problem), copies);
  typename CollectiveMainloop::Arguments const mainloop{
      split.a_hi, split.a_lo, p.lda, p.batch_stride_a, split.b_hi, split.b_lo, p.ldb, p.batch_stride_b,
      split.amax_a, split.amax_b};
#endif
  int const M = int(p.m);
  int const N = int(p.n);
  int const K = int(p.k);
  int const L = int(p.batch);
  bool const has_c = (p.beta != 0.0f);

  // A: (M,K,L), B: (N,K,L).
  StrideA dA{};
  StrideB dB{};
  cs_set_stride<kKernAKMajor>(dA, p.lda, cs_batch_stride(p, p.batch_stride_a, p.lda, kKernAKMajor ? p.m : p.k));
  cs_set_stride<kKernBKMajor>(dB, p.ldb, cs_batch_stride(p, p.batch_stride_b, p.ldb, kKernBKMajor ? p.n : p.k));
  // D and C: (ld, 1, L) row-major, (1, ld, L) column-major (CS_SWAP_AB).
  int64_t const d_outer = kKernDColMajor ? p.n : p.m;
  StrideD dD{};
  cs_set_stride<!kKernDColMajor>(dD, p.ldd, cs_batch_stride(p, p.batch_stride_d, p.ldd, d_outer));
  // Without a source (beta == 0) C is never read: point it at D so that the (unused) TMA
  // descriptor of C is built from a valid, aligned tensor.
  StrideC dC{};
  cs_set_stride<!kKernDColMajor>(dC, has_c ? p.ldc : p.ldd,
                                 has_c ? cs_batch_stride(p, p.batch_stride_c, p.ldc, d_outer) : get<2>(dD));
  ElementCD const* ptr_c = has_c ? static_cast<ElementCD const*>(p.c)
                                 : static_cast<ElementCD const*>(p.d);

  cutlass::KernelHardwareInfo const hw_info = cs_sm90::hw_info(p);

  typename Gemm::Arguments args{
      L > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, L},
#if CS_F16SPLIT
      mainloop,
#else
      {static_cast<ElementAB const*>(p.a), dA, static_cast<ElementAB const*>(p.b), dB},
#endif
      {{}, ptr_c, dC, static_cast<ElementCD*>(p.d), dD},
      hw_info};

  // fp8: the math uses scale_a * A and scale_b * B (1 for other types).
  ElementScalar const alpha = ElementScalar(p.alpha * p.scale_a * p.scale_b);
  ElementScalar const beta = ElementScalar(p.beta);
  // An fp8 D: D = scale_d * chain(z), or without a chain scale_d * alpha and scale_d * beta.
  [[maybe_unused]] float const scale_out = kFp8D ? p.scale_d : 1.0f;
#if CS_CHAIN_EPI
  cs_evt::ChainArguments chain{};
  for (int i = 0; i < CS_MAX_OPERANDS; ++i) chain.operands[i] = p.operands[i];
  chain.layout_cd = problem.layout_cd;
  chain.scale_out = scale_out;
  if (p.batch != problem.batch) {   // cs_effective stacked the batches
    chain.batch_m = problem.m;
    chain.batch_n = problem.n;
  }
#if CS_CHAIN_C_OPERAND >= 0
  // The tree's arguments, children first: alpha * acc, C (the matrix operand), the chain.
  args.epilogue.thread = {
      {                       // alpha * acc
        {{alpha}},            //   alpha
        {},                   //   acc
        {}                    //   multiplies
      },
      {},                     // C
      chain                   // the chain node
  };
  (void)beta;
#else
  // The tree's arguments, children first: beta * C + (alpha * acc), then the chain node.
  args.epilogue.thread = {
      {                       // beta * C + (alpha * acc)
        {{beta}},             //   beta
        {},                   //   C
        {                     //   alpha * acc
          {{alpha}},          //     alpha
          {},                 //     acc
          {}                  //     multiplies
        },
        {}                    //   multiply_add
      },
      chain                   // the chain node
  };
#endif
#else
  args.epilogue.thread.alpha = alpha * scale_out;
  args.epilogue.thread.beta  = beta * scale_out;
#endif
#if CS_FUSED_BIAS_ACT
  args.epilogue.thread.bias_ptr = static_cast<ElementBias const*>(p.operands[0].ptr);
  // dBias (0, _1, 0) or (_1, 0, 0): one value per column of D, the same for every row
  // and batch.
  get<2>(args.epilogue.thread.dBias) = 0;
#if CS_ACT == 2
#ifdef CS_WL_BIAS_ACT
  args.epilogue.thread.activation.leaky_alpha = ElementCompute(CS_WL_BIAS_ACT_P0);
#else
  args.epilogue.thread.activation.leaky_alpha = ElementCompute(p.act_alpha);
#endif
#endif
#endif

  cs_sm90::scheduler_options(args, CS_SWIZZLE, CS_RASTER);
  return args;
}

// cutlass::Status -> cs_status / cudaError_t
static int32_t cs_status_of(cutlass::Status s)
{
  switch (s) {
    case cutlass::Status::kSuccess:            return CS_OK;
    case cutlass::Status::kErrorWorkspaceNull: return CS_ERR_WORKSPACE;
    case cutlass::Status::kErrorInternal: {
      // A failed cudaFuncSetAttribute or launch; CUTLASS has already cleared the error.
      cudaError_t const e = cudaGetLastError();
      return int32_t(e != cudaSuccess ? e : cudaErrorUnknown);
    }
    default:                                   return CS_ERR_UNSUPPORTED;
  }
}

// ---------------------------------------------------------------------------------------
// ABI entry points
// ---------------------------------------------------------------------------------------

// The fallback takes what this build's family takes (and the same activation).
static int32_t cs_fallback_check(const cs_problem& p, bool check_pointers)
{
#if CS_FUSED_BIAS_ACT && defined(CS_WL_BIAS_ACT)
  // The workload's chain (bias, then the activation) runs in the fallback's epilogue.
  if (p.family != CS_FAMILY_GEMM && p.family != CS_FAMILY_GEMM_BIAS_ACT) return CS_ERR_UNSUPPORTED;
#elif CS_FUSED_BIAS_ACT
  if (p.family != CS_FAMILY_GEMM_BIAS_ACT || p.activation != CS_ACT) return CS_ERR_UNSUPPORTED;
#elif CS_CHAIN_EPI
  if (p.family != CS_FAMILY_GEMM && p.family != CS_FAMILY_GEMM_BIAS_ACT) return CS_ERR_UNSUPPORTED;
#else
  if (p.family != CS_FAMILY_GEMM) return CS_ERR_UNSUPPORTED;
#endif
  return cs_fallback::check<FallbackElement, FallbackCD, cs_chain>(p, check_pointers);
}

CS_EXPORT uint32_t cutesmith_abi_version(void)
{
  return CS_ABI_VERSION;
}

CS_EXPORT int32_t cutesmith_workspace_bytes(const cs_problem* problem, uint64_t* bytes)
{
  if (bytes != nullptr) *bytes = 0;
  if (problem == nullptr || bytes == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_UNSUPPORTED;
  if (cs_gemm_check(*problem, /*check_pointers=*/false) != CS_OK)
    return cs_fallback_check(*problem, /*check_pointers=*/false);   // 0 bytes on the fallback
  if (problem->m == 0 || problem->n == 0 || problem->batch == 0) return CS_OK;

  typename Gemm::Arguments args = cs_make_arguments(*problem, nullptr);   // pointers may be NULL here
  if (Gemm::can_implement(args) != cutlass::Status::kSuccess)
    return cs_fallback_check(*problem, /*check_pointers=*/false);
  // CUTLASS's workspace, then the operands' K-major copies (fp32, MN-major operands).
  *bytes = uint64_t(cs_round256(Gemm::get_workspace_size(args)) + cs_copies_bytes(cs_effective(*problem)));
  return CS_OK;
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  int32_t const status = cs_gemm_check(*problem, /*check_pointers=*/true);
  if (status != CS_OK) {
    // What TMA and this epilogue cannot take (K or ld not a multiple of 8, misaligned
    // pointers, broadcast batches) runs on the predicated fallback: slower, never wrong.
    if (cs_fallback_check(*problem, /*check_pointers=*/true) != CS_OK) return status;
    return cs_fallback::launch<FallbackElement, FallbackCD, cs_chain>(*problem, stream);
  }
  if (problem->m == 0 || problem->n == 0 || problem->batch == 0) return CS_OK;

  cs_problem const effective = cs_effective(*problem);
  size_t const copies_bytes = cs_copies_bytes(effective);
  typename Gemm::Arguments args = cs_make_arguments(*problem, nullptr);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    if (cs_fallback_check(*problem, /*check_pointers=*/true) != CS_OK) return CS_ERR_UNSUPPORTED;
    return cs_fallback::launch<FallbackElement, FallbackCD, cs_chain>(*problem, stream);
  }

  size_t const cutlass_bytes = Gemm::get_workspace_size(args);
  size_t const workspace_bytes = cs_round256(cutlass_bytes) + copies_bytes;
  if (workspace_bytes > 0 &&
      (problem->workspace == nullptr || problem->workspace_bytes < workspace_bytes))
    return CS_ERR_WORKSPACE;
  void* workspace = cutlass_bytes > 0 ? problem->workspace : nullptr;
  if (copies_bytes > 0) {
    // MN-major fp32 operands: their K-major copies first, on the same stream (16-byte
    // aligned: TMA reads them).
    if (!cs_aligned16(problem->workspace)) return CS_ERR_WORKSPACE;
    char* const copies = static_cast<char*>(problem->workspace) + cs_round256(cutlass_bytes);
#if CS_F16SPLIT
    cudaError_t const e = cs_split_operands(effective, copies, stream);
#else
    cudaError_t const e = cs_copy_operands(effective, copies, stream);
#endif
    if (e != cudaSuccess) return int32_t(e);
    args = cs_make_arguments(*problem, copies);
  }

  cutlass::Status s = gemm.initialize(args, workspace, stream);
  if (s != cutlass::Status::kSuccess) return cs_status_of(s);
  s = gemm.run(stream);
  return cs_status_of(s);
}
