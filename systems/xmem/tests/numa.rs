//! NUMA plumbing: with `fast_node` set, DRAM regions are bound to that node (`mbind(MPOL_BIND)`),
//! also after a migration back from PM; PM regions keep the default policy. With `slow_node`
//! set, the slow tier is a NUMA node: slow regions are bound to it and regions move by
//! `mbind(MPOL_MF_MOVE)`.
//!
//! This machine has one NUMA node, so this checks the plumbing on node 0 only: the policy is
//! in place, pages land on node 0, bytes and addresses survive the moves and the accounting
//! holds. It cannot show pages moving between nodes (fast and slow node are both 0).

mod common;
use common::*;
use pmkit_xmem::{parked_writes, Config, Tier, XMem, XmemError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const MPOL_DEFAULT: i32 = 0;
const MPOL_BIND: i32 = 2;

fn config(dir: &std::path::Path, node: Option<u32>) -> Config {
    let mut cfg = Config::new(dir.join("pm.img"), 8 * MIB as u64, 2 * MIB as u64);
    cfg.region_size = 2 * MIB;
    cfg.reserve = 16 * MIB;
    cfg.fast_node = node;
    cfg
}

#[test]
fn dram_regions_are_bound_to_the_fast_node_on_node_0() {
    let nodes = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("node"))
                .count()
        })
        .unwrap_or(0);
    eprintln!("NUMA nodes here: {nodes} (plumbing on node 0 only)");
    let dir = pmkit_testkit::scratch();
    let x = XMem::new(config(dir.path(), Some(0))).unwrap();
    let t = x.tag("t").unwrap();
    let fast = x.alloc(t, 2 * MIB, 4096).unwrap();
    let slow = x.alloc(t, 2 * MIB, 4096).unwrap();
    fill(fast.as_ptr(), 4096, 1);
    fill(slow.as_ptr(), 4096, 2);
    assert_eq!(x.policy_of(fast).unwrap(), (MPOL_BIND, vec![0]));
    assert_eq!(x.node_of(fast).unwrap(), 0);
    assert_eq!(x.policy_of(slow).unwrap().0, MPOL_DEFAULT);
    // Swap them: the region coming back to DRAM is bound again, the one leaving is not.
    let (rf, rs) = (
        x.region_of(fast.as_ptr() as usize).unwrap(),
        x.region_of(slow.as_ptr() as usize).unwrap(),
    );
    x.move_region(rf, Tier::Slow).unwrap();
    x.move_region(rs, Tier::Fast).unwrap();
    assert_eq!(x.policy_of(slow).unwrap(), (MPOL_BIND, vec![0]));
    assert_eq!(x.node_of(slow).unwrap(), 0);
    assert_eq!(x.policy_of(fast).unwrap().0, MPOL_DEFAULT);
    assert!(holds(fast.as_ptr(), 4096, 1) && holds(slow.as_ptr(), 4096, 2));

    // Without fast_node, DRAM keeps the default policy.
    let dir2 = pmkit_testkit::scratch();
    let y = XMem::new(config(dir2.path(), None)).unwrap();
    let p = y.alloc(y.tag("t").unwrap(), 64, 8).unwrap();
    fill(p.as_ptr(), 64, 3);
    assert_eq!(y.policy_of(p).unwrap().0, MPOL_DEFAULT);
}

#[test]
fn a_missing_node_is_refused() {
    let dir = pmkit_testkit::scratch();
    assert!(matches!(
        XMem::new(config(dir.path(), Some(1000))),
        Err(XmemError::BadConfig(_))
    ));
}

fn node_tier(dir: &std::path::Path, slow_regions: usize) -> Config {
    let mut cfg = Config::new(
        dir.join("pm.img"),
        (slow_regions * 2 * MIB) as u64,
        2 * MIB as u64,
    );
    cfg.region_size = 2 * MIB;
    cfg.reserve = 16 * MIB;
    cfg.fast_node = Some(0);
    cfg.slow_node = Some(0);
    cfg
}

