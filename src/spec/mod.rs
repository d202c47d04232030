//! Workload specs (`workloads/*.toml`): what a kernel must compute, on which shapes,
//! with which tolerance, and its roofline floor (FLOPs and minimum bytes).
//!
//! A spec file is parsed into a [`WorkloadSpec`] (the TOML as written, every field
//! checked by serde with `deny_unknown_fields`) and then validated into a [`Workload`]
//! (defaults filled, cross-field rules checked, shapes resolved). The enums mirror the
//! kernel ABI in `cutlass-templates/include/cutesmith_abi.h` through `abi_value()`.
//!
//! Schema (one workload per file; the file stem is the workload's name):
//!
//! ```toml
//! name = "gemm_bf16_4096"     # optional; must equal the file stem
//! description = "bf16 GEMM, TN, the square headline shape"
//! family = "gemm"             # gemm | gemm_bias_act | activation | softmax
//! dtype = "bf16"              # operands: f32 | f16 | bf16
//! out_dtype = "bf16"          # optional: C and D; default = dtype
//! acc_dtype = "f32"           # optional: accumulation; default f32 (f16 allowed for f16 gemm)
//! allow_tf32 = false          # f32 gemm only: may the kernel round operands to tf32
//! [layout]                    # gemm families only; defaults a = row, b = col, c = row (TN)
//! a = "row"
//! b = "col"
//! c = "row"                   # C and D
//! [[shapes]]                  # the first is the headline shape, then ragged/small ones
//! m = 4096                    # gemm: m, n, k [, batch]; activation: n [, m rows];
//! n = 4096                    # softmax: m rows, n columns
//! k = 4096
//! [params]                    # activation, leaky_slope, alpha, beta, bias (per family)
//! [tolerance]                 # optional: rtol, atol, atol_scale = none | sqrt_k | inv_n
//! [target]                    # optional: baselines, speedup_vs, min_speedup,
//!                             #           min_roofline_fraction
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Everything that can go wrong loading a workload; every message names the file (or
/// directory) and, for a malformed spec, the field and what it allows, so a person can
/// fix the spec without reading this code.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The spec file or the workloads directory could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The TOML did not parse into the schema (syntax, unknown field or value, type).
    #[error("{}: {message}{}", path.display(), line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Parse {
        /// The spec file.
        path: PathBuf,
        /// 1-based line of the offending text, when toml reported a position.
        line: Option<usize>,
        /// `field "x": what is wrong; allowed: ...` where the field is known.
        message: String,
    },
    /// The spec parsed but breaks a rule of the schema (a missing dimension, a
    /// parameter that does not belong to the family, ...).
    #[error("{}: field \"{field}\": {message}{}", path.display(), line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Invalid {
        /// The spec file.
        path: PathBuf,
        /// 1-based line of the field (or of its table), when the spec text is known.
        line: Option<usize>,
        /// The field, as a TOML path (`shapes[2].k`, `params.activation`).
        field: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// [`Workload::find`] was asked for a name that no file in the directory has.
    #[error("no workload named \"{name}\" in {}; available: {}", dir.display(), if available.is_empty() { "(none)".to_string() } else { available.join(", ") })]
    NotFound {
        /// The name asked for.
        name: String,
        /// The directory searched.
        dir: PathBuf,
        /// The names that do exist, sorted.
        available: Vec<String>,
    },
    /// Several specs in a directory failed; each is reported, one per line.
    #[error("{} workload specs failed to load:\n{}", .0.len(), .0.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Many(Vec<WorkloadError>),
}

type Result<T> = std::result::Result<T, WorkloadError>;

/// Lets the CLI and the agent use `?` on workload calls: an unreadable file stays an
/// I/O error, an unknown name is a usage error, a malformed spec keeps its full message.
impl From<WorkloadError> for crate::error::Error {
    fn from(e: WorkloadError) -> Self {
        match e {
            WorkloadError::Io { path, source } => crate::error::Error::Io { path, source },
            e @ WorkloadError::NotFound { .. } => crate::error::Error::Usage(e.to_string()),
            e => crate::error::Error::Workload(e.to_string()),
        }
    }
}

/// Which computation a kernel performs (`cs_family`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
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
}

impl Family {
    /// Every family, in ABI order; used to list what is allowed.
    pub const ALL: [Family; 4] = [
        Family::Gemm,
        Family::GemmBiasAct,
        Family::Activation,
        Family::Softmax,
    ];

    /// The spelling used in spec files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Family::Gemm => "gemm",
            Family::GemmBiasAct => "gemm_bias_act",
            Family::Activation => "activation",
            Family::Softmax => "softmax",
        }
    }

    /// The `cs_family` value the harness puts in `cs_problem.family`.
    pub fn abi_value(self) -> i32 {
        match self {
            Family::Gemm => 0,
            Family::GemmBiasAct => 1,
            Family::Activation => 2,
            Family::Softmax => 3,
        }
    }

    /// Whether the family multiplies matrices (has k, layouts, alpha/beta).
    pub fn is_gemm(self) -> bool {
        matches!(self, Family::Gemm | Family::GemmBiasAct)
    }

    /// The baselines measured when a spec names none: vendor GEMMs for the GEMM
    /// families, cuDNN plus a plain device copy (the bandwidth ceiling) otherwise.
    pub fn default_baselines(self) -> Vec<Baseline> {
        if self.is_gemm() {
            vec![Baseline::Cublas, Baseline::Cublaslt]
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

/// Element type of an operand or result (`cs_dtype`). Specs may name f32, f16 and bf16;
/// F64 exists only because the ABI has it (a reference or harness may use it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
pub enum DType {
    /// IEEE binary32.
    #[serde(rename = "f32")]
    F32,
    /// IEEE binary16.
    #[serde(rename = "f16")]
    F16,
    /// bfloat16.
    #[serde(rename = "bf16")]
    BF16,
    /// IEEE binary64; not accepted in spec files.
    #[serde(skip_deserializing)]
    F64,
}

impl DType {
    /// The types a spec file may name.
    pub const SPEC: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// Size of one element, for byte counts and buffer sizes.
    pub fn bytes(self) -> u64 {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::F64 => 8,
        }
    }

    /// The `cs_dtype` value the harness puts in `cs_problem.dtype_*`.
    pub fn abi_value(self) -> i32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::BF16 => 2,
            DType::F64 => 3,
        }
    }

    /// The spelling used in spec files and reports.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
        }
    }

    /// Machine epsilon (the gap between 1 and the next value), which sets how close a
    /// result rounded to this type can be to the exact one.
    pub fn epsilon(self) -> f64 {
        match self {
            DType::F32 => f64::from(f32::EPSILON),
            DType::F16 => 2f64.powi(-10),
            DType::BF16 => 2f64.powi(-7),
            DType::F64 => f64::EPSILON,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// `x`.
    Identity,
    /// `max(x, 0)`.
    Relu,
    /// `x >= 0 ? x : slope * x`; the slope travels in `cs_problem.act_alpha`.
    LeakyRelu,
    /// `0.5 x (1 + erf(x / sqrt 2))`.
    GeluErf,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// `x * sigmoid(x)`.
    Silu,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
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
        }
    }

    /// Floating-point operations per element, counting each arithmetic op, compare or
    /// select as 1 and each transcendental (exp, erf, tanh) as 1, as the hardware
    /// issues roughly one instruction for it:
    /// identity 0; relu 1 (max); leaky_relu 2 (mul, select); gelu_erf 5 (scale, erf,
    /// add 1, two muls); gelu_tanh 9 (x^2, x^3, mul, add, scale, tanh, add 1, two
    /// muls); silu 4 and sigmoid 4 (negate, exp, add 1, divide); tanh 1.
    pub fn flops_per_element(self) -> f64 {
        match self {
            Activation::Identity => 0.0,
            Activation::Relu => 1.0,
            Activation::LeakyRelu => 2.0,
            Activation::GeluErf => 5.0,
            Activation::GeluTanh => 9.0,
            Activation::Silu | Activation::Sigmoid => 4.0,
            Activation::Tanh => 1.0,
        }
    }
}

