//! The schema: the spec file as written (`*Spec`, checked by serde with
//! `deny_unknown_fields`), the enums that mirror the kernel ABI through `abi_value()`, and
//! the validated pieces a [`super::Workload`] is made of (shapes, layouts, parameters,
//! target).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which computation a kernel performs (`cs_family`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// `D = alpha * A * B + beta * C`, batched.
    Gemm,
    /// `D = act(alpha * A * B + beta * C + bias)`.
    GemmBiasAct,
    /// `D = act(A)` elementwise.
    Activation,
    /// Row-wise softmax of A.
    Softmax,
    /// Row-wise log-softmax of A.
    LogSoftmax,
    /// Row-wise softmax (or log-softmax, `params.log_softmax`) of `alpha * A * B + beta * C`.
    GemmSoftmax,
    /// `D = gate(A * B) * (A * B2)`: two GEMMs sharing A, combined elementwise (SwiGLU,
    /// GEGLU).
    GemmGlu,
    /// Each row normalized (RMSNorm, LayerNorm, L2 / L1 normalize, `params.norm`), then
    /// the epilogue chain (an affine weight and bias are its `mul row` / `add row`).
    Norm,
    /// Each row of A (k elements) reduced to one value (sum, mean, max, min, logsumexp,
    /// L2 norm: `params.reduce`), then the epilogue chain; D is m x 1.
    Reduce,
    /// Each row of `chain(alpha * A * B)` (n values) reduced to one value
    /// (`params.reduce`), then the `[[after]]` ops; D is m x 1 (a KernelBench-style
    /// `linear -> ops -> sum / logsumexp / max over dim 1 -> ops`).
    GemmReduce,
    /// Each row of A (n elements) scanned: a cumulative sum or product (`params.scan`),
    /// forward or from the row's end (`params.reverse`), inclusive or exclusive
    /// (`params.exclusive`), then the epilogue chain; D has A's shape and layout.
    Scan,
    /// Each row of `before(alpha * A * B + beta * C)` (n values) split into
    /// `params.groups` groups of adjacent values, each normalized (`params.norm`), then
    /// the epilogue chain (a GroupNorm's per-channel weight and bias are its `mul row` /
    /// `add row`): a KernelBench-style `linear -> ops -> GroupNorm / InstanceNorm /
    /// LayerNorm -> ops`.
    GemmNorm,
}

impl Family {
    /// Every family, in ABI order; used to list what is allowed.
    pub const ALL: [Family; 12] = [
        Family::Gemm,
        Family::GemmBiasAct,
        Family::Activation,
        Family::Softmax,
        Family::LogSoftmax,
        Family::GemmSoftmax,
        Family::GemmGlu,
        Family::Norm,
        Family::Reduce,
        Family::GemmReduce,
        Family::Scan,
        Family::GemmNorm,
    ];

