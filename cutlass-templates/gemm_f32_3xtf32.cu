// cutesmith template: fp32 GEMM at fp32 accuracy on tensor cores (3xTF32), CUTLASS 2.x.
//
//   Z[l] = alpha * A[l] (m x k) * B[l] (k x n) + beta * C[l] (m x n)     (fp32)
//   D[l] = chain(Z[l])                                                   for l in [0, batch)
//
// Families: CS_FAMILY_GEMM, and CS_FAMILY_GEMM_BIAS_ACT when the workload's epilogue chain
// is compiled in (the chain starts with the row-bias add, operand 0, then the activation).
// Types: A, B, C, D, accumulation, alpha and beta all fp32 (a workload of another dtype
// compiles and every launch returns CS_ERR_UNSUPPORTED). Layouts, fixed at compile time
// from the workload block and checked at run time:
//   A row-major (K contiguous) or column-major (M contiguous)   CS_WL_LAYOUT_A, default row
//   B row-major (N contiguous) or column-major (K contiguous)   CS_WL_LAYOUT_B, default col
//   C and D row- or column-major                                CS_WL_LAYOUT_CD, default row
// Batches in grid z with any batch stride of A, B or C, 0 sharing one matrix.
//
// Strategy: CUTLASS 2.x cutlass::gemm::device::GemmUniversal on Sm80 tensor cores
// (mma.sync m16n8k8 TF32, which Hopper runs as well) with the OpMultiplyAddFastF32
// operator: every fp32 operand x is split into big = tf32(x) and small = tf32(x - big)
// and each product is computed as big*big + big*small + small*big (3 TF32 MMAs, the
// small*small term dropped), which keeps the error near that of an fp32 SGEMM (plain TF32
// would lose ~10 mantissa bits). Multistage cp.async mainloop (CS_STAGES deep), a
// CS_TILE_M x CS_TILE_N x CS_TILE_K CTA tile split among CS_WARP_M x CS_WARP_N warp tiles,
// identity threadblock swizzle, batches in grid z (GemmUniversalMode::kBatched). CUTLASS's
// shared-memory iterators take either storage order of A and B; a column-major D is run
// by CUTLASS as the row-major D^T = B^T * A^T (device::GemmUniversal's specialization).
//
// The epilogue chain:
//   - no chain (identity): CUTLASS's LinearCombination, D = alpha * acc + beta * C;
//   - a chain without tensor operands: fused into CUTLASS's epilogue as its output op
//     (LinearCombination, then cs_chain::apply on every element of the fragment);
//   - a chain with tensor operands (gemm_bias_act's bias, row/column vectors, residuals):
//     the GEMM writes Z into D, then a small elementwise kernel applies the chain to D in
//     place at each element's (batch, row, col), loading the operands with cs_chain_at.
//     D is fp32, so Z stored there loses nothing.
//
// Fast path: 16-byte aligned A/B/C/D (pointers, leading dimensions and batch strides
// multiples of 4 floats) and the contiguous extent of each operand a multiple of 4 (k or
// m for A, n or k for B, n or m for C and D: CUTLASS's alignment-4 checks). Any other
// problem of these families runs on the predicated fallback GEMM (exact fp32 FMA), which
// applies the chain itself.
//
// Notes on the CUTLASS view of the ABI operands (GemmCoord (M,N,K), batch_count L):
//   A: LayoutA (m x k) ld = lda, batch_stride_A
//   B: LayoutB (k x n) ld = ldb, batch_stride_B
//   C, D: LayoutC (m x n) ld = ldc | ldd, batch_stride_C | D
//
// Parameters (override with -DNAME=VALUE):
//   CS_TILE_M   128  CTA tile rows of D
//   CS_TILE_N   128  CTA tile columns of D
//   CS_TILE_K   32   K per stage (fp32: 32 = 128 bytes per row)
//   CS_STAGES   3    cp.async pipeline depth (smem = STAGES*(TILE_M+TILE_N)*TILE_K*4 B)
//   CS_WARP_M   64   warp tile rows (TILE_M / WARP_M * TILE_N / WARP_N warps, at most 8)
//   CS_WARP_N   32   warp tile columns
// (For a column-major D, CUTLASS runs D^T: TILE_M then tiles the columns of D.)

