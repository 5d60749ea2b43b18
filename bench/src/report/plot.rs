//! Plots for benchmark results (SVG, drawn with plotters): grouped bars in panels, and lines.

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;

/// One panel of grouped bars: `groups` along x; one bar per series in each group.
pub struct BarPanel {
    pub title: String,
    pub groups: Vec<String>,
    /// (series name, one value per group)
    pub series: Vec<(String, Vec<f64>)>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the plot: {e:?}")
}

/// Panels of grouped bars in a grid of `cols` columns, with a shared legend in each panel.
pub fn bars(
    path: &Path,
    title: &str,
    y_label: &str,
    panels: &[BarPanel],
    cols: usize,
) -> Result<()> {
    let rows = panels.len().div_ceil(cols);
    let root =
        SVGBackend::new(path, (560 * cols as u32, 380 * rows as u32 + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, body) = root.split_vertically(40);
    top.titled(title, ("sans-serif", 22)).map_err(err)?;
    let areas = body.split_evenly((rows, cols));
    for (panel, area) in panels.iter().zip(areas) {
        let n = panel.series.len().max(1);
        let ymax = panel
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.5; // headroom for the legend
        let mut chart = ChartBuilder::on(&area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..panel.groups.len() as f64, 0f64..ymax)
            .map_err(err)?;
        let groups = panel.groups.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(groups.len() * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - x.floor() - 0.5).abs() < 0.01 && i < groups.len() {
                    groups[i].clone()
                } else {
                    String::new()
                }
            })
            .y_desc(y_label)
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(err)?;
        let w = 0.8 / n as f64;
        for (si, (name, vals)) in panel.series.iter().enumerate() {
            let color = COLORS[si % COLORS.len()];
            chart
                .draw_series(vals.iter().enumerate().map(|(g, &v)| {
                    let x0 = g as f64 + 0.1 + si as f64 * w;
                    Rectangle::new([(x0, 0.0), (x0 + w * 0.9, v)], color.filled())
                }))
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// One line chart: x values shared by every series.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    let root = SVGBackend::new(path, (720, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let pts = series.iter().flat_map(|(_, v)| v.iter().copied());
    let (xmax, ymax) = pts.fold((1e-9f64, 1e-9f64), |(a, b), (x, y)| (a.max(x), b.max(y)));
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax * 1.05, 0f64..ymax * 1.15)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    for (si, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[si % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
