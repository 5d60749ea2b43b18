//! `pmkit-bench hmep-plot-calibration`: the figure of a calibration `pmkit hmep calibrate
//! --json` saved (thesis Fig. 3 and 22). The measurement is the product's (`pmkit_hmep::calib`,
//! `pmkit hmep calibrate`); only the drawing is here, with the other benchmarks' plotting.

use crate::report::plot;
use anyhow::{Context, Result};
use pmkit_hmep::calib::Calibration;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// A calibration saved by `pmkit hmep calibrate --json`.
    calibration: PathBuf,
    /// The SVG file to draw.
    plot: PathBuf,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&a.calibration)
        .with_context(|| format!("reading {}", a.calibration.display()))?;
    let c: Calibration = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a calibration", a.calibration.display()))?;
    draw(&a.plot, &c)?;
    Ok(ExitCode::SUCCESS)
}

fn draw(p: &Path, c: &Calibration) -> Result<()> {
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
