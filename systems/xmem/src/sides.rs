//! The lock-free side tables of a reservation, DRAM metadata outside the regions, flat over the
//! whole reservation so that `free` finds an entry by one subtraction and one shift:
//! - per page, the size class and tag of a slab page (0 = not a slab page), kept by the heap
//!   under its lock;
//! - per 16-byte granule, a *live* byte, 1 while the program holds the object starting there.
//!   With the thread caches (`tcache`), `alloc` sets it and `free` checks and clears it with
//!   plain byte loads and stores, no locked instruction: a byte that was 0 is a foreign,
//!   interior or double free. A byte (not a bit) per granule is what lets two threads update
//!   neighbouring objects without an atomic read-modify-write.
//!
//! Both tables are mapped read-only and `MAP_NORESERVE` (untouched parts read as zero and cost
//! nothing); a region's part becomes writable before the region's first use. Their
//! cost is 1/1024 (classes) and 1/16 (live bytes) of the regions that hold slabs, in pages the
//! kernel commits where slabs are (docs/xmem.md, "Allocation speed").

use crate::config::PAGE;
use crate::error::Result;
use crate::sys;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};

/// Granule of the live table: every small object starts at a multiple of 16 bytes.
pub(crate) const GRANULE: usize = 16;

/// What [`Sides::take`] found at an offset.
pub enum Taken {
    /// Not a slab page (a large object, or nothing): the heap decides.
    NotSlab,
    /// A slab page of this class and tag, and the object starting there was held: now it
    /// is not.
    Live { class: usize, tag: u32 },
    /// A slab page but no held object starts there: a foreign, interior or double free.
    NotLive,
}

/// A zero-filled array of `T` over an anonymous mapping, owned (unmapped on drop).
struct Table<T: 'static> {
    items: &'static [T],
}

impl<T> Table<T> {
    // A slice of atomics over our own DRAM mapping: the rule against slices is for bytes that
    // others change without atomics (PM, callers' buffers); every access here is atomic.
    #[allow(clippy::disallowed_methods)]
    fn new(n: usize) -> Result<Table<T>> {
        let len = n * size_of::<T>();
        let addr = sys::map_table(len)?;
        // SAFETY: `addr` is a fresh mapping of `len` bytes, page-aligned (so aligned for `T`),
        // readable, zero-filled and owned by this table until `drop`; the `T`s here are
        // atomics, for which all-zero bytes are a valid value and shared mutation is allowed.
        // Stores go only to parts made writable first (`Sides::prepare`).
        let items = unsafe { std::slice::from_raw_parts(addr as *const T, n) };
        Ok(Table { items })
    }

    /// Make items `[first, first + n)` writable (whole pages; idempotent).
    fn writable(&self, first: usize, n: usize) -> Result<()> {
        let size = size_of::<T>();
        let base = self.items.as_ptr() as usize;
        let start = (base + first * size) & !(PAGE - 1);
        let end = (base + (first + n) * size).next_multiple_of(PAGE);
        // SAFETY: the range lies inside this table's own mapping, which only this table uses.
        unsafe { sys::protect(start, end - start, libc::PROT_READ | libc::PROT_WRITE) }
    }
}

impl<T> Drop for Table<T> {
    fn drop(&mut self) {
        let len = size_of_val(self.items).next_multiple_of(PAGE);
        // SAFETY: the table's own mapping; `items` is not used after this.
        unsafe { sys::unmap(self.items.as_ptr() as usize, len) };
    }
}

/// The side tables of one reservation.
pub struct Sides {
    region_shift: u32,
    /// Per page: 0, or `(tag + 1) << 8 | (class + 1)` for a slab page.
    class: Table<AtomicU32>,
    /// Per granule: 1 while the program holds the object starting there.
    live: Table<AtomicU8>,
    /// Per region: its part of both tables is writable.
    ready: Box<[AtomicBool]>,
}

impl Sides {
    pub fn new(regions: usize, region_size: usize) -> Result<Sides> {
        assert!(region_size.is_power_of_two() && region_size >= PAGE);
        let bytes = regions * region_size;
        Ok(Sides {
            region_shift: region_size.trailing_zeros(),
            class: Table::new(bytes / PAGE)?,
            live: Table::new(bytes / GRANULE)?,
            ready: (0..regions).map(|_| AtomicBool::new(false)).collect(),
        })
    }

