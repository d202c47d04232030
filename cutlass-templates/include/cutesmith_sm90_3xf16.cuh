// cutesmith: a Hopper (sm_90a) CUTLASS 3 mainloop collective for fp32 GEMMs on fp16
// tensor cores that keeps fp32 accuracy ("3xF16": three fp16 products of split operands).
//
// The idea. fp16 keeps 11 significant bits, as TF32 does, and WGMMA multiplies fp16 at
// twice TF32's rate. Split every operand x, scaled by a power of two s, into
//
//     hi = fp16(x 2^s),   lo = fp16(x 2^s - hi)          (both rounded to nearest)
//
// so that x 2^s = hi + lo to within 2^-24 |x 2^s| (lo keeps 11 bits of the remainder).
// Then a b 2^(sa + sb) = hi(a) hi(b) + lo(a) hi(b) + hi(a) lo(b) + lo(a) lo(b), the last
// term below 2^-24 |a b 2^(sa+sb)|: dropping it and running the other three as fp16 WGMMAs
// with fp32 accumulation gives each product to about fp32's rounding (3xTF32 drops about
// 2^-20), at two thirds of the time 3xTF32 takes on the same tensor cores.
//
// The scale. fp16's exponent range is small (normal from 2^-14, largest 65504), so each
// row of A and each column of B (the K-vectors of a dot product) gets its own s: the one
// that puts the largest finite |x| of that K-vector in [2^14, 2^15). Every element then
// converts without overflow; an element at 2^-16 of its vector's largest keeps all 22 bits
// of hi and lo, and what a smaller one loses is below 2^-39 of that largest (fp16's
// subnormal step), far under fp32's rounding of the dot product unless one vector spans
// more than 2^16 in magnitude and its small elements dominate the sum. The result is
// scaled back exactly: D = acc 2^-(sa + sb) (scalbnf, no rounding for normal results).
//
// Where the split happens: before the GEMM, one pass over each operand (split_operand
// below) writes hi and lo K-major into the workspace, fp16, whatever the operand's
// storage order, with each K-vector's largest |x| beside them. The mainloop then is a
// plain TMA + WGMMA pipeline on four fp16 tiles a stage (A hi and lo, B hi and lo): no
// conversion in the kernel, so the tensor cores are fed as in a 16-bit GEMM. Per k-tile
// each consumer issues
//
//     acc += lo(A) hi(B);  acc += hi(A) lo(B);  acc += hi(A) hi(B)      (small terms first)
//
// into a short-lived partial that is promoted into FADD accumulators every few k-tiles
// (WGMMA truncates as it accumulates; see cutesmith_sm90_3xtf32.cuh, whose promotion
// interval and K threshold this mainloop shares).
//
// The scale back needs the tile's position, which CUTLASS's kernel does not hand to the
// consumers' mma(): the producer writes each stage's tile coordinate into a slot beside it
// and arrives on the stage's full barrier a second time after that write (the pipeline
// counts two producer arrivals a stage), so the consumers' wait orders the slot's write
// before their read.

#pragma once

#include <cstdint>

#include <cuda_fp16.h>

#include <cute/tensor.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>
#include <cutlass/gemm/gemm.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>

#include "cutesmith_sm90_mainloop.cuh"
#include "cutesmith_sm90_3xtf32.cuh"   // the promotion interval's defaults

