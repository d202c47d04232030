//! `cutesmith import`: a PyTorch problem file (KernelBench convention) becomes a workload
//! spec. `trace.py` (run by the Python of [`super::python`]) traces the module on the
//! meta device and prints its ATen graph as JSON ([`Graph`]); [`map_graph`] recognizes
//! one workload in it (a GEMM with the elementwise chain after it, an activation chain,
//! a row softmax or log-softmax, a GEMM then a softmax) and builds the [`WorkloadSpec`],
//! or lists every node it cannot map.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::process;
use crate::spec::chain::OpSpec;
use crate::spec::Layout;
use crate::spec::{
    Activation, DType, Family, LayoutSpec, ParamsSpec, ShapeSpec, SharedOperand, Workload,
    WorkloadSpec,
};

/// The tracer, shipped inside the binary and written to a temp file for each import.
pub const TRACER: &str = include_str!("trace.py");

mod composite;
mod contraction;
mod loss;
mod mask;
mod norm;
mod pack;
mod reduce;
mod scan;
pub mod stages;

/// The graph `trace.py` prints.
#[derive(Debug, Clone, Deserialize)]
pub struct Graph {
    /// `torch.__version__` of the Python that traced it.
    pub torch: String,
    /// Every node but the output, in graph order.
    pub nodes: Vec<Node>,
    /// The output node's values (`{"node": name}` for a tensor).
    pub output: Vec<Value>,
}

/// One node of the exported graph.
#[derive(Debug, Clone, Deserialize)]
pub struct Node {
    pub name: String,
    /// `placeholder` or `call_function`.
    pub op: String,
    /// The ATen op (`aten.mm.default`), or for a parameter/buffer its attribute path.
    pub target: Option<String>,
    /// Placeholders: `user_input`, `parameter`, `buffer`, `constant_tensor`, ...
    pub kind: Option<String>,
    #[serde(default)]
    pub args: Vec<Value>,
    #[serde(default)]
    pub kwargs: BTreeMap<String, Value>,
    /// The tensor it makes (shape, stride, dtype), on the meta device.
    pub val: Option<Meta>,
    /// A 0-d parameter, buffer or constant made from a Python number: its value (a number,
    /// or `{"float": "inf"}` and the like).
    #[serde(default)]
    pub value: Option<Value>,
    /// A buffer the module built as the `tril` / `triu` of a constant tensor (a registered
    /// causal mask): `["tril" | "triu", diagonal, the constant]`, as the tracer marked it
    /// (its values are not read: the module is built on the meta device).
    #[serde(default)]
    pub triangle: Option<Value>,
}

/// A tensor's shape, strides (in elements) and dtype.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Meta {
    pub shape: Vec<i64>,
    pub stride: Vec<i64>,
    pub dtype: String,
    /// Elements from the start of its storage (a split's later parts, a slice).
    #[serde(default)]
    pub offset: i64,
}

/// A node the importer cannot map, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmapped {
    /// The node's name in the traced graph (`conv2d`), or `output`.
    pub node: String,
    /// Its ATen op.
    pub target: String,
    pub message: String,
}

impl fmt::Display for Unmapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node `{}` ({}): {}",
            self.node, self.target, self.message
        )
    }
}

/// What an import made: one workload, or the stages the Model runs as when no one
/// workload computes it ([`stages`]); and what they came from.
#[derive(Debug, Clone)]
pub struct Imported {
    /// At least one; each with its spec and the ops it recognized, in order.
    pub stages: Vec<stages::Stage>,
    /// `torch.__version__` of the tracer.
    pub torch: String,
    /// Traced in training mode (`--train`), else in eval mode.
    pub train: bool,
}

const SUPPORTED: &str = "matmul, mm, bmm (any number of batch dims), linear, addmm, einsum of two \
    operands that is one (batched) matrix product, softmax, log_softmax over the last \
    dimension, the norms (layer_norm, rms_norm, instance_norm and group_norm with or \
    without their per-channel weight and bias (not running stats), batch_norm in training \
    mode (--train), and RMS, L2 and L1 normalization written out \
    with mean / sum / norm over adjacent dims, keepdim), the reductions of an input over \
    adjacent dims (sum, mean, amax, amin, max and min with a dim (their values, or their \
    indices), logsumexp, norm / linalg.vector_norm of order 2, argmax and argmin into int64, with \
    nothing after them), also of an elementwise chain over inputs shaped \
    like it (a loss: ((p - t) ** 2).mean()) and the losses mse_loss, l1_loss, smooth_l1_loss, \
    huber_loss and kl_div (of a log; mean or sum), cross_entropy of an input's rows of \
    logits against int64 class targets (or nll_loss of a log_softmax over the last dim; \
    reduction none, sum or mean, an ignore_index), the scans of an input along a dim (cumsum, cumprod; \
    reversed by a flip of the dim before and after; exclusive as a slice of zeros concatenated \
    before the scan of all but the last slice), and after them elementwise add, sub, mul, div (also a constant or an earlier \
    value divided by the running one), minimum, maximum (torch.min / torch.max of two \
    tensors too), clamp, neg, abs, exp, log, sqrt, rsqrt, x ** c (pow) and the activations relu, relu6, leaky_relu, gelu, \
    silu, sigmoid, tanh, selu, elu, hardsigmoid, hardswish, hardtanh, softplus, mish; copies \
    (clone, detach) and eval-mode dropout pass their input on; an op may restart from the \
    input or an earlier value (`0.5 * x * (1 + tanh(...x...))`)";

/// Runs the tracer on `problem` with `python` and maps the graph: the Model in eval mode,
/// or with `train` in training mode (a BatchNorm's batch statistics). A Model no one
/// workload computes is split into stages; `builtin` says whether a built-in template
/// computes a spec (the split prefers stages that have one).
pub fn import(
    problem: &Path,
    python: &Path,
    train: bool,
    builtin: &dyn Fn(&WorkloadSpec) -> bool,
) -> Result<Imported> {
    if !problem.is_file() {
        return Err(Error::Usage(format!(
            "{}: no such problem file (a .py with class Model, get_inputs() and \
             get_init_inputs())",
            problem.display()
        )));
    }
    let dir = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let script = dir.path().join("cutesmith_trace.py");
    std::fs::write(&script, TRACER).map_err(|e| Error::io(&script, e))?;
    let mut cmd = Command::new(python);
    cmd.arg(&script).arg(problem);
    if train {
        cmd.arg("--train");
    }
    cmd.env("PYTHONDONTWRITEBYTECODE", "1")
        // Tracing is on the meta device: no GPU is touched even where there is one.
        .env("CUDA_VISIBLE_DEVICES", "");
    let out =
        process::run(cmd, Duration::from_secs(600), 16 << 20).map_err(|e| Error::ToolMissing {
            what: format!("Python ({})", python.display()),
            hint: format!("{e}; set CUTESMITH_PYTHON to a Python 3 that has torch"),
        })?;
    let line = out.stdout.lines().rev().find(|l| l.starts_with('{'));
    let Some(line) = line else {
        return Err(Error::Usage(format!(
            "{}: the tracer ({}) printed no graph{}: {}",
            problem.display(),
            python.display(),
            if out.timed_out {
                " (timed out after 10 min)"
            } else {
                ""
            },
            tail(&out.combined(), 20)
        )));
    };
    let v: Value = serde_json::from_str(line).map_err(|e| Error::Format {
        context: format!("the tracer's output for {}", problem.display()),
        message: e.to_string(),
    })?;
    if let Some(err) = v.get("error") {
        let s = |k: &str| err.get(k).and_then(Value::as_str).unwrap_or_default();
        if s("stage") == "torch" {
            return Err(Error::ToolMissing {
                what: format!("torch (in {})", python.display()),
                hint: format!(
                    "`import torch` failed ({}); {}",
                    s("message"),
                    super::python::install_hint(python)
                ),
            });
        }
        let detail = s("detail").trim();
        return Err(Error::Usage(format!(
            "{}: {} ({} stage){}",
            problem.display(),
            s("message"),
            s("stage"),
            if detail.is_empty() {
                String::new()
            } else {
                format!("\n{detail}")
            }
        )));
    }
    let mut graph: Graph = serde_json::from_value(v).map_err(|e| Error::Format {
        context: format!("the tracer's graph for {}", problem.display()),
        message: e.to_string(),
    })?;
    composite::out_of_place(&mut graph);
    let composites_left = composite::expand(&mut graph);
    // The copies of strided views torch makes (`.contiguous()`, a reshape that copies):
    // stages of their own. Should the graph map no other way, the views that products and
    // other ops read (an attention's heads) are packed too, and mapped again below.
    let plain = graph.clone();
    pack::materialize(&mut graph, false);
    let file = problem
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The Model as one workload, else as stages.
    let attempt = |graph: &Graph| -> std::result::Result<Vec<stages::Stage>, (Vec<Unmapped>, stages::NoSplit)> {
        let whole = match map_graph(graph, &file) {
            Ok((spec, ops)) => {
                let output = graph
                    .output
                    .first()
                    .and_then(|v| v.get("node"))
                    .and_then(Value::as_str)
                    .unwrap_or("output")
                    .to_string();
                return Ok(vec![stages::Stage {
                    spec,
                    ops,
                    output,
                    reads: Vec::new(),
                }]);
            }
            Err(list) => list,
        };
        stages::split(graph, &file, builtin).map_err(|e| (whole, e))
    };
    let (mut whole, mut split) = match attempt(&graph) {
        Ok(st) => {
            return Ok(Imported {
                stages: st,
                torch: graph.torch,
                train,
            })
        }
        Err(e) => e,
    };
    let mut packed = plain;
    if pack::materialize(&mut packed, true) > 0 {
        match attempt(&packed) {
            Ok(st) => {
                return Ok(Imported {
                    stages: st,
                    torch: packed.torch,
                    train,
                });
            }
            // What stopped the attempt that mapped more stages is what to report.
            Err((w, s)) if s.mapped_before > split.mapped_before => {
                whole = w;
                split = s;
            }
            Err(_) => {}
        }
    }
    let list = whole;
    let staged = if split.problems.is_empty() {
        String::new()
    } else {
        let before = match split.mapped_before {
            0 => String::new(),
            k => format!(
                " the ops before `{}` map onto {k} stage{}, and",
                split.at,
                if k == 1 { "" } else { "s" }
            ),
        };
        format!(
            "\nsplit into workloads run one after another,{before} no stage starting at `{}` \
             maps:\n{}",
            split.at,
            split
                .problems
                .iter()
                .map(|u| format!("  {u}"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    };
    let staged = format!(
        "{staged}{}",
        composites_left
            .iter()
            .map(|(node, why)| format!(
                "\nnode `{node}`: a composite op (attention, a distance) is written out as \
                 the ops it is defined by, but not with {why}"
            ))
            .collect::<String>()
    );
    Err(Error::Usage(format!(
        "{}: cannot map {} node{} of Model onto a workload spec; nothing was written:\n{}{staged}\n\
         supported: {SUPPORTED}",
        problem.display(),
        list.len(),
        if list.len() == 1 { "" } else { "s" },
        list.iter()
            .map(|u| format!("  {u}"))
            .collect::<Vec<_>>()
            .join("\n")
    )))
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A workload name from a problem file's stem: lowercase, other characters as `_`.
pub fn workload_name(problem: &Path) -> String {
    let stem = problem
        .file_stem()
        .map(|s| s.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "imported".into()
    } else {
        name
    }
}

/// Stage `k`'s spec as the file `cutesmith import` writes: a header comment, then the
/// TOML; validated through the normal loader as `out` before anything is written. Returns
/// the text and the workload it loads as. `names` are the stages' workload names (for the
/// header of a stage that reads an earlier one's output).
pub fn render(
    imported: &Imported,
    k: usize,
    names: &[String],
    problem: &Path,
    out: &Path,
) -> Result<(String, Workload)> {
    let stage = imported.stages.get(k).ok_or_else(|| {
        Error::Usage(format!(
            "{}: stage {} of {}",
            problem.display(),
            k + 1,
            imported.stages.len()
        ))
    })?;
    let body = stage.spec.to_toml().map_err(|e| Error::Format {
        context: format!("the spec for {}", out.display()),
        message: e.to_string(),
    })?;
    let staged = if imported.stages.len() > 1 {
        let reads: Vec<String> = stage
            .reads
            .iter()
            .map(|(node, st)| {
                format!(
                    "input `{node}` is the output of stage {} ({})",
                    st + 1,
                    names.get(*st).map_or("?", String::as_str)
                )
            })
            .collect();
        format!(
            "# Stage {} of {}: no one workload computes the Model, so it runs as workloads \
             one after another.{}\n",
            k + 1,
            imported.stages.len(),
            if reads.is_empty() {
                String::new()
            } else {
                format!(" Its {}.", reads.join("; its "))
            }
        )
    } else {
        String::new()
    };
    let text = format!(
        "# Imported by `cutesmith import` from {} (torch {}, the Model in {} mode).\n{staged}# Ops: {}\n{body}",
        problem.display(),
        imported.torch,
        if imported.train { "training" } else { "eval" },
        stage.ops.join(" -> ")
    );
    let w = Workload::parse(out, &text)?;
    Ok((text, w))
}

// ---------------------------------------------------------------------------------
// Mapping the graph.

/// What a call_function node is to the importer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Gemm,
    Softmax {
        log: bool,
    },
    Elementwise,
    /// A view or copy that keeps values (transpose, reshape, expand, contiguous).
    View,
    Unknown,
}

fn op_name(target: &str) -> &str {
    // "aten.mm.default" -> "mm"; "aten.add.Tensor" -> "add"; torch.min(x, y) and
    // torch.max(x, y) of two tensors are the elementwise minimum and maximum.
    match target {
        "aten.min.other" => return "minimum",
        "aten.max.other" => return "maximum",
        _ => {}
    }
    let t = target.strip_prefix("aten.").unwrap_or(target);
    t.split('.').next().unwrap_or(t)
}

fn classify(target: &str) -> Class {
    match op_name(target) {
        "mm" | "matmul" | "bmm" | "linear" | "addmm" | "einsum" => Class::Gemm,
        "softmax" | "_softmax" => Class::Softmax { log: false },
        "log_softmax" | "_log_softmax" => Class::Softmax { log: true },
        "add" | "sub" | "rsub" | "mul" | "div" | "maximum" | "minimum" | "clamp" | "clamp_min"
        | "clamp_max" | "neg" | "abs" | "exp" | "log" | "sqrt" | "rsqrt" | "pow" | "relu"
        | "relu6" | "leaky_relu" | "gelu" | "silu" | "sigmoid" | "tanh" | "selu" | "elu"
        | "hardsigmoid" | "hardswish" | "hardtanh" | "softplus" | "mish" | "dropout" | "triu"
        | "tril" | "masked_fill" | "where" => Class::Elementwise,
        "t" | "numpy_T" | "transpose" | "permute" | "mT" | "view" | "reshape" | "_unsafe_view"
        | "flatten" | "unflatten" | "unsqueeze" | "squeeze" | "expand" | "expand_as"
        | "contiguous" | "clone" | "alias" | "detach" => Class::View,
        _ => Class::Unknown,
    }
}

fn unknown_message(target: &str) -> String {
    if target == pack::PACK {
        return "a copy of a strided view (an attention's heads, a transpose made \
                contiguous) runs as a workload of its own, not inside another"
            .into();
    }
    if !target.starts_with("aten.") {
        // A Python-level call left in the graph (getitem of a tuple-returning op, ...).
        return format!("no cutesmith workload family computes `{target}` (not an ATen op)");
    }
    let op = op_name(target);
    let what = match op {
        o if o.starts_with("conv") => " (a convolution)".to_string(),
        o if o.contains("pool") => " (pooling)".to_string(),
        o if o.contains("norm") => " (a normalization)".to_string(),
        "sum" | "mean" | "amax" | "amin" | "max" | "min" | "prod" | "var" | "std" | "logsumexp"
        | "argmax" | "argmin" | "any" | "all" => " (a reduction)".to_string(),
        "cumsum" | "cumprod" => " (a scan)".to_string(),
        _ => String::new(),
    };
    format!("no cutesmith workload family computes aten.{op}{what}")
}

/// The value `name` stands for: through copies and eval-mode dropouts (see
/// [`passes_values`]) back to the node that computed it.
fn through_copies<'s, 'g: 's>(nodes: &HashMap<&'g str, &'g Node>, mut name: &'s str) -> &'s str {
    while let Some(n) = nodes.get(name).copied().filter(|n| passes_values(nodes, n)) {
        match n.args.first().map(arg) {
            Some(Arg::Node(x)) => name = x,
            _ => break,
        }
    }
    name
}

/// A node that passes its first argument's values on unchanged: a copy (clone, detach,
/// contiguous, alias), an eval-mode dropout, a reduction over dimensions of size 1 only
/// (KernelBench's `torch.max(x, dim=1, keepdim=True)` of an (m, 1) tensor is x), or the
/// values (getitem 0) of such a max / min.
fn passes_values(nodes: &HashMap<&str, &Node>, n: &Node) -> bool {
    let t = n.target.as_deref().unwrap_or_default();
    match op_name(t) {
        "clone" | "contiguous" | "alias" | "detach" => true,
        // A cast that keeps every value (`x.float()` of bf16, a `.to(device)`).
        "to" | "_to_copy" | "type_as" => cast_dtypes(nodes, n).is_some_and(|(a, b)| widens(a, b)),
        // Eval mode, or p = 0 (the identity in training mode too).
        "dropout" => {
            !n.args.get(2).and_then(Value::as_bool).unwrap_or(false)
                || n.args.get(1).and_then(Value::as_f64) == Some(0.0)
        }
        "<built-in function getitem>" => {
            n.args.get(1).and_then(Value::as_i64) == Some(0)
                && matches!(n.args.first().map(arg), Some(Arg::Node(x))
                    if nodes.get(x).is_some_and(|m| identity_reduction(nodes, m)))
        }
        _ => identity_reduction(nodes, n),
    }
}

/// A cast between floating types (`x.to(dtype)`, `x.float()`, `x.type_as(y)`): its input's
/// type and its own.
fn cast_dtypes(nodes: &HashMap<&str, &Node>, n: &Node) -> Option<(DType, DType)> {
    if !matches!(
        op_name(n.target.as_deref().unwrap_or_default()),
        "to" | "_to_copy" | "type_as"
    ) {
        return None;
    }
    let Some(Arg::Node(x)) = n.args.first().map(arg) else {
        return None;
    };
    let from = dtype_of(&nodes.get(x)?.val.as_ref()?.dtype)?;
    let to = dtype_of(&n.val.as_ref()?.dtype)?;
    Some((from, to))
}

/// Whether type `to` holds every value of type `from`.
fn widens(from: DType, to: DType) -> bool {
    use DType::*;
    from == to
        || matches!(
            (from, to),
            (BF16 | F16 | E4M3 | E5M2, F32) | (E4M3 | E5M2, BF16 | F16)
        )
}

/// Whether `n` reduces only dimensions of size 1 (or a tensor of one element), where
/// sum, mean, max, min and logsumexp all return their input.
fn identity_reduction(nodes: &HashMap<&str, &Node>, n: &Node) -> bool {
    let t = n.target.as_deref().unwrap_or_default();
    if !matches!(
        op_name(t),
        "sum" | "mean" | "amax" | "amin" | "max" | "min" | "logsumexp"
    ) {
        return false;
    }
    let Some(Arg::Node(input)) = n.args.first().map(arg) else {
        return false;
    };
    let Some(shape) = nodes
        .get(input)
        .and_then(|m| m.val.as_ref())
        .map(|m| m.shape.clone())
    else {
        return false;
    };
    match norm::dims_arg(n, 1, "dim", shape.len()) {
        Some(dims) => dims.iter().all(|&d| shape[d] == 1),
        None => shape.iter().product::<i64>() == 1,
    }
}

/// The element type of a chain's tensor operand: a float type, or a bool mask.
fn operand_dtype_of(name: &str) -> Option<DType> {
    match name {
        "bool" => Some(DType::Bool),
        _ => dtype_of(name),
    }
}

fn dtype_of(name: &str) -> Option<DType> {
    match name {
        "float32" => Some(DType::F32),
        "float16" => Some(DType::F16),
        "bfloat16" => Some(DType::BF16),
        "float8_e4m3fn" => Some(DType::E4M3),
        "float8_e5m2" => Some(DType::E5M2),
        _ => None,
    }
}

struct Mapper<'g> {
    nodes: HashMap<&'g str, &'g Node>,
    /// Every node some other node (or the output) reads.
    used: HashSet<&'g str>,
    order: HashMap<&'g str, usize>,
    problems: Vec<Unmapped>,
    /// The elementwise family's output dims when its operands are classified against them
    /// (`operand = "broadcast"`, shapes given as dims); None otherwise.
    out_nd: Option<Vec<i64>>,
    /// Each broadcast operand's spanned dims (`over`), by its node's name.
    broadcast: HashMap<String, Vec<u32>>,
}

/// A value as the elementwise mapper sees an argument.
enum Arg<'g> {
    Node(&'g str),
    Num(f64),
    Other,
}

fn arg(v: &Value) -> Arg<'_> {
    if let Some(n) = v.get("node").and_then(Value::as_str) {
        return Arg::Node(n);
    }
    if let Some(x) = v.as_f64() {
        return Arg::Num(x);
    }
    if let Some(b) = v.as_bool() {
        return Arg::Num(if b { 1.0 } else { 0.0 });
    }
    if let Some(f) = v.get("float").and_then(Value::as_str) {
        return Arg::Num(match f {
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            _ => f64::NAN,
        });
    }
    Arg::Other
}

/// Positional argument `i`, else keyword `key`.
fn param<'g>(n: &'g Node, i: usize, key: &str) -> Option<&'g Value> {
    n.args
        .get(i)
        .or_else(|| n.kwargs.get(key))
        .filter(|v| !v.is_null())
}

fn num_param(n: &Node, i: usize, key: &str) -> Option<f64> {
    param(n, i, key).and_then(|v| match arg(v) {
        Arg::Num(x) => Some(x),
        _ => None,
    })
}

/// 2-D storage order of a `rows x cols` tensor with `strides`, packed (no padding).
fn layout_2d(rows: i64, cols: i64, s0: i64, s1: i64) -> Option<Layout> {
    let row = (s1 == 1 || cols == 1) && (s0 == cols || rows == 1);
    let col = (s0 == 1 || rows == 1) && (s1 == rows || cols == 1);
    if row {
        Some(Layout::Row)
    } else if col {
        Some(Layout::Col)
    } else {
        None
    }
}

/// Whether `m` is a packed row-major (C-contiguous) tensor.
fn contiguous(m: &Meta) -> bool {
    let mut expect = 1i64;
    for (d, s) in m.shape.iter().zip(&m.stride).rev() {
        if *d != 1 && *s != expect {
            return false;
        }
        expect *= d;
    }
    true
}

/// The GEMM the core node computes.
struct GemmDims {
    m: i64,
    n: i64,
    k: i64,
    batch: i64,
    a: Layout,
    b: Layout,
    shared_a: bool,
    shared_b: bool,
    dtype: DType,
    /// linear / addmm: the bias node (a vector of n).
    bias: Option<String>,
    alpha: Option<f64>,
}

impl<'g> Mapper<'g> {
    /// A part of a tuple-returning op that nothing reads (the indices of a max over a dim
    /// whose values are all that is used).
    fn unused_part(&self, n: &Node) -> bool {
        let unused = !self.used.contains(n.name.as_str());
        let in_place = |m: &Node| op_name(m.target.as_deref().unwrap_or_default()).ends_with('_');
        // A training-mode module's bookkeeping: an in-place op on one of its buffers that
        // nothing reads, where every reader of the buffer is such an op (BatchNorm's
        // `num_batches_tracked += 1`; a buffer read elsewhere would be read before it).
        let bookkeeping = || {
            let Some(Arg::Node(x)) = n.args.first().map(arg) else {
                return false;
            };
            let buffer = self
                .nodes
                .get(x)
                .is_some_and(|p| p.op == "placeholder" && p.kind.as_deref() == Some("buffer"));
            buffer
                && in_place(n)
                && self.nodes.values().all(|m| {
                    !m.args
                        .iter()
                        .chain(m.kwargs.values())
                        .any(|a| matches!(arg(a), Arg::Node(y) if y == x))
                        || (in_place(m) && !self.used.contains(m.name.as_str()))
                })
        };
        // `_assert_tensor_metadata`: the check torch.export writes beside a `.to(dtype)`.
        let assertion =
            op_name(n.target.as_deref().unwrap_or_default()) == "_assert_tensor_metadata";
        unused
            && (n.target.as_deref() == Some("<built-in function getitem>")
                || assertion
                || bookkeeping())
    }

    fn problem(&mut self, n: &Node, message: impl Into<String>) {
        self.problems.push(Unmapped {
            node: n.name.clone(),
            target: n.target.clone().unwrap_or_else(|| n.op.clone()),
            message: message.into(),
        });
    }

    /// An argument with a copied value replaced by the value it copies.
    fn resolve(&self, a: Option<Arg<'g>>) -> Option<Arg<'g>> {
        match a {
            Some(Arg::Node(x)) => Some(Arg::Node(through_copies(&self.nodes, x))),
            other => other,
        }
    }

    fn meta(&self, name: &str) -> Option<&'g Meta> {
        self.nodes.get(name).and_then(|n| n.val.as_ref())
    }

