//! Validation of a candidate's launch: its output against the reference (cuBLAS fp32 or
//! an fp64 CPU reference) under the workload's tolerance, a rerun to catch races, the
//! comparison with the previous seed's answer to catch replayed output, and the fp64
//! check of sampled GEMM entries that catches lowered precision.

use std::time::Instant;

use crate::abi::{cs_problem, KernelLibrary};
use crate::eval::gpu::baseline::GemmDesc;
use crate::eval::gpu::data::{self, HostElement, GUARD_ELEMENTS};
use crate::eval::gpu::reference;
use crate::eval::gpu::session::{CudaFailure, DevBuf};
use crate::eval::job::{ErrorVsLibrary, Fault, FaultKind, Fp64Check, ShapeValidation};
use crate::spec::chain::{Chain, BEFORE_OP_U, MAX_TENSORS};
pub(super) use crate::spec::{gemm_roundoff as effective_roundoff, Summation};
use crate::spec::{DType, Family, Layout, NormKind, ReduceKind, RowStats, Shape, TotalKind};

use super::problem::Problem;
use super::{classify_cuda, fault, Ctx};
use crate::eval::compare::{self, Comparison, Dims, Element, Verdict};

impl Ctx<'_> {
    pub(super) fn validate<A: HostElement, D: HostElement>(
        &mut self,
        shape: &Shape,
        seed: u64,
        previous: &mut Option<u64>,
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
        let p = match self.setup::<A, D>(shape, seed) {
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
        match self.guards_intact(&p) {
            Ok(ok) => v.canaries_intact = ok,
            Err(e) => {
                v.fault = Some(classify_cuda(e.code, &e.message));
                return v;
            }
        }
        // The output (downloaded only for host validation) and its comparison.
        let got = match self.output(&p) {
            Ok(g) => g,
            Err(e) => {
                v.fault = Some(classify_cuda(e.code, &e.message));
                return v;
            }
        };
        let (cmp, fp64) = match self.judge(&p, &got, seed) {
            Ok(r) => r,
            Err(e) => {
                v.fault = Some(fault(
                    FaultKind::KernelError,
                    format!("reference failed: {e}"),
                ));
                return v;
            }
        };
        v.fp64 = fp64;
        let verdict = cmp.verdict();
        v.fault = if !v.canaries_intact {
            Some(fault(
                FaultKind::OutOfBounds,
                "the kernel wrote outside its output: the guard regions around D changed",
            ))
        } else {
            match verdict {
                Verdict::Pass => match &v.fp64 {
                    Some(f) if downgraded(f) => Some(precision_fault(f)),
                    _ => None,
                },
                // The workload's ops are undefined on these inputs (as the reference
                // failing is): no kernel can be judged on them.
                Verdict::UndefinedReference => Some(fault(
                    FaultKind::KernelError,
                    format!(
                        "the reference is NaN at every element on these inputs (signed, of \
                         every magnitude): a log, a square root or a division of them? No \
                         output can be told right or wrong; write the workload so its ops are \
                         defined on signed inputs (an abs before a log)\n{}",
                        cmp.report()
                    ),
                )),
                Verdict::PartialWrite => Some(fault(FaultKind::PartialWrite, cmp.report())),
                Verdict::NanInf => Some(fault(FaultKind::NanInf, cmp.report())),
                Verdict::Mismatch => {
                    let stale = previous.is_some_and(|prev| self.matches_seed(&p, &got, prev));
                    if stale {
                        Some(fault(
                            FaultKind::StaleOutput,
                            format!(
                                "the output equals the result for the previous seed's inputs: the kernel replays a cached result\n{}",
                                cmp.report()
                            ),
                        ))
                    } else if let Some(other) = self.rerun_differs(kernel, &p, &cp, &got) {
                        // Before the precision attribution: a race's few wrong elements
                        // can look like rounding where a sampled entry hits one.
                        Some(fault(
                            FaultKind::Race,
                            format!(
                                "the output changes between runs on the same inputs ({other} of {} elements differ): a data race, a missing barrier or an uninitialized read\n{}",
                                p.out_len,
                                cmp.report()
                            ),
                        ))
                    } else if let Some(f) = v.fp64.as_ref().filter(|f| rounding_level(f)) {
                        let mut pf = precision_fault(f);
                        pf.message.push('\n');
                        pf.message.push_str(&cmp.report());
                        Some(pf)
                    } else {
                        Some(fault(FaultKind::Mismatch, cmp.report()))
                    }
                }
            }
        };
        v.passed = v.fault.is_none();
        v.comparison = Some(cmp);
        *previous = Some(seed);
        v
    }

    /// The output proper on the host under host validation; empty (it stays on the
    /// device) under device validation.
    fn output<A, D: HostElement>(&self, p: &Problem<A, D>) -> Result<Vec<D>, CudaFailure> {
        if self.dev.is_some() {
            return Ok(Vec::new());
        }
        let mut out = self.s.download(&p.out)?;
        out.truncate(GUARD_ELEMENTS + p.out_len);
        Ok(out.split_off(GUARD_ELEMENTS))
    }

    /// The comparison of the output with the reference, and for GEMMs the fp64 check of
    /// sampled entries: on the device, or on the host from `got`.
    fn judge<A: HostElement, D: HostElement>(
        &mut self,
        p: &Problem<A, D>,
        got: &[D],
        seed: u64,
    ) -> Result<(Comparison, Option<Fp64Check>), CudaFailure> {
        // The sampled fp64 check judges an output entry from its own dot product; a row
        // softmax's entry depends on its whole row, which the whole-output comparison
        // (against an fp64 reference with the row's error bound) covers instead.
        let picks = p
            .gemm
            .as_ref()
            .filter(|_| {
                !matches!(
                    self.workload.family(),
                    Family::GemmSoftmax | Family::GemmReduce | Family::GemmNorm
                )
            })
            .map(|g| self.fp64_picks(g, seed));
        if let Some(dev) = &self.dev {
            let (cmp, r) = self.device_comparison(dev, p, None)?;
            let fp64 = match &picks {
                Some(picks) => Some(self.fp64_judge(&self.device_samples(dev, p, &r, picks)?)),
                None => None,
            };
            return Ok((cmp, fp64));
        }
        let reference = self.reference(p)?;
        let dims = self.dims(p);
        let vt = self.workload.tolerance().at(&p.shape);
        let cmp = compare::compare_with_slack(got, &reference.want, reference.slack(), &dims, &vt);
        let fp64 = match (&p.gemm, &picks) {
            // The library's fp32 product (the reference's own) beside the kernel's.
            (Some(g), Some(picks)) => {
                Some(self.fp64_judge(&self.host_samples(p, g, got, picks, &reference.product)))
            }
            _ => None,
        };
        Ok((cmp, fp64))
    }

    /// Whether the output passes against the reference of the previous seed's inputs
    /// (a kernel replaying a cached result); regenerates that seed's problem.
    fn matches_seed<A: HostElement, D: HostElement>(
        &mut self,
        p: &Problem<A, D>,
        got: &[D],
        prev: u64,
    ) -> bool {
        let Ok(q) = self.setup::<A, D>(&p.shape, prev) else {
            return false;
        };
        if let Some(dev) = &self.dev {
            return self
                .device_comparison(dev, p, Some(&q))
                .is_ok_and(|(c, _)| c.passed());
        }
        let Ok(r) = self.reference(&q) else {
            return false;
        };
        let vt = self.workload.tolerance().at(&p.shape);
        compare::compare_with_slack(got, &r.want, r.slack(), &self.dims(p), &vt).passed()
    }

    /// Runs the same inputs up to three more times; returns how many elements differ
    /// from the first run if any rerun differs (a moving result is a race).
    fn rerun_differs<A: HostElement, D: HostElement>(
        &self,
        kernel: &KernelLibrary,
        p: &Problem<A, D>,
        cp: &cs_problem,
        first: &[D],
    ) -> Option<usize> {
        let eb = std::mem::size_of::<D>();
        let out = p.out.at(GUARD_ELEMENTS);
        // Under device validation the first output is kept on the device and compared
        // there, bit for bit.
        let kept = match &self.dev {
            Some(_) => {
                let k = self.s.zeros::<D>(p.out_len).ok()?;
                self.s.copy(k.ptr, out, p.out_len * eb).ok()?;
                Some(k)
            }
            None => None,
        };
        for _ in 0..3 {
            self.s
                .fill_bits(out, p.out_len, eb, D::poison().bits())
                .ok()?;
            self.launch(kernel, cp).ok()?;
            self.s.sync().ok()?;
            let differ = match (&self.dev, &kept) {
                (Some(dev), Some(k)) => {
                    dev.ops.count_diff(self.s, k.ptr, out, p.out_len, eb).ok()? as usize
                }
                _ => {
                    let again: Vec<D> = self.s.read(out, p.out_len).ok()?;
                    again
                        .iter()
                        .zip(first)
                        .filter(|(a, b)| a.to_f64().to_bits() != b.to_f64().to_bits())
                        .count()
                }
            };
            if differ > 0 {
                return Some(differ);
            }
        }
        None
    }

    pub(super) fn dims<A, D>(&self, p: &Problem<A, D>) -> Dims {
        let sh = p.shape;
        // D column-major: the storage rows are the logical columns.
        let d_cols = self.workload.d_cols(&sh) as usize;
        let d_rows = self.workload.d_rows(&sh) as usize;
        let (rows, cols) = if self.workload.d_col_major() {
            (d_cols, d_rows)
        } else {
            (d_rows, d_cols)
        };
        Dims {
            batch: sh.batch.max(1) as usize,
            rows,
            cols,
            ld: p.ldd as usize,
            batch_stride: d_rows * d_cols,
        }
    }

    /// The f32 product `A * B` (or `|A| * |B|` with `abs`; B2 with `second`) on the
    /// device by cuBLAS in pedantic fp32, dense in D's layout. fp8 operands are widened to
    /// f32 first (exactly); absolute values are taken on the device under device
    /// validation, from the host images otherwise.
    pub(super) fn product_buf<A: HostElement, D: HostElement>(
        &self,
        p: &Problem<A, D>,
        g: &GemmDesc,
        second: bool,
        abs: bool,
    ) -> Result<DevBuf<f32>, CudaFailure> {
        let (host_b, dev_b) = if second {
            (&p.host_b2, p.b2.as_ref())
        } else {
            (&p.host_b, p.b.as_ref())
        };
        let (b_ptr, b_len) = dev_b.map_or((0, 0), |b| (b.ptr, b.len));
        // Dense in D's layout over the GEMM's m x n (gemm_reduce's D is smaller).
        let prod = self.s.zeros::<f32>((g.batch.max(1) * g.m * g.n) as usize)?;
        if let Some(dev) = &self.dev {
            if A::DTYPE.is_fp8() {
                let wa = self.s.zeros::<f32>(p.a.len)?;
                let wb = self.s.zeros::<f32>(b_len)?;
                dev.ops
                    .widen(self.s, p.a.ptr, wa.ptr, p.a.len, A::DTYPE, abs)?;
                dev.ops.widen(self.s, b_ptr, wb.ptr, b_len, A::DTYPE, abs)?;
                self.libs
                    .reference_gemm(g, DType::F32, wa.ptr, wb.ptr, prod.ptr)?;
            } else if abs {
                let eb = std::mem::size_of::<A>();
                let xa = self.s.zeros::<A>(p.a.len)?;
                let xb = self.s.zeros::<A>(b_len)?;
                dev.ops.abs(self.s, p.a.ptr, xa.ptr, p.a.len, eb)?;
                dev.ops.abs(self.s, b_ptr, xb.ptr, b_len, eb)?;
                self.libs
                    .reference_gemm(g, A::DTYPE, xa.ptr, xb.ptr, prod.ptr)?;
            } else {
                self.libs
                    .reference_gemm(g, A::DTYPE, p.a.ptr, b_ptr, prod.ptr)?;
            }
            return Ok(prod);
        }
        if A::DTYPE.is_fp8() {
            let widen = |v: &[A]| -> Vec<f32> {
                v.iter()
                    .map(|x| {
                        let f = x.to_f64() as f32;
                        if abs {
                            f.abs()
                        } else {
                            f
                        }
                    })
                    .collect()
            };
            let a = self.s.upload(&widen(&p.host_a))?;
            let b = self.s.upload(&widen(host_b))?;
            self.libs
                .reference_gemm(g, DType::F32, a.ptr, b.ptr, prod.ptr)?;
        } else if abs {
            let absv =
                |v: &[A]| -> Vec<A> { v.iter().map(|x| A::from_f64(x.to_f64().abs())).collect() };
            let a = self.s.upload(&absv(&p.host_a))?;
            let b = self.s.upload(&absv(host_b))?;
            self.libs
                .reference_gemm(g, A::DTYPE, a.ptr, b.ptr, prod.ptr)?;
        } else {
            self.libs
                .reference_gemm(g, A::DTYPE, p.a.ptr, b_ptr, prod.ptr)?;
        }
        Ok(prod)
    }

    /// [`Ctx::product_buf`], downloaded.
    fn product<A: HostElement, D: HostElement>(
        &self,
        p: &Problem<A, D>,
        g: &GemmDesc,
        second: bool,
        abs: bool,
    ) -> Result<Vec<f32>, CudaFailure> {
        let buf = self.product_buf(p, g, second, abs)?;
        self.s.download(&buf)
    }
    /// The expected output of a problem in fp64, and for the GEMM families a per-element
    /// slack: the dot products' own rounding bound (from the sum of |a||b| over each,
    /// scaled by the arithmetic's unit roundoff) carried through the epilogue chain by
    /// evaluating it at both ends of that interval, so the tolerance holds at any k.
    pub(super) fn reference<A: HostElement, D: HostElement>(
        &mut self,
        p: &Problem<A, D>,
    ) -> Result<Reference, CudaFailure> {
        let w = self.workload;
        let params = w.params();
        let chain = w.chain();
        let lay = w.layouts();
        let (m, n) = (p.shape.m as usize, p.shape.n as usize);
        let plane = m * n;
        // (batch, row, col) of dense output index i.
        let coords = move |i: usize, col_major: bool| {
            let (b, within) = (i / plane.max(1), i % plane.max(1));
            if col_major {
                (b, within % m, within / m)
            } else {
                (b, within / n, within % n)
            }
        };
        let mut want = vec![0f64; p.out_len];
        let mut slack = Vec::new();
        let Some(g) = &p.gemm else {
            match w.family() {
                Family::Softmax | Family::LogSoftmax if chain.is_identity() => {
                    reference::softmax_rows(&p.host_a, m, n, n, &mut want);
                    if w.family() == Family::LogSoftmax {
                        log_of_softmax(&p.host_a, m, n, &mut want);
                    }
                }
                Family::Softmax | Family::LogSoftmax => {
                    // The ops before the softmax on each input element (row-major, like
                    // the output), with the bound of their fp32 evaluation, then each
                    // row's softmax with those bounds carried through it.
                    let tensors = &p.tensors;
                    let x = &p.host_a;
                    // An index op's row: within the matrix of the last two dims.
                    let tri = w.tri_rows(&p.shape) as usize;
                    let mut xe = vec![(0f64, 0f64); p.out_len];
                    data::parallel_fill(&mut xe, |i| {
                        let (b, r, c) = coords(i, false);
                        let mut t = [0f64; MAX_TENSORS];
                        for (slot, tt) in t.iter_mut().zip(tensors) {
                            *slot = tt.at(Layout::Row, b, r, c);
                        }
                        let tr = if tri > 0 { r % tri } else { r };
                        chain_value_and_bound(chain, x[i].to_f64(), &t, (tr as i64, c as i64))
                    });
                    slack = vec![0f64; p.out_len];
                    softmax_with_bounds(
                        &xe,
                        m,
                        n,
                        w.family() == Family::LogSoftmax,
                        &mut want,
                        &mut slack,
                    );
                }
                Family::Norm => {
                    // Each logical row's (shift, scale) from its fp64 statistics, then
                    // the chain at every element of D (A's layout).
                    let col = w.d_col_major();
                    let x = &p.host_a;
                    let at = |b: usize, r: usize, c: usize| {
                        b * plane + if col { c * m + r } else { r * n + c }
                    };
                    let batches = p.out_len / plane.max(1);
                    let mut rows = vec![(0f64, 1f64); batches * m];
                    if params.norm == NormKind::Batch {
                        // Row r of every batch item together: one (shift, scale) a row.
                        for r in 0..m {
                            let all = (0..batches)
                                .flat_map(|b| (0..n).map(move |c| (b, c)))
                                .map(|(b, c)| x[at(b, r, c)].to_f64());
                            let ss = params.norm.shift_scale(
                                (batches * n) as f64,
                                RowStats::of(all),
                                f64::from(params.eps),
                            );
                            for b in 0..batches {
                                rows[b * m + r] = ss;
                            }
                        }
                    } else {
                        for (idx, slot) in rows.iter_mut().enumerate() {
                            let (b, r) = (idx / m, idx % m);
                            let stats = RowStats::of((0..n).map(|c| x[at(b, r, c)].to_f64()));
                            *slot = params
                                .norm
                                .shift_scale(n as f64, stats, f64::from(params.eps));
                        }
                    }
                    let tensors = &p.tensors;
                    data::parallel_fill(&mut want, |i| {
                        let (b, r, c) = coords(i, col);
                        let (shift, scale) = rows[b * m + r];
                        let mut t = [0f64; MAX_TENSORS];
                        for (slot, tt) in t.iter_mut().zip(tensors) {
                            *slot = tt.at(lay.c, b, r, c);
                        }
                        chain.eval((x[i].to_f64() - shift) * scale, &t)
                    });
                }
                Family::Scan => {
                    // Each logical row's scan in fp64 (in scan order) with each output's
                    // error bound, carried through the chain. A and D share their layout.
                    // [[before]] ops (their tensors the first slots, indexed like D) give
                    // each input's value and the bound of their fp32 evaluation.
                    let before = w.before_chain();
                    let nb = before.tensors.len();
                    let col = w.d_col_major();
                    let x = &p.host_a;
                    let at = |b: usize, r: usize, c: usize| {
                        b * plane + if col { c * m + r } else { r * n + c }
                    };
                    let batches = p.out_len / plane.max(1);
                    let mut pairs = vec![(0f64, 0f64); p.out_len];
                    for b in 0..batches {
                        for r in 0..m {
                            let order: Vec<usize> = if params.reverse {
                                (0..n).rev().collect()
                            } else {
                                (0..n).collect()
                            };
                            let row: Vec<(f64, f64)> = order
                                .iter()
                                .map(|&c| {
                                    let x = x[at(b, r, c)].to_f64();
                                    if before.is_identity() {
                                        return (x, 0.0);
                                    }
                                    let mut t = [0f64; MAX_TENSORS];
                                    for (slot, tt) in t.iter_mut().zip(&p.tensors[..nb]) {
                                        *slot = tt.at(lay.c, b, r, c);
                                    }
                                    before.eval_with_error(x, &t, BEFORE_OP_U)
                                })
                                .collect();
                            let scanned =
                                params.scan.eval_with_errors(&row, params.exclusive, SCAN_U);
                            for (&c, &(v, e)) in order.iter().zip(&scanned) {
                                let mut t = [0f64; MAX_TENSORS];
                                for (slot, tt) in t.iter_mut().zip(&p.tensors[nb..]) {
                                    *slot = tt.at(lay.c, b, r, c);
                                }
                                pairs[at(b, r, c)] = chain_with_slack(chain, v, e, &t);
                            }
                        }
                    }
                    let (w, e): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
                    want = w;
                    slack = e;
                }
                Family::Reduce => {
                    // Each row's reduction in fp64 with its error bound, carried through
                    // the chain like a GEMM's dot product.
                    let lda = super::problem::reduce_lda(lay.a, &p.shape) as usize;
                    let (x, tensors, k) = (&p.host_a, &p.tensors, p.shape.k as usize);
                    let mk = m * k;
                    let at = |i: usize, j: usize| match lay.a {
                        Layout::Row => i * lda + j,
                        Layout::Col => j * lda + i,
                    };
                    // [[before]] ops: each element's value and the bound of its fp32
                    // evaluation, reduced with the bounds combined as gemm_reduce's are.
                    let before = w.before_chain();
                    let nb = before.tensors.len();
                    if params.reduce.reads_targets() {
                        // A cross entropy: each row's loss (None: left out), then the total.
                        let rows = p.host_targets.len();
                        let mut losses = vec![None; rows];
                        data::parallel_fill(&mut losses, |o| {
                            let (b, r) = (o / m.max(1), o % m.max(1));
                            let row = (0..k).map(|j| x[b * mk + at(r, j)].to_f64());
                            let t = p.host_targets[o];
                            ReduceKind::cross_entropy(row, t, params.ignore_index, REDUCE_U)
                        });
                        let pairs: Vec<(f64, f64)> = if params.total == TotalKind::None {
                            losses.iter().map(|l| l.unwrap_or((0.0, 0.0))).collect()
                        } else {
                            losses
                                .chunks(m.max(1))
                                .map(|batch| params.total.eval(batch, REDUCE_U))
                                .collect()
                        };
                        let (w, e): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
                        want = w;
                        slack = e;
                        return Ok(Reference {
                            want,
                            slack,
                            product: Vec::new(),
                        });
                    }
                    // With a total, every row of every batch item first, then the totals.
                    let rows_out = if params.total == TotalKind::None {
                        p.out_len
                    } else {
                        p.out_len * m
                    };
                    let mut pairs = vec![(0f64, 0f64); rows_out];
                    data::parallel_fill(&mut pairs, |o| {
                        let (b, r) = (o / m.max(1), o % m.max(1));
                        let (v, e) = if before.is_identity() {
                            let row = (0..k).map(|j| x[b * mk + at(r, j)].to_f64());
                            params.reduce.eval(row, REDUCE_U)
                        } else {
                            let (mut xs, mut es) = (Vec::with_capacity(k), Vec::with_capacity(k));
                            for j in 0..k {
                                let mut t = [0f64; MAX_TENSORS];
                                for (slot, tt) in t.iter_mut().zip(&tensors[..nb]) {
                                    *slot = tt.at(lay.a, b, r, j);
                                }
                                let (v, e) = before.eval_with_error(
                                    x[b * mk + at(r, j)].to_f64(),
                                    &t,
                                    BEFORE_OP_U,
                                );
                                xs.push(v);
                                es.push(e);
                            }
                            let (v, e) = params.reduce.eval(xs.iter().copied(), REDUCE_U);
                            (v, e + row_bound(params.reduce, &es))
                        };
                        let mut t = [0f64; MAX_TENSORS];
                        for (slot, tt) in t.iter_mut().zip(&tensors[nb..]) {
                            *slot = tt.at(Layout::Row, b, r, 0);
                        }
                        chain_with_slack(chain, v, e, &t)
                    });
                    if params.total != TotalKind::None {
                        pairs = pairs
                            .chunks(m.max(1))
                            .map(|rows| {
                                let kept: Vec<Option<(f64, f64)>> =
                                    rows.iter().copied().map(Some).collect();
                                params.total.eval(&kept, REDUCE_U)
                            })
                            .collect();
                    }
                    let (w, e): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
                    want = w;
                    slack = e;
                }
                _ => {
                    let (x, tensors) = (&p.host_a, &p.tensors);
                    data::parallel_fill(&mut want, |i| {
                        let (b, r, c) = coords(i, false);
                        let mut t = [0f64; MAX_TENSORS];
                        for (slot, tt) in t.iter_mut().zip(tensors) {
                            *slot = tt.at(Layout::Row, b, r, c);
                        }
                        chain.eval_at(x[i].to_f64(), &t, (r as i64, c as i64))
                    });
                }
            }
            return Ok(Reference {
                want,
                slack,
                product: Vec::new(),
            });
        };
        let col_major = lay.c == Layout::Col;
        let scale = f64::from(params.alpha) * f64::from(params.scale_a) * f64::from(params.scale_b);
        let beta = f64::from(params.beta);
        let u = effective_roundoff(w);
        let z = self.product(p, g, false, false)?;
        let s = self.product(p, g, false, true)?;
        let host_c = &p.host_c;
        // The value entering the chain, and the bound on its error.
        // fp32 operands on tensor cores (3xTF32) round each product at about 2^-21:
        // independent errors, so they grow like sqrt(k), not like the sum's.
        let summation = Summation::of(A::DTYPE, w.allow_tf32());
        let z_at = |i: usize, z: &[f32], s: &[f32]| -> (f64, f64) {
            let acc = scale * f64::from(z[i]);
            let c = host_c.get(i).map_or(0.0, |x| beta * x.to_f64());
            let sum_abs = scale.abs() * f64::from(s[i]);
            let e = reference_bound(sum_abs, g.k, u, summation) + F32_ROUND * (acc.abs() + c.abs());
            (acc + c, e)
        };
        slack = vec![0f64; p.out_len];
        match w.family() {
            Family::GemmGlu => {
                let z2 = self.product(p, g, true, false)?;
                let s2 = self.product(p, g, true, true)?;
                let gate = params.gate;
                let (g0, g1) = gate.default_params();
                let f = |a: f64, b: f64| gate.eval(a, g0, g1) * b;
                let pairs: Vec<(f64, f64)> = {
                    let mut v = vec![(0f64, 0f64); p.out_len];
                    data::parallel_fill(&mut v, |i| {
                        let (x1, e1) = z_at(i, &z, &s);
                        let (x2, e2) = z_at(i, &z2, &s2);
                        let want = f(x1, x2);
                        let mut dev: f64 = 0.0;
                        for d1 in [-e1, -0.5 * e1, 0.5 * e1, e1] {
                            for d2 in [-e2, e2] {
                                dev = dev.max((f(x1 + d1, x2 + d2) - want).abs());
                            }
                        }
                        (want, dev)
                    });
                    v
                };
                for (i, (a, b)) in pairs.into_iter().enumerate() {
                    want[i] = a;
                    slack[i] = b;
                }
            }
            Family::GemmSoftmax => {
                // The chain before the softmax (the identity without ops), its error bound
                // carried through it as for a GEMM's chain.
                let mut xe = vec![(0f64, 0f64); p.out_len];
                let tensors = &p.tensors;
                data::parallel_fill(&mut xe, |i| {
                    let (b, r, c) = coords(i, col_major);
                    let mut t = [0f64; MAX_TENSORS];
                    for (slot, tt) in t.iter_mut().zip(tensors) {
                        *slot = tt.at(lay.c, b, r, c);
                    }
                    let (v, ev) = z_at(i, &z, &s);
                    chain_with_slack_at(chain, v, ev, &t, (r as i64, c as i64))
                });
                let (x, e): (Vec<f64>, Vec<f64>) = xe.into_iter().unzip();
                let batches = p.out_len / plane.max(1);
                for b in 0..batches {
                    for r in 0..m {
                        let idx =
                            |c: usize| b * plane + if col_major { c * m + r } else { r * n + c };
                        let max = (0..n).map(|c| x[idx(c)]).fold(f64::NEG_INFINITY, f64::max);
                        let sum: f64 = (0..n).map(|c| (x[idx(c)] - max).exp()).sum();
                        let emax = (0..n).map(|c| e[idx(c)]).fold(0.0, f64::max);
                        for c in 0..n {
                            let i = idx(c);
                            let pr = (x[i] - max).exp() / sum;
                            if params.log_softmax {
                                want[i] = x[i] - max - sum.ln();
                                slack[i] = 2.0 * emax;
                            } else {
                                want[i] = pr;
                                slack[i] = 2.0 * emax * pr;
                            }
                        }
                    }
                }
            }
            Family::GemmReduce => {
                // Each row's chain values (their bounds carried as a GEMM's), reduced in
                // fp64 with the reduction's own fp32 rounding added (the reduce family's
                // bound), then the [[after]] ops with the whole bound carried through.
                let tensors = &p.tensors;
                let after = w.after_chain();
                let kind = params.reduce;
                let mut pairs = vec![(0f64, 0f64); p.out_len];
                data::parallel_fill(&mut pairs, |o| {
                    let (b, r) = (o / m.max(1), o % m.max(1));
                    let (mut xs, mut es) = (Vec::with_capacity(n), Vec::with_capacity(n));
                    for c in 0..n {
                        let mut t = [0f64; MAX_TENSORS];
                        for (slot, tt) in t.iter_mut().zip(tensors) {
                            *slot = tt.at(Layout::Row, b, r, c);
                        }
                        let (v, ev) = z_at(b * plane + r * n + c, &z, &s);
                        let (x, e) = chain_with_slack(chain, v, ev, &t);
                        xs.push(x);
                        es.push(e);
                    }
                    let (v, e_red) = kind.eval(xs.iter().copied(), REDUCE_U);
                    chain_with_slack(after, v, e_red + row_bound(kind, &es), &[])
                });
                let (wv, sv): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
                want = wv;
                slack = sv;
            }
            Family::GemmNorm => {
                // The [[before]] ops on each product (its bound carried through them as a
                // GEMM chain's), each group's fp64 statistics, y = (x - shift) * scale, then
                // the chain after the norm. A group's inputs off by at most e each move y by
                // at most (a + b |y|) e scale to first order: layer (2, 1) (the mean moves by
                // e, the deviation by 2e, the standard deviation by at most e), rms (1, 1),
                // L2 (1, sqrt(L)), L1 (1, L), L the group's length.
                let tensors = &p.tensors;
                let before = w.before_chain();
                let nb = before.tensors.len();
                let mut xe = vec![(0f64, 0f64); p.out_len];
                data::parallel_fill(&mut xe, |i| {
                    let (b, r, c) = coords(i, false);
                    let mut t = [0f64; MAX_TENSORS];
                    for (slot, tt) in t.iter_mut().zip(&tensors[..nb]) {
                        *slot = tt.at(Layout::Row, b, r, c);
                    }
                    let (v, ev) = z_at(i, &z, &s);
                    // The product's bound carried through the ops, and the ops' own fp32
                    // rounding (8 u of each op's result, as a reduction's [[before]] ops).
                    let (x, ex) = chain_with_slack(before, v, ev, &t);
                    let (_, eop) = if before.is_identity() {
                        (x, 0.0)
                    } else {
                        before.eval_with_error(v, &t, BEFORE_OP_U)
                    };
                    (x, ex + eop)
                });
                // D is row-major and dense: group g of row r of batch b is the run of `len`
                // outputs from ((b m + r) groups + g) len; a batch norm's group b n + c is
                // column c of batch b, its m outputs n apart.
                let columns = params.norm == NormKind::Batch;
                let len = if columns {
                    m.max(1)
                } else {
                    (n / params.groups.max(1) as usize).max(1)
                };
                let member = move |gi: usize, k: usize| {
                    if columns {
                        (gi / n) * plane + k * n + gi % n
                    } else {
                        gi * len + k
                    }
                };
                let group_of = move |i: usize| {
                    if columns {
                        (i / plane) * n + i % n
                    } else {
                        i / len
                    }
                };
                let eps = f64::from(params.eps);
                let mut group = vec![(0f64, 1f64, 0f64); p.out_len / len];
                data::parallel_fill(&mut group, |gi| {
                    let run = (0..len).map(|k| xe[member(gi, k)]);
                    let stats = RowStats::of(run.clone().map(|v| v.0));
                    let (shift, scale) = params.norm.shift_scale(len as f64, stats, eps);
                    // The kernel's fp32 statistic: a thread's run of up to 16 values, then
                    // a tree over the team, each sum rounded (its mean as if every input
                    // were off by that much). A batch norm's: 8 values a thread, 8 row
                    // lanes in turn, then its slices of 64 rows merged 32 lanes apart,
                    // each lane's share in turn, then 5 levels (counted as 8 + 16: the
                    // row path's 16 values a thread).
                    let xmax = run.clone().map(|v| v.0.abs()).fold(0.0, f64::max);
                    let depth = if columns {
                        29.0 + (len as f64 / 2048.0).ceil()
                    } else {
                        16.0 + (len as f64).log2().ceil()
                    };
                    let stat = depth * F32_U * xmax;
                    (shift, scale, run.map(|v| v.1).fold(0.0, f64::max) + stat)
                });
                let (sa, sb) = match params.norm {
                    NormKind::Layer | NormKind::Batch => (2.0, 1.0),
                    NormKind::Rms => (1.0, 1.0),
                    NormKind::L2 => (1.0, (len as f64).sqrt()),
                    NormKind::L1 => (1.0, len as f64),
                };
                let mut pairs = vec![(0f64, 0f64); p.out_len];
                data::parallel_fill(&mut pairs, |i| {
                    let (b, r, c) = coords(i, false);
                    let (shift, scale, emax) = group[group_of(i)];
                    let y = (xe[i].0 - shift) * scale;
                    let ey = (sa + sb * y.abs()) * emax * scale;
                    let mut t = [0f64; MAX_TENSORS];
                    for (slot, tt) in t.iter_mut().zip(&tensors[nb..]) {
                        *slot = tt.at(Layout::Row, b, r, c);
                    }
                    chain_with_slack(chain, y, ey, &t)
                });
                let (wv, sv): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
                want = wv;
                slack = sv;
            }
            _ => {
                let tensors = &p.tensors;
                let lay_c = lay.c;
                let mut pairs = vec![(0f64, 0f64); p.out_len];
                data::parallel_fill(&mut pairs, |i| {
                    let (b, r, c) = coords(i, col_major);
                    let mut t = [0f64; MAX_TENSORS];
                    for (slot, tt) in t.iter_mut().zip(tensors) {
                        *slot = tt.at(lay_c, b, r, c);
                    }
                    let (x, e) = z_at(i, &z, &s);
                    chain_with_slack_at(chain, x, e, &t, (r as i64, c as i64))
                });
                for (i, (a, b)) in pairs.into_iter().enumerate() {
                    want[i] = a;
                    slack[i] = b;
                }
            }
        }
        if D::DTYPE.is_fp8() {
            let sd = f64::from(params.scale_d);
            for (wv, sv) in want.iter_mut().zip(slack.iter_mut()) {
                *wv *= sd;
                *sv *= sd.abs();
            }
        }
        Ok(Reference {
            want,
            slack,
            product: z,
        })
    }

    /// The GEMM entries the fp64 check samples: the four corners, the last batch's last
    /// entry, and pseudo-random others from the seed, `job.fp64_samples` in all.
    fn fp64_picks(&self, g: &GemmDesc, seed: u64) -> Vec<(usize, usize, usize)> {
        let (m, n) = (g.m as usize, g.n as usize);
        let batch = g.batch.max(1) as usize;
        let mut picks: Vec<(usize, usize, usize)> =
            vec![(0, 0, 0), (0, m - 1, n - 1), (0, m - 1, 0), (0, 0, n - 1)];
        if batch > 1 {
            picks.push((batch - 1, m - 1, n - 1));
        }
        let want_samples = self.job.fp64_samples.max(picks.len());
        let mut r = seed ^ 0xF64C_4ECC;
        while picks.len() < want_samples {
            r = r
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = (r >> 16) as usize;
            picks.push(((x / 7) % batch, (x / 13) % m, (x / 17) % n));
        }
        picks
    }

    /// The sampled entries' exact dot products, from the host images of the inputs.
    fn host_samples<A: HostElement, D: HostElement>(
        &self,
        p: &Problem<A, D>,
        g: &GemmDesc,
        got: &[D],
        picks: &[(usize, usize, usize)],
        library: &[f32],
    ) -> Vec<Sample> {
        let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
        let a_at = |b: usize, i: usize, kk: usize| {
            let idx = b * g.stride_a as usize
                + if g.layout_a == Layout::Row {
                    i * g.lda as usize + kk
                } else {
                    kk * g.lda as usize + i
                };
            p.host_a[idx].to_f64()
        };
        let b_at = |host: &[A], b: usize, kk: usize, j: usize| {
            let idx = b * g.stride_b as usize
                + if g.layout_b == Layout::Col {
                    j * g.ldb as usize + kk
                } else {
                    kk * g.ldb as usize + j
                };
            host[idx].to_f64()
        };
        let dot = |host: &[A], b: usize, i: usize, j: usize| -> (f64, f64) {
            if host.is_empty() {
                return (0.0, 0.0);
            }
            let (mut dot, mut abs) = (0f64, 0f64);
            for kk in 0..k {
                let t = a_at(b, i, kk) * b_at(host, b, kk, j);
                dot += t;
                abs += t.abs();
            }
            (dot, abs)
        };
        picks
            .iter()
            .map(|&(b, i, j)| {
                let d_idx = b * m * n
                    + if g.layout_cd == Layout::Row {
                        i * p.ldd as usize + j
                    } else {
                        j * p.ldd as usize + i
                    };
                let (d1, s1) = dot(&p.host_b, b, i, j);
                let (d2, s2) = dot(&p.host_b2, b, i, j);
                let mut t = [0f64; MAX_TENSORS];
                for (slot, tt) in t.iter_mut().zip(&p.tensors) {
                    *slot = tt.at(g.layout_cd, b, i, j);
                }
                Sample {
                    dot: d1,
                    sum_abs: s1,
                    dot2: d2,
                    sum_abs2: s2,
                    c: p.host_c.get(d_idx).map_or(0.0, |x| x.to_f64()),
                    got: got.get(d_idx).map_or(f64::NAN, |x| x.to_f64()),
                    t,
                    pos: (i as i64, j as i64),
                    // The product is dense in D's storage order.
                    library: library
                        .get(
                            b * m * n
                                + if g.layout_cd == Layout::Row {
                                    i * n + j
                                } else {
                                    j * m + i
                                },
                        )
                        .map_or(f64::NAN, |x| f64::from(*x)),
                }
            })
            .collect()
    }

    /// Judges sampled GEMM outputs against their fp64 values (exact dot products through
    /// the chain): each error is measured against the sum of |a b| of its dot product
    /// scaled by the chain's local slope, so an error at the level of a lower precision's
    /// rounding (TF32, fp16) where the workload asks for more is a precision fault even
    /// when it hides inside the output tolerance.
    fn fp64_judge(&self, samples: &[Sample]) -> Fp64Check {
        record_samples(self.workload, samples);
        fp64_judge(self.workload, samples)
    }
}

