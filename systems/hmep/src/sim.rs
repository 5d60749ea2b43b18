//! The trace simulator (emulation level 3): a traced run's accesses go through a cache model, two
//! TLB models (4 KiB and 2 MiB pages, side by side) and the thesis's classifier, giving per
//! structure and per 4 KiB page the accesses and memory misses of each pattern, the stores and
//! the page walks: a sufficient statistic. Any placement's time is then predicted as
//! `measured time with everything fast + Σ over slow units Σ_p misses(p) · ΔL(p)
//!  + (walks on cache hits at the slow tier's page size − at the fast tier's) · walk cost
//!  + (L2 TLB hits on cache hits, likewise) · L1 dTLB miss cost`,
//! so every placement of structures, regions or pages, preset and fast-tier share is swept from
//! one trace. Bandwidth queueing is not modelled (the validation tier pair has equal bandwidth;
//! a preset whose bandwidth binds is charged per access through `L(p)` already).
//!
//! Why walks on cache hits only: ΔL(p) is calibrated on buffers far larger than any TLB's reach,
//! so it already holds the walk of every miss; what it cannot see is a walk in front of a load
//! that then hits the cache (hmep-validate measured BFS's adjacency at +123 ms on 4 KiB pages
//! against +8 ms from misses alone).

use crate::cache::Cache;
use crate::calib::Tier;
use crate::tlb::{Geometry, Tlb, TlbCost, PAGE_2M, PAGE_4K};
use pmkit_xmem::classify::{self, Access, Classifier, BUFFER};
use pmkit_xmem::place::{Pattern, PerPattern};
use serde::Serialize;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const CHASE: usize = Pattern::PointerChase as usize;

/// Most structures one simulation tells apart.
pub const MAX_STRUCTURES: usize = 64;
/// Most 4 KiB pages counted one by one (16 GiB, about 400 MiB of counters); accesses to further
/// pages are counted in [`Misses::overflow`].
pub const MAX_PAGES: usize = 1 << 22;

/// What one unit (a structure, a page) did in the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Unit {
    /// The structure that last touched it (a page belongs to one X-Mem tag).
    pub structure: u16,
    pub accesses: u64,
    pub stores: u64,
    /// Dirty lines of this unit the cache model evicted: the stores that reach memory.
    pub writebacks: u64,
    /// Accesses by the pattern the classifier gave their line, a line counted once per buffer
    /// of 4,096 as the thesis's profiler does (X-Mem's profile `F(p)`).
    pub classified: [u64; 3],
    /// Accesses that missed the cache model, by pattern.
    pub misses: [u64; 3],
    /// Page walks with 4 KiB and with 2 MiB pages, all and those in front of a cache hit.
    pub walks_4k: u64,
    pub walks_2m: u64,
    pub walks_4k_on_hits: u64,
    pub walks_2m_on_hits: u64,
    /// Of those on cache hits, the walks in front of a chase (a load whose address the load
    /// before it gave): they cost a walk's whole latency, the others overlap.
    pub dependent_walks_4k_on_hits: u64,
    pub dependent_walks_2m_on_hits: u64,
    /// L1 dTLB misses (L2 TLB hits and walks) on cache hits, at each page size.
    pub l1_tlb_misses_4k_on_hits: u64,
    pub l1_tlb_misses_2m_on_hits: u64,
}

impl Unit {
    fn add(&mut self, o: &Unit) {
        self.accesses += o.accesses;
        self.stores += o.stores;
        self.writebacks += o.writebacks;
        for p in 0..3 {
            self.classified[p] += o.classified[p];
            self.misses[p] += o.misses[p];
        }
        self.walks_4k += o.walks_4k;
        self.walks_2m += o.walks_2m;
        self.walks_4k_on_hits += o.walks_4k_on_hits;
        self.walks_2m_on_hits += o.walks_2m_on_hits;
        self.dependent_walks_4k_on_hits += o.dependent_walks_4k_on_hits;
        self.dependent_walks_2m_on_hits += o.dependent_walks_2m_on_hits;
        self.l1_tlb_misses_4k_on_hits += o.l1_tlb_misses_4k_on_hits;
        self.l1_tlb_misses_2m_on_hits += o.l1_tlb_misses_2m_on_hits;
    }

    /// The extra ns of this unit on a slow tier: misses times ΔL per pattern, plus the walks
    /// (dependent and independent: [`Unit::extra_dependent_walks`]) and the L2 TLB hits in
    /// front of cache hits it takes more there ([`Unit::extra_l2_tlb_hits`]) at `tlb`'s prices.
    pub fn slow_cost(&self, delta: &PerPattern, tlb: &TlbCost) -> f64 {
        let misses: f64 = (0..3).map(|p| self.misses[p] as f64 * delta[p]).sum();
        misses
            + tlb.of(
                self.extra_dependent_walks(),
                self.extra_independent_walks(),
                self.extra_l2_tlb_hits(),
            )
    }

