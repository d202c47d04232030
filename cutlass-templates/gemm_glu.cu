// cutesmith template: gated linear unit (CS_FAMILY_GEMM_GLU), SwiGLU / GEGLU, the first
// half of a Llama-style feed-forward, on Hopper (sm_90a).
//
//   D[l] = gate(alpha * A[l] * B[l]) * (alpha * A[l] * B2[l])      for l in [0, batch)
//
// A is m x k, B and B2 are k x n with the same layout and type, D is m x n row-major.
// gate = p.gate, any cs_activation (silu: SwiGLU; gelu_tanh / gelu_erf: GEGLU; relu...)
// with the activation's default parameters (leaky_relu slope 0.01, elu alpha 1, hardtanh
// [-1, 1], softplus beta 1 threshold 20), evaluated in fp32 with cutesmith_chain.cuh's
// functions. alpha scales both products; beta must be 0 (C is not part of a GLU).
// A, B, B2: bf16 or f16 (CS_WL_DTYPE_AB; default bf16, or f16 with -DCS_GEMM_FP16), each
// row- or column-major (CS_WL_LAYOUT_A / CS_WL_LAYOUT_B; default A row, B column). D:
// CS_WL_DTYPE_CD (bf16, f16 or f32; default the type of A), row-major only.
//
// Strategy (CS_DUAL=1, the default): one CUTLASS 3 GEMM kernel computing both products
// at once (cutesmith_sm90_dual.cuh): per k-tile the producer loads one tile of A and one
// each of B and B2, side by side in the stage; the consumer warpgroups run one WGMMA per
// k-block over both, into one accumulator twice as wide as D's tile (its halves are the
// two products); CUTLASS's kernel layer sees a GEMM of 2 n columns. The epilogue forms
// gate(alpha * first) * second in registers and CUTLASS's epilogue (alpha, TMA store)
// writes D. A is read once, and the first product never leaves the registers. Under
// CUTLASS's persistent cooperative warp-specialized kernel with clusters and multicast of
// B and B2 along M; with CS_STREAMK=1 its stream-K scheduler splits the K loop of the
// last wave's tiles over the SMs that would idle, and adds the partial (wide) sums before
// the gate.
//
// CS_DUAL=0: two CUTLASS 3 GEMMs on the given stream (the Sm90 collective builders, as in
// gemm_sm90_cutlass3_ws.cu), and no separate combine pass:
//   1. G = alpha * A * B, written in fp32 to the workspace (batch * m' * n' floats).
//   2. A * B2, whose epilogue is an epilogue visitor tree (EVT): an Sm90AuxLoad node
//      brings the matching tile of G into shared memory by TMA (pipelined like a C
//      source), and an Sm90Compute node evaluates gate(G) * (alpha * acc) per element
//      (CsGluFn: a uniform switch on the gate outside the per-fragment loop, every gate
//      inlined: an out-of-line call would make ptxas serialize the WGMMAs) before D is
//      stored by TMA.
// TMA needs 16-byte aligned rows: the GEMMs cover m' = m (A row-major) or m rounded down
// to 8 (A column-major, where M is the contiguous dimension) rows and n' = n rounded down
// to 8 columns; the outputs outside are computed by a small warp-per-output kernel (both
// dot products and the gate), so any m and n work. K must be a multiple of 8 where it is
// the contiguous dimension (A row-major or B column-major); leading dimensions and batch
// strides of A, B, B2 and D must be 16-byte multiples, A, B, B2, D 16-byte aligned;
// otherwise CS_ERR_UNSUPPORTED. Weights shared by the batch (B and B2 batch stride 0) are
// taken when A is row-major and A and D step by one batch of rows (cs_fold_batch).
//
// Parameters (override with -DNAME=VALUE):
//   CS_DUAL       1    1: one kernel computes both products (above); 0: two GEMMs
//   CS_SCHEDULE   0    0: KernelTmaWarpSpecializedCooperative, 1: ...Pingpong (CS_DUAL=0 only)
//   CS_TILE_M     128  CTA tile rows (cooperative: a multiple of 128; ping-pong: of 64)
//   CS_TILE_N     256  CTA tile columns: a multiple of 8, <= 256 (CS_DUAL=1: of D, and of
//                      each of B and B2 per k-tile, <= 128, default 128; ping-pong: 128)
//   CS_TILE_K     64   K per pipeline stage (64 16-bit values: one 128-byte swizzle row)
//   CS_CLUSTER_M  2    cluster size along M (B tiles multicast across it)
//   CS_CLUSTER_N  1    cluster size along N (A tiles multicast across it)
//   CS_SWIZZLE    1    tile scheduler max_swizzle_size (1, 2, 4, 8)
//   CS_RASTER     0    tile raster order: 0 heuristic, 1 along M, 2 along N
//   CS_STREAMK    0    CS_DUAL=1: 1 for CUTLASS's stream-K tile scheduler (uses the workspace)

