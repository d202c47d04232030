//! `cutesmith report PATH...`: Markdown and a self-contained HTML page over one or more
//! sessions (a session directory, or a directory holding sessions such as `runs/`):
//! speedup against the vendor library and % of the roofline per workload, the time of
//! each accepted version through each session, and every version's strategy. Charts are
//! SVG drawn with plotters: inline in the HTML, files beside the Markdown.

use std::path::{Path, PathBuf};

use clap::Args;
use plotters::prelude::*;

use crate::agent::session::{SessionDir, SessionSpec, State};
use crate::cli::EXIT_OK;
use crate::error::{Error, Result};
use crate::eval::Evaluation;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Session directories, or directories holding sessions (e.g. runs/).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Where report.md, report.html and the SVG charts go.
    #[arg(long, default_value = "report")]
    pub out: PathBuf,
}

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
            let goal = crate::cli::run::goal(&dir, &state);
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

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn plot_err(e: impl std::fmt::Display) -> Error {
    Error::Format {
        context: "drawing a chart".into(),
        message: e.to_string(),
    }
}

/// A bar per session; `reference` draws a dashed-looking line (1.0x, 100%).
fn bars(title: &str, y_desc: &str, rows: &[(String, f64)], reference: f64) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 340)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let top = rows.iter().map(|r| r.1).fold(reference, f64::max).max(0.1) * 1.2;
        let n = rows.len().max(1) as i32;
        let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..top)
            .map_err(plot_err)?;
        c.configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .x_labels(n as usize)
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_desc(y_desc)
            .draw()
            .map_err(plot_err)?;
        c.draw_series(rows.iter().enumerate().map(|(i, r)| {
            let i = i as i32;
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), r.1),
                ],
                COLORS[i as usize % COLORS.len()].filled(),
            );
            bar.set_margin(0, 0, 30, 30);
            bar
        }))
        .map_err(plot_err)?;
        c.draw_series(rows.iter().enumerate().map(|(i, r)| {
            Text::new(
                format!("{:.2}", r.1),
                (SegmentValue::CenterOf(i as i32), r.1 + top * 0.03),
                ("sans-serif", 13),
            )
        }))
        .map_err(plot_err)?;
        c.draw_series(LineSeries::new(
            vec![
                (SegmentValue::Exact(0), reference),
                (SegmentValue::Last, reference),
            ],
            BLACK.stroke_width(1),
        ))
        .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// The speedup over the vendor library of each correct version, per session: the
/// accepted ones joined by a line, the rejected ones as dots.
fn progress(rows: &[Row]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let pts = |r: &Row| -> Vec<(f64, f64, bool)> {
            r.state
                .versions
                .iter()
                .filter_map(|v| Some((v.n as f64, v.vendor_us? / v.median_us?, v.accepted)))
                .collect()
        };
        let max_v = rows
            .iter()
            .flat_map(|r| r.state.versions.iter().map(|v| v.n))
            .max()
            .unwrap_or(1) as f64;
        let max_y = rows
            .iter()
            .flat_map(|r| pts(r).into_iter().map(|p| p.1))
            .fold(1.0, f64::max)
            * 1.2;
        let mut c = ChartBuilder::on(&root)
            .caption(
                "speedup over the vendor library of each correct version",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0.5f64..max_v + 0.5, 0f64..max_y)
            .map_err(plot_err)?;
        c.configure_mesh()
            .light_line_style(TRANSPARENT)
            .x_desc("version")
            .y_desc("vendor time / version time")
            .x_labels(max_v as usize + 1)
            .x_label_formatter(&|x| {
                if (x - x.round()).abs() < 1e-6 && *x >= 1.0 {
                    format!("v{x:.0}")
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(plot_err)?;
        for (i, r) in rows.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let p = pts(r);
            let accepted: Vec<(f64, f64)> = p.iter().filter(|q| q.2).map(|q| (q.0, q.1)).collect();
            c.draw_series(LineSeries::new(accepted.clone(), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(r.label())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            c.draw_series(p.iter().map(|q| {
                Circle::new(
                    (q.0, q.1),
                    4,
                    if q.2 {
                        color.filled()
                    } else {
                        color.stroke_width(1)
                    },
                )
            }))
            .map_err(plot_err)?;
        }
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
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
            let vs = r
                .state
                .versions
                .iter()
                .map(|v| {
                    vec![
                        format!(
                            "v{}{}",
                            v.n,
                            if Some(v.n) == r.state.best {
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
                .collect();
            (format!("{} ({})", r.spec.workload, r.spec.id), vs)
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
const VERSION_HEAD: [&str; 7] = [
    "version", "origin", "strategy", "status", "us", "speedup", "verdict",
];

fn md_table(head: &[&str], rows: &[Vec<String>]) -> String {
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
            bars(
                "speedup of the best version over the vendor library (same run)",
                "x vendor",
                &speed,
                1.0,
            )?,
        ),
        (
            "roofline.svg",
            bars(
                "% of the roofline floor reached by the best version",
                "% of roofline",
                &roof,
                100.0,
            )?,
        ),
        ("progress.svg", progress(rows)?),
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

pub fn cmd_report(args: ReportArgs) -> Result<i32> {
    let rows = load(&args.paths)?;
    let html = write(&rows, &args.out)?;
    println!(
        "wrote {} and {} ({} sessions)",
        args.out.join("report.md").display(),
        html.display(),
        rows.len()
    );
    Ok(EXIT_OK)
}
