// cutesmith: a Hopper (sm_90a) CUTLASS 3 mainloop collective for fp32 GEMMs on TF32
// tensor cores that keeps fp32 accuracy (3xTF32).
//
// The idea. TF32 keeps 10 explicit mantissa bits; WGMMA reads an fp32 register or
// shared-memory word as TF32 by ignoring its low 13 bits (truncation). Split every operand
// x into hi = trunc_tf32(x) and lo = x - hi (exact in fp32, |lo| < 2^-10 |x|). Then
//
//     a * b  =  hi(a) hi(b) + lo(a) hi(b) + hi(a) lo(b) + lo(a) lo(b)
//
// and the last term is below 2^-20 |a b|: dropping it and running the other three as TF32
// WGMMAs gives a product accurate to about fp32's level, at a third of the TF32
// tensor-core rate (still several times the fp32 FMA rate). How exactly hi and lo are
// formed (truncated or rounded) is the Split parameter below.
//
// Where the split happens. The producer warp brings each k-tile of A and B into shared
// memory by TMA, bit for bit (the TMA type is a 32-bit integer: a float TMA type would
// round to TF32 on the way). After a stage lands, the consumer warpgroups split it once:
// each thread takes a slice of the stage and writes lo into a second buffer beside the
// stage. hi needs no buffer of its own: the stage itself is hi, since WGMMA truncates it
// when reading (or a rounded hi is written back over it). Each thread fences its writes
// for the async proxy (WGMMA's reads); then either all consumers meet at a named barrier,
// or each warp arrives on the stage's "split done" mbarrier and a warpgroup waits on it
// just before its WGMMAs (SplitSync, SplitPipeline below). Each consumer issues the three
// WGMMA batches for the k-tile:
//
//     acc += lo(A) hi(B);  acc += hi(A) lo(B);  acc += hi(A) hi(B)      (small terms first)
//
// while the previous k-tile's WGMMAs may still run. The lo buffers belong to their stage:
// the producer refills a stage only after every consumer released it, which happens only
// after the WGMMAs that read its lo buffers completed, so no other synchronization is
// needed.
//
// Operands stored MN-major (A column-major, B row-major): TF32 WGMMA reads K-major shared
// memory only. The template copies such an operand K-major before the GEMM (one pass
// over it); without the copy, the stage arrives MN-major and the split writes both hi and
// lo into K-major buffers (a transpose through shared memory) that the WGMMAs read.
//
// Accumulation: see mma() (WGMMA's partial sums are promoted into FADD accumulators).
//
// The rest of the kernel (persistent tile scheduler, stream-K, cluster multicast, the
// epilogue with its visitor tree) is CUTLASS's cooperative warp-specialized kernel:
// this struct is what `GemmUniversal` calls a CollectiveMainloop.

#pragma once

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

// The promotion interval by K of the templates built on this mainloop (override with
// -DNAME=VALUE or a #define before the include): from K = CS_F32_PROMOTE_MIN_K on (0:
// never) the partial sums CS_F32_PROMOTE_LARGE_K k-tiles between promotions, twice as many
// from twice that K, up to CS_F32_PROMOTE_MAX (2048: 4, 4096 and more: 8); below, every
// k-tile. H100, bench/fp32-tiles-h100.md runs 17-18: against every k-tile, 1.7-2.8%
// faster at 4096^3 and 2048x4096x8192, at RMS errors of 0.65-0.86x cuBLAS fp32's there,
// 0.72x at K = 2048 (every 4) and 1.21-1.31x at K = 2^16 (every 8).
#ifndef CS_F32_PROMOTE_MIN_K
#define CS_F32_PROMOTE_MIN_K 2048
#endif
// Below this K the templates built on this mainloop compute with fp32 FMAs instead: a
// 3xTF32 product's error (about 2^-20, against fp32's 2^-24) dominates short dot products
// (RMS error 2.7-2.8x cuBLAS fp32's at K = 16, 1.8x at 32; bench/fp32-tiles-h100.md).
#ifndef CS_F32_MIN_K
#define CS_F32_MIN_K 32
#endif
#ifndef CS_F32_PROMOTE_LARGE_K
#define CS_F32_PROMOTE_LARGE_K 4
#endif
#ifndef CS_F32_PROMOTE_MAX
#define CS_F32_PROMOTE_MAX 8
#endif

