// cutesmith fallback GEMM: a predicated shared-memory tiled GEMM for the problems the
// fast paths of a template cannot take: K or a leading dimension not a multiple of the
// TMA alignment, unaligned pointers, odd everything. Templates call it from
// cutesmith_launch instead of returning CS_ERR_UNSUPPORTED, the way a vendor library
// falls back to a slower kernel. It takes every problem of the GEMM families:
//
//   z = alpha * (scale_a * A[b]) (m x k) * (scale_b * B[b]) (k x n) + beta * C[b]
//   D[b] = chain(z)                                       (rounded once to D's type)
//
//   - A row- or column-major, B row- or column-major, C/D row- or column-major, any
//     leading dimension >= the minimum, any batch stride (0: one operand shared);
//   - A/B elements TAB in {float, __half, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2},
//     C/D elements TCD in {float, __half, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2}
//     (an fp8 D stores scale_d times the result, saturated to its largest finite value);
//   - the epilogue chain `Chain` (cutesmith_chain.cuh) at logical coordinates; with the
//     identity chain and family CS_FAMILY_GEMM_BIAS_ACT, the legacy p.bias + p.activation.
//
// fp32 accumulation with exact fp32 FMA (no TF32) in blocked sums (per K tile, per 16
// tiles, then the total), 64x64x32 tiles of 256 threads.
#pragma once

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

#include "cutesmith_abi.h"
#include "cutesmith_chain.cuh"

namespace cs_fallback {

// ---------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr int32_t value = CS_DTYPE_F32; };
template <> struct dtype_of<__half> { static constexpr int32_t value = CS_DTYPE_F16; };
template <> struct dtype_of<__nv_bfloat16> { static constexpr int32_t value = CS_DTYPE_BF16; };
template <> struct dtype_of<__nv_fp8_e4m3> { static constexpr int32_t value = CS_DTYPE_E4M3; };
template <> struct dtype_of<__nv_fp8_e5m2> { static constexpr int32_t value = CS_DTYPE_E5M2; };

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 x) { return float(x); }
__device__ __forceinline__ float to_float(__nv_fp8_e5m2 x) { return float(x); }
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half_rn(x); }
// fp8: round to nearest, saturated to the largest finite value (the constructor's satfinite).
__device__ __forceinline__ void store(__nv_fp8_e4m3* p, float x) { *p = __nv_fp8_e4m3(x); }
__device__ __forceinline__ void store(__nv_fp8_e5m2* p, float x) { *p = __nv_fp8_e5m2(x); }
// What D stores is the result times this: scale_d for an fp8 D, else 1.
template <class T> __device__ __forceinline__ float out_scale(const cs_problem&) { return 1.0f; }
template <> __device__ __forceinline__ float out_scale<__nv_fp8_e4m3>(const cs_problem& p) { return p.scale_d; }
template <> __device__ __forceinline__ float out_scale<__nv_fp8_e5m2>(const cs_problem& p) { return p.scale_d; }

// ---------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------

constexpr int kTileM = 64, kTileN = 64, kTileK = 32, kThreads = 256;

// Element (row, col) of a matrix stored row-major (`row_major`) or column-major.
__device__ __forceinline__ int64_t offset(bool row_major, int64_t row, int64_t col, int64_t ld)
{
  return row_major ? row * ld + col : col * ld + row;
}

// Fills `tile` (rows x kTileK, row-major in shared memory) with rows [r0, r0 + rows) and
// K columns [k0, k0 + kTileK) of a rows_total x k operand: element (r, kk) at
// offset(k_contiguous, r, kk, ld). Threads walk the contiguous dimension so that global
// reads coalesce in either storage order.
template <class T, int Rows>
__device__ __forceinline__ void load_tile(float (&tile)[Rows][kTileK + 1], const T* base,
                                          bool k_contiguous, int64_t ld, int64_t r0,
                                          int64_t rows_total, int64_t k0, int64_t k)
{
#pragma unroll
  for (int i = 0; i < (Rows * kTileK) / kThreads; ++i) {
    int const e = threadIdx.x + i * kThreads;
    int const tr = k_contiguous ? e / kTileK : e % Rows;
    int const tk = k_contiguous ? e % kTileK : e / Rows;
    int64_t const gr = r0 + tr, gk = k0 + tk;
    tile[tr][tk] = (gr < rows_total && gk < k) ? to_float(base[offset(k_contiguous, gr, gk, ld)]) : 0.0f;
  }
}

// K tiles summed into one segment before the segment joins the total.
constexpr int kSegmentTiles = 16;

// dst += src, and src = 0.
__device__ __forceinline__ void add_into(float (&dst)[4][4], float (&src)[4][4])
{
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      dst[i][j] += src[i][j];
      src[i][j] = 0.0f;
    }
}

