#include <cstdint>
#include <cuda_bf16.h>
#include <cute/tensor.hpp>
#include "cutesmith_abi.h"

using namespace cute;

// SiLU in fp32 math on bf16 data.
__device__ __forceinline__ __nv_bfloat16 silu(__nv_bfloat16 v)
{
  float const x = __bfloat162float(v);
  return __float2bfloat16(x / (1.f + expf(-x)));
}

// Contiguous data: 16-byte vectors (8 bf16) viewed through a CuTe tensor of uint4,
// UNROLL vectors in flight per thread, then a scalar tail.
constexpr int kUnroll = 4;

__global__ void silu_flat(__nv_bfloat16 const* a, __nv_bfloat16* d, int64_t total)
{
  int64_t const nvec = total / 8;
  Tensor A = make_tensor(make_gmem_ptr(reinterpret_cast<uint4 const*>(a)), make_layout(nvec));
  Tensor D = make_tensor(make_gmem_ptr(reinterpret_cast<uint4*>(d)), make_layout(nvec));
  int64_t const threads = int64_t(gridDim.x) * blockDim.x;
  int64_t const tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t base = tid; base < nvec; base += threads * kUnroll) {
    uint4 buf[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int64_t const i = base + u * threads;
      if (i < nvec) buf[u] = A(i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int64_t const i = base + u * threads;
      if (i < nvec) {
        __nv_bfloat16* e = reinterpret_cast<__nv_bfloat16*>(&buf[u]);
#pragma unroll
        for (int j = 0; j < 8; ++j) e[j] = silu(e[j]);
        D(i) = buf[u];
      }
    }
  }
  for (int64_t i = nvec * 8 + tid; i < total; i += threads) d[i] = silu(a[i]);
}

// Strided rows (lda or ldd != n): one element per step, CuTe (m, n) views.
__global__ void silu_rows(__nv_bfloat16 const* a, __nv_bfloat16* d, int64_t m, int64_t n,
                          int64_t lda, int64_t ldd)
{
  Tensor A = make_tensor(make_gmem_ptr(a), make_layout(make_shape(m, n), make_stride(lda, Int<1>{})));
  Tensor D = make_tensor(make_gmem_ptr(d), make_layout(make_shape(m, n), make_stride(ldd, Int<1>{})));
  int64_t const total = m * n;
  int64_t const step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    int64_t const r = i / n, c = i % n;
    D(r, c) = silu(A(r, c));
  }
}

CS_EXPORT uint32_t cutesmith_abi_version(void) { return CS_ABI_VERSION; }

CS_EXPORT int32_t cutesmith_workspace_bytes(const cs_problem* p, uint64_t* bytes)
{
  if (bytes != nullptr) *bytes = 0;
  if (p == nullptr || p->family != CS_FAMILY_ACTIVATION || p->activation != CS_ACT_SILU ||
      p->dtype_ab != CS_DTYPE_BF16)
    return CS_ERR_UNSUPPORTED;
  return CS_OK;
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* p, cs_stream_t stream)
{
  if (p == nullptr || p->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  uint64_t ws = 0;
  if (int32_t s = cutesmith_workspace_bytes(p, &ws); s != CS_OK) return s;
  if (p->m == 0 || p->n == 0) return CS_OK;
  auto const* a = static_cast<__nv_bfloat16 const*>(p->a);
  auto* d = static_cast<__nv_bfloat16*>(p->d);
  bool const contiguous = p->m == 1 || (p->lda == p->n && p->ldd == p->n);
  bool const aligned = (reinterpret_cast<uintptr_t>(a) % 16 == 0) && (reinterpret_cast<uintptr_t>(d) % 16 == 0);
  int const threads = 256;
  int64_t const total = p->m * p->n;
  int64_t const cap = int64_t(p->sm_count) * 8;
  if (contiguous && aligned) {
    int64_t const want = (total / 8 + threads * kUnroll - 1) / (threads * kUnroll);
    int const blocks = int(want < 1 ? 1 : (want < cap ? want : cap));
    silu_flat<<<blocks, threads, 0, stream>>>(a, d, total);
  } else {
    int64_t const want = (total + threads - 1) / threads;
    int const blocks = int(want < cap ? want : cap);
    silu_rows<<<blocks, threads, 0, stream>>>(a, d, p->m, p->n, p->lda, p->ldd);
  }
  return int32_t(cudaGetLastError());
}
