/*
 * cutesmith epilogue chains: the device functions a chain is written with, the loads of
 * its tensor operands, and the identity chain kernels use when none is given.
 *
 * cutesmith writes a workload's chain as a struct `cs_chain` (see `src/spec/chain.rs`) at
 * the top of the kernel source, in this order:
 *
 *   #define CS_CHAIN_DEFINED 1
 *   #include "cutesmith_chain.cuh"
 *   struct cs_chain {
 *     static constexpr int kOperands = 1;           // tensor operands the chain reads
 *     static constexpr int kKind0 = CS_OPERAND_ROW;  // kKind0..kKind3: cs_operand_kind
 *     ...
 *     static constexpr int kDtype0 = CS_DTYPE_BF16;  // kDtype0..kDtype3: cs_dtype (-1: none)
 *     ...
 *     static constexpr bool kIdentity = false;
 *     static constexpr bool kPositional = false;    // true: an index op (triu, tril)
 *     __host__ __device__ static float apply(float z, const float (&t)[CS_MAX_OPERANDS]);
 *     __host__ __device__ static float apply(float z, const float (&t)[CS_MAX_OPERANDS],
 *                                            int64_t row, int64_t col);
 *   };
 *
 * A source without a chain includes this header and gets the identity chain below.
 *
 * `z` is the value entering the chain (GEMM: alpha * acc + beta * C, in fp32; activation:
 * the element of A); `t[i]` is operand i at this element, loaded with cs_operand_load;
 * (row, col) is the element's position in its m x n matrix of D (within its batch). The
 * result is what D stores (rounded to its type once). A chain with an index op
 * (`kPositional`: `triu` / `tril`, which keep the elements on one side of a diagonal and
 * fill the rest) has only the second form, so a kernel that does not pass the position
 * fails to compile rather than compute a wrong mask.
 */
#ifndef CUTESMITH_CHAIN_CUH
#define CUTESMITH_CHAIN_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

#include "cutesmith_abi.h"

#ifdef __CUDACC__
#define CS_HD __host__ __device__ __forceinline__
#else
#define CS_HD inline
#endif

/* ---- the elementwise functions (fp32; the reference evaluates the same in fp64) ---- */

/* For a 16-bit (or narrower) output the fast hardware forms are accurate far beyond its
 * rounding (2 ulps of bf16/f16); an f32 output gets the accurate libm forms, and so do
 * values that are summed before they are rounded (CS_WL_CHAIN_ACCURATE: a reduction's
 * [[before]] ops, whose errors add up over a row). */
#if defined(__CUDA_ARCH__) && defined(CS_WL_DTYPE_CD) && CS_WL_DTYPE_CD != CS_DTYPE_F32 && \
    !defined(CS_WL_CHAIN_ACCURATE)
#define CS_FAST_CHAIN_MATH 1
#endif

/* e^x as one MUFU.EX2 and one multiply: ex2.approx.ftz (relative error ~2^-22), where
 * __expf's non-ftz form adds a denormal fix-up of four more instructions per element. A
 * result below 2^-126 flushes to 0, an absolute error far inside any 16-bit tolerance.
 * For results rounded to 16 bits (host builds: the accurate function). */
CS_HD float cs_fast_exp(float x)
{
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
#else
  return expf(x);
#endif
}

CS_HD float cs_sigmoidf(float x)
{
#ifdef CS_FAST_CHAIN_MATH
  return __fdividef(1.0f, 1.0f + cs_fast_exp(-x));
#else
  return 1.0f / (1.0f + expf(-x));
#endif
}
/* expm1(x) for x <= 0, for results rounded to 16 bits: ex2.approx minus 1 (absolute
 * error ~2^-22, relative below 1e-5 where |expm1 x| >= 0.03), the Taylor polynomial nearer
 * 0 (next term x^5 / 120: relative error below 1e-8 there), a few instructions instead of
 * expm1f's ~30. Both are computed and one selected: no branch, so a warp whose elements
 * fall on both sides runs each once (activations on 16-bit data are bound by the
 * instructions issued, not by the memory, when an element costs ~40 of them). Used by the
 * chain functions and the activation kernel (elementwise_activation.cu). */
CS_HD float cs_fast_expm1_neg(float x)
{
  const float poly = x * fmaf(x, fmaf(x, fmaf(x, 1.0f / 24.0f, 1.0f / 6.0f), 0.5f), 1.0f);
  return x > -0.03f ? poly : cs_fast_exp(x) - 1.0f;
}
/* log(1 + exp(y)) for y <= 0, for results rounded to 16 bits: e = exp(y) <= 1; lg2.approx
 * of 1 + e where that is >= 1.01 (the result >= 0.00995, its ~2^-22 absolute error is
 * relative error below 1e-5), the series e - e^2/2 + e^3/3 - e^4/4 below (relative error
 * below 3e-9). Branch-free like cs_fast_expm1_neg. */
