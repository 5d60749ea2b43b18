//! Instrumented-code hooks for the classifier: a [`Tracer`] logs every access made through it
//! (address, and for loads of 8-byte words the loaded value), classifies each full buffer of
//! [`BUFFER`] accesses with the thesis's rules and adds the counts to the access's region.
//! Per-region counts roll up into per-tag profiles with `XMem::apply_profile`.
//!
//! A tracer belongs to one thread (`&mut self`); merge the counts of several with [`merge`].
//! Only accesses made through `load`/`store` are seen: this is the thesis's Pin profiler
//! done by hand in the code that owns the data structures.
//!
//! The thesis's profiler counts a line once per buffer and assumes the rest hit the cache, so a
//! structure the cache holds (a small hash index, hot vertex data) ranks by its accesses as if
//! each one reached memory. [`Tracer::with_cache`] puts a cache model in front: each access that
//! misses it is counted under its line's pattern, and hits are not counted, so the profile is
//! the memory traffic the placement can change. The model is write-back: a stored line reaches
//! memory when it is evicted, and each such writeback is counted under its line's region (what
//! a slow tier's write cost applies to; the thesis's profile has no writes).

use crate::cache::Cache;
use crate::classify::{Access, Classifier, BUFFER};
use std::collections::BTreeMap;

/// What a tracer counted in one region.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Accesses by pattern, indexed by `Pattern as usize`.
    pub by_pattern: [u64; 3],
    /// Dirty lines the cache model evicted (0 without one).
    pub writebacks: u64,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        for (sum, &n) in self.by_pattern.iter_mut().zip(&o.by_pattern) {
            *sum += n;
        }
        self.writebacks += o.writebacks;
    }
}

/// Counts per region index.
pub type RegionCounts = BTreeMap<usize, Counts>;

/// Values a tracer can log: 8-byte words give their value (a possible pointer), narrower ones 0.
pub trait Word: Copy {
    fn word(self) -> u64;
}

macro_rules! word {
    ($($t:ty => $e:expr),* $(,)?) => { $(impl Word for $t { fn word(self) -> u64 { $e(self) } })* };
}
word!(u64 => |v| v, usize => |v| v as u64, i64 => |v| v as u64, f64 => |_| 0,
      u32 => |_| 0, i32 => |_| 0, u16 => |_| 0, i16 => |_| 0, u8 => |_| 0, i8 => |_| 0,
      f32 => |_| 0, bool => |_| 0);

impl<T> Word for *const T {
    fn word(self) -> u64 {
        self as usize as u64
    }
}
impl<T> Word for *mut T {
    fn word(self) -> u64 {
        self as usize as u64
    }
}

pub struct Tracer<F: Fn(u64) -> Option<usize>> {
    buf: Vec<Access>,
    counts: RegionCounts,
    region_of: F,
    logged: u64,
    /// With a cache model: the model, and per buffered access whether it missed.
    cache: Option<Cache>,
    missed: Vec<bool>,
    /// The classifier, which remembers streams from one buffer to the next.
    classifier: Classifier,
}

impl<F: Fn(u64) -> Option<usize>> Tracer<F> {
    /// A tracer that files each classified access under `region_of(address)` (accesses outside
    /// every region are classified with the rest of the buffer but not counted).
    pub fn new(region_of: F) -> Tracer<F> {
        Tracer {
            buf: Vec::with_capacity(BUFFER),
            counts: RegionCounts::new(),
            region_of,
            logged: 0,
            cache: None,
            missed: Vec::new(),
            classifier: Classifier::new(),
        }
    }

    /// A tracer that counts only the accesses that miss `cache` (each under its line's
    /// pattern): a miss profile.
    pub fn with_cache(region_of: F, cache: Cache) -> Tracer<F> {
        Tracer {
            cache: Some(cache),
            missed: Vec::with_capacity(BUFFER),
            ..Tracer::new(region_of)
        }
    }

