//! `pmkit hmep calibrate`: what this machine's memory does per access pattern (thesis Fig. 3 and
//! 22: pointer chasing pays the whole latency, independent random loads overlap, sequential ones
//! ride the prefetchers), per backing, as medians of several runs. Every emulated result is
//! scaled from these numbers, so every report prints them.

use crate::error::Result;
use crate::mem::{huge_backed, Backing, Buf, LINE};
use crate::tlb::{Geometry, Tlb, TlbCost, PAGE_2M, PAGE_4K};
use pmkit_xmem::place::PerPattern;
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
    /// ns per dependent load of a chase over one line in each of `tlb_pages` 4 KiB pages: the
    /// lines stay in the cache, the pages exceed a 4 KiB TLB's reach, so it is what a page walk
    /// costs in front of a cache hit ([`walk_ns`]); the fastest run, not the median. 0 in
    /// calibrations made before it existed.
    #[serde(default)]
    pub tlb_chase_ns: f64,
    #[serde(default)]
    pub tlb_pages: u64,
    /// Walks per load of that chase in the TLB model ([`crate::tlb`]) with 4 KiB and 2 MiB
    /// pages.
    #[serde(default)]
    pub tlb_walks_4k: f64,
    #[serde(default)]
    pub tlb_walks_2m: f64,
    /// ns per load of the same lines in the same order, each address taken from a list
    /// instead of from the load before: what a walk costs in front of independent loads
    /// ([`walk_independent_ns`]); the fastest run. 0 in older calibrations.
    #[serde(default)]
    pub tlb_gather_ns: f64,
    /// ns per dependent load of a chase over one line in each of `l1_pages` 4 KiB pages: more
    /// pages than an L1 dTLB maps, fewer than the L2 TLB, so with 4 KiB pages every load misses
    /// the L1 and hits the L2 ([`l1_ns`]); the fastest run. 0 in older calibrations.
    #[serde(default)]
    pub l1_chase_ns: f64,
    #[serde(default)]
    pub l1_pages: u64,
    /// L1 dTLB misses that hit the L2 TLB, per load of that chase in the TLB model, with 4 KiB
    /// and 2 MiB pages.
    #[serde(default)]
    pub l1_misses_4k: f64,
    #[serde(default)]
    pub l1_misses_2m: f64,
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
    #[serde(default)]
    pub tlb_chase_ns: Vec<f64>,
    #[serde(default)]
    pub tlb_gather_ns: Vec<f64>,
    #[serde(default)]
    pub l1_chase_ns: Vec<f64>,
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
    let tlb_pages = TLB_PAGES.min(o.bytes / 4096);
    let tlb_steps = o.chase_steps.max(8 * tlb_pages as u64);
    let l1_pages = L1_PAGES.min(o.bytes / 4096);
    let l1_steps = o.chase_steps.max(8 * l1_pages as u64);
    let mut walks = Modelled::default();
    let mut l1 = Modelled::default();
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

        // The write wiped the cycle: link a page cycle, time it warm (ns per load), and count
        // its modelled events on the first run; then relink the line cycle.
        // Returns the chase's ns per load and, when asked, the same lines gathered.
        let mut page_chase =
            |seed: u64, pages: usize, steps: u64, model: &mut Modelled, gather: bool| {
                let start = buf.link_pages(seed, pages);
                black_box(buf.chase_from(start, 2 * pages as u64));
                let t = Instant::now();
                black_box(buf.chase_from(start, steps));
                let ns = ns_per(t, steps);
                if run == 0 {
                    *model = modelled(&buf, start, pages as u64);
                }
                let gathered =
                    gather.then(|| gather_ns(&buf, &buf.cycle_lines(start, pages), steps));
                (ns, gathered)
            };
        // Page walks (chased, then the same lines gathered), then (fewer pages) L1 dTLB misses
        // that hit the L2 TLB.
        let (chased, gathered) = page_chase(o.seed, tlb_pages, tlb_steps, &mut walks, true);
        r.tlb_chase_ns.push(chased);
        r.tlb_gather_ns.extend(gathered);
        r.l1_chase_ns
            .push(page_chase(o.seed ^ 0x11, l1_pages, l1_steps, &mut l1, false).0);
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
        // The minimum: other load only adds time, and the walk cost is a difference of two
        // small times, the figure most sensitive to it (a median of 3 gave 94 ns under load
        // against 13-20 ns quiet).
        tlb_chase_ns: r.tlb_chase_ns.iter().copied().fold(f64::INFINITY, f64::min),
        tlb_pages: tlb_pages as u64,
        tlb_walks_4k: walks.walks_4k,
        tlb_walks_2m: walks.walks_2m,
        tlb_gather_ns: r
            .tlb_gather_ns
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min),
        l1_chase_ns: r.l1_chase_ns.iter().copied().fold(f64::INFINITY, f64::min),
        l1_pages: l1_pages as u64,
        l1_misses_4k: l1.l2_hits_4k,
        l1_misses_2m: l1.l2_hits_2m,
        runs: r,
    })
}

