// Probe: how close can an elementwise kernel come to a device-to-device copy on this GPU?
// Times, for 16M f32 and 16M bf16 elements, a cheap op (clamp) and an exp-based op (selu)
// in several launch shapes, against cudaMemcpyAsync of the same bytes. L2 is flushed
// before every launch; each figure is the median of 30 launches.
//   nvcc -O3 -arch=sm_90a -std=c++17 stream_variants.cu -o sv && ./sv
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)

struct alignas(16) V16 { uint4 v; };

__device__ __forceinline__ uint4 ld_cs(const uint4* p) { uint4 r; asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p)); return r; }
__device__ __forceinline__ uint4 ld_nc(const uint4* p) { uint4 r; asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p)); return r; }
__device__ __forceinline__ uint4 ld_plain(const uint4* p) { return *p; }
__device__ __forceinline__ void st_cs(uint4* p, uint4 r) { asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(r.x), "r"(r.y), "r"(r.z), "r"(r.w)); }
__device__ __forceinline__ void st_plain(uint4* p, uint4 r) { *p = r; }

template <int Op> __device__ __forceinline__ float op(float x) {
  if (Op == 0) return fminf(fmaxf(x, -1.f), 1.f);
  const float a = 1.6732632423543772f, s = 1.0507009873554805f;
  return x > 0.f ? s * x : s * a * expm1f(x);
}
template <int Op, typename T> __device__ __forceinline__ uint4 apply(uint4 v) {
  if constexpr (sizeof(T) == 4) {
    float* f = reinterpret_cast<float*>(&v);
    #pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = op<Op>(f[i]);
  } else {
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
    #pragma unroll
    for (int i = 0; i < 4; ++i) { float2 f = __bfloat1622float2(h[i]); f.x = op<Op>(f.x); f.y = op<Op>(f.y); h[i] = __float22bfloat162_rn(f); }
  }
  return v;
}

// Ld: 0 cs, 1 nc, 2 plain; St: 0 cs, 1 plain. Persistent (grid-stride) or one-shot.
template <int Op, typename T, int V, int Ld, int St>
__global__ void kstream(const uint4* __restrict__ a, uint4* __restrict__ d, long nvec) {
  long chunk = (long)blockDim.x * V;
  for (long base = (long)blockIdx.x * chunk; base < nvec; base += (long)gridDim.x * chunk) {
    uint4 r[V];
    #pragma unroll
    for (int j = 0; j < V; ++j) { long i = base + threadIdx.x + (long)j * blockDim.x; if (i < nvec) r[j] = Ld == 0 ? ld_cs(a + i) : Ld == 1 ? ld_nc(a + i) : ld_plain(a + i); }
    #pragma unroll
    for (int j = 0; j < V; ++j) { long i = base + threadIdx.x + (long)j * blockDim.x; if (i < nvec) { uint4 o = apply<Op, T>(r[j]); if (St == 0) st_cs(d + i, o); else st_plain(d + i, o); } }
  }
}

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main() {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs\n", prop.name, sms);
  const long n = 1L << 24;
  void *a, *d, *flush; size_t fl = 256u << 20;
  CK(cudaMalloc(&a, n * 4)); CK(cudaMalloc(&d, n * 4)); CK(cudaMalloc(&flush, fl));
  CK(cudaMemset(a, 0x3c, n * 4));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  auto time = [&](auto launch) {
    std::vector<float> t;
    for (int it = 0; it < 33; ++it) {
      cudaMemsetAsync(flush, it, fl);
      cudaEventRecord(e0); launch(); cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
      float ms; cudaEventElapsedTime(&ms, e0, e1); if (it >= 3) t.push_back(ms * 1000.f);
    }
    CK(cudaGetLastError());
    return median(t);
  };
  for (int es : {4, 2}) {
    long bytes = n * es, nvec = bytes / 16;
    float cp = time([&] { cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice); });
    printf("\n%s, %ld elements: memcpy %.2f us (%.2f TB/s)\n", es == 4 ? "f32" : "bf16", n, cp, 2.0 * bytes / cp / 1e6);
    auto run = [&](const char* name, auto kern, int threads, int V, int blocks) {
      float us = time([&] { kern<<<blocks, threads>>>((const uint4*)a, (uint4*)d, nvec); });
      printf("  %-44s %8.2f us  %5.1f%% of copy\n", name, us, 100.f * cp / us);
    };
#define VARIANTS(OP, T, OPN) \
    { long per = 256L * 4; int oneshot = (int)((nvec + per - 1) / per); \
      run(OPN " persist 4x256 V4 cs/cs", kstream<OP, T, 4, 0, 0>, 256, 4, sms * 4); \
      run(OPN " persist 8x256 V4 cs/cs", kstream<OP, T, 4, 0, 0>, 256, 4, sms * 8); \
      run(OPN " persist 8x256 V4 nc/plain", kstream<OP, T, 4, 1, 1>, 256, 4, sms * 8); \
      run(OPN " persist 8x256 V4 plain/plain", kstream<OP, T, 4, 2, 1>, 256, 4, sms * 8); \
      run(OPN " persist 4x256 V8 cs/cs", kstream<OP, T, 8, 0, 0>, 256, 8, sms * 4); \
      run(OPN " oneshot 256 V4 cs/cs", kstream<OP, T, 4, 0, 0>, 256, 4, oneshot); \
      run(OPN " oneshot 256 V4 plain/plain", kstream<OP, T, 4, 2, 1>, 256, 4, oneshot); \
      run(OPN " oneshot 256 V4 nc/cs", kstream<OP, T, 4, 1, 0>, 256, 4, oneshot); \
      run(OPN " oneshot 256 V2 cs/cs", kstream<OP, T, 2, 0, 0>, 256, 2, (int)((nvec + 511) / 512)); \
      run(OPN " oneshot 256 V1 plain/plain", kstream<OP, T, 1, 2, 1>, 256, 1, (int)((nvec + 255) / 256)); \
      run(OPN " oneshot 512 V8 cs/cs", kstream<OP, T, 8, 0, 0>, 512, 8, (int)((nvec + 4095) / 4096)); }
    if (es == 4) { VARIANTS(0, float, "clamp") VARIANTS(1, float, "selu") }
    else { VARIANTS(0, __nv_bfloat16, "clamp") VARIANTS(1, __nv_bfloat16, "selu") }
  }
  return 0;
}