    /// Load `*r` and log it with the loaded value.
    pub fn load<T: Word>(&mut self, r: &T) -> T {
        let v = *r;
        self.log(r as *const T as u64, v.word());
        v
    }

    /// Store `v` into `*r` and log the address (stores reveal no pointer to follow).
    pub fn store<T: Word>(&mut self, r: &mut T, v: T) {
        *r = v;
        self.log_rw(r as *const T as u64, 0, true);
    }

    fn log(&mut self, addr: u64, value: u64) {
        self.log_rw(addr, value, false)
    }

    fn log_rw(&mut self, addr: u64, value: u64, store: bool) {
        if let Some(c) = &mut self.cache {
            let t = c.touch(addr, store);
            self.missed.push(!t.hit);
            if let Some(r) = t.writeback.and_then(&self.region_of) {
                self.counts.entry(r).or_default().writebacks += 1;
            }
        }
        self.buf.push(Access { addr, value });
        self.logged += 1;
        if self.buf.len() == BUFFER {
            self.flush();
        }
    }

    /// Classify what is buffered now (also done whenever the buffer fills).
    pub fn flush(&mut self) {
        if self.cache.is_none() {
            for (addr, p) in self.classifier.classify(&mut self.buf) {
                if let Some(r) = (self.region_of)(addr) {
                    self.counts.entry(r).or_default().by_pattern[p as usize] += 1;
                }
            }
            self.buf.clear();
            return;
        }
        for (addr, p) in self.classifier.label_misses(&mut self.buf, &self.missed) {
            if let Some(r) = (self.region_of)(addr) {
                self.counts.entry(r).or_default().by_pattern[p as usize] += 1;
            }
        }
        self.buf.clear();
        self.missed.clear();
    }

    /// Accesses logged so far.
    pub fn logged(&self) -> u64 {
        self.logged
    }

    /// Flush and hand over the per-region counts.
    pub fn finish(mut self) -> RegionCounts {
        self.flush();
        std::mem::take(&mut self.counts)
    }
}

/// Add `other`'s counts into `into` (tracers of several threads).
pub fn merge(into: &mut RegionCounts, other: &RegionCounts) {
    for (r, c) in other {
        into.entry(*r).or_default().add(c);
    }
}

/// Data accesses from a `valgrind --tool=lackey --trace-mem=yes` log (lines ` L addr,size`,
/// ` S addr,size`, ` M addr,size`; instruction fetches `I` and other lines are skipped), each
/// with whether it stores (`S` and `M`, a load and a store of one place).
///
/// Lackey logs addresses only, never loaded values, so the classifier's pointer-chasing rule
/// cannot fire on these: a program profiled this way gets streaming and random counts only, and
/// a pointer-chased structure (a hash table's chains, a tree) ranks lower than it should.
pub fn parse_lackey_rw(text: &str) -> Vec<(Access, bool)> {
    text.lines()
        .filter_map(|l| {
            let l = l.strip_prefix(' ')?;
            let (kind, rest) = l.split_once(' ')?;
            let store = match kind {
                "L" => false,
                "S" | "M" => true,
                _ => return None,
            };
            let addr = rest.trim().split(',').next()?;
            let addr = u64::from_str_radix(addr, 16).ok()?;
            Some((Access { addr, value: 0 }, store))
        })
        .collect()
}

/// [`parse_lackey_rw`] without the store flags.
pub fn parse_lackey(text: &str) -> Vec<Access> {
    parse_lackey_rw(text).into_iter().map(|a| a.0).collect()
}