    /// The spelling used in spec files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Family::Gemm => "gemm",
            Family::GemmBiasAct => "gemm_bias_act",
            Family::Activation => "activation",
            Family::Softmax => "softmax",
            Family::LogSoftmax => "log_softmax",
            Family::GemmSoftmax => "gemm_softmax",
            Family::GemmGlu => "gemm_glu",
            Family::Norm => "norm",
            Family::Reduce => "reduce",
            Family::GemmReduce => "gemm_reduce",
            Family::Scan => "scan",
            Family::GemmNorm => "gemm_norm",
        }
    }

    /// The `cs_family` value the harness puts in `cs_problem.family`.
    pub fn abi_value(self) -> i32 {
        match self {
            Family::Gemm => 0,
            Family::GemmBiasAct => 1,
            Family::Activation => 2,
            Family::Softmax => 3,
            Family::LogSoftmax => 4,
            Family::GemmSoftmax => 5,
            Family::GemmGlu => 6,
            Family::Norm => 7,
            Family::Reduce => 8,
            Family::GemmReduce => 9,
            Family::Scan => 10,
            Family::GemmNorm => 11,
        }
    }

    /// Whether the family multiplies matrices (has k, layouts, alpha/beta).
    pub fn is_gemm(self) -> bool {
        matches!(
            self,
            Family::Gemm
                | Family::GemmBiasAct
                | Family::GemmSoftmax
                | Family::GemmGlu
                | Family::GemmReduce
                | Family::GemmNorm
        )
    }

    /// Whether the family takes an elementwise op chain: after the GEMM (with and without
    /// bias), the activation family itself, after the norm or the reduction, and for
    /// gemm_softmax on the
    /// GEMM's result before the softmax (see [`Family::chain_before_row_op`]).
    pub fn has_chain(self) -> bool {
        matches!(
            self,
            Family::Gemm
                | Family::GemmBiasAct
                | Family::Activation
                | Family::Norm
                | Family::Reduce
                | Family::Scan
                | Family::GemmSoftmax
                | Family::GemmReduce
                | Family::GemmNorm
                | Family::Softmax
                | Family::LogSoftmax
        )
    }

    /// Whether the chain runs before the family's row operation (gemm_softmax, softmax,
    /// log_softmax: the softmax reads the chain's result) rather than producing the output
    /// itself.
    pub fn chain_before_row_op(self) -> bool {
        matches!(
            self,
            Family::GemmSoftmax | Family::GemmReduce | Family::Softmax | Family::LogSoftmax
        )
    }

    /// Whether the `[[before]]` tensors are indexed like D (m x n: gemm_norm's product, a
    /// scan's input, which has D's shape and layout) rather than like A (a reduction's m x
    /// k input).
    pub fn before_like_d(self) -> bool {
        matches!(self, Family::GemmNorm | Family::Scan)
    }

    /// Whether each output row is normalized (softmax or log-softmax).
    pub fn is_row_softmax(self) -> bool {
        matches!(
            self,
            Family::Softmax | Family::LogSoftmax | Family::GemmSoftmax
        )
    }

    /// The baselines measured when a spec names none: vendor GEMMs for the GEMM
    /// families, cuDNN plus a plain device copy (the bandwidth ceiling) otherwise; the
    /// copy alone for the norms and reductions (the harness runs no cuDNN op for them).
    pub fn default_baselines(self) -> Vec<Baseline> {
        if self.is_gemm() {
            vec![Baseline::Cublas, Baseline::Cublaslt]
        } else if matches!(self, Family::Norm | Family::Reduce | Family::Scan) {
            vec![Baseline::Copy]
        } else {
            vec![Baseline::Cudnn, Baseline::Copy]
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Element type of an operand or result (`cs_dtype`). Specs may name f32, f16 and bf16
/// (or PyTorch's and the common spellings: float32, fp32, float16, fp16, half, bfloat16)
/// and e4m3 / e5m2 (float8_e4m3fn, float8_e5m2); F64 exists only because the ABI has it
/// (a reference or harness may use it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
pub enum DType {
    /// IEEE binary32.
    #[serde(rename = "f32", alias = "float32", alias = "fp32")]
    F32,
    /// IEEE binary16.
    #[serde(rename = "f16", alias = "float16", alias = "fp16", alias = "half")]
    F16,
    /// bfloat16.
    #[serde(rename = "bf16", alias = "bfloat16")]
    BF16,
    /// fp8 with 4 exponent and 3 mantissa bits (finite only; max 448), operands only.
    #[serde(rename = "e4m3", alias = "float8_e4m3fn")]
    E4M3,
    /// fp8 with 5 exponent and 2 mantissa bits (max 57344), operands only.
    #[serde(rename = "e5m2", alias = "float8_e5m2")]
    E5M2,
    /// IEEE binary64; not accepted in spec files.
    #[serde(skip_deserializing, rename = "f64")]
    F64,
    /// A signed 64-bit integer: the output of an index reduction (argmax / argmin) only.
    #[serde(rename = "i64", alias = "int64", alias = "long")]
    I64,
    /// A boolean stored in one byte (0 false, any other value true; read as 0.0 or 1.0):
    /// a chain's tensor operand only (a mask, `x * mask`, `masked_fill(mask, v)`).
    #[serde(rename = "bool")]
    Bool,
}

impl DType {
    /// The types a spec file may name.
    pub const SPEC: [DType; 7] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::E4M3,
        DType::E5M2,
        DType::I64,
        DType::Bool,
    ];

    /// Whether this is an integer type (an index output).
    pub fn is_int(self) -> bool {
        self == DType::I64
    }

    /// Whether this is one of the fp8 types (scaled per tensor).
    pub fn is_fp8(self) -> bool {
        matches!(self, DType::E4M3 | DType::E5M2)
    }

    /// Size of one element, for byte counts and buffer sizes.
    pub fn bytes(self) -> u64 {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::E4M3 | DType::E5M2 | DType::Bool => 1,
            DType::F64 | DType::I64 => 8,
        }
    }

    /// The `cs_dtype` value the harness puts in `cs_problem.dtype_*`.
    pub fn abi_value(self) -> i32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::BF16 => 2,
            DType::F64 => 3,
            DType::E4M3 => 4,
            DType::E5M2 => 5,
            DType::I64 => 6,
            DType::Bool => 7,
        }
    }

    /// The spelling used in spec files and reports.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::E4M3 => "e4m3",
            DType::E5M2 => "e5m2",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }

    /// Machine epsilon (the gap between 1 and the next value), which sets how close a
    /// result rounded to this type can be to the exact one.
    pub fn epsilon(self) -> f64 {
        match self {
            DType::F32 => f64::from(f32::EPSILON),
            DType::F16 => 2f64.powi(-10),
            DType::BF16 => 2f64.powi(-7),
            DType::E4M3 => 2f64.powi(-3),
            DType::E5M2 => 2f64.powi(-2),
            DType::F64 => f64::EPSILON,
            // An index and a boolean are exact.
            DType::I64 | DType::Bool => 0.0,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Storage order of a matrix operand (`cs_layout`): Row means the second index is
/// contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Row-major.
    Row,
    /// Column-major.
    Col,
}

impl Layout {
    /// The `cs_layout` value the harness puts in `cs_problem.layout_*`.
    pub fn abi_value(self) -> i32 {
        match self {
            Layout::Row => 0,
            Layout::Col => 1,
        }
    }

    /// The spelling used in spec files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Row => "row",
            Layout::Col => "col",
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Elementwise function of the activation and GEMM-epilogue families (`cs_activation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// `x`.
    Identity,
    /// `max(x, 0)`.
    Relu,
    /// `x >= 0 ? x : slope * x`; the slope travels in `cs_problem.act_alpha`.
    LeakyRelu,
    /// `0.5 x (1 + erf(x / sqrt 2))` (also spelled `gelu`, PyTorch's default form).
    #[serde(alias = "gelu")]
    GeluErf,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// `x * sigmoid(x)`.
    Silu,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// `scale * (x > 0 ? x : alpha * (exp(x) - 1))`, PyTorch's constants.
    Selu,
    /// `x > 0 ? x : alpha * (exp(x) - 1)`; alpha default 1.
    Elu,
    /// `relu6(x + 3) / 6`.
    Hardsigmoid,
    /// `x * relu6(x + 3) / 6`.
    Hardswish,
    /// `clamp(x, min, max)`; default [-1, 1].
    Hardtanh,
    /// `log(1 + exp(beta x)) / beta`, `x` where `beta x > threshold`; defaults 1, 20.
    Softplus,
    /// `x / (1 + |x|)`.
    Softsign,
    /// `x * tanh(softplus(x))`.
    Mish,
}

impl Activation {
    /// The `cs_activation` value the harness puts in `cs_problem.activation`.
    pub fn abi_value(self) -> i32 {
        match self {
            Activation::Identity => 0,
            Activation::Relu => 1,
            Activation::LeakyRelu => 2,
            Activation::GeluErf => 3,
            Activation::GeluTanh => 4,
            Activation::Silu => 5,
            Activation::Sigmoid => 6,
            Activation::Tanh => 7,
            Activation::Selu => 8,
            Activation::Elu => 9,
            Activation::Hardsigmoid => 10,
            Activation::Hardswish => 11,
            Activation::Hardtanh => 12,
            Activation::Softplus => 13,
            Activation::Softsign => 14,
            Activation::Mish => 15,
        }
    }

    /// The spelling used in spec files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Identity => "identity",
            Activation::Relu => "relu",
            Activation::LeakyRelu => "leaky_relu",
            Activation::GeluErf => "gelu_erf",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Silu => "silu",
            Activation::Sigmoid => "sigmoid",
            Activation::Tanh => "tanh",
            Activation::Selu => "selu",
            Activation::Elu => "elu",
            Activation::Hardsigmoid => "hardsigmoid",
            Activation::Hardswish => "hardswish",
            Activation::Hardtanh => "hardtanh",
            Activation::Softplus => "softplus",
            Activation::Softsign => "softsign",
            Activation::Mish => "mish",
        }
    }

    /// Floating-point operations per element, counting each arithmetic op, compare or
    /// select as 1 and each transcendental (exp, erf, tanh) as 1, as the hardware
    /// issues roughly one instruction for it:
    /// identity 0; relu 1 (max); leaky_relu 2 (mul, select); gelu_erf 5 (scale, erf,
    /// add 1, two muls); gelu_tanh 9 (x^2, x^3, mul, add, scale, tanh, add 1, two
    /// muls); silu 4 and sigmoid 4 (negate, exp, add 1, divide); tanh 1; selu 5 and elu
    /// 4 (compare, expm1, mul, select [, scale]); hardsigmoid 4 (add, max, min, mul);
    /// hardswish 5; hardtanh 2; softplus 5 (mul, exp, log1p, divide, select); softsign
    /// 3 (abs, add, divide); mish 7 (softplus 5, tanh, mul).
    pub fn flops_per_element(self) -> f64 {
        match self {
            Activation::Identity => 0.0,
            Activation::Relu => 1.0,
            Activation::LeakyRelu => 2.0,
            Activation::GeluErf => 5.0,
            Activation::GeluTanh => 9.0,
            Activation::Silu | Activation::Sigmoid => 4.0,
            Activation::Tanh => 1.0,
            Activation::Selu => 5.0,
            Activation::Elu => 4.0,
            Activation::Hardsigmoid => 4.0,
            Activation::Hardswish => 5.0,
            Activation::Hardtanh => 2.0,
            Activation::Softplus => 5.0,
            Activation::Softsign => 3.0,
            Activation::Mish => 7.0,
        }
    }
}

impl fmt::Display for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The row normalization of the norm family (`cs_norm`); x is one row of n elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// `x / sqrt(mean(x^2) + eps)` (RMSNorm).
    Rms,
    /// `(x - mean) / sqrt(var + eps)`, the biased variance (LayerNorm).
    Layer,
    /// `x / max(sqrt(sum x^2), eps)` (`F.normalize`, p = 2).
    L2,
    /// `x / max(sum |x|, eps)` (`F.normalize`, p = 1).
    L1,
    /// Layer's formula with BatchNorm's training-mode statistics: in gemm_norm over each
    /// column of D's m rows (feature j being column j); in norm over row i of every batch
    /// item together (an (N, C, ...) input as batch N of m = C rows of its spatial values).
    Batch,
}

impl NormKind {
    /// Every kind, in ABI order.
    pub const ALL: [NormKind; 5] = [
        NormKind::Rms,
        NormKind::Layer,
        NormKind::L2,
        NormKind::L1,
        NormKind::Batch,
    ];

    /// The `cs_norm` value the harness puts in `cs_problem.norm`.
    pub fn abi_value(self) -> i32 {
        match self {
            NormKind::Rms => 0,
            NormKind::Layer => 1,
            NormKind::L2 => 2,
            NormKind::L1 => 3,
            NormKind::Batch => 4,
        }
    }

    /// The spelling used in spec files and reports.
    pub fn name(self) -> &'static str {
        match self {
            NormKind::Rms => "rms",
            NormKind::Layer => "layer",
            NormKind::L2 => "l2",
            NormKind::L1 => "l1",
            NormKind::Batch => "batch",
        }
    }

    /// The name PyTorch users know it by.
    pub fn title(self) -> &'static str {
        match self {
            NormKind::Rms => "RMSNorm",
            NormKind::Layer => "LayerNorm",
            NormKind::L2 => "L2 normalize",
            NormKind::L1 => "L1 normalize",
            NormKind::Batch => "BatchNorm (batch statistics)",
        }
    }

    /// The computation in words, for the model's prompt.
    pub fn formula(self) -> String {
        let f = match self {
            NormKind::Rms => "x / sqrt(mean(x^2) + eps)",
            NormKind::Layer => "(x - mean) / sqrt(var + eps), biased var",
            NormKind::L2 => "x / max(sqrt(sum x^2), eps)",
            NormKind::L1 => "x / max(sum |x|, eps)",
            NormKind::Batch => "(x - mean) / sqrt(var + eps), biased var, over each column's m rows (gemm_norm) or over row i of every batch item (norm)",
        };
        format!("{} {f}", self.title())
    }

    /// The epsilon PyTorch uses when none is given: `nn.LayerNorm`'s 1e-5 (and 1e-5 for
    /// RMSNorm, as KernelBench writes it), `F.normalize`'s 1e-12.
    pub fn default_eps(self) -> f32 {
        match self {
            NormKind::Rms | NormKind::Layer | NormKind::Batch => 1e-5,
            NormKind::L2 | NormKind::L1 => 1e-12,
        }
    }

    /// A row's shift and scale (y = (x - shift) * scale) from its fp64 statistics over
    /// `n` elements: the sum of x, of x^2, of |x|, and `centered`, the sum of (x - mean)^2.
    pub fn shift_scale(self, n: f64, stats: RowStats, eps: f64) -> (f64, f64) {
        match self {
            NormKind::Rms => (0.0, 1.0 / (stats.sumsq / n + eps).sqrt()),
            NormKind::Layer | NormKind::Batch => {
                (stats.sum / n, 1.0 / (stats.centered / n + eps).sqrt())
            }
            NormKind::L2 => (0.0, 1.0 / stats.sumsq.sqrt().max(eps)),
            NormKind::L1 => (0.0, 1.0 / stats.abs_sum.max(eps)),
        }
    }
}

/// The reduction of the reduce family (`cs_reduce`); x is one row of k elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceKind {
    /// `sum(x)` (`torch.sum`).
    Sum,
    /// `sum(x) / k` (`torch.mean`).
    Mean,
    /// `max(x)` (`torch.amax`, `torch.max(x, dim)[0]`).
    Max,
    /// `min(x)`.
    Min,
    /// `max(x) + log(sum(exp(x - max(x))))` (`torch.logsumexp`).
    Logsumexp,
    /// `sqrt(sum(x^2))` (`torch.norm(x, dim=...)`).
    L2,
    /// The index of the first largest x, or of the first NaN (`torch.argmax`); D is i64.
    Argmax,
    /// The index of the first smallest x, or of the first NaN (`torch.argmin`); D is i64.
    Argmin,
    /// `logsumexp(x) - x[t]`, t the row's target class (an int64 input of m values a
    /// batch; `params.ignore_index` leaves a row out): `torch.nn.functional.cross_entropy`
    /// over rows of logits, each row's loss or their total (`params.total`).
    CrossEntropy,
}

impl ReduceKind {
    /// Every kind, in ABI order.
    pub const ALL: [ReduceKind; 9] = [
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Max,
        ReduceKind::Min,
        ReduceKind::Logsumexp,
        ReduceKind::L2,
        ReduceKind::Argmax,
        ReduceKind::Argmin,
        ReduceKind::CrossEntropy,
    ];

    /// The `cs_reduce` value the harness puts in `cs_problem.reduce`.
    pub fn abi_value(self) -> i32 {
        match self {
            ReduceKind::Sum => 0,
            ReduceKind::Mean => 1,
            ReduceKind::Max => 2,
            ReduceKind::Min => 3,
            ReduceKind::Logsumexp => 4,
            ReduceKind::L2 => 5,
            ReduceKind::Argmax => 6,
            ReduceKind::Argmin => 7,
            ReduceKind::CrossEntropy => 8,
        }
    }

    /// The spelling used in spec files and reports.
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "sum",
            ReduceKind::Mean => "mean",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
            ReduceKind::Logsumexp => "logsumexp",
            ReduceKind::L2 => "l2",
            ReduceKind::Argmax => "argmax",
            ReduceKind::Argmin => "argmin",
            ReduceKind::CrossEntropy => "cross_entropy",
        }
    }

    /// The computation in words, for the model's prompt.
    pub fn formula(self) -> &'static str {
        match self {
            ReduceKind::Sum => "sum(x)",
            ReduceKind::Mean => "sum(x) / k",
            ReduceKind::Max => "max(x), NaN if any x is NaN",
            ReduceKind::Min => "min(x), NaN if any x is NaN",
            ReduceKind::Logsumexp => "max(x) + log(sum(exp(x - max(x))))",
            ReduceKind::L2 => "sqrt(sum(x^2))",
            ReduceKind::Argmax => {
                "the index (int64, from 0) of the first largest x, or of the first NaN if any"
            }
            ReduceKind::Argmin => {
                "the index (int64, from 0) of the first smallest x, or of the first NaN if any"
            }
            ReduceKind::CrossEntropy => {
                "logsumexp(x) - x[t], t = targets[b * m + i] the row's class (int64); 0 for a \
                 row whose t is ignore_index, which a mean leaves out"
            }
        }
    }

    /// Whether the result is an index into the row (an int64 D), not a value.
    pub fn is_index(self) -> bool {
        matches!(self, ReduceKind::Argmax | ReduceKind::Argmin)
    }

    /// Whether each row also reads its target class (an int64 input of m values a batch).
    pub fn reads_targets(self) -> bool {
        self == ReduceKind::CrossEntropy
    }

    /// The cross entropy of one row in fp64 (`logsumexp(x) - x[t]`) with its bound, or
    /// None for a row left out (`t == ignore`); NaN for a target outside the row.
    pub fn cross_entropy(
        row: impl Iterator<Item = f64> + Clone,
        t: i64,
        ignore: i64,
        acc_u: f64,
    ) -> Option<(f64, f64)> {
        if t == ignore {
            return None;
        }
        let (lse, e) = ReduceKind::Logsumexp.eval(row.clone(), acc_u);
        let picked = usize::try_from(t).ok().and_then(|j| row.clone().nth(j));
        Some(match picked {
            // The subtraction's own rounding: one fp32 unit of the larger operand.
            Some(x) => (lse - x, e + 4.0 * acc_u * lse.abs().max(x.abs())),
            None => (f64::NAN, 0.0),
        })
    }

    /// The reduction of one row in fp64, and the bound on an fp32 kernel's honest error
    /// there: for the sums, `ACC * u * sum |term|` (u fp32's unit roundoff, the terms x,
    /// or x^2 for L2, or exp(x - max) for logsumexp); max and min are exact, and so are
    /// argmax and argmin (an index; ties go to the first, as torch's do).
    pub fn eval(self, row: impl Iterator<Item = f64> + Clone, acc_u: f64) -> (f64, f64) {
        let k = row.clone().count().max(1) as f64;
        let nan = row.clone().any(f64::is_nan);
        match self {
            ReduceKind::Argmax | ReduceKind::Argmin => {
                let better = |x: f64, y: f64| {
                    if self == ReduceKind::Argmax {
                        x > y
                    } else {
                        x < y
                    }
                };
                let mut best: Option<(usize, f64)> = None;
                for (j, x) in row.enumerate() {
                    match best {
                        Some((_, b)) if b.is_nan() => break,
                        Some((_, b)) if !x.is_nan() && !better(x, b) => {}
                        _ => best = Some((j, x)),
                    }
                }
                (best.map_or(0.0, |(j, _)| j as f64), 0.0)
            }
            ReduceKind::Sum | ReduceKind::Mean => {
                let (s, a) = row.fold((0.0, 0.0), |(s, a), x| (s + x, a + x.abs()));
                let d = if self == ReduceKind::Mean { k } else { 1.0 };
                (s / d, acc_u * a / d)
            }
            ReduceKind::Max | ReduceKind::Min if nan => (f64::NAN, 0.0),
            ReduceKind::Max => (row.fold(f64::NEG_INFINITY, f64::max), 0.0),
            ReduceKind::Min => (row.fold(f64::INFINITY, f64::min), 0.0),
            // Cross entropy's logsumexp (`cross_entropy` takes its target's logit off).
            ReduceKind::Logsumexp | ReduceKind::CrossEntropy => {
                let mx = row.clone().fold(f64::NEG_INFINITY, f64::max);
                if nan || !mx.is_finite() {
                    return (if nan { f64::NAN } else { mx }, 0.0);
                }
                let s: f64 = row.map(|x| (x - mx).exp()).sum();
                // exp's own error (a few ulps a term) and the sum's, relative to the sum;
                // log turns a relative error into an absolute one; the add rounds at |result|.
                let r = mx + s.ln();
                (r, acc_u * (2.0 + r.abs()))
            }
            ReduceKind::L2 => {
                let s: f64 = row.map(|x| x * x).sum();
                // The squares round too; sqrt halves the sum's relative error.
                (s.sqrt(), acc_u * s.sqrt())
            }
        }
    }
}

/// What D holds of a reduction's row values (`cs_total`; cross entropy only): each row's,
/// or one value a batch (torch's `reduction` = none, sum, mean).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TotalKind {
    /// Each row's value: D is m x 1 a batch.
    #[default]
    None,
    /// The sum of the batch's row values: one value a batch.
    Sum,
    /// That sum over the rows counted (those whose target is not the ignore index).
    Mean,
}

impl TotalKind {
    /// Every kind, in ABI order.
    pub const ALL: [TotalKind; 3] = [TotalKind::None, TotalKind::Sum, TotalKind::Mean];

    /// The `cs_total` value the harness puts in `cs_problem.total`.
    pub fn abi_value(self) -> i32 {
        match self {
            TotalKind::None => 0,
            TotalKind::Sum => 1,
            TotalKind::Mean => 2,
        }
    }

    /// The spelling used in spec files and reports.
    pub fn name(self) -> &'static str {
        match self {
            TotalKind::None => "none",
            TotalKind::Sum => "sum",
            TotalKind::Mean => "mean",
        }
    }

    /// The total of one batch's row values (`None`: a row left out) with its bound, in
    /// fp64: the rows' bounds summed, plus the fp32 summation's own `u * sum |v|` times
    /// `acc` (the kernel's order of adds). Mean over no row is NaN, as torch's.
    pub fn eval(self, rows: &[Option<(f64, f64)>], acc_u: f64) -> (f64, f64) {
        let kept = rows.iter().flatten();
        let (s, e, a, n) = kept.fold((0.0, 0.0, 0.0, 0usize), |(s, e, a, n), (v, ve)| {
            (s + v, e + ve, a + v.abs(), n + 1)
        });
        let bound = e + acc_u * a;
        match self {
            TotalKind::None => (f64::NAN, 0.0),
            TotalKind::Sum => (s, bound),
            TotalKind::Mean => (s / n as f64, bound / n as f64),
        }
    }
}

/// The operation of the scan family (`cs_scan`) along one row x_0 .. x_{n-1}.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScanKind {
    /// `y_j = x_0 + ... + x_j` (`torch.cumsum`).
    Sum,
    /// `y_j = x_0 * ... * x_j` (`torch.cumprod`).
    Prod,
}

impl ScanKind {
    /// Every kind, in ABI order.
    pub const ALL: [ScanKind; 2] = [ScanKind::Sum, ScanKind::Prod];

    /// The `cs_scan` value the harness puts in `cs_problem.scan`.
    pub fn abi_value(self) -> i32 {
        match self {
            ScanKind::Sum => 0,
            ScanKind::Prod => 1,
        }
    }

    /// The spelling used in spec files and reports.
    pub fn name(self) -> &'static str {
        match self {
            ScanKind::Sum => "sum",
            ScanKind::Prod => "prod",
        }
    }

    /// The value an empty scan holds (an exclusive scan's first output).
    pub fn identity(self) -> f64 {
        match self {
            ScanKind::Sum => 0.0,
            ScanKind::Prod => 1.0,
        }
    }

    /// The `cs_scan_flag` bits of a direction and inclusion.
    pub fn flags(reverse: bool, exclusive: bool) -> i32 {
        i32::from(reverse) | (i32::from(exclusive) << 1)
    }

    /// The scan of one row in fp64, in scan order (the caller reverses a reverse scan's
    /// row), each output with the bound on an fp32 kernel's honest error there: for the
    /// sum `u_acc * sum |x_i|` over the terms it adds (a kernel whose adds behind any output
    /// form a shallow tree plus a compensated carry stays well inside it); for the product
    /// `(terms + 1) * u_acc / 2 * |y|` (each multiply rounds once, in any order).
    pub fn eval(self, row: &[f64], exclusive: bool, u_acc: f64) -> Vec<(f64, f64)> {
        let pairs: Vec<(f64, f64)> = row.iter().map(|&x| (x, 0.0)).collect();
        self.eval_with_errors(&pairs, exclusive, u_acc)
    }

    /// [`ScanKind::eval`] of inputs that are themselves off by up to a bound each (`(x,
    /// e)`: `[[before]]` ops evaluated in fp32): a sum's bound adds the inputs' bounds, a
    /// product's adds prod(|x_k| + e_k) - |y| (the most the inputs' errors move it, sound
    /// where an input is zero but off by e).
    pub fn eval_with_errors(
        self,
        row: &[(f64, f64)],
        exclusive: bool,
        u_acc: f64,
    ) -> Vec<(f64, f64)> {
        let mut out = Vec::with_capacity(row.len());
        // carried: a sum's inputs' bounds, added; a product's prod(|x_k| + e_k).
        let (mut acc, mut abs, mut carried) = (self.identity(), 0.0f64, self.identity());
        for (j, &(x, e)) in row.iter().enumerate() {
            if exclusive {
                out.push((acc, self.bound(acc, abs, j, u_acc, carried)));
            }
            match self {
                ScanKind::Sum => {
                    acc += x;
                    abs += x.abs();
                    carried += e;
                }
                ScanKind::Prod => {
                    acc *= x;
                    carried *= x.abs() + e;
                }
            }
            if !exclusive {
                out.push((acc, self.bound(acc, abs, j + 1, u_acc, carried)));
            }
        }
        out
    }

    /// The error bound of an output over `terms` inputs whose |x| sum to `abs`, the inputs'
    /// own bounds `carried` (a sum's added; a product's prod(|x_k| + e_k), which is |y|
    /// exactly when they are all 0).
    fn bound(self, y: f64, abs: f64, terms: usize, u_acc: f64, carried: f64) -> f64 {
        let e = match self {
            ScanKind::Sum => u_acc * abs + carried,
            ScanKind::Prod => {
                (terms as f64 + 1.0) * u_acc / 2.0 * y.abs() + (carried - y.abs()).max(0.0)
            }
        };
        if e.is_nan() {
            0.0
        } else {
            e
        }
    }
}

impl fmt::Display for ScanKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl fmt::Display for ReduceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The fp64 sums of one row a norm's reference is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RowStats {
    /// Sum of x.
    pub sum: f64,
    /// Sum of x^2.
    pub sumsq: f64,
    /// Sum of |x|.
    pub abs_sum: f64,
    /// Sum of (x - mean)^2.
    pub centered: f64,
}

impl RowStats {
    /// The statistics of `row`, two passes (the centered sum about the exact mean).
    pub fn of(row: impl Iterator<Item = f64> + Clone) -> RowStats {
        let (mut sum, mut sumsq, mut abs_sum, mut count) = (0.0, 0.0, 0.0, 0usize);
        for x in row.clone() {
            sum += x;
            sumsq += x * x;
            abs_sum += x.abs();
            count += 1;
        }
        let mean = sum / count.max(1) as f64;
        let centered = row.map(|x| (x - mean) * (x - mean)).sum();
        RowStats {
            sum,
            sumsq,
            abs_sum,
            centered,
        }
    }
}

impl fmt::Display for NormKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The name of cuBLAS on TF32 tensor cores, timed beside an fp32 workload's baselines for
/// reference only (not fp32-accurate): never a goal's or a speedup's baseline.
pub const TF32_REFERENCE: &str = "cublas tf32 (not fp32-accurate)";

/// A library or reference kernel the candidate is timed against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Baseline {
    /// `cublasGemmEx` / `cublasGemmStridedBatchedEx` (GEMM families).
    Cublas,
    /// cuBLASLt matmul, with its fused bias/activation epilogues (GEMM families).
    Cublaslt,
    /// cuDNN activation / softmax forward (activation and softmax).
    Cudnn,
    /// Numbers recorded from PyTorch for the same problem (any family).
    Torch,
    /// A device-to-device copy of the same bytes: the bandwidth ceiling (activation and
    /// softmax).
    Copy,
    /// The unfused sequence a framework runs: the library op, then one elementwise pass
    /// per remaining op (workloads with an epilogue chain, GEMM + softmax, GLU).
    Unfused,
}

impl Baseline {
    /// The spelling used in spec files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Baseline::Cublas => "cublas",
            Baseline::Cublaslt => "cublaslt",
            Baseline::Cudnn => "cudnn",
            Baseline::Torch => "torch",
            Baseline::Copy => "copy",
            Baseline::Unfused => "unfused",
        }
    }

    /// Whether this baseline can run a problem of `family`.
    pub fn supports(self, family: Family) -> bool {
        match self {
            Baseline::Cublas | Baseline::Cublaslt => family.is_gemm(),
            Baseline::Cudnn => !family.is_gemm() && family != Family::Norm,
            Baseline::Copy => !family.is_gemm(),
            Baseline::Torch => true,
            Baseline::Unfused => family.is_gemm() || family == Family::Activation,
        }
    }
}

