//! The one module that stores to PM. Every load, store, flush and fence of the file system
//! passes here, so protection (`protect.rs`: pkey windows, the kernel write path) is applied in
//! one place, and the counters (bytes journaled, fences) are exact.
//!
//! In `kernel` mode a store is a `pwrite` and can fail (an I/O error from the file behind the
//! mapping). The first failure *poisons* the mount: that store and every later one are dropped,
//! so the media stops changing exactly there, as if the machine had crashed at that store (the
//! state the crash suite proves recovery handles), and every write operation from then on fails with
//! `Error::WriteFailed` (EIO); reads see the media as it was left. The next mount recovers.

use crate::error::{Error, Result};
use crate::layout::LINE;
use crate::protect::{Gate, Protect};
use crate::tally::{Counters, Tally};
use pmkit_media::protect::PkeyWindow;
use pmkit_media::{Domain, Fence, Flush, Media};
use std::sync::OnceLock;

/// Test-only fault injection: drop one ordering step so the crash suite must see violations.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Skip the fence between applying a transaction's writes and its commit entry.
    pub skip_apply_fence: bool,
    /// Skip the fence between the undo entries and the in-place writes.
    pub skip_log_fence: bool,
    /// Publish a one-fence append's size without its tail record (`tail.rs`).
    pub skip_tail_record: bool,
}

pub struct Pm<M> {
    m: M,
    adr: bool,
    pub(crate) faults: Faults,
    gate: Gate,
    /// The protection mode in force and why it was chosen.
    mode: (Protect, String),
    /// The first failed kernel write: the mount is poisoned (see the module docs).
    failed: OnceLock<String>,
    tally: Tally,
    /// Emulated persistence-barrier latency added to every fence (0: none).
    barrier_ns: u64,
}

impl<M: Media> Pm<M> {
    /// PM without protection (mkfs, check).
    pub fn new(m: M, faults: Faults) -> Pm<M> {
        Self::with_gate(
            m,
            faults,
            Gate::Open,
            (Protect::None, "mkfs or check".into()),
        )
    }

    /// PM under protection mode `want` (resolved and applied to the mapping now).
    pub fn protected(m: M, faults: Faults, want: Protect) -> Result<Pm<M>> {
        let (gate, mode, why) = Gate::resolve(&m, want)?;
        Ok(Self::with_gate(m, faults, gate, (mode, why)))
    }

    fn with_gate(m: M, faults: Faults, gate: Gate, mode: (Protect, String)) -> Pm<M> {
        let adr = m.domain() == Domain::Adr;
        Pm {
            m,
            adr,
            faults,
            gate,
            mode,
            failed: OnceLock::new(),
            tally: Tally::default(),
            barrier_ns: 0,
        }
    }

    /// Make every fence take at least `ns` more nanoseconds (emulating a slower barrier).
    pub fn with_barrier_ns(mut self, ns: u64) -> Pm<M> {
        self.barrier_ns = ns;
        self
    }
    pub fn media(&self) -> &M {
        &self.m
    }
    /// The protection mode in force, and why.
    pub fn protection(&self) -> (Protect, &str) {
        (self.mode.0, &self.mode.1)
    }
    /// Give the media back with its ordinary rights. Should `mprotect` fail (it cannot on a
    /// whole mapping short of running out of kernel memory), the mapping stays protected: a
    /// later store by the owner faults, loudly, rather than anything being corrupted.
    pub fn into_media(self) -> M {
        let _ = self.gate.unprotect(self.m.mapping());
        self.m
    }
    /// Record the first failed write and say so once: from here on the mount refuses writes
    /// and its pool cannot be marked clean.
    pub(crate) fn poison(&self, why: String) {
        if self.failed.set(why.clone()).is_ok() {
            tracing::error!(
                "a write to PM failed ({why}): every write from now on fails with EIO and the \
                 pool stays marked unclean; unmount, free the media's problem, and the next \
                 mount recovers it"
            );
        }
    }

    /// Fails once a kernel write has failed (the mount is poisoned).
    pub fn check(&self) -> Result<()> {
        match self.failed.get() {
            Some(e) => Err(Error::WriteFailed(e.clone())),
            None => Ok(()),
        }
    }

    /// `pt` mode: make the pages of `[off, off+len)` writable, run `store`, make them read-only
    /// again, all under `lock` (two windows on one page would otherwise close each other). A
    /// failed `mprotect` poisons the mount like a failed kernel write: the store is dropped.
    fn pt_window(
        &self,
        lock: &parking_lot::Mutex<()>,
        off: usize,
        len: usize,
        store: impl FnOnce(),
    ) {
        use pmkit_media::protect::Access;
        let r = self
            .m
            .mapping()
            .expect("pt mode is refused on media without a mapping");
        let _g = lock.lock();
        if self.failed.get().is_some() {
            return;
        }
        if let Err(e) = r.set_access(off, len, Access::ReadWrite) {
            self.poison(e.to_string());
            return;
        }
        store();
        if let Err(e) = r.set_access(off, len, Access::Read) {
            self.poison(e.to_string());
        }
    }

