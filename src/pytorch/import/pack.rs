//! Copies of strided views: where a Model hands a matrix product (or `.contiguous()`) a
//! view that no workload reads in place (the heads of a fused QKV projection after
//! `split`, `view` and `transpose(1, 2)`; an attention output transposed back), the graph
//! gets a node that packs the view, as eager PyTorch itself copies it inside `matmul` and
//! `contiguous`. Each such node is a stage of its own: an activation-family workload that
//! reads its input through a `[view]` (a permutation of the input's dims, some held at one
//! index) and writes it packed.
//!
//! The view is found from the tensors' metadata, not from the ops that made it: the
//! packed value the view's chain of view ops starts from, and the view's shape, strides
//! and storage offset. A slice inside a dim and a broadcast (stride 0) are parts of the
//! `[view]` too; a dim strided by a step is not, and such a view is left as it was.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use super::composite::row_major;
use super::{arg, classify, contiguous, op_name, Arg, Class, Graph, Meta, Node, Unmapped};
use crate::spec::view::{NarrowSpec, SelectSpec, View, ViewSpec};
use crate::spec::{DType, Family, WorkloadSpec};

/// The target of a node that packs a view (its input is the packed value the view reads;
/// `kwargs.view` is the `[view]`).
pub(super) const PACK: &str = "cutesmith.pack";

/// Ops whose result is a view of their first argument's storage (besides [`Class::View`]).
fn views_storage(target: &str) -> bool {
    matches!(
        op_name(target),
        "split" | "split_with_sizes" | "chunk" | "unbind" | "select" | "narrow" | "slice"
    ) || target == "<built-in function getitem>"
}

/// The node whose packed value `name` is a view of: back through views and a split's
/// parts to a computed value or an input of Model, packed row-major from the start of its
/// storage. None when the chain passes anything else or ends at a parameter.
fn root<'g>(nodes: &HashMap<&str, &'g Node>, name: &str) -> Option<&'g Node> {
    let mut cur = *nodes.get(name)?;
    loop {
        let t = cur.target.as_deref().unwrap_or_default();
        // A copy (contiguous, clone; a reshape of a strided tensor into a packed one)
        // starts a new storage, which the metadata of the views after it describe. (A
        // reshape whose result is strided is a view: torch copies into a packed tensor.)
        let copy = matches!(op_name(t), "contiguous" | "clone")
            || matches!(op_name(t), "reshape" | "flatten")
                && !cur
                    .args
                    .first()
                    .and_then(|a| match arg(a) {
                        Arg::Node(x) => nodes.get(x).and_then(|p| p.val.as_ref()),
                        _ => None,
                    })
                    .is_some_and(contiguous)
                && cur
                    .val
                    .as_ref()
                    .is_none_or(|m| contiguous(m) && m.offset == 0);
        let through =
            cur.op == "call_function" && !copy && (views_storage(t) || classify(t) == Class::View);
        if !through {
            break;
        }
        let Some(Arg::Node(prev)) = cur.args.first().map(arg) else {
            return None;
        };
        let prev = *nodes.get(prev)?;
        // A getitem of what an op returns beside other values (max / min over a dim: the
        // values and the indices) is that op's value, not a view: the walk ends there.
        let parts = matches!(
            op_name(prev.target.as_deref().unwrap_or_default()),
            "split" | "split_with_sizes" | "chunk" | "unbind"
        );
        if t == "<built-in function getitem>" && !parts {
            break;
        }
        // A view that reads the bytes as another type (`x.view(torch.float32)`) is no
        // permutation of the elements.
        // (A split's tuple has no metadata: its parts' and its input's are compared.)
        if let (Some(a), Some(b)) = (&prev.val, &cur.val) {
            if a.dtype != b.dtype {
                return None;
            }
        }
        cur = prev;
    }
    let computed = cur.op == "call_function";
    let input = cur.op == "placeholder" && cur.kind.as_deref() == Some("user_input");
    let m = cur.val.as_ref()?;
    ((computed || input) && m.offset == 0 && contiguous(m)).then_some(cur)
}

/// Whether `name`'s chain of views back to its packed value passes an op that reads part
/// of the storage (a split's part, a select, a slice): the mappers read views from the
/// start of their value, so such a view is packed wherever it is read.
fn reads_part(nodes: &HashMap<&str, &Node>, name: &str) -> bool {
    let mut cur = name;
    while let Some(n) = nodes.get(cur) {
        let t = n.target.as_deref().unwrap_or_default();
        if n.op != "call_function" || !(views_storage(t) || classify(t) == Class::View) {
            return false;
        }
        if views_storage(t) {
            return true;
        }
        match n.args.first().map(arg) {
            Some(Arg::Node(prev)) => cur = prev,
            _ => return false,
        }
    }
    false
}

/// The `[view]` by which a packed tensor of `base_len` elements is read as `view`, or None
/// when the view is not a permutation of some of the dims of a reshape of it, with the
/// others held at one index, some read in part (a slice inside a dim) and some broadcast
/// (stride 0). A gap between two dims' strides is read first as a dim held at an index
/// (a split's part), then as the lower dim's slice (`x[:, :k]`).
pub(super) fn derive(base_len: i64, view: &Meta) -> Option<ViewSpec> {
    derive_as(base_len, view, false).or_else(|| derive_as(base_len, view, true))
}

