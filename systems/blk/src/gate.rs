//! Access windows: how the engine gets the right to touch PM for one access, per protection
//! mode. Everything else in the data path is one piece of code that runs inside a window and
//! sees the media through a [`View`]:
//!
//! | mode              | outside a window            | opening a write window                      |
//! |-------------------|-----------------------------|---------------------------------------------|
//! | none              | read-write                  | nothing                                     |
//! | pt, pt-batch      | read-only (`mprotect`)      | `mprotect` the pages read-write, and back   |
//! | private           | no access (`PROT_NONE`)     | `mmap` the range of the file, `munmap` after |
//! | pkey              | key access-disabled (PKRU)  | WRPKRU to enable, WRPKRU to restore         |
//! | kernel            | read-only, for good         | nothing: stores become `pwrite` on the file |

use crate::error::{BlkError, Result};
use crate::options::{EngineOptions, Protect};
use crate::stripes::Stripes;
use parking_lot::Mutex;
use pmkit_media::protect::{Access, Pkey};
use pmkit_media::{Domain, Fence, Flush, KernelWriter, Media, MediaError, Region, RegionKind};
use std::sync::atomic::{AtomicU64, Ordering};

/// The media as seen from inside a window. Offsets are always media offsets.
pub enum View<'a, M> {
    /// The media itself.
    Main(&'a M),
    /// A private window: media offset `off` is window offset `off - base`.
    Window { win: &'a Region, base: usize },
    /// For a `private` barrier: flushes map a short window of their own; nothing else allowed.
    Lazy {
        region: &'a Region,
        err: &'a Mutex<Option<MediaError>>,
    },
    /// `kernel`: loads, flushes and fences on the (read-only) media; stores go through the
    /// kernel. With no writer (the crash simulator) a store is what the kernel does on DAX: a
    /// non-temporal copy, durable at return.
    Kernel {
        m: &'a M,
        kw: Option<&'a KernelWriter>,
        err: &'a Mutex<Option<MediaError>>,
    },
}

impl<M: Media> View<'_, M> {
    /// Store consecutive aligned 8-byte words at `off`, each atomically (not flushed). Through
    /// the kernel this is one `pwrite` for all of them: the kernel's DAX copy stores aligned
    /// words whole, and on emulated PM only the process can die, never mid-word.
    pub fn store_words(&self, off: usize, words: &[u64]) {
        match self {
            View::Kernel {
                m,
                kw: Some(kw),
                err,
            } if words.len() > 1 => {
                let mut bytes = [0u8; 8 * MAX_WORDS];
                assert!(
                    words.len() <= MAX_WORDS,
                    "at most {MAX_WORDS} words per call"
                );
                for (b, w) in bytes.chunks_exact_mut(8).zip(words) {
                    b.copy_from_slice(&w.to_le_bytes());
                }
                Self::kernel_store(m, Some(kw), err, off, &bytes[..8 * words.len()], false);
            }
            _ => {
                for (j, &w) in words.iter().enumerate() {
                    self.store_u64(off + 8 * j, w);
                }
            }
        }
    }

    /// A store through the kernel, with `write_nt`'s meaning (durable after the next fence)
    /// when `nt`, else a cached store's (durable once flushed).
    fn kernel_store(
        m: &M,
        kw: Option<&KernelWriter>,
        err: &Mutex<Option<MediaError>>,
        off: usize,
        src: &[u8],
        nt: bool,
    ) {
        let Some(kw) = kw else {
            m.write_nt(off, src);
            m.fence(Fence::Sfence);
            return;
        };
        if let Err(e) = kw.write(off, src) {
            err.lock().get_or_insert(e);
            return;
        }
        // On a plain file the kernel stored into the page cache with cached stores: write back
        // the lines so a fence makes them durable as after non-temporal stores (msync then
        // writes the pages, as for every mode there).
        if nt && !kw.durable_at_return() && m.domain() == Domain::Adr {
            m.flush(off, src.len(), Flush::best());
        }
    }
}

