//! Where a file's data and holes lie: `lseek`'s SEEK_DATA and SEEK_HOLE, answered from the
//! radix tree (only the subtrees that exist are read, so a hole of any size costs nothing).
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
}
