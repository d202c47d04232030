"""Checks the exported cutesmith kernel against the workload's PyTorch reference and times
both (written by `cutesmith export --torch`).

    python test_kernel.py [--cutlass DIR] [--seeds N] [--runs N] [--headline-only]
    pytest test_kernel.py

On every shape of the workload: random inputs (uniform in (-1, 1), several seeds), the
kernel through torch.ops, compared element by element with the reference computed in
float64 (the workload's tolerance: |got - want| <= atol + rtol |want|, plus the GEMM's own
rounding bound as in cutesmith's harness). On the headline shape: the kernel and the
PyTorch reference in the inputs' dtypes, timed with CUDA events (median of --runs after
warm-up, the L2 flushed between launches). Exit 0 when every shape passes.
"""

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import __PACKAGE__ as pkg  # noqa: E402

W = pkg.WORKLOAD


def _shape_text(s):
    m, n, k, b = (s.get("m", 1), s["n"], s.get("k", 0), s.get("batch", 1))
    t = f"{m}x{n}x{k}" if k else f"{m}x{n}"
    return f"{b}x({t})" if b > 1 else t


def validate(seeds=2, headline_only=False, verbose=True):
    failed = []
    shapes = W["shapes"][:1] if headline_only else W["shapes"]
    for shape in shapes:
        for seed in range(seeds):
            inputs = pkg.make_inputs(shape, seed=seed)
            got = pkg.run(*inputs)
            torch.cuda.synchronize()
            expect_shape, expect_dtype = pkg._reference.output_shape(W, inputs)
            ok_meta = tuple(got.shape) == tuple(expect_shape) and got.dtype == expect_dtype
            ok, err, bad = pkg._reference.check(W, shape, got, inputs)
            ok = ok and ok_meta
            if verbose:
                print(f"{_shape_text(shape):>24} seed {seed}: {'ok' if ok else 'WRONG'}  "
                      f"max |err| {err:.3g}" + ("" if ok else f", {bad} elements out of tolerance")
                      + ("" if ok_meta else f", output {tuple(got.shape)} {got.dtype}, want "
                         f"{tuple(expect_shape)} {expect_dtype}"))
            if not ok:
                failed.append((_shape_text(shape), seed))
    return failed


def _time(fn, runs, flush):
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def timing(runs=30, verbose=True):
    shape = W["shapes"][0]
    inputs = pkg.make_inputs(shape, seed=100)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    kernel_us = _time(lambda: pkg.run(*inputs), runs, flush)
    torch_us = _time(lambda: pkg.reference(*inputs), runs, flush)
    if verbose:
        print(f"headline {_shape_text(shape)}: cutesmith {kernel_us:.2f} us, PyTorch "
              f"{torch_us:.2f} us (median of {runs}; {torch_us / kernel_us:.2f}x)")
    return kernel_us, torch_us


def test_kernel_matches_reference():
    pkg.load()
    assert validate(seeds=2, verbose=False) == []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cutlass", help="CUTLASS checkout or include dir (else $CUTLASS_DIR, ...)")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--headline-only", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--verbose-build", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: the kernel needs an NVIDIA GPU (" + W["arch"] + ")")
        return 2
    pkg.load(cutlass_dir=args.cutlass, verbose=args.verbose_build)
    print(f"{W['name']}: {W['description']}")
    failed = validate(seeds=args.seeds, headline_only=args.headline_only)
    if failed:
        print(f"FAILED on {len(failed)} shape/seed pairs: {failed}")
        return 1
    if not args.no_timing:
        timing(runs=args.runs)
    print("all shapes correct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
