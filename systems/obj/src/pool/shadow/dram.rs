//! The DRAM shadow: a page-aligned DRAM buffer per attachment (see `staging.rs`), filled from
//! the current slot at attach (or zeroed for a never-synced object). Stores are plain cached
//! DRAM stores; a sync streams the dirty and stale pages into the target slot with
//! non-temporal stores. The buffer stays attached across syncs.
//!
//! User pointers reach the buffer, so it is only ever copied by raw pointer, never formed into
//! a slice.

use super::super::area::PmArea;
use super::super::binding::Binding;
use super::super::checksum;
use super::super::{Access, ObjectState, Tracking, MAX_THREADS_PER_HANDLE};
use crate::error::{ObjError, Result};
use crate::keys;
use crate::layout::{self, PAGE};
use crate::staging::{Buffer, Cache};
use pmkit_media::protect::Access as Rights;
use pmkit_media::Media;

/// A DRAM shadow attached to one handle.
pub(in crate::pool) struct DramShadow {
    buffer: Buffer,
    /// The attaching thread ([`keys::thread_tag`]).
    owner: u64,
    /// Other threads that took the pointer of a keyed buffer (their PKRU enables its key).
    granted: Vec<u64>,
}

/// The rights a user of an attachment gets (pages or key).
fn user_rights(access: Access) -> Rights {
    match access {
        Access::ReadWrite => Rights::ReadWrite,
        Access::Read => Rights::Read,
    }
}

/// An OS refusal while handling a DRAM shadow buffer.
fn refused(what: &'static str) -> impl FnOnce(std::io::Error) -> ObjError {
    move |source| ObjError::Resource { what, source }
}

impl DramShadow {
    /// A buffer holding the object's current slot, with the rights the attachment needs, and
    /// its write faults registered (into `binding.dirty`) if tracked.
    pub(super) fn attach<M: Media>(
        area: &PmArea<'_, M>,
        buffers: &mut Cache,
        object: &ObjectState,
        binding: &mut Binding,
    ) -> Result<DramShadow> {
        let (current, capacity) = (object.slot_offset(object.current_slot()), object.capacity());
        let buffer = match buffers.take(object.pages()) {
            Some(buffer) => buffer,
            None => Buffer::map(object.pages(), area.rights_at_rest(), area.buffer_keys())
                .map_err(refused("map a DRAM shadow buffer"))?,
        };
        // Open the buffer for the fill: a keyed one in this thread (the user's rights follow
        // below; on an error the key is disabled again), another by its page rights.
        if buffer.keyed() {
            buffer.allow_thread(Rights::ReadWrite);
        } else if area.protect() && !area.buffers_rest_open() {
            buffer
                .set(0, capacity, Rights::ReadWrite)
                .map_err(refused("open a DRAM shadow buffer"))?;
        }
        let fill = |binding: &mut Binding| -> Result<()> {
            // Never synced: both slots still hold create's zeroes, so PM need not be read.
            if layout::state_generation(object.word) == 1 {
                // SAFETY: the buffer was opened for writing above; zeroing DRAM stands in for
                // reading PM's known zeroes.
                unsafe { buffer.zero(0, capacity) };
            } else {
                let window = area.open(current, capacity, Rights::Read)?;
                let filled: Result<()> = if area.checksum() {
                    // Page by page through a scratch page, each compared with its CRC before
                    // it reaches the buffer (which is handed out only if every page matches).
                    let (slot, mut page) = (object.current_slot(), [0u8; PAGE]);
                    (0..object.pages()).try_for_each(|index| {
                        area.read_verified_page(&object.descriptor, slot, index, &mut page)?;
                        // SAFETY: as for `fill_from` below; the page lies inside `capacity`.
                        unsafe { buffer.copy_in(index * PAGE, &page) };
                        Ok(())
                    })
                } else {
                    // SAFETY: the buffer holds at least `capacity` bytes and was opened for
                    // writing above. It is not handed out yet, but a pointer kept from its last
                    // attachment may still reach it, which is why it is written by raw pointer
                    // only.
                    unsafe { buffer.fill_from(area.media(), current, capacity) };
                    Ok(())
                };
                drop(window);
                area.close(current, capacity)?;
                filled?;
                area.count_copied(capacity as u64);
            }
            let read_only = binding.access == Access::Read;
            if read_only && buffer.keyed() {
                buffer.allow_thread(Rights::Read);
            }
            let tracked = binding.tracks_faults();
            if tracked || (read_only && area.protect() && !buffer.keyed()) {
                buffer
                    .set(0, capacity, Rights::Read)
                    .map_err(refused("protect a DRAM shadow buffer"))?;
            }
            if tracked {
                binding.track_faults(buffer.ptr(), capacity)?;
            }
            Ok(())
        };
        if let Err(error) = fill(binding) {
            // The buffer is unmapped on return: it must be at rest (its key reusable).
            buffer.deny_thread();
            return Err(error);
        }
        if buffer.keyed() {
            area.count_keyed_attach();
        }
        Ok(DramShadow {
            buffer,
            owner: keys::thread_tag(),
            granted: vec![],
        })
    }