impl fmt::Display for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A library or reference kernel the candidate is timed against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
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
        }
    }

    /// Whether this baseline can run a problem of `family`.
    pub fn supports(self, family: Family) -> bool {
        match self {
            Baseline::Cublas | Baseline::Cublaslt => family.is_gemm(),
            Baseline::Cudnn | Baseline::Copy => !family.is_gemm(),
            Baseline::Torch => true,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AtolScale {
    /// `atol` as written (activations).
    None,
    /// `atol * sqrt(k)`: a GEMM output of unit-scale inputs grows like sqrt(k).
    SqrtK,
    /// `atol / n`: a softmax row of n columns averages 1/n per element.
    InvN,
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
    /// CUDA cores in f32 (f32 GEMM without tf32, elementwise ops, softmax).
    SimtF32,
}

// ---------------------------------------------------------------------------------
// The spec as written.

/// A spec file as parsed: every field as the author wrote it, before defaults and
/// cross-field rules. Use [`Workload`] for anything but schema work.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Optional; when present it must equal the file stem.
    #[serde(default)]
    pub name: Option<String>,
    /// One line a person understands.
    pub description: String,
    /// The computation.
    pub family: Family,
    /// Operand type (A and B; the input of activation and softmax).
    pub dtype: DType,
    /// Result type (C and D); default `dtype`.
    #[serde(default)]
    pub out_dtype: Option<DType>,
    /// Accumulation type; default f32.
    #[serde(default)]
    pub acc_dtype: Option<DType>,
    /// f32 GEMM only: the kernel may round operands to tf32.
    #[serde(default)]
    pub allow_tf32: bool,
    /// GEMM families only.
    #[serde(default)]
    pub layout: Option<LayoutSpec>,
    /// Problem sizes; the first is the headline.
    pub shapes: Vec<ShapeSpec>,
    /// Op parameters.
    #[serde(default)]
    pub params: ParamsSpec,
    /// Overrides of the per-dtype tolerance.
    #[serde(default)]
    pub tolerance: Option<ToleranceSpec>,
    /// Baselines and goals.
    #[serde(default)]
    pub target: Option<TargetSpec>,
}

/// `[layout]` as written.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutSpec {
    /// A (m x k); default row.
    #[serde(default)]
    pub a: Option<Layout>,
    /// B (k x n); default col.
    #[serde(default)]
    pub b: Option<Layout>,
    /// C and D (m x n); default row.
    #[serde(default)]
    pub c: Option<Layout>,
}

/// One `[[shapes]]` entry as written; signed so a negative size gets a clear message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeSpec {
    /// GEMM rows; softmax rows; activation rows (default 1).
    #[serde(default)]
    pub m: Option<i64>,
    /// GEMM columns; softmax columns; activation elements per row.
    #[serde(default)]
    pub n: Option<i64>,
    /// GEMM reduction size.
    #[serde(default)]
    pub k: Option<i64>,
    /// GEMM batch count (default 1).
    #[serde(default)]
    pub batch: Option<i64>,
}

/// `[params]` as written.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamsSpec {
    /// Activation and gemm_bias_act: the elementwise function.
    #[serde(default)]
    pub activation: Option<Activation>,
    /// leaky_relu only: the negative slope (default 0.01).
    #[serde(default)]
    pub leaky_slope: Option<f32>,
    /// GEMM families: scale of A*B (default 1).
    #[serde(default)]
    pub alpha: Option<f32>,
    /// GEMM families: scale of C (default 0, C not read).
    #[serde(default)]
    pub beta: Option<f32>,
    /// gemm_bias_act: add a bias vector of n elements (default true).
    #[serde(default)]
    pub bias: Option<bool>,
}

/// `[tolerance]` as written.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToleranceSpec {
    /// Relative tolerance.
    #[serde(default)]
    pub rtol: Option<f64>,
    /// Absolute tolerance before `atol_scale`.
    #[serde(default)]
    pub atol: Option<f64>,
    /// How atol grows with the shape.
    #[serde(default)]
    pub atol_scale: Option<AtolScale>,
}

/// `[target]` as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// What to time against; default per family.
    #[serde(default)]
    pub baselines: Option<Vec<Baseline>>,
    /// The baseline the speedup goal is measured against; default the first baseline.
    #[serde(default)]
    pub speedup_vs: Option<Baseline>,
    /// Goal: baseline time / candidate time on the headline shape (default 1.0).
    #[serde(default)]
    pub min_speedup: Option<f64>,
    /// Goal: roofline floor / candidate time on the headline shape, in (0, 1].
    #[serde(default)]
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
}

impl Shape {
    /// A single GEMM problem.
    pub const fn gemm(m: u64, n: u64, k: u64) -> Shape {
        Shape { m, n, k, batch: 1 }
    }

    /// `m` rows of `n` elements (activation, softmax).
    pub const fn rows(m: u64, n: u64) -> Shape {
        Shape {
            m,
            n,
            k: 0,
            batch: 1,
        }
    }

    /// Elements of D (the output), across the batch.
    pub fn output_elements(&self) -> u64 {
        self.m * self.n * self.batch
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.k == 0 {
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
}

/// When a result element is accepted: `|got - want| <= atol_at(shape) + rtol * |want|`.
///
/// Defaults (inputs of unit scale, e.g. uniform in [-1, 1], compared against an exact
/// reference):
/// - rtol is two ulps of the output type at 1.0, so a result rounded once (or two
///   roundings that differ by one ulp) passes: bf16 1.6e-2 (2 * 2^-7), f16 2e-3
///   (2 * 2^-10); for f32 output 1e-5, room for a different f32 summation order.
/// - atol: f32 1e-5, f16 1e-3, bf16 1e-2, catching values near zero where rtol says
///   nothing.
/// - f32 GEMM with tf32 allowed: rtol 5e-3, atol 5e-3, since each operand is rounded
///   to 10 mantissa bits before the multiply (about 1e-3 of the output scale).
/// - atol scales by sqrt(k) for the GEMM families (the output's scale) and by 1/n for
///   softmax (the mean of a row); activations use it as is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance before scaling.
    pub atol: f64,
    /// How atol grows with the shape.
    pub atol_scale: AtolScale,
}

impl Tolerance {
    /// The documented default for a family, result type and math mode.
    pub fn default_for(family: Family, out_dtype: DType, tf32: bool) -> Tolerance {
        let (rtol, atol) = if tf32 {
            (5e-3, 5e-3)
        } else {
            match out_dtype {
                DType::F32 => (1e-5, 1e-5),
                DType::F16 => (2e-3, 1e-3),
                DType::BF16 => (1.6e-2, 1e-2),
                DType::F64 => (1e-12, 1e-12),
            }
        };
        Tolerance {
            rtol,
            atol,
            atol_scale: Self::default_scale(family),
        }
    }

    /// sqrt(k) for GEMMs, 1/n for softmax, none for activations.
    pub fn default_scale(family: Family) -> AtolScale {
        match family {
            Family::Gemm | Family::GemmBiasAct => AtolScale::SqrtK,
            Family::Softmax => AtolScale::InvN,
            Family::Activation => AtolScale::None,
        }
    }

    /// The absolute tolerance on `shape`, after scaling.
    pub fn atol_at(&self, shape: &Shape) -> f64 {
        match self.atol_scale {
            AtolScale::None => self.atol,
            AtolScale::SqrtK => self.atol * (shape.k.max(1) as f64).sqrt(),
            AtolScale::InvN => self.atol / shape.n.max(1) as f64,
        }
    }

    /// The comparison tolerance on `shape` (atol scaled), as the validator applies it.
    pub fn at(&self, shape: &Shape) -> crate::eval::compare::Tolerance {
        crate::eval::compare::Tolerance {
            rtol: self.rtol,
            atol: self.atol_at(shape),
        }
    }

