// cutesmith template: row normalizations (RMSNorm, LayerNorm, L2 / L1 normalize), f32 / f16
// / bf16 in, the same type or f32 out, row-major or column-major rows, any batch.
//
//   D[b] = chain(normalize(A[b]))   (CS_FAMILY_NORM): each of the m rows of A[b] (n elements)
//     RMS: x * rsqrt(mean(x^2) + eps)     LAYER: (x - mean) * rsqrt(var + eps) (biased var)
//     L2:  x / max(sqrt(sum x^2), eps)    L1:    x / max(sum |x|, eps)       (eps = norm_eps)
//     BATCH: LAYER over row i of every batch item together (batch * n values): BatchNorm's
//            training statistics of an (N, C, ...) input as batch N of m = C rows of the
//            spatial values; row-major, path 3 (its finish kernel merges the items' chunks)
//
// layout_a ROW: element (i, j) of batch b at b * batch_stride_a + i * lda + j; COL: at
// b * batch_stride_a + j * lda + i (a norm over dim 1 of a (B, F, D) tensor: batch B, m = D
// rows of n = F, lda = D). D has A's layout (layout_cd == layout_a), ldd, batch_stride_d. Each
// normalized y (fp32) goes through cs_chain::apply(y, t), t[] the chain's operands at
// (b, i, j): ROW by column, COL by row, MATRIX in D's layout (a LayerNorm's weight and bias:
// `mul` a ROW operand, `add` a ROW operand), CHANNEL (row-major only) by i * ld + j / (n /
// ld) (a GroupNorm's per-channel weight and bias, its rows groups of ld channels, rows
// shorter than 2^31; one 32-bit division a vector); cs_chain::kIdentity skips all operand
// work.
// Operand runs contiguous in memory are read as __ldg vectors when aligned.
//
// Math in fp32, one rounding on store; sums are per-thread partials (pairwise over each
// vector), then shuffles and shared memory. LAYER is two-pass over the values in registers:
// the mean, then the sums of (x - mean)^2 and of (x - mean) = e, which corrects the mean's
// rounding (y = fma(x - mean, s, -(e / n) s)) and M2 (-e^2 / n); never E[x^2] - E[x]^2. Where
// a row is split (path 4's warps, path 3's chunks) each part is two-pass over its own values
// and the parts' (count, mean, M2) merge in double (Chan et al.). Scale: 1 / sqrtf for an
// f32 output, rsqrtf for 16-bit ones.
//
// Row-major rows are split like softmax_rows.cu's (head to A's 16-byte boundary, row by row;
// 16-byte vectors; tail), so any element-aligned A, lda, batch stride gets vector loads;
// stores are vectors where D's address is aligned (checked per vector), else element by
// element: no separate fallback kernel. Vector stores are explicit PTX (as uint4 assignments
// nvcc emitted four 32-bit stores, and path 2 at 1024 threads ran at 59% of copy, not 98%).
//   1. Row-major, n <= CS_WARP_ROW_MAX (<= 256 vectors): 8, 16 or 32 lanes a row (short rows
//      share a warp), the row in registers, shuffles; CS_WARP_VECS vectors a lane at once.
//   2. Row-major, <= CS_THREADS x CS_REG_BYTES / 16 / CS_THREADS vectors (bf16 65536, f32
//      32768): a CTA per row sized to it (bf16 4096: 64 threads), >= 8 vectors a thread
//      loaded up front, shuffles + a shared-memory round per reduction (two for LAYER).
//   3. Longer rows: P chunks a row (CTAs of CS_SPLIT_THREADS, 8 vectors a thread a step);
//      kernel 1 writes each chunk's statistic to the workspace, kernel 2 (a CTA a row)
//      merges a row's P partials into its normalization, kernel 3 re-reads each chunk and
//      writes it (1.5x the ideal traffic). Kernels 1 and 3 walk the chunks chunk-major
//      (chunk q of every row, then q + 1), kernel 3 in reverse: it starts on what kernel 1
//      left in L2, and a row operand as long as the row (a LayerNorm's weight and bias)
//      is read once per chunk, not once per row (row-major, the 16 rows of 4M f32 below
//      re-read 32 MB of weight and bias each: 37% of copy). P >= vectors / step, raised
//      toward two waves on p.sm_count SMs, at most CS_SPLIT_MAX_PARTS.
//   4. Column-major: a CTA owns 32 x R adjacent rows (R = CS_COL_ROWS_PER_THREAD) and its
//      W <= 8 warps split the columns, K = CS_COL_K each, lane l holding rows l*R..l*R+R-1
//      of a column as a vector. n <= 8 K: in registers, one read and one write; longer: 64
//      columns a step, a statistics pass, then a write pass re-reading the tile. The warps'
//      per-row statistics merge in shared memory. Misaligned columns and the last partial
//      row group go element by element in the same kernel.
// 64-bit indices where products can overflow; grids capped at 2^31 - 1 CTAs, grid-stride.
//
// Workspace: path 3 only, batch * m * (P * 24 + 12) bytes (a double (count, mean, M2) a
// chunk, then a row's normalization);
// written before read on the stream, no zeroing. A smaller one than asked for makes P shrink
// (CS_ERR_WORKSPACE only if P < 1). CS_ERR_UNSUPPORTED: other families, unknown cs_norm,
// layout_cd != layout_a, dtype_ab not f32 / f16 / bf16 or dtype_cd neither it nor f32, a
// workload instance's types or layout differing from the problem's, lda / ldd below a row
// (ROW) or a column (COL), pointers not element-aligned, chain operands whose kind or dtype
// differ from the chain's. m, n or batch 0: CS_OK, nothing done.
//
// Validated by the project's fp64 checker on every shape of the norm workloads and GPU test
// fixtures (bench/norm.md, bench/norm-split-h100.md). First measured with a standalone
// harness (H100 80GB HBM3; cudaEvent means, bytes read + written, as % of cudaMemcpyAsync
// device-to-device on the same card; LAYER / RMS):
//   path 2: bf16 16384 x 4096 99 / 96%, 4096 x 8192 98 / 96%, 4096 x 65536 99 / 99%; f32
//           16384 x 4096 99 / 99%, 4096 x 8192 98 / 98%, 4096 x 32768 98 / 98%; bf16 -> f32
//           95 / 89%; a bf16 weight + bias chain 86-88% (CS_THREADS 512; 83-90% with
//           1024), an f32 one 93-97%
//   path 1: bf16 n = 1024 and 512: 99%; n = 256 and 64: 88 / 94%
//   path 3: 16 x 4194304: f32 63 / 66%, bf16 59 / 64% (at 1.5x traffic the ceiling is 67%)
//           With `cutesmith check` (L2 flushed, median of 30) on KernelBench's LayerNorm
//           (16 x 4194304 f32, weight and bias as long as the row): 37% of copy with the
//           chunks walked row by row (478 us: the weight and bias re-read for every row),
//           45% chunk-major (388 us), 54% with the write kernel at 4 vectors a thread and
//           2 CTAs of 512 an SM (325 us; 8 vectors at 1 CTA: 390 us), 56% with CTAs of
//           256 threads, 4 an SM (312 us; 8 vectors: 316; 128 threads, 8 an SM: 308), 60%
//           with 2 vectors a thread and 6 CTAs an SM (293 us), 58% with the statistics
//           kernel bounded to 768 threads an SM so that it does not spill (305 us).
//   path 4: 16 x 65536 x 64: f32 95 / 96%, bf16 77 / 82% (R = 8: 62 / 76%), bf16 with the
//           chain 71 / 77%; bf16 n = 16 72 / 73%, n = 128 64 / 71%, n = 256 (two passes)
//           56 / 59%
//   Tried, not kept: chain operands prefetched into L1 (69% vs 76%), A loads with
//   L1::no_allocate (1-2% slower), 4 rows a warp group at once (LAYER 70% vs 88%).
//
// Parameters (-DNAME=VALUE):
//   CS_THREADS              0       path 2's largest CTA and register bound (1024: 64
//                                   registers, 512: 128); 0: 512 if the chain reads
//                                   operands, else 1024
//   CS_WARP_ROW_MAX         1024    row-major rows up to this many elements: path 1
//   CS_WARP_VECS            2       path 1: vectors a lane holds at once (1, 2, 4, 8)
//   CS_REG_BYTES            131072  most bytes of a row one CTA holds in registers
//   CS_SPLIT_THREADS        256     path 3's CTA size
//   CS_SPLIT_MAX_PARTS      1024    most chunks a row is split into
//   CS_SPLIT_APPLY_VECS     2       path 3's write kernel: vectors a thread a step
//   CS_SPLIT_APPLY_CTAS     6       path 3's write kernel: CTAs an SM keeps (its register
//                                   bound: 6 x 256 threads, 42 registers)
//   CS_COL_ROWS_PER_THREAD  4       path 4: adjacent rows a thread (2, 4, 8; 0: 16 bytes)
//   CS_COL_K                16      path 4: columns a warp holds (2, 4, 8, 16)
//
// Never allocates or synchronizes.

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cutesmith_abi.h"
#include "cutesmith_chain.cuh"   // cs_chain: the workload's chain, or the identity
#include "cutesmith_rows.cuh"    // element types and conversions, launch-planning helpers