/// [`Ctx::fp64_judge`] for workload `w`.
pub(super) fn fp64_judge(w: &crate::spec::Workload, samples: &[Sample]) -> Fp64Check {
    let params = w.params();
    let chain = w.chain();
    let u_out = reference::unit_roundoff(w.out_dtype());
    let u_acc = effective_roundoff(w);
    let act_factor = if chain.is_identity() { 1.0 } else { 2.0 };
    let bound = 16.0 * u_acc * act_factor;
    let scale = f64::from(params.alpha) * f64::from(params.scale_a) * f64::from(params.scale_b);
    let out_scale = if w.out_dtype().is_fp8() {
        f64::from(params.scale_d)
    } else {
        1.0
    };
    let mut errors = Vec::with_capacity(samples.len());
    let mut normalized = Vec::with_capacity(samples.len());
    let mut failed = 0;
    let mut max_e: f64 = 0.0;
    // Absolute output errors of the kernel and of the library's product through the
    // same epilogue (fp32 workloads).
    let with_library = compares_with_library(w) && samples.iter().all(|s| s.library.is_finite());
    let mut abs_errors: Vec<(f64, f64)> = Vec::new();
    for s in samples {
        let c = s.c;
        let z0 = scale * s.dot + f64::from(params.beta) * c;
        // `filled`: an index op replaced the value there (the chain does not move with z):
        // judged like any sample, but it says nothing of the dot product's precision, so
        // it stays out of the error statistics.
        let (want, slope, abs, filled) = match w.family() {
            Family::GemmGlu => {
                let z2 = scale * s.dot2;
                let (g0, g1) = params.gate.default_params();
                let f = |x: f64| params.gate.eval(x, g0, g1);
                let want = f(z0) * z2;
                let h = 1e-6 * z0.abs().max(1.0);
                let slope1 = ((f(z0 + h) - f(z0 - h)) / (2.0 * h)).abs() * z2.abs();
                let slope2 = f(z0).abs();
                (want, 1.0, slope1 * s.sum_abs + slope2 * s.sum_abs2, false)
            }
            _ => {
                let (t, at) = (&s.t, s.pos);
                let want = chain.eval_at(z0, t, at);
                let h = 1e-6 * z0.abs().max(1.0);
                // 0 where the chain is constant (an element an index op fills, even with
                // an infinity), then floored.
                let moved = chain.eval_at(z0 + h, t, at) - chain.eval_at(z0 - h, t, at);
                let slope = (if moved.is_nan() {
                    0.0
                } else {
                    moved / (2.0 * h)
                })
                .abs()
                .max(1e-6);
                let filled = chain.positional() && (moved == 0.0 || moved.is_nan());
                (want, slope, s.sum_abs, filled)
            }
        };
        // What evaluating the chain in fp32 may add on its own, whatever the dot
        // product's precision: a few ulps of its input's and its result's magnitudes
        // (where the chain is flat, e.g. at GELU's minimum, the dot product's error
        // cannot show and this is all that is left).
        let input_mag = match w.family() {
            Family::GemmGlu => (z0 * scale * s.dot2).abs(),
            _ => z0.abs(),
        };
        let eval_allowance = CHAIN_EVAL_ULPS * F32_U * (want.abs() + input_mag);
        let want = want * out_scale;
        let got = s.got;
        let denom =
            (slope * (scale.abs() * abs + (f64::from(params.beta) * c).abs()) * out_scale.abs())
                + 1e-30;
        let e = if want.is_infinite() {
            // An infinity (a -inf fill) is matched exactly.
            if got == want {
                0.0
            } else {
                f64::MAX
            }
        } else if got.is_finite() {
            ((got - want).abs() - 1.01 * u_out * want.abs() - eval_allowance * out_scale.abs())
                .max(0.0)
                / denom
        } else {
            // Finite, so the report stays valid JSON; far over any bound.
            f64::MAX
        };
        if e > bound {
            failed += 1;
        }
        max_e = max_e.max(e);
        if filled {
            continue;
        }
        if with_library {
            let lib_z = scale * s.library + f64::from(params.beta) * c;
            // Rounded to the output's fp32 as the kernel's result is.
            let lib = f64::from((chain.eval_at(lib_z, &s.t, s.pos) * out_scale) as f32);
            abs_errors.push(((got - want).abs(), (lib - want).abs()));
        }
        normalized.push(e);
        errors.push(((got - want).abs() / denom).min(1.0));
    }
    normalized.sort_by(f64::total_cmp);
    let accuracy = (!abs_errors.is_empty()).then(|| {
        let n = abs_errors.len() as f64;
        let rms = |f: fn(&(f64, f64)) -> f64| {
            (abs_errors.iter().map(|e| f(e) * f(e)).sum::<f64>() / n).sqrt()
        };
        let max = |f: fn(&(f64, f64)) -> f64| abs_errors.iter().map(f).fold(0.0, f64::max);
        ErrorVsLibrary {
            max: max(|e| e.0),
            rms: rms(|e| e.0),
            library_max: max(|e| e.1),
            library_rms: rms(|e| e.1),
        }
    });
    Fp64Check {
        samples: samples.len(),
        failed,
        max_normalized_error: max_e,
        median_normalized_error: normalized.get(normalized.len() / 2).copied().unwrap_or(0.0),
        bound,
        hint: compare::precision_hint(&errors),
        accuracy,
    }
}

