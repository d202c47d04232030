// cutesmith template: elementwise activation and epilogue chains, a memory-bound
// streaming kernel.
//
//   D (m x n, row-major, ldd) = chain(A (m x n, row-major, lda))     (CS_FAMILY_ACTIVATION)
//   D (m x n, packed)         = chain(A through a strided view)       (view_rank > 0)
//
// With an epilogue chain in the source (the workload block defines `cs_chain`, see
// cutesmith_chain.cuh) every element is D[i, j] = cs_chain::apply(A[i, j], t, i, j), where the
// chain starts with the activation and t[] holds its tensor operands at (i, j): ROW
// operands (n values, indexed by the column j), COL operands (m values, indexed by the row
// i) and MATRIX operands (m x n, ld in D's layout). p.activation is not read then: the
// chain already applies it. Without a chain (cs_chain::kIdentity) the activation is
// p.activation, any of the 16 cs_activation values, with its parameters p.act_alpha and
// p.act_beta, picked at run time.
//
// Element types: A is f32, f16 or bf16 and so is D; they may differ (bf16 in, f32 out).
// A workload instance fixes them from CS_WL_DTYPE_AB (A) and CS_WL_DTYPE_CD (D); a
// template compiled alone takes dtype_ab == dtype_cd, any of the three, at run time. Every
// element is widened to fp32, computed in fp32 and rounded once (round-to-nearest-even).
//
// Strategy: the op moves sizeof(A) + sizeof(D) bytes per element and does little math, so
// the kernel is built to keep HBM busy:
// - Flat path (the fast one): when the rows are contiguous (m == 1, or lda == ldd == n)
//   the problem is one array of m*n elements, walked in groups of G elements, G = 16 /
//   the larger element size: every group is one 16-byte vector of the wider type and a 16-
//   or 8-byte vector of the narrower one (bf16 -> f32: 8-byte loads, 16-byte stores), so
//   the accesses of a warp are contiguous on both sides. If A and D have the same
//   misalignment in elements modulo G, the first few elements are peeled so that the
//   groups line up; the peeled head and the tail after the last whole group (fewer than
//   2 groups' worth in all) are done one element at a time.
// - Each thread loads VECS_PER_THREAD independent groups (coalesced: group j of a block's
//   chunk is THREADS groups past group j-1), then computes, then stores them, so every
//   thread has VECS_PER_THREAD groups of loads in flight (for the transcendental ops and
//   for chains a zero-mask dependency keeps ptxas from sinking the later loads below the
//   math, see cs_tie_loads). Loads and stores are plain (CS_STREAMING_HINT=1 gives them
//   the evict-first hint, which measured slower).
// - Chains with ROW / COL / MATRIX operands need each element's (row, col): one 32-bit
//   division by n per group (a multiply-high by a precomputed reciprocal, CsDivmod), then
//   a column counter that wraps to the next row. Operand values are read with __ldg (the
//   ROW and COL vectors are small and stay in L1/L2); when all operands share one type
//   (f32, f16 or bf16: the usual case) the kernel is instantiated for it, so each read
//   is one branch-free load. Problems of 2^31 elements or more with operands take the
//   2-D path below.
// - The grid: by default one block per chunk (a one-shot grid; the hardware keeps the
//   SMs full as blocks retire); with BLOCKS_PER_SM = N > 0 a persistent grid of
//   sm_count * N blocks (all resident at once: the launch bounds cap registers
//   accordingly) walks the chunks with a grid-stride loop. Either way the one partial
//   chunk at the end (if any) is done one group at a time.
// - Math (run-time activations): 16-bit outputs use __expf / __fdividef where they were
//   tuned (gelu_tanh, silu, sigmoid, tanh, mish; elu / selu as exp - 1 away from 0 and a
//   polynomial near it, softplus's log1p(e) as log(1 + e) or a polynomial for small e):
//   their ~1e-5 relative error or less is far below
//   the 2^-9 / 2^-12 of rounding the result to 16 bits, and they keep bf16 (4 bytes moved
//   per element) from becoming issue bound. f32 outputs use the accurate forms (expf,
//   tanhf, erff, expm1f, log1pf; divisions by 1 + exp(-x) use __fdividef, 2 ulp), accurate
//   to a few fp32 ulps everywhere: elu / selu use expm1f (no cancellation near 0),
//   softplus is max(bx, 0) + log1p(exp(-|bx|)) (no overflow for large beta*x), mish is
//   x * n / (n + 2) with n = e (e + 2), e = exp(min(x, 20)) (= x tanh(log1p(e^x)), one
//   exponential). A chain's functions are the header's own (accurate) forms.
// - Plain CUDA C++ (no CuTe): a flat vector view is all the layout there is.
// - 2-D path: rows that are not contiguous, A and D misaligned differently, or more than
//   2^31 elements with chain operands go through a scalar 2-D grid-stride kernel (correct,
//   not tuned).
// - View path (view_rank > 0: a permute, transpose, split or select of a packed A, read
//   as torch's as_strided): D is packed, its elements in row-major order over the view's
//   dims, each read from A at offset + sum c_t * stride_t. The host drops the dims of
//   extent 1 and merges the dims that are contiguous in A (stride_t == extent_t+1 *
//   stride_t+1: a transpose made contiguous again collapses to one dim), so each element
//   costs one division per merged dim but the outermost. When the innermost merged dim
//   has stride 1 and a multiple of G elements, the other strides and a + offset are
//   multiples of G elements, D is vector-aligned and there are fewer than 2^31 elements,
//   every group of D reads one vector of A: the flat path's chunks and grid, each group's
//   source found by 32-bit multiply-high divisions (CsDivmod) of its first element's
//   index. When instead the innermost merged dim q is strided in A and exactly one other
//   merged dim p has stride 1 (a transpose, batched over the other merged dims), with
//   fewer than 2^31 elements: tiled, 32 (p) x 32 (q) elements per block of 32 x 8 threads
//   through shared memory (fp32, rows padded to 33 words), read coalesced along p and
//   written coalesced along q, the op applied on the write side at each element's
//   (row, col); one tile per block, its batch coordinate decoded once, edge tiles
//   predicated. Otherwise (odd strides or alignment, 2^31 elements or more) a scalar
//   grid-stride kernel, one element at a time (64-bit divisions from 2^31 elements):
//   correct, not tuned.
//
// No workspace, no allocation, no synchronization: one kernel launch on the given stream.
//
// Parameters (override with -DNAME=VALUE):
//   CS_VECS_PER_THREAD  2    independent groups (16-byte vectors) per thread per iteration
//   CS_THREADS          256  threads per block
//   CS_BLOCKS_PER_SM    0    0: a one-shot grid, one block per chunk of THREADS * VECS
//                            groups (no loop; blocks retire and new ones start, so the
//                            SMs stay full); N > 0: a persistent grid of sm_count * N
//                            blocks walking the chunks (grid-stride)
//   CS_STREAMING_HINT   0    1: loads and stores carry the evict-first hint (.cs)
//
// Measured on the H200 for 2^24 elements (scripts/probes/stream_variants.cu): the one-shot
// grid with one 16-byte vector per thread and plain accesses moves the bytes as fast as
// cudaMemcpyAsync (99-100%, clamp and selu, f32 and bf16); a persistent grid of 4 x 256
// with 4 vectors per thread and the .cs hint reached 86-91%.

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cutesmith_abi.h"
#include "cutesmith_chain.cuh"   // cs_chain: the workload's chain, or the identity

// ---------------------------------------------------------------------------------------
// Strategy parameters
// ---------------------------------------------------------------------------------------

#ifndef CS_VECS_PER_THREAD
#define CS_VECS_PER_THREAD 2
#endif
#ifndef CS_THREADS
#define CS_THREADS 256
#endif
#ifndef CS_BLOCKS_PER_SM
#define CS_BLOCKS_PER_SM 0
#endif
#ifndef CS_STREAMING_HINT
#define CS_STREAMING_HINT 0
#endif

static constexpr int kVecs        = CS_VECS_PER_THREAD;
static constexpr int kThreads     = CS_THREADS;
static constexpr int kBlocksPerSm = CS_BLOCKS_PER_SM;

static_assert(kVecs >= 1 && kVecs <= 16, "CS_VECS_PER_THREAD must be in [1, 16]");
static_assert(kThreads >= 32 && kThreads <= 1024 && kThreads % 32 == 0,
              "CS_THREADS must be a multiple of 32 in [32, 1024]");
static_assert(kBlocksPerSm >= 0 && kThreads * kBlocksPerSm <= 2048,
              "CS_THREADS * CS_BLOCKS_PER_SM must fit an SM (2048 threads)");
// Blocks per SM the flat kernel's register budget is sized for (launch bounds): the
// persistent grid's own count; a one-shot grid aims at a full SM (2048 threads: 32
// registers) for a run-time activation with at most 2 vectors a thread, half of one (64
// registers) otherwise: chains keep their operand pointers and positions in registers, and
// squeezed into 32 they spilled.
template <class Op>
struct CsMinBlocks {
  static constexpr int value = kBlocksPerSm > 0 ? kBlocksPerSm
                             : (kVecs <= 2 && !Op::kManyRegs ? 2048 / kThreads : 1024 / kThreads);
};
// The flat kernel's scalar head + tail (< 2 groups = at most 14 elements) is done by
// one block, one element per thread.
static_assert(kThreads >= 2 * 8, "CS_THREADS too small for the scalar head and tail");

// ---------------------------------------------------------------------------------------
// Workload: element types
// ---------------------------------------------------------------------------------------

template <int Dtype> struct CsTypeOf { using type = void; };
template <> struct CsTypeOf<CS_DTYPE_F32>  { using type = float; };
template <> struct CsTypeOf<CS_DTYPE_F16>  { using type = __half; };
template <> struct CsTypeOf<CS_DTYPE_BF16> { using type = __nv_bfloat16; };

