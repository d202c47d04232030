//! Validation on the device: inputs generated from the seed by the same counter-based
//! generator as the host's (`data::input_value`), the fp64 reference computed element by
//! element next to the candidate's output (the epilogue chain in fp64, the row softmax
//! from fp64 row statistics, a GEMM from cuBLAS's pedantic fp32 product and the sum of
//! |a||b| that bounds its rounding), and the comparison reduced to a summary: counts,
//! extremes, where the bad elements are (the same bins as the host comparison), the first
//! bad elements and the worst. Only the summary crosses to the host
//! ([`crate::eval::compare::Comparison::from_summary`] writes the report).

use std::fmt::Write as _;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, DeviceRepr, LaunchConfig, PushKernelArg};

use super::session::{CudaFailure, Session};
use crate::eval::compare::{BinCounts, Binning, Dims, Mismatch, Summary};
use crate::spec::chain::{BinOp, Chain, Op, Operand, TensorKind};
use crate::spec::{Activation, DType, NormKind, ReduceKind, ScanKind};

fn err(what: &str, e: impl std::fmt::Debug) -> CudaFailure {
    CudaFailure {
        code: -1,
        message: format!("{what}: {e:?}"),
    }
}

/// The bound, per unit of magnitude, on the fp32 evaluation of the ops before a softmax
/// (8 fp32 ulps of the input's and of the result's magnitudes): the host's and the
/// device's softmax-with-ops references both use it.
pub const SOFTMAX_OPS_U: f64 = 8.0 * 5.960_464_477_539_063e-8;

/// The most a softmax output's slack from the ops before it may be, relative to the output
/// (for a log-softmax, in absolute terms): beyond it the row is ill-conditioned (a
/// finfo.min mask on a padded row) and a larger slack would pass any output.
pub const SOFTMAX_BOUND_CAP: f64 = 0.5;

/// What the reference of each element is computed from.
#[derive(Debug, Clone, PartialEq)]
pub enum Reference {
    /// `chain(A[i])` (the activation family).
    Chain,
    /// Row softmax (or log-softmax) of A, from per-row statistics.
    Softmax { log: bool },
    /// `chain(scale * z + beta * C)` with z the GEMM product.
    Gemm,
    /// `gate(scale * z1) * (scale * z2)`.
    Glu { gate: Activation },
    /// Row softmax (or log-softmax) of `scale * z + beta * C`.
    GemmSoftmax { log: bool },
    /// softmax / log_softmax of the ops before it (`cs_chain_x`: the chain on the input,
    /// with its fp32 evaluation's bound), each output's bound carried through the row as
    /// the host's `softmax_with_bounds` does (the row's third statistic: sum_j p_j e_j).
    ChainSoftmax { log: bool },
    /// `chain((A[i] - shift) * scale)`, each logical row's shift and scale from its fp64
    /// statistics (`cs_norm_stats`).
    Norm { kind: NormKind, eps: f64 },
    /// `chain(reduce(row))`, each row's reduction and its error bound from
    /// `cs_reduce_stats`, the bound carried through the chain.
    Reduce { kind: ReduceKind },
    /// `chain(scan(row))` at each element: the fp64 scan before the element's chunk of 32
    /// positions (and the sum of |x| before it) from `cs_scan_stats`, then the chunk's own
    /// elements up to it; the bound carried through the chain.
    Scan {
        kind: ScanKind,
        reverse: bool,
        exclusive: bool,
    },
}

/// Everything fixed for one workload's comparison kernels.
#[derive(Debug, Clone)]
pub struct CheckSpec {
    pub reference: Reference,
    pub chain: Chain,
    /// A reduction's `[[before]]` ops (the identity elsewhere); their tensors take the
    /// first slots of `CheckArgs::t`, the chain's the next.
    pub before: Chain,
    /// The output's type, and the input's (A for the chain and softmax references).
    pub out: DType,
    pub input: DType,
    /// D is column-major (logical rows are storage columns).
    pub col_major: bool,
}

/// The arguments of every comparison kernel, one struct (mirrored in the C++).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckArgs {
    pub got: u64,
    pub r: [u64; 5],
    pub t: [u64; 4],
    pub counters: u64,
    pub extremes: u64,
    pub bins: u64,
    pub first: u64,
    pub detail: u64,
    pub batch: i64,
    pub rows: i64,
    pub cols: i64,
    pub ld: i64,
    pub bstride: i64,
    pub tb: [i64; 4],
    pub rs: i64,
    pub cs: i64,
    pub bs: i64,
    pub ts: i64,
    pub nrb: i64,
    pub ncb: i64,
    pub nbb: i64,
    pub ntc: i64,
    pub bins_stride: i64,
    pub from: i64,
    /// Per operand slot, a broadcast operand's map (`BroadcastMap`): row_div[0],
    /// row_mod[0], row_stride[0], row_div[1], row_mod[1], row_stride[1], the column's
    /// stride; zeros for the other kinds.
    pub bt: [[i64; 7]; 4],
    pub scale: f64,
    pub beta: f64,
    /// The dot-product error bound per unit of sum |a b| (see the worker's `dot_bound`).
    pub ebound: f64,
    pub rtol: f64,
    pub atol: f64,
    pub scale_d: f64,
    /// The rows of each matrix an index op sees (a softmax over dims: the next-to-last
    /// dim; 0: the whole m rows).
    pub tri_rows: i64,
}

// SAFETY: a plain #[repr(C)] struct of integers and floats, copied by value into the
// kernel's parameter buffer, matching the C++ `CheckArgs` field for field.
unsafe impl DeviceRepr for CheckArgs {}

const ARGS_CPP: &str = r#"
struct CheckArgs {
  unsigned long long got, r[5], t[4], counters, extremes, bins, first, detail;
  long long batch, rows, cols, ld, bstride, tb[4], rs, cs, bs, ts, nrb, ncb, nbb, ntc, bins_stride, from, bt[4][7];
  double scale, beta, ebound, rtol, atol, scale_d;
  long long tri_rows;
};
"#;

/// Loads of every element type (no CUDA headers: NVRTC has none by default).
const LOADS: &str = r#"
__device__ __forceinline__ double ld_f32(const void* p, long long i) { return (double)((const float*)p)[i]; }
__device__ __forceinline__ double ld_i64(const void* p, long long i) { return (double)((const long long*)p)[i]; }
__device__ __forceinline__ double ld_bool(const void* p, long long i) { return ((const unsigned char*)p)[i] != 0 ? 1.0 : 0.0; }
__device__ __forceinline__ double ld_bf16(const void* p, long long i) {
  return (double)__uint_as_float(((unsigned)((const unsigned short*)p)[i]) << 16);
}
__device__ __forceinline__ double ld_f16(const void* p, long long i) {
  unsigned short h = ((const unsigned short*)p)[i]; float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return (double)f;
}
__device__ __forceinline__ double ld_e4m3(const void* p, long long i) {
  unsigned char b = ((const unsigned char*)p)[i];
  double sign = (b & 0x80) ? -1.0 : 1.0; int e = (b >> 3) & 0xF, m = b & 7;
  if (e == 0xF && m == 7) return __longlong_as_double(0x7ff8000000000000ll);
  return e == 0 ? sign * m * 0.001953125 : sign * (1.0 + m / 8.0) * exp2((double)(e - 7));
}
__device__ __forceinline__ double ld_e5m2(const void* p, long long i) {
  unsigned char b = ((const unsigned char*)p)[i];
  double sign = (b & 0x80) ? -1.0 : 1.0; int e = (b >> 2) & 0x1F, m = b & 3;
  if (e == 0x1F) return m == 0 ? sign * __longlong_as_double(0x7ff0000000000000ll) : __longlong_as_double(0x7ff8000000000000ll);
  return e == 0 ? sign * m * 1.52587890625e-05 : sign * (1.0 + m / 4.0) * exp2((double)(e - 15));
}
"#;

/// The activations in fp64, PyTorch's definitions (the host's `Activation::eval`).
const FP64_FUNCTIONS: &str = r#"
__device__ double csd_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
__device__ double csd_softplus(double x, double beta, double threshold) {
  double bx = beta * x; return bx > threshold ? x : log1p(exp(bx)) / beta;
}
__device__ double csd_clamp(double x, double lo, double hi) { return isnan(x) ? x : fmin(fmax(x, lo), hi); }
__device__ double csd_act(int a, double x, double p0, double p1) {
  switch (a) {
    case 0: return x;
    case 1: return isnan(x) ? x : fmax(x, 0.0);
    case 2: return x >= 0.0 ? x : p0 * x;
    case 3: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
    case 4: return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    case 5: return x * csd_sigmoid(p0 * x);
    case 6: return csd_sigmoid(x);
    case 7: return tanh(x);
    case 8: return 1.0507009873554804934 * (x > 0.0 ? x : 1.6732632423543772848 * expm1(x));
    case 9: return x > 0.0 ? x : p0 * expm1(x);
    case 10: return csd_clamp(x + 3.0, 0.0, 6.0) / 6.0;
    case 11: return x * csd_clamp(x + 3.0, 0.0, 6.0) / 6.0;
    case 12: return csd_clamp(x, p0, p1);
    case 13: return csd_softplus(x, p0, p1);
    case 14: return x / (1.0 + fabs(x));
    case 15: return x * tanh(csd_softplus(x, 1.0, 20.0));
    default: return x;
  }
}
__device__ double csd_max(double x, double y) { return (isnan(x) || isnan(y)) ? __longlong_as_double(0x7ff8000000000000ll) : fmax(x, y); }
__device__ double csd_min(double x, double y) { return (isnan(x) || isnan(y)) ? __longlong_as_double(0x7ff8000000000000ll) : fmin(x, y); }
"#;

fn loader(d: DType) -> &'static str {
    match d {
        DType::F32 => "ld_f32",
        DType::BF16 => "ld_bf16",
        DType::F16 => "ld_f16",
        DType::E4M3 => "ld_e4m3",
        DType::E5M2 => "ld_e5m2",
        DType::F64 => "ld_f32",
        DType::I64 => "ld_i64",
        DType::Bool => "ld_bool",
    }
}

