// argmax / argmin of reduce_rows.cu on rows the harness's random inputs never hold: all -inf,
// all +inf, NaNs, ties, signed zeros; row-major rows and rows side by side, few rows (split
// over CTAs) and many. Each result is compared with torch's rule (the first NaN, else the
// first extreme). Build and run on a GPU machine, from the repository root:
//   nvcc -O3 -arch=sm_90a -std=c++17 -Icutlass-templates/include \
//     scripts/probes/argmax_specials.cu -o /tmp/argmax_specials && /tmp/argmax_specials
// It prints one line per case and exits 1 if any index differs.
#include "../../cutlass-templates/reduce_rows.cu"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

static float value(int row, int64_t j, int64_t k)
{
  float const inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  switch (row % 7) {
    case 0: return -inf;                                     // argmax: 0
    case 1: return inf;                                      // argmin: 0
    case 2: return (j == k / 3 || j == k - 2) ? nan : 1.0f;  // the first NaN
    case 3: return (j == 7 || j == k / 2 || j == k - 1) ? 3.0f : -3.0f;  // ties: the first
    case 4: return (j % 2) ? 0.0f : -0.0f;                   // signed zeros compare equal
    case 5: return j == k - 1 ? inf : float(j % 1000) * 0.001f;  // the last element wins
    default: return std::sin(float(j) * 0.7f + float(row));
  }
}

static int64_t expect(const std::vector<float>& x, bool argmax)
{
  int64_t best = 0;
  for (int64_t j = 0; j < int64_t(x.size()); ++j) {
    if (std::isnan(x[best])) break;
    if (std::isnan(x[j]) || (argmax ? x[j] > x[best] : x[j] < x[best])) best = j;
  }
  return best;
}

int main()
{
  int bad = 0;
  struct Case { int64_t m, k; int layout; };
  for (Case c : {Case{6, 100000, CS_LAYOUT_ROW}, Case{4096, 64, CS_LAYOUT_ROW}, Case{14, 3001, CS_LAYOUT_ROW},
                 Case{6, 100000, CS_LAYOUT_COL}, Case{4096, 64, CS_LAYOUT_COL}, Case{1001, 3000, CS_LAYOUT_COL}}) {
    bool const row = c.layout == CS_LAYOUT_ROW;
    std::vector<float> a(size_t(c.m * c.k));
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.k; ++j) a[size_t(row ? i * c.k + j : j * c.m + i)] = value(int(i), j, c.k);
    float* da = nullptr;
    int64_t* dd = nullptr;
    cudaMalloc(&da, a.size() * sizeof(float));
    cudaMalloc(&dd, size_t(c.m) * sizeof(int64_t));
    cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice);
    for (int kind : {CS_REDUCE_ARGMAX, CS_REDUCE_ARGMIN}) {
      cs_problem p;
      std::memset(&p, 0, sizeof(p));
      p.abi_version = CS_ABI_VERSION;
      p.family = CS_FAMILY_REDUCE;
      p.m = c.m; p.n = 1; p.k = c.k; p.batch = 1;
      p.dtype_ab = CS_DTYPE_F32; p.dtype_cd = CS_DTYPE_I64; p.dtype_acc = CS_DTYPE_F32;
      p.layout_a = c.layout; p.layout_cd = CS_LAYOUT_ROW;
      p.a = da; p.d = dd; p.lda = row ? c.k : c.m; p.ldd = 1;
      p.batch_stride_a = c.m * c.k; p.batch_stride_d = c.m;
      p.reduce = kind;
      p.scale_a = p.scale_b = p.scale_d = 1.0f;
      uint64_t ws = 0;
      cutesmith_workspace_bytes(&p, &ws);
      void* dw = nullptr;
      if (ws) cudaMalloc(&dw, ws);
      p.workspace = dw; p.workspace_bytes = ws;
      cudaMemset(dd, 0xFF, size_t(c.m) * sizeof(int64_t));
      int32_t const rc = cutesmith_launch(&p, nullptr);
      std::vector<int64_t> got(size_t(c.m));
      cudaMemcpy(got.data(), dd, got.size() * sizeof(int64_t), cudaMemcpyDeviceToHost);
      int wrong = 0;
      for (int64_t i = 0; i < c.m; ++i) {
        std::vector<float> x(size_t(c.k));
        for (int64_t j = 0; j < c.k; ++j) x[size_t(j)] = value(int(i), j, c.k);
        int64_t const want = expect(x, kind == CS_REDUCE_ARGMAX);
        if (got[size_t(i)] != want) {
          if (wrong < 3) std::printf("    row %lld (kind of row %lld): got %lld want %lld\n", (long long)i,
                                     (long long)(i % 7), (long long)got[size_t(i)], (long long)want);
          ++wrong;
        }
      }
      std::printf("%s %s m=%lld k=%lld: rc %d, %d of %lld rows wrong\n", kind == CS_REDUCE_ARGMAX ? "argmax" : "argmin",
                  row ? "rows" : "side by side", (long long)c.m, (long long)c.k, rc, wrong, (long long)c.m);
      bad += wrong + (rc != 0);
      if (dw) cudaFree(dw);
    }
    cudaFree(da);
    cudaFree(dd);
  }
  std::printf(bad ? "FAILED\n" : "all correct\n");
  return bad ? 1 : 0;
}
