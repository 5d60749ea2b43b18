//! `bench fs`'s table and plot.

use super::{Report, THREADS};
use crate::report::plot;
use anyhow::Result;
use std::path::Path;

const BASE: &str = "ext4-attach";

/// Ratios to ext4 on attach, one panel per (thread count, append or metadata), tmpfs left out
/// (tens to hundreds of times the others: it would flatten them; it is in the table and JSON).
pub(super) fn draw(p: &Path, r: &Report) -> Result<()> {
    let mut panels = vec![];
    for &th in &THREADS {
        for append in [true, false] {
            let rows: Vec<_> = r
                .summary
                .iter()
                .filter(|x| x.threads == th && x.workload.starts_with("append") == append)
                .collect();
            panels.push(plot::BarPanel {
                title: format!(
                    "{th} thread(s), {}: ops/s / ext4 on attach",
                    if append {
                        "append"
                    } else {
                        "metadata and reads"
                    }
                ),
                groups: rows.iter().map(|x| x.workload.to_string()).collect(),
                series: r
                    .targets
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| *t != BASE && *t != "tmpfs" && !t.ends_with("dirsync"))
                    .map(|(i, t)| {
                        (
                            t.clone(),
                            rows.iter().map(|x| x.cells[i].vs_ext4_attach).collect(),
                        )
                    })
                    .collect(),
            });
        }
    }
    plot::bars(
        p,
        &format!(
            "PMFS over FUSE and ext4 on a /dev/shm loop vs ext4 on pmkit attach ({}); higher is better",
            r.cpu
        ),
        "ratio to ext4 on attach",
        &panels,
        2,
    )
}

pub(super) fn print_table(r: &Report) {
    println!(
        "bench fs: median of {} round(s); {}; {} FUSE threads; per thread: {} appends, {} files \
         ({} stat passes), {} reads",
        r.rounds,
        r.cpu,
        r.fuse_threads,
        r.counts.appends,
        r.counts.files,
        r.counts.stat_passes,
        r.counts.reads
    );
    println!("ops/s (ratio to {BASE}); append: p50/p99 latency in µs");
    print!("{:<16} {:>2}", "workload", "th");
    for t in &r.targets {
        print!(" {t:>20}");
    }
    println!();
    for row in &r.summary {
        print!("{:<16} {:>2}", row.workload, row.threads);
        for c in &row.cells {
            print!(
                " {:>20}",
                format!("{:.0} ({:.2})", c.ops_per_s, c.vs_ext4_attach)
            );
        }
        println!();
        if row.cells.iter().any(|c| c.p50_us.is_some()) {
            print!("{:<16} {:>2}", "  p50/p99 µs", row.threads);
            for c in &row.cells {
                let l = match (c.p50_us, c.p99_us) {
                    (Some(a), Some(b)) => format!("{a:.0}/{b:.0}"),
                    _ => "-".into(),
                };
                print!(" {l:>20}");
            }
            println!();
        }
    }
    print_dirsync(r);
    print_bytes_per_op(r);
}

/// Metadata workloads against ext4 mounted `-o dirsync` on attach.
fn print_dirsync(r: &Report) {
    println!();
    println!(
        "metadata against a peer of equal durability: ratio to ext4-attach-dirsync (directory \
         changes durable on return, as on PMFS)"
    );
    print!("{:<16} {:>2}", "workload", "th");
    for t in &r.targets {
        print!(" {t:>20}");
    }
    println!();
    for row in r
        .summary
        .iter()
        .filter(|x| !x.workload.starts_with("append"))
    {
        print!("{:<16} {:>2}", row.workload, row.threads);
        for c in &row.cells {
            print!(" {:>20}", format!("{:.2}", c.vs_ext4_dirsync));
        }
        println!();
    }
}

/// Bytes written and FUSE requests per operation.
fn print_bytes_per_op(r: &Report) {
    println!();
    println!(
        "bytes written per operation ({} calls each; PMFS: library counters through the mount, \
         durable at return; ext4 on attach: PM device bytes per call + syncfs)",
        r.journal_calls
    );
    println!(
        "{:<18} {:>12} {:>12} {:>12} {:>14} {:>10} {:>8} {:>13}",
        "operation",
        "pmfs journal",
        "pmfs PM",
        "library",
        "ext4 device",
        "ext4 flush",
        "thesis",
        "FUSE requests"
    );
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    for o in &r.bytes_per_op {
        println!(
            "{:<18} {:>12.0} {:>12.0} {:>12} {:>14.0} {:>10.2} {:>8} {:>13.2}",
            o.op,
            o.pmfs_journal_bytes,
            o.pmfs_pm_bytes,
            opt(o.pmfs_library_journal_bytes),
            o.ext4_device_bytes,
            o.ext4_flushes,
            opt(o.thesis_bytes),
            o.pmfs_fuse_requests
        );
    }
}
