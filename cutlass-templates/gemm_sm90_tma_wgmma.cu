// cutesmith template: Hopper (sm_90a) GEMM in raw CuTe.
//
//   Z[l] = alpha * A[l] (m x k) * B[l] (k x n) + beta * C[l] (m x n)   (fp32)
//   D[l] = chain(Z[l]) rounded once to D's type                        for l in [0, batch)
//
// Families: CS_FAMILY_GEMM, and CS_FAMILY_GEMM_BIAS_ACT when the workload's epilogue chain
// is compiled in (the chain starts with the row-bias add, operand 0, and the activation).
// Types: A and B bf16 or f16 (CS_WL_DTYPE_AB; default bf16, or f16 with -DCS_GEMM_FP16);
// C and D bf16, f16 or f32 (CS_WL_DTYPE_CD; default the type of A and B); fp32
// accumulation. Layouts, fixed at compile time and checked at run time:
//   A row-major (K contiguous) or column-major (M contiguous)       CS_WL_LAYOUT_A, default row
//   B column-major (K contiguous) or row-major (N contiguous)       CS_WL_LAYOUT_B, default col
//   C and D row- or column-major                                    CS_WL_LAYOUT_CD; when it
//     is not given, both (the default TN build compiles one kernel for the two)
// A batch stride of 0 for A, B or C shares one matrix across the batch.
//
// Strategy: a persistent grid (one CTA per SM) walks the TILE_M x TILE_N tiles of a
// row-major D, over the batch too, neighbouring CTAs on neighbouring tiles. A column-major D is
// a row-major D^T = B^T * A^T: the host swaps the roles of A and B (and of m and n), and
// the epilogue swaps the coordinates back for the chain, which indexes its operands by the
// logical (row, col) of D. So the kernel always sees an "A" of M x K and a "B" of N x K,
// each either K-major or MN-major in global memory.
// TMA (SM90_TMA_LOAD) brings TILE_M x TILE_K / TILE_N x TILE_K tiles of A and B into
// swizzled shared memory in their natural order (K-major: 128B-swizzled rows along K;
// MN-major: swizzled columns along M or N, the GMMA::Layout_MN_* atoms) through a
// STAGES-deep ring guarded by mbarriers ("full": TMA bytes landed, "empty": every consumer
// warp is done reading). WARPGROUPS consumer warpgroups issue WGMMA straight from shared
// memory (SS; the transposed-operand forms read MN-major tiles) and keep one WGMMA batch in
// flight. A producer warp after the consumer warpgroups issues the TMA loads (warp
// specialization: the consumers never wait for a stage to be released; measured on an
// H100 at 4096^3 against the earlier layout, where one thread of warp 0 was also the
// producer: 128x128x64 4 stages 295.1 -> 289.0 us, 128x256x64 3 stages 245.7 -> 243.9,
// 4 stages 240.5, cuBLAS 179). The ring runs on across a CTA's tiles: the producer loads
// the next tile's first stages while the consumers run this tile's epilogue (persistent
// against one CTA per tile, 128x256x64 4 stages: 235.6 -> 199.7 us, cuBLAS 176.6). The
// epilogue computes alpha * acc + beta * C and applies the chain per element at its
// coordinates (an identity tensor partitioned like the accumulator). A 16-bit D whose
// pointer and strides TMA can address leaves through shared memory: 64-column chunks of
// the tile, two staging buffers, one TMA store per chunk (TMA clips what lies outside D),
// drained while the next tile's main loop runs (CS_EPI_TMA; 4096^3 on an H100: 199.4 ->
// 191.1 us, cuBLAS 175.9-176.6). Otherwise (an f32 D, an unaligned D, or no room for the
// buffers beside the ring) D is written from registers (two adjacent columns per store
// where both are in bounds), predicated on the same coordinates. So m and n need not be
// multiples of the tile. TMA fills out-of-bounds rows/columns of A and B with zeros (the K residue).
// A shared operand (batch stride 0) is a size-1 batch mode read at coordinate 0.
//
// TMA needs 16-byte aligned A and B, leading dimensions and batch strides of A and B a
// multiple of 8 elements, and (as CUTLASS asks) the contiguous extent of A and B (k, or m
// for a column-major A, n for a row-major B) a multiple of 8. A problem outside that with
// no chain, TN layouts and D in the input type runs on the predicated fallback GEMM;
// anything else returns CS_ERR_UNSUPPORTED.
//
// Parameters (override with -DNAME=VALUE):
//   CS_TILE_M      128  CTA tile rows of D (multiple of 64 * CS_WARPGROUPS)
//   CS_TILE_N      128  CTA tile columns of D (WGMMA N: multiple of 8, at most 256)
//   CS_TILE_K      64   K per stage (64 16-bit elements = one 128-byte swizzle row)
//   CS_STAGES      4    depth of the TMA -> WGMMA shared memory ring
//   CS_WARPGROUPS  2    consumer warpgroups, stacked along M
//   CS_CLUSTER_M   1    cluster size CLUSTER_M * CLUSTER_N (co-scheduling of neighbouring
//   CS_CLUSTER_N   1    CTAs only: no TMA multicast yet)
//   CS_EPI_TMA     1    a 16-bit D through shared memory and TMA stores (0: from registers)
// Rows and columns above are those of the row-major D the kernel computes: of D^T for a
// column-major D.

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cute/arch/cluster_sm90.hpp>
#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

#include <cutlass/cutlass.h>
#include <cutlass/arch/barrier.h>
#include <cutlass/device_kernel.h>   // CUTLASS_GRID_CONSTANT

#include "cutesmith_abi.h"
#include "cutesmith_chain.cuh"
#include "cutesmith_fallback_gemm.cuh"

using namespace cute;

// ---------------------------------------------------------------------------------------
// Strategy parameters (override with -DNAME=VALUE)
// ---------------------------------------------------------------------------------------

