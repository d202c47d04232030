//! The worker: the child process (`cutesmith worker --job FILE`) that loads a candidate's
//! shared object, validates it on every shape and seed, times it against the vendor
//! libraries in the same process, and answers with one JSON line on stdout.
//!
//! A faulting kernel poisons this process's CUDA context and a hanging one blocks it: the
//! parent ([`crate::eval`]) survives both, because only this process ever loads a
//! candidate. Every failure of the candidate is reported as a [`Fault`], never a panic.

use std::path::Path;
use std::time::Instant;

use crate::abi::{self, cs_problem, KernelLibrary};
use crate::eval::gpu::baseline::{self, GemmDesc, Libraries};
use crate::eval::gpu::data::{self, HostElement, GUARD_ELEMENTS};
use crate::eval::gpu::reference;
use crate::eval::gpu::session::{CudaFailure, DevBuf, Session};
use crate::eval::job::{
    BaselineTiming, Ceilings, Fault, FaultKind, Fp64Check, Job, Mode, ShapeValidation, Stats,
    TimingReport, WorkerReport, RESULT_MARKER,
};
use crate::eval::compare::{self, Dims, Verdict};
use crate::spec::{ComputePipe, DType, Family, Layout, Shape, Workload};

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
        _ => FaultKind::KernelError,
    };
    let what = match code {
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
            report.notes.push(e.to_string());
            return report;
        }
    };
    report.device = Some(s.info.clone());
    let libs = Libraries::open(&s);
    report.notes.extend(libs.notes.iter().cloned());
    let copy_bw = match s.measure_copy_bandwidth() {
        Ok(bw) => bw,
        Err(e) => {
            report.notes.push(format!("copy bandwidth: {e}"));
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
    let mut ctx = Ctx {
        s: &mut s,
        libs: &libs,
        kernel: kernel.as_ref(),
        workload: &workload,
        job,
        report: &mut report,
    };
    match workload.dtype() {
        DType::BF16 => ctx.run_typed::<half::bf16>(),
        DType::F16 => ctx.run_typed::<half::f16>(),
        DType::F32 => ctx.run_typed::<f32>(),
        DType::F64 => ctx
            .report
            .notes
            .push("f64 workloads are not supported".into()),
    }
    report
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

/// Upper bound on FLOP/s for the roofline floor: SMs x boost clock x per-SM rate. An fp32
/// GEMM may legitimately run on tensor cores with 3xTF32 error compensation, so its
/// ceiling is the larger of the SIMT rate and a third of the TF32 rate.
fn peak_flops(info: &crate::eval::gpu::DeviceInfo, pipe: ComputePipe, gemm: bool) -> (f64, String) {
    let tf32 = match info.compute_capability {
        (9, _) => 2048.0,
        (8, 0) => 1024.0,
        (8, _) => 512.0,
        _ => 0.0,
    };
    let per_sm_per_clk = match (info.compute_capability, pipe) {
        (_, ComputePipe::SimtF32) if gemm => f64::max(256.0, tf32 / 3.0),
        ((9, _), ComputePipe::TensorBf16 | ComputePipe::TensorF16) => 4096.0,
        ((9, _), ComputePipe::TensorTf32) => 2048.0,
        ((8, 0), ComputePipe::TensorBf16 | ComputePipe::TensorF16) => 2048.0,
        ((8, 0), ComputePipe::TensorTf32) => 1024.0,
        ((8, _), ComputePipe::TensorBf16 | ComputePipe::TensorF16) => 1024.0,
        ((8, _), ComputePipe::TensorTf32) => 512.0,
        (_, ComputePipe::SimtF32) => 256.0,
        _ => 4096.0,
    };
    let peak = info.sm_count as f64 * info.clock_khz as f64 * 1e3 * per_sm_per_clk;
    (
        peak,
        format!(
            "{:.0} TFLOP/s = {} SMs x {:.2} GHz x {per_sm_per_clk} FLOP/clk/SM ({pipe:?}, dense)",
            peak / 1e12,
            info.sm_count,
            info.clock_khz as f64 / 1e6
        ),
    )
}

/// Device buffers of one problem instance.
struct Problem<T> {
    shape: Shape,
    a: DevBuf<T>,
    b: Option<DevBuf<T>>,
    c: Option<DevBuf<T>>,
    bias: Option<DevBuf<T>>,
    out: DevBuf<T>,
    host_a: Vec<T>,
    host_b: Vec<T>,
    host_c: Vec<T>,
    host_bias: Vec<T>,
    out_len: usize,
    gemm: Option<GemmDesc>,
    ldd: i64,
}

struct Ctx<'a> {
    s: &'a mut Session,
    libs: &'a Libraries,
    kernel: Option<&'a KernelLibrary>,
    workload: &'a Workload,
    job: &'a Job,
    report: &'a mut WorkerReport,
}

impl Ctx<'_> {
    fn run_typed<T: HostElement>(&mut self) {
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
                let mut previous: Option<Vec<f64>> = None;
                for &seed in &self.job.seeds {
                    eprintln!("worker: validating {shape} seed {seed}");
                    let v = self.validate::<T>(shape, seed, &mut previous);
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
        match self.time::<T>(&headline) {
            Ok(t) => {
                if let (Some(c), true) = (&t.candidate, t.floor_s > 0.0) {
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
            let v = self.validate::<T>(&headline, seed, &mut None);
            if !v.passed {
                self.report.fault = v.fault.clone();
            }
            self.report.revalidation = Some(v);
        }
    }

    /// Allocates and fills one problem's inputs (seeded) and a poisoned, guarded output.
    fn setup<T: HostElement>(&self, shape: &Shape, seed: u64) -> Result<Problem<T>, CudaFailure> {
        let (m, n, k, batch) = (
            shape.m as usize,
            shape.n as usize,
            shape.k as usize,
            shape.batch as usize,
        );
        let params = self.workload.params();
        match self.workload.family() {
            Family::Gemm | Family::GemmBiasAct => {
                let lay = self.workload.layouts();
                let lda = if lay.a == Layout::Row { k } else { m };
                let ldb = if lay.b == Layout::Col { k } else { n };
                let ldd = if lay.c == Layout::Row { n } else { m };
                let out_len = batch * m * n;
                let host_a: Vec<T> = data::random_vec(batch * m * k, seed, 0);
                let host_b: Vec<T> = data::random_vec(batch * k * n, seed, 1);
                let host_c: Vec<T> = if params.beta != 0.0 {
                    data::random_vec(out_len, seed, 2)
                } else {
                    Vec::new()
                };
                let host_bias: Vec<T> = if params.bias {
                    data::random_vec(n, seed, 3)
                } else {
                    Vec::new()
                };
                let a = self.s.upload(&host_a)?;
                let b = Some(self.s.upload(&host_b)?);
                let c = if host_c.is_empty() {
                    None
                } else {
                    Some(self.s.upload(&host_c)?)
                };
                let bias = if host_bias.is_empty() {
                    None
                } else {
                    Some(self.s.upload(&host_bias)?)
                };
                let out = self.s.upload(&data::poisoned_output::<T>(out_len))?;
                Ok(Problem {
                    shape: *shape,
                    a,
                    b,
                    c,
                    bias,
                    out,
                    host_a,
                    host_b,
                    host_c,
                    host_bias,
                    out_len,
                    gemm: Some(GemmDesc {
                        m: shape.m,
                        n: shape.n,
                        k: shape.k,
                        batch: shape.batch,
                        layout_a: lay.a,
                        layout_b: lay.b,
                        layout_cd: lay.c,
                        lda: lda as i64,
                        ldb: ldb as i64,
                        stride_a: (m * k) as i64,
                        stride_b: (k * n) as i64,
                    }),
                    ldd: ldd as i64,
                })
            }
            Family::Activation | Family::Softmax => {
                let len = m * n;
                let host_a: Vec<T> = data::random_vec(len, seed, 0);
                let a = self.s.upload(&host_a)?;
                let out = self.s.upload(&data::poisoned_output::<T>(len))?;
                Ok(Problem {
                    shape: *shape,
                    a,
                    b: None,
                    c: None,
                    bias: None,
                    out,
                    host_a,
                    host_b: Vec::new(),
                    host_c: Vec::new(),
                    host_bias: Vec::new(),
                    out_len: len,
                    gemm: None,
                    ldd: n as i64,
                })
            }
        }
    }

    /// The ABI problem struct for a problem instance (workspace filled in later).
    fn problem<T: HostElement>(&self, p: &Problem<T>) -> cs_problem {
        let params = self.workload.params();
        let lay = self.workload.layouts();
        let sh = p.shape;
        let mut cp = cs_problem {
            abi_version: abi::CS_ABI_VERSION,
            family: self.workload.family().abi_value(),
            m: sh.m as i64,
            n: sh.n as i64,
            k: sh.k as i64,
            batch: sh.batch as i64,
            dtype_ab: T::DTYPE.abi_value(),
            dtype_cd: T::DTYPE.abi_value(),
            dtype_acc: self.workload.acc_dtype().abi_value(),
            layout_a: lay.a.abi_value(),
            layout_b: lay.b.abi_value(),
            layout_cd: lay.c.abi_value(),
            a: p.a.ptr as *const _,
            b: p.b.as_ref().map_or(0, |b| b.ptr) as *const _,
            c: p.c.as_ref().map_or(0, |c| c.ptr) as *const _,
            d: p.out.at(GUARD_ELEMENTS) as *mut _,
            bias: p.bias.as_ref().map_or(0, |b| b.ptr) as *const _,
            lda: p.ldd,
            ldb: 0,
            ldc: p.ldd,
            ldd: p.ldd,
            batch_stride_a: 0,
            batch_stride_b: 0,
            batch_stride_c: (sh.m * sh.n) as i64,
            batch_stride_d: (sh.m * sh.n) as i64,
            alpha: params.alpha,
            beta: params.beta,
            activation: params.activation.abi_value(),
            act_alpha: params.act_alpha,
            workspace: std::ptr::null_mut(),
            workspace_bytes: 0,
            sm_count: self.s.info.sm_count,
            reserved0: 0,
        };
        if let Some(g) = &p.gemm {
            cp.lda = g.lda;
            cp.ldb = g.ldb;
            cp.batch_stride_a = g.stride_a;
            cp.batch_stride_b = g.stride_b;
        }
        cp
    }

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
            _ => {
                let mut f = classify_cuda(rc, &format!("cutesmith_launch returned {rc}"));
                if f.kind == FaultKind::KernelError {
                    f.kind = FaultKind::LaunchError;
                }
                f
            }
        })
    }

    fn validate<T: HostElement>(
        &mut self,
        shape: &Shape,
        seed: u64,
        previous: &mut Option<Vec<f64>>,
    ) -> ShapeValidation {
        let mut v = ShapeValidation {
            shape: *shape,
            seed,
            passed: false,
            comparison: None,
            fp64: None,
            canaries_intact: true,
            fault: None,
            seconds: 0.0,
        };
        let Some(kernel) = self.kernel else {
            v.fault = Some(fault(FaultKind::AbiMismatch, "no kernel loaded"));
            return v;
        };
        let p = match self.setup::<T>(shape, seed) {
            Ok(p) => p,
            Err(e) => {
                v.fault = Some(fault(
                    FaultKind::KernelError,
                    format!("setting up inputs failed: {e}"),
                ));
                return v;
            }
        };
        let mut cp = self.problem(&p);
        let _ws = match self.workspace(kernel, &mut cp) {
            Ok(ws) => ws,
            Err(f) => {
                v.fault = Some(f);
                return v;
            }
        };
        let start = Instant::now();
        if let Err(f) = self.launch(kernel, &cp) {
            v.fault = Some(f);
            return v;
        }
        if let Err(e) = self.s.sync() {
            v.fault = Some(classify_cuda(e.code, &e.message));
            return v;
        }
        v.seconds = start.elapsed().as_secs_f64();
        let out = match self.s.download(&p.out) {
            Ok(o) => o,
            Err(e) => {
                v.fault = Some(classify_cuda(e.code, &e.message));
                return v;
            }
        };
        v.canaries_intact = data::guards_intact(&out);
        let got = &out[GUARD_ELEMENTS..GUARD_ELEMENTS + p.out_len];
        let reference = match self.reference(&p) {
            Ok(r) => r,
            Err(e) => {
                v.fault = Some(fault(
                    FaultKind::KernelError,
                    format!("reference failed: {e}"),
                ));
                return v;
            }
        };
        let dims = self.dims(&p);
        let vt = self.workload.tolerance().at(shape);
        let cmp = compare::compare(got, &reference, &dims, &vt);
        if let Some(g) = &p.gemm {
            v.fp64 = Some(self.fp64_check(&p, g, got, seed));
        }
        let verdict = cmp.verdict();
        v.fault = if !v.canaries_intact {
            Some(fault(
                FaultKind::OutOfBounds,
                "the kernel wrote outside its output: the guard regions around D changed",
            ))
        } else {
            match verdict {
                Verdict::Pass => match &v.fp64 {
                    Some(f) if f.failed > 0 => Some(precision_fault(f)),
                    _ => None,
                },
                Verdict::PartialWrite => Some(fault(FaultKind::PartialWrite, cmp.report())),
                Verdict::NanInf => Some(fault(FaultKind::NanInf, cmp.report())),
                Verdict::Mismatch => {
                    let stale = previous
                        .as_ref()
                        .is_some_and(|prev| compare::compare(got, prev, &dims, &vt).passed());
                    if stale {
                        Some(fault(
                            FaultKind::StaleOutput,
                            format!(
                                "the output equals the result for the previous seed's inputs: the kernel replays a cached result\n{}",
                                cmp.report()
                            ),
                        ))
                    } else if let Some(f) = v.fp64.as_ref().filter(|f| rounding_level(f)) {
                        let mut pf = precision_fault(f);
                        pf.message.push('\n');
                        pf.message.push_str(&cmp.report());
                        Some(pf)
                    } else if let Some(other) = self.rerun_differs(kernel, &p, &cp, got) {
                        Some(fault(
                            FaultKind::Race,
                            format!(
                                "the output changes between runs on the same inputs ({other} of {} elements differ): a data race, a missing barrier or an uninitialized read\n{}",
                                p.out_len,
                                cmp.report()
                            ),
                        ))
                    } else {
                        Some(fault(FaultKind::Mismatch, cmp.report()))
                    }
                }
            }
        };
        v.passed = v.fault.is_none();
        v.comparison = Some(cmp);
        *previous = Some(reference);
        v
    }

    /// Runs the same inputs up to three more times; returns how many elements differ
    /// from the first run if any rerun differs (a moving result is a race).
    fn rerun_differs<T: HostElement>(
        &self,
        kernel: &KernelLibrary,
        p: &Problem<T>,
        cp: &cs_problem,
        first: &[T],
    ) -> Option<usize> {
        for _ in 0..3 {
            let poisoned = data::poisoned_output::<T>(p.out_len);
            self.s.write_raw(p.out.ptr, &poisoned).ok()?;
            self.launch(kernel, cp).ok()?;
            self.s.sync().ok()?;
            let again = self.s.download(&p.out).ok()?;
            let again = &again[GUARD_ELEMENTS..GUARD_ELEMENTS + p.out_len];
            let differ = again
                .iter()
                .zip(first)
                .filter(|(a, b)| a.to_f64().to_bits() != b.to_f64().to_bits())
                .count();
            if differ > 0 {
                return Some(differ);
            }
        }
        None
    }

    fn dims<T>(&self, p: &Problem<T>) -> Dims {
        let sh = p.shape;
        let (rows, cols) = match (&p.gemm, self.workload.layouts().c) {
            (Some(_), Layout::Col) => (sh.n as usize, sh.m as usize),
            _ => (sh.m as usize, sh.n as usize),
        };
        Dims {
            batch: sh.batch.max(1) as usize,
            rows,
            cols,
            ld: p.ldd as usize,
            batch_stride: (sh.m * sh.n) as usize,
        }
    }

    /// The dense fp64 reference of a problem's output (storage order of D).
    fn reference<T: HostElement>(&mut self, p: &Problem<T>) -> Result<Vec<f64>, CudaFailure> {
        let params = self.workload.params();
        let act = params.activation;
        let slope = params.act_alpha as f64;
        let mut out = vec![0f64; p.out_len];
        match (&p.gemm, self.workload.family()) {
            (Some(g), _) => {
                let prod = self.s.zeros::<f32>(p.out_len)?;
                let b = p.b.as_ref().map_or(0, |b| b.ptr);
                self.libs
                    .reference_gemm(g, T::DTYPE, p.a.ptr, b, prod.ptr)?;
                let prod = self.s.download(&prod)?;
                let col_major = g.layout_cd == Layout::Col;
                let (m, n) = (g.m as usize, g.n as usize);
                let (alpha, beta) = (params.alpha as f64, params.beta as f64);
                let (host_c, host_bias) = (&p.host_c, &p.host_bias);
                data::parallel_fill(&mut out, |i| {
                    let within = i % (m * n);
                    // Column of D this element is in (the bias index).
                    let col = if col_major { within / m } else { within % n };
                    let c = host_c.get(i).map_or(0.0, |x| x.to_f64());
                    let bias = host_bias.get(col).map_or(0.0, |x| x.to_f64());
                    reference::epilogue(prod[i] as f64, alpha, beta, c, bias, act, slope)
                });
            }
            (None, Family::Softmax) => {
                let (m, n) = (p.shape.m as usize, p.shape.n as usize);
                reference::softmax_rows(&p.host_a, m, n, n, &mut out);
            }
            (None, _) => {
                let x = &p.host_a;
                data::parallel_fill(&mut out, |i| {
                    reference::activation(act, x[i].to_f64(), slope)
                });
            }
        }
        Ok(out)
    }

    /// Sampled entries against fp64 dot products on the CPU, normalized by the sum of
    /// absolute terms, so a lower-precision arithmetic shows whatever the tolerance.
    fn fp64_check<T: HostElement>(
        &self,
        p: &Problem<T>,
        g: &GemmDesc,
        got: &[T],
        seed: u64,
    ) -> Fp64Check {
        let params = self.workload.params();
        let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
        let batch = g.batch.max(1) as usize;
        let mut picks: Vec<(usize, usize, usize)> =
            vec![(0, 0, 0), (0, m - 1, n - 1), (0, m - 1, 0), (0, 0, n - 1)];
        if batch > 1 {
            picks.push((batch - 1, m - 1, n - 1));
        }
        let want = self.job.fp64_samples.max(picks.len());
        let mut r = seed ^ 0xF64C_4ECC;
        while picks.len() < want {
            r = r
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = (r >> 16) as usize;
            picks.push(((x / 7) % batch, (x / 13) % m, (x / 17) % n));
        }
        let u_out = reference::unit_roundoff(T::DTYPE);
        let u_acc = if self.workload.allow_tf32() {
            2f64.powi(-11)
        } else {
            2f64.powi(-24)
        };
        let act_factor = if params.activation == crate::spec::Activation::Identity {
            1.0
        } else {
            2.0
        };
        let bound = 16.0 * u_acc * act_factor;
        let a_at = |b: usize, i: usize, kk: usize| {
            let idx = b * m * k
                + if g.layout_a == Layout::Row {
                    i * g.lda as usize + kk
                } else {
                    kk * g.lda as usize + i
                };
            p.host_a[idx].to_f64()
        };
        let b_at = |b: usize, kk: usize, j: usize| {
            let idx = b * k * n
                + if g.layout_b == Layout::Col {
                    j * g.ldb as usize + kk
                } else {
                    kk * g.ldb as usize + j
                };
            p.host_b[idx].to_f64()
        };
        let mut errors = Vec::with_capacity(picks.len());
        let mut normalized = Vec::with_capacity(picks.len());
        let mut failed = 0;
        let mut max_e: f64 = 0.0;
        for &(b, i, j) in &picks {
            let (mut dot, mut abs) = (0f64, 0f64);
            for kk in 0..k {
                let t = a_at(b, i, kk) * b_at(b, kk, j);
                dot += t;
                abs += t.abs();
            }
            let d_idx = b * m * n
                + if g.layout_cd == Layout::Row {
                    i * p.ldd as usize + j
                } else {
                    j * p.ldd as usize + i
                };
            let c = p.host_c.get(d_idx).map_or(0.0, |x| x.to_f64());
            let bias = p.host_bias.get(j).map_or(0.0, |x| x.to_f64());
            let want = reference::epilogue(
                dot,
                params.alpha as f64,
                params.beta as f64,
                c,
                bias,
                params.activation,
                params.act_alpha as f64,
            );
            let got = got[d_idx].to_f64();
            let denom = params.alpha.abs() as f64 * abs
                + (params.beta as f64 * c).abs()
                + bias.abs()
                + 1e-30;
            let e = if got.is_finite() {
                ((got - want).abs() - 1.01 * u_out * want.abs()).max(0.0) / denom
            } else {
                // Finite, so the report stays valid JSON; far over any bound.
                f64::MAX
            };
            if e > bound {
                failed += 1;
            }
            max_e = max_e.max(e);
            normalized.push(e);
            errors.push(((got - want).abs() / denom).min(1.0));
        }
        normalized.sort_by(f64::total_cmp);
        Fp64Check {
            samples: picks.len(),
            failed,
            max_normalized_error: max_e,
            median_normalized_error: normalized.get(normalized.len() / 2).copied().unwrap_or(0.0),
            bound,
            hint: compare::precision_hint(&errors),
        }
    }

    /// Times the headline shape: the candidate (if any) interleaved with every baseline.
    fn time<T: HostElement>(&mut self, shape: &Shape) -> Result<TimingReport, CudaFailure> {
        let seed = 0x7133_u64;
        self.s.prepare_flush()?;
        let p = self.setup::<T>(shape, seed)?;
        let params = self.workload.params();
        let dtype = T::DTYPE;
        let out_bytes = p.out_len * std::mem::size_of::<T>();
        let base_out = self.s.zeros::<T>(p.out_len)?;
        let lt_ws_bytes: usize = 64 << 20;
        let lt_ws = self.s.zeros::<u8>(lt_ws_bytes)?;
        let mut names: Vec<String> = Vec::new();
        let mut notes: Vec<Option<String>> = Vec::new();
        type Launch<'x> = Box<dyn FnMut() -> Result<(), CudaFailure> + 'x>;
        let mut launches: Vec<Launch> = Vec::new();

        let mut cp = self.problem(&p);
        let kernel = self.kernel;
        let mut _ws = None;
        if let Some(kernel) = kernel {
            _ws = self.workspace(kernel, &mut cp).map_err(|f| CudaFailure {
                code: -1,
                message: f.message,
            })?;
        }
        let stream = self.s.stream.cu_stream();
        let libs = self.libs;
        let a = p.a.ptr;
        let b = p.b.as_ref().map_or(0, |b| b.ptr);
        let bias = p.bias.as_ref().map_or(0, |b| b.ptr);
        let s_ref: &Session = self.s;
        let allow_tf32 = self.workload.allow_tf32();
        if let Some(kernel) = kernel {
            names.push("candidate".into());
            notes.push(None);
            let cp = cp;
            launches.push(Box::new(move || {
                // SAFETY: as in `launch`: valid problem, live buffers, our stream.
                let rc = unsafe { kernel.cutesmith_launch(&cp, stream as _) };
                if rc != 0 {
                    return Err(CudaFailure {
                        code: rc,
                        message: format!("cutesmith_launch returned {rc}"),
                    });
                }
                Ok(())
            }));
        }
        match (&p.gemm, self.workload.family()) {
            (Some(g), fam) => {
                let g = *g;
                if libs.has_cublas() {
                    names.push("cublas".into());
                    notes.push(if fam == Family::GemmBiasAct {
                        Some("GEMM only: no bias or activation".into())
                    } else {
                        None
                    });
                    let (alpha, beta) = (params.alpha, 0.0);
                    let d = base_out.ptr;
                    launches.push(Box::new(move || {
                        libs.cublas_gemm(&g, dtype, d, a, b, alpha, beta, allow_tf32)
                    }));
                }
                if libs.has_cublaslt() {
                    let epi = (fam == Family::GemmBiasAct).then_some((params.activation, bias));
                    match libs.lt_plan(&g, dtype, allow_tf32, epi, lt_ws.ptr, lt_ws_bytes) {
                        Ok(plan) if !plan.algos.is_empty() => {
                            // Pick the fastest of the heuristic's algorithms.
                            let mut best = (f64::INFINITY, 0usize);
                            for i in 0..plan.algos.len() {
                                let mut ts = Vec::new();
                                for _ in 0..3 {
                                    let d = base_out.ptr;
                                    if let Ok(t) = s_ref
                                        .time_us(&mut || plan.run(s_ref, i, a, b, d, params.alpha))
                                    {
                                        ts.push(t);
                                    }
                                }
                                ts.sort_by(f64::total_cmp);
                                if let Some(t) = ts.get(ts.len() / 2) {
                                    if *t < best.0 {
                                        best = (*t, i);
                                    }
                                }
                            }
                            let lt_algos = plan.algos.len();
                            names.push(format!(
                                "cublaslt (best of {lt_algos} heuristic algorithms)"
                            ));
                            notes.push(plan.note.clone());
                            let d = base_out.ptr;
                            let alpha = params.alpha;
                            launches
                                .push(Box::new(move || plan.run(s_ref, best.1, a, b, d, alpha)));
                        }
                        Ok(_) => self
                            .report
                            .notes
                            .push("cuBLASLt offered no algorithm".into()),
                        Err(e) => self
                            .report
                            .notes
                            .push(format!("cuBLASLt baseline skipped: {e}")),
                    }
                }
            }
            (None, fam) => {
                let (m, n) = (shape.m as usize, shape.n as usize);
                let op = if fam == Family::Softmax {
                    libs.cudnn_softmax(dtype, m, n)
                } else {
                    libs.cudnn_activation(params.activation, dtype, m, n)
                };
                match op {
                    Ok(op) => {
                        names.push("cudnn".into());
                        notes.push(None);
                        let d = base_out.ptr;
                        launches.push(Box::new(move || op.run(a, d)));
                    }
                    Err(e) => self
                        .report
                        .notes
                        .push(format!("cuDNN baseline skipped: {}", e.message)),
                }
                names.push("copy".into());
                notes.push(Some(
                    "device-to-device copy of the same bytes: the bandwidth ceiling".into(),
                ));
                let d = base_out.ptr;
                launches.push(Box::new(move || baseline::copy(s_ref, d, a, out_bytes)));
            }
        }
        // Warm up, then interleave: candidate, baseline 1, baseline 2, ... per round.
        for l in launches.iter_mut() {
            for _ in 0..self.job.timing.warmup.max(1) {
                l()?;
            }
        }
        self.s.sync()?;
        // Tiny problems: launch overhead would dominate single launches, so each timed
        // sample replays a CUDA graph of GRAPH_LAUNCHES launches (L2 flushed per graph).
        // The mode is decided once for all contenders, so they are timed alike.
        let mut tiny = false;
        for l in launches.iter_mut() {
            let mut probe = Vec::new();
            for _ in 0..5 {
                probe.push(self.s.time_us(&mut **l)?);
            }
            probe.sort_by(f64::total_cmp);
            tiny |= probe[probe.len() / 2] < self.job.timing.graph_below_us;
        }
        let mut graphs: Vec<Option<TimedGraph>> = Vec::new();
        if tiny {
            for (i, l) in launches.iter_mut().enumerate() {
                match capture_graph(self.s, &mut **l, self.job.timing.flush_l2) {
                    Ok(g) => graphs.push(Some(g)),
                    Err(e) => {
                        notes[i] =
                            Some(format!("CUDA graph capture failed ({e}); timed per launch"));
                        graphs.push(None);
                    }
                }
            }
            if graphs.iter().any(Option::is_none) {
                // Contenders are timed alike or not at all: one that cannot be captured
                // (cuBLAS sometimes refuses) sends everyone back to per-launch timing.
                graphs.clear();
                self.report.notes.push(
                    "tiny problem, but a contender could not be captured in a CUDA graph: every contender is timed per launch (CPU launch latency included)".into(),
                );
            } else {
                self.report.notes.push(format!(
                    "tiny problem: each sample replays a CUDA graph of {GRAPH_LAUNCHES} launches, each after an L2 flush and timed by its own event pair (no CPU launch latency)"
                ));
            }
        }
        let runs = self.job.timing.runs.max(20) as usize;
        let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); launches.len()];
        for _ in 0..runs {
            for (i, l) in launches.iter_mut().enumerate() {
                let in_graph = matches!(graphs.get(i), Some(Some(_)));
                if self.job.timing.flush_l2 && !in_graph {
                    self.s.flush_l2()?;
                }
                let t = match graphs.get(i) {
                    Some(Some(g)) => g.sample_us(self.s)?,
                    _ => self.s.time_us(&mut **l)?,
                };
                samples[i].push(t);
            }
        }
        drop(graphs);
        drop(launches);
        let mut stats: Vec<Stats> = samples
            .iter()
            .filter_map(|s| Stats::from_samples(s))
            .collect();
        let flops = self.workload.flops(shape);
        let min_bytes = self.workload.min_bytes(shape);
        let ceil = self.report.ceilings.clone();
        let floor_s = ceil.as_ref().map_or(0.0, |c| {
            self.workload
                .roofline_floor_s(shape, c.copy_bytes_per_s, c.peak_flops_per_s)
        });
        let candidate = if kernel.is_some() && !stats.is_empty() {
            Some(stats.remove(0))
        } else {
            None
        };
        let cand_names = if kernel.is_some() { 1 } else { 0 };
        let baselines = stats
            .into_iter()
            .zip(
                names
                    .into_iter()
                    .skip(cand_names)
                    .zip(notes.into_iter().skip(cand_names)),
            )
            .map(|(st, (name, note))| BaselineTiming {
                speedup: candidate.as_ref().map(|c| st.median_us / c.median_us),
                name,
                stats: st,
                note,
            })
            .collect();
        let med = candidate.as_ref().map(|c| c.median_us * 1e-6);
        Ok(TimingReport {
            shape: *shape,
            flops,
            min_bytes,
            floor_s,
            roofline_fraction: med.map(|t| floor_s / t),
            achieved_tflops: med.map(|t| flops / t / 1e12),
            achieved_tb_per_s: med.map(|t| min_bytes / t / 1e12),
            candidate,
            baselines,
        })
    }
}

