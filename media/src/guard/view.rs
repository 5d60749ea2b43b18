//! The media as seen from inside a window: what a system's code runs against while the gate
//! has given it the rights it asked for. Offsets are always media offsets.

use super::poison::Poison;
use crate::kernel_write::KernelWriter;
use crate::protect::Access;
use crate::{Domain, Fence, Flush, Media, Region};

/// Most words one [`View::store_words`] call takes.
pub const MAX_WORDS: usize = 16;

pub enum View<'a, M> {
    /// The media itself (`none`, `pt`, `pkey`: the rights are already in place).
    Main(&'a M),
    /// A `private` window: media offset `off` is window offset `off - base`.
    Window { win: &'a Region, base: usize },
    /// A `private` barrier: flushes map a short window of their own; nothing else allowed.
    Lazy {
        region: &'a Region,
        poison: &'a Poison,
    },
    /// `kernel`: loads, flushes and fences on the read-only media; stores through the kernel.
    /// With no writer (the crash simulator) a store is what the kernel does on DAX: a
    /// non-temporal copy, durable at return.
    Kernel {
        m: &'a M,
        kw: Option<&'a KernelWriter>,
        poison: &'a Poison,
    },
}

impl<M: Media> View<'_, M> {
    /// Store consecutive aligned 8-byte words at `off`, each atomically (not flushed). Through
    /// the kernel this is one `pwrite` for all of them: the kernel's DAX copy stores aligned
    /// words whole, and on emulated PM only the process can die, never mid-word.
    pub fn store_words(&self, off: usize, words: &[u64]) {
        assert!(
            words.len() <= MAX_WORDS,
            "at most {MAX_WORDS} words per call"
        );
        match self {
            View::Kernel { .. } if words.len() > 1 => {
                let mut bytes = [0u8; 8 * MAX_WORDS];
                for (b, w) in bytes.chunks_exact_mut(8).zip(words) {
                    b.copy_from_slice(&w.to_le_bytes());
                }
                self.kernel_store(off, &bytes[..8 * words.len()], false);
            }
            _ => {
                for (j, &w) in words.iter().enumerate() {
                    self.store_u64(off + 8 * j, w);
                }
            }
        }
    }

    /// `body`, then the 8-byte `word` right after it, stored atomically (a record whose last
    /// word says it is whole), not flushed. Through the kernel it is one `pwrite`: the kernel's
    /// copy (on DAX, 8-byte non-temporal stores) keeps the word whole, and two calls would not
    /// order the word after the body either (no fence between the calls' streaming stores).
    pub fn write_then_word(&self, off: usize, body: &[u8], word: u64) {
        let end = off + body.len();
        assert!(end.is_multiple_of(8), "word at unaligned {end}");
        match self {
            View::Kernel { .. } => {
                let mut all = [0u8; 256];
                assert!(
                    body.len() + 8 <= all.len(),
                    "record of {} bytes",
                    body.len()
                );
                all[..body.len()].copy_from_slice(body);
                all[body.len()..body.len() + 8].copy_from_slice(&word.to_le_bytes());
                self.kernel_store(off, &all[..body.len() + 8], false);
            }
            _ => {
                self.write(off, body);
                self.store_u64(end, word);
            }
        }
    }

    /// A store through the kernel, with `write_nt`'s meaning (durable after the next fence)
    /// when `nt`, else a cached store's (durable once flushed). The first failed write poisons
    /// the gate; from then on every store is dropped (see the module docs of `guard`).
    fn kernel_store(&self, off: usize, src: &[u8], nt: bool) {
        let View::Kernel { m, kw, poison } = self else {
            unreachable!("kernel_store outside a kernel view")
        };
        if poison.is_set() {
            return;
        }
        let Some(kw) = kw else {
            m.write_nt(off, src);
            m.fence(Fence::Sfence);
            return;
        };
        if let Err(e) = kw.write(off, src) {
            poison.set(e.to_string());
            return;
        }
        if nt {
            kw.flush_after(*m, off, src.len());
        }
    }

    /// A `kernel` store from memory others may change (read by the kernel, never as a slice).
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes during the call.
    unsafe fn kernel_store_from(&self, off: usize, src: *const u8, len: usize) {
        let View::Kernel { m, kw, poison } = self else {
            unreachable!("kernel_store_from outside a kernel view")
        };
        if poison.is_set() {
            return;
        }
        let Some(kw) = kw else {
            // SAFETY: the caller's contract.
            unsafe { m.write_nt_from(off, src, len) };
            m.fence(Fence::Sfence);
            return;
        };
        // SAFETY: the caller's contract.
        if let Err(e) = unsafe { kw.write_from(off, src, len) } {
            poison.set(e.to_string());
            return;
        }
        kw.flush_after(*m, off, len);
    }
}

