// cutesmith template: skinny GEMM (one side of D at most 64), split-K, mma.sync tensor cores.
//
//   Z[b] = alpha * A[b] (m x k) * B[b] (k x n) + beta * C[b]           (fp32)
//   D[b] = chain(Z[b]) rounded once to D's type                        for b in [0, batch)
//
// Families: CS_FAMILY_GEMM, and CS_FAMILY_GEMM_BIAS_ACT when the workload's epilogue chain
// is compiled in (the chain then starts with the row-bias add, operand 0, and the
// activation). Types: A and B bf16 or f16 (CS_WL_DTYPE_AB; default bf16, or f16 with
// -DCS_GEMM_FP16); C and D bf16, f16 or f32 (CS_WL_DTYPE_CD; default A's type); fp32
// accumulation; alpha and beta in fp32. A build for fp8 or f32 A/B runs everything on the
// fallback. Layouts are checked at run time (the CS_WL_LAYOUT_* macros are not needed).
//
// Fast path (this file's kernel): the long side's operand keeps K contiguous (B column-
// major when m <= n, A row-major when n < m; it is streamed with 16-byte loads), the small
// side's operand in either order (staged through shared memory, transposed on the way
// when M-major), C and D row- or column-major with any ldc / ldd, min(m, n) <= 64, any
// batch <= 65535 with any batch strides (0: A, B or C shared by every batch; D needs its
// own), k % (8 * CS_SPLIT_K) == 0 and k <= 2^31 - 2^16 (K = 2^20 and beyond), lda / ldb
// (and batch strides of A / B) multiples of 8, A / B 16-byte aligned, the split-K partials
// within 4 GiB of workspace.
// Everything else: the split-K GEMV path of cutesmith_fallback_gemm.cuh when one side is
// <= 16 and k >= 4096 (other layouts of A / B), else its predicated fallback GEMM (m and n
// both > 64, a K residue, odd leading dimensions, misaligned pointers, k == 0).
//
// Orientation: the kernel always computes a "row-major" D' = A' (m' x k, K contiguous) *
// B' (k x n', B'^T stored as n' rows of k), m' <= 64: the small side is m', the long side
// (the operand streamed from DRAM) n'.
//   m <= n:  A' = A,   B' = B,   (m', n') = (m, n), D'(i, j) = D(i, j)
//   n <  m:  A' = B^T, B' = A^T, (m', n') = (n, m), D'(i, j) = D(j, i)   (D^T = B^T A^T)
// The swap only exchanges pointers, leading dimensions and batch strides; A' is K-major
// (rows of K) or M-major (columns of M, `a_kmajor` false), B'^T always rows of K. The epilogue maps (i, j) back
// to D's logical (row, col), reads C and writes D through their layout (layout_cd, ldc,
// ldd) and evaluates the chain at (row, col), which indexes its operands the workload's way.
//
// Strategy: with m' <= 64 the problem is bound by streaming B' (n'*k elements) once from
// DRAM. The grid is ceil(n' / CS_BLOCK_N) x CS_SPLIT_K x batch CTAs (batch 1 runs a
// kernel variant without the per-batch pointer arithmetic): CTA (x, y, b) owns
// the columns [x*BLOCK_N, (x+1)*BLOCK_N) of D'[b] and the K slice [y*k/SPLIT,
// (y+1)*k/SPLIT). Its warps are NT = BLOCK_N/8 column tiles (8 columns each) times
// KG = warps/NT K groups that interleave 32-wide K steps. Per K chunk (sized so A' stays
// under CS_SMEM_A bytes of shared memory) the CTA stages A' (rows padded with zeros up to a
// multiple of 16) in shared memory; every warp then streams its 8 rows of B'^T straight from
// global memory into registers, one 16-byte ld.global.nc per lane per 32-wide K step
// (CS_UNROLL steps in flight), and runs mma.sync.m16n8k16 (fp32 accumulate) against A'
// fragments read with 16-byte lds. Offsets are 64-bit: n' * k may exceed 2^31.
//
// K permutation: a lane (group g = lane/4, c = lane%4) loads B'^T[n0+g][k0+8c .. k0+8c+8)
// and A'[r][k0+8c .. k0+8c+8) for its rows r = g, g+8 (4 registers of 2 elements each:
// q0..q3). MMA 0 of the step takes {q0, q1}, MMA 1 {q2, q3}, as the fragment registers
// that the PTX layout assigns to the logical k = {2c, 2c+1} and {2c+8, 2c+9}. A' and B'
// use the same map from logical to actual k, so each MMA sums a permutation of 16 of the
// 32 K values and the two together cover the step exactly once.
//
// Partials: K groups of a CTA are summed through shared memory; with CS_SPLIT_K > 1 every
// split writes fp32 partials (batch x split x m' x n', from the harness workspace). With
// CS_FUSED_REDUCE=1 (default) each CTA then fences and bumps a counter per (batch, column
// block) kept in the workspace after the partials; the last CTA to arrive sums the splits
// (__ldcg), runs the epilogue and resets the counter to 0 for the next launch. With
// CS_FUSED_REDUCE=0 a second kernel on the same stream does the sum and the epilogue
// (CS_PDL=1 makes it a programmatic dependent launch). With CS_SPLIT_K == 1 the main
// kernel runs the epilogue itself. Epilogue, per element of D: z = alpha*scale_a*scale_b
// * acc + beta * C(row, col), then z = chain(z) at (row, col) unless the chain is the
// identity, then one rounding to D's type. Measured on the H100 at 16x4096x4096 bf16 (TN,
// batch 1, before the orientations / chain / batch were added; the batch-1 kernel's inner
// loop compiles to the same instructions) with cuBLAS in the same run at 21.9-22.8 us: the
// separate reduce 21.9-22.9 us, fused reduce + L2 hint 21.25-21.34 us.
//
// Parameters (override with -DNAME=VALUE):
//   CS_SPLIT_K       4      K slices (grid y); 1 writes D from the main kernel
//   CS_BLOCK_N       64     columns of D' per CTA (multiple of 8)
//   CS_THREADS       256    threads per CTA (warps: a multiple of CS_BLOCK_N/8)
//   CS_UNROLL        8      32-wide K steps of B' in flight per warp (16 B per lane each)
//   CS_PDL           0      1: the separate reduce kernel is a programmatic dependent launch
//   CS_FUSED_REDUCE  1      1: the last CTA of each column block sums the splits
//   CS_L2_256B       1      1: B' loads carry the .L2::256B prefetch-size hint
//   CS_SMEM_A        98304  shared memory budget for the staged A' chunk, bytes
//   CS_MIN_BLOCKS    0      CTAs per SM the register budget is sized for (launch bounds);
//                           0: 2 (1 with 4 row tiles: m' > 48)
//   CS_B_ROWWISE     0      1: each warp loads its 8 rows of B'^T one row (512 contiguous
//                           bytes) per instruction into a shared-memory tile and reads the
//                           MMA fragments from there (THREADS = 4 * BLOCK_N, UNROLL = 8)
//   CS_B_DOUBLE      0      1: double-buffered B' registers (loads of the next batch in
//                           flight during this batch's MMAs)
//   CS_GEMM_FP16     unset  f16 A/B when the workload block gives no CS_WL_DTYPE_AB
//   CS_STREAM        0      1: the persistent TMA stream kernel for m' <= 32 (needs CS_SPLIT_K=1;
//                           see "The stream path" below); its CS_STREAM_WN, _WARPS, _KT,
//                           _PROMOTE and _MAX_STAGES are described there

#include <cstdint>
#include <type_traits>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cutesmith_abi.h"
#include "cutesmith_chain.cuh"
#include "cutesmith_fallback_gemm.cuh"

// ---------------------------------------------------------------------------------------
// Strategy parameters (override with -DNAME=VALUE)
// ---------------------------------------------------------------------------------------

