//! What is attached and how: the part of an attachment every shadow shares (the shadows take
//! it by reference; the attachment record in `attach` holds it beside its view).

use super::{Access, ObjectState, Tracking};
use crate::bits::PageSet;
use crate::error::{ObjError, Result};
use crate::faults;

/// The part of an attachment every shadow shares. Kept apart from the [`View`] so the view's
/// methods can take it by reference while the view itself is borrowed.
pub(super) struct Binding {
    /// The object's Object Table entry.
    pub(super) object: usize,
    pub(super) access: Access,
    /// How writes are tracked (never [`Tracking::Auto`]: resolved at attach).
    pub(super) tracking: Tracking,
    /// Read-write: the slot the next sync publishes (the PM shadow's own slot). Read-only: the
    /// current slot.
    pub(super) slot: u8,
    /// Pages written since attach or the last sync.
    pub(super) dirty: PageSet,
    /// This attachment's entry in the write-fault table, while faults are tracked.
    pub(super) fault_entry: Option<usize>,
}

impl Binding {
    /// Whether stores are found by write faults.
    pub(super) fn tracks_faults(&self) -> bool {
        self.access == Access::ReadWrite && self.tracking == Tracking::Faults
    }

    /// Record first stores to `[start, start+len)` in `dirty` by write faults.
    pub(super) fn track_faults(&mut self, start: *mut u8, len: usize) -> Result<()> {
        debug_assert!(self.tracks_faults() && self.fault_entry.is_none());
        let entry = faults::register(start, len, self.dirty.words_ptr())
            .map_err(|source| ObjError::Resource {
                what: "install the write-fault handler",
                source,
            })?
            .ok_or(ObjError::TooManyHandles {
                max: faults::MAX_TRACKED,
            })?;
        self.fault_entry = Some(entry);
        Ok(())
    }

    /// Stop write-fault tracking (before the shadow's rights change or it goes away).
    pub(super) fn stop_fault_tracking(&mut self) {
        if let Some(entry) = self.fault_entry.take() {
            faults::unregister(entry);
        }
    }

    /// Mark every page dirty.
    pub(super) fn dirty_all(&self, object: &ObjectState) {
        self.dirty.set_range(0, object.pages());
    }
}
