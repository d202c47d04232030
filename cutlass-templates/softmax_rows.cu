// cutesmith template: row softmax and log-softmax, bf16 / f16 / f32, any m x n.
//
//   D[i, :] = softmax(x[i, :])        (CS_FAMILY_SOFTMAX)
//   D[i, :] = log_softmax(x[i, :])    (CS_FAMILY_LOG_SOFTMAX)
//             for each of the m rows of n elements (lda, ldd), x = A, or with ops before
//             the softmax (a workload's [[before]] ops, cs_chain) x = cs_chain(A): path 4
//             below
//
// dtype_ab == dtype_cd (bf16, f16 or f32, picked at run time, or fixed by CS_WL_DTYPE_AB
// in a workload instance); the math is f32 whatever the storage type (dtype_acc is not
// consulted). exp(x - max) is computed as ex2.approx(x * log2e - max * log2e) (one FFMA +
// MUFU.EX2, relative error ~2^-22 plus |max * log2e| * 2^-24 from rounding the scaled
// max: ~1e-7 for unit-scale inputs), and rows are normalized by multiplying with 1 / sum.
// log_softmax is x - (max + log(sum)), one FADD per element with the row's max (from the
// scaled max) and sum folded into one constant; an x near -FLT_MAX (a finfo.min mask) stays
// finite where x * log2e would overflow. The family is a compile-time switch when CS_WL_FAMILY is defined
// (a workload instance compiles only its own kernels), a run-time one on p.family
// otherwise.
//
// The goal is DRAM traffic of exactly one read and one write per element. Every row is
// split into a short unaligned head, a body of 16-byte vectors and a short tail, so the
// bulk moves as LDG.E.128 / STG.E.128 for any n and any row start (A and D rows must
// share their offset modulo 16 bytes, which holds when lda == ldd and both pointers are
// 16-byte aligned; otherwise a scalar fallback runs). Without ops before the softmax,
// three paths, chosen per launch (with them, path 4, described where it is defined):
//
//   1. Short rows (n <= CS_WARP_ROW_MAX): one warp per row, the row in registers, max and
//      sum by warp shuffles; 8 warps (8 rows) per CTA, grid-stride over rows.
//   2. Long rows, in registers (CS_ROW_IN_REGS, the default for every row up to
//      CS_CLUSTER_MAX x CS_REG_BYTES): one CTA, or a cluster of C CTAs each holding 1/C of
//      the row, per row. Each thread loads all its 8 (16 with CS_THREADS <= 512) vectors up
//      front, so the whole row is in flight at once; it takes the max and the sum of exp
//      over its registers, the (max, sum) pairs are combined across the CTA (shuffles + one
//      __syncthreads) and, for C > 1, across the cluster through distributed shared memory
//      (one cluster barrier); then the row is written straight from registers. C is the
//      smallest power of two <= CS_CLUSTER_MAX for which a CTA holds at most CS_REG_BYTES:
//      bf16 x 65536 (128 KB) runs as C = 1 (1024 threads x 8 vectors = 32 registers each),
//      f32 x 65536 (256 KB) as C = 2. Smaller rows get smaller CTAs (8 vectors a thread:
//      4096 bf16 = 64 threads), so many rows share an SM.
//   3. Long rows, streaming (rows too long for path 2, or CS_ROW_IN_REGS=0): one CTA (or
//      cluster) per row, online softmax (running max, rescaled sum) in one pass with 4
//      vectors in flight per thread. The write pass reads the row back from dynamic shared
//      memory when CS_CACHE_ROW_IN_SMEM and the CTA's part fits the opt-in limit (227 KB
//      on H100), otherwise it re-reads it from global memory right away: the CTA has just
//      read it, so it is still in L2 as long as the rows in flight fit L2; the grid is
//      throttled (by its dynamic shared memory request) to the CTAs per SM that keep
//      sm_count x CTAs x row bytes within CS_L2_BUDGET_PCT of L2. First read with an L2
//      evict_last policy, re-read with evict_first (last use); stores are st.global.cs.
//
// Measured on an H100 80GB HBM3 (4096 x 65536, device-to-device copy = 2.99 TB/s for
// bf16, 3.01 TB/s for f32, bytes read + written):
//   path 2 (default):          bf16 2.93 TB/s (98%),  f32 2.83 TB/s (94%, cluster of 2)
//   path 2, CS_THREADS=512:    bf16 2.90 TB/s (97%),  f32 2.85 TB/s (95%)
//   path 3, smem cache:        bf16 2.87 TB/s (96%),  f32 2.57 TB/s (85%, cluster of 2)
//   path 3, L2 re-read:        bf16 2.92 TB/s (98%),  f32 2.35 TB/s (78%; 2.44 unthrottled)
//   cluster of 4 for f32 (64 KB a CTA): 2.57 TB/s (85%), so CS_CLUSTER_MAX defaults to 2.
//   4096 x 4096: bf16 2.74 TB/s, f32 2.83 TB/s (copy: 2.62 / 2.83).
// The register path needs neither the shared memory nor L2 luck, and its many
// independent loads per thread keep the most bytes in flight; hence the defaults.
// CS_CACHE_ROW_IN_SMEM only matters for rows past path 2 (or with CS_ROW_IN_REGS=0).
//
// Never allocates, synchronizes or uses a workspace.

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cutesmith_abi.h"
#include "cutesmith_chain.cuh"   // cs_chain: the ops before the softmax, or the identity

// ---------------------------------------------------------------------------------------
// Strategy parameters (override with -DNAME=VALUE)
// ---------------------------------------------------------------------------------------

#ifndef CS_THREADS
#define CS_THREADS 1024           // threads per CTA for long rows (multiple of 32, <= 1024)
#endif
#ifndef CS_WARP_ROW_MAX
#define CS_WARP_ROW_MAX 1024      // rows up to this many elements: one warp per row
#endif
#ifndef CS_CACHE_ROW_IN_SMEM
#define CS_CACHE_ROW_IN_SMEM 1    // streaming path: keep the row in smem for the write pass
#endif
#ifndef CS_ROW_IN_REGS
#define CS_ROW_IN_REGS 1          // long rows that fit CS_REG_BYTES per CTA stay in registers
#endif
#ifndef CS_REG_BYTES
#define CS_REG_BYTES 131072       // most bytes of a row one CTA keeps in registers
#endif
#ifndef CS_CLUSTER_MAX
#define CS_CLUSTER_MAX 2          // largest cluster one long row may be split over (1, 2, 4, 8)
#endif
#ifndef CS_STREAMING_HINT
#define CS_STREAMING_HINT 0       // 1: 16-byte loads ld.global.nc.L1::no_allocate, stores st.global.cs (measured 1-2% slower on the H200)
#endif
#ifndef CS_L2_BUDGET_PCT
#define CS_L2_BUDGET_PCT 70       // L2 re-read path: rows in flight <= this % of L2 (0: no cap)
#endif

static constexpr int kThreads       = CS_THREADS;
static constexpr int kWarpRowMax    = CS_WARP_ROW_MAX;
static constexpr bool kCacheInSmem  = CS_CACHE_ROW_IN_SMEM != 0;
static constexpr bool kRowInRegs    = CS_ROW_IN_REGS != 0;
static constexpr int kClusterMax    = CS_CLUSTER_MAX;
static constexpr int kL2BudgetPct   = CS_L2_BUDGET_PCT;
static constexpr int kWarpCtaThreads = 256;   // warp path: 8 rows per CTA
static constexpr int kStreamUnroll  = 4;      // streaming path: 16-byte vectors in flight per thread
// Most 16-byte vectors per thread on the register path (a power of two, >= 1).
static constexpr int kRegVecsRaw    = CS_REG_BYTES / (16 * CS_THREADS);
static constexpr int kRegVecsMax    = kRegVecsRaw >= 16 ? 16 : kRegVecsRaw >= 8 ? 8
                                    : kRegVecsRaw >= 4 ? 4 : kRegVecsRaw >= 2 ? 2 : 1;
