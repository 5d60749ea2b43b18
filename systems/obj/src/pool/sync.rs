//! PMO Sync: write the changed pages back into each object's target slot, then publish them
//! with one fence and one persisted word (one object) or a committed intent (several).

use super::{add_under_lock, Access, Pool, PoolState};
use crate::error::{ObjError, Result};
use crate::layout::{Intent, MAX_SYNC, SYNC_LEN};
use pmkit_media::Media;

/// An object a sync publishes: (handle, table entry, new published word).
type Change = (u64, usize, u64);

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
            let attachment = inner.attachment(id)?;
            let index = attachment.binding.object;
            let name = &inner.object(index).descriptor.name;
            if attachment.binding.access != Access::ReadWrite {
                return Err(ObjError::ReadOnly {
                    name: name.clone(),
                    what: "sync",
                });
            }
            if ids.len() > 1 {
                if seen.contains(&index) {
                    return Err(ObjError::Duplicate { name: name.clone() });
                }
                seen.push(index);
            }
        }
        // 1. Make each changed shadow's pages durable in its target slot, without a fence per
        //    line or per object; 2. one fence and the publication. The library's own window
        //    onto the object area is open only from the first copy to the publication.
        let key_window = self.area().write_window();
        let mut opened = vec![];
        let done = self
            .write_back(&inner, ids, &mut opened)
            .inspect(|changed| {
                if !changed.is_empty() {
                    self.publish(&mut inner, changed);
                }
            });
        drop(key_window);
        let mut closed = Ok(());
        for (off, len) in opened {
            closed = closed.and(self.area().close(off, len));
        }
        let changed = done?;
        closed?;
        if changed.is_empty() {
            return Ok(());
        }
        // 3. The old current slot is the next target; it differs on exactly the synced pages.
        //    Every published object's state follows its new word, even if a shadow fails to
        //    close: the word is durable already.
        let mut settled = Ok(());
        for &(id, index, word) in &changed {
            let inner = &mut *inner;
            let attachment = inner.attachments.get_mut(&id).expect("validated above");
            let object = inner.objects[index]
                .as_mut()
                .expect("attached objects exist");
            let binding = &mut attachment.binding;
            object.word = word;
            object.stale.clear();
            object.stale.union(&binding.dirty);
            binding.dirty.clear();
            settled = settled.and(attachment.view.published(&self.area(), object, binding));
            binding.slot = object.current_slot() ^ 1;
        }
        add_under_lock(&self.counters.syncs, 1);
        add_under_lock(&self.counters.published, changed.len() as u64);
        settled
    }

    /// Step 1 of a sync: make each handle's changed pages durable-to-be in its target slot (the
    /// shadow's write-back). No fence. Returns the objects to publish, and records in `opened`
    /// the page windows to close.
    fn write_back(
        &self,
        inner: &PoolState,
        ids: &[u64],
        opened: &mut Vec<(usize, usize)>,
    ) -> Result<Vec<Change>> {
        let (area, mut changed) = (self.area(), vec![]);
        for &id in ids {
            let attachment = &inner.attachments[&id];
            let binding = &attachment.binding;
            let object = inner.object(binding.object);
            if attachment.view.write_back(&area, object, binding, opened)? {
                changed.push((id, binding.object, object.next_word(binding.slot)));
            }
        }
        Ok(changed)
    }

    /// Step 2 of a sync: one fence after the write-back, then the publication: one persisted
    /// state word (one object), or a committed intent record (several).
    fn publish(&self, inner: &mut PoolState, changed: &[Change]) {
        if let [(_, index, word)] = changed[..] {
            self.fence();
            self.persist_word(self.geometry.entry_off(index), word);
            return;
        }
        let seq = inner.seq + 1;
        let intent = Intent {
            seq,
            items: changed
                .iter()
                .map(|&(_, index, word)| (index as u64, word))
                .collect(),
        };
        let record = intent.encode();
        // Pair assertion: the record recovery will read back is the one meant.
        debug_assert_eq!(
            decode_record(&record).as_ref().ok(),
            Some(&intent),
            "an encoded intent decodes to itself"
        );
        let sync_off = self.geometry.sync_off as usize;
        self.media.write(sync_off + 8, &record);
        self.flush(sync_off + 8, record.len());
        self.fence(); // shadows and intent durable
        self.persist_word(sync_off, seq); // commit point
        for &(_, index, word) in changed {
            let entry_off = self.geometry.entry_off(index);
            self.media.store_u64(entry_off, word);
            self.flush(entry_off, 8);
        }
        self.fence();
        self.persist_word(sync_off, 0); // retire the intent before any later publication
        inner.seq = seq;
        add_under_lock(&self.counters.intents, 1);
    }
}

/// Decode an intent record as recovery does (from the whole Sync Table page).
fn decode_record(record: &[u8]) -> Result<Intent> {
    let mut page = vec![0u8; SYNC_LEN];
    page[8..8 + record.len()].copy_from_slice(record);
    Intent::decode(&page)
}
