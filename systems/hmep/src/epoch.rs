//! Emulation level 2: the epoch emulator for instrumented code. The thesis's HMEP read hardware
//! counters each epoch and stalled the core for the cycles the slow memory would have added;
//! these VMs have no counters, so the program reports its accesses (through X-Mem's accessor
//! types or a benchmark's probe) and this counts them instead:
//! - **sampled cache and TLB models**: one 4 KiB page in `2^sample_shift` (picked by a hash of
//!   its number) goes through a cache of `1/2^sample_shift` the last level's size and TLBs of
//!   `1/2^sample_shift` the entries, at 4 KiB and at 2 MiB pages. Their misses, scaled back up,
//!   are the slow structures' accesses that would reach memory; the walks and L2 TLB hits that
//!   4 KiB pages add in front of cache hits are the translation cost of a slow tier mapped with
//!   smaller pages;
//! - an **online classifier**: a load whose line the structure's previous load pointed to is a
//!   chase, one within a line of the last line touched in its 4 KiB page (a direct-mapped table
//!   of [`STREAM_PAGES`] pages) is streaming, the rest random (the thesis's classifier needs a
//!   buffer of 4,096 accesses; this one sees one pointer back, so it stays cheap enough to run
//!   inside the measured time). As in level 3, a pointer loaded from a line a stream prefetcher
//!   brought in (the next line of its page's stream, not itself pointed to) makes no chase, and
//!   only a line's first pointer does.
//!
//! Every `epoch` accesses, the modelled extra time of the slow structures' estimated misses
//! (`misses · ΔL(p)`) and translations is owed, minus the emulator's own cost (`overhead_ns` per
//! access, measured by the caller: a run with the emulator counting but never stalling against
//! a run without it), and the thread spins it off. A negative balance (the emulator cost more
//! than the slow memory would) is carried to the next epoch; what is left at the end is
//! reported as `unpaid_ns`, the error the emulation could not take back.
//!
//! Limits: one emulator per thread (it is `&mut`); slowness is per structure (X-Mem tag), not
//! per region; bandwidth is not throttled (level 3's queueing term covers it).

use crate::cache::Cache;
use crate::tlb::{Geometry, Level, Levels, Tlb, TlbCost, PAGE_2M, PAGE_4K};
use pmkit_xmem::place::PerPattern;
use serde::Serialize;
use std::time::{Duration, Instant};

/// Most structures one emulator tells apart (a bit each in the slow mask).
pub const MAX_STRUCTURES: usize = 64;
/// Bounds on the epoch, in accesses: short enough that stalls interleave with the work as
/// memory stalls would, long enough that the clock reads (about 20 ns each) stay negligible.
pub const MIN_EPOCH: u32 = 1 << 10;
pub const MAX_EPOCH: u32 = 1 << 24;
/// Most sampling: 1 set and 1 page in 2^MAX_SAMPLE_SHIFT.
pub const MAX_SAMPLE_SHIFT: u32 = 8;

const LINE_SHIFT: u32 = 6;

/// What to emulate.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Extra ns per memory access of each pattern (chase, random, streaming) on the slow tier.
    pub delta: PerPattern,
    /// Extra ns per translation in front of a cache hit ([`TlbCost::NONE`] when the slow tier
    /// uses the fast tier's pages, as every preset does).
    pub tlb: TlbCost,
    /// The cache model: bytes and ways (this machine's last level, `cache::llc`).
    pub cache_bytes: usize,
    pub cache_ways: usize,
    /// The TLB sizes the sampled TLB models are scaled from.
    pub tlb_geometry: Geometry,
    /// Simulate one cache set and one page in `2^sample_shift`.
    pub sample_shift: u32,
    /// Accesses between stalls.
    pub epoch: u32,
    /// The emulator's own ns per access, taken off what is owed.
    pub overhead_ns: f64,
    /// Count but never stall (the run that measures `overhead_ns`).
    pub count_only: bool,
}

impl Config {
    /// Sampling 1 page in 64, epochs of 16,384 accesses, no overhead known yet.
    pub fn new(delta: PerPattern, tlb: TlbCost, cache_bytes: usize, cache_ways: usize) -> Config {
        Config {
            delta,
            tlb,
            cache_bytes,
            cache_ways,
            tlb_geometry: Geometry::host(),
            sample_shift: 6,
            epoch: 1 << 14,
            overhead_ns: 0.0,
            count_only: false,
        }
    }
}

