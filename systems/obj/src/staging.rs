//! DRAM staging buffers: the shadow of a read-write attachment (and the copy a read-only one
//! reads) when the pool keeps shadows in DRAM (`Shadow::Dram`). User stores go here as plain
//! cached DRAM stores; `sync` streams the pages that must change into the object's PM slot.
//!
//! Each buffer is its own anonymous mapping with a guard page on each side, so a pointer that
//! runs off the end faults, and so that changing the buffer's rights (attach/detach with page
//! protection) never splits or merges its mapping with a neighbour: the guards carry
//! `MADV_DONTDUMP`, which makes their flags differ from the buffer's and keeps the kernel from
//! merging them, whatever the rights. With protection on, a buffer gets a protection key of its
//! own when one is left (`keys.rs`): attach and detach then flip the attaching thread's PKRU
//! instead of calling `mprotect`.
//!
//! A per-pool [`Cache`] keeps released buffers by size class (a power of two of pages), so an
//! attach/detach cycle costs no mmap/munmap. Reuse is first-in first-out behind a quarantine:
//! a released buffer is handed out again only after [`QUARANTINE`] younger buffers of its class
//! were released, so a pointer kept after detach keeps faulting (the buffer stays `PROT_NONE`
//! with protection on) for at least that many later detaches, instead of landing in the very
//! next attachment's shadow. Every limit is explicit: [`MAX_PER_CLASS`] buffers per class,
//! [`MAX_CACHED_BYTES`] in all, classes up to [`MAX_CACHED_PAGES`] pages.

use crate::keys;
use pmkit_media::protect::{protect_memory, Access as Rights, Pkey, PkeyWindow};
use pmkit_media::Media;
use std::collections::VecDeque;

use crate::layout::PAGE;
/// Released buffers kept per size class.
pub(crate) const MAX_PER_CLASS: usize = 16;
/// Released buffers of a class that must wait before one is reused (oldest first).
pub(crate) const QUARANTINE: usize = 4;
/// Bytes of released buffers kept per pool.
pub(crate) const MAX_CACHED_BYTES: usize = 64 << 20;
/// Largest size class kept (16 MiB); larger buffers are unmapped on release.
pub(crate) const MAX_CACHED_PAGES: usize = 4096;
const _: () = assert!(
    QUARANTINE < MAX_PER_CLASS,
    "a full class can hand buffers out"
);
const _: () = assert!(
    MAX_CACHED_PAGES * PAGE <= MAX_CACHED_BYTES,
    "the largest class fits"
);
const _: () = assert!(
    MAX_CACHED_PAGES.is_power_of_two(),
    "classes are powers of two"
);
/// Size classes: 1, 2, 4, ... pages up to the largest object (2^40 pages is far beyond any pool).
const CLASSES: usize = 41;

/// One page-aligned DRAM buffer of `pages` pages (a power of two) between two guard pages.
///
/// A *keyed* buffer has its own protection key (see `keys.rs`): its pages stay read-write and
/// which threads may touch them is their PKRU. Otherwise access is the pages' rights.
#[derive(Debug)]
pub(crate) struct Buffer {
    /// The buffer's first page (the mapping starts one guard page earlier).
    ptr: *mut u8,
    pages: usize,
    key: Option<Pkey>,
}

// SAFETY: the buffer is plain anonymous memory owned by this value; which thread maps, reads,
// protects or unmaps it does not matter. The pool serializes its own accesses with its lock.
unsafe impl Send for Buffer {}