/// ns per load of `lines` gathered from the list ([`Buf::gather`]), warm, over at least `steps`
/// loads.
fn gather_ns(buf: &Buf, lines: &[u32], steps: u64) -> f64 {
    let laps = steps.div_ceil(lines.len() as u64).max(1);
    black_box(buf.gather(lines, 2));
    let t = Instant::now();
    black_box(buf.gather(lines, laps));
    ns_per(t, laps * lines.len() as u64)
}

/// Pages of the TLB chase: 64 MiB of 4 KiB pages (5x a 3072-entry L2 TLB's reach; 32 huge
/// pages, inside any L1 TLB), 1 MiB of lines (inside the last-level cache).
pub const TLB_PAGES: usize = 16384;

/// Pages of the L1 dTLB chase: 512 (beyond the 64-72 entries of an L1 dTLB, inside the
/// 1,536-3,072 of an L2 TLB; one huge page).
pub const L1_PAGES: usize = 512;

/// Per load of a page cycle in the TLB model, at 4 KiB and at 2 MiB pages: walks, and L1 dTLB
/// misses that hit the L2 TLB.
#[derive(Default)]
struct Modelled {
    walks_4k: f64,
    walks_2m: f64,
    l2_hits_4k: f64,
    l2_hits_2m: f64,
}

/// The page cycle from `start` through the TLB model (one lap to warm, two counted).
fn modelled(buf: &Buf, start: u64, pages: u64) -> Modelled {
    let g = Geometry::host();
    let (mut k4, mut m2) = (Tlb::new(&g, PAGE_4K), Tlb::new(&g, PAGE_2M));
    let mut at = start;
    for lap in 0..3 {
        if lap == 1 {
            for t in [&mut k4, &mut m2] {
                (t.walks, t.l1_misses) = (0, 0);
            }
        }
        for _ in 0..pages {
            let addr = (buf.addr() + at as usize * LINE) as u64;
            k4.access(addr);
            m2.access(addr);
            at = buf.chase_from(at, 1);
        }
    }
    let n = (2 * pages) as f64;
    Modelled {
        walks_4k: k4.walks as f64 / n,
        walks_2m: m2.walks as f64 / n,
        l2_hits_4k: (k4.l1_misses - k4.walks) as f64 / n,
        l2_hits_2m: (m2.l1_misses - m2.walks) as f64 / n,
    }
}

/// ns per page walk in front of a cache hit, from the TLB chases of two tiers of different
/// page sizes: the time difference over the difference in modelled walks per load (0 when the
/// tiers' page sizes do not differ, or a calibration lacks the chase).
pub fn walk_ns(fast: &Tier, slow: &Tier) -> f64 {
    per_event_ns(fast, slow, |t| {
        (t.tlb_chase_ns, t.tlb_walks_2m, t.tlb_walks_4k)
    })
}

/// ns per page walk in front of a cache hit of an independent load, from the gathers of the
/// TLB chase's lines on two tiers of different page sizes, as [`walk_ns`].
pub fn walk_independent_ns(fast: &Tier, slow: &Tier) -> f64 {
    per_event_ns(fast, slow, |t| {
        (t.tlb_gather_ns, t.tlb_walks_2m, t.tlb_walks_4k)
    })
}

