//! The placement policies `bench xmem` compares, each deciding which units of an application's
//! data get the fast tier's `k` unit slots (or `k_pages` 4 KiB pages), from one trace:
//! - fast-only and slow-only: the bounds;
//! - X-Mem: the thesis's greedy (`pmkit_xmem::place`) over units with Eq. 3's benefit from each
//!   tag's profile as X-Mem's profiler gives it (`Tracer::with_cache`, `pmkit xmem profile`):
//!   its accesses that miss a model of the last-level cache, per pattern, and the dirty lines
//!   the model evicts (writebacks, at the preset's write cost: the write term), shared evenly by
//!   its units as X-Mem's per-tag profile is;
//! - X-Mem without the write term (`x-mem-reads`): the same, writebacks ignored (the thesis's
//!   Eq. 3 on the filtered profile);
//! - X-Mem with the thesis's unfiltered profile (`x-mem-unfiltered`): the same greedy, each
//!   tag's profile its classified accesses (a line once per buffer of 4,096, the rest assumed
//!   cached: right for the thesis's structures, which dwarfed the cache, wrong for a small hot
//!   one, which it ranks by accesses that never reach memory);
//! - X-Mem with per-region profiles (`x-mem-regions`, an extension beyond the thesis): the same
//!   greedy, each unit's benefit from its own misses and writebacks, so a tag's units rank
//!   against each other;
//! - first-touch DRAM-first (Linux's default): units in allocation order until DRAM is full;
//! - page hotness (tag-blind, what TPP-like OS tiering converges to): the 4 KiB pages with the
//!   most accesses in the trace;
//! - memkind's static ratio: each tag's first `fraction` of its units;
//! - oracle over tag orders (thesis §4.10.1): every order of the tags, units filled tag by tag
//!   in allocation order, the best;
//! - oracle: the `k` units whose slow-tier cost is largest (the exact optimum of the model's
//!   additive part at unit granularity), ranked by the misses alone and by the misses and the
//!   writebacks' device time, the better of the two (and `sweep` makes it the best of every
//!   unit-granular policy's placement once queueing is added).
//!
//! A policy's outcome is the modelled extra cost and the stores of what it leaves slow.

use pmkit_hmep::sim::{Unit, Windows};
use pmkit_hmep::tlb::TlbCost;
use pmkit_xmem::place::{greedy, Candidate, Latencies, PerPattern, Profile};
use serde::Serialize;

/// Every policy, in report order.
pub(super) const POLICIES: [&str; 11] = [
    "fast-only",
    "slow-only",
    "x-mem",
    "x-mem-reads",
    "x-mem-unfiltered",
    "x-mem-regions",
    "first-touch",
    "page-hotness",
    "memkind-ratio",
    "oracle-tag-order",
    "oracle",
];

/// Most tags the tag-order oracle enumerates (10! orders).
pub(super) const MAX_TAGS: usize = 10;

/// An application's data as the policies see it.
pub(super) struct Data {
    pub tags: usize,
    /// The trace's windows (bandwidth queueing).
    pub windows: Windows,
    /// Placement units (X-Mem regions) in allocation order: tag and trace counts.
    pub units: Vec<Unit>,
    /// Every traced 4 KiB page inside the units.
    pub pages: Vec<Unit>,
    pub unit_bytes: u64,
}

impl Data {
    /// 4 KiB pages per unit.
    pub(super) fn unit_pages(&self) -> f64 {
        self.unit_bytes as f64 / 4096.0
    }
}

/// What a placement leaves on the slow tier.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Outcome {
    /// Modelled extra ns of one traced pass.
    pub slow_ns: f64,
    /// Stores of one traced pass to the slow tier.
    pub slow_stores: u64,
    /// Lines of the slow tier written back (what reaches the device).
    pub slow_writebacks: u64,
    /// Per tag, the memory misses left on the slow tier.
    pub slow_misses: Vec<f64>,
}