#ifndef CS_TILE_M
#define CS_TILE_M 128      // CTA tile rows of D (multiple of 64 * CS_WARPGROUPS)
#endif
#ifndef CS_TILE_N
#define CS_TILE_N 128      // CTA tile columns of D (WGMMA N: multiple of 8, <= 256)
#endif
#ifndef CS_TILE_K
#define CS_TILE_K 64       // K per stage: 64 bf16 = 128 bytes = one SW128 row
#endif
#ifndef CS_STAGES
#define CS_STAGES 4        // depth of the TMA -> WGMMA shared memory ring
#endif
#ifndef CS_WARPGROUPS
#define CS_WARPGROUPS 2    // consumer warpgroups, stacked along M
#endif
#ifndef CS_CLUSTER_M
#define CS_CLUSTER_M 1     // cluster shape (co-scheduling only: no TMA multicast yet)
#endif
#ifndef CS_CLUSTER_N
#define CS_CLUSTER_N 1
#endif
#ifndef CS_EPI_TMA
#define CS_EPI_TMA 1       // a 16-bit D leaves through shared memory and TMA stores
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
// Which layouts of C and D this build runs (without CS_WL_LAYOUT_CD: both).
#if defined(CS_WL_LAYOUT_CD)
static constexpr bool kCdRowOk = (CS_WL_LAYOUT_CD == CS_LAYOUT_ROW);
static constexpr bool kCdColOk = (CS_WL_LAYOUT_CD == CS_LAYOUT_COL);
#else
static constexpr bool kCdRowOk = true;
static constexpr bool kCdColOk = true;
#endif

// What this build can run at all (an instance for another workload still compiles, and
// every launch returns CS_ERR_UNSUPPORTED).
static constexpr bool kTypesOk =
    (kDtypeAB == CS_DTYPE_BF16 || kDtypeAB == CS_DTYPE_F16) &&
    (kDtypeCD == CS_DTYPE_BF16 || kDtypeCD == CS_DTYPE_F16 || kDtypeCD == CS_DTYPE_F32) &&
    (kLayoutA == CS_LAYOUT_ROW || kLayoutA == CS_LAYOUT_COL) &&
    (kLayoutB == CS_LAYOUT_ROW || kLayoutB == CS_LAYOUT_COL);

using ElementAB  = std::conditional_t<kDtypeAB == CS_DTYPE_F16, cute::half_t, cute::bfloat16_t>;
using ElementCD  = std::conditional_t<kDtypeCD == CS_DTYPE_F32, float,
                   std::conditional_t<kDtypeCD == CS_DTYPE_F16, cute::half_t, cute::bfloat16_t>>;
using ElementAcc = float;
// The fallback GEMM's element (the same bits as ElementAB, in CUDA's type).
using FallbackElement = std::conditional_t<kDtypeAB == CS_DTYPE_F16, __half, __nv_bfloat16>;

// Where K lies in global memory, seen as the kernel's M x K "A" and N x K "B" of a
// row-major D: A row-major and B column-major are K-major, the others MN-major. For a
// column-major D the kernel's A is the workload's B and its B is the workload's A.
static constexpr GMMA::Major kMajorA = kLayoutA == CS_LAYOUT_ROW ? GMMA::Major::K : GMMA::Major::MN;
static constexpr GMMA::Major kMajorB = kLayoutB == CS_LAYOUT_COL ? GMMA::Major::K : GMMA::Major::MN;

static constexpr int kTileM      = CS_TILE_M;
static constexpr int kTileN      = CS_TILE_N;
static constexpr int kTileK      = CS_TILE_K;
static constexpr int kStages     = CS_STAGES;
static constexpr int kWarpgroups = CS_WARPGROUPS;
static constexpr int kClusterM   = CS_CLUSTER_M;
static constexpr int kClusterN   = CS_CLUSTER_N;
static constexpr int kThreads    = 128 * kWarpgroups;    // consumer (WGMMA) threads
static constexpr int kProducerWarp = kThreads / 32;        // one more warp: the TMA producer
static constexpr int kCtaThreads = kThreads + 32;

static_assert(kTileM % (64 * kWarpgroups) == 0, "TILE_M must be a multiple of 64 * WARPGROUPS");
static_assert(kTileN % 8 == 0 && kTileN <= 256, "TILE_N must be a multiple of 8, at most 256");
static_assert(kTileK * sizeof(ElementAB) % 128 == 0, "TILE_K must span whole 128B swizzle rows");
static_assert(kStages >= 2, "the pipeline needs at least two stages");

// The TMA-store epilogue: a 16-bit D goes out in (TILE_M x kEpiN) chunks, one 128-byte
// swizzle row wide, through two staging buffers in shared memory, where they fit beside
// the ring (an H100 SM gives a block at most 227 KB).
static constexpr int kEpiN = 64;
static constexpr int kRingBytes = kStages * (kTileM + kTileN) * kTileK * int(sizeof(ElementAB));
static constexpr int kEpiBytes  = 2 * kTileM * kEpiN * int(sizeof(ElementCD));   // two buffers
static constexpr bool kEpiTma = CS_EPI_TMA != 0 && sizeof(ElementCD) == 2 && kTileN % kEpiN == 0 &&
                                kRingBytes + kEpiBytes + 1024 <= 227 * 1024;

// ---------------------------------------------------------------------------------------
// Shared memory
// ---------------------------------------------------------------------------------------

// The swizzle atom of one operand's (BLK_MN, BLK_K) tile, as CUTLASS's ss_smem_selector
// picks it: K-major takes 128B rows along K (TILE_K spans them whole); MN-major takes the
// widest swizzle whose atom (64, 32, 16 or 8 16-bit elements along MN) divides BLK_MN.
template <GMMA::Major Major, class T, int BLK_MN>
constexpr auto cs_smem_atom()
{
  if constexpr (Major == GMMA::Major::K) {
    return GMMA::Layout_K_SW128_Atom<T>{};
  } else if constexpr (BLK_MN % size<0>(GMMA::Layout_MN_SW128_Atom<T>{}) == 0) {
    return GMMA::Layout_MN_SW128_Atom<T>{};
  } else if constexpr (BLK_MN % size<0>(GMMA::Layout_MN_SW64_Atom<T>{}) == 0) {
    return GMMA::Layout_MN_SW64_Atom<T>{};
  } else if constexpr (BLK_MN % size<0>(GMMA::Layout_MN_SW32_Atom<T>{}) == 0) {
    return GMMA::Layout_MN_SW32_Atom<T>{};
  } else {
    static_assert(BLK_MN % size<0>(GMMA::Layout_MN_INTER_Atom<T>{}) == 0,
                  "an MN-major tile must be a multiple of 8 elements along MN");
    return GMMA::Layout_MN_INTER_Atom<T>{};
  }
}

