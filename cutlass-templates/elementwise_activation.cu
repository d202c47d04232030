// cutesmith template: elementwise activation, a memory-bound streaming kernel.
//
//   D (m x n, row-major, ldd) = act(A (m x n, row-major, lda))       (CS_FAMILY_ACTIVATION)
//
// act is any cs_activation (identity, relu, leaky_relu with slope act_alpha, gelu_erf,
// gelu_tanh, silu, sigmoid, tanh); the element type is f32, f16 or bf16, picked at run
// time from dtype_ab (dtype_cd must be the same). 16-bit elements are widened to fp32,
// activated in fp32 and rounded once (round-to-nearest-even).
//
// Strategy: the op moves sizeof(T) bytes in and out per element and does little math, so
// the kernel is built to keep HBM busy:
// - Flat path (the fast one): when the rows are contiguous (m == 1, or lda == ldd == n)
//   the problem is one array of m*n elements. A and D are walked as 16-byte vectors (8
//   bf16/f16 or 4 f32 each). If A and D share the same misalignment the first few
//   elements are peeled so the vectors line up; the peeled head and the tail after the
//   last whole vector (fewer than 2 vectors' worth in all) are done one element at a time.
// - Each thread loads VECS_PER_THREAD independent vectors (coalesced: vector j of a block's
//   chunk is THREADS vectors past vector j-1), then computes, then stores them, so every
//   thread has VECS_PER_THREAD * 16 bytes of loads in flight (for the transcendental ops a
//   zero-mask dependency keeps ptxas from sinking the later loads below the math, see
//   cs_tie_loads). Loads and stores carry the streaming hint (ld/st.global.cs:
//   evict-first, the data is touched once).
// - A persistent grid: sm_count * BLOCKS_PER_SM blocks (all resident at once: the launch
//   bounds cap registers accordingly) walk the chunks with a grid-stride loop; the one
//   partial chunk at the end (if any) is done one vector at a time.
// - Math: f32 uses the accurate libdevice functions (erff, tanhf, expf), since f32 results
//   are checked to 1e-5 (divisions by 1 + exp(-x) use __fdividef, 2 ulp). f16/bf16 use
//   erff for GELU (erf form) and __expf / __fdividef elsewhere: their ~1e-6 relative error
//   is far below the 2^-9 / 2^-12 of rounding the result to 16 bits, and they keep bf16
//   (4 bytes moved per element, half the time per element of f32) from becoming issue
//   bound. Main-loop SASS at the defaults: bf16 gelu_erf ~28 instructions per element
//   (budget at 90% of copy bandwidth ~40), all other bf16 ops <= 15, f32 <= 27.
// - Plain CUDA C++ (no CuTe): a flat 16-byte vector view is all the layout there is.
// - Fallback path: rows that are not contiguous, or A and D misaligned differently, go
//   through a simple scalar 2-D grid-stride kernel (correct, not tuned).
//
// No workspace, no allocation, no synchronization: one kernel launch on the given stream.

#include <cstdint>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cutesmith_abi.h"

// ---------------------------------------------------------------------------------------
// Strategy parameters (override with -DNAME=VALUE)
// ---------------------------------------------------------------------------------------

#ifndef CS_VECS_PER_THREAD
#define CS_VECS_PER_THREAD 4   // independent 16-byte vectors per thread per iteration
#endif
#ifndef CS_THREADS
#define CS_THREADS 256         // threads per block
#endif
#ifndef CS_BLOCKS_PER_SM
#define CS_BLOCKS_PER_SM 4     // resident blocks per SM (grid = sm_count * this)
#endif

static constexpr int kVecs        = CS_VECS_PER_THREAD;
static constexpr int kThreads     = CS_THREADS;
static constexpr int kBlocksPerSm = CS_BLOCKS_PER_SM;
static constexpr int kVecBytes    = 16;

static_assert(kVecs >= 1 && kVecs <= 16, "CS_VECS_PER_THREAD must be in [1, 16]");
static_assert(kThreads >= 32 && kThreads <= 1024 && kThreads % 32 == 0,
              "CS_THREADS must be a multiple of 32 in [32, 1024]");
static_assert(kBlocksPerSm >= 1 && kThreads * kBlocksPerSm <= 2048,
              "CS_THREADS * CS_BLOCKS_PER_SM must fit an SM (2048 threads)");
