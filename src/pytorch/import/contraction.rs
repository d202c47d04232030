//! Matrix products written with more dimensions than a GEMM has: `torch.einsum` of two
//! operands (`"bijl,lk->bijk"`, `"bhqd,bhkd->bhqk"`) and `matmul` / `bmm` with several
//! batch dimensions (attention's `q @ k.transpose(-2, -1)` on `(b, h, s, d)` tensors).
//!
//! Every dimension gets a letter and a role: a batch letter is in both operands and the
//! output, an M letter only in the first operand and the output, an N letter only in the
//! second and the output, a K letter in both operands and not the output. The product is
//! one batched GEMM when each role's dimensions flatten into one (their strides nest, as
//! a reshape without a copy would need) and the output is the batch dims, then one
//! operand's free dims, then the other's, stored packed. Anything else is refused with the
//! reason.

use super::{layout_2d, Arg, GemmDims, Mapper, Meta, Node};
use crate::spec::DType;

/// One dimension of an operand: its letter, size and stride (0 where the operand is
/// broadcast along it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dim {
    pub letter: char,
    pub size: i64,
    pub stride: i64,
}

/// The dims of `meta` lettered by `letters`.
fn dims_of(meta: &Meta, letters: &[char]) -> Vec<Dim> {
    letters
        .iter()
        .zip(meta.shape.iter().zip(&meta.stride))
        .map(|(&letter, (&size, &stride))| Dim {
            letter,
            size,
            stride,
        })
        .collect()
}

/// Dims flattened into one, in the order given: (size, stride), stride 0 when every
/// dim of more than one element has stride 0 (broadcast), or None when they do not nest
/// (no reshape without a copy makes them one dim).
pub(super) fn flatten(dims: &[Dim]) -> Option<(i64, i64)> {
    let size = dims.iter().map(|d| d.size).product();
    let live: Vec<&Dim> = dims.iter().filter(|d| d.size != 1).collect();
    if live.iter().all(|d| d.stride == 0) {
        return Some((size, 0));
    }
    for w in live.windows(2) {
        if w[0].stride != w[1].stride * w[1].size {
            return None;
        }
    }
    Some((size, live.last().map_or(0, |d| d.stride)))
}

/// An einsum equation's letters: the first operand's, the second's, the output's.
pub(super) type Equation = (Vec<char>, Vec<char>, Vec<char>);

/// The parts of an einsum equation: two operands' letters and the output's.
pub(super) fn parse_equation(eq: &str) -> Result<Equation, String> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    if eq.contains("...") {
        return Err("an ellipsis (`...`) in the equation: write every dimension".into());
    }
    let Some((lhs, out)) = eq.split_once("->") else {
        return Err(format!(
            "`{eq}` has no `->`: write the output's dimensions explicitly"
        ));
    };
    let ins: Vec<&str> = lhs.split(',').collect();
    let [a, b] = ins.as_slice() else {
        return Err(format!("`{eq}` has {} operands; a GEMM has two", ins.len()));
    };
    let letters = |s: &str| -> Result<Vec<char>, String> {
        let v: Vec<char> = s.chars().collect();
        if let Some(c) = v.iter().find(|c| !c.is_ascii_alphabetic()) {
            return Err(format!("`{c}` in `{eq}` is not a dimension letter"));
        }
        for (i, c) in v.iter().enumerate() {
            if v[..i].contains(c) {
                return Err(format!(
                    "`{c}` appears twice in `{s}` (a diagonal): not a matrix product"
                ));
            }
        }
        Ok(v)
    };
    Ok((letters(a)?, letters(b)?, letters(out)?))
}