/// Whether a workload's kernels are compared with the vendor library's accuracy: fp32
/// GEMMs that must keep fp32 precision (no TF32 rounding allowed), whose kernels may still
/// use tensor cores with error compensation (3xTF32).
pub(super) fn compares_with_library(w: &crate::spec::Workload) -> bool {
    w.dtype() == DType::F32
        && !w.allow_tf32()
        && matches!(w.family(), Family::Gemm | Family::GemmBiasAct)
}

/// How many times the library's RMS error a kernel of an fp32 workload may have before it
/// is a precision downgrade. 3xTF32 done right stays near 1 (0.3-1.5 measured on an H100),
/// TF32 is above 100; an honest fp32 kernel summing a long K in one sequential chain can be
/// several times cuBLAS's blocked sums, which is not a downgrade of the arithmetic.
pub(super) const DOWNGRADE_RMS_RATIO: f64 = 4.0;

/// Whether the sampled errors show a precision downgrade: an fp32 workload's kernel with
/// more than [`DOWNGRADE_RMS_RATIO`] times the library's RMS error (with enough samples to
/// say so), or any sample over the fp64 bound.
pub(super) fn downgraded(f: &Fp64Check) -> bool {
    f.failed > 0
        || f.accuracy.is_some_and(|a| {
            f.samples >= 64 && a.library_rms > 0.0 && a.rms_ratio() > DOWNGRADE_RMS_RATIO
        })
}

