//! The per-thread caches of small objects (`tcache`): a cached object is refused as a second
//! free and by `usable_size`, wherever it went (this thread's cache, the heap after a spill,
//! another thread's exit); objects go back to their heap when the thread exits or flushes (and
//! a region that empties goes back to the reservation) or when its slot is evicted; the slots
//! are bounded; cross-thread frees work; an unknown tag is refused; with the caches off, frees
//! are exact at once.

mod common;

use common::*;
use pmkit_xmem::{XMem, XmemError, THREAD_CACHE_BATCH, THREAD_CACHE_SLOTS};
use std::ptr::NonNull;

/// `regions` regions of 2 MiB, PM and DRAM for half each, thread caches on.
fn cached(regions: usize) -> (pmkit_xmem::XMem, tempfile::TempDir) {
    let dir = pmkit_testkit::scratch();
    let half = (regions / 2 * 2 * MIB) as u64;
    let mut cfg = pmkit_xmem::Config::new(dir.path().join("pm"), half, half);
    cfg.region_size = 2 * MIB;
    cfg.reserve = regions * 2 * MIB;
    cfg.thread_cache = true;
    (pmkit_xmem::XMem::new(cfg).unwrap(), dir)
}

fn live_bytes(x: &pmkit_xmem::XMem) -> usize {
    x.regions().iter().map(|r| r.bytes).sum()
}

#[test]
fn cached_objects_are_not_live_and_go_back_at_thread_exit() {
    let (x, _dir) = cached(8);
    let x = &x;
    let t = x.tag("t").unwrap();
    let p = x.alloc(t, 64, 8).unwrap();
    fill(p.as_ptr(), 64, 3);
    assert_eq!(x.usable_size(p).unwrap().0, 64);
    // SAFETY: live, freed once.
    unsafe { x.free(p) }.unwrap();
    // SAFETY: a second free is refused before anything is touched.
    let again = unsafe { x.free(p) };
    assert!(matches!(again, Err(XmemError::ForeignPointer(_))));
    assert!(x.usable_size(p).is_err(), "a cached object is not live");
    // The same thread gets it back first (its cache), live again.
    let q = x.alloc(t, 64, 8).unwrap();
    assert_eq!(q, p);
    assert_eq!(x.usable_size(q).unwrap().0, 64);
    // An interior pointer of a live object, aligned to 16 or not, is refused.
    for off in [8, 16, 48] {
        let inner = NonNull::new(q.as_ptr().wrapping_add(off)).unwrap();
        // SAFETY: refused before anything is touched.
        assert!(unsafe { x.free(inner) }.is_err(), "offset {off}");
    }
    // SAFETY: live, freed once.
    unsafe { x.free(q) }.unwrap();

    // Another thread allocates and frees; what it caches goes back when it exits.
    // Joined explicitly: a scope's end does not wait for thread-local destructors, a join does.
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let v: Vec<_> = (0..5000)
                .map(|i| x.alloc(t, 16 + i % 200, 8).unwrap())
                .collect();
            for p in v {
                // SAFETY: live, freed once.
                unsafe { x.free(p) }.unwrap();
            }
            assert!(live_bytes(x) > 0, "this thread still caches objects");
        });
        h.join().unwrap();
    });
    x.flush_thread_cache();
    assert_eq!(live_bytes(x), 0, "every cached object went back");
    x.check_invariants();
}