impl<'g> Mapper<'g> {
    /// `torch.einsum(eq, a, b)` as one batched GEMM.
    pub(super) fn einsum(&mut self, core: &'g Node) -> Option<GemmDims> {
        let eq = core.args.first().and_then(|v| v.as_str());
        let operands: Vec<&str> = match core.args.get(1).and_then(|v| v.as_array()) {
            Some(list) => list
                .iter()
                .filter_map(|v| match super::arg(v) {
                    Arg::Node(n) => Some(n),
                    _ => None,
                })
                .collect(),
            None => Vec::new(),
        };
        let (Some(eq), [an, bn]) = (eq, operands.as_slice()) else {
            self.problem(
                core,
                "einsum that is not an equation over two tensors of the graph",
            );
            return None;
        };
        let (la, lb, lo) = match parse_equation(eq) {
            Ok(p) => p,
            Err(e) => {
                self.problem(core, e);
                return None;
            }
        };
        let (an, bn) = (*an, *bn);
        let am = self.meta(an).cloned()?;
        let bm = self.meta(bn).cloned()?;
        if am.shape.len() != la.len() || bm.shape.len() != lb.len() {
            self.problem(
                core,
                format!(
                    "`{eq}` names {} and {} dims; the operands have {} and {}",
                    la.len(),
                    lb.len(),
                    am.shape.len(),
                    bm.shape.len()
                ),
            );
            return None;
        }
        let dtype = self.gemm_dtype(core, &am, &bm)?;
        let a = (an, dims_of(&am, &la));
        let b = (bn, dims_of(&bm, &lb));
        self.contraction(core, a, b, &lo, dtype)
    }

