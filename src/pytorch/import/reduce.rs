//! Reductions over dimensions in a traced graph (`torch.sum`, `mean`, `amax` / `amin`,
//! `max` / `min` with a dim (their values), `logsumexp`, `torch.norm` / `linalg.vector_norm`
//! of order 2, `argmax` / `argmin`), each over a run of adjacent dimensions of a Model input,
//! with elementwise ops after it (not after an index): the reduce family. A match names the node whose value is the reduced
//! tensor (the head the chain continues from) and the nodes it absorbs.

use std::collections::HashSet;

use serde_json::Value;

use super::norm::{dims_arg, rows_over, RowsOver};
use super::{arg, num_param, op_name, param, through_copies, Arg, Mapper, Node};
use crate::spec::chain::OpSpec;
use crate::spec::{Family, ParamsSpec, ReduceKind, ShapeSpec, TotalKind, WorkloadSpec};

/// A reduction found in the graph.
pub(super) struct ReduceMatch {
    /// The node whose value is the reduced tensor (a `max.dim`'s values: its getitem 0).
    pub head: String,
    /// The reduced input.
    pub input: String,
    pub kind: ReduceKind,
    /// The reduced dimensions, ascending, non-negative.
    pub dims: Vec<usize>,
    /// Every node the match accounts for (the head included).
    pub absorbed: HashSet<String>,
    /// A loss op (`mse_loss`, `smooth_l1_loss`, `kl_div`, ...): its elementwise part as
    /// `[[before]]` ops on `input`, and the other input they read as their matrix operand.
    pub loss: Option<(Vec<OpSpec>, String)>,
}

/// The smallest normal f32: where a loss's log is held from 0.
const TINY: f64 = 1.175_494_350_822_287_5e-38;

/// An op of the `[[before]]` table.
fn op(name: &str) -> OpSpec {
    OpSpec {
        op: name.into(),
        ..OpSpec::default()
    }
}

/// The elementwise part of a loss op `name` over (input, target) with parameter `p` (beta,
/// delta), as `[[before]]` ops on the input with the target as the matrix operand; whether
/// the input and target swap (kl_div: A is the target). None: not a loss op.
fn loss_ops(name: &str, p: Option<f64>) -> Option<(Vec<OpSpec>, bool)> {
    let matrix = |o: &str| OpSpec {
        operand: Some("matrix".into()),
        ..op(o)
    };
    let with = |o: &str, v: f64| OpSpec {
        value: Some(v),
        ..op(o)
    };
    let saved = |mut s: OpSpec, n: &str| {
        s.save = Some(n.into());
        s
    };
    let named = |o: &str, n: &str| OpSpec {
        operand: Some(n.into()),
        ..op(o)
    };
    // d = x - t, a = |d|, q = min(a, b): q (a - q / 2) is b times smooth_l1 with beta b, and
    // huber with delta b (0.5 d^2 below b, b (a - b / 2) above).
    let huber = |b: f64| {
        vec![
            matrix("sub"),
            saved(op("abs"), "a"),
            saved(with("min", b), "q"),
            with("mul", -0.5),
            named("add", "a"),
            named("mul", "q"),
        ]
    };
    Some(match name {
        "mse_loss" => (vec![matrix("sub"), with("pow", 2.0)], false),
        "l1_loss" => (vec![matrix("sub"), op("abs")], false),
        "smooth_l1_loss" => match p.unwrap_or(1.0) {
            0.0 => (vec![matrix("sub"), op("abs")], false),
            b => {
                let mut v = huber(b);
                if b != 1.0 {
                    v.push(with("div", b));
                }
                (v, false)
            }
        },
        "huber_loss" => (huber(p.unwrap_or(1.0)), false),
        // target * (log target - input): A is the target, the matrix operand the input
        // (log-probabilities): log, minus the input, times the target (z). The log is of
        // |target|: the same on a distribution, and defined on the signed inputs validation
        // draws (a log of a negative value would make the one sum NaN, which checks nothing).
        // A zero target contributes 0 (ATen's xlogy(t, t)): the log's argument is held at
        // least the smallest normal f32, so 0 * log stays 0 instead of 0 * -inf.
        "kl_div" => (
            vec![
                op("abs"),
                with("max", TINY),
                op("log"),
                matrix("sub"),
                named("mul", "z"),
            ],
            true,
        ),
        _ => return None,
    })
}

