//! A contiguous view of scattered extents of a region's file: what a file system's direct
//! access (`map()`, XIP) hands out. One address range is reserved, then each extent of the file
//! is mapped (`MAP_SHARED | MAP_FIXED`) at its place in it, so the caller sees a file's blocks
//! in file order, loads and stores going straight to PM with no copy and no system call.
//!
//! The view is placed so that the first 2 MiB-aligned run of 2 MiB of the file inside an extent
//! lands at a 2 MiB-aligned address; every other such run whose distance from it in the view is
//! a multiple of 2 MiB (all of them, when the extents are a file's blocks in file order and its
//! 2 MiB blocks lie at 2 MiB file offsets) is then aligned too. The address and the file offset
//! both 2 MiB-aligned is what lets the kernel map a run with one huge page (DAX; tmpfs where
//! `shmem_enabled` allows it). [`ExtentMap::huge_parts`] names the runs placed so.

use crate::error::{MediaError, Result};
use crate::raw::{self, Fence, Flush};
use crate::region::Region;
use std::os::fd::AsRawFd;

const PAGE: u64 = 4096;
const HUGE: u64 = 2 << 20;
/// Most extents one view may have (each is an mmap and a VMA in the kernel).
pub const MAX_EXTENTS: usize = 1 << 16;

/// The mapped view; unmapped when dropped.
#[derive(Debug)]
pub struct ExtentMap {
    base: *mut u8,
    /// Bytes the caller sees.
    len: usize,
    /// The whole reservation (from `reserved`, `reserved_len` bytes).
    reserved: *mut u8,
    reserved_len: usize,
    needs_msync: bool,
    /// `(offset in the view, length)`: runs 2 MiB-aligned both in the file and in memory.
    huge: Vec<(usize, usize)>,
}

// SAFETY: the view is plain shared memory; it is only unmapped by drop (which takes `self`).
unsafe impl Send for ExtentMap {}
// SAFETY: as above; every access goes through raw pointers by the caller's own rules.
unsafe impl Sync for ExtentMap {}

impl ExtentMap {
    /// Map `extents` (byte offset in `region`'s file, length; both multiples of 4 KiB) one
    /// after the other, read-write.
    pub fn new(region: &Region, extents: &[(u64, u64)]) -> Result<ExtentMap> {
        let bad = |what: &'static str| {
            MediaError::io(region.path(), what, std::io::ErrorKind::InvalidInput.into())
        };
        let file = region
            .file()
            .ok_or_else(|| bad("direct access needs a file behind the region"))?;
        if extents.is_empty() || extents.len() > MAX_EXTENTS {
            return Err(bad("direct access to 0 or too many extents"));
        }
        let mut len = 0u64;
        for &(off, n) in extents {
            if !off.is_multiple_of(PAGE) || !n.is_multiple_of(PAGE) || n == 0 {
                return Err(bad("an extent is not 4 KiB-aligned"));
            }
            if off.checked_add(n).is_none_or(|e| e > region.len() as u64) {
                return Err(bad("an extent lies outside the region"));
            }
            len += n;
        }
        // where in the view the first 2 MiB-aligned run of the file begins, if any
        let mut first_run = None;
        let mut at = 0u64;
        for &(off, n) in extents {
            let m = off.next_multiple_of(HUGE);
            if m + HUGE <= off + n {
                first_run = Some(at + (m - off));
                break;
            }
            at += n;
        }
        let pad = if first_run.is_some() {
            HUGE as usize
        } else {
            0
        };
        let reserved_len = len as usize + pad;
        // SAFETY: a fresh anonymous reservation; nothing else refers to it.
        let reserved = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved_len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if reserved == libc::MAP_FAILED {
            return Err(MediaError::io(
                region.path(),
                "reserving address space for direct access",
                std::io::Error::last_os_error(),
            ));
        }
        let reserved = reserved.cast::<u8>();
        let skip = match first_run {
            Some(r) => {
                let a = reserved as usize + r as usize;
                a.next_multiple_of(HUGE as usize) - a
            }
            None => 0,
        };
        let base = reserved as usize + skip;
        let mut huge: Vec<(usize, usize)> = Vec::new();
        let mut at = 0usize;
        for &(off, n) in extents {
            let mut m = off.next_multiple_of(HUGE);
            while m + HUGE <= off + n {
                let v = at + (m - off) as usize;
                if (base + v).is_multiple_of(HUGE as usize) {
                    match huge.last_mut() {
                        Some((o, l)) if *o + *l == v => *l += HUGE as usize,
                        _ => huge.push((v, HUGE as usize)),
                    }
                }
                m += HUGE;
            }
            at += n as usize;
        }
        let view = ExtentMap {
            // SAFETY: `skip` < `pad` + 1, inside the reservation.
            base: unsafe { reserved.add(skip) },
            len: len as usize,
            reserved,
            reserved_len,
            needs_msync: region.needs_msync(),
            huge,
        };
        let mut at = 0usize;
        for &(off, n) in extents {
            // SAFETY: `[base + at, + n)` lies inside our own reservation (the lengths sum to
            // `len`); MAP_FIXED replaces only those reserved pages.
            let p = unsafe {
                libc::mmap(
                    view.base.add(at).cast(),
                    n as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    file.as_raw_fd(),
                    off as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                // `view` drops here and gives the reservation back.
                return Err(MediaError::io(
                    region.path(),
                    "mapping an extent for direct access",
                    std::io::Error::last_os_error(),
                ));
            }
            at += n as usize;
        }
        Ok(view)
    }

    /// The first byte of the view.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The parts of the view, `(offset, length)`, that are runs of whole 2 MiB both 2 MiB-
    /// aligned in the file and in memory: where the kernel may use 2 MiB pages (the rest can
    /// only get 4 KiB pages).
    pub fn huge_parts(&self) -> &[(usize, usize)] {
        &self.huge
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `[ptr, ptr + len)` lies inside the view.
    pub fn contains(&self, ptr: *const u8, len: usize) -> bool {
        let (b, p) = (self.base as usize, ptr as usize);
        p >= b && p.checked_add(len).is_some_and(|e| e <= b + self.len)
    }

    /// Make `[off, off + len)` of the view durable: flush its lines and fence (or `msync` on a
    /// plain file, whose page cache is not the media).
    pub fn persist(&self, off: usize, len: usize) -> Result<()> {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len),
            "persist outside the view"
        );
        if len == 0 {
            return Ok(());
        }
        if self.needs_msync {
            let start = off & !(PAGE as usize - 1);
            // SAFETY: a page-aligned range inside our own mapping.
            let r = unsafe {
                libc::msync(
                    self.base.add(start).cast(),
                    off + len - start,
                    libc::MS_SYNC,
                )
            };
            if r != 0 {
                return Err(MediaError::io(
                    "direct access view",
                    "msync",
                    std::io::Error::last_os_error(),
                ));
            }
            return Ok(());
        }
        // SAFETY: the range lies inside the view (asserted), which stays mapped while `self`
        // lives; flushing changes no bytes.
        unsafe { raw::flush(self.base.add(off), len, Flush::best()) };
        raw::fence(Fence::Sfence);
        Ok(())
    }
}

impl Drop for ExtentMap {
    fn drop(&mut self) {
        // SAFETY: the whole reservation is ours; after this nothing refers to it (the caller's
        // pointers into it are theirs to stop using: see `Posix::unmap`).
        unsafe { libc::munmap(self.reserved.cast(), self.reserved_len) };
    }
}
