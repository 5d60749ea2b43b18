//! `XMem`'s small-object paths over the per-thread caches (`tcache`) beside the inlined fast
//! path in `lib.rs` (a pop or push on the slot used last, and the object's live byte): another
//! slot, a refill or a spill, and flushing. The heap lock is taken once per [`tcache::BATCH`]
//! objects, to refill or to spill.

use crate::error::Result;
use crate::{tcache, Tag, XMem};
use std::sync::{Arc, Weak};

impl XMem {
    /// A small object of class `c` from this thread's cache for tag `t` when `XMem::alloc`'s
    /// fast path found nothing (the slot used last is another tag's or the stack is empty),
    /// refilled from the heap when empty; `None` when the thread has no cache (exiting or
    /// re-entered): the caller uses the heap.
    pub(crate) fn alloc_cached(&self, t: Tag, c: usize) -> Option<Result<usize>> {
        // The heap is looked up only for a new slot (an unknown tag gets a slot without a
        // heap, and its refill fails with `UnknownTag`) and for a refill.
        tcache::with_slot(
            self.id,
            t.0,
            || {
                self.heaps
                    .get(t.0 as usize)
                    .and_then(|h| h.get())
                    .map_or_else(Weak::new, Arc::downgrade)
            },
            |slot| {
                let list = &mut slot.lists[c];
                let a = match list.pop() {
                    Some(a) => a,
                    None => {
                        self.refill(t, c, list)?;
                        list.pop().expect("refilled")
                    }
                };
                self.sides.set_live(a - self.space.base());
                Ok(a)
            },
        )
    }

    /// Fill an empty stack with a batch from the heap under one lock, adding regions as needed.
    #[cold]
    #[inline(never)]
    fn refill(&self, t: Tag, c: usize, list: &mut tcache::List) -> Result<()> {
        let mut h = self.heap(t)?.lock();
        loop {
            if list.refill(|out| h.alloc_batch(c, out)) > 0 {
                return Ok(());
            }
            let r = self.new_region(t)?;
            h.add_region(r);
        }
    }

    /// `free` of an object on a slab page (class `c`) whose live byte the caller just cleared,
    /// when `XMem::free`'s fast path could not push it (the slot used last is another tag's or
    /// the stack is full): it goes to this thread's cache, spilling if need be, or to the heap
    /// (its slab cannot go away while the program or a cache holds it).
    pub(crate) fn free_cached_slow(&self, tag: u32, addr: usize, c: usize) {
        let cached = tcache::with_slot(
            self.id,
            tag,
            || {
                Arc::downgrade(
                    self.heaps[tag as usize]
                        .get()
                        .expect("a slab's tag has a heap"),
                )
            },
            |slot| {
                let list = &mut slot.lists[c];
                if !list.push(addr) {
                    list.spill(|old| self.free_to_heap(Tag(tag), old));
                    assert!(list.push(addr), "room after a spill");
                }
            },
        );
        if cached.is_none() {
            self.free_to_heap(Tag(tag), &[addr]);
        }
    }

    /// The class of the slab page at `off` when thread caches are on (their objects' frees
    /// and sizes go by the live bytes); `None` sends the caller to the heap.
    #[inline]
    pub(crate) fn cached_class(&self, off: usize) -> Option<usize> {
        self.cfg
            .thread_cache
            .then(|| self.sides.class_at(off))
            .flatten()
    }

    /// Give objects known to be allocated in tag `t`'s heap (cached ones) back to it, and any
    /// region this leaves empty back to the reservation (as `free` does).
    pub(crate) fn free_to_heap(&self, t: Tag, addrs: &[usize]) {
        let heap = self.heaps[t.0 as usize]
            .get()
            .expect("a cached tag has a heap");
        let mut h = heap.lock();
        let mut rest = addrs;
        while !rest.is_empty() {
            let (n, emptied) = h.free_batch(rest);
            rest = &rest[n..];
            if let Some(r) = emptied {
                if h.region_is_empty(r) && h.region_count() > 1 && self.release_region(r).is_ok() {
                    h.remove_region(r);
                }
            }
        }
    }

    /// Give this thread's cached free objects of this `XMem` back to their heaps (they go back
    /// by themselves when the thread exits). Regions this empties return to the reservation.
    /// Also returns the regions of those tags that other threads' exits left empty.
    pub fn flush_thread_cache(&self) {
        for (tag, addrs) in tcache::drain(self.id) {
            self.free_to_heap(Tag(tag), &addrs);
            let heap = self.heaps[tag as usize]
                .get()
                .expect("a cached tag has a heap");
            let mut h = heap.lock();
            for r in h.region_ids() {
                if h.region_is_empty(r) && h.region_count() > 1 && self.release_region(r).is_ok() {
                    h.remove_region(r);
                }
            }
        }
    }

    /// How many (instance, tag) slots the calling thread's cache holds (at most
    /// `tcache::MAX_SLOTS`; tests).
    pub fn thread_cache_slots() -> usize {
        tcache::slots()
    }
}