/// With `CUTESMITH_RECORD_SAMPLES=DIR` set, every fp64 check's sampled entries are also
/// written to `DIR/<workload>-<n>.json` (the recordings the CI tests of the precision check
/// replay, e.g. `tests/fixtures/faults/recorded/`). Recording is best effort: a write that
/// fails is reported on stderr and validation goes on.
fn record_samples(w: &crate::spec::Workload, samples: &[Sample]) {
    let Some(dir) = std::env::var_os("CUTESMITH_RECORD_SAMPLES") else {
        return;
    };
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::path::Path::new(&dir).join(format!("{}-{n}.json", w.name()));
    let text = serde_json::json!({ "workload": w.name(), "samples": samples }).to_string();
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, text)) {
        eprintln!("recording samples to {}: {e}", path.display());
    }
}

/// One sampled GEMM entry of the fp64 check: its exact dot products (with B, and with B2
/// for GLU) and their sums of |a b|, C's value there (unscaled), the kernel's output there
/// and the chain's tensor operands there.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(super) struct Sample {
    pub dot: f64,
    pub sum_abs: f64,
    pub dot2: f64,
    pub sum_abs2: f64,
    pub c: f64,
    #[serde(with = "crate::spec::float_serde")]
    pub got: f64,
    pub t: [f64; MAX_TENSORS],
    /// The vendor library's fp32 product A B there (unscaled; NaN when not computed).
    #[serde(with = "crate::spec::float_serde")]
    pub library: f64,
    /// The entry's (row, col) in its m x n matrix of D (read by the chain's index ops).
    #[serde(default)]
    pub pos: (i64, i64),
}