/// Classify a whole access log in buffers of [`BUFFER`] (in log order, as the profiler would
/// have seen them) and count per region.
pub fn classify_log(log: &[Access], region_of: impl Fn(u64) -> Option<usize>) -> RegionCounts {
    let mut t = Tracer::new(region_of);
    for a in log {
        t.log(a.addr, a.value);
    }
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::place::Pattern;

    #[test]
    fn lackey_lines_parse_and_lose_pointer_chasing() {
        let text = "==123== Lackey\nI  0023C790,2\n S BE80199C,4\n L be801950,8\n M 0025747C,4\n X 1,1\n L zz,4\n";
        let a = parse_lackey(text);
        assert_eq!(
            a.iter().map(|a| a.addr).collect::<Vec<_>>(),
            vec![0xBE80199C, 0xBE801950, 0x0025747C]
        );
        assert!(a.iter().all(|a| a.value == 0));
        let stores: Vec<bool> = parse_lackey_rw(text).iter().map(|a| a.1).collect();
        assert_eq!(stores, vec![true, false, true]);
        // A scan of 64 lines, then the same addresses with values stripped: streaming survives,
        // nothing is ever labelled pointer chasing.
        let log: String = (0..64u64)
            .map(|i| format!(" L {:x},8\n", 0x1000 + i * 64))
            .collect();
        let c = classify_log(&parse_lackey(&log), |_| Some(0));
        assert_eq!(c[&0].by_pattern, [0, 0, 64]);
    }

    #[test]
    fn a_cache_in_front_counts_only_what_reaches_memory() {
        // Region 0: 64 lines read over and over (cached); region 1: a stream of fresh lines.
        let region_of = |a: u64| Some((a >= 1 << 30) as usize);
        let run = |t: &mut Tracer<_>| {
            for i in 0..(64 * BUFFER as u64) {
                t.log((i % 64) * 64, 0);
                t.log((1 << 30) + i * 64, 0);
            }
        };
        let mut plain = Tracer::new(region_of);
        run(&mut plain);
        let plain = plain.finish();
        let mut filtered = Tracer::with_cache(region_of, Cache::new(64 << 10, 8));
        run(&mut filtered);
        let filtered = filtered.finish();
        // Without the model the small region counts a line per buffer, 64 lines x 128 buffers.
        assert_eq!(plain[&0].by_pattern.iter().sum::<u64>(), 64 * 128);
        // With it, only its first 64 misses; the stream misses every time, as streaming.
        assert_eq!(filtered[&0].by_pattern.iter().sum::<u64>(), 64);
        assert_eq!(
            filtered[&1].by_pattern[Pattern::Streaming as usize],
            64 * BUFFER as u64
        );
        assert_eq!(
            filtered[&1].by_pattern.iter().sum::<u64>(),
            64 * BUFFER as u64
        );
        assert_eq!(filtered[&0].writebacks + filtered[&1].writebacks, 0);
    }

    #[test]
    fn writebacks_are_counted_where_the_stored_line_lives() {
        // Region 0: 64 lines stored to once each, then a stream through region 1 (loads) that
        // evicts them all from a 16 KiB model: 64 writebacks, all region 0's.
        #[repr(align(64))]
        struct Line([u64; 8]);
        let mut lines: Vec<Line> = (0..64).map(|_| Line([0; 8])).collect();
        let base = lines.as_ptr() as u64;
        let stream = 1u64 << 47; // far from the heap
        let region_of = move |a: u64| {
            if (base..base + 64 * 64).contains(&a) {
                Some(0)
            } else {
                Some((a >= stream) as usize)
            }
        };
        let mut t = Tracer::with_cache(region_of, Cache::new(16 << 10, 4));
        let mut t2 = Tracer::with_cache(region_of, Cache::new(16 << 10, 4));
        for l in &mut lines {
            t2.store(&mut l.0[3], 1u64);
        }
        for i in 0..4096u64 {
            t2.log(stream + i * 64, 0);
        }
        let c = t2.finish();
        assert_eq!(c[&0].writebacks, 64);
        assert_eq!(c.get(&1).map_or(0, |c| c.writebacks), 0);
        // Loads alone write nothing back.
        for i in 0..4096u64 {
            t.log(stream + i * 64, 0);
        }
        assert!(t.finish().values().all(|c| c.writebacks == 0));
    }
}
