// cutesmith: host-side helpers the CUTLASS 3 templates (gemm_sm90_cutlass3_ws.cu,
// gemm_glu.cu, gemm_softmax.cu) share when they build a kernel's arguments.

#pragma once

#include <cuda_runtime.h>

#include <cutlass/kernel_hardware_info.h>
#include <cutlass/gemm/kernel/tile_scheduler_params.h>

#include "cutesmith_abi.h"

namespace cs_sm90 {

// The SMs a persistent kernel is sized for: the problem's sm_count, else (0) CUTLASS
// queries the current device itself.
inline cutlass::KernelHardwareInfo hw_info(const cs_problem& p)
{
  cutlass::KernelHardwareInfo info;
  info.sm_count = p.sm_count;
  if (info.sm_count <= 0) {
    int device = 0;
    if (cudaGetDevice(&device) == cudaSuccess) info.device_id = device;
  }
  return info;
}

// The tile scheduler's options from a template's CS_SWIZZLE (max_swizzle_size) and
// CS_RASTER (0 heuristic, 1 along M, 2 along N).
template <class Args>
void scheduler_options(Args& args, int swizzle, int raster)
{
  using RasterOrderOptions = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.max_swizzle_size = swizzle;
  args.scheduler.raster_order = raster == 1 ? RasterOrderOptions::AlongM
                              : raster == 2 ? RasterOrderOptions::AlongN
                                            : RasterOrderOptions::Heuristic;
}

}  // namespace cs_sm90
