//! An activation-family input read through a view: the output is a permutation of the
//! dims of a packed input, some of whose dims are held at one index, some read in part
//! and some broadcast (`[view]`). This is what torch's `x.permute(...)`,
//! `x.transpose(a, b).contiguous()`, a tensor split into equal parts (`qkv.split(C, dim=2)`
//! then `.view(B, T, nh, hs).transpose(1, 2)`), a slice inside a dim (`x[:, :k]`,
//! `x.narrow(1, s, k)`) and a broadcast (`x.expand(...)`, or the size-1 dim of the value an
//! elementwise op broadcasts) read; the workload writes the view packed (row-major),
//! through the chain if it has one.
//!
//! Shapes give the output's dims. The input's dims follow: the output's dims put back in
//! the input's order (the inverse of `permute`), a narrowed dim at its input `size`, a
//! broadcast one at size 1, with each selected dim (of its `size`) inserted where it was.
//! The input is packed row-major; output dim t reads input dim `permute[t]` of those left
//! after the selects, from `start` where it is narrowed, always at 0 where it is broadcast.

use serde::{Deserialize, Serialize};

use super::chain::MAX_DIMS;

/// Input dims at most (the output's plus the selected ones).
pub const MAX_INPUT_DIMS: usize = 8;

/// `[view]` as written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ViewSpec {
    /// Output dim t is the input's dim `permute[t]` (counted without the selected dims);
    /// default the identity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub permute: Vec<u32>,
    /// Input dims held at one index, dropped from the output (a split's part).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub select: Vec<SelectSpec>,
    /// Output dims read in part: a slice of their input dim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub narrow: Vec<NarrowSpec>,
    /// Output dims broadcast from an input dim of size 1 (stride 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expand: Vec<u32>,
}

/// One `[[view.narrow]]` entry: output dim `dim` reads elements `start..start + extent`
/// of its input dim, which has `size` elements (`x[:, start:start + extent]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NarrowSpec {
    pub dim: u32,
    pub size: u64,
    pub start: u64,
}

/// One `[[view.select]]` entry: input dim `dim` (counted among all the input's dims), of
/// `size` elements, held at `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SelectSpec {
    pub dim: u32,
    pub size: u64,
    pub index: u64,
}

/// A validated view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// Output dim t reads kept input dim `permute[t]`.
    permute: Vec<usize>,
    /// (input dim, size, index), by increasing dim.
    select: Vec<(usize, u64, u64)>,
    /// (output dim, input size, start), by increasing dim.
    narrow: Vec<(usize, u64, u64)>,
    /// Broadcast output dims, increasing.
    expand: Vec<usize>,
}

/// The strided read of one shape: for each output dim its stride in the input, the
/// offset of element 0, and how many elements the input holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strided {
    pub extents: Vec<u64>,
    pub strides: Vec<u64>,
    pub offset: u64,
    pub input_len: u64,
    /// Distinct input elements read (fewer than the output's where a dim is broadcast).
    pub reads: u64,
}

impl Strided {
    /// The input index of the output's element at row-major position `i`.
    pub fn source(&self, mut i: u64) -> u64 {
        let mut at = self.offset;
        for (&e, &s) in self.extents.iter().zip(&self.strides).rev() {
            let e = e.max(1);
            at += (i % e) * s;
            i /= e;
        }
        at
    }
}

