//! The comparison of a candidate's output (copied to the host) with a reference, element
//! by element under a tolerance: unwritten elements (still the harness's NaN poison) told
//! from computed NaN/Inf and from plain value errors, and a short mismatch report for a
//! person and for the LLM's next prompt, with the spatial pattern of the bad elements
//! ([`pattern`]). The element types and their poison patterns are in [`element`], the
//! precision hint that reads normalized GEMM errors in [`precision`]. Pure CPU code.

mod element;
mod pattern;
mod precision;

pub use element::{poison, Element, E4M3, E5M2};
pub use precision::precision_hint;

use std::fmt::{self, Write as _};
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::spec::{float_serde, ElementTolerance};

/// Examples of bad elements kept (the first ones in index order).
const MAX_EXAMPLES: usize = 8;
/// Most bins kept per axis (rows, columns, batches) and in the tile grid; larger axes are
/// binned by powers of two so per-thread maps stay small.
const MAX_BINS: usize = 1 << 16;
/// Fewest elements worth a thread of their own.
const MIN_PER_THREAD: usize = 1 << 16;
/// Most threads used for one comparison.
const MAX_THREADS: usize = 64;
/// Most characters in the pattern sentence.
const MAX_PATTERN_CHARS: usize = 300;
/// Most bytes in the text report.
const MAX_REPORT_BYTES: usize = 1500;

/// The output's logical shape and how it is stored (row-major), so padded or strided
/// outputs are checked without copying them dense first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dims {
    /// Number of matrices.
    pub batch: usize,
    /// Rows per matrix (1 for a 1-D output).
    pub rows: usize,
    /// Columns per matrix.
    pub cols: usize,
    /// Elements between consecutive rows of the stored output (>= cols).
    pub ld: usize,
    /// Elements between consecutive matrices of the stored output.
    pub batch_stride: usize,
}

impl Dims {
    /// A dense (unpadded) layout, the common case, so callers need not spell out strides.
    pub fn dense(batch: usize, rows: usize, cols: usize) -> Self {
        Dims {
            batch,
            rows,
            cols,
            ld: cols,
            batch_stride: rows.saturating_mul(cols),
        }
    }

    /// Logical element count (None on overflow), so callers can size the reference.
    pub fn elements(&self) -> Option<usize> {
        self.batch.checked_mul(self.rows)?.checked_mul(self.cols)
    }
}

/// One bad element, with its logical position, so a report can point at it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    /// Batch index.
    pub batch: usize,
    /// Row within the matrix.
    pub row: usize,
    /// Column within the row.
    pub col: usize,
    /// The kernel's value (NaN when unwritten; serialized as a string when not finite).
    #[serde(with = "float_serde")]
    pub got: f64,
    /// The reference value.
    #[serde(with = "float_serde")]
    pub want: f64,
    /// True when the element still held the poison (never written by the kernel).
    #[serde(default)]
    pub unwritten: bool,
}

/// What the comparison means for the agent, in one word, so later stages can branch on it.
/// Precedence: `PartialWrite` > `NanInf` > `Mismatch` (an unwritten element explains NaN
/// reads downstream, and a NaN explains wrong values, not the other way round).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// Every element written and within tolerance.
    Pass,
    /// Every reference value is NaN on these inputs (a log or a square root of signed
    /// values): the check cannot tell a right kernel from a wrong one.
    UndefinedReference,
    /// Some elements still hold the poison: the kernel never stored them.
    PartialWrite,
    /// The kernel produced NaN/Inf where the reference is finite.
    NanInf,
    /// Finite values outside the tolerance (or non-finite references not matched).
    Mismatch,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "PASS",
            Verdict::UndefinedReference => "UNDEFINED REFERENCE",
            Verdict::PartialWrite => "PARTIAL WRITE",
            Verdict::NanInf => "NAN/INF",
            Verdict::Mismatch => "MISMATCH",
        })
    }
}

/// The outcome of comparing one output with its reference: counts, errors, examples and
/// the pattern sentence; serializable so the runner can store it and show it to the LLM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Element type of the kernel's output.
    pub got_type: String,
    /// Element type of the reference.
    pub want_type: String,
    /// The shape compared.
    pub dims: Dims,
    /// The tolerance applied.
    pub tol: ElementTolerance,
    /// Elements examined (batch * rows * cols).
    pub checked: u64,
    /// Value mismatches, excluding unwritten elements; includes `nan_or_inf`.
    pub wrong: u64,
    /// Elements still holding the poison (never written).
    pub unwritten: u64,
    /// Elements that are NaN/Inf where the reference is finite (a subset of `wrong`).
    pub nan_or_inf: u64,
    /// Elements whose reference is NaN on these inputs (a kernel's NaN matches them): when
    /// that is every element, the comparison proves nothing and does not pass.
    #[serde(default)]
    pub reference_nan: u64,
    /// Elements whose storage index lay outside `got` (counted unwritten) or whose
    /// reference index lay outside `want` (counted wrong): a harness or stride error.
    #[serde(default)]
    pub out_of_bounds: u64,
    /// Largest |got - want| over elements where both are finite.
    #[serde(with = "float_serde")]
    pub max_abs_err: f64,
    /// Largest |got - want| / |want| over elements where both are finite and want != 0.
    #[serde(with = "float_serde")]
    pub max_rel_err: f64,
    /// The wrong element with the largest error (non-finite errors rank highest, ties go to
    /// the lowest index); unwritten elements are not candidates.
    pub worst: Option<Mismatch>,
    /// The first bad elements (wrong or unwritten) in index order, at most 8.
    pub first_wrong: Vec<Mismatch>,
    /// Where the bad elements are, in one or two sentences (at most ~300 chars): the
    /// unwritten ones ("unwritten: ...") first, then the wrong ones ("wrong: ..." when both).
    pub pattern: String,
}

impl Comparison {
    /// True when every element was written and is within tolerance.
    pub fn passed(&self) -> bool {
        self.wrong == 0 && self.unwritten == 0 && !self.reference_undefined()
    }

    /// Every reference value is NaN: nothing was really checked.
    pub fn reference_undefined(&self) -> bool {
        self.checked > 0 && self.reference_nan == self.checked
    }

