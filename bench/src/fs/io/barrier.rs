//! `pmkit bench fs-barrier` (thesis Fig. 15c): throughput as every persistence
//! barrier is made slower (`--barrier-ns`, default 0, 100, 250, 500 and 1000 ns more per fence),
//! on PMFS in process (the library: `MountOptions::barrier_ns`), under the LD_PRELOAD shim
//! (`PMFS_BARRIER_NS`) and on ext4 on `pmkit attach` (the PM device's barrier emulation,
//! `--emulate barrier=NS`). Workloads: 4 KiB and 64 B random writes with an fdatasync after
//! each, 256 KiB sequential writes with an fdatasync after each (every 256 KiB written, as in
//! Fig. 13) and a create + unlink loop. Beside each rate, the barriers it issues per second where
//! this process can count them: the library's fences, and the flushes the PM device under ext4
//! takes (the shim's fences are counted in the child and not reported).

use super::job::{Job, Pattern};
use super::runner::{self, Work};
use crate::fs::targets::{self, Target};
use crate::host::{cpu_label, Scratch};
use crate::report::{median, plot, rotated_rounds, BenchFlags};
use anyhow::{ensure, Context, Result};
use pmkit::args::EngineArgs;
use pmkit_media::emulate::EmulationSpec;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    flags: BenchFlags,
    /// Extra nanoseconds per persistence barrier, one column each (the first is the base of
    /// the normalised throughput)
    #[arg(long, value_delimiter = ',', default_value = "0,100,250,500,1000")]
    barrier_ns: Vec<u64>,
    /// Milliseconds per workload per round (default 1000, quick 100).
    #[arg(long)]
    ms: Option<u64>,
    /// Size of the prefilled file the writes go to, in MiB (default 64, quick 8).
    #[arg(long)]
    file_mib: Option<u64>,
    /// Size of the PMFS pool and of the ext4 device, in MiB.
    #[arg(long, default_value_t = 512)]
    size_mib: u64,
    /// Protection of PMFS (library and shim: auto, none, kernel, pkey).
    #[arg(long, default_value = "auto")]
    pmfs_protect: pmkit::args::ProtectArg,
    /// (internal) run the create+unlink loop in DIR under the shim and print its rate
    #[arg(long = "child-create-unlink", value_name = "DIR", hide = true)]
    child: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

const TARGETS: [Target; 3] = [Target::Library, Target::Shim, Target::Ext4Attach];

#[derive(Serialize, Clone)]
struct Sample {
    config: String,
    barrier_ns: u64,
    work: String,
    ops_per_s: f64,
    /// Library fences or device flushes per second (see [`Report::fences`]).
    fences_per_s: Option<f64>,
}

/// One (configuration, workload) line: medians per barrier value.
#[derive(Serialize)]
struct Line {
    config: String,
    work: String,
    points: Vec<Point>,
}

#[derive(Serialize)]
struct Point {
    barrier_ns: u64,
    ops_per_s: f64,
    /// ops_per_s / that at the first barrier value.
    normalised: f64,
    fences_per_s: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    cpu: String,
    rounds: usize,
    ms: u64,
    file_bytes: u64,
    pmfs_protect: String,
    barrier_ns: Vec<u64>,
    /// What `fences_per_s` counts per configuration.
    fences: Vec<(String, String)>,
    samples: Vec<Sample>,
    lines: Vec<Line>,
}

fn works(file_bytes: u64, ms: u64) -> Vec<Work> {
    vec![
        Work::Io(Job::synced(Pattern::RandWrite, 4096, file_bytes, ms)),
        Work::Io(Job::synced(Pattern::RandWrite, 64, file_bytes, ms)),
        Work::Io(Job::fig13(Pattern::SeqWrite, 256 << 10, file_bytes, ms)),
        Work::CreateUnlink { ms },
    ]
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let quick = a.flags.quick;
    let ms = a.ms.unwrap_or(if quick { 100 } else { 1000 }).max(10);
    if let Some(dir) = &a.child {
        runner::child(dir, ms)?;
        return Ok(ExitCode::SUCCESS);
    }
    super::preflight("fs-barrier")?;
    ensure!(
        !a.barrier_ns.is_empty(),
        "--barrier-ns: give at least one value"
    );
    ensure!(
        a.barrier_ns.iter().all(|&b| b <= 1_000_000),
        "--barrier-ns: at most 1000000 ns (1 ms) per barrier"
    );
    let rounds = a.flags.rounds(2);
    let file_bytes = a.file_mib.unwrap_or(if quick { 8 } else { 64 }).max(1) << 20;
    let works = works(file_bytes, ms);
    let base = Scratch::dir(&std::env::temp_dir(), "fs-barrier")?;
    let mnt = base.path().join("mnt");
    std::fs::create_dir_all(&mnt)?;
    let cells = a.barrier_ns.len();
    let bar = a.flags.progress(rounds * cells * TARGETS.len());
    let runs = rotated_rounds(rounds, cells, TARGETS.len(), &bar, |r, c, i| {
        let (t, ns) = (TARGETS[i], a.barrier_ns[c]);
        bar.set_message(format!("round {}/{rounds}: {} {ns} ns", r + 1, t.name()));
        let s = super::sizes_for(a.size_mib, file_bytes, a.pmfs_protect, ns);
        let mut engine = a.engine.clone();
        engine.emulate = Some(EmulationSpec {
            barrier_ns: ns,
            ..a.engine.emulate.unwrap_or_default()
        });
        let up = targets::up(t, &a.flags.dir, &mnt, &s, &engine)
            .with_context(|| format!("setting up {} with {ns} ns barriers", t.name()))?;
        let res = runner::run(t, &up, &mnt, file_bytes, &works);
        let down = targets::down(up, &mnt);
        let res = res.with_context(|| format!("fs-barrier on {} at {ns} ns", t.name()))?;
        down.with_context(|| format!("tearing down {}", t.name()))?;
        Ok(res
            .iter()
            .zip(&works)
            .map(|(d, w)| Sample {
                config: t.name(),
                barrier_ns: ns,
                work: w.label(),
                ops_per_s: d.m.iops,
                fences_per_s: d.fences_per_op.map(|f| f * d.m.iops),
            })
            .collect::<Vec<_>>())
    })?;
    let samples: Vec<Sample> = runs.into_iter().flatten().flatten().flatten().collect();
    let lines = summarize(&samples, &a.barrier_ns, &works);
    let report = Report {
        cpu: cpu_label(),
        rounds,
        ms,
        file_bytes,
        pmfs_protect: a.pmfs_protect.to_string(),
        barrier_ns: a.barrier_ns.clone(),
        fences: vec![
            (
                "pmfs-lib".into(),
                "persistence fences of the library".into(),
            ),
            ("pmfs-shim".into(), "not counted (in the child)".into()),
            (
                "ext4-attach".into(),
                "flush requests the PM device took".into(),
            ),
        ],
        samples,
        lines,
    };
    a.flags.emit(&report, draw, print_table)
}

