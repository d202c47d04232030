// cutesmith template: row reductions (sum, mean, max, min, logsumexp, L2 norm, argmax,
// argmin, cross entropy), f32 / f16 / bf16 in, the same type or f32 out (int64 indices for
// argmax / argmin), row-major rows or rows side by side, any batch.
//
//   D[b] = chain(reduce(A[b]))   (CS_FAMILY_REDUCE): each of the m rows of A[b] (k elements)
//     SUM: sum(x)   MEAN: sum(x) / k   MAX / MIN: max(x) / min(x), NaN if a NaN is read
//     LOGSUMEXP: max(x) + log(sum(exp(x - max(x))))   L2: sqrt(sum(x^2))
//     ARGMAX / ARGMIN: the index of the first largest / smallest x, or of the first NaN
//     (torch.argmax / argmin); D is int64 and there is no chain or [[before]] op
//     CROSS_ENTROPY: logsumexp(x) - x[t], t = targets[b * m + i] (0 for t == ignore_index);
//     row-major rows, no chain or [[before]] op
//   p.total SUM / MEAN (a cross entropy, SUM or MEAN, no chain): D[b] is the sum of batch
//   b's row values, or their mean (over the rows not ignored, for a cross entropy), instead
//   of one a row: torch.mean(x) or torch.sum(x) of a whole (B, M, K) item, a loss's mean
//
// layout_a ROW: element j of row i of batch b at b * batch_stride_a + i * lda + j (torch.sum
// over the last dim); COL: at b * batch_stride_a + j * lda + i (a reduction over dim 1 of a
// (B, K, M) tensor: batch B, m = M rows side by side, lda = M). D is m x 1: element i of
// batch b at b * batch_stride_d + i * ldd. Each reduced y (fp32) goes through
// cs_chain::apply(y, t), t[] the chain's operands at (b, i, 0). With [[before]] ops
// (cs_before), each element x of A at (b, i, j) is first cs_before::apply(x, t), t[] their
// operands there (a loss's target, a mask: MATRIX operands shaped and laid out like A),
// loaded element by element beside A's vectors.
//
// Math in fp32, one rounding on store. Each thread keeps a running state per row it reads
// (a sum, an extreme, or logsumexp's (max, sum of exp(x - max)), updated once a vector), the
// states merge by shuffles, shared memory and, for split rows, a finish kernel.
//   Row-major: G lanes a row (G = 4-32 by the row's length), 16-byte vectors from the row's
//   first 16-byte boundary (a head and a tail element by element, so any lda works), up to
//   CS_ROW_VECS vectors a lane in flight. Too few rows to fill the GPU: each row is split
//   into P parts (a warp each) whose states go to the workspace; cs_reduce_finish merges a
//   row's P states and writes D.
//   Rows side by side: a CTA of CS_THREADS covers WI x 32 x R adjacent rows (R rows a thread:
//   a 16-byte vector where A, lda and the batch stride allow, else one element, coalesced
//   across the warp either way) and its other warps split k; CS_COL_UNROLL steps of k in
//   flight a thread; warps merge in shared memory. Few rows: few warps along the rows, more
//   along k, and k split over CTAs through the workspace as above.
//
// Workspace: split rows, batch * m * P * 8 bytes (one state a part: a row's parts
// adjacent for row-major rows, part-major for rows side by side); a smaller one than
// asked for makes P shrink (CS_ERR_WORKSPACE only if P < 1). A total also keeps each row's
// (value, counted) pair, batch * m * 8 bytes, at the workspace's end
// (CS_ERR_WORKSPACE if that does not fit); cs_reduce_total adds a batch's in double, in a
// fixed order. CS_ERR_UNSUPPORTED: other families, an unknown cs_reduce (or one unlike
// CS_WL_REDUCE), a total but for a cross entropy, SUM or MEAN (or with a chain), a cross
// entropy without its targets (or
// rows side by side, or ops), n != 1, layout_cd not ROW, dtype_ab not f32 / f16 / bf16 or
// dtype_cd neither it nor f32, lda below a row (ROW) or a column (COL), pointers not
// element-aligned, chain operands unlike the chain's. m, k or batch 0: CS_OK, nothing done.
//
// Validated by the project's fp64 checker on every shape and seed of the reduce workloads
// and GPU test fixtures. Measured with `cutesmith bench reduce` on an H100 80GB HBM3, as
// fractions of a device-to-device copy of the same bytes (bench/reduce.md,
// bench/reduce-h100.md): row-major f32 sum 99%, KernelBench's sum / mean / max / min over dim
// 1 of [128, 4096, 4095] f32 91-93% (rows side by side, no vectors), an L2 norm over a middle
// dim in bf16 (vectors) 100%, the logsumexp of 4096 x 32000 bf16 logits 89%.
//
// Parameters (-DNAME=VALUE):
//   CS_THREADS        256   threads a CTA (a multiple of 64, at most 1024)
//   CS_ROW_VECS       4     row-major: 16-byte vectors a lane loads before it adds them
//   CS_COL_UNROLL     8     rows side by side: steps of k a thread loads before it adds them
//   CS_COL_PART_STEPS 768   rows side by side: k split in parts of at most this many steps
//                           (partials part-major in the workspace, a finish kernel)
//   CS_COL_SCALAR_ROWS 1    rows side by side that vectors cannot read (lda off 16 bytes):
//                           rows a thread, 32 apart, element by element (1, 2, 4)
//   CS_WAVES          2     split rows while fewer than this many waves of threads would run
//   CS_ROW_PART_STEPS 2     row-major rows split: at least this many steps of a warp's
//                           CS_ROW_VECS vectors a part
//   CS_MAX_PARTS      16384 most parts a row is split into (one row of a whole tensor's
//                           elements, a loss, needs about 2 waves' warps of them)
//
// Never allocates or synchronizes.

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cutesmith_abi.h"
#include "cutesmith_chain.cuh"   // cs_chain: the workload's chain, or the identity
#include "cutesmith_rows.cuh"    // element types and conversions, launch-planning helpers

// The ops on each element before the reduction ([[before]]: cs_before, generated after the
// chain when the workload has them), or the identity. Their operands take the first slots,
// indexed like A (see cs_before_at).
#ifndef CS_BEFORE_DEFINED
#define CS_BEFORE_DEFINED 1
struct cs_before : cs_identity_chain {};
#endif

// Element (i, j) of batch b's A, x, after the [[before]] ops.
__device__ __forceinline__ float cs_pre(const cs_problem& p, float x, int64_t b, int64_t i, int64_t j)
{
  if constexpr (cs_before::kIdentity) return x;
  else return cs_before_at<cs_before>(p, x, b, i, j);
}

