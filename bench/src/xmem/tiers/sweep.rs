//! From one application to its sweep: trace one pass (after a warm-up pass) through the
//! simulator and time uninstrumented passes with everything in the fast tier, cut the traced
//! data into placement units, then predict every policy at every preset and DRAM fraction
//! (emulation level 3: `predicted = measured fast-only time + Σ slow units' misses × ΔL(p)
//! + bandwidth queueing`, the last per window of the trace: `pmkit_hmep::queue`).

use super::app::TracedApp;
use super::policy::{self, Data, Outcome, POLICIES};
use crate::report::median;
use anyhow::{ensure, Result};
use pmkit_hmep::cache::Cache;
use pmkit_hmep::model::Model;
use pmkit_hmep::queue::{queueing, Bandwidth};
use pmkit_hmep::sim::{Misses, Sim, Unit};
use pmkit_hmep::tlb::PAGE_4K;
use serde::Serialize;
use std::time::Instant;

/// One traced pass and the timed ones.
pub(super) struct Traced {
    pub misses: Misses,
    /// Median ns of an uninstrumented pass, everything fast.
    pub base_ns: f64,
    /// ns of the traced (counted) pass: the tracer's overhead against `base_ns`.
    pub traced_ns: f64,
}

pub(super) fn trace_and_time(
    app: &mut dyn TracedApp,
    llc: (usize, usize),
    rounds: usize,
    reps: usize,
) -> Result<Traced> {
    let mut sim = Sim::new(Cache::new(llc.0, llc.1), app.tags().len());
    app.pass_traced(&mut sim)?; // warm the modelled cache and TLBs as timed runs are warm
    sim.reset_counts();
    let t = Instant::now();
    app.pass_traced(&mut sim)?;
    let traced_ns = t.elapsed().as_nanos() as f64;
    let misses = sim.finish();
    let mut ns = vec![];
    for _ in 0..rounds {
        app.pass()?; // warm caches and TLBs
        let t = Instant::now();
        for _ in 0..reps {
            app.pass()?;
        }
        ns.push(t.elapsed().as_nanos() as f64 / reps as f64);
    }
    Ok(Traced {
        misses,
        base_ns: median(ns),
        traced_ns,
    })
}

/// A region of the application's X-Mem instance: where, how many bytes in use, which tag.
pub(super) struct Region {
    pub addr: u64,
    /// Bytes of live objects, and the region's size.
    pub bytes: u64,
    pub span: u64,
    pub tag: usize,
}

/// Cut the regions (in allocation order) into units of `1 << shift` bytes, each with the trace's
/// counts, and list the traced pages inside them. A region gives as many units as its live
/// bytes fill, or more where a traced page lies further in.
pub(super) fn data(m: &Misses, regions: &[Region], tags: usize, shift: u32) -> Result<Data> {
    ensure!(shift >= PAGE_4K, "units of at least a 4 KiB page");
    let grouped = m.group_pages(shift);
    let unit = 1u64 << shift;
    let (mut units, mut pages) = (vec![], vec![]);
    for r in regions {
        ensure!(
            r.addr % unit == 0,
            "a region at {:#x} is not unit-aligned",
            r.addr
        );
        let (first, end) = (r.addr >> PAGE_4K, (r.addr + r.span) >> PAGE_4K);
        let last = m
            .pages
            .keys()
            .filter(|p| (first..end).contains(*p))
            .max()
            .map_or(0, |&p| ((p + 1) << PAGE_4K) - r.addr);
        let n = r.bytes.max(last).div_ceil(unit);
        for i in 0..n {
            let key = (r.addr >> shift) + i;
            let u = grouped.get(&key).copied().unwrap_or_default();
            ensure!(
                u.accesses == 0 || u.structure as usize == r.tag,
                "a unit of tag {} traced as structure {}",
                r.tag,
                u.structure
            );
            units.push(Unit {
                structure: r.tag as u16,
                ..u
            });
        }
        let (lo, hi) = (r.addr >> PAGE_4K, (r.addr + n * unit) >> PAGE_4K);
        pages.extend(
            m.pages
                .iter()
                .filter(|(&p, _)| (lo..hi).contains(&p))
                .map(|(_, u)| *u),
        );
    }
    Ok(Data {
        tags,
        windows: m.windows.clone(),
        units,
        pages,
        unit_bytes: unit,
    })
}

/// One policy at one point.
#[derive(Clone, Serialize)]
pub(super) struct PolicyResult {
    pub policy: &'static str,
    /// Predicted ms of one pass (level 3).
    pub predicted_ms: f64,
    /// Over fast-only (thesis Fig. 24-29).
    pub normalised: f64,
    /// Stores of one pass reaching the slow tier, and their share of slow-only's (Fig. 30).
    pub slow_stores: u64,
    pub writes_vs_slow_only: f64,
    /// Lines written back to the slow tier (the device's writes), and over slow-only's.
    pub slow_writebacks: u64,
    pub writebacks_vs_slow_only: f64,
    /// Of `predicted_ms`, what bandwidth queueing adds (`pmkit_hmep::queue`), and the windows
    /// the slow tier's bandwidth bounded.
    pub queueing_ms: f64,
    pub saturated_windows: u64,
}