/// [`derive`], a stride gap read as a slice of the dim below it (`slices`) or as a dim
/// held at an index.
fn derive_as(base_len: i64, view: &Meta, slices: bool) -> Option<ViewSpec> {
    if view.shape.len() != view.stride.len() || base_len < 1 || view.offset < 0 {
        return None;
    }
    // The output dims of more than one element, innermost in the storage first; those of
    // stride 0 are broadcast.
    let mut kept: Vec<(usize, i64, i64)> = Vec::new();
    let mut expand: Vec<u32> = Vec::new();
    for (t, (&e, &s)) in view.shape.iter().zip(&view.stride).enumerate() {
        if e == 1 {
            continue;
        }
        if e < 1 || s < 0 {
            return None;
        }
        if s == 0 {
            expand.push(t as u32);
        } else {
            kept.push((t, e, s));
        }
    }
    kept.sort_by_key(|&(_, _, s)| s);
    // The input's dims, innermost first: an output dim (its input size and the start of
    // its slice), or one held at an index.
    enum Dim {
        Out { t: usize, size: i64, start: i64 },
        Held { size: i64, index: i64 },
    }
    let mut dims: Vec<Dim> = Vec::new();
    let mut cur = 1i64;
    let mut offset = 0i64;
    let held = |dims: &mut Vec<Dim>, offset: &mut i64, size: i64, cur: i64| {
        let index = (view.offset / cur) % size;
        *offset += index * cur;
        dims.push(Dim::Held { size, index });
    };
    for (i, &(t, e, s)) in kept.iter().enumerate() {
        if s % cur != 0 || s < cur {
            return None;
        }
        let gap = s / cur;
        if gap > 1 {
            held(&mut dims, &mut offset, gap, cur);
        }
        // The dim's input size: its own extent, or with `slices` all up to the next
        // dim's stride (the storage's end after the last).
        let above = kept.get(i + 1).map_or(base_len, |&(_, _, s2)| s2);
        let size = if slices && above % s == 0 && above / s > e {
            above / s
        } else {
            e
        };
        let start = (view.offset / s) % size;
        if start.checked_add(e)? > size {
            return None;
        }
        offset += start * s;
        dims.push(Dim::Out { t, size, start });
        cur = s.checked_mul(size)?;
    }
    if cur > base_len || base_len % cur != 0 {
        return None;
    }
    if base_len / cur > 1 {
        held(&mut dims, &mut offset, base_len / cur, cur);
    }
    // Every element of the offset is accounted for by the held dims' indices and the
    // slices' starts.
    if offset != view.offset {
        return None;
    }
    dims.reverse();
    // Output dims of one element, and the broadcast ones, lead the input's dims (of size
    // 1 there), in their order.
    let ones: Vec<usize> = (0..view.shape.len())
        .filter(|&t| view.shape[t] == 1 || view.shape[t] > 1 && view.stride[t] == 0)
        .collect();
    let mut order: Vec<usize> = ones.clone();
    let mut select = Vec::new();
    let mut narrow = Vec::new();
    for (i, d) in dims.iter().enumerate() {
        match d {
            Dim::Out { t, size, start } => {
                order.push(*t);
                if *size > view.shape[*t] {
                    narrow.push(NarrowSpec {
                        dim: *t as u32,
                        size: *size as u64,
                        start: *start as u64,
                    });
                }
            }
            Dim::Held { size, index } => select.push(SelectSpec {
                dim: (ones.len() + i) as u32,
                size: *size as u64,
                index: *index as u64,
            }),
        }
    }
    narrow.sort_by_key(|n| n.dim);
    // Output dim t reads the kept input dim at its position in `order`; where that moves
    // only dims of size 1 in the input (no select counting positions), none.
    let moved: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&t| view.shape[t] > 1 && view.stride[t] != 0)
        .collect();
    if select.is_empty() && moved.windows(2).all(|w| w[0] < w[1]) {
        order.sort_unstable();
    }
    let mut permute = vec![0u32; view.shape.len()];
    for (k, &t) in order.iter().enumerate() {
        permute[t] = k as u32;
    }
    let spec = ViewSpec {
        permute: if permute.iter().enumerate().all(|(t, &p)| t as u32 == p) {
            Vec::new()
        } else {
            permute
        },
        select,
        narrow,
        expand,
    };
    // The view's own strides and offset, as the workload will read them.
    let v = View::new(&spec, view.shape.len()).ok()?;
    let out: Vec<u64> = view.shape.iter().map(|&d| d as u64).collect();
    v.check_dims(&out).ok()?;
    let s = v.strided(&out);
    let same = s.offset == view.offset as u64
        && s.input_len == base_len as u64
        && view
            .shape
            .iter()
            .zip(&view.stride)
            .zip(&s.strides)
            .all(|((&e, &want), &got)| e == 1 || want as u64 == got);
    same.then_some(spec)
}

/// An elementwise node's computed operands, in order (each's position, name and metadata
/// as broadcast to the node's output: stride 0 along the dims it broadcasts), when no
/// operand has the output's shape.
fn broadcast_operands(nodes: &HashMap<&str, &Node>, n: &Node) -> Vec<(usize, String, Meta)> {
    let Some(out) = n.val.as_ref() else {
        return Vec::new();
    };
    let operands: Vec<(usize, &str, &Meta)> = n
        .args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match arg(a) {
            Arg::Node(x) => Some((i, x, nodes.get(x)?.val.as_ref()?)),
            _ => None,
        })
        .collect();
    if operands.iter().any(|(_, _, m)| m.shape == out.shape) {
        return Vec::new();
    }
    let broadcast = |m: &Meta| -> Option<Meta> {
        Some(Meta {
            shape: out.shape.clone(),
            stride: broadcast_strides(m, &out.shape)?,
            dtype: m.dtype.clone(),
            offset: m.offset,
        })
    };
    operands
        .into_iter()
        .filter(|(_, x, _)| nodes.get(x).is_some_and(|v| v.op == "call_function"))
        .filter_map(|(i, x, m)| Some((i, x.to_string(), broadcast(m)?)))
        .collect()
}

