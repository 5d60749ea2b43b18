//! The small-object fast path: per-thread caches of free objects by (X-Mem instance, tag,
//! size class), and the lock-free side tables that let `free` check a pointer without the
//! tag's heap lock. All of it is DRAM metadata outside the regions, like the heap's.
//!
//! - [`Sides`]: per region, the size class of each page (0 = not a slab page) and one *live*
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
use crate::config::PAGE;
use crate::heap::Heap;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{OnceLock, Weak};

/// Granule of the live bitmap: every small object starts at a multiple of 16 bytes.
pub const GRANULE: usize = 16;

struct Side {
    class: Box<[AtomicU8]>,
    live: Box<[AtomicU64]>,
}

/// The side tables of one reservation, made per region on first use.
pub struct Sides {
    shift: u32,
    regions: Box<[OnceLock<Side>]>,
}

impl Sides {
    pub fn new(regions: usize, region_size: usize) -> Sides {
        assert!(region_size.is_power_of_two() && region_size >= PAGE);
        Sides {
            shift: region_size.trailing_zeros(),
            regions: (0..regions).map(|_| OnceLock::new()).collect(),
        }
    }

    fn side(&self, off: usize) -> &Side {
        self.regions[off >> self.shift].get_or_init(|| {
            let size = 1usize << self.shift;
            Side {
                class: (0..size / PAGE).map(|_| AtomicU8::new(0)).collect(),
                live: (0..size / GRANULE / 64)
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            }
        })
    }

    fn in_region(&self, off: usize) -> usize {
        off & ((1usize << self.shift) - 1)
    }

    /// Mark `n` pages from byte offset `off` (from the reservation's base) as a slab of class
    /// `c`, or as no slab (`None`). Called by the heap under its lock.
    pub fn set_class(&self, off: usize, n: usize, c: Option<usize>) {
        let v = c.map_or(0, |c| c as u8 + 1);
        let side = self.side(off);
        let first = self.in_region(off) / PAGE;
        for a in &side.class[first..first + n] {
            a.store(v, Ordering::Release);
        }
    }

    /// The class of the slab holding byte offset `off`, if it is a slab page.
    #[inline]
    pub fn class_at(&self, off: usize) -> Option<usize> {
        let side = self.regions.get(off >> self.shift)?.get()?;
        let v = side.class[self.in_region(off) / PAGE].load(Ordering::Acquire);
        (v as usize).checked_sub(1)
    }

    fn bit(&self, off: usize) -> (&AtomicU64, u64) {
        let g = self.in_region(off) / GRANULE;
        (&self.side(off).live[g / 64], 1 << (g % 64))
    }

    /// The object at `off` is handed to the program.
    #[inline]
    pub fn set_live(&self, off: usize) {
        let (w, m) = self.bit(off);
        let old = w.fetch_or(m, Ordering::AcqRel);
        debug_assert_eq!(old & m, 0, "handed out twice");
    }

    /// Take the object at `off` back from the program: false if it was not held (foreign,
    /// interior or double free).
    #[inline]
    pub fn take_live(&self, off: usize) -> bool {
        if !off.is_multiple_of(GRANULE) {
            return false;
        }
        let (w, m) = self.bit(off);
        w.fetch_and(!m, Ordering::AcqRel) & m != 0
    }

    pub fn is_live(&self, off: usize) -> bool {
        let (w, m) = self.bit(off);
        off.is_multiple_of(GRANULE) && w.load(Ordering::Acquire) & m != 0
    }
}

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
