//! The address-space reservation: one `PROT_NONE` range cut into regions of a power-of-two size,
//! and the only code that changes what is mapped in it. Region `i` is
//! `[base + i·size, base + (i+1)·size)`; an address finds its region with a shift.

use crate::error::{Result, XmemError};
use crate::fault::{self, Registration, MAPPED, MIGRATING, UNUSED};
use crate::sys;
use std::os::unix::io::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

pub(crate) struct Space {
    base: usize,
    len: usize,
    shift: u32,
    reg: Registration,
    /// Write protection for migrations by userfaultfd, or why there is none (then by page
    /// rights and the SIGSEGV handler).
    uffd: std::result::Result<OwnedFd, String>,
}

/// How a migrating region's writers are held off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wp {
    /// userfaultfd write protection: every writer, a system call's included, waits in the
    /// kernel until the region's new pages are in place.
    Uffd,
    /// Read-only page rights: a program's write faults into `fault.rs` and waits there; a
    /// system call writing into the region fails with `EFAULT`.
    Signal,
}

impl Space {
    /// `uffd`: hold off writers with userfaultfd where the kernel and privileges allow.
    pub(crate) fn new(len: usize, region_size: usize, uffd: bool) -> Result<Space> {
        assert!(region_size.is_power_of_two() && len.is_multiple_of(region_size));
        let base = sys::reserve(len, region_size)?;
        let shift = region_size.trailing_zeros();
        let reg = match fault::register(base, len, shift) {
            Ok(Some(r)) => r,
            Ok(None) => {
                // SAFETY: the reservation was just made and holds nothing.
                unsafe { sys::unmap(base, len) };
                return Err(XmemError::BadConfig(format!(
                    "at most {} X-Mem instances may live at once",
                    fault::MAX_INSTANCES
                )));
            }
            Err(source) => {
                // SAFETY: as above.
                unsafe { sys::unmap(base, len) };
                return Err(XmemError::Os {
                    what: "install SIGSEGV handler",
                    source,
                });
            }
        };
        Ok(Space {
            base,
            len,
            shift,
            reg,
            uffd: if uffd {
                sys::uffd_open()
            } else {
                Err("turned off (Config::uffd)".into())
            },
        })
    }

    pub(crate) fn regions(&self) -> usize {
        self.len >> self.shift
    }
    pub(crate) fn region_size(&self) -> usize {
        1 << self.shift
    }
    pub(crate) fn base(&self) -> usize {
        self.base
    }
    pub(crate) fn addr(&self, i: usize) -> usize {
        assert!(i < self.regions());
        self.base + (i << self.shift)
    }
    /// The region holding `addr`, if it is inside the reservation.
    pub(crate) fn region_of(&self, addr: usize) -> Option<usize> {
        (addr >= self.base && addr < self.base + self.len).then(|| (addr - self.base) >> self.shift)
    }

    fn state(&self, i: usize) -> &AtomicU32 {
        &self.reg.states[i]
    }
    pub(crate) fn is_mapped(&self, i: usize) -> bool {
        self.state(i).load(Ordering::Acquire) != UNUSED
    }

    /// Back unused region `i` with fresh DRAM pages (bound to `node` if given).
    pub(crate) fn map_fast(&self, i: usize, thp: bool, node: Option<u32>) -> Result<()> {
        assert!(!self.is_mapped(i));
        // SAFETY: region `i` is inside our reservation and unused, so nothing live is in it.
        unsafe { sys::map_anon_fixed(self.addr(i), self.region_size(), thp)? };
        if let Some(n) = node {
            if let Err(e) = sys::bind(self.addr(i), self.region_size(), n) {
                // SAFETY: as above; back to an unused (PROT_NONE) part of the reservation.
                unsafe { sys::reserve_fixed(self.addr(i), self.region_size())? };
                return Err(e);
            }
        }
        self.separate(i);
        self.state(i).store(MAPPED, Ordering::Release);
        Ok(())
    }

    /// Keep region `i`'s mapping apart from its neighbours': odd regions are `MADV_DONTDUMP`, so
    /// two adjacent mapped regions always differ in a VMA flag and never merge (one VMA per
    /// region is what gives `smaps` counts per region). Called after every mapping change. A
    /// failure (not expected on a mapping we just made) only makes those counts coarser, so it
    /// never fails the mapping change.
    fn separate(&self, i: usize) {
        if i % 2 == 1 {
            let _ = sys::dontdump(self.addr(i), self.region_size());
        }
    }

    /// Back unused region `i` with the PM file's slot at `off`.
    pub(crate) fn map_slow(&self, i: usize, fd: RawFd, off: u64) -> Result<()> {
        assert!(!self.is_mapped(i));
        // SAFETY: as for map_fast; the slot is the caller's (taken from the PM tier).
        unsafe { sys::map_file_fixed(self.addr(i), self.region_size(), fd, off)? };
        self.separate(i);
        self.state(i).store(MAPPED, Ordering::Release);
        Ok(())
    }