// Device code is built without assert(): a call to __assertfail inside the consumer loop
// makes ptxas serialize every WGMMA (see gemm_sm90_cutlass3_ws.cu). Host asserts stay;
// cs_check rejects what make_tma_copy would assert on first.
#if defined(__CUDA_ARCH__) && !defined(NDEBUG)
#define NDEBUG
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
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include "cutesmith_abi.h"
#include "cutesmith_chain.cuh"   // the activations (cs_activate)
#include "cutesmith_edges.cuh"
#include "cutesmith_sm90_dual.cuh"
#include "cutesmith_sm90_host.cuh"

using namespace cute;

// ---------------------------------------------------------------------------------------
// Strategy parameters
// ---------------------------------------------------------------------------------------

#ifndef CS_DUAL
#define CS_DUAL 1
#endif
#ifndef CS_SCHEDULE
#define CS_SCHEDULE 0
#endif
#ifndef CS_TILE_M
#define CS_TILE_M 128
#endif
#ifndef CS_TILE_N
#if CS_SCHEDULE == 1 || CS_DUAL
#define CS_TILE_N 128
#else
#define CS_TILE_N 256
#endif
#endif
#ifndef CS_TILE_K
#define CS_TILE_K 64
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
#ifndef CS_STREAMK
#define CS_STREAMK 0
#endif
#ifndef CS_RASTER
#define CS_RASTER 0
#endif

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
static constexpr int kDtypeD = CS_WL_DTYPE_CD;
#else
static constexpr int kDtypeD = kDtypeAB;
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
    (kDtypeAB == CS_DTYPE_BF16 || kDtypeAB == CS_DTYPE_F16) &&
    (kDtypeD == CS_DTYPE_BF16 || kDtypeD == CS_DTYPE_F16 || kDtypeD == CS_DTYPE_F32);

using ElementAB = std::conditional_t<kDtypeAB == CS_DTYPE_F16, cutlass::half_t, cutlass::bfloat16_t>;
using ElementD  = std::conditional_t<kDtypeD == CS_DTYPE_F32, float,
                  std::conditional_t<kDtypeD == CS_DTYPE_F16, cutlass::half_t, cutlass::bfloat16_t>>;
using ElementAcc = float;
using ElementG   = float;   // the first product, in the workspace

using LayoutA = std::conditional_t<kLayoutA == CS_LAYOUT_ROW, cutlass::layout::RowMajor,
                                   cutlass::layout::ColumnMajor>;
using LayoutB = std::conditional_t<kLayoutB == CS_LAYOUT_ROW, cutlass::layout::RowMajor,
                                   cutlass::layout::ColumnMajor>;
using LayoutD = cutlass::layout::RowMajor;   // D and G

static constexpr int kAlignAB = 128 / cutlass::sizeof_bits<ElementAB>::value;   // 8: 16 bytes
static constexpr int kAlignD  = 128 / cutlass::sizeof_bits<ElementD>::value;
[[maybe_unused]] static constexpr int kAlignG = 128 / cutlass::sizeof_bits<ElementG>::value;   // 4

static constexpr int kTileM    = CS_TILE_M;
static constexpr int kTileN    = CS_TILE_N;
static constexpr int kTileK    = CS_TILE_K;
static constexpr int kClusterM = CS_CLUSTER_M;
static constexpr int kClusterN = CS_CLUSTER_N;

static_assert(CS_SCHEDULE == 0 || CS_SCHEDULE == 1, "CS_SCHEDULE: 0 cooperative, 1 ping-pong");
static_assert(CS_SCHEDULE == 1 || kTileM % 128 == 0, "cooperative: TILE_M must be a multiple of 128");
static_assert(kTileM % 64 == 0, "TILE_M must be a multiple of 64");
static_assert(kTileN % 8 == 0 && kTileN <= 256, "TILE_N must be a multiple of 8, at most 256");
static_assert(kTileK * 2 % 128 == 0, "TILE_K must span whole 128B swizzle rows");
static_assert(kClusterM * kClusterN <= 8 && kClusterM >= 1 && kClusterN >= 1, "portable cluster sizes only");
static_assert(CS_RASTER >= 0 && CS_RASTER <= 2, "CS_RASTER: 0 heuristic, 1 along M, 2 along N");
static_assert(CS_DUAL == 0 || CS_DUAL == 1, "CS_DUAL: 1 one kernel for both products, 0 two GEMMs");
static_assert(!CS_DUAL || CS_SCHEDULE == 0, "CS_DUAL=1: the cooperative schedule only");
static_assert(!CS_DUAL || kTileN <= 128, "CS_DUAL=1: TILE_N at most 128 (B and B2 side by side: one WGMMA's N)");
static_assert(CS_STREAMK == 0 || CS_STREAMK == 1, "CS_STREAMK: 0 or 1");
static_assert(!CS_STREAMK || CS_DUAL, "CS_STREAMK: the dual kernel only (CS_DUAL=1)");