/// Whether `op` (an ATen op's short name) is a reduction this module maps, and which.
fn kind_of(op: &str) -> Option<ReduceKind> {
    Some(match op {
        "sum" => ReduceKind::Sum,
        "mean" => ReduceKind::Mean,
        "amax" | "max" => ReduceKind::Max,
        "amin" | "min" => ReduceKind::Min,
        "logsumexp" => ReduceKind::Logsumexp,
        "linalg_vector_norm" | "norm" => ReduceKind::L2,
        "argmax" => ReduceKind::Argmax,
        "argmin" => ReduceKind::Argmin,
        _ => return None,
    })
}

impl<'g> Mapper<'g> {
    /// The reductions among `calls` that no normalization absorbed.
    pub(super) fn reductions(&self, calls: &[&'g Node], taken: &HashSet<&str>) -> Vec<ReduceMatch> {
        calls
            .iter()
            .filter(|n| !taken.contains(n.name.as_str()))
            .filter_map(|n| self.reduction(n, calls))
            .collect()
    }

    fn reduction(&self, n: &'g Node, calls: &[&'g Node]) -> Option<ReduceMatch> {
        let target = n.target.as_deref().unwrap_or_default();
        if let Some(m) = self.loss(n, calls) {
            return Some(m);
        }
        let kind = kind_of(op_name(target))?;
        let Some(Arg::Node(input)) = self.resolve(n.args.first().map(arg)) else {
            return None;
        };
        let rank = self.meta(input).map_or(0, |m| m.shape.len());
        // torch.norm(x, p, dim) and linalg.vector_norm(x, ord, dim): order 2 only.
        let dims_at = if kind == ReduceKind::L2 {
            let order = num_param(n, 1, "ord")
                .or_else(|| num_param(n, 1, "p"))
                .unwrap_or(2.0);
            if order != 2.0 {
                return None;
            }
            2
        } else {
            1
        };
        // No dimension given (or none at all, `x.sum()`): every one.
        let dims = match param(n, dims_at, "dim") {
            None | Some(Value::Null) => (0..rank).collect(),
            Some(Value::Array(a)) if a.is_empty() => (0..rank).collect(),
            Some(_) => dims_arg(n, dims_at, "dim", rank)?,
        };
        let mut absorbed = HashSet::from([n.name.clone()]);
        // max / min with a dim return (values, indices): the values are getitem 0; where
        // only the indices (getitem 1) are read, the reduction is an argmax / argmin.
        let mut head = n.name.clone();
        let mut kind = kind;
        if target.ends_with(".dim") && matches!(kind, ReduceKind::Max | ReduceKind::Min) {
            let mut indices = None;
            for g in calls
                .iter()
                .filter(|g| g.target.as_deref() == Some("<built-in function getitem>"))
                // The node itself (not resolved: over a dim of size 1 it passes values on).
                .filter(|g| matches!(g.args.first().map(arg), Some(Arg::Node(x)) if x == n.name))
            {
                absorbed.insert(g.name.clone());
                // A getitem nothing reads (torch.export keeps both) does not count.
                match g.args.get(1).and_then(Value::as_i64) {
                    Some(0) if self.used.contains(g.name.as_str()) => head = g.name.clone(),
                    Some(1) if self.used.contains(g.name.as_str()) => {
                        indices = Some(g.name.clone())
                    }
                    _ => {}
                }
            }
            if head == n.name {
                head = indices?;
                kind = if kind == ReduceKind::Max {
                    ReduceKind::Argmax
                } else {
                    ReduceKind::Argmin
                };
            }
        }
        // Over dims of size 1 only: the identity, passed through like a copy (not an index,
        // `torch.max(x, dim)[1]` too: an argmax there is zeros).
        if kind != ReduceKind::L2 && !kind.is_index() && super::identity_reduction(&self.nodes, n) {
            return None;
        }
        Some(ReduceMatch {
            head,
            input: input.to_string(),
            kind,
            dims,
            absorbed,
            loss: None,
        })
    }

