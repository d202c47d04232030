//! Reductions over dimensions in a traced graph (`torch.sum`, `mean`, `amax` / `amin`,
//! `max` / `min` with a dim (their values), `logsumexp`, `torch.norm` / `linalg.vector_norm`
//! of order 2), each over a run of adjacent dimensions of a Model input, with elementwise
//! ops after it: the reduce family. A match names the node whose value is the reduced
//! tensor (the head the chain continues from) and the nodes it absorbs.

use std::collections::HashSet;

use serde_json::Value;

use super::norm::{dims_arg, rows_over};
use super::{arg, num_param, op_name, param, Arg, Mapper, Node};
use crate::spec::{Family, ParamsSpec, ReduceKind, ShapeSpec, WorkloadSpec};

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
        // Over dims of size 1 only: the identity, passed through like a copy.
        if kind != ReduceKind::L2 && super::identity_reduction(&self.nodes, n) {
            return None;
        }
        let mut absorbed = HashSet::from([n.name.clone()]);
        // max / min with a dim return (values, indices): the values are getitem 0.
        let mut head = n.name.clone();
        if target.ends_with(".dim") && matches!(kind, ReduceKind::Max | ReduceKind::Min) {
            for g in calls
                .iter()
                .filter(|g| g.target.as_deref() == Some("<built-in function getitem>"))
                .filter(|g| matches!(self.resolve(g.args.first().map(arg)), Some(Arg::Node(x)) if x == n.name))
            {
                absorbed.insert(g.name.clone());
                if g.args.get(1).and_then(Value::as_i64) == Some(0) {
                    head = g.name.clone();
                }
            }
            if head == n.name {
                return None;
            }
        }
        Some(ReduceMatch {
            head,
            input: input.to_string(),
            kind,
            dims,
            absorbed,
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

/// The workload of a reduction `rm` whose chain ends at `out`.
pub(super) fn map_reduce(
    mp: &mut Mapper<'_>,
    rm: &ReduceMatch,
    out: &str,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let head = mp.node(&rm.head)?;
    let rows = rows_over(mp, head, &rm.input, &rm.dims, "reduce")?;
    let (dtype, batch, m, k) = (rows.dtype, rows.batch, rows.m, rows.len);
    let chain = super::chain_after(mp, &rm.head, out, (batch, m, 1), dtype, ops)?;
    only_constants_after(mp, head, &chain, |o| o != "z")?;
    ops.insert(
        0,
        format!("{} over dims {}..={}", rm.kind, rows.first, rows.last),
    );
    let b = |x: i64| (x > 1).then_some(x);
    let mut shapes = vec![
        ShapeSpec {
            batch: b(batch),
            m: Some(m),
            k: Some(k),
            n: None,
        },
        ShapeSpec {
            batch: b(batch.min(3)),
            m: Some(super::ragged(m)),
            k: Some(super::ragged(k)),
            n: None,
        },
        ShapeSpec {
            batch: b(batch.min(2)),
            m: Some(super::small(m, 33)),
            k: Some(super::small(k, 1023)),
            n: None,
        },
    ];
    super::dedup(&mut shapes);
    Some(WorkloadSpec {
        name: None,
        description: rows.describe(rm.kind.name(), chain.len(), file),
        family: Family::Reduce,
        dtype,
        out_dtype: None,
        acc_dtype: None,
        allow_tf32: false,
        layout: rows.layout(),
        shapes,
        params: ParamsSpec {
            reduce: Some(rm.kind),
            ..ParamsSpec::default()
        },
        tolerance: None,
        target: None,
        epilogue: chain,
        after: Vec::new(),
        before: Vec::new(),
    })
}