fn lit(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 {
            "__longlong_as_double(0x7ff0000000000000ll)".into()
        } else {
            "__longlong_as_double(0xfff0000000000000ll)".into()
        }
    } else {
        format!("{v:e}")
    }
}

/// One op in fp64 C++ at `x` (`y`: a binary op's operand).
fn op_fp64(op: &Op, y: &str) -> String {
    match op {
        Op::Act(a, p0, p1) => format!("csd_act({}, x, {}, {})", a.abi_value(), lit(*p0), lit(*p1)),
        // The fp64 forms of the NaN-keeping min and max.
        Op::Binary(BinOp::Min, _) => format!("csd_min(x, {y})"),
        Op::Binary(BinOp::Max, _) => format!("csd_max(x, {y})"),
        // The fill as a double literal (the checker has no INFINITY macro).
        Op::Binary(BinOp::Fill { fill_bits, when }, _) => {
            crate::spec::chain::fill_cpp("x", y, *when, &lit(f64::from_bits(*fill_bits)))
        }
        Op::Binary(b, _) => b.cpp("x", y),
        Op::Clamp(lo, hi) => format!("csd_clamp(x, {}, {})", lit(*lo), lit(*hi)),
        Op::Neg => "-x".into(),
        Op::Abs => "fabs(x)".into(),
        Op::Exp => "exp(x)".into(),
        Op::Log => "log(x)".into(),
        Op::Sqrt => "sqrt(x)".into(),
        // Small integer and half powers as products, a reciprocal or a root, as the
        // kernel's functor writes them: pow's general path is ~100 instructions, and the
        // device references evaluate it billions of times.
        Op::Pow(p) => crate::spec::chain::pow_cpp("x", *p, ""),
        // The element's logical position (`csd_chain`'s lr, lc).
        Op::Tri { upper, diag, fill } => {
            crate::spec::chain::tri_cpp("x", *upper, *diag, &lit(*fill), "lr", "lc")
        }
    }
}

/// A reduction's `[[before]]` ops in fp64 C++: `csd_before(z, t, &err)`, the value and the
/// bound on an fp32 evaluation's error (the host's `Chain::eval_with_error`).
fn before_fp64(chain: &Chain) -> String {
    let mut s = String::new();
    for (n, st) in chain.steps.iter().enumerate() {
        let _ = writeln!(
            s,
            "__device__ double csd_bs{n}(double x, double y) {{ (void)y; return {}; }}",
            op_fp64(&st.op, "y")
        );
    }
    let saved = chain.saved.len().max(1);
    let _ = writeln!(
        s,
        "__device__ double csd_before(double z, const double* t, double* err) {{\n  (void)t;\n  double x = z, e = 0.0;\n  double sv[{saved}], se[{saved}]; (void)sv; (void)se;\n  const double dx[5] = {{-1.0, -0.5, 0.0, 0.5, 1.0}}, dy[3] = {{-1.0, 0.0, 1.0}};"
    );
    for (n, st) in chain.steps.iter().enumerate() {
        // An activation's rounding on its input's scale too (`Chain::eval_with_error`).
        let scale = if matches!(st.op, Op::Act(..)) {
            "fabs(v) + fabs(x)"
        } else {
            "fabs(v)"
        };
        let (y, ey) = match &st.op {
            Op::Binary(_, o) => match o {
                Operand::Scalar(v) => (lit(*v), "0.0".to_string()),
                Operand::Tensor(i) => (format!("t[{i}]"), "0.0".into()),
                Operand::Z => ("z".into(), "0.0".into()),
                Operand::Saved(i) => (format!("sv[{i}]"), format!("se[{i}]")),
            },
            _ => ("0.0".into(), "0.0".into()),
        };
        let _ = writeln!(
            s,
            "  {{\n    const double y = {y}, ey = {ey};\n    const double v = csd_bs{n}(x, y);\n    double dev = 0.0;\n    for (int p = 0; p < 5; ++p)\n      for (int q = 0; q < 3; ++q) {{\n        if (q != 1 && ey == 0.0) continue;\n        const double d = fabs(csd_bs{n}(x + dx[p] * e, y + dy[q] * ey) - v);\n        if (isfinite(d)) dev = fmax(dev, d);\n      }}\n    e = dev + {u} * ({scale});\n    if (!isfinite(e)) e = 0.0;\n    x = v;\n  }}",
            u = lit(crate::spec::chain::BEFORE_OP_U)
        );
        if let Some(i) = st.save {
            let _ = writeln!(s, "  sv[{i}] = x; se[{i}] = e;");
        }
    }
    s.push_str("  *err = e;\n  return x;\n}\n");
    s
}

/// The chain in fp64 C++: `csd_chain(z, t, lr, lc)`, at the element's logical row and
/// column (read by the index ops).
fn chain_fp64(chain: &Chain) -> String {
    let mut s = String::from(
        "__device__ double csd_chain(double z, const double* t, long long lr, long long lc) {\n  (void)t; (void)lr; (void)lc;\n  double x = z;\n",
    );
    let saved = chain.saved.len().max(1);
    let _ = writeln!(s, "  double sv[{saved}]; (void)sv;");
    for st in &chain.steps {
        let y = |o: &Operand| match o {
            Operand::Scalar(v) => lit(*v),
            Operand::Tensor(i) => format!("t[{i}]"),
            Operand::Z => "z".into(),
            Operand::Saved(i) => format!("sv[{i}]"),
        };
        let e = match &st.op {
            Op::Binary(_, o) => op_fp64(&st.op, &y(o)),
            op => op_fp64(op, "0.0"),
        };
        let _ = writeln!(s, "  x = {e};");
        if let Some(i) = st.save {
            let _ = writeln!(s, "  sv[{i}] = x;");
        }
    }
    s.push_str("  return x;\n}\n");
    // The chain at x0 and how far it moves when x0 is off by up to e (the host's
    // `chain_with_slack`: the ends and midpoints of the interval).
    s.push_str(
        "__device__ double csd_chain_slack(double x0, double e, const double* t, double* dev, long long lr, long long lc) {\n  const double w = csd_chain(x0, t, lr, lc);\n  const double ds[4] = {-e, -0.5 * e, 0.5 * e, e};\n  *dev = 0.0;\n  for (int q = 0; q < 4; ++q) *dev = fmax(*dev, fabs(csd_chain(x0 + ds[q], t, lr, lc) - w));\n  return w;\n}\n",
    );
    s
}

/// Loads of the chain's tensor operands at (batch b, logical row lr, logical col lc) or
/// dense index i, into `t[]`.
fn tensor_loads(spec: &CheckSpec) -> String {
    let mut tload = String::new();
    let nb = spec.before.tensors.len();
    for (i, t) in spec.chain.tensors.iter().enumerate() {
        let slot = nb + i;
        let idx = match t.kind {
            TensorKind::Row => format!("b * a.tb[{slot}] + lc"),
            TensorKind::Col => format!("b * a.tb[{slot}] + lr"),
            // Row-major D only (the rules): a.cols is the row length.
            TensorKind::Channel(r) => {
                format!("b * a.tb[{slot}] + lr * {r}LL + lc / (a.cols / {r}LL)")
            }
            TensorKind::Matrix => "i".into(),
            TensorKind::Broadcast(_) => broadcast_index(slot, "lr", "lc"),
        };
        let _ = writeln!(
            tload,
            "  t[{i}] = {}((const void*)a.t[{slot}], {idx});",
            loader(t.dtype)
        );
    }
    tload
}

/// The C++ index of broadcast operand `slot` at (row, col) of D, from `CheckArgs::bt`.
fn broadcast_index(slot: usize, row: &str, col: &str) -> String {
    format!(
        "b * a.tb[{slot}] + ({row} / a.bt[{slot}][0]) % a.bt[{slot}][1] * a.bt[{slot}][2] + \
         ({row} / a.bt[{slot}][3]) % a.bt[{slot}][4] * a.bt[{slot}][5] + {col} * a.bt[{slot}][6]"
    )
}

/// Loads of the `[[before]]` tensors into `tb4[]` (each line indented by `indent`) at the
/// element in column `col` of row `row` of batch b, `matrix` the C++ of a matrix operand's
/// element there (its slot given). A reduction's are indexed like A (j of row lr, `lda`,
/// `a_col` as `cs_reduce_stats` has them), a scan's like D (`cs_scan_x`: lc of row lr,
/// dense index ei).
fn before_loads(
    spec: &CheckSpec,
    (row, col): (&str, &str),
    matrix: impl Fn(usize) -> String,
    indent: &str,
) -> String {
    let mut s = String::new();
    for (i, t) in spec.before.tensors.iter().enumerate() {
        let idx = match t.kind {
            TensorKind::Row => format!("b * a.tb[{i}] + {col}"),
            TensorKind::Col => format!("b * a.tb[{i}] + {row}"),
            // Never in [[before]] (the rules); indexed as in the epilogue.
            TensorKind::Channel(r) => {
                format!("b * a.tb[{i}] + {row} * {r}LL + {col} / (a.cols / {r}LL)")
            }
            TensorKind::Matrix => matrix(i),
            TensorKind::Broadcast(_) => broadcast_index(i, row, col),
        };
        let _ = writeln!(
            s,
            "{indent}tb4[{i}] = {}((const void*)a.t[{i}], {idx});",
            loader(t.dtype)
        );
    }
    s
}