#ifndef CS_SPLIT_K
#define CS_SPLIT_K 4        // K slices (grid y); 1 writes D directly
#endif
#ifndef CS_BLOCK_N
#define CS_BLOCK_N 64       // columns of D' per CTA (multiple of 8)
#endif
#ifndef CS_THREADS
#define CS_THREADS 256      // threads per CTA (warps = THREADS/32, multiple of BLOCK_N/8)
#endif
#ifndef CS_UNROLL
#define CS_UNROLL 8         // 32-wide K steps of B' in flight per warp (16 B per lane each)
#endif
#ifndef CS_PDL
#define CS_PDL 0            // 1: the split-K reduce kernel is a programmatic dependent launch
#endif
#ifndef CS_FUSED_REDUCE
#define CS_FUSED_REDUCE 1   // 1: no second kernel: the last CTA of each column block (atomic
#endif                      //    counter in the workspace, reset by that CTA) sums the splits
#ifndef CS_L2_256B
#define CS_L2_256B 1        // 1: B' loads carry the .L2::256B prefetch-size hint
#endif
#ifndef CS_SMEM_A
#define CS_SMEM_A 98304     // shared memory budget for the staged A' chunk, bytes
#endif
#ifndef CS_MIN_BLOCKS
#define CS_MIN_BLOCKS 0     // CTAs per SM the registers are budgeted for (0: 2, or 1 for 4 row tiles)
#endif
#ifndef CS_B_ROWWISE
#define CS_B_ROWWISE 0      // 1: B' read a row per instruction and regrouped in shared memory
#endif
#ifndef CS_B_DOUBLE
#define CS_B_DOUBLE 0       // 1: two register buffers of B' per warp (next batch in flight)
#endif

// ---------------------------------------------------------------------------------------
// Workload: element types
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

// The C++ element of a cs_dtype (void: none this template takes).
template <int Dtype> struct cs_element { using type = void; };
template <> struct cs_element<CS_DTYPE_F32> { using type = float; };
template <> struct cs_element<CS_DTYPE_F16> { using type = __half; };
template <> struct cs_element<CS_DTYPE_BF16> { using type = __nv_bfloat16; };
template <> struct cs_element<CS_DTYPE_E4M3> { using type = __nv_fp8_e4m3; };
template <> struct cs_element<CS_DTYPE_E5M2> { using type = __nv_fp8_e5m2; };

// What this build runs: the tensor-core path (16-bit A/B) and the fallback (which also
// takes fp8 and f32 A/B). A build for anything else still compiles and every launch
// returns CS_ERR_UNSUPPORTED.
static constexpr bool kCdOk =
    kDtypeCD == CS_DTYPE_BF16 || kDtypeCD == CS_DTYPE_F16 || kDtypeCD == CS_DTYPE_F32;
static constexpr bool kFastOk =
    kCdOk && (kDtypeAB == CS_DTYPE_BF16 || kDtypeAB == CS_DTYPE_F16);
static constexpr bool kFallbackOk =
    kCdOk && !std::is_void<typename cs_element<kDtypeAB>::type>::value;

using ElementAB =
    std::conditional_t<kFallbackOk, typename cs_element<kDtypeAB>::type, __nv_bfloat16>;
using ElementCD = std::conditional_t<kCdOk, typename cs_element<kDtypeCD>::type, __nv_bfloat16>;

static constexpr int kWarps = CS_THREADS / 32;
static constexpr int kNT = CS_BLOCK_N / 8;    // column tiles (8 wide) per CTA
static constexpr int kKG = kWarps / kNT;      // K groups per column tile
static constexpr int kPadA = 32;              // row pad of staged A' (elements): 64 B mod 128 B
static constexpr int64_t kMaxSmall = 64;      // the small side m' of D'
static constexpr uint64_t kMaxWorkspace = uint64_t(4) << 30;   // split-K partials + counters

static_assert(CS_BLOCK_N % 8 == 0, "CS_BLOCK_N must be a multiple of 8");
static_assert(CS_THREADS % 32 == 0 && CS_THREADS <= 1024, "CS_THREADS: whole warps, <= 1024");
static_assert(kNT >= 1 && kWarps % kNT == 0, "warps must be a multiple of CS_BLOCK_N/8");
static_assert(CS_SPLIT_K >= 1 && CS_SPLIT_K <= 65535, "CS_SPLIT_K out of range");
static_assert(CS_UNROLL >= 1, "CS_UNROLL >= 1");
static_assert(kPadA % 8 == 0, "staged A' rows must stay 16-byte aligned");
// CS_B_ROWWISE: a warp's batch is its 8 rows x 8 steps of 32 K (512 bytes a row), staged
// in rows of kRowB elements (256 + 32: the 64-byte pad puts rows g and g + 1 on different
// banks for the fragment reads).
static constexpr int kRowB = 256 + 32;
static_assert(!CS_B_ROWWISE || (kKG == 1 && CS_UNROLL == 8),
              "CS_B_ROWWISE needs CS_THREADS == 4 * CS_BLOCK_N (one K group) and CS_UNROLL == 8");

// ---------------------------------------------------------------------------------------
// Kernel arguments: the problem in the kernel's orientation
// ---------------------------------------------------------------------------------------

// D' (m x n, m <= 64) = A' (m x k) * B' (k x n), A' and B'^T stored as rows of K. Passed as
// a __grid_constant__ parameter: every field is read from the constant bank.
struct cs_skinny_args {
  CUtensorMap tma_a;        // CS_STREAM: A' as {k, m', batch}, boxes of {64, MT*16}, 128-byte swizzle
  CUtensorMap tma_b;        // CS_STREAM: B'^T as {k, n', batch}, boxes of {64, BN}
  const ElementAB* a;       // A': m rows of k, lda apart (batch b at a + b * batch_a), or
                            // with a_kmajor false k columns of m, lda apart
  bool a_kmajor;            // A' stored as rows of K (else as columns: M contiguous)
  const ElementAB* b;       // B'^T: n rows of k, ldb apart
  int64_t lda, ldb, batch_a, batch_b;
  int m, n, k, kc;          // m', n', k and the K chunk staged in shared memory
  bool swapped;             // D'(i, j) = D(j, i): A' = B^T, B' = A^T
  float alpha;              // alpha * scale_a * scale_b
  float* partials;          // [batch][CS_SPLIT_K][m][n] fp32 (CS_SPLIT_K > 1)
  unsigned* counters;       // [batch][column blocks] arrival counters (CS_FUSED_REDUCE, CS_STREAM)
  float* ws;                // CS_STREAM: [batch][m][n] fp32 sums of split column blocks, kept zero
  int64_t units;            // CS_STREAM: batch x column blocks x K chunks
  int nblk, kch;            // CS_STREAM: column blocks of D' and K chunks (CS_STREAM_KT)
  cs_problem p;             // the workload's problem: C, D, their layout, beta, the chain
};

// ---------------------------------------------------------------------------------------
// Device side
// ---------------------------------------------------------------------------------------