impl fmt::Display for Baseline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// How the absolute tolerance grows with the problem, so one spec value fits every
/// shape of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AtolScale {
    /// `atol` as written (activations).
    None,
    /// `atol * sqrt(k)`: a GEMM output of unit-scale inputs grows like sqrt(k).
    SqrtK,
    /// `atol / n`: a softmax row of n columns averages 1/n per element.
    InvN,
    /// `atol / sqrt(n)`: a row of n elements scaled to unit length (L2 norm).
    InvSqrtN,
    /// `atol / sqrt(k)`: the mean of k signed elements.
    InvSqrtK,
}

/// Which peak rate bounds the arithmetic of a workload, so a caller of
/// [`Workload::roofline_floor_s`] passes the matching FLOP/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComputePipe {
    /// Tensor cores on f16 operands.
    TensorF16,
    /// Tensor cores on bf16 operands.
    TensorBf16,
    /// Tensor cores on f32 operands rounded to tf32.
    TensorTf32,
    /// Tensor cores on fp8 operands.
    TensorFp8,
    /// CUDA cores in f32 (f32 GEMM without tf32, elementwise ops, softmax).
    SimtF32,
}

// ---------------------------------------------------------------------------------
// The spec as written.

/// A spec file as parsed: every field as the author wrote it, before defaults and
/// cross-field rules. Use [`Workload`] for anything but schema work.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Optional; when present it must equal the file stem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// One line a person understands.
    pub description: String,
    /// The computation.
    pub family: Family,
    /// Operand type (A and B; the input of activation and softmax).
    pub dtype: DType,
    /// Result type (C and D); default `dtype`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_dtype: Option<DType>,
    /// Accumulation type; default f32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acc_dtype: Option<DType>,
    /// f32 GEMM only: the kernel may round operands to tf32.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_tf32: bool,
    /// GEMM families only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<LayoutSpec>,
    /// Problem sizes; the first is the headline.
    pub shapes: Vec<ShapeSpec>,
    /// Op parameters.
    #[serde(default, skip_serializing_if = "ParamsSpec::is_empty")]
    pub params: ParamsSpec,
    /// Overrides of the per-dtype tolerance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<ToleranceSpec>,
    /// Baselines and goals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<TargetSpec>,
    /// activation: A read through a view (a permute, a split's part) of a packed input;
    /// see [`super::view`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<super::view::ViewSpec>,
    /// The epilogue chain: elementwise ops applied in order to the GEMM's result (or, for
    /// the activation family, after the activation). See [`super::chain`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub epilogue: Vec<super::chain::OpSpec>,
    /// gemm_reduce: the ops applied to each reduced value (`[[after]]`), after the
    /// reduction; they read no tensor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<super::chain::OpSpec>,
    /// reduce: elementwise ops applied to each element of A before the reduction
    /// (`[[before]]`: a loss's `(x - target)^2`); their tensors are shaped like A.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<super::chain::OpSpec>,
}

