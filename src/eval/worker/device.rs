//! Validation on the device, the default: inputs generated there from the seed, the fp64
//! reference computed there element by element next to the candidate's output, the
//! comparison reduced there to a summary, the sampled fp64 dot products computed there;
//! only summaries cross to the host. The host path (whole outputs compared on the CPU)
//! remains for a device whose NVRTC cannot build the kernels, or when the job asks for it
//! (`CUTESMITH_HOST_VALIDATION=1`).

use crate::eval::compare::{Comparison, Element};
use crate::eval::gpu::check::{CheckArgs, CheckSpec, Checker, DeviceOps, DotOperands, Reference};
use crate::eval::gpu::data::{HostElement, GUARD_ELEMENTS};
use crate::eval::gpu::session::{CudaFailure, DevBuf, Session};
use crate::spec::{DType, Family, Layout, TotalKind, Workload};

use super::problem::Problem;
use super::validate::{effective_roundoff, reference_bound, Sample, Summation};
use super::Ctx;

/// The compiled kernels of device validation for one workload.
pub(super) struct DeviceValidation {
    pub ops: DeviceOps,
    pub checker: Checker,
}

/// What the comparison kernels compute each element's reference from, for a workload;
/// None for the families validated on the host only (gemm_reduce and gemm_norm: each
/// output depends on a whole row (or group) of products, which the comparison kernels do
/// not compute).
pub(super) fn check_spec(w: &Workload, a: DType, d: DType) -> Option<CheckSpec> {
    let params = w.params();
    let reference = match w.family() {
        Family::GemmReduce | Family::GemmNorm => return None,
        // A cross entropy's row picks its target's logit: the host reference reads both.
        Family::Reduce if params.reduce.reads_targets() => return None,
        Family::Gemm | Family::GemmBiasAct => Reference::Gemm,
        Family::Activation => Reference::Chain,
        Family::Softmax | Family::LogSoftmax if !w.chain().is_identity() => {
            Reference::ChainSoftmax {
                log: w.family() == Family::LogSoftmax,
            }
        }
        Family::Softmax => Reference::Softmax { log: false },
        Family::LogSoftmax => Reference::Softmax { log: true },
        Family::GemmSoftmax => Reference::GemmSoftmax {
            log: params.log_softmax,
        },
        Family::GemmGlu => Reference::Glu { gate: params.gate },
        Family::Norm => Reference::Norm {
            kind: params.norm,
            eps: f64::from(params.eps),
        },
        Family::Reduce => Reference::Reduce {
            kind: params.reduce,
        },
        Family::Scan => Reference::Scan {
            kind: params.scan,
            reverse: params.reverse,
            exclusive: params.exclusive,
        },
    };
    Some(CheckSpec {
        reference,
        chain: w.chain().clone(),
        before: w.before_chain().clone(),
        out: d,
        input: a,
        col_major: w.d_col_major(),
    })
}

/// Compiles device validation for a workload (NVRTC); `Err` says why the host path is used.
pub(super) fn compile(
    s: &Session,
    w: &Workload,
    a: DType,
    d: DType,
    host: bool,
) -> Result<DeviceValidation, String> {
    if host {
        return Err("the job asks for host validation".into());
    }
    let ops = DeviceOps::compile(s).map_err(|e| e.to_string())?;
    let spec = check_spec(w, a, d).ok_or_else(|| {
        if w.family() == Family::Reduce {
            "a cross entropy is validated on the host (each row picks its target's logit)"
                .to_string()
        } else {
            format!(
                "family {} is validated on the host (each output reduces a row of products)",
                w.family()
            )
        }
    })?;
    let checker = Checker::compile(s, &spec).map_err(|e| e.to_string())?;
    Ok(DeviceValidation { ops, checker })
}

/// The reference of one problem on the device: the arguments of the comparison kernels
/// and the buffers they read (the GEMM products, the row statistics), kept alive with it.
pub(super) struct DeviceReference {
    pub args: CheckArgs,
    _products: Vec<DevBuf<f32>>,
    _stats: Option<DevBuf<f64>>,
    /// A total's per-row statistics, read by its totals' kernel on the stream.
    _totals: Option<DevBuf<f64>>,
}

