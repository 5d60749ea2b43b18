//! `bench fs-layers`'s table and plot: per operation, layers along x, bars stacked by where the
//! CPU time went (driver user, driver kernel, daemon user, daemon kernel) with the wall time
//! marked; below, bars stacked by user-space instructions (driver, daemon).

use super::{Cell, Report};
use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the plot: {e:?}")
}

const PARTS: [(&str, RGBColor); 4] = [
    ("app user", RGBColor(31, 119, 180)),
    ("app kernel", RGBColor(174, 199, 232)),
    ("daemon user", RGBColor(255, 127, 14)),
    ("daemon kernel", RGBColor(255, 187, 120)),
];

fn cells_of<'a>(r: &'a Report, op: &str) -> Vec<&'a Cell> {
    r.cells.iter().filter(|c| c.op == op).collect()
}

/// One panel of stacked bars: one bar per cell, `parts(cell)` its segments bottom up, `mark` a
/// level drawn as a black tick over the bar (the wall time).
fn panel(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    cells: &[&Cell],
    parts: &dyn Fn(&Cell) -> Vec<f64>,
    mark: Option<&dyn Fn(&Cell) -> f64>,
    legend: &[(&str, RGBColor)],
) -> Result<()> {
    let top = cells
        .iter()
        .map(|c| {
            let s: f64 = parts(c).iter().sum();
            s.max(mark.map_or(0.0, |m| m(c)))
        })
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.45;
    let names: Vec<String> = cells.iter().map(|c| c.layer.to_string()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(62)
        .build_cartesian_2d(0f64..cells.len().max(1) as f64, 0f64..top)
        .map_err(err)?;
    let n2 = names.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(cells.len() * 2 + 1)
        .x_label_formatter(&move |x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 && i < n2.len() {
                n2[i].clone()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 10))
        .y_desc(y_label)
        .y_label_formatter(&|v| {
            if *v >= 1000.0 {
                format!("{:.0}k", v / 1000.0)
            } else {
                format!("{v:.1}")
            }
        })
        .draw()
        .map_err(err)?;
    for (pi, &(name, color)) in legend.iter().enumerate() {
        let rects: Vec<_> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let p = parts(c);
                let y0: f64 = p[..pi].iter().sum();
                let y1 = y0 + p[pi];
                let x0 = i as f64 + 0.15;
                Rectangle::new([(x0, y0), (x0 + 0.7, y1)], color.filled())
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    if let Some(m) = mark {
        chart
            .draw_series(cells.iter().enumerate().map(|(i, c)| {
                let y = m(c);
                PathElement::new(
                    vec![(i as f64 + 0.1, y), (i as f64 + 0.9, y)],
                    BLACK.stroke_width(2),
                )
            }))
            .map_err(err)?
            .label("wall time")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], BLACK.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}

pub(super) fn draw(p: &Path, r: &Report) -> Result<()> {
    let ops: Vec<&str> = r.ops.clone();
    let cols = ops.len();
    let root = SVGBackend::new(p, (430 * cols as u32, 2 * 380 + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, body) = root.split_vertically(40);
    let who = match r.clients {
        1 => String::new(),
        k => format!(", {k} processes at once"),
    };
    top.titled(
        &format!("Cost of each layer per operation ({}{who})", r.cpu),
        ("sans-serif", 20),
    )
    .map_err(err)?;
    let areas = body.split_evenly((2, cols));
    let time = |c: &Cell| {
        vec![
            c.app_user_us,
            c.app_sys_us,
            c.daemon_user_us.unwrap_or(0.0),
            c.daemon_sys_us.unwrap_or(0.0),
        ]
    };
    let instr = |c: &Cell| vec![c.instr_app.unwrap_or(0.0), c.instr_daemon.unwrap_or(0.0)];
    let wall = |c: &Cell| c.us_per_op;
    for (i, op) in ops.iter().enumerate() {
        let cells = cells_of(r, op);
        panel(
            &areas[i],
            &format!("{op}: CPU µs per op"),
            "µs per operation",
            &cells,
            &time,
            Some(&wall),
            &PARTS,
        )?;
        panel(
            &areas[cols + i],
            &format!("{op}: user-space instructions per op"),
            "instructions per operation",
            &cells,
            &instr,
            None,
            &[PARTS[0], PARTS[2]],
        )?;
    }
    root.present().map_err(err)?;
    Ok(())
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.prec$}"))
}

pub(super) fn print_table(r: &Report) {
    println!(
        "bench fs-layers: median of {} round(s); {}; PMFS protect {}; {} FUSE threads; {} \
         process(es) per timed run (µs/op each one's, ops/s all of theirs)",
        r.rounds, r.cpu, r.pmfs_protect, r.fuse_threads, r.clients
    );
    let ns: Vec<String> = r.n.iter().map(|(op, n)| format!("{op} {n}")).collect();
    println!(
        "operations per timed run: {}; strace runs {} ops, callgrind runs {} ops (less an N=0 run)",
        ns.join(", "),
        r.strace_n,
        r.valgrind_n
    );
    println!(
        "{:<15} {:<12} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>9} {:>9}",
        "op",
        "layer",
        "µs/op",
        "ops/s",
        "app usr",
        "app sys",
        "dmn usr",
        "dmn sys",
        "sc app",
        "sc dmn",
        "Ir app",
        "Ir dmn"
    );
    for op in &r.ops {
        for c in cells_of(r, op) {
            println!(
                "{:<15} {:<12} {:>9.2} {:>10.0} {:>8.2} {:>8.2} {:>8} {:>8} {:>7} {:>7} {:>9} {:>9}",
                c.op,
                c.layer,
                c.us_per_op,
                c.ops_per_s,
                c.app_user_us,
                c.app_sys_us,
                opt(c.daemon_user_us, 2),
                opt(c.daemon_sys_us, 2),
                opt(c.syscalls_app, 1),
                opt(c.syscalls_daemon, 1),
                opt(c.instr_app, 0),
                opt(c.instr_daemon, 0)
            );
        }
    }
    println!("(CPU columns: µs per operation; sc: system calls per operation; Ir: user-space instructions per operation)");
    for c in &r.cells {
        let f = |v: &[(String, f64)]| {
            v.iter()
                .map(|(k, n)| format!("{k} {n:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !c.top_syscalls_app.is_empty() || !c.top_syscalls_daemon.is_empty() {
            println!(
                "  {} {}: app [{}] daemon [{}]",
                c.op,
                c.layer,
                f(&c.top_syscalls_app),
                f(&c.top_syscalls_daemon)
            );
        }
    }
    for n in &r.not_applicable {
        println!("n/a: {n}");
    }
    println!("raw 4 KiB NT write + fence: {:.2} µs", r.raw_nt_4k_fence_us);
    println!("goals:");
    for g in &r.goals {
        println!(
            "  [{}] {}: {}",
            if g.met { "met" } else { "NOT met" },
            g.goal,
            g.measured
        );
    }
}
