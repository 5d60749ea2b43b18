//! The file system's one path to PM. Every load, store, flush and fence passes here: it adds
//! the file system's counters (bytes journaled, fences) and its test faults, and goes through
//! the media's protection (`pmkit_media::guard`), which gives each access its rights in the
//! mode in force. The rule for a store that fails (the first one poisons the mount: it and
//! every later store are dropped, as in a crash at that store, and every later write fails
//! with `Error::WriteFailed`) is the guard's; see `docs/ARCHITECTURE.md`, Protection.

use crate::error::{Error, Result};
use crate::layout::LINE;
use crate::tally::{Counters, Tally};
use pmkit_media::guard::Guarded;
use pmkit_media::{Domain, Fence, Flush, Media, MediaError, Protect};

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

pub(crate) struct Pm<M> {
    g: Guarded<M>,
    adr: bool,
    pub(crate) faults: Faults,
    tally: Tally,
    /// Emulated persistence-barrier latency added to every fence (0: none).
    barrier_ns: u64,
}

impl<M: Media> Pm<M> {
    /// PM without protection (mkfs, check).
    pub(crate) fn new(m: M, faults: Faults) -> Pm<M> {
        Self::with(Guarded::unprotected(m, "mkfs or check"), faults)
    }

    /// PM under protection mode `want` (`None`: the automatic policy), applied to the mapping
    /// now.
    pub(crate) fn protected(m: M, faults: Faults, want: Option<Protect>) -> Result<Pm<M>> {
        let g = Guarded::open(m, want, None).map_err(|e| match e {
            MediaError::ProtectUnavailable { mode, why } => Error::ProtectUnavailable { mode, why },
            // an mprotect or pkey_mprotect of the whole mapping that failed
            e => Error::ProtectUnavailable {
                mode: want.map_or("auto", Protect::name),
                why: e.to_string(),
            },
        })?;
        Ok(Self::with(g, faults))
    }

    fn with(g: Guarded<M>, faults: Faults) -> Pm<M> {
        Pm {
            adr: g.domain() == Domain::Adr,
            g,
            faults,
            tally: Tally::default(),
            barrier_ns: 0,
        }
    }

    /// Make every fence take at least `ns` more nanoseconds (emulating a slower barrier).
    pub(crate) fn with_barrier_ns(mut self, ns: u64) -> Pm<M> {
        self.barrier_ns = ns;
        self
    }
    /// The media under its protection: every access through it gets the rights it needs
    /// (never the bare media: under `pkey` or `private` a load from it faults).
    pub(crate) fn media(&self) -> &Guarded<M> {
        &self.g
    }
    /// The protection mode in force, and why.
    pub(crate) fn protection(&self) -> (Protect, &str) {
        (self.g.mode(), self.g.why())
    }
    /// Give the media back with its ordinary rights.
    pub(crate) fn into_media(self) -> M {
        self.g.into_inner()
    }
    /// Poison the mount as a failed store would (tests, and the mount's own write failures).
    pub(crate) fn poison(&self, why: String) {
        self.g.gate().inject_failure(&why)
    }

    /// Fails once a store has failed (the mount is poisoned).
    pub(crate) fn check(&self) -> Result<()> {
        self.g.check().map_err(|e| match e {
            MediaError::Poisoned { why, .. } => Error::WriteFailed(why),
            e => Error::WriteFailed(e.to_string()),
        })
    }

