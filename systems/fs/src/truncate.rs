//! A file's size set: a growth zeroes what the file holds past the old size, a shrink frees the
//! blocks past the new one (in transactions of a bounded number of pointers, the target on the
//! orphan list while it takes more than one, so a crash finishes it) and zeroes the rest of the
//! block the size ends in.

use crate::error::{Error, Result};
use crate::layout::{BLOCK, MAX_FILE_SIZE};
use crate::tree;
use crate::tree::keep_blocks;
use crate::{attr::now, Fs};
use pmkit_media::Media;

impl<M: Media> Fs<M> {
    /// Set the size (caller holds the namespace read lock and the inode's stripe).
    pub(crate) fn truncate(&self, ino: u64, size: u64) -> Result<()> {
        if size > MAX_FILE_SIZE {
            return Err(Error::FileTooBig { max: MAX_FILE_SIZE });
        }
        // A growth zeroes in place what the file holds from the old size on: none of it may be
        // shared (a shrink's `zero_tail` sees to its block).
        let old = self.inode(ino).size;
        if size > old {
            self.unshare(ino, old, size)?;
        }
        let mut tx = self.tx();
        let mut node = tx.inode(ino);
        let t = now();
        if size >= node.size {
            self.zero_gap(&mut tx, &node, size);
            (node.size, node.mtime, node.ctime) = (size, t, t);
            tx.put_inode(ino, &node);
            return self.commit(tx);
        }
        let old = node.size;
        (node.size, node.mtime, node.ctime) = (size, t, t);
        self.resum_tail(&mut tx, &node)?;
        let keep = keep_blocks(&node, size);
        match tree::prune(&mut tx, &mut node, keep, self.prune_budget(), false) {
            Ok(true) => {
                tx.put_inode(ino, &node);
                self.commit(tx)?;
                return self.zero_tail(ino, size, old);
            }
            Ok(false) | Err(Error::NoSpace) => {}
            Err(e) => return Err(e),
        }
        drop(tx);
        // Too big for one transaction, or no block free for a huge block's split node: record
        // the target on the orphan list first (then the cut tail is beyond the size).
        let mut list = self.orphans.lock();
        let mut tx = self.tx();
        let mut node = tx.inode(ino);
        (node.size, node.mtime, node.ctime, node.trunc) = (size, t, t, size);
        self.resum_tail(&mut tx, &node)?;
        let new = self.orphan_add(&mut tx, &list, ino, &mut node);
        tx.put_inode(ino, &node);
        self.commit(tx)?;
        *list = new;
        self.truncate_rest(ino, size, &mut list)?;
        self.zero_tail(ino, size, old)
    }

    /// After a shrink to `size` (from `old`) committed: zero the rest of the block the size
    /// ends in, so a mapping of the file (`map()`, the shim's mmap) reads zeros past the end,
    /// as Linux's do. Its own transaction, of bytes past the size only: a crash before it
    /// leaves them as they were, which no read sees (a later growth zeroes them: `zero_gap`).
    fn zero_tail(&self, ino: u64, size: u64, old: u64) -> Result<()> {
        let end = size.next_multiple_of(BLOCK as u64).min(old);
        if end <= size {
            return Ok(());
        }
        self.unshare(ino, size, end)?;
        let mut tx = self.tx();
        let node = tx.inode(ino);
        debug_assert!(node.size == size, "the shrink committed");
        self.zero_gap(&mut tx, &node, end);
        self.commit(tx)
    }

    /// Before a mapping of `ino` is handed out: zero the rest of the block its size ends in.
    /// A block preallocated for appends holds what it held before until written, and an
    /// append leaves its tail so: reads stop at the size, a mapping's last page would not
    /// (Linux's read past the end of a mapped file as zeros).
    pub(crate) fn zero_past_eof(&self, ino: u64) -> Result<()> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let size = self.live(ino)?.size;
        self.zero_tail(ino, size, u64::MAX)
    }

    pub(crate) fn prune_budget(&self) -> usize {
        self.geo.lane_entries as usize / 2 - 8
    }

    /// Free every block of `ino` from file block `keep` on, in transactions of at most
    /// [`Fs::prune_budget`] entries (the size is at or below `keep` already: a cut huge block
    /// may spare its tail).
    pub(crate) fn prune_from(&self, ino: u64, keep: u64) -> Result<()> {
        loop {
            let mut tx = self.tx();
            let mut node = tx.inode(ino);
            let done = tree::prune(&mut tx, &mut node, keep, self.prune_budget(), true)?;
            tx.put_inode(ino, &node);
            self.commit(tx)?;
            if done {
                return Ok(());
            }
        }
    }

    /// Prune in transactions until nothing beyond `size` is left, then leave the orphan list.
    fn truncate_rest(&self, ino: u64, size: u64, list: &mut Vec<u64>) -> Result<()> {
        self.prune_from(ino, keep_blocks(&self.inode(ino), size))?;
        let mut tx = self.tx();
        let mut node = tx.inode(ino);
        let new = self.orphan_remove(&mut tx, list, ino, &mut node);
        node.trunc = 0;
        tx.put_inode(ino, &node);
        self.commit(tx)?;
        *list = new;
        Ok(())
    }

    pub(crate) fn finish_truncate(&self, ino: u64, size: u64) -> Result<()> {
        let mut list = self.orphans.lock();
        self.truncate_rest(ino, size, &mut list)
    }
}
