//! PMO Sync: write the changed pages back into each object's target slot, then publish them
//! with one fence and one persisted word (one object) or a committed intent (several).

use super::area::AreaGuard;
use super::{add_under_lock, Access, Pool, PoolState, Shadow, Tracking};
use crate::error::{ObjError, Result};
use crate::layout::{self, Intent, MAX_SYNC, PAGE};
use pmkit_media::protect::Access as Rights;
use pmkit_media::Media;

impl<M: Media> Pool<M> {
    /// PMO Sync: publish the writes of every handle in `ids` atomically, as one.
    pub fn sync_ids(&self, ids: &[u64]) -> Result<()> {
        if ids.len() > MAX_SYNC {
            return Err(ObjError::TooMany {
                n: ids.len(),
                max: MAX_SYNC,
            });
        }
        let mut inner = self.inner.lock();
        let mut seen = Vec::new(); // objects of a multi-object sync (a single one needs no check)
        for &id in ids {
            let att = inner
                .attachments
                .get(&id)
                .ok_or(ObjError::NotAttached { handle: id })?;
            let name = &inner.objects[att.obj].as_ref().expect("attached").desc.name;
            if att.access != Access::ReadWrite {
                return Err(ObjError::ReadOnly {
                    name: name.clone(),
                    what: "sync",
                });
            }
            if ids.len() > 1 {
                if seen.contains(&att.obj) {
                    return Err(ObjError::Duplicate { name: name.clone() });
                }
                seen.push(att.obj);
            }
        }
        // 1. Make each changed shadow's pages durable in its target slot, without a fence per
        //    line or per object; 2. one fence and the publication. The library's own window
        //    onto the object area is open only from the first copy to the publication.
        let key = match &self.guard {
            AreaGuard::Key(k) if self.shadow == Shadow::Dram => Some(k.open_write()),
            _ => None,
        };
        let mut opened = vec![];
        let done = self
            .write_back(&inner, ids, &mut opened)
            .inspect(|changed| {
                if !changed.is_empty() {
                    self.publish(&mut inner, changed);
                }
            });
        drop(key);
        let mut closed = Ok(());
        for (off, len) in opened {
            closed = closed.and(self.close_area(off, len));
        }
        let changed = done?;
        closed?;
        if changed.is_empty() {
            return Ok(());
        }
        // 3. The old current slot is the next target; it differs on exactly the synced pages.
        for &(id, index, word) in &changed {
            let inner = &mut *inner;
            let att = inner.attachments.get_mut(&id).expect("validated");
            let o = inner.objects[index].as_mut().expect("attached");
            if att.buf.is_none() {
                self.close_shadow(att, o)?;
            }
            o.state = word;
            o.stale.clear();
            o.stale.union(&att.dirty);
            att.dirty.clear();
            att.slot = o.active() ^ 1;
            let Some(b) = &att.buf else {
                att.fresh = false;
                continue;
            };
            // DRAM shadow: the buffer equals the new current slot and stays attached.
            match att.tracking {
                Tracking::Whole => att.dirty.set_range(0, o.pages()),
                Tracking::Faults => {
                    // Re-arm: the next store to each page faults again.
                    if let Err(e) = b.set(0, o.desc.cap as usize, Rights::Read) {
                        tracing::warn!("cannot re-arm write faults ({e}): next sync writes all");
                        att.dirty.set_range(0, o.pages());
                    }
                }
                _ => {}
            }
        }
        add_under_lock(&self.counters.syncs, 1);
        add_under_lock(&self.counters.published, changed.len() as u64);
        Ok(())
    }

    /// Step 1 of a sync: make each handle's changed pages durable-to-be in its target slot (PM
    /// shadow: clwb of the dirty pages; DRAM shadow: non-temporal copies of the dirty and stale
    /// pages). No fence. Returns (handle, object, new state word) per object to publish, and
    /// records in `opened` the page windows to close.
    pub(super) fn write_back(
        &self,
        inner: &PoolState,
        ids: &[u64],
        opened: &mut Vec<(usize, usize)>,
    ) -> Result<Vec<(u64, usize, u64)>> {
        let mut changed = vec![];
        for &id in ids {
            let att = &inner.attachments[&id];
            let o = inner.objects[att.obj].as_ref().expect("attached");
            let Some(b) = &att.buf else {
                if !att.fresh {
                    continue; // nothing was written since the last sync: nothing to publish
                }
                if att.tracking == Tracking::Whole {
                    att.dirty.set_range(0, o.pages());
                }
                if att.dirty.is_empty() {
                    continue;
                }
                let base = o.desc.slot_off(att.slot);
                for (first, n) in att.dirty.runs() {
                    self.flush(base + first * PAGE, n * PAGE);
                    let k = (n * PAGE) as u64;
                    add_under_lock(&self.counters.bytes_flushed, k);
                    add_under_lock(&self.counters.bytes_synced, k);
                }
                let word = layout::state_word(layout::state_generation(o.state) + 1, att.slot);
                changed.push((id, att.obj, word));
                continue;
            };
            if att.dirty.is_empty() {
                continue;
            }
            // The target will differ from the current slot on the dirty pages: record that
            // first, so a failure part-way leaves `stale` an over-estimate, never an under one.
            o.stale.union(&att.dirty);
            let (target, cap) = (o.desc.slot_off(att.slot), o.desc.cap as usize);
            if let AreaGuard::Pages = self.guard {
                self.open_area(target, cap, Rights::ReadWrite)?;
                opened.push((target, cap));
            }
            let _w = b.window(Rights::Read);
            for (first, n) in o.stale.runs() {
                let (at, len) = (first * PAGE, n * PAGE);
                assert!(at + len <= cap, "stale pages inside the object");
                // SAFETY: `[at, at+len)` lies in the attached buffer (cap <= its size), which
                // is readable here (the window above). User threads may store into it while
                // this runs (they should not: such stores may or may not be synced), so it is
                // read by raw pointer, never as a slice.
                unsafe { self.media.write_nt_from(target + at, b.ptr().add(at), len) };
                add_under_lock(&self.counters.bytes_synced, len as u64);
            }
            let word = layout::state_word(layout::state_generation(o.state) + 1, att.slot);
            changed.push((id, att.obj, word));
        }
        Ok(changed)
    }

    /// Step 2 of a sync: one fence after the write-back, then the publication: one persisted
    /// state word (one object), or a committed intent record (several).
    pub(super) fn publish(&self, inner: &mut PoolState, changed: &[(u64, usize, u64)]) {
        if let [(_, index, word)] = changed[..] {
            self.fence();
            self.persist_word(self.geometry.entry_off(index), word);
            return;
        }
        let seq = inner.seq + 1;
        let intent = Intent {
            seq,
            items: changed.iter().map(|&(_, i, w)| (i as u64, w)).collect(),
        };
        let body = intent.encode();
        let so = self.geometry.sync_off as usize;
        self.media.write(so + 8, &body);
        self.flush(so + 8, body.len());
        self.fence(); // shadows and intent durable
        self.persist_word(so, seq); // commit point
        for &(_, index, word) in changed {
            let eo = self.geometry.entry_off(index);
            self.media.store_u64(eo, word);
            self.flush(eo, 8);
        }
        self.fence();
        self.persist_word(so, 0); // retire the intent before any later publication
        inner.seq = seq;
        add_under_lock(&self.counters.intents, 1);
    }
}
