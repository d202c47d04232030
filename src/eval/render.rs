//! Evaluations as text: the report `cutesmith check` prints, each session keeps as
//! `versions/vNNN/evaluation.txt`, and the debug prompt quotes. One rendering for every
//! front end.

use super::job::{ShapeValidation, Stats, TimingReport};
use super::Evaluation;

impl Evaluation {
    /// The text report of an evaluation.
    pub fn render(&self) -> String {
        render(self)
    }
}

fn render(e: &Evaluation) -> String {
    let mut s = String::new();
    if let Some(r) = &e.report {
        if let Some(d) = &r.device {
            s.push_str(&format!(
                "device: {} ({} SMs, sm_{}{})\n",
                d.name, d.sm_count, d.compute_capability.0, d.compute_capability.1
            ));
        }
        if let Some(c) = &r.ceilings {
            s.push_str(&format!(
                "ceilings: copy {:.2} TB/s (measured), peak {}\n",
                c.copy_bytes_per_s / 1e12,
                c.peak_note
            ));
        }
        for v in &r.validations {
            s.push_str(&validation_line(v));
        }
        if let Some(t) = &r.timing {
            s.push_str(&render_timing(t));
        }
        if let Some(v) = &r.revalidation {
            s.push_str("after timing, on fresh inputs:\n");
            s.push_str(&validation_line(v));
        }
        for n in &r.notes {
            s.push_str(&format!("note: {n}\n"));
        }
    }
    match &e.fault {
        Some(f) => {
            s.push_str(&format!("FAULT: {}\n", f.kind.name()));
            for l in f.message.lines() {
                s.push_str(&format!("  {l}\n"));
            }
        }
        None if e.passed() => s.push_str("result: correct on every shape and seed\n"),
        None => {}
    }
    if e.report.is_none() && !e.stderr_tail.is_empty() {
        s.push_str(&format!("worker stderr:\n{}\n", e.stderr_tail));
    }
    s
}

fn validation_line(v: &ShapeValidation) -> String {
    let status = if v.passed { "ok" } else { "FAILED" };
    let detail = match &v.comparison {
        Some(c) => format!(
            "max abs err {:.3e}, max rel err {:.3e}",
            c.max_abs_err, c.max_rel_err
        ),
        None => String::new(),
    };
    let fp64 = v
        .fp64
        .as_ref()
        .map(|f| {
            let acc = f
                .accuracy
                .map(|a| {
                    format!(
                        "; error vs fp64: max {:.2e} rms {:.2e} (cuBLAS fp32: max {:.2e} rms {:.2e}, ratio {:.2})",
                        a.max,
                        a.rms,
                        a.library_max,
                        a.library_rms,
                        a.rms_ratio()
                    )
                })
                .unwrap_or_default();
            format!(
                ", fp64 check {}/{} within {:.1e}{acc}",
                f.samples - f.failed,
                f.samples,
                f.bound
            )
        })
        .unwrap_or_default();
    format!("  {} seed {}: {status} {detail}{fp64}\n", v.shape, v.seed)
}

pub fn render_timing(t: &TimingReport) -> String {
    let mut s = format!(
        "timing {} ({:.3} GFLOP, {:.1} MB minimum traffic, roofline floor {:.2} us):\n",
        t.shape,
        t.flops / 1e9,
        t.min_bytes / 1e6,
        t.floor_s * 1e6
    );
    s.push_str("  | who | median us | p10-p90 us | TFLOP/s | TB/s | speedup of candidate |\n");
    s.push_str("  | --- | --- | --- | --- | --- | --- |\n");
    let row = |name: &str, st: &Stats, sp: Option<f64>| {
        let sec = st.median_us * 1e-6;
        format!(
            "  | {name} | {:.2} | {:.2}-{:.2} | {:.1} | {:.2} | {} |\n",
            st.median_us,
            st.p10_us,
            st.p90_us,
            t.flops / sec / 1e12,
            t.min_bytes / sec / 1e12,
            sp.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
        )
    };
    if let Some(c) = &t.candidate {
        s.push_str(&row("candidate", c, None));
    }
    for b in &t.baselines {
        s.push_str(&row(&b.name, &b.stats, b.speedup));
        if let Some(n) = &b.note {
            s.push_str(&format!("    ({}: {n})\n", b.name));
        }
    }
    if let Some(f) = t.roofline_fraction {
        s.push_str(&format!(
            "  candidate at {:.0}% of the roofline floor\n",
            f * 100.0
        ));
    }
    s
}