#ifndef CS_THREADS
#define CS_THREADS 256
#endif
#ifndef CS_ROW_VECS
#define CS_ROW_VECS 4
#endif
#ifndef CS_COL_UNROLL
#define CS_COL_UNROLL 8
#endif
#ifndef CS_WAVES
#define CS_WAVES 2
#endif
#ifndef CS_COL_SCALAR_ROWS
#define CS_COL_SCALAR_ROWS 1
#endif
#ifndef CS_COL_PART_STEPS
#define CS_COL_PART_STEPS 768
#endif
#ifndef CS_MAX_PARTS
#define CS_MAX_PARTS 16384
#endif
#ifndef CS_ROW_PART_STEPS
#define CS_ROW_PART_STEPS 2
#endif

static constexpr int kThreads = CS_THREADS;
static constexpr int kRowVecs = CS_ROW_VECS;
static constexpr int kColUnroll = CS_COL_UNROLL;
static constexpr int kWaves = CS_WAVES;
static constexpr int64_t kMaxParts = CS_MAX_PARTS;
static constexpr int kWarps = kThreads / 32;
static constexpr int kColScalarRows = CS_COL_SCALAR_ROWS;
static constexpr int64_t kColPartSteps = CS_COL_PART_STEPS;

static_assert(kThreads % 64 == 0 && kThreads >= 64 && kThreads <= 1024, "CS_THREADS: a multiple of 64, 64-1024");
static_assert(kRowVecs == 1 || kRowVecs == 2 || kRowVecs == 4 || kRowVecs == 8, "CS_ROW_VECS: 1, 2, 4 or 8");
static_assert(kColUnroll >= 1 && kColUnroll <= 16, "CS_COL_UNROLL: 1-16");
static_assert(kWaves >= 1 && kMaxParts >= 1, "CS_WAVES, CS_MAX_PARTS");
static_assert(kColScalarRows == 1 || kColScalarRows == 2 || kColScalarRows == 4, "CS_COL_SCALAR_ROWS: 1, 2 or 4");
static_assert(kColPartSteps >= 1, "CS_COL_PART_STEPS");

// What this build compiles: a workload instance its family, types and reduction (the rest is
// rejected at run time); the template compiled alone, everything.
#if defined(CS_WL_FAMILY)
static constexpr bool kBuildReduce = CS_WL_FAMILY == CS_FAMILY_REDUCE;
#else
static constexpr bool kBuildReduce = true;
#endif
#if defined(CS_WL_DTYPE_AB) && defined(CS_WL_DTYPE_CD)
static constexpr int kWlIn = CS_WL_DTYPE_AB, kWlOut = CS_WL_DTYPE_CD;
#else
static constexpr int kWlIn = -1, kWlOut = -1;
#endif
#if defined(CS_WL_REDUCE)
static constexpr int kWlReduce = CS_WL_REDUCE;
#else
static constexpr int kWlReduce = -1;
#endif
#if defined(CS_WL_LAYOUT_A)
static constexpr bool kBuildRow = CS_WL_LAYOUT_A == CS_LAYOUT_ROW;
static constexpr bool kBuildCol = CS_WL_LAYOUT_A == CS_LAYOUT_COL;
#else
static constexpr bool kBuildRow = true, kBuildCol = true;
#endif

// ---------------------------------------------------------------------------------------
// The running state of a reduction and its updates
// ---------------------------------------------------------------------------------------

// SUM, MEAN, L2: a is the sum (of x, or of x^2) and b its compensation (Kahan: the sum is
// a - b), so that a thread's long run of adds (2048 on KernelBench's sum over a middle dim)
// costs no more than a few roundings: without it, a sum of 4096 f32 rows side by side
// reached 2.2 u times the sum of |x| and a later seed failed the check's 4 u. MAX, MIN: a is
// the extreme so far (NaN once a NaN was read). LOGSUMEXP: a is the largest x (NaN skipped), b the sum of exp(x - a) (NaN
// once a NaN was read, which the result keeps). ARGMAX, ARGMIN: a is the best value so far
// and b holds the bits of its index (an int; moved, never computed on as a float). The
// order they merge by is total (a NaN first, then the value, then the smaller index), so
// any order of merges finds the first extreme.
struct CsAcc {
  float a, b;
};

template <int KIND>
static constexpr bool cs_is_arg = KIND == CS_REDUCE_ARGMAX || KIND == CS_REDUCE_ARGMIN;
// A cross entropy's running state is its row's logsumexp's.
template <int KIND>
static constexpr bool cs_is_lse = KIND == CS_REDUCE_LOGSUMEXP || KIND == CS_REDUCE_CROSS_ENTROPY;

template <int KIND>
__device__ __forceinline__ CsAcc cs_init()
{
  if constexpr (KIND == CS_REDUCE_MAX || cs_is_lse<KIND>) return {-INFINITY, 0.0f};
  else if constexpr (KIND == CS_REDUCE_MIN) return {INFINITY, 0.0f};
  else if constexpr (KIND == CS_REDUCE_ARGMAX) return {-INFINITY, __int_as_float(0x7fffffff)};
  else if constexpr (KIND == CS_REDUCE_ARGMIN) return {INFINITY, __int_as_float(0x7fffffff)};
  else return {0.0f, 0.0f};
}

