// cutesmith: the edge outputs of the TMA GEMM templates (gemm_glu.cu, gemm_softmax.cu).
// Their TMA GEMM covers rows [0, m_gemm) and columns [0, n_gemm) of each batch's m x n
// output (whole 16-byte lines); the edge kernel computes the rest, one warp per output.

#pragma once

#include <cstdint>

namespace cs_edges {

// Output t of a batch's edge: the columns [n_gemm, n) of every row first, then the rows
// [m_gemm, m) of the columns [0, n_gemm).
__device__ __forceinline__ void position(int m, int n, int m_gemm, int n_gemm, int64_t t,
                                         int& row, int& col)
{
  int64_t const w1 = n - n_gemm;
  int64_t const count1 = int64_t(m) * w1;
  if (t < count1) {
    row = int(t / w1);
    col = n_gemm + int(t - int64_t(row) * w1);
  } else {
    int64_t const t2 = t - count1;
    row = m_gemm + int(t2 / n_gemm);
    col = int(t2 - int64_t(row - m_gemm) * n_gemm);
  }
}

// Hands each warp of the grid its edge outputs in turn: f(batch, row, col), called by
// every lane of the warp (`per_batch` outputs a batch, `total` over the batch).
template <class F>
__device__ __forceinline__ void for_each_output(int m, int n, int m_gemm, int n_gemm,
                                                int64_t per_batch, int64_t total, F&& f)
{
  int64_t const warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  for (int64_t w = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); w < total;
       w += warps) {
    int64_t const bz = w / per_batch;
    int row, col;
    position(m, n, m_gemm, n_gemm, w - bz * per_batch, row, col);
    f(bz, row, col);
  }
}

}  // namespace cs_edges