/// The CUDA C++ of a workload's comparison kernels.
pub fn check_source(spec: &CheckSpec) -> String {
    let mut s = String::new();
    s.push_str(ARGS_CPP);
    s.push_str(LOADS);
    s.push_str(FP64_FUNCTIONS);
    s.push_str(&chain_fp64(&spec.chain));
    if spec.before.is_identity() {
        s.push_str("__device__ double csd_before(double z, const double* t, double* err) { (void)t; *err = 0.0; return z; }\n");
    } else {
        s.push_str(&before_fp64(&spec.before));
    }
    let before_load = before_loads(
        spec,
        ("lr", "j"),
        |i| format!("b * a.tb[{i}] + (a_col ? j * lda + lr : lr * lda + j)"),
        "    ",
    );
    let out_ld = loader(spec.out);
    let in_ld = loader(spec.input);
    let (poison_ty, poison) = match spec.out {
        DType::F32 => ("unsigned int", "0x7FC00001u"),
        DType::BF16 => ("unsigned short", "0x7FC1"),
        DType::F16 => ("unsigned short", "0x7E01"),
        DType::I64 => ("unsigned long long", "0x7FC000017FC00001ull"),
        _ => ("unsigned char", "0xFF"),
    };
    let tload = tensor_loads(spec);
    // gemm_softmax's reference reads its operands through cs_gemm_x, not here.
    let ref_tload = if matches!(
        spec.reference,
        Reference::GemmSoftmax { .. } | Reference::ChainSoftmax { .. }
    ) {
        ""
    } else {
        tload.as_str()
    };
    let reference = match &spec.reference {
        Reference::Chain => format!("  *want = csd_chain({in_ld}((const void*)a.r[0], i), t, lr, lc); *slack = 0.0;\n"),
        Reference::Softmax { log } => format!(
            "  const double x = {in_ld}((const void*)a.r[0], i);\n  const double* st = (const double*)a.r[1] + 2 * (b * (col_major ? a.cols : a.rows) + lr);\n  *want = {};\n  *slack = 0.0;\n",
            if *log {
                "x - st[0] - log(st[1])"
            } else {
                "exp(x - st[0]) / st[1]"
            }
        ),
        Reference::Gemm => format!(
            "{}  *want = csd_chain_slack(acc + cc, e, t, slack, lr, lc);\n",
            gemm_z(0, 1, true, spec.out)
        ),
        Reference::Glu { gate } => format!(
            "{}  const double x1 = acc + cc, e1 = e;\n{}  const double x2 = acc2 + cc2;\n  const double w = csd_act({g}, x1, {p0}, {p1}) * x2;\n  double dev = 0.0;\n  const double d1[4] = {{-e1, -0.5 * e1, 0.5 * e1, e1}};\n  const double d2[2] = {{-e2, e2}};\n  for (int q = 0; q < 4; ++q) for (int u = 0; u < 2; ++u) dev = fmax(dev, fabs(csd_act({g}, x1 + d1[q], {p0}, {p1}) * (x2 + d2[u]) - w));\n  *want = w; *slack = dev;\n",
            gemm_z(0, 1, false, spec.out),
            gemm_z_named(2, 3, false, spec.out, "2"),
            g = gate.abi_value(),
            p0 = lit(gate.default_params().0),
            p1 = lit(gate.default_params().1),
        ),
        // A batch norm's statistics are row lr's of every item, kept at item 0.
        Reference::Norm { kind, .. } => format!(
            "  const double x = {in_ld}((const void*)a.r[0], i);\n  const double* st = (const double*)a.r[1] + 2 * ({item} * (col_major ? a.cols : a.rows) + lr);\n  *want = csd_chain((x - st[0]) * st[1], t, lr, lc);\n  *slack = 0.0;\n",
            item = if *kind == NormKind::Batch { "0" } else { "b" }
        ),
        Reference::Reduce { .. } => "  const double* st = (const double*)a.r[1] + 2 * (b * a.rows + lr);\n  *want = csd_chain_slack(st[0], st[1], t, slack, lr, 0);\n  if (isnan(*slack)) *slack = 0.0;\n".to_string(),
        Reference::Scan { kind, reverse, exclusive } => format!(
            "  const long long R = col_major ? a.cols : a.rows, C = col_major ? a.rows : a.cols;\n  const long long chunks = (C + 31) / 32, q = {rev} ? C - 1 - lc : lc, ch = q / 32;\n  const double* st = (const double*)a.r[1] + 3 * ((b * R + lr) * chunks + ch);\n  double v = st[0], ab = st[1], ce = st[2];\n  long long terms = ch * 32;\n  for (long long qq = ch * 32; qq < q + {incl}; ++qq) {{\n    double ej;\n    const double x = cs_scan_x(a, b, lr, {rev} ? C - 1 - qq : qq, &ej);\n    if ({prod}) {{ v *= x; ce *= fabs(x) + ej; }} else {{ v += x; ce += ej; }}\n    ab += fabs(x); ++terms;\n  }}\n  double e = {prod} ? (terms + 1.0) * a.ebound / 2.0 * fabs(v) + fmax(ce - fabs(v), 0.0) : a.ebound * ab + ce;\n  if (isnan(e)) e = 0.0;\n  *want = csd_chain_slack(v, e, t, slack, lr, lc);\n  if (isnan(*slack)) *slack = 0.0;\n",
            rev = if *reverse { "true" } else { "false" },
            incl = if *exclusive { 0 } else { 1 },
            prod = if *kind == ScanKind::Prod { "true" } else { "false" },
        ),
        Reference::ChainSoftmax { log } => format!(
            "  double ex;\n  const double x = cs_chain_x(a, i, b, lr, lc, &ex);\n  const double* st = (const double*)a.r[1] + 3 * (b * a.rows + lr);\n  const double mf = isfinite(st[0]) ? st[0] : 0.0;\n  const double p = exp(x - mf) / st[1];\n  const double bound = fmin(2.0 * (ex + st[2]), {cap});\n  *want = {};\n  *slack = {};\n",
            if *log { "x - mf - log(st[1])" } else { "p" },
            if *log { "bound" } else { "p > 0.0 ? bound * p : 0.0" },
            cap = lit(SOFTMAX_BOUND_CAP),
        ),
        Reference::GemmSoftmax { log } => format!(
            "  double ex;\n  const double x = cs_gemm_x(a, i, b, lr, lc, &ex);\n  const double* st = (const double*)a.r[3] + 3 * (b * (col_major ? a.cols : a.rows) + lr);\n  const double p = exp(x - st[0]) / st[1];\n  *want = {};\n  *slack = {};\n",
            if *log { "x - st[0] - log(st[1])" } else { "p" },
            if *log { "2.0 * st[2]" } else { "2.0 * st[2] * p" },
        ),
    };
    let col_major = if spec.col_major { "true" } else { "false" };
    let (norm_kind, norm_eps) = match &spec.reference {
        Reference::Norm { kind, eps } => (kind.abi_value(), lit(*eps)),
        _ => (0, lit(0.0)),
    };
    let reduce_kind = match &spec.reference {
        Reference::Reduce { kind } => kind.abi_value(),
        _ => 0,
    };
    let (scan_prod, scan_rev) = match &spec.reference {
        Reference::Scan { kind, reverse, .. } => (*kind == ScanKind::Prod, *reverse),
        _ => (false, false),
    };
    let scan_rev_word = if scan_rev {
        "from the row's end"
    } else {
        "from its start"
    };
    // What a GEMM's softmax reads at element i: the chain of the product (+ beta C), and
    // its error bound carried through the chain.
    let _ = write!(
        s,
        r#"
__device__ double cs_gemm_x(const CheckArgs& a, long long i, long long b, long long lr, long long lc, double* ex)
{{
  (void)b; (void)lr; (void)lc;
  double t[4] = {{0.0, 0.0, 0.0, 0.0}};
{tload}{gemm}  return csd_chain_slack(acc + cc, e, t, ex, lr, lc);
}}

// What a softmax reads at element i after the ops before it: the chain of the input, and
// the bound of its fp32 evaluation ({u} of the input's and the result's magnitudes, the
// first carried through the chain; none for an element an index op fills, or an infinite
// result), as the host's `chain_value_and_bound`.
__device__ double cs_chain_x(const CheckArgs& a, long long i, long long b, long long lr, long long lc, double* ex)
{{
  (void)b; (void)lr; (void)lc;
  double t[4] = {{0.0, 0.0, 0.0, 0.0}};
{tload}  const double z = {in_ld}((const void*)a.r[0], i);
  // An index op's row: within the matrix of the last two dims.
  const long long tr = a.tri_rows > 0 ? lr % a.tri_rows : lr;
  double dev;
  const double w = csd_chain_slack(z, {u} * fabs(z), t, &dev, tr, lc);
  *ex = isfinite(w) ? dev + {u} * fabs(w) : 0.0;
  return w;
}}

// A scan's input at position lc of logical row lr of batch b (A dense, shaped like D) after
// the [[before]] ops, and the bound of their fp32 evaluation (their operands indexed like D).
__device__ double cs_scan_x(const CheckArgs& a, long long b, long long lr, long long lc, double* ej)
{{
  const bool col_major = {col_major};
  const long long ei = b * a.rows * a.cols + (col_major ? lc * a.cols + lr : lr * a.cols + lc);
  double tb4[4] = {{0.0, 0.0, 0.0, 0.0}};
  (void)tb4;
{scan_load}  return csd_before({in_ld}((const void*)a.r[0], ei), tb4, ej);
}}
"#,
        gemm = gemm_z(0, 1, true, spec.out),
        u = lit(SOFTMAX_OPS_U),
        col_major = if spec.col_major { "true" } else { "false" },
        scan_load = before_loads(spec, ("lr", "lc"), |_| "ei".to_string(), "  "),
    );
    let _ = write!(
        s,
        r#"
// The reference of element (b, r, c) (storage coordinates; dense index i) and its slack.
__device__ void cs_reference(const CheckArgs& a, long long i, long long b, long long r, long long c, double* want, double* slack)
{{
  const bool col_major = {col_major};
  const long long lr = col_major ? c : r, lc = col_major ? r : c;
  (void)lr; (void)lc;
  double t[4] = {{0.0, 0.0, 0.0, 0.0}};
{ref_tload}{reference}  *want *= a.scale_d;
  *slack *= fabs(a.scale_d);
}}

// 0: pass; 1: wrong; 2: unwritten. err: the error's rank (infinite for non-finite).
__device__ int cs_judge(const CheckArgs& a, long long i, long long b, long long r, long long c,
                        double* gv, double* wv, double* err)
{{
  const long long at = b * a.bstride + r * a.ld + c;
  *gv = {out_ld}((const void*)a.got, at);
  double slack;
  cs_reference(a, i, b, r, c, wv, &slack);
  *err = 0.0;
  if (((const {poison_ty}*)a.got)[at] == ({poison_ty}){poison}) return 2;
  const double x = *gv, y = *wv;
  bool ok;
  if (isnan(y)) ok = isnan(x);
  else if (isinf(y)) ok = x == y;
  else ok = isfinite(x) && fabs(x - y) <= a.atol + a.rtol * fabs(y) + slack;
  if (ok) return 0;
  const double d = fabs(x - y);
  *err = (isfinite(y) && !isfinite(x)) || isnan(d) ? __longlong_as_double(0x7ff0000000000000ll) : d;
  return 1;
}}

extern "C" __global__ void cs_check_main(CheckArgs a)
{{
  unsigned long long* counters = (unsigned long long*)a.counters;
  unsigned long long* ext = (unsigned long long*)a.extremes;
  unsigned long long* bins = (unsigned long long*)a.bins;
  const long long plane = a.rows * a.cols, total = a.batch * plane;
  unsigned long long wrong = 0, unwritten = 0, naninf = 0, refnan = 0;
  double max_abs = 0.0, max_rel = 0.0, max_err = 0.0;
  long long first = 0x7fffffffffffffffll;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {{
    const long long b = i / plane, w = i % plane, r = w / a.cols, c = w % a.cols;
    double x, y, e;
    const int v = cs_judge(a, i, b, r, c, &x, &y, &e);
    if (isnan(y)) ++refnan;
    if (isfinite(x) && isfinite(y)) {{
      const double d = fabs(x - y);
      max_abs = fmax(max_abs, d);
      if (y != 0.0) max_rel = fmax(max_rel, d / fabs(y));
    }}
    if (v == 0) continue;
    if (i < first) first = i;
    unsigned long long* m = bins + (v == 2 ? 0 : a.bins_stride);
    atomicAdd(&m[r >> a.rs], 1ull);
    atomicAdd(&m[a.nrb + (c >> a.cs)], 1ull);
    atomicAdd(&m[a.nrb + a.ncb + (b >> a.bs)], 1ull);
    atomicAdd(&m[a.nrb + a.ncb + a.nbb + (r >> a.ts) * a.ntc + (c >> a.ts)], 1ull);
    if (v == 2) {{ ++unwritten; continue; }}
    ++wrong;
    if (isfinite(y) && !isfinite(x)) ++naninf;
    max_err = fmax(max_err, e);
  }}
  for (int o = 16; o > 0; o >>= 1) {{
    wrong += __shfl_xor_sync(0xffffffffu, wrong, o);
    unwritten += __shfl_xor_sync(0xffffffffu, unwritten, o);
    naninf += __shfl_xor_sync(0xffffffffu, naninf, o);
    refnan += __shfl_xor_sync(0xffffffffu, refnan, o);
    max_abs = fmax(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, o));
    max_rel = fmax(max_rel, __shfl_xor_sync(0xffffffffu, max_rel, o));
    max_err = fmax(max_err, __shfl_xor_sync(0xffffffffu, max_err, o));
    {{ const long long f2 = __shfl_xor_sync(0xffffffffu, first, o); first = f2 < first ? f2 : first; }}
  }}
  if ((threadIdx.x & 31) == 0) {{
    if (wrong) atomicAdd(&counters[1], wrong);
    if (unwritten) atomicAdd(&counters[2], unwritten);
    if (naninf) atomicAdd(&counters[3], naninf);
    if (refnan) atomicAdd(&counters[0], refnan);
    atomicMax(&ext[0], (unsigned long long)__double_as_longlong(max_abs));
    atomicMax(&ext[1], (unsigned long long)__double_as_longlong(max_rel));
    atomicMax(&ext[2], (unsigned long long)__double_as_longlong(max_err));
    if (first != 0x7fffffffffffffffll) atomicMin((unsigned long long*)a.first, (unsigned long long)first);
  }}
}}

// The lowest index whose error equals the largest (the worst wrong element).
extern "C" __global__ void cs_check_worst(CheckArgs a)
{{
  const unsigned long long target = ((const unsigned long long*)a.extremes)[2];
  const long long plane = a.rows * a.cols, total = a.batch * plane;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {{
    const long long b = i / plane, w = i % plane, r = w / a.cols, c = w % a.cols;
    double x, y, e;
    if (cs_judge(a, i, b, r, c, &x, &y, &e) == 1 && (unsigned long long)__double_as_longlong(e) == target)
      atomicMin((unsigned long long*)a.detail + 40, (unsigned long long)i);
  }}
}}

// The first bad elements in index order from `from` (one block, in order): up to 8, each
// as (index, got, want, kind) in `detail`; then the worst one's got and want.
extern "C" __global__ void cs_check_detail(CheckArgs a)
{{
  double* out = (double*)a.detail;
  unsigned long long* idx = (unsigned long long*)a.detail;
  __shared__ int found;
  if (threadIdx.x == 0) found = 0;
  __syncthreads();
  const long long plane = a.rows * a.cols, total = a.batch * plane;
  for (long long base = a.from; base < total; base += blockDim.x) {{
    const long long i = base + threadIdx.x;
    int v = 0; double x = 0.0, y = 0.0, e;
    if (i < total) {{
      const long long b = i / plane, w = i % plane, r = w / a.cols, c = w % a.cols;
      v = cs_judge(a, i, b, r, c, &x, &y, &e);
    }}
    const unsigned mask = __ballot_sync(0xffffffffu, v != 0);
    __shared__ unsigned warp_masks[32];
    if ((threadIdx.x & 31) == 0) warp_masks[threadIdx.x / 32] = mask;
    __syncthreads();
    if (v != 0) {{
      int before = __popc(mask & ((1u << (threadIdx.x & 31)) - 1u));
      for (int wi = 0; wi < (int)threadIdx.x / 32; ++wi) before += __popc(warp_masks[wi]);
      const int slot = found + before;
      if (slot < 8) {{
        idx[4 * slot] = (unsigned long long)i; out[4 * slot + 1] = x; out[4 * slot + 2] = y; out[4 * slot + 3] = (double)v;
      }}
    }}
    __syncthreads();
    if (threadIdx.x == 0) {{
      int n = 0;
      for (int wi = 0; wi < (int)(blockDim.x + 31) / 32; ++wi) n += __popc(warp_masks[wi]);
      found += n;
    }}
    __syncthreads();
    if (found >= 8) break;
  }}
  if (threadIdx.x == 0) {{
    const unsigned long long wi = idx[40];
    if (wi < (unsigned long long)total) {{
      const long long i = (long long)wi, b = i / plane, w = i % plane, r = w / a.cols, c = w % a.cols;
      double x, y, e;
      cs_judge(a, i, b, r, c, &x, &y, &e);
      out[41] = x; out[42] = y;
    }}
  }}
}}

// The sum (or, with take_max, the largest) of v over the CTA, returned to every thread;
// red holds blockDim.x doubles (a power of two).
__device__ double csd_block_reduce(double v, double* red, bool take_max)
{{
  red[threadIdx.x] = v; __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
    if (threadIdx.x < s) red[threadIdx.x] = take_max ? fmax(red[threadIdx.x], red[threadIdx.x + s]) : red[threadIdx.x] + red[threadIdx.x + s];
    __syncthreads();
  }}
  const double r = red[0]; __syncthreads();
  return r;
}}

