//! A [`Media`] wrapper that counts the PM write traffic a workload causes: bytes of cache lines
//! written back (every line a `flush` covers, 64 bytes each) plus bytes of non-temporal stores
//! (whole lines: a partial NT line is stored and flushed), and fences. Every pmkit variant of the
//! benchmark runs on `Counted<Region>`, so they are measured the same way and pay the same
//! (tiny) counting cost.
//!
//! The counters use a plain load and store rather than an atomic add: the benchmark drives the
//! media from one thread, and the counts are exact then (the fault handler of PMO's fault
//! tracking only changes page rights, it never flushes).

use pmkit_media::{Domain, Fence, Flush, Media, Region, LINE};
use std::sync::atomic::{AtomicU64, Ordering};

pub(super) struct Counted<M> {
    inner: M,
    written: AtomicU64,
    fences: AtomicU64,
}

/// Lines covering `[off, off+len)`.
fn lines(off: usize, len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    ((off + len).div_ceil(LINE) - off / LINE) as u64
}

#[inline]
fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

impl<M> Counted<M> {
    pub(super) fn new(inner: M) -> Counted<M> {
        Counted {
            inner,
            written: AtomicU64::new(0),
            fences: AtomicU64::new(0),
        }
    }
    /// (bytes written back to PM, fences) so far.
    pub(super) fn counts(&self) -> (u64, u64) {
        (
            self.written.load(Ordering::Relaxed),
            self.fences.load(Ordering::Relaxed),
        )
    }
}

impl<M: Media> Media for Counted<M> {
    #[inline]
    fn len(&self) -> usize {
        self.inner.len()
    }
    #[inline]
    fn domain(&self) -> Domain {
        self.inner.domain()
    }
    /// Page rights and addresses go to the mapping itself; its stores, flushes and fences
    /// (which are counted) still go through this wrapper.
    fn mapping(&self) -> Option<&Region> {
        self.inner.mapping()
    }
    fn first_bad(&self, off: usize, len: usize) -> Option<usize> {
        self.inner.first_bad(off, len)
    }
    #[inline]
    fn read(&self, off: usize, dst: &mut [u8]) {
        self.inner.read(off, dst)
    }
    #[inline]
    fn write(&self, off: usize, src: &[u8]) {
        self.inner.write(off, src)
    }
    #[inline]
    fn write_nt(&self, off: usize, src: &[u8]) {
        add(&self.written, lines(off, src.len()) * LINE as u64);
        self.inner.write_nt(off, src)
    }
    #[inline]
    unsafe fn read_into(&self, off: usize, dst: *mut u8, len: usize) {
        // SAFETY: the caller's contract for read_into is the inner media's, passed on unchanged.
        unsafe { self.inner.read_into(off, dst, len) }
    }
    #[inline]
    unsafe fn write_nt_from(&self, off: usize, src: *const u8, len: usize) {
        add(&self.written, lines(off, len) * LINE as u64);
        // SAFETY: the caller's contract for write_nt_from is the inner media's, passed on
        // unchanged.
        unsafe { self.inner.write_nt_from(off, src, len) }
    }
    #[inline]
    fn flush(&self, off: usize, len: usize, how: Flush) {
        add(&self.written, lines(off, len) * LINE as u64);
        self.inner.flush(off, len, how)
    }
    #[inline]
    fn fence(&self, kind: Fence) {
        add(&self.fences, 1);
        self.inner.fence(kind)
    }
    fn sync_pages(&self, off: usize, len: usize) -> pmkit_media::Result<()> {
        self.inner.sync_pages(off, len)
    }
    #[inline]
    fn load_u64(&self, off: usize) -> u64 {
        self.inner.load_u64(off)
    }
    #[inline]
    fn store_u64(&self, off: usize, v: u64) {
        self.inner.store_u64(off, v)
    }
    fn cas_u64(&self, off: usize, current: u64, new: u64) -> Result<u64, u64> {
        self.inner.cas_u64(off, current, new)
    }
    fn cas_u128(&self, off: usize, current: u128, new: u128) -> Result<u128, u128> {
        self.inner.cas_u128(off, current, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lines_written_back_and_fences() {
        let m = Counted::new(pmkit_media::Region::anonymous(1 << 16).unwrap());
        m.write(10, &[1; 100]); // plain stores are not PM traffic until written back
        assert_eq!(m.counts(), (0, 0));
        m.flush(10, 100, Flush::best()); // lines 0 and 1
        m.persist_u64(4096, 7); // one line, one fence
        m.write_nt(8192, &[2; 130]); // three lines
        m.fence(Fence::Sfence);
        assert_eq!(m.counts(), (128 + 64 + 192, 2));
    }
}
