//! The worker: the child process (`cutesmith worker --job FILE`) that loads a candidate's
//! shared object, validates it on every shape and seed, times it against the vendor
//! libraries in the same process, and answers with one JSON line on stdout.
//!
//! A faulting kernel poisons this process's CUDA context and a hanging one blocks it: the
//! parent ([`crate::eval`]) survives both, because only this process ever loads a
//! candidate. Every failure of the candidate is reported as a [`Fault`], never a panic.
//!
//! Here: the job loop, loading the candidate, one problem's buffers and launch; the
//! validation of a launch against its reference in [`validate`], timing against the
//! vendor libraries in [`timing`].

mod device;
mod problem;
mod timing;
mod validate;

use timing::peak_flops;

use std::path::Path;

use crate::abi::{self, cs_problem, KernelLibrary};
use crate::eval::compare::{E4M3, E5M2};
use crate::eval::gpu::baseline::Libraries;
use crate::eval::gpu::data::HostElement;
use crate::eval::gpu::session::{DevBuf, Session};
use crate::eval::job::{Ceilings, Fault, FaultKind, Job, Mode, WorkerReport, RESULT_MARKER};
use crate::spec::{DType, Shape, Workload};

/// The most workspace a kernel may ask for (bytes).
const MAX_WORKSPACE: u64 = 4 << 30;

/// Entry point of `cutesmith worker`: runs the job in `path`, prints the result line.
/// Returns the process exit code (0 whenever a report was written).
pub fn main(path: &Path) -> i32 {
    let job: Job = match std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(j) => j,
        Err(e) => {
            eprintln!("worker: cannot read job {}: {e}", path.display());
            return 2;
        }
    };
    let report = run(&job);
    match serde_json::to_string(&report) {
        Ok(json) => {
            println!("{RESULT_MARKER} {} {json}", job.nonce);
            0
        }
        Err(e) => {
            eprintln!("worker: cannot encode the report: {e}");
            2
        }
    }
}

fn empty_report() -> WorkerReport {
    WorkerReport {
        device: None,
        ceilings: None,
        validations: Vec::new(),
        timing: None,
        revalidation: None,
        fault: None,
        notes: Vec::new(),
        environment: None,
    }
}

fn fault(kind: FaultKind, message: impl Into<String>) -> Fault {
    Fault {
        kind,
        message: message.into(),
    }
}

/// Classifies a CUDA error code raised by a launch or the synchronize after it.
pub fn classify_cuda(code: i32, message: &str) -> Fault {
    let kind = match code {
        700 => FaultKind::OutOfBounds,
        716 => FaultKind::MisalignedAddress,
        // The harness's own allocations (a kernel allocates nothing): the GPU is full.
        2 => FaultKind::Resource,
        _ => FaultKind::KernelError,
    };
    let what = match code {
        2 => {
            "out of device memory while the harness allocated this shape's buffers (not the \
              kernel's doing): the GPU is shared with another process, or the shape needs more \
              than the admission estimate counted; free the GPU or validate smaller shapes"
        }
        700 => "illegal memory access: the kernel read or wrote outside memory it owns",
        716 => "misaligned address: a vector or TMA access on an address not aligned to its width",
        719 => "unspecified launch failure: the kernel crashed (trap, bad instruction or access)",
        701 => "too many resources requested for launch (registers or threads)",
        98 | 209 => "invalid device function or no kernel image for this GPU (wrong arch?)",
        _ => "CUDA error",
    };
    fault(kind, format!("{what}: {message}"))
}