// Merges state o into s.
// 2^x by the SFU (ex2.approx: 2^-22 relative; flushes what would be subnormal to 0, where
// exp(x - max) no longer adds to a sum of at least 1). exp2f added a range fix-up to each.
__device__ __forceinline__ float cs_exp2(float x)
{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Adds y to a compensated sum.
__device__ __forceinline__ void cs_kahan(CsAcc& s, float y)
{
  float const v = y - s.b;
  float const t = s.a + v;
  s.b = (t - s.a) - v;
  s.a = t;
}

template <int KIND>
__device__ __forceinline__ void cs_merge(CsAcc& s, CsAcc o)
{
  if constexpr (cs_is_arg<KIND>) {
    int const si = __float_as_int(s.b), oi = __float_as_int(o.b);
    bool const sn = s.a != s.a, on = o.a != o.a;
    bool const better = KIND == CS_REDUCE_ARGMAX ? o.a > s.a : o.a < s.a;
    bool const take = (on || sn) ? (on && (!sn || oi < si)) : (better || (o.a == s.a && oi < si));
    if (take) s = o;
  } else if constexpr (KIND == CS_REDUCE_MAX) {
    s.a = (o.a > s.a || o.a != o.a) ? o.a : s.a;
  } else if constexpr (KIND == CS_REDUCE_MIN) {
    s.a = (o.a < s.a || o.a != o.a) ? o.a : s.a;
  } else if constexpr (cs_is_lse<KIND>) {
    float const m = fmaxf(s.a, o.a);
    if (m != -INFINITY) {
      s.b = s.b * cs_exp2((s.a - m) * 1.4426950408889634f) + o.b * cs_exp2((o.a - m) * 1.4426950408889634f);
      s.a = m;
    } else {
      s.b = s.b + o.b;   // both empty (or NaN)
    }
  } else {
    cs_kahan(s, o.a);
    cs_kahan(s, -o.b);
  }
}

// The sum of N values as a tree (independent adds, log2 N deep).
template <int N>
__device__ __forceinline__ float cs_pairwise(const float (&x)[N])
{
  float t[N];
#pragma unroll
  for (int e = 0; e < N; ++e) t[e] = x[e];
#pragma unroll
  for (int w = 1; w < N; w *= 2)
#pragma unroll
    for (int e = 0; e + w < N; e += 2 * w) t[e] += t[e + w];
  return t[0];
}

// Adds N values (one vector's, several rows' of one column, or one element) to s; value e
// is element j0 + e * js of the row (the index argmax / argmin keep).
template <int KIND, int N>
__device__ __forceinline__ void cs_add(CsAcc& s, const float (&x)[N], int64_t j0, int64_t js)
{
  if constexpr (cs_is_arg<KIND>) {
    // Most values lose: the values' extreme, NaN if any value is (max.NaN / min.NaN),
    // decides whether any element needs the exact merge. An equal extreme takes it too: a
    // thread's elements do not arrive in index order (a row's tail comes before its vectors).
    float m = x[0];
#pragma unroll
    for (int e = 1; e < N; ++e) {
      if constexpr (KIND == CS_REDUCE_ARGMAX) asm("max.NaN.f32 %0, %0, %1;" : "+f"(m) : "f"(x[e]));
      else asm("min.NaN.f32 %0, %0, %1;" : "+f"(m) : "f"(x[e]));
    }
    if (m != m) {   // a NaN: each element in turn (the first NaN wins)
#pragma unroll
      for (int e = 0; e < N; ++e) cs_merge<KIND>(s, CsAcc{x[e], __int_as_float(int(j0 + e * js))});
    } else if (KIND == CS_REDUCE_ARGMAX ? m >= s.a : m <= s.a) {
      // The vector's best is its first element equal to m: merge that one.
      int first = N - 1;
#pragma unroll
      for (int e = N - 2; e >= 0; --e) first = x[e] == m ? e : first;
      cs_merge<KIND>(s, CsAcc{m, __int_as_float(int(j0 + first * js))});
    }
  } else if constexpr (cs_is_lse<KIND>) {
    float mv = x[0];
#pragma unroll
    for (int e = 1; e < N; ++e) mv = fmaxf(mv, x[e]);
    float const m = fmaxf(s.a, mv);
    if (m == -INFINITY) {
#pragma unroll
      for (int e = 0; e < N; ++e) s.b += x[e] != x[e] ? x[e] : 0.0f;   // keeps a NaN
      return;
    }
    // exp(d) as exp2(d log2 e): one multiply and ex2 (2 ulp); the multiply's rounding adds
    // |d| u relative, little where the terms matter (d near 0).
    float acc = s.b * cs_exp2((s.a - m) * 1.4426950408889634f);
#pragma unroll
    for (int e = 0; e < N; ++e) acc += cs_exp2((x[e] - m) * 1.4426950408889634f);
    s.a = m;
    s.b = acc;
  } else if constexpr (KIND == CS_REDUCE_MAX || KIND == CS_REDUCE_MIN) {
#pragma unroll
    for (int e = 0; e < N; ++e) cs_merge<KIND>(s, CsAcc{x[e], 0.0f});
  } else if constexpr (KIND == CS_REDUCE_L2) {
    // Pairwise within the vector, then one add to the running sum.
    float q[N];
#pragma unroll
    for (int e = 0; e < N; ++e) q[e] = x[e] * x[e];
    cs_kahan(s, cs_pairwise<N>(q));
  } else {
    cs_kahan(s, cs_pairwise<N>(x));
  }
}

// argmax / argmin of one value x at index j, where the thread's indices only grow (rows side
// by side): a strictly better value or a first NaN takes the place, without a branch. A
// state no value took keeps the empty index; cs_reduce_cols then gives it the first index
// read (a row of -inf for argmax).
template <int KIND>
__device__ __forceinline__ void cs_arg_next(CsAcc& s, float x, int64_t j)
{
  bool const take = (KIND == CS_REDUCE_ARGMAX ? x > s.a : x < s.a) || (x != x && s.a == s.a);
  s.a = take ? x : s.a;
  s.b = take ? __int_as_float(int(j)) : s.b;
}

template <int KIND>
__device__ __forceinline__ void cs_add1(CsAcc& s, float x, int64_t j)
{
  float const v[1] = {x};
  cs_add<KIND, 1>(s, v, j, 1);
}

// ---------------------------------------------------------------------------------------
// Element types (CsDtype, cs_f32, cs_from_f32: cutesmith_rows.cuh)
// ---------------------------------------------------------------------------------------

// The elements of one 16-byte vector, as fp32.
template <class T>
__device__ __forceinline__ void cs_unpack(uint4 r, float (&x)[16 / sizeof(T)])
{
  if constexpr (sizeof(T) == 4) {
    x[0] = __uint_as_float(r.x); x[1] = __uint_as_float(r.y);
    x[2] = __uint_as_float(r.z); x[3] = __uint_as_float(r.w);
  } else {
    unsigned const w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float2 f;
      if constexpr (std::is_same_v<T, __half>) f = __half22float2(*reinterpret_cast<const __half2*>(&w[q]));
      else f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[q]));
      x[2 * q] = f.x;
      x[2 * q + 1] = f.y;
    }
  }
}

// The row values when D holds their total (a cross entropy's, a sum's or a mean's: every
// element of a batch item): one (value, counted) pair a row at the workspace's end (after
// any split rows' states), batch * m of them.
__host__ __device__ __forceinline__ uint64_t cs_total_bytes(const cs_problem& p)
{
  return p.total != CS_TOTAL_NONE ? uint64_t(p.batch * p.m) * sizeof(float2) : 0;
}
__device__ __forceinline__ float2* cs_total_area(const cs_problem& p)
{
  uintptr_t const end = reinterpret_cast<uintptr_t>(p.workspace) + p.workspace_bytes;
  return reinterpret_cast<float2*>((end - cs_total_bytes(p)) & ~uintptr_t(7));
}

// Element t of row i of batch b of A, as fp32 (a cross entropy's target logit).
__device__ __forceinline__ float cs_a_at(const cs_problem& p, int64_t b, int64_t i, int64_t t)
{
  int64_t const o = b * p.batch_stride_a + i * p.lda + t;
  if (p.dtype_ab == CS_DTYPE_F32) return static_cast<const float*>(p.a)[o];
  if (p.dtype_ab == CS_DTYPE_F16) return cs_f32(static_cast<const __half*>(p.a)[o]);
  return cs_f32(static_cast<const __nv_bfloat16*>(p.a)[o]);
}

