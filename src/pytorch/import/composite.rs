//! Composite ops written out as the ops their definition names, before the graph is
//! mapped, so that the families compute them (as stages, [`super::stages`], where one
//! workload cannot):
//! - `scaled_dot_product_attention`: `softmax(Q Kᵀ · scale + mask) V`, the causal mask as
//!   the `tril(ones) == 0` fill the importer knows; two stages: the scores' GEMM with its
//!   scale, mask and row softmax, then the GEMM by V.
//! - `pairwise_distance(x1, x2)`: `‖x1 - x2 + eps‖₂` over the last dim (order 2).
//! - `triplet_margin_loss(a, p, n)`: `max(d(a, p) - d(a, n) + margin, 0)` of two such
//!   distances (with `swap`, `d(a, n)` is `min(d(a, n), d(p, n))`), then the reduction.
//! - `cosine_similarity(x1, x2, dim)`: `Σ x1·x2 / (max(‖x1‖₂, eps) · max(‖x2‖₂, eps))`
//!   over `dim`, as torch documents it.

use serde_json::{json, Value};

use super::{arg, Arg, Graph, Meta, Node};

/// Row-major strides of `shape` (as a stage writes its output).
pub(super) fn row_major(shape: &[i64]) -> Vec<i64> {
    let mut st = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * shape[i + 1].max(1);
    }
    st
}

fn call(name: String, target: &str, args: Value, shape: Vec<i64>, dtype: &str) -> Node {
    let stride = row_major(&shape);
    Node {
        name,
        op: "call_function".into(),
        target: Some(target.into()),
        kind: None,
        args: args.as_array().cloned().unwrap_or_default(),
        kwargs: Default::default(),
        val: Some(Meta {
            shape,
            stride,
            dtype: dtype.into(),
            offset: 0,
        }),
        value: None,
        triangle: None,
    }
}

/// Argument `i` (or keyword `key`) of `n`.
fn param<'n>(n: &'n Node, i: usize, key: &str) -> Option<&'n Value> {
    n.args.get(i).or_else(|| n.kwargs.get(key))
}

/// Why `n`, an SDPA node, is not written out (None: it can be).
fn refusal(n: &Node) -> Option<&'static str> {
    let dropout = match param(n, 4, "dropout_p") {
        None | Some(Value::Null) => Some(0.0),
        Some(v) => v.as_f64(),
    };
    if dropout != Some(0.0) {
        return Some("a dropout inside the attention (dropout_p not 0)");
    }
    if !matches!(param(n, 6, "scale"), None | Some(Value::Null))
        && param(n, 6, "scale").and_then(Value::as_f64).is_none()
    {
        return Some("a scale that is not a number");
    }
    if param(n, 7, "enable_gqa").and_then(Value::as_bool) == Some(true) {
        return Some("grouped-query attention (enable_gqa)");
    }
    None
}

/// Writes out every composite node of `graph` it can (see the module's comment). Returns
/// the nodes left as they are, with why.
pub(super) fn expand(graph: &mut Graph) -> Vec<(String, &'static str)> {
    let mut left = Vec::new();
    let metas: std::collections::HashMap<String, Meta> = graph
        .nodes
        .iter()
        .filter_map(|n| n.val.clone().map(|v| (n.name.clone(), v)))
        .collect();
    let mut out = Vec::with_capacity(graph.nodes.len());
    for n in std::mem::take(&mut graph.nodes) {
        let target = if n.op == "call_function" {
            n.target.as_deref().unwrap_or_default()
        } else {
            ""
        };
        let written = match target {
            "aten.scaled_dot_product_attention.default" => attention(&n, &metas),
            "aten.pairwise_distance.default"
            | "aten.triplet_margin_loss.default"
            | "aten.cosine_similarity.default" => distance(&n, &metas),
            _ => {
                out.push(n);
                continue;
            }
        };
        match written {
            Ok(nodes) => out.extend(nodes),
            Err(why) => {
                left.push((n.name.clone(), why));
                out.push(n);
            }
        }
    }
    graph.nodes = out;
    left
}

