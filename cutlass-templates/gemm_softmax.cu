// cutesmith template: GEMM then row softmax / log-softmax (CS_FAMILY_GEMM_SOFTMAX), the
// attention-score and classifier-head pattern, on Hopper (sm_90a).
//
//   Z[l] = alpha * A[l] (m x k) * B[l] (k x n) + beta * C[l] (m x n)      for l in [0, batch)
//   X[l][i, j] = chain(Z[l][i, j])            (the workload's ops before the softmax, if any:
//                                              a bias, a scale, an activation, ... as
//                                              struct cs_chain, see cutesmith_chain.cuh)
//   D[l][i, :] = softmax(X[l][i, :])          (p.log_softmax == 0)
//   D[l][i, :] = log_softmax(X[l][i, :])      (p.log_softmax != 0)
//   D[l][i]    = after(reduce(X[l][i, :]))    (CS_FAMILY_GEMM_REDUCE: sum, mean, max, min,
//                                              logsumexp or L2 norm by p.reduce, then the
//                                              `cs_after` ops; D is m x 1, no C)
//   D[l][i, g] = chain(norm(before(Z[l][i, g])))  (CS_FAMILY_GEMM_NORM: each row of Z split
//                                              into p.norm_groups groups g of adjacent
//                                              values, each through the `cs_before` ops,
//                                              then normalized by p.norm (p.norm_eps); here
//                                              the cs_chain runs after the norm, its
//                                              operands from slot kFirst, the [[before]]
//                                              ops' from 0, all indexed like D; with
//                                              p.norm == CS_NORM_BATCH each column of a
//                                              batch item's m rows is normalized instead:
//                                              BatchNorm's training-mode statistics)
//
// A and B are bf16, f16 or f32 (CS_WL_DTYPE_AB; default bf16, or f16 with -DCS_GEMM_FP16;
// f32 runs the GEMM on the 3xTF32 mainloop of cutesmith_sm90_3xtf32.cuh, fp32-accurate,
// cooperative schedule, TILE_K 16 and tiles of at most 192 columns), each
// stored row- or column-major (CS_WL_LAYOUT_A / CS_WL_LAYOUT_B: all four combinations;
// default A row, B column). C and D are row-major, of type CS_WL_DTYPE_CD (bf16, f16 or
// f32; default: the type of A and B). Column-major D returns CS_ERR_UNSUPPORTED.
//
// Strategy: two kernels on the given stream (the harness times them as one).
//   1. A CUTLASS 3 GEMM (the Sm90 collective builders, as in gemm_sm90_cutlass3_ws.cu: a
//      warp-specialized persistent TMA + WGMMA mainloop with clusters and multicast, and
//      the TMA epilogue) writes alpha * A * B in fp32 to the workspace (batch * m rows of
//      ldw = round_up(n, 4) floats). The epilogue has no source (void C): beta * C is
//      added in stage 2, which reads each row anyway, so C needs no TMA alignment and a
//      batch stride of 0 (one C for every batch) works too.
//      TMA needs 16-byte aligned rows: the GEMM covers M' = m (A row-major) or m rounded
//      down to 8 (A column-major, where M is the contiguous dimension) rows and N' = n
//      rounded down to 8 columns; the few outputs outside (columns [N', n) of every row,
//      rows [M', m)) are computed by a small warp-per-output dot-product kernel, so any m
//      and n work. The TMA GEMM needs K a multiple of 16 bytes where it is the contiguous
//      dimension of A or B (A row-major or B column-major), every leading dimension and
//      batch stride of A and B a multiple of 16 bytes and no operand shared by the batch
//      (cs_tma_ok); otherwise that kernel computes every output (slow, but any shape has a
//      kernel). A and B must then be 16-byte aligned (else CS_ERR_UNSUPPORTED).
//   2. A row softmax kernel reads each fp32 row once (16-byte loads: the workspace rows
//      are aligned), adds beta * C, applies the chain, and writes D in one pass with the
//      row in registers:
//      one warp per row for n <= 1024, one CTA per row for n <= 32768 (8 float4 per
//      thread, up to 1024 threads), else a CTA per row with an online (max, sum) pass
//      and a second pass re-reading the row (from L2, just read). exp is ex2.approx of
//      x log2e - max log2e (as in softmax_rows.cu); log_softmax is (x log2e - max log2e
//      - log2(sum)) ln 2. D is stored 4 elements at a time when its rows allow it.
// The exponentiated intermediate (CS_EXP16=1, used for softmax with a 16-bit D, no C term,
// and a GEMM covering every output: n a multiple of 8, and m as well when A is
// column-major): the GEMM's epilogue (CsExpEpilogue) applies the chain (if any) to alpha
// times the accumulator, giving x, and turns its tile into
// e = 2^(x log2e - mL_t), with mL_t the tile row's max times log2e, writes e as f16 (every
// e is in [0, 1]: relative error 2^-11, absolute below 3e-8 where it is subnormal) and
// (mL_t, sum of the tile row's e in fp32) per row and column tile. Stage 2 combines a
// row's (mL_t, s_t) into the row's (mL, s) and writes D = e * 2^(mL_t - mL) / s. That
// writes and reads 2 instead of 4 bytes an element; the per-tile statistics are 8 bytes
// per row and column tile.
// The fp32 intermediate costs one fp32 write and read of m x n: a row fits one CTA's tile only
// when n <= CS_TILE_N, and a fused single-kernel version for that case (the softmax in
// the epilogue: max and sum across the consumer warpgroups of one tile) is future work.
//
// Parameters (override with -DNAME=VALUE):
//   CS_SCHEDULE   0    0: KernelTmaWarpSpecializedCooperative, 1: ...Pingpong
//   CS_TILE_M     128  CTA tile rows (cooperative: a multiple of 128; ping-pong: of 64)
//   CS_TILE_N     256  CTA tile columns (128 for ping-pong): a multiple of 8, <= 256
//   CS_TILE_K     64   K per pipeline stage (64 16-bit values: one 128-byte swizzle row;
//                      f32: 16 floats on 3xTF32, one 64-byte row; 32 halves on 3xF16)
//   CS_CLUSTER_M  2    cluster size along M (B tiles multicast across it)
//   CS_CLUSTER_N  1    cluster size along N (A tiles multicast across it)
//   CS_SWIZZLE    1    tile scheduler max_swizzle_size (1, 2, 4, 8)
//   CS_RASTER     0    tile raster order: 0 heuristic, 1 along M, 2 along N
//   CS_STREAMK    0    1: the stage-1 GEMM on CUTLASS's stream-K tile scheduler (cooperative
//                      only), for problems of fewer tiles than a few waves of SMs (M = 128
//                      rows against a long K: 171 tiles of 128 x 192 at 128 x 32768 x 32768;
//                      between half and all of the SMs' count of tiles it chains, see
//                      tuner::STREAMK_CHAIN); its partials use the workspace
//   CS_EXP16      1    1: the exponentiated f16 intermediate below where it applies; 0: the
//                      fp32 workspace always

// Device code is built without assert(): a call to __assertfail inside the consumer loop
// makes ptxas serialize every WGMMA (see gemm_sm90_cutlass3_ws.cu). Host asserts stay;
// cs_check rejects what make_tma_copy would assert on first.
#if defined(__CUDA_ARCH__) && !defined(NDEBUG)
#define NDEBUG
#endif

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/tensor.hpp>

#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cutlass/kernel_hardware_info.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include "cutesmith_abi.h"
#include "cutesmith_chain.cuh"       // the ops before the softmax (the identity without them)

// gemm_reduce: the ops on each reduced value (the workload's [[after]] table, written above
// this include by cutesmith), else none.
#ifndef CS_AFTER_DEFINED
struct cs_after {
  static constexpr bool kIdentity = true;
  CS_HD static float apply(float z) { return z; }
};
#endif
#include "cutesmith_edges.cuh"
#include "cutesmith_sm90_epilogue.cuh"   // CsExpEpilogue's base
#include "cutesmith_sm90_host.cuh"
#include "cutesmith_sm90_3xtf32.cuh"   // the f32 GEMM's mainloops
#include "cutesmith_sm90_3xf16.cuh"

#if defined(CS_WL_DTYPE_AB) && CS_WL_DTYPE_AB == 0
#define CS_F32 1           // f32 operands: the 3xTF32 mainloop
#else
#define CS_F32 0
#endif
// f32: 0 the 3xTF32 mainloop, 1 3xF16 (operands split into scaled fp16 parts by a pass
// before the GEMM; see gemm_sm90_cutlass3_ws.cu).
#ifndef CS_F32_MODE
#define CS_F32_MODE 0
#endif
#define CS_F16SPLIT (CS_F32 && CS_F32_MODE == 1)

using namespace cute;

// ---------------------------------------------------------------------------------------
// Strategy parameters
// ---------------------------------------------------------------------------------------

#ifndef CS_SCHEDULE
#define CS_SCHEDULE 0
#endif
#ifndef CS_TILE_M
#define CS_TILE_M 128
#endif
#ifndef CS_TILE_N
#if CS_SCHEDULE == 1
#define CS_TILE_N 128
#else
#define CS_TILE_N 256
#endif
#endif
#ifndef CS_TILE_K
#if CS_F16SPLIT
#define CS_TILE_K 32       // 32 halves: one 64-byte swizzle row (four tiles a stage)
#elif CS_F32
#define CS_TILE_K 16       // 16 floats: one 64-byte swizzle row, as the GEMM family's 3xTF32.
                           // 32 left room for two stages of a 128 x 128 tile beside the
                           // epilogue, 16 for five: at 128 x 16384 x 16384 (KernelBench 2/66) the
                           // GEMM ran 990 us at 2 stages against 695 for the GEMM family's
                           // (H200, ncu; bench/f32-small-m-h200.md)
#else
#define CS_TILE_K 64
#endif
#endif
#ifndef CS_CLUSTER_M
#define CS_CLUSTER_M 2
#endif
#ifndef CS_CLUSTER_N
#define CS_CLUSTER_N 1
#endif
#ifndef CS_SWIZZLE
#define CS_SWIZZLE 1
#endif
#ifndef CS_RASTER
#define CS_RASTER 0
#endif
#ifndef CS_STREAMK
#define CS_STREAMK 0
#endif
#ifndef CS_EXP16
#define CS_EXP16 (CS_F32 ? 0 : 1)
#endif
// f32: the 3xTF32 mainloop's promotion interval by K: CS_F32_PROMOTE_MIN_K, _LARGE_K and
// _MAX (defaults in cutesmith_sm90_3xtf32.cuh).

// ---------------------------------------------------------------------------------------
// Workload: element types and layouts
// ---------------------------------------------------------------------------------------

#if defined(CS_WL_DTYPE_AB)
static constexpr int kDtypeAB = CS_WL_DTYPE_AB;
#elif defined(CS_GEMM_FP16)
static constexpr int kDtypeAB = CS_DTYPE_F16;
#else
static constexpr int kDtypeAB = CS_DTYPE_BF16;
#endif
#if defined(CS_WL_DTYPE_CD)
static constexpr int kDtypeCD = CS_WL_DTYPE_CD;
#else
static constexpr int kDtypeCD = kDtypeAB;
#endif
#if defined(CS_WL_LAYOUT_A)
static constexpr int kLayoutA = CS_WL_LAYOUT_A;
#else
static constexpr int kLayoutA = CS_LAYOUT_ROW;
#endif
#if defined(CS_WL_LAYOUT_B)
static constexpr int kLayoutB = CS_WL_LAYOUT_B;
#else
static constexpr int kLayoutB = CS_LAYOUT_COL;
#endif

// What this build can run at all (an instance for another workload still compiles, and
// every launch returns CS_ERR_UNSUPPORTED).
static constexpr bool kTypesOk =
    (kDtypeAB == CS_DTYPE_BF16 || kDtypeAB == CS_DTYPE_F16 || (CS_F32 && kDtypeAB == CS_DTYPE_F32)) &&
    (kDtypeCD == CS_DTYPE_BF16 || kDtypeCD == CS_DTYPE_F16 || kDtypeCD == CS_DTYPE_F32);

// A and B in CUTLASS's types (the same bits as __nv_bfloat16 / __half); D and C in CUDA's.
using ElementAB = std::conditional_t<CS_F32, float,
                  std::conditional_t<kDtypeAB == CS_DTYPE_F16, cutlass::half_t, cutlass::bfloat16_t>>;
