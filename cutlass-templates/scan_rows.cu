// cutesmith template: row scans (cumulative sum, cumulative product), forward or reverse,
// inclusive or exclusive, f32 / f16 / bf16 in, the same type or f32 out, row-major rows or
// rows side by side, any batch.
//
//   D[b] = chain(scan(A[b]))   (CS_FAMILY_SCAN): along each of the m rows of A[b] (n
//   elements x_0 .. x_{n-1}), y_j = x_0 + ... + x_j (SUM, torch.cumsum) or x_0 * ... * x_j
//   (PROD, torch.cumprod). Flags (`scan_flags`): CS_SCAN_REVERSE runs the scan from the
//   row's end (y_j over x_j .. x_{n-1}: torch.cumsum(x.flip(d), d).flip(d)); CS_SCAN_EXCLUSIVE
//   leaves x_j out of y_j (y of the first element is 0, or 1 for PROD).
//
// layout_a ROW: element j of row i of batch b at b * batch_stride_a + i * lda + j (a scan over
// the last dim); COL: at b * batch_stride_a + j * lda + i (a scan over a middle dim of a
// (B, N, M) tensor: m = M rows side by side). D has A's layout (layout_cd == layout_a), with
// ldd and batch_stride_d. Each scanned y (fp32) goes through cs_chain::apply(y, t), t[] the
// chain's operands at (b, i, j), and is rounded once to D's type. With [[before]] ops
// (cs_before), each element x of A at (b, i, j) is first cs_before::apply(x, t), t[] their
// operands there (slots 0.., indexed like D; the chain's follow): a masked cumsum.
//
// Math in fp32. The sum's carry along a row (step to step, tile to tile, part to part) is
// compensated (Kahan), so that the adds behind any y stay a shallow tree (a lane's vector
// and the warp's shuffles; or a warp's positions and the CTA's warps) plus a compensated
// running total, whatever the row's length.
//   Row-major: a warp scans a (row, part) in steps of 32 16-byte vectors, each lane one
//   vector of adjacent elements (where the row allows; a reverse scan reads the mirrored run
//   and reverses it in registers), scanned in registers, then across the warp by shuffles;
//   the step's total joins the carry. No barrier: a CTA's warps stream their rows
//   independently.
//   Rows side by side: a CTA takes 32 adjacent rows (a lane each, so every load is coalesced)
//   and walks them in tiles of kWarps x CS_COL_UNROLL positions: each warp scans its
//   CS_COL_UNROLL consecutive positions in registers, the warps' totals meet in shared memory,
//   the tile's total joins the carry.
//   Both paths load ahead of the scan (row-major: CS_AHEAD steps of vectors in flight; side
//   by side: the next tile).
//   Few rows for the GPU: each row is cut into P parts; a first kernel writes each part's
//   total to the workspace, the scan kernel starts each part from the combined totals of the
//   parts before it (A is read twice, D written once).
//
// Validated by the project's fp64 checker (each output against the fp64 scan, within 8 u of
// the sum of |x| before it, or (terms + 1) 4 u of a product, plus the bounds of the
// [[before]] ops' fp32 evaluation carried along the row) on every shape and seed of the
// scan workloads and GPU test fixtures. Measured with `cutesmith bench scan` on an H100 80GB
// HBM3 (bench/scan-h100.md, bench/scan-variants.md): KernelBench's cumsum, cumprod, reverse
// and exclusive cumsum of 32768 x 32768 f32 at 88-89% of a device copy of the same bytes
// (eager PyTorch: 22-60%), a bf16 cumsum over a middle dim at 77% (PyTorch: 18%).
//
// Workspace: split rows only, batch * m * P * 4 bytes; a smaller one than asked for makes P
// shrink (CS_ERR_WORKSPACE only if P < 1). CS_ERR_UNSUPPORTED: other families, an unknown
// cs_scan or flags (or ones unlike CS_WL_SCAN / CS_WL_SCAN_FLAGS), layout_cd unlike layout_a,
// dtype_ab not f32 / f16 / bf16 or dtype_cd neither it nor f32, lda / ldd below a row (ROW) or
// a column (COL), pointers not element-aligned, [[before]] or chain operands unlike theirs. m, n or
// batch 0: CS_OK, nothing done.
//
// Parameters (-DNAME=VALUE):
//   CS_THREADS      256   threads a CTA (a multiple of 64, at most 1024)
//   CS_AHEAD        2     row-major: steps whose vector a lane has loaded (this one and the
//                         next CS_AHEAD - 1) while it scans (1-8)
//   CS_MIN_BLOCKS   1     row-major: CTAs an SM holds that the registers are budgeted for
//                         (launch bounds; more CTAs, fewer registers a thread)
//   CS_COL_UNROLL   8     rows side by side: consecutive positions a warp takes of a tile
//   CS_WAVES        2     split rows while fewer than this many waves of threads would run
//   CS_MAX_PARTS    256   most parts a row is split into
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

// The ops on each element before the scan ([[before]]: cs_before, generated after the chain
// when the workload has them: `torch.cumsum(x * mask)`), or the identity. Their operands
// take the first slots, indexed like D (which has A's shape and layout).
#ifndef CS_BEFORE_DEFINED
#define CS_BEFORE_DEFINED 1
struct cs_before : cs_identity_chain {};
#endif