// Per-row statistics in fp64 for the softmax references: max and sum of exp(x - max) (and
// for a GEMM's rows (with_gemm 1), the largest error bound of the row; for the ops before a
// softmax (2), sum_j p_j e_j of the row's bounds e_j), one block per logical row.
extern "C" __global__ void cs_row_stats(CheckArgs a, double* stats, int with_gemm)
{{
  const bool col_major = {col_major};
  const long long R = col_major ? a.cols : a.rows, C = col_major ? a.rows : a.cols;
  const long long row = blockIdx.x, b = row / R, lr = row % R;
  __shared__ double red[1024];
  double mx = -__longlong_as_double(0x7ff0000000000000ll), em = 0.0;
  for (long long lc = threadIdx.x; lc < C; lc += blockDim.x) {{
    const long long i = b * a.rows * a.cols + (col_major ? lc * a.cols + lr : lr * a.cols + lc);
    double x, e = 0.0;
    if (with_gemm == 1) {{
      x = cs_gemm_x(a, i, b, lr, lc, &e);
    }} else if (with_gemm == 2) {{
      x = cs_chain_x(a, i, b, lr, lc, &e);
    }} else {{
      x = {in_ld}((const void*)a.r[0], i);
    }}
    mx = fmax(mx, x); em = fmax(em, e);
  }}
  mx = csd_block_reduce(mx, red, true);
  em = csd_block_reduce(em, red, true);
  // A row of -inf only (every element masked): exp(x - 0) = 0, a 0 / 0 reference.
  const double mf = isfinite(mx) ? mx : 0.0;
  double sum = 0.0, we = 0.0;
  for (long long lc = threadIdx.x; lc < C; lc += blockDim.x) {{
    const long long i = b * a.rows * a.cols + (col_major ? lc * a.cols + lr : lr * a.cols + lc);
    double x, ex = 0.0;
    if (with_gemm == 1) {{
      x = cs_gemm_x(a, i, b, lr, lc, &ex);
    }} else if (with_gemm == 2) {{
      x = cs_chain_x(a, i, b, lr, lc, &ex);
    }} else {{
      x = {in_ld}((const void*)a.r[0], i);
    }}
    const double q = exp(x - mf);
    sum += q;
    if (q > 0.0) we += q * ex;
  }}
  sum = csd_block_reduce(sum, red, false);
  we = csd_block_reduce(we, red, false);
  if (threadIdx.x == 0) {{
    double* o = stats + (with_gemm ? 3 : 2) * row;
    o[0] = mx; o[1] = sum;
    if (with_gemm == 1) o[2] = em;
    if (with_gemm == 2) o[2] = sum > 0.0 ? we / sum : 0.0;
  }}
}}

