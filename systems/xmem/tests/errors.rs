//! Bad input gets a typed error and changes nothing.

mod common;
use common::*;
use pmkit_xmem::{Config, XMem, XmemError};

#[test]
fn unknown_tag_is_refused() {
    let a = fixture(8, 8, 1);
    let b = fixture(8, 8, 1);
    a.xmem.tag("x").unwrap();
    let t = a.xmem.tag("y").unwrap(); // id 1: b has no tag 1
    b.xmem.tag("only").unwrap();
    assert!(matches!(
        b.xmem.alloc(t, 64, 8),
        Err(XmemError::UnknownTag(1))
    ));
    assert!(matches!(
        b.xmem.set_priority(t, 3),
        Err(XmemError::UnknownTag(1))
    ));
    assert!(matches!(
        b.xmem.set_profile(t, [1.0; 3]),
        Err(XmemError::UnknownTag(1))
    ));
    assert!(b.xmem.regions().is_empty());
    // The same name gives the same tag.
    assert_eq!(a.xmem.tag("y").unwrap(), t);
}

#[test]
fn budget_larger_than_memory_is_refused() {
    let dir = pmkit_testkit::scratch();
    let mut cfg = Config::new(dir.path().join("pm.img"), 64 << 20, 1 << 50);
    cfg.reserve = 1 << 46; // 64 TiB of address space: 1M regions of 64 MiB is over the limit
    assert!(matches!(
        XMem::new(cfg.clone()),
        Err(XmemError::BadConfig(_))
    ));
    cfg.reserve = 1 << 42; // 65536 regions of 64 MiB: allowed
    match XMem::new(cfg) {
        Err(XmemError::BudgetTooLarge { what, .. }) => assert_eq!(what, "physical memory"),
        other => panic!("expected BudgetTooLarge, got {:?}", other.err()),
    }
    assert!(!dir.path().join("pm.img").exists(), "nothing left behind");
    let mut cfg = Config::new(dir.path().join("pm.img"), 64 << 20, 256 << 20);
    cfg.reserve = 128 << 20;
    assert!(matches!(
        XMem::new(cfg),
        Err(XmemError::BudgetTooLarge {
            what: "the reservation",
            ..
        })
    ));
}

#[test]
fn foreign_and_double_frees_are_refused() {
    let f = fixture(8, 8, 2);
    let x = &f.xmem;
    let t = x.tag("t").unwrap();
    let a = x.alloc(t, 100, 8).unwrap();
    let big = x.alloc(t, 20_000, 8).unwrap();
    fill(a.as_ptr(), 100, 7);
    fill(big.as_ptr(), 20_000, 9);
    let mut local = 0u64;
    let stack = std::ptr::NonNull::from(&mut local).cast::<u8>();
    let heap = Box::into_raw(Box::new(0u64));
    // SAFETY: each free below is refused before anything is touched; `heap` is freed once.
    unsafe {
        assert!(matches!(x.free(stack), Err(XmemError::ForeignPointer(_))));
        let h = std::ptr::NonNull::new(heap).unwrap().cast();
        assert!(matches!(x.free(h), Err(XmemError::ForeignPointer(_))));
        let inner = std::ptr::NonNull::new(a.as_ptr().add(16)).unwrap();
        assert!(matches!(x.free(inner), Err(XmemError::ForeignPointer(_))));
        let tail = std::ptr::NonNull::new(big.as_ptr().add(4096)).unwrap();
        assert!(matches!(x.free(tail), Err(XmemError::ForeignPointer(_))));
        // An address in a region not in use.
        let unused = std::ptr::NonNull::new(big.as_ptr().add(6 * MIB)).unwrap();
        assert!(matches!(x.free(unused), Err(XmemError::ForeignPointer(_))));
        drop(Box::from_raw(heap));
    }
    x.check_invariants();
    assert!(holds(a.as_ptr(), 100, 7) && holds(big.as_ptr(), 20_000, 9));
    // SAFETY: live objects, freed once; the second free of each is refused.
    unsafe {
        x.free(a).unwrap();
        x.free(big).unwrap();
        assert!(matches!(x.free(a), Err(XmemError::ForeignPointer(_))));
        assert!(matches!(x.free(big), Err(XmemError::ForeignPointer(_))));
    }
    x.check_invariants();
}