    /// Whether `got` is close enough to `want` on `shape`: the validator's rule (NaN
    /// passes only against NaN, an infinity only against the same infinity).
    pub fn accepts(&self, got: f64, want: f64, shape: &Shape) -> bool {
        self.at(shape).accepts(got, want)
    }
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

/// A validated workload: a spec with its name, file, defaults and shapes resolved.
/// Construct with [`Workload::load`], [`Workload::parse`], [`Workload::load_dir`] or
/// [`Workload::find`].
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    name: String,
    path: PathBuf,
    description: String,
    family: Family,
    dtype: DType,
    out_dtype: DType,
    acc_dtype: DType,
    allow_tf32: bool,
    layouts: Layouts,
    shapes: Vec<Shape>,
    params: Params,
    tolerance: Tolerance,
    target: Target,
}

impl Workload {
    /// Reads and validates one spec file; its stem is the workload's name.
    pub fn load(path: impl AsRef<Path>) -> Result<Workload> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Workload::parse(path, &text)
    }

    /// Validates spec text as if read from `path` (whose stem is the name); the file
    /// itself is not touched, so tests and tools can check text in memory.
    pub fn parse(path: impl AsRef<Path>, text: &str) -> Result<Workload> {
        let path = path.as_ref();
        let spec: WorkloadSpec = toml::from_str(text).map_err(|e| parse_error(path, text, &e))?;
        Validator {
            path,
            text: Some(text),
        }
        .run(spec)
    }

    /// Validates a parsed spec that came from `path`.
    pub fn from_spec(path: impl AsRef<Path>, spec: WorkloadSpec) -> Result<Workload> {
        Validator {
            path: path.as_ref(),
            text: None,
        }
        .run(spec)
    }

    /// Reads every `*.toml` in `dir`, sorted by name. Every broken spec is reported (as
    /// [`WorkloadError::Many`] when more than one), not just the first.
    pub fn load_dir(dir: impl AsRef<Path>) -> Result<Vec<Workload>> {
        let dir = dir.as_ref();
        let mut ok = Vec::new();
        let mut errors = Vec::new();
        for path in spec_files(dir)? {
            match Workload::load(&path) {
                Ok(w) => ok.push(w),
                Err(e) => errors.push(e),
            }
        }
        match errors.len() {
            0 => {
                ok.sort_by(|a, b| a.name.cmp(&b.name));
                Ok(ok)
            }
            1 => Err(errors.remove(0)),
            _ => Err(WorkloadError::Many(errors)),
        }
    }

    /// Loads the workload called `name` from `dir` (`dir/name.toml`). A `name` that ends
    /// in `.toml` or contains a path separator is taken as a path, so the CLI accepts both
    /// `gemm_bf16_4096` and `workloads/gemm_bf16_4096.toml`. When nothing matches, the
    /// error lists the names that exist.
    pub fn find(dir: impl AsRef<Path>, name: &str) -> Result<Workload> {
        let dir = dir.as_ref();
        if name.ends_with(".toml") || name.contains('/') || name.contains('\\') {
            return Workload::load(name);
        }
        let path = dir.join(format!("{name}.toml"));
        if path.is_file() {
            return Workload::load(path);
        }
        let available = spec_files(dir)?
            .iter()
            .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_string))
            .collect();
        Err(WorkloadError::NotFound {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            available,
        })
    }

    /// The file stem; the key for `find`, run directories and reports.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The spec file this came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One line a person understands.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The computation.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Operand type (A, B; the input of activation/softmax): `cs_problem.dtype_ab`.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Result type (C, D, bias): `cs_problem.dtype_cd`.
    pub fn out_dtype(&self) -> DType {
        self.out_dtype
    }

    /// Accumulation type: `cs_problem.dtype_acc`.
    pub fn acc_dtype(&self) -> DType {
        self.acc_dtype
    }

    /// Whether an f32 GEMM may round its operands to tf32 (and its baselines with it).
    pub fn allow_tf32(&self) -> bool {
        self.allow_tf32
    }

    /// Operand storage orders; all row-major outside the GEMM families.
    pub fn layouts(&self) -> Layouts {
        self.layouts
    }

    /// Every shape, headline first; never empty.
    pub fn shapes(&self) -> &[Shape] {
        &self.shapes
    }

    /// The shape that goals and the summary refer to.
    pub fn headline(&self) -> &Shape {
        // `shapes` is never empty: validation rejects a spec without shapes.
        &self.shapes[0]
    }

    /// Op parameters for `cs_problem`.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// When results are accepted.
    pub fn tolerance(&self) -> &Tolerance {
        &self.tolerance
    }

    /// Baselines and goals.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Which peak FLOP/s bounds this workload's arithmetic.
    pub fn compute_pipe(&self) -> ComputePipe {
        if !self.family.is_gemm() {
            return ComputePipe::SimtF32;
        }
        match self.dtype {
            DType::F16 => ComputePipe::TensorF16,
            DType::BF16 => ComputePipe::TensorBf16,
            DType::F32 if self.allow_tf32 => ComputePipe::TensorTf32,
            DType::F32 | DType::F64 => ComputePipe::SimtF32,
        }
    }

    /// Floating-point operations of one run on `shape`.
    /// GEMM: `2 m n k batch`, plus 2 per output when beta != 0 (scale C, add); alpha is
    /// folded into the accumulator store and not counted. gemm_bias_act adds 1 per
    /// output for the bias and [`Activation::flops_per_element`] for the activation.
    /// Activation: `m n` times the per-element count. Softmax: 5 per element (max,
    /// subtract, exp, sum, scale by 1/sum).
    pub fn flops(&self, shape: &Shape) -> f64 {
        let out = shape.output_elements() as f64;
        match self.family {
            Family::Gemm | Family::GemmBiasAct => {
                let mut flops = 2.0 * shape.m as f64 * shape.n as f64 * shape.k as f64;
                flops *= shape.batch as f64;
                if self.params.beta != 0.0 {
                    flops += 2.0 * out;
                }
                if self.family == Family::GemmBiasAct {
                    if self.params.bias {
                        flops += out;
                    }
                    flops += out * self.params.activation.flops_per_element();
                }
                flops
            }
            Family::Activation => out * self.params.activation.flops_per_element(),
            Family::Softmax => 5.0 * out,
        }
    }

    /// The fewest bytes any kernel must move on `shape`: each input read once, each
    /// output written once. GEMM: A (`m k batch`) and B (`k n batch`) in `dtype`, D in
    /// `out_dtype`, C in `out_dtype` only when beta != 0, the bias (`n`, shared by the
    /// batch) in `out_dtype` when present. Activation and softmax: `m n` in, `m n` out.
    pub fn min_bytes(&self, shape: &Shape) -> f64 {
        let (m, n, k, b) = (
            shape.m as f64,
            shape.n as f64,
            shape.k as f64,
            shape.batch as f64,
        );
        let inb = self.dtype.bytes() as f64;
        let outb = self.out_dtype.bytes() as f64;
        match self.family {
            Family::Gemm | Family::GemmBiasAct => {
                let mut bytes = (m * k + k * n) * b * inb + m * n * b * outb;
                if self.params.beta != 0.0 {
                    bytes += m * n * b * outb;
                }
                if self.family == Family::GemmBiasAct && self.params.bias {
                    bytes += n * outb;
                }
                bytes
            }
            Family::Activation | Family::Softmax => m * n * b * (inb + outb),
        }
    }

    /// FLOPs per byte on `shape`.
    pub fn arithmetic_intensity(&self, shape: &Shape) -> f64 {
        let bytes = self.min_bytes(shape);
        if bytes > 0.0 {
            self.flops(shape) / bytes
        } else {
            0.0
        }
    }

    /// The least time any kernel can take on `shape` on a device moving
    /// `bytes_per_s` and computing `flops_per_s` (pick the latter by
    /// [`Workload::compute_pipe`]): the larger of the two times.
    pub fn roofline_floor_s(&self, shape: &Shape, bytes_per_s: f64, flops_per_s: f64) -> f64 {
        let mem = self.min_bytes(shape) / bytes_per_s;
        let math = self.flops(shape) / flops_per_s;
        mem.max(math)
    }

    /// Memory- or compute-bound on `shape`, against a ridge point in FLOPs per byte
    /// (peak FLOP/s / peak bytes/s).
    pub fn roofline_class(&self, shape: &Shape, ridge_flops_per_byte: f64) -> RooflineClass {
        if self.arithmetic_intensity(shape) >= ridge_flops_per_byte {
            RooflineClass::ComputeBound
        } else {
            RooflineClass::MemoryBound
        }
    }

    /// The type column of the listing: `bf16`, `bf16->f32`, `f32 tf32`, plus the BLAS
    /// layout (`TN`) or the activation.
    fn kind_label(&self) -> String {
        let mut s = self.dtype.name().to_string();
        if self.out_dtype != self.dtype {
            s.push_str("->");
            s.push_str(self.out_dtype.name());
        }
        if self.allow_tf32 {
            s.push_str(" tf32");
        }
        match self.family {
            Family::Gemm => format!("{s} {}", self.layouts.blas_name()),
            Family::GemmBiasAct => format!(
                "{s} {} {}{}",
                self.layouts.blas_name(),
                if self.params.bias { "bias+" } else { "" },
                self.params.activation
            ),
            Family::Activation => format!("{s} {}", self.params.activation),
            Family::Softmax => s,
        }
    }

    /// The column titles matching [`Workload::summary_line`].
    pub fn summary_header() -> String {
        format!(
            "{:<28} {:<13} {:<22} {:<20} {:>6} {:>12} {:>10}",
            "NAME", "FAMILY", "TYPE", "HEADLINE", "SHAPES", "FLOP", "MIN BYTES"
        )
    }

    /// One line for `cutesmith workloads`: name, family, types, headline shape, number
    /// of shapes, FLOPs and minimum bytes of the headline.
    pub fn summary_line(&self) -> String {
        let h = self.headline();
        format!(
            "{:<28} {:<13} {:<22} {:<20} {:>6} {:>12} {:>10}",
            self.name,
            self.family,
            self.kind_label(),
            h.to_string(),
            self.shapes.len(),
            si(self.flops(h), "FLOP"),
            si(self.min_bytes(h), "B"),
        )
    }
}