using ElementCD = std::conditional_t<kDtypeCD == CS_DTYPE_F32, float,
                  std::conditional_t<kDtypeCD == CS_DTYPE_F16, __half, __nv_bfloat16>>;
using ElementAcc = float;
using ElementWs  = float;   // the GEMM's output: Z without beta * C

using LayoutA  = std::conditional_t<kLayoutA == CS_LAYOUT_ROW, cutlass::layout::RowMajor,
                                    cutlass::layout::ColumnMajor>;
using LayoutB  = std::conditional_t<kLayoutB == CS_LAYOUT_ROW, cutlass::layout::RowMajor,
                                    cutlass::layout::ColumnMajor>;
using LayoutWs = cutlass::layout::RowMajor;

static constexpr int kAlignAB = 128 / cutlass::sizeof_bits<ElementAB>::value;   // 16 bytes: 8 (4 floats)
static constexpr int kAlignWs = 128 / cutlass::sizeof_bits<ElementWs>::value;   // 4

static constexpr int kTileM    = CS_TILE_M;
static constexpr int kTileN    = CS_TILE_N;
static constexpr int kTileK    = CS_TILE_K;
static constexpr int kClusterM = CS_CLUSTER_M;
static constexpr int kClusterN = CS_CLUSTER_N;

static_assert(CS_SCHEDULE == 0 || CS_SCHEDULE == 1, "CS_SCHEDULE: 0 cooperative, 1 ping-pong");
static_assert(CS_SCHEDULE == 1 || kTileM % 128 == 0, "cooperative: TILE_M must be a multiple of 128");
static_assert(kTileM % 64 == 0, "TILE_M must be a multiple of 64");
static_assert(kTileN % 8 == 0 && kTileN <= 256, "TILE_N must be a multiple of 8, at most 256");
static_assert(CS_F16SPLIT ? kTileK % 32 == 0 : kTileK * int(sizeof(ElementAB)) % (CS_F32 ? 64 : 128) == 0,
              "TILE_K must span whole swizzle rows (128 bytes; 64 for fp32: 16 floats, or 32 halves on 3xF16)");
static_assert(!CS_F32 || (CS_SCHEDULE == 0 && kTileM == 128 && kTileN <= 192),
              "f32 (3xTF32): cooperative 128-row tiles of at most 192 columns (two accumulator sets a thread)");
static_assert(!(CS_F32 && CS_EXP16), "f32: CS_EXP16 is the 16-bit GEMM's path");
static_assert(kClusterM * kClusterN <= 8 && kClusterM >= 1 && kClusterN >= 1, "portable cluster sizes only");
static_assert(CS_RASTER >= 0 && CS_RASTER <= 2, "CS_RASTER: 0 heuristic, 1 along M, 2 along N");
static_assert(CS_EXP16 == 0 || CS_EXP16 == 1, "CS_EXP16: 0 or 1");

using TileShape    = Shape<Int<kTileM>, Int<kTileN>, Int<kTileK>>;
using ClusterShape = Shape<Int<kClusterM>, Int<kClusterN>, _1>;

// ---------------------------------------------------------------------------------------
// Stage 1: the GEMM (alpha * A * B -> fp32 workspace)
// ---------------------------------------------------------------------------------------

#if CS_SCHEDULE == 1
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#else
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#endif

// The epilogue of each GEMM here: D = alpha * acc of type ElementOut, row-major, no source
// (ElementC void), stored by TMA.
template <class ElementOut, int Align>
using CsEpilogueOf = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto,
    ElementAcc, float,
    void, LayoutWs, Align,
    ElementOut, LayoutWs, Align,
    EpilogueSchedule,
    cutlass::epilogue::fusion::ScaledAcc<ElementOut, float, float>
  >::CollectiveOp;

#if CS_F16SPLIT
// f32 as 3xF16 (cutesmith_sm90_3xf16.cuh): four fp16 tiles a stage, promoted every k-tile
// below CS_F32_PROMOTE_MIN_K.
template <class Epilogue>
using CsMainloopFor = cs_3xf16::Mainloop<
    cs_3xf16::MainloopSm90Tma3xF16<
        cs_sm90::stages_fit<typename Epilogue::SharedStorage>(cs_3xf16::stage_bytes<kTileM, kTileN, kTileK>()),
        ClusterShape, MainloopSchedule>,
    TileShape, /*Promote*/ 1, CS_F32_PROMOTE_LARGE_K, CS_F32_PROMOTE_MIN_K, CS_F32_PROMOTE_MAX>;
#elif CS_F32
// f32: the 3xTF32 mainloop (hi and lo TF32 parts of each operand, three WGMMAs a k-step,
// fp32 promotion), with as many stages as fit beside Epilogue. Its stage: the TMA stage and
// the lo buffers (and hi ones for an MN-major operand, which the split transposes).
static constexpr int kF32StageBytes =
    cs_3xtf32::stage_bytes<kTileM, kTileN, kTileK, kLayoutA == CS_LAYOUT_ROW, kLayoutB == CS_LAYOUT_COL>();
template <class Epilogue>
using CsMainloopFor = cs_3xtf32::Mainloop<
    cs_3xtf32::MainloopSm90Tma3xTF32<cs_sm90::stages_fit<typename Epilogue::SharedStorage>(kF32StageBytes),
                                     ClusterShape, MainloopSchedule>,
    TileShape, cutlass::detail::TagToStrideA_t<LayoutA>, cutlass::detail::TagToStrideB_t<LayoutB>,
    /*Terms*/ 3, /*Promote*/ 1, /*Split*/ 1, /*SplitSync*/ (kTileN >= 192 ? 1 : 0), CS_F32_PROMOTE_LARGE_K,
    CS_F32_PROMOTE_MIN_K, CS_F32_PROMOTE_MAX>;
#else
// CUTLASS's mainloop, with as many stages as fit beside Epilogue.
template <class Epilogue>
using CsMainloopFor = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementAB, LayoutA, kAlignAB,
    ElementAB, LayoutB, kAlignAB,
    ElementAcc,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    MainloopSchedule
  >::CollectiveOp;
#endif

using CollectiveEpilogue = CsEpilogueOf<ElementWs, kAlignWs>;
using CollectiveMainloop = CsMainloopFor<CollectiveEpilogue>;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>,   // (M,N,K,L)
    CollectiveMainloop,
    CollectiveEpilogue,
#if CS_STREAMK
    cutlass::gemm::StreamKScheduler>;
#else
    cutlass::gemm::PersistentScheduler>;
#endif
static_assert(CS_STREAMK == 0 || (CS_STREAMK == 1 && CS_SCHEDULE == 0), "CS_STREAMK: 0, or 1 with the cooperative schedule");

using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

static constexpr float kLog2e = 1.4426950408889634f;
static constexpr float kLn2   = 0.69314718055994531f;

#if CS_EXP16
// ---------------------------------------------------------------------------------------
// Stage 1, exponentiated: e = 2^(alpha z log2e - mL_t) in f16, and each tile row's (mL_t, s_t)
// ---------------------------------------------------------------------------------------

using ElementE = cutlass::half_t;
static constexpr int kAlignE = 128 / cutlass::sizeof_bits<ElementE>::value;   // 8

__device__ __forceinline__ float cs_ex2_e(float x)
{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// What the epilogue needs beside CUTLASS's own arguments.
struct CsExpArgs {
  float2* stats = nullptr;   // [(l * m + row) * tiles_n + tile]: (mL_t, s_t)
  int64_t tiles_n = 0;       // column tiles per row: ceil(n / TILE_N)
  float alpha_log2e = 0.0f;  // alpha * log2(e) (the identity chain)
  float alpha = 0.0f;        // alpha (a chain: x = chain(alpha * acc), then times log2(e))
  cs_problem prob{};         // the chain's operands
};

// CUTLASS's collective epilogue Inner (alpha 1, f16 D), after the tile's row statistics:
// store() takes the accumulators of one output tile (after any stream-K fixup), scales
// them by alpha log2e, takes each tile row's max over the columns inside n (the four
// threads of a quad hold a row's values in the WGMMA accumulator layout: rows
// warp * 16 + lane / 4 (+ 8), columns 8 j + 2 (lane % 4) (+ 1)), replaces every value by
// 2^(x - max) (columns past n by 0), sums them, writes (max, sum) of each row inside m, and
// hands the values to Inner, which writes them by TMA.
template <class Inner>
struct CsExpEpilogue : cs_sm90::EpilogueWith<Inner, CsExpArgs> {
  using Base = cs_sm90::EpilogueWith<Inner, CsExpArgs>;
  using TensorStorage = typename Inner::TensorStorage;
  using Base::Base;

  template <class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class AccEngine, class AccLayout,
            class TiledMma>
  CUTLASS_DEVICE auto store(typename Inner::LoadPipeline load_pipeline,
                            typename Inner::LoadPipelineState load_pipe_consumer_state,
                            typename Inner::StorePipeline store_pipeline,
                            typename Inner::StorePipelineState store_pipe_producer_state,
                            ProblemShapeMNKL problem_shape_mnkl, TileShapeMNK tile_shape_MNK,
                            TileCoordMNKL tile_coord_mnkl, cute::Tensor<AccEngine, AccLayout> accumulators,
                            TiledMma tiled_mma, int thread_idx, TensorStorage& shared_tensors, int subtile_idx = -1) {
    auto [M, N, K, L] = problem_shape_mnkl;
    auto [m_coord, n_coord, k_coord, l_coord] = tile_coord_mnkl;
    int const row0 = int(m_coord) * int(size<0>(tile_shape_MNK));
    int const col0 = int(n_coord) * int(size<1>(tile_shape_MNK));
    Tensor cD = make_identity_tensor(take<0, 2>(tile_shape_MNK));      // (BLK_M,BLK_N) -> (m,n)
    Tensor tCcD = tiled_mma.get_thread_slice(thread_idx).partition_C(cD);   // (MMA,MMA_M,MMA_N)
    static_assert(decltype(size(tCcD))::value == decltype(size(accumulators))::value, "one coordinate per value");
    constexpr int kMmaM = decltype(size<1>(accumulators))::value;
    constexpr int kSlots = 2 * kMmaM;   // rows per thread: two per 64-row WGMMA
    // The slot of value (v, mm, nn): its MMA_M index and which of the atom's two row halves.
    auto slot = [&](int v, int mm, int nn) { return 2 * mm + ((int(get<0>(tCcD(v, mm, nn))) >> 3) & 1); };

    float mx[kSlots], sum[kSlots];
    int row_of[kSlots];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kSlots; ++i) {
      mx[i] = __int_as_float(0xff800000);
      sum[i] = 0.0f;
      row_of[i] = 0;
    }
    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < kMmaM; ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int nn = 0; nn < size<2>(accumulators); ++nn) {
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < size<0>(accumulators); ++v) {
          auto const c = tCcD(v, mm, nn);
          int const sl = slot(v, mm, nn);
          row_of[sl] = int(get<0>(c));
          int const col = col0 + int(get<1>(c));
          float x = __int_as_float(0xff800000);
          if (col < int(N)) {
            if constexpr (cs_chain::kIdentity) {
              x = accumulators(v, mm, nn) * this->extra_.alpha_log2e;
            } else {
              // The chain's operands at the element (a row past m reads row m - 1: its
              // value is never stored).
              int const row = cute::min(row0 + int(get<0>(c)), int(M) - 1);
              x = cs_chain_at<cs_chain>(this->extra_.prob, accumulators(v, mm, nn) * this->extra_.alpha,
                                        int64_t(l_coord), row, col) * kLog2e;
            }
          }
          accumulators(v, mm, nn) = x;
          mx[sl] = fmaxf(mx[sl], x);
        }
      }
    }
    // A tile row whose every value is -inf (past n, or masked by the chain: a causal
    // mask's tiles right of the diagonal) exponentiates against 0, not its own max, so
    // its values are 2^-inf = 0 and not 2^(-inf + inf) = NaN; its stats are (-inf, 0).
    float base[kSlots];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kSlots; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      base[i] = mx[i] == __int_as_float(0xff800000) ? 0.0f : mx[i];
    }
    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < kMmaM; ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int nn = 0; nn < size<2>(accumulators); ++nn) {
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < size<0>(accumulators); ++v) {
          int const sl = slot(v, mm, nn);
          float const e = cs_ex2_e(accumulators(v, mm, nn) - base[sl]);   // 2^-inf = 0
          accumulators(v, mm, nn) = e;
          sum[sl] += e;
        }
      }
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kSlots; ++i) {
      sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
      sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
    }
    if ((threadIdx.x & 3) == 0) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kSlots; ++i) {
        int const row = row0 + row_of[i];
        if (row < int(M))
          this->extra_.stats[(int64_t(l_coord) * int64_t(M) + row) * this->extra_.tiles_n + int64_t(n_coord)] =
              make_float2(mx[i], sum[i]);
      }
    }
    return Inner::store(load_pipeline, load_pipe_consumer_state, store_pipeline, store_pipe_producer_state,
                        problem_shape_mnkl, tile_shape_MNK, tile_coord_mnkl, accumulators, tiled_mma, thread_idx,
                        shared_tensors, subtile_idx);
  }

};