#ifndef CS_THREADS
#define CS_THREADS 256
#endif
#ifndef CS_COL_UNROLL
#define CS_COL_UNROLL 8
#endif
#ifndef CS_WAVES
#define CS_WAVES 2
#endif
#ifndef CS_AHEAD
#define CS_AHEAD 2
#endif
#ifndef CS_MIN_BLOCKS
#define CS_MIN_BLOCKS 1
#endif
#ifndef CS_MAX_PARTS
#define CS_MAX_PARTS 256
#endif

static constexpr int kThreads = CS_THREADS;
static constexpr int kWarps = kThreads / 32;
static constexpr int kColUnroll = CS_COL_UNROLL;
static constexpr int kWaves = CS_WAVES;
static constexpr int kAhead = CS_AHEAD;
static constexpr int64_t kMaxParts = CS_MAX_PARTS;

static_assert(kThreads % 64 == 0 && kThreads >= 64 && kThreads <= 1024, "CS_THREADS: a multiple of 64, 64-1024");
static_assert(kColUnroll >= 1 && kColUnroll <= 16, "CS_COL_UNROLL: 1-16");
static_assert(kWaves >= 1 && kMaxParts >= 1, "CS_WAVES, CS_MAX_PARTS");
static_assert(kAhead >= 1 && kAhead <= 8, "CS_AHEAD: 1-8");
static_assert(CS_MIN_BLOCKS >= 1 && CS_MIN_BLOCKS * kThreads <= 2048, "CS_MIN_BLOCKS: 1 to 2048 / CS_THREADS");

// What this build compiles: a workload instance its types, scan and flags (the rest is
// rejected at run time); the template compiled alone, everything.
#if defined(CS_WL_FAMILY)
static constexpr bool kBuildScan = CS_WL_FAMILY == CS_FAMILY_SCAN;
#else
static constexpr bool kBuildScan = true;
#endif
#if defined(CS_WL_DTYPE_AB) && defined(CS_WL_DTYPE_CD)
static constexpr int kWlIn = CS_WL_DTYPE_AB, kWlOut = CS_WL_DTYPE_CD;
#else
static constexpr int kWlIn = -1, kWlOut = -1;
#endif
#if defined(CS_WL_SCAN)
static constexpr int kWlScan = CS_WL_SCAN;
#else
static constexpr int kWlScan = -1;
#endif
#if defined(CS_WL_SCAN_FLAGS)
static constexpr int kWlFlags = CS_WL_SCAN_FLAGS;
#else
static constexpr int kWlFlags = -1;
#endif
#if defined(CS_WL_LAYOUT_A)
static constexpr bool kBuildRow = CS_WL_LAYOUT_A == CS_LAYOUT_ROW;
static constexpr bool kBuildCol = CS_WL_LAYOUT_A == CS_LAYOUT_COL;
#else
static constexpr bool kBuildRow = true, kBuildCol = true;
#endif

// ---------------------------------------------------------------------------------------
// The scan's operation
// ---------------------------------------------------------------------------------------

template <int KIND>
__device__ __forceinline__ float cs_identity() { return KIND == CS_SCAN_PROD ? 1.0f : 0.0f; }

template <int KIND>
__device__ __forceinline__ float cs_op(float a, float b) { return KIND == CS_SCAN_PROD ? a * b : a + b; }

// A running total: for SUM the compensated sum hi - lo (Kahan), for PROD the product in hi.
struct CsCarry {
  float hi, lo;
};

template <int KIND>
__device__ __forceinline__ CsCarry cs_carry0() { return {cs_identity<KIND>(), 0.0f}; }

template <int KIND>
__device__ __forceinline__ void cs_carry_add(CsCarry& c, float x)
{
  if constexpr (KIND == CS_SCAN_PROD) {
    c.hi *= x;
  } else {
    float const v = x - c.lo;
    float const t = c.hi + v;
    // Once the total is infinite (or NaN) there is nothing to compensate: inf - inf in the
    // correction would turn every later output into NaN where the sum is +-inf.
    c.lo = isfinite(t) ? (t - c.hi) - v : 0.0f;
    c.hi = t;
  }
}

// The carry combined with a value of this part (y = carry (+|*) x).
template <int KIND>
__device__ __forceinline__ float cs_carry_apply(CsCarry c, float x)
{
  if constexpr (KIND == CS_SCAN_PROD) return c.hi * x;
  else return c.hi + (x - c.lo);
}

// ---------------------------------------------------------------------------------------
// Row-major rows: loads, stores and the warp's scan
// ---------------------------------------------------------------------------------------