namespace cs_3xf16 {
using namespace cute;

// The scale exponent s of a K-vector whose largest finite |x| is amax: amax 2^s lies in
// [2^14, 2^15). A vector of zeros (or of Inf / NaN only) keeps s = 0.
CUTE_HOST_DEVICE int scale_exp(float amax) {
  if (!(amax > 0.0f) || !(amax <= 3.402823466e38f)) return 0;
  int e = 0;
  (void)frexpf(amax, &e);   // amax = f 2^e, f in [0.5, 1)
  return 15 - e;
}

// x 2^s into hi + lo (fp16 each). Inf and NaN pass through hi (lo 0).
CUTE_DEVICE void split(float x, int s, __half& hi, __half& lo) {
  float const y = scalbnf(x, s);
  hi = __float2half_rn(y);
  lo = isfinite(y) ? __float2half_rn(y - __half2float(hi)) : __float2half_rn(0.0f);
}

// The largest finite |x|: finite values only, as unsigned bits (non-negative floats order
// as their bits do).
CUTE_DEVICE uint32_t amax_bits(float x) {
  float const a = fabsf(x);
  return a <= 3.402823466e38f ? __float_as_uint(a) : 0u;
}

// ---------------------------------------------------------------------------------------
// The split pass: operand x (batch of `rows` K-vectors of kk elements) into hi / lo rows of
// kp halves (kp: kk padded to 8, a 16-byte TMA stride) and amax[batch][rows].
// ---------------------------------------------------------------------------------------

// K-major source x[b * bs + r * ld + k]: one CTA a K-vector. Its largest |x| first (one
// read), then the split (a second read, from L2 for any row that fits there).
template <int Threads>
__global__ void __launch_bounds__(Threads) split_kmajor(const float* __restrict__ x, int64_t ld, int64_t bs,
                                                        int64_t rows, int64_t kk, int64_t kp, bool vec,
                                                        __half* __restrict__ hi, __half* __restrict__ lo,
                                                        float* __restrict__ amax) {
  __shared__ uint32_t warp_max[Threads / 32];
  int64_t const row = blockIdx.x;   // b * rows + r
  int64_t const b = row / rows, r = row - b * rows;
  const float* src = x + b * bs + r * ld;
  uint32_t m = 0;
  if (vec) {
    for (int64_t k = int64_t(threadIdx.x) * 4; k < kk; k += Threads * 4) {
      if (k + 3 < kk) {
        float4 const v = __ldg(reinterpret_cast<const float4*>(src + k));
        m = max(max(m, amax_bits(v.x)), max(amax_bits(v.y), max(amax_bits(v.z), amax_bits(v.w))));
      } else {
        for (int64_t j = k; j < kk; ++j) m = max(m, amax_bits(src[j]));
      }
    }
  } else {
    for (int64_t k = threadIdx.x; k < kk; k += Threads) m = max(m, amax_bits(src[k]));
  }
  for (int o = 16; o > 0; o /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  m = 0;
  for (int w = 0; w < Threads / 32; ++w) m = max(m, warp_max[w]);
  float const a = __uint_as_float(m);
  if (threadIdx.x == 0) amax[row] = a;
  int const s = scale_exp(a);
  __half* dhi = hi + row * kp;
  __half* dlo = lo + row * kp;
  if (vec) {
    for (int64_t k = int64_t(threadIdx.x) * 4; k < kk; k += Threads * 4) {
      if (k + 3 < kk) {
        float4 const v = __ldg(reinterpret_cast<const float4*>(src + k));
        __align__(8) __half h[4], l[4];
        split(v.x, s, h[0], l[0]);
        split(v.y, s, h[1], l[1]);
        split(v.z, s, h[2], l[2]);
        split(v.w, s, h[3], l[3]);
        *reinterpret_cast<uint2*>(dhi + k) = *reinterpret_cast<uint2*>(h);   // kp % 8 == 0: 8-byte aligned
        *reinterpret_cast<uint2*>(dlo + k) = *reinterpret_cast<uint2*>(l);
      } else {
        for (int64_t j = k; j < kk; ++j) split(src[j], s, dhi[j], dlo[j]);
      }
    }
  } else {
    for (int64_t k = threadIdx.x; k < kk; k += Threads) split(src[k], s, dhi[k], dlo[k]);
  }
}

// MN-major source x[b * bs + k * ld + r] (r contiguous): each K-vector's largest |x|, a
// thread a vector over a slice of K, combined with atomicMax on the bits (amax_u zeroed
// first).
__global__ void amax_mnmajor(const float* __restrict__ x, int64_t ld, int64_t bs, int64_t rows, int64_t kk,
                             int64_t k_slice, uint32_t* __restrict__ amax_u) {
  int64_t const b = blockIdx.z;
  int64_t const r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  int64_t const k0 = int64_t(blockIdx.y) * k_slice, k1 = min(kk, k0 + k_slice);
  const float* src = x + b * bs + r;
  uint32_t m = 0;
  for (int64_t k = k0; k < k1; ++k) m = max(m, amax_bits(src[k * ld]));
  if (m != 0) atomicMax(&amax_u[b * rows + r], m);
}

// MN-major source: the split through a 32 x 32 shared-memory tile (reads along r, writes
// along k, both coalesced), 256 threads.
__global__ void __launch_bounds__(256) split_mnmajor(const float* __restrict__ x, int64_t ld, int64_t bs,
                                                     int64_t rows, int64_t kk, int64_t kp,
                                                     const float* __restrict__ amax,
                                                     __half* __restrict__ hi, __half* __restrict__ lo) {
  __shared__ float tile[32][33];   // [k][r]
  int64_t const b = blockIdx.z;
  int64_t const r0 = int64_t(blockIdx.x) * 32, k0 = int64_t(blockIdx.y) * 32;
  int const tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (int i = ty; i < 32; i += 8) {
    int64_t const k = k0 + i, r = r0 + tx;
    tile[i][tx] = (k < kk && r < rows) ? x[b * bs + k * ld + r] : 0.0f;
  }
  __syncthreads();
  for (int i = ty; i < 32; i += 8) {
    int64_t const r = r0 + i, k = k0 + tx;
    if (r < rows && k < kk) {
      int64_t const row = b * rows + r;
      int const s = scale_exp(amax[row]);
      split(tile[tx][i], s, hi[row * kp + k], lo[row * kp + k]);
    }
  }
}

// Rows of halves padded to 16 bytes.
inline int64_t kpad(int64_t k) { return (k + 7) / 8 * 8; }

// One operand's split (host): K-major (ld between K-vectors) or MN-major (ld between
// k-lines), `batch` batches bs apart (bs 0: one operand shared by every batch, split once
// a batch). amax: batch * rows floats.
inline cudaError_t split_operand(const float* x, bool kmajor, int64_t ld, int64_t bs, int64_t rows, int64_t kk,
                                 int64_t batch, __half* hi, __half* lo, float* amax, cudaStream_t stream) {
  int64_t const kp = kpad(kk);
  int64_t const vectors = batch * rows;
  if (vectors == 0 || kk == 0) return cudaSuccess;
  if (kmajor) {
    bool const vec = ld % 4 == 0 && bs % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0;
    if (vectors > 0x7fffffffLL) return cudaErrorInvalidValue;
    split_kmajor<256><<<unsigned(vectors), 256, 0, stream>>>(x, ld, bs, rows, kk, kp, vec, hi, lo, amax);
  } else {
    uint32_t* amax_u = reinterpret_cast<uint32_t*>(amax);
    cudaError_t e = cudaMemsetAsync(amax_u, 0, size_t(vectors) * sizeof(uint32_t), stream);
    if (e != cudaSuccess) return e;
    // Enough threads to fill the GPU: K sliced so that rows / 256 x slices x batch blocks
    // are at least a few thousand.
    int64_t const row_blocks = (rows + 255) / 256;
    int64_t slices = (4096 + row_blocks * batch - 1) / (row_blocks * batch);
    slices = slices < 1 ? 1 : slices;
    int64_t const k_slice = (kk + slices - 1) / slices;
    slices = (kk + k_slice - 1) / k_slice;
    if (slices > 65535 || batch > 65535) return cudaErrorInvalidValue;
    amax_mnmajor<<<dim3(unsigned(row_blocks), unsigned(slices), unsigned(batch)), 256, 0, stream>>>(
        x, ld, bs, rows, kk, k_slice, amax_u);
    dim3 const grid(unsigned((rows + 31) / 32), unsigned((kk + 31) / 32), unsigned(batch));
    if ((kk + 31) / 32 > 65535) return cudaErrorInvalidValue;
    split_mnmajor<<<grid, 256, 0, stream>>>(x, ld, bs, rows, kk, kp, amax, hi, lo);
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------
// The mainloop
// ---------------------------------------------------------------------------------------

// Its own dispatch policy type (the kernel layer reads Schedule from it).
template <int Stages, class ClusterShape, class KernelSchedule>
struct MainloopSm90Tma3xF16 : cs_sm90::MainloopPolicy<Stages, ClusterShape, KernelSchedule> {};

// Shared memory one stage takes: four fp16 tiles and the coordinate slot.
template <int BlkM, int BlkN, int BlkK>
constexpr int stage_bytes() {
  return (BlkM + BlkN) * BlkK * 2 * 2 + 16;
}

// Promote / PromoteLargeK / PromoteMinK / PromoteMax: as in cs_3xtf32::Mainloop.
template <class DispatchPolicy_, class TileShape_, int Promote = 1, int PromoteLargeK = Promote, int PromoteMinK = 0,
          int PromoteMax = PromoteLargeK>
struct Mainloop {
  static_assert(Promote >= 1 && PromoteLargeK >= 1 && PromoteMax >= PromoteLargeK, "Promote: at least 1 k-tile");
  static_assert(DispatchPolicy_::Stages >= 2, "at least 2 stages");
  using DispatchPolicy = DispatchPolicy_;
  using TileShape = TileShape_;
  // What the kernel layer sees: fp32 operands as the problem states them (the split
  // tensors are the mainloop's own arguments), both K-major.
  using ElementA = float;
  using ElementB = float;
  using StrideA = cutlass::detail::TagToStrideA_t<cutlass::layout::RowMajor>;
  using StrideB = cutlass::detail::TagToStrideB_t<cutlass::layout::ColumnMajor>;
  using ArchTag = typename DispatchPolicy::ArchTag;
  using ClusterShape = typename DispatchPolicy::ClusterShape;
  using ElementAccumulator = float;
  static constexpr int Stages = DispatchPolicy::Stages;

  using BlkM = decltype(get<0>(TileShape{}));
  using BlkN = decltype(get<1>(TileShape{}));
  using BlkK = decltype(get<2>(TileShape{}));

  // Two consumer warpgroups split the tile's rows (cooperative).
  using TiledMma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<half_t, half_t, float, TileShape, GMMA::Major::K, GMMA::Major::K>(),
      Layout<Shape<_2, _1, _1>>{}));
  static constexpr int NumMmaThreads = size(TiledMma{});

  using AtomA = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, half_t, BlkM, BlkK>());
  using AtomB = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, half_t, BlkN, BlkK>());
  using SmemLayoutA = decltype(tile_to_shape(AtomA{}, make_shape(BlkM{}, BlkK{}, Int<Stages>{})));
  using SmemLayoutB = decltype(tile_to_shape(AtomB{}, make_shape(BlkN{}, BlkK{}, Int<Stages>{})));