using TileShape    = Shape<Int<kTileM>, Int<kTileN>, Int<kTileK>>;
using ClusterShape = Shape<Int<kClusterM>, Int<kClusterN>, _1>;

#if CS_SCHEDULE == 1
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#else
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#endif

// ---------------------------------------------------------------------------------------
// The gate, as the EVT's compute node: gate(G) * (alpha * acc)
// ---------------------------------------------------------------------------------------

// The gate's default parameters (those the workload spec gives each activation).
static void cs_gate_params(int gate, float* p0, float* p1)
{
  *p0 = 0.0f;
  *p1 = 0.0f;
  switch (gate) {
    case CS_ACT_LEAKY_RELU: *p0 = 0.01f; break;
    case CS_ACT_ELU:        *p0 = 1.0f; break;
    case CS_ACT_SILU:       *p0 = 1.0f; break;
    case CS_ACT_HARDTANH:   *p0 = -1.0f; *p1 = 1.0f; break;
    case CS_ACT_SOFTPLUS:   *p0 = 1.0f; *p1 = 20.0f; break;
    default: break;
  }
}

// Run-time arguments of the compute node (Sm90Compute passes them to every call).
struct CsGluArgs {
  int gate = CS_ACT_SILU;
  float p0 = 1.0f, p1 = 0.0f;
  float alpha = 1.0f;
};

// Calls f(std::integral_constant<int, GATE>{}) with the run-time gate as a compile-time
// constant: one uniform branch, and each gate's code inlined in its own case (an
// out-of-line call would make ptxas serialize the WGMMAs).
template <class F>
CUTLASS_DEVICE void cs_with_gate(int gate, F&& f)
{
  using std::integral_constant;
  switch (gate) {
    case CS_ACT_RELU:        f(integral_constant<int, CS_ACT_RELU>{}); break;
    case CS_ACT_LEAKY_RELU:  f(integral_constant<int, CS_ACT_LEAKY_RELU>{}); break;
    case CS_ACT_GELU_ERF:    f(integral_constant<int, CS_ACT_GELU_ERF>{}); break;
    case CS_ACT_GELU_TANH:   f(integral_constant<int, CS_ACT_GELU_TANH>{}); break;
    case CS_ACT_SILU:        f(integral_constant<int, CS_ACT_SILU>{}); break;
    case CS_ACT_SIGMOID:     f(integral_constant<int, CS_ACT_SIGMOID>{}); break;
    case CS_ACT_TANH:        f(integral_constant<int, CS_ACT_TANH>{}); break;
    case CS_ACT_SELU:        f(integral_constant<int, CS_ACT_SELU>{}); break;
    case CS_ACT_ELU:         f(integral_constant<int, CS_ACT_ELU>{}); break;
    case CS_ACT_HARDSIGMOID: f(integral_constant<int, CS_ACT_HARDSIGMOID>{}); break;
    case CS_ACT_HARDSWISH:   f(integral_constant<int, CS_ACT_HARDSWISH>{}); break;
    case CS_ACT_HARDTANH:    f(integral_constant<int, CS_ACT_HARDTANH>{}); break;
    case CS_ACT_SOFTPLUS:    f(integral_constant<int, CS_ACT_SOFTPLUS>{}); break;
    case CS_ACT_SOFTSIGN:    f(integral_constant<int, CS_ACT_SOFTSIGN>{}); break;
    case CS_ACT_MISH:        f(integral_constant<int, CS_ACT_MISH>{}); break;
    default:                 f(integral_constant<int, CS_ACT_IDENTITY>{}); break;
  }
}

// Sm90Compute's functor (CS_DUAL=0): instantiated on the fragment type
// (cutlass::Array<float, N>); its inputs are the tree's children in order (the
// accumulator, then G): out[i] = gate(g[i]) * (alpha * acc[i]).
template <class T>
struct CsGluFn {
  using Arguments = CsGluArgs;
  template <class Frag>
  CUTLASS_DEVICE Frag operator()(Frag const& acc, Frag const& g, Arguments const& a) const
  {
    Frag out;
    cs_with_gate(a.gate, [&](auto gate) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < Frag::kElements; ++i)
        out[i] = cs_activate(decltype(gate)::value, g[i], a.p0, a.p1) * (a.alpha * acc[i]);
    });
    return out;
  }
};

// The dual kernel's combine (CS_DUAL=1), on the two accumulators in registers:
// acc1(i) = gate(alpha * acc1(i)) * acc2(i) (the epilogue multiplies by alpha).
struct CsGluCombine {
  using Arguments = CsGluArgs;
  template <class Frag>
  CUTLASS_DEVICE static void apply(Frag& acc, Frag const& acc2, Arguments const& a)
  {
    cs_with_gate(a.gate, [&](auto gate) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < cute::size(acc); ++i)
        acc(i) = cs_activate(decltype(gate)::value, a.alpha * acc(i), a.p0, a.p1) * acc2(i);
    });
  }
};

