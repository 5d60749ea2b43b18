//! File data: write (in place or copy-on-write), fallocate's allocation, and freeing unlinked
//! inodes (truncates: `truncate.rs`).

use crate::error::{Error, Result};
use crate::inode::{size_word, Inode, Kind, CTIME, MTIME, SIZE_MTIME, TAIL};
use crate::layout::{BLOCK, LINE, MAX_FILE_SIZE};
use crate::tail::{self, Tail};
use crate::tree;
use crate::tree::HUGE_BLOCKS;
use crate::tx::Tx;
use crate::{attr::now, Fs};
use pmkit_media::Media;

/// Blocks per in-place write transaction.
const CHUNK: u64 = 16;
/// Bytes of a huge block.
const HUGE_BYTES: u64 = HUGE_BLOCKS * BLOCK as u64;

/// What one attempt at a write did.
enum Attempt {
    Wrote(usize),
    /// Nothing: the file has capabilities, to remove first (outside the inode's lock).
    CapabilityFirst,
}

impl<M: Media> Fs<M> {
    /// Blocks one all-or-nothing write (or fallocate step) may touch.
    pub(crate) fn atomic_blocks(&self) -> u64 {
        ((self.geo.lane_entries as u64 - 16) * 2).min(256)
    }

    /// The largest write an atomic file (`Fs::set_atomic`, `DataMode::Atomic`) accepts, in bytes.
    pub fn max_atomic_write(&self) -> u64 {
        (self.atomic_blocks() - 1) * BLOCK as u64
    }

