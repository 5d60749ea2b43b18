//! DRAM allocators for blocks and inodes, rebuilt by the mount walk (never journaled: a crash
//! loses nothing, because the walk recomputes them from what the tree references).

use crate::error::{Error, Result};

/// A bitmap allocator with next-fit search.
#[derive(Debug, Clone)]
pub struct Bitmap {
    bits: Vec<u64>,
    len: u64,
    next: u64,
    free: u64,
}

impl Bitmap {
    /// All `len` items free.
    pub fn new(len: u64) -> Bitmap {
        Bitmap {
            bits: vec![0; len.div_ceil(64) as usize],
            len,
            next: 0,
            free: len,
        }
    }
    pub fn free(&self) -> u64 {
        self.free
    }
    pub fn is_used(&self, i: u64) -> bool {
        self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
    /// Mark `i` used; false if it already was.
    pub fn set(&mut self, i: u64) -> bool {
        assert!(i < self.len, "bitmap index {i} >= {}", self.len);
        if self.is_used(i) {
            return false;
        }
        self.bits[(i / 64) as usize] |= 1 << (i % 64);
        self.free -= 1;
        true
    }
    pub fn clear(&mut self, i: u64) {
        assert!(self.is_used(i), "freeing {i}, which is free");
        self.bits[(i / 64) as usize] &= !(1 << (i % 64));
        self.free += 1;
    }
    pub fn take(&mut self) -> Option<u64> {
        if self.free == 0 {
            return None;
        }
        for k in 0..self.len {
            let i = (self.next + k) % self.len;
            if !self.is_used(i) {
                self.set(i);
                self.next = (i + 1) % self.len;
                return Some(i);
            }
        }
        unreachable!("free count {} but no free bit", self.free)
    }
}

/// Blocks and inodes, plus the DRAM-only open counts.
#[derive(Debug)]
pub struct Alloc {
    pub blocks: Bitmap,
    pub inodes: Bitmap,
    pub max_inodes: u32,
    pub open: std::collections::HashMap<u64, u32>,
}

impl Alloc {
    pub fn block(&mut self) -> Result<u64> {
        self.blocks.take().ok_or(Error::NoSpace)
    }
    pub fn inode(&mut self) -> Result<u64> {
        self.inodes.take().ok_or(Error::NoInodes {
            max: self.max_inodes,
        })
    }
}