// Streaming 16-byte load of B' (read once: no L1 allocation).
__device__ __forceinline__ uint4 cs_ldg_stream(const void* p)
{
  uint4 v;
#if CS_L2_256B
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
#else
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
#endif
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// d += a * b, m16n8k16, fp32 accumulation.
__device__ __forceinline__ void cs_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1)
{
  if constexpr (kDtypeAB == CS_DTYPE_F16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// B' vectors of steps s0, s0 + KG, ... (zeros past the chunk, past n).
__device__ __forceinline__ void cs_load_b(uint4 (&bv)[CS_UNROLL], const ElementAB* Brow, int k0,
                                          int s0, int nsteps, int kcur, bool nvalid, int c)
{
#pragma unroll
  for (int u = 0; u < CS_UNROLL; ++u) {
    int const s = s0 + u * kKG;
    int const kk = s * 32 + c * 8;   // within the chunk
    bv[u] = make_uint4(0u, 0u, 0u, 0u);
    if (s < nsteps && nvalid && kk < kcur) bv[u] = cs_ldg_stream(Brow + (k0 + kk));
  }
}

// The MMAs of one batch of B' (steps s0, s0 + KG, ...) against the staged A'.
template <int MT>
__device__ __forceinline__ void cs_mma_batch(float (&acc)[MT][4], const uint4 (&bv)[CS_UNROLL],
                                             const ElementAB* sA, int sstride, int s0, int nsteps,
                                             int g, int c)
{
#pragma unroll
  for (int u = 0; u < CS_UNROLL; ++u) {
    int const s = s0 + u * kKG;
    if (s < nsteps) {
      int const kk = s * 32 + c * 8;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint4 const lo = *reinterpret_cast<const uint4*>(sA + (mt * 16 + g) * sstride + kk);
        uint4 const hi = *reinterpret_cast<const uint4*>(sA + (mt * 16 + g + 8) * sstride + kk);
        cs_mma(acc[mt], lo.x, hi.x, lo.y, hi.y, bv[u].x, bv[u].y);
        cs_mma(acc[mt], lo.z, hi.z, lo.w, hi.w, bv[u].z, bv[u].w);
      }
    }
  }
}

// The epilogue of one element (i, j) of D'[b] with its K sum `acc`: back to D's logical
// (row, col), z = alpha * acc + beta * C(row, col), the chain at (row, col), one rounding.
__device__ __forceinline__ void cs_write_d(const cs_skinny_args& args, int64_t b, int64_t i,
                                           int64_t j, float acc)
{
  cs_problem const& p = args.p;
  int64_t const row = args.swapped ? j : i, col = args.swapped ? i : j;
  bool const cd_row = p.layout_cd == CS_LAYOUT_ROW;
  float z = args.alpha * acc;
  if (p.beta != 0.0f) {
    const ElementCD* C = static_cast<const ElementCD*>(p.c) + b * p.batch_stride_c;
    z += p.beta * cs_fallback::to_float(C[cs_fallback::offset(cd_row, row, col, p.ldc)]);
  }
  if constexpr (!cs_chain::kIdentity) z = cs_chain_at<cs_chain>(p, z, b, row, col);
  ElementCD* D = static_cast<ElementCD*>(p.d) + b * p.batch_stride_d;
  cs_fallback::store(&D[cs_fallback::offset(cd_row, row, col, p.ldd)], z);
}

// MT: 16-row tiles of A' (ceil(m'/16), 1..4). One CTA: columns [x*BLOCK_N, (x+1)*BLOCK_N)
// of D'[b], K slice y, with (x, y, b) = blockIdx. Batched = false (batch 1) keeps the
// per-batch pointer arithmetic out of the hot loops' registers.
template <int MT, bool Batched>
__global__ void __launch_bounds__(CS_THREADS, CS_MIN_BLOCKS > 0 ? CS_MIN_BLOCKS : (MT <= 3 ? 2 : 1))
cs_skinny_gemm_kernel(const __grid_constant__ cs_skinny_args args)
{
  extern __shared__ __align__(16) unsigned char cs_smem[];
  int const m = args.m, n = args.n, k = args.k, kc = args.kc;
  ElementAB* sA = reinterpret_cast<ElementAB*>(cs_smem);   // [MT*16][kc + kPadA]
  int const sstride = kc + kPadA;
#if CS_B_ROWWISE
  // [warps][8 rows][kRowB]: after the A' tile.
  ElementAB* sBw = sA + size_t(MT * 16) * sstride + size_t(threadIdx.x / 32) * 8 * kRowB;
#endif

  // This batch's operands (a batch stride of 0 shares one matrix).
  int64_t const batch = Batched ? int64_t(blockIdx.z) : 0;
  const ElementAB* A = Batched ? args.a + batch * args.batch_a : args.a;
  const ElementAB* B = Batched ? args.b + batch * args.batch_b : args.b;
  int64_t const lda = args.lda, ldb = args.ldb;

  int const tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  int const g = lane / 4, c = lane % 4;
  int const nt = warp % kNT, kg = warp / kNT;
  int const kslice = k / CS_SPLIT_K;
  int const kbeg = int(blockIdx.y) * kslice, kend = kbeg + kslice;
  int64_t const nrow = int64_t(blockIdx.x) * CS_BLOCK_N + nt * 8 + g;   // this lane's B'^T row
  bool const nvalid = nrow < n;
  const ElementAB* Brow = nvalid ? B + nrow * ldb : B;

  float acc[MT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (int k0 = kbeg; k0 < kend; k0 += kc) {
    // Each chunk accumulates on its own and is then added to acc with an fp32 FADD:
    // the tensor cores' accumulation is not round-to-nearest, and over K = 2^20 in one
    // accumulator its error grows with the number of MMAs, not with their square root.
    float cacc[MT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) cacc[i][j] = 0.0f;
    int const kcur = min(kc, kend - k0);           // multiple of 8
    int const nsteps = (kcur + 31) / 32;
    int const vec_per_row = (nsteps * 32) / 8;      // 16-byte vectors per staged row
    int const total_vec = MT * 16 * vec_per_row;

    constexpr int kBatch = kKG * CS_UNROLL;   // steps per batch, over the K groups
#if CS_B_ROWWISE
    // This warp's 8 rows of B'^T, one row per load instruction (lane l: K l*8 .. l*8+8 of
    // the batch), so every instruction reads 512 contiguous bytes.
    uint4 rv[8];
    auto load_rows = [&](int s0) {
      int const kk = s0 * 32 + lane * 8;   // within the chunk
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        int64_t const row = int64_t(blockIdx.x) * CS_BLOCK_N + nt * 8 + r;
        rv[r] = make_uint4(0u, 0u, 0u, 0u);
        if (row < n && kk < kcur) rv[r] = cs_ldg_stream(B + row * ldb + (k0 + kk));
      }
    };
    load_rows(kg);   // the first batch of B' is in flight while A' is staged
#else
    uint4 bv[CS_UNROLL];
    auto load_b = [&](int s0) { cs_load_b(bv, Brow, k0, s0, nsteps, kcur, nvalid, c); };
    load_b(kg);   // the first batch of B' is in flight while A' is staged
#endif

    // Stage A'[0 .. MT*16) x [k0, k0 + nsteps*32) with zeros outside m x [k0, kend),
    // 8 independent 16-byte loads per thread in flight.
    __syncthreads();
    if (args.a_kmajor) {
      for (int v0 = tid; v0 < total_vec; v0 += 8 * CS_THREADS) {
        uint4 tmp[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          int const v = v0 + i * CS_THREADS;
          int const r = v / vec_per_row, col = (v % vec_per_row) * 8;
          tmp[i] = make_uint4(0u, 0u, 0u, 0u);
          if (v < total_vec && r < m && col < kcur)
            tmp[i] = __ldg(reinterpret_cast<const uint4*>(A + int64_t(r) * lda + (k0 + col)));
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          int const v = v0 + i * CS_THREADS;
          int const r = v / vec_per_row, col = (v % vec_per_row) * 8;
          if (v < total_vec) *reinterpret_cast<uint4*>(sA + r * sstride + col) = tmp[i];
        }
      }
    } else {
      // A' stored with M contiguous (column k at A + k * lda): each K index's m' values
      // are read along M (16-byte vectors when whole) and written down the staged rows.
      int const mvec = (MT * 16) / 8;             // 8-row groups per K index
      int const total = nsteps * 32 * mvec;
      bool const vec_ok = (lda % 8) == 0 && (reinterpret_cast<uintptr_t>(A) & 15u) == 0;
      for (int v0 = tid; v0 < total; v0 += 4 * CS_THREADS) {
        uint4 tmp[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          int const v = v0 + i * CS_THREADS;
          int const kk = v / mvec, r0 = (v % mvec) * 8;
          tmp[i] = make_uint4(0u, 0u, 0u, 0u);
          if (v < total && kk < kcur && r0 < m) {
            const ElementAB* src = A + int64_t(k0 + kk) * lda + r0;
            if (vec_ok && r0 + 8 <= m) {
              tmp[i] = __ldg(reinterpret_cast<const uint4*>(src));
            } else {
              ElementAB e[8];
#pragma unroll
              for (int q = 0; q < 8; ++q) e[q] = r0 + q < m ? src[q] : ElementAB(0.0f);
              tmp[i] = *reinterpret_cast<const uint4*>(e);
            }
          }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          int const v = v0 + i * CS_THREADS;
          int const kk = v / mvec, r0 = (v % mvec) * 8;
          if (v < total) {
            const ElementAB* e = reinterpret_cast<const ElementAB*>(&tmp[i]);
#pragma unroll
            for (int q = 0; q < 8; ++q) sA[(r0 + q) * sstride + kk] = e[q];
          }
        }
      }
    }
    __syncthreads();

    // Stream B': steps s = kg, kg + KG, ... of 32 K values, CS_UNROLL in flight.
#if CS_B_ROWWISE
    // Rows through this warp's shared-memory tile: stored as loaded, read back in the
    // fragment order (row g, K s*32 + c*8), the next batch's loads in flight meanwhile.
    for (int s0 = kg; s0 < nsteps; s0 += kBatch) {
      __syncwarp();
#pragma unroll
      for (int r = 0; r < 8; ++r)
        *reinterpret_cast<uint4*>(sBw + r * kRowB + lane * 8) = rv[r];
      __syncwarp();
      if (s0 + kBatch < nsteps) load_rows(s0 + kBatch);
      uint4 bv[CS_UNROLL];
#pragma unroll
      for (int u = 0; u < CS_UNROLL; ++u)
        bv[u] = *reinterpret_cast<const uint4*>(sBw + g * kRowB + u * 32 + c * 8);
      cs_mma_batch<MT>(cacc, bv, sA, sstride, s0, nsteps, g, c);
    }
#elif CS_B_DOUBLE
    // Two register buffers: the next batch's loads are issued before this batch's MMAs,
    // so 2 x CS_UNROLL vectors per lane are in flight while the tensor cores work (the
    // loads and MMAs are asm volatile: they issue in the order written).
    uint4 bv2[CS_UNROLL];
    for (int s0 = kg; s0 < nsteps; s0 += 2 * kBatch) {
      cs_load_b(bv2, Brow, k0, s0 + kBatch, nsteps, kcur, nvalid, c);
      cs_mma_batch<MT>(cacc, bv, sA, sstride, s0, nsteps, g, c);
      if (s0 + 2 * kBatch < nsteps) load_b(s0 + 2 * kBatch);
      cs_mma_batch<MT>(cacc, bv2, sA, sstride, s0 + kBatch, nsteps, g, c);
    }
#else
    for (int s0 = kg; s0 < nsteps; s0 += kBatch) {
      if (s0 != kg) load_b(s0);
      cs_mma_batch<MT>(cacc, bv, sA, sstride, s0, nsteps, g, c);
    }
#endif
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] += cacc[i][j];
  }

#if CS_PDL && CS_SPLIT_K > 1
  // The reduce kernel may start launching now; its griddepcontrol.wait still waits for
  // this whole grid to finish and its writes to be visible.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

  // Sum the K groups of each column tile through shared memory (reusing the A' buffer).
  if constexpr (kKG > 1) {
    float* red = reinterpret_cast<float*>(cs_smem);   // [(KG-1)*NT][MT*4][32]
    __syncthreads();
    if (kg > 0) {
      float* dst = red + ((kg - 1) * kNT + nt) * (MT * 4 * 32);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < 4; ++j) dst[(mt * 4 + j) * 32 + lane] = acc[mt][j];
    }
    __syncthreads();
    if (kg == 0)
    for (int q = 1; q < kKG; ++q) {
      const float* src = red + ((q - 1) * kNT + nt) * (MT * 4 * 32);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[mt][j] += src[(mt * 4 + j) * 32 + lane];
    }
  }

  // This batch's split-K partials [CS_SPLIT_K][m][n] (unused with CS_SPLIT_K == 1).
  float* const partials =
      CS_SPLIT_K > 1 ? args.partials + batch * (int64_t(CS_SPLIT_K) * m * n) : nullptr;

  // acc[mt][j]: row mt*16 + g + (j >= 2 ? 8 : 0), column n0 + 2c + (j & 1) of D'.
  int64_t const col0 = int64_t(blockIdx.x) * CS_BLOCK_N + nt * 8 + 2 * c;
  if (kg == 0)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int const row = mt * 16 + g + (j >= 2 ? 8 : 0);
      int64_t const col = col0 + (j & 1);
      if (row < m && col < n) {
        if constexpr (CS_SPLIT_K == 1) {
          cs_write_d(args, batch, row, col, acc[mt][j]);
        } else {
          partials[(int64_t(blockIdx.y) * m + row) * n + col] = acc[mt][j];
        }
      }
    }
  }

