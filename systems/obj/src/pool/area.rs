//! How the library reaches the PM object area: the guard (open, a protection key, the kernel's
//! write path, or page rights), and [`PmArea`], the narrow view of a pool through which the
//! shadows and the pool's own copies reach the area: the windows opened around copies, the
//! stores into the area and its CRC tables, page rights, and the counters of that work. The
//! shadows get nothing else of the pool, so they do not depend on it (the pool uses them).
//! Two helpers reach the mapping behind the media: page rights and addresses.

use super::{add_under_lock, checksum, Counters};
use crate::error::Result;
use crate::layout::{Descriptor, Geometry, PAGE};
use pmkit_media::guard::Poison;
use pmkit_media::protect::{Access as Rights, Pkey, PkeyWindow};
use pmkit_media::{Domain, Fence, Flush, KernelWriter, Media, MediaError};

/// How the library itself reaches the PM object area.
#[derive(Debug)]
pub(super) enum AreaGuard {
    /// No protection: the area is mapped read-write.
    Open,
    /// The area is tagged with this key, which every thread has disabled; the library opens a
    /// WRPKRU window in its own thread around each copy (no syscall, no TLB flush).
    Key(Pkey),
    /// The area is `PROT_READ` for good and the library's stores into it go through the
    /// kernel (`pwrite`): any stray store faults, there are no windows and no TLB shootdowns.
    /// Detached objects stay readable (this guards writes, not reads).
    Kernel(KernelWriter),
    /// The area is `PROT_NONE`; the library opens `mprotect` windows (two syscalls each).
    Pages,
}

/// A pool's object area as the library reaches it: borrows of the media, the geometry (where
/// the area and its CRC tables lie), the guard and its poison, and the work counters, with the
/// pool's protection facts. Built per operation by `Pool::area` (a handful of borrows).
pub(super) struct PmArea<'a, M: Media> {
    media: &'a M,
    geometry: &'a Geometry,
    guard: &'a AreaGuard,
    /// The first failed store through the kernel: every later store into the area is dropped.
    poison: &'a Poison,
    counters: &'a Counters,
    /// Object pages and buffers have page rights ([`super::PoolOptions::protect`]).
    protect: bool,
    /// DRAM buffers get protection keys of their own ([`super::PoolOptions::pkey`]).
    buffer_keys: bool,
}

impl<'a, M: Media> PmArea<'a, M> {
    #[inline]
    pub(super) fn new(
        media: &'a M,
        geometry: &'a Geometry,
        guard: &'a AreaGuard,
        poison: &'a Poison,
        counters: &'a Counters,
        protect: bool,
        buffer_keys: bool,
    ) -> Self {
        debug_assert!(
            !buffer_keys || protect,
            "buffer keys are a kind of protection"
        );
        debug_assert!(
            protect || matches!(guard, AreaGuard::Open),
            "an unprotected area is open"
        );
        PmArea {
            media,
            geometry,
            guard,
            poison,
            counters,
            protect,
            buffer_keys,
        }
    }

