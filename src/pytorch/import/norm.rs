//! Row normalizations in a traced graph: `aten.layer_norm` and `aten.rms_norm` as ops, and
//! the forms KernelBench writes out (RMSNorm as `x / sqrt(mean(x^2) + eps)` or
//! `x * rsqrt(...)`, L2 as `x / norm(x)` or `x / clamp_min(norm(x), eps)`, L1 as
//! `x / sum(|x|)`), each over a run of adjacent dimensions. A match names the node whose
//! value is the normalized tensor (the head the chain continues from) and the nodes it
//! absorbs, which are then not "unknown ops".

use std::collections::HashSet;

use serde_json::Value;

use super::{arg, num_param, op_name, param, Arg, Mapper, Node};
use crate::spec::chain::OpSpec;
use crate::spec::{DType, Family, Layout, LayoutSpec, NormKind, ParamsSpec, WorkloadSpec};

/// The divisor of a written-out norm: the kind, its input, the dims, the eps a clamp_min
/// or an add puts in, and the count the divisor is divided by (n for `mean(|x|)`, an L1
/// norm times n; else 1).
struct Divisor {
    kind: NormKind,
    x: String,
    dims: Vec<usize>,
    eps: Option<f64>,
    count: f64,
}

/// A normalization found in the graph.
pub(super) struct NormMatch {
    /// The node whose value is the normalized tensor.
    pub head: String,
    /// The normalized input.
    pub input: String,
    pub kind: NormKind,
    /// `None`: the kind's default.
    pub eps: Option<f64>,
    /// The normalized dimensions, ascending, non-negative.
    pub dims: Vec<usize>,
    /// Ops the norm itself runs after normalizing (an affine weight and bias).
    pub affine: Vec<OpSpec>,
    /// Every node the match accounts for (the head included).
    pub absorbed: HashSet<String>,
    /// What the spec's description calls it, where not the kind's title.
    pub title: Option<&'static str>,
    /// Rows each of `dims`' runs splits into (GroupNorm's groups of channels; else 1).
    pub groups: i64,
}

fn target(n: &Node) -> &str {
    op_name(n.target.as_deref().unwrap_or_default())
}

fn rank(mp: &Mapper<'_>, name: &str) -> usize {
    mp.meta(name).map_or(0, |m| m.shape.len())
}

/// Dimension list argument `i` (an int or a list), normalized for a tensor of `rank`.
pub(super) fn dims_arg(n: &Node, i: usize, key: &str, rank: usize) -> Option<Vec<usize>> {
    let v = param(n, i, key)?;
    let list: Vec<i64> = match v {
        Value::Array(a) => a.iter().map(Value::as_i64).collect::<Option<_>>()?,
        other => vec![other.as_i64()?],
    };
    let r = rank as i64;
    let mut d: Vec<usize> = list
        .into_iter()
        .map(|x| if x < 0 { x + r } else { x })
        .filter(|x| (0..r).contains(x))
        .map(|x| x as usize)
        .collect();
    d.sort_unstable();
    d.dedup();
    (!d.is_empty()).then_some(d)
}

