//! Preallocation: the window of blocks past a file's size an append gives it (`Fs::prealloc`,
//! so the appends that follow take the fast path), its trim at the last close, and giving it
//! back before it crowds out other files. A file's
//! preallocation normally goes at its last close (`Fs::release`), but a holder that never
//! closes (the FUSE mount under `--cache long`, where the kernel's reference to a file stands
//! in for its opens until FORGET; a program keeping thousands of files open) would keep it
//! forever: copying a 23,000-file tree onto a 1 GiB pool that way ran out of space at half
//! full. As ext4 bounds its per-inode preallocations (`mb_max_inode_prealloc`) and discards
//! them when space runs out, at most [`MAX_FILES`] files hold preallocation (the oldest
//! trimmed first) and a write that finds no space trims them all and tries again.

use crate::error::Result;
use crate::inode::{Inode, Kind};
use crate::layout::{BLOCK, MAX_FILE_SIZE};
use crate::preallocated::MAX_FILES;
use crate::tree;
use crate::tree::keep_blocks;
use crate::tx::Tx;
use crate::Fs;
use pmkit_media::Media;
use std::sync::atomic::Ordering;

/// Preallocation window bounds, in blocks (see `Fs::prealloc`).
const PREALLOC_MIN: u64 = 16;
const PREALLOC_MAX: u64 = 256;

impl<M: Media> Fs<M> {
    /// Keep at most [`MAX_FILES`] files holding preallocation, sparing `writing` (about to be
    /// written). Called before a write takes any lock of its own.
    pub(crate) fn bound_prealloc(&self, writing: u64) {
        // Within the bound (nearly always): no lock. A stale count delays a trim by one write.
        if self.prealloc_files.load(Ordering::Relaxed) <= MAX_FILES {
            return;
        }
        // (the guard dropped before the trim, which takes the allocator's lock too)
        while let Some(ino) = self.prealloc_take(MAX_FILES, writing) {
            self.trim_if_live(ino);
        }
    }

    /// Give back every file's preallocation (a write found no space). The files trimmed.
    pub(crate) fn reclaim_all_prealloc(&self) -> usize {
        let mut n = 0;
        while let Some(ino) = self.prealloc_take(0, u64::MAX) {
            self.trim_if_live(ino);
            n += 1;
        }
        n
    }

    /// [`Preallocated::note`], the count kept.
    pub(crate) fn prealloc_note(&self, ino: u64) {
        let mut a = self.alloc.lock();
        a.preallocated.note(ino);
        self.prealloc_files
            .store(a.preallocated.len(), Ordering::Relaxed);
    }

    /// [`Preallocated::forget`], the count kept.
    pub(crate) fn prealloc_forget(&self, ino: u64) {
        let mut a = self.alloc.lock();
        a.preallocated.forget(ino);
        self.prealloc_files
            .store(a.preallocated.len(), Ordering::Relaxed);
    }

    /// [`Preallocated::take_oldest`], the count kept.
    fn prealloc_take(&self, keep: usize, spare: u64) -> Option<u64> {
        let mut a = self.alloc.lock();
        let next = a.preallocated.take_oldest(keep, spare);
        self.prealloc_files
            .store(a.preallocated.len(), Ordering::Relaxed);
        next
    }

    fn trim_if_live(&self, ino: u64) {
        let _ns = self.ns.read();
        if self.live(ino).is_ok() {
            // A failure leaves the blocks with the file (a later close or trim gives them
            // back); nothing here depends on it.
            let _ = self.trim_prealloc(ino);
        }
    }
}

/// The window itself: given by an append, given back at the last close.
impl<M: Media> Fs<M> {
    /// An append that needed a block: give the file the rest of an aligned window of blocks
    /// beyond `last` too (pointers set, size unchanged), so the appends that follow find their
    /// blocks allocated and take the fast path (no transaction). The window grows with the file
    /// (an eighth of it, 16 to 256 blocks), divides 512 (so it stays inside `last`'s level-1
    /// node and 2 MiB span: no new node but at height 0, no span a huge block could take), and
    /// takes at most a sixteenth of the free blocks. Unzeroed: bytes beyond the size are zeroed before a size covers them.
    pub(crate) fn prealloc(&self, tx: &mut Tx<'_, M>, node: &mut Inode, last: u64) {
        if self.opts.no_prealloc {
            return;
        }
        // (no bound from the lane: the pointer words are not logged, below)
        let w = ((last + 1).next_power_of_two() / 8).clamp(PREALLOC_MIN, PREALLOC_MAX);
        let free = self.alloc.lock().blocks.free();
        let stop = ((last / w + 1) * w)
            .min(last + 1 + free / 16)
            .min(MAX_FILE_SIZE / BLOCK as u64);
        if stop <= last + 1 {
            return;
        }
        // the first through `tree::set` (it may grow the tree from height 0), the rest as one
        // range of pointer words in the same level-1 node (one staged write, not one per block)
        if tree::lookup(&*tx, node.root, node.height, last + 1) == 0 {
            let Ok(b) = tx.alloc_block() else { return };
            if tree::set(tx, node, last + 1, b).is_err() {
                // no block for a node: the tree is as it was, the block goes back
                tx.free_after.push(b);
                return;
            }
        }
        let n = (stop - last - 2) as usize;
        let Some(at) = tree::leaf_slot(&*tx, node.root, node.height, last + 2) else {
            return;
        };
        if n == 0 {
            return;
        }
        let mut words = vec![0u8; n * 8];
        tx.read(at, &mut words);
        let ptr_of = |w: &[u8]| crate::ptr::value(u64::from_le_bytes(w.try_into().expect("8")));
        let empty = words.chunks(8).filter(|w| ptr_of(w) == 0);
        let mut got = tx.alloc_unwritten(empty.count()).into_iter();
        let checked = self.geo.checked_ptrs();
        for (i, w) in words.chunks_mut(8).enumerate() {
            if ptr_of(w) == 0 {
                let Some(b) = got.next() else { break };
                let word = crate::ptr::store(checked, b, at + i * 8);
                w.copy_from_slice(&word.to_le_bytes());
            }
        }
        // Not logged: the slots were empty and lie beyond the size, so a crash that keeps
        // some of them only leaves the file owning free blocks past its end, which the walk
        // counts as its own (preallocation) and a trim gives back.
        tx.write_fresh(at, &words);
    }

    /// Give back the blocks beyond the size (preallocation) at the last close. Caller holds the
    /// namespace lock; the inode is live.
    pub(crate) fn trim_prealloc(&self, ino: u64) -> Result<()> {
        self.prealloc_forget(ino);
        let _g = self.stripe(ino).lock();
        let node = self.inode(ino);
        if !node.is(Kind::File) {
            return Ok(());
        }
        let keep = keep_blocks(&node, node.size);
        let beyond = tree::present(&self.pm, node.root, node.height, (keep, u64::MAX), 1);
        if beyond.is_empty() {
            return Ok(());
        }
        self.prune_from(ino, keep)
    }
}
