//! The small-object fast path: per-thread caches of free objects by (X-Mem instance, tag,
//! size class). All of it is DRAM metadata outside the regions, like the heap's; nothing is
//! ever written into a free object (see docs/xmem.md, "Why no intrusive free list").
//!
//! - Each thread has up to [`MAX_SLOTS`] slots, one per (instance, tag) it used last; a slot
//!   holds, per class, a fixed array stack of up to [`CAP`] free objects' addresses. The hot
//!   path is: the thread-local (const-initialized), a compare with the slot used last, a pop or
//!   push on an array. No hashing and no allocation.
//! - An empty stack is refilled with [`BATCH`] objects from the tag's heap under one lock
//!   (`Heap::alloc_batch`); a full one gives its [`BATCH`] oldest back under one lock.
//! - Double and foreign frees are refused by the live bits of `sides` (one atomic bit test and
//!   clear per `free`, before the object reaches a cache), so a cached object is never cached
//!   twice.
//! - A thread's objects go back to their heaps when the thread exits (the heap is held by
//!   `Weak`, so a dropped `XMem` is skipped), when its slot is evicted for another tag, and on
//!   `XMem::flush_thread_cache`.

use crate::classes::COUNT;
use crate::heap::Heap;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::Weak;

/// Objects one (thread, tag, class) stack holds at most.
pub const CAP: usize = 64;
/// Objects a refill takes from the heap, or a full stack gives back, under one lock.
pub const BATCH: usize = 32;
/// (instance, tag) pairs one thread caches at once; the least recently added goes first.
pub const MAX_SLOTS: usize = 8;

/// A fixed array stack of free objects' addresses.
pub struct List {
    n: usize,
    items: [usize; CAP],
}

impl List {
    const fn new() -> List {
        List {
            n: 0,
            items: [0; CAP],
        }
    }

    #[inline]
    pub fn pop(&mut self) -> Option<usize> {
        self.n = self.n.checked_sub(1)?;
        Some(self.items[self.n])
    }

    /// Push `a`; false (and nothing pushed) when the stack is full.
    #[inline]
    pub fn push(&mut self, a: usize) -> bool {
        if self.n == CAP {
            return false;
        }
        self.items[self.n] = a;
        self.n += 1;
        true
    }

    /// Room for a refill: `f` writes up to [`BATCH`] addresses into the slice and says how
    /// many. Called on an empty stack; the last written is popped first.
    pub fn refill(&mut self, f: impl FnOnce(&mut [usize]) -> usize) -> usize {
        debug_assert_eq!(self.n, 0);
        let got = f(&mut self.items[..BATCH]);
        assert!(got <= BATCH);
        self.n = got;
        got
    }

    /// Hand the [`BATCH`] oldest objects to `f` and keep the rest. Called on a full stack.
    pub fn spill(&mut self, f: impl FnOnce(&[usize])) {
        debug_assert_eq!(self.n, CAP);
        f(&self.items[..BATCH]);
        self.items.copy_within(BATCH..self.n, 0);
        self.n -= BATCH;
    }

    fn take_all(&mut self) -> impl Iterator<Item = usize> + '_ {
        let n = std::mem::take(&mut self.n);
        self.items[..n].iter().copied()
    }
}

/// One thread's stacks for one tag of one `XMem`.
pub struct Slot {
    xmem: u64,
    tag: u32,
    heap: Weak<Mutex<Heap>>,
    pub lists: [List; COUNT],
}

impl Slot {
    /// Give every object back to the heap (if its `XMem` still lives).
    fn give_back(&mut self) {
        if let Some(h) = self.heap.upgrade() {
            let mut h = h.lock();
            for a in self.lists.iter_mut().flat_map(List::take_all) {
                h.free(a).expect("a cached object is allocated in its heap");
            }
        }
    }
}

/// A thread's slots, and the index of the one used last (programs use few tags at a time, and
/// the last one is usually the next).
struct Cache {
    slots: Vec<Box<Slot>>,
    last: usize,
}

impl Drop for Cache {
    /// Thread exit: every cached object goes back to its heap. A region this empties stays
    /// with its tag until the tag's next flush.
    fn drop(&mut self) {
        for s in &mut self.slots {
            s.give_back();
        }
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = const {
        RefCell::new(Cache {
            slots: Vec::new(),
            last: 0,
        })
    };
}

/// Run `f` on this thread's slot for (xmem, tag); `None` when the thread's storage is gone
/// (thread exit) or in use (re-entry): the caller takes the heap path instead.
#[inline]
pub fn with_slot<R>(
    xmem: u64,
    tag: u32,
    heap: impl FnOnce() -> Weak<Mutex<Heap>>,
    f: impl FnOnce(&mut Slot) -> R,
) -> Option<R> {
    CACHE
        .try_with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            let c = &mut *c;
            let hit = c
                .slots
                .get(c.last)
                .is_some_and(|s| s.xmem == xmem && s.tag == tag);
            if !hit {
                c.last = find_or_add(c, xmem, tag, heap);
            }
            Some(f(&mut c.slots[c.last]))
        })
        .ok()
        .flatten()
}

#[cold]
#[inline(never)]
fn find_or_add(
    c: &mut Cache,
    xmem: u64,
    tag: u32,
    heap: impl FnOnce() -> Weak<Mutex<Heap>>,
) -> usize {
    if let Some(i) = c.slots.iter().position(|s| s.xmem == xmem && s.tag == tag) {
        return i;
    }
    // Forget the slots of dropped instances, then make room by giving the oldest slot back.
    c.slots.retain(|s| s.heap.strong_count() > 0);
    if c.slots.len() >= MAX_SLOTS {
        c.slots.remove(0).give_back();
    }
    c.slots.push(Box::new(Slot {
        xmem,
        tag,
        heap: heap(),
        lists: [const { List::new() }; COUNT],
    }));
    c.slots.len() - 1
}

/// Take every object this thread caches for `xmem`: (tag, addresses).
pub fn drain(xmem: u64) -> Vec<(u32, Vec<usize>)> {
    CACHE
        .try_with(|c| {
            let Ok(mut c) = c.try_borrow_mut() else {
                return Vec::new();
            };
            c.slots
                .iter_mut()
                .filter(|s| s.xmem == xmem)
                .map(|s| {
                    let objs = s.lists.iter_mut().flat_map(List::take_all).collect();
                    (s.tag, objs)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// How many (instance, tag) slots this thread holds (tests).
pub fn slots() -> usize {
    CACHE
        .try_with(|c| c.try_borrow().map_or(0, |c| c.slots.len()))
        .unwrap_or(0)
}