impl<'g> Mapper<'g> {
    pub(super) fn node(&self, name: &str) -> Option<&'g Node> {
        self.nodes.get(name).copied()
    }

    /// The node an argument names, through copies and broadcasting views (expand,
    /// expand_as), with the names passed on the way.
    fn producer(&self, a: Option<&Value>, seen: &mut Vec<String>) -> Option<&'g Node> {
        let Some(Arg::Node(mut name)) = self.resolve(a.map(arg)) else {
            return None;
        };
        loop {
            let n = self.node(name)?;
            if matches!(target(n), "expand" | "expand_as") {
                seen.push(n.name.clone());
                match self.resolve(n.args.first().map(arg)) {
                    Some(Arg::Node(x)) => name = x,
                    _ => return None,
                }
            } else {
                return Some(n);
            }
        }
    }

    fn is(&self, a: Option<&Value>, x: &str) -> bool {
        matches!(self.resolve(a.map(arg)), Some(Arg::Node(v)) if v == x)
    }

    /// `x^2` as `pow(x, 2)` or `x * x`: the x.
    fn square_of(&self, n: &Node) -> Option<String> {
        let a0 = self.resolve(n.args.first().map(arg));
        match (target(n), a0) {
            ("pow", Some(Arg::Node(x))) if num_param(n, 1, "exponent") == Some(2.0) => {
                Some(x.to_string())
            }
            ("mul", Some(Arg::Node(x))) if self.is(n.args.get(1), x) => Some(x.to_string()),
            _ => None,
        }
    }

    /// A reduction with keepdim over some dimensions: (op, its input, dims).
    fn keepdim_reduction(&self, n: &Node) -> Option<(&'static str, String, Vec<usize>)> {
        let Some(Arg::Node(src)) = self.resolve(n.args.first().map(arg)) else {
            return None;
        };
        let r = rank(self, src);
        let (op, dims_at, keep_at) = match target(n) {
            "mean" => ("mean", 1, 2),
            "sum" => ("sum", 1, 2),
            "linalg_vector_norm" | "norm" => {
                // The order defaults to 2 (`torch.norm(x, p='fro')` traces to none).
                if num_param(n, 1, "ord")
                    .or_else(|| num_param(n, 1, "p"))
                    .unwrap_or(2.0)
                    != 2.0
                {
                    return None;
                }
                ("l2", 2, 3)
            }
            _ => return None,
        };
        // No dimension: every one (`torch.norm(x)`, Frobenius); the 0-d result broadcasts
        // as a kept one would.
        if param(n, dims_at, "dim").is_none_or(Value::is_null) {
            return Some((op, src.to_string(), (0..r).collect()));
        }
        let keep = param(n, keep_at, "keepdim")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if !keep {
            return None;
        }
        Some((op, src.to_string(), dims_arg(n, dims_at, "dim", r)?))
    }

    /// `sum(x^2)`'s or `mean(x^2)`'s x and dims, or `norm(x)`'s: (kind of sum, x, dims).
    fn sum_of_squares(
        &self,
        n: &Node,
        seen: &mut Vec<String>,
    ) -> Option<(&'static str, String, Vec<usize>)> {
        let (op, src, dims) = self.keepdim_reduction(n)?;
        if op == "l2" {
            return Some((op, src, dims));
        }
        let sq = self.node(&src)?;
        let x = self.square_of(sq)?;
        seen.push(sq.name.clone());
        Some((op, x, dims))
    }

    /// The divisor of an L2 or L1 norm, or the sqrt of an RMS one.
    fn divisor(&self, d: &'g Node, seen: &mut Vec<String>) -> Option<Divisor> {
        seen.push(d.name.clone());
        match target(d) {
            "clamp_min" | "clamp" => {
                let eps = num_param(d, 1, "min")?;
                if target(d) == "clamp" && num_param(d, 2, "max").is_some() {
                    return None;
                }
                let inner = self.producer(d.args.first(), seen)?;
                let d = self.divisor(inner, seen)?;
                if d.eps.is_some_and(|e| e != 0.0) || d.kind == NormKind::Rms {
                    return None;
                }
                // max(sum / count, eps) = max(sum, count eps) / count.
                Some(Divisor {
                    eps: Some(eps * d.count),
                    ..d
                })
            }
            "sqrt" => {
                let inner = self.producer(d.args.first(), seen)?;
                seen.push(inner.name.clone());
                // sqrt(mean(x^2) + eps): RMS; sqrt(sum(x^2)): L2.
                let (red, eps) = if target(inner) == "add" {
                    let eps = num_param(inner, 1, "other")?;
                    (self.producer(inner.args.first(), seen)?, Some(eps))
                } else {
                    (inner, None)
                };
                seen.push(red.name.clone());
                let (op, x, dims) = self.sum_of_squares(red, seen)?;
                let kind = match (op, eps) {
                    ("mean", _) => NormKind::Rms,
                    ("sum", None) => NormKind::L2,
                    _ => return None,
                };
                Some(Divisor {
                    kind,
                    x,
                    dims,
                    eps: Some(eps.unwrap_or(0.0)),
                    count: 1.0,
                })
            }
            // x / norm(x) has no epsilon (F.normalize's is the clamp_min above).
            "linalg_vector_norm" | "norm" => {
                let (_, x, dims) = self.keepdim_reduction(d)?;
                Some(Divisor {
                    kind: NormKind::L2,
                    x,
                    dims,
                    eps: Some(0.0),
                    count: 1.0,
                })
            }
            // sum(|x|), or mean(|x|) = sum(|x|) / n.
            "sum" | "mean" => {
                let (op, src, dims) = self.keepdim_reduction(d)?;
                let a = self.node(&src)?;
                if target(a) != "abs" {
                    return None;
                }
                seen.push(a.name.clone());
                let Some(Arg::Node(x)) = self.resolve(a.args.first().map(arg)) else {
                    return None;
                };
                let count = if op == "mean" {
                    let shape = &self.meta(x)?.shape;
                    dims.iter()
                        .map(|&i| shape.get(i).copied().unwrap_or(1))
                        .product::<i64>() as f64
                } else {
                    1.0
                };
                Some(Divisor {
                    kind: NormKind::L1,
                    x: x.to_string(),
                    dims,
                    eps: Some(0.0),
                    count,
                })
            }
            _ => None,
        }
    }

    /// A written-out norm whose result is node `n` (`x / divisor` or `x * rsqrt(...)`).
    fn written_norm(&self, n: &'g Node) -> Option<NormMatch> {
        let mut seen = vec![n.name.clone()];
        let mut affine = Vec::new();
        let (x, kind, dims, eps) = match target(n) {
            "div" => {
                let Some(Arg::Node(x)) = self.resolve(n.args.first().map(arg)) else {
                    return None;
                };
                let d = self.producer(n.args.get(1), &mut seen)?;
                let dv = self.divisor(d, &mut seen)?;
                if dv.x != x {
                    return None;
                }
                // x / mean(|x|) = (x / sum(|x|)) * n.
                if dv.count != 1.0 {
                    affine.push(OpSpec {
                        op: "mul".into(),
                        value: Some(dv.count),
                        ..OpSpec::default()
                    });
                }
                (x.to_string(), dv.kind, dv.dims, dv.eps)
            }
            "mul" => {
                // x * rsqrt(mean(x^2) + eps), either order.
                let (xa, ra) = (n.args.first(), n.args.get(1));
                let mut found = None;
                for (xv, rv) in [(xa, ra), (ra, xa)] {
                    let Some(Arg::Node(x)) = self.resolve(xv.map(arg)) else {
                        continue;
                    };
                    let mut s = seen.clone();
                    let Some(r) = self.producer(rv, &mut s) else {
                        continue;
                    };
                    if target(r) != "rsqrt" {
                        continue;
                    }
                    s.push(r.name.clone());
                    let Some(add) = self.producer(r.args.first(), &mut s) else {
                        continue;
                    };
                    s.push(add.name.clone());
                    let (red, eps) = if target(add) == "add" {
                        match (
                            self.producer(add.args.first(), &mut s),
                            num_param(add, 1, "other"),
                        ) {
                            (Some(red), Some(e)) => (red, e),
                            _ => continue,
                        }
                    } else {
                        (add, 0.0)
                    };
                    s.push(red.name.clone());
                    match self.sum_of_squares(red, &mut s) {
                        Some(("mean", src, dims)) if src == x => {
                            found = Some((x.to_string(), dims, eps, s));
                            break;
                        }
                        _ => continue,
                    }
                }
                let (x, dims, eps, s) = found?;
                seen = s;
                (x, NormKind::Rms, dims, Some(eps))
            }
            _ => return None,
        };
        Some(NormMatch {
            head: n.name.clone(),
            input: x,
            kind,
            eps,
            dims,
            affine,
            absorbed: seen.into_iter().collect(),
            title: None,
            groups: 1,
        })
    }

    /// `aten.layer_norm(x, shape, weight, bias, eps)` / `aten.rms_norm(x, shape, weight,
    /// eps)`: the last `len(shape)` dimensions, the weight and bias as row operands.
    fn norm_op(&self, n: &'g Node, dtype: Option<DType>) -> Option<NormMatch> {
        let layer = match target(n) {
            "instance_norm" | "group_norm" => return self.channel_norm(n),
            "batch_norm" => return self.batch_norm(n),
            "layer_norm" => true,
            "rms_norm" => false,
            _ => return None,
        };
        let Some(Arg::Node(x)) = self.resolve(n.args.first().map(arg)) else {
            return None;
        };
        let r = rank(self, x);
        let l = param(n, 1, "normalized_shape")
            .and_then(Value::as_array)
            .map_or(1, Vec::len);
        if l == 0 || l > r {
            return None;
        }
        let (weight, bias, eps) = if layer {
            (
                param(n, 2, "weight"),
                param(n, 3, "bias"),
                num_param(n, 4, "eps"),
            )
        } else {
            // rms_norm with eps None uses the input type's machine epsilon.
            let eps = num_param(n, 3, "eps").or_else(|| dtype.map(DType::epsilon));
            (param(n, 2, "weight"), None, eps)
        };
        let affine = row_affine([weight, bias]);
        Some(NormMatch {
            head: n.name.clone(),
            input: x.to_string(),
            kind: if layer {
                NormKind::Layer
            } else {
                NormKind::Rms
            },
            eps: eps.or(Some(1e-5)),
            dims: (r - l..r).collect(),
            affine,
            absorbed: HashSet::from([n.name.clone()]),
            title: None,
            groups: 1,
        })
    }

    /// `aten.instance_norm(x, weight, bias, running_mean, running_var, use_input_stats,
    /// momentum, eps, cudnn_enabled)` and `aten.group_norm(x, num_groups, weight, bias,
    /// eps, cudnn_enabled)` of an (N, C, ...) input as layer norms of its rows: without a
    /// per-channel weight and bias and with the input's own statistics (the default of
    /// `nn.InstanceNorm*d`, `nn.GroupNorm(..., affine=False)`), every (n, c) plane, or every
    /// group of C / G channels with its spatial dims, is one contiguous row. Otherwise
    /// `None`, and the op is unknown with [`refusal`]'s reason.
    fn channel_norm(&self, n: &'g Node) -> Option<NormMatch> {
        let instance = target(n) == "instance_norm";
        let Some(Arg::Node(x)) = self.resolve(n.args.first().map(arg)) else {
            return None;
        };
        // A GroupNorm of an (N, C) input (a GEMM's output): its per-channel weight and
        // bias run along the row (C values), a row operand each.
        let channels_are_the_row = !instance && rank(self, x) == 2;
        let (w_at, b_at) = if instance { (1, 2) } else { (2, 3) };
        let weights = [param(n, w_at, "weight"), param(n, b_at, "bias")];
        let affine = if channels_are_the_row {
            row_affine(weights)
        } else if refusal(n).is_some() {
            return None;
        } else {
            // (N, C, ...): each row (a group of C / G channels, or one channel's plane)
            // holds whole channels; map_norm makes the batch N.
            let channels = *self.meta(x)?.shape.get(1)?;
            let per_row = if instance {
                1
            } else {
                channels / param(n, 1, "num_groups").and_then(Value::as_i64)?.max(1)
            };
            channel_affine(weights, u32::try_from(per_row).ok()?)
        };
        // The first normalized dim, the rows each run of them splits into, eps's place.
        let (first, groups, eps_at, title) = if instance {
            (2, 1, 7, "InstanceNorm (a LayerNorm of each (n, c) plane)")
        } else {
            let channels = *self.meta(x)?.shape.get(1)?;
            let groups = param(n, 1, "num_groups")
                .and_then(Value::as_i64)
                .filter(|&g| g >= 1 && channels % g == 0)?;
            (
                1,
                groups,
                4,
                "GroupNorm (a LayerNorm of each group of channels)",
            )
        };
        let r = rank(self, x);
        if r <= first {
            return None;
        }
        Some(NormMatch {
            head: n.name.clone(),
            input: x.to_string(),
            kind: NormKind::Layer,
            eps: num_param(n, eps_at, "eps").or(Some(1e-5)),
            dims: (first..r).collect(),
            affine,
            absorbed: HashSet::from([n.name.clone()]),
            title: Some(title),
            groups,
        })
    }

    /// `aten.batch_norm(x, weight, bias, running_mean, running_var, training, momentum,
    /// eps, cudnn_enabled)` in training mode of an (N, C) input (`nn.BatchNorm1d` after a
    /// linear layer): each feature (a column) normalized over the N rows, the weight and
    /// bias row operands. The running statistics' update, a side effect, is not computed.
    fn batch_norm(&self, n: &'g Node) -> Option<NormMatch> {
        if param(n, 5, "training").and_then(Value::as_bool) != Some(true) {
            return None;
        }
        let Some(Arg::Node(x)) = self.resolve(n.args.first().map(arg)) else {
            return None;
        };
        let r = rank(self, x);
        if r < 2 {
            return None;
        }
        // (N, C): the features are the row (after a GEMM, gemm_norm); (N, C, ...): each
        // channel's plane is a row of a batch of N items (family norm), its weight and bias
        // one value a row.
        let weights = [param(n, 1, "weight"), param(n, 2, "bias")];
        let affine = if r == 2 {
            row_affine(weights)
        } else {
            channel_affine(weights, 1)
        };
        Some(NormMatch {
            head: n.name.clone(),
            input: x.to_string(),
            kind: NormKind::Batch,
            eps: num_param(n, 7, "eps").or(Some(1e-5)),
            dims: vec![0],
            affine,
            absorbed: HashSet::from([n.name.clone()]),
            title: Some("BatchNorm in training mode (each feature over the batch's rows)"),
            groups: 1,
        })
    }

    /// Every normalization in `calls`, written out or as an op.
    pub(super) fn norms(&self, calls: &[&'g Node]) -> Vec<NormMatch> {
        let mut out: Vec<NormMatch> = Vec::new();
        for n in calls {
            if out.iter().any(|m| m.absorbed.contains(&n.name)) {
                continue;
            }
            let dtype = n.val.as_ref().and_then(|m| super::dtype_of(&m.dtype));
            if let Some(m) = self.norm_op(n, dtype).or_else(|| self.written_norm(n)) {
                out.push(m);
            }
        }
        out
    }
}