// Per-row (shift, scale) in fp64 for the norm reference: y = (x - shift) * scale, from the
// row's sums of x, x^2 and |x| and its sum of squares about the mean (a second pass).
extern "C" __global__ void cs_norm_stats(CheckArgs a, double* stats)
{{
  const bool col_major = {col_major};
  const long long R = col_major ? a.cols : a.rows, C = col_major ? a.rows : a.cols;
  const long long row = blockIdx.x, lr = row % R;
  // A batch norm (kind 4): row lr of every batch item together, by the first item's block;
  // the others have nothing to do (the reference reads its statistics at item 0).
  const bool over_batch = {norm_kind} == 4;
  if (over_batch && row >= R) return;
  const long long b0 = over_batch ? 0 : row / R, b1 = over_batch ? a.batch : b0 + 1;
  __shared__ double red[1024];
  double s1 = 0.0, s2 = 0.0, sa = 0.0;
  for (long long b = b0; b < b1; ++b)
  for (long long lc = threadIdx.x; lc < C; lc += blockDim.x) {{
    const long long i = b * a.rows * a.cols + (col_major ? lc * a.cols + lr : lr * a.cols + lc);
    const double x = {in_ld}((const void*)a.r[0], i);
    s1 += x; s2 += x * x; sa += fabs(x);
  }}
  s1 = csd_block_reduce(s1, red, false);
  s2 = csd_block_reduce(s2, red, false);
  sa = csd_block_reduce(sa, red, false);
  const double n = (double)C * (double)(b1 - b0), mean = s1 / n;
  double cs = 0.0;
  for (long long b = b0; b < b1; ++b)
  for (long long lc = threadIdx.x; lc < C; lc += blockDim.x) {{
    const long long i = b * a.rows * a.cols + (col_major ? lc * a.cols + lr : lr * a.cols + lc);
    const double d = {in_ld}((const void*)a.r[0], i) - mean;
    cs += d * d;
  }}
  cs = csd_block_reduce(cs, red, false);
  if (threadIdx.x == 0) {{
    const double eps = {norm_eps};
    double shift = 0.0, scale = 1.0;
    switch ({norm_kind}) {{
      case 0: scale = 1.0 / sqrt(s2 / n + eps); break;
      case 1: case 4: shift = mean; scale = 1.0 / sqrt(cs / n + eps); break;
      case 2: scale = 1.0 / fmax(sqrt(s2), eps); break;
      default: scale = 1.0 / fmax(sa, eps); break;
    }}
    stats[2 * row] = shift; stats[2 * row + 1] = scale;
  }}
}}

// Per-row (value, error bound) in fp64 of a reduction (one block a row of A: k elements,
// element j of row lr of batch b at b * sa + (a_col ? j * lda + lr : lr * lda + j)): the
// same numbers as the host's `ReduceKind::eval`, with a.ebound its allowed error per unit
// of the sum of |terms|.
// A total's (value, bound) of each batch item from its m rows' (value, bound) pairs in
// `rows` (one block an item): the sum (or mean) of the values, the rows' bounds summed plus
// the accumulation's u a value, as the host's `TotalKind::eval`.
extern "C" __global__ void cs_reduce_total_stats(const double* rows, double* out, long long m, int mean, double u)
{{
  const long long b = blockIdx.x;
  __shared__ double red[1024];
  double s = 0.0, e = 0.0, ab = 0.0;
  for (long long i = threadIdx.x; i < m; i += blockDim.x) {{
    const double v = rows[2 * (b * m + i)];
    s += v; ab += fabs(v); e += rows[2 * (b * m + i) + 1];
  }}
  s = csd_block_reduce(s, red, false);
  e = csd_block_reduce(e, red, false);
  ab = csd_block_reduce(ab, red, false);
  if (threadIdx.x == 0) {{
    const double n = mean ? (double)m : 1.0;
    out[2 * b] = s / n;
    out[2 * b + 1] = (e + u * ab) / n;
  }}
}}

extern "C" __global__ void cs_reduce_stats(CheckArgs a, double* stats, long long k, long long lda, int a_col, long long sa)
{{
  const long long row = blockIdx.x, b = row / a.rows, lr = row % a.rows;
  const void* A = (const void*)a.r[0];
  __shared__ double red[1024];
  const double inf = __longlong_as_double(0x7ff0000000000000ll);
  double s1 = 0.0, sa1 = 0.0, s2 = 0.0, mx = -inf, mn = inf, nan = 0.0;
  // The [[before]] ops' error bounds: summed, largest, summed squares.
  double be = 0.0, bm = 0.0, b2 = 0.0;
  double tb4[4] = {{0.0, 0.0, 0.0, 0.0}}; (void)tb4;
  for (long long j = threadIdx.x; j < k; j += blockDim.x) {{
{before_load}    double ej;
    const double x = csd_before({in_ld}(A, b * sa + (a_col ? j * lda + lr : lr * lda + j)), tb4, &ej);
    if (isnan(x)) {{ nan = 1.0; continue; }}
    s1 += x; sa1 += fabs(x); s2 += x * x; mx = fmax(mx, x); mn = fmin(mn, x);
    be += ej; bm = fmax(bm, ej); b2 += ej * ej;
  }}
  s1 = csd_block_reduce(s1, red, false);
  sa1 = csd_block_reduce(sa1, red, false);
  s2 = csd_block_reduce(s2, red, false);
  nan = csd_block_reduce(nan, red, true);
  mx = csd_block_reduce(mx, red, true);
  mn = -csd_block_reduce(-mn, red, true);
  be = csd_block_reduce(be, red, false);
  bm = csd_block_reduce(bm, red, true);
  b2 = csd_block_reduce(b2, red, false);
  const int kind = {reduce_kind};
  double se = 0.0;
  if (kind == 4 && nan == 0.0 && isfinite(mx)) {{
    for (long long j = threadIdx.x; j < k; j += blockDim.x) {{
{before_load}      double ej;
      se += exp(csd_before({in_ld}(A, b * sa + (a_col ? j * lda + lr : lr * lda + j)), tb4, &ej) - mx);
    }}
    se = csd_block_reduce(se, red, false);
  }}
  // argmax / argmin: the first index holding the extreme (or the first NaN). Each thread's
  // first hit is its smallest; the block takes the smallest of those.
  double first = 0.0;
  if (kind == 6 || kind == 7) {{
    const double target = kind == 6 ? mx : mn;
    double jf = inf;
    for (long long j = threadIdx.x; j < k; j += blockDim.x) {{
{before_load}      double ej;
      const double x = csd_before({in_ld}(A, b * sa + (a_col ? j * lda + lr : lr * lda + j)), tb4, &ej);
      if (nan != 0.0 ? isnan(x) : x == target) {{ jf = (double)j; break; }}
    }}
    first = -csd_block_reduce(-jf, red, true);
  }}
  if (threadIdx.x == 0) {{
    const double u = a.ebound, kf = (double)(k > 0 ? k : 1), qnan = __longlong_as_double(0x7ff8000000000000ll);
    double v = 0.0, e = 0.0;
    // As the host's row_bound: the before ops' bounds summed (sum), averaged (mean), the
    // largest (max, min, logsumexp), root-sum-square (L2).
    switch (kind) {{
      case 0: v = nan != 0.0 ? qnan : s1; e = u * sa1 + be; break;
      case 1: v = nan != 0.0 ? qnan : s1 / kf; e = (u * sa1 + be) / kf; break;
      case 2: v = nan != 0.0 ? qnan : mx; e = bm; break;
      case 3: v = nan != 0.0 ? qnan : mn; e = bm; break;
      case 4:
        if (nan != 0.0) v = qnan;
        else if (!isfinite(mx)) v = mx;
        else {{ v = mx + log(se); e = u * (2.0 + fabs(v)) + bm; }}
        break;
      case 6: case 7: v = first; e = 0.0; break;
      default: v = nan != 0.0 ? qnan : sqrt(s2); e = u * sqrt(s2) + sqrt(b2); break;
    }}
    stats[2 * row] = v; stats[2 * row + 1] = e;
  }}
}}

// Per logical row and chunk of 32 positions in scan order ({scan_rev_word}): the fp64 scan of
// the row before the chunk (the identity for the first), the sum of |x| before it and the
// [[before]] ops' bounds carried to it (a sum's added; a product's prod(|x| + e)), into
// stats[3 * (row * chunks + c)] (one block a row; A dense, shaped like D).
extern "C" __global__ void cs_scan_stats(CheckArgs a, double* stats)
{{
  const bool col_major = {col_major}, rev = {scan_rev}, prod = {scan_prod};
  const long long R = col_major ? a.cols : a.rows, C = col_major ? a.rows : a.cols;
  const long long row = blockIdx.x, b = row / R, lr = row % R, chunks = (C + 31) / 32;
  double* st = stats + 3 * row * chunks;
  for (long long c = threadIdx.x; c < chunks; c += blockDim.x) {{
    double v = prod ? 1.0 : 0.0, ab = 0.0, ce = prod ? 1.0 : 0.0;
    const long long end = c * 32 + 32 < C ? c * 32 + 32 : C;
    for (long long q = c * 32; q < end; ++q) {{
      double ej;
      const double x = cs_scan_x(a, b, lr, rev ? C - 1 - q : q, &ej);
      if (prod) {{ v *= x; ce *= fabs(x) + ej; }} else {{ v += x; ce += ej; }}
      ab += fabs(x);
    }}
    st[3 * c] = v; st[3 * c + 1] = ab; st[3 * c + 2] = ce;
  }}
  __syncthreads();
  if (threadIdx.x == 0) {{
    double v = prod ? 1.0 : 0.0, ab = 0.0, ce = prod ? 1.0 : 0.0;
    for (long long c = 0; c < chunks; ++c) {{
      const double tv = st[3 * c], ta = st[3 * c + 1], tc = st[3 * c + 2];
      st[3 * c] = v; st[3 * c + 1] = ab; st[3 * c + 2] = ce;
      if (prod) {{ v *= tv; ce *= tc; }} else {{ v += tv; ce += tc; }}
      ab += ta;
    }}
  }}
}}

