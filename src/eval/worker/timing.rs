//! Timing: the candidate interleaved with every vendor baseline and a plain copy, in the
//! same process, with the L2 flushed (CUDA graphs when one launch is too short to time
//! alone), and the device's ceilings for the roofline floor.

use crate::eval::gpu::baseline::{self, LtPlan};
use crate::eval::gpu::data::{HostElement, GUARD_ELEMENTS};
use crate::eval::gpu::kernels::{
    ColNorm, NllPass, NormAffine, Passes, RowNorm, RowReduce, RowSoftmax, Verifier,
};
use crate::eval::gpu::session::{CudaFailure, DevBuf, Session};
use crate::eval::job::{BaselineTiming, FaultKind, Stats, TimingReport};
use crate::spec::chain::{BinOp, Chain, Op, Operand, TensorKind};
use crate::spec::{Baseline, ComputePipe, Family, Layout, NormKind, Shape, Workload};

use super::device::DeviceReference;
use super::Ctx;

/// gemm_norm's unfused norm pass: the group norm of rows, or the batch norm of columns.
enum NormPass {
    Rows(RowNorm),
    Columns(ColNorm),
}

/// Upper bound on FLOP/s for the roofline floor: SMs x boost clock x per-SM rate. An fp32
/// GEMM may legitimately run on tensor cores with error compensation: three TF32 products
/// of split operands (3xTF32), or three fp16 products of scaled split operands (3xF16), so
/// its ceiling is the largest of the SIMT rate and a third of the TF32 and 16-bit rates.
pub(super) fn peak_flops(
    info: &crate::eval::gpu::DeviceInfo,
    pipe: ComputePipe,
    gemm: bool,
) -> (f64, String) {
    let tf32 = match info.compute_capability {
        (9, _) => 2048.0,
        (8, 0) => 1024.0,
        (8, _) => 512.0,
        _ => 0.0,
    };
    let tensor16 = match info.compute_capability {
        (9, _) => 4096.0,
        (8, 0) => 2048.0,
        (8, _) => 1024.0,
        _ => 0.0,
    };
    let compensated = f64::max(tf32, tensor16) / 3.0;
    let per_sm_per_clk = match (info.compute_capability, pipe) {
        (_, ComputePipe::SimtF32) if gemm => f64::max(256.0, compensated),
        ((9, _), ComputePipe::TensorBf16 | ComputePipe::TensorF16) => 4096.0,
        ((9, _), ComputePipe::TensorTf32) => 2048.0,
        ((9, _), ComputePipe::TensorFp8) => 8192.0,
        ((8, 0), ComputePipe::TensorBf16 | ComputePipe::TensorF16) => 2048.0,
        ((8, 0), ComputePipe::TensorTf32) => 1024.0,
        ((8, _), ComputePipe::TensorBf16 | ComputePipe::TensorF16) => 1024.0,
        ((8, _), ComputePipe::TensorTf32) => 512.0,
        (_, ComputePipe::SimtF32) => 256.0,
        _ => 4096.0,
    };
    let peak = info.sm_count as f64 * info.clock_khz as f64 * 1e3 * per_sm_per_clk;
    let what = match pipe {
        ComputePipe::SimtF32 if gemm && compensated > 256.0 => {
            "fp32-accurate GEMM: three 16-bit tensor-core products of split operands (3xF16), a third of the 16-bit rate (fp32 FMA on CUDA cores is 256 FLOP/clk/SM)".to_string()
        }
        ComputePipe::SimtF32 => "fp32 FMA on CUDA cores".to_string(),
        other => format!("{other:?}, dense"),
    };
    (
        peak,
        format!(
            "{:.0} TFLOP/s = {} SMs x {:.2} GHz x {per_sm_per_clk:.0} FLOP/clk/SM ({what})",
            peak / 1e12,
            info.sm_count,
            info.clock_khz as f64 / 1e6
        ),
    )
}

/// A kernel of the unfused baseline, or None with a note that the baseline is skipped
/// (NVRTC failed): the candidate is timed all the same.
fn unfused_part<T>(notes: &mut Vec<String>, built: Result<T, CudaFailure>) -> Option<T> {
    match built {
        Ok(t) => Some(t),
        Err(e) => {
            notes.push(format!("unfused baseline skipped: {e}"));
            None
        }
    }
}

