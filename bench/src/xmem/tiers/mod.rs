//! `pmkit bench xmem`: X-Mem's placement against the other policies a two-tier machine could
//! use (thesis Fig. 24-30, plus the tag-blind page-hotness policy OS tiering uses), for each
//! slow-memory preset and DRAM fraction, all predicted by HMEP's trace simulator (emulation
//! level 3) from one traced pass per application and the measured all-fast time. This machine
//! has no slow memory: every number but the fast-only time is a model output, and says so.
//!
//! [`app`] says what an application offers (xgraph's PageRank and BFS; xkv in [`kv_app`]), [`sweep`] traces,
//! times and sweeps it, [`policy`] holds the policies, [`output`] the table and plot.
//! Migration cost (thesis Table 9) is measured by X-Mem's `migrate` example (docs/xmem.md).

mod app;
mod kv_app;
mod output;
mod policy;
mod sweep;

use crate::report::BenchFlags;
use anyhow::{ensure, Context, Result};
use app::{GraphKernel, Kernel, TracedApp};
use pmkit_hmep::cache::llc;
use pmkit_hmep::calib::Tier as CalTier;
use pmkit_hmep::mem::Backing;
use pmkit_hmep::model::Model;
use pmkit_hmep::preset;
use pmkit_hmep::sim::Unit;
use pmkit_xgraph::{Graph, TAGS};
use pmkit_xmem::{Config, Tier, XMem};
use serde::Serialize;
use std::process::ExitCode;
use sweep::{Point, Region};

/// The presets of the thesis-style sweep, and the quick run's two.
const PRESETS: [&str; 4] = [
    "thesis-450-10",
    "thesis-600-5",
    "optane-1dimm",
    "cxl-direct",
];
const QUICK_PRESETS: [&str; 2] = ["thesis-450-10", "optane-1dimm"];
/// DRAM as a fraction of the footprint: 1/32 .. 1/2.
const FRACTIONS: [f64; 5] = [1.0 / 32.0, 1.0 / 16.0, 1.0 / 8.0, 1.0 / 4.0, 1.0 / 2.0];

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    flags: BenchFlags,
    /// R-MAT scale: 2^scale vertices (default 20, quick 12).
    #[arg(long)]
    scale: Option<u32>,
    /// Edges per vertex.
    #[arg(long, default_value_t = 16)]
    edge_factor: usize,
    /// Placement unit in KiB (X-Mem's region as the policies see it; default 2048, quick 16).
    #[arg(long)]
    unit_kib: Option<u64>,
    /// The modelled last-level cache in KiB (default: this machine's, from sysfs; quick 128, so
    /// the quick run's small graph misses it).
    #[arg(long)]
    llc_kib: Option<usize>,
    /// Uninstrumented passes per timed round (default 4, quick 2).
    #[arg(long)]
    reps: Option<usize>,
    /// xkv's dataset in MiB (default 512, quick 8); 0 leaves xkv out.
    #[arg(long)]
    kv_mib: Option<usize>,
    /// xkv's requests per pass (default 400000, quick 5000).
    #[arg(long)]
    kv_requests: Option<usize>,
}

#[derive(Serialize)]
struct AppReport {
    name: String,
    tags: Vec<String>,
    /// Bytes of the placement units (the footprint the DRAM fraction applies to), and units.
    footprint_bytes: u64,
    units: usize,
    /// Measured ms of one uninstrumented pass with everything fast (huge pages).
    fast_only_ms: f64,
    /// The traced pass's time over `fast_only_ms`: the level-3 tracer's overhead.
    trace_slowdown: f64,
    /// Per tag, what the traced pass did.
    per_tag: Vec<Unit>,
    points: Vec<Point>,
}

#[derive(Serialize)]
struct Report {
    cpu: String,
    level: &'static str,
    rounds: usize,
    reps: usize,
    vertices: usize,
    edges: usize,
    unit_bytes: u64,
    llc_bytes: usize,
    llc_ways: usize,
    /// The fast tier as calibrated at the start of the run; every preset is resolved on it.
    fast: CalTier,
    models: Vec<Model>,
    fractions: Vec<f64>,
    policies: Vec<&'static str>,
    apps: Vec<AppReport>,
    /// Where migration cost (thesis Table 9) is measured.
    migration: &'static str,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let quick = a.flags.quick;
    let scale = a.scale.unwrap_or(if quick { 12 } else { 20 });
    let unit_kib = a.unit_kib.unwrap_or(if quick { 16 } else { 2048 });
    ensure!(
        unit_kib >= 4 && unit_kib.is_power_of_two(),
        "--unit-kib {unit_kib}: a power of two of at least 4"
    );
    let reps = a.reps.unwrap_or(if quick { 2 } else { 4 }).max(1);
    let rounds = a.flags.rounds(3);
    let presets: &[&str] = if quick { &QUICK_PRESETS } else { &PRESETS };
    let bar = a.flags.progress(5);

    // The fast tier (anonymous memory with huge pages), measured now; presets resolve on it.
    bar.set_message("calibrating anon-thp");
    let cal = crate::hmep::calibrate_tiers(vec![Backing::AnonThp], quick)?;
    let fast = cal.tiers[0].clone();
    let models = presets
        .iter()
        .map(|p| Model::new(&preset::by_name(p)?, &fast, None))
        .collect::<pmkit_hmep::Result<Vec<_>>>()
        .context("resolving the presets on this machine")?;
    bar.inc();

