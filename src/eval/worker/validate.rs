//! Validation of a candidate's launch: its output against the reference (cuBLAS fp32 or
//! an fp64 CPU reference) under the workload's tolerance, a rerun to catch races, the
//! comparison with the previous seed's answer to catch replayed output, and the fp64
//! check of sampled GEMM entries that catches lowered precision.

use std::time::Instant;

use crate::abi::{cs_problem, KernelLibrary};
use crate::eval::gpu::baseline::GemmDesc;
use crate::eval::gpu::data::{self, HostElement, GUARD_ELEMENTS};
use crate::eval::gpu::reference;
use crate::eval::gpu::session::CudaFailure;
use crate::eval::job::{Fault, FaultKind, Fp64Check, ShapeValidation};
use crate::spec::{Family, Layout, Shape};

use super::{classify_cuda, fault, Ctx, Problem};
use crate::eval::compare::{self, Dims, Verdict};

impl Ctx<'_> {
    pub(super) fn validate<T: HostElement>(
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
}

/// Errors at rounding level (the median sampled entry off by less than 1e-3 of its
/// terms' magnitude) mean lower-precision arithmetic; larger ones mean a wrong result.
fn rounding_level(f: &Fp64Check) -> bool {
    f.failed > 0 && f.median_normalized_error < 1e-3
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
