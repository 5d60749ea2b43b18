//! Where a file's data and holes lie: `lseek`'s SEEK_DATA and SEEK_HOLE, and FIEMAP's extents,
//! answered from the radix tree (only the subtrees that exist are read, so a hole of any size
//! costs nothing).
//!
//! A file block the tree holds counts as data, whatever it contains: a block allocated ahead of
//! the size (`prealloc`) and since covered by it reads as zeros but is data here, as an
//! unwritten extent may be on other file systems; POSIX lets a file system report holes as
//! data, never data as a hole.

use crate::error::{Error, Result};
use crate::layout::BLOCK;
use crate::tree;
use crate::{Fs, Kind};
use pmkit_media::Media;

/// What to seek to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seek {
    /// The first byte at or after the offset that lies in data (SEEK_DATA).
    Data,
    /// The first byte at or after the offset that lies in a hole; the size counts as one
    /// (SEEK_HOLE).
    Hole,
}

/// File blocks asked of the tree at a time while looking for a hole.
const BATCH: usize = 512;

/// A run of a file's data: FIEMAP's unit (`FS_IOC_FIEMAP`). Byte offsets; whole blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Extent {
    /// Where it starts in the file.
    pub logical: u64,
    /// Where it starts on the media (the pool's byte offset).
    pub physical: u64,
    pub len: u64,
    /// It holds the file's last block of data.
    pub last: bool,
    /// Its blocks are shared with another file or another place in this one (reflink:
    /// FIEMAP's `FIEMAP_EXTENT_SHARED`).
    pub shared: bool,
}

impl<M: Media> Fs<M> {
    /// SEEK_DATA or SEEK_HOLE from byte `off` of regular file `ino`: the offset found, or
    /// `Error::NoDevice` (ENXIO) when `off` is at or past the size, or no data follows it.
    pub fn seek(&self, ino: u64, off: u64, to: Seek) -> Result<u64> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        if n.kind() != Some(Kind::File) {
            return Err(Error::Invalid(
                "SEEK_DATA or SEEK_HOLE on a non-regular file",
            ));
        }
        let blk = BLOCK as u64;
        if off >= n.size {
            return Err(Error::NoDevice(
                "the offset is at or past the end of the file",
            ));
        }
        let (first, end) = (off / blk, n.size.div_ceil(blk));
        let found = match to {
            Seek::Data => tree::present(&self.pm, n.root, n.height, (first, end), 1)
                .first()
                .map(|&(i, _)| (i * blk).max(off))
                .ok_or(Error::NoDevice("no data after the offset"))?,
            Seek::Hole => {
                let mut next = first;
                'blocks: while next < end {
                    let got = tree::present(&self.pm, n.root, n.height, (next, end), BATCH);
                    for &(i, _) in &got {
                        if i != next {
                            break 'blocks;
                        }
                        next += 1;
                    }
                    if got.len() < BATCH {
                        break;
                    }
                }
                (next * blk).max(off).min(n.size)
            }
        };
        debug_assert!(
            found >= off && found <= n.size,
            "{found} outside {off}..={}",
            n.size
        );
        Ok(found)
    }

    /// The extents of regular file `ino`'s data that meet bytes `[off, off + len)`, in order,
    /// each a run of blocks contiguous in the file and on the media (FIEMAP). Blocks past the
    /// size (preallocation) are not data here.
    pub fn extents(&self, ino: u64, off: u64, len: u64) -> Result<Vec<Extent>> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        if n.kind() != Some(Kind::File) {
            return Err(Error::Invalid("FIEMAP of a non-regular file"));
        }
        let blk = BLOCK as u64;
        let size_end = n.size.div_ceil(blk);
        let (first, end) = (
            off / blk,
            off.saturating_add(len).div_ceil(blk).min(size_end),
        );
        let mut out: Vec<Extent> = Vec::new();
        let mut next = first;
        while next < end {
            let got = tree::present(&self.pm, n.root, n.height, (next, end), BATCH);
            let shared: Vec<bool> = match self.any_shared() {
                true => {
                    let a = self.alloc.lock();
                    got.iter().map(|&(_, b)| a.shares.extra(b) != 0).collect()
                }
                false => vec![false; got.len()],
            };
            for (&(i, b), &shared) in got.iter().zip(&shared) {
                match out.last_mut() {
                    Some(e)
                        if e.logical + e.len == i * blk
                            && e.physical + e.len == b * blk
                            && e.shared == shared =>
                    {
                        e.len += blk
                    }
                    _ => out.push(Extent {
                        logical: i * blk,
                        physical: b * blk,
                        len: blk,
                        last: false,
                        shared,
                    }),
                }
            }
            match got.last() {
                Some(&(i, _)) if got.len() == BATCH => next = i + 1,
                _ => break,
            }
        }
        if let Some(e) = out.last_mut() {
            // the last of the file's data, when nothing past it up to the size is
            let past = (e.logical + e.len) / blk;
            e.last = tree::present(&self.pm, n.root, n.height, (past, size_end), 1).is_empty();
        }
        Ok(out)
    }
}
