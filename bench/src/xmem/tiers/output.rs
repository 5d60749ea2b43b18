//! `bench xmem`'s table (per application and preset: time over fast-only per policy and DRAM
//! fraction, then the slow tier's writes) and plot (one panel per application and preset, lines
//! over the DRAM fraction, one per policy: thesis Fig. 24-29's shape).

use super::Report;
use crate::report::plot::{self, Axes, LinePanel};
use anyhow::Result;
use std::path::Path;

fn frac(f: f64) -> String {
    if f > 0.0 && f < 1.0 {
        format!("1/{}", (1.0 / f).round())
    } else {
        format!("{f}")
    }
}

pub(super) fn table(r: &Report) {
    println!("CPU: {}; {}", r.cpu, r.level);
    println!(
        "graph: {} vertices, {} edges; units {} KiB; cache model {} KiB, {} ways; rounds {} x {} passes",
        r.vertices,
        r.edges,
        r.unit_bytes >> 10,
        r.llc_bytes >> 10,
        r.llc_ways,
        r.rounds,
        r.reps
    );
    println!(
        "fast tier {} ({:.0}% huge): chase {:.1} ns, random {:.2} ns, stream {:.2} ns",
        r.fast.backing,
        r.fast.huge_fraction * 100.0,
        r.fast.chase_ns,
        r.fast.random_ns,
        r.fast.seq_ns
    );
    for m in &r.models {
        println!(
            "  {:<14} ({}) slow: chase {:.1} ns, random {:.2} ns, stream {:.2} ns; a line written \
             back {:.1} ns (fast {:.2})",
            m.preset,
            m.mode,
            m.slow[0],
            m.slow[1],
            m.slow[2],
            m.slow_write_random_ns,
            m.fast_write_ns
        );
    }
    for a in &r.apps {
        println!(
            "\n{}: footprint {} MiB in {} units; fast-only {:.1} ms per pass (measured); tracer {:.1}x",
            a.name,
            a.footprint_bytes >> 20,
            a.units,
            a.fast_only_ms,
            a.trace_slowdown
        );
        for (t, u) in a.tags.iter().zip(&a.per_tag) {
            println!(
                "  {t:<10} accesses {:>11} stores {:>10} writebacks {:>9} misses chase/random/stream {}/{}/{}",
                u.accesses, u.stores, u.writebacks, u.misses[0], u.misses[1], u.misses[2]
            );
        }
        let mut presets: Vec<&str> = a.points.iter().map(|p| p.preset.as_str()).collect();
        presets.dedup();
        for pre in presets {
            println!("  {pre}: time over fast-only (level 3, with bandwidth queueing)");
            print!("  {:<6}", "DRAM");
            for p in &r.policies {
                print!(" {p:>16}");
            }
            println!(" {:>9} {:>8}", "xmem/orc", "xm<=hot");
            for pt in a.points.iter().filter(|p| p.preset == pre) {
                print!("  {:<6}", frac(pt.fraction));
                for p in &pt.policies {
                    print!(" {:>16.3}", p.normalised);
                }
                println!(
                    " {:>9.3} {:>8}",
                    pt.xmem_over_oracle, pt.xmem_ahead_of_page_hotness
                );
            }
            let metric = |title: &str, v: &dyn Fn(&super::sweep::PolicyResult) -> f64| {
                println!("  {pre}: {title}");
                for pt in a.points.iter().filter(|p| p.preset == pre) {
                    print!("  {:<6}", frac(pt.fraction));
                    for p in &pt.policies {
                        print!(" {:>16.3}", v(p));
                    }
                    println!();
                }
            };
            metric("of which bandwidth queueing, ms per pass", &|p| {
                p.queueing_ms
            });
            metric("stores to the slow tier over slow-only's (Fig. 30)", &|p| {
                p.writes_vs_slow_only
            });
            metric(
                "lines written back to the slow tier over slow-only's",
                &|p| p.writebacks_vs_slow_only,
            );
        }
    }
    for a in &r.apps {
        let n = a.points.len();
        let count =
            |f: &dyn Fn(&super::sweep::Point) -> bool| a.points.iter().filter(|p| f(p)).count();
        println!(
            "\n{}: x-mem within 10% of the oracle at {} of {n} points (without the write term: \
             {}), ahead of page hotness at {} ({} of the {} where some placement of whole units \
             is); unfiltered profile: within 10% at {}, ahead at {}; per-region profiles: \
             within 10% at {}, ahead at {}",
            a.name,
            count(&|p| p.xmem_within_10pct_of_oracle),
            count(&|p| p.xmem_reads_over_oracle <= 1.10),
            count(&|p| p.xmem_ahead_of_page_hotness),
            count(&|p| p.xmem_ahead_of_page_hotness && p.units_can_match_page_hotness),
            count(&|p| p.units_can_match_page_hotness),
            count(&|p| p.xmem_unfiltered_over_oracle <= 1.10),
            count(&|p| p.xmem_unfiltered_ahead_of_page_hotness),
            count(&|p| p.xmem_regions_over_oracle <= 1.10),
            count(&|p| p.xmem_regions_ahead_of_page_hotness),
        );
    }
    println!("\nmigration: {}", r.migration);
}

pub(super) fn draw(p: &Path, r: &Report) -> Result<()> {
    let mut panels = vec![];
    for a in &r.apps {
        let mut presets: Vec<&str> = a.points.iter().map(|p| p.preset.as_str()).collect();
        presets.dedup();
        for pre in presets {
            let pts: Vec<_> = a.points.iter().filter(|p| p.preset == pre).collect();
            let series = r
                .policies
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let line = pts
                        .iter()
                        .map(|pt| (pt.fraction, pt.policies[i].normalised))
                        .collect();
                    (name.to_string(), line)
                })
                .collect();
            panels.push(LinePanel {
                title: format!("{} on {pre}", a.name),
                series,
            });
        }
    }
    let axes = Axes {
        x_label: "DRAM share of the footprint",
        y_label: "time over fast-only (level 3)",
        log_x: true,
        log_y: false,
        x_fmt: frac,
    };
    let cols = if panels.len() > 2 { 4 } else { 2 };
    plot::line_panels(
        p,
        &format!("X-Mem against other placements (HMEP level 3): {}", r.cpu),
        axes,
        &panels,
        cols,
    )
}