impl Outcome {
    /// Per tag, the share of its misses on the slow tier (what bandwidth queueing charges).
    pub(super) fn shares(&self, d: &Data) -> Vec<f64> {
        let mut all = vec![0.0; d.tags];
        for u in &d.units {
            all[u.structure as usize] += u.misses.iter().sum::<u64>() as f64;
        }
        self.slow_misses
            .iter()
            .zip(&all)
            .map(|(&s, &a)| if a > 0.0 { (s / a).min(1.0) } else { 0.0 })
            .collect()
    }
}

fn sum<'a>(tags: usize, units: impl Iterator<Item = (&'a Unit, f64)>) -> Outcome {
    units.fold(
        Outcome {
            slow_ns: 0.0,
            slow_stores: 0,
            slow_writebacks: 0,
            slow_misses: vec![0.0; tags],
        },
        |mut o, (u, c)| {
            o.slow_ns += c;
            o.slow_stores += u.stores;
            o.slow_writebacks += u.writebacks;
            o.slow_misses[u.structure as usize] += u.misses.iter().sum::<u64>() as f64;
            o
        },
    )
}

/// The units left slow by `fast` (one flag per unit).
fn slow_units(d: &Data, cost: &[f64], fast: &[bool]) -> Outcome {
    sum(
        d.tags,
        d.units
            .iter()
            .zip(cost)
            .zip(fast)
            .filter(|(_, &f)| !f)
            .map(|((u, &c), _)| (u, c)),
    )
}

/// The cost of a unit being slow: its misses times ΔL per pattern (presets map the slow tier
/// with the fast tier's page size, so no TLB term).
pub(super) fn cost(u: &Unit, delta: &PerPattern) -> f64 {
    u.slow_cost(delta, &TlbCost::NONE)
}

/// Run `policy` with `k` unit slots (`k_pages` page slots for page hotness) at `fraction`.
pub(super) fn run(
    policy: &str,
    d: &Data,
    delta: &PerPattern,
    lat: &Latencies,
    k: usize,
    k_pages: usize,
    fraction: f64,
) -> Outcome {
    let cost: Vec<f64> = d.units.iter().map(|u| cost(u, delta)).collect();
    let n = d.units.len();
    let by_rank = |rank: &dyn Fn(usize) -> f64| {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| rank(b).total_cmp(&rank(a)).then(a.cmp(&b)));
        let mut fast = vec![false; n];
        for &i in order.iter().take(k) {
            fast[i] = true;
        }
        fast
    };
    match policy {
        "fast-only" => slow_units(d, &cost, &vec![true; n]),
        "slow-only" => slow_units(d, &cost, &vec![false; n]),
        "x-mem" => slow_units(
            d,
            &cost,
            &greedy(&xmem_candidates(d, lat, Profiler::Full), k),
        ),
        "x-mem-reads" => slow_units(
            d,
            &cost,
            &greedy(&xmem_candidates(d, lat, Profiler::MissesOnly), k),
        ),
        "x-mem-unfiltered" => slow_units(
            d,
            &cost,
            &greedy(&xmem_candidates(d, lat, Profiler::Thesis), k),
        ),
        "x-mem-regions" => slow_units(d, &cost, &greedy(&region_candidates(d, lat), k)),
        "first-touch" => slow_units(d, &cost, &(0..n).map(|i| i < k).collect::<Vec<_>>()),
        "page-hotness" => {
            let mut order: Vec<usize> = (0..d.pages.len()).collect();
            order.sort_by(|&a, &b| {
                d.pages[b]
                    .accesses
                    .cmp(&d.pages[a].accesses)
                    .then(a.cmp(&b))
            });
            sum(
                d.tags,
                order
                    .iter()
                    .skip(k_pages)
                    .map(|&i| (&d.pages[i], self::cost(&d.pages[i], delta))),
            )
        }
        "memkind-ratio" => slow_units(d, &cost, &static_ratio(d, fraction, k)),
        "oracle-tag-order" => slow_units(d, &cost, &best_tag_order(d, &cost, k)),
        "oracle" => {
            // The additive model's optimum, with and without the writes' device time: the
            // better of the two by reads and writes together (queueing is judged after).
            let dw = lat.slow_write - lat.fast_write;
            let with_writes = |i: usize| cost[i] + d.units[i].writebacks as f64 * dw;
            let a = slow_units(d, &cost, &by_rank(&|i| cost[i]));
            let b = slow_units(d, &cost, &by_rank(&with_writes));
            let total = |o: &Outcome| o.slow_ns + o.slow_writebacks as f64 * dw;
            if total(&b) < total(&a) {
                b
            } else {
                a
            }
        }
        _ => unreachable!("unknown policy {policy}"),
    }
}