// The two counts of a timed launch's check (outside the tolerance, still poison), added
// to counts[0] and counts[1]: the same judgement as validation's.
extern "C" __global__ void cs_check_count(CheckArgs a, unsigned long long* counts)
{{
  const long long plane = a.rows * a.cols, total = a.batch * plane;
  unsigned long long wrong = 0, unwritten = 0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {{
    const long long b = i / plane, w = i % plane, r = w / a.cols, c = w % a.cols;
    double x, y, e;
    const int v = cs_judge(a, i, b, r, c, &x, &y, &e);
    if (v == 1) ++wrong;
    if (v == 2) ++unwritten;
  }}
  for (int o = 16; o > 0; o >>= 1) {{
    wrong += __shfl_xor_sync(0xffffffffu, wrong, o);
    unwritten += __shfl_xor_sync(0xffffffffu, unwritten, o);
  }}
  if ((threadIdx.x & 31) == 0 && (wrong | unwritten)) {{
    atomicAdd(&counts[0], wrong);
    atomicAdd(&counts[1], unwritten);
  }}
}}

// Sampled GEMM entries in fp64, one block per sample (b, i, j) of `picks`: the exact dot
// product over k and its sum of |a b| (for B and, when given, B2), C's value, the output
// and the chain's tensors there: 10 doubles per sample in `out`.
extern "C" __global__ void cs_dots(CheckArgs a, const long long* picks, const void* A, const void* B,
    const void* B2, const void* Cm, long long k, long long lda, long long ldb, long long sa,
    long long sb, int a_col, int b_col, double* out)
{{
  const bool col_major = {col_major};
  const long long b = picks[3 * blockIdx.x], lr = picks[3 * blockIdx.x + 1], lc = picks[3 * blockIdx.x + 2];
  double d1 = 0.0, s1 = 0.0, d2 = 0.0, s2 = 0.0;
  for (long long kk = threadIdx.x; kk < k; kk += blockDim.x) {{
    const long long ai = b * sa + (a_col ? kk * lda + lr : lr * lda + kk);
    const long long bi = b * sb + (b_col ? lc * ldb + kk : kk * ldb + lc);
    const double x = {in_ld}(A, ai);
    const double t1 = x * {in_ld}(B, bi);
    d1 += t1; s1 += fabs(t1);
    if (B2) {{ const double t2 = x * {in_ld}(B2, bi); d2 += t2; s2 += fabs(t2); }}
  }}
  __shared__ double red[4][256];
  red[0][threadIdx.x] = d1; red[1][threadIdx.x] = s1; red[2][threadIdx.x] = d2; red[3][threadIdx.x] = s2;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
    if (threadIdx.x < s) for (int q = 0; q < 4; ++q) red[q][threadIdx.x] += red[q][threadIdx.x + s];
    __syncthreads();
  }}
  if (threadIdx.x == 0) {{
    double* o = out + 11 * blockIdx.x;
    const long long r = col_major ? lc : lr, c = col_major ? lr : lc;
    const long long i = b * a.rows * a.cols + r * a.cols + c;
    double t[4] = {{0.0, 0.0, 0.0, 0.0}};
{tload}    for (int q = 0; q < 4; ++q) o[q] = red[q][0];
    o[4] = Cm ? {out_ld}(Cm, i) : 0.0;
    o[5] = {out_ld}((const void*)a.got, b * a.bstride + r * a.ld + c);
    for (int q = 0; q < 4; ++q) o[6 + q] = t[q];
    o[10] = a.r[0] ? ld_f32((const void*)a.r[0], i) : __longlong_as_double(0x7ff8000000000000ll);
  }}
}}
"#
    );
    s
}

/// The GEMM value entering the chain at dense index i, and its error bound `e`.
fn gemm_z(z: usize, sabs: usize, with_c: bool, out: DType) -> String {
    gemm_z_named(z, sabs, with_c, out, "")
}

/// [`gemm_z`] declaring `acc{n}`, `cc{n}` and `e{n}` (a second product beside the first).
fn gemm_z_named(z: usize, sabs: usize, with_c: bool, out: DType, n: &str) -> String {
    let c = if with_c {
        format!(
            "a.r[2] ? a.beta * {}((const void*)a.r[2], i) : 0.0",
            loader(out)
        )
    } else {
        "0.0".into()
    };
    format!(
        "  const double acc{n} = a.scale * ld_f32((const void*)a.r[{z}], i);\n  const double cc{n} = {c};\n  const double e{n} = a.ebound * fabs(a.scale) * ld_f32((const void*)a.r[{sabs}], i) + 1.2e-7 * (fabs(acc{n}) + fabs(cc{n}));\n"
    )
}

/// The generator of the harness's inputs on the device: element i of input `stream` under
/// `seed`, the same values `data::input_value` gives on the host, rounded to the type.
pub fn fill_source() -> String {
    let mut s = String::from(LOADS);
    s.push_str(
        r#"
__device__ __forceinline__ unsigned long long cs_mix(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ double cs_input(unsigned long long seed, unsigned long long stream, unsigned long long i) {
  const unsigned long long r = cs_mix(seed ^ cs_mix(stream * 0xA24BAED4963EE407ull ^ i));
  const double u = (double)(r >> 11) / 9007199254740992.0;
  const int e = (int)((r & 7ull) % 5ull);
  double v = 2.0 * u - 1.0;
  if (v == 0.0) v = 0.5;
  return v * exp2((double)(e - 2));
}
__device__ __forceinline__ unsigned short cs_to_bf16(double v) {
  // Round to nearest even from the double, as the host does.
  const float f = (float)v;
  unsigned u = __float_as_uint(f);
  const unsigned short lo = (unsigned short)(u >> 16), hi = (unsigned short)(lo + 1);
  const double dl = fabs(v - (double)__uint_as_float(((unsigned)lo) << 16));
  const double dh = fabs(v - (double)__uint_as_float(((unsigned)hi) << 16));
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}
__device__ __forceinline__ unsigned short cs_to_f16(double v) {
  // Straight from the double (no double rounding through f32).
  unsigned short h;
  asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(v));
  return h;
}
__device__ unsigned char cs_to_fp8(double v, int man, int bias, double maxf) {
  const unsigned char sign = v < 0.0 ? 0x80 : 0;
  double a = fabs(v);
  if (a >= maxf) a = maxf;
  int e = a > 0.0 ? (int)floor(log2(a)) : 1 - bias;
  if (e < 1 - bias) e = 1 - bias;
  double q = rint(a / exp2((double)(e - man)));
  if (q >= 2.0 * (1 << man)) { q /= 2.0; e += 1; }
  unsigned char code;
  if (q >= (double)(1 << man)) code = (unsigned char)(((e + bias) << man) | (int)(q - (1 << man)));
  else code = (unsigned char)q;
  return sign | code;
}
extern "C" __global__ void cs_fill(void* dst, long long n, unsigned long long seed, unsigned long long stream, int dtype)
{
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const double v = cs_input(seed, stream, (unsigned long long)i);
    switch (dtype) {
      case 0: ((float*)dst)[i] = (float)v; break;
      case 1: ((unsigned short*)dst)[i] = cs_to_f16(v); break;
      case 2: ((unsigned short*)dst)[i] = cs_to_bf16(v); break;
      case 4: ((unsigned char*)dst)[i] = cs_to_fp8(v, 3, 7, 448.0); break;
      case 5: ((unsigned char*)dst)[i] = cs_to_fp8(v, 2, 15, 57344.0); break;
      case 7: ((unsigned char*)dst)[i] = v > 0.0 ? 1 : 0; break;
      default: break;
    }
  }
}

// dst[i] = (float)src[i] (exact for every input type), or its absolute value.
extern "C" __global__ void cs_widen(const void* src, float* dst, long long n, int dtype, int absolute)
{
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    double v;
    switch (dtype) {
      case 1: v = ld_f16(src, i); break;
      case 2: v = ld_bf16(src, i); break;
      case 4: v = ld_e4m3(src, i); break;
      case 5: v = ld_e5m2(src, i); break;
      case 7: v = ld_bool(src, i); break;
      default: v = ld_f32(src, i); break;
    }
    dst[i] = (float)(absolute ? fabs(v) : v);
  }
}

// dst = |src| for n elements of elem_bytes (1, 2, 4): the sign bit cleared.
extern "C" __global__ void cs_abs_bits(const void* src, void* dst, long long n, int elem_bytes)
{
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    if (elem_bytes == 4) ((unsigned*)dst)[i] = ((const unsigned*)src)[i] & 0x7fffffffu;
    else if (elem_bytes == 2) ((unsigned short*)dst)[i] = ((const unsigned short*)src)[i] & 0x7fff;
    else ((unsigned char*)dst)[i] = ((const unsigned char*)src)[i] & 0x7f;
  }
}

// dst[i] = src[offset + sum_t c_t * stride_t] for the n elements of a row-major view of
// up to 6 dims (extents e, strides s in elements; c the coordinates of i), elem_bytes each:
// an input read through a view, packed for the reference.
extern "C" __global__ void cs_gather_bits(const void* src, void* dst, long long n, int elem_bytes,
    int rank, long long offset, long long e0, long long e1, long long e2, long long e3,
    long long e4, long long e5, long long s0, long long s1, long long s2, long long s3,
    long long s4, long long s5)
{
  const long long e[6] = {e0, e1, e2, e3, e4, e5};
  const long long st[6] = {s0, s1, s2, s3, s4, s5};
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long r = i, at = offset;
    for (int t = rank - 1; t >= 0; --t) {
      at += (r % e[t]) * st[t];
      r /= e[t];
    }
    if (elem_bytes == 4) ((unsigned*)dst)[i] = ((const unsigned*)src)[at];
    else if (elem_bytes == 2) ((unsigned short*)dst)[i] = ((const unsigned short*)src)[at];
    else ((unsigned char*)dst)[i] = ((const unsigned char*)src)[at];
  }
}

