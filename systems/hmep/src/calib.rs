//! `pmkit hmep calibrate`: what this machine's memory does per access pattern (thesis Fig. 3 and
//! 22: pointer chasing pays the whole latency, independent random loads overlap, sequential ones
//! ride the prefetchers), per backing, as medians of several runs. Every emulated result is
//! scaled from these numbers, so every report prints them.

use crate::error::Result;
use crate::mem::{huge_backed, Backing, Buf, LINE};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Options {
    pub backings: Vec<Backing>,
    /// Buffer bytes per backing (a power of two; ≥ 32x the last-level cache for honest misses).
    pub bytes: usize,
    /// Runs per measurement; the median is reported.
    pub runs: usize,
    /// Dependent loads per chase run.
    pub chase_steps: u64,
    /// Loads per random run.
    pub random_loads: u64,
    pub seed: u64,
}

impl Options {
    /// The full calibration: 1 GiB per backing, 3 runs.
    pub fn full(backings: Vec<Backing>) -> Options {
        Options {
            backings,
            bytes: 1 << 30,
            runs: 3,
            chase_steps: 2_000_000,
            random_loads: 20_000_000,
            seed: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// A quick one (tests, --quick): 64 MiB, one run, few loads.
    pub fn quick(backings: Vec<Backing>) -> Options {
        Options {
            bytes: 64 << 20,
            runs: 1,
            chase_steps: 200_000,
            random_loads: 1_000_000,
            ..Options::full(backings)
        }
    }
}

/// The measurements of one backing (medians over the runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tier {
    pub backing: String,
    pub bytes: u64,
    /// Share of the buffer the kernel backed with 2 MiB pages (0..1).
    pub huge_fraction: f64,
    /// ns per dependent load (pointer chase over random lines).
    pub chase_ns: f64,
    /// ns per independent random line load.
    pub random_ns: f64,
    /// ns per line of an in-order walk.
    pub seq_ns: f64,
    /// One-thread read and write streams, GB/s.
    pub read_gbs: f64,
    pub write_gbs: f64,
    /// Every run's value, per measurement, for the spread.
    pub runs: Runs,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Runs {
    pub chase_ns: Vec<f64>,
    pub random_ns: Vec<f64>,
    pub seq_ns: Vec<f64>,
    pub read_gbs: Vec<f64>,
    pub write_gbs: Vec<f64>,
}

/// A calibration: the machine and one [`Tier`] per backing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub cpu: String,
    pub tiers: Vec<Tier>,
}

impl Calibration {
    /// The tier measured on `backing` (by name).
    pub fn tier(&self, backing: &str) -> Option<&Tier> {
        self.tiers.iter().find(|t| t.backing == backing)
    }
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn ns_per(t: Instant, n: u64) -> f64 {
    t.elapsed().as_nanos() as f64 / n.max(1) as f64
}

fn gbs(t: Instant, bytes: usize) -> f64 {
    bytes as f64 / t.elapsed().as_secs_f64().max(1e-12) / 1e9
}

/// Measure one backing; `step` is called after each run (progress).
pub fn measure(b: &Backing, o: &Options, step: &mut dyn FnMut(&str)) -> Result<Tier> {
    let mut buf = Buf::new(b, o.bytes)?;
    buf.link_cycle(o.seed);
    let huge_fraction = huge_backed(buf.addr())
        .map(|(h, rss)| h as f64 / rss.max(1) as f64)
        .unwrap_or(0.0)
        .min(1.0);
    let mut r = Runs::default();
    for run in 0..o.runs.max(1) {
        // Warm the TLB and caches the same way before each kind.
        black_box(buf.chase(o.chase_steps / 10));
        let t = Instant::now();
        black_box(buf.chase(o.chase_steps));
        r.chase_ns.push(ns_per(t, o.chase_steps));

        let t = Instant::now();
        black_box(buf.random(o.random_loads, o.seed ^ run as u64));
        r.random_ns.push(ns_per(t, o.random_loads));

        let t = Instant::now();
        black_box(buf.sequential());
        r.seq_ns.push(ns_per(t, (buf.len() / LINE) as u64));

        let t = Instant::now();
        black_box(buf.read_all());
        r.read_gbs.push(gbs(t, buf.len()));

        let t = Instant::now();
        buf.write_all(run as u8);
        r.write_gbs.push(gbs(t, buf.len()));
        // The write wiped the cycle: relink for the next run's chase.
        buf.link_cycle(o.seed);
        step(&b.name());
    }
    Ok(Tier {
        backing: b.name(),
        bytes: o.bytes as u64,
        huge_fraction,
        chase_ns: median(&r.chase_ns),
        random_ns: median(&r.random_ns),
        seq_ns: median(&r.seq_ns),
        read_gbs: median(&r.read_gbs),
        write_gbs: median(&r.write_gbs),
        runs: r,
    })
}

/// Measure every backing of `o`.
pub fn run(o: &Options, cpu: String, step: &mut dyn FnMut(&str)) -> Result<Calibration> {
    let tiers = o
        .backings
        .iter()
        .map(|b| measure(b, o, step))
        .collect::<Result<Vec<_>>>()?;
    Ok(Calibration { cpu, tiers })
}