// ---------------------------------------------------------------------------------------
// Strategy parameters
// ---------------------------------------------------------------------------------------

#ifndef CS_THREADS
#define CS_THREADS 0
#endif
#ifndef CS_WARP_ROW_MAX
#define CS_WARP_ROW_MAX 1024
#endif
#ifndef CS_WARP_VECS
#define CS_WARP_VECS 2
#endif
#ifndef CS_REG_BYTES
#define CS_REG_BYTES 131072
#endif
#ifndef CS_SPLIT_THREADS
#define CS_SPLIT_THREADS 256
#endif
#ifndef CS_SPLIT_MAX_PARTS
#define CS_SPLIT_MAX_PARTS 1024
#endif
#ifndef CS_COL_ROWS_PER_THREAD
#define CS_COL_ROWS_PER_THREAD 4
#endif
#ifndef CS_COL_K
#define CS_COL_K 16
#endif

static constexpr int kThreads      = CS_THREADS > 0 ? CS_THREADS : cs_chain::kOperands > 0 ? 512 : 1024;
static constexpr int kWarpRowMax   = CS_WARP_ROW_MAX;
static constexpr int kWarpVecs     = CS_WARP_VECS;
static constexpr int kSplitThreads = CS_SPLIT_THREADS;
static constexpr int64_t kMaxParts = CS_SPLIT_MAX_PARTS;
static constexpr int kColK         = CS_COL_K;
static constexpr int kWarpCta      = 256;   // path 1: threads per CTA
static constexpr int kColWarps     = 8;     // path 4: most warps per tile
static constexpr int kSplitVecs    = 8;     // path 3: vectors a thread per step
// Path 3's write kernel: vectors a thread per step, and CTAs an SM keeps, so that one CTA's
// loads overlap another's math and stores (a CTA a chunk, one step each otherwise).
#ifndef CS_SPLIT_APPLY_VECS
#define CS_SPLIT_APPLY_VECS 2
#endif
#ifndef CS_SPLIT_APPLY_CTAS
#define CS_SPLIT_APPLY_CTAS 6
#endif
static constexpr int kSplitApplyVecs = CS_SPLIT_APPLY_VECS;
// A channel operand's index arithmetic needs more registers than 6 CTAs of 256 threads
// leave (the write kernel spilled 320 bytes a thread there, 184 at 5): at most 4 then.
static constexpr bool kChannelOperand =
    cs_chain::kOperands > 0 &&
    (cs_chain_kind<cs_chain>(0) == CS_OPERAND_CHANNEL || cs_chain_kind<cs_chain>(1) == CS_OPERAND_CHANNEL ||
     cs_chain_kind<cs_chain>(2) == CS_OPERAND_CHANNEL || cs_chain_kind<cs_chain>(3) == CS_OPERAND_CHANNEL);
static constexpr int kSplitApplyCtas =
    kChannelOperand && CS_SPLIT_APPLY_CTAS > 4 ? 4 : CS_SPLIT_APPLY_CTAS;
// Path 2: vectors a thread, powers of two in [kRegVecsMin, kRegVecsMax].
static constexpr int kRegVecsRaw = CS_REG_BYTES / (16 * kThreads);
static constexpr int kRegVecsMax = kRegVecsRaw >= 16 ? 16 : kRegVecsRaw >= 8 ? 8
                                 : kRegVecsRaw >= 4 ? 4 : kRegVecsRaw >= 2 ? 2 : 1;
static constexpr int kRegVecsMin = kRegVecsMax < 8 ? kRegVecsMax : 8;

static_assert(kThreads % 32 == 0 && kThreads >= 32 && kThreads <= 1024, "CS_THREADS");
static_assert(kSplitThreads % 32 == 0 && kSplitThreads >= 32 && kSplitThreads <= 1024, "CS_SPLIT_THREADS");
static_assert(kWarpRowMax >= 0 && kMaxParts >= 1, "CS_WARP_ROW_MAX, CS_SPLIT_MAX_PARTS");
static_assert(kWarpVecs == 1 || kWarpVecs == 2 || kWarpVecs == 4 || kWarpVecs == 8, "CS_WARP_VECS");
static_assert(kColK == 2 || kColK == 4 || kColK == 8 || kColK == 16, "CS_COL_K: 2, 4, 8 or 16");
static_assert(CS_COL_ROWS_PER_THREAD == 0 || CS_COL_ROWS_PER_THREAD == 2 ||
              CS_COL_ROWS_PER_THREAD == 4 || CS_COL_ROWS_PER_THREAD == 8, "CS_COL_ROWS_PER_THREAD: 0, 2, 4 or 8");

// What this build compiles: a workload instance its family, types and layout (the rest is
// rejected at run time), a template compiled alone everything.
#if defined(CS_WL_FAMILY)
static constexpr bool kBuildNorm = CS_WL_FAMILY == CS_FAMILY_NORM;
#else
static constexpr bool kBuildNorm = true;
#endif
#if defined(CS_WL_DTYPE_AB) && defined(CS_WL_DTYPE_CD)
static constexpr int kWlIn = CS_WL_DTYPE_AB, kWlOut = CS_WL_DTYPE_CD;
#elif defined(CS_WL_DTYPE_AB)
static constexpr int kWlIn = CS_WL_DTYPE_AB, kWlOut = CS_WL_DTYPE_AB;
#elif defined(CS_WL_DTYPE_CD)
static constexpr int kWlIn = CS_WL_DTYPE_CD, kWlOut = CS_WL_DTYPE_CD;
#else
static constexpr int kWlIn = -1, kWlOut = -1;
#endif
#if defined(CS_WL_LAYOUT_A)
static constexpr int kWlLayoutA = CS_WL_LAYOUT_A;
#else
static constexpr int kWlLayoutA = -1;
#endif
#if defined(CS_WL_LAYOUT_CD)
static constexpr int kWlLayoutCd = CS_WL_LAYOUT_CD;
#else
static constexpr int kWlLayoutCd = -1;
#endif

static constexpr bool cs_valid_types(int in, int out)
{
  return (in == CS_DTYPE_F32 || in == CS_DTYPE_F16 || in == CS_DTYPE_BF16) && (out == in || out == CS_DTYPE_F32);
}
static constexpr bool cs_build_types(int in, int out)
{
  return kBuildNorm && cs_valid_types(in, out) && (kWlIn < 0 || (in == kWlIn && out == kWlOut));
}
static constexpr bool cs_build_layout(int l)
{
  return kBuildNorm && (kWlLayoutA < 0 || kWlLayoutA == l) && (kWlLayoutCd < 0 || kWlLayoutCd == l);
}
static constexpr bool kBuildRow = cs_build_layout(CS_LAYOUT_ROW);
static constexpr bool kBuildCol = cs_build_layout(CS_LAYOUT_COL);

template <int Dtype> struct CsTypeOf { using type = void; };
template <> struct CsTypeOf<CS_DTYPE_F32>  { using type = float; };
template <> struct CsTypeOf<CS_DTYPE_F16>  { using type = __half; };
template <> struct CsTypeOf<CS_DTYPE_BF16> { using type = __nv_bfloat16; };
template <class T>
static constexpr int kDtypeOf = std::is_same_v<T, float> ? CS_DTYPE_F32 : std::is_same_v<T, __half> ? CS_DTYPE_F16 : CS_DTYPE_BF16;

// ---------------------------------------------------------------------------------------
// Elements, and runs of R consecutive elements held as 32-bit words
// ---------------------------------------------------------------------------------------

template <class T> __device__ __forceinline__ float cs_ld1(const T* p)
{
  if constexpr (std::is_same_v<T, float>) return *p;
  else if constexpr (std::is_same_v<T, __half>) return __half2float(*p);
  else return __bfloat162float(*p);
}
template <class T> __device__ __forceinline__ void cs_st1(T* p, float v)
{
  if constexpr (std::is_same_v<T, float>) *p = v;
  else if constexpr (std::is_same_v<T, __half>) *p = __float2half_rn(v);
  else *p = __float2bfloat16_rn(v);
}
__device__ __forceinline__ bool cs_aligned(const void* p, int bytes)
{
  return (reinterpret_cast<uintptr_t>(p) & uintptr_t(bytes - 1)) == 0;
}

template <class T, int R>
struct CsRun {
  static constexpr int kBytes = R * int(sizeof(T)), kWords = kBytes / 4;
  static constexpr int kAlign = kBytes < 16 ? kBytes : 16;
  static_assert(kBytes % 4 == 0 && (kBytes <= 16 || kBytes % 16 == 0), "run size");
  uint32_t w[kWords];

