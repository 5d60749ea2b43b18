//! A set-associative LRU cache of 64-byte lines: the filter that decides which traced accesses
//! reach memory, so only misses are charged the slow tier's latency (HMEP's simulator and
//! emulator) and only misses are profiled (the tracer's `with_cache`). Sized like
//! this machine's last-level cache ([`llc`]); one model per traced thread.

const LINE: usize = crate::classify::LINE as usize;

/// Most ways per set (a linear scan per access stays cheap).
pub const MAX_WAYS: usize = 64;

pub struct Cache {
    ways: usize,
    set_mask: u64,
    /// Per set, `ways` line numbers, most recent first; `u64::MAX` is empty.
    lines: Vec<u64>,
    pub hits: u64,
    pub misses: u64,
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
            lines: vec![u64::MAX; sets * ways],
            hits: 0,
            misses: 0,
        }
    }

    pub fn bytes(&self) -> usize {
        self.lines.len() * LINE
    }

    /// Touch `addr`'s line: `true` on a hit. The line becomes the set's most recent.
    pub fn access(&mut self, addr: u64) -> bool {
        let line = addr / LINE as u64;
        let set = (line & self.set_mask) as usize;
        let ways = &mut self.lines[set * self.ways..(set + 1) * self.ways];
        let hit = match ways.iter().position(|&l| l == line) {
            Some(i) => {
                ways[..=i].rotate_right(1);
                true
            }
            None => {
                ways.rotate_right(1);
                ways[0] = line;
                false
            }
        };
        debug_assert_eq!(ways[0], line);
        if hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        hit
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