/// In-place ops (`nn.ReLU(inplace=True)`, `x.mul_(2)`) as their out-of-place forms, where
/// that keeps the Model's meaning: torch.export threads the mutated value through the
/// in-place node's result, so an op whose input nothing reads after it computes what the
/// out-of-place op would. One whose input is read again later (an alias seeing the
/// mutation) is left as it is (and refused as an unknown op), and so is an update of a
/// buffer or parameter.
pub(super) fn out_of_place(graph: &mut Graph) {
    let reads: Vec<Vec<String>> = graph.nodes.iter().map(super::stages::node_refs).collect();
    let output_reads = {
        let mut out = Vec::new();
        graph
            .output
            .iter()
            .for_each(|v| super::stages::refs(v, &mut out));
        out
    };
    for i in 0..graph.nodes.len() {
        let n = &graph.nodes[i];
        if n.op != "call_function" {
            continue;
        }
        let Some(target) = n.target.as_deref() else {
            continue;
        };
        let Some(rest) = target.strip_prefix("aten.") else {
            continue;
        };
        let (op, overload) = rest.split_once('.').unwrap_or((rest, "default"));
        let Some(base) = op
            .strip_suffix('_')
            .filter(|b| !b.is_empty() && !b.ends_with('_'))
        else {
            continue;
        };
        let functional = format!("aten.{base}.{overload}");
        if super::classify(&functional) == super::Class::Unknown {
            continue;
        }
        let Some(x) = reads[i].first() else {
            continue;
        };
        // An update of a module's state (a BatchNorm's `num_batches_tracked.add_(1)` in
        // training mode) is bookkeeping the mapper knows as such: left as it is.
        let state = graph.nodes.iter().any(|m| {
            &m.name == x
                && m.op == "placeholder"
                && matches!(m.kind.as_deref(), Some("buffer" | "parameter"))
        });
        if state {
            continue;
        }
        let read_later = reads[i + 1..].iter().any(|r| r.contains(x)) || output_reads.contains(x);
        if !read_later {
            graph.nodes[i].target = Some(functional);
        }
    }
}

/// The nodes `scaled_dot_product_attention` node `n` is written out as, or why not.
fn attention(
    n: &Node,
    metas: &std::collections::HashMap<String, Meta>,
) -> Result<Vec<Node>, &'static str> {
    if let Some(why) = refusal(n) {
        return Err(why);
    }
    let node_arg = |i: usize, key: &str| match param(n, i, key).map(arg) {
        Some(Arg::Node(x)) => Some(x.to_string()),
        _ => None,
    };
    let (Some(q), Some(k), Some(v)) = (
        node_arg(0, "query"),
        node_arg(1, "key"),
        node_arg(2, "value"),
    ) else {
        return Err("a Q, K or V that is not a tensor");
    };
    let (Some(qm), Some(km)) = (metas.get(&q), metas.get(&k)) else {
        return Err("a Q or K without tensor metadata");
    };
    let nd = qm.shape.len();
    if nd < 2 || km.shape.len() != nd {
        return Err("a Q or K of fewer than 2 dims, or the two of different ranks");
    }
    let mask = node_arg(3, "attn_mask");
    if let Some(m) = &mask {
        match metas.get(m) {
            None => return Err("an attn_mask without tensor metadata"),
            Some(mm) if mm.dtype == "bool" => {
                return Err(
                    "a boolean attn_mask (an additive float mask, or is_causal, is written out)",
                )
            }
            Some(_) => {}
        }
    }
    let causal = param(n, 5, "is_causal").and_then(Value::as_bool) == Some(true);
    if causal && mask.is_some() {
        return Err("both attn_mask and is_causal");
    }
    let e = qm.shape[nd - 1];
    let scale = param(n, 6, "scale")
        .and_then(Value::as_f64)
        .unwrap_or(1.0 / (e.max(1) as f64).sqrt());
    let (l, s) = (qm.shape[nd - 2], km.shape[nd - 2]);
    let mut scores = qm.shape.clone();
    scores[nd - 1] = s;
    let mut b = Builder {
        base: n.name.clone(),
        dtype: qm.dtype.clone(),
        nodes: Vec::new(),
    };
    // Kᵀ: a view (strides swapped), as `k.transpose(-2, -1)` is.
    let kt = b.op(
        Some("kt"),
        "aten.transpose.int",
        json!([{ "node": k }, -2, -1]),
        &[],
    );
    let mut kt_meta = km.clone();
    kt_meta.shape.swap(nd - 2, nd - 1);
    kt_meta.stride.swap(nd - 2, nd - 1);
    b.retype(kt_meta);
    let prod = b.op(
        Some("scores"),
        "aten.matmul.default",
        json!([{ "node": q }, { "node": kt }]),
        &scores,
    );
    let mut logits = b.op(
        Some("scaled"),
        "aten.mul.Tensor",
        json!([{ "node": prod }, scale]),
        &scores,
    );
    if let Some(m) = mask {
        logits = b.op(
            Some("masked"),
            "aten.add.Tensor",
            json!([{ "node": logits }, { "node": m }]),
            &scores,
        );
    } else if causal {
        let bools = |b: &mut Builder, suffix: &str, target: &str, args: Value| {
            let name = b.op(Some(suffix), target, args, &[l, s]);
            let shape = vec![l, s];
            b.retype(Meta {
                stride: row_major(&shape),
                shape,
                dtype: "bool".into(),
                offset: 0,
            });
            name
        };
        let ones = bools(&mut b, "ones", "aten.ones.default", json!([[l, s]]));
        let tril = bools(
            &mut b,
            "tril",
            "aten.tril.default",
            json!([{ "node": ones }]),
        );
        let future = bools(
            &mut b,
            "future",
            "aten.eq.Scalar",
            json!([{ "node": tril }, 0]),
        );
        logits = b.op(
            Some("masked"),
            "aten.masked_fill.Scalar",
            json!([{ "node": logits }, { "node": future }, { "float": "-inf" }]),
            &scores,
        );
    }
    let probs = b.op(
        Some("probs"),
        "aten.softmax.int",
        json!([{ "node": logits }, -1]),
        &scores,
    );
    // The output keeps the SDPA node's name, so what reads it reads this product, and its
    // shape and strides as torch traced them: the views after it read it so.
    b.op(
        None,
        "aten.matmul.default",
        json!([{ "node": probs }, { "node": v }]),
        &[],
    );
    if let Some(last) = b.nodes.last_mut() {
        last.val = n.val.clone();
    }
    Ok(b.nodes)
}

