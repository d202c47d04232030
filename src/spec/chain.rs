//! Epilogue chains: an ordered list of elementwise ops applied to the value entering the
//! chain (GEMM: `alpha * A*B + beta * C` in fp32; activation: the element of A), as users
//! write them in `[[epilogue]]` tables. One chain is three things at once:
//! - data ([`Chain`], built from the spec by the rules and serialized nowhere else),
//! - the fp64 reference ([`Chain::eval`]), against which kernels are validated,
//! - C++ ([`Chain::cpp`]): the `cs_chain` functor placed in every kernel source (see
//!   `cutlass-templates/include/cutesmith_chain.cuh`), also shown verbatim to the model.
//!
//! ```toml
//! [[epilogue]]
//! op = "mul"            # add | sub | mul | div | rdiv (value / x) | min | max: with value, or operand
//! value = 0.5
//! [[epilogue]]
//! op = "add"
//! operand = "row"       # row (n values) | col (m values) | matrix (m x n) | z | a saved name
//!                       # | an earlier tensor by its name (`matrix0`: the first, a matrix)
//!                       # | channel (m * channels values: `channels = R` per row, each over
//!                       #   n / R adjacent values; a GroupNorm's per-channel weight)
//!                       # | broadcast (family activation, shapes given as `dims`: a tensor
//!                       #   spanning the output dims listed in `over`, size 1 in the
//!                       #   others, as PyTorch broadcasts a [1, C, 1, 1] bias)
//! [[epilogue]]
//! op = "hardtanh"       # any activation, with alpha / beta / min / max / threshold
//! min = -1.0
//! max = 1.0
//! save = "h"            # name this result for a later operand
//! [[epilogue]]
//! op = "add"
//! operand = "z"         # the value that entered the chain
//! ```

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::schema::{Activation, DType};

/// The value of a binary op's operand: a scalar, a tensor's element, the chain's input or
/// a saved value.
fn operand_value(o: Operand, z: f64, t: &[f64], saved: &[f64; MAX_OPS]) -> f64 {
    match o {
        Operand::Scalar(v) => v,
        Operand::Tensor(i) => t.get(i).copied().unwrap_or(f64::NAN),
        Operand::Z => z,
        Operand::Saved(i) => saved[i],
    }
}

/// One op in fp64 at x (y: a binary op's operand value; ignored otherwise), at element
/// `(row, col)` of its m x n matrix (read by the index ops only).
fn step_value(op: Op, x: f64, y: f64, (row, col): (i64, i64)) -> f64 {
    match op {
        Op::Tri { upper, diag, fill } => {
            if tri_keeps(upper, diag, row, col) {
                x
            } else {
                fill
            }
        }
        Op::Act(a, p0, p1) => a.eval(x, p0, p1),
        Op::Binary(b, _) => b.apply(x, y),
        Op::Clamp(lo, hi) => {
            if x.is_nan() {
                x
            } else {
                x.max(lo).min(hi)
            }
        }
        Op::Neg => -x,
        Op::Abs => x.abs(),
        Op::Exp => x.exp(),
        Op::Log => x.ln(),
        Op::Sqrt => x.sqrt(),
        Op::Pow(p) => x.powf(p),
    }
}

/// A reduction's `[[before]]` ops: the rounding each op of their fp32 evaluation may add,
/// relative to its result (8 u: four ulps, as CUDA's powf may be off; its other libm
/// functions are within two, and + - * / sqrt within a half). The host and device
/// references both bound the ops' error with it ([`Chain::eval_with_error`]).
pub const BEFORE_OP_U: f64 = 8.0 * 5.960_464_477_539_063e-8;

/// Whether `triu` (upper) or `tril` with diagonal `diag` keeps element (row, col):
/// `col - row >= diag` or `col - row <= diag`, as `torch.triu` / `torch.tril` do.
pub fn tri_keeps(upper: bool, diag: i64, row: i64, col: i64) -> bool {
    let d = col - row;
    if upper {
        d >= diag
    } else {
        d <= diag
    }
}

/// The C++ of an index op on `x` at (`row`, `col`) (expressions of a signed 64-bit type),
/// `fill` its fill value as a literal of the code's float type.
pub fn tri_cpp(x: &str, upper: bool, diag: i64, fill: &str, row: &str, col: &str) -> String {
    let cmp = if upper { ">=" } else { "<=" };
    format!("(({col}) - ({row}) {cmp} {diag}LL ? {x} : {fill})")
}

/// Whether a spec's op name is an index op (`triu`, `tril`).
pub fn is_index_op(op: &str) -> bool {
    matches!(op.trim().to_ascii_lowercase().as_str(), "triu" | "tril")
}

/// Most tensor operands one chain may read (`CS_MAX_OPERANDS`).
pub const MAX_TENSORS: usize = 4;

/// Most ops in one chain.
pub const MAX_OPS: usize = 32;

/// One `[[epilogue]]` entry as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OpSpec {
    /// The op: a binary op (add, sub, mul, div, rdiv, min, max), scale (mul by value), clamp,
    /// neg, abs, exp, or any activation.
    pub op: String,
    /// Binary ops and scale: the scalar operand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Binary ops: `row`, `col`, `matrix`, `z`, or a name given by an earlier `save`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operand: Option<String>,
    /// A tensor operand's element type (default: the workload's out_dtype).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<DType>,
    /// leaky_relu slope, elu alpha.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// silu/swish beta, softplus beta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f64>,
    /// clamp and hardtanh lower bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// clamp and hardtanh upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// softplus threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// triu and tril: the diagonal (`torch.triu(x, diagonal)`; default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagonal: Option<i64>,
    /// `operand = "channel"`: the channels each row of D holds (default 1). Row i covers
    /// channels i * channels .. (i + 1) * channels - 1, each over n / channels adjacent
    /// values: a GroupNorm's per-channel weight, whose rows are groups of channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<u32>,
    /// `operand = "broadcast"`: the output dims (indices into each shape's `dims`, in
    /// increasing order) the operand spans; it has size 1 in every other dim and is stored
    /// contiguously in that shape (PyTorch's broadcasting: `over = [1]` is a [1, C, 1, 1]
    /// bias of an [N, C, H, W] output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<Vec<u32>>,
    /// Names this op's result, so a later op can read it as `operand`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save: Option<String>,
}

/// Where a tensor operand is indexed from (`cs_operand_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorKind {
    /// n values, one per column of D.
    Row,
    /// m values, one per row of D.
    Col,
    /// m x n values, stored like D (a residual).
    Matrix,
    /// m * R values, R channels a row (`channels`): element (i, j) of every batch reads
    /// value i * R + j / (n / R) (n a multiple of R). A per-channel vector of an (N, C, S)
    /// tensor whose rows hold R channels of S values each.
    Channel(u32),
    /// A tensor broadcast over the output's dims (families activation, softmax and
    /// log_softmax with `dims` shapes):
    /// bit d set when it spans output dim d (size 1 in the others), stored contiguously
    /// in its own shape. Element (i, j) reads [`BroadcastMap::index`].
    Broadcast(u8),
}

/// Most dims a shape's `dims` may have.
pub const MAX_DIMS: usize = 6;

/// Most runs of spanned dims among a shape's row dims (all but the last) a broadcast
/// operand may have: the ABI's `row_div` / `row_mod` / `row_stride` terms.
pub const MAX_ROW_TERMS: usize = 2;

/// Where a broadcast operand's element for output element (row i, column j) is, for one
/// shape: `sum_t ((i / div_t) % modulus_t) * stride_t + j * col_stride` (the ABI's
/// `row_div`, `row_mod`, `row_stride` and `ld`). Unused terms are (1, 1, 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BroadcastMap {
    pub div: [u64; MAX_ROW_TERMS],
    pub modulus: [u64; MAX_ROW_TERMS],
    pub stride: [u64; MAX_ROW_TERMS],
    pub col_stride: u64,
    /// The operand's element count (the product of the dims it spans).
    pub len: u64,
}

impl BroadcastMap {
    /// The map of an operand spanning the dims in `mask` of an output of `dims` viewed as
    /// rows of its last `tail` dims (which the operand spans all or none of: see
    /// [`Chain::broadcast_tail`]), or why it cannot be indexed (more than
    /// [`MAX_ROW_TERMS`] runs of spanned row dims, or a dim past the rank).
    pub fn new(dims: &[u64], mask: u8, tail: usize) -> Result<BroadcastMap, String> {
        let r = dims.len();
        let rows = r.saturating_sub(tail.max(1));
        if r == 0 || u32::from(mask) >> r != 0 {
            return Err(format!(
                "spans dim {} of an output of {r} dims",
                7 - mask.leading_zeros().min(7)
            ));
        }
        let spans = |d: usize| mask & (1 << d) != 0;
        // The operand's own strides: contiguous, size 1 where it is broadcast.
        let size = |d: usize| if spans(d) { dims[d] } else { 1 };
        let mut ostride = vec![1u64; r];
        for d in (0..r.saturating_sub(1)).rev() {
            ostride[d] = ostride[d + 1] * size(d + 1);
        }
        let mut map = BroadcastMap {
            div: [1; MAX_ROW_TERMS],
            modulus: [1; MAX_ROW_TERMS],
            stride: [0; MAX_ROW_TERMS],
            col_stride: u64::from(spans(r - 1)),
            len: (0..r).map(size).product(),
        };
        // Runs of spanned row dims, each one term: its coordinate is (i / inner) % extent.
        let mut t = 0;
        let mut d = 0;
        while d < rows {
            if !spans(d) {
                d += 1;
                continue;
            }
            let start = d;
            while d < rows && spans(d) {
                d += 1;
            }
            let last = d - 1;
            if t == MAX_ROW_TERMS {
                return Err(format!(
                    "spans more than {MAX_ROW_TERMS} separate runs of the output's row dims \
                     (all but the trailing ones every operand treats alike)"
                ));
            }
            map.div[t] = dims[last + 1..rows].iter().product();
            map.modulus[t] = dims[start..=last].iter().product();
            map.stride[t] = ostride[last];
            t += 1;
        }
        Ok(map)
    }

    /// The operand's element for output element (row, col).
    pub fn index(&self, row: u64, col: u64) -> u64 {
        let mut idx = col * self.col_stride;
        for t in 0..MAX_ROW_TERMS {
            idx += (row / self.div[t]) % self.modulus[t] * self.stride[t];
        }
        idx
    }
}

/// The bit mask of `over` (dims in increasing order, each below [`MAX_DIMS`]).
fn over_mask(dims: &[u32]) -> Result<u8, String> {
    let mut mask = 0u8;
    let mut last: Option<u32> = None;
    for &d in dims {
        if d as usize >= MAX_DIMS {
            return Err(format!(
                "dim {d} is past the most a shape may have ({MAX_DIMS})"
            ));
        }
        if last.is_some_and(|l| d <= l) {
            return Err(format!(
                "{dims:?}: list each spanned dim once, in increasing order"
            ));
        }
        last = Some(d);
        mask |= 1 << d;
    }
    Ok(mask)
}

/// Runs of spanned dims in `mask` among the first `rows` dims.
fn row_runs(mask: u8, rows: usize) -> usize {
    (0..rows)
        .filter(|&d| mask & (1 << d) != 0 && (d == 0 || mask & (1 << (d - 1)) == 0))
        .count()
}

/// The dims of a broadcast mask, as `over` lists them (`[1, 3]`).
pub fn mask_dims(mask: u8) -> String {
    let dims: Vec<String> = (0..8)
        .filter(|d| mask & (1 << d) != 0)
        .map(|d| d.to_string())
        .collect();
    format!("[{}]", dims.join(", "))
}