    /// The placeholder a value comes from through views only, or None.
    fn source(&self, name: &str) -> Option<&'g Node> {
        let mut cur = *self.nodes.get(name)?;
        loop {
            if cur.op == "placeholder" {
                return Some(cur);
            }
            if classify(cur.target.as_deref().unwrap_or_default()) != Class::View {
                return None;
            }
            let Some(Arg::Node(prev)) = cur.args.first().map(arg) else {
                return None;
            };
            cur = *self.nodes.get(prev)?;
        }
    }

    /// A GEMM operand's 2-D layout (or 3-D with a packed or zero batch stride).
    fn operand(&mut self, core: &Node, which: &str, name: &str) -> Option<(Meta, Layout, bool)> {
        let Some(m) = self.meta(name).cloned() else {
            self.problem(
                core,
                format!("operand {which} (`{name}`) has no tensor metadata"),
            );
            return None;
        };
        if self.source(name).is_none() {
            self.problem(
                core,
                format!(
                    "operand {which} (`{name}`) is computed, not an input or parameter (seen \
                     through transposes and reshapes): cutesmith fuses no prologue"
                ),
            );
            return None;
        }
        let r = m.shape.len();
        if !(2..=3).contains(&r) {
            self.problem(
                core,
                format!(
                    "operand {which} has {r} dimensions {:?}; a GEMM operand has 2 (or 3 with a batch)",
                    m.shape
                ),
            );
            return None;
        }
        let (rows, cols) = (m.shape[r - 2], m.shape[r - 1]);
        let (s0, s1) = (m.stride[r - 2], m.stride[r - 1]);
        let Some(l) = layout_2d(rows, cols, s0, s1) else {
            self.problem(
                core,
                format!(
                    "operand {which} ({rows} x {cols}, strides {:?}) is neither a packed \
                     row-major nor a packed column-major matrix",
                    m.stride
                ),
            );
            return None;
        };
        let mut shared = false;
        if r == 3 {
            let sb = m.stride[0];
            if sb == 0 && m.shape[0] > 1 {
                shared = true;
            } else if sb != rows * cols && m.shape[0] > 1 {
                self.problem(
                    core,
                    format!(
                        "operand {which}'s batch stride {sb} is neither {} (packed) nor 0 (shared)",
                        rows * cols
                    ),
                );
                return None;
            }
        }
        Some((m, l, shared))
    }

    fn gemm(&mut self, core: &'g Node) -> Option<GemmDims> {
        let op = op_name(core.target.as_deref().unwrap_or_default()).to_string();
        if op == "einsum" {
            return self.einsum(core);
        }
        let node_arg = |i: usize| match core.args.get(i).map(arg) {
            Some(Arg::Node(n)) => Some(n),
            _ => None,
        };
        let (ia, ib, bias) = match op.as_str() {
            "addmm" => (1, 2, node_arg(0).map(str::to_string)),
            "linear" => (0, 1, node_arg(2).map(str::to_string)),
            _ => (0, 1, None),
        };
        let (Some(an), Some(bn)) = (node_arg(ia), node_arg(ib)) else {
            self.problem(core, "its operands are not tensors of the graph");
            return None;
        };
        let mut alpha = None;
        if op == "addmm" {
            let beta = num_param(core, 3, "beta").unwrap_or(1.0);
            if beta != 1.0 {
                self.problem(
                    core,
                    format!("addmm with beta = {beta}: only beta = 1 maps"),
                );
                return None;
            }
            alpha = num_param(core, 4, "alpha").filter(|a| *a != 1.0);
        }
        let am = self.meta(an).cloned()?;
        let bm = self.meta(bn).cloned()?;
        let dtype = self.gemm_dtype(core, &am, &bm)?;
        if let Some(b) = &bias {
            match self.meta(b) {
                Some(v) if v.shape.len() == 1 || v.shape.iter().rev().skip(1).all(|d| *d == 1) => {}
                _ => {
                    self.problem(core, "the bias is not a vector of the output's columns");
                    return None;
                }
            }
        }
        // linear / ND matmul with a 2-D right operand: leading dimensions of A fold into m.
        let fold = (op == "linear" || op == "matmul") && am.shape.len() >= 3 && bm.shape.len() == 2;
        // (m, n, k, batch, A's and B's layouts, whether A and B are shared by the batch)
        let (m, n, k, batch, a, b, shared_a, shared_b) = if op == "linear" {
            if bm.shape.len() != 2 {
                self.problem(core, "linear with a weight that is not 2-D");
                return None;
            }
            let (n, k) = (bm.shape[0], bm.shape[1]);
            // B = W^T: W row-major (out, in) is B column-major.
            let wl = layout_2d(n, k, bm.stride[0], bm.stride[1]);
            let b = match wl {
                Some(Layout::Row) => Layout::Col,
                Some(Layout::Col) => Layout::Row,
                None => {
                    self.problem(
                        core,
                        format!("the weight's strides {:?} are not packed", bm.stride),
                    );
                    return None;
                }
            };
            self.source(bn).or_else(|| {
                self.problem(core, "the weight is computed, not a parameter or input");
                None
            })?;
            let (m, a) = self.lhs(core, an, &am, fold)?;
            (m, n, k, 1, a, b, false, false)
        } else if fold {
            let (m, a) = self.lhs(core, an, &am, true)?;
            let (_, b, _) = self.operand(core, "B", bn)?;
            (m, bm.shape[1], bm.shape[0], 1, a, b, false, false)
        } else {
            if (op == "matmul" || op == "bmm") && am.shape.len().max(bm.shape.len()) > 3 {
                return self.matmul_nd(core, (an, &am), (bn, &bm), dtype);
            }
            let (am, a, sa) = self.operand(core, "A", an)?;
            let (bm, b, sb) = self.operand(core, "B", bn)?;
            let (ra, rb) = (am.shape.len(), bm.shape.len());
            if (op == "mm" || op == "addmm") && (ra != 2 || rb != 2) {
                self.problem(core, "mm takes 2-D operands");
                return None;
            }
            let batch = match (ra, rb) {
                (2, 2) => 1,
                (3, 3) if am.shape[0] == bm.shape[0] => am.shape[0],
                (2, 3) => bm.shape[0],
                (3, 2) => am.shape[0],
                _ => {
                    self.problem(
                        core,
                        format!("batch sizes differ: {:?} and {:?}", am.shape, bm.shape),
                    );
                    return None;
                }
            };
            (
                am.shape[ra - 2],
                bm.shape[rb - 1],
                am.shape[ra - 1],
                batch,
                a,
                b,
                batch > 1 && (ra == 2 || sa),
                batch > 1 && (rb == 2 || sb),
            )
        };
        let mut dims = GemmDims {
            m,
            n,
            k,
            batch,
            a,
            b,
            shared_a,
            shared_b,
            dtype,
            bias,
            alpha,
        };
        if dims.shared_a && dims.shared_b {
            self.problem(
                core,
                "both operands are shared by the whole batch (one GEMM repeated)",
            );
            return None;
        }
        if dims.batch == 1 {
            dims.shared_a = false;
            dims.shared_b = false;
        }
        Some(dims)
    }

    /// The left operand of linear / a folded matmul: its rows (leading dimensions folded
    /// into m when it is C-contiguous) and its layout.
    fn lhs(&mut self, core: &Node, an: &str, am: &Meta, fold: bool) -> Option<(i64, Layout)> {
        if am.shape.len() == 2 && !fold {
            let (_, l, _) = self.operand(core, "A", an)?;
            return Some((am.shape[0], l));
        }
        if am.shape.len() < 2 {
            self.problem(
                core,
                format!("a {}-D input; a GEMM's A has 2 or more", am.shape.len()),
            );
            return None;
        }
        if !contiguous(am) {
            self.problem(
                core,
                format!("the input {:?} with strides {:?} is not contiguous, so its leading dimensions cannot fold into m", am.shape, am.stride),
            );
            return None;
        }
        self.source(an).or_else(|| {
            self.problem(core, "operand A is computed, not an input or parameter");
            None
        })?;
        let last = *am.shape.last().unwrap_or(&1);
        Some((am.shape.iter().product::<i64>() / last.max(1), Layout::Row))
    }
}

/// Maps a traced graph onto a workload spec; `file` names the problem file in the
/// description. On failure, every node that could not be mapped, with why.
pub fn map_graph(
    graph: &Graph,
    file: &str,
) -> std::result::Result<(WorkloadSpec, Vec<String>), Vec<Unmapped>> {
    // A copy of a strided view is a workload of its own, or with the elementwise ops after
    // it, one activation reading through the view.
    if let Some(r) = pack::map(graph, file) {
        return r;
    }
    if let Some(r) = pack::fused(graph, file, map_graph) {
        return Ok(r);
    }
    let mut used: HashSet<&str> = HashSet::new();
    let mut note = |x| {
        used.insert(x);
    };
    for n in &graph.nodes {
        n.args
            .iter()
            .chain(n.kwargs.values())
            .for_each(|v| stages::each_ref(v, &mut note));
    }
    graph
        .output
        .iter()
        .for_each(|v| stages::each_ref(v, &mut note));
    let mut mp = Mapper {
        used,
        nodes: graph.nodes.iter().map(|n| (n.name.as_str(), n)).collect(),
        order: graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect(),
        problems: Vec::new(),
        out_nd: None,
        broadcast: HashMap::new(),
    };
    let calls: Vec<&Node> = graph
        .nodes
        .iter()
        .filter(|n| n.op == "call_function")
        .collect();
    // Cross entropies (with the log-softmax of an nll_loss and the reshapes of their inputs).
    let before = mp.problems.len();
    let losses = mp.cross_entropies(&calls);
    // The loss nodes refused there, each with its reason: not unknown ops besides.
    let refused_losses: HashSet<String> = mp.problems[before..]
        .iter()
        .map(|p| p.node.clone())
        .collect();
    // Normalizations (an op, or written out with reductions): their nodes are known.
    let norms = mp.norms(&calls);
    let mut absorbed: HashSet<&str> = norms
        .iter()
        .flat_map(|m| m.absorbed.iter().map(String::as_str))
        .chain(
            losses
                .iter()
                .flat_map(|m| m.absorbed.iter().map(String::as_str)),
        )
        .collect();
    // Reductions over dims that no norm took (with a max's getitem nodes).
    let reductions = mp.reductions(&calls, &absorbed);
    absorbed.extend(
        reductions
            .iter()
            .flat_map(|m| m.absorbed.iter().map(String::as_str)),
    );
    // Scans (cumsum / cumprod, with the flips of a reverse one or the cat of an exclusive one).
    let scans = mp.scans(&calls, &absorbed);
    absorbed.extend(
        scans
            .iter()
            .flat_map(|m| m.absorbed.iter().map(String::as_str)),
    );
    // The triangular masks a masked_fill reads (built from constants in forward).
    absorbed.extend(mask::mask_nodes(&mp, &calls));
    // A cast at the output (`.type_as(q)` after an fp32 softmax, `.half()`): the workload
    // computes the value before it and writes the output's type (rounding once, at the
    // store). Casts elsewhere, this one's input too, pass on only where they keep every
    // value (`x.float()`); one that rounds is refused below.
    let mut output_dtype = None;
    let mut out_inner = None;
    let mut output_cast = false;
    if let [v] = graph.output.as_slice() {
        if let Arg::Node(o) = arg(v) {
            output_dtype = mp.meta(o).and_then(|m| dtype_of(&m.dtype));
            let mut inner = o;
            if let Some(n) = mp.nodes.get(o).copied() {
                if let (Some(_), Some(Arg::Node(x))) =
                    (cast_dtypes(&mp.nodes, n), n.args.first().map(arg))
                {
                    absorbed.insert(n.name.as_str());
                    output_cast = true;
                    inner = x;
                }
            }
            out_inner = Some(inner.to_string());
        }
    }
    // Every op of the graph must be one we know.
    for n in &calls {
        let t = n.target.as_deref().unwrap_or_default();
        if classify(t) == Class::Unknown
            && !absorbed.contains(n.name.as_str())
            && !refused_losses.contains(&n.name)
            && !passes_values(&mp.nodes, n)
            && !mp.unused_part(n)
            && !norm::eval_batch_norm(n)
        {
            let why = match cast_dtypes(&mp.nodes, n) {
                Some((from, to)) => format!(
                    "a cast from {from} to {to} before the output rounds there: a workload's \
                     ops keep fp32 between them and round once, at the store; cast at the \
                     output (which sets out_dtype) or to a type that holds every value"
                ),
                None if matches!(op_name(t), "to" | "_to_copy" | "type_as") => format!(
                    "aten.{}: a cast from or to a type no workload holds between its ops \
                     (an index's int64, f64, an integer), or of a value nothing computes",
                    op_name(t)
                ),
                None => norm::refusal(n).map_or_else(|| unknown_message(t), str::to_string),
            };
            mp.problem(n, why);
        }
    }
    let out_name = out_inner;
    let Some(out_name) = out_name else {
        mp.problems.push(Unmapped {
            node: "output".into(),
            target: "output".into(),
            message: format!(
                "Model returns {} values; a workload has one output tensor",
                graph.output.len()
            ),
        });
        return Err(mp.problems);
    };
    if !mp.problems.is_empty() {
        return Err(mp.problems);
    }
    let gemms: Vec<&Node> = calls
        .iter()
        .copied()
        .filter(|n| classify(n.target.as_deref().unwrap_or_default()) == Class::Gemm)
        .collect();
    let softmaxes: Vec<&Node> = calls
        .iter()
        .copied()
        .filter(|n| {
            matches!(
                classify(n.target.as_deref().unwrap_or_default()),
                Class::Softmax { .. }
            ) && !absorbed.contains(n.name.as_str())
        })
        .collect();
    // Two GEMMs of one A, one through a gate, multiplied: gemm_glu (SwiGLU, GEGLU).
    let glu = match (gemms.as_slice(), Some(&out_name)) {
        ([g1, g2], Some(o))
            if softmaxes.is_empty()
                && norms.is_empty()
                && reductions.is_empty()
                && scans.is_empty()
                && losses.is_empty() =>
        {
            glu_pair(&mp, g1, g2, o)
        }
        _ => None,
    };
    for extra in gemms.iter().skip(1).filter(|_| glu.is_none()) {
        mp.problem(
            extra,
            "a second matrix product: a workload is one GEMM (with its epilogue)",
        );
    }
    for extra in softmaxes.iter().skip(1) {
        mp.problem(extra, "a second softmax: a workload has one");
    }
    for extra in norms.iter().skip(1) {
        if let Some(n) = mp.nodes.get(extra.head.as_str()).copied() {
            mp.problem(n, "a second normalization: a workload has one");
        }
    }
    // One GEMM and one norm after it: gemm_norm (map_gemm_norm checks the rest).
    let gemm_norm = gemms.len() == 1 && softmaxes.is_empty() && reductions.is_empty();
    if let (Some(nm), true) = (
        norms.first(),
        !gemm_norm && (!gemms.is_empty() || !softmaxes.is_empty()),
    ) {
        if let Some(n) = mp.nodes.get(nm.head.as_str()).copied() {
            mp.problem(
                n,
                "a normalization beside a softmax, a reduction or a second GEMM: family norm fuses nothing before or after it but elementwise ops, family gemm_norm one GEMM before it",
            );
        }
    }
    for extra in reductions.iter().skip(1) {
        if let Some(n) = mp.nodes.get(extra.head.as_str()).copied() {
            mp.problem(n, "a second reduction: a workload has one");
        }
    }
    // One GEMM and one reduction after it: gemm_reduce (map_gemm_reduce checks the rest).
    let gemm_reduce = gemms.len() == 1 && softmaxes.is_empty() && norms.is_empty();
    if let (Some(rm), true) = (
        reductions.first(),
        !gemm_reduce && (!gemms.is_empty() || !softmaxes.is_empty() || !norms.is_empty()),
    ) {
        if let Some(n) = mp.nodes.get(rm.head.as_str()).copied() {
            mp.problem(
                n,
                "a reduction beside a GEMM, a softmax or a norm: family reduce fuses nothing before it, and elementwise ops only after it",
            );
        }
    }
    for extra in scans.iter().skip(1) {
        if let Some(n) = mp.nodes.get(extra.head.as_str()).copied() {
            mp.problem(n, "a second scan: a workload has one");
        }
    }
    if let (Some(sm), true) = (
        scans.first(),
        !gemms.is_empty() || !softmaxes.is_empty() || !norms.is_empty() || !reductions.is_empty(),
    ) {
        if let Some(n) = mp.nodes.get(sm.head.as_str()).copied() {
            mp.problem(
                n,
                "a scan beside a GEMM, a softmax, a norm or a reduction: family scan fuses elementwise ops only, before and after it",
            );
        }
    }
    for extra in losses.iter().skip(1) {
        if let Some(n) = mp.nodes.get(extra.head.as_str()).copied() {
            mp.problem(n, "a second cross entropy: a workload has one");
        }
    }
    if let (Some(ce), true) = (
        losses.first(),
        !gemms.is_empty()
            || !softmaxes.is_empty()
            || !norms.is_empty()
            || !reductions.is_empty()
            || !scans.is_empty(),
    ) {
        if let Some(n) = mp.nodes.get(ce.head.as_str()).copied() {
            mp.problem(
                n,
                "a cross entropy beside a GEMM, a softmax, a norm, a reduction or a scan: it \
                 reads a Model input's logits (a classifier head's GEMM and its loss are two \
                 workloads)",
            );
        }
    }
    if !mp.problems.is_empty() {
        return Err(mp.problems);
    }
    let mut ops: Vec<String> = Vec::new();
    let spec = match (gemms.first(), softmaxes.first()) {
        _ if glu.is_some() => {
            glu.and_then(|(gate, g, u)| map_glu(&mut mp, gate, g, u, file, &mut ops))
        }
        (None, None) if !losses.is_empty() => {
            loss::map_cross_entropy(&mut mp, &losses[0], &out_name, file, &mut ops)
        }
        (None, None) if !norms.is_empty() => {
            norm::map_norm(&mut mp, &norms[0], &out_name, file, &mut ops)
        }
        (None, None) if !reductions.is_empty() => {
            reduce::map_reduce(&mut mp, &reductions[0], &out_name, file, &mut ops)
        }
        (None, None) if !scans.is_empty() => {
            scan::map_scan(&mut mp, &scans[0], &out_name, file, &mut ops)
        }
        (Some(g), None) if !reductions.is_empty() => {
            reduce::map_gemm_reduce(&mut mp, g, &reductions[0], &out_name, file, &mut ops)
        }
        (Some(g), None) if !norms.is_empty() => {
            norm::map_gemm_norm(&mut mp, g, &norms[0], &out_name, file, &mut ops)
        }
        (Some(g), s) => map_gemm(&mut mp, g, s.copied(), &out_name, file, &mut ops),
        (None, Some(s)) => map_softmax(&mut mp, graph, s, &out_name, file, &mut ops),
        (None, None) => map_activation(&mut mp, graph, &out_name, file, &mut ops),
    };
    match spec {
        Some(mut s) if mp.problems.is_empty() => {
            // The output's own type (a cast's, or a promotion's); an index's int64 is the
            // family's. The spec's default is A's type, bf16 for fp8 operands.
            let default = if s.dtype.is_fp8() {
                DType::BF16
            } else {
                s.dtype
            };
            if let Some(d) = output_dtype.filter(|d| *d != s.out_dtype.unwrap_or(default)) {
                s.out_dtype = Some(d).filter(|d| *d != default);
            }
            if output_cast {
                if let Some(d) = output_dtype {
                    ops.push(format!("to {d} (the output)"));
                }
            }
            Ok((s, ops))
        }
        _ => {
            if mp.problems.is_empty() {
                mp.problems.push(Unmapped {
                    node: out_name,
                    target: "output".into(),
                    message: "no workload recognized".into(),
                });
            }
            Err(mp.problems)
        }
    }
}

/// Shapes for a headline: the headline, a ragged one (about a quarter of each size, odd)
/// and a small one, without repeats.
fn ragged(d: i64) -> i64 {
    if d <= 2 {
        d
    } else {
        ((d + 3) / 4) | 1
    }
}

fn small(d: i64, cap: i64) -> i64 {
    if d <= cap {
        (d - 1).max(1)
    } else {
        cap
    }
}

fn gemm_shapes(m: i64, n: i64, k: i64, batch: i64) -> Vec<ShapeSpec> {
    let b = |x: i64| (x > 1).then_some(x);
    let mut v = vec![
        ShapeSpec {
            m: Some(m),
            n: Some(n),
            k: Some(k),
            batch: b(batch),
            ..Default::default()
        },
        ShapeSpec {
            m: Some(ragged(m)),
            n: Some(ragged(n)),
            k: Some(ragged(k)),
            batch: b(batch.min(3)),
            ..Default::default()
        },
        ShapeSpec {
            m: Some(small(m, 127)),
            n: Some(small(n, 255)),
            k: Some(small(k, 64)),
            batch: b(batch.min(2)),
            ..Default::default()
        },
    ];
    dedup(&mut v);
    v
}

/// One shape of `batch` x (`m` rows of `n`), the batch left out when it is 1.
fn batched_rows(batch: i64, m: i64, n: i64) -> ShapeSpec {
    ShapeSpec {
        batch: (batch > 1).then_some(batch),
        m: Some(m),
        n: Some(n),
        k: None,
        ..Default::default()
    }
}

/// Shapes of rows side by side (a norm or a scan over a middle dimension): the headline
/// `batch` x (`m` rows of `n`) and a ragged one, without repeats.
fn side_by_side_shapes(batch: i64, m: i64, n: i64) -> Vec<ShapeSpec> {
    let mut v = vec![
        batched_rows(batch, m, n),
        batched_rows(batch.min(3), ragged(m), ragged(n)),
    ];
    dedup(&mut v);
    v
}

/// Shapes of a batch of m rows of n values, each row `per_row` channels of n / per_row:
/// the given one, then smaller ones whose channels are ragged too.
fn channel_shapes(batch: i64, m: i64, n: i64, per_row: i64) -> Vec<ShapeSpec> {
    let span = n / per_row.max(1);
    let mut v = vec![
        batched_rows(batch, m, n),
        batched_rows(batch.min(3), m, per_row * ragged(span)),
        batched_rows(batch.min(2), ragged(m), per_row * small(span, 33)),
    ];
    dedup(&mut v);
    v
}

fn row_shapes(m: i64, n: i64) -> Vec<ShapeSpec> {
    let mut v = vec![
        ShapeSpec {
            m: Some(m),
            n: Some(n),
            ..Default::default()
        },
        ShapeSpec {
            m: Some(ragged(m)),
            n: Some(ragged(n)),
            ..Default::default()
        },
        ShapeSpec {
            m: Some(small(m, 33)),
            n: Some(small(n, 1023)),
            ..Default::default()
        },
    ];
    dedup(&mut v);
    v
}

fn dedup(v: &mut Vec<ShapeSpec>) {
    let mut seen = HashSet::new();
    v.retain(|s| seen.insert((s.m, s.n, s.k, s.batch.unwrap_or(1), s.dims.clone())));
}

/// The chain after `start` up to `out`, as `[[epilogue]]` ops; `rows` and `cols` are the
/// output's (m, n) for classifying tensor operands; `z_ok` whether `start` may be read
/// back as operand z.
fn chain_after<'g>(
    mp: &mut Mapper<'g>,
    start: &str,
    out: &str,
    out_dims: (i64, i64, i64),
    out_dtype: DType,
    ops: &mut Vec<String>,
) -> Option<Vec<OpSpec>> {
    chain_between(
        mp,
        start,
        out,
        &|mp: &mut Mapper<'_>, n: &Node, o: &str| tensor_operand(mp, n, o, out_dims),
        false,
        Some(out_dims),
        out_dtype,
        ops,
    )
}

/// The chain ops one node becomes (each with what it is, for the ops list): appended, the
/// last standing for the node's value, which the chain continues from.
fn end_node(
    n: &Node,
    added: Vec<(OpSpec, String)>,
    specs: &mut Vec<OpSpec>,
    ops: &mut Vec<String>,
    emitted: &mut HashMap<String, usize>,
    current: &mut String,
) {
    for (spec, what) in added {
        ops.push(format!("{} ({what})", describe(&spec)));
        specs.push(spec);
    }
    if let Some(last) = specs.len().checked_sub(1) {
        emitted.insert(n.name.clone(), last);
    }
    *current = n.name.clone();
}

/// How a chain's tensor operand is classified (`row`, `col`, `matrix`), a problem recorded
/// at the node reading it where it fits none.
type Classify<'c> = dyn Fn(&mut Mapper<'_>, &Node, &str) -> Option<&'static str> + 'c;

/// Tensor `o`, read by op `n` for the first time, as `spec`'s operand: its kind by
/// `classify` (and a broadcast operand's dims), named in `tensor_names` as the chain names
/// its tensors (by kind and order, `Chain::operand`); the kind and the tensor's type.
fn new_tensor_operand(
    mp: &mut Mapper<'_>,
    n: &Node,
    o: &str,
    classify: &Classify<'_>,
    tensor_names: &mut HashMap<String, String>,
    spec: &mut OpSpec,
) -> Option<(&'static str, Option<DType>)> {
    let kind = classify(mp, n, o)?;
    spec.operand = Some(kind.into());
    if kind == "broadcast" {
        spec.over = mp.broadcast.get(o).cloned();
    }
    let name = format!("{kind}{}", tensor_names.len());
    tensor_names.insert(o.to_string(), name);
    Some((kind, mp.meta(o).and_then(|m| operand_dtype_of(&m.dtype))))
}

