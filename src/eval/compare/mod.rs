//! The validate stage: compares a candidate kernel's output (copied to the host) with a
//! reference, element by element under a tolerance, tells unwritten elements (still the
//! harness's NaN poison) from computed NaN/Inf and from plain value errors, and writes a
//! short mismatch report with the spatial pattern of the bad elements, for a person and
//! for the LLM's next prompt. It also owns the element poison patterns and the precision
//! hint that reads normalized GEMM errors. Pure CPU code.

use std::fmt::{self, Write as _};
use std::ops::Range;

use serde::{Deserialize, Serialize};

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

/// An output element type the validator reads, so one comparison routine serves every
/// dtype the harness moves (and a reference of another type).
pub trait Element: Copy + Send + Sync {
    /// Short type name for reports ("f32", "bf16", ...).
    const NAME: &'static str;
    /// The value, widened exactly to f64, so comparisons happen in one precision.
    fn to_f64(self) -> f64;
    /// True when the bits are exactly the harness's poison NaN, i.e. the element was never
    /// written; a NaN computed by the kernel has other bits (canonical NaN).
    fn is_poison_bits(self) -> bool;
    /// The poison NaN the harness fills outputs with before a launch.
    fn poison() -> Self;
}

/// The poison NaN for `T`, for callers that prefer a free function.
pub fn poison<T: Element>() -> T {
    T::poison()
}

const F32_POISON: u32 = 0x7FC0_0001;
const F64_POISON: u64 = 0x7FF8_0000_0000_0001;
const BF16_POISON: u16 = 0x7FC1;
const F16_POISON: u16 = 0x7E01;

impl Element for f32 {
    const NAME: &'static str = "f32";
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn is_poison_bits(self) -> bool {
        self.to_bits() == F32_POISON
    }
    fn poison() -> Self {
        f32::from_bits(F32_POISON)
    }
}

impl Element for f64 {
    const NAME: &'static str = "f64";
    fn to_f64(self) -> f64 {
        self
    }
    fn is_poison_bits(self) -> bool {
        self.to_bits() == F64_POISON
    }
    fn poison() -> Self {
        f64::from_bits(F64_POISON)
    }
}

impl Element for half::bf16 {
    const NAME: &'static str = "bf16";
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
    fn is_poison_bits(self) -> bool {
        self.to_bits() == BF16_POISON
    }
    fn poison() -> Self {
        half::bf16::from_bits(BF16_POISON)
    }
}

impl Element for half::f16 {
    const NAME: &'static str = "f16";
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    fn is_poison_bits(self) -> bool {
        self.to_bits() == F16_POISON
    }
    fn poison() -> Self {
        half::f16::from_bits(F16_POISON)
    }
}

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

/// How close is close enough: an element passes when |got - want| <= atol + rtol * |want|;
/// a NaN reference needs a NaN, an infinite one the same infinity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    /// Relative tolerance (scaled by |want|).
    #[serde(with = "float_serde")]
    pub rtol: f64,
    /// Absolute tolerance.
    #[serde(with = "float_serde")]
    pub atol: f64,
}

impl Tolerance {
    /// The full acceptance rule for one (already written) element, so tests and other
    /// stages apply exactly what `compare` applies.
    pub fn accepts(&self, got: f64, want: f64) -> bool {
        if want.is_nan() {
            got.is_nan()
        } else if want.is_infinite() {
            got == want
        } else {
            got.is_finite() && (got - want).abs() <= self.atol + self.rtol * want.abs()
        }
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
    pub tol: Tolerance,
    /// Elements examined (batch * rows * cols).
    pub checked: u64,
    /// Value mismatches, excluding unwritten elements; includes `nan_or_inf`.
    pub wrong: u64,
    /// Elements still holding the poison (never written).
    pub unwritten: u64,
    /// Elements that are NaN/Inf where the reference is finite (a subset of `wrong`).
    pub nan_or_inf: u64,
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
        self.wrong == 0 && self.unwritten == 0
    }