    /// `matmul` / `bmm` with more than one batch dim: the batch dims broadcast from the
    /// right (a missing or size-1 dim is the operand shared along it).
    pub(super) fn matmul_nd(
        &mut self,
        core: &'g Node,
        (an, am): (&'g str, &Meta),
        (bn, bm): (&'g str, &Meta),
        dtype: DType,
    ) -> Option<GemmDims> {
        let (ra, rb) = (am.shape.len(), bm.shape.len());
        if ra < 2 || rb < 2 {
            self.problem(core, "a 1-D operand beside a batched one");
            return None;
        }
        let nb = ra.max(rb) - 2;
        // Batch letters a, b, c, ... from the outermost; m, n, k for the matrix dims.
        let batch_letters: Vec<char> = (0..nb).map(|i| (b'a' + i as u8) as char).collect();
        let mut out = Vec::new();
        let side = |meta: &Meta, rank: usize, last: [char; 2]| -> Vec<Dim> {
            let mut dims = Vec::new();
            for (i, &letter) in batch_letters.iter().enumerate() {
                // This operand's dim for batch position i, if it has one (right-aligned).
                let off = nb - (rank - 2);
                let own = (i >= off).then(|| i - off);
                let (size, stride) = match own {
                    Some(d) => (meta.shape[d], meta.stride[d]),
                    None => (1, 0),
                };
                dims.push(Dim {
                    letter,
                    size,
                    stride,
                });
            }
            for (j, &letter) in last.iter().enumerate() {
                dims.push(Dim {
                    letter,
                    size: meta.shape[rank - 2 + j],
                    stride: meta.stride[rank - 2 + j],
                });
            }
            dims
        };
        let mut da = side(am, ra, ['m', 'k']);
        let mut db = side(bm, rb, ['k', 'n']);
        // Broadcasting: a size-1 batch dim takes the other operand's size, stride 0.
        for i in 0..nb {
            let (sa, sb) = (da[i].size, db[i].size);
            if sa == 1 && sb != 1 {
                da[i] = Dim {
                    size: sb,
                    stride: 0,
                    ..da[i]
                };
            } else if sb == 1 && sa != 1 {
                db[i] = Dim {
                    size: sa,
                    stride: 0,
                    ..db[i]
                };
            }
        }
        out.extend(batch_letters.iter().copied());
        out.extend(['m', 'n']);
        self.contraction(core, (an, da), (bn, db), &out, dtype)
    }

    /// Operand dtypes of a product: both the same, one a GEMM takes.
    pub(super) fn gemm_dtype(&mut self, core: &Node, am: &Meta, bm: &Meta) -> Option<DType> {
        let Some(dtype) = super::dtype_of(&am.dtype) else {
            self.problem(
                core,
                format!("operands of dtype {}: cutesmith GEMMs take float32, float16, bfloat16, float8_e4m3fn or float8_e5m2", am.dtype),
            );
            return None;
        };
        if am.dtype != bm.dtype {
            self.problem(
                core,
                format!("operands of two dtypes ({} and {})", am.dtype, bm.dtype),
            );
            return None;
        }
        Some(dtype)
    }

    /// The batched GEMM of two lettered operands and the output's letters, or None with
    /// the reason recorded.
    fn contraction(
        &mut self,
        core: &'g Node,
        (an, da): (&'g str, Vec<Dim>),
        (bn, db): (&'g str, Vec<Dim>),
        out: &[char],
        dtype: DType,
    ) -> Option<GemmDims> {
        let has = |dims: &[Dim], c: char| dims.iter().find(|d| d.letter == c).copied();
        for (i, c) in out.iter().enumerate() {
            if out[..i].contains(c) {
                self.problem(core, format!("`{c}` appears twice in the output"));
                return None;
            }
            if has(&da, *c).is_none() && has(&db, *c).is_none() {
                self.problem(core, format!("output dim `{c}` is in neither operand"));
                return None;
            }
        }
        for (which, dims, other) in [("first", &da, &db), ("second", &db, &da)] {
            for d in dims.iter() {
                if !out.contains(&d.letter) && has(other, d.letter).is_none() {
                    self.problem(
                        core,
                        format!(
                            "dim `{}` of the {which} operand is summed over alone (a \
                             reduction before the product)",
                            d.letter
                        ),
                    );
                    return None;
                }
                if let Some(o) = has(other, d.letter) {
                    if o.size != d.size {
                        self.problem(
                            core,
                            format!(
                                "dim `{}` has size {} in one operand and {} in the other",
                                d.letter, d.size, o.size
                            ),
                        );
                        return None;
                    }
                }
            }
        }
        // The output: the batch dims first, then one operand's free dims, then the other's.
        let is_batch = |c: char| has(&da, c).is_some() && has(&db, c).is_some();
        let nbatch = out.iter().take_while(|c| is_batch(**c)).count();
        if out[nbatch..].iter().any(|c| is_batch(*c)) {
            self.problem(
                core,
                "the output's dims are not the batch dims first, then one operand's, then \
                 the other's: D would not be a packed batch of matrices",
            );
            return None;
        }
        let free = &out[nbatch..];
        // The operand whose free dims come first is the GEMM's A.
        let a_first = free.first().is_none_or(|c| has(&da, *c).is_some());
        let ((an, da), (bn, db)) = if a_first {
            ((an, da), (bn, db))
        } else {
            ((bn, db), (an, da))
        };
        let m_len = free.iter().take_while(|c| has(&da, **c).is_some()).count();
        if free[m_len..].iter().any(|c| has(&da, *c).is_some()) {
            self.problem(
                core,
                "the output interleaves the two operands' dims: D would not be a packed \
                 matrix",
            );
            return None;
        }
        let pick = |dims: &[Dim], letters: &[char]| -> Vec<Dim> {
            letters.iter().filter_map(|c| has(dims, *c)).collect()
        };
        let batch_l = &out[..nbatch];
        let m_l = &free[..m_len];
        let n_l = &free[m_len..];
        // K in the first operand's order; the second must store it in the same nesting.
        let k_l: Vec<char> = da
            .iter()
            .map(|d| d.letter)
            .filter(|c| !out.contains(c))
            .collect();
        let group = |mp: &mut Self, dims: Vec<Dim>, what: &str| -> Option<(i64, i64)> {
            let f = flatten(&dims);
            if f.is_none() {
                let desc: Vec<String> = dims
                    .iter()
                    .map(|d| format!("{} (size {}, stride {})", d.letter, d.size, d.stride))
                    .collect();
                mp.problem(
                    core,
                    format!(
                        "{what} dims {} do not flatten into one without a copy",
                        desc.join(", ")
                    ),
                );
            }
            f
        };
        let (batch, sba) = group(self, pick(&da, batch_l), "A's batch")?;
        let (_, sbb) = group(self, pick(&db, batch_l), "B's batch")?;
        let (m, sm) = group(self, pick(&da, m_l), "A's row")?;
        let (k, ska) = group(self, pick(&da, &k_l), "A's reduction")?;
        let (_, skb) = group(self, pick(&db, &k_l), "B's reduction")?;
        let (n, sn) = group(self, pick(&db, n_l), "B's column")?;
        for (which, name) in [("A", an), ("B", bn)] {
            if self.source(name).is_none() {
                self.problem(
                    core,
                    format!(
                        "operand {which} (`{name}`) is computed, not an input or parameter \
                         (seen through transposes and reshapes): cutesmith fuses no prologue"
                    ),
                );
                return None;
            }
        }
        let (Some(a), Some(b)) = (layout_2d(m, k, sm, ska), layout_2d(k, n, skb, sn)) else {
            self.problem(
                core,
                format!(
                    "as matrices, A ({m} x {k}, strides {sm}, {ska}) or B ({k} x {n}, \
                     strides {skb}, {sn}) is neither packed row-major nor packed column-major"
                ),
            );
            return None;
        };
        let shared = |sb: i64, plane: i64| -> Option<bool> {
            if batch <= 1 || sb == plane {
                Some(false)
            } else if sb == 0 {
                Some(true)
            } else {
                None
            }
        };
        let (Some(shared_a), Some(shared_b)) = (shared(sba, m * k), shared(sbb, k * n)) else {
            self.problem(
                core,
                format!(
                    "a batch stride ({sba} for A, {sbb} for B) is neither the matrix's size \
                     (packed) nor 0 (shared)"
                ),
            );
            return None;
        };
        if shared_a && shared_b {
            self.problem(
                core,
                "both operands are shared by the whole batch (one GEMM repeated)",
            );
            return None;
        }
        if let Some(om) = self.meta(&core.name) {
            if !super::contiguous(om) {
                self.problem(
                    core,
                    format!(
                        "the product's output {:?} with strides {:?} is not packed",
                        om.shape, om.stride
                    ),
                );
                return None;
            }
        }
        Some(GemmDims {
            m,
            n,
            k,
            batch,
            a,
            b,
            shared_a,
            shared_b,
            dtype,
            bias: None,
            alpha: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(letter: char, size: i64, stride: i64) -> Dim {
        Dim {
            letter,
            size,
            stride,
        }
    }

    #[test]
    fn dims_flatten_only_when_they_nest() {
        // (b, i, j) of a packed (8, 4, 5, 3) tensor: one dim of 160 rows, stride 3.
        assert_eq!(
            flatten(&[d('b', 8, 60), d('i', 4, 15), d('j', 5, 3)]),
            Some((160, 3))
        );
        // Size-1 dims do not matter; all-broadcast is stride 0; an empty group is size 1.
        assert_eq!(flatten(&[d('a', 1, 99), d('b', 7, 2)]), Some((7, 2)));
        assert_eq!(flatten(&[d('a', 3, 0), d('b', 2, 0)]), Some((6, 0)));
        assert_eq!(flatten(&[]), Some((1, 0)));
        // Transposed order, or a gap: no single dim.
        assert_eq!(flatten(&[d('j', 5, 3), d('i', 4, 15)]), None);
        assert_eq!(flatten(&[d('i', 4, 16), d('j', 5, 3)]), None);
    }

    #[test]
    fn equations_parse_and_refuse_what_is_no_product() {
        let (a, b, o) = parse_equation("bijl, lk -> bijk").unwrap();
        assert_eq!(a, ['b', 'i', 'j', 'l']);
        assert_eq!(b, ['l', 'k']);
        assert_eq!(o, ['b', 'i', 'j', 'k']);
        for (eq, want) in [
            ("...ij,jk->...ik", "ellipsis"),
            ("ij,jk", "no `->`"),
            ("ij,jk,kl->il", "3 operands"),
            ("ii,ij->ij", "twice"),
            ("i1,1k->ik", "not a dimension letter"),
        ] {
            let e = parse_equation(eq).unwrap_err();
            assert!(e.contains(want), "{eq}: {e}");
        }
    }
}