impl TensorKind {
    /// The `cs_operand_kind` value.
    pub fn abi_value(self) -> i32 {
        match self {
            TensorKind::Row => 1,
            TensorKind::Col => 2,
            TensorKind::Matrix => 3,
            TensorKind::Channel(_) => 4,
            TensorKind::Broadcast(_) => 5,
        }
    }

    /// The spelling in spec files.
    pub fn name(self) -> &'static str {
        match self {
            TensorKind::Row => "row",
            TensorKind::Col => "col",
            TensorKind::Matrix => "matrix",
            TensorKind::Channel(_) => "channel",
            TensorKind::Broadcast(_) => "broadcast",
        }
    }

    fn cpp(self) -> &'static str {
        match self {
            TensorKind::Row => "CS_OPERAND_ROW",
            TensorKind::Col => "CS_OPERAND_COL",
            TensorKind::Matrix => "CS_OPERAND_MATRIX",
            TensorKind::Channel(_) => "CS_OPERAND_CHANNEL",
            TensorKind::Broadcast(_) => "CS_OPERAND_BROADCAST",
        }
    }
}

/// A tensor the chain reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub kind: TensorKind,
    pub dtype: DType,
    /// What it is, for reports (`bias`, `row0`, ...).
    pub name: String,
}

/// The second operand of a binary op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Operand {
    Scalar(f64),
    /// Tensor operand i of the chain.
    Tensor(usize),
    /// The value that entered the chain.
    Z,
    /// The result of the op that saved slot i.
    Saved(usize),
}

/// A binary op `x = x (op) operand` (`rdiv`: `x = operand / x`; `masked_fill` / `where`:
/// x or a fill, chosen by the operand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    RDiv,
    Min,
    Max,
    /// `x = y`: the chain continues from an earlier value (z or a saved one).
    Set,
    /// `masked_fill` (`when` true: `x = fill` where the operand is non-zero, as
    /// `x.masked_fill(mask, fill)`) or `where` (`when` false: x kept where the operand is
    /// non-zero, `fill` elsewhere, as `torch.where(cond, x, fill)`); else x. The fill is
    /// kept as its f64 bits (so that the op stays `Eq`).
    Fill {
        fill_bits: u64,
        when: bool,
    },
}

impl BinOp {
    const ALL: [(&'static str, BinOp); 8] = [
        ("add", BinOp::Add),
        ("sub", BinOp::Sub),
        ("mul", BinOp::Mul),
        ("div", BinOp::Div),
        ("rdiv", BinOp::RDiv),
        ("min", BinOp::Min),
        ("max", BinOp::Max),
        ("set", BinOp::Set),
    ];

    fn name(self) -> &'static str {
        match self {
            BinOp::Fill { when: true, .. } => "masked_fill",
            BinOp::Fill { when: false, .. } => "where",
            _ => Self::ALL
                .iter()
                .find(|(_, b)| *b == self)
                .map_or("?", |(n, _)| n),
        }
    }

    /// A `masked_fill` / `where` op's fill value.
    pub fn fill(self) -> Option<f64> {
        match self {
            BinOp::Fill { fill_bits, .. } => Some(f64::from_bits(fill_bits)),
            _ => None,
        }
    }

    fn apply(self, x: f64, y: f64) -> f64 {
        match self {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::Div => x / y,
            BinOp::RDiv => y / x,
            BinOp::Min => min_nan(x, y),
            BinOp::Max => max_nan(x, y),
            BinOp::Set => y,
            BinOp::Fill { fill_bits, when } => {
                if (y != 0.0) == when {
                    f64::from_bits(fill_bits)
                } else {
                    x
                }
            }
        }
    }

    /// `x op y` in C++: min and max are cutesmith_chain.cuh's `cs_minf` / `cs_maxf`, which
    /// keep a NaN as `apply` (and PyTorch) do, where `fminf` / `fmaxf` would drop it.
    pub fn cpp(self, x: &str, y: &str) -> String {
        match self {
            BinOp::Add => format!("{x} + {y}"),
            BinOp::Sub => format!("{x} - {y}"),
            BinOp::Mul => format!("{x} * {y}"),
            BinOp::Div => format!("{x} / {y}"),
            BinOp::RDiv => format!("{y} / {x}"),
            BinOp::Min => format!("cs_minf({x}, {y})"),
            BinOp::Max => format!("cs_maxf({x}, {y})"),
            BinOp::Set => y.to_string(),
            BinOp::Fill { fill_bits, when } => {
                self::fill_cpp(x, y, when, &cpp_float(f64::from_bits(fill_bits)))
            }
        }
    }
}

/// One op of a chain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// An activation with its two parameters (see [`Activation::params`]).
    Act(Activation, f64, f64),
    Binary(BinOp, Operand),
    Clamp(f64, f64),
    Neg,
    Abs,
    Exp,
    /// Natural logarithm (NaN below 0, -inf at 0).
    Log,
    Sqrt,
    /// `x^p` for a constant exponent p (`torch.pow(x, p)`, `x ** p`).
    Pow(f64),
    /// An index op: `triu` (upper) or `tril` of each m x n matrix with its diagonal; the
    /// elements it does not keep become `fill` (0 as torch.triu / tril write them; -inf for
    /// a causal mask before a softmax, `masked_fill`).
    Tri {
        upper: bool,
        diag: i64,
        fill: f64,
    },
}

/// One step: an op, and the slot its result is saved in (if any).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub op: Op,
    pub save: Option<usize>,
}

/// A validated chain.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chain {
    pub steps: Vec<Step>,
    pub tensors: Vec<Tensor>,
    /// The names of the saved slots, in slot order.
    pub saved: Vec<String>,
    /// The rank of the shapes' `dims` (0: not given): tells a broadcast operand that spans
    /// the last dim (a run of values a row) from one that does not (one value a row).
    pub rank: u8,
    /// The kernels' rows are the last dim whatever the broadcast operands span (a softmax
    /// normalizes the last dim): no trailing dims are merged into the row.
    pub rows_of_last_dim: bool,
}

/// Why a chain is not valid: the index of the entry (or `None` for the whole chain), the
/// field, and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainError {
    pub index: Option<usize>,
    pub field: &'static str,
    pub message: String,
}

/// The op names a spec may use, for error messages.
pub fn op_names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = BinOp::ALL.iter().map(|(n, _)| *n).collect();
    v.extend(["masked_fill", "where"]);
    v.extend([
        "scale", "clamp", "neg", "abs", "exp", "log", "sqrt", "pow", "triu", "tril", "swish",
    ]);
    v.extend(Activation::ALL.iter().map(|a| a.name()));
    v
}

impl Chain {
    /// The trailing dims of the shapes' `dims` (of rank [`Chain::rank`]) that every
    /// broadcast operand spans all or none of: they form the rows the kernels see (an
    /// [N, C, H, W] output with a [1, C, 1, 1] operand is N * C rows of H * W). At least 1;
    /// 1 without a broadcast operand (rows of the last dim), and 1 for a chain whose rows
    /// are the last dim by definition ([`Chain::rows_of_last_dim`]: a softmax's).
    pub fn broadcast_tail(&self) -> usize {
        if self.rows_of_last_dim {
            return 1;
        }
        let r = usize::from(self.rank);
        let masks: Vec<u8> = self
            .tensors
            .iter()
            .filter_map(|t| match t.kind {
                TensorKind::Broadcast(m) => Some(m),
                _ => None,
            })
            .collect();
        if masks.is_empty() {
            return 1;
        }
        let uniform = |t: usize| {
            masks.iter().all(|&m| {
                let bits = (r - t..r).map(|d| m & (1 << d) != 0);
                let v: Vec<bool> = bits.collect();
                v.iter().all(|&b| b) || v.iter().all(|&b| !b)
            })
        };
        (1..=r).rev().find(|&t| uniform(t)).unwrap_or(1)
    }

    /// True when the chain does nothing.
    pub fn is_identity(&self) -> bool {
        self.steps
            .iter()
            .all(|s| matches!(s.op, Op::Act(Activation::Identity, _, _)))
    }

    /// Whether an op depends on the element's position (`triu`, `tril`): such a chain is
    /// evaluated with each element's row and column (`apply(z, t, row, col)`).
    pub fn positional(&self) -> bool {
        self.steps.iter().any(|s| matches!(s.op, Op::Tri { .. }))
    }

    /// Whether the chain reads a tensor operand (a bias row, a column vector, a
    /// residual matrix), not only the accumulator and constants.
    pub fn reads_tensors(&self) -> bool {
        !self.tensors.is_empty()
    }

    /// The chain's one activation and its parameters, when that is all it is (no other
    /// op, no tensor): kernels may then take it at run time, in their tuned forms.
    pub fn single_activation(&self) -> Option<(Activation, f64, f64)> {
        match self.steps.as_slice() {
            [Step {
                op: Op::Act(a, p0, p1),
                save: None,
            }] if self.tensors.is_empty() => Some((*a, *p0, *p1)),
            _ => None,
        }
    }

    /// The chain as a per-column bias then one activation (`x + row0`, then `act(x)`,
    /// or the bias alone), what a library epilogue with a bias and an activation
    /// computes: the activation (identity for none), its two parameters and the bias's
    /// dtype. Identity steps are passed over.
    pub fn bias_then_activation(&self) -> Option<(Activation, f64, f64, DType)> {
        let bias = |o: &Operand| matches!(o, Operand::Tensor(0));
        let row = match self.tensors.as_slice() {
            [t] if t.kind == TensorKind::Row => t.dtype,
            _ => return None,
        };
        // An identity step changes nothing (gemm_bias_act's `activation = "identity"`
        // before an `[[epilogue]]` activation with its parameters).
        let steps: Vec<&Step> = self
            .steps
            .iter()
            .filter(|s| {
                !matches!(
                    s,
                    Step {
                        op: Op::Act(Activation::Identity, _, _),
                        save: None
                    }
                )
            })
            .collect();
        match steps.as_slice() {
            [Step {
                op: Op::Binary(BinOp::Add, o),
                save: None,
            }] if bias(o) => Some((Activation::Identity, 0.0, 0.0, row)),
            [Step {
                op: Op::Binary(BinOp::Add, o),
                save: None,
            }, Step {
                op: Op::Act(a, p0, p1),
                save: None,
            }] if bias(o) => Some((*a, *p0, *p1, row)),
            _ => None,
        }
    }

    /// Appends an op.
    pub fn push(&mut self, op: Op) {
        self.steps.push(Step { op, save: None });
    }

    /// Adds a tensor operand; returns its index.
    pub fn add_tensor(&mut self, kind: TensorKind, dtype: DType, name: &str) -> usize {
        self.tensors.push(Tensor {
            kind,
            dtype,
            name: name.into(),
        });
        self.tensors.len() - 1
    }