// Row i of batch b's result from its state: the reduction's last step, the chain, the store.
template <int KIND, class TD>
__device__ __forceinline__ void cs_store(const cs_problem& p, int64_t b, int64_t i, CsAcc s)
{
  if constexpr (KIND == CS_REDUCE_CROSS_ENTROPY) {
    // logsumexp less the target's logit; a row with the ignore index is 0 and not counted,
    // a target outside the row NaN (torch stops on a device assert there). (max - x[t])
    // first, as torch's log_softmax: exact near the max, where (max + log(sum)) - x[t]
    // rounded at the logits' size a loss near 0 (a confident row).
    int64_t const t = p.targets[b * p.m + i];
    bool const kept = t != p.ignore_index;
    float y = 0.0f;
    if (kept) y = t >= 0 && t < p.k ? (s.a - cs_a_at(p, b, i, t)) + logf(s.b) : __int_as_float(0x7fc00000);
    if (p.total == CS_TOTAL_NONE) static_cast<TD*>(p.d)[b * p.batch_stride_d + i * p.ldd] = cs_from_f32<TD>(y);
    else cs_total_area(p)[b * p.m + i] = make_float2(y, kept ? 1.0f : 0.0f);
  } else if constexpr (cs_is_arg<KIND>) {
    static_cast<int64_t*>(p.d)[b * p.batch_stride_d + i * p.ldd] = int64_t(__float_as_int(s.b));
  } else {
    float y;
    if constexpr (KIND == CS_REDUCE_SUM) y = s.a - s.b;
    else if constexpr (KIND == CS_REDUCE_MEAN) y = float((double(s.a) - double(s.b)) / double(p.k));
    else if constexpr (KIND == CS_REDUCE_LOGSUMEXP) y = s.a + logf(s.b);
    else if constexpr (KIND == CS_REDUCE_L2) y = sqrtf(s.a - s.b);
    else y = s.a;
    if constexpr (!cs_chain::kIdentity) y = cs_chain_at<cs_chain>(p, y, b, i, 0);
    // A sum's or mean's row value under a total (the others take none: cs_reduce_check;
    // compiled for those two alone, as the extra address arithmetic made MAX / MIN's
    // column kernels spill).
    if constexpr (KIND == CS_REDUCE_SUM || KIND == CS_REDUCE_MEAN) {
      if (p.total != CS_TOTAL_NONE) {
        cs_total_area(p)[b * p.m + i] = make_float2(y, 1.0f);
        return;
      }
    }
    static_cast<TD*>(p.d)[b * p.batch_stride_d + i * p.ldd] = cs_from_f32<TD>(y);
  }
}

// Merges the states of a group of G lanes (G a power of two, lanes aligned to G).
template <int KIND, int G>
__device__ __forceinline__ CsAcc cs_group_merge(CsAcc s)
{
  unsigned const lane = threadIdx.x & 31u;
  unsigned const mask = G == 32 ? 0xffffffffu : ((1u << G) - 1u) << (lane & ~unsigned(G - 1));
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) {
    CsAcc q;
    q.a = __shfl_xor_sync(mask, s.a, o);
    q.b = __shfl_xor_sync(mask, s.b, o);
    cs_merge<KIND>(s, q);
  }
  return s;
}

// ---------------------------------------------------------------------------------------
// Row-major rows: G lanes a (row, part)
// ---------------------------------------------------------------------------------------