// The CUTLASS 3 epilogue of every GEMM here: no C source, the output (D, or G) row-major,
// stored by TMA; Fusion is what it computes from the accumulator.
template <class ElementOut, int Align, class Fusion>
using CsEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto,
    ElementAcc, float,
    void, LayoutD, Align,
    ElementOut, LayoutD, Align,
    EpilogueSchedule,
    Fusion
  >::CollectiveOp;

// CUTLASS's own mainloop (CS_DUAL=0), with as many stages as fit beside Epilogue.
template <class Epilogue>
using CsMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementAB, LayoutA, kAlignAB,
    ElementAB, LayoutB, kAlignAB,
    ElementAcc,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    MainloopSchedule
  >::CollectiveOp;

#if CS_DUAL
// ---------------------------------------------------------------------------------------
// The dual kernel: D = alpha * gate(alpha * A * B) * (A * B2), one CUTLASS 3 kernel
// ---------------------------------------------------------------------------------------

namespace dual {

using FusionOp = cutlass::epilogue::fusion::ScaledAcc<ElementD, float, float>;

using CollectiveEpilogue = CsEpilogue<ElementD, kAlignD, FusionOp>;

// As many stages (A, B and B2 tiles) as fit beside the epilogue, at most 8, or CS_STAGES.
static constexpr int kStageBytes = (kTileM + 2 * kTileN) * kTileK * int(sizeof(ElementAB));
#ifdef CS_STAGES
static constexpr int kStages = CS_STAGES;
#else
static constexpr int kStages =
    cs_sm90::stages_fit<typename CollectiveEpilogue::SharedStorage>(kStageBytes);
#endif
static_assert(kStages >= 2, "CS_DUAL: fewer than 2 stages fit in shared memory (smaller tiles or TILE_K)");

using CollectiveMainloop = cs_dual::Mainloop<
    cs_dual::MainloopSm90TmaDual<kStages, ClusterShape, MainloopSchedule>,
    TileShape, ElementAB, cutlass::detail::TagToStrideA_t<LayoutA>,
    cutlass::detail::TagToStrideB_t<LayoutB>>;

// CUTLASS's epilogue for D's tiles, behind the wide view; the gate runs in its store.
using Epilogue = cs_dual::Epilogue<CollectiveEpilogue, CollectiveMainloop, CsGluCombine>;

#if CS_STREAMK
using TileSchedulerTag = cutlass::gemm::StreamKScheduler;
#else
using TileSchedulerTag = cutlass::gemm::PersistentScheduler;
#endif

// The kernel's problem is (M, 2 N, K, L): each work tile covers B's and B2's columns of
// one output tile.
using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, CollectiveMainloop, Epilogue, TileSchedulerTag>;

using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

}  // namespace dual

using StrideA = typename dual::GemmKernel::StrideA;   // (M,K,L): (lda, _1, L) or (_1, lda, L)
using StrideB = typename dual::GemmKernel::StrideB;   // (N,K,L): (ldb, _1, L) or (_1, ldb, L)
using StrideD = typename dual::GemmKernel::StrideD;   // (M,N,L): (ldd, _1, batch_stride_d)

#else
// ---------------------------------------------------------------------------------------
// GEMM 1: G = alpha * A * B -> fp32 workspace
// ---------------------------------------------------------------------------------------

namespace gemm1 {

using FusionOp = cutlass::epilogue::fusion::ScaledAcc<ElementG, float, float>;

using CollectiveEpilogue = CsEpilogue<ElementG, kAlignG, FusionOp>;

using CollectiveMainloop = CsMainloop<CollectiveEpilogue>;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
    cutlass::gemm::PersistentScheduler>;

using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

}  // namespace gemm1

// ---------------------------------------------------------------------------------------
// GEMM 2: D = gate(G) * (alpha * A * B2), G read by the epilogue (EVT)
// ---------------------------------------------------------------------------------------

namespace gemm2 {

// The epilogue's tile, stages and shared memory layouts, resolved the way the builder
// does (void C: no source), so that the aux load node matches the collective.
using EpiDesc = cutlass::epilogue::collective::detail::EpilogueDescriptor<
    TileShape, cutlass::epilogue::collective::EpilogueTileAuto, void, ElementD, EpilogueSchedule>;
using AuxDesc = cutlass::epilogue::collective::detail::AuxLoadDescriptor<EpiDesc, LayoutD, ElementG>;
using StrideG = typename AuxDesc::Stride;   // (M,N,L): (ldg, _1, m' ldg)

using GateInput = cutlass::epilogue::fusion::Sm90AuxLoad<
    AuxDesc::Stages, typename EpiDesc::EpilogueTile, ElementG, StrideG,
    typename AuxDesc::SmemLayoutAtom, typename AuxDesc::CopyOpS2R>;

using Callbacks = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<CsGluFn, ElementD, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90AccFetch,   // acc = A * B2
    GateInput>;                                // G

using CollectiveEpilogue = CsEpilogue<ElementD, kAlignD, Callbacks>;

using CollectiveMainloop = CsMainloop<CollectiveEpilogue>;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
    cutlass::gemm::PersistentScheduler>;

using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

}  // namespace gemm2