// How many of n elements (elem_bytes each) differ bitwise between x and y, into *count.
extern "C" __global__ void cs_count_diff(const void* x, const void* y, long long n, int elem_bytes, unsigned long long* count)
{
  unsigned long long d = 0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    if (elem_bytes == 4) d += ((const unsigned*)x)[i] != ((const unsigned*)y)[i];
    else if (elem_bytes == 2) d += ((const unsigned short*)x)[i] != ((const unsigned short*)y)[i];
    else d += ((const unsigned char*)x)[i] != ((const unsigned char*)y)[i];
  }
  for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
  if ((threadIdx.x & 31) == 0 && d) atomicAdd(count, d);
}
"#,
    );
    s
}

fn compile(
    s: &Session,
    src: &str,
    name: &str,
    funcs: &[&str],
) -> Result<(Arc<CudaModule>, Vec<CudaFunction>), CudaFailure> {
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(
        src,
        cudarc::nvrtc::CompileOptions {
            arch: Some("compute_90"),
            name: Some(name.into()),
            // No contraction into FMAs: each element is judged with exactly the host
            // comparison's arithmetic, so both paths agree on every borderline element.
            fmad: Some(false),
            prec_div: Some(true),
            prec_sqrt: Some(true),
            ..Default::default()
        },
    )
    .map_err(|e| err("NVRTC", e))?;
    let module = s.ctx.load_module(ptx).map_err(CudaFailure::from)?;
    let f = funcs
        .iter()
        .map(|n| module.load_function(n))
        .collect::<Result<Vec<_>, _>>()
        .map_err(CudaFailure::from)?;
    Ok((module, f))
}

/// The most threads a block of `f` may have (its registers allow).
fn max_threads(f: &CudaFunction) -> Result<u32, CudaFailure> {
    // SAFETY: a function of a live module.
    let most = unsafe {
        cudarc::driver::result::function::get_function_attribute(
            f.cu_function(),
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        )
    }
    .map_err(CudaFailure::from)?;
    Ok(most.max(1) as u32)
}

fn grid(s: &Session, n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            (n.div_ceil(256) as u32).clamp(1, s.info.sm_count.max(1) as u32 * 16),
            1,
            1,
        ),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Workload-independent device operations of the harness: the input generator, widening
/// and absolute values of operands (for the reference GEMMs), and bitwise comparison of
/// two outputs (the race check).
pub struct DeviceOps {
    _module: Arc<CudaModule>,
    fill: CudaFunction,
    widen: CudaFunction,
    abs_bits: CudaFunction,
    count_diff: CudaFunction,
    gather: CudaFunction,
}

impl DeviceOps {
    pub fn compile(s: &Session) -> Result<DeviceOps, CudaFailure> {
        let (m, mut f) = compile(
            s,
            &fill_source(),
            "cutesmith_ops.cu",
            &[
                "cs_fill",
                "cs_widen",
                "cs_abs_bits",
                "cs_count_diff",
                "cs_gather_bits",
            ],
        )?;
        let gather = f.remove(4);
        let count_diff = f.remove(3);
        let abs_bits = f.remove(2);
        let widen = f.remove(1);
        let fill = f.remove(0);
        Ok(DeviceOps {
            _module: m,
            fill,
            widen,
            abs_bits,
            count_diff,
            gather,
        })
    }

    fn go(
        &self,
        s: &Session,
        f: &CudaFunction,
        n: usize,
        args: &[&dyn ArgRef],
    ) -> Result<(), CudaFailure> {
        let mut b = s.stream.launch_builder(f);
        for a in args {
            a.push(&mut b);
        }
        // SAFETY: each caller below passes buffers of at least n elements of the stated
        // type and the kernel's parameters in order.
        unsafe { b.launch(grid(s, n)) }.map_err(CudaFailure::from)?;
        Ok(())
    }

    /// Fills `n` elements of `dtype` at `dst` with input `stream` under `seed`: the values
    /// `data::input_value` gives, rounded to the type.
    pub fn fill(
        &self,
        s: &Session,
        dst: u64,
        n: usize,
        dtype: DType,
        seed: u64,
        stream: u64,
    ) -> Result<(), CudaFailure> {
        let (n_i, d) = (n as i64, dtype.abi_value());
        self.go(s, &self.fill, n, &[&dst, &n_i, &seed, &stream, &d])
    }

    /// `dst[i] = src[i]` as f32 (exact), or its absolute value.
    pub fn widen(
        &self,
        s: &Session,
        src: u64,
        dst: u64,
        n: usize,
        dtype: DType,
        absolute: bool,
    ) -> Result<(), CudaFailure> {
        let (n_i, d, abs) = (n as i64, dtype.abi_value(), i32::from(absolute));
        self.go(s, &self.widen, n, &[&src, &dst, &n_i, &d, &abs])
    }

    /// `dst = |src|` over n elements of `elem_bytes`.
    pub fn abs(
        &self,
        s: &Session,
        src: u64,
        dst: u64,
        n: usize,
        elem_bytes: usize,
    ) -> Result<(), CudaFailure> {
        let (n_i, e) = (n as i64, elem_bytes as i32);
        self.go(s, &self.abs_bits, n, &[&src, &dst, &n_i, &e])
    }

    /// `dst` = the elements of `src` that view `v` reads, packed row-major (`elem_bytes`
    /// each; at most [`crate::spec::chain::MAX_DIMS`] dims).
    pub fn gather(
        &self,
        s: &Session,
        src: u64,
        dst: u64,
        v: &crate::spec::view::Strided,
        elem_bytes: usize,
    ) -> Result<(), CudaFailure> {
        let n: u64 = v.extents.iter().product();
        let (mut e, mut st) = ([1i64; 6], [0i64; 6]);
        for (t, (&x, &y)) in v.extents.iter().zip(&v.strides).take(6).enumerate() {
            e[t] = x.max(1) as i64;
            st[t] = y as i64;
        }
        let (n_i, eb, rank, off) = (
            n as i64,
            elem_bytes as i32,
            v.extents.len().min(6) as i32,
            v.offset as i64,
        );
        self.go(
            s,
            &self.gather,
            n as usize,
            &[
                &src, &dst, &n_i, &eb, &rank, &off, &e[0], &e[1], &e[2], &e[3], &e[4], &e[5],
                &st[0], &st[1], &st[2], &st[3], &st[4], &st[5],
            ],
        )
    }

    /// How many of n elements differ bitwise between `x` and `y` (waits for the answer).
    pub fn count_diff(
        &self,
        s: &Session,
        x: u64,
        y: u64,
        n: usize,
        elem_bytes: usize,
    ) -> Result<u64, CudaFailure> {
        let count = s.zeros::<u64>(1)?;
        let (n_i, e) = (n as i64, elem_bytes as i32);
        self.go(s, &self.count_diff, n, &[&x, &y, &n_i, &e, &count.ptr])?;
        Ok(s.download(&count)?[0])
    }
}

/// A kernel argument of the harness's device operations.
trait ArgRef {
    fn push<'a>(&'a self, b: &mut cudarc::driver::LaunchArgs<'a>);
}

impl<T: DeviceRepr> ArgRef for T {
    fn push<'a>(&'a self, b: &mut cudarc::driver::LaunchArgs<'a>) {
        b.arg(self);
    }
}

/// The operands of the sampled fp64 dot products (device addresses; `b2` and `c` 0 when
/// absent).
#[derive(Debug, Clone, Copy)]
pub struct DotOperands {
    pub a: u64,
    pub b: u64,
    pub b2: u64,
    pub c: u64,
    pub k: i64,
    pub lda: i64,
    pub ldb: i64,
    pub stride_a: i64,
    pub stride_b: i64,
    pub a_col: bool,
    pub b_col: bool,
}

/// A workload's compiled comparison kernels.
pub struct Checker {
    _module: Arc<CudaModule>,
    main: CudaFunction,
    worst: CudaFunction,
    detail: CudaFunction,
    stats: CudaFunction,
    count: CudaFunction,
    dots: CudaFunction,
    norm_stats: CudaFunction,
    reduce_stats: CudaFunction,
    scan_stats: CudaFunction,
    total_stats: CudaFunction,
    spec: CheckSpec,
}

impl Checker {
    pub fn compile(s: &Session, spec: &CheckSpec) -> Result<Checker, CudaFailure> {
        let (m, mut f) = compile(
            s,
            &check_source(spec),
            "cutesmith_check.cu",
            &[
                "cs_check_main",
                "cs_check_worst",
                "cs_check_detail",
                "cs_row_stats",
                "cs_check_count",
                "cs_dots",
                "cs_norm_stats",
                "cs_reduce_stats",
                "cs_scan_stats",
                "cs_reduce_total_stats",
            ],
        )?;
        let total_stats = f.remove(9);
        let scan_stats = f.remove(8);
        let reduce_stats = f.remove(7);
        let norm_stats = f.remove(6);
        let dots = f.remove(5);
        let count = f.remove(4);
        let stats = f.remove(3);
        let detail = f.remove(2);
        let worst = f.remove(1);
        let main = f.remove(0);
        Ok(Checker {
            _module: m,
            main,
            worst,
            detail,
            stats,
            count,
            dots,
            norm_stats,
            reduce_stats,
            scan_stats,
            total_stats,
            spec: spec.clone(),
        })
    }

