//! Media under a gate: every access a system makes goes through one window of the mode in
//! force, so the system writes the same code in every mode and never asks which one runs.

use super::gate::Gate;
use super::mode::Protect;
use super::view::View;
use crate::error::Result;
use crate::{Domain, Fence, Flush, Media, Region};

/// `M` with its protection. Implements [`Media`] with one window per call (each store, load
/// and flush gets the rights it needs and no more); [`Guarded::with_write`] and friends open
/// one window for many accesses where a system batches them.
pub struct Guarded<M> {
    // Field order is drop order: the media (the mapping) goes before the gate (the key).
    m: M,
    gate: Gate,
}

impl<M: Media> Guarded<M> {
    /// Put `m` under `want` (`None`: the one automatic policy, `guard::auto`).
    pub fn open(m: M, want: Option<Protect>, fallback: Option<Protect>) -> Result<Guarded<M>> {
        let gate = Gate::open(&m, want, fallback)?;
        Ok(Guarded { m, gate })
    }

    /// `m` with no protection (a tool that owns the media outright: mkfs, check, repair), `why`
    /// being what [`Guarded::why`] reports.
    pub fn unprotected(m: M, why: &str) -> Guarded<M> {
        Guarded {
            m,
            gate: Gate::open_unprotected(why),
        }
    }

    pub fn gate(&self) -> &Gate {
        &self.gate
    }
    pub fn mode(&self) -> Protect {
        self.gate.mode()
    }
    pub fn why(&self) -> &str {
        self.gate.why()
    }
    /// `Err(Poisoned)` once a store has failed (see the module docs of `guard`).
    pub fn check(&self) -> Result<()> {
        self.gate.check()
    }
    /// The media without protection windows: for reads before the gate matters (the mapping's
    /// own properties, the simulator's state in tests). Stores through it fault under most
    /// modes; systems store through `self`.
    pub fn inner(&self) -> &M {
        &self.m
    }
    /// Give the media back with its ordinary rights. Should `mprotect` fail (it cannot on a
    /// whole mapping short of running out of kernel memory), the mapping stays protected: a
    /// later store by the owner faults, loudly, rather than anything being corrupted.
    pub fn into_inner(self) -> M {
        let _ = self.gate.unprotect(self.m.mapping());
        self.m
    }
    /// Give the mapping back its ordinary rights now, keeping the media (a close that does not
    /// consume its owner).
    pub fn unprotect(&self) -> Result<()> {
        self.gate.unprotect(self.m.mapping())
    }