template <class TAB, class TCD, class Chain>
__global__ void __launch_bounds__(kThreads) gemm_kernel(cs_problem p)
{
  __shared__ float As[kTileM][kTileK + 1];   // +1: no bank conflicts on the column reads
  __shared__ float Bs[kTileN][kTileK + 1];   // B^T: n rows of k
  int const tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  int64_t const row0 = int64_t(blockIdx.y) * kTileM, col0 = int64_t(blockIdx.x) * kTileN;
  int64_t const b = blockIdx.z;
  const TAB* A = static_cast<const TAB*>(p.a) + b * p.batch_stride_a;
  const TAB* B = static_cast<const TAB*>(p.b) + b * p.batch_stride_b;
  // A (m x k) keeps K contiguous when row-major; B^T (n x k) when B is column-major.
  bool const a_k_contiguous = p.layout_a == CS_LAYOUT_ROW;
  bool const b_k_contiguous = p.layout_b == CS_LAYOUT_COL;
  // Blocked summation: each K tile's products are summed alone (`part`), kSegmentTiles
  // tile sums make a segment's (`seg`), and the segments make the total (`acc`). One
  // running fp32 sum over all of K would let its rounding error grow with k (at k = 2^17,
  // 13.7x the RMS error of cuBLAS's fp32 GEMM, measured on the H100); three levels keep it
  // near sqrt(32) + sqrt(16) + sqrt(k / 512) roundings, as a split-K library GEMM does.
  float acc[4][4] = {}, seg[4][4] = {};
  int tiles = 0;
  for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
    load_tile<TAB, kTileM>(As, A, a_k_contiguous, p.lda, row0, p.m, k0, p.k);
    load_tile<TAB, kTileN>(Bs, B, b_k_contiguous, p.ldb, col0, p.n, k0, p.k);
    __syncthreads();
    float part[4][4] = {};
#pragma unroll 8
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[ty + 16 * i][kk];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = Bs[tx + 16 * j][kk];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) part[i][j] = fmaf(a[i], bv[j], part[i][j]);
    }
    add_into(seg, part);
    if (++tiles == kSegmentTiles) {
      add_into(acc, seg);
      tiles = 0;
    }
    __syncthreads();
  }
  add_into(acc, seg);

  bool const cd_row = p.layout_cd == CS_LAYOUT_ROW;
  float const scale = p.alpha * p.scale_a * p.scale_b;
  const TCD* C = static_cast<const TCD*>(p.c) + b * p.batch_stride_c;
  TCD* D = static_cast<TCD*>(p.d) + b * p.batch_stride_d;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int64_t const gm = row0 + ty + 16 * i, gn = col0 + tx + 16 * j;
      if (gm < p.m && gn < p.n) {
        float z = scale * acc[i][j];
        if (p.beta != 0.0f) z += p.beta * to_float(C[offset(cd_row, gm, gn, p.ldc)]);
        float v;
        if constexpr (Chain::kIdentity) {
          v = z;
          if (p.family == CS_FAMILY_GEMM_BIAS_ACT) {
            v += to_float(static_cast<const TCD*>(p.bias)[gn]);
            v = cs_activate(p.activation, v, p.act_alpha, p.act_beta);
          }
        } else {
          v = cs_chain_at<Chain>(p, z, b, gm, gn);
        }
        store(&D[offset(cd_row, gm, gn, p.ldd)], v * out_scale<TCD>(p));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------

// CS_OK when p's tensor operands are the ones `Chain` reads (none for the identity).
template <class Chain>
int32_t chain_check(const cs_problem& p, bool check_pointers)
{
  return cs_chain_operands_check<Chain>(p, check_pointers);
}

// CS_OK when the fallback takes `p` with A/B elements TAB, C/D elements TCD and the
// epilogue `Chain`; the pointers are checked only with `check_pointers` (at launch).
template <class TAB, class TCD, class Chain>
int32_t check(const cs_problem& p, bool check_pointers)
{
  if (p.family != CS_FAMILY_GEMM && p.family != CS_FAMILY_GEMM_BIAS_ACT) return CS_ERR_UNSUPPORTED;
  if (p.dtype_ab != dtype_of<TAB>::value || p.dtype_cd != dtype_of<TCD>::value) return CS_ERR_UNSUPPORTED;
  if (p.dtype_acc != CS_DTYPE_F32) return CS_ERR_UNSUPPORTED;
  auto const layout_ok = [](int32_t l) { return l == CS_LAYOUT_ROW || l == CS_LAYOUT_COL; };
  if (!layout_ok(p.layout_a) || !layout_ok(p.layout_b) || !layout_ok(p.layout_cd)) return CS_ERR_UNSUPPORTED;
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if ((p.m + kTileM - 1) / kTileM > 65535 || (p.n + kTileN - 1) / kTileN > 0x7fffffffLL ||
      p.batch > 65535)
    return CS_ERR_UNSUPPORTED;
  // Minimum leading dimensions: the contiguous extent of each stored operand.
  int64_t const min_lda = p.layout_a == CS_LAYOUT_ROW ? p.k : p.m;
  int64_t const min_ldb = p.layout_b == CS_LAYOUT_ROW ? p.n : p.k;
  int64_t const min_ldcd = p.layout_cd == CS_LAYOUT_ROW ? p.n : p.m;
  if (p.lda < min_lda || p.ldb < min_ldb || p.ldd < min_ldcd) return CS_ERR_UNSUPPORTED;
  if (p.beta != 0.0f && p.ldc < min_ldcd) return CS_ERR_UNSUPPORTED;
  if (p.batch_stride_a < 0 || p.batch_stride_b < 0 || p.batch_stride_c < 0 || p.batch_stride_d < 0)
    return CS_ERR_UNSUPPORTED;
  // Every batch writes its own D (a shared D would be a race between batches).
  if (p.batch > 1 && p.m > 0 && p.n > 0 && p.batch_stride_d == 0) return CS_ERR_UNSUPPORTED;
  if (chain_check<Chain>(p, check_pointers) != CS_OK) return CS_ERR_UNSUPPORTED;
  if (check_pointers && p.m > 0 && p.n > 0 && p.batch > 0) {
    if (p.d == nullptr || (p.k > 0 && (p.a == nullptr || p.b == nullptr))) return CS_ERR_UNSUPPORTED;
    if (p.beta != 0.0f && p.c == nullptr) return CS_ERR_UNSUPPORTED;
    if (Chain::kIdentity && p.family == CS_FAMILY_GEMM_BIAS_ACT && p.bias == nullptr)
      return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

// Enqueues the fallback GEMM (after `check<TAB, TCD, Chain>(p, true)` said CS_OK).
template <class TAB, class TCD, class Chain>
int32_t launch(const cs_problem& p, cudaStream_t stream)
{
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;
  dim3 const grid(unsigned((p.n + kTileN - 1) / kTileN), unsigned((p.m + kTileM - 1) / kTileM),
                  unsigned(p.batch));
  gemm_kernel<TAB, TCD, Chain><<<grid, kThreads, 0, stream>>>(p);
  return int32_t(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------
// The GEMV path: one side of D at most kGemvMaxSmall wide, long K
// ---------------------------------------------------------------------------------------
//
// D is L x s (or s x L) with s = min(m, n) <= 16: memory-bound on the long operand (A when
// n is small, B when m is small), which is read once. The grid is (long-side blocks,
// K slices, batch); each CTA stages a K chunk of the small operand in shared memory and
// accumulates, for its rows of the long operand, the s dot products over its K slice in
// registers (exact fp32 FMA): a warp per kGemvRowsPerWarp rows when the long operand keeps
// K contiguous (lanes stride K, with 16-byte loads for fp32 rows on 16-byte boundaries,
// then a shuffle reduction), else 16-byte vectors of adjacent rows a thread (the rows are
// then contiguous; gemv_mn_kernel, or a thread per row where vectors cannot be read); for one fp32 column with aligned
// K runs (the matrix-vector product), gemv_vector_kernel reads the vector straight from
// global memory instead. Each slice's partial sums go to the workspace;
// a second kernel adds the slices in order (deterministic), applies alpha, beta * C and
// the chain, and stores D.

constexpr int kGemvMaxSmall = 16, kGemvThreads = 256, kGemvChunk = 512;
#ifndef CS_GEMV_VECTOR
#define CS_GEMV_VECTOR 1   // 0: the matrix-vector product through the staged kernel too
#endif
// Rows of the long operand per warp when it keeps K contiguous: each staged value of the
// small operand is read once from shared memory for all of them.
constexpr int kGemvRowsPerWarp = 4;

// The two operands seen as long (L x k) and small (k x s), and the output's orientation.
struct GemvArgs {
  cs_problem p;
  const void* lng;          // long operand
  int64_t l_row, l_k, l_batch;   // element strides: per long row, per k, per batch
  const void* sml;          // small operand
  int64_t s_col, s_k, s_batch;
  int64_t L, S;             // long and small extents
  bool small_is_n;          // D(r, j) with r long (n small), else D(j, r)
  int mn_along;             // gemv_mn_kernel: threads along the long side
  int split;                // K slices
  int64_t kslice;           // K per slice (a multiple of 4)
  bool vec4;                // fp32 long rows on 16-byte boundaries: float4 loads
  float* partials;          // [batch][split][L][S]
};

// Whether the GEMV path takes `p` (after `check` said the fallback does).
inline bool gemv_takes(const cs_problem& p)
{
  int64_t const small = p.m < p.n ? p.m : p.n;
  return small >= 1 && small <= kGemvMaxSmall && p.k >= 4096 && p.batch <= 65535;
}

// Elements of A / B in one 16-byte vector.
inline int gemv_vec_elems(int32_t dtype_ab)
{
  return dtype_ab == CS_DTYPE_F32 ? 4 : (dtype_ab == CS_DTYPE_E4M3 || dtype_ab == CS_DTYPE_E5M2) ? 16 : 8;
}

// The long operand stored with the long side contiguous (A column-major when n is small,
// B row-major when m is small): gemv_mn_kernel's threads along it, a power of two of
// 16-byte vectors (at most a CTA's); the rest of the CTA's threads split its K slice.
inline int gemv_mn_threads_along(int64_t L, int32_t dtype_ab)
{
  int64_t const vectors = (L + gemv_vec_elems(dtype_ab) - 1) / gemv_vec_elems(dtype_ab);
  int t = 1;
  while (t < kGemvThreads && t < vectors) t *= 2;
  return t;
}

// K slices: up to 2048 CTAs over the long side (several per SM: enough loads in flight
// to stream the long operand at full bandwidth), slices of >= 2048 K.
inline int gemv_split(const cs_problem& p)
{
  int64_t const L = p.m < p.n ? p.n : p.m;
  bool const long_k_contig = p.n <= p.m ? p.layout_a == CS_LAYOUT_ROW : p.layout_b == CS_LAYOUT_COL;
  int64_t const rows_per_cta = long_k_contig
                                   ? kGemvThreads / 32 * kGemvRowsPerWarp
                                   : int64_t(gemv_mn_threads_along(L, p.dtype_ab)) * gemv_vec_elems(p.dtype_ab);
  int64_t const ctas = (L + rows_per_cta - 1) / rows_per_cta * (p.batch > 0 ? p.batch : 1);
  int64_t split = 1;
  while (split < 1024 && ctas * split * 2 <= 2048 && p.k / (split * 2) >= 2048) split *= 2;
  return int(split);
}

inline uint64_t gemv_workspace_bytes(const cs_problem& p)
{
  int64_t const L = p.m < p.n ? p.n : p.m, S = p.m < p.n ? p.m : p.n;
  return uint64_t(p.batch) * uint64_t(gemv_split(p)) * uint64_t(L) * uint64_t(S) * 4u;
}

// A GEMV CTA's batch (grid z), K slice [k0, k1) (grid y) and its batch's long and small
// operands.
template <class TAB>
struct GemvSlice {
  int64_t b;
  int slice;
  int64_t k0, k1;
  const TAB* lng;
  const TAB* sml;
  __device__ explicit GemvSlice(const GemvArgs& g)
      : b(blockIdx.z), slice(int(blockIdx.y)), k0(int64_t(blockIdx.y) * g.kslice),
        k1(k0 + g.kslice < g.p.k ? k0 + g.kslice : g.p.k),
        lng(static_cast<const TAB*>(g.lng) + b * g.l_batch),
        sml(static_cast<const TAB*>(g.sml) + b * g.s_batch) {}
};

// Stages k values [kc, kc + n) of the small operand's S columns in shared memory as fp32
// (s[kk][j]), loaded along its contiguous dimension.
template <class TAB, int Cols>
__device__ __forceinline__ void gemv_stage_small(float (*s)[Cols], const TAB* sml, const GemvArgs& g,
                                                 int64_t kc, int n, int S)
{
  bool const small_k_contig = g.s_k == 1;
  for (int e = threadIdx.x; e < n * S; e += kGemvThreads) {
    int const kk = small_k_contig ? e % n : e / S;
    int const j = small_k_contig ? e / n : e % S;
    s[kk][j] = to_float(sml[(kc + kk) * g.s_k + j * g.s_col]);
  }
}

template <class TAB, bool LongKContig>
__global__ void __launch_bounds__(kGemvThreads) gemv_partials_kernel(GemvArgs g)
{
  __shared__ float sS[kGemvChunk][kGemvMaxSmall + 1];   // +1: lanes' rows in distinct banks
  constexpr int R = LongKContig ? kGemvRowsPerWarp : 1;   // long rows per warp / thread
  GemvSlice<TAB> const cta(g);
  int64_t const b = cta.b, k0 = cta.k0, k1 = cta.k1;
  int const slice = cta.slice;
  const TAB *lng = cta.lng, *sml = cta.sml;
  int const lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t const r0 = LongKContig ? (int64_t(blockIdx.x) * (kGemvThreads / 32) + warp) * R
                                 : int64_t(blockIdx.x) * kGemvThreads + threadIdx.x;
  int const S = int(g.S);
  float acc[R][kGemvMaxSmall];
#pragma unroll
  for (int q = 0; q < R; ++q)
#pragma unroll
    for (int j = 0; j < kGemvMaxSmall; ++j) acc[q][j] = 0.0f;
  for (int64_t kc = k0; kc < k1; kc += kGemvChunk) {
    int const n = int(k1 - kc < kGemvChunk ? k1 - kc : kGemvChunk);
    __syncthreads();
    gemv_stage_small(sS, sml, g, kc, n, S);
    __syncthreads();
    if (r0 < g.L) {
      if constexpr (LongKContig) {
        // Lanes stride K over R rows at once (rows past L read row r0 again, unused).
        const TAB* rows[R];
#pragma unroll
        for (int q = 0; q < R; ++q) rows[q] = lng + (r0 + q < g.L ? r0 + q : r0) * g.l_row + kc;
        // fp32 rows on 16-byte boundaries: float4 loads, two per row in flight (the
        // slices and chunks start at multiples of 4); what n leaves past a multiple of 4
        // goes to the scalar loop below.
        int kk = lane;
        if constexpr (std::is_same_v<TAB, float>) {
          if (g.vec4) {
            // a[q]: row q's 4 values from k on, multiplied into every small column.
            auto consume = [&](const float4 (&a)[R], int k) {
#pragma unroll
              for (int c = 0; c < 4; ++c)
#pragma unroll
                for (int j = 0; j < kGemvMaxSmall; ++j)
                  if (j < S) {
                    float const sv = sS[k + c][j];
#pragma unroll
                    for (int q = 0; q < R; ++q) {
                      float const av = c == 0 ? a[q].x : c == 1 ? a[q].y : c == 2 ? a[q].z : a[q].w;
                      acc[q][j] = fmaf(av, sv, acc[q][j]);
                    }
                  }
            };
            int k4 = 4 * lane;
            int const n4 = n & ~3;
            for (; k4 + 128 + 4 <= n4; k4 += 256) {
              float4 a[2][R];
#pragma unroll
              for (int u = 0; u < 2; ++u)
#pragma unroll
                for (int q = 0; q < R; ++q) a[u][q] = *reinterpret_cast<const float4*>(rows[q] + k4 + 128 * u);
              consume(a[0], k4);
              consume(a[1], k4 + 128);
            }
            for (; k4 + 4 <= n4; k4 += 128) {
              float4 a[R];
#pragma unroll
              for (int q = 0; q < R; ++q) a[q] = *reinterpret_cast<const float4*>(rows[q] + k4);
              consume(a, k4);
            }
            kk = n4 + lane;   // the scalar loops take the rest (fewer than 4 elements)
          }
        }
        for (; kk + 32 < n; kk += 64) {
          float a[2][R];
#pragma unroll
          for (int u = 0; u < 2; ++u)
#pragma unroll
            for (int q = 0; q < R; ++q) a[u][q] = to_float(rows[q][kk + 32 * u]);
#pragma unroll
          for (int u = 0; u < 2; ++u)
#pragma unroll
            for (int j = 0; j < kGemvMaxSmall; ++j)
              if (j < S) {
                float const sv = sS[kk + 32 * u][j];
#pragma unroll
                for (int q = 0; q < R; ++q) acc[q][j] = fmaf(a[u][q], sv, acc[q][j]);
              }
        }
        for (; kk < n; kk += 32) {
          float a[R];
#pragma unroll
          for (int q = 0; q < R; ++q) a[q] = to_float(rows[q][kk]);
#pragma unroll
          for (int j = 0; j < kGemvMaxSmall; ++j)
            if (j < S) {
              float const sv = sS[kk][j];
#pragma unroll
              for (int q = 0; q < R; ++q) acc[q][j] = fmaf(a[q], sv, acc[q][j]);
            }
        }
      } else {
        const TAB* row = lng + r0 * g.l_row + kc * g.l_k;
        for (int kk = 0; kk < n; ++kk) {
          float const a = to_float(row[kk * g.l_k]);
#pragma unroll
          for (int j = 0; j < kGemvMaxSmall; ++j)
            if (j < S) acc[0][j] = fmaf(a, sS[kk][j], acc[0][j]);
        }
      }
    }
  }
  if constexpr (LongKContig) {
#pragma unroll
    for (int q = 0; q < R; ++q)
#pragma unroll
      for (int j = 0; j < kGemvMaxSmall; ++j)
        if (j < S)
#pragma unroll
          for (int o = 16; o > 0; o /= 2) acc[q][j] += __shfl_xor_sync(0xffffffffu, acc[q][j], o);
    if (lane != 0) return;
  }
#pragma unroll
  for (int q = 0; q < R; ++q) {
    int64_t const r = r0 + q;
    if (r >= g.L) return;
    float* out = g.partials + ((b * g.split + slice) * g.L + r) * g.S;
#pragma unroll
    for (int j = 0; j < kGemvMaxSmall; ++j)
      if (j < S) out[j] = acc[q][j];
  }
}

// The long operand with the long side contiguous (l_row == 1) and 16-byte aligned K runs:
// each thread reads 16-byte vectors of V adjacent long rows at one k (not kept in L1),
// kGemvUnroll k steps in flight; mn_along threads cover the CTA's rows and the other
// kGemvThreads / mn_along interleave its K slice. The small operand is staged as in
// gemv_partials_kernel (its values are read as shared-memory broadcasts). The K-lanes' sums
// of a row are added through shared memory, one small column at a time, before the slice's
// partials are written (the same partials layout, so the same finish kernel). The scalar
// form of this case read one element a thread and k step: 0.18x cuBLAS on a 1 x 256 x 2^20
// f16 GEMV with B row-major (an H100, 2026-11-27).
#ifndef CS_GEMV_UNROLL
#define CS_GEMV_UNROLL 4   // gemv_mn_kernel: k steps of 16-byte loads in flight a thread
#endif
constexpr int kGemvUnroll = CS_GEMV_UNROLL;

template <class TAB>
__device__ __forceinline__ uint4 gemv_ld_vec(const TAB* p)
{
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}

template <class TAB, int MaxS>
__global__ void __launch_bounds__(kGemvThreads) gemv_mn_kernel(GemvArgs g)
{
  constexpr int V = 16 / int(sizeof(TAB));
  __shared__ float sS[kGemvChunk][MaxS + 1];
  __shared__ float red[kGemvThreads * V];
  int const along = g.mn_along, lanes_k = kGemvThreads / along;
  int const tx = int(threadIdx.x) % along, ty = int(threadIdx.x) / along;
  GemvSlice<TAB> const cta(g);
  int64_t const b = cta.b, k0 = cta.k0, k1 = cta.k1;
  int const slice = cta.slice;
  const TAB *lng = cta.lng, *sml = cta.sml;
  int64_t const r0 = (int64_t(blockIdx.x) * along + tx) * V;
  bool const full = r0 + V <= g.L;
  int const S = int(g.S);
  float acc[V][MaxS];
#pragma unroll
  for (int c = 0; c < V; ++c)
#pragma unroll
    for (int j = 0; j < MaxS; ++j) acc[c][j] = 0.0f;
  // One k step's V values of this thread's rows into acc, the small operand from sS.
  auto consume = [&](const TAB (&e)[V], int kk) {
#pragma unroll
    for (int j = 0; j < MaxS; ++j)
      if (j < S) {
        float const sv = sS[kk][j];
#pragma unroll
        for (int c = 0; c < V; ++c) acc[c][j] = fmaf(to_float(e[c]), sv, acc[c][j]);
      }
  };
  for (int64_t kc = k0; kc < k1; kc += kGemvChunk) {
    int const n = int(k1 - kc < kGemvChunk ? k1 - kc : kGemvChunk);
    __syncthreads();
    gemv_stage_small(sS, sml, g, kc, n, S);
    __syncthreads();
    if (r0 >= g.L) continue;
    const TAB* base = lng + r0 + kc * g.l_k;
    int kk = ty;
    if (full) {
      for (; kk + (kGemvUnroll - 1) * lanes_k < n; kk += kGemvUnroll * lanes_k) {
        alignas(16) TAB e[kGemvUnroll][V];
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u)
          *reinterpret_cast<uint4*>(e[u]) = gemv_ld_vec(base + int64_t(kk + u * lanes_k) * g.l_k);
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) consume(e[u], kk + u * lanes_k);
      }
    }
    for (; kk < n; kk += lanes_k) {
      alignas(16) TAB e[V];
      if (full) {
        *reinterpret_cast<uint4*>(e) = gemv_ld_vec(base + int64_t(kk) * g.l_k);
      } else {
#pragma unroll
        for (int c = 0; c < V; ++c) e[c] = r0 + c < g.L ? base[int64_t(kk) * g.l_k + c] : base[int64_t(kk) * g.l_k];
      }
      consume(e, kk);
    }
  }
  // Rows past L (a ragged last vector) hold sums of a duplicated element: never written.
#pragma unroll
  for (int j = 0; j < MaxS; ++j) {
    if (j >= S) break;
    __syncthreads();
#pragma unroll
    for (int c = 0; c < V; ++c) red[threadIdx.x * V + c] = acc[c][j];
    __syncthreads();
    for (int e = threadIdx.x; e < along * V; e += kGemvThreads) {
      float sum = 0.0f;
      for (int t = 0; t < lanes_k; ++t) sum += red[t * along * V + e];
      int64_t const r = int64_t(blockIdx.x) * along * V + e;
      if (r < g.L) g.partials[((b * g.split + slice) * g.L + r) * g.S + j] = sum;
    }
  }
}

// At most 128 accumulators a thread (V rows times the small columns; launch_gemv takes
// this kernel only then): the larger instances are never built.
template <class TAB, int MaxS>
void gemv_mn_launch(const GemvArgs& g, dim3 grid, cudaStream_t stream)
{
  if constexpr (MaxS * (16 / int(sizeof(TAB))) <= 128) gemv_mn_kernel<TAB, MaxS><<<grid, kGemvThreads, 0, stream>>>(g);
}

// The matrix-vector case (one small column, fp32, both operands' K runs on 16-byte
// boundaries): no shared-memory stage and no barrier. Each lane reads float4s of its
// warp's R long rows (not kept in L1, 256-byte L2 fetches) and the matching float4 of the
// vector (from L2 after the first CTA's touch), two steps in flight; the same rows, slices
// and partials as gemv_partials_kernel.
__device__ __forceinline__ float4 gemv_ld_stream(const float* p)
{
  float4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
  return r;
}

__global__ void __launch_bounds__(kGemvThreads) gemv_vector_kernel(GemvArgs g)
{
  constexpr int R = kGemvRowsPerWarp;
  GemvSlice<float> const cta(g);
  int64_t const b = cta.b, k0 = cta.k0, k1 = cta.k1;
  int const slice = cta.slice;
  const float *lng = cta.lng, *x = cta.sml;
  int const lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t const r0 = (int64_t(blockIdx.x) * (kGemvThreads / 32) + warp) * R;
  if (r0 >= g.L) return;
  const float* rows[R];
#pragma unroll
  for (int q = 0; q < R; ++q) rows[q] = lng + (r0 + q < g.L ? r0 + q : r0) * g.l_row;
  // Eight independent sums a row and lane (the float4's four positions, two steps): a
  // lane's share of a long slice (thousands of products at K = 2^20) would otherwise be
  // one sequential sum, whose rounding error grows with its length (4.2x cuBLAS fp32's
  // RMS error at 2048 x 2^20 in one chain; the staged kernel has the same defect).
  float4 acc4[2][R];
#pragma unroll
  for (int u = 0; u < 2; ++u)
#pragma unroll
    for (int q = 0; q < R; ++q) acc4[u][q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  auto fma4 = [](float4 a, float4 v, float4 s) {
    return make_float4(fmaf(a.x, v.x, s.x), fmaf(a.y, v.y, s.y), fmaf(a.z, v.z, s.z), fmaf(a.w, v.w, s.w));
  };
  int64_t const k4end = k0 + (k1 - k0) / 4 * 4;
  int64_t k = k0 + 4 * lane;
  for (; k + 128 + 4 <= k4end; k += 256) {
    float4 a[2][R], v[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      v[u] = __ldg(reinterpret_cast<const float4*>(x + k + 128 * u));
#pragma unroll
      for (int q = 0; q < R; ++q) a[u][q] = gemv_ld_stream(rows[q] + k + 128 * u);
    }
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int q = 0; q < R; ++q) acc4[u][q] = fma4(a[u][q], v[u], acc4[u][q]);
  }
  for (; k + 4 <= k4end; k += 128) {
    float4 const v = __ldg(reinterpret_cast<const float4*>(x + k));
#pragma unroll
    for (int q = 0; q < R; ++q) acc4[0][q] = fma4(gemv_ld_stream(rows[q] + k), v, acc4[0][q]);
  }
  for (int64_t kk = k4end + lane; kk < k1; kk += 32) {   // fewer than 4 left
#pragma unroll
    for (int q = 0; q < R; ++q) acc4[1][q].x = fmaf(rows[q][kk], x[kk], acc4[1][q].x);
  }
  float acc[R];
#pragma unroll
  for (int q = 0; q < R; ++q) {
    float4 const s0 = acc4[0][q], s1 = acc4[1][q];
    acc[q] = ((s0.x + s0.y) + (s0.z + s0.w)) + ((s1.x + s1.y) + (s1.z + s1.w));
  }
#pragma unroll
  for (int q = 0; q < R; ++q)
#pragma unroll
    for (int o = 16; o > 0; o /= 2) acc[q] += __shfl_xor_sync(0xffffffffu, acc[q], o);
  if (lane != 0) return;
#pragma unroll
  for (int q = 0; q < R; ++q) {
    if (r0 + q >= g.L) return;
    g.partials[(b * g.split + slice) * g.L + r0 + q] = acc[q];
  }
}

template <class TCD, class Chain>
__global__ void __launch_bounds__(kGemvThreads) gemv_finish_kernel(GemvArgs g)
{
  cs_problem const& p = g.p;
  int64_t const total = p.batch * g.L * g.S;
  bool const cd_row = p.layout_cd == CS_LAYOUT_ROW;
  float const scale = p.alpha * p.scale_a * p.scale_b;
  for (int64_t i = int64_t(blockIdx.x) * kGemvThreads + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * kGemvThreads) {
    int64_t const b = i / (g.L * g.S), within = i % (g.L * g.S);
    int64_t const r = within / g.S, j = within % g.S;
    float sum = 0.0f;
    for (int sl = 0; sl < g.split; ++sl) sum += g.partials[((b * g.split + sl) * g.L + r) * g.S + j];
    int64_t const row = g.small_is_n ? r : j, col = g.small_is_n ? j : r;
    float z = scale * sum;
    if (p.beta != 0.0f)
      z += p.beta * to_float(static_cast<const TCD*>(p.c)[b * p.batch_stride_c + offset(cd_row, row, col, p.ldc)]);
    float v;
    if constexpr (Chain::kIdentity) {
      v = z;
      if (p.family == CS_FAMILY_GEMM_BIAS_ACT) {
        v += to_float(static_cast<const TCD*>(p.bias)[col]);
        v = cs_activate(p.activation, v, p.act_alpha, p.act_beta);
      }
    } else {
      v = cs_chain_at<Chain>(p, z, b, row, col);
    }
    store(&static_cast<TCD*>(p.d)[b * p.batch_stride_d + offset(cd_row, row, col, p.ldd)],
          v * out_scale<TCD>(p));
  }
}

// Enqueues the GEMV path (after `check<TAB, TCD, Chain>(p, true)` said CS_OK and
// `gemv_takes(p)`); the workspace must hold `gemv_workspace_bytes(p)`.
template <class TAB, class TCD, class Chain>
int32_t launch_gemv(const cs_problem& p, cudaStream_t stream)
{
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;
  if (p.workspace == nullptr || p.workspace_bytes < gemv_workspace_bytes(p)) return CS_ERR_WORKSPACE;
  if ((reinterpret_cast<uintptr_t>(p.workspace) & 3u) != 0) return CS_ERR_UNSUPPORTED;
  GemvArgs g{};
  g.p = p;
  g.small_is_n = p.n <= p.m;
  bool const a_row = p.layout_a == CS_LAYOUT_ROW, b_row = p.layout_b == CS_LAYOUT_ROW;
  if (g.small_is_n) {   // long: A (r, k); small: B (k, j)
    g.lng = p.a; g.l_row = a_row ? p.lda : 1; g.l_k = a_row ? 1 : p.lda; g.l_batch = p.batch_stride_a;
    g.sml = p.b; g.s_k = b_row ? p.ldb : 1; g.s_col = b_row ? 1 : p.ldb; g.s_batch = p.batch_stride_b;
    g.L = p.m; g.S = p.n;
  } else {              // long: B^T (c, k); small: A^T (k, i)
    g.lng = p.b; g.l_row = b_row ? 1 : p.ldb; g.l_k = b_row ? p.ldb : 1; g.l_batch = p.batch_stride_b;
    g.sml = p.a; g.s_k = a_row ? 1 : p.lda; g.s_col = a_row ? p.lda : 1; g.s_batch = p.batch_stride_a;
    g.L = p.n; g.S = p.m;
  }
  g.split = gemv_split(p);
  g.kslice = ((p.k + g.split - 1) / g.split + 3) / 4 * 4;
  g.partials = static_cast<float*>(p.workspace);
  bool const long_k_contig = g.l_k == 1;
  g.vec4 = std::is_same_v<TAB, float> && long_k_contig && g.l_row % 4 == 0 && g.l_batch % 4 == 0 &&
           (reinterpret_cast<uintptr_t>(g.lng) & 15u) == 0;
  // The long side contiguous, in aligned 16-byte vectors at every k: gemv_mn_kernel.
  constexpr int64_t kVec = 16 / int64_t(sizeof(TAB));
  bool const mn = !long_k_contig && g.l_row == 1 && g.l_k % kVec == 0 && g.l_batch % kVec == 0 &&
                  (reinterpret_cast<uintptr_t>(g.lng) & 15u) == 0 && g.S * kVec <= 128;
  g.mn_along = gemv_mn_threads_along(g.L, p.dtype_ab);
  int64_t const rows_per_cta = long_k_contig ? kGemvThreads / 32 * kGemvRowsPerWarp
                               : mn          ? int64_t(g.mn_along) * kVec
                                             : kGemvThreads;
  dim3 const grid(unsigned((g.L + rows_per_cta - 1) / rows_per_cta), unsigned(g.split), unsigned(p.batch));
  // One fp32 column whose K runs, like the long rows', are 16-byte aligned: the vector kernel.
  bool const vector = CS_GEMV_VECTOR && g.vec4 && g.S == 1 && g.s_k == 1 && g.s_batch % 4 == 0 &&
                      (reinterpret_cast<uintptr_t>(g.sml) & 15u) == 0;
  if (vector) gemv_vector_kernel<<<grid, kGemvThreads, 0, stream>>>(g);
  else if (long_k_contig) gemv_partials_kernel<TAB, true><<<grid, kGemvThreads, 0, stream>>>(g);
  else if (mn && g.S <= 1) gemv_mn_launch<TAB, 1>(g, grid, stream);
  else if (mn && g.S <= 2) gemv_mn_launch<TAB, 2>(g, grid, stream);
  else if (mn && g.S <= 4) gemv_mn_launch<TAB, 4>(g, grid, stream);
  else if (mn && g.S <= 8) gemv_mn_launch<TAB, 8>(g, grid, stream);
  else if (mn) gemv_mn_launch<TAB, kGemvMaxSmall>(g, grid, stream);
  else gemv_partials_kernel<TAB, false><<<grid, kGemvThreads, 0, stream>>>(g);
  int64_t const outs = p.batch * g.L * g.S;
  int64_t blocks = (outs + kGemvThreads - 1) / kGemvThreads;
  if (blocks > 4096) blocks = 4096;
  gemv_finish_kernel<TCD, Chain><<<unsigned(blocks), kGemvThreads, 0, stream>>>(g);
  return int32_t(cudaGetLastError());
}

}  // namespace cs_fallback