#if defined(CS_WL_DTYPE_AB) || defined(CS_WL_DTYPE_CD)
// A workload instance: exactly the workload's pair of element types.
static constexpr bool kFixedTypes = true;
#if defined(CS_WL_DTYPE_AB)
static constexpr int kWlIn = CS_WL_DTYPE_AB;
#else
static constexpr int kWlIn = CS_WL_DTYPE_CD;
#endif
#if defined(CS_WL_DTYPE_CD)
static constexpr int kWlOut = CS_WL_DTYPE_CD;
#else
static constexpr int kWlOut = kWlIn;
#endif
#else
// Compiled alone: dtype_ab == dtype_cd, f32, f16 or bf16, at run time.
static constexpr bool kFixedTypes = false;
static constexpr int kWlIn  = CS_DTYPE_BF16;
static constexpr int kWlOut = CS_DTYPE_BF16;
#endif

// ---------------------------------------------------------------------------------------
// Fast intrinsics (device: MUFU approximations; host builds, e.g. tests, use the same
// two steps with the accurate library functions)
// ---------------------------------------------------------------------------------------

CS_HD float cs_div_fast(float x, float y)   // 2 ulp; 0 for 2^126 < |y| < 2^128
{
#ifdef __CUDA_ARCH__
  return __fdividef(x, y);
#else
  return x / y;
#endif
}

// expm1(x) for x <= 0 and log(1 + exp(y)) for y <= 0. kFast (a 16-bit result): the
// branch-free approximations of cutesmith_chain.cuh (cs_fast_expm1_neg,
// cs_fast_log1p_exp_neg); otherwise libm.
template <bool kFast>
CS_HD float cs_expm1_neg(float x)
{
  if constexpr (kFast) return cs_fast_expm1_neg(x);
  else return expm1f(x);
}

template <bool kFast>
CS_HD float cs_log1p_exp_neg(float y)
{
  if constexpr (kFast) return cs_fast_log1p_exp_neg(y);
  else return log1pf(expf(y));
}

// ---------------------------------------------------------------------------------------
// Run-time activations (fp32 in, fp32 out)
// ---------------------------------------------------------------------------------------

// Act with parameters p0 = act_alpha, p1 = act_beta and p2 = 1 / act_alpha (softplus).
// kFast: the result is rounded to 16 bits afterwards, so cs_fast_exp (ex2.approx.ftz) and
// __fdividef (rcp.approx) are accurate enough.
template <int Act, bool kFast>
CS_HD float cs_act(float x, float p0, float p1, float p2)
{
  if constexpr (Act == CS_ACT_IDENTITY) {
    return x;
  } else if constexpr (Act == CS_ACT_RELU) {
    return x < 0.0f ? 0.0f : x;                       // NaN stays NaN
  } else if constexpr (Act == CS_ACT_LEAKY_RELU) {
    return x < 0.0f ? p0 * x : x;
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
      return cs_div_fast(x, 1.0f + cs_fast_exp(z));
    } else {
      float const u = x * fmaf(x2, 0.035677408136300121f, 0.79788456080286536f);
      float const h = 0.5f * x;
      return fmaf(h, tanhf(u), h);
    }
  } else if constexpr (Act == CS_ACT_SILU) {
    // x * sigmoid(beta x), beta = p0 (1: SiLU; swish with a beta otherwise).
    // __fdividef (2 ulp) is exact enough even for f32; it only flushes x / y to 0 for
    // |y| > 2^126, where the true result is below 1e-36 anyway.
    float const bx = p0 * x;
    float const e = kFast ? cs_fast_exp(-bx) : expf(-bx);
    return cs_div_fast(x, 1.0f + e);
  } else if constexpr (Act == CS_ACT_SIGMOID) {
    float const e = kFast ? cs_fast_exp(-x) : expf(-x);
    return cs_div_fast(1.0f, 1.0f + e);
  } else if constexpr (Act == CS_ACT_TANH) {
    if constexpr (kFast) {
      // tanh|x| = 1 - 2 / (1 + exp(2|x|)); exp overflowing to inf gives exactly 1.
      // Absolute error ~1e-7 near 0, far below a 16-bit result's atol.
      float const t = 1.0f - cs_div_fast(2.0f, 1.0f + cs_fast_exp(2.0f * fabsf(x)));
      return copysignf(t, x);
    } else {
      return tanhf(x);
    }
  } else if constexpr (Act == CS_ACT_SELU) {
    // expm1: exp(x) - 1 would lose all relative accuracy for x near 0.
    // Evaluated at min(x, 0) and selected, without a branch; NaN passes through.
    float const alpha = 1.6732632423543772f, scale = 1.0507009873554805f;
    float const neg = alpha * cs_expm1_neg<kFast>(fminf(x, 0.0f));
    return scale * (x > 0.0f || x != x ? x : neg);
  } else if constexpr (Act == CS_ACT_ELU) {
    float const neg = p0 * cs_expm1_neg<kFast>(fminf(x, 0.0f));
    return x > 0.0f || x != x ? x : neg;
  } else if constexpr (Act == CS_ACT_HARDSIGMOID) {
    // relu6(x + 3) / 6: exactly 0 at x <= -3 and 1 at x >= 3 (6 * fl(1/6) rounds to 1).
    // NaN stays NaN (cs_maxf / cs_minf), as in the reference.
    return cs_minf(cs_maxf(x + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f);
  } else if constexpr (Act == CS_ACT_HARDSWISH) {
    return x * (cs_minf(cs_maxf(x + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f));
  } else if constexpr (Act == CS_ACT_HARDTANH) {
    return cs_minf(cs_maxf(x, p0), p1);
  } else if constexpr (Act == CS_ACT_SOFTPLUS) {
    // log(1 + exp(bx)) / b, x itself above the threshold. max(bx, 0) + log1p(exp(-|bx|))
    // is the same function without overflow for large bx (thresholds above 88).
    float const bx = p0 * x;
    float const soft = (fmaxf(bx, 0.0f) + cs_log1p_exp_neg<kFast>(-fabsf(bx))) * p2;
    return bx > p1 ? x : soft;
  } else if constexpr (Act == CS_ACT_SOFTSIGN) {
    // The fast division (2 ulp) below 2^126, where it is exact enough; the IEEE one's
    // slow-path call spilled registers. Above, x / (1 + |x|) rounds to +-1. NaN stays NaN.
    float const den = 1.0f + fabsf(x);
    return den >= 8.5e37f ? copysignf(1.0f, x) : cs_div_fast(x, den);
  } else if constexpr (Act == CS_ACT_MISH) {
    // x tanh(log(1 + e^x)) = x n / (n + 2), n = e^x (e^x + 2): one exponential, no
    // cancellation. Above x = 20 the ratio rounds to 1 (and e^2x would overflow at 44).
    float const e = kFast ? cs_fast_exp(fminf(x, 20.0f)) : expf(fminf(x, 20.0f));
    float const nn = e * (e + 2.0f);
    return x * cs_div_fast(nn, nn + 2.0f);            // nn + 2 < 2^126
  } else {
    static_assert(Act >= CS_ACT_IDENTITY && Act <= CS_ACT_MISH, "unknown activation");
    return x;
  }
}

// ---------------------------------------------------------------------------------------
// The op applied to every element
// ---------------------------------------------------------------------------------------

// An op maps (x, row, col) to the fp32 result. kRowCol: it reads the element's position
// (chain operands). kManyRegs: it needs more registers than a run-time activation. kCopy: D = A bit for bit when A and D have one type. kLong: the math
// is long enough for ptxas to sink later loads below it (see cs_tie_loads).

// A run-time activation, instantiated per cs_activation value.
template <int Act, bool kFast>
struct CsActOp {
  static constexpr bool kRowCol = false;
  static constexpr bool kManyRegs = false;
  static constexpr bool kCopy = Act == CS_ACT_IDENTITY;
  static constexpr bool kLong = Act == CS_ACT_GELU_ERF || Act == CS_ACT_GELU_TANH ||
                                Act == CS_ACT_SILU || Act == CS_ACT_SIGMOID ||
                                Act == CS_ACT_TANH || Act == CS_ACT_SELU || Act == CS_ACT_ELU ||
                                Act == CS_ACT_SOFTPLUS || Act == CS_ACT_MISH;
  float p0, p1, p2;
  __device__ __forceinline__ float operator()(float x, uint32_t, uint32_t) const
  {
    return cs_act<Act, kFast>(x, p0, p1, p2);
  }
};


// One operand element as fp32. Dtype is the operand's cs_dtype when known at compile
// time (the load is then one LDG and at most one conversion), or -1: read at run time
// (CsChainOp::dt: the chain's own type where it states it), the three common types and
// bool inline and the rest through the header's general load, kept out of line so that it
// does not bloat the loop.
__device__ __noinline__ float cs_operand_value_slow(const void* ptr, int32_t dtype, int64_t idx)
{
  return cs_load_as_float(ptr, dtype, idx);
}

template <int Dtype>
__device__ __forceinline__ float cs_operand_value(const void* ptr, int32_t dtype, int64_t idx)
{
  if constexpr (Dtype == CS_DTYPE_BF16) {
    return __uint_as_float(uint32_t(__ldg(static_cast<const unsigned short*>(ptr) + idx)) << 16);
  } else if constexpr (Dtype == CS_DTYPE_F32) {
    return __ldg(static_cast<const float*>(ptr) + idx);
  } else if constexpr (Dtype == CS_DTYPE_F16) {
    return __half2float(__ldg(static_cast<const __half*>(ptr) + idx));
  } else {
    if (dtype == CS_DTYPE_BF16) return cs_operand_value<CS_DTYPE_BF16>(ptr, dtype, idx);
    if (dtype == CS_DTYPE_F32) return cs_operand_value<CS_DTYPE_F32>(ptr, dtype, idx);
    if (dtype == CS_DTYPE_F16) return cs_operand_value<CS_DTYPE_F16>(ptr, dtype, idx);
    if (dtype == CS_DTYPE_BOOL) return __ldg(static_cast<const unsigned char*>(ptr) + idx) != 0 ? 1.0f : 0.0f;
    return cs_operand_value_slow(ptr, dtype, idx);
  }
}

// G consecutive operand elements from idx as fp32: 16-byte vector loads when the type is
// known at compile time, the run is whole 16-byte vectors and it is 16-byte aligned; one
// load per element otherwise.
template <int Dtype, int G>
__device__ __forceinline__ void cs_operand_run(const void* ptr, int32_t dtype, int64_t idx,
                                               float (&out)[G])
{
  // A bool mask's run: one 4- to 16-byte load where aligned (dtype known once unrolled).
  if (Dtype < 0 && dtype == CS_DTYPE_BOOL) {
    cs_load_bools<G>(ptr, idx, out);
    return;
  }
  if constexpr (Dtype == CS_DTYPE_BF16 || Dtype == CS_DTYPE_F16 || Dtype == CS_DTYPE_F32) {
    constexpr int kBytes = Dtype == CS_DTYPE_F32 ? 4 : 2;
    constexpr int kPer = 16 / kBytes;             // elements per 16-byte vector
    if constexpr (G % kPer == 0) {
      const char* p = static_cast<const char*>(ptr) + idx * kBytes;
      if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll
        for (int v = 0; v < G / kPer; ++v) {
          uint4 const q = __ldg(reinterpret_cast<const uint4*>(p) + v);
          uint32_t const w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if constexpr (Dtype == CS_DTYPE_F32) {
              out[v * kPer + i] = __uint_as_float(w[i]);
            } else if constexpr (Dtype == CS_DTYPE_BF16) {
              out[v * kPer + 2 * i]     = __uint_as_float(w[i] << 16);
              out[v * kPer + 2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
            } else {
              float2 const f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
              out[v * kPer + 2 * i]     = f.x;
              out[v * kPer + 2 * i + 1] = f.y;
            }
          }
        }
        return;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < G; ++k) out[k] = cs_operand_value<Dtype>(ptr, dtype, idx + k);
}

// x / d and x % d for 32-bit x < 2^31 and 1 <= d < 2^31, by a multiply-high: with
// l = ceil(log2 d) and mul = floor(2^32 (2^l - d) / d) + 1, x / d = (umulhi(x, mul) + x)
// >> l (the "round-up" method; the sum cannot overflow for x < 2^31).
struct CsDivmod {
  uint32_t d = 1, mul = 1, shift = 0;
  CsDivmod() = default;
  explicit CsDivmod(uint32_t divisor) : d(divisor)
  {
    uint32_t l = 0;
    while ((uint64_t(1) << l) < divisor) ++l;
    mul = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << l) - divisor)) / divisor + 1);
    shift = l;
  }
  CS_HD void divmod(uint32_t x, uint32_t& q, uint32_t& r) const
  {
#ifdef __CUDA_ARCH__
    uint32_t const hi = __umulhi(x, mul);
#else
    uint32_t const hi = uint32_t((uint64_t(x) * mul) >> 32);
#endif
    q = (hi + x) >> shift;
    r = x - q * d;
  }
};