#if CS_FUSED_REDUCE && CS_SPLIT_K > 1
  // Split-K fix-up in the same kernel: the last of the CS_SPLIT_K CTAs of this (batch,
  // column block) to arrive sums every split's partials and runs the epilogue. Classic
  // threadfence reduction: partials stored, fence, then the arrival counted.
  __shared__ int cs_last;
  unsigned* counter = args.counters + batch * gridDim.x + blockIdx.x;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    unsigned const old = atomicAdd(counter, 1u);
    int const last = (old == unsigned(CS_SPLIT_K - 1));
    if (last) *counter = 0u;   // every split has arrived: ready for the next launch
    cs_last = last;
  }
  __syncthreads();
  if (cs_last) {
    __threadfence();
    int64_t const c0 = int64_t(blockIdx.x) * CS_BLOCK_N;
    int const total = m * CS_BLOCK_N;
    // Elements per thread per pass, all their CS_SPLIT_K loads in flight at once (at most
    // 32 partials a thread: more spilled).
    constexpr int kPer = CS_SPLIT_K >= 16 ? 1 : CS_SPLIT_K >= 8 ? 2 : 4;
    for (int base = tid; base < total; base += CS_THREADS * kPer) {
      float part[kPer][CS_SPLIT_K];
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        int const idx = base + e * CS_THREADS;
        int const row = idx / CS_BLOCK_N;
        int64_t const col = c0 + idx % CS_BLOCK_N;
        bool const ok = idx < total && col < n;
#pragma unroll
        for (int sk = 0; sk < CS_SPLIT_K; ++sk)
          part[e][sk] = ok ? __ldcg(partials + (int64_t(sk) * m + row) * n + col) : 0.0f;
      }
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        int const idx = base + e * CS_THREADS;
        int const row = idx / CS_BLOCK_N;
        int64_t const col = c0 + idx % CS_BLOCK_N;
        if (idx < total && col < n) {
          float sum = 0.0f;
#pragma unroll
          for (int sk = 0; sk < CS_SPLIT_K; ++sk) sum += part[e][sk];
          cs_write_d(args, batch, row, col, sum);
        }
      }
    }
  }
#endif
}

// The separate split-K reduce (CS_FUSED_REDUCE=0): for every batch b and element (i, j)
// of D', sums partials[b][s][i][j] over the splits and runs the epilogue.
__global__ void __launch_bounds__(256)
cs_splitk_reduce_kernel(const __grid_constant__ cs_skinny_args args)
{
  int64_t const mn = int64_t(args.m) * args.n;
  int64_t const total = mn * args.p.batch;
#if CS_PDL
  // Programmatic dependent launch: wait until the split-K kernel's partials are complete.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    int64_t const b = idx / mn, e = idx % mn;
    const float* part = args.partials + b * (int64_t(CS_SPLIT_K) * mn) + e;
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < CS_SPLIT_K; ++s) sum += part[int64_t(s) * mn];
    cs_write_d(args, b, e / args.n, e % args.n, sum);
  }
}

// ---------------------------------------------------------------------------------------
// The stream path (CS_STREAM=1): a persistent kernel that keeps every SM pulling B'
// ---------------------------------------------------------------------------------------
//
// With m' <= 64 the time is the time to read B' once from DRAM. The kernel above splits
// the work into a fixed grid of (column block, K slice) CTAs whose loads come from the
// warps' registers; each CTA ramps its loads up and down, and the last wave leaves SMs
// idle. This kernel instead:
//   - cuts the work into units of (batch, column block of BN rows of B'^T, K chunk of KT)
//     and gives each of min(units, SMs) CTAs an equal, contiguous run of units (K fastest),
//     so every SM streams the same number of bytes, whatever the shape;
//   - moves the bytes with the TMA: a producer warp loads each unit's A' (MT*16 rows x KT,
//     from L2 after the first CTA, evict-last) and B'^T (BN rows x KT, from DRAM,
//     evict-first) as boxes of 64 K (128 bytes, 128-byte swizzle) into one of S
//     shared-memory stages; rows past m' or n' and K past k arrive as zeros. The stages
//     stay full across column blocks. (1-D bulk copies of one row each were tried first:
//     the TMA's per-copy cost made them 2-10x slower than cuBLAS.)
//   - has CS_STREAM_WARPS consumer warps each own WN columns of the block: per 16-wide K
//     step, ldmatrix A' (MT 16x16 tiles) and B' (WN/16 pairs of 8x16 tiles) from the
//     swizzled stage (conflict-free) and mma.sync m16n8k16 with fp32 accumulation; the
//     tensor cores' sum is added into an fp32 total every CS_STREAM_PROMOTE units;
//   - ends a column block (a "segment" of its units) either by running the epilogue (the
//     CTA had all of the block's K) or by adding its partial sums into an fp32 workspace
//     (red.global.add) and counting its K chunks on the block's counter: the CTA that
//     completes the count reads the sums back, zeroes them and the counter for the next
//     launch, and runs the epilogue.
// Takes: the fast path's conditions with m' <= 32 (see cs_stream_takes); A' K-major loads as
// boxes like B', M-major (with a leading dimension a multiple of 8) as one box of
// {MT*16, KT} per stage, read with ldmatrix.trans.
// Measured on the H100 (bench/stream-h100.md): ahead of the kernel above where K is long
// (8 x 512 x 2^20: 392 us against 432, cuBLAS 384; 1024 x 8 x 2^20 with A' M-major: 752
// against 839, cuBLAS 771), behind it on LLM decode shapes
// (16 x 4096 x 4096: 27-37 us against 21.6; DRAM at 43% of peak under Nsight Compute).

