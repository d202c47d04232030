//! Triangular masks built in `forward`: `torch.ones(T, T, dtype=torch.bool).triu(1)` (the
//! future a causal attention hides), its negation (`tril(...) == 0`), through dtype
//! copies and unit views; and buffers the tracer marked as such a triangle (minGPT's
//! registered `tril(ones)`), cut by slices that keep the corner. A `masked_fill` by such a mask keeps one side of a diagonal,
//! which the chain's `triu` / `tril` ops state (see [`masked_fill_ops`]); so does adding
//! an additive one, `torch.full((T, T), -inf).triu(1)` (see [`additive_op`]).

use super::{arg, op_name, param, Arg, Mapper, Node};

/// Where a boolean mask is true: `col - row >= d` (upper) or `col - row <= d` (lower).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tri {
    Upper(i64),
    Lower(i64),
}

impl Tri {
    /// Where it is false.
    fn not(self) -> Tri {
        match self {
            Tri::Upper(d) => Tri::Lower(d - 1),
            Tri::Lower(d) => Tri::Upper(d + 1),
        }
    }
}

/// A mask: one triangle, or where either of two is true (a sliding window's
/// `triu(1) | tril(-w)`: the future and the distant past).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mask {
    One(Tri),
    Either(Tri, Tri),
}

impl Mask {
    /// Where it is false, when that is one of these (the negation of an `Either` is where
    /// both are false, which is not).
    fn not(self) -> Option<Mask> {
        match self {
            Mask::One(t) => Some(Mask::One(t.not())),
            Mask::Either(..) => None,
        }
    }
}

/// How many nodes a mask's construction may pass through (views, copies, negations).
const MAX_DEPTH: usize = 64;

/// Whether node `name` is a tensor of one constant `value`, possibly through dtype copies:
/// `full` / `full_like` / `new_full` of it, and for 1 (True: a boolean mask's source)
/// `ones`, `ones_like` and `new_ones` too (another value may be 0 in an integer type).
fn constant<'g>(
    mp: &Mapper<'g>,
    name: &str,
    value: f64,
    nodes: &mut Vec<&'g str>,
    depth: usize,
) -> bool {
    let Some(n) = mp.nodes.get(name).copied() else {
        return false;
    };
    if depth > MAX_DEPTH {
        return false;
    }
    let t = n.target.as_deref().unwrap_or_default();
    // full(size, v), full_like(x, v); new_full(x, size, v).
    let fill =
        |at: usize| matches!(param(n, at, "fill_value").map(arg), Some(Arg::Num(v)) if v == value);
    let ok = match op_name(t) {
        "ones" | "ones_like" | "new_ones" => value == 1.0,
        "full" | "full_like" => fill(1),
        "new_full" => fill(2),
        "_to_copy" | "to" | "clone" | "contiguous" | "alias" => {
            return match n.args.first().map(arg) {
                Some(Arg::Node(x)) => {
                    nodes.push(n.name.as_str());
                    constant(mp, x, value, nodes, depth + 1)
                }
                _ => false,
            };
        }
        _ => false,
    };
    if ok {
        nodes.push(n.name.as_str());
    }
    ok
}

/// An additive mask built in forward: `torch.full((T, T), float("-inf")).triu(1)` (Llama's
/// causal mask, added to the scores), through copies and views that keep the last two dims:
/// where it is -inf (the triangle it keeps), with the nodes that build it.
pub(super) fn additive_triangle<'g>(mp: &Mapper<'g>, name: &str) -> Option<(Tri, Vec<&'g str>)> {
    match triangle_at(mp, name, f64::NEG_INFINITY, 0)? {
        (Mask::One(t), nodes) => Some((t, nodes)),
        _ => None,
    }
}