impl Buffer {
    /// Map a buffer of the size class holding `pages` pages. `keyed`: try to give it a key of
    /// its own (pages read-write, the key disabled in every thread); otherwise, or when no key
    /// is left, the pages get rights `rest`.
    pub(crate) fn map(pages: usize, rest: Rights, keyed: bool) -> std::io::Result<Buffer> {
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
        let mut b = Buffer {
            // SAFETY: one page into the mapping.
            ptr: unsafe { base.add(PAGE) },
            pages,
            key: None,
        };
        if let Some(k) = keyed.then(keys::take).flatten() {
            // SAFETY: our own fresh mapping, no references into it.
            match unsafe { protect_memory(b.ptr, pages * PAGE, Rights::ReadWrite, Some(&k)) } {
                Ok(()) => {
                    b.key = Some(k);
                    return Ok(b);
                }
                Err(e) => {
                    tracing::debug!("cannot tag a DRAM shadow with a key ({e}): page rights");
                    keys::give(k);
                }
            }
        }
        if rest != Rights::None {
            b.set(0, pages * PAGE, rest)?;
        }
        Ok(b)
    }

    /// Whether the buffer has its own protection key.
    pub(crate) fn keyed(&self) -> bool {
        self.key.is_some()
    }

    /// A keyed buffer: rights `rights` in this thread until the returned window drops (for the
    /// library's own copies). `None` for a buffer without a key.
    pub(crate) fn window(&self, rights: Rights) -> Option<PkeyWindow> {
        self.key.as_ref().map(|k| k.open(rights))
    }

    /// A keyed buffer: give the calling thread rights `rights` until changed (attach).
    pub(crate) fn allow_thread(&self, rights: Rights) {
        if let Some(k) = &self.key {
            k.allow_this_thread(rights);
        }
    }

    /// A keyed buffer: take the calling thread's rights away (detach in the only thread that had
    /// them: the buffer is then at rest).
    pub(crate) fn deny_thread(&self) {
        if let Some(k) = &self.key {
            k.deny_this_thread();
        }
    }

    /// Put a keyed buffer's key at rest when its attachment ends: `sole` (only the calling
    /// thread has the key enabled) disables it here; otherwise the key is retired.
    pub(crate) fn put_key_at_rest(&mut self, sole: bool) -> std::io::Result<()> {
        if sole {
            self.deny_thread();
            Ok(())
        } else {
            self.retire_key()
        }
    }

    /// A keyed buffer some other thread may still have enabled: make its pages `PROT_NONE`
    /// under the default key and retire the key for good. The buffer goes on as one without a
    /// key, at rest.
    fn retire_key(&mut self) -> std::io::Result<()> {
        let Some(k) = self.key.take() else {
            return Ok(());
        };
        // SAFETY: our own mapping; the pool forms no references into it across this call.
        let r = unsafe { protect_memory(self.ptr, self.pages * PAGE, Rights::None, None) };
        keys::retire(k);
        r
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Pages of the size class (at least the object's pages).
    #[cfg(test)]
    pub(crate) fn pages(&self) -> usize {
        self.pages
    }

    /// Set the page rights of `[off, off+len)` (page aligned) of the buffer (a keyed buffer keeps
    /// its key).
    pub(crate) fn set(&self, off: usize, len: usize, rights: Rights) -> std::io::Result<()> {
        assert!(off.is_multiple_of(PAGE) && len.is_multiple_of(PAGE));
        assert!(off + len <= self.pages * PAGE, "range outside the buffer");
        // SAFETY: inside our own mapping; no Rust reference into it is live across this call
        // (the pool forms slices only for the length of one copy).
        unsafe { protect_memory(self.ptr.add(off), len, rights, self.key.as_ref()) }
    }

    /// Copy `[off, off+dst.len())` of the buffer into `dst` by raw pointer (user pointers may
    /// reach the buffer, so no Rust reference is formed over it).
    ///
    /// # Safety
    /// The range must be readable.
    pub(crate) unsafe fn copy_out(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.pages * PAGE, "copy past the buffer");
        // SAFETY: the source range lies in the buffer (asserted) and is readable (the caller's
        // contract); `dst` is a distinct Rust buffer, so the two cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) }
    }

    /// Copy `src` into `[off, off+src.len())` of the buffer by raw pointer.
    ///
    /// # Safety
    /// The range must be writable.
    pub(crate) unsafe fn copy_in(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.pages * PAGE, "copy past the buffer");
        // SAFETY: the target range lies in the buffer (asserted) and is writable (the caller's
        // contract); `src` is a distinct Rust buffer, so the two cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) }
    }

