//! The buffers of one queue's ring entries (headers, payloads), each kind in one anonymous
//! mapping, reached by raw pointer only: the kernel writes an entry's buffers while the entry is
//! registered, and during a shared batch (`share.rs`) two threads answer different entries of
//! the same queue, so no `&mut` over a whole arena is ever formed.
//!
//! The kernel copies each request's data into its entry's payload buffer through
//! `fuse_copy_folio`, which pins the buffer's pages first (`gup_fast`). On 4 KiB pages that is
//! 256 page walks and reference counts per 1 MiB write: a tenth of a queue thread's time in a
//! 1 MiB sequential write (perf, `docs/RESULTS.md`). Backed by transparent huge pages the
//! same pin is one PMD entry per 2 MiB. Only the first [`HUGE_ENTRIES`] buffers ask for huge
//! pages, the *last* ones: a huge page is filled whole at its first touch, and the kernel hands
//! out the most recently registered or freed entry first, so the entries registered last carry
//! nearly all the traffic; the rest stay lazily mapped 4 KiB pages.

use std::ptr::NonNull;

/// Payload buffers per queue backed by huge pages (2 per 2 MiB page): 8 MiB per queue at most.
pub(super) const HUGE_ENTRIES: usize = 8;

const HUGE: usize = 2 << 20;

/// `n` buffers of `each` bytes, laid end to end in one private anonymous mapping.
pub(super) struct Arena {
    base: NonNull<u8>,
    /// The mapping's length (a multiple of 2 MiB, plus alignment slack).
    map_len: usize,
    /// Offset of buffer 0 in the mapping (chosen so that the first huge buffer is 2 MiB-aligned).
    start: usize,
    each: usize,
    n: usize,
}

// SAFETY: the mapping is owned by this value; its bytes are reached through raw pointers
// under the claim rules of `Arena::get` (one thread per entry at a time).
unsafe impl Send for Arena {}
// SAFETY: as for Send: shared access hands out raw pointers, and slices only under a claim.
unsafe impl Sync for Arena {}

impl Arena {
    /// Map `n` buffers of `each` bytes; with `huge`, ask for transparent huge pages over the
    /// last [`HUGE_ENTRIES`] of them (best effort: the kernel may refuse, and then they are
    /// plain pages; `each` must then be a multiple of 4 KiB).
    pub(super) fn new(n: usize, each: usize, huge: bool) -> std::io::Result<Arena> {
        assert!(n > 0 && each > 0 && (!huge || each.is_multiple_of(4096)));
        let bytes = n
            .checked_mul(each)
            .expect("payload buffers fit the address space");
        let map_len = bytes + HUGE;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).expect("mmap returned null");
        let first_huge = n - HUGE_ENTRIES.min(n);
        // Buffer `first_huge` on a 2 MiB boundary: start + first_huge * each ≡ 0 (mod 2 MiB).
        let start = (2 * HUGE - (base.as_ptr() as usize + first_huge * each) % HUGE) % HUGE;
        let out = Arena {
            base,
            map_len,
            start,
            each,
            n,
        };
        if huge {
            let len = (n - first_huge) * each;
            // SAFETY: the range lies inside the mapping made above; advice changes no data.
            // Failure (no THP in this kernel) leaves plain pages, which is only slower.
            unsafe { libc::madvise(out.ptr(first_huge).cast(), len, libc::MADV_HUGEPAGE) };
        }
        Ok(out)
    }

    /// Buffer `i`'s first byte (for the kernel: REGISTER's iovec).
    pub(super) fn ptr(&self, i: usize) -> *mut u8 {
        assert!(i < self.n);
        // SAFETY: `start + i * each + each <= start + bytes <= map_len`: inside the mapping.
        unsafe { self.base.as_ptr().add(self.start + i * self.each) }
    }

    /// Buffer `i`.
    ///
    /// # Safety
    /// The caller has claimed entry `i` for the slice's life: its request has completed and its
    /// COMMIT_AND_FETCH is not yet submitted (so the kernel does not touch it), and no other
    /// thread holds a slice of it (the queue thread hands each entry of a batch to one thread).
    #[allow(clippy::mut_from_ref)]
    // A slice over a ring entry's buffer only while the kernel cannot write it (the claim).
    #[allow(clippy::disallowed_methods)]
    pub(super) unsafe fn get(&self, i: usize) -> &mut [u8] {
        // SAFETY: inside the mapping (see `ptr`) and initialized (anonymous memory reads as
        // zeros); exclusive by the caller's claim.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(i), self.each) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; the ring that could write into it
        // is dropped before the buffers (field order in `Queue`).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

/// One queue's entries' buffers: entry `i` is header `i` and payload `i`.
pub(super) struct Slots {
    headers: Arena,
    payloads: Arena,
}

impl Slots {
    /// Buffers for `n` entries: headers of `header` bytes, payloads of `payload` bytes (the
    /// last [`HUGE_ENTRIES`] on huge pages with `huge`).
    pub(super) fn new(
        n: usize,
        header: usize,
        payload: usize,
        huge: bool,
    ) -> std::io::Result<Slots> {
        Ok(Slots {
            headers: Arena::new(n, header, false)?,
            payloads: Arena::new(n, payload, huge)?,
        })
    }

    /// Entry `i`'s (header, payload) iovecs, as REGISTER hands them to the kernel.
    pub(super) fn iovecs(&self, i: usize) -> [libc::iovec; 2] {
        [
            libc::iovec {
                iov_base: self.headers.ptr(i).cast(),
                iov_len: self.headers.each,
            },
            libc::iovec {
                iov_base: self.payloads.ptr(i).cast(),
                iov_len: self.payloads.each,
            },
        ]
    }

    /// Answer entry `i`'s request in place; the commit id for its COMMIT_AND_FETCH.
    ///
    /// # Safety
    /// As [`Arena::get`]: the caller has claimed entry `i` (completed, not yet committed, and
    /// answered by no other thread meanwhile).
    pub(super) unsafe fn answer<H: crate::answer::Handler>(&self, handler: &H, i: usize) -> u64 {
        // SAFETY: the caller's claim on entry `i` covers both of its buffers.
        unsafe { super::handle(handler, self.headers.get(i), self.payloads.get(i)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_separate_aligned_and_zeroed() {
        let p = Arena::new(3, 1 << 20, true).unwrap();
        assert_eq!(p.ptr(0) as usize % HUGE, 0, "the first of the last 8 of 3");
        let q = Arena::new(HUGE_ENTRIES + 3, 1 << 20, true).unwrap();
        assert_eq!(q.ptr(3) as usize % HUGE, 0, "the first of the last 8 of 11");
        assert_eq!(p.ptr(1) as usize - p.ptr(0) as usize, 1 << 20);
        // SAFETY: one slice at a time, no kernel in this test.
        unsafe {
            assert!(p.get(2).iter().all(|&b| b == 0));
            p.get(1).fill(7);
            assert!(p.get(0).iter().all(|&b| b == 0));
            assert!(p.get(2).iter().all(|&b| b == 0));
            assert_eq!(p.get(1)[(1 << 20) - 1], 7);
        }
        let h = Arena::new(5, 288, false).unwrap();
        assert_eq!(h.ptr(4) as usize - h.ptr(0) as usize, 4 * 288);
    }
}
