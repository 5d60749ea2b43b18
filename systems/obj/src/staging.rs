//! DRAM staging buffers: the shadow of a read-write attachment (and the copy a read-only one
//! reads) when the pool keeps shadows in DRAM (`Shadow::Dram`). User stores go here as plain
//! cached DRAM stores; `sync` streams the pages that must change into the object's PM slot.
//!
//! Each buffer is its own anonymous mapping with a guard page on each side, so a pointer that
//! runs off the end faults, and so that changing the buffer's rights (attach/detach with page
//! protection) never splits or merges its mapping with a neighbour: the guards carry
//! `MADV_DONTDUMP`, which makes their flags differ from the buffer's and keeps the kernel from
//! merging them, whatever the rights.
//!
//! A per-pool [`Cache`] keeps released buffers by size class (a power of two of pages), so an
//! attach/detach cycle costs no mmap/munmap. Reuse is first-in first-out behind a quarantine:
//! a released buffer is handed out again only after [`QUARANTINE`] younger buffers of its class
//! were released, so a pointer kept after detach keeps faulting (the buffer stays `PROT_NONE`
//! with protection on) for at least that many later detaches, instead of landing in the very
//! next attachment's shadow. Every limit is explicit: [`MAX_PER_CLASS`] buffers per class,
//! [`MAX_CACHED_BYTES`] in all, classes up to [`MAX_CACHED_PAGES`] pages.

use pmkit_media::protect::Access as Rights;
use std::collections::VecDeque;

const PAGE: usize = 4096;
/// Released buffers kept per size class.
pub const MAX_PER_CLASS: usize = 16;
/// Released buffers of a class that must wait before one is reused (oldest first).
pub const QUARANTINE: usize = 4;
/// Bytes of released buffers kept per pool.
pub const MAX_CACHED_BYTES: usize = 64 << 20;
/// Largest size class kept (16 MiB); larger buffers are unmapped on release.
pub const MAX_CACHED_PAGES: usize = 4096;
/// Size classes: 1, 2, 4, ... pages up to the largest object (2^40 pages is far beyond any pool).
const CLASSES: usize = 41;

fn prot(r: Rights) -> i32 {
    match r {
        Rights::None => libc::PROT_NONE,
        Rights::Read => libc::PROT_READ,
        Rights::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
    }
}

/// One page-aligned DRAM buffer of `pages` pages (a power of two) between two guard pages.
#[derive(Debug)]
pub struct Buf {
    /// The buffer's first page (the mapping starts one guard page earlier).
    ptr: *mut u8,
    pages: usize,
}

// SAFETY: the buffer is plain anonymous memory owned by this value; which thread maps, reads,
// protects or unmaps it does not matter. The pool serializes its own accesses with its lock.
unsafe impl Send for Buf {}

impl Buf {
    /// Map a buffer of the size class holding `pages` pages, with rights `rights`.
    pub fn map(pages: usize, rights: Rights) -> std::io::Result<Buf> {
        assert!(pages > 0);
        let pages = pages.next_power_of_two();
        let total = (pages + 2) * PAGE;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        // SAFETY: both guards lie inside the mapping made above.
        unsafe {
            libc::madvise(base.cast(), PAGE, libc::MADV_DONTDUMP);
            libc::madvise(
                base.add((pages + 1) * PAGE).cast(),
                PAGE,
                libc::MADV_DONTDUMP,
            );
        }
        let b = Buf {
            // SAFETY: one page into the mapping.
            ptr: unsafe { base.add(PAGE) },
            pages,
        };
        if rights != Rights::None {
            b.set(0, pages * PAGE, rights)?;
        }
        Ok(b)
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Pages of the size class (at least the object's pages).
    #[cfg(test)]
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Set the rights of `[off, off+len)` (page aligned) of the buffer.
    pub fn set(&self, off: usize, len: usize, rights: Rights) -> std::io::Result<()> {
        assert!(off.is_multiple_of(PAGE) && len.is_multiple_of(PAGE));
        assert!(off + len <= self.pages * PAGE, "range outside the buffer");
        // SAFETY: inside our own mapping; no Rust reference into it is live across this call
        // (the pool forms slices only for the length of one copy).
        let r = unsafe { libc::mprotect(self.ptr.add(off).cast(), len, prot(rights)) };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Copy `[off, off+dst.len())` of the buffer into `dst` by raw pointer (user pointers may
    /// reach the buffer, so no Rust reference is formed over it).
    ///
    /// # Safety
    /// The range must be readable.
    pub unsafe fn copy_out(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.pages * PAGE);
        std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len());
    }

    /// Copy `src` into `[off, off+src.len())` of the buffer by raw pointer.
    ///
    /// # Safety
    /// The range must be writable.
    pub unsafe fn copy_in(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.pages * PAGE);
        std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len());
    }