namespace cs_3xtf32 {
using namespace cute;

// The dispatch policy (Schedule: KernelTmaWarpSpecializedCooperative).
template <int Stages, class ClusterShape, class KernelSchedule>
using MainloopSm90Tma3xTF32 = cs_sm90::MainloopPolicy<Stages, ClusterShape, KernelSchedule>;

// The split x = hi + lo (+ what is dropped). WGMMA reads a word as TF32 by ignoring its
// low 13 mantissa bits. Split (a template parameter) chooses how exact the parts are:
//   0 (truncation): hi = x truncated (the stage itself: WGMMA truncates it when reading),
//     lo = x - hi, which WGMMA truncates in turn: |lo| < 2^-10 |x|, and what is dropped
//     (lo's low bits and lo*lo) is up to about 2^-20 |x|, always toward zero;
//   1 (lo rounded, the default): hi as above, lo = x - hi rounded to TF32 (nearest):
//     the dropped part of lo is at most 2^-21 |x| and unbiased, still no extra write;
//   2 (both rounded): hi = x rounded to TF32, written back over the stage, lo = x - hi
//     rounded: |lo| <= 2^-11 |x|, dropped part at most 2^-22 |x| (+ lo*lo below 2^-22).
// Rounding is two integer operations on the bits (adding half of the dropped unit to the
// magnitude, then clearing): the cvt.rna.tf32 conversion runs at a fraction of the ALU
// rate and made the split the bottleneck. Inf and NaN pass through hi (lo 0).
struct SplitF32 {
  float hi, lo;
};
template <bool Round>
CUTE_DEVICE float tf32_bits(float x) {
  uint32_t const u = __float_as_uint(x);
  return __uint_as_float((Round ? u + 0x1000u : u) & 0xffffe000u);
}
template <int Split>
CUTE_DEVICE SplitF32 tf32_split(float x) {
  float const rounded = tf32_bits<Split == 2>(x);
  // Rounding up past the largest float gives Inf: keep the truncation then.
  float const hi = isinf(rounded) ? tf32_bits<false>(x) : rounded;
  float const lo = tf32_bits<Split >= 1>(x - hi);   // x - hi is exact
  bool const finite = isfinite(x);
  return {finite ? hi : x, finite ? lo : 0.0f};
}

// CUTLASS's TMA pipeline, with one more mbarrier per stage: "split done", which every
// consumer warp arrives on once its share of the stage's split is written (and fenced for
// WGMMA's reads), and which every consumer waits on before its WGMMAs read the stage.
// Unlike a named barrier (arrive and wait at one point), the arrival and the wait are
// apart: a warpgroup arrives right after splitting stage t+1 and waits only when it is about
// to issue t+1's WGMMAs, after draining and promoting t, so the two consumer warpgroups are
// not held in step and one's WGMMAs can run while the other promotes. The barriers are
// initialized with the pipeline's own (by warp 0, before the kernel's cluster-wide sync).
template <int Stages_, int NumConsumers>
struct SplitPipeline : cutlass::PipelineTmaAsync<Stages_> {
  using Base = cutlass::PipelineTmaAsync<Stages_>;
  struct SharedStorage : Base::SharedStorage {
    uint64_t split_barrier_[Stages_];
  };
  uint64_t* split_barrier_ptr_;