/// Errors at rounding level (the median sampled entry off by less than 1e-3 of its
/// terms' magnitude, and none by a tenth of it) mean lower-precision arithmetic; larger
/// ones mean a wrong result. A kernel right almost everywhere but wrong on some entries
/// (a mask applied at the wrong positions: a quarter of the samples off by the whole
/// value, or an infinity) has a small median too, and is a mismatch.
fn rounding_level(f: &Fp64Check) -> bool {
    f.failed > 0 && f.median_normalized_error < 1e-3 && f.max_normalized_error < 0.1
}

pub(super) fn precision_fault(f: &Fp64Check) -> Fault {
    // With the library's errors beside the kernel's (an fp32 workload), say how far apart.
    let versus = f
        .accuracy
        .map(|a| {
            format!(
                "; RMS error {:.2e} against the fp32 library's {:.2e} on the same inputs ({:.1}x, at most {DOWNGRADE_RMS_RATIO}x allowed)",
                a.rms,
                a.library_rms,
                a.rms_ratio()
            )
        })
        .unwrap_or_default();
    let downgrade = if f.accuracy.is_some() {
        "precision downgrade: the workload asks for fp32 arithmetic (allow_tf32 = false) and the kernel's results are less precise (TF32 or a dropped low part?): "
    } else {
        ""
    };
    fault(
        FaultKind::Precision,
        format!(
            "{downgrade}{} of {} sampled entries exceed the precision of the workload's arithmetic against an fp64 \
             reference (max normalized error {:.2e}, bound {:.2e}){}{versus}",
            f.failed,
            f.samples,
            f.max_normalized_error,
            f.bound,
            f.hint.as_deref().map(|h| format!(": {h}")).unwrap_or_default()
        ),
    )
}

/// The expected output of a problem and the room each element's reference leaves.
pub(super) struct Reference {
    pub want: Vec<f64>,
    /// Per element, added to the tolerance (empty: nothing added).
    pub slack: Vec<f64>,
    /// GEMMs: the library's fp32 product A B the reference was made from, dense in D's
    /// layout (the fp64 check's library column); empty otherwise.
    pub product: Vec<f32>,
}

impl Reference {
    fn slack(&self) -> Option<&[f64]> {
        (!self.slack.is_empty()).then_some(self.slack.as_slice())
    }
}

/// The bound on a dot product's rounding error over `k` terms: `ACC_SAFETY * u * sum |a
/// b|` for the sum, plus, for fp32 operands split into TF32 parts on tensor cores, what
/// the split adds: `TC_F32_SAFETY * 2^-21 * sum |a b| / sqrt(k)`; plus, for tensor-core
/// accumulation of narrow operands, `TC_ACC_SQRT_K * sqrt(k) * 2^-24 * sum |a b|`.
pub(super) fn dot_bound(sum_abs: f64, k: u64, u: f64, summation: Summation) -> f64 {
    let kf = k.max(1) as f64;
    let extra = match summation {
        Summation::Rounded => 0.0,
        Summation::TensorCoreF32 => TC_F32_SAFETY * 2f64.powi(-21) / kf.sqrt(),
        Summation::TensorCore => TC_ACC_SQRT_K * kf.sqrt() * F32_U,
    };
    (ACC_SAFETY * u + extra) * sum_abs
}

/// The room between a kernel's dot product and the whole-output reference's: the
/// kernel's own bound ([`dot_bound`]) plus the reference's, which is an fp32 product
/// itself (the vendor library without TF32: `ACC_SAFETY * 2^-24 * sum |a b|`). The sampled
/// fp64 check bounds the kernel's error alone against exact dot products.
pub(super) fn reference_bound(sum_abs: f64, k: u64, u: f64, summation: Summation) -> f64 {
    dot_bound(sum_abs, k, u, summation) + ACC_SAFETY * F32_U * sum_abs
}

/// The chain at `x` and how far it can move when its input is off by up to `e`: the
/// largest change over `x - e, x - e/2, x + e/2, x + e` (the chain's ops are monotone or
/// smooth at this scale, so the ends and midpoints bound it).
pub(super) fn chain_with_slack(chain: &Chain, x: f64, e: f64, t: &[f64]) -> (f64, f64) {
    chain_with_slack_at(chain, x, e, t, (0, 0))
}

/// [`chain_with_slack`] at element `pos` (row, col) of its matrix, for a chain with index
/// ops; an element they fill (with an infinity too) does not move.
pub(super) fn chain_with_slack_at(
    chain: &Chain,
    x: f64,
    e: f64,
    t: &[f64],
    pos: (i64, i64),
) -> (f64, f64) {
    let want = chain.eval_at(x, t, pos);
    let mut dev: f64 = 0.0;
    for d in [-e, -0.5 * e, 0.5 * e, e] {
        // f64::max passes over the NaN of inf - inf.
        dev = dev.max((chain.eval_at(x + d, t, pos) - want).abs());
    }
    (want, dev)
}

/// How many times the unit roundoff of the arithmetic, times the sum of |a b|, a dot
/// product's honest error may reach. Measured on signed random inputs: 0.1-0.2 for fp32
/// sums in sequential and tiled orders at K = 4096 and K = 2^20 (see the test below); the
/// rest is room for other orders and for the reference's own error. TF32 operands stay
/// outside the bound up to K of about 7 million.
const ACC_SAFETY: f64 = 4.0;

/// A reduction's allowed error per unit of the sum of |terms| (fp32 sums, however
/// ordered): the host reference's and, through `CheckArgs::ebound`, the device's.
pub(super) const REDUCE_U: f64 = ACC_SAFETY * F32_U;

/// A scan's allowed error per unit of the sum of |terms| before each output (and, for a
/// product, half of it per term relative to the output): twice a reduction's, since every
/// output of a row is its own sum (a blocked fp32 scan adds a thread's few elements, a
/// warp's shuffles and a CTA's warps before its carry: about 16 roundings deep, where a
/// reduction's single value can be a balanced tree), and one row holds up to millions of
/// outputs. A kernel accumulating in bf16 or f16 is still caught by a factor of 2^10 or more.
pub(super) const SCAN_U: f64 = 2.0 * REDUCE_U;

/// How far a reduction of values each off by up to `e[j]` can move: the sum of the bounds
/// (sum), their mean (mean), their largest (max, min and logsumexp, each 1-Lipschitz in
/// the largest change), their root-sum-square (the L2 norm, by the triangle inequality).
pub(super) fn row_bound(kind: ReduceKind, e: &[f64]) -> f64 {
    match kind {
        ReduceKind::Sum => e.iter().sum(),
        ReduceKind::Mean => e.iter().sum::<f64>() / e.len().max(1) as f64,
        ReduceKind::Max | ReduceKind::Min | ReduceKind::Logsumexp | ReduceKind::CrossEntropy => {
            e.iter().copied().fold(0.0, f64::max)
        }
        ReduceKind::L2 => e.iter().map(|x| x * x).sum::<f64>().sqrt(),
        // An index is exact; the rules keep [[before]] ops away from it.
        ReduceKind::Argmax | ReduceKind::Argmin => 0.0,
    }
}

/// How many times a per-product error of 2^-21 (fp32 operands split into TF32 parts on
/// tensor cores, the 3xTF32 method), summed as independent errors (sum |a b| / sqrt(k)
/// stands for the root-sum-square), an fp32-accurate tensor-core GEMM may reach. TF32
/// operands (2^-11 per product) stay 100 times outside it at small k.
const TC_F32_SAFETY: f64 = 12.0;

/// Tensor-core accumulation of 16-bit operands (WGMMA / HMMA with an fp32 accumulator)
/// drops the bits of each MMA step's sum below the accumulator's precision instead of
/// rounding them, so the error is biased and grows like sqrt(k) times fp32's roundoff
/// times sum |a b|. Measured on an H200 (bf16 GEMMs by cuBLAS with fp32 output, every
/// element of each against fp64, signed inputs of the harness's distribution): at most
/// 21.8 such units at 4096^3 (0.34 sqrt(k)), 17.3 at k = 16384. 1.0 sqrt(k) leaves three
/// times that; a 64-wide K tile missing from a typical element's sum stays outside the
/// bound up to k of about 2^17 (and for the largest of a tile's elements, beyond).
const TC_ACC_SQRT_K: f64 = 1.0;

/// The rounding of the final fp32 combination (`alpha * acc + beta * C`).
const F32_ROUND: f64 = 1.2e-7;

/// fp32's unit roundoff.
const F32_U: f64 = 5.960_464_477_539_063e-8;

/// How many fp32 ulps of its input's and its result's magnitudes evaluating an epilogue
/// chain (activations from fp32 library functions, a few ops) may cost in the fp64 check.
const CHAIN_EVAL_ULPS: f64 = 8.0;