/// [`chain_after`] with the tensor operands classified by `classify`; with `reuse`, a
/// tensor read a second time is named again (`matrix0`) instead of becoming a new operand
/// (a reduction's `[[before]]` ops: a loss's target read twice). `dims`: the (batch, m, n)
/// of the matrices the chain runs over, where its elements have positions there (triu
/// and tril need them).
#[allow(clippy::too_many_arguments)]
fn chain_between<'g>(
    mp: &mut Mapper<'g>,
    start: &str,
    out: &str,
    classify_operand: &Classify<'_>,
    reuse: bool,
    dims: Option<(i64, i64, i64)>,
    out_dtype: DType,
    ops: &mut Vec<String>,
) -> Option<Vec<OpSpec>> {
    let mut tensor_names: HashMap<String, String> = HashMap::new();
    // The nodes that depend on `start`, in graph order, up to `out` (a chain that ends
    // before the graph does: gemm_softmax's, at the softmax's input).
    let end = through_copies(&mp.nodes, out).to_string();
    let mut chainy: HashSet<String> = HashSet::from([start.to_string()]);
    let mut members: Vec<&'g Node> = Vec::new();
    let mut all: Vec<&'g Node> = mp.nodes.values().copied().collect();
    all.sort_by_key(|n| mp.order.get(n.name.as_str()).copied().unwrap_or(0));
    let end_at = mp.order.get(end.as_str()).copied();
    for n in all {
        if n.op != "call_function" || n.name == start || mp.unused_part(n) {
            continue;
        }
        // A constant shaped like a chain value (`torch.ones_like(scores)` for a mask)
        // reads its shape, not its values.
        if matches!(
            op_name(n.target.as_deref().unwrap_or_default()),
            "ones_like"
                | "zeros_like"
                | "full_like"
                | "empty_like"
                | "new_ones"
                | "new_zeros"
                | "new_full"
                | "new_empty"
        ) {
            continue;
        }
        if let (Some(e), Some(o)) = (end_at, mp.order.get(n.name.as_str())) {
            if *o > e {
                break;
            }
        }
        let reads = n
            .args
            .iter()
            .chain(n.kwargs.values())
            .any(|a| matches!(arg(a), Arg::Node(x) if chainy.contains(x)));
        if reads {
            chainy.insert(n.name.clone());
            members.push(n);
        }
    }
    let mut specs: Vec<OpSpec> = Vec::new();
    let mut emitted: HashMap<String, usize> = HashMap::new();
    let mut current = start.to_string();
    let mut saves = 0usize;
    // Copies (clone, detach, contiguous, alias) and eval-mode dropouts are other names for
    // the value they read (`x.clone().detach()` kept for a residual is the GEMM's result):
    // every argument is read through them.
    for n in members {
        let t = n.target.clone().unwrap_or_default();
        let op = op_name(&t).to_string();
        match classify(&t) {
            Class::Elementwise => {}
            Class::View | Class::Unknown if passes_values(&mp.nodes, n) => {}
            Class::Unknown if norm::eval_batch_norm(n) => {}
            _ => {
                mp.problem(n, "not an elementwise op: after the GEMM, softmax or input, a workload continues with elementwise ops only (a GEMM's softmax may follow them)");
                return None;
            }
        }
        if op == "dropout" && !passes_values(&mp.nodes, n) {
            mp.problem(
                n,
                "dropout in training mode is random; import without --train (eval mode), or \
                 give the dropout p = 0",
            );
            return None;
        }
        if passes_values(&mp.nodes, n) {
            if matches!(n.args.first().map(arg), Some(Arg::Node(_))) {
                continue;
            }
            mp.problem(n, "a copy of something that is not a tensor");
            return None;
        }
        // Which positional argument is the running value x, and the other operand.
        let a0 = mp.resolve(n.args.first().map(arg));
        let a1 = mp.resolve(param(n, 1, "other").map(arg));
        // An op that starts again from z or from an earlier result (`0.5 * x * (1 +
        // tanh(x + c * x**3))` computes `0.5 * x`, then restarts from x): the value so far
        // is saved (a later op reads it back) and the chain continues from that one
        // (`set`).
        let names: Vec<&str> = [&a0, &a1]
            .into_iter()
            .filter_map(|a| match a {
                Some(Arg::Node(x)) => Some(*x),
                _ => None,
            })
            .collect();
        if !names.contains(&current.as_str()) && current != start {
            let restart = names
                .iter()
                .copied()
                .find(|x| *x == start || emitted.contains_key(*x));
            if let (Some(x), Some(&last)) = (restart, emitted.get(&current)) {
                let save = specs[last].save.clone().unwrap_or_else(|| {
                    saves += 1;
                    format!("s{saves}")
                });
                specs[last].save = Some(save);
                let operand = if x == start {
                    "z".to_string()
                } else {
                    let i = emitted[x];
                    specs[i].save.clone().unwrap_or_else(|| {
                        saves += 1;
                        let name = format!("s{saves}");
                        specs[i].save = Some(name.clone());
                        name
                    })
                };
                let set = OpSpec {
                    op: "set".into(),
                    operand: Some(operand),
                    ..Default::default()
                };
                ops.push(describe(&set));
                specs.push(set);
                current = x.to_string();
            }
        }
        let x_first = matches!(a0, Some(Arg::Node(x)) if x == current);
        let x_second = matches!(a1, Some(Arg::Node(x)) if x == current);
        if !x_first && !x_second {
            mp.problem(
                n,
                format!(
                    "reads an earlier value, not the result of the previous op (`{current}`): the chain must be one sequence of elementwise ops"
                ),
            );
            return None;
        }
        // An eval-mode BatchNorm of (N, C) values: a per-feature affine map, x * scale +
        // shift, its two row operands folded from the module's weight, bias and running
        // statistics (as an inference engine folds them).
        if norm::eval_batch_norm(n) {
            if !x_first {
                mp.problem(n, "the running value is not its first argument");
                return None;
            }
            // Its per-feature vectors must be row operands where the chain runs (a
            // reduction's [[before]] ops index theirs like A).
            // Of (N, C, ...) values it scales along dim 1: broadcast operands over the
            // output's dims (the second attempt), never the rows' last dim.
            let rank = n.val.as_ref().map_or(0, |m| m.shape.len());
            if rank > 2 && mp.out_nd.is_none() {
                mp.problem(
                    n,
                    "an eval-mode batch_norm of (N, C, ...) values scales each channel (dim \
                     1): an elementwise workload takes it as broadcast operands over the \
                     output's dims, a GEMM's chain or a reduction's ops do not (`import \
                     --train` normalizes with the batch's statistics)",
                );
                return None;
            }
            let stats = match n.args.get(3).map(arg) {
                // Over an (N, C, ...) output's dims: per channel, dim 1.
                Some(Arg::Node(_)) if mp.out_nd.as_ref().is_some_and(|d| d.len() >= 2) => {
                    Some("broadcast")
                }
                Some(Arg::Node(rm)) => classify_operand(mp, n, rm),
                _ => {
                    mp.problem(n, "an eval-mode batch_norm without running statistics");
                    return None;
                }
            };
            if stats != Some("row") && stats != Some("broadcast") {
                if stats.is_some() {
                    mp.problem(
                        n,
                        "an eval-mode batch_norm whose per-feature vectors do not run along \
                         the row of the values the chain computes",
                    );
                }
                return None;
            }
            let dt = [1, 3]
                .into_iter()
                .find_map(|i| match n.args.get(i).map(arg) {
                    Some(Arg::Node(w)) => mp.meta(w).and_then(|m| dtype_of(&m.dtype)),
                    _ => None,
                })
                .filter(|d| *d != out_dtype);
            let mut added = Vec::new();
            for (op, what) in [
                ("mul", "scale: weight / sqrt(running_var + eps)"),
                ("add", "shift: bias - running_mean x scale"),
            ] {
                let kind = stats.unwrap_or("row");
                let name = format!("{kind}{}", tensor_names.len());
                tensor_names.insert(format!("{}.{op}", n.name), name);
                let spec = OpSpec {
                    op: op.into(),
                    operand: Some(kind.into()),
                    dtype: dt,
                    over: (kind == "broadcast").then(|| vec![1]),
                    ..Default::default()
                };
                added.push((spec, format!("BatchNorm's {what}")));
            }
            end_node(n, added, &mut specs, ops, &mut emitted, &mut current);
            continue;
        }
        // A mask as index ops, the triu or tril of the side it leaves with its fill: a
        // masked_fill by a triangle of a constant matrix (a causal mask), or an add of an
        // additive -inf triangle (`scores + torch.full((T, T), -inf).triu(1)`).
        let (_, m, nn) = dims.unwrap_or_default();
        // A masked_fill by a mask tensor that is an input, parameter or buffer (not a
        // triangle built in forward): the masked_fill op, the mask its operand (a bool one
        // read as 0 or 1).
        // `torch.where(cond, x, other)` with x the running value and a number `other`: the
        // where op, cond its mask operand.
        let cond = match &a0 {
            Some(Arg::Node(c)) => Some(c.to_string()),
            _ => None,
        };
        let tensor_mask = match (op.as_str(), param(n, 1, "mask").map(arg), cond) {
            ("masked_fill", Some(Arg::Node(mk)), _)
                if x_first && mask::triangle(mp, mk).is_none() && mp.source(mk).is_some() =>
            {
                Some((mk.to_string(), "masked_fill", "value"))
            }
            ("where", _, Some(cond)) if x_second && mp.source(&cond).is_some() => {
                Some((cond, "where", "other"))
            }
            ("where", ..) => {
                mp.problem(
                    n,
                    "torch.where maps as where(cond, x, number) with cond an input, parameter \
                     or buffer and x the running value",
                );
                return None;
            }
            _ => None,
        };
        if let Some((mk, fill_op, fill_arg)) = tensor_mask {
            let fill = match param(n, 2, fill_arg).map(arg) {
                Some(Arg::Num(v)) if !v.is_nan() => v,
                _ => {
                    mp.problem(n, format!("{fill_op} with a fill that is not a number"));
                    return None;
                }
            };
            let mut spec = OpSpec {
                op: fill_op.into(),
                value: Some(fill),
                ..Default::default()
            };
            match tensor_names.get(&mk) {
                Some(name) if reuse => spec.operand = Some(name.clone()),
                _ => {
                    let (_, dt) = new_tensor_operand(
                        mp,
                        n,
                        &mk,
                        classify_operand,
                        &mut tensor_names,
                        &mut spec,
                    )?;
                    // Stated always: a mask's type defaults to bool, not the chain's.
                    spec.dtype = dt;
                }
            }
            let what = format!("{fill_op} by `{mk}`");
            end_node(
                n,
                vec![(spec, what)],
                &mut specs,
                ops,
                &mut emitted,
                &mut current,
            );
            continue;
        }
        let masked = match op.as_str() {
            "masked_fill" => {
                if !x_first {
                    mp.problem(n, "the running value is not its first argument");
                    return None;
                }
                Some((mask::masked_fill_ops(mp, n, (m, nn)), "masked_fill"))
            }
            "add" if num_param(n, 2, "alpha").is_none_or(|a| a == 1.0) => {
                match if x_first { &a1 } else { &a0 } {
                    Some(Arg::Node(o)) => mask::additive_op(mp, o, (m, nn), &current)
                        .map(|kept| (kept, "an additive mask")),
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some((kept, how)) = masked {
            // What the mask is comes first in a refusal; then where the chain runs.
            let kept = match kept {
                Ok(kept) if positions_hold(mp, n, &current, dims) => kept,
                Ok(_) => return None,
                Err(why) => {
                    mp.problem(n, why);
                    return None;
                }
            };
            let added = kept.into_iter().map(|(name, diagonal, fill)| {
                let spec = OpSpec {
                    op: name.into(),
                    diagonal: (diagonal != 0).then_some(diagonal),
                    value: (fill != 0.0).then_some(fill),
                    ..Default::default()
                };
                (spec, how.to_string())
            });
            end_node(
                n,
                added.collect(),
                &mut specs,
                ops,
                &mut emitted,
                &mut current,
            );
            continue;
        }
        let binary = matches!(
            op.as_str(),
            "add" | "sub" | "rsub" | "mul" | "div" | "maximum" | "minimum"
        );
        let mut spec = OpSpec {
            op: op.clone(),
            ..Default::default()
        };
        let mut note: Option<String> = None;
        if binary {
            let other = if x_first { a1 } else { a0 };
            // A 0-d parameter holding a known number is that number.
            let other = match other {
                Some(Arg::Node(o)) => mp
                    .nodes
                    .get(o)
                    .filter(|p| {
                        p.op == "placeholder" && p.val.as_ref().is_some_and(|m| m.shape.is_empty())
                    })
                    .and_then(|p| p.value.as_ref())
                    .map(arg)
                    .filter(|a| matches!(a, Arg::Num(_)))
                    .or(other),
                _ => other,
            };
            // add / sub scale their second operand by alpha: that folds into a constant
            // added to x, and into nothing else.
            let alpha = num_param(n, 2, "alpha").unwrap_or(1.0);
            let folds = x_first
                && matches!(op.as_str(), "add" | "sub")
                && matches!(other, Some(Arg::Num(_)));
            if alpha != 1.0 && matches!(op.as_str(), "add" | "sub" | "rsub") && !folds {
                mp.problem(
                    n,
                    format!(
                        "{op} with alpha = {alpha}: only alpha = 1 maps, or a constant times alpha"
                    ),
                );
                return None;
            }
            // The other operand: a constant, z, a saved value, or a tensor input.
            match other {
                Some(Arg::Num(v)) => {
                    let v = if matches!(op.as_str(), "add" | "sub" | "rsub") {
                        v * alpha
                    } else {
                        v
                    };
                    spec.value = Some(v);
                }
                Some(Arg::Node(o)) if o == start && o != current => spec.operand = Some("z".into()),
                Some(Arg::Node(o)) if o == current || emitted.contains_key(o) => {
                    // x (op) x, or an earlier result: save it and read it back.
                    if o == start {
                        spec.operand = Some("z".into());
                    } else if let Some(&i) = emitted.get(o) {
                        let name = specs[i].save.clone().unwrap_or_else(|| {
                            saves += 1;
                            format!("s{saves}")
                        });
                        specs[i].save = Some(name.clone());
                        spec.operand = Some(name);
                    } else {
                        mp.problem(
                            n,
                            format!("reads `{o}` twice in a way the chain cannot express"),
                        );
                        return None;
                    }
                }
                Some(Arg::Node(o)) if reuse && tensor_names.contains_key(o) => {
                    spec.operand = tensor_names.get(o).cloned();
                }
                // Unary ops of an input, parameter or buffer (an SE block's `x *
                // sigmoid(s)`): the chain goes to that tensor (`set`), applies them, saves
                // the result and comes back to the running value, which the op then
                // combines with the saved one.
                Some(Arg::Node(o)) if mp.source(o).is_none() => {
                    let Some((leaf, chain_nodes)) = operand_ops(mp, o) else {
                        mp.problem(
                            n,
                            format!(
                                "operand `{o}` is computed, not an input, parameter or buffer \
                                 nor unary elementwise ops of one"
                            ),
                        );
                        return None;
                    };
                    let kind = classify_operand(mp, n, &leaf)?;
                    let back = if current == start {
                        "z".to_string()
                    } else {
                        let last = specs.len().checked_sub(1)?;
                        specs[last]
                            .save
                            .get_or_insert_with(|| {
                                saves += 1;
                                format!("s{saves}")
                            })
                            .clone()
                    };
                    let dt = mp.meta(&leaf).and_then(|m| operand_dtype_of(&m.dtype));
                    let set = OpSpec {
                        op: "set".into(),
                        operand: Some(kind.into()),
                        over: (kind == "broadcast")
                            .then(|| mp.broadcast.get(&leaf).cloned())
                            .flatten(),
                        dtype: dt.filter(|d| *d != out_dtype),
                        ..Default::default()
                    };
                    tensor_names.insert(leaf.clone(), format!("{kind}{}", tensor_names.len()));
                    ops.push(format!("{} (`{leaf}`, for `{o}`)", describe(&set)));
                    specs.push(set);
                    for c in chain_nodes {
                        let cop = op_name(c.target.as_deref().unwrap_or_default()).to_string();
                        let mut cs = OpSpec {
                            op: cop.clone(),
                            ..Default::default()
                        };
                        if !unary(mp, c, &cop, &mut cs) {
                            return None;
                        }
                        ops.push(describe(&cs));
                        specs.push(cs);
                    }
                    saves += 1;
                    let held = format!("s{saves}");
                    if let Some(last) = specs.last_mut() {
                        last.save = Some(held.clone());
                    }
                    let ret = OpSpec {
                        op: "set".into(),
                        operand: Some(back),
                        ..Default::default()
                    };
                    ops.push(describe(&ret));
                    specs.push(ret);
                    spec.operand = Some(held);
                }
                Some(Arg::Node(o)) => {
                    let (kind, dt) = new_tensor_operand(
                        mp,
                        n,
                        o,
                        classify_operand,
                        &mut tensor_names,
                        &mut spec,
                    )?;
                    if kind == "row" && mp.meta(o).is_some_and(|m| m.shape.iter().all(|d| *d == 1))
                    {
                        note = Some(format!(
                            "`{o}` holds one value: pass it as a row of n copies"
                        ));
                    }
                    if let Some(d) = dt.filter(|d| *d != out_dtype) {
                        spec.dtype = Some(d);
                    }
                }
                _ => {
                    mp.problem(n, "its second operand is neither a number nor a tensor");
                    return None;
                }
            }
            // Non-commutative ops with x on the right: c - x = -x + c; c / x does not map.
            let x_right = !x_first || op == "rsub";
            match op.as_str() {
                "maximum" => spec.op = "max".into(),
                "minimum" => spec.op = "min".into(),
                "sub" | "rsub" if x_right => {
                    specs.push(OpSpec {
                        op: "neg".into(),
                        ..Default::default()
                    });
                    ops.push("neg".into());
                    spec.op = "add".into();
                }
                "sub" | "rsub" => spec.op = "sub".into(),
                "div" if n.kwargs.get("rounding_mode").is_some_and(|v| !v.is_null()) => {
                    mp.problem(n, "division with a rounding mode");
                    return None;
                }
                "div" if x_right => spec.op = "rdiv".into(),
                _ => {}
            }
        } else {
            if !x_first {
                mp.problem(n, "the running value is not its first argument");
                return None;
            }
            if matches!(op.as_str(), "triu" | "tril") && !positions_hold(mp, n, &current, dims) {
                return None;
            }
            if !unary(mp, n, &op, &mut spec) {
                return None;
            }
        }
        ops.push(match note {
            Some(why) => format!("{} ({why})", describe(&spec)),
            None => describe(&spec),
        });
        emitted.insert(n.name.clone(), specs.len());
        specs.push(spec);
        current = n.name.clone();
    }
    let out = through_copies(&mp.nodes, out);
    if current != out {
        let n = mp.nodes.get(out).copied();
        match n {
            Some(n) => mp.problem(
                n,
                format!("the output is not the end of the chain from `{start}`"),
            ),
            None => mp.problems.push(Unmapped {
                node: out.into(),
                target: "output".into(),
                message: "the output is not computed by the graph".into(),
            }),
        }
        return None;
    }
    Some(specs)
}

fn describe(s: &OpSpec) -> String {
    let mut t = s.op.clone();
    if let Some(v) = s.value {
        t.push_str(&format!(" {v}"));
    }
    if let Some(o) = &s.operand {
        t.push_str(&format!(" {o}"));
    }
    t
}

/// Whether `triu` / `tril` node `n` of the running value `x` keeps one side of the diagonal
/// of the m x n matrices the chain runs over (`dims`: batch, m, n): x's last two dims must
/// be those (rows flattened into m, the activation family's, have no diagonal). Else a
/// problem is recorded.
fn positions_hold(mp: &mut Mapper<'_>, n: &Node, x: &str, dims: Option<(i64, i64, i64)>) -> bool {
    let shape = mp.meta(x).map(|m| m.shape.clone()).unwrap_or_default();
    let fits = match (dims, shape.as_slice()) {
        (Some((_, m, nn)), [.., r, c]) => *r == m && *c == nn,
        _ => false,
    };
    if !fits {
        mp.problem(
            n,
            format!(
                "{} of a {shape:?} tensor: it keeps one side of each matrix's diagonal, which \
                 maps where the chain runs over whole matrices (a GEMM's output, batched or \
                 not, or a 2-d input), not over flattened rows",
                op_name(n.target.as_deref().unwrap_or_default())
            ),
        );
    }
    fits
}

/// A computed operand that is unary elementwise ops of one input, parameter or buffer
/// (`sigmoid(s)`): that tensor (or the view of it the first op reads) and the ops' nodes,
/// the first applied first; None for anything else.
fn operand_ops<'g>(mp: &Mapper<'g>, o: &str) -> Option<(String, Vec<&'g Node>)> {
    let mut nodes = Vec::new();
    let mut cur = o.to_string();
    while mp.source(&cur).is_none() {
        let n = *mp.nodes.get(cur.as_str())?;
        let tensors: Vec<&str> = n
            .args
            .iter()
            .chain(n.kwargs.values())
            .filter_map(|a| match arg(a) {
                Arg::Node(x) => Some(x),
                _ => None,
            })
            .collect();
        if n.op != "call_function"
            || tensors.len() != 1
            || classify(n.target.as_deref().unwrap_or_default()) != Class::Elementwise
            || nodes.len() >= 8
        {
            return None;
        }
        nodes.push(n);
        cur = tensors[0].to_string();
    }
    nodes.reverse();
    Some((cur, nodes))
}

/// Fills a unary op's spec (activations and their parameters, clamp); false after a
/// problem was recorded.
fn unary(mp: &mut Mapper<'_>, n: &Node, op: &str, spec: &mut OpSpec) -> bool {
    let p = |i: usize, k: &str| num_param(n, i, k);
    match op {
        "relu" | "silu" | "sigmoid" | "tanh" | "selu" | "hardsigmoid" | "hardswish" | "mish"
        | "neg" | "abs" | "exp" | "log" | "sqrt" => {}
        "rsqrt" => {
            spec.op = "pow".into();
            spec.value = Some(-0.5);
        }
        // x ** c (aten.pow.Tensor_Scalar); a tensor exponent or a constant base does not map.
        "pow" => match (n.target.as_deref(), p(1, "exponent")) {
            (Some("aten.pow.Tensor_Scalar"), Some(e)) => spec.value = Some(e),
            _ => {
                mp.problem(
                    n,
                    "pow with a tensor exponent or a constant base: only x ** c maps",
                );
                return false;
            }
        },
        "relu6" => {
            spec.op = "hardtanh".into();
            spec.min = Some(0.0);
            spec.max = Some(6.0);
        }
        "leaky_relu" => spec.alpha = Some(p(1, "negative_slope").unwrap_or(0.01)),
        "gelu" => {
            let approx = param(n, 1, "approximate")
                .and_then(Value::as_str)
                .unwrap_or("none");
            spec.op = match approx {
                "none" => "gelu_erf".into(),
                "tanh" => "gelu_tanh".into(),
                other => {
                    mp.problem(n, format!("gelu with approximate = {other:?}"));
                    return false;
                }
            };
        }
        "elu" => {
            let (scale, input_scale) = (
                p(2, "scale").unwrap_or(1.0),
                p(3, "input_scale").unwrap_or(1.0),
            );
            if scale != 1.0 || input_scale != 1.0 {
                mp.problem(
                    n,
                    format!("elu with scale {scale} and input_scale {input_scale}: only 1 maps"),
                );
                return false;
            }
            spec.alpha = Some(p(1, "alpha").unwrap_or(1.0));
        }
        "hardtanh" => {
            spec.min = Some(p(1, "min_val").unwrap_or(-1.0));
            spec.max = Some(p(2, "max_val").unwrap_or(1.0));
        }
        "triu" | "tril" => {
            // Absent: 0. A diagonal that is not a number (a symbolic size) does not map.
            let d = match param(n, 1, "diagonal").map(arg) {
                None => 0.0,
                Some(Arg::Num(d)) => d,
                Some(_) => {
                    mp.problem(n, format!("{op} with a diagonal that is not a number"));
                    return false;
                }
            };
            if d.fract() != 0.0 {
                mp.problem(n, format!("{op} with diagonal {d}: not an integer"));
                return false;
            }
            if d != 0.0 {
                spec.diagonal = Some(d as i64);
            }
        }
        "softplus" => {
            spec.beta = Some(p(1, "beta").unwrap_or(1.0));
            spec.threshold = Some(p(2, "threshold").unwrap_or(20.0));
        }
        "clamp" | "clamp_min" | "clamp_max" => {
            let bound = |i: usize, k: &str| -> Option<std::result::Result<f64, ()>> {
                param(n, i, k).map(|v| match arg(v) {
                    Arg::Num(x) => Ok(x),
                    _ => Err(()),
                })
            };
            let (lo, hi) = match op {
                "clamp" => (bound(1, "min"), bound(2, "max")),
                "clamp_min" => (bound(1, "min"), None),
                _ => (None, bound(1, "max")),
            };
            if matches!(lo, Some(Err(()))) || matches!(hi, Some(Err(()))) {
                mp.problem(n, "clamp with tensor bounds: only numbers map");
                return false;
            }
            spec.op = "clamp".into();
            spec.min = lo.and_then(std::result::Result::ok);
            spec.max = hi.and_then(std::result::Result::ok);
        }
        other => {
            mp.problem(n, format!("{other} does not map"));
            return false;
        }
    }
    true
}

/// How a tensor operand of an elementwise op is indexed against the (batch, m, n) output.
/// A tensor operand's metadata, where it is an input, parameter or buffer of a float type
/// (16 or 32 bits); else None with the problem recorded at `n`.
fn operand_meta(mp: &mut Mapper<'_>, n: &Node, o: &str) -> Option<Meta> {
    let Some(meta) = mp.meta(o).cloned() else {
        mp.problem(n, format!("operand `{o}` has no tensor metadata"));
        return None;
    };
    if mp.source(o).is_none() {
        mp.problem(
            n,
            format!("operand `{o}` is computed, not an input, parameter or buffer"),
        );
        return None;
    }
    if operand_dtype_of(&meta.dtype).is_none_or(DType::is_fp8) {
        mp.problem(
            n,
            format!(
                "operand `{o}` is {}; tensor operands are float32, float16, bfloat16 or bool",
                meta.dtype
            ),
        );
        return None;
    }
    Some(meta)
}

fn tensor_operand(
    mp: &mut Mapper<'_>,
    n: &Node,
    o: &str,
    out: (i64, i64, i64),
) -> Option<&'static str> {
    let (batch, m, nn) = out;
    let meta = operand_meta(mp, n, o)?;
    // Against the output's dims: any shape that broadcasts to them, by the dims it spans.
    if let Some(out_nd) = mp.out_nd.clone() {
        return broadcast_operand(mp, n, o, &meta, &out_nd);
    }
    // Drop leading 1s; what is left says how it broadcasts.
    let dims: Vec<i64> = meta.shape.iter().copied().skip_while(|d| *d == 1).collect();
    let kind = match dims.as_slice() {
        // One value (a `(1,)`-shaped parameter): a row of n copies of it.
        [] => Some("row"),
        [x] if *x == nn => Some("row"),
        [x, 1] if *x == m => Some("col"),
        [a, b] if *a == m && *b == nn && batch == 1 => Some("matrix"),
        [bb, a, b] if *bb == batch && *a == m && *b == nn => Some("matrix"),
        _ => None,
    };
    match kind {
        Some("matrix") if !contiguous(&meta) => {
            mp.problem(
                n,
                format!(
                    "operand `{o}` is not contiguous (strides {:?})",
                    meta.stride
                ),
            );
            None
        }
        Some(k) => Some(k),
        None => {
            mp.problem(
                n,
                format!(
                    "operand `{o}` of shape {:?} is neither a row vector ({nn}), a column vector ({m} x 1) nor a matrix like the output ({m} x {nn})",
                    meta.shape
                ),
            );
            None
        }
    }
}

/// A tensor operand broadcast against the output's dims `out` (PyTorch's rules: aligned at
/// the last dim, each dim equal or 1): `broadcast`, its spanned dims kept in
/// `mp.broadcast`.
fn broadcast_operand(
    mp: &mut Mapper<'_>,
    n: &Node,
    o: &str,
    meta: &Meta,
    out: &[i64],
) -> Option<&'static str> {
    let shape = &meta.shape;
    let lead = out.len().checked_sub(shape.len());
    let fits = lead.is_some_and(|lead| {
        shape
            .iter()
            .enumerate()
            .all(|(i, &d)| d == 1 || d == out[lead + i])
    });
    let Some(lead) = lead.filter(|_| fits) else {
        mp.problem(
            n,
            format!("operand `{o}` of shape {shape:?} does not broadcast to the output's {out:?}"),
        );
        return None;
    };
    if !contiguous(meta) {
        mp.problem(
            n,
            format!(
                "operand `{o}` is not contiguous (strides {:?})",
                meta.stride
            ),
        );
        return None;
    }
    let over: Vec<u32> = shape
        .iter()
        .enumerate()
        .filter(|(i, &d)| d != 1 && out[lead + i] != 1)
        .map(|(i, _)| (lead + i) as u32)
        .collect();
    mp.broadcast.insert(o.to_string(), over);
    Some("broadcast")
}

/// Shapes of an elementwise op over an output of `dims`: the given ones, then ragged and
/// small ones of the same rank (a dim of 1 stays 1: an operand may broadcast over it).
/// What a spec's description says of a workload over dims (`nd`): the dims, its operands
/// broadcast over them; None for one of rows.
fn over_dims(nd: &Option<Vec<i64>>) -> Option<String> {
    nd.as_ref().map(|d| {
        format!(
            "{} (operands broadcast over its dims)",
            d.iter().map(i64::to_string).collect::<Vec<_>>().join(" x ")
        )
    })
}

fn nd_shapes(dims: &[i64]) -> Vec<ShapeSpec> {
    let each = |f: &dyn Fn(i64) -> i64| ShapeSpec {
        dims: Some(
            dims.iter()
                .map(|&d| if d == 1 { 1 } else { f(d) })
                .collect(),
        ),
        ..Default::default()
    };
    let mut v = vec![each(&|d| d), each(&ragged), each(&|d| small(d, 13))];
    dedup(&mut v);
    v
}

/// Moves a leading activation that `[params] activation` can state (no parameter but a
/// leaky slope) out of the chain.
fn leading_activation(specs: &mut Vec<OpSpec>, params: &mut ParamsSpec) {
    let Some(first) = specs.first() else { return };
    let Some(act) = Activation::ALL
        .iter()
        .copied()
        .find(|a| a.name() == first.op)
    else {
        return;
    };
    let plain = first.value.is_none()
        && first.operand.is_none()
        && first.beta.is_none()
        && first.min.is_none()
        && first.max.is_none()
        && first.threshold.is_none()
        && first.save.is_none()
        && (first.alpha.is_none() || act == Activation::LeakyRelu);
    if !plain || act == Activation::Elu {
        return;
    }
    params.activation = Some(act);
    if act == Activation::LeakyRelu {
        params.leaky_slope = first.alpha.map(|a| a as f32);
    }
    specs.remove(0);
}

/// Writes a linear's bias add out as the chain's first op (`add row`). Where the chain
/// reads the linear's result again (x * sigmoid(x), a residual), which includes the bias
/// while a spec's z is the value before it, the sum is saved (`lin`) and read in z's place.
fn bias_first(
    mp: &mut Mapper<'_>,
    bias: &str,
    chain: &mut Vec<OpSpec>,
    out_dtype: DType,
    ops: &mut Vec<String>,
) {
    let reads_output = chain.iter().any(|o| o.operand.as_deref() == Some("z"));
    let mut first = OpSpec {
        op: "add".into(),
        operand: Some("row".into()),
        save: reads_output.then(|| "lin".into()),
        ..Default::default()
    };
    if let Some(d) = mp
        .meta(bias)
        .and_then(|m| dtype_of(&m.dtype))
        .filter(|d| *d != out_dtype)
    {
        first.dtype = Some(d);
    }
    for o in chain.iter_mut() {
        if o.operand.as_deref() == Some("z") {
            o.operand = Some("lin".into());
        }
    }
    // The header's op list, from the chain as it now reads (an op's own note kept where it
    // does not read z).
    let tail = ops.split_off(ops.len().saturating_sub(chain.len()));
    ops.push(if reads_output {
        format!("{} (the bias, saved)", describe(&first))
    } else {
        format!("{} (the bias)", describe(&first))
    });
    let kept = tail.len() == chain.len();
    for (i, o) in chain.iter().enumerate() {
        match tail.get(i) {
            Some(old) if kept && o.operand.as_deref() != Some("lin") => ops.push(old.clone()),
            _ => ops.push(describe(o)),
        }
    }
    chain.insert(0, first);
}