    // xgraph in X-Mem, everything fast.
    let n = 1usize << scale;
    let adj = (n + 1) * 8 + (a.edge_factor << scale) * 4;
    let region = (adj + (8 << 20)).next_power_of_two().max(2 << 20);
    let pm = a
        .flags
        .dir
        .join(format!("pmkit-bench-xmem-{}.pm", std::process::id()));
    let _ = std::fs::remove_file(&pm);
    let mut cfg = Config::new(&pm, 3 * region as u64, 3 * region as u64);
    cfg.region_size = region;
    cfg.thp = true;
    let x = XMem::new(cfg).context("starting X-Mem")?;
    bar.set_message(format!("building an R-MAT graph, scale {scale}"));
    let mut g = Graph::build(&x, scale, a.edge_factor, 0x5eed)?;
    for r in x.regions() {
        x.move_region(r.index, Tier::Fast)?;
    }
    let regions: Vec<Region> = x
        .regions()
        .iter()
        .map(|r| {
            let name = x.tag_name(r.tag)?;
            let tag = TAGS
                .iter()
                .position(|t| *t == name)
                .context("an xgraph tag")?;
            Ok(Region {
                addr: r.addr as u64,
                bytes: r.bytes as u64,
                span: region as u64,
                tag,
            })
        })
        .collect::<Result<_>>()?;
    let edges = g.edges;
    bar.inc();

    let llc = match a.llc_kib.or(quick.then_some(128)) {
        Some(k) => (k << 10, 8),
        None => llc(),
    };
    let mut apps = vec![];
    for kernel in [Kernel::PageRank, Kernel::Bfs] {
        let mut app = GraphKernel::new(&mut g, kernel);
        bar.set_message(format!("{}: tracing and timing", app.name()));
        apps.push(sweep_app(
            &mut app, &regions, llc, rounds, reps, unit_kib, &models,
        )?);
        bar.inc();
    }
    drop(g);
    drop(x);
    let _ = std::fs::remove_file(&pm);

    // xkv in its own X-Mem (the graph's is gone), everything fast.
    let kv_mib = a.kv_mib.unwrap_or(if quick { 8 } else { 512 });
    let kv_requests = a.kv_requests.unwrap_or(if quick { 5_000 } else { 400_000 });
    if kv_mib > 0 {
        ensure!(
            (4..=65_536).contains(&kv_mib) && kv_requests >= 1000,
            "--kv-mib 4..=65536 (or 0) and --kv-requests >= 1000"
        );
        let (x, k) = kv_app::xmem(&pm, kv_mib)?;
        bar.set_message(format!("xkv: loading {kv_mib} MiB"));
        let (mut app, regions) = kv_app::KvApp::load(&x, &k, kv_requests)?;
        bar.set_message("xkv: tracing and timing");
        apps.push(sweep_app(
            &mut app, &regions, llc, rounds, reps, unit_kib, &models,
        )?);
        bar.inc();
        drop(app);
        drop(x);
        let _ = std::fs::remove_file(&pm);
    }
    bar.finish();

    let report = Report {
        cpu: cal.cpu.clone(),
        level: "level 3 (trace simulator): predicted = measured fast-only time (huge pages) + \
                the slow units' traced misses x (L(p, slow) - L(p, fast)) of each preset resolved \
                on this machine + bandwidth queueing per window of the trace; no TLB term \
                (presets are mapped with the fast tier's huge pages)",
        rounds,
        reps,
        vertices: n,
        edges,
        unit_bytes: unit_kib << 10,
        llc_bytes: llc.0,
        llc_ways: llc.1,
        fast,
        models,
        fractions: FRACTIONS.to_vec(),
        policies: policy::POLICIES.to_vec(),
        apps,
        migration: "not modelled here: X-Mem's migration ms/GiB (thesis Table 9) is measured by \
                    `cargo run --release -p pmkit-xmem --example migrate` (docs/xmem.md)",
    };
    a.flags.emit(&report, output::draw, output::table)
}

fn sweep_app(
    app: &mut dyn TracedApp,
    regions: &[Region],
    llc: (usize, usize),
    rounds: usize,
    reps: usize,
    unit_kib: u64,
    models: &[Model],
) -> Result<AppReport> {
    let t = sweep::trace_and_time(app, llc, rounds, reps)?;
    let tags = app.tags();
    let shift = (unit_kib << 10).ilog2();
    let d = sweep::data(&t.misses, regions, tags.len(), shift)?;
    ensure!(!d.units.is_empty(), "{}: no placement units", app.name());
    let points = sweep::evaluate(&d, models, &FRACTIONS, t.base_ns);
    Ok(AppReport {
        name: app.name(),
        footprint_bytes: d.units.len() as u64 * d.unit_bytes,
        units: d.units.len(),
        fast_only_ms: t.base_ns / 1e6,
        trace_slowdown: t.traced_ns / t.base_ns,
        per_tag: t.misses.units.clone(),
        tags,
        points,
    })
}
