// Probe: how fast can one kernel read a weight matrix of an LLM projection (32-136 MiB)
// from DRAM, timed as the harness times (L2 flushed by reading 256 MiB before each launch,
// CUDA events, median of 30), beside cuBLAS's bf16 nn.Linear GEMM with 16 and 64 rows on
// the same weights. The gap between the two is the room a small-M GEMM kernel has.
//   nvcc -O3 -arch=sm_90a -std=c++17 stream_floor.cu -lcublas -o sf && ./sf
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define CK(x) do { auto e = (x); if (e != 0) { printf("%s: error %d\n", #x, int(e)); return 1; } } while (0)

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}

// Grid-stride: consecutive threads read consecutive 16-byte words, U words in flight.
template <int U>
__global__ void __launch_bounds__(256) read_stride(const uint4* __restrict__ p, size_t n, uint32_t* sink) {
  size_t const stride = size_t(gridDim.x) * blockDim.x;
  uint32_t acc = 0;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 r[U];
#pragma unroll
    for (int u = 0; u < U; ++u) r[u] = ld_stream(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
  }
  for (; i < n; i += stride) { uint4 r = ld_stream(p + i); acc ^= r.x ^ r.y ^ r.z ^ r.w; }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

// Contiguous chunk per CTA (what a CTA owning whole weight rows reads), U words in flight.
template <int U>
__global__ void __launch_bounds__(256) read_chunk(const uint4* __restrict__ p, size_t n, uint32_t* sink) {
  size_t const chunk = (n + gridDim.x - 1) / gridDim.x;
  size_t const lo = blockIdx.x * chunk, hi = min(n, lo + chunk);
  uint32_t acc = 0;
  size_t i = lo + threadIdx.x;
  for (; i + (U - 1) * 256 < hi; i += U * 256) {
    uint4 r[U];
#pragma unroll
    for (int u = 0; u < U; ++u) r[u] = ld_stream(p + i + u * 256);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
  }
  for (; i < hi; i += 256) { uint4 r = ld_stream(p + i); acc ^= r.x ^ r.y ^ r.z ^ r.w; }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

__global__ void flush_read(const uint4* __restrict__ p, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint4 r = p[i];
    acc ^= r.x ^ r.y ^ r.z ^ r.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int sms = prop.multiProcessorCount;
  printf("device %s, %d SMs, L2 %d MiB\n", prop.name, sms, prop.l2CacheSize >> 20);
  size_t const fl = 256u << 20;
  void *flush, *w, *x, *y;
  uint32_t* sink;
  size_t const wmax = 18944ull * 4096 * 2;
  CK(cudaMalloc(&flush, fl)); CK(cudaMalloc(&w, wmax)); CK(cudaMalloc(&x, 64 * 18944 * 2));
  CK(cudaMalloc(&y, 64 * 18944 * 4)); CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(flush, 1, fl)); CK(cudaMemset(w, 0, wmax)); CK(cudaMemset(x, 0, 64 * 18944 * 2));
  cublasHandle_t h;
  CK(cublasCreate(&h));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0); cudaEventCreate(&e1);
  auto time = [&](auto launch) {
    std::vector<float> t;
    for (int it = 0; it < 33; ++it) {
      flush_read<<<sms * 4, 512>>>((const uint4*)flush, fl / 16, sink);
      cudaEventRecord(e0); launch(); cudaEventRecord(e1); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1);
      if (it >= 3) t.push_back(ms * 1000.f);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  struct Shape { int n, k; };
  for (Shape s : {Shape{4096, 4096}, Shape{4608, 3584}, Shape{6144, 4096}, Shape{14336, 4096}, Shape{18944, 3584}}) {
    size_t bytes = size_t(s.n) * s.k * 2, n = bytes / 16;
    printf("\n%d x %d weights, %.1f MiB\n", s.n, s.k, bytes / 1048576.0);
    float cp = time([&] { cudaMemcpyAsync(y, w, std::min<size_t>(bytes, 64 * 18944 * 4), cudaMemcpyDeviceToDevice); });
    (void)cp;
    for (int m : {16, 64}) {
      float alpha = 1, beta = 0;
      float t = time([&] {
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &alpha, w, CUDA_R_16BF, s.k, x, CUDA_R_16BF, s.k,
                     &beta, y, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      });
      printf("  cuBLAS m=%-3d %7.2f us  (%.2f TB/s of the weights)\n", m, t, bytes / t * 1e-6);
    }
    for (int g : {sms, 2 * sms, 4 * sms, 8 * sms}) {
      float a = time([&] { read_stride<4><<<g, 256>>>((const uint4*)w, n, sink); });
      float b = time([&] { read_stride<8><<<g, 256>>>((const uint4*)w, n, sink); });
      float c = time([&] { read_chunk<4><<<g, 256>>>((const uint4*)w, n, sink); });
      float d = time([&] { read_chunk<8><<<g, 256>>>((const uint4*)w, n, sink); });
      printf("  grid %4d: stride U4 %6.2f U8 %6.2f | chunk U4 %6.2f U8 %6.2f us (best %.2f TB/s)\n", g, a, b, c, d,
             bytes / std::min(std::min(a, b), std::min(c, d)) * 1e-6);
    }
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