/// `[layout]` as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutSpec {
    /// A (m x k); default row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a: Option<Layout>,
    /// B (k x n); default col.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b: Option<Layout>,
    /// C and D (m x n); default row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub c: Option<Layout>,
    /// Operands shared by every batch (batch stride 0): `["a"]`, `["b"]` or both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<Vec<SharedOperand>>,
}

/// An operand that can be shared by the whole batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SharedOperand {
    A,
    B,
}

/// One `[[shapes]]` entry as written; signed so a negative size gets a clear message.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeSpec {
    /// GEMM rows; softmax rows; activation rows (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<i64>,
    /// GEMM columns; softmax columns; activation elements per row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<i64>,
    /// GEMM reduction size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<i64>,
    /// GEMM batch count (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<i64>,
    /// Activation: the output's dims, row-major and contiguous, as PyTorch has them
    /// ([N, C, H, W]), instead of m and n: the kernels see rows of the trailing dims every
    /// broadcast operand treats alike (`Chain::broadcast_tail`). Needed by
    /// `operand = "broadcast"`, whose `over` names these dims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dims: Option<Vec<i64>>,
}

/// `[params]` as written.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ParamsSpec {
    /// Activation and gemm_bias_act: the elementwise function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation: Option<Activation>,
    /// leaky_relu only: the negative slope (default 0.01).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaky_slope: Option<f32>,
    /// GEMM families: scale of A*B (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f32>,
    /// GEMM families: scale of C (default 0, C not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f32>,
    /// gemm_bias_act: add a bias vector of n elements (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bias: Option<bool>,
    /// fp8 GEMMs: per-tensor scale of A (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_a: Option<f32>,
    /// fp8 GEMMs: per-tensor scale of B (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_b: Option<f32>,
    /// fp8 output: D stores the result times this (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_d: Option<f32>,
    /// gemm_glu: the gate activation (default silu: SwiGLU; gelu_tanh: GEGLU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<Activation>,
    /// gemm_softmax: log-softmax instead of softmax (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_softmax: Option<bool>,
    /// norm: the normalization (rms | layer | l2 | l1); required there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub norm: Option<NormKind>,
    /// norm: the epsilon (default per kind: 1e-5 for rms and layer, 1e-12 for l2 and l1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eps: Option<f32>,
    /// gemm_norm: the groups each row is normalized in, n / groups adjacent values each
    /// (GroupNorm's num_groups; default 1, the whole row: InstanceNorm, LayerNorm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<u32>,
    /// reduce: the reduction (sum | mean | max | min | logsumexp | l2); required there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduce: Option<ReduceKind>,
    /// reduce = "cross_entropy": what D holds: each row's loss (none), or one value a
    /// batch (sum | mean); default mean, as torch's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<TotalKind>,
    /// reduce = "cross_entropy": the target that leaves a row out; default -100, as
    /// torch's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_index: Option<i64>,
    /// scan: the scan (sum | prod); required there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<ScanKind>,
    /// scan: run from the row's end (`torch.cumsum(x.flip(d), d).flip(d)`); default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<bool>,
    /// scan: leave each element out of its own output (the first output is the
    /// identity); default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<bool>,
}