fn run(job: &Job) -> WorkerReport {
    let mut report = empty_report();
    let workload = match Workload::parse(&job.workload_path, &job.workload_toml) {
        Ok(w) => w,
        Err(e) => {
            report.notes.push(format!("workload: {e}"));
            return report;
        }
    };
    let mut s = match Session::open() {
        Ok(s) => s,
        Err(e) => {
            report.environment = Some(format!("the worker could not open the GPU: {e}"));
            return report;
        }
    };
    report.device = Some(s.info.clone());
    // Admission: every shape must fit the GPU's free memory before anything of it is
    // allocated (first thing, so the refusal takes well under a second); not the
    // kernel's fault when it does not.
    if let Some(f) = device_admission(&s, &workload, job) {
        report.fault = Some(f);
        return report;
    }
    let libs = Libraries::open(&s);
    report.notes.extend(libs.notes.iter().cloned());
    let copy_bw = match s.measure_copy_bandwidth() {
        Ok(bw) => bw,
        Err(e) => {
            report.environment = Some(format!(
                "the worker could not measure the device's copy bandwidth: {e}"
            ));
            return report;
        }
    };
    let (peak, peak_note) = peak_flops(
        &s.info,
        workload.compute_pipe(),
        workload.family().is_gemm(),
    );
    report.ceilings = Some(Ceilings {
        copy_bytes_per_s: copy_bw,
        peak_flops_per_s: peak,
        peak_note,
    });

    let kernel = match (&job.shared_object, job.mode) {
        (_, Mode::Baseline) => None,
        (Some(so), _) => match load_kernel(so) {
            Ok(k) => Some(k),
            Err(f) => {
                report.fault = Some(f);
                return report;
            }
        },
        (None, _) => {
            report.notes.push("no shared object given".into());
            return report;
        }
    };
    // Host validation (asked for) only where its host copies fit the worker's budget;
    // otherwise the device validates, streaming summaries only to the host.
    let mut host_validation = job.host_validation;
    if let (true, Some(limit)) = (host_validation, job.host_memory_limit) {
        if let Some(sh) = workload
            .shapes()
            .iter()
            .find(|sh| host_validation_bytes(&workload, sh) > 0.8 * limit as f64)
        {
            report.notes.push(format!(
                "validated on the device: host validation of {sh} would hold about {} of host \
                 memory, over 80% of the worker's budget of {}",
                crate::spec::human_bytes(host_validation_bytes(&workload, sh)),
                crate::spec::human_bytes(limit as f64)
            ));
            host_validation = false;
        }
    }
    // Inputs and validation on the device unless its kernels cannot be built (then on
    // the host, with a note saying why).
    let dev = match device::compile(
        &s,
        &workload,
        workload.dtype(),
        workload.out_dtype(),
        host_validation,
    ) {
        Ok(d) => Some(d),
        Err(e) => {
            report
                .notes
                .push(format!("inputs and validation on the host ({e})"));
            None
        }
    };
    // A family validated on the host only (gemm_reduce, gemm_norm): a shape whose host
    // copies would not fit the worker's budget is refused before anything is allocated.
    if let (None, Some(limit)) = (&dev, job.host_memory_limit) {
        if let Some(sh) = workload
            .shapes()
            .iter()
            .find(|sh| host_validation_bytes(&workload, sh) > 0.8 * limit as f64)
        {
            report.fault = Some(fault(
                FaultKind::Resource,
                format!(
                    "shape {sh} is validated on the host and would hold about {} of host \
                     memory, over 80% of the worker's budget of {}: raise --host-memory, or \
                     validate smaller shapes",
                    crate::spec::human_bytes(host_validation_bytes(&workload, sh)),
                    crate::spec::human_bytes(limit as f64)
                ),
            ));
            return report;
        }
    }
    let mut ctx = Ctx {
        dev,
        s: &mut s,
        libs: &libs,
        kernel: kernel.as_ref(),
        workload: &workload,
        job,
        report: &mut report,
    };
    use half::{bf16, f16};
    match (workload.dtype(), workload.out_dtype()) {
        (DType::BF16, DType::BF16) => ctx.run_typed::<bf16, bf16>(),
        (DType::BF16, DType::F16) => ctx.run_typed::<bf16, f16>(),
        (DType::BF16, DType::F32) => ctx.run_typed::<bf16, f32>(),
        (DType::F16, DType::F16) => ctx.run_typed::<f16, f16>(),
        (DType::F16, DType::BF16) => ctx.run_typed::<f16, bf16>(),
        (DType::F16, DType::F32) => ctx.run_typed::<f16, f32>(),
        (DType::F32, DType::F32) => ctx.run_typed::<f32, f32>(),
        (DType::F32, DType::BF16) => ctx.run_typed::<f32, bf16>(),
        (DType::F32, DType::F16) => ctx.run_typed::<f32, f16>(),
        (DType::E4M3, DType::BF16) => ctx.run_typed::<E4M3, bf16>(),
        (DType::E4M3, DType::F16) => ctx.run_typed::<E4M3, f16>(),
        (DType::E4M3, DType::F32) => ctx.run_typed::<E4M3, f32>(),
        (DType::E4M3, DType::E4M3) => ctx.run_typed::<E4M3, E4M3>(),
        (DType::E5M2, DType::BF16) => ctx.run_typed::<E5M2, bf16>(),
        (DType::E5M2, DType::F16) => ctx.run_typed::<E5M2, f16>(),
        (DType::E5M2, DType::F32) => ctx.run_typed::<E5M2, f32>(),
        (DType::E5M2, DType::E5M2) => ctx.run_typed::<E5M2, E5M2>(),
        (DType::BF16, DType::I64) => ctx.run_typed::<bf16, i64>(),
        (DType::F16, DType::I64) => ctx.run_typed::<f16, i64>(),
        (DType::F32, DType::I64) => ctx.run_typed::<f32, i64>(),
        (a, d) => ctx.report.notes.push(format!(
            "{a} operands with a {d} output are not supported by the harness"
        )),
    }
    report
}

