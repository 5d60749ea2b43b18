//! Growing the inode table (format 5): one more block joins it, in a transaction of its own,
//! when an inode is about to be taken and none is free. See `itable.rs` for where it lies.

use crate::error::Result;
use crate::itable::PER_BLOCK;
use crate::layout::{BLOCK, META_INO};
use crate::{tree, Fs};
use pmkit_media::Media;

impl<M: Media> Fs<M> {
    /// Make sure a free inode is there for the transaction the caller is about to run. The
    /// caller holds the namespace lock for writing: every inode is taken under it, so none is
    /// taken between this and that transaction. A table that cannot grow (older formats) is
    /// left as it is: the transaction then fails with `NoInodes`.
    pub(crate) fn inode_room(&self) -> Result<()> {
        if !self.geo.grows() || self.alloc.lock().inodes.free() > 0 {
            return Ok(());
        }
        // The orphan list's lock too: its changes rewrite the meta inode, as this does.
        let _orphans = self.orphans.lock();
        let mut tx = self.tx();
        // Zeroed (32 free inodes) with streaming stores, durable before the commit makes the
        // tree point at it: a crash leaves the block free or in the table, whole.
        let b = tx.new_block(&[])?;
        let mut meta = tx.inode(META_INO);
        assert!(
            meta.size.is_multiple_of(BLOCK as u64),
            "the table's size is whole blocks"
        );
        let k = meta.size / BLOCK as u64;
        assert_eq!(
            k,
            self.itable.blocks_len(),
            "the table on media and in DRAM agree"
        );
        tree::set(&mut tx, &mut meta, k, b)?;
        meta.size += BLOCK as u64;
        tx.put_inode(META_INO, &meta);
        self.commit(tx)?;
        self.itable.push(b, true);
        self.alloc.lock().grow_inodes(PER_BLOCK);
        tracing::debug!(
            "inode table grew by block {b} to {} inodes",
            self.itable.count()
        );
        Ok(())
    }
}
