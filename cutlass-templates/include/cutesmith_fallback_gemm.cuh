// cutesmith fallback GEMM: a predicated shared-memory tiled GEMM for the problems the
// fast (TMA) paths cannot take: K or a leading dimension not a multiple of 8 elements,
// unaligned pointers, odd everything. Templates call it from cutesmith_launch instead of
// returning CS_ERR_UNSUPPORTED, the way a vendor library falls back to a slower kernel.
//
//   D[b] = act(alpha * A[b] (m x k, row-major) * B[b] (n rows of k) + beta * C[b] + bias)
//
// fp32 accumulation (exact fp32 FMA), bf16 / fp16 / f32 elements, 64x64x32 tiles.
#pragma once

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cutesmith_abi.h"

namespace cs_fallback {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half_rn(x); }

// The ABI's activations in fp32 (accurate forms: this is the reference-grade path).
__device__ __forceinline__ float activate(float x, int act, float slope)
{
  switch (act) {
    case CS_ACT_RELU:       return x > 0.0f ? x : 0.0f;
    case CS_ACT_LEAKY_RELU: return x >= 0.0f ? x : slope * x;
    case CS_ACT_GELU_ERF:   return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case CS_ACT_GELU_TANH:  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case CS_ACT_SILU:       return x / (1.0f + expf(-x));
    case CS_ACT_SIGMOID:    return 1.0f / (1.0f + expf(-x));
    case CS_ACT_TANH:       return tanhf(x);
    default:                return x;
  }
}

constexpr int kTileM = 64, kTileN = 64, kTileK = 32, kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads)
gemm_kernel(int m, int n, int k,
            const T* __restrict__ A, int64_t lda, int64_t sa,
            const T* __restrict__ B, int64_t ldb, int64_t sb,
            const T* __restrict__ C, int64_t ldc, int64_t sc,
            T* __restrict__ D, int64_t ldd, int64_t sd,
            const T* __restrict__ bias, float alpha, float beta, int act, float slope)
{
  __shared__ float As[kTileM][kTileK + 1];   // +1: no bank conflicts on the column reads
  __shared__ float Bs[kTileN][kTileK + 1];
  int const tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  int64_t const row0 = int64_t(blockIdx.y) * kTileM, col0 = int64_t(blockIdx.x) * kTileN;
  int64_t const bz = blockIdx.z;
  const T* Ab = A + bz * sa;
  const T* Bb = B + bz * sb;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < k; k0 += kTileK) {
#pragma unroll
    for (int r = 0; r < (kTileM * kTileK) / kThreads; ++r) {
      int const e = tid + r * kThreads, tr = e / kTileK, tk = e % kTileK;
      int64_t const gk = k0 + tk;
      As[tr][tk] = (row0 + tr < m && gk < k) ? to_float(Ab[(row0 + tr) * lda + gk]) : 0.0f;
      Bs[tr][tk] = (col0 + tr < n && gk < k) ? to_float(Bb[(col0 + tr) * ldb + gk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[ty + 16 * i][kk];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[tx + 16 * j][kk];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int64_t const gm = row0 + ty + 16 * i, gn = col0 + tx + 16 * j;
      if (gm < m && gn < n) {
        float v = alpha * acc[i][j];
        if (beta != 0.0f) v += beta * to_float(C[bz * sc + gm * ldc + gn]);
        if (bias != nullptr) v += to_float(bias[gn]);
        store(&D[bz * sd + gm * ldd + gn], activate(v, act, slope));
      }
    }
  }
}

// CS_OK when the fallback can run `p` (TN, element type T); pointers checked at launch.
template <class T>
int32_t check(const cs_problem& p, cs_dtype dtype, bool check_pointers)
{
  if (p.family != CS_FAMILY_GEMM && p.family != CS_FAMILY_GEMM_BIAS_ACT) return CS_ERR_UNSUPPORTED;
  if (p.dtype_ab != dtype || p.dtype_cd != dtype) return CS_ERR_UNSUPPORTED;
  if (p.layout_a != CS_LAYOUT_ROW || p.layout_b != CS_LAYOUT_COL || p.layout_cd != CS_LAYOUT_ROW)
    return CS_ERR_UNSUPPORTED;
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m > 0x7fffffffLL || p.n > 0x7fffffffLL || p.k > 0x7fffffffLL) return CS_ERR_UNSUPPORTED;
  if ((p.m + kTileM - 1) / kTileM > 65535 || p.batch > 65535) return CS_ERR_UNSUPPORTED;
  if (p.lda < p.k || p.ldb < p.k || p.ldd < p.n) return CS_ERR_UNSUPPORTED;
  if (p.beta != 0.0f && p.ldc < p.n) return CS_ERR_UNSUPPORTED;
  if (check_pointers && p.m > 0 && p.n > 0 && p.batch > 0) {
    if (p.d == nullptr || (p.k > 0 && (p.a == nullptr || p.b == nullptr))) return CS_ERR_UNSUPPORTED;
    if (p.beta != 0.0f && p.c == nullptr) return CS_ERR_UNSUPPORTED;
    if (p.family == CS_FAMILY_GEMM_BIAS_ACT && p.bias == nullptr) return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

// Enqueues the fallback GEMM (after `check` said CS_OK).
template <class T>
int32_t launch(const cs_problem& p, cudaStream_t stream)
{
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;
  bool const fused = p.family == CS_FAMILY_GEMM_BIAS_ACT;
  dim3 const grid(unsigned((p.n + kTileN - 1) / kTileN), unsigned((p.m + kTileM - 1) / kTileM),
                  unsigned(p.batch));
  gemm_kernel<T><<<grid, kThreads, 0, stream>>>(
      int(p.m), int(p.n), int(p.k),
      static_cast<const T*>(p.a), p.lda, p.batch_stride_a,
      static_cast<const T*>(p.b), p.ldb, p.batch_stride_b,
      static_cast<const T*>(p.c), p.ldc, p.batch_stride_c,
      static_cast<T*>(p.d), p.ldd, p.batch_stride_d,
      fused ? static_cast<const T*>(p.bias) : nullptr, p.alpha, p.beta,
      fused ? p.activation : int(CS_ACT_IDENTITY), p.act_alpha);
  return int32_t(cudaGetLastError());
}

}  // namespace cs_fallback