/// The resource fault for the first of the job's shapes that needs more device memory
/// than the GPU has free (`cuMemGetInfo`), from the workload's footprint estimate; `None`
/// when every shape fits (or the free memory cannot be read).
fn device_admission(s: &Session, w: &Workload, job: &Job) -> Option<Fault> {
    let (free, total) = s.ctx.mem_get_info().ok()?;
    let shapes: Vec<&Shape> = if job.shapes.is_empty() {
        w.shapes().iter().collect()
    } else {
        job.shapes
            .iter()
            .filter_map(|i| w.shapes().get(*i))
            .collect()
    };
    // The L2 flush buffer, the vendor libraries' workspaces and the context's own use.
    const MARGIN: f64 = 512.0 * 1024.0 * 1024.0;
    let sh = shapes
        .into_iter()
        .find(|sh| w.device_bytes(sh) + MARGIN > free as f64)?;
    Some(fault(
        FaultKind::Resource,
        format!(
            "shape {sh} needs about {} of device memory (two input sets, the output, the \
             chain's tensors and the reference planes), and the GPU has {} free of {}: \
             nothing was allocated; free the GPU, or validate smaller shapes",
            crate::spec::human_bytes(w.device_bytes(sh)),
            crate::spec::human_bytes(free as f64),
            crate::spec::human_bytes(total as f64)
        ),
    ))
}

/// Host bytes validating `sh` on the host holds: both input sets, the output read back,
/// and the fp64 reference with its per-element bound.
fn host_validation_bytes(w: &Workload, sh: &Shape) -> f64 {
    let out = sh.m as f64 * sh.n as f64 * sh.batch as f64;
    // A reduction's [[before]] tensors are held as f64 (both input sets), and each row the
    // reference reduces holds its k values and bounds (16 bytes an element, a row a thread).
    let (m, k, b) = (sh.m as f64, sh.k as f64, sh.batch as f64);
    let before = w.before_elements(sh) * 8.0 * 2.0;
    let rows_at_once =
        if w.before_chain().is_identity() || w.family() != crate::spec::Family::Reduce {
            0.0
        } else {
            16.0 * k * (m * b).min(64.0)
        };
    // gemm_norm's reference holds the fp32 product and its |a||b| sums, each product's
    // value and bound after the [[before]] ops, the output's pairs and, while they are
    // split, the want and slack vectors again.
    let gemm_norm = if w.family() == crate::spec::Family::GemmNorm {
        56.0 * out
    } else {
        0.0
    };
    // A view's whole input is generated on the host before the elements it reads are
    // gathered.
    // (min_bytes counts a broadcast dim's elements once; the packed copy holds them all.)
    let view = w.view_on(sh).map_or(0.0, |v| {
        let packed: u64 = v.extents.iter().product();
        (v.input_len + packed - v.reads) as f64 * w.dtype().bytes() as f64
    });
    2.0 * w.min_bytes(sh) + 16.0 * out + before + rows_at_once + gemm_norm + view
}

fn load_kernel(path: &Path) -> Result<KernelLibrary, Fault> {
    // SAFETY: loading runs the object's initializers: that is why this happens only in
    // the worker process, after the parent inspected the object's imports.
    let lib = unsafe { KernelLibrary::new(path) }.map_err(|e| {
        fault(
            FaultKind::AbiMismatch,
            format!(
                "cannot load {} or resolve {}: {e}",
                path.display(),
                abi::ENTRY_POINTS.join(", ")
            ),
        )
    })?;
    // SAFETY: resolved from the object; takes no arguments.
    let v = unsafe { lib.cutesmith_abi_version() };
    if v != abi::CS_ABI_VERSION {
        return Err(fault(
            FaultKind::AbiMismatch,
            format!(
                "kernel reports ABI version {v}, cutesmith speaks {}",
                abi::CS_ABI_VERSION
            ),
        ));
    }
    Ok(lib)
}