/// A number with an SI prefix and unit, four significant digits: `137.4 GFLOP`.
fn si(x: f64, unit: &str) -> String {
    const PREFIXES: [(f64, &str); 5] =
        [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, p) in PREFIXES {
        if x >= scale {
            let v = x / scale;
            let digits = if v >= 100.0 {
                1
            } else if v >= 10.0 {
                2
            } else {
                3
            };
            return format!("{v:.digits$} {p}{unit}");
        }
    }
    format!("{x} {unit}")
}

/// The `*.toml` files directly in `dir`, sorted.
fn spec_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let io = |source| WorkloadError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

// ---------------------------------------------------------------------------------
// Semantic validation.

/// Turns a [`WorkloadSpec`] into a [`Workload`], naming the file in every error.
struct Validator<'a> {
    path: &'a Path,
    /// The spec text, when known, to give errors a line number.
    text: Option<&'a str>,
}

impl Validator<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> WorkloadError {
        let field = field.into();
        WorkloadError::Invalid {
            path: self.path.to_path_buf(),
            line: self.text.and_then(|t| line_of(t, &field)),
            field,
            message: message.into(),
        }
    }

    fn run(&self, spec: WorkloadSpec) -> Result<Workload> {
        let name = self.name(spec.name.as_deref())?;
        let family = spec.family;

        let description = spec.description.trim().to_string();
        if description.is_empty() || description.contains('\n') {
            return Err(self.err(
                "description",
                "must be one non-empty line saying what the workload is",
            ));
        }

        let (out_dtype, acc_dtype) = self.dtypes(&spec)?;

        let layouts = match (family.is_gemm(), spec.layout) {
            (true, l) => {
                let l = l.unwrap_or_default();
                let d = Layouts::default();
                Layouts {
                    a: l.a.unwrap_or(d.a),
                    b: l.b.unwrap_or(d.b),
                    c: l.c.unwrap_or(d.c),
                }
            }
            (false, None) => Layouts {
                a: Layout::Row,
                b: Layout::Row,
                c: Layout::Row,
            },
            (false, Some(_)) => {
                return Err(self.err(
                    "layout",
                    format!(
                        "only for families gemm and gemm_bias_act, not {family}; remove [layout]"
                    ),
                ))
            }
        };

        let shapes = self.shapes(family, &spec.shapes)?;
        let params = self.params(family, &spec.params)?;
        let tolerance = self.tolerance(family, out_dtype, spec.allow_tf32, spec.tolerance)?;
        let target = self.target(family, spec.target)?;

        Ok(Workload {
            name,
            path: self.path.to_path_buf(),
            description,
            family,
            dtype: spec.dtype,
            out_dtype,
            acc_dtype,
            allow_tf32: spec.allow_tf32,
            layouts,
            shapes,
            params,
            tolerance,
            target,
        })
    }

    /// The file stem, checked against the optional `name` field.
    fn name(&self, declared: Option<&str>) -> Result<String> {
        let stem = self
            .path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let ok = !stem.is_empty()
            && stem
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if !ok {
            return Err(self.err(
                "name",
                format!(
                    "the file stem \"{stem}\" is not a workload name; allowed: lowercase \
                     letters, digits, '_' and '-'"
                ),
            ));
        }
        match declared {
            Some(n) if n != stem => Err(self.err(
                "name",
                format!(
                    "\"{n}\" does not match the file name; it must equal the file stem \
                     \"{stem}\" (or be left out)"
                ),
            )),
            _ => Ok(stem.to_string()),
        }
    }

    fn dtypes(&self, spec: &WorkloadSpec) -> Result<(DType, DType)> {
        let family = spec.family;
        if spec.allow_tf32 && !(family.is_gemm() && spec.dtype == DType::F32) {
            return Err(self.err(
                "allow_tf32",
                format!(
                    "tf32 only applies to f32 operands of a GEMM family (this is {family} \
                     on {}); remove it",
                    spec.dtype
                ),
            ));
        }
        let out_dtype = spec.out_dtype.unwrap_or(spec.dtype);
        let acc_dtype = spec.acc_dtype.unwrap_or(DType::F32);
        let f16_acc_ok = family.is_gemm() && spec.dtype == DType::F16;
        if acc_dtype != DType::F32 && !(acc_dtype == DType::F16 && f16_acc_ok) {
            return Err(self.err(
                "acc_dtype",
                format!(
                    "{acc_dtype} accumulation is not supported here; allowed: f32{}",
                    if f16_acc_ok { ", f16" } else { "" }
                ),
            ));
        }
        Ok((out_dtype, acc_dtype))
    }

    fn shapes(&self, family: Family, specs: &[ShapeSpec]) -> Result<Vec<Shape>> {
        if specs.is_empty() {
            return Err(self.err(
                "shapes",
                "at least one [[shapes]] entry is required (the first is the headline)",
            ));
        }
        let mut shapes: Vec<Shape> = Vec::with_capacity(specs.len());
        for (i, s) in specs.iter().enumerate() {
            let shape = self.shape(family, i, s)?;
            if let Some(j) = shapes.iter().position(|t| *t == shape) {
                return Err(self.err(
                    format!("shapes[{i}]"),
                    format!("repeats shapes[{j}] ({shape}); remove one"),
                ));
            }
            shapes.push(shape);
        }
        Ok(shapes)
    }

    fn shape(&self, family: Family, i: usize, s: &ShapeSpec) -> Result<Shape> {
        let field = |d: &str| format!("shapes[{i}].{d}");
        let dim = |d: &str, v: Option<i64>, default: Option<u64>| -> Result<u64> {
            match (v, default) {
                (Some(v), _) if v > 0 => Ok(v.unsigned_abs()),
                (Some(v), _) => Err(self.err(field(d), format!("must be positive, got {v}"))),
                (None, Some(d)) => Ok(d),
                (None, None) => Err(self.err(
                    field(d),
                    format!("missing; {family} shapes need {}", needs(family)),
                )),
            }
        };
        let forbid = |d: &str, v: Option<i64>| -> Result<()> {
            match v {
                Some(_) => Err(self.err(
                    field(d),
                    format!("not used by {family}; allowed: {}", needs(family)),
                )),
                None => Ok(()),
            }
        };
        let shape = match family {
            Family::Gemm | Family::GemmBiasAct => Shape {
                m: dim("m", s.m, None)?,
                n: dim("n", s.n, None)?,
                k: dim("k", s.k, None)?,
                batch: dim("batch", s.batch, Some(1))?,
            },
            Family::Activation => {
                forbid("k", s.k)?;
                forbid("batch", s.batch)?;
                Shape::rows(dim("m", s.m, Some(1))?, dim("n", s.n, None)?)
            }
            Family::Softmax => {
                forbid("k", s.k)?;
                forbid("batch", s.batch)?;
                Shape::rows(dim("m", s.m, None)?, dim("n", s.n, None)?)
            }
        };
        // Every operand's element count must fit the ABI's int64 sizes and strides.
        let fits = |a: u64, b: u64| {
            a.checked_mul(b)
                .and_then(|x| x.checked_mul(shape.batch))
                .is_some_and(|x| x <= i64::MAX as u64 / 8)
        };
        let k = shape.k.max(1);
        if !(fits(shape.m, shape.n) && fits(shape.m, k) && fits(k, shape.n)) {
            return Err(self.err(
                format!("shapes[{i}]"),
                format!("{shape} is too large: an operand's byte size must fit in int64"),
            ));
        }
        Ok(shape)
    }

    fn params(&self, family: Family, p: &ParamsSpec) -> Result<Params> {
        let only = |field: &str, allowed: &str| {
            self.err(
                format!("params.{field}"),
                format!("not used by {family}; only for {allowed}"),
            )
        };
        let finite = |field: &str, v: Option<f32>| -> Result<()> {
            match v {
                Some(x) if !x.is_finite() => Err(self.err(
                    format!("params.{field}"),
                    format!("must be a finite number, got {x}"),
                )),
                _ => Ok(()),
            }
        };
        finite("alpha", p.alpha)?;
        finite("beta", p.beta)?;
        finite("leaky_slope", p.leaky_slope)?;

        if !family.is_gemm() {
            if p.alpha.is_some() {
                return Err(only("alpha", "gemm and gemm_bias_act"));
            }
            if p.beta.is_some() {
                return Err(only("beta", "gemm and gemm_bias_act"));
            }
        }
        if p.bias.is_some() && family != Family::GemmBiasAct {
            return Err(only("bias", "gemm_bias_act"));
        }
        let activation = match (family, p.activation) {
            (Family::Gemm, Some(_)) => {
                return Err(self.err(
                    "params.activation",
                    "family gemm has no activation; use family = \"gemm_bias_act\" for a \
                     fused epilogue",
                ))
            }
            (Family::Softmax, Some(_)) => {
                return Err(only("activation", "activation and gemm_bias_act"))
            }
            (Family::Gemm | Family::Softmax, None) => Activation::Identity,
            (Family::GemmBiasAct | Family::Activation, Some(a)) => a,
            (Family::GemmBiasAct | Family::Activation, None) => {
                return Err(self.err(
                    "params.activation",
                    format!(
                        "missing; {family} needs one; allowed: identity, relu, leaky_relu, \
                         gelu_erf, gelu_tanh, silu, sigmoid, tanh"
                    ),
                ))
            }
        };
        let act_alpha = match (activation, p.leaky_slope) {
            (Activation::LeakyRelu, s) => s.unwrap_or(0.01),
            (a, Some(_)) => {
                return Err(self.err(
                    "params.leaky_slope",
                    format!("only with activation = \"leaky_relu\", not \"{a}\""),
                ))
            }
            (_, None) => 0.0,
        };
        Ok(Params {
            activation,
            act_alpha,
            alpha: p.alpha.unwrap_or(1.0),
            beta: p.beta.unwrap_or(0.0),
            bias: family == Family::GemmBiasAct && p.bias.unwrap_or(true),
        })
    }

    fn tolerance(
        &self,
        family: Family,
        out_dtype: DType,
        tf32: bool,
        spec: Option<ToleranceSpec>,
    ) -> Result<Tolerance> {
        let mut t = Tolerance::default_for(family, out_dtype, tf32);
        let Some(spec) = spec else { return Ok(t) };
        for (field, v) in [("rtol", spec.rtol), ("atol", spec.atol)] {
            if let Some(x) = v {
                if !(x.is_finite() && x >= 0.0) {
                    return Err(self.err(
                        format!("tolerance.{field}"),
                        format!("must be a finite number >= 0, got {x}"),
                    ));
                }
            }
        }
        t.rtol = spec.rtol.unwrap_or(t.rtol);
        t.atol = spec.atol.unwrap_or(t.atol);
        t.atol_scale = spec.atol_scale.unwrap_or(t.atol_scale);
        if t.rtol == 0.0 && t.atol == 0.0 {
            return Err(self.err(
                "tolerance",
                "rtol and atol are both 0; floating-point results need some slack",
            ));
        }
        Ok(t)
    }

    fn target(&self, family: Family, spec: Option<TargetSpec>) -> Result<Target> {
        let spec = spec.unwrap_or_default();
        let baselines = spec.baselines.unwrap_or_else(|| family.default_baselines());
        if baselines.is_empty() {
            return Err(self.err(
                "target.baselines",
                "empty; name at least one, or leave it out for the family's default",
            ));
        }
        let mut seen = BTreeSet::new();
        for b in &baselines {
            if !seen.insert(*b) {
                return Err(self.err("target.baselines", format!("\"{b}\" is listed twice")));
            }
            if !b.supports(family) {
                let ok: Vec<_> = [
                    Baseline::Cublas,
                    Baseline::Cublaslt,
                    Baseline::Cudnn,
                    Baseline::Torch,
                    Baseline::Copy,
                ]
                .into_iter()
                .filter(|x| x.supports(family))
                .map(Baseline::name)
                .collect();
                return Err(self.err(
                    "target.baselines",
                    format!(
                        "\"{b}\" cannot run {family}; allowed for {family}: {}",
                        ok.join(", ")
                    ),
                ));
            }
        }
        let speedup_vs = spec.speedup_vs.unwrap_or(baselines[0]);
        if !baselines.contains(&speedup_vs) {
            return Err(self.err(
                "target.speedup_vs",
                format!(
                    "\"{speedup_vs}\" is not among the baselines timed; allowed: {}",
                    baselines
                        .iter()
                        .map(|b| b.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let min_speedup = spec.min_speedup.unwrap_or(1.0);
        if !(min_speedup.is_finite() && min_speedup > 0.0) {
            return Err(self.err(
                "target.min_speedup",
                format!("must be a number > 0, got {min_speedup}"),
            ));
        }
        if let Some(f) = spec.min_roofline_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(self.err(
                    "target.min_roofline_fraction",
                    format!("must be in (0, 1], got {f}"),
                ));
            }
        }
        Ok(Target {
            baselines,
            speedup_vs,
            min_speedup,
            min_roofline_fraction: spec.min_roofline_fraction,
        })
    }
}

/// The dimensions a family's shapes take, for error messages.
fn needs(family: Family) -> &'static str {
    match family {
        Family::Gemm | Family::GemmBiasAct => "m, n, k (and optional batch)",
        Family::Activation => "n (and optional m rows)",
        Family::Softmax => "m (rows) and n (columns)",
    }
}

// ---------------------------------------------------------------------------------
// toml errors -> `field "x": ...; allowed: ...`.

/// Rewrites a toml/serde error into `field "<toml path>": <what>; allowed: <values>`,
/// finding the field from the error's span (the table header above it and the key on
/// its line) and the line number from the span.
fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> WorkloadError {
    // A missing root field comes with the empty span 0..0: no position, no table.
    let loc = e
        .span()
        .filter(|s| s.end > 0)
        .map(|s| locate(text, s.start));
    let line = loc.as_ref().map(|l| l.line);
    let msg = e.message().trim();

    let backticked = |s: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = s;
        while let Some(a) = rest.find('`') {
            let after = &rest[a + 1..];
            let Some(b) = after.find('`') else { break };
            out.push(after[..b].to_string());
            rest = &after[b + 1..];
        }
        out
    };
    let field_at = |leaf: Option<&str>| -> Option<String> {
        let loc = loc.as_ref()?;
        let mut f = match &loc.key {
            Some(k) => join_path(&loc.table, k),
            None => loc.table.clone(),
        };
        if let Some(leaf) = leaf {
            if f.rsplit('.').next() != Some(leaf) {
                f = join_path(&f, leaf);
            }
        }
        (!f.is_empty()).then_some(f)
    };

    let message = if let Some(rest) = msg.strip_prefix("unknown variant ") {
        let names = backticked(rest);
        let value = names.first().cloned().unwrap_or_default();
        let allowed = names.get(1..).unwrap_or_default().join(", ");
        let field = field_at(None).unwrap_or_else(|| "?".into());
        format!("field \"{field}\": unknown value \"{value}\"; allowed: {allowed}")
    } else if let Some(rest) = msg.strip_prefix("unknown field ") {
        let names = backticked(rest);
        let key = names.first().cloned().unwrap_or_default();
        let allowed = names.get(1..).unwrap_or_default().join(", ");
        let field = field_at(Some(&key)).unwrap_or(key);
        format!("field \"{field}\": unknown field; allowed: {allowed}")
    } else if let Some(rest) = msg.strip_prefix("missing field ") {
        let key = backticked(rest).first().cloned().unwrap_or_default();
        let table = loc.as_ref().map(|l| l.table.clone()).unwrap_or_default();
        let field = join_path(&table, &key);
        let allowed = match field.as_str() {
            "family" => Some(Family::ALL.map(Family::name).join(", ")),
            "dtype" => Some(DType::SPEC.map(DType::name).join(", ")),
            _ => None,
        };
        match allowed {
            Some(a) => format!("field \"{field}\": missing (required); allowed: {a}"),
            None => format!("field \"{field}\": missing (required)"),
        }
    } else if msg.starts_with("invalid type")
        || msg.starts_with("invalid value")
        || msg.starts_with("invalid length")
    {
        let plain = msg
            .replace("expected i64", "expected an integer")
            .replace("expected f32", "expected a number")
            .replace("expected f64", "expected a number")
            .replace("expected a sequence", "expected an array");
        match field_at(None) {
            Some(f) => format!("field \"{f}\": {plain}"),
            None => plain,
        }
    } else if msg == "duplicate key" {
        match field_at(None) {
            Some(f) => format!("field \"{f}\": set twice"),
            None => msg.to_string(),
        }
    } else {
        format!("invalid TOML: {msg}")
    };
    WorkloadError::Parse {
        path: path.to_path_buf(),
        line,
        message,
    }
}