  template <class ClusterShape>
  CUTLASS_DEVICE SplitPipeline(SharedStorage& storage, typename Base::Params params, ClusterShape cluster_shape)
      : Base(storage, params, cluster_shape), split_barrier_ptr_(&storage.split_barrier_[0]) {
    int const warp_idx = cutlass::canonical_warp_idx_sync();
    bool const lane_predicate = cute::elect_one_sync();
    if (warp_idx == 0 && lane_predicate) {
      CUTLASS_PRAGMA_UNROLL
      for (int s = 0; s < Stages_; ++s)
        cutlass::arch::ClusterBarrier::init(&split_barrier_ptr_[s], NumConsumers / cutlass::NumThreadsPerWarp);
    }
    cutlass::arch::fence_barrier_init();
  }
  // This warp's share of the stage is split: every lane has fenced its writes for the async
  // proxy; the warp converges (which orders its lanes' writes before what follows) and one
  // lane arrives, with release semantics, for the warp.
  CUTLASS_DEVICE void split_arrive(int stage) const {
    __syncwarp();
    if (cute::elect_one_sync()) cutlass::arch::ClusterBarrier::arrive(&split_barrier_ptr_[stage]);
  }
  // Every consumer's share of the stage read at `state` is split.
  template <class State>
  CUTLASS_DEVICE void split_wait(State const& state) const {
    cutlass::arch::ClusterBarrier::wait(&split_barrier_ptr_[state.index()], state.phase());
  }
};

// Shared memory one stage of Mainloop takes (what a template needs for its stage count
// before instantiating it): each operand's TMA stage, lo beside it with 3 terms, and hi
// too for an MN-major operand (the split transposes it), all fp32.
template <int BlkM, int BlkN, int BlkK, bool AKMajor, bool BKMajor, int Terms = 3>
constexpr int stage_bytes() {
  constexpr int lo = Terms == 3 ? 1 : 0;
  return (BlkM * (1 + lo + (AKMajor ? 0 : 1)) + BlkN * (1 + lo + (BKMajor ? 0 : 1))) * BlkK * 4;
}

// Terms: 3 is 3xTF32; 1 keeps hi(A) hi(B) only (plain TF32: fp32 workloads must reject it
// as a precision downgrade; it exists for that check and for timing the split's cost).
// SplitSync: how the consumers wait for each other's share of a stage's split. 1: the
// stage's "split done" mbarrier (SplitPipeline), arrived after splitting and waited just
// before the WGMMAs, so the two warpgroups run out of step; 0: a named barrier right after
// splitting, which holds them in step. Measured on the H100 at 4096^3 (bench/fp32-tiles-h100.md):
// 1 is 5% faster with 128x192 tiles (3 stages), 0 is 1-2% faster with 128x128 ones (4 stages).
// PromoteLargeK / PromoteMinK / PromoteMax: where the problem's K is at least PromoteMinK
// (0: never), the partial is promoted every PromoteLargeK k-tiles instead of every Promote,
// and twice as rarely for each further doubling of K, up to every PromoteMax. The
// truncation drift of a partial grows with the k-steps it sums, while the error of an fp32
// dot product (cuBLAS's, which fp32 workloads are held to) grows with K: a longer partial
// is within that bound only at large K (see mma()).
template <class DispatchPolicy_, class TileShape_, class StrideA_, class StrideB_, int Terms = 3,
          int Promote = 1, int Split = 1, int SplitSync = 1, int PromoteLargeK = Promote,
          int PromoteMinK = 0, int PromoteMax = PromoteLargeK>
struct Mainloop {
  static_assert(SplitSync == 0 || SplitSync == 1, "SplitSync: 0 named barrier, 1 mbarrier per stage");
  static_assert(Split >= 0 && Split <= 2, "Split: 0 truncation, 1 lo rounded, 2 hi and lo rounded");
  static_assert(Terms == 1 || Terms == 3, "Terms: 3 (3xTF32) or 1 (plain TF32)");
  static_assert(Promote >= 1 && PromoteLargeK >= 1 && PromoteMax >= PromoteLargeK, "Promote: at least 1 k-tile");
  static_assert(PromoteMinK >= 0, "PromoteMinK: 0 (off) or the smallest K of the longer interval");
  static_assert(DispatchPolicy_::Stages >= 2, "at least 2 stages");
  using DispatchPolicy = DispatchPolicy_;
  using TileShape = TileShape_;
  using ElementA = float;
  using ElementB = float;
  using StrideA = StrideA_;
  using StrideB = StrideB_;
  using ArchTag = typename DispatchPolicy::ArchTag;
  using ClusterShape = typename DispatchPolicy::ClusterShape;
  using ElementAccumulator = float;
  static constexpr int Stages = DispatchPolicy::Stages;