/// The strides of `m` broadcast to `shape` as torch broadcasts (trailing dims aligned):
/// 0 along the dims it lacks or has of size 1; None where it does not broadcast.
fn broadcast_strides(m: &Meta, shape: &[i64]) -> Option<Vec<i64>> {
    let (ro, rx) = (shape.len(), m.shape.len());
    if rx > ro || m.stride.len() != rx {
        return None;
    }
    (0..ro)
        .map(|t| {
            let Some(d) = t.checked_sub(ro - rx) else {
                return Some(0);
            };
            match m.shape[d] {
                s if s == shape[t] => Some(m.stride[d]),
                1 => Some(0),
                _ => None,
            }
        })
        .collect()
}

/// The workload type of a torch float dtype an activation takes (f32, f16, bf16).
fn float(name: &str) -> Option<DType> {
    super::dtype_of(name).filter(|d| matches!(d, DType::F32 | DType::F16 | DType::BF16))
}

/// A node that packs `input`'s view `spec` into a tensor of `shape`.
fn pack_node(name: String, input: &str, spec: &ViewSpec, shape: &[i64], dtype: &str) -> Node {
    let mut kwargs = std::collections::BTreeMap::new();
    kwargs.insert(
        "view".to_string(),
        serde_json::to_value(spec).unwrap_or(Value::Null),
    );
    Node {
        name,
        op: "call_function".into(),
        target: Some(PACK.into()),
        kind: None,
        args: vec![json!({ "node": input })],
        kwargs,
        val: Some(Meta {
            shape: shape.to_vec(),
            stride: row_major(shape),
            dtype: dtype.into(),
            offset: 0,
        }),
        value: None,
        triangle: None,
    }
}

/// Whether a matrix product takes `m` as an operand in place: a packed row- or
/// column-major matrix of its last two dims, its batch dims folding into one stride that
/// is packed or 0.
fn gemm_ready(m: &Meta) -> bool {
    let r = m.shape.len();
    if r < 2 {
        return true;
    }
    if super::layout_2d(
        m.shape[r - 2],
        m.shape[r - 1],
        m.stride[r - 2],
        m.stride[r - 1],
    )
    .is_none()
    {
        return false;
    }
    let batch: Vec<(i64, i64)> = (0..r - 2)
        .filter(|&t| m.shape[t] != 1)
        .map(|t| (m.shape[t], m.stride[t]))
        .collect();
    let folds = batch
        .windows(2)
        .all(|w| w[0].1 == w[1].1 * w[1].0 || w[0].1 == 0 && w[1].1 == 0);
    let packed = m.shape[r - 2] * m.shape[r - 1];
    folds && batch.last().is_none_or(|&(_, s)| s == packed || s == 0)
}

/// `name`'s transpose of its last two dims: the value it transposes.
fn last_two_transposed<'g>(nodes: &HashMap<&str, &'g Node>, name: &str) -> Option<&'g str> {
    let n = *nodes.get(name)?;
    let t = n.target.as_deref()?;
    let r = n.val.as_ref()?.shape.len() as i64;
    let dim = |i: usize| match n.args.get(i) {
        Some(Value::Number(x)) => x.as_i64().map(|d| if d < 0 { d + r } else { d }),
        _ => None,
    };
    let swaps_last = match op_name(t) {
        "t" | "mT" | "numpy_T" => r == 2 || op_name(t) == "mT",
        "transpose" => {
            let (a, b) = (dim(1)?, dim(2)?);
            a.min(b) == r - 2 && a.max(b) == r - 1
        }
        _ => false,
    };
    match (swaps_last, n.args.first().map(arg)) {
        (true, Some(Arg::Node(x))) => Some(x),
        _ => None,
    }
}

