// Probe (nvcc -O2 -arch=sm_90 tensor_core_accumulation.cu -lcublas): how far the tensor cores' fp32 accumulation of a bf16 GEMM (cuBLAS, fp32 output)
// strays from the exact dot product, in units of u = 2^-24 times sum |a b|.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
__device__ unsigned long long mix(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull; return z ^ (z >> 31);
}
__global__ void fill(__nv_bfloat16* x, size_t n, unsigned long long s) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned long long r = mix(s ^ mix(i));
    double u = double(r >> 11) / 9007199254740992.0; int e = int((r & 7ull) % 5ull);
    double v = 2.0 * u - 1.0; if (v == 0.0) v = 0.5;
    x[i] = __float2bfloat16(float(v * exp2(double(e - 2))));
  }
}
// A row-major m x k, B col-major (n x k rows), D row-major m x n. Counts of |err|/sum|ab| above thresholds.
__global__ void judge(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* D, int m, int n, int k,
                      unsigned long long* cnt, unsigned long long* maxbits) {
  long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (idx >= (long long)m * n) return;
  int i = idx / n, j = idx % n;
  double s = 0, sa = 0;
  for (int kk = 0; kk < k; ++kk) {
    double p = double(__bfloat162float(A[(size_t)i * k + kk])) * double(__bfloat162float(B[(size_t)j * k + kk]));
    s += p; sa += fabs(p);
  }
  double r = fabs(double(D[idx]) - s) / (sa * 5.9604644775390625e-08);
  const double th[6] = {1, 2, 4, 8, 16, 32};
  for (int t = 0; t < 6; ++t) if (r > th[t]) atomicAdd(&cnt[t], 1ull);
  atomicMax(maxbits, (unsigned long long)__double_as_longlong(r));
}
int main() {
  cublasHandle_t h; cublasCreate(&h);
  int shapes[][3] = {{4096, 4096, 4096}, {1024, 1024, 16384}, {256, 256, 65536}, {128, 128, 262144}};
  for (auto& sh : shapes) {
    int m = sh[0], n = sh[1], k = sh[2];
    __nv_bfloat16 *A, *B; float* D; unsigned long long* c;
    cudaMalloc(&A, size_t(m) * k * 2); cudaMalloc(&B, size_t(n) * k * 2); cudaMalloc(&D, size_t(m) * n * 4);
    cudaMalloc(&c, 8 * 8); cudaMemset(c, 0, 64);
    fill<<<1024, 256>>>(A, size_t(m) * k, 1); fill<<<1024, 256>>>(B, size_t(n) * k, 2);
    float alpha = 1, beta = 0;
    // D^T (n x m col-major = D row-major) = B^T(op T on col-major k x n) ... as cuBLAS: C(n x m) = B(n x k) * A^T(k x m)
    cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, B, CUDA_R_16BF, k, A, CUDA_R_16BF, k,
                                     &beta, D, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    judge<<<(size_t(m) * n + 255) / 256, 256>>>(A, B, D, m, n, k, c, c + 6);
    unsigned long long hc[8]; cudaMemcpy(hc, c, 64, cudaMemcpyDeviceToHost);
    double mx; memcpy(&mx, &hc[6], 8);
    printf("cublas bf16->f32 %dx%dx%d (st %d): elements %lld; |err|/(u sum|ab|) max %.2f; above 1/2/4/8/16/32: %llu %llu %llu %llu %llu %llu\n",
           m, n, k, int(st), (long long)m * n, mx, hc[0], hc[1], hc[2], hc[3], hc[4], hc[5]);
    cudaFree(A); cudaFree(B); cudaFree(D); cudaFree(c);
  }
  return 0;
}