using CollectiveEpilogueE = CsExpEpilogue<CsEpilogueOf<ElementE, kAlignE>>;
using CollectiveMainloopE = CsMainloopFor<CollectiveEpilogueE>;

using GemmKernelE = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, CollectiveMainloopE, CollectiveEpilogueE, cutlass::gemm::PersistentScheduler>;

using GemmE = cutlass::gemm::device::GemmUniversalAdapter<GemmKernelE>;
using StrideE = typename GemmKernelE::StrideD;
#endif

using StrideA  = typename GemmKernel::StrideA;   // (M,K,L): (lda, _1, L) or (_1, lda, L)
using StrideB  = typename GemmKernel::StrideB;   // (N,K,L): (ldb, _1, L) or (_1, ldb, L)
using StrideWs = typename GemmKernel::StrideD;   // (M,N,L): (ldw, _1, m * ldw)

// A CuTe stride with the leading dimension in its dynamic mode (0 or 1) and the batch
// stride in mode 2.
template <class Stride>
static Stride cs_stride(int64_t ld, int64_t batch_stride)
{
  Stride s{};
  if constexpr (cute::is_static<std::remove_cv_t<std::remove_reference_t<decltype(get<0>(s))>>>::value)
    get<1>(s) = ld;
  else
    get<0>(s) = ld;
  get<2>(s) = batch_stride;
  return s;
}

// ---------------------------------------------------------------------------------------
// Edge outputs: the columns and rows the TMA GEMM leaves out, one warp per output
// ---------------------------------------------------------------------------------------

struct CsEdgeArgs {
  const ElementAB* a; int64_t lda, sa; bool a_row;
  const ElementAB* b; int64_t ldb, sb; bool b_row;
  float* ws; int64_t ldw, sw;
  int m, n, k, m_gemm, n_gemm;
  int64_t per_batch;   // outputs per batch: m * (n - n_gemm) + (m - m_gemm) * n_gemm
  int64_t total;       // batch * per_batch
  float alpha;
};

__global__ void __launch_bounds__(256)
cs_edge_kernel(CsEdgeArgs e)
{
  int const lane = int(threadIdx.x & 31);
  cs_edges::for_each_output(e.m, e.n, e.m_gemm, e.n_gemm, e.per_batch, e.total,
                            [&](int64_t bz, int row, int col) {
    const ElementAB* a = e.a + bz * e.sa;
    const ElementAB* b = e.b + bz * e.sb;
    float acc = 0.0f;
    for (int kk = lane; kk < e.k; kk += 32) {
      float const x = float(e.a_row ? a[int64_t(row) * e.lda + kk] : a[int64_t(kk) * e.lda + row]);
      float const y = float(e.b_row ? b[int64_t(kk) * e.ldb + col] : b[int64_t(col) * e.ldb + kk]);
      acc = fmaf(x, y, acc);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) e.ws[bz * e.sw + int64_t(row) * e.ldw + col] = e.alpha * acc;
  });
}

// ---------------------------------------------------------------------------------------
// Stage 2: row softmax / log-softmax from the workspace into D
// ---------------------------------------------------------------------------------------

static constexpr int kWarpRowMax = 1024;    // n <= this: one warp per row
static constexpr int kCtaVecs    = 8;       // CTA per row: float4 vectors per thread
static constexpr int kCtaRowMax  = 1024 * kCtaVecs * 4;   // 32768: rows held in registers
static constexpr int kStreamThreads = 1024;

__device__ __forceinline__ float cs_neg_inf() { return __int_as_float(0xff800000); }

// 2^x: MUFU.EX2 (relative error ~2^-22); ex2(-inf) = +0.
__device__ __forceinline__ float cs_ex2(float x)
{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float cs_to_f32(float v) { return v; }
__device__ __forceinline__ float cs_to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float cs_to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T cs_from_f32(float v);
template <> __device__ __forceinline__ float cs_from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half cs_from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 cs_from_f32<__nv_bfloat16>(float v)
{
  return __float2bfloat16_rn(v);
}

// Four consecutive elements of D (the address aligned to 4 elements): 16 or 8 bytes.
__device__ __forceinline__ uint32_t cs_pack2(__nv_bfloat16 /*tag*/, float x, float y)
{
  __nv_bfloat162 const h = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t cs_pack2(__half /*tag*/, float x, float y)
{
  __half2 const h = __floats2half2_rn(x, y);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ void cs_store4(float* p, const float (&f)[4])
{
  __stcs(reinterpret_cast<float4*>(p), make_float4(f[0], f[1], f[2], f[3]));
}
template <class T16>
__device__ __forceinline__ void cs_store4(T16* p, const float (&f)[4])
{
  __stcs(reinterpret_cast<uint2*>(p),
         make_uint2(cs_pack2(T16{}, f[0], f[1]), cs_pack2(T16{}, f[2], f[3])));
}

struct CsRowArgs {
  const float* ws; int64_t ldw;        // Z rows (alpha * A * B), batch-major
  int64_t rows; int m; int n;          // rows = batch * m
  const ElementCD* c; int64_t ldc, sc; float beta;
  ElementCD* d; int64_t ldd, sd;
  bool d_vec;                          // D rows allow 4-element stores
  cs_problem prob;                     // the chain's operands (a chain before the softmax)
};

// The partial state of a row: mL = max(x) log2e (or -inf when empty) and
// s = sum(2^(x log2e - mL)). Combining is symmetric (butterflies leave the same value in
// every lane).
__device__ __forceinline__ void cs_combine(float& m, float& s, float m2, float s2)
{
  float const M  = fmaxf(m, m2);
  float const Me = M == cs_neg_inf() ? 0.0f : M;
  s = s * cs_ex2(m - Me) + s2 * cs_ex2(m2 - Me);
  m = M;
}

__device__ __forceinline__ void cs_warp_reduce(float& m, float& s)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float const m2 = __shfl_xor_sync(0xffffffffu, m, o);
    float const s2 = __shfl_xor_sync(0xffffffffu, s, o);
    cs_combine(m, s, m2, s2);
  }
}

__device__ __forceinline__ void cs_block_reduce(float& m, float& s, float2* red)
{
  cs_warp_reduce(m, s);
  int const warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  if (lane == 0) red[warp] = make_float2(m, s);
  __syncthreads();
  float2 const v = lane < int(blockDim.x >> 5) ? red[lane] : make_float2(cs_neg_inf(), 0.0f);
  m = v.x;
  s = v.y;
  cs_warp_reduce(m, s);
}

// An element of the finished row: softmax 2^(x log2e - mL) / s, log_softmax
// (x log2e - mL - log2 s) ln 2.
template <bool LOG>
struct CsRowOut {
  float ml, k;
  __device__ __forceinline__ CsRowOut(float mL, float s)
      : ml(mL == cs_neg_inf() ? 0.0f : mL), k(LOG ? log2f(s) : 1.0f / s) {}
  __device__ __forceinline__ float operator()(float x) const
  {
    if constexpr (LOG) return (fmaf(x, kLog2e, -ml) - k) * kLn2;
    else               return cs_ex2(fmaf(x, kLog2e, -ml)) * k;
  }
};

// Vector j (elements 4j..4j+3) of row r of batch bz: the chain of Z + beta * C, -inf past
// the end. kLastRead: the row is not read again (evict-first load), else a plain load that
// leaves it in L2.
template <bool kLastRead = true>
__device__ __forceinline__ void cs_row_vec(const CsRowArgs& a, const float* z, const ElementCD* c,
                                           int64_t bz, int64_t r, int j, float (&f)[4])
{
  const float4* zv = reinterpret_cast<const float4*>(z) + j;
  float4 const v = kLastRead ? __ldcs(zv) : __ldg(zv);
  f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    int const col = 4 * j + e;
    if (col >= a.n) {
      f[e] = cs_neg_inf();
      continue;
    }
    if (a.beta != 0.0f) f[e] = fmaf(a.beta, cs_to_f32(c[col]), f[e]);
    if constexpr (!cs_chain::kIdentity) f[e] = cs_chain_at<cs_chain>(a.prob, f[e], bz, r, col);
  }
}

// Writes vector j of the finished row.
template <bool LOG>
__device__ __forceinline__ void cs_row_store(const CsRowArgs& a, ElementCD* d, int j, float (&f)[4],
                                             const CsRowOut<LOG>& out)
{
#pragma unroll
  for (int e = 0; e < 4; ++e) f[e] = out(f[e]);
  int const col = 4 * j;
  if (a.d_vec && col + 3 < a.n) {
    cs_store4(d + col, f);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (col + e < a.n) d[col + e] = cs_from_f32<ElementCD>(f[e]);
  }
}

// One row held in registers by G threads (g = 0..G-1), VPT float4 vectors each.
template <int VPT, bool LOG, class Reduce>
__device__ __forceinline__ void cs_row_in_registers(const CsRowArgs& a, int64_t row, int g, int G,
                                                    Reduce reduce)
{
  int64_t const bz = row / a.m, r = row - bz * a.m;
  const float* z = a.ws + row * a.ldw;
  const ElementCD* c = a.c + bz * a.sc + r * a.ldc;
  ElementCD* d = a.d + bz * a.sd + r * a.ldd;
  int const nv = (a.n + 3) / 4;

  float f[VPT][4];
  float mx = cs_neg_inf();
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    int const j = g + i * G;
    if (j < nv) {
      cs_row_vec(a, z, c, bz, r, j, f[i]);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) f[i][e] = cs_neg_inf();
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) mx = fmaxf(mx, f[i][e]);
  }
  float mL = mx == cs_neg_inf() ? mx : mx * kLog2e;
  float const ml = mL == cs_neg_inf() ? 0.0f : mL;
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < VPT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) s += cs_ex2(fmaf(f[i][e], kLog2e, -ml));

  reduce(mL, s);
  CsRowOut<LOG> const out(mL, s);
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    int const j = g + i * G;
    if (j < nv) cs_row_store<LOG>(a, d, j, f[i], out);
  }
}

// n <= kWarpRowMax: one warp per row, 8 rows per CTA, rows grid-strided.
template <int VPT, bool LOG>
__global__ void __launch_bounds__(256)
cs_softmax_warp_kernel(CsRowArgs a)
{
  int64_t const warps = int64_t(blockDim.x >> 5);
  int const lane = int(threadIdx.x & 31);
  for (int64_t row = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); row < a.rows;
       row += int64_t(gridDim.x) * warps)
    cs_row_in_registers<VPT, LOG>(a, row, lane, 32, [](float& m, float& s) { cs_warp_reduce(m, s); });
}

// n <= kCtaRowMax: one CTA per row, the row in registers.
template <bool LOG>
__global__ void __launch_bounds__(1024, 1)
cs_softmax_cta_kernel(CsRowArgs a)
{
  __shared__ float2 red[32];
  cs_row_in_registers<kCtaVecs, LOG>(a, int64_t(blockIdx.x), int(threadIdx.x), int(blockDim.x),
                                     [&](float& m, float& s) { cs_block_reduce(m, s, red); });
}

