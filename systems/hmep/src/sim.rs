//! The trace simulator (emulation level 3): a traced run's accesses go through a cache model and
//! the thesis's classifier, giving per structure the memory misses of each pattern, a sufficient
//! statistic: any placement's time is then predicted as
//! `measured time with everything fast + Σ over slow structures Σ_p misses(p) · ΔL(p)`,
//! so every placement, preset and fast-tier share is swept from one trace. Bandwidth queueing is
//! not modelled (the validation tier pair has equal bandwidth; a preset whose bandwidth binds is
//! charged per access through `L(p)` already).

use crate::cache::Cache;
use crate::calib::Tier;
use pmkit_xmem::classify::{self, Access, BUFFER};
use pmkit_xmem::place::{Pattern, PerPattern};

/// Most structures one simulation tells apart.
pub const MAX_STRUCTURES: usize = 64;

/// Misses by pattern (`Pattern as usize`) and accesses, per structure.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Misses {
    pub misses: Vec<[u64; 3]>,
    pub accesses: Vec<u64>,
}

pub struct Sim {
    cache: Cache,
    /// The current buffer: access, structure, missed.
    buf: Vec<(Access, u16, bool)>,
    out: Misses,
}

impl Sim {
    pub fn new(cache: Cache, structures: usize) -> Sim {
        assert!((1..=MAX_STRUCTURES).contains(&structures));
        Sim {
            cache,
            buf: Vec::with_capacity(BUFFER),
            out: Misses {
                misses: vec![[0; 3]; structures],
                accesses: vec![0; structures],
            },
        }
    }

    /// One access of structure `s` at `addr` that loaded or stored `value` (0 when not a
    /// pointer-sized word).
    #[inline]
    pub fn access(&mut self, s: usize, addr: u64, value: u64) {
        let miss = !self.cache.access(addr);
        self.out.accesses[s] += 1;
        self.buf.push((Access { addr, value }, s as u16, miss));
        if self.buf.len() == BUFFER {
            self.flush();
        }
    }

    /// Classify the buffer (all its accesses, as the thesis's profiler sees them) and charge each
    /// miss its line's pattern.
    fn flush(&mut self) {
        let mut acc: Vec<Access> = self.buf.iter().map(|b| b.0).collect();
        let labels = classify::classify(&mut acc);
        for &(a, s, miss) in &self.buf {
            if !miss {
                continue;
            }
            let line = a.addr / classify::LINE;
            let i = labels.partition_point(|l| l.0 / classify::LINE < line);
            let p = labels
                .get(i)
                .filter(|l| l.0 / classify::LINE == line)
                .map_or(Pattern::Random, |l| l.1);
            self.out.misses[s as usize][p as usize] += 1;
        }
        self.buf.clear();
    }

    /// Forget the counts but keep the cache's contents: trace a warm-up pass, reset, then trace
    /// the pass to count (as timed runs measure warm caches).
    pub fn reset_counts(&mut self) {
        if !self.buf.is_empty() {
            self.flush();
        }
        let n = self.out.accesses.len();
        self.out = Misses {
            misses: vec![[0; 3]; n],
            accesses: vec![0; n],
        };
    }

    pub fn finish(mut self) -> Misses {
        if !self.buf.is_empty() {
            self.flush();
        }
        self.out
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
/// traced misses (a trace of one iteration of many).
pub fn predict(fast_ns: f64, m: &Misses, slow: &[bool], delta: &PerPattern, scale: f64) -> f64 {
    assert_eq!(slow.len(), m.misses.len());
    let extra: f64 = m
        .misses
        .iter()
        .zip(slow)
        .filter(|(_, &s)| s)
        .map(|(c, _)| (0..3).map(|p| c[p] as f64 * delta[p]).sum::<f64>())
        .sum();
    fast_ns + extra * scale
}