// E adjacent elements of a row from physical index j0 (out of [0, n): the identity), as a
// run of 16-byte vectors where `vec` allows.
template <class TA, int KIND, int E>
__device__ __forceinline__ void cs_load_run(TA const* row, int64_t j0, int64_t n, bool vec, float (&x)[E])
{
  constexpr int V = 16 / sizeof(TA);
  if (vec && j0 >= 0 && j0 + E <= n && (j0 % V) == 0) {
#pragma unroll
    for (int u = 0; u < E / V; ++u) {
      uint4 const r = __ldg(reinterpret_cast<uint4 const*>(row + j0) + u);
      TA const* e = reinterpret_cast<TA const*>(&r);
#pragma unroll
      for (int q = 0; q < V; ++q) x[u * V + q] = cs_f32(e[q]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      int64_t const j = j0 + e;
      x[e] = (j >= 0 && j < n) ? cs_f32(__ldg(row + j)) : cs_identity<KIND>();
    }
  }
}

// The [[before]] ops on E adjacent elements of row i of batch b from physical index j0 (those
// inside [0, n) only: the rest hold the scan's identity and keep it): the operands of a
// whole run as one run of loads.
template <int E>
__device__ __forceinline__ void cs_pre_run(const cs_problem& p, int64_t b, int64_t i, int64_t j0, int64_t n,
                                           float (&x)[E])
{
  if constexpr (!cs_before::kIdentity) {
    if (j0 >= 0 && j0 + E <= n) {
      cs_before_run<cs_before, E, true>(p, x, b, i, j0);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (j0 + e >= 0 && j0 + e < n) x[e] = cs_before_in<cs_before>(p, x[e], b, i, j0 + e, p.layout_cd);
    }
  }
}

// The raw bytes of the [[before]] operands' runs of a lane's step (E elements from physical
// index j0 of row i), loaded beside A's vector and decoded only when the step is scanned,
// so that no operand load is waited on where it is issued. Operand I is prefetched when it
// is a matrix or row operand of a known type whose run is 4, 8 or 16 bytes (an f32 row's
// bool mask: one 4-byte load) at an aligned address; `ok` says which were. Column operands
// (one value a row) and the rest are loaded when the step is scanned.
struct CsPreRaw {
  uint4 w[CS_MAX_OPERANDS];
  unsigned ok;
};

template <int I, int E>
__host__ __device__ constexpr bool cs_pre_prefetchable()
{
  if constexpr (cs_before::kOperands <= I) {
    return false;
  } else {
    constexpr int kind = cs_chain_kind<cs_before>(I), dt = cs_chain_dtype<cs_before>(I);
    constexpr int bytes = E * cs_elem_bytes<dt>();
    return dt >= 0 && (kind == CS_OPERAND_MATRIX || kind == CS_OPERAND_ROW) &&
           (bytes == 4 || bytes == 8 || bytes == 16);
  }
}

template <int I, int E>
__device__ __forceinline__ void cs_pre_fetch_one(const cs_problem& p, int64_t b, int64_t i, int64_t j0, CsPreRaw& r)
{
  if constexpr (cs_pre_prefetchable<I, E>()) {
    constexpr int kind = cs_chain_kind<cs_before>(I), dt = cs_chain_dtype<cs_before>(I);
    constexpr int bytes = E * cs_elem_bytes<dt>();
    cs_operand const& o = p.operands[I];
    const char* at = static_cast<const char*>(o.ptr) +
                     cs_operand_index<kind>(o, p.layout_cd, b, i, j0) * cs_elem_bytes<dt>();
    if ((reinterpret_cast<uintptr_t>(at) & uintptr_t(bytes - 1)) != 0) return;
    if constexpr (bytes == 4) r.w[I].x = __ldg(reinterpret_cast<const unsigned*>(at));
    else if constexpr (bytes == 8) {
      uint2 const v = __ldg(reinterpret_cast<const uint2*>(at));
      r.w[I].x = v.x; r.w[I].y = v.y;
    } else r.w[I] = __ldg(reinterpret_cast<const uint4*>(at));
    r.ok |= 1u << I;
  }
}

// Issues the prefetch of every prefetchable operand's run (a whole run inside [0, n) only).
template <int E>
__device__ __forceinline__ void cs_pre_fetch(const cs_problem& p, int64_t b, int64_t i, int64_t j0, int64_t n,
                                             CsPreRaw& r)
{
  r.ok = 0;
  if constexpr (!cs_before::kIdentity) {
    if (j0 < 0 || j0 + E > n) return;
    cs_pre_fetch_one<0, E>(p, b, i, j0, r);
    cs_pre_fetch_one<1, E>(p, b, i, j0, r);
    cs_pre_fetch_one<2, E>(p, b, i, j0, r);
    cs_pre_fetch_one<3, E>(p, b, i, j0, r);
  }
}

// Operand I's E values of the step: decoded from the prefetched bytes, or loaded now.
template <int I, int E>
__device__ __forceinline__ void cs_pre_operand(const cs_problem& p, int64_t b, int64_t i, int64_t j0,
                                               const CsPreRaw& r, float (&t)[E][CS_MAX_OPERANDS])
{
  if constexpr (cs_before::kOperands > I) {
    constexpr int dt = cs_chain_dtype<cs_before>(I);
    float v[E];
    bool decoded = false;
    if constexpr (cs_pre_prefetchable<I, E>()) {
      if (r.ok & (1u << I)) {
        unsigned const q[4] = {r.w[I].x, r.w[I].y, r.w[I].z, r.w[I].w};
        cs_unpack_words<dt, E>(q, v);
        decoded = true;
      }
    }
    if (!decoded) {
      // Loaded now, as a reduction's are (a scan's layout_a is its layout_cd: the check).
      float now[E][CS_MAX_OPERANDS];
      cs_before_operand_run<cs_before, I, E, true>(p, b, i, j0, now);
#pragma unroll
      for (int e = 0; e < E; ++e) v[e] = now[e][I];
    }
#pragma unroll
    for (int e = 0; e < E; ++e) t[e][I] = v[e];
  }
}

// The [[before]] ops on a lane's step of E elements x from physical index j0, with the
// operands prefetched in `r` where they were (cs_pre_run for a partial run).
template <int E>
__device__ __forceinline__ void cs_pre_step(const cs_problem& p, int64_t b, int64_t i, int64_t j0, int64_t n,
                                            const CsPreRaw& r, float (&x)[E])
{
  if constexpr (!cs_before::kIdentity) {
    if (j0 >= 0 && j0 + E <= n) {
      float t[E][CS_MAX_OPERANDS];
      cs_pre_operand<0, E>(p, b, i, j0, r, t);
      cs_pre_operand<1, E>(p, b, i, j0, r, t);
      cs_pre_operand<2, E>(p, b, i, j0, r, t);
      cs_pre_operand<3, E>(p, b, i, j0, r, t);
      cs_before_apply<cs_before, E>(x, t);
    } else {
      cs_pre_run<E>(p, b, i, j0, n, x);
    }
  }
}

// E adjacent results of a row from physical index j0 (only those inside [0, n)), through the
// chain at (b, i, j), as vectors where `vec` allows.
template <class TD, int E>
__device__ __forceinline__ void cs_store_run(const cs_problem& p, TD* row, int64_t b, int64_t i, int64_t j0, int64_t n,
                                             bool vec, float (&y)[E])
{
  if constexpr (!cs_chain::kIdentity) {
#pragma unroll
    for (int e = 0; e < E; ++e)
      if (j0 + e >= 0 && j0 + e < n) y[e] = cs_chain_at<cs_chain>(p, y[e], b, i, j0 + e);
  }
  constexpr int V = 16 / sizeof(TD);
  if (vec && j0 >= 0 && j0 + E <= n && (j0 % V) == 0 && E % V == 0) {
#pragma unroll
    for (int u = 0; u < E / V; ++u) {
      uint4 r;
      TD* e = reinterpret_cast<TD*>(&r);
#pragma unroll
      for (int q = 0; q < V; ++q) e[q] = cs_from_f32<TD>(y[u * V + q]);
      reinterpret_cast<uint4*>(row + j0)[u] = r;
    }
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e)
      if (j0 + e >= 0 && j0 + e < n) row[j0 + e] = cs_from_f32<TD>(y[e]);
  }
}

