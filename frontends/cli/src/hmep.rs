//! `pmkit hmep ...`: slower memory emulated honestly (systems/hmep, docs/hmep.md). `presets`
//! lists the slow memories with their sources; `calibrate` measures this machine per access
//! pattern (it runs `pmkit-bench hmep-calibrate`: a measurement with a plot is a benchmark);
//! `model` resolves a preset against a saved calibration into ns per access per pattern, the
//! numbers `pmkit xmem place --slow-latency` takes.

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use pmkit_hmep::calib::Calibration;
use pmkit_hmep::model::Model;
use pmkit_hmep::preset::{self, Mode};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
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
    /// on it. Runs `pmkit-bench hmep-calibrate` with these arguments (--json, --plot FILE,
    /// --quick, --size-mib, --backing, --rounds; `pmkit hmep calibrate --help`).
    #[command(disable_help_flag = true)]
    Calibrate {
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        /// Arguments for `pmkit-bench hmep-calibrate` (`--help` lists them).
        args: Vec<OsString>,
    },
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

pub fn run(a: Args) -> Result<ExitCode> {
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
        Cmd::Calibrate { args } => {
            let mut all = vec![OsString::from("hmep-calibrate")];
            all.extend(args);
            crate::bench::exec("pmkit hmep calibrate", &all)
        }
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