/// Packs strided views (see the module's comment); returns how many. The copies torch
/// makes (`.contiguous()`, `.clone()`, a reshape that cannot view) always: the views after
/// them describe the copy, which no mapper may read as the value before it. With `reads`,
/// also the views that matrix products, ops reading a part of a value (or an elementwise
/// op a strided operand of its shape) and the Model's output read, and the calls whose
/// values nothing reads are dropped: the second attempt of an import whose graph maps no
/// other way (the other mappers read some parts themselves: an exclusive scan's slice).
pub(super) fn materialize(graph: &mut Graph, reads: bool) -> usize {
    let originals = graph.nodes.clone();
    let nodes: HashMap<&str, &Node> = originals.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut packer = Packer {
        names: originals.iter().map(|n| n.name.clone()).collect(),
        made: HashMap::new(),
        packs: 0,
    };
    // The view `name` of a packed value, if a pack of it would be a workload.
    // `name` read as `m` (its own metadata, or its broadcast to a larger shape).
    let view_as = |name: &str, m: Meta| -> Option<(String, ViewSpec, Meta)> {
        if contiguous(&m) && m.offset == 0 {
            return None;
        }
        let r = root(&nodes, name)?;
        let base = r.val.as_ref()?;
        float(&m.dtype)?;
        let spec = derive(base.shape.iter().product(), &m)?;
        Some((r.name.clone(), spec, m))
    };
    // A broadcast (stride 0) is packed only as an elementwise op's running value (below):
    // the mappers read broadcast operands themselves (a norm's `expand_as`).
    let viewed = |name: &str| {
        let m = nodes.get(name)?.val.clone()?;
        let broadcast = m
            .shape
            .iter()
            .zip(&m.stride)
            .any(|(&e, &s)| e > 1 && s == 0);
        if broadcast {
            return None;
        }
        view_as(name, m)
    };
    let mut out = Vec::with_capacity(originals.len());
    for n in &originals {
        let mut n = n.clone();
        let t = n.target.clone().unwrap_or_default();
        if n.op != "call_function" {
            out.push(n);
            continue;
        }
        // x.contiguous() / x.clone() of a strided view: the copy itself, where torch makes
        // it packed (a clone of a dense permuted view keeps its strides, and the views
        // after it describe those).
        let packed_copy = n
            .val
            .as_ref()
            .is_some_and(|m| contiguous(m) && m.offset == 0);
        if packed_copy && matches!(op_name(&t), "contiguous" | "clone") {
            let x = match n.args.first().map(arg) {
                Some(Arg::Node(x)) => Some(x.to_string()),
                _ => None,
            };
            if let Some((root, spec, m)) = x.as_deref().and_then(viewed) {
                packer.made.insert(key(&root, &spec, &m), n.name.clone());
                out.push(pack_node(n.name.clone(), &root, &spec, &m.shape, &m.dtype));
                packer.packs += 1;
                continue;
            }
        }
        // A reshape that copies (of a strided view into a packed shape: torch's
        // `y.transpose(1, 2).reshape(B, T, C)`): the pack of the view, then a view of it.
        if matches!(op_name(&t), "reshape" | "flatten") {
            let x = match n.args.first().map(arg) {
                Some(Arg::Node(x)) => Some(x.to_string()),
                _ => None,
            };
            let copies = n
                .val
                .as_ref()
                .is_some_and(|m| contiguous(m) && m.offset == 0);
            if let Some((root, spec, m)) = x.as_deref().filter(|_| copies).and_then(viewed) {
                let p = packer.pack(&mut out, &n.name, &root, &spec, &m);
                let shape = n.val.as_ref().map(|m| m.shape.clone()).unwrap_or_default();
                n.args = vec![json!({ "node": p }), json!(shape)];
                n.kwargs.clear();
                n.target = Some("aten.view.default".into());
                out.push(n);
                continue;
            }
        }
        // The operands packed before the op: a matrix product's strided views (a transpose
        // of the last two dims stays a view of the copy), and for any other op a part of a
        // value (a select, a split's part) or, for an elementwise op, a strided view shaped
        // like its output.
        let gemm = classify(&t) == Class::Gemm;
        let elementwise = classify(&t) == Class::Elementwise;
        let other = !gemm && classify(&t) != Class::View && !views_storage(&t) && t != PACK;
        let operands: Vec<usize> = match op_name(&t) {
            _ if !reads => Vec::new(),
            "mm" | "bmm" | "matmul" if gemm => vec![0, 1],
            "addmm" if gemm => vec![1, 2],
            "linear" if gemm => vec![0],
            _ if other => (0..n.args.len()).collect(),
            _ => Vec::new(),
        };
        // An elementwise op whose output is larger than each of its operands (`a_sum * w`
        // of [B, 1, K] and [1, D, K] is [B, D, K]): its first computed operand broadcast to
        // the output and packed, so that the op's running value is shaped like its output
        // (the others stay operands the chain broadcasts).
        if reads && elementwise {
            let viewable = broadcast_operands(&nodes, &n)
                .into_iter()
                .find_map(|(i, x, m)| Some((i, x.clone(), view_as(&x, m)?)));
            if let Some((i, x, (root, spec, m))) = viewable {
                let p = packer.pack(&mut out, &x, &root, &spec, &m);
                n.args[i] = json!({ "node": p });
                // Its result is packed like the copy (torch's broadcast result may keep
                // another operand's strides), where only computing ops read it: views of
                // it describe torch's strides (the second attempt's relayout recomputes
                // them).
                if !read_by_views(&originals, &n.name) {
                    if let Some(v) = n.val.as_mut().filter(|v| v.shape == m.shape) {
                        v.stride = row_major(&v.shape);
                        v.offset = 0;
                    }
                }
            }
        }
        for i in operands {
            let Some(Arg::Node(x)) = n.args.get(i).map(arg) else {
                continue;
            };
            let x = x.to_string();
            let meta = nodes.get(x.as_str()).and_then(|v| v.val.as_ref());
            let strided = if gemm {
                !meta.is_none_or(gemm_ready)
            } else {
                elementwise && meta.map(|v| &v.shape) == n.val.as_ref().map(|v| &v.shape)
            };
            if !strided && !reads_part(&nodes, &x) {
                continue;
            }
            let transposed = if gemm {
                last_two_transposed(&nodes, &x)
            } else {
                None
            };
            let y = transposed.unwrap_or(&x).to_string();
            let Some((root, spec, m)) = viewed(&y) else {
                continue;
            };
            // A scan reads the slice of its exclusive form itself (`cumsum(x[..., :-1])`).
            if !spec.narrow.is_empty() && matches!(op_name(&t), "cumsum" | "cumprod") {
                continue;
            }
            let p = packer.pack(&mut out, &y, &root, &spec, &m);
            let read = match transposed {
                Some(_) => packer.transpose(&mut out, &p, &m),
                None => p,
            };
            n.args[i] = json!({ "node": read });
            // An elementwise op of the packed part makes a packed value (torch kept the
            // view's strides): where only computing ops read it, say so.
            if elementwise && !read_by_views(&originals, &n.name) {
                if let Some(v) = n.val.as_mut().filter(|v| v.shape == m.shape) {
                    v.stride = row_major(&v.shape);
                    v.offset = 0;
                }
            }
        }
        out.push(n);
    }
    // A Model that returns a strided view (`x.permute(1, 2, 0).view(B, C, H, W)`): the
    // view packed last (a workload writes its output packed; the values are the same).
    let mut outputs = graph.output.clone();
    for o in outputs.iter_mut().filter(|_| reads) {
        let Arg::Node(x) = arg(o) else { continue };
        let x = x.to_string();
        if let Some((root, spec, m)) = viewed(&x) {
            let p = packer.pack(&mut out, &x, &root, &spec, &m);
            *o = json!({ "node": p });
        }
    }
    graph.output = outputs;
    graph.nodes = out;
    if reads {
        dead_code(graph);
        let before: HashMap<String, Meta> = originals
            .iter()
            .filter_map(|n| Some((n.name.clone(), n.val.clone()?)))
            .collect();
        relayout(graph, &before);
    }
    packer.packs
}

