//! How the library reaches the PM object area: the guard (open, a protection key, the kernel's
//! write path, or page rights), the windows it opens around its own copies, its stores into
//! the area, and the two helpers that reach the mapping behind the media (page rights and
//! addresses).

use super::Pool;
use crate::error::Result;
use pmkit_media::protect::{Access as Rights, Pkey, PkeyWindow};
use pmkit_media::{KernelWriter, Media, MediaError};

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

impl<M: Media> Pool<M> {
    /// Give the object area back to the default key before the pool's key is freed (another
    /// user may get the same key number), leaving it `PROT_NONE` as a protected pool does.
    pub(super) fn untag_area(&self) {
        if let AreaGuard::Key(_) = self.guard {
            let (off, len) = (
                self.geometry.area_off as usize,
                self.geometry.area_len as usize,
            );
            if let Err(error) = set_rights(&self.media, off, len, Rights::None, None) {
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
    pub(super) fn protect_area(&self) -> Result<()> {
        let (off, len) = (
            self.geometry.area_off as usize,
            self.geometry.area_len as usize,
        );
        match &self.guard {
            AreaGuard::Open => {}
            AreaGuard::Key(key) => set_rights(&self.media, off, len, Rights::ReadWrite, Some(key))?,
            AreaGuard::Kernel(_) => set_rights(&self.media, off, len, Rights::Read, None)?,
            AreaGuard::Pages => set_rights(&self.media, off, len, Rights::None, None)?,
        }
        Ok(())
    }

    /// Store `src` at `off` of the object area with non-temporal stores' meaning (durable
    /// after the next fence), inside a write window the caller opened, or through the kernel.
    pub(super) fn area_write(&self, off: usize, src: &[u8]) -> Result<()> {
        match &self.guard {
            AreaGuard::Kernel(kw) => {
                self.poisoned()?;
                if let Err(e) = kw.write(off, src) {
                    return Err(self.poison_with(e));
                }
                kw.flush_after(&self.media, off, src.len());
            }
            _ => self.media.write_nt(off, src),
        }
        Ok(())
    }

    /// [`Self::area_write`] from memory users may store into while it runs (a DRAM shadow),
    /// read by raw pointer only.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes during the call.
    pub(super) unsafe fn area_write_from(
        &self,
        off: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        match &self.guard {
            AreaGuard::Kernel(kw) => {
                self.poisoned()?;
                // SAFETY: the caller's contract.
                if let Err(e) = unsafe { kw.write_from(off, src, len) } {
                    return Err(self.poison_with(e));
                }
                kw.flush_after(&self.media, off, len);
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
    /// window closes when the returned guard drops; page windows close with [`Self::close_area`].
    pub(super) fn open_area(
        &self,
        off: usize,
        len: usize,
        rights: Rights,
    ) -> Result<Option<PkeyWindow>> {
        Ok(match &self.guard {
            AreaGuard::Open | AreaGuard::Kernel(_) => None,
            AreaGuard::Key(key) if rights == Rights::ReadWrite => Some(key.open_write()),
            AreaGuard::Key(key) => Some(key.open_read()),
            AreaGuard::Pages => {
                self.rights(off, len, rights)?;
                None
            }
        })
    }
    pub(super) fn close_area(&self, off: usize, len: usize) -> Result<()> {
        if let AreaGuard::Pages = self.guard {
            self.rights(off, len, Rights::None)?;
        }
        Ok(())
    }
    /// The library's write window onto a keyed object area for the whole of a sync (from the
    /// first copy to the publication); `None` unless the area is behind a key.
    pub(super) fn area_write_window(&self) -> Option<PkeyWindow> {
        match &self.guard {
            AreaGuard::Key(key) => Some(key.open_write()),
            AreaGuard::Open | AreaGuard::Kernel(_) | AreaGuard::Pages => None,
        }
    }
    /// Open `[off, off+len)` for a sync's copies where the area has page rights, recording the
    /// window in `opened` for the sync to close (a key window is [`Self::area_write_window`]).
    pub(super) fn open_area_for_sync(
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
    /// Set the page rights of `[off, off+len)` of the media (default key).
    pub(super) fn rights(&self, off: usize, len: usize, rights: Rights) -> Result<()> {
        Ok(set_rights(&self.media, off, len, rights, None)?)
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
