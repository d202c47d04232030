// cutesmith: the base of the templates' wrappers around a CUTLASS 3 collective epilogue
// (Hopper, sm_90a): CUTLASS's epilogue does the storing (TMA), and the wrapper's store()
// transforms the accumulators first (cs_dual::Epilogue in cutesmith_sm90_dual.cuh: the
// gate of two products; CsExpEpilogue in gemm_softmax.cu: a softmax's exponentials).

#pragma once

#include <cutlass/cutlass.h>

namespace cs_sm90 {

// CUTLASS's collective epilogue Inner with the wrapper's own arguments beside its own:
// Arguments and Params extend Inner's by one member, `extra`, which the epilogue object
// keeps (extra_) for store(). Inner sees Params as its own.
template <class Inner, class Extra>
struct EpilogueWith : Inner {
  using TensorStorage = typename Inner::TensorStorage;

  struct Arguments : Inner::Arguments {
    Extra extra;
  };
  struct Params : Inner::Params {
    Extra extra;
  };

  // Inner's parameters for the problem shape Inner sees, with `extra` beside them.
  template <class ProblemShape>
  static Params params_for(ProblemShape const& inner_problem_shape, Arguments const& args, void* workspace) {
    Params params;
    static_cast<typename Inner::Params&>(params) =
        Inner::to_underlying_arguments(inner_problem_shape, args, workspace);
    params.extra = args.extra;
    return params;
  }

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    return params_for(problem_shape, args, workspace);
  }

  CUTLASS_HOST_DEVICE
  EpilogueWith(Params const& params, TensorStorage& shared_tensors) : Inner(params, shared_tensors), extra_(params.extra) {}

 protected:
  Extra extra_;
};

}  // namespace cs_sm90