/// Whether a view op (a view of storage or a split's part) reads `name`.
fn read_by_views(nodes: &[Node], name: &str) -> bool {
    nodes.iter().any(|r| {
        let rt = r.target.as_deref().unwrap_or_default();
        (classify(rt) == Class::View || views_storage(rt))
            && matches!(r.args.first().map(arg), Some(Arg::Node(a)) if a == name)
    })
}

/// The layouts the stages make, in place of eager torch's: a stage writes its output
/// packed, whatever strides torch's kernel gave it (an elementwise op of a transposed
/// operand keeps the transpose's strides in torch; here the operand was packed first), so
/// every computed value is packed, and the views of such values get the strides their
/// op makes of the packed value. Where a view cannot be recomputed (a split, select or
/// slice of a value whose layout changed, or a reshape of one left strided), the graph is
/// left as it was. Returns whether it changed.
/// `originals` holds torch's metadata (from before the packs): a value whose layout the
/// packs or this pass changed has its views recomputed.
fn relayout(graph: &mut Graph, originals: &HashMap<String, Meta>) -> bool {
    let index: HashMap<String, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    let mut metas: HashMap<String, Meta> = HashMap::new();
    for n in &graph.nodes {
        let Some(old) = n.val.as_ref() else { continue };
        if n.op != "call_function" {
            metas.insert(n.name.clone(), old.clone());
            continue;
        }
        let t = n.target.as_deref().unwrap_or_default();
        let input = match n.args.first().map(arg) {
            Some(Arg::Node(x)) => metas.get(x).map(|m| (x, m)),
            _ => None,
        };
        // Whether the layout `input` reads changed: its own, or for a part of a split (a
        // tuple, no metadata of its own) the split's input's.
        let changed = match n.args.first().map(arg) {
            Some(Arg::Node(x)) => {
                let mut at = x.to_string();
                loop {
                    if let Some(m) = metas.get(&at) {
                        break originals.get(&at) != Some(m);
                    }
                    let next = index
                        .get(&at)
                        .and_then(|&i| match graph.nodes[i].args.first() {
                            Some(a) => match arg(a) {
                                Arg::Node(y) => Some(y.to_string()),
                                _ => None,
                            },
                            None => None,
                        });
                    match next {
                        Some(y) => at = y,
                        None => break false,
                    }
                }
            }
            _ => false,
        };
        let packed = |shape: &[i64], offset: i64| Meta {
            shape: shape.to_vec(),
            stride: row_major(shape),
            dtype: old.dtype.clone(),
            offset,
        };
        let view = classify(t) == Class::View;
        let new = if t == PACK {
            old.clone()
        } else if views_storage(t) || (view && !changed && input.is_some()) {
            if changed {
                return false;
            }
            old.clone()
        } else if view {
            let Some((_, m)) = input else {
                return false;
            };
            let rank = m.shape.len() as i64;
            let dim = |i: usize| match n.args.get(i) {
                Some(Value::Number(x)) => x
                    .as_i64()
                    .map(|d| if d < 0 { d + rank } else { d } as usize),
                _ => None,
            };
            let mut stride = m.stride.clone();
            let strided = match op_name(t) {
                "transpose" => match (dim(1), dim(2)) {
                    (Some(a), Some(b)) if a < stride.len() && b < stride.len() => {
                        stride.swap(a, b);
                        Some(stride)
                    }
                    _ => None,
                },
                "t" | "numpy_T" => {
                    stride.reverse();
                    Some(stride)
                }
                "mT" if stride.len() >= 2 => {
                    let r = stride.len();
                    stride.swap(r - 2, r - 1);
                    Some(stride)
                }
                "permute" => match n.args.get(1) {
                    Some(Value::Array(ds)) => ds
                        .iter()
                        .map(|d| {
                            let d = d.as_i64()?;
                            let d = if d < 0 { d + rank } else { d } as usize;
                            m.stride.get(d).copied()
                        })
                        .collect::<Option<Vec<i64>>>(),
                    _ => None,
                },
                "alias" | "detach" | "clone" => Some(stride),
                "expand" | "expand_as" => broadcast_strides(m, &old.shape),
                // view, reshape, flatten, unflatten, squeeze, unsqueeze, contiguous: a
                // packed value stays packed.
                _ if contiguous(m) => Some(row_major(&old.shape)),
                _ => None,
            };
            match strided {
                Some(stride) if stride.len() == old.shape.len() => Meta {
                    shape: old.shape.clone(),
                    stride,
                    dtype: old.dtype.clone(),
                    offset: m.offset,
                },
                _ => return false,
            }
        } else {
            // A computed value: packed, as its stage writes it.
            packed(&old.shape, 0)
        };
        metas.insert(n.name.clone(), new);
    }
    let mut changed = false;
    for n in &mut graph.nodes {
        if let (Some(v), Some(m)) = (n.val.as_mut(), metas.remove(&n.name)) {
            if *v != m {
                *v = m;
                changed = true;
            }
        }
    }
    changed
}