// The workload's chain with its tensor operands (kinds fixed at compile time by cs_chain).
// OperandDtype: the cs_dtype every operand has (f32, f16 or bf16), or -1 (mixed or other
// types: each read in the type the chain states, CsChainOp::dt, else the run-time one).
template <int OperandDtype>
struct CsChainOp {
  static constexpr int kOperands = cs_chain::kOperands;
  // Operands, and index ops (triu, tril), read the element's (row, col).
  static constexpr bool kRowCol = kOperands > 0 || cs_chain::kPositional;
  static constexpr bool kManyRegs = true;
  static constexpr bool kCopy = false;
  static constexpr bool kLong = true;
  const void* ptr[CS_MAX_OPERANDS];
  int32_t dtype[CS_MAX_OPERANDS];
  int64_t ld[CS_MAX_OPERANDS];     // BROADCAST: the column's stride (1, or 0: one value a row)
  bool matrix_row_major;   // MATRIX operands: stored in D's layout (layout_cd)
  // BROADCAST operands (a tensor spanning some of the output's dims): the row's part of the
  // index, sum_t ((row / div[t]) % mod[t]) * stride[t], by multiply-high divisions (rows
  // are below 2^31: the rules).
  CsDivmod bdiv[CS_MAX_OPERANDS][2], bmod[CS_MAX_OPERANDS][2];
  int64_t bstride[CS_MAX_OPERANDS][2];

  // Operand i's cs_dtype: the chain's, known at compile time once the loops over the
  // operands unroll (so a mixed chain's loads need no switch), else the run-time one.
  __device__ __forceinline__ int32_t dt(int i) const
  {
    int const c = cs_chain_dtype<cs_chain>(i);
    return c >= 0 ? c : dtype[i];
  }

  __device__ __forceinline__ int64_t row_part(int i, uint32_t row) const
  {
    int64_t idx = 0;
#pragma unroll
    for (int t = 0; t < cs_chain_bcast<cs_chain>(i).terms; ++t) {
      uint32_t q, r, q2, c;
      bdiv[i][t].divmod(row, q, r);
      bmod[i][t].divmod(q, q2, c);
      idx += int64_t(c) * bstride[i][t];
    }
    return idx;
  }

  __device__ __forceinline__ float operator()(float x, uint32_t row, uint32_t col) const
  {
    float t[CS_MAX_OPERANDS] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kOperands; ++i) {
      int const kind = cs_chain_kind<cs_chain>(i);
      int64_t const idx = kind == CS_OPERAND_ROW ? int64_t(col)
                        : kind == CS_OPERAND_COL ? int64_t(row)
                        : kind == CS_OPERAND_BROADCAST ? row_part(i, row) + int64_t(col) * ld[i]
                        : matrix_row_major ? int64_t(row) * ld[i] + col
                                           : int64_t(col) * ld[i] + row;
      t[i] = cs_operand_value<OperandDtype>(ptr[i], dt(i), idx);
    }
    return cs_chain::apply(x, t, int64_t(row), int64_t(col));
  }

  // The operand values of G consecutive elements from (row, col), loaded ahead of the
  // math (see cs_act_flat_kernel). A group inside one row reads each ROW operand (and a
  // row-major MATRIX one) as one run of G values (16-byte loads where aligned) and a COL
  // operand once, instead of one load per element and operand; a group that wraps to the
  // next row loads nothing here and goes element by element in apply(). 16-bit operands
  // stay packed two to a register until the math (G/2 registers per run, not G).
  static constexpr bool kPacked = OperandDtype == CS_DTYPE_BF16 || OperandDtype == CS_DTYPE_F16;
  template <int G>
  struct Pre {
    uint32_t w[CS_MAX_OPERANDS][kPacked ? G / 2 : G];
    bool in_row;
  };
  __device__ __forceinline__ static uint32_t raw16(const void* ptr, int64_t idx)
  {
    return uint32_t(__ldg(static_cast<const unsigned short*>(ptr) + idx));
  }
  __device__ __forceinline__ static float from16(uint32_t h)
  {
    if constexpr (OperandDtype == CS_DTYPE_BF16) return __uint_as_float(h << 16);
    else return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
  }
  template <int G>
  __device__ __forceinline__ Pre<G> prefetch(uint32_t row, uint32_t col, uint32_t n) const
  {
    Pre<G> p;
    p.in_row = col + G <= n;
    if (!p.in_row) return p;
    // Broadcast operands' row parts, once per mask known at compile time.
    int64_t rp[CS_MAX_OPERANDS] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < kOperands; ++i) {
      if (cs_chain_kind<cs_chain>(i) != CS_OPERAND_BROADCAST) continue;
      int same = i;
#pragma unroll
      for (int j = 0; j < i; ++j)
        if (same == i && cs_chain_kind<cs_chain>(j) == CS_OPERAND_BROADCAST &&
            cs_chain_bcast<cs_chain>(j).mask >= 0 &&
            cs_chain_bcast<cs_chain>(j).mask == cs_chain_bcast<cs_chain>(i).mask)
          same = j;
      rp[i] = same == i ? row_part(i, row) : rp[same];
    }
