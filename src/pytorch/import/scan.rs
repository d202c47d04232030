//! Scans along a dimension in a traced graph (`torch.cumsum`, `torch.cumprod`) of a Model
//! input, with elementwise ops after them: the scan family. Two written-out forms map too:
//! the reverse scan `cumsum(x.flip(d), d).flip(d)` and the exclusive one
//! `cat([zeros of one slice, cumsum(x.narrow(d, 0, n - 1), d)], d)` (ones before a cumprod)
//! (KernelBench level 1, 91 and 92). A match names the node whose value is the scanned tensor
//! (the head the chain continues from) and the nodes it absorbs. A scan into another type
//! (`cumsum(x, d, dtype=torch.float32)`) writes that type where the family can (f32).

use std::collections::HashSet;

use serde_json::Value;

use super::norm::{constants_after_side_by_side, dims_arg, rows_over};
use super::{arg, op_name, param, Arg, Mapper, Node};
use crate::spec::{DType, Family, ParamsSpec, ScanKind, WorkloadSpec};

/// A scan found in the graph.
pub(super) struct ScanMatch {
    /// The node whose value is the scanned tensor (the flip back, or the cat).
    pub head: String,
    /// The scanned input (a Model input).
    pub input: String,
    pub kind: ScanKind,
    /// The scanned dimension, non-negative.
    pub dim: usize,
    pub reverse: bool,
    pub exclusive: bool,
    /// Every node the match accounts for (the head included).
    pub absorbed: HashSet<String>,
}

fn target(n: &Node) -> &str {
    op_name(n.target.as_deref().unwrap_or_default())
}

/// Whether `op` (an ATen op's short name) is a scan this module maps, and which.
fn kind_of(op: &str) -> Option<ScanKind> {
    match op {
        "cumsum" => Some(ScanKind::Sum),
        "cumprod" => Some(ScanKind::Prod),
        _ => None,
    }
}