using StrideA = typename gemm1::GemmKernel::StrideA;   // (M,K,L): (lda, _1, L) or (_1, lda, L)
using StrideB = typename gemm1::GemmKernel::StrideB;   // (N,K,L): (ldb, _1, L) or (_1, ldb, L)
using StrideD = typename gemm2::GemmKernel::StrideD;   // (M,N,L): (ldd, _1, batch_stride_d)
static_assert(std::is_same_v<StrideD, gemm2::StrideG>, "G and D share the row-major stride type");
#endif

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
// Edge outputs: the columns and rows the TMA GEMMs leave out, one warp per output
// ---------------------------------------------------------------------------------------

struct CsEdgeArgs {
  const ElementAB* a; int64_t lda, sa; bool a_row;
  const ElementAB* b; int64_t ldb, sb;
  const ElementAB* b2; int64_t ldb2, sb2; bool b_row;
  ElementD* d; int64_t ldd, sd;
  int m, n, k, m_gemm, n_gemm;
  int64_t per_batch;   // outputs per batch: m * (n - n_gemm) + (m - m_gemm) * n_gemm
  int64_t total;       // batch * per_batch
  CsGluArgs glu;
};

__global__ void __launch_bounds__(256)
cs_edge_kernel(CsEdgeArgs e)
{
  int const lane = int(threadIdx.x & 31);
  cs_edges::for_each_output(e.m, e.n, e.m_gemm, e.n_gemm, e.per_batch, e.total,
                            [&](int64_t bz, int row, int col) {
    const ElementAB* a = e.a + bz * e.sa;
    const ElementAB* b = e.b + bz * e.sb;
    const ElementAB* b2 = e.b2 + bz * e.sb2;
    float g = 0.0f, h = 0.0f;
    for (int kk = lane; kk < e.k; kk += 32) {
      float const x = float(e.a_row ? a[int64_t(row) * e.lda + kk] : a[int64_t(kk) * e.lda + row]);
      float const y = float(e.b_row ? b[int64_t(kk) * e.ldb + col] : b[int64_t(col) * e.ldb + kk]);
      float const y2 = float(e.b_row ? b2[int64_t(kk) * e.ldb2 + col] : b2[int64_t(col) * e.ldb2 + kk]);
      g = fmaf(x, y, g);
      h = fmaf(x, y2, h);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      g += __shfl_xor_sync(0xffffffffu, g, o);
      h += __shfl_xor_sync(0xffffffffu, h, o);
    }
    if (lane == 0) {
      float const v = cs_activate(e.glu.gate, e.glu.alpha * g, e.glu.p0, e.glu.p1) * (e.glu.alpha * h);
      e.d[bz * e.sd + int64_t(row) * e.ldd + col] = ElementD(v);
    }
  });
}

// ---------------------------------------------------------------------------------------
// Host side: problem checks and geometry
// ---------------------------------------------------------------------------------------

static inline bool cs_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 0xF) == 0; }

// A TMA global stride (in elements of `align` per 16 bytes): a 16-byte multiple, < 2^39.
static inline bool cs_tma_stride_ok(int64_t elems, int64_t align)
{
  return elems >= 0 && elems < (int64_t(1) << 36) && elems % align == 0;
}

struct CsGeometry {
  int64_t m_gemm, n_gemm;       // the part the TMA GEMMs compute
  int64_t ldg;                  // G row stride (floats)
  uint64_t g_bytes;             // G, rounded up to 256 bytes
};

static CsGeometry cs_geometry(const cs_problem& p)
{
  CsGeometry g;
  g.m_gemm = kLayoutA == CS_LAYOUT_COL ? p.m / 8 * 8 : p.m;
  g.n_gemm = p.n / 8 * 8;
  g.ldg = g.n_gemm > 0 ? g.n_gemm : 8;
  g.g_bytes = CS_DUAL ? 0 : (uint64_t(p.batch) * uint64_t(g.m_gemm) * uint64_t(g.ldg) * 4 + 255) / 256 * 256;
  return g;
}

// The batch (L) stride handed to CUTLASS: the ABI's, or for a single batch a never-stepped
// value that is still a valid TMA stride.
static inline int64_t cs_batch_stride(const cs_problem& p, int64_t batch_stride, int64_t ld, int64_t outer)
{
  return p.batch > 1 ? batch_stride : ld * outer;
}

