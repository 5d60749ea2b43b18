//! Profiling end to end: three data structures built in X-Mem memory and walked through a
//! `Tracer` (a shuffled linked list, an array scan, random table lookups) get the thesis's
//! labels, roll up into per-tag profiles, and `rebalance` puts the pointer-chased list in DRAM.

mod common;
use common::*;
use pmkit_xmem::cache::Cache;
use pmkit_xmem::trace::Tracer;
use pmkit_xmem::{Pattern, Profile, Tier};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

#[repr(C)]
struct Node {
    next: *mut Node,
    pad: [u64; 7],
}

const ACCESSES: usize = 40_000;

#[test]
fn traced_structures_get_their_patterns_and_the_list_goes_to_dram() {
    let f = fixture(16, 16, 1);
    let x = &f.xmem;
    // Allocation order gives the array the one DRAM slot.
    let (array_t, list_t, table_t) = (
        x.tag("array").unwrap(),
        x.tag("list").unwrap(),
        x.tag("table").unwrap(),
    );
    let words = (3 * MIB / 2) / 8;
    let array = x.alloc(array_t, words * 8, 64).unwrap().as_ptr() as *mut u64;
    let nodes = (3 * MIB / 2) / 64;
    let list = x.alloc(list_t, nodes * 64, 64).unwrap().as_ptr() as *mut Node;
    let table = x.alloc(table_t, words * 8, 64).unwrap().as_ptr() as *mut u64;
    let mut rng = SmallRng::seed_from_u64(4);
    let mut order: Vec<usize> = (0..nodes).collect();
    order.shuffle(&mut rng);
    for i in 0..nodes {
        let next = if i + 1 < nodes {
            order[i + 1]
        } else {
            order[0]
        };
        // SAFETY: indices are inside the live allocations made above.
        unsafe {
            list.add(order[i]).write(Node {
                next: list.add(next),
                pad: [0; 7],
            });
            array.add(i % words).write(i as u64);
            table.add(i % words).write(i as u64);
        }
    }
    let mut tr = Tracer::new(|a| x.region_of(a as usize));
    let mut node = list.wrapping_add(order[0]);
    let mut sum = 0u64;
    for i in 0..ACCESSES {
        // SAFETY: every pointer below stays inside the live allocations; nothing else touches
        // them while the references live.
        unsafe {
            node = tr.load(&(*node).next);
            sum = sum.wrapping_add(tr.load(&*array.add(i % words)));
            sum = sum.wrapping_add(tr.load(&*table.add(rng.gen_range(0..words))));
        }
    }
    assert_ne!(sum, 0);
    assert_eq!(tr.logged(), 3 * ACCESSES as u64);
    let counts = tr.finish();
    let profiles = x.apply_profile(&counts).unwrap();
    let of = |t| profiles.iter().find(|p| p.0 == t).unwrap().1.f;
    let dominant = |f: [f64; 3]| {
        Pattern::ALL
            .into_iter()
            .max_by(|a, b| f[*a as usize].total_cmp(&f[*b as usize]))
            .unwrap()
    };
    assert_eq!(
        dominant(of(list_t)),
        Pattern::PointerChase,
        "{:?}",
        of(list_t)
    );
    assert_eq!(
        dominant(of(array_t)),
        Pattern::Streaming,
        "{:?}",
        of(array_t)
    );
    assert_eq!(dominant(of(table_t)), Pattern::Random, "{:?}", of(table_t));
    let before: Vec<_> = x
        .regions()
        .iter()
        .filter(|r| r.tier == Tier::Fast)
        .map(|r| r.tag)
        .collect();
    assert_eq!(before, vec![array_t]);
    x.rebalance().unwrap();
    let after: Vec<_> = x
        .regions()
        .iter()
        .filter(|r| r.tier == Tier::Fast)
        .map(|r| r.tag)
        .collect();
    assert_eq!(after, vec![list_t], "{:?}", x.regions());
    // The list still links up after its region moved.
    // SAFETY: as above.
    let n2 = unsafe { (*list.add(order[0])).next };
    assert_eq!(n2, list.wrapping_add(order[1]));
    x.check_invariants();
}

#[test]
fn profiles_are_saved_by_name_and_reused_by_a_later_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app.profile");
    {
        let f = fixture(8, 8, 1);
        let (a, b) = (f.xmem.tag("edges").unwrap(), f.xmem.tag("ranks").unwrap());
        f.xmem.set_profile(a, [0.0, 10.0, 500.0]).unwrap();
        f.xmem.set_profile(b, [300.0, 0.0, 0.0]).unwrap();
        f.xmem.set_writebacks(a, 7.5).unwrap();
        f.xmem.save_profiles(&file).unwrap();
    }
    // The next run makes its tags in another order; names carry the profiles over.
    let f = fixture(8, 8, 1);
    let x = &f.xmem;
    let ranks = x.tag("ranks").unwrap();
    assert_eq!(x.load_profiles(&file).unwrap(), 2);
    let edges = x.tag("edges").unwrap();
    assert_ne!(ranks.id(), 1, "tag ids differ from the first run");
    let p = x.profiles();
    assert_eq!(
        p[ranks.id() as usize],
        ("ranks".to_string(), Profile::reads([300.0, 0.0, 0.0]))
    );
    assert_eq!(
        p[edges.id() as usize],
        (
            "edges".to_string(),
            Profile {
                f: [0.0, 10.0, 500.0],
                writebacks: 7.5
            }
        )
    );
    // Loaded profiles drive placement: "ranks" displaces "edges" from the one DRAM slot.
    let e = x.alloc(edges, 2 * MIB, 8).unwrap();
    let r = x.alloc(ranks, 2 * MIB, 8).unwrap();
    let tier = |p: std::ptr::NonNull<u8>| {
        let i = x.region_of(p.as_ptr() as usize).unwrap();
        x.regions().iter().find(|r| r.index == i).unwrap().tier
    };
    assert_eq!((tier(e), tier(r)), (Tier::Slow, Tier::Fast));
    // A damaged file is refused and changes nothing.
    std::fs::write(&file, "not a profile\n").unwrap();
    assert!(x.load_profiles(&file).is_err());
    assert_eq!(x.profiles(), p);
    assert!(x.tag("bad\nname").is_err());
}