// Fewest vectors per thread the register path uses: many vectors per thread in small CTAs
// put more of the register file to holding row data, hence more bytes in flight per SM
// (f32 4096 x 4096 went from 75% to 100% of copy bandwidth with 8 instead of 1).
static constexpr int kRegVecsMin    = kRegVecsMax < 8 ? kRegVecsMax : 8;

static_assert(kThreads % 32 == 0 && kThreads >= 32 && kThreads <= 1024, "CS_THREADS");
static_assert(kClusterMax == 1 || kClusterMax == 2 || kClusterMax == 4 || kClusterMax == 8,
              "CS_CLUSTER_MAX must be 1, 2, 4 or 8");
static_assert(kWarpRowMax >= 0, "CS_WARP_ROW_MAX");

static constexpr float kLog2e = 1.4426950408889634f;
static constexpr float kLn2   = 0.69314718055994531f;

// Which families and element types this build compiles: a workload instance only its
// own, a template compiled alone all of them.
#if defined(CS_WL_FAMILY)
static constexpr bool kBuildSoftmax    = CS_WL_FAMILY == CS_FAMILY_SOFTMAX;
static constexpr bool kBuildLogSoftmax = CS_WL_FAMILY == CS_FAMILY_LOG_SOFTMAX;
#else
static constexpr bool kBuildSoftmax    = true;
static constexpr bool kBuildLogSoftmax = true;
#endif
#if defined(CS_WL_DTYPE_AB)
static constexpr bool kBuildDtype[3] = {CS_WL_DTYPE_AB == CS_DTYPE_F32,
                                        CS_WL_DTYPE_AB == CS_DTYPE_F16,
                                        CS_WL_DTYPE_AB == CS_DTYPE_BF16};
#else
static constexpr bool kBuildDtype[3] = {true, true, true};
#endif

// ---------------------------------------------------------------------------------------
// Device helpers: PTX wrappers
// ---------------------------------------------------------------------------------------

__device__ __forceinline__ float cs_neg_inf() { return __int_as_float(0xff800000); }