impl<M: Media> Media for View<'_, M> {
    fn len(&self) -> usize {
        match self {
            View::Main(m) => m.len(),
            View::Window { win, base } => win.len() + base,
            View::Lazy { region, .. } => region.len(),
            View::Kernel { m, .. } => m.len(),
        }
    }
    fn domain(&self) -> Domain {
        match self {
            View::Main(m) => m.domain(),
            View::Window { win, .. } => win.domain(),
            View::Lazy { region, .. } => region.domain(),
            View::Kernel { m, .. } => m.domain(),
        }
    }
    fn first_bad(&self, off: usize, len: usize) -> Option<usize> {
        match self {
            View::Main(m) => m.first_bad(off, len),
            View::Window { win, base } => win.first_bad(off - base, len).map(|o| o + base),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { m, .. } => m.first_bad(off, len),
        }
    }
    #[inline]
    fn read(&self, off: usize, dst: &mut [u8]) {
        match self {
            View::Main(m) => m.read(off, dst),
            View::Window { win, base } => win.read(off - base, dst),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { m, .. } => m.read(off, dst),
        }
    }
    #[inline]
    fn write(&self, off: usize, src: &[u8]) {
        match self {
            View::Main(m) => m.write(off, src),
            View::Window { win, base } => win.write(off - base, src),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { m, kw, err } => Self::kernel_store(m, *kw, err, off, src, false),
        }
    }
    #[inline]
    fn write_nt(&self, off: usize, src: &[u8]) {
        match self {
            View::Main(m) => m.write_nt(off, src),
            View::Window { win, base } => win.write_nt(off - base, src),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { m, kw, err } => Self::kernel_store(m, *kw, err, off, src, true),
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
            View::Lazy { region, err } => match region.window(off, len, Access::Read) {
                // Cache lines are tagged by physical address: flushing through a new mapping
                // of the same file page writes back what the earlier window stored.
                Ok(w) => w.media().flush(w.offset_of(off), len, how),
                Err(e) => {
                    err.lock().get_or_insert(e);
                }
            },
        }
    }
    #[inline]
    fn fence(&self, kind: Fence) {
        match self {
            View::Main(m) => m.fence(kind),
            View::Window { win, .. } => win.fence(kind),
            View::Lazy { region, .. } => region.fence(kind),
            View::Kernel { m, .. } => m.fence(kind),
        }
    }
    fn sync_pages(&self, off: usize, len: usize) -> pmkit_media::Result<()> {
        match self {
            View::Main(m) => m.sync_pages(off, len),
            View::Window { win, base } => win.sync_pages(off - base, len),
            // msync writes back the file's pages whatever the rights of this mapping.
            View::Lazy { region, .. } => region.msync(off, len),
            View::Kernel { m, .. } => m.sync_pages(off, len),
        }
    }
    fn load_u64(&self, off: usize) -> u64 {
        match self {
            View::Main(m) => m.load_u64(off),
            View::Window { win, base } => win.load_u64(off - base),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { m, .. } => m.load_u64(off),
        }
    }
    fn store_u64(&self, off: usize, v: u64) {
        match self {
            View::Main(m) => m.store_u64(off, v),
            View::Window { win, base } => win.store_u64(off - base, v),
            View::Lazy { .. } => lazy_misuse(),
            View::Kernel { m, kw, err } => {
                Self::kernel_store(m, *kw, err, off, &v.to_le_bytes(), false)
            }
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
    panic!("the kernel write path has no compare-and-swap; the engine does not use one on PM")
}

fn lazy_misuse() -> ! {
    panic!("a barrier view only flushes and syncs; data access must open a window")
}

/// Most words one [`View::store_words`] call takes (a chunk of the atomic map).
pub const MAX_WORDS: usize = 16;

/// The protection mode's way of opening windows.
pub enum Gate {
    /// `none`.
    Open,
    /// `pt` and `pt-batch`: the region is read-only; a write window makes its pages writable.
    /// Windows over one page are serialized (a closing window must not revoke another's rights).
    Pages { locks: Stripes },
    /// `private`: the region's own mapping has no access; each access maps the file range.
    Private,
    /// `pkey`: the region carries this key, access-disabled in every thread outside a window.
    Pkey(Pkey),
    /// `kernel`: the region is read-only for good; writes go through this writer (`None` on
    /// the crash simulator, which models the kernel's DAX copy).
    Kernel(Option<KernelWriter>),
}

/// Counts of windows opened (protection-mode cost, for the statistics).
#[derive(Default)]
pub struct WindowCount {
    pub opened: AtomicU64,
}

impl Gate {
    /// Put `region` under this gate's protection (at open).
    pub fn protect(&self, region: Option<&Region>) -> Result<()> {
        match (self, region) {
            (Gate::Open, _) | (Gate::Kernel(None), None) => {}
            (Gate::Pages { .. } | Gate::Kernel(Some(_)), Some(r)) => {
                r.set_access(0, r.len(), Access::Read)?
            }
            (Gate::Private, Some(r)) => r.set_access(0, r.len(), Access::None)?,
            (Gate::Pkey(k), Some(r)) => {
                r.set_pkey(k, Access::ReadWrite)?;
                k.deny_this_thread();
            }
            (Gate::Kernel(None), Some(_)) => unreachable!("a region always gets a kernel writer"),
            (_, None) => unreachable!("protection modes are refused on media without a region"),
        }
        Ok(())
    }

    /// Give the region back its ordinary rights (at close), so a caller holding the mapping
    /// can use it again. Best-effort for pkey: the pages keep their key.
    pub fn unprotect(&self, region: Option<&Region>) -> Result<()> {
        if let (Gate::Pages { .. } | Gate::Private | Gate::Kernel(_), Some(r)) = (self, region) {
            r.set_access(0, r.len(), Access::ReadWrite)?;
        }
        Ok(())
    }

    /// Run `f` with write (and read) rights to media bytes `[off, off+len)`.
    #[inline]
    pub fn write<M: Media, R>(
        &self,
        m: &M,
        off: usize,
        len: usize,
        count: &WindowCount,
        f: impl FnOnce(&View<'_, M>) -> R,
    ) -> Result<R> {
        match self {
            Gate::Open => Ok(f(&View::Main(m))),
            Gate::Pkey(k) => {
                let _w = k.open_write();
                Ok(f(&View::Main(m)))
            }
            Gate::Kernel(kw) => {
                let err = Mutex::new(None);
                let out = f(&View::Kernel {
                    m,
                    kw: kw.as_ref(),
                    err: &err,
                });
                match err.into_inner() {
                    Some(e) => Err(e.into()),
                    None => Ok(out),
                }
            }
            Gate::Pages { locks } => {
                let r = m.mapping().expect("pt needs a region");
                let _g = locks.lock(off, len, true);
                count.opened.fetch_add(1, Ordering::Relaxed);
                r.set_access(off, len, Access::ReadWrite)?;
                let out = f(&View::Main(m));
                r.set_access(off, len, Access::Read)?;
                Ok(out)
            }
            Gate::Private => {
                let r = m.mapping().expect("private needs a region");
                count.opened.fetch_add(1, Ordering::Relaxed);
                let w = r.window(off, len, Access::ReadWrite)?;
                let out = f(&View::Window {
                    win: w.media(),
                    base: off - w.offset_of(off),
                });
                drop(w);
                Ok(out)
            }
        }
    }

    /// Run `f` with read rights to media bytes `[off, off+len)`.
    #[inline]
    pub fn read<M: Media, R>(
        &self,
        m: &M,
        off: usize,
        len: usize,
        count: &WindowCount,
        f: impl FnOnce(&View<'_, M>) -> R,
    ) -> Result<R> {
        match self {
            Gate::Open | Gate::Pages { .. } | Gate::Kernel(_) => Ok(f(&View::Main(m))),
            Gate::Pkey(k) => {
                let _w = k.open_read();
                Ok(f(&View::Main(m)))
            }
            Gate::Private => {
                let r = m.mapping().expect("private needs a region");
                count.opened.fetch_add(1, Ordering::Relaxed);
                let w = r.window(off, len, Access::Read)?;
                Ok(f(&View::Window {
                    win: w.media(),
                    base: off - w.offset_of(off),
                }))
            }
        }
    }

    /// Run `f` (a write barrier: flushes and syncs over any part of the media) with the rights
    /// it needs.
    pub fn barrier<M: Media, R>(&self, m: &M, f: impl FnOnce(&View<'_, M>) -> R) -> Result<R> {
        match self {
            // Flushes and msync need only read rights.
            Gate::Open | Gate::Pages { .. } | Gate::Kernel(_) => Ok(f(&View::Main(m))),
            Gate::Pkey(k) => {
                let _w = k.open_read();
                Ok(f(&View::Main(m)))
            }
            Gate::Private => {
                let region = m.mapping().expect("private needs a region");
                let err = Mutex::new(None);
                let out = f(&View::Lazy { region, err: &err });
                match err.into_inner() {
                    Some(e) => Err(e.into()),
                    None => Ok(out),
                }
            }
        }
    }
}

impl Gate {
    /// Pick the protection mode and build its gate, applying the user's fallback for pkey.
    /// (Kept beside the gates it builds: the policy of which mode runs where.)
    pub(crate) fn resolve<M: Media>(
        m: &M,
        o: &EngineOptions,
        notes: &mut Vec<String>,
    ) -> Result<(Protect, Gate)> {
        let region = m.mapping();
        let file_backed =
            region.is_some_and(|r| r.file().is_some() && r.kind() != RegionKind::DevDax);
        let pku = pmkit_media::features().pku;
        let why_not = |p: Protect| -> Option<String> {
            match p {
                Protect::None => None,
                // On the simulator, `kernel` models the kernel's DAX copy (no file needed).
                Protect::Kernel if region.is_none() => None,
                // Read-only opens never get here (they run unprotected), so the kind decides.
                Protect::Kernel => KernelWriter::supports(region.unwrap()).err().map(|e| e.to_string()),
                _ if region.is_none() => Some("it needs a real mapping (this media is a simulator)".into()),
                Protect::Pkey if !pku => Some("this CPU or kernel has no memory protection keys (pku/ospke)".into()),
                Protect::Private if !file_backed => {
                    Some("it needs a region backed by a regular or DAX file (not anonymous memory or device-dax)".into())
                }
                _ => None,
            }
        };
        let want = match o.protect {
            Some(p) => p,
            None => {
                let (p, why) = default_protect(region);
                if p != Protect::Pkey {
                    notes.push(format!("protection {p}: {why}"));
                }
                p
            }
        };
        let build = |p: Protect| -> Result<Gate> {
            if let Some(why) = why_not(p) {
                return Err(BlkError::ProtectUnavailable {
                    mode: p.name(),
                    why,
                });
            }
            Ok(match p {
                Protect::None => Gate::Open,
                Protect::Pt | Protect::PtBatch => Gate::Pages {
                    locks: Stripes::default(),
                },
                Protect::Private => Gate::Private,
                Protect::Kernel => Gate::Kernel(region.map(KernelWriter::new).transpose()?),
                Protect::Pkey => Gate::Pkey(pmkit_media::protect::Pkey::alloc().map_err(|e| {
                    BlkError::ProtectUnavailable {
                        mode: "pkey",
                        why: format!("cannot allocate a protection key: {e}"),
                    }
                })?),
            })
        };
        match build(want) {
            Ok(g) => Ok((want, g)),
            Err(BlkError::ProtectUnavailable { why, .. })
                if want == Protect::Pkey && o.pkey_fallback.is_some() =>
            {
                let fb = o.pkey_fallback.unwrap();
                notes.push(format!(
                    "pkey protection is not available ({why}); falling back to {fb} as asked"
                ));
                Ok((fb, build(fb)?))
            }
            Err(BlkError::ProtectUnavailable { mode, why }) => Err(BlkError::ProtectUnavailable {
                mode,
                why: format!("{why}; choose another protection mode (or a pkey fallback)"),
            }),
            Err(e) => Err(e),
        }
    }
}

/// The protection `--protect` defaults to on `region` (`None`: the crash simulator), and why.
pub fn default_protect(region: Option<&Region>) -> (Protect, String) {
    let Some(r) = region else {
        return (
            Protect::None,
            "the simulator has no mapping to protect".into(),
        );
    };
    if pmkit_media::features().pku {
        return (
            Protect::Pkey,
            "this CPU has memory protection keys: PM is behind a key every thread has disabled, \
             opened per access by WRPKRU"
                .into(),
        );
    }
    // No keys: the kernel write path protects as well against stray stores at a fraction of
    // the cost of mprotect or mmap windows; without a writable file (anonymous memory,
    // device-dax) page-rights windows are what is left.
    match KernelWriter::supports(r) {
        Ok(()) => (
            Protect::Kernel,
            "this CPU has no memory protection keys (pkey); PM stays mapped read-only and writes \
             go through the kernel (pwrite)"
                .into(),
        ),
        Err(e) => (
            Protect::Pt,
            format!(
                "this CPU has no memory protection keys (pkey) and there is no kernel write path \
                 ({e}); PM stays read-only and each write opens an mprotect window"
            ),
        ),
    }
}