// (BLK_MN, BLK_K, PIPE) for one operand. An MN-major tile stacks its atoms along K first
// (Step<_2,_1,_3>, as CUTLASS's mainloops do), so one TMA box spans the whole BLK_K.
template <GMMA::Major Major, class T, int BLK_MN>
constexpr auto cs_smem_layout()
{
  auto shape = make_shape(Int<BLK_MN>{}, Int<kTileK>{}, Int<kStages>{});
  if constexpr (Major == GMMA::Major::K) {
    return tile_to_shape(cs_smem_atom<Major, T, BLK_MN>(), shape, Step<_1,_2,_3>{});
  } else {
    return tile_to_shape(cs_smem_atom<Major, T, BLK_MN>(), shape, Step<_2,_1,_3>{});
  }
}

// (BLK_M, kEpiN, 2): the epilogue's two staging buffers of D, N contiguous in 128-byte
// swizzled rows (the layout TMA stores from); a placeholder element without kEpiTma.
template <class TD>
constexpr auto cs_smem_layout_d()
{
  if constexpr (kEpiTma) {
    return tile_to_shape(GMMA::Layout_K_SW128_Atom<TD>{},
                         make_shape(Int<kTileM>{}, Int<kEpiN>{}, Int<2>{}), Step<_1,_2,_3>{});
  } else {
    return Layout<Shape<_1,_1,_1>>{};
  }
}

template <class TA, class TB, class TD,
          class SmemLayoutA,   // (BLK_M,BLK_K,PIPE)
          class SmemLayoutB,   // (BLK_N,BLK_K,PIPE)
          class SmemLayoutD>   // (BLK_M,EPI_N,2)
struct SharedStorage
{
  // 1024B alignment: the SW128 pattern repeats every 8 rows x 128B.
  alignas(1024) cute::ArrayEngine<TA, cosize_v<SmemLayoutA>> A;
  alignas(1024) cute::ArrayEngine<TB, cosize_v<SmemLayoutB>> B;
  alignas(1024) cute::ArrayEngine<TD, cosize_v<SmemLayoutD>> D;

  alignas(8) uint64_t full_barrier [size<2>(SmemLayoutA{})];   // TMA -> MMA: stage loaded
  alignas(8) uint64_t empty_barrier[size<2>(SmemLayoutA{})];   // MMA -> TMA: stage free
};

// ---------------------------------------------------------------------------------------
// Kernel
// ---------------------------------------------------------------------------------------

// A 32-bit store to shared memory by its shared-window address (STS; a plain store
// through the generic pointer would be a generic ST).
CUTE_DEVICE void cs_st_shared_u32(void const* p, uint32_t v)
{
  uint32_t const a = cute::cast_smem_ptr_to_uint(p);
  asm volatile("st.shared.u32 [%0], %1;" :: "r"(a), "r"(v) : "memory");
}

template <class CtaTiler,
          class TA, class SmemLayoutA, class TmaA,
          class TB, class SmemLayoutB, class TmaB,
          class TD, class SmemLayoutD, class TmaD, class TiledMma>