// 2^x: MUFU.EX2 (relative error ~2^-22; results below 2^-126 flush to zero, far below any
// tolerance). ex2(-inf) = +0.
__device__ __forceinline__ float cs_ex2(float x)
{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 16-byte load: with CS_STREAMING_HINT, the read-only path with no L1 allocation (data is
// touched once by this thread); without, a plain load.
__device__ __forceinline__ uint4 cs_ld_vec(const uint4* p)
{
#if CS_STREAMING_HINT
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
#else
  return *p;
#endif
}

// 16-byte load with an L2 cache policy (createpolicy).
__device__ __forceinline__ uint4 cs_ld_vec_hint(const uint4* p, uint64_t policy)
{
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
  return v;
}

__device__ __forceinline__ uint64_t cs_policy_evict_last()
{
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}

__device__ __forceinline__ uint64_t cs_policy_evict_first()
{
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// 16-byte store: with CS_STREAMING_HINT evict-first (the output is not read again by this
// kernel); without, a plain store.
__device__ __forceinline__ void cs_st_vec(uint4* p, uint4 v)
{
#if CS_STREAMING_HINT
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
#else
  *p = v;
#endif
}

// Cluster: rank, size, barriers, distributed shared memory load.
__device__ __forceinline__ unsigned cs_cluster_rank()
{
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ unsigned cs_cluster_size()
{
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ void cs_cluster_sync()
{
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ void cs_cluster_arrive()
{
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

__device__ __forceinline__ void cs_cluster_wait()
{
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

__device__ __forceinline__ float2 cs_ld_dsmem(const void* smem, unsigned rank)
{
  unsigned const local = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];"
               : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
  return v;
}

// ---------------------------------------------------------------------------------------
// Element types: 16-byte vectors of V elements, unpacked to f32
// ---------------------------------------------------------------------------------------

template <class T> struct CsElem;

template <> struct CsElem<float> {
  static constexpr int V = 4;
  using Bits = uint32_t;
  __device__ static float to_f(Bits b) { return __uint_as_float(b); }
  __device__ static Bits from_f(float f) { return __float_as_uint(f); }
  __device__ static uint4 ninf_vec()
  {
    return make_uint4(0xff800000u, 0xff800000u, 0xff800000u, 0xff800000u);
  }
  __device__ static float vmax(uint4 u)
  {
    return fmaxf(fmaxf(__uint_as_float(u.x), __uint_as_float(u.y)),
                 fmaxf(__uint_as_float(u.z), __uint_as_float(u.w)));
  }
  __device__ static void unpack(uint4 u, float (&f)[4])
  {
    f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
  }
  __device__ static uint4 pack(const float (&f)[4])
  {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]),
                      __float_as_uint(f[2]), __float_as_uint(f[3]));
  }
};

template <> struct CsElem<__nv_bfloat16> {
  static constexpr int V = 8;
  using Bits = uint16_t;
  __device__ static float to_f(Bits b) { return __uint_as_float(uint32_t(b) << 16); }
  __device__ static Bits from_f(float f)
  {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
  __device__ static uint4 ninf_vec()
  {
    return make_uint4(0xff80ff80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u);
  }
  __device__ static __nv_bfloat162 h2(uint32_t w) { return *reinterpret_cast<__nv_bfloat162*>(&w); }
  __device__ static float vmax(uint4 u)
  {
    __nv_bfloat162 const m = __hmax2(__hmax2(h2(u.x), h2(u.y)), __hmax2(h2(u.z), h2(u.w)));
    return fmaxf(__low2float(m), __high2float(m));
  }
  __device__ static void unpack(uint4 u, float (&f)[8])
  {
    uint32_t const w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i]     = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  __device__ static uint4 pack(const float (&f)[8])
  {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 const h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};

template <> struct CsElem<__half> {
  static constexpr int V = 8;
  using Bits = uint16_t;
  __device__ static float to_f(Bits b) { return __half2float(__ushort_as_half(b)); }
  __device__ static Bits from_f(float f) { return __half_as_ushort(__float2half_rn(f)); }
  __device__ static uint4 ninf_vec()
  {
    return make_uint4(0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u);
  }
  __device__ static __half2 h2(uint32_t w) { return *reinterpret_cast<__half2*>(&w); }
  __device__ static float vmax(uint4 u)
  {
    __half2 const m = __hmax2(__hmax2(h2(u.x), h2(u.y)), __hmax2(h2(u.z), h2(u.w)));
    return fmaxf(__low2float(m), __high2float(m));
  }
  __device__ static void unpack(uint4 u, float (&f)[8])
  {
    uint32_t const w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 const v = __half22float2(h2(w[i]));
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
  __device__ static uint4 pack(const float (&f)[8])
  {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 const h = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};

template <class T>
__device__ __forceinline__ float cs_ld_scalar(const T* p)
{
  using Bits = typename CsElem<T>::Bits;
  return CsElem<T>::to_f(__ldg(reinterpret_cast<const Bits*>(p)));
}

template <class T>
__device__ __forceinline__ void cs_st_scalar(T* p, float v)
{
  using Bits = typename CsElem<T>::Bits;
  __stcs(reinterpret_cast<Bits*>(p), CsElem<T>::from_f(v));
}

// ---------------------------------------------------------------------------------------
// Row geometry and (max, sum) reductions
// ---------------------------------------------------------------------------------------

// A row as head (elements before the first 16-byte boundary), body (16-byte vectors) and
// tail (the remaining < V elements). A part `rank` of `parts` (cluster split) owns body
// vectors [b0, b1); part 0 also owns the head, the last part the tail.
struct CsRowSplit {
  int body_at;   // element index of the first body vector (the whole row's head length)
  int tail_at;   // element index of the first tail element
  int head, tail, b0, b1;   // this part's head and tail lengths and body vector range
};

template <class T>
__device__ __forceinline__ CsRowSplit cs_split_row(const T* xr, int n, unsigned rank, unsigned parts)
{
  constexpr int V = CsElem<T>::V;
  unsigned const mis = static_cast<unsigned>(reinterpret_cast<uintptr_t>(xr)) & 15u;
  int head = mis ? int((16u - mis) / sizeof(T)) : 0;
  head = head < n ? head : n;
  int const nb = (n - head) / V;
  CsRowSplit s;
  s.body_at = head;
  s.tail_at = head + nb * V;
  s.head = rank == 0 ? head : 0;
  s.tail = rank == parts - 1 ? n - head - nb * V : 0;
  int const chunk = (nb + int(parts) - 1) / int(parts);
  int const b0 = int(rank) * chunk;
  s.b0 = b0 < nb ? b0 : nb;
  s.b1 = b0 + chunk < nb ? b0 + chunk : nb;
  return s;
}

// The partial state of a row: mL = max(x) * log2e (or -inf when empty) and
// s = sum(2^(x log2e - mL)). Combining is symmetric, so butterfly shuffles leave the
// bit-identical result in every lane.
__device__ __forceinline__ void cs_combine(float& m, float& s, float m2, float s2)
{
  float const M  = fmaxf(m, m2);
  float const Me = M == cs_neg_inf() ? 0.0f : M;
  s = s * cs_ex2(m - Me) + s2 * cs_ex2(m2 - Me);
  m = M;
}

__device__ __forceinline__ void cs_warp_reduce(float& m, float& s)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float const m2 = __shfl_xor_sync(0xffffffffu, m, o);
    float const s2 = __shfl_xor_sync(0xffffffffu, s, o);
    cs_combine(m, s, m2, s2);
  }
}

// Over the CTA (one __syncthreads; every warp then reduces all warp partials itself).
__device__ __forceinline__ void cs_block_reduce(float& m, float& s, float2* red)
{
  cs_warp_reduce(m, s);
  int const warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  if (lane == 0) red[warp] = make_float2(m, s);
  __syncthreads();
  float2 const v = lane < int(blockDim.x >> 5) ? red[lane] : make_float2(cs_neg_inf(), 0.0f);
  m = v.x;
  s = v.y;
  cs_warp_reduce(m, s);
}

// Over the cluster through distributed shared memory. Ends with a cluster arrive: the
// caller must cs_cluster_wait() before exiting (a peer may still read our slot).
__device__ __forceinline__ void cs_cluster_reduce(float& m, float& s, float2* slot, unsigned parts)
{
  if (threadIdx.x == 0) *slot = make_float2(m, s);
  cs_cluster_sync();
  int const lane = int(threadIdx.x & 31);
  float2 const v = lane < int(parts) ? cs_ld_dsmem(slot, unsigned(lane))
                                     : make_float2(cs_neg_inf(), 0.0f);
  m = v.x;
  s = v.y;
  cs_warp_reduce(m, s);   // consumes the remote values before the arrive below
  cs_cluster_arrive();
}

// Thread-local (mL, s) from a raw max and the f32 elements (entries at -inf add 0).
__device__ __forceinline__ float cs_scaled_max(float raw_max)
{
  return raw_max == cs_neg_inf() ? cs_neg_inf() : raw_max * kLog2e;
}

__device__ __forceinline__ float cs_finite_or_zero(float mL)
{
  return mL == cs_neg_inf() ? 0.0f : mL;
}

// An element of the finished row from the row's (mL, s): softmax 2^(x log2e - mL) / s,
// log_softmax x - (max + ln s).
template <bool LOG>
struct CsRowOut {
  // k: 1 / s (softmax); for log_softmax ml holds the row's max + ln(s) (mL ln 2 + ln s),
  // so each element costs one subtraction, and an x near -FLT_MAX (a finfo.min mask)
  // stays finite where x log2e would overflow.
  float ml, k;
  __device__ __forceinline__ CsRowOut(float mL, float s)
      : ml(LOG ? cs_finite_or_zero(mL) * kLn2 + logf(s) : cs_finite_or_zero(mL)),
        k(LOG ? 0.0f : 1.0f / s) {}
  __device__ __forceinline__ float operator()(float x) const
  {
    if constexpr (LOG) return x - ml;
    else               return cs_ex2(fmaf(x, kLog2e, -ml)) * k;
  }
};

// A row element by element, for the scalar paths: the online max and sum over `load(j)`,
// one CTA reduction, then each element re-loaded and written.
template <bool LOG, class T, class Load>
__device__ __forceinline__ void cs_scalar_row(T* yr, int64_t n, int g, int G, float2* red, Load load)
{
  float mL = cs_neg_inf(), s = 0.0f;
  for (int64_t j = g; j < n; j += G) {
    float const v  = load(j);
    float const vL = cs_scaled_max(v);
    if (vL > mL) {
      s *= cs_ex2(mL - vL);
      mL = vL;
    }
    s += cs_ex2(fmaf(v, kLog2e, -cs_finite_or_zero(mL)));
  }
  cs_block_reduce(mL, s, red);
  CsRowOut<LOG> const out(mL, s);
  for (int64_t j = g; j < n; j += G) cs_st_scalar(yr + j, out(load(j)));
}

// ---------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------

// A row part held in registers by G threads: VPT body vectors each plus one head and one
// tail element. Loads, reduces through `reduce(mL, s)`, writes.
template <class T, int VPT, bool LOG, class Reduce>
__device__ __forceinline__ void cs_row_in_registers(const T* __restrict__ xr, T* __restrict__ yr,
                                                    int n, unsigned rank, unsigned parts,
                                                    int g, int G, Reduce reduce)
{
  using E = CsElem<T>;
  constexpr int V = E::V;
  CsRowSplit const sp = cs_split_row(xr, n, rank, parts);
  const uint4* xv = reinterpret_cast<const uint4*>(xr + sp.body_at);
  uint4* yv = reinterpret_cast<uint4*>(yr + sp.body_at);
  int const tail_at = sp.tail_at;

  uint4 r[VPT];
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    int const j = sp.b0 + g + i * G;
    r[i] = j < sp.b1 ? cs_ld_vec(xv + j) : E::ninf_vec();
  }
  bool const has_head = g < sp.head;
  bool const has_tail = g < sp.tail;
  float const hx = has_head ? cs_ld_scalar(xr + g) : cs_neg_inf();
  float const tx = has_tail ? cs_ld_scalar(xr + tail_at + g) : cs_neg_inf();

  // Thread-local max, then sum of 2^(x log2e - mL).
  float mx = fmaxf(hx, tx);
#pragma unroll
  for (int i = 0; i < VPT; ++i) mx = fmaxf(mx, E::vmax(r[i]));
  float mL = cs_scaled_max(mx);
  float const ml = cs_finite_or_zero(mL);
  float s = cs_ex2(fmaf(hx, kLog2e, -ml)) + cs_ex2(fmaf(tx, kLog2e, -ml));
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    float f[V];
    E::unpack(r[i], f);
    float part = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) part += cs_ex2(fmaf(f[k], kLog2e, -ml));
    s += part;
  }

  reduce(mL, s);
  CsRowOut<LOG> const out(mL, s);

#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    int const j = sp.b0 + g + i * G;
    if (j < sp.b1) {
      float f[V];
      E::unpack(r[i], f);
#pragma unroll
      for (int k = 0; k < V; ++k) f[k] = out(f[k]);
      cs_st_vec(yv + j, E::pack(f));
    }
  }
  if (has_head) cs_st_scalar(yr + g, out(hx));
  if (has_tail) cs_st_scalar(yr + tail_at + g, out(tx));
}

// Path 1: one warp per row (n <= CS_WARP_ROW_MAX), rows grid-strided.
template <class T, int VPT, bool LOG>
__global__ void __launch_bounds__(kWarpCtaThreads, 1)
cs_softmax_warp_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t m, int n,
                       int64_t lda, int64_t ldd)
{
  int64_t const warps = int64_t(blockDim.x >> 5);
  int const lane = int(threadIdx.x & 31);
  for (int64_t row = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); row < m;
       row += int64_t(gridDim.x) * warps) {
    cs_row_in_registers<T, VPT, LOG>(x + row * lda, y + row * ldd, n, 0u, 1u, lane, 32,
                                [](float& mL, float& s) { cs_warp_reduce(mL, s); });
  }
}

