//! Tables and plots of `bench fs-tree` and `bench fs-apps`.

use super::{apps, tree, Row, BASE};
use crate::report::plot;
use anyhow::Result;
use std::path::Path;

/// A cell as text: the value (ratio to ext4 on attach), "n/a \[k\]" or "FAILED \[k\]" with `k`
/// the footnote giving the reason.
fn print_rows(rows: &[Row], targets: &[String]) {
    let mut notes: Vec<String> = vec![];
    let mut note = |text: String| -> usize {
        match notes.iter().position(|n| *n == text) {
            Some(i) => i + 1,
            None => {
                notes.push(text);
                notes.len()
            }
        }
    };
    print!("{:<24}", "");
    for t in targets {
        print!(" {t:>17}");
    }
    println!();
    for r in rows {
        print!("{:<24}", format!("{} ({})", r.item, r.unit));
        for c in &r.cells {
            let text = match (&c.value, &c.failed, &c.not_applicable) {
                (_, Some(w), _) => format!("FAILED [{}]", note(format!("{}: {w}", c.target))),
                (Some(v), _, _) => {
                    let v = if r.unit == "s" {
                        format!("{v:.3}")
                    } else {
                        format!("{v:.0}")
                    };
                    match c.vs_ext4_attach {
                        Some(x) => format!("{v} ({x:.2}x)"),
                        None => v,
                    }
                }
                (None, None, Some(w)) => format!("n/a [{}]", note(w.clone())),
                (None, None, None) => "-".into(),
            };
            print!(" {text:>17}");
        }
        println!();
    }
    for (i, n) in notes.iter().enumerate() {
        println!("[{}] {n}", i + 1);
    }
}

fn print_notes(notes: &[&str]) {
    for n in notes {
        println!("note: {n}");
    }
}

pub(super) fn print_tree(r: &tree::Report) {
    let s = &r.source;
    println!(
        "bench fs-tree: median of {} round(s); {}; tree: {} ({} files, {} directories, {} \
         links, {:.1} MB in files, tar {:.1} MB); grep -r -I -F {} matches {} lines; PMFS pool \
         {} MiB, {} inodes",
        r.rounds,
        r.cpu,
        s.what,
        s.files,
        s.dirs,
        s.links,
        s.bytes as f64 / 1e6,
        s.tar_bytes as f64 / 1e6,
        r.pattern,
        s.grep_lines,
        r.pmfs_pool_bytes >> 20,
        r.pmfs_inodes
    );
    println!("seconds per step (how many times faster than {BASE}); lower seconds are better");
    print_rows(&r.summary, &r.targets);
    print_notes(&r.notes);
}

pub(super) fn print_apps(r: &apps::Report) {
    let n = &r.counts;
    println!(
        "bench fs-apps: median of {} round(s); {}; sqlite {} tx of 100 rows; fs_mark {} files; \
         postmark {} files, {} tx; dbench {} clients, {} s; pgbench scale {}, {} clients x {} tx",
        r.rounds,
        r.cpu,
        n.sqlite_tx,
        n.fsmark_files,
        n.postmark_files,
        n.postmark_tx,
        n.dbench_clients,
        n.dbench_secs,
        n.pgbench_scale,
        n.pgbench_clients,
        n.pgbench_tx
    );
    println!("rate (ratio to {BASE}); higher is better");
    print_rows(&r.summary, &r.targets);
    for s in &r.skipped {
        println!("skipped: {s}");
    }
    print_notes(&r.notes);
}

/// One panel per row set: bars per item, one series per configuration; `ratio` picks the
/// ratio to ext4 on attach (configurations but the base) or the value. Missing cells are 0.
fn panel(title: String, rows: &[Row], targets: &[String], ratio: bool) -> plot::BarPanel {
    plot::BarPanel {
        title,
        groups: rows.iter().map(|r| r.item.clone()).collect(),
        series: targets
            .iter()
            .enumerate()
            .filter(|(_, t)| !ratio || *t != BASE)
            .map(|(i, t)| {
                let v = rows
                    .iter()
                    .map(|r| {
                        let c = &r.cells[i];
                        if ratio { c.vs_ext4_attach } else { c.value }.unwrap_or(0.0)
                    })
                    .collect();
                (t.clone(), v)
            })
            .collect(),
    }
}

pub(super) fn draw_tree(p: &Path, r: &tree::Report) -> Result<()> {
    let rows: Vec<Row> = r
        .summary
        .iter()
        .filter(|x| !x.item.starts_with("start"))
        .cloned()
        .collect();
    plot::bars(
        p,
        &format!(
            "Thesis Fig. 14 steps over {} ({} files), {}; missing bar: failed or n/a",
            r.source.what, r.source.files, r.cpu
        ),
        "seconds / times faster",
        &[
            panel("seconds (lower is better)".into(), &rows, &r.targets, false),
            panel(
                format!("times faster than {BASE} (higher is better)"),
                &rows,
                &r.targets,
                true,
            ),
        ],
        1,
    )
}

pub(super) fn draw_apps(p: &Path, r: &apps::Report) -> Result<()> {
    let rows = &r.summary;
    plot::bars(
        p,
        &format!(
            "Filebench-like loads, {}; missing bar: failed or n/a",
            r.cpu
        ),
        "ratio to ext4 on attach",
        &[panel(
            format!("rate / {BASE}'s (higher is better)"),
            rows,
            &r.targets,
            true,
        )],
        1,
    )
}