CS_HD float cs_fast_log1p_exp_neg(float y)
{
  const float e = cs_fast_exp(y);
  const float series = e * fmaf(e, fmaf(e, fmaf(e, -0.25f, 1.0f / 3.0f), -0.5f), 1.0f);
#ifdef __CUDA_ARCH__
  const float via_log = __logf(1.0f + e);
#else
  const float via_log = logf(1.0f + e);
#endif
  return e < 0.01f ? series : via_log;
}
/* max and min that keep a NaN, as PyTorch's maximum, minimum, clamp, relu and hardtanh do
 * (and the fp64 reference): fmaxf / fminf return the other operand instead. On the device
 * one FMNMX.NAN (PTX max.NaN / min.NaN, sm_80 and later). */
CS_HD float cs_maxf(float x, float y)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
#else
  return x != x || y != y ? x + y : fmaxf(x, y);
#endif
}
CS_HD float cs_minf(float x, float y)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
#else
  return x != x || y != y ? x + y : fminf(x, y);
#endif
}
CS_HD float cs_relu(float x) { return cs_maxf(x, 0.0f); }
CS_HD float cs_leaky_relu(float x, float slope) { return x >= 0.0f ? x : slope * x; }
/* x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) for results rounded to 16 bits, with one MUFU op:
 * s = Phi(-|x|) = 2^Q, Q a degree-7 polynomial in t = min(|x|, 6) fitted (weighted least
 * squares) to log2(0.5 erfc(t / sqrt 2)), and beyond |x| = 6 the tail's own decay,
 * -(x^2 - 36) / (2 ln 2) more (within a factor 2 of Phi to |x| = 12; s then flushes to 0).
 * x Phi(x) is x s for x < 0 and x (1 - s) else, so the small side is never a difference.
 * Error (fp32 emulation against fp64 erf over [-12, 12]): at most 5.8e-7 absolute and
 * 4.3e-6 relative for |x| <= 5 (the Abramowitz-Stegun 7.1.26 form this replaces, with a
 * reciprocal and an exponential, reached 1.6e-3 relative in the negative tail); +inf gives
 * +inf, -inf and NaN NaN, as x Phi(x) in fp64. About 14 instructions an element against
 * that form's 22: in a GEMM epilogue the activation is on the critical path of every tile
 * (Nsight Compute, 4096^3 bf16 bias + GELU with the old form: 28.0M warp instructions, 1.06M
 * of them MUFU, against the plain GEMM's 16.4M). */
CS_HD float cs_gelu_erf_fast(float x)
{
  const float t = fminf(fabsf(x), 6.0f);
  float q = -1.834443651e-06f;
  q = fmaf(q, t, 6.159170880e-05f);
  q = fmaf(q, t, -9.304792620e-04f);
  q = fmaf(q, t, 8.507736027e-03f);
  q = fmaf(q, t, -5.395980179e-02f);
  q = fmaf(q, t, -4.584646225e-01f);
  q = fmaf(q, t, -1.151250958e+00f);
  q = fmaf(q, t, -9.999952912e-01f);
  q = fmaf(-0.7213475204f, fmaxf(fmaf(x, x, -36.0f), 0.0f), q);
#ifdef __CUDA_ARCH__
  float s;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(s) : "f"(q));
#else
  const float s = exp2f(q);
#endif
  return x * (x < 0.0f ? s : 1.0f - s);
}