// The flat kernel's scalar head + tail (< 2 vectors = at most 14 elements) is done by
// one block, one element per thread.
static_assert(kThreads >= 2 * 8, "CS_THREADS too small for the scalar head and tail");

// ---------------------------------------------------------------------------------------
// Activations (fp32 in, fp32 out)
// ---------------------------------------------------------------------------------------

// kFast: the result is rounded to 16 bits afterwards, so __expf (ex2.approx) and
// __fdividef (rcp.approx) are accurate enough. GELU (erf form) always uses erff.
template <int Act, bool kFast>
__device__ __forceinline__ float cs_act(float x, float slope)
{
  if constexpr (Act == CS_ACT_IDENTITY) {
    return x;
  } else if constexpr (Act == CS_ACT_RELU) {
    return x < 0.0f ? 0.0f : x;                       // NaN stays NaN
  } else if constexpr (Act == CS_ACT_LEAKY_RELU) {
    return x < 0.0f ? slope * x : x;
  } else if constexpr (Act == CS_ACT_GELU_ERF) {
    // 0.5 x (1 + erf(x / sqrt 2))
    float const h = 0.5f * x;
    return fmaf(h, erff(x * 0.70710678118654752f), h);
  } else if constexpr (Act == CS_ACT_GELU_TANH) {
    // 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
    float const x2 = x * x;
    if constexpr (kFast) {
      // 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u))
      float const z = x * fmaf(x2, -0.071354816273801242f, -1.5957691216057308f);   // -2u
      return __fdividef(x, 1.0f + __expf(z));
    } else {
      float const u = x * fmaf(x2, 0.035677408136300121f, 0.79788456080286536f);
      float const h = 0.5f * x;
      return fmaf(h, tanhf(u), h);
    }
  } else if constexpr (Act == CS_ACT_SILU) {
    // __fdividef (2 ulp) is exact enough even for f32; it only flushes x / y to 0 for
    // |y| > 2^126, where the true result is below 1e-36 anyway.
    float const e = kFast ? __expf(-x) : expf(-x);
    return __fdividef(x, 1.0f + e);
  } else if constexpr (Act == CS_ACT_SIGMOID) {
    float const e = kFast ? __expf(-x) : expf(-x);
    return __fdividef(1.0f, 1.0f + e);
  } else if constexpr (Act == CS_ACT_TANH) {
    if constexpr (kFast) {
      // tanh|x| = 1 - 2 / (1 + exp(2|x|)); exp overflowing to inf gives exactly 1.
      // Absolute error ~1e-7 near 0, far below a 16-bit result's atol.
      float const t = 1.0f - __fdividef(2.0f, 1.0f + __expf(2.0f * fabsf(x)));
      return copysignf(t, x);
    } else {
      return tanhf(x);
    }
  } else {
    static_assert(Act >= CS_ACT_IDENTITY && Act <= CS_ACT_TANH, "unknown activation");
    return x;
  }
}

// ---------------------------------------------------------------------------------------
// Element types: fp32 conversions and one 32-bit word of a 16-byte vector
// ---------------------------------------------------------------------------------------

template <class T> struct CsElem;

template <> struct CsElem<float> {
  static constexpr bool kFast = false;
  __device__ __forceinline__ static float to_f32(float v) { return v; }
  __device__ __forceinline__ static float from_f32(float v) { return v; }
  template <int Act>
  __device__ __forceinline__ static uint32_t apply_word(uint32_t w, float slope) {
    return __float_as_uint(cs_act<Act, kFast>(__uint_as_float(w), slope));
  }
};