    /// A loss op (`F.mse_loss`, `l1_loss`, `smooth_l1_loss`, `huber_loss`, `kl_div`) with
    /// reduction mean or sum over every element: its elementwise part as `[[before]]` ops.
    /// Its operands may come through `broadcast_tensors` (the functional losses call it) when
    /// both have one shape. `reduction="none"` and `kl_div(log_target=True)` are left
    /// unmatched (and so named as unknown ops).
    fn loss(&self, n: &'g Node, calls: &[&'g Node]) -> Option<ReduceMatch> {
        let name = op_name(n.target.as_deref().unwrap_or_default());
        let p = match name {
            "smooth_l1_loss" => num_param(n, 3, "beta"),
            "huber_loss" => num_param(n, 3, "delta"),
            _ => None,
        };
        let (ops, swap) = loss_ops(name, p)?;
        if name == "kl_div" && num_param(n, 3, "log_target").unwrap_or(0.0) != 0.0 {
            return None;
        }
        // at::Reduction: 0 none, 1 mean, 2 sum.
        let kind = match num_param(n, 2, "reduction").unwrap_or(1.0) as i64 {
            1 => ReduceKind::Mean,
            2 => ReduceKind::Sum,
            _ => return None,
        };
        let mut absorbed = HashSet::from([n.name.clone()]);
        let mut operand = |i: usize, key: &str| -> Option<String> {
            let Some(Arg::Node(x)) = self.resolve(param(n, i, key).map(arg)) else {
                return None;
            };
            // getitem(broadcast_tensors([x, t]), i) of tensors of one shape is that tensor.
            let g = self.nodes.get(x).copied()?;
            if g.target.as_deref() != Some("<built-in function getitem>") {
                return Some(x.to_string());
            }
            let Some(Arg::Node(bt)) = self.resolve(g.args.first().map(arg)) else {
                return None;
            };
            let b = self.nodes.get(bt).copied()?;
            if op_name(b.target.as_deref().unwrap_or_default()) != "broadcast_tensors" {
                return None;
            }
            let list = b.args.first().and_then(Value::as_array)?;
            let names: Vec<&str> = list
                .iter()
                .map(|v| match arg(v) {
                    Arg::Node(t) => Some(t),
                    _ => None,
                })
                .collect::<Option<_>>()?;
            let shapes: Vec<&Vec<i64>> = names
                .iter()
                .map(|t| self.meta(t).map(|m| &m.shape))
                .collect::<Option<_>>()?;
            if shapes.windows(2).any(|w| w[0] != w[1]) {
                return None;
            }
            let k = g.args.get(1).and_then(Value::as_i64)? as usize;
            absorbed.insert(g.name.clone());
            absorbed.insert(b.name.clone());
            // The other getitem of the same broadcast is absorbed with it.
            for c in calls.iter().filter(|c| {
                c.target.as_deref() == Some("<built-in function getitem>")
                    && matches!(self.resolve(c.args.first().map(arg)), Some(Arg::Node(y)) if y == bt)
            }) {
                absorbed.insert(c.name.clone());
            }
            names
                .get(k)
                .map(|t| through_copies(&self.nodes, t).to_string())
        };
        let (mut x, t) = (operand(0, "self")?, operand(1, "target")?);
        let mut ops = ops;
        // kl_div(log(p), t): A is t, the operand p itself: t / p, its log, times t.
        if name == "kl_div" {
            let log_of = self
                .nodes
                .get(x.as_str())
                .copied()
                .filter(|l| op_name(l.target.as_deref().unwrap_or_default()) == "log");
            if let Some(l) = log_of {
                if let Some(Arg::Node(q)) = self.resolve(l.args.first().map(arg)) {
                    if self.source(q).is_some() {
                        absorbed.insert(l.name.clone());
                        ops = vec![
                            OpSpec {
                                operand: Some("matrix".into()),
                                ..op("div")
                            },
                            // log max(|t / p|, TINY): see loss_ops.
                            op("abs"),
                            OpSpec {
                                value: Some(TINY),
                                ..op("max")
                            },
                            op("log"),
                            OpSpec {
                                operand: Some("z".into()),
                                ..op("mul")
                            },
                        ];
                        x = q.to_string();
                    }
                }
            }
        }
        let (input, other) = if swap { (t, x) } else { (x, t) };
        let rank = self.meta(&input).map_or(0, |m| m.shape.len());
        if rank == 0 {
            return None; // a loss of two numbers: no dimension to reduce
        }
        Some(ReduceMatch {
            head: n.name.clone(),
            input,
            kind,
            dims: (0..rank).collect(),
            absorbed,
            loss: Some((ops, other)),
        })
    }
}