/// A run of adjacent dimensions of a Model input (`dims`), seen as rows: the last
/// dimensions are `m` rows of `len`; a middle run is `batch` batches of `m` rows side by
/// side (`col`, a column-major A).
pub(super) struct RowsOver {
    pub shape: Vec<i64>,
    pub dtype: DType,
    pub first: usize,
    pub last: usize,
    pub col: bool,
    pub batch: i64,
    pub m: i64,
    pub len: i64,
}

impl RowsOver {
    /// An imported spec's description: `{dtype} {what} over <the rows> of <shape>, then
    /// N ops; imported from {file}`.
    pub fn describe(&self, what: &str, ops: usize, file: &str) -> String {
        let (first, last, batch, m, len) = (self.first, self.last, self.batch, self.m, self.len);
        let rows = if self.col {
            format!("dims {first}..={last} ({batch} x {m} rows of {len}, side by side)")
        } else {
            format!(
                "the last dims ({m} row{} of {len})",
                if m == 1 { "" } else { "s" }
            )
        };
        let then = match ops {
            0 => String::new(),
            1 => ", then 1 op".into(),
            k => format!(", then {k} ops"),
        };
        format!(
            "{} {what} over {rows} of {:?}{then}; imported from {file}",
            self.dtype, self.shape
        )
    }