CS_HD float cs_gelu_erf(float x)
{
#ifdef CS_FAST_CHAIN_MATH
  return cs_gelu_erf_fast(x);
#else
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
#endif
}
CS_HD float cs_gelu_tanh(float x)
{
#ifdef CS_FAST_CHAIN_MATH
  /* 0.5 x (1 + tanh u) = x sigmoid(2u) = x / (1 + exp(-2u)). */
  const float z = x * fmaf(x * x, -0.071354816273801242f, -1.5957691216057308f);   /* -2u */
  return __fdividef(x, 1.0f + cs_fast_exp(z));
#else
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
#endif
}
/* silu with beta (swish): x * sigmoid(beta * x); beta = 1 is silu. */
CS_HD float cs_silu(float x, float beta) { return x * cs_sigmoidf(beta * x); }
CS_HD float cs_sigmoid(float x) { return cs_sigmoidf(x); }
CS_HD float cs_tanh(float x)
{
#ifdef CS_FAST_CHAIN_MATH
  /* tanh|x| = 1 - 2 / (1 + exp(2|x|)): absolute error ~1e-7 near 0. */
  return copysignf(1.0f - __fdividef(2.0f, 1.0f + cs_fast_exp(2.0f * fabsf(x))), x);
#else
  return tanhf(x);
#endif
}
CS_HD float cs_expm1_nonpos(float x)   /* expm1(x) for x <= 0 */
{
#ifdef CS_FAST_CHAIN_MATH
  return cs_fast_expm1_neg(x);
#else
  return expm1f(x);
#endif
}
/* expm1 is evaluated at min(x, 0) and selected: branch-free (see cs_fast_expm1_neg). */
CS_HD float cs_selu(float x)
{
  const float alpha = 1.6732632423543772f, scale = 1.0507009873554805f;
  const float neg = alpha * cs_expm1_nonpos(fminf(x, 0.0f));
  return scale * (x > 0.0f || x != x ? x : neg);
}
CS_HD float cs_elu(float x, float alpha)
{
  const float neg = alpha * cs_expm1_nonpos(fminf(x, 0.0f));
  return x > 0.0f || x != x ? x : neg;
}
/* PyTorch's: relu6(x + 3) / 6. */
CS_HD float cs_hardsigmoid(float x) { return cs_minf(cs_maxf(x + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f); }
CS_HD float cs_hardswish(float x) { return x * cs_hardsigmoid(x); }
CS_HD float cs_hardtanh(float x, float lo, float hi) { return cs_minf(cs_maxf(x, lo), hi); }
/* PyTorch's: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold. */
CS_HD float cs_softplus(float x, float beta, float threshold)
{
  float bx = beta * x;
  /* log(1 + e^bx) = max(bx, 0) + log1p(e^-|bx|): no overflow for any threshold. */
#ifdef CS_FAST_CHAIN_MATH
  return bx > threshold ? x : __fdividef(fmaxf(bx, 0.0f) + cs_fast_log1p_exp_neg(-fabsf(bx)), beta);
#else
  return bx > threshold ? x : (fmaxf(bx, 0.0f) + log1pf(expf(-fabsf(bx)))) / beta;
#endif
}
/* The fast division (2 ulp) while the denominator is below 2^126, with no IEEE slow-path
 * call; above, the quotient rounds to +-1. NaN stays NaN. */
CS_HD float cs_softsign(float x)
{
  const float den = 1.0f + fabsf(x);
#ifdef __CUDA_ARCH__
  return den >= 8.5e37f ? copysignf(1.0f, x) : __fdividef(x, den);
#else
  return x / den;
#endif
}
CS_HD float cs_mish(float x)
{
#ifdef CS_FAST_CHAIN_MATH
  /* tanh(log(1 + e^x)) = n / (n + 2) with n = e^x (e^x + 2): one exponential. */
  float e = cs_fast_exp(fminf(x, 20.0f));
  float n = e * (e + 2.0f);
  return x > 20.0f ? x : x * __fdividef(n, n + 2.0f);
#else
  return x * tanhf(cs_softplus(x, 1.0f, 20.0f));
#endif
}

/* The activation `act` (cs_activation) with its two parameters, for kernels that take
 * it at run time (cs_problem.activation, act_alpha, act_beta). */
CS_HD float cs_activate(int act, float x, float p0, float p1)
{
  switch (act) {
    case CS_ACT_RELU: return cs_relu(x);
    case CS_ACT_LEAKY_RELU: return cs_leaky_relu(x, p0);
    case CS_ACT_GELU_ERF: return cs_gelu_erf(x);
    case CS_ACT_GELU_TANH: return cs_gelu_tanh(x);
    case CS_ACT_SILU: return cs_silu(x, p0);   /* p0: beta (1 by default) */
    case CS_ACT_SIGMOID: return cs_sigmoid(x);
    case CS_ACT_TANH: return cs_tanh(x);
    case CS_ACT_SELU: return cs_selu(x);
    case CS_ACT_ELU: return cs_elu(x, p0);
    case CS_ACT_HARDSIGMOID: return cs_hardsigmoid(x);
    case CS_ACT_HARDSWISH: return cs_hardswish(x);
    case CS_ACT_HARDTANH: return cs_hardtanh(x, p0, p1);
    case CS_ACT_SOFTPLUS: return cs_softplus(x, p0, p1);
    case CS_ACT_SOFTSIGN: return cs_softsign(x);
    case CS_ACT_MISH: return cs_mish(x);
    default: return x;
  }
}

/* ---- element loads of any cutesmith dtype ---- */

/* Whether a tensor operand may have cs_dtype d: a float type, or a boolean (a mask). */
CS_HD constexpr bool cs_operand_dtype_ok(int32_t d)
{
  return (d >= CS_DTYPE_F32 && d <= CS_DTYPE_E5M2) || d == CS_DTYPE_BOOL;
}

/* Bytes of one element of cs_dtype DT whose runs load as whole words (f32, f16, bf16,
 * bool); 0 for the others. */
template <int DT>
CS_HD constexpr int cs_elem_bytes()
{
  return DT == CS_DTYPE_F32 ? 4 : (DT == CS_DTYPE_F16 || DT == CS_DTYPE_BF16) ? 2 : DT == CS_DTYPE_BOOL ? 1 : 0;
}

/* N elements of cs_dtype DT (cs_elem_bytes > 0) packed little-endian in the words q, as
 * fp32: the decode every word-wide load of a run shares. */
template <int DT, int N>
__device__ __forceinline__ void cs_unpack_words(const unsigned *q, float *out)
{
#pragma unroll
  for (int e = 0; e < N; ++e) {
    if constexpr (DT == CS_DTYPE_BOOL) out[e] = ((q[e / 4] >> (8 * (e % 4))) & 0xffu) != 0 ? 1.0f : 0.0f;
    else if constexpr (DT == CS_DTYPE_F32) out[e] = __uint_as_float(q[e]);
    else if constexpr (DT == CS_DTYPE_BF16) out[e] = __uint_as_float((q[e / 2] >> (16 * (e % 2))) << 16);
    else out[e] = __half2float(__ushort_as_half((unsigned short)(q[e / 2] >> (16 * (e % 2)))));
  }
}

/* V consecutive booleans from base[idx] (one byte each) as 0.0 / 1.0: one 4-, 8- or
 * 16-byte load where V is 4, 8 or 16 and the address allows, else byte by byte. */
template <int V>
__device__ __forceinline__ void cs_load_bools(const void *base, int64_t idx, float (&out)[V])
{
  const unsigned char *p = static_cast<const unsigned char *>(base) + idx;
  if constexpr (V == 4 || V == 8 || V == 16) {
    if ((reinterpret_cast<uintptr_t>(p) & (V - 1)) == 0) {
      unsigned w[V / 4];
      if constexpr (V == 4) w[0] = __ldg(reinterpret_cast<const unsigned *>(p));
      else if constexpr (V == 8) {
        uint2 const r = __ldg(reinterpret_cast<const uint2 *>(p));
        w[0] = r.x; w[1] = r.y;
      } else {
        uint4 const r = __ldg(reinterpret_cast<const uint4 *>(p));
        w[0] = r.x; w[1] = r.y; w[2] = r.z; w[3] = r.w;
      }
      cs_unpack_words<CS_DTYPE_BOOL, V>(w, out);
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < V; ++e) out[e] = p[e] != 0 ? 1.0f : 0.0f;
}

CS_HD float cs_load_as_float(const void *base, int32_t dtype, int64_t idx)
{
  switch (dtype) {
    case CS_DTYPE_F32: return static_cast<const float *>(base)[idx];
    case CS_DTYPE_F16: return __half2float(static_cast<const __half *>(base)[idx]);
    case CS_DTYPE_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[idx]);
    case CS_DTYPE_F64: return float(static_cast<const double *>(base)[idx]);
    case CS_DTYPE_E4M3: return float(static_cast<const __nv_fp8_e4m3 *>(base)[idx]);
    case CS_DTYPE_E5M2: return float(static_cast<const __nv_fp8_e5m2 *>(base)[idx]);
    case CS_DTYPE_BOOL: return static_cast<const unsigned char *>(base)[idx] != 0 ? 1.0f : 0.0f;
    default: return 0.0f;
  }
}

/* Element idx of an array of cs_dtype DT, as fp32 (the type known at compile time). */
template <int DT>
CS_HD float cs_load_typed(const void *base, int64_t idx)
{
  if constexpr (DT == CS_DTYPE_F32) return static_cast<const float *>(base)[idx];
  else if constexpr (DT == CS_DTYPE_F16) return __half2float(static_cast<const __half *>(base)[idx]);
  else if constexpr (DT == CS_DTYPE_BF16) return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[idx]);
  else if constexpr (DT == CS_DTYPE_F64) return float(static_cast<const double *>(base)[idx]);
  else if constexpr (DT == CS_DTYPE_E4M3) return float(static_cast<const __nv_fp8_e4m3 *>(base)[idx]);
  else if constexpr (DT == CS_DTYPE_E5M2) return float(static_cast<const __nv_fp8_e5m2 *>(base)[idx]);
  else if constexpr (DT == CS_DTYPE_BOOL) return static_cast<const unsigned char *>(base)[idx] != 0 ? 1.0f : 0.0f;
  else return 0.0f;
}