#if defined(__CUDA_ARCH__) && !defined(NDEBUG)
#define NDEBUG
#endif

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cutlass/arch/arch.h>
#include <cutlass/arch/mma.h>
#include <cutlass/layout/matrix.h>
#include <cutlass/gemm/gemm.h>
#include <cutlass/gemm/threadblock/threadblock_swizzle.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/gemm/device/gemm_universal.h>
#include <cutlass/device_kernel.h>   // CUTLASS_GRID_CONSTANT

#include "cutesmith_abi.h"
#include "cutesmith_chain.cuh"
#include "cutesmith_fallback_gemm.cuh"

// ---------------------------------------------------------------------------------------
// Strategy parameters (override with -DNAME=VALUE)
// ---------------------------------------------------------------------------------------

#ifndef CS_TILE_M
#define CS_TILE_M 128      // CTA tile rows of D
#endif
#ifndef CS_TILE_N
#define CS_TILE_N 128      // CTA tile columns of D
#endif
#ifndef CS_TILE_K
#define CS_TILE_K 32       // K per stage (fp32: 32 = 128 bytes per row)
#endif
#ifndef CS_STAGES
#define CS_STAGES 3        // cp.async pipeline depth (smem = STAGES*(TILE_M+TILE_N)*TILE_K*4 B)
#endif
#ifndef CS_WARP_M
#define CS_WARP_M 64       // warp tile rows (TILE_M / WARP_M * TILE_N / WARP_N warps)
#endif
#ifndef CS_WARP_N
#define CS_WARP_N 32       // warp tile columns (64x64 warp tiles spill: see below)
#endif

// ---------------------------------------------------------------------------------------
// Workload: element types and layouts
// ---------------------------------------------------------------------------------------

#if defined(CS_WL_DTYPE_AB)
static constexpr int kDtypeAB = CS_WL_DTYPE_AB;
#else
static constexpr int kDtypeAB = CS_DTYPE_F32;
#endif
#if defined(CS_WL_DTYPE_CD)
static constexpr int kDtypeCD = CS_WL_DTYPE_CD;
#else
static constexpr int kDtypeCD = CS_DTYPE_F32;
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
#if defined(CS_WL_LAYOUT_CD)
static constexpr int kLayoutCD = CS_WL_LAYOUT_CD;
#else
static constexpr int kLayoutCD = CS_LAYOUT_ROW;
#endif

// This template computes in fp32 only: an instance for another dtype still compiles, and
// every launch returns CS_ERR_UNSUPPORTED.
static constexpr bool kTypesOk = (kDtypeAB == CS_DTYPE_F32 && kDtypeCD == CS_DTYPE_F32);

using ElementAB      = float;
using ElementCD      = float;
using ElementAcc     = float;
using ElementCompute = float;   // epilogue math, alpha, beta

using LayoutA = std::conditional_t<kLayoutA == CS_LAYOUT_COL,
                                   cutlass::layout::ColumnMajor,    // (M,K) M contiguous
                                   cutlass::layout::RowMajor>;      // (M,K) K contiguous
using LayoutB = std::conditional_t<kLayoutB == CS_LAYOUT_ROW,
                                   cutlass::layout::RowMajor,       // (K,N) N contiguous
                                   cutlass::layout::ColumnMajor>;   // (K,N) K contiguous
using LayoutC = std::conditional_t<kLayoutCD == CS_LAYOUT_COL,
                                   cutlass::layout::ColumnMajor,    // (M,N) M contiguous
                                   cutlass::layout::RowMajor>;      // (M,N) N contiguous

static constexpr int kAlign = 4;   // elements per 16-byte access (A, B, C, D)

