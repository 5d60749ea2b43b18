//! Golden outputs of the simulator on small synthetic traces.

use super::*;
use crate::tlb::{Level, Levels};

/// Small TLBs (16-entry L1, 256-entry 8-way L2 for both page sizes) so short traces exceed the
/// 4 KiB reach (1 MiB) but not the 2 MiB one (512 MiB).
fn small_tlb() -> Geometry {
    let l = Levels {
        l1: Level {
            entries: 16,
            ways: 16,
        },
        l2: Level {
            entries: 256,
            ways: 8,
        },
    };
    Geometry {
        k4: l,
        m2: l,
        source: "test".into(),
    }
}

#[test]
fn a_4k_stride_walks_every_access_on_4k_pages_and_twice_on_2m() {
    // A cache that holds all 1024 lines (each page's line at a different offset, so they spread
    // over 64 sets of 64 ways): after the first lap every access hits, so every 4 KiB walk
    // after it is a walk on a hit.
    let mut sim = Sim::with_tlb(Cache::new(1 << 20, 64), 1, small_tlb());
    let base = 1u64 << 32;
    for _lap in 0..3 {
        for p in 0..1024u64 {
            sim.access(0, base + (p << 12) + (p % 64) * 64, 0);
        }
    }
    let m = sim.finish();
    let u = &m.units[0];
    assert_eq!(u.accesses, 3072);
    assert_eq!(u.walks_4k, 3072);
    assert_eq!(u.walks_2m, 2); // 4 MiB from a 2 MiB-aligned base: two huge pages
    assert_eq!(u.misses.iter().sum::<u64>(), 1024); // the first lap only
    assert_eq!(u.walks_4k_on_hits, 2048);
    assert_eq!(u.walks_2m_on_hits, 0);
    assert_eq!(u.extra_walks(), 2048.0);
    // Addresses from a loop, not from loaded values: none of the walks is dependent.
    assert_eq!(u.dependent_walks_4k_on_hits, 0);
    assert_eq!(u.extra_independent_walks(), 2048.0);
    assert_eq!(u.l1_tlb_misses_4k_on_hits, 2048);
    assert_eq!(u.l1_tlb_misses_2m_on_hits, 0);
    assert_eq!(m.pages.len(), 1024);
    assert!(m.pages.values().all(|p| p.accesses == 3 && p.walks_4k == 3));
}

#[test]
fn walks_in_front_of_a_chase_are_dependent_ones() {
    // The same 1024 lines as above, but each load's value is the next line's address (a
    // pointer chase in a shuffled page order, as the classifier needs to see a chase): after
    // the cold lap the walks on hits are dependent ones.
    let mut sim = Sim::with_tlb(Cache::new(1 << 20, 64), 1, small_tlb());
    let base = 1u64 << 32;
    let page = |i: u64| (i * 389) % 1024; // 389 is prime to 1024: a permutation
    let at = |i: u64| base + (page(i % 1024) << 12) + (page(i % 1024) % 64) * 64;
    for i in 0..3 * 1024u64 {
        sim.access(0, at(i), at(i + 1));
    }
    let u = sim.finish().units[0];
    assert_eq!(u.walks_4k_on_hits, 2048);
    assert!(
        u.dependent_walks_4k_on_hits > 2000,
        "{} of 2048 walks on hits counted dependent",
        u.dependent_walks_4k_on_hits
    );
    assert_eq!(u.dependent_walks_2m_on_hits, 0);
    assert!(u.extra_dependent_walks() > 2000.0);
    assert!(u.extra_independent_walks() < 48.0);
}