/// What X-Mem's profiler counts.
#[derive(Clone, Copy, PartialEq)]
enum Profiler {
    /// Cache misses by pattern and writebacks (X-Mem's default).
    Full,
    /// Cache misses by pattern alone.
    MissesOnly,
    /// The thesis's classified accesses (a line once per buffer).
    Thesis,
}

/// X-Mem's view: each unit of tag t has Eq. 3's benefit of t's profile per unit.
fn xmem_candidates(d: &Data, lat: &Latencies, what: Profiler) -> Vec<Candidate> {
    // Per tag: accesses by pattern, writebacks, units.
    let mut sums = vec![([0u64; 3], 0u64, 0usize); d.tags];
    for u in &d.units {
        let s = &mut sums[u.structure as usize];
        let f = if what == Profiler::Thesis {
            &u.classified
        } else {
            &u.misses
        };
        for (sum, &n) in s.0.iter_mut().zip(f) {
            *sum += n;
        }
        if what == Profiler::Full {
            s.1 += u.writebacks;
        }
        s.2 += 1;
    }
    let benefit: Vec<f64> = sums
        .iter()
        .map(|&(f, w, n)| lat.benefit(&Profile::per_region(f, w, n)))
        .collect();
    d.units
        .iter()
        .map(|u| Candidate {
            priority: 0,
            benefit: benefit[u.structure as usize],
        })
        .collect()
}

/// X-Mem with per-region profiles (`XMem::apply_region_profiles`): each unit's benefit from
/// its own cache misses and writebacks.
fn region_candidates(d: &Data, lat: &Latencies) -> Vec<Candidate> {
    d.units
        .iter()
        .map(|u| Candidate {
            priority: 0,
            benefit: lat.benefit(&Profile::per_region(u.misses, u.writebacks, 1)),
        })
        .collect()
}

/// memkind's static ratio: each tag's first `fraction` of its units (rounded down, so the
/// total stays within `k`).
fn static_ratio(d: &Data, fraction: f64, k: usize) -> Vec<bool> {
    let mut per_tag = vec![0usize; d.tags];
    for u in &d.units {
        per_tag[u.structure as usize] += 1;
    }
    let mut left: Vec<usize> = per_tag
        .iter()
        .map(|&n| (n as f64 * fraction).floor() as usize)
        .collect();
    let mut budget = k;
    d.units
        .iter()
        .map(|u| {
            let t = u.structure as usize;
            let take = left[t] > 0 && budget > 0;
            if take {
                left[t] -= 1;
                budget -= 1;
            }
            take
        })
        .collect()
}