impl ParamsSpec {
    /// True when no parameter is written (the table is left out of a serialized spec).
    pub fn is_empty(&self) -> bool {
        *self == ParamsSpec::default()
    }
}

impl WorkloadSpec {
    /// The spec as TOML text, in the layout of the files under `workloads/`: what
    /// [`super::Workload::parse`] reads back into the same spec. Fields left `None` are
    /// left out.
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }
}

/// `[tolerance]` as written.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToleranceSpec {
    /// Relative tolerance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtol: Option<f64>,
    /// Absolute tolerance before `atol_scale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atol: Option<f64>,
    /// How atol grows with the shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atol_scale: Option<AtolScale>,
}

/// `[target]` as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// What to time against; default per family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baselines: Option<Vec<Baseline>>,
    /// The baseline the speedup goal is measured against; default the first baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_vs: Option<Baseline>,
    /// Goal: baseline time / candidate time on the headline shape (default 1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_speedup: Option<f64>,
    /// Goal: roofline floor / candidate time on the headline shape, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_roofline_fraction: Option<f64>,
}

// ---------------------------------------------------------------------------------
// The validated workload.

/// A problem size. GEMM: `m x n x k` over `batch` problems. Activation and softmax:
/// `m` rows of `n` elements with `k = 0` and `batch = 1`, as the ABI wants them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    /// Rows of A and D.
    pub m: u64,
    /// Columns of B and D; elements per row for activation/softmax.
    pub n: u64,
    /// Reduction size; 0 outside the GEMM families.
    pub k: u64,
    /// Independent problems; 1 outside the GEMM families.
    pub batch: u64,
    /// The output's dims when the spec gave them (activation; see `ShapeSpec::dims`): m
    /// and n are then the products of the leading dims and of the trailing ones every
    /// broadcast operand treats alike. Empty otherwise.
    #[serde(default, skip_serializing_if = "Dims::is_empty")]
    pub dims: Dims,
}

