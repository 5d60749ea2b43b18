//! The PM shadow (the PMO thesis's design): a read-write attachment's stores go straight to
//! the object's other PM slot. Before the first access after attach or a sync, the slot is
//! caught up: the stale pages are copied from the current slot with non-temporal stores and
//! one fence. A sync writes back (clwb) the dirty pages of the slot; the old current slot then
//! becomes the shadow. A read-only attachment reads the current slot itself.

use super::super::area::{address, PmArea};
use super::super::binding::Binding;
use super::super::checksum;
use super::super::{check_readable, Access, ObjectState, Tracking};
use crate::error::Result;
use crate::layout::PAGE;
use pmkit_media::protect::Access as Rights;
use pmkit_media::Media;

/// Bytes copied per step when catching a shadow slot up.
const COPY_CHUNK: usize = 64 * 1024;
const _: () = assert!(
    COPY_CHUNK.is_multiple_of(PAGE),
    "catch-up copies whole pages"
);

/// A PM shadow attached to one handle.
pub(in crate::pool) struct PmShadow {
    /// The shadow slot equals the current contents plus this attachment's writes. Always true
    /// for a read-only attachment (it reads the current slot).
    caught_up: bool,
}

impl PmShadow {
    /// A read-only attachment makes the current slot readable (the first reader does); a
    /// read-write one is caught up at its first access.
    pub(super) fn attach<M: Media>(
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
    ) -> Result<PmShadow> {
        let read_only = binding.access == Access::Read;
        let first_reader = read_only && object.readers == 0 && area.protect();
        let current = object.slot_offset(object.current_slot());
        if first_reader {
            area.rights(current, object.capacity(), Rights::Read)?;
        }
        if area.checksum() {
            // Every attachment starts from the published slot (a reader reads it in place, a
            // writer's shadow is caught up from it): every page must match its CRC now. A
            // writer's view of a slot no reader maps is opened for the check only.
            let peek = area.protect() && !read_only && object.readers == 0;
            if peek {
                area.rights(current, object.capacity(), Rights::Read)?;
            }
            let (slot, mut page) = (object.current_slot(), [0u8; PAGE]);
            let verified = (0..object.pages()).try_for_each(|index| {
                area.read_verified_page(&object.descriptor, slot, index, &mut page)
            });
            if peek || (first_reader && verified.is_err()) {
                area.rights(current, object.capacity(), Rights::None)?;
            }
            verified?;
        }
        Ok(PmShadow {
            caught_up: read_only,
        })
    }

    /// Copy the stale pages from the current slot into the shadow slot (non-temporal stores,
    /// then one fence), then open the shadow for writing.
    pub(super) fn catch_up<M: Media>(
        &mut self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &mut Binding,
    ) -> Result<()> {
        if self.caught_up {
            return Ok(());
        }
        debug_assert_eq!(binding.access, Access::ReadWrite, "readers start caught up");
        debug_assert_ne!(
            binding.slot,
            object.current_slot(),
            "a shadow is the other slot"
        );
        let (shadow, current, capacity) = (
            object.slot_offset(binding.slot),
            object.slot_offset(object.current_slot()),
            object.capacity(),
        );
        // Pages of the shadow slot the media cannot return are copied too: the whole-line
        // stores clear the error, and the shadow then holds the current contents there.
        object.stale_bad_pages(area.media(), binding.slot);
        // Every page to copy must be readable in the current slot: checked before any rights
        // change or copy, so a failure leaves the shadow as it was (not caught up).
        for (first, count) in object.stale.runs() {
            check_readable(area.media(), current + first * PAGE, count * PAGE, || {
                object.slot_what(object.current_slot())
            })?;
        }
        if area.protect() || binding.tracks_faults() {
            area.rights(shadow, capacity, Rights::ReadWrite)?;
        }
        if area.checksum() {
            // A page of the shadow taken as equal to the current slot must match its CRC (the
            // same as the current page's); one that does not is copied again.
            let mut page = [0u8; PAGE];
            for index in (0..object.pages()).filter(|&index| !object.stale.contains(index)) {
                if area
                    .read_verified_page(&object.descriptor, binding.slot, index, &mut page)
                    .is_err()
                {
                    object.stale.set_range(index, 1);
                }
            }
        }
        if !object.stale.is_empty() {
            if area.protect() {
                area.rights(current, capacity, Rights::Read)?;
            }
            let copied = if area.checksum() {
                Self::copy_verified(area, object, binding)
            } else {
                let mut chunk = vec![0u8; COPY_CHUNK];
                for (first, count) in object.stale.runs() {
                    let (mut at, end) = (first * PAGE, (first + count) * PAGE);
                    while at < end {
                        let len = (end - at).min(COPY_CHUNK);
                        area.media().read(current + at, &mut chunk[..len]);
                        area.media().write_nt(shadow + at, &chunk[..len]);
                        area.count_copied(len as u64);
                        at += len;
                    }
                }
                Ok(())
            };
            // Orders the streaming copies before the attachment's own stores to the same lines.
            area.fence();
            if area.protect() {
                area.rights(current, capacity, Rights::None)?;
            }
            // A page of the current slot that fails its CRC fails the catch-up (the shadow is
            // not caught up; its stale pages stay stale).
            copied?;
            object.stale.clear();
        }
        if binding.tracks_faults() {
            area.rights(shadow, capacity, Rights::Read)?;
            let start =
                address(area.media(), shadow, capacity).expect("fault tracking needs addresses");
            binding.track_faults(start, capacity)?;
        }
        self.caught_up = true;
        Ok(())
    }

