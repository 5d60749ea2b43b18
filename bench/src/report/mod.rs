//! What every benchmark does the same way: its common flags ([`BenchFlags`]), the rotated-round
//! runner ([`rotated_rounds`]), the median, the progress line, and the output (a table for
//! people, `--json` for machines, `--plot FILE` for figures).

pub(crate) mod plot;

use anyhow::Result;
use pmkit::progress::Progress;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The flags every benchmark takes; `#[command(flatten)]` this into a benchmark's arguments.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct BenchFlags {
    /// Smoke run: small sizes, short runs, one round (a test of the benchmark, not a measurement)
    #[arg(long)]
    pub quick: bool,
    /// Print JSON instead of a table (hides the progress line)
    #[arg(long)]
    pub json: bool,
    /// Draw the results to this SVG file
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Where the devices and pools live (emulated PM)
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Rounds; every value reported is the median over rounds [default: per benchmark (see
    /// above), 1 with --quick]
    #[arg(long)]
    pub rounds: Option<usize>,
}

impl BenchFlags {
    /// `--rounds`, else 1 with `--quick`, else the benchmark's `full` default; 1..=100.
    pub(crate) fn rounds(&self, full: usize) -> usize {
        self.rounds
            .unwrap_or(if self.quick { 1 } else { full })
            .clamp(1, 100)
    }

    /// A progress line of `steps` steps (hidden with `--json` or off a terminal).
    pub(crate) fn progress(&self, steps: usize) -> Progress {
        Progress::new(!self.json, steps as u64)
    }

    /// The output of a run: draw `report` with `draw` when `--plot FILE` is given, then print it
    /// as JSON (`--json`) or as `table` prints it, followed by where the plot went.
    pub(crate) fn emit<R: Serialize>(
        &self,
        report: &R,
        draw: impl FnOnce(&Path, &R) -> Result<()>,
        table: impl FnOnce(&R),
    ) -> Result<ExitCode> {
        if let Some(p) = &self.plot {
            draw(p, report)?;
        }
        if self.json {
            println!("{}", serde_json::to_string_pretty(report)?);
        } else {
            table(report);
            if let Some(p) = &self.plot {
                println!("plot: {}", p.display());
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// The median of `v` (the mean of the middle two for an even count; 0 for none).
pub(crate) fn median(v: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.into_iter().collect();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Run `run(round, cell, config)` once for every round, cell and configuration and return the
/// results as `[cell][config][round]`. Rounds are outermost; within a round each cell runs every
/// configuration in turn, in an order rotated by one per round and per cell, so no
/// configuration always runs first or last and drift on a shared machine hits all of them alike.
/// `bar` advances once per run.
pub(crate) fn rotated_rounds<T>(
    rounds: usize,
    cells: usize,
    configs: usize,
    bar: &Progress,
    mut run: impl FnMut(usize, usize, usize) -> Result<T>,
) -> Result<Vec<Vec<Vec<T>>>> {
    let mut out: Vec<Vec<Vec<T>>> = (0..cells)
        .map(|_| (0..configs).map(|_| Vec::with_capacity(rounds)).collect())
        .collect();
    for r in 0..rounds {
        for (ci, cell) in out.iter_mut().enumerate() {
            for k in 0..configs {
                let i = (k + r + ci) % configs;
                cell[i].push(run(r, ci, i)?);
                bar.inc();
            }
        }
    }
    bar.finish();
    Ok(out)
}

/// Run `f(t)` in `threads` threads at once (t = 0..threads) and return the mean of their
/// results, or the first error.
pub(crate) fn mean_over_threads(
    threads: usize,
    f: impl Fn(usize) -> Result<f64> + Sync,
) -> Result<f64> {
    let f = &f;
    let per_thread: Vec<Result<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|t| s.spawn(move || f(t))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread"))
            .collect()
    });
    let v: Vec<f64> = per_thread.into_iter().collect::<Result<_>>()?;
    Ok(v.iter().sum::<f64>() / v.len().max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median([3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median([]), 0.0);
    }

    #[test]
    fn every_run_once_in_rotated_order() {
        let mut order = vec![];
        let bar = Progress::new(false, 0);
        let out = rotated_rounds(2, 2, 3, &bar, |r, c, i| {
            order.push((r, c, i));
            Ok(r * 100 + c * 10 + i)
        })
        .unwrap();
        assert_eq!(out[1][2], vec![12, 112]);
        assert_eq!(order.len(), 12);
        let firsts: Vec<usize> = order.chunks(3).map(|c| c[0].2).collect();
        assert_eq!(firsts, [0, 1, 1, 2], "each (round, cell) starts one later");
    }
}