/// Where an offset falls in a spec: its line, the TOML path of the table around it
/// (`layout`, `shapes[1]`) and the key being set there.
struct Location {
    line: usize,
    table: String,
    key: Option<String>,
}

fn join_path(table: &str, key: &str) -> String {
    match (table.is_empty(), key.is_empty()) {
        (true, _) => key.to_string(),
        (false, true) => table.to_string(),
        (false, false) => format!("{table}.{key}"),
    }
}

/// One line of a spec as [`scan`] sees it.
struct ScannedLine<'a> {
    text: &'a str,
    start: usize,
    table: String,
    /// The key set on this line, or the last one above it in the same table (for the
    /// continuation lines of a multi-line array).
    key: Option<String>,
    /// Whether this line is a table header or sets a key itself.
    defines: bool,
}

/// A line-based look at a spec: good enough for spec files (tables, arrays of tables,
/// `key = value`, dotted keys, one-line inline tables, multi-line arrays); the exact
/// grammar is toml's business.
fn scan(text: &str) -> Vec<ScannedLine<'_>> {
    let mut out = Vec::new();
    let mut table = String::new();
    let mut array_counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut key: Option<String> = None;
    let mut start = 0usize;
    for line in text.split_inclusive('\n') {
        let code = strip_comment(line).trim();
        let mut defines = true;
        if let Some(h) = code.strip_prefix("[[").and_then(|h| h.strip_suffix("]]")) {
            let h = unquote(h.trim());
            let n = array_counts.entry(h.clone()).or_insert(0);
            table = format!("{h}[{n}]");
            *n += 1;
            key = None;
        } else if let Some(h) = code.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            table = unquote(h.trim());
            key = None;
        } else if let Some(eq) = code.find('=') {
            key = Some(unquote(code[..eq].trim()));
        } else {
            defines = false;
        }
        out.push(ScannedLine {
            text: line,
            start,
            table: table.clone(),
            key: key.clone(),
            defines,
        });
        start += line.len();
    }
    out
}

