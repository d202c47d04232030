// cutesmith: a Hopper (sm_90a) CUTLASS 3 mainloop collective and epilogue wrapper for two
// GEMMs that share A and meet elementwise: D = combine(A * B, A * B2), e.g. SwiGLU
// silu(x W1^T) * (x W3^T).
//
// Each CTA computes one output tile of both products at once. Each stage of the ring holds
// one tile of A and the tiles of B and B2 side by side, as one operand of 2 x BLK_N rows
// (B's rows first, then B2's): the producer brings them with three TMA loads on one
// barrier (B and B2 multicast across the cluster's CTAs along M, as a plain GEMM's B), and
// the consumer warpgroups run one WGMMA per k-block over the whole 2 x BLK_N (64 x 256 per
// warpgroup for 128-column output tiles, as a plain 128x256 GEMM). The accumulator's first
// half (columns < BLK_N) is A * B, the second A * B2.
//
// To CUTLASS's kernel layer the collective is a GEMM of N' = 2 N columns with tiles
// (BLK_M, 2 BLK_N): its tile scheduler, its stream-K / split-K fixup (which adds partial
// accumulators across CTAs) and its accumulators all see the wide tile, and work-tile n
// is output tile n of D. The combine runs only once the whole K sum is in the registers:
// in the epilogue wrapper (Epilogue below), which splits the wide accumulator into its
// halves, forms combine(first, second) on the output tile's fragment and hands that to
// CUTLASS's own epilogue (TMA store) with D's real shape. So the persistent data-parallel
// scheduler and the stream-K scheduler both work. (This needs the whole wide tile summed
// into the registers before store(): stream-K's separate reduction, where each epilogue
// subtile is reduced on its own, would hand store() one half without the other; CUTLASS
// 4.2 keeps that mode disabled.)
//
// Against two GEMMs and a combining pass, this reads A once instead of twice, never writes
// or reads the first product, and computes per tile exactly what a plain GEMM with a tile
// twice as wide computes: the same shared memory per stage and the same registers.

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

#include "cutesmith_sm90_epilogue.cuh"
#include "cutesmith_sm90_mainloop.cuh"

namespace cs_dual {
using namespace cute;

// The dispatch policy (Schedule: KernelTmaWarpSpecializedCooperative).
template <int Stages, class ClusterShape, class KernelSchedule>
using MainloopSm90TmaDual = cs_sm90::MainloopPolicy<Stages, ClusterShape, KernelSchedule>;

// A problem shape (M, N', K, L) as the kernel sees it -> D's (M, N, K, L), N = N' / 2.
template <class ProblemShape>
CUTE_HOST_DEVICE auto out_problem(ProblemShape const& problem_shape) {
  auto mnkl = append<4>(problem_shape, 1);
  return make_shape(get<0>(mnkl), get<1>(mnkl) / 2, get<2>(mnkl), get<3>(mnkl));
}

// OutTileShape: D's tile (BLK_M, BLK_N, BLK_K); the kernel is given TileShape, twice as wide.
template <class DispatchPolicy_, class OutTileShape_, class Element_, class StrideA_, class StrideB_>
struct Mainloop {
  using DispatchPolicy = DispatchPolicy_;
  using OutTileShape = OutTileShape_;
  using ElementA = Element_;
  using ElementB = Element_;
  using StrideA = StrideA_;
  using StrideB = StrideB_;
  using ArchTag = typename DispatchPolicy::ArchTag;
  using ClusterShape = typename DispatchPolicy::ClusterShape;
  using ElementAccumulator = float;
  static constexpr int Stages = DispatchPolicy::Stages;
  static_assert(sizeof(Element_) == 2, "16-bit operands (bf16, f16)");

  static constexpr bool AKMajor = cutlass::gemm::detail::is_k_major<StrideA>();
  static constexpr bool BKMajor = cutlass::gemm::detail::is_k_major<StrideB>();
  static constexpr GMMA::Major MajorA = AKMajor ? GMMA::Major::K : GMMA::Major::MN;
  static constexpr GMMA::Major MajorB = BKMajor ? GMMA::Major::K : GMMA::Major::MN;

  using BlkM = decltype(get<0>(OutTileShape{}));
  using BlkN = decltype(get<1>(OutTileShape{}));
  using BlkK = decltype(get<2>(OutTileShape{}));
  static_assert(BlkM::value % 128 == 0, "cooperative: the tile's rows are split over two warpgroups");
  static_assert(2 * BlkN::value <= 256, "2 x TILE_N at most 256 (one WGMMA's N)");