    /// Appends the ops written in `[[epilogue]]`, resolving operands; tensor operands
    /// default to `out_dtype`.
    pub fn extend_from_spec(
        &mut self,
        specs: &[OpSpec],
        out_dtype: DType,
    ) -> Result<(), ChainError> {
        if self.steps.len() + specs.len() > MAX_OPS {
            return Err(ChainError {
                index: None,
                field: "op",
                message: format!("at most {MAX_OPS} ops in a chain"),
            });
        }
        for (i, s) in specs.iter().enumerate() {
            let err = |field: &'static str, message: String| ChainError {
                index: Some(i),
                field,
                message,
            };
            let mut name = s.op.trim().to_ascii_lowercase();
            if name == "gelu" {
                // PyTorch's nn.GELU() without an approximation.
                name = "gelu_erf".into();
            }
            // masked_fill / where: the operand is the mask, the value the fill.
            let fill_op = match name.as_str() {
                "masked_fill" | "where" => {
                    let Some(v) = s.value else {
                        return Err(err(
                            "value",
                            format!(
                                "op \"{name}\" needs value = <the fill> and operand = <the mask>"
                            ),
                        ));
                    };
                    if v.is_nan() || (v.is_finite() && v.abs() > f64::from(f32::MAX)) {
                        return Err(err(
                            "value",
                            "the fill is a number an f32 holds (or +-inf), not NaN".into(),
                        ));
                    }
                    // The mask is a tensor: a value computed in the chain (z, a saved one)
                    // is never exactly zero on random inputs, and its rounding could flip it.
                    let tensor_mask = s
                        .operand
                        .as_deref()
                        .map(str::trim)
                        .is_some_and(|o| o != "z" && !self.saved.iter().any(|n| n == o));
                    if !tensor_mask {
                        return Err(err(
                            "operand",
                            format!(
                                "op \"{name}\" needs operand = <the mask: a row, col, matrix, \
                                 channel or broadcast tensor (dtype = \"bool\" by default), or \
                                 an earlier tensor's name>, not z or a saved value"
                            ),
                        ));
                    }
                    Some(BinOp::Fill {
                        fill_bits: v.to_bits(),
                        when: name == "masked_fill",
                    })
                }
                _ => None,
            };
            let binary = BinOp::ALL
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, b)| *b)
                .or(fill_op);
            let act = Activation::ALL.iter().copied().find(|a| a.name() == name);
            // A field written for an op that does not read it is an error naming it.
            let given = |f: &str| match f {
                "value" => s.value.is_some(),
                "operand" => s.operand.is_some(),
                "dtype" => s.dtype.is_some(),
                "alpha" => s.alpha.is_some(),
                "beta" => s.beta.is_some(),
                "min" => s.min.is_some(),
                "max" => s.max.is_some(),
                "diagonal" => s.diagonal.is_some(),
                "channels" => s.channels.is_some(),
                "over" => s.over.is_some(),
                _ => s.threshold.is_some(),
            };
            let unused = |fields: &[&'static str]| -> Result<(), ChainError> {
                match fields.iter().find(|f| given(f)) {
                    Some(f) => Err(err(f, format!("not used by op \"{name}\""))),
                    None => Ok(()),
                }
            };
            const ACT_PARAMS: [&str; 5] = ["alpha", "beta", "min", "max", "threshold"];
            if !is_index_op(&name) {
                unused(&["diagonal"])?;
            }
            if s.operand.as_deref().map(str::trim) != Some("channel") {
                unused(&["channels"])?;
            }
            if s.operand.as_deref().map(str::trim) != Some("broadcast") {
                unused(&["over"])?;
            }
            let op = if let Some(b) = binary.or((name == "scale").then_some(BinOp::Mul)) {
                unused(&ACT_PARAMS)?;
                // A fill op's value is its fill, not its operand.
                let value = if fill_op.is_some() { None } else { s.value };
                let operand =
                    match (value, s.operand.as_deref()) {
                        (Some(v), None) => Operand::Scalar(finite(v, "value", i)?),
                        (None, Some(o)) => {
                            if name == "scale" {
                                return Err(err("operand", "scale takes a value only".into()));
                            }
                            let channels = s.channels.unwrap_or(1);
                            if channels == 0 {
                                return Err(err(
                                    "channels",
                                    "at least 1 (the channels each row holds)".into(),
                                ));
                            }
                            let over =
                                match (o.trim(), &s.over) {
                                    ("broadcast", None) => return Err(err(
                                        "over",
                                        "operand \"broadcast\" needs over = [the output dims it \
                                     spans, e.g. [1] for a [1, C, 1, 1] bias of [N, C, H, W]]"
                                            .into(),
                                    )),
                                    ("broadcast", Some(dims)) => {
                                        over_mask(dims).map_err(|m| err("over", m))?
                                    }
                                    _ => 0,
                                };
                            let kind = match o.trim() {
                                "channel" => Some(TensorKind::Channel(channels)),
                                "broadcast" => Some(TensorKind::Broadcast(over)),
                                _ => None,
                            };
                            // A mask is bool unless it says otherwise.
                            let dtype = s.dtype.unwrap_or(if fill_op.is_some() {
                                DType::Bool
                            } else {
                                out_dtype
                            });
                            self.operand(o, dtype, s.dtype.is_some(), kind)
                                .map_err(|m| err("operand", m))?
                        }
                        (Some(_), Some(_)) => return Err(err(
                            "value",
                            "give either value (a scalar) or operand (a tensor or name), not both"
                                .into(),
                        )),
                        (None, None) => {
                            return Err(err(
                                "value",
                                format!(
                                    "op \"{name}\" needs value = <number> or operand = \"row\" | \
                                 \"col\" | \"matrix\" | \"channel\" | \"broadcast\" | \"z\" | a \
                                 saved name"
                                ),
                            ))
                        }
                    };
                if s.dtype.is_some() && !matches!(operand, Operand::Tensor(_)) {
                    return Err(err(
                        "dtype",
                        "only for a row, col, matrix, channel or broadcast operand".into(),
                    ));
                }
                Op::Binary(b, operand)
            } else if name == "pow" {
                unused(&ACT_PARAMS)?;
                unused(&["operand", "dtype"])?;
                let Some(p) = s.value else {
                    return Err(err(
                        "value",
                        "op \"pow\" needs value = <the exponent>".into(),
                    ));
                };
                Op::Pow(finite(p, "value", i)?)
            } else if name == "triu" || name == "tril" {
                unused(&ACT_PARAMS)?;
                unused(&["operand", "dtype"])?;
                let fill = s.value.unwrap_or(0.0);
                // The kernels fill in fp32: a finite value beyond it would be an infinity
                // there and finite in the reference.
                if fill.is_nan() || (fill.is_finite() && fill.abs() > f64::from(f32::MAX)) {
                    return Err(err(
                        "value",
                        format!(
                            "op \"{name}\" fills with an fp32 number or an infinity (-inf for a \
                             mask before a softmax), not {fill}"
                        ),
                    ));
                }
                let diag = s.diagonal.unwrap_or(0);
                if diag.unsigned_abs() > 1 << 62 {
                    return Err(err(
                        "diagonal",
                        format!("{diag} is out of range (|diagonal| <= 2^62)"),
                    ));
                }
                Op::Tri {
                    upper: name == "triu",
                    diag,
                    fill,
                }
            } else {
                unused(&["value", "operand", "dtype"])?;
                match (name.as_str(), act) {
                    ("clamp", _) => {
                        unused(&["alpha", "beta", "threshold"])?;
                        let lo = finite(s.min.unwrap_or(f64::NEG_INFINITY), "min", i)
                            .or_else(|e| s.min.map_or(Ok(f64::NEG_INFINITY), |_| Err(e)))?;
                        let hi = finite(s.max.unwrap_or(f64::INFINITY), "max", i)
                            .or_else(|e| s.max.map_or(Ok(f64::INFINITY), |_| Err(e)))?;
                        if s.min.is_none() && s.max.is_none() {
                            return Err(err("min", "clamp needs min, max or both".into()));
                        }
                        if lo > hi {
                            return Err(err("min", format!("min {lo} is above max {hi}")));
                        }
                        Op::Clamp(lo, hi)
                    }
                    ("neg" | "abs" | "exp" | "log" | "sqrt", _) => {
                        unused(&ACT_PARAMS)?;
                        match name.as_str() {
                            "neg" => Op::Neg,
                            "abs" => Op::Abs,
                            "log" => Op::Log,
                            "sqrt" => Op::Sqrt,
                            _ => Op::Exp,
                        }
                    }
                    (_, a) => {
                        let a = match (name.as_str(), a) {
                            ("swish", _) => Activation::Silu,
                            (_, Some(a)) => a,
                            (_, None) => {
                                return Err(err(
                                    "op",
                                    format!(
                                        "unknown op \"{}\"; allowed: {}",
                                        s.op,
                                        op_names().join(", ")
                                    ),
                                ))
                            }
                        };
                        let (p0, p1) = a
                            .params_from(s.alpha, s.beta, s.min, s.max, s.threshold)
                            .map_err(|(f, m)| err(f, m))?;
                        Op::Act(a, p0, p1)
                    }
                }
            };
            let save = match &s.save {
                None => None,
                Some(n) => {
                    let n = n.trim();
                    if !valid_name(n)
                        || ["z", "row", "col", "matrix", "channel", "broadcast", "x"].contains(&n)
                    {
                        return Err(err(
                            "save",
                            format!(
                                "\"{n}\" is not a usable name (letters, digits and _, starting \
                                 with a letter; not z, x, row, col, matrix, channel or broadcast)"
                            ),
                        ));
                    }
                    if self.saved.iter().any(|s| s == n) {
                        return Err(err("save", format!("\"{n}\" is saved twice")));
                    }
                    self.saved.push(n.to_string());
                    Some(self.saved.len() - 1)
                }
            };
            self.steps.push(Step { op, save });
        }
        Ok(())
    }

    fn operand(
        &mut self,
        o: &str,
        dtype: DType,
        given_dtype: bool,
        special: Option<TensorKind>,
    ) -> Result<Operand, String> {
        let o = o.trim();
        let kind = match o {
            "z" => return Ok(Operand::Z),
            "row" => TensorKind::Row,
            "col" => TensorKind::Col,
            "matrix" => TensorKind::Matrix,
            "channel" | "broadcast" => special.unwrap_or(TensorKind::Channel(1)),
            name if !self.saved.iter().any(|s| s == name)
                && self.tensors.iter().any(|t| t.name == name) =>
            {
                // An earlier tensor again, by the name it was given (`matrix0`), in its type
                // (a saved value of the same name comes first).
                let i = self
                    .tensors
                    .iter()
                    .position(|t| t.name == name)
                    .unwrap_or_default();
                if self.tensors[i].dtype != dtype && given_dtype {
                    return Err(format!(
                        "\"{name}\" is {}; a tensor read again keeps its type (leave dtype out)",
                        self.tensors[i].dtype.name()
                    ));
                }
                return Ok(Operand::Tensor(i));
            }
            name => {
                return self
                    .saved
                    .iter()
                    .position(|s| s == name)
                    .map(Operand::Saved)
                    .ok_or_else(|| {
                        format!(
                            "\"{name}\" is neither row, col, matrix, channel, broadcast, z, an earlier \
                             tensor's name (matrix0, ...) nor a name saved by an earlier op{}",
                            if self.saved.is_empty() {
                                String::new()
                            } else {
                                format!(" ({})", self.saved.join(", "))
                            }
                        )
                    })
            }
        };
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::Bool) {
            return Err(format!(
                "a tensor operand is f32, f16, bf16 or bool (a mask, read as 0 or 1), not {}",
                dtype.name()
            ));
        }
        if self.tensors.len() >= MAX_TENSORS {
            return Err(format!("at most {MAX_TENSORS} tensor operands in a chain"));
        }
        let name = format!("{}{}", kind.name(), self.tensors.len());
        Ok(Operand::Tensor(self.add_tensor(kind, dtype, &name)))
    }

    /// The chain in fp64 at input `z` with tensor operand values `t` (one per tensor), for
    /// a chain without index ops ([`Chain::positional`]: see [`Chain::eval_at`]).
    pub fn eval(&self, z: f64, t: &[f64]) -> f64 {
        debug_assert!(
            !self.positional(),
            "an index op needs the element's position"
        );
        self.eval_at(z, t, (0, 0))
    }

    /// The chain in fp64 at input `z` with tensor operand values `t` (one per tensor), at
    /// element `(row, col)` of its m x n matrix (of its batch).
    pub fn eval_at(&self, z: f64, t: &[f64], pos: (i64, i64)) -> f64 {
        let mut saved = [0.0f64; MAX_OPS];
        let mut x = z;
        for s in &self.steps {
            let y = match s.op {
                Op::Binary(_, o) => operand_value(o, z, t, &saved),
                _ => 0.0,
            };
            x = step_value(s.op, x, y, pos);
            if let Some(i) = s.save {
                saved[i] = x;
            }
        }
        x
    }

    /// The chain in fp64 at input `z` (exact, as are the operands `t`), and a bound on how
    /// far an fp32 evaluation of it can be off: each op rounds its result by up to `unit`
    /// relative, and moves the errors of its inputs as the fp64 function does at the ends
    /// and midpoints of their intervals (a saved value keeps its bound). The bound is 0
    /// where it is not finite (an infinite or NaN value is compared exactly).
    pub fn eval_with_error(&self, z: f64, t: &[f64], unit: f64) -> (f64, f64) {
        debug_assert!(
            !self.positional(),
            "an index op needs the element's position"
        );
        self.eval_with_error_at(z, t, unit, (0, 0))
    }

    /// [`Chain::eval_with_error`] at element `pos` (row, col) of its matrix.
    pub fn eval_with_error_at(&self, z: f64, t: &[f64], unit: f64, pos: (i64, i64)) -> (f64, f64) {
        // Saved values and their bounds.
        let (mut saved, mut saved_e) = ([0.0f64; MAX_OPS], [0.0f64; MAX_OPS]);
        let (mut x, mut e) = (z, 0.0f64);
        for s in &self.steps {
            let (y, ey) = match s.op {
                Op::Binary(_, Operand::Saved(i)) => (saved[i], saved_e[i]),
                Op::Binary(_, o) => (operand_value(o, z, t, &saved), 0.0),
                _ => (0.0, 0.0),
            };
            let v = step_value(s.op, x, y, pos);
            let mut dev = 0.0f64;
            for dx in [-e, -0.5 * e, 0.0, 0.5 * e, e] {
                for dy in [-ey, 0.0, ey] {
                    let d = (step_value(s.op, x + dx, y + dy, pos) - v).abs();
                    if d.is_finite() {
                        dev = dev.max(d);
                    }
                }
            }
            // An activation's fp32 form may cancel (0.5 x (1 + tanh(...)) at x = -5 keeps
            // few of its bits): its rounding is bounded on the input's scale as well.
            let scale = match s.op {
                Op::Act(..) => v.abs() + x.abs(),
                _ => v.abs(),
            };
            e = dev + unit * scale;
            if !e.is_finite() {
                e = 0.0;
            }
            x = v;
            if let Some(i) = s.save {
                (saved[i], saved_e[i]) = (x, e);
            }
        }
        (x, e)
    }

    /// Arithmetic per element (see [`Activation::flops_per_element`]; binary ops 1,
    /// clamp 2, neg/abs 1, exp 1).
    pub fn flops_per_element(&self) -> f64 {
        self.steps
            .iter()
            .map(|s| match s.op {
                Op::Act(a, _, _) => a.flops_per_element(),
                Op::Binary(..)
                | Op::Neg
                | Op::Abs
                | Op::Exp
                | Op::Log
                | Op::Sqrt
                | Op::Tri { .. } => 1.0,
                Op::Clamp(..) | Op::Pow(_) => 2.0,
            })
            .sum()
    }

    /// The chain in words: `z -> x * 0.5 -> x + row0 -> gelu_erf(x)`.
    pub fn describe(&self) -> String {
        let mut s = String::from("z");
        for st in &self.steps {
            s.push_str(" -> ");
            s.push_str(&self.step_text(st, false));
            if let Some(i) = st.save {
                let _ = write!(s, " (saved as {})", self.saved[i]);
            }
        }
        s
    }

    fn operand_text(&self, o: Operand, cpp: bool) -> String {
        match o {
            Operand::Scalar(v) => {
                if cpp {
                    cpp_float(v)
                } else {
                    num(v)
                }
            }
            Operand::Tensor(i) => {
                if cpp {
                    format!("t[{i}]")
                } else {
                    self.tensors[i].name.clone()
                }
            }
            Operand::Z => "z".into(),
            Operand::Saved(i) => {
                if cpp {
                    format!("s{i}")
                } else {
                    self.saved[i].clone()
                }
            }
        }
    }

    fn step_text(&self, st: &Step, cpp: bool) -> String {
        let f = |v: f64| if cpp { cpp_float(v) } else { num(v) };
        match st.op {
            Op::Act(a, p0, p1) => {
                if cpp {
                    a.cpp_call("x", p0, p1)
                } else {
                    match a.param_count() {
                        0 => format!("{}(x)", a.name()),
                        1 => format!("{}(x, {})", a.name(), num(p0)),
                        _ => format!("{}(x, {}, {})", a.name(), num(p0), num(p1)),
                    }
                }
            }
            Op::Binary(b, o) => {
                let y = self.operand_text(o, cpp);
                match b {
                    BinOp::Min | BinOp::Max if !cpp => format!("{}(x, {y})", b.name()),
                    // As torch writes them: x.masked_fill(mask, v), torch.where(mask, x, v).
                    BinOp::Fill { fill_bits, when } if !cpp => {
                        let v = num(f64::from_bits(fill_bits));
                        if when {
                            format!("masked_fill(x, {y}, {v})")
                        } else {
                            format!("where({y}, x, {v})")
                        }
                    }
                    _ => b.cpp("x", &y),
                }
            }
            Op::Clamp(lo, hi) => {
                if cpp {
                    cpp_clamp("x", lo, hi)
                } else {
                    format!("clamp(x, {}, {})", f(lo), f(hi))
                }
            }
            Op::Neg => "-x".into(),
            Op::Abs => {
                if cpp {
                    "fabsf(x)".into()
                } else {
                    "abs(x)".into()
                }
            }
            Op::Exp | Op::Log | Op::Sqrt => {
                let f = match st.op {
                    Op::Exp => "exp",
                    Op::Log => "log",
                    _ => "sqrt",
                };
                // fp32 math in the kernel's C++.
                format!("{f}{}(x)", if cpp { "f" } else { "" })
            }
            Op::Pow(p) => {
                if cpp {
                    pow_cpp("x", p, "f")
                } else {
                    format!("pow(x, {})", f(p))
                }
            }
            Op::Tri { upper, diag, fill } => {
                if cpp {
                    tri_cpp("x", upper, diag, &cpp_float(fill), "row", "col")
                } else {
                    let name = if upper { "triu" } else { "tril" };
                    let d = if diag == 0 {
                        String::new()
                    } else {
                        format!(", {diag}")
                    };
                    if fill == 0.0 {
                        format!("{name}(x{d})")
                    } else {
                        format!("{name}(x{d}, else {})", num(fill))
                    }
                }
            }
        }
    }

    /// The `cs_chain` functor for a kernel source, preceded by the lines that include
    /// `cutesmith_chain.cuh` (see its header comment for the contract).
    pub fn cpp(&self) -> String {
        self.cpp_from(0)
    }

    /// [`Chain::cpp`] with the chain's operands from slot `first` of `cs_problem`'s
    /// (`kFirst`: a reduction's `[[before]]` ops hold the slots before it).
    pub fn cpp_from(&self, first: usize) -> String {
        let mut s = String::from("#define CS_CHAIN_DEFINED 1\n#include \"cutesmith_chain.cuh\"\n");
        s.push_str(
            "// cutesmith epilogue chain (generated from the workload spec; do not edit):\n",
        );
        self.functor(&mut s, "cs_chain", first);
        s
    }

    /// The `cs_before` functor: the ops on each element before the row op (`[[before]]`),
    /// its operands from slot 0 (a reduction's indexed like A, gemm_norm's like D). Placed after the
    /// `cs_chain` block (which includes `cutesmith_chain.cuh`).
    pub fn cpp_before(&self) -> String {
        let mut s = String::from("#define CS_BEFORE_DEFINED 1\n");
        s.push_str(
            "// cutesmith ops before the row op (generated from [[before]]; do not edit;\n\
             // operands indexed like its input: a reduction's like A (matrix m x k, row k\n\
             // values, col m values), gemm_norm's like D (matrix m x n, row n, col m)):\n",
        );
        self.functor(&mut s, "cs_before", 0);
        s
    }

    /// The described functor `name`, its operands from slot `first`.
    fn functor(&self, s: &mut String, name: &str, first: usize) {
        let _ = writeln!(s, "//   {}", self.describe());
        for (i, t) in self.tensors.iter().enumerate() {
            let per = match t.kind {
                TensorKind::Channel(r) => format!(" of {r} a row, in cs_operand::ld"),
                TensorKind::Broadcast(mask) => format!(
                    " over output dims {}: index sum_t ((i / row_div[t]) % row_mod[t]) * \
                     row_stride[t] + j * ld",
                    mask_dims(mask)
                ),
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "//   t[{i}] = {} ({} operand{per}, {}; slot {})",
                t.name,
                t.kind.name(),
                t.dtype.name(),
                first + i
            );
        }
        let _ = writeln!(s, "struct {name} {{");
        let _ = writeln!(
            s,
            "  static constexpr int kOperands = {};",
            self.tensors.len()
        );
        if first > 0 {
            let _ = writeln!(s, "  static constexpr int kFirst = {first};");
        }
        for i in 0..MAX_TENSORS {
            let k = self
                .tensors
                .get(i)
                .map_or("CS_OPERAND_NONE", |t| t.kind.cpp());
            let _ = writeln!(s, "  static constexpr int kKind{i} = {k};");
        }
        for i in 0..MAX_TENSORS {
            let d = self
                .tensors
                .get(i)
                .map_or(-1, |t| i64::from(t.dtype.abi_value()));
            let _ = writeln!(s, "  static constexpr int kDtype{i} = {d};");
        }
        // A broadcast operand's column stride (1: it spans the last dim, 0: one value a
        // row; -1: not a broadcast operand, or not known).
        for i in 0..MAX_TENSORS {
            let c = match self.tensors.get(i).map(|t| t.kind) {
                Some(TensorKind::Broadcast(mask)) if self.rank > 0 => {
                    i32::from(mask >> (self.rank - 1) & 1)
                }
                _ => -1,
            };
            let _ = writeln!(s, "  static constexpr int kBcastCol{i} = {c};");
        }
        // Its mask of spanned dims (operands with one mask share their row index) and its
        // runs of spanned row dims (the terms of that index; 2 when not known).
        for i in 0..MAX_TENSORS {
            let (mask, terms) = match self.tensors.get(i).map(|t| t.kind) {
                Some(TensorKind::Broadcast(mask)) if self.rank > 0 => (
                    i32::from(mask),
                    row_runs(mask, usize::from(self.rank) - self.broadcast_tail()),
                ),
                Some(TensorKind::Broadcast(mask)) => (i32::from(mask), MAX_ROW_TERMS),
                _ => (-1, 0),
            };
            let _ = writeln!(
                s,
                "  static constexpr int kBcastMask{i} = {mask};\n  static constexpr int kBcastTerms{i} = {terms};"
            );
        }
        let _ = writeln!(
            s,
            "  static constexpr bool kIdentity = {};",
            self.is_identity()
        );
        // A chain with an index op (triu, tril) reads each element's row and column of its
        // m x n matrix, and has only that form: a kernel that cannot pass them does not
        // compile. Any other chain has both forms.
        let positional = self.positional();
        let _ = writeln!(s, "  static constexpr bool kPositional = {positional};");
        if positional {
            s.push_str(
                "  CS_HD static float apply(float z, const float (&t)[CS_MAX_OPERANDS], int64_t row, int64_t col) {\n",
            );
        } else {
            s.push_str(
                "  CS_HD static float apply(float z, const float (&t)[CS_MAX_OPERANDS]) {\n",
            );
        }
        if self.tensors.is_empty() {
            s.push_str("    (void)t;\n");
        }
        self.body_cpp(s);
        s.push_str("  }\n");
        if !positional {
            s.push_str(
                "  CS_HD static float apply(float z, const float (&t)[CS_MAX_OPERANDS], int64_t, int64_t) {\n    return apply(z, t);\n  }\n",
            );
        }
        s.push_str("};\n");
    }

    /// The body of a functor's `apply`: `x` from `z` through every step, then returned.
    fn body_cpp(&self, s: &mut String) {
        s.push_str("    float x = z;\n");
        for st in &self.steps {
            let _ = writeln!(s, "    x = {};", self.step_text(st, true));
            if let Some(i) = st.save {
                let _ = writeln!(s, "    const float s{i} = x;");
            }
        }
        s.push_str("    return x;\n");
    }

    /// gemm_reduce's `cs_after` functor: the ops on each reduced value (no tensors), as
    /// the `[[after]]` table gives them; the identity without ops. Placed after the
    /// `cs_chain` block (which includes `cutesmith_chain.cuh`).
    pub fn cpp_after(&self) -> String {
        let mut s = String::from("#define CS_AFTER_DEFINED 1\n");
        let _ = writeln!(
            s,
            "// cutesmith ops after the reduction (generated from [[after]]; do not edit):\n//   {}",
            self.describe()
        );
        s.push_str("struct cs_after {\n");
        let _ = writeln!(
            s,
            "  static constexpr bool kIdentity = {};",
            self.is_identity()
        );
        s.push_str("  CS_HD static float apply(float z) {\n");
        self.body_cpp(&mut s);
        s.push_str("  }\n};\n");
        s
    }
}