// Path 2: one CTA (or one cluster of blockIdx-consecutive CTAs) per row, row in registers.
// Up to 8 vectors per thread the row fits in 64 registers (bound 1024 caps them there, so
// small CTAs of a mid-size row can share an SM); 16 (CS_THREADS <= 512) needs 128.
// log_softmax keeps more live values per element (ptxas spilled at 64 registers): its
// register path uses CTAs of at most 512 threads, bounded there (128 registers).
template <bool LOG>
struct CsRegThreads { static constexpr int value = LOG && kThreads > 512 ? 512 : kThreads; };
template <int VPT, bool LOG>
struct CsRegBound {
  static constexpr int value = VPT <= 8 && !LOG ? 1024 : CsRegThreads<LOG>::value;
};

template <class T, int VPT, bool LOG>
__global__ void __launch_bounds__(CsRegBound<VPT, LOG>::value, 1)
cs_softmax_regs_kernel(const T* __restrict__ x, T* __restrict__ y, int n, int64_t lda, int64_t ldd)
{
  __shared__ float2 red[32];
  __shared__ float2 slot;
  unsigned const parts = cs_cluster_size();
  unsigned const rank  = parts > 1 ? cs_cluster_rank() : 0u;
  int64_t const row = int64_t(blockIdx.x / parts);
  cs_row_in_registers<T, VPT, LOG>(x + row * lda, y + row * ldd, n, rank, parts,
                              int(threadIdx.x), int(blockDim.x),
                              [&](float& mL, float& s) {
                                cs_block_reduce(mL, s, red);
                                if (parts > 1) cs_cluster_reduce(mL, s, &slot, parts);
                              });
  if (parts > 1) cs_cluster_wait();
}

// Path 3: one CTA (or cluster) per row, online softmax while streaming the row, then a
// write pass from shared memory (CACHE) or from global memory / L2 (re-read). VEC = false
// is the scalar fallback for rows whose A and D offsets differ modulo 16 bytes.
template <class T, bool VEC, bool CACHE, bool LOG>
__global__ void __launch_bounds__(kThreads)
cs_softmax_stream_kernel(const T* __restrict__ x, T* __restrict__ y, int n, int64_t lda, int64_t ldd)
{
  using E = CsElem<T>;
  constexpr int V = E::V;
  constexpr int U = kStreamUnroll;
  extern __shared__ __align__(16) uint4 cs_row_cache[];
  __shared__ float2 red[32];
  __shared__ float2 slot;

  unsigned const parts = cs_cluster_size();
  unsigned const rank  = parts > 1 ? cs_cluster_rank() : 0u;
  int64_t const row = int64_t(blockIdx.x / parts);
  const T* xr = x + row * lda;
  T* yr = y + row * ldd;
  int const g = int(threadIdx.x), G = int(blockDim.x);

  float mL = cs_neg_inf(), s = 0.0f;

  if constexpr (VEC) {
    CsRowSplit const sp = cs_split_row(xr, n, rank, parts);
    const uint4* xv = reinterpret_cast<const uint4*>(xr + sp.body_at);
    uint4* yv = reinterpret_cast<uint4*>(yr + sp.body_at);
    int const tail_at = sp.tail_at;

    bool const has_head = g < sp.head;
    bool const has_tail = g < sp.tail;
    float const hx = has_head ? cs_ld_scalar(xr + g) : cs_neg_inf();
    float const tx = has_tail ? cs_ld_scalar(xr + tail_at + g) : cs_neg_inf();
    mL = cs_scaled_max(fmaxf(hx, tx));
    {
      float const ml = cs_finite_or_zero(mL);
      s = cs_ex2(fmaf(hx, kLog2e, -ml)) + cs_ex2(fmaf(tx, kLog2e, -ml));
    }

    uint64_t const keep = CACHE ? 0 : cs_policy_evict_last();
    for (int j0 = sp.b0 + g; j0 < sp.b1; j0 += U * G) {
      uint4 r[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        int const j = j0 + u * G;
        if (j < sp.b1) r[u] = CACHE ? cs_ld_vec(xv + j) : cs_ld_vec_hint(xv + j, keep);
        else           r[u] = E::ninf_vec();
      }
      float cm = E::vmax(r[0]);
#pragma unroll
      for (int u = 1; u < U; ++u) cm = fmaxf(cm, E::vmax(r[u]));
      float const cmL = cs_scaled_max(cm);
      if (cmL > mL) {               // new running max: rescale the running sum
        s *= cs_ex2(mL - cmL);
        mL = cmL;
      }
      float const ml = cs_finite_or_zero(mL);
      float part = 0.0f;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float f[V];
        E::unpack(r[u], f);
#pragma unroll
        for (int k = 0; k < V; ++k) part += cs_ex2(fmaf(f[k], kLog2e, -ml));
      }
      s += part;
      if constexpr (CACHE) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          int const j = j0 + u * G;
          if (j < sp.b1) cs_row_cache[j - sp.b0] = r[u];
        }
      }
    }

    cs_block_reduce(mL, s, red);
    if (parts > 1) cs_cluster_reduce(mL, s, &slot, parts);
    CsRowOut<LOG> const out(mL, s);

    // Write pass: each thread re-reads exactly the vectors it read (no barrier needed for
    // the shared memory cache), in the same order (oldest L2 lines first).
    uint64_t const last = CACHE ? 0 : cs_policy_evict_first();
    for (int j0 = sp.b0 + g; j0 < sp.b1; j0 += U * G) {
      uint4 r[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        int const j = j0 + u * G;
        if (j < sp.b1) r[u] = CACHE ? cs_row_cache[j - sp.b0] : cs_ld_vec_hint(xv + j, last);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        int const j = j0 + u * G;
        if (j < sp.b1) {
          float f[V];
          E::unpack(r[u], f);
#pragma unroll
          for (int k = 0; k < V; ++k) f[k] = out(f[k]);
          cs_st_vec(yv + j, E::pack(f));
        }
      }
    }
    if (has_head) cs_st_scalar(yr + g, out(hx));
    if (has_tail) cs_st_scalar(yr + tail_at + g, out(tx));
  } else {
    // Scalar fallback (never a cluster).
    cs_scalar_row<LOG>(yr, n, g, G, red, [&](int64_t j) { return cs_ld_scalar(xr + j); });
  }
  if (parts > 1) cs_cluster_wait();
}


// ---------------------------------------------------------------------------------------
// Path 4: ops before the softmax (cs_chain, the workload's [[before]] ops)
// ---------------------------------------------------------------------------------------
//
// Each element x of the row becomes cs_chain::apply(x, t) (with its row and column for an
// index op: a causal tril) before the max, the sum and the output read it; the operands t
// are indexed like the input (row: n values, col: m values, matrix: m x n, broadcast: over
// dims). A row's operand offsets are computed once (a broadcast operand's row index costs
// two 64-bit divisions), then each vector of V elements reads a run of V values of every
// operand that varies along the row (16-byte loads where aligned) and one value a row of
// the others. A warp (rows up to 32 x 8 vectors) or a CTA owns a row; the values after the
// ops stay in registers as f32 when the row fits (VPT vectors a thread), else the row is
// streamed twice (online max and sum, then the write pass re-reading it and the operands
// from L2, the ops applied again).

// The step of chain operand I's element index along a row: 1 (a run of values), 0 (one
// value a row), -1 (a broadcast operand whose column stride is not known: o.ld).
template <class Chain, int I>
__host__ __device__ constexpr int cs_row_step()
{
  if constexpr (cs_chain_kind<Chain>(I) == CS_OPERAND_COL) return 0;
  else if constexpr (cs_chain_kind<Chain>(I) == CS_OPERAND_BROADCAST) return cs_chain_bcast<Chain>(I).col;
  else return 1;
}