struct Ctx<'a> {
    s: &'a mut Session,
    libs: &'a Libraries,
    kernel: Option<&'a KernelLibrary>,
    workload: &'a Workload,
    job: &'a Job,
    report: &'a mut WorkerReport,
    /// Device validation's kernels; `None`: validation on the host.
    dev: Option<device::DeviceValidation>,
}

impl Ctx<'_> {
    fn run_typed<A: HostElement, D: HostElement>(&mut self) {
        let shapes: Vec<Shape> = if self.job.shapes.is_empty() {
            self.workload.shapes().to_vec()
        } else {
            self.job
                .shapes
                .iter()
                .filter_map(|i| self.workload.shapes().get(*i).copied())
                .collect()
        };
        if self.job.mode != Mode::Baseline {
            for shape in &shapes {
                let mut previous = None;
                for &seed in &self.job.seeds {
                    eprintln!("worker: validating {shape} seed {seed}");
                    let v = self.validate::<A, D>(shape, seed, &mut previous);
                    let failed = !v.passed;
                    let f = v.fault.clone();
                    self.report.validations.push(v);
                    if failed {
                        self.report.fault = f;
                        return;
                    }
                }
            }
        }
        if self.job.mode == Mode::Validate {
            return;
        }
        let headline = *self.workload.headline();
        eprintln!("worker: timing {headline}");
        match self.time::<A, D>(&headline) {
            Ok(t) => {
                if let (Some(c), true, None) = (&t.candidate, t.floor_s > 0.0, &self.report.fault) {
                    if c.median_us * 1e-6 < 0.9 * t.floor_s {
                        self.report.fault = Some(fault(
                            FaultKind::BelowRoofline,
                            format!(
                                "measured {:.2} us, below the roofline floor of {:.2} us: the kernel \
                                 skips work or the timing is wrong",
                                c.median_us,
                                t.floor_s * 1e6
                            ),
                        ));
                    }
                }
                self.report.timing = Some(t);
            }
            Err(e) => {
                let f = classify_cuda(e.code, &e.message);
                self.report.notes.push(format!("timing failed: {e}"));
                if self.job.mode == Mode::Check {
                    self.report.fault = Some(f);
                }
                return;
            }
        }
        if self.job.mode == Mode::Check && self.report.fault.is_none() {
            let seed = self.job.seeds.iter().max().copied().unwrap_or(0) + 0x5EED;
            eprintln!("worker: re-validating {headline} on fresh inputs");
            let v = self.validate::<A, D>(&headline, seed, &mut None);
            if !v.passed {
                self.report.fault = v.fault.clone();
            }
            self.report.revalidation = Some(v);
        }
    }

    /// Allocates and fills one problem's inputs (seeded) and a poisoned, guarded output.
    /// Asks the kernel for its workspace and allocates it. `Err` carries the fault.
    fn workspace(
        &self,
        kernel: &KernelLibrary,
        cp: &mut cs_problem,
    ) -> Result<Option<DevBuf<u8>>, Fault> {
        let mut bytes: u64 = 0;
        // SAFETY: `cp` is a valid problem; `bytes` a live out-parameter.
        let rc = unsafe { kernel.cutesmith_workspace_bytes(cp, &mut bytes) };
        if rc == abi::cs_status::CS_ERR_UNSUPPORTED as i32 {
            return Err(fault(
                FaultKind::Unsupported,
                "cutesmith_workspace_bytes: the kernel does not handle this problem",
            ));
        }
        if rc != 0 {
            return Err(fault(
                FaultKind::WrongWorkspace,
                format!("cutesmith_workspace_bytes returned {rc}"),
            ));
        }
        if bytes > MAX_WORKSPACE {
            return Err(fault(
                FaultKind::WrongWorkspace,
                format!("the kernel asked for {bytes} bytes of workspace (limit {MAX_WORKSPACE})"),
            ));
        }
        if bytes == 0 {
            return Ok(None);
        }
        let ws = self.s.zeros::<u8>(bytes as usize).map_err(|e| {
            fault(
                FaultKind::WrongWorkspace,
                format!("cannot allocate {bytes} bytes of workspace: {e}"),
            )
        })?;
        cp.workspace = ws.ptr as *mut _;
        cp.workspace_bytes = bytes;
        Ok(Some(ws))
    }

    fn launch(&self, kernel: &KernelLibrary, cp: &cs_problem) -> Result<(), Fault> {
        // SAFETY: the kernel implements the ABI (checked version); `cp` points at live
        // device buffers of the sizes the problem states; the stream is ours.
        let rc = unsafe { kernel.cutesmith_launch(cp, self.s.stream.cu_stream() as _) };
        if rc == 0 {
            return Ok(());
        }
        Err(match rc as u32 {
            x if x == abi::cs_status::CS_ERR_UNSUPPORTED => fault(
                FaultKind::Unsupported,
                "cutesmith_launch: the kernel does not handle this problem (CS_ERR_UNSUPPORTED)",
            ),
            x if x == abi::cs_status::CS_ERR_WORKSPACE => fault(
                FaultKind::WrongWorkspace,
                "cutesmith_launch: workspace too small (CS_ERR_WORKSPACE)",
            ),
            x if x == abi::cs_status::CS_ERR_ABI_VERSION => fault(
                FaultKind::AbiMismatch,
                "cutesmith_launch: ABI version mismatch",
            ),
            // The launch's own allocation failed (the harness's are done before it).
            2 => fault(
                FaultKind::LaunchError,
                "cutesmith_launch returned 2 (out of memory): the launch code allocated device \
                 memory itself; take scratch space from cs_problem.workspace (the harness \
                 allocates what the kernel's cutesmith_workspace_bytes asks for)",
            ),
            _ => {
                let mut f = classify_cuda(rc, &format!("cutesmith_launch returned {rc}"));
                if f.kind == FaultKind::KernelError {
                    f.kind = FaultKind::LaunchError;
                }
                f
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ComputePipe;

    #[test]
    fn roofline_ceilings_allow_compensated_tensor_cores_for_fp32_gemms() {
        let h100 = crate::eval::gpu::DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            memory_bytes: 0,
            l2_bytes: 50 << 20,
            smem_per_block_optin: 232448,
            clock_khz: 1_980_000,
            driver_cuda_version: 13000,
        };
        let (bf16, _) = peak_flops(&h100, ComputePipe::TensorBf16, true);
        assert!((bf16 / 1e12 - 1070.5).abs() < 1.0, "{bf16}");
        let (simt, _) = peak_flops(&h100, ComputePipe::SimtF32, false);
        assert!((simt / 1e12 - 66.9).abs() < 0.5, "{simt}");
        // fp32 GEMM: a third of the 16-bit tensor rate (3xF16; 3xTF32 is half that),
        // above the SIMT rate.
        let (f32_gemm, note) = peak_flops(&h100, ComputePipe::SimtF32, true);
        assert!((f32_gemm / 1e12 - 356.8).abs() < 1.0, "{f32_gemm} {note}");
        assert!((f32_gemm / bf16 - 1.0 / 3.0).abs() < 1e-9);
        // fp8: twice the 16-bit tensor rate.
        let (fp8, _) = peak_flops(&h100, ComputePipe::TensorFp8, true);
        assert!((fp8 / bf16 - 2.0).abs() < 1e-9);
    }

    #[test]
    fn cuda_codes_are_classified() {
        assert_eq!(classify_cuda(700, "x").kind, FaultKind::OutOfBounds);
        assert_eq!(classify_cuda(716, "x").kind, FaultKind::MisalignedAddress);
        assert_eq!(classify_cuda(719, "x").kind, FaultKind::KernelError);
        // CUDA_ERROR_OUT_OF_MEMORY comes from the harness's allocations: a resource, not
        // the candidate's error (KernelBench's 15 GB InstanceNorm once read as one).
        let oom = classify_cuda(2, "DriverError(CUDA_ERROR_OUT_OF_MEMORY)");
        assert_eq!(oom.kind, FaultKind::Resource);
        assert!(
            oom.message.contains("out of device memory"),
            "{}",
            oom.message
        );
        assert!(classify_cuda(700, "x")
            .message
            .contains("illegal memory access"));
    }
}
