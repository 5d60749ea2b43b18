//! Data checksums (format 6), per file (`Fs::set_sums`, the xattr `user.pmkit.checksum`): a
//! CRC32C per 4 KiB data block, so damage to file data is EIO, never plausible wrong bytes.
//!
//! The sums live in one table indexed by the block's number on the media, not by file offset:
//! a block keeps its sum wherever the file's tree points at it, so punch, truncate and
//! copy-on-write move nothing. The table is a tree like a file's (`tree.rs`) whose leaves hold
//! 1,024 sums each, rooted in the meta inode (its xattr field holds the root and its rdev field
//! the height; the meta inode's own checksum covers both). It is made whole, for every data
//! block, when the first file asks for sums (4 bytes per 4 KiB block: 0.1% of the data area),
//! extended by the mount after a resize, and never shrinks.
//!
//! A sum covers what a read returns: the block's bytes up to the file's size and zeros past it.
//! Zeroing bytes past the size (which a growing write does) changes no sum, and only a size
//! that shrinks into a block re-sums it (in the truncate's transaction). Every write to a summed
//! file is copy-on-write: the new block's sum is stored, unlogged, while nothing reaches the
//! block, before the transaction that points the file at it commits; so after a crash a
//! pointer and its sum always belong to one state. A read sums every block it returns from and
//! compares; a mismatch is EIO naming the inode and the offset, recorded as damage (`damage.rs`).

use crate::error::{Error, Result};
use crate::inode::{Inode, Kind, FLAG_SUMS};
use crate::layout::{BLOCK, META_INO};
use crate::tree::{self, Reader};
use crate::tx::Tx;
use crate::Fs;
use pmkit_media::Media;
use std::sync::atomic::{AtomicU64, Ordering};

/// Sums per table leaf (4-byte sums in a 4 KiB block).
pub(crate) const PER_LEAF: u64 = (BLOCK / 4) as u64;

/// The zeros a sum counts past a file's size.
static ZEROS: [u8; BLOCK] = [0; BLOCK];

/// The sum of a block whose first `valid` bytes the file's size covers: CRC32C of those bytes
/// and zeros for the rest (what a read returns).
pub(crate) fn block_sum(content: &[u8], valid: usize) -> u32 {
    assert!(content.len() == BLOCK && valid <= BLOCK, "a whole block");
    let c = crc32c::crc32c(&content[..valid]);
    crc32c::crc32c_append(c, &ZEROS[..BLOCK - valid])
}

/// The bytes of file block `idx` a file of `size` bytes covers.
pub(crate) fn valid(size: u64, idx: u64) -> usize {
    size.saturating_sub(idx * BLOCK as u64).min(BLOCK as u64) as usize
}

/// The table's root and height as the meta inode holds them (root 0: no table).
pub(crate) fn table_of(meta: &Inode) -> (u64, u8) {
    (meta.xattr, meta.rdev as u8)
}

/// The byte offset of block `b`'s sum in the table `(root, height)`; `None` where the table
/// has no leaf for it (no table, or a pool grown since and not yet extended).
pub(crate) fn slot(r: &impl Reader, (root, height): (u64, u8), b: u64) -> Option<usize> {
    if root == 0 {
        return None;
    }
    let leaf = tree::lookup(r, root, height, b / PER_LEAF);
    (leaf != 0).then(|| leaf as usize * BLOCK + (b % PER_LEAF) as usize * 4)
}

/// The mount's copy of the table's place: `root * 4 + height` (0: no table), read by every
/// summed write and read without a lock; changed only by [`Fs::ensure_sums`].
#[derive(Default)]
pub(crate) struct Table(AtomicU64);

impl Table {
    pub(crate) fn new(meta: &Inode) -> Table {
        let t = Table::default();
        t.set(table_of(meta));
        t
    }
    pub(crate) fn get(&self) -> (u64, u8) {
        let v = self.0.load(Ordering::Acquire);
        (v / 4, (v % 4) as u8)
    }
    fn set(&self, (root, height): (u64, u8)) {
        assert!(height < 4, "a table tree is at most 3 high");
        self.0.store(root * 4 + height as u64, Ordering::Release);
    }
}

impl<M: Media> Fs<M> {
    /// Whether the regular file `ino` has data checksums; `None` for other kinds.
    pub fn sums(&self, ino: u64) -> Result<Option<bool>> {
        self.file_flag(ino, FLAG_SUMS)
    }