fn map_gemm<'g>(
    mp: &mut Mapper<'g>,
    core: &'g Node,
    softmax: Option<&'g Node>,
    out: &str,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let g = mp.gemm(core)?;
    let out_meta = mp.meta(&core.name).cloned()?;
    let out_dtype = dtype_of(&out_meta.dtype)?;
    let t = core.target.clone().unwrap_or_default();
    ops.push(op_name(&t).to_string());
    let mut params = ParamsSpec::default();
    if let Some(a) = g.alpha {
        params.alpha = Some(a as f32);
    }
    let (family, epilogue) = if let Some(s) = softmax {
        let Some(Arg::Node(input)) = mp.resolve(s.args.first().map(arg)) else {
            mp.problem(s, "softmax of something that is not a tensor");
            return None;
        };
        let last = through_copies(&mp.nodes, out);
        if s.name != last {
            mp.problem(
                s,
                "ops after the softmax: gemm_softmax ends with the softmax",
            );
            return None;
        }
        softmax_dim_ok(mp, s)?;
        if matches!(
            classify(s.target.as_deref().unwrap_or_default()),
            Class::Softmax { log: true }
        ) {
            params.log_softmax = Some(true);
        }
        // The ops between the GEMM and the softmax (a bias, a scale, an activation) are
        // gemm_softmax's chain, which runs before the softmax.
        let mut chain = chain_after(mp, &core.name, input, (g.batch, g.m, g.n), out_dtype, ops)?;
        if let Some(bias) = &g.bias {
            bias_first(mp, bias, &mut chain, out_dtype, ops);
        }
        ops.push(op_name(s.target.as_deref().unwrap_or_default()).into());
        (Family::GemmSoftmax, chain)
    } else {
        let mut chain = chain_after(mp, &core.name, out, (g.batch, g.m, g.n), out_dtype, ops)?;
        let reads_output = chain.iter().any(|o| o.operand.as_deref() == Some("z"));
        if let (Some(bias), true) = (&g.bias, reads_output) {
            bias_first(mp, bias, &mut chain, out_dtype, ops);
            (Family::Gemm, chain)
        } else if g.bias.is_some() {
            leading_activation(&mut chain, &mut params);
            params.bias = Some(true);
            if params.activation.is_none() {
                params.activation = Some(Activation::Identity);
            }
            (Family::GemmBiasAct, chain)
        } else {
            (Family::Gemm, chain)
        }
    };
    let layout = gemm_layout(&g);
    let what = format!(
        "{} {}{} GEMM{}{}",
        g.dtype,
        if g.batch > 1 { "batched " } else { "" },
        match (g.a, g.b) {
            (Layout::Row, Layout::Row) => "A row, B row",
            (Layout::Row, Layout::Col) => "A row, B col",
            (Layout::Col, Layout::Row) => "A col, B row",
            (Layout::Col, Layout::Col) => "A col, B col",
        },
        if g.bias.is_some() { " + bias" } else { "" },
        match family {
            Family::GemmSoftmax if epilogue.len() > usize::from(g.bias.is_some()) => {
                " then an elementwise chain and a row softmax"
            }
            Family::GemmSoftmax => " then a row softmax",
            _ if !epilogue.is_empty() => " then an elementwise chain",
            _ => "",
        }
    );
    Some(WorkloadSpec {
        name: None,
        description: format!("{what}; imported from {file}"),
        family,
        dtype: g.dtype,
        out_dtype: (out_dtype != g.dtype).then_some(out_dtype),
        acc_dtype: None,
        allow_tf32: false,
        layout: Some(layout),
        shapes: gemm_shapes(g.m, g.n, g.k, g.batch),
        params,
        tolerance: None,
        target: None,
        view: None,
        epilogue,
        after: Vec::new(),
        before: Vec::new(),
    })
}

/// The `[layout]` of a GEMM the importer found.
/// `gate(A B) * (A B2)` ending at `out`: the gate, the gated GEMM and the other, where
/// `g1` and `g2` read one A (the same node through copies) and the output is the product
/// of one through a gate activation (silu, gelu, relu, sigmoid) and the other as it is.
fn glu_pair<'g>(
    mp: &Mapper<'g>,
    g1: &'g Node,
    g2: &'g Node,
    out: &str,
) -> Option<(Activation, &'g Node, &'g Node)> {
    let o = mp.nodes.get(through_copies(&mp.nodes, out)).copied()?;
    if op_name(o.target.as_deref().unwrap_or_default()) != "mul" {
        return None;
    }
    let (Some(Arg::Node(p)), Some(Arg::Node(q))) = (
        mp.resolve(o.args.first().map(arg)),
        mp.resolve(o.args.get(1).map(arg)),
    ) else {
        return None;
    };
    let a_of = |g: &'g Node| match mp.resolve(g.args.first().map(arg)) {
        Some(Arg::Node(a)) => Some(a),
        _ => None,
    };
    if a_of(g1)? != a_of(g2)? || op_name(g1.target.as_deref()?) != op_name(g2.target.as_deref()?) {
        return None;
    }
    // (gate node, the GEMM it reads) of `x`, if `x` is an activation of a GEMM.
    let gate_of = |x: &str| -> Option<(Activation, &'g Node)> {
        let n = mp.nodes.get(x).copied()?;
        let act = match op_name(n.target.as_deref().unwrap_or_default()) {
            "silu" => Activation::Silu,
            "relu" => Activation::Relu,
            "sigmoid" => Activation::Sigmoid,
            "gelu" => match n.kwargs.get("approximate").and_then(Value::as_str) {
                Some("tanh") => Activation::GeluTanh,
                _ => Activation::GeluErf,
            },
            _ => return None,
        };
        let Some(Arg::Node(inner)) = mp.resolve(n.args.first().map(arg)) else {
            return None;
        };
        [g1, g2]
            .into_iter()
            .find(|g| g.name == inner)
            .map(|g| (act, g))
    };
    let other = |g: &Node| if g.name == g1.name { g2 } else { g1 };
    match (gate_of(p), gate_of(q)) {
        (Some((act, g)), None) if other(g).name == q => Some((act, g, other(g))),
        (None, Some((act, g))) if other(g).name == p => Some((act, g, other(g))),
        _ => None,
    }
}

/// The gemm_glu spec of [`glu_pair`]'s match: both GEMMs alike (shapes, layouts, type), no
/// bias or scale on either.
fn map_glu<'g>(
    mp: &mut Mapper<'g>,
    gate: Activation,
    gated: &'g Node,
    up: &'g Node,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let g = mp.gemm(gated)?;
    let u = mp.gemm(up)?;
    let same = (
        g.m, g.n, g.k, g.batch, g.a, g.b, g.dtype, g.shared_a, g.shared_b,
    ) == (
        u.m, u.n, u.k, u.batch, u.a, u.b, u.dtype, u.shared_a, u.shared_b,
    );
    if !same || g.bias.is_some() || u.bias.is_some() || g.alpha.is_some() || u.alpha.is_some() {
        mp.problem(
            up,
            "a gated pair of GEMMs (gemm_glu) takes two products of one A alike in shape, \
             layout and type, without a bias or a scale",
        );
        return None;
    }
    let t = op_name(gated.target.as_deref().unwrap_or_default()).to_string();
    ops.extend([
        format!("{t} (gated)"),
        format!("{t} (up)"),
        format!("{} gate", gate.name()),
        "mul".into(),
    ]);
    let params = ParamsSpec {
        gate: Some(gate),
        ..ParamsSpec::default()
    };
    Some(WorkloadSpec {
        name: None,
        description: format!(
            "{} {}(x W1) * (x W3), two GEMMs of one A; imported from {file}",
            g.dtype,
            gate.name()
        ),
        family: Family::GemmGlu,
        dtype: g.dtype,
        out_dtype: None,
        acc_dtype: None,
        allow_tf32: false,
        layout: Some(gemm_layout(&g)),
        shapes: glu_shapes(g.m, g.n, g.k, g.batch, g.dtype),
        params,
        tolerance: None,
        target: None,
        view: None,
        epilogue: Vec::new(),
        after: Vec::new(),
        before: Vec::new(),
    })
}

/// [`gemm_shapes`] for gemm_glu, whose template reads and writes every row by TMA (16-byte
/// aligned rows, no fallback): the validation shapes keep m odd, and round n and k up to
/// 16 bytes (still off every tile).
fn glu_shapes(m: i64, n: i64, k: i64, batch: i64, dtype: DType) -> Vec<ShapeSpec> {
    let per = (16 / dtype.bytes().max(1)) as i64;
    let up = |x: Option<i64>| x.map(|x| (x + per - 1) / per * per);
    let mut v = gemm_shapes(m, n, k, batch);
    for s in v.iter_mut().skip(1) {
        s.n = up(s.n);
        s.k = up(s.k);
    }
    dedup(&mut v);
    v
}

fn gemm_layout(g: &GemmDims) -> LayoutSpec {
    LayoutSpec {
        a: Some(g.a),
        b: Some(g.b),
        c: None,
        shared: match (g.shared_a, g.shared_b) {
            (true, _) => Some(vec![SharedOperand::A]),
            (_, true) => Some(vec![SharedOperand::B]),
            _ => None,
        },
    }
}

fn softmax_dim_ok(mp: &mut Mapper<'_>, s: &Node) -> Option<()> {
    let rank = s.val.as_ref().map_or(0, |m| m.shape.len()) as i64;
    let dim = param(s, 1, "dim").and_then(Value::as_i64).unwrap_or(-1);
    if dim != -1 && dim != rank - 1 {
        mp.problem(s, format!("softmax over dimension {dim} of {rank}: cutesmith normalizes rows (the last dimension)"));
        return None;
    }
    let half_to_float = param(s, 2, "half_to_float")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let dtype_kw = s.kwargs.get("dtype").is_some_and(|v| !v.is_null())
        || s.args.get(2).is_some_and(|v| v.get("dtype").is_some());
    if half_to_float || dtype_kw {
        mp.problem(s, "softmax with an output dtype other than its input's");
        return None;
    }
    Some(())
}

/// The element type of a float32, float16 or bfloat16 input, or (a problem named on `n`,
/// saying what `family_takes` them) `None`.
fn float_input(mp: &mut Mapper<'_>, n: &Node, m: &Meta, family_takes: &str) -> Option<DType> {
    let dtype = dtype_of(&m.dtype).filter(|d| !d.is_fp8());
    if dtype.is_none() {
        mp.problem(
            n,
            format!(
                "input of dtype {}; {family_takes} float32, float16 or bfloat16",
                m.dtype
            ),
        );
    }
    dtype
}

/// The rows (product of the leading dimensions) and columns (last dimension) of a
/// contiguous input.
fn rows_of(mp: &mut Mapper<'_>, n: &Node, m: &Meta) -> Option<(i64, i64)> {
    if !contiguous(m) {
        mp.problem(
            n,
            format!(
                "its input {:?} (strides {:?}) is not contiguous",
                m.shape, m.stride
            ),
        );
        return None;
    }
    let cols = *m.shape.last().unwrap_or(&1);
    let rows = m.shape.iter().product::<i64>() / cols.max(1);
    Some((rows.max(1), cols))
}

fn map_softmax(
    mp: &mut Mapper<'_>,
    graph: &Graph,
    s: &Node,
    out: &str,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let Some(Arg::Node(input)) = s.args.first().map(arg) else {
        mp.problem(s, "softmax of something that is not a tensor");
        return None;
    };
    let input = input.to_string();
    softmax_dim_ok(mp, s)?;
    if s.name != out {
        mp.problem(
            s,
            "ops after the softmax: the softmax families fuse nothing after it",
        );
        return None;
    }
    let log = matches!(
        classify(s.target.as_deref().unwrap_or_default()),
        Class::Softmax { log: true }
    );
    // Elementwise ops before the softmax (a scale, an attention mask added, a causal
    // masked_fill) are its [[before]] ops: the chain from the Model input they start at to
    // the softmax's input, over its m rows of n or, with operands broadcast over some dims
    // (a [B, 1, 1, T] mask), over its dims.
    let (meta, before, nd) = if mp.source(&input).is_none() {
        let x = elementwise_source(mp, graph, &input)?;
        let meta = x.val.clone()?;
        if mp.meta(&input).map(|m| &m.shape) != Some(&meta.shape) {
            mp.problem(
                s,
                format!(
                    "its input `{input}` is not an input of Model of its shape changed only by \
                     elementwise ops: the softmax families fuse elementwise ops before it"
                ),
            );
            return None;
        }
        let dtype = float_input(mp, x, &meta, "softmax takes")?;
        // Contiguous (a problem named otherwise); the rows are found again below.
        rows_of(mp, x, &meta)?;
        let (chain, nd) = chain_rows_or_dims(mp, &x.name, &meta, &input, dtype, ops, true)?;
        (meta, chain, nd)
    } else {
        (mp.meta(&input).cloned()?, Vec::new(), None)
    };
    let dtype = float_input(mp, s, &meta, "softmax takes")?;
    let (m, n) = rows_of(mp, s, &meta)?;
    ops.push(op_name(s.target.as_deref().unwrap_or_default()).into());
    Some(WorkloadSpec {
        name: None,
        description: format!(
            "{dtype} row {}{} over {}; imported from {file}",
            if log { "log-softmax" } else { "softmax" },
            match before.len() {
                0 => String::new(),
                1 => " after 1 elementwise op".into(),
                k => format!(" after {k} elementwise ops"),
            },
            over_dims(&nd).unwrap_or_else(|| format!("{m} rows of {n}"))
        ),
        family: if log {
            Family::LogSoftmax
        } else {
            Family::Softmax
        },
        dtype,
        out_dtype: None,
        acc_dtype: None,
        allow_tf32: false,
        layout: None,
        shapes: nd.as_deref().map_or_else(|| row_shapes(m, n), nd_shapes),
        params: ParamsSpec::default(),
        tolerance: None,
        target: None,
        view: None,
        epilogue: Vec::new(),
        after: Vec::new(),
        before,
    })
}

/// The Model input the value `out` is computed from through elementwise ops: one an op
/// reads, of `out`'s shape where there is one (`a.unsqueeze(1) * b` runs over b, a is a
/// column operand), else the first read as an op's first argument; None (a problem named
/// on `out`) when no op reads one.
fn elementwise_source<'g>(mp: &mut Mapper<'_>, graph: &'g Graph, out: &str) -> Option<&'g Node> {
    let inputs: Vec<&Node> = graph
        .nodes
        .iter()
        .filter(|n| n.op == "placeholder" && n.kind.as_deref() == Some("user_input"))
        .collect();
    // The input the output depends on through elementwise ops: one an op reads, of the
    // output's shape where there is one (`a.unsqueeze(1) * b` runs over b, a is a column
    // operand), else the first.
    // `first_only`: read as an op's first argument.
    let read = |i: &Node, first_only: bool| {
        graph.nodes.iter().any(|n| {
            let mut args = n.args.iter().chain(n.kwargs.values());
            let reads = |a: &Value| matches!(arg(a), Arg::Node(v) if v == i.name);
            n.op == "call_function"
                && if first_only {
                    n.args.first().is_some_and(reads)
                } else {
                    args.any(reads)
                }
        })
    };
    let out_shape = mp.meta(out).map(|m| m.shape.clone());
    let same_shape = |i: &Node| i.val.as_ref().map(|v| &v.shape) == out_shape.as_ref();
    let Some(x) = inputs
        .iter()
        .find(|i| read(i, false) && same_shape(i))
        .or_else(|| inputs.iter().find(|i| read(i, true)))
    else {
        mp.problems.push(Unmapped {
            node: out.into(),
            target: "output".into(),
            message: "no op reads an input of Model".into(),
        });
        return None;
    };
    Some(x)
}

/// The elementwise chain from input `x` (of `meta`, m rows of n) to `out`: its operands as
/// row, col or matrix tensors of the m x n view; failing that, over x's dims (`operand =
/// "broadcast"`: a [1, C, 1, 1] bias, an eval-mode BatchNorm's per-channel vectors, a
/// [B, 1, 1, T] attention mask), with those dims; reporting the first attempt's problems if
/// that fails too. With `matrices_over_dims` (a softmax's ops), the second attempt's index
/// ops (a causal mask) see the matrices of x's last two dims, as torch's triu / tril do.
fn chain_rows_or_dims(
    mp: &mut Mapper<'_>,
    x: &str,
    meta: &Meta,
    out: &str,
    dtype: DType,
    ops: &mut Vec<String>,
    matrices_over_dims: bool,
) -> Option<(Vec<OpSpec>, Option<Vec<i64>>)> {
    // x's rows (every dim but the last) and columns (the last), as `rows_of` found them.
    let n = meta.shape.last().copied().unwrap_or(1).max(1);
    let m = (meta.shape.iter().product::<i64>() / n).max(1);
    let before = (mp.problems.len(), ops.len());
    let mut nd = None;
    let chain = match chain_after(mp, x, out, (1, m, n), dtype, ops) {
        Some(c) => Some(c),
        None if meta.shape.len() >= 2 => {
            let first: Vec<Unmapped> = mp.problems.drain(before.0..).collect();
            ops.truncate(before.1);
            mp.out_nd = Some(meta.shape.clone());
            // A softmax's index ops over dims see the matrices of the last two dims.
            let rows = meta.shape[meta.shape.len() - 2].max(1);
            let view = if matrices_over_dims && m % rows == 0 {
                (m / rows, rows, n)
            } else {
                (1, m, n)
            };
            let c = chain_after(mp, x, out, view, dtype, ops);
            mp.out_nd = None;
            if c.is_none() {
                // Both attempts' problems, the second's that the first did not name once.
                let second: Vec<Unmapped> = mp.problems.drain(before.0..).collect();
                mp.problems.extend(first);
                for u in second {
                    if !mp
                        .problems
                        .iter()
                        .any(|p| p.node == u.node && p.message == u.message)
                    {
                        mp.problems.push(Unmapped {
                            message: format!("over the output's dims: {}", u.message),
                            ..u
                        });
                    }
                }
            } else {
                nd = Some(meta.shape.clone());
            }
            c
        }
        None => None,
    };
    Some((chain?, nd))
}