  __device__ __forceinline__ void zero()
  {
#pragma unroll
    for (int q = 0; q < kWords; ++q) w[q] = 0u;
  }
  // Vector load, p aligned to kAlign. NC: the read-only path (chain operands).
  template <bool NC = false>
  __device__ __forceinline__ void load_vec(const T* p)
  {
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int q = 0; q < kBytes / 16; ++q) {
        const uint4* a = reinterpret_cast<const uint4*>(p) + q;
        uint4 const v = NC ? __ldg(a) : *a;
        w[4 * q] = v.x; w[4 * q + 1] = v.y; w[4 * q + 2] = v.z; w[4 * q + 3] = v.w;
      }
    } else if constexpr (kBytes == 8) {
      const uint2* a = reinterpret_cast<const uint2*>(p);
      uint2 const v = NC ? __ldg(a) : *a;
      w[0] = v.x; w[1] = v.y;
    } else {
      const uint32_t* a = reinterpret_cast<const uint32_t*>(p);
      w[0] = NC ? __ldg(a) : *a;
    }
  }
  // The first cnt elements from p (the rest 0): one vector when whole and aligned.
  template <bool NC = false>
  __device__ __forceinline__ void load(const T* p, int cnt)
  {
    if (cnt >= R && cs_aligned(p, kAlign)) { load_vec<NC>(p); return; }
    zero();
#pragma unroll
    for (int k = 0; k < R; ++k) {
      if (k >= cnt) continue;
      if constexpr (sizeof(T) == 4) {
        const uint32_t* a = reinterpret_cast<const uint32_t*>(p + k);
        w[k] = NC ? __ldg(a) : *a;
      } else {
        const unsigned short* a = reinterpret_cast<const unsigned short*>(p + k);
        w[k >> 1] |= uint32_t(NC ? __ldg(a) : *a) << (16 * (k & 1));
      }
    }
  }
  // An empty asm that "changes" the words: the next pass converts them again instead of
  // keeping every converted float of the previous pass live (the column kernel spilled).
  __device__ __forceinline__ void launder()
  {
#pragma unroll
    for (int q = 0; q < kWords; ++q) asm volatile("" : "+r"(w[q]));
  }
  __device__ __forceinline__ void unpack(float (&f)[R]) const
  {
#pragma unroll
    for (int k = 0; k < R; ++k) {
      if constexpr (sizeof(T) == 4) {
        f[k] = __uint_as_float(w[k]);
      } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        f[k] = __uint_as_float((k & 1) ? (w[k >> 1] & 0xffff0000u) : (w[k >> 1] << 16));
      } else if ((k & 1) == 0) {   // f16: a pair at a time
        float2 const v = __half22float2(*reinterpret_cast<const __half2*>(&w[k >> 1]));
        f[k] = v.x;
        f[k + 1] = v.y;
      }
    }
  }
  __device__ __forceinline__ void pack(const float (&f)[R])
  {
#pragma unroll
    for (int k = 0; k < R; ++k) {
      if constexpr (sizeof(T) == 4) {
        w[k] = __float_as_uint(f[k]);
      } else if ((k & 1) == 0) {
        if constexpr (std::is_same_v<T, __nv_bfloat16>) {
          __nv_bfloat162 const h = __floats2bfloat162_rn(f[k], f[k + 1]);
          w[k >> 1] = *reinterpret_cast<const uint32_t*>(&h);
        } else {
          __half2 const h = __floats2half2_rn(f[k], f[k + 1]);
          w[k >> 1] = *reinterpret_cast<const uint32_t*>(&h);
        }
      }
    }
  }
  // Vector store, p aligned to kAlign, as explicit PTX (see the header).
  __device__ __forceinline__ void store_vec(T* p) const
  {
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int q = 0; q < kBytes / 16; ++q)
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(reinterpret_cast<char*>(p) + 16 * q),
                     "r"(w[4 * q]), "r"(w[4 * q + 1]), "r"(w[4 * q + 2]), "r"(w[4 * q + 3]));
    } else if constexpr (kBytes == 8) {
      asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1]));
    } else {
      asm volatile("st.global.b32 [%0], %1;" ::"l"(p), "r"(w[0]));
    }
  }
};

// The first cnt of R values to p: one vector store when whole and aligned.
template <class T, int R>
__device__ __forceinline__ void cs_store_run(T* p, const float (&f)[R], int cnt)
{
  if (cnt >= R && cs_aligned(p, CsRun<T, R>::kAlign)) {
    CsRun<T, R> s;
    s.pack(f);
    s.store_vec(p);
  } else {
#pragma unroll
    for (int k = 0; k < R; ++k)
      if (k < cnt) cs_st1(p + k, f[k]);
  }
}

// ---------------------------------------------------------------------------------------
// The epilogue chain over a run of R elements: along a row (ALONG_ROWS false: columns col ..
// col + R - 1 of row `row`) or along a column (true: rows row .. row + R - 1 of column col).
// ---------------------------------------------------------------------------------------

// cnt consecutive operand elements from element idx (cs_dtype DT; -1: the operand's own).
template <int DT, int R>
__device__ __forceinline__ void cs_operand_values(const cs_operand& o, int64_t idx, int cnt, float (&t)[R])
{
  if constexpr (DT == CS_DTYPE_F32 || DT == CS_DTYPE_F16 || DT == CS_DTYPE_BF16) {
    using OT = typename CsTypeOf<DT>::type;
    CsRun<OT, R> run;
    run.template load<true>(static_cast<const OT*>(o.ptr) + idx, cnt);
    run.unpack(t);
  } else if constexpr (DT >= 0) {
#pragma unroll
    for (int k = 0; k < R; ++k) t[k] = k < cnt ? cs_load_typed<DT>(o.ptr, idx + k) : 0.0f;
  } else {
    switch (o.dtype) {
      case CS_DTYPE_F32:  cs_operand_values<CS_DTYPE_F32, R>(o, idx, cnt, t); break;
      case CS_DTYPE_F16:  cs_operand_values<CS_DTYPE_F16, R>(o, idx, cnt, t); break;
      case CS_DTYPE_BF16: cs_operand_values<CS_DTYPE_BF16, R>(o, idx, cnt, t); break;
      default:
#pragma unroll
        for (int k = 0; k < R; ++k) t[k] = k < cnt ? cs_load_as_float(o.ptr, o.dtype, idx + k) : 0.0f;
    }
  }
}

template <int I, int R, bool ALONG_ROWS>
__device__ __forceinline__ void cs_operand_run(const cs_problem& p, int64_t b, int64_t row, int64_t col,
                                               int cnt, float (&t)[R])
{
  constexpr int KIND = cs_chain_kind<cs_chain>(I), DT = cs_chain_dtype<cs_chain>(I);
  cs_operand const& o = p.operands[I];
  if constexpr (ALONG_ROWS ? KIND == CS_OPERAND_ROW : KIND == CS_OPERAND_COL) {
    float const v = cs_operand_at<KIND, DT>(o, p.layout_cd, b, row, col);   // one value for the run
#pragma unroll
    for (int k = 0; k < R; ++k) t[k] = v;
  } else if constexpr (KIND == CS_OPERAND_CHANNEL) {
    // Row-major rows only (the rules): one value for a run inside one channel's span, else
    // a value an element.
    // One 32-bit division a run (n < 2^31 for a channel operand: cs_check; a 64-bit one
    // is a subroutine call, and its spills): channel c0 holds [c0 * span, (c0 + 1) * span).
    int64_t const span = int64_t(uint32_t(p.n) / uint32_t(o.ld));
    int64_t const c0 = int64_t(uint32_t(col) / uint32_t(span));
    auto channel = [&](int64_t c) {   // channel c of this row, in the operand's type
      int64_t const idx = b * o.batch_stride + row * o.ld + c;
      if constexpr (DT >= 0) return cs_load_typed<DT>(o.ptr, idx);
      else return cs_load_as_float(o.ptr, o.dtype, idx);
    };
    if (col + R <= (c0 + 1) * span) {
      float const v = channel(c0);
#pragma unroll
      for (int k = 0; k < R; ++k) t[k] = v;
    } else {   // the run crosses into the next channels: step through them
      int64_t c = c0, off = col - c0 * span;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        t[k] = k < cnt ? channel(c) : 0.0f;
        if (++off == span) {
          off = 0;
          ++c;
        }
      }
    }
  } else {   // contiguous along the run
    cs_operand_values<DT, R>(o, cs_operand_index<KIND>(o, p.layout_cd, b, row, col), cnt, t);
  }
}

