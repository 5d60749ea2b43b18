//! Objects as a whole: create, delete, list, the attached object's description, and a copy of
//! the published slot.

use super::{Access, ObjInfo, ObjectState, Pool, Shadow};
use crate::bits::PageSet;
use crate::error::{ObjError, Result};
use crate::layout::{self, Descriptor, ENTRY, PAGE};
use pmkit_media::protect::Access as Rights;
use pmkit_media::Media;

impl<M: Media> Pool<M> {
    /// Create object `name` of `size` bytes, zero-filled. Durable when this returns.
    pub fn create(&self, name: &str, size: u64) -> Result<()> {
        layout::check_name(name)?;
        if size == 0 || size > self.geometry.area_len / 2 {
            return Err(ObjError::BadArgument(format!(
                "object size {size} must be 1..={} bytes in this pool",
                self.geometry.area_len / 2
            )));
        }
        let mut inner = self.inner.lock();
        if inner.names.contains_key(name) {
            return Err(ObjError::Exists { name: name.into() });
        }
        let Some(&index) = inner.free_entries.last() else {
            return Err(ObjError::TableFull {
                max: self.geometry.max_objects,
            });
        };
        let cap = size.next_multiple_of(PAGE as u64);
        let Some(offset) = inner.extents.alloc(2 * cap) else {
            return Err(ObjError::PoolFull {
                name: name.into(),
                need: 2 * cap,
                largest: inner.extents.largest(),
            });
        };
        inner.free_entries.pop();
        let desc = Descriptor {
            offset,
            size,
            cap,
            flags: 0,
            name: name.into(),
        };
        let made = (|| {
            let (off, len) = (offset as usize, 2 * cap as usize);
            let w = self.open_area(off, len, Rights::ReadWrite)?;
            // Both slots start equal (zero), so the first attach copies nothing.
            const Z: [u8; PAGE] = [0; PAGE];
            for p in (0..len).step_by(PAGE) {
                self.media.write_nt(off + p, &Z);
            }
            drop(w);
            self.close_area(off, len)?;
            let eoff = self.geometry.entry_off(index);
            self.media.write(eoff + 8, &desc.encode());
            self.flush(eoff + 8, ENTRY - 8);
            self.fence();
            // The allocation and the object exist from this one store on.
            self.persist_word(eoff, layout::state_word(1, 0));
            Ok(())
        })();
        if let Err(e) = made {
            inner.extents.release(offset, 2 * cap);
            inner.free_entries.push(index);
            return Err(e);
        }
        let pages = cap as usize / PAGE;
        inner.names.insert(name.into(), index);
        inner.objects[index] = Some(ObjectState {
            desc,
            state: layout::state_word(1, 0),
            stale: PageSet::new(pages),
            readers: 0,
            writer: None,
        });
        Ok(())
    }

    /// Delete object `name` (it must not be attached). Durable when this returns.
    pub fn delete(&self, name: &str) -> Result<()> {
        let mut inner = self.inner.lock();
        let index = *inner
            .names
            .get(name)
            .ok_or_else(|| ObjError::NotFound { name: name.into() })?;
        let o = inner.objects[index].as_ref().expect("named object exists");
        if o.writer.is_some() || o.readers > 0 {
            return Err(ObjError::Busy {
                name: name.into(),
                why: "it is attached; detach every handle first",
            });
        }
        let (off, cap) = (o.desc.offset, o.desc.cap);
        self.persist_word(self.geometry.entry_off(index), 0);
        inner.objects[index] = None;
        inner.names.remove(name);
        inner.free_entries.push(index);
        inner.extents.release(off, 2 * cap);
        Ok(())
    }

    /// Every object, in table order.
    pub fn list(&self) -> Vec<ObjInfo> {
        let inner = self.inner.lock();
        inner
            .objects
            .iter()
            .enumerate()
            .filter_map(|(i, o)| {
                let o = o.as_ref()?;
                Some(ObjInfo {
                    name: o.desc.name.clone(),
                    index: i,
                    size: o.desc.size,
                    capacity: o.desc.cap,
                    offset: o.desc.offset,
                    slot: o.active(),
                    generation: layout::state_generation(o.state),
                    flags: o.desc.flags,
                    attached: if o.writer.is_some() {
                        Some(Access::ReadWrite)
                    } else if o.readers > 0 {
                        Some(Access::Read)
                    } else {
                        None
                    },
                })
            })
            .collect()
    }

    /// The last published contents of `name` (what `dump` prints).
    pub fn read_published(&self, name: &str) -> Result<Vec<u8>> {
        let inner = self.inner.lock();
        let index = *inner
            .names
            .get(name)
            .ok_or_else(|| ObjError::NotFound { name: name.into() })?;
        let o = inner.objects[index].as_ref().expect("named object exists");
        let off = o.desc.slot_off(o.active());
        let mut buf = vec![0u8; o.desc.size as usize];
        // A PM-shadow reader keeps the current slot readable: leave its rights alone.
        let window = !(self.shadow == Shadow::Pm && o.readers > 0);
        let w = if window {
            self.open_area(off, o.desc.cap as usize, Rights::Read)?
        } else {
            None
        };
        self.media.read(off, &mut buf);
        drop(w);
        if window {
            self.close_area(off, o.desc.cap as usize)?;
        }
        Ok(buf)
    }

    pub fn info_id(&self, id: u64) -> Result<(String, u64, Access)> {
        let inner = self.inner.lock();
        let att = inner
            .attachments
            .get(&id)
            .ok_or(ObjError::NotAttached { handle: id })?;
        let o = inner.objects[att.obj]
            .as_ref()
            .expect("attached object exists");
        Ok((o.desc.name.clone(), o.desc.size, att.access))
    }
}