impl Ctx<'_> {
    /// Times the headline shape: the candidate (if any) interleaved with every baseline.
    pub(super) fn time<A: HostElement, D: HostElement>(
        &mut self,
        shape: &Shape,
    ) -> Result<TimingReport, CudaFailure> {
        let seed = 0x7133_u64;
        if let Some(note) = self.s.prepare_flush()? {
            self.report.notes.push(note);
        }
        // Two input sets, alternated launch by launch, so no two consecutive launches of a
        // contender see the same inputs.
        let p = self.setup::<A, D>(shape, seed)?;
        let p2 = self.setup::<A, D>(shape, seed + 1)?;
        // The validated answers of both sets, for checking every timed launch of the
        // candidate: under device validation the comparison kernels' own references
        // (the same judgement as validation's); otherwise the host reference uploaded as
        // f32, with the rounding of that conversion added to the slack.
        let checks = match (self.kernel.is_some(), &self.dev) {
            (false, _) => None,
            (true, Some(dev)) => Some(Checks::Device(Box::new([
                self.device_reference(dev, &p)?,
                self.device_reference(dev, &p2)?,
            ]))),
            (true, None) => {
                let mut sets = Vec::new();
                for q in [&p, &p2] {
                    let r = self.reference(q)?;
                    let want: Vec<f32> = r.want.iter().map(|w| *w as f32).collect();
                    let slack: Vec<f32> = r
                        .want
                        .iter()
                        .enumerate()
                        .map(|(i, w)| {
                            (r.slack.get(i).copied().unwrap_or(0.0) + w.abs() * 2f64.powi(-23))
                                as f32
                        })
                        .collect();
                    sets.push((self.s.upload(&want)?, self.s.upload(&slack)?));
                }
                Some(Checks::Host(sets))
            }
        };
        let w = self.workload;
        let params = w.params();
        let fam = w.family();
        let (dtype, out_dtype) = (A::DTYPE, D::DTYPE);
        let out_bytes = p.out_len * std::mem::size_of::<D>();
        let (m, n) = (shape.m as usize, shape.n as usize);
        let batch = shape.batch.max(1) as usize;
        // The library GEMM's output: D's size, or for gemm_reduce the whole m x n product
        // (its D is one value a row).
        let lib_len = if fam == Family::GemmReduce {
            batch * m * n
        } else {
            p.out_len
        };
        // The baselines' buffers, each at full size only where a baseline of this family
        // writes it (one element otherwise): a norm of 7.5 GB rows held six unused
        // output-sized buffers and ran out of an 80 GB GPU. `Workload::timing_buffers` says
        // which, and `Workload::device_bytes` counts the same for admission.
        let need = w.timing_buffers();
        // (A read through a view reads the view's elements, packed like D, not its input;
        // a broadcast dim's once.)
        let a_len = w.view_on(shape).map_or(p.a.len, |v| v.reads as usize);
        let in_bytes = a_len * std::mem::size_of::<A>();
        let sized = |used: bool, len: usize| if used { len } else { 1 };
        let base_out = self.s.zeros::<D>(sized(need.library_out, lib_len))?;
        // The copy baseline moves what a memory-bound op moves, reading and writing half of
        // its input and output bytes each (bf16 in, f32 out: 3 bytes an element), from the
        // larger of the input and a baseline output into its own buffer.
        // (A reduction reads k elements for each one it writes: A's own length.) The chain's
        // tensors are read too (a loss's target as large as A): their bytes count, and the
        // copy reads the largest tensor where that holds the bytes and A does not.
        let tensor_bytes: usize = p.tensors.iter().map(|t| t.buf.len).sum();
        let largest_tensor = p
            .tensors
            .iter()
            .max_by_key(|t| t.buf.len)
            .map(|t| (t.buf.ptr, t.buf.len));
        // (A cross entropy's int64 targets are read too.)
        let target_bytes = p.targets.as_ref().map_or(0, |t| t.len * 8);
        let mut copy_bytes = (in_bytes + tensor_bytes + target_bytes + out_bytes) / 2;
        let base_out2 = self.s.zeros::<D>(sized(
            need.second_output(in_bytes as f64, out_bytes as f64),
            lib_len,
        ))?;
        // Where the copy reads from when A is smaller than the copy: a tensor that holds it,
        // else a baseline output (allocated at D's size when D is larger than A), else A
        // with the copy shortened to A (a faster copy: a lower fraction, never a higher one).
        let copy_from_tensor = match largest_tensor {
            Some((ptr, len)) if in_bytes < copy_bytes && len >= copy_bytes => Some(ptr),
            _ => None,
        };
        if in_bytes < copy_bytes
            && copy_from_tensor.is_none()
            && !need.second_output(in_bytes as f64, out_bytes as f64)
        {
            copy_bytes = in_bytes;
        }
        if copy_from_tensor.is_none() && in_bytes < copy_bytes {
            copy_bytes = copy_bytes.min(out_bytes.max(in_bytes));
        }
        let copy_dst = if need.copy {
            Some(self.s.zeros::<u8>(copy_bytes)?)
        } else {
            None
        };
        let scratch = (
            self.s.zeros::<D>(sized(need.scratch, lib_len))?,
            self.s.zeros::<D>(sized(need.scratch, lib_len))?,
        );
        let saved: Vec<DevBuf<D>> = (0..unfused_chain(w).map_or(0, |c| c.saved.len()))
            .map(|_| self.s.zeros::<D>(lib_len))
            .collect::<Result<_, _>>()?;
        // gemm_reduce's unfused tail: the reduction's output and the [[after]] passes'
        // buffers (one value a row).
        let red_bufs = (
            self.s.zeros::<D>(sized(need.reduce_tail, p.out_len))?,
            self.s.zeros::<D>(sized(need.reduce_tail, p.out_len))?,
            self.s.zeros::<D>(sized(need.reduce_tail, p.out_len))?,
        );
        // gemm_norm: the norm's output and the passes after it, at D's size.
        let after_saved_len = if fam == Family::GemmNorm {
            w.chain().saved.len()
        } else {
            w.after_chain().saved.len()
        };
        let after_saved: Vec<DevBuf<D>> = (0..after_saved_len)
            .map(|_| self.s.zeros::<D>(p.out_len))
            .collect::<Result<_, _>>()?;
        let after_saved_ptrs: Vec<u64> = after_saved.iter().map(|b| b.ptr).collect();
        let saved_ptrs: Vec<u64> = saved.iter().map(|b| b.ptr).collect();
        let lt_ws_bytes: usize = 64 << 20;
        let lt_ws = self.s.zeros::<u8>(lt_ws_bytes)?;
        let scales = if dtype.is_fp8() {
            Some(
                self.s
                    .upload(&[params.scale_a, params.scale_b, params.scale_d])?,
            )
        } else {
            None
        };

        let mut cp = self.problem(&p);
        let mut cp2 = self.problem(&p2);
        let kernel = self.kernel;
        let mut _ws = None;
        if let Some(kernel) = kernel {
            _ws = self.workspace(kernel, &mut cp).map_err(|f| CudaFailure {
                code: -1,
                message: f.message,
            })?;
            cp2.workspace = cp.workspace;
            cp2.workspace_bytes = cp.workspace_bytes;
        }
        let stream = self.s.stream.cu_stream();
        let libs = self.libs;
        let a = p.a.ptr;
        let b = p.b.as_ref().map_or(0, |b| b.ptr);
        let b2 = p.b2.as_ref().map_or(0, |b| b.ptr);
        // The second set's operands (the contenders alternate between the two).
        let a_2 = p2.a.ptr;
        let b_2 = p2.b.as_ref().map_or(0, |b| b.ptr);
        let b2_2 = p2.b2.as_ref().map_or(0, |b| b.ptr);
        let bias = if fam == Family::GemmBiasAct && params.bias {
            p.tensors.first().map_or(0, |t| t.buf.ptr)
        } else {
            0
        };
        let s_ref: &Session = self.s;
        let allow_tf32 = w.allow_tf32();
        let wants = |bl: Baseline| w.target().baselines.contains(&bl);
        let scale = params.alpha * params.scale_a * params.scale_b;
        let can_cublas = libs.has_cublas() && !dtype.is_fp8();

        // The unfused sequence's elementwise passes, one per op after the library op
        // (compiled with NVRTC; skipped, with a note, when that fails).
        let lay_c = if fam.is_gemm() {
            w.layouts().c
        } else {
            Layout::Row
        };
        // A broadcast operand's index map on this shape (the chain's tensors follow the
        // [[before]] ones).
        let maps: Vec<_> = p
            .tensors
            .iter()
            .skip(w.before_chain().tensors.len())
            .map(|t| t.bmap)
            .collect();
        // A softmax over dims with an index op: its passes see the rows as matrices of the
        // last two dims, as torch's triu / tril do.
        let tri = w.tri_rows(shape) as usize;
        let pass_dims = if tri > 0 && w.chain().positional() && m % tri == 0 {
            (tri, n, batch * m / tri)
        } else {
            (m, n, batch)
        };
        let passes = match unfused_chain(w) {
            Some(c) if !c.steps.is_empty() => unfused_part(
                &mut self.report.notes,
                Passes::compile(s_ref, &c, out_dtype, pass_dims, lay_c, &maps),
            ),
            _ => None,
        };
        // A cross entropy's unfused sequence, as PyTorch runs it: a row log-softmax of the
        // logits into a buffer of their size, then the NLL of each row's target.
        let ce_unfused = if params.reduce.reads_targets() && wants(Baseline::Unfused) {
            let k = shape.k as usize;
            let compiled = RowSoftmax::compile(s_ref, dtype, true)
                .and_then(|lsm| Ok((lsm, NllPass::compile(s_ref, dtype, out_dtype)?)))
                .and_then(|(lsm, nll)| Ok((lsm, nll, self.s.zeros::<A>(batch * m * k)?)));
            unfused_part(&mut self.report.notes, compiled)
        } else {
            None
        };
        let pass_tensors: Vec<u64> = if fam == Family::GemmGlu {
            vec![base_out2.ptr]
        } else {
            p.tensors.iter().map(|t| t.buf.ptr).collect()
        };

        // cuBLASLt: the fastest of its heuristic's algorithms.
        // fp8: the scales of A and B folded into alpha (`scale`), as for every contender.
        let lt_alpha = scale;
        let lt_epilogue = fam == Family::GemmBiasAct && w.chain().steps.len() <= 2;
        let mut lt: Option<(LtPlan, usize)> = None;
        // The chosen cuBLASLt algorithm's median of three, to pick the unfused sequence's GEMM.
        let mut lt_us = f64::INFINITY;
        if let Some(g) = p.gemm.filter(|_| libs.has_cublaslt()) {
            if wants(Baseline::Cublaslt) || dtype.is_fp8() {
                let epi = lt_epilogue.then_some((params.activation, bias));
                let d_scale = scales
                    .as_ref()
                    .filter(|_| out_dtype.is_fp8())
                    .map(|s| s.ptr + 8);
                match libs.lt_plan(
                    &g,
                    dtype,
                    out_dtype,
                    allow_tf32,
                    epi,
                    d_scale,
                    lt_ws.ptr,
                    lt_ws_bytes,
                ) {
                    Ok(plan) if !plan.algos.is_empty() => {
                        let mut best = (f64::INFINITY, 0usize);
                        for i in 0..plan.algos.len() {
                            let mut ts = Vec::new();
                            for _ in 0..3 {
                                let d = base_out.ptr;
                                if let Ok(t) =
                                    s_ref.time_us(&mut || plan.run(s_ref, i, a, b, d, lt_alpha))
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
                        lt = Some((plan, best.1));
                        lt_us = best.0;
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
        // gemm_reduce: a row reduction after the chain's passes, then one pass per
        // [[after]] op on its m values.
        let (reduce_pass, after_passes) = if fam == Family::GemmReduce && wants(Baseline::Unfused) {
            let r = RowReduce::compile(s_ref, out_dtype, params.reduce.abi_value());
            let a = if w.after_chain().steps.is_empty() {
                Ok(None)
            } else {
                Passes::compile(
                    s_ref,
                    w.after_chain(),
                    out_dtype,
                    (m, 1, batch),
                    Layout::Row,
                    &[],
                )
                .map(Some)
            };
            unfused_part(&mut self.report.notes, r.and_then(|r| a.map(|a| (r, a))))
                .map_or((None, None), |(r, a)| (Some(r), a))
        } else {
            (None, None)
        };
        // gemm_norm: the group norm (with the per-channel weight and bias the chain after
        // it starts with, as PyTorch's GroupNorm applies them), then one pass per op left.
        let nb = w.before_chain().tensors.len();
        let norm_tail = if fam == Family::GemmNorm && wants(Baseline::Unfused) {
            let (affine, affine_tensors, taken) = NormAffine::of(w.chain());
            let mut rest = w.chain().clone();
            rest.steps.drain(..taken);
            let norm = if params.norm == NormKind::Batch {
                ColNorm::compile(s_ref, out_dtype, params.eps, affine, (batch, m, n))
                    .map(NormPass::Columns)
            } else {
                RowNorm::compile(
                    s_ref,
                    out_dtype,
                    params.norm.abi_value(),
                    params.eps,
                    affine,
                )
                .map(NormPass::Rows)
            };
            let after = if rest.steps.is_empty() {
                Ok(None)
            } else {
                Passes::compile(s_ref, &rest, out_dtype, (m, n, batch), Layout::Row, &[]).map(Some)
            };
            let ptr = |i: Option<usize>| {
                i.and_then(|i| p.tensors.get(nb + i))
                    .map_or(0, |t| t.buf.ptr)
            };
            unfused_part(
                &mut self.report.notes,
                norm.and_then(|k| after.map(|a| (k, a))),
            )
            .map(|(k, a)| (k, a, (ptr(affine_tensors[0]), ptr(affine_tensors[1]))))
        } else {
            None
        };
        let after_tensors: Vec<u64> = p.tensors.iter().skip(nb).map(|t| t.buf.ptr).collect();
        // The softmax pass after the ops' passes (gemm_softmax, and softmax / log_softmax
        // with ops before it).
        let softmax_after_ops =
            matches!(fam, Family::Softmax | Family::LogSoftmax) && !w.chain().is_identity();
        let softmax =
            if (fam == Family::GemmSoftmax || softmax_after_ops) && wants(Baseline::Unfused) {
                unfused_part(
                    &mut self.report.notes,
                    RowSoftmax::compile(
                        s_ref,
                        out_dtype,
                        params.log_softmax || fam == Family::LogSoftmax,
                    ),
                )
            } else {
                None
            };

        // The input set the candidate's last launch used, and its output (poisoned before
        // every timed launch, outside the event pair, and checked after it).
        let last_set = std::cell::Cell::new(0usize);
        let outs = [p.out.at(GUARD_ELEMENTS), p2.out.at(GUARD_ELEMENTS)];
        let poison_bits = D::poison().bits();
        let elem = std::mem::size_of::<D>();
        let mut names: Vec<String> = Vec::new();
        let mut notes: Vec<Option<String>> = Vec::new();
        type Launch<'x> = Box<dyn FnMut() -> Result<(), CudaFailure> + 'x>;
        let mut launches: Vec<Launch> = Vec::new();
        // Per contender, work done before its event pair (outside the time): e.g. C
        // copied into a library GEMM's in-place output when beta != 0.
        let mut preps: Vec<Option<Launch>> = Vec::new();
        if let Some(kernel) = kernel {
            names.push("candidate".into());
            notes.push(None);
            let (cp, cp2) = (cp, cp2);
            let mut k = 0usize;
            let last = &last_set;
            launches.push(Box::new(move || {
                let set = k % 2;
                k += 1;
                last.set(set);
                let problem = if set == 0 { &cp } else { &cp2 };
                // SAFETY: as in `launch`: valid problem, live buffers, our stream.
                let rc = unsafe { kernel.cutesmith_launch(problem, stream as _) };
                if rc != 0 {
                    return Err(CudaFailure {
                        code: rc,
                        message: format!("cutesmith_launch returned {rc}"),
                    });
                }
                Ok(())
            }));
        }
        // beta != 0: the in-place library GEMM starts from C (of the input set the next
        // launch uses), copied outside the timed region.
        let c_sets = [p.c.as_ref().map(|c| c.ptr), p2.c.as_ref().map(|c| c.ptr)];
        let c_into = |d: u64| -> Option<Launch> {
            let (Some(c1), Some(c2)) = (c_sets[0], c_sets[1]) else {
                return None;
            };
            let mut k = 0usize;
            Some(Box::new(move || {
                let c = if k % 2 == 0 { c1 } else { c2 };
                k += 1;
                baseline::copy(s_ref, d, c, out_bytes)
            }))
        };
        let lib_beta = if c_sets[0].is_some() {
            params.beta
        } else {
            0.0
        };
        match p.gemm {
            Some(g) => {
                let glu = fam == Family::GemmGlu;
                let (d, d2) = (base_out.ptr, base_out2.ptr);
                // The two input sets (A, B, B2) the library launches alternate between.
                let sets = [(a, b, b2), (a_2, b_2, b2_2)];
                // `tf32`: TF32 tensor cores even where the workload forbids them (the
                // reference-only row beside an fp32 workload's baselines).
                let rotating_gemm = move |tf32: bool| {
                    let mut k = 0usize;
                    move || -> Result<(), CudaFailure> {
                        let (a, b, b2) = sets[k % 2];
                        k += 1;
                        libs.cublas_gemm(
                            &g,
                            dtype,
                            out_dtype,
                            d,
                            a,
                            b,
                            scale,
                            lib_beta,
                            allow_tf32 || tf32,
                        )?;
                        if glu {
                            libs.cublas_gemm(
                                &g,
                                dtype,
                                out_dtype,
                                d2,
                                a,
                                b2,
                                scale,
                                0.0,
                                allow_tf32 || tf32,
                            )?;
                        }
                        Ok(())
                    }
                };
                if can_cublas && wants(Baseline::Cublas) {
                    names.push("cublas".into());
                    notes.push(match fam {
                        Family::GemmBiasAct => Some("GEMM only: no bias or activation".into()),
                        Family::Gemm if !w.chain().is_identity() => {
                            Some("GEMM only: no epilogue chain".into())
                        }
                        Family::GemmGlu => Some("the two GEMMs only: no gate, no product".into()),
                        Family::GemmSoftmax => Some("GEMM only: no softmax".into()),
                        Family::GemmReduce => {
                            Some("GEMM only (D m x n): no chain, no reduction".into())
                        }
                        _ => None,
                    });
                    preps.resize_with(launches.len(), || None);
                    preps.push(c_into(d));
                    launches.push(Box::new(rotating_gemm(false)));
                    // An fp32 workload: cuBLAS on TF32 tensor cores too, for reference only
                    // (not fp32-accurate; no speedup is taken against it).
                    if dtype == crate::spec::DType::F32 && !allow_tf32 {
                        names.push(crate::eval::job::TF32_REFERENCE.into());
                        notes.push(Some(
                            "TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32): not fp32-accurate, for reference only".into(),
                        ));
                        preps.resize_with(launches.len(), || None);
                        preps.push(c_into(d));
                        launches.push(Box::new(rotating_gemm(true)));
                    }
                }
                if let Some((plan, i)) = &lt {
                    let i = *i;
                    names.push(format!(
                        "cublaslt (best of {} heuristic algorithms)",
                        plan.algos.len()
                    ));
                    notes.push(if fam == Family::GemmBiasAct && !lt_epilogue {
                        Some("GEMM only: the chain is longer than cuBLASLt's epilogues".into())
                    } else if fam == Family::GemmGlu {
                        Some("the two GEMMs only: no gate, no product".into())
                    } else if fam != Family::Gemm && fam != Family::GemmBiasAct {
                        Some("GEMM only".into())
                    } else {
                        plan.note.clone()
                    });
                    launches.push(Box::new(rotating_lt(
                        plan,
                        i,
                        s_ref,
                        sets,
                        (d, d2, glu),
                        lt_alpha,
                    )));
                }
                // The unfused library sequence: the faster library GEMM(s) (cuBLAS or the
                // chosen cuBLAS Lt algorithm, by a median of three each, as a framework's
                // tuned GEMM would be), then a row softmax or one elementwise pass per op.
                let tail = passes.as_ref().is_some_and(|p| !p.is_empty())
                    || softmax.is_some()
                    || reduce_pass.is_some()
                    || norm_tail.is_some();
                let cublas_us = if tail && can_cublas && lt.is_some() && wants(Baseline::Unfused) {
                    let mut probe = rotating_gemm(false);
                    let mut ts: Vec<f64> = (0..3)
                        .filter_map(|_| s_ref.time_us(&mut probe).ok())
                        .collect();
                    ts.sort_by(f64::total_cmp);
                    ts.get(ts.len() / 2).copied().unwrap_or(f64::INFINITY)
                } else {
                    f64::INFINITY
                };
                // cuBLAS Lt is run without a C term here: with one, cuBLAS it is, where
                // there is cuBLAS (fp8 has only cuBLAS Lt).
                let use_lt =
                    lt.is_some() && (!can_cublas || (lib_beta == 0.0 && lt_us < cublas_us));
                let lib = if use_lt { "cuBLASLt" } else { "cuBLAS" };
                let first: Option<Launch> = if !tail {
                    None
                } else if !use_lt {
                    can_cublas.then(|| -> Launch { Box::new(rotating_gemm(false)) })
                } else {
                    lt.as_ref().map(|(plan, i)| -> Launch {
                        Box::new(rotating_lt(plan, *i, s_ref, sets, (d, d2, glu), lt_alpha))
                    })
                };
                if let Some(mut first) = first.filter(|_| wants(Baseline::Unfused)) {
                    let what = match (&passes, &softmax) {
                        (ps, Some(_)) => format!(
                            "the library GEMM ({lib}), then {}a row softmax pass (a block per row, online max and sum, 16-byte vectors)",
                            match ps.as_ref().map_or(0, |p| p.len()) {
                                0 => String::new(),
                                1 => "1 elementwise pass, ".into(),
                                k => format!("{k} elementwise passes, "),
                            }
                        ),
                        (ps, None) if norm_tail.is_some() => format!(
                            "the library GEMM ({lib}), then {} elementwise passes, {} and {} passes after it",
                            ps.as_ref().map_or(0, |p| p.len()),
                            if params.norm == NormKind::Batch {
                                "a batch norm (each column's statistics over slices of 128 rows, merged, then one write with the weight and bias)"
                            } else {
                                "a group norm (a block per group, the weight and bias in its write)"
                            },
                            norm_tail.as_ref().and_then(|t| t.1.as_ref()).map_or(0, |p| p.len())
                        ),
                        (ps, None) if reduce_pass.is_some() => format!(
                            "the library GEMM ({lib}), then {} elementwise passes, a row reduction (a block per row) and {} passes on its result",
                            ps.as_ref().map_or(0, |p| p.len()),
                            after_passes.as_ref().map_or(0, |p| p.len())
                        ),
                        (Some(ps), None) => format!(
                            "the library GEMM{} ({lib}), then {} elementwise pass{}",
                            if glu { "s" } else { "" },
                            ps.len(),
                            if ps.len() == 1 { "" } else { "es" }
                        ),
                        _ => String::new(),
                    };
                    names.push("unfused".into());
                    notes.push(Some(format!("{what}, as a framework runs them")));
                    preps.resize_with(launches.len(), || None);
                    preps.push(if use_lt { None } else { c_into(d) });
                    let sc = (scratch.0.ptr, scratch.1.ptr);
                    let (ps, sm) = (passes.as_ref(), softmax.as_ref());
                    let (pt, sp) = (&pass_tensors, &saved_ptrs);
                    let (rp, ap, asp) = (
                        reduce_pass.as_ref(),
                        after_passes.as_ref(),
                        &after_saved_ptrs,
                    );
                    let rb = (red_bufs.0.ptr, red_bufs.1.ptr, red_bufs.2.ptr);
                    let (nt, at) = (norm_tail.as_ref(), &after_tensors);
                    let groups = params.groups.max(1) as usize;
                    launches.push(Box::new(move || {
                        first()?;
                        // The chain's passes, then (gemm_softmax) the softmax of their
                        // result, into the other scratch buffer.
                        let x = match ps {
                            Some(ps) => ps.run(s_ref, d, pt, sc, sp)?,
                            None => d,
                        };
                        if let Some(k) = sm {
                            let y = if x == sc.0 { sc.1 } else { sc.0 };
                            k.run(s_ref, x, y, batch * m, n)?;
                        }
                        // (gemm_reduce) the row reduction, then the [[after]] passes.
                        if let Some(r) = rp {
                            r.run(s_ref, x, rb.0, batch * m, n)?;
                            if let Some(a) = ap {
                                a.run(s_ref, rb.0, &[], (rb.1, rb.2), asp)?;
                            }
                        }
                        // (gemm_norm) the group norm, then the passes after it.
                        if let Some((k, a, affine)) = nt {
                            match k {
                                NormPass::Rows(k) => k.run(
                                    s_ref,
                                    x,
                                    rb.0,
                                    batch * m * groups,
                                    n / groups,
                                    groups,
                                    *affine,
                                )?,
                                NormPass::Columns(k) => {
                                    k.run(s_ref, x, rb.0, (batch, m, n), *affine)?
                                }
                            }
                            if let Some(a) = a {
                                a.run(s_ref, rb.0, at, (rb.1, rb.2), asp)?;
                            }
                        }
                        Ok(())
                    }));
                }
            }
            None => {
                let single_act = w.is_single_activation();
                let op = match fam {
                    Family::Softmax | Family::LogSoftmax => {
                        Some(libs.cudnn_softmax(dtype, m, n, fam == Family::LogSoftmax))
                    }
                    _ if single_act => Some(libs.cudnn_activation(params.activation, dtype, m, n)),
                    _ => None,
                };
                if wants(Baseline::Cudnn) {
                    match op {
                        Some(Ok(op)) => {
                            names.push("cudnn".into());
                            notes.push(None);
                            let d = base_out.ptr;
                            let mut k = 0usize;
                            launches.push(Box::new(move || {
                                k += 1;
                                op.run(if k % 2 == 1 { a } else { a_2 }, d)
                            }));
                        }
                        Some(Err(e)) => self
                            .report
                            .notes
                            .push(format!("cuDNN baseline skipped: {}", e.message)),
                        None => {}
                    }
                }
                if let Some(ps) = passes
                    .as_ref()
                    .filter(|_| !single_act && wants(Baseline::Unfused))
                {
                    names.push("unfused".into());
                    notes.push(Some(match &softmax {
                        Some(_) => format!(
                            "{} elementwise pass{}, one per op, then a row softmax pass (a block per row, online max and sum, 16-byte vectors), as a framework runs them",
                            ps.len(),
                            if ps.len() == 1 { "" } else { "es" }
                        ),
                        None => format!(
                            "{} elementwise passes, one per op, as a framework runs them",
                            ps.len()
                        ),
                    }));
                    let sc = (scratch.0.ptr, scratch.1.ptr);
                    let (pt, sp, sm) = (&pass_tensors, &saved_ptrs, softmax.as_ref());
                    let mut k = 0usize;
                    launches.push(Box::new(move || {
                        k += 1;
                        let x = ps.run(s_ref, if k % 2 == 1 { a } else { a_2 }, pt, sc, sp)?;
                        // softmax / log_softmax: the row softmax of the passes' result.
                        if let Some(sm) = sm {
                            let y = if x == sc.0 { sc.1 } else { sc.0 };
                            sm.run(s_ref, x, y, batch * m, n)?;
                        }
                        Ok(())
                    }));
                }
                if let Some((lsm, nll, logp)) = ce_unfused.as_ref() {
                    names.push("unfused".into());
                    notes.push(Some(
                        "a row log-softmax into a buffer of the logits' size, then the NLL of \
                         each row's target, as PyTorch's cross_entropy runs"
                            .into(),
                    ));
                    let targets =
                        |q: &super::problem::Problem<A, D>| q.targets.as_ref().map_or(0, |t| t.ptr);
                    let (t1, t2, d, lp) = (targets(&p), targets(&p2), base_out.ptr, logp.ptr);
                    let (k, ignore, total) = (
                        shape.k as usize,
                        params.ignore_index,
                        params.total.abi_value(),
                    );
                    let mut i = 0usize;
                    launches.push(Box::new(move || {
                        i += 1;
                        let (x, t) = if i % 2 == 1 { (a, t1) } else { (a_2, t2) };
                        lsm.run(s_ref, x, lp, batch * m, k)?;
                        nll.run(s_ref, lp, t, d, (batch, m, k), ignore, total)
                    }));
                }
                names.push("copy".into());
                notes.push(Some(
                    "device-to-device copy of the same bytes: the bandwidth ceiling".into(),
                ));
                let (d, from_out) = (copy_dst.as_ref().map_or(0, |b| b.ptr), base_out2.ptr);
                let mut k = 0usize;
                launches.push(Box::new(move || {
                    k += 1;
                    let src = if let Some(t) = copy_from_tensor {
                        t
                    } else if in_bytes < copy_bytes {
                        from_out
                    } else if k % 2 == 1 {
                        a
                    } else {
                        a_2
                    };
                    baseline::copy(s_ref, d, src, copy_bytes)
                }));
            }
        }
        preps.resize_with(launches.len(), || None);
        // Warm up, then interleave: candidate, baseline 1, baseline 2, ... per round. A
        // baseline that fails here is dropped with a note (a library refusing a problem is
        // not the candidate's fault); the candidate's own failure ends the timing.
        let mut keep = vec![true; launches.len()];
        for (i, l) in launches.iter_mut().enumerate() {
            for _ in 0..self.job.timing.warmup.max(1) {
                let prep = preps[i].as_mut().map_or(Ok(()), |p| p());
                if let Err(e) = prep.and_then(|()| l()).and_then(|()| self.s.sync()) {
                    if i == 0 && kernel.is_some() {
                        return Err(e);
                    }
                    self.report
                        .notes
                        .push(format!("baseline {} dropped: {e}", names[i]));
                    keep[i] = false;
                    break;
                }
            }
        }
        let mut it = keep.iter();
        launches.retain(|_| *it.next().unwrap_or(&true));
        let mut it = keep.iter();
        names.retain(|_| *it.next().unwrap_or(&true));
        let mut it = keep.iter();
        notes.retain(|_| *it.next().unwrap_or(&true));
        let mut it = keep.iter();
        preps.retain(|_| *it.next().unwrap_or(&true));
        self.s.sync()?;
        // Tiny problems: launch overhead would dominate single launches, so each timed
        // sample replays a CUDA graph of GRAPH_LAUNCHES launches (L2 flushed per graph).
        // The mode is decided once for all contenders, so they are timed alike.
        let mut tiny = false;
        for (l, prep) in launches.iter_mut().zip(preps.iter_mut()) {
            let mut probe = Vec::new();
            for _ in 0..5 {
                if let Some(p) = prep {
                    p()?;
                }
                probe.push(self.s.time_us(&mut **l)?);
            }
            probe.sort_by(f64::total_cmp);
            tiny |= probe[probe.len() / 2] < self.job.timing.graph_below_us;
        }
        let mut graphs: Vec<Option<TimedGraph>> = Vec::new();
        if tiny {
            for (i, (l, prep)) in launches.iter_mut().zip(preps.iter_mut()).enumerate() {
                match capture_graph(
                    self.s,
                    &mut **l,
                    prep.as_deref_mut(),
                    self.job.timing.flush_l2,
                ) {
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
        // Every timed launch of the candidate is checked: its output poisoned before the
        // event pair, compared with the validated answer of its input set after it, on
        // the device (two counters per launch: outside the tolerance, still poison).
        let verifier = match &checks {
            Some(Checks::Device(_)) => None,
            Some(Checks::Host(_)) => match Verifier::compile(self.s, D::DTYPE) {
                Ok(v) => Some(v),
                Err(e) => {
                    self.report.notes.push(format!(
                        "timed launches NOT verified: the verifier failed to compile: {e}"
                    ));
                    None
                }
            },
            None => None,
        };
        let counts = self.s.zeros::<u64>(2 * runs * MAX_BATCHES)?;
        let vt = w.tolerance().at(shape);
        let tol = (vt.rtol as f32, vt.atol as f32);
        // Batches of `runs` interleaved rounds: a batch in which some contender's samples
        // spread too widely (a disturbed machine) is timed again, and the quietest batch
        // stands for every contender (see `quietest_batch`).
        let mut batches: Vec<Vec<Vec<f64>>> = Vec::new();
        let judged = usize::from(kernel.is_some() && launches.len() > 1);
        for batch in 0..MAX_BATCHES {
            let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); launches.len()];
            for run in 0..runs {
                let slot = batch * runs + run;
                for (i, l) in launches.iter_mut().enumerate() {
                    let in_graph = matches!(graphs.get(i), Some(Some(_)));
                    let checked = i == 0 && (verifier.is_some() || self.dev.is_some());
                    if checked {
                        for o in outs {
                            self.s.fill_bits(o, p.out_len, elem, poison_bits)?;
                        }
                    }
                    if let (false, Some(p)) = (in_graph, preps[i].as_mut()) {
                        p()?;
                    }
                    if self.job.timing.flush_l2 && !in_graph {
                        self.s.flush_l2()?;
                    }
                    let t = match graphs.get(i) {
                        Some(Some(g)) => g.sample_us(self.s)?,
                        _ => self.s.time_us(&mut **l)?,
                    };
                    samples[i].push(t);
                    let set = last_set.get();
                    match (checked, &checks, &verifier, &self.dev) {
                        (true, Some(Checks::Host(sets)), Some(v), _) => {
                            let (want, slack) = &sets[set];
                            v.run(
                                self.s,
                                outs[set],
                                want.ptr,
                                slack.ptr,
                                p.out_len,
                                tol,
                                counts.at(2 * slot),
                            )?;
                        }
                        (true, Some(Checks::Device(refs)), _, Some(dev)) => {
                            let mut args = refs[set].args;
                            args.got = outs[set];
                            dev.checker.count(self.s, &args, counts.at(2 * slot))?;
                        }
                        _ => {}
                    }
                }
            }
            // The baselines' spreads decide (all contenders' without a candidate): a
            // candidate's own noise is its own, and must not buy it another batch.
            let quiet = widest_spread(&samples[judged..]) <= RETIME_SPREAD;
            batches.push(samples);
            if quiet {
                break;
            }
        }
        drop(graphs);
        drop(launches);
        if verifier.is_some() || matches!(checks, Some(Checks::Device(_))) {
            let mut c = self.s.download(&counts)?;
            c.truncate(2 * runs * batches.len());
            match timing_verdict(&c, p.out_len) {
                Ok(note) => self.report.notes.push(note),
                Err(f) => self.report.fault = Some(f),
            }
        }
        let (kept, retimed) = quietest_batch(&batches, &names, judged);
        self.report.notes.extend(retimed.clone());
        let mut stats: Vec<Stats> = batches
            .swap_remove(kept)
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
            retimed,
        })
    }
}

/// The validated answers every timed launch of the candidate is checked against, per
/// input set.
enum Checks {
    /// The comparison kernels' references (device validation).
    Device(Box<[DeviceReference; 2]>),
    /// The host reference as f32 want and slack arrays on the device.
    Host(Vec<(DevBuf<f32>, DevBuf<f32>)>),
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

/// Records `event` on the session's stream as an event-record node of the graph being
/// captured. A plain record during capture only marks a point for other streams to wait
/// on and adds no node: the event is never recorded when the graph runs, and reading its
/// time fails with CUDA_ERROR_INVALID_VALUE.
fn record_node(event: &cudarc::driver::CudaEvent, s: &Session) -> Result<(), CudaFailure> {
    use cudarc::driver::sys;
    // SAFETY: a live event of the session's context and the session's live stream.
    unsafe {
        sys::cuEventRecordWithFlags(
            event.cu_event(),
            s.stream.cu_stream(),
            sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32,
        )
    }
    .result()?;
    Ok(())
}

/// Captures GRAPH_LAUNCHES calls of `launch` on the session's stream into a timed graph.
fn capture_graph(
    s: &Session,
    launch: &mut dyn FnMut() -> Result<(), CudaFailure>,
    mut prep: Option<&mut (dyn FnMut() -> Result<(), CudaFailure> + '_)>,
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
        if let Some(p) = prep.as_mut() {
            result = p();
        }
        if flush_l2 {
            result = result.and_then(|()| s.flush_l2());
        }
        result = result
            .and_then(|()| record_node(a, s))
            .and_then(|()| launch())
            .and_then(|()| record_node(b, s));
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

/// A batch of timed rounds in which some baseline's samples (every contender's without a
/// candidate) spread wider than this ((p90 - p10) / median) is timed again. Undisturbed batches spread 0.3-9% on an H100
/// (`bench/llm-run2-h100.json`); one disturbed batch there spread 101% and put a candidate at
/// 51.5 us that the batch before had timed at 25.1.
pub(super) const RETIME_SPREAD: f64 = 0.25;
/// At most this many batches are timed.
pub(super) const MAX_BATCHES: usize = 3;

/// The widest spread of any contender's samples in one batch (0 with no samples).
pub(super) fn widest_spread(samples: &[Vec<f64>]) -> f64 {
    samples
        .iter()
        .filter_map(|s| Stats::from_samples(s))
        .map(|st| st.spread)
        .fold(0.0, f64::max)
}

/// The batch whose widest spread among the contenders from index `judged` on is the
/// smallest (the first at a tie), and a note when there was more than one. Every
/// contender's figures come from that one batch, in which they ran interleaved. The
/// choice looks at how quiet the machine was for the baselines (`judged` = 1 leaves the
/// candidate out), never at who was faster: a candidate cannot make a batch look disturbed
/// by being noisy itself.
pub(super) fn quietest_batch(
    batches: &[Vec<Vec<f64>>],
    names: &[String],
    judged: usize,
) -> (usize, Option<String>) {
    let spreads: Vec<f64> = batches
        .iter()
        .map(|b| widest_spread(b.get(judged..).unwrap_or(&[])))
        .collect();
    let kept = spreads
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i);
    if batches.len() < 2 {
        return (kept, None);
    }
    let noisy = batches[0]
        .iter()
        .zip(names)
        .skip(judged)
        .filter_map(|(s, n)| Some((n, Stats::from_samples(s)?.spread)))
        .filter(|(_, sp)| *sp > RETIME_SPREAD)
        .map(|(n, sp)| format!("{n} {:.0}%", 100.0 * sp))
        .collect::<Vec<_>>()
        .join(", ");
    let list = spreads
        .iter()
        .map(|s| format!("{:.0}%", 100.0 * s))
        .collect::<Vec<_>>()
        .join(", ");
    (
        kept,
        Some(format!(
            "timing disturbed: the first batch's samples spread too widely ({noisy}; over {:.0}% means re-time), so {} batches were timed (widest spreads {list}) and every figure is from batch {}, the quietest",
            100.0 * RETIME_SPREAD,
            batches.len(),
            kept + 1
        )),
    )
}

/// The verdict on the timed launches from the verifier's counters (two per launch: outside
/// the validated tolerance, still poison): a note when every launch did the whole work,
/// else the `timing_inconsistent` fault naming the first bad launch.
pub(super) fn timing_verdict(
    counts: &[u64],
    out_len: usize,
) -> Result<String, crate::eval::job::Fault> {
    let runs = counts.len() / 2;
    let bad: Vec<(usize, u64, u64)> = (0..runs)
        .map(|r| (r, counts[2 * r], counts[2 * r + 1]))
        .filter(|(_, wrong, unwritten)| wrong + unwritten > 0)
        .collect();
    match bad.first() {
        Some((r, wrong, unwritten)) => Err(super::fault(
            FaultKind::TimingInconsistent,
            format!(
                "timed launch {} of {runs} left {wrong} of {out_len} elements outside the validated tolerance and {unwritten} unwritten ({} of the {runs} timed launches differ from their validated answers): the kernel does not do the whole work on every launch, and its time does not count",
                r + 1,
                bad.len()
            ),
        )),
        None => Ok(format!(
            "every timed launch of the candidate verified: {runs} launches over two input sets, each output poisoned before and compared after"
        )),
    }
}

/// A cuBLAS Lt launch with algorithm `i` of `plan` that alternates between the two input
/// sets `(A, B, B2)`: D = A B, and for a GLU pair also D2 = A B2 (`outs`: D, D2, whether
/// it is a pair).
fn rotating_lt<'p>(
    plan: &'p LtPlan,
    i: usize,
    s: &'p Session,
    sets: [(u64, u64, u64); 2],
    (d, d2, glu): (u64, u64, bool),
    alpha: f32,
) -> impl FnMut() -> Result<(), CudaFailure> + 'p {
    let mut k = 0usize;
    move || {
        let (a, b, b2) = sets[k % 2];
        k += 1;
        plan.run(s, i, a, b, d, alpha)?;
        if glu {
            plan.run(s, i, a, b2, d2, alpha)?;
        }
        Ok(())
    }
}

/// The ops a framework runs as separate elementwise passes after its library op: the
/// chain after the GEMM (gemm, gemm_bias_act; gemm_softmax, before its softmax), the ops
/// before the norm (gemm_norm), the whole chain (activation), the gate and the product
/// (gemm_glu); none otherwise.
fn unfused_chain(w: &Workload) -> Option<Chain> {
    match w.family() {
        Family::Gemm
        | Family::GemmBiasAct
        | Family::Activation
        | Family::GemmSoftmax
        | Family::GemmReduce
        | Family::Softmax
        | Family::LogSoftmax => Some(w.chain().clone()),
        // gemm_norm: the ops before the norm (the norm and the ops after it are its tail).
        Family::GemmNorm => Some(w.before_chain().clone()),
        Family::GemmGlu => {
            let mut c = Chain::default();
            let (p0, p1) = w.params().gate.default_params();
            c.push(Op::Act(w.params().gate, p0, p1));
            let t = c.add_tensor(TensorKind::Matrix, w.out_dtype(), "up");
            c.push(Op::Binary(BinOp::Mul, Operand::Tensor(t)));
            Some(c)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admission_estimate_counts_the_buffers_the_baselines_write() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/workloads");
        let all = Workload::load_dir(dir).unwrap();
        assert!(all.len() > 100, "{}", all.len());
        for w in &all {
            // The spec's account of the unfused passes is the worker's.
            let passes =
                unfused_chain(w).is_some_and(|c| !c.steps.is_empty()) && !w.is_single_activation();
            assert_eq!(
                w.timing_buffers().scratch,
                passes || matches!(w.family(), Family::GemmSoftmax | Family::GemmNorm),
                "{}",
                w.name()
            );
        }
        // KernelBench level 1's InstanceNorm, 7168 rows of 262144 f32 (7.5 GB in, 7.5 GB
        // out): two problems and the copy's destination, 37.6 GB, where the timing once
        // held six more output-sized buffers (90 GB) and ran out of an 80 GB H100.
        let norm = all
            .iter()
            .find(|w| w.name() == "kb1_34_instance_norm_f32")
            .unwrap();
        let need = norm.timing_buffers();
        assert!(need.copy && !need.library_out && !need.scratch && !need.reduce_tail);
        let gb = norm.device_bytes(&norm.shapes()[0]) / 1e9;
        let plane = 7168.0 * 262144.0 * 4.0 / 1e9;
        assert!((gb - 5.0 * plane).abs() < 0.01, "{gb} GB");
        // A GEMM with an epilogue chain: the library's output and the two scratch
        // buffers beside the reference planes.
        let chain = all
            .iter()
            .find(|w| w.name() == "gemm_chain_bias_relu_residual_bf16")
            .unwrap();
        let need = chain.timing_buffers();
        assert!(need.library_out && need.scratch && !need.copy && !need.library_out2);
    }

    #[test]
    fn timed_launches_are_judged_from_the_counters() {
        // Recorded from the skip_on_repeat fixture's shape: 30 launches, the first two
        // complete (first sight of each input set), then half of D left unwritten.
        let mut c = vec![0u64; 60];
        for r in 2..30 {
            c[2 * r + 1] = 131_072;
        }
        let f = timing_verdict(&c, 262_144).unwrap_err();
        assert_eq!(f.kind, FaultKind::TimingInconsistent);
        assert!(f.message.starts_with("timed launch 3 of 30 left 0 of 262144 elements outside the validated tolerance and 131072 unwritten (28 of the 30"), "{}", f.message);
        let ok = timing_verdict(&[0; 60], 262_144).unwrap();
        assert!(ok.contains("30 launches"), "{ok}");
        // A value error counts as much as an unwritten element.
        let mut v = vec![0u64; 40];
        v[38] = 5;
        let f = timing_verdict(&v, 100).unwrap_err();
        assert!(
            f.message.contains("timed launch 20 of 20 left 5 of 100"),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_disturbed_batch_is_timed_again_and_the_quietest_kept() {
        let names = vec!["candidate".to_string(), "cublas".to_string()];
        let steady =
            |us: f64| -> Vec<f64> { (0..30).map(|i| us + 0.01 * f64::from(i % 5)).collect() };
        // Recorded shape of the disturbed H100 batch: half the launches took twice as long
        // (the candidate's median 51.5 us, spread 101%; cuBLAS's spread 57%).
        let disturbed = |fast: f64| -> Vec<f64> {
            (0..30)
                .map(|i| if i % 2 == 0 { fast } else { 2.07 * fast })
                .collect()
        };
        let first = vec![disturbed(25.1), disturbed(18.7)];
        assert!(widest_spread(&first[1..]) > RETIME_SPREAD);
        assert!(widest_spread(&[steady(25.1), steady(18.7)]) < 0.01);
        assert_eq!(widest_spread(&[]), 0.0);
        // One quiet batch: kept, no note.
        assert_eq!(
            quietest_batch(&[vec![steady(25.1), steady(18.7)]], &names, 1),
            (0, None)
        );
        // Re-timed: the quieter second batch stands for both contenders.
        let batches = vec![first.clone(), vec![steady(25.3), steady(18.8)]];
        let (kept, note) = quietest_batch(&batches, &names, 1);
        assert_eq!(kept, 1);
        let note = note.unwrap();
        assert!(
            note.contains("cublas 52%") && note.contains("2 batches") && note.contains("batch 2"),
            "{note}"
        );
        assert!(!note.contains("candidate "), "{note}");
        // Three disturbed batches: the least disturbed one, whatever the candidate's time.
        let mild: Vec<f64> = (0..30)
            .map(|i| if i % 10 == 0 { 40.0 } else { 30.0 })
            .collect();
        let batches = vec![first.clone(), vec![steady(30.0), mild], first.clone()];
        assert_eq!(quietest_batch(&batches, &names, 1).0, 1);
        // A candidate noisy on its own does not choose the batch: the baselines' quiet
        // first batch stands, however fast the candidate was in another.
        let batches = vec![
            vec![disturbed(25.1), steady(18.7)],
            vec![steady(20.0), steady(18.7)],
        ];
        assert_eq!(quietest_batch(&batches, &names, 1).0, 0);
        assert!(widest_spread(&batches[0][1..]) <= RETIME_SPREAD);
        // Without a candidate (baseline mode) every contender counts.
        assert_eq!(quietest_batch(&batches, &names, 0).0, 1);
    }
}