/* The element index of operand `o` (of kind KIND) at (row, col) of batch b of D; n is D's
 * row length, which a CHANNEL operand needs (o.ld channels a row, each over n / o.ld
 * values; the rules give CHANNEL operands to family norm's row-major rows only). */
template <int KIND>
CS_HD int64_t cs_operand_index(const cs_operand &o, int32_t layout_cd, int64_t b, int64_t row, int64_t col,
                               int64_t n = 0)
{
  if constexpr (KIND == CS_OPERAND_ROW) return b * o.batch_stride + col;
  else if constexpr (KIND == CS_OPERAND_COL) return b * o.batch_stride + row;
  else if constexpr (KIND == CS_OPERAND_CHANNEL) return b * o.batch_stride + row * o.ld + col / (n / o.ld);
  else if constexpr (KIND == CS_OPERAND_BROADCAST)
    return b * o.batch_stride + (row / o.row_div[0]) % o.row_mod[0] * o.row_stride[0] +
           (row / o.row_div[1]) % o.row_mod[1] * o.row_stride[1] + col * o.ld;
  else return b * o.batch_stride + (layout_cd == CS_LAYOUT_ROW ? row * o.ld + col : col * o.ld + row);
}

/* Operand `o` at element (row, col) of batch b of D (m x n, layout_cd). */
CS_HD float cs_operand_load(const cs_operand &o, int32_t layout_cd, int64_t b, int64_t row,
                            int64_t col, int64_t n = 0)
{
  int64_t idx;
  switch (o.kind) {
    case CS_OPERAND_ROW: idx = b * o.batch_stride + col; break;
    case CS_OPERAND_COL: idx = b * o.batch_stride + row; break;
    case CS_OPERAND_CHANNEL: idx = cs_operand_index<CS_OPERAND_CHANNEL>(o, layout_cd, b, row, col, n); break;
    case CS_OPERAND_BROADCAST: idx = cs_operand_index<CS_OPERAND_BROADCAST>(o, layout_cd, b, row, col, n); break;
    case CS_OPERAND_MATRIX:
      idx = b * o.batch_stride + (layout_cd == CS_LAYOUT_ROW ? row * o.ld + col : col * o.ld + row);
      break;
    default: return 0.0f;
  }
  return cs_load_as_float(o.ptr, o.dtype, idx);
}