    /// `[layout]`: A column-major where the rows lie side by side.
    pub fn layout(&self) -> Option<LayoutSpec> {
        self.col.then(|| LayoutSpec {
            a: Some(Layout::Col),
            ..LayoutSpec::default()
        })
    }
}

/// The rows of `input` over `dims` for family `family` (a norm or a reduction), or a
/// problem recorded on `head`: the input must be an input of Model, of a float type,
/// contiguous, and the dims adjacent.
pub(super) fn rows_over(
    mp: &mut Mapper<'_>,
    head: &Node,
    input: &str,
    dims: &[usize],
    family: &str,
) -> Option<RowsOver> {
    if mp.source(input).is_none() {
        mp.problem(
            head,
            format!("its input `{input}` is computed, not an input of Model: family {family} fuses nothing before it"),
        );
        return None;
    }
    let meta = mp.meta(input).cloned()?;
    let dtype = super::float_input(mp, head, &meta, &format!("family {family} takes"))?;
    if !super::contiguous(&meta) {
        mp.problem(
            head,
            format!(
                "its input {:?} (strides {:?}) is not contiguous",
                meta.shape, meta.stride
            ),
        );
        return None;
    }
    let (first, last) = (dims[0], dims[dims.len() - 1]);
    if last - first + 1 != dims.len() {
        mp.problem(
            head,
            format!("a {family} over dimensions {dims:?}, which are not adjacent"),
        );
        return None;
    }
    let prod = |s: &[i64]| s.iter().product::<i64>().max(1);
    let (outer, len, inner) = (
        prod(&meta.shape[..first]),
        prod(&meta.shape[first..=last]),
        prod(&meta.shape[last + 1..]),
    );
    let (col, batch, m) = if inner == 1 {
        (false, 1, outer)
    } else {
        (true, outer, inner)
    };
    Some(RowsOver {
        shape: meta.shape,
        dtype,
        first,
        last,
        col,
        batch,
        m,
        len,
    })
}

