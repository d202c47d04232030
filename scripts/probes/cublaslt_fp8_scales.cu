// Probe (nvcc -O2 cublaslt_fp8_scales.cu -lcublasLt): cuBLASLt fp8 (e4m3) TN GEMM, D bf16, as the worker sets it up; vary alignment and scales.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cuda_fp8.h>
#include <cstdio>
#include <cstdint>
static void run(int m, int n, int k, size_t off_a, size_t off_d, bool scales, bool cnull, int minalign) {
  cublasLtHandle_t h; cublasLtCreate(&h);
  char *a, *b, *d; float* sc; void* ws; size_t wsb = 32u << 20;
  cudaMalloc(&a, size_t(m) * k + 4096); cudaMalloc(&b, size_t(n) * k + 4096);
  cudaMalloc(&d, size_t(m) * n * 2 + 4096); cudaMalloc(&sc, 16); cudaMalloc(&ws, wsb);
  float one[4] = {1, 1, 1, 1}; cudaMemcpy(sc, one, 16, cudaMemcpyHostToDevice);
  cudaMemset(a, 0, size_t(m) * k + 4096); cudaMemset(b, 0, size_t(n) * k + 4096);
  char* A = a + off_a; char* D = d + off_d;
  cublasLtMatmulDesc_t desc; cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &T, 4);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &N, 4);
  if (scales) {
    float* sa = sc; float* sb = sc + 1;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, 8);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, 8);
  }
  // first = B (n x k col-major viewed as k x n ... ) as the worker: D^T (n x m) = B^T A^T
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, n, k);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, m, k);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n);
  cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
  uint64_t w = wsb; cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, 8);
  if (minalign) {
    uint32_t al = minalign;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, 4);
  }
  cublasLtMatmulHeuristicResult_t r[8]; int cnt = 0;
  cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 8, r, &cnt);
  float alpha = 1, beta = 0;
  printf("m=%d n=%d k=%d off_a=%zu off_d=%zu scales=%d cnull=%d minalign=%d: heuristic %d count %d;", m, n, k, off_a, off_d, scales, cnull, minalign, int(hs), cnt);
  for (int i = 0; i < cnt; ++i) {
    cublasStatus_t s = cublasLtMatmul(h, desc, &alpha, b, la, A, lb, &beta, cnull ? nullptr : D, lc, D, lc, &r[i].algo, ws, wsb, 0);
    printf(" %d", int(s));
  }
  cudaError_t e = cudaDeviceSynchronize();
  printf(" | sync %s\n", cudaGetErrorString(e));
  cudaFree(a); cudaFree(b); cudaFree(d); cudaFree(sc); cudaFree(ws); cublasLtDestroy(h);
}
int main() {
  run(4096, 4096, 4096, 0, 0, true, false, 0);
  run(4096, 4096, 4096, 0, 0, false, false, 0);
  run(4096, 4096, 4096, 0, 128, true, false, 0);
  run(4096, 4096, 4096, 16, 0, true, false, 0);
  run(4096, 4096, 4096, 0, 0, true, true, 0);
  run(4096, 4096, 4096, 0, 128, true, false, 16);
  run(256, 14336, 4096, 0, 0, true, false, 0);
  return 0;
}