// Where the chain runs: nowhere, inside CUTLASS's epilogue, or in a pass over D after it.
// A chain with an index op (triu, tril) needs each element's position: a pass, like operands.
static constexpr bool kChainFused =
    !cs_chain::kIdentity && cs_chain::kOperands == 0 && !cs_chain::kPositional;
static constexpr bool kChainAfter =
    !cs_chain::kIdentity && (cs_chain::kOperands > 0 || cs_chain::kPositional);

// ---------------------------------------------------------------------------------------
// CUTLASS GEMM
// ---------------------------------------------------------------------------------------

static_assert(CS_TILE_M % CS_WARP_M == 0 && CS_TILE_N % CS_WARP_N == 0,
              "the CTA tile must be a whole number of warp tiles");
static_assert(CS_WARP_M % 16 == 0 && CS_WARP_N % 8 == 0, "warp tile: multiples of the 16x8x8 MMA");
// 3xTF32 holds each warp-level A/B fragment three times (loaded fp32, double-buffered;
// big; small) next to the accumulators: 64x32 / 32x64 warp tiles take ~254 registers and
// no spills, 64x64 spills ~2.6 KB per thread, 64x128 ~17 KB. At ~254 registers per thread
// 8 warps (256 threads) is the most a CTA can launch with.
static_assert((CS_TILE_M / CS_WARP_M) * (CS_TILE_N / CS_WARP_N) <= 8,
              "at most 8 warps per CTA: the 3xTF32 warp tile needs ~254 registers per thread");
static_assert(CS_TILE_K % 8 == 0, "TILE_K must be a multiple of the MMA K (8)");
static_assert(CS_STAGES >= 2, "the multistage mainloop needs at least 2 stages");
static_assert(CS_STAGES * (CS_TILE_M + CS_TILE_N) * CS_TILE_K * 4 <= 227 * 1024,
              "shared memory of the mainloop exceeds 227 KiB");

using ThreadblockShape = cutlass::gemm::GemmShape<CS_TILE_M, CS_TILE_N, CS_TILE_K>;
using WarpShape        = cutlass::gemm::GemmShape<CS_WARP_M, CS_WARP_N, CS_TILE_K>;
using InstructionShape = cutlass::gemm::GemmShape<16, 8, 8>;   // mma.sync tf32

// D = alpha * acc + beta * C: the epilogue output op when the chain is not fused.
using LinearCombinationOp = cutlass::epilogue::thread::LinearCombination<
    ElementCD, 128 / cutlass::sizeof_bits<ElementCD>::value, ElementAcc, ElementCompute>;

// D = chain(alpha * acc + beta * C) for a chain that reads no tensor operand: the output
// op sees a fragment of kCount values and not their coordinates, which such a chain does
// not need. CUTLASS's epilogue calls the two operator() forms (with or without C).
class cs_chain_linear_combination : public LinearCombinationOp
{
public:
  using Base = LinearCombinationOp;
  using typename Base::Params;
  using typename Base::FragmentOutput;
  using typename Base::FragmentSource;
  using typename Base::FragmentAccumulator;

  // The chain may hold transcendental functions: let the epilogue unroll less.
  static bool const kIsHeavy = true;

  CUTLASS_HOST_DEVICE explicit cs_chain_linear_combination(Params const& params)
      : Base(params) {}
  CUTLASS_HOST_DEVICE cs_chain_linear_combination(Params const& params, int group_idx)
      : Base(params, group_idx) {}

  CUTLASS_HOST_DEVICE FragmentOutput operator()(FragmentAccumulator const& accumulator,
                                                FragmentSource const& source) const {
    return apply_chain(Base::operator()(accumulator, source));   // alpha * acc + beta * C
  }
  CUTLASS_HOST_DEVICE FragmentOutput operator()(FragmentAccumulator const& accumulator) const {
    return apply_chain(Base::operator()(accumulator));           // alpha * acc
  }

private:
  CUTLASS_HOST_DEVICE static FragmentOutput apply_chain(FragmentOutput z) {
    float const t[CS_MAX_OPERANDS] = {0.0f, 0.0f, 0.0f, 0.0f};   // no operands
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < FragmentOutput::kElements; ++i) {
      // Never chosen for a chain with an index op (kChainFused), whose position this
      // output op does not know.
      z[i] = cs_chain::apply(z[i], t, 0, 0);
    }
    return z;
  }
};

