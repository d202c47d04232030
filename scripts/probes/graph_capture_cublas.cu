// Which call fails when a small-M cuBLAS GEMM is captured the way the timing harness
// captures a tiny problem (a graph of launches, each after an L2-flush kernel and
// bracketed by its own pair of event-record nodes), and which capture forms work.
//
//   nvcc -O2 -arch=sm_90a -std=c++17 scripts/probes/graph_capture_cublas.cu -lcublas -lcuda -o gc && ./gc
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <vector>

#define CK(x)                                                                    \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      printf("    %s -> %s (%d)\n", #x, cudaGetErrorName(e_), (int)e_);          \
      ok = false;                                                                \
    }                                                                            \
  } while (0)

__global__ void flush_read(const int4* buf, size_t n, unsigned* sink) {
  int4 acc = {0, 0, 0, 0};
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int4 v = buf[i];
    acc.x ^= v.x;
  }
  if (acc.x == 0x12345678) *sink = acc.x;
}
__global__ void noop() {}

int main() {
  int m = 16, n = 3584, k = 3584;  // an LLM o-projection at decode size
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, st);
  __nv_bfloat16 *a, *b, *d;
  cudaMalloc(&a, (size_t)m * k * 2);
  cudaMalloc(&b, (size_t)n * k * 2);
  cudaMalloc(&d, (size_t)m * n * 2);
  size_t fl = 256u << 20;
  int4* fbuf;
  unsigned* sink;
  cudaMalloc(&fbuf, fl);
  cudaMalloc(&sink, 4);
  void* ws;
  size_t wsb = 32u << 20;
  cudaMalloc(&ws, wsb);
  float alpha = 1, beta = 0;
  auto gemm = [&]() {
    // D (row-major m x n) = A (row m x k) * W^T (W row n x k): column-major D^T = W * A^T
    return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16BF, k, a,
                        CUDA_R_16BF, k, &beta, d, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
  };
  for (int i = 0; i < 3; i++) gemm();
  cudaStreamSynchronize(st);
  const char* names[] = {"events per launch (the harness)", "events + noop kernel after the GEMM",
                         "events, workspace set", "one event pair around the graph",
                         "events, no flush"};
  for (int mode = 0; mode < 5; mode++) {
    bool ok = true;
    printf("mode %d: %s\n", mode, names[mode]);
    if (mode == 2) cublasSetWorkspace(h, ws, wsb);
    const int L = 20;
    std::vector<cudaEvent_t> ev(2 * L);
    for (auto& e : ev) CK(cudaEventCreate(&e));
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < L; i++) {
      if (mode != 4) flush_read<<<132 * 4, 512, 0, st>>>(fbuf, fl / 16, sink);
      if (mode != 3) CK(cudaEventRecord(ev[2 * i], st));
      cublasStatus_t s = gemm();
      if (s != CUBLAS_STATUS_SUCCESS) {
        printf("    cublasGemmEx in capture -> %d\n", (int)s);
        ok = false;
      }
      if (mode == 1) noop<<<1, 1, 0, st>>>();
      if (mode != 3) CK(cudaEventRecord(ev[2 * i + 1], st));
    }
    cudaGraph_t g = nullptr;
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t x = nullptr;
    if (g) {
      size_t nn = 0;
      cudaGraphGetNodes(g, nullptr, &nn);
      std::vector<cudaGraphNode_t> nodes(nn);
      cudaGraphGetNodes(g, nodes.data(), &nn);
      int kinds[16] = {0};
      for (auto nd : nodes) {
        cudaGraphNodeType t;
        cudaGraphNodeGetType(nd, &t);
        if ((int)t < 16) kinds[(int)t]++;
      }
      printf("    %zu nodes:", nn);
      for (int t = 0; t < 16; t++)
        if (kinds[t]) printf(" type%d x%d", t, kinds[t]);
      printf("\n");
      CK(cudaGraphInstantiate(&x, g, 0));
    }
    if (x) {
      CK(cudaGraphUpload(x, st));
      cudaEvent_t s0, s1;
      cudaEventCreate(&s0);
      cudaEventCreate(&s1);
      CK(cudaEventRecord(s0, st));
      CK(cudaGraphLaunch(x, st));
      CK(cudaEventRecord(s1, st));
      CK(cudaStreamSynchronize(st));
      float tot = 0;
      if (mode != 3) {
        for (int i = 0; i < L; i++) {
          float ms = 0;
          cudaError_t e = cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
          if (e != cudaSuccess) {
            printf("    cudaEventElapsedTime(launch %d) -> %s\n", i, cudaGetErrorName(e));
            ok = false;
            break;
          }
          tot += ms;
        }
        printf("    per launch %.2f us\n", 1000 * tot / L);
      }
      float all = 0;
      cudaEventElapsedTime(&all, s0, s1);
      printf("    whole graph %.2f us (%.2f per launch incl. flush)\n", 1000 * all, 1000 * all / L);
    }
    printf("    %s\n", ok ? "OK" : "FAILED");
    cudaGetLastError();
  }
  // Per-launch timing with the host's cuBLAS overhead inside the event pair.
  cudaEvent_t s0, s1;
  cudaEventCreate(&s0);
  cudaEventCreate(&s1);
  float best = 1e9;
  std::vector<float> t;
  for (int i = 0; i < 30; i++) {
    flush_read<<<132 * 4, 512, 0, st>>>(fbuf, fl / 16, sink);
    cudaEventRecord(s0, st);
    gemm();
    cudaEventRecord(s1, st);
    cudaEventSynchronize(s1);
    float ms;
    cudaEventElapsedTime(&ms, s0, s1);
    t.push_back(ms * 1000);
  }
  std::sort(t.begin(), t.end());
  printf("per-launch timing (host call inside the pair): median %.2f us\n", t[15]);
  return 0;
}