    /// A read window (pkey mode: loads and flushes need the key's read rights).
    #[inline]
    fn read_window(&self) -> Option<PkeyWindow> {
        match &self.gate {
            Gate::Pkey(k) => Some(k.open_read()),
            _ => None,
        }
    }

    /// Store `src` at `off`: `nt` for write_nt's meaning (durable after the next fence).
    #[inline]
    fn store(&self, off: usize, src: &[u8], nt: bool) {
        self.tally(Counters {
            bytes_written: src.len() as u64,
            ..Counters::default()
        });
        match &self.gate {
            Gate::Kernel(kw) => {
                if self.failed.get().is_some() {
                    return;
                }
                if let Err(e) = kw.write(off, src) {
                    self.poison(e.to_string());
                    return;
                }
                // On a plain file the kernel's copy is cached stores into the page cache:
                // write the lines back so the next fence orders them, as after nt stores.
                if nt && !kw.durable_at_return() && self.adr {
                    self.m.flush(off, src.len(), Flush::best());
                }
            }
            _ => self.in_window(off, src.len(), || match nt {
                true => self.m.write_nt(off, src),
                false => self.m.write(off, src),
            }),
        }
    }

    /// Run `stores` (CPU stores into `[off, off+len)`) inside the write window the gate needs:
    /// none when PM is open, the key's write rights (`pkey`), the pages made writable (`pt`).
    /// `kernel` mode makes no CPU store: its stores are `pwrite`s (`store`).
    fn in_window(&self, off: usize, len: usize, stores: impl FnOnce()) {
        match &self.gate {
            Gate::Open => stores(),
            Gate::Pkey(k) => {
                let _w = k.open_write();
                stores()
            }
            Gate::Pages(lock) => self.pt_window(lock, off, len, stores),
            Gate::Kernel(_) => unreachable!("kernel mode stores by pwrite"),
        }
    }