/// What an emulated run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stats {
    pub accesses: u64,
    pub slow_accesses: u64,
    /// Estimated memory misses of slow structures, by pattern (sampled count × 2^shift).
    pub slow_misses: [f64; 3],
    /// Estimated extra walks and L2 TLB hits on cache hits of slow structures.
    pub extra_walks: f64,
    pub extra_l2_tlb_hits: f64,
    /// The modelled slow-memory time, the overhead taken off it, and the time spun.
    pub owed_ns: f64,
    pub overhead_ns: f64,
    pub stalled_ns: f64,
    /// Owed time the emulator's own cost made impossible to pay (it ran slower than the slow
    /// memory would have): the emulated run is at least this much too slow.
    pub unpaid_ns: f64,
    pub epochs: u64,
}

/// Pages the online classifier follows streams in (a direct-mapped table by page number).
pub const STREAM_PAGES: usize = 1024;

const LINES_PER_PAGE: u64 = 1 << (PAGE_4K - LINE_SHIFT);

/// The online classifier's stream table: per page slot, the last line touched there and
/// whether a load on it waited for memory (it was not the next line of the page's stream, or
/// a pointer led to it), packed as `line << 1 | waited`.
struct Streams([u64; STREAM_PAGES]);

impl Streams {
    /// Classify a load of `line` (0 chase, 1 random, 2 streaming, as `Pattern as usize`) that a
    /// pointer led to when `chase` (a pointer load when `pointer`), remember it, and say
    /// whether it waited for memory. As in level 3's classifier, a pointer counts only from a
    /// line that waited: an index a stream prefetcher brought in makes no chase.
    #[inline(always)]
    fn step(&mut self, line: u64, chase: bool, pointer: bool) -> (usize, bool) {
        let page = line / LINES_PER_PAGE;
        let slot = |p: u64| (mix(p) % STREAM_PAGES as u64) as usize;
        let e = self.0[slot(page)];
        let (head, head_waited) = (e >> 1, e & 1 == 1);
        // A page's first line continues the page below's stream.
        let below = line.is_multiple_of(LINES_PER_PAGE)
            && self.0[slot(page.wrapping_sub(1))] >> 1 == line.wrapping_sub(1);
        // Back on the same line: a pointer led here again (a chase), or the line's wait is
        // still the one its first load paid.
        let waited = if head == line {
            head_waited || chase
        } else if head + 1 == line || below {
            chase
        } else {
            true
        };
        // Only a waiting line's first pointer waits on its miss: the line's later pointers
        // are in the core with it (level 3's rule too).
        self.0[slot(page)] = line << 1 | u64::from(waited && !pointer);
        let p = if chase {
            0
        } else if head.abs_diff(line) <= 1 || below {
            2
        } else {
            1
        };
        (p, waited)
    }
}

pub struct Epoch {
    cfg: Config,
    slow: u64,
    cache: Cache,
    tlb_4k: Tlb,
    tlb_2m: Tlb,
    /// Per structure, the line its last pointer load pointed to (0: none).
    targets: [u64; MAX_STRUCTURES],
    streams: Streams,
    sample_mask: u64,
    n: u32,
    /// Sampled counts of the current epoch: slow misses by pattern, and the walks and L2 TLB
    /// hits 4 KiB pages add in front of slow cache hits.
    misses: [u64; 3],
    /// Walks in front of dependent (chase) loads and in front of the others.
    walks: [u64; 2],
    l2_hits: u64,
    /// Owed ns carried between epochs (negative: the emulator is ahead).
    balance: f64,
    stats: Stats,
}

/// `l` with `1/2^shift` of its entries (at least one set of one way).
fn scaled(l: Level, shift: u32) -> Level {
    let entries = (l.entries >> shift).max(1);
    Level {
        entries,
        ways: l.ways.min(entries),
    }
}

