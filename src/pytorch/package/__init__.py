"""One cutesmith kernel as a PyTorch custom operator (written by `cutesmith export --torch`).

    import torch, PACKAGE
    PACKAGE.load()                       # compiles once (torch.utils.cpp_extension), registers the op
    d = PACKAGE.run(a, b, ...)           # = torch.ops.<namespace>.run([a, b, ...])

The inputs, in order, are listed in INPUTS; WORKLOAD holds the workload spec this kernel was
validated on (shapes, dtypes, layouts, epilogue chain, tolerance). `reference(...)` is the
same computation in PyTorch, `make_inputs(shape)` random inputs of the right layouts.
"""

import json
import os

import torch

from . import _build, _reference

_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "workload.json"), encoding="utf-8") as _f:
    WORKLOAD = json.load(_f)

NAMESPACE = WORKLOAD["namespace"]
INPUTS = list(WORKLOAD["inputs"])
_loaded = False


def load(cutlass_dir=None, verbose=False, build_directory=None):
    """Builds the extension (first call; later calls and processes reuse the build) and
    registers torch.ops.<NAMESPACE>.run. The CUTLASS headers: `cutlass_dir`, else
    $CUTLASS_DIR, else the directory recorded at export, else the nvidia-cutlass pip
    package."""
    global _loaded
    if _loaded:
        return
    _build.build(WORKLOAD, _HERE, cutlass_dir=cutlass_dir, verbose=verbose,
                 build_directory=build_directory)
    _register_fake()
    _loaded = True


def _register_fake():
    def fake(inputs):
        shape, dtype = _reference.output_shape(WORKLOAD, inputs)
        return inputs[0].new_empty(shape, dtype=dtype)

    try:
        torch.library.register_fake(f"{NAMESPACE}::run")(fake)
    except RuntimeError:
        pass  # already registered in this process


def run(*inputs):
    """The kernel on `inputs` (see INPUTS), on PyTorch's current CUDA stream."""
    load()
    return getattr(torch.ops, NAMESPACE).run(list(inputs))


def reference(*inputs, exact=False):
    """The workload computed by PyTorch ops: in the inputs' dtypes (what the kernel
    replaces), or with exact=True in float64 (what the kernel is checked against)."""
    return _reference.reference(WORKLOAD, list(inputs), exact=exact)


def make_inputs(shape=None, device="cuda", seed=0):
    """Random inputs for `shape` (a dict with m, n, k, batch; default the headline shape)
    in the layouts and dtypes the kernel takes, uniform in (-1, 1)."""
    return _reference.make_inputs(WORKLOAD, shape or WORKLOAD["shapes"][0], device, seed)