#[test]
fn cross_thread_frees_and_a_flush_returns_emptied_regions() {
    let (x, _dir) = cached(32);
    let x = &x;
    let t = x.tag("t").unwrap();
    // 64-byte objects filling more than two 2 MiB regions, allocated here, freed elsewhere.
    let v: Vec<usize> = (0..80_000)
        .map(|_| x.alloc(t, 64, 8).unwrap().as_ptr() as usize)
        .collect();
    assert!(x.regions().len() >= 3);
    std::thread::scope(|s| {
        let hs: Vec<_> = v
            .chunks(v.len() / 2)
            .map(|half| {
                s.spawn(move || {
                    for &a in half {
                        // SAFETY: live, freed once (each half by one thread).
                        unsafe { x.free(NonNull::new(a as *mut u8).unwrap()) }.unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
    // The freeing threads exited: their caches went back, but a region emptied by a thread's
    // exit stays with its tag until the tag's next free in it or a flush.
    assert_eq!(live_bytes(x), 0);
    x.check_invariants();
    let p = x.alloc(t, 64, 8).unwrap();
    // SAFETY: live, freed once.
    unsafe { x.free(p) }.unwrap();
    x.flush_thread_cache();
    assert_eq!(live_bytes(x), 0);
    assert_eq!(
        x.regions().len(),
        1,
        "emptied regions went back, the last one stays"
    );
    x.check_invariants();
}

#[test]
fn without_thread_caches_frees_are_exact_at_once() {
    let dir = pmkit_testkit::scratch();
    let mut cfg = pmkit_xmem::Config::new(dir.path().join("pm"), 8 << 20, 8 << 20);
    cfg.region_size = 2 * MIB;
    cfg.reserve = 16 * MIB;
    cfg.thread_cache = false;
    let x = pmkit_xmem::XMem::new(cfg).unwrap();
    let t = x.tag("t").unwrap();
    let v: Vec<_> = (0..1000).map(|_| x.alloc(t, 48, 16).unwrap()).collect();
    assert_eq!(live_bytes(&x), 48 * 1000);
    for p in &v[..500] {
        // SAFETY: live, freed once.
        unsafe { x.free(*p) }.unwrap();
    }
    assert_eq!(live_bytes(&x), 48 * 500, "no cache holds freed objects");
    // SAFETY: already freed: refused.
    assert!(unsafe { x.free(v[0]) }.is_err());
    x.check_invariants();
}

fn refused(x: &XMem, p: NonNull<u8>) -> bool {
    // SAFETY: the callers pass addresses no live object starts at: refused untouched.
    matches!(unsafe { x.free(p) }, Err(XmemError::ForeignPointer(_)))
}

#[test]
fn a_double_free_is_refused_wherever_the_object_went() {
    let (x, _dir) = cached(8);
    let x = &x;
    let t = x.tag("t").unwrap();
    // 300 objects of one class: freeing them all spills most of them past this thread's
    // stack (64 at most) back to the heap.
    let v: Vec<_> = (0..300).map(|_| x.alloc(t, 64, 8).unwrap()).collect();
    for p in &v {
        // SAFETY: live, freed once.
        unsafe { x.free(*p) }.unwrap();
    }
    for p in &v {
        assert!(refused(x, *p), "second free of a cached or spilled object");
    }
    // Allocated again: each address handed out once.
    let w: Vec<_> = (0..300).map(|_| x.alloc(t, 64, 8).unwrap()).collect();
    let mut addrs: Vec<usize> = w.iter().map(|p| p.as_ptr() as usize).collect();
    addrs.sort_unstable();
    addrs.dedup();
    assert_eq!(addrs.len(), 300, "no object handed out twice");
    // Another thread frees half and exits (its cache goes back to the heap).
    let (first, second) = w.split_at(150);
    let first: Vec<usize> = first.iter().map(|p| p.as_ptr() as usize).collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            for &a in &first {
                // SAFETY: live, freed once.
                unsafe { x.free(NonNull::new(a as *mut u8).unwrap()) }.unwrap();
            }
        })
        .join()
        .unwrap();
    });
    for &a in &first {
        assert!(
            refused(x, NonNull::new(a as *mut u8).unwrap()),
            "after thread exit"
        );
    }
    for p in second {
        // SAFETY: live, freed once.
        unsafe { x.free(*p) }.unwrap();
    }
    x.flush_thread_cache();
    for p in &w {
        assert!(refused(x, *p), "after a flush");
    }
    assert_eq!(live_bytes(x), 0);
    x.check_invariants();
}

#[test]
fn slots_are_bounded_and_an_evicted_slot_gives_its_objects_back() {
    let (x, _dir) = cached(64);
    let x = &x;
    let n = THREAD_CACHE_SLOTS + 4;
    let tags: Vec<_> = (0..n).map(|i| x.tag(&format!("t{i}")).unwrap()).collect();
    // A fresh thread (no slots of other instances).
    std::thread::scope(|s| {
        s.spawn(|| {
            for &t in &tags {
                let p = x.alloc(t, 64, 8).unwrap();
                // SAFETY: live, freed once.
                unsafe { x.free(p) }.unwrap();
                assert!(XMem::thread_cache_slots() <= THREAD_CACHE_SLOTS);
            }
            assert_eq!(XMem::thread_cache_slots(), THREAD_CACHE_SLOTS);
            // Each cached tag holds its one refill (a batch of 64 B objects); the 4 evicted first
            // gave theirs back.
            let regions = x.regions();
            for (i, t) in tags.iter().enumerate() {
                let bytes: usize = regions
                    .iter()
                    .filter(|r| r.tag == *t)
                    .map(|r| r.bytes)
                    .sum();
                assert_eq!(
                    bytes,
                    if i < 4 { 0 } else { THREAD_CACHE_BATCH * 64 },
                    "tag {i}"
                );
            }
        })
        .join()
        .unwrap();
    });
    assert_eq!(live_bytes(x), 0, "thread exit gave the rest back");
    x.check_invariants();
}

#[test]
fn an_unknown_tag_is_refused_with_the_cache_on() {
    let (other, _d1) = cached(8);
    let foreign = (0..3)
        .map(|i| other.tag(&format!("o{i}")).unwrap())
        .last()
        .unwrap();
    let (x, _d2) = cached(8);
    let t = x.tag("only").unwrap();
    for _ in 0..2 {
        let e = x.alloc(foreign, 64, 8);
        assert!(matches!(e, Err(XmemError::UnknownTag(2))), "{e:?}");
    }
    // The tag that exists still works, and a pointer of the other instance is refused.
    let p = x.alloc(t, 64, 8).unwrap();
    let q = other.alloc(foreign, 64, 8).unwrap();
    assert!(refused(&x, q));
    // SAFETY: live, freed once (each by its own instance).
    unsafe { x.free(p) }.unwrap();
    // SAFETY: as above.
    unsafe { other.free(q) }.unwrap();
    x.check_invariants();
    other.check_invariants();
}