// The inclusive scan of v over the warp.
template <int KIND>
__device__ __forceinline__ float cs_warp_scan(float v)
{
  int const lane = int(threadIdx.x) & 31;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    float const u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v = cs_op<KIND>(u, v);
  }
  return v;
}

// A lane's V elements of a step as one raw 16-byte vector, loaded ahead of its use.
template <class TA>
struct CsVec {
  uint4 v;
};

// Issues the load of V = 16 / sizeof(TA) adjacent elements from physical index j0 when they
// can be read as one vector (false: nothing issued, the caller reads them one by one).
template <class TA>
__device__ __forceinline__ bool cs_prefetch(TA const* row, int64_t j0, int64_t n, bool vec, CsVec<TA>& r)
{
  constexpr int V = 16 / sizeof(TA);
  if (!(vec && j0 >= 0 && j0 + V <= n && (j0 % V) == 0)) return false;
  r.v = __ldg(reinterpret_cast<uint4 const*>(row + j0));
  return true;
}

template <class TA>
__device__ __forceinline__ void cs_unpack_vec(const CsVec<TA>& r, float (&x)[16 / sizeof(TA)])
{
  TA const* e = reinterpret_cast<TA const*>(&r.v);
#pragma unroll
  for (int q = 0; q < int(16 / sizeof(TA)); ++q) x[q] = cs_f32(e[q]);
}