impl Activation {
    /// Every activation, in ABI order.
    pub const ALL: [Activation; 16] = [
        Activation::Identity,
        Activation::Relu,
        Activation::LeakyRelu,
        Activation::GeluErf,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::Selu,
        Activation::Elu,
        Activation::Hardsigmoid,
        Activation::Hardswish,
        Activation::Hardtanh,
        Activation::Softplus,
        Activation::Softsign,
        Activation::Mish,
    ];

    /// How many parameters the activation takes.
    pub fn param_count(self) -> usize {
        match self {
            Activation::LeakyRelu | Activation::Elu | Activation::Silu => 1,
            Activation::Hardtanh | Activation::Softplus => 2,
            _ => 0,
        }
    }

    /// The default parameters (PyTorch's): leaky_relu slope 0.01, elu alpha 1, silu beta
    /// 1, hardtanh [-1, 1], softplus beta 1 threshold 20; 0 for the rest.
    pub fn default_params(self) -> (f64, f64) {
        match self {
            Activation::LeakyRelu => (0.01, 0.0),
            Activation::Elu | Activation::Silu => (1.0, 0.0),
            Activation::Hardtanh => (-1.0, 1.0),
            Activation::Softplus => (1.0, 20.0),
            _ => (0.0, 0.0),
        }
    }