    /// Zero `[off, off+len)` of the buffer by raw pointer.
    ///
    /// # Safety
    /// The range must be writable.
    pub unsafe fn zero(&self, off: usize, len: usize) {
        assert!(off + len <= self.pages * PAGE);
        std::ptr::write_bytes(self.ptr.add(off), 0, len);
    }

    /// The buffer's bytes `[off, off+len)`.
    ///
    /// # Safety
    /// The range must be readable, and nothing may write it while the slice lives (the
    /// attachment's owner does not store through its pointer during its own `sync`).
    pub unsafe fn slice(&self, off: usize, len: usize) -> &[u8] {
        assert!(off + len <= self.pages * PAGE);
        std::slice::from_raw_parts(self.ptr.add(off), len)
    }

    /// The buffer's bytes `[off, off+len)`, writable.
    ///
    /// # Safety
    /// The range must be writable, and no other access may happen while the slice lives (the
    /// buffer is not yet, or not any more, handed out, or the copy is the handle's own write).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        assert!(off + len <= self.pages * PAGE);
        std::slice::from_raw_parts_mut(self.ptr.add(off), len)
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `map`; no references into it remain.
        unsafe {
            libc::munmap(self.ptr.sub(PAGE).cast(), (self.pages + 2) * PAGE);
        }
    }
}

/// Released buffers, by size class.
#[derive(Debug)]
pub struct Cache {
    classes: Vec<VecDeque<Buf>>,
    bytes: usize,
}

impl Default for Cache {
    fn default() -> Self {
        Cache {
            classes: (0..CLASSES).map(|_| VecDeque::new()).collect(),
            bytes: 0,
        }
    }
}

impl Cache {
    fn class(pages: usize) -> usize {
        pages.next_power_of_two().trailing_zeros() as usize
    }
    /// The oldest cached buffer for `pages` pages (with the rights it was released with), if
    /// more than [`QUARANTINE`] are waiting.
    pub fn take(&mut self, pages: usize) -> Option<Buf> {
        let q = self.classes.get_mut(Self::class(pages))?;
        if q.len() <= QUARANTINE {
            return None;
        }
        let b = q.pop_front()?;
        self.bytes -= b.pages * PAGE;
        Some(b)
    }
    /// Keep `b` for reuse (dropping the oldest of its class when the class is full), or unmap
    /// it if it is too large or the byte limit is reached.
    pub fn give(&mut self, b: Buf) {
        let c = Self::class(b.pages);
        let bytes = b.pages * PAGE;
        if b.pages > MAX_CACHED_PAGES {
            return;
        }
        if self.classes[c].len() == MAX_PER_CLASS {
            let old = self.classes[c].pop_front().expect("class is full");
            self.bytes -= old.pages * PAGE;
        }
        if self.bytes + bytes <= MAX_CACHED_BYTES {
            self.bytes += bytes;
            self.classes[c].push_back(b);
        }
    }
    #[cfg(test)]
    fn cached(&self) -> usize {
        self.classes.iter().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_limits() {
        let mut c = Cache::default();
        let b = Buf::map(3, Rights::ReadWrite).unwrap();
        assert_eq!(b.pages(), 4);
        // SAFETY: the buffer is read-write and only this test uses it.
        unsafe { b.slice_mut(0, 4 * PAGE).fill(7) };
        let first = b.ptr();
        c.give(b);
        for _ in 0..QUARANTINE {
            assert!(c.take(4).is_none(), "quarantined");
            c.give(Buf::map(4, Rights::ReadWrite).unwrap());
        }
        assert!(c.take(5).is_none(), "class of 8 pages is empty");
        let b = c.take(4).expect("the oldest 4-page buffer comes back");
        assert_eq!(b.ptr(), first, "first in, first out");
        // SAFETY: as above.
        assert_eq!(unsafe { b.slice(4 * PAGE - 1, 1) }, &[7]);
        drop(b);
        let mut c = Cache::default();
        for _ in 0..MAX_PER_CLASS + 3 {
            c.give(Buf::map(1, Rights::None).unwrap());
        }
        assert_eq!(c.cached(), MAX_PER_CLASS);
        c.give(Buf::map(MAX_CACHED_PAGES * 2, Rights::None).unwrap());
        assert_eq!(c.cached(), MAX_PER_CLASS, "too large to keep");
    }
}