    /// Of [`Unit::extra_walks`], those in front of chase loads.
    pub fn extra_dependent_walks(&self) -> f64 {
        self.dependent_walks_4k_on_hits
            .saturating_sub(self.dependent_walks_2m_on_hits) as f64
    }

    /// Of [`Unit::extra_walks`], those in front of random and streaming loads.
    pub fn extra_independent_walks(&self) -> f64 {
        let w4 = self.walks_4k_on_hits - self.dependent_walks_4k_on_hits;
        let w2 = self.walks_2m_on_hits - self.dependent_walks_2m_on_hits;
        w4.saturating_sub(w2) as f64
    }

    /// Walks on cache hits with 4 KiB pages beyond those with 2 MiB pages (the validation tier
    /// pair: slow = 4 KiB, fast = huge pages).
    pub fn extra_walks(&self) -> f64 {
        self.walks_4k_on_hits.saturating_sub(self.walks_2m_on_hits) as f64
    }

    /// L1 dTLB misses that hit the L2 TLB, on cache hits, with 4 KiB pages beyond 2 MiB pages.
    pub fn extra_l2_tlb_hits(&self) -> f64 {
        let l2 = |l1: u64, walks: u64| l1.saturating_sub(walks);
        l2(self.l1_tlb_misses_4k_on_hits, self.walks_4k_on_hits)
            .saturating_sub(l2(self.l1_tlb_misses_2m_on_hits, self.walks_2m_on_hits)) as f64
    }
}

/// A multiplicative hash for page numbers (SipHash would cost more than the cache model).
#[derive(Default)]
pub struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

pub type PageMap = HashMap<u64, Unit, BuildHasherDefault<PageHasher>>;

/// The result of a simulation: per structure (index = structure) and per 4 KiB page.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Misses {
    /// Misses by pattern (`Pattern as usize`) per structure (the same as `units[s].misses`).
    pub misses: Vec<[u64; 3]>,
    pub accesses: Vec<u64>,
    pub units: Vec<Unit>,
    /// Per 4 KiB page number (`addr >> 12`); too many to print, so not serialised.
    #[serde(skip)]
    pub pages: PageMap,
    /// Accesses to pages beyond [`MAX_PAGES`].
    pub overflow: Unit,
    /// The TLB sizes the walks were counted with.
    pub tlb: Geometry,
    /// Per window of [`BUFFER`] accesses, per structure: the bursts bandwidth queueing needs.
    #[serde(skip)]
    pub windows: Windows,
}

/// Per window of consecutive accesses and per structure, window-major: the memory misses and
/// the lines written back (dirty lines the cache model evicted in the window, counted under the
/// structure of the page written), each split into those in order (streaming misses; lines
/// written back next to another one: they share a device's larger internal line) and the rest
/// (random and chase misses; lone lines: each moves a whole device line).
#[derive(Debug, Clone, Default)]
pub struct Windows {
    pub structures: usize,
    /// Accesses per window (the last one may hold fewer: see `accesses`).
    pub accesses: Vec<u32>,
    pub misses: Vec<u32>,
    pub stream_misses: Vec<u32>,
    pub written_lines: Vec<u32>,
    pub written_seq_lines: Vec<u32>,
}

impl Windows {
    pub fn len(&self) -> usize {
        self.accesses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.accesses.is_empty()
    }
}

/// One buffered access: the classifier needs 4,096 of them together.
#[derive(Clone, Copy)]
struct Pending {
    access: Access,
    s: u16,
    miss: bool,
    store: bool,
    /// The address of the dirty line this access evicted.
    writeback: Option<u64>,
    walk_4k: bool,
    walk_2m: bool,
    l1_4k: bool,
    l1_2m: bool,
}

pub struct Sim {
    cache: Cache,
    /// The pattern classifier, which remembers streams from one buffer to the next.
    classifier: Classifier,
    tlb_4k: Tlb,
    tlb_2m: Tlb,
    buf: Vec<Pending>,
    out: Misses,
    page_limit: usize,
}

impl Sim {
    /// A simulation with this CPU's TLB sizes ([`Geometry::host`]).
    pub fn new(cache: Cache, structures: usize) -> Sim {
        Sim::with_tlb(cache, structures, Geometry::host())
    }