    /// The one-word outcome, with precedence UndefinedReference > PartialWrite > NanInf >
    /// Mismatch.
    pub fn verdict(&self) -> Verdict {
        if self.reference_undefined() {
            Verdict::UndefinedReference
        } else if self.unwritten > 0 {
            Verdict::PartialWrite
        } else if self.nan_or_inf > 0 {
            Verdict::NanInf
        } else if self.wrong > 0 {
            Verdict::Mismatch
        } else {
            Verdict::Pass
        }
    }

    /// A multi-line text (at most ~1500 bytes) for a person or the next LLM prompt:
    /// verdict, counts and fractions, errors, the worst and first bad elements, pattern.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let d = &self.dims;
        let _ = writeln!(
            s,
            "verdict: {} ({} output vs {} reference, batch {} x {} rows x {} cols; rtol {}, atol {})",
            self.verdict(),
            self.got_type,
            self.want_type,
            d.batch,
            d.rows,
            d.cols,
            fmt_num(self.tol.rtol),
            fmt_num(self.tol.atol)
        );
        let n = self.checked;
        let _ = writeln!(
            s,
            "checked {n}: wrong {} ({}), unwritten {} ({}), NaN/Inf where reference finite {} ({})",
            self.wrong,
            pct(self.wrong, n),
            self.unwritten,
            pct(self.unwritten, n),
            self.nan_or_inf,
            pct(self.nan_or_inf, n)
        );
        if self.reference_nan > 0 {
            let _ = writeln!(
                s,
                "the reference is NaN at {} ({}) of them, where a NaN output matches it{}",
                self.reference_nan,
                pct(self.reference_nan, n),
                if self.reference_undefined() {
                    ": every one, so nothing was checked"
                } else {
                    ""
                }
            );
        }
        if self.out_of_bounds > 0 {
            let _ = writeln!(
                s,
                "out of bounds: {} elements lie outside the buffers given (check ld / batch_stride)",
                self.out_of_bounds
            );
        }
        let _ = writeln!(
            s,
            "max abs err {}, max rel err {} (over elements where both are finite)",
            fmt_num(self.max_abs_err),
            fmt_num(self.max_rel_err)
        );
        if let Some(w) = &self.worst {
            let _ = writeln!(s, "worst: {}", fmt_mismatch(w));
        }
        if !self.first_wrong.is_empty() {
            let _ = writeln!(s, "first bad elements (batch, row, col):");
            for m in &self.first_wrong {
                let _ = writeln!(s, "  {}", fmt_mismatch(m));
            }
        }
        let _ = writeln!(s, "pattern: {}", self.pattern);
        truncate_chars(&mut s, MAX_REPORT_BYTES);
        s
    }
}

/// Compares the stored output `got` (element (b, r, c) at `b*batch_stride + r*ld + c`)
/// with the dense reference `want` (at `(b*rows + r)*cols + c`) under `tol`, on all cores,
/// so the agent's belief about a kernel rests on every element. The result does not
/// depend on the number of threads. Indices outside either buffer are counted as bad
/// (see [`Comparison::out_of_bounds`]), never skipped.
pub fn compare<G: Element, W: Element>(
    got: &[G],
    want: &[W],
    dims: &Dims,
    tol: &ElementTolerance,
) -> Comparison {
    compare_with_slack(got, want, None, dims, tol)
}

/// [`compare`] with a per-element allowance on top of the tolerance: element i passes
/// when `|got - want| <= atol + rtol * |want| + slack[i]` (`slack` is dense, indexed like
/// `want`). The slack carries what the reference itself cannot pin down, e.g. the
/// rounding error of a long dot product propagated through an epilogue chain.
pub fn compare_with_slack<G: Element, W: Element>(
    got: &[G],
    want: &[W],
    slack: Option<&[f64]>,
    dims: &Dims,
    tol: &ElementTolerance,
) -> Comparison {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    compare_with_threads(got, want, slack, dims, tol, threads)
}

fn compare_with_threads<G: Element, W: Element>(
    got: &[G],
    want: &[W],
    slack: Option<&[f64]>,
    dims: &Dims,
    tol: &ElementTolerance,
    threads: usize,
) -> Comparison {
    let mut out = Comparison {
        got_type: G::NAME.to_string(),
        want_type: W::NAME.to_string(),
        dims: *dims,
        tol: *tol,
        checked: 0,
        wrong: 0,
        unwritten: 0,
        nan_or_inf: 0,
        reference_nan: 0,
        out_of_bounds: 0,
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        worst: None,
        first_wrong: Vec::new(),
        pattern: String::new(),
    };
    let Some(n) = dims.elements() else {
        out.wrong = 1;
        out.out_of_bounds = 1;
        out.pattern = "the dimensions overflow usize; nothing was compared".to_string();
        return out;
    };
    if n == 0 {
        out.pattern = "no elements to check".to_string();
        return out;
    }
    let geo = Geo::new(dims);
    let threads = threads
        .clamp(1, MAX_THREADS)
        .min(n.div_ceil(MIN_PER_THREAD))
        .max(1);
    let chunk = n.div_ceil(threads);
    let accs: Vec<Acc> = if threads == 1 {
        vec![run_chunk(got, want, slack, dims, &geo, tol, 0..n)]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let range = (t * chunk).min(n)..((t + 1) * chunk).min(n);
                    let geo = &geo;
                    s.spawn(move || run_chunk(got, want, slack, dims, geo, tol, range))
                })
                .collect();
            // A panicking worker would be a bug here; its chunk then counts as wrong.
            handles
                .into_iter()
                .enumerate()
                .map(|(t, h)| {
                    h.join().unwrap_or_else(|_| {
                        let mut a = Acc::default();
                        let len = (((t + 1) * chunk).min(n) - (t * chunk).min(n)) as u64;
                        a.checked = len;
                        a.wrong = len;
                        a
                    })
                })
                .collect()
        })
    };
    let mut total = Acc::default();
    for a in accs {
        total.merge(a);
    }
    out.checked = total.checked;
    out.wrong = total.wrong;
    out.unwritten = total.unwritten;
    out.nan_or_inf = total.nan_or_inf;
    out.reference_nan = total.reference_nan;
    out.out_of_bounds = total.oob;
    out.max_abs_err = total.max_abs;
    out.max_rel_err = total.max_rel;
    out.pattern = pattern::pattern(&geo, &total);
    out.worst = total.worst.map(|(_, m)| m);
    out.first_wrong = total.first;
    out
}

