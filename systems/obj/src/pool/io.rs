//! An attachment's bytes: bounds-checked read and write, dirty marking, and the raw pointer.

use super::area::address;
use super::attach::user_rights;
use super::{Access, ObjectState, Pool, PoolState, Tracking, MAX_THREADS_PER_HANDLE};
use crate::error::{ObjError, Result};
use crate::keys;
use crate::layout::PAGE;
use pmkit_media::protect::Access as Rights;
use pmkit_media::Media;

impl<M: Media> Pool<M> {
    pub(super) fn check_range(o: &ObjectState, off: u64, len: usize) -> Result<()> {
        if off
            .checked_add(len as u64)
            .is_none_or(|end| end > o.desc.size)
        {
            return Err(ObjError::OutOfBounds {
                name: o.desc.name.clone(),
                off,
                len: len as u64,
                size: o.desc.size,
            });
        }
        Ok(())
    }

    /// A write-side call (`what`) on handle `id` over `[off, off+len)`: the handle must be
    /// attached read-write and the range inside the object.
    pub(super) fn check_writable(
        inner: &PoolState,
        id: u64,
        off: u64,
        len: usize,
        what: &'static str,
    ) -> Result<()> {
        let att = inner
            .attachments
            .get(&id)
            .ok_or(ObjError::NotAttached { handle: id })?;
        let o = inner.objects[att.obj]
            .as_ref()
            .expect("attached object exists");
        if att.access != Access::ReadWrite {
            return Err(ObjError::ReadOnly {
                name: o.desc.name.clone(),
                what,
            });
        }
        Self::check_range(o, off, len)
    }

    pub fn read_id(&self, id: u64, off: u64, dst: &mut [u8]) -> Result<()> {
        let mut inner = self.inner.lock();
        self.catch_up(&mut inner, id)?;
        let att = &inner.attachments[&id];
        let o = inner.objects[att.obj]
            .as_ref()
            .expect("attached object exists");
        Self::check_range(o, off, dst.len())?;
        match &att.buf {
            Some(b) => {
                let _w = b.window(Rights::Read);
                // SAFETY: an attached buffer is readable (in this thread: the window); the
                // handle's owner is the one reading.
                unsafe { b.copy_out(off as usize, dst) }
            }
            None => self
                .media
                .read(o.desc.slot_off(att.slot) + off as usize, dst),
        }
        Ok(())
    }

    pub fn write_id(&self, id: u64, off: u64, src: &[u8]) -> Result<()> {
        let mut inner = self.inner.lock();
        Self::check_writable(&inner, id, off, src.len(), "write")?;
        self.catch_up(&mut inner, id)?;
        let att = &inner.attachments[&id];
        let o = inner.objects[att.obj]
            .as_ref()
            .expect("attached object exists");
        if !src.is_empty() {
            let first = off as usize / PAGE;
            let last = (off as usize + src.len() - 1) / PAGE;
            let newly = (first..=last).any(|p| !att.dirty.contains(p));
            // Recorded before the store so a fault-tracked write does not need to fault.
            att.dirty.set_range(first, last - first + 1);
            if att.tracking == Tracking::Faults && newly {
                let (at, len) = (first * PAGE, (last - first + 1) * PAGE);
                match &att.buf {
                    Some(b) => {
                        b.set(at, len, Rights::ReadWrite)
                            .map_err(|source| ObjError::Resource {
                                what: "open a DRAM shadow page for writing",
                                source,
                            })?
                    }
                    None => self.rights(o.desc.slot_off(att.slot) + at, len, Rights::ReadWrite)?,
                }
            }
            if att.tracking == Tracking::Whole && att.buf.is_some() {
                att.dirty.set_range(0, o.pages());
            }
        }
        match &att.buf {
            Some(b) => {
                let _w = b.window(Rights::ReadWrite);
                // SAFETY: the range is inside the object (checked) and writable (read-write
                // attachment, in this thread: the window; fault-tracked pages were opened
                // above); the owner is the writer.
                unsafe { b.copy_in(off as usize, src) }
            }
            None => self
                .media
                .write(o.desc.slot_off(att.slot) + off as usize, src),
        }
        Ok(())
    }

    pub fn mark_dirty_id(&self, id: u64, off: u64, len: u64) -> Result<()> {
        let mut inner = self.inner.lock();
        Self::check_writable(&inner, id, off, len as usize, "mark_dirty")?;
        self.catch_up(&mut inner, id)?;
        if len > 0 {
            let first = off as usize / PAGE;
            let last = (off + len - 1) as usize / PAGE;
            let att = &inner.attachments[&id];
            att.dirty.set_range(first, last - first + 1);
            if att.tracking == Tracking::Whole && att.buf.is_some() {
                att.dirty.set_range(
                    0,
                    inner.objects[att.obj].as_ref().expect("attached").pages(),
                );
            }
        }
        Ok(())
    }

    /// Address of the attachment's view (the shadow for read-write). DRAM shadow: valid until
    /// `detach` (the same buffer across syncs). PM shadow: valid until the next `sync` or
    /// `detach` of this handle.
    pub fn ptr_id(&self, id: u64) -> Result<Option<*mut u8>> {
        let mut inner = self.inner.lock();
        self.catch_up(&mut inner, id)?;
        let inner = &mut *inner;
        let att = inner
            .attachments
            .get_mut(&id)
            .expect("catch_up checked the handle");
        let o = inner.objects[att.obj]
            .as_ref()
            .expect("attached object exists");
        if let Some(b) = &att.buf {
            if att.tracking == Tracking::Whole && att.access == Access::ReadWrite {
                att.dirty.set_range(0, o.pages());
            }
            let me = keys::thread_tag();
            if b.keyed() && me != att.owner && !att.granted.contains(&me) {
                // Asking for the pointer is what lets this thread use it.
                if att.granted.len() == MAX_THREADS_PER_HANDLE {
                    return Err(ObjError::BadArgument(format!(
                        "more than {MAX_THREADS_PER_HANDLE} threads took the pointer of handle \
                         {id}; attach with protection keys off (PoolOptions::pkey = false, \
                         PMO_PKEY=off) to share it widely"
                    )));
                }
                b.allow_thread(user_rights(att.access));
                att.granted.push(me);
            }
            return Ok(Some(b.ptr()));
        }
        Ok(address(
            &self.media,
            o.desc.slot_off(att.slot),
            o.desc.cap as usize,
        ))
    }
}