/// None, with the problem recorded at `head`, when a `family` op over a middle dimension
/// (`col`: its rows side by side) is followed by an op reading a tensor: only constants and
/// activations follow one.
pub(super) fn constants_after_side_by_side(
    mp: &mut Mapper<'_>,
    head: &Node,
    chain: &[OpSpec],
    col: bool,
    family: &str,
) -> Option<()> {
    if col
        && chain
            .iter()
            .any(|s| s.operand.as_deref().is_some_and(|o| o != "z"))
    {
        mp.problem(
            head,
            format!(
                "a tensor operand after a {family} over a middle dimension: only constants and activations follow such a {family}"
            ),
        );
        return None;
    }
    Some(())
}

/// The workload of a normalization `nm` whose chain ends at `out`.
pub(super) fn map_norm(
    mp: &mut Mapper<'_>,
    nm: &NormMatch,
    out: &str,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let head = mp.node(&nm.head)?;
    if nm.kind == NormKind::Batch && rank(mp, &nm.input) >= 3 {
        return map_batch_norm(mp, nm, out, file, ops);
    }
    if nm.kind == NormKind::Batch {
        mp.problem(
            head,
            "batch_norm of an input no GEMM computes: each feature is normalized over the \
             batch (a column of the rows), which family norm (rows) does not compute; after \
             a GEMM, family gemm_norm takes it (norm = \"batch\")",
        );
        return None;
    }
    let mut rows = rows_over(mp, head, &nm.input, &nm.dims, "norm")?;
    // GroupNorm (dims 1.., trailing): each row of C x H x W elements is G rows of one
    // group each.
    if nm.groups > 1 {
        if rows.col {
            mp.problem(head, "group_norm over rows side by side: not expressible");
            return None;
        }
        rows.m *= nm.groups;
        rows.len /= nm.groups;
    }
    // A GroupNorm of (N, C) values: its weight and bias run along C, a group's C / G
    // channels a row (one value each).
    let mut affine = nm.affine.clone();
    if nm.groups > 1 {
        for o in affine
            .iter_mut()
            .filter(|o| o.operand.as_deref() == Some("row"))
        {
            o.operand = Some("channel".into());
            o.channels = u32::try_from(rows.len).ok();
        }
    }
    // A per-channel weight and bias (`channel` / `col` operands, one vector for every
    // sample): the batch is the samples, each of m rows of whole channels.
    let per_channel = affine
        .iter()
        .any(|o| matches!(o.operand.as_deref(), Some("channel" | "col")));
    if per_channel {
        let samples = *rows.shape.first().unwrap_or(&1);
        if rows.col || samples < 1 || rows.m % samples != 0 {
            mp.problem(
                head,
                "a per-channel weight over rows side by side: not expressible",
            );
            return None;
        }
        rows.batch = samples;
        rows.m /= samples;
    }
    let (dtype, col, batch, m, n) = (rows.dtype, rows.col, rows.batch, rows.m, rows.len);
    let first = ops.len();
    let after = super::chain_after(mp, &nm.head, out, (batch, m, n), dtype, ops)?;
    let chain = after_affine(&affine, after, &mut ops[first..]);
    constants_after_side_by_side(mp, head, &chain, col, "norm")?;
    for (i, a) in affine.iter().enumerate() {
        ops.insert(i, super::describe(a));
    }
    ops.insert(0, format!("{} norm", nm.kind));
    let eps = nm.eps.map(|e| e as f32);
    let what = nm.title.unwrap_or(nm.kind.title());
    let per_row = chain.iter().find_map(|o| o.channels).unwrap_or(1);
    let shapes = if col {
        super::side_by_side_shapes(batch, m, n)
    } else if per_channel {
        super::channel_shapes(batch, m, n, i64::from(per_row))
    } else {
        super::row_shapes(m, n)
    };
    Some(WorkloadSpec {
        name: None,
        description: rows.describe(what, chain.len(), file),
        family: Family::Norm,
        dtype,
        out_dtype: None,
        acc_dtype: None,
        allow_tf32: false,
        layout: rows.layout(),
        shapes,
        params: ParamsSpec {
            norm: Some(nm.kind),
            eps,
            ..ParamsSpec::default()
        },
        tolerance: None,
        target: None,
        view: None,
        epilogue: chain,
        after: Vec::new(),
        before: Vec::new(),
    })
}

