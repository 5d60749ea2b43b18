//! Attachments: the attachment record, attach and detach, and the map from handle ids to
//! attachments.

use super::area::address;
use super::handle::Handle;
use super::{
    add_under_lock, Access, ObjectState, Pool, PoolState, Shadow, Tracking, COPY_CHUNK, MAX_HANDLES,
};
use crate::bits::PageSet;
use crate::error::{ObjError, Result};
use crate::faults;
use crate::keys;
use crate::layout::{self, PAGE};
use crate::staging::{Buf, Cache};
use pmkit_media::protect::Access as Rights;
use pmkit_media::Media;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

pub(super) struct Attachment {
    pub(super) obj: usize,
    pub(super) access: Access,
    pub(super) tracking: Tracking,
    /// PM shadow: the slot reads and writes go to (the shadow for ReadWrite, the current slot
    /// for Read). DRAM shadow: the slot the next sync writes (ReadWrite) or the current (Read).
    pub(super) slot: u8,
    pub(super) dirty: PageSet,
    /// The shadow equals the current contents plus this attachment's writes (caught up).
    pub(super) fresh: bool,
    pub(super) fault_slot: Option<usize>,
    /// DRAM shadow: the buffer reads, writes and the user's pointer go to.
    pub(super) buf: Option<Buf>,
    /// The attaching thread ([`keys::thread_tag`]).
    pub(super) owner: u64,
    /// Other threads that took the pointer of a keyed buffer (their PKRU enables its key).
    pub(super) granted: Vec<u64>,
}

impl Attachment {
    /// Whether the calling thread is the only one with this attachment's buffer key enabled.
    pub(super) fn sole_holder(&self) -> bool {
        self.owner == keys::thread_tag() && self.granted.is_empty()
    }
}