/// Appends nodes named `{base}_{suffix}`; the last keeps `base` (what reads the composite
/// reads it).
struct Builder {
    base: String,
    dtype: String,
    nodes: Vec<Node>,
}

impl Builder {
    fn name(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.base)
    }

    /// `target(args)` of `shape`, named for `suffix` (None: the composite's own name).
    fn op(&mut self, suffix: Option<&str>, target: &str, args: Value, shape: &[i64]) -> String {
        let name = suffix.map_or_else(|| self.base.clone(), |s| self.name(s));
        self.nodes.push(call(
            name.clone(),
            target,
            args,
            shape.to_vec(),
            &self.dtype,
        ));
        name
    }

    /// The last node's tensor metadata replaced (a view's strides, a mask's bool type).
    fn retype(&mut self, meta: Meta) {
        if let Some(last) = self.nodes.last_mut() {
            last.val = Some(meta);
        }
    }

    /// `‖x1 - x2 + eps‖₂` over the last dim of `shape`.
    fn distance(&mut self, tag: &str, x1: &str, x2: &str, eps: f64, shape: &[i64]) -> String {
        let d = self.op(
            Some(&format!("{tag}_diff")),
            "aten.sub.Tensor",
            json!([{ "node": x1 }, { "node": x2 }]),
            shape,
        );
        let e = self.op(
            Some(&format!("{tag}_eps")),
            "aten.add.Tensor",
            json!([{ "node": d }, eps]),
            shape,
        );
        let last = shape.len().saturating_sub(1);
        self.op(
            Some(tag),
            "aten.linalg_vector_norm.default",
            json!([{ "node": e }, 2, [last]]),
            &shape[..last],
        )
    }
}

fn num(n: &Node, i: usize, key: &str, default: f64) -> Option<f64> {
    match param(n, i, key) {
        None | Some(Value::Null) => Some(default),
        Some(v) => v.as_f64(),
    }
}