  static constexpr bool AKMajor = cutlass::gemm::detail::is_k_major<StrideA>();
  static constexpr bool BKMajor = cutlass::gemm::detail::is_k_major<StrideB>();

  using BlkM = decltype(get<0>(TileShape{}));
  using BlkN = decltype(get<1>(TileShape{}));
  using BlkK = decltype(get<2>(TileShape{}));

  // Two consumer warpgroups split the tile's rows (cooperative).
  using TiledMma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<tfloat32_t, tfloat32_t, float, TileShape, GMMA::Major::K, GMMA::Major::K>(),
      Layout<Shape<_2, _1, _1>>{}));
  static constexpr int NumMmaThreads = size(TiledMma{});

  // Shared memory: the TMA stages (as stored: K- or MN-major), and per stage the K-major
  // buffers the WGMMAs read besides them (lo; and hi too for an MN-major operand).
  using GmmaMajorA = cute::conditional_t<AKMajor, cute::integral_constant<GMMA::Major, GMMA::Major::K>,
                                         cute::integral_constant<GMMA::Major, GMMA::Major::MN>>;
  using GmmaMajorB = cute::conditional_t<BKMajor, cute::integral_constant<GMMA::Major, GMMA::Major::K>,
                                         cute::integral_constant<GMMA::Major, GMMA::Major::MN>>;
  using LoadAtomA = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GmmaMajorA::value, float, BlkM, BlkK>());
  using LoadAtomB = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GmmaMajorB::value, float, BlkN, BlkK>());
  using MmaAtomA = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, tfloat32_t, BlkM, BlkK>());
  using MmaAtomB = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, tfloat32_t, BlkN, BlkK>());

  using SmemLayoutLoadA = decltype(tile_to_shape(LoadAtomA{}, make_shape(BlkM{}, BlkK{}, Int<Stages>{}),
      cute::conditional_t<AKMajor, Step<_1, _2, _3>, Step<_2, _1, _3>>{}));
  using SmemLayoutLoadB = decltype(tile_to_shape(LoadAtomB{}, make_shape(BlkN{}, BlkK{}, Int<Stages>{}),
      cute::conditional_t<BKMajor, Step<_1, _2, _3>, Step<_2, _1, _3>>{}));
  using SmemLayoutMmaA = decltype(tile_to_shape(MmaAtomA{}, make_shape(BlkM{}, BlkK{}, Int<Stages>{})));
  using SmemLayoutMmaB = decltype(tile_to_shape(MmaAtomB{}, make_shape(BlkN{}, BlkK{}, Int<Stages>{})));

  static constexpr int kTileElemsA = BlkM::value * BlkK::value;
  static constexpr int kTileElemsB = BlkN::value * BlkK::value;
  // Buffers beside each stage: lo (with 3 terms) and, for an MN-major operand, hi.
  static constexpr int kExtraA = (Terms == 3 ? 1 : 0) + (AKMajor ? 0 : 1);
  static constexpr int kExtraB = (Terms == 3 ? 1 : 0) + (BKMajor ? 0 : 1);

  using GmemTiledCopyA = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(shape<1>(ClusterShape{})));
  using GmemTiledCopyB = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(shape<0>(ClusterShape{})));

  // The split mbarriers exist only where SplitSync uses them.
  using MainloopPipeline = cute::conditional_t<SplitSync == 1, SplitPipeline<Stages, NumMmaThreads>,
                                               cutlass::PipelineTmaAsync<Stages>>;
  using PipelineState = cutlass::PipelineState<Stages>;
  using PipelineParams = typename MainloopPipeline::Params;
  static constexpr int NumProducerThreadEvents = 1;

  struct SharedStorage {
    struct TensorStorage : cute::aligned_struct<128, _0> {
      cute::array_aligned<uint32_t, cute::cosize_v<SmemLayoutLoadA>> smem_A;
      cute::array_aligned<uint32_t, cute::cosize_v<SmemLayoutLoadB>> smem_B;
      // An unused split buffer keeps a 1 KiB placeholder, so that the buffers after it stay
      // aligned to the swizzle pattern's 1 KiB repeat (WGMMA swizzles by address).
      cute::array_aligned<uint32_t, kExtraA * cute::cosize_v<SmemLayoutMmaA> + (kExtraA == 0 ? 256 : 0)> smem_A_split;
      cute::array_aligned<uint32_t, kExtraB * cute::cosize_v<SmemLayoutMmaB> + (kExtraB == 0 ? 256 : 0)> smem_B_split;
    } tensors;
    using PipelineStorage = typename MainloopPipeline::SharedStorage;
    PipelineStorage pipeline;
  };
  using TensorStorage = typename SharedStorage::TensorStorage;
  using PipelineStorage = typename SharedStorage::PipelineStorage;

  struct Arguments {
    float const* ptr_A;
    StrideA dA;
    float const* ptr_B;
    StrideB dB;
  };

  // The TMA copies move 32-bit words: no conversion on the way.
  using TMA_A = decltype(make_tma_copy_A_sm90(
      GmemTiledCopyA{},
      make_tensor(static_cast<uint32_t const*>(nullptr), repeat_like(StrideA{}, int32_t(0)), StrideA{}),
      SmemLayoutLoadA{}(_, _, cute::Int<0>{}), TileShape{}, ClusterShape{}));
  using TMA_B = decltype(make_tma_copy_B_sm90(
      GmemTiledCopyB{},
      make_tensor(static_cast<uint32_t const*>(nullptr), repeat_like(StrideB{}, int32_t(0)), StrideB{}),
      SmemLayoutLoadB{}(_, _, cute::Int<0>{}), TileShape{}, ClusterShape{}));

  static constexpr uint32_t TmaTransactionBytes = uint32_t((kTileElemsA + kTileElemsB) * sizeof(float));

  struct Params {
    TMA_A tma_load_a;
    TMA_B tma_load_b;
    uint32_t tma_transaction_bytes = TmaTransactionBytes;
    int k_extent = 0;   // the problem's K: chooses the promotion interval
  };

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto [M, N, K, L] = append<4>(problem_shape, 1);
    auto ptr_A = reinterpret_cast<uint32_t const*>(args.ptr_A);
    auto ptr_B = reinterpret_cast<uint32_t const*>(args.ptr_B);
    Tensor tensor_a = make_tensor(ptr_A, make_layout(make_shape(M, K, L), args.dA));
    Tensor tensor_b = make_tensor(ptr_B, make_layout(make_shape(N, K, L), args.dB));
    TMA_A tma_a = make_tma_copy_A_sm90(GmemTiledCopyA{}, tensor_a, SmemLayoutLoadA{}(_, _, cute::Int<0>{}),
                                       TileShape{}, ClusterShape{});
    TMA_B tma_b = make_tma_copy_B_sm90(GmemTiledCopyB{}, tensor_b, SmemLayoutLoadB{}(_, _, cute::Int<0>{}),
                                       TileShape{}, ClusterShape{});
    return {tma_a, tma_b, TmaTransactionBytes, int(K)};
  }

  // TMA needs 16-byte strides (4 floats), not whole 16-byte rows: a ragged K or M / N
  // extent is read with the out-of-bounds part zero-filled.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    auto ok = [](auto const& stride) {
      return cute::all_of(cute::flatten(stride),
                          [](auto st) { return cute::is_static<decltype(st)>::value || st % 4 == 0; });
    };
    return ok(args.dA) && ok(args.dB);
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_load_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b.get_tma_descriptor());
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    using X = Underscore;
    auto [M, N, K, L] = problem_shape_MNKL;
    Tensor mA_mkl = params.tma_load_a.get_tma_tensor(make_shape(M, K, L));
    Tensor mB_nkl = params.tma_load_b.get_tma_tensor(make_shape(N, K, L));
    Tensor gA_mkl = local_tile(mA_mkl, TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{});   // (BLK_M,BLK_K,m,k,l)
    Tensor gB_nkl = local_tile(mB_nkl, TileShape{}, make_coord(_, _, _), Step<X, _1, _1>{});   // (BLK_N,BLK_K,n,k,l)
    return cute::make_tuple(gA_mkl, gB_nkl);
  }

  // Producer: one elected thread issues the TMA loads of each k-tile into the ring.
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int /*thread_idx*/,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    if (!cute::elect_one_sync()) return;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutLoadA{});
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutLoadB{});

    // Multicast: A goes to the CTAs of this cluster row, B to those of this cluster column.
    auto const cluster = cs_sm90::cluster_load<ClusterShape, GmemTiledCopyA, GmemTiledCopyB>(block_rank_in_cluster);
    uint2 const cluster_id = cluster.id;
    uint16_t const mcast_a = cluster.mcast_a, mcast_b = cluster.mcast_b;
    auto block_tma_a = params.tma_load_a.get_slice(cluster_id.y);
    auto block_tma_b = params.tma_load_b.get_slice(cluster_id.x);

    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor gA = get<0>(load_inputs)(_, _, m_coord, _, l_coord);   // (BLK_M,BLK_K,k)
    Tensor gB = get<1>(load_inputs)(_, _, n_coord, _, l_coord);   // (BLK_N,BLK_K,k)
    Tensor tAgA = block_tma_a.partition_S(gA);
    Tensor tAsA = block_tma_a.partition_D(sA);
    Tensor tBgB = block_tma_b.partition_S(gB);
    Tensor tBsB = block_tma_b.partition_D(sB);

    cs_sm90::produce(pipeline, smem_pipe_write, k_tile_iter, k_tile_count,
        cs_sm90::stage_load(params.tma_load_a, mcast_a, tAgA, tAsA),
        cs_sm90::stage_load(params.tma_load_b, mcast_b, tBgB, tBsB));
  }

  CUTLASS_DEVICE void load_tail(MainloopPipeline pipeline, PipelineState smem_pipe_write) {
    if (cute::elect_one_sync()) pipeline.producer_tail(smem_pipe_write);
  }

  // The split of one operand's stage, by all consumer threads. K-major: the stage is hi;
  // lo goes to a buffer of the same layout, element i for element i (16-byte vectors).
  // MN-major: hi and lo both go to K-major buffers, element (mn, k) for (mn, k).
  template <bool KMajor, class LoadLayout, class MmaLayout>
  CUTLASS_DEVICE static void split_stage(uint32_t* load_base, uint32_t* split_base, int stage, int thread_idx) {
    constexpr int kElems = size<0>(LoadLayout{}) * size<1>(LoadLayout{});
    if constexpr (KMajor) {
      if constexpr (Terms == 3) {
        // Stage s occupies [s * kElems, (s + 1) * kElems) of both (the same layout); a
        // rounded hi goes back over the stage.
        float4* src = reinterpret_cast<float4*>(load_base + stage * kElems);
        float4* lo = reinterpret_cast<float4*>(split_base + stage * kElems);
        CUTLASS_PRAGMA_UNROLL
        for (int i = thread_idx; i < kElems / 4; i += NumMmaThreads) {
          float4 const x = src[i];
          SplitF32 const a = tf32_split<Split>(x.x), b = tf32_split<Split>(x.y),
                         c = tf32_split<Split>(x.z), d = tf32_split<Split>(x.w);
          if constexpr (Split == 2) src[i] = make_float4(a.hi, b.hi, c.hi, d.hi);
          lo[i] = make_float4(a.lo, b.lo, c.lo, d.lo);
        }
      }
    } else {
      Tensor s_in = make_tensor(make_smem_ptr(reinterpret_cast<float const*>(load_base)), LoadLayout{});
      Tensor s_hi = make_tensor(make_smem_ptr(reinterpret_cast<float*>(split_base)), MmaLayout{});
      constexpr int kLoOffset = cute::cosize_v<MmaLayout>;
      Tensor s_lo = make_tensor(make_smem_ptr(reinterpret_cast<float*>(split_base) + kLoOffset), MmaLayout{});
      constexpr int kMN = size<0>(LoadLayout{});
      CUTLASS_PRAGMA_UNROLL
      for (int i = thread_idx; i < kElems; i += NumMmaThreads) {
        int const mn = i % kMN, k = i / kMN;   // consecutive threads: consecutive mn (contiguous in)
        float const x = s_in(mn, k, stage);
        if constexpr (Terms == 3) {
          SplitF32 const v = tf32_split<Split>(x);
          s_hi(mn, k, stage) = v.hi;
          s_lo(mn, k, stage) = v.lo;
        } else {
          s_hi(mn, k, stage) = x;
        }
      }
    }
  }

  // Consumers: split each stage, then the WGMMAs of the terms into a short-lived
  // accumulator, promoted into the fp32 one every Promote k-tiles.
  //
  // Why promote: WGMMA adds each k-step's products into its accumulator with truncation
  // (round toward zero), so a long sum drifts toward zero by about one fp32 ulp of its
  // running value per k-step: 3 x K/8 steps make a relative bias near 1e-4 at K = 4096,
  // far beyond fp32's rounding. Here WGMMA only sums Promote k-tiles from zero (a small
  // partial, whose drift is small and of random sign from one partial to the next), and
  // the partials are added into the fp32 accumulators with FADD, which rounds to nearest.
  // The interval is Promote k-tiles, or PromoteLargeK and more where K >= PromoteMinK.
  //
  // Order per k-tile t: issue the WGMMAs of t; once at most those are in flight, the
  // previous k-tile's are done and its stage goes back to the producer; meanwhile split
  // stage t+1 (its lo buffers); at a promotion point wait for t's WGMMAs, release t and
  // promote. Stages go back one k-tile behind whatever Promote is, so the producer keeps
  // Stages - 2 k-tiles of lead, and only a promotion drains the tensor pipe.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const& params) {
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    uint32_t* const a_load = shared_tensors.smem_A.data();
    uint32_t* const b_load = shared_tensors.smem_B.data();
    uint32_t* const a_split = shared_tensors.smem_A_split.data();
    uint32_t* const b_split = shared_tensors.smem_B_split.data();
    constexpr int kLoOffsetA = AKMajor ? 0 : cute::cosize_v<SmemLayoutMmaA>;
    constexpr int kLoOffsetB = BKMajor ? 0 : cute::cosize_v<SmemLayoutMmaB>;
    constexpr bool kSplits = Terms == 3 || !AKMajor || !BKMajor;

    // What the WGMMAs read: hi (the stage itself when K-major) and lo.
    auto as_tf32 = [](uint32_t* p) { return make_smem_ptr(reinterpret_cast<tfloat32_t*>(p)); };
    Tensor sA_hi = make_tensor(as_tf32(AKMajor ? a_load : a_split), SmemLayoutMmaA{});
    Tensor sB_hi = make_tensor(as_tf32(BKMajor ? b_load : b_split), SmemLayoutMmaB{});
    Tensor sA_lo = make_tensor(as_tf32(a_split + kLoOffsetA), SmemLayoutMmaA{});
    Tensor sB_lo = make_tensor(as_tf32(b_split + kLoOffsetB), SmemLayoutMmaB{});

    int const warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_idx * cutlass::NumThreadsPerWarpGroup);
    Tensor tCrA_hi = thread_mma.make_fragment_A(thread_mma.partition_A(sA_hi));   // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB_hi = thread_mma.make_fragment_B(thread_mma.partition_B(sB_hi));
    Tensor tCrA_lo = thread_mma.make_fragment_A(thread_mma.partition_A(sA_lo));
    Tensor tCrB_lo = thread_mma.make_fragment_B(thread_mma.partition_B(sB_lo));
    constexpr int kBlocks = size<2>(decltype(tCrA_hi){});

    auto split = [&](int s) {
      if constexpr (Terms == 3 || !AKMajor)
        split_stage<AKMajor, SmemLayoutLoadA, SmemLayoutMmaA>(a_load, a_split, s, thread_idx);
      if constexpr (Terms == 3 || !BKMajor)
        split_stage<BKMajor, SmemLayoutLoadB, SmemLayoutMmaB>(b_load, b_split, s, thread_idx);
      if constexpr (kSplits) {
        cutlass::arch::fence_view_async_shared();   // generic-proxy writes -> WGMMA reads
        if constexpr (SplitSync == 1) {
          pipeline.split_arrive(s);
        } else {
          cutlass::arch::NamedBarrier::sync(NumMmaThreads, cutlass::arch::ReservedNamedBarriers::TransformBarrier);
        }
      }
    };
    auto split_wait = [&](PipelineState st) {
      if constexpr (kSplits && SplitSync == 1) pipeline.split_wait(st);
    };

    int const interval =
        cs_sm90::promote_interval(params.k_extent, Promote, PromoteLargeK, PromoteMinK, PromoteMax);
    Tensor partial = make_fragment_like(accum);
    clear(accum);
    PipelineState smem_pipe_release = smem_pipe_read;
    if (k_tile_count <= 0) return;
    cs_sm90::wait_full(pipeline, smem_pipe_read);
    split(smem_pipe_read.index());

    int phase = 0;   // k-tiles summed into the partial so far (t % interval)
    CUTLASS_PRAGMA_NO_UNROLL
    for (int t = 0; t < k_tile_count; ++t) {
      int const s = smem_pipe_read.index();
      bool const fresh = phase == 0;
      bool const promote = phase + 1 == interval || t + 1 == k_tile_count;
      phase = promote ? 0 : phase + 1;

      split_wait(smem_pipe_read);   // every consumer's share of stage t
      warpgroup_fence_operand(partial);
      warpgroup_arrive();
      tiled_mma.accumulate_ = fresh ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < kBlocks; ++kb) {   // small terms first
        if constexpr (Terms == 3) {
          cute::gemm(tiled_mma, tCrA_lo(_, _, kb, s), tCrB_hi(_, _, kb, s), partial);
          tiled_mma.accumulate_ = GMMA::ScaleOut::One;
          cute::gemm(tiled_mma, tCrA_hi(_, _, kb, s), tCrB_lo(_, _, kb, s), partial);
        }
        cute::gemm(tiled_mma, tCrA_hi(_, _, kb, s), tCrB_hi(_, _, kb, s), partial);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
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

      // While those run: the next stage lands and is split.
      if (t + 1 < k_tile_count) {
        cs_sm90::wait_full(pipeline, smem_pipe_read);
        split(smem_pipe_read.index());
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
  }

  // mma() waits for its last WGMMAs and releases every stage itself.
  CUTLASS_DEVICE void mma_tail(MainloopPipeline, PipelineState, int) {}
};

}  // namespace cs_3xtf32
