//! A data TLB model: an L1 dTLB in front of a shared L2 TLB (STLB), each set-associative LRU over
//! page numbers, for one page size. An access that misses both levels is a page walk. The trace
//! simulator runs one model per page size side by side (4 KiB: the slow tier's /dev/shm file;
//! 2 MiB: the fast tier's transparent huge pages), because a structure's page size depends on
//! the tier a placement puts it on.
//!
//! Sizes come from this CPU where it says them ([`Geometry::host`]: CPUID leaves 0x80000005 and
//! 0x80000006 on AMD), else [`Geometry::default`]: AMD Zen 4's figures from the "Software
//! Optimization Guide for AMD Family 19h Processors" (AMD, 2023): L1 dTLB 72 entries fully
//! associative for every page size, L2 dTLB 3072 entries, 4 KiB entries 8-way, 2 MiB 6-way.
//! Intel's leaf 0x18 is not decoded (its sub-leaves list TLBs of mixed page sizes): Intel CPUs
//! get the defaults, and the geometry's `source` says so.

use serde::{Deserialize, Serialize};

/// Most ways per set (a linear scan per access; a fully associative 72-entry L1 fits).
pub const MAX_WAYS: usize = 128;
pub const PAGE_4K: u32 = 12;
pub const PAGE_2M: u32 = 21;

/// One TLB level: entries and ways (ways = entries: fully associative).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Level {
    pub entries: usize,
    pub ways: usize,
}

/// Both levels, for one page size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Levels {
    pub l1: Level,
    pub l2: Level,
}

/// The TLB of a CPU for 4 KiB and 2 MiB pages, and where the numbers come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    pub k4: Levels,
    pub m2: Levels,
    pub source: String,
}

impl Default for Geometry {
    fn default() -> Geometry {
        let l1 = Level {
            entries: 72,
            ways: 72,
        };
        Geometry {
            k4: Levels {
                l1,
                l2: Level {
                    entries: 3072,
                    ways: 8,
                },
            },
            m2: Levels {
                l1,
                l2: Level {
                    entries: 3072,
                    ways: 6,
                },
            },
            source: "defaults (AMD Zen 4, Software Optimization Guide for AMD Family 19h)".into(),
        }
    }
}

/// Ways of an AMD L2 TLB associativity code (CPUID 0x80000006); `None` when reserved.
fn amd_l2_ways(code: u32, entries: usize) -> Option<usize> {
    Some(match code {
        1 => 1,
        2 => 2,
        3 => 3,
        4 => 4,
        5 => 6,
        6 => 8,
        8 => 16,
        0xa => 32,
        0xb => 48,
        0xc => 64,
        0xd => 96,
        0xe => 128,
        0xf => entries,
        _ => return None,
    })
}

impl Geometry {
    /// This CPU's data TLBs where CPUID gives them (AMD), else the defaults.
    pub fn host() -> Geometry {
        Geometry::from_cpuid().unwrap_or_default()
    }

