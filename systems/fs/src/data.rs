//! File data: read, write (in place or copy-on-write), truncate, fallocate, and the orphan work
//! (freeing unlinked inodes, finishing cut truncates).

use crate::error::{Error, Result};
use crate::inode::{Inode, Kind, SIZE_MTIME};
use crate::layout::{BLOCK, MAX_FILE_SIZE};
use crate::tree;
use crate::tree::HUGE_BLOCKS;
use crate::tx::Tx;
use crate::{attr::now, Fs};
use pmkit_media::Media;

/// Blocks per in-place write transaction.
const CHUNK: u64 = 16;
/// Bytes of a huge block.
const HUGE_BYTES: u64 = HUGE_BLOCKS * BLOCK as u64;

impl<M: Media> Fs<M> {
    /// Blocks one all-or-nothing write (or fallocate step) may touch.
    fn atomic_blocks(&self) -> u64 {
        ((self.geo.lane_entries as u64 - 16) * 2).min(256)
    }

    /// The largest write an atomic file (`Fs::set_atomic`, `DataMode::Atomic`) accepts, in bytes.
    pub fn max_atomic_write(&self) -> u64 {
        (self.atomic_blocks() - 1) * BLOCK as u64
    }

    /// Read up to `len` bytes at `off` (short at the end of the file).
    pub fn read(&self, ino: u64, off: u64, len: usize) -> Result<Vec<u8>> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let node = self.live(ino)?;
        if node.is(Kind::Dir) {
            return Err(Error::IsDir);
        }
        self.read_data(&node, off, len)
    }

    pub(crate) fn read_data(&self, node: &Inode, off: u64, len: usize) -> Result<Vec<u8>> {
        let end = node.size.min(off.saturating_add(len as u64));
        if off >= end {
            return Ok(Vec::new());
        }
        let mut out = vec![0u8; (end - off) as usize];
        let mut pos = off;
        while pos < end {
            let idx = pos / BLOCK as u64;
            let in_blk = (pos % BLOCK as u64) as usize;
            let n = ((BLOCK - in_blk) as u64).min(end - pos) as usize;
            let b = tree::lookup(&self.pm, node.root, node.height, idx);
            if b != 0 {
                let at = b as usize * BLOCK + in_blk;
                if let Some(bad) = self.pm.first_bad(at, n) {
                    return Err(Error::Media(bad));
                }
                let o = (pos - off) as usize;
                self.pm.read(at, &mut out[o..o + n]);
            }
            pos += n as u64;
        }
        Ok(out)
    }

    /// Write `data` at `off`; durable when it returns; all-or-nothing when the file is atomic
    /// (see `DataMode`).
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let node = self.live(ino)?;
        match node.kind() {
            Some(Kind::File) => {}
            Some(Kind::Dir) => return Err(Error::IsDir),
            _ => return Err(Error::Invalid("write to a non-regular file")),
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE);
        let end = end.ok_or(Error::FileTooBig { max: MAX_FILE_SIZE })?;
        if data.is_empty() {
            return Ok(0);
        }
        if node.atomic() {
            if data.len() as u64 > self.max_atomic_write() {
                return Err(Error::TooBig {
                    len: data.len() as u64,
                    max: self.max_atomic_write(),
                });
            }
            self.write_chunk(ino, off, data, true)?;
            return Ok(data.len());
        }
        let mut pos = off;
        while pos < end {
            let piece = &data[(pos - off) as usize..];
            if self.try_huge(ino, pos, end, Some(piece))? {
                pos += HUGE_BYTES;
                continue;
            }
            let next = ((pos / BLOCK as u64 / CHUNK + 1) * CHUNK * BLOCK as u64).min(end);
            let piece = &data[(pos - off) as usize..(next - off) as usize];
            self.write_chunk(ino, pos, piece, false)?;
            pos = next;
        }
        Ok(data.len())
    }

    /// If `[pos, pos + 2 MiB)` is 2 MiB-aligned, inside `..end`, and the file has no block there,
    /// give it a huge block holding `data` (its first 2 MiB; zeros for `None`: fallocate) in one
    /// transaction, the size extended to cover it. False: not eligible, or no whole 2 MiB chunk
    /// is free (the caller falls back to 4 KiB blocks).
    fn try_huge(&self, ino: u64, pos: u64, end: u64, data: Option<&[u8]>) -> Result<bool> {
        if self.opts.small_blocks || !pos.is_multiple_of(HUGE_BYTES) || end - pos < HUGE_BYTES {
            return Ok(false);
        }
        let idx = pos / BLOCK as u64;
        let node = self.inode(ino);
        if !tree::span_empty(&self.pm, node.root, node.height, idx) {
            return Ok(false);
        }
        let mut tx = self.tx();
        let mut node = tx.inode(ino);
        self.zero_gap(&mut tx, &node, pos);
        let content = data.map(|d| &d[..HUGE_BYTES as usize]).unwrap_or(&[]);
        let Some(run) = tx.new_huge(content) else {
            return Ok(false);
        };
        tree::set_huge(&mut tx, &mut node, idx, run)?;
        let t = now();
        node.size = node.size.max(pos + HUGE_BYTES);
        node.ctime = t;
        if data.is_some() {
            node.mtime = t;
        }
        tx.put_inode(ino, &node);
        self.commit(tx)?;
        Ok(true)
    }

    /// Zero the bytes of the last block from the old size up to `upto` (they are beyond the
    /// end of the file, so a crash either way is invisible).
    fn zero_gap(&self, tx: &mut Tx<'_, M>, node: &Inode, upto: u64) {
        let tail = node.size % BLOCK as u64;
        if tail == 0 || upto <= node.size {
            return;
        }
        let idx = node.size / BLOCK as u64;
        let b = tree::lookup(tx, node.root, node.height, idx);
        if b != 0 {
            let stop = (upto - idx * BLOCK as u64).min(BLOCK as u64);
            let zeros = vec![0u8; (stop - tail) as usize];
            tx.write_fresh(b as usize * BLOCK + tail as usize, &zeros);
        }
    }

    fn write_chunk(&self, ino: u64, off: u64, data: &[u8], cow: bool) -> Result<()> {
        let end = off + data.len() as u64;
        let (first, last) = (off / BLOCK as u64, (end - 1) / BLOCK as u64);
        let node = self.inode(ino);
        if !cow && (first..=last).all(|i| tree::lookup(&self.pm, node.root, node.height, i) != 0) {
            self.pm.check()?;
            self.write_fast(ino, node, off, data);
            return self.pm.check();
        }
        let mut tx = self.tx();
        let mut node = tx.inode(ino);
        self.zero_gap(&mut tx, &node, off);
        for idx in first..=last {
            let bstart = idx * BLOCK as u64;
            let a = off.max(bstart);
            let b = end.min(bstart + BLOCK as u64);
            let piece = &data[(a - off) as usize..(b - off) as usize];
            let in_blk = (a - bstart) as usize;
            let cur = tree::lookup(&tx, node.root, node.height, idx);
            if cur != 0 && !cow {
                tx.write_stream(cur as usize * BLOCK + in_blk, piece);
                continue;
            }
            let mut content = vec![0u8; BLOCK];
            if cur != 0 {
                tx.read(cur as usize * BLOCK, &mut content);
                tx.free_after.push(cur);
            }
            content[in_blk..in_blk + piece.len()].copy_from_slice(piece);
            let new = tx.new_block(&content)?;
            tree::set(&mut tx, &mut node, idx, new)?;
        }
        let t = now();
        node.size = node.size.max(end);
        (node.mtime, node.ctime) = (t, t);
        tx.put_inode(ino, &node);
        self.commit(tx)
    }

    /// Every block is allocated: stream the data in place, fence, then publish size and mtime
    /// with one 16-byte store (no journal).
    fn write_fast(&self, ino: u64, node: Inode, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        let tail = node.size % BLOCK as u64;
        let gap_blk = tree::lookup(&self.pm, node.root, node.height, node.size / BLOCK as u64);
        if off > node.size && tail != 0 && gap_blk != 0 {
            // bytes beyond the end of the file: zero them before the size covers them
            let b = gap_blk;
            let stop = (off - node.size / BLOCK as u64 * BLOCK as u64).min(BLOCK as u64);
            let at = b as usize * BLOCK + tail as usize;
            self.pm.write(at, &vec![0u8; (stop - tail) as usize]);
            self.pm.flush(at, (stop - tail) as usize);
        }
        let mut pos = off;
        while pos < end {
            let idx = pos / BLOCK as u64;
            let in_blk = (pos % BLOCK as u64) as usize;
            let n = ((BLOCK - in_blk) as u64).min(end - pos) as usize;
            let b = tree::lookup(&self.pm, node.root, node.height, idx);
            let o = (pos - off) as usize;
            self.pm
                .write_nt(b as usize * BLOCK + in_blk, &data[o..o + n]);
            pos += n as u64;
        }
        self.pm.fence();
        let at = self.geo.inode_off(ino);
        let t = now();
        if end > node.size {
            self.pm
                .persist_u128(at + SIZE_MTIME, (t as u128) << 64 | end as u128);
        } else {
            self.pm.persist_u64(at + crate::inode::MTIME, t);
        }
    }

    /// Set the size (caller holds the namespace read lock and the inode's stripe).
    pub(crate) fn truncate(&self, ino: u64, size: u64) -> Result<()> {
        if size > MAX_FILE_SIZE {
            return Err(Error::FileTooBig { max: MAX_FILE_SIZE });
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
        (node.size, node.mtime, node.ctime) = (size, t, t);
        let keep = size.div_ceil(BLOCK as u64);
        match tree::prune(&mut tx, &mut node, keep, self.prune_budget(), false) {
            Ok(true) => {
                tx.put_inode(ino, &node);
                return self.commit(tx);
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
        let new = self.orphan_add(&mut tx, &list, ino, &mut node);
        tx.put_inode(ino, &node);
        self.commit(tx)?;
        *list = new;
        self.truncate_rest(ino, size, &mut list)
    }

    fn prune_budget(&self) -> usize {
        self.geo.lane_entries as usize / 2 - 8
    }

    /// Prune in transactions until nothing beyond `size` is left, then leave the orphan list.
    fn truncate_rest(&self, ino: u64, size: u64, list: &mut Vec<u64>) -> Result<()> {
        let keep = size.div_ceil(BLOCK as u64);
        loop {
            let mut tx = self.tx();
            let mut node = tx.inode(ino);
            let done = tree::prune(&mut tx, &mut node, keep, self.prune_budget(), true)?;
            tx.put_inode(ino, &node);
            self.commit(tx)?;
            if done {
                break;
            }
        }
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

    /// Free an orphan with no links (last release, or mount).
    pub(crate) fn free_orphan(&self, ino: u64) -> Result<()> {
        let mut list = self.orphans.lock();
        let mut tx = self.tx();
        let mut node = tx.inode(ino);
        let new = self.orphan_remove(&mut tx, &list, ino, &mut node);
        tx.put_inode(ino, &node);
        self.free_inode_tx(&mut tx, ino);
        self.commit(tx)?;
        *list = new;
        Ok(())
    }

    /// Allocate zeroed blocks for `[off, off+len)` and extend the size to cover it (mode 0).
    /// Atomic up to `max_atomic_write` bytes; beyond, in steps of that size (and one step per
    /// huge block), each atomic.
    pub fn fallocate(&self, ino: u64, off: u64, len: u64) -> Result<()> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let node = self.live(ino)?;
        if !node.is(Kind::File) {
            return Err(if node.is(Kind::Dir) {
                Error::IsDir
            } else {
                Error::Invalid("fallocate of a non-regular file")
            });
        }
        if len == 0 {
            return Err(Error::Invalid("fallocate of 0 bytes"));
        }
        let end = off.checked_add(len).filter(|&e| e <= MAX_FILE_SIZE);
        let end = end.ok_or(Error::FileTooBig { max: MAX_FILE_SIZE })?;
        let step = self.atomic_blocks() - 1;
        let mut idx = off / BLOCK as u64;
        let last = (end - 1) / BLOCK as u64;
        while idx <= last {
            if self.try_huge(ino, idx * BLOCK as u64, end, None)? {
                idx += HUGE_BLOCKS;
                continue;
            }
            // steps end at 2 MiB boundaries, so the next span can still get a huge block
            let stop = (idx + step)
                .min(last + 1)
                .min((idx / HUGE_BLOCKS + 1) * HUGE_BLOCKS);
            let mut tx = self.tx();
            let mut node = tx.inode(ino);
            let new_end = end.min(stop * BLOCK as u64);
            self.zero_gap(&mut tx, &node, new_end);
            for i in idx..stop {
                if tree::lookup(&tx, node.root, node.height, i) == 0 {
                    let b = tx.new_block(&[])?;
                    tree::set(&mut tx, &mut node, i, b)?;
                }
            }
            node.size = node.size.max(new_end);
            node.ctime = now();
            tx.put_inode(ino, &node);
            self.commit(tx)?;
            idx = stop;
        }
        Ok(())
    }
}
