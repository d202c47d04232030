//! One problem instance on the device: the inputs of a shape generated from a seed (A, B,
//! B2, C and the epilogue chain's tensors), the poisoned output with its guards, and the
//! `cs_problem` a kernel is launched with. `A` is the operand element type, `D` the
//! output's.

use crate::abi::{self, cs_operand, cs_problem};
use crate::eval::gpu::baseline::GemmDesc;
use crate::eval::gpu::data::{self, HostElement, GUARD_ELEMENTS};
use crate::eval::gpu::session::{CudaFailure, DevBuf};
use crate::spec::chain::{BroadcastMap, TensorKind};
use crate::spec::{DType, Family, Layout, Shape};

/// Input streams of the generator, one per operand, so every operand of a seed differs.
const STREAM_A: u64 = 0;
const STREAM_B: u64 = 1;
const STREAM_C: u64 = 2;
const STREAM_B2: u64 = 3;
const STREAM_TENSOR0: u64 = 4;
/// A cross entropy's target classes (after the chain tensors' streams).
const STREAM_TARGETS: u64 = 64;

/// A tensor the epilogue chain reads.
pub(super) struct ChainTensor {
    pub kind: TensorKind,
    pub dtype: DType,
    pub buf: DevBuf<u8>,
    /// The exact values (as stored) for the host reference (empty under device validation).
    pub host: Vec<f64>,
    /// Leading dimension (matrix) in elements; 1 for vectors.
    pub ld: i64,
    /// Elements between batches (0: shared by every batch).
    pub batch_stride: i64,
    /// A channel operand's values a channel covers along a row (n / channels); else 1.
    pub span: usize,
    /// A broadcast operand's index map on this shape; None for the other kinds.
    pub bmap: Option<BroadcastMap>,
}

impl ChainTensor {
    /// The operand's value at element (row, col) of batch b of D.
    pub fn at(&self, layout_cd: Layout, b: usize, row: usize, col: usize) -> f64 {
        let base = b * self.batch_stride as usize;
        let i = match self.kind {
            TensorKind::Row => base + col,
            TensorKind::Col => base + row,
            TensorKind::Channel(r) => base + row * r as usize + col / self.span.max(1),
            TensorKind::Broadcast(_) => match &self.bmap {
                Some(map) => base + map.index(row as u64, col as u64) as usize,
                None => return f64::NAN,
            },
            TensorKind::Matrix => {
                base + if layout_cd == Layout::Row {
                    row * self.ld as usize + col
                } else {
                    col * self.ld as usize + row
                }
            }
        };
        self.host.get(i).copied().unwrap_or(f64::NAN)
    }
}

/// Device buffers of one problem instance (and, under host validation, their host images
/// for the reference; empty under device validation).
pub(super) struct Problem<A, D> {
    pub shape: Shape,
    pub a: DevBuf<A>,
    /// An activation read through a view: the elements it reads, packed like D (device
    /// validation's reference reads them; `host_a` holds them under host validation).
    pub a_view: Option<DevBuf<A>>,
    pub b: Option<DevBuf<A>>,
    pub b2: Option<DevBuf<A>>,
    pub c: Option<DevBuf<D>>,
    pub out: DevBuf<D>,
    pub host_a: Vec<A>,
    pub host_b: Vec<A>,
    pub host_b2: Vec<A>,
    pub host_c: Vec<D>,
    pub tensors: Vec<ChainTensor>,
    /// A cross entropy's target classes (m a batch) and their host image.
    pub targets: Option<DevBuf<i64>>,
    pub host_targets: Vec<i64>,
    pub out_len: usize,
    pub gemm: Option<GemmDesc>,
    pub ldd: i64,
}