#ifndef CS_STREAM
#define CS_STREAM 0          // 1: the persistent TMA stream kernel (below)
#endif
#ifndef CS_STREAM_WN
#define CS_STREAM_WN 32      // columns of D' per consumer warp (16, 32, 48 or 64)
#endif
#ifndef CS_STREAM_WARPS
#define CS_STREAM_WARPS 4    // consumer warps: a column block is CS_STREAM_WARPS * WN (<= 256) rows of B'^T
#endif
#ifndef CS_STREAM_KT
#define CS_STREAM_KT 256     // K per unit (one stage), a multiple of 64
#endif
#ifndef CS_STREAM_PROMOTE
#define CS_STREAM_PROMOTE 8  // units summed by the tensor cores before an fp32 add into the total
#endif
#ifndef CS_STREAM_MAX_STAGES
#define CS_STREAM_MAX_STAGES 8
#endif

namespace cs_stream {
constexpr int kConsumers = CS_STREAM_WARPS;
constexpr int kKT = CS_STREAM_KT;
constexpr int kBoxK = 64;                              // K per TMA box: 128 bytes, the swizzle's width
constexpr int kBoxes = kKT / kBoxK;
constexpr int kSmemBudget = 225 * 1024;                // dynamic shared memory for the stages
constexpr int kWN = CS_STREAM_WN;
constexpr int kBN = kConsumers * kWN;                  // rows of B'^T per column block
template <int MT> constexpr int a_box_bytes() { return MT * 16 * 128; }
constexpr int kBBoxBytes = kBN * 128;
template <int MT> constexpr int stage_bytes() { return kBoxes * (a_box_bytes<MT>() + kBBoxBytes); }
template <int MT> constexpr int stages()
{
  return kSmemBudget / stage_bytes<MT>() < CS_STREAM_MAX_STAGES ? kSmemBudget / stage_bytes<MT>()
                                                                 : CS_STREAM_MAX_STAGES;
}
template <int MT> constexpr size_t smem_bytes() { return size_t(stages<MT>()) * stage_bytes<MT>() + 1024; }
static_assert(kKT % kBoxK == 0 && kKT >= kBoxK && kKT <= 256,
              "CS_STREAM_KT: a multiple of 64, at most 256 (an M-major A' box spans KT)");
static_assert(CS_STREAM_WN % 16 == 0 && CS_STREAM_WN >= 16 && CS_STREAM_WN <= 64,
              "CS_STREAM_WN: 16, 32, 48 or 64");
static_assert(kConsumers >= 1 && kBN <= 256, "CS_STREAM_WARPS * CS_STREAM_WN <= 256 (a TMA box)");
static_assert(CS_STREAM_PROMOTE >= 1, "CS_STREAM_PROMOTE >= 1");
static_assert(stages<2>() >= 2,
              "CS_STREAM_KT / CS_STREAM_WN: two stages must fit the shared memory");

__device__ __forceinline__ uint32_t smem_addr(const void* p)
{
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count)
{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes)
{
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar)
{
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity)
{
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "CS_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra CS_DONE;\n"
      "bra CS_WAIT;\n"
      "CS_DONE:\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// One TMA box {k0 .. k0+64, row0 .. row0+rows, batch} into `dst`, its bytes counted on `bar`.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int k0, int row0,
                                            int batch, uint64_t* bar, uint64_t policy)
{
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k0), "r"(row0), "r"(batch), "r"(smem_addr(bar)),
      "l"(policy)
      : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr)
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr)
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void red_add_v2(float* p, float a, float b)
{
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}

__device__ __forceinline__ void consumers_sync()
{
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers * 32) : "memory");
}

// Unit u -> (batch, column block, K chunk), K fastest.
struct unit_pos {
  int64_t b;
  int blk, kc;
};
__device__ __forceinline__ unit_pos decode(int64_t u, int nblk, int kch)
{
  int64_t const per_batch = int64_t(nblk) * kch;
  int64_t const r = u % per_batch;
  return unit_pos{u / per_batch, int(r / kch), int(r % kch)};
}
}   // namespace cs_stream

// One CTA per SM (at most): units [units * x / G, units * (x + 1) / G) for x = blockIdx.x.
// AK: A' K-major (boxes of 64 K, like B'); else M-major, one box of {MT*16, KT} per stage
// stored as KT rows of MT*16 elements and read with ldmatrix.trans.
template <int MT, bool AK>
__global__ void __launch_bounds__((CS_STREAM_WARPS + 1) * 32, 1)
cs_stream_kernel(const __grid_constant__ cs_skinny_args args)
{
  using namespace cs_stream;
  constexpr int WN = kWN, BN = kBN, S = stages<MT>();
  constexpr int kStage = stage_bytes<MT>(), kABox = a_box_bytes<MT>(), kBBox = kBBoxBytes;
  extern __shared__ __align__(16) unsigned char cs_smem_raw[];
  __shared__ __align__(8) uint64_t full[S];
  __shared__ __align__(8) uint64_t empty[S];
  __shared__ int last_flag;
  // The 128-byte swizzle repeats every 1024 bytes: stages start on a 1024-byte boundary.
  unsigned char* const cs_smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(cs_smem_raw) + 1023) & ~uintptr_t(1023));

  int const warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int const m = args.m, n = args.n, nblk = args.nblk, kch = args.kch;
  int64_t const units = args.units, G = gridDim.x;
  int64_t const u_beg = units * blockIdx.x / G, u_end = units * (blockIdx.x + 1) / G;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp == kConsumers) {
    // Producer: one elected lane loads one stage per unit, in order.
    if (lane == 0) {
      uint64_t policy_b, policy_a;
      asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy_b));
      asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy_a));
      int s = 0;
      uint32_t phase = 0;
      for (int64_t u = u_beg; u < u_end; ++u) {
        unit_pos const at = decode(u, nblk, kch);
        int const k0 = at.kc * kKT, row0 = at.blk * BN;
        int const ba = args.batch_a != 0 ? int(at.b) : 0, bb = args.batch_b != 0 ? int(at.b) : 0;
        mbar_wait(&empty[s], phase ^ 1u);
        mbar_expect_tx(&full[s], uint32_t(kStage));
        unsigned char* st = cs_smem + s * kStage;
        if constexpr (!AK) tma_load_3d(st, &args.tma_a, 0, k0, ba, &full[s], policy_a);
#pragma unroll
        for (int x = 0; x < kBoxes; ++x) {
          if constexpr (AK)
            tma_load_3d(st + x * kABox, &args.tma_a, k0 + x * kBoxK, 0, ba, &full[s], policy_a);
          tma_load_3d(st + kBoxes * kABox + x * kBBox, &args.tma_b, k0 + x * kBoxK, row0, bb,
                      &full[s], policy_b);
        }
        if (++s == S) {
          s = 0;
          phase ^= 1u;
        }
      }
    }
    return;
  }

  // Consumer warps: columns [warp * WN, warp * WN + WN) of each block.
  int const g = lane / 4, c = lane % 4;
  constexpr int NT = WN / 8;
  float acc[MT][NT][4], cacc[MT][NT][4];
  // f(i, j, q) for every accumulator element of this warp (unrolled: the arrays stay in
  // registers). acc[i][j][q]: row i*16 + g + (q >= 2 ? 8 : 0), column j*8 + 2c + (q & 1).
  auto each = [&](auto&& f) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) f(i, j, q);
  };
  each([&](int i, int j, int q) { acc[i][j][q] = cacc[i][j][q] = 0.0f; });

  // ldmatrix rows, per lane: A' tile rows (lane % 8) + 8 * ((lane / 8) % 2) with K half
  // lane / 16; B' rows (lane % 8) + 8 * (lane / 16) with K half (lane / 8) % 2. In a box,
  // row r sits at r * 128 bytes and its 16-byte chunk j at chunk j ^ (r % 8); every row
  // here is lane % 8 modulo 8.
  int const sw = lane % 8;
  uint32_t const a_row = uint32_t(((lane % 8) + 8 * ((lane / 8) % 2)) * 128);
  uint32_t const b_row = uint32_t((warp * WN + (lane % 8) + 8 * (lane / 16)) * 128);
  int const a_half = lane / 16, b_half = (lane / 8) % 2;
  // M-major A': lane l points at K row ks*16 + (l % 8) + 8 * (l / 16), M offset 8 * ((l / 8) % 2).
  uint32_t const at_off = uint32_t(((lane % 8) + 8 * (lane / 16)) * (MT * 32) + ((lane / 8) % 2) * 16);
  uint32_t const smem0 = smem_addr(cs_smem);

  auto promote = [&]() {
    each([&](int i, int j, int q) {
      acc[i][j][q] += cacc[i][j][q];
      cacc[i][j][q] = 0.0f;
    });
  };

  // The end of a column block's run of units in this CTA: the epilogue, or the partial
  // sums into the workspace and the last arrival's epilogue.
  auto flush = [&](int64_t b, int blk, int chunks) {
    int64_t const col0 = int64_t(blk) * BN + warp * WN + 2 * c;
    if (chunks == kch) {
      each([&](int i, int j, int q) {
        int const row = i * 16 + g + (q >= 2 ? 8 : 0);
        int64_t const col = col0 + j * 8 + (q & 1);
        if (row < m && col < n) cs_write_d(args, b, row, col, acc[i][j][q]);
      });
    } else {
      float* ws = args.ws + b * int64_t(m) * n;
      bool const pairs = (n % 2) == 0;
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            int const row = i * 16 + g + 8 * h;
            int64_t const col = col0 + j * 8;
            if (row >= m || col >= n) continue;
            float* dst = ws + int64_t(row) * n + col;
            if (pairs) {
              red_add_v2(dst, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            } else {
              atomicAdd(dst, acc[i][j][2 * h]);
              if (col + 1 < n) atomicAdd(dst + 1, acc[i][j][2 * h + 1]);
            }
          }
      // Classic fence-then-count: every thread's adds are ordered before its fence, the
      // barrier puts every fence before thread 0's count, and thread 0 fences again so its
      // count is a release of all of them.
      __threadfence();
      consumers_sync();
      if (threadIdx.x == 0) {
        unsigned* counter = args.counters + b * nblk + blk;
        __threadfence();
        unsigned const old = atomicAdd(counter, unsigned(chunks));
        int const last = old + unsigned(chunks) == unsigned(kch);
        if (last) atomicExch(counter, 0u);   // every chunk is in: ready for the next launch
        if (last) __threadfence();   // acquire: the other CTAs' adds before the reads below
        last_flag = last;
      }
      consumers_sync();
      if (last_flag) {
        __threadfence();
        int64_t const c_base = int64_t(blk) * BN;
        for (int idx = threadIdx.x; idx < m * BN; idx += kConsumers * 32) {
          int const row = idx / BN;
          int64_t const col = c_base + idx % BN;
          if (col >= n) continue;
          float* src = ws + int64_t(row) * n + col;
          float const v = __ldcg(src);
          __stcg(src, 0.0f);
          cs_write_d(args, b, row, col, v);
        }
      }
      consumers_sync();   // last_flag is read before the next segment writes it
    }
    each([&](int i, int j, int q) { acc[i][j][q] = 0.0f; });
  };

  int s = 0;
  uint32_t phase = 0;
  int64_t seg_b = -1;
  int seg_blk = -1, seg_chunks = 0, pending = 0;
  for (int64_t u = u_beg; u < u_end; ++u) {
    unit_pos const at = decode(u, nblk, kch);
    if (at.b != seg_b || at.blk != seg_blk) {
      if (seg_chunks > 0) {
        promote();
        pending = 0;
        flush(seg_b, seg_blk, seg_chunks);
      }
      seg_b = at.b;
      seg_blk = at.blk;
      seg_chunks = 0;
    }
    mbar_wait(&full[s], phase);
    uint32_t const st = smem0 + uint32_t(s * kStage);
#pragma unroll
    for (int ks = 0; ks < kKT / 16; ++ks) {
      int const box = ks / 4, chunk = (ks % 4) * 2;
      uint32_t const a_base = AK ? st + uint32_t(box * kABox) + a_row + uint32_t(((chunk + a_half) ^ sw) * 16)
                                 : st + uint32_t(ks * 16 * MT * 32) + at_off;
      uint32_t const b_base =
          st + uint32_t(kBoxes * kABox + box * kBBox) + b_row + uint32_t(((chunk + b_half) ^ sw) * 16);
      uint32_t af[MT][4], bf[NT / 2][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        if constexpr (AK) ldsm_x4(af[i], a_base + uint32_t(i * 16 * 128));
        else ldsm_x4_trans(af[i], a_base + uint32_t(i * 32));
      }
#pragma unroll
      for (int j = 0; j < NT / 2; ++j) ldsm_x4(bf[j], b_base + uint32_t(j * 16 * 128));
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
          cs_mma(cacc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bf[j / 2][(j % 2) * 2],
                 bf[j / 2][(j % 2) * 2 + 1]);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);
    if (++s == S) {
      s = 0;
      phase ^= 1u;
    }
    ++seg_chunks;
    if (++pending == CS_STREAM_PROMOTE) {
      promote();
      pending = 0;
    }
  }
  if (seg_chunks > 0) {
    promote();
    flush(seg_b, seg_blk, seg_chunks);
  }
}