fn summarize(samples: &[Sample], barriers: &[u64], works: &[Work]) -> Vec<Line> {
    let mut out = vec![];
    for w in works {
        let work = w.label();
        for t in TARGETS {
            let config = t.name();
            let of = |ns: u64| -> Vec<&Sample> {
                samples
                    .iter()
                    .filter(|s| s.config == config && s.work == work && s.barrier_ns == ns)
                    .collect()
            };
            let ops = |ns: u64| median(of(ns).iter().map(|s| s.ops_per_s));
            let first = ops(barriers[0]).max(1e-9);
            let points = barriers
                .iter()
                .map(|&ns| {
                    let f: Vec<f64> = of(ns).iter().filter_map(|s| s.fences_per_s).collect();
                    Point {
                        barrier_ns: ns,
                        ops_per_s: ops(ns),
                        normalised: ops(ns) / first,
                        fences_per_s: (!f.is_empty()).then(|| median(f)),
                    }
                })
                .collect();
            out.push(Line {
                config: t.name(),
                work: w.label(),
                points,
            });
        }
    }
    out
}

/// One panel per workload: throughput normalised to the first barrier value against the
/// barrier's extra ns, one line per configuration.
fn draw(p: &Path, r: &Report) -> Result<()> {
    let mut works: Vec<&str> = r.lines.iter().map(|l| l.work.as_str()).collect();
    works.dedup();
    let panels: Vec<plot::LinePanel> = works
        .iter()
        .map(|&w| plot::LinePanel {
            title: w.to_string(),
            series: r
                .lines
                .iter()
                .filter(|l| l.work == w)
                .map(|l| {
                    let pts = l.points.iter().map(|p| (p.barrier_ns as f64, p.normalised));
                    (l.config.clone(), pts.collect())
                })
                .collect(),
        })
        .collect();
    plot::line_panels(
        p,
        &format!(
            "Throughput as the persistence barrier slows (thesis Fig. 15c); {}",
            r.cpu
        ),
        plot::Axes {
            x_label: "extra ns per barrier",
            y_label: "ops/s / ops/s at the first value",
            log_x: false,
            log_y: false,
            x_fmt: |v| format!("{v:.0}"),
        },
        &panels,
        2,
    )
}

fn print_table(r: &Report) {
    println!(
        "bench fs-barrier: median of {} round(s), {} ms per workload, {} MiB file; PMFS \
         protection {}; {}",
        r.rounds,
        r.ms,
        r.file_bytes >> 20,
        r.pmfs_protect,
        r.cpu
    );
    println!(
        "ops/s (normalised to {} ns); barriers/s: library fences, ext4-attach device flushes",
        r.barrier_ns[0]
    );
    print!("{:<26} {:<12}", "workload", "config");
    for ns in &r.barrier_ns {
        print!(" {:>18}", format!("{ns} ns"));
    }
    println!();
    for l in &r.lines {
        print!("{:<26} {:<12}", l.work, l.config);
        for p in &l.points {
            print!(
                " {:>18}",
                format!("{:.0} ({:.2})", p.ops_per_s, p.normalised)
            );
        }
        println!();
        if l.points.iter().any(|p| p.fences_per_s.is_some()) {
            print!("{:<26} {:<12}", "  barriers/s", "");
            for p in &l.points {
                let f = p.fences_per_s.map_or("-".into(), |f| format!("{f:.0}"));
                print!(" {f:>18}");
            }
            println!();
        }
    }
}