/// Encodes exact values into a dtype's bytes (little-endian), for tensors whose type is
/// not the problem's.
pub(super) fn encode(dtype: DType, values: &[f64]) -> Vec<u8> {
    use crate::eval::compare::{E4M3, E5M2};
    let mut out = Vec::with_capacity(values.len() * dtype.bytes() as usize);
    for &v in values {
        match dtype {
            DType::F32 => out.extend((v as f32).to_le_bytes()),
            DType::F16 => out.extend(half::f16::from_f64(v).to_le_bytes()),
            DType::BF16 => out.extend(half::bf16::from_f64(v).to_le_bytes()),
            DType::F64 => out.extend(v.to_le_bytes()),
            DType::E4M3 => out.push(E4M3::from_f64(v).0),
            DType::E5M2 => out.push(E5M2::from_f64(v).0),
            DType::I64 => out.extend((v as i64).to_le_bytes()),
            DType::Bool => out.push(u8::from(v != 0.0)),
        }
    }
    out
}

/// `n` values of input `stream`, rounded to `dtype` (the exact stored values).
fn rounded_values(dtype: DType, n: usize, seed: u64, stream: u64) -> Vec<f64> {
    use crate::eval::compare::{Element, E4M3, E5M2};
    let mut v = vec![0f64; n];
    data::parallel_fill(&mut v, |i| {
        let x = data::input_value(seed, stream, i as u64);
        match dtype {
            DType::F32 => f64::from(x as f32),
            DType::F16 => half::f16::from_f64(x).to_f64(),
            DType::BF16 => half::bf16::from_f64(x).to_f64(),
            DType::F64 => x,
            DType::E4M3 => E4M3::from_f64(x).to_f64(),
            DType::E5M2 => E5M2::from_f64(x).to_f64(),
            DType::I64 => x.round(),
            // About half true (the generator's values are signed, never 0).
            DType::Bool => f64::from(u8::from(x > 0.0)),
        }
    });
    v
}

/// A reduction's A (m rows of k per batch, packed): its leading dimension, k for rows
/// (element j of row i at `i * k + j`), m for rows side by side (at `j * m + i`).
pub(super) fn reduce_lda(layout_a: Layout, sh: &Shape) -> u64 {
    match layout_a {
        Layout::Row => sh.k,
        Layout::Col => sh.m,
    }
}

impl<'a> super::Ctx<'a> {
    /// `n` elements of input `stream` under `seed`: generated on the device (no host
    /// image) under device validation, else generated on the host and uploaded (the host
    /// image kept for the host reference).
    fn input<T: HostElement>(
        &self,
        n: usize,
        seed: u64,
        stream: u64,
    ) -> Result<(DevBuf<T>, Vec<T>), CudaFailure> {
        if let Some(dev) = &self.dev {
            let buf = self.s.zeros::<T>(n)?;
            dev.ops.fill(self.s, buf.ptr, n, T::DTYPE, seed, stream)?;
            Ok((buf, Vec::new()))
        } else {
            let host: Vec<T> = data::random_vec(n, seed, stream);
            Ok((self.s.upload(&host)?, host))
        }
    }