impl<M: Media> Media for View<'_, M> {
    fn len(&self) -> usize {
        match self {
            View::Main(m) | View::Kernel { m, .. } => m.len(),
            View::Window { win, base } => win.len() + base,
            View::Lazy { region, .. } => region.len(),
        }
    }
    fn domain(&self) -> Domain {
        match self {
            View::Main(m) | View::Kernel { m, .. } => m.domain(),
            View::Window { win, .. } => win.domain(),
            View::Lazy { region, .. } => region.domain(),
        }
    }
    fn first_bad(&self, off: usize, len: usize) -> Option<usize> {
        match self {
            View::Main(m) | View::Kernel { m, .. } => m.first_bad(off, len),
            View::Window { win, base } => win.first_bad(off - base, len).map(|o| o + base),
            View::Lazy { region, .. } => region.first_bad(off, len),
        }
    }
    #[inline]
    fn read(&self, off: usize, dst: &mut [u8]) {
        match self {
            View::Main(m) | View::Kernel { m, .. } => m.read(off, dst),
            View::Window { win, base } => win.read(off - base, dst),
            View::Lazy { .. } => lazy_misuse(),
        }
    }
    unsafe fn read_into(&self, off: usize, dst: *mut u8, len: usize) {
        match self {
            // SAFETY: the caller's contract is the same.
            View::Main(m) | View::Kernel { m, .. } => unsafe { m.read_into(off, dst, len) },
            // SAFETY: as above.
            View::Window { win, base } => unsafe { win.read_into(off - base, dst, len) },
            View::Lazy { .. } => lazy_misuse(),
        }
    }
    #[inline]
    fn write(&self, off: usize, src: &[u8]) {
        match self {
            View::Main(m) => m.write(off, src),
            View::Window { win, base } => win.write(off - base, src),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { .. } => self.kernel_store(off, src, false),
        }
    }
    #[inline]
    fn write_nt(&self, off: usize, src: &[u8]) {
        match self {
            View::Main(m) => m.write_nt(off, src),
            View::Window { win, base } => win.write_nt(off - base, src),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { .. } => self.kernel_store(off, src, true),
        }
    }
    fn write_nt_crc32c(&self, off: usize, src: &[u8], crc: u32) -> u32 {
        match self {
            View::Main(m) => m.write_nt_crc32c(off, src, crc),
            View::Window { win, base } => win.write_nt_crc32c(off - base, src, crc),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { .. } => {
                self.kernel_store(off, src, true);
                crc32c::crc32c_append(crc, src)
            }
        }
    }
    unsafe fn write_nt_from(&self, off: usize, src: *const u8, len: usize) {
        match self {
            // SAFETY: the caller's contract is the same.
            View::Main(m) => unsafe { m.write_nt_from(off, src, len) },
            // SAFETY: as above.
            View::Window { win, base } => unsafe { win.write_nt_from(off - base, src, len) },
            View::Lazy { .. } => lazy_misuse(),
            // SAFETY: as above.
            View::Kernel { .. } => unsafe { self.kernel_store_from(off, src, len) },
        }
    }
    #[inline]
    fn flush(&self, off: usize, len: usize, how: Flush) {
        match self {
            View::Main(m) => m.flush(off, len, how),
            View::Window { win, base } => win.flush(off - base, len, how),
            // A write through the kernel to DAX or emulated PM is durable already.
            View::Kernel { kw: Some(kw), .. } if kw.durable_at_return() => {}
            View::Kernel { m, .. } => m.flush(off, len, how),
            View::Lazy { region, poison } => match region.window(off, len, Access::Read) {
                // Cache lines are tagged by physical address: flushing through a new mapping
                // of the same file page writes back what the earlier window stored.
                Ok(w) => w.media().flush(w.offset_of(off), len, how),
                Err(e) => poison.set(e.to_string()),
            },
        }
    }
    #[inline]
    fn fence(&self, kind: Fence) {
        match self {
            View::Main(m) | View::Kernel { m, .. } => m.fence(kind),
            View::Window { win, .. } => win.fence(kind),
            View::Lazy { region, .. } => region.fence(kind),
        }
    }
    fn sync_pages(&self, off: usize, len: usize) -> crate::Result<()> {
        match self {
            View::Main(m) | View::Kernel { m, .. } => m.sync_pages(off, len),
            View::Window { win, base } => win.sync_pages(off - base, len),
            // msync writes back the file's pages whatever the rights of this mapping.
            View::Lazy { region, .. } => region.msync(off, len),
        }
    }
    fn load_u64(&self, off: usize) -> u64 {
        match self {
            View::Main(m) | View::Kernel { m, .. } => m.load_u64(off),
            View::Window { win, base } => win.load_u64(off - base),
            View::Lazy { .. } => lazy_misuse(),
        }
    }
    fn store_u64(&self, off: usize, v: u64) {
        match self {
            View::Main(m) => m.store_u64(off, v),
            View::Window { win, base } => win.store_u64(off - base, v),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { .. } => self.kernel_store(off, &v.to_le_bytes(), false),
        }
    }
    fn load_u128(&self, off: usize) -> u128 {
        match self {
            View::Main(m) | View::Kernel { m, .. } => m.load_u128(off),
            View::Window { win, base } => win.load_u128(off - base),
            View::Lazy { .. } => lazy_misuse(),
        }
    }
    fn store_u128(&self, off: usize, v: u128) {
        match self {
            View::Main(m) => m.store_u128(off, v),
            View::Window { win, base } => win.store_u128(off - base, v),
            View::Lazy { .. } => lazy_misuse(),
            // One pwrite of the 16 aligned bytes: atomic for readers only under the callers'
            // locks (the kernel's copy is 8-byte stores), which is how PMFS uses it.
            View::Kernel { .. } => self.kernel_store(off, &v.to_le_bytes(), false),
        }
    }
    fn cas_u64(&self, off: usize, current: u64, new: u64) -> std::result::Result<u64, u64> {
        match self {
            View::Main(m) => m.cas_u64(off, current, new),
            View::Window { win, base } => win.cas_u64(off - base, current, new),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { .. } => kernel_misuse(),
        }
    }
    fn cas_u128(&self, off: usize, current: u128, new: u128) -> std::result::Result<u128, u128> {
        match self {
            View::Main(m) => m.cas_u128(off, current, new),
            View::Window { win, base } => win.cas_u128(off - base, current, new),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { .. } => kernel_misuse(),
        }
    }
}

fn kernel_misuse() -> ! {
    panic!("the kernel write path has no compare-and-swap on PM; no system uses one there")
}

fn lazy_misuse() -> ! {
    panic!("a barrier view only flushes and syncs; data access must open a window")
}