/// A chain op a mask becomes: `triu` or `tril`, its diagonal, and the fill of the rest.
pub(super) type KeptOp = (&'static str, i64, f64);

/// The chain op keeping triangle `kept`, the rest filled with `fill`.
fn kept_op(kept: Tri, fill: f64) -> KeptOp {
    match kept {
        Tri::Upper(d) => ("triu", d, fill),
        Tri::Lower(d) => ("tril", d, fill),
    }
}

/// The shape of node `name`'s value.
fn shape_of(mp: &Mapper<'_>, name: &str) -> Vec<i64> {
    mp.nodes
        .get(name)
        .and_then(|x| x.val.as_ref())
        .map(|v| v.shape.clone())
        .unwrap_or_default()
}

/// Whether a mask of shape `dims` is one mask for matrices of (m, n) whose leading dims are
/// `x`'s (the value it applies to): its own leading dims of size 1, or `x`'s own (a mask
/// built `_like` the scores: a triangle of constants is the same in every matrix). A mask
/// with a batch of its own would broadcast the output beyond the GEMM's.
fn one_matrix(mp: &Mapper<'_>, dims: &[i64], (m, nn): (i64, i64), x: &str) -> bool {
    let xs = shape_of(mp, x);
    let x_lead = &xs[..xs.len().saturating_sub(2)];
    matches!(dims, [lead @ .., r, c]
        if *r == m && *c == nn && (lead.iter().all(|d| *d == 1) || lead == x_lead))
}

/// `x + mask` by an additive triangle (see [`additive_triangle`]) as chain ops, as
/// [`masked_fill_ops`] gives them: the side it leaves, filled with -inf (name, diagonal,
/// fill); None when `other` is not such a mask; Err(why) when it is one that does not fit
/// x's matrices of (m, n).
pub(super) fn additive_op(
    mp: &Mapper<'_>,
    other: &str,
    (m, nn): (i64, i64),
    x: &str,
) -> Option<Result<Vec<KeptOp>, String>> {
    let (tri, _) = additive_triangle(mp, other)?;
    let dims = shape_of(mp, other);
    if !one_matrix(mp, &dims, (m, nn), x) {
        return Some(Err(format!(
            "an additive mask of shape {dims:?} over matrices of ({m}, {nn}): it must be one \
             mask of the matrices' own shape"
        )));
    }
    Some(Ok(vec![kept_op(tri.not(), f64::NEG_INFINITY)]))
}

/// The last two dims of a node's value.
fn last2(n: &Node) -> Option<(i64, i64)> {
    match n.val.as_ref()?.shape.as_slice() {
        [.., r, c] => Some((*r, *c)),
        _ => None,
    }
}

/// The triangle (or pair of triangles) that mask node `name` is, with the nodes that build
/// it; None when it is not one (anything computed from the inputs, or a shape the views
/// change).
pub(super) fn triangle<'g>(mp: &Mapper<'g>, name: &str) -> Option<(Mask, Vec<&'g str>)> {
    triangle_at(mp, name, 1.0, 0)
}

/// The triangle(s) of a tensor of `value` that node `name` is (1: a boolean mask, which
/// may also be negated or joined by `|`; -inf: an additive one).
fn triangle_at<'g>(
    mp: &Mapper<'g>,
    name: &str,
    value: f64,
    depth: usize,
) -> Option<(Mask, Vec<&'g str>)> {
    if depth > MAX_DEPTH {
        return None;
    }
    let boolean = value == 1.0;
    let n = mp.nodes.get(name).copied()?;
    if n.op == "placeholder" {
        return buffer_triangle(n, value).map(|t| (Mask::One(t), vec![n.name.as_str()]));
    }
    let t = n.target.as_deref().unwrap_or_default();
    let first = match n.args.first().map(arg) {
        Some(Arg::Node(x)) => x,
        _ => return None,
    };
    let (tri, mut nodes) = match op_name(t) {
        "triu" | "tril" => {
            // Within the spec's bound on a diagonal (and clear of i64's ends for `not`).
            let d = match param(n, 1, "diagonal").map(arg) {
                None => 0.0,
                Some(Arg::Num(d)) if d.fract() == 0.0 && d.abs() <= 2f64.powi(62) => d,
                _ => return None,
            };
            let mut nodes = Vec::new();
            if !constant(mp, first, value, &mut nodes, depth + 1) {
                return None;
            }
            let d = d as i64;
            (
                Mask::One(if op_name(t) == "triu" {
                    Tri::Upper(d)
                } else {
                    Tri::Lower(d)
                }),
                nodes,
            )
        }
        // Either of two triangles (`|` of bools: aten.__or__ as torch.export writes it).
        "logical_or" | "bitwise_or" | "__or__" if boolean => {
            if op_name(t) != "logical_or"
                && n.val.as_ref().map(|v| v.dtype.as_str()) != Some("bool")
            {
                return None;
            }
            let Some(Arg::Node(second)) = param(n, 1, "other").map(arg) else {
                return None;
            };
            let (a, mut nodes) = triangle_at(mp, first, value, depth + 1)?;
            let (b, more) = triangle_at(mp, second, value, depth + 1)?;
            let (Mask::One(a), Mask::One(b)) = (a, b) else {
                return None;
            };
            nodes.extend(more);
            (Mask::Either(a, b), nodes)
        }
        // == 0 (or False), logical not, bitwise not of a bool (of an integer, ~1 is -2):
        // the other side.
        "eq" | "logical_not" | "bitwise_not" if boolean => {
            if op_name(t) == "eq"
                && !matches!(param(n, 1, "other").map(arg), Some(Arg::Num(v)) if v == 0.0)
            {
                return None;
            }
            if op_name(t) == "bitwise_not"
                && n.val.as_ref().map(|v| v.dtype.as_str()) != Some("bool")
            {
                return None;
            }
            let (mask, nodes) = triangle_at(mp, first, value, depth + 1)?;
            (mask.not()?, nodes)
        }
        // != 0: itself.
        "ne" if boolean
            && matches!(param(n, 1, "other").map(arg), Some(Arg::Num(v)) if v == 0.0) =>
        {
            triangle_at(mp, first, value, depth + 1)?
        }
        // A slice that keeps the triangle's corner: any slice of a leading dim, and of the
        // last two only from 0 in steps of 1 (a registered T x T mask cut to the sequence:
        // `bias[:, :, :T, :T]`).
        "slice" => {
            let rank = shape_of(mp, first).len() as i64;
            let dim = match param(n, 1, "dim").map(arg) {
                None => 0,
                Some(Arg::Num(d)) if d.fract() == 0.0 => d as i64,
                _ => return None,
            };
            let dim = if dim < 0 { dim + rank } else { dim };
            let from_zero = matches!(param(n, 2, "start").map(arg), None | Some(Arg::Num(0.0)));
            let unit_step = matches!(param(n, 4, "step").map(arg), None | Some(Arg::Num(1.0)));
            if !(0..rank).contains(&dim) || (dim >= rank - 2 && !(from_zero && unit_step)) {
                return None;
            }
            triangle_at(mp, first, value, depth + 1)?
        }
        // Copies, and views that keep the last two dims (leading unit dims added).
        "_to_copy" | "to" | "clone" | "contiguous" | "alias" | "detach" | "unsqueeze" | "view"
        | "reshape" | "_unsafe_view" | "expand" => {
            let src = mp.nodes.get(first).copied()?;
            if last2(src)? != last2(n)? {
                return None;
            }
            triangle_at(mp, first, value, depth + 1)?
        }
        _ => return None,
    };
    nodes.push(n.name.as_str());
    Some((tri, nodes))
}

