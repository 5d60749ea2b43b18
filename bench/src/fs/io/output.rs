//! `bench fs-io`'s table and plot.

use super::job::{size_label, Pattern};
use super::{Report, BASE};
use crate::report::plot;
use anyhow::Result;
use std::path::Path;

/// Four panels (sequential and random, read and write), MB/s against the request size, both
/// logarithmic, one line per configuration (the goal row is in the table and JSON).
pub(super) fn draw(p: &Path, r: &Report) -> Result<()> {
    let panels: Vec<plot::LinePanel> = Pattern::ALL
        .iter()
        .map(|&pat| {
            let rows: Vec<_> = r
                .summary
                .iter()
                .filter(|x| x.pattern == pat && x.cell != r.goal.cell)
                .collect();
            plot::LinePanel {
                title: panel_title(pat),
                series: r
                    .configs
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let pts = rows.iter().map(|x| (x.bs as f64, x.cells[i].mb_s));
                        (c.clone(), pts.collect())
                    })
                    .collect(),
            }
        })
        .collect();
    plot::line_panels(
        p,
        &format!("fio-style file I/O, 1 thread (thesis Fig. 13); {}", r.cpu),
        plot::Axes {
            x_label: "request size (bytes)",
            y_label: "MB/s",
            log_x: true,
            log_y: true,
            x_fmt: |v| size_label(v.round() as u64),
        },
        &panels,
        2,
    )
}

fn panel_title(p: Pattern) -> String {
    match p {
        Pattern::SeqRead => "sequential read".into(),
        Pattern::RandRead => "random read".into(),
        Pattern::SeqWrite => "sequential write, fdatasync every 256 KiB".into(),
        Pattern::RandWrite => "random write, fdatasync every 256 KiB".into(),
    }
}

pub(super) fn print_table(r: &Report) {
    println!(
        "bench fs-io: median of {} round(s), {} ms per cell, {} MiB file, buffered I/O, 1 thread; \
         PMFS protection {}; {}",
        r.rounds,
        r.ms,
        r.file_bytes >> 20,
        r.pmfs_protect,
        r.cpu
    );
    println!("MB/s (IOPS / {BASE}'s)");
    print!("{:<24}", "cell");
    for c in &r.configs {
        print!(" {c:>18}");
    }
    println!();
    for row in &r.summary {
        print!("{:<24}", row.cell);
        for c in &row.cells {
            let v = if c.mb_s >= 100.0 {
                format!("{:.0}", c.mb_s)
            } else {
                format!("{:.2}", c.mb_s)
            };
            print!(" {:>18}", format!("{v} ({:.2}x)", c.vs_ext4_attach));
        }
        println!();
    }
    println!("IOPS");
    for row in &r.summary {
        print!("{:<24}", row.cell);
        for c in &row.cells {
            print!(" {:>18.0}", c.iops);
        }
        println!();
    }
    let g = &r.goal;
    println!(
        "goal ({}): library {:.1}x, shim {:.1}x {BASE} (want >= {}x): {}",
        g.cell,
        g.lib_vs_ext4_attach,
        g.shim_vs_ext4_attach,
        g.want,
        if g.met { "met" } else { "NOT met" }
    );
}