/// The rights a user of an attachment gets (pages or key).
pub(super) fn user_rights(access: Access) -> Rights {
    match access {
        Access::ReadWrite => Rights::ReadWrite,
        Access::Read => Rights::Read,
    }
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
        for &b in bytes {
            self.write_u64(self.0 ^ b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

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
        let index = *inner
            .names
            .get(name)
            .ok_or_else(|| ObjError::NotFound { name: name.into() })?;
        if inner.attachments.len() >= MAX_HANDLES {
            return Err(ObjError::TooManyHandles { max: MAX_HANDLES });
        }
        // A DRAM shadow always has addresses; a PM shadow only on mapped media.
        let has_addr = self.shadow == Shadow::Dram || self.media.mapping().is_some();
        let tracking = match tracking {
            Tracking::Auto if has_addr => Tracking::Faults,
            Tracking::Auto => Tracking::Explicit,
            Tracking::Faults if !has_addr => {
                return Err(ObjError::BadArgument(
                    "fault tracking of a PM shadow needs media with addresses (a Region)".into(),
                ))
            }
            t => t,
        };
        let id = inner.next_handle;
        let o = inner.objects[index].as_ref().expect("named object exists");
        match access {
            Access::ReadWrite if o.writer.is_some() => {
                return Err(ObjError::Busy {
                    name: name.into(),
                    why: "it is already attached read-write; detach that handle first",
                })
            }
            Access::ReadWrite if o.readers > 0 => {
                return Err(ObjError::Busy {
                    name: name.into(),
                    why: "it is attached read-only by other handles",
                })
            }
            Access::Read if o.writer.is_some() => {
                return Err(ObjError::Busy {
                    name: name.into(),
                    why: "it is attached read-write",
                })
            }
            _ => {}
        }
        let (pages, cur, cap) = (o.pages(), o.desc.slot_off(o.active()), o.desc.cap as usize);
        // The fault handler writes the dirty set of a tracked attachment through a pointer.
        let dirty = if tracking == Tracking::Faults {
            PageSet::tracked(pages)
        } else {
            PageSet::new(pages)
        };
        let (buf, fault_slot) = match self.shadow {
            Shadow::Dram => {
                // Never synced: both slots still hold create's zeroes.
                let zero = layout::state_generation(o.state) == 1;
                let (b, f) =
                    self.stage(&mut inner.buffers, cur, cap, zero, access, tracking, &dirty)?;
                (Some(b), f)
            }
            Shadow::Pm => {
                if access == Access::Read && o.readers == 0 && self.protect {
                    self.rights(cur, cap, Rights::Read)?;
                }
                (None, None)
            }
        };
        let o = inner.objects[index].as_mut().expect("named object exists");
        let slot = match access {
            Access::ReadWrite => {
                o.writer = Some(id);
                o.active() ^ 1
            }
            Access::Read => {
                o.readers += 1;
                o.active()
            }
        };
        inner.next_handle += 1;
        inner.attachments.insert(
            id,
            Attachment {
                obj: index,
                access,
                tracking,
                slot,
                dirty,
                fresh: access == Access::Read || buf.is_some(),
                fault_slot,
                buf,
                owner: keys::thread_tag(),
                granted: vec![],
            },
        );
        Ok(id)
    }

    /// DRAM shadow: a buffer holding the object's current slot `[cur, cur+cap)`, with the
    /// rights the attachment needs, and its write-fault registration (into `dirty`) if tracked.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn stage(
        &self,
        buffers: &mut Cache,
        cur: usize,
        cap: usize,
        zero: bool,
        access: Access,
        tracking: Tracking,
        dirty: &PageSet,
    ) -> Result<(Buf, Option<usize>)> {
        let pages = cap / PAGE;
        let io = |what: &'static str, source: std::io::Error| ObjError::Resource { what, source };
        let buf = match buffers.take(pages) {
            Some(b) => b,
            None => Buf::map(pages, self.buffer_rights_at_rest(), self.buf_keys)
                .map_err(|e| io("map a DRAM shadow buffer", e))?,
        };
        // Open the buffer for the fill: a keyed one in this thread (the user's rights follow
        // below; on an error the key is disabled again), another by its page rights.
        if buf.keyed() {
            buf.allow_thread(Rights::ReadWrite);
        } else if self.protect {
            buf.set(0, cap, Rights::ReadWrite)
                .map_err(|e| io("open a DRAM shadow buffer", e))?;
        }
        let tracked = access == Access::ReadWrite && tracking == Tracking::Faults;
        let ready = || -> Result<Option<usize>> {
            if zero {
                // SAFETY: the buffer was opened above; zeroing DRAM instead of reading PM's
                // known zeroes.
                unsafe { buf.zero(0, cap) };
            } else {
                let w = self.open_area(cur, cap, Rights::Read)?;
                // SAFETY: the buffer holds at least `cap` bytes and is writable here (opened
                // above). It is not handed out yet, but a pointer kept from its last
                // attachment may still reach it, so it is written by raw pointer only.
                unsafe { self.media.read_into(cur, buf.ptr(), cap) };
                drop(w);
                self.close_area(cur, cap)?;
                add_under_lock(&self.counters.bytes_copied, cap as u64);
            }
            if access == Access::Read && buf.keyed() {
                buf.allow_thread(Rights::Read);
            }
            if tracked || (access == Access::Read && self.protect && !buf.keyed()) {
                buf.set(0, cap, Rights::Read)
                    .map_err(|e| io("protect a DRAM shadow buffer", e))?;
            }
            if !tracked {
                return Ok(None);
            }
            faults::register(buf.ptr(), cap, dirty.words_ptr())
                .map_err(|source| ObjError::Resource {
                    what: "install the write-fault handler",
                    source,
                })?
                .ok_or(ObjError::TooManyHandles {
                    max: faults::MAX_TRACKED,
                })
                .map(Some)
        };
        match ready() {
            Ok(fault_slot) => {
                if buf.keyed() {
                    add_under_lock(&self.counters.keyed_attaches, 1);
                }
                Ok((buf, fault_slot))
            }
            Err(e) => {
                // The buffer is unmapped on return: it must be at rest (its key reusable).
                buf.deny_thread();
                Err(e)
            }
        }
    }

    /// DRAM shadow: return a detached attachment's buffer to the cache at rest: `PROT_NONE` with
    /// page protection, or its key disabled in every thread, so a kept pointer faults. A keyed
    /// buffer whose key another thread still has enabled loses the key (see `keys.rs`). A
    /// buffer that cannot be put at rest is unmapped instead of cached.
    pub(super) fn unstage(&self, buffers: &mut Cache, mut buf: Buf, cap: usize, att: &Attachment) {
        let tracked = att.access == Access::ReadWrite && att.tracking == Tracking::Faults;
        let reset = if buf.keyed() {
            buf.rest_key(att.sole_holder()).and_then(|()| {
                // Fault tracking left pages read-only; a keyed buffer rests read-write (one
                // whose key was retired rests `PROT_NONE` already).
                if tracked && buf.keyed() {
                    buf.set(0, cap, Rights::ReadWrite)
                } else {
                    Ok(())
                }
            })
        } else if self.protect || tracked {
            buf.set(0, cap, self.buffer_rights_at_rest())
        } else {
            Ok(())
        };
        if let Err(e) = reset {
            tracing::warn!("cannot reset a DRAM shadow's rights ({e}): unmapping it");
            return;
        }
        buffers.give(buf);
    }

    /// Bring a read-write attachment's shadow up to date: copy the stale pages from the current
    /// slot (non-temporal stores, then one fence), then open the shadow for writing.
    pub(super) fn catch_up(&self, inner: &mut PoolState, id: u64) -> Result<()> {
        let att = inner
            .attachments
            .get(&id)
            .ok_or(ObjError::NotAttached { handle: id })?;
        if att.fresh {
            return Ok(());
        }
        let (index, slot, tracking) = (att.obj, att.slot, att.tracking);
        let o = inner.objects[index]
            .as_mut()
            .expect("attached object exists");
        let (shadow, cur, cap) = (
            o.desc.slot_off(slot),
            o.desc.slot_off(o.active()),
            o.desc.cap as usize,
        );
        if self.protect || tracking == Tracking::Faults {
            self.rights(shadow, cap, Rights::ReadWrite)?;
        }
        if !o.stale.is_empty() {
            if self.protect {
                self.rights(cur, cap, Rights::Read)?;
            }
            let mut buf = vec![0u8; COPY_CHUNK];
            for (first, n) in o.stale.runs() {
                let (mut at, end) = (first * PAGE, (first + n) * PAGE);
                while at < end {
                    let k = (end - at).min(COPY_CHUNK);
                    self.media.read(cur + at, &mut buf[..k]);
                    self.media.write_nt(shadow + at, &buf[..k]);
                    add_under_lock(&self.counters.bytes_copied, k as u64);
                    at += k;
                }
            }
            // Orders the streaming copies before the attachment's own stores to the same lines.
            self.fence();
            if self.protect {
                self.rights(cur, cap, Rights::None)?;
            }
            o.stale.clear();
        }
        let att = inner.attachments.get_mut(&id).expect("checked above");
        if tracking == Tracking::Faults {
            self.rights(shadow, cap, Rights::Read)?;
            let start = address(&self.media, shadow, cap).expect("fault tracking needs addresses");
            let slot = faults::register(start, cap, att.dirty.words_ptr())
                .map_err(|source| ObjError::Resource {
                    what: "install the write-fault handler",
                    source,
                })?
                .ok_or(ObjError::TooManyHandles {
                    max: faults::MAX_TRACKED,
                })?;
            att.fault_slot = Some(slot);
        }
        att.fresh = true;
        Ok(())
    }

    /// Stop fault tracking and close the shadow (after sync or detach).
    pub(super) fn close_shadow(&self, att: &mut Attachment, o: &ObjectState) -> Result<()> {
        if let Some(s) = att.fault_slot.take() {
            faults::unregister(s);
        }
        if att.access == Access::ReadWrite && (self.protect || att.tracking == Tracking::Faults) {
            self.rights(
                o.desc.slot_off(att.slot),
                o.desc.cap as usize,
                self.rights_at_rest(),
            )?;
        }
        Ok(())
    }

    pub fn detach_id(&self, id: u64) -> Result<()> {
        let mut inner = self.inner.lock();
        let mut att = inner
            .attachments
            .remove(&id)
            .ok_or(ObjError::NotAttached { handle: id })?;
        let inner = &mut *inner;
        let o = inner.objects[att.obj]
            .as_mut()
            .expect("attached object exists");
        if let Some(s) = att.fault_slot.take() {
            faults::unregister(s);
        }
        if let Some(b) = att.buf.take() {
            // DRAM shadow: unsynced writes vanish with the buffer; PM was not touched.
            match att.access {
                Access::ReadWrite => o.writer = None,
                Access::Read => o.readers -= 1,
            }
            self.unstage(&mut inner.buffers, b, o.desc.cap as usize, &att);
            return Ok(());
        }
        match att.access {
            Access::ReadWrite => {
                // Unsynced writes are dropped: those shadow pages now differ from the current slot.
                // Whole tracking records no pages before its sync: any page may differ.
                if att.fresh && att.tracking == Tracking::Whole {
                    o.stale.set_range(0, o.pages());
                } else if att.fresh {
                    o.stale.union(&att.dirty);
                }
                o.writer = None;
                self.close_shadow(&mut att, o)?;
            }
            Access::Read => {
                o.readers -= 1;
                if o.readers == 0 && self.protect {
                    self.rights(
                        o.desc.slot_off(o.active()),
                        o.desc.cap as usize,
                        Rights::None,
                    )?;
                }
            }
        }
        Ok(())
    }
}