// The chain's operands on one row: each slot's element index at column 0, and the value
// of the slots that hold one value a row.
struct CsRowOperands {
  int64_t base[CS_MAX_OPERANDS];
  float one[CS_MAX_OPERANDS];
  // Whether a slot's run at column `at` (the row's first 16-byte vector of A; every later
  // vector of A starts 16 bytes on, the operand's run a multiple of 16 bytes on) starts on
  // a 16-byte boundary: checked once a row, not at every load.
  bool aligned[CS_MAX_OPERANDS];
};

template <class Chain, int I>
__device__ __forceinline__ void cs_row_operand_init(const cs_problem& p, int64_t row, CsRowOperands& r)
{
  if constexpr (Chain::kOperands > I) {
    constexpr int kind = cs_chain_kind<Chain>(I);
    cs_operand const& o = p.operands[cs_chain_first<Chain>() + I];
    if constexpr (kind == CS_OPERAND_BROADCAST) {
      // The row index in 32 bits (rows, divisors and moduli are below 2^31: the host
      // checked), a few instructions a term instead of a 64-bit division's dozens.
      uint32_t const r32 = uint32_t(row);
      r.base[I] = int64_t((r32 / uint32_t(o.row_div[0])) % uint32_t(o.row_mod[0])) * o.row_stride[0] +
                  int64_t((r32 / uint32_t(o.row_div[1])) % uint32_t(o.row_mod[1])) * o.row_stride[1];
    } else {
      r.base[I] = cs_operand_index<kind>(o, CS_LAYOUT_ROW, 0, row, 0, p.n);
    }
    if constexpr (cs_row_step<Chain, I>() == 0) {
      constexpr int dt = cs_chain_dtype<Chain>(I);
      if constexpr (dt >= 0) r.one[I] = cs_load_typed<dt>(o.ptr, r.base[I]);
      else r.one[I] = cs_load_as_float(o.ptr, o.dtype, r.base[I]);
    }
  }
}

template <class Chain, int I>
__device__ __forceinline__ void cs_row_operand_align(const cs_problem& p, int64_t at, CsRowOperands& r)
{
  if constexpr (Chain::kOperands > I) {
    constexpr int dt = cs_chain_dtype<Chain>(I);
    constexpr int es = dt == CS_DTYPE_F32 ? 4 : (dt == CS_DTYPE_F16 || dt == CS_DTYPE_BF16) ? 2 : 0;
    if constexpr (es > 0) {
      uintptr_t const a = reinterpret_cast<uintptr_t>(p.operands[cs_chain_first<Chain>() + I].ptr) +
                          uintptr_t((r.base[I] + at) * es);
      r.aligned[I] = (a & 15u) == 0;
    }
  }
}

template <class Chain>
__device__ __forceinline__ CsRowOperands cs_row_operands(const cs_problem& p, int64_t row, int64_t at = 0)
{
  CsRowOperands r;
#pragma unroll
  for (int i = 0; i < CS_MAX_OPERANDS; ++i) {
    r.base[i] = 0;
    r.one[i] = 0.0f;
    r.aligned[i] = false;
  }
  cs_row_operand_init<Chain, 0>(p, row, r);
  cs_row_operand_init<Chain, 1>(p, row, r);
  cs_row_operand_init<Chain, 2>(p, row, r);
  cs_row_operand_init<Chain, 3>(p, row, r);
  cs_row_operand_align<Chain, 0>(p, at, r);
  cs_row_operand_align<Chain, 1>(p, at, r);
  cs_row_operand_align<Chain, 2>(p, at, r);
  cs_row_operand_align<Chain, 3>(p, at, r);
  return r;
}

// V consecutive values of cs_dtype DT from base[idx] as f32: 16-byte loads when `aligned`
// (a row's vectors of A only: see CsRowOperands::aligned), else one by one.
template <int DT, int V>
__device__ __forceinline__ void cs_row_load_run(const void* base, int64_t idx, bool aligned, float (&out)[V])
{
  constexpr int es = DT == CS_DTYPE_F32 ? 4 : (DT == CS_DTYPE_F16 || DT == CS_DTYPE_BF16) ? 2 : 0;
  constexpr int per16 = es > 0 ? 16 / es : 1;
  if constexpr (DT == CS_DTYPE_BOOL) {
    cs_load_bools<V>(base, idx, out);   // its own alignment check (V bytes)
    return;
  }
  if constexpr (DT != CS_DTYPE_BOOL && es > 0 && V % per16 == 0) {
    if (aligned) {
      const uint4* q = reinterpret_cast<const uint4*>(static_cast<const char*>(base) + idx * es);
#pragma unroll
      for (int w = 0; w < V / per16; ++w) {
        uint4 const r = __ldg(q + w);
        if constexpr (DT == CS_DTYPE_F32) {
          float f[4];
          CsElem<float>::unpack(r, f);
#pragma unroll
          for (int e = 0; e < 4; ++e) out[w * 4 + e] = f[e];
        } else {
          using T = std::conditional_t<DT == CS_DTYPE_F16, __half, __nv_bfloat16>;
          float f[8];
          CsElem<T>::unpack(r, f);
#pragma unroll
          for (int e = 0; e < 8; ++e) out[w * 8 + e] = f[e];
        }
      }
      return;
    }
  }
  if constexpr (DT != CS_DTYPE_BOOL) {
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = cs_load_typed<DT>(base, idx + e);
  }
}

// Operand slot I for V consecutive elements from column col0.
template <class Chain, int I, int V>
__device__ __forceinline__ void cs_row_operand_run(const cs_problem& p, const CsRowOperands& r, int64_t col0,
                                                   float (&t)[V][CS_MAX_OPERANDS])
{
  if constexpr (Chain::kOperands > I) {
    constexpr int dt = cs_chain_dtype<Chain>(I), step = cs_row_step<Chain, I>();
    cs_operand const& o = p.operands[cs_chain_first<Chain>() + I];
    if constexpr (step == 0) {
#pragma unroll
      for (int q = 0; q < V; ++q) t[q][I] = r.one[I];
    } else if constexpr (step == 1 && dt >= 0) {
      float v[V];
      cs_row_load_run<dt, V>(o.ptr, r.base[I] + col0, V > 1 && r.aligned[I], v);
#pragma unroll
      for (int q = 0; q < V; ++q) t[q][I] = v[q];
    } else {
#pragma unroll
      for (int q = 0; q < V; ++q) {
        int64_t const idx = r.base[I] + (col0 + q) * (step == 1 ? int64_t(1) : o.ld);
        if constexpr (dt >= 0) t[q][I] = cs_load_typed<dt>(o.ptr, idx);
        else t[q][I] = cs_load_as_float(o.ptr, o.dtype, idx);
      }
    }
  }
}

// The ops on V consecutive elements x of a row from column col0; `row` is the row an index
// op sees (cs_index_row).
template <class Chain, int V>
__device__ __forceinline__ void cs_row_ops(const cs_problem& p, const CsRowOperands& r, int64_t row, int64_t col0,
                                           float (&x)[V])
{
  float t[V][CS_MAX_OPERANDS];
#pragma unroll
  for (int q = 0; q < V; ++q)
#pragma unroll
    for (int i = 0; i < CS_MAX_OPERANDS; ++i) t[q][i] = 0.0f;
  cs_row_operand_run<Chain, 0, V>(p, r, col0, t);
  cs_row_operand_run<Chain, 1, V>(p, r, col0, t);
  cs_row_operand_run<Chain, 2, V>(p, r, col0, t);
  cs_row_operand_run<Chain, 3, V>(p, r, col0, t);
#pragma unroll
  for (int q = 0; q < V; ++q) {
    if constexpr (Chain::kPositional) x[q] = Chain::apply(x[q], t[q], row, col0 + q);
    else x[q] = Chain::apply(x[q], t[q]);
  }
}

// The row index ops (triu, tril) see: within the matrix of the last two dims (p.k rows, a
// softmax over dims), else the row itself. Once a row: a 64-bit remainder.
__device__ __forceinline__ int64_t cs_index_row(const cs_problem& p, int64_t row)
{
  if constexpr (cs_chain::kPositional) return p.k > 0 ? row % p.k : row;
  else return row;
}