/// Errors at rounding level (the median sampled entry off by less than 1e-3 of its
/// terms' magnitude) mean lower-precision arithmetic; larger ones mean a wrong result.
fn rounding_level(f: &Fp64Check) -> bool {
    f.failed > 0 && f.median_normalized_error < 1e-3
}

/// Launches per CUDA graph when a problem is too small to time one launch at a time.
const GRAPH_LAUNCHES: usize = 20;

/// A captured graph of GRAPH_LAUNCHES launches, each preceded by the L2 flush (when asked)
/// and bracketed by its own pair of event-record nodes: replaying it times every launch
/// on a cold L2 without the CPU's launch latency.
struct TimedGraph {
    graph: cudarc::driver::CudaGraph,
    events: Vec<(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent)>,
}

impl TimedGraph {
    /// Replays the graph; returns the mean time of one launch in microseconds.
    fn sample_us(&self, s: &Session) -> Result<f64, CudaFailure> {
        self.graph.launch()?;
        s.sync()?;
        let mut total = 0.0;
        for (a, b) in &self.events {
            total += a.elapsed_ms(b)? as f64 * 1000.0;
        }
        Ok(total / self.events.len() as f64)
    }
}

/// Captures GRAPH_LAUNCHES calls of `launch` on the session's stream into a timed graph.
fn capture_graph(
    s: &Session,
    launch: &mut dyn FnMut() -> Result<(), CudaFailure>,
    flush_l2: bool,
) -> Result<TimedGraph, CudaFailure> {
    use cudarc::driver::sys;
    let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let mut events = Vec::with_capacity(GRAPH_LAUNCHES);
    for _ in 0..GRAPH_LAUNCHES {
        events.push((s.ctx.new_event(flags)?, s.ctx.new_event(flags)?));
    }
    s.stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    let mut result = Ok(());
    for (a, b) in &events {
        if flush_l2 {
            result = s.flush_l2();
        }
        result = result
            .and_then(|()| Ok(a.record(&s.stream)?))
            .and_then(|()| launch())
            .and_then(|()| Ok(b.record(&s.stream)?));
        if result.is_err() {
            break;
        }
    }
    let graph = s.stream.end_capture(sys::CUgraphInstantiate_flags(0))?;
    result?;
    let graph = graph.ok_or_else(|| CudaFailure {
        code: -1,
        message: "stream capture produced no graph".into(),
    })?;
    graph.upload()?;
    let timed = TimedGraph { graph, events };
    timed.sample_us(s)?;
    Ok(timed)
}