template <class TA, class TD, int KIND, int G>
__global__ void __launch_bounds__(kThreads)
cs_reduce_rows(cs_problem p, int64_t tasks, int64_t parts, int64_t chunk, CsAcc* ws)
{
  constexpr int V = 16 / sizeof(TA);
  constexpr int64_t kGroups = kThreads / G;
  int const lane = int(threadIdx.x) % G;
  for (int64_t t = int64_t(blockIdx.x) * kGroups + threadIdx.x / G; t < tasks; t += int64_t(gridDim.x) * kGroups) {
    int64_t const row = t / parts, part = t % parts;
    int64_t const b = row / p.m, i = row % p.m;
    TA const* x = static_cast<TA const*>(p.a) + b * p.batch_stride_a + i * p.lda;
    int64_t head = int64_t((16u - (reinterpret_cast<uintptr_t>(x) & 15u)) & 15u) / int64_t(sizeof(TA));
    if (head > p.k) head = p.k;
    int64_t const nv = (p.k - head) / V;
    CsAcc s = cs_init<KIND>();
    if (part == 0)
      for (int64_t j = lane; j < head; j += G) cs_add1<KIND>(s, cs_pre(p, cs_f32(x[j]), b, i, j), j);
    if (part == parts - 1)
      for (int64_t j = head + nv * V + lane; j < p.k; j += G) cs_add1<KIND>(s, cs_pre(p, cs_f32(x[j]), b, i, j), j);
    uint4 const* xv = reinterpret_cast<uint4 const*>(x + head);
    int64_t const v1 = part * chunk + chunk < nv ? part * chunk + chunk : nv;
    int64_t v = part * chunk + lane;
    for (; v + int64_t(kRowVecs - 1) * G < v1; v += int64_t(kRowVecs) * G) {
      uint4 r[kRowVecs];
#pragma unroll
      for (int u = 0; u < kRowVecs; ++u) r[u] = __ldg(xv + v + u * G);
      // The [[before]] ops' operands for the same vectors, in flight beside them.
      float t[cs_before::kIdentity ? 1 : kRowVecs][V][CS_MAX_OPERANDS];
      if constexpr (!cs_before::kIdentity) {
#pragma unroll
        for (int u = 0; u < kRowVecs; ++u) cs_before_operands<cs_before, V, true>(p, b, i, head + (v + u * G) * V, t[u]);
      }
#pragma unroll
      for (int u = 0; u < kRowVecs; ++u) {
        float e[V];
        cs_unpack<TA>(r[u], e);
        if constexpr (!cs_before::kIdentity) cs_before_apply<cs_before, V>(e, t[u]);
        cs_add<KIND, V>(s, e, head + (v + u * G) * V, 1);
      }
    }
    for (; v < v1; v += G) {
      float e[V];
      cs_unpack<TA>(__ldg(xv + v), e);
      if constexpr (!cs_before::kIdentity) cs_before_run<cs_before, V, true>(p, e, b, i, head + v * V);
      cs_add<KIND, V>(s, e, head + v * V, 1);
    }
    s = cs_group_merge<KIND, G>(s);
    if (lane == 0) {
      if (parts == 1) cs_store<KIND, TD>(p, b, i, s);
      else ws[t] = s;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Rows side by side: a CTA covers WI x 32 x R adjacent rows, its kWarps / WI warps split k
// ---------------------------------------------------------------------------------------

template <class TA, class TD, int KIND, int R, bool VEC>
__global__ void __launch_bounds__(kThreads)
cs_reduce_cols(cs_problem p, int wi, int64_t igroups, int64_t parts, int64_t chunk, CsAcc* ws)
{
  // An index reduction keeps at most 32 values a thread in flight: 8 rows x 16 steps ran at
  // 79% of the copy (bf16 over a middle dim, an H200), 8 x 4 at 84%.
  constexpr int kU = cs_is_arg<KIND> && R * kColUnroll > 32 ? (32 / R > 0 ? 32 / R : 1) : kColUnroll;
  __shared__ CsAcc part_state[kThreads][R];
  int const warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  int const iw = warp % wi, jw = warp / wi, wj = kWarps / wi;
  int64_t const tasks = p.batch * igroups * parts;
  for (int64_t t = blockIdx.x; t < tasks; t += gridDim.x) {
    // CTAs adjacent in launch order read adjacent columns of the same rows of A (whole DRAM
    // pages at once, as a row-major read does), then the next part of k, then the next batch.
    int64_t const ig = t % igroups, pb = t / igroups, part = pb % parts, b = pb / parts;
    // The thread's rows: R adjacent ones read as a vector, or (element by element) R rows
    // 32 apart, so that each load instruction of the warp reads 32 adjacent rows.
    int64_t const wbase = (ig * wi + iw) * 32 * R;
    auto const row_of = [&](int r) -> int64_t { return VEC ? wbase + lane * R + r : wbase + r * 32 + lane; };
    int64_t const j0 = part * chunk, j1 = j0 + chunk < p.k ? j0 + chunk : p.k;
    TA const* x = static_cast<TA const*>(p.a) + b * p.batch_stride_a;
    CsAcc s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = cs_init<KIND>();
    if (row_of(0) < p.m) {
      bool const whole = row_of(R - 1) < p.m;
      int64_t j = j0 + jw;
      if (whole) {
        for (; j + int64_t(kU - 1) * wj < j1; j += int64_t(kU) * wj) {
          float e[kU][R];
#pragma unroll
          for (int u = 0; u < kU; ++u) {
            TA const* at = x + (j + u * wj) * p.lda;
            if constexpr (VEC) {
              cs_unpack<TA>(__ldg(reinterpret_cast<uint4 const*>(at + row_of(0))), e[u]);
            } else {
#pragma unroll
              for (int r = 0; r < R; ++r) e[u][r] = cs_f32(__ldg(at + row_of(r)));
            }
            if constexpr (!cs_before::kIdentity) {
              if constexpr (VEC) {
                cs_before_run<cs_before, R, false>(p, e[u], b, row_of(0), j + u * wj);
              } else {
#pragma unroll
                for (int r = 0; r < R; ++r) e[u][r] = cs_pre(p, e[u][r], b, row_of(r), j + u * wj);
              }
            }
          }
          // Each row's kU values at once: one compensated add (a tree before it),
          // one rescale for logsumexp.
#pragma unroll
          for (int r = 0; r < R; ++r) {
            if constexpr (cs_is_arg<KIND>) {
              // An index: each value as it comes, in index order (j grows).
#pragma unroll
              for (int u = 0; u < kU; ++u) cs_arg_next<KIND>(s[r], e[u][r], j + u * wj);
            } else {
              float col[kU];
#pragma unroll
              for (int u = 0; u < kU; ++u) col[u] = e[u][r];
              cs_add<KIND, kU>(s[r], col, j, wj);
            }
          }
        }
        // An index the strict steps never took (every value read was the empty extreme:
        // -inf for argmax, +inf for argmin) is the first one read, before the elementwise
        // tail (whose exact merge then keeps it).
        if constexpr (cs_is_arg<KIND>) {
          if (j != j0 + jw) {
#pragma unroll
            for (int r = 0; r < R; ++r)
              if (__float_as_int(s[r].b) == 0x7fffffff) s[r].b = __int_as_float(int(j0 + jw));
          }
        }
      }
      for (; j < j1; j += wj)
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (row_of(r) < p.m) cs_add1<KIND>(s[r], cs_pre(p, cs_f32(x[j * p.lda + row_of(r)]), b, row_of(r), j), j);
    }
    // The warps along k merge in shared memory; the first of them finishes.
    if (wj > 1) {
#pragma unroll
      for (int r = 0; r < R; ++r) part_state[threadIdx.x][r] = s[r];
      __syncthreads();
      if (jw == 0) {
        for (int q = 1; q < wj; ++q)
#pragma unroll
          for (int r = 0; r < R; ++r) cs_merge<KIND>(s[r], part_state[threadIdx.x + q * wi * 32][r]);
      }
      __syncthreads();
    }
    if (jw == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (row_of(r) >= p.m) break;
        // Part-major partials: the warp's stores are adjacent rows (row-major ones were a
        // 32-byte sector a thread, the whole input's size again in writes at 512 parts).
        if (parts == 1) cs_store<KIND, TD>(p, b, row_of(r), s[r]);
        else ws[part * p.batch * p.m + b * p.m + row_of(r)] = s[r];
      }
    }
  }
}

// A thread a row: merges the row's `parts` states, stored part-major (rows side by side's
// partials), and writes D.
template <class TD, int KIND>
__global__ void __launch_bounds__(256) cs_reduce_finish_cols(cs_problem p, int64_t rows, int64_t parts, const CsAcc* ws)
{
  for (int64_t row = int64_t(blockIdx.x) * 256 + threadIdx.x; row < rows; row += int64_t(gridDim.x) * 256) {
    CsAcc s = cs_init<KIND>();
    for (int64_t q = 0; q < parts; ++q) cs_merge<KIND>(s, ws[q * rows + row]);
    cs_store<KIND, TD>(p, row / p.m, row % p.m, s);
  }
}

// A warp a row: merges the row's `parts` states from the workspace (row-major rows'
// partials, a row's parts adjacent) and writes D.
template <class TD, int KIND>
__global__ void __launch_bounds__(256) cs_reduce_finish(cs_problem p, int64_t rows, int64_t parts, const CsAcc* ws)
{
  int const lane = int(threadIdx.x) % 32;
  for (int64_t row = (int64_t(blockIdx.x) * 256 + threadIdx.x) / 32; row < rows; row += int64_t(gridDim.x) * 8) {
    CsAcc s = cs_init<KIND>();
    for (int64_t q = lane; q < parts; q += 32) cs_merge<KIND>(s, ws[row * parts + q]);
    s = cs_group_merge<KIND, 32>(s);
    if (lane == 0) cs_store<KIND, TD>(p, row / p.m, row % p.m, s);
  }
}

// The same with a CTA a row, for rows of more than 256 parts: a whole reduction into one
// value (a loss: one row of 2^30 elements) has thousands, which 256 threads read in a few
// steps where one warp took hundreds of dependent ones. (With few parts a row, a CTA a row
// was slower: 16384 rows of 2 parts, 371 us against 357 for a warp a row.)
template <class TD, int KIND>
__global__ void __launch_bounds__(256) cs_reduce_finish_cta(cs_problem p, int64_t rows, int64_t parts, const CsAcc* ws)
{
  __shared__ CsAcc warp_state[8];
  int const lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    CsAcc s = cs_init<KIND>();
    for (int64_t q = threadIdx.x; q < parts; q += 256) cs_merge<KIND>(s, ws[row * parts + q]);
    s = cs_group_merge<KIND, 32>(s);
    if (lane == 0) warp_state[warp] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < 8; ++w) cs_merge<KIND>(s, warp_state[w]);
      cs_store<KIND, TD>(p, row / p.m, row % p.m, s);
    }
    __syncthreads();
  }
}