/// How a comparison bins the bad elements (rows, columns and batches by powers of two,
/// the tile grid), for a comparison done elsewhere (on the device) to fill the same maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binning {
    /// Shifts of the row, column and batch bins.
    pub rs: u32,
    pub cs: u32,
    pub bs: u32,
    /// log2 of the tile side.
    pub ts: u32,
    /// Bins of each kind.
    pub rows: usize,
    pub cols: usize,
    pub batches: usize,
    pub tile_rows: usize,
    pub tile_cols: usize,
}

impl Binning {
    /// The binning [`compare`] uses for `dims`.
    pub fn for_dims(dims: &Dims) -> Binning {
        let g = Geo::new(dims);
        Binning {
            rs: g.rs,
            cs: g.cs,
            bs: g.bs,
            ts: g.ts,
            rows: g.nrb,
            cols: g.ncb,
            batches: g.nbb,
            tile_rows: g.ntr,
            tile_cols: g.ntc,
        }
    }
}

/// Bad-element counts per row, column, batch and tile bin (see [`Binning`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BinCounts {
    pub rows: Vec<u64>,
    pub cols: Vec<u64>,
    pub batches: Vec<u64>,
    pub tiles: Vec<u64>,
}

/// What a comparison done on the device reports: counts, extremes, the first bad
/// elements and the worst one, and where the bad elements are; [`Comparison::from_summary`]
/// makes the same report of it as [`compare`] makes from whole buffers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub checked: u64,
    pub wrong: u64,
    pub unwritten: u64,
    pub nan_or_inf: u64,
    /// References that are NaN (see [`Comparison::reference_nan`]).
    #[serde(default)]
    pub reference_nan: u64,
    #[serde(with = "float_serde")]
    pub max_abs_err: f64,
    #[serde(with = "float_serde")]
    pub max_rel_err: f64,
    /// The wrong element with the largest error.
    pub worst: Option<Mismatch>,
    /// The first bad elements in index order (at most 8).
    pub first: Vec<Mismatch>,
    pub unwritten_bins: Option<BinCounts>,
    pub wrong_bins: Option<BinCounts>,
}

impl Comparison {
    /// The report of a comparison summarized elsewhere (on the device), as [`compare`]
    /// writes it: the same counts, examples and pattern sentence.
    pub fn from_summary(
        s: &Summary,
        dims: &Dims,
        tol: &ElementTolerance,
        got_type: &str,
        want_type: &str,
    ) -> Comparison {
        let geo = Geo::new(dims);
        let maps = |b: &Option<BinCounts>| {
            b.as_ref().map(|b| Maps {
                rows: b.rows.clone(),
                cols: b.cols.clone(),
                batches: b.batches.clone(),
                tiles: b.tiles.clone(),
            })
        };
        let acc = Acc {
            checked: s.checked,
            wrong: s.wrong,
            unwritten: s.unwritten,
            nan_or_inf: s.nan_or_inf,
            reference_nan: s.reference_nan,
            oob: 0,
            max_abs: s.max_abs_err,
            max_rel: s.max_rel_err,
            worst: s.worst.clone().map(|m| ((m.got - m.want).abs(), m)),
            first: s.first.iter().take(MAX_EXAMPLES).cloned().collect(),
            maps_unwritten: maps(&s.unwritten_bins),
            maps_wrong: maps(&s.wrong_bins),
        };
        Comparison {
            got_type: got_type.to_string(),
            want_type: want_type.to_string(),
            dims: *dims,
            tol: *tol,
            checked: acc.checked,
            wrong: acc.wrong,
            unwritten: acc.unwritten,
            nan_or_inf: acc.nan_or_inf,
            reference_nan: s.reference_nan,
            out_of_bounds: 0,
            max_abs_err: acc.max_abs,
            max_rel_err: acc.max_rel,
            pattern: pattern::pattern(&geo, &acc),
            worst: acc.worst.map(|(_, m)| m),
            first_wrong: acc.first,
        }
    }
}

/// Axis binning and the tile grid, fixed per comparison.
struct Geo {
    batch: usize,
    rows: usize,
    cols: usize,
    /// Shifts that bin rows, columns and batches (0 = exact).
    rs: u32,
    cs: u32,
    bs: u32,
    /// log2 of the base tile size (6 = 64x64 unless the grid would be too large).
    ts: u32,
    nrb: usize,
    ncb: usize,
    nbb: usize,
    ntr: usize,
    ntc: usize,
}

fn bins(n: usize, shift: u32) -> usize {
    if n == 0 {
        0
    } else {
        ((n - 1) >> shift) + 1
    }
}

fn shift_for(n: usize) -> u32 {
    let mut s = 0;
    while bins(n, s) > MAX_BINS {
        s += 1;
    }
    s
}

impl Geo {
    fn new(d: &Dims) -> Self {
        let (rs, cs, bs) = (shift_for(d.rows), shift_for(d.cols), shift_for(d.batch));
        let mut ts = 6;
        while bins(d.rows, ts).saturating_mul(bins(d.cols, ts)) > MAX_BINS {
            ts += 1;
        }
        Geo {
            batch: d.batch,
            rows: d.rows,
            cols: d.cols,
            rs,
            cs,
            bs,
            ts,
            nrb: bins(d.rows, rs),
            ncb: bins(d.cols, cs),
            nbb: bins(d.batch, bs),
            ntr: bins(d.rows, ts),
            ntc: bins(d.cols, ts),
        }
    }
}

/// Bad-element counts per row, column, batch and base tile (aggregated over batches).
#[derive(Clone)]
struct Maps {
    rows: Vec<u64>,
    cols: Vec<u64>,
    batches: Vec<u64>,
    tiles: Vec<u64>,
}

impl Maps {
    fn new(g: &Geo) -> Self {
        Maps {
            rows: vec![0; g.nrb],
            cols: vec![0; g.ncb],
            batches: vec![0; g.nbb],
            tiles: vec![0; g.ntr * g.ntc],
        }
    }