/// A training-mode batch norm of an (N, C, ...) input no GEMM computes (`nn.BatchNorm2d`,
/// `BatchNorm1d` of (N, C, L)): family norm with `norm = "batch"` over a batch of the N
/// samples, each C rows of its spatial values, row i of every sample normalized together;
/// the weight and bias `col` operands (one value a channel).
fn map_batch_norm(
    mp: &mut Mapper<'_>,
    nm: &NormMatch,
    out: &str,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let head = mp.node(&nm.head)?;
    // The input's checks (a Model input, contiguous, a floating type), as for any norm.
    let rank = rank(mp, &nm.input);
    let rows = rows_over(mp, head, &nm.input, &(2..rank).collect::<Vec<_>>(), "norm")?;
    let (dtype, shape) = (rows.dtype, rows.shape.clone());
    let (batch, m) = (shape[0], shape[1]);
    let n: i64 = shape[2..].iter().product();
    if batch < 1 || m < 1 || n < 1 {
        mp.problem(head, format!("a batch norm of the empty {shape:?}"));
        return None;
    }
    let first = ops.len();
    let after = super::chain_after(mp, &nm.head, out, (batch, m, n), dtype, ops)?;
    let chain = after_affine(&nm.affine, after, &mut ops[first..]);
    for (i, a) in nm.affine.iter().enumerate() {
        ops.insert(first + i, super::describe(a));
    }
    ops.insert(first, format!("{} norm", nm.kind));
    let dims = shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let description = format!(
        "{dtype} BatchNorm in training mode (each channel over the batch's samples and its \
         spatial values) of [{dims}]: a batch of {batch} samples, each {m} rows of {n}{}; \
         imported from {file}",
        match chain.len() {
            0 => String::new(),
            k => format!(", then {k} ops"),
        }
    );
    Some(WorkloadSpec {
        name: None,
        description,
        family: Family::Norm,
        dtype,
        out_dtype: None,
        acc_dtype: None,
        allow_tf32: false,
        layout: None,
        shapes: super::channel_shapes(batch, m, n, 1),
        params: ParamsSpec {
            norm: Some(NormKind::Batch),
            eps: nm.eps.map(|e| e as f32),
            ..ParamsSpec::default()
        },
        tolerance: None,
        target: None,
        view: None,
        epilogue: chain,
        after: Vec::new(),
        before: Vec::new(),
    })
}

