//! The small-object fast path: per-thread caches of free objects by (X-Mem instance, tag,
//! size class), and the lock-free side tables that let `free` check a pointer without the
//! tag's heap lock. All of it is DRAM metadata outside the regions, like the heap's.
//!
//! - `sides::Sides`: per region, the size class of each page (0 = not a slab page) and one *live*
//!   bit per 16-byte granule, set while the object starting there is held by the program. A
//!   `free` clears the bit with one atomic `fetch_and`: a bit that was clear is a foreign,
//!   interior or double free, refused as before. Objects in a thread cache are allocated as far
//!   as the heap knows (their slabs cannot go away) but their live bits are clear.
//! - The thread cache: `alloc` pops an object from the calling thread's list for (tag, class)
//!   and sets its live bit; an empty list is refilled with a batch from the heap under its lock.
//!   `free` pushes onto the list; a list past twice the batch gives the excess back to the heap
//!   under one lock. A thread's lists go back to their heaps when the thread exits (the heap is
//!   held by `Weak`, so a dropped `XMem` is skipped).

use crate::classes::{self, COUNT};
use crate::heap::Heap;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::Weak;

/// Objects a refill takes from the heap, by class: a quarter slab, 4 to 64.
pub fn batch(c: usize) -> usize {
    (classes::per_slab(c) / 4).clamp(4, 64)
}

/// One thread's lists for one tag of one `XMem`.
struct Bin {
    xmem: u64,
    tag: u32,
    heap: Weak<Mutex<Heap>>,
    lists: [Vec<usize>; COUNT],
}

/// A thread's bins, and the index of the one used last (programs use few tags at a time, and
/// the last one is usually the next).
struct Bins(Vec<Bin>, usize);

impl Drop for Bins {
    /// Thread exit: every cached object goes back to its heap (if its `XMem` still lives). A
    /// region this empties stays with its tag until the tag's next free in it.
    fn drop(&mut self) {
        for b in self.0.drain(..) {
            if let Some(h) = b.heap.upgrade() {
                let mut h = h.lock();
                for a in b.lists.into_iter().flatten() {
                    h.free(a).expect("a cached object is allocated in its heap");
                }
            }
        }
    }
}

thread_local! {
    static BINS: RefCell<Bins> = const { RefCell::new(Bins(Vec::new(), 0)) };
}

/// Run `f` on this thread's list for (xmem, tag, class); `None` when the thread's storage is
/// gone (thread exit) or in use (re-entry): the caller takes the heap path instead.
pub fn with_list<R>(
    xmem: u64,
    tag: u32,
    heap: impl FnOnce() -> Weak<Mutex<Heap>>,
    c: usize,
    f: impl FnOnce(&mut Vec<usize>) -> R,
) -> Option<R> {
    BINS.try_with(|b| {
        let mut b = b.try_borrow_mut().ok()?;
        let Bins(bins, last) = &mut *b;
        let hit = bins
            .get(*last)
            .is_some_and(|x| x.xmem == xmem && x.tag == tag);
        let i = match hit {
            true => Some(*last),
            false => bins.iter().position(|x| x.xmem == xmem && x.tag == tag),
        };
        let i = match i {
            Some(i) => i,
            None => {
                // Forget the lists of dropped instances before adding one.
                bins.retain(|x| x.heap.strong_count() > 0);
                bins.push(Bin {
                    xmem,
                    tag,
                    heap: heap(),
                    lists: std::array::from_fn(|_| Vec::new()),
                });
                bins.len() - 1
            }
        };
        *last = i;
        Some(f(&mut bins[i].lists[c]))
    })
    .ok()
    .flatten()
}

/// Take every object this thread caches for `xmem`: (tag, addresses).
pub fn drain(xmem: u64) -> Vec<(u32, Vec<usize>)> {
    BINS.try_with(|b| {
        let Ok(mut b) = b.try_borrow_mut() else {
            return Vec::new();
        };
        b.0.iter_mut()
            .filter(|x| x.xmem == xmem)
            .map(|x| (x.tag, x.lists.iter_mut().flat_map(std::mem::take).collect()))
            .collect()
    })
    .unwrap_or_default()
}