    fn add(&mut self, o: &Maps) {
        for (a, b) in [
            (&mut self.rows, &o.rows),
            (&mut self.cols, &o.cols),
            (&mut self.batches, &o.batches),
            (&mut self.tiles, &o.tiles),
        ] {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
    }
}

/// Why an element failed.
#[derive(Clone, Copy)]
enum Fault {
    Unwritten,
    /// A value error; `err` ranks it for `worst` (infinite for non-finite cases).
    Value {
        non_finite: bool,
        err: f64,
    },
}

/// Judges one element (None = pass).
fn judge(poisoned: bool, got: f64, want: f64, slack: f64, tol: &ElementTolerance) -> Option<Fault> {
    if poisoned {
        return Some(Fault::Unwritten);
    }
    if tol.accepts_with_slack(got, want, slack) {
        return None;
    }
    if want.is_finite() && !got.is_finite() {
        return Some(Fault::Value {
            non_finite: true,
            err: f64::INFINITY,
        });
    }
    let err = (got - want).abs();
    Some(Fault::Value {
        non_finite: false,
        err: if err.is_nan() { f64::INFINITY } else { err },
    })
}

/// One thread's counters, examples and maps (separate maps for unwritten and wrong
/// elements, so a few NaNs do not hide the shape of a partial write).
#[derive(Default)]
struct Acc {
    checked: u64,
    wrong: u64,
    unwritten: u64,
    nan_or_inf: u64,
    reference_nan: u64,
    oob: u64,
    max_abs: f64,
    max_rel: f64,
    worst: Option<(f64, Mismatch)>,
    first: Vec<Mismatch>,
    maps_unwritten: Option<Maps>,
    maps_wrong: Option<Maps>,
}

impl Acc {
    fn note_err(&mut self, d: f64, want: f64) {
        if d > self.max_abs {
            self.max_abs = d;
        }
        let aw = want.abs();
        if aw > 0.0 {
            let rel = d / aw;
            if rel > self.max_rel {
                self.max_rel = rel;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn record(&mut self, g: &Geo, b: usize, r: usize, c: usize, got: f64, want: f64, fault: Fault) {
        let m = Mismatch {
            batch: b,
            row: r,
            col: c,
            got,
            want,
            unwritten: matches!(fault, Fault::Unwritten),
        };
        match fault {
            Fault::Unwritten => self.unwritten += 1,
            Fault::Value { non_finite, err } => {
                self.wrong += 1;
                if non_finite {
                    self.nan_or_inf += 1;
                }
                if self.worst.as_ref().is_none_or(|(e, _)| err > *e) {
                    self.worst = Some((err, m.clone()));
                }
            }
        }
        if self.first.len() < MAX_EXAMPLES {
            self.first.push(m);
        }
        let maps = match fault {
            Fault::Unwritten => &mut self.maps_unwritten,
            Fault::Value { .. } => &mut self.maps_wrong,
        };
        let maps = maps.get_or_insert_with(|| Maps::new(g));
        maps.rows[r >> g.rs] += 1;
        maps.cols[c >> g.cs] += 1;
        maps.batches[b >> g.bs] += 1;
        maps.tiles[(r >> g.ts) * g.ntc + (c >> g.ts)] += 1;
    }

    /// The hot loop: a row segment whose storage lies inside both buffers.
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)]
    fn segment<G: Element, W: Element>(
        &mut self,
        g: &Geo,
        tol: &ElementTolerance,
        b: usize,
        r: usize,
        c0: usize,
        gs: &[G],
        ws: &[W],
        ss: Option<&[f64]>,
    ) {
        let (atol, rtol) = (tol.atol, tol.rtol);
        let mut max_abs = self.max_abs;
        let mut max_rel = self.max_rel;
        for (i, (&gv, &wv)) in gs.iter().zip(ws).enumerate() {
            let (x, y) = (gv.to_f64(), wv.to_f64());
            let d = (x - y).abs();
            let ay = y.abs();
            // d finite implies both values finite (and not poison, which is a NaN).
            if d.is_finite() {
                if d > max_abs {
                    max_abs = d;
                }
                let rel = d / ay;
                if ay > 0.0 && rel > max_rel {
                    max_rel = rel;
                }
                let extra = ss.and_then(|s| s.get(i)).copied().unwrap_or(0.0);
                if d <= atol + rtol * ay + extra {
                    continue;
                }
            }
            let extra = ss.and_then(|s| s.get(i)).copied().unwrap_or(0.0);
            if let Some(f) = judge(gv.is_poison_bits(), x, y, extra, tol) {
                self.record(g, b, r, c0 + i, x, y, f);
            }
        }
        self.max_abs = max_abs;
        self.max_rel = max_rel;
        self.checked += gs.len() as u64;
    }

    /// The careful path for a row segment that reaches outside a buffer.
    #[allow(clippy::too_many_arguments)]
    fn segment_checked<G: Element, W: Element>(
        &mut self,
        g: &Geo,
        tol: &ElementTolerance,
        (b, r): (usize, usize),
        cols: Range<usize>,
        gbase: Option<usize>,
        wbase: Option<usize>,
        got: &[G],
        want: &[W],
        slack: Option<&[f64]>,
    ) {
        for c in cols {
            self.checked += 1;
            let gv = gbase
                .and_then(|x| x.checked_add(c))
                .and_then(|i| got.get(i));
            let wv = wbase
                .and_then(|x| x.checked_add(c))
                .and_then(|i| want.get(i));
            match (gv, wv) {
                (Some(&gv), Some(&wv)) => {
                    let (x, y) = (gv.to_f64(), wv.to_f64());
                    if x.is_finite() && y.is_finite() {
                        self.note_err((x - y).abs(), y);
                    }
                    let extra = wbase
                        .and_then(|x| x.checked_add(c))
                        .and_then(|i| slack.and_then(|s| s.get(i)))
                        .copied()
                        .unwrap_or(0.0);
                    if let Some(f) = judge(gv.is_poison_bits(), x, y, extra, tol) {
                        self.record(g, b, r, c, x, y, f);
                    }
                }
                (None, wv) => {
                    self.oob += 1;
                    let y = wv.map_or(f64::NAN, |w| w.to_f64());
                    self.record(g, b, r, c, f64::NAN, y, Fault::Unwritten);
                }
                (Some(&gv), None) => {
                    self.oob += 1;
                    let fault = Fault::Value {
                        non_finite: false,
                        err: f64::INFINITY,
                    };
                    self.record(g, b, r, c, gv.to_f64(), f64::NAN, fault);
                }
            }
        }
    }

    /// Folds a later chunk into this one (chunks merge in index order).
    fn merge(&mut self, o: Acc) {
        self.checked += o.checked;
        self.wrong += o.wrong;
        self.unwritten += o.unwritten;
        self.nan_or_inf += o.nan_or_inf;
        self.reference_nan += o.reference_nan;
        self.oob += o.oob;
        self.max_abs = self.max_abs.max(o.max_abs);
        self.max_rel = self.max_rel.max(o.max_rel);
        if let Some((e, m)) = o.worst {
            if self.worst.as_ref().is_none_or(|(se, _)| e > *se) {
                self.worst = Some((e, m));
            }
        }
        for m in o.first {
            if self.first.len() >= MAX_EXAMPLES {
                break;
            }
            self.first.push(m);
        }
        for (mine, theirs) in [
            (&mut self.maps_unwritten, o.maps_unwritten),
            (&mut self.maps_wrong, o.maps_wrong),
        ] {
            match (mine.as_mut(), theirs) {
                (Some(a), Some(b)) => a.add(&b),
                (None, Some(b)) => *mine = Some(b),
                _ => {}
            }
        }
    }
}

fn seg_base(b: usize, bstride: usize, r: usize, rstride: usize) -> Option<usize> {
    b.checked_mul(bstride)?.checked_add(r.checked_mul(rstride)?)
}

fn run_chunk<G: Element, W: Element>(
    got: &[G],
    want: &[W],
    slack: Option<&[f64]>,
    d: &Dims,
    g: &Geo,
    tol: &ElementTolerance,
    range: Range<usize>,
) -> Acc {
    let mut acc = Acc::default();
    let plane = d.rows * d.cols; // no overflow: batch * rows * cols fits
    let mut e = range.start;
    while e < range.end {
        let b = e / plane;
        let rem = e % plane;
        let (r, c0) = (rem / d.cols, rem % d.cols);
        let c1 = d.cols.min(c0 + (range.end - e));
        let gbase = seg_base(b, d.batch_stride, r, d.ld);
        let wbase = seg_base(b, plane, r, d.cols);
        let slice_of = |base: Option<usize>| -> Option<Range<usize>> {
            let base = base?;
            Some(base.checked_add(c0)?..base.checked_add(c1)?)
        };
        let gs = slice_of(gbase).and_then(|rg| got.get(rg));
        let ws = slice_of(wbase).and_then(|rg| want.get(rg));
        let ss = slack.and_then(|s| slice_of(wbase).and_then(|rg| s.get(rg)));
        if let Some(ws) = ws {
            acc.reference_nan += ws.iter().filter(|w| w.to_f64().is_nan()).count() as u64;
        }
        match (gs, ws) {
            (Some(gs), Some(ws)) => acc.segment(g, tol, b, r, c0, gs, ws, ss),
            _ => acc.segment_checked(g, tol, (b, r), c0..c1, gbase, wbase, got, want, slack),
        }
        e += c1 - c0;
    }
    acc
}

// ---------------------------------------------------------------------------------------
// Formatting helpers.
// ---------------------------------------------------------------------------------------

/// A compact number: plain for moderate magnitudes, scientific otherwise.
pub(super) fn fmt_num(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    let a = x.abs();
    if a == 0.0 {
        "0".to_string()
    } else if (1e-3..1e6).contains(&a) {
        let s = format!("{x:.6}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    } else {
        format!("{x:.4e}")
    }
}

fn fmt_mismatch(m: &Mismatch) -> String {
    if m.unwritten {
        format!(
            "({}, {}, {}): unwritten (poison) vs want {}",
            m.batch,
            m.row,
            m.col,
            fmt_num(m.want)
        )
    } else if !m.got.is_finite() || !m.want.is_finite() {
        format!(
            "({}, {}, {}): got {} vs want {}",
            m.batch,
            m.row,
            m.col,
            fmt_num(m.got),
            fmt_num(m.want)
        )
    } else {
        format!(
            "({}, {}, {}): got {} vs want {} (err {})",
            m.batch,
            m.row,
            m.col,
            fmt_num(m.got),
            fmt_num(m.want),
            fmt_num((m.got - m.want).abs())
        )
    }
}

fn pct(num: u64, den: u64) -> String {
    if den == 0 {
        return "0%".to_string();
    }
    let p = 100.0 * num as f64 / den as f64;
    if p == 0.0 {
        "0%".to_string()
    } else if p >= 10.0 {
        format!("{p:.0}%")
    } else if p >= 1.0 {
        format!("{p:.1}%")
    } else if p >= 0.01 {
        format!("{p:.2}%")
    } else {
        format!("{p:.1e}%")
    }
}

fn truncate_chars(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max.saturating_sub(3);
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn tol() -> ElementTolerance {
        ElementTolerance {
            rtol: 1e-3,
            atol: 1e-5,
        }
    }

    /// A deterministic value for element i.
    fn val(i: usize) -> f32 {
        let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        (x as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// Dense want and got (a copy), with `bad(b, r, c)` elements replaced by `f`.
    fn make(
        d: &Dims,
        bad: impl Fn(usize, usize, usize) -> bool,
        f: impl Fn(f32) -> f32,
    ) -> (Vec<f32>, Vec<f32>) {
        let n = d.batch * d.rows * d.cols;
        let want: Vec<f32> = (0..n).map(val).collect();
        let mut got = want.clone();
        for b in 0..d.batch {
            for r in 0..d.rows {
                for c in 0..d.cols {
                    if bad(b, r, c) {
                        let i = (b * d.rows + r) * d.cols + c;
                        got[i] = f(got[i]);
                    }
                }
            }
        }
        (got, want)
    }

    fn off(x: f32) -> f32 {
        x + 1.0
    }

    #[test]
    fn exact_match_passes() {
        let d = Dims::dense(2, 64, 48);
        let (got, want) = make(&d, |_, _, _| false, off);
        let c = compare(&got, &want, &d, &tol());
        assert!(c.passed());
        assert_eq!(c.verdict(), Verdict::Pass);
        assert_eq!(c.checked, 2 * 64 * 48);
        assert_eq!(c.max_abs_err, 0.0);
        assert_eq!(c.pattern, "no wrong elements");
        assert!(c.report().starts_with("verdict: PASS"));
    }

    /// A reference that is NaN everywhere proves nothing: a NaN output "matches" it, so
    /// the comparison does not pass (host and device summaries alike); NaN at some elements
    /// is counted and reported, and the rest still decide.
    #[test]
    fn a_reference_nan_everywhere_checks_nothing_and_does_not_pass() {
        let d = Dims::dense(1, 4, 8);
        let want = vec![f32::NAN; 32];
        let got = vec![f32::NAN; 32];
        let c = compare(&got, &want, &d, &tol());
        assert_eq!((c.wrong, c.unwritten, c.reference_nan), (0, 0, 32));
        assert!(!c.passed());
        assert_eq!(c.verdict(), Verdict::UndefinedReference);
        assert!(
            c.report().contains("every one, so nothing was checked"),
            "{}",
            c.report()
        );
        // Half NaN: counted, and the finite half decides.
        let want: Vec<f32> = (0..32)
            .map(|i| if i % 2 == 0 { f32::NAN } else { i as f32 })
            .collect();
        let mut got = want.clone();
        let c = compare(&got, &want, &d, &tol());
        assert!(c.passed() && c.reference_nan == 16);
        got[1] += 1.0;
        assert_eq!(
            compare(&got, &want, &d, &tol()).verdict(),
            Verdict::Mismatch
        );
        // The device's summary carries the count through.
        let s = Summary {
            checked: 32,
            reference_nan: 32,
            ..Summary::default()
        };
        let c = Comparison::from_summary(&s, &d, &tol(), "f32", "f64");
        assert_eq!(c.verdict(), Verdict::UndefinedReference);
    }

    #[test]
    fn one_element_off_is_reported_with_strided_storage() {
        let d = Dims {
            batch: 2,
            rows: 100,
            cols: 80,
            ld: 96,
            batch_stride: 100 * 96 + 7,
        };
        let want: Vec<f32> = (0..2 * 100 * 80).map(val).collect();
        let mut got = vec![-1234.5f32; d.batch_stride * 2];
        for b in 0..2 {
            for r in 0..100 {
                for c in 0..80 {
                    got[b * d.batch_stride + r * 96 + c] = want[(b * 100 + r) * 80 + c];
                }
            }
        }
        got[d.batch_stride + 37 * 96 + 5] += 0.5;
        let c = compare(&got, &want, &d, &tol());
        assert_eq!(c.verdict(), Verdict::Mismatch);
        assert_eq!((c.wrong, c.unwritten, c.nan_or_inf), (1, 0, 0));
        let m = &c.first_wrong[0];
        assert_eq!((m.batch, m.row, m.col), (1, 37, 5));
        assert_eq!(
            c.worst.as_ref().map(|w| (w.batch, w.row, w.col)),
            Some((1, 37, 5))
        );
        assert!((c.max_abs_err - 0.5).abs() < 1e-6, "{}", c.max_abs_err);
        assert!(c.report().contains("(1, 37, 5): got"), "{}", c.report());
        assert_eq!(
            c.pattern,
            "a single element wrong at (batch, row, col) = (1, 37, 5)"
        );
    }

    #[test]
    fn unwritten_trailing_tiles() {
        let d = Dims::dense(1, 300, 200);
        let (got, want) = make(&d, |_, r, c| r >= 256 || c >= 192, |_| f32::poison());
        let c = compare(&got, &want, &d, &tol());
        assert_eq!(c.verdict(), Verdict::PartialWrite);
        assert_eq!(c.unwritten, 44 * 200 + 8 * 300 - 44 * 8);
        assert_eq!(c.wrong, 0);
        assert_eq!(
            c.pattern,
            "unwritten: the last 1 row tile and last 1 column tile of 64 (rows >= 256, columns >= 192) never written"
        );
        assert!(c.first_wrong[0].unwritten);
        assert_eq!(c.worst, None);
        assert!(c.report().contains("unwritten (poison)"));
    }

    #[test]
    fn every_64th_column() {
        let d = Dims::dense(1, 128, 512);
        let (got, want) = make(&d, |_, _, c| c % 64 == 63, off);
        let c = compare(&got, &want, &d, &tol());
        assert_eq!(c.wrong, 128 * 8);
        assert_eq!(
            c.pattern,
            "every 64th column (c % 64 == 63) wrong (entire columns)"
        );
    }

    #[test]
    fn rows_from_256() {
        let d = Dims::dense(1, 512, 128);
        let (got, want) = make(&d, |_, r, _| r >= 256, off);
        let c = compare(&got, &want, &d, &tol());
        assert_eq!(c.pattern, "only rows >= 256 wrong (entire rows)");
        // Partially wrong rows in a range.
        let (got, want) = make(&d, |_, r, c| r < 128 && c % 3 == 0, off);
        let c = compare(&got, &want, &d, &tol());
        assert_eq!(
            c.pattern,
            "only the block rows 0..127 x every 3rd column (c % 3 == 0) wrong (entirely)"
        );
        // Rows 0..127 partly wrong with no column structure.
        let (got, want) = make(&d, |_, r, c| r < 128 && (r * 131 + c * c * 7) % 10 < 3, off);
        let c = compare(&got, &want, &d, &tol());
        assert!(
            c.pattern.starts_with("only rows 0..127 wrong (")
                && c.pattern.ends_with("% of their elements)"),
            "{}",
            c.pattern
        );
    }

    #[test]
    fn only_batch_1() {
        let d = Dims::dense(3, 64, 64);
        let (got, want) = make(&d, |b, _, _| b == 1, off);
        let c = compare(&got, &want, &d, &tol());
        assert_eq!(c.pattern, "only batch 1 wrong (entire batch)");
    }

    #[test]
    fn full_tiles_of_128() {
        let d = Dims::dense(1, 512, 512);
        let in_tile =
            |r: usize, c: usize| (r / 128, c / 128) == (3, 3) || (r / 128, c / 128) == (1, 2);
        let (got, want) = make(&d, |_, r, c| in_tile(r, c), off);
        let c = compare(&got, &want, &d, &tol());
        assert_eq!(
            c.pattern,
            "2 of 4x4 tiles of 128x128 entirely wrong: (1,2), (3,3)"
        );
    }

    #[test]
    fn scattered_random() {
        let d = Dims::dense(1, 512, 512);
        let pick = |_: usize, r: usize, c: usize| {
            let h = ((r * 512 + c) as u64 ^ 0x5555).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (h >> 33) % 1000 < 5
        };
        let (got, want) = make(&d, pick, off);
        let c = compare(&got, &want, &d, &tol());
        assert!(c.wrong > 1000 && c.wrong < 1700, "{}", c.wrong);
        assert!(
            c.pattern.starts_with(&format!(
                "scattered: {:.2}% of elements ({}) wrong",
                c.wrong as f64 / 2621.44,
                c.wrong
            )),
            "{}",
            c.pattern
        );
        assert!(c.pattern.contains("race"));
    }

    #[test]
    fn nan_and_inf_in_reference() {
        let d = Dims::dense(1, 4, 4);
        let mut want = vec![1.0f32; 16];
        want[3] = f32::NAN;
        want[5] = f32::INFINITY;
        let mut got = want.clone();
        let c = compare(&got, &want, &d, &tol());
        assert!(c.passed(), "{}", c.report());
        got[5] = f32::NEG_INFINITY;
        got[3] = 2.0;
        let c = compare(&got, &want, &d, &tol());
        assert_eq!(c.verdict(), Verdict::Mismatch);
        assert_eq!((c.wrong, c.nan_or_inf), (2, 0));
    }

    #[test]
    fn computed_nan_is_naninf_and_poison_takes_precedence() {
        let d = Dims::dense(1, 8, 8);
        let want = vec![1.0f32; 64];
        let mut got = want.clone();
        got[10] = f32::NAN; // canonical NaN from arithmetic
        got[11] = 1.5;
        let c = compare(&got, &want, &d, &tol());
        assert_eq!(c.verdict(), Verdict::NanInf);
        assert_eq!((c.wrong, c.nan_or_inf, c.unwritten), (2, 1, 0));
        assert_eq!(c.worst.as_ref().map(|w| w.col), Some(2)); // non-finite ranks first
        got[20] = f32::poison();
        let c = compare(&got, &want, &d, &tol());
        assert_eq!(c.verdict(), Verdict::PartialWrite);
        assert_eq!(c.unwritten, 1);
    }

    #[test]
    fn half_types() {
        assert!(bf16::poison().is_poison_bits() && f16::poison().is_poison_bits());
        assert!(!bf16::NAN.is_poison_bits() && !f16::NAN.is_poison_bits());
        assert!(!f32::NAN.is_poison_bits() && !f64::NAN.is_poison_bits());
        assert!(poison::<f64>().is_poison_bits() && poison::<f32>().to_f64().is_nan());
        let d = Dims::dense(1, 64, 64);
        let want: Vec<f32> = (0..4096).map(val).collect();
        let t = ElementTolerance {
            rtol: 1e-2,
            atol: 1e-3,
        };
        let mut gb: Vec<bf16> = want.iter().map(|&x| bf16::from_f32(x)).collect();
        let gh: Vec<f16> = want.iter().map(|&x| f16::from_f32(x)).collect();
        assert!(compare(&gb, &want, &d, &t).passed());
        assert!(compare(&gh, &want, &d, &t).passed());
        let wh: Vec<f16> = gh.clone();
        assert!(compare(&gb, &wh, &d, &t).passed());
        gb[100] = bf16::poison();
        let c = compare(&gb, &want, &d, &t);
        assert_eq!((c.unwritten, c.got_type.as_str()), (1, "bf16"));
        assert_eq!((c.first_wrong[0].row, c.first_wrong[0].col), (1, 36));
    }

    #[test]
    fn same_result_for_any_thread_count() {
        let d = Dims::dense(3, 300, 500);
        let pick =
            |b: usize, r: usize, c: usize| (b * 7 + r * 13 + c * 31).is_multiple_of(97) || r == 7;
        let (got, want) = make(&d, pick, off);
        let one = compare_with_threads(&got, &want, None, &d, &tol(), 1);
        for t in [2, 3, 7, 64] {
            assert_eq!(compare_with_threads(&got, &want, None, &d, &tol(), t), one);
        }
        assert_eq!(one.first_wrong.len(), 8);
    }

    #[test]
    fn short_buffers_fail_not_skip() {
        let d = Dims::dense(1, 10, 10);
        let want = vec![1.0f32; 100];
        let got = vec![1.0f32; 90];
        let c = compare(&got, &want, &d, &tol());
        assert_eq!((c.unwritten, c.out_of_bounds), (10, 10));
        assert_eq!(
            c.pattern,
            "unwritten: only row 9 never written (entire rows)"
        );
        let c = compare(&want, &got, &d, &tol());
        assert_eq!((c.wrong, c.out_of_bounds), (10, 10));
    }

    #[test]
    fn one_d_suffix() {
        let d = Dims::dense(1, 1, 10_000);
        let (got, want) = make(&d, |_, _, c| c >= 9000, |_| f32::poison());
        let c = compare(&got, &want, &d, &tol());
        assert_eq!(c.pattern, "unwritten: only indices >= 9000 never written");
    }

    #[test]
    fn large_comparison_is_fast() {
        let d = Dims::dense(1, 4096, 4096);
        let (got, want) = make(&d, |_, r, c| r == 4000 && c == 17, off);
        let t0 = std::time::Instant::now();
        let c = compare(&got, &want, &d, &tol());
        let dt = t0.elapsed();
        eprintln!("2^24-element f32 comparison: {dt:?}");
        assert_eq!(c.wrong, 1);
        assert!(dt.as_secs_f64() < 20.0);
    }

    /// 2^28 elements; run with `cargo test --release -- --ignored --nocapture`.
    #[test]
    #[ignore = "slow in debug builds: run with cargo test --release -- --ignored"]
    fn huge_comparison_timing() {
        let n = 1usize << 28;
        let d = Dims::dense(4, 8192, 8192);
        let want: Vec<f32> = (0..n).map(|i| val(i & 0xFFFF)).collect();
        let mut got = want.clone();
        got[12345] += 1.0;
        let t0 = std::time::Instant::now();
        let c = compare(&got, &want, &d, &tol());
        eprintln!("2^28-element f32 comparison: {:?}", t0.elapsed());
        assert_eq!(c.wrong, 1);
        let gb: Vec<bf16> = want.iter().map(|&x| bf16::from_f32(x)).collect();
        let t0 = std::time::Instant::now();
        let c = compare(
            &gb,
            &want,
            &d,
            &ElementTolerance {
                rtol: 1e-2,
                atol: 1e-3,
            },
        );
        eprintln!("2^28-element bf16-vs-f32 comparison: {:?}", t0.elapsed());
        assert!(c.passed());
    }

    #[test]
    fn json_round_trip_with_non_finite() {
        let d = Dims::dense(1, 2, 2);
        let want = [1.0f32, f32::INFINITY, 3.0, 4.0];
        let got = [f32::NAN, 2.0, f32::poison(), 1e30];
        let c = compare(&got, &want, &d, &tol());
        let json = serde_json::to_string(&c).unwrap();
        assert!(
            json.contains("\"NaN\"") && json.contains("\"inf\""),
            "{json}"
        );
        let back: Comparison = serde_json::from_str(&json).unwrap();
        assert_eq!(back.first_wrong.len(), 4);
        assert!(back.first_wrong[0].got.is_nan());
        assert_eq!(back.first_wrong[1].want, f64::INFINITY);
        assert!(back.first_wrong[2].unwritten);
        assert_eq!(back.verdict(), Verdict::PartialWrite);
        assert_eq!(back.report(), c.report());
        // Legacy null from a plain f64 field reads back as NaN.
        let m: Mismatch =
            serde_json::from_str(r#"{"batch":0,"row":1,"col":2,"got":null,"want":2}"#).unwrap();
        assert!(m.got.is_nan() && m.want == 2.0 && !m.unwritten);
    }

    #[test]
    fn precision_hints() {
        let sample =
            |x: f64| -> Vec<f64> { (0..101).map(|i| x * (0.5 + i as f64 / 100.0)).collect() };
        let h = |x: f64| precision_hint(&sample(x)).unwrap();
        assert!(h(1e-7).contains("consistent with fp32"), "{}", h(1e-7));
        assert!(h(3e-4).contains("tf32 or fp16 inputs"), "{}", h(3e-4));
        assert!(h(4e-3).contains("bf16 inputs"), "{}", h(4e-3));
        assert!(h(1e-5).contains("between fp32 and tf32"));
        assert!(h(5e-2).contains("more error than bf16"));
        let mut s = sample(1e-7);
        s.push(0.5);
        assert!(precision_hint(&s).unwrap().contains("outliers up to 0.5"));
        assert_eq!(precision_hint(&[f64::NAN]), None);
        assert_eq!(precision_hint(&[]), None);
    }

    /// The device comparison's rules, on the host: counts, extremes, the first 8 bad
    /// elements in index order, the worst wrong one (largest error, lowest index) and the
    /// bins. A summary made this way must give the same report as `compare`.
    fn summarize(got: &[f32], want: &[f32], d: &Dims, tol: &ElementTolerance) -> Summary {
        let bins = Binning::for_dims(d);
        let mut s = Summary::default();
        let new_bins = || BinCounts {
            rows: vec![0; bins.rows],
            cols: vec![0; bins.cols],
            batches: vec![0; bins.batches],
            tiles: vec![0; bins.tile_rows * bins.tile_cols],
        };
        let mut worst: Option<(f64, Mismatch)> = None;
        for b in 0..d.batch {
            for r in 0..d.rows {
                for c in 0..d.cols {
                    let i = (b * d.rows + r) * d.cols + c;
                    s.checked += 1;
                    let (x, y) = (f64::from(got[i]), f64::from(want[i]));
                    if x.is_finite() && y.is_finite() {
                        s.max_abs_err = s.max_abs_err.max((x - y).abs());
                        if y != 0.0 {
                            s.max_rel_err = s.max_rel_err.max((x - y).abs() / y.abs());
                        }
                    }
                    let poisoned = got[i].is_poison_bits();
                    let Some(f) = judge(poisoned, x, y, 0.0, tol) else {
                        continue;
                    };
                    let m = Mismatch {
                        batch: b,
                        row: r,
                        col: c,
                        got: x,
                        want: y,
                        unwritten: poisoned,
                    };
                    let target = match f {
                        Fault::Unwritten => {
                            s.unwritten += 1;
                            s.unwritten_bins.get_or_insert_with(new_bins)
                        }
                        Fault::Value { non_finite, err } => {
                            s.wrong += 1;
                            if non_finite {
                                s.nan_or_inf += 1;
                            }
                            if worst.as_ref().is_none_or(|(e, _)| err > *e) {
                                worst = Some((err, m.clone()));
                            }
                            s.wrong_bins.get_or_insert_with(new_bins)
                        }
                    };
                    target.rows[r >> bins.rs] += 1;
                    target.cols[c >> bins.cs] += 1;
                    target.batches[b >> bins.bs] += 1;
                    target.tiles[(r >> bins.ts) * bins.tile_cols + (c >> bins.ts)] += 1;
                    if s.first.len() < 8 {
                        s.first.push(m);
                    }
                }
            }
        }
        s.worst = worst.map(|(_, m)| m);
        s
    }

    #[test]
    fn a_device_summary_gives_the_same_report() {
        type Bad = Box<dyn Fn(usize, usize, usize) -> bool>;
        type Case = (Dims, Bad, fn(f32) -> f32);
        let cases: Vec<Case> = vec![
            (
                Dims::dense(1, 300, 200),
                Box::new(|_, r, c| r >= 256 || c >= 192),
                |_| f32::poison(),
            ),
            (
                Dims::dense(2, 128, 640),
                Box::new(|_, _, c| c % 64 == 63),
                off,
            ),
            (
                Dims::dense(3, 64, 64),
                Box::new(|b, r, _| b == 1 && r > 10),
                |_| f32::NAN,
            ),
            (
                Dims::dense(1, 1000, 1),
                Box::new(|_, r, _| r % 97 == 5),
                off,
            ),
            (Dims::dense(1, 50, 50), Box::new(|_, _, _| false), off),
        ];
        for (d, bad, f) in cases {
            let (got, want) = make(&d, bad, f);
            let host = compare(&got, &want, &d, &tol());
            let summary = summarize(&got, &want, &d, &tol());
            // A summary survives JSON (it crosses the process boundary).
            let back: Summary =
                serde_json::from_str(&serde_json::to_string(&summary).unwrap()).unwrap();
            let dev = Comparison::from_summary(&back, &d, &tol(), "f32", "f32");
            assert_eq!(dev.pattern, host.pattern);
            assert_eq!(dev.report(), host.report());
            assert_eq!(
                (dev.wrong, dev.unwritten, dev.nan_or_inf),
                (host.wrong, host.unwritten, host.nan_or_inf)
            );
            assert_eq!(dev.verdict(), host.verdict());
        }
    }
}