/* The kind and dtype of a chain's operand i (Chain::kKind0..kKind3, kDtype0..kDtype3); the
 * dtype is -1 for a chain written before it stated them, or with no such operand. */
template <class Chain>
CS_HD constexpr int cs_chain_kind(int i)
{
  return i == 0 ? Chain::kKind0 : i == 1 ? Chain::kKind1 : i == 2 ? Chain::kKind2 : Chain::kKind3;
}
template <class Chain, class = void>
struct cs_chain_has_dtypes : std::false_type {};
template <class Chain>
struct cs_chain_has_dtypes<Chain, std::void_t<decltype(Chain::kDtype0)>> : std::true_type {};
template <class Chain>
CS_HD constexpr int cs_chain_dtype(int i)
{
  if constexpr (cs_chain_has_dtypes<Chain>::value) {
    return i == 0 ? Chain::kDtype0 : i == 1 ? Chain::kDtype1 : i == 2 ? Chain::kDtype2 : Chain::kDtype3;
  } else {
    return -1;
  }
}

/* Operand `o`, of kind KIND and cs_dtype DTYPE known at compile time (-1: read from the
 * operand), at element (row, col) of batch b of D: one index computation and one typed
 * load. Reading the kind and dtype from the operand at every element (a switch on each)
 * took 2.4 times the instructions in the raw CuTe GEMM's epilogue. */
template <int KIND, int DTYPE>
CS_HD float cs_operand_at(const cs_operand &o, int32_t layout_cd, int64_t b, int64_t row, int64_t col,
                          int64_t n = 0)
{
  if constexpr (KIND == CS_OPERAND_ROW || KIND == CS_OPERAND_COL || KIND == CS_OPERAND_MATRIX ||
                KIND == CS_OPERAND_CHANNEL || KIND == CS_OPERAND_BROADCAST) {
    int64_t const idx = cs_operand_index<KIND>(o, layout_cd, b, row, col, n);
    if constexpr (DTYPE >= 0) return cs_load_typed<DTYPE>(o.ptr, idx);
    else return cs_load_as_float(o.ptr, o.dtype, idx);
  } else {
    return cs_operand_load(o, layout_cd, b, row, col, n);
  }
}

/* What the chain knows of its BROADCAST operand i (Chain::kBcastCol0..3, kBcastMask0..3,
 * kBcastTerms0..3): col, its column stride (1: it spans the output's last dim, a run of
 * values along a row; 0: one value a row); mask, the output dims it spans (operands of one
 * mask share their row index); terms, the terms of that row index. A chain without them
 * gives {-1, -1, 2}: not known. */