template <int R, bool ALONG_ROWS>
__device__ __forceinline__ void cs_chain_run(const cs_problem& p, int64_t b, int64_t row, int64_t col,
                                             int cnt, float (&y)[R])
{
  if constexpr (!cs_chain::kIdentity) {
    float t[CS_MAX_OPERANDS][R] = {};
    if constexpr (cs_chain::kOperands > 0) cs_operand_run<0, R, ALONG_ROWS>(p, b, row, col, cnt, t[0]);
    if constexpr (cs_chain::kOperands > 1) cs_operand_run<1, R, ALONG_ROWS>(p, b, row, col, cnt, t[1]);
    if constexpr (cs_chain::kOperands > 2) cs_operand_run<2, R, ALONG_ROWS>(p, b, row, col, cnt, t[2]);
    if constexpr (cs_chain::kOperands > 3) cs_operand_run<3, R, ALONG_ROWS>(p, b, row, col, cnt, t[3]);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      float const tk[CS_MAX_OPERANDS] = {t[0][k], t[1][k], t[2][k], t[3][k]};
      y[k] = cs_chain::apply(y[k], tk);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------------------

// Pairwise sum over a run: MODE 0 x, 1 x^2, 2 |x|, 3 x - c, 4 (x - c)^2.
template <int MODE, class T, int R>
__device__ __forceinline__ float cs_run_sum(const CsRun<T, R>& r, float c = 0.0f)
{
  float v[R];
  r.unpack(v);
#pragma unroll
  for (int k = 0; k < R; ++k) {
    float const x = v[k], d = x - c;
    v[k] = MODE == 0 ? x : MODE == 1 ? x * x : MODE == 2 ? fabsf(x) : MODE == 3 ? d : d * d;
  }
#pragma unroll
  for (int s = R / 2; s >= 1; s /= 2)
#pragma unroll
    for (int k = 0; k < s; ++k) v[k] += v[k + s];
  return v[0];
}
// The non-LAYER norms' sum: of |x| (L1) or of x^2.
template <class T, int R>
__device__ __forceinline__ float cs_norm_sum(const CsRun<T, R>& r, int norm)
{
  return norm == CS_NORM_L1 ? cs_run_sum<2>(r) : cs_run_sum<1>(r);
}

// The statistics a norm keeps: a batch norm's are LAYER's (over the batch's rows).
__device__ __forceinline__ int cs_stat_norm(int norm) { return norm == CS_NORM_BATCH ? CS_NORM_LAYER : norm; }

// A part of a row, merged in double: LAYER (count, mean, M2); the other norms (count, -, sum
// of x^2 or |x|). Each part's own values are reduced in fp32 (two-pass for LAYER).
struct CsStat {
  double c, mu, m2;
};
__device__ __forceinline__ CsStat cs_merge(CsStat a, CsStat b, bool layer)
{
  if (!layer) return CsStat{a.c + b.c, 0.0, a.m2 + b.m2};
  if (b.c == 0.0) return a;
  if (a.c == 0.0) return b;
  double const c = a.c + b.c, d = b.mu - a.mu, wb = b.c / c;   // Chan et al.
  return CsStat{c, a.mu + d * wb, a.m2 + b.m2 + d * d * a.c * wb};
}
__device__ __forceinline__ CsStat cs_single(float x, int norm)
{
  return norm == CS_NORM_LAYER ? CsStat{1.0, x, 0.0} : CsStat{1.0, 0.0, norm == CS_NORM_L1 ? fabsf(x) : x * x};
}
// The statistic of the first `valid` of N runs (the rest are zero).
template <class T, int R, int N>
__device__ __forceinline__ CsStat cs_runs_stat(const CsRun<T, R> (&r)[N], int valid, int norm)
{
  if (valid <= 0) return CsStat{0.0, 0.0, 0.0};
  float const c = float(valid * R);
  float s = 0.0f, q = 0.0f, e = 0.0f;
  if (norm != CS_NORM_LAYER) {
#pragma unroll
    for (int u = 0; u < N; ++u) q += cs_norm_sum(r[u], norm);
    return CsStat{c, 0.0, q};
  }
#pragma unroll
  for (int u = 0; u < N; ++u) s += cs_run_sum<0>(r[u]);
  s /= c;
#pragma unroll
  for (int u = 0; u < N; ++u) {
    if (u < valid) {
      e += cs_run_sum<3>(r[u], s);
      q += cs_run_sum<4>(r[u], s);
    }
  }
  return CsStat{c, double(s) + double(e) / c, double(q) - double(e) * e / c};
}

// Sums over G lanes (butterfly: every lane gets the same bits) and over the CTA (one
// __syncthreads; `red` must not be reused before the next one).
template <int G> __device__ __forceinline__ float cs_group_sum(float v, unsigned mask)
{
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
  return v;
}
template <int G> __device__ __forceinline__ float2 cs_group_sum(float2 v, unsigned mask)
{
  return make_float2(cs_group_sum<G>(v.x, mask), cs_group_sum<G>(v.y, mask));
}
__device__ __forceinline__ float2 cs_block_sum(float2 v, float2* red)
{
  v = cs_group_sum<32>(v, 0xffffffffu);
  int const warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return cs_group_sum<32>(lane < int(blockDim.x >> 5) ? red[lane] : make_float2(0.0f, 0.0f), 0xffffffffu);
}
__device__ __forceinline__ float cs_block_sum(float v, float2* red) { return cs_block_sum(make_float2(v, 0.0f), red).x; }

// The CTA's merged statistic, valid in thread 0. One __syncthreads.
__device__ __forceinline__ CsStat cs_block_stat(CsStat s, bool layer, CsStat* red)
{
  auto down = [&](int o) {
    s = cs_merge(s, CsStat{__shfl_down_sync(0xffffffffu, s.c, o), __shfl_down_sync(0xffffffffu, s.mu, o),
                           __shfl_down_sync(0xffffffffu, s.m2, o)}, layer);
  };
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) down(o);
  int const warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  if (lane == 0) red[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < int(blockDim.x >> 5) ? red[lane] : CsStat{0.0, 0.0, 0.0};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) down(o);
  }
  return s;
}

// A row's normalization, y = fma(x - hi, scale, off): LAYER hi + lo is the mean (lo far
// below hi's rounding) and off = -lo * scale; the other norms hi = off = 0.
struct CsNorm {
  float hi, scale, off;
  __device__ __forceinline__ float operator()(float x) const { return fmaf(x - hi, scale, off); }
};
// From the mean (hi + lo, LAYER) and s: M2 (LAYER), the sum of x^2 (RMS, L2) or of |x| (L1);
// rn = 1 / n. ACC: an f32 output (1 / sqrtf; rsqrtf for 16-bit outputs).
template <bool ACC>
__device__ __forceinline__ CsNorm cs_finish(int norm, float eps, float rn, float hi, float lo, float s)
{
  auto rs = [](float x) { return ACC ? 1.0f / sqrtf(x) : rsqrtf(x); };
  switch (norm) {
    case CS_NORM_LAYER: {
      float const sc = rs(fmaxf(s, 0.0f) * rn + eps);
      return CsNorm{hi, sc, -lo * sc};
    }
    case CS_NORM_RMS: return CsNorm{0.0f, rs(s * rn + eps), 0.0f};
    case CS_NORM_L2:  return CsNorm{0.0f, 1.0f / fmaxf(sqrtf(s), eps), 0.0f};
    default:          return CsNorm{0.0f, 1.0f / fmaxf(s, eps), 0.0f};
  }
}
template <bool ACC>
__device__ __forceinline__ CsNorm cs_finish(int norm, float eps, int64_t n, CsStat st)
{
  float const hi = float(st.mu);
  return cs_finish<ACC>(norm, eps, float(1.0 / double(n)), hi, float(st.mu - double(hi)), float(st.m2));
}

// ---------------------------------------------------------------------------------------
// Row-major rows: geometry (head to A's first 16-byte boundary, nb body vectors, tail; I int
// for rows in registers, int64_t for split rows), position, and the write of one vector
// ---------------------------------------------------------------------------------------

template <class T> struct CsVec { static constexpr int V = 16 / int(sizeof(T)); };

template <class I>
struct CsGeom {
  I nb, tail_at;
  int head, tail;
};
template <class I, class T>
__device__ __forceinline__ CsGeom<I> cs_geom(const T* xr, I n)
{
  unsigned const mis = static_cast<unsigned>(reinterpret_cast<uintptr_t>(xr)) & 15u;
  I head = mis ? I((16u - mis) / sizeof(T)) : 0;
  head = head < n ? head : n;
  CsGeom<I> g;
  g.head = int(head);
  g.nb = (n - head) / CsVec<T>::V;
  g.tail_at = head + g.nb * CsVec<T>::V;
  g.tail = int(n - g.tail_at);
  return g;
}