/// A GEMM whose rows (the product's last dim), after an elementwise chain, are reduced,
/// then ops on each reduced value: family gemm_reduce (KernelBench level 2's
/// `linear -> ops -> sum / logsumexp / max over dim 1 -> ops`).
pub(super) fn map_gemm_reduce<'g>(
    mp: &mut Mapper<'g>,
    core: &'g Node,
    rm: &ReduceMatch,
    out: &str,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let head = mp.node(&rm.head)?;
    let g = mp.gemm(core)?;
    let out_dtype = super::dtype_of(&mp.meta(&core.name)?.dtype)?;
    let rank = mp.meta(&rm.input).map_or(0, |m| m.shape.len());
    if rank < 2 || rm.dims != [rank - 1] {
        mp.problem(
            head,
            format!(
                "a {} over dims {:?} of a {rank}-D product: gemm_reduce reduces each row (the last dim)",
                rm.kind, rm.dims
            ),
        );
        return None;
    }
    ops.push(op_name(core.target.as_deref().unwrap_or_default()).to_string());
    let mut chain = super::chain_after(
        mp,
        &core.name,
        &rm.input,
        (g.batch, g.m, g.n),
        out_dtype,
        ops,
    )?;
    if let Some(bias) = &g.bias {
        super::bias_first(mp, bias, &mut chain, out_dtype, ops);
    }
    if chain.iter().any(|s| s.operand.as_deref() == Some("matrix")) {
        mp.problem(
            head,
            "a matrix operand before the reduction: gemm_reduce's chain reads row and column vectors only",
        );
        return None;
    }
    ops.push(format!("{} over the last dim", rm.kind));
    let after = super::chain_after(mp, &rm.head, out, (g.batch, g.m, 1), out_dtype, ops)?;
    only_constants_after(mp, head, &after, |o| matches!(o, "row" | "col" | "matrix"))?;
    let mut params = ParamsSpec {
        reduce: Some(rm.kind),
        ..ParamsSpec::default()
    };
    if let Some(a) = g.alpha {
        params.alpha = Some(a as f32);
    }
    Some(WorkloadSpec {
        name: None,
        description: format!(
            "{} {}GEMM{}, then {} of each row{}; imported from {file}",
            g.dtype,
            if g.batch > 1 { "batched " } else { "" },
            if chain.is_empty() {
                ""
            } else {
                " and an elementwise chain"
            },
            rm.kind,
            if after.is_empty() {
                ""
            } else {
                " and ops on it"
            }
        ),
        family: Family::GemmReduce,
        dtype: g.dtype,
        out_dtype: (out_dtype != g.dtype).then_some(out_dtype),
        acc_dtype: None,
        allow_tf32: false,
        layout: Some(super::gemm_layout(&g)),
        shapes: super::gemm_shapes(g.m, g.n, g.k, g.batch),
        params,
        tolerance: None,
        target: None,
        view: None,
        epilogue: chain,
        after,
        before: Vec::new(),
    })
}

/// None, with the problem recorded at `head`, when an op after a reduction reads an operand
/// `refused` names: one value a row is followed by constants and activations only.
fn only_constants_after(
    mp: &mut Mapper<'_>,
    head: &Node,
    after: &[crate::spec::chain::OpSpec],
    refused: impl Fn(&str) -> bool,
) -> Option<()> {
    if after
        .iter()
        .any(|s| s.operand.as_deref().is_some_and(&refused))
    {
        mp.problem(
            head,
            "a tensor operand after a reduction: only constants and activations follow one",
        );
        return None;
    }
    Some(())
}

