//! Files holding preallocation (blocks past their size, given by an append so the appends that
//! follow take the fast path), and giving it back before it crowds out other files. A file's
//! preallocation normally goes at its last close (`Fs::release`), but a holder that never
//! closes (the FUSE mount under `--cache long`, where the kernel's reference to a file stands
//! in for its opens until FORGET; a program keeping thousands of files open) would keep it
//! forever: copying a 23,000-file tree onto a 1 GiB pool that way ran out of space at half
//! full. As ext4 bounds its per-inode preallocations (`mb_max_inode_prealloc`) and discards
//! them when space runs out, at most [`MAX_FILES`] files hold preallocation (the oldest
//! trimmed first) and a write that finds no space trims them all and tries again.

use crate::Fs;
use pmkit_media::Media;
use std::collections::{HashSet, VecDeque};

/// Most files holding preallocation at once (ext4's default `mb_max_inode_prealloc`).
pub(crate) const MAX_FILES: usize = 512;

/// The files that were given preallocation, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Preallocated {
    order: VecDeque<u64>,
    held: HashSet<u64>,
}

impl Preallocated {
    /// `ino` was given preallocation.
    pub(crate) fn note(&mut self, ino: u64) {
        if self.held.insert(ino) {
            self.order.push_back(ino);
        }
        // Inodes already trimmed or freed stay in `order` until they come first: bounded.
        if self.order.len() > 4 * MAX_FILES {
            let held = &self.held;
            self.order.retain(|i| held.contains(i));
        }
    }
    /// `ino` no longer holds preallocation (trimmed, or freed).
    pub(crate) fn forget(&mut self, ino: u64) {
        self.held.remove(&ino);
    }
    /// The oldest file holding preallocation, if more than `keep` do, but `spare`.
    fn take_oldest(&mut self, keep: usize, spare: u64) -> Option<u64> {
        while self.held.len() > keep {
            let ino = self.order.pop_front()?;
            if ino == spare && self.held.contains(&ino) {
                self.order.push_back(ino);
                if self.held.len() == 1 {
                    return None;
                }
                continue;
            }
            if self.held.remove(&ino) {
                return Some(ino);
            }
        }
        None
    }
}

impl<M: Media> Fs<M> {
    /// Keep at most [`MAX_FILES`] files holding preallocation, sparing `writing` (about to be
    /// written). Called before a write takes any lock of its own.
    pub(crate) fn bound_prealloc(&self, writing: u64) {
        loop {
            // (the guard dropped before the trim, which takes the allocator's lock too)
            let next = self
                .alloc
                .lock()
                .preallocated
                .take_oldest(MAX_FILES, writing);
            let Some(ino) = next else { return };
            self.trim_if_live(ino);
        }
    }

    /// Give back every file's preallocation (a write found no space). The files trimmed.
    pub(crate) fn reclaim_all_prealloc(&self) -> usize {
        let mut n = 0;
        loop {
            let next = self.alloc.lock().preallocated.take_oldest(0, u64::MAX);
            let Some(ino) = next else { return n };
            self.trim_if_live(ino);
            n += 1;
        }
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