__global__ static
__launch_bounds__(kCtaThreads, 1)
void
cs_gemm_sm90_kernel(int M, int N, int K, int L,            // L: the batch count
                    int La, int Lb,                       // batch extents of the TMA views (1: shared)
                    CtaTiler cta_tiler,
                    CUTLASS_GRID_CONSTANT TmaA const tma_a,
                    CUTLASS_GRID_CONSTANT TmaB const tma_b,
                    TD const* C, int64_t ldc, int64_t batch_stride_c,
                    TD      * D, int64_t ldd, int64_t batch_stride_d,
                    CUTLASS_GRID_CONSTANT TmaD const tma_d,   // D's TMA store (when tma_store)
                    bool tma_store,
                    TiledMma tiled_mma,
                    float alpha, float beta,
                    bool transposed,                      // D^T computed: swap (m,n) for the chain
                    CUTLASS_GRID_CONSTANT cs_problem const problem)   // the chain's operands
{
  // =====================================================================================
  // Preconditions
  // =====================================================================================
  CUTE_STATIC_ASSERT_V(rank(cta_tiler) == Int<3>{});                   // (BLK_M,BLK_N,BLK_K)
  static_assert(is_static<SmemLayoutA>::value && is_static<SmemLayoutB>::value);
  CUTE_STATIC_ASSERT_V(size<0>(SmemLayoutA{}) == size<0>(cta_tiler));  // BLK_M
  CUTE_STATIC_ASSERT_V(size<0>(SmemLayoutB{}) == size<1>(cta_tiler));  // BLK_N
  CUTE_STATIC_ASSERT_V(size<1>(SmemLayoutA{}) == size<2>(cta_tiler));  // BLK_K
  CUTE_STATIC_ASSERT_V(size<1>(SmemLayoutB{}) == size<2>(cta_tiler));  // BLK_K
  CUTE_STATIC_ASSERT_V(size<2>(SmemLayoutA{}) == size<2>(SmemLayoutB{}));  // PIPE
  CUTE_STATIC_ASSERT_V(size(tiled_mma) == Int<kThreads>{});

  constexpr int PIPE = size<2>(SmemLayoutA{});
  // Every stage is one full A box plus one full B box (TMA counts zero-filled bytes too).
  constexpr uint32_t kTmaTransactionBytes =
      uint32_t(size(take<0,2>(SmemLayoutA{})) * sizeof(TA) +     // BLK_M * BLK_K elements
               size(take<0,2>(SmemLayoutB{})) * sizeof(TB));     // BLK_N * BLK_K elements

  // =====================================================================================
  // Tiles: a persistent grid walks the (m, n, batch) tiles, m fastest
  // =====================================================================================
  // CTA b takes tiles b, b + gridDim.x, ... Neighbouring CTAs work on neighbouring tiles
  // at any time, so one wave of tiles shares most of its A rows and B columns in L2.
  int const tiles_m = (M + int(size<0>(cta_tiler)) - 1) / int(size<0>(cta_tiler));
  int const tiles_n = (N + int(size<1>(cta_tiler)) - 1) / int(size<1>(cta_tiler));
  int const tiles   = tiles_m * tiles_n * L;
  int const k_tile_count = (K + int(size<2>(cta_tiler)) - 1) / int(size<2>(cta_tiler));   // ceil(K / BLK_K)
  auto tile_coord = [&](int t) {                                      // -> (m, n, l)
    int const mn = t % (tiles_m * tiles_n);
    return make_tuple(mn % tiles_m, mn / tiles_m, t / (tiles_m * tiles_n));
  };

  // =====================================================================================
  // Full tensors
  // =====================================================================================
  Tensor mA_mkl = tma_a.get_tma_tensor(make_shape(M, K, La));          // (M,K,La) TMA coords
  Tensor mB_nkl = tma_b.get_tma_tensor(make_shape(N, K, Lb));          // (N,K,Lb) TMA coords
  bool const has_c = (beta != 0.0f);

  // =====================================================================================
  // Shared memory
  // =====================================================================================
  extern __shared__ __align__(1024) char shared_memory[];
  using Storage = SharedStorage<TA, TB, TD, SmemLayoutA, SmemLayoutB, SmemLayoutD>;
  Storage& smem = *reinterpret_cast<Storage*>(shared_memory);
  Tensor sA = make_tensor(make_smem_ptr(smem.A.begin()), SmemLayoutA{}); // (BLK_M,BLK_K,PIPE)
  Tensor sB = make_tensor(make_smem_ptr(smem.B.begin()), SmemLayoutB{}); // (BLK_N,BLK_K,PIPE)

  // =====================================================================================
  // MMA partitions and accumulators
  // =====================================================================================
  // (The producer warp computes no MMA partition of its own: it takes consumer thread 0's.)
  ThrMMA thr_mma = tiled_mma.get_thread_slice(threadIdx.x < kThreads ? threadIdx.x : 0);
  Tensor tCsA = thr_mma.partition_A(sA);                               // (MMA,MMA_M,MMA_K,PIPE)
  Tensor tCsB = thr_mma.partition_B(sB);                               // (MMA,MMA_N,MMA_K,PIPE)
  Tensor tCrA = thr_mma.make_fragment_A(tCsA);                         // (MMA,MMA_M,MMA_K,PIPE) smem descriptors
  Tensor tCrB = thr_mma.make_fragment_B(tCsB);                         // (MMA,MMA_N,MMA_K,PIPE) smem descriptors
  Tensor tCrAcc = partition_fragment_C(tiled_mma, take<0,2>(cta_tiler)); // (MMA,MMA_M,MMA_N) fp32

  // =====================================================================================
  // The ring of stages
  // =====================================================================================
  using FullBarrier  = cutlass::arch::ClusterTransactionBarrier;       // TMA arrivals + tx bytes
  using EmptyBarrier = cutlass::arch::ClusterBarrier;                  // consumer-thread arrivals

  int  const warp_idx = cutlass::canonical_warp_idx_sync();
  bool const lane_predicate = cute::elect_one_sync();
  // Warp specialization: the warp after the consumer warpgroups only issues TMA, so no
  // consumer warp ever waits on the empty barrier (a producer inside warpgroup 0 held that
  // warpgroup's next WGMMAs until the slowest consumer had released the stage).
  bool const producer_warp = (warp_idx == kProducerWarp);
  bool const is_producer = producer_warp && lane_predicate;
  uint64_t* full_barrier  = smem.full_barrier;
  uint64_t* empty_barrier = smem.empty_barrier;

  if (is_producer) {
    cute::prefetch_tma_descriptor(tma_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(tma_b.get_tma_descriptor());
    CUTE_UNROLL
    for (int pipe = 0; pipe < PIPE; ++pipe) {
      FullBarrier::init (&full_barrier [pipe], 1);          // one arrive_and_expect_tx per fill
      EmptyBarrier::init(&empty_barrier[pipe], kThreads / 32);   // one release per consumer warp
    }
  }
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  // Both sides count the k tiles they have passed over all of this CTA's tiles (`it`):
  // k tile `it` lives in stage it % PIPE, on that stage's (it / PIPE)-th use. A barrier's
  // phase parity flips each time it completes, so a wait for its r-th completion
  // (counting from 1) waits on parity (r - 1) & 1.
  if (producer_warp) {
    // The producer: fills stage after stage, running ahead into the next tile while the
    // consumers finish this one (its epilogue overlaps those loads).
    if (is_producer) {
      int it = 0;
      for (int t = int(blockIdx.x); t < tiles; t += int(gridDim.x)) {
        auto const [tm, tn, l] = tile_coord(t);
        Tensor gA = local_tile(mA_mkl(_, _, La == 1 ? 0 : l), cta_tiler, make_coord(tm, tn, _),
                               Step<_1, X,_1>{});                      // (BLK_M,BLK_K,k)
        Tensor gB = local_tile(mB_nkl(_, _, Lb == 1 ? 0 : l), cta_tiler, make_coord(tm, tn, _),
                               Step< X,_1,_1>{});                      // (BLK_N,BLK_K,k)
        // No multicast: CTA 0 of a 1-CTA multicast layout. The TMA owns all of mode 0.
        auto [tAgA, tAsA] = tma_partition(tma_a, Int<0>{}, Layout<_1>{},
                                          group_modes<0,2>(sA), group_modes<0,2>(gA));  // (TMA,k), (TMA,PIPE)
        auto [tBgB, tBsB] = tma_partition(tma_b, Int<0>{}, Layout<_1>{},
                                          group_modes<0,2>(sB), group_modes<0,2>(gB));  // (TMA,k), (TMA,PIPE)
        // The TMA is responsible for all of mode 0 of tAsA and tBsB: one stage's bytes.
        static_assert(kTmaTransactionBytes == sizeof(make_tensor_like(tensor<0>(tAsA))) +
                                              sizeof(make_tensor_like(tensor<0>(tBsB))));
        CUTE_NO_UNROLL
        for (int k_tile = 0; k_tile < k_tile_count; ++k_tile, ++it) {
          int const stage = it % PIPE, use = it / PIPE;
          // From the second use on, wait until every consumer warp has released it.
          if (use > 0) EmptyBarrier::wait(&empty_barrier[stage], uint32_t(use - 1) & 1);
          FullBarrier::arrive_and_expect_tx(&full_barrier[stage], kTmaTransactionBytes);
          copy(tma_a.with(full_barrier[stage]), tAgA(_, k_tile), tAsA(_, stage));
          copy(tma_b.with(full_barrier[stage]), tBgB(_, k_tile), tBsB(_, stage));
        }
      }
    }
    return;
  }

  bool const lane_zero = (threadIdx.x % 32) == 0;
  int it = 0;
  int epi_it = 0;                                          // staging buffer uses (TMA-store epilogue)
  for (int t = int(blockIdx.x); t < tiles; t += int(gridDim.x)) {
    auto const coord = tile_coord(t);
    int const tm = get<0>(coord), tn = get<1>(coord), l = get<2>(coord);

    // ===================================================================================
    // Main loop
    // ===================================================================================
    clear(tCrAcc);
    int prev_stage = 0;                                    // stage of the MMA batch still in flight
    CUTE_NO_UNROLL
    for (int k_tile = 0; k_tile < k_tile_count; ++k_tile, ++it)
    {
      int const stage = it % PIPE;
      // Wait until TMA has landed k_tile in stage (its (it / PIPE + 1)-th fill).
      FullBarrier::wait(&full_barrier[stage], uint32_t(it / PIPE) & 1);

      // Issue the WGMMAs of one k tile: (V,M) x (V,N) => (V,M,N)
      warpgroup_fence_operand(tCrAcc);
      warpgroup_arrive();
      gemm(tiled_mma, tCrA(_,_,_,stage), tCrB(_,_,_,stage), tCrAcc);
      warpgroup_commit_batch();
      // Keep this batch in flight; the previous one (k_tile - 1) is now complete.
      warpgroup_wait<1>();
      warpgroup_fence_operand(tCrAcc);

      if (k_tile > 0 && lane_zero) {
        // Release the stage k_tile - 1 was read from (the producer warp refills it): the
        // whole warp has passed the wait above, so its first lane speaks for it.
        EmptyBarrier::arrive(&empty_barrier[prev_stage]);
      }
      prev_stage = stage;
    }

    warpgroup_wait<0>();
    warpgroup_fence_operand(tCrAcc);
    if (k_tile_count > 0 && lane_zero) EmptyBarrier::arrive(&empty_barrier[prev_stage]);   // the tile's last stage

    // ===================================================================================
    // Epilogue: D = chain(alpha * acc + beta * C), predicated on (m < M, n < N)
    // ===================================================================================
    TD const* C_l = has_c ? C + l * batch_stride_c : C;                // stride 0: shared C
    Tensor mC = make_tensor(make_gmem_ptr(C_l),
                            make_shape(M, N), make_stride(ldc, Int<1>{}));  // (M,N) row-major, read at (m,n)
    Tensor mD = make_tensor(make_gmem_ptr(D + l * batch_stride_d),
                            make_shape(M, N), make_stride(ldd, Int<1>{}));  // (M,N) row-major
    Tensor cD = make_identity_tensor(make_shape(M, N));                // (M,N) -> (m,n)
    auto const cta_coord = make_coord(tm, tn, _);                       // (m,n,k)
    Tensor gD = local_tile(mD, cta_tiler, cta_coord, Step<_1,_1, X>{}); // (BLK_M,BLK_N)
    Tensor cDt = local_tile(cD, cta_tiler, cta_coord, Step<_1,_1, X>{}); // (BLK_M,BLK_N) -> (m,n)
    Tensor tCgD = thr_mma.partition_C(gD);                             // (MMA,MMA_M,MMA_N)
    Tensor tCcD = thr_mma.partition_C(cDt);                            // (MMA,MMA_M,MMA_N) -> (m,n)
    // D's value i of this thread. Outside D (a ragged tile) it reads C and the chain's
    // operands at the nearest element inside and its value is never stored: no branch
    // around the loads, so the compiler can issue a tile's loads back to back instead of
    // waiting out each one's latency in its own branch.
    auto value = [&](int i) {
      auto const mn = tCcD(i);                                         // (m,n) of this D
      int const m_in = cute::min(int(get<0>(mn)), M - 1);
      int const n_in = cute::min(int(get<1>(mn)), N - 1);
      float z = alpha * tCrAcc(i);
      if (has_c) {
        z += beta * static_cast<float>(mC(m_in, n_in));
      }
      if constexpr (!cs_chain::kIdentity) {
        // The chain's operands are indexed by the workload's (row, col) of D.
        int64_t const row = transposed ? n_in : m_in;
        int64_t const col = transposed ? m_in : n_in;
        z = cs_chain_at<cs_chain>(problem, z, l, row, col);
      }
      return static_cast<TD>(z);
    };
    // WGMMA's accumulator holds D's columns in pairs (values 2j and 2j + 1 of a thread
    // are columns n and n + 1 of one row).
    static_assert(decltype(size(tCrAcc))::value % 2 == 0, "values come in column pairs");
    if constexpr (kEpiTma) {
      if (tma_store) {
        // Through shared memory: the tile's 64-column chunks in turn go to staging buffer
        // 0 or 1 (consumer threads write their pairs, 32 bits each, into the swizzled
        // rows), then one thread issues the chunk's TMA store and the consumers go on. The
        // stores drain while the next chunk is written and the next tile's main loop
        // runs; a buffer is written again only once the store two chunks back has read
        // it. TMA clips the rows and columns outside D.
        Tensor sD = make_tensor(make_smem_ptr(smem.D.begin()), SmemLayoutD{});   // (BLK_M,EPI_N,2)
        Tensor mD_tma = tma_d.get_tma_tensor(make_shape(M, N, L));                // (M,N,L) TMA coords
        Tensor gD_epi = local_tile(mD_tma(_, _, l), make_shape(size<0>(cta_tiler), Int<kEpiN>{}),
                                   make_coord(tm, _));                            // (BLK_M,EPI_N,chunks)
        auto [tDgD, tDsD] = tma_partition(tma_d, Int<0>{}, Layout<_1>{},
                                          group_modes<0,2>(sD), group_modes<0,2>(gD_epi));  // (TMA,chunks), (TMA,2)
        // Coordinates within the tile: this thread's, and thread 0's (constants once
        // unrolled). A thread's columns are thread 0's plus at most 6, so value i lies in
        // the same 64-column chunk for every thread.
        Tensor cT    = make_identity_tensor(make_shape(size<0>(cta_tiler), size<1>(cta_tiler)));
        Tensor tCcT  = thr_mma.partition_C(cT);                                  // (MMA,MMA_M,MMA_N) -> (m,n)
        Tensor tCcT0 = tiled_mma.get_thread_slice(0).partition_C(cT);
        constexpr int kChunks = kTileN / kEpiN;
        constexpr int kVals = decltype(size(tCrAcc))::value;
        CUTE_UNROLL
        for (int j = 0; j < kChunks; ++j) {
          int const buf = epi_it & 1;
          // The chunk's values first (their C and chain-operand loads issue back to back and
          // overlap the wait below), then the shared-memory stores: each store is an asm
          // with a memory clobber that no load may cross, so a value computed between two
          // stores waited out its loads alone (bias + GELU ran at 0.29x cuBLAS that way).
          uint32_t packed[kVals / 2];
          CUTE_UNROLL
          for (int i = 0; i < kVals; i += 2) {
            if (get<1>(tCcT0(i)) / kEpiN == j) {
              TD const v0 = value(i), v1 = value(i + 1);          // TMA clips what lies outside D
              packed[i / 2] = uint32_t(v0.raw()) | (uint32_t(v1.raw()) << 16);
            }
          }
          if (threadIdx.x == 0) tma_store_wait<1>();       // buf's store, two chunks back, has read it
          cutlass::arch::NamedBarrier::sync(kThreads, 1);
          CUTE_UNROLL
          for (int i = 0; i < kVals; i += 2) {
            if (get<1>(tCcT0(i)) / kEpiN == j) {
              auto const rc = tCcT(i);
              cs_st_shared_u32(&sD(get<0>(rc), get<1>(rc) - j * kEpiN, buf), packed[i / 2]);
            }
          }
          tma_store_fence();                               // the writes, visible to TMA
          cutlass::arch::NamedBarrier::sync(kThreads, 1);
          if (threadIdx.x == 0) {
            copy(tma_d, tDsD(_, buf), tDgD(_, tn * kChunks + j));
            tma_store_arrive();
          }
          ++epi_it;
        }
        continue;
      }
    }
    // Straight from registers: one store of a pair where both are in bounds, adjacent and
    // aligned in memory, else one each.
    CUTE_UNROLL
    for (int i = 0; i < size(tCrAcc); i += 2) {
      bool const in0 = elem_less(tCcD(i), shape(mD)), in1 = elem_less(tCcD(i + 1), shape(mD));
      TD* const d0 = &tCgD(i);
      if (in0 && in1 && &tCgD(i + 1) == d0 + 1 &&
          reinterpret_cast<uintptr_t>(d0) % (2 * sizeof(TD)) == 0) {
        TD const v0 = value(i), v1 = value(i + 1);
        if constexpr (sizeof(TD) == 2) {
          *reinterpret_cast<uint32_t*>(d0) = uint32_t(v0.raw()) | (uint32_t(v1.raw()) << 16);
        } else {
          *reinterpret_cast<float2*>(d0) = make_float2(v0, v1);
        }
      } else {
        TD const v0 = value(i), v1 = value(i + 1);
        if (in0) *d0 = v0;
        if (in1) tCgD(i + 1) = v1;
      }
    }
  }
  if constexpr (kEpiTma) {
    // Shared memory must outlive the last TMA stores' reads.
    if (tma_store && threadIdx.x == 0) tma_store_wait<0>();
  }
}

// ---------------------------------------------------------------------------------------
// Host launcher
// ---------------------------------------------------------------------------------------

static inline bool cs_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 0xF) == 0;
}