// A CTA a batch: the total of the batch's row values (their sum, or their mean over the rows
// counted: a cross entropy's ignored rows are not; none counted: 0 / 0, NaN, as torch's), in
// double and a fixed order, so the result does not depend on which rows finished first. A
// mean of row means is the batch item's mean (its rows are all k long).
template <class TD>
__global__ void __launch_bounds__(256) cs_reduce_total(cs_problem p)
{
  __shared__ double sum[256], count[256];
  float2 const* area = cs_total_area(p);
  for (int64_t b = blockIdx.x; b < p.batch; b += gridDim.x) {
    double s = 0.0, n = 0.0;
    for (int64_t i = threadIdx.x; i < p.m; i += 256) {
      float2 const v = area[b * p.m + i];
      s += double(v.x);
      n += double(v.y);
    }
    sum[threadIdx.x] = s;
    count[threadIdx.x] = n;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
      if (int(threadIdx.x) < w) {
        sum[threadIdx.x] += sum[threadIdx.x + w];
        count[threadIdx.x] += count[threadIdx.x + w];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      double const r = p.total == CS_TOTAL_MEAN ? sum[0] / count[0] : sum[0];
      static_cast<TD*>(p.d)[b * p.batch_stride_d] = cs_from_f32<TD>(float(r));
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------------------
// Host: checks, the plan (shared by cutesmith_workspace_bytes and cutesmith_launch), launch
// ---------------------------------------------------------------------------------------

static int32_t cs_reduce_check(const cs_problem& p, bool check_pointers)
{
  if (!kBuildReduce || p.family != CS_FAMILY_REDUCE) return CS_ERR_UNSUPPORTED;
  if (p.reduce < CS_REDUCE_SUM || p.reduce > CS_REDUCE_CROSS_ENTROPY) return CS_ERR_UNSUPPORTED;
  // A cross entropy: rows of logits (row-major), no ops, its targets. A total (one value a
  // batch item) of a cross entropy's, a sum's or a mean's rows, with no op after the rows.
  bool const ce = p.reduce == CS_REDUCE_CROSS_ENTROPY;
  bool const totals = ce || p.reduce == CS_REDUCE_SUM || p.reduce == CS_REDUCE_MEAN;
  if (p.total < CS_TOTAL_NONE || p.total > CS_TOTAL_MEAN) return CS_ERR_UNSUPPORTED;
  if (p.total != CS_TOTAL_NONE && (!totals || !cs_chain::kIdentity)) return CS_ERR_UNSUPPORTED;
  if (ce && (p.layout_a != CS_LAYOUT_ROW || !cs_chain::kIdentity || !cs_before::kIdentity)) return CS_ERR_UNSUPPORTED;
  if (kWlReduce >= 0 && p.reduce != kWlReduce) return CS_ERR_UNSUPPORTED;
  // An index (argmax, argmin) is int64 and nothing else is; an index reduction has no chain
  // or [[before]] op, and its rows fit an int.
  bool const arg = p.reduce == CS_REDUCE_ARGMAX || p.reduce == CS_REDUCE_ARGMIN;
  if (cs_dtype_bytes(p.dtype_ab) == 0) return CS_ERR_UNSUPPORTED;
  if (arg ? p.dtype_cd != CS_DTYPE_I64 : !(p.dtype_cd == p.dtype_ab || p.dtype_cd == CS_DTYPE_F32))
    return CS_ERR_UNSUPPORTED;
  if (arg && (!cs_chain::kIdentity || !cs_before::kIdentity || p.k > 0x7fffffffLL)) return CS_ERR_UNSUPPORTED;
  if (kWlIn >= 0 && (p.dtype_ab != kWlIn || p.dtype_cd != kWlOut)) return CS_ERR_UNSUPPORTED;
  if (p.layout_a == CS_LAYOUT_ROW ? !kBuildRow : p.layout_a == CS_LAYOUT_COL ? !kBuildCol : true)
    return CS_ERR_UNSUPPORTED;
  if (p.layout_cd != CS_LAYOUT_ROW || p.n != 1) return CS_ERR_UNSUPPORTED;
  if (p.m < 0 || p.k < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.k == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.m > INT64_MAX / p.batch || p.m * p.batch > INT64_MAX / p.k) return CS_ERR_UNSUPPORTED;
  bool const row = p.layout_a == CS_LAYOUT_ROW;
  int64_t const inner = row ? p.k : p.m, outer = row ? p.m : p.k;
  if (outer > 1 && p.lda < inner) return CS_ERR_UNSUPPORTED;
  if (p.m > 1 && p.ldd < 1) return CS_ERR_UNSUPPORTED;
  // Operand slots: the [[before]] ops' first (indexed like A), then the chain's (like D).
  constexpr int nb = cs_before::kOperands;
  if (p.num_operands != nb + cs_chain::kOperands) return CS_ERR_UNSUPPORTED;
  if (cs_chain::kOperands > 0 && cs_chain_first<cs_chain>() != nb) return CS_ERR_UNSUPPORTED;
  if (cs_before_operands_check<cs_before>(p, check_pointers) != CS_OK) return CS_ERR_UNSUPPORTED;
  if (cs_operand_slots_check<cs_chain>(p, nb, p.layout_cd, p.m, p.n, check_pointers) != CS_OK)
    return CS_ERR_UNSUPPORTED;
  if (check_pointers) {
    if (p.a == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    if (ce && (p.targets == nullptr || reinterpret_cast<uintptr_t>(p.targets) % 8 != 0)) return CS_ERR_UNSUPPORTED;
    if (reinterpret_cast<uintptr_t>(p.a) % uintptr_t(cs_dtype_bytes(p.dtype_ab)) != 0 ||
        reinterpret_cast<uintptr_t>(p.d) % uintptr_t(arg ? 8 : cs_dtype_bytes(p.dtype_cd)) != 0)
      return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

struct CsPlan {
  bool row = true, vec = false;   // vec: rows side by side read as 16-byte vectors
  int group = 32;   // row-major: lanes a row; rows side by side: R (rows a thread)
  int wi = kWarps;  // rows side by side: warps along the rows
  int64_t rows = 0, parts = 1, chunk = 0, igroups = 1, tasks = 0, grid = 1;
  uint64_t ws_bytes = 0;
};

// Splits a length into (at most) `parts` chunks of at least `least`; the workspace to match.
static void cs_split(CsPlan& pl, int64_t length, int64_t parts, int64_t least)
{
  parts = cs_max64(1, cs_min64(parts, cs_max64(1, length / cs_max64(least, 1))));
  pl.chunk = cs_max64(1, cs_ceil_div(length, parts));
  pl.parts = cs_max64(1, cs_ceil_div(length, pl.chunk));
  pl.ws_bytes = pl.parts > 1 ? uint64_t(pl.rows) * uint64_t(pl.parts) * sizeof(CsAcc) : 0;
}

static bool cs_col_vectors(const cs_problem& p)
{
  int64_t const es = cs_dtype_bytes(p.dtype_ab);
  return (p.lda * es) % 16 == 0 && (p.batch_stride_a * es) % 16 == 0 &&
         (p.a == nullptr || reinterpret_cast<uintptr_t>(p.a) % 16 == 0);
}

// The plan of a launch, at most `most_parts` parts a row. Sizing the workspace, A's pointer is
// unknown and taken as 16-byte aligned (the harness's is); a launch whose A is not plans
// again and, if the workspace is then short, with fewer parts.
static int32_t cs_reduce_plan(const cs_problem& p, CsPlan& pl, int64_t most_parts)
{
  pl.rows = p.batch * p.m;
  int64_t const threads_wanted = int64_t(kWaves) * cs_sm_count(p) * 2048;
  int64_t const es = cs_dtype_bytes(p.dtype_ab), V = 16 / es;
  pl.row = p.layout_a == CS_LAYOUT_ROW;
  if (pl.row) {
    int64_t const nv = p.k / V;   // a row's vectors, about
    pl.group = nv >= 64 ? 32 : nv >= 16 ? 16 : nv >= 8 ? 8 : 4;
    int64_t parts = 1;
    if (pl.rows * pl.group < threads_wanted && pl.group == 32)
      parts = cs_min64(cs_ceil_div(threads_wanted, pl.rows * 32), most_parts);
    // At least CS_ROW_PART_STEPS steps of a warp's vectors a part.
    cs_split(pl, cs_max64(nv, 1), parts, int64_t(CS_ROW_PART_STEPS) * 32 * kRowVecs);
    pl.tasks = pl.rows * pl.parts;
    int64_t const groups = kThreads / pl.group;
    pl.grid = cs_min64(cs_ceil_div(pl.tasks, groups), int64_t(cs_sm_count(p)) * (2048 / kThreads) * 8);
    return CS_OK;
  }
  int64_t const ctas_wanted = threads_wanted / kThreads;
  // R rows a thread: a vector's where A allows, unless that leaves too few CTAs even with
  // k split (a small problem): then one, for eight times the threads.
  bool const vec = cs_col_vectors(p);
  for (int r : {vec ? int(V) : kColScalarRows, 1}) {
    pl.group = r;
    pl.vec = vec && r == V && V > 1;
    int64_t const lanes = cs_ceil_div(p.m, r);   // threads along the rows, a batch
    int wi = 1;
    while (wi < kWarps && int64_t(wi) * 32 < lanes) wi *= 2;
    pl.wi = wi;
    pl.igroups = cs_ceil_div(lanes, int64_t(wi) * 32);
    int64_t const ctas = p.batch * pl.igroups;
    // Parts of at most kColPartSteps steps of k: the CTAs running at once then read a
    // window of A small enough for the TLB (KernelBench's 128 x 4096 x 4095 f32 in 2 parts
    // a batch: 88% of copy; in 5: 92%); more where the GPU needs more CTAs.
    int64_t parts = cs_ceil_div(p.k, kColPartSteps);
    if (ctas * parts < ctas_wanted) parts = cs_ceil_div(ctas_wanted, ctas);
    // At most 1024 parts: cs_reduce_finish_cols merges a row's parts in one thread.
    parts = cs_min64(parts, cs_min64(most_parts, 1024));
    // At least one unrolled step of the CTA's warps along k a part.
    cs_split(pl, p.k, parts, int64_t(kWarps / wi) * kColUnroll);
    pl.tasks = ctas * pl.parts;
    if (2 * pl.tasks >= ctas_wanted) break;
  }
  pl.grid = cs_min64(pl.tasks, int64_t(cs_sm_count(p)) * (2048 / kThreads) * 8);
  return CS_OK;
}

template <class TA, class TD, int KIND>
static void cs_run_kind(const cs_problem& p, const CsPlan& pl, cudaStream_t st)
{
  CsAcc* const ws = static_cast<CsAcc*>(p.workspace);
  unsigned const grid = unsigned(cs_max64(1, cs_min64(pl.grid, 0x7fffffffLL)));
  if (pl.row) {
    if constexpr (kBuildRow) {
      switch (pl.group) {
        case 4: cs_reduce_rows<TA, TD, KIND, 4><<<grid, kThreads, 0, st>>>(p, pl.tasks, pl.parts, pl.chunk, ws); break;
        case 8: cs_reduce_rows<TA, TD, KIND, 8><<<grid, kThreads, 0, st>>>(p, pl.tasks, pl.parts, pl.chunk, ws); break;
        case 16: cs_reduce_rows<TA, TD, KIND, 16><<<grid, kThreads, 0, st>>>(p, pl.tasks, pl.parts, pl.chunk, ws); break;
        default: cs_reduce_rows<TA, TD, KIND, 32><<<grid, kThreads, 0, st>>>(p, pl.tasks, pl.parts, pl.chunk, ws); break;
      }
    }
  } else if constexpr (kBuildCol && KIND != CS_REDUCE_CROSS_ENTROPY) {   // (its rows are row-major)
    constexpr int V = 16 / sizeof(TA);
    if (pl.vec) cs_reduce_cols<TA, TD, KIND, V, true><<<grid, kThreads, 0, st>>>(p, pl.wi, pl.igroups, pl.parts, pl.chunk, ws);
    else if (pl.group == kColScalarRows && kColScalarRows > 1)
      cs_reduce_cols<TA, TD, KIND, kColScalarRows, false><<<grid, kThreads, 0, st>>>(p, pl.wi, pl.igroups, pl.parts, pl.chunk, ws);
    else cs_reduce_cols<TA, TD, KIND, 1, false><<<grid, kThreads, 0, st>>>(p, pl.wi, pl.igroups, pl.parts, pl.chunk, ws);
  }
  if (pl.parts > 1 && pl.row) {
    if (pl.parts > 256) {
      unsigned const fgrid = unsigned(cs_min64(pl.rows, int64_t(cs_sm_count(p)) * 8));
      cs_reduce_finish_cta<TD, KIND><<<fgrid, 256, 0, st>>>(p, pl.rows, pl.parts, ws);
    } else {
      unsigned const fgrid = unsigned(cs_min64(cs_ceil_div(pl.rows, 8), int64_t(cs_sm_count(p)) * 64));
      cs_reduce_finish<TD, KIND><<<fgrid, 256, 0, st>>>(p, pl.rows, pl.parts, ws);
    }
  } else if (pl.parts > 1) {
    unsigned const fgrid = unsigned(cs_min64(cs_ceil_div(pl.rows, 256), int64_t(cs_sm_count(p)) * 8));
    cs_reduce_finish_cols<TD, KIND><<<fgrid, 256, 0, st>>>(p, pl.rows, pl.parts, ws);
  }
  if constexpr (KIND == CS_REDUCE_CROSS_ENTROPY || KIND == CS_REDUCE_SUM || KIND == CS_REDUCE_MEAN) {
    if (p.total != CS_TOTAL_NONE)
      cs_reduce_total<TD><<<unsigned(cs_min64(p.batch, 65535)), 256, 0, st>>>(p);
  }
}

// A kind is built where the workload asks for it and its output type fits (an index into
// int64, a value into a floating type).
template <int KIND, class TD>
static constexpr bool cs_build_kind()
{
  return (kWlReduce < 0 || kWlReduce == KIND) && (cs_is_arg<KIND> == std::is_same_v<TD, int64_t>);
}

template <class TA, class TD>
static int32_t cs_run(const cs_problem& p, const CsPlan& pl, cudaStream_t st)
{
  constexpr bool types = kWlIn < 0 || (kWlIn == CsDtype<TA>::value && kWlOut == CsDtype<TD>::value);
  if constexpr (!types) {
    return CS_ERR_UNSUPPORTED;
  } else {
    switch (p.reduce) {
      case CS_REDUCE_SUM: if constexpr (cs_build_kind<CS_REDUCE_SUM, TD>()) cs_run_kind<TA, TD, CS_REDUCE_SUM>(p, pl, st); break;
      case CS_REDUCE_MEAN: if constexpr (cs_build_kind<CS_REDUCE_MEAN, TD>()) cs_run_kind<TA, TD, CS_REDUCE_MEAN>(p, pl, st); break;
      case CS_REDUCE_MAX: if constexpr (cs_build_kind<CS_REDUCE_MAX, TD>()) cs_run_kind<TA, TD, CS_REDUCE_MAX>(p, pl, st); break;
      case CS_REDUCE_MIN: if constexpr (cs_build_kind<CS_REDUCE_MIN, TD>()) cs_run_kind<TA, TD, CS_REDUCE_MIN>(p, pl, st); break;
      case CS_REDUCE_LOGSUMEXP: if constexpr (cs_build_kind<CS_REDUCE_LOGSUMEXP, TD>()) cs_run_kind<TA, TD, CS_REDUCE_LOGSUMEXP>(p, pl, st); break;
      case CS_REDUCE_L2: if constexpr (cs_build_kind<CS_REDUCE_L2, TD>()) cs_run_kind<TA, TD, CS_REDUCE_L2>(p, pl, st); break;
      case CS_REDUCE_ARGMAX: if constexpr (cs_build_kind<CS_REDUCE_ARGMAX, TD>()) cs_run_kind<TA, TD, CS_REDUCE_ARGMAX>(p, pl, st); break;
      case CS_REDUCE_ARGMIN: if constexpr (cs_build_kind<CS_REDUCE_ARGMIN, TD>()) cs_run_kind<TA, TD, CS_REDUCE_ARGMIN>(p, pl, st); break;
      case CS_REDUCE_CROSS_ENTROPY:
        if constexpr (cs_build_kind<CS_REDUCE_CROSS_ENTROPY, TD>() && kBuildRow) cs_run_kind<TA, TD, CS_REDUCE_CROSS_ENTROPY>(p, pl, st);
        break;
      default: return CS_ERR_UNSUPPORTED;
    }
    return int32_t(cudaGetLastError());
  }
}

// ---------------------------------------------------------------------------------------
// ABI entry points
// ---------------------------------------------------------------------------------------

CS_EXPORT uint32_t cutesmith_abi_version(void)
{
  return CS_ABI_VERSION;
}

CS_EXPORT int32_t cutesmith_workspace_bytes(const cs_problem* problem, uint64_t* bytes)
{
  if (bytes != nullptr) *bytes = 0;
  if (problem == nullptr || bytes == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_UNSUPPORTED;
  int32_t const status = cs_reduce_check(*problem, /*check_pointers=*/false);
  if (status != CS_OK || problem->m == 0 || problem->k == 0 || problem->batch == 0) return status;
  CsPlan pl;
  int32_t const rc = cs_reduce_plan(*problem, pl, kMaxParts);
  if (rc == CS_OK) *bytes = pl.ws_bytes + cs_total_bytes(*problem);
  return rc;
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  cs_problem const& p = *problem;
  int32_t rc = cs_reduce_check(p, /*check_pointers=*/true);
  if (rc != CS_OK || p.m == 0 || p.k == 0 || p.batch == 0) return rc;
  CsPlan pl;
  rc = cs_reduce_plan(p, pl, kMaxParts);
  if (rc != CS_OK) return rc;
  // A cross entropy's total keeps its row values at the workspace's end.
  uint64_t const total_bytes = cs_total_bytes(p);
  if (total_bytes > p.workspace_bytes) return CS_ERR_WORKSPACE;
  uint64_t const room = p.workspace_bytes - total_bytes;
  if (pl.ws_bytes > room) {   // a smaller workspace than planned: fewer parts
    int64_t const fit = int64_t(room / (uint64_t(pl.rows) * sizeof(CsAcc)));
    rc = cs_reduce_plan(p, pl, cs_max64(fit, 1));
    if (rc != CS_OK) return rc;
    if (pl.ws_bytes > room) return CS_ERR_WORKSPACE;
  }
  if ((pl.parts > 1 || total_bytes > 0) &&
      (p.workspace == nullptr || reinterpret_cast<uintptr_t>(p.workspace) % alignof(CsAcc) != 0))
    return CS_ERR_WORKSPACE;
  bool const f32_out = p.dtype_cd == CS_DTYPE_F32;
  if (p.dtype_cd == CS_DTYPE_I64) {
    switch (p.dtype_ab) {
      case CS_DTYPE_F32: return cs_run<float, int64_t>(p, pl, stream);
      case CS_DTYPE_F16: return cs_run<__half, int64_t>(p, pl, stream);
      case CS_DTYPE_BF16: return cs_run<__nv_bfloat16, int64_t>(p, pl, stream);
      default: return CS_ERR_UNSUPPORTED;
    }
  }
  switch (p.dtype_ab) {
    case CS_DTYPE_F32: return cs_run<float, float>(p, pl, stream);
    case CS_DTYPE_F16: return f32_out ? cs_run<__half, float>(p, pl, stream) : cs_run<__half, __half>(p, pl, stream);
    case CS_DTYPE_BF16:
      return f32_out ? cs_run<__nv_bfloat16, float>(p, pl, stream) : cs_run<__nv_bfloat16, __nv_bfloat16>(p, pl, stream);
    default: return CS_ERR_UNSUPPORTED;
  }
}