/// Names the packs a graph gains, and makes each view's pack once.
struct Packer {
    names: HashSet<String>,
    /// (root, view, shape) -> the pack's name.
    made: HashMap<String, String>,
    packs: usize,
}

fn key(root: &str, spec: &ViewSpec, m: &Meta) -> String {
    format!("{root} {spec:?} {:?}", m.shape)
}

impl Packer {
    /// A node name not in the graph, from `base`.
    fn fresh(&mut self, base: &str) -> String {
        let mut k = 0;
        loop {
            let name = if k == 0 {
                format!("{base}_packed")
            } else {
                format!("{base}_packed_{k}")
            };
            if self.names.insert(name.clone()) {
                return name;
            }
            k += 1;
        }
    }

    /// A transpose of the last two dims of pack `p` (of `m`'s shape), appended to `out`.
    fn transpose(&mut self, out: &mut Vec<Node>, p: &str, m: &Meta) -> String {
        let r = m.shape.len();
        let mut shape = m.shape.clone();
        shape.swap(r - 2, r - 1);
        let mut stride = row_major(&m.shape);
        stride.swap(r - 2, r - 1);
        let name = self.fresh(&format!("{p}_t"));
        out.push(Node {
            name: name.clone(),
            op: "call_function".into(),
            target: Some("aten.transpose.int".into()),
            kind: None,
            args: vec![json!({ "node": p }), json!(-2), json!(-1)],
            kwargs: Default::default(),
            val: Some(Meta {
                shape,
                stride,
                dtype: m.dtype.clone(),
                offset: 0,
            }),
            value: None,
            triangle: None,
        });
        name
    }

    /// The pack of `root`'s view `spec` (shaped as `m`): the one made before, else a new
    /// node appended to `out`, named after `base`.
    fn pack(
        &mut self,
        out: &mut Vec<Node>,
        base: &str,
        root: &str,
        spec: &ViewSpec,
        m: &Meta,
    ) -> String {
        let k = key(root, spec, m);
        if let Some(p) = self.made.get(&k) {
            return p.clone();
        }
        let p = self.fresh(base);
        out.push(pack_node(p.clone(), root, spec, &m.shape, &m.dtype));
        self.packs += 1;
        self.made.insert(k, p.clone());
        p
    }
}

/// Removes the calls whose values nothing reads, directly or through other calls, and
/// the Model does not return (the attention weights nn.MultiheadAttention averages when
/// the caller drops them; the views a pack left unread). The graph is functional (in-place
/// ops were made out of place before), so they change nothing the Model returns.
pub(super) fn dead_code(graph: &mut Graph) {
    let mut out = std::mem::take(&mut graph.nodes);
    loop {
        let mut read: HashSet<String> = HashSet::new();
        for n in &out {
            n.args.iter().chain(n.kwargs.values()).for_each(|v| {
                super::stages::each_ref(v, &mut |x| {
                    read.insert(x.to_string());
                })
            });
        }
        graph.output.iter().for_each(|v| {
            super::stages::each_ref(v, &mut |x| {
                read.insert(x.to_string());
            })
        });
        let before = out.len();
        out.retain(|n| n.op != "call_function" || read.contains(&n.name));
        if out.len() == before {
            break;
        }
    }
    graph.nodes = out;
}

/// What [`super::map_graph`] answers: the spec and the ops it recognized, or why not.
type Mapped = std::result::Result<(WorkloadSpec, Vec<String>), Vec<Unmapped>>;

/// A graph's calls, and its pack when it has exactly one.
fn lone_pack(graph: &Graph) -> Option<(Vec<&Node>, &Node)> {
    let calls: Vec<&Node> = graph
        .nodes
        .iter()
        .filter(|n| n.op == "call_function")
        .collect();
    let mut packs = calls.iter().filter(|n| n.target.as_deref() == Some(PACK));
    let p = *packs.next()?;
    packs.next().is_none().then_some((calls, p))
}