impl<'g> Mapper<'g> {
    /// The scans among `calls` that nothing else took.
    pub(super) fn scans(&self, calls: &[&'g Node], taken: &HashSet<&str>) -> Vec<ScanMatch> {
        calls
            .iter()
            .filter(|n| !taken.contains(n.name.as_str()))
            .filter_map(|n| self.scan(n, calls))
            .collect()
    }

    /// The calls that read `name` (as an argument or inside a list argument).
    fn readers(&self, name: &str, calls: &[&'g Node]) -> Vec<&'g Node> {
        fn reads(v: &Value, name: &str) -> bool {
            let mut found = false;
            super::stages::each_ref(v, &mut |x| found |= x == name);
            found
        }
        calls
            .iter()
            .copied()
            .filter(|c| {
                c.args
                    .iter()
                    .chain(c.kwargs.values())
                    .any(|v| reads(v, name))
            })
            .collect()
    }

    /// The one node `name` flows into, if exactly one reads it.
    fn only_reader(&self, name: &str, calls: &[&'g Node]) -> Option<&'g Node> {
        match self.readers(name, calls).as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    /// A flip of exactly dimension `dim` of a tensor of `rank`: its input.
    fn flip_of(&self, n: &'g Node, dim: usize, rank: usize) -> Option<&'g str> {
        if target(n) != "flip" || dims_arg(n, 1, "dims", rank)? != [dim] {
            return None;
        }
        match n.args.first().map(arg) {
            Some(Arg::Node(x)) => Some(x),
            _ => None,
        }
    }

    fn scan(&self, n: &'g Node, calls: &[&'g Node]) -> Option<ScanMatch> {
        let kind = kind_of(target(n))?;
        let Some(Arg::Node(input)) = n.args.first().map(arg) else {
            return None;
        };
        let rank = self.meta(input).map_or(0, |m| m.shape.len()).max(1);
        let dim = dims_arg(n, 1, "dim", rank)?;
        let dim = *dim.first()?;
        let mut absorbed = HashSet::from([n.name.clone()]);
        let mut m = ScanMatch {
            head: n.name.clone(),
            input: input.to_string(),
            kind,
            dim,
            reverse: false,
            exclusive: false,
            absorbed: HashSet::new(),
        };
        // Reverse: the scanned tensor is a flip of the input along the dim, and the scan's
        // one reader flips it back.
        if let Some(f) = self.node(input) {
            if let Some(x) = self.flip_of(f, dim, rank) {
                if let Some(back) = self.only_reader(&n.name, calls) {
                    if self.flip_of(back, dim, rank).is_some() {
                        absorbed.insert(f.name.clone());
                        absorbed.insert(back.name.clone());
                        m.input = x.to_string();
                        m.head = back.name.clone();
                        m.reverse = true;
                    }
                }
            }
        }
        // Exclusive: the scan reads the input without its last slice along the dim, and its
        // one reader puts a slice of the identity in front: cat([zeros, scan], dim) (ones
        // for a product).
        if !m.reverse {
            if let Some(ex) = self.exclusive_form(n, kind, dim, rank, calls) {
                absorbed.extend(ex.1);
                m.input = ex.0;
                m.head = ex.2;
                m.exclusive = true;
            }
        }
        m.absorbed = absorbed;
        Some(m)
    }

    /// `cat([identity, scan(slice(x, dim, 0, n - 1), dim)], dim)` shaped like x (zeros before
    /// a cumsum, ones before a cumprod): x, the nodes of the form (the identity's own chain
    /// back to x included) and the cat.
    fn exclusive_form(
        &self,
        scan: &'g Node,
        kind: ScanKind,
        dim: usize,
        rank: usize,
        calls: &[&'g Node],
    ) -> Option<(String, Vec<String>, String)> {
        let Some(Arg::Node(sliced)) = scan.args.first().map(arg) else {
            return None;
        };
        let slice = self.node(sliced)?;
        if target(slice) != "slice" && target(slice) != "narrow" {
            return None;
        }
        let Some(Arg::Node(x)) = slice.args.first().map(arg) else {
            return None;
        };
        let xm = self.meta(x)?;
        let len = *xm.shape.get(dim)?;
        // slice(x, dim, 0, len - 1) with step 1, or narrow(x, dim, 0, len - 1) (a length);
        // a start or an end that is not a number (a symbolic size) is no match.
        let int = |i: usize, key: &str| -> Option<Option<i64>> {
            match param(slice, i, key) {
                None => Some(None),
                Some(v) => v.as_i64().map(Some),
            }
        };
        let d = int(1, "dim")?.unwrap_or(0);
        let d = if d < 0 { d + rank as i64 } else { d };
        let start = int(2, "start")?.unwrap_or(0);
        let end = if target(slice) == "narrow" {
            start + int(3, "length")??
        } else {
            if int(4, "step")?.unwrap_or(1) != 1 {
                return None;
            }
            match int(3, "end")? {
                Some(e) if e < 0 => e + len,
                Some(e) => e.min(len),
                None => len,
            }
        };
        if d != dim as i64 || start != 0 || end != len - 1 {
            return None;
        }
        let cat = self.only_reader(&scan.name, calls)?;
        if target(cat) != "cat" || self.meta(&cat.name)?.shape != xm.shape {
            return None;
        }
        let parts = cat.args.first()?.as_array()?;
        let cat_dim = param(cat, 1, "dim").and_then(Value::as_i64).unwrap_or(0);
        let cat_dim = if cat_dim < 0 {
            cat_dim + rank as i64
        } else {
            cat_dim
        };
        let [zeros, second] = parts.as_slice() else {
            return None;
        };
        if cat_dim != dim as i64 || !matches!(arg(second), Arg::Node(s) if s == scan.name) {
            return None;
        }
        let Arg::Node(z) = arg(zeros) else {
            return None;
        };
        // The scan's identity (zeros for a sum, ones for a product: zeros_like / new_zeros /
        // zeros / ones_like / ... / full of it), possibly of a select and unsqueeze of x;
        // one slice along the dim.
        let mut names = vec![slice.name.clone(), cat.name.clone()];
        let zn = self.node(z)?;
        let fill = match target(zn) {
            "zeros_like" | "zeros" | "new_zeros" => 0.0,
            "ones_like" | "ones" | "new_ones" => 1.0,
            "full" | "full_like" | "new_full" => super::num_param(zn, 1, "fill_value")?,
            _ => return None,
        };
        if fill != kind.identity() || self.meta(z)?.shape.get(dim) != Some(&1) {
            return None;
        }
        names.push(zn.name.clone());
        // Views and selects of x that only feed the zeros.
        let mut cur = zn.args.first().map(arg);
        while let Some(Arg::Node(p)) = cur {
            let Some(pn) = self.node(p) else { break };
            if pn.op != "call_function"
                || !matches!(
                    target(pn),
                    "select" | "unsqueeze" | "view" | "reshape" | "slice"
                )
                || self.readers(p, calls).len() != 1
            {
                break;
            }
            names.push(pn.name.clone());
            cur = pn.args.first().map(arg);
        }
        Some((x.to_string(), names, cat.name.clone()))
    }
}

/// The workload of a scan `sm` whose chain ends at `out`.
pub(super) fn map_scan(
    mp: &mut Mapper<'_>,
    sm: &ScanMatch,
    out: &str,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let head = mp.node(&sm.head)?;
    // A scan of a computed tensor: the elementwise ops from an input of Model shaped like it
    // run first ([[before]]: `torch.cumsum(x * mask, d)`), their operands indexed like it.
    let start = if mp.source(&sm.input).is_none() {
        super::reduce::before_start(mp, head, &sm.input, &[sm.dim], "scan")?
    } else {
        sm.input.clone()
    };
    let rows = rows_over(mp, head, &start, &[sm.dim], "scan")?;
    // The ops' descriptions before the scan's own, for `ops`.
    let mut described = 0;
    let before = if start != sm.input {
        let classify = super::reduce::like_a(&rows);
        let mut b_ops = Vec::new();
        let before = super::chain_between(
            mp, &start, &sm.input, &classify, true, None, rows.dtype, &mut b_ops,
        )?;
        described = b_ops.len();
        ops.extend(b_ops);
        before
    } else {
        Vec::new()
    };
    let (dtype, col, batch, m, n) = (rows.dtype, rows.col, rows.batch, rows.m, rows.len);
    // `dtype=` on the scan: the result's type, which the family writes when it is f32.
    let out_dtype = mp
        .meta(&sm.head)
        .and_then(|meta| super::dtype_of(&meta.dtype))
        .unwrap_or(dtype);
    if out_dtype != dtype && out_dtype != DType::F32 {
        mp.problem(
            head,
            format!(
                "a scan of {dtype} into {out_dtype}: family scan writes its input's type or f32"
            ),
        );
        return None;
    }
    let chain = super::chain_after(mp, &sm.head, out, (batch, m, n), out_dtype, ops)?;
    constants_after_side_by_side(mp, head, &chain, col, "scan")?;
    let what = format!(
        "{}cum{}{}",
        if sm.exclusive { "exclusive " } else { "" },
        sm.kind.name(),
        if sm.reverse { " from the end" } else { "" }
    );
    // The ops in order: those before the scan, the scan, those after it.
    ops.insert(described.min(ops.len()), what.clone());
    let shapes = if col {
        super::side_by_side_shapes(batch, m, n)
    } else {
        super::row_shapes(m, n)
    };
    Some(WorkloadSpec {
        name: None,
        description: rows.describe(
            &match before.len() {
                0 => what.clone(),
                1 => format!("{what} of 1 elementwise op's result"),
                k => format!("{what} of {k} elementwise ops' result"),
            },
            chain.len(),
            file,
        ),
        family: Family::Scan,
        dtype,
        out_dtype: (out_dtype != dtype).then_some(out_dtype),
        acc_dtype: None,
        allow_tf32: false,
        layout: rows.layout(),
        shapes,
        params: ParamsSpec {
            scan: Some(sm.kind),
            reverse: sm.reverse.then_some(true),
            exclusive: sm.exclusive.then_some(true),
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
