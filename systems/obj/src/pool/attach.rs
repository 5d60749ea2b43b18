//! Attachments: the attachment record, attach and detach, and the map from handle ids to
//! attachments. Where an attachment's bytes live is its [`View`] (see `shadow`).

use super::binding::Binding;
use super::handle::Handle;
use super::shadow::View;
use super::{Access, Pool, Tracking, MAX_HANDLES};
use crate::bits::PageSet;
use crate::error::{ObjError, Result};
use pmkit_media::Media;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// An attached handle.
pub(super) struct Attachment {
    /// What is attached and how (everything but the shadow itself).
    pub(super) binding: Binding,
    /// Where reads, writes and the user's pointer go.
    pub(super) view: View,
}

/// Hashes handle ids, which the pool hands out itself in sequence: a multiplication by an odd
/// constant spreads them over every bit (SipHash defends against keys an attacker picks, and
/// costs more than the rest of a map lookup).
#[derive(Default)]
pub(super) struct HandleIdHasher(u64);

impl Hasher for HandleIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(self.0 ^ byte as u64);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Attachments by handle id.
pub(super) type HandleMap<V> = HashMap<u64, V, BuildHasherDefault<HandleIdHasher>>;

impl<M: Media> Pool<M> {
    /// Attach `name`; see [`Tracking::Auto`] for how writes are tracked.
    pub fn attach(&self, name: &str, access: Access) -> Result<Handle<'_, M>> {
        self.attach_with(name, access, Tracking::Auto)
    }

    /// Attach `name` with a chosen dirty-tracking method. One read-write attachment or any
    /// number of read-only ones at a time.
    pub fn attach_with(
        &self,
        name: &str,
        access: Access,
        tracking: Tracking,
    ) -> Result<Handle<'_, M>> {
        let id = self.attach_id(name, access, tracking)?;
        Ok(Handle { pool: self, id })
    }

    /// Id-based API (the C ABI's handles are ids): every call with a stale id fails with
    /// [`ObjError::NotAttached`].
    pub fn attach_id(&self, name: &str, access: Access, tracking: Tracking) -> Result<u64> {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let index = inner.index_of(name)?;
        if inner.attachments.len() >= MAX_HANDLES {
            return Err(ObjError::TooManyHandles { max: MAX_HANDLES });
        }
        let has_addresses = self.shadow.has_addresses(&self.media);
        let tracking = match tracking {
            Tracking::Auto if has_addresses => Tracking::Faults,
            Tracking::Auto => Tracking::Explicit,
            Tracking::Faults if !has_addresses => {
                return Err(ObjError::BadArgument(
                    "fault tracking of a PM shadow needs media with addresses (a Region)".into(),
                ))
            }
            tracking => tracking,
        };
        let id = inner.next_handle;
        // The objects and the buffer cache are borrowed apart (not through `inner.object`).
        let object = inner.objects[index].as_ref().expect("named objects exist");
        let busy = match access {
            Access::ReadWrite if object.writer.is_some() => {
                Some("it is already attached read-write; detach that handle first")
            }
            Access::ReadWrite if object.readers > 0 => {
                Some("it is attached read-only by other handles")
            }
            Access::Read if object.writer.is_some() => Some("it is attached read-write"),
            _ => None,
        };
        if let Some(why) = busy {
            return Err(ObjError::Busy {
                name: name.into(),
                why,
            });
        }
        let pages = object.pages();
        let mut binding = Binding {
            object: index,
            access,
            tracking,
            slot: match access {
                Access::ReadWrite => object.current_slot() ^ 1,
                Access::Read => object.current_slot(),
            },
            // The fault handler writes the dirty set of a tracked attachment by pointer.
            dirty: if tracking == Tracking::Faults {
                PageSet::tracked(pages)
            } else {
                PageSet::new(pages)
            },
            fault_entry: None,
        };
        let view = View::attach(
            self.shadow,
            &self.area(),
            &mut inner.buffers,
            object,
            &mut binding,
        )?;
        let object = inner.object_mut(index);
        match access {
            Access::ReadWrite => object.writer = Some(id),
            Access::Read => object.readers += 1,
        }
        inner.next_handle += 1;
        inner.attachments.insert(id, Attachment { binding, view });
        Ok(id)
    }

    /// Detach handle `id`; unsynced writes are discarded.
    pub fn detach_id(&self, id: u64) -> Result<()> {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let Attachment { mut binding, view } = inner
            .attachments
            .remove(&id)
            .ok_or(ObjError::NotAttached { handle: id })?;
        binding.stop_fault_tracking();
        let object = inner.objects[binding.object]
            .as_mut()
            .expect("attached objects exist");
        match binding.access {
            Access::ReadWrite => object.writer = None,
            Access::Read => object.readers -= 1,
        }
        view.detach(&self.area(), &mut inner.buffers, object, &binding)
    }
}
