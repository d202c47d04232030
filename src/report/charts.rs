//! The report's charts: SVG drawn with plotters (inline in the HTML, files beside the
//! Markdown).

use plotters::prelude::*;

use super::Row;
use crate::error::{Error, Result};

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
pub(super) fn bars(
    title: &str,
    y_desc: &str,
    rows: &[(String, f64)],
    reference: f64,
) -> Result<String> {
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
pub(super) fn progress(rows: &[Row]) -> Result<String> {
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
