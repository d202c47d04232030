// Probe: read bandwidth of a 1 GiB K-major operand (512 rows of 2^20 bf16) under the
// access patterns a skinny GEMM can use, each warp instruction loading 16 B per lane:
//   rows8x64: the mma.sync fragment order (8 rows x 64 B per instruction, 8 steps a batch)
//   rows4x128: 4 rows x 128 B per instruction
//   row1x512: one row, 512 contiguous bytes per instruction
// Each kernel sums what it reads (so the loads cannot be dropped); median of 20 launches.
//   nvcc -O3 -arch=sm_90a -std=c++17 read_patterns.cu -o rp && ./rp
#include <cstdint>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

constexpr long kRows = 512, kK = 1L << 20;   // bf16 elements per row
constexpr int kUnroll = 8;

// LPR: lanes per row (4, 8 or 32); a warp covers 32 / LPR rows per instruction. Grid:
// (rows / (32 / LPR) / warps) x splits; each warp walks its K slice.
template <int LPR>
__global__ void __launch_bounds__(256) kread(const uint4* __restrict__ b, int splits, float* out) {
  constexpr int RPW = 32 / LPR;   // rows per warp instruction
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  long row = (long(blockIdx.x) * 8 + warp) * RPW + lane / LPR;
  long vec_per_row = kK / 8;
  long slice = vec_per_row / splits;
  const uint4* p = b + row * vec_per_row + blockIdx.y * slice + lane % LPR;
  uint32_t acc = 0;
  for (long v = 0; v < slice; v += LPR * kUnroll) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = __ldg(p + v + u * LPR);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
  }
  if (acc == 0x12345678u) out[0] = 1.0f;
}

int main() {
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s\n", prop.name);
  size_t bytes = kRows * kK * 2;
  void* b; float* out; void* flush; size_t fl = 256u << 20;
  CK(cudaMalloc(&b, bytes)); CK(cudaMalloc(&out, 4)); CK(cudaMalloc(&flush, fl));
  CK(cudaMemset(b, 1, bytes));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  auto time = [&](auto launch) {
    std::vector<float> t;
    for (int it = 0; it < 23; ++it) {
      cudaMemsetAsync(flush, it, fl);
      cudaEventRecord(e0); launch(); cudaEventRecord(e1); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1); if (it >= 3) t.push_back(ms * 1000.f);
    }
    std::sort(t.begin(), t.end()); return t[t.size() / 2];
  };
  for (int splits : {8, 16, 32, 64}) {
    float a = time([&] { kread<4><<<dim3(kRows / (8 * 8), splits), 256>>>((const uint4*)b, splits, out); });
    float c = time([&] { kread<8><<<dim3(kRows / (8 * 4), splits), 256>>>((const uint4*)b, splits, out); });
    float d = time([&] { kread<32><<<dim3(kRows / (8 * 1), splits), 256>>>((const uint4*)b, splits, out); });
    printf("splits %2d: rows8x64 %7.1f us %.2f TB/s | rows4x128 %7.1f us %.2f TB/s | row1x512 %7.1f us %.2f TB/s\n",
           splits, a, bytes / a / 1e6, c, bytes / c / 1e6, d, bytes / d / 1e6);
  }
  CK(cudaGetLastError());
  return 0;
}
