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
//! - Double and foreign frees are refused by the live bytes of `sides` (a byte load and store per
//!   `free`, before the object reaches a cache), so a cached object is never cached twice.
//! - A thread's objects go back to their heaps when the thread exits (the heap is held by
//!   `Weak`, so a dropped `XMem` is skipped), when its slot is evicted for another tag, and on
//!   `XMem::flush_thread_cache`.

use crate::classes::COUNT;
use crate::heap::Heap;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::mem::ManuallyDrop;
use std::sync::Weak;

/// Objects one (thread, tag, class) stack holds at most: 255, so that the count fits a byte and
/// indexes the 256-entry array with no bounds check (a slot is 32 classes x 2 KiB = 64 KiB).
pub(crate) const CAP: usize = u8::MAX as usize;
/// Objects a refill takes from the heap, or a full stack gives back, under one lock (with two
/// threads on one tag, 32 made the heap lock the bottleneck: docs/xmem.md).
pub(crate) const BATCH: usize = 128;
const _: () = assert!(BATCH <= CAP && CAP < 256 && COUNT.is_power_of_two());
/// (instance, tag) pairs one thread caches at once; the least recently added goes first.
pub(crate) const MAX_SLOTS: usize = 8;

/// A fixed array stack of free objects' addresses.
pub(crate) struct List {
    n: u8,
    items: [usize; CAP + 1],
}

impl List {
    const fn new() -> List {
        List {
            n: 0,
            items: [0; CAP + 1],
        }
    }

    #[inline]
    pub(crate) fn pop(&mut self) -> Option<usize> {
        self.n = self.n.checked_sub(1)?;
        Some(self.items[self.n as usize])
    }

    /// Push `a`; false (and nothing pushed) when the stack is full.
    #[inline]
    pub(crate) fn push(&mut self, a: usize) -> bool {
        if self.n as usize == CAP {
            return false;
        }
        self.items[self.n as usize] = a;
        self.n += 1;
        true
    }

    /// Room for a refill: `f` writes up to [`BATCH`] addresses into the slice and says how
    /// many. Called on an empty stack; the last written is popped first.
    pub(crate) fn refill(&mut self, f: impl FnOnce(&mut [usize]) -> usize) -> usize {
        debug_assert_eq!(self.n, 0);
        let got = f(&mut self.items[..BATCH]);
        assert!(got <= BATCH);
        self.n = got as u8;
        got
    }

    /// Hand the [`BATCH`] oldest objects to `f` and keep the rest. Called on a full stack.
    pub(crate) fn spill(&mut self, f: impl FnOnce(&[usize])) {
        debug_assert_eq!(self.n as usize, CAP);
        f(&self.items[..BATCH]);
        self.items.copy_within(BATCH..CAP, 0);
        self.n -= BATCH as u8;
    }

    fn take_all(&mut self) -> impl Iterator<Item = usize> + '_ {
        let n = std::mem::take(&mut self.n) as usize;
        self.items[..n].iter().copied()
    }
}

/// One thread's stacks for one tag of one `XMem`.
pub(crate) struct Slot {
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

/// A thread's slots: the one used last (programs use few tags at a time, and the last one is
/// usually the next) apart, with its key, so the hot path is one compare and one pointer; the
/// others in order of last use. No drop glue, so the thread-local is reached with no
/// initialisation check on the hot path; [`Guard`] gives the objects back at thread exit.
struct Cache {
    active: ManuallyDrop<Option<Box<Slot>>>,
    /// [`key`] of `active`; 0 (no `XMem`'s) while there is none.
    active_key: u64,
    others: ManuallyDrop<Vec<Box<Slot>>>,
}

impl Cache {
    fn take_all_slots(&mut self) -> Vec<Box<Slot>> {
        self.active_key = 0;
        let mut all = std::mem::take(&mut *self.others);
        all.extend(self.active.take());
        all
    }
}

/// (instance, tag) as one word: instance numbers start at 1 and stay below 2^32 (`XMem::new`).
#[inline(always)]
fn key(xmem: u64, tag: u32) -> u64 {
    debug_assert!(xmem > 0 && xmem < 1 << 32);
    xmem << 32 | tag as u64
}

/// Registered (by its first use, when a thread adds its first slot) for its destructor: at
/// thread exit every cached object goes back to its heap. A region this empties stays with its
/// tag until the tag's next flush.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        let slots = CACHE.with(|c| match c.try_borrow_mut() {
            Ok(mut c) => c.take_all_slots(),
            Err(_) => Vec::new(),
        });
        for mut s in slots {
            s.give_back();
        }
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = const {
        RefCell::new(Cache {
            active: ManuallyDrop::new(None),
            active_key: 0,
            others: ManuallyDrop::new(Vec::new()),
        })
    };
    static GUARD: Guard = const { Guard };
}

