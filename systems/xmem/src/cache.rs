//! A set-associative LRU write-back cache of 64-byte lines: the filter that decides which traced
//! accesses reach memory, so only misses are charged the slow tier's latency (HMEP's simulator
//! and emulator) and only misses are profiled (the tracer's `with_cache`). A stored line is dirty
//! until it is evicted, and its eviction is the write that reaches memory (a writeback): what a
//! slow tier with slow writes charges for. Sized like this machine's last-level cache ([`llc`]);
//! one model per traced thread.

const LINE: usize = crate::classify::LINE as usize;

/// Most ways per set (a linear scan per access stays cheap).
pub const MAX_WAYS: usize = 64;

/// Marks a line dirty in [`Cache`]'s slots (line numbers are below 2^58).
const DIRTY: u64 = 1 << 63;
/// An empty slot.
const EMPTY: u64 = u64::MAX;

/// What one access did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touch {
    pub hit: bool,
    /// The address of the dirty line it evicted (written back to memory), if any.
    pub writeback: Option<u64>,
}

pub struct Cache {
    ways: usize,
    set_mask: u64,
    /// Per set, `ways` line numbers (with [`DIRTY`] set once stored to), most recent first.
    lines: Vec<u64>,
    pub hits: u64,
    pub misses: u64,
    pub writebacks: u64,
}

impl Cache {
    /// A cache of `bytes` (rounded down to a power-of-two number of sets) with `ways` ways.
    pub fn new(bytes: usize, ways: usize) -> Cache {
        assert!((1..=MAX_WAYS).contains(&ways), "1..={MAX_WAYS} ways");
        let sets = (bytes / LINE / ways).max(1);
        let sets = 1usize << sets.ilog2();
        Cache {
            ways,
            set_mask: sets as u64 - 1,
            lines: vec![EMPTY; sets * ways],
            hits: 0,
            misses: 0,
            writebacks: 0,
        }
    }

    pub fn bytes(&self) -> usize {
        self.lines.len() * LINE
    }

    /// Load from `addr`'s line: `true` on a hit. The line becomes the set's most recent.
    pub fn access(&mut self, addr: u64) -> bool {
        self.touch(addr, false).hit
    }

    /// Load from (or, when `store`, store to) `addr`'s line. The line becomes the set's most
    /// recent; a store leaves it dirty; a miss evicts the set's least recent line, and the
    /// eviction of a dirty one is a writeback.
    pub fn touch(&mut self, addr: u64, store: bool) -> Touch {
        let line = addr / LINE as u64;
        debug_assert_eq!(line & DIRTY, 0);
        let set = (line & self.set_mask) as usize;
        let ways = &mut self.lines[set * self.ways..(set + 1) * self.ways];
        let dirty = if store { DIRTY } else { 0 };
        let t = match ways.iter().position(|&l| l != EMPTY && l & !DIRTY == line) {
            Some(i) => {
                ways[..=i].rotate_right(1);
                ways[0] |= dirty;
                Touch {
                    hit: true,
                    writeback: None,
                }
            }
            None => {
                ways.rotate_right(1);
                let out = std::mem::replace(&mut ways[0], line | dirty);
                Touch {
                    hit: false,
                    writeback: (out != EMPTY && out & DIRTY != 0)
                        .then(|| (out & !DIRTY) * LINE as u64),
                }
            }
        };
        debug_assert_eq!(ways[0] & !DIRTY, line);
        if t.hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        self.writebacks += t.writeback.is_some() as u64;
        t
    }
}

/// This machine's last-level cache (bytes, ways) from sysfs; 32 MiB, 16 ways when unknown.
pub fn llc() -> (usize, usize) {
    let base = "/sys/devices/system/cpu/cpu0/cache";
    let mut best = (32 << 20, 16);
    let mut level = 0;
    for i in 0..8 {
        let read = |f: &str| std::fs::read_to_string(format!("{base}/index{i}/{f}")).ok();
        let (Some(l), Some(size), Some(ways)) =
            (read("level"), read("size"), read("ways_of_associativity"))
        else {
            continue;
        };
        let l: u32 = l.trim().parse().unwrap_or(0);
        let s = size.trim();
        let bytes = match s.strip_suffix('K') {
            Some(k) => k.parse::<usize>().unwrap_or(0) << 10,
            None => {
                s.strip_suffix('M')
                    .and_then(|m| m.parse::<usize>().ok())
                    .unwrap_or(0)
                    << 20
            }
        };
        let w: usize = ways.trim().parse().unwrap_or(0);
        if l > level && bytes > 0 && (1..=MAX_WAYS).contains(&w) {
            level = l;
            best = (bytes, w);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A fully associative LRU write-back cache as a list: the model the sets must match.
    struct Model {
        ways: usize,
        /// Per set, (line, dirty), most recent first.
        sets: Vec<Vec<(u64, bool)>>,
    }

    impl Model {
        fn touch(&mut self, addr: u64, store: bool) -> Touch {
            let line = addr / LINE as u64;
            let n = self.sets.len();
            let set = &mut self.sets[line as usize % n];
            if let Some(i) = set.iter().position(|e| e.0 == line) {
                let (l, d) = set.remove(i);
                set.insert(0, (l, d || store));
                return Touch {
                    hit: true,
                    writeback: None,
                };
            }
            set.insert(0, (line, store));
            let out = (set.len() > self.ways).then(|| set.pop().unwrap());
            Touch {
                hit: false,
                writeback: out.filter(|e| e.1).map(|e| e.0 * LINE as u64),
            }
        }
    }

    proptest! {
        /// Hits and writebacks agree with the model, access by access.
        #[test]
        fn matches_a_list_model(ops in proptest::collection::vec((0u64..64, any::<bool>()), 1..400),
                                ways in 1usize..5) {
            let mut c = Cache::new(4 * ways * LINE, ways);
            let sets = c.lines.len() / ways;
            let mut m = Model { ways, sets: vec![vec![]; sets] };
            let mut writebacks = 0;
            for &(line, store) in &ops {
                let addr = line * LINE as u64 + line % 7;
                let t = m.touch(addr, store);
                writebacks += t.writeback.is_some() as u64;
                prop_assert_eq!(c.touch(addr, store), t);
            }
            prop_assert_eq!(c.hits + c.misses, ops.len() as u64);
            prop_assert_eq!(c.writebacks, writebacks);
        }
    }

    #[test]
    fn a_stored_line_is_written_back_once_when_evicted() {
        // One set of two ways.
        let mut c = Cache::new(2 * LINE, 2);
        let a = 0u64;
        let (b, d) = (LINE as u64, 2 * LINE as u64);
        assert!(!c.touch(a, true).hit);
        assert!(c.touch(a, false).hit, "a load keeps the line dirty");
        c.touch(b, false);
        // Evicting the dirty line writes it back; evicting the clean one does not.
        assert_eq!(c.touch(d, false).writeback, Some(a));
        assert_eq!(c.touch(a, false).writeback, None);
        assert_eq!(c.writebacks, 1);
    }
}