using EpilogueOp = std::conditional_t<kChainFused, cs_chain_linear_combination, LinearCombinationOp>;

using Gemm = cutlass::gemm::device::GemmUniversal<
    ElementAB, LayoutA,
    ElementAB, LayoutB,
    ElementCD, LayoutC,
    ElementAcc,
    cutlass::arch::OpClassTensorOp,
    cutlass::arch::Sm80,
    ThreadblockShape, WarpShape, InstructionShape,
    EpilogueOp,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>,
    CS_STAGES,
    kAlign, kAlign,
    cutlass::arch::OpMultiplyAddFastF32>;   // 3xTF32 (big + small split)

static_assert(Gemm::kAlignmentC == kAlign, "epilogue vector width must be 4 floats");

// ---------------------------------------------------------------------------------------
// The chain over D, in place (chains with tensor operands)
// ---------------------------------------------------------------------------------------

static constexpr int kChainThreads = 256;

// D[b](row, col) = Chain(D[b](row, col)) for every element of batch blockIdx.y; threads
// walk D's contiguous dimension, so that the loads and stores of D coalesce.
template <class Chain>
__global__ void __launch_bounds__(kChainThreads)
cs_chain_inplace_kernel(CUTLASS_GRID_CONSTANT cs_problem const p)
{
  int64_t const b = blockIdx.y;
  bool const row_major = (p.layout_cd == CS_LAYOUT_ROW);
  int64_t const inner = row_major ? p.n : p.m;                       // contiguous extent of D
  int64_t const total = p.m * p.n;
  float* D = static_cast<float*>(p.d) + b * p.batch_stride_d;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t const outer_i = i / inner;
    int64_t const inner_i = i - outer_i * inner;
    int64_t const row = row_major ? outer_i : inner_i;
    int64_t const col = row_major ? inner_i : outer_i;
    float* d = D + outer_i * p.ldd + inner_i;
    *d = cs_chain_at<Chain>(p, *d, b, row, col);
  }
}

template <class Chain>
static int32_t cs_chain_inplace(const cs_problem& p, cudaStream_t stream)
{
  int64_t const total = p.m * p.n;
  int64_t const blocks = (total + kChainThreads - 1) / kChainThreads;
  int64_t const cap = int64_t(p.sm_count > 0 ? p.sm_count : 132) * 16;   // grid-stride beyond
  dim3 const grid(unsigned(blocks < cap ? blocks : cap), unsigned(p.batch));
  cs_chain_inplace_kernel<Chain><<<grid, kChainThreads, 0, stream>>>(p);
  return int32_t(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------
// Host side: problem checks
// ---------------------------------------------------------------------------------------

static inline bool cs_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 0xF) == 0;
}

// A leading dimension or batch stride (elements) that keeps 16-byte alignment.
static inline bool cs_stride_ok(int64_t elems) {
  return elems >= 0 && elems % kAlign == 0;
}

// One operand stored `outer` lines of `inner` contiguous elements, `ld` apart: CUTLASS's
// 16-byte vector accesses need `inner` and `ld` multiples of 4 floats.
static inline bool cs_operand_ok(int64_t inner, int64_t ld) {
  return inner % kAlign == 0 && ld >= inner && cs_stride_ok(ld);
}

// The chain's operands as this build's cs_chain reads them (the one check, shared with
// the fallback).
static int32_t cs_chain_check(const cs_problem& p, bool check_pointers)
{
  return cs_fallback::chain_check<cs_chain>(p, check_pointers);
}