#[test]
fn per_unit_counts_add_up_and_group_into_regions() {
    let mut sim = Sim::with_tlb(Cache::new(64 << 10, 4), 2, small_tlb());
    let a = 1u64 << 40; // structure 0: 8 pages in the first 2 MiB region
    let b = a + (2 << 20); // structure 1: 4 pages in the next one
    for i in 0..8u64 {
        for w in 0..4u64 {
            sim.access_rw(0, a + (i << 12) + w * 64, 0, w == 0);
        }
    }
    for i in 0..4u64 {
        sim.access_rw(1, b + (i << 12), 0, true);
    }
    let m = sim.finish();
    assert_eq!(m.units[0].accesses, 32);
    assert_eq!(m.units[0].stores, 8);
    assert_eq!(m.units[1].accesses, 4);
    assert_eq!(m.units[1].stores, 4);
    assert_eq!(m.accesses, vec![32, 4]);
    // Every line is classified once per buffer (each is touched once here), and misses are a
    // subset.
    for u in &m.units {
        assert_eq!(u.classified.iter().sum::<u64>(), u.accesses);
        assert!(u.misses.iter().sum::<u64>() <= u.accesses);
    }
    // Each line is new: every access misses the cold cache.
    assert_eq!(m.units[0].misses.iter().sum::<u64>(), 32);
    assert_eq!(m.pages.len(), 12);
    let regions = m.group_pages(PAGE_2M);
    assert_eq!(regions.len(), 2);
    let ra = &regions[&(a >> 21)];
    let rb = &regions[&(b >> 21)];
    assert_eq!((ra.structure, ra.accesses, ra.stores), (0, 32, 8));
    assert_eq!((rb.structure, rb.accesses, rb.stores), (1, 4, 4));
    assert_eq!(ra.walks_4k, 8); // one per page, in reach
    assert_eq!(ra.walks_2m, 1);
}

#[test]
fn a_line_is_classified_once_per_buffer() {
    let mut sim = Sim::with_tlb(Cache::new(64 << 10, 4), 1, small_tlb());
    // 100 lines, each touched 4 times in one buffer: 400 accesses, 100 classified.
    for _ in 0..4 {
        for l in 0..100u64 {
            sim.access(0, (1 << 30) + l * 64 * 3, 0);
        }
    }
    let m = sim.finish();
    assert_eq!(m.units[0].accesses, 400);
    assert_eq!(m.units[0].classified.iter().sum::<u64>(), 100);
}

#[test]
fn predictions_charge_misses_and_walks_of_slow_structures_only() {
    let mut m = Misses {
        misses: vec![[10, 100, 1000], [1, 1, 1]],
        accesses: vec![0, 0],
        units: vec![Unit::default(); 2],
        ..Misses::default()
    };
    m.units[0].misses = [10, 100, 1000];
    m.units[0].walks_4k_on_hits = 50;
    m.units[0].walks_2m_on_hits = 10;
    // Of those, in front of chase loads: 20 at 4 KiB, 5 at 2 MiB.
    m.units[0].dependent_walks_4k_on_hits = 20;
    m.units[0].dependent_walks_2m_on_hits = 5;
    // L1 dTLB misses on hits: 50 walks + 30 L2 hits at 4 KiB, 10 walks + 0 at 2 MiB.
    m.units[0].l1_tlb_misses_4k_on_hits = 80;
    m.units[0].l1_tlb_misses_2m_on_hits = 10;
    m.units[1].misses = [1, 1, 1];
    let d = [80.0, 2.0, 1.0];
    let tlb = TlbCost {
        walk_ns: 5.0,
        walk_independent_ns: 2.0,
        l1_ns: 1.0,
    };
    // 10·80 + 100·2 + 1000·1 = 2000; dependent walks (20 − 5) · 5 = 75, the others
    // (30 − 5) · 2 = 50; L2 hits (30 − 0) · 1 = 30.
    assert_eq!(m.units[0].extra_dependent_walks(), 15.0);
    assert_eq!(m.units[0].extra_independent_walks(), 25.0);
    assert_eq!(m.units[0].extra_l2_tlb_hits(), 30.0);
    assert_eq!(predict(0.0, &m, &[true, false], &d, 1.0), 2000.0);
    assert_eq!(predict_tlb(0.0, &m, &[true, false], &d, &tlb, 1.0), 2155.0);
    assert_eq!(predict_tlb(7.0, &m, &[false, false], &d, &tlb, 3.0), 7.0);
    assert_eq!(
        predict_tlb(0.0, &m, &[true, true], &d, &tlb, 2.0),
        2.0 * (2155.0 + 83.0)
    );
}

