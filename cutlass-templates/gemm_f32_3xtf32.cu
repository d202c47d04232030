// cutesmith template: fp32 GEMM at fp32 accuracy on tensor cores (3xTF32), CUTLASS 2.x.
//
//   D[l] (m x n, row-major) = alpha * A[l] (m x k, row-major) * B[l] (k x n, col-major)
//                           + beta * C[l] (m x n, row-major)          for l in [0, batch)
//
// Operands are "TN": A and B both keep K contiguous (B is stored as n rows of k elements,
// i.e. layout_b == CS_LAYOUT_COL). A, B, C, D, accumulation, alpha and beta are all fp32.
//
// Strategy: CUTLASS 2.x cutlass::gemm::device::GemmUniversal on Sm80 tensor cores
// (mma.sync m16n8k8 TF32, which Hopper runs as well) with the OpMultiplyAddFastF32
// operator: every fp32 operand x is split into big = tf32(x) and small = tf32(x - big)
// and each product is computed as big*big + big*small + small*big (3 TF32 MMAs, the
// small*small term dropped), which keeps the error near that of an fp32 SGEMM (plain TF32
// would lose ~10 mantissa bits). Multistage cp.async mainloop (CS_STAGES deep), a
// CS_TILE_M x CS_TILE_N x CS_TILE_K CTA tile split among CS_WARP_M x CS_WARP_N warp tiles,
// identity threadblock swizzle, batches in grid z (GemmUniversalMode::kBatched).
//
// Fast path: 16-byte aligned A/B/C/D (pointers, leading dimensions and batch strides
// multiples of 4 floats) and k, n multiples of 4 (CUTLASS's alignment-4 checks). Any
// other problem of this family runs on the predicated fallback GEMM (exact fp32 FMA).
//
// Notes on the CUTLASS view of the ABI operands (GemmCoord (M,N,K), batch_count L):
//   A: cutlass::layout::RowMajor    (m x k) ld = lda, batch_stride_A
//   B: cutlass::layout::ColumnMajor (k x n) ld = ldb, batch_stride_B
//   C, D: cutlass::layout::RowMajor (m x n) ld = ldc | ldd, batch_stride_C | D

#if defined(__CUDA_ARCH__) && !defined(NDEBUG)
#define NDEBUG
#endif

#include <cstdint>

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

#include "cutesmith_abi.h"
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

using ElementAB      = float;
using ElementCD      = float;
using ElementAcc     = float;
using ElementCompute = float;   // epilogue math, alpha, beta

using LayoutA = cutlass::layout::RowMajor;      // (M,K) K contiguous
using LayoutB = cutlass::layout::ColumnMajor;   // (K,N) K contiguous == n rows of k elements
using LayoutC = cutlass::layout::RowMajor;      // (M,N) N contiguous

static constexpr int kAlign = 4;   // elements per 16-byte access (A, B, C, D)

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

using EpilogueOp = cutlass::epilogue::thread::LinearCombination<
    ElementCD, 128 / cutlass::sizeof_bits<ElementCD>::value, ElementAcc, ElementCompute>;

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
// Host side: problem checks
// ---------------------------------------------------------------------------------------

static inline bool cs_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 0xF) == 0;
}

// A leading dimension or batch stride (elements) that keeps 16-byte alignment.
static inline bool cs_stride_ok(int64_t elems) {
  return elems >= 0 && elems % kAlign == 0;
}

// CS_OK when the fast (tensor core) path handles `p`.
static int32_t cs_gemm_check(const cs_problem& p, bool check_pointers)
{
  constexpr int64_t kMaxInt = 0x7fffffffLL;

  if (p.family != CS_FAMILY_GEMM) return CS_ERR_UNSUPPORTED;
  if (p.dtype_ab != CS_DTYPE_F32 || p.dtype_cd != CS_DTYPE_F32 || p.dtype_acc != CS_DTYPE_F32)
    return CS_ERR_UNSUPPORTED;
  if (p.layout_a != CS_LAYOUT_ROW || p.layout_b != CS_LAYOUT_COL || p.layout_cd != CS_LAYOUT_ROW)
    return CS_ERR_UNSUPPORTED;

  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.k == 0) return CS_ERR_UNSUPPORTED;                   // the fallback does beta*C
  if (p.m > kMaxInt || p.n > kMaxInt || p.k > kMaxInt) return CS_ERR_UNSUPPORTED;
  if (p.batch > 65535) return CS_ERR_UNSUPPORTED;            // grid z
  if (p.k % kAlign != 0 || p.n % kAlign != 0) return CS_ERR_UNSUPPORTED;   // CUTLASS's checks

  bool const has_c = (p.beta != 0.0f);

  if (p.lda < p.k || !cs_stride_ok(p.lda)) return CS_ERR_UNSUPPORTED;
  if (p.ldb < p.k || !cs_stride_ok(p.ldb)) return CS_ERR_UNSUPPORTED;
  if (p.ldd < p.n || !cs_stride_ok(p.ldd)) return CS_ERR_UNSUPPORTED;
  if (has_c && (p.ldc < p.n || !cs_stride_ok(p.ldc))) return CS_ERR_UNSUPPORTED;
  if (p.batch > 1) {
    // Batch strides keep every batch's pointer 16-byte aligned; 0 broadcasts A, B or C.
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

  // kGemm reads batch_count as the split-K slice count: 1 there.
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

static int32_t cs_fallback_check(const cs_problem& p, bool check_pointers)
{
  if (p.family != CS_FAMILY_GEMM || p.dtype_acc != CS_DTYPE_F32) return CS_ERR_UNSUPPORTED;
  return cs_fallback::check<float>(p, CS_DTYPE_F32, check_pointers);
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
  int32_t const status = cs_gemm_check(*problem, /*check_pointers=*/true);
  if (status != CS_OK) {
    // Odd k / n / leading dimensions, misaligned pointers, k == 0: the predicated
    // fallback (exact fp32 FMA): slower, never wrong.
    if (cs_fallback_check(*problem, /*check_pointers=*/true) != CS_OK) return status;
    return cs_fallback::launch<float>(*problem, stream);
  }
  if (problem->m == 0 || problem->n == 0 || problem->batch == 0) return CS_OK;

  typename Gemm::Arguments args = cs_make_arguments(*problem);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    if (cs_fallback_check(*problem, /*check_pointers=*/true) != CS_OK) return CS_ERR_UNSUPPORTED;
    return cs_fallback::launch<float>(*problem, stream);
  }

  size_t const workspace_bytes = Gemm::get_workspace_size(args);
  if (workspace_bytes > 0 &&
      (problem->workspace == nullptr || problem->workspace_bytes < workspace_bytes))
    return CS_ERR_WORKSPACE;
  void* workspace = workspace_bytes > 0 ? problem->workspace : nullptr;

  cutlass::Status s = gemm.initialize(args, workspace, stream);
  if (s != cutlass::Status::kSuccess) return cs_status_of(s);
  s = gemm.run(stream);
  return cs_status_of(s);
}