/// The best order of tags, filling `k` units tag by tag in allocation order.
fn best_tag_order(d: &Data, cost: &[f64], k: usize) -> Vec<bool> {
    assert!(d.tags <= MAX_TAGS, "at most {MAX_TAGS} tags for the oracle");
    assert_eq!(cost.len(), d.units.len());
    let fill = |order: &[usize]| -> Vec<bool> {
        let mut fast = vec![false; d.units.len()];
        let mut left = k;
        for &t in order {
            for (i, u) in d.units.iter().enumerate() {
                if left > 0 && u.structure as usize == t {
                    fast[i] = true;
                    left -= 1;
                }
            }
        }
        fast
    };
    // What the first j units of each tag (in allocation order) save: an order's saving is then
    // a sum over tags, not over units, for each of the (tags)! orders.
    let mut prefix: Vec<Vec<f64>> = vec![vec![0.0]; d.tags];
    for (u, c) in d.units.iter().zip(cost) {
        let p = &mut prefix[u.structure as usize];
        p.push(p.last().unwrap() + c);
    }
    let saved = |order: &[usize]| -> f64 {
        let mut left = k;
        let mut s = 0.0;
        for &t in order {
            let n = left.min(prefix[t].len() - 1);
            s += prefix[t][n];
            left -= n;
        }
        s
    };
    let mut order: Vec<usize> = (0..d.tags).collect();
    let mut best = order.clone();
    let mut best_saved = saved(&order);
    // Every permutation (lexicographic successors from the sorted one).
    while next_permutation(&mut order) {
        let s = saved(&order);
        if s > best_saved {
            (best, best_saved) = (order.clone(), s);
        }
    }
    fill(&best)
}