/// A GEMM whose product's rows (after an elementwise chain) are normalized, whole or in
/// groups of adjacent values, then ops on each value: family gemm_norm (KernelBench level
/// 2's `linear -> ops -> GroupNorm / InstanceNorm / LayerNorm -> ops`). The norm must run
/// over the product's last dim (through views that add unit dims: an InstanceNorm2d of
/// `x.unsqueeze(1).unsqueeze(1)`), every dim before it being rows.
pub(super) fn map_gemm_norm<'g>(
    mp: &mut Mapper<'g>,
    core: &'g Node,
    nm: &NormMatch,
    out: &str,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let head = mp.node(&nm.head)?;
    let g = mp.gemm(core)?;
    let out_dtype = super::dtype_of(&mp.meta(&core.name)?.dtype)?;
    let shape = mp.meta(&nm.input)?.shape.clone();
    // The product's rows through views that add or drop unit dims (InstanceNorm2d of
    // `x.unsqueeze(1).unsqueeze(1)`, squeezed after): the chains end and start beyond them.
    let input = unit_views_back(mp, &nm.input);
    let after_head = unit_views_forward(mp, &nm.head);
    let trailing = nm
        .dims
        .first()
        .is_some_and(|&f| nm.dims.iter().copied().eq(f..shape.len()));
    let over: i64 = nm.dims.iter().filter_map(|&d| shape.get(d)).product();
    let rows: i64 = shape
        .iter()
        .take(nm.dims.first().copied().unwrap_or(0))
        .product();
    if nm.kind == NormKind::Batch {
        if g.batch != 1 || shape.as_slice() != [g.m, g.n] {
            mp.problem(
                head,
                format!(
                    "a batch norm of {shape:?}: after a GEMM it normalizes each column of one \
                     {} x {} product over its rows",
                    g.m, g.n
                ),
            );
            return None;
        }
    } else if !trailing || over != g.n || rows != g.batch * g.m {
        mp.problem(
            head,
            format!(
                "a {} norm over dims {:?} of {shape:?}: after a GEMM a norm runs over each row \
                 of the product (its last dim, {} values)",
                nm.kind, nm.dims, g.n
            ),
        );
        return None;
    }
    ops.push(op_name(core.target.as_deref().unwrap_or_default()).to_string());
    let dims = (g.batch, g.m, g.n);
    let mut before = super::chain_after(mp, &core.name, &input, dims, out_dtype, ops)?;
    if let Some(bias) = &g.bias {
        super::bias_first(mp, bias, &mut before, out_dtype, ops);
    }
    ops.push(match nm.groups {
        1 => format!("{} norm", nm.kind),
        k => format!("{} norm in {k} groups", nm.kind),
    });
    for a in &nm.affine {
        ops.push(super::describe(a));
    }
    let first = ops.len();
    let after = super::chain_after(mp, &after_head, out, dims, out_dtype, ops)?;
    let chain = after_affine(&nm.affine, after, &mut ops[first..]);
    let mut params = ParamsSpec {
        norm: Some(nm.kind),
        eps: nm.eps.map(|e| e as f32),
        groups: (nm.groups > 1).then_some(nm.groups as u32),
        ..ParamsSpec::default()
    };
    if let Some(a) = g.alpha {
        params.alpha = Some(a as f32);
    }
    let what = nm.title.unwrap_or(nm.kind.title());
    // Every shape's row splits into the groups: the ragged and small shapes keep the
    // group count and take ragged (odd) group lengths.
    let mut shapes = super::gemm_shapes(g.m, g.n / nm.groups.max(1), g.k, g.batch);
    for sh in &mut shapes {
        sh.n = sh.n.map(|n| n * nm.groups.max(1));
    }
    Some(WorkloadSpec {
        name: None,
        description: format!(
            "{} {}GEMM{}, then {what}{}; imported from {file}",
            g.dtype,
            if g.batch > 1 { "batched " } else { "" },
            if before.is_empty() {
                ""
            } else {
                " and an elementwise chain"
            },
            if chain.is_empty() {
                ""
            } else {
                " and ops after it"
            }
        ),
        family: Family::GemmNorm,
        dtype: g.dtype,
        out_dtype: (out_dtype != g.dtype).then_some(out_dtype),
        acc_dtype: None,
        allow_tf32: false,
        layout: Some(super::gemm_layout(&g)),
        shapes,
        params,
        tolerance: None,
        target: None,
        view: None,
        epilogue: chain,
        after: Vec::new(),
        before,
    })
}