/// A buffer the tracer marked as the `tril` / `triu` of a tensor of `value` (see the
/// Node's `triangle`): where it holds `value`.
fn buffer_triangle(n: &Node, value: f64) -> Option<Tri> {
    if n.kind.as_deref() != Some("buffer") {
        return None;
    }
    let t = n.triangle.as_ref()?.as_array()?;
    let (Some(op), Some(Arg::Num(d)), Some(Arg::Num(fill))) = (
        t.first().and_then(|v| v.as_str()),
        t.get(1).map(arg),
        t.get(2).map(arg),
    ) else {
        return None;
    };
    if fill != value || d.fract() != 0.0 || d.abs() > 2f64.powi(62) {
        return None;
    }
    match op {
        "triu" => Some(Tri::Upper(d as i64)),
        "tril" => Some(Tri::Lower(d as i64)),
        _ => None,
    }
}

/// The nodes that build the triangular masks of the graph's `masked_fill`s (`calls`):
/// known, though no chain reads them.
pub(super) fn mask_nodes<'g>(mp: &Mapper<'g>, calls: &[&'g Node]) -> Vec<&'g str> {
    let mut out: Vec<&'g str> = calls
        .iter()
        .filter(|n| op_name(n.target.as_deref().unwrap_or_default()) == "masked_fill")
        .filter_map(|n| match param(n, 1, "mask").map(arg) {
            Some(Arg::Node(m)) => triangle(mp, m).map(|(_, nodes)| nodes),
            _ => None,
        })
        .flatten()
        .collect();
    // The additive ones an add reads (either operand).
    for n in calls
        .iter()
        .filter(|n| op_name(n.target.as_deref().unwrap_or_default()) == "add")
    {
        for a in n.args.iter().take(2) {
            if let Arg::Node(x) = arg(a) {
                if let Some((_, nodes)) = additive_triangle(mp, x) {
                    out.extend(nodes);
                }
            }
        }
    }
    out
}

/// `masked_fill(x, mask, value)` by a triangular mask as chain ops: the `tril` or `triu` of
/// the side the mask leaves (two for a pair of triangles: the band between them), each
/// filling with `value` (name, diagonal, fill); else why not.
pub(super) fn masked_fill_ops(
    mp: &Mapper<'_>,
    n: &Node,
    (m, nn): (i64, i64),
) -> Result<Vec<KeptOp>, String> {
    let Some(Arg::Node(mask)) = param(n, 1, "mask").map(arg) else {
        return Err("masked_fill without a mask tensor".into());
    };
    let Some((kind, _)) = triangle(mp, mask) else {
        return Err(format!(
            "masked_fill by `{mask}`, computed in forward: a mask maps when it is an input, \
             parameter or buffer itself, a triangle of a constant matrix built in forward \
             (torch.ones(T, T, dtype=torch.bool).triu(1), or tril(...) == 0), a buffer built \
             in __init__ as such a triangle (cut from 0 on its last two dims: bias[:, :, :T, \
             :T] == 0), or two triangles joined by | (a sliding window)"
        ));
    };
    let dims = shape_of(mp, mask);
    let Some(Arg::Node(x)) = n.args.first().map(arg) else {
        return Err("masked_fill of something that is not a tensor".into());
    };
    if !one_matrix(mp, &dims, (m, nn), x) {
        return Err(format!(
            "masked_fill by a mask of shape {dims:?} over matrices of ({m}, {nn}): it must be \
             one mask of the matrices' own shape"
        ));
    }
    let fill = match param(n, 2, "value").map(arg) {
        Some(Arg::Num(v)) if !v.is_nan() => v,
        _ => return Err("masked_fill with a value that is not a number".into()),
    };
    Ok(match kind {
        Mask::One(t) => vec![kept_op(t.not(), fill)],
        Mask::Either(a, b) => vec![kept_op(a.not(), fill), kept_op(b.not(), fill)],
    })
}