fn next_permutation(v: &mut [usize]) -> bool {
    let Some(i) = (1..v.len()).rev().find(|&i| v[i - 1] < v[i]) else {
        return false;
    };
    let j = (i..v.len()).rev().find(|&j| v[j] > v[i - 1]).unwrap();
    v.swap(i - 1, j);
    v[i..].reverse();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(tag: u16, misses: u64, accesses: u64, stores: u64) -> Unit {
        Unit {
            structure: tag,
            accesses,
            stores,
            classified: [0, accesses, 0],
            misses: [0, misses, 0],
            ..Unit::default()
        }
    }

    /// The order search by per-tag prefix sums fills what the search over units fills: every
    /// order's units filled and summed one by one (the plain definition), on random layouts.
    #[test]
    fn best_tag_order_equals_the_plain_search() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..200 {
            let tags = 1 + next(5) as usize;
            let n = 1 + next(40) as usize;
            let units: Vec<Unit> = (0..n)
                .map(|_| unit(next(tags as u64) as u16, 0, 1, 0))
                .collect();
            let cost: Vec<f64> = (0..n).map(|_| next(1000) as f64).collect();
            let k = next(n as u64 + 2) as usize;
            let d = Data {
                tags,
                windows: Windows::default(),
                pages: units.clone(),
                units,
                unit_bytes: 4096,
            };
            let plain = |order: &[usize]| -> (Vec<bool>, f64) {
                let mut fast = vec![false; n];
                let mut left = k;
                for &t in order {
                    for (i, u) in d.units.iter().enumerate() {
                        if left > 0 && u.structure as usize == t {
                            fast[i] = true;
                            left -= 1;
                        }
                    }
                }
                let s = cost
                    .iter()
                    .zip(&fast)
                    .filter(|(_, &f)| f)
                    .map(|(c, _)| c)
                    .sum();
                (fast, s)
            };
            let mut order: Vec<usize> = (0..tags).collect();
            let mut best = plain(&order);
            while next_permutation(&mut order) {
                let o = plain(&order);
                if o.1 > best.1 {
                    best = o;
                }
            }
            let got = best_tag_order(&d, &cost, k);
            let saved: f64 = cost
                .iter()
                .zip(&got)
                .filter(|(_, &f)| f)
                .map(|(c, _)| c)
                .sum();
            assert_eq!(saved, best.1, "tags {tags}, units {n}, k {k}");
            assert_eq!(
                got.iter().filter(|&&f| f).count(),
                best.0.iter().filter(|&&f| f).count()
            );
        }
    }

    /// Tag 0: two cold units allocated first; tag 1: two hot ones.
    fn data() -> Data {
        let units = vec![
            unit(0, 1, 100, 5),
            unit(0, 1, 100, 5),
            unit(1, 50, 1000, 1),
            unit(1, 40, 900, 1),
        ];
        Data {
            tags: 2,
            windows: Windows::default(),
            pages: units.clone(),
            units,
            unit_bytes: 4096,
        }
    }

    #[test]
    fn policies_on_a_small_case() {
        let d = data();
        let delta = [0.0, 10.0, 0.0];
        let lat = Latencies {
            fast: [0.0; 3],
            slow: [0.0, 10.0, 0.0],
            ..Latencies::default()
        };
        let r = |p: &str| run(p, &d, &delta, &lat, 2, 2, 0.5);
        assert_eq!(r("fast-only").slow_ns, 0.0);
        assert_eq!(r("slow-only").slow_ns, 920.0);
        assert_eq!(r("slow-only").slow_stores, 12);
        // First touch takes the cold tag: the hot one stays slow.
        assert_eq!(r("first-touch").slow_ns, 900.0);
        assert_eq!(r("first-touch").slow_stores, 2);
        // X-Mem, the oracles and page hotness take the hot tag.
        for p in [
            "x-mem",
            "x-mem-reads",
            "x-mem-unfiltered",
            "x-mem-regions",
            "oracle",
            "oracle-tag-order",
            "page-hotness",
        ] {
            assert_eq!(r(p).slow_ns, 20.0, "{p}");
            assert_eq!(r(p).slow_stores, 10, "{p}");
        }
        // Many accesses but few misses: the thesis's unfiltered profile takes the cached tag,
        // X-Mem's cache-filtered one does not.
        let mut d = data();
        d.units[0].classified = [0, 10_000, 0];
        d.units[1].classified = [0, 10_000, 0];
        let r = |p: &str| run(p, &d, &delta, &lat, 2, 2, 0.5);
        assert_eq!(r("x-mem-unfiltered").slow_ns, 900.0);
        assert_eq!(r("x-mem").slow_ns, 20.0);
        let d = data();
        let r = |p: &str| run(p, &d, &delta, &lat, 2, 2, 0.5);
        // Static ratio: one unit of each tag.
        assert_eq!(r("memkind-ratio").slow_ns, 10.0 + 40.0 * 10.0);
        // The cold tag writes back: with a write cost X-Mem keeps it in DRAM, without one (or
        // with the cost but blind to writes) it does not.
        let mut d = data();
        d.units[0].writebacks = 20;
        d.units[1].writebacks = 20;
        let costly = Latencies {
            slow_write: 100.0,
            ..lat.clone()
        };
        let fast_tag = |p: &str, l: &Latencies| {
            let o = run(p, &d, &delta, l, 2, 2, 0.5);
            // Slow misses per tag: the tag with none left slow is the one in DRAM.
            o.slow_misses.iter().position(|&m| m == 0.0)
        };
        assert_eq!(fast_tag("x-mem", &lat), Some(1));
        assert_eq!(fast_tag("x-mem", &costly), Some(0));
        assert_eq!(fast_tag("x-mem-reads", &costly), Some(1));
    }

    #[test]
    fn region_profiles_pick_a_tag_s_hot_unit() {
        // Tag 1's misses all sit in its second unit; one slot. Its average ties the two units
        // and X-Mem takes the first; per-region profiles take the hot one, as the oracle does.
        let mut d = data();
        d.units[2].misses = [0, 0, 0];
        d.units[3].misses = [0, 90, 0];
        let lat = Latencies {
            fast: [0.0; 3],
            slow: [0.0, 10.0, 0.0],
            ..Latencies::default()
        };
        let r = |p: &str| run(p, &d, &[0.0, 10.0, 0.0], &lat, 1, 1, 0.25).slow_ns;
        assert_eq!(r("x-mem"), 920.0);
        assert_eq!(r("x-mem-regions"), 20.0);
        assert_eq!(r("oracle"), 20.0);
    }

    #[test]
    fn permutations_are_all_visited() {
        let mut v = vec![0, 1, 2, 3];
        let mut n = 1;
        while next_permutation(&mut v) {
            n += 1;
        }
        assert_eq!(n, 24);
        assert_eq!(v, vec![3, 2, 1, 0]);
    }
}