/// One preset at one DRAM fraction.
#[derive(Serialize)]
pub(super) struct Point {
    pub preset: String,
    pub fraction: f64,
    /// Fast units (of all) and fast 4 KiB pages the fraction allows.
    pub fast_units: usize,
    pub fast_pages: usize,
    pub policies: Vec<PolicyResult>,
    /// X-Mem's time over the oracles' (1 = optimal).
    pub xmem_over_oracle: f64,
    pub xmem_over_tag_order_oracle: f64,
    pub xmem_within_10pct_of_oracle: bool,
    /// X-Mem's time not above page hotness's.
    pub xmem_ahead_of_page_hotness: bool,
    /// Some placement of whole units is not above page hotness (the oracle is not): where none
    /// is, page hotness wins by its finer grain (4 KiB pages against 2 MiB units) and no
    /// unit-granular policy, X-Mem included, can be ahead.
    pub units_can_match_page_hotness: bool,
    /// X-Mem without the write term (the thesis's Eq. 3 on the filtered profile) over the oracle.
    pub xmem_reads_over_oracle: f64,
    /// The same two for X-Mem with the thesis's unfiltered profile.
    pub xmem_unfiltered_over_oracle: f64,
    pub xmem_unfiltered_ahead_of_page_hotness: bool,
    /// X-Mem with per-region profiles over the oracle, and whether it is ahead of page hotness.
    pub xmem_regions_over_oracle: f64,
    pub xmem_regions_ahead_of_page_hotness: bool,
}

/// Every policy at every (preset, fraction).
pub(super) fn evaluate(d: &Data, models: &[Model], fractions: &[f64], base_ns: f64) -> Vec<Point> {
    let footprint_pages = d.units.len() as f64 * d.unit_pages();
    let mut out = vec![];
    for m in models {
        let delta: [f64; 3] = std::array::from_fn(|p| (m.slow[p] - m.fast[p]).max(0.0));
        let lat = m.latencies();
        for &f in fractions {
            let k = (d.units.len() as f64 * f).floor() as usize;
            let k_pages = (footprint_pages * f).floor() as usize;
            let outcomes: Vec<Outcome> = POLICIES
                .iter()
                .map(|p| policy::run(p, d, &delta, &lat, k, k_pages, f))
                .collect();
            let slow_only = outcomes[1].slow_stores.max(1) as f64;
            let slow_only_wb = outcomes[1].slow_writebacks.max(1) as f64;
            let bw = Bandwidth::of(m);
            let policies: Vec<PolicyResult> = POLICIES
                .iter()
                .zip(&outcomes)
                .map(|(&policy, o)| {
                    let q = queueing(&d.windows, &o.shares(d), base_ns, o.slow_ns, &bw);
                    let ns = base_ns + o.slow_ns + q.extra_ns;
                    PolicyResult {
                        policy,
                        predicted_ms: ns / 1e6,
                        normalised: ns / base_ns,
                        slow_stores: o.slow_stores,
                        writes_vs_slow_only: o.slow_stores as f64 / slow_only,
                        slow_writebacks: o.slow_writebacks,
                        writebacks_vs_slow_only: o.slow_writebacks as f64 / slow_only_wb,
                        queueing_ms: q.extra_ns / 1e6,
                        saturated_windows: q.saturated_windows,
                    }
                })
                .collect();
            let policies = best_known(policies);
            let t = |name: &str| {
                policies
                    .iter()
                    .find(|p| p.policy == name)
                    .map_or(f64::NAN, |p| p.normalised)
            };
            out.push(Point {
                preset: m.preset.clone(),
                fraction: f,
                fast_units: k,
                fast_pages: k_pages,
                xmem_over_oracle: t("x-mem") / t("oracle"),
                xmem_over_tag_order_oracle: t("x-mem") / t("oracle-tag-order"),
                xmem_within_10pct_of_oracle: t("x-mem") <= 1.10 * t("oracle"),
                xmem_ahead_of_page_hotness: t("x-mem") <= t("page-hotness"),
                units_can_match_page_hotness: t("oracle") <= t("page-hotness"),
                xmem_reads_over_oracle: t("x-mem-reads") / t("oracle"),
                xmem_unfiltered_over_oracle: t("x-mem-unfiltered") / t("oracle"),
                xmem_unfiltered_ahead_of_page_hotness: t("x-mem-unfiltered") <= t("page-hotness"),
                xmem_regions_over_oracle: t("x-mem-regions") / t("oracle"),
                xmem_regions_ahead_of_page_hotness: t("x-mem-regions") <= t("page-hotness"),
                policies,
            });
        }
    }
    out
}

/// The oracles pick by the additive part of the model (each unit's misses × ΔL); bandwidth
/// queueing is not additive, so each oracle is then the best of its own pick and the placements
/// of the policies it bounds: the tag-order oracle of first touch's (one order of the tags),
/// the oracle of every unit-granular policy's.
fn best_known(mut p: Vec<PolicyResult>) -> Vec<PolicyResult> {
    let at = |p: &[PolicyResult], name: &str| {
        p.iter()
            .position(|r| r.policy == name)
            .expect("every policy is run")
    };
    let take_best = |p: &mut Vec<PolicyResult>, oracle: &str, others: &[&str]| {
        let o = at(p, oracle);
        for name in others {
            let i = at(p, name);
            if p[i].predicted_ms < p[o].predicted_ms {
                let mut b = p[i].clone();
                b.policy = p[o].policy;
                p[o] = b;
            }
        }
    };
    take_best(&mut p, "oracle-tag-order", &["first-touch"]);
    take_best(
        &mut p,
        "oracle",
        &[
            "x-mem",
            "x-mem-reads",
            "x-mem-unfiltered",
            "x-mem-regions",
            "first-touch",
            "memkind-ratio",
            "oracle-tag-order",
        ],
    );
    p
}