/// The hot path of `alloc`: pop a free object of class `c` from this thread's slot used last,
/// if it is (xmem, tag)'s and holds one. `None` sends the caller to [`with_slot`] (another
/// slot, a refill, or no cache at all).
#[inline(always)]
pub(crate) fn pop(xmem: u64, tag: u32, c: usize) -> Option<usize> {
    debug_assert!(c < COUNT);
    CACHE
        .try_with(|cache| {
            let mut cache = cache.try_borrow_mut().ok()?;
            if cache.active_key != key(xmem, tag) {
                return None;
            }
            // (Classes are below COUNT, a power of two: the mask spares a bounds check.)
            cache.active.as_mut()?.lists[c % COUNT].pop()
        })
        .ok()
        .flatten()
}

/// The hot path of `free`: push `a` onto this thread's slot used last, if it is (xmem, tag)'s
/// and has room. False sends the caller to [`with_slot`].
#[inline(always)]
pub(crate) fn push(xmem: u64, tag: u32, c: usize, a: usize) -> bool {
    debug_assert!(c < COUNT);
    CACHE
        .try_with(|cache| {
            let Ok(mut cache) = cache.try_borrow_mut() else {
                return false;
            };
            if cache.active_key != key(xmem, tag) {
                return false;
            }
            cache
                .active
                .as_mut()
                .is_some_and(|s| s.lists[c % COUNT].push(a))
        })
        .unwrap_or(false)
}

/// Run `f` on this thread's slot for (xmem, tag), making it the one used last (and adding it
/// if new); `None` when the cache is in use (re-entry) or the thread is exiting and has given
/// its objects back: the caller takes the heap path instead.
pub(crate) fn with_slot<R>(
    xmem: u64,
    tag: u32,
    heap: impl FnOnce() -> Weak<Mutex<Heap>>,
    f: impl FnOnce(&mut Slot) -> R,
) -> Option<R> {
    CACHE.with(|c| {
        let mut c = c.try_borrow_mut().ok()?;
        let c = &mut *c;
        if c.active_key != key(xmem, tag) {
            activate(c, xmem, tag, heap)?;
        }
        c.active.as_mut().map(|s| f(s))
    })
}

/// Make (xmem, tag)'s slot the active one, adding it if new; `None` (and no slot active) when
/// the thread is past its exit hook.
#[cold]
#[inline(never)]
fn activate(
    c: &mut Cache,
    xmem: u64,
    tag: u32,
    heap: impl FnOnce() -> Weak<Mutex<Heap>>,
) -> Option<()> {
    c.others.extend(c.active.take());
    c.active_key = 0;
    let slot = match c.others.iter().position(|s| s.xmem == xmem && s.tag == tag) {
        Some(i) => c.others.remove(i),
        None => {
            // Register the exit hook before caching anything; a thread past it caches nothing
            // more.
            GUARD.try_with(|_| ()).ok()?;
            // Forget the slots of dropped instances, then make room by giving the least
            // recently used slot back.
            c.others.retain(|s| s.heap.strong_count() > 0);
            if c.others.len() >= MAX_SLOTS {
                c.others.remove(0).give_back();
            }
            Box::new(Slot {
                xmem,
                tag,
                heap: heap(),
                lists: [const { List::new() }; COUNT],
            })
        }
    };
    *c.active = Some(slot);
    c.active_key = key(xmem, tag);
    Some(())
}

/// Take every object this thread caches for `xmem`: (tag, addresses).
pub(crate) fn drain(xmem: u64) -> Vec<(u32, Vec<usize>)> {
    CACHE.with(|c| {
        let Ok(mut c) = c.try_borrow_mut() else {
            return Vec::new();
        };
        let c = &mut *c;
        c.others
            .iter_mut()
            .chain(c.active.iter_mut())
            .filter(|s| s.xmem == xmem)
            .map(|s| {
                let objs = s.lists.iter_mut().flat_map(List::take_all).collect();
                (s.tag, objs)
            })
            .collect()
    })
}

/// How many (instance, tag) slots this thread holds (tests).
pub(crate) fn slots() -> usize {
    CACHE.with(|c| {
        c.try_borrow()
            .map_or(0, |c| c.others.len() + usize::from(c.active.is_some()))
    })
}
