#include <cstdint>
#include <cuda_bf16.h>
#include <cute/tensor.hpp>
#include "cutesmith_abi.h"

using namespace cute;

// SiLU, one element per thread per step: the (m, n) operands as CuTe tensors with row
// strides lda / ldd, walked by a grid-stride loop over the flat index.
__global__ void silu_kernel(__nv_bfloat16 const* a, __nv_bfloat16* d, int64_t m, int64_t n,
                            int64_t lda, int64_t ldd)
{
  Tensor A = make_tensor(make_gmem_pointer(a), make_layout(make_shape(m, n), make_stride(lda, Int<1>{})));
  Tensor D = make_tensor(make_gmem_pointer(d), make_layout(make_shape(m, n), make_stride(ldd, Int<1>{})));
  int64_t const total = m * n;
  int64_t const step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    int64_t const r = i / n, c = i % n;
    float const x = __bfloat162float(A(r, c));
    D(r, c) = __float2bfloat16(x / (1.f + expf(-x)));
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
  int const threads = 256;
  int64_t const want = (p->m * p->n + threads - 1) / threads;
  int const blocks = int(want < int64_t(p->sm_count) * 8 ? want : int64_t(p->sm_count) * 8);
  silu_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16 const*>(p->a),
      static_cast<__nv_bfloat16*>(p->d), p->m, p->n, p->lda, p->ldd);
  return int32_t(cudaGetLastError());
}
