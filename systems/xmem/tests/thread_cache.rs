//! The per-thread caches of small objects (`tcache`): a cached object is refused as a second
//! free and by `usable_size`; objects go back to their heap when the thread exits or flushes
//! (and a region that empties goes back to the reservation); cross-thread frees work; with the
//! caches off, frees are exact at once.

mod common;

use common::*;
use pmkit_xmem::XmemError;
use std::ptr::NonNull;

/// `regions` regions of 2 MiB, PM and DRAM for half each, thread caches on.
fn cached(regions: usize) -> (pmkit_xmem::XMem, tempfile::TempDir) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
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
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
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