// ---------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------

static inline bool cs_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The kernel's orientation: D' = D^T (A' = B^T, B' = A^T) when n is the smaller side.
static inline bool cs_swapped(const cs_problem& p) { return p.n < p.m; }

// Column blocks of D' (the grid's x): over the long side.
static inline int64_t cs_col_blocks(const cs_problem& p)
{
  int64_t const long_side = cs_swapped(p) ? p.m : p.n;
  return (long_side + CS_BLOCK_N - 1) / CS_BLOCK_N;
}

// fp32 partials of every batch and K slice (cs_gemm_check bounds the product).
static uint64_t cs_partials_only_bytes(const cs_problem& p)
{
  if (CS_SPLIT_K == 1) return 0;
  return uint64_t(CS_SPLIT_K) * uint64_t(p.batch) * uint64_t(p.m) * uint64_t(p.n) * sizeof(float);
}

// Partials, then (CS_FUSED_REDUCE) one arrival counter per (batch, column block) at a
// 256-byte offset.
static uint64_t cs_counters_offset(const cs_problem& p)
{
  return (cs_partials_only_bytes(p) + 255) / 256 * 256;
}

static uint64_t cs_partials_bytes(const cs_problem& p)
{
  if (CS_SPLIT_K == 1) return 0;
#if CS_FUSED_REDUCE
  return cs_counters_offset(p) + uint64_t(p.batch) * uint64_t(cs_col_blocks(p)) * sizeof(unsigned);
#else
  return cs_partials_only_bytes(p);
#endif
}