#pragma unroll
    for (int i = 0; i < kOperands; ++i) {
      int const kind = cs_chain_kind<cs_chain>(i);
      if (kind == CS_OPERAND_BROADCAST && cs_chain_bcast<cs_chain>(i).col == 0) {
        // One value for the whole group (the operand does not span the last dim, known at
        // compile time): read once, like a COL operand's.
        int64_t const idx = rp[i];
        if constexpr (kPacked) p.w[i][0] = raw16(ptr[i], idx);
        else p.w[i][0] = __float_as_uint(cs_operand_value<OperandDtype>(ptr[i], dt(i), idx));
      } else if (kind == CS_OPERAND_COL) {
        if constexpr (kPacked) p.w[i][0] = raw16(ptr[i], int64_t(row));
        else p.w[i][0] = __float_as_uint(cs_operand_value<OperandDtype>(ptr[i], dt(i), int64_t(row)));
      } else if (kind == CS_OPERAND_ROW || kind == CS_OPERAND_BROADCAST || matrix_row_major) {
        int64_t const idx0 = kind == CS_OPERAND_ROW ? int64_t(col)
                           : kind == CS_OPERAND_BROADCAST ? rp[i] + int64_t(col)
                                                          : int64_t(row) * ld[i] + col;
        if constexpr (kPacked) {
          const unsigned short* q = static_cast<const unsigned short*>(ptr[i]) + idx0;
          if (G % 8 == 0 && (reinterpret_cast<uintptr_t>(q) & 15) == 0) {
#pragma unroll
            for (int v = 0; v < G / 8; ++v) {
              uint4 const u = __ldg(reinterpret_cast<const uint4*>(q) + v);
              p.w[i][4 * v] = u.x;
              p.w[i][4 * v + 1] = u.y;
              p.w[i][4 * v + 2] = u.z;
              p.w[i][4 * v + 3] = u.w;
            }
          } else {
#pragma unroll
            for (int k = 0; k < G / 2; ++k)
              p.w[i][k] = raw16(ptr[i], idx0 + 2 * k) | (raw16(ptr[i], idx0 + 2 * k + 1) << 16);
          }
        } else {
          float t[G];
          cs_operand_run<OperandDtype, G>(ptr[i], dt(i), idx0, t);
#pragma unroll
          for (int k = 0; k < G; ++k) p.w[i][k] = __float_as_uint(t[k]);
        }
      } else {
        int64_t const base = int64_t(col) * ld[i] + row;
        if constexpr (kPacked) {
#pragma unroll
          for (int k = 0; k < G / 2; ++k)
            p.w[i][k] = raw16(ptr[i], base + 2 * k * ld[i]) | (raw16(ptr[i], base + (2 * k + 1) * ld[i]) << 16);
        } else {
#pragma unroll
          for (int k = 0; k < G; ++k)
            p.w[i][k] = __float_as_uint(cs_operand_value<OperandDtype>(ptr[i], dt(i), base + k * ld[i]));
        }
      }
    }
    return p;
  }
  template <int G>
  __device__ __forceinline__ void apply(float (&f)[G], Pre<G> const& p, uint32_t row, uint32_t col,
                                        uint32_t n) const
  {
    if (!p.in_row) {
#pragma unroll
      for (int k = 0; k < G; ++k) {
        f[k] = (*this)(f[k], row, col);
        if (++col == n) { col = 0; ++row; }
      }
      return;
    }
#pragma unroll
    for (int k = 0; k < G; ++k) {
      float tk[CS_MAX_OPERANDS] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < kOperands; ++i) {
        bool const col_op = cs_chain_kind<cs_chain>(i) == CS_OPERAND_COL ||
                            (cs_chain_kind<cs_chain>(i) == CS_OPERAND_BROADCAST &&
                             cs_chain_bcast<cs_chain>(i).col == 0);
        if constexpr (kPacked) {
          uint32_t const word = col_op ? p.w[i][0] : p.w[i][k / 2];
          tk[i] = from16(col_op || k % 2 == 0 ? (word & 0xffffu) : (word >> 16));
        } else {
          tk[i] = __uint_as_float(col_op ? p.w[i][0] : p.w[i][k]);
        }
      }
      f[k] = cs_chain::apply(f[k], tk, int64_t(row), int64_t(col) + k);
    }
  }
};

// ---------------------------------------------------------------------------------------
// Element types: fp32 conversions, groups of G elements as 8- or 16-byte vectors
// ---------------------------------------------------------------------------------------

template <class T> struct CsElem;

template <> struct CsElem<float> {
  __device__ __forceinline__ static float to_f32(float v) { return v; }
  __device__ __forceinline__ static float from_f32(float v) { return v; }
  template <int W>
  __device__ __forceinline__ static void unpack(const uint32_t (&w)[W], float (&f)[W]) {
#pragma unroll
    for (int i = 0; i < W; ++i) f[i] = __uint_as_float(w[i]);
  }
  template <int W>
  __device__ __forceinline__ static void pack(const float (&f)[W], uint32_t (&w)[W]) {
#pragma unroll
    for (int i = 0; i < W; ++i) w[i] = __float_as_uint(f[i]);
  }
};