    #[cfg(target_arch = "x86_64")]
    fn from_cpuid() -> Option<Geometry> {
        use std::arch::x86_64::__cpuid;
        let v = __cpuid(0);
        let vendor: Vec<u8> = [v.ebx, v.edx, v.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        if &vendor[..] != b"AuthenticAMD" || __cpuid(0x8000_0000).eax < 0x8000_0006 {
            return None;
        }
        let (l1, l2) = (__cpuid(0x8000_0005), __cpuid(0x8000_0006));
        // L1: bits 31:24 associativity (0xff fully), 23:16 dTLB entries; EAX 2 MiB, EBX 4 KiB.
        let l1_level = |r: u32| {
            let entries = ((r >> 16) & 0xff) as usize;
            let a = (r >> 24) as usize;
            let ways = if a == 0xff { entries } else { a };
            (entries > 0 && ways > 0).then_some(Level { entries, ways })
        };
        // L2: bits 31:28 associativity code, 27:16 dTLB entries.
        let l2_level = |r: u32| {
            let entries = ((r >> 16) & 0xfff) as usize;
            let ways = amd_l2_ways(r >> 28, entries)?;
            (entries > 0).then_some(Level { entries, ways })
        };
        // An L2 no larger than twice the L1 is not a real second level: a Zen 5 VM here reports
        // 128 entries, yet a chase over 512 pages costs no more on 4 KiB than on 2 MiB pages
        // (`pmkit hmep calibrate`'s L1 chase). Such an L2 takes the defaults.
        let d = Geometry::default();
        let mut source = "CPUID 0x80000005/0x80000006 (AMD)".to_string();
        let mut l2_or = |l1: Level, r: u32, default: Level| -> Option<Level> {
            let l2 = l2_level(r)?;
            if l2.entries > 2 * l1.entries {
                return Some(l2);
            }
            source = format!(
                "CPUID 0x80000005 (AMD) for the L1; the L2 from the defaults (AMD Zen 4), as \
                 CPUID 0x80000006's {} entries are no larger than the L1",
                l2.entries
            );
            Some(default)
        };
        let (k4_l1, m2_l1) = (l1_level(l1.ebx)?, l1_level(l1.eax)?);
        let k4_l2 = l2_or(k4_l1, l2.ebx, d.k4.l2)?;
        let m2_l2 = l2_or(m2_l1, l2.eax, d.m2.l2)?;
        let g = Geometry {
            k4: Levels {
                l1: k4_l1,
                l2: k4_l2,
            },
            m2: Levels {
                l1: m2_l1,
                l2: m2_l2,
            },
            source,
        };
        let ok = |l: &Level| l.ways <= MAX_WAYS && l.ways <= l.entries;
        [g.k4.l1, g.k4.l2, g.m2.l1, g.m2.l2]
            .iter()
            .all(ok)
            .then_some(g)
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn from_cpuid() -> Option<Geometry> {
        None
    }

    /// The levels for pages of `1 << shift` bytes.
    pub fn levels(&self, shift: u32) -> Levels {
        if shift >= PAGE_2M {
            self.m2
        } else {
            self.k4
        }
    }
}

/// One set-associative LRU array of page numbers (any number of sets: TLBs are not all powers
/// of two).
struct Array {
    ways: usize,
    sets: u64,
    /// Per set, `ways` page numbers, most recent first; `u64::MAX` is empty.
    pages: Vec<u64>,
}

impl Array {
    fn new(l: Level) -> Array {
        assert!(
            (1..=MAX_WAYS).contains(&l.ways) && l.ways <= l.entries,
            "{l:?}: 1..={MAX_WAYS} ways, no more than the entries"
        );
        let sets = l.entries / l.ways;
        Array {
            ways: l.ways,
            sets: sets as u64,
            pages: vec![u64::MAX; sets * l.ways],
        }
    }

    fn access(&mut self, page: u64) -> bool {
        let set = (page % self.sets) as usize;
        let ways = &mut self.pages[set * self.ways..(set + 1) * self.ways];
        match ways.iter().position(|&p| p == page) {
            Some(i) => {
                ways[..=i].rotate_right(1);
                true
            }
            None => {
                ways.rotate_right(1);
                ways[0] = page;
                false
            }
        }
    }
}

/// What translation costs a slow tier beyond a fast one in front of a cache hit (a miss's
/// translation is inside ΔL): ns per page walk, and ns per L1 dTLB miss that hits the L2 TLB.
/// Calibrated by `calib::tlb_cost`; [`TlbCost::NONE`] where both tiers use the same pages.
///
/// A walk costs its whole latency only in front of a load whose address the load before it
/// gave (a chase); in front of independent loads the CPU runs several walks at once and
/// overlaps them with other work, so those walks have their own, much lower price.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct TlbCost {
    /// ns per walk in front of a dependent (chase) load.
    pub walk_ns: f64,
    /// ns per walk in front of an independent (random or streaming) load.
    pub walk_independent_ns: f64,
    pub l1_ns: f64,
}

impl TlbCost {
    pub const NONE: TlbCost = TlbCost {
        walk_ns: 0.0,
        walk_independent_ns: 0.0,
        l1_ns: 0.0,
    };