    /// Whether the calling thread is the only one with this buffer's key enabled.
    fn sole_holder(&self) -> bool {
        self.owner == keys::thread_tag() && self.granted.is_empty()
    }

    #[inline]
    pub(super) fn read(&self, off: usize, dst: &mut [u8]) {
        let _window = self.buffer.window(Rights::Read);
        // SAFETY: an attached buffer is readable (with a key: in this thread, by the window);
        // the caller checked the range against the object, which fits in the buffer.
        unsafe { self.buffer.copy_out(off, dst) };
    }

    pub(super) fn open_pages(&self, at: usize, len: usize) -> Result<()> {
        self.buffer
            .set(at, len, Rights::ReadWrite)
            .map_err(refused("open a DRAM shadow page for writing"))
    }

    #[inline]
    pub(super) fn note_write_access(&self, object: &ObjectState, binding: &Binding) {
        if binding.tracking == Tracking::Whole && binding.access == Access::ReadWrite {
            binding.dirty_all(object);
        }
    }

    #[inline]
    pub(super) fn write(&self, off: usize, src: &[u8]) {
        let _window = self.buffer.window(Rights::ReadWrite);
        // SAFETY: a read-write attachment's buffer is writable (with a key: in this thread, by
        // the window; fault-tracked pages were opened by the caller); the range was checked.
        unsafe { self.buffer.copy_in(off, src) };
    }

    /// The buffer's address. With a key, asking for the pointer is what lets the calling
    /// thread use it.
    pub(super) fn pointer(
        &mut self,
        object: &ObjectState,
        binding: &Binding,
        id: u64,
    ) -> Result<*mut u8> {
        self.note_write_access(object, binding);
        let me = keys::thread_tag();
        if self.buffer.keyed() && me != self.owner && !self.granted.contains(&me) {
            if self.granted.len() == MAX_THREADS_PER_HANDLE {
                return Err(ObjError::BadArgument(format!(
                    "more than {MAX_THREADS_PER_HANDLE} threads took the pointer of handle \
                     {id}; attach with protection keys off (PoolOptions::pkey = false, \
                     PMO_PKEY=off) to share it widely"
                )));
            }
            self.buffer.allow_thread(user_rights(binding.access));
            self.granted.push(me);
        }
        Ok(self.buffer.ptr())
    }

