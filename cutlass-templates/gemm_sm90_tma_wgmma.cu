// cutesmith template: Hopper (sm_90a) GEMM in raw CuTe.
//
//   D[l] (m x n, row-major) = alpha * A[l] (m x k, row-major) * B[l] (k x n, col-major)
//                           + beta * C[l] (m x n, row-major)          for l in [0, batch)
//
// Operands are "TN": A and B both keep K contiguous (B is stored as n rows of k elements,
// i.e. layout_b == CS_LAYOUT_COL). bf16 inputs by default (-DCS_GEMM_FP16 for fp16),
// fp32 accumulation, C and D in the input type.
//
// Strategy: one CTA computes a TILE_M x TILE_N tile of D. TMA (SM90_TMA_LOAD) brings
// TILE_M x TILE_K / TILE_N x TILE_K tiles of A and B into 128B-swizzled shared memory
// through a STAGES-deep ring guarded by mbarriers ("full": TMA bytes landed, "empty": every
// consumer thread is done reading). WARPGROUPS consumer warpgroups issue WGMMA straight from
// shared memory (SS) and keep one WGMMA batch in flight. One elected thread of warp 0 also
// plays producer (no warp specialization). The epilogue writes D from registers with
// predicates from an identity tensor, so m and n need not be multiples of the tile.
// TMA fills out-of-bounds rows/columns of A and B with zeros, which handles the K residue.

#include <cstdint>

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

#ifdef CS_GEMM_FP16
using ElementAB = cute::half_t;
static constexpr cs_dtype kDtypeAB = CS_DTYPE_F16;
#else
using ElementAB = cute::bfloat16_t;
static constexpr cs_dtype kDtypeAB = CS_DTYPE_BF16;
#endif
using ElementCD  = ElementAB;   // C and D in the input type
#ifdef CS_GEMM_FP16
using FallbackElement = __half;          // the same bits as cute::half_t
#else
using FallbackElement = __nv_bfloat16;   // the same bits as cute::bfloat16_t
#endif
using ElementAcc = float;

static constexpr int kTileM      = CS_TILE_M;
static constexpr int kTileN      = CS_TILE_N;
static constexpr int kTileK      = CS_TILE_K;
static constexpr int kStages     = CS_STAGES;
static constexpr int kWarpgroups = CS_WARPGROUPS;
static constexpr int kClusterM   = CS_CLUSTER_M;
static constexpr int kClusterN   = CS_CLUSTER_N;
static constexpr int kThreads    = 128 * kWarpgroups;

static_assert(kTileM % (64 * kWarpgroups) == 0, "TILE_M must be a multiple of 64 * WARPGROUPS");
static_assert(kTileK * sizeof(ElementAB) % 128 == 0, "TILE_K must span whole 128B swizzle rows");
static_assert(kStages >= 2, "the pipeline needs at least two stages");

// ---------------------------------------------------------------------------------------
// Shared memory
// ---------------------------------------------------------------------------------------

template <class TA, class TB,
          class SmemLayoutA,   // (BLK_M,BLK_K,PIPE)
          class SmemLayoutB>   // (BLK_N,BLK_K,PIPE)
struct SharedStorage
{
  // 1024B alignment: the SW128 pattern repeats every 8 rows x 128B.
  alignas(1024) cute::ArrayEngine<TA, cosize_v<SmemLayoutA>> A;
  alignas(1024) cute::ArrayEngine<TB, cosize_v<SmemLayoutB>> B;

  alignas(8) uint64_t full_barrier [size<2>(SmemLayoutA{})];   // TMA -> MMA: stage loaded
  alignas(8) uint64_t empty_barrier[size<2>(SmemLayoutA{})];   // MMA -> TMA: stage free
};

// ---------------------------------------------------------------------------------------
// Kernel
// ---------------------------------------------------------------------------------------