/// ns per L1 dTLB miss that hits the L2 TLB in front of a cache hit, from the L1 chases of two
/// tiers of different page sizes, as [`walk_ns`].
pub fn l1_ns(fast: &Tier, slow: &Tier) -> f64 {
    per_event_ns(fast, slow, |t| {
        (t.l1_chase_ns, t.l1_misses_2m, t.l1_misses_4k)
    })
}

/// A chase's ns per load on each tier over the difference in its modelled events per load
/// (`of` gives the chase's ns and the events per load with 2 MiB and with 4 KiB pages; a tier
/// counts as huge-paged from half its buffer on).
fn per_event_ns(fast: &Tier, slow: &Tier, of: impl Fn(&Tier) -> (f64, f64, f64)) -> f64 {
    let at = |t: &Tier| {
        let (ns, huge, small) = of(t);
        (ns, if t.huge_fraction >= 0.5 { huge } else { small })
    };
    let ((fast_ns, fast_rate), (slow_ns, slow_rate)) = (at(fast), at(slow));
    let dr = slow_rate - fast_rate;
    if dr < 0.1 || fast_ns <= 0.0 || slow_ns <= 0.0 {
        return 0.0;
    }
    ((slow_ns - fast_ns) / dr).max(0.0)
}

/// What a translation costs the slow tier of a pair beyond the fast one, on cache hits.
pub fn tlb_cost(fast: &Tier, slow: &Tier) -> TlbCost {
    TlbCost {
        walk_ns: walk_ns(fast, slow),
        walk_independent_ns: walk_independent_ns(fast, slow),
        l1_ns: l1_ns(fast, slow),
    }
}

/// What a slow backing costs beyond a fast one, measured in pairs: each run times the fast
/// and then the slow buffer back to back, and every figure is the median of the runs' paired
/// differences, so drift on a shared machine (which moves two tiers timed a minute apart by
/// more than their difference) mostly cancels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Paired {
    pub runs: usize,
    /// ns per access more on the slow backing: chase, random, streaming line (never below 0).
    pub delta: PerPattern,
    /// ns per page walk and per L2 TLB hit in front of a cache hit.
    pub tlb: TlbCost,
    /// Every run's differences: chase, random, line, TLB chase, L1 chase, TLB gather (ns per
    /// load).
    pub differences: Vec<[f64; 6]>,
}

/// Measure `slow` against `fast` in pairs (`o.bytes` per backing, at least 5 runs).
pub fn paired(fast: &Backing, slow: &Backing, o: &Options) -> Result<Paired> {
    Ok(Pairing::started(fast, slow, o)?.summary())
}

/// One backing's buffers for [`Pairing`]: the line cycle, separate buffers for the two page
/// cycles (linking pages writes over the line cycle), and the modelled walks and L2 TLB hits
/// per load of those cycles.
struct Side {
    lines: Buf,
    tlb: (Buf, u64),
    tlb_lines: Vec<u32>,
    l1: (Buf, u64),
    rates: (f64, f64),
}

/// A paired calibration kept open, so that a benchmark can take pairs between its own timed
/// runs (the prices then come from the same stretch of the shared machine as the runs they
/// price) and summarise them at the end.
pub struct Pairing {
    fast: Side,
    slow: Side,
    o: Options,
    tlb_pages: usize,
    l1_pages: usize,
    tlb_steps: u64,
    l1_steps: u64,
    differences: Vec<[f64; 6]>,
}

/// Most pairs one [`Pairing`] keeps (a benchmark takes one per round).
pub const MAX_PAIRS: usize = 1024;