/// The line, table and key at byte `offset` of `text`.
fn locate(text: &str, offset: usize) -> Location {
    let lines = scan(text);
    let Some(i) = lines
        .iter()
        .position(|l| offset < l.start + l.text.len())
        .or(lines.len().checked_sub(1))
    else {
        return Location {
            line: 1,
            table: String::new(),
            key: None,
        };
    };
    let l = &lines[i];
    let mut key = l.key.clone();
    // An inline array of tables on one line: `shapes = [{...}, {...}]`.
    if let (Some(k), Some(eq)) = (key.as_mut(), l.text.find('=')) {
        let col = offset.saturating_sub(l.start).min(l.text.len());
        if col > eq && l.text[eq..].trim_start_matches(['=', ' ']).starts_with('[') {
            let opened = l.text[eq..col].matches('{').count();
            if opened > 0 {
                *k = format!("{k}[{}]", opened - 1);
            }
        }
    }
    Location {
        line: i + 1,
        table: l.table.clone(),
        key,
    }
}

/// The 1-based line that sets `field` (a TOML path such as `shapes[2].k`), or failing
/// that the line of its closest enclosing table (`shapes[2]` when k is missing).
fn line_of(text: &str, field: &str) -> Option<usize> {
    let lines = scan(text);
    let mut want = field;
    loop {
        let hit = lines.iter().position(|l| {
            l.defines
                && match &l.key {
                    Some(k) => join_path(&l.table, k) == want,
                    None => l.table == want,
                }
        });
        if let Some(i) = hit {
            return Some(i + 1);
        }
        // `shapes[2].k` -> `shapes[2]`; `shapes[2]` -> `shapes`; `layout.a` -> `layout`.
        want = match (want.rfind('.'), want.rfind('[')) {
            (Some(d), Some(b)) => &want[..d.max(b)],
            (Some(i), None) | (None, Some(i)) => &want[..i],
            (None, None) => return None,
        };
        if want.is_empty() {
            return None;
        }
    }
}

fn strip_comment(line: &str) -> &str {
    // Good enough for spec files: a '#' outside quotes starts a comment.
    let mut quote: Option<char> = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '#') => return &line[..i],
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    line
}

fn unquote(key: &str) -> String {
    key.split('.')
        .map(|part| part.trim().trim_matches(['"', '\'']))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads")
    }

    fn parse(name: &str, text: &str) -> Result<Workload> {
        Workload::parse(format!("workloads/{name}.toml"), text)
    }

    fn err(name: &str, text: &str) -> String {
        match parse(name, text) {
            Ok(w) => panic!("expected an error, got {w:?}"),
            Err(e) => e.to_string(),
        }
    }

    const GEMM: &str = r#"