    /// Run `f` with write rights to `[off, off+len)`: one window for many stores.
    #[inline]
    pub fn with_write<R>(
        &self,
        off: usize,
        len: usize,
        f: impl FnOnce(&View<'_, M>) -> R,
    ) -> Result<R> {
        self.gate.write(&self.m, off, len, f)
    }
    /// Run `f` with read rights to `[off, off+len)`.
    #[inline]
    pub fn with_read<R>(
        &self,
        off: usize,
        len: usize,
        f: impl FnOnce(&View<'_, M>) -> R,
    ) -> Result<R> {
        self.gate.read(&self.m, off, len, f)
    }
    /// Run `f`, a barrier's flushes and syncs anywhere on the media.
    #[inline]
    pub fn with_barrier<R>(&self, f: impl FnOnce(&View<'_, M>) -> R) -> Result<R> {
        self.gate.barrier(&self.m, f)
    }
    /// [`View::write_then_word`] in its own window: a record whose last word says it is whole.
    pub fn write_then_word(&self, off: usize, body: &[u8], word: u64) {
        let _ = self.with_write(off, body.len() + 8, |v| v.write_then_word(off, body, word));
    }
    /// [`View::store_words`] in one window.
    pub fn store_words(&self, off: usize, words: &[u64]) {
        let _ = self.with_write(off, 8 * words.len(), |v| v.store_words(off, words));
    }

    /// A read that cannot fail: only `private` windows can (out of kernel memory for a map),
    /// and then the bytes are unknown; the read gives zeroes and the gate is poisoned.
    fn load<R>(&self, off: usize, len: usize, f: impl FnOnce(&View<'_, M>) -> R) -> Option<R> {
        match self.with_read(off, len, f) {
            Ok(r) => Some(r),
            Err(e) => {
                self.gate.inject_failure(&e.to_string());
                None
            }
        }
    }
}

/// Every per-call access opens its window; a failed store poisons the gate (it cannot be
/// returned here) and the system sees it at its next [`Guarded::check`].
impl<M: Media> Media for Guarded<M> {
    fn len(&self) -> usize {
        self.m.len()
    }
    fn domain(&self) -> Domain {
        self.m.domain()
    }
    fn mapping(&self) -> Option<&Region> {
        self.m.mapping()
    }
    fn first_bad(&self, off: usize, len: usize) -> Option<usize> {
        self.m.first_bad(off, len)
    }
    #[inline]
    fn read(&self, off: usize, dst: &mut [u8]) {
        if self.gate.direct_loads() {
            return self.m.read(off, dst);
        }
        if self.load(off, dst.len(), |v| v.read(off, dst)).is_none() {
            dst.fill(0);
        }
    }
    unsafe fn read_into(&self, off: usize, dst: *mut u8, len: usize) {
        if self.gate.direct_loads() {
            // SAFETY: the caller's contract is the same.
            return unsafe { self.m.read_into(off, dst, len) };
        }
        // SAFETY: the caller's contract is the same.
        let _ = self.load(off, len, |v| unsafe { v.read_into(off, dst, len) });
    }
    #[inline]
    fn write(&self, off: usize, src: &[u8]) {
        if self.gate.direct_stores() {
            return self.m.write(off, src);
        }
        let _ = self.with_write(off, src.len(), |v| v.write(off, src));
    }
    #[inline]
    fn write_nt(&self, off: usize, src: &[u8]) {
        if self.gate.direct_stores() {
            return self.m.write_nt(off, src);
        }
        let _ = self.with_write(off, src.len(), |v| v.write_nt(off, src));
    }
    fn write_nt_crc32c(&self, off: usize, src: &[u8], crc: u32) -> u32 {
        self.with_write(off, src.len(), |v| v.write_nt_crc32c(off, src, crc))
            .unwrap_or_else(|_| crc32c::crc32c_append(crc, src))
    }
    unsafe fn write_nt_from(&self, off: usize, src: *const u8, len: usize) {
        // SAFETY: the caller's contract is the same.
        let _ = self.with_write(off, len, |v| unsafe { v.write_nt_from(off, src, len) });
    }
    #[inline]
    fn flush(&self, off: usize, len: usize, how: Flush) {
        if self.gate.direct_stores() {
            return self.m.flush(off, len, how);
        }
        let _ = self.with_barrier(|v| v.flush(off, len, how));
    }
    #[inline]
    fn fence(&self, kind: Fence) {
        self.m.fence(kind)
    }
    fn sync_pages(&self, off: usize, len: usize) -> Result<()> {
        self.with_barrier(|v| v.sync_pages(off, len))?
    }
    #[inline]
    fn load_u64(&self, off: usize) -> u64 {
        if self.gate.direct_loads() {
            return self.m.load_u64(off);
        }
        self.load(off, 8, |v| v.load_u64(off)).unwrap_or(0)
    }
    fn store_u64(&self, off: usize, v: u64) {
        let _ = self.with_write(off, 8, |w| w.store_u64(off, v));
    }
    fn store_u128(&self, off: usize, v: u128) {
        let _ = self.with_write(off, 16, |w| w.store_u128(off, v));
    }
    fn load_u128(&self, off: usize) -> u128 {
        if self.gate.direct_loads() {
            return self.m.load_u128(off);
        }
        self.load(off, 16, |v| v.load_u128(off)).unwrap_or(0)
    }
    fn cas_u64(&self, off: usize, current: u64, new: u64) -> std::result::Result<u64, u64> {
        // Poisoned: the store is dropped as every other is, and the caller goes on as after a
        // successful one (never spinning on a CAS that cannot succeed) to fail at its check.
        self.with_write(off, 8, |v| v.cas_u64(off, current, new))
            .unwrap_or(Ok(current))
    }
    fn cas_u128(&self, off: usize, current: u128, new: u128) -> std::result::Result<u128, u128> {
        self.with_write(off, 16, |v| v.cas_u128(off, current, new))
            .unwrap_or(Ok(current))
    }
}