    /// Fill `[0, len)` of the buffer from media bytes `[media_off, media_off+len)`, by raw
    /// pointer (a pointer kept from an earlier attachment may still reach the buffer).
    ///
    /// # Safety
    /// `[0, len)` must be writable.
    pub(crate) unsafe fn fill_from<M: Media>(&self, media: &M, media_off: usize, len: usize) {
        assert!(len <= self.pages * PAGE, "fill past the buffer");
        // SAFETY: `[0, len)` lies in the buffer (asserted) and is writable (the caller's
        // contract), so `ptr` is valid for `len` bytes of writes during the call.
        unsafe { media.read_into(media_off, self.ptr, len) }
    }

    /// Address of byte `at` of the buffer, after checking `[at, at+len)` lies inside it.
    pub(crate) fn at(&self, at: usize, len: usize) -> *const u8 {
        assert!(at + len <= self.pages * PAGE, "range past the buffer");
        // SAFETY: in bounds of the mapping, checked above.
        unsafe { self.ptr.add(at) }
    }

    /// Zero `[off, off+len)` of the buffer by raw pointer.
    ///
    /// # Safety
    /// The range must be writable.
    pub(crate) unsafe fn zero(&self, off: usize, len: usize) {
        assert!(off + len <= self.pages * PAGE, "zero past the buffer");
        // SAFETY: the range lies in the buffer (asserted) and is writable (the caller's
        // contract).
        unsafe { std::ptr::write_bytes(self.ptr.add(off), 0, len) }
    }
}

impl Drop for Buffer {
    /// A keyed buffer must be at rest (no thread has its key enabled): its key is reused.
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `map`; no references into it remain.
        unsafe {
            libc::munmap(self.ptr.sub(PAGE).cast(), (self.pages + 2) * PAGE);
        }
        if let Some(k) = self.key.take() {
            keys::give(k);
        }
    }
}

/// Released buffers, by size class.
#[derive(Debug)]
pub(crate) struct Cache {
    classes: Vec<VecDeque<Buffer>>,
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
    pub(crate) fn take(&mut self, pages: usize) -> Option<Buffer> {
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
    pub(crate) fn give(&mut self, b: Buffer) {
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
        let b = Buffer::map(3, Rights::ReadWrite, false).unwrap();
        assert_eq!(b.pages(), 4);
        // SAFETY: the buffer is read-write and only this test uses it.
        unsafe { b.copy_in(0, &[7; 4 * PAGE]) };
        let first = b.ptr();
        c.give(b);
        for _ in 0..QUARANTINE {
            assert!(c.take(4).is_none(), "quarantined");
            c.give(Buffer::map(4, Rights::ReadWrite, false).unwrap());
        }
        assert!(c.take(5).is_none(), "class of 8 pages is empty");
        let b = c.take(4).expect("the oldest 4-page buffer comes back");
        assert_eq!(b.ptr(), first, "first in, first out");
        let mut last = [0u8];
        // SAFETY: as above.
        unsafe { b.copy_out(4 * PAGE - 1, &mut last) };
        assert_eq!(last, [7]);
        drop(b);
        let mut c = Cache::default();
        for _ in 0..MAX_PER_CLASS + 3 {
            c.give(Buffer::map(1, Rights::None, false).unwrap());
        }
        assert_eq!(c.cached(), MAX_PER_CLASS);
        c.give(Buffer::map(MAX_CACHED_PAGES * 2, Rights::None, false).unwrap());
        assert_eq!(c.cached(), MAX_PER_CLASS, "too large to keep");
    }
}