impl Epoch {
    /// An emulator that treats the structures whose bits are set in `slow` as slow.
    pub fn new(cfg: Config, slow: u64) -> Epoch {
        assert!(
            cfg.sample_shift <= MAX_SAMPLE_SHIFT,
            "sample 1 in at most 2^{MAX_SAMPLE_SHIFT}"
        );
        assert!(
            (MIN_EPOCH..=MAX_EPOCH).contains(&cfg.epoch),
            "epoch of {MIN_EPOCH}..={MAX_EPOCH} accesses"
        );
        assert!(cfg.overhead_ns >= 0.0 && cfg.overhead_ns.is_finite());
        let k = cfg.sample_shift;
        let geo = |l: Levels| Levels {
            l1: scaled(l.l1, k),
            l2: scaled(l.l2, k),
        };
        let g = Geometry {
            k4: geo(cfg.tlb_geometry.k4),
            m2: geo(cfg.tlb_geometry.m2),
            source: cfg.tlb_geometry.source.clone(),
        };
        Epoch {
            cache: Cache::new(
                (cfg.cache_bytes >> k).max(64 * cfg.cache_ways),
                cfg.cache_ways,
            ),
            tlb_4k: Tlb::new(&g, PAGE_4K),
            tlb_2m: Tlb::new(&g, PAGE_2M),
            targets: [0; MAX_STRUCTURES],
            streams: Streams([0; STREAM_PAGES]),
            sample_mask: (1u64 << k) - 1,
            n: 0,
            misses: [0; 3],
            walks: [0; 2],
            l2_hits: 0,
            balance: 0.0,
            stats: Stats::default(),
            slow,
            cfg,
        }
    }

    /// One access of structure `s` at `addr`; `value` is the address a pointer load loaded
    /// (0 otherwise). Costs one hash and a few compares unless its page is sampled.
    #[inline]
    pub fn access(&mut self, s: usize, addr: u64, value: u64) {
        debug_assert!(s < MAX_STRUCTURES);
        let s = s & (MAX_STRUCTURES - 1);
        let slow = (self.slow >> s) & 1 == 1;
        // Pages are picked by a hash, so strided walks sample evenly; every line of a sampled
        // page goes through the models, so they see its reuse.
        let sampled = mix(addr >> PAGE_4K) & self.sample_mask == 0;
        let mut p = 1;
        if slow {
            self.stats.slow_accesses += 1;
            let target = &mut self.targets[s];
            // Only pointer loads (whose line's wait decides a chase) and the sampled loads
            // (whose pattern is counted) need the stream table; the rest skip its cost.
            if value != 0 || sampled {
                let line = addr >> LINE_SHIFT;
                let chase = *target != 0 && *target == line;
                let waited;
                (p, waited) = self.streams.step(line, chase, value != 0);
                *target = if waited { value >> LINE_SHIFT } else { 0 };
            } else {
                *target = 0;
            }
        }
        if sampled {
            self.sampled(addr, slow, p);
        }
        self.n += 1;
        if self.n >= self.cfg.epoch {
            self.end_epoch();
        }
    }

    #[inline(never)]
    fn sampled(&mut self, addr: u64, slow: bool, p: usize) {
        // The smaller cache holds the sampled pages' lines (1/2^k of the address space in
        // 1/2^k of the capacity), indexed by a hash of the line as a last-level cache's slice
        // and set hash spreads strides (the hash is one-to-one: lines stay apart).
        let hit = self.cache.access(mix(addr >> LINE_SHIFT) << LINE_SHIFT);
        let w4 = self.tlb_4k.access(addr);
        let l4 = self.tlb_4k.last_l1_miss && !w4;
        let w2 = self.tlb_2m.access(addr);
        let l2 = self.tlb_2m.last_l1_miss && !w2;
        if !slow {
            return;
        }
        if hit {
            self.walks[usize::from(p != 0)] += u64::from(w4).saturating_sub(u64::from(w2));
            self.l2_hits += u64::from(l4).saturating_sub(u64::from(l2));
            return;
        }
        self.misses[p] += 1;
    }

    /// Owe the epoch's modelled time, take the overhead off, spin what is due.
    #[inline(never)]
    fn end_epoch(&mut self) {
        let scale = (1u64 << self.cfg.sample_shift) as f64;
        let mut owed = 0.0;
        for p in 0..3 {
            let m = self.misses[p] as f64 * scale;
            self.stats.slow_misses[p] += m;
            owed += m * self.cfg.delta[p];
        }
        let walks = self.walks.map(|w| w as f64 * scale);
        let l2 = self.l2_hits as f64 * scale;
        owed += self.cfg.tlb.of(walks[0], walks[1], l2);
        let overhead = self.n as f64 * self.cfg.overhead_ns;
        self.stats.extra_walks += walks[0] + walks[1];
        self.stats.extra_l2_tlb_hits += l2;
        self.stats.owed_ns += owed;
        self.stats.overhead_ns += overhead;
        self.stats.accesses += self.n as u64;
        self.stats.epochs += 1;
        (self.n, self.misses, self.walks, self.l2_hits) = (0, [0; 3], [0; 2], 0);
        if self.cfg.count_only {
            return;
        }
        self.balance += owed - overhead;
        if self.balance > 0.0 {
            let spun = spin(self.balance);
            self.stats.stalled_ns += spun;
            self.balance -= spun;
        }
    }