template <> struct CsElem<__nv_bfloat16> {
  __device__ __forceinline__ static float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ __forceinline__ static __nv_bfloat16 from_f32(float v) { return __float2bfloat16_rn(v); }
  template <int W>
  __device__ __forceinline__ static void unpack(const uint32_t (&w)[W], float (&f)[2 * W]) {
#pragma unroll
    for (int i = 0; i < W; ++i) {
      f[2 * i]     = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  template <int W>
  __device__ __forceinline__ static void pack(const float (&f)[2 * W], uint32_t (&w)[W]) {
#pragma unroll
    for (int i = 0; i < W; ++i) {
      __nv_bfloat162 const h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);   // one F2FP
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
  }
};

template <> struct CsElem<__half> {
  __device__ __forceinline__ static float to_f32(__half v) { return __half2float(v); }
  __device__ __forceinline__ static __half from_f32(float v) { return __float2half_rn(v); }
  template <int W>
  __device__ __forceinline__ static void unpack(const uint32_t (&w)[W], float (&f)[2 * W]) {
#pragma unroll
    for (int i = 0; i < W; ++i) {
      __half2 const h = *reinterpret_cast<const __half2*>(&w[i]);
      float2 const v = __half22float2(h);
      f[2 * i]     = v.x;
      f[2 * i + 1] = v.y;
    }
  }
  template <int W>
  __device__ __forceinline__ static void pack(const float (&f)[2 * W], uint32_t (&w)[W]) {
#pragma unroll
    for (int i = 0; i < W; ++i) {
      __half2 const h = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
  }
};

// A vector of W 32-bit words (W = 4: 16 bytes, W = 2: 8 bytes): LDG.E.128 / STG.E.128 (or
// .64). With CS_STREAMING_HINT=1 they carry the evict-first hint (ld/st.global.cs); on the
// H200 that measured ~5% slower than plain accesses for a 64 MiB in / 64 MiB out stream
// (scripts/probes/stream_variants.cu), so it is off by default.
template <int W> struct CsVec;
template <> struct CsVec<4> {
  uint32_t w[4];
  __device__ __forceinline__ static CsVec load(const void* p) {
#if CS_STREAMING_HINT
    uint4 const v = __ldcs(static_cast<const uint4*>(p));
#else
    uint4 const v = *static_cast<const uint4*>(p);
#endif
    return CsVec{{v.x, v.y, v.z, v.w}};
  }
  // One st.global.v4 always: written as a uint4 assignment, NVVM split some of them into
  // four 32-bit stores (the selu kernel's second vector: 4x the store instructions, the
  // LSU queue throttled, 10% off the copy bandwidth).
  __device__ __forceinline__ void store(void* p) const {
#if CS_STREAMING_HINT
    asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
#else
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
#endif
  }
};
template <> struct CsVec<2> {
  uint32_t w[2];
  __device__ __forceinline__ static CsVec load(const void* p) {
#if CS_STREAMING_HINT
    uint2 const v = __ldcs(static_cast<const uint2*>(p));
#else
    uint2 const v = *static_cast<const uint2*>(p);
#endif
    return CsVec{{v.x, v.y}};
  }
  __device__ __forceinline__ void store(void* p) const {   // one st.global.v2 (see above)
#if CS_STREAMING_HINT
    asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" :: "l"(p), "r"(w[0]), "r"(w[1]) : "memory");
#else
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" :: "l"(p), "r"(w[0]), "r"(w[1]) : "memory");
#endif
  }
};

// A group: G elements, one 16-byte vector of the wider type, 16 or 8 bytes of the other.
template <class TA, class TD>
struct CsGroup {
  static constexpr int kWide = sizeof(TA) > sizeof(TD) ? int(sizeof(TA)) : int(sizeof(TD));
  static constexpr int G  = 16 / kWide;                 // elements per group
  static constexpr int WA = G * int(sizeof(TA)) / 4;    // 32-bit words of A per group
  static constexpr int WD = G * int(sizeof(TD)) / 4;
  using VecA = CsVec<WA>;
  using VecD = CsVec<WD>;
};

// Keep an iteration's loads together. Left alone, ptxas sinks the later loads below the
// math on the first groups when that math is long (erff on 16-bit data: only 2 of 4
// loads issued up front), so every iteration pays a second memory round trip. Making
// every word depend on every load, through a mask the compiler cannot know is zero (a
// kernel argument, always 0), forces all loads to issue before any math, for a few
// LOP3s per iteration.
template <int V, int W>
__device__ __forceinline__ void cs_tie_loads(CsVec<W> (&v)[V], uint32_t zero)
{
  uint32_t t = v[0].w[0];
#pragma unroll
  for (int j = 1; j < V; ++j) t |= v[j].w[0];
  t &= zero;
#pragma unroll
  for (int j = 0; j < V; ++j)
#pragma unroll
    for (int i = 0; i < W; ++i) v[j].w[i] ^= t;
}

// One group through the op: unpack, apply at (row, col) (the column wraps to the next row
// at n), pack.
template <class TA, class TD, class Op>
__device__ __forceinline__ typename CsGroup<TA, TD>::VecD
cs_apply_group(typename CsGroup<TA, TD>::VecA const& va, Op const& op, uint32_t row, uint32_t col,
               uint32_t n);

// The group's operand values, loaded (for ops that read positions) before the math.
template <class Op, int G, bool = Op::kRowCol>
struct CsPre {
  __device__ __forceinline__ static CsPre load(Op const&, uint32_t, uint32_t, uint32_t) { return {}; }
};
template <class Op, int G>
struct CsPre<Op, G, true> {
  typename Op::template Pre<G> p;
  __device__ __forceinline__ static CsPre load(Op const& op, uint32_t row, uint32_t col, uint32_t n)
  {
    return CsPre{op.template prefetch<G>(row, col, n)};
  }
};

// One group through the op with its operand values already loaded.
template <class TA, class TD, class Op>
__device__ __forceinline__ typename CsGroup<TA, TD>::VecD
cs_apply_group(typename CsGroup<TA, TD>::VecA const& va, Op const& op,
               CsPre<Op, CsGroup<TA, TD>::G> const& pre, uint32_t row, uint32_t col, uint32_t n)
{
  using Grp = CsGroup<TA, TD>;
  if constexpr (Op::kRowCol) {
    typename Grp::VecD vd;
    float f[Grp::G];
    CsElem<TA>::unpack(va.w, f);
    op.template apply<Grp::G>(f, pre.p, row, col, n);
    CsElem<TD>::pack(f, vd.w);
    return vd;
  } else {
    return cs_apply_group<TA, TD>(va, op, row, col, n);
  }
}

template <class TA, class TD, class Op>
__device__ __forceinline__ typename CsGroup<TA, TD>::VecD
cs_apply_group(typename CsGroup<TA, TD>::VecA const& va, Op const& op, uint32_t row, uint32_t col,
               uint32_t n)
{
  using Grp = CsGroup<TA, TD>;
  typename Grp::VecD vd;
  if constexpr (std::is_same_v<TA, TD> && Op::kCopy) {
#pragma unroll
    for (int i = 0; i < Grp::WA; ++i) vd.w[i] = va.w[i];
  } else {
    float f[Grp::G];
    CsElem<TA>::unpack(va.w, f);
    if constexpr (Op::kRowCol) {
      op.template apply<Grp::G>(f, op.template prefetch<Grp::G>(row, col, n), row, col, n);
    } else {
#pragma unroll
      for (int k = 0; k < Grp::G; ++k) f[k] = op(f[k], row, col);
    }
    CsElem<TD>::pack(f, vd.w);
  }
  return vd;
}


// ---------------------------------------------------------------------------------------
// A view of A (view_rank > 0): the source offset of each element of D
// ---------------------------------------------------------------------------------------

// The view's dims with those of extent 1 dropped and every run of dims that is contiguous
// in A (stride[t] == extent[t + 1] * stride[t + 1]) merged into one: the same elements in
// the same order, with fewer divisions per element (a split of a packed tensor keeps its
// dims; a transpose made contiguous again collapses to one). At least one dim.
struct CsViewDims {
  int rank;
  int64_t offset;
  int64_t extent[CS_MAX_VIEW_DIMS];   // outermost first
  int64_t stride[CS_MAX_VIEW_DIMS];
};

static CsViewDims cs_view_merge(int rank, int64_t offset, const int64_t* extent, const int64_t* stride)
{
  CsViewDims v;
  v.rank = 0;
  v.offset = offset;
  for (int t = 0; t < rank; ++t) {
    if (extent[t] == 1) continue;             // its coordinate is always 0
    // the last kept dim's stride == extent[t] * stride[t] (no product: it may overflow)
    bool const contiguous = v.rank > 0 && (stride[t] == 0 ? v.stride[v.rank - 1] == 0
                                           : v.stride[v.rank - 1] % stride[t] == 0 &&
                                             v.stride[v.rank - 1] / stride[t] == extent[t]);
    if (contiguous) {
      v.extent[v.rank - 1] *= extent[t];
      v.stride[v.rank - 1] = stride[t];
    } else {
      v.extent[v.rank] = extent[t];
      v.stride[v.rank] = stride[t];
      ++v.rank;
    }
  }
  if (v.rank == 0) {                          // one element
    v.extent[0] = 1;
    v.stride[0] = 1;
    v.rank = 1;
  }
  return v;
}

// What the kernels read: the (merged) dims below the outermost one, innermost first, as
// divisors (32-bit multiply-high ones when every index is below 2^31, else 64-bit
// extents), and each dim's stride. Element i of D reads A[src(i)]: i's coordinates are
// its remainders by the extents from the innermost dim out; the quotient left is the
// outermost coordinate.
struct CsViewIndex {
  int32_t ndiv;                                  // merged rank - 1
  int32_t wide;                                  // 1: indices reach 2^31, 64-bit divisions
  int64_t offset;
  int64_t outer_stride;
  int64_t stride[CS_MAX_VIEW_DIMS - 1];
  int64_t extent[CS_MAX_VIEW_DIMS - 1];          // wide only
  CsDivmod div[CS_MAX_VIEW_DIMS - 1];            // !wide only

  CS_HD int64_t src32(uint32_t i) const
  {
    int64_t off = offset;
#pragma unroll
    for (int k = 0; k < CS_MAX_VIEW_DIMS - 1; ++k) {
      if (k < ndiv) {
        uint32_t q, r;
        div[k].divmod(i, q, r);
        off += int64_t(r) * stride[k];
        i = q;
      }
    }
    return off + int64_t(i) * outer_stride;
  }
  CS_HD int64_t src64(int64_t i) const
  {
    int64_t off = offset;
#pragma unroll
    for (int k = 0; k < CS_MAX_VIEW_DIMS - 1; ++k) {
      if (k < ndiv) {
        int64_t const q = i / extent[k];
        off += (i - q * extent[k]) * stride[k];
        i = q;
      }
    }
    return off + i * outer_stride;
  }
};

// Whether every group of G elements of D (from a multiple of G) reads G contiguous
// elements of A from offset + a multiple of G: the innermost merged dim has stride 1 and a
// multiple of G elements, and the other strides are multiples of G.
static bool cs_view_grouped(CsViewDims const& v, int64_t G)
{
  if (v.stride[v.rank - 1] != 1 || v.extent[v.rank - 1] % G != 0) return false;
  for (int t = 0; t + 1 < v.rank; ++t)
    if (v.stride[t] % G != 0) return false;
  return true;
}

// wide: some index (the element count) reaches 2^31.
static CsViewIndex cs_view_index(CsViewDims const& v, bool wide)
{
  CsViewIndex x;
  x.ndiv = v.rank - 1;
  x.wide = wide ? 1 : 0;
  x.offset = v.offset;
  x.outer_stride = v.stride[0];
  for (int k = 0; k < CS_MAX_VIEW_DIMS - 1; ++k) {
    int const t = v.rank - 1 - k;             // innermost first
    x.stride[k] = k < x.ndiv ? v.stride[t] : 0;
    x.extent[k] = k < x.ndiv ? v.extent[t] : 1;
    x.div[k] = CsDivmod(k < x.ndiv && !wide ? uint32_t(v.extent[t]) : 1u);
  }
  return x;
}

// The tiled view path (a transpose, batched): the innermost merged dim q is strided in A
// (stride != 1) and exactly one other merged dim p has stride 1. A tile is kTile elements
// along p (read coalesced from A) by kTile along q (written coalesced to D) at one
// coordinate of the other merged dims (the batch: together one index, innermost dim
// fastest). Fewer than 2^31 elements (so tiles, extents, D indices and the batch index are
// 32-bit; A offsets stay 64-bit).
static constexpr int kTile = 32;       // tile side (elements)
static constexpr int kTileRows = 8;    // block: kTile x kTileRows threads, kTile / kTileRows rows each

struct CsViewTile {
  uint32_t ep, eq;                               // extents of p and q
  uint32_t pitch_p;                              // D elements from one p coordinate to the next
  uint32_t ntiles;                               // batch * tiles along p * tiles along q
  int64_t sq;                                    // A stride of q
  int64_t offset;
  int32_t nbatch;                                // batch dims, innermost first
  int64_t bstride[CS_MAX_VIEW_DIMS - 2];         // their A strides
  uint32_t bpitch[CS_MAX_VIEW_DIMS - 2];         // their D pitches
  CsDivmod bdiv[CS_MAX_VIEW_DIMS - 2];           // their extents (the outermost's unused)
  CsDivmod div_tq, div_tp;                       // tiles along q, along p

  // Tile t (blockIdx.x): its first elements' A offset (src0) and D index (dst0) at its batch
  // coordinate, and its first p and q coordinates. t = (batch * tiles_p + tp) * tiles_q + tq.
  CS_HD void tile(uint32_t t, int64_t& src0, uint32_t& dst0, uint32_t& p0, uint32_t& q0) const
  {
    uint32_t r, tq, tp;
    div_tq.divmod(t, r, tq);
    div_tp.divmod(r, t, tp);                     // t: the batch index now
    src0 = offset;
    dst0 = 0;
#pragma unroll
    for (int k = 0; k < CS_MAX_VIEW_DIMS - 2; ++k) {
      if (k < nbatch) {
        uint32_t c = t;                          // the outermost batch dim: the quotient left
        if (k + 1 < nbatch) bdiv[k].divmod(t, t, c);
        src0 += int64_t(c) * bstride[k];
        dst0 += c * bpitch[k];
      }
    }
    p0 = tp * uint32_t(kTile);
    q0 = tq * uint32_t(kTile);
  }
  // The element at (cp, cq) of a tile's batch coordinate (cp < ep, cq < eq).
  CS_HD int64_t src(int64_t src0, uint32_t cp, uint32_t cq) const
  {
    return src0 + int64_t(cp) + int64_t(cq) * sq;
  }
  CS_HD uint32_t dst(uint32_t dst0, uint32_t cp, uint32_t cq) const
  {
    return dst0 + cp * pitch_p + cq;
  }
};

// Whether v takes the tiled path (q = the innermost merged dim has stride != 1 and
// exactly one other merged dim p has stride 1), and its descriptor. The caller checks that
// there are fewer than 2^31 elements.
static bool cs_view_tiled(CsViewDims const& v, CsViewTile& tv)
{
  int const q = v.rank - 1;
  if (v.rank < 2 || v.stride[q] == 1) return false;
  int p = -1;
  for (int t = 0; t < q; ++t) {
    if (v.stride[t] != 1) continue;
    if (p >= 0) return false;                    // two dims of stride 1 (an overlapping view)
    p = t;
  }
  if (p < 0) return false;
  int64_t pitch[CS_MAX_VIEW_DIMS];
  pitch[q] = 1;
  for (int t = q - 1; t >= 0; --t) pitch[t] = pitch[t + 1] * v.extent[t + 1];
  tv.ep = uint32_t(v.extent[p]);
  tv.eq = uint32_t(v.extent[q]);
  tv.pitch_p = uint32_t(pitch[p]);
  tv.sq = v.stride[q];
  tv.offset = v.offset;
  tv.nbatch = 0;
  int64_t batch = 1;
  for (int k = 0; k < CS_MAX_VIEW_DIMS - 2; ++k) {
    tv.bstride[k] = 0;
    tv.bpitch[k] = 0;
    tv.bdiv[k] = CsDivmod(1u);
  }
  for (int t = q - 1; t >= 0; --t) {
    if (t == p) continue;
    int const k = tv.nbatch++;
    tv.bstride[k] = v.stride[t];
    tv.bpitch[k] = uint32_t(pitch[t]);
    tv.bdiv[k] = CsDivmod(uint32_t(v.extent[t]));
    batch *= v.extent[t];
  }
  int64_t const tiles_q = (v.extent[q] + kTile - 1) / kTile;
  int64_t const tiles_p = (v.extent[p] + kTile - 1) / kTile;
  tv.div_tq = CsDivmod(uint32_t(tiles_q));
  tv.div_tp = CsDivmod(uint32_t(tiles_p));
  tv.ntiles = uint32_t(batch * tiles_p * tiles_q);   // <= the element count < 2^31
  return true;
}

// ---------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------

// Flat path over `total` contiguous elements. Elements [head, head + ngroups * G) are
// groups (a + head and d + head are vector-aligned); the head elements before them and
// the tail after them are scalar. `n` and `div_n` (the row length) are used only by ops
// that read (row, col), which run here only when total < 2^31.
template <class TA, class TD, class Op>
__global__ void __launch_bounds__(kThreads, CsMinBlocks<Op>::value)
cs_act_flat_kernel(TA const* a, TD* d, int64_t head, int64_t ngroups, int64_t total,
                   CsDivmod div_n, Op op, uint32_t zero)
{
  using Grp  = CsGroup<TA, TD>;
  using VecA = typename Grp::VecA;
  using VecD = typename Grp::VecD;
  constexpr int G = Grp::G;
  int const tid = int(threadIdx.x);
  uint32_t const n = div_n.d;

  // Scalar head and tail: fewer than 2 * G elements, one per thread of the last block.
  if (blockIdx.x == gridDim.x - 1) {
    int64_t const vec_end = head + ngroups * G;
    int64_t const n_scalar = head + (total - vec_end);
    if (tid < n_scalar) {
      int64_t const i = (tid < head) ? int64_t(tid) : vec_end + (tid - head);
      uint32_t row = 0, col = 0;
      if constexpr (Op::kRowCol) div_n.divmod(uint32_t(i), row, col);
      d[i] = CsElem<TD>::from_f32(op(CsElem<TA>::to_f32(a[i]), row, col));
    }
  }

  // Groups: chunks of kThreads * kVecs groups, one chunk per block per iteration.
  TA const* ag = a + head;
  TD*       dg = d + head;
  constexpr int64_t kChunk = int64_t(kThreads) * kVecs;
  int64_t const full_chunks = ngroups / kChunk;

  int64_t c = blockIdx.x;
  for (; c < full_chunks; c += gridDim.x) {
    int64_t const g0 = c * kChunk + tid;
    // Positions and chain operands first, then A: every load of the iteration is in
    // flight before the first store (which the compiler cannot move loads across).
    uint32_t row[kVecs], col[kVecs];
    CsPre<Op, G> pre[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      row[j] = 0;
      col[j] = 0;
      if constexpr (Op::kRowCol) {
        div_n.divmod(uint32_t(head + (g0 + j * kThreads) * G), row[j], col[j]);
        pre[j] = CsPre<Op, G>::load(op, row[j], col[j], n);
      }
    }
    VecA v[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) v[j] = VecA::load(ag + (g0 + j * kThreads) * G);
    if constexpr (Op::kLong) cs_tie_loads(v, zero);
#pragma unroll
    for (int j = 0; j < kVecs; ++j)
      cs_apply_group<TA, TD>(v[j], op, pre[j], row[j], col[j], n).store(dg + (g0 + j * kThreads) * G);
  }

  // The one partial chunk (if any) falls to the block whose turn comes next. It runs once
  // per launch, so one group at a time: little code, few registers.
  if (c == full_chunks) {
#pragma unroll 1
    for (int64_t g = c * kChunk + tid; g < ngroups; g += kThreads) {
      uint32_t row = 0, col = 0;
      if constexpr (Op::kRowCol) div_n.divmod(uint32_t(head + g * G), row, col);
      VecD const vd = cs_apply_group<TA, TD>(VecA::load(ag + g * G), op, row, col, n);
      vd.store(dg + g * G);
    }
  }
}

// 2-D path: m rows of n elements with arbitrary leading dimensions (and any alignment of
// the element types). Rows over blockIdx.y, columns over x, both grid-strided.
template <class TA, class TD, class Op>
__global__ void __launch_bounds__(kThreads)
cs_act_strided_kernel(TA const* a, int64_t lda, TD* d, int64_t ldd, int64_t m, int64_t n, Op op)
{
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    TA const* arow = a + r * lda;
    TD*       drow = d + r * ldd;
    for (int64_t col = int64_t(blockIdx.x) * kThreads + threadIdx.x; col < n;
         col += int64_t(gridDim.x) * kThreads)
      drow[col] = CsElem<TD>::from_f32(op(CsElem<TA>::to_f32(arow[col]), uint32_t(r), uint32_t(col)));
  }
}

// View path, vectorized: D is `ngroups` groups of G elements (total below 2^31, d
// vector-aligned), and each group reads G contiguous elements of A, vector-aligned, at
// src32 of its first element (the view's innermost merged dim has stride 1 and a multiple
// of G elements; the other strides and a + offset are multiples of G elements). Chunks of
// kThreads * kVecs groups, as in the flat kernel; a group may wrap to the next row of D
// (n % G != 0 when dims merged), which cs_apply_group handles.
template <class TA, class TD, class Op>
__global__ void __launch_bounds__(kThreads, CsMinBlocks<Op>::value)
cs_act_view_kernel(TA const* a, TD* d, CsViewIndex const view, int64_t ngroups, CsDivmod div_n,
                   Op op, uint32_t zero)
{
  using Grp  = CsGroup<TA, TD>;
  using VecA = typename Grp::VecA;
  using VecD = typename Grp::VecD;
  constexpr int G = Grp::G;
  int const tid = int(threadIdx.x);
  uint32_t const n = div_n.d;

  constexpr int64_t kChunk = int64_t(kThreads) * kVecs;
  int64_t const full_chunks = ngroups / kChunk;

  int64_t c = blockIdx.x;
  for (; c < full_chunks; c += gridDim.x) {
    uint32_t const i0 = uint32_t((c * kChunk + tid) * G);   // the first group's first element
    // Sources, positions and chain operands first, then A (see cs_act_flat_kernel).
    int64_t src[kVecs];
    uint32_t row[kVecs], col[kVecs];
    CsPre<Op, G> pre[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      uint32_t const i = i0 + uint32_t(j * kThreads * G);
      src[j] = view.src32(i);
      row[j] = 0;
      col[j] = 0;
      if constexpr (Op::kRowCol) {
        div_n.divmod(i, row[j], col[j]);
        pre[j] = CsPre<Op, G>::load(op, row[j], col[j], n);
      }
    }
    VecA v[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) v[j] = VecA::load(a + src[j]);
    if constexpr (Op::kLong) cs_tie_loads(v, zero);
#pragma unroll
    for (int j = 0; j < kVecs; ++j)
      cs_apply_group<TA, TD>(v[j], op, pre[j], row[j], col[j], n).store(d + (i0 + uint32_t(j * kThreads * G)));
  }

  // The one partial chunk (if any), one group at a time.
  if (c == full_chunks) {
#pragma unroll 1
    for (int64_t g = c * kChunk + tid; g < ngroups; g += kThreads) {
      uint32_t const i = uint32_t(g * G);
      uint32_t row = 0, col = 0;
      if constexpr (Op::kRowCol) div_n.divmod(i, row, col);
      VecD const vd = cs_apply_group<TA, TD>(VecA::load(a + view.src32(i)), op, row, col, n);
      vd.store(d + i);
    }
  }
}

// View path, any strides and alignment: one element of D per thread and iteration
// (grid-stride), read from A at its source offset (32-bit divisions when the `total`
// elements are below 2^31, 64-bit ones otherwise). Correct, not tuned: writes to D are
// coalesced, reads from A as the strides allow.
template <class TA, class TD, class Op>
__global__ void __launch_bounds__(kThreads)
cs_act_view_scalar_kernel(TA const* a, TD* d, CsViewIndex const view, int64_t total,
                          CsDivmod div_n, int64_t n, Op op)
{
  int64_t const step = int64_t(gridDim.x) * kThreads;
  int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (view.wide) {
    for (; i < total; i += step) {
      uint32_t row = 0, col = 0;
      if constexpr (Op::kRowCol) {
        row = uint32_t(i / n);
        col = uint32_t(i - int64_t(row) * n);
      }
      d[i] = CsElem<TD>::from_f32(op(CsElem<TA>::to_f32(a[view.src64(i)]), row, col));
    }
  } else {
    for (; i < total; i += step) {
      uint32_t row = 0, col = 0;
      if constexpr (Op::kRowCol) div_n.divmod(uint32_t(i), row, col);
      d[i] = CsElem<TD>::from_f32(op(CsElem<TA>::to_f32(a[view.src32(uint32_t(i))]), row, col));
    }
  }
}

// View path, tiled (a batched transpose, see CsViewTile): one block of kTile x kTileRows
// threads per tile. Lanes run along p to read A (kTile contiguous elements per warp and
// row, kTile / kTileRows rows of q per thread) into shared memory as fp32 (the raw bits
// for a copy of one type), then along q to write D (kTile consecutive elements per warp
// and row), each element through the op at its (row, col) of D: one 32-bit division by n
// of its index. The tile is padded to kTile + 1 words a row: both phases are free of bank
// conflicts. Elements past the extents (edge tiles) are predicated off.
template <class TA, class TD, class Op>
__global__ void __launch_bounds__(kTile * kTileRows, Op::kManyRegs ? 1024 / (kTile * kTileRows)
                                                                   : 2048 / (kTile * kTileRows))
cs_act_view_tiled_kernel(TA const* a, TD* d, CsViewTile const tv, CsDivmod div_n, Op op)
{
  // A copy between one type moves the bits (no round trip through fp32).
  constexpr bool kRaw = std::is_same_v<TA, TD> && Op::kCopy;
  using Raw = std::conditional_t<sizeof(TA) == 4, uint32_t, unsigned short>;
  __shared__ uint32_t tile[kTile][kTile + 1];     // [q][p]

  uint32_t const tx = threadIdx.x, ty = threadIdx.y;
  int64_t src0;
  uint32_t dst0, p0, q0;
  tv.tile(blockIdx.x, src0, dst0, p0, q0);

  // Read: lane tx at p0 + tx, rows ty, ty + kTileRows, ... of q.
  uint32_t const rp = p0 + tx;
#pragma unroll
  for (int r = 0; r < kTile / kTileRows; ++r) {
    uint32_t const lq = ty + uint32_t(r * kTileRows);
    uint32_t const cq = q0 + lq;
    if (rp < tv.ep && cq < tv.eq) {
      int64_t const s = tv.src(src0, rp, cq);
      if constexpr (kRaw) tile[lq][tx] = uint32_t(reinterpret_cast<Raw const*>(a)[s]);
      else tile[lq][tx] = __float_as_uint(CsElem<TA>::to_f32(a[s]));
    }
  }
  __syncthreads();

  // Write: lane tx at q0 + tx, rows ty, ty + kTileRows, ... of p.
  uint32_t const wq = q0 + tx;
  if (wq >= tv.eq) return;
#pragma unroll
  for (int r = 0; r < kTile / kTileRows; ++r) {
    uint32_t const lp = ty + uint32_t(r * kTileRows);
    uint32_t const cp = p0 + lp;
    if (cp < tv.ep) {
      uint32_t const i = tv.dst(dst0, cp, wq);
      uint32_t const w = tile[tx][lp];
      if constexpr (kRaw) {
        reinterpret_cast<Raw*>(d)[i] = Raw(w);
      } else {
        uint32_t row = 0, col = 0;
        if constexpr (Op::kRowCol) div_n.divmod(i, row, col);
        d[i] = CsElem<TD>::from_f32(op(__uint_as_float(w), row, col));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Host side: checks
// ---------------------------------------------------------------------------------------

static inline int64_t cs_dtype_bytes(int32_t dtype)
{
  switch (dtype) {
    case CS_DTYPE_F32:  return 4;
    case CS_DTYPE_F16:  return 2;
    case CS_DTYPE_BF16: return 2;
    default:            return 0;   // f64, fp8 and anything else: unsupported
  }
}

// CS_OK when p's view of A (view_rank != 0) is one the view path takes: 1 to
// CS_MAX_VIEW_DIMS dims, extents >= 0 multiplying to m * n (D's rows may span several of
// the view's trailing dims, as broadcast operands see them), strides
// and offset >= 0, and the furthest element it reaches (offset + sum (extent - 1) *
// stride) representable.
static int32_t cs_view_check(const cs_problem& p)
{
  if (p.view_rank < 1 || p.view_rank > CS_MAX_VIEW_DIMS) return CS_ERR_UNSUPPORTED;
  if (p.view_offset < 0) return CS_ERR_UNSUPPORTED;
  if (p.n > 0 && p.m > INT64_MAX / p.n) return CS_ERR_UNSUPPORTED;
  int const rank = p.view_rank;
  bool empty = false;
  for (int t = 0; t < rank; ++t) {
    if (p.view_extent[t] < 0 || p.view_stride[t] < 0) return CS_ERR_UNSUPPORTED;
    empty = empty || p.view_extent[t] == 0;
  }
  if (empty) return p.m * p.n == 0 ? CS_OK : CS_ERR_UNSUPPORTED;
  int64_t count = 1, reach = p.view_offset;
  for (int t = 0; t < rank; ++t) {
    int64_t const e = p.view_extent[t], s = p.view_stride[t];
    if (count > INT64_MAX / e) return CS_ERR_UNSUPPORTED;
    count *= e;
    if (s > 0 && e - 1 > (INT64_MAX - reach) / s) return CS_ERR_UNSUPPORTED;
    reach += (e - 1) * s;
  }
  return count == p.m * p.n ? CS_OK : CS_ERR_UNSUPPORTED;
}

// CS_OK when this kernel handles `p` (pointers checked only when asked).
static int32_t cs_act_check(const cs_problem& p, bool check_pointers)
{
  if (p.family != CS_FAMILY_ACTIVATION) return CS_ERR_UNSUPPORTED;
  int64_t const in_bytes = cs_dtype_bytes(p.dtype_ab);
  int64_t const out_bytes = cs_dtype_bytes(p.dtype_cd);
  if (in_bytes == 0 || out_bytes == 0) return CS_ERR_UNSUPPORTED;
  if constexpr (kFixedTypes) {
    if (p.dtype_ab != kWlIn || p.dtype_cd != kWlOut) return CS_ERR_UNSUPPORTED;
  } else {
    if (p.dtype_cd != p.dtype_ab) return CS_ERR_UNSUPPORTED;
  }
  if constexpr (cs_chain::kIdentity) {
    if (p.activation < CS_ACT_IDENTITY || p.activation > CS_ACT_MISH) return CS_ERR_UNSUPPORTED;
  }
  if (p.batch > 1) return CS_ERR_UNSUPPORTED;   // the family has one matrix
  if (p.m < 0 || p.n < 0) return CS_ERR_UNSUPPORTED;
  if (p.view_rank != 0 && cs_view_check(p) != CS_OK) return CS_ERR_UNSUPPORTED;
  if (p.m == 0 || p.n == 0) return CS_OK;       // nothing to compute
  if (p.m > INT64_MAX / p.n) return CS_ERR_UNSUPPORTED;
  if (p.view_rank != 0) {
    // D is packed row-major (lda is unused: A is read through the view).
    if (p.m > 1 && p.ldd != p.n) return CS_ERR_UNSUPPORTED;
  } else {
    if (p.m > 1 && (p.lda < p.n || p.ldd < p.n)) return CS_ERR_UNSUPPORTED;
  }

  if constexpr (cs_chain::kOperands > 0) {
    // (row, col) are 32-bit in the kernels.
    if (p.m > 0x7fffffffLL || p.n > 0x7fffffffLL) return CS_ERR_UNSUPPORTED;
    if (p.num_operands < cs_chain::kOperands) return CS_ERR_UNSUPPORTED;
    for (int i = 0; i < cs_chain::kOperands; ++i) {
      cs_operand const& o = p.operands[i];
      if (o.kind != cs_chain_kind<cs_chain>(i)) return CS_ERR_UNSUPPORTED;
      if (!cs_operand_dtype_ok(o.dtype)) return CS_ERR_UNSUPPORTED;
      // The loads use the chain's stated type (CsChainOp::dt): the operand must have it.
      if (cs_chain_dtype<cs_chain>(i) >= 0 && o.dtype != cs_chain_dtype<cs_chain>(i)) return CS_ERR_UNSUPPORTED;
      if (o.kind == CS_OPERAND_MATRIX) {
        if (p.view_rank != 0 && p.layout_cd != CS_LAYOUT_ROW) return CS_ERR_UNSUPPORTED;   // D is row-major
        int64_t const inner = p.layout_cd == CS_LAYOUT_ROW ? p.n : p.m;
        int64_t const outer = p.layout_cd == CS_LAYOUT_ROW ? p.m : p.n;
        if (outer > 1 && o.ld < inner) return CS_ERR_UNSUPPORTED;
      }
      if (check_pointers && o.ptr == nullptr) return CS_ERR_UNSUPPORTED;
    }
  }
  if (check_pointers) {
    if (p.a == nullptr || p.d == nullptr) return CS_ERR_UNSUPPORTED;
    if (reinterpret_cast<uintptr_t>(p.a) % uintptr_t(in_bytes) != 0 ||
        reinterpret_cast<uintptr_t>(p.d) % uintptr_t(out_bytes) != 0)
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

// ---------------------------------------------------------------------------------------
// Host side: launch
// ---------------------------------------------------------------------------------------

// View path (view_rank > 0): D packed row-major, A read through the merged view.
template <class TA, class TD, class Op>
static int32_t cs_act_run_view(const cs_problem& p, int sm_count, Op const& op, cudaStream_t stream)
{
  constexpr int64_t G = CsGroup<TA, TD>::G;
  int64_t const max_blocks = kBlocksPerSm > 0 ? int64_t(sm_count) * kBlocksPerSm : 0x7fffffffLL;
  int64_t const resident = int64_t(sm_count) * CsMinBlocks<Op>::value;

  TA const* a = static_cast<TA const*>(p.a);
  TD*       d = static_cast<TD*>(p.d);
  int64_t const total = p.m * p.n;
  bool const wide = total > 0x7fffffffLL;
  CsViewDims const v = cs_view_merge(p.view_rank, p.view_offset, p.view_extent, p.view_stride);
  CsViewIndex const view = cs_view_index(v, wide);
  CsDivmod const div_n(Op::kRowCol && !wide ? uint32_t(p.n) : 1u);

  // Groups: G contiguous elements of A at a vector-aligned source for every group of D.
  bool const vec = !wide && cs_view_grouped(v, G) &&
                   (reinterpret_cast<uintptr_t>(a + v.offset) % uintptr_t(G * sizeof(TA))) == 0 &&
                   (reinterpret_cast<uintptr_t>(d) % uintptr_t(G * sizeof(TD))) == 0;

  if (vec) {
    int64_t const ngroups = total / G;
    int64_t const chunks = (ngroups + int64_t(kThreads) * kVecs - 1) / (int64_t(kThreads) * kVecs);
    int64_t blocks = chunks < max_blocks ? chunks : max_blocks;
    if (blocks < 1) blocks = 1;
    cs_act_view_kernel<TA, TD, Op><<<unsigned(blocks), kThreads, 0, stream>>>(
        a, d, view, ngroups, div_n, op, /*zero=*/0u);
    return int32_t(cudaGetLastError());
  }
  // Tiles through shared memory: the innermost merged dim strided in A, another one of
  // stride 1 (a transpose, batched over the other dims).
  CsViewTile tv;
  if (!wide && cs_view_tiled(v, tv)) {
    cs_act_view_tiled_kernel<TA, TD, Op><<<tv.ntiles, dim3(kTile, kTileRows), 0, stream>>>(
        a, d, tv, div_n, op);
  } else {
    int64_t blocks = (total + kThreads - 1) / kThreads;
    if (blocks > resident * 4) blocks = resident * 4;
    if (blocks < 1) blocks = 1;
    cs_act_view_scalar_kernel<TA, TD, Op><<<unsigned(blocks), kThreads, 0, stream>>>(
        a, d, view, total, div_n, p.n, op);
  }
  return int32_t(cudaGetLastError());
}

template <class TA, class TD, class Op>
static int32_t cs_act_run(const cs_problem& p, int sm_count, Op const& op, cudaStream_t stream)
{
  if (p.view_rank > 0) return cs_act_run_view<TA, TD>(p, sm_count, op, stream);
  using Grp = CsGroup<TA, TD>;
  constexpr int64_t G = Grp::G;
  // A persistent grid's size; a one-shot grid takes a block per chunk (at most 2^31 - 1
  // blocks: past that the blocks loop, which only a problem of 2^39 elements would need).
  int64_t const max_blocks = kBlocksPerSm > 0 ? int64_t(sm_count) * kBlocksPerSm : 0x7fffffffLL;
  int64_t const resident = int64_t(sm_count) * CsMinBlocks<Op>::value;   // the 2-D path's target

  TA const* a = static_cast<TA const*>(p.a);
  TD*       d = static_cast<TD*>(p.d);
  // Element offsets of A and D modulo G: the groups line up when they are equal.
  int64_t const a_mis = int64_t(reinterpret_cast<uintptr_t>(a) / sizeof(TA)) % G;
  int64_t const d_mis = int64_t(reinterpret_cast<uintptr_t>(d) / sizeof(TD)) % G;
  bool const contiguous = (p.m == 1) || (p.lda == p.n && p.ldd == p.n);
  int64_t const total = p.m * p.n;
  bool const positions_fit = !Op::kRowCol || total <= 0x7fffffffLL;

  if (contiguous && a_mis == d_mis && positions_fit) {
    // Flat path: one array of m*n elements, groups after a peeled head.
    int64_t head = (G - a_mis) % G;
    if (head > total) head = total;
    int64_t const ngroups = (total - head) / G;
    int64_t const chunks = (ngroups + int64_t(kThreads) * kVecs - 1) / (int64_t(kThreads) * kVecs);
    int64_t blocks = chunks < max_blocks ? chunks : max_blocks;
    if (blocks < 1) blocks = 1;                 // only scalar elements
    CsDivmod const div_n(Op::kRowCol ? uint32_t(p.n) : 1u);
    cs_act_flat_kernel<TA, TD, Op><<<unsigned(blocks), kThreads, 0, stream>>>(
        a, d, head, ngroups, total, div_n, op, /*zero=*/0u);
  } else {
    // 2-D path: strided rows (or one row, when only the alignment is off and the
    // elements' positions are not needed).
    bool const flatten = contiguous && !Op::kRowCol;
    int64_t const m   = flatten ? 1 : p.m;
    int64_t const n   = flatten ? total : p.n;
    int64_t const lda = flatten ? n : (p.m == 1 ? p.n : p.lda);
    int64_t const ldd = flatten ? n : (p.m == 1 ? p.n : p.ldd);
    int64_t const target = resident * 4;
    int64_t gx = (n + kThreads - 1) / kThreads;
    if (gx > target) gx = target;
    int64_t gy = target / gx;
    if (gy < 1) gy = 1;
    if (gy > m) gy = m;
    if (gy > 65535) gy = 65535;
    cs_act_strided_kernel<TA, TD, Op><<<dim3(unsigned(gx), unsigned(gy)), kThreads, 0, stream>>>(
        a, lda, d, ldd, m, n, op);
  }
  return int32_t(cudaGetLastError());
}

// The chain, or the run-time activation when the source has no chain.
template <class TA, class TD>
static int32_t cs_act_dispatch(const cs_problem& p, int sm_count, cudaStream_t stream)
{
  if constexpr (!cs_chain::kIdentity) {
    // One instantiation per common operand type keeps the operand loads branch-free.
    int32_t common = cs_chain::kOperands > 0 ? p.operands[0].dtype : CS_DTYPE_F32;
    for (int i = 1; i < cs_chain::kOperands; ++i)
      if (p.operands[i].dtype != common) common = -1;
    auto run = [&](auto op) {
      for (int i = 0; i < cs_chain::kOperands; ++i) {
        op.ptr[i] = p.operands[i].ptr;
        op.dtype[i] = p.operands[i].dtype;
        op.ld[i] = p.operands[i].ld;
        if constexpr (cs_chain::kOperands > 0) {
          if (cs_chain_kind<cs_chain>(i) == CS_OPERAND_BROADCAST) {
            cs_operand const& o = p.operands[i];
            // The row part's divisions are 32-bit (rows below 2^31), the column's stride
            // the one the chain was generated with (1 or 0; a chain that does not say is
            // refused), and the layout row-major (the rules).
            if (o.kind != CS_OPERAND_BROADCAST || p.m > 0x7fffffffLL ||
                o.ld != cs_chain_bcast<cs_chain>(i).col || p.layout_cd != CS_LAYOUT_ROW)
              return int32_t(CS_ERR_UNSUPPORTED);
            for (int t = 0; t < 2; ++t) {
              if (o.row_div[t] < 1 || o.row_div[t] > 0x7fffffffLL || o.row_mod[t] < 1 ||
                  o.row_mod[t] > 0x7fffffffLL)
                return int32_t(CS_ERR_UNSUPPORTED);
              op.bdiv[i][t] = CsDivmod(uint32_t(o.row_div[t]));
              op.bmod[i][t] = CsDivmod(uint32_t(o.row_mod[t]));
              op.bstride[i][t] = o.row_stride[t];
            }
          }
        }
      }
      op.matrix_row_major = p.layout_cd == CS_LAYOUT_ROW;
      return cs_act_run<TA, TD>(p, sm_count, op, stream);
    };
    if constexpr (cs_chain::kOperands == 0) {
      return run(CsChainOp<CS_DTYPE_F32>{});
    } else {
      switch (common) {
        case CS_DTYPE_F32:  return run(CsChainOp<CS_DTYPE_F32>{});
        case CS_DTYPE_F16:  return run(CsChainOp<CS_DTYPE_F16>{});
        case CS_DTYPE_BF16: return run(CsChainOp<CS_DTYPE_BF16>{});
        default:            return run(CsChainOp<-1>{});
      }
    }
  } else {
    constexpr bool kFast = sizeof(TD) == 2;   // 16-bit results: fast intrinsics
    float const p0 = p.act_alpha, p1 = p.act_beta;
    float const p2 = 1.0f / p.act_alpha;
#define CS_ACT_CASE(ACT) \
    case ACT: return cs_act_run<TA, TD>(p, sm_count, CsActOp<ACT, kFast>{p0, p1, p2}, stream);
    switch (p.activation) {
      CS_ACT_CASE(CS_ACT_IDENTITY)
      CS_ACT_CASE(CS_ACT_RELU)
      CS_ACT_CASE(CS_ACT_LEAKY_RELU)
      CS_ACT_CASE(CS_ACT_GELU_ERF)
      CS_ACT_CASE(CS_ACT_GELU_TANH)
      CS_ACT_CASE(CS_ACT_SILU)
      CS_ACT_CASE(CS_ACT_SIGMOID)
      CS_ACT_CASE(CS_ACT_TANH)
      CS_ACT_CASE(CS_ACT_SELU)
      CS_ACT_CASE(CS_ACT_ELU)
      CS_ACT_CASE(CS_ACT_HARDSIGMOID)
      CS_ACT_CASE(CS_ACT_HARDSWISH)
      CS_ACT_CASE(CS_ACT_HARDTANH)
      CS_ACT_CASE(CS_ACT_SOFTPLUS)
      CS_ACT_CASE(CS_ACT_SOFTSIGN)
      CS_ACT_CASE(CS_ACT_MISH)
      default: return CS_ERR_UNSUPPORTED;
    }
#undef CS_ACT_CASE
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

  if constexpr (kFixedTypes) {
    using TA = typename CsTypeOf<kWlIn>::type;
    using TD = typename CsTypeOf<kWlOut>::type;
    if constexpr (std::is_void_v<TA> || std::is_void_v<TD>) {
      return CS_ERR_UNSUPPORTED;                // cs_act_check has said so already
    } else {
      return cs_act_dispatch<TA, TD>(*problem, sm_count, stream);
    }
  } else {
    switch (problem->dtype_ab) {
      case CS_DTYPE_F32:  return cs_act_dispatch<float, float>(*problem, sm_count, stream);
      case CS_DTYPE_F16:  return cs_act_dispatch<__half, __half>(*problem, sm_count, stream);
      case CS_DTYPE_BF16: return cs_act_dispatch<__nv_bfloat16, __nv_bfloat16>(*problem, sm_count, stream);
      default:            return CS_ERR_UNSUPPORTED;
    }
  }
}