// A TMA global stride (given in elements of T): a multiple of 16 bytes and below 2^40 bytes.
template <class T = ElementAB>
static inline bool cs_tma_stride_ok(int64_t elems) {
  constexpr int64_t kElem = int64_t(sizeof(T));
  return elems >= 0 && elems < (int64_t(1) << 40) / kElem && (elems * kElem) % 16 == 0;
}

// One GEMM operand as the kernel sees it: an MN x K matrix (batched), K-major (K
// contiguous, rows `ld` apart) or MN-major (MN contiguous, columns `ld` apart).
struct cs_mk_operand {
  const void* ptr;
  int64_t mn;
  int64_t ld;
  int64_t batch_stride;
};

// A's or B's checks for TMA: `inner` elements contiguous, `outer` lines `ld` apart.
static bool cs_tma_operand_ok(int64_t inner, int64_t outer, int64_t ld, int64_t batch_stride,
                              int64_t batch)
{
  if (inner % 8 != 0) return false;                          // 16-byte lines (as CUTLASS asks)
  if (ld < inner || !cs_tma_stride_ok(ld)) return false;
  // ld * outer serves as the (never stepped) stride of a size-1 batch mode.
  if (ld > INT64_MAX / outer || !cs_tma_stride_ok(ld * outer)) return false;
  if (batch > 1 && !cs_tma_stride_ok(batch_stride)) return false;   // 0: one shared matrix
  return true;
}

