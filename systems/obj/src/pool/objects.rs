//! Objects as a whole: create, delete, list, the attached object's description, and a copy of
//! the published slot.

use super::{check_readable, Access, ObjInfo, ObjectState, Pool};
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
        let descriptor = Descriptor {
            offset,
            size,
            cap,
            flags: 0,
            name: name.into(),
        };
        let made = (|| {
            let (off, len, area) = (offset as usize, 2 * cap as usize, self.area());
            let window = area.open(off, len, Rights::ReadWrite)?;
            // Both slots start equal (zero), so the first attach copies nothing. Zeroed in
            // runs of up to 64 KiB: one store call each (a `pwrite` with the kernel guard).
            static ZEROES: [u8; 16 * PAGE] = [0; 16 * PAGE];
            let zeroed = (0..len)
                .step_by(ZEROES.len())
                .try_for_each(|at| area.write(off + at, &ZEROES[..ZEROES.len().min(len - at)]));
            drop(window);
            area.close(off, len)?;
            zeroed?;
            if self.checksum() {
                // Both slots' tables say "zero page", durable with the rest by the fence.
                let zero_crc = super::checksum::page_crc(&ZEROES[..PAGE]);
                area.store_crcs(&descriptor, 0, 0, 2 * cap as usize / PAGE, |_| Ok(zero_crc))?;
            }
            let entry_off = self.geometry.entry_off(index);
            let encoded = descriptor.encode();
            // Pair assertion: what is persisted must decode to what was meant.
            debug_assert_eq!(
                decode_entry(index, &encoded, &self.geometry).as_ref().ok(),
                Some(&descriptor),
                "an encoded table entry decodes to itself"
            );
            self.media.write(entry_off + 8, &encoded);
            self.flush(entry_off + 8, ENTRY - 8);
            self.fence();
            // The allocation and the object exist from this one store on.
            self.persist_word(entry_off, layout::state_word(1, 0));
            Ok(())
        })();
        if let Err(error) = made {
            inner.extents.release(offset, 2 * cap);
            inner.free_entries.push(index);
            return Err(error);
        }
        let pages = cap as usize / PAGE;
        inner.names.insert(name.into(), index);
        inner.objects[index] = Some(ObjectState {
            descriptor,
            word: layout::state_word(1, 0),
            stale: PageSet::new(pages),
            readers: 0,
            writer: None,
        });
        Ok(())
    }

    /// Delete object `name` (it must not be attached). Durable when this returns.
    pub fn delete(&self, name: &str) -> Result<()> {
        let mut inner = self.inner.lock();
        let index = inner.index_of(name)?;
        let object = inner.object(index);
        if object.writer.is_some() || object.readers > 0 {
            return Err(ObjError::Busy {
                name: name.into(),
                why: "it is attached; detach every handle first",
            });
        }
        let (offset, cap) = (object.descriptor.offset, object.descriptor.cap);
        self.persist_word(self.geometry.entry_off(index), 0);
        inner.objects[index] = None;
        inner.names.remove(name);
        inner.free_entries.push(index);
        inner.extents.release(offset, 2 * cap);
        Ok(())
    }

    /// Every object, in table order.
    pub fn list(&self) -> Vec<ObjInfo> {
        let inner = self.inner.lock();
        inner
            .objects
            .iter()
            .enumerate()
            .filter_map(|(index, object)| {
                let object = object.as_ref()?;
                let descriptor = &object.descriptor;
                Some(ObjInfo {
                    name: descriptor.name.clone(),
                    index,
                    size: descriptor.size,
                    capacity: descriptor.cap,
                    offset: descriptor.offset,
                    slot: object.current_slot(),
                    generation: layout::state_generation(object.word),
                    flags: descriptor.flags,
                    attached: if object.writer.is_some() {
                        Some(Access::ReadWrite)
                    } else if object.readers > 0 {
                        Some(Access::Read)
                    } else {
                        None
                    },
                })
            })
            .collect()
    }

    /// The last published contents of `name` (what `dump` prints). Fails with
    /// [`ObjError::BadMedia`] where the media cannot return a byte of it.
    pub fn read_published(&self, name: &str) -> Result<Vec<u8>> {
        let inner = self.inner.lock();
        let object = inner.object(inner.index_of(name)?);
        let (off, capacity) = (object.slot_offset(object.current_slot()), object.capacity());
        let size = object.descriptor.size as usize;
        // A checksummed pool reads whole pages, to compare each with its CRC.
        let len = if self.checksum() { capacity } else { size };
        // A media error is an error, never a copy holding the fill pattern.
        check_readable(&self.media, off, len, || {
            object.slot_what(object.current_slot())
        })?;
        let mut copy = vec![0u8; len];
        // Readers that map the current slot keep it readable: leave its rights alone.
        let open = !self.shadow.readers_map_current_slot(object.readers);
        let area = self.area();
        let window = if open {
            area.open(off, capacity, Rights::Read)?
        } else {
            None
        };
        self.media.read(off, &mut copy);
        drop(window);
        if open {
            area.close(off, capacity)?;
        }
        if self.checksum() {
            for (page, data) in copy.chunks(PAGE).enumerate() {
                let slot = object.current_slot();
                let descriptor = &object.descriptor;
                super::checksum::verify_page(
                    &self.media,
                    &self.geometry,
                    descriptor,
                    slot,
                    page,
                    data,
                )?;
            }
            copy.truncate(size);
        }
        Ok(copy)
    }

    /// Name, size and access of handle `id`.
    pub fn info_id(&self, id: u64) -> Result<(String, u64, Access)> {
        let inner = self.inner.lock();
        let attachment = inner.attachment(id)?;
        let object = inner.object(attachment.binding.object);
        let descriptor = &object.descriptor;
        Ok((
            descriptor.name.clone(),
            descriptor.size,
            attachment.binding.access,
        ))
    }
}

/// Decode table entry bytes 8..128 as `scan` would (the state word is not part of them).
fn decode_entry(
    index: usize,
    encoded: &[u8; ENTRY - 8],
    geometry: &layout::Geometry,
) -> Result<Descriptor> {
    let mut entry = [0u8; ENTRY];
    entry[8..].copy_from_slice(encoded);
    Descriptor::decode(index, &entry, geometry)
}