impl View {
    /// Checks `spec` against an output rank; the error names the field.
    pub fn new(spec: &ViewSpec, out_rank: usize) -> Result<View, (String, String)> {
        let rank_in = out_rank + spec.select.len();
        if out_rank > MAX_DIMS || rank_in > MAX_INPUT_DIMS {
            return Err((
                "view.select".into(),
                format!(
                    "{out_rank} output dims and {} selected: at most {MAX_DIMS} output dims \
                     and {MAX_INPUT_DIMS} input dims",
                    spec.select.len()
                ),
            ));
        }
        let permute: Vec<usize> = if spec.permute.is_empty() {
            (0..out_rank).collect()
        } else {
            spec.permute.iter().map(|&p| p as usize).collect()
        };
        let mut seen = vec![false; out_rank];
        if permute.len() != out_rank
            || permute
                .iter()
                .any(|&p| p >= out_rank || std::mem::replace(&mut seen[p], true))
        {
            return Err((
                "view.permute".into(),
                format!(
                    "{:?} is not a permutation of 0..{out_rank} (the shapes' dims: one entry \
                     per output dim, naming the input dim it reads, selected dims not counted)",
                    spec.permute
                ),
            ));
        }
        let mut select: Vec<(usize, u64, u64)> = Vec::new();
        for (i, s) in spec.select.iter().enumerate() {
            let d = s.dim as usize;
            if d >= rank_in || select.iter().any(|x| x.0 == d) {
                return Err((
                    format!("view.select[{i}].dim"),
                    format!(
                        "{d}: each selected dim once, below the input's {rank_in} dims (the \
                         output's {out_rank} and the {} selected)",
                        spec.select.len()
                    ),
                ));
            }
            if s.size == 0 || s.index >= s.size {
                return Err((
                    format!("view.select[{i}].index"),
                    format!("{} is not an index of a dim of size {}", s.index, s.size),
                ));
            }
            select.push((d, s.size, s.index));
        }
        select.sort_unstable();
        let mut narrow: Vec<(usize, u64, u64)> = Vec::new();
        for (i, x) in spec.narrow.iter().enumerate() {
            let d = x.dim as usize;
            if d >= out_rank || narrow.iter().any(|n| n.0 == d) {
                return Err((
                    format!("view.narrow[{i}].dim"),
                    format!(
                        "{d}: each narrowed dim once, an output dim below {out_rank} (the \
                         shapes' dims)"
                    ),
                ));
            }
            if x.size == 0 || x.start >= x.size {
                return Err((
                    format!("view.narrow[{i}].start"),
                    format!("{} is not an index of a dim of size {}", x.start, x.size),
                ));
            }
            narrow.push((d, x.size, x.start));
        }
        narrow.sort_unstable();
        let mut expand: Vec<usize> = Vec::new();
        for (i, &d) in spec.expand.iter().enumerate() {
            let d = d as usize;
            if d >= out_rank || expand.contains(&d) || narrow.iter().any(|n| n.0 == d) {
                return Err((
                    format!("view.expand[{i}]"),
                    format!(
                        "{d}: each broadcast dim once, an output dim below {out_rank} that is \
                         not narrowed"
                    ),
                ));
            }
            expand.push(d);
        }
        expand.sort_unstable();
        if permute.iter().enumerate().all(|(t, &p)| t == p)
            && select.is_empty()
            && narrow.is_empty()
            && expand.is_empty()
        {
            return Err((
                "view".into(),
                "reads the input as it is (no permute, select, narrow or expand): leave \
                 [view] out"
                    .into(),
            ));
        }
        Ok(View {
            permute,
            select,
            narrow,
            expand,
        })
    }