// A warp a (row, part): steps of 32 x V positions (q, in scan order), lane l owning
// q0 + l*V .. q0 + l*V + V - 1, one 16-byte vector (in a reverse scan position q is the
// row's element n - 1 - q, so the lane's run is the physical run [n - q0 - l*V - V,
// n - q0 - l*V), reversed). Each step: the lane's scan in registers, the warp's by shuffles,
// the carry; no barrier, so the warps of a CTA stream their rows independently. kAhead
// steps' vectors are in flight while a step is scanned.
template <class TA, class TD, int KIND, bool REV, bool EXCL>
__global__ void __launch_bounds__(kThreads, CS_MIN_BLOCKS)
cs_scan_rows(cs_problem p, int64_t tasks, int64_t parts, int64_t chunk, const float* totals)
{
  constexpr int V = 16 / sizeof(TA);
  constexpr int64_t kStep = 32 * V;
  int const lane = int(threadIdx.x) % 32;
  int64_t const n = p.n;
  auto const first_of = [n](int64_t mine) { return REV ? n - mine - V : mine; };
  int64_t const warps = int64_t(gridDim.x) * kWarps;
  for (int64_t task = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; task < tasks; task += warps) {
    int64_t const row = task / parts, part = task % parts;
    int64_t const b = row / p.m, i = row % p.m;
    TA const* a = static_cast<TA const*>(p.a) + b * p.batch_stride_a + i * p.lda;
    TD* d = static_cast<TD*>(p.d) + b * p.batch_stride_d + i * p.ldd;
    bool const vec_a = (reinterpret_cast<uintptr_t>(a) & 15u) == 0;
    bool const vec_d = (reinterpret_cast<uintptr_t>(d) & 15u) == 0;
    CsCarry carry = cs_carry0<KIND>();
    for (int64_t q = 0; q < part; ++q) cs_carry_add<KIND>(carry, totals[row * parts + q]);
    int64_t const q_begin = part * chunk, q_end = q_begin + chunk < n ? q_begin + chunk : n;
    int64_t const lim = q_end;   // positions at or past it belong to the next part
    // A ring of kAhead steps' vectors, slot r holding step r of each group of kAhead steps:
    // a slot is read, then loaded again for the step kAhead later (the loop is unrolled over
    // the slots, so no register is moved while its load is in flight, which would wait on it).
    CsVec<TA> ring[kAhead];
    bool ring_vec[kAhead];
    // The [[before]] operands' runs, in the same ring.
    CsPreRaw pre[kAhead];
#pragma unroll
    for (int r = 0; r < kAhead; ++r) {
      int64_t const q = q_begin + r * kStep;
      ring_vec[r] = q < q_end && cs_prefetch<TA>(a, first_of(q + lane * V), n, vec_a, ring[r]);
      if constexpr (!cs_before::kIdentity) {
        pre[r].ok = 0;
        if (q < q_end) cs_pre_fetch<V>(p, b, i, first_of(q + lane * V), n, pre[r]);
      }
    }
    for (int64_t q00 = q_begin; q00 < q_end; q00 += kAhead * kStep)
#pragma unroll
    for (int slot = 0; slot < kAhead; ++slot) {
      int64_t const q0 = q00 + slot * kStep;
      if (q0 >= q_end) break;
      int64_t const mine = q0 + lane * V;
      float x[V];
      {
        float r[V];
        if (ring_vec[slot]) cs_unpack_vec<TA>(ring[slot], r);
        else cs_load_run<TA, KIND, V>(a, first_of(mine), n, vec_a, r);
        if constexpr (!cs_before::kIdentity) cs_pre_step<V>(p, b, i, first_of(mine), n, pre[slot], r);
#pragma unroll
        for (int e = 0; e < V; ++e) x[e] = REV ? r[V - 1 - e] : r[e];
      }
      ring_vec[slot] = q0 + kAhead * kStep < q_end &&
                       cs_prefetch<TA>(a, first_of(mine + kAhead * kStep), n, vec_a, ring[slot]);
      if constexpr (!cs_before::kIdentity) {
        pre[slot].ok = 0;
        if (q0 + kAhead * kStep < q_end) cs_pre_fetch<V>(p, b, i, first_of(mine + kAhead * kStep), n, pre[slot]);
      }
#pragma unroll
      for (int e = 0; e < V; ++e)
        if (mine + e >= lim) x[e] = cs_identity<KIND>();
      // The lane's inclusive scan, then the warp's.
      float s[V];
      s[0] = x[0];
#pragma unroll
      for (int e = 1; e < V; ++e) s[e] = cs_op<KIND>(s[e - 1], x[e]);
      float const inc = cs_warp_scan<KIND>(s[V - 1]);
      float before = __shfl_up_sync(0xffffffffu, inc, 1);
      if (lane == 0) before = cs_identity<KIND>();
      float const step_total = __shfl_sync(0xffffffffu, inc, 31);
      float y[V];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float const local = EXCL ? (e == 0 ? before : cs_op<KIND>(before, s[e - 1])) : cs_op<KIND>(before, s[e]);
        y[e] = cs_carry_apply<KIND>(carry, local);
      }
      cs_carry_add<KIND>(carry, step_total);
      // Past the part's end nothing is stored (the positions are the next part's).
      if (mine < lim) {
        int64_t const keep = lim - mine;   // positions of mine inside the part
        if (keep >= V) {
          if constexpr (REV) {
            float r[V];
#pragma unroll
            for (int e = 0; e < V; ++e) r[e] = y[V - 1 - e];
            cs_store_run<TD, V>(p, d, b, i, n - mine - V, n, vec_d, r);
          } else {
            cs_store_run<TD, V>(p, d, b, i, mine, n, vec_d, y);
          }
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            if (e >= keep) break;
            int64_t const j = REV ? n - 1 - (mine + e) : mine + e;
            float v = y[e];
            if constexpr (!cs_chain::kIdentity) v = cs_chain_at<cs_chain>(p, v, b, i, j);
            d[j] = cs_from_f32<TD>(v);
          }
        }
      }
    }
  }
}

// The total of each (row, part) of row-major rows, into totals[row * parts + part]: a warp
// a task, kAhead vectors a lane in flight.
template <class TA, int KIND, bool REV>
__global__ void __launch_bounds__(kThreads, CS_MIN_BLOCKS)
cs_scan_row_totals(cs_problem p, int64_t tasks, int64_t parts, int64_t chunk, float* totals)
{
  constexpr int V = 16 / sizeof(TA);
  constexpr int64_t kStep = 32 * V;
  int const lane = int(threadIdx.x) % 32;
  int64_t const n = p.n;
  int64_t const warps = int64_t(gridDim.x) * kWarps;
  for (int64_t task = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; task < tasks; task += warps) {
    int64_t const row = task / parts, part = task % parts;
    int64_t const b = row / p.m, i = row % p.m;
    TA const* a = static_cast<TA const*>(p.a) + b * p.batch_stride_a + i * p.lda;
    bool const vec_a = (reinterpret_cast<uintptr_t>(a) & 15u) == 0;
    int64_t const q_begin = part * chunk, q_end = q_begin + chunk < n ? q_begin + chunk : n;
    CsCarry acc = cs_carry0<KIND>();
    for (int64_t q0 = q_begin; q0 < q_end; q0 += kAhead * kStep) {
      float x[kAhead][V];
#pragma unroll
      for (int r = 0; r < kAhead; ++r) {
        int64_t const mine = q0 + r * kStep + lane * V;
        cs_load_run<TA, KIND, V>(a, REV ? n - mine - V : mine, n, vec_a, x[r]);
      }
      if constexpr (!cs_before::kIdentity) {
#pragma unroll
        for (int r = 0; r < kAhead; ++r) {
          int64_t const mine = q0 + r * kStep + lane * V;
          cs_pre_run<V>(p, b, i, REV ? n - mine - V : mine, n, x[r]);
        }
      }
#pragma unroll
      for (int r = 0; r < kAhead; ++r) {
        int64_t const mine = q0 + r * kStep + lane * V;
        float t = cs_identity<KIND>();
#pragma unroll
        for (int e = 0; e < V; ++e) {
          int64_t const pos = REV ? mine + (V - 1 - e) : mine + e;   // x[r][e]'s scan position
          if (pos < q_end) t = cs_op<KIND>(t, x[r][e]);
        }
        cs_carry_add<KIND>(acc, t);
      }
    }
    // The lanes' totals by shuffles.
    float v = cs_carry_apply<KIND>(acc, cs_identity<KIND>());
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = cs_op<KIND>(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) totals[task] = v;
  }
}