    /// The parameters from an op's fields; an error names a field the activation does not
    /// take or a value that is not allowed.
    pub fn params_from(
        self,
        alpha: Option<f64>,
        beta: Option<f64>,
        min: Option<f64>,
        max: Option<f64>,
        threshold: Option<f64>,
    ) -> Result<(f64, f64), (&'static str, String)> {
        let (d0, d1) = self.default_params();
        let takes = |f: &str| -> bool {
            match self {
                Activation::LeakyRelu | Activation::Elu => f == "alpha",
                Activation::Silu => f == "beta",
                Activation::Hardtanh => f == "min" || f == "max",
                Activation::Softplus => f == "beta" || f == "threshold",
                _ => false,
            }
        };
        for (f, v) in [
            ("alpha", alpha),
            ("beta", beta),
            ("min", min),
            ("max", max),
            ("threshold", threshold),
        ] {
            if let Some(x) = v {
                if !takes(f) {
                    return Err((f, format!("not a parameter of {}", self.name())));
                }
                if !x.is_finite() {
                    return Err((f, format!("must be a finite number, got {x}")));
                }
            }
        }
        let (p0, p1) = match self {
            Activation::LeakyRelu | Activation::Elu => (alpha.unwrap_or(d0), d1),
            Activation::Silu => (beta.unwrap_or(d0), d1),
            Activation::Hardtanh => (min.unwrap_or(d0), max.unwrap_or(d1)),
            Activation::Softplus => (beta.unwrap_or(d0), threshold.unwrap_or(d1)),
            _ => (d0, d1),
        };
        if self == Activation::Hardtanh && p0 > p1 {
            return Err(("min", format!("min {p0} is above max {p1}")));
        }
        if self == Activation::Softplus && p0 <= 0.0 {
            return Err(("beta", format!("softplus beta must be > 0, got {p0}")));
        }
        Ok((p0, p1))
    }

    /// The activation in fp64 (PyTorch's definitions).
    pub fn eval(self, x: f64, p0: f64, p1: f64) -> f64 {
        let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
        let softplus = |v: f64, beta: f64, threshold: f64| {
            if beta * v > threshold {
                v
            } else {
                (beta * v).exp().ln_1p() / beta
            }
        };
        match self {
            Activation::Identity => x,
            Activation::Relu => {
                if x.is_nan() {
                    x
                } else {
                    x.max(0.0)
                }
            }
            Activation::LeakyRelu => {
                if x >= 0.0 {
                    x
                } else {
                    p0 * x
                }
            }
            Activation::GeluErf => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
            Activation::GeluTanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            }
            Activation::Silu => x * sigmoid(p0 * x),
            Activation::Sigmoid => sigmoid(x),
            Activation::Tanh => x.tanh(),
            Activation::Selu => {
                const ALPHA: f64 = 1.673_263_242_354_377_3;
                const SCALE: f64 = 1.050_700_987_355_480_5;
                SCALE * if x > 0.0 { x } else { ALPHA * x.exp_m1() }
            }
            Activation::Elu => {
                if x > 0.0 {
                    x
                } else {
                    p0 * x.exp_m1()
                }
            }
            Activation::Hardsigmoid => clamp_nan(x + 3.0, 0.0, 6.0) / 6.0,
            Activation::Hardswish => x * clamp_nan(x + 3.0, 0.0, 6.0) / 6.0,
            Activation::Hardtanh => clamp_nan(x, p0, p1),
            Activation::Softplus => softplus(x, p0, p1),
            Activation::Softsign => x / (1.0 + x.abs()),
            Activation::Mish => x * softplus(x, 1.0, 20.0).tanh(),
        }
    }

    /// The call in C++ on `arg` (a function of cutesmith_chain.cuh).
    pub fn cpp_call(self, arg: &str, p0: f64, p1: f64) -> String {
        match self {
            Activation::Identity => arg.to_string(),
            Activation::Silu => format!("cs_silu({arg}, {})", cpp_float(p0)),
            a => match a.param_count() {
                0 => format!("cs_{}({arg})", a.name()),
                1 => format!("cs_{}({arg}, {})", a.name(), cpp_float(p0)),
                _ => format!(
                    "cs_{}({arg}, {}, {})",
                    a.name(),
                    cpp_float(p0),
                    cpp_float(p1)
                ),
            },
        }
    }
}

/// `max` that keeps a NaN (as fmaxf does not, but the reference must: a NaN in is a NaN
/// out for every op but clamp-like selections, which PyTorch also propagates).
fn max_nan(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.max(y)
    }
}

fn min_nan(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.min(y)
    }
}

fn clamp_nan(x: f64, lo: f64, hi: f64) -> f64 {
    if x.is_nan() {
        x
    } else {
        x.max(lo).min(hi)
    }
}

/// erf in fp64 (W. J. Cody's rational approximations are overkill here: this uses the
/// series for small |x| and the continued fraction for large |x|, accurate to ~1e-15).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        // Maclaurin series: erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
        let mut term = a;
        let mut sum = a;
        let x2 = a * a;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let t = term / (2.0 * n + 1.0);
            sum += t;
            if t.abs() <= 1e-17 * sum.abs() || n > 200.0 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if a > 6.0 {
        1.0
    } else {
        // erfc by Lentz's continued fraction.
        let tiny = 1e-300;
        let mut f = a;
        let mut c = a;
        let mut d = 0.0;
        for i in 1..200 {
            let an = i as f64 / 2.0;
            d = a + an * d;
            d = if d.abs() < tiny { tiny } else { d };
            c = a + an / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        1.0 - (-a * a).exp() / (f * std::f64::consts::PI.sqrt())
    };
    if x < 0.0 {
        -r
    } else {
        r
    }
}

fn finite(v: f64, field: &'static str, i: usize) -> Result<f64, ChainError> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(ChainError {
            index: Some(i),
            field,
            message: format!("must be a finite number, got {v}"),
        })
    }
}

fn valid_name(n: &str) -> bool {
    let mut c = n.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic())
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// A number as a person writes it: `0.5`, `-1`, `1e-05`.
fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// `clamp(x, lo, hi)` in C++ (either bound may be infinite: then it is left out), with
/// the NaN-keeping `cs_maxf` / `cs_minf` of cutesmith_chain.cuh, as the reference clamps.
pub fn cpp_clamp(x: &str, lo: f64, hi: f64) -> String {
    let mut e = x.to_string();
    if lo.is_finite() {
        e = format!("cs_maxf({e}, {})", cpp_float(lo));
    }
    if hi.is_finite() {
        e = format!("cs_minf({e}, {})", cpp_float(hi));
    }
    e
}

/// A `masked_fill` (`when`) or `where` (`!when`) of `x` by operand `y` in C++, `fill` a
/// literal of the code's type: the fill where `y != 0` is `when`, else x.
pub fn fill_cpp(x: &str, y: &str, when: bool, fill: &str) -> String {
    let cmp = if when { "!=" } else { "==" };
    format!("(({y}) {cmp} 0 ? {fill} : ({x}))")
}

/// An fp32 literal in C++ for `v` (the value the kernel uses is `v` rounded to f32).
pub fn cpp_float(v: f64) -> String {
    let f = v as f32;
    if f.is_infinite() {
        return if f > 0.0 {
            "INFINITY".into()
        } else {
            "-INFINITY".into()
        };
    }
    let s = format!("{f:?}");
    let s = if s.contains('.') || s.contains('e') || s.contains("inf") {
        s
    } else {
        format!("{s}.0")
    };
    format!("{s}f")
}