    /// Make region `r`'s part of both tables writable; called before a heap gets the region
    /// (idempotent: a region reused by another tag is ready already).
    pub fn prepare(&self, r: usize) -> Result<()> {
        if self.ready[r].load(Ordering::Acquire) {
            return Ok(());
        }
        let size = 1usize << self.region_shift;
        let off = r << self.region_shift;
        self.class.writable(off / PAGE, size / PAGE)?;
        self.live.writable(off / GRANULE, size / GRANULE)?;
        self.ready[r].store(true, Ordering::Release);
        Ok(())
    }

    /// Mark `n` pages from byte offset `off` (from the reservation's base) as a slab of class
    /// `c`, or as no slab (`None`). Called by the heap under its lock, in a region
    /// [`Sides::prepare`]d when the heap got it.
    pub fn set_class(&self, off: usize, n: usize, slab: Option<(usize, u32)>) {
        let v = slab.map_or(0, |(c, tag)| (tag + 1) << 8 | (c as u32 + 1));
        assert!(
            self.ready[off >> self.region_shift].load(Ordering::Acquire),
            "side tables prepared before the region's first slab"
        );
        for a in &self.class.items[off / PAGE..off / PAGE + n] {
            a.store(v, Ordering::Release);
        }
    }

    /// The class of the slab holding byte offset `off`, if it is a slab page.
    #[inline]
    pub fn class_at(&self, off: usize) -> Option<usize> {
        let v = self.class.items.get(off / PAGE)?.load(Ordering::Acquire);
        ((v & 0xff) as usize).checked_sub(1)
    }

    /// `free`'s check with the caches on: whether `off` is on a slab page and, if so, take the
    /// object starting there back from the program (a byte load and store).
    ///
    /// Relaxed suffices: a thread frees only what it got from an `alloc` that happened before
    /// (in its own order, or through whatever synchronisation handed it the pointer). Two
    /// threads racing to free one object at the same instant is a data race in the program; it
    /// may then be taken twice, as glibc's and jemalloc's caches would take it.
    #[inline(always)]
    pub fn take(&self, off: usize) -> Taken {
        if self.class_at(off).is_none() {
            return Taken::NotSlab;
        }
        match self.peek(off) {
            Some((v, live)) => {
                live.store(0, Ordering::Relaxed);
                Taken::Live {
                    class: class_of(v),
                    tag: tag_of(v),
                }
            }
            None => Taken::NotLive,
        }
    }

    /// `free`'s fast path: the page word of the slab page at `off` (see [`Sides::class_at`];
    /// [`tag_of`] and [`class_of`] read it) and the live byte, if the program holds an object
    /// starting at `off`. Nothing changes; the caller stores 0 in the byte to take it back.
    #[inline(always)]
    pub fn peek(&self, off: usize) -> Option<(u32, &AtomicU8)> {
        let v = self.class.items.get(off / PAGE)?.load(Ordering::Acquire);
        if v == 0 || !off.is_multiple_of(GRANULE) {
            return None;
        }
        // A slab page's region is ready, and `off` is inside the reservation.
        let live = &self.live.items[off / GRANULE];
        (live.load(Ordering::Relaxed) != 0).then_some((v, live))
    }

    /// The object at `off` (on a slab page) is handed to the program.
    #[inline(always)]
    pub fn set_live(&self, off: usize) {
        let b = &self.live.items[off / GRANULE];
        debug_assert_eq!(b.load(Ordering::Relaxed), 0, "handed out twice");
        b.store(1, Ordering::Relaxed);
    }

    /// Whether the program holds the object at `off` (on a slab page).
    pub fn is_live(&self, off: usize) -> bool {
        off.is_multiple_of(GRANULE) && self.live.items[off / GRANULE].load(Ordering::Relaxed) != 0
    }
}

/// The tag in a slab page's word.
#[inline(always)]
pub(crate) fn tag_of(word: u32) -> u32 {
    (word >> 8) - 1
}

/// The size class in a slab page's word.
#[inline(always)]
pub(crate) fn class_of(word: u32) -> usize {
    (word & 0xff) as usize - 1
}