// ---------------------------------------------------------------------------------------
// Rows side by side: a CTA covers 32 adjacent rows (a lane each) and walks a part of the
// positions in tiles of kWarps x U, warp w taking U consecutive positions of each tile
// ---------------------------------------------------------------------------------------

// Each lane scans its U elements, the warps' totals meet in shared memory (the warps before
// this one, and the tile's), the tile's total joins the carry. With TOTALS the part's total
// of each row goes to the workspace instead of D. The next tile's elements are loaded before
// this one is scanned.
template <class TA, class TD, int KIND, bool REV, bool EXCL, bool TOTALS>
__global__ void __launch_bounds__(kThreads)
cs_scan_cols(cs_problem p, int64_t igroups, int64_t parts, int64_t chunk, float* totals)
{
  constexpr int U = kColUnroll;
  constexpr int64_t kTile = int64_t(kWarps) * U;
  __shared__ float warp_total[kWarps][32];
  int const warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  int64_t const rows = p.batch * p.m, n = p.n;
  int64_t const tasks = p.batch * igroups * parts;
  for (int64_t t = blockIdx.x; t < tasks; t += gridDim.x) {
    int64_t const ig = t % igroups, pb = t / igroups, part = pb % parts, b = pb / parts;
    int64_t const i = ig * 32 + lane;
    bool const live = i < p.m;
    int64_t const row = b * p.m + i;
    TA const* a = static_cast<TA const*>(p.a) + b * p.batch_stride_a + (live ? i : 0);
    TD* d = static_cast<TD*>(p.d) + b * p.batch_stride_d + (live ? i : 0);
    CsCarry carry = cs_carry0<KIND>();
    if constexpr (!TOTALS)
      if (live)
        for (int64_t q = 0; q < part; ++q) cs_carry_add<KIND>(carry, totals[q * rows + row]);
    int64_t const q_begin = part * chunk, q_end = q_begin + chunk < n ? q_begin + chunk : n;
    TA cur[U], nxt[U];
    int64_t const step = REV ? -p.lda : p.lda;
    // The warp's U positions of the tile at q0, through one pointer stepped by lda (U
    // addresses held at once would cost registers the loads need).
    auto const load = [&](int64_t q0, TA (&v)[U]) {
      int64_t const pos0 = q0 + warp * U;
      TA const* at = a + (REV ? n - 1 - pos0 : pos0) * p.lda;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (live && pos0 + u < q_end) v[u] = __ldg(at);
        at += step;
      }
    };
    // Two buffers used in turn (the loop unrolled over them): a tile's buffer is read, then
    // loaded with the tile two ahead, so no register is moved while its load is in flight.
    load(q_begin, cur);
    if (q_begin + kTile < q_end) load(q_begin + kTile, nxt);
    for (int64_t q00 = q_begin; q00 < q_end; q00 += 2 * kTile)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      int64_t const q0 = q00 + half * kTile;
      if (q0 >= q_end) break;
      TA (&buf)[U] = half == 0 ? cur : nxt;
      float s[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        bool const in = live && q0 + warp * U + u < q_end;
        float x = in ? cs_f32(buf[u]) : cs_identity<KIND>();
        if constexpr (!cs_before::kIdentity) {
          int64_t const pos = q0 + warp * U + u;
          if (in) x = cs_before_in<cs_before>(p, x, b, i, REV ? n - 1 - pos : pos, p.layout_cd);
        }
        s[u] = u == 0 ? x : cs_op<KIND>(s[u - 1], x);
      }
      if (q0 + 2 * kTile < q_end) load(q0 + 2 * kTile, buf);
      warp_total[warp][lane] = s[U - 1];
      __syncthreads();
      float tile = cs_identity<KIND>(), earlier = cs_identity<KIND>();
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        float const v = warp_total[w][lane];
        if (w < warp) earlier = cs_op<KIND>(earlier, v);
        tile = cs_op<KIND>(tile, v);
      }
      __syncthreads();
      if constexpr (!TOTALS) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          int64_t const pos = q0 + warp * U + u;
          if (!live || pos >= q_end) break;
          float const local = EXCL ? (u == 0 ? earlier : cs_op<KIND>(earlier, s[u - 1])) : cs_op<KIND>(earlier, s[u]);
          float y = cs_carry_apply<KIND>(carry, local);
          int64_t const j = REV ? n - 1 - pos : pos;
          if constexpr (!cs_chain::kIdentity) y = cs_chain_at<cs_chain>(p, y, b, i, j);
          d[j * p.ldd] = cs_from_f32<TD>(y);
        }
      }
      cs_carry_add<KIND>(carry, tile);
    }
    if constexpr (TOTALS)
      if (live && warp == 0) totals[part * rows + row] = cs_carry_apply<KIND>(carry, cs_identity<KIND>());
  }
}

