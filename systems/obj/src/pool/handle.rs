//! The handle: an attached object borrowed from its pool, detached when dropped.

use super::{Access, Pool};
use crate::error::Result;
use pmkit_media::Media;

impl<M: Media> Pool<M> {
    /// Publish several handles' writes atomically (one sync).
    pub fn sync(&self, handles: &[&Handle<'_, M>]) -> Result<()> {
        let ids: Vec<u64> = handles.iter().map(|h| h.id).collect();
        self.sync_ids(&ids)
    }

    /// Detach a handle (unsynced writes are discarded).
    pub fn detach(&self, h: Handle<'_, M>) -> Result<()> {
        h.detach()
    }
}

/// An attached object. Reads and writes are bounds-checked copies; nothing hands out a Rust
/// reference into PM. Dropping a handle detaches it (unsynced writes are discarded).
pub struct Handle<'p, M: Media> {
    pub(super) pool: &'p Pool<M>,
    pub(super) id: u64,
}

impl<M: Media> Handle<'_, M> {
    pub fn id(&self) -> u64 {
        self.id
    }
    pub fn name(&self) -> Result<String> {
        Ok(self.pool.info_id(self.id)?.0)
    }
    pub fn size(&self) -> Result<u64> {
        Ok(self.pool.info_id(self.id)?.1)
    }
    pub fn access(&self) -> Result<Access> {
        Ok(self.pool.info_id(self.id)?.2)
    }
    /// Copy `dst.len()` bytes at `off` out of the object (the shadow for a read-write handle).
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        self.pool.read_id(self.id, off, dst)
    }
    /// Copy `src` into the shadow at `off`; visible to other attachments only after `sync`.
    pub fn write(&self, off: u64, src: &[u8]) -> Result<()> {
        self.pool.write_id(self.id, off, src)
    }
    /// Declare `[off, off+len)` written through the raw pointer ([`Tracking::Explicit`](crate::Tracking::Explicit)).
    pub fn mark_dirty(&self, off: u64, len: u64) -> Result<()> {
        self.pool.mark_dirty_id(self.id, off, len)
    }
    /// The attachment's view as a raw pointer (for C callers), valid until this handle's next
    /// `sync` or `detach`; `None` on media without addresses. Writing through it is `unsafe`
    /// for the caller; with protection a read-only view faults on a write. With buffer keys
    /// ([`PoolOptions::pkey`](crate::PoolOptions::pkey)) the pointer works in the attaching thread and in each thread that
    /// calls `as_ptr` itself; other threads fault.
    pub fn as_ptr(&self) -> Result<Option<*mut u8>> {
        self.pool.ptr_id(self.id)
    }
    /// Publish this handle's writes.
    pub fn sync(&self) -> Result<()> {
        self.pool.sync_ids(&[self.id])
    }
    pub fn detach(mut self) -> Result<()> {
        let id = std::mem::replace(&mut self.id, 0);
        self.pool.detach_id(id)
    }
}

impl<M: Media> Drop for Handle<'_, M> {
    fn drop(&mut self) {
        if self.id != 0 {
            let _ = self.pool.detach_id(self.id);
        }
    }
}