    /// The media under the area (reads, plain stores into a PM shadow, addresses).
    #[inline]
    pub(super) fn media(&self) -> &'a M {
        self.media
    }
    /// Whether object pages and DRAM buffers have page rights.
    #[inline]
    pub(super) fn protect(&self) -> bool {
        self.protect
    }
    /// Whether DRAM buffers get protection keys of their own.
    #[inline]
    pub(super) fn buffer_keys(&self) -> bool {
        self.buffer_keys
    }
    /// Whether the area's pages carry CRCs.
    #[inline]
    pub(super) fn checksum(&self) -> bool {
        self.geometry.checksum()
    }

    /// Whether `[off, off+len)` lies inside the object area (every store and right here does).
    fn holds(&self, off: usize, len: usize) -> bool {
        let (start, area_len) = (self.geometry.area_off as usize, self.geometry.area_len);
        off >= start && (off - start + len) as u64 <= area_len
    }

    /// Give the object area back to the default key before the pool's key is freed (another
    /// user may get the same key number), leaving it `PROT_NONE` as a protected pool does.
    pub(super) fn untag(&self) {
        if let AreaGuard::Key(_) = self.guard {
            let (off, len) = (
                self.geometry.area_off as usize,
                self.geometry.area_len as usize,
            );
            if let Err(error) = set_rights(self.media, off, len, Rights::None, None) {
                tracing::warn!("cannot untag the object area: {error}");
            }
        }
    }

    /// Rights of object pages nobody has attached, and of DRAM shadow buffers at rest.
    /// With the kernel write path buffers rest read-write: a detached buffer is refilled
    /// whole at its next attach before anything is synced from it, so a stray store into it
    /// can never reach PM, and attach/detach need no `mprotect`.
    pub(super) fn rights_at_rest(&self) -> Rights {
        match self.guard {
            _ if !self.protect => Rights::ReadWrite,
            AreaGuard::Kernel(_) => Rights::ReadWrite,
            _ => Rights::None,
        }
    }
    /// Whether DRAM buffers at rest are open (see [`Self::rights_at_rest`]).
    pub(super) fn buffers_rest_open(&self) -> bool {
        self.rights_at_rest() == Rights::ReadWrite
    }
    /// Put the whole object area at rest: behind the pool's key, or `PROT_NONE`.
    pub(super) fn protect_all(&self) -> Result<()> {
        let (off, len) = (
            self.geometry.area_off as usize,
            self.geometry.area_len as usize,
        );
        match self.guard {
            AreaGuard::Open => {}
            AreaGuard::Key(key) => set_rights(self.media, off, len, Rights::ReadWrite, Some(key))?,
            AreaGuard::Kernel(_) => set_rights(self.media, off, len, Rights::Read, None)?,
            AreaGuard::Pages => set_rights(self.media, off, len, Rights::None, None)?,
        }
        Ok(())
    }

    /// Store `src` at `off` of the object area with non-temporal stores' meaning (durable
    /// after the next fence), inside a write window the caller opened, or through the kernel.
    pub(super) fn write(&self, off: usize, src: &[u8]) -> Result<()> {
        debug_assert!(self.holds(off, src.len()), "stores stay in the object area");
        match self.guard {
            AreaGuard::Kernel(kw) => {
                self.poisoned()?;
                if let Err(e) = kw.write(off, src) {
                    return Err(self.poison_with(e));
                }
                kw.flush_after(self.media, off, src.len());
            }
            _ => self.media.write_nt(off, src),
        }
        Ok(())
    }

    /// [`Self::write`] from memory users may store into while it runs (a DRAM shadow), read
    /// by raw pointer only.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes during the call.
    pub(super) unsafe fn write_from(&self, off: usize, src: *const u8, len: usize) -> Result<()> {
        debug_assert!(self.holds(off, len), "stores stay in the object area");
        match self.guard {
            AreaGuard::Kernel(kw) => {
                self.poisoned()?;
                // SAFETY: the caller's contract.
                if let Err(e) = unsafe { kw.write_from(off, src, len) } {
                    return Err(self.poison_with(e));
                }
                kw.flush_after(self.media, off, len);
            }
            // SAFETY: the caller's contract.
            _ => unsafe { self.media.write_nt_from(off, src, len) },
        }
        Ok(())
    }

    /// `Err(Poisoned)` once a store through the kernel has failed: the object area stops
    /// changing there, as in a crash, and the next open recovers (the rule of
    /// `pmkit_media::guard`, the same for every system).
    fn poisoned(&self) -> Result<()> {
        match self.poison.why() {
            None => Ok(()),
            Some(why) => Err(MediaError::Poisoned {
                path: self
                    .media
                    .mapping()
                    .map_or_else(Default::default, |r| r.path().into()),
                why: why.into(),
            }
            .into()),
        }
    }
    fn poison_with(&self, e: MediaError) -> crate::error::ObjError {
        self.poison.set(e.to_string());
        self.poisoned().expect_err("just poisoned")
    }

    /// Open the library's own access to `[off, off+len)` of the object area for `rights`. A key
    /// window closes when the returned guard drops; page windows close with [`Self::close`].
    pub(super) fn open(
        &self,
        off: usize,
        len: usize,
        rights: Rights,
    ) -> Result<Option<PkeyWindow>> {
        Ok(match self.guard {
            AreaGuard::Open | AreaGuard::Kernel(_) => None,
            AreaGuard::Key(key) if rights == Rights::ReadWrite => Some(key.open_write()),
            AreaGuard::Key(key) => Some(key.open_read()),
            AreaGuard::Pages => {
                self.rights(off, len, rights)?;
                None
            }
        })
    }
    pub(super) fn close(&self, off: usize, len: usize) -> Result<()> {
        if let AreaGuard::Pages = self.guard {
            self.rights(off, len, Rights::None)?;
        }
        Ok(())
    }
    /// The library's write window onto a keyed object area for the whole of a sync (from the
    /// first copy to the publication); `None` unless the area is behind a key.
    pub(super) fn write_window(&self) -> Option<PkeyWindow> {
        match self.guard {
            AreaGuard::Key(key) => Some(key.open_write()),
            AreaGuard::Open | AreaGuard::Kernel(_) | AreaGuard::Pages => None,
        }
    }
    /// Open `[off, off+len)` for a sync's copies where the area has page rights, recording the
    /// window in `opened` for the sync to close (a key window is [`Self::write_window`]).
    pub(super) fn open_for_sync(
        &self,
        off: usize,
        len: usize,
        opened: &mut Vec<(usize, usize)>,
    ) -> Result<()> {
        if let AreaGuard::Pages = self.guard {
            self.rights(off, len, Rights::ReadWrite)?;
            opened.push((off, len));
        }
        Ok(())
    }
    /// Set the page rights of `[off, off+len)` of the object area (default key).
    pub(super) fn rights(&self, off: usize, len: usize, rights: Rights) -> Result<()> {
        debug_assert!(self.holds(off, len), "object pages lie in the object area");
        Ok(set_rights(self.media, off, len, rights, None)?)
    }

    /// One store fence (counted).
    pub(super) fn fence(&self) {
        self.media.fence(Fence::Sfence);
        add_under_lock(&self.counters.fences, 1);
    }
    /// Write back `[off, off+len)` where the CPU caches are not persistent (no fence).
    pub(super) fn flush(&self, off: usize, len: usize) {
        if self.media.domain() == Domain::Adr {
            self.media.flush(off, len, Flush::best());
        }
    }

    /// Read page `page` of `slot` of `descriptor` into `buf` and compare it with its CRC
    /// ([`checksum::read_page`] on this area's media and geometry).
    pub(super) fn read_verified_page(
        &self,
        descriptor: &Descriptor,
        slot: u8,
        page: usize,
        buf: &mut [u8; PAGE],
    ) -> Result<()> {
        checksum::read_page(self.media, self.geometry, descriptor, slot, page, buf)
    }

    /// Write the CRCs of pages `first..first+count` of `slot` of `descriptor` into the slot's
    /// table and flush them (no fence: the sync's fence orders them with the data).
    /// `crc_of(page)` gives each page's CRC (and may do the page's copy on the way); CRCs go
    /// out in stack-sized runs, so a sync allocates nothing.
    pub(super) fn store_crcs(
        &self,
        descriptor: &Descriptor,
        slot: u8,
        first: usize,
        count: usize,
        mut crc_of: impl FnMut(usize) -> Result<u32>,
    ) -> Result<()> {
        const RUN: usize = 256;
        let mut bytes = [0u8; 4 * RUN];
        let mut done = 0;
        while done < count {
            let n = (count - done).min(RUN);
            for k in 0..n {
                let crc = crc_of(first + done + k)?;
                bytes[4 * k..4 * k + 4].copy_from_slice(&crc.to_le_bytes());
            }
            let off = self
                .geometry
                .crc_entry_off(descriptor.slot_off(slot) + (first + done) * PAGE);
            self.media.write(off, &bytes[..4 * n]);
            self.flush(off, 4 * n);
            done += n;
        }
        Ok(())
    }

    /// Count bytes copied into a shadow (PM catch-up, DRAM fill).
    pub(super) fn count_copied(&self, bytes: u64) {
        add_under_lock(&self.counters.bytes_copied, bytes);
    }
    /// Count bytes written back with clwb at sync.
    pub(super) fn count_flushed(&self, bytes: u64) {
        add_under_lock(&self.counters.bytes_flushed, bytes);
    }
    /// Count object bytes a sync made durable.
    pub(super) fn count_synced(&self, bytes: u64) {
        add_under_lock(&self.counters.bytes_synced, bytes);
    }
    /// Count an attachment served by a keyed buffer.
    pub(super) fn count_keyed_attach(&self) {
        add_under_lock(&self.counters.keyed_attaches, 1);
    }
}

/// Set the page rights of `[off, off+len)` and tag the pages with `key` (`None`: the default
/// key). Rights exist only on a mapping; on a simulator this changes nothing.
pub(super) fn set_rights<M: Media>(
    media: &M,
    off: usize,
    len: usize,
    rights: Rights,
    key: Option<&Pkey>,
) -> std::result::Result<(), MediaError> {
    match media.mapping() {
        Some(region) => region.set_access_key(off, len, rights, key),
        None => Ok(()),
    }
}

/// Address of media byte `off` when the media is a mapping.
pub(super) fn address<M: Media>(media: &M, off: usize, len: usize) -> Option<*mut u8> {
    media.mapping().map(|region| region.ptr_at(off, len))
}