impl Ctx<'_> {
    /// Builds the device reference of problem `p`, whose output the kernels will judge.
    pub(super) fn device_reference<A: HostElement, D: HostElement>(
        &self,
        dev: &DeviceValidation,
        p: &Problem<A, D>,
    ) -> Result<DeviceReference, CudaFailure> {
        let w = self.workload;
        let params = w.params();
        let dims = self.dims(p);
        let vt = w.tolerance().at(&p.shape);
        let mut args = CheckArgs {
            got: p.out.at(GUARD_ELEMENTS),
            batch: dims.batch as i64,
            rows: dims.rows as i64,
            cols: dims.cols as i64,
            ld: dims.ld as i64,
            bstride: dims.batch_stride as i64,
            rtol: vt.rtol,
            atol: vt.atol,
            scale: f64::from(params.alpha) * f64::from(params.scale_a) * f64::from(params.scale_b),
            beta: f64::from(params.beta),
            scale_d: if D::DTYPE.is_fp8() {
                f64::from(params.scale_d)
            } else {
                1.0
            },
            tri_rows: w.tri_rows(&p.shape) as i64,
            ..CheckArgs::default()
        };
        for (i, t) in p.tensors.iter().enumerate().take(args.t.len()) {
            args.t[i] = t.buf.ptr;
            args.tb[i] = t.batch_stride;
            if let Some(m) = &t.bmap {
                args.bt[i] = [
                    m.div[0] as i64,
                    m.modulus[0] as i64,
                    m.stride[0] as i64,
                    m.div[1] as i64,
                    m.modulus[1] as i64,
                    m.stride[1] as i64,
                    m.col_stride as i64,
                ];
            }
        }
        let mut products = Vec::new();
        let mut stats = None;
        let mut totals = None;
        let Some(spec) = check_spec(w, A::DTYPE, D::DTYPE) else {
            return Err(CudaFailure {
                code: -1,
                message: format!("family {} has no device reference", w.family()),
            });
        };
        if let Some(g) = &p.gemm {
            let summation = Summation::of(A::DTYPE, w.allow_tf32());
            args.ebound = reference_bound(1.0, g.k, effective_roundoff(w), summation);
            products.push(self.product_buf(p, g, false, false)?);
            products.push(self.product_buf(p, g, false, true)?);
            args.r[0] = products[0].ptr;
            args.r[1] = products[1].ptr;
            if matches!(spec.reference, Reference::Glu { .. }) {
                products.push(self.product_buf(p, g, true, false)?);
                products.push(self.product_buf(p, g, true, true)?);
                args.r[2] = products[2].ptr;
                args.r[3] = products[3].ptr;
            } else {
                args.r[2] = p.c.as_ref().map_or(0, |c| c.ptr);
            }
        } else {
            // A read through a view: the elements it reads, packed like D.
            args.r[0] = p.a_view.as_ref().map_or(p.a.ptr, |v| v.ptr);
        }
        let rows = dims.batch * if spec.col_major { dims.cols } else { dims.rows };
        match spec.reference {
            Reference::ChainSoftmax { .. } => {
                let st = self.s.zeros::<f64>(3 * rows)?;
                args.r[1] = st.ptr;
                dev.checker.row_stats(self.s, &args, st.ptr)?;
                stats = Some(st);
            }
            Reference::Softmax { .. } => {
                let st = self.s.zeros::<f64>(2 * rows)?;
                args.r[1] = st.ptr;
                dev.checker.row_stats(self.s, &args, st.ptr)?;
                stats = Some(st);
            }
            Reference::Norm { .. } => {
                let st = self.s.zeros::<f64>(2 * rows)?;
                args.r[1] = st.ptr;
                dev.checker.norm_stats(self.s, &args, st.ptr)?;
                stats = Some(st);
            }
            Reference::Reduce { .. } => {
                let st = self.s.zeros::<f64>(2 * rows)?;
                args.r[1] = st.ptr;
                let sh = p.shape;
                let geometry = (
                    sh.k as i64,
                    super::problem::reduce_lda(w.layouts().a, &sh) as i64,
                    w.layouts().a == Layout::Col,
                    (sh.m * sh.k) as i64,
                );
                args.ebound = super::validate::REDUCE_U;
                let total = w.params().total;
                if total == TotalKind::None {
                    dev.checker.reduce_stats(self.s, &args, st.ptr, geometry)?;
                } else {
                    // A total: every row's (value, bound) first (D has one row an item),
                    // then each item's total of its m rows.
                    let per_row = self.s.zeros::<f64>(2 * (sh.batch * sh.m) as usize)?;
                    let mut row_args = args;
                    row_args.rows = sh.m as i64;
                    row_args.r[1] = per_row.ptr;
                    dev.checker
                        .reduce_stats(self.s, &row_args, per_row.ptr, geometry)?;
                    let dims = (sh.batch as i64, sh.m as i64, total == TotalKind::Mean);
                    dev.checker
                        .total_stats(self.s, per_row.ptr, st.ptr, dims, args.ebound)?;
                    totals = Some(per_row);
                }
                stats = Some(st);
            }
            Reference::Scan { .. } => {
                // A logical row is n long: a storage column when D is column-major.
                let n = if spec.col_major { dims.rows } else { dims.cols };
                let st = self.s.zeros::<f64>(3 * rows * n.div_ceil(32))?;
                args.r[1] = st.ptr;
                args.ebound = super::validate::SCAN_U;
                dev.checker.scan_stats(self.s, &args, st.ptr)?;
                stats = Some(st);
            }
            Reference::GemmSoftmax { .. } => {
                let st = self.s.zeros::<f64>(3 * rows)?;
                args.r[3] = st.ptr;
                dev.checker.row_stats(self.s, &args, st.ptr)?;
                stats = Some(st);
            }
            _ => {}
        }
        Ok(DeviceReference {
            args,
            _products: products,
            _stats: stats,
            _totals: totals,
        })
    }

    /// Compares problem `p`'s output with its reference on the device (or, with `of`,
    /// with the reference of another problem of the same shape: the stale-output check).
    pub(super) fn device_comparison<A: HostElement, D: HostElement>(
        &self,
        dev: &DeviceValidation,
        p: &Problem<A, D>,
        of: Option<&Problem<A, D>>,
    ) -> Result<(Comparison, DeviceReference), CudaFailure> {
        let mut r = self.device_reference(dev, of.unwrap_or(p))?;
        r.args.got = p.out.at(GUARD_ELEMENTS);
        let dims = self.dims(p);
        let summary = dev.checker.compare(self.s, r.args, &dims)?;
        let vt = self.workload.tolerance().at(&p.shape);
        Ok((
            Comparison::from_summary(&summary, &dims, &vt, D::NAME, <f64 as Element>::NAME),
            r,
        ))
    }

    /// The sampled GEMM entries of the fp64 check, computed on the device.
    pub(super) fn device_samples<A: HostElement, D: HostElement>(
        &self,
        dev: &DeviceValidation,
        p: &Problem<A, D>,
        r: &DeviceReference,
        picks: &[(usize, usize, usize)],
    ) -> Result<Vec<Sample>, CudaFailure> {
        let Some(g) = &p.gemm else {
            return Ok(Vec::new());
        };
        let ops = DotOperands {
            a: p.a.ptr,
            b: p.b.as_ref().map_or(0, |b| b.ptr),
            b2: p.b2.as_ref().map_or(0, |b| b.ptr),
            c: p.c.as_ref().map_or(0, |c| c.ptr),
            k: g.k as i64,
            lda: g.lda,
            ldb: g.ldb,
            stride_a: g.stride_a,
            stride_b: g.stride_b,
            a_col: g.layout_a == Layout::Col,
            b_col: g.layout_b == Layout::Col,
        };
        let raw = dev.checker.dots(self.s, &r.args, picks, &ops)?;
        Ok(raw
            .into_iter()
            .zip(picks)
            .map(|(o, &(_, i, j))| Sample {
                dot: o[0],
                sum_abs: o[1],
                dot2: o[2],
                sum_abs2: o[3],
                c: o[4],
                got: o[5],
                t: [o[6], o[7], o[8], o[9]],
                library: o[10],
                pos: (i as i64, j as i64),
            })
            .collect())
    }

    /// True when both guard regions around the output still hold the pattern (only the
    /// guards are read).
    pub(super) fn guards_intact<A, D: HostElement>(
        &self,
        p: &Problem<A, D>,
    ) -> Result<bool, CudaFailure> {
        let before: Vec<D> = self.s.read(p.out.ptr, GUARD_ELEMENTS)?;
        let after: Vec<D> = self
            .s
            .read(p.out.at(GUARD_ELEMENTS + p.out_len), GUARD_ELEMENTS)?;
        Ok(before.iter().chain(&after).all(|x| x.is_guard()))
    }
}