/// A shape's output dims (at most [`super::chain::MAX_DIMS`]), a copyable list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Dims {
    rank: u8,
    d: [u64; super::chain::MAX_DIMS],
}

impl Dims {
    /// The dims of `v`, or None past [`super::chain::MAX_DIMS`].
    pub fn new(v: &[u64]) -> Option<Dims> {
        let mut d = [0u64; super::chain::MAX_DIMS];
        d.get_mut(..v.len())?.copy_from_slice(v);
        Some(Dims {
            rank: v.len() as u8,
            d,
        })
    }

    /// The dims, outermost first.
    pub fn as_slice(&self) -> &[u64] {
        &self.d[..usize::from(self.rank)]
    }

    /// No dims given.
    pub fn is_empty(&self) -> bool {
        self.rank == 0
    }
}

impl serde::Serialize for Dims {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for Dims {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Dims, D::Error> {
        let v = Vec::<u64>::deserialize(d)?;
        Dims::new(&v).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "at most {} dims, not {}",
                super::chain::MAX_DIMS,
                v.len()
            ))
        })
    }
}

impl Shape {
    /// A single GEMM problem.
    pub const fn gemm(m: u64, n: u64, k: u64) -> Shape {
        Shape {
            m,
            n,
            k,
            batch: 1,
            dims: Dims {
                rank: 0,
                d: [0; super::chain::MAX_DIMS],
            },
        }
    }

