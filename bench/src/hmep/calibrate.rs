//! `pmkit hmep calibrate` (`pmkit-bench hmep-calibrate`): this machine's memory per access
//! pattern and backing (thesis Fig. 3 and 22), medians over runs, a table or JSON and a plot;
//! and, per preset, the stall per access the model derives from it (`pmkit_hmep::model`). The
//! JSON is what `pmkit hmep model --calibration FILE` reads.

use crate::host::cpu_label;
use crate::report::{plot, BenchFlags};
use anyhow::{Context, Result};
use pmkit_hmep::calib::{self, Calibration, Options};
use pmkit_hmep::mem::Backing;
use pmkit_hmep::model::Model;
use pmkit_hmep::preset::{self, Mode};
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    flags: BenchFlags,
    /// Buffer per backing in MiB, a power of two (default 1024, quick 64; keep it ≥ 32x the
    /// last-level cache so the loads miss).
    #[arg(long)]
    size_mib: Option<usize>,
    /// Backings: anon (4 KiB pages), thp (anonymous, 2 MiB pages asked for), file (a shared
    /// mapping of a file in --dir: emulated PM).
    #[arg(long, value_delimiter = ',', default_value = "anon,thp,file")]
    backing: Vec<String>,
    /// The backing the models treat as the fast tier (local DRAM).
    #[arg(long, default_value = "anon")]
    fast: String,
    /// Mode of every preset's latency (default: each preset's own).
    #[arg(long)]
    mode: Option<Mode>,
}

#[derive(Serialize)]
struct PageWalk {
    fast: String,
    slow: String,
    /// ns per page walk in front of a dependent load (a chase).
    ns: f64,
    /// ns per page walk in front of independent loads (the same lines gathered from a list).
    independent_ns: f64,
    /// ns per L1 dTLB miss that hits the L2 TLB.
    l1_ns: f64,
}

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    calibration: Calibration,
    runs: usize,
    /// The models of every preset over the fast backing: what "slow" means in every emulated
    /// result on this machine.
    models: Vec<Model>,
    /// ns per page walk in front of a cache hit, between the huge-page tier and each 4 KiB one
    /// (`pmkit_hmep::calib::walk_ns`).
    page_walks: Vec<PageWalk>,
    /// Where the TLB sizes of the walk model come from.
    tlb: pmkit_hmep::tlb::Geometry,
    /// Emulation level of the models (always the model: this machine has no slow memory).
    level: &'static str,
}

pub fn run(a: Args) -> Result<ExitCode> {
    let backings = a
        .backing
        .iter()
        .map(|b| match b.as_str() {
            "anon" => Ok(Backing::Anon),
            "thp" => Ok(Backing::AnonThp),
            "file" => Ok(Backing::File(a.flags.dir.clone())),
            _ => anyhow::bail!("--backing {b:?}: the backings are anon, thp and file"),
        })
        .collect::<Result<Vec<_>>>()?;
    let mut o = if a.flags.quick {
        Options::quick(backings)
    } else {
        Options::full(backings)
    };
    if let Some(m) = a.size_mib {
        o.bytes = m << 20;
    }
    o.runs = a.flags.rounds(o.runs);
    let bar = a.flags.progress(o.backings.len() * o.runs);
    let c = calib::run(&o, cpu_label(), &mut |b| {
        bar.set_message(b.to_string());
        bar.inc();
    })
    .context("calibrating")?;
    bar.finish();
    let fast_name = match a.fast.as_str() {
        "anon" => Backing::Anon.name(),
        "thp" => Backing::AnonThp.name(),
        "file" => Backing::File(a.flags.dir.clone()).name(),
        f => anyhow::bail!("--fast {f:?}: one of the backings"),
    };
    let models = match c.tier(&fast_name) {
        Some(fast) => preset::all()
            .iter()
            .filter_map(|p| Model::new(p, fast, a.mode).ok())
            .collect(),
        None => vec![],
    };
    let find = |n: &str| c.tiers.iter().find(|t| t.backing.starts_with(n));
    let page_walks = match find("anon-thp") {
        Some(f) => c
            .tiers
            .iter()
            .filter(|s| s.huge_fraction < 0.5)
            .map(|s| PageWalk {
                fast: f.backing.clone(),
                slow: s.backing.clone(),
                ns: calib::walk_ns(f, s),
                independent_ns: calib::walk_independent_ns(f, s),
                l1_ns: calib::l1_ns(f, s),
            })
            .collect(),
        None => vec![],
    };
    let report = Report {
        page_walks,
        tlb: pmkit_hmep::tlb::Geometry::host(),
        calibration: c,
        runs: o.runs,
        models,
        level: "model (no slow memory on this machine: presets scaled from this calibration)",
    };
    a.flags.emit(&report, draw, table)
}