template <class CtaTiler,
          class TA, class SmemLayoutA, class TmaA,
          class TB, class SmemLayoutB, class TmaB,
          class TD, class TiledMma>
__global__ static
__launch_bounds__(kThreads, 1)
void
cs_gemm_sm90_kernel(int M, int N, int K,
                    int La, int Lb,                       // batch extents of the TMA views (1: broadcast)
                    CtaTiler cta_tiler,
                    CUTLASS_GRID_CONSTANT TmaA const tma_a,
                    CUTLASS_GRID_CONSTANT TmaB const tma_b,
                    TD const* C, int64_t ldc, int64_t batch_stride_c,
                    TD      * D, int64_t ldd, int64_t batch_stride_d,
                    TiledMma tiled_mma,
                    float alpha, float beta)
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

  int const l = int(blockIdx.z);

  // =====================================================================================
  // Full tensors
  // =====================================================================================
  Tensor mA_mkl = tma_a.get_tma_tensor(make_shape(M, K, La));          // (M,K,La) TMA coords
  Tensor mB_nkl = tma_b.get_tma_tensor(make_shape(N, K, Lb));          // (N,K,Lb) TMA coords
  Tensor mA = mA_mkl(_, _, La == 1 ? 0 : l);                           // (M,K)
  Tensor mB = mB_nkl(_, _, Lb == 1 ? 0 : l);                           // (N,K)

  bool const has_c = (beta != 0.0f);
  TD const* C_l = has_c ? C + l * batch_stride_c : C;
  Tensor mC = make_tensor(make_gmem_ptr(C_l),
                          make_shape(M, N), make_stride(ldc, Int<1>{}));  // (M,N) row-major
  Tensor mD = make_tensor(make_gmem_ptr(D + l * batch_stride_d),
                          make_shape(M, N), make_stride(ldd, Int<1>{}));  // (M,N) row-major
  Tensor cD = make_identity_tensor(make_shape(M, N));                  // (M,N) -> (m,n)

  // =====================================================================================
  // CTA tiles
  // =====================================================================================
  auto cta_coord = make_coord(int(blockIdx.x), int(blockIdx.y), _);   // (m,n,k)
  Tensor gA = local_tile(mA, cta_tiler, cta_coord, Step<_1, X,_1>{});  // (BLK_M,BLK_K,k)
  Tensor gB = local_tile(mB, cta_tiler, cta_coord, Step< X,_1,_1>{});  // (BLK_N,BLK_K,k)
  Tensor gC = local_tile(mC, cta_tiler, cta_coord, Step<_1,_1, X>{});  // (BLK_M,BLK_N)
  Tensor gD = local_tile(mD, cta_tiler, cta_coord, Step<_1,_1, X>{});  // (BLK_M,BLK_N)
  Tensor cDt = local_tile(cD, cta_tiler, cta_coord, Step<_1,_1, X>{}); // (BLK_M,BLK_N) -> (m,n)

  // =====================================================================================
  // Shared memory
  // =====================================================================================
  extern __shared__ __align__(1024) char shared_memory[];
  using Storage = SharedStorage<TA, TB, SmemLayoutA, SmemLayoutB>;
  Storage& smem = *reinterpret_cast<Storage*>(shared_memory);
  Tensor sA = make_tensor(make_smem_ptr(smem.A.begin()), SmemLayoutA{}); // (BLK_M,BLK_K,PIPE)
  Tensor sB = make_tensor(make_smem_ptr(smem.B.begin()), SmemLayoutB{}); // (BLK_N,BLK_K,PIPE)

  // =====================================================================================
  // Copy partitions (TMA)
  // =====================================================================================
  // No multicast: CTA 0 of a 1-CTA multicast layout. The TMA owns all of mode 0.
  auto [tAgA, tAsA] = tma_partition(tma_a, Int<0>{}, Layout<_1>{},
                                    group_modes<0,2>(sA), group_modes<0,2>(gA));  // (TMA,k), (TMA,PIPE)
  auto [tBgB, tBsB] = tma_partition(tma_b, Int<0>{}, Layout<_1>{},
                                    group_modes<0,2>(sB), group_modes<0,2>(gB));  // (TMA,k), (TMA,PIPE)

  // The TMA is responsible for all of mode 0 of tAsA and tBsB: that is one stage's bytes.
  static_assert(kTmaTransactionBytes == sizeof(make_tensor_like(tensor<0>(tAsA))) +
                                        sizeof(make_tensor_like(tensor<0>(tBsB))));

  int const k_tile_count = int(size<1>(tAgA));                         // ceil(K / BLK_K)

  // =====================================================================================
  // MMA partitions and accumulators
  // =====================================================================================
  ThrMMA thr_mma = tiled_mma.get_thread_slice(threadIdx.x);
  Tensor tCsA = thr_mma.partition_A(sA);                               // (MMA,MMA_M,MMA_K,PIPE)
  Tensor tCsB = thr_mma.partition_B(sB);                               // (MMA,MMA_N,MMA_K,PIPE)
  Tensor tCrA = thr_mma.make_fragment_A(tCsA);                         // (MMA,MMA_M,MMA_K,PIPE) smem descriptors
  Tensor tCrB = thr_mma.make_fragment_B(tCsB);                         // (MMA,MMA_N,MMA_K,PIPE) smem descriptors
  Tensor tCgC = thr_mma.partition_C(gC);                               // (MMA,MMA_M,MMA_N)
  Tensor tCgD = thr_mma.partition_C(gD);                               // (MMA,MMA_M,MMA_N)
  Tensor tCcD = thr_mma.partition_C(cDt);                              // (MMA,MMA_M,MMA_N) -> (m,n)
  Tensor tCrAcc = thr_mma.make_fragment_C(tCgD);                       // (MMA,MMA_M,MMA_N) fp32
  clear(tCrAcc);

  // =====================================================================================
  // Main loop
  // =====================================================================================
  using FullBarrier  = cutlass::arch::ClusterTransactionBarrier;       // TMA arrivals + tx bytes
  using EmptyBarrier = cutlass::arch::ClusterBarrier;                  // consumer-thread arrivals

  int  const warp_idx = cutlass::canonical_warp_idx_sync();
  bool const lane_predicate = cute::elect_one_sync();
  bool const is_producer = (warp_idx == 0) && lane_predicate;
  uint64_t* full_barrier  = smem.full_barrier;
  uint64_t* empty_barrier = smem.empty_barrier;

  if (is_producer) {
    cute::prefetch_tma_descriptor(tma_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(tma_b.get_tma_descriptor());
    CUTE_UNROLL
    for (int pipe = 0; pipe < PIPE; ++pipe) {
      FullBarrier::init (&full_barrier [pipe], 1);          // one arrive_and_expect_tx per fill
      EmptyBarrier::init(&empty_barrier[pipe], kThreads);   // every consumer thread releases
    }
  }
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  // Prologue: fill up to PIPE stages (k tile s goes to stage s).
  if (is_producer) {
    CUTE_UNROLL
    for (int pipe = 0; pipe < PIPE; ++pipe) {
      if (pipe < k_tile_count) {
        FullBarrier::arrive_and_expect_tx(&full_barrier[pipe], kTmaTransactionBytes);
        copy(tma_a.with(full_barrier[pipe]), tAgA(_, pipe), tAsA(_, pipe));
        copy(tma_b.with(full_barrier[pipe]), tBgB(_, pipe), tBsB(_, pipe));
      }
    }
  }

  // Ring positions: stage index and the parity of the barrier phase we wait for.
  int      read_stage  = 0;  uint32_t read_phase  = 0;   // next stage the MMAs consume
  int      write_stage = 0;  uint32_t write_phase = 0;   // next stage the producer refills
  int      prev_stage  = 0;                              // stage of the MMA batch still in flight

  CUTE_NO_UNROLL
  for (int k_tile = 0; k_tile < k_tile_count; ++k_tile)
  {
    // Wait until TMA has landed k_tile in read_stage.
    FullBarrier::wait(&full_barrier[read_stage], read_phase);

    // Issue the WGMMAs of one k tile: (V,M) x (V,N) => (V,M,N)
    warpgroup_fence_operand(tCrAcc);
    warpgroup_arrive();
    gemm(tiled_mma, tCrA(_,_,_,read_stage), tCrB(_,_,_,read_stage), tCrAcc);
    warpgroup_commit_batch();
    // Keep this batch in flight; the previous one (k_tile - 1) is now complete.
    warpgroup_wait<1>();
    warpgroup_fence_operand(tCrAcc);

    if (k_tile > 0) {
      // Release the stage k_tile - 1 was read from ...
      EmptyBarrier::arrive(&empty_barrier[prev_stage]);

      // ... and refill it with k tile (k_tile - 1 + PIPE).
      int const k_tile_next = k_tile - 1 + PIPE;
      if (is_producer && k_tile_next < k_tile_count) {
        EmptyBarrier::wait(&empty_barrier[write_stage], write_phase);
        FullBarrier::arrive_and_expect_tx(&full_barrier[write_stage], kTmaTransactionBytes);
        copy(tma_a.with(full_barrier[write_stage]), tAgA(_, k_tile_next), tAsA(_, write_stage));
        copy(tma_b.with(full_barrier[write_stage]), tBgB(_, k_tile_next), tBsB(_, write_stage));
        if (++write_stage == PIPE) { write_stage = 0; write_phase ^= 1; }
      }
    }

    prev_stage = read_stage;
    if (++read_stage == PIPE) { read_stage = 0; read_phase ^= 1; }
  }

  warpgroup_wait<0>();
  warpgroup_fence_operand(tCrAcc);

  // =====================================================================================
  // Epilogue: D = alpha * acc + beta * C, predicated on (m < M, n < N)
  // =====================================================================================
  CUTE_UNROLL
  for (int i = 0; i < size(tCrAcc); ++i) {
    if (elem_less(tCcD(i), shape(mD))) {
      float v = alpha * tCrAcc(i);
      if (has_c) {
        v += beta * static_cast<float>(tCgC(i));
      }
      tCgD(i) = static_cast<TD>(v);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Host launcher
// ---------------------------------------------------------------------------------------

static inline bool cs_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 0xF) == 0;
}

// A TMA global stride (given in elements): a multiple of 16 bytes and below 2^40 bytes.
static inline bool cs_tma_stride_ok(int64_t elems) {
  constexpr int64_t kElem = int64_t(sizeof(ElementAB));
  return elems >= 0 && elems < (int64_t(1) << 40) / kElem && (elems * kElem) % 16 == 0;
}

// Everything the TMA descriptors and the grid need; CS_OK when this kernel handles `p`.
static int32_t cs_gemm_check(const cs_problem& p, bool check_pointers)
{
  constexpr int64_t kMaxInt = 0x7fffffffLL;

  if (p.family != CS_FAMILY_GEMM) return CS_ERR_UNSUPPORTED;
  if (p.dtype_ab != kDtypeAB || p.dtype_cd != kDtypeAB || p.dtype_acc != CS_DTYPE_F32)
    return CS_ERR_UNSUPPORTED;
  if (p.layout_a != CS_LAYOUT_ROW || p.layout_b != CS_LAYOUT_COL || p.layout_cd != CS_LAYOUT_ROW)
    return CS_ERR_UNSUPPORTED;

  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.k == 0) return CS_ERR_UNSUPPORTED;                   // would need a beta*C-only path
  if (p.m > kMaxInt || p.n > kMaxInt || p.k > kMaxInt) return CS_ERR_UNSUPPORTED;
  if (p.k % 8 != 0) return CS_ERR_UNSUPPORTED;               // 16-byte rows for TMA

  // A (m x k, row-major) and B (n x k rows, K contiguous): TMA needs 16B-multiple strides.
  if (p.lda < p.k || !cs_tma_stride_ok(p.lda)) return CS_ERR_UNSUPPORTED;
  if (p.ldb < p.k || !cs_tma_stride_ok(p.ldb)) return CS_ERR_UNSUPPORTED;
  // lda * m and ldb * n serve as the (never stepped) stride of a size-1 batch mode.
  if (p.lda > INT64_MAX / p.m || !cs_tma_stride_ok(p.lda * p.m)) return CS_ERR_UNSUPPORTED;
  if (p.ldb > INT64_MAX / p.n || !cs_tma_stride_ok(p.ldb * p.n)) return CS_ERR_UNSUPPORTED;
  if (p.ldd < p.n) return CS_ERR_UNSUPPORTED;
  if (p.beta != 0.0f && p.ldc < p.n) return CS_ERR_UNSUPPORTED;

  if (p.batch > 1) {
    if (p.batch > 65535) return CS_ERR_UNSUPPORTED;          // grid z
    if (!cs_tma_stride_ok(p.batch_stride_a)) return CS_ERR_UNSUPPORTED;   // 0 broadcasts
    if (!cs_tma_stride_ok(p.batch_stride_b)) return CS_ERR_UNSUPPORTED;
  }

  int64_t const grid_n = (p.n + kTileN - 1) / kTileN;
  if (grid_n + kClusterN > 65535) return CS_ERR_UNSUPPORTED;  // grid y

  if (check_pointers) {
    if (p.a == nullptr || p.b == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    if (!cs_aligned16(p.a) || !cs_aligned16(p.b)) return CS_ERR_UNSUPPORTED;
    if (p.beta != 0.0f && p.c == nullptr) return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

template <class TA, class TB, class TD>
static int32_t cs_gemm_sm90_run(const cs_problem& p, cudaStream_t stream)
{
  int const M = int(p.m);
  int const N = int(p.n);
  int const K = int(p.k);

  // Batch views for TMA: a broadcast operand (stride 0) or a single batch is a size-1 mode.
  // A size-1 mode's stride is never stepped; give it a valid (16B-multiple) value.
  int     const La  = (p.batch > 1 && p.batch_stride_a != 0) ? int(p.batch) : 1;
  int     const Lb  = (p.batch > 1 && p.batch_stride_b != 0) ? int(p.batch) : 1;
  int64_t const dLa = (La > 1) ? p.batch_stride_a : p.lda * p.m;
  int64_t const dLb = (Lb > 1) ? p.batch_stride_b : p.ldb * p.n;

  // CTA tile and pipeline depth (static)
  auto bM = Int<kTileM>{};
  auto bN = Int<kTileN>{};
  auto bK = Int<kTileK>{};
  auto bP = Int<kStages>{};
  auto cta_tiler = make_shape(bM, bN, bK);                              // (BLK_M,BLK_N,BLK_K)

  // Shared memory: K-major, 128B swizzle (what both TMA and WGMMA want for TN)
  auto sA = tile_to_shape(GMMA::Layout_K_SW128_Atom<TA>{}, make_shape(bM, bK, bP));  // (BLK_M,BLK_K,PIPE)
  auto sB = tile_to_shape(GMMA::Layout_K_SW128_Atom<TB>{}, make_shape(bN, bK, bP));  // (BLK_N,BLK_K,PIPE)

  // WGMMA: 64 x TILE_N x 16, both operands K-major from smem (SM90_64x128x16_F32BF16BF16_SS
  // for the default bf16 128x128 tile), kWarpgroups warpgroups stacked along M.
  using MmaOp = decltype(GMMA::ss_op_selector<TA, TB, ElementAcc, Shape<_64, Int<kTileN>, Int<kTileK>>,
                                              GMMA::Major::K, GMMA::Major::K>());
  TiledMMA tiled_mma = make_tiled_mma(MmaOp{}, Layout<Shape<Int<kWarpgroups>, _1, _1>>{});

  // Global tensors for TMA inspection
  TA const* A = static_cast<TA const*>(p.a);
  TB const* B = static_cast<TB const*>(p.b);
  Tensor mA = make_tensor(make_gmem_ptr(A), make_shape(M, K, La),
                          make_stride(int64_t(p.lda), Int<1>{}, dLa));           // (M,K,La)
  Tensor mB = make_tensor(make_gmem_ptr(B), make_shape(N, K, Lb),
                          make_stride(int64_t(p.ldb), Int<1>{}, dLb));           // (N,K,Lb)

  Copy_Atom tma_a = make_tma_atom(SM90_TMA_LOAD{}, mA, sA(_,_,0), make_shape(bM, bK));
  Copy_Atom tma_b = make_tma_atom(SM90_TMA_LOAD{}, mB, sB(_,_,0), make_shape(bN, bK));

  auto* kernel = &cs_gemm_sm90_kernel<decltype(cta_tiler),
                                      TA, decltype(sA), decltype(tma_a),
                                      TB, decltype(sB), decltype(tma_b),
                                      TD, decltype(tiled_mma)>;

  int const smem_bytes = int(sizeof(SharedStorage<TA, TB, decltype(sA), decltype(sB)>));
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (err != cudaSuccess) return int32_t(err);

  auto round_up_to = [](int64_t x, int64_t r) { return (x + r - 1) / r * r; };
  dim3 grid(unsigned(round_up_to((p.m + kTileM - 1) / kTileM, kClusterM)),
            unsigned(round_up_to((p.n + kTileN - 1) / kTileN, kClusterN)),
            unsigned(p.batch));
  dim3 block(unsigned(size(tiled_mma)));

  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attrs[1];
  config.gridDim          = grid;
  config.blockDim         = block;
  config.dynamicSmemBytes = size_t(smem_bytes);
  config.stream           = stream;
  config.attrs            = attrs;
  config.numAttrs         = 0;
  if (kClusterM * kClusterN > 1) {
    attrs[0].id               = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = kClusterM;
    attrs[0].val.clusterDim.y = kClusterN;
    attrs[0].val.clusterDim.z = 1;
    config.numAttrs = 1;
  }

  TD const* C = static_cast<TD const*>(p.c);
  TD*       D = static_cast<TD*>(p.d);
  err = cudaLaunchKernelEx(&config, kernel,
                           M, N, K, La, Lb, cta_tiler, tma_a, tma_b,
                           C, int64_t(p.ldc), int64_t(p.batch_stride_c),
                           D, int64_t(p.ldd), int64_t(p.batch_stride_d),
                           tiled_mma, p.alpha, p.beta);
  if (err != cudaSuccess) return int32_t(err);
  return int32_t(cudaGetLastError());
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
  // Not for TMA (K or a leading dimension not a multiple of 8, ...): the fallback path.
  return cs_fallback::check<FallbackElement>(*problem, kDtypeAB, /*check_pointers=*/false);
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  int32_t const status = cs_gemm_check(*problem, /*check_pointers=*/true);
  if (status != CS_OK) {
    // What TMA cannot take runs on the predicated fallback (slower, never wrong).
    int32_t const fallback = cs_fallback::check<FallbackElement>(*problem, kDtypeAB, true);
    if (fallback != CS_OK || problem->family != CS_FAMILY_GEMM) return status;
    return cs_fallback::launch<FallbackElement>(*problem, stream);
  }
  if (problem->m == 0 || problem->n == 0 || problem->batch == 0) return CS_OK;
  return cs_gemm_sm90_run<ElementAB, ElementAB, ElementCD>(*problem, stream);
}