    /// One CTA of `threads` per logical row of the output (a storage column when D is
    /// column-major), across the batch.
    fn per_row(&self, args: &CheckArgs, threads: u32) -> LaunchConfig {
        let logical_rows = if self.spec.col_major {
            args.cols
        } else {
            args.rows
        };
        LaunchConfig {
            grid_dim: (((args.batch * logical_rows) as u32).max(1), 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Per logical row and chunk of 32 positions, the scan before the chunk, the sum of |x|
    /// before it and the `[[before]]` ops' bounds carried to it, into `stats` (3 doubles per
    /// chunk, ceil(n / 32) chunks a row).
    pub fn scan_stats(&self, s: &Session, args: &CheckArgs, stats: u64) -> Result<(), CudaFailure> {
        let cfg = self.per_row(args, 256);
        let mut b = s.stream.launch_builder(&self.scan_stats);
        b.arg(args).arg(&stats);
        // SAFETY: the arguments describe live buffers; stats holds three entries per chunk of
        // every logical row.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        Ok(())
    }

    /// Per-row (shift, scale) of the norm reference, into `stats` (2 doubles per row).
    pub fn norm_stats(&self, s: &Session, args: &CheckArgs, stats: u64) -> Result<(), CudaFailure> {
        let cfg = self.per_row(args, 256);
        let mut b = s.stream.launch_builder(&self.norm_stats);
        b.arg(args).arg(&stats);
        // SAFETY: the arguments describe live buffers; stats holds two entries per row.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        Ok(())
    }

    /// Per-row (value, bound) of the reduce reference, into `stats` (2 doubles per row);
    /// `geometry` is A's (k, lda, column-major, batch stride).
    pub fn reduce_stats(
        &self,
        s: &Session,
        args: &CheckArgs,
        stats: u64,
        geometry: (i64, i64, bool, i64),
    ) -> Result<(), CudaFailure> {
        let cfg = self.per_row(args, 256);
        let (k, lda, col, sa) = geometry;
        let col = i32::from(col);
        let mut b = s.stream.launch_builder(&self.reduce_stats);
        b.arg(args).arg(&stats).arg(&k).arg(&lda).arg(&col).arg(&sa);
        // SAFETY: the arguments describe live buffers; stats holds two entries per row and
        // the geometry stays inside A.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        Ok(())
    }

    /// A total's (value, bound) per batch item, into `out` (2 doubles an item), from `rows`
    /// (2 doubles a row, `m` rows an item, as `reduce_stats` writes them); `u` the
    /// accumulation's roundoff a value.
    pub fn total_stats(
        &self,
        s: &Session,
        rows: u64,
        out: u64,
        (batch, m, mean): (i64, i64, bool),
        u: f64,
    ) -> Result<(), CudaFailure> {
        let cfg = LaunchConfig {
            grid_dim: ((batch as u32).max(1), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mean = i32::from(mean);
        let mut b = s.stream.launch_builder(&self.total_stats);
        b.arg(&rows).arg(&out).arg(&m).arg(&mean).arg(&u);
        // SAFETY: rows holds 2 * batch * m doubles and out 2 * batch, both live.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        Ok(())
    }

    /// Per-row statistics for the softmax references, into `stats` (2 doubles per row,
    /// 3 for a GEMM's rows and with ops before the softmax).
    pub fn row_stats(&self, s: &Session, args: &CheckArgs, stats: u64) -> Result<(), CudaFailure> {
        let with_gemm = match self.spec.reference {
            Reference::GemmSoftmax { .. } => 1i32,
            Reference::ChainSoftmax { .. } => 2,
            _ => 0,
        };
        // A block of as many threads as the kernel's registers allow (a chain's fp64
        // functions can need more than 64 a thread), a power of two for the reduction.
        let most = max_threads(&self.stats)?.clamp(32, 1024);
        let cfg = self.per_row(args, 1 << (31 - most.leading_zeros()));
        let mut b = s.stream.launch_builder(&self.stats);
        b.arg(args).arg(&stats).arg(&with_gemm);
        // SAFETY: the arguments describe live buffers; stats holds one entry per row.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        Ok(())
    }

    /// Enqueues the judgement of every element of `args.got` (validation's own), adding
    /// the wrong and the still-poisoned counts to `counts[0]` and `counts[1]`.
    pub fn count(&self, s: &Session, args: &CheckArgs, counts: u64) -> Result<(), CudaFailure> {
        let total = (args.batch * args.rows * args.cols) as usize;
        let mut b = s.stream.launch_builder(&self.count);
        b.arg(args).arg(&counts);
        // SAFETY: the arguments describe live buffers; counts holds two u64.
        unsafe { b.launch(grid(s, total)) }.map_err(CudaFailure::from)?;
        Ok(())
    }

    /// Sampled GEMM entries in fp64 (see `cs_dots`): per pick, the dot products over k
    /// and their sums of |a b| for B and B2, C's value, the output and the tensors there.
    pub fn dots(
        &self,
        s: &Session,
        args: &CheckArgs,
        picks: &[(usize, usize, usize)],
        g: &DotOperands,
    ) -> Result<Vec<[f64; 11]>, CudaFailure> {
        if picks.is_empty() {
            return Ok(Vec::new());
        }
        let flat: Vec<i64> = picks
            .iter()
            .flat_map(|&(b, i, j)| [b as i64, i as i64, j as i64])
            .collect();
        let picks_buf = s.upload(&flat)?;
        let out = s.zeros::<f64>(11 * picks.len())?;
        let cfg = LaunchConfig {
            grid_dim: (picks.len() as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (a_col, b_col) = (i32::from(g.a_col), i32::from(g.b_col));
        let mut b = s.stream.launch_builder(&self.dots);
        b.arg(args)
            .arg(&picks_buf.ptr)
            .arg(&g.a)
            .arg(&g.b)
            .arg(&g.b2)
            .arg(&g.c)
            .arg(&g.k)
            .arg(&g.lda)
            .arg(&g.ldb)
            .arg(&g.stride_a)
            .arg(&g.stride_b)
            .arg(&a_col)
            .arg(&b_col)
            .arg(&out.ptr);
        // SAFETY: the operands hold the GEMM the strides describe; picks and out are
        // sized for picks.len() samples.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        let raw = s.download(&out)?;
        Ok(raw
            .chunks_exact(11)
            .map(|c| {
                let mut o = [0f64; 11];
                o.copy_from_slice(c);
                o
            })
            .collect())
    }

    /// Compares the output `args.got` with the reference: the summary of the comparison.
    pub fn compare(
        &self,
        s: &Session,
        mut args: CheckArgs,
        dims: &Dims,
    ) -> Result<Summary, CudaFailure> {
        let bins = Binning::for_dims(dims);
        let per = bins.rows + bins.cols + bins.batches + bins.tile_rows * bins.tile_cols;
        let counters = s.zeros::<u64>(4)?;
        let extremes = s.zeros::<u64>(3)?;
        let bin_buf = s.zeros::<u64>(2 * per)?;
        let first = s.upload(&[u64::MAX])?;
        let mut detail_init = vec![0u64; 48];
        detail_init[40] = u64::MAX;
        let detail = s.upload(&detail_init)?;
        args.counters = counters.ptr;
        args.extremes = extremes.ptr;
        args.bins = bin_buf.ptr;
        args.first = first.ptr;
        args.detail = detail.ptr;
        args.rs = i64::from(bins.rs);
        args.cs = i64::from(bins.cs);
        args.bs = i64::from(bins.bs);
        args.ts = i64::from(bins.ts);
        args.nrb = bins.rows as i64;
        args.ncb = bins.cols as i64;
        args.nbb = bins.batches as i64;
        args.ntc = bins.tile_cols as i64;
        args.bins_stride = per as i64;
        let total = dims.batch * dims.rows * dims.cols;
        let launch =
            |f: &CudaFunction, a: &CheckArgs, cfg: LaunchConfig| -> Result<(), CudaFailure> {
                let mut b = s.stream.launch_builder(f);
                b.arg(a);
                // SAFETY: every pointer in the arguments is a live device buffer of the size
                // the dimensions state; the parameter is the one struct the kernel takes.
                unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
                Ok(())
            };
        launch(&self.main, &args, grid(s, total))?;
        let c = s.download(&counters)?;
        let ext = s.download(&extremes)?;
        let mut summary = Summary {
            checked: total as u64,
            wrong: c[1],
            unwritten: c[2],
            nan_or_inf: c[3],
            reference_nan: c[0],
            max_abs_err: f64::from_bits(ext[0]),
            max_rel_err: f64::from_bits(ext[1]),
            ..Summary::default()
        };
        if summary.wrong + summary.unwritten == 0 {
            return Ok(summary);
        }
        if summary.wrong > 0 {
            launch(&self.worst, &args, grid(s, total))?;
        }
        args.from = s.download(&first)?[0] as i64;
        // One block of as many threads (up to 1024, whole warps) as the reference's
        // registers allow: a heavy chain's fp64 functions leave fewer than 1024.
        let threads = max_threads(&self.detail)?.clamp(32, 1024) / 32 * 32;
        launch(
            &self.detail,
            &args,
            LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (threads, 1, 1),
                shared_mem_bytes: 0,
            },
        )?;
        let raw = s.download(&detail)?;
        let coords = |i: u64| {
            let i = i as usize;
            let plane = dims.rows * dims.cols;
            (i / plane, (i % plane) / dims.cols, i % dims.cols)
        };
        for slot in 0..8 {
            let kind = f64::from_bits(raw[4 * slot + 3]);
            if kind == 0.0 {
                break;
            }
            let (batch, row, col) = coords(raw[4 * slot]);
            summary.first.push(Mismatch {
                batch,
                row,
                col,
                got: f64::from_bits(raw[4 * slot + 1]),
                want: f64::from_bits(raw[4 * slot + 2]),
                unwritten: kind == 2.0,
            });
        }
        if summary.wrong > 0 && raw[40] < total as u64 {
            let (batch, row, col) = coords(raw[40]);
            summary.worst = Some(Mismatch {
                batch,
                row,
                col,
                got: f64::from_bits(raw[41]),
                want: f64::from_bits(raw[42]),
                unwritten: false,
            });
        }
        let b = s.download(&bin_buf)?;
        let split = |m: &[u64]| -> BinCounts {
            let (r, rest) = m.split_at(bins.rows);
            let (c, rest) = rest.split_at(bins.cols);
            let (bt, t) = rest.split_at(bins.batches);
            BinCounts {
                rows: r.to_vec(),
                cols: c.to_vec(),
                batches: bt.to_vec(),
                tiles: t.to_vec(),
            }
        };
        if summary.unwritten > 0 {
            summary.unwritten_bins = Some(split(&b[..per]));
        }
        if summary.wrong > 0 {
            summary.wrong_bins = Some(split(&b[per..]));
        }
        Ok(summary)
    }
}