struct cs_bcast_info {
  int col, mask, terms;
};
template <class Chain, class = void>
struct cs_chain_has_bcast : std::false_type {};
template <class Chain>
struct cs_chain_has_bcast<Chain, std::void_t<decltype(Chain::kBcastCol0)>> : std::true_type {};
template <class Chain>
CS_HD constexpr cs_bcast_info cs_chain_bcast(int i)
{
  if constexpr (cs_chain_has_bcast<Chain>::value) {
    return i == 0   ? cs_bcast_info{Chain::kBcastCol0, Chain::kBcastMask0, Chain::kBcastTerms0}
           : i == 1 ? cs_bcast_info{Chain::kBcastCol1, Chain::kBcastMask1, Chain::kBcastTerms1}
           : i == 2 ? cs_bcast_info{Chain::kBcastCol2, Chain::kBcastMask2, Chain::kBcastTerms2}
                    : cs_bcast_info{Chain::kBcastCol3, Chain::kBcastMask3, Chain::kBcastTerms3};
  } else {
    return cs_bcast_info{-1, -1, 2};
  }
}

/* The first operand slot a chain reads (Chain::kFirst; 0 for a chain without one): a
 * reduction's [[before]] ops (cs_before) take the first slots, its epilogue chain the next. */
template <class Chain, class = void>
struct cs_chain_has_first : std::false_type {};
template <class Chain>
struct cs_chain_has_first<Chain, std::void_t<decltype(Chain::kFirst)>> : std::true_type {};
template <class Chain>
CS_HD constexpr int cs_chain_first()
{
  if constexpr (cs_chain_has_first<Chain>::value) return Chain::kFirst;
  else return 0;
}

/* Operand I of Chain at element (row, col) of batch b. */
template <class Chain, int I>
CS_HD float cs_chain_operand(const cs_problem &p, int64_t b, int64_t row, int64_t col)
{
  return cs_operand_at<cs_chain_kind<Chain>(I), cs_chain_dtype<Chain>(I)>(p.operands[cs_chain_first<Chain>() + I],
                                                                          p.layout_cd, b, row, col, p.n);
}

