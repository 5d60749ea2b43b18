//! Write schemes: how a write becomes durable. One [`Persister`] per device picks the scheme and
//! turns "store these bytes" into the right mix of stores, flushes and fences on any [`Media`].

use crate::{Domain, Fence, Flush, Media, Result};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// The ordered-persistence options of the PMBD paper, plus msync for page-granular media.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteScheme {
    /// Non-temporal stores (widest of AVX-512/AVX2/SSE2) + sfence.
    Nt,
    /// Stores + clwb + sfence.
    Clwb,
    /// Stores + clflushopt + sfence.
    Clflushopt,
    /// Stores + clflush + mfence.
    Clflush,
    /// Plain write-back stores; dirty pages tracked and flushed at a barrier (software wbinvd).
    Wb,
    /// Plain stores; dirty pages tracked and msync'ed at a barrier (a file on a disk).
    Msync,
}

impl WriteScheme {
    pub const ALL: [WriteScheme; 6] = [
        WriteScheme::Nt,
        WriteScheme::Clwb,
        WriteScheme::Clflushopt,
        WriteScheme::Clflush,
        WriteScheme::Wb,
        WriteScheme::Msync,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WriteScheme::Nt => "nt",
            WriteScheme::Clwb => "clwb",
            WriteScheme::Clflushopt => "clflushopt",
            WriteScheme::Clflush => "clflush",
            WriteScheme::Wb => "wb",
            WriteScheme::Msync => "msync",
        }
    }

    /// Whether this CPU can run the scheme.
    pub fn available(self) -> bool {
        match self {
            WriteScheme::Nt => crate::features().nt_width() > 0,
            WriteScheme::Clwb => Flush::Clwb.available(),
            WriteScheme::Clflushopt => Flush::Clflushopt.available(),
            WriteScheme::Clflush => Flush::Clflush.available(),
            WriteScheme::Wb | WriteScheme::Msync => true,
        }
    }

    /// Whether a write is durable only after [`Persister::barrier`] (not after `fence`).
    pub fn deferred(self) -> bool {
        matches!(self, WriteScheme::Wb | WriteScheme::Msync)
    }
}

impl std::fmt::Display for WriteScheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for WriteScheme {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        WriteScheme::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| format!("unknown write scheme {s:?} (expected one of nt, clwb, clflushopt, clflush, wb, msync)"))
    }
}

/// Page granularity of dirty tracking for the deferred schemes.
pub const DIRTY_PAGE: usize = 4096;

/// Turns stores into durable stores under one [`WriteScheme`].
///
/// Contract: after [`Persister::write`] returns, the bytes are durable once this thread calls
/// [`Persister::fence`] (schemes `nt`, `clwb`, `clflushopt`, `clflush`) or once anyone calls
/// [`Persister::barrier`] (every scheme). [`Persister::persist_now`] makes one range durable
/// before it returns (FUA).
pub struct Persister {
    scheme: WriteScheme,
    /// Caches are persistent: skip flushes.
    eadr: bool,
    /// One bit per [`DIRTY_PAGE`] written since the last barrier (deferred schemes only).
    dirty: Vec<AtomicU64>,
    media_len: usize,
    nt_width: usize,
}

