//! Reflink: a range of one regular file made a range of another (or of itself) by pointing the
//! destination's tree at the source's blocks, so nothing is copied until either side writes
//! there (`FICLONE`, `FICLONERANGE`; `copy_file_range` shares whole blocks the same way: `copy.rs`).
//!
//! The rules are Linux's for `FICLONERANGE` (`generic_remap_file_range_prep`): both offsets
//! and the length are multiples of 4 KiB, except that a range that ends at the source's end of
//! file may end there; a destination range that would then end inside the destination's size is
//! refused (the bytes past the source's end in its last block would show). Length 0 clones to
//! the source's end. Overlapping ranges of one file are refused.
//!
//! The work goes in steps of at most [`Fs::clone_step`] blocks, each one transaction under both
//! inodes' locks: the source's holes become holes in the destination (punched first, their own
//! transaction), then each source block is pointed at from the destination, the destination's
//! old blocks there released. The pointers a block gains are counted once the step is durable
//! (`Tx::share_after`); a crash in the middle leaves a prefix of the range cloned, as
//! copy_file_range's does. A source's 2 MiB block is shared block by block: the destination
//! points at each of its 4 KiB blocks (a copy-on-write of one splits the source's pointer into a
//! node of 512, `tree::set`). Files with data checksums share nothing (their sums cover a file's
//! bytes, not a block's): refused as `NotSupported`, so callers copy instead.

use crate::error::{Error, Result};
use crate::falloc::Falloc;
use crate::inode::Inode;
use crate::layout::BLOCK;
use crate::{attr::now, tree, Fs, Kind};
use pmkit_media::Media;

const B: u64 = BLOCK as u64;
/// Tries of one step while writers keep changing the holes under it.
const MAX_TRIES: usize = 16;

/// `n`, if a regular file whose blocks may be shared.
fn clonable(n: Inode) -> Result<Inode> {
    match n.kind() {
        Some(Kind::File) => {}
        Some(Kind::Dir) => return Err(Error::IsDir),
        _ => return Err(Error::Invalid("a clone of a non-regular file")),
    }
    if n.sums() {
        return Err(Error::NotSupported(
            "a file with data checksums shares no blocks (copy instead)",
        ));
    }
    Ok(n)
}

/// The runs of file blocks in `first..first + blocks` that `present` (in order) leaves out.
fn holes_in(present: &[(u64, u64)], first: u64, blocks: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut next = first;
    for &idx in present.iter().map(|(i, _)| i).chain(&[first + blocks]) {
        if idx > next {
            out.push((next, idx));
        }
        next = idx + 1;
    }
    out
}

impl<M: Media> Fs<M> {
    /// Blocks one clone step (or one unsharing transaction) points at: as many as an atomic
    /// write's transaction holds.
    pub(crate) fn clone_step(&self) -> u64 {
        self.atomic_blocks()
    }

    /// Make `len` bytes of regular file `dst` at `dst_off` share the blocks of `src` at
    /// `src_off` (0: up to the source's end); the bytes cloned. See the module docs for the
    /// rules; `NotSupported` where blocks cannot be shared (a format before 8, data checksums).
    pub fn clone_range(
        &self,
        src: u64,
        src_off: u64,
        dst: u64,
        dst_off: u64,
        len: u64,
    ) -> Result<u64> {
        if !self.geo.shares() {
            return Err(Error::NotSupported(
                "reflink needs a format 8 pool (this one is older: copy instead)",
            ));
        }
        crate::watch::note(|| crate::watch::Change::Data(dst));
        let count = self.clone_count(src, src_off, dst, dst_off, len)?;
        // As a write: the destination's file capabilities go first.
        self.kill_capability(dst)?;
        let step = self.clone_step() * B;
        let mut done = 0;
        while done < count {
            let n = (count - done).min(step);
            self.clone_piece(src, src_off + done, dst, dst_off + done, n)?;
            done += n;
        }
        Ok(count)
    }