    pub fn with_tlb(cache: Cache, structures: usize, tlb: Geometry) -> Sim {
        assert!((1..=MAX_STRUCTURES).contains(&structures));
        Sim {
            cache,
            classifier: Classifier::new(),
            tlb_4k: Tlb::new(&tlb, PAGE_4K),
            tlb_2m: Tlb::new(&tlb, PAGE_2M),
            buf: Vec::with_capacity(BUFFER),
            out: Sim::empty(structures, tlb),
            page_limit: MAX_PAGES,
        }
    }

    fn empty(n: usize, tlb: Geometry) -> Misses {
        Misses {
            misses: vec![[0; 3]; n],
            accesses: vec![0; n],
            units: vec![Unit::default(); n],
            pages: PageMap::default(),
            overflow: Unit::default(),
            tlb,
            windows: Windows {
                structures: n,
                ..Windows::default()
            },
        }
    }

    /// Count at most `n` pages one by one (≤ [`MAX_PAGES`]); the rest go to the overflow.
    pub fn limit_pages(&mut self, n: usize) {
        self.page_limit = n.min(MAX_PAGES);
    }

    /// One load of structure `s` at `addr` that loaded `value` (0 when not a pointer-sized
    /// word).
    #[inline]
    pub fn access(&mut self, s: usize, addr: u64, value: u64) {
        self.access_rw(s, addr, value, false);
    }

    /// One access, a store when `store`.
    #[inline]
    pub fn access_rw(&mut self, s: usize, addr: u64, value: u64, store: bool) {
        assert!(s < self.out.units.len(), "structure {s} out of range");
        let touch = self.cache.touch(addr, store);
        let miss = !touch.hit;
        let walk_4k = self.tlb_4k.access(addr);
        let walk_2m = self.tlb_2m.access(addr);
        self.buf.push(Pending {
            access: Access { addr, value },
            s: s as u16,
            miss,
            store,
            writeback: touch.writeback,
            walk_4k,
            walk_2m,
            l1_4k: self.tlb_4k.last_l1_miss,
            l1_2m: self.tlb_2m.last_l1_miss,
        });
        if self.buf.len() == BUFFER {
            self.flush();
        }
    }

    /// Classify the buffer (all its accesses, as the thesis's profiler sees them) and count
    /// each access under its structure and page with its line's pattern.
    fn flush(&mut self) {
        let mut acc: Vec<Access> = self.buf.iter().map(|b| b.access).collect();
        let labels = self.classifier.classify(&mut acc);
        self.count_window(&labels);
        let mut written: Vec<(u16, u64)> = Vec::new();
        // The thesis's profiler counts a line once per buffer (repeats are assumed cached).
        let mut counted = vec![false; labels.len()];
        for b in &self.buf {
            let line = b.access.addr / classify::LINE;
            let i = labels.partition_point(|l| l.0 / classify::LINE < line);
            let found = labels.get(i).filter(|l| l.0 / classify::LINE == line);
            let p = found.map_or(Pattern::Random, |l| l.1) as usize;
            let first = match found {
                Some(_) => !std::mem::replace(&mut counted[i], true),
                None => true,
            };
            let mut u = Unit {
                structure: b.s,
                accesses: 1,
                stores: b.store as u64,
                walks_4k: b.walk_4k as u64,
                walks_2m: b.walk_2m as u64,
                walks_4k_on_hits: (b.walk_4k && !b.miss) as u64,
                walks_2m_on_hits: (b.walk_2m && !b.miss) as u64,
                dependent_walks_4k_on_hits: (b.walk_4k && !b.miss && p == CHASE) as u64,
                dependent_walks_2m_on_hits: (b.walk_2m && !b.miss && p == CHASE) as u64,
                l1_tlb_misses_4k_on_hits: (b.l1_4k && !b.miss) as u64,
                l1_tlb_misses_2m_on_hits: (b.l1_2m && !b.miss) as u64,
                ..Unit::default()
            };
            u.classified[p] = first as u64;
            if b.miss {
                u.misses[p] = 1;
                self.out.misses[b.s as usize][p] += 1;
            }
            self.out.accesses[b.s as usize] += 1;
            self.out.units[b.s as usize].add(&u);
            let page = b.access.addr >> PAGE_4K;
            let room = self.out.pages.len() < self.page_limit;
            match self.out.pages.get_mut(&page) {
                Some(e) => {
                    e.structure = b.s;
                    e.add(&u);
                }
                None if room => {
                    self.out.pages.insert(page, u);
                }
                None => self.out.overflow.add(&u),
            }
            // A writeback belongs to the page of the line written (stored to before, so
            // counted already, unless it overflowed).
            if let Some(wb) = b.writeback {
                let s = match self.out.pages.get_mut(&(wb >> PAGE_4K)) {
                    Some(e) => {
                        e.writebacks += 1;
                        e.structure
                    }
                    None => {
                        self.out.overflow.writebacks += 1;
                        b.s
                    }
                };
                self.out.units[s as usize].writebacks += 1;
                written.push((s, wb / classify::LINE));
            }
        }
        self.count_written(written);
        self.buf.clear();
    }