// The chain's operands as this build's cs_chain reads them (the one check, shared with
// the fallback).
static int32_t cs_chain_check(const cs_problem& p, bool check_pointers)
{
  return cs_fallback::chain_check<cs_chain>(p, check_pointers);
}

// Everything the TMA descriptors and the grid need; CS_OK when this kernel handles `p`.
static int32_t cs_gemm_check(const cs_problem& p, bool check_pointers)
{
  constexpr int64_t kMaxInt = 0x7fffffffLL;

  if (!kTypesOk) return CS_ERR_UNSUPPORTED;
  // gemm_bias_act's bias and activation live in the chain: a build without one cannot.
  if (p.family != CS_FAMILY_GEMM &&
      !(p.family == CS_FAMILY_GEMM_BIAS_ACT && !cs_chain::kIdentity))
    return CS_ERR_UNSUPPORTED;
  if (p.dtype_ab != kDtypeAB || p.dtype_cd != kDtypeCD || p.dtype_acc != CS_DTYPE_F32)
    return CS_ERR_UNSUPPORTED;
  if (p.layout_a != kLayoutA || p.layout_b != kLayoutB) return CS_ERR_UNSUPPORTED;
  if (!((p.layout_cd == CS_LAYOUT_ROW && kCdRowOk) || (p.layout_cd == CS_LAYOUT_COL && kCdColOk)))
    return CS_ERR_UNSUPPORTED;
  if (cs_chain_check(p, check_pointers) != CS_OK) return CS_ERR_UNSUPPORTED;

  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.k == 0) return CS_ERR_UNSUPPORTED;                   // would need a beta*C-only path
  if (p.m > kMaxInt || p.n > kMaxInt || p.k > kMaxInt) return CS_ERR_UNSUPPORTED;

  // A (m x k) and B (k x n) for TMA, each in its own storage order.
  bool const a_row = (p.layout_a == CS_LAYOUT_ROW), b_col = (p.layout_b == CS_LAYOUT_COL);
  if (!cs_tma_operand_ok(a_row ? p.k : p.m, a_row ? p.m : p.k, p.lda, p.batch_stride_a, p.batch))
    return CS_ERR_UNSUPPORTED;
  if (!cs_tma_operand_ok(b_col ? p.k : p.n, b_col ? p.n : p.k, p.ldb, p.batch_stride_b, p.batch))
    return CS_ERR_UNSUPPORTED;

  // C and D: plain stores and loads, any leading dimension >= their contiguous extent.
  int64_t const cd_inner = (p.layout_cd == CS_LAYOUT_ROW) ? p.n : p.m;
  if (p.ldd < cd_inner) return CS_ERR_UNSUPPORTED;
  if (p.beta != 0.0f && p.ldc < cd_inner) return CS_ERR_UNSUPPORTED;
  if (p.batch > 1) {
    if (p.batch_stride_d <= 0) return CS_ERR_UNSUPPORTED;    // every batch writes its own D
    if (p.beta != 0.0f && p.batch_stride_c < 0) return CS_ERR_UNSUPPORTED;   // 0: shared C
  }

  // The tiles cover the row-major D the kernel computes (D^T for a column-major D); their
  // index over the batch is an int.
  int64_t const tiles_m = (((p.layout_cd == CS_LAYOUT_ROW) ? p.m : p.n) + kTileM - 1) / kTileM;
  int64_t const tiles_n = (cd_inner + kTileN - 1) / kTileN;
  if (tiles_m * tiles_n > kMaxInt / p.batch) return CS_ERR_UNSUPPORTED;

  if (check_pointers) {
    if (p.a == nullptr || p.b == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    if (!cs_aligned16(p.a) || !cs_aligned16(p.b)) return CS_ERR_UNSUPPORTED;
    if (reinterpret_cast<uintptr_t>(p.d) % sizeof(ElementCD) != 0) return CS_ERR_UNSUPPORTED;
    if (p.beta != 0.0f && (p.c == nullptr ||
                           reinterpret_cast<uintptr_t>(p.c) % sizeof(ElementCD) != 0))
      return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

// Whether D (the kernel's row-major M x N view, `ldd` apart, batches `batch_stride_d`
// apart) can take the TMA-store epilogue: 16-byte aligned, 16-byte strides. Called once
// cs_gemm_check has passed (ldd >= 1, a positive batch stride where batch > 1).
static bool cs_d_tma_ok(const cs_problem& p, int64_t M)
{
  if constexpr (!kEpiTma) {
    return false;
  } else {
    auto ok = [](int64_t elems) { return cs_tma_stride_ok<ElementCD>(elems); };
    if (!cs_aligned16(p.d) || !ok(p.ldd) || p.ldd > INT64_MAX / M || !ok(p.ldd * M)) return false;
    return p.batch <= 1 || ok(p.batch_stride_d);
  }
}

// The global view TMA reads of one operand: (MN, K, L) with a static unit stride on the
// contiguous mode.
template <GMMA::Major Major, class T>
static auto cs_tma_view(T const* ptr, int mn, int k, int l, int64_t ld, int64_t dl)
{
  if constexpr (Major == GMMA::Major::K) {
    return make_tensor(make_gmem_ptr(ptr), make_shape(mn, k, l), make_stride(ld, Int<1>{}, dl));
  } else {
    return make_tensor(make_gmem_ptr(ptr), make_shape(mn, k, l), make_stride(Int<1>{}, ld, dl));
  }
}

// Row-major D (M x N) = A (M x K, MajorA) * B (N x K, MajorB): builds the TMA atoms, the
// shared memory layouts and the tiled MMA, and launches.
template <GMMA::Major MajorA, GMMA::Major MajorB, class TA, class TB, class TD>
static int32_t cs_gemm_sm90_run(const cs_problem& p, cs_mk_operand const& a,
                                cs_mk_operand const& b, bool transposed, cudaStream_t stream)
{
  int const M = int(a.mn);
  int const N = int(b.mn);
  int const K = int(p.k);

  // Batch views for TMA: a shared operand (stride 0) or a single batch is a size-1 mode.
  // A size-1 mode's stride is never stepped; give it a valid (16B-multiple) value.
  int64_t const outer_a = (MajorA == GMMA::Major::K) ? a.mn : p.k;
  int64_t const outer_b = (MajorB == GMMA::Major::K) ? b.mn : p.k;
  int     const La  = (p.batch > 1 && a.batch_stride != 0) ? int(p.batch) : 1;
  int     const Lb  = (p.batch > 1 && b.batch_stride != 0) ? int(p.batch) : 1;
  int64_t const dLa = (La > 1) ? a.batch_stride : a.ld * outer_a;
  int64_t const dLb = (Lb > 1) ? b.batch_stride : b.ld * outer_b;

  // CTA tile and pipeline depth (static)
  auto bM = Int<kTileM>{};
  auto bN = Int<kTileN>{};
  auto bK = Int<kTileK>{};
  auto cta_tiler = make_shape(bM, bN, bK);                              // (BLK_M,BLK_N,BLK_K)

  // Shared memory: swizzled, K-major or MN-major like the operand in global memory (TMA
  // copies tiles in their natural order; WGMMA reads either).
  auto sA = cs_smem_layout<MajorA, TA, kTileM>();                       // (BLK_M,BLK_K,PIPE)
  auto sB = cs_smem_layout<MajorB, TB, kTileN>();                       // (BLK_N,BLK_K,PIPE)

  // WGMMA: 64 x TILE_N x 16 from smem (SM90_64x128x16_F32BF16BF16_SS<K,K> for the default
  // bf16 TN 128x128 tile), kWarpgroups warpgroups stacked along M.
  using MmaOp = decltype(GMMA::ss_op_selector<TA, TB, ElementAcc, Shape<_64, Int<kTileN>, Int<kTileK>>,
                                              MajorA, MajorB>());
  TiledMMA tiled_mma = make_tiled_mma(MmaOp{}, Layout<Shape<Int<kWarpgroups>, _1, _1>>{});

  // Global tensors for TMA inspection
  Tensor mA = cs_tma_view<MajorA>(static_cast<TA const*>(a.ptr), M, K, La, a.ld, dLa);  // (M,K,La)
  Tensor mB = cs_tma_view<MajorB>(static_cast<TB const*>(b.ptr), N, K, Lb, b.ld, dLb);  // (N,K,Lb)

  Copy_Atom tma_a = make_tma_atom(SM90_TMA_LOAD{}, mA, sA(_,_,0), make_shape(bM, bK));
  Copy_Atom tma_b = make_tma_atom(SM90_TMA_LOAD{}, mB, sB(_,_,0), make_shape(bN, bK));

  // D's TMA store (a 16-bit D that TMA can address), else the epilogue stores from
  // registers. Where D cannot take it, the descriptor is built over A's memory to keep one
  // kernel, and never used.
  TD* const D = static_cast<TD*>(p.d);
  auto sD = cs_smem_layout_d<TD>();                                     // (BLK_M,EPI_N,2)
  bool const tma_store = cs_d_tma_ok(p, M);
  auto tma_d = [&] {
    if constexpr (kEpiTma) {
      bool const one = p.batch <= 1;
      Tensor mD = tma_store
          ? make_tensor(make_gmem_ptr(D), make_shape(M, N, int(p.batch)),
                        make_stride(int64_t(p.ldd), Int<1>{}, one ? int64_t(p.ldd) * M : int64_t(p.batch_stride_d)))
          : make_tensor(make_gmem_ptr(static_cast<TD*>(const_cast<void*>(a.ptr))),
                        make_shape(int(kTileM), int(kEpiN), 1),
                        make_stride(int64_t(kEpiN), Int<1>{}, int64_t(kTileM) * kEpiN));
      return make_tma_atom(SM90_TMA_STORE{}, mD, sD(_,_,0), make_shape(bM, Int<kEpiN>{}));
    } else {
      return 0;
    }
  }();

  auto* kernel = &cs_gemm_sm90_kernel<decltype(cta_tiler),
                                      TA, decltype(sA), decltype(tma_a),
                                      TB, decltype(sB), decltype(tma_b),
                                      TD, decltype(sD), decltype(tma_d), decltype(tiled_mma)>;

  int const smem_bytes = int(sizeof(SharedStorage<TA, TB, TD, decltype(sA), decltype(sB), decltype(sD)>));
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (err != cudaSuccess) return int32_t(err);

  // Persistent: one CTA per SM (the ring takes most of its shared memory), or one per tile
  // when there are fewer tiles; a whole number of clusters.
  int64_t const tiles = int64_t((M + kTileM - 1) / kTileM) * int64_t((N + kTileN - 1) / kTileN) * p.batch;
  int sms = p.sm_count;
  if (sms <= 0) {
    int device = 0;
    err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return int32_t(err);
  }
  constexpr int64_t kCluster = kClusterM * kClusterN;
  int64_t ctas = tiles < int64_t(sms) ? tiles : int64_t(sms);
  ctas = (ctas + kCluster - 1) / kCluster * kCluster;
  dim3 grid(unsigned(ctas), 1, 1);
  dim3 const block(static_cast<unsigned>(kCtaThreads));   // consumer warpgroups + producer warp

  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attrs[1];
  config.gridDim          = grid;
  config.blockDim         = block;
  config.dynamicSmemBytes = size_t(smem_bytes);
  config.stream           = stream;
  config.attrs            = attrs;
  config.numAttrs         = 0;
  if (kCluster > 1) {
    attrs[0].id               = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = unsigned(kCluster);
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
    config.numAttrs = 1;
  }

  // C and D: the row-major M x N view of a column-major m x n matrix is the same memory.
  TD const* C = static_cast<TD const*>(p.c);
  err = cudaLaunchKernelEx(&config, kernel,
                           M, N, K, int(p.batch), La, Lb, cta_tiler, tma_a, tma_b,
                           C, int64_t(p.ldc), int64_t(p.batch_stride_c),
                           D, int64_t(p.ldd), int64_t(p.batch_stride_d), tma_d, tma_store,
                           tiled_mma, p.alpha, p.beta, transposed, p);
  if (err != cudaSuccess) return int32_t(err);
  return int32_t(cudaGetLastError());
}

// Row-major D: A * B as given. Column-major D: the row-major D^T = B^T * A^T, i.e. the
// kernel's A is the workload's B (n x k) and its B the workload's A (m x k).
static int32_t cs_gemm_sm90_dispatch(const cs_problem& p, cudaStream_t stream)
{
  cs_mk_operand const a{p.a, p.m, p.lda, p.batch_stride_a};
  cs_mk_operand const b{p.b, p.n, p.ldb, p.batch_stride_b};
  if (p.layout_cd == CS_LAYOUT_ROW) {
    if constexpr (kCdRowOk) {
      return cs_gemm_sm90_run<kMajorA, kMajorB, ElementAB, ElementAB, ElementCD>(p, a, b, false, stream);
    }
  } else {
    if constexpr (kCdColOk) {
      return cs_gemm_sm90_run<kMajorB, kMajorA, ElementAB, ElementAB, ElementCD>(p, b, a, true, stream);
    }
  }
  return CS_ERR_UNSUPPORTED;
}

// The predicated fallback GEMM takes what TMA cannot (a contiguous extent or leading
// dimension not a multiple of 8, unaligned pointers), in every layout, with the chain.
static constexpr bool kHasFallback = kTypesOk;
using FallbackCD = std::conditional_t<kDtypeCD == CS_DTYPE_F32, float,
                   std::conditional_t<kDtypeCD == CS_DTYPE_F16, __half, __nv_bfloat16>>;

static bool cs_fallback_ok(const cs_problem& p, bool check_pointers)
{
  if constexpr (!kHasFallback) {
    return false;
  } else {
    return cs_fallback::check<FallbackElement, FallbackCD, cs_chain>(p, check_pointers) == CS_OK;
  }
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
  if (cs_gemm_check(*problem, /*check_pointers=*/false) == CS_OK) return CS_OK;
  return cs_fallback_ok(*problem, /*check_pointers=*/false) ? CS_OK : CS_ERR_UNSUPPORTED;
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  int32_t const status = cs_gemm_check(*problem, /*check_pointers=*/true);
  if (status != CS_OK) {
    // What TMA cannot take runs on the predicated fallback (slower, never wrong).
    if constexpr (kHasFallback) {
      if (cs_fallback_ok(*problem, /*check_pointers=*/true))
        return cs_fallback::launch<FallbackElement, FallbackCD, cs_chain>(*problem, stream);
    }
    return status;
  }
  if (problem->m == 0 || problem->n == 0 || problem->batch == 0) return CS_OK;
  if constexpr (kTypesOk) {
    return cs_gemm_sm90_dispatch(*problem, stream);
  } else {
    return CS_ERR_UNSUPPORTED;
  }
}
