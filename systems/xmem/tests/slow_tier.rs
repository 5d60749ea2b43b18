//! The slow tier holds what is moved there, on each kind of PM X-Mem maps: a PM file (here one in
//! /dev/shm), and a device-dax device when one is named by `PMKIT_TEST_DEVDAX` (the guest stage,
//! `scripts/vm/test.sh`, sets it to its emulated NVDIMM's `/dev/dax0.0`). Every region moves to
//! the slow tier and back with its bytes and addresses, and the device is never removed.

mod common;
use common::*;
use pmkit_xmem::{Config, Tier, XMem};

/// Allocate on `x`, move every region to the slow tier and back, and check every byte each way.
fn round_trip(x: &XMem) {
    let t = x.tag("data").unwrap();
    let objs: Vec<(*mut u8, u8)> = (0..6u8)
        .map(|k| {
            let p = x.alloc(t, MIB, 4096).unwrap().as_ptr();
            fill(p, MIB, k);
            (p, k)
        })
        .collect();
    let regions: Vec<usize> = x.regions().iter().map(|r| r.index).collect();
    assert!(!regions.is_empty());
    for to in [Tier::Slow, Tier::Fast, Tier::Slow] {
        for &r in &regions {
            x.move_region(r, to).unwrap();
        }
        x.check_invariants();
        for &(p, k) in &objs {
            assert!(holds(p, MIB, k), "object {k} after a move to {to:?}");
        }
    }
}

#[test]
fn a_pm_file_slow_tier_keeps_what_moves_there() {
    let f = fixture(8, 8, 8);
    round_trip(&f.xmem);
}

#[test]
fn a_device_dax_slow_tier_keeps_what_moves_there() {
    let Some(dev) = std::env::var_os("PMKIT_TEST_DEVDAX") else {
        // Only the guest stage has a device-dax device; CI runs this test there.
        eprintln!("skipped: no PMKIT_TEST_DEVDAX (scripts/vm/test.sh sets it in its guest)");
        return;
    };
    let mut cfg = Config::new(&dev, 16 * MIB as u64, 16 * MIB as u64);
    cfg.region_size = 2 * MIB;
    cfg.reserve = 16 * MIB;
    let x = XMem::new(cfg).unwrap();
    round_trip(&x);
    drop(x);
    assert!(
        std::fs::metadata(&dev).is_ok(),
        "the device stays: X-Mem never removes a device-dax device"
    );
}
