//! The files holding preallocation, oldest first, with the bound on how many may
//! (`reclaim.rs` trims past it). Kept in the allocator's state, under its lock.

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
    /// How many files hold preallocation.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
    /// The oldest file holding preallocation, if more than `keep` do, but `spare`.
    pub(crate) fn take_oldest(&mut self, keep: usize, spare: u64) -> Option<u64> {
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
