//! The shadow: where an attachment's reads, writes and pointer go, and how a sync makes its
//! changed pages durable in the object's target slot. One interface over the two designs:
//! - [`DramShadow`] (`dram.rs`): a DRAM buffer filled at attach; `sync` streams the pages that
//!   must change into the target slot with non-temporal stores.
//! - [`PmShadow`] (`pm.rs`): the object's other PM slot itself (the PMO thesis's design),
//!   caught up at the first access; `sync` writes back its dirty lines.
//!
//! An enum with inline methods, so the hot paths (pointer, write, write-back) pay one
//! predictable branch and no dynamic dispatch or allocation.

mod dram;
mod pm;

pub(super) use dram::DramShadow;
pub(super) use pm::PmShadow;

use super::area::PmArea;
use super::binding::Binding;
use super::{ObjectState, Shadow};
use crate::error::Result;
use crate::staging::Cache;
use pmkit_media::Media;

/// An attachment's view of its object: where its bytes are.
pub(in crate::pool) enum View {
    Dram(DramShadow),
    Pm(PmShadow),
}

impl Shadow {
    /// Whether a shadow of this kind has addresses (for pointers and write faults) on `media`:
    /// a DRAM buffer always, a PM slot only on a mapping.
    pub(in crate::pool) fn has_addresses<M: Media>(self, media: &M) -> bool {
        match self {
            Shadow::Dram => true,
            Shadow::Pm => media.mapping().is_some(),
        }
    }

    /// Whether the current slot of an object with `readers` read-only attachments is mapped
    /// readable for them (PM shadow), so the library must leave its rights alone.
    pub(in crate::pool) fn readers_map_current_slot(self, readers: u32) -> bool {
        self == Shadow::Pm && readers > 0
    }
}

impl View {
    /// Make the view, a shadow of `kind`, of a new attachment `binding` of `object` (not yet
    /// counted as attached), with the rights it needs and its write faults tracked if asked.
    ///
    /// Every attachment starts from the published slot (a DRAM copy of it, the slot itself, or
    /// a PM shadow caught up from it), so a media error anywhere in that slot fails the attach
    /// with [`crate::ObjError::BadMedia`] before a buffer is taken or a right changed: nothing
    /// is left attached and no partial copy exists.
    pub(in crate::pool) fn attach<M: Media>(
        kind: Shadow,
        area: &PmArea<'_, M>,
        buffers: &mut Cache,
        object: &ObjectState,
        binding: &mut Binding,
    ) -> Result<View> {
        object.check_published(area.media())?;
        Ok(match kind {
            Shadow::Dram => View::Dram(DramShadow::attach(area, buffers, object, binding)?),
            Shadow::Pm => View::Pm(PmShadow::attach(area, object, binding)?),
        })
    }

    /// Bring the view up to date before its first access since attach or the last sync.
    #[inline]
    pub(in crate::pool) fn catch_up<M: Media>(
        &mut self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &mut Binding,
    ) -> Result<()> {
        match self {
            // A DRAM buffer is filled at attach and equals the current slot after each sync.
            View::Dram(_) => Ok(()),
            View::Pm(shadow) => shadow.catch_up(area, object, binding),
        }
    }

    /// Copy `[off, off+dst.len())` of the view into `dst` (the range was checked). A PM view
    /// fails with [`crate::ObjError::BadMedia`] (and `dst` zeroed) where the media cannot
    /// return the bytes; a DRAM view reads DRAM.
    #[inline]
    pub(in crate::pool) fn read<M: Media>(
        &self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
        off: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        match self {
            View::Dram(shadow) => {
                shadow.read(off, dst);
                Ok(())
            }
            View::Pm(_) => PmShadow::read(area, object, binding, off, dst),
        }
    }

    /// Fault tracking: open the pages `[at, at+len)` for a write through the library (they are
    /// recorded dirty already, so they need not fault).
    #[inline]
    pub(in crate::pool) fn open_pages<M: Media>(
        &self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
        at: usize,
        len: usize,
    ) -> Result<()> {
        match self {
            View::Dram(shadow) => shadow.open_pages(at, len),
            View::Pm(_) => PmShadow::open_pages(area, object, binding, at, len),
        }
    }

    /// A write access (a write, a declared range, a pointer handed out): with
    /// [`super::Tracking::Whole`] a DRAM shadow marks every page now, as it has no other record
    /// that it was written; a PM shadow decides at write-back.
    #[inline]
    pub(in crate::pool) fn note_write_access(&self, object: &ObjectState, binding: &Binding) {
        if let View::Dram(shadow) = self {
            shadow.note_write_access(object, binding);
        }
    }

    /// Copy `src` into the view at `off` (the range was checked and is writable).
    #[inline]
    pub(in crate::pool) fn write<M: Media>(
        &self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
        off: usize,
        src: &[u8],
    ) {
        match self {
            View::Dram(shadow) => shadow.write(off, src),
            View::Pm(_) => PmShadow::write(area, object, binding, off, src),
        }
    }

    /// The view's address for the calling thread (handle `id`), `None` on media without one.
    #[inline]
    pub(in crate::pool) fn pointer<M: Media>(
        &mut self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
        id: u64,
    ) -> Result<Option<*mut u8>> {
        match self {
            View::Dram(shadow) => shadow.pointer(object, binding, id).map(Some),
            View::Pm(_) => Ok(PmShadow::pointer(area, object, binding)),
        }
    }

    /// Step 1 of a sync for this view: make the pages that must change durable-to-be in the
    /// target slot (no fence). False when there is nothing to publish. Page windows opened on
    /// the object area are recorded in `opened`.
    #[inline]
    pub(in crate::pool) fn write_back<M: Media>(
        &self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &Binding,
        opened: &mut Vec<(usize, usize)>,
    ) -> Result<bool> {
        // A sync never writes the published slot: that is what makes it atomic.
        debug_assert_ne!(
            binding.slot,
            object.current_slot(),
            "sync targets the other slot"
        );
        match self {
            View::Dram(shadow) => shadow.write_back(area, object, binding, opened),
            View::Pm(shadow) => Ok(shadow.write_back(area, object, binding)),
        }
    }

    /// After `object` was published from `binding.slot` (its word, stale and dirty sets
    /// updated; the slot not yet moved on): get ready for the next sync.
    #[inline]
    pub(in crate::pool) fn published<M: Media>(
        &mut self,
        area: &PmArea<'_, M>,
        object: &ObjectState,
        binding: &mut Binding,
    ) -> Result<()> {
        match self {
            View::Dram(shadow) => {
                shadow.published(object, binding);
                Ok(())
            }
            View::Pm(shadow) => shadow.published(area, object, binding),
        }
    }

    /// End the attachment (its fault tracking stopped, the object's reader or writer count
    /// updated): unsynced writes are dropped and the view is put at rest.
    pub(in crate::pool) fn detach<M: Media>(
        self,
        area: &PmArea<'_, M>,
        buffers: &mut Cache,
        object: &ObjectState,
        binding: &Binding,
    ) -> Result<()> {
        match self {
            View::Dram(shadow) => {
                shadow.detach(area, buffers, object, binding);
                Ok(())
            }
            View::Pm(shadow) => shadow.detach(area, object, binding),
        }
    }

    /// The pool goes away with this attachment: put a keyed buffer's key at rest before the
    /// buffer is unmapped and the key reused.
    pub(in crate::pool) fn release(&mut self) {
        if let View::Dram(shadow) = self {
            shadow.release();
        }
    }
}