#[test]
fn exhausted_reservation_is_an_error_and_the_heap_still_works() {
    let f = fixture(4, 8, 1);
    let x = &f.xmem;
    let t = x.tag("t").unwrap();
    let mut objs = Vec::new();
    let err = loop {
        match x.alloc(t, MIB + 1, 8) {
            Ok(p) => objs.push(p),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, XmemError::ReservationExhausted { regions: 4 }),
        "{err}"
    );
    assert_eq!(
        objs.len(),
        4,
        "one object of just over 1 MiB per 2 MiB region"
    );
    // Small objects still fit in the regions' remaining pages; frees make room again.
    let small = x.alloc(t, 64, 8).unwrap();
    // SAFETY: live objects, freed once.
    unsafe {
        x.free(small).unwrap();
        x.free(objs.pop().unwrap()).unwrap();
    }
    objs.push(x.alloc(t, MIB + 1, 8).unwrap());
    x.check_invariants();
}

#[test]
fn bad_layouts_and_configs_are_refused() {
    let f = fixture(4, 4, 1);
    let t = f.xmem.tag("t").unwrap();
    assert!(matches!(
        f.xmem.alloc(t, 8, 3),
        Err(XmemError::BadLayout { .. })
    ));
    assert!(matches!(
        f.xmem.alloc(t, 8, 8192),
        Err(XmemError::BadLayout { .. })
    ));
    assert!(matches!(
        f.xmem.alloc(t, 2 * MIB + 1, 8),
        Err(XmemError::BadLayout { .. })
    ));
    assert!(f.xmem.set_profile(t, [f64::NAN, 0.0, 0.0]).is_err());
    let dir = pmkit_testkit::scratch();
    let mut cfg = Config::new(dir.path().join("pm.img"), 4 * MIB as u64, 0);
    cfg.region_size = 3 * MIB;
    assert!(matches!(
        XMem::new(cfg.clone()),
        Err(XmemError::BadConfig(_))
    ));
    cfg.region_size = 2 * MIB;
    cfg.reserve = 8 * MIB;
    cfg.latencies.slow = [1.0, -1.0, 0.0];
    assert!(matches!(XMem::new(cfg), Err(XmemError::BadConfig(_))));
}

#[test]
fn full_pm_tier_is_an_error() {
    let f = fixture(8, 1, 1);
    let t = f.xmem.tag("t").unwrap();
    f.xmem.alloc(t, 2 * MIB, 8).unwrap(); // DRAM
    f.xmem.alloc(t, 2 * MIB, 8).unwrap(); // PM
    assert!(matches!(
        f.xmem.alloc(t, 2 * MIB, 8),
        Err(XmemError::PmFull { slots: 1, .. })
    ));
    f.xmem.check_invariants();
}

#[test]
fn an_existing_pm_file_is_refused_and_kept() {
    let dir = pmkit_testkit::scratch();
    let path = dir.path().join("pm.img");
    std::fs::write(&path, b"somebody's data").unwrap();
    let mut cfg = Config::new(&path, 4 * MIB as u64, 0);
    cfg.region_size = 2 * MIB;
    cfg.reserve = 8 * MIB;
    assert!(matches!(XMem::new(cfg), Err(XmemError::BadConfig(_))));
    assert_eq!(std::fs::read(&path).unwrap(), b"somebody's data");
}

/// A character device is taken as device-dax: one that is not (here `/dev/null`; this kernel
/// has no device-dax to test the real path with) is refused by the media layer, and never
/// removed, neither by the failed `XMem::new` nor by a C-ABI style unlink.
#[test]
fn a_character_device_that_is_not_device_dax_is_refused_and_kept() {
    let mut cfg = Config::new("/dev/null", 4 * MIB as u64, 0);
    cfg.region_size = 2 * MIB;
    cfg.reserve = 8 * MIB;
    let err = XMem::new(cfg).err().expect("refused");
    assert!(matches!(err, XmemError::Media(_)), "{err:?}");
    assert!(err.to_string().contains("dax"), "{err}");
    assert!(std::path::Path::new("/dev/null").exists());
}