    /// The one-word outcome, with precedence PartialWrite > NanInf > Mismatch.
    pub fn verdict(&self) -> Verdict {
        if self.unwritten > 0 {
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
    tol: &Tolerance,
) -> Comparison {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    compare_with_threads(got, want, dims, tol, threads)
}

fn compare_with_threads<G: Element, W: Element>(
    got: &[G],
    want: &[W],
    dims: &Dims,
    tol: &Tolerance,
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
        vec![run_chunk(got, want, dims, &geo, tol, 0..n)]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let range = (t * chunk).min(n)..((t + 1) * chunk).min(n);
                    let geo = &geo;
                    s.spawn(move || run_chunk(got, want, dims, geo, tol, range))
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
    out.out_of_bounds = total.oob;
    out.max_abs_err = total.max_abs;
    out.max_rel_err = total.max_rel;
    out.pattern = pattern(&geo, &total);
    out.worst = total.worst.map(|(_, m)| m);
    out.first_wrong = total.first;
    out
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
fn judge(poisoned: bool, got: f64, want: f64, tol: &Tolerance) -> Option<Fault> {
    if poisoned {
        return Some(Fault::Unwritten);
    }
    if tol.accepts(got, want) {
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
    fn segment<G: Element, W: Element>(
        &mut self,
        g: &Geo,
        tol: &Tolerance,
        b: usize,
        r: usize,
        c0: usize,
        gs: &[G],
        ws: &[W],
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
                if d <= atol + rtol * ay {
                    continue;
                }
            }
            if let Some(f) = judge(gv.is_poison_bits(), x, y, tol) {
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
        tol: &Tolerance,
        (b, r): (usize, usize),
        cols: Range<usize>,
        gbase: Option<usize>,
        wbase: Option<usize>,
        got: &[G],
        want: &[W],
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
                    if let Some(f) = judge(gv.is_poison_bits(), x, y, tol) {
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
    d: &Dims,
    g: &Geo,
    tol: &Tolerance,
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
        match (gs, ws) {
            (Some(gs), Some(ws)) => acc.segment(g, tol, b, r, c0, gs, ws),
            _ => acc.segment_checked(g, tol, (b, r), c0..c1, gbase, wbase, got, want),
        }
        e += c1 - c0;
    }
    acc
}

// ---------------------------------------------------------------------------------------
// Pattern: one sentence about where the bad elements are.
// ---------------------------------------------------------------------------------------

/// A view of one axis's bad counts.
struct Axis<'a> {
    counts: &'a [u64],
    shift: u32,
    len: usize,
    names: Names,
}

#[derive(Clone, Copy)]
struct Names {
    sing: &'static str,
    plural: &'static str,
    var: &'static str,
}

impl Axis<'_> {
    fn width(&self, i: usize) -> usize {
        let lo = i << self.shift;
        ((i + 1) << self.shift).min(self.len).saturating_sub(lo)
    }
    fn bad_bins(&self) -> Vec<usize> {
        (0..self.counts.len())
            .filter(|&i| self.counts[i] > 0)
            .collect()
    }
    /// Bins whose every element (over `per_unit` elements per index) is bad.
    fn full_bins(&self, per_unit: u64) -> Vec<usize> {
        (0..self.counts.len())
            .filter(|&i| self.counts[i] > 0 && self.counts[i] == self.width(i) as u64 * per_unit)
            .collect()
    }
    fn units(&self, bins: &[usize]) -> u64 {
        bins.iter().map(|&i| self.width(i) as u64).sum()
    }
    fn describe(&self, bins: &[usize]) -> Option<SetDesc> {
        describe_set(bins, self.shift, self.len, self.names)
    }
}

/// A described index set; `periodic` sets read without "only".
struct SetDesc {
    text: String,
    periodic: bool,
}

impl SetDesc {
    fn np(&self) -> String {
        if self.periodic {
            self.text.clone()
        } else {
            format!("only {}", self.text)
        }
    }
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Contiguous unit ranges (inclusive) covered by sorted bins.
fn unit_ranges(bins: &[usize], shift: u32, len: usize) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &i in bins {
        let lo = i << shift;
        let hi = (((i + 1) << shift).min(len)).saturating_sub(1);
        match out.last_mut() {
            Some(last) if last.1 + 1 == lo => last.1 = hi,
            _ => out.push((lo, hi)),
        }
    }
    out
}

fn fmt_range(lo: usize, hi: usize, len: usize, n: Names) -> String {
    if lo == hi {
        format!("{} {lo}", n.sing)
    } else if hi + 1 == len && lo > 0 {
        format!("{} >= {lo}", n.plural)
    } else {
        format!("{} {lo}..{hi}", n.plural)
    }
}

fn count_residue(q: usize, p: usize, len: usize) -> usize {
    if q >= len {
        0
    } else {
        (len - 1 - q) / p + 1
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Periodic structure of an exact (unbinned) sorted index set with >= 3 members.
fn periodic(set: &[usize], len: usize, n: Names) -> Option<String> {
    let (first, last) = (*set.first()?, *set.last()?);
    // Union of residue classes modulo a power of two (each class fully bad).
    let mut p = 2;
    while p <= len / 2 {
        let mut mark = vec![false; p];
        for &s in set {
            mark[s % p] = true;
        }
        let res: Vec<usize> = (0..p).filter(|&q| mark[q]).collect();
        if res.len() < p
            && res.iter().map(|&q| count_residue(q, p, len)).sum::<usize>() == set.len()
        {
            let v = n.var;
            return Some(if res.len() == 1 {
                format!("every {} {} ({v} % {p} == {})", ordinal(p), n.sing, res[0])
            } else if res[res.len() - 1] - res[0] + 1 == res.len() {
                format!(
                    "{} with {v} % {p} in {}..{}",
                    n.plural,
                    res[0],
                    res[res.len() - 1]
                )
            } else {
                let shown: Vec<String> = res.iter().take(4).map(|q| q.to_string()).collect();
                let more = if res.len() > 4 { ", ..." } else { "" };
                format!(
                    "{} with {v} % {p} in {{{}{more}}}",
                    n.plural,
                    shown.join(", ")
                )
            });
        }
        p *= 2;
    }
    // Arithmetic progression with any step.
    let step = set[1] - set[0];
    if step >= 2 && set.windows(2).all(|w| w[1] - w[0] == step) {
        return Some(if first < step && last + step >= len {
            format!(
                "every {} {} ({} % {step} == {first})",
                ordinal(step),
                n.sing,
                n.var
            )
        } else {
            format!(
                "{} {first}, {}, ..., {last} (every {})",
                n.plural,
                first + step,
                ordinal(step)
            )
        });
    }
    // A subset of one residue class.
    let g = set.iter().fold(0, |acc, &s| gcd(acc, s - first));
    if g >= 2 {
        return Some(format!(
            "{} with {} % {g} == {} ({} of {} such)",
            n.plural,
            n.var,
            first % g,
            set.len(),
            count_residue(first % g, g, len)
        ));
    }
    None
}

fn describe_set(bins: &[usize], shift: u32, len: usize, n: Names) -> Option<SetDesc> {
    let ranges = unit_ranges(bins, shift, len);
    if ranges.len() == 1 {
        let (lo, hi) = ranges[0];
        return Some(SetDesc {
            text: fmt_range(lo, hi, len, n),
            periodic: false,
        });
    }
    if shift == 0 && bins.len() >= 3 {
        if let Some(text) = periodic(bins, len, n) {
            return Some(SetDesc {
                text,
                periodic: true,
            });
        }
    }
    if (2..=3).contains(&ranges.len()) {
        let parts: Vec<String> = ranges
            .iter()
            .map(|&(lo, hi)| {
                if lo == hi {
                    lo.to_string()
                } else {
                    format!("{lo}..{hi}")
                }
            })
            .collect();
        return Some(SetDesc {
            text: format!("{} {}", n.plural, parts.join(", ")),
            periodic: false,
        });
    }
    None
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

/// Words that depend on what kind of bad elements there are.
struct Voice {
    verb: &'static str,
    noun: &'static str,
}

const UNWRITTEN: Voice = Voice {
    verb: "never written",
    noun: "unwritten elements",
};
const WRONG: Voice = Voice {
    verb: "wrong",
    noun: "wrong elements",
};

/// The pattern sentence: unwritten elements and wrong elements described separately (the
/// unwritten part first), each from its own map.
fn pattern(g: &Geo, acc: &Acc) -> String {
    let total = acc.checked;
    if total == 0 {
        return "no elements to check".to_string();
    }
    if acc.wrong == 0 && acc.unwritten == 0 {
        return "no wrong elements".to_string();
    }
    let mut parts = Vec::new();
    if acc.unwritten > 0 {
        let example = acc.first.iter().find(|m| m.unwritten);
        let body = describe_kind(
            g,
            acc.maps_unwritten.as_ref(),
            example,
            total,
            acc.unwritten,
            &UNWRITTEN,
        );
        parts.push(format!("unwritten: {body}"));
    }
    if acc.wrong > 0 {
        let example = acc.worst.as_ref().map(|(_, m)| m);
        let body = describe_kind(
            g,
            acc.maps_wrong.as_ref(),
            example,
            total,
            acc.wrong,
            &WRONG,
        );
        parts.push(if acc.unwritten > 0 {
            format!("wrong: {body}")
        } else {
            body
        });
    }
    let mut s = parts.join("; ");
    truncate_chars(&mut s, MAX_PATTERN_CHARS);
    s
}

/// One kind of bad element; `example` is one such element (used when it is the only one).
fn describe_kind(
    g: &Geo,
    maps: Option<&Maps>,
    example: Option<&Mismatch>,
    total: u64,
    bad: u64,
    voice: &Voice,
) -> String {
    if bad >= total {
        return format!("all elements {}", voice.verb);
    }
    match (maps, example) {
        (_, Some(f)) if bad == 1 => format!(
            "a single element {} at (batch, row, col) = ({}, {}, {})",
            voice.verb, f.batch, f.row, f.col
        ),
        (Some(m), _) => structure(g, m, bad, voice),
        (None, _) => scattered(bad, total, voice),
    }
}

fn scattered(bad: u64, total: u64, v: &Voice) -> String {
    let frac = bad as f64 / total as f64;
    if frac < 0.05 {
        let why = if v.verb == UNWRITTEN.verb {
            "looks like a race or a wrong store predicate"
        } else {
            "looks like a race or uninitialized reads"
        };
        format!(
            "scattered: {} of elements ({bad}) {}, no row/column structure ({why})",
            pct(bad, total),
            v.verb
        )
    } else {
        format!(
            "widespread: {} of elements ({bad}) {} with no row/column structure (looks like wrong indexing, layout or formula)",
            pct(bad, total),
            v.verb
        )
    }
}

fn structure(g: &Geo, m: &Maps, bad: u64, v: &Voice) -> String {
    let batches = Axis {
        counts: &m.batches,
        shift: g.bs,
        len: g.batch,
        names: Names {
            sing: "batch",
            plural: "batches",
            var: "b",
        },
    };
    let bad_batches = batches.bad_bins();
    let nb = batches.units(&bad_batches);
    let plane = (g.rows * g.cols) as u64;
    let mut lead = String::new();
    if g.batch > 1 && (nb as usize) < g.batch {
        let entire = bad == nb * plane;
        match batches.describe(&bad_batches) {
            Some(d) if entire => {
                let s = if nb > 1 { "es" } else { "" };
                return format!("{} {} (entire batch{s})", d.np(), v.verb);
            }
            Some(d) => {
                let them = if nb > 1 { "them" } else { "it" };
                lead = format!("{} {}; within {them}: ", d.np(), v.verb);
            }
            None if entire => {
                return format!(
                    "{nb} of {} batches entirely {}, the others correct",
                    g.batch, v.verb
                );
            }
            None => {}
        }
    }
    format!("{lead}{}", within(g, m, bad, nb, v))
}

/// The structure of bad elements inside the (bad) batches, aggregated over them.
fn within(g: &Geo, m: &Maps, bad: u64, nb: u64, v: &Voice) -> String {
    let one_d = g.rows == 1;
    let rows = Axis {
        counts: &m.rows,
        shift: g.rs,
        len: g.rows,
        names: Names {
            sing: "row",
            plural: "rows",
            var: "r",
        },
    };
    let cols = Axis {
        counts: &m.cols,
        shift: g.cs,
        len: g.cols,
        names: if one_d {
            Names {
                sing: "index",
                plural: "indices",
                var: "i",
            }
        } else {
            Names {
                sing: "column",
                plural: "columns",
                var: "c",
            }
        },
    };
    let (nr, nc) = (g.rows as u64, g.cols as u64);
    let row_bad = rows.bad_bins();
    let col_bad = cols.bad_bins();
    let row_full = rows.full_bins(nc * nb);
    let col_full = cols.full_bins(nr * nb);
    let (ru, cu) = (rows.units(&row_bad), cols.units(&col_bad));

    // (a) whole rows, (b) whole columns.
    if !one_d && row_full.len() == row_bad.len() {
        if let Some(d) = rows.describe(&row_bad) {
            return format!("{} {} (entire rows)", d.np(), v.verb);
        }
    }
    if col_full.len() == col_bad.len() {
        if let Some(d) = cols.describe(&col_bad) {
            let tail = if one_d { "" } else { " (entire columns)" };
            return format!("{} {}{tail}", d.np(), v.verb);
        }
    }
    // (c) a full block: bad rows x bad columns.
    if !one_d && bad == nb * ru * cu {
        if let (Some(dr), Some(dc)) = (rows.describe(&row_bad), cols.describe(&col_bad)) {
            return format!(
                "only the block {} x {} {} (entirely)",
                dr.text, dc.text, v.verb
            );
        }
    }
    // (d) whole rows plus whole columns (an L or a cross).
    if !one_d && !row_full.is_empty() && !col_full.is_empty() {
        let (rf, cf) = (rows.units(&row_full), cols.units(&col_full));
        if bad == nb * (rf * nc + cf * nr - rf * cf) {
            if let Some(s) = trailing_tiles(&rows, &row_full, &cols, &col_full, v) {
                return s;
            }
            if let (Some(dr), Some(dc)) = (rows.describe(&row_full), cols.describe(&col_full)) {
                return format!(
                    "{} and {} {} (entire rows and columns)",
                    dr.text, dc.text, v.verb
                );
            }
        }
    }
    // (e) a union of entire tiles (128 first, then 64).
    if !one_d {
        for t in [g.ts + 1, g.ts] {
            if let Some(s) = full_tiles(g, m, bad, nb, t, v) {
                return s;
            }
        }
    }
    // (f) confined to some rows and/or columns.
    let rdesc = if ru < nr && !one_d {
        rows.describe(&row_bad)
    } else {
        None
    };
    let cdesc = if cu < nc {
        cols.describe(&col_bad)
    } else {
        None
    };
    match (rdesc, cdesc) {
        (Some(r), Some(c)) => {
            return format!(
                "only {} x {} {} ({} of that block)",
                r.text,
                c.text,
                v.verb,
                pct(bad, nb * ru * cu)
            );
        }
        (Some(r), None) => {
            return format!(
                "{} {} ({} of their elements)",
                r.np(),
                v.verb,
                pct(bad, nb * ru * nc)
            );
        }
        (None, Some(c)) => {
            return format!(
                "{} {} ({} of their elements)",
                c.np(),
                v.verb,
                pct(bad, nb * cu * nr)
            );
        }
        (None, None) => {}
    }
    // (g) confined to a few tiles.
    if !one_d {
        let touched: Vec<usize> = (0..m.tiles.len()).filter(|&i| m.tiles[i] > 0).collect();
        let all = m.tiles.len();
        if touched.len() <= 4 && touched.len() * 4 <= all {
            let t = 1usize << g.ts;
            let list: Vec<String> = touched
                .iter()
                .map(|&i| format!("({},{})", i / g.ntc, i % g.ntc))
                .collect();
            return format!(
                "{} confined to {} of {}x{} tiles of {t}x{t}: {}",
                v.noun,
                touched.len(),
                g.ntr,
                g.ntc,
                list.join(", ")
            );
        }
    }
    // (h) no structure.
    scattered(bad, nb * nr * nc, v)
}

/// "the last k row tiles and last k column tiles of T (rows >= a, columns >= b)".
fn trailing_tiles(
    rows: &Axis,
    row_full: &[usize],
    cols: &Axis,
    col_full: &[usize],
    v: &Voice,
) -> Option<String> {
    let rr = unit_ranges(row_full, rows.shift, rows.len);
    let cr = unit_ranges(col_full, cols.shift, cols.len);
    let (&[(rlo, rhi)], &[(clo, chi)]) = (rr.as_slice(), cr.as_slice()) else {
        return None;
    };
    if rhi + 1 != rows.len || chi + 1 != cols.len || rlo == 0 || clo == 0 {
        return None;
    }
    let t = [128usize, 64]
        .into_iter()
        .find(|t| rlo % t == 0 && clo % t == 0)?;
    let kr = (rows.len - rlo).div_ceil(t);
    let kc = (cols.len - clo).div_ceil(t);
    let s = |k: usize| if k == 1 { "" } else { "s" };
    Some(format!(
        "the last {kr} row tile{} and last {kc} column tile{} of {t} (rows >= {rlo}, columns >= {clo}) {}",
        s(kr),
        s(kc),
        v.verb
    ))
}

/// Bad elements exactly fill some tiles of 2^t x 2^t.
fn full_tiles(g: &Geo, m: &Maps, bad: u64, nb: u64, t: u32, v: &Voice) -> Option<String> {
    let f = 1usize << (t - g.ts); // base tiles per tile side
    let (ntr, ntc) = (g.ntr.div_ceil(f), g.ntc.div_ceil(f));
    let side = 1usize << t;
    let mut full = Vec::new();
    let mut sum = 0u64;
    for tr in 0..ntr {
        for tc in 0..ntc {
            let mut cnt = 0u64;
            for br in tr * f..((tr + 1) * f).min(g.ntr) {
                for bc in tc * f..((tc + 1) * f).min(g.ntc) {
                    cnt += m.tiles[br * g.ntc + bc];
                }
            }
            if cnt == 0 {
                continue;
            }
            let h = ((tr + 1) * side).min(g.rows) - tr * side;
            let w = ((tc + 1) * side).min(g.cols) - tc * side;
            if cnt != (h * w) as u64 * nb {
                return None;
            }
            full.push((tr, tc));
            sum += cnt;
        }
    }
    if sum != bad || full.is_empty() || full.len() == ntr * ntc {
        return None;
    }
    let mut list: Vec<String> = full
        .iter()
        .take(4)
        .map(|(a, b)| format!("({a},{b})"))
        .collect();
    if full.len() > 4 {
        list.push("...".to_string());
    }
    Some(format!(
        "{} of {ntr}x{ntc} tiles of {side}x{side} entirely {}: {}",
        full.len(),
        v.verb,
        list.join(", ")
    ))
}

// ---------------------------------------------------------------------------------------
// Formatting helpers.
// ---------------------------------------------------------------------------------------

/// A compact number: plain for moderate magnitudes, scientific otherwise.
fn fmt_num(x: f64) -> String {
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

/// Serde for f64 that survives JSON: non-finite values become "NaN", "inf", "-inf".
mod float_serde {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Num(f64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match Option::<Repr>::deserialize(d)? {
            None => Ok(f64::NAN),
            Some(Repr::Num(x)) => Ok(x),
            Some(Repr::Text(t)) => match t.to_ascii_lowercase().as_str() {
                "nan" => Ok(f64::NAN),
                "inf" | "+inf" | "infinity" | "+infinity" => Ok(f64::INFINITY),
                "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
                other => Err(D::Error::custom(format!("not a number: {other:?}"))),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------
// Precision hint.
// ---------------------------------------------------------------------------------------

/// fp32 (or fp64) arithmetic: unit roundoff 2^-24 ~ 6e-8; up to 1e-6 allows for fp32
/// accumulation over long reductions.
const FP32_MAX: f64 = 1e-6;
/// Below this (and above FP32_MAX) the error is between fp32 and 10-bit-mantissa levels.
const MIXED_MAX: f64 = 5e-5;
/// tf32 or fp16 inputs: 10 explicit mantissa bits, unit roundoff 2^-11 ~ 4.9e-4; the
/// upper edge sits at the geometric mean of 2^-11 and 2^-8.
const TF32_MAX: f64 = 1.4e-3;
/// bf16 inputs: 7 explicit mantissa bits, unit roundoff 2^-8 ~ 3.9e-3.
const BF16_MAX: f64 = 1e-2;

/// Says which arithmetic a GEMM's errors are consistent with, so a "wrong" result that is
/// merely reduced precision (tf32, bf16, fp16 inputs) is told from a real bug.
///
/// Input: sampled errors normalized as |got - ref_fp64| / sum_k |a_ik * b_kj|. The median
/// is classified: <= 1e-6 fp32/fp64; <= 5e-5 between fp32 and tf32 (partly reduced
/// precision); <= 1.4e-3 tf32 or fp16 inputs (u = 2^-11 ~ 4.9e-4); <= 1e-2 bf16 inputs
/// (u = 2^-8 ~ 3.9e-3); above, more than bf16 rounding explains. A max above 1e-2 and
/// 100x the median is flagged as outliers (some elements really wrong). Note: for
/// random-sign data rounding errors partly cancel, so this statistic falls below u by up
/// to ~sqrt(K) for long reductions; the bands assume errors near u. Returns None when no
/// finite, non-negative sample is given.
pub fn precision_hint(normalized_errors: &[f64]) -> Option<String> {
    let mut v: Vec<f64> = normalized_errors
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    };
    let max = v[n - 1];
    let class = if median <= FP32_MAX {
        "fp32 (or fp64) arithmetic"
    } else if median <= MIXED_MAX {
        "something between fp32 and tf32/fp16 rounding (reduced precision in part of the computation, or fp32 with unusual accumulation)"
    } else if median <= TF32_MAX {
        "tf32 or fp16 inputs (10 mantissa bits, unit roundoff 2^-11 ~ 4.9e-4)"
    } else if median <= BF16_MAX {
        "bf16 inputs (7 mantissa bits, unit roundoff 2^-8 ~ 3.9e-3)"
    } else {
        "more error than bf16 rounding explains (fp8 inputs, or a real bug)"
    };
    let mut s = format!(
        "normalized error median {}, max {} over {n} samples: consistent with {class}",
        fmt_num(median),
        fmt_num(max)
    );
    if max > BF16_MAX && max > 100.0 * median {
        s.push_str(&format!(
            "; outliers up to {} suggest some elements are really wrong",
            fmt_num(max)
        ));
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn tol() -> Tolerance {
        Tolerance {
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
        let t = Tolerance {
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
        let one = compare_with_threads(&got, &want, &d, &tol(), 1);
        for t in [2, 3, 7, 64] {
            assert_eq!(compare_with_threads(&got, &want, &d, &tol(), t), one);
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
            &Tolerance {
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
}