// CS_OK when the tensor-core path handles `p`.
static int32_t cs_gemm_check(const cs_problem& p, bool check_pointers)
{
  constexpr int64_t kMaxInt = 0x7fffffffLL;

  if (!kFastOk) return CS_ERR_UNSUPPORTED;
  // gemm_bias_act's bias and activation live in the chain: a build without one cannot.
  if (p.family != CS_FAMILY_GEMM &&
      !(p.family == CS_FAMILY_GEMM_BIAS_ACT && !cs_chain::kIdentity))
    return CS_ERR_UNSUPPORTED;
  if (p.dtype_ab != kDtypeAB || p.dtype_cd != kDtypeCD || p.dtype_acc != CS_DTYPE_F32)
    return CS_ERR_UNSUPPORTED;
  // The long operand (streamed) keeps K contiguous: B column-major (m <= n) or A
  // row-major (n < m); the small one is staged from either order. C and D either order.
  if (cs_swapped(p) ? p.layout_a != CS_LAYOUT_ROW : p.layout_b != CS_LAYOUT_COL)
    return CS_ERR_UNSUPPORTED;
  if (p.layout_a != CS_LAYOUT_ROW && p.layout_a != CS_LAYOUT_COL) return CS_ERR_UNSUPPORTED;
  if (p.layout_b != CS_LAYOUT_ROW && p.layout_b != CS_LAYOUT_COL) return CS_ERR_UNSUPPORTED;
  if (p.layout_cd != CS_LAYOUT_ROW && p.layout_cd != CS_LAYOUT_COL) return CS_ERR_UNSUPPORTED;
  if (cs_fallback::chain_check<cs_chain>(p, check_pointers) != CS_OK) return CS_ERR_UNSUPPORTED;

  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.k == 0) return CS_ERR_UNSUPPORTED;                   // the fallback does beta*C
  // The small side m' <= 64; the long side n' (grid x) and k (k0 + kc) fit an int.
  int64_t const small_side = p.m < p.n ? p.m : p.n, long_side = p.m < p.n ? p.n : p.m;
  if (small_side > kMaxSmall || long_side > kMaxInt || p.k > 0x7fff0000LL)
    return CS_ERR_UNSUPPORTED;
  if (p.batch > 65535) return CS_ERR_UNSUPPORTED;            // grid z
  if (p.k % (8LL * CS_SPLIT_K) != 0) return CS_ERR_UNSUPPORTED;
  // The long operand's rows of K in whole 16-byte vectors; the small one K-major the same
  // way, or M-major with ld >= its M extent (staged by vectors when ld allows).
  bool const a_kmajor = p.layout_a == CS_LAYOUT_ROW, b_kmajor = p.layout_b == CS_LAYOUT_COL;
  if (a_kmajor ? (p.lda < p.k || p.lda % 8 != 0) : p.lda < p.m) return CS_ERR_UNSUPPORTED;
  if (b_kmajor ? (p.ldb < p.k || p.ldb % 8 != 0) : p.ldb < p.n) return CS_ERR_UNSUPPORTED;
  // C and D: element accesses, any leading dimension >= their contiguous extent.
  bool const has_c = (p.beta != 0.0f);
  int64_t const cd_inner = (p.layout_cd == CS_LAYOUT_ROW) ? p.n : p.m;
  if (p.ldd < cd_inner) return CS_ERR_UNSUPPORTED;
  if (has_c && p.ldc < cd_inner) return CS_ERR_UNSUPPORTED;
  if (p.batch > 1) {
    // Every batch's A and B rows stay 16-byte aligned (0: shared); each batch has its own D.
    if (p.batch_stride_a < 0 || p.batch_stride_a % 8 != 0) return CS_ERR_UNSUPPORTED;
    if (p.batch_stride_b < 0 || p.batch_stride_b % 8 != 0) return CS_ERR_UNSUPPORTED;
    if (p.batch_stride_d <= 0) return CS_ERR_UNSUPPORTED;
    if (has_c && p.batch_stride_c < 0) return CS_ERR_UNSUPPORTED;
  }
  // The split-K workspace, at most kMaxWorkspace (m * n * batch < 2^53: no overflow).
  if (CS_SPLIT_K > 1 && uint64_t(p.m) * uint64_t(p.n) * uint64_t(p.batch) >
                            kMaxWorkspace / (sizeof(float) * CS_SPLIT_K))
    return CS_ERR_UNSUPPORTED;
  if (cs_partials_bytes(p) > kMaxWorkspace) return CS_ERR_UNSUPPORTED;
  if (check_pointers) {
    if (p.a == nullptr || p.b == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    // The streamed operand by 16-byte vectors (the M-major small one checks its own).
    if ((a_kmajor && !cs_aligned16(p.a)) || (b_kmajor && !cs_aligned16(p.b))) return CS_ERR_UNSUPPORTED;
    if (reinterpret_cast<uintptr_t>(p.a) % sizeof(ElementAB) != 0 ||
        reinterpret_cast<uintptr_t>(p.b) % sizeof(ElementAB) != 0)
      return CS_ERR_UNSUPPORTED;
    if (reinterpret_cast<uintptr_t>(p.d) % sizeof(ElementCD) != 0) return CS_ERR_UNSUPPORTED;
    if (has_c && (p.c == nullptr || reinterpret_cast<uintptr_t>(p.c) % sizeof(ElementCD) != 0))
      return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

// The kernel's arguments for `p` (all but the K chunk): A' (m' x k) and B'^T (n' x k), both
// rows of K, swapped when n is the smaller side.
static cs_skinny_args cs_kernel_args(const cs_problem& p)
{
  bool const swapped = cs_swapped(p);
  cs_skinny_args args{};
  args.p = p;
  args.swapped = swapped;
  args.a = static_cast<const ElementAB*>(swapped ? p.b : p.a);
  args.b = static_cast<const ElementAB*>(swapped ? p.a : p.b);
  args.lda = swapped ? p.ldb : p.lda;
  // A' = A is K-major when A is row-major; A' = B^T when B is column-major.
  args.a_kmajor = swapped ? p.layout_b == CS_LAYOUT_COL : p.layout_a == CS_LAYOUT_ROW;
  args.ldb = swapped ? p.lda : p.ldb;
  args.batch_a = p.batch > 1 ? (swapped ? p.batch_stride_b : p.batch_stride_a) : 0;
  args.batch_b = p.batch > 1 ? (swapped ? p.batch_stride_a : p.batch_stride_b) : 0;
  args.m = int(swapped ? p.n : p.m);
  args.n = int(swapped ? p.m : p.n);
  args.k = int(p.k);
  args.alpha = p.alpha * p.scale_a * p.scale_b;
  args.partials = CS_SPLIT_K > 1 ? static_cast<float*>(p.workspace) : nullptr;
  args.counters = (CS_SPLIT_K > 1 && CS_FUSED_REDUCE)
                      ? reinterpret_cast<unsigned*>(static_cast<char*>(p.workspace) +
                                                    cs_counters_offset(p))
                      : nullptr;
  return args;
}

// The stream path (CS_STREAM=1) takes what the fast path takes with m' <= 32 (A' in either
// order; the streamed B'^T is K-major on the fast path).
static inline bool cs_stream_takes(const cs_problem& p)
{
  if (!CS_STREAM) return false;
  // An M-major A' loads as one TMA box per stage: its rows (one per K) 16-byte aligned.
  bool const a_kmajor = cs_swapped(p) ? p.layout_b == CS_LAYOUT_COL : p.layout_a == CS_LAYOUT_ROW;
  if (!a_kmajor && (cs_swapped(p) ? p.ldb : p.lda) % 8 != 0) return false;
  // m' <= 32 (one or two 16-row tiles). With three or four, the H100 showed wrong sums in
  // a few column blocks on one 62 x 14329 x 4096 case (2 of 4 seeds, both runs, different
  // blocks each time: a race not found yet), so those run the register-streaming kernel.
  if ((p.m < p.n ? p.m : p.n) > 32) return false;
  // The fp32 sums of every batch's D' within the workspace bound.
  return uint64_t(p.m) * uint64_t(p.n) * uint64_t(p.batch) <= kMaxWorkspace / 2 / sizeof(float);
}
static_assert(!CS_STREAM || CS_SPLIT_K == 1, "CS_STREAM builds take CS_SPLIT_K=1 (the old kernel's path for the rest)");

// Stream workspace: the fp32 sums [batch][m'][n'], then one counter per (batch, column
// block) at a 256-byte offset. Both are zero between launches.
static uint64_t cs_stream_counters_offset(const cs_problem& p)
{
  return (uint64_t(p.batch) * uint64_t(p.m) * uint64_t(p.n) * sizeof(float) + 255) / 256 * 256;
}

static uint64_t cs_stream_bytes(const cs_problem& p)
{
  int64_t const long_side = cs_swapped(p) ? p.m : p.n;
  int64_t const nblk = (long_side + cs_stream::kBN - 1) / cs_stream::kBN;
  return cs_stream_counters_offset(p) + uint64_t(p.batch) * uint64_t(nblk) * sizeof(unsigned);
}

// cuTensorMapEncodeTiled from the driver the runtime uses (no link to libcuda).
static PFN_cuTensorMapEncodeTiled_v12000 cs_tensor_map_encoder()
{
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (fn == nullptr) {
    void* pfn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pfn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pfn);
  }
  return fn;
}

// A map of 16-bit elements {inner, outer, batch}: `inner` contiguous, outer rows `ld`
// apart, batches `bstride` apart (0: one matrix for every batch), boxes of {box_inner,
// box_outer, 1}; what lies outside reads as zeros. False when the driver or the layout
// (16-byte aligned base and rows) cannot.
static bool cs_encode_3d(CUtensorMap* map, const void* base, int64_t inner, int64_t outer, int64_t ld,
                         int64_t batch, int64_t bstride, int box_inner, int box_outer,
                         CUtensorMapSwizzle swizzle)
{
  PFN_cuTensorMapEncodeTiled_v12000 const enc = cs_tensor_map_encoder();
  if (enc == nullptr || (reinterpret_cast<uintptr_t>(base) & 15u) != 0 || ld % 8 != 0) return false;
  int64_t const nb = bstride != 0 ? batch : 1;
  uint64_t const row_bytes = uint64_t(ld) * 2;
  uint64_t const whole = row_bytes * uint64_t(outer);
  cuuint64_t dims[3] = {cuuint64_t(inner), cuuint64_t(outer), cuuint64_t(nb)};
  cuuint64_t strides[2] = {cuuint64_t(row_bytes),
                           cuuint64_t(bstride != 0 ? uint64_t(bstride) * 2
                                                   : (whole < (uint64_t(1) << 40) ? whole : row_bytes))};
  cuuint32_t box[3] = {cuuint32_t(box_inner), cuuint32_t(box_outer), 1u};
  cuuint32_t elem[3] = {1u, 1u, 1u};
  CUresult const r = enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void*>(base), dims, strides,
                         box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

// Rows of K (A' K-major, B'^T): boxes of {64 K, box_rows} with the 128-byte swizzle.
static bool cs_encode_rows(CUtensorMap* map, const void* base, int64_t k, int64_t rows, int64_t ld,
                           int64_t batch, int64_t bstride, int box_rows)
{
  return cs_encode_3d(map, base, k, rows, ld, batch, bstride, 64, box_rows, CU_TENSOR_MAP_SWIZZLE_128B);
}

// A' stored M-major (K rows of m'): one box of {box_m, KT} per stage, no swizzle.
static bool cs_encode_mmajor(CUtensorMap* map, const void* base, int64_t m, int64_t k, int64_t ld,
                             int64_t batch, int64_t bstride, int box_m)
{
  return cs_encode_3d(map, base, m, k, ld, batch, bstride, box_m, cs_stream::kKT, CU_TENSOR_MAP_SWIZZLE_NONE);
}

template <int MT, bool Batched>
static int32_t cs_launch_mt(const cs_problem& p, cs_skinny_args args, cudaStream_t stream);

template <int MT>
static int32_t cs_stream_launch(const cs_problem& p, cs_skinny_args args, cudaStream_t stream)
{
  constexpr int BN = cs_stream::kBN;
  args.nblk = (args.n + BN - 1) / BN;
  args.kch = (args.k + cs_stream::kKT - 1) / cs_stream::kKT;
  args.units = int64_t(p.batch) * args.nblk * args.kch;
  args.ws = static_cast<float*>(p.workspace);
  args.counters = reinterpret_cast<unsigned*>(static_cast<char*>(p.workspace) +
                                              cs_stream_counters_offset(p));
  bool const a_ok =
      args.a_kmajor
          ? cs_encode_rows(&args.tma_a, args.a, args.k, args.m, args.lda, p.batch, args.batch_a, MT * 16)
          : cs_encode_mmajor(&args.tma_a, args.a, args.m, args.k, args.lda, p.batch, args.batch_a, MT * 16);
  if (!a_ok || !cs_encode_rows(&args.tma_b, args.b, args.k, args.n, args.ldb, p.batch, args.batch_b, BN)) {
    // No tensor maps from this driver (or an M-major A' not 16-byte aligned): the
    // register-streaming kernel (CS_SPLIT_K = 1, no workspace) computes the same.
    return p.batch == 1 ? cs_launch_mt<MT, false>(p, args, stream) : cs_launch_mt<MT, true>(p, args, stream);
  }
  int64_t const sms = p.sm_count > 0 ? p.sm_count : 132;
  int64_t const grid = args.units < sms ? args.units : sms;
  size_t const smem = cs_stream::smem_bytes<MT>();
  auto kernel = args.a_kmajor ? cs_stream_kernel<MT, true> : cs_stream_kernel<MT, false>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return int32_t(e);
  kernel<<<unsigned(grid), (CS_STREAM_WARPS + 1) * 32, smem, stream>>>(args);
  return int32_t(cudaGetLastError());
}

// Launches the kernel (and the separate reduce) for `p`, with `args` = cs_kernel_args(p).
template <int MT, bool Batched>
static int32_t cs_launch_mt(const cs_problem& p, cs_skinny_args args, cudaStream_t stream)
{
  // K chunk: a multiple of 64 whose A' tile fits CS_SMEM_A; chunks of equal size.
  int const kslice = args.k / CS_SPLIT_K;
  int kc_max = (CS_SMEM_A / (MT * 16 * int(sizeof(ElementAB))) - kPadA) / 64 * 64;
  if (kc_max < 64) kc_max = 64;
  int const nchunks = (kslice + kc_max - 1) / kc_max;
  args.kc = ((kslice + nchunks - 1) / nchunks + 63) / 64 * 64;
  size_t smem = size_t(MT * 16) * size_t(args.kc + kPadA) * sizeof(ElementAB);
  if (CS_B_ROWWISE) smem += size_t(kWarps) * 8 * kRowB * sizeof(ElementAB);
  if constexpr (kKG > 1) {   // the K-group reduction reuses the A' buffer
    size_t const red = size_t(kKG - 1) * kNT * MT * 4 * 32 * sizeof(float);
    if (red > smem) smem = red;
  }

  auto kernel = cs_skinny_gemm_kernel<MT, Batched>;
  if (smem > 48 * 1024) {
    cudaError_t const e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return int32_t(e);
  }
  dim3 const grid(unsigned(cs_col_blocks(p)), unsigned(CS_SPLIT_K), unsigned(p.batch));
  kernel<<<grid, CS_THREADS, smem, stream>>>(args);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return int32_t(e);

  if (CS_SPLIT_K > 1 && !CS_FUSED_REDUCE) {
    int64_t const total = p.batch * p.m * p.n;
    int64_t blocks = (total + 255) / 256;
    int64_t const cap = int64_t(p.sm_count > 0 ? p.sm_count : 132) * 16;
    if (blocks > cap) blocks = cap;
#if CS_PDL
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(blocks));
    cfg.blockDim = dim3(256);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, cs_splitk_reduce_kernel, args);
    if (e == cudaSuccess) e = cudaGetLastError();
#else
    cs_splitk_reduce_kernel<<<unsigned(blocks), 256, 0, stream>>>(args);
    e = cudaGetLastError();
#endif
  }
  return int32_t(e);
}