#[test]
fn a_numa_slow_tier_binds_regions_and_moves_them_by_mbind_on_node_0() {
    let dir = pmkit_testkit::scratch();
    let x = XMem::new(node_tier(dir.path(), 2)).unwrap();
    assert!(
        !dir.path().join("pm.img").exists(),
        "a NUMA slow tier makes no PM file"
    );
    let t = x.tag("t").unwrap();
    let fast = x.alloc(t, 2 * MIB, 4096).unwrap();
    let slow = x.alloc(t, 2 * MIB, 4096).unwrap();
    fill(fast.as_ptr(), 2 * MIB, 1);
    fill(slow.as_ptr(), 2 * MIB, 2);
    let (rf, rs) = (
        x.region_of(fast.as_ptr() as usize).unwrap(),
        x.region_of(slow.as_ptr() as usize).unwrap(),
    );
    let tier = |r| x.regions().iter().find(|i| i.index == r).unwrap().tier;
    assert_eq!((tier(rf), tier(rs)), (Tier::Fast, Tier::Slow));
    for p in [fast, slow] {
        assert_eq!(x.policy_of(p).unwrap(), (MPOL_BIND, vec![0]));
        assert_eq!(x.node_of(p).unwrap(), 0);
    }
    // The slow tier (2 regions) takes one more region, then is full: refused, the node named.
    let third = x.alloc(t, 2 * MIB, 4096).unwrap();
    let err = x.alloc(t, 2 * MIB, 4096).unwrap_err();
    assert!(
        matches!(&err, XmemError::PmFull { path, .. } if path.to_str() == Some("NUMA node 0")),
        "{err}"
    );
    // SAFETY: allocated above, freed once.
    unsafe { x.free(third) }.unwrap();

    // Swap the two regions ten times while a thread writes into one of them: the kernel moves
    // the pages (writers never reach X-Mem's fault handler) and every store lands.
    let parked = parked_writes();
    let stop = AtomicBool::new(false);
    let written = AtomicU64::new(0);
    let target = slow.as_ptr() as usize;
    const SLOTS: usize = 4096;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let slot = (target + (i as usize % SLOTS) * 512) as *mut u64;
                // SAFETY: inside the 2 MiB object, 8-byte aligned; only this thread writes it.
                unsafe { slot.write_volatile(i) };
                i += 1;
                written.store(i, Ordering::Relaxed);
            }
        });
        // The writer has filled every slot once, and stores between any two swaps (on a loaded
        // machine it may otherwise not run at all while the swaps, instant on one node, go by).
        while written.load(Ordering::Relaxed) < SLOTS as u64 {
            std::thread::yield_now();
        }
        for round in 0..10 {
            let seen = written.load(Ordering::Relaxed);
            while written.load(Ordering::Relaxed) == seen {
                std::thread::yield_now();
            }
            // Demote first (into the spare slow slot), then promote: the budget always holds.
            let (down, up) = if round % 2 == 0 { (rf, rs) } else { (rs, rf) };
            x.move_region(down, Tier::Slow).unwrap();
            x.move_region(up, Tier::Fast).unwrap();
            assert_eq!((tier(down), tier(up)), (Tier::Slow, Tier::Fast));
            for p in [fast, slow] {
                assert_eq!(x.policy_of(p).unwrap(), (MPOL_BIND, vec![0]));
            }
            x.check_invariants();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let n = written.load(Ordering::Relaxed);
    assert!(n >= SLOTS as u64, "the writer ran ({n} stores)");
    for k in 0..SLOTS {
        // The last store to slot k: the largest i < n with i % SLOTS == k.
        let last = n - 1 - ((n - 1 - k as u64) % SLOTS as u64);
        // SAFETY: as above.
        let v = unsafe { ((target + k * 512) as *const u64).read_volatile() };
        assert_eq!(v, last, "slot {k}");
    }
    assert_eq!(
        parked_writes(),
        parked,
        "no writer parked in X-Mem's handler"
    );
    assert!(holds(fast.as_ptr(), 2 * MIB, 1));
    x.check_invariants();
}

#[test]
fn a_numa_slow_tier_is_refused_without_a_fast_node_or_with_a_missing_node() {
    let dir = pmkit_testkit::scratch();
    let mut cfg = node_tier(dir.path(), 2);
    cfg.fast_node = None;
    let err = XMem::new(cfg).err().expect("refused");
    assert!(err.to_string().contains("needs fast_node"), "{err}");
    let mut cfg = node_tier(dir.path(), 2);
    cfg.slow_node = Some(1000);
    assert!(matches!(XMem::new(cfg), Err(XmemError::BadConfig(_))));
}

#[test]
fn rebalance_moves_regions_across_a_numa_slow_tier() {
    let dir = pmkit_testkit::scratch();
    let x = XMem::new(node_tier(dir.path(), 2)).unwrap();
    let (a, b) = (x.tag("a").unwrap(), x.tag("b").unwrap());
    let pa = x.alloc(a, MIB, 4096).unwrap();
    let pb = x.alloc(b, MIB, 4096).unwrap();
    fill(pa.as_ptr(), MIB, 5);
    fill(pb.as_ptr(), MIB, 6);
    // b is pointer-chased, a streamed: b belongs in DRAM.
    x.set_profile(a, [0.0, 0.0, 100.0]).unwrap();
    x.set_profile(b, [100.0, 0.0, 0.0]).unwrap();
    let moved = x.rebalance().unwrap();
    assert_eq!((moved.to_slow.len(), moved.to_fast.len()), (1, 1));
    let tier_of = |p: std::ptr::NonNull<u8>| {
        let r = x.region_of(p.as_ptr() as usize).unwrap();
        x.regions().iter().find(|i| i.index == r).unwrap().tier
    };
    assert_eq!((tier_of(pa), tier_of(pb)), (Tier::Slow, Tier::Fast));
    assert!(holds(pa.as_ptr(), MIB, 5) && holds(pb.as_ptr(), MIB, 6));
    assert_eq!(x.rebalance().unwrap().to_fast.len(), 0, "stable");
    x.check_invariants();
}