/// The nodes `pairwise_distance`, `triplet_margin_loss` or `cosine_similarity` node `n`
/// is written out as, or why not.
fn distance(
    n: &Node,
    metas: &std::collections::HashMap<String, Meta>,
) -> Result<Vec<Node>, &'static str> {
    let target = n.target.as_deref().unwrap_or_default();
    let tensor = |i: usize, key: &str| match param(n, i, key).map(arg) {
        Some(Arg::Node(x)) => Ok(x.to_string()),
        _ => Err("an operand that is not a tensor"),
    };
    let meta = |x: &str| metas.get(x).ok_or("an operand without tensor metadata");
    let mut b = Builder {
        base: n.name.clone(),
        dtype: String::new(),
        nodes: Vec::new(),
    };
    match target {
        "aten.pairwise_distance.default" | "aten.triplet_margin_loss.default" => {
            let triplet = target == "aten.triplet_margin_loss.default";
            let xs: Vec<String> = if triplet {
                vec![
                    tensor(0, "anchor")?,
                    tensor(1, "positive")?,
                    tensor(2, "negative")?,
                ]
            } else {
                vec![tensor(0, "x1")?, tensor(1, "x2")?]
            };
            let m = meta(&xs[0])?;
            for x in &xs[1..] {
                if meta(x)?.shape != m.shape {
                    return Err("operands of different shapes (broadcast)");
                }
            }
            if m.shape.is_empty() {
                return Err("0-d operands");
            }
            b.dtype = m.dtype.clone();
            let shape = m.shape.clone();
            let (p_at, eps_at) = if triplet { (4, 5) } else { (2, 3) };
            let p = num(n, p_at, "p", 2.0).ok_or("a norm order that is not a number")?;
            if p != 2.0 {
                return Err("a norm of order other than 2");
            }
            let eps = num(n, eps_at, "eps", 1e-6).ok_or("an eps that is not a number")?;
            if !triplet {
                let keepdim = param(n, 4, "keepdim").and_then(Value::as_bool) == Some(true);
                if keepdim {
                    return Err("keepdim");
                }
                let d = b.distance("d", &xs[0], &xs[1], eps, &shape);
                // The composite's own name on the last node: a copy of the norm.
                let rows = &shape[..shape.len() - 1];
                b.op(None, "aten.clone.default", json!([{ "node": d }]), rows);
                return Ok(b.nodes);
            }
            let margin = num(n, 3, "margin", 1.0).ok_or("a margin that is not a number")?;
            let swap = param(n, 6, "swap").and_then(Value::as_bool) == Some(true);
            let reduction =
                num(n, 7, "reduction", 1.0).ok_or("a reduction that is not 0, 1 or 2")?;
            let rows = shape[..shape.len() - 1].to_vec();
            let dp = b.distance("pos", &xs[0], &xs[1], eps, &shape);
            let mut dn = b.distance("neg", &xs[0], &xs[2], eps, &shape);
            if swap {
                let ds = b.distance("swap", &xs[1], &xs[2], eps, &shape);
                dn = b.op(
                    Some("neg_min"),
                    "aten.minimum.default",
                    json!([{ "node": dn }, { "node": ds }]),
                    &rows,
                );
            }
            let t = b.op(
                Some("gap"),
                "aten.sub.Tensor",
                json!([{ "node": dp }, { "node": dn }]),
                &rows,
            );
            let t = b.op(
                Some("margin"),
                "aten.add.Tensor",
                json!([{ "node": t }, margin]),
                &rows,
            );
            match reduction {
                0.0 => {
                    b.op(
                        None,
                        "aten.clamp_min.default",
                        json!([{ "node": t }, 0]),
                        &rows,
                    );
                }
                1.0 | 2.0 => {
                    let c = b.op(
                        Some("hinge"),
                        "aten.clamp_min.default",
                        json!([{ "node": t }, 0]),
                        &rows,
                    );
                    let r = if reduction == 1.0 {
                        "aten.mean.default"
                    } else {
                        "aten.sum.default"
                    };
                    b.op(None, r, json!([{ "node": c }]), &[]);
                }
                _ => return Err("a reduction that is not 0, 1 or 2"),
            }
            Ok(b.nodes)
        }
        "aten.cosine_similarity.default" => {
            let (x1, x2) = (tensor(0, "x1")?, tensor(1, "x2")?);
            let m = meta(&x1)?;
            if meta(&x2)?.shape != m.shape {
                return Err("operands of different shapes (broadcast)");
            }
            let rank = m.shape.len() as i64;
            if rank == 0 {
                return Err("0-d operands");
            }
            b.dtype = m.dtype.clone();
            let shape = m.shape.clone();
            let dim = num(n, 2, "dim", 1.0).ok_or("a dim that is not a number")? as i64;
            let dim = if dim < 0 { dim + rank } else { dim };
            if !(0..rank).contains(&dim) {
                return Err("a dim out of range");
            }
            let eps = num(n, 3, "eps", 1e-8).ok_or("an eps that is not a number")?;
            let mut rows = shape.clone();
            rows.remove(dim as usize);
            let prod = b.op(
                Some("prod"),
                "aten.mul.Tensor",
                json!([{ "node": x1 }, { "node": x2 }]),
                &shape,
            );
            let dot = b.op(
                Some("dot"),
                "aten.sum.dim_IntList",
                json!([{ "node": prod }, [dim]]),
                &rows,
            );
            let mut norms = Vec::new();
            for (tag, x) in [("n1", &x1), ("n2", &x2)] {
                let nrm = b.op(
                    Some(tag),
                    "aten.linalg_vector_norm.default",
                    json!([{ "node": x }, 2, [dim]]),
                    &rows,
                );
                norms.push(b.op(
                    Some(&format!("{tag}_eps")),
                    "aten.clamp_min.default",
                    json!([{ "node": nrm }, eps]),
                    &rows,
                ));
            }
            let den = b.op(
                Some("den"),
                "aten.mul.Tensor",
                json!([{ "node": norms[0] }, { "node": norms[1] }]),
                &rows,
            );
            b.op(
                None,
                "aten.div.Tensor",
                json!([{ "node": dot }, { "node": den }]),
                &rows,
            );
            Ok(b.nodes)
        }
        _ => Err("not a composite this importer writes out"),
    }
}