// Row r of the problem (r < batch * m): its batch, index and pointers.
template <class TA, class TD>
struct CsRowAt {
  int64_t b, i;
  const TA* x;
  TD* y;
  __device__ __forceinline__ CsRowAt(const cs_problem& p, int64_t r)
  {
    b = p.batch == 1 ? 0 : r / p.m;
    i = r - b * p.m;
    x = static_cast<const TA*>(p.a) + b * p.batch_stride_a + i * p.lda;
    y = static_cast<TD*>(p.d) + b * p.batch_stride_d + i * p.ldd;
  }
};

// One body vector (V elements from column col) normalized, through the chain, stored.
template <class TA, class TD>
__device__ __forceinline__ void cs_write_vec(const cs_problem& p, const CsRun<TA, CsVec<TA>::V>& r, CsNorm nm,
                                             TD* yr, int64_t col, int64_t b, int64_t i)
{
  constexpr int V = CsVec<TA>::V;
  float f[V];
  r.unpack(f);
#pragma unroll
  for (int k = 0; k < V; ++k) f[k] = nm(f[k]);
  cs_chain_run<V, false>(p, b, i, col, V, f);
  cs_store_run<TD, V>(yr + col, f, V);
}
template <class TD>
__device__ __forceinline__ void cs_write_one(const cs_problem& p, float x, CsNorm nm, TD* yr, int64_t col,
                                             int64_t b, int64_t i)
{
  cs_st1(yr + col, cs_chain_at<cs_chain>(p, nm(x), b, i, col));
}

// ---------------------------------------------------------------------------------------
// Paths 1 and 2: RPT rows (row0 + q * rstep, those < rows) held by G threads (g = 0 .. G-1),
// VPT body vectors a thread per row, all loaded up front. reduce(v, k) sums a float or a
// float2 over the G threads (k: which of two scratch buffers).
// ---------------------------------------------------------------------------------------

template <class TA, class TD, int VPT, int RPT, class Reduce>
__device__ __forceinline__ void cs_norm_rows(const cs_problem& p, int64_t row0, int64_t rstep, int64_t rows,
                                             int g, int G, Reduce reduce)
{
  constexpr int V = CsVec<TA>::V;
  constexpr bool ACC = std::is_same_v<TD, float>;
  int const n = int(p.n), norm = p.norm;
  float const rn = 1.0f / float(n);
  CsGeom<int> s[RPT];
  CsRun<TA, V> r[RPT][VPT];
  float hx[RPT], tx[RPT];
  CsNorm nm[RPT];
#pragma unroll
  for (int q = 0; q < RPT; ++q) {
    int64_t const row = row0 + q * rstep;
    CsRowAt<TA, TD> const at(p, row < rows ? row : row0);
    s[q] = cs_geom<int>(at.x, row < rows ? n : 0);
#pragma unroll
    for (int u = 0; u < VPT; ++u) {
      int const j = g + u * G;
      if (j < s[q].nb) r[q][u].load_vec(at.x + s[q].head + j * V);
      else r[q][u].zero();
    }
    hx[q] = g < s[q].head ? cs_ld1(at.x + g) : 0.0f;
    tx[q] = g < s[q].tail ? cs_ld1(at.x + s[q].tail_at + g) : 0.0f;
  }

  if (norm == CS_NORM_LAYER) {
    float mean[RPT];
#pragma unroll
    for (int q = 0; q < RPT; ++q) {
      float sum = hx[q] + tx[q];
#pragma unroll
      for (int u = 0; u < VPT; ++u) sum += cs_run_sum<0>(r[q][u]);
      mean[q] = reduce(sum, 0) / float(n);   // a division: as a multiply by rn, ptxas spilled
    }
#pragma unroll
    for (int q = 0; q < RPT; ++q) {
      float const dh = hx[q] - mean[q], dt = tx[q] - mean[q];
      bool const hh = g < s[q].head, ht = g < s[q].tail;
      float2 eq = make_float2((hh ? dh : 0.0f) + (ht ? dt : 0.0f), (hh ? dh * dh : 0.0f) + (ht ? dt * dt : 0.0f));
#pragma unroll
      for (int u = 0; u < VPT; ++u) {
        if (g + u * G < s[q].nb) {
          eq.x += cs_run_sum<3>(r[q][u], mean[q]);
          eq.y += cs_run_sum<4>(r[q][u], mean[q]);
        }
      }
      eq = reduce(eq, 1);
      float const lo = eq.x * rn;   // the mean's correction; M2 = q - e^2 / n
      nm[q] = cs_finish<ACC>(norm, p.norm_eps, rn, mean[q], lo, eq.y - eq.x * lo);
    }
  } else {
#pragma unroll
    for (int q = 0; q < RPT; ++q) {
      float a = norm == CS_NORM_L1 ? fabsf(hx[q]) + fabsf(tx[q]) : hx[q] * hx[q] + tx[q] * tx[q];
#pragma unroll
      for (int u = 0; u < VPT; ++u) a += cs_norm_sum(r[q][u], norm);
      nm[q] = cs_finish<ACC>(norm, p.norm_eps, rn, 0.0f, 0.0f, reduce(a, 0));
    }
  }

#pragma unroll
  for (int q = 0; q < RPT; ++q) {
    int64_t const row = row0 + q * rstep;
    if (row >= rows) continue;
    CsRowAt<TA, TD> const at(p, row);
#pragma unroll
    for (int u = 0; u < VPT; ++u) {
      int const j = g + u * G;
      if (j < s[q].nb) cs_write_vec<TA, TD>(p, r[q][u], nm[q], at.y, s[q].head + j * V, at.b, at.i);
    }
    if (g < s[q].head) cs_write_one(p, hx[q], nm[q], at.y, g, at.b, at.i);
    if (g < s[q].tail) cs_write_one(p, tx[q], nm[q], at.y, s[q].tail_at + g, at.b, at.i);
  }
}

// Path 1: a group of G lanes (8, 16, 32) per row, RPT rows of a group at a time.
template <class TA, class TD, int G, int VPT, int RPT>
__global__ void __launch_bounds__(kWarpCta, RPT > 1 || (VPT >= 8 && cs_chain::kOperands > 0) ? 3 : 4)
cs_norm_warp_kernel(const __grid_constant__ cs_problem p, int64_t rows)
{
  int const lane = int(threadIdx.x & 31), g = lane & (G - 1);
  unsigned const mask = G == 32 ? 0xffffffffu : ((1u << G) - 1u) << (lane & ~(G - 1));
  int64_t const groups = int64_t(blockDim.x / G) * gridDim.x;   // the stride between a group's rows
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G; r < rows; r += groups * RPT)
    cs_norm_rows<TA, TD, VPT, RPT>(p, r, groups, rows, g, G, [mask](auto v, int) { return cs_group_sum<G>(v, mask); });
}

// Path 2: one CTA per row, the row in registers.
template <class TA, class TD, int VPT>
__global__ void __launch_bounds__(kThreads, 1)
cs_norm_regs_kernel(const __grid_constant__ cs_problem p, int64_t rows)
{
  __shared__ float2 red[2][32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    cs_norm_rows<TA, TD, VPT, 1>(p, r, 1, rows, int(threadIdx.x), int(blockDim.x),
                                 [&](auto v, int k) { return cs_block_sum(v, red[k]); });
    __syncthreads();   // red is reused by the next row
  }
}

// ---------------------------------------------------------------------------------------
// Path 3: rows split into `parts` chunks of cv body vectors; chunk q of a row also owns the
// head (q = 0) and the tail (q = parts - 1). Work item w = row * parts + q.
// ---------------------------------------------------------------------------------------

// Work item i of rows x parts in chunk-major order (chunk q of every row, then q + 1): the
// chunk index w = row * parts + q.
__device__ __forceinline__ int64_t cs_chunk_major(int64_t i, int64_t rows, int64_t parts)
{
  return (i % rows) * parts + i / rows;
}

template <class TA>
struct CsChunk {
  const TA* x;
  int64_t b, i, c0, c1;   // body vectors [c0, c1)
  CsGeom<int64_t> s;
  bool head, tail;
  __device__ __forceinline__ CsChunk(const cs_problem& p, int64_t w, int64_t parts, int64_t cv)
  {
    int64_t const row = w / parts, q = w - row * parts;
    CsRowAt<TA, TA> const at(p, row);
    b = at.b;
    i = at.i;
    x = at.x;
    s = cs_geom<int64_t>(x, p.n);
    c0 = q * cv < s.nb ? q * cv : s.nb;
    c1 = c0 + cv < s.nb ? c0 + cv : s.nb;
    head = q == 0;
    tail = q == parts - 1;
  }
};

