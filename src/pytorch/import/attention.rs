//! `scaled_dot_product_attention` written out as the ops it is defined by, before the
//! graph is mapped: `softmax(Q Kᵀ · scale + mask) V`, with the causal mask as the
//! `tril(ones) == 0` fill the importer knows. No one workload computes two GEMMs, so such a
//! Model imports as stages ([`super::stages`]): the scores' GEMM with its scale, mask and
//! row softmax, then the GEMM by V.

use serde_json::{json, Value};

use super::{arg, Arg, Graph, Meta, Node};

/// Row-major strides of `shape`.
fn contiguous(shape: &[i64]) -> Vec<i64> {
    let mut st = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * shape[i + 1].max(1);
    }
    st
}

fn call(name: String, target: &str, args: Value, shape: Vec<i64>, dtype: &str) -> Node {
    let stride = contiguous(&shape);
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
        }),
        value: None,
    }
}

/// Argument `i` (or keyword `key`) of `n`.
fn param<'n>(n: &'n Node, i: usize, key: &str) -> Option<&'n Value> {
    n.args.get(i).or_else(|| n.kwargs.get(key))
}

/// Why `n`, an SDPA node, is not written out (None: it can be).
fn refusal(n: &Node) -> Option<&'static str> {
    let dropout = param(n, 4, "dropout_p")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    if dropout != 0.0 {
        return Some("a dropout inside the attention (dropout_p > 0)");
    }
    if param(n, 7, "enable_gqa").and_then(Value::as_bool) == Some(true) {
        return Some("grouped-query attention (enable_gqa)");
    }
    None
}

/// Writes out every `scaled_dot_product_attention` node of `graph` it can (see the
/// module's comment). Returns the nodes left as they are, with why.
pub(super) fn expand_sdpa(graph: &mut Graph) -> Vec<(String, &'static str)> {
    let mut left = Vec::new();
    let metas: std::collections::HashMap<String, Meta> = graph
        .nodes
        .iter()
        .filter_map(|n| n.val.clone().map(|v| (n.name.clone(), v)))
        .collect();
    let mut out = Vec::with_capacity(graph.nodes.len());
    for n in std::mem::take(&mut graph.nodes) {
        let is_sdpa = n.op == "call_function"
            && n.target.as_deref() == Some("aten.scaled_dot_product_attention.default");
        if !is_sdpa {
            out.push(n);
            continue;
        }
        if let Some(why) = refusal(&n) {
            left.push((n.name.clone(), why));
            out.push(n);
            continue;
        }
        let node_arg = |i: usize, key: &str| match param(&n, i, key).map(arg) {
            Some(Arg::Node(x)) => Some(x.to_string()),
            _ => None,
        };
        let (Some(q), Some(k), Some(v)) = (
            node_arg(0, "query"),
            node_arg(1, "key"),
            node_arg(2, "value"),
        ) else {
            left.push((n.name.clone(), "Q, K or V is not a tensor"));
            out.push(n);
            continue;
        };
        let (Some(qm), Some(km)) = (metas.get(&q), metas.get(&k)) else {
            left.push((n.name.clone(), "Q or K has no tensor metadata"));
            out.push(n);
            continue;
        };
        let nd = qm.shape.len();
        if nd < 2 || km.shape.len() != nd {
            left.push((n.name.clone(), "Q and K of different ranks"));
            out.push(n);
            continue;
        }
        let mask = node_arg(3, "attn_mask");
        if let Some(m) = &mask {
            if metas.get(m).is_some_and(|mm| mm.dtype == "bool") {
                left.push((
                    n.name.clone(),
                    "a boolean attn_mask (an additive float mask, or is_causal, is written out)",
                ));
                out.push(n);
                continue;
            }
        }
        let causal = param(&n, 5, "is_causal").and_then(Value::as_bool) == Some(true);
        if causal && mask.is_some() {
            left.push((n.name.clone(), "both attn_mask and is_causal"));
            out.push(n);
            continue;
        }
        let e = qm.shape[nd - 1];
        let scale = param(&n, 6, "scale")
            .and_then(Value::as_f64)
            .unwrap_or(1.0 / (e.max(1) as f64).sqrt());
        let dtype = qm.dtype.clone();
        let (l, s) = (qm.shape[nd - 2], km.shape[nd - 2]);
        let mut scores_shape = qm.shape.clone();
        scores_shape[nd - 1] = s;
        let base = n.name.clone();
        let name = |suffix: &str| format!("{base}_{suffix}");
        // Kᵀ: a view (strides swapped), as `k.transpose(-2, -1)` is.
        let mut kt_meta = km.clone();
        kt_meta.shape.swap(nd - 2, nd - 1);
        kt_meta.stride.swap(nd - 2, nd - 1);
        out.push(Node {
            val: Some(kt_meta),
            ..call(
                name("kt"),
                "aten.transpose.int",
                json!([{ "node": k }, -2, -1]),
                Vec::new(),
                &dtype,
            )
        });
        out.push(call(
            name("scores"),
            "aten.matmul.default",
            json!([{ "node": q }, { "node": name("kt") }]),
            scores_shape.clone(),
            &dtype,
        ));
        out.push(call(
            name("scaled"),
            "aten.mul.Tensor",
            json!([{ "node": name("scores") }, scale]),
            scores_shape.clone(),
            &dtype,
        ));
        let mut logits = name("scaled");
        if let Some(m) = mask {
            out.push(call(
                name("masked"),
                "aten.add.Tensor",
                json!([{ "node": logits }, { "node": m }]),
                scores_shape.clone(),
                &dtype,
            ));
            logits = name("masked");
        } else if causal {
            out.push(call(
                name("ones"),
                "aten.ones.default",
                json!([[l, s]]),
                vec![l, s],
                "bool",
            ));
            out.push(call(
                name("tril"),
                "aten.tril.default",
                json!([{ "node": name("ones") }]),
                vec![l, s],
                "bool",
            ));
            out.push(call(
                name("future"),
                "aten.eq.Scalar",
                json!([{ "node": name("tril") }, 0]),
                vec![l, s],
                "bool",
            ));
            out.push(call(
                name("masked"),
                "aten.masked_fill.Scalar",
                json!([{ "node": logits }, { "node": name("future") }, { "float": "-inf" }]),
                scores_shape.clone(),
                &dtype,
            ));
            logits = name("masked");
        }
        out.push(call(
            name("probs"),
            "aten.softmax.int",
            json!([{ "node": logits }, -1]),
            scores_shape,
            &dtype,
        ));
        // The output keeps the SDPA node's name, so what reads it reads this product.
        let mut o = call(
            base.clone(),
            "aten.matmul.default",
            json!([{ "node": name("probs") }, { "node": v }]),
            Vec::new(),
            &dtype,
        );
        o.val = n.val.clone();
        out.push(o);
    }
    graph.nodes = out;
    left
}