#[test]
fn pages_beyond_the_bound_are_counted_as_overflow() {
    let mut sim = Sim::with_tlb(Cache::new(64 << 10, 4), 1, small_tlb());
    sim.limit_pages(10);
    for p in 0..15u64 {
        sim.access(0, p << 12, 0);
        sim.access(0, p << 12, 0);
    }
    let m = sim.finish();
    assert_eq!(m.pages.len(), 10);
    assert_eq!(m.overflow.accesses, 10);
    assert_eq!(m.units[0].accesses, 30);
}

#[test]
fn windows_count_misses_and_lines_written_back_per_structure() {
    let mut sim = Sim::with_tlb(Cache::new(64 << 10, 4), 2, small_tlb());
    let base = 1u64 << 40;
    // One window: structure 0 stores twice to each of 10 lines (misses once each), structure
    // 1 loads 5 lines twice. The cache holds them all: nothing is written back.
    for i in 0..10u64 {
        sim.access_rw(0, base + i * 64, 0, true);
        sim.access_rw(0, base + i * 64 + 8, 0, true);
    }
    for _ in 0..2 {
        for i in 0..5u64 {
            sim.access(1, base + (1 << 20) + i * 64, 0);
        }
    }
    // Fill the window with hits; the next one streams structure 1 through 2,048 fresh lines
    // (twice the cache), evicting structure 0's ten dirty lines: written back in that window,
    // under structure 0, in order.
    for i in 0..(BUFFER as u64 - 30) {
        sim.access(1, base + (1 << 20) + (i % 5) * 64, 0);
    }
    for i in 0..2048u64 {
        sim.access(1, base + (2 << 20) + i * 64, 0);
    }
    let m = sim.finish();
    let w = &m.windows;
    assert_eq!(w.len(), 2);
    assert_eq!(w.accesses, vec![BUFFER as u32, 2048]);
    // Ten lines in a row: streaming misses.
    assert_eq!(&w.stream_misses[..2], &[10, 0]);
    assert_eq!(w.misses[1] + w.stream_misses[1], 5);
    // Stored to twice each, written back once each, and not in the window that stored them.
    assert_eq!(&w.written_seq_lines[..2], &[0, 0]);
    assert_eq!(&w.written_lines[..2], &[0, 0]);
    assert_eq!(&w.written_seq_lines[2..], &[10, 0]);
    assert_eq!(&w.written_lines[2..], &[0, 0]);
    assert_eq!(m.units[0].writebacks, 10);
    assert_eq!(m.units[0].stores, 20);
    assert_eq!(w.misses[3] + w.stream_misses[3], 2048);
}

#[test]
fn writebacks_go_to_the_unit_and_page_of_the_line_written() {
    // A 16 KiB model (256 lines): structure 0 stores to 100 lines of one page-spread range,
    // structure 1 then streams 4,096 lines past them, evicting every one: 100 writebacks, all
    // structure 0's, and each on the page it stored to. Structure 1 loaded only: none.
    let mut sim = Sim::with_tlb(Cache::new(16 << 10, 4), 2, small_tlb());
    let a = 1u64 << 40;
    let b = a + (64 << 20);
    for i in 0..100u64 {
        sim.access_rw(0, a + (i << 12) + (i % 64) * 64, 0, true);
    }
    for i in 0..4096u64 {
        sim.access(1, b + i * 64, 0);
    }
    let m = sim.finish();
    assert_eq!(m.units[0].writebacks, 100);
    assert_eq!(m.units[1].writebacks, 0);
    assert_eq!(m.units[0].stores, 100);
    for i in 0..100u64 {
        assert_eq!(m.pages[&((a >> 12) + i)].writebacks, 1, "page {i}");
    }
    assert_eq!(m.pages.values().map(|p| p.writebacks).sum::<u64>(), 100);
    // Stores the cache still holds are not written back.
    let mut sim = Sim::with_tlb(Cache::new(16 << 10, 4), 1, small_tlb());
    for i in 0..100u64 {
        sim.access_rw(0, a + i * 64, 0, true);
    }
    assert_eq!(sim.finish().units[0].writebacks, 0);
}