/// The workload of a reduction `rm` whose chain ends at `out`. A reduction of a computed
/// tensor takes the elementwise chain that computes it from an input of Model as its
/// `[[before]]` ops (a loss: `((p - t) ** 2).mean()`); a loss op brings its own.
pub(super) fn map_reduce(
    mp: &mut Mapper<'_>,
    rm: &ReduceMatch,
    out: &str,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let head = mp.node(&rm.head)?;
    // A sum or mean of a whole tensor of two or more dims (a loss's `.mean()`) that is the
    // output: the rows of its last dim, then the total of the rows, so that an operand along
    // the last dim (a target vector broadcast over the rows) is a row operand. With ops
    // after it (kl_div's batchmean `/ N`), one row of every element, whose chain runs them.
    let rank = mp.meta(&rm.input).map_or(0, |t| t.shape.len());
    // (An f16 sum keeps one row: a total sum into f16 is refused, as it may overflow.)
    let f16 = mp
        .meta(&rm.input)
        .and_then(|t| super::dtype_of(&t.dtype))
        .is_some_and(|d| d == crate::spec::DType::F16);
    let whole = rank >= 2
        && rm.head == out
        && !(f16 && rm.kind == ReduceKind::Sum)
        && matches!(rm.kind, ReduceKind::Sum | ReduceKind::Mean)
        && rm.dims.iter().copied().eq(0..rank);
    let dims = if whole {
        vec![rank - 1]
    } else {
        rm.dims.clone()
    };
    // The tensor reduced (A) and the ops before the reduction with the operand a loss op
    // reads.
    let (a, before, other) = match &rm.loss {
        Some((b, other)) => (rm.input.clone(), b.clone(), Some(other.clone())),
        None if mp.source(&rm.input).is_none() => {
            let start = before_start(mp, head, &rm.input, &dims, "reduce")?;
            (start, Vec::new(), None)
        }
        None => (rm.input.clone(), Vec::new(), None),
    };
    // An index is of an input's own elements, compared exactly, and nothing follows it.
    if rm.kind.is_index() && a != rm.input {
        mp.problem(
            head,
            format!(
                "an {} of a computed tensor: family reduce takes an argmax / argmin of a Model \
                 input only (ops before it would decide ties by rounding)",
                rm.kind
            ),
        );
        return None;
    }
    let rows = rows_over(mp, head, &a, &dims, "reduce")?;
    let (dtype, batch, m, k) = (rows.dtype, rows.batch, rows.m, rows.len);
    let classify = like_a(&rows);
    let before = match other {
        Some(t) => {
            // A loss op's target: shaped like A (broadcasting was resolved or refused).
            let kind = classify(mp, head, &t)?;
            let dt = mp.meta(&t).and_then(|mt| super::dtype_of(&mt.dtype));
            let mut b = before;
            for s in b
                .iter_mut()
                .filter(|s| s.operand.as_deref() == Some("matrix"))
            {
                s.operand = Some(kind.into());
                s.dtype = dt.filter(|d| *d != dtype);
            }
            ops.extend(b.iter().map(super::describe));
            b
        }
        None if a != rm.input => {
            super::chain_between(mp, &a, &rm.input, &classify, true, None, dtype, ops)?
        }
        None => before,
    };
    if rm.kind.is_index() && rm.head != out {
        mp.problem(
            head,
            format!(
                "ops after an {}: the workload's output is the int64 index itself",
                rm.kind
            ),
        );
        return None;
    }
    let chain = super::chain_after(mp, &rm.head, out, (batch, m, 1), dtype, ops)?;
    only_constants_after(mp, head, &chain, |o| o != "z")?;
    ops.insert(
        0,
        if whole {
            format!(
                "{} of every element (each row of the last dim, then their total)",
                rm.kind
            )
        } else {
            format!("{} over dims {}..={}", rm.kind, rows.first, rows.last)
        },
    );
    let b = |x: i64| (x > 1).then_some(x);
    // A total's third shape has a few rows (a total hides one wrong row among many).
    let few = if whole { 3.min(m) } else { super::small(m, 33) };
    let mut shapes = vec![
        ShapeSpec {
            batch: b(batch),
            m: Some(m),
            k: Some(k),
            n: None,
            ..Default::default()
        },
        ShapeSpec {
            batch: b(batch.min(3)),
            m: Some(super::ragged(m)),
            k: Some(super::ragged(k)),
            n: None,
            ..Default::default()
        },
        ShapeSpec {
            batch: b(batch.min(2)),
            m: Some(few),
            k: Some(super::small(k, 1023)),
            n: None,
            ..Default::default()
        },
    ];
    super::dedup(&mut shapes);
    Some(WorkloadSpec {
        name: None,
        description: rows.describe(
            &if before.is_empty() {
                rm.kind.name().to_string()
            } else {
                format!(
                    "{} of {} elementwise op{} on each element",
                    rm.kind.name(),
                    before.len(),
                    if before.len() == 1 { "" } else { "s" }
                )
            },
            chain.len(),
            file,
        ),
        family: Family::Reduce,
        dtype,
        out_dtype: None,
        acc_dtype: None,
        allow_tf32: false,
        layout: rows.layout(),
        shapes,
        params: ParamsSpec {
            reduce: Some(rm.kind),
            total: whole.then_some(if rm.kind == ReduceKind::Sum {
                TotalKind::Sum
            } else {
                TotalKind::Mean
            }),
            ..ParamsSpec::default()
        },
        tolerance: None,
        target: None,
        view: None,
        epilogue: chain,
        after: Vec::new(),
        before,
    })
}