// Longer rows: one CTA per row, an online (max, sum) pass, then a pass that re-reads the
// row (still in L2) and writes D.
template <bool LOG>
__global__ void __launch_bounds__(kStreamThreads)
cs_softmax_stream_kernel(CsRowArgs a)
{
  __shared__ float2 red[32];
  int64_t const row = int64_t(blockIdx.x);
  int64_t const bz = row / a.m, r = row - bz * a.m;
  const float* z = a.ws + row * a.ldw;
  const ElementCD* c = a.c + bz * a.sc + r * a.ldc;
  ElementCD* d = a.d + bz * a.sd + r * a.ldd;
  int const nv = (a.n + 3) / 4;
  int const g = int(threadIdx.x), G = int(blockDim.x);

  float mL = cs_neg_inf(), s = 0.0f;
  for (int j = g; j < nv; j += G) {
    float f[4];
    cs_row_vec<false>(a, z, c, bz, r, j, f);
    float const cm = fmaxf(fmaxf(f[0], f[1]), fmaxf(f[2], f[3]));
    float const cmL = cm == cs_neg_inf() ? cm : cm * kLog2e;
    if (cmL > mL) {                 // new running max: rescale the running sum
      s *= cs_ex2(mL - cmL);
      mL = cmL;
    }
    float const ml = mL == cs_neg_inf() ? 0.0f : mL;
#pragma unroll
    for (int e = 0; e < 4; ++e) s += cs_ex2(fmaf(f[e], kLog2e, -ml));
  }
  cs_block_reduce(mL, s, red);
  CsRowOut<LOG> const out(mL, s);
  for (int j = g; j < nv; j += G) {
    float f[4];
    cs_row_vec(a, z, c, bz, r, j, f);
    cs_row_store<LOG>(a, d, j, f, out);
  }
}

