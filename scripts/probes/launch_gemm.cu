// A bare launcher for one compiled GEMM kernel (a cutesmith shared object), for profilers
// that cannot follow the worker process: bf16 A (m x k, row-major) times B (k x n,
// column-major, i.e. nn.Linear's weight) into a row-major D, with a bias row when the
// family is gemm_bias_act. Each launch follows a read of 4x the L2 (the harness's flush).
// Build and run on a GPU machine:
//   nvcc -O2 -std=c++17 -arch=sm_90a -I cutlass-templates/include scripts/probes/launch_gemm.cu -o /tmp/launch_gemm -ldl
//   /tmp/launch_gemm KERNEL.so M N K [FAMILY ACT [REPS]]     (FAMILY 0 gemm, 1 gemm_bias_act)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "cutesmith_abi.h"

__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    p[i] = __float2bfloat16(float(int(h % 2001u) - 1000) / 1000.0f);
  }
}
__global__ void evict(const float4* p, size_t n, float* sink) {
  float acc = 0.0f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float4 v = p[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.0f) *sink = acc;
}
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

int main(int argc, char** argv) {
  if (argc < 5) { printf("usage: %s KERNEL.so M N K [FAMILY ACT [REPS]]\n", argv[0]); return 2; }
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) { printf("dlopen: %s\n", dlerror()); return 1; }
  auto ws_fn = (int32_t (*)(const cs_problem*, uint64_t*))dlsym(lib, "cutesmith_workspace_bytes");
  auto launch = (int32_t (*)(const cs_problem*, cs_stream_t))dlsym(lib, "cutesmith_launch");
  int64_t m = atoll(argv[2]), n = atoll(argv[3]), k = atoll(argv[4]);
  int family = argc > 5 ? atoi(argv[5]) : 0, act = argc > 6 ? atoi(argv[6]) : 0, reps = argc > 7 ? atoi(argv[7]) : 20;
  __nv_bfloat16 *a, *b, *d, *bias;
  CK(cudaMalloc(&a, m * k * 2)); CK(cudaMalloc(&b, n * k * 2)); CK(cudaMalloc(&d, m * n * 2)); CK(cudaMalloc(&bias, n * 2));
  fill<<<1024, 256>>>(a, m * k, 1); fill<<<1024, 256>>>(b, n * k, 2); fill<<<64, 256>>>(bias, n, 3);
  int dev = 0, sms = 0, l2 = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
  size_t fl = size_t(l2) * 4 / 16;
  float4* fbuf; float* sink;
  CK(cudaMalloc(&fbuf, fl * 16)); CK(cudaMemset(fbuf, 0, fl * 16)); CK(cudaMalloc(&sink, 4));
  cs_problem p;
  memset(&p, 0, sizeof p);
  p.abi_version = CS_ABI_VERSION; p.family = family; p.m = m; p.n = n; p.k = k; p.batch = 1;
  p.dtype_ab = p.dtype_cd = CS_DTYPE_BF16; p.dtype_acc = CS_DTYPE_F32;
  p.layout_a = CS_LAYOUT_ROW; p.layout_b = CS_LAYOUT_COL; p.layout_cd = CS_LAYOUT_ROW;
  p.a = a; p.b = b; p.d = d; p.lda = k; p.ldb = k; p.ldc = n; p.ldd = n;
  p.batch_stride_a = m * k; p.batch_stride_b = n * k; p.batch_stride_c = p.batch_stride_d = m * n;
  p.alpha = 1.0f; p.beta = 0.0f; p.activation = act; p.act_alpha = 1.0f;
  p.sm_count = sms; p.scale_a = p.scale_b = p.scale_d = 1.0f;
  if (family == 1) {
    p.num_operands = 1;
    p.operands[0].ptr = bias; p.operands[0].kind = CS_OPERAND_ROW; p.operands[0].dtype = CS_DTYPE_BF16;
    p.operands[0].ld = 1; p.bias = bias;
  }
  uint64_t wsb = 0;
  if (ws_fn(&p, &wsb) != 0) { printf("workspace query failed\n"); return 1; }
  if (wsb) { CK(cudaMalloc(&p.workspace, wsb)); CK(cudaMemset(p.workspace, 0, wsb)); p.workspace_bytes = wsb; }
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    evict<<<sms * 4, 512, 0, s>>>(fbuf, fl, sink);
    cudaEventRecord(e0, s);
    int32_t st = launch(&p, s);
    cudaEventRecord(e1, s);
    if (st != 0) { printf("launch returned %d\n", st); return 1; }
    CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms * 1000.0f);
  }
  std::sort(t.begin(), t.end());
  double bytes = double(m * k + n * k + m * n) * 2;
  printf("%lldx%lldx%lld: median %.2f us (%.2f TB/s)\n", (long long)m, (long long)n, (long long)k, t[t.size() / 2], bytes / t[t.size() / 2] / 1e6);
  return 0;
}
