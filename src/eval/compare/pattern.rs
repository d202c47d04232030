//! The pattern of the bad elements in one sentence: scattered, whole rows or columns,
//! every k-th column, trailing or full tiles, one batch: what a person (or a model)
//! needs to guess the bug.

use super::{pct, truncate_chars, Acc, Geo, Maps, Mismatch, MAX_PATTERN_CHARS};

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
pub(super) fn pattern(g: &Geo, acc: &Acc) -> String {
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
