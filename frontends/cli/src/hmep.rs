//! `pmkit hmep ...`: slower memory emulated honestly (systems/hmep, docs/hmep.md). `presets`
//! lists the slow memories with their sources; `calibrate` measures this machine per access
//! pattern (in this process; only `--plot` runs `pmkit-bench`, which holds the plotting);
//! `model` resolves a preset against a saved calibration into ns per access per pattern, the
//! numbers `pmkit xmem place --slow-latency` takes.

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use pmkit_hmep::calib::Calibration;
use pmkit_hmep::model::Model;
use pmkit_hmep::preset::{self, Mode};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(ClapArgs)]
pub(crate) struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(ClapArgs)]
struct CalibrateArgs {
    /// Print JSON (what `pmkit hmep model --calibration FILE` reads) instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw the results to this SVG file (runs `pmkit-bench hmep-plot-calibration`).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// 64 MiB buffers and one run: a smoke test, not a calibration.
    #[arg(long)]
    quick: bool,
    /// Runs per backing; every value is the median over runs [default: 3, 1 with --quick].
    #[arg(long)]
    rounds: Option<usize>,
    /// Buffer per backing in MiB, a power of two (default 1024, quick 64; keep it at least 32x
    /// the last-level cache so the loads miss).
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
    /// Directory of the file backing (and of the JSON handed to the plotter).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
}

#[derive(Subcommand)]
enum Cmd {
    /// The slow-memory presets: latency, bandwidth, device line, mode and sources.
    Presets {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure this machine's memory per access pattern and backing (pointer chase, random,
    /// sequential, streams; 4 KiB pages, huge pages, a /dev/shm file) and every preset's model
    /// on it (about a minute; --quick: seconds).
    Calibrate(CalibrateArgs),
    /// ns per access of each pattern on the fast tier (measured) and on a preset's slow tier
    /// (modelled), from a calibration saved with `pmkit hmep calibrate --json > FILE`.
    Model {
        /// A preset name (`pmkit hmep presets` lists them).
        preset: String,
        /// This machine's calibration, made by `pmkit hmep calibrate --json > FILE`.
        #[arg(long)]
        calibration: PathBuf,
        /// The backing that plays the fast tier: anon-4k, anon-thp or file:DIR.
        #[arg(long, default_value = "anon-4k")]
        fast: String,
        /// absolute, ratio or delta [default: the preset's own]
        #[arg(long)]
        mode: Option<Mode>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    match a.cmd {
        Cmd::Presets { json } => {
            let all = preset::all();
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "{:<15} {:>6} {:>9} {:>8} {:>9} {:>10} {:>5}",
                "preset", "mode", "latency", "vs DRAM", "read GB/s", "write GB/s", "line"
            );
            for p in &all {
                let vs = if p.mode == Mode::Delta {
                    format!("+{:.0} ns", p.chase_ns)
                } else {
                    format!("{:.2}x", p.chase_ns / p.ref_dram_ns)
                };
                println!(
                    "{:<15} {:>6} {:>6.0} ns {:>8} {:>9.1} {:>10.1} {:>5}",
                    p.name, p.mode, p.chase_ns, vs, p.read_gbs, p.write_gbs, p.line_bytes
                );
            }
            println!("\nsources:");
            for p in &all {
                for s in &p.sources {
                    println!("  {}: {s}", p.name);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Calibrate(a) => calibrate(a),
        Cmd::Model {
            preset: name,
            calibration,
            fast,
            mode,
            json,
        } => {
            let text = std::fs::read_to_string(&calibration)
                .with_context(|| format!("reading the calibration {}", calibration.display()))?;
            let c: Calibration = serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is not a calibration: make one with `pmkit hmep calibrate --json > FILE`",
                    calibration.display()
                )
            })?;
            let tier = c.tier(&fast).with_context(|| {
                let have: Vec<&str> = c.tiers.iter().map(|t| t.backing.as_str()).collect();
                format!("no backing {fast:?} in the calibration (it has {have:?})")
            })?;
            let m = Model::new(&preset::by_name(&name)?, tier, mode)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&m)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "{} ({} mode) over {} measured on {}: a model, not a measurement",
                m.preset, m.mode, m.fast_backing, c.cpu
            );
            println!(
                "{:<14} {:>10} {:>10} {:>10}",
                "ns per access", "fast", "slow", "slow-fast"
            );
            for (i, p) in ["pointer chase", "random", "streaming"].iter().enumerate() {
                println!(
                    "{:<14} {:>10.2} {:>10.2} {:>10.2}",
                    p,
                    m.fast[i],
                    m.slow[i],
                    m.slow[i] - m.fast[i]
                );
            }
            println!(
                "MLP {:.1}, prefetch gain {:.1}; slow line write {:.2} ns random, {:.2} ns in order",
                m.mlp, m.pf, m.slow_write_random_ns, m.slow_write_seq_ns
            );
            let d: Vec<String> = (0..3)
                .map(|i| format!("{:.2}", m.slow[i] - m.fast[i]))
                .collect();
            println!(
                "for X-Mem's placement: pmkit xmem place ... --slow-latency {}",
                d.join(",")
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `pmkit hmep calibrate`: measure here, print; draw through the benchmarks' plotter.
fn calibrate(a: CalibrateArgs) -> Result<ExitCode> {
    use pmkit_hmep::calib::{self, Options};
    use pmkit_hmep::report::{backing, Report};
    let backings = a
        .backing
        .iter()
        .map(|b| backing(b, &a.dir).map_err(|e| anyhow::anyhow!("--backing: {e}")))
        .collect::<Result<Vec<_>>>()?;
    let fast = backing(&a.fast, &a.dir).map_err(|e| anyhow::anyhow!("--fast: {e}"))?;
    let mut o = match a.quick {
        true => Options::quick(backings),
        false => Options::full(backings),
    };
    if let Some(m) = a.size_mib {
        o.bytes = m << 20;
    }
    o.runs = a.rounds.unwrap_or(o.runs).clamp(1, 100);
    let bar = pmkit::progress::Progress::new(!a.json, (o.backings.len() * o.runs) as u64);
    let c = calib::run(&o, pmkit_media::cpu::label(), &mut |b| {
        bar.set_message(b.to_string());
        bar.inc();
    })
    .context("calibrating")?;
    bar.finish();
    let report = Report::new(c, o.runs, &fast, a.mode);
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(plot) = &a.plot {
        let saved = a
            .dir
            .join(format!("pmkit-calibration-{}.json", std::process::id()));
        std::fs::write(&saved, &json).with_context(|| format!("writing {}", saved.display()))?;
        let drawn = crate::bench::run_child(
            "pmkit hmep calibrate --plot",
            &[
                "hmep-plot-calibration".into(),
                saved.clone().into(),
                plot.clone().into(),
            ],
        );
        let _ = std::fs::remove_file(&saved);
        drawn?;
    }
    match a.json {
        true => println!("{json}"),
        false => report.print_table(),
    }
    if let Some(plot) = &a.plot {
        eprintln!("plot: {}", plot.display());
    }
    Ok(ExitCode::SUCCESS)
}