fn map_activation(
    mp: &mut Mapper<'_>,
    graph: &Graph,
    out: &str,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let x = elementwise_source(mp, graph, out)?;
    let meta = x.val.clone()?;
    let dtype = float_input(mp, x, &meta, "activations take")?;
    let (m, n) = rows_of(mp, x, &meta)?;
    let mut params = ParamsSpec::default();
    let (mut chain, nd) = chain_rows_or_dims(mp, &x.name, &meta, out, dtype, ops, false)?;
    if chain.is_empty() {
        mp.problems.push(Unmapped {
            node: out.into(),
            target: "output".into(),
            message: "Model returns its input: nothing to compute".into(),
        });
        return None;
    }
    leading_activation(&mut chain, &mut params);
    let names: Vec<String> = ops.clone();
    Some(WorkloadSpec {
        name: None,
        description: format!(
            "{dtype} elementwise {} over {}; imported from {file}",
            names.join(", "),
            over_dims(&nd).unwrap_or_else(|| format!("{m} x {n}"))
        ),
        family: Family::Activation,
        dtype,
        out_dtype: None,
        acc_dtype: None,
        allow_tf32: false,
        layout: None,
        shapes: nd.as_deref().map_or_else(|| row_shapes(m, n), nd_shapes),
        params,
        tolerance: None,
        target: None,
        view: None,
        epilogue: chain,
        after: Vec::new(),
        before: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{NormKind, ReduceKind, ScanKind, TotalKind};

    fn node(name: &str, target: &str, args: Value, shape: &[i64], stride: &[i64]) -> Value {
        json_node(
            name,
            "call_function",
            Some(target),
            None,
            args,
            shape,
            stride,
        )
    }

    fn json_node(
        name: &str,
        op: &str,
        target: Option<&str>,
        kind: Option<&str>,
        args: Value,
        shape: &[i64],
        stride: &[i64],
    ) -> Value {
        serde_json::json!({
            "name": name, "op": op, "target": target, "kind": kind, "args": args,
            "kwargs": {}, "val": {"shape": shape, "stride": stride, "dtype": "bfloat16"}
        })
    }

    fn input(name: &str, shape: &[i64], stride: &[i64]) -> Value {
        json_node(
            name,
            "placeholder",
            None,
            Some("user_input"),
            serde_json::json!([]),
            shape,
            stride,
        )
    }

    /// A module buffer (its placeholder's kind is "buffer").
    fn buffer(name: &str, shape: &[i64], stride: &[i64]) -> Value {
        json_node(
            name,
            "placeholder",
            None,
            Some("buffer"),
            serde_json::json!([]),
            shape,
            stride,
        )
    }

    fn graph(nodes: Vec<Value>, out: &str) -> Graph {
        serde_json::from_value(serde_json::json!({
            "torch": "test", "nodes": nodes, "output": [{"node": out}]
        }))
        .unwrap()
    }

    fn r(n: &str) -> Value {
        serde_json::json!({"node": n})
    }

    /// A node shaped like `mm`'s result (64 x 16, row-major).
    fn out_node(name: &str, target: &str, args: Value) -> Value {
        node(name, target, args, &[64, 16], &[16, 1])
    }

    /// `bn = aten.batch_norm(x, w, bias, rm, rm, training, 0.1, eps, false)`.
    fn batch_norm_node(
        x: &str,
        bias: Option<&str>,
        training: bool,
        eps: f64,
        shape: &[i64],
        stride: &[i64],
    ) -> Value {
        node(
            "bn",
            "aten.batch_norm.default",
            serde_json::json!([
                r(x),
                r("w"),
                bias.map_or(Value::Null, r),
                r("rm"),
                r("rm"),
                training,
                0.1,
                eps,
                false
            ]),
            shape,
            stride,
        )
    }

    /// The inputs a (64 x 32) and b (32 x 16) with these strides, and `mm = a @ b`.
    fn mm_nodes(a_stride: &[i64], b_stride: &[i64]) -> Vec<Value> {
        vec![
            input("a", &[64, 32], a_stride),
            input("b", &[32, 16], b_stride),
            node(
                "mm",
                "aten.mm.default",
                serde_json::json!([r("a"), r("b")]),
                &[64, 16],
                &[16, 1],
            ),
        ]
    }

    /// F.normalize (p = 2 with its clamp_min and expand_as) over the last dim, and L1
    /// written out over a middle dim; a mean over non-kept dims is still refused.
    #[test]
    fn written_out_l2_and_l1_norms_map() {
        let (sh, st) = (&[8, 100][..], &[100, 1][..]);
        let g = graph(
            vec![
                input("x", sh, st),
                node(
                    "nrm",
                    "aten.linalg_vector_norm.default",
                    serde_json::json!([r("x"), 2.0, [-1], true]),
                    &[8, 1],
                    &[1, 1],
                ),
                node(
                    "cl",
                    "aten.clamp_min.default",
                    serde_json::json!([r("nrm"), 1e-12]),
                    &[8, 1],
                    &[1, 1],
                ),
                node(
                    "ex",
                    "aten.expand_as.default",
                    serde_json::json!([r("cl"), r("x")]),
                    sh,
                    &[1, 0],
                ),
                node(
                    "div",
                    "aten.div.Tensor",
                    serde_json::json!([r("x"), r("ex")]),
                    sh,
                    st,
                ),
                node(
                    "relu",
                    "aten.relu.default",
                    serde_json::json!([r("div")]),
                    sh,
                    st,
                ),
            ],
            "relu",
        );
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.family, Family::Norm);
        assert_eq!(
            (spec.params.norm, spec.params.eps),
            (Some(NormKind::L2), Some(1e-12))
        );
        assert_eq!((spec.shapes[0].m, spec.shapes[0].n), (Some(8), Some(100)));
        assert_eq!(spec.epilogue.len(), 1);
        assert_eq!(ops, vec!["l2 norm".to_string(), "relu".to_string()]);
        // L1 over dim 1 of (4, 6, 5): 4 batches of 5 rows of 6, side by side; x divided by
        // the sum (or mean) of |x| over that dim.
        let (sh, st) = (&[4, 6, 5][..], &[30, 5, 1][..]);
        let l1 = |reduce: &str| {
            graph(
                vec![
                    input("x", sh, st),
                    node(
                        "ab",
                        "aten.abs.default",
                        serde_json::json!([r("x")]),
                        sh,
                        st,
                    ),
                    node(
                        "s",
                        reduce,
                        serde_json::json!([r("ab"), [1], true]),
                        &[4, 1, 5],
                        &[5, 5, 1],
                    ),
                    node(
                        "div",
                        "aten.div.Tensor",
                        serde_json::json!([r("x"), r("s")]),
                        sh,
                        st,
                    ),
                ],
                "div",
            )
        };
        let g = l1("aten.sum.dim_IntList");
        let (spec, _) = map_graph(&g, "t.py").unwrap();
        assert_eq!(
            (spec.params.norm, spec.params.eps),
            (Some(NormKind::L1), Some(0.0))
        );
        assert_eq!(spec.layout.and_then(|l| l.a), Some(Layout::Col));
        let s0 = spec.shapes[0].clone();
        assert_eq!((s0.batch, s0.m, s0.n), (Some(4), Some(5), Some(6)));
        // The same sum without a division is a reduction: 4 batches of 5 rows side by side.
        let g = graph(
            vec![
                input("x", sh, st),
                node(
                    "s",
                    "aten.sum.dim_IntList",
                    serde_json::json!([r("x"), [1]]),
                    &[4, 5],
                    &[5, 1],
                ),
            ],
            "s",
        );
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(
            (spec.family, spec.params.reduce),
            (Family::Reduce, Some(ReduceKind::Sum))
        );
        assert_eq!(spec.layout.and_then(|l| l.a), Some(Layout::Col));
        let s0 = spec.shapes[0].clone();
        assert_eq!(
            (s0.batch, s0.m, s0.k, s0.n),
            (Some(4), Some(5), Some(6), None)
        );
        assert_eq!(ops, vec!["sum over dims 1..=1".to_string()]);
        // KernelBench's L1Norm, x / mean(|x|, dim 1, keepdim): L1, then times n = 6.
        let g = l1("aten.mean.dim");
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.params.norm, Some(NormKind::L1));
        assert_eq!(
            (spec.epilogue[0].op.as_str(), spec.epilogue[0].value),
            ("mul", Some(6.0))
        );
        assert_eq!(ops[0], "l1 norm");
        // KernelBench's FrobeniusNorm, x / torch.norm(x): L2 over every element, one row.
        let g = graph(
            vec![
                input("x", sh, st),
                node(
                    "nrm",
                    "aten.linalg_vector_norm.default",
                    serde_json::json!([r("x")]),
                    &[],
                    &[],
                ),
                node(
                    "div",
                    "aten.div.Tensor",
                    serde_json::json!([r("x"), r("nrm")]),
                    sh,
                    st,
                ),
            ],
            "div",
        );
        let (spec, _) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.params.norm, Some(NormKind::L2));
        assert_eq!((spec.shapes[0].m, spec.shapes[0].n), (Some(1), Some(120)));
        assert!(spec.layout.is_none());
    }

    /// Reductions over dims: `torch.max(x, dim)[0]` (values through getitem 0) with a chain
    /// after it; logsumexp over the last dim (rows); refused: ops after the indices
    /// (getitem 1, an argmax), dims that are not adjacent, a tensor operand after it, one after a GEMM.
    /// A reduction of a computed tensor takes the elementwise chain from an input of Model
    /// as its [[before]] ops (`((p - t) ** 2).mean()`, a per-row weight), the loss ops map
    /// to their elementwise parts (through `broadcast_tensors`), and an operand that fits no
    /// index of A is refused.
    #[test]
    fn losses_map_to_a_reduction_with_ops_before_it() {
        let (sh, st) = (&[8, 64][..], &[64, 1][..]);
        let mse = |w_shape: &[i64], w_stride: &[i64]| {
            graph(
                vec![
                    input("p", sh, st),
                    input("t", sh, st),
                    input("w", w_shape, w_stride),
                    node(
                        "d",
                        "aten.sub.Tensor",
                        serde_json::json!([r("p"), r("t")]),
                        sh,
                        st,
                    ),
                    node(
                        "q",
                        "aten.pow.Tensor_Scalar",
                        serde_json::json!([r("d"), 2]),
                        sh,
                        st,
                    ),
                    node(
                        "qw",
                        "aten.mul.Tensor",
                        serde_json::json!([r("q"), r("w")]),
                        sh,
                        st,
                    ),
                    node(
                        "m",
                        "aten.mean.dim",
                        serde_json::json!([r("qw"), [1]]),
                        &[8],
                        &[1],
                    ),
                ],
                "m",
            )
        };
        // A weight per position of the reduced dim: a row operand (k values).
        let (spec, ops) = map_graph(&mse(&[64], &[1]), "t.py").unwrap();
        assert_eq!(spec.family, Family::Reduce);
        assert_eq!(spec.params.reduce, Some(ReduceKind::Mean));
        let before: Vec<(&str, Option<&str>)> = spec
            .before
            .iter()
            .map(|s| (s.op.as_str(), s.operand.as_deref()))
            .collect();
        assert_eq!(
            before,
            vec![("sub", Some("matrix")), ("pow", None), ("mul", Some("row"))]
        );
        assert!(spec.epilogue.is_empty());
        assert_eq!((spec.shapes[0].m, spec.shapes[0].k), (Some(8), Some(64)));
        assert!(ops.iter().any(|o| o == "sub matrix"), "{ops:?}");
        // The spec it writes validates, with the before chain's three ops and two tensors.
        let text = toml::to_string(&spec).unwrap();
        let w = crate::spec::Workload::parse("losses_test.toml", &text).unwrap();
        assert_eq!(w.before_chain().steps.len(), 3);
        assert_eq!(w.before_chain().tensors.len(), 2);
        // A weight per row of the kept dim (8 x 1): a column operand.
        let (spec, _) = map_graph(&mse(&[8, 1], &[1, 1]), "t.py").unwrap();
        assert_eq!(spec.before[2].operand.as_deref(), Some("col"));
        // A weight of another shape fits no index of A.
        let e = map_graph(&mse(&[4, 1], &[1, 1]), "t.py").unwrap_err();
        assert!(
            e.iter()
                .any(|u| u.message.contains("not by one chain of elementwise ops")),
            "{e:?}"
        );

        // F.smooth_l1_loss(p, t, beta=0.5) (mean), its operands through broadcast_tensors.
        let g = graph(
            vec![
                input("p", sh, st),
                input("t", sh, st),
                node(
                    "bt",
                    "aten.broadcast_tensors.default",
                    serde_json::json!([[r("p"), r("t")]]),
                    sh,
                    st,
                ),
                node(
                    "g0",
                    "<built-in function getitem>",
                    serde_json::json!([r("bt"), 0]),
                    sh,
                    st,
                ),
                node(
                    "g1",
                    "<built-in function getitem>",
                    serde_json::json!([r("bt"), 1]),
                    sh,
                    st,
                ),
                node(
                    "l",
                    "aten.smooth_l1_loss.default",
                    serde_json::json!([r("g0"), r("g1"), 1, 0.5]),
                    &[],
                    &[],
                ),
            ],
            "l",
        );
        let (spec, _) = map_graph(&g, "t.py").unwrap();
        // An f16 sum of every element keeps one row (a total sum into f16 is refused: it
        // may overflow); a bf16 one is rows and their total.
        for (dtype, total) in [("float16", None), ("bfloat16", Some(TotalKind::Sum))] {
            let g = graph(
                vec![
                    typed(input("x", &[8, 64], &[64, 1]), dtype),
                    typed(
                        node(
                            "s",
                            "aten.sum.default",
                            serde_json::json!([r("x")]),
                            &[],
                            &[],
                        ),
                        dtype,
                    ),
                ],
                "s",
            );
            let (spec, _) = map_graph(&g, "t.py").unwrap();
            assert_eq!(spec.params.total, total, "{dtype}");
            crate::spec::Workload::parse("sum.toml", &toml::to_string(&spec).unwrap()).unwrap();
        }
        // A whole tensor's mean: its rows (8 of 64), then their total.
        assert_eq!(spec.params.reduce, Some(ReduceKind::Mean));
        assert_eq!(spec.params.total, Some(TotalKind::Mean));
        assert_eq!((spec.shapes[0].m, spec.shapes[0].k), (Some(8), Some(64)));
        assert!(spec.shapes.iter().any(|s| s.m.is_some_and(|m| m <= 4)));
        let w = crate::spec::Workload::parse("huber_test.toml", &toml::to_string(&spec).unwrap())
            .unwrap();
        // 0.5 d^2 / beta below beta, |d| - beta / 2 above: the chain at (x, t).
        let huber = |x: f64, t: f64| w.before_chain().eval(x, &[t]);
        assert!((huber(1.2, 1.0) - 0.5 * 0.04 / 0.5).abs() < 1e-12);
        assert!((huber(-2.0, 1.0) - (3.0 - 0.25)).abs() < 1e-12);
        // kl_div(log(p), t, reduction=sum) / 8 (batchmean): A is t, the operand p.
        let g = graph(
            vec![
                input("p", sh, st),
                input("t", sh, st),
                node(
                    "lp",
                    "aten.log.default",
                    serde_json::json!([r("p")]),
                    sh,
                    st,
                ),
                node(
                    "k",
                    "aten.kl_div.default",
                    serde_json::json!([r("lp"), r("t"), 2]),
                    &[],
                    &[],
                ),
                node(
                    "b",
                    "aten.div.Tensor",
                    serde_json::json!([r("k"), 8]),
                    &[],
                    &[],
                ),
            ],
            "b",
        );
        let (spec, _) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.params.reduce, Some(ReduceKind::Sum));
        assert_eq!(spec.epilogue.len(), 1);
        let w =
            crate::spec::Workload::parse("kl_test.toml", &toml::to_string(&spec).unwrap()).unwrap();
        // t log|t / p| at t = 0.2, p = 0.5 (the abs keeps signed validation inputs defined).
        let want = 0.2 * (0.2f64 / 0.5).ln();
        assert!((w.before_chain().eval(0.2, &[0.5]) - want).abs() < 1e-12);
        assert!(w.before_chain().eval(-0.2, &[0.5]).is_finite());
        // A zero target adds 0 (ATen's xlogy(0, 0) = 0), not NaN.
        assert_eq!(w.before_chain().eval(0.0, &[0.5]), 0.0);
        // reduction="none" is no reduction: the loss op is named as unknown.
        let g = graph(
            vec![
                input("p", sh, st),
                input("t", sh, st),
                node(
                    "l",
                    "aten.mse_loss.default",
                    serde_json::json!([r("p"), r("t"), 0]),
                    sh,
                    st,
                ),
            ],
            "l",
        );
        assert!(map_graph(&g, "t.py").is_err());
    }

    /// torch.argmax / argmin over a dim of an input: the reduce family's index kinds (D
    /// int64 by the spec's default); ops before or after one are refused, naming why.
    /// A cross entropy of a Model input's logits (reshaped from (B, T, V) to rows, as an LLM
    /// does) against int64 targets maps to reduce = "cross_entropy" with torch's reduction
    /// and ignore_index; so does nll_loss of a log_softmax over the last dim. A class
    /// weight, label smoothing, float targets, rows of classes not last, computed logits and
    /// ops after the loss are refused at the loss.
    #[test]
    fn cross_entropies_map_to_the_reduce_family() {
        let ce = |args: Value, kwargs: Value, target_dtype: &str| {
            let mut loss = node("ce", "aten.cross_entropy_loss.default", args, &[], &[]);
            loss["kwargs"] = kwargs;
            graph(
                vec![
                    input("x", &[2, 8, 100], &[800, 100, 1]),
                    typed(input("t", &[2, 8], &[8, 1]), target_dtype),
                    node(
                        "v",
                        "aten.view.default",
                        serde_json::json!([r("x"), [-1, 100]]),
                        &[16, 100],
                        &[100, 1],
                    ),
                    typed(
                        node(
                            "vt",
                            "aten.view.default",
                            serde_json::json!([r("t"), [-1]]),
                            &[16],
                            &[1],
                        ),
                        target_dtype,
                    ),
                    loss,
                ],
                "ce",
            )
        };
        let no = serde_json::json!({});
        let (spec, ops) = map_graph(
            &ce(serde_json::json!([r("v"), r("vt")]), no.clone(), "int64"),
            "t.py",
        )
        .unwrap();
        assert_eq!(
            (
                spec.family,
                spec.dtype,
                spec.params.reduce,
                spec.params.total
            ),
            (
                Family::Reduce,
                DType::BF16,
                Some(ReduceKind::CrossEntropy),
                Some(TotalKind::Mean)
            )
        );
        assert_eq!(spec.params.ignore_index, None);
        assert_eq!((spec.shapes[0].m, spec.shapes[0].k), (Some(16), Some(100)));
        assert!(
            ops[0].contains("cross_entropy of 16 rows of 100 logits"),
            "{ops:?}"
        );
        // reduction = none (0), ignore_index 7; sum (2) by keyword.
        let (spec, _) = map_graph(
            &ce(
                serde_json::json!([r("v"), r("vt"), null, 0, 7]),
                no.clone(),
                "int64",
            ),
            "t.py",
        )
        .unwrap();
        assert_eq!(
            (spec.params.total, spec.params.ignore_index),
            (Some(TotalKind::None), Some(7))
        );
        let (spec, _) = map_graph(
            &ce(
                serde_json::json!([r("v"), r("vt")]),
                serde_json::json!({"reduction": 2}),
                "int64",
            ),
            "t.py",
        )
        .unwrap();
        assert_eq!(spec.params.total, Some(TotalKind::Sum));
        // The refusals, each at the loss, with its reason alone (not an unknown op besides).
        let weighted = ce(
            serde_json::json!([r("v"), r("vt"), r("x")]),
            no.clone(),
            "int64",
        );
        refused_at(&weighted, "ce", "class weight");
        let err = map_graph(&weighted, "t.py").unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        refused_at(
            &ce(
                serde_json::json!([r("v"), r("vt"), null, 1, -100, 0.1]),
                no.clone(),
                "int64",
            ),
            "ce",
            "label_smoothing",
        );
        refused_at(
            &ce(serde_json::json!([r("v"), r("vt")]), no.clone(), "float32"),
            "ce",
            "class probabilities",
        );
        // nll_loss of a log_softmax over the last dim, and of one over dim 0.
        let nll = |dim: i64| {
            graph(
                vec![
                    input("x", &[16, 100], &[100, 1]),
                    typed(input("t", &[16], &[1]), "int64"),
                    node(
                        "ls",
                        "aten.log_softmax.int",
                        serde_json::json!([r("x"), dim]),
                        &[16, 100],
                        &[100, 1],
                    ),
                    node(
                        "nl",
                        "aten.nll_loss_nd.default",
                        serde_json::json!([r("ls"), r("t"), null, 2, 3]),
                        &[],
                        &[],
                    ),
                ],
                "nl",
            )
        };
        let (spec, _) = map_graph(&nll(-1), "t.py").unwrap();
        assert_eq!(
            (
                spec.params.reduce,
                spec.params.total,
                spec.params.ignore_index
            ),
            (
                Some(ReduceKind::CrossEntropy),
                Some(TotalKind::Sum),
                Some(3)
            )
        );
        refused_at(&nll(0), "ls", "other than the last");
        // Logits computed (a relu before the loss), an op after it, (N, C, d) logits (the
        // classes not each row's last dim): a loss of x (shape, strides) against t, with
        // nodes before and after it.
        let loss = |x: (&[i64], &[i64]),
                    t: (&[i64], &[i64]),
                    pre: Vec<Value>,
                    of: &str,
                    post: Vec<Value>| {
            let mut nodes = vec![input("x", x.0, x.1), typed(input("t", t.0, t.1), "int64")];
            nodes.extend(pre);
            nodes.push(node(
                "ce",
                "aten.cross_entropy_loss.default",
                serde_json::json!([r(of), r("t")]),
                &[],
                &[],
            ));
            let out = if post.is_empty() { "ce" } else { "q" };
            nodes.extend(post);
            graph(nodes, out)
        };
        let rows = (&[16i64, 100][..], &[100i64, 1][..]);
        let targets = (&[16i64][..], &[1i64][..]);
        let relu = node(
            "p",
            "aten.relu.default",
            serde_json::json!([r("x")]),
            rows.0,
            rows.1,
        );
        refused_at(
            &loss(rows, targets, vec![relu], "p", vec![]),
            "ce",
            "computed",
        );
        let twice = node(
            "q",
            "aten.mul.Tensor",
            serde_json::json!([r("ce"), 2.0]),
            &[],
            &[],
        );
        refused_at(
            &loss(rows, targets, vec![], "x", vec![twice]),
            "ce",
            "ops after a cross entropy",
        );
        let nd = loss(
            (&[4, 10, 7], &[70, 7, 1]),
            (&[4, 7], &[7, 1]),
            vec![],
            "x",
            vec![],
        );
        refused_at(&nd, "ce", "(N, C) rows");
    }

    #[test]
    fn argmax_and_argmin_map_to_index_reductions() {
        let (sh, st) = (&[4, 6, 5][..], &[30, 5, 1][..]);
        let g = |op: &str, dim: i64, pre: bool, post: bool| {
            let mut nodes = vec![input("x", sh, st)];
            if pre {
                nodes.push(node(
                    "p",
                    "aten.relu.default",
                    serde_json::json!([r("x")]),
                    sh,
                    st,
                ));
            }
            let out_sh: Vec<i64> = sh
                .iter()
                .enumerate()
                .filter(|(i, _)| *i as i64 != dim)
                .map(|(_, v)| *v)
                .collect();
            let out_st: Vec<i64> = vec![out_sh[1], 1];
            nodes.push(typed(
                node(
                    "am",
                    op,
                    serde_json::json!([r(if pre { "p" } else { "x" }), dim]),
                    &out_sh,
                    &out_st,
                ),
                "int64",
            ));
            if post {
                nodes.push(node(
                    "q",
                    "aten.add.Tensor",
                    serde_json::json!([r("am"), 1]),
                    &out_sh,
                    &out_st,
                ));
            }
            graph(nodes, if post { "q" } else { "am" })
        };
        let (spec, ops) = map_graph(&g("aten.argmax.default", 1, false, false), "t.py").unwrap();
        assert_eq!(
            (spec.family, spec.params.reduce),
            (Family::Reduce, Some(ReduceKind::Argmax))
        );
        assert!(spec.epilogue.is_empty() && spec.before.is_empty());
        assert_eq!(
            spec.layout.and_then(|l| l.a),
            Some(Layout::Col),
            "a middle dim: rows side by side"
        );
        assert_eq!(ops, vec!["argmax over dims 1..=1".to_string()]);
        let (spec, _) = map_graph(&g("aten.argmin.default", 2, false, false), "t.py").unwrap();
        assert_eq!(spec.params.reduce, Some(ReduceKind::Argmin));
        let text = toml::to_string(&spec).unwrap();
        let w = crate::spec::Workload::parse("argmin_test.toml", &text).unwrap();
        assert_eq!(w.out_dtype(), crate::spec::DType::I64);
        refused_at(
            &g("aten.argmax.default", 1, true, false),
            "am",
            "computed tensor",
        );
        refused_at(
            &g("aten.argmin.default", 1, false, true),
            "am",
            "ops after an argmin",
        );
    }

    #[test]
    fn reductions_over_dims_map_to_the_reduce_family() {
        let (sh, st) = (&[4, 6, 5][..], &[30, 5, 1][..]);
        let max_graph = |item: i64, out: &str| {
            graph(
                vec![
                    input("x", sh, st),
                    node(
                        "mx",
                        "aten.max.dim",
                        serde_json::json!([r("x"), 1]),
                        &[4, 5],
                        &[5, 1],
                    ),
                    node(
                        "v",
                        "<built-in function getitem>",
                        serde_json::json!([r("mx"), 0]),
                        &[4, 5],
                        &[5, 1],
                    ),
                    node(
                        "ix",
                        "<built-in function getitem>",
                        serde_json::json!([r("mx"), 1]),
                        &[4, 5],
                        &[5, 1],
                    ),
                    node(
                        "lr",
                        "aten.leaky_relu.default",
                        serde_json::json!([r(if item == 0 { "v" } else { "ix" }), 0.1]),
                        &[4, 5],
                        &[5, 1],
                    ),
                ],
                out,
            )
        };
        let (spec, ops) = map_graph(&max_graph(0, "lr"), "t.py").unwrap();
        assert_eq!(
            (spec.family, spec.params.reduce),
            (Family::Reduce, Some(ReduceKind::Max))
        );
        assert_eq!(spec.epilogue.len(), 1);
        assert_eq!(
            ops,
            vec!["max over dims 1..=1".to_string(), "leaky_relu".into()]
        );
        // The indices are not the reduction's value; alone (torch.max(x, dim)[1]) they are
        // its argmax, which nothing may follow.
        assert!(map_graph(&max_graph(1, "lr"), "t.py").is_err());
        let (spec, _) = map_graph(&max_graph(1, "ix"), "t.py").unwrap();
        assert_eq!(spec.params.reduce, Some(ReduceKind::Argmax));
        // Over a dim of size 1 too (the indices are zeros; the values would be the input).
        let (sh1, st1) = (&[4, 1, 5][..], &[5, 5, 1][..]);
        let g = graph(
            vec![
                input("x", sh1, st1),
                node(
                    "mx",
                    "aten.max.dim",
                    serde_json::json!([r("x"), 1]),
                    &[4, 5],
                    &[5, 1],
                ),
                typed(
                    node(
                        "ix",
                        "<built-in function getitem>",
                        serde_json::json!([r("mx"), 1]),
                        &[4, 5],
                        &[5, 1],
                    ),
                    "int64",
                ),
            ],
            "ix",
        );
        let (spec, _) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.params.reduce, Some(ReduceKind::Argmax));
        assert_eq!(spec.shapes[0].k, Some(1));
        // logsumexp over the last dim of (8, 100): 8 rows of 100, row-major.
        let (sh2, st2) = (&[8, 100][..], &[100, 1][..]);
        let lse = |dims: serde_json::Value| {
            graph(
                vec![
                    input("x", sh2, st2),
                    node(
                        "l",
                        "aten.logsumexp.default",
                        serde_json::json!([r("x"), dims, true]),
                        &[8, 1],
                        &[1, 1],
                    ),
                ],
                "l",
            )
        };
        let (spec, _) = map_graph(&lse(serde_json::json!([-1])), "t.py").unwrap();
        assert_eq!(spec.params.reduce, Some(ReduceKind::Logsumexp));
        assert!(spec.layout.is_none());
        assert_eq!((spec.shapes[0].m, spec.shapes[0].k), (Some(8), Some(100)));
        // Every dim (none given): one row of 800.
        let (spec, _) = map_graph(&lse(serde_json::json!([])), "t.py").unwrap();
        assert_eq!((spec.shapes[0].m, spec.shapes[0].k), (Some(1), Some(800)));
        // Dims 0 and 2 of (4, 6, 5) are not adjacent.
        let g = graph(
            vec![
                input("x", sh, st),
                node(
                    "s",
                    "aten.sum.dim_IntList",
                    serde_json::json!([r("x"), [0, 2]]),
                    &[6],
                    &[1],
                ),
            ],
            "s",
        );
        let e = map_graph(&g, "t.py").unwrap_err();
        assert!(e[0].message.contains("not adjacent"), "{}", e[0].message);
        // A reduction of a GEMM's rows is gemm_reduce (tested below); over its first dim
        // it is refused.
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.push(node(
            "s",
            "aten.sum.dim_IntList",
            serde_json::json!([r("mm"), [0]]),
            &[16],
            &[1],
        ));
        let e = map_graph(&graph(nodes, "s"), "t.py").unwrap_err();
        assert!(
            e.iter().any(|u| u.message.contains("reduces each row")),
            "{e:?}"
        );
    }

    /// KernelBench level 2's GEMM, chain, row reduction, ops: gemm_reduce, with the
    /// reductions over the size-1 dim left after the first (`torch.max(x, 1)[0]`, mean,
    /// logsumexp of an (m, 1) tensor) passed through as the identities they are.
    #[test]
    fn a_gemm_then_a_row_reduction_is_gemm_reduce() {
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.extend([
            node(
                "sg",
                "aten.sigmoid.default",
                serde_json::json!([r("mm")]),
                &[64, 16],
                &[16, 1],
            ),
            node(
                "s",
                "aten.sum.dim_IntList",
                serde_json::json!([r("sg"), [1], true]),
                &[64, 1],
                &[1, 1],
            ),
            json_node(
                "mx",
                "call_function",
                Some("aten.max.dim"),
                None,
                serde_json::json!([r("s"), 1, true]),
                &[],
                &[],
            ),
            node(
                "v",
                "<built-in function getitem>",
                serde_json::json!([r("mx"), 0]),
                &[64, 1],
                &[1, 1],
            ),
            node(
                "idx",
                "<built-in function getitem>",
                serde_json::json!([r("mx"), 1]),
                &[64, 1],
                &[1, 1],
            ),
            node(
                "l",
                "aten.logsumexp.default",
                serde_json::json!([r("v"), [1], true]),
                &[64, 1],
                &[1, 1],
            ),
            node(
                "g",
                "aten.gelu.default",
                serde_json::json!([r("l")]),
                &[64, 1],
                &[1, 1],
            ),
        ]);
        let (spec, ops) = map_graph(&graph(nodes, "g"), "t.py").unwrap();
        assert_eq!(spec.family, Family::GemmReduce);
        assert_eq!(spec.params.reduce, Some(ReduceKind::Sum));
        let s = spec.shapes[0].clone();
        assert_eq!((s.m, s.n, s.k), (Some(64), Some(16), Some(32)));
        let ops_of = |v: &[OpSpec]| v.iter().map(|o| o.op.clone()).collect::<Vec<_>>();
        assert_eq!(ops_of(&spec.epilogue), ["sigmoid"]);
        assert_eq!(ops_of(&spec.after), ["gelu_erf"]);
        assert_eq!(ops, ["mm", "sigmoid", "sum over the last dim", "gelu_erf"]);
        // The spec is valid as written.
        let text = spec.to_toml().unwrap();
        let w = Workload::parse(std::path::Path::new("t.toml"), &text).unwrap();
        assert_eq!(w.after_chain().steps.len(), 1);
    }

    /// KernelBench level 2's GEMM then GroupNorm with its per-channel weight and bias, then
    /// `x * sigmoid(x)` (88): family gemm_norm, the affine as row operands after the norm,
    /// and the swish's `x` the affine's result (saved), not the chain's z.
    #[test]
    fn a_gemm_then_a_group_norm_is_gemm_norm() {
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.extend([
            input("w", &[16], &[1]),
            input("bias", &[16], &[1]),
            node(
                "gn",
                "aten.group_norm.default",
                serde_json::json!([r("mm"), 4, r("w"), r("bias"), 1e-5, true]),
                &[64, 16],
                &[16, 1],
            ),
            node(
                "sg",
                "aten.sigmoid.default",
                serde_json::json!([r("gn")]),
                &[64, 16],
                &[16, 1],
            ),
            node(
                "sw",
                "aten.mul.Tensor",
                serde_json::json!([r("gn"), r("sg")]),
                &[64, 16],
                &[16, 1],
            ),
        ]);
        let (spec, ops) = map_graph(&graph(nodes, "sw"), "t.py").unwrap();
        assert_eq!(spec.family, Family::GemmNorm);
        assert_eq!(spec.params.norm, Some(NormKind::Layer));
        assert_eq!(spec.params.groups, Some(4));
        let ops_of = |v: &[OpSpec]| v.iter().map(|o| o.op.clone()).collect::<Vec<_>>();
        assert!(spec.before.is_empty());
        assert_eq!(ops_of(&spec.epilogue), ["mul", "add", "sigmoid", "mul"]);
        assert_eq!(spec.epilogue[1].save.as_deref(), Some("normed"));
        assert_eq!(spec.epilogue[3].operand.as_deref(), Some("normed"));
        assert_eq!(
            ops[..2],
            ["mm".to_string(), "layer norm in 4 groups".to_string()]
        );
        // Every shape's row splits into the 4 groups, and the spec is valid as written.
        assert!(spec.shapes.iter().all(|s| s.n.unwrap() % 4 == 0));
        let text = spec.to_toml().unwrap();
        let w = Workload::parse(std::path::Path::new("t.toml"), &text).unwrap();
        assert_eq!(w.params().groups, 4);
        assert_eq!(w.chain().tensors.len(), 2);
        // Without a GEMM before it, a per-channel weight over groups is refused with why.
        let plain = graph(
            vec![
                input("x", &[64, 16], &[16, 1]),
                input("w", &[16], &[1]),
                node(
                    "gn",
                    "aten.group_norm.default",
                    serde_json::json!([r("x"), 4, r("w"), null, 1e-5, true]),
                    &[64, 16],
                    &[16, 1],
                ),
            ],
            "gn",
        );
        // Without a GEMM before it: family norm over a batch of the 64 samples, 4 rows
        // (groups) of 4 channels each, the weight a channel operand of 4 a row.
        let (spec, _) = map_graph(&plain, "t.py").unwrap();
        assert_eq!(spec.family, Family::Norm);
        assert_eq!(
            (spec.shapes[0].batch, spec.shapes[0].m, spec.shapes[0].n),
            (Some(64), Some(4), Some(4))
        );
        assert_eq!(spec.epilogue[0].operand.as_deref(), Some("channel"));
        assert_eq!(spec.epilogue[0].channels, Some(4));
        crate::spec::Workload::parse("gn.toml", &toml::to_string(&spec).unwrap()).unwrap();
    }

    /// A BatchNorm1d after a GEMM (KernelBench level 2's 33, 39, 41 and 97, traced with
    /// --train): gemm_norm with norm = "batch" in training mode; refused with its reason
    /// without a GEMM and over more than one dim (in either mode).
    #[test]
    fn a_batch_norm_after_a_gemm_is_gemm_norm_in_training_mode_only() {
        let bn = |training: bool, x: &str, shape: &[i64], stride: &[i64]| {
            batch_norm_node(x, None, training, 1e-3, shape, stride)
        };
        // Training mode (import --train) after a GEMM: each feature (column) over the
        // batch's rows, its weight a row operand (no bias given); num_batches_tracked's
        // in-place update, which nothing reads, is bookkeeping; a ReLU after it.
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.extend([
            input("w", &[16], &[1]),
            input("rm", &[16], &[1]),
            buffer("b_bn_num_batches_tracked", &[], &[]),
            node(
                "add_",
                "aten.add_.Tensor",
                serde_json::json!([r("b_bn_num_batches_tracked"), 1]),
                &[],
                &[],
            ),
            bn(true, "mm", &[64, 16], &[16, 1]),
            out_node("relu", "aten.relu.default", serde_json::json!([r("bn")])),
        ]);
        let (spec, ops) = map_graph(&graph(nodes, "relu"), "t.py").unwrap();
        assert_eq!(spec.family, Family::GemmNorm);
        assert_eq!(spec.params.norm, Some(NormKind::Batch));
        assert_eq!(spec.params.eps, Some(1e-3));
        assert_eq!(spec.params.groups, None);
        let steps: Vec<(&str, Option<&str>)> = spec
            .epilogue
            .iter()
            .map(|o| (o.op.as_str(), o.operand.as_deref()))
            .collect();
        assert_eq!(steps, [("mul", Some("row")), ("relu", None)]);
        assert!(spec.before.is_empty());
        assert!(ops.iter().any(|o| o == "batch norm"), "{ops:?}");
        assert!(
            spec.description.contains("training mode"),
            "{}",
            spec.description
        );
        // An in-place op on a buffer that something reads is not bookkeeping.
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.extend([
            input("w", &[16], &[1]),
            input("rm", &[16], &[1]),
            buffer("buf", &[16], &[1]),
            node(
                "add_",
                "aten.add_.Tensor",
                serde_json::json!([r("buf"), 1]),
                &[16],
                &[1],
            ),
            bn(true, "mm", &[64, 16], &[16, 1]),
            out_node(
                "out",
                "aten.add.Tensor",
                serde_json::json!([r("bn"), r("add_")]),
            ),
        ]);
        let err = map_graph(&graph(nodes, "out"), "t.py").unwrap_err();
        assert!(err.iter().any(|u| u.node == "add_"), "{err:?}");
        // Nor where the buffer itself is read elsewhere (after the in-place op, the value
        // would be the changed one): `sc.mul_(3)` then `mm * sc`.
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.extend([
            buffer("sc", &[], &[]),
            node(
                "mul_",
                "aten.mul_.Tensor",
                serde_json::json!([r("sc"), 3]),
                &[],
                &[],
            ),
            out_node(
                "out",
                "aten.mul.Tensor",
                serde_json::json!([r("mm"), r("sc")]),
            ),
        ]);
        let err = map_graph(&graph(nodes, "out"), "t.py").unwrap_err();
        assert!(err.iter().any(|u| u.node == "mul_"), "{err:?}");
        // Eval mode (import's default) of a 3-d input: a per-channel scale and shift over
        // dim 1 (broadcast operands; of (N, C) values it is a row scale and shift: the next
        // test).
        let nodes = vec![
            input("x", &[8, 16, 4], &[64, 4, 1]),
            input("w", &[16], &[1]),
            input("rm", &[16], &[1]),
            bn(false, "x", &[8, 16, 4], &[64, 4, 1]),
        ];
        let (spec, _) = map_graph(&graph(nodes, "bn"), "t.py").unwrap();
        assert_eq!(spec.family, Family::Activation);
        assert!(spec.epilogue.iter().all(|o| o.over == Some(vec![1])));
        // Training mode of an input no GEMM computes: family norm normalizes rows.
        let nodes = vec![
            input("x", &[64, 16], &[16, 1]),
            input("w", &[16], &[1]),
            input("rm", &[16], &[1]),
            bn(true, "x", &[64, 16], &[16, 1]),
        ];
        let err = map_graph(&graph(nodes, "bn"), "t.py").unwrap_err();
        assert!(
            err.iter()
                .any(|u| u.node == "bn" && u.message.contains("no GEMM computes")),
            "{err:?}"
        );
        // Training mode of a 3-d input (BatchNorm1d of (N, C, L)): family norm's batch
        // norm over the 8 samples, each 16 rows (channels) of 4, the weight a col operand.
        let nodes = vec![
            input("x", &[8, 16, 4], &[64, 4, 1]),
            input("w", &[16], &[1]),
            input("rm", &[16], &[1]),
            bn(true, "x", &[8, 16, 4], &[64, 4, 1]),
        ];
        let (spec, _) = map_graph(&graph(nodes, "bn"), "t.py").unwrap();
        assert_eq!(
            (spec.family, spec.params.norm),
            (Family::Norm, Some(NormKind::Batch))
        );
        assert_eq!(
            (spec.shapes[0].batch, spec.shapes[0].m, spec.shapes[0].n),
            (Some(8), Some(16), Some(4))
        );
        assert_eq!(spec.epilogue[0].operand.as_deref(), Some("col"));
        crate::spec::Workload::parse("bn.toml", &toml::to_string(&spec).unwrap()).unwrap();
        // A batch norm of relu(x), in training or eval mode.
        let bn_of_relu = |training: bool| {
            vec![
                input("x", &[8, 16, 4], &[64, 4, 1]),
                input("w", &[16], &[1]),
                input("rm", &[16], &[1]),
                node(
                    "r",
                    "aten.relu.default",
                    serde_json::json!([r("x")]),
                    &[8, 16, 4],
                    &[64, 4, 1],
                ),
                bn(training, "r", &[8, 16, 4], &[64, 4, 1]),
            ]
        };
        // In training mode it is refused at the batch norm, not imported as the norm of x.
        assert!(map_graph(&graph(bn_of_relu(true), "bn"), "t.py").is_err());
        // Eval mode: the per-channel scale and shift after the relu, over dim 1.
        let (spec, _) = map_graph(&graph(bn_of_relu(false), "bn"), "t.py").unwrap();
        // The leading relu is the workload's activation.
        assert_eq!(spec.params.activation, Some(Activation::Relu));
        let ops: Vec<&str> = spec.epilogue.iter().map(|o| o.op.as_str()).collect();
        assert_eq!(ops, ["mul", "add"]);
    }

    /// An eval-mode BatchNorm1d after a GEMM (import's default mode) is a per-feature
    /// scale and shift in the GEMM's chain (two row operands folded from its parameters
    /// and running statistics), and a `(1,)`-shaped parameter is a row of n copies of its
    /// value (KernelBench level 2's 84 and 97).
    /// Operands that are neither row, col nor matrix tensors of the output's rows, but
    /// broadcast to its dims, become broadcast operands over those dims; an eval-mode
    /// BatchNorm of (N, C, H, W) values a per-channel scale and shift over dim 1, even
    /// when C equals the last dim (where a row operand would index the wrong dim).
    #[test]
    fn broadcast_operands_and_an_eval_batch_norm_of_nchw_map_over_the_dims() {
        // relu(bn(x)) + bias[C, 1, 1] on (2, 8, 3, 8): C = W = 8.
        let (sh, st) = (&[2, 8, 3, 8][..], &[192, 24, 8, 1][..]);
        let nodes = vec![
            input("x", sh, st),
            input("w", &[8], &[1]),
            input("bb", &[8], &[1]),
            input("rm", &[8], &[1]),
            input("cb", &[8, 1, 1], &[1, 1, 1]),
            batch_norm_node("x", Some("bb"), false, 1e-5, sh, st),
            node(
                "relu",
                "aten.relu.default",
                serde_json::json!([r("bn")]),
                sh,
                st,
            ),
            node(
                "out",
                "aten.add.Tensor",
                serde_json::json!([r("relu"), r("cb")]),
                sh,
                st,
            ),
        ];
        let (spec, ops) = map_graph(&graph(nodes, "out"), "t.py").unwrap();
        assert_eq!(spec.family, Family::Activation);
        type Step<'a> = (&'a str, Option<&'a str>, Option<Vec<u32>>);
        let steps: Vec<Step> = spec
            .epilogue
            .iter()
            .map(|o| (o.op.as_str(), o.operand.as_deref(), o.over.clone()))
            .collect();
        assert_eq!(
            steps,
            [
                ("mul", Some("broadcast"), Some(vec![1])),
                ("add", Some("broadcast"), Some(vec![1])),
                ("relu", None, None),
                ("add", Some("broadcast"), Some(vec![1])),
            ],
            "{ops:?}"
        );
        assert_eq!(spec.shapes[0].dims, Some(vec![2, 8, 3, 8]));
        assert!(spec.shapes.len() >= 2);
        assert!(spec
            .shapes
            .iter()
            .all(|s| s.dims.as_ref().is_some_and(|d| d.len() == 4)));
        // Valid as written: 2 x 8 rows of 3 x 8 (the trailing dims no operand spans).
        let text = toml::to_string(&spec).unwrap();
        let w = crate::spec::Workload::parse("t.toml", &text).unwrap();
        assert_eq!((w.shapes()[0].m, w.shapes()[0].n), (16, 24));
        // A positional embedding (1, T, D) over (B, T, D), and an operand that does not
        // broadcast (T != 5), refused with both shapes named.
        let (sh, st) = (&[4, 6, 8][..], &[48, 8, 1][..]);
        let x_plus = |p_shape: &[i64], p_stride: &[i64]| {
            let nodes = vec![
                input("x", sh, st),
                input("p", p_shape, p_stride),
                node(
                    "out",
                    "aten.add.Tensor",
                    serde_json::json!([r("x"), r("p")]),
                    sh,
                    st,
                ),
            ];
            map_graph(&graph(nodes, "out"), "t.py")
        };
        let (spec, _) = x_plus(&[1, 6, 8], &[48, 8, 1]).unwrap();
        assert_eq!(spec.epilogue[0].over, Some(vec![1, 2]));
        let e = x_plus(&[5, 1], &[1, 1]).unwrap_err();
        assert!(format!("{e:?}").contains("[5, 1]"), "{e:?}");
    }

    /// An operand with unary ops of its own (`x * sigmoid(s)`, an SE block's gate): the
    /// chain sets the operand, applies them, saves the result and comes back to z (or to
    /// the saved running value, after earlier ops); other computed operands are refused.
    #[test]
    fn unary_ops_of_an_operand_run_in_the_chain_and_come_back() {
        let (sh, st) = (&[2, 8, 3, 5][..], &[120, 15, 5, 1][..]);
        for relu_first in [false, true] {
            let mut nodes = vec![input("x", sh, st), input("s", &[2, 8, 1, 1], &[8, 1, 1, 1])];
            let x = if relu_first {
                nodes.push(node(
                    "r",
                    "aten.relu.default",
                    serde_json::json!([r("x")]),
                    sh,
                    st,
                ));
                "r"
            } else {
                "x"
            };
            nodes.extend([
                node(
                    "sg",
                    "aten.sigmoid.default",
                    serde_json::json!([r("s")]),
                    &[2, 8, 1, 1],
                    &[8, 1, 1, 1],
                ),
                node(
                    "out",
                    "aten.mul.Tensor",
                    serde_json::json!([r(x), r("sg")]),
                    sh,
                    st,
                ),
            ]);
            let (spec, ops) = map_graph(&graph(nodes, "out"), "t.py").unwrap();
            let steps: Vec<(&str, Option<&str>)> = spec
                .epilogue
                .iter()
                .map(|o| (o.op.as_str(), o.operand.as_deref()))
                .collect();
            // After a relu (the workload's activation, then saved as s1) the chain comes
            // back to the saved value, not to z.
            let (back, held, skip) = if relu_first {
                ("s1", "s2", 1)
            } else {
                ("z", "s1", 0)
            };
            if relu_first {
                assert_eq!(steps[0], ("relu", None));
                assert_eq!(spec.epilogue[0].save.as_deref(), Some("s1"));
            }
            assert_eq!(
                steps[skip..],
                [
                    ("set", Some("broadcast")),
                    ("sigmoid", None),
                    ("set", Some(back)),
                    ("mul", Some(held)),
                ][..],
                "{ops:?}"
            );
            assert_eq!(spec.epilogue[skip].over, Some(vec![0, 1]));
            let text = toml::to_string(&spec).unwrap();
            let w = crate::spec::Workload::parse("t.toml", &text).unwrap();
            // The fp64 reference: x * sigmoid(s) (relu(x) first).
            let (z, t) = (-0.75f64, 0.4f64);
            let want = if relu_first {
                0.0
            } else {
                z / (1.0 + (-t).exp())
            };
            let got = w.chain().eval(z, &[t]);
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
        // A computed operand of two inputs: refused, naming it.
        let (sh, st) = (&[4, 6][..], &[6, 1][..]);
        let nodes = vec![
            input("x", sh, st),
            input("a", sh, st),
            input("b", sh, st),
            node(
                "ab",
                "aten.mul.Tensor",
                serde_json::json!([r("a"), r("b")]),
                sh,
                st,
            ),
            node(
                "out",
                "aten.add.Tensor",
                serde_json::json!([r("x"), r("ab")]),
                sh,
                st,
            ),
        ];
        let e = map_graph(&graph(nodes, "out"), "t.py").unwrap_err();
        assert!(
            e.iter()
                .any(|u| u.message.contains("unary elementwise ops of one")),
            "{e:?}"
        );
    }

    #[test]
    fn an_eval_batch_norm_is_a_row_scale_and_shift_and_one_value_a_row() {
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.extend([
            input("w", &[16], &[1]),
            input("bb", &[16], &[1]),
            input("rm", &[16], &[1]),
            input("s", &[1], &[1]),
            batch_norm_node("mm", Some("bb"), false, 1e-5, &[64, 16], &[16, 1]),
            out_node(
                "mul",
                "aten.mul.Tensor",
                serde_json::json!([r("s"), r("bn")]),
            ),
            out_node("out", "aten.tanh.default", serde_json::json!([r("mul")])),
        ]);
        let (spec, ops) = map_graph(&graph(nodes, "out"), "t.py").unwrap();
        assert_eq!(spec.family, Family::Gemm);
        let steps: Vec<(&str, Option<&str>)> = spec
            .epilogue
            .iter()
            .map(|o| (o.op.as_str(), o.operand.as_deref()))
            .collect();
        assert_eq!(
            steps,
            [
                ("mul", Some("row")),
                ("add", Some("row")),
                ("mul", Some("row")),
                ("tanh", None)
            ]
        );
        assert!(
            ops.iter().any(|o| o.contains("BatchNorm's scale")),
            "{ops:?}"
        );
        assert!(
            ops.iter().any(|o| o.contains("BatchNorm's shift")),
            "{ops:?}"
        );
        assert!(
            ops.iter()
                .any(|o| o.contains("`s` holds one value: pass it as a row of n copies")),
            "{ops:?}"
        );
        // The spec is valid as written: three row tensors.
        let text = toml::to_string(&spec).unwrap();
        let w = crate::spec::Workload::parse("t.toml", &text).unwrap();
        assert_eq!(w.chain().tensors.len(), 3);
        // Before a reduction over dim 0 (the features become A's rows): its vectors do not
        // run along the reduced row, and the import says so rather than index them as one.
        let nodes = vec![
            input("x", &[64, 16], &[16, 1]),
            input("w", &[16], &[1]),
            input("bb", &[16], &[1]),
            input("rm", &[16], &[1]),
            batch_norm_node("x", Some("bb"), false, 1e-5, &[64, 16], &[16, 1]),
            node(
                "s",
                "aten.sum.dim_IntList",
                serde_json::json!([r("bn"), [0]]),
                &[16],
                &[1],
            ),
        ];
        assert!(map_graph(&graph(nodes, "s"), "t.py").is_err());
    }

    /// `triu` / `tril` of a GEMM's result become index ops with their diagonal (KernelBench
    /// level 1's 14 and 15); of a 2-d input, an activation chain; of a 3-d input, whose
    /// rows the activation family flattens, they are refused with the reason.
    #[test]
    fn triu_and_tril_map_to_index_ops_where_matrices_are_whole() {
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.extend([
            out_node("u", "aten.triu.default", serde_json::json!([r("mm"), 1])),
            out_node("out", "aten.relu.default", serde_json::json!([r("u")])),
        ]);
        let (spec, ops) = map_graph(&graph(nodes, "out"), "t.py").unwrap();
        assert_eq!(spec.family, Family::Gemm);
        assert_eq!(ops, ["mm", "triu", "relu"]);
        assert_eq!(
            (spec.epilogue[0].op.as_str(), spec.epilogue[0].diagonal),
            ("triu", Some(1))
        );
        let nodes = vec![
            input("x", &[64, 16], &[16, 1]),
            out_node("out", "aten.tril.default", serde_json::json!([r("x")])),
        ];
        let (spec, _) = map_graph(&graph(nodes, "out"), "t.py").unwrap();
        assert_eq!(spec.family, Family::Activation);
        assert_eq!(
            (spec.epilogue[0].op.as_str(), spec.epilogue[0].diagonal),
            ("tril", None)
        );
        let nodes = vec![
            input("x", &[4, 64, 16], &[1024, 16, 1]),
            node(
                "out",
                "aten.tril.default",
                serde_json::json!([r("x"), -1]),
                &[4, 64, 16],
                &[1024, 16, 1],
            ),
        ];
        let err = map_graph(&graph(nodes, "out"), "t.py").unwrap_err();
        assert!(
            err.iter()
                .any(|u| u.node == "out" && u.message.contains("flattened rows")),
            "{err:?}"
        );
    }

    /// Asserts that mapping `g` fails with a problem at node `at` whose message holds `text`.
    fn refused_at(g: &Graph, at: &str, text: &str) {
        let err = map_graph(g, "t.py").unwrap_err();
        assert!(
            err.iter().any(|u| u.node == at && u.message.contains(text)),
            "{err:?}"
        );
    }

    /// A node whose value has dtype `dtype` (the helpers' are bf16).
    fn typed(mut v: Value, dtype: &str) -> Value {
        v["val"]["dtype"] = Value::from(dtype);
        v
    }

    /// Casts: one at the output sets out_dtype (the value before it is the workload's); a
    /// widening one mid-chain passes its values on (`x.float()` of bf16); a rounding one
    /// mid-chain is refused, saying where to cast; torch.export's assertion beside a `.to`
    /// is ignored.
    #[test]
    fn casts_set_the_output_type_or_pass_values_that_fit() {
        let cast = |name: &str, from: &str, dtype: &str| {
            typed(
                out_node(
                    name,
                    "aten.to.dtype",
                    serde_json::json!([r(from), {"dtype": dtype}]),
                ),
                dtype,
            )
        };
        // mm (bf16) -> relu -> .float(): out_dtype f32.
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.push(out_node(
            "relu",
            "aten.relu.default",
            serde_json::json!([r("mm")]),
        ));
        nodes.push(out_node(
            "chk",
            "aten._assert_tensor_metadata.default",
            serde_json::json!([r("relu")]),
        ));
        nodes.push(cast("f", "relu", "float32"));
        let (spec, ops) = map_graph(&graph(nodes, "f"), "t.py").unwrap();
        assert_eq!(
            (spec.dtype, spec.out_dtype),
            (DType::BF16, Some(DType::F32))
        );
        assert_eq!(ops.last().map(String::as_str), Some("to f32 (the output)"));
        // mm -> .float() -> sigmoid -> .to(bf16): the widening cast passes, the last one is
        // the output's own type (bf16 again: no out_dtype).
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.push(cast("f", "mm", "float32"));
        nodes.push(typed(
            out_node("sg", "aten.sigmoid.default", serde_json::json!([r("f")])),
            "float32",
        ));
        nodes.push(cast("h", "sg", "bfloat16"));
        let (spec, ops) = map_graph(&graph(nodes, "h"), "t.py").unwrap();
        assert_eq!(spec.out_dtype, None);
        assert_eq!(spec.epilogue.len(), 1, "{ops:?}");
        // mm -> .float() -> .half() (rounds) -> relu: refused at the rounding cast.
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.push(cast("f", "mm", "float32"));
        nodes.push(cast("h", "f", "float16"));
        nodes.push(typed(
            out_node("relu", "aten.relu.default", serde_json::json!([r("h")])),
            "float16",
        ));
        refused_at(&graph(nodes, "relu"), "h", "cast at the output");
        // mm -> .float() -> .half() -> .float(): the output's cast is the last one only; the
        // rounding one below it is refused.
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.push(cast("f", "mm", "float32"));
        nodes.push(cast("h", "f", "float16"));
        nodes.push(cast("g", "h", "float32"));
        refused_at(&graph(nodes, "g"), "h", "rounds there");
    }

    /// Llama's causal mask, `scores + torch.full((T, T), -inf).triu(1)`, is the tril with
    /// -inf of the side it leaves; a mask built `ones_like` the batched scores may keep
    /// their leading dims.
    #[test]
    fn additive_and_like_masks_are_index_ops() {
        let neg_inf = serde_json::json!({"float": "-inf"});
        // mm + triu(full((64, 16), fill), 1), the add's extra arguments after its two.
        let added = |fill: Value, extra: &[Value]| {
            let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
            nodes.push(out_node(
                "full",
                "aten.full.default",
                serde_json::json!([[64, 16], fill]),
            ));
            nodes.push(out_node(
                "mask",
                "aten.triu.default",
                serde_json::json!([r("full"), 1]),
            ));
            let mut args = vec![r("mm"), r("mask")];
            args.extend(extra.iter().cloned());
            nodes.push(out_node("add", "aten.add.Tensor", Value::Array(args)));
            graph(nodes, "add")
        };
        let (spec, ops) = map_graph(&added(neg_inf.clone(), &[]), "t.py").unwrap();
        assert_eq!(
            (
                spec.epilogue[0].op.as_str(),
                spec.epilogue[0].diagonal,
                spec.epilogue[0].value
            ),
            ("tril", None, Some(f64::NEG_INFINITY))
        );
        assert_eq!(ops, ["mm", "tril -inf (an additive mask)"]);
        // Subtracted (add with alpha -1), it would be +inf: not the mask.
        assert!(map_graph(&added(neg_inf.clone(), &[Value::from(-1)]), "t.py").is_err());
        // A full of another value is an ordinary tensor operand (not a mask).
        assert!(map_graph(&added(Value::from(2.0), &[]), "t.py").is_err());
        // masked_fill(scores, tril(ones_like(scores)) == 0, -inf) over batched scores.
        let (sh, st) = (&[4, 64, 16][..], &[1024, 16, 1][..]);
        // The mask's tril, == 0, and the masked_fill of `scores` by it.
        let masked = |scores: &str| {
            vec![
                node(
                    "tl",
                    "aten.tril.default",
                    serde_json::json!([r("ones")]),
                    sh,
                    st,
                ),
                typed(
                    node(
                        "eq",
                        "aten.eq.Scalar",
                        serde_json::json!([r("tl"), 0]),
                        sh,
                        st,
                    ),
                    "bool",
                ),
                node(
                    "mf",
                    "aten.masked_fill.Scalar",
                    serde_json::json!([r(scores), r("eq"), neg_inf]),
                    sh,
                    st,
                ),
            ]
        };
        let mut nodes = vec![
            input("a", &[4, 64, 32], &[2048, 32, 1]),
            input("b", &[4, 32, 16], &[512, 16, 1]),
            node(
                "bmm",
                "aten.bmm.default",
                serde_json::json!([r("a"), r("b")]),
                sh,
                st,
            ),
            node(
                "ones",
                "aten.ones_like.default",
                serde_json::json!([r("bmm")]),
                sh,
                st,
            ),
        ];
        nodes.extend(masked("bmm"));
        let (spec, ops) = map_graph(&graph(nodes, "mf"), "t.py").unwrap();
        assert_eq!(spec.epilogue[0].op, "tril", "{ops:?}");
        // A mask with a batch of its own over one GEMM's (64, 16) would broadcast the output.
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.push(node(
            "ones",
            "aten.ones.default",
            serde_json::json!([[4, 64, 16]]),
            sh,
            st,
        ));
        nodes.extend(masked("mm"));
        refused_at(&graph(nodes, "mf"), "mf", "own shape");
    }

    /// minGPT's registered causal mask: a buffer the tracer marked as tril(ones), cut to
    /// the product's shape by slices from 0 (`bias[:, :, :T, :T]`) and compared with 0.
    #[test]
    fn a_registered_triangle_buffer_cut_to_the_product_is_an_index_op() {
        let with_buffer = |triangle: Value, start: i64| {
            let mut bias = buffer("bias", &[1, 1, 128, 128], &[16384, 16384, 128, 1]);
            bias["triangle"] = triangle;
            let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
            nodes.push(bias);
            nodes.push(node(
                "s0",
                "aten.slice.Tensor",
                serde_json::json!([r("bias"), 2, start, 64 + start]),
                &[1, 1, 64, 128],
                &[16384, 16384, 128, 1],
            ));
            nodes.push(node(
                "s1",
                "aten.slice.Tensor",
                serde_json::json!([r("s0"), 3, 0, 16]),
                &[1, 1, 64, 16],
                &[16384, 16384, 128, 1],
            ));
            nodes.push(node(
                "mask",
                "aten.eq.Scalar",
                serde_json::json!([r("s1"), 0]),
                &[1, 1, 64, 16],
                &[1024, 1024, 16, 1],
            ));
            nodes.push(out_node(
                "out",
                "aten.masked_fill.Scalar",
                serde_json::json!([r("mm"), r("mask"), {"float": "-inf"}]),
            ));
            map_graph(&graph(nodes, "out"), "t.py")
        };
        // tril(ones) == 0 is the future: keep tril(0), -inf elsewhere.
        let (spec, ops) = with_buffer(serde_json::json!(["tril", 0, 1.0]), 0).unwrap();
        assert_eq!(ops, ["mm", "tril -inf (masked_fill)"]);
        let e = &spec.epilogue[0];
        assert_eq!(
            (e.op.as_str(), e.diagonal, e.value),
            ("tril", None, Some(f64::NEG_INFINITY))
        );
        // triu(ones, 1) == 0 hides the present and the past: triu(1) is kept.
        let (spec, _) = with_buffer(serde_json::json!(["triu", 1, 1.0]), 0).unwrap();
        assert_eq!(
            (spec.epilogue[0].op.as_str(), spec.epilogue[0].diagonal),
            ("triu", Some(1))
        );
        // Refused: a slice of the rows that does not start at 0 (the corner moves), an
        // unmarked buffer, a triangle of another constant.
        for (triangle, start) in [
            (serde_json::json!(["tril", 0, 1.0]), 1),
            (Value::Null, 0),
            (serde_json::json!(["tril", 0, 0.5]), 0),
        ] {
            // Refused at the masked_fill, or at the mask's nodes, then unknown ops.
            let err = with_buffer(triangle.clone(), start).unwrap_err();
            assert!(
                err.iter()
                    .any(|u| (u.node == "out" && u.message.contains("mask"))
                        || (u.node == "mask" && u.message.contains("aten.eq"))),
                "{triangle} {start}: {err:?}"
            );
        }
    }

    /// `masked_fill` by a triangle of a constant matrix built in forward (a causal mask:
    /// `ones(T, T).triu(1)`, or `tril(ones) == 0`) is the tril / triu op of the side it
    /// leaves, with the fill; the mask's nodes are known; a mask computed from an input
    /// is refused at the masked_fill, saying why.
    #[test]
    fn a_masked_fill_by_a_triangle_is_an_index_op() {
        let neg_inf = serde_json::json!({"float": "-inf"});
        let with_mask = |mask: Vec<Value>, fill: Value| {
            let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
            nodes.push(out_node(
                "ones",
                "aten.ones.default",
                serde_json::json!([[64, 16]]),
            ));
            nodes.extend(mask);
            nodes.push(out_node(
                "out",
                "aten.masked_fill.Scalar",
                serde_json::json!([r("mm"), r("mask"), fill]),
            ));
            map_graph(&graph(nodes, "out"), "t.py")
        };
        // The future hidden: keep tril(0), -inf elsewhere.
        let (spec, ops) = with_mask(
            vec![out_node(
                "mask",
                "aten.triu.default",
                serde_json::json!([r("ones"), 1]),
            )],
            neg_inf.clone(),
        )
        .unwrap();
        assert_eq!(ops, ["mm", "tril -inf (masked_fill)"]);
        let e = &spec.epilogue[0];
        assert_eq!(
            (e.op.as_str(), e.diagonal, e.value),
            ("tril", None, Some(f64::NEG_INFINITY))
        );
        // tril(ones, -2) == 0 is true where col - row > -2: the kept side is tril(-2),
        // filled with 0.5.
        let (spec, _) = with_mask(
            vec![
                out_node("t", "aten.tril.default", serde_json::json!([r("ones"), -2])),
                out_node("mask", "aten.eq.Scalar", serde_json::json!([r("t"), 0])),
            ],
            serde_json::json!(0.5),
        )
        .unwrap();
        let e = &spec.epilogue[0];
        assert_eq!(
            (e.op.as_str(), e.diagonal, e.value),
            ("tril", Some(-2), Some(0.5))
        );
        // A sliding window: the future or the keys 4 and more behind (`|` of two
        // triangles) hidden, the band kept: tril(0), then triu(-3).
        let (spec, ops) = with_mask(
            vec![
                out_node("f", "aten.triu.default", serde_json::json!([r("ones"), 1])),
                out_node("p", "aten.tril.default", serde_json::json!([r("ones"), -4])),
                out_node(
                    "mask",
                    "aten.logical_or.default",
                    serde_json::json!([r("f"), r("p")]),
                ),
            ],
            neg_inf.clone(),
        )
        .unwrap();
        assert_eq!(
            ops,
            ["mm", "tril -inf (masked_fill)", "triu -inf (masked_fill)"]
        );
        let kept: Vec<_> = spec
            .epilogue
            .iter()
            .map(|e| (e.op.as_str(), e.diagonal))
            .collect();
        assert_eq!(kept, [("tril", None), ("triu", Some(-3))]);
        // Not a triangle of ones: a bitwise not of a non-bool (~1 is -2), a full of 0.5
        // (0 in an integer type), a transpose; and a mask with a batch of its own.
        // Refused: at the masked_fill, or at the mask's nodes, which are then unknown ops.
        let refused = |mask: Vec<Value>| {
            let err = with_mask(mask, serde_json::json!(0.0)).unwrap_err();
            assert!(
                err.iter()
                    .any(|u| (u.node == "out" && u.message.contains("mask"))
                        || (u.node == "ones" && u.message.contains("aten.ones"))),
                "{err:?}"
            );
        };
        let triu_of = |x: &str| out_node("t", "aten.triu.default", serde_json::json!([r(x), 1]));
        refused(vec![
            triu_of("ones"),
            out_node(
                "mask",
                "aten.bitwise_not.default",
                serde_json::json!([r("t")]),
            ),
        ]);
        refused(vec![
            out_node("f", "aten.full.default", serde_json::json!([[64, 16], 0.5])),
            out_node("mask", "aten.triu.default", serde_json::json!([r("f"), 1])),
        ]);
        refused(vec![
            triu_of("ones"),
            node(
                "mask",
                "aten.transpose.int",
                serde_json::json!([r("t"), 0, 1]),
                &[16, 64],
                &[1, 16],
            ),
        ]);
        refused(vec![node(
            "mask",
            "aten.triu.default",
            serde_json::json!([r("ones"), 1]),
            &[8, 64, 16],
            &[1024, 16, 1],
        )]);
        // A bool mask from an input is the masked_fill op, the mask a bool matrix operand.
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.extend([
            typed(input("m", &[64, 16], &[16, 1]), "bool"),
            out_node(
                "out",
                "aten.masked_fill.Scalar",
                serde_json::json!([r("mm"), r("m"), neg_inf]),
            ),
        ]);
        let (spec, ops) = map_graph(&graph(nodes, "out"), "t.py").unwrap();
        let e = &spec.epilogue;
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(
            (e[0].op.as_str(), e[0].operand.as_deref(), e[0].dtype),
            ("masked_fill", Some("matrix"), Some(DType::Bool))
        );
        assert_eq!(e[0].value, Some(f64::NEG_INFINITY));
        assert!(ops[1].contains("masked_fill by `m`"), "{ops:?}");
        let w = crate::spec::Workload::from_spec("t.toml", spec).unwrap();
        let c = w.chain();
        assert_eq!(c.eval(0.25, &[0.0]), 0.25);
        assert_eq!(c.eval(0.25, &[1.0]), f64::NEG_INFINITY);
        assert!(c.cpp().contains("!= 0 ? -INFINITY"), "{}", c.cpp());
        // A mask computed from an input in forward (not a triangle) is refused, naming the
        // mask's node.
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.extend([
            input("m", &[64, 16], &[16, 1]),
            typed(
                node(
                    "nm",
                    "aten.eq.Scalar",
                    serde_json::json!([r("m"), 0]),
                    &[64, 16],
                    &[16, 1],
                ),
                "bool",
            ),
            out_node(
                "out",
                "aten.masked_fill.Scalar",
                serde_json::json!([r("mm"), r("nm"), neg_inf]),
            ),
        ]);
        let err = map_graph(&graph(nodes, "out"), "t.py").unwrap_err();
        assert!(
            err.iter()
                .any(|u| u.node == "nm" || u.message.contains("masked_fill by `nm`")),
            "{err:?}"
        );
    }

    /// A dropout of p = 0 is the identity in training mode too.
    #[test]
    fn a_dropout_of_p_zero_passes_in_training_mode() {
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.extend([
            out_node(
                "d",
                "aten.dropout.default",
                serde_json::json!([r("mm"), 0.0, true]),
            ),
            out_node("out", "aten.relu.default", serde_json::json!([r("d")])),
        ]);
        let (spec, ops) = map_graph(&graph(nodes, "out"), "t.py").unwrap();
        assert_eq!(spec.family, Family::Gemm);
        assert_eq!(ops, ["mm", "relu"]);
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.push(out_node(
            "d",
            "aten.dropout.default",
            serde_json::json!([r("mm"), 0.1, true]),
        ));
        let err = map_graph(&graph(nodes, "d"), "t.py").unwrap_err();
        assert!(err.iter().any(|u| u.message.contains("random")), "{err:?}");
    }

    /// KernelBench level 2's 28: a linear layer, InstanceNorm2d of
    /// `x.unsqueeze(1).unsqueeze(1)` squeezed back (each row of the product), then
    /// `(x + y) * y`: the unit-dim views are passed through.
    #[test]
    fn an_instance_norm_of_a_product_through_unit_views_is_gemm_norm() {
        let mut nodes = mm_nodes(&[32, 1], &[16, 1]);
        nodes.extend([
            input("y", &[64, 16], &[16, 1]),
            node(
                "u1",
                "aten.unsqueeze.default",
                serde_json::json!([r("mm"), 1]),
                &[64, 1, 16],
                &[16, 16, 1],
            ),
            node(
                "u2",
                "aten.unsqueeze.default",
                serde_json::json!([r("u1"), 1]),
                &[64, 1, 1, 16],
                &[16, 16, 16, 1],
            ),
            node(
                "inorm",
                "aten.instance_norm.default",
                serde_json::json!([r("u2"), null, null, null, null, true, 0.1, 1e-5, true]),
                &[64, 1, 1, 16],
                &[16, 16, 16, 1],
            ),
            node(
                "s1",
                "aten.squeeze.dim",
                serde_json::json!([r("inorm"), 1]),
                &[64, 1, 16],
                &[16, 16, 1],
            ),
            node(
                "s2",
                "aten.squeeze.dim",
                serde_json::json!([r("s1"), 1]),
                &[64, 16],
                &[16, 1],
            ),
            node(
                "ad",
                "aten.add.Tensor",
                serde_json::json!([r("s2"), r("y")]),
                &[64, 16],
                &[16, 1],
            ),
            node(
                "mu",
                "aten.mul.Tensor",
                serde_json::json!([r("ad"), r("y")]),
                &[64, 16],
                &[16, 1],
            ),
        ]);
        let (spec, _) = map_graph(&graph(nodes, "mu"), "t.py").unwrap();
        assert_eq!(spec.family, Family::GemmNorm);
        assert_eq!(spec.params.groups, None);
        let ops_of = |v: &[OpSpec]| v.iter().map(|o| o.op.clone()).collect::<Vec<_>>();
        assert!(spec.before.is_empty());
        assert_eq!(ops_of(&spec.epilogue), ["add", "mul"]);
        assert!(spec
            .epilogue
            .iter()
            .all(|o| o.operand.as_deref() == Some("matrix")));
        let s = spec.shapes[0].clone();
        assert_eq!((s.m, s.n, s.k), (Some(64), Some(16), Some(32)));
    }

    /// KernelBench's diagonal matmul, `a.unsqueeze(1) * b` (diag(a) @ b): the activation
    /// family runs over b, the input of the output's shape, and a is a column operand.
    #[test]
    fn a_diagonal_matmul_is_b_times_a_column() {
        let g = graph(
            vec![
                input("a", &[64], &[1]),
                input("b", &[64, 32], &[32, 1]),
                node(
                    "u",
                    "aten.unsqueeze.default",
                    serde_json::json!([r("a"), 1]),
                    &[64, 1],
                    &[1, 1],
                ),
                node(
                    "mul",
                    "aten.mul.Tensor",
                    serde_json::json!([r("u"), r("b")]),
                    &[64, 32],
                    &[32, 1],
                ),
            ],
            "mul",
        );
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.family, Family::Activation);
        assert_eq!((spec.shapes[0].m, spec.shapes[0].n), (Some(64), Some(32)));
        assert_eq!(ops, ["mul col"]);
    }

    /// mm then x * sigmoid(x) (swish through z), then 1 - x (neg, add), then x * x.
    #[test]
    fn a_chain_reads_z_and_saved_values() {
        let mut nodes = mm_nodes(&[32, 1], &[1, 32]);
        nodes.extend([
            node(
                "sig",
                "aten.sigmoid.default",
                serde_json::json!([r("mm")]),
                &[64, 16],
                &[16, 1],
            ),
            node(
                "sw",
                "aten.mul.Tensor",
                serde_json::json!([r("sig"), r("mm")]),
                &[64, 16],
                &[16, 1],
            ),
            node(
                "rs",
                "aten.rsub.Scalar",
                serde_json::json!([r("sw"), 1.0]),
                &[64, 16],
                &[16, 1],
            ),
            node(
                "sq",
                "aten.mul.Tensor",
                serde_json::json!([r("rs"), r("rs")]),
                &[64, 16],
                &[16, 1],
            ),
        ]);
        let g = graph(nodes, "sq");
        let (spec, _) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.family, Family::Gemm);
        assert_eq!(spec.dtype, DType::BF16);
        let l = spec.layout.clone().unwrap();
        assert_eq!((l.a, l.b), (Some(Layout::Row), Some(Layout::Col)));
        type Row = (String, Option<f64>, Option<String>, Option<String>);
        let ops: Vec<Row> = spec
            .epilogue
            .iter()
            .map(|o| (o.op.clone(), o.value, o.operand.clone(), o.save.clone()))
            .collect();
        assert_eq!(
            ops,
            vec![
                ("sigmoid".into(), None, None, None),
                ("mul".into(), None, Some("z".into()), None),
                ("neg".into(), None, None, None),
                ("add".into(), Some(1.0), None, Some("s1".into())),
                ("mul".into(), None, Some("s1".into()), None),
            ]
        );
        // The spec is valid and computes (1 - z sigmoid(z))^2.
        let w = Workload::from_spec("t.toml", spec).unwrap();
        let z: f64 = 0.3;
        let want = (1.0 - z / (1.0 + (-z).exp())).powi(2);
        assert!((w.chain().eval(z, &[]) - want).abs() < 1e-12);
    }

    /// minGPT's GELU written out, `0.5 * x * (1 + tanh(c * (x + 0.044715 * x**3)))`: the
    /// `0.5 * x` branch is saved and the chain restarts from z (`set`); pow, rsqrt, log and
    /// sqrt map as ops.
    #[test]
    fn a_branch_restarts_from_z_and_pow_maps() {
        let (sh, st) = (&[8, 100][..], &[100, 1][..]);
        let ew =
            |name: &str, target: &str, args: serde_json::Value| node(name, target, args, sh, st);
        let g = graph(
            vec![
                input("x", sh, st),
                ew("h", "aten.mul.Tensor", serde_json::json!([0.5, r("x")])),
                ew(
                    "p3",
                    "aten.pow.Tensor_Scalar",
                    serde_json::json!([r("x"), 3.0]),
                ),
                ew(
                    "m",
                    "aten.mul.Tensor",
                    serde_json::json!([0.044715, r("p3")]),
                ),
                ew("a", "aten.add.Tensor", serde_json::json!([r("x"), r("m")])),
                ew(
                    "m2",
                    "aten.mul.Tensor",
                    serde_json::json!([0.7978845608028654, r("a")]),
                ),
                ew("t", "aten.tanh.default", serde_json::json!([r("m2")])),
                ew("a2", "aten.add.Tensor", serde_json::json!([1.0, r("t")])),
                ew(
                    "out",
                    "aten.mul.Tensor",
                    serde_json::json!([r("h"), r("a2")]),
                ),
            ],
            "out",
        );
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.family, Family::Activation);
        assert_eq!(ops[1], "set z");
        assert!(ops.contains(&"pow 3".to_string()), "{ops:?}");
        let w = Workload::from_spec("t.toml", spec).unwrap();
        for z in [-2.5f64, -0.3, 0.0, 0.7, 3.0] {
            let want = 0.5 * z * (1.0 + (0.7978845608028654 * (z + 0.044715 * z.powi(3))).tanh());
            assert!((w.chain().eval(z, &[]) - want).abs() < 1e-12, "{z}");
        }
        // rsqrt, log and sqrt: x -> pow -0.5 -> log -> sqrt (of 2 rows of 3).
        let (sh, st) = (&[2, 3][..], &[3, 1][..]);
        let ew = |name: &str, target: &str, src: &str| {
            node(name, target, serde_json::json!([r(src)]), sh, st)
        };
        let g = graph(
            vec![
                input("x", sh, st),
                ew("q", "aten.rsqrt.default", "x"),
                ew("l", "aten.log.default", "q"),
                ew("s", "aten.sqrt.default", "l"),
            ],
            "s",
        );
        let (spec, _) = map_graph(&g, "t.py").unwrap();
        let w = Workload::from_spec("t.toml", spec).unwrap();
        let z: f64 = 0.04;
        assert!((w.chain().eval(z, &[]) - (z.powf(-0.5)).ln().sqrt()).abs() < 1e-12);
    }

    /// 2 / exp(x) maps to rdiv; a copy kept for a residual (`x.clone().detach()`) is the
    /// value it copies; torch.min of two tensors is the elementwise minimum.
    #[test]
    fn copies_rdiv_and_min_of_two_tensors_map() {
        let g = graph(
            vec![
                input("x", &[8, 8], &[8, 1]),
                node(
                    "e",
                    "aten.exp.default",
                    serde_json::json!([r("x")]),
                    &[8, 8],
                    &[8, 1],
                ),
                node(
                    "d",
                    "aten.div.Tensor",
                    serde_json::json!([2.0, r("e")]),
                    &[8, 8],
                    &[8, 1],
                ),
            ],
            "d",
        );
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(ops, ["exp", "rdiv 2"]);
        let w = Workload::from_spec("t.toml", spec).unwrap();
        assert!((w.chain().eval(0.5, &[]) - 2.0 / 0.5f64.exp()).abs() < 1e-12);

        // mm; c = mm.clone(); d = c.detach(); m = mm * 0.5; s = m + d; out = min(s, c)
        let mut nodes = mm_nodes(&[32, 1], &[1, 32]);
        let v =
            |name: &str, target: &str, args: Value| node(name, target, args, &[64, 16], &[16, 1]);
        nodes.extend([
            v("c", "aten.clone.default", serde_json::json!([r("mm")])),
            v("d", "aten.detach.default", serde_json::json!([r("c")])),
            v("m", "aten.mul.Tensor", serde_json::json!([r("mm"), 0.5])),
            v("s", "aten.add.Tensor", serde_json::json!([r("m"), r("d")])),
            v("lo", "aten.min.other", serde_json::json!([r("s"), r("c")])),
        ]);
        let (spec, ops) = map_graph(&graph(nodes, "lo"), "t.py").unwrap();
        assert_eq!(ops, ["mm", "mul 0.5", "add z", "min z"]);
        let w = Workload::from_spec("t.toml", spec).unwrap();
        assert_eq!(w.chain().eval(-4.0, &[]), -6.0);
        assert_eq!(w.chain().eval(4.0, &[]), 4.0);
    }

    /// A 0-d parameter whose value the tracer read (nn.Parameter(torch.tensor(2.0))) is
    /// that number; one without a value is still refused, named.
    #[test]
    fn a_0d_parameter_with_a_value_is_a_constant() {
        let with_value = |value: Value| {
            let mut p = json_node(
                "p_c",
                "placeholder",
                Some("c"),
                Some("parameter"),
                serde_json::json!([]),
                &[],
                &[],
            );
            p["value"] = value;
            let mut nodes = mm_nodes(&[32, 1], &[1, 32]);
            nodes.push(p);
            nodes.extend([
                node(
                    "lo",
                    "aten.min.other",
                    serde_json::json!([r("mm"), r("p_c")]),
                    &[64, 16],
                    &[16, 1],
                ),
                node(
                    "d",
                    "aten.sub.Tensor",
                    serde_json::json!([r("lo"), r("p_c")]),
                    &[64, 16],
                    &[16, 1],
                ),
            ]);
            map_graph(&graph(nodes, "d"), "t.py")
        };
        let (_, ops) = with_value(serde_json::json!(2.0)).unwrap();
        assert_eq!(ops, ["mm", "min 2", "sub 2"]);
        // Without a known value it is a tensor of one value: a row of n copies.
        let (spec, ops) = with_value(Value::Null).unwrap();
        assert_eq!(spec.epilogue[0].operand.as_deref(), Some("row"));
        assert!(
            ops[1].contains("`p_c` holds one value: pass it as a row of n copies"),
            "{ops:?}"
        );
    }

    /// A softmax after a dropout in eval mode is the GEMM's softmax; a biased linear, then
    /// GELU, then a softmax is gemm_softmax with the chain `add row, gelu` before the
    /// softmax; an op after the softmax is refused.
    #[test]
    fn gemm_softmax_through_a_dropout_and_a_chain_before_it() {
        let mut nodes = mm_nodes(&[32, 1], &[1, 32]);
        nodes.extend([
            node(
                "drop",
                "aten.dropout.default",
                serde_json::json!([r("mm"), 0.1, false]),
                &[64, 16],
                &[16, 1],
            ),
            node(
                "sm",
                "aten.softmax.int",
                serde_json::json!([r("drop"), 1]),
                &[64, 16],
                &[16, 1],
            ),
        ]);
        let (spec, _) = map_graph(&graph(nodes, "sm"), "t.py").unwrap();
        assert_eq!(spec.family, Family::GemmSoftmax);

        let biased = vec![
            input("x", &[64, 32], &[32, 1]),
            input("w", &[16, 32], &[32, 1]),
            input("bias", &[16], &[1]),
            node(
                "lin",
                "aten.linear.default",
                serde_json::json!([r("x"), r("w"), r("bias")]),
                &[64, 16],
                &[16, 1],
            ),
            node(
                "act",
                "aten.gelu.default",
                serde_json::json!([r("lin")]),
                &[64, 16],
                &[16, 1],
            ),
            node(
                "sm",
                "aten.softmax.int",
                serde_json::json!([r("act"), -1]),
                &[64, 16],
                &[16, 1],
            ),
        ];
        let g = graph(biased.clone(), "sm");
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.family, Family::GemmSoftmax);
        assert_eq!(ops, ["linear", "add row (the bias)", "gelu_erf", "softmax"]);
        let chain: Vec<_> = spec
            .epilogue
            .iter()
            .map(|o| (o.op.as_str(), o.operand.as_deref()))
            .collect();
        assert_eq!(chain, [("add", Some("row")), ("gelu_erf", None)]);
        assert!(spec.epilogue[0].save.is_none());
        // An op after the softmax is not gemm_softmax's.
        let mut nodes = biased;
        nodes.push(node(
            "after",
            "aten.mul.Tensor",
            serde_json::json!([r("sm"), 2.0]),
            &[64, 16],
            &[16, 1],
        ));
        let err = map_graph(&graph(nodes, "after"), "t.py").unwrap_err();
        assert!(err[0].message.contains("after the softmax"), "{}", err[0]);
    }

    #[test]
    fn einsum_and_nd_matmul_map_to_one_batched_gemm() {
        // KernelBench level 1's 4-D tensor-matrix product: b, i, j fold into m.
        let g = graph(
            vec![
                input("a", &[2, 3, 4, 16], &[192, 64, 16, 1]),
                input("b", &[16, 8], &[8, 1]),
                node(
                    "einsum",
                    "aten.einsum.default",
                    serde_json::json!(["bijl,lk->bijk", [r("a"), r("b")]]),
                    &[2, 3, 4, 8],
                    &[96, 32, 8, 1],
                ),
            ],
            "einsum",
        );
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.family, Family::Gemm);
        let s = spec.shapes[0].clone();
        assert_eq!(
            (s.m, s.n, s.k, s.batch),
            (Some(24), Some(8), Some(16), None)
        );
        let l = spec.layout.clone().unwrap();
        assert_eq!((l.a, l.b), (Some(Layout::Row), Some(Layout::Row)));
        assert_eq!(ops, ["einsum"]);
        // Attention scores on (b, h, s, d) tensors, as matmul with a transposed view and
        // as einsum: a batch of b * h products with B column-major.
        let kt = [2, 3, 16, 5];
        let kt_stride = [240, 80, 1, 16];
        for (target, args) in [
            ("aten.matmul.default", serde_json::json!([r("q"), r("kt")])),
            (
                "aten.einsum.default",
                serde_json::json!(["bhqd,bhkd->bhqk", [r("q"), r("k")]]),
            ),
        ] {
            let g = graph(
                vec![
                    input("q", &[2, 3, 4, 16], &[192, 64, 16, 1]),
                    input("k", &[2, 3, 5, 16], &[240, 80, 16, 1]),
                    node(
                        "kt",
                        "aten.transpose.int",
                        serde_json::json!([r("k"), -2, -1]),
                        &kt,
                        &kt_stride,
                    ),
                    node("p", target, args, &[2, 3, 4, 5], &[60, 20, 5, 1]),
                ],
                "p",
            );
            let (spec, _) = map_graph(&g, "t.py").unwrap();
            let s = spec.shapes[0].clone();
            assert_eq!(
                (s.m, s.n, s.k, s.batch),
                (Some(4), Some(5), Some(16), Some(6)),
                "{target}"
            );
            let l = spec.layout.clone().unwrap();
            assert_eq!(
                (l.a, l.b),
                (Some(Layout::Row), Some(Layout::Col)),
                "{target}"
            );
        }
        // The output transposed ("ik,kj->ji"): the product of the transposes, both
        // operands then column-major.
        let g = graph(
            vec![
                input("a", &[4, 16], &[16, 1]),
                input("b", &[16, 8], &[8, 1]),
                node(
                    "e",
                    "aten.einsum.default",
                    serde_json::json!(["ik,kj->ji", [r("a"), r("b")]]),
                    &[8, 4],
                    &[4, 1],
                ),
            ],
            "e",
        );
        let (spec, _) = map_graph(&g, "t.py").unwrap();
        let s = spec.shapes[0].clone();
        assert_eq!((s.m, s.n, s.k), (Some(8), Some(4), Some(16)));
        let l = spec.layout.unwrap();
        assert_eq!((l.a, l.b), (Some(Layout::Col), Some(Layout::Col)));
    }

    #[test]
    fn contractions_that_are_no_single_gemm_say_why() {
        let case = |eq: &str, a: (&[i64], &[i64]), b: (&[i64], &[i64]), out: &[i64]| {
            let g = graph(
                vec![
                    input("a", a.0, a.1),
                    input("b", b.0, b.1),
                    node(
                        "e",
                        "aten.einsum.default",
                        serde_json::json!([eq, [r("a"), r("b")]]),
                        out,
                        &[],
                    ),
                ],
                "e",
            );
            map_graph(&g, "t.py").unwrap_err()[0].message.clone()
        };
        let m3 = (&[2i64, 4, 8][..], &[32i64, 8, 1][..]);
        let b3 = (&[2i64, 8, 6][..], &[48i64, 6, 1][..]);
        let e = case("bik,bkj->ibj", m3, b3, &[4, 2, 6]);
        assert!(e.contains("batch dims first"), "{e}");
        let e = case("bik,kj->ij", m3, (&[8, 6], &[6, 1]), &[4, 6]);
        assert!(e.contains("summed over alone"), "{e}");
        let e = case("bik,bkj->bij", m3, (&[2, 9, 6], &[54, 6, 1]), &[2, 4, 6]);
        assert!(e.contains("size 8 in one operand and 9"), "{e}");
        // A broadcast over one batch dim but not the other has no single batch stride.
        let g = graph(
            vec![
                input("a", &[2, 3, 4, 16], &[192, 64, 16, 1]),
                input("b", &[3, 16, 8], &[128, 8, 1]),
                node(
                    "p",
                    "aten.matmul.default",
                    serde_json::json!([r("a"), r("b")]),
                    &[2, 3, 4, 8],
                    &[96, 32, 8, 1],
                ),
            ],
            "p",
        );
        let e = map_graph(&g, "t.py").unwrap_err()[0].message.clone();
        assert!(e.contains("do not flatten"), "{e}");
    }

    #[test]
    fn strided_operands_are_named() {
        let g = graph(mm_nodes(&[64, 1], &[16, 1]), "mm");
        let err = map_graph(&g, "t.py").unwrap_err();
        assert!(
            err[0].message.contains("operand A") && err[0].message.contains("packed"),
            "{}",
            err[0]
        );
    }

    #[test]
    fn every_unknown_node_is_listed() {
        let g = graph(
            vec![
                input("x", &[8, 8], &[8, 1]),
                node(
                    "s",
                    "aten.prod.dim_int",
                    serde_json::json!([r("x"), 1]),
                    &[8],
                    &[1],
                ),
                node(
                    "n",
                    "aten.avg_pool1d.default",
                    serde_json::json!([r("s"), [2]]),
                    &[4],
                    &[1],
                ),
            ],
            "n",
        );
        let err = map_graph(&g, "t.py").unwrap_err();
        let names: Vec<&str> = err.iter().map(|u| u.node.as_str()).collect();
        assert_eq!(names, ["s", "n"]);
        assert!(err[0].message.contains("reduction") && err[1].message.contains("pooling"));
    }

    /// Scans along a dim: cumsum over the last dim (rows) with an op after it; cumprod over
    /// a middle dim (rows side by side); the reverse form (flip, scan, flip back); the
    /// exclusive form (zeros of one slice, then the scan of all but the last slice); a scan
    /// of a computed tensor (KernelBench's masked cumsum, `x * mask` with a bool mask) takes
    /// the ops as [[before]], the mask a bool matrix operand.
    #[test]
    fn scans_along_a_dim_map_to_the_scan_family() {
        let (sh, st) = (&[8, 64][..], &[64, 1][..]);
        let g = graph(
            vec![
                input("x", sh, st),
                node(
                    "s",
                    "aten.cumsum.default",
                    serde_json::json!([r("x"), -1]),
                    sh,
                    st,
                ),
                node(
                    "t",
                    "aten.tanh.default",
                    serde_json::json!([r("s")]),
                    sh,
                    st,
                ),
            ],
            "t",
        );
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.family, Family::Scan);
        assert_eq!(
            (spec.params.scan, spec.params.reverse, spec.params.exclusive),
            (Some(ScanKind::Sum), None, None)
        );
        assert_eq!(spec.epilogue.len(), 1);
        assert_eq!(ops, vec!["cumsum".to_string(), "tanh".into()]);
        assert_eq!((spec.shapes[0].m, spec.shapes[0].n), (Some(8), Some(64)));
        // cumprod over dim 1 of (4, 16, 8): 4 batches of 8 rows of 16, side by side.
        let (sh3, st3) = (&[4, 16, 8][..], &[128, 8, 1][..]);
        let g = graph(
            vec![
                input("x", sh3, st3),
                node(
                    "p",
                    "aten.cumprod.default",
                    serde_json::json!([r("x"), 1]),
                    sh3,
                    st3,
                ),
            ],
            "p",
        );
        let (spec, _) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.params.scan, Some(ScanKind::Prod));
        assert_eq!(spec.layout.as_ref().and_then(|l| l.a), Some(Layout::Col));
        assert_eq!(
            (spec.shapes[0].batch, spec.shapes[0].m, spec.shapes[0].n),
            (Some(4), Some(8), Some(16))
        );
        // Reverse: torch.cumsum(x.flip(1), 1).flip(1).
        let g = graph(
            vec![
                input("x", sh, st),
                node(
                    "f",
                    "aten.flip.default",
                    serde_json::json!([r("x"), [1]]),
                    sh,
                    st,
                ),
                node(
                    "s",
                    "aten.cumsum.default",
                    serde_json::json!([r("f"), 1]),
                    sh,
                    st,
                ),
                node(
                    "b",
                    "aten.flip.default",
                    serde_json::json!([r("s"), [1]]),
                    sh,
                    st,
                ),
            ],
            "b",
        );
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(
            (spec.params.reverse, spec.params.exclusive),
            (Some(true), None)
        );
        assert_eq!(ops, vec!["cumsum from the end".to_string()]);
        // A flip along another dim is no reverse scan (and flip is no op of any family).
        let g = graph(
            vec![
                input("x", sh, st),
                node(
                    "f",
                    "aten.flip.default",
                    serde_json::json!([r("x"), [0]]),
                    sh,
                    st,
                ),
                node(
                    "s",
                    "aten.cumsum.default",
                    serde_json::json!([r("f"), 1]),
                    sh,
                    st,
                ),
            ],
            "s",
        );
        assert!(map_graph(&g, "t.py").is_err());
        // Exclusive: cat([zeros_like(x.select(1, 0).unsqueeze(1)), cumsum(x.narrow(1, 0, 63), 1)], 1).
        let g = graph(
            vec![
                input("x", sh, st),
                node(
                    "sel",
                    "aten.select.int",
                    serde_json::json!([r("x"), 1, 0]),
                    &[8],
                    &[64],
                ),
                node(
                    "u",
                    "aten.unsqueeze.default",
                    serde_json::json!([r("sel"), 1]),
                    &[8, 1],
                    &[64, 1],
                ),
                node(
                    "z",
                    "aten.zeros_like.default",
                    serde_json::json!([r("u")]),
                    &[8, 1],
                    &[1, 1],
                ),
                node(
                    "sl",
                    "aten.slice.Tensor",
                    serde_json::json!([r("x"), 1, 0, 63]),
                    &[8, 63],
                    &[64, 1],
                ),
                node(
                    "s",
                    "aten.cumsum.default",
                    serde_json::json!([r("sl"), 1]),
                    &[8, 63],
                    &[63, 1],
                ),
                node(
                    "c",
                    "aten.cat.default",
                    serde_json::json!([[r("z"), r("s")], 1]),
                    sh,
                    st,
                ),
            ],
            "c",
        );
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(
            (spec.params.reverse, spec.params.exclusive),
            (None, Some(true))
        );
        assert_eq!((spec.shapes[0].m, spec.shapes[0].n), (Some(8), Some(64)));
        assert_eq!(ops, vec!["exclusive cumsum".to_string()]);
        // The identity in front must be the scan's: ones before a cumprod (an exclusive
        // product), not zeros (a different function, refused: its scan reads a slice).
        let excl_prod = |fill: &str| {
            graph(
                vec![
                    input("x", sh, st),
                    node("z", fill, serde_json::json!([r("x")]), &[8, 1], &[1, 1]),
                    node(
                        "sl",
                        "aten.slice.Tensor",
                        serde_json::json!([r("x"), 1, 0, -1]),
                        &[8, 63],
                        &[64, 1],
                    ),
                    node(
                        "s",
                        "aten.cumprod.default",
                        serde_json::json!([r("sl"), 1]),
                        &[8, 63],
                        &[63, 1],
                    ),
                    node(
                        "c",
                        "aten.cat.default",
                        serde_json::json!([[r("z"), r("s")], 1]),
                        sh,
                        st,
                    ),
                ],
                "c",
            )
        };
        let (spec, _) = map_graph(&excl_prod("aten.ones_like.default"), "t.py").unwrap();
        assert_eq!(
            (spec.params.scan, spec.params.exclusive),
            (Some(ScanKind::Prod), Some(true))
        );
        assert!(map_graph(&excl_prod("aten.zeros_like.default"), "t.py").is_err());
        // A strided slice (every other element) is no exclusive scan.
        let g = graph(
            vec![
                input("x", sh, st),
                node(
                    "z",
                    "aten.zeros_like.default",
                    serde_json::json!([r("x")]),
                    &[8, 1],
                    &[1, 1],
                ),
                node(
                    "sl",
                    "aten.slice.Tensor",
                    serde_json::json!([r("x"), 1, 0, 63, 2]),
                    &[8, 32],
                    &[64, 2],
                ),
                node(
                    "s",
                    "aten.cumsum.default",
                    serde_json::json!([r("sl"), 1]),
                    &[8, 32],
                    &[32, 1],
                ),
                node(
                    "c",
                    "aten.cat.default",
                    serde_json::json!([[r("z"), r("s")], 1]),
                    &[8, 33],
                    &[33, 1],
                ),
            ],
            "c",
        );
        assert!(map_graph(&g, "t.py").is_err());
        // cumsum(x, dtype=torch.float32) of bf16 rows writes f32.
        let mut s32 = node(
            "s",
            "aten.cumsum.default",
            serde_json::json!([r("x"), 1]),
            sh,
            st,
        );
        s32["kwargs"] = serde_json::json!({"dtype": "torch.float32"});
        s32["val"]["dtype"] = serde_json::json!("float32");
        let (spec, _) = map_graph(&graph(vec![input("x", sh, st), s32], "s"), "t.py").unwrap();
        assert_eq!(
            (spec.dtype, spec.out_dtype),
            (DType::BF16, Some(DType::F32))
        );
        // The scan of a computed tensor (a bool mask applied first): the mul is a [[before]]
        // op reading a bool matrix; the scan over dim 1 of (4, 16, 8) would be side by side.
        let g = graph(
            vec![
                input("x", sh, st),
                typed(input("mask", sh, st), "bool"),
                node(
                    "xm",
                    "aten.mul.Tensor",
                    serde_json::json!([r("x"), r("mask")]),
                    sh,
                    st,
                ),
                node(
                    "s",
                    "aten.cumsum.default",
                    serde_json::json!([r("xm"), 1]),
                    sh,
                    st,
                ),
            ],
            "s",
        );
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.family, Family::Scan);
        assert_eq!(spec.before.len(), 1, "{:?}", spec.before);
        let b = &spec.before[0];
        assert_eq!(
            (b.op.as_str(), b.operand.as_deref(), b.dtype),
            ("mul", Some("matrix"), Some(DType::Bool))
        );
        assert!(spec.epilogue.is_empty());
        assert_eq!(ops.len(), 2, "{ops:?}");
        assert!(ops[0].contains("mul") && ops[1] == "cumsum", "{ops:?}");
        let w = crate::spec::Workload::from_spec("t.toml", spec).unwrap();
        assert_eq!(w.before_chain().tensors[0].dtype, DType::Bool);
        // A scan of a value that is not elementwise ops of an input (a softmax written out:
        // the sum is a reduction) is refused.
        let g = graph(
            vec![
                input("x", sh, st),
                node("e", "aten.exp.default", serde_json::json!([r("x")]), sh, st),
                node(
                    "p",
                    "aten.sum.dim_IntList",
                    serde_json::json!([r("e"), [1], true]),
                    &[sh[0], 1],
                    &[1, 1],
                ),
                node(
                    "d",
                    "aten.div.Tensor",
                    serde_json::json!([r("e"), r("p")]),
                    sh,
                    st,
                ),
                node(
                    "s",
                    "aten.cumsum.default",
                    serde_json::json!([r("d"), 1]),
                    sh,
                    st,
                ),
            ],
            "s",
        );
        // The sum makes it a reduction beside the scan: refused, saying what the scan
        // fuses.
        let err = map_graph(&g, "t.py").unwrap_err();
        assert!(
            err.iter()
                .any(|u| u.message.contains("fuses elementwise ops only")),
            "{err:?}"
        );
    }

    #[test]
    fn ragged_and_small_shapes_are_odd_and_distinct() {
        let s = gemm_shapes(4096, 4096, 4096, 1);
        assert_eq!(
            s.iter().map(|x| (x.m, x.n, x.k)).collect::<Vec<_>>(),
            vec![
                (Some(4096), Some(4096), Some(4096)),
                (Some(1025), Some(1025), Some(1025)),
                (Some(127), Some(255), Some(64)),
            ]
        );
        // Tiny headlines keep distinct shapes only.
        let s = row_shapes(1, 2);
        assert_eq!(s.len(), 2, "{s:?}");
    }

    fn param_node(name: &str, shape: &[i64], stride: &[i64]) -> Value {
        json_node(
            name,
            "placeholder",
            None,
            Some("parameter"),
            serde_json::json!([]),
            shape,
            stride,
        )
    }

    /// `x [64, 32] -> linear(w1 [48, 32], b1) -> NODE -> linear(w2 [16, 48]) -> TAIL`.
    fn two_linears(act: &str, tail: Vec<Value>, out: &str) -> Graph {
        let mut nodes = vec![
            param_node("w1", &[48, 32], &[32, 1]),
            param_node("b1", &[48], &[1]),
            param_node("w2", &[16, 48], &[48, 1]),
            input("x", &[64, 32], &[32, 1]),
            node(
                "lin",
                "aten.linear.default",
                serde_json::json!([r("x"), r("w1"), r("b1")]),
                &[64, 48],
                &[48, 1],
            ),
            node(
                "act",
                act,
                serde_json::json!([r("lin")]),
                &[64, 48],
                &[48, 1],
            ),
            node(
                "lin2",
                "aten.linear.default",
                serde_json::json!([r("act"), r("w2")]),
                &[64, 16],
                &[16, 1],
            ),
        ];
        nodes.extend(tail);
        graph(nodes, out)
    }

    #[test]
    fn a_model_of_two_gemms_runs_as_stages() {
        let lse = node(
            "lse",
            "aten.logsumexp.default",
            serde_json::json!([r("lin2"), [1]]),
            &[64],
            &[1],
        );
        let g = two_linears("aten.sigmoid.default", vec![lse], "lse");
        // No one workload computes it ...
        let whole = map_graph(&g, "t.py").unwrap_err();
        assert!(
            whole
                .iter()
                .any(|u| u.message.contains("a second matrix product")),
            "{whole:?}"
        );
        // ... two do: the first GEMM with its sigmoid, then the second with the logsumexp
        // of its rows, reading the first's output as its input.
        let st = stages::split(&g, "t.py", &|_| true).unwrap();
        assert_eq!(st.len(), 2, "{st:?}");
        assert_eq!(st[0].spec.family, Family::GemmBiasAct);
        assert_eq!(st[0].output, "act");
        assert!(st[0].reads.is_empty());
        assert_eq!(st[1].spec.family, Family::GemmReduce);
        assert_eq!(st[1].output, "lse");
        assert_eq!(st[1].reads, vec![("act".to_string(), 0)]);
        assert!(
            st[1].spec.description.ends_with("stage 2 of 2 of t.py"),
            "{}",
            st[1].spec.description
        );
        // The first GEMM's shape is x's; the second's m x n x k is 64 x 16 x 48.
        let head = |k: usize| {
            let s = &st[k].spec.shapes[0];
            (s.m, s.n, s.k)
        };
        assert_eq!(head(0), (Some(64), Some(48), Some(32)));
        assert_eq!(head(1), (Some(64), Some(16), Some(48)));
        // Where the fewest stages have no built-in template, that split wins: with the
        // GEMM + reduction marked as having none, the reduction runs alone.
        let st = stages::split(&g, "t.py", &|s: &WorkloadSpec| {
            s.family != Family::GemmReduce
        })
        .unwrap();
        assert_eq!(
            st.iter().map(|s| s.spec.family).collect::<Vec<_>>(),
            [Family::GemmBiasAct, Family::Gemm, Family::Reduce],
        );
        assert_eq!(st[2].reads, vec![("lin2".to_string(), 1)]);
    }

    #[test]
    fn a_value_read_by_two_later_stages_is_an_input_of_both() {
        // y = x W1ᵀ + b; z = relu(y); out = z W2ᵀ, then + y[:, :16] is not expressible,
        // so: out = relu(y) W2ᵀ + r where r = y's GEMM output read again as a residual
        // (shapes kept square so the residual is a matrix operand).
        let mut nodes = vec![
            param_node("w1", &[32, 32], &[32, 1]),
            param_node("w2", &[32, 32], &[32, 1]),
            input("x", &[64, 32], &[32, 1]),
            node(
                "y",
                "aten.linear.default",
                serde_json::json!([r("x"), r("w1")]),
                &[64, 32],
                &[32, 1],
            ),
            node(
                "z",
                "aten.relu.default",
                serde_json::json!([r("y")]),
                &[64, 32],
                &[32, 1],
            ),
            node(
                "o",
                "aten.linear.default",
                serde_json::json!([r("z"), r("w2")]),
                &[64, 32],
                &[32, 1],
            ),
        ];
        nodes.push(node(
            "res",
            "aten.add.Tensor",
            serde_json::json!([r("o"), r("y")]),
            &[64, 32],
            &[32, 1],
        ));
        let g = graph(nodes, "res");
        let st = stages::split(&g, "t.py", &|_| true).unwrap();
        // y is read by z and by the residual: a stage of y and z would have two outputs,
        // so y is a stage of its own, z another, and the last reads both.
        assert_eq!(
            st.iter().map(|s| s.output.as_str()).collect::<Vec<_>>(),
            ["y", "z", "res"]
        );
        let mut reads = st[2].reads.clone();
        reads.sort();
        assert_eq!(reads, vec![("y".to_string(), 0), ("z".to_string(), 1)]);
        assert_eq!(st[2].spec.family, Family::Gemm);
        assert_eq!(st[2].spec.epilogue.len(), 1, "{:?}", st[2].spec.epilogue);
    }

    #[test]
    fn a_split_names_where_no_stage_maps() {
        // A convolution after the first GEMM: the GEMM maps, nothing from the conv on.
        let conv = node(
            "conv",
            "aten.conv1d.default",
            serde_json::json!([r("lin2"), r("w2")]),
            &[64, 16],
            &[16, 1],
        );
        let g = two_linears("aten.relu.default", vec![conv], "conv");
        let e = stages::split(&g, "t.py", &|_| true).unwrap_err();
        assert_eq!(e.mapped_before, 2, "{e:?}");
        assert_eq!(e.at, "conv");
        assert!(
            e.problems.iter().any(|u| u.message.contains("convolution")),
            "{e:?}"
        );
    }

    fn sdpa_graph(kwargs: serde_json::Value) -> Graph {
        let (sh, st) = (&[2, 4, 64, 32][..], &[8192, 2048, 32, 1][..]);
        let mut g = graph(
            vec![
                input("q", sh, st),
                input("k", sh, st),
                input("v", sh, st),
                node(
                    "attn",
                    "aten.scaled_dot_product_attention.default",
                    serde_json::json!([r("q"), r("k"), r("v")]),
                    sh,
                    st,
                ),
            ],
            "attn",
        );
        if let Value::Object(m) = kwargs {
            g.nodes[3].kwargs = m.into_iter().collect();
        }
        g
    }

    #[test]
    fn attention_is_written_out_and_runs_as_two_stages() {
        let mut g = sdpa_graph(serde_json::json!({}));
        assert!(composite::expand(&mut g).is_empty());
        let st = stages::split(&g, "t.py", &|_| true).unwrap();
        assert_eq!(st.len(), 2, "{st:?}");
        // softmax(Q Kᵀ / sqrt(32)) over batched 64 x 64 scores, then P V.
        assert_eq!(st[0].spec.family, Family::GemmSoftmax);
        assert_eq!(st[0].spec.shapes[0].batch, Some(8));
        let chain = st[0].spec.epilogue.first().expect("the scale");
        assert_eq!(chain.op, "mul");
        assert!((chain.value.unwrap_or(0.0) - 1.0 / 32f64.sqrt()).abs() < 1e-12);
        assert_eq!(
            st[0].spec.layout.as_ref().and_then(|l| l.b),
            Some(Layout::Col),
            "Kᵀ read as K's rows"
        );
        assert_eq!(st[1].spec.family, Family::Gemm);
        assert_eq!(st[1].output, "attn");
        assert_eq!(st[1].reads, vec![("attn_probs".to_string(), 0)]);
        let h = &st[1].spec.shapes[0];
        assert_eq!((h.m, h.n, h.k), (Some(64), Some(32), Some(64)));

        // Causal: the future's scores are filled with -inf before the softmax.
        let mut g = sdpa_graph(serde_json::json!({"is_causal": true, "scale": 0.5}));
        assert!(composite::expand(&mut g).is_empty());
        let st = stages::split(&g, "t.py", &|_| true).unwrap();
        let ops: Vec<&str> = st[0].spec.epilogue.iter().map(|o| o.op.as_str()).collect();
        // (tril with a value: the lower triangle kept, the rest filled with it.)
        assert_eq!(ops, ["mul", "tril"], "{:?}", st[0].spec.epilogue);
        assert_eq!(st[0].spec.epilogue[1].diagonal, None);
        assert_eq!(st[0].spec.epilogue[0].value, Some(0.5));
        assert_eq!(st[0].spec.epilogue[1].value, Some(f64::NEG_INFINITY));

        // A dropout inside is left as it is, with why.
        let mut g = sdpa_graph(serde_json::json!({"dropout_p": 0.1}));
        let left = composite::expand(&mut g);
        assert_eq!(left.len(), 1);
        assert!(left[0].1.contains("dropout"));
        assert_eq!(
            g.nodes[3].target.as_deref(),
            Some("aten.scaled_dot_product_attention.default")
        );
        let e = map_graph(&g, "t.py").unwrap_err();
        assert!(
            e.iter()
                .any(|u| u.message.contains("scaled_dot_product_attention")),
            "{e:?}"
        );
        // So is a scale that is not a number.
        let mut g = sdpa_graph(serde_json::json!({"scale": "x"}));
        let left = composite::expand(&mut g);
        assert!(left[0].1.contains("scale"), "{left:?}");
    }

    fn distance_graph(target: &str, args: Value, out_shape: &[i64], after: Vec<Value>) -> Graph {
        let (sh, st) = (&[64, 32][..], &[32, 1][..]);
        let out_st: Vec<i64> = if out_shape.is_empty() {
            vec![]
        } else {
            vec![1]
        };
        let mut nodes = vec![
            typed(input("a", sh, st), "float32"),
            typed(input("p", sh, st), "float32"),
            typed(input("n", sh, st), "float32"),
            typed(node("dist", target, args, out_shape, &out_st), "float32"),
        ];
        let last = after
            .last()
            .and_then(|v| v.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("dist")
            .to_string();
        nodes.extend(after);
        graph(nodes, &last)
    }

    #[test]
    fn distances_are_written_out_as_norms_and_a_chain() {
        // mean(pairwise_distance(a, p)): the norm of a - p + eps a row, then the mean.
        let mean = typed(
            node(
                "m",
                "aten.mean.default",
                serde_json::json!([r("dist")]),
                &[],
                &[],
            ),
            "float32",
        );
        let mut g = distance_graph(
            "aten.pairwise_distance.default",
            serde_json::json!([r("a"), r("p")]),
            &[64],
            vec![mean],
        );
        assert!(composite::expand(&mut g).is_empty());
        let st = stages::split(&g, "t.py", &|_| true).unwrap();
        assert_eq!(
            st.iter()
                .map(|s| (s.spec.family, s.spec.params.reduce))
                .collect::<Vec<_>>(),
            [
                (Family::Reduce, Some(ReduceKind::L2)),
                (Family::Reduce, Some(ReduceKind::Mean))
            ]
        );
        let before: Vec<(&str, Option<f64>)> = st[0]
            .spec
            .before
            .iter()
            .map(|o| (o.op.as_str(), o.value))
            .collect();
        assert_eq!(before, [("sub", None), ("add", Some(1e-6))]);

        // triplet_margin_loss(a, p, n, margin 0.5, swap): three distances (two alike with
        // a and one of p, n), then mean(max(d(a,p) - min(d(a,n), d(p,n)) + 0.5, 0)).
        let mut g = distance_graph(
            "aten.triplet_margin_loss.default",
            serde_json::json!([r("a"), r("p"), r("n"), 0.5, 2, 1e-6, true]),
            &[],
            vec![],
        );
        assert!(composite::expand(&mut g).is_empty());
        let st = stages::split(&g, "t.py", &|_| true).unwrap();
        assert_eq!(st.len(), 4, "{st:?}");
        assert!(st[..3]
            .iter()
            .all(|s| s.spec.params.reduce == Some(ReduceKind::L2)));
        let last = &st[3];
        assert_eq!(last.spec.params.reduce, Some(ReduceKind::Mean));
        let ops: Vec<(&str, Option<f64>)> = last
            .spec
            .before
            .iter()
            .map(|o| (o.op.as_str(), o.value))
            .collect();
        assert_eq!(
            ops.iter().map(|o| o.0).collect::<Vec<_>>(),
            // The running value is the min: d(a, p) minus it is its negation plus d(a, p).
            ["min", "neg", "add", "add", "clamp"],
            "{ops:?}"
        );
        assert_eq!(ops[3].1, Some(0.5));
        assert_eq!(last.reads.len(), 3, "{:?}", last.reads);
        // reduction = "sum" (2): the hinge's sum; without swap, two distances alike.
        let mut g = distance_graph(
            "aten.triplet_margin_loss.default",
            serde_json::json!([r("a"), r("p"), r("n"), 1.0, 2, 1e-6, false, 2]),
            &[],
            vec![],
        );
        assert!(composite::expand(&mut g).is_empty());
        let st = stages::split(&g, "t.py", &|_| true).unwrap();
        assert_eq!(
            st.iter().map(|s| s.spec.params.reduce).collect::<Vec<_>>(),
            [
                Some(ReduceKind::L2),
                Some(ReduceKind::L2),
                Some(ReduceKind::Sum)
            ]
        );
        // An order-1 distance is left, with why.
        let mut g = distance_graph(
            "aten.triplet_margin_loss.default",
            serde_json::json!([r("a"), r("p"), r("n"), 1.0, 1]),
            &[],
            vec![],
        );
        let left = composite::expand(&mut g);
        assert_eq!(left.len(), 1);
        assert!(left[0].1.contains("order other than 2"), "{left:?}");

        // cosine_similarity over dim 1: Σ a·p, the two clamped norms, then their quotient
        // (the elementwise family reads one vector and a row operand: the product of the
        // norms, then the quotient, each a stage).
        let mut g = distance_graph(
            "aten.cosine_similarity.default",
            serde_json::json!([r("a"), r("p")]),
            &[64],
            vec![],
        );
        assert!(composite::expand(&mut g).is_empty());
        let st = stages::split(&g, "t.py", &|_| true).unwrap();
        assert_eq!(
            st.iter().map(|s| s.spec.params.reduce).collect::<Vec<_>>(),
            [
                Some(ReduceKind::Sum),
                Some(ReduceKind::L2),
                Some(ReduceKind::L2),
                None,
                None
            ],
            "{st:?}"
        );
        // (A reduction's ops after it are its `[[epilogue]]`.)
        let after: Vec<(&str, Option<f64>)> = st[1]
            .spec
            .epilogue
            .iter()
            .map(|o| (o.op.as_str(), o.min))
            .collect();
        assert_eq!(after, [("clamp", Some(1e-8))], "{:?}", st[1].spec.epilogue);
        assert_eq!(st[4].spec.family, Family::Activation);
        assert_eq!(st[4].output, "dist");
        assert_eq!(
            st[4].reads,
            vec![("dist_dot".to_string(), 0), ("dist_den".to_string(), 3)]
        );
    }

    #[test]
    fn in_place_ops_map_as_their_out_of_place_forms_unless_their_input_is_read_again() {
        // mm -> relu_ -> mul_(2): torch.export threads each result on.
        let chain = |later_reader: bool| {
            let mut nodes = mm_nodes(&[32, 1], &[1, 32]);
            nodes.push(out_node(
                "relu_",
                "aten.relu_.default",
                serde_json::json!([r("mm")]),
            ));
            nodes.push(out_node(
                "mul_",
                "aten.mul_.Tensor",
                serde_json::json!([r("relu_"), 2.0]),
            ));
            let mut out = "mul_";
            if later_reader {
                // Reads mm after relu_ mutated it: an alias that sees the mutation.
                nodes.push(out_node(
                    "add",
                    "aten.add.Tensor",
                    serde_json::json!([r("mul_"), r("mm")]),
                ));
                out = "add";
            }
            graph(nodes, out)
        };
        let mut g = chain(false);
        composite::out_of_place(&mut g);
        let targets: Vec<&str> = g.nodes[3..]
            .iter()
            .filter_map(|n| n.target.as_deref())
            .collect();
        assert_eq!(targets, ["aten.relu.default", "aten.mul.Tensor"]);
        let (spec, ops) = map_graph(&g, "t.py").unwrap();
        assert_eq!(spec.family, Family::Gemm);
        assert_eq!(ops, ["mm", "relu", "mul 2"]);

        let mut g = chain(true);
        composite::out_of_place(&mut g);
        assert_eq!(g.nodes[3].target.as_deref(), Some("aten.relu_.default"));
        // mul_'s input (relu_) is read by nothing after it: it still becomes mul.
        assert_eq!(g.nodes[4].target.as_deref(), Some("aten.mul.Tensor"));
        let e = map_graph(&g, "t.py").unwrap_err();
        assert!(e.iter().any(|u| u.node == "relu_"), "{e:?}");

        // A module's state update (BatchNorm's `num_batches_tracked.add_(1)`) stays the
        // in-place bookkeeping the mapper knows.
        let mut g = chain(false);
        let as_node = |v: Value| -> Node { serde_json::from_value(v).unwrap() };
        g.nodes.insert(0, as_node(buffer("tracked", &[], &[])));
        g.nodes.push(as_node(node(
            "add_",
            "aten.add_.Tensor",
            serde_json::json!([r("tracked"), 1]),
            &[],
            &[],
        )));
        composite::out_of_place(&mut g);
        assert_eq!(
            g.nodes.last().and_then(|n| n.target.as_deref()),
            Some("aten.add_.Tensor")
        );
    }

    /// `x [64, 32]`, `w1`, `w3` [48, 32]: `gate(x w1ᵀ [+ b]) * (x w3ᵀ)`, or the product
    /// written the other way round.
    fn glu_graph(gate: Value, swapped: bool, bias: bool) -> Graph {
        let mut nodes = vec![
            param_node("w1", &[48, 32], &[32, 1]),
            param_node("w3", &[48, 32], &[32, 1]),
            param_node("b1", &[48], &[1]),
            input("x", &[64, 32], &[32, 1]),
        ];
        let first = if bias {
            serde_json::json!([r("x"), r("w1"), r("b1")])
        } else {
            serde_json::json!([r("x"), r("w1")])
        };
        nodes.push(node("g", "aten.linear.default", first, &[64, 48], &[48, 1]));
        nodes.push(gate);
        nodes.push(node(
            "u",
            "aten.linear.default",
            serde_json::json!([r("x"), r("w3")]),
            &[64, 48],
            &[48, 1],
        ));
        let args = if swapped {
            serde_json::json!([r("u"), r("act")])
        } else {
            serde_json::json!([r("act"), r("u")])
        };
        nodes.push(node("mul", "aten.mul.Tensor", args, &[64, 48], &[48, 1]));
        graph(nodes, "mul")
    }

    #[test]
    fn a_gated_pair_of_gemms_of_one_input_is_gemm_glu() {
        let silu = node(
            "act",
            "aten.silu.default",
            serde_json::json!([r("g")]),
            &[64, 48],
            &[48, 1],
        );
        let (spec, ops) = map_graph(&glu_graph(silu.clone(), false, false), "t.py").unwrap();
        assert_eq!(spec.family, Family::GemmGlu);
        assert_eq!(spec.params.gate, Some(Activation::Silu));
        assert_eq!(ops, ["linear (gated)", "linear (up)", "silu gate", "mul"]);
        // The validation shapes keep 16-byte rows (the template reads every row by TMA).
        for sh in &spec.shapes[1..] {
            assert_eq!(sh.n.unwrap_or(0) % 8, 0, "{sh:?}");
            assert_eq!(sh.k.unwrap_or(0) % 8, 0, "{sh:?}");
        }
        assert_eq!(spec.shapes[1].m.map(|m| m % 2), Some(1));
        // GEGLU written up * gelu(gate, tanh).
        let mut tanh = node(
            "act",
            "aten.gelu.default",
            serde_json::json!([r("g")]),
            &[64, 48],
            &[48, 1],
        );
        tanh["kwargs"] = serde_json::json!({"approximate": "tanh"});
        let (spec, _) = map_graph(&glu_graph(tanh, true, false), "t.py").unwrap();
        assert_eq!(spec.params.gate, Some(Activation::GeluTanh));
        // A bias on the gated product is no gemm_glu: two GEMMs, refused as one workload,
        // two stages.
        let g = glu_graph(silu, false, true);
        let e = map_graph(&g, "t.py").unwrap_err();
        assert!(e.iter().any(|u| u.message.contains("gemm_glu")), "{e:?}");
        let st = stages::split(&g, "t.py", &|_| true).unwrap();
        assert_eq!(
            st.iter().map(|s| s.spec.family).collect::<Vec<_>>(),
            [Family::GemmBiasAct, Family::Gemm]
        );
    }
}