/// An input element after the ops before a softmax, and the bound on their fp32
/// evaluation's error: `SOFTMAX_OPS_U` (8 fp32 ulps) of the input's and the result's
/// magnitudes, carried through the ops as a GEMM chain's bound is. An element an index op
/// fills, or any infinite result, carries no bound (it is exact, or its exp is 0).
pub(super) fn chain_value_and_bound(
    chain: &Chain,
    x: f64,
    t: &[f64],
    pos: (i64, i64),
) -> (f64, f64) {
    let v = chain.eval_at(x, t, pos);
    if !v.is_finite() {
        return (v, 0.0);
    }
    let u = crate::eval::gpu::check::SOFTMAX_OPS_U;
    let (_, dev) = chain_with_slack_at(chain, x, u * x.abs(), t, pos);
    (v, dev + u * v.abs())
}

/// Each row's softmax (or log-softmax) of values known to within their bounds `xe` (value,
/// bound), with each output's own bound: when every x_j may be off by up to e_j,
/// log p_i moves by at most e_i + sum_j p_j e_j (to first order; doubled here for the
/// second), so p_i by that times p_i, at most `SOFTMAX_BOUND_CAP` of it. Elements whose
/// p_j is 0 (masked) add nothing, however large their bound.
pub(super) fn softmax_with_bounds(
    xe: &[(f64, f64)],
    rows: usize,
    cols: usize,
    log: bool,
    want: &mut [f64],
    slack: &mut [f64],
) {
    for r in 0..rows {
        let row = &xe[r * cols..(r + 1) * cols];
        let max = row.iter().map(|v| v.0).fold(f64::NEG_INFINITY, f64::max);
        let max_finite = if max.is_finite() { max } else { 0.0 };
        let sum: f64 = row.iter().map(|v| (v.0 - max_finite).exp()).sum();
        let ebar: f64 = row
            .iter()
            .map(|v| {
                let p = (v.0 - max_finite).exp() / sum;
                if p > 0.0 {
                    p * v.1
                } else {
                    0.0
                }
            })
            .sum();
        for (c, &(x, e)) in row.iter().enumerate() {
            let i = r * cols + c;
            let p = (x - max_finite).exp() / sum;
            // At most half of p (0.5 on a log-softmax): a row whose values carry huge
            // offsets (a finfo.min mask on a padded row) cannot pass any output.
            let bound = (2.0 * (e + ebar)).min(crate::eval::gpu::check::SOFTMAX_BOUND_CAP);
            if log {
                want[i] = x - max_finite - sum.ln();
                slack[i] = bound;
            } else {
                want[i] = p;
                slack[i] = if p > 0.0 { bound * p } else { 0.0 };
            }
        }
    }
}