    /// Checks output dims `out` against the narrowed dims: each slice within its input
    /// dim. The error names the field.
    pub fn check_dims(&self, out: &[u64]) -> Result<(), (String, String)> {
        for (i, &(d, size, start)) in self.narrow.iter().enumerate() {
            let e = out.get(d).copied().unwrap_or(1);
            if start.saturating_add(e) > size {
                return Err((
                    format!("view.narrow[{i}]"),
                    format!(
                        "output dim {d} of {e} elements from {start} runs past its input \
                         dim of {size}"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The spec it was made from.
    pub fn spec(&self) -> ViewSpec {
        let identity = self.permute.iter().enumerate().all(|(t, &p)| t == p);
        ViewSpec {
            permute: if identity {
                Vec::new()
            } else {
                self.permute.iter().map(|&p| p as u32).collect()
            },
            select: self
                .select
                .iter()
                .map(|&(dim, size, index)| SelectSpec {
                    dim: dim as u32,
                    size,
                    index,
                })
                .collect(),
            narrow: self
                .narrow
                .iter()
                .map(|&(dim, size, start)| NarrowSpec {
                    dim: dim as u32,
                    size,
                    start,
                })
                .collect(),
            expand: self.expand.iter().map(|&d| d as u32).collect(),
        }
    }

    /// Output dim t's extent in the input: its narrowed size, 1 where broadcast, else its
    /// own.
    fn input_extent(&self, t: usize, e: u64) -> u64 {
        if self.expand.contains(&t) {
            return 1;
        }
        self.narrow
            .iter()
            .find(|n| n.0 == t)
            .map_or(e, |&(_, size, _)| size)
    }

    /// The input's dims for output dims `out` (packed, row-major).
    pub fn input_dims(&self, out: &[u64]) -> Vec<u64> {
        let mut kept = vec![0u64; out.len()];
        for (t, &p) in self.permute.iter().enumerate() {
            if let (Some(k), Some(&e)) = (kept.get_mut(p), out.get(t)) {
                *k = self.input_extent(t, e);
            }
        }
        let mut dims = Vec::with_capacity(out.len() + self.select.len());
        let mut kept = kept.into_iter();
        let rank = out.len() + self.select.len();
        for d in 0..rank {
            match self.select.iter().find(|s| s.0 == d) {
                Some(&(_, size, _)) => dims.push(size),
                None => dims.push(kept.next().unwrap_or(1)),
            }
        }
        dims
    }

    /// The strided read of output dims `out`.
    pub fn strided(&self, out: &[u64]) -> Strided {
        let dims = self.input_dims(out);
        let mut stride = vec![1u64; dims.len()];
        for d in (0..dims.len().saturating_sub(1)).rev() {
            stride[d] = stride[d + 1].saturating_mul(dims[d + 1]);
        }
        let kept: Vec<usize> = (0..dims.len())
            .filter(|d| self.select.iter().all(|s| s.0 != *d))
            .collect();
        let strides: Vec<u64> = self
            .permute
            .iter()
            .enumerate()
            .map(|(t, &p)| {
                if self.expand.contains(&t) {
                    0
                } else {
                    kept.get(p).map_or(0, |&d| stride[d])
                }
            })
            .collect();
        let offset = self
            .select
            .iter()
            .map(|&(d, _, index)| index * stride[d])
            .chain(
                self.narrow
                    .iter()
                    .map(|&(t, _, start)| start * strides.get(t).copied().unwrap_or(0)),
            )
            .sum();
        let reads = out
            .iter()
            .enumerate()
            .filter(|(t, _)| !self.expand.contains(t))
            .map(|(_, &e)| e)
            .product();
        Strided {
            extents: out.to_vec(),
            strides,
            offset,
            input_len: dims.iter().product(),
            reads,
        }
    }

    /// One line for listings and prompts: `input [B, T, 3, nh, hs] -> select dim 2 = 0 ->
    /// permute [0, 2, 1, 3]`.
    pub fn describe(&self, out: &[u64]) -> String {
        let mut s = format!("A is packed with dims {:?}", self.input_dims(out));
        for &(d, _, i) in &self.select {
            s.push_str(&format!(", dim {d} held at {i}"));
        }
        for &(t, size, start) in &self.narrow {
            let e = out.get(t).copied().unwrap_or(1);
            s.push_str(&format!(
                ", output dim {t} reads elements {start}..{} of its {size}",
                start + e
            ));
        }
        for &t in &self.expand {
            s.push_str(&format!(", output dim {t} broadcast from size 1"));
        }
        if self.permute.iter().enumerate().any(|(t, &p)| t != p) {
            s.push_str(&format!(
                ", the rest permuted by {:?} (output dim t is their dim permute[t])",
                self.permute
            ));
        }
        s.push_str(&format!("; D is that view {out:?}, packed row-major"));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(permute: &[u32], select: &[(u32, u64, u64)]) -> ViewSpec {
        ViewSpec {
            permute: permute.to_vec(),
            select: select
                .iter()
                .map(|&(dim, size, index)| SelectSpec { dim, size, index })
                .collect(),
            ..Default::default()
        }
    }

    fn view(permute: &[u32], select: &[(u32, u64, u64)]) -> View {
        View::new(&spec(permute, select), permute.len()).unwrap()
    }

    /// Each output element's input index from its coordinates, as torch's permute,
    /// select, slice and expand of a packed tensor define it (no strides involved).
    fn brute(v: &View, out: &[u64]) -> Vec<u64> {
        let dims = v.input_dims(out);
        let total: u64 = out.iter().product();
        let kept: Vec<usize> = (0..dims.len())
            .filter(|d| v.select.iter().all(|s| s.0 != *d))
            .collect();
        (0..total)
            .map(|o| {
                let mut c_out = vec![0u64; out.len()];
                let mut r = o;
                for t in (0..out.len()).rev() {
                    c_out[t] = r % out[t];
                    r /= out[t];
                }
                let mut c = vec![0u64; dims.len()];
                for &(d, _, i) in &v.select {
                    c[d] = i;
                }
                for (t, &p) in v.permute.iter().enumerate() {
                    let start = v.narrow.iter().find(|n| n.0 == t).map_or(0, |n| n.2);
                    c[kept[p]] = if v.expand.contains(&t) {
                        0
                    } else {
                        c_out[t] + start
                    };
                }
                c.iter().zip(&dims).fold(0, |acc, (&x, &d)| {
                    assert!(x < d, "coordinate {x} outside a dim of {d}");
                    acc * d + x
                })
            })
            .collect()
    }

    fn sources(s: &Strided) -> Vec<u64> {
        let total: u64 = s.extents.iter().product();
        (0..total).map(|i| s.source(i)).collect()
    }

    /// A view of `rank` output dims permuted, with (dim, size, start) slices and broadcast
    /// dims.
    fn sliced(permute: &[u32], narrow: &[(u32, u64, u64)], expand: &[u32], rank: usize) -> View {
        let spec = ViewSpec {
            permute: permute.to_vec(),
            narrow: narrow
                .iter()
                .map(|&(dim, size, start)| NarrowSpec { dim, size, start })
                .collect(),
            expand: expand.to_vec(),
            ..Default::default()
        };
        View::new(&spec, rank).unwrap()
    }

    #[test]
    fn a_slice_and_a_broadcast_read_what_torch_names() {
        // NetVLAD without its ghost clusters: x[:, :32] of [N, 48].
        let v = sliced(&[], &[(1, 48, 0)], &[], 2);
        let s = v.strided(&[5, 32]);
        assert_eq!(v.input_dims(&[5, 32]), vec![5, 48]);
        assert_eq!(
            (s.strides.clone(), s.offset, s.input_len),
            (vec![48, 1], 0, 240)
        );
        assert_eq!(sources(&s), brute(&v, &[5, 32]));
        // A window inside the last dim of a transposed input: x.transpose(0, 1)[:, 3:10].
        let v = sliced(&[1, 0], &[(1, 12, 3)], &[], 2);
        let s = v.strided(&[4, 7]);
        assert_eq!(v.input_dims(&[4, 7]), vec![12, 4]);
        assert_eq!(s.offset, 3 * 4);
        assert_eq!(sources(&s), brute(&v, &[4, 7]));
        assert!(v.check_dims(&[4, 9]).is_ok());
        assert_eq!(v.check_dims(&[4, 10]).unwrap_err().0, "view.narrow[0]");
        // [B, 1, K] broadcast to [B, D, K] (a_sum * clusters2), and a split's part
        // broadcast too.
        let v = sliced(&[], &[], &[1], 3);
        let s = v.strided(&[2, 3, 4]);
        assert_eq!(v.input_dims(&[2, 3, 4]), vec![2, 1, 4]);
        assert_eq!(s.strides, vec![4, 0, 1]);
        assert_eq!((s.input_len, s.reads), (8, 8));
        assert_eq!(sources(&s), brute(&v, &[2, 3, 4]));
        let v = View::new(
            &ViewSpec {
                permute: vec![1, 0, 2],
                select: vec![SelectSpec {
                    dim: 0,
                    size: 2,
                    index: 1,
                }],
                expand: vec![2],
                narrow: vec![NarrowSpec {
                    dim: 0,
                    size: 9,
                    start: 2,
                }],
            },
            3,
        )
        .unwrap();
        let out = [5, 3, 6];
        let s = v.strided(&out);
        assert_eq!(v.input_dims(&out), vec![2, 3, 9, 1]);
        assert_eq!(s.reads, 15);
        assert_eq!(sources(&s), brute(&v, &out));
        // It round-trips through its spec.
        assert_eq!(View::new(&v.spec(), 3).unwrap(), v);
    }

    #[test]
    fn a_split_heads_view_reads_the_part_and_the_heads_transposed() {
        // q of minGPT: qkv [B, T, 3C] as [B, T, 3, nh, hs], part 1 (k), heads before T.
        let (b, t, nh, hs) = (2u64, 5, 3, 4);
        let v = view(&[0, 2, 1, 3], &[(2, 3, 1)]);
        let out = [b, nh, t, hs];
        assert_eq!(v.input_dims(&out), vec![b, t, 3, nh, hs]);
        let s = v.strided(&out);
        let c = 3 * nh * hs;
        assert_eq!(s.strides, vec![t * c, hs, c, 1]);
        assert_eq!(s.offset, nh * hs);
        assert_eq!(s.input_len, b * t * c);
        let want = brute(&v, &out);
        let got: Vec<u64> = (0..want.len() as u64).map(|i| s.source(i)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_transpose_back_and_a_plain_2d_transpose_match_brute_force() {
        for (perm, out) in [
            (vec![0u32, 2, 1, 3], vec![2u64, 5, 3, 4]),
            (vec![1, 0], vec![7, 3]),
            (vec![2, 0, 1], vec![3, 4, 5]),
        ] {
            let v = view(&perm, &[]);
            let s = v.strided(&out);
            let want = brute(&v, &out);
            let got: Vec<u64> = (0..want.len() as u64).map(|i| s.source(i)).collect();
            assert_eq!(got, want, "permute {perm:?} of {out:?}");
        }
    }

    #[test]
    fn bad_views_name_their_field() {
        let bad = |permute: &[u32], select: &[(u32, u64, u64)], rank: usize| {
            View::new(&spec(permute, select), rank).unwrap_err().0
        };
        assert_eq!(bad(&[0, 0], &[], 2), "view.permute");
        assert_eq!(bad(&[0, 2], &[], 2), "view.permute");
        assert_eq!(bad(&[1, 0, 2], &[], 2), "view.permute");
        assert_eq!(bad(&[1, 0], &[(3, 2, 0)], 2), "view.select[0].dim");
        assert_eq!(bad(&[1, 0], &[(0, 2, 2)], 2), "view.select[0].index");
        assert_eq!(bad(&[0, 1], &[], 2), "view");
        // The identity permutation with a select is a view (a split's part).
        assert!(View::new(&spec(&[], &[(0, 2, 1)]), 2).is_ok());
        let with = |narrow: Vec<NarrowSpec>, expand: Vec<u32>| {
            let s = ViewSpec {
                narrow,
                expand,
                ..Default::default()
            };
            View::new(&s, 2).map(|_| ()).map_err(|e| e.0)
        };
        let n = |dim, size, start| NarrowSpec { dim, size, start };
        assert_eq!(
            with(vec![n(2, 4, 0)], vec![]).unwrap_err(),
            "view.narrow[0].dim"
        );
        assert_eq!(
            with(vec![n(1, 4, 4)], vec![]).unwrap_err(),
            "view.narrow[0].start"
        );
        assert_eq!(with(vec![], vec![2]).unwrap_err(), "view.expand[0]");
        assert_eq!(
            with(vec![n(1, 4, 0)], vec![1]).unwrap_err(),
            "view.expand[0]"
        );
        assert!(with(vec![n(1, 4, 1)], vec![0]).is_ok());
    }
}