/// Which tag holds the one DRAM slot after profiling a written log and a read index through a
/// cache model and rebalancing, with `slow_write` ns per line written back to the slow tier.
fn written_or_read(slow_write: f64) -> (String, Profile, Profile) {
    let f = fixture_cfg(16, 16, 1, |c| c.latencies.slow_write = slow_write);
    let x = &f.xmem;
    let (log_t, index_t) = (x.tag("log").unwrap(), x.tag("index").unwrap());
    let words = (3 * MIB / 2) / 8;
    let log = x.alloc(log_t, words * 8, 64).unwrap().as_ptr() as *mut u64;
    let index = x.alloc(index_t, words * 8, 64).unwrap().as_ptr() as *mut u64;
    for i in 0..words {
        // SAFETY: `i` is inside the live allocation, which nothing else touches.
        unsafe { index.add(i).write(1) };
    }
    let mut rng = SmallRng::seed_from_u64(9);
    // A 256 KiB model: both structures miss it; every stored line is later evicted dirty.
    let mut tr = Tracer::with_cache(|a| x.region_of(a as usize), Cache::new(256 << 10, 8));
    let mut sum = 0u64;
    for i in 0..ACCESSES {
        // SAFETY: indices are inside the live allocations; no other reference to them lives.
        unsafe {
            tr.store(&mut *log.add(rng.gen_range(0..words)), i as u64);
            sum += tr.load(&*index.add(rng.gen_range(0..words)));
            sum += tr.load(&*index.add(rng.gen_range(0..words)));
        }
    }
    assert_eq!(sum, 2 * ACCESSES as u64);
    let profiles = x.apply_profile(&tr.finish()).unwrap();
    let of = |t| profiles.iter().find(|p| p.0 == t).unwrap().1;
    x.rebalance().unwrap();
    let fast: Vec<_> = x
        .regions()
        .iter()
        .filter(|r| r.tier == Tier::Fast)
        .map(|r| x.tag_name(r.tag).unwrap())
        .collect();
    assert_eq!(fast.len(), 1, "{:?}", x.regions());
    (fast[0].clone(), of(log_t), of(index_t))
}

#[test]
fn a_slow_write_cost_keeps_a_written_structure_in_dram() {
    // The thesis's model (no write cost): the index has twice the misses, it takes DRAM.
    let (fast, log, index) = written_or_read(0.0);
    assert_eq!(fast, "index");
    // The profile saw the log's writebacks (most of its stores) and none of the index's.
    assert!(
        log.writebacks > 0.5 * ACCESSES as f64 && log.writebacks <= ACCESSES as f64,
        "{log:?}"
    );
    assert_eq!(index.writebacks, 0.0, "{index:?}");
    // Writes that cost what an Optane line does: the log keeps DRAM.
    let (fast, ..) = written_or_read(111.0);
    assert_eq!(fast, "log");
}

#[test]
fn region_profiles_put_a_tag_s_hot_region_in_dram() {
    // One tag over three regions, read at random in its last region only; one DRAM slot.
    // The tag's average gives its three regions one benefit (the first one wins the tie);
    // their own profiles give the slot to the region the reads went to.
    let f = fixture(16, 16, 1);
    let x = &f.xmem;
    let t = x.tag("table").unwrap();
    // Three tables of 1.5 MiB: one region each.
    let words = (3 * MIB / 2) / 8;
    let tables: Vec<*mut u64> = (0..3)
        .map(|_| x.alloc(t, words * 8, 64).unwrap().as_ptr() as *mut u64)
        .collect();
    let table = tables[2];
    let mut rng = SmallRng::seed_from_u64(12);
    let mut tr = Tracer::with_cache(|a| x.region_of(a as usize), Cache::new(256 << 10, 8));
    let mut sum = 0u64;
    for _ in 0..ACCESSES {
        // SAFETY: the index is inside the live allocation, which nothing else touches.
        sum = sum.wrapping_add(unsafe { tr.load(&*table.add(rng.gen_range(0..words))) });
    }
    let _ = sum;
    let counts = tr.finish();
    let hot_region = x.region_of(table.wrapping_add(words - 1) as usize).unwrap();
    let fast = |x: &pmkit_xmem::XMem| -> Vec<usize> {
        x.regions()
            .iter()
            .filter(|r| r.tier == Tier::Fast)
            .map(|r| r.index)
            .collect()
    };
    x.apply_profile(&counts).unwrap();
    x.rebalance().unwrap();
    assert_ne!(
        fast(x),
        vec![hot_region],
        "the tag's average cannot tell its regions apart"
    );
    assert_eq!(x.apply_region_profiles(&counts).unwrap(), 3);
    x.rebalance().unwrap();
    assert_eq!(fast(x), vec![hot_region], "{:?}", x.regions());
    x.check_invariants();
}