  // What the kernel schedules and accumulates: B's and B2's columns side by side.
  using TileShape = Shape<BlkM, Int<2 * BlkN::value>, BlkK>;
  // Two consumer warpgroups split the tile's rows (cooperative).
  using TiledMma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<ElementA, ElementB, float, TileShape, MajorA, MajorB>(),
      Layout<Shape<_2, _1, _1>>{}));
  // The same threads over D's tile: the epilogue's view of the combined values.
  using OutTiledMma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<ElementA, ElementB, float, OutTileShape, MajorA, MajorB>(),
      Layout<Shape<_2, _1, _1>>{}));
  static constexpr int NumMmaThreads = size(TiledMma{});

  using SmemAtomA = decltype(cutlass::gemm::collective::detail::ss_smem_selector<MajorA, ElementA, BlkM, BlkK>());
  using SmemAtomB = decltype(cutlass::gemm::collective::detail::ss_smem_selector<MajorB, ElementB, BlkN, BlkK>());
  using SmemLayoutA = decltype(tile_to_shape(SmemAtomA{}, make_shape(BlkM{}, BlkK{}, Int<Stages>{}),
      cute::conditional_t<AKMajor, Step<_1, _2, _3>, Step<_2, _1, _3>>{}));
  using SmemLayoutB = decltype(tile_to_shape(SmemAtomB{}, make_shape(BlkN{}, BlkK{}, Int<Stages>{}),
      cute::conditional_t<BKMajor, Step<_1, _2, _3>, Step<_2, _1, _3>>{}));
  // Both B operands, stage by stage: rows [0, BLK_N) B, [BLK_N, 2 BLK_N) B2.
  using SmemAtomBWide = decltype(cutlass::gemm::collective::detail::ss_smem_selector<MajorB, ElementB, Int<2 * BlkN::value>, BlkK>());
  using SmemLayoutBWide = decltype(tile_to_shape(SmemAtomBWide{}, make_shape(Int<2 * BlkN::value>{}, BlkK{}, Int<Stages>{}),
      cute::conditional_t<BKMajor, Step<_1, _2, _3>, Step<_2, _1, _3>>{}));
  static_assert(cute::cosize_v<SmemLayoutBWide> == 2 * cute::cosize_v<SmemLayoutB>, "B and B2 fill the wide stage");

  using GmemTiledCopyA = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(shape<1>(ClusterShape{})));
  using GmemTiledCopyB = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(shape<0>(ClusterShape{})));

  using MainloopPipeline = cutlass::PipelineTmaAsync<Stages>;
  using PipelineState = cutlass::PipelineState<Stages>;
  using PipelineParams = typename MainloopPipeline::Params;
  static constexpr int NumProducerThreadEvents = 1;

  struct SharedStorage {
    struct TensorStorage : cute::aligned_struct<128, _0> {
      cute::array_aligned<ElementA, cute::cosize_v<SmemLayoutA>> smem_A;
      cute::array_aligned<ElementB, cute::cosize_v<SmemLayoutBWide>> smem_B;   // B and B2
    } tensors;
    using PipelineStorage = typename MainloopPipeline::SharedStorage;
    PipelineStorage pipeline;
  };
  using TensorStorage = typename SharedStorage::TensorStorage;
  using PipelineStorage = typename SharedStorage::PipelineStorage;

  struct Arguments {
    ElementA const* ptr_A;
    StrideA dA;
    ElementB const* ptr_B;
    StrideB dB;
    ElementB const* ptr_B2;
    StrideB dB2;
  };

  using TMA_A = decltype(make_tma_copy_A_sm90(
      GmemTiledCopyA{},
      make_tensor(static_cast<ElementA const*>(nullptr), repeat_like(StrideA{}, int32_t(0)), StrideA{}),
      SmemLayoutA{}(_, _, cute::Int<0>{}), OutTileShape{}, ClusterShape{}));
  using TMA_B = decltype(make_tma_copy_B_sm90(
      GmemTiledCopyB{},
      make_tensor(static_cast<ElementB const*>(nullptr), repeat_like(StrideB{}, int32_t(0)), StrideB{}),
      SmemLayoutB{}(_, _, cute::Int<0>{}), OutTileShape{}, ClusterShape{}));

  static constexpr uint32_t TmaTransactionBytes =
      uint32_t((BlkM::value * BlkK::value + 2 * BlkN::value * BlkK::value) * sizeof(ElementA));

  struct Params {
    TMA_A tma_load_a;
    TMA_B tma_load_b;
    TMA_B tma_load_b2;
    uint32_t tma_transaction_bytes = TmaTransactionBytes;
  };

  // The shared-memory tensors of B and B2, (BLK_N, BLK_K, PIPE) each: the halves of each
  // stage's 2 x BLK_N rows (the swizzle lives in the pointer, so a slice at a whole-atom
  // row offset keeps it).
  CUTLASS_DEVICE static auto b_tensors(TensorStorage& shared_tensors) {
    Tensor sBw = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutBWide{});   // (2 BLK_N, BLK_K, PIPE)
    Tensor halves = logical_divide(sBw, Shape<BlkN>{});                                        // ((BLK_N, 2), BLK_K, PIPE)
    return cute::make_tuple(halves(make_coord(_, 0), _, _), halves(make_coord(_, 1), _, _));
  }

  // problem_shape: the kernel's (M, 2 N, K, L).
  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto [M, N, K, L] = out_problem(problem_shape);
    Tensor tensor_a = make_tensor(args.ptr_A, make_layout(make_shape(M, K, L), args.dA));
    Tensor tensor_b = make_tensor(args.ptr_B, make_layout(make_shape(N, K, L), args.dB));
    Tensor tensor_b2 = make_tensor(args.ptr_B2, make_layout(make_shape(N, K, L), args.dB2));
    TMA_A tma_a = make_tma_copy_A_sm90(GmemTiledCopyA{}, tensor_a, SmemLayoutA{}(_, _, cute::Int<0>{}),
                                       OutTileShape{}, ClusterShape{});
    TMA_B tma_b = make_tma_copy_B_sm90(GmemTiledCopyB{}, tensor_b, SmemLayoutB{}(_, _, cute::Int<0>{}),
                                       OutTileShape{}, ClusterShape{});
    TMA_B tma_b2 = make_tma_copy_B_sm90(GmemTiledCopyB{}, tensor_b2, SmemLayoutB{}(_, _, cute::Int<0>{}),
                                        OutTileShape{}, ClusterShape{});
    return {tma_a, tma_b, tma_b2, TmaTransactionBytes};
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const&) {
    auto [M, N, K, L] = out_problem(problem_shape);
    // TMA: 16-byte aligned strides, i.e. 8 16-bit elements.
    return cutlass::detail::check_alignment<8>(cute::make_shape(M, K, L), StrideA{}) &&
           cutlass::detail::check_alignment<8>(cute::make_shape(N, K, L), StrideB{});
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_load_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b2.get_tma_descriptor());
  }

  // D's tiles: the kernel's work-tile n (of 2 BLK_N columns of N') is D's tile n.
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    using X = Underscore;
    auto [M, N, K, L] = out_problem(problem_shape_MNKL);
    Tensor mA_mkl = params.tma_load_a.get_tma_tensor(make_shape(M, K, L));
    Tensor mB_nkl = params.tma_load_b.get_tma_tensor(make_shape(N, K, L));
    Tensor mB2_nkl = params.tma_load_b2.get_tma_tensor(make_shape(N, K, L));
    Tensor gA_mkl = local_tile(mA_mkl, OutTileShape{}, make_coord(_, _, _), Step<_1, X, _1>{});     // (BLK_M,BLK_K,m,k,l)
    Tensor gB_nkl = local_tile(mB_nkl, OutTileShape{}, make_coord(_, _, _), Step<X, _1, _1>{});     // (BLK_N,BLK_K,n,k,l)
    Tensor gB2_nkl = local_tile(mB2_nkl, OutTileShape{}, make_coord(_, _, _), Step<X, _1, _1>{});   // (BLK_N,BLK_K,n,k,l)
    return cute::make_tuple(gA_mkl, gB_nkl, gB2_nkl);
  }

  // Producer: one elected thread issues the three TMA loads of each k-tile into the ring.
  template <class TensorA, class TensorB, class TensorB2, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB, TensorB2> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int /*thread_idx*/,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    if (!cute::elect_one_sync()) return;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});
    auto [sB, sB2] = b_tensors(shared_tensors);

    // Multicast: A goes to the CTAs of this cluster row, B (and B2) to those of this column.
    auto const cluster = cs_sm90::cluster_load<ClusterShape, GmemTiledCopyA, GmemTiledCopyB>(block_rank_in_cluster);
    uint2 const cluster_id = cluster.id;
    uint16_t const mcast_a = cluster.mcast_a, mcast_b = cluster.mcast_b;
    auto block_tma_a = params.tma_load_a.get_slice(cluster_id.y);
    auto block_tma_b = params.tma_load_b.get_slice(cluster_id.x);
    auto block_tma_b2 = params.tma_load_b2.get_slice(cluster_id.x);

    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor gA = get<0>(load_inputs)(_, _, m_coord, _, l_coord);    // (BLK_M,BLK_K,k)
    Tensor gB = get<1>(load_inputs)(_, _, n_coord, _, l_coord);    // (BLK_N,BLK_K,k)
    Tensor gB2 = get<2>(load_inputs)(_, _, n_coord, _, l_coord);   // (BLK_N,BLK_K,k)
    Tensor tAgA = block_tma_a.partition_S(gA);
    Tensor tAsA = block_tma_a.partition_D(sA);
    Tensor tBgB = block_tma_b.partition_S(gB);
    Tensor tBsB = block_tma_b.partition_D(sB);
    Tensor tBgB2 = block_tma_b2.partition_S(gB2);
    Tensor tBsB2 = block_tma_b2.partition_D(sB2);

    cs_sm90::produce(pipeline, smem_pipe_write, k_tile_iter, k_tile_count,
        cs_sm90::stage_load(params.tma_load_a, mcast_a, tAgA, tAsA),
        cs_sm90::stage_load(params.tma_load_b, mcast_b, tBgB, tBsB),
        cs_sm90::stage_load(params.tma_load_b2, mcast_b, tBgB2, tBsB2));
  }

  CUTLASS_DEVICE void load_tail(MainloopPipeline pipeline, PipelineState smem_pipe_write) {
    if (cute::elect_one_sync()) pipeline.producer_tail(smem_pipe_write);
  }

  // Consumers: per k-tile, one WGMMA per k-block over B and B2 together, one batch; a
  // stage goes back to the producer once the next k-tile's batch is issued and this one
  // has completed (one batch in flight, as CUTLASS's own mainloop). accum: the wide
  // (partial, under stream-K) sums; the epilogue combines them.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});
    Tensor sBw = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutBWide{});
    int const warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);

    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_idx * cutlass::NumThreadsPerWarpGroup);
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));     // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sBw));    // (MMA,MMA_N,MMA_K,PIPE)
    constexpr int kBlocks = size<2>(decltype(tCrA){});
    if (k_tile_count <= 0) {
      clear(accum);
      return;
    }

    PipelineState smem_pipe_release = smem_pipe_read;
    CUTLASS_PRAGMA_NO_UNROLL
    for (int t = 0; t < k_tile_count; ++t) {
      int const s = smem_pipe_read.index();
      auto token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, token);
      warpgroup_fence_operand(accum);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < kBlocks; ++kb) {
        tiled_mma.accumulate_ = (t == 0 && kb == 0) ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
        cute::gemm(tiled_mma, tCrA(_, _, kb, s), tCrB(_, _, kb, s), accum);
      }
      warpgroup_commit_batch();
      ++smem_pipe_read;
      if (t > 0) {
        // The previous k-tile's batch has completed: its stage goes back.
        warpgroup_wait<1>();
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
      }
      warpgroup_fence_operand(accum);
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(accum);
    pipeline.consumer_release(smem_pipe_release);
  }

  // mma() waits for its last WGMMAs and releases every stage itself.
  CUTLASS_DEVICE void mma_tail(MainloopPipeline, PipelineState, int) {}
};

