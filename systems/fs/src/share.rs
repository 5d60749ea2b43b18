//! Copy-on-write of shared data blocks (reflink: `clone.rs`). Nothing of the sharing is on the
//! media: which blocks are shared is what the trees say (format 8 lets a regular file's data
//! block have several pointers), and the allocator counts them (`shares.rs`). So a crash loses
//! nothing here either, and a block is freed (its bit cleared) only when the transaction that
//! drops its last pointer commits.
//!
//! A shared block is never written in place: every path that changes a file's bytes in place
//! first gives the file its own copy of the shared blocks it will touch (`Fs::unshare`).

use crate::error::Result;
use crate::layout::BLOCK;
use crate::tree;
use crate::Fs;
use pmkit_media::Media;
use std::sync::atomic::Ordering;

impl<M: Media> Fs<M> {
    /// Does any block have more than one pointer? One atomic load: writes ask before looking.
    #[inline]
    pub(crate) fn any_shared(&self) -> bool {
        self.shared_count.load(Ordering::Acquire) != 0
    }

    /// How many data blocks are shared (`pmkit fs info`): each counts once in the used space
    /// however many files point at it.
    pub fn shared_blocks(&self) -> u64 {
        self.alloc.lock().shares.len() as u64
    }

    /// `node` (file `ino` as it is now) once the shared blocks a store into `[from, to)` would
    /// touch are its own: the inode read again when anything was shared.
    pub(crate) fn own_range(
        &self,
        ino: u64,
        node: crate::inode::Inode,
        (from, to): (u64, u64),
    ) -> Result<crate::inode::Inode> {
        if !self.any_shared() {
            return Ok(node);
        }
        self.unshare(ino, from, to)?;
        Ok(self.inode(ino))
    }

    /// Give file `ino` its own copy of every shared block holding bytes `[from, to)`, so they
    /// can be written in place. The caller holds the inode's lock (no clone can share its
    /// blocks meanwhile). Each copy replaces the pointer in a transaction of its own; the bytes
    /// the file reads do not change, so a crash between them leaves nothing to undo.
    pub(crate) fn unshare(&self, ino: u64, from: u64, to: u64) -> Result<()> {
        if !self.any_shared() || from >= to {
            return Ok(());
        }
        let (first, end) = (from / BLOCK as u64, to.div_ceil(BLOCK as u64));
        let node = self.inode(ino);
        let present = tree::present(&self.pm, node.root, node.height, (first, end), usize::MAX);
        let shared: Vec<(u64, u64)> = {
            let a = self.alloc.lock();
            present
                .into_iter()
                .filter(|&(_, b)| a.shares.extra(b) != 0)
                .collect()
        };
        // A batch spans at most `clone_step` file blocks, as a clone's step does: its pointers
        // then lie in a few stretches of a node or two, which the undo log holds (counted in
        // blocks alone, scattered pointers would each take an entry of their own).
        let step = self.clone_step();
        let mut batches: Vec<&[(u64, u64)]> = Vec::new();
        let mut start = 0;
        for i in 1..=shared.len() {
            if i == shared.len() || shared[i].0 - shared[start].0 >= step {
                batches.push(&shared[start..i]);
                start = i;
            }
        }
        for batch in batches {
            let mut tx = self.tx();
            let mut node = tx.inode(ino);
            let mut content = vec![0u8; BLOCK];
            for &(idx, old) in batch {
                tx.read(old as usize * BLOCK, &mut content);
                let new = tx.new_block(&content)?;
                let was = tree::set(&mut tx, &mut node, idx, new)?;
                debug_assert_eq!(was, old, "file block {idx} of inode {ino} moved");
                tx.free_after.push(old);
            }
            // The bytes are the same: no time changes.
            tx.put_inode(ino, &node);
            self.commit(tx)?;
        }
        Ok(())
    }
}