  using GmemTiledCopyA = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(shape<1>(ClusterShape{})));
  using GmemTiledCopyB = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(shape<0>(ClusterShape{})));

  using MainloopPipeline = cutlass::PipelineTmaAsync<Stages>;
  using PipelineState = cutlass::PipelineState<Stages>;
  using PipelineParams = typename MainloopPipeline::Params;
  // The TMA issue (arrive with the transaction bytes) and the coordinate slot's write.
  static constexpr int NumProducerThreadEvents = 2;

  struct SharedStorage {
    struct TensorStorage : cute::aligned_struct<128, _0> {
      cute::array_aligned<half_t, cute::cosize_v<SmemLayoutA>> smem_A_hi;
      cute::array_aligned<half_t, cute::cosize_v<SmemLayoutA>> smem_A_lo;
      cute::array_aligned<half_t, cute::cosize_v<SmemLayoutB>> smem_B_hi;
      cute::array_aligned<half_t, cute::cosize_v<SmemLayoutB>> smem_B_lo;
      int4 coord[Stages];   // the stage's tile: (m, n, l) tile indices
    } tensors;
    using PipelineStorage = typename MainloopPipeline::SharedStorage;
    PipelineStorage pipeline;
  };
  using TensorStorage = typename SharedStorage::TensorStorage;
  using PipelineStorage = typename SharedStorage::PipelineStorage;

  // The split operands (K-major rows of ld halves, batches bs apart) and each K-vector's
  // largest |x| (amax_a[l * M + m], amax_b[l * N + n]).
  struct Arguments {
    half_t const* a_hi;
    half_t const* a_lo;
    int64_t lda, bsa;
    half_t const* b_hi;
    half_t const* b_lo;
    int64_t ldb, bsb;
    float const* amax_a;
    float const* amax_b;
  };

  using GStride = cute::Stride<int64_t, cute::Int<1>, int64_t>;
  using TMA_A = decltype(make_tma_copy_A_sm90(
      GmemTiledCopyA{}, make_tensor(static_cast<half_t const*>(nullptr), make_shape(int32_t(0), int32_t(0), int32_t(0)), GStride{}),
      SmemLayoutA{}(_, _, cute::Int<0>{}), TileShape{}, ClusterShape{}));
  using TMA_B = decltype(make_tma_copy_B_sm90(
      GmemTiledCopyB{}, make_tensor(static_cast<half_t const*>(nullptr), make_shape(int32_t(0), int32_t(0), int32_t(0)), GStride{}),
      SmemLayoutB{}(_, _, cute::Int<0>{}), TileShape{}, ClusterShape{}));

  static constexpr int kTileElemsA = BlkM::value * BlkK::value;
  static constexpr int kTileElemsB = BlkN::value * BlkK::value;
  static constexpr uint32_t TmaTransactionBytes = uint32_t((kTileElemsA + kTileElemsB) * 2 * sizeof(half_t));

  struct Params {
    TMA_A tma_a_hi, tma_a_lo;
    TMA_B tma_b_hi, tma_b_lo;
    uint32_t tma_transaction_bytes = TmaTransactionBytes;
    int k_extent = 0;   // the problem's K: chooses the promotion interval
    int m_extent = 0, n_extent = 0;
    float const* amax_a = nullptr;
    float const* amax_b = nullptr;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto const shape_mnkl = append<4>(problem_shape, 1);
    int const M = int(get<0>(shape_mnkl)), N = int(get<1>(shape_mnkl)), K = int(get<2>(shape_mnkl)),
              L = int(get<3>(shape_mnkl));
    auto tensor = [&](half_t const* p, int rows, int64_t ld, int64_t bs) {
      return make_tensor(p, make_layout(make_shape(int32_t(rows), int32_t(K), int32_t(L)), GStride{ld, {}, bs}));
    };
    auto tma_a = [&](half_t const* p) {
      return make_tma_copy_A_sm90(GmemTiledCopyA{}, tensor(p, M, args.lda, args.bsa), SmemLayoutA{}(_, _, cute::Int<0>{}),
                                  TileShape{}, ClusterShape{});
    };
    auto tma_b = [&](half_t const* p) {
      return make_tma_copy_B_sm90(GmemTiledCopyB{}, tensor(p, N, args.ldb, args.bsb), SmemLayoutB{}(_, _, cute::Int<0>{}),
                                  TileShape{}, ClusterShape{});
    };
    return {tma_a(args.a_hi), tma_a(args.a_lo), tma_b(args.b_hi), tma_b(args.b_lo), TmaTransactionBytes,
            int(K), int(M), int(N), args.amax_a, args.amax_b};
  }

  // The split rows are the template's own (16-byte strides by construction).
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.lda % 8 == 0 && args.ldb % 8 == 0 && args.bsa % 8 == 0 && args.bsb % 8 == 0;
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_a_hi.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_a_lo.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_b_hi.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_b_lo.get_tma_descriptor());
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    using X = Underscore;
    auto const M = get<0>(problem_shape_MNKL), N = get<1>(problem_shape_MNKL);
    auto const K = get<2>(problem_shape_MNKL), L = get<3>(problem_shape_MNKL);
    auto tiles = [K, L](auto const& tma, auto rows, auto step) {
      return local_tile(tma.get_tma_tensor(make_shape(rows, K, L)), TileShape{}, make_coord(_, _, _), step);
    };
    return cute::make_tuple(tiles(params.tma_a_hi, M, Step<_1, X, _1>{}), tiles(params.tma_a_lo, M, Step<_1, X, _1>{}),
                            tiles(params.tma_b_hi, N, Step<X, _1, _1>{}), tiles(params.tma_b_lo, N, Step<X, _1, _1>{}));
  }

  // Producer: one elected thread issues the four TMA loads of each k-tile, writes the
  // stage's tile coordinate and arrives a second time (after the write).
  template <class TensorAhi, class TensorAlo, class TensorBhi, class TensorBlo, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorAhi, TensorAlo, TensorBhi, TensorBlo> const& load_inputs,
                           BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count,
                           int /*thread_idx*/, uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    if (!cute::elect_one_sync()) return;
    Tensor sAh = make_tensor(make_smem_ptr(shared_tensors.smem_A_hi.data()), SmemLayoutA{});
    Tensor sAl = make_tensor(make_smem_ptr(shared_tensors.smem_A_lo.data()), SmemLayoutA{});
    Tensor sBh = make_tensor(make_smem_ptr(shared_tensors.smem_B_hi.data()), SmemLayoutB{});
    Tensor sBl = make_tensor(make_smem_ptr(shared_tensors.smem_B_lo.data()), SmemLayoutB{});

    auto const cluster = cs_sm90::cluster_load<ClusterShape, GmemTiledCopyA, GmemTiledCopyB>(block_rank_in_cluster);
    uint2 const cluster_id = cluster.id;
    uint16_t const mcast_a = cluster.mcast_a, mcast_b = cluster.mcast_b;
    auto ta_hi = params.tma_a_hi.get_slice(cluster_id.y);
    auto ta_lo = params.tma_a_lo.get_slice(cluster_id.y);
    auto tb_hi = params.tma_b_hi.get_slice(cluster_id.x);
    auto tb_lo = params.tma_b_lo.get_slice(cluster_id.x);

    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor gAh = get<0>(load_inputs)(_, _, m_coord, _, l_coord);
    Tensor gAl = get<1>(load_inputs)(_, _, m_coord, _, l_coord);
    Tensor gBh = get<2>(load_inputs)(_, _, n_coord, _, l_coord);
    Tensor gBl = get<3>(load_inputs)(_, _, n_coord, _, l_coord);
    Tensor tAgAh = ta_hi.partition_S(gAh);
    Tensor tAsAh = ta_hi.partition_D(sAh);
    Tensor tAgAl = ta_lo.partition_S(gAl);
    Tensor tAsAl = ta_lo.partition_D(sAl);
    Tensor tBgBh = tb_hi.partition_S(gBh);
    Tensor tBsBh = tb_hi.partition_D(sBh);
    Tensor tBgBl = tb_lo.partition_S(gBl);
    Tensor tBsBl = tb_lo.partition_D(sBl);
    int4 const coord = make_int4(int(m_coord), int(n_coord), int(l_coord), 0);

    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      auto* bar = pipeline.producer_get_barrier(smem_pipe_write);
      int const stage = smem_pipe_write.index();
      auto const k = *k_tile_iter;
      copy(params.tma_a_hi.with(*bar, mcast_a), tAgAh(_, _, _, k), tAsAh(_, _, _, stage));
      copy(params.tma_a_lo.with(*bar, mcast_a), tAgAl(_, _, _, k), tAsAl(_, _, _, stage));
      copy(params.tma_b_hi.with(*bar, mcast_b), tBgBh(_, _, _, k), tBsBh(_, _, _, stage));
      copy(params.tma_b_lo.with(*bar, mcast_b), tBgBl(_, _, _, k), tBsBl(_, _, _, stage));
      shared_tensors.coord[stage] = coord;
      cutlass::arch::ClusterBarrier::arrive(bar);   // release: the slot before the consumers' wait
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }

  CUTLASS_DEVICE void load_tail(MainloopPipeline pipeline, PipelineState smem_pipe_write) {
    if (cute::elect_one_sync()) pipeline.producer_tail(smem_pipe_write);
  }

  // Consumers: the three WGMMA terms of each k-tile into a partial, promoted into the fp32
  // accumulators every few k-tiles (as cs_3xtf32::Mainloop::mma, without the split); at
  // the end, the scale back by 2^-(sa + sb) of each element's row and column.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const& params) {
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    Tensor sAh = make_tensor(make_smem_ptr(shared_tensors.smem_A_hi.data()), SmemLayoutA{});
    Tensor sAl = make_tensor(make_smem_ptr(shared_tensors.smem_A_lo.data()), SmemLayoutA{});
    Tensor sBh = make_tensor(make_smem_ptr(shared_tensors.smem_B_hi.data()), SmemLayoutB{});
    Tensor sBl = make_tensor(make_smem_ptr(shared_tensors.smem_B_lo.data()), SmemLayoutB{});

    int const warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_idx * cutlass::NumThreadsPerWarpGroup);
    Tensor tCrAh = thread_mma.make_fragment_A(thread_mma.partition_A(sAh));   // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrAl = thread_mma.make_fragment_A(thread_mma.partition_A(sAl));
    Tensor tCrBh = thread_mma.make_fragment_B(thread_mma.partition_B(sBh));
    Tensor tCrBl = thread_mma.make_fragment_B(thread_mma.partition_B(sBl));
    constexpr int kBlocks = size<2>(decltype(tCrAh){});


    int const interval =
        cs_sm90::promote_interval(params.k_extent, Promote, PromoteLargeK, PromoteMinK, PromoteMax);
    Tensor partial = make_fragment_like(accum);
    clear(accum);
    PipelineState smem_pipe_release = smem_pipe_read;
    if (k_tile_count <= 0) return;
    int4 coord = make_int4(0, 0, 0, 0);

    int phase = 0;   // k-tiles summed into the partial so far (t % interval)
    CUTLASS_PRAGMA_NO_UNROLL
    for (int t = 0; t < k_tile_count; ++t) {
      int const s = smem_pipe_read.index();
      bool const fresh = phase == 0;
      bool const promote = phase + 1 == interval || t + 1 == k_tile_count;
      phase = promote ? 0 : phase + 1;

      cs_sm90::wait_full(pipeline, smem_pipe_read);
      if (t == 0) coord = shared_tensors.coord[s];   // the tile's coordinate
      warpgroup_fence_operand(partial);
      warpgroup_arrive();
      tiled_mma.accumulate_ = fresh ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < kBlocks; ++kb) {   // small terms first
        cute::gemm(tiled_mma, tCrAl(_, _, kb, s), tCrBh(_, _, kb, s), partial);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
        cute::gemm(tiled_mma, tCrAh(_, _, kb, s), tCrBl(_, _, kb, s), partial);
        cute::gemm(tiled_mma, tCrAh(_, _, kb, s), tCrBh(_, _, kb, s), partial);
      }
      warpgroup_commit_batch();
      ++smem_pipe_read;

      // k-tile t-1's WGMMAs are done once at most t's are in flight: its stage goes back
      // (unless t-1 was a promotion point, which released it already).
      if (!fresh) {
        warpgroup_wait<1>();
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
      }

      if (promote) {
        warpgroup_wait<0>();
        warpgroup_fence_operand(partial);
        pipeline.consumer_release(smem_pipe_release);   // stage t
        ++smem_pipe_release;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(accum); ++i) accum(i) += partial(i);
      }
    }

    // The scale back: element (m, n) of the tile by 2^-(sa(m) + sb(n)). Rows and columns
    // past the problem (a ragged tile, never stored) read the last one's.
    Tensor cC = tiled_mma.get_slice(thread_idx).partition_C(make_identity_tensor(make_shape(BlkM{}, BlkN{})));
    int64_t const m0 = int64_t(coord.x) * BlkM::value, n0 = int64_t(coord.y) * BlkN::value;
    float const* amax_a = params.amax_a + int64_t(coord.z) * params.m_extent;
    float const* amax_b = params.amax_b + int64_t(coord.z) * params.n_extent;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accum); ++i) {
      auto const c = cC(i);
      int64_t const m = cute::min(m0 + int64_t(get<0>(c)), int64_t(params.m_extent) - 1);
      int64_t const n = cute::min(n0 + int64_t(get<1>(c)), int64_t(params.n_extent) - 1);
      int const s = scale_exp(__ldg(amax_a + m)) + scale_exp(__ldg(amax_b + n));
      accum(i) = scalbnf(accum(i), -s);
    }
  }

  // mma() waits for its last WGMMAs and releases every stage itself.
  CUTLASS_DEVICE void mma_tail(MainloopPipeline, PipelineState, int) {}
};

}  // namespace cs_3xf16