    /// The window's lines written back, per structure: those next to another one (in order,
    /// sharing a device line) and the rest.
    fn count_written(&mut self, mut written: Vec<(u16, u64)>) {
        let w = &mut self.out.windows;
        let at = w.written_lines.len() - w.structures;
        written.sort_unstable();
        for (i, &(s, line)) in written.iter().enumerate() {
            let next_to = |j: Option<usize>| {
                j.and_then(|j| written.get(j))
                    .is_some_and(|&(t, l)| t == s && l.abs_diff(line) == 1)
            };
            if next_to(i.checked_sub(1)) || next_to(Some(i + 1)) {
                w.written_seq_lines[at + s as usize] += 1;
            } else {
                w.written_lines[at + s as usize] += 1;
            }
        }
    }

    /// The buffer as one window: misses per structure (`labels` from the classifier, to split
    /// them by pattern), and room for its lines written back.
    fn count_window(&mut self, labels: &[(u64, Pattern)]) {
        let w = &mut self.out.windows;
        let n = w.structures;
        let at = w.misses.len();
        w.accesses.push(self.buf.len() as u32);
        for v in [
            &mut w.misses,
            &mut w.stream_misses,
            &mut w.written_lines,
            &mut w.written_seq_lines,
        ] {
            v.resize(at + n, 0);
        }
        for b in self.buf.iter().filter(|b| b.miss) {
            let line = b.access.addr / classify::LINE;
            let i = labels.partition_point(|l| l.0 / classify::LINE < line);
            let stream = labels
                .get(i)
                .is_some_and(|l| l.0 / classify::LINE == line && l.1 == Pattern::Streaming);
            if stream {
                w.stream_misses[at + b.s as usize] += 1;
            } else {
                w.misses[at + b.s as usize] += 1;
            }
        }
    }

    /// Forget the counts but keep the cache's and TLBs' contents: trace a warm-up pass, reset,
    /// then trace the pass to count (as timed runs measure warm caches).
    pub fn reset_counts(&mut self) {
        if !self.buf.is_empty() {
            self.flush();
        }
        let n = self.out.units.len();
        self.out = Sim::empty(n, self.out.tlb.clone());
    }

    pub fn finish(mut self) -> Misses {
        if !self.buf.is_empty() {
            self.flush();
        }
        self.out
    }
}

impl Misses {
    /// Sum the pages into units of `1 << shift` bytes (X-Mem regions): unit number → counts.
    pub fn group_pages(&self, shift: u32) -> PageMap {
        assert!(shift >= PAGE_4K);
        let mut out = PageMap::default();
        for (&page, u) in &self.pages {
            let e = out.entry(page >> (shift - PAGE_4K)).or_insert(Unit {
                structure: u.structure,
                ..Unit::default()
            });
            e.add(u);
        }
        out
    }
}

/// ΔL per pattern between two measured tiers (slow − fast, never below 0).
pub fn delta(fast: &Tier, slow: &Tier) -> PerPattern {
    [
        (slow.chase_ns - fast.chase_ns).max(0.0),
        (slow.random_ns - fast.random_ns).max(0.0),
        (slow.seq_ns - fast.seq_ns).max(0.0),
    ]
}

/// Predicted ns of a run whose all-fast time is `fast_ns`, with the structures `slow[s]` on the
/// slow tier, each miss of pattern p costing `delta[p]` more there; `scale` multiplies the
/// traced counts (a trace of one iteration of many). No TLB term: for presets, whose slow
/// memory is mapped with the same (huge) pages as the fast tier.
pub fn predict(fast_ns: f64, m: &Misses, slow: &[bool], delta: &PerPattern, scale: f64) -> f64 {
    predict_tlb(fast_ns, m, slow, delta, &TlbCost::NONE, scale)
}

/// [`predict`] on the validation tier pair (slow = 4 KiB pages, fast = 2 MiB): each slow
/// structure also pays for the walks and L2 TLB hits its 4 KiB pages add in front of cache hits.
pub fn predict_tlb(
    fast_ns: f64,
    m: &Misses,
    slow: &[bool],
    delta: &PerPattern,
    tlb: &TlbCost,
    scale: f64,
) -> f64 {
    assert_eq!(slow.len(), m.units.len());
    let extra: f64 = (0..slow.len())
        .filter(|&s| slow[s])
        .map(|s| m.units[s].slow_cost(delta, tlb))
        .sum();
    fast_ns + extra * scale
}

#[cfg(test)]
mod tests;