// One element of the row after the ops (-inf outside the row: adds nothing).
template <class T>
__device__ __forceinline__ float cs_row_elem(const cs_problem& p, const CsRowOperands& r, const T* xr, int64_t row,
                                             int64_t col, bool in)
{
  if (!in) return cs_neg_inf();
  float v[1] = {cs_ld_scalar(xr + col)};
  cs_row_ops<cs_chain, 1>(p, r, row, col, v);
  return v[0];
}

// The largest (MAX) or the sum of v over the warp (WARP) or the CTA (one __syncthreads;
// `red` holds a value a warp and is not reused before the next barrier).
template <bool WARP, bool MAX>
__device__ __forceinline__ float cs_row_reduce(float v, float* red)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float const w = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, w) : v + w;
  }
  if constexpr (!WARP) {
    int const warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < int(blockDim.x >> 5) ? red[lane] : (MAX ? cs_neg_inf() : 0.0f);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      float const w = __shfl_xor_sync(0xffffffffu, v, o);
      v = MAX ? fmaxf(v, w) : v + w;
    }
  }
  return v;
}

template <class T, int VPT, bool LOG, bool WARP>
__global__ void __launch_bounds__(WARP ? kWarpCtaThreads : kThreads)
cs_softmax_chain_kernel(const cs_problem p)
{
  using E = CsElem<T>;
  constexpr int V = E::V;
  __shared__ float2 red[32];
  __shared__ float red_max[32], red_sum[32];
  const T* x = static_cast<const T*>(p.a);
  T* y = static_cast<T*>(p.d);
  int const n = int(p.n);
  int const G = WARP ? 32 : int(blockDim.x);
  int const g = WARP ? int(threadIdx.x & 31) : int(threadIdx.x);
  int64_t const per_cta = WARP ? int64_t(blockDim.x >> 5) : 1;
  auto reduce = [&](float& mL, float& s) {
    if constexpr (WARP) cs_warp_reduce(mL, s);
    else cs_block_reduce(mL, s, red);
  };
  for (int64_t row = int64_t(blockIdx.x) * per_cta + (WARP ? int64_t(threadIdx.x >> 5) : 0); row < p.m;
       row += int64_t(gridDim.x) * per_cta) {
    const T* xr = x + row * p.lda;
    T* yr = y + row * p.ldd;
    CsRowSplit const sp = cs_split_row(xr, n, 0u, 1u);
    CsRowOperands const ops = cs_row_operands<cs_chain>(p, row, sp.body_at);
    int64_t const irow = cs_index_row(p, row);
    const uint4* xv = reinterpret_cast<const uint4*>(xr + sp.body_at);
    uint4* yv = reinterpret_cast<uint4*>(yr + sp.body_at);
    int const nb = sp.b1;
    bool const has_head = g < sp.head, has_tail = g < sp.tail;
    float const hx = cs_row_elem<T>(p, ops, xr, irow, g, has_head);
    float const tx = cs_row_elem<T>(p, ops, xr, irow, int64_t(sp.tail_at) + g, has_tail);
    if (nb <= VPT * G) {
      // The row's values after the ops in registers: every body load of A in flight first
      // (the head and tail elements, with their operands, were read above).
      uint4 raw[VPT];
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        int const j = g + i * G;
        raw[i] = j < nb ? cs_ld_vec(xv + j) : E::ninf_vec();
      }
      float f[VPT][V];
      float mx = fmaxf(hx, tx);
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        int const j = g + i * G;
        if (j < nb) {
          E::unpack(raw[i], f[i]);
          cs_row_ops<cs_chain, V>(p, ops, irow, int64_t(sp.body_at) + int64_t(j) * V, f[i]);
        } else {
#pragma unroll
          for (int k = 0; k < V; ++k) f[i][k] = cs_neg_inf();
        }
#pragma unroll
        for (int k = 0; k < V; ++k) mx = fmaxf(mx, f[i][k]);
      }
      // The row's max first, then the sum of 2^(x log2e - max) against it: no rescaling.
      float const mL = cs_scaled_max(cs_row_reduce<WARP, true>(mx, red_max));
      float const ml = cs_finite_or_zero(mL);
      float s = cs_ex2(fmaf(hx, kLog2e, -ml)) + cs_ex2(fmaf(tx, kLog2e, -ml));
      // softmax keeps each 2^(x log2e - max) for its output (one MUFU.EX2 an element).
#pragma unroll
      for (int i = 0; i < VPT; ++i)
#pragma unroll
        for (int k = 0; k < V; ++k) {
          float const e = cs_ex2(fmaf(f[i][k], kLog2e, -ml));
          s += e;
          if constexpr (!LOG) f[i][k] = e;
        }
      s = cs_row_reduce<WARP, false>(s, red_sum);
      CsRowOut<LOG> const out(mL, s);
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        int const j = g + i * G;
        if (j < nb) {
#pragma unroll
          for (int k = 0; k < V; ++k) f[i][k] = LOG ? out(f[i][k]) : f[i][k] * out.k;
          cs_st_vec(yv + j, E::pack(f[i]));
        }
      }
      if (has_head) cs_st_scalar(yr + g, out(hx));
      if (has_tail) cs_st_scalar(yr + sp.tail_at + g, out(tx));
    } else {
      // Streamed: online max and sum, then the write pass re-reads the row (from L2).
      float mL = cs_scaled_max(fmaxf(hx, tx));
      float s;
      {
        float const ml = cs_finite_or_zero(mL);
        s = cs_ex2(fmaf(hx, kLog2e, -ml)) + cs_ex2(fmaf(tx, kLog2e, -ml));
      }
      for (int j = g; j < nb; j += G) {
        float f[V];
        E::unpack(cs_ld_vec(xv + j), f);
        cs_row_ops<cs_chain, V>(p, ops, irow, int64_t(sp.body_at) + int64_t(j) * V, f);
        float cm = f[0];
#pragma unroll
        for (int k = 1; k < V; ++k) cm = fmaxf(cm, f[k]);
        float const cmL = cs_scaled_max(cm);
        if (cmL > mL) {
          s *= cs_ex2(mL - cmL);
          mL = cmL;
        }
        float const ml = cs_finite_or_zero(mL);
#pragma unroll
        for (int k = 0; k < V; ++k) s += cs_ex2(fmaf(f[k], kLog2e, -ml));
      }
      reduce(mL, s);
      CsRowOut<LOG> const out(mL, s);
      for (int j = g; j < nb; j += G) {
        float f[V];
        E::unpack(cs_ld_vec(xv + j), f);
        cs_row_ops<cs_chain, V>(p, ops, irow, int64_t(sp.body_at) + int64_t(j) * V, f);
#pragma unroll
        for (int k = 0; k < V; ++k) f[k] = out(f[k]);
        cs_st_vec(yv + j, E::pack(f));
      }
      if (has_head) cs_st_scalar(yr + g, out(hx));
      if (has_tail) cs_st_scalar(yr + sp.tail_at + g, out(tx));
    }
    // The next row's reduction reuses `red`.
    if constexpr (!WARP) __syncthreads();
  }
}