// 768 threads an SM, up to 85 registers: at 1024 (64 registers) 8 vectors a thread spilled
// 16 bytes (293 us on KernelBench's LayerNorm, but a template must not spill), 4 vectors a
// thread did not (312 us); this form measured 305 us.
template <class TA, int VPT>
__global__ void __launch_bounds__(kSplitThreads, kSplitThreads <= 256 ? 768 / kSplitThreads : 1)
cs_norm_split_stats(const __grid_constant__ cs_problem p, int64_t items, int64_t parts, int64_t cv, CsStat* ws)
{
  constexpr int V = CsVec<TA>::V;
  __shared__ CsStat red[32];
  int const g = int(threadIdx.x), G = int(blockDim.x), norm = cs_stat_norm(p.norm);
  bool const layer = norm == CS_NORM_LAYER;
  for (int64_t i = blockIdx.x; i < items; i += gridDim.x) {
    int64_t const w = cs_chunk_major(i, items / parts, parts);
    CsChunk<TA> const c(p, w, parts, cv);
    CsStat st{0.0, 0.0, 0.0};
    if (c.head && g < c.s.head) st = cs_single(cs_ld1(c.x + g), norm);
    if (c.tail && g < c.s.tail) st = cs_merge(st, cs_single(cs_ld1(c.x + c.s.tail_at + g), norm), layer);
    for (int64_t s0 = c.c0 + g; s0 < c.c1; s0 += int64_t(VPT) * G) {
      CsRun<TA, V> r[VPT];
#pragma unroll
      for (int u = 0; u < VPT; ++u) {
        int64_t const j = s0 + int64_t(u) * G;
        if (j < c.c1) r[u].load_vec(c.x + c.s.head + j * V);
        else r[u].zero();
      }
      int64_t const left = (c.c1 - s0 + G - 1) / G;   // this thread's vectors in the step
      st = cs_merge(st, cs_runs_stat(r, int(left < VPT ? left : VPT), norm), layer);
    }
    st = cs_block_stat(st, layer, red);
    if (g == 0) ws[w] = st;
    __syncthreads();   // red is reused by the next item
  }
}

// Each row's normalization from its `parts` partial statistics (one CTA a row). A batch
// norm's row `row` (of `rows` = m) merges the partials of row `row` of every batch item
// (`batches` of them); otherwise `batches` is 1 and `rows` every row of every item.
template <class TD>
__global__ void __launch_bounds__(256)
cs_norm_split_finish(const __grid_constant__ cs_problem p, int64_t rows, int64_t batches, int64_t parts,
                     const CsStat* __restrict__ ws, CsNorm* __restrict__ fin)
{
  __shared__ CsStat red[32];
  int const norm = cs_stat_norm(p.norm);
  bool const layer = norm == CS_NORM_LAYER;
  int64_t const count = batches * parts;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    CsStat st{0.0, 0.0, 0.0};
    for (int64_t t = threadIdx.x; t < count; t += blockDim.x) {
      int64_t const b = t / parts, q = t - b * parts;
      st = cs_merge(st, ws[(b * rows + row) * parts + q], layer);
    }
    st = cs_block_stat(st, layer, red);
    if (threadIdx.x == 0) fin[row] = cs_finish<std::is_same_v<TD, float>>(norm, p.norm_eps, batches * p.n, st);
    __syncthreads();   // red is reused by the next row
  }
}

template <class TA, class TD, int VPT>
__global__ void __launch_bounds__(kSplitThreads, kSplitApplyCtas)
cs_norm_split_apply(const __grid_constant__ cs_problem p, int64_t items, int64_t parts, int64_t cv,
                    const CsNorm* __restrict__ fin, bool over_batch)
{
  constexpr int V = CsVec<TA>::V;
  int const g = int(threadIdx.x), G = int(blockDim.x);
  // Chunk-major like cs_norm_split_stats, in the reverse order: the chunks it read last
  // (in L2) first, and one chunk of every row in turn, so that a row operand's chunk (a
  // LayerNorm's weight and bias, as long as the row) is read from DRAM once, not per row.
  for (int64_t w0 = blockIdx.x; w0 < items; w0 += gridDim.x) {
    int64_t const w = cs_chunk_major(items - 1 - w0, items / parts, parts);
    CsChunk<TA> const c(p, w, parts, cv);
    CsNorm const nm = fin[over_batch ? c.i : w / parts];   // a batch norm's: one a row of an item
    TD* const yr = static_cast<TD*>(p.d) + c.b * p.batch_stride_d + c.i * p.ldd;
    for (int64_t s0 = c.c0 + g; s0 < c.c1; s0 += int64_t(VPT) * G) {
      CsRun<TA, V> r[VPT];
#pragma unroll
      for (int u = 0; u < VPT; ++u)
        if (s0 + int64_t(u) * G < c.c1) r[u].load_vec(c.x + c.s.head + (s0 + int64_t(u) * G) * V);
#pragma unroll
      for (int u = 0; u < VPT; ++u) {
        int64_t const j = s0 + int64_t(u) * G;
        if (j < c.c1) cs_write_vec<TA, TD>(p, r[u], nm, yr, c.s.head + j * V, c.b, c.i);
      }
    }
    if (c.head && g < c.s.head) cs_write_one(p, cs_ld1(c.x + g), nm, yr, g, c.b, c.i);
    if (c.tail && g < c.s.tail) cs_write_one(p, cs_ld1(c.x + c.s.tail_at + g), nm, yr, c.s.tail_at + g, c.b, c.i);
  }
}

// ---------------------------------------------------------------------------------------
// Path 4: column-major. A tile of 32 x R adjacent rows; warp w of W takes columns
// j0 + w + W * k (k < K) of each step of W * K columns (MULTI: several steps, re-read for the
// write; otherwise one step, written from registers). Per thread and row, a step's values
// are reduced in fp32 (two-pass, corrected mean, for LAYER) and merged in double.
// ---------------------------------------------------------------------------------------

template <class T>
struct CsColRows { static constexpr int value = CS_COL_ROWS_PER_THREAD > 0 ? CS_COL_ROWS_PER_THREAD : 16 / int(sizeof(T)); };
// Dynamic shared memory for W warps and R rows a thread: the warps' per-row (mean, M2) in
// double and the rows' CsNorm.
[[maybe_unused]] static inline int cs_col_smem(int W, int R) { return 32 * R * (16 * W + int(sizeof(CsNorm))); }

template <class TA, class TD, int K, bool MULTI>
__global__ void __launch_bounds__(32 * kColWarps, K >= 16 ? 1 : 2)
cs_norm_col_kernel(const __grid_constant__ cs_problem p, int64_t tiles_per_batch, int64_t tiles)
{
  constexpr int R = CsColRows<TA>::value, TR = 32 * R;
  extern __shared__ double cs_col_smem_d[];   // cs_col_smem(W, R) bytes
  int const W = int(blockDim.x >> 5), w = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  double* const smu = cs_col_smem_d;
  double* const sm2 = smu + W * TR;
  CsNorm* const fin = reinterpret_cast<CsNorm*>(sm2 + W * TR);
  int const norm = p.norm;
  bool const layer = norm == CS_NORM_LAYER;
  int64_t const n = p.n, step = int64_t(W) * K;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int64_t const b = tile / tiles_per_batch;
    int64_t const i0 = (tile - b * tiles_per_batch) * TR + int64_t(lane) * R;
    int64_t const left = p.m - i0;
    int const rv = left >= R ? R : left > 0 ? int(left) : 0;   // this thread's valid rows
    const TA* xb = static_cast<const TA*>(p.a) + b * p.batch_stride_a + i0;
    TD* yb = static_cast<TD*>(p.d) + b * p.batch_stride_d + i0;

    CsRun<TA, R> x[K];
    double cr = 0.0, mu[R], m2[R];   // this thread's running count and per-row statistics
#pragma unroll
    for (int r = 0; r < R; ++r) mu[r] = m2[r] = 0.0;
    for (int64_t j0 = 0; j0 < n; j0 += step) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        int64_t const j = j0 + w + int64_t(W) * k;
        if (j < n && rv > 0) x[k].load(xb + j * p.lda, rv);
        else x[k].zero();
      }
      int64_t const have = (n - j0 - w + W - 1) / W;   // this warp's columns in the step
      int const cnt = have <= 0 ? 0 : have >= K ? K : int(have);
      if (cnt > 0) {
        float s[R], q[R];
#pragma unroll
        for (int r = 0; r < R; ++r) s[r] = q[r] = 0.0f;
#pragma unroll
        for (int k = 0; k < K; ++k) {
          float f[R];
          x[k].unpack(f);
#pragma unroll
          for (int r = 0; r < R; ++r)
            s[r] += layer ? f[r] : norm == CS_NORM_L1 ? fabsf(f[r]) : f[r] * f[r];
        }
        float const c = float(cnt);
        double const cn = cr + c, wb = double(c) / cn, wab = cr * wb, rc = 1.0 / double(c);
        if (layer) {
          float e[R];
#pragma unroll
          for (int k = 0; k < K; ++k) x[k].launder();
          float const rcf = 1.0f / c;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            s[r] *= rcf;
            e[r] = 0.0f;
          }
#pragma unroll
          for (int k = 0; k < K; ++k) {
            float f[R];
            x[k].unpack(f);
#pragma unroll
            for (int r = 0; r < R; ++r) {
              float const dv = f[r] - s[r];
              if (k < cnt) {
                e[r] += dv;
                q[r] += dv * dv;
              }
            }
          }
#pragma unroll
          for (int r = 0; r < R; ++r) {   // corrected step mean, then Chan's merge
            double const de = double(e[r]) * rc, d = double(s[r]) + de - mu[r];
            mu[r] += d * wb;
            m2[r] += double(q[r]) - double(e[r]) * de + d * d * wab;
          }
        } else {
#pragma unroll
          for (int r = 0; r < R; ++r) m2[r] += double(s[r]);
        }
        cr = cn;
      }
      if constexpr (!MULTI) break;
    }