fn table(r: &Report) {
    let c = &r.calibration;
    println!("CPU: {}; medians of {} run(s)", c.cpu, r.runs);
    println!(
        "{:<24} {:>8} {:>6} {:>10} {:>10} {:>8} {:>9} {:>9}",
        "backing", "MiB", "huge", "chase ns", "random ns", "seq ns", "read GB/s", "write GB/s"
    );
    for t in &c.tiers {
        println!(
            "{:<24} {:>8} {:>5.0}% {:>10.1} {:>10.2} {:>8.2} {:>9.1} {:>9.1}",
            t.backing,
            t.bytes >> 20,
            t.huge_fraction * 100.0,
            t.chase_ns,
            t.random_ns,
            t.seq_ns,
            t.read_gbs,
            t.write_gbs
        );
    }
    println!(
        "\npage walks (a chase over one line in each of {} pages, in the cache; walks per load from the TLB model: {}):",
        c.tiers.first().map_or(0, |t| t.tlb_pages),
        r.tlb.source
    );
    for t in &c.tiers {
        println!(
            "{:<24} {:>8.1} ns per load chased, {:>6.2} gathered; modelled walks per load 4k {:.2} 2m {:.2}",
            t.backing, t.tlb_chase_ns, t.tlb_gather_ns, t.tlb_walks_4k, t.tlb_walks_2m
        );
    }
    println!(
        "L1 dTLB misses (a chase over one line in each of {} pages: beyond the L1 dTLB, inside the L2):",
        c.tiers.first().map_or(0, |t| t.l1_pages)
    );
    for t in &c.tiers {
        println!(
            "{:<24} {:>8.1} ns per load, modelled L2 TLB hits per load 4k {:.2} 2m {:.2}",
            t.backing, t.l1_chase_ns, t.l1_misses_4k, t.l1_misses_2m
        );
    }
    for w in &r.page_walks {
        println!(
            "on a cache hit, {} against {}: page walk {:.1} ns (dependent load), {:.2} ns (independent), L2 TLB hit {:.2} ns",
            w.slow, w.fast, w.ns, w.independent_ns, w.l1_ns
        );
    }
    if r.models.is_empty() {
        return;
    }
    println!(
        "\nns per access on the slow tier ({}), fast = measured:",
        r.level
    );
    println!(
        "{:<15} {:>8} {:>9} {:>9} {:>9} {:>11}",
        "preset", "mode", "chase", "random", "stream", "write line"
    );
    for m in &r.models {
        println!(
            "{:<15} {:>8} {:>9.1} {:>9.2} {:>9.2} {:>11.2}",
            m.preset, m.mode, m.slow[0], m.slow[1], m.slow[2], m.slow_write_random_ns
        );
    }
}

fn draw(p: &Path, r: &Report) -> Result<()> {
    let c = &r.calibration;
    let groups: Vec<String> = c.tiers.iter().map(|t| t.backing.clone()).collect();
    let chase = plot::BarPanel {
        title: "dependent loads (pointer chase), ns each".into(),
        groups: groups.clone(),
        series: vec![(
            "pointer chase".into(),
            c.tiers.iter().map(|t| t.chase_ns).collect(),
        )],
    };
    let indep = plot::BarPanel {
        title: "independent loads, ns each".into(),
        groups: groups.clone(),
        series: vec![
            (
                "random".into(),
                c.tiers.iter().map(|t| t.random_ns).collect(),
            ),
            (
                "sequential".into(),
                c.tiers.iter().map(|t| t.seq_ns).collect(),
            ),
        ],
    };
    let bw = plot::BarPanel {
        title: "one-thread stream, GB/s".into(),
        groups,
        series: vec![
            ("read".into(), c.tiers.iter().map(|t| t.read_gbs).collect()),
            (
                "write".into(),
                c.tiers.iter().map(|t| t.write_gbs).collect(),
            ),
        ],
    };
    plot::bars(
        p,
        &format!("Memory per access pattern: {}", c.cpu),
        "",
        &[chase, indep, bw],
        3,
    )
}
