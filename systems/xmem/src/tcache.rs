//! The small-object fast path: per-thread caches of free objects by (X-Mem instance, tag,
//! size class). All of it is DRAM metadata outside the regions, like the heap's; nothing is
//! ever written into a free object (see docs/xmem.md, "Why no intrusive free list").
//!
//! - Each thread has up to [`MAX_SLOTS`] slots, one per (instance, tag) it used last; a slot
//!   holds, per class, a fixed array stack of up to [`CAP`] free objects' addresses. The hot
//!   path ([`pop`], [`push`]) is: the thread-local (const-initialized), a compare with the slot
//!   used last, a pop or push on an array. No hashing, no allocation, no closure; everything
//!   else (another slot, a refill, a spill) is [`with_slot`], off the hot path.
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
use std::mem::ManuallyDrop;
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

/// A thread's slots, and which one was used last (programs use few tags at a time, and the
/// last one is usually the next). No drop glue, so the thread-local is reached with no
/// initialisation check on the hot path; [`Guard`] gives the objects back at thread exit.
struct Cache {
    slots: ManuallyDrop<Vec<Box<Slot>>>,
    last: usize,
    /// (instance, tag) of `slots[last]`, kept here so the hot path compares before it follows
    /// the slot's pointer; instance 0 (never an `XMem`'s) while there is no slot.
    last_xmem: u64,
    last_tag: u32,
}

impl Cache {
    fn point_at(&mut self, i: usize) {
        self.last = i;
        self.last_xmem = self.slots[i].xmem;
        self.last_tag = self.slots[i].tag;
    }
}

/// Registered (by its first use, when a thread adds its first slot) for its destructor: at
/// thread exit every cached object goes back to its heap. A region this empties stays with its
/// tag until the tag's next flush.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        let slots = CACHE.with(|c| {
            let Ok(mut c) = c.try_borrow_mut() else {
                return Vec::new();
            };
            c.last_xmem = 0;
            std::mem::take(&mut *c.slots)
        });
        for mut s in slots {
            s.give_back();
        }
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = const {
        RefCell::new(Cache {
            slots: ManuallyDrop::new(Vec::new()),
            last: 0,
            last_xmem: 0,
            last_tag: 0,
        })
    };
    static GUARD: Guard = const { Guard };
}

/// The hot path of `alloc`: pop a free object of class `c` from this thread's slot used last,
/// if it is (xmem, tag)'s and holds one. `None` sends the caller to [`with_slot`] (another
/// slot, a refill, or no cache at all).
#[inline(always)]
pub fn pop(xmem: u64, tag: u32, c: usize) -> Option<usize> {
    CACHE
        .try_with(|cache| {
            let mut cache = cache.try_borrow_mut().ok()?;
            if cache.last_xmem != xmem || cache.last_tag != tag {
                return None;
            }
            let last = cache.last;
            cache.slots.get_mut(last)?.lists.get_mut(c)?.pop()
        })
        .ok()
        .flatten()
}

/// The hot path of `free`: push `a` onto this thread's slot used last, if it is (xmem, tag)'s
/// and has room. False sends the caller to [`with_slot`].
#[inline(always)]
pub fn push(xmem: u64, tag: u32, c: usize, a: usize) -> bool {
    CACHE
        .try_with(|cache| {
            let Ok(mut cache) = cache.try_borrow_mut() else {
                return false;
            };
            if cache.last_xmem != xmem || cache.last_tag != tag {
                return false;
            }
            let last = cache.last;
            cache
                .slots
                .get_mut(last)
                .and_then(|s| s.lists.get_mut(c))
                .is_some_and(|l| l.push(a))
        })
        .unwrap_or(false)
}

/// Run `f` on this thread's slot for (xmem, tag), making it the one used last (and adding it
/// if new); `None` when the cache is in use (re-entry) or the thread is exiting and has given
/// its objects back: the caller takes the heap path instead.
pub fn with_slot<R>(
    xmem: u64,
    tag: u32,
    heap: impl FnOnce() -> Weak<Mutex<Heap>>,
    f: impl FnOnce(&mut Slot) -> R,
) -> Option<R> {
    CACHE.with(|c| {
        let mut c = c.try_borrow_mut().ok()?;
        let c = &mut *c;
        if c.last_xmem != xmem || c.last_tag != tag {
            let i = find_or_add(c, xmem, tag, heap)?;
            c.point_at(i);
        }
        let last = c.last;
        Some(f(&mut c.slots[last]))
    })
}

#[cold]
#[inline(never)]
fn find_or_add(
    c: &mut Cache,
    xmem: u64,
    tag: u32,
    heap: impl FnOnce() -> Weak<Mutex<Heap>>,
) -> Option<usize> {
    if let Some(i) = c.slots.iter().position(|s| s.xmem == xmem && s.tag == tag) {
        return Some(i);
    }
    // Register the exit hook before caching anything; a thread past it caches nothing more.
    GUARD.try_with(|_| ()).ok()?;
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
    Some(c.slots.len() - 1)
}

/// Take every object this thread caches for `xmem`: (tag, addresses).
pub fn drain(xmem: u64) -> Vec<(u32, Vec<usize>)> {
    CACHE.with(|c| {
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
}

/// How many (instance, tag) slots this thread holds (tests).
pub fn slots() -> usize {
    CACHE.with(|c| c.try_borrow().map_or(0, |c| c.slots.len()))
}