impl Pairing {
    /// Map and link both backings' buffers (`o.bytes` each, plus the page cycles).
    pub fn new(fast: &Backing, slow: &Backing, o: &Options) -> Result<Pairing> {
        let tlb_pages = TLB_PAGES.min(o.bytes / 4096);
        let l1_pages = L1_PAGES.min(o.bytes / 4096);
        let side = |b: &Backing| -> Result<Side> {
            let mut lines = Buf::new(b, o.bytes)?;
            lines.link_cycle(o.seed);
            let mut tlb = Buf::new(b, (tlb_pages * 4096).next_power_of_two())?;
            let ts = tlb.link_pages(o.seed, tlb_pages);
            let tlb_lines = tlb.cycle_lines(ts, tlb_pages);
            let mut l1 = Buf::new(b, (l1_pages * 4096).next_power_of_two().max(2 << 20))?;
            let ls = l1.link_pages(o.seed ^ 0x11, l1_pages);
            let huge = huge_backed(lines.addr())
                .map(|(h, rss)| h as f64 / rss.max(1) as f64)
                .unwrap_or(0.0)
                >= 0.5;
            let (w, l) = (
                modelled(&tlb, ts, tlb_pages as u64),
                modelled(&l1, ls, l1_pages as u64),
            );
            let rates = if huge {
                (w.walks_2m, l.l2_hits_2m)
            } else {
                (w.walks_4k, l.l2_hits_4k)
            };
            Ok(Side {
                lines,
                tlb: (tlb, ts),
                tlb_lines,
                l1: (l1, ls),
                rates,
            })
        };
        Ok(Pairing {
            fast: side(fast)?,
            slow: side(slow)?,
            o: o.clone(),
            tlb_pages,
            l1_pages,
            tlb_steps: o.chase_steps.max(8 * tlb_pages as u64),
            l1_steps: o.chase_steps.max(8 * l1_pages as u64),
            differences: vec![],
        })
    }

    /// [`Pairing::new`] with its first pairs taken (`o.runs`, at least 5): what [`paired`]
    /// summarises, and where a benchmark that adds pairs later starts.
    pub fn started(fast: &Backing, slow: &Backing, o: &Options) -> Result<Pairing> {
        let mut p = Pairing::new(fast, slow, o)?;
        for _ in 0..o.runs.max(5) {
            p.pair();
        }
        Ok(p)
    }

    /// Time the fast and then the slow backing back to back; keep and return the differences
    /// (chase, random, line, TLB chase, L1 chase, TLB gather, ns per load).
    pub fn pair(&mut self) -> [f64; 6] {
        assert!(
            self.differences.len() < MAX_PAIRS,
            "at most {MAX_PAIRS} pairs"
        );
        let run = self.differences.len() as u64;
        let (a, b) = (self.time(&self.fast, run), self.time(&self.slow, run));
        let d = std::array::from_fn(|i| b[i] - a[i]);
        self.differences.push(d);
        d
    }

    fn time(&self, x: &Side, run: u64) -> [f64; 6] {
        let o = &self.o;
        black_box(x.lines.chase(o.chase_steps / 10));
        let t = Instant::now();
        black_box(x.lines.chase(o.chase_steps));
        let chase = ns_per(t, o.chase_steps);
        let t = Instant::now();
        black_box(x.lines.random(o.random_loads, o.seed ^ run));
        let random = ns_per(t, o.random_loads);
        let t = Instant::now();
        black_box(x.lines.sequential());
        let line = ns_per(t, (x.lines.len() / LINE) as u64);
        let page = |(b, start): &(Buf, u64), pages: usize, steps: u64| {
            black_box(b.chase_from(*start, 2 * pages as u64));
            let t = Instant::now();
            black_box(b.chase_from(*start, steps));
            ns_per(t, steps)
        };
        let tlb = page(&x.tlb, self.tlb_pages, self.tlb_steps);
        let l1 = page(&x.l1, self.l1_pages, self.l1_steps);
        let gather = gather_ns(&x.tlb.0, &x.tlb_lines, self.tlb_steps);
        [chase, random, line, tlb, l1, gather]
    }

    /// The medians of every pair taken so far (at least one).
    pub fn summary(&self) -> Paired {
        assert!(!self.differences.is_empty(), "no pair taken");
        let d = &self.differences;
        let med = |i: usize| median(&d.iter().map(|d| d[i]).collect::<Vec<_>>());
        let per = |i: usize, dr: f64| {
            if dr < 0.1 {
                0.0
            } else {
                (med(i) / dr).max(0.0)
            }
        };
        let (f, s) = (self.fast.rates, self.slow.rates);
        Paired {
            runs: d.len(),
            delta: [med(0).max(0.0), med(1).max(0.0), med(2).max(0.0)],
            tlb: TlbCost {
                walk_ns: per(3, s.0 - f.0),
                walk_independent_ns: per(5, s.0 - f.0),
                l1_ns: per(4, s.1 - f.1),
            },
            differences: d.clone(),
        }
    }
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
