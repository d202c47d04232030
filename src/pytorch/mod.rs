//! The bridge to PyTorch: `cutesmith import` (a PyTorch problem file in the KernelBench
//! convention becomes a workload spec: [`import`], with the tracer `trace.py` shipped in
//! the binary) and the package `cutesmith export --torch` writes around a kernel (a
//! `torch.library` operator calling the kernel's C ABI, its build, a reference and a test:
//! [`package`]). Both need a Python with torch, found by [`python`]: `CUTESMITH_PYTHON`,
//! else `python3` on `PATH`. Nothing here needs a GPU.

pub mod import;
pub mod package;
pub mod python;