    #[inline]
    fn count_bytes(&self, n: usize) {
        self.tally(Counters {
            bytes_written: n as u64,
            ..Counters::default()
        });
    }

    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) {
        self.g.read(off, dst)
    }
    pub(crate) fn read_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }
    pub(crate) fn read_u32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read(off, &mut b);
        u32::from_le_bytes(b)
    }
    pub(crate) fn first_bad(&self, off: usize, len: usize) -> Option<usize> {
        self.g.first_bad(off, len)
    }
    /// Cached stores; durable after `flush` and a fence.
    pub(crate) fn write(&self, off: usize, src: &[u8]) {
        self.count_bytes(src.len());
        self.g.write(off, src)
    }
    /// Streaming stores; durable after the next fence.
    pub(crate) fn write_nt(&self, off: usize, src: &[u8]) {
        self.count_bytes(src.len());
        self.g.write_nt(off, src)
    }
    /// Every store is a system call durable at return (`kernel` protection): one store of a
    /// whole record is cheaper than a record and its separate commit word.
    pub(crate) fn stores_are_calls(&self) -> bool {
        self.g.gate().stores_are_calls()
    }
    /// [`Self::write_nt`] that also returns `crc32c_append(crc, src)`, computed in the copy's
    /// loop where the media can (a mapped region on a CPU with VPCLMULQDQ: the loop waits on
    /// its stores, so the CRC costs next to nothing), else beside it.
    pub(crate) fn write_nt_crc(&self, off: usize, src: &[u8], crc: u32) -> u32 {
        self.count_bytes(src.len());
        self.g.write_nt_crc32c(off, src, crc)
    }
    pub(crate) fn flush(&self, off: usize, len: usize) {
        if !self.adr || len == 0 {
            return;
        }
        self.g.flush(off, len, Flush::best());
    }
    pub(crate) fn fence(&self) {
        self.tally(Counters {
            fences: 1,
            ..Counters::default()
        });
        self.g.fence(Fence::Sfence);
        pmkit_media::emulate::barrier_delay(self.barrier_ns);
    }
    /// A 64-byte line whose last word says it is whole (a journal entry): the first 56 bytes,
    /// then the word as an atomic 8-byte store; not flushed.
    pub(crate) fn write_line(&self, off: usize, body: &[u8; 56], word: u64) {
        assert_eq!(off % 64, 0, "line store at unaligned {off}");
        self.count_bytes(64);
        self.g.write_then_word(off, body, word);
    }

    /// An atomic 8-byte store (8-aligned), not flushed.
    pub(crate) fn store_u64(&self, off: usize, v: u64) {
        assert_eq!(off % 8, 0, "8-byte store at unaligned {off}");
        self.store_words(off / LINE * LINE, &[(off, v)])
    }
    /// Atomic 8-byte stores, in this order, all in the line at `line` (not flushed): one
    /// protection window for all of them where a window costs (`pt`: two `mprotect` calls).
    pub(crate) fn store_words(&self, line: usize, words: &[(usize, u64)]) {
        assert_eq!(line % LINE, 0, "line at unaligned {line}");
        assert!(words
            .iter()
            .all(|&(o, _)| o / LINE == line / LINE && o % 8 == 0));
        self.count_bytes(8 * words.len());
        let _ = self.g.with_write(line, LINE, |v| {
            for &(o, w) in words {
                v.store_u64(o, w)
            }
        });
    }
    /// An atomic 8-byte store, flushed and fenced.
    pub(crate) fn persist_u64(&self, off: usize, v: u64) {
        self.store_u64(off, v);
        self.flush(off, 8);
        self.fence();
    }
    /// A 16-byte store (16-aligned), flushed and fenced. Atomic for concurrent readers under
    /// `none` and `pkey`; in `kernel` mode a `pwrite` of the 16 aligned bytes, which the
    /// callers' locks make safe (see docs/fs.md, Protection).
    pub(crate) fn persist_u128(&self, off: usize, v: u128) {
        assert_eq!(off % 16, 0, "16-byte store at unaligned {off}");
        self.count_bytes(16);
        self.g.store_u128(off, v);
        self.flush(off, 16);
        self.fence();
    }
    pub(crate) fn note_journal(&self, bytes: u64) {
        self.tally(Counters {
            journal_bytes: bytes,
            ..Counters::default()
        });
    }
    pub(crate) fn note_tx(&self) {
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
    pub(crate) fn counters(&self) -> Counters {
        self.tally.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmkit_media::{Region, RegionOptions};

    /// A journal line lands whole in every mode: one `pwrite` in `kernel` mode, body then word
    /// otherwise (`pkey` where the CPU has protection keys; the others forced on any).
    #[test]
    fn a_line_is_its_body_then_its_word_in_every_mode() {
        let dir = pmkit_testkit::scratch();
        let mut modes = vec![
            Protect::None,
            Protect::Kernel,
            Protect::Pt,
            Protect::Private,
        ];
        if pmkit_media::features().pku {
            modes.push(Protect::Pkey);
        }
        for (i, want) in modes.into_iter().enumerate() {
            let path = dir.path().join(format!("pool{i}"));
            let r = Region::create(&path, 1 << 20, &RegionOptions::default()).unwrap();
            let pm = Pm::protected(r, Faults::default(), Some(want)).unwrap();
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
