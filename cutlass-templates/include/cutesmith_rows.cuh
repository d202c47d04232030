/*
 * Helpers the row templates share (norm_rows.cu, reduce_rows.cu, scan_rows.cu): the 16-bit
 * and fp32 element types they take, their conversions to and from fp32, and the host's
 * sizes and SM count for planning a launch.
 */
#ifndef CUTESMITH_ROWS_CUH
#define CUTESMITH_ROWS_CUH

#include <cstdint>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cutesmith_abi.h"

/* The cs_dtype of an element type. */
template <class T> struct CsDtype;
template <> struct CsDtype<float> { static constexpr int value = CS_DTYPE_F32; };
template <> struct CsDtype<__half> { static constexpr int value = CS_DTYPE_F16; };
template <> struct CsDtype<__nv_bfloat16> { static constexpr int value = CS_DTYPE_BF16; };
template <> struct CsDtype<int64_t> { static constexpr int value = CS_DTYPE_I64; };   /* an index */

__device__ __forceinline__ float cs_f32(float x) { return x; }
__device__ __forceinline__ float cs_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float cs_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

/* fp32 rounded once (to nearest) to T. */
template <class T> __device__ __forceinline__ T cs_from_f32(float y);
template <> __device__ __forceinline__ float cs_from_f32<float>(float y) { return y; }
template <> __device__ __forceinline__ __half cs_from_f32<__half>(float y) { return __float2half_rn(y); }
template <> __device__ __forceinline__ __nv_bfloat16 cs_from_f32<__nv_bfloat16>(float y) { return __float2bfloat16_rn(y); }

/* Bytes of an element of a cs_dtype the row templates take (f32, f16, bf16); 0 otherwise. */
static inline int64_t cs_dtype_bytes(int32_t dt)
{
  return dt == CS_DTYPE_F32 ? 4 : (dt == CS_DTYPE_F16 || dt == CS_DTYPE_BF16) ? 2 : 0;
}
static inline int64_t cs_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t cs_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t cs_max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The SM count: the problem's, else the current device's, else an H100 SXM's. */
static inline int cs_sm_count(const cs_problem& p)
{
  if (p.sm_count > 0) return p.sm_count;
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && sms > 0)
    return sms;
  (void)cudaGetLastError();
  return 132;   // an H100 SXM
}

#endif /* CUTESMITH_ROWS_CUH */