    /// Close the last epoch and return what the run did.
    pub fn finish(&mut self) -> Stats {
        if self.n > 0 {
            self.end_epoch();
        }
        let mut s = self.stats;
        s.unpaid_ns = (-self.balance).max(0.0);
        s
    }

    /// Forget the counts and the balance, keep the models' contents (after a warm-up pass).
    pub fn reset_counts(&mut self) {
        (self.n, self.misses, self.walks, self.l2_hits) = (0, [0; 3], [0; 2], 0);
        self.balance = 0.0;
        self.stats = Stats::default();
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
}

/// A multiplicative hash whose low bits depend on every input bit.
#[inline(always)]
fn mix(v: u64) -> u64 {
    let h = v.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 32)
}

/// Busy-wait about `ns`; returns the ns actually waited (the clock is read every iteration, so
/// the overshoot is one clock read).
fn spin(ns: f64) -> f64 {
    let t = Instant::now();
    let want = Duration::from_nanos(ns as u64);
    loop {
        let e = t.elapsed();
        if e >= want {
            return e.as_nanos() as f64;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(delta: PerPattern) -> Config {
        let mut c = Config::new(delta, TlbCost::NONE, 1 << 20, 16);
        c.sample_shift = 0; // every access: exact counts
        c.epoch = MIN_EPOCH;
        c.count_only = true;
        c
    }

    #[test]
    fn only_slow_structures_owe_and_misses_are_classified() {
        let mut e = Epoch::new(cfg([100.0, 10.0, 1.0]), 0b10);
        let base = 1u64 << 30;
        // Structure 0 (fast): 64 MiB of lines, all misses, owe nothing.
        for i in 0..(1u64 << 20) {
            e.access(0, base + i * 64, 0);
        }
        let s = e.finish();
        assert_eq!(s.owed_ns, 0.0);
        assert_eq!(s.slow_accesses, 0);
        // Structure 1 (slow): a streaming pass, then random lines, then a chase.
        let mut e = Epoch::new(cfg([100.0, 10.0, 1.0]), 0b10);
        for i in 0..4096u64 {
            e.access(1, base + i * 64, 0);
        }
        for i in 0..4096u64 {
            // Distinct pages in a scrambled order (40503 is odd: a permutation of 65536).
            e.access(1, base + (64 << 20) + (i * 40503 % 65536) * 4096, 0);
        }
        let mut at = base + (256 << 20);
        for i in 0..4096u64 {
            let next = base + (256 << 20) + ((i * 7919) % 65536) * 4096 + 4096 * 65536;
            e.access(1, at, next);
            at = next;
        }
        let s = e.finish();
        assert_eq!(s.accesses, 3 * 4096);
        assert_eq!(s.slow_accesses, 3 * 4096);
        // Each phase's first access has no neighbour or pointer behind it: random.
        assert_eq!(s.slow_misses, [4095.0, 4098.0, 4095.0], "{s:?}");
        let owed = 4095.0 * 100.0 + 4098.0 * 10.0 + 4095.0;
        assert!((s.owed_ns - owed).abs() < 1e-6);
        assert_eq!(s.stalled_ns, 0.0, "count only");
    }

    #[test]
    fn pointers_from_a_stream_make_no_chase_and_from_a_random_line_do() {
        // One structure with an index (8 entries a line) and the lines it points to, read in
        // turn as a CSR scan reads offsets and edges: in order, then at random places.
        let (idx, data) = (1u64 << 30, 1u64 << 34);
        let run = |order: &dyn Fn(u64) -> u64| {
            let mut e = Epoch::new(cfg([100.0, 10.0, 1.0]), 0b1);
            for i in 0..8192u64 {
                let v = order(i);
                let target = data + ((v * 40503) % 65536) * 4096;
                e.access(0, idx + v * 8, target);
                e.access(0, target, 0);
            }
            e.finish().slow_misses
        };
        let scan = run(&|i| i);
        assert!(scan[0] < 82.0 && scan[1] > 8000.0, "in order: {scan:?}");
        let random = run(&|i| (i * 7919) % 65536 * 8);
        assert!(random[0] > 8000.0, "at random: {random:?}");
    }

    #[test]
    fn cached_lines_owe_nothing_and_sampling_estimates_misses() {
        let base = 1u64 << 32;
        for shift in [0, 4] {
            let mut c = cfg([0.0, 10.0, 0.0]);
            c.sample_shift = shift;
            c.cache_bytes = 8 << 20;
            let mut e = Epoch::new(c, 1);
            // 256 KiB in a 8 MiB cache: misses on the first pass only.
            for _ in 0..4 {
                let mut x = 7u64;
                for _ in 0..4096 {
                    x = mix(x);
                    e.access(0, base + (x % 4096) * 64, 0);
                }
            }
            let s = e.finish();
            let misses: f64 = s.slow_misses.iter().sum();
            assert!(misses <= 4096.0 * 1.5, "shift {shift}: {s:?}");
            // 64 MiB of random lines: nearly all miss, estimated within 15% when sampled.
            let mut e = Epoch::new(e.config().clone(), 1);
            let mut x = 9u64;
            for _ in 0..(1 << 18) {
                x = mix(x);
                e.access(0, base + (x % (1 << 20)) * 64, 0);
            }
            let s = e.finish();
            let misses: f64 = s.slow_misses.iter().sum();
            assert!(
                (misses - (1 << 18) as f64 * 0.88).abs() < (1 << 18) as f64 * 0.15,
                "shift {shift}: {misses} of {}",
                1 << 18
            );
        }
    }

    #[test]
    fn the_owed_time_is_spun_less_the_overhead() {
        let mut c = cfg([0.0, 1000.0, 0.0]);
        c.count_only = false;
        c.overhead_ns = 100.0;
        let mut e = Epoch::new(c, 1);
        let base = 1u64 << 34;
        let t = Instant::now();
        let mut x = 3u64;
        for _ in 0..(MIN_EPOCH * 4) {
            x = mix(x);
            e.access(0, base + (x % (1 << 22)) * 64, 0);
        }
        let s = e.finish();
        let wall = t.elapsed().as_nanos() as f64;
        assert_eq!(s.epochs, 4);
        assert!(s.owed_ns > 3.0e6, "{s:?}");
        let due = s.owed_ns - s.overhead_ns;
        assert!(s.stalled_ns >= due - 4.0, "{s:?}");
        assert!(wall >= s.stalled_ns);
        // A spin's overshoot (one clock read, or a preemption on a loaded machine) is carried
        // and, at the end, reported unpaid: the accounting is exact.
        assert!((s.stalled_ns - s.unpaid_ns - due).abs() < 1.0, "{s:?}");
        // An overhead above what is owed is carried and reported unpaid.
        let mut c = cfg([0.0, 1.0, 0.0]);
        c.count_only = false;
        c.overhead_ns = 50.0;
        let mut e = Epoch::new(c, 1);
        for i in 0..u64::from(MIN_EPOCH) {
            e.access(0, base + i * 4096, 0);
        }
        let s = e.finish();
        assert_eq!(s.stalled_ns, 0.0);
        assert!(
            (s.unpaid_ns - (s.overhead_ns - s.owed_ns)).abs() < 1e-6,
            "{s:?}"
        );
    }

    #[test]
    fn four_kib_pages_owe_walks_on_cache_hits() {
        let mut c = cfg([0.0; 3]);
        c.tlb = TlbCost {
            walk_ns: 10.0,
            walk_independent_ns: 0.5,
            l1_ns: 1.0,
        };
        c.tlb_geometry = Geometry::default();
        c.cache_bytes = 8 << 20;
        // One line in each of 16,384 pages (64 MiB, beyond a 3,072-entry L2 TLB's reach), in
        // the cache after the first lap: every access walks at 4 KiB, none at 2 MiB. Visited in
        // order (independent loads) they owe the independent price; chased (each load's value
        // the next address), the dependent one.
        let base = 1u64 << 36;
        let at = |p: u64| base + (p % 16384) * 4096 + (p % 64) * 64;
        let run = |chase: bool| {
            let mut e = Epoch::new(c.clone(), 1);
            for _ in 0..4 {
                for p in 0..16384u64 {
                    e.access(0, at(p), if chase { at(p + 1) } else { 0 });
                }
            }
            e.finish()
        };
        let (plain, chased) = (run(false), run(true));
        for s in [&plain, &chased] {
            assert!(s.extra_walks > 16384.0 * 2.5, "{s:?}");
        }
        assert!(plain.owed_ns < plain.extra_walks * 1.0, "{plain:?}");
        assert!(chased.owed_ns >= chased.extra_walks * 10.0, "{chased:?}");
    }
}
