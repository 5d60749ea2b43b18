//! Moving one region between tiers at the same virtual address (see `docs/xmem.md`):
//! write-protect (writers wait in the kernel with userfaultfd, else park in `fault.rs`), copy
//! with the media layer's copies, put the destination pages at the region's address in one
//! system call, restore rights, wake writers; a PM destination's page tables are then filled
//! in one call, so the application's next touches take no faults.
//! On any failure the old pages stay in place and writable, and the error is returned.

use crate::error::Result;
use crate::space::{Space, Wp};
use crate::sys;
use crate::tier::Pm;
use pmkit_media::raw::{self, Fence};
use pmkit_media::Media;

/// Move region `i` (now in DRAM or another PM slot) into PM slot `slot`.
pub(crate) fn to_slow(space: &Space, i: usize, pm: &Pm, slot: u32) -> Result<()> {
    let wp = space.begin_migration(i)?;
    let len = space.region_size();
    let off = pm.offset(slot);
    let src = space.addr(i) as *const u8;
    // SAFETY: region `i` is mapped readable for `len` bytes and no one writes it while it is
    // read-only (writers are parked); the slot lies inside the PM file's mapping (`Pm` sizes
    // the file in whole slots).
    unsafe { pm.media().write_nt_from(off as usize, src, len) };
    raw::fence(Fence::Sfence);
    let r = space.install_slow(i, pm.fd(), off);
    finish(space, i, wp, r)?;
    // The new mapping has no page tables yet: without this the application, not the
    // migration, would take a minor fault per 64 KiB (the kernel's fault-around) on its next
    // touches, 16,384 per GiB, and every measurement after a move would charge them to the
    // slow tier. A read populate maps shmem's pages writable too (no write-notify on shmem);
    // it costs 80 ms/GiB here against 210 for a write populate.
    sys::populate_read(space.addr(i), len);
    Ok(())
}

/// Move region `i` (now in PM) into fresh DRAM pages (bound to `node` if given; the policy
/// moves with the pages when they are put in place).
pub(crate) fn to_fast(space: &Space, i: usize, thp: bool, node: Option<u32>) -> Result<()> {
    let len = space.region_size();
    let staging = sys::map_anon(len, thp)?;
    if let Some(n) = node {
        if let Err(e) = sys::bind(staging, len, n) {
            // SAFETY: `staging` is our private mapping of `len` bytes, holding nothing live.
            unsafe { sys::unmap(staging, len) };
            return Err(e);
        }
    }
    // The copy reads every page of the PM mapping: map them now, in one call (a write-protected
    // shmem mapping gets no fault-around: a fault per 4 KiB page, 2.7x the copy's time).
    sys::populate_read(space.addr(i), len);
    let wp = match space.begin_migration(i) {
        Ok(wp) => wp,
        Err(e) => {
            // SAFETY: `staging` is our private mapping of `len` bytes, holding nothing live.
            unsafe { sys::unmap(staging, len) };
            return Err(e);
        }
    };
    // SAFETY: region `i` is mapped readable and not written while read-only; `staging` is our
    // private read-write mapping of `len` bytes; the two do not overlap.
    unsafe { raw::copy_out(space.addr(i) as *const u8, staging as *mut u8, len) };
    let r = space.install_fast(i, staging);
    if r.is_err() {
        // SAFETY: as above: the staging pages were not moved, so they are still ours.
        unsafe { sys::unmap(staging, len) };
    }
    finish(space, i, wp, r)
}

fn finish(space: &Space, i: usize, wp: Wp, r: Result<()>) -> Result<()> {
    if r.is_err() {
        // The old pages are still mapped: make them writable again before waking writers.
        space
            .restore_rights(i, wp)
            .expect("restoring write rights on our own region");
    }
    space.end_migration(i, wp);
    r
}
