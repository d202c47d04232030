//! `cutesmith report PATH...`: Markdown and a self-contained HTML page over one or more
//! sessions (a session directory, or a directory holding sessions such as `runs/`):
//! speedup against the vendor library and % of the roofline per workload, the time of
//! each accepted version through each session, and every version's strategy. Charts are
//! SVG drawn with plotters: inline in the HTML, files beside the Markdown.

mod charts;

use std::path::{Path, PathBuf};

use crate::agent::session::{SessionDir, SessionSpec, State};
use crate::error::{Error, Result};
use crate::eval::Evaluation;

/// One session as the report shows it.
pub struct Row {
    pub dir: SessionDir,
    pub spec: SessionSpec,
    pub state: State,
    pub device: String,
    pub goal: Option<(String, bool)>,
}

impl Row {
    fn best(&self) -> Option<&crate::agent::session::VersionRecord> {
        self.state.best.and_then(|b| self.state.version(b))
    }
    fn speedup(&self) -> Option<f64> {
        let b = self.best()?;
        Some(b.vendor_us? / b.median_us?)
    }
    fn label(&self) -> String {
        self.spec.workload.clone()
    }
}

/// Finds the sessions under `paths`, in name order.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Row>> {
    let mut dirs = Vec::new();
    for p in paths {
        if p.join("session.json").is_file() {
            dirs.push(p.clone());
        } else {
            let mut sub: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| Error::io(p, e))?
                .flatten()
                .map(|e| e.path())
                .filter(|d| d.join("session.json").is_file())
                .collect();
            sub.sort();
            dirs.extend(sub);
        }
    }
    if dirs.is_empty() {
        return Err(Error::Usage(format!(
            "no sessions (directories with a session.json) under {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    dirs.iter()
        .map(|d| {
            let dir = SessionDir::open(d)?;
            let spec = dir.load_spec()?;
            let state = dir.load_state()?;
            let device = dir
                .read_json::<Evaluation>(&dir.path("probe.json"))
                .ok()
                .and_then(|e| e.report?.device.map(|d| d.name))
                .unwrap_or_else(|| "unknown device".into());
            let goal = dir.goal(&state);
            Ok(Row {
                dir,
                spec,
                state,
                device,
                goal,
            })
        })
        .collect()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn fmt(x: Option<f64>, p: usize) -> String {
    x.map(|v| format!("{v:.p$}")).unwrap_or_else(|| "-".into())
}

/// Table rows as plain cells.
type Cells = Vec<Vec<String>>;

/// One row per version of a session (see [`VERSION_HEAD`]): the one version table the
/// report, the end of `run` and the interactive `history` show.
pub fn version_rows(state: &State) -> Cells {
    state
        .versions
        .iter()
        .map(|v| {
            vec![
                format!(
                    "v{}{}",
                    v.n,
                    if Some(v.n) == state.best {
                        " (best)"
                    } else {
                        ""
                    }
                ),
                v.origin.clone(),
                v.change.clone(),
                v.status.clone(),
                fmt(v.median_us, 2),
                fmt(v.vendor_us.zip(v.median_us).map(|(a, b)| a / b), 2),
                v.verdict.clone(),
            ]
        })
        .collect()
}

/// What one session cost: model calls, tokens, dollars, wall and GPU time, in one line.
pub fn cost_line(s: &crate::agent::machine::Spent) -> String {
    format!(
        "{} model calls, {} prompt + {} completion tokens, ${:.4}, {:.0} s wall, {:.0} s on the GPU",
        s.model_requests, s.prompt_tokens, s.completion_tokens, s.cost_usd, s.wall_s, s.gpu_s
    )
}

/// What a set of sessions cost together, and per result: tokens per session that reached
/// a correct kernel, model calls per accepted version.
pub fn cost_totals(states: &[&State]) -> String {
    let mut t = crate::agent::machine::Spent::default();
    let (mut correct, mut accepted) = (0u64, 0u64);
    for s in states {
        t.model_requests += s.spent.model_requests;
        t.prompt_tokens += s.spent.prompt_tokens;
        t.completion_tokens += s.spent.completion_tokens;
        t.cost_usd += s.spent.cost_usd;
        t.wall_s += s.spent.wall_s;
        t.gpu_s += s.spent.gpu_s;
        correct += u64::from(s.best.is_some());
        accepted += s.versions.iter().filter(|v| v.accepted).count() as u64;
    }
    let tokens = t.prompt_tokens + t.completion_tokens;
    let per = |x: u64, n: u64| {
        if n == 0 {
            "-".to_string()
        } else {
            format!("{:.0}", x as f64 / n as f64)
        }
    };
    format!(
        "{} sessions: {}; {} tokens per session with a correct kernel ({correct}), {} model calls per accepted version ({accepted})",
        states.len(),
        cost_line(&t),
        per(tokens, correct),
        if accepted == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", f64::from(t.model_requests) / accepted as f64)
        }
    )
}

/// The cost table's columns.
const COST_HEAD: [&str; 8] = [
    "workload",
    "session",
    "model calls",
    "prompt tokens",
    "completion tokens",
    "cost $",
    "wall s",
    "GPU s",
];

fn cost_rows(rows: &[Row]) -> Cells {
    rows.iter()
        .map(|r| {
            let s = &r.state.spent;
            vec![
                r.spec.workload.clone(),
                r.spec.id.clone(),
                s.model_requests.to_string(),
                s.prompt_tokens.to_string(),
                s.completion_tokens.to_string(),
                format!("{:.4}", s.cost_usd),
                format!("{:.0}", s.wall_s),
                format!("{:.0}", s.gpu_s),
            ]
        })
        .collect()
}

/// (summary rows, per-session (title, version rows)).
fn tables(rows: &[Row]) -> (Cells, Vec<(String, Cells)>) {
    let summary = rows
        .iter()
        .map(|r| {
            let b = r.best();
            vec![
                r.spec.workload.clone(),
                r.spec.id.clone(),
                r.device.clone(),
                b.map(|b| format!("v{}", b.n))
                    .unwrap_or_else(|| "none".into()),
                fmt(b.and_then(|b| b.median_us), 2),
                fmt(b.and_then(|b| b.vendor_us), 2),
                fmt(r.speedup(), 2),
                fmt(b.and_then(|b| b.roofline_fraction).map(|f| f * 100.0), 0),
                match &r.goal {
                    Some((g, true)) => format!("{g}: met"),
                    Some((g, false)) => format!("{g}: NOT met"),
                    None => "no correct version".into(),
                },
            ]
        })
        .collect();
    let per = rows
        .iter()
        .map(|r| {
            (
                format!(
                    "{} ({}){}",
                    r.spec.workload,
                    r.spec.id,
                    if r.spec.sandboxed {
                        ""
                    } else {
                        ", run without the sandbox (--no-sandbox)"
                    }
                ),
                version_rows(&r.state),
            )
        })
        .collect();
    (summary, per)
}

const SUMMARY_HEAD: [&str; 9] = [
    "workload",
    "session",
    "device",
    "best",
    "best us",
    "vendor us",
    "speedup",
    "% roofline",
    "goal",
];
/// The columns of a session's version table.
pub const VERSION_HEAD: [&str; 7] = [
    "version", "origin", "strategy", "status", "us", "speedup", "verdict",
];

/// A Markdown table.
pub fn md_table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!(
        "| {} |\n|{}\n",
        head.join(" | "),
        " --- |".repeat(head.len())
    );
    for r in rows {
        let cells: Vec<String> = r.iter().map(|c| c.replace('|', "/")).collect();
        s.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    s
}

fn html_table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::from("<table><tr>");
    for h in head {
        s.push_str(&format!("<th>{}</th>", esc(h)));
    }
    s.push_str("</tr>");
    for r in rows {
        s.push_str("<tr>");
        for c in r {
            s.push_str(&format!("<td>{}</td>", esc(c)));
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>\n");
    s
}

/// Writes report.md, report.html and the charts into `out`; returns the HTML path.
pub fn write(rows: &[Row], out: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let speed: Vec<(String, f64)> = rows
        .iter()
        .filter_map(|r| Some((r.label(), r.speedup()?)))
        .collect();
    let roof: Vec<(String, f64)> = rows
        .iter()
        .filter_map(|r| Some((r.label(), r.best()?.roofline_fraction? * 100.0)))
        .collect();
    let charts = [
        (
            "speedup.svg",
            charts::bars(
                "speedup of the best version over the vendor library (same run)",
                "x vendor",
                &speed,
                1.0,
            )?,
        ),
        (
            "roofline.svg",
            charts::bars(
                "% of the roofline floor reached by the best version",
                "% of roofline",
                &roof,
                100.0,
            )?,
        ),
        ("progress.svg", charts::progress(rows)?),
    ];
    for (name, svg) in &charts {
        let p = out.join(name);
        std::fs::write(&p, svg).map_err(|e| Error::io(&p, e))?;
    }
    let (summary, per) = tables(rows);
    let when = crate::clock::now_rfc3339();
    let mut md = format!(
        "# cutesmith report\n\n{} sessions, generated {when}. Speedups are vendor time / kernel time, both measured in the same worker process (L2 flushed, medians).\n\n",
        rows.len()
    );
    md.push_str(&md_table(&SUMMARY_HEAD, &summary));
    let costs = cost_rows(rows);
    let states: Vec<&State> = rows.iter().map(|r| &r.state).collect();
    let totals = cost_totals(&states);
    md.push_str(&format!(
        "\n## Cost\n\n{}\nIn all, {totals}.\n",
        md_table(&COST_HEAD, &costs)
    ));
    for (name, _) in &charts {
        md.push_str(&format!("\n![{name}]({name})\n"));
    }
    for (title, vs) in &per {
        md.push_str(&format!("\n## {title}\n\n"));
        md.push_str(&md_table(&VERSION_HEAD, vs));
    }
    let mdp = out.join("report.md");
    std::fs::write(&mdp, md).map_err(|e| Error::io(&mdp, e))?;
    let mut html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>cutesmith report</title><style>\
body{{font-family:sans-serif;margin:24px;color:#222}}table{{border-collapse:collapse;margin:8px 0 24px}}\
td,th{{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left}}th{{background:#f3f3f3}}\
.charts svg{{display:block;margin:8px 0;border:1px solid #eee}}</style></head><body>\
<h1>cutesmith report</h1><p>{} sessions, generated {when}. Speedups are vendor time / kernel time, both measured in the same worker process (L2 flushed, medians).</p>",
        rows.len()
    );
    html.push_str(&html_table(&SUMMARY_HEAD, &summary));
    html.push_str("<h2>Cost</h2>");
    html.push_str(&html_table(&COST_HEAD, &costs));
    html.push_str(&format!("<p>In all, {}.</p>", esc(&totals)));
    html.push_str("<div class=\"charts\">");
    for (_, svg) in &charts {
        html.push_str(svg);
    }
    html.push_str("</div>");
    for (title, vs) in &per {
        html.push_str(&format!("<h2>{}</h2>", esc(title)));
        html.push_str(&html_table(&VERSION_HEAD, vs));
    }
    html.push_str("</body></html>\n");
    let hp = out.join("report.html");
    std::fs::write(&hp, html).map_err(|e| Error::io(&hp, e))?;
    Ok(hp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::machine::Spent;

    #[test]
    fn cost_totals_add_up_and_divide_by_results() {
        let a = State {
            spent: Spent {
                model_requests: 6,
                prompt_tokens: 30_000,
                completion_tokens: 9_000,
                cost_usd: 0.12,
                wall_s: 100.0,
                gpu_s: 40.0,
                ..Spent::default()
            },
            best: Some(2),
            ..State::default()
        };
        let b = State {
            spent: Spent {
                model_requests: 2,
                prompt_tokens: 10_000,
                completion_tokens: 1_000,
                cost_usd: 0.03,
                wall_s: 20.0,
                gpu_s: 5.0,
                ..Spent::default()
            },
            ..State::default()
        };
        assert_eq!(
            cost_line(&a.spent),
            "6 model calls, 30000 prompt + 9000 completion tokens, $0.1200, 100 s wall, 40 s on the GPU"
        );
        // No accepted versions recorded: calls per accepted version is "-"; one session
        // reached a correct kernel: all 50000 tokens count against it.
        assert_eq!(
            cost_totals(&[&a, &b]),
            "2 sessions: 8 model calls, 40000 prompt + 10000 completion tokens, $0.1500, 120 s wall, 45 s on the GPU; 50000 tokens per session with a correct kernel (1), - model calls per accepted version (0)"
        );
    }
}