template <> struct CsElem<__nv_bfloat16> {
  static constexpr bool kFast = true;
  __device__ __forceinline__ static float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ __forceinline__ static __nv_bfloat16 from_f32(float v) { return __float2bfloat16_rn(v); }
  template <int Act>
  __device__ __forceinline__ static uint32_t apply_word(uint32_t w, float slope) {
    __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&w);
    float2 f = __bfloat1622float2(h);
    f.x = cs_act<Act, kFast>(f.x, slope);
    f.y = cs_act<Act, kFast>(f.y, slope);
    h = __float22bfloat162_rn(f);                       // one F2FP.BF16.F32.PACK_AB
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

template <> struct CsElem<__half> {
  static constexpr bool kFast = true;
  __device__ __forceinline__ static float to_f32(__half v) { return __half2float(v); }
  __device__ __forceinline__ static __half from_f32(float v) { return __float2half_rn(v); }
  template <int Act>
  __device__ __forceinline__ static uint32_t apply_word(uint32_t w, float slope) {
    __half2 h = *reinterpret_cast<__half2*>(&w);
    float2 f = __half22float2(h);
    f.x = cs_act<Act, kFast>(f.x, slope);
    f.y = cs_act<Act, kFast>(f.y, slope);
    h = __float22half2_rn(f);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

// One element, through fp32.
template <class T, int Act>
__device__ __forceinline__ T cs_apply_scalar(T v, float slope)
{
  using E = CsElem<T>;
  return E::from_f32(cs_act<Act, E::kFast>(E::to_f32(v), slope));
}

// One 16-byte vector (identity is a plain copy).
template <class T, int Act>
__device__ __forceinline__ uint4 cs_apply_vec(uint4 v, float slope)
{
  if constexpr (Act != CS_ACT_IDENTITY) {
    using E = CsElem<T>;
    v.x = E::template apply_word<Act>(v.x, slope);
    v.y = E::template apply_word<Act>(v.y, slope);
    v.z = E::template apply_word<Act>(v.z, slope);
    v.w = E::template apply_word<Act>(v.w, slope);
  }
  return v;
}

// Streaming (evict-first) 16-byte global load/store: LDG.E.EF.128 / STG.E.EF.128.
__device__ __forceinline__ uint4 cs_load_vec(uint4 const* p) { return __ldcs(p); }
__device__ __forceinline__ void  cs_store_vec(uint4* p, uint4 v) { __stcs(p, v); }

// Keep an iteration's loads together. Left alone, ptxas sinks the later loads below the
// math on the first vectors when that math is long (erff on 16-bit data: only 2 of 4
// loads issued up front), so every iteration pays a second memory round trip. Making
// every word depend on every load, through a mask the compiler cannot know is zero (a
// kernel argument, always 0), forces all loads to issue before any math, for a few
// LOP3s per iteration.
template <int V>
__device__ __forceinline__ void cs_tie_loads(uint4 (&v)[V], uint32_t zero)
{
  uint32_t t = v[0].x;
#pragma unroll
  for (int j = 1; j < V; ++j) t |= v[j].x;
  t &= zero;
#pragma unroll
  for (int j = 0; j < V; ++j) { v[j].x ^= t; v[j].y ^= t; v[j].z ^= t; v[j].w ^= t; }
}

// ---------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------

// Flat path over `total` contiguous elements. Elements [head, head + nvec * kPerVec) are
// 16-byte vectors (a + head and d + head are 16-byte aligned); the head elements before
// them and the tail after them are scalar.
template <class T, int Act>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
cs_act_flat_kernel(T const* a, T* d, int64_t head, int64_t nvec, int64_t total, float slope,
                   uint32_t zero)
{
  constexpr int kPerVec = kVecBytes / int(sizeof(T));
  int const tid = int(threadIdx.x);

  // Scalar head and tail: fewer than 2 * kPerVec elements, one per thread of the last block.
  if (blockIdx.x == gridDim.x - 1) {
    int64_t const vec_end = head + nvec * kPerVec;
    int64_t const n_scalar = head + (total - vec_end);
    if (tid < n_scalar) {
      int64_t const i = (tid < head) ? int64_t(tid) : vec_end + (tid - head);
      d[i] = cs_apply_scalar<T, Act>(a[i], slope);
    }
  }

  // Vectors: chunks of kThreads * kVecs vectors, one chunk per block per iteration.
  uint4 const* av = reinterpret_cast<uint4 const*>(a + head);
  uint4*       dv = reinterpret_cast<uint4*>(d + head);
  constexpr int64_t kChunk = int64_t(kThreads) * kVecs;
  int64_t const full_chunks = nvec / kChunk;

  int64_t c = blockIdx.x;
  for (; c < full_chunks; c += gridDim.x) {
    uint4 const* src = av + c * kChunk + tid;
    uint4*       dst = dv + c * kChunk + tid;
    uint4 v[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) v[j] = cs_load_vec(src + j * kThreads);
    if constexpr (Act >= CS_ACT_GELU_ERF) cs_tie_loads(v, zero);   // long math only
#pragma unroll
    for (int j = 0; j < kVecs; ++j) v[j] = cs_apply_vec<T, Act>(v[j], slope);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) cs_store_vec(dst + j * kThreads, v[j]);
  }

  // The one partial chunk (if any) falls to the block whose turn comes next. It runs once
  // per launch, so one vector at a time: little code, few registers.
  if (c == full_chunks) {
#pragma unroll 1
    for (int64_t i = c * kChunk + tid; i < nvec; i += kThreads)
      cs_store_vec(dv + i, cs_apply_vec<T, Act>(cs_load_vec(av + i), slope));
  }
}

// Fallback: m rows of n elements with arbitrary leading dimensions (and any alignment of
// the element type). Rows over blockIdx.y, columns over x, both grid-strided.
template <class T, int Act>
__global__ void __launch_bounds__(kThreads)
cs_act_strided_kernel(T const* a, int64_t lda, T* d, int64_t ldd, int64_t m, int64_t n,
                      float slope)
{
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    T const* arow = a + r * lda;
    T*       drow = d + r * ldd;
    for (int64_t col = int64_t(blockIdx.x) * kThreads + threadIdx.x; col < n;
         col += int64_t(gridDim.x) * kThreads)
      drow[col] = cs_apply_scalar<T, Act>(arow[col], slope);
  }
}

// ---------------------------------------------------------------------------------------
// Host launcher
// ---------------------------------------------------------------------------------------

static inline size_t cs_dtype_bytes(int32_t dtype)
{
  switch (dtype) {
    case CS_DTYPE_F32:  return 4;
    case CS_DTYPE_F16:  return 2;
    case CS_DTYPE_BF16: return 2;
    default:            return 0;   // f64 and anything else: unsupported
  }
}

// CS_OK when this kernel handles `p` (pointers checked only when asked).
static int32_t cs_act_check(const cs_problem& p, bool check_pointers)
{
  if (p.family != CS_FAMILY_ACTIVATION) return CS_ERR_UNSUPPORTED;
  size_t const elem = cs_dtype_bytes(p.dtype_ab);
  if (elem == 0 || p.dtype_cd != p.dtype_ab) return CS_ERR_UNSUPPORTED;
  if (p.activation < CS_ACT_IDENTITY || p.activation > CS_ACT_TANH) return CS_ERR_UNSUPPORTED;
  if (p.batch > 1) return CS_ERR_UNSUPPORTED;   // the family has one matrix
  if (p.m < 0 || p.n < 0) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0) return CS_OK;       // nothing to compute
  if (p.m > INT64_MAX / p.n) return CS_ERR_UNSUPPORTED;
  if (p.m > 1 && (p.lda < p.n || p.ldd < p.n)) return CS_ERR_UNSUPPORTED;
  if (check_pointers) {
    if (p.a == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    if ((reinterpret_cast<uintptr_t>(p.a) | reinterpret_cast<uintptr_t>(p.d)) % elem != 0)
      return CS_ERR_UNSUPPORTED;                // not even element-aligned
  }
  return CS_OK;
}

static int32_t cs_sm_count(const cs_problem& p, int* sm_count)
{
  if (p.sm_count > 0) { *sm_count = p.sm_count; return CS_OK; }
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return int32_t(err);
  err = cudaDeviceGetAttribute(sm_count, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return int32_t(err);
  if (*sm_count <= 0) *sm_count = 1;
  return CS_OK;
}

template <class T, int Act>
static int32_t cs_act_run(const cs_problem& p, int sm_count, cudaStream_t stream)
{
  constexpr int64_t kPerVec = kVecBytes / int64_t(sizeof(T));
  int64_t const max_blocks = int64_t(sm_count) * kBlocksPerSm;

  T const* a = static_cast<T const*>(p.a);
  T*       d = static_cast<T*>(p.d);
  uintptr_t const a_mis = reinterpret_cast<uintptr_t>(a) % kVecBytes;
  uintptr_t const d_mis = reinterpret_cast<uintptr_t>(d) % kVecBytes;
  bool const contiguous = (p.m == 1) || (p.lda == p.n && p.ldd == p.n);

  if (contiguous && a_mis == d_mis) {
    // Flat path: one array of m*n elements, vectors after a peeled head.
    int64_t const total = p.m * p.n;
    int64_t head = int64_t((kVecBytes - a_mis) % kVecBytes) / int64_t(sizeof(T));
    if (head > total) head = total;
    int64_t const nvec = (total - head) / kPerVec;
    int64_t const chunks = (nvec + int64_t(kThreads) * kVecs - 1) / (int64_t(kThreads) * kVecs);
    int64_t blocks = chunks < max_blocks ? chunks : max_blocks;
    if (blocks < 1) blocks = 1;                 // only scalar elements
    cs_act_flat_kernel<T, Act><<<unsigned(blocks), kThreads, 0, stream>>>(
        a, d, head, nvec, total, p.act_alpha, /*zero=*/0u);
  } else {
    // Fallback: strided rows (or one row, when only the alignment is off).
    int64_t const m   = contiguous ? 1 : p.m;
    int64_t const n   = contiguous ? p.m * p.n : p.n;
    int64_t const lda = contiguous ? n : p.lda;
    int64_t const ldd = contiguous ? n : p.ldd;
    int64_t const target = max_blocks * 4;
    int64_t gx = (n + kThreads - 1) / kThreads;
    if (gx > target) gx = target;
    int64_t gy = target / gx;
    if (gy < 1) gy = 1;
    if (gy > m) gy = m;
    if (gy > 65535) gy = 65535;
    cs_act_strided_kernel<T, Act><<<dim3(unsigned(gx), unsigned(gy)), kThreads, 0, stream>>>(
        a, lda, d, ldd, m, n, p.act_alpha);
  }
  return int32_t(cudaGetLastError());
}

template <class T>
static int32_t cs_act_dispatch(const cs_problem& p, int sm_count, cudaStream_t stream)
{
  switch (p.activation) {
    case CS_ACT_IDENTITY:   return cs_act_run<T, CS_ACT_IDENTITY>(p, sm_count, stream);
    case CS_ACT_RELU:       return cs_act_run<T, CS_ACT_RELU>(p, sm_count, stream);
    case CS_ACT_LEAKY_RELU: return cs_act_run<T, CS_ACT_LEAKY_RELU>(p, sm_count, stream);
    case CS_ACT_GELU_ERF:   return cs_act_run<T, CS_ACT_GELU_ERF>(p, sm_count, stream);
    case CS_ACT_GELU_TANH:  return cs_act_run<T, CS_ACT_GELU_TANH>(p, sm_count, stream);
    case CS_ACT_SILU:       return cs_act_run<T, CS_ACT_SILU>(p, sm_count, stream);
    case CS_ACT_SIGMOID:    return cs_act_run<T, CS_ACT_SIGMOID>(p, sm_count, stream);
    case CS_ACT_TANH:       return cs_act_run<T, CS_ACT_TANH>(p, sm_count, stream);
    default:                return CS_ERR_UNSUPPORTED;
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
  return cs_act_check(*problem, /*check_pointers=*/false) == CS_OK ? CS_OK : CS_ERR_UNSUPPORTED;
}

CS_EXPORT int32_t cutesmith_launch(const cs_problem* problem, cs_stream_t stream)
{
  if (problem == nullptr) return CS_ERR_UNSUPPORTED;
  if (problem->abi_version != CS_ABI_VERSION) return CS_ERR_ABI_VERSION;
  int32_t status = cs_act_check(*problem, /*check_pointers=*/true);
  if (status != CS_OK) return status;
  if (problem->m == 0 || problem->n == 0) return CS_OK;

  int sm_count = 0;
  status = cs_sm_count(*problem, &sm_count);
  if (status != CS_OK) return status;

  switch (problem->dtype_ab) {
    case CS_DTYPE_F32:  return cs_act_dispatch<float>(*problem, sm_count, stream);
    case CS_DTYPE_F16:  return cs_act_dispatch<__half>(*problem, sm_count, stream);
    case CS_DTYPE_BF16: return cs_act_dispatch<__nv_bfloat16>(*problem, sm_count, stream);
    default:            return CS_ERR_UNSUPPORTED;
  }
}