    /// Write `data` at `off`; durable when it returns; all-or-nothing when the file is atomic
    /// (see `DataMode`).
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize> {
        crate::watch::note(|| crate::watch::Change::Data(ino));
        self.bound_prealloc(ino);
        let mut reclaimed = false;
        loop {
            match self.write_once(ino, off, data) {
                Ok(Attempt::Wrote(n)) => return Ok(n),
                // As Linux, a write drops file capabilities: outside the locks, then again.
                Ok(Attempt::CapabilityFirst) => self.kill_capability(ino)?,
                // Space held as other files' preallocation is free space: give it back and
                // retry (the pieces written before are written again, with the same bytes).
                Err(Error::NoSpace) if !reclaimed && self.reclaim_all_prealloc() > 0 => {
                    reclaimed = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn write_once(&self, ino: u64, off: u64, data: &[u8]) -> Result<Attempt> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let node = self.live(ino)?;
        match node.kind() {
            Some(Kind::File) => {}
            Some(Kind::Dir) => return Err(Error::IsDir),
            _ => return Err(Error::Invalid("write to a non-regular file")),
        }
        // Only a file with xattrs pays for the look (most have none).
        if node.xattr != 0 && self.has_capability(&node)? {
            return Ok(Attempt::CapabilityFirst);
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE);
        let end = end.ok_or(Error::FileTooBig { max: MAX_FILE_SIZE })?;
        if data.is_empty() {
            return Ok(Attempt::Wrote(0));
        }
        // Shared blocks it would store into (the range, and past the size the bytes a growth
        // zeroes) become its own first (`share.rs`).
        let node = self.own_range(ino, node, (off.min(node.size), end))?;
        if node.atomic() {
            if data.len() as u64 > self.max_atomic_write() {
                return Err(Error::TooBig {
                    len: data.len() as u64,
                    max: self.max_atomic_write(),
                });
            }
            self.write_tx(ino, off, data, true)?;
            return Ok(Attempt::Wrote(data.len()));
        }
        if node.sums() {
            // Copy-on-write (`sums.rs`), in steps one transaction holds (as an atomic file's
            // largest write).
            let step = self.max_atomic_write();
            let mut pos = off;
            while pos < end {
                let next = (pos + step).min(end);
                self.write_tx(
                    ino,
                    pos,
                    &data[(pos - off) as usize..(next - off) as usize],
                    true,
                )?;
                pos = next;
            }
            return Ok(Attempt::Wrote(data.len()));
        }
        let mut pos = off;
        let hinted = node.huge();
        // the inode as read by `live`, until a step changes it
        let mut known = Some(node);
        while pos < end {
            let piece = &data[(pos - off) as usize..];
            if let Some(next) = self.try_huge(ino, pos, end, Some(piece), hinted)? {
                pos = next;
                known = None;
                continue;
            }
            let next = ((pos / BLOCK as u64 / CHUNK + 1) * CHUNK * BLOCK as u64).min(end);
            let piece = &data[(pos - off) as usize..(next - off) as usize];
            let node = known.take().unwrap_or_else(|| self.inode(ino));
            self.write_chunk(ino, node, pos, piece)?;
            pos = next;
        }
        Ok(Attempt::Wrote(data.len()))
    }

    /// Give the 2 MiB-aligned span of the file holding `pos` a huge block, if the file has
    /// nothing there and either the file asks for huge blocks (`hinted`: any write or fallocate
    /// into the span) or `[pos, end)` covers the whole span from its start. One transaction: the
    /// bytes `[pos, min(end, span end))` are `data` (zeros for `None`: fallocate), the size
    /// grows to cover them, and of the rest of the block only what the new size covers is
    /// zeroed (streamed into the unreachable block before the commit, so a crash leaves the
    /// span empty or whole); the part beyond the size is left as it was, under the rule that
    /// bytes beyond the size are zeroed before a size covers them. Returns where the span's part
    /// of the range ends; `None`: not eligible, or no whole 2 MiB chunk is free (the caller
    /// falls back to 4 KiB blocks).
    fn try_huge(
        &self,
        ino: u64,
        pos: u64,
        end: u64,
        data: Option<&[u8]>,
        hinted: bool,
    ) -> Result<Option<u64>> {
        let start = pos / HUGE_BYTES * HUGE_BYTES;
        let stop = start + HUGE_BYTES;
        if self.opts.small_blocks || (!hinted && (start != pos || end < stop)) {
            return Ok(None);
        }
        let idx = start / BLOCK as u64;
        let node = self.inode(ino);
        if !tree::span_empty(&self.pm, node.root, node.height, idx) {
            return Ok(None);
        }
        let wend = end.min(stop);
        let mut tx = self.tx();
        let mut node = tx.inode(ino);
        // blocks the file owns beyond its size before the span (the span itself is empty)
        self.zero_gap(&mut tx, &node, start);
        let size = node.size.max(wend);
        let mut content = vec![0u8; (size.min(stop) - start) as usize];
        if let Some(d) = data {
            let at = (pos - start) as usize;
            content[at..at + (wend - pos) as usize].copy_from_slice(&d[..(wend - pos) as usize]);
        }
        let Some(run) = tx.new_huge(&content) else {
            return Ok(None);
        };
        tree::set_huge(&mut tx, &mut node, idx, run)?;
        let t = now();
        node.size = size;
        node.ctime = t;
        if data.is_some() {
            node.mtime = t;
        }
        tx.put_inode(ino, &node);
        self.commit(tx)?;
        Ok(Some(wend))
    }

    /// Zero what the file owns from the old size up to `upto`: bytes beyond the size are
    /// undefined (the tail of the last block, preallocated blocks, an append cut by a crash),
    /// so they are zeroed before a size covers them. Invisible until then, so a crash either
    /// way is too.
    pub(crate) fn zero_gap(&self, tx: &mut Tx<'_, M>, node: &Inode, upto: u64) {
        for (at, len) in gap(&*tx, node, upto) {
            tx.write_fresh(at, &vec![0u8; len]);
        }
    }

    /// An in-place write of at most `CHUNK` blocks; `node` is the inode as it is now.
    fn write_chunk(&self, ino: u64, node: Inode, off: u64, data: &[u8]) -> Result<()> {
        let end = off + data.len() as u64;
        let (first, last) = (off / BLOCK as u64, (end - 1) / BLOCK as u64);
        // one lookup per block, kept for the stores (at most CHUNK + 1 blocks)
        let mut blocks = [0u64; CHUNK as usize + 1];
        for (i, b) in (first..=last).zip(blocks.iter_mut()) {
            *b = tree::lookup(&self.pm, node.root, node.height, i);
            if *b == 0 {
                return self.write_tx(ino, off, data, false);
            }
        }
        self.pm.check()?;
        self.write_fast(ino, node, off, data, &blocks[..(last - first + 1) as usize]);
        self.pm.check()
    }

    /// A write as one transaction: blocks a write needs (or every block, copy-on-write).
    pub(crate) fn write_tx(&self, ino: u64, off: u64, data: &[u8], cow: bool) -> Result<()> {
        let end = off + data.len() as u64;
        let (first, last) = (off / BLOCK as u64, (end - 1) / BLOCK as u64);
        let mut tx = self.tx();
        let mut node = tx.inode(ino);
        // a summed file's blocks change only by copy (`sums.rs`)
        let cow = cow || node.sums();
        let new_size = node.size.max(end);
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
            if node.sums() {
                let sum = crate::sums::block_sum(&content, crate::sums::valid(new_size, idx));
                self.put_fresh_sum(&mut tx, new, sum)?;
            }
            tree::set(&mut tx, &mut node, idx, new)?;
        }
        // Not on a file's first write: most files are written once and closed (untar, cp),
        // and a window would cost its pointers now and a second transaction to trim at close.
        // The second append that needs a block starts the window.
        if !cow && end > node.size && node.size > 0 {
            self.prealloc(&mut tx, &mut node, last);
            self.prealloc_note(ino);
        }
        let t = now();
        node.size = new_size;
        (node.mtime, node.ctime) = (t, t);
        tx.put_inode(ino, &node);
        self.commit(tx)
    }

    /// Every block is allocated: stream the data in place, fence, then publish size and mtime
    /// with one 16-byte store (no journal).
    /// `blocks`: the media block of each file block the write touches, in order.
    fn write_fast(&self, ino: u64, node: Inode, off: u64, data: &[u8], blocks: &[u64]) {
        let end = off + data.len() as u64;
        let at = self.itable.off(ino);
        assert!(at.is_multiple_of(LINE), "inode {ino} not line-aligned");
        // An append of under 64 KiB at the end: one fence (`tail.rs`). Not in `kernel` mode,
        // where every store is a `pwrite` durable at return: there the fences are cheap and a
        // record would be one more call.
        let one_fence =
            off == node.size && end - off <= tail::MAX_LEN && !self.pm.stores_are_calls();
        // a record left from the last one-fence append (cleared below where it would lie)
        let mut record = node.tail != 0;
        if record && !one_fence {
            // The record vouches for the bytes it covers: it goes before any of them change.
            let t = Tail::decode(node.tail);
            if t.applies(node.size) && off < node.size && end > node.size - t.len as u64 {
                self.pm.persist_u64(at + TAIL, 0);
                record = false;
            }
        }
        // The data, streamed block by block; with `crc`, the CRC32C of all of it, computed in
        // the same loop (`Pm::write_nt_crc`).
        // Blocks adjacent on the media go in one store: where every store is a system call
        // (`kernel` protection), a 1 MiB write into sequential blocks is a few calls, not 256.
        let stream = |mut crc: Option<u32>| {
            let first = off / BLOCK as u64;
            let mut put = |at: usize, from: usize, n: usize| {
                let piece = &data[from..from + n];
                match crc {
                    Some(c) => crc = Some(self.pm.write_nt_crc(at, piece, c)),
                    None => self.pm.write_nt(at, piece),
                }
            };
            // (media offset, offset in `data`, length) of the run not yet stored
            let mut run: Option<(usize, usize, usize)> = None;
            let mut pos = off;
            while pos < end {
                let idx = pos / BLOCK as u64;
                let in_blk = (pos % BLOCK as u64) as usize;
                let n = ((BLOCK - in_blk) as u64).min(end - pos) as usize;
                let at = blocks[(idx - first) as usize] as usize * BLOCK + in_blk;
                run = match run {
                    Some((ra, rf, rn)) if ra + rn == at => Some((ra, rf, rn + n)),
                    other => {
                        if let Some((ra, rf, rn)) = other {
                            put(ra, rf, rn);
                        }
                        Some((at, (pos - off) as usize, n))
                    }
                };
                pos += n as u64;
            }
            if let Some((ra, rf, rn)) = run {
                put(ra, rf, rn);
            }
            crc
        };
        let t = now();
        if one_fence {
            // The data with its CRC, then the record, the size and the mtime in the inode's
            // line (record before size: `tail.rs`), flushed, and one fence for all of it.
            // Nothing before the fence may be a locked instruction (it would wait for the
            // streamed lines like a fence): 8-byte stores, not a 16-byte cmpxchg16b; the
            // counters take none (`tally.rs`).
            let crc = stream(Some(0)).expect("asked for a CRC");
            let rec = match self.pm.faults.skip_tail_record {
                false => Tail::new(end, end - off, crc).encode(),
                true => 0,
            };
            // POSIX: a write changes mtime and ctime; stored only when the coarse clock moved.
            let size = size_word(self.geo.checked_sizes(), end);
            let mut words = [(at + TAIL, rec), (at + SIZE_MTIME, size), (0, 0), (0, 0)];
            let mut n = 2;
            for (field, old) in [(MTIME, node.mtime), (CTIME, node.ctime)] {
                if old != t {
                    words[n] = (at + field, t as u64);
                    n += 1;
                }
            }
            self.pm.store_words(at, &words[..n]);
            self.pm.flush(at, LINE);
            self.pm.fence();
            return;
        }
        for (at, len) in gap(&self.pm, &node, off) {
            // bytes beyond the end of the file: zero them before the size covers them
            self.pm.write(at, &vec![0u8; len]);
            self.pm.flush(at, len);
        }
        stream(None);
        if end <= node.size {
            // An overwrite: nothing is published, so the times need no order against the
            // bytes (after a crash either may be old); one fence for all. Both times change
            // (POSIX), stored only when the coarse clock moved.
            let mut stored = false;
            for (field, old) in [(MTIME, node.mtime), (CTIME, node.ctime)] {
                if old != t {
                    self.pm.store_u64(at + field, t as u64);
                    stored = true;
                }
            }
            if stored {
                self.pm.flush(at, LINE);
            }
            self.pm.fence();
            return;
        }
        // A write that grows the file: the bytes before the size that publishes them.
        self.pm.fence();
        if record {
            // before the size in the same line: an old record never meets a new size
            self.pm.store_u64(at + TAIL, 0);
        }
        if node.ctime != t {
            // in the line the size's store flushes and fences below
            self.pm.store_u64(at + CTIME, t as u64);
        }
        let size = size_word(self.geo.checked_sizes(), end);
        self.pm
            .persist_u128(at + SIZE_MTIME, (t as u128) << 64 | size as u128);
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
        self.fallocate_mode(ino, off, len, crate::Falloc::Allocate)
    }

    /// The regular file `ino` and the end of `[off, off + len)`, checked for fallocate (caller
    /// holds the namespace read lock and the stripe).
    pub(crate) fn falloc_range(&self, ino: u64, off: u64, len: u64) -> Result<(Inode, u64)> {
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
        Ok((node, end.ok_or(Error::FileTooBig { max: MAX_FILE_SIZE })?))
    }

    /// Allocate zeroed blocks for the holes of `[off, end)`, extending the size to `end` unless
    /// `keep_size` (caller holds the namespace read lock and the stripe).
    pub(crate) fn allocate(
        &self,
        ino: u64,
        node: &Inode,
        (off, end): (u64, u64),
        keep_size: bool,
    ) -> Result<()> {
        let step = self.atomic_blocks() - 1;
        let mut idx = off / BLOCK as u64;
        let last = (end - 1) / BLOCK as u64;
        while idx <= last {
            let pos = (idx * BLOCK as u64).max(off);
            // (a huge block sets the size it covers: not for a size kept)
            let huge = match keep_size || node.sums() {
                false => self.try_huge(ino, pos, end, None, node.huge())?,
                true => None,
            };
            if let Some(next) = huge {
                idx = next.div_ceil(BLOCK as u64);
                continue;
            }
            // steps end at 2 MiB boundaries, so the next span can still get a huge block
            let stop = (idx + step)
                .min(last + 1)
                .min((idx / HUGE_BLOCKS + 1) * HUGE_BLOCKS);
            let mut tx = self.tx();
            let mut node = tx.inode(ino);
            let new_end = end.min(stop * BLOCK as u64);
            if !keep_size {
                self.zero_gap(&mut tx, &node, new_end);
            }
            for i in idx..stop {
                if tree::lookup(&tx, node.root, node.height, i) == 0 {
                    let b = tx.new_block(&[])?;
                    if node.sums() {
                        self.put_fresh_sum(&mut tx, b, crate::sums::block_sum(&[0; BLOCK], 0))?;
                    }
                    tree::set(&mut tx, &mut node, i, b)?;
                }
            }
            if !keep_size {
                node.size = node.size.max(new_end);
            }
            node.ctime = now();
            tx.put_inode(ino, &node);
            self.commit(tx)?;
            idx = stop;
        }
        Ok(())
    }
}

/// The media byte ranges of what the file owns in `[size, upto)` (bytes beyond the size).
fn gap(r: &impl tree::Reader, node: &Inode, upto: u64) -> Vec<(usize, usize)> {
    if upto <= node.size {
        return Vec::new();
    }
    let blk = BLOCK as u64;
    let span = (node.size / blk, upto.div_ceil(blk));
    tree::present(r, node.root, node.height, span, usize::MAX)
        .into_iter()
        .filter_map(|(i, b)| {
            let a = node.size.max(i * blk) - i * blk;
            let e = upto.min((i + 1) * blk) - i * blk;
            (e > a).then_some((b as usize * BLOCK + a as usize, (e - a) as usize))
        })
        .collect()
}