    pub fn read(&self, off: usize, dst: &mut [u8]) {
        let _w = self.read_window();
        self.m.read(off, dst)
    }
    pub fn read_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }
    pub fn first_bad(&self, off: usize, len: usize) -> Option<usize> {
        self.m.first_bad(off, len)
    }
    /// Cached stores; durable after `flush` and a fence.
    pub fn write(&self, off: usize, src: &[u8]) {
        self.store(off, src, false)
    }
    /// Streaming stores; durable after the next fence.
    pub fn write_nt(&self, off: usize, src: &[u8]) {
        self.store(off, src, true)
    }
    /// Every store is a system call durable at return (`kernel` protection).
    pub fn stores_are_calls(&self) -> bool {
        matches!(self.gate, Gate::Kernel(_))
    }
    /// [`Self::write_nt`] that also returns `crc32c_append(crc, src)`, computed in the copy's
    /// loop where the media can (a mapped region on a CPU with VPCLMULQDQ: the loop waits on
    /// its stores, so the CRC costs next to nothing), else beside it.
    pub fn write_nt_crc(&self, off: usize, src: &[u8], crc: u32) -> u32 {
        if self.stores_are_calls() {
            self.store(off, src, true);
            return crc32c::crc32c_append(crc, src);
        }
        self.tally(Counters {
            bytes_written: src.len() as u64,
            ..Counters::default()
        });
        let mut out = None;
        self.in_window(off, src.len(), || {
            out = Some(self.m.write_nt_crc32c(off, src, crc))
        });
        // no store (a poisoned `pt` mount, which the caller's check reports): the CRC anyway
        out.unwrap_or_else(|| crc32c::crc32c_append(crc, src))
    }
    pub fn flush(&self, off: usize, len: usize) {
        if !self.adr || len == 0 {
            return;
        }
        match &self.gate {
            // A write through the kernel to DAX or emulated PM is durable at return.
            Gate::Kernel(kw) if kw.durable_at_return() => {}
            _ => {
                let _w = self.read_window();
                self.m.flush(off, len, Flush::best());
            }
        }
    }
    pub fn fence(&self) {
        self.tally(Counters {
            fences: 1,
            ..Counters::default()
        });
        self.m.fence(Fence::Sfence);
        pmkit_media::emulate::barrier_delay(self.barrier_ns);
    }
    /// A 64-byte line whose last word says it is whole (a journal entry): the first 56 bytes,
    /// then the word as an atomic 8-byte store; not flushed. In `kernel` mode the line is one
    /// `pwrite`: the kernel's copy (on DAX, 8-byte non-temporal stores) keeps the word atomic,
    /// and two calls would not order the word after the rest either (no fence between the
    /// calls' non-temporal stores), so the second call bought nothing but a system call.
    pub fn write_line(&self, off: usize, body: &[u8; 56], word: u64) {
        assert_eq!(off % 64, 0, "line store at unaligned {off}");
        match &self.gate {
            Gate::Kernel(_) => {
                let mut line = [0u8; 64];
                line[..56].copy_from_slice(body);
                line[56..].copy_from_slice(&word.to_le_bytes());
                self.store(off, &line, false);
            }
            _ => {
                self.write(off, body);
                self.store_u64(off + 56, word);
            }
        }
    }

    /// An atomic 8-byte store (8-aligned), not flushed. In `kernel` mode a `pwrite` of the 8
    /// aligned bytes: on DAX the kernel copies them with one 8-byte non-temporal store.
    pub fn store_u64(&self, off: usize, v: u64) {
        assert_eq!(off % 8, 0, "8-byte store at unaligned {off}");
        self.store_words(off / LINE * LINE, &[(off, v)])
    }
    /// Atomic 8-byte stores, in this order, all in the line at `line` (not flushed): one
    /// protection window for all of them where a window costs (`pt`: two `mprotect` calls).
    pub fn store_words(&self, line: usize, words: &[(usize, u64)]) {
        assert_eq!(line % LINE, 0, "line at unaligned {line}");
        assert!(words
            .iter()
            .all(|&(o, _)| o / LINE == line / LINE && o % 8 == 0));
        if self.stores_are_calls() {
            for &(o, v) in words {
                self.store(o, &v.to_le_bytes(), false)
            }
            return;
        }
        self.tally(Counters {
            bytes_written: 8 * words.len() as u64,
            ..Counters::default()
        });
        self.in_window(line, LINE, || {
            for &(o, v) in words {
                self.m.store_u64(o, v)
            }
        });
    }
    /// An atomic 8-byte store, flushed and fenced.
    pub fn persist_u64(&self, off: usize, v: u64) {
        self.store_u64(off, v);
        self.flush(off, 8);
        self.fence();
    }
    /// A 16-byte store (16-aligned), flushed and fenced. Atomic for concurrent readers under
    /// `none` and `pkey`; in `kernel` mode a `pwrite` of the 16 aligned bytes, which the
    /// callers' locks make safe (see docs/fs.md, Protection).
    pub fn persist_u128(&self, off: usize, v: u128) {
        assert_eq!(off % 16, 0, "16-byte store at unaligned {off}");
        match self.stores_are_calls() {
            true => self.store(off, &v.to_le_bytes(), false),
            false => {
                self.tally(Counters {
                    bytes_written: 16,
                    ..Counters::default()
                });
                self.in_window(off, 16, || self.m.store_u128(off, v));
            }
        }
        self.flush(off, 16);
        self.fence();
    }
    pub fn note_journal(&self, bytes: u64) {
        self.tally(Counters {
            journal_bytes: bytes,
            ..Counters::default()
        });
    }
    pub fn note_tx(&self) {
        self.tally(Counters {
            transactions: 1,
            ..Counters::default()
        });
    }
    /// Add `c` to the mount's counters and to the calling thread's (no locked instruction:
    /// `tally.rs`).
    #[inline]
    fn tally(&self, c: Counters) {
        self.tally.add(c)
    }
    pub fn counters(&self) -> Counters {
        self.tally.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmkit_media::{Region, RegionOptions};

    /// A journal line lands whole in every mode: one `pwrite` in `kernel` mode, body then word
    /// otherwise (`pkey` where the CPU has protection keys; `kernel` and `pt` forced on any).
    #[test]
    fn a_line_is_its_body_then_its_word_in_every_mode() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let mut modes = vec![Protect::None, Protect::Kernel, Protect::Pt];
        if pmkit_media::features().pku {
            modes.push(Protect::Pkey);
        }
        for (i, want) in modes.into_iter().enumerate() {
            let path = dir.path().join(format!("pool{i}"));
            let r = Region::create(&path, 1 << 20, &RegionOptions::default()).unwrap();
            let pm = Pm::protected(r, Faults::default(), want).unwrap();
            assert_eq!(pm.protection().0, want);
            let body: [u8; 56] = std::array::from_fn(|k| k as u8 + 1);
            pm.write_line(4096 + 128, &body, 0x1122_3344_5566_7788);
            pm.flush(4096 + 128, 64);
            pm.fence();
            pm.check().unwrap();
            let mut got = [0u8; 64];
            pm.read(4096 + 128, &mut got);
            assert_eq!(&got[..56], &body[..], "{want}");
            assert_eq!(got[56..], 0x1122_3344_5566_7788u64.to_le_bytes(), "{want}");
        }
    }
}