#pragma unroll
    for (int k = 0; k < K; ++k) x[k].launder();

    // Merge the warps' partials of each row (slot r * 32 + lane: conflict-free). Warp v
    // has c_v = ceil((n - v) / W) columns: mean = sum c_v mu_v / n, M2 = sum (M2_v +
    // c_v (mu_v - mean)^2), no division per merge.
#pragma unroll
    for (int r = 0; r < R; ++r) {
      smu[w * TR + r * 32 + lane] = mu[r];
      sm2[w * TR + r * 32 + lane] = m2[r];
    }
    __syncthreads();
    for (int q = int(threadIdx.x); q < TR; q += int(blockDim.x)) {
      CsStat t{double(n), 0.0, 0.0};
      for (int v = 0; v < W; ++v) t.mu += double(n > v ? (n - v + W - 1) / W : 0) * smu[v * TR + q];
      t.mu /= double(n);
      for (int v = 0; v < W; ++v) {
        double const d = smu[v * TR + q] - t.mu;
        t.m2 += sm2[v * TR + q] + (layer ? double(n > v ? (n - v + W - 1) / W : 0) * d * d : 0.0);
      }
      fin[q] = cs_finish<std::is_same_v<TD, float>>(norm, p.norm_eps, n, t);
    }
    __syncthreads();
    CsNorm nm[R];
#pragma unroll
    for (int r = 0; r < R; ++r) nm[r] = fin[r * 32 + lane];

    if (rv > 0) {
      for (int64_t j0 = 0; j0 < n; j0 += step) {
        if constexpr (MULTI) {
#pragma unroll
          for (int k = 0; k < K; ++k) {
            int64_t const j = j0 + w + int64_t(W) * k;
            if (j < n) x[k].load(xb + j * p.lda, rv);
          }
        }
#pragma unroll
        for (int k = 0; k < K; ++k) {
          int64_t const j = j0 + w + int64_t(W) * k;
          if (j < n) {
            float f[R];
            x[k].unpack(f);
#pragma unroll
            for (int r = 0; r < R; ++r) f[r] = nm[r](f[r]);
            cs_chain_run<R, true>(p, b, i0, j, rv, f);
            cs_store_run<TD, R>(yb + j * p.ldd, f, rv);
          }
        }
        if constexpr (!MULTI) break;
      }
    }
    __syncthreads();   // the shared arrays are reused by the next tile
  }
}

// ---------------------------------------------------------------------------------------
// Host: checks, the plan (shared by cutesmith_workspace_bytes and cutesmith_launch), launch
// ---------------------------------------------------------------------------------------