// ---------------------------------------------------------------------------------------
// Host: checks, the plan (shared by cutesmith_workspace_bytes and cutesmith_launch), launch
// ---------------------------------------------------------------------------------------

static constexpr int32_t kFlagsAll = CS_SCAN_REVERSE | CS_SCAN_EXCLUSIVE;

static int32_t cs_scan_check(const cs_problem& p, bool check_pointers)
{
  if (!kBuildScan || p.family != CS_FAMILY_SCAN) return CS_ERR_UNSUPPORTED;
  if (p.scan != CS_SCAN_SUM && p.scan != CS_SCAN_PROD) return CS_ERR_UNSUPPORTED;
  if ((p.scan_flags & ~kFlagsAll) != 0) return CS_ERR_UNSUPPORTED;
  if (kWlScan >= 0 && p.scan != kWlScan) return CS_ERR_UNSUPPORTED;
  if (kWlFlags >= 0 && p.scan_flags != kWlFlags) return CS_ERR_UNSUPPORTED;
  if (cs_dtype_bytes(p.dtype_ab) == 0 || !(p.dtype_cd == p.dtype_ab || p.dtype_cd == CS_DTYPE_F32))
    return CS_ERR_UNSUPPORTED;
  if (kWlIn >= 0 && (p.dtype_ab != kWlIn || p.dtype_cd != kWlOut)) return CS_ERR_UNSUPPORTED;
  if (p.layout_a == CS_LAYOUT_ROW ? !kBuildRow : p.layout_a == CS_LAYOUT_COL ? !kBuildCol : true)
    return CS_ERR_UNSUPPORTED;
  if (p.layout_cd != p.layout_a) return CS_ERR_UNSUPPORTED;
  if (p.m < 0 || p.n < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.m > INT64_MAX / p.batch || p.m * p.batch > INT64_MAX / p.n) return CS_ERR_UNSUPPORTED;
  bool const row = p.layout_a == CS_LAYOUT_ROW;
  int64_t const inner = row ? p.n : p.m, outer = row ? p.m : p.n;
  if (outer > 1 && (p.lda < inner || p.ldd < inner)) return CS_ERR_UNSUPPORTED;
  // Operand slots: the [[before]] ops' first, then the chain's; both indexed like D.
  constexpr int nb = cs_before::kOperands;
  static_assert(nb + cs_chain::kOperands <= CS_MAX_OPERANDS, "four operand slots in all");
  if (p.num_operands != nb + cs_chain::kOperands) return CS_ERR_UNSUPPORTED;
  if (cs_chain::kOperands > 0 && cs_chain_first<cs_chain>() != nb) return CS_ERR_UNSUPPORTED;
  if (cs_operand_slots_check<cs_before>(p, 0, p.layout_cd, p.m, p.n, check_pointers) != CS_OK)
    return CS_ERR_UNSUPPORTED;
  if (cs_operand_slots_check<cs_chain>(p, nb, p.layout_cd, p.m, p.n, check_pointers) != CS_OK)
    return CS_ERR_UNSUPPORTED;
  if (check_pointers) {
    if (p.a == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    if (reinterpret_cast<uintptr_t>(p.a) % uintptr_t(cs_dtype_bytes(p.dtype_ab)) != 0 ||
        reinterpret_cast<uintptr_t>(p.d) % uintptr_t(cs_dtype_bytes(p.dtype_cd)) != 0)
      return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

struct CsPlan {
  bool row = true;
  int64_t rows = 0, parts = 1, chunk = 0, igroups = 1, tasks = 0, grid = 1;
  uint64_t ws_bytes = 0;
};

// The plan of a launch, at most `most_parts` parts a row: enough (row, part) tasks for
// kWaves waves of CTAs (row-major: of warps), each part at least `least` positions (a
// warp's kAhead steps, or one tile of rows side by side).
static int32_t cs_scan_plan(const cs_problem& p, CsPlan& pl, int64_t most_parts)
{
  pl.rows = p.batch * p.m;
  pl.row = p.layout_a == CS_LAYOUT_ROW;
  // Row-major: a warp a task, at least kAhead steps of 32 vectors a part; side by side: a
  // CTA a task, at least one tile (kWarps x kColUnroll positions) a part.
  int64_t const ctas_wanted = int64_t(kWaves) * cs_sm_count(p) * (2048 / kThreads);
  int64_t const wanted = pl.row ? ctas_wanted * kWarps : ctas_wanted;
  int64_t const least = pl.row ? int64_t(kAhead) * 32 * (16 / cs_dtype_bytes(p.dtype_ab))
                               : int64_t(kWarps) * kColUnroll;
  pl.igroups = pl.row ? 1 : cs_ceil_div(p.m, 32);
  int64_t const units = pl.row ? pl.rows : p.batch * pl.igroups;
  int64_t parts = 1;
  if (units < wanted) parts = cs_ceil_div(wanted, units);
  parts = cs_max64(1, cs_min64(cs_min64(parts, most_parts), p.n / least));
  pl.chunk = cs_ceil_div(p.n, parts);
  pl.chunk = cs_ceil_div(pl.chunk, least) * least;   // whole tiles a part
  pl.parts = cs_ceil_div(p.n, pl.chunk);
  pl.tasks = units * pl.parts;
  pl.ws_bytes = pl.parts > 1 ? uint64_t(pl.rows) * uint64_t(pl.parts) * sizeof(float) : 0;
  pl.grid = cs_min64(pl.row ? cs_ceil_div(pl.tasks, kWarps) : pl.tasks, int64_t(cs_sm_count(p)) * (2048 / kThreads) * 8);
  return CS_OK;
}

template <class TA, class TD, int KIND, bool REV, bool EXCL>
static void cs_run_kind(const cs_problem& p, const CsPlan& pl, cudaStream_t st)
{
  float* const ws = static_cast<float*>(p.workspace);
  unsigned const grid = unsigned(cs_max64(1, cs_min64(pl.grid, 0x7fffffffLL)));
  if (pl.row) {
    if constexpr (kBuildRow) {
      if (pl.parts > 1) cs_scan_row_totals<TA, KIND, REV><<<grid, kThreads, 0, st>>>(p, pl.tasks, pl.parts, pl.chunk, ws);
      cs_scan_rows<TA, TD, KIND, REV, EXCL><<<grid, kThreads, 0, st>>>(p, pl.tasks, pl.parts, pl.chunk, ws);
    }
  } else if constexpr (kBuildCol) {
    if (pl.parts > 1)
      cs_scan_cols<TA, TD, KIND, REV, EXCL, true><<<grid, kThreads, 0, st>>>(p, pl.igroups, pl.parts, pl.chunk, ws);
    cs_scan_cols<TA, TD, KIND, REV, EXCL, false><<<grid, kThreads, 0, st>>>(p, pl.igroups, pl.parts, pl.chunk, ws);
  }
}

template <int KIND, int FLAGS>
static constexpr bool cs_build_kind()
{
  return (kWlScan < 0 || kWlScan == KIND) && (kWlFlags < 0 || kWlFlags == FLAGS);
}

template <class TA, class TD, int KIND>
static void cs_run_flags(const cs_problem& p, const CsPlan& pl, cudaStream_t st)
{
  switch (p.scan_flags) {
    case 0: if constexpr (cs_build_kind<KIND, 0>()) cs_run_kind<TA, TD, KIND, false, false>(p, pl, st); break;
    case CS_SCAN_REVERSE:
      if constexpr (cs_build_kind<KIND, CS_SCAN_REVERSE>()) cs_run_kind<TA, TD, KIND, true, false>(p, pl, st);
      break;
    case CS_SCAN_EXCLUSIVE:
      if constexpr (cs_build_kind<KIND, CS_SCAN_EXCLUSIVE>()) cs_run_kind<TA, TD, KIND, false, true>(p, pl, st);
      break;
    default:
      if constexpr (cs_build_kind<KIND, kFlagsAll>()) cs_run_kind<TA, TD, KIND, true, true>(p, pl, st);
      break;
  }
}

template <class TA, class TD>
static int32_t cs_run(const cs_problem& p, const CsPlan& pl, cudaStream_t st)
{
  constexpr bool types = kWlIn < 0 || (kWlIn == CsDtype<TA>::value && kWlOut == CsDtype<TD>::value);
  if constexpr (!types) {
    return CS_ERR_UNSUPPORTED;
  } else {
    if (p.scan == CS_SCAN_PROD) cs_run_flags<TA, TD, CS_SCAN_PROD>(p, pl, st);
    else cs_run_flags<TA, TD, CS_SCAN_SUM>(p, pl, st);
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
  int32_t const status = cs_scan_check(*problem, /*check_pointers=*/false);
  if (status != CS_OK || problem->m == 0 || problem->n == 0 || problem->batch == 0) return status;
  CsPlan pl;
  int32_t const rc = cs_scan_plan(*problem, pl, kMaxParts);
  if (rc == CS_OK) *bytes = pl.ws_bytes;
  return rc;
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  cs_problem const& p = *problem;
  int32_t rc = cs_scan_check(p, /*check_pointers=*/true);
  if (rc != CS_OK || p.m == 0 || p.n == 0 || p.batch == 0) return rc;
  CsPlan pl;
  rc = cs_scan_plan(p, pl, kMaxParts);
  if (rc != CS_OK) return rc;
  if (pl.ws_bytes > p.workspace_bytes) {   // a smaller workspace than planned: fewer parts
    int64_t const fit = int64_t(p.workspace_bytes / (uint64_t(pl.rows) * sizeof(float)));
    rc = cs_scan_plan(p, pl, cs_max64(fit, 1));
    if (rc != CS_OK) return rc;
    if (pl.ws_bytes > p.workspace_bytes) return CS_ERR_WORKSPACE;
  }
  if (pl.parts > 1 && (p.workspace == nullptr || reinterpret_cast<uintptr_t>(p.workspace) % alignof(float) != 0))
    return CS_ERR_WORKSPACE;
  bool const f32_out = p.dtype_cd == CS_DTYPE_F32;
  switch (p.dtype_ab) {
    case CS_DTYPE_F32: return cs_run<float, float>(p, pl, stream);
    case CS_DTYPE_F16: return f32_out ? cs_run<__half, float>(p, pl, stream) : cs_run<__half, __half>(p, pl, stream);
    case CS_DTYPE_BF16:
      return f32_out ? cs_run<__nv_bfloat16, float>(p, pl, stream) : cs_run<__nv_bfloat16, __nv_bfloat16>(p, pl, stream);
    default: return CS_ERR_UNSUPPORTED;
  }
}
