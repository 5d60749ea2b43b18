//! The one module that stores to PM. Every write, flush and fence of the file system passes
//! here, so protection (write windows, the kernel write path) can be added in one place, and
//! the counters (bytes journaled, fences) are exact.

use pmkit_media::{Domain, Fence, Flush, Media};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Test-only fault injection: drop one ordering step so the crash suite must see violations.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Skip the fence between applying a transaction's writes and its commit entry.
    pub skip_apply_fence: bool,
    /// Skip the fence between the undo entries and the in-place writes.
    pub skip_log_fence: bool,
}

/// Counters of PM traffic since mount.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub fences: u64,
    pub journal_bytes: u64,
    pub transactions: u64,
    pub bytes_written: u64,
}

pub struct Pm<M> {
    m: M,
    adr: bool,
    pub(crate) faults: Faults,
    fences: AtomicU64,
    journal_bytes: AtomicU64,
    transactions: AtomicU64,
    bytes_written: AtomicU64,
}

impl<M: Media> Pm<M> {
    pub fn new(m: M, faults: Faults) -> Pm<M> {
        let adr = m.domain() == Domain::Adr;
        Pm {
            m,
            adr,
            faults,
            fences: AtomicU64::new(0),
            journal_bytes: AtomicU64::new(0),
            transactions: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
        }
    }
    pub fn media(&self) -> &M {
        &self.m
    }
    pub fn into_media(self) -> M {
        self.m
    }
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        self.m.read(off, dst)
    }
    pub fn read_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.m.read(off, &mut b);
        u64::from_le_bytes(b)
    }
    pub fn first_bad(&self, off: usize, len: usize) -> Option<usize> {
        self.m.first_bad(off, len)
    }
    /// Cached stores; durable after `flush` and a fence.
    pub fn write(&self, off: usize, src: &[u8]) {
        self.bytes_written.fetch_add(src.len() as u64, Relaxed);
        self.m.write(off, src)
    }
    /// Streaming stores; durable after the next fence.
    pub fn write_nt(&self, off: usize, src: &[u8]) {
        self.bytes_written.fetch_add(src.len() as u64, Relaxed);
        self.m.write_nt(off, src)
    }
    pub fn flush(&self, off: usize, len: usize) {
        if self.adr && len > 0 {
            self.m.flush(off, len, Flush::best());
        }
    }
    pub fn fence(&self) {
        self.fences.fetch_add(1, Relaxed);
        self.m.fence(Fence::Sfence);
    }
    /// An atomic 8-byte store, not flushed.
    pub fn store_u64(&self, off: usize, v: u64) {
        self.bytes_written.fetch_add(8, Relaxed);
        self.m.store_u64(off, v)
    }
    /// An atomic 8-byte store, flushed and fenced.
    pub fn persist_u64(&self, off: usize, v: u64) {
        self.store_u64(off, v);
        self.flush(off, 8);
        self.fence();
    }
    /// An atomic 16-byte store (16-aligned), flushed and fenced.
    pub fn persist_u128(&self, off: usize, v: u128) {
        assert_eq!(off % 16, 0, "16-byte store at unaligned {off}");
        self.bytes_written.fetch_add(16, Relaxed);
        self.m.store_u128(off, v);
        self.flush(off, 16);
        self.fence();
    }
    pub fn note_journal(&self, bytes: u64) {
        self.journal_bytes.fetch_add(bytes, Relaxed);
    }
    pub fn note_tx(&self) {
        self.transactions.fetch_add(1, Relaxed);
    }
    pub fn counters(&self) -> Counters {
        Counters {
            fences: self.fences.load(Relaxed),
            journal_bytes: self.journal_bytes.load(Relaxed),
            transactions: self.transactions.load(Relaxed),
            bytes_written: self.bytes_written.load(Relaxed),
        }
    }
}
