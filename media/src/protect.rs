//! Protection of PM from stray writes: page rights (`mprotect`), memory protection keys
//! (`pkey_mprotect` + `WRPKRU`), and per-thread file windows (the paper's private mappings).
//! The block device and the object store build their protection modes from these.

use crate::error::{MediaError, Result};
use crate::region::{Domain, Region, RegionKind};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;

const PAGE: usize = 4096;

/// Page rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    None,
    Read,
    ReadWrite,
}

impl Access {
    fn prot(self) -> i32 {
        match self {
            Access::None => libc::PROT_NONE,
            Access::Read => libc::PROT_READ,
            Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

fn page_span(off: usize, len: usize) -> (usize, usize) {
    let start = off & !(PAGE - 1);
    let end = (off + len).div_ceil(PAGE) * PAGE;
    (start, end - start)
}

impl Region {
    /// Set the page rights of the pages covering `[off, off+len)` (`mprotect`).
    pub fn set_access(&self, off: usize, len: usize, access: Access) -> Result<()> {
        let (start, n) = page_span(off, len);
        let p = self.at(start, n.min(self.len() - start));
        // SAFETY: the range is inside our own mapping; changing its rights cannot break Rust
        // aliasing because no references into PM exist.
        let r = unsafe { libc::mprotect(p.cast(), n.min(self.len() - start), access.prot()) };
        if r != 0 {
            return Err(MediaError::io(
                self.path(),
                "mprotect failed",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Tag the whole region with protection key `key` (rights `access` for the pages themselves).
    pub fn set_pkey(&self, key: &Pkey, access: Access) -> Result<()> {
        self.set_access_key(0, self.len(), access, Some(key))
    }

    /// Tag the pages covering `[off, off+len)` with protection key `key` (`None`: the default
    /// key 0, which every thread may use) and give them rights `access` (`pkey_mprotect`).
    pub fn set_access_key(
        &self,
        off: usize,
        len: usize,
        access: Access,
        key: Option<&Pkey>,
    ) -> Result<()> {
        let (start, n) = page_span(off, len);
        let n = n.min(self.len() - start);
        let p = self.at(start, n);
        // SAFETY: as for `set_access`.
        unsafe { protect_memory(p, n, access, key) }
            .map_err(|e| MediaError::io(self.path(), "pkey_mprotect failed", e))
    }

    /// Map `[off, off+len)` of the backing file again, at a new address, for one thread's use
    /// (the paper's private mapping). Unmapped when the returned region drops. Offsets into the
    /// window are relative to the page holding `off`: see [`FileWindow::offset_of`].
    pub fn window(&self, off: usize, len: usize, access: Access) -> Result<FileWindow> {
        let file = self.file().ok_or_else(|| MediaError::Unsupported {
            path: self.path().into(),
            why: "private windows need a file-backed region".into(),
        })?;
        let (start, n) = page_span(off, len);
        assert!(start + n <= self.len(), "window {off}+{len} outside region");
        // SAFETY: a fresh mapping of our own file; nothing Rust owns aliases it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n,
                access.prot(),
                libc::MAP_SHARED,
                file.as_raw_fd(),
                start as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MediaError::io(
                self.path(),
                "cannot map private window",
                std::io::Error::last_os_error(),
            ));
        }
        let region = Region::from_raw_window(p.cast(), n, self.domain(), self.path().to_path_buf());
        Ok(FileWindow {
            region,
            base: start,
        })
    }
}

/// A per-access mapping of part of a file-backed region.
pub struct FileWindow {
    region: Region,
    base: usize,
}

impl FileWindow {
    /// The window as media (offsets relative to the window's first page).
    pub fn media(&self) -> &Region {
        &self.region
    }
    /// Offset inside the window of region offset `off`.
    pub fn offset_of(&self, off: usize) -> usize {
        off - self.base
    }
}

impl Region {
    pub(crate) fn from_raw_window(
        ptr: *mut u8,
        len: usize,
        domain: Domain,
        path: PathBuf,
    ) -> Region {
        Region::from_parts(ptr, len, RegionKind::File, domain, path)
    }
}

/// A memory protection key, allocated with every thread's access to it disabled.
#[derive(Debug)]
pub struct Pkey(i32);

/// PKRU bits for key `k`: access-disable (AD) and write-disable (WD).
fn ad(k: i32) -> u32 {
    1 << (2 * k)
}
fn wd(k: i32) -> u32 {
    2 << (2 * k)
}

impl Pkey {
    /// Allocate a key. Threads that exist now keep the kernel's default rights for new keys
    /// (access disabled); this thread's rights are set to disabled explicitly.
    pub fn alloc() -> Result<Pkey> {
        if !crate::features().pku {
            return Err(MediaError::Unsupported {
                path: "<cpu>".into(),
                why: "this CPU or kernel has no memory protection keys (pku/ospke)".into(),
            });
        }
        // SAFETY: plain syscall; flags 0, initial rights access-disabled.
        let k = unsafe {
            libc::syscall(libc::SYS_pkey_alloc, 0, 1 /* PKEY_DISABLE_ACCESS */)
        } as i32;
        if k < 0 {
            return Err(MediaError::io(
                "<pkey>",
                "pkey_alloc failed",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(Pkey(k))
    }

    pub fn id(&self) -> i32 {
        self.0
    }

    /// Open a window in this thread: allow writes (and reads) to pages tagged with this key until
    /// the guard drops. Costs one RDPKRU and two WRPKRU: no syscall, no TLB shootdown.
    #[inline]
    pub fn open_write(&self) -> PkeyWindow {
        self.open(Access::ReadWrite)
    }

    /// Open a read-only window in this thread.
    #[inline]
    pub fn open_read(&self) -> PkeyWindow {
        self.open(Access::Read)
    }

    /// Open a window in this thread with rights `access` (`None`: an empty window).
    #[inline]
    pub fn open(&self, access: Access) -> PkeyWindow {
        let old = rdpkru();
        let new = with_rights(old, self.0, access);
        // WRPKRU orders later memory accesses; skip it when the thread has the rights already.
        if new == old {
            return PkeyWindow { old: None };
        }
        wrpkru(new);
        PkeyWindow { old: Some(old) }
    }

    /// Give the calling thread rights `access` to this key's pages until changed again (no
    /// window: the rights outlive the call). Other threads keep theirs.
    #[inline]
    pub fn allow_this_thread(&self, access: Access) {
        let old = rdpkru();
        let new = with_rights(old, self.0, access);
        if new != old {
            wrpkru(new);
        }
    }

    /// Disable all access to this key's pages in the calling thread.
    pub fn deny_this_thread(&self) {
        wrpkru(rdpkru() | ad(self.0) | wd(self.0));
    }
}

/// `pkru` with key `k`'s bits set for `access`.
fn with_rights(pkru: u32, k: i32, access: Access) -> u32 {
    let clear = pkru & !(ad(k) | wd(k));
    match access {
        Access::None => clear | ad(k) | wd(k),
        Access::Read => clear | wd(k),
        Access::ReadWrite => clear,
    }
}

/// Set the rights of `[ptr, ptr+len)` (page aligned) of memory the caller mapped itself, and tag
/// it with protection key `key` (`None`: the default key 0, open to every thread), in one
/// `pkey_mprotect`. Where the CPU has no keys (so nothing can be tagged), plain `mprotect`;
/// note that `mprotect` alone would keep an earlier tag, hence key 0 spelled out.
///
/// # Safety
/// The range must be the caller's own mapping, and no Rust reference into it may be live (its
/// rights change under it).
pub unsafe fn protect_memory(
    ptr: *mut u8,
    len: usize,
    access: Access,
    key: Option<&Pkey>,
) -> std::io::Result<()> {
    assert!((ptr as usize).is_multiple_of(PAGE) && len.is_multiple_of(PAGE));
    let r = match key {
        // SAFETY: the caller's own mapping with no live references into it (the contract).
        None if !crate::features().pku => unsafe { libc::mprotect(ptr.cast(), len, access.prot()) },
        _ => {
            let k = key.map_or(0, |k| k.0) as libc::c_long;
            // SAFETY: as above; `k` is a key this process allocated, or 0 (the default key).
            unsafe { libc::syscall(libc::SYS_pkey_mprotect, ptr, len, access.prot(), k) as i32 }
        }
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl Drop for Pkey {
    fn drop(&mut self) {
        // SAFETY: freeing our own key; pages still tagged with it keep the tag, which is harmless
        // once the region is unmapped (the owner drops the region first).
        unsafe {
            libc::syscall(libc::SYS_pkey_free, self.0);
        }
    }
}

/// An open pkey window; restores the thread's previous rights on drop.
#[must_use]
pub struct PkeyWindow {
    /// The rights to restore, if the window changed them.
    old: Option<u32>,
}

impl Drop for PkeyWindow {
    #[inline]
    fn drop(&mut self) {
        if let Some(old) = self.old {
            wrpkru(old);
        }
    }
}

#[inline]
fn rdpkru() -> u32 {
    let v: u32;
    // SAFETY: RDPKRU reads this thread's PKRU; only called when the CPU has pku (Pkey::alloc).
    unsafe {
        std::arch::asm!("rdpkru", in("ecx") 0, out("eax") v, out("edx") _, options(nomem, nostack, preserves_flags))
    };
    v
}

#[inline]
fn wrpkru(v: u32) {
    // SAFETY: WRPKRU changes only this thread's access rights to pages with protection keys; it
    // is serializing for later memory accesses, which is what the window needs.
    unsafe {
        std::arch::asm!("wrpkru", in("eax") v, in("ecx") 0, in("edx") 0, options(nostack, preserves_flags))
    };
}