    /// Checksummed catch-up: copy each stale page of the current slot into the shadow slot
    /// once it matches its CRC, and give the shadow slot's table the same CRCs (no fence).
    fn copy_verified<M: Media>(
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
    ) -> Result<()> {
        let (current, descriptor) = (object.current_slot(), &object.descriptor);
        let shadow = object.slot_offset(binding.slot);
        let mut page = [0u8; PAGE];
        for (first, count) in object.stale.runs() {
            area.store_crcs(descriptor, binding.slot, first, count, |index| {
                area.read_verified_page(descriptor, current, index, &mut page)?;
                area.media().write_nt(shadow + index * PAGE, &page);
                area.count_copied(PAGE as u64);
                Ok(checksum::page_crc(&page))
            })?;
        }
        Ok(())
    }

    /// Read the attachment's slot; a media error there is an error, never data.
    #[inline]
    pub(super) fn read<M: Media>(
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
        off: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        let at = object.slot_offset(binding.slot) + off;
        if let Err(error) = check_readable(area.media(), at, dst.len(), || {
            object.slot_what(binding.slot)
        }) {
            dst.fill(0);
            return Err(error);
        }
        area.media().read(at, dst);
        Ok(())
    }

    pub(super) fn open_pages<M: Media>(
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
        at: usize,
        len: usize,
    ) -> Result<()> {
        area.rights(
            object.slot_offset(binding.slot) + at,
            len,
            Rights::ReadWrite,
        )
    }

    #[inline]
    pub(super) fn write<M: Media>(
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
        off: usize,
        src: &[u8],
    ) {
        area.media()
            .write(object.slot_offset(binding.slot) + off, src);
    }

    /// The slot's address on a mapping; valid until this handle's next sync or detach.
    pub(super) fn pointer<M: Media>(
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
    ) -> Option<*mut u8> {
        address(
            area.media(),
            object.slot_offset(binding.slot),
            object.capacity(),
        )
    }

    /// Write back (clwb) the dirty pages of the shadow slot (no fence). Nothing to publish when
    /// the shadow was not touched since the last sync.
    pub(super) fn write_back<M: Media>(
        &self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
    ) -> bool {
        if !self.caught_up {
            return false;
        }
        if binding.tracking == Tracking::Whole {
            binding.dirty_all(object);
        }
        if binding.dirty.is_empty() {
            return false;
        }
        let base = object.slot_offset(binding.slot);
        let mut page = [0u8; PAGE];
        for (first, count) in binding.dirty.runs() {
            if area.checksum() {
                let stored =
                    area.store_crcs(&object.descriptor, binding.slot, first, count, |index| {
                        area.media().read(base + index * PAGE, &mut page);
                        Ok(checksum::page_crc(&page))
                    });
                debug_assert!(stored.is_ok(), "computing CRCs from the shadow cannot fail");
            }
            area.flush(base + first * PAGE, count * PAGE);
            let bytes = (count * PAGE) as u64;
            area.count_flushed(bytes);
            area.count_synced(bytes);
        }
        true
    }

    /// The shadow slot is now the current slot: stop tracking it and put it at rest; the old
    /// current slot becomes the shadow, caught up at the next access.
    pub(super) fn published<M: Media>(
        &mut self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &mut Binding,
    ) -> Result<()> {
        self.caught_up = false;
        binding.stop_fault_tracking();
        Self::close(area, object, binding)
    }

    /// Unsynced writes are dropped: the pages they touched now differ from the current slot.
    pub(super) fn detach<M: Media>(
        self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
    ) -> Result<()> {
        match binding.access {
            Access::ReadWrite => {
                // Whole tracking records no pages before its sync: any page may differ.
                if self.caught_up && binding.tracking == Tracking::Whole {
                    object.stale.set_range(0, object.pages());
                } else if self.caught_up {
                    object.stale.union(&binding.dirty);
                }
                Self::close(area, object, binding)
            }
            Access::Read => {
                if object.readers == 0 && area.protect() {
                    let current = object.slot_offset(object.current_slot());
                    area.rights(current, object.capacity(), Rights::None)?;
                }
                Ok(())
            }
        }
    }

    /// Give a read-write attachment's shadow slot its rights at rest (after sync or detach).
    fn close<M: Media>(
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
    ) -> Result<()> {
        debug_assert!(
            binding.fault_entry.is_none(),
            "fault tracking stopped first"
        );
        if area.protect() || binding.tracking == Tracking::Faults {
            let shadow = object.slot_offset(binding.slot);
            area.rights(shadow, object.capacity(), area.rights_at_rest())?;
        }
        Ok(())
    }
}