/// Turns row softmax values into log-softmax values in place, from the inputs (exact:
/// x - max - log(sum)).
fn log_of_softmax<T: Element>(x: &[T], rows: usize, cols: usize, out: &mut [f64]) {
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let max = row
            .iter()
            .map(|v| v.to_f64())
            .fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v.to_f64() - max).exp()).sum();
        let ln = sum.ln();
        for (o, v) in out[r * cols..(r + 1) * cols].iter_mut().zip(row) {
            *o = v.to_f64() - max - ln;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::gpu::data::input_value;

    /// The bound of the ops before a softmax carried through its row: each output's slack
    /// is 2 (e_i + sum_j p_j e_j) (times p_i for softmax), so an element the ops masked to
    /// -inf, or one whose exp is 0, adds nothing however large its bound; a perturbation of
    /// the inputs within their bounds moves each output by less than its slack; and the
    /// bound of a plain scale is a few fp32 ulps of the values.
    #[test]
    fn a_softmax_carries_the_bounds_of_the_ops_before_it() {
        let mut chain = Chain::default();
        chain.push(crate::spec::chain::Op::Binary(
            crate::spec::chain::BinOp::Mul,
            crate::spec::chain::Operand::Scalar(0.125),
        ));
        let (v, e) = chain_value_and_bound(&chain, 8.0, &[], (0, 0));
        assert_eq!(v, 1.0);
        assert!(e > 0.0 && e < 1e-5, "{e}");
        // A row: three ordinary values, one masked to -inf, one finite but far below.
        let row = [
            (1.0, 1e-6),
            (0.5, 1e-6),
            (-0.25, 1e-6),
            (f64::NEG_INFINITY, 0.0),
            (-1e30, 1e24),
        ];
        let (mut want, mut slack) = (vec![0.0; 5], vec![0.0; 5]);
        softmax_with_bounds(&row, 1, 5, false, &mut want, &mut slack);
        assert!((want.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!((want[3], slack[3]), (0.0, 0.0));
        assert_eq!((want[4], slack[4]), (0.0, 0.0));
        for i in 0..3 {
            // 2 (1e-6 + 1e-6) p_i: the far element's huge bound is not in it.
            assert!(
                (slack[i] - 4e-6 * want[i]).abs() < 1e-18,
                "{i}: {}",
                slack[i]
            );
            // Every input moved by its whole bound, each way: within the slack.
            for sign in [-1.0, 1.0] {
                let moved: Vec<(f64, f64)> = row
                    .iter()
                    .enumerate()
                    .map(|(j, &(x, e))| (if j == i { x + sign * e } else { x - sign * e }, e))
                    .collect();
                let (mut w2, mut s2) = (vec![0.0; 5], vec![0.0; 5]);
                softmax_with_bounds(&moved, 1, 5, false, &mut w2, &mut s2);
                assert!((w2[i] - want[i]).abs() <= slack[i], "{i} {sign}");
            }
        }
        // log-softmax: the same bound, not scaled by p.
        softmax_with_bounds(&row, 1, 5, true, &mut want, &mut slack);
        assert!((slack[0] - 4e-6).abs() < 1e-18);
        assert_eq!(want[3], f64::NEG_INFINITY);
        // A row whose every value carries a huge bound (a finfo.min mask on a padded row):
        // the slack stops at half of each output, so a wrong output still fails.
        let padded = [(-3.4e38, 1.6e32); 4];
        softmax_with_bounds(&padded, 1, 4, false, &mut want[..4], &mut slack[..4]);
        assert_eq!(want[0], 0.25);
        assert_eq!(slack[0], 0.125);
        softmax_with_bounds(&padded, 1, 4, true, &mut want[..4], &mut slack[..4]);
        assert_eq!(slack[0], 0.5);
    }

    /// Sampled entries recorded on an H100 (`CUTESMITH_RECORD_SAMPLES`, gemm_f32_small at
    /// 512^3, seed 1): the Hopper fp32 template as built (3xTF32), and the same template
    /// with CS_F32_TERMS=1 (plain TF32, the planted precision downgrade).
    fn recorded(name: &str) -> (crate::spec::Workload, Vec<Sample>) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let w = crate::spec::Workload::find(root.join("workloads"), "gemm_f32_small").unwrap();
        let text = std::fs::read_to_string(root.join("recorded").join(name)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["workload"], "gemm_f32_small");
        let samples: Vec<Sample> = serde_json::from_value(v["samples"].clone()).unwrap();
        assert_eq!(samples.len(), 256);
        (w, samples)
    }

    #[test]
    fn a_tf32_kernel_on_an_fp32_workload_is_rejected_as_a_precision_downgrade() {
        let (w, samples) = recorded("gemm_f32_small-tf32-planted.json");
        let f = fp64_judge(&w, &samples);
        let a = f
            .accuracy
            .expect("an fp32 workload compares with the library");
        assert!(a.rms_ratio() > 100.0, "{a:?}");
        assert!(f.failed > 200, "{f:?}");
        assert!(downgraded(&f));
        let fault = precision_fault(&f);
        assert_eq!(fault.kind, FaultKind::Precision);
        assert!(
            fault.message.starts_with("precision downgrade"),
            "{}",
            fault.message
        );
        assert!(
            fault.message.contains("against the fp32 library's"),
            "{}",
            fault.message
        );

        // The same kernel with the low parts kept (3xTF32) is within fp32's error.
        let (w, samples) = recorded("gemm_f32_small-3xtf32.json");
        let f = fp64_judge(&w, &samples);
        let a = f.accuracy.expect("accuracy");
        assert_eq!(f.failed, 0, "{f:?}");
        assert!(a.rms_ratio() < DOWNGRADE_RMS_RATIO, "{a:?}");
        assert!(!downgraded(&f));

        // Errors at 5x cuBLAS's RMS error are a downgrade too, though every sample stays
        // inside the fp64 bound.
        let lib_rms = a.library_rms;
        let worse: Vec<Sample> = samples
            .iter()
            .enumerate()
            .map(|(i, s)| Sample {
                got: s.dot + if i % 2 == 0 { 5.0 } else { -5.0 } * lib_rms,
                ..*s
            })
            .collect();
        let f = fp64_judge(&w, &worse);
        assert_eq!(f.failed, 0, "{f:?}");
        assert!(downgraded(&f), "{:?}", f.accuracy);
    }

    /// Rounds an f32 to TF32 (10 mantissa bits, round to nearest).
    fn tf32(x: f32) -> f32 {
        let b = x.to_bits();
        f32::from_bits((b + 0x1000) & !0x1FFF)
    }

    /// The honest error of an fp32 dot product stays inside the bound at K = 2^20 (the
    /// old sqrt(k)-scaled atol failed here), while TF32 operands and a missing K tile
    /// land far outside it, at K = 2^20 and at K = 4096.
    /// The 3xTF32 split: each operand as a TF32 high part and a TF32 remainder, the
    /// product as hi*hi + hi*lo + lo*hi.
    fn three_tf32(x: f32, y: f32) -> f32 {
        let (xh, yh) = (tf32(x), tf32(y));
        let (xl, yl) = (tf32(x - xh), tf32(y - yh));
        xh * yh + (xh * yl + xl * yh)
    }

    /// A model of tensor-core accumulation: each MMA step's 16 exact products summed,
    /// then added to the fp32 accumulator with the result truncated toward zero.
    fn tensor_core_sum(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = 0f32;
        for (xs, ys) in a.chunks(16).zip(b.chunks(16)) {
            let step: f64 = xs
                .iter()
                .zip(ys)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            let exact = f64::from(acc) + step;
            let mut r = exact as f32;
            if f64::from(r).abs() > exact.abs() {
                r = f32::from_bits(r.to_bits() - 1);
            }
            acc = r;
        }
        acc
    }

    #[test]
    fn the_tensor_core_bound_holds_for_truncating_accumulation_and_catches_a_lost_tile() {
        for k in [4096usize, 65536, 1 << 20] {
            for seed in 1..=3u64 {
                let a: Vec<f32> = (0..k)
                    .map(|i| input_value(seed, 0, i as u64) as f32)
                    .collect();
                let b: Vec<f32> = (0..k)
                    .map(|i| input_value(seed, 1, i as u64) as f32)
                    .collect();
                let products: Vec<f64> = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| f64::from(*x) * f64::from(*y))
                    .collect();
                let exact: f64 = products.iter().sum();
                let sum_abs: f64 = products.iter().map(|p| p.abs()).sum();
                let bound = dot_bound(sum_abs, k as u64, F32_U, Summation::TensorCore);
                let rounded_only = dot_bound(sum_abs, k as u64, F32_U, Summation::Rounded);
                let err = (f64::from(tensor_core_sum(&a, &b)) - exact).abs();
                assert!(
                    err <= bound,
                    "k {k} seed {seed}: truncating sum off by {err} > {bound}"
                );
                if k == 4096 {
                    // The rounded-sum bound alone is too tight for it at this k; the tensor-core
                    // term is what admits it.
                    assert!(bound > 4.0 * rounded_only);
                    // A kernel that skips the last 64-wide K tile is caught.
                    let lost: f64 = products[k - 64..].iter().sum();
                    assert!(
                        lost.abs() > bound,
                        "seed {seed}: lost tile {lost} within {bound}"
                    );
                }
            }
        }
    }

    /// A row scanned in fp32 with the adds `scan_rows.cu` makes for row-major rows: a lane's
    /// 4 elements (f32 vectors), the warp's shuffle tree over 32 lanes, then the step's
    /// total into a running carry (compensated for a sum).
    fn blocked_scan(x: &[f32], prod: bool) -> Vec<f32> {
        let op = |a: f32, b: f32| if prod { a * b } else { a + b };
        let id = if prod { 1.0f32 } else { 0.0 };
        let mut out = Vec::with_capacity(x.len());
        let (mut hi, mut lo) = (id, 0f32);
        for step in x.chunks(128) {
            // Positions past the row's end hold the identity, as in the kernel.
            let at = |i: usize| step.get(i).copied().unwrap_or(id);
            let mut s = [[id; 4]; 32];
            for (l, lane) in s.iter_mut().enumerate() {
                lane[0] = at(4 * l);
                for e in 1..4 {
                    lane[e] = op(lane[e - 1], at(4 * l + e));
                }
            }
            let mut inc: [f32; 32] = std::array::from_fn(|l| s[l][3]);
            let mut o = 1;
            while o < 32 {
                let prev = inc;
                for l in o..32 {
                    inc[l] = op(prev[l - o], prev[l]);
                }
                o *= 2;
            }
            for i in 0..step.len() {
                let (l, e) = (i / 4, i % 4);
                let before = if l == 0 { id } else { inc[l - 1] };
                let local = op(before, s[l][e]);
                out.push(if prod { hi * local } else { hi + (local - lo) });
            }
            if prod {
                hi *= inc[31];
            } else {
                let v = inc[31] - lo;
                let t = hi + v;
                lo = if t.is_finite() { (t - hi) - v } else { 0.0 };
                hi = t;
            }
        }
        out
    }

    fn bf16(x: f32) -> f32 {
        let b = x.to_bits();
        f32::from_bits((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF_0000)
    }

    /// The scan's bound (SCAN_U per unit of the sum of |x| before an output; (terms + 1)
    /// SCAN_U / 2 of a product) holds for the kernel's fp32 order on rows of up to 2^20
    /// elements, and catches a scan that accumulates in bf16, or that is off by one element.
    /// reduce_rows.cu's argmax / argmin over rows side by side, emulated: each part of k
    /// split over warps (thread jw reads j0 + jw, + wj, ...), kU values a step taken only when
    /// strictly better or a first NaN, an untaken state given the first index read, the
    /// elementwise tail and every merge by the total order (NaN, value, smaller index). On
    /// rows of infinities, NaNs, ties and signed zeros it must find what
    /// `ReduceKind::eval` (torch's rule) finds, for every split.
    #[test]
    fn the_side_by_side_index_order_finds_the_first_extreme() {
        const EMPTY: usize = usize::MAX;
        let better = |max: bool, o: (f64, usize), s: (f64, usize)| {
            let (on, sn) = (o.0.is_nan(), s.0.is_nan());
            if on || sn {
                return on && (!sn || o.1 < s.1);
            }
            (if max { o.0 > s.0 } else { o.0 < s.0 }) || (o.0 == s.0 && o.1 < s.1)
        };
        let run = |row: &[f64], max: bool, parts: usize, wj: usize, ku: usize| {
            let k = row.len();
            let init = (
                if max {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                },
                EMPTY,
            );
            let chunk = k.div_ceil(parts);
            let mut res = init;
            for p in 0..parts {
                let (j0, j1) = (p * chunk, ((p + 1) * chunk).min(k));
                for jw in 0..wj {
                    let (mut s, mut j) = (init, j0 + jw);
                    while j + (ku - 1) * wj < j1 {
                        for u in 0..ku {
                            let x = row[j + u * wj];
                            let strict = if max { x > s.0 } else { x < s.0 };
                            if strict || (x.is_nan() && !s.0.is_nan()) {
                                s = (x, j + u * wj);
                            }
                        }
                        j += ku * wj;
                    }
                    if j != j0 + jw && s.1 == EMPTY {
                        s.1 = j0 + jw;
                    }
                    while j < j1 {
                        if better(max, (row[j], j), s) {
                            s = (row[j], j);
                        }
                        j += wj;
                    }
                    if better(max, s, res) {
                        res = s;
                    }
                }
            }
            res.1
        };
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        let mut cases = 0;
        for k in [1usize, 2, 5, 37, 64, 1000] {
            let rows: Vec<Vec<f64>> = vec![
                vec![-inf; k],
                vec![inf; k],
                (0..k)
                    .map(|j| {
                        if j % 17 == 5 {
                            nan
                        } else {
                            [-inf, 0.0, 1.0][j % 3]
                        }
                    })
                    .collect(),
                (0..k).map(|j| [1.0, 2.0, 2.0, -inf, inf][j % 5]).collect(),
                (0..k)
                    .map(|j| if j % 2 == 0 { -0.0 } else { 0.0 })
                    .collect(),
                (0..k).map(|j| if j + 1 < k { -inf } else { 5.0 }).collect(),
                (0..k)
                    .map(|j| if j % 3 == 0 { -inf } else { inf })
                    .collect(),
                (0..k).map(|j| ((j * 7919) % 7) as f64 - 3.0).collect(),
            ];
            for row in &rows {
                for (max, kind) in [(true, ReduceKind::Argmax), (false, ReduceKind::Argmin)] {
                    let want = kind.eval(row.iter().copied(), 0.0).0 as usize;
                    for parts in [1, 2, 3, 7] {
                        for wj in [1, 2, 4, 8] {
                            for ku in [1, 4, 8, 16] {
                                let got = run(row, max, parts, wj, ku);
                                assert_eq!(
                                    got, want,
                                    "{kind} k={k} parts={parts} wj={wj} ku={ku} {row:?}"
                                );
                                cases += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 6 * 8 * 2 * 64);
    }

    /// Inputs that carry their own bound (a scan's [[before]] ops): a sum adds them, a
    /// product adds prod(|x| + e) - |y| (an input that is zero but off by e leaves room for
    /// the others' product times e); with no input bound, `eval_with_errors` is `eval`.
    #[test]
    fn a_scans_input_bounds_are_carried_along_the_row() {
        use crate::spec::ScanKind;
        let u = SCAN_U;
        let row = [(1.0, 0.0), (-2.0, 1e-6), (0.5, 3e-7)];
        let sum = ScanKind::Sum.eval_with_errors(&row, false, u);
        assert_eq!(sum[2].0, -0.5);
        assert!(
            (sum[2].1 - (u * 3.5 + 1.3e-6)).abs() < 1e-18,
            "{:?}",
            sum[2]
        );
        // Exclusive: the first output is the identity with no bound; the last leaves x_2 out.
        let ex = ScanKind::Sum.eval_with_errors(&row, true, u);
        assert_eq!(ex[0], (0.0, 0.0));
        assert!((ex[2].1 - (u * 3.0 + 1e-6)).abs() < 1e-18);
        let prod = ScanKind::Prod.eval_with_errors(&row, false, u);
        assert_eq!(prod[2].0, -1.0);
        let want = 4.0 * u / 2.0 + (1.0 * (2.0 + 1e-6) * (0.5 + 3e-7) - 1.0);
        assert!((prod[2].1 - want).abs() < 1e-15, "{:?}", prod[2]);
        let zero = ScanKind::Prod.eval_with_errors(&[(0.0, 1e-3), (3.0, 0.0)], false, u);
        assert_eq!(zero[1].0, 0.0);
        assert!((zero[1].1 - 3e-3).abs() < 1e-15, "{:?}", zero[1]);
        let plain: Vec<f64> = row.iter().map(|r| r.0).collect();
        let none: Vec<(f64, f64)> = plain.iter().map(|&x| (x, 0.0)).collect();
        assert_eq!(
            ScanKind::Prod.eval(&plain, false, u),
            ScanKind::Prod.eval_with_errors(&none, false, u)
        );
    }

    #[test]
    fn the_scan_bound_holds_for_the_kernels_order_and_still_catches() {
        use crate::spec::ScanKind;
        for (n, seed) in [(1000usize, 1u64), (32768, 2), (1 << 20, 3)] {
            let x: Vec<f32> = (0..n)
                .map(|i| input_value(seed, 0, i as u64) as f32)
                .collect();
            let x64: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
            let want = ScanKind::Sum.eval(&x64, false, SCAN_U);
            let got = blocked_scan(&x, false);
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, (w, e))| (f64::from(*g) - w).abs() / e.max(f64::MIN_POSITIVE))
                .fold(0f64, f64::max);
            assert!(
                worst <= 1.0,
                "n {n}: the fp32 scan used {worst:.3} of its bound"
            );
            // bf16 accumulation (each running sum rounded to bf16) is far outside it.
            let mut acc = 0f32;
            let lossy: Vec<f32> = x
                .iter()
                .map(|v| {
                    acc = bf16(acc + v);
                    acc
                })
                .collect();
            let caught = lossy
                .iter()
                .zip(&want)
                .filter(|(g, (w, e))| (f64::from(**g) - w).abs() > 2.0 * e)
                .count();
            assert!(
                caught > n / 2,
                "n {n}: bf16 accumulation caught at {caught} of {n}"
            );
            // An exclusive result where an inclusive one is wanted: each output off by its
            // x_j, which the bound catches wherever |x_j| is above the prefix's rounding
            // room (most of them at 2^20 elements; one such element fails a kernel).
            let excl = ScanKind::Sum.eval(&x64, true, SCAN_U);
            let off = excl
                .iter()
                .zip(&want)
                .filter(|((g, _), (w, e))| (g - w).abs() > *e)
                .count();
            assert!(
                off > n / 2,
                "n {n}: off by one element caught at {off} of {n}"
            );
        }
        // An infinity stays one through the compensated carry (inf - inf would be NaN),
        // and a later opposite infinity makes NaN, as in fp64.
        let mut x: Vec<f32> = (0..1000).map(|i| input_value(5, 0, i) as f32).collect();
        x[3] = f32::NEG_INFINITY;
        let x64: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
        let want = ScanKind::Sum.eval(&x64, false, SCAN_U);
        let got = blocked_scan(&x, false);
        assert!(got[..3].iter().all(|g| g.is_finite()));
        assert!(
            got[3..].iter().all(|g| *g == f32::NEG_INFINITY),
            "{:?}",
            &got[120..140]
        );
        assert!(want[3..].iter().all(|(w, _)| *w == f64::NEG_INFINITY));
        x[700] = f32::INFINITY;
        let got = blocked_scan(&x, false);
        assert!(got[700..].iter().all(|g| g.is_nan()) && got[699] == f32::NEG_INFINITY);
        // Products of values near 1 (so the product stays away from 0 and infinity).
        let x: Vec<f32> = (0..4096)
            .map(|i| (1.0 + 0.01 * input_value(4, 0, i)) as f32)
            .collect();
        let x64: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
        let want = ScanKind::Prod.eval(&x64, false, SCAN_U);
        let got = blocked_scan(&x, true);
        for (j, (g, (w, e))) in got.iter().zip(&want).enumerate() {
            assert!(
                (f64::from(*g) - w).abs() <= *e,
                "product {j}: {g} against {w} (bound {e})"
            );
        }
    }

    #[test]
    fn the_dot_product_bound_holds_at_any_k_and_still_catches() {
        for k in [64usize, 513, 4096, 1 << 20] {
            let a: Vec<f32> = (0..k).map(|i| input_value(3, 0, i as u64) as f32).collect();
            let b: Vec<f32> = (0..k).map(|i| input_value(3, 1, i as u64) as f32).collect();
            let exact: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            let sum_abs: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (f64::from(*x) * f64::from(*y)).abs())
                .sum();
            let bound = dot_bound(sum_abs, k as u64, 2f64.powi(-24), Summation::TensorCoreF32);
            // fp32, sequential (the worst common order) and in 128 interleaved partial sums.
            let seq = a.iter().zip(&b).fold(0f32, |s, (x, y)| s + x * y);
            let mut parts = [0f32; 128];
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                parts[i % 128] += x * y;
            }
            let tiled: f32 = parts.iter().sum();
            for got in [seq, tiled] {
                assert!(
                    (f64::from(got) - exact).abs() <= bound,
                    "k {k}: honest fp32 error {} > bound {bound}",
                    (f64::from(got) - exact).abs()
                );
            }
            let three: f32 = a
                .iter()
                .zip(&b)
                .fold(0f32, |s, (x, y)| s + three_tf32(*x, *y));
            assert!(
                (f64::from(three) - exact).abs() <= bound,
                "k {k}: 3xTF32 error {} > bound {bound}",
                (f64::from(three) - exact).abs()
            );
            let t: f32 = a
                .iter()
                .zip(&b)
                .fold(0f32, |s, (x, y)| s + tf32(*x) * tf32(*y));
            assert!(
                (f64::from(t) - exact).abs() > 2.0 * bound,
                "k {k}: TF32 error {} within bound {bound}",
                (f64::from(t) - exact).abs()
            );
            let missing: f32 = a.iter().zip(&b).skip(64).fold(0f32, |s, (x, y)| s + x * y);
            assert!(
                (f64::from(missing) - exact).abs() > 2.0 * bound,
                "k {k}: a missing tile passes"
            );
        }
    }

    /// A sampled entry of a plain GEMM: its dot product and sum of |a b|, the chain's first
    /// tensor operand there, the kernel's output and the entry's (row, col).
    fn gemm_sample(dot: f64, sum_abs: f64, t0: f64, got: f64, pos: (i64, i64)) -> Sample {
        Sample {
            dot,
            sum_abs,
            dot2: 0.0,
            sum_abs2: 0.0,
            c: 0.0,
            got,
            t: [t0, 0.0, 0.0, 0.0],
            library: f64::NAN,
            pos,
        }
    }

    /// The fp64 check on samples of a GEMM with a causal mask (tril, -inf): a masked entry
    /// holding -inf passes and a finite one there fails; a kept entry is judged at its
    /// position (the same value one column right of the diagonal is masked); masked
    /// entries stay out of the error statistics (a TF32-level error on the kept ones
    /// still shows in the median).
    #[test]
    fn the_fp64_check_judges_masked_entries_at_their_positions() {
        let w = crate::spec::Workload::parse(
            "workloads/t.toml",
            "description = \"t\"\nfamily = \"gemm\"\ndtype = \"f32\"\n[[shapes]]\nm = 64\nn = 64\nk = 4096\n[[epilogue]]\nop = \"tril\"\nvalue = -inf\n",
        )
        .unwrap();
        let sum_abs = 1700.0;
        let sample = |z: f64, got: f64, pos: (i64, i64)| gemm_sample(z, sum_abs, 0.0, got, pos);
        let inf = f64::NEG_INFINITY;
        let j = fp64_judge(&w, &[sample(0.5, inf, (2, 3)), sample(0.5, 0.5, (3, 2))]);
        assert_eq!(j.failed, 0, "{j:?}");
        // The kept value at a masked position, and -inf at a kept one.
        assert_eq!(fp64_judge(&w, &[sample(0.5, 0.5, (2, 3))]).failed, 1);
        assert_eq!(fp64_judge(&w, &[sample(0.5, inf, (3, 2))]).failed, 1);
        // Kept entries with a TF32-level error: many masked ones beside them do not pull
        // the median error down to nothing.
        let tf32 = 0.5 + 2f64.powi(-11) * sum_abs / 64.0;
        let mut many = vec![sample(0.5, inf, (0, 9)); 30];
        many.extend(vec![sample(0.5, tf32, (9, 0)); 10]);
        let j = fp64_judge(&w, &many);
        assert_eq!(j.failed, 10, "{j:?}");
        assert!(j.median_normalized_error > j.bound, "{j:?}");
        // Those are rounding-level errors (a precision fault); a mask at the wrong
        // positions (finite values where -inf belongs, among right ones) is a mismatch.
        assert!(rounding_level(&j), "{j:?}");
        let mut shifted = vec![sample(0.5, 0.5, (9, 0)); 30];
        shifted.extend(vec![sample(0.5, 0.5, (0, 9)); 10]);
        let j = fp64_judge(&w, &shifted);
        assert_eq!(j.failed, 10, "{j:?}");
        assert!(
            j.median_normalized_error < 1e-3 && !rounding_level(&j),
            "{j:?}"
        );
    }

    /// The fp64 check on samples: an fp32-evaluated GELU after an exact fp32 dot product
    /// passes even at GELU's minimum (where its slope is zero), while a TF32-level dot
    /// product error fails, and a plain wrong value fails.
    #[test]
    fn the_fp64_check_allows_the_activation_its_fp32_evaluation() {
        let w = crate::spec::Workload::find(
            concat!(env!("CARGO_MANIFEST_DIR"), "/workloads"),
            "gemm_bias_gelu_bf16",
        )
        .unwrap();
        let gelu = |x: f64| 0.5 * x * (1.0 + crate::spec::chain::erf(x / 2f64.sqrt()));
        let bf16 = |x: f64| half::bf16::from_f64(x).to_f64();
        // Sum |a b| of a K = 4096 dot product of the harness's inputs, about 1700.
        let sum_abs = 1700.0;
        let sample = |z: f64, bias: f64, got: f64| gemm_sample(z, sum_abs, bias, got, (0, 0));
        let bias = 0.25;
        // At GELU's minimum (x = -0.7518) the fp32 GELU is off by a few ulps of its input.
        let xmin: f64 = -0.751_791_524_693_564_5;
        let z = xmin - bias;
        // The worst honest case: the fp32 value a few ulps off lands just past a bf16
        // rounding midpoint, so the output is off by the bf16 rounding plus that.
        let want = gelu(xmin);
        let u_bf16 = reference::unit_roundoff(DType::BF16);
        let f32_err = 3.0 * F32_U * xmin.abs();
        let honest = sample(z, bias, want - (1.01 * u_bf16 * want.abs() + f32_err));
        let j = fp64_judge(&w, &[honest; 8]);
        assert_eq!(j.failed, 0, "{j:?}");
        // A wrong value.
        let z3 = 3.0 - bias;
        let wrong = sample(z3, bias, bf16(gelu(3.0) + 0.5));
        assert_eq!(fp64_judge(&w, &[wrong]).failed, 1);
        // An fp32 workload with a chain (z / 3, tanh, + row): an fp32-accurate result
        // passes, one whose dot product has TF32-level error (2^-11 per product, random:
        // sum |a b| / sqrt(K) overall) fails.
        let w = crate::spec::Workload::find(
            concat!(env!("CARGO_MANIFEST_DIR"), "/workloads"),
            "gemm_chain_div_tanh_f32",
        )
        .unwrap();
        let chain = |z: f64, row: f64| (z / 3.0).tanh() + row;
        let (z, row) = (0.3, -0.125);
        let fp32 = sample(
            z,
            row,
            f64::from(chain(z + 4.0 * F32_U * sum_abs / 64.0, row) as f32),
        );
        assert_eq!(fp64_judge(&w, &[fp32; 8]).failed, 0);
        let tf32 = sample(
            z,
            row,
            f64::from(chain(z + 2f64.powi(-11) * sum_abs / 64.0, row) as f32),
        );
        let j = fp64_judge(&w, &[tf32; 8]);
        assert_eq!(j.failed, 8, "{j:?}");
    }

    /// gemm_reduce's bound on a row: the products' bounds summed for a sum (averaged for
    /// a mean), the largest for max, min and logsumexp, their root-sum-square for L2.
    #[test]
    fn a_reduction_carries_its_inputs_bounds() {
        let e = [1e-6, 3e-6, 2e-6, 4e-6];
        assert!((row_bound(ReduceKind::Sum, &e) - 1e-5).abs() < 1e-18);
        assert!((row_bound(ReduceKind::Mean, &e) - 2.5e-6).abs() < 1e-18);
        for k in [ReduceKind::Max, ReduceKind::Min, ReduceKind::Logsumexp] {
            assert_eq!(row_bound(k, &e), 4e-6);
        }
        assert!((row_bound(ReduceKind::L2, &e) - 30f64.sqrt() * 1e-6).abs() < 1e-18);
        assert_eq!(row_bound(ReduceKind::Mean, &[]), 0.0);
        // logsumexp moves by at most the largest shift of its inputs.
        let x = [0.3, -1.2, 2.5, 0.7];
        let (v, _) = ReduceKind::Logsumexp.eval(x.iter().copied(), 0.0);
        let (w, _) = ReduceKind::Logsumexp.eval(x.iter().zip(e).map(|(a, d)| a + d), 0.0);
        assert!((w - v).abs() <= row_bound(ReduceKind::Logsumexp, &e));
    }

    #[test]
    fn the_slack_follows_the_chain() {
        use crate::spec::chain::{Op, OpSpec};
        use crate::spec::{Activation, DType};
        let mut c = Chain::default();
        c.extend_from_spec(
            &[OpSpec {
                op: "tanh".into(),
                ..OpSpec::default()
            }],
            DType::F32,
        )
        .unwrap();
        // tanh is flat far out: the slack shrinks with its slope.
        let (_, near) = chain_with_slack(&c, 0.0, 1e-3, &[]);
        let (_, far) = chain_with_slack(&c, 8.0, 1e-3, &[]);
        assert!((near - 1e-3).abs() < 1e-6, "{near}");
        assert!(far < 1e-9, "{far}");
        // A clamp that saturates passes no error on.
        let mut k = Chain::default();
        k.push(Op::Clamp(-1.0, 1.0));
        assert_eq!(chain_with_slack(&k, 5.0, 0.1, &[]).1, 0.0);
        assert_eq!(chain_with_slack(&k, 0.0, 0.1, &[]).1, 0.1);
        // Identity: the slack is the input's bound.
        let mut i = Chain::default();
        i.push(Op::Act(Activation::Identity, 0.0, 0.0));
        assert_eq!(chain_with_slack(&i, 2.0, 0.5, &[]), (2.0, 0.5));
    }
}
