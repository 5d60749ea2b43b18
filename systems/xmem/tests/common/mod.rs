//! Shared test setup: small regions (2 MiB), a PM file in /dev/shm under a temporary directory.
#![allow(dead_code)]

use pmkit_xmem::{Config, XMem};

pub(crate) const MIB: usize = 1 << 20;

pub(crate) struct Fixture {
    pub xmem: XMem,
    _dir: tempfile::TempDir,
}

/// `regions` regions of 2 MiB reserved, PM for `pm_regions`, DRAM budget for `fast_regions`
/// (per-thread caches as by default).
pub(crate) fn fixture(regions: usize, pm_regions: usize, fast_regions: usize) -> Fixture {
    fixture_with(
        regions,
        pm_regions,
        fast_regions,
        Config::new("x", 0, 0).thread_cache,
    )
}

/// As [`fixture`], with the per-thread caches on or off.
pub(crate) fn fixture_with(
    regions: usize,
    pm_regions: usize,
    fast_regions: usize,
    thread_cache: bool,
) -> Fixture {
    fixture_cfg(regions, pm_regions, fast_regions, |c| {
        c.thread_cache = thread_cache
    })
}

/// As [`fixture`], with `set` changing the configuration last.
pub(crate) fn fixture_cfg(
    regions: usize,
    pm_regions: usize,
    fast_regions: usize,
    set: impl FnOnce(&mut Config),
) -> Fixture {
    let dir = pmkit_testkit::scratch_named("pmkit-xmem-test");
    let mut cfg = Config::new(
        dir.path().join("pm.img"),
        (pm_regions * 2 * MIB) as u64,
        (fast_regions * 2 * MIB) as u64,
    );
    cfg.region_size = 2 * MIB;
    cfg.reserve = regions * 2 * MIB;
    set(&mut cfg);
    Fixture {
        xmem: XMem::new(cfg).expect("XMem::new"),
        _dir: dir,
    }
}

/// Fill `len` bytes at `p` with a pattern derived from `seed` (through raw pointers: the
/// memory is X-Mem's, not a Rust allocation).
pub(crate) fn fill(p: *mut u8, len: usize, seed: u8) {
    for i in 0..len {
        // SAFETY: the caller passes a live allocation of at least `len` bytes.
        unsafe { p.add(i).write(seed.wrapping_add(i as u8)) };
    }
}

pub(crate) fn holds(p: *const u8, len: usize, seed: u8) -> bool {
    // SAFETY: as for fill.
    (0..len).all(|i| unsafe { p.add(i).read() } == seed.wrapping_add(i as u8))
}