    /// The price of `dependent` and `independent` extra walks and `l2_hits` extra L2 TLB hits.
    pub fn of(&self, dependent: f64, independent: f64, l2_hits: f64) -> f64 {
        dependent * self.walk_ns + independent * self.walk_independent_ns + l2_hits * self.l1_ns
    }
}

/// A two-level data TLB for pages of `1 << shift` bytes.
pub struct Tlb {
    shift: u32,
    l1: Array,
    l2: Array,
    pub accesses: u64,
    /// Accesses that missed the L1 dTLB (walks included), and the last access's outcome.
    pub l1_misses: u64,
    pub last_l1_miss: bool,
    pub walks: u64,
}

impl Tlb {
    pub fn new(g: &Geometry, shift: u32) -> Tlb {
        assert!((PAGE_4K..=30).contains(&shift), "page shift {shift}");
        let l = g.levels(shift);
        Tlb {
            shift,
            l1: Array::new(l.l1),
            l2: Array::new(l.l2),
            accesses: 0,
            l1_misses: 0,
            last_l1_miss: false,
            walks: 0,
        }
    }

    /// Translate `addr`: `true` when it needed a page walk (missed both levels). Both levels
    /// are filled on a walk, the L1 on an L2 hit.
    #[inline]
    pub fn access(&mut self, addr: u64) -> bool {
        let page = addr >> self.shift;
        self.accesses += 1;
        self.last_l1_miss = false;
        if self.l1.access(page) {
            return false;
        }
        self.l1_misses += 1;
        self.last_l1_miss = true;
        if self.l2.access(page) {
            return false;
        }
        self.walks += 1;
        true
    }

    /// Entries times page size: the bytes the L2 maps.
    pub fn reach(&self) -> u64 {
        (self.l2.sets * self.l2.ways as u64) << self.shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_4k_stride_over_1024_pages_walks_every_time_on_4k_almost_never_on_2m() {
        // Small TLBs so 1024 pages exceed the 4 KiB reach many times over.
        let g = Geometry {
            k4: Levels {
                l1: Level {
                    entries: 16,
                    ways: 16,
                },
                l2: Level {
                    entries: 256,
                    ways: 8,
                },
            },
            m2: Levels {
                l1: Level {
                    entries: 16,
                    ways: 16,
                },
                l2: Level {
                    entries: 256,
                    ways: 8,
                },
            },
            source: "test".into(),
        };
        let (mut k4, mut m2) = (Tlb::new(&g, PAGE_4K), Tlb::new(&g, PAGE_2M));
        for _lap in 0..4 {
            for p in 0..1024u64 {
                k4.access(p << 12);
                m2.access(p << 12);
            }
        }
        // LRU over a cycle longer than the reach misses every access.
        assert_eq!(k4.walks, 4096);
        assert_eq!(k4.l1_misses, 4096);
        assert_eq!(m2.l1_misses, 2);
        // 4 MiB is two huge pages: two cold walks.
        assert_eq!(m2.walks, 2);
        assert_eq!(k4.reach(), 1 << 20);
    }

    #[test]
    fn a_working_set_inside_the_reach_walks_once_per_page() {
        let g = Geometry::default();
        let mut t = Tlb::new(&g, PAGE_4K);
        for _ in 0..10 {
            for p in 0..1000u64 {
                t.access(p << 12 | 8);
            }
        }
        assert_eq!(t.walks, 1000);
        assert_eq!(t.accesses, 10_000);
        // 1000 pages cycle through the 72-entry L1 and hit the L2 after the first lap.
        assert_eq!(t.l1_misses, 10_000);
    }

    #[test]
    fn amd_codes_decode() {
        assert_eq!(amd_l2_ways(6, 3072), Some(8));
        assert_eq!(amd_l2_ways(5, 3072), Some(6));
        assert_eq!(amd_l2_ways(0xf, 64), Some(64));
        assert_eq!(amd_l2_ways(9, 64), None);
        let h = Geometry::host();
        assert!(h.k4.l2.entries >= h.k4.l1.entries / 2, "{h:?}");
    }
}