fn precision_fault(f: &Fp64Check) -> Fault {
    fault(
        FaultKind::Precision,
        format!(
            "{} of {} sampled entries exceed the precision of the workload's arithmetic against an fp64 \
             reference (max normalized error {:.2e}, bound {:.2e}){}",
            f.failed,
            f.samples,
            f.max_normalized_error,
            f.bound,
            f.hint.as_deref().map(|h| format!(": {h}")).unwrap_or_default()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roofline_ceilings_allow_3xtf32_for_fp32_gemms() {
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
        // fp32 GEMM: a third of the TF32 tensor rate (3xTF32), above the SIMT rate.
        let (f32_gemm, note) = peak_flops(&h100, ComputePipe::SimtF32, true);
        assert!((f32_gemm / 1e12 - 178.4).abs() < 1.0, "{f32_gemm} {note}");
    }

    #[test]
    fn cuda_codes_are_classified() {
        assert_eq!(classify_cuda(700, "x").kind, FaultKind::OutOfBounds);
        assert_eq!(classify_cuda(716, "x").kind, FaultKind::MisalignedAddress);
        assert_eq!(classify_cuda(719, "x").kind, FaultKind::KernelError);
        assert!(classify_cuda(700, "x")
            .message
            .contains("illegal memory access"));
    }
}