static int32_t cs_norm_check(const cs_problem& p, bool check_pointers)
{
  if (!kBuildNorm || p.family != CS_FAMILY_NORM) return CS_ERR_UNSUPPORTED;
  if (p.norm < CS_NORM_RMS || p.norm > CS_NORM_BATCH) return CS_ERR_UNSUPPORTED;
  if (p.norm == CS_NORM_BATCH && p.layout_a != CS_LAYOUT_ROW) return CS_ERR_UNSUPPORTED;
  if (!cs_valid_types(p.dtype_ab, p.dtype_cd)) return CS_ERR_UNSUPPORTED;
  if (kWlIn >= 0 && (p.dtype_ab != kWlIn || p.dtype_cd != kWlOut)) return CS_ERR_UNSUPPORTED;
  if (p.layout_a != CS_LAYOUT_ROW && p.layout_a != CS_LAYOUT_COL) return CS_ERR_UNSUPPORTED;
  if (p.layout_cd != p.layout_a) return CS_ERR_UNSUPPORTED;
  if (p.layout_a == CS_LAYOUT_ROW ? !kBuildRow : !kBuildCol) return CS_ERR_UNSUPPORTED;
  if (p.m < 0 || p.n < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.m > INT64_MAX / p.batch || p.m > INT64_MAX / p.n) return CS_ERR_UNSUPPORTED;
  bool const row = p.layout_a == CS_LAYOUT_ROW;
  int64_t const inner = row ? p.n : p.m, outer = row ? p.m : p.n;
  if (outer > 1 && (p.lda < inner || p.ldd < inner)) return CS_ERR_UNSUPPORTED;
  if constexpr (cs_chain::kOperands > 0) {
    if (p.num_operands < cs_chain::kOperands) return CS_ERR_UNSUPPORTED;
    for (int q = 0; q < cs_chain::kOperands; ++q) {
      cs_operand const& o = p.operands[q];
      if (o.kind != cs_chain_kind<cs_chain>(q) || !cs_operand_dtype_ok(o.dtype))
        return CS_ERR_UNSUPPORTED;
      if (cs_chain_dtype<cs_chain>(q) >= 0 && o.dtype != cs_chain_dtype<cs_chain>(q)) return CS_ERR_UNSUPPORTED;
      if (o.kind == CS_OPERAND_MATRIX && outer > 1 && o.ld < inner) return CS_ERR_UNSUPPORTED;
      // A channel operand: row-major rows of o.ld channels each, n split evenly.
      if (o.kind == CS_OPERAND_CHANNEL && (!row || o.ld < 1 || p.n > INT32_MAX || p.n % o.ld != 0))
        return CS_ERR_UNSUPPORTED;
      if (check_pointers && o.ptr == nullptr) return CS_ERR_UNSUPPORTED;
    }
  }
  if (check_pointers) {
    if (p.a == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    if (reinterpret_cast<uintptr_t>(p.a) % uintptr_t(cs_dtype_bytes(p.dtype_ab)) != 0 ||
        reinterpret_cast<uintptr_t>(p.d) % uintptr_t(cs_dtype_bytes(p.dtype_cd)) != 0)
      return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

enum CsPath { kPathWarp = 1, kPathRegs = 2, kPathSplit = 3, kPathCol = 4 };

struct CsPlan {
  int path = 0, group = 32, vpt = 1, rpt = 1, threads = 32, k = 8;
  bool multi = false;
  int64_t rows = 0, parts = 1, cv = 0, grid = 1;   // parts: path 3's chunks, path 4's tiles per batch
  uint64_t ws_bytes = 0;
};

static int64_t cs_pow2_at_least(int64_t x)
{
  int64_t q = 1;
  while (q < x) q <<= 1;
  return q;
}

// Path 3's chunking into (at most) `parts` chunks of a row of nb_max vectors.
static void cs_split_parts(CsPlan& pl, int64_t nb_max, int64_t parts)
{
  parts = cs_max64(1, cs_min64(parts, cs_max64(nb_max, 1)));
  pl.cv = cs_max64(1, cs_ceil_div(nb_max, parts));
  pl.parts = cs_max64(1, cs_ceil_div(nb_max, pl.cv));
  // The partials, then each row's finished normalization.
  pl.ws_bytes = uint64_t(pl.rows) * (uint64_t(pl.parts) * sizeof(CsStat) + sizeof(CsNorm));
  pl.grid = cs_min64(pl.rows * pl.parts, 0x7fffffffLL);
}

static int32_t cs_norm_plan(const cs_problem& p, CsPlan& pl)
{
  pl.rows = p.batch * p.m;
  if (p.layout_a == CS_LAYOUT_COL) {
    int64_t const R = p.dtype_ab == CS_DTYPE_F32 ? CsColRows<float>::value : CsColRows<__half>::value;
    int64_t const tpb = cs_ceil_div(p.m, 32 * R);
    if (tpb > INT64_MAX / p.batch) return CS_ERR_UNSUPPORTED;
    pl.path = kPathCol;
    pl.multi = p.n > int64_t(kColWarps) * kColK;
    pl.k = pl.multi ? 8 : kColK;
    pl.threads = 32 * int(pl.multi ? kColWarps : cs_ceil_div(p.n, pl.k));
    pl.parts = tpb;
    pl.grid = cs_min64(tpb * p.batch, 0x7fffffffLL);
    return CS_OK;
  }
  int64_t const nb_max = p.n / (16 / cs_dtype_bytes(p.dtype_ab));   // body vectors of a row, at most
  bool const over_batch = p.norm == CS_NORM_BATCH;   // statistics across the batch: path 3 only
  if (p.n <= kWarpRowMax && nb_max <= 256 && !over_batch) {
    pl.path = kPathWarp;
    pl.group = nb_max <= 8 ? 8 : nb_max <= 16 ? 16 : 32;
    pl.vpt = pl.group < 32 ? 1 : int(cs_pow2_at_least(cs_ceil_div(nb_max, 32)));
    pl.rpt = pl.vpt >= kWarpVecs ? 1 : kWarpVecs / pl.vpt;
    pl.grid = cs_min64(cs_ceil_div(pl.rows, kWarpCta / pl.group * pl.rpt), 0x7fffffffLL);
    return CS_OK;
  }
  // Fewer rows than SMs stay here too: a diffusion GroupNorm's 64 rows of 40960 bf16 took
  // 17.0 us here and 33.0 us split over CTAs (path 3), on an H200.
  if (nb_max <= int64_t(kThreads) * kRegVecsMax && !over_batch) {
    pl.path = kPathRegs;
    pl.vpt = int(cs_max64(kRegVecsMin, cs_pow2_at_least(cs_ceil_div(nb_max, kThreads))));
    pl.threads = int(cs_max64(32, cs_ceil_div(cs_ceil_div(nb_max, pl.vpt), 32) * 32));
    pl.grid = cs_min64(pl.rows, 0x7fffffffLL);
    return CS_OK;
  }
  // Path 3: one step (kSplitThreads x kSplitVecs vectors) a chunk, more chunks (of at least
  // kSplitThreads vectors) while the grid is short of two waves.
  pl.path = kPathSplit;
  if (pl.rows > INT64_MAX / (int64_t(sizeof(CsStat)) * kMaxParts)) return CS_ERR_UNSUPPORTED;
  int64_t parts = cs_ceil_div(nb_max, int64_t(kSplitThreads) * kSplitVecs);
  int64_t const waves2 = 2 * int64_t(cs_sm_count(p)) * cs_max64(1, 2048 / kSplitThreads);
  if (pl.rows * parts < waves2) parts = cs_max64(parts, cs_min64(cs_ceil_div(waves2, pl.rows), nb_max / kSplitThreads));
  cs_split_parts(pl, nb_max, cs_min64(parts, kMaxParts));
  return CS_OK;
}

template <class TA, class TD, int G, int VPT, int RPT>
static void cs_go_warp(const cs_problem& p, const CsPlan& pl, cudaStream_t st)
{
  cs_norm_warp_kernel<TA, TD, G, VPT, RPT><<<unsigned(pl.grid), kWarpCta, 0, st>>>(p, pl.rows);
}
template <class TA, class TD, int VPT = kRegVecsMin>
static void cs_go_regs(const cs_problem& p, const CsPlan& pl, cudaStream_t st)
{
  if (pl.vpt == VPT) cs_norm_regs_kernel<TA, TD, VPT><<<unsigned(pl.grid), unsigned(pl.threads), 0, st>>>(p, pl.rows);
  else if constexpr (VPT * 2 <= kRegVecsMax) cs_go_regs<TA, TD, VPT * 2>(p, pl, st);
}
template <class TA, class TD, int K, bool MULTI>
static void cs_go_col(const cs_problem& p, const CsPlan& pl, cudaStream_t st)
{
  int const smem = cs_col_smem(pl.threads / 32, CsColRows<TA>::value);
  cs_norm_col_kernel<TA, TD, K, MULTI><<<unsigned(pl.grid), unsigned(pl.threads), smem, st>>>(p, pl.parts, pl.parts * p.batch);
}

template <class TA, class TD>
static int32_t cs_norm_run(const cs_problem& p, const CsPlan& pl, cudaStream_t st)
{
  if constexpr (!cs_build_types(kDtypeOf<TA>, kDtypeOf<TD>)) {
    return CS_ERR_UNSUPPORTED;
  } else {
    switch (pl.path) {
      case kPathWarp:
        if constexpr (kBuildRow) {
          constexpr int R1 = kWarpVecs, R2 = kWarpVecs >= 2 ? kWarpVecs / 2 : 1, R4 = kWarpVecs >= 4 ? kWarpVecs / 4 : 1;
          if (pl.group == 8) cs_go_warp<TA, TD, 8, 1, R1>(p, pl, st);
          else if (pl.group == 16) cs_go_warp<TA, TD, 16, 1, R1>(p, pl, st);
          else if (pl.vpt == 1) cs_go_warp<TA, TD, 32, 1, R1>(p, pl, st);
          else if (pl.vpt == 2) cs_go_warp<TA, TD, 32, 2, R2>(p, pl, st);
          else if (pl.vpt == 4) cs_go_warp<TA, TD, 32, 4, R4>(p, pl, st);
          else cs_go_warp<TA, TD, 32, 8, 1>(p, pl, st);
        }
        break;
      case kPathRegs:
        if constexpr (kBuildRow) cs_go_regs<TA, TD>(p, pl, st);
        break;
      case kPathSplit:
        if constexpr (kBuildRow) {
          CsStat* const ws = static_cast<CsStat*>(p.workspace);
          CsNorm* const fin = reinterpret_cast<CsNorm*>(ws + pl.rows * pl.parts);
          int64_t const items = pl.rows * pl.parts;
          // Short chunks (a batch norm's rows of a few thousand values) take small CTAs, so
          // that more chunks are in flight: a CTA's block reduction is latency, not bytes.
          int const stat_threads = int(cs_min64(kSplitThreads, cs_max64(32, cs_ceil_div(cs_ceil_div(pl.cv, kSplitVecs), 32) * 32)));
          cs_norm_split_stats<TA, kSplitVecs><<<unsigned(pl.grid), stat_threads, 0, st>>>(p, items, pl.parts, pl.cv, ws);
          bool const over_batch = p.norm == CS_NORM_BATCH;
          int64_t const fin_rows = over_batch ? p.m : pl.rows;
          cs_norm_split_finish<TD><<<unsigned(cs_min64(fin_rows, 65535)), 256, 0, st>>>(
              p, fin_rows, over_batch ? p.batch : 1, pl.parts, ws, fin);
          cs_norm_split_apply<TA, TD, kSplitApplyVecs><<<unsigned(pl.grid), kSplitThreads, 0, st>>>(p, items, pl.parts, pl.cv, fin,
                                                                                                     over_batch);
        }
        break;
      case kPathCol:
        if constexpr (kBuildCol) {
          if (pl.multi) cs_go_col<TA, TD, 8, true>(p, pl, st);
          else cs_go_col<TA, TD, kColK, false>(p, pl, st);
        }
        break;
      default: return CS_ERR_UNSUPPORTED;
    }
    return int32_t(cudaGetLastError());
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
  int32_t const status = cs_norm_check(*problem, /*check_pointers=*/false);
  if (status != CS_OK || problem->m == 0 || problem->n == 0 || problem->batch == 0) return status;
  CsPlan pl;
  int32_t const rc = cs_norm_plan(*problem, pl);
  if (rc == CS_OK) *bytes = pl.ws_bytes;
  return rc;
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  cs_problem const& p = *problem;
  int32_t rc = cs_norm_check(p, /*check_pointers=*/true);
  if (rc != CS_OK || p.m == 0 || p.n == 0 || p.batch == 0) return rc;
  CsPlan pl;
  rc = cs_norm_plan(p, pl);
  if (rc != CS_OK) return rc;
  if (pl.path == kPathSplit) {
    if (pl.ws_bytes > p.workspace_bytes) {   // a smaller workspace than planned: fewer, longer chunks
      uint64_t const per_row = p.workspace_bytes / uint64_t(pl.rows);
      if (per_row < sizeof(CsNorm) + sizeof(CsStat)) return CS_ERR_WORKSPACE;
      int64_t const fit = int64_t((per_row - sizeof(CsNorm)) / sizeof(CsStat));
      cs_split_parts(pl, p.n / (16 / cs_dtype_bytes(p.dtype_ab)), fit);
      if (pl.ws_bytes > p.workspace_bytes) return CS_ERR_WORKSPACE;
    }
    if (p.workspace == nullptr || reinterpret_cast<uintptr_t>(p.workspace) % alignof(CsStat) != 0)
      return CS_ERR_WORKSPACE;
  }
  bool const f32_out = p.dtype_cd == CS_DTYPE_F32;
  switch (p.dtype_ab) {
    case CS_DTYPE_F32: return cs_norm_run<float, float>(p, pl, stream);
    case CS_DTYPE_F16: return f32_out ? cs_norm_run<__half, float>(p, pl, stream) : cs_norm_run<__half, __half>(p, pl, stream);
    case CS_DTYPE_BF16:
      return f32_out ? cs_norm_run<__nv_bfloat16, float>(p, pl, stream) : cs_norm_run<__nv_bfloat16, __nv_bfloat16>(p, pl, stream);
    default: return CS_ERR_UNSUPPORTED;
  }
}