    /// Generates the inputs of `shape` under `seed` and a poisoned output.
    pub(super) fn setup<A: HostElement, D: HostElement>(
        &self,
        shape: &Shape,
        seed: u64,
    ) -> Result<Problem<A, D>, CudaFailure> {
        let w = self.workload;
        let (m, n, k, batch) = (
            shape.m as usize,
            shape.n as usize,
            shape.k as usize,
            shape.batch.max(1) as usize,
        );
        let params = w.params();
        let lay = w.layouts();
        // D: m x n, except gemm_reduce's m x 1 (one value a row of the product) and a
        // total's one value a batch.
        let d_cols = w.d_cols(shape) as usize;
        let out_len = batch * w.d_rows(shape) as usize * d_cols;
        // D column-major (a GEMM's, or a norm's rows side by side): m between columns.
        let ldd = if w.d_col_major() { m } else { d_cols };
        let mut tensors = Vec::new();
        // A reduction's [[before]] tensors first, indexed like A (m x k); then the epilogue
        // chain's, indexed like D. gemm_norm's and a scan's [[before]] tensors are indexed
        // like D too.
        let before_like_a = !w.family().before_like_d();
        let before = w.before_chain().tensors.iter().map(|t| (t, before_like_a));
        let slots = before.chain(w.chain().tensors.iter().map(|t| (t, false)));
        for (i, (t, like_a)) in slots.enumerate() {
            // A broadcast operand's index map on this shape (the rules checked it on every
            // shape); it gives the operand's length too.
            let bmap = match t.kind {
                TensorKind::Broadcast(mask) => Some(
                    BroadcastMap::new(shape.dims.as_slice(), mask, w.chain().broadcast_tail())
                        .map_err(|e| CudaFailure {
                            code: -1,
                            message: format!("broadcast operand `{}`: {e}", t.name),
                        })?,
                ),
                _ => None,
            };
            let (len, ld, stride) = match (t.kind, like_a) {
                (TensorKind::Row, true) => (k, 1, 0),
                (TensorKind::Matrix, true) => {
                    (batch * m * k, reduce_lda(lay.a, shape) as usize, m * k)
                }
                (TensorKind::Row, false) => (n, 1, 0),
                (TensorKind::Col, _) => (m, 1, 0),
                // Shared by the batch, like row and col vectors (a module's parameter).
                (TensorKind::Channel(r), _) => (m * r as usize, r as usize, 0),
                // Shared by the batch; its length from its map.
                (TensorKind::Broadcast(_), _) => bmap
                    .as_ref()
                    .map_or((0, 0, 0), |b| (b.len as usize, b.col_stride as usize, 0)),
                (TensorKind::Matrix, false) => (out_len, ldd, m * n),
            };
            let stream = STREAM_TENSOR0 + i as u64;
            let (buf, host) = if let Some(dev) = &self.dev {
                let buf = self.s.zeros::<u8>(len * t.dtype.bytes() as usize)?;
                dev.ops.fill(self.s, buf.ptr, len, t.dtype, seed, stream)?;
                (buf, Vec::new())
            } else {
                let host = rounded_values(t.dtype, len, seed, stream);
                (self.s.upload(&encode(t.dtype, &host))?, host)
            };
            tensors.push(ChainTensor {
                kind: t.kind,
                dtype: t.dtype,
                buf,
                host,
                ld: ld as i64,
                batch_stride: stride as i64,
                span: match t.kind {
                    TensorKind::Channel(r) => (n / (r as usize).max(1)).max(1),
                    _ => 1,
                },
                bmap,
            });
        }
        // The output: guard, NaN poison, guard, written on the device.
        let out = self.s.zeros::<D>(out_len + 2 * GUARD_ELEMENTS)?;
        let (eb, guard) = (std::mem::size_of::<D>(), data::guard::<D>().bits());
        self.s.fill_bits(out.ptr, GUARD_ELEMENTS, eb, guard)?;
        self.s
            .fill_bits(out.at(GUARD_ELEMENTS), out_len, eb, D::poison().bits())?;
        self.s
            .fill_bits(out.at(GUARD_ELEMENTS + out_len), GUARD_ELEMENTS, eb, guard)?;
        if !w.family().is_gemm() {
            // A reduction's A holds k elements for each output; every other family's A
            // is shaped like D.
            // An activation read through a view holds the view's whole input.
            let view = w.view_on(shape);
            let a_len = if w.family() == Family::Reduce {
                batch * m * k
            } else {
                w.a_elements(shape, out_len as u64) as usize
            };
            let (a, mut host_a) = self.input::<A>(a_len, seed, STREAM_A)?;
            // The references read the elements the view names, packed like D: gathered
            // here (on the host from the host image, else on the device).
            let mut a_view = None;
            if let Some(v) = &view {
                if let Some(dev) = &self.dev {
                    let buf = self.s.zeros::<A>(out_len)?;
                    dev.ops
                        .gather(self.s, a.ptr, buf.ptr, v, std::mem::size_of::<A>())?;
                    a_view = Some(buf);
                } else {
                    host_a = (0..out_len as u64)
                        .map(|i| host_a[v.source(i) as usize])
                        .collect();
                }
            }
            // A cross entropy's targets: classes of the row, some the ignore index. Always
            // generated on the host (m values), so the reference sees them either way.
            let (targets, host_targets) = if params.reduce.reads_targets() {
                // Row 0 of each batch is always counted (a class other than the ignore
                // index): a mean over no row is NaN, an undefined reference.
                let host: Vec<i64> = (0..batch * m)
                    .map(|i| {
                        let class = data::input_class(seed, STREAM_TARGETS, i as u64, k as u64)
                            .map_or(params.ignore_index, |c| c as i64);
                        if i % m.max(1) != 0 || class != params.ignore_index {
                            return class;
                        }
                        let c = (i % k.max(1)) as i64;
                        if c == params.ignore_index {
                            (c + 1) % k.max(1) as i64
                        } else {
                            c
                        }
                    })
                    .collect();
                (Some(self.s.upload(&host)?), host)
            } else {
                (None, Vec::new())
            };
            return Ok(Problem {
                shape: *shape,
                a,
                a_view,
                b: None,
                b2: None,
                c: None,
                out,
                host_a,
                host_b: Vec::new(),
                host_b2: Vec::new(),
                host_c: Vec::new(),
                tensors,
                targets,
                host_targets,
                out_len,
                gemm: None,
                ldd: ldd as i64,
            });
        }
        let ba = if lay.shared_a { 1 } else { batch };
        let bb = if lay.shared_b { 1 } else { batch };
        let lda = if lay.a == Layout::Row { k } else { m };
        let ldb = if lay.b == Layout::Col { k } else { n };
        let (a, host_a) = self.input::<A>(ba * m * k, seed, STREAM_A)?;
        let (b, host_b) = self.input::<A>(bb * k * n, seed, STREAM_B)?;
        let b = Some(b);
        let (b2, host_b2) = if w.family() == Family::GemmGlu {
            let (b2, h) = self.input::<A>(bb * k * n, seed, STREAM_B2)?;
            (Some(b2), h)
        } else {
            (None, Vec::new())
        };
        let (c, host_c) = if params.beta != 0.0 {
            let (c, h) = self.input::<D>(out_len, seed, STREAM_C)?;
            (Some(c), h)
        } else {
            (None, Vec::new())
        };
        Ok(Problem {
            shape: *shape,
            a,
            a_view: None,
            b,
            b2,
            c,
            out,
            host_a,
            host_b,
            host_b2,
            host_c,
            tensors,
            targets: None,
            host_targets: Vec::new(),
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
                stride_a: if lay.shared_a { 0 } else { (m * k) as i64 },
                stride_b: if lay.shared_b { 0 } else { (k * n) as i64 },
            }),
            ldd: ldd as i64,
        })
    }

    /// The ABI problem struct for a problem instance (workspace filled in later).
    pub(super) fn problem<A: HostElement, D: HostElement>(&self, p: &Problem<A, D>) -> cs_problem {
        let w = self.workload;
        let params = w.params();
        let lay = w.layouts();
        let sh = p.shape;
        let mut operands = [cs_operand::default(); abi::CS_MAX_OPERANDS as usize];
        for (o, t) in operands.iter_mut().zip(&p.tensors) {
            *o = cs_operand {
                ptr: t.buf.ptr as *const _,
                kind: t.kind.abi_value(),
                dtype: t.dtype.abi_value(),
                ld: t.ld,
                batch_stride: t.batch_stride,
                ..cs_operand::default()
            };
            if let Some(map) = &t.bmap {
                for i in 0..2 {
                    o.row_div[i] = map.div[i] as i64;
                    o.row_mod[i] = map.modulus[i] as i64;
                    o.row_stride[i] = map.stride[i] as i64;
                }
            }
        }
        // gemm_bias_act's bias is the chain's first tensor; the old field points at it too.
        let bias = if w.family() == Family::GemmBiasAct && params.bias {
            p.tensors.first().map_or(0, |t| t.buf.ptr)
        } else {
            0
        };
        let mut cp = cs_problem {
            abi_version: abi::CS_ABI_VERSION,
            family: w.family().abi_value(),
            m: sh.m as i64,
            n: sh.n as i64,
            // A softmax's k: the rows of each matrix its index ops see (0: all m).
            k: if matches!(w.family(), Family::Softmax | Family::LogSoftmax) {
                w.tri_rows(&sh) as i64
            } else {
                sh.k as i64
            },
            batch: sh.batch as i64,
            dtype_ab: A::DTYPE.abi_value(),
            dtype_cd: D::DTYPE.abi_value(),
            dtype_acc: w.acc_dtype().abi_value(),
            layout_a: lay.a.abi_value(),
            layout_b: lay.b.abi_value(),
            layout_cd: lay.c.abi_value(),
            a: p.a.ptr as *const _,
            b: p.b.as_ref().map_or(0, |b| b.ptr) as *const _,
            c: p.c.as_ref().map_or(0, |c| c.ptr) as *const _,
            d: p.out.at(GUARD_ELEMENTS) as *mut _,
            bias: bias as *const _,
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
            operands,
            num_operands: p.tensors.len() as i32,
            act_beta: params.act_beta,
            scale_a: params.scale_a,
            scale_b: params.scale_b,
            scale_d: params.scale_d,
            log_softmax: i32::from(params.log_softmax),
            b2: p.b2.as_ref().map_or(0, |b| b.ptr) as *const _,
            ldb2: 0,
            batch_stride_b2: 0,
            gate: params.gate.abi_value(),
            reserved1: 0,
            norm: params.norm.abi_value(),
            norm_eps: params.eps,
            reduce: params.reduce.abi_value(),
            // The spec's rules keep groups within i32.
            norm_groups: if w.family() == Family::GemmNorm {
                i32::try_from(params.groups).unwrap_or(i32::MAX)
            } else {
                0
            },
            scan: params.scan.abi_value(),
            scan_flags: crate::spec::ScanKind::flags(params.reverse, params.exclusive),
            targets: p.targets.as_ref().map_or(0, |t| t.ptr) as *const _,
            ignore_index: params.ignore_index,
            total: params.total.abi_value(),
            reserved2: 0,
            view_rank: 0,
            reserved3: 0,
            view_offset: 0,
            view_extent: [0; abi::CS_MAX_VIEW_DIMS as usize],
            view_stride: [0; abi::CS_MAX_VIEW_DIMS as usize],
        };
        // A norm's or a scan's A is batched like D (A and D share their layout and leading
        // dimension).
        if matches!(w.family(), Family::Norm | Family::Scan) {
            cp.batch_stride_a = cp.batch_stride_d;
        }
        // gemm_reduce's D is m x 1 per batch.
        if w.family() == Family::GemmReduce {
            cp.batch_stride_d = sh.m as i64;
            cp.batch_stride_c = sh.m as i64;
        }
        // A reduction's A is m x k per batch in its layout; D is m x 1, or one value a
        // batch with a total.
        if w.family() == Family::Reduce {
            cp.lda = reduce_lda(lay.a, &sh) as i64;
            cp.batch_stride_a = (sh.m * sh.k) as i64;
            cp.ldd = 1;
            cp.ldc = 1;
            cp.batch_stride_d = w.d_rows(&sh) as i64;
        }
        // A view of A: its dims (the output's), strides and offset.
        if let Some(v) = w.view_on(&sh) {
            cp.view_rank = v.extents.len() as i32;
            cp.view_offset = v.offset as i64;
            for (t, (&e, &st)) in v.extents.iter().zip(&v.strides).enumerate() {
                if let (Some(x), Some(y)) = (cp.view_extent.get_mut(t), cp.view_stride.get_mut(t)) {
                    *x = e as i64;
                    *y = st as i64;
                }
            }
        }
        // An activation workload that is one activation (an [[epilogue]] one included)
        // states it, with its parameters, in the problem.
        if w.family() == Family::Activation {
            if let Some((act, p0, p1)) = w.chain().single_activation() {
                cp.activation = act.abi_value();
                cp.act_alpha = p0 as f32;
                cp.act_beta = p1 as f32;
            }
        }
        if let Some(g) = &p.gemm {
            cp.lda = g.lda;
            cp.ldb = g.ldb;
            cp.batch_stride_a = g.stride_a;
            cp.batch_stride_b = g.stride_b;
            if p.b2.is_some() {
                cp.ldb2 = g.ldb;
                cp.batch_stride_b2 = g.stride_b;
            }
        }
        cp
    }
}
