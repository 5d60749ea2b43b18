//! Where each inode lies, and which inodes this mount has checked.
//!
//! The table mkfs lays out (`Geometry::inodes` slots after the journal) comes first. From
//! format 5 the table grows: the meta inode (slot 0) is a file whose tree holds the further
//! table blocks, 32 inodes each, in order, so inode `fixed + 32k + s` is slot `s` of its `k`th
//! block. A block joins the table in one transaction (zeroed, then pointed at; `Fs::grow_table`)
//! and never leaves it, so an inode number, once valid, stays valid for the life of the pool
//! and numbers stay dense (the allocators and the walk index arrays by them).
//!
//! The DRAM copy is read on every access to a grown inode and appended by one writer at a time
//! (the namespace lock): a two-level array of atomics, so readers take no lock.

use crate::layout::{Geometry, BLOCK, INODE};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Inodes per table block.
pub(crate) const PER_BLOCK: u64 = (BLOCK / INODE) as u64;
/// Table blocks per segment of the DRAM array.
const SEG: usize = 4096;

/// One grown table block: where it is, and a bit per inode checked this mount.
struct Slot {
    block: AtomicU64,
    checked: AtomicU32,
}

pub(crate) struct Itable {
    /// Byte offset of the fixed table.
    base: usize,
    fixed: u64,
    /// A bit per fixed inode checked this mount (`Fs::verified`).
    fixed_checked: Box<[AtomicU64]>,
    segs: Box<[OnceLock<Box<[Slot]>>]>,
    /// Grown blocks published (the entries below it are set).
    len: AtomicU64,
}

impl Itable {
    /// The table of `geo` grown by `blocks` (in order); every inode counted as checked or not.
    pub(crate) fn new(geo: &Geometry, blocks: &[u64], checked: bool) -> Itable {
        // Every data block could be a table block: the most a pool can ever need.
        let cap = if geo.grows() {
            geo.data_blocks().div_ceil(SEG as u64) as usize
        } else {
            0
        };
        let bits = if checked { u64::MAX } else { 0 };
        let t = Itable {
            base: geo.inode_off(0),
            fixed: geo.inodes as u64,
            fixed_checked: (0..(geo.inodes as u64).div_ceil(64))
                .map(|_| AtomicU64::new(bits))
                .collect(),
            segs: (0..cap).map(|_| OnceLock::new()).collect(),
            len: AtomicU64::new(0),
        };
        assert!(
            blocks.len() <= cap * SEG,
            "more table blocks than data blocks"
        );
        for &b in blocks {
            t.push(b, checked);
        }
        t
    }

    /// Inodes in the table, free or not.
    pub(crate) fn count(&self) -> u64 {
        self.fixed + PER_BLOCK * self.len.load(Ordering::Acquire)
    }

    /// Whether `ino` has a slot.
    pub(crate) fn has(&self, ino: u64) -> bool {
        ino < self.count()
    }

    /// Grown blocks.
    pub(crate) fn blocks_len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    /// The grown blocks, in order.
    pub(crate) fn blocks(&self) -> Vec<u64> {
        (0..self.len.load(Ordering::Acquire))
            .map(|k| self.slot(k).block.load(Ordering::Relaxed))
            .collect()
    }

    fn slot(&self, k: u64) -> &Slot {
        let seg = self.segs[k as usize / SEG]
            .get()
            .expect("a published segment");
        &seg[k as usize % SEG]
    }

    /// Byte offset of inode `ino`.
    pub(crate) fn off(&self, ino: u64) -> usize {
        if ino < self.fixed {
            return self.base + ino as usize * INODE;
        }
        let g = ino - self.fixed;
        let k = g / PER_BLOCK;
        assert!(
            k < self.len.load(Ordering::Acquire),
            "inode {ino} out of range"
        );
        let b = self.slot(k).block.load(Ordering::Relaxed);
        b as usize * BLOCK + (g % PER_BLOCK) as usize * INODE
    }

    /// The inode whose slot holds byte `off`, if any (repair's reseal of what a fix stores).
    pub(crate) fn ino_at(&self, off: usize) -> Option<u64> {
        let end = self.base + self.fixed as usize * INODE;
        if (self.base..end).contains(&off) {
            return Some(((off - self.base) / INODE) as u64);
        }
        let b = (off / BLOCK) as u64;
        let k = self.blocks().iter().position(|&x| x == b)? as u64;
        Some(self.fixed + k * PER_BLOCK + ((off % BLOCK) / INODE) as u64)
    }

    /// Add table block `b` (zeroed and durable in the table already). One caller at a time.
    pub(crate) fn push(&self, b: u64, checked: bool) {
        let k = self.len.load(Ordering::Relaxed);
        let seg = self
            .segs
            .get(k as usize / SEG)
            .expect("room for every data block");
        let seg = seg.get_or_init(|| {
            (0..SEG)
                .map(|_| Slot {
                    block: AtomicU64::new(0),
                    checked: AtomicU32::new(0),
                })
                .collect()
        });
        let s = &seg[k as usize % SEG];
        s.block.store(b, Ordering::Relaxed);
        s.checked
            .store(if checked { u32::MAX } else { 0 }, Ordering::Relaxed);
        self.len.store(k + 1, Ordering::Release);
    }

    /// Whether inode `ino`'s tree has been checked this mount.
    pub(crate) fn checked(&self, ino: u64) -> bool {
        if ino < self.fixed {
            let (w, bit) = ((ino / 64) as usize, 1u64 << (ino % 64));
            return self.fixed_checked[w].load(Ordering::Acquire) & bit != 0;
        }
        let g = ino - self.fixed;
        let bit = 1u32 << (g % PER_BLOCK);
        self.slot(g / PER_BLOCK).checked.load(Ordering::Acquire) & bit != 0
    }

    /// Record that inode `ino`'s tree has been checked.
    pub(crate) fn set_checked(&self, ino: u64) {
        if ino < self.fixed {
            let (w, bit) = ((ino / 64) as usize, 1u64 << (ino % 64));
            self.fixed_checked[w].fetch_or(bit, Ordering::Release);
            return;
        }
        let g = ino - self.fixed;
        let bit = 1u32 << (g % PER_BLOCK);
        self.slot(g / PER_BLOCK)
            .checked
            .fetch_or(bit, Ordering::Release);
    }
}

const _: () = assert!(PER_BLOCK == 32, "a u32 of checked bits per block");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grown_inodes_lie_in_their_blocks_in_order() {
        let geo = Geometry::new(4096, 2, 64, 64).unwrap();
        let t = Itable::new(&geo, &[900, 700], false);
        assert_eq!(t.count(), 64 + 64);
        assert_eq!(t.off(3), geo.inode_off(3));
        assert_eq!(t.off(64), 900 * BLOCK);
        assert_eq!(t.off(64 + 33), 700 * BLOCK + INODE);
        assert_eq!(t.ino_at(700 * BLOCK + INODE + 5), Some(97));
        assert_eq!(t.ino_at(geo.inode_off(5) + 1), Some(5));
        assert_eq!(t.ino_at(800 * BLOCK), None);
        assert!(!t.checked(97) && !t.checked(3));
        t.set_checked(97);
        t.set_checked(3);
        assert!(t.checked(97) && t.checked(3) && !t.checked(96));
        t.push(1000, true);
        assert!(t.has(64 + 95) && !t.has(64 + 96) && t.checked(64 + 70));
        assert_eq!(t.blocks(), vec![900, 700, 1000]);
    }
}
