//! The lock-free side tables of a reservation, DRAM metadata outside the regions: per region,
//! the size class of each page (0 = not a slab page; kept by the heap under its lock) and one
//! *live* bit per 16-byte granule, set while the object starting there is held by the program.
//! `free` checks and clears the bit with one atomic `fetch_and` (used with the thread caches,
//! `tcache`): a bit that was clear is a foreign, interior or double free.

use crate::config::PAGE;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Granule of the live bitmap: every small object starts at a multiple of 16 bytes.
pub const GRANULE: usize = 16;

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

struct Side {
    /// Per page: 0, or `(tag + 1) << 8 | (class + 1)` for a slab page.
    class: Box<[AtomicU32]>,
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
                class: (0..size / PAGE).map(|_| AtomicU32::new(0)).collect(),
                live: (0..size / GRANULE / 64)
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            }
        })
    }

    #[inline]
    fn in_region(&self, off: usize) -> usize {
        off & ((1usize << self.shift) - 1)
    }

    /// Mark `n` pages from byte offset `off` (from the reservation's base) as a slab of class
    /// `c`, or as no slab (`None`). Called by the heap under its lock.
    pub fn set_class(&self, off: usize, n: usize, slab: Option<(usize, u32)>) {
        let v = slab.map_or(0, |(c, tag)| (tag + 1) << 8 | (c as u32 + 1));
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
        ((v & 0xff) as usize).checked_sub(1)
    }

    /// The live bit of `off`, on a slab page (whose region has its tables since the slab was
    /// made: no initialisation check on this path).
    #[inline]
    fn bit(&self, off: usize) -> (&AtomicU64, u64) {
        let side = self.regions[off >> self.shift].get();
        let side = side.expect("a slab page's region has side tables");
        let g = self.in_region(off) / GRANULE;
        (&side.live[g / 64], 1 << (g % 64))
    }

    /// `free`'s check with the caches on: whether `off` is on a slab page and, if so, take the
    /// object starting there back from the program (one atomic `fetch_and`).
    #[inline]
    pub fn take(&self, off: usize) -> Taken {
        let Some(side) = self.regions.get(off >> self.shift).and_then(|s| s.get()) else {
            return Taken::NotSlab;
        };
        let at = self.in_region(off);
        let v = side.class[at / PAGE].load(Ordering::Acquire);
        if v == 0 {
            return Taken::NotSlab;
        }
        let g = at / GRANULE;
        let m = 1u64 << (g % 64);
        if off.is_multiple_of(GRANULE) && side.live[g / 64].fetch_and(!m, Ordering::AcqRel) & m != 0
        {
            Taken::Live {
                class: (v & 0xff) as usize - 1,
                tag: (v >> 8) - 1,
            }
        } else {
            Taken::NotLive
        }
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