/// The norm's own affine ops (its weight and bias), then the ops `after` it. In `after`, `z`
/// is the norm op's value, the affine's result: where an op reads it, the affine's last op
/// saves its value and the op reads that (the chain's own `z` is the value before the
/// affine; `ops`, the descriptions of `after`'s ops, say so too).
fn after_affine(affine: &[OpSpec], mut after: Vec<OpSpec>, ops: &mut [String]) -> Vec<OpSpec> {
    let reads_z = after.iter().any(|s| s.operand.as_deref() == Some("z"));
    let mut chain = affine.to_vec();
    if let (true, Some(last)) = (reads_z, chain.last_mut()) {
        let name = "normed".to_string();
        last.save = Some(name.clone());
        for s in &mut after {
            if s.operand.as_deref() == Some("z") {
                s.operand = Some(name.clone());
            }
        }
        for o in ops.iter_mut() {
            if let Some(op) = o.strip_suffix(" z") {
                *o = format!("{op} {name}");
            }
        }
    }
    chain.extend(after);
    chain
}

/// Whether `n` is a view that only adds or drops dims of size 1 (unsqueeze, squeeze, a
/// view or reshape to such a shape), keeping every value in place.
fn unit_view(mp: &Mapper<'_>, n: &Node) -> Option<String> {
    if !matches!(
        target(n),
        "unsqueeze" | "squeeze" | "view" | "reshape" | "_unsafe_view"
    ) {
        return None;
    }
    let Some(Arg::Node(x)) = mp.resolve(n.args.first().map(arg)) else {
        return None;
    };
    let big =
        |m: &super::Meta| -> Vec<i64> { m.shape.iter().copied().filter(|&d| d != 1).collect() };
    let (a, b) = (mp.meta(x)?, n.val.as_ref()?);
    (big(a) == big(b)).then(|| x.to_string())
}

/// `name`'s value before any unit-dim views.
fn unit_views_back(mp: &Mapper<'_>, name: &str) -> String {
    let mut cur = name.to_string();
    while let Some(prev) = mp.node(&cur).and_then(|n| unit_view(mp, n)) {
        cur = prev;
    }
    cur
}

/// The last of the unit-dim views that are `name`'s only reader, one after another (or
/// `name`).
fn unit_views_forward(mp: &Mapper<'_>, name: &str) -> String {
    let mut cur = name.to_string();
    loop {
        let readers: Vec<&Node> = mp
            .nodes
            .values()
            .copied()
            .filter(|n| {
                n.args
                    .iter()
                    .chain(n.kwargs.values())
                    .any(|a| matches!(arg(a), Arg::Node(x) if x == cur))
            })
            .collect();
        match readers.as_slice() {
            [n] if unit_view(mp, n).is_some() => cur = n.name.clone(),
            _ => return cur,
        }
    }
}

/// Whether `n` is an eval-mode `aten.batch_norm` of (N, C) values: a per-feature affine map
/// (x * scale + shift, feature j being the last dim's j) that a chain runs as two ops.
pub(super) fn eval_batch_norm(n: &Node) -> bool {
    target(n) == "batch_norm"
        && param(n, 5, "training").and_then(Value::as_bool) == Some(false)
        && n.val.as_ref().is_some_and(|m| m.shape.len() >= 2)
}

/// A norm's per-feature weight and bias, where given as tensors: `mul` and `add` by a row
/// operand.
fn row_affine([weight, bias]: [Option<&Value>; 2]) -> Vec<OpSpec> {
    [(weight, "mul"), (bias, "add")]
        .into_iter()
        .filter(|(v, _)| matches!(v.map(arg), Some(Arg::Node(_))))
        .map(|(_, op)| OpSpec {
            op: op.into(),
            operand: Some("row".into()),
            ..OpSpec::default()
        })
        .collect()
}

/// A norm's per-channel weight and bias of an (N, C, ...) input whose rows each hold
/// `per_row` whole channels: `mul` and `add` by a col operand (one channel a row) or a
/// channel operand.
fn channel_affine(weights: [Option<&Value>; 2], per_row: u32) -> Vec<OpSpec> {
    let mut ops = row_affine(weights);
    for o in &mut ops {
        if per_row == 1 {
            o.operand = Some("col".into());
        } else {
            o.operand = Some("channel".into());
            o.channels = Some(per_row);
        }
    }
    ops
}

/// Why an `aten.instance_norm`, `aten.group_norm` or `aten.batch_norm` node is not a row
/// normalization cutesmith runs; `None` when it is one, and for every other op.
pub(super) fn refusal(n: &Node) -> Option<&'static str> {
    match target(n) {
        "instance_norm"
            if param(n, 5, "use_input_stats").and_then(Value::as_bool) == Some(false) =>
        {
            Some("instance_norm with running statistics (track_running_stats in eval mode): a per-channel affine map, not a normalization of the rows")
        }
        "batch_norm" if param(n, 5, "training").and_then(Value::as_bool) == Some(true) => Some(
            "batch_norm in training mode of an input of fewer than two dims: not a normalization of channels",
        ),
        "batch_norm" => Some(
            "batch_norm in eval mode of an input of fewer than two dims (N, C): not a per-channel map; `cutesmith import --train` traces training mode (nn.Module's default, as KernelBench runs its problems)",
        ),
        _ => None,
    }
}
