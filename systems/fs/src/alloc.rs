//! DRAM allocators for blocks and inodes, rebuilt by the mount walk (never journaled: a crash
//! loses nothing, because the walk recomputes them from what the tree references).
//!
//! The bitmap keeps a free count per chunk of 512 items (2 MiB of blocks): a 2 MiB-aligned free
//! run is a chunk whose count is 512, and single allocations prefer chunks already in use, so
//! whole free chunks stay whole for huge blocks as long as there is other space.

use crate::error::{Error, Result};
use crate::layout::{Geometry, META_INO};

/// Items per chunk: the 4 KiB blocks of one 2 MiB huge block.
pub(crate) const CHUNK: u64 = 512;

/// A bitmap allocator with per-chunk free counts.
#[derive(Debug, Clone)]
pub(crate) struct Bitmap {
    bits: Vec<u64>,
    chunk_free: Vec<u16>,
    len: u64,
    next: u64,
    free: u64,
}

impl Bitmap {
    /// All `len` items free.
    pub(crate) fn new(len: u64) -> Bitmap {
        let chunks = len.div_ceil(CHUNK);
        Bitmap {
            bits: vec![0; len.div_ceil(64) as usize],
            chunk_free: (0..chunks)
                .map(|c| ((c + 1) * CHUNK).min(len).saturating_sub(c * CHUNK) as u16)
                .collect(),
            len,
            next: 0,
            free: len,
        }
    }
    /// `n` more items, free, after the last (a grown inode table).
    pub(crate) fn grow(&mut self, n: u64) {
        let len = self.len + n;
        self.bits.resize(len.div_ceil(64) as usize, 0);
        let chunks = len.div_ceil(CHUNK);
        // the last partial chunk gains the new items, then whole or partial new chunks follow
        for c in 0..chunks {
            let (a, z) = (c * CHUNK, ((c + 1) * CHUNK).min(len));
            let added = z.saturating_sub(a.max(self.len));
            if c as usize >= self.chunk_free.len() {
                self.chunk_free.push(0);
            }
            self.chunk_free[c as usize] += added as u16;
        }
        self.len = len;
        self.free += n;
    }
    /// Items, used and free.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
    pub(crate) fn free(&self) -> u64 {
        self.free
    }
    /// The bits, one per item (used: 1), 64 to a word: what the clean-unmount checkpoint saves.
    pub(crate) fn words(&self) -> &[u64] {
        &self.bits
    }
    /// The bitmap of `len` items whose bits are `words`; None when they do not fit (a word
    /// count that does not match, or a bit set beyond `len`).
    pub(crate) fn from_words(len: u64, words: Vec<u64>) -> Option<Bitmap> {
        if words.len() as u64 != len.div_ceil(64) {
            return None;
        }
        if !len.is_multiple_of(64) && words.last().is_some_and(|&w| w >> (len % 64) != 0) {
            return None;
        }
        let mut b = Bitmap::new(len);
        for c in 0..b.chunk_free.len() {
            let (a, e) = (c * CHUNK as usize / 64, (c + 1) * CHUNK as usize / 64);
            let used: u32 = words[a..e.min(words.len())]
                .iter()
                .map(|w| w.count_ones())
                .sum();
            b.chunk_free[c] -= used as u16;
            b.free -= used as u64;
        }
        b.bits = words;
        Some(b)
    }
    /// The first of `n` contiguous free items, without taking them.
    pub(crate) fn find_run(&self, n: u64) -> Option<u64> {
        assert!(n > 0);
        let (mut run, mut i) = (0u64, 0u64);
        while i < self.len {
            let w = self.bits[(i / 64) as usize];
            // Whole words at a time where they are all used or all free.
            if i % 64 == 0 && w == u64::MAX {
                (run, i) = (0, i + 64);
                continue;
            }
            if i % 64 == 0 && w == 0 && i + 64 <= self.len {
                if run + 64 >= n {
                    return Some(i - run);
                }
                (run, i) = (run + 64, i + 64);
                continue;
            }
            if w & (1 << (i % 64)) != 0 {
                run = 0;
            } else {
                run += 1;
                if run == n {
                    return Some(i + 1 - n);
                }
            }
            i += 1;
        }
        None
    }
    /// Whole free 2 MiB chunks.
    pub(crate) fn free_chunks(&self) -> u64 {
        self.chunk_free
            .iter()
            .filter(|&&f| f as u64 == CHUNK)
            .count() as u64
    }
    pub(crate) fn is_used(&self, i: u64) -> bool {
        self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
    /// Mark `i` used; false if it already was.
    pub(crate) fn set(&mut self, i: u64) -> bool {
        assert!(i < self.len, "bitmap index {i} >= {}", self.len);
        if self.is_used(i) {
            return false;
        }
        self.bits[(i / 64) as usize] |= 1 << (i % 64);
        self.chunk_free[(i / CHUNK) as usize] -= 1;
        self.free -= 1;
        true
    }
    /// Mark `i` free; false (and nothing changed) if it already was: a double free, which
    /// only damage can cause (two files sharing a block), refused before a commit by
    /// `Tx::commit`; this keeps the counts right if one slips through.
    pub(crate) fn clear(&mut self, i: u64) -> bool {
        assert!(i < self.len, "bitmap index {i} >= {}", self.len);
        if !self.is_used(i) {
            return false;
        }
        self.bits[(i / 64) as usize] &= !(1 << (i % 64));
        self.chunk_free[(i / CHUNK) as usize] += 1;
        self.free += 1;
        true
    }
    fn first_free_in(&self, c: u64) -> Option<u64> {
        let (a, b) = (c * CHUNK / 64, ((c + 1) * CHUNK).min(self.len).div_ceil(64));
        for w in a..b {
            let z = !self.bits[w as usize];
            if z != 0 {
                let i = w * 64 + z.trailing_zeros() as u64;
                if i < self.len {
                    return Some(i);
                }
            }
        }
        None
    }
    /// One free item: next-fit over chunks, chunks in use before whole free ones.
    pub(crate) fn take(&mut self) -> Option<u64> {
        if self.free == 0 {
            return None;
        }
        let n = self.chunk_free.len() as u64;
        let start = self.next / CHUNK;
        for pass in 0..2 {
            for k in 0..n {
                let c = (start + k) % n;
                let f = self.chunk_free[c as usize] as u64;
                if f == 0 || (pass == 0 && f == CHUNK) {
                    continue;
                }
                let i = self.first_free_in(c).expect("chunk count says free");
                self.set(i);
                self.next = i;
                return Some(i);
            }
        }
        unreachable!("free count {} but no free bit", self.free)
    }
    /// A whole free chunk (512 items, the first a multiple of 512), all marked used.
    pub(crate) fn take_chunk(&mut self) -> Option<u64> {
        let n = self.chunk_free.len() as u64;
        let start = self.next / CHUNK;
        for k in 0..n {
            let c = (start + k) % n;
            if self.chunk_free[c as usize] as u64 == CHUNK {
                let w = (c * CHUNK / 64) as usize;
                self.bits[w..w + (CHUNK / 64) as usize].fill(u64::MAX);
                self.chunk_free[c as usize] = 0;
                self.free -= CHUNK;
                return Some(c * CHUNK);
            }
        }
        None
    }
}

/// Blocks and inodes, plus the DRAM-only open counts and files holding preallocation.
#[derive(Debug)]
pub(crate) struct Alloc {
    pub blocks: Bitmap,
    pub inodes: Bitmap,
    pub max_inodes: u32,
    pub open: std::collections::HashMap<u64, u32>,
    pub preallocated: crate::preallocated::Preallocated,
    /// Bumped by every free, when peers read in place (`direct.rs`).
    pub epoch: Option<std::sync::Arc<dyn crate::free_epoch::FreeEpoch>>,
    /// Data blocks with more than one pointer (`share.rs`).
    pub shares: crate::shares::Shares,
}

impl Alloc {
    /// An allocator over these bitmaps (the inode bitmap's length is the inode count), with
    /// nothing open.
    pub(crate) fn new(blocks: Bitmap, inodes: Bitmap) -> Alloc {
        let max_inodes = u32::try_from(inodes.len()).unwrap_or(u32::MAX);
        Alloc {
            blocks,
            inodes,
            max_inodes,
            open: Default::default(),
            preallocated: Default::default(),
            epoch: None,
            shares: Default::default(),
        }
    }
    /// What any file system of `geo` holds before its tree: the metadata blocks (superblocks,
    /// journal, inode table) and the meta inode.
    pub(crate) fn base(geo: &Geometry) -> Alloc {
        let mut a = Alloc::new(Bitmap::new(geo.blocks), Bitmap::new(geo.inodes as u64));
        (0..geo.data_block).for_each(|b| assert!(a.blocks.set(b)));
        // Format 3's second superblock copy: the last block.
        (geo.data_end()..geo.blocks).for_each(|b| assert!(a.blocks.set(b)));
        assert!(a.inodes.set(META_INO));
        a
    }
    pub(crate) fn block(&mut self) -> Result<u64> {
        self.blocks.take().ok_or(Error::NoSpace)
    }
    /// The first of 512 contiguous, 2 MiB-aligned free blocks (`None`: no whole chunk free).
    pub(crate) fn huge(&mut self) -> Option<u64> {
        self.blocks.take_chunk()
    }
    pub(crate) fn inode(&mut self) -> Result<u64> {
        self.inodes.take().ok_or(Error::NoInodes {
            max: self.max_inodes,
        })
    }
    /// 32 more free inodes: a block joined the table.
    pub(crate) fn grow_inodes(&mut self, n: u64) {
        self.inodes.grow(n);
        self.max_inodes = u32::try_from(self.inodes.len()).unwrap_or(u32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_runs_are_found() {
        let mut b = Bitmap::new(3 * CHUNK + 76);
        for i in [0, 5, 63, 64, 600, 3 * CHUNK + 75] {
            b.set(i);
        }
        let c = Bitmap::from_words(b.len(), b.words().to_vec()).expect("fits");
        assert_eq!((c.free(), c.free_chunks()), (b.free(), b.free_chunks()));
        assert_eq!(c.chunk_free, b.chunk_free);
        assert!(Bitmap::from_words(b.len(), vec![0; 3]).is_none());
        let mut over = b.words().to_vec();
        *over.last_mut().expect("words") |= 1 << 63;
        assert!(Bitmap::from_words(b.len(), over).is_none());
        assert_eq!(b.find_run(1), Some(1));
        assert_eq!(b.find_run(57), Some(6));
        assert_eq!(b.find_run(58), Some(65));
        assert_eq!(b.find_run(535), Some(65));
        assert_eq!(b.find_run(536), Some(601));
        assert_eq!(b.find_run(3 * CHUNK + 76), None);
        let mut full = Bitmap::new(130);
        (0..130).for_each(|i| {
            full.set(i);
        });
        full.clear(129);
        assert_eq!(full.find_run(1), Some(129));
        assert_eq!(full.find_run(2), None);
    }

    #[test]
    fn a_grown_bitmap_counts_its_new_items_free() {
        for (len, n) in [(0, 32), (10, 32), (500, 32), (512, 1000), (1000, 5000)] {
            let mut b = Bitmap::new(len);
            (0..len).for_each(|i| assert!(b.set(i)));
            b.grow(n);
            let fresh = Bitmap::new(len + n);
            assert_eq!((b.len(), b.free()), (len + n, n));
            let whole = (0..fresh.chunk_free.len())
                .map(|c| c as u64 * CHUNK)
                .filter(|&a| a >= len && a + CHUNK <= len + n)
                .count() as u64;
            assert_eq!(b.free_chunks(), whole, "{len}+{n}");
            let got: Vec<u64> = std::iter::from_fn(|| b.take()).collect();
            assert_eq!(got.len() as u64, n);
            assert!(got.iter().all(|&i| i >= len && i < len + n));
        }
    }

    #[test]
    fn chunks_stay_whole_while_there_is_other_space() {
        let mut b = Bitmap::new(3 * CHUNK + 76);
        assert_eq!(b.free_chunks(), 3);
        b.set(3);
        assert_eq!(b.free_chunks(), 2);
        // single items come from the used chunk, then the partial one at the end
        for _ in 0..CHUNK - 1 + 76 {
            let i = b.take().unwrap();
            assert!(
                !(CHUNK..3 * CHUNK).contains(&i),
                "took {i} from a whole chunk"
            );
        }
        assert_eq!((b.free_chunks(), b.free()), (2, 2 * CHUNK));
        assert_eq!(b.take_chunk(), Some(CHUNK));
        assert_eq!((b.free_chunks(), b.free()), (1, CHUNK));
        // the last whole chunk is broken only when nothing else is left
        assert_eq!(b.take(), Some(2 * CHUNK));
        assert_eq!(b.take_chunk(), None);
        b.clear(2 * CHUNK);
        for i in 3 * CHUNK..3 * CHUNK + 10 {
            b.clear(i);
        }
        assert_eq!(
            b.free_chunks(),
            1,
            "a partial chunk at the end is never whole"
        );
        assert_eq!(b.take_chunk(), Some(2 * CHUNK));
        assert_eq!(b.free(), 10);
        while b.take().is_some() {}
        assert_eq!(b.free(), 0);
    }
}