    /// Bind mapped region `i` to NUMA node `node` and have the kernel move its pages there (a
    /// NUMA slow tier's migration; no write protection: writers wait in the kernel).
    pub(crate) fn rebind(&self, i: usize, node: u32) -> Result<()> {
        assert_eq!(self.state(i).load(Ordering::Acquire), MAPPED);
        sys::bind_move(self.addr(i), self.region_size(), node)
    }

    /// Return mapped region `i` to the reservation: `PROT_NONE`, pages released, state unused.
    pub(crate) fn unmap_region(&self, i: usize) -> Result<()> {
        assert_eq!(self.state(i).load(Ordering::Acquire), MAPPED);
        // SAFETY: region `i` is ours and its owner has no live object in it (the caller's heap
        // says so), so nothing live is in the range.
        unsafe { sys::reserve_fixed(self.addr(i), self.region_size())? };
        self.state(i).store(UNUSED, Ordering::Release);
        Ok(())
    }

    /// Why migrations hold writers off by page rights and not by userfaultfd, if they do.
    pub(crate) fn uffd_unavailable(&self) -> Option<&str> {
        self.uffd.as_ref().err().map(String::as_str)
    }

    /// Migration step 1: writers to region `i` now wait: in the kernel (userfaultfd write
    /// protection, where the memory allows it) or in `fault.rs` (read-only rights).
    pub(crate) fn begin_migration(&self, i: usize) -> Result<Wp> {
        let w = self.state(i);
        assert_eq!(
            w.load(Ordering::Acquire),
            MAPPED,
            "region {i} is not mapped"
        );
        fault::note_begin();
        w.store(MIGRATING, Ordering::Release);
        if let Ok(fd) = &self.uffd {
            // A DAX file's pages cannot be write-protected this way: page rights then.
            if sys::uffd_protect(fd, self.addr(i), self.region_size()).is_ok() {
                return Ok(Wp::Uffd);
            }
        }
        // SAFETY: region `i` is ours and mapped; writers fault into the handler, which parks
        // them because the state says MIGRATING; readers are unaffected.
        if let Err(e) = unsafe { sys::protect(self.addr(i), self.region_size(), libc::PROT_READ) } {
            self.end_migration(i, Wp::Signal);
            return Err(e);
        }
        Ok(Wp::Signal)
    }

    /// Migration step 3 (PM destination): the file slot, already holding the region's bytes,
    /// replaces the region's pages at the same address, read-write.
    pub(crate) fn install_slow(&self, i: usize, fd: RawFd, off: u64) -> Result<()> {
        assert_eq!(self.state(i).load(Ordering::Acquire), MIGRATING);
        // SAFETY: the region is ours and read-only; the slot holds the same bytes, so replacing
        // the mapping changes no byte any reader can see.
        unsafe { sys::map_file_fixed(self.addr(i), self.region_size(), fd, off)? };
        self.separate(i);
        Ok(())
    }

    /// Migration step 3 (DRAM destination): move the staging pages, already holding the region's
    /// bytes, over the region at the same address, read-write.
    pub(crate) fn install_fast(&self, i: usize, staging: usize) -> Result<()> {
        assert_eq!(self.state(i).load(Ordering::Acquire), MIGRATING);
        // SAFETY: `staging` is a private mapping of region size made by the migration; the
        // region is ours and read-only and the staging pages hold the same bytes.
        unsafe { sys::move_fixed(staging, self.region_size(), self.addr(i))? };
        self.separate(i);
        Ok(())
    }

    /// Restore write rights after a failed migration step (the old pages are still in place).
    pub(crate) fn restore_rights(&self, i: usize, wp: Wp) -> Result<()> {
        match (wp, &self.uffd) {
            (Wp::Uffd, Ok(fd)) => sys::uffd_unprotect(fd, self.addr(i), self.region_size()),
            // SAFETY: region `i` is ours and mapped.
            _ => unsafe {
                sys::protect(
                    self.addr(i),
                    self.region_size(),
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            },
        }
    }

    /// Migration step 4: the region is writable again (new pages in place, or the old ones
    /// restored); wake the writers that waited.
    pub(crate) fn end_migration(&self, i: usize, wp: Wp) {
        let w = self.state(i);
        w.store(MAPPED, Ordering::Release);
        sys::futex_wake(w);
        if let (Wp::Uffd, Ok(fd)) = (wp, &self.uffd) {
            // Each queued message is a writer that waited; counted with the handler's.
            fault::note_parked(sys::uffd_drain(fd));
            sys::uffd_wake(fd, self.addr(i), self.region_size())
                .expect("waking the writers of our own region");
        }
    }
}

impl Drop for Space {
    fn drop(&mut self) {
        fault::unregister(&self.reg);
        // SAFETY: the reservation is ours; the XMem that owns this space is being dropped, so no
        // object handed out lives on (XBox borrows the XMem).
        unsafe { sys::unmap(self.base, self.len) };
    }
}
