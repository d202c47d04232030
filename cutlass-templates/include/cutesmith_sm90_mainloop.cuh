// cutesmith: what the Hopper (sm_90a) mainloop collectives of cutesmith_sm90_3xtf32.cuh and
// cutesmith_sm90_dual.cuh share: their dispatch policy, what the producer needs to know
// of its thread block cluster, its k-tile loop, and how many stages the templates give them.

#pragma once

#include <cstdint>

#include <cute/tensor.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/arch.h>
#include <cutlass/cutlass.h>

namespace cs_sm90 {

// The dispatch policy: the kernel layer picks CUTLASS's warp-specialized kernel from
// Schedule (KernelTmaWarpSpecializedCooperative, or a schedule built on it).
template <int Stages_, class ClusterShape_, class KernelSchedule>
struct MainloopPolicy {
  constexpr static int Stages = Stages_;
  using ClusterShape = ClusterShape_;
  using ArchTag = cutlass::arch::Sm90;
  using Schedule = KernelSchedule;
};

// A CTA's (m, n) position in its cluster, and the multicast masks of its TMA loads: A goes
// to the CTAs of its cluster row (same m), B to those of its cluster column (same n). A
// mask is 0 where that operand's copy is not a multicast.
struct ClusterLoad {
  uint2 id;
  uint16_t mcast_a, mcast_b;
};

template <class ClusterShape, class GmemTiledCopyA, class GmemTiledCopyB>
CUTE_DEVICE ClusterLoad cluster_load(uint32_t block_rank_in_cluster) {
  using namespace cute;
  constexpr uint32_t cluster_x = get<0>(ClusterShape{});
  ClusterLoad c{{block_rank_in_cluster % cluster_x, block_rank_in_cluster / cluster_x}, 0, 0};
  auto block_layout = Layout<ClusterShape>{};   // (m,n) -> block id
  if constexpr (cute::is_same_v<GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>) {
    for (int n = 0; n < size<1>(block_layout); ++n)
      c.mcast_a |= uint16_t(1) << block_layout(c.id.x, n, Int<0>{});
  }
  if constexpr (cute::is_same_v<GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>) {
    for (int m = 0; m < size<0>(block_layout); ++m)
      c.mcast_b |= uint16_t(1) << block_layout(m, c.id.y, Int<0>{});
  }
  return c;
}

// The producer's k-tile loop: for each k-tile, wait for a free stage and issue every
// operand's TMA load into it on that stage's barrier. Each load is called as
// load(barrier, k_tile, stage).
template <class Pipeline, class PipelineState, class KTileIterator, class... Loads>
CUTE_DEVICE void produce(Pipeline& pipeline, PipelineState& smem_pipe_write,
                         KTileIterator k_tile_iter, int k_tile_count, Loads const&... loads) {
  CUTLASS_PRAGMA_NO_UNROLL
  for (; k_tile_count > 0; --k_tile_count) {
    pipeline.producer_acquire(smem_pipe_write);
    auto* bar = pipeline.producer_get_barrier(smem_pipe_write);
    int const stage = smem_pipe_write.index();
    (loads(*bar, *k_tile_iter, stage), ...);
    ++k_tile_iter;
    ++smem_pipe_write;
  }
}

// One operand's load for produce(): its k-tile `k` from the TMA source partition into
// shared-memory stage `stage`, multicast with `mcast` (0: not a multicast).
template <class Tma, class Src, class Dst>
CUTE_DEVICE auto stage_load(Tma const& tma, uint16_t mcast, Src const& src, Dst const& dst) {
  return [&tma, mcast, &src, &dst](auto& bar, auto k, int stage) {
    using cute::_;
    copy(tma.with(bar, mcast), src(_, _, _, k), dst(_, _, _, stage));
  };
}

// The fp32 mainloops' promotion interval (cutesmith_sm90_3xtf32.cuh, cutesmith_sm90_3xf16.cuh):
// `promote` k-tiles, or from K = `min_k` on (0: never) `large_k`, twice as many for each
// further doubling of K, at most `max`.
CUTE_HOST_DEVICE int promote_interval(int k, int promote, int large_k, int min_k, int max) {
  if (min_k <= 0 || k < min_k) return promote;
  int interval = large_k;
  for (int kk = k / 2; kk >= min_k && interval < max; kk /= 2) interval *= 2;
  return interval < max ? interval : max;
}

// A consumer's wait for the stage at `state` to be full.
template <class Pipeline, class State>
CUTE_DEVICE void wait_full(Pipeline& pipeline, State const& state) {
  auto token = pipeline.consumer_try_wait(state);
  pipeline.consumer_wait(state, token);
}

// As many stages of `stage_bytes` as fit in an SM's 227 KiB of shared memory beside the
// epilogue's storage (and 2 KiB for barriers and alignment), at most 8.
template <class EpilogueStorage>
constexpr int stages_fit(int stage_bytes) {
  int const fit = (227 * 1024 - int(sizeof(EpilogueStorage)) - 2048) / stage_bytes;
  return fit > 8 ? 8 : fit;
}

}  // namespace cs_sm90
