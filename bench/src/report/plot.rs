//! Plots for benchmark results (SVG, drawn with plotters): grouped bars in panels, and lines.

use anyhow::{anyhow, Result};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::path::Path;

/// One panel of grouped bars: `groups` along x; one bar per series in each group.
pub(crate) struct BarPanel {
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
pub(crate) fn bars(
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
        // Bars may go below zero (a measured difference can); non-finite values draw as 0.
        let finite = || {
            panel
                .series
                .iter()
                .flat_map(|(_, v)| v.iter().copied())
                .filter(|v| v.is_finite())
        };
        let ymax = finite().fold(0.0f64, f64::max).max(1e-9) * 1.5; // headroom for the legend
        let ymin = finite().fold(0.0f64, f64::min) * 1.1;
        let mut chart = ChartBuilder::on(&area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..panel.groups.len() as f64, ymin..ymax)
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
                    let v = if v.is_finite() { v } else { 0.0 };
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

/// One line chart, linear axes: a single panel of [`line_panels`].
pub(crate) fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    let axes = Axes {
        x_label,
        y_label,
        log_x: false,
        log_y: false,
        x_fmt: |v| format!("{v}"),
    };
    let panel = LinePanel {
        title: String::new(),
        series: series.to_vec(),
    };
    line_panels(path, title, axes, &[panel], 1)
}

/// One panel of lines: (series name, points) with x values of its own per series.
pub(crate) struct LinePanel {
    pub title: String,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Axes of [`line_panels`]: linear or logarithmic, each.
#[derive(Clone, Copy)]
pub(crate) struct Axes<'a> {
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_x: bool,
    pub log_y: bool,
    /// How x values are written (sizes in bytes, nanoseconds, ...).
    pub x_fmt: fn(f64) -> String,
}

/// Panels of line charts in a grid of `cols` columns, each with its own legend.
pub(crate) fn line_panels(
    path: &Path,
    title: &str,
    axes: Axes,
    panels: &[LinePanel],
    cols: usize,
) -> Result<()> {
    let rows = panels.len().div_ceil(cols);
    let root =
        SVGBackend::new(path, (600 * cols as u32, 420 * rows as u32 + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, body) = root.split_vertically(40);
    top.titled(title, ("sans-serif", 20)).map_err(err)?;
    for (panel, area) in panels.iter().zip(body.split_evenly((rows, cols))) {
        let pts = || panel.series.iter().flat_map(|(_, v)| v.iter().copied());
        let lo = |f: fn(&(f64, f64)) -> f64| pts().map(|p| f(&p)).fold(f64::MAX, f64::min);
        let hi = |f: fn(&(f64, f64)) -> f64| pts().map(|p| f(&p)).fold(f64::MIN, f64::max);
        let (x0, x1) = (lo(|p| p.0), hi(|p| p.0));
        let (y0, y1) = (lo(|p| p.1), hi(|p| p.1));
        let x = if axes.log_x {
            (x0.max(1e-9) / 1.3)..(x1.max(1e-9) * 1.3)
        } else {
            x0.min(0.0)..(x1 * 1.05).max(1e-9)
        };
        let y = if axes.log_y {
            (y0.max(1e-9) / 2.0)..(y1.max(1e-9) * 6.0) // headroom for the legend
        } else {
            y0.min(0.0)..(y1 * 1.4).max(1e-9)
        };
        match (axes.log_x, axes.log_y) {
            (true, true) => line_panel(&area, panel, axes, x.log_scale(), y.log_scale()),
            (true, false) => line_panel(&area, panel, axes, x.log_scale(), y),
            (false, true) => line_panel(&area, panel, axes, x, y.log_scale()),
            (false, false) => line_panel(&area, panel, axes, x, y),
        }?;
    }
    root.present().map_err(err)?;
    Ok(())
}

fn line_panel<DB, X, Y>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &LinePanel,
    axes: Axes,
    x: X,
    y: Y,
) -> Result<()>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    let x_fmt = axes.x_fmt;
    chart
        .configure_mesh()
        .x_desc(axes.x_label)
        .y_desc(axes.y_label)
        .x_label_formatter(&|v| x_fmt(*v))
        .y_label_formatter(&|v| {
            if v.abs() >= 100.0 || *v == 0.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        })
        .draw()
        .map_err(err)?;
    for (si, (name, pts)) in panel.series.iter().enumerate() {
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
        .label_font(("sans-serif", 11))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    Ok(())
}