    /// Stream the dirty and stale pages into the target slot (non-temporal stores, no fence).
    pub(super) fn write_back<M: Media>(
        &self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
        opened: &mut Vec<(usize, usize)>,
    ) -> Result<bool> {
        if binding.dirty.is_empty() {
            return Ok(false);
        }
        // The target will differ from the current slot on the dirty pages: record that first,
        // so a failure part-way leaves `stale` an over-estimate, never an under one. Pages of
        // the target the media cannot return are rewritten from the buffer too (it holds the
        // whole current contents), so the slot this sync publishes reads back clean.
        object.stale.union(&binding.dirty);
        object.stale_bad_pages(area.media(), binding.slot);
        let (target, capacity) = (object.slot_offset(binding.slot), object.capacity());
        area.open_for_sync(target, capacity, opened)?;
        let _window = self.buffer.window(Rights::Read);
        for (first, count) in object.stale.runs() {
            let (at, len) = (first * PAGE, count * PAGE);
            debug_assert!(at + len <= capacity, "stale pages lie inside the object");
            if area.checksum() {
                // Through a scratch page, so the CRC is of exactly the bytes streamed (a page
                // being written is whole in the buffer).
                let mut page = [0u8; PAGE];
                area.store_crcs(&object.descriptor, binding.slot, first, count, |index| {
                    // SAFETY: as for `write_from` below, for one page of the range.
                    unsafe { self.buffer.copy_out(index * PAGE, &mut page) };
                    area.write(target + index * PAGE, &page)?;
                    Ok(checksum::page_crc(&page))
                })?;
            } else {
                // SAFETY: `[at, at+len)` lies in the object, whose capacity fits in the
                // buffer, which is readable here (the window above). User threads may store
                // into it while this runs (they should not: such stores may or may not be
                // synced), which is why it is read by raw pointer.
                unsafe { area.write_from(target + at, self.buffer.at(at, len), len)? };
            }
            area.count_synced(len as u64);
        }
        Ok(true)
    }

    /// The buffer equals the new current slot and stays attached; re-arm dirty tracking.
    pub(super) fn published(&self, object: &ObjectState, binding: &Binding) {
        match binding.tracking {
            Tracking::Whole => binding.dirty_all(object),
            Tracking::Faults => {
                // Re-arm: the next store to each page faults again.
                if let Err(error) = self.buffer.set(0, object.capacity(), Rights::Read) {
                    tracing::warn!("cannot re-arm write faults ({error}): next sync writes all");
                    binding.dirty_all(object);
                }
            }
            Tracking::Explicit | Tracking::Auto => {}
        }
    }

    /// Return the buffer to the cache at rest: `PROT_NONE` with page protection, or its key
    /// disabled in every thread, so a kept pointer faults. A keyed buffer whose key another
    /// thread still has enabled loses the key (see `keys.rs`). A buffer that cannot be put at
    /// rest is unmapped instead of cached. Unsynced writes vanish with it; PM was not touched.
    pub(super) fn detach<M: Media>(
        mut self,
        area: &PmArea<'_, M>,
        buffers: &mut Cache,
        object: &ObjectState,
        binding: &Binding,
    ) {
        let tracked = binding.tracks_faults();
        let sole = self.sole_holder();
        let buffer = &mut self.buffer;
        let reset = if buffer.keyed() {
            buffer.put_key_at_rest(sole).and_then(|()| {
                // Fault tracking left pages read-only; a keyed buffer rests read-write (one
                // whose key was retired rests `PROT_NONE` already).
                if tracked && buffer.keyed() {
                    buffer.set(0, object.capacity(), Rights::ReadWrite)
                } else {
                    Ok(())
                }
            })
        } else if tracked || (area.protect() && !area.buffers_rest_open()) {
            buffer.set(0, object.capacity(), area.rights_at_rest())
        } else if area.protect() && binding.access == Access::Read {
            // A read-only attachment's buffer was made read-only; open buffers rest open.
            buffer.set(0, object.capacity(), Rights::ReadWrite)
        } else {
            Ok(())
        };
        if let Err(error) = reset {
            tracing::warn!("cannot reset a DRAM shadow's rights ({error}): unmapping it");
            return;
        }
        buffers.give(self.buffer);
    }

    /// See [`super::View::release`].
    pub(super) fn release(&mut self) {
        if self.buffer.keyed() {
            let sole = self.sole_holder();
            if let Err(error) = self.buffer.put_key_at_rest(sole) {
                tracing::warn!("cannot protect a DRAM shadow being released: {error}");
            }
        }
    }
}