// The epilogue: CUTLASS's collective epilogue Inner, built for D's tile (OutTileShape),
// behind the kernel's wide view. The kernel's problem shape (M, 2 N, K, L) becomes D's
// (M, N, K, L) wherever Inner sees it, and store() first forms the combined output tile
// from the wide accumulator: out(i) = combine(first half (i), second half (i)). Combine: a
// type with `Arguments` and
//   template <class Frag> static void apply(Frag& acc, Frag const& acc2, Arguments const&)
// that overwrites acc with the combined values, elementwise.
template <class Inner, class Mainloop_, class Combine>
struct Epilogue : cs_sm90::EpilogueWith<Inner, typename Combine::Arguments> {
  using Base = cs_sm90::EpilogueWith<Inner, typename Combine::Arguments>;
  using OutTileShape = typename Mainloop_::OutTileShape;
  using OutTiledMma = typename Mainloop_::OutTiledMma;
  using TensorStorage = typename Inner::TensorStorage;
  using Arguments = typename Base::Arguments;   // CUTLASS's, and `extra`: the combine's
  using Params = typename Base::Params;
  using Base::Base;

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    return Base::params_for(out_problem(problem_shape), args, workspace);
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const& problem_shape, Arguments const& args) {
    return Inner::get_workspace_size(out_problem(problem_shape), args);
  }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const& problem_shape, Arguments const& args, void* workspace,
                                              cudaStream_t stream, cutlass::CudaHostAdapter* cuda_adapter = nullptr) {
    return Inner::initialize_workspace(out_problem(problem_shape), args, workspace, stream, cuda_adapter);
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    return Inner::can_implement(out_problem(problem_shape), args);
  }

  template <class TileShapeMNK>
  CUTLASS_HOST_DEVICE static constexpr int get_load_pipe_increment(TileShapeMNK) {
    return Inner::get_load_pipe_increment(OutTileShape{});
  }

  template <class TileShapeMNK>
  CUTLASS_HOST_DEVICE static constexpr int get_store_pipe_increment(TileShapeMNK) {
    return Inner::get_store_pipe_increment(OutTileShape{});
  }

  template <class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class TiledMma>
  CUTLASS_DEVICE auto load(typename Inner::LoadPipeline load_pipeline,
                           typename Inner::LoadPipelineState load_pipe_producer_state,
                           ProblemShapeMNKL problem_shape_mnkl, TileShapeMNK, TileCoordMNKL tile_coord_mnkl,
                           TiledMma, int thread_idx, TensorStorage& shared_tensors, int subtile_idx = -1) {
    return Inner::load(load_pipeline, load_pipe_producer_state, out_problem(problem_shape_mnkl), OutTileShape{},
                       tile_coord_mnkl, OutTiledMma{}, thread_idx, shared_tensors, subtile_idx);
  }

  template <class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class AccEngine, class AccLayout,
            class TiledMma>
  CUTLASS_DEVICE auto store(typename Inner::LoadPipeline load_pipeline,
                            typename Inner::LoadPipelineState load_pipe_consumer_state,
                            typename Inner::StorePipeline store_pipeline,
                            typename Inner::StorePipelineState store_pipe_producer_state,
                            ProblemShapeMNKL problem_shape_mnkl, TileShapeMNK, TileCoordMNKL tile_coord_mnkl,
                            cute::Tensor<AccEngine, AccLayout> accumulators, TiledMma, int thread_idx,
                            TensorStorage& shared_tensors, int subtile_idx = -1) {
    // One WGMMA atom spans the wide tile's N; its value mode holds the output tile's
    // columns first and B2's after (N/8 blocks of 2 x 2 values, blocks slowest).
    Tensor acc = partition_fragment_C(OutTiledMma{}, take<0, 2>(OutTileShape{}));   // (MMA,MMA_M,MMA_N)
    Tensor acc2 = make_fragment_like(acc);
    constexpr int kHalf = decltype(size<0>(acc))::value;
    static_assert(decltype(size<2>(acc))::value == 1, "one WGMMA atom along N");
    static_assert(decltype(size<2>(accumulators))::value == 1, "one WGMMA atom along N");
    static_assert(decltype(size<1>(accumulators))::value == decltype(size<1>(acc))::value, "the same MMA_M");
    static_assert(decltype(size<0>(accumulators))::value == 2 * kHalf, "the wide atom is twice as wide");
    CUTLASS_PRAGMA_UNROLL
    for (int m = 0; m < size<1>(acc); ++m) {
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < kHalf; ++v) {
        acc(v, m, 0) = accumulators(v, m, 0);
        acc2(v, m, 0) = accumulators(v + kHalf, m, 0);
      }
    }
    Combine::apply(acc, acc2, this->extra_);
    return Inner::store(load_pipeline, load_pipe_consumer_state, store_pipeline, store_pipe_producer_state,
                        out_problem(problem_shape_mnkl), OutTileShape{}, tile_coord_mnkl, acc, OutTiledMma{},
                        thread_idx, shared_tensors, subtile_idx);
  }
};

}  // namespace cs_dual