    /// The bytes a clone of `len` at these offsets covers, after Linux's checks.
    fn clone_count(&self, src: u64, src_off: u64, dst: u64, dst_off: u64, len: u64) -> Result<u64> {
        let (s, d) = (self.clonable(src)?, self.clonable(dst)?);
        if !src_off.is_multiple_of(B) || !dst_off.is_multiple_of(B) {
            return Err(Error::Invalid(
                "a clone's offsets must be multiples of 4 KiB",
            ));
        }
        if src_off >= s.size {
            return match len {
                0 if src_off == s.size => Ok(0),
                _ => Err(Error::Invalid("a clone's source range starts past its end")),
            };
        }
        let count = match len {
            0 => s.size - src_off,
            _ => len.min(s.size - src_off),
        };
        let at_eof = src_off + count == s.size;
        if !at_eof && !count.is_multiple_of(B) {
            return Err(Error::Invalid(
                "a clone's length must be a multiple of 4 KiB",
            ));
        }
        let end = dst_off
            .checked_add(count)
            .filter(|&e| e <= crate::layout::MAX_FILE_SIZE)
            .ok_or(Error::FileTooBig {
                max: crate::layout::MAX_FILE_SIZE,
            })?;
        if !count.is_multiple_of(B) && end < d.size {
            return Err(Error::Invalid(
                "a clone that ends at the source's end inside the destination's size",
            ));
        }
        let whole = count.next_multiple_of(B);
        if src == dst && src_off < dst_off + whole && dst_off < src_off + whole {
            return Err(Error::Invalid("overlapping ranges of one file"));
        }
        Ok(count)
    }

    /// Regular file `ino`, live, whose blocks may be shared.
    fn clonable(&self, ino: u64) -> Result<Inode> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        clonable(self.live(ino)?)
    }

    /// One step: `n` bytes (at most `clone_step` blocks) from `src_off` to `dst_off`. The
    /// source's holes are punched in the destination first (their own transactions, outside
    /// the locks); then, under both inodes' locks, the step is taken only if the source's holes
    /// are still those and the destination's are punched still: else a writer changed either
    /// file meanwhile, and the step starts again.
    fn clone_piece(&self, src: u64, src_off: u64, dst: u64, dst_off: u64, n: u64) -> Result<()> {
        let (first, blocks) = (src_off / B, n.div_ceil(B));
        let to = |idx: u64| dst_off / B + (idx - first);
        for _ in 0..MAX_TRIES {
            // Punched past the destination's size too, where it may own blocks (preallocated
            // for appends) holding old bytes the new size would cover.
            let holes = holes_in(
                &self.src_blocks(&self.inode(src), first, blocks),
                first,
                blocks,
            );
            for &(a, z) in &holes {
                self.fallocate_mode(dst, to(a) * B, (z - a) * B, Falloc::PunchHole)?;
            }
            let _ns = self.ns.read();
            let (_a, _b) = self.lock_pair(src, dst);
            let (s, d) = (clonable(self.live(src)?)?, clonable(self.live(dst)?)?);
            let present = self.src_blocks(&s, first, blocks);
            let punched = holes.iter().all(|&(a, z)| {
                tree::present(&self.pm, d.root, d.height, (to(a), to(z)), 1).is_empty()
            });
            if !punched || holes_in(&present, first, blocks) != holes {
                continue;
            }
            self.check_pins_for_range(src, (src_off, src_off + blocks * B))?;
            self.check_pins_for_range(dst, (dst_off, dst_off + blocks * B))?;
            // Bytes past the destination's size that the new size will cover: its own, zeroed.
            self.unshare(dst, d.size.min(dst_off), dst_off)?;
            let mut tx = self.tx();
            let mut node = tx.inode(dst);
            self.zero_gap(&mut tx, &node, dst_off);
            for (idx, b) in present {
                // A block of the source's 2 MiB block too: the destination points at it alone.
                tx.share_after.push(b);
                let old = tree::set(&mut tx, &mut node, to(idx), b)?;
                if old != 0 {
                    tx.free_after.push(old);
                }
            }
            let t = now();
            node.size = node.size.max(dst_off + n);
            (node.mtime, node.ctime) = (t, t);
            // The bytes an append's record vouched for may have changed (`tail.rs`).
            node.tail = 0;
            tx.put_inode(dst, &node);
            return self.commit(tx);
        }
        Err(Error::Busy(
            "the files changed under the clone at every try: clone again",
        ))
    }

    /// The source's blocks for file blocks `first..first + blocks`.
    fn src_blocks(&self, s: &Inode, first: u64, blocks: u64) -> Vec<(u64, u64)> {
        let range = (first, first + blocks);
        tree::present(&self.pm, s.root, s.height, range, usize::MAX)
    }

    /// The locks of two inodes (one, when they share a stripe), in a fixed order.
    fn lock_pair(
        &self,
        a: u64,
        b: u64,
    ) -> (
        parking_lot::MutexGuard<'_, ()>,
        Option<parking_lot::MutexGuard<'_, ()>>,
    ) {
        let (x, y) = (self.stripe(a), self.stripe(b));
        if std::ptr::eq(x, y) {
            return (x.lock(), None);
        }
        let (first, second) = match (x as *const _ as usize) < (y as *const _ as usize) {
            true => (x, y),
            false => (y, x),
        };
        let g = first.lock();
        (g, Some(second.lock()))
    }
}