    /// `m` rows of `n` elements (activation, softmax).
    pub const fn rows(m: u64, n: u64) -> Shape {
        Shape {
            m,
            n,
            k: 0,
            batch: 1,
            dims: Dims {
                rank: 0,
                d: [0; super::chain::MAX_DIMS],
            },
        }
    }

    /// Elements of D (the output), across the batch.
    pub fn output_elements(&self) -> u64 {
        self.m * self.n * self.batch
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if !self.dims.is_empty() {
            let d: Vec<String> = self.dims.as_slice().iter().map(u64::to_string).collect();
            d.join("x")
        } else if self.k == 0 && self.batch > 1 {
            format!("{}x({}x{})", self.batch, self.m, self.n)
        } else if self.k == 0 {
            if self.m == 1 {
                format!("{}", self.n)
            } else {
                format!("{}x{}", self.m, self.n)
            }
        } else if self.batch == 1 {
            format!("{}x{}x{}", self.m, self.n, self.k)
        } else {
            format!("{}x({}x{}x{})", self.batch, self.m, self.n, self.k)
        };
        f.pad(&s)
    }
}

/// Storage orders of a GEMM's operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layouts {
    /// A (m x k).
    pub a: Layout,
    /// B (k x n).
    pub b: Layout,
    /// C and D (m x n).
    pub c: Layout,
    /// A is shared by every batch (batch stride 0).
    pub shared_a: bool,
    /// B (and B2) is shared by every batch (batch stride 0).
    pub shared_b: bool,
}

