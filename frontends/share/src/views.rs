//! Pool files mapped by a client (mmap(2)'s `MAP_SHARED` through the shim in a process the
//! pool's server serves): the session pins the range and answers with the pool file's extents
//! that hold it (`Posix::pin_range`), and the client maps those extents of the pool file itself,
//! in file order at one address (`ExtentMap`), so its loads and stores go to PM with no call,
//! and two processes that map one file share its bytes. The client is trusted with the pool
//! file already (it proved it opened it read-write, docs/fs-sharing.md). `munmap` drops the
//! pin; the server drops a session's pins when its process execs or ends.

use crate::api::Calls;
use parking_lot::Mutex;
use pmkit_fs::posix::{Fd, MapView};
use pmkit_fs::{Error, Result};
use pmkit_media::extent_map::ExtentMap;
use pmkit_media::{Region, RegionOptions};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The pool file, mapped once at the first view (each view maps its extents of it), and the
/// views by address with their pin numbers.
pub(crate) struct Views {
    pool: PathBuf,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    region: Option<Region>,
    views: HashMap<usize, (u64, ExtentMap)>,
}

impl Views {
    pub(crate) fn new(pool: &Path) -> Views {
        Views {
            pool: pool.to_path_buf(),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Map file bytes `[off, off + len)` of `fd`, pinned by the session behind `calls`.
    pub(crate) fn map(&self, calls: &dyn Calls, fd: Fd, off: u64, len: u64) -> Result<MapView> {
        let (id, extents) = calls.pin_range(fd, off, len)?;
        let made = self.view(&extents);
        let view = match made {
            Ok(v) => v,
            Err(e) => {
                let _ = calls.unpin_range(id);
                return Err(e);
            }
        };
        let out = MapView {
            ptr: view.as_ptr(),
            len: view.len(),
            huge_bytes: view.huge_parts().iter().map(|p| p.1).sum(),
        };
        self.inner.lock().views.insert(out.ptr as usize, (id, view));
        Ok(out)
    }

    fn view(&self, extents: &[(u64, u64)]) -> Result<ExtentMap> {
        let mut g = self.inner.lock();
        if g.region.is_none() {
            let r = Region::open(&self.pool, &RegionOptions::default()).map_err(|e| {
                tracing::warn!("{}: {e}", self.pool.display());
                Error::NotSupported("mapping a pool file: the pool file cannot be opened here")
            })?;
            g.region = Some(r);
        }
        let region = g.region.as_ref().expect("opened above");
        ExtentMap::new(region, extents).map_err(|e| {
            Error::NotSupported(match e.os_error() {
                Some(libc::ENOMEM) => "direct access: out of address space or map count",
                _ => "direct access: the pool cannot be mapped here",
            })
        })
    }

    /// Make `[ptr, ptr + len)`, inside one view, durable (flush and fence).
    pub(crate) fn persist(&self, ptr: *const u8, len: usize) -> Result<()> {
        let g = self.inner.lock();
        let (_, v) = g
            .views
            .values()
            .find(|(_, v)| v.contains(ptr, len))
            .ok_or(Error::Invalid(
                "persist of bytes outside every mapped range",
            ))?;
        v.persist(ptr as usize - v.as_ptr() as usize, len)
            .map_err(|_| Error::WriteFailed("msync of a mapped range failed".into()))
    }

    /// Unmap the view at `ptr` and drop its pin.
    pub(crate) fn unmap(&self, calls: &dyn Calls, ptr: *mut u8) -> Result<()> {
        let (id, view) = self
            .inner
            .lock()
            .views
            .remove(&(ptr as usize))
            .ok_or(Error::Invalid("not the address of a mapped range"))?;
        drop(view);
        calls.unpin_range(id)
    }
}