template <bool LOG>
static cudaError_t cs_launch_rows(const CsRowArgs& a, cudaStream_t stream)
{
  int64_t const nv = (int64_t(a.n) + 3) / 4;
  if (a.n <= kWarpRowMax) {
    int64_t grid = (a.rows + 7) / 8;
    if (grid > 0x7fffffffLL) grid = 0x7fffffffLL;   // grid-stride covers the rest
    int64_t const vpt = (nv + 31) / 32;
    if (vpt <= 1)      cs_softmax_warp_kernel<1, LOG><<<unsigned(grid), 256, 0, stream>>>(a);
    else if (vpt <= 2) cs_softmax_warp_kernel<2, LOG><<<unsigned(grid), 256, 0, stream>>>(a);
    else if (vpt <= 4) cs_softmax_warp_kernel<4, LOG><<<unsigned(grid), 256, 0, stream>>>(a);
    else               cs_softmax_warp_kernel<8, LOG><<<unsigned(grid), 256, 0, stream>>>(a);
  } else if (a.n <= kCtaRowMax) {
    int64_t threads = ((nv + kCtaVecs - 1) / kCtaVecs + 31) / 32 * 32;
    cs_softmax_cta_kernel<LOG><<<unsigned(a.rows), unsigned(threads), 0, stream>>>(a);
  } else {
    cs_softmax_stream_kernel<LOG><<<unsigned(a.rows), kStreamThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------
// gemm_reduce's stage 2: one CTA of 256 threads a row of the fp32 product; each element
// through the chain, the row reduced (per-thread fp32 runs, then a shuffle and shared-
// memory tree; logsumexp as softmax's online (max log2e, sum of 2^(x log2e - max))),
// the `cs_after` ops on the result, one value written at D[b * sd + i * ldd].
// ---------------------------------------------------------------------------------------

static constexpr int kReduceThreads = 256;

// The reduction's partial state: (a, b) = (sum, -), (sum of squares, -), (extreme, -) or
// logsumexp's (mL, s); merged with cs_reduce_merge.
template <int KIND>
__device__ __forceinline__ void cs_reduce_merge(float& a, float& b, float a2, float b2)
{
  if constexpr (KIND == CS_REDUCE_MAX) a = fmaxf(a, a2);
  else if constexpr (KIND == CS_REDUCE_MIN) a = fminf(a, a2);
  else if constexpr (KIND == CS_REDUCE_LOGSUMEXP) cs_combine(a, b, a2, b2);
  else a += a2;
}

template <int KIND>
__global__ void __launch_bounds__(kReduceThreads)
cs_reduce_row_kernel(CsRowArgs a)
{
  __shared__ float2 red[kReduceThreads / 32];
  int64_t const row = int64_t(blockIdx.x);
  int64_t const bz = row / a.m, r = row - bz * a.m;
  const float4* z = reinterpret_cast<const float4*>(a.ws + row * a.ldw);
  int const nv = (a.n + 3) / 4;
  float s0 = KIND == CS_REDUCE_MAX || KIND == CS_REDUCE_LOGSUMEXP ? cs_neg_inf()
           : KIND == CS_REDUCE_MIN ? -cs_neg_inf() : 0.0f;
  float s1 = 0.0f;
  bool nan = false;
  for (int j = int(threadIdx.x); j < nv; j += kReduceThreads) {
    float4 const v = __ldcs(z + j);
    float const f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int const col = 4 * j + e;
      if (col >= a.n) break;
      float x = f[e];
      if constexpr (!cs_chain::kIdentity) x = cs_chain_at<cs_chain>(a.prob, x, bz, r, col);
      nan |= x != x;
      if constexpr (KIND == CS_REDUCE_L2) {
        s0 = fmaf(x, x, s0);
      } else if constexpr (KIND == CS_REDUCE_LOGSUMEXP) {
        float const xl = x * kLog2e;
        if (xl > s0) {
          s1 *= cs_ex2(s0 - xl);
          s0 = xl;
        }
        s1 += cs_ex2(xl - (s0 == cs_neg_inf() ? 0.0f : s0));
      } else {
        cs_reduce_merge<KIND>(s0, s1, x, 0.0f);
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    cs_reduce_merge<KIND>(s0, s1, __shfl_xor_sync(0xffffffffu, s0, o), __shfl_xor_sync(0xffffffffu, s1, o));
  int const warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  if (lane == 0) red[warp] = make_float2(s0, s1);
  nan = __syncthreads_or(nan) != 0;
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kReduceThreads / 32; ++w) cs_reduce_merge<KIND>(s0, s1, red[w].x, red[w].y);
  float y;
  if (nan) y = __int_as_float(0x7fc00000);
  else if constexpr (KIND == CS_REDUCE_MEAN) y = s0 / float(a.n);
  else if constexpr (KIND == CS_REDUCE_L2) y = sqrtf(s0);
  else if constexpr (KIND == CS_REDUCE_LOGSUMEXP) y = s0 == cs_neg_inf() ? s0 : (s0 + log2f(s1)) * kLn2;
  else y = s0;
  if constexpr (!cs_after::kIdentity) y = cs_after::apply(y);
  a.d[bz * a.sd + r * a.ldd] = cs_from_f32<ElementCD>(y);
}

static cudaError_t cs_launch_reduce(const CsRowArgs& a, int kind, cudaStream_t stream)
{
  unsigned const grid = unsigned(a.rows);
  switch (kind) {
    case CS_REDUCE_SUM:  cs_reduce_row_kernel<CS_REDUCE_SUM><<<grid, kReduceThreads, 0, stream>>>(a); break;
    case CS_REDUCE_MEAN: cs_reduce_row_kernel<CS_REDUCE_MEAN><<<grid, kReduceThreads, 0, stream>>>(a); break;
    case CS_REDUCE_MAX:  cs_reduce_row_kernel<CS_REDUCE_MAX><<<grid, kReduceThreads, 0, stream>>>(a); break;
    case CS_REDUCE_MIN:  cs_reduce_row_kernel<CS_REDUCE_MIN><<<grid, kReduceThreads, 0, stream>>>(a); break;
    case CS_REDUCE_LOGSUMEXP:
      cs_reduce_row_kernel<CS_REDUCE_LOGSUMEXP><<<grid, kReduceThreads, 0, stream>>>(a);
      break;
    default: cs_reduce_row_kernel<CS_REDUCE_L2><<<grid, kReduceThreads, 0, stream>>>(a); break;
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------
// gemm_norm's stage 2: each row of the fp32 product (+ beta * C) through the `cs_before`
// ops, split into p.norm_groups groups of L = n / groups adjacent values; each group's
// statistic (cs_norm: RMS, LAYER about the mean, two passes over the values in registers,
// with the first pass's rounding e = sum(x - mean) corrected as in norm_rows.cu; L2, L1),
// y = (x - shift) * scale, then cs_chain (the per-channel weight and bias: its ROW
// operands at the row's column), stored in D. A group is held by a team of threads:
//   L <= 8 x 32: T = 1..32 lanes of a warp (a power of two, 8 values each), teams side by
//                side in a warp, shuffles within the team;
//   L <= 16 x 1024: a CTA of T threads (16 values each), shuffles and shared memory;
//   longer: a CTA of 1024 threads, three sweeps of the group (its mean, the centered sum,
//           the write) re-reading the product (L2).
// A group's length a multiple of 4: each thread reads float4 vectors of the workspace and
// writes 4 elements of D at a time (where D's rows allow it); else element j of a group is
// read by thread j % T at step j / T (coalesced across the team, element by element).
// ---------------------------------------------------------------------------------------

#ifndef CS_BEFORE_DEFINED
#define CS_BEFORE_DEFINED 1
struct cs_before : cs_identity_chain {};
#endif

static constexpr int kNormWarpVals = 8;      // values a lane, warp teams
static constexpr int kNormCtaVals  = 16;     // values a thread, CTA teams
static constexpr int kNormStreamThreads = 1024;

struct CsNormArgs {
  CsRowArgs r;              // the product rows, C, D, the chain's operands
  int64_t segments;         // batch * m * groups
  int groups;
  int len;                  // L = n / groups
  int kind;                 // cs_norm
  float eps;
};

// The product z at column col of row r of batch bz, with beta * C added and the [[before]]
// ops applied.
__device__ __forceinline__ float cs_prod_in(const CsRowArgs& a, float z, int64_t bz, int64_t r, int col)
{
  if (a.beta != 0.0f) z = fmaf(a.beta, cs_to_f32(a.c[bz * a.sc + r * a.ldc + col]), z);
  if constexpr (!cs_before::kIdentity) z = cs_before_in<cs_before>(a.prob, z, bz, r, col, CS_LAYOUT_ROW);
  return z;
}

// x at column col of row `row` (batch bz, row r), read from the workspace.
__device__ __forceinline__ float cs_prod_x(const CsRowArgs& a, int64_t row, int64_t bz, int64_t r, int col)
{
  return cs_prod_in(a, a.ws[row * a.ldw + col], bz, r, col);
}

__device__ __forceinline__ float cs_norm_x(const CsNormArgs& a, int64_t row, int64_t bz, int64_t r, int col)
{
  return cs_prod_x(a.r, row, bz, r, col);
}

// The sum over a team of T threads: lanes of one warp (T <= 32, teams aligned in the
// warp), or the whole CTA (T = blockDim.x > 32) through `red` (32 floats).
__device__ __forceinline__ float cs_team_sum(float v, int T, float* red)
{
  int const width = T < 32 ? T : 32;
  for (int o = width >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (T > 32) {
    int const warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
    __syncthreads();                       // red's previous use is read
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = 0.0f;
    for (int w = 0; w < T / 32; ++w) v += red[w];
  }
  return v;
}

// The group's (shift, scale) from its values (x, valid where j < len), summed over the team.
template <int V>
__device__ __forceinline__ float2 cs_norm_stats(const CsNormArgs& a, const float (&x)[V], const bool (&in)[V], int T,
                                                float* red)
{
  float const L = float(a.len);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (in[i]) s += a.kind == CS_NORM_RMS || a.kind == CS_NORM_L2 ? x[i] * x[i] : a.kind == CS_NORM_L1 ? fabsf(x[i]) : x[i];
  s = cs_team_sum(s, T, red);
  if (a.kind == CS_NORM_LAYER) {
    float const mean = s / L;
    float q = 0.0f, e = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (in[i]) {
        float const d = x[i] - mean;
        q = fmaf(d, d, q);
        e += d;
      }
    q = cs_team_sum(q, T, red);
    e = cs_team_sum(e, T, red);
    // The mean's rounding: the centered values sum to e, not 0.
    float const m2 = fmaxf(q - e * e / L, 0.0f);
    return make_float2(mean + e / L, 1.0f / sqrtf(m2 / L + a.eps));
  }
  if (a.kind == CS_NORM_RMS) return make_float2(0.0f, 1.0f / sqrtf(s / L + a.eps));
  if (a.kind == CS_NORM_L2) return make_float2(0.0f, 1.0f / fmaxf(sqrtf(s), a.eps));
  return make_float2(0.0f, 1.0f / fmaxf(s, a.eps));
}

// Group `seg` held by a team of T threads (t = 0..T-1), V values each. VEC (a group's
// length a multiple of 4, so that every group starts on a 16-byte boundary of the
// workspace): thread t holds float4 vectors t, t + T, ... (16-byte loads, evict-first: the
// product is read once), and D takes 4-element stores where its rows allow them (d_vec);
// else element j of the group is read by thread j % T at step j / T.
template <int V, bool VEC>
__device__ __forceinline__ void cs_norm_group(const CsNormArgs& a, int64_t seg, bool live, int t, int T, float* red)
{
  static_assert(V % 4 == 0, "V: whole vectors");
  int64_t const row = live ? seg / a.groups : 0;
  int const g = live ? int(seg - row * a.groups) : 0;
  int64_t const bz = row / a.r.m, r = row - bz * a.r.m;
  int const col0 = g * a.len;
  float x[V];
  bool in[V];
  if constexpr (VEC) {
    const float4* z = reinterpret_cast<const float4*>(a.r.ws + row * a.r.ldw + col0);
#pragma unroll
    for (int q = 0; q < V / 4; ++q) {
      int const jv = t + q * T;
      bool const ok = live && 4 * jv < a.len;
      float4 const v = ok ? __ldcs(z + jv) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      float const f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int const col = col0 + 4 * jv + e;
        float xv = f[e];
        if (ok && a.r.beta != 0.0f) xv = fmaf(a.r.beta, cs_to_f32(a.r.c[bz * a.r.sc + r * a.r.ldc + col]), xv);
        if constexpr (!cs_before::kIdentity)
          if (ok) xv = cs_before_in<cs_before>(a.r.prob, xv, bz, r, col, CS_LAYOUT_ROW);
        x[4 * q + e] = ok ? xv : 0.0f;
        in[4 * q + e] = ok;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      int const j = t + i * T;
      in[i] = live && j < a.len;
      x[i] = in[i] ? cs_norm_x(a, row, bz, r, col0 + j) : 0.0f;
    }
  }
  float2 const ss = cs_norm_stats<V>(a, x, in, T, red);
  ElementCD* d = a.r.d + bz * a.r.sd + r * a.r.ldd + col0;
  if constexpr (VEC) {
    bool const vec_store = a.r.d_vec;   // col0 is a multiple of 4 here
#pragma unroll
    for (int q = 0; q < V / 4; ++q) {
      if (!in[4 * q]) continue;
      int const j = 4 * (t + q * T);
      float y[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        y[e] = (x[4 * q + e] - ss.x) * ss.y;
        if constexpr (!cs_chain::kIdentity) y[e] = cs_chain_at<cs_chain>(a.r.prob, y[e], bz, r, col0 + j + e);
      }
      if (vec_store) {
        cs_store4(d + j, y);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) d[j + e] = cs_from_f32<ElementCD>(y[e]);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (!in[i]) continue;
      int const j = t + i * T;
      float y = (x[i] - ss.x) * ss.y;
      if constexpr (!cs_chain::kIdentity) y = cs_chain_at<cs_chain>(a.r.prob, y, bz, r, col0 + j);
      d[j] = cs_from_f32<ElementCD>(y);
    }
  }
}

// Teams of T <= 32 lanes, 256 threads a CTA, groups grid-strided.
template <bool VEC>
__global__ void __launch_bounds__(256)
cs_norm_warp_kernel(CsNormArgs a, int T)
{
  int const per_cta = 256 / T;
  int const t = int(threadIdx.x) % T;
  for (int64_t base = int64_t(blockIdx.x) * per_cta; base < a.segments; base += int64_t(gridDim.x) * per_cta) {
    int64_t const seg = base + int(threadIdx.x) / T;
    cs_norm_group<kNormWarpVals, VEC>(a, seg, seg < a.segments, t, T, nullptr);   // warp-uniform loop
  }
}

// A CTA of T threads a group.
template <bool VEC>
__global__ void __launch_bounds__(1024, 1)
cs_norm_cta_kernel(CsNormArgs a)
{
  __shared__ float red[32];
  cs_norm_group<kNormCtaVals, VEC>(a, int64_t(blockIdx.x), true, int(threadIdx.x), int(blockDim.x), red);
}

// Longer groups: a CTA a group, three sweeps over it.
__global__ void __launch_bounds__(kNormStreamThreads)
cs_norm_stream_kernel(CsNormArgs a)
{
  __shared__ float red[32];
  int64_t const seg = int64_t(blockIdx.x);
  int64_t const row = seg / a.groups;
  int const g = int(seg - row * a.groups);
  int64_t const bz = row / a.r.m, r = row - bz * a.r.m;
  int const col0 = g * a.len, T = kNormStreamThreads;
  float const L = float(a.len);
  float s = 0.0f;
  for (int64_t jj = threadIdx.x; jj < a.len; jj += T) {
    int const j = int(jj);   // < len: the 64-bit step cannot wrap past len
    float const x = cs_norm_x(a, row, bz, r, col0 + j);
    s += a.kind == CS_NORM_RMS || a.kind == CS_NORM_L2 ? x * x : a.kind == CS_NORM_L1 ? fabsf(x) : x;
  }
  s = cs_team_sum(s, T, red);
  float shift = 0.0f, scale;
  if (a.kind == CS_NORM_LAYER) {
    float const mean = s / L;
    float q = 0.0f, e = 0.0f;
    for (int64_t jj = threadIdx.x; jj < a.len; jj += T) {
      int const j = int(jj);
      float const d = cs_norm_x(a, row, bz, r, col0 + j) - mean;
      q = fmaf(d, d, q);
      e += d;
    }
    q = cs_team_sum(q, T, red);
    e = cs_team_sum(e, T, red);
    shift = mean + e / L;
    scale = 1.0f / sqrtf(fmaxf(q - e * e / L, 0.0f) / L + a.eps);
  } else if (a.kind == CS_NORM_RMS) {
    scale = 1.0f / sqrtf(s / L + a.eps);
  } else if (a.kind == CS_NORM_L2) {
    scale = 1.0f / fmaxf(sqrtf(s), a.eps);
  } else {
    scale = 1.0f / fmaxf(s, a.eps);
  }
  ElementCD* d = a.r.d + bz * a.r.sd + r * a.r.ldd + col0;
  for (int64_t jj = threadIdx.x; jj < a.len; jj += T) {
    int const j = int(jj);
    float y = (cs_norm_x(a, row, bz, r, col0 + j) - shift) * scale;
    if constexpr (!cs_chain::kIdentity) y = cs_chain_at<cs_chain>(a.r.prob, y, bz, r, col0 + j);
    d[j] = cs_from_f32<ElementCD>(y);
  }
}

// ---------------------------------------------------------------------------------------
// gemm_norm with p.norm == CS_NORM_BATCH: each column of a batch item's m rows normalized
// (BatchNorm's training-mode statistics), then cs_chain (the per-feature weight and bias are
// its ROW operands, feature j being column j). Three launches, CTAs of 32 column lanes x 8
// row lanes, each lane VW = 4 adjacent columns (float4 loads of the workspace) where n % 4
// == 0, else 1:
//   1. cs_colnorm_part_kernel: a slice of at most 64 rows (8 values a thread, so that 4 CTAs
//      fit an SM): the slice's mean and its centered sum of squares M2 (the
//      second sweep over the registers, with the first sweep's rounding e = sum(x - mean)
//      corrected as the row path does);
//   2. cs_colnorm_stat_kernel: a warp a column merges its slices' (mean, M2) by Chan et
//      al.'s pairwise update, each lane a strided share, then a tree over the lanes, into
//      (mean, 1 / sqrt(M2 / m + eps));
//   3. cs_colnorm_apply_kernel: 32 rows a CTA, each lane's (mean, rstd) read once, then
//      y = (x - mean) * rstd, the chain, the store.
// ---------------------------------------------------------------------------------------

static constexpr int kColLanes = 32;      // column lanes a CTA (a warp)
static constexpr int kColR = 8;           // row lanes a CTA
static constexpr int kColSliceRows = 64;  // rows a slice: 8 a thread (4 CTAs an SM)
static constexpr int kColApplyRows = 32;  // rows an apply CTA covers in one step
static constexpr int64_t kColMaxSlices = 65535;

struct CsColNormArgs {
  CsRowArgs r;
  float2* part;      // [batch][slices][n]: each slice's (mean, centered sum of squares)
  float2* stat;      // [batch][n]: (mean, rstd)
  int slices;        // ceil(m / kColSliceRows)
  float eps;
};

// The VW values of row `row` (batch bz, row r) from column col: the product, beta * C, the
// [[before]] ops; 0 where !live. VW == 4: one float4 of the workspace (col % 4 == 0).
template <int VW>
__device__ __forceinline__ void cs_col_load(const CsRowArgs& a, int64_t row, int64_t bz, int64_t r, int col,
                                            bool live, float (&x)[VW])
{
  if constexpr (VW == 4) {
    float4 const v = live ? *reinterpret_cast<const float4*>(a.ws + row * a.ldw + col)
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
    if (!live) return;
#pragma unroll
    for (int e = 0; e < 4; ++e) x[e] = cs_prod_in(a, x[e], bz, r, col + e);
  } else {
    x[0] = live ? cs_prod_x(a, row, bz, r, col) : 0.0f;
  }
}

// Each lane's VW sums over the CTA's 8 row lanes.
template <int VW>
__device__ __forceinline__ void cs_col_sum(float (&v)[VW], float (*red)[kColLanes * 4 + 1], int tx, int ty)
{
  __syncthreads();                         // red's previous use is read
#pragma unroll
  for (int e = 0; e < VW; ++e) red[ty][tx * VW + e] = v[e];
  __syncthreads();
#pragma unroll
  for (int e = 0; e < VW; ++e) {
    float t = 0.0f;
#pragma unroll
    for (int i = 0; i < kColR; ++i) t += red[i][tx * VW + e];
    v[e] = t;
  }
}

template <int VW>
__global__ void __launch_bounds__(kColLanes * kColR)
cs_colnorm_part_kernel(CsColNormArgs a)
{
  __shared__ float red[kColR][kColLanes * 4 + 1];
  constexpr int kPer = kColSliceRows / kColR;
  int const tx = int(threadIdx.x) % kColLanes, ty = int(threadIdx.x) / kColLanes;
  int const col = (int(blockIdx.x) * kColLanes + tx) * VW;
  int const s = int(blockIdx.y);
  int64_t const bz = int64_t(blockIdx.z);
  int const r0 = s * kColSliceRows;
  int const r1 = min(a.r.m, r0 + kColSliceRows);
  bool const live = col < a.r.n;
  int64_t const row0 = bz * a.r.m;
  float x[kPer][VW];
  float sum[VW];
#pragma unroll
  for (int e = 0; e < VW; ++e) sum[e] = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    int const r = r0 + ty + i * kColR;
    cs_col_load<VW>(a.r, row0 + r, bz, r, col, live && r < r1, x[i]);
#pragma unroll
    for (int e = 0; e < VW; ++e) sum[e] += x[i][e];
  }
  float const cnt = float(r1 - r0);
  cs_col_sum<VW>(sum, red, tx, ty);
  float q[VW], c[VW];
#pragma unroll
  for (int e = 0; e < VW; ++e) {
    sum[e] /= cnt;                         // the mean
    q[e] = 0.0f;
    c[e] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (r0 + ty + i * kColR >= r1) continue;
#pragma unroll
    for (int e = 0; e < VW; ++e) {
      float const d = x[i][e] - sum[e];
      q[e] = fmaf(d, d, q[e]);
      c[e] += d;
    }
  }
  cs_col_sum<VW>(q, red, tx, ty);
  cs_col_sum<VW>(c, red, tx, ty);
  if (live && ty == 0) {
    float2* out = a.part + (bz * a.slices + s) * a.r.n + col;
#pragma unroll
    for (int e = 0; e < VW; ++e) out[e] = make_float2(sum[e] + c[e] / cnt, fmaxf(q[e] - c[e] * c[e] / cnt, 0.0f));
  }
}

// (count, mean, M2) of a set merged with another's (Chan, Golub and LeVeque).
__device__ __forceinline__ void cs_chan_merge(float& cnt, float& mean, float& m2, float nb, float mb, float qb)
{
  float const tot = cnt + nb;
  if (nb == 0.0f) return;
  float const d = mb - mean;
  mean = fmaf(d, nb / tot, mean);
  m2 += qb + d * d * (cnt * (nb / tot));
  cnt = tot;
}

__global__ void __launch_bounds__(256)
cs_colnorm_stat_kernel(CsColNormArgs a, int64_t columns)
{
  int64_t const i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int const lane = int(threadIdx.x & 31);
  if (i >= columns) return;                // whole warps leave together
  int64_t const bz = i / a.r.n, col = i - bz * a.r.n;
  float cnt = 0.0f, mean = 0.0f, m2 = 0.0f;
  for (int s = lane; s < a.slices; s += 32) {
    float2 const pm = a.part[(bz * a.slices + s) * a.r.n + col];
    int const rows = min(a.r.m - s * kColSliceRows, kColSliceRows);
    cs_chan_merge(cnt, mean, m2, float(rows), pm.x, pm.y);
  }
  for (int o = 16; o > 0; o >>= 1) {
    float const nb = __shfl_down_sync(0xffffffffu, cnt, o);
    float const mb = __shfl_down_sync(0xffffffffu, mean, o);
    float const qb = __shfl_down_sync(0xffffffffu, m2, o);
    cs_chan_merge(cnt, mean, m2, nb, mb, qb);
  }
  if (lane == 0) a.stat[i] = make_float2(mean, 1.0f / sqrtf(m2 / float(a.r.m) + a.eps));
}

// Rows blockIdx.y * 32 + ty + 8 i (i < 4), then every gridDim.y * 32 rows after, of batch
// blockIdx.z; lane tx's VW columns.
template <int VW>
__global__ void __launch_bounds__(kColLanes * kColR)
cs_colnorm_apply_kernel(CsColNormArgs a)
{
  constexpr int kPer = kColApplyRows / kColR;
  int const tx = int(threadIdx.x) % kColLanes, ty = int(threadIdx.x) / kColLanes;
  int const col = (int(blockIdx.x) * kColLanes + tx) * VW;
  if (col >= a.r.n) return;                // no barrier below
  int64_t const bz = int64_t(blockIdx.z);
  float2 ms[VW];
#pragma unroll
  for (int e = 0; e < VW; ++e) ms[e] = a.stat[bz * a.r.n + col + e];
  for (int64_t base = int64_t(blockIdx.y) * kColApplyRows; base < a.r.m; base += int64_t(gridDim.y) * kColApplyRows) {
    float x[kPer][VW];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      int64_t const r = base + ty + i * kColR;
      cs_col_load<VW>(a.r, bz * a.r.m + r, bz, r, col, r < a.r.m, x[i]);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      int64_t const r = base + ty + i * kColR;
      if (r >= a.r.m) continue;
      float y[VW];
#pragma unroll
      for (int e = 0; e < VW; ++e) {
        y[e] = (x[i][e] - ms[e].x) * ms[e].y;
        if constexpr (!cs_chain::kIdentity) y[e] = cs_chain_at<cs_chain>(a.r.prob, y[e], bz, r, col + e);
      }
      ElementCD* d = a.r.d + bz * a.r.sd + r * a.r.ldd + col;
      if constexpr (VW == 4) {
        if (a.r.d_vec) {
          cs_store4(d, y);
          continue;
        }
      }
#pragma unroll
      for (int e = 0; e < VW; ++e) d[e] = cs_from_f32<ElementCD>(y[e]);
    }
  }
}

// The slices of 64 rows each column's statistics are split into (grid.y of the partial
// kernel).
static int64_t cs_colnorm_slices(const cs_problem& p)
{
  return (p.m + kColSliceRows - 1) / kColSliceRows;
}

static cudaError_t cs_launch_colnorm(const CsRowArgs& r, const cs_problem& p, uint64_t colnorm_at,
                                     cudaStream_t stream)
{
  CsColNormArgs a;
  a.r = r;
  a.slices = int(cs_colnorm_slices(p));
  a.eps = p.norm_eps;
  char* base = static_cast<char*>(p.workspace);
  a.part = reinterpret_cast<float2*>(base + colnorm_at);
  a.stat = a.part + p.batch * int64_t(a.slices) * p.n;
  bool const vec = p.n % 4 == 0;
  int const vw = vec ? 4 : 1;
  unsigned const col_ctas = unsigned((p.n + kColLanes * vw - 1) / (kColLanes * vw));
  dim3 const part_grid(col_ctas, unsigned(a.slices), unsigned(p.batch));
  if (vec) cs_colnorm_part_kernel<4><<<part_grid, kColLanes * kColR, 0, stream>>>(a);
  else     cs_colnorm_part_kernel<1><<<part_grid, kColLanes * kColR, 0, stream>>>(a);
  int64_t const columns = p.batch * p.n;
  cs_colnorm_stat_kernel<<<unsigned((columns + 7) / 8), 256, 0, stream>>>(a, columns);
  int64_t const row_ctas = std::min<int64_t>((p.m + kColApplyRows - 1) / kColApplyRows, 65535);
  dim3 const apply_grid(col_ctas, unsigned(row_ctas), unsigned(p.batch));
  if (vec) cs_colnorm_apply_kernel<4><<<apply_grid, kColLanes * kColR, 0, stream>>>(a);
  else     cs_colnorm_apply_kernel<1><<<apply_grid, kColLanes * kColR, 0, stream>>>(a);
  return cudaGetLastError();
}

static cudaError_t cs_launch_norm(const CsRowArgs& r, const cs_problem& p, cudaStream_t stream)
{
  CsNormArgs a;
  a.r = r;
  a.groups = p.norm_groups > 1 ? int(p.norm_groups) : 1;
  a.len = int(p.n / a.groups);
  a.segments = r.rows * a.groups;
  a.kind = int(p.norm);
  a.eps = p.norm_eps;
  // Groups on 16-byte boundaries of the workspace (its rows are): 16-byte loads.
  bool const vec = a.len % 4 == 0;
  if (a.len <= kNormWarpVals * 32) {
    int T = 1;
    while (T * kNormWarpVals < a.len) T *= 2;
    int64_t const per_cta = 256 / T;
    int64_t grid = (a.segments + per_cta - 1) / per_cta;
    if (grid > 0x7fffffffLL) grid = 0x7fffffffLL;   // grid-stride covers the rest
    if (vec) cs_norm_warp_kernel<true><<<unsigned(grid), 256, 0, stream>>>(a, T);
    else     cs_norm_warp_kernel<false><<<unsigned(grid), 256, 0, stream>>>(a, T);
  } else if (a.len <= kNormCtaVals * 1024) {
    int const threads = ((a.len + kNormCtaVals - 1) / kNormCtaVals + 31) / 32 * 32;
    if (vec) cs_norm_cta_kernel<true><<<unsigned(a.segments), unsigned(threads), 0, stream>>>(a);
    else     cs_norm_cta_kernel<false><<<unsigned(a.segments), unsigned(threads), 0, stream>>>(a);
  } else {
    cs_norm_stream_kernel<<<unsigned(a.segments), kNormStreamThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

#if CS_EXP16
// Stage 2 after the exponentiated GEMM: a warp (rows up to kExpWarpRowMax) or a CTA of
// kExpThreads per row. The row's (mL, s) from its tiles' (mL_t, s_t), then D = e *
// 2^(mL_t - mL) / s, 8 elements at a time (n is a multiple of 8 here, and TILE_N too, so
// 8 consecutive elements share a tile).
static constexpr int kExpThreads = 256;

struct CsExpRowArgs {
  const __half* e;                     // rows of n, batch-major
  const float2* stats; int64_t tiles_n;
  int64_t rows; int m; int n;
  ElementCD* d; int64_t ldd, sd;
  bool d_vec;                          // D rows allow 8-element (16-byte) stores
};

// D's row `row` from lane g of G: e * 2^(mL_t - mL) / s, the row's (mL, 1 / s) known. Each
// lane loads U vectors before it converts and stores them (U loads in flight).
__device__ __forceinline__ void cs_exp_row_out(const CsExpRowArgs& a, int64_t row, float mL, float inv,
                                               int g, int G)
{
  int64_t const bz = row / a.m, r = row - bz * a.m;
  const float2* st = a.stats + row * a.tiles_n;
  const uint4* e = reinterpret_cast<const uint4*>(a.e + row * int64_t(a.n));
  ElementCD* d = a.d + bz * a.sd + r * a.ldd;
  int const nv = a.n / 8;
  constexpr int U = 4;
  for (int j0 = g; j0 < nv; j0 += U * G) {
    uint4 raw[U];
    float mt[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      int const j = j0 + u * G;
      // A tile row that was all -inf (a causal mask's tiles right of the diagonal) holds
      // zeros: its values are not read.
      mt[u] = j < nv ? st[(8 * j) / kTileN].x : cs_neg_inf();
      raw[u] = mt[u] == cs_neg_inf() ? make_uint4(0u, 0u, 0u, 0u) : __ldcs(e + j);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      int const j = j0 + u * G;
      if (j >= nv) continue;
      float const f = cs_ex2(mt[u] - mL) * inv;
      const __half2* h = reinterpret_cast<const __half2*>(&raw[u]);
      float o[8];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float2 const x = __half22float2(h[q]);
        o[2 * q] = x.x * f;
        o[2 * q + 1] = x.y * f;
      }
      if (a.d_vec) {
        float const lo[4] = {o[0], o[1], o[2], o[3]}, hi[4] = {o[4], o[5], o[6], o[7]};
        cs_store4(d + 8 * j, lo);
        cs_store4(d + 8 * j + 4, hi);
      } else {
#pragma unroll
        for (int q = 0; q < 8; ++q) d[8 * j + q] = cs_from_f32<ElementCD>(o[q]);
      }
    }
  }
}

// One CTA per row (long rows).
__global__ void __launch_bounds__(kExpThreads)
cs_softmax_exp_kernel(CsExpRowArgs a)
{
  __shared__ float2 red[32];
  int64_t const row = int64_t(blockIdx.x);
  const float2* st = a.stats + row * a.tiles_n;
  float mL = cs_neg_inf(), s = 0.0f;
  for (int64_t t = threadIdx.x; t < a.tiles_n; t += blockDim.x) {
    float2 const v = st[t];
    cs_combine(mL, s, v.x, v.y);
  }
  cs_block_reduce(mL, s, red);
  cs_exp_row_out(a, row, mL, 1.0f / s, int(threadIdx.x), int(blockDim.x));
}

// One warp per row, rows grid-strided (n <= kExpWarpRowMax): a CTA per row of 1024 values
// left half its threads idle and spent its time on launch and barriers (ncu on the H200,
// 16 x 1024 rows of 1024: 37 us at 25% of DRAM).
static constexpr int kExpWarpRowMax = 4096;
__global__ void __launch_bounds__(kExpThreads)
cs_softmax_exp_warp_kernel(CsExpRowArgs a)
{
  constexpr int kWarps = kExpThreads / 32;
  int const lane = int(threadIdx.x & 31);
  int64_t const step = int64_t(gridDim.x) * kWarps;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < a.rows; row += step) {
    const float2* st = a.stats + row * a.tiles_n;
    float mL = cs_neg_inf(), s = 0.0f;
    for (int64_t t = lane; t < a.tiles_n; t += 32) {
      float2 const v = st[t];
      cs_combine(mL, s, v.x, v.y);
    }
    cs_warp_reduce(mL, s);
    cs_exp_row_out(a, row, mL, 1.0f / s, lane, 32);
  }
}
#endif

// ---------------------------------------------------------------------------------------
// Host side: problem checks and geometry
// ---------------------------------------------------------------------------------------

static inline bool cs_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 0xF) == 0; }

// A TMA global stride of an operand (in elements): a multiple of 16 bytes, < 2^40 bytes.
static inline bool cs_tma_stride_ok(int64_t elems)
{
  return elems >= 0 && elems < (int64_t(1) << 40) / int64_t(sizeof(ElementAB)) && elems % kAlignAB == 0;
}

struct CsGeometry {
  int64_t m_gemm, n_gemm;       // the part the TMA GEMM computes
  int64_t ldw;                  // workspace row stride (floats)
  uint64_t ws_bytes;            // the fp32 rows (or e and the statistics), rounded up to 256 bytes
  bool exp16;                   // the exponentiated f16 intermediate (CS_EXP16)
  int64_t tiles_n;              // exp16: column tiles per row
  uint64_t stats_at;            // exp16: byte offset of the statistics
  uint64_t split_at;            // 3xF16: byte offset of the split parts (after the rows)
  uint64_t colnorm_at;          // gemm_norm BATCH: byte offset of the column statistics
};

// The batch (L) stride handed to CUTLASS: the ABI's, or for a single batch a never-stepped
// value that is still a valid TMA stride.
static inline int64_t cs_batch_stride(const cs_problem& p, int64_t batch_stride, int64_t ld, int64_t outer)
{
  return p.batch > 1 ? batch_stride : ld * outer;
}

// Whether the TMA GEMM can read A and B: 16-byte leading dimensions and batch strides, K a
// multiple of 8 where it is contiguous, no operand shared by the batch (a stride-0 TMA
// dimension), and for f32 a K of at least CS_F32_MIN_K. Otherwise the edge kernel computes
// every output of stage 1 (one warp an output, fp32 FMAs: a slow path, there so that any
// shape has a kernel).
static bool cs_tma_ok(const cs_problem& p)
{
  bool const a_row = kLayoutA == CS_LAYOUT_ROW, b_row = kLayoutB == CS_LAYOUT_ROW;
  if (CS_F32 && p.k < CS_F32_MIN_K) return false;   // fp32 FMAs: 3xTF32 loses to them here
#if CS_F16SPLIT
  // The split pass reads A and B in place, any strides (0: shared by the batch), into
  // K-major parts the TMA reads; its grids bound K / 32 and the batch.
  (void)a_row;
  (void)b_row;
  return (p.k + 31) / 32 <= 65535 && p.batch <= 65535 && p.batch * std::max(p.m, p.n) <= 0x7fffffffLL;
#endif
  if ((a_row || !b_row) && p.k % kAlignAB != 0) return false;
  if (!cs_tma_stride_ok(p.lda) || !cs_tma_stride_ok(p.ldb)) return false;
  int64_t const outer_a = a_row ? p.m : p.k, outer_b = b_row ? p.k : p.n;
  if (!cs_tma_stride_ok(cs_batch_stride(p, p.batch_stride_a, p.lda, outer_a)) ||
      (p.batch > 1 && p.batch_stride_a == 0)) return false;
  if (!cs_tma_stride_ok(cs_batch_stride(p, p.batch_stride_b, p.ldb, outer_b)) ||
      (p.batch > 1 && p.batch_stride_b == 0)) return false;
  return true;
}

static CsGeometry cs_geometry(const cs_problem& p)
{
  CsGeometry g;
  bool const tma = cs_tma_ok(p);
  g.m_gemm = !tma ? 0 : (kLayoutA == CS_LAYOUT_COL && !CS_F16SPLIT) ? p.m / 8 * 8 : p.m;
  g.n_gemm = !tma ? 0 : p.n / 8 * 8;
  g.ldw = (p.n + 3) / 4 * 4;
  g.ws_bytes = (uint64_t(p.batch) * uint64_t(p.m) * uint64_t(g.ldw) * 4 + 255) / 256 * 256;
  // The exponentiated path: softmax into a 16-bit D, no C, the GEMM covering every output.
  g.exp16 = CS_EXP16 && p.family == CS_FAMILY_GEMM_SOFTMAX && kDtypeCD != CS_DTYPE_F32 && p.log_softmax == 0 &&
            p.beta == 0.0f &&
            g.m_gemm == p.m && g.n_gemm == p.n;
  g.tiles_n = (p.n + kTileN - 1) / kTileN;
  g.stats_at = 0;
  g.split_at = g.ws_bytes;
#if CS_F16SPLIT
  // A's hi and lo parts (m_gemm K-vectors of K padded to 8 halves), B's (n_gemm), then
  // each K-vector's largest |x|.
  if (g.m_gemm > 0 && g.n_gemm > 0) {
    uint64_t const kp = uint64_t(cs_3xf16::kpad(p.k)), l = uint64_t(p.batch);
    auto r256 = [](uint64_t x) { return (x + 255) / 256 * 256; };
    g.ws_bytes += 2 * r256(l * uint64_t(g.m_gemm) * kp * 2) + 2 * r256(l * uint64_t(g.n_gemm) * kp * 2) +
                  r256(l * uint64_t(g.m_gemm) * 4) + r256(l * uint64_t(g.n_gemm) * 4);
  }
#endif
  // gemm_norm BATCH: each slice's (mean, M2) and each column's (mean, rstd), float2 each.
  g.colnorm_at = 0;
  if (p.family == CS_FAMILY_GEMM_NORM && p.norm == CS_NORM_BATCH) {
    g.colnorm_at = g.ws_bytes;
    uint64_t const slices = uint64_t(cs_colnorm_slices(p));
    g.ws_bytes += (uint64_t(p.batch) * (slices + 1) * uint64_t(p.n) * 8 + 255) / 256 * 256;
  }
  if (g.exp16) {
    uint64_t const rows = uint64_t(p.batch) * uint64_t(p.m);
    g.stats_at = (rows * uint64_t(p.n) * 2 + 255) / 256 * 256;
    g.ws_bytes = g.stats_at + (rows * uint64_t(g.tiles_n) * 8 + 255) / 256 * 256;
  }
  return g;
}

// CS_OK when this kernel handles `p`.
static int32_t cs_check(const cs_problem& p, bool check_pointers)
{
  constexpr int64_t kMaxInt = 0x7fffffffLL;
  if (!kTypesOk) return CS_ERR_UNSUPPORTED;
  bool const reduce = p.family == CS_FAMILY_GEMM_REDUCE;
  bool const norm = p.family == CS_FAMILY_GEMM_NORM;
  if (p.family != CS_FAMILY_GEMM_SOFTMAX && !reduce && !norm) return CS_ERR_UNSUPPORTED;
  // gemm_reduce: one of the six reductions, no C.
  if (reduce && (p.reduce < CS_REDUCE_SUM || p.reduce > CS_REDUCE_L2 || p.beta != 0.0f))
    return CS_ERR_UNSUPPORTED;
  if (norm) {
    // gemm_norm: one of the five norms, groups dividing n (BATCH: whole columns, batches
    // within a grid's z); the [[before]] ops' operands in slots 0.. and the chain's after
    // them, both indexed like D.
    if (p.norm < CS_NORM_RMS || p.norm > CS_NORM_BATCH || p.norm_groups < 0 || !(p.norm_eps >= 0.0f))
      return CS_ERR_UNSUPPORTED;
    int64_t const groups = p.norm_groups > 1 ? p.norm_groups : 1;
    if (p.n % groups != 0) return CS_ERR_UNSUPPORTED;
    if (p.num_operands != cs_before::kOperands + cs_chain::kOperands) return CS_ERR_UNSUPPORTED;
    if (cs_chain::kOperands > 0 && cs_chain_first<cs_chain>() != cs_before::kOperands) return CS_ERR_UNSUPPORTED;
    if (cs_operand_slots_check<cs_before>(p, 0, p.layout_cd, p.m, p.n, check_pointers) != CS_OK)
      return CS_ERR_UNSUPPORTED;
    if (cs_operand_slots_check<cs_chain>(p, cs_before::kOperands, p.layout_cd, p.m, p.n, check_pointers) != CS_OK)
      return CS_ERR_UNSUPPORTED;
  } else if (cs_chain_operands_check<cs_chain>(p, check_pointers) != CS_OK) {
    return CS_ERR_UNSUPPORTED;
  }
  if (p.dtype_ab != kDtypeAB || p.dtype_cd != kDtypeCD) return CS_ERR_UNSUPPORTED;
  if (p.layout_a != kLayoutA || p.layout_b != kLayoutB || p.layout_cd != CS_LAYOUT_ROW)
    return CS_ERR_UNSUPPORTED;
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.k == 0) return CS_ERR_UNSUPPORTED;
  if (p.m > kMaxInt || p.n > kMaxInt || p.k > kMaxInt || p.batch > kMaxInt) return CS_ERR_UNSUPPORTED;
  if (p.batch * p.m > kMaxInt) return CS_ERR_UNSUPPORTED;    // one CTA per row at most
  // gemm_norm: one CTA a group at most (groups longer than a warp team holds).
  if (norm && p.norm_groups > 1 && p.batch * p.m > kMaxInt / p.norm_groups) return CS_ERR_UNSUPPORTED;
  // gemm_norm BATCH: whole columns (no groups); the partial kernel's grid takes the slices
  // in y and the batch in z, the statistics kernel a warp a column.
  if (norm && p.norm == CS_NORM_BATCH &&
      (p.norm_groups > 1 || p.batch > 65535 || cs_colnorm_slices(p) > kColMaxSlices || p.batch * p.n > kMaxInt * 8 ||
       p.n > kMaxInt - kColLanes * 4))
    return CS_ERR_UNSUPPORTED;

  // A and B: rows that hold the matrix (the TMA GEMM's own conditions are cs_tma_ok's;
  // without them the edge kernel computes stage 1).
  bool const a_row = kLayoutA == CS_LAYOUT_ROW, b_row = kLayoutB == CS_LAYOUT_ROW;
  if (p.lda < (a_row ? p.k : p.m) || p.ldb < (b_row ? p.n : p.k)) return CS_ERR_UNSUPPORTED;
  int64_t const outer_a = a_row ? p.m : p.k, outer_b = b_row ? p.k : p.n;
  if (p.lda > INT64_MAX / outer_a || p.ldb > INT64_MAX / outer_b) return CS_ERR_UNSUPPORTED;
  if (p.batch_stride_a < 0 || p.batch_stride_b < 0) return CS_ERR_UNSUPPORTED;

  // Stage 2: C and D rows (any alignment of the element type); gemm_reduce's D is m x 1.
  if (p.m > 1 && p.ldd < (reduce ? 1 : p.n)) return CS_ERR_UNSUPPORTED;
  if (p.batch > 1 && p.batch_stride_d == 0) return CS_ERR_UNSUPPORTED;   // D batches would race
  bool const has_c = p.beta != 0.0f;
  if (has_c && p.m > 1 && p.ldc < p.n) return CS_ERR_UNSUPPORTED;

  if (check_pointers) {
    if (p.a == nullptr || p.b == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    if (!CS_F16SPLIT && cs_tma_ok(p) && (!cs_aligned16(p.a) || !cs_aligned16(p.b))) return CS_ERR_UNSUPPORTED;
    if (has_c && p.c == nullptr) return CS_ERR_UNSUPPORTED;
    uintptr_t const esize = sizeof(ElementCD);
    if (reinterpret_cast<uintptr_t>(p.d) % esize != 0) return CS_ERR_UNSUPPORTED;
    if (has_c && reinterpret_cast<uintptr_t>(p.c) % esize != 0) return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

// ---------------------------------------------------------------------------------------
// Host side: CUTLASS arguments
// ---------------------------------------------------------------------------------------

// The strides of A and B, as both GEMMs (the fp32 and the exponentiated one) take them.
[[maybe_unused]] static StrideA cs_stride_a(const cs_problem& p)
{
  bool const a_row = kLayoutA == CS_LAYOUT_ROW;
  return cs_stride<StrideA>(p.lda, cs_batch_stride(p, p.batch_stride_a, p.lda, a_row ? p.m : p.k));
}

[[maybe_unused]] static StrideB cs_stride_b(const cs_problem& p)
{
  bool const b_row = kLayoutB == CS_LAYOUT_ROW;
  return cs_stride<StrideB>(p.ldb, cs_batch_stride(p, p.batch_stride_b, p.ldb, b_row ? p.k : p.n));
}

// CUTLASS's arguments for GEMM G (either of the two) over (m_gemm, n_gemm): what both
// share, with G's epilogue arguments `epi`.
#if CS_F16SPLIT
// 3xF16: where the split parts of A (m_gemm K-vectors) and B (n_gemm) lie in the workspace
// `ws` (at g.split_at), in the order cs_geometry sized them.
struct CsSplit {
  __half *a_hi, *a_lo, *b_hi, *b_lo;
  float *amax_a, *amax_b;
  int64_t kp;
};
static CsSplit cs_split_at(const cs_problem& p, const CsGeometry& g, void* ws)
{
  int64_t const kp = cs_3xf16::kpad(p.k);
  auto r256 = [](uint64_t x) { return (x + 255) / 256 * 256; };
  uint64_t const l = uint64_t(p.batch);
  uint64_t const ha = r256(l * uint64_t(g.m_gemm) * uint64_t(kp) * 2), hb = r256(l * uint64_t(g.n_gemm) * uint64_t(kp) * 2);
  uint64_t const fa = r256(l * uint64_t(g.m_gemm) * 4);
  char* base = static_cast<char*>(ws) + g.split_at;
  CsSplit s;
  s.a_hi = reinterpret_cast<__half*>(base);
  s.a_lo = reinterpret_cast<__half*>(base + ha);
  s.b_hi = reinterpret_cast<__half*>(base + 2 * ha);
  s.b_lo = reinterpret_cast<__half*>(base + 2 * ha + hb);
  s.amax_a = reinterpret_cast<float*>(base + 2 * ha + 2 * hb);
  s.amax_b = reinterpret_cast<float*>(base + 2 * ha + 2 * hb + fa);
  s.kp = kp;
  return s;
}
static typename CollectiveMainloop::Arguments cs_mainloop_args(const cs_problem& p, const CsGeometry& g, void* ws)
{
  CsSplit const s = cs_split_at(p, g, ws);
  using H = cutlass::half_t;
  return {reinterpret_cast<H const*>(s.a_hi), reinterpret_cast<H const*>(s.a_lo), s.kp, g.m_gemm * s.kp,
          reinterpret_cast<H const*>(s.b_hi), reinterpret_cast<H const*>(s.b_lo), s.kp, g.n_gemm * s.kp,
          s.amax_a, s.amax_b};
}
#endif

template <class G>
static typename G::Arguments cs_arguments(const cs_problem& p, const CsGeometry& g,
                                          typename G::GemmKernel::EpilogueArguments const& epi,
                                          [[maybe_unused]] void* ws = nullptr)
{
  int const L = int(p.batch);
  typename G::Arguments args{
      L > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
      {int(g.m_gemm), int(g.n_gemm), int(p.k), L},
#if CS_F16SPLIT
      cs_mainloop_args(p, g, ws),
#else
      {static_cast<ElementAB const*>(p.a), cs_stride_a(p), static_cast<ElementAB const*>(p.b), cs_stride_b(p)},
#endif
      epi,
      cs_sm90::hw_info(p)};
  cs_sm90::scheduler_options(args, CS_SWIZZLE, CS_RASTER);
  return args;
}

static typename Gemm::Arguments cs_make_arguments(const cs_problem& p, const CsGeometry& g, float* ws)
{
  StrideWs const dW = cs_stride<StrideWs>(g.ldw, p.m * g.ldw);
  typename Gemm::Arguments args = cs_arguments<Gemm>(p, g, {{}, nullptr, dW, ws, dW}, ws);
  args.epilogue.thread.alpha = p.alpha;
  args.epilogue.thread.beta = 0.0f;   // no source: beta * C is stage 2's
  return args;
}

// cutlass::Status -> cs_status / cudaError_t
static int32_t cs_status_of(cutlass::Status s)
{
  switch (s) {
    case cutlass::Status::kSuccess:            return CS_OK;
    case cutlass::Status::kErrorWorkspaceNull: return CS_ERR_WORKSPACE;
    case cutlass::Status::kErrorInternal: {
      cudaError_t const e = cudaGetLastError();
      return int32_t(e != cudaSuccess ? e : cudaErrorUnknown);
    }
    default:                                   return CS_ERR_UNSUPPORTED;
  }
}

#if CS_EXP16
static typename GemmE::Arguments cs_make_arguments_e(const cs_problem& p, const CsGeometry& g, void* ws)
{
  StrideE const dE = cs_stride<StrideE>(p.n, p.m * p.n);
  typename GemmE::Arguments args =
      cs_arguments<GemmE>(p, g, {{{}, nullptr, dE, static_cast<ElementE*>(ws), dE}, CsExpArgs{}});
  args.epilogue.thread.alpha = 1.0f;   // alpha is the exponent's (alpha_log2e)
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.extra.stats = ws == nullptr ? nullptr
                                            : reinterpret_cast<float2*>(static_cast<char*>(ws) + g.stats_at);
  args.epilogue.extra.tiles_n = g.tiles_n;
  args.epilogue.extra.alpha_log2e = p.alpha * kLog2e;
  args.epilogue.extra.alpha = p.alpha;
  args.epilogue.extra.prob = p;
  return args;
}
#endif

// Total workspace: the fp32 rows (or e and the statistics), then CUTLASS's own (tile
// scheduler) workspace.
static int32_t cs_workspace(const cs_problem& p, const CsGeometry& g, uint64_t* bytes)
{
  *bytes = g.ws_bytes;
#if CS_EXP16
  if (g.exp16) {
    typename GemmE::Arguments args = cs_make_arguments_e(p, g, nullptr);   // pointers may be NULL
    if (GemmE::can_implement(args) != cutlass::Status::kSuccess) return CS_ERR_UNSUPPORTED;
    *bytes += uint64_t(GemmE::get_workspace_size(args));
    return CS_OK;
  }
#endif
  if (g.m_gemm > 0 && g.n_gemm > 0) {
    typename Gemm::Arguments args = cs_make_arguments(p, g, nullptr);   // pointers may be NULL
    if (Gemm::can_implement(args) != cutlass::Status::kSuccess) return CS_ERR_UNSUPPORTED;
    *bytes += uint64_t(Gemm::get_workspace_size(args));
  }
  return CS_OK;
}

// ---------------------------------------------------------------------------------------
// ABI entry points
// ---------------------------------------------------------------------------------------

CS_EXPORT uint32_t cutesmith_abi_version(void)
{
  return CS_ABI_VERSION;
}

CS_EXPORT int32_t cutesmith_workspace_bytes(const cs_problem* problem, uint64_t* bytes)
{
  if (bytes != nullptr) *bytes = 0;
  if (problem == nullptr || bytes == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_UNSUPPORTED;
  if (cs_check(*problem, /*check_pointers=*/false) != CS_OK) return CS_ERR_UNSUPPORTED;
  if (problem->m == 0 || problem->n == 0 || problem->batch == 0) return CS_OK;
  return cs_workspace(*problem, cs_geometry(*problem), bytes);
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  const cs_problem& p = *problem;
  if (p.abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  int32_t status = cs_check(p, /*check_pointers=*/true);
  if (status != CS_OK) return status;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;

  CsGeometry const g = cs_geometry(p);
  uint64_t need = 0;
  status = cs_workspace(p, g, &need);
  if (status != CS_OK) return status;
  if (p.workspace == nullptr || p.workspace_bytes < need) return CS_ERR_WORKSPACE;
  if (!cs_aligned16(p.workspace)) return CS_ERR_UNSUPPORTED;
  float* ws = static_cast<float*>(p.workspace);

#if CS_EXP16
  if (g.exp16) {
    typename GemmE::Arguments args = cs_make_arguments_e(p, g, p.workspace);
    GemmE gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return CS_ERR_UNSUPPORTED;
    void* gemm_ws = static_cast<char*>(p.workspace) + g.ws_bytes;
    cutlass::Status s = gemm.initialize(args, gemm_ws, stream);
    if (s != cutlass::Status::kSuccess) return cs_status_of(s);
    s = gemm.run(stream);
    if (s != cutlass::Status::kSuccess) return cs_status_of(s);
    CsExpRowArgs a;
    a.e = static_cast<const __half*>(p.workspace);
    a.stats = reinterpret_cast<const float2*>(static_cast<const char*>(p.workspace) + g.stats_at);
    a.tiles_n = g.tiles_n;
    a.rows = p.batch * p.m; a.m = int(p.m); a.n = int(p.n);
    a.d = static_cast<ElementCD*>(p.d); a.ldd = p.ldd; a.sd = p.batch_stride_d;
    a.d_vec = cs_aligned16(p.d) && (p.m == 1 || p.ldd % 8 == 0) && (p.batch == 1 || p.batch_stride_d % 8 == 0);
    if (a.n <= kExpWarpRowMax) {
      int64_t const need = (a.rows + kExpThreads / 32 - 1) / (kExpThreads / 32);
      int64_t const cap = int64_t(p.sm_count > 0 ? p.sm_count : 132) * 32;
      cs_softmax_exp_warp_kernel<<<unsigned(need < cap ? need : cap), kExpThreads, 0, stream>>>(a);
    } else {
      cs_softmax_exp_kernel<<<unsigned(a.rows), kExpThreads, 0, stream>>>(a);
    }
    return int32_t(cudaGetLastError());
  }
#endif

  // Stage 1: the TMA GEMM over (m_gemm, n_gemm), then the edge outputs.
  if (g.m_gemm > 0 && g.n_gemm > 0) {
#if CS_F16SPLIT
    // 3xF16: A's first m_gemm and B's first n_gemm K-vectors into scaled fp16 parts.
    CsSplit const sp = cs_split_at(p, g, p.workspace);
    cudaError_t err = cs_3xf16::split_operand(static_cast<const float*>(p.a), kLayoutA == CS_LAYOUT_ROW, p.lda,
                                              p.batch_stride_a, g.m_gemm, p.k, p.batch, sp.a_hi, sp.a_lo,
                                              sp.amax_a, stream);
    if (err == cudaSuccess)
      err = cs_3xf16::split_operand(static_cast<const float*>(p.b), kLayoutB == CS_LAYOUT_COL, p.ldb,
                                    p.batch_stride_b, g.n_gemm, p.k, p.batch, sp.b_hi, sp.b_lo, sp.amax_b,
                                    stream);
    if (err != cudaSuccess) return int32_t(err);
#endif
    typename Gemm::Arguments args = cs_make_arguments(p, g, ws);
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return CS_ERR_UNSUPPORTED;
    void* gemm_ws = static_cast<char*>(p.workspace) + g.ws_bytes;
    cutlass::Status s = gemm.initialize(args, gemm_ws, stream);
    if (s != cutlass::Status::kSuccess) return cs_status_of(s);
    s = gemm.run(stream);
    if (s != cutlass::Status::kSuccess) return cs_status_of(s);
  }
  int64_t const per_batch = p.m * (p.n - g.n_gemm) + (p.m - g.m_gemm) * g.n_gemm;
  if (per_batch > 0) {
    CsEdgeArgs e;
    e.a = static_cast<const ElementAB*>(p.a); e.lda = p.lda; e.sa = p.batch_stride_a;
    e.a_row = kLayoutA == CS_LAYOUT_ROW;
    e.b = static_cast<const ElementAB*>(p.b); e.ldb = p.ldb; e.sb = p.batch_stride_b;
    e.b_row = kLayoutB == CS_LAYOUT_ROW;
    e.ws = ws; e.ldw = g.ldw; e.sw = p.m * g.ldw;
    e.m = int(p.m); e.n = int(p.n); e.k = int(p.k);
    e.m_gemm = int(g.m_gemm); e.n_gemm = int(g.n_gemm);
    e.per_batch = per_batch;
    e.total = per_batch * p.batch;
    e.alpha = p.alpha;
    int64_t blocks = (e.total + 7) / 8;
    int64_t const cap = int64_t(p.sm_count > 0 ? p.sm_count : 132) * 16;
    if (blocks > cap) blocks = cap;
    cs_edge_kernel<<<unsigned(blocks), 256, 0, stream>>>(e);
    cudaError_t const err = cudaGetLastError();
    if (err != cudaSuccess) return int32_t(err);
  }

  // Stage 2: the rows.
  CsRowArgs a;
  a.ws = ws; a.ldw = g.ldw;
  a.rows = p.batch * p.m; a.m = int(p.m); a.n = int(p.n);
  a.beta = p.beta;
  a.c = static_cast<const ElementCD*>(p.beta != 0.0f ? p.c : p.d);   // never read when beta == 0
  a.ldc = p.ldc; a.sc = p.batch_stride_c;
  a.d = static_cast<ElementCD*>(p.d); a.ldd = p.ldd; a.sd = p.batch_stride_d;
  uintptr_t const vec_bytes = 4 * sizeof(ElementCD);
  a.d_vec = reinterpret_cast<uintptr_t>(p.d) % vec_bytes == 0 && (p.m == 1 || p.ldd % 4 == 0) &&
            (p.batch == 1 || p.batch_stride_d % 4 == 0);
  a.prob = p;
  if (p.family == CS_FAMILY_GEMM_REDUCE) return int32_t(cs_launch_reduce(a, int(p.reduce), stream));
  if (p.family == CS_FAMILY_GEMM_NORM)
    return int32_t(p.norm == CS_NORM_BATCH ? cs_launch_colnorm(a, p, g.colnorm_at, stream)
                                           : cs_launch_norm(a, p, stream));
  cudaError_t const err = p.log_softmax != 0 ? cs_launch_rows<true>(a, stream)
                                             : cs_launch_rows<false>(a, stream);
  return int32_t(err);
}