// ---------------------------------------------------------------------------------------
// ABI entry points
// ---------------------------------------------------------------------------------------

// CS_OK when the fallback (the GEMV path or the predicated GEMM) takes `p`.
static int32_t cs_fallback_check(const cs_problem& p, bool check_pointers)
{
  if constexpr (!kFallbackOk) {
    return CS_ERR_UNSUPPORTED;
  } else {
    return cs_fallback::check<ElementAB, ElementCD, cs_chain>(p, check_pointers);
  }
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
  if (cs_gemm_check(*problem, /*check_pointers=*/false) != CS_OK) {
    // Other layouts of A / B, both sides > 64, odd k or leading dimensions: the split-K
    // GEMV path when the shape is GEMV-like, else the predicated fallback (0 bytes).
    int32_t const fb = cs_fallback_check(*problem, /*check_pointers=*/false);
    if (fb == CS_OK && cs_fallback::gemv_takes(*problem))
      *bytes = cs_fallback::gemv_workspace_bytes(*problem);
    return fb;
  }
  if (problem->m == 0 || problem->n == 0 || problem->batch == 0) return CS_OK;
  *bytes = cs_stream_takes(*problem) ? cs_stream_bytes(*problem) : cs_partials_bytes(*problem);
  return CS_OK;
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  cs_problem const& p = *problem;
  int32_t const status = cs_gemm_check(p, /*check_pointers=*/true);
  if (status != CS_OK) {
    // Both sides > 64, other layouts of A / B, odd k / leading dimensions / batch strides,
    // misaligned A / B, k == 0: the GEMV path or the predicated fallback (exact fp32 FMA):
    // slower, never wrong.
    if (cs_fallback_check(p, /*check_pointers=*/true) != CS_OK) return status;
    if (cs_fallback::gemv_takes(p))
      return cs_fallback::launch_gemv<ElementAB, ElementCD, cs_chain>(p, stream);
    return cs_fallback::launch<ElementAB, ElementCD, cs_chain>(p, stream);
  }
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;

  bool const stream_path = cs_stream_takes(p);
  uint64_t const need = stream_path ? cs_stream_bytes(p) : cs_partials_bytes(p);
  if (need > 0 && (p.workspace == nullptr || p.workspace_bytes < need)) return CS_ERR_WORKSPACE;
  // 8 bytes: the stream kernel adds pairs of floats.
  if (need > 0 && (reinterpret_cast<uintptr_t>(p.workspace) & 7u) != 0) return CS_ERR_UNSUPPORTED;

  if constexpr (kFastOk) {
    cs_skinny_args const a = cs_kernel_args(p);
    int const tiles = (a.m + 15) / 16;   // 16-row tiles of the small side
    if (stream_path) {   // m' <= 32
      return tiles == 1 ? cs_stream_launch<1>(p, a, stream) : cs_stream_launch<2>(p, a, stream);
    }
    if (p.batch == 1) {
      switch (tiles) {
        case 1:  return cs_launch_mt<1, false>(p, a, stream);
        case 2:  return cs_launch_mt<2, false>(p, a, stream);
        case 3:  return cs_launch_mt<3, false>(p, a, stream);
        default: return cs_launch_mt<4, false>(p, a, stream);
      }
    }
    switch (tiles) {
      case 1:  return cs_launch_mt<1, true>(p, a, stream);
      case 2:  return cs_launch_mt<2, true>(p, a, stream);
      case 3:  return cs_launch_mt<3, true>(p, a, stream);
      default: return cs_launch_mt<4, true>(p, a, stream);
    }
  }
  return CS_ERR_UNSUPPORTED;
}