/// A graph (or stage) that is one pack of an input, and the views of it: the activation
/// workload that reads the input through the view; None for any other graph.
pub(super) fn map(graph: &Graph, file: &str) -> Option<Mapped> {
    let (calls, p) = lone_pack(graph)?;
    // Everything else is a view of the pack, and the output is one of them (or it).
    let others_are_views = calls.iter().all(|n| {
        n.target.as_deref() == Some(PACK)
            || classify(n.target.as_deref().unwrap_or_default()) == Class::View
    });
    let out = match graph.output.as_slice() {
        [v] => match arg(v) {
            Arg::Node(o) => Some(o),
            _ => None,
        },
        _ => None,
    }?;
    let meta = p.val.as_ref()?;
    let elements: i64 = meta.shape.iter().product();
    let out_ok = graph
        .nodes
        .iter()
        .find(|n| n.name == out)
        .and_then(|n| n.val.as_ref())
        .is_some_and(|m| contiguous(m) && m.shape.iter().product::<i64>() == elements);
    if !others_are_views || !out_ok {
        return None;
    }
    let problem = |message: String| {
        Some(Err(vec![Unmapped {
            node: p.name.clone(),
            target: PACK.into(),
            message,
        }]))
    };
    let spec: ViewSpec = match p
        .kwargs
        .get("view")
        .map(|v| serde_json::from_value(v.clone()))
    {
        Some(Ok(s)) => s,
        _ => return problem("a pack without its view".into()),
    };
    let Some(dtype) = float(&meta.dtype) else {
        return problem(format!(
            "a copy of a {} view: activations take floats",
            meta.dtype
        ));
    };
    if meta.shape.len() < 2 || meta.shape.len() > crate::spec::chain::MAX_DIMS {
        return problem(format!(
            "a copy of a view of {} dims: 2 to {} are taken",
            meta.shape.len(),
            crate::spec::chain::MAX_DIMS
        ));
    }
    let dims: Vec<i64> = meta.shape.clone();
    let mut shapes = vec![crate::spec::ShapeSpec {
        dims: Some(dims.clone()),
        ..Default::default()
    }];
    // A ragged shape of the same view: the output dims that the selected dims do not
    // size, cut to odd sizes (the held dims keep theirs).
    let small: Vec<i64> = dims
        .iter()
        .map(|&d| if d > 7 { (d % 7) + 3 } else { d })
        .collect();
    if small != dims {
        shapes.push(crate::spec::ShapeSpec {
            dims: Some(small),
            ..Default::default()
        });
    }
    let what = what(&spec);
    Some(Ok((
        WorkloadSpec {
            name: None,
            description: format!(
                "{dtype} copy of {what}, packed as {:?}; imported from {file}",
                dims
            ),
            family: Family::Activation,
            dtype,
            out_dtype: None,
            acc_dtype: None,
            allow_tf32: false,
            layout: None,
            shapes,
            params: Default::default(),
            tolerance: None,
            target: None,
            view: Some(spec),
            epilogue: Vec::new(),
            after: Vec::new(),
            before: Vec::new(),
        },
        vec![format!("{} (a copy of a strided view)", p.name)],
    )))
}

/// What a view is, for descriptions: "a permuted part of a split", "a sliced, broadcast
/// view".
fn what(spec: &ViewSpec) -> String {
    let adjectives: Vec<&str> = [
        (!spec.permute.is_empty(), "permuted"),
        (!spec.narrow.is_empty(), "sliced"),
        (!spec.expand.is_empty(), "broadcast"),
    ]
    .into_iter()
    .filter_map(|(on, a)| on.then_some(a))
    .collect();
    let noun = if spec.select.is_empty() {
        "view"
    } else {
        "part of a split"
    };
    if adjectives.is_empty() {
        format!("a {noun}")
    } else {
        format!("a {} {noun}", adjectives.join(", "))
    }
}