description = "bf16 GEMM"
family = "gemm"
dtype = "bf16"
[[shapes]]
m = 4096
n = 4096
k = 4096
"#;

    #[test]
    fn every_shipped_spec_loads() {
        let all = Workload::load_dir(dir()).unwrap_or_else(|e| panic!("{e}"));
        assert!(all.len() >= 34, "only {} workloads", all.len());
        let names: Vec<_> = all.iter().map(|w| w.name().to_string()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        for w in &all {
            assert!(!w.shapes().is_empty());
            assert!(w.flops(w.headline()) >= 0.0);
            assert!(w.min_bytes(w.headline()) > 0.0);
            assert!(!w.summary_line().is_empty());
            assert!(w.summary_line().starts_with(w.name()));
        }
        for name in [
            "gemm_bf16_4096",
            "gemm_f16_4096",
            "gemm_f32_4096",
            "gemm_tf32_4096",
            "gemm_bias_relu_bf16",
            "gemm_bias_gelu_bf16",
            "act_relu_bf16",
            "act_tanh_f32",
            "softmax_bf16_4096x65536",
            "softmax_f32_4096x65536",
        ] {
            assert!(names.iter().any(|n| n == name), "missing {name}");
        }
    }

    #[test]
    fn headline_gemm_flops_and_bytes() {
        let w = Workload::find(dir(), "gemm_bf16_4096").unwrap_or_else(|e| panic!("{e}"));
        let h = *w.headline();
        assert_eq!(h, Shape::gemm(4096, 4096, 4096));
        assert_eq!(w.flops(&h), 137_438_953_472.0);
        assert!((w.flops(&h) / 1.374e11 - 1.0).abs() < 1e-3);
        assert_eq!(w.min_bytes(&h), 100_663_296.0);
        assert_eq!(w.layouts(), Layouts::default());
        assert_eq!(w.layouts().blas_name(), "TN");
        assert_eq!(w.compute_pipe(), ComputePipe::TensorBf16);
        assert_eq!(
            w.target().baselines,
            vec![Baseline::Cublas, Baseline::Cublaslt]
        );
        assert_eq!(w.target().speedup_vs, Baseline::Cublas);
        // 1e15 FLOP/s and 3.35e12 B/s: the math takes 137 us, the bytes 30 us.
        let floor = w.roofline_floor_s(&h, 3.35e12, 1e15);
        assert!((floor - 137_438_953_472.0 / 1e15).abs() < 1e-12);
        assert_eq!(
            w.roofline_class(&h, 1e15 / 3.35e12),
            RooflineClass::ComputeBound
        );
        let line = w.summary_line();
        assert!(line.contains("137.4 GFLOP"), "{line}");
        assert!(line.contains("100.7 MB"), "{line}");
        assert!(line.contains("4096x4096x4096"), "{line}");
    }

    #[test]
    fn gemm_epilogue_beta_bias_and_batch() {
        let w = parse(
            "g",
            r#"
description = "x"
family = "gemm_bias_act"
dtype = "f16"
out_dtype = "f32"
[[shapes]]
m = 2
n = 3
k = 5
batch = 7
[params]
activation = "gelu_tanh"
beta = 0.5
"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let s = *w.headline();
        let out = 2.0 * 3.0 * 7.0;
        // 2mnk*batch + beta (2/out) + bias (1/out) + gelu_tanh (9/out).
        assert_eq!(
            w.flops(&s),
            2.0 * 2.0 * 3.0 * 5.0 * 7.0 + out * (2.0 + 1.0 + 9.0)
        );
        // A, B in f16; C read and D written in f32; bias (n) in f32 once.
        let bytes = (2.0 * 5.0 + 5.0 * 3.0) * 7.0 * 2.0 + 2.0 * out * 4.0 + 3.0 * 4.0;
        assert_eq!(w.min_bytes(&s), bytes);
        assert_eq!(w.params().activation.abi_value(), 4);
        assert!(w.params().bias);
    }

    #[test]
    fn activation_and_softmax_arithmetic() {
        let w = Workload::find(dir(), "act_relu_bf16").unwrap_or_else(|e| panic!("{e}"));
        let h = *w.headline();
        assert_eq!(h, Shape::rows(1, 1 << 28));
        assert_eq!(w.flops(&h), (1u64 << 28) as f64);
        assert_eq!(w.min_bytes(&h), (1u64 << 28) as f64 * 4.0);
        assert_eq!(w.roofline_class(&h, 295.0), RooflineClass::MemoryBound);
        assert_eq!(w.target().baselines, vec![Baseline::Cudnn, Baseline::Copy]);
        let floor = w.roofline_floor_s(&h, 3.35e12, 6.7e13);
        assert!((floor - (1u64 << 30) as f64 / 3.35e12).abs() < 1e-12);

        let s = Workload::find(dir(), "softmax_f32_4096x65536").unwrap_or_else(|e| panic!("{e}"));
        let h = *s.headline();
        assert_eq!(h, Shape::rows(4096, 65536));
        assert_eq!(s.flops(&h), 5.0 * 4096.0 * 65536.0);
        assert_eq!(s.min_bytes(&h), 2.0 * 4.0 * 4096.0 * 65536.0);
        assert_eq!(s.tolerance().atol_at(&h), 1e-5 / 65536.0);

        let l = Workload::find(dir(), "act_leaky_relu_f32").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.params().activation, Activation::LeakyRelu);
        assert!(l.params().act_alpha > 0.0);
    }

    #[test]
    fn tolerance_defaults_and_scaling() {
        let w = parse("g", GEMM).unwrap_or_else(|e| panic!("{e}"));
        let t = w.tolerance();
        assert_eq!(
            (t.rtol, t.atol, t.atol_scale),
            (1.6e-2, 1e-2, AtolScale::SqrtK)
        );
        let s = Shape::gemm(1, 1, 4096);
        assert!((t.atol_at(&s) - 0.64).abs() < 1e-12);
        assert!(t.accepts(100.0, 100.5, &s));
        assert!(!t.accepts(100.0, 105.0, &s));
        assert!(!t.accepts(f64::NAN, 1.0, &s));
        assert!(t.accepts(f64::NAN, f64::NAN, &s));
        let tf = Workload::find(dir(), "gemm_tf32_4096").unwrap_or_else(|e| panic!("{e}"));
        let f = Workload::find(dir(), "gemm_f32_4096").unwrap_or_else(|e| panic!("{e}"));
        assert!(tf.allow_tf32() && !f.allow_tf32());
        assert!(tf.tolerance().rtol > 100.0 * f.tolerance().rtol);
        assert_eq!(tf.compute_pipe(), ComputePipe::TensorTf32);
        assert_eq!(f.compute_pipe(), ComputePipe::SimtF32);
    }

    #[test]
    fn abi_values_match_the_header() {
        let header = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("cutlass-templates/include/cutesmith_abi.h"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let has = |name: &str, v: i32| {
            assert!(
                header.contains(&format!("{name} = {v}")),
                "{name} = {v} not in the header"
            );
        };
        for (n, d) in [
            ("F32", DType::F32),
            ("F16", DType::F16),
            ("BF16", DType::BF16),
            ("F64", DType::F64),
        ] {
            has(&format!("CS_DTYPE_{n}"), d.abi_value());
        }
        for f in Family::ALL {
            has(
                &format!("CS_FAMILY_{}", f.name().to_uppercase()),
                f.abi_value(),
            );
        }
        has("CS_LAYOUT_ROW", Layout::Row.abi_value());
        has("CS_LAYOUT_COL", Layout::Col.abi_value());
        for a in [
            Activation::Identity,
            Activation::Relu,
            Activation::LeakyRelu,
            Activation::GeluErf,
            Activation::GeluTanh,
            Activation::Silu,
            Activation::Sigmoid,
            Activation::Tanh,
        ] {
            let n = a.name().to_uppercase();
            has(&format!("CS_ACT_{n}"), a.abi_value());
        }
        assert_eq!(DType::BF16.bytes(), 2);
        assert_eq!(DType::F32.bytes(), 4);
    }

    #[test]
    fn unknown_value_names_field_allowed_values_and_line() {
        let e = err("foo", &GEMM.replace("\"bf16\"", "\"bf17\""));
        assert_eq!(
            e,
            "workloads/foo.toml: field \"dtype\": unknown value \"bf17\"; allowed: f32, f16, bf16 (line 4)"
        );
        let e = err("foo", &format!("{GEMM}[layout]\nb = \"diag\"\n"));
        assert!(
            e.contains("field \"layout.b\": unknown value \"diag\"; allowed: row, col"),
            "{e}"
        );
        let e = err(
            "foo",
            &format!("{GEMM}[target]\nbaselines = [\n  \"cublas\",\n  \"cutlass\",\n]\n"),
        );
        assert!(
            e.contains("field \"target.baselines\": unknown value \"cutlass\""),
            "{e}"
        );
        assert!(
            e.contains("allowed: cublas, cublaslt, cudnn, torch, copy"),
            "{e}"
        );
        let e = err("foo", &GEMM.replace("\"gemm\"", "\"conv\""));
        assert!(
            e.contains("field \"family\"") && e.contains("gemm_bias_act"),
            "{e}"
        );
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let e = err("foo", &format!("flavour = 1\n{GEMM}"));
        assert!(
            e.contains("field \"flavour\": unknown field; allowed: name, description"),
            "{e}"
        );
        assert!(e.contains("(line 1)"), "{e}");
        let e = err("foo", &format!("{GEMM}[[shapes]]\nm = 1\nn = 1\nkk = 3\n"));
        assert!(
            e.contains("field \"shapes[1].kk\": unknown field; allowed: m, n, k, batch"),
            "{e}"
        );
        let e = err("foo", &format!("{GEMM}[params]\nslope = 0.1\n"));
        assert!(
            e.contains("field \"params.slope\"") && e.contains("leaky_slope"),
            "{e}"
        );
        let e = err("foo", "description = \"x\"\nfamily = \"gemm\"\ndtype = \"f32\"\nshapes = [{m = 1, n = 2, k = 3}, {m = 1, q = 2}]\n");
        assert!(e.contains("field \"shapes[1].q\""), "{e}");
    }

    #[test]
    fn type_missing_and_syntax_errors() {
        let e = err("foo", &GEMM.replace("k = 4096", "k = \"big\""));
        assert!(
            e.contains("field \"shapes[0].k\": invalid type") && e.contains("integer"),
            "{e}"
        );
        let e = err("foo", &GEMM.replace("family = \"gemm\"\n", ""));
        assert!(
            e.contains("field \"family\": missing (required); allowed: gemm, gemm_bias_act"),
            "{e}"
        );
        let e = err("foo", &format!("{GEMM}dtype = \"f16\"\n"));
        assert!(
            e.contains("workloads/foo.toml") && e.contains("line"),
            "{e}"
        );
        let e = err("foo", "description = \"x\ndtype = 1\n");
        assert!(e.starts_with("workloads/foo.toml: invalid TOML"), "{e}");
    }

    #[test]
    fn semantic_rules() {
        let cases: &[(&str, &str, &str)] = &[
            ("shapes = []", "\"shapes\"", "at least one"),
            ("k = 4096", "\"shapes[0].k\"", "missing"),
            ("k = -4", "\"shapes[0].k\"", "positive"),
            ("k = 0", "\"shapes[0].k\"", "positive"),
        ];
        for (edit, field, what) in cases {
            let text = if edit.starts_with("shapes") {
                "description = \"x\"\nfamily = \"gemm\"\ndtype = \"bf16\"\nshapes = []\n"
                    .to_string()
            } else if *edit == "k = 4096" {
                GEMM.replace("k = 4096\n", "")
            } else {
                GEMM.replace("k = 4096", edit)
            };
            let e = err("foo", &text);
            assert!(e.contains(field) && e.contains(what), "{edit}: {e}");
        }
        let e = err("foo", &format!("{GEMM}[params]\nactivation = \"relu\"\n"));
        assert!(
            e.contains("\"params.activation\"") && e.contains("gemm_bias_act"),
            "{e}"
        );
        let e = err(
            "foo",
            &GEMM.replace("dtype = \"bf16\"", "dtype = \"bf16\"\nallow_tf32 = true"),
        );
        assert!(e.contains("\"allow_tf32\"") && e.contains("f32"), "{e}");
        let e = err("foo", "description = \"x\"\nfamily = \"activation\"\ndtype = \"f32\"\n[[shapes]]\nn = 5\n[params]\nactivation = \"relu\"\nleaky_slope = 0.2\n");
        assert!(
            e.contains("\"params.leaky_slope\"") && e.contains("leaky_relu"),
            "{e}"
        );
        let e = err("foo", "description = \"x\"\nfamily = \"activation\"\ndtype = \"f32\"\n[[shapes]]\nn = 5\nk = 2\n[params]\nactivation = \"relu\"\n");
        assert!(
            e.contains("\"shapes[0].k\"") && e.contains("not used by activation"),
            "{e}"
        );
        let e = err("foo", "description = \"x\"\nfamily = \"softmax\"\ndtype = \"f32\"\n[layout]\na = \"row\"\n[[shapes]]\nm = 5\nn = 5\n");
        assert!(e.contains("\"layout\""), "{e}");
        let e = err("foo", &format!("{GEMM}[target]\nspeedup_vs = \"cudnn\"\n"));
        assert!(
            e.contains("\"target.speedup_vs\"") && e.contains("cublas, cublaslt"),
            "{e}"
        );
        let e = err("foo", &format!("{GEMM}[target]\nbaselines = [\"copy\"]\n"));
        assert!(
            e.contains("\"target.baselines\"")
                && e.contains("allowed for gemm: cublas, cublaslt, torch"),
            "{e}"
        );
        let e = err(
            "foo",
            &GEMM.replace("dtype = \"bf16\"", "dtype = \"bf16\"\nacc_dtype = \"bf16\""),
        );
        assert!(
            e.contains("\"acc_dtype\"") && e.contains("allowed: f32"),
            "{e}"
        );
        let e = err("foo", &GEMM.replace("k = 4096", "k = -4"));
        assert!(e.ends_with("(line 8)"), "{e}");
        let e = err("foo", &GEMM.replace("k = 4096\n", ""));
        assert!(e.ends_with("(line 5)"), "{e}");
        let e = err(
            "foo",
            &format!("{GEMM}[[shapes]]\nm = 4096\nn = 4096\nk = 4096\n"),
        );
        assert!(
            e.contains("\"shapes[1]\"") && e.contains("repeats shapes[0]"),
            "{e}"
        );
    }

    #[test]
    fn name_must_match_the_file_stem() {
        let e = err("foo", &format!("name = \"bar\"\n{GEMM}"));
        assert!(
            e.contains("workloads/foo.toml: field \"name\"") && e.contains("\"foo\""),
            "{e}"
        );
        assert!(parse("foo", &format!("name = \"foo\"\n{GEMM}")).is_ok());
        assert_eq!(
            parse("foo", GEMM)
                .map(|w| w.name().to_string())
                .ok()
                .as_deref(),
            Some("foo")
        );
    }

    #[test]
    fn find_lists_available_names() {
        match Workload::find(dir(), "gemm_bf16_9999") {
            Err(WorkloadError::NotFound { available, .. }) => {
                assert!(available.iter().any(|n| n == "gemm_bf16_4096"));
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
        let e = Workload::find(dir(), "nope")
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no workload named \"nope\"") && e.contains("gemm_bf16_4096"),
            "{e}"
        );
        let by_path = dir().join("gemm_bf16_4096.toml");
        let w = Workload::find(dir(), &by_path.to_string_lossy()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.name(), "gemm_bf16_4096");
    }

    #[test]
    fn shape_display() {
        assert_eq!(Shape::gemm(4096, 4095, 64).to_string(), "4096x4095x64");
        assert_eq!(
            Shape {
                m: 2,
                n: 3,
                k: 4,
                batch: 16
            }
            .to_string(),
            "16x(2x3x4)"
        );
        assert_eq!(Shape::rows(1, 33).to_string(), "33");
        assert_eq!(Shape::rows(1000, 1023).to_string(), "1000x1023");
        assert_eq!(si(1.0e9, "B"), "1.000 GB");
    }
}