// A batch sharing its weights (B and B2 with batch stride 0: sequences through one
// projection) is one GEMM with the batches' rows stacked, when A (row-major) and D step by
// exactly one batch of rows: (batch * m) x k times k x n. TMA has no stride-0 dimension,
// so this is how shared weights reach the kernel; other shared cases are not taken.
static cs_problem cs_fold_batch(const cs_problem& p)
{
  if (p.batch <= 1 || p.batch_stride_b != 0 || p.batch_stride_b2 != 0) return p;
  if (kLayoutA != CS_LAYOUT_ROW || p.m <= 0 || p.batch_stride_a != p.lda * p.m ||
      p.batch_stride_d != p.ldd * p.m)
    return p;
  cs_problem q = p;
  q.m = p.m * p.batch;
  q.batch = 1;
  q.batch_stride_a = q.batch_stride_b = q.batch_stride_b2 = q.batch_stride_d = 0;
  return q;
}

// CS_OK when this kernel handles `p` (batches already folded).
static int32_t cs_check(const cs_problem& p, bool check_pointers)
{
  constexpr int64_t kMaxInt = 0x7fffffffLL;
  if (!kTypesOk) return CS_ERR_UNSUPPORTED;
  if (p.family != CS_FAMILY_GEMM_GLU) return CS_ERR_UNSUPPORTED;
  if (p.dtype_ab != kDtypeAB || p.dtype_cd != kDtypeD) return CS_ERR_UNSUPPORTED;
  if (p.layout_a != kLayoutA || p.layout_b != kLayoutB || p.layout_cd != CS_LAYOUT_ROW)
    return CS_ERR_UNSUPPORTED;
  if (p.gate < CS_ACT_IDENTITY || p.gate > CS_ACT_MISH) return CS_ERR_UNSUPPORTED;
  if (p.beta != 0.0f) return CS_ERR_UNSUPPORTED;
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.k == 0) return CS_ERR_UNSUPPORTED;
  if (p.m > kMaxInt || 2 * p.n > kMaxInt || p.k > kMaxInt || p.batch > kMaxInt) return CS_ERR_UNSUPPORTED;

  // Mainloops (TMA): 16-byte multiples for the strides, and for K where it is contiguous.
  bool const a_row = kLayoutA == CS_LAYOUT_ROW, b_row = kLayoutB == CS_LAYOUT_ROW;
  if ((a_row || !b_row) && p.k % kAlignAB != 0) return CS_ERR_UNSUPPORTED;
  int64_t const outer_a = a_row ? p.m : p.k, outer_b = b_row ? p.k : p.n;
  if (p.lda < (a_row ? p.k : p.m) || !cs_tma_stride_ok(p.lda, kAlignAB)) return CS_ERR_UNSUPPORTED;
  if (p.ldb < (b_row ? p.n : p.k) || !cs_tma_stride_ok(p.ldb, kAlignAB)) return CS_ERR_UNSUPPORTED;
  if (p.ldb2 < (b_row ? p.n : p.k) || !cs_tma_stride_ok(p.ldb2, kAlignAB)) return CS_ERR_UNSUPPORTED;
  // Broadcast operands (batch stride 0) would need a stride-0 TMA dimension: not handled.
  if (!cs_tma_stride_ok(cs_batch_stride(p, p.batch_stride_a, p.lda, outer_a), kAlignAB) ||
      (p.batch > 1 && p.batch_stride_a == 0)) return CS_ERR_UNSUPPORTED;
  if (!cs_tma_stride_ok(cs_batch_stride(p, p.batch_stride_b, p.ldb, outer_b), kAlignAB) ||
      (p.batch > 1 && p.batch_stride_b == 0)) return CS_ERR_UNSUPPORTED;
  if (!cs_tma_stride_ok(cs_batch_stride(p, p.batch_stride_b2, p.ldb2, outer_b), kAlignAB) ||
      (p.batch > 1 && p.batch_stride_b2 == 0)) return CS_ERR_UNSUPPORTED;

  // Epilogue (TMA store of D): 16-byte rows.
  if (p.ldd < p.n || !cs_tma_stride_ok(p.ldd, kAlignD)) return CS_ERR_UNSUPPORTED;
  if (!cs_tma_stride_ok(cs_batch_stride(p, p.batch_stride_d, p.ldd, p.m), kAlignD) ||
      (p.batch > 1 && p.batch_stride_d == 0)) return CS_ERR_UNSUPPORTED;
  if (uint64_t(p.batch) * uint64_t(p.m) * uint64_t(p.n) > (uint64_t(1) << 40)) return CS_ERR_UNSUPPORTED;

  if (check_pointers) {
    if (p.a == nullptr || p.b == nullptr || p.b2 == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    if (!cs_aligned16(p.a) || !cs_aligned16(p.b) || !cs_aligned16(p.b2) || !cs_aligned16(p.d))
      return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

// ---------------------------------------------------------------------------------------
// Host side: CUTLASS arguments
// ---------------------------------------------------------------------------------------

static StrideA cs_stride_a(const cs_problem& p)
{
  bool const a_row = kLayoutA == CS_LAYOUT_ROW;
  return cs_stride<StrideA>(p.lda, cs_batch_stride(p, p.batch_stride_a, p.lda, a_row ? p.m : p.k));
}

static StrideB cs_stride_b(const cs_problem& p, int64_t ld, int64_t batch_stride)
{
  bool const b_row = kLayoutB == CS_LAYOUT_ROW;
  return cs_stride<StrideB>(ld, cs_batch_stride(p, batch_stride, ld, b_row ? p.k : p.n));
}

#if CS_DUAL
static typename dual::Gemm::Arguments cs_dual_arguments(const cs_problem& p, const CsGeometry& g,
                                                        const CsGluArgs& glu)
{
  StrideD const dD = cs_stride<StrideD>(p.ldd, cs_batch_stride(p, p.batch_stride_d, p.ldd, p.m));
  int const L = int(p.batch);
  // The kernel's problem has 2 n' columns: B's and B2's (cutesmith_sm90_dual.cuh).
  typename dual::Gemm::Arguments args{
      L > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
      {int(g.m_gemm), 2 * int(g.n_gemm), int(p.k), L},
      {static_cast<ElementAB const*>(p.a), cs_stride_a(p), static_cast<ElementAB const*>(p.b),
       cs_stride_b(p, p.ldb, p.batch_stride_b), static_cast<ElementAB const*>(p.b2),
       cs_stride_b(p, p.ldb2, p.batch_stride_b2)},
      {{{}, nullptr, dD, static_cast<ElementD*>(p.d), dD}, glu},
      cs_sm90::hw_info(p)};
  args.epilogue.thread.alpha = p.alpha;
  args.epilogue.thread.beta = 0.0f;
  cs_sm90::scheduler_options(args, CS_SWIZZLE, CS_RASTER);
  return args;
}
#else
static typename gemm1::Gemm::Arguments cs_gemm1_arguments(const cs_problem& p, const CsGeometry& g, float* gbuf)
{
  StrideD const dG = cs_stride<StrideD>(g.ldg, g.m_gemm * g.ldg);
  int const L = int(p.batch);
  typename gemm1::Gemm::Arguments args{
      L > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
      {int(g.m_gemm), int(g.n_gemm), int(p.k), L},
      {static_cast<ElementAB const*>(p.a), cs_stride_a(p), static_cast<ElementAB const*>(p.b),
       cs_stride_b(p, p.ldb, p.batch_stride_b)},
      {{}, nullptr, dG, gbuf, dG},
      cs_sm90::hw_info(p)};
  args.epilogue.thread.alpha = p.alpha;
  args.epilogue.thread.beta = 0.0f;
  cs_sm90::scheduler_options(args, CS_SWIZZLE, CS_RASTER);
  return args;
}

static typename gemm2::Gemm::Arguments cs_gemm2_arguments(const cs_problem& p, const CsGeometry& g,
                                                          const float* gbuf, const CsGluArgs& glu)
{
  StrideD const dG = cs_stride<StrideD>(g.ldg, g.m_gemm * g.ldg);
  StrideD const dD = cs_stride<StrideD>(p.ldd, cs_batch_stride(p, p.batch_stride_d, p.ldd, p.m));
  int const L = int(p.batch);
  typename gemm2::Gemm::Arguments args{
      L > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
      {int(g.m_gemm), int(g.n_gemm), int(p.k), L},
      {static_cast<ElementAB const*>(p.a), cs_stride_a(p), static_cast<ElementAB const*>(p.b2),
       cs_stride_b(p, p.ldb2, p.batch_stride_b2)},
      {{}, nullptr, dD, static_cast<ElementD*>(p.d), dD},
      cs_sm90::hw_info(p)};
  // The tree's arguments, children first: acc (none), G (pointer, default, stride), then
  // the compute node's.
  args.epilogue.thread = {{}, {gbuf, ElementG(0), dG}, glu};
  cs_sm90::scheduler_options(args, CS_SWIZZLE, CS_RASTER);
  return args;
}

#endif

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

// Workspace: G, then GEMM 1's and GEMM 2's own (tile scheduler) workspaces.
struct CsWorkspace {
  uint64_t gemm1_at, gemm2_at, total;
};

static int32_t cs_workspace(const cs_problem& p, const CsGeometry& g, CsWorkspace* w)
{
  w->gemm1_at = g.g_bytes;
  w->gemm2_at = g.g_bytes;
  w->total = g.g_bytes;
#if CS_DUAL
  if (g.m_gemm > 0 && g.n_gemm > 0) {
    CsGluArgs const glu{};
    auto args = cs_dual_arguments(p, g, glu);   // pointers may be NULL here
    if (dual::Gemm::can_implement(args) != cutlass::Status::kSuccess) return CS_ERR_UNSUPPORTED;
    w->total = uint64_t(dual::Gemm::get_workspace_size(args));
  }
#else
  if (g.m_gemm > 0 && g.n_gemm > 0) {
    CsGluArgs const glu{};
    auto args1 = cs_gemm1_arguments(p, g, nullptr);   // pointers may be NULL here
    auto args2 = cs_gemm2_arguments(p, g, nullptr, glu);
    if (gemm1::Gemm::can_implement(args1) != cutlass::Status::kSuccess) return CS_ERR_UNSUPPORTED;
    if (gemm2::Gemm::can_implement(args2) != cutlass::Status::kSuccess) return CS_ERR_UNSUPPORTED;
    uint64_t const b1 = (uint64_t(gemm1::Gemm::get_workspace_size(args1)) + 255) / 256 * 256;
    w->gemm2_at = w->gemm1_at + b1;
    w->total = w->gemm2_at + uint64_t(gemm2::Gemm::get_workspace_size(args2));
  }
#endif
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
  cs_problem const p = cs_fold_batch(*problem);
  if (cs_check(p, /*check_pointers=*/false) != CS_OK) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;
  CsWorkspace w;
  int32_t const status = cs_workspace(p, cs_geometry(p), &w);
  if (status != CS_OK) return status;
  *bytes = w.total;
  return CS_OK;
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  cs_problem const p = cs_fold_batch(*problem);
  int32_t status = cs_check(p, /*check_pointers=*/true);
  if (status != CS_OK) return status;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;

  CsGeometry const g = cs_geometry(p);
  CsWorkspace w;
  status = cs_workspace(p, g, &w);
  if (status != CS_OK) return status;
  if (w.total > 0 && (p.workspace == nullptr || p.workspace_bytes < w.total)) return CS_ERR_WORKSPACE;
  if (w.total > 0 && !cs_aligned16(p.workspace)) return CS_ERR_UNSUPPORTED;
  char* ws = static_cast<char*>(p.workspace);
  [[maybe_unused]] float* gbuf = reinterpret_cast<float*>(ws);

  CsGluArgs glu;
  glu.gate = p.gate;
  cs_gate_params(p.gate, &glu.p0, &glu.p1);
  glu.alpha = p.alpha;

  // The GEMMs over (m_gemm, n_gemm).
#if CS_DUAL
  if (g.m_gemm > 0 && g.n_gemm > 0) {
    auto args = cs_dual_arguments(p, g, glu);
    dual::Gemm gemm;
    cutlass::Status s = gemm.initialize(args, ws, stream);
    if (s != cutlass::Status::kSuccess) return cs_status_of(s);
    s = gemm.run(stream);
    if (s != cutlass::Status::kSuccess) return cs_status_of(s);
  }
#else
  if (g.m_gemm > 0 && g.n_gemm > 0) {
    auto args1 = cs_gemm1_arguments(p, g, gbuf);
    gemm1::Gemm gemm_g;
    cutlass::Status s = gemm_g.initialize(args1, ws + w.gemm1_at, stream);
    if (s != cutlass::Status::kSuccess) return cs_status_of(s);
    s = gemm_g.run(stream);
    if (s != cutlass::Status::kSuccess) return cs_status_of(s);

    auto args2 = cs_gemm2_arguments(p, g, gbuf, glu);
    gemm2::Gemm gemm_d;
    s = gemm_d.initialize(args2, ws + w.gemm2_at, stream);
    if (s != cutlass::Status::kSuccess) return cs_status_of(s);
    s = gemm_d.run(stream);
    if (s != cutlass::Status::kSuccess) return cs_status_of(s);
  }
#endif

  // The edge outputs.
  int64_t const per_batch = p.m * (p.n - g.n_gemm) + (p.m - g.m_gemm) * g.n_gemm;
  if (per_batch > 0) {
    CsEdgeArgs e;
    e.a = static_cast<const ElementAB*>(p.a); e.lda = p.lda; e.sa = p.batch_stride_a;
    e.a_row = kLayoutA == CS_LAYOUT_ROW;
    e.b = static_cast<const ElementAB*>(p.b); e.ldb = p.ldb; e.sb = p.batch_stride_b;
    e.b2 = static_cast<const ElementAB*>(p.b2); e.ldb2 = p.ldb2; e.sb2 = p.batch_stride_b2;
    e.b_row = kLayoutB == CS_LAYOUT_ROW;
    e.d = static_cast<ElementD*>(p.d); e.ldd = p.ldd; e.sd = p.batch_stride_d;
    e.m = int(p.m); e.n = int(p.n); e.k = int(p.k);
    e.m_gemm = int(g.m_gemm); e.n_gemm = int(g.n_gemm);
    e.per_batch = per_batch;
    e.total = per_batch * p.batch;
    e.glu = glu;
    int64_t blocks = (e.total + 7) / 8;
    int64_t const cap = int64_t(p.sm_count > 0 ? p.sm_count : 132) * 16;
    if (blocks > cap) blocks = cap;
    cs_edge_kernel<<<unsigned(blocks), 256, 0, stream>>>(e);
    cudaError_t const err = cudaGetLastError();
    if (err != cudaSuccess) return int32_t(err);
  }
  return CS_OK;
}