    /// Give the regular file `ino` data checksums (`true`), or drop them. Turning them on sums
    /// every block the file has (its preallocation past the size is given back first), makes
    /// the pool's table the first time (`ensure_sums`), and sets the inode flag, in one
    /// transaction; from then on every write to the file is copy-on-write and every read is
    /// checked. A mapped file is refused (stores through a mapping would pass the sums).
    pub fn set_sums(&self, ino: u64, on: bool) -> Result<()> {
        if on {
            self.ensure_sums()?;
        }
        let _ns = self.ns.read();
        loop {
            let n = self.live(ino)?;
            match n.kind() {
                Some(Kind::File) => {}
                Some(Kind::Dir) => return Err(Error::IsDir),
                _ => return Err(Error::Invalid("data checksums of a non-regular file")),
            }
            if n.sums() == on {
                return Ok(());
            }
            if on {
                self.check_unpinned(ino)?;
                self.trim_prealloc(ino)?;
            }
            let _g = self.stripe(ino).lock();
            if on {
                // A sum covers the bytes this file's size holds: a block another file shares
                // (ending elsewhere) would need two. Its own copies first (`share.rs`).
                self.unshare(ino, 0, u64::MAX)?;
            }
            let mut tx = self.tx();
            let mut n = tx.inode(ino);
            // what a trim keeps: the blocks the size covers (and a huge block's whole span,
            // whose blocks past the size sum as zeros, which the size finds when it grows)
            let keep = tree::keep_blocks(&n, n.size);
            if on && !tree::present(&tx, n.root, n.height, (keep, u64::MAX), 1).is_empty() {
                continue; // preallocated again meanwhile: give it back again
            }
            if on {
                let mut content = vec![0u8; BLOCK];
                for idx in 0..keep {
                    let b = tree::lookup(&tx, n.root, n.height, idx);
                    if b != 0 {
                        tx.read(b as usize * BLOCK, &mut content);
                        let sum = block_sum(&content, valid(n.size, idx));
                        // unlogged: until the flag commits, nothing reads these sums
                        self.put_fresh_sum(&mut tx, b, sum)?;
                    }
                }
            }
            n.flags ^= FLAG_SUMS;
            n.ctime = crate::clock::now();
            tx.put_inode(ino, &n);
            self.commit(tx)?;
            // A peer's layout of the file (`direct.rs`) goes stale: its reads are checked now.
            if let Some(e) = &self.alloc.lock().epoch {
                e.bump();
            }
            return Ok(());
        }
    }

    /// Make the table cover every data block (idempotent; one transaction). Holds the
    /// namespace write lock and the orphan list's lock: the meta inode it changes also holds
    /// the grown inode table and the orphan list head, changed under those.
    /// The flags a regular file this mount creates starts with: atomic and summed as the mount
    /// asks (`MountOptions::data`, `MountOptions::checksum`).
    pub(crate) fn new_file_flags(&self) -> u8 {
        let atomic = self.opts.data == crate::DataMode::Atomic;
        (if atomic { crate::inode::FLAG_ATOMIC } else { 0 })
            | (if self.opts.checksum { FLAG_SUMS } else { 0 })
    }

    pub(crate) fn ensure_sums(&self) -> Result<()> {
        if !self.geo.data_sums() {
            return Err(Error::NotSupported(
                "data checksums on a pool of a format before 6 (make it with this version)",
            ));
        }
        // Leaves are added in order, all in one transaction: the last one stands for all.
        let need = self.geo.data_end().div_ceil(PER_LEAF);
        let (root, height) = self.sums.get();
        if root != 0 && tree::lookup(&self.pm, root, height, need - 1) != 0 {
            return Ok(());
        }
        let _ns = self.ns.write();
        let _orphans = self.orphans.lock();
        let mut tx = self.tx();
        let mut meta = tx.inode(META_INO);
        let (root, height) = table_of(&meta);
        // The table's tree, grown through a stand-in inode (`tree::set` keeps a root there).
        let mut t = Inode {
            root,
            height,
            ..Inode::default()
        };
        for l in 0..need {
            if tree::lookup(&tx, t.root, t.height, l) == 0 {
                let leaf = tx.new_block(&[])?;
                tree::set(&mut tx, &mut t, l, leaf)?;
            }
        }
        (meta.xattr, meta.rdev) = (t.root, t.height as u32);
        tx.put_inode(META_INO, &meta);
        self.commit(tx)?;
        self.sums.set((t.root, t.height));
        Ok(())
    }

    /// Store the sum of block `b`, which nothing reaches until `tx` commits (unlogged).
    pub(crate) fn put_fresh_sum(&self, tx: &mut Tx<'_, M>, b: u64, sum: u32) -> Result<()> {
        let at = self.sum_slot(b)?;
        tx.write_fresh(at, &sum.to_le_bytes());
        Ok(())
    }