impl Layouts {
    /// The BLAS (column-major) name of the A/B pair: a row-major operand is a
    /// transposed one, so A row + B col is "TN", the usual fast case.
    pub fn blas_name(&self) -> &'static str {
        match (self.a, self.b) {
            (Layout::Row, Layout::Col) => "TN",
            (Layout::Row, Layout::Row) => "TT",
            (Layout::Col, Layout::Col) => "NN",
            (Layout::Col, Layout::Row) => "NT",
        }
    }
}

impl Default for Layouts {
    /// The TN case: A row-major, B column-major, C/D row-major.
    fn default() -> Self {
        Layouts {
            a: Layout::Row,
            b: Layout::Col,
            c: Layout::Row,
            shared_a: false,
            shared_b: false,
        }
    }
}

/// Op parameters with defaults filled, ready for `cs_problem`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// `cs_problem.activation`; Identity for gemm and softmax.
    pub activation: Activation,
    /// `cs_problem.act_alpha`: the leaky slope, else 0.
    pub act_alpha: f32,
    /// GEMM alpha (1 outside the GEMM families).
    pub alpha: f32,
    /// GEMM beta (0 outside the GEMM families); C is read only when nonzero.
    pub beta: f32,
    /// gemm_bias_act adds a bias vector of n elements.
    pub bias: bool,
    /// `cs_problem.act_beta`: the activation's second parameter, else 0.
    pub act_beta: f32,
    /// fp8 per-tensor scales (1 otherwise).
    pub scale_a: f32,
    pub scale_b: f32,
    pub scale_d: f32,
    /// gemm_glu: the gate (Identity for other families).
    pub gate: Activation,
    /// gemm_softmax: log-softmax.
    pub log_softmax: bool,
    /// norm: the normalization (Rms for other families, where it is not read).
    pub norm: NormKind,
    /// norm: its epsilon (0 for other families).
    pub eps: f32,
    /// gemm_norm: the groups of a row (1 for other families).
    pub groups: u32,
    /// reduce: the reduction (Sum for other families, where it is not read).
    pub reduce: ReduceKind,
    /// reduce = "cross_entropy": what D holds (None elsewhere).
    pub total: TotalKind,
    /// reduce = "cross_entropy": the target that leaves a row out (-100 elsewhere).
    pub ignore_index: i64,
    /// scan: the scan (Sum for other families, where it is not read).
    pub scan: ScanKind,
    /// scan: from the row's end.
    pub reverse: bool,
    /// scan: each element left out of its own output.
    pub exclusive: bool,
}

/// Baselines and goals with defaults filled.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// What to time against, in order; never empty.
    pub baselines: Vec<Baseline>,
    /// The baseline of the speedup goal; one of `baselines`.
    pub speedup_vs: Baseline,
    /// Baseline time / candidate time wanted on the headline shape.
    pub min_speedup: f64,
    /// Roofline floor / candidate time wanted on the headline shape, if any.
    pub min_roofline_fraction: Option<f64>,
}

/// Whether a shape's arithmetic intensity puts it under the bandwidth or the compute
/// roof, which decides what an optimizer should work on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RooflineClass {
    /// Below the ridge point: bytes bound the time.
    MemoryBound,
    /// At or above the ridge point: FLOPs bound the time.
    ComputeBound,
}
