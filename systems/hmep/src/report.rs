//! A calibration with what it means on this machine: every preset's model over the fast
//! backing and the page-walk prices between the huge-page tier and each 4 KiB one. What
//! `pmkit hmep calibrate` prints (`--json`: what `pmkit hmep model --calibration FILE` reads).

use crate::calib::{self, Calibration};
use crate::mem::Backing;
use crate::model::Model;
use crate::preset::{self, Mode};
use serde::Serialize;
use std::path::Path;

#[derive(Serialize)]
pub struct PageWalk {
    pub fast: String,
    pub slow: String,
    /// ns per page walk in front of a dependent load (a chase).
    pub ns: f64,
    /// ns per page walk in front of independent loads (the same lines gathered from a list).
    pub independent_ns: f64,
    /// ns per L1 dTLB miss that hits the L2 TLB.
    pub l1_ns: f64,
}

#[derive(Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub calibration: Calibration,
    pub runs: usize,
    /// The models of every preset over the fast backing: what "slow" means in every emulated
    /// result on this machine.
    pub models: Vec<Model>,
    /// ns per page walk in front of a cache hit, between the huge-page tier and each 4 KiB one
    /// (`calib::walk_ns`).
    pub page_walks: Vec<PageWalk>,
    /// Where the TLB sizes of the walk model come from.
    pub tlb: crate::tlb::Geometry,
    /// Emulation level of the models (always the model: this machine has no slow memory).
    pub level: &'static str,
}

/// The backing a command line names: `anon` (4 KiB pages), `thp` (huge pages asked for),
/// `file` (a shared mapping of a file in `dir`: emulated PM).
pub fn backing(name: &str, dir: &Path) -> Result<Backing, String> {
    match name {
        "anon" => Ok(Backing::Anon),
        "thp" => Ok(Backing::AnonThp),
        "file" => Ok(Backing::File(dir.to_path_buf())),
        _ => Err(format!(
            "backing {name:?}: the backings are anon, thp and file"
        )),
    }
}

impl Report {
    /// `c` (medians of `runs` runs) with every preset modelled over backing `fast` in `mode`
    /// (`None`: each preset's own).
    pub fn new(c: Calibration, runs: usize, fast: &Backing, mode: Option<Mode>) -> Report {
        let models = match c.tier(&fast.name()) {
            Some(fast) => preset::all()
                .iter()
                .filter_map(|p| Model::new(p, fast, mode).ok())
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
        Report {
            page_walks,
            tlb: crate::tlb::Geometry::host(),
            calibration: c,
            runs,
            models,
            level: "model (no slow memory on this machine: presets scaled from this calibration)",
        }
    }

    /// The report as a table for people.
    pub fn print_table(&self) {
        let r = self;

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
}