/// A graph (or stage) of one pack of an input and elementwise ops after it: one activation
/// that reads the input through the pack's view and runs the ops as its chain (the copy
/// is not written out). Mapped by `map` (the importer's `map_graph`) with the pack taken
/// out and the input shaped as its result. Only where that input is the one value of the
/// graph that is no parameter (so that it is the activation's A, not an operand), the
/// mapping is an activation with its shapes given as the pack's dims, and the view holds
/// for every shape; None otherwise (the pack is then a stage of its own).
pub(super) fn fused(
    graph: &Graph,
    file: &str,
    map: fn(&Graph, &str) -> Mapped,
) -> Option<(WorkloadSpec, Vec<String>)> {
    let (calls, p) = lone_pack(graph)?;
    let Some(Arg::Node(x)) = p.args.first().map(arg) else {
        return None;
    };
    // The pack's input: an input of the graph that only the pack reads, and the graph's
    // only user input.
    let users: Vec<&Node> = graph
        .nodes
        .iter()
        .filter(|n| n.op == "placeholder" && n.kind.as_deref() == Some("user_input"))
        .collect();
    if users.len() != 1 || users[0].name != x {
        return None;
    }
    let readers = graph
        .nodes
        .iter()
        .filter(|n| super::stages::node_refs(n).iter().any(|r| r == x))
        .count();
    if readers != 1 || calls.len() < 2 {
        return None;
    }
    let spec: ViewSpec = serde_json::from_value(p.kwargs.get("view")?.clone()).ok()?;
    let meta = p.val.clone()?;
    // The input shaped as the pack's result, and read where the pack's result was.
    let rename = |v: &Value| -> Value {
        fn walk(v: &Value, from: &str, to: &str) -> Value {
            match v {
                Value::Array(a) => Value::Array(a.iter().map(|x| walk(x, from, to)).collect()),
                _ => match arg(v) {
                    Arg::Node(n) if n == from => json!({ "node": to }),
                    _ => v.clone(),
                },
            }
        }
        walk(v, &p.name, x)
    };
    let mut g = graph.clone();
    g.nodes.retain(|n| n.name != p.name);
    for n in &mut g.nodes {
        if n.name == x {
            n.val = Some(meta.clone());
        }
        n.args = n.args.iter().map(rename).collect();
        for v in n.kwargs.values_mut() {
            *v = rename(v);
        }
    }
    g.output = g.output.iter().map(rename).collect();
    let (mut w, mut ops) = map(&g, file).ok()?;
    let dims = |sh: &crate::spec::ShapeSpec| sh.dims.clone();
    if w.family != Family::Activation
        || w.view.is_some()
        || !w.before.is_empty()
        || w.shapes.first().and_then(dims).as_deref() != Some(meta.shape.as_slice())
    {
        return None;
    }
    w.description = format!(
        "{} (its input read through a {})",
        w.description,
        what(&spec)
    );
    w.view = Some(spec);
    // The rules hold for it (the view on every shape); the name is the importer's to give.
    crate::spec::Workload::from_spec("fused.toml", w.clone()).ok()?;
    ops.insert(0, format!("{} (a strided view, read in place)", p.name));
    Some((w, ops))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(shape: &[i64], stride: &[i64], offset: i64) -> Meta {
        Meta {
            shape: shape.to_vec(),
            stride: stride.to_vec(),
            dtype: "bfloat16".into(),
            offset,
        }
    }

    #[test]
    fn the_heads_of_a_split_qkv_are_a_held_part_and_a_permute() {
        // qkv [B, T, 3C], k = qkv.split(C, 2)[1].view(B, T, nh, hs).transpose(1, 2).
        let (b, t, nh, hs) = (8i64, 512, 12, 64);
        let c = nh * hs;
        let k = meta(&[b, nh, t, hs], &[t * 3 * c, hs, 3 * c, 1], c);
        let spec = derive(b * t * 3 * c, &k).unwrap();
        assert_eq!(spec.permute, vec![0, 2, 1, 3]);
        assert_eq!(
            spec.select,
            vec![SelectSpec {
                dim: 2,
                size: 3,
                index: 1
            }]
        );
        // y.transpose(1, 2) of a packed [B, nh, T, hs].
        let y = meta(&[b, t, nh, hs], &[nh * t * hs, hs, t * hs, 1], 0);
        let spec = derive(b * t * c, &y).unwrap();
        assert_eq!(spec.permute, vec![0, 2, 1, 3]);
        assert!(spec.select.is_empty());
    }

    /// The view derived for `m` over a packed base of `base` elements, checked against
    /// the metadata: the same strides where an extent is over 1, and the same offset.
    fn derived(base: i64, m: &Meta) -> ViewSpec {
        let spec = derive(base, m).unwrap_or_else(|| panic!("no view for {m:?}"));
        let v = View::new(&spec, m.shape.len()).unwrap();
        let s = v.strided(&m.shape.iter().map(|&d| d as u64).collect::<Vec<_>>());
        assert_eq!(s.offset, m.offset as u64, "{spec:?}");
        assert_eq!(s.input_len, base as u64, "{spec:?}");
        for ((&e, &want), &got) in m.shape.iter().zip(&m.stride).zip(&s.strides) {
            assert!(e == 1 || want as u64 == got, "{spec:?}: {:?}", s.strides);
        }
        spec
    }

    #[test]
    fn slices_and_broadcasts_are_views_and_a_step_is_a_split() {
        let narrow = |dim, size, start| NarrowSpec { dim, size, start };
        // x[:, 10:20] of [4, 64]: the offset starts inside a kept dim.
        let s = derived(256, &meta(&[4, 10], &[64, 1], 10));
        assert_eq!(s.narrow, vec![narrow(1, 64, 10)]);
        assert!(s.select.is_empty() && s.permute.is_empty());
        // NetVLAD's assignment[:, :K] of [N, K + G]: a split would do for K = G only.
        let s = derived(100 * 48, &meta(&[100, 32], &[48, 1], 0));
        assert_eq!(s.narrow, vec![narrow(1, 48, 0)]);
        let s = derived(100 * 64, &meta(&[100, 32], &[64, 1], 32));
        assert_eq!(s.select.len(), 1);
        assert!(s.narrow.is_empty());
        // x.transpose(0, 1)[1:3] of [8, 5]: a slice of a permuted dim.
        let s = derived(40, &meta(&[2, 8], &[1, 5], 1));
        assert_eq!(s.permute, vec![1, 0]);
        assert_eq!(s.narrow, vec![narrow(0, 5, 1)]);
        // x[:, ::2]: a step, a part of a split of the last dim.
        assert!(!derived(256, &meta(&[4, 32], &[64, 2], 0)).select.is_empty());
        // [B, 1, K] broadcast to [B, D, K], and [D, K] to [B, D, K].
        let s = derived(2 * 7, &meta(&[2, 5, 7], &[7, 0, 1], 0));
        assert_eq!(s.expand, vec![1]);
        let s = derived(5 * 7, &meta(&[2, 5, 7], &[0, 7, 1], 0));
        assert_eq!(s.expand, vec![0]);
        // A [B, 1] column broadcast into [1, C, B, 1]: unit dims moved are no permute.
        let s = derived(16, &meta(&[1, 5, 16, 1], &[0, 0, 1, 1], 0));
        assert_eq!((s.permute.clone(), s.expand.clone()), (Vec::new(), vec![1]));
        // A broadcast of a slice.
        let s = derived(4 * 9, &meta(&[4, 3, 6], &[9, 0, 1], 2));
        assert_eq!(
            (s.expand.clone(), s.narrow.clone()),
            (vec![1], vec![narrow(2, 9, 2)])
        );
        // Overlapping strides, and a slice past the storage.
        assert!(derive(64, &meta(&[8, 16], &[4, 1], 0)).is_none());
        assert!(derive(64, &meta(&[4, 10], &[16, 1], 10)).is_none());
    }
}
