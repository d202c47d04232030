"""Builds the operator with torch.utils.cpp_extension against the CUTLASS headers."""

import os

import torch.utils.cpp_extension as cpp


def _cutlass_include(root):
    """The include directory (the one holding cute/tensor.hpp) under `root`: a CUTLASS
    checkout, its include/, or the nvidia-cutlass pip wheel's tree."""
    if not root:
        return None
    for cand in (os.path.join(root, "include"), root,
                 os.path.join(root, "cutlass_library", "source", "include"),
                 os.path.join(root, "source", "include")):
        if os.path.isfile(os.path.join(cand, "cute", "tensor.hpp")):
            return os.path.abspath(cand)
    return None


def _pip_cutlass():
    try:
        import cutlass_library  # the nvidia-cutlass wheel
    except Exception:  # noqa: BLE001
        return None
    return os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include")


def find_cutlass(workload, cutlass_dir=None):
    tried = []
    for label, root in (("the cutlass_dir argument", cutlass_dir),
                        ("$CUTLASS_DIR", os.environ.get("CUTLASS_DIR")),
                        ("the directory recorded at export", workload.get("cutlass_include")),
                        ("the nvidia-cutlass pip package", _pip_cutlass())):
        if not root:
            continue
        inc = _cutlass_include(root)
        if inc:
            return inc
        tried.append(f"{label}: {root}")
    raise RuntimeError(
        "CUTLASS headers (cute/tensor.hpp) not found; tried "
        + ("; ".join(tried) if tried else "nothing")
        + ". Pass load(cutlass_dir=...) or set CUTLASS_DIR to a CUTLASS 4.2 checkout, its "
        "include/ directory, or an installed nvidia-cutlass wheel "
        "(`pip install nvidia-cutlass==4.2.0.0`)")


def _arch_list(arch):
    # "sm_90a" -> "9.0a"
    digits = arch.replace("sm_", "")
    suffix = "a" if digits.endswith("a") else ""
    digits = digits.rstrip("a")
    return f"{digits[:-1]}.{digits[-1]}{suffix}"


def build(workload, package_dir, cutlass_dir=None, verbose=False, build_directory=None):
    csrc = os.path.join(package_dir, "csrc")
    include = find_cutlass(workload, cutlass_dir)
    includes = [csrc, include]
    util = os.path.join(os.path.dirname(include), "tools", "util", "include")
    if os.path.isdir(util):
        includes.append(util)
    sources = [os.path.join(csrc, "torch_op.cpp"), os.path.join(csrc, workload["kernel"])]
    if build_directory:
        os.makedirs(build_directory, exist_ok=True)
    cuda_flags = [
        "-O3", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo",
        # torch turns CUDA's half/bf16 operators off; CuTe needs them.
        "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT162_OPERATORS__",
    ]
    name = workload["namespace"] + "_ext"
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    # The kernel was validated for this architecture only (sm_90a: WGMMA and TMA).
    os.environ["TORCH_CUDA_ARCH_LIST"] = _arch_list(workload["arch"])
    try:
        if cpp.is_ninja_available():
            cpp.load(name=name, sources=sources, extra_include_paths=includes,
                     extra_cflags=["-O3"], extra_cuda_cflags=cuda_flags,
                     is_python_module=False, build_directory=build_directory,
                     verbose=verbose)
        else:
            _build_without_ninja(name, package_dir, sources, includes, cuda_flags,
                                 build_directory, verbose)
    finally:
        if old is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = old


def _build_without_ninja(name, package_dir, sources, includes, cuda_flags, build_directory,
                         verbose):
    """torch.utils.cpp_extension.load needs ninja; without it (an offline machine), the
    same flags through setuptools, into build_directory (default <package>/build), reused
    while it is newer than the sources."""
    import contextlib
    import io

    import torch
    from setuptools import Distribution

    out = os.path.abspath(build_directory or os.path.join(package_dir, "build"))
    ext = cpp.CUDAExtension(name, sources, include_dirs=includes,
                            extra_compile_args={"cxx": ["-O3"], "nvcc": cuda_flags})
    dist = Distribution({"name": name, "ext_modules": [ext], "script_args": [],
                         "cmdclass": {"build_ext": cpp.BuildExtension.with_options(use_ninja=False)}})
    cmd = dist.get_command_obj("build_ext")
    cmd.build_lib = out
    cmd.build_temp = os.path.join(out, "tmp")
    cmd.ensure_finalized()
    so = cmd.get_ext_fullpath(name)
    newest = max(os.path.getmtime(f) for f in sources + [os.path.join(package_dir, "csrc", "cutesmith_workload.h")])
    if not (os.path.isfile(so) and os.path.getmtime(so) >= newest):
        quiet = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
        with quiet:
            dist.run_command("build_ext")
    torch.ops.load_library(so)
    return so