/// `x^p` in C++ for a constant p: small integer powers as products (exact to the last
/// rounding, as PyTorch's pow computes them), 0.5 and -0.5 as roots, else `pow`. `suffix` is
/// "f" for fp32 math, "" for fp64.
pub fn pow_cpp(x: &str, p: f64, suffix: &str) -> String {
    let one = if suffix == "f" { "1.0f" } else { "1.0" };
    match p {
        0.0 => one.to_string(),
        1.0 => x.to_string(),
        2.0 => format!("({x} * {x})"),
        3.0 => format!("({x} * {x} * {x})"),
        4.0 => format!("(({x} * {x}) * ({x} * {x}))"),
        -1.0 => format!("({one} / {x})"),
        -2.0 => format!("({one} / ({x} * {x}))"),
        -0.5 => format!("({one} / sqrt{suffix}({x}))"),
        0.5 => format!("sqrt{suffix}({x})"),
        _ => format!("pow{suffix}({x}, {p:?}{suffix})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A broadcast operand's index, by the map, is its element's offset in its own
    /// contiguous shape (size 1 where it is broadcast) on every output element: per-channel,
    /// per-sample-channel, shared by the batch, two separate runs, the whole output, a
    /// scalar; with the trailing dims merged into the row where the operand treats them
    /// alike.
    #[test]
    fn a_broadcast_map_indexes_the_operand_as_pytorch_broadcasts_it() {
        // Ranks 2 to 5, dims of size 1 among them, every mask and every tail the operand
        // treats alike; masks of more than two runs of row dims are refused instead.
        let cases: [&[u64]; 5] = [
            &[5, 6],
            &[3, 1, 4],
            &[3, 5, 4, 6],
            &[2, 3, 1, 4, 3],
            &[1, 2, 3],
        ];
        let mut checked = 0;
        for dims in cases {
            let r = dims.len();
            for mask in 0u8..(1 << r) {
                for tail in 1..=r {
                    let alike = (r - tail..r)
                        .map(|d| mask & (1 << d) != 0)
                        .collect::<Vec<_>>()
                        .windows(2)
                        .all(|w| w[0] == w[1]);
                    if !alike {
                        continue;
                    }
                    let Ok(map) = BroadcastMap::new(dims, mask, tail) else {
                        // Only for more than two separate runs among the row dims.
                        assert!(
                            row_runs(mask, r - tail) > MAX_ROW_TERMS,
                            "{dims:?} {mask:b}"
                        );
                        continue;
                    };
                    assert!(row_runs(mask, r - tail) <= MAX_ROW_TERMS);
                    let split = r - tail;
                    let n: u64 = dims[split..].iter().product();
                    let size = |d: usize| if mask & (1 << d) != 0 { dims[d] } else { 1 };
                    assert_eq!(map.len, (0..r).map(size).product::<u64>());
                    let total: u64 = dims.iter().product();
                    for e in 0..total {
                        // The element's coordinates, and the operand's offset by them.
                        let mut c = vec![0u64; r];
                        let mut x = e;
                        for d in (0..r).rev() {
                            c[d] = x % dims[d];
                            x /= dims[d];
                        }
                        let mut want = 0;
                        for (d, &cd) in c.iter().enumerate() {
                            want = want * size(d) + if size(d) == 1 { 0 } else { cd };
                        }
                        assert_eq!(
                            map.index(e / n, e % n),
                            want,
                            "dims {dims:?} mask {mask:b} tail {tail} element {e}"
                        );
                    }
                    checked += 1;
                }
            }
        }
        assert!(checked > 100, "{checked}");
        // Three separate runs of row dims are more than the ABI's two terms.
        let e = BroadcastMap::new(&[2, 3, 4, 5, 6, 7], 0b010101, 1).unwrap_err();
        assert!(e.contains("more than 2 separate runs"), "{e}");
        // A dim past the rank.
        assert!(BroadcastMap::new(&[2, 3], 0b100, 1).is_err());
    }

    /// `over` is checked as written: sorted, once each, below the most dims; and only with
    /// operand = "broadcast".
    #[test]
    fn over_is_refused_out_of_order_or_without_a_broadcast_operand() {
        let build = |op: OpSpec| {
            let mut c = Chain::default();
            c.extend_from_spec(&[op], DType::BF16).map(|_| c)
        };
        let bc = |over: Vec<u32>| OpSpec {
            operand: Some("broadcast".into()),
            over: Some(over),
            ..spec("add")
        };
        let c = build(bc(vec![1, 3])).unwrap();
        assert_eq!(c.tensors[0].kind, TensorKind::Broadcast(0b1010));
        for (over, why) in [
            (vec![3, 1], "increasing order"),
            (vec![1, 1], "increasing order"),
            (vec![6], "past the most"),
        ] {
            let e = build(bc(over)).unwrap_err();
            assert_eq!(e.field, "over");
            assert!(e.message.contains(why), "{}", e.message);
        }
        let e = build(OpSpec {
            operand: Some("broadcast".into()),
            ..spec("add")
        })
        .unwrap_err();
        assert_eq!(e.field, "over");
        let e = build(OpSpec {
            operand: Some("row".into()),
            over: Some(vec![1]),
            ..spec("add")
        })
        .unwrap_err();
        assert_eq!(e.field, "over");
    }

    /// The bound of `eval_with_error` holds for an fp32 evaluation of the chain (a Huber term
    /// and a KL term, op by op in f32) on signed inputs of every magnitude, stays within a
    /// few units of f32 rounding of the result's scale, and catches a 16-bit intermediate.
    #[test]
    fn the_fp32_error_bound_of_a_chain_holds_and_still_catches() {
        let huber = {
            let mut c = Chain::default();
            let ops = vec![
                OpSpec {
                    operand: Some("matrix".into()),
                    ..spec("sub")
                },
                OpSpec {
                    save: Some("a".into()),
                    ..spec("abs")
                },
                OpSpec {
                    value: Some(0.5),
                    save: Some("q".into()),
                    ..spec("min")
                },
                OpSpec {
                    value: Some(-0.5),
                    ..spec("mul")
                },
                OpSpec {
                    operand: Some("a".into()),
                    ..spec("add")
                },
                OpSpec {
                    operand: Some("q".into()),
                    ..spec("mul")
                },
            ];
            c.extend_from_spec(&ops, DType::F32).unwrap();
            c
        };
        let f32_huber = |x: f32, t: f32, round16: bool| {
            let mut d = x - t;
            if round16 {
                d = f32::from_bits(d.to_bits() & 0xFFFF_0000);
            }
            let a = d.abs();
            let q = a.min(0.5);
            (q * -0.5f32 + a) * q
        };
        let mut r = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            r = r
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (r >> 11) as f64 / (1u64 << 53) as f64;
            let e = ((r >> 3) % 9) as i32 - 4;
            ((2.0 * u - 1.0) * 2f64.powi(e)) as f32
        };
        let mut caught = 0;
        let mut worst: f64 = 0.0;
        for _ in 0..20000 {
            let (x, t) = (next(), next());
            let (want, bound) = huber.eval_with_error(f64::from(x), &[f64::from(t)], BEFORE_OP_U);
            let got = f64::from(f32_huber(x, t, false));
            assert!(
                (got - want).abs() <= bound,
                "x {x} t {t}: {got} vs {want}, bound {bound}"
            );
            assert!(bound <= 64.0 * 6e-8 * (want.abs() + f64::from(x - t).abs()) + 1e-30);
            if bound > 0.0 {
                worst = worst.max((got - want).abs() / bound);
            }
            let off = (f64::from(f32_huber(x, t, true)) - want).abs();
            if off > bound {
                caught += 1;
            }
        }
        assert!(worst < 0.5, "the fp32 evaluation used {worst} of the bound");
        assert!(
            caught > 10000,
            "a 16-bit intermediate caught {caught} times of 20000"
        );
        // t log(t / p): a transcendental and a saved value.
        let mut kl = Chain::default();
        kl.extend_from_spec(
            &[
                OpSpec {
                    operand: Some("matrix".into()),
                    ..spec("div")
                },
                spec("log"),
                OpSpec {
                    operand: Some("z".into()),
                    ..spec("mul")
                },
            ],
            DType::F32,
        )
        .unwrap();
        for _ in 0..20000 {
            let (t, p) = (next().abs() + 1e-3, next().abs() + 1e-3);
            let (want, bound) = kl.eval_with_error(f64::from(t), &[f64::from(p)], BEFORE_OP_U);
            let got = f64::from((t / p).ln() * t);
            assert!(
                (got - want).abs() <= bound,
                "t {t} p {p}: {got} vs {want}, bound {bound}"
            );
        }
        // An activation whose fp32 form cancels: gelu_tanh at x = -3 .. -5 keeps few bits
        // of 0.5 x (1 + tanh(...)); the bound is on the input's scale too.
        let gelu = chain(vec![spec("gelu_tanh")]);
        for x in [-5.0f32, -4.0, -3.0, -1.0, 0.5, 3.0] {
            let inner = 0.797_884_6f32 * (x + 0.044715f32 * x * x * x);
            let got = f64::from(0.5f32 * x * (1.0f32 + inner.tanh()));
            let (want, bound) = gelu.eval_with_error(f64::from(x), &[], BEFORE_OP_U);
            assert!(
                (got - want).abs() <= bound,
                "gelu_tanh({x}): {got} vs {want}, bound {bound}"
            );
        }
        // Non-finite values carry no bound (they are compared exactly).
        let (v, e) = kl.eval_with_error(1.0, &[0.0], BEFORE_OP_U);
        assert!(v.is_infinite() && e == 0.0);
    }

    fn spec(op: &str) -> OpSpec {
        OpSpec {
            op: op.into(),
            ..OpSpec::default()
        }
    }

    fn chain(ops: Vec<OpSpec>) -> Chain {
        let mut c = Chain::default();
        c.extend_from_spec(&ops, DType::BF16).unwrap();
        c
    }

    /// masked_fill and where: the mask is the operand (bool: 0 or 1; any non-zero value is
    /// true), the value the fill; masked_fill fills where the mask holds, where keeps x
    /// there; both need a value and an operand, and a NaN fill is refused.
    #[test]
    fn masked_fill_and_where_select_by_their_mask() {
        let c = chain(vec![
            OpSpec {
                operand: Some("matrix".into()),
                dtype: Some(DType::Bool),
                value: Some(f64::NEG_INFINITY),
                ..spec("masked_fill")
            },
            OpSpec {
                operand: Some("col".into()),
                dtype: Some(DType::Bool),
                value: Some(2.5),
                ..spec("where")
            },
        ]);
        assert_eq!(c.tensors[0].dtype, DType::Bool);
        // Mask off, row kept: x. Mask on: -inf. Row not kept: 2.5 (whatever came before).
        assert_eq!(c.eval(0.75, &[0.0, 1.0]), 0.75);
        assert_eq!(c.eval(0.75, &[1.0, 1.0]), f64::NEG_INFINITY);
        assert_eq!(c.eval(f64::NAN, &[1.0, 0.0]), 2.5);
        // NaN passes where nothing is filled, as torch.where keeps it.
        assert!(c.eval(f64::NAN, &[0.0, 1.0]).is_nan());
        let cpp = c.cpp();
        assert!(cpp.contains("!= 0 ? -INFINITY"), "{cpp}");
        assert!(cpp.contains("== 0 ? 2.5f"), "{cpp}");
        let d = c.describe();
        assert!(d.contains("masked_fill(x, matrix0, -inf)"), "{d}");
        assert!(d.contains("where(col1, x, 2.5)"), "{d}");
        // A mask's type is bool unless it says otherwise.
        let b = chain(vec![OpSpec {
            operand: Some("row".into()),
            value: Some(0.0),
            ..spec("where")
        }]);
        assert_eq!(b.tensors[0].dtype, DType::Bool);
        for (s, field) in [
            (
                OpSpec {
                    operand: Some("matrix".into()),
                    ..spec("masked_fill")
                },
                "value",
            ),
            (
                OpSpec {
                    value: Some(0.0),
                    ..spec("where")
                },
                "operand",
            ),
            (
                OpSpec {
                    operand: Some("matrix".into()),
                    value: Some(f64::NAN),
                    ..spec("where")
                },
                "value",
            ),
            (
                OpSpec {
                    operand: Some("matrix".into()),
                    value: Some(1e39),
                    ..spec("masked_fill")
                },
                "value",
            ),
            // A value computed in the chain is never exactly zero on random inputs.
            (
                OpSpec {
                    operand: Some("z".into()),
                    value: Some(0.0),
                    ..spec("masked_fill")
                },
                "operand",
            ),
        ] {
            let mut c = Chain::default();
            let e = c.extend_from_spec(&[s], DType::BF16).unwrap_err();
            assert_eq!(e.field, field, "{e:?}");
        }
    }

    /// min, max and clamp keep a NaN in the reference (as PyTorch does), so the C++ calls
    /// the NaN-keeping helpers the header defines, never fminf / fmaxf.
    #[test]
    fn min_max_and_clamp_keep_nan_in_the_reference_and_the_cpp() {
        let c = chain(vec![
            OpSpec {
                value: Some(0.5),
                ..spec("max")
            },
            OpSpec {
                operand: Some("col".into()),
                ..spec("min")
            },
            OpSpec {
                min: Some(-2.0),
                max: Some(2.0),
                ..spec("clamp")
            },
        ]);
        assert!(c.eval(f64::NAN, &[0.0]).is_nan());
        assert!(c.eval(1.0, &[f64::NAN]).is_nan());
        assert_eq!(c.eval(3.0, &[1.5]), 1.5);
        assert_eq!(c.eval(-3.0, &[1.5]), 0.5);
        let cpp = c.cpp();
        assert!(cpp.contains("x = cs_maxf(x, 0.5f);"), "{cpp}");
        assert!(cpp.contains("x = cs_minf(x, t[0]);"), "{cpp}");
        assert!(
            cpp.contains("x = cs_minf(cs_maxf(x, -2.0f), 2.0f);"),
            "{cpp}"
        );
        assert!(!cpp.contains("fmaxf") && !cpp.contains("fminf"), "{cpp}");
        let header = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/cutlass-templates/include/cutesmith_chain.cuh"
        ))
        .unwrap();
        for f in ["cs_maxf", "cs_minf"] {
            assert!(
                header.contains(&format!("CS_HD float {f}(float x, float y)")),
                "{f}"
            );
        }
        assert!(header.contains("max.NaN.f32") && header.contains("min.NaN.f32"));
    }

    /// The fast GELU (erf form) of cutesmith_chain.cuh, emulated in f32 from the header's
    /// own constants (a 2^Q(min(|x|, 6)) polynomial and the Gaussian decay beyond): within
    /// 1e-6 of x Phi(x) everywhere on [-12, 12], 1e-5 relative for |x| <= 5 (the negative
    /// tail included); +inf kept, -inf and NaN NaN as in fp64, large negative x 0. A wrong
    /// constant or a dropped term moves it well outside.
    #[test]
    fn the_fast_gelu_erf_of_the_header_holds_its_error() {
        let header = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/cutlass-templates/include/cutesmith_chain.cuh"
        ))
        .unwrap();
        let body = &header[header
            .find("CS_HD float cs_gelu_erf_fast(float x)")
            .unwrap()..];
        let body = &body[..body.find("\n}\n").unwrap()];
        let num = |s: &str| s.trim().trim_end_matches('f').parse::<f32>().unwrap();
        let first = body.split("float q = ").nth(1).unwrap();
        let mut coef = vec![num(&first[..first.find(';').unwrap()])];
        for part in body.split("q = fmaf(q, t, ").skip(1) {
            coef.push(num(&part[..part.find(')').unwrap()]));
        }
        assert_eq!(coef.len(), 8, "{body}");
        assert!(body.contains("fminf(fabsf(x), 6.0f)"), "{body}");
        assert!(body.contains("fmaf(-0.7213475204f, fmaxf(fmaf(x, x, -36.0f), 0.0f), q)"));
        assert!(body.contains("x * (x < 0.0f ? s : 1.0f - s)"), "{body}");
        let gelu = |x: f32| -> f32 {
            let t = x.abs().min(6.0);
            let q = coef[1..].iter().fold(coef[0], |q, c| q.mul_add(t, *c));
            let q = (-0.721_347_5f32).mul_add(x.mul_add(x, -36.0).max(0.0), q);
            let s = (2f64.powf(f64::from(q))) as f32;
            x * if x < 0.0 { s } else { 1.0 - s }
        };
        let (mut worst_abs, mut worst_rel) = (0f64, 0f64);
        for i in -120_000..=120_000 {
            let x = i as f32 * 1e-4;
            let want = 0.5 * f64::from(x) * (1.0 + erf(f64::from(x) / 2f64.sqrt()));
            let err = (f64::from(gelu(x)) - want).abs();
            worst_abs = worst_abs.max(err);
            if x.abs() <= 5.0 && want != 0.0 {
                worst_rel = worst_rel.max(err / want.abs());
            }
        }
        assert!(
            worst_abs < 1e-6 && worst_rel < 1e-5,
            "{worst_abs} {worst_rel}"
        );
        assert_eq!(gelu(f32::INFINITY), f32::INFINITY);
        assert!(gelu(f32::NEG_INFINITY).is_nan());
        // The negative tail decays to 0 (torch's -0), not to Phi(-6) |x|.
        assert!(
            gelu(-20.0).abs() < 1e-30 && gelu(-1e6) == 0.0,
            "{}",
            gelu(-1e6)
        );
        assert!(gelu(f32::NAN).is_nan());
        assert_eq!(gelu(0.0), 0.0);
    }

    #[test]
    fn rdiv_divides_its_operand_by_the_running_value() {
        // softsign written out: z / (1 + |z|).
        let c = chain(vec![
            spec("abs"),
            OpSpec {
                value: Some(1.0),
                ..spec("add")
            },
            OpSpec {
                operand: Some("z".into()),
                ..spec("rdiv")
            },
        ]);
        assert_eq!(c.eval(3.0, &[]), 0.75);
        assert_eq!(c.eval(-1.0, &[]), -0.5);
        assert_eq!(c.eval(0.0, &[]), 0.0);
        let scalar = chain(vec![OpSpec {
            value: Some(2.0),
            ..spec("rdiv")
        }]);
        assert_eq!(scalar.eval(8.0, &[]), 0.25);
        assert_eq!(scalar.eval(0.0, &[]), f64::INFINITY);
        let cpp = c.cpp();
        assert!(cpp.contains("x = z / x;"), "{cpp}");
        assert!(scalar.cpp().contains("x = 2.0f / x;"), "{}", scalar.cpp());
    }

    #[test]
    fn a_kernelbench_chain_in_fp64_and_cpp() {
        // x * 0.5 + row, clamp to [-1, 1], gelu, plus the chain's input.
        let c = chain(vec![
            OpSpec {
                value: Some(0.5),
                ..spec("scale")
            },
            OpSpec {
                operand: Some("row".into()),
                ..spec("add")
            },
            OpSpec {
                min: Some(-1.0),
                max: Some(1.0),
                ..spec("hardtanh")
            },
            spec("gelu_erf"),
            OpSpec {
                operand: Some("z".into()),
                ..spec("add")
            },
        ]);
        assert_eq!(c.tensors.len(), 1);
        assert_eq!(c.tensors[0].kind, TensorKind::Row);
        let z = 3.0;
        let t = [0.25];
        let x = (z * 0.5 + 0.25f64).clamp(-1.0, 1.0);
        let want = 0.5 * x * (1.0 + erf(x / 2f64.sqrt())) + z;
        assert!((c.eval(z, &t) - want).abs() < 1e-15);
        let cpp = c.cpp();
        assert!(cpp.starts_with("#define CS_CHAIN_DEFINED 1\n#include \"cutesmith_chain.cuh\""));
        assert!(
            cpp.contains("static constexpr int kKind0 = CS_OPERAND_ROW;"),
            "{cpp}"
        );
        assert!(
            cpp.contains("static constexpr int kKind1 = CS_OPERAND_NONE;"),
            "{cpp}"
        );
        assert!(cpp.contains("x = x * 0.5f;"), "{cpp}");
        assert!(cpp.contains("x = x + t[0];"), "{cpp}");
        assert!(cpp.contains("x = cs_hardtanh(x, -1.0f, 1.0f);"), "{cpp}");
        assert!(cpp.contains("x = cs_gelu_erf(x);"), "{cpp}");
        assert!(cpp.contains("x = x + z;"), "{cpp}");
        assert_eq!(
            c.describe(),
            "z -> x * 0.5 -> x + row0 -> hardtanh(x, -1, 1) -> gelu_erf(x) -> x + z"
        );
    }

    /// A bias row then one activation, with its parameters, is recognised for the fused
    /// bias epilogues, identity steps (gemm_bias_act's `activation = "identity"` before an
    /// `[[epilogue]]` activation) passed over; anything more is not.
    #[test]
    fn bias_then_activation_passes_over_identity_steps() {
        let bias = |c: &mut Chain| {
            let t = c.add_tensor(TensorKind::Row, DType::F16, "bias");
            c.push(Op::Binary(BinOp::Add, Operand::Tensor(t)));
        };
        let mut c = Chain::default();
        bias(&mut c);
        c.push(Op::Act(Activation::Identity, 0.0, 0.0));
        c.extend_from_spec(
            &[OpSpec {
                beta: Some(2.0),
                threshold: Some(10.0),
                ..spec("softplus")
            }],
            DType::F16,
        )
        .unwrap();
        assert_eq!(
            c.bias_then_activation(),
            Some((Activation::Softplus, 2.0, 10.0, DType::F16))
        );
        let mut c = Chain::default();
        bias(&mut c);
        assert_eq!(
            c.bias_then_activation(),
            Some((Activation::Identity, 0.0, 0.0, DType::F16))
        );
        c.extend_from_spec(&[spec("relu"), spec("tanh")], DType::F16)
            .unwrap();
        assert_eq!(c.bias_then_activation(), None);
    }

    #[test]
    fn the_pre_activation_value_and_saved_names() {
        // 2 * sigmoid(z) + z; and a saved mid-chain value reused later.
        let c = chain(vec![
            spec("sigmoid"),
            OpSpec {
                value: Some(2.0),
                ..spec("mul")
            },
            OpSpec {
                operand: Some("z".into()),
                ..spec("add")
            },
        ]);
        let z: f64 = -0.7;
        assert!((c.eval(z, &[]) - (2.0 / (1.0 + (-z).exp()) + z)).abs() < 1e-15);
        let c = chain(vec![
            OpSpec {
                value: Some(3.0),
                save: Some("y".into()),
                ..spec("scale")
            },
            spec("sigmoid"),
            OpSpec {
                operand: Some("y".into()),
                ..spec("mul")
            },
        ]);
        let y: f64 = 3.0 * 0.4;
        assert!((c.eval(0.4, &[]) - y / (1.0 + (-y).exp())).abs() < 1e-15);
        assert!(c.cpp().contains("const float s0 = x;"));
        assert!(c.cpp().contains("x = x * s0;"));
    }

    #[test]
    fn bad_ops_name_the_entry_and_field() {
        let mut c = Chain::default();
        let e = c
            .extend_from_spec(&[spec("relu"), spec("frobnicate")], DType::F32)
            .unwrap_err();
        assert_eq!((e.index, e.field), (Some(1), "op"));
        assert!(e.message.contains("allowed:") && e.message.contains("hardswish"));
        let e = Chain::default()
            .extend_from_spec(&[spec("add")], DType::F32)
            .unwrap_err();
        assert!(e.message.contains("needs value"), "{e:?}");
        let e = Chain::default()
            .extend_from_spec(
                &[OpSpec {
                    alpha: Some(1.0),
                    ..spec("relu")
                }],
                DType::F32,
            )
            .unwrap_err();
        assert_eq!(e.field, "alpha");
        let e = Chain::default()
            .extend_from_spec(
                &[OpSpec {
                    operand: Some("nope".into()),
                    ..spec("mul")
                }],
                DType::F32,
            )
            .unwrap_err();
        assert!(e.message.contains("saved"), "{e:?}");
        let five: Vec<OpSpec> = (0..5)
            .map(|_| OpSpec {
                operand: Some("row".into()),
                ..spec("add")
            })
            .collect();
        let e = Chain::default()
            .extend_from_spec(&five, DType::F32)
            .unwrap_err();
        assert!(e.message.contains("at most 4"), "{e:?}");
        let e = Chain::default()
            .extend_from_spec(
                &[OpSpec {
                    min: Some(2.0),
                    max: Some(1.0),
                    ..spec("clamp")
                }],
                DType::F32,
            )
            .unwrap_err();
        assert!(e.message.contains("above"), "{e:?}");
    }

    #[test]
    fn activation_edge_values_match_pytorch() {
        let e = |a: Activation, x: f64| {
            let (p0, p1) = a.default_params();
            a.eval(x, p0, p1)
        };
        // selu/elu: continuous at 0, negative saturation.
        assert_eq!(e(Activation::Selu, 0.0), 0.0);
        assert!(
            (e(Activation::Selu, -50.0) + 1.050_700_987_355_480_5 * 1.673_263_242_354_377_3).abs()
                < 1e-12
        );
        assert!((e(Activation::Elu, -1e-9) + 1e-9).abs() < 1e-17);
        // hardsigmoid / hardswish corners at -3 and 3.
        assert_eq!(e(Activation::Hardsigmoid, -3.0), 0.0);
        assert_eq!(e(Activation::Hardsigmoid, 3.0), 1.0);
        assert_eq!(e(Activation::Hardswish, -3.0), 0.0);
        assert_eq!(e(Activation::Hardswish, 3.0), 3.0);
        assert!((e(Activation::Hardswish, 1.0) - 4.0 / 6.0).abs() < 1e-15);
        // hardtanh defaults [-1, 1].
        assert_eq!(e(Activation::Hardtanh, 5.0), 1.0);
        assert_eq!(e(Activation::Hardtanh, -5.0), -1.0);
        // softplus: the threshold passes x through; log(2) at 0.
        assert_eq!(e(Activation::Softplus, 25.0), 25.0);
        assert!((e(Activation::Softplus, 0.0) - 2f64.ln()).abs() < 1e-15);
        assert!(
            (Activation::Softplus.eval(1.0, 2.0, 20.0) - (2f64.exp().ln_1p() / 2.0)).abs() < 1e-15
        );
        // softsign, mish, silu with beta.
        assert_eq!(e(Activation::Softsign, -3.0), -0.75);
        assert!((e(Activation::Mish, 1.0) - 0.865_098_388_267_310_3).abs() < 1e-12);
        assert!(e(Activation::Mish, -60.0).abs() < 1e-20);
        assert!((Activation::Silu.eval(1.0, 2.0, 0.0) - 1.0 / (1.0 + (-2f64).exp())).abs() < 1e-15);
        // erf against known values.
        assert!((erf(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
        assert!((erf(1.5) - 0.966_105_146_475_310_7).abs() < 1e-15);
        assert!((erf(-5.0) + 0.999_999_999_998_462_5).abs() < 1e-15);
        assert_eq!(erf(30.0), 1.0);
    }

    #[test]
    fn nan_and_inf_propagate() {
        for a in Activation::ALL {
            let (p0, p1) = a.default_params();
            assert!(
                a.eval(f64::NAN, p0, p1).is_nan(),
                "{} drops a NaN",
                a.name()
            );
        }
        assert_eq!(
            Activation::Relu.eval(f64::INFINITY, 0.0, 0.0),
            f64::INFINITY
        );
        assert_eq!(Activation::Sigmoid.eval(f64::NEG_INFINITY, 0.0, 0.0), 0.0);
        assert_eq!(Activation::Tanh.eval(f64::INFINITY, 0.0, 0.0), 1.0);
        let c = chain(vec![OpSpec {
            value: Some(1.0),
            ..spec("max")
        }]);
        assert!(c.eval(f64::NAN, &[]).is_nan());
        let c = chain(vec![OpSpec {
            min: Some(0.0),
            ..spec("clamp")
        }]);
        assert!(c.eval(f64::NAN, &[]).is_nan());
        assert_eq!(c.eval(f64::NEG_INFINITY, &[]), 0.0);
    }

    /// triu and tril keep one side of the diagonal (torch's convention: col - row >= d,
    /// <= d) and fill the rest, with 0 or -inf; the C++ has only the positional form; the
    /// fields name their errors.
    #[test]
    fn triu_and_tril_keep_one_side_of_the_diagonal() {
        let tri = |op: &str, diagonal: Option<i64>, value: Option<f64>| OpSpec {
            op: op.into(),
            diagonal,
            value,
            ..Default::default()
        };
        let mut c = Chain::default();
        c.extend_from_spec(&[spec("relu"), tri("triu", Some(1), None)], DType::F32)
            .unwrap();
        assert!(c.positional());
        // Row 2: columns 3 and on are kept (col - row >= 1), the rest are 0.
        assert_eq!(c.eval_at(5.0, &[], (2, 3)), 5.0);
        assert_eq!(c.eval_at(5.0, &[], (2, 2)), 0.0);
        assert_eq!(c.eval_at(-5.0, &[], (0, 9)), 0.0, "relu first");
        // A causal mask: tril, the rest -inf; a NaN kept where kept, replaced where not.
        let scale = OpSpec {
            value: Some(0.125),
            ..spec("scale")
        };
        let mut m = Chain::default();
        m.extend_from_spec(
            &[scale, tri("tril", None, Some(f64::NEG_INFINITY))],
            DType::BF16,
        )
        .unwrap();
        assert_eq!(m.eval_at(8.0, &[], (3, 3)), 1.0);
        assert_eq!(m.eval_at(8.0, &[], (3, 4)), f64::NEG_INFINITY);
        assert!(m.eval_at(f64::NAN, &[], (3, 0)).is_nan());
        assert_eq!(m.eval_at(f64::NAN, &[], (0, 3)), f64::NEG_INFINITY);
        assert_eq!(m.describe(), "z -> x * 0.125 -> tril(x, else -inf)");
        assert!(c.describe().ends_with("triu(x, 1)"), "{}", c.describe());
        // The functor: only the positional apply, the mask on 64-bit positions.
        let cpp = m.cpp();
        assert!(cpp.contains("kPositional = true"), "{cpp}");
        assert!(cpp.contains("int64_t row, int64_t col) {"), "{cpp}");
        assert!(
            cpp.contains("((col) - (row) <= 0LL ? x : -INFINITY)"),
            "{cpp}"
        );
        assert_eq!(cpp.matches("static float apply(").count(), 1, "{cpp}");
        // A chain without index ops has both forms.
        let mut plain = Chain::default();
        plain.extend_from_spec(&[spec("relu")], DType::F32).unwrap();
        let cpp = plain.cpp();
        assert!(!plain.positional() && cpp.contains("kPositional = false"));
        assert_eq!(cpp.matches("static float apply(").count(), 2, "{cpp}");
        // The error bound of an element the mask fills is 0, even with -inf; a kept one's
        // is the kept value's.
        assert_eq!(m.eval_with_error_at(8.0, &[], 1e-7, (0, 5)).1, 0.0);
        assert!(m.eval_with_error_at(8.0, &[], 1e-7, (5, 0)).1 > 0.0);
        // Errors name the field.
        let bad = |o: OpSpec| {
            let mut c = Chain::default();
            c.extend_from_spec(&[o], DType::F32).unwrap_err()
        };
        let e = bad(tri("triu", None, Some(f64::NAN)));
        assert_eq!((e.index, e.field), (Some(0), "value"));
        let e = bad(tri("triu", None, Some(1e39)));
        assert_eq!(e.field, "value");
        let e = bad(tri("tril", Some(i64::MIN), None));
        assert_eq!(e.field, "diagonal");
        let e = bad(OpSpec {
            operand: Some("row".into()),
            ..tri("tril", None, None)
        });
        assert_eq!(e.field, "operand");
        let e = bad(OpSpec {
            diagonal: Some(1),
            ..spec("relu")
        });
        assert_eq!(e.field, "diagonal");
        assert!(e.message.contains("not used"), "{}", e.message);
        assert!(op_names().contains(&"triu") && op_names().contains(&"tril"));
    }

    #[test]
    fn pow_log_sqrt_and_set_parse_evaluate_and_print() {
        let specs = vec![
            OpSpec {
                op: "pow".into(),
                value: Some(3.0),
                save: Some("c".into()),
                ..Default::default()
            },
            OpSpec {
                op: "set".into(),
                operand: Some("z".into()),
                ..Default::default()
            },
            OpSpec {
                op: "sqrt".into(),
                ..Default::default()
            },
            OpSpec {
                op: "log".into(),
                ..Default::default()
            },
            OpSpec {
                op: "add".into(),
                operand: Some("c".into()),
                ..Default::default()
            },
        ];
        let mut c = Chain::default();
        c.extend_from_spec(&specs, DType::F32).unwrap();
        let z: f64 = 2.0;
        assert!((c.eval(z, &[]) - (z.sqrt().ln() + 8.0)).abs() < 1e-12);
        assert!(c.eval(-1.0, &[]).is_nan(), "sqrt of a negative is NaN");
        let cpp = c.cpp();
        assert!(
            cpp.contains("(x * x * x)") && cpp.contains("logf(x)") && cpp.contains("sqrtf(x)"),
            "{cpp}"
        );
        assert_eq!(pow_cpp("x", 1.5, "f"), "powf(x, 1.5f)");
        assert_eq!(pow_cpp("x", -0.5, ""), "(1.0 / sqrt(x))");
        // pow needs its exponent, and takes no operand.
        let mut c = Chain::default();
        let e = c
            .extend_from_spec(
                &[OpSpec {
                    op: "pow".into(),
                    ..Default::default()
                }],
                DType::F32,
            )
            .unwrap_err();
        assert_eq!(e.field, "value");
    }

    #[test]
    fn cpp_floats_are_valid_literals() {
        assert_eq!(cpp_float(1.0), "1.0f");
        assert_eq!(cpp_float(-2.0), "-2.0f");
        assert_eq!(cpp_float(1e-5), "1e-5f");
        assert_eq!(cpp_float(0.044715), "0.044715f");
        assert_eq!(cpp_float(f64::INFINITY), "INFINITY");
    }
}
