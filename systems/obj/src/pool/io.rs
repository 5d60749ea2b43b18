//! An attachment's bytes: bounds-checked read and write, dirty marking, and the raw pointer.
//! Every call goes through one preamble ([`Pool::begin`]): the handle is attached, has the
//! access the call needs, the range is inside the object, and the shadow is caught up.

use super::{Access, ObjectState, Pool, PoolState};
use crate::error::{ObjError, Result};
use crate::layout::PAGE;
use pmkit_media::Media;

/// What a call needs of its handle before it touches the shadow.
#[derive(Clone, Copy)]
enum Needs {
    /// The view's address: any attached handle.
    Pointer,
    /// `[off, off+len)` to read: inside the object.
    Read { off: u64, len: u64 },
    /// `[off, off+len)` to write or mark (`what`): inside the object, read-write handle.
    Write {
        off: u64,
        len: u64,
        what: &'static str,
    },
}

/// Fails unless `[off, off+len)` lies inside the object.
fn check_range(object: &ObjectState, off: u64, len: u64) -> Result<()> {
    let size = object.descriptor.size;
    if off.checked_add(len).is_none_or(|end| end > size) {
        return Err(ObjError::OutOfBounds {
            name: object.descriptor.name.clone(),
            off,
            len,
            size,
        });
    }
    Ok(())
}

/// The pages `[first, first+count)` that hold the non-empty byte range `[off, off+len)`.
fn pages_of(off: u64, len: u64) -> (usize, usize) {
    debug_assert!(len > 0);
    let first = (off / PAGE as u64) as usize;
    let last = ((off + len - 1) / PAGE as u64) as usize;
    (first, last - first + 1)
}

impl<M: Media> Pool<M> {
    /// The shared preamble of every per-handle call: checks what the call `needs`, then brings
    /// the shadow up to date. The caller holds the pool lock.
    fn begin(&self, inner: &mut PoolState, id: u64, needs: Needs) -> Result<()> {
        let attachment = inner.attachment(id)?;
        let object = inner.object(attachment.binding.object);
        match needs {
            Needs::Pointer => {}
            Needs::Read { off, len } => check_range(object, off, len)?,
            Needs::Write { off, len, what } => {
                if attachment.binding.access != Access::ReadWrite {
                    return Err(ObjError::ReadOnly {
                        name: object.descriptor.name.clone(),
                        what,
                    });
                }
                check_range(object, off, len)?;
            }
        }
        let (attachment, object) = inner.attachment_mut(id)?;
        attachment
            .view
            .catch_up(&self.area(), object, &mut attachment.binding)
    }

    pub fn read_id(&self, id: u64, off: u64, dst: &mut [u8]) -> Result<()> {
        let mut inner = self.inner.lock();
        let len = dst.len() as u64;
        self.begin(&mut inner, id, Needs::Read { off, len })?;
        let attachment = &inner.attachments[&id];
        let object = inner.object(attachment.binding.object);
        attachment
            .view
            .read(&self.area(), object, &attachment.binding, off as usize, dst)
    }

    pub fn write_id(&self, id: u64, off: u64, src: &[u8]) -> Result<()> {
        let mut inner = self.inner.lock();
        let (len, what) = (src.len() as u64, "write");
        self.begin(&mut inner, id, Needs::Write { off, len, what })?;
        let attachment = &inner.attachments[&id];
        let object = inner.object(attachment.binding.object);
        let binding = &attachment.binding;
        if len > 0 {
            let (first, count) = pages_of(off, len);
            let newly = (first..first + count).any(|page| !binding.dirty.contains(page));
            // Recorded before the store so a fault-tracked write does not need to fault.
            binding.dirty.set_range(first, count);
            if binding.tracks_faults() && newly {
                attachment.view.open_pages(
                    &self.area(),
                    object,
                    binding,
                    first * PAGE,
                    count * PAGE,
                )?;
            }
            attachment.view.note_write_access(object, binding);
        }
        attachment
            .view
            .write(&self.area(), object, binding, off as usize, src);
        Ok(())
    }

    pub fn mark_dirty_id(&self, id: u64, off: u64, len: u64) -> Result<()> {
        let mut inner = self.inner.lock();
        let what = "mark_dirty";
        self.begin(&mut inner, id, Needs::Write { off, len, what })?;
        if len > 0 {
            let attachment = &inner.attachments[&id];
            let (first, count) = pages_of(off, len);
            attachment.binding.dirty.set_range(first, count);
            let object = inner.object(attachment.binding.object);
            attachment
                .view
                .note_write_access(object, &attachment.binding);
        }
        Ok(())
    }

    /// Address of the attachment's view (the shadow for read-write). DRAM shadow: valid until
    /// `detach` (the same buffer across syncs). PM shadow: valid until the next `sync` or
    /// `detach` of this handle.
    pub fn ptr_id(&self, id: u64) -> Result<Option<*mut u8>> {
        let mut inner = self.inner.lock();
        self.begin(&mut inner, id, Needs::Pointer)?;
        let (attachment, object) = inner.attachment_mut(id)?;
        attachment
            .view
            .pointer(&self.area(), object, &attachment.binding, id)
    }
}