impl Persister {
    pub fn new(scheme: WriteScheme, media_len: usize, domain: Domain) -> Persister {
        let pages = media_len.div_ceil(DIRTY_PAGE);
        let dirty = if scheme.deferred() {
            (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()
        } else {
            vec![]
        };
        Persister {
            scheme,
            eadr: domain == Domain::Eadr,
            dirty,
            media_len,
            nt_width: crate::features().nt_width(),
        }
    }

    pub fn scheme(&self) -> WriteScheme {
        self.scheme
    }

    /// Store `src` at `off` the scheme's way.
    #[inline]
    pub fn write<M: Media>(&self, m: &M, off: usize, src: &[u8]) {
        match self.scheme {
            WriteScheme::Nt if self.nt_width > 0 => m.write_nt(off, src),
            WriteScheme::Nt | WriteScheme::Clwb => self.store_flush(m, off, src, Flush::Clwb),
            WriteScheme::Clflushopt => self.store_flush(m, off, src, Flush::Clflushopt),
            WriteScheme::Clflush => self.store_flush(m, off, src, Flush::Clflush),
            WriteScheme::Wb | WriteScheme::Msync => {
                m.write(off, src);
                // Mark after the store: a barrier that clears the bit first must not miss it.
                self.mark_dirty(off, src.len());
            }
        }
    }

    /// Store zeroes over `[off, off+len)` the scheme's way.
    pub fn zero<M: Media>(&self, m: &M, off: usize, len: usize) {
        const Z: [u8; 4096] = [0; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(Z.len());
            self.write(m, off + done, &Z[..n]);
            done += n;
        }
    }

    #[inline]
    fn store_flush<M: Media>(&self, m: &M, off: usize, src: &[u8], how: Flush) {
        m.write(off, src);
        if !self.eadr {
            m.flush(off, src.len(), how);
        }
    }

    /// Complete this thread's writes (sfence, or mfence for clflush). For the deferred schemes
    /// this orders nothing durable: their point of durability is [`Persister::barrier`].
    #[inline]
    pub fn fence<M: Media>(&self, m: &M) {
        match self.scheme {
            WriteScheme::Clflush => m.fence(Fence::Mfence),
            WriteScheme::Wb | WriteScheme::Msync => {}
            _ => m.fence(Fence::Sfence),
        }
    }

    /// Make `[off, off+len)` durable now (FUA), whatever the scheme.
    pub fn persist_now<M: Media>(&self, m: &M, off: usize, len: usize) -> Result<()> {
        match self.scheme {
            WriteScheme::Wb => {
                if !self.eadr {
                    m.flush(off, len, Flush::best());
                }
                m.fence(Fence::Sfence);
            }
            WriteScheme::Msync => m.sync_pages(off, len)?,
            _ => self.fence(m),
        }
        Ok(())
    }

    /// Make every write that completed before this call durable, from every thread (FLUSH).
    pub fn barrier<M: Media>(&self, m: &M) -> Result<()> {
        match self.scheme {
            WriteScheme::Wb => {
                self.take_dirty(|off, len| {
                    if !self.eadr {
                        m.flush(off, len, Flush::best());
                    }
                    Ok(())
                })?;
                m.fence(Fence::Sfence);
            }
            WriteScheme::Msync => self.take_dirty(|off, len| m.sync_pages(off, len))?,
            // Each write fenced itself before completing; one more fence covers this thread.
            _ => self.fence(m),
        }
        Ok(())
    }

    fn mark_dirty(&self, off: usize, len: usize) {
        if len == 0 {
            return;
        }
        for page in off / DIRTY_PAGE..=(off + len - 1) / DIRTY_PAGE {
            let (w, b) = (page / 64, 1u64 << (page % 64));
            // Read first: re-setting a set bit would still bounce the cache line between cores.
            if self.dirty[w].load(Ordering::Relaxed) & b == 0 {
                self.dirty[w].fetch_or(b, Ordering::Release);
            }
        }
    }

    /// Clear the dirty bits and hand each run of contiguous dirty pages to `f`. A run `f` fails
    /// on is marked dirty again so a later barrier retries it.
    fn take_dirty(&self, mut g: impl FnMut(usize, usize) -> Result<()>) -> Result<()> {
        let mut f = |off: usize, len: usize| {
            let len = len.min(self.media_len - off);
            g(off, len).inspect_err(|_| self.mark_dirty(off, len))
        };
        let mut run: Option<(usize, usize)> = None;
        for (w, word) in self.dirty.iter().enumerate() {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::AcqRel);
            while bits != 0 {
                let page = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                run = match run {
                    Some((s, n)) if s + n == page => Some((s, n + 1)),
                    Some((s, n)) => {
                        f(s * DIRTY_PAGE, n * DIRTY_PAGE)?;
                        Some((page, 1))
                    }
                    None => Some((page, 1)),
                };
            }
        }
        if let Some((s, n)) = run {
            f(s * DIRTY_PAGE, n * DIRTY_PAGE)?;
        }
        Ok(())
    }
}
