//! fallocate(2)'s modes beyond plain allocation: keep the size, punch a hole, zero a range.
//! None is all-or-nothing across transactions (neither is Linux's on most file systems): a
//! crash in the middle leaves part of the range done, every part a consistent file.

use crate::error::{Error, Result};
use crate::layout::BLOCK;
use crate::{attr::now, punch, tree, Fs};
use pmkit_media::Media;

/// What an fallocate does to `[off, off + len)`: Linux's `FALLOC_FL_*` modes that PMFS serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Falloc {
    /// Mode 0: allocate zeroed blocks for the holes, growing the size to the range's end.
    Allocate,
    /// `KEEP_SIZE`: allocate, the size unchanged (blocks past it read nothing until it grows).
    KeepSize,
    /// `PUNCH_HOLE | KEEP_SIZE`: free the blocks inside the range and zero the parts of the
    /// blocks at its edges; the size unchanged.
    PunchHole,
    /// `ZERO_RANGE` (`| KEEP_SIZE`): the range reads zeros and is allocated; the size grows to
    /// its end unless `keep_size`.
    ZeroRange { keep_size: bool },
}

impl Falloc {
    /// The mode bits of fallocate(2); `NotSupported` (EOPNOTSUPP) for collapse, insert,
    /// unshare and a punch without KEEP_SIZE (which Linux's VFS refuses with that number too).
    pub fn from_mode(mode: i32) -> Result<Falloc> {
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
        const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
        Ok(match mode {
            0 => Falloc::Allocate,
            KEEP => Falloc::KeepSize,
            m if m == PUNCH | KEEP => Falloc::PunchHole,
            PUNCH => return Err(Error::NotSupported("a hole punch without KEEP_SIZE")),
            ZERO => Falloc::ZeroRange { keep_size: false },
            m if m == ZERO | KEEP => Falloc::ZeroRange { keep_size: true },
            m if m & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE) != 0 => {
                return Err(Error::NotSupported("fallocate collapse and insert ranges"))
            }
            _ => return Err(Error::NotSupported("this fallocate mode")),
        })
    }
}

impl<M: Media> Fs<M> {
    /// fallocate(2) with a mode (see [`Falloc`]).
    pub fn fallocate_mode(&self, ino: u64, off: u64, len: u64, mode: Falloc) -> Result<()> {
        crate::watch::note(|| crate::watch::Change::Data(ino));
        // As Linux: any fallocate drops file capabilities (first, in its own transaction).
        self.kill_capability(ino)?;
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let (node, end) = self.falloc_range(ino, off, len)?;
        // Shared blocks it zeroes in place (the range's edges, and from the size on) become
        // its own first (`share.rs`).
        let node = match self.any_shared() {
            true => {
                let b = BLOCK as u64;
                // The edges are zeroed where the size covers them; past the size, a mode
                // that allocates zeroes what the file owns there (a punch frees it).
                let size = node.size;
                let edges = [
                    (off, off.next_multiple_of(b).min(end).min(size)),
                    ((end / b * b).max(off), end.min(size)),
                ];
                let past = match mode {
                    Falloc::PunchHole => (0, 0),
                    _ => (size, end),
                };
                for (a, z) in edges.into_iter().chain([past]) {
                    self.unshare(ino, a, z)?;
                }
                self.inode(ino)
            }
            false => node,
        };
        match mode {
            Falloc::Allocate => self.allocate(ino, &node, (off, end), false),
            Falloc::KeepSize => self.allocate(ino, &node, (off, end), true),
            Falloc::PunchHole => self.punch(ino, (off, end)),
            Falloc::ZeroRange { keep_size } => {
                self.punch(ino, (off, end))?;
                self.allocate(ino, &self.inode(ino), (off, end), keep_size)
            }
        }
    }

    /// Free the blocks inside `[off, end)` and zero what the size covers of the blocks at its
    /// edges (caller holds the namespace read lock and the stripe). mtime and ctime change.
    fn punch(&self, ino: u64, (off, end): (u64, u64)) -> Result<()> {
        let b = BLOCK as u64;
        let (first, stop) = (off.div_ceil(b), end / b);
        self.check_pins_for_range(ino, (off / b * b, end.div_ceil(b) * b))?;
        // The edges: bytes of blocks that stay, zeroed as a write of zeros would (in place, or
        // copied in an atomic file); holes there stay holes.
        let size = self.inode(ino).size;
        let mut edges = vec![(off, end.min(first * b))];
        if stop >= first {
            edges.push(((stop * b).max(off), end));
        }
        for (a, z) in edges {
            let z = z.min(size);
            let node = self.inode(ino);
            if a < z && tree::lookup(&self.pm, node.root, node.height, a / b) != 0 {
                self.write_tx(
                    ino,
                    a,
                    &vec![0u8; (z - a) as usize],
                    node.atomic() || node.sums(),
                )?;
            }
        }
        // The whole blocks, a budget of pointers per transaction.
        loop {
            let mut tx = self.tx();
            let mut node = tx.inode(ino);
            let done = first >= stop
                || punch::punch(&mut tx, &mut node, (first, stop), self.prune_budget())?;
            let t = now();
            (node.mtime, node.ctime) = (t, t);
            tx.put_inode(ino, &node);
            self.commit(tx)?;
            if done {
                return Ok(());
            }
        }
    }
}