    /// Store the sum of block `b`, which the file reaches now (logged: a crash before the
    /// commit puts the old sum back with the old size).
    pub(crate) fn put_live_sum(&self, tx: &mut Tx<'_, M>, b: u64, sum: u32) -> Result<()> {
        let at = self.sum_slot(b)?;
        tx.write(at, &sum.to_le_bytes());
        Ok(())
    }

    fn sum_slot(&self, b: u64) -> Result<usize> {
        slot(&self.pm, self.sums.get(), b).ok_or_else(|| {
            Error::Corrupt(format!("the data checksum table has no leaf for block {b}"))
        })
    }

    /// Sum file block `idx` of `node` (inode `ino`), held at media block `b`, as a read
    /// returns it (`content`: the whole block) and compare with the table: a mismatch is EIO,
    /// recorded as damage.
    pub(crate) fn verify_block(
        &self,
        ino: u64,
        node: &Inode,
        idx: u64,
        b: u64,
        content: &[u8],
    ) -> Result<()> {
        let want = self.sum_slot(b).map(|at| self.pm.read_u32(at));
        let got = block_sum(content, valid(node.size, idx));
        match want {
            Ok(w) if w == got => Ok(()),
            Ok(w) => Err(self.damaged(
                ino,
                format!(
                    "data checksum mismatch at file offset {} (media block {b}: stored {w:#010x}, \
                     data sums to {got:#010x})",
                    idx * BLOCK as u64
                ),
            )),
            Err(e) => Err(self.damaged(ino, e.to_string())),
        }
    }

    /// Re-sum the block a size of `node.size` ends inside (a shrinking size: the bytes it no
    /// longer covers now count as zeros), in `tx`.
    pub(crate) fn resum_tail(&self, tx: &mut Tx<'_, M>, node: &Inode) -> Result<()> {
        let idx = node.size / BLOCK as u64;
        if !node.sums() || node.size.is_multiple_of(BLOCK as u64) {
            return Ok(());
        }
        let b = tree::lookup(&*tx, node.root, node.height, idx);
        if b == 0 {
            return Ok(());
        }
        let mut content = vec![0u8; BLOCK];
        tx.read(b as usize * BLOCK, &mut content);
        let sum = block_sum(&content, valid(node.size, idx));
        self.put_live_sum(tx, b, sum)
    }
}

/// Most mismatches `check` lists one by one (more are counted).
pub(crate) const MAX_LISTED: usize = 100;

/// `check`'s scan of every summed file's blocks on a walked pool: one line per block whose
/// data does not match its sum (what a read there answers with EIO). Reads every block of
/// every summed file once.
pub(crate) fn scan<M: Media>(
    pm: &crate::pm::Pm<M>,
    it: &crate::itable::Itable,
    used: impl Fn(u64) -> bool,
) -> Vec<String> {
    let node = |ino: u64| {
        let mut b = [0u8; crate::layout::INODE];
        pm.read(it.off(ino), &mut b);
        Inode::decode(&b)
    };
    let table = table_of(&node(META_INO));
    let (mut out, mut more) = (Vec::new(), 0u64);
    let mut content = vec![0u8; BLOCK];
    for ino in (META_INO + 1..it.count()).filter(|&i| used(i)) {
        let n = node(ino);
        if !n.is(Kind::File) || !n.sums() {
            continue;
        }
        for idx in 0..n.size.div_ceil(BLOCK as u64) {
            let b = tree::lookup(pm, n.root, n.height, idx);
            if b == 0 {
                continue;
            }
            pm.read(b as usize * BLOCK, &mut content);
            let got = block_sum(&content, valid(n.size, idx));
            let want = slot(pm, table, b).map(|at| pm.read_u32(at));
            if want == Some(got) {
                continue;
            }
            if out.len() >= MAX_LISTED {
                more += 1;
                continue;
            }
            out.push(format!(
                "inode {ino}: the data at file offset {} (media block {b}) does not match its \
                 checksum{}; a read there answers EIO. Repair cannot recover it: write that \
                 range again, or delete the file",
                idx * BLOCK as u64,
                if want.is_none() {
                    " (the checksum table has no leaf for it)"
                } else {
                    ""
                }
            ));
        }
    }
    if more > 0 {
        out.push(format!("... and {more} more damaged blocks"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sum_counts_zeros_past_the_size() {
        let mut b = vec![7u8; BLOCK];
        let whole = block_sum(&b, BLOCK);
        assert_ne!(block_sum(&b, 100), whole);
        b[100..].fill(0);
        assert_eq!(block_sum(&b, 100), block_sum(&b, BLOCK));
        assert_eq!(valid(5000, 0), BLOCK);
        assert_eq!(valid(5000, 1), 5000 - BLOCK);
        assert_eq!(valid(5000, 2), 0);
    }
}