/* The chain at element (row, col) of batch b: loads the operands it reads, applies it. */
template <class Chain>
CS_HD float cs_chain_at(const cs_problem &p, float z, int64_t b, int64_t row, int64_t col)
{
  static_assert(Chain::kOperands <= CS_MAX_OPERANDS && CS_MAX_OPERANDS == 4, "four operand slots");
  float t[CS_MAX_OPERANDS] = {0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (Chain::kOperands > 0) t[0] = cs_chain_operand<Chain, 0>(p, b, row, col);
  if constexpr (Chain::kOperands > 1) t[1] = cs_chain_operand<Chain, 1>(p, b, row, col);
  if constexpr (Chain::kOperands > 2) t[2] = cs_chain_operand<Chain, 2>(p, b, row, col);
  if constexpr (Chain::kOperands > 3) t[3] = cs_chain_operand<Chain, 3>(p, b, row, col);
  return Chain::apply(z, t, row, col);
}

/* cs_load_run of a type of es bytes (0: element by element), per16 elements a 16-byte load. */
template <int DT, int V, int es, int per16>
__device__ __forceinline__ void cs_load_run_wide(const void *base, int64_t idx, float (&out)[V])
{
  if constexpr (es > 0 && V % per16 == 0) {
    const char *p = static_cast<const char *>(base) + idx * es;
    if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
#pragma unroll
      for (int w = 0; w < V / per16; ++w) {
        uint4 const r = __ldg(reinterpret_cast<const uint4 *>(p) + w);
        unsigned const q[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if constexpr (DT == CS_DTYPE_F32) {
            out[w * per16 + e] = __uint_as_float(q[e]);
          } else {
            __half2 h;
            __nv_bfloat162 bh;
            float2 f;
            if constexpr (DT == CS_DTYPE_F16) { h = *reinterpret_cast<const __half2 *>(&q[e]); f = __half22float2(h); }
            else { bh = *reinterpret_cast<const __nv_bfloat162 *>(&q[e]); f = __bfloat1622float2(bh); }
            out[w * per16 + 2 * e] = f.x;
            out[w * per16 + 2 * e + 1] = f.y;
          }
        }
      }
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < V; ++e) out[e] = cs_load_typed<DT>(base, idx + e);
}

/* V consecutive elements of type DT (cs_dtype known at compile time) from base[idx], as
 * fp32: 16-byte loads where the address allows (f32, f16, bf16; booleans 4 to 16 a load),
 * else element by element. Device code only. */
template <int DT, int V>
__device__ __forceinline__ void cs_load_run(const void *base, int64_t idx, float (&out)[V])
{
  constexpr int es = DT == CS_DTYPE_F32 ? 4 : (DT == CS_DTYPE_F16 || DT == CS_DTYPE_BF16) ? 2 : 0;
  constexpr int per16 = es > 0 ? 16 / es : 1;
  if constexpr (DT == CS_DTYPE_BOOL) {
    cs_load_bools<V>(base, idx, out);
  } else {
    cs_load_run_wide<DT, V, es, per16>(base, idx, out);
  }
}

/* Operand slot I of a reduction's [[before]] ops (Before) for a run of V elements of A
 * starting at (i0, j0) of batch b: along k (ALONG_K: (i0, j0 + q), row-major A) or along the
 * rows ((i0 + q, j0), rows side by side), each contiguous in A's layout, so a MATRIX
 * operand (laid out like A) is one run of loads; ROW (k values) and COL (m values) are a
 * run or one value. */
template <class Before, int I, int V, bool ALONG_K>
__device__ __forceinline__ void cs_before_operand_run(const cs_problem &p, int64_t b, int64_t i0, int64_t j0,
                                                      float (&t)[V][CS_MAX_OPERANDS])
{
  if constexpr (Before::kOperands > I) {
    constexpr int kind = cs_chain_kind<Before>(I), dt = cs_chain_dtype<Before>(I);
    cs_operand const &o = p.operands[I];
    float v[V];
    if constexpr (dt < 0) {
#pragma unroll
      for (int q = 0; q < V; ++q)
        v[q] = cs_operand_load(o, p.layout_a, b, ALONG_K ? i0 : i0 + q, ALONG_K ? j0 + q : j0);
    } else if constexpr (kind == CS_OPERAND_MATRIX || (kind == CS_OPERAND_ROW) == ALONG_K) {
      cs_load_run<dt, V>(o.ptr, cs_operand_index<kind>(o, p.layout_a, b, i0, j0), v);
    } else {
      float const one = cs_load_typed<dt>(o.ptr, cs_operand_index<kind>(o, p.layout_a, b, i0, j0));
#pragma unroll
      for (int q = 0; q < V; ++q) v[q] = one;
    }
#pragma unroll
    for (int q = 0; q < V; ++q) t[q][I] = v[q];
  }
}

/* The [[before]] ops' operands for a run of V elements of A (see cs_before_operand_run):
 * loaded apart from the ops, so that a kernel can issue them beside A's loads. */
template <class Before, int V, bool ALONG_K>
__device__ __forceinline__ void cs_before_operands(const cs_problem &p, int64_t b, int64_t i0, int64_t j0,
                                                   float (&t)[V][CS_MAX_OPERANDS])
{
  cs_before_operand_run<Before, 0, V, ALONG_K>(p, b, i0, j0, t);
  cs_before_operand_run<Before, 1, V, ALONG_K>(p, b, i0, j0, t);
  cs_before_operand_run<Before, 2, V, ALONG_K>(p, b, i0, j0, t);
  cs_before_operand_run<Before, 3, V, ALONG_K>(p, b, i0, j0, t);
}

/* The [[before]] ops on a run of V elements x of A, their operands t loaded. */
template <class Before, int V>
__device__ __forceinline__ void cs_before_apply(float (&x)[V], const float (&t)[V][CS_MAX_OPERANDS])
{
#pragma unroll
  for (int q = 0; q < V; ++q) x[q] = Before::apply(x[q], t[q]);
}

/* Both: the operands of a run of V elements x of A, then the ops. */
template <class Before, int V, bool ALONG_K>
__device__ __forceinline__ void cs_before_run(const cs_problem &p, float (&x)[V], int64_t b, int64_t i0, int64_t j0)
{
  float t[V][CS_MAX_OPERANDS];
  cs_before_operands<Before, V, ALONG_K>(p, b, i0, j0, t);
  cs_before_apply<Before, V>(x, t);
}

/* [[before]] ops (cs_before) at element (i, j) of batch b of an m x k (or m x n) matrix
 * stored in `layout`, their operands from slot 0 indexed over it (MATRIX with the operand's
 * ld, ROW: a value a column, COL: a value a row). A reduction's are indexed like A
 * (cs_before_at); gemm_norm's and a scan's like D (layout_cd, m x n). */
template <class Before>
CS_HD float cs_before_in(const cs_problem &p, float x, int64_t b, int64_t i, int64_t j, int32_t layout)
{
  static_assert(Before::kOperands <= CS_MAX_OPERANDS, "four operand slots");
  float t[CS_MAX_OPERANDS] = {0.0f, 0.0f, 0.0f, 0.0f};
#define CS_BEFORE_LOAD(I)                                                                                     \
  if constexpr (Before::kOperands > I)                                                                        \
    t[I] = cs_operand_at<cs_chain_kind<Before>(I), cs_chain_dtype<Before>(I)>(p.operands[I], layout, b, i, j);
  CS_BEFORE_LOAD(0)
  CS_BEFORE_LOAD(1)
  CS_BEFORE_LOAD(2)
  CS_BEFORE_LOAD(3)
#undef CS_BEFORE_LOAD
  return Before::apply(x, t);
}

/* A reduction's [[before]] ops (cs_before) at element j of row i of batch b of A (m x k,
 * layout_a): its operands are indexed like A (MATRIX: m x k with the operand's ld, ROW: k
 * values, COL: m values). */
template <class Before>
CS_HD float cs_before_at(const cs_problem &p, float x, int64_t b, int64_t i, int64_t j)
{
  return cs_before_in<Before>(p, x, b, i, j, p.layout_a);
}

/* CS_OK when slots first.. of p's operands are the ones `Chain` reads: their kinds and
 * dtypes, leading dimensions that hold a row (or column) of the rows x cols matrix they are
 * indexed over (stored in `layout`), and with `check_pointers` their addresses. */
template <class Chain>
inline int32_t cs_operand_slots_check(const cs_problem& p, int first, int32_t layout, int64_t rows, int64_t cols,
                                      bool check_pointers)
{
  for (int i = 0; i < Chain::kOperands; ++i) {
    cs_operand const& o = p.operands[first + i];
    if (o.kind != cs_chain_kind<Chain>(i)) return CS_ERR_UNSUPPORTED;
    if (cs_chain_dtype<Chain>(i) >= 0 && o.dtype != cs_chain_dtype<Chain>(i)) return CS_ERR_UNSUPPORTED;
    if (!cs_operand_dtype_ok(o.dtype) || o.batch_stride < 0) return CS_ERR_UNSUPPORTED;
    if (o.kind == CS_OPERAND_MATRIX) {
      int64_t const inner = layout == CS_LAYOUT_ROW ? cols : rows;
      int64_t const outer = layout == CS_LAYOUT_ROW ? rows : cols;
      if (outer > 1 && o.ld < inner) return CS_ERR_UNSUPPORTED;
    }
    if (check_pointers && o.ptr == nullptr) return CS_ERR_UNSUPPORTED;
  }
  return CS_OK;
}

/* CS_OK when p's tensor operands are the ones `Chain` reads (none for the identity): their
 * number, kinds and dtypes, leading dimensions that hold a row (or column) of D, and with
 * `check_pointers` their addresses. Host side, before a launch. */
template <class Chain>
inline int32_t cs_chain_operands_check(const cs_problem& p, bool check_pointers)
{
  int const first = cs_chain_first<Chain>();
  if (p.num_operands != first + Chain::kOperands || first + Chain::kOperands > CS_MAX_OPERANDS) return CS_ERR_UNSUPPORTED;
  return cs_operand_slots_check<Chain>(p, first, p.layout_cd, p.m, p.n, check_pointers);
}

/* CS_OK when p's first operand slots are the ones a reduction's [[before]] ops (Before, any
 * epilogue chain's slots after them) read, indexed like A (m x k, layout_a). */
template <class Before>
inline int32_t cs_before_operands_check(const cs_problem& p, bool check_pointers)
{
  if (p.num_operands < Before::kOperands) return CS_ERR_UNSUPPORTED;
  return cs_operand_slots_check<Before>(p, 0, p.layout_a, p.m, p.k, check_pointers);
}

/* ---- the identity chain, when the source defines none ---- */

/* The identity chain: no operands, z unchanged. The default cs_chain, and a reduction's
 * cs_before when its workload has no [[before]] ops. */
struct cs_identity_chain {
  static constexpr int kOperands = 0;
  static constexpr int kKind0 = CS_OPERAND_NONE;
  static constexpr int kKind1 = CS_OPERAND_NONE;
  static constexpr int kKind2 = CS_OPERAND_NONE;
  static constexpr int kKind3 = CS_OPERAND_NONE;
  static constexpr int kDtype0 = -1;
  static constexpr int kDtype1 = -1;
  static constexpr int kDtype2 = -1;
  static constexpr int kDtype3 = -1;
  static constexpr bool kIdentity = true;
  static constexpr bool kPositional = false;
  CS_HD static float apply(float z, const float (&)[CS_MAX_OPERANDS]) { return z; }
  CS_HD static float apply(float z, const float (&)[CS_MAX_OPERANDS], int64_t, int64_t) { return z; }
};

#ifndef CS_CHAIN_DEFINED
#define CS_CHAIN_DEFINED 1
struct cs_chain : cs_identity_chain {};
#endif

#endif /* CUTESMITH_CHAIN_CUH */