// CS_OK when the fast (tensor core) path handles `p`.
static int32_t cs_gemm_check(const cs_problem& p, bool check_pointers)
{
  constexpr int64_t kMaxInt = 0x7fffffffLL;

  if (!kTypesOk) return CS_ERR_UNSUPPORTED;
  // gemm_bias_act's bias and activation live in the chain: a build without one cannot.
  if (p.family != CS_FAMILY_GEMM &&
      !(p.family == CS_FAMILY_GEMM_BIAS_ACT && !cs_chain::kIdentity))
    return CS_ERR_UNSUPPORTED;
  if (p.dtype_ab != CS_DTYPE_F32 || p.dtype_cd != CS_DTYPE_F32 || p.dtype_acc != CS_DTYPE_F32)
    return CS_ERR_UNSUPPORTED;
  if (p.layout_a != kLayoutA || p.layout_b != kLayoutB || p.layout_cd != kLayoutCD)
    return CS_ERR_UNSUPPORTED;
  if (cs_chain_check(p, check_pointers) != CS_OK) return CS_ERR_UNSUPPORTED;

  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.k == 0) return CS_ERR_UNSUPPORTED;                   // the fallback does beta*C
  if (p.m > kMaxInt || p.n > kMaxInt || p.k > kMaxInt) return CS_ERR_UNSUPPORTED;
  if (p.batch > 65535) return CS_ERR_UNSUPPORTED;            // grid z

  bool const has_c = (p.beta != 0.0f);

  // Each operand's contiguous extent and leading dimension (CUTLASS checks the extents
  // in can_implement, not the leading dimensions).
  int64_t const inner_a  = (p.layout_a  == CS_LAYOUT_ROW) ? p.k : p.m;
  int64_t const inner_b  = (p.layout_b  == CS_LAYOUT_ROW) ? p.n : p.k;
  int64_t const inner_cd = (p.layout_cd == CS_LAYOUT_ROW) ? p.n : p.m;
  if (!cs_operand_ok(inner_a, p.lda) || !cs_operand_ok(inner_b, p.ldb)) return CS_ERR_UNSUPPORTED;
  if (!cs_operand_ok(inner_cd, p.ldd)) return CS_ERR_UNSUPPORTED;
  if (has_c && !cs_operand_ok(inner_cd, p.ldc)) return CS_ERR_UNSUPPORTED;
  if (p.batch > 1) {
    // Batch strides keep every batch's pointer 16-byte aligned; 0 shares A, B or C.
    if (!cs_stride_ok(p.batch_stride_a) || !cs_stride_ok(p.batch_stride_b)) return CS_ERR_UNSUPPORTED;
    if (!cs_stride_ok(p.batch_stride_d) || p.batch_stride_d == 0) return CS_ERR_UNSUPPORTED;
    if (has_c && !cs_stride_ok(p.batch_stride_c)) return CS_ERR_UNSUPPORTED;
  }

  if (check_pointers) {
    if (p.a == nullptr || p.b == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    if (!cs_aligned16(p.a) || !cs_aligned16(p.b) || !cs_aligned16(p.d)) return CS_ERR_UNSUPPORTED;
    if (has_c && (p.c == nullptr || !cs_aligned16(p.c))) return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

// ---------------------------------------------------------------------------------------
// Host side: CUTLASS arguments
// ---------------------------------------------------------------------------------------

static typename Gemm::Arguments cs_make_arguments(const cs_problem& p)
{
  bool const has_c = (p.beta != 0.0f);
  bool const batched = p.batch > 1;
  // Without a source (beta == 0) C is never read (LinearCombination skips it): point it
  // at D so that every pointer CUTLASS sees is valid and aligned.
  ElementCD const* ptr_c = has_c ? static_cast<ElementCD const*>(p.c)
                                 : static_cast<ElementCD const*>(p.d);
  int64_t const ldc = has_c ? p.ldc : p.ldd;
  int64_t const stride_c = has_c ? p.batch_stride_c : p.batch_stride_d;

  // kGemm reads batch_count as the split-K slice count: 1 there. Leading dimensions are
  // the strides of each operand's own layout (LayoutA, LayoutB, LayoutC).
  return typename Gemm::Arguments(
      batched ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
      cutlass::gemm::GemmCoord(int(p.m), int(p.n), int(p.k)),
      batched ? int(p.batch) : 1,
      typename EpilogueOp::Params(ElementCompute(p.alpha), ElementCompute(p.beta)),
      p.a, p.b, ptr_c, p.d,
      batched ? p.batch_stride_a : 0,
      batched ? p.batch_stride_b : 0,
      batched ? stride_c : 0,
      batched ? p.batch_stride_d : 0,
      p.lda, p.ldb, ldc, p.ldd);
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

// The predicated fallback GEMM (any layout, the chain applied there) for what the fast
// path cannot take.
static int32_t cs_fallback_check(const cs_problem& p, bool check_pointers)
{
  if (!kTypesOk || p.dtype_acc != CS_DTYPE_F32) return CS_ERR_UNSUPPORTED;
  if (p.family != CS_FAMILY_GEMM && p.family != CS_FAMILY_GEMM_BIAS_ACT) return CS_ERR_UNSUPPORTED;
  return cs_fallback::check<float, float, cs_chain>(p, check_pointers);
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
  // GEMV-like shapes (one side of D <= 16, long K) take the split-K GEMV path.
  if (cs_fallback_check(*problem, /*check_pointers=*/false) == CS_OK && cs_fallback::gemv_takes(*problem)) {
    *bytes = cs_fallback::gemv_workspace_bytes(*problem);
    return CS_OK;
  }
  if (cs_gemm_check(*problem, /*check_pointers=*/false) != CS_OK)
    return cs_fallback_check(*problem, /*check_pointers=*/false);   // 0 bytes on the fallback
  if (problem->m == 0 || problem->n == 0 || problem->batch == 0) return CS_OK;

  typename Gemm::Arguments args = cs_make_arguments(*problem);   // pointers may be NULL here
  if (Gemm::can_implement(args) != cutlass::Status::kSuccess)
    return cs_fallback_check(*problem, /*check_pointers=*/false);
  *bytes = uint64_t(Gemm::get_workspace_size(args));
  return CS_OK;
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  if (cs_fallback_check(*problem, /*check_pointers=*/true) == CS_OK && cs_fallback::gemv_takes(*problem))
    return cs_fallback::launch_gemv<float, float, cs_chain>(*problem, stream);
  int32_t const status = cs_gemm_check(*problem, /*check_pointers=*/true);
  if (status != CS_OK) {
    // Odd extents or leading dimensions, misaligned pointers, k == 0: the predicated
    // fallback (exact fp32 FMA): slower, never wrong.
    if (cs_fallback_check(*problem, /*check_pointers=*/true) != CS_OK) return status;
    return cs_fallback::launch<float, float, cs_chain>(*problem, stream);
  }
  if (problem->m == 0 || problem->n == 0 || problem->batch == 0) return CS_OK;

  typename Gemm::Arguments args = cs_make_arguments(*problem);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    if (cs_fallback_check(*problem, /*check_pointers=*/true) != CS_OK) return CS_ERR_UNSUPPORTED;
    return cs_fallback::launch<float, float, cs_chain>(*problem, stream);
  }

  size_t const workspace_bytes = Gemm::get_workspace_size(args);
  if (workspace_bytes > 0 &&
      (problem->workspace == nullptr || problem->workspace_bytes < workspace_bytes))
    return CS_ERR_WORKSPACE;
  void* workspace = workspace_bytes > 0 ? problem->workspace : nullptr;

  cutlass::Status s = gemm.initialize(args, workspace, stream);
  if (s != cutlass::Status::kSuccess) return cs_status_of(s);
  s = gemm.run(stream);
  if (s != cutlass::Status::kSuccess) return cs_status_of(s);

  // Z is in D: apply a chain that reads tensor operands over it, in place.
  if constexpr (kChainAfter) {
    return cs_chain_inplace<cs_chain>(*problem, stream);
  }
  return CS_OK;
}
