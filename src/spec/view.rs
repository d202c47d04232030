//! An activation-family input read through a view: the output is a permutation of the
//! dims of a packed input, some of whose dims are held at one index (`[view]`). This is
//! what torch's `x.permute(...)`, `x.transpose(a, b).contiguous()` and a tensor split into
//! equal parts (`qkv.split(C, dim=2)` then `.view(B, T, nh, hs).transpose(1, 2)`) read;
//! the workload writes the view packed (row-major), through the chain if it has one.
//!
//! Shapes give the output's dims. The input's dims follow: the output's dims put back in
//! the input's order (the inverse of `permute`), with each selected dim (of its `size`)
//! inserted where it was. The input is packed row-major; output dim t reads input dim
//! `permute[t]` of those left after the selects.

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
}

/// The strided read of one shape: for each output dim its stride in the input, the
/// offset of element 0, and how many elements the input holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strided {
    pub extents: Vec<u64>,
    pub strides: Vec<u64>,
    pub offset: u64,
    pub input_len: u64,
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
        if permute.iter().enumerate().all(|(t, &p)| t == p) && select.is_empty() {
            return Err((
                "view".into(),
                "reads the input as it is (no permute, no select): leave [view] out".into(),
            ));
        }
        Ok(View { permute, select })
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
        }
    }

    /// The input's dims for output dims `out` (packed, row-major).
    pub fn input_dims(&self, out: &[u64]) -> Vec<u64> {
        let mut kept = vec![0u64; out.len()];
        for (t, &p) in self.permute.iter().enumerate() {
            if let (Some(k), Some(&e)) = (kept.get_mut(p), out.get(t)) {
                *k = e;
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
        let strides = self
            .permute
            .iter()
            .map(|&p| kept.get(p).map_or(0, |&d| stride[d]))
            .collect();
        let offset = self
            .select
            .iter()
            .map(|&(d, _, index)| index * stride[d])
            .sum();
        Strided {
            extents: out.to_vec(),
            strides,
            offset,
            input_len: dims.iter().product(),
        }
    }

    /// One line for listings and prompts: `input [B, T, 3, nh, hs] -> select dim 2 = 0 ->
    /// permute [0, 2, 1, 3]`.
    pub fn describe(&self, out: &[u64]) -> String {
        let mut s = format!("A is packed with dims {:?}", self.input_dims(out));
        for &(d, _, i) in &self.select {
            s.push_str(&format!(", dim {d} held at {i}"));
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
        }
    }

    fn view(permute: &[u32], select: &[(u32, u64, u64)]) -> View {
        View::new(&spec(permute, select), permute.len()).unwrap()
    }

    /// Each output element, by brute force over the input's coordinates: the element the
    /// view names, as torch's permute / select of a packed tensor reads it.
    fn brute(v: &View, out: &[u64]) -> Vec<u64> {
        let dims = v.input_dims(out);
        let total: u64 = dims.iter().product();
        let mut got = vec![u64::MAX; out.iter().product::<u64>() as usize];
        for idx in 0..total {
            // input coordinates
            let mut c = vec![0u64; dims.len()];
            let mut r = idx;
            for d in (0..dims.len()).rev() {
                c[d] = r % dims[d];
                r /= dims[d];
            }
            if v.select.iter().any(|&(d, _, i)| c[d] != i) {
                continue;
            }
            let kept: Vec<u64> = (0..dims.len())
                .filter(|d| v.select.iter().all(|s| s.0 != *d))
                .map(|d| c[d])
                .collect();
            let oc: Vec<u64> = v.permute.iter().map(|&p| kept[p]).collect();
            let mut o = 0;
            for (t, &x) in oc.iter().enumerate() {
                o = o * out[t] + x;
            }
            got[o as usize] = idx;
        }
        got
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
        assert!(want.iter().all(|&x| x != u64::MAX));
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
    }
}