// Rows whose A and D offsets differ modulo 16 bytes, with ops: a CTA a row, element by
// element, the row streamed twice.
template <class T, bool LOG>
__global__ void __launch_bounds__(kThreads)
cs_softmax_chain_scalar_kernel(const cs_problem p)
{
  __shared__ float2 red[32];
  const T* x = static_cast<const T*>(p.a);
  T* y = static_cast<T*>(p.d);
  int const G = int(blockDim.x), g = int(threadIdx.x);
  for (int64_t row = blockIdx.x; row < p.m; row += gridDim.x) {
    const T* xr = x + row * p.lda;
    T* yr = y + row * p.ldd;
    CsRowOperands const ops = cs_row_operands<cs_chain>(p, row);
    int64_t const irow = cs_index_row(p, row);
    cs_scalar_row<LOG>(yr, p.n, g, G, red,
                       [&](int64_t j) { return cs_row_elem<T>(p, ops, xr, irow, j, true); });
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------------------
// Host launcher
// ---------------------------------------------------------------------------------------

static inline int cs_pow2_at_least(int64_t x)
{
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

template <class Kernel, class... Args>
static cudaError_t cs_launch(Kernel kernel, unsigned grid, unsigned block, int smem_bytes,
                             int cluster, cudaStream_t stream, Args... args)
{
  if (smem_bytes > 48 * 1024) {
    cudaError_t const err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    if (err != cudaSuccess) return err;
  }
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attrs[1];
  config.gridDim          = dim3(grid, 1, 1);
  config.blockDim         = dim3(block, 1, 1);
  config.dynamicSmemBytes = size_t(smem_bytes);
  config.stream           = stream;
  config.attrs            = attrs;
  config.numAttrs         = 0;
  if (cluster > 1) {
    attrs[0].id               = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = unsigned(cluster);
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, args...);
}

struct CsDeviceFacts {
  int smem_optin;     // max dynamic shared memory per CTA (opt-in)
  int smem_per_sm;
  int l2_bytes;
  int sms;
};

static cudaError_t cs_device_facts(CsDeviceFacts& f, int sm_count_hint)
{
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  err = cudaDeviceGetAttribute(&f.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (err != cudaSuccess) return err;
  err = cudaDeviceGetAttribute(&f.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  if (err != cudaSuccess) return err;
  err = cudaDeviceGetAttribute(&f.l2_bytes, cudaDevAttrL2CacheSize, dev);
  if (err != cudaSuccess) return err;
  f.sms = sm_count_hint;
  if (f.sms <= 0) {
    err = cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <class T, bool LOG, int VPT>
static cudaError_t cs_launch_warp(const cs_problem& p, cudaStream_t stream)
{
  int64_t const rows_per_cta = kWarpCtaThreads / 32;
  int64_t grid = (p.m + rows_per_cta - 1) / rows_per_cta;
  if (grid > 0x7fffffffLL) grid = 0x7fffffffLL;   // grid-stride covers the rest
  return cs_launch(cs_softmax_warp_kernel<T, VPT, LOG>, unsigned(grid), unsigned(kWarpCtaThreads),
                   0, 1, stream, static_cast<const T*>(p.a), static_cast<T*>(p.d),
                   int64_t(p.m), int(p.n), int64_t(p.lda), int64_t(p.ldd));
}

template <class T, bool LOG, int VPT>
static cudaError_t cs_launch_regs(const cs_problem& p, cudaStream_t stream, int cluster, int threads)
{
  return cs_launch(cs_softmax_regs_kernel<T, VPT, LOG>, unsigned(p.m * cluster), unsigned(threads),
                   0, cluster, stream, static_cast<const T*>(p.a), static_cast<T*>(p.d),
                   int(p.n), int64_t(p.lda), int64_t(p.ldd));
}

template <class T, bool LOG, bool VEC, bool CACHE>
static cudaError_t cs_launch_stream(const cs_problem& p, cudaStream_t stream, int cluster,
                                    int threads, int smem_bytes)
{
  return cs_launch(cs_softmax_stream_kernel<T, VEC, CACHE, LOG>, unsigned(p.m * cluster),
                   unsigned(threads), smem_bytes, cluster, stream,
                   static_cast<const T*>(p.a), static_cast<T*>(p.d),
                   int(p.n), int64_t(p.lda), int64_t(p.ldd));
}

// Register path: VPT vectors per thread, VPT a power of two in [kRegVecsMin, kRegVecsMax].
template <class T, bool LOG, int VPT = kRegVecsMin>
static cudaError_t cs_dispatch_regs(const cs_problem& p, cudaStream_t stream, int cluster,
                                    int vpt, int threads)
{
  if constexpr (VPT > kRegVecsMax) {
    return cudaErrorInvalidValue;
  } else {
    if (vpt == VPT) return cs_launch_regs<T, LOG, VPT>(p, stream, cluster, threads);
    if constexpr (VPT * 2 <= kRegVecsMax) {
      return cs_dispatch_regs<T, LOG, VPT * 2>(p, stream, cluster, vpt, threads);
    } else {
      return cudaErrorInvalidValue;
    }
  }
}

// Smallest dynamic shared memory request that limits the re-read path to the CTAs per SM
// whose rows fit the L2 budget (0: no limit needed).
static int cs_l2_throttle_smem(const CsDeviceFacts& f, int64_t row_bytes, int threads)
{
  if (kL2BudgetPct <= 0 || row_bytes <= 0) return 0;
  int64_t const budget = int64_t(f.l2_bytes) * kL2BudgetPct / 100;
  int64_t per_sm = budget / (int64_t(f.sms) * row_bytes);
  if (per_sm < 1) per_sm = 1;
  int64_t const by_threads = 2048 / threads;
  if (per_sm >= by_threads) return 0;
  // 1 KB per CTA is reserved by the system, plus our static shared memory.
  int64_t smem = int64_t(f.smem_per_sm) / per_sm - 2048;
  if (smem > f.smem_optin) smem = f.smem_optin;
  return smem > 0 ? int(smem) : 0;
}

// Path 4's launch: a warp a row while the row fits 32 x 8 vectors, else a CTA a row (16 or
// 32 values a thread in registers up to 32 x CS_THREADS values, streamed past that).
template <class T, bool LOG>
static int32_t cs_softmax_chain_run(const cs_problem& p, cudaStream_t stream, bool vec)
{
  constexpr int V = CsElem<T>::V;
  int64_t const n = p.n;
  int64_t const cap = 0x7fffffffLL;
  if (!vec) {
    int64_t threads = (n + 31) / 32 * 32;
    if (threads > kThreads) threads = kThreads;
    return int32_t(cs_launch(cs_softmax_chain_scalar_kernel<T, LOG>, unsigned(p.m < cap ? p.m : cap),
                             unsigned(threads), 0, 1, stream, p));
  }
  int64_t const nb_max = n / V;
  if (nb_max <= 32 * 8) {
    int64_t const rows_per_cta = kWarpCtaThreads / 32;
    int64_t grid = (p.m + rows_per_cta - 1) / rows_per_cta;
    if (grid > cap) grid = cap;
    int const vpt = cs_pow2_at_least((nb_max + 31) / 32);
    switch (vpt) {
      case 1: return int32_t(cs_launch(cs_softmax_chain_kernel<T, 1, LOG, true>, unsigned(grid), kWarpCtaThreads, 0, 1, stream, p));
      case 2: return int32_t(cs_launch(cs_softmax_chain_kernel<T, 2, LOG, true>, unsigned(grid), kWarpCtaThreads, 0, 1, stream, p));
      case 4: return int32_t(cs_launch(cs_softmax_chain_kernel<T, 4, LOG, true>, unsigned(grid), kWarpCtaThreads, 0, 1, stream, p));
      default: return int32_t(cs_launch(cs_softmax_chain_kernel<T, 8, LOG, true>, unsigned(grid), kWarpCtaThreads, 0, 1, stream, p));
    }
  }
  // 16 values a thread in registers while the row fits CS_THREADS of them (more threads a
  // row, more loads in flight), 32 up to 32 x CS_THREADS elements; streamed past that.
  constexpr int kVpt = 32 / V, kHalf = kVpt / 2;
  unsigned const grid = unsigned(p.m < cap ? p.m : cap);
  auto threads_for = [&](int vpt) {
    int64_t t = ((nb_max + vpt - 1) / vpt + 31) / 32 * 32;
    if (t < 64) t = 64;
    return t > kThreads ? int64_t(kThreads) : t;
  };
  if (nb_max <= int64_t(kHalf) * kThreads)
    return int32_t(cs_launch(cs_softmax_chain_kernel<T, kHalf, LOG, false>, grid, unsigned(threads_for(kHalf)), 0, 1,
                             stream, p));
  return int32_t(cs_launch(cs_softmax_chain_kernel<T, kVpt, LOG, false>, grid, unsigned(threads_for(kVpt)), 0, 1,
                           stream, p));
}

template <class T, bool LOG>
static int32_t cs_softmax_run(const cs_problem& p, cudaStream_t stream)
{
  constexpr int V = CsElem<T>::V;
  int64_t const n = p.n;
  uintptr_t const a = reinterpret_cast<uintptr_t>(p.a);
  uintptr_t const d = reinterpret_cast<uintptr_t>(p.d);
  // Vector path: A and D rows start at the same offset modulo 16 bytes.
  bool const vec = ((a ^ d) & 15u) == 0 &&
                   (p.m == 1 || ((p.lda - p.ldd) * int64_t(sizeof(T))) % 16 == 0);
  if constexpr (!cs_chain::kIdentity) return cs_softmax_chain_run<T, LOG>(p, stream, vec);

  if (!vec) {
    int64_t threads = (n + 31) / 32 * 32;
    if (threads > kThreads) threads = kThreads;
    return int32_t(cs_launch_stream<T, LOG, false, false>(p, stream, 1, int(threads), 0));
  }

  int64_t const nb_max = n / V;   // body vectors of a row, at most

  // Path 1: a warp per row.
  if (n <= kWarpRowMax && nb_max <= 32 * 8) {
    int const vpt = cs_pow2_at_least((nb_max + 31) / 32);
    switch (vpt) {
      case 1: return int32_t(cs_launch_warp<T, LOG, 1>(p, stream));
      case 2: return int32_t(cs_launch_warp<T, LOG, 2>(p, stream));
      case 4: return int32_t(cs_launch_warp<T, LOG, 4>(p, stream));
      default: return int32_t(cs_launch_warp<T, LOG, 8>(p, stream));
    }
  }

  CsDeviceFacts f;
  cudaError_t err = cs_device_facts(f, p.sm_count);
  if (err != cudaSuccess) return int32_t(err);

  for (int cluster = 1; cluster <= kClusterMax; cluster *= 2) {
    if (p.m * cluster > 0x7fffffffLL) break;
    int64_t const per_cta = (nb_max + cluster - 1) / cluster;   // body vectors per CTA
    // Path 2: the row part in registers.
    if constexpr (kRowInRegs) {
      constexpr int kRegThreads = CsRegThreads<LOG>::value;
      if (per_cta <= int64_t(kRegThreads) * kRegVecsMax) {
        int vpt = cs_pow2_at_least((per_cta + kRegThreads - 1) / kRegThreads);
        if (vpt < kRegVecsMin) vpt = kRegVecsMin;
        int64_t threads = ((per_cta + vpt - 1) / vpt + 31) / 32 * 32;
        if (threads < 32) threads = 32;
        return int32_t(cs_dispatch_regs<T, LOG>(p, stream, cluster, vpt, int(threads)));
      }
    }
    // Path 3 with the row part cached in shared memory.
    if constexpr (kCacheInSmem) {
      if (per_cta * 16 + 1024 <= f.smem_optin) {
        int64_t threads = ((per_cta + kStreamUnroll - 1) / kStreamUnroll + 31) / 32 * 32;
        if (threads > kThreads) threads = kThreads;
        return int32_t(cs_launch_stream<T, LOG, true, true>(p, stream, cluster, int(threads),
                                                       int(per_cta * 16)));
      }
    }
  }

  // Path 3, write pass re-reading the row from L2.
  if (p.m > 0x7fffffffLL) return CS_ERR_UNSUPPORTED;
  int const smem = cs_l2_throttle_smem(f, n * int64_t(sizeof(T)), kThreads);
  return int32_t(cs_launch_stream<T, LOG, true, false>(p, stream, 1, kThreads, smem));
}

static int32_t cs_softmax_check(const cs_problem& p, bool check_pointers)
{
  if (!(p.family == CS_FAMILY_SOFTMAX && kBuildSoftmax) &&
      !(p.family == CS_FAMILY_LOG_SOFTMAX && kBuildLogSoftmax))
    return CS_ERR_UNSUPPORTED;
  if (p.dtype_ab != p.dtype_cd) return CS_ERR_UNSUPPORTED;
  if (p.dtype_ab != CS_DTYPE_BF16 && p.dtype_ab != CS_DTYPE_F16 && p.dtype_ab != CS_DTYPE_F32)
    return CS_ERR_UNSUPPORTED;
  if (!kBuildDtype[p.dtype_ab]) return CS_ERR_UNSUPPORTED;
  if (p.layout_a != CS_LAYOUT_ROW || p.layout_cd != CS_LAYOUT_ROW) return CS_ERR_UNSUPPORTED;
  if (p.m < 0 || p.n < 0 || p.batch < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CS_OK;   // nothing to compute
  if (p.batch != 1) return CS_ERR_UNSUPPORTED;
  if (p.n > 0x7fffffffLL - 64) return CS_ERR_UNSUPPORTED;
  if (p.m > 0x7fffffffLL) return CS_ERR_UNSUPPORTED;
  if (p.m > 1 && (p.lda < p.n || p.ldd < p.n)) return CS_ERR_UNSUPPORTED;
  // The ops' operands (none without ops): their kinds and types, a matrix's ld, and a
  // broadcast operand's column stride the one the chain was generated for.
  if (cs_chain_operands_check<cs_chain>(p, check_pointers) != CS_OK) return CS_ERR_UNSUPPORTED;
  for (int i = 0; i < cs_chain::kOperands; ++i) {
    cs_operand const& o = p.operands[cs_chain_first<cs_chain>() + i];
    int const col = cs_chain_bcast<cs_chain>(i).col;
    if (o.kind == CS_OPERAND_BROADCAST && col >= 0 && o.ld != col) return CS_ERR_UNSUPPORTED;
    // The kernels index a broadcast operand's rows in 32 bits.
    if (o.kind == CS_OPERAND_BROADCAST)
      for (int t = 0; t < 2; ++t)
        if (o.row_div[t] < 1 || o.row_div[t] > 0x7fffffffLL || o.row_mod[t] < 1 || o.row_mod[t] > 0x7fffffffLL)
          return CS_ERR_UNSUPPORTED;
  }
  if (check_pointers) {
    if (p.a == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    uintptr_t const esize = p.dtype_ab == CS_DTYPE_F32 ? 4 : 2;
    if ((reinterpret_cast<uintptr_t>(p.a) | reinterpret_cast<uintptr_t>(p.d)) % esize != 0)
      return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

// The family's kernels for element type T, when this build compiles them (cs_softmax_check
// has rejected the rest).
template <class T>
static int32_t cs_softmax_family(const cs_problem& p, bool log, cudaStream_t stream)
{
  constexpr int kDtype = std::is_same_v<T, float> ? CS_DTYPE_F32
                       : std::is_same_v<T, __half> ? CS_DTYPE_F16 : CS_DTYPE_BF16;
  if constexpr (kBuildDtype[kDtype]) {
    if (log) {
      if constexpr (kBuildLogSoftmax) return cs_softmax_run<T, true>(p, stream);
    } else {
      if constexpr (kBuildSoftmax) return cs_softmax_run<T, false>(p, stream);
    }
  }
  return CS_ERR_UNSUPPORTED;
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
  return cs_softmax_check(*problem, /*check_pointers=*/false) == CS_OK ? CS_OK : CS_ERR_UNSUPPORTED;
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  int32_t const status = cs_softmax_check(*problem, /*check_pointers=*/true);
  if (status != CS_OK) return status;
  if (problem->m == 0 || problem->n == 0 || problem->batch == 0) return CS_OK;
  bool const log = problem->family == CS_FAMILY_LOG_SOFTMAX;
  int32_t rc = CS_OK;
  switch (problem->dtype_ab) {
    case CS_DTYPE_BF16: rc = cs_softmax_family<__nv_bfloat16>(*problem, log, stream); break;
    case CS_DTYPE_F16:  rc = cs_softmax_family<__half>(*problem, log, stream); break;
    default:            rc = cs_softmax_family<float>(*problem, log, stream); break;
  }
  if (rc != CS_OK) return rc;
  return int32_t(cudaGetLastError());
}