/// The input of Model from which one elementwise chain computes `reduced` (shaped like it),
/// or None with the problem recorded at `head`.
pub(super) fn before_start(
    mp: &mut Mapper<'_>,
    head: &Node,
    reduced: &str,
    dims: &[usize],
    family: &str,
) -> Option<String> {
    let shape = mp.meta(reduced).map(|m| m.shape.clone());
    let mut inputs: Vec<(usize, String)> = mp
        .nodes
        .values()
        .filter(|n| n.op == "placeholder" && n.kind.as_deref() == Some("user_input"))
        .map(|n| {
            (
                mp.order.get(n.name.as_str()).copied().unwrap_or(0),
                n.name.clone(),
            )
        })
        .collect();
    inputs.sort();
    // Why the first input shaped like it did not fit, reported when none does.
    let mut first_reasons = None;
    for (_, x) in inputs {
        if mp.meta(&x).map(|m| m.shape.clone()) != shape {
            continue;
        }
        // A trial: its problems are kept aside, and the first input's reported if none fits.
        let kept = mp.problems.len();
        let rows = rows_over(mp, head, &x, dims, family);
        let fits = rows.is_some_and(|r| {
            let classify = like_a(&r);
            super::chain_between(
                mp,
                &x,
                reduced,
                &classify,
                true,
                None,
                r.dtype,
                &mut Vec::new(),
            )
            .is_some()
        });
        let reasons = mp.problems.split_off(kept);
        if fits {
            return Some(x);
        }
        first_reasons.get_or_insert(reasons);
    }
    mp.problems.extend(first_reasons.unwrap_or_default());
    mp.problem(
        head,
        format!(
            "its input `{reduced}` is computed, and not by one chain of elementwise ops from an input of Model shaped like it (the ops family {family} runs first, [[before]])"
        ),
    );
    None
}

/// Classifies a `[[before]]` operand against the reduced tensor A of `rows`: `matrix` (A's
/// shape, contiguous), for row-major rows `row` (the reduced dims' shape: k values) or `col`
/// (the kept dims, the reduced ones 1: m values); a problem recorded otherwise.
pub(super) fn like_a(
    rows: &RowsOver,
) -> impl Fn(&mut Mapper<'_>, &Node, &str) -> Option<&'static str> {
    let (a_shape, first, col, batch) = (rows.shape.clone(), rows.first, rows.col, rows.batch);
    move |mp: &mut Mapper<'_>, n: &Node, o: &str| {
        let meta = super::operand_meta(mp, n, o)?;
        // Every kind is read as a packed array.
        if !super::contiguous(&meta) {
            mp.problem(
                n,
                format!(
                    "operand `{o}` is not contiguous (strides {:?})",
                    meta.stride
                ),
            );
            return None;
        }
        let trim = |s: &[i64]| {
            s.iter()
                .copied()
                .skip_while(|d| *d == 1)
                .collect::<Vec<i64>>()
        };
        let mine = trim(&meta.shape);
        if mine == trim(&a_shape) {
            return Some("matrix");
        }
        if !col && batch == 1 && first > 0 {
            if mine == trim(&a_shape[first..]) {
                return Some("row");
            }
            let kept_then_ones = meta.shape.len() == a_shape.len()
                && meta.shape[..first] == a_shape[..first]
                && meta.shape[first..].iter().all(|d| *d == 1);
            if kept_then_ones {
                return Some("col");
            }
        }
        mp.problem(
            n,
            format!(
                "operand `{o}` of shape {:?} is neither shaped like the reduced (or scanned) tensor {a_shape:?}, nor (row-major rows) a vector over the reduced dims or one over the kept ones",
                meta.shape
            ),
        );
        None
    }
}
