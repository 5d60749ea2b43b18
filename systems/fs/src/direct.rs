//! Reads a peer makes itself: another process that maps the pool file (a client of the pool's
//! server, docs/fs-sharing.md) reads a file's bytes straight from PM with no call, by a layout
//! the server hands it, a window of the file's media blocks, checked against a free epoch.
//!
//! The epoch is a counter in memory the server shares with its clients ([`FreeEpoch`]): every
//! transaction that frees blocks bumps it before they go back to the allocator, under the
//! allocator's lock, so before any other file can get them. A layout records the epoch it was
//! taken at; a reader loads the epoch, copies the bytes, and loads it again: the same value as
//! the layout's means no block of the layout was freed, so none was written by another file,
//! between the layout and the copy (a seqlock whose writers are the frees). Otherwise the bytes
//! are thrown away and the read goes to the server. Writes in place change bytes without a free:
//! a reader sees them as it would through a read call. The size is the inode's size word, read
//! in place each time (an append by another process shows at once).

use crate::error::{Error, Result};
use crate::inode::Kind;
use crate::layout::BLOCK;
use crate::{tree, Fs};
use pmkit_media::Media;
use std::sync::Arc;

/// Blocks a layout covers at most (4 MiB of the file): windows are aligned to it, so a reader
/// keeps one layout per window it reads.
pub const LAYOUT_BLOCKS: u64 = 1024;

pub use crate::free_epoch::FreeEpoch;

/// A window of a file, as a peer reads it in place.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadLayout {
    /// The file offset of the first block (a multiple of 4 KiB).
    pub start: u64,
    /// The media block of each 4 KiB of the window, 0 for a hole; the window ends at the size
    /// the file had when the layout was taken (rounded up to a block).
    pub blocks: Vec<u64>,
    /// The media byte offset of the inode's size word.
    pub size_at: u64,
    /// Whether the size word carries a check (format 7).
    pub sealed: bool,
    /// The free epoch the layout was taken at.
    pub epoch: u64,
}

/// The size a size word holds, or `None` when its check fails (then the read goes to the
/// server, which reports the damage).
pub fn size_of_word(word: u64, sealed: bool) -> Option<u64> {
    let size = crate::inode::size_of_word(word);
    (crate::inode::size_word(sealed, size) == word).then_some(size)
}

impl<M: Media> Fs<M> {
    /// Count this file system's frees in `epoch` from now on (the pool's server, before it
    /// hands out a layout).
    pub fn set_free_epoch(&self, epoch: Arc<dyn FreeEpoch>) {
        self.alloc.lock().epoch = Some(epoch);
    }

    /// The window of regular file `ino` holding `off` for a peer to read in place (see the
    /// module docs); the read counts as an access (atime). A file with data checksums, or with
    /// a bad block in the window, is `NotSupported`: its reads must go through the checks.
    pub fn read_layout(&self, ino: u64, off: u64) -> Result<ReadLayout> {
        let epoch = {
            let a = self.alloc.lock();
            a.epoch
                .as_ref()
                .map(|e| e.now())
                .ok_or(Error::NotSupported("no free epoch: direct reads are off"))?
        };
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let node = self.live(ino)?;
        if !node.is(Kind::File) {
            return Err(Error::Invalid("only regular files are read in place"));
        }
        if node.sums() {
            return Err(Error::NotSupported("a summed file's reads are checked"));
        }
        let b = BLOCK as u64;
        let start = off / (LAYOUT_BLOCKS * b) * LAYOUT_BLOCKS * b;
        let end = node.size.next_multiple_of(b).min(start + LAYOUT_BLOCKS * b);
        let first = start / b;
        let mut blocks = vec![0; (end.max(start) / b - first) as usize];
        // One visit per node of the range (holes cost nothing), not a descent per block.
        let range = (first, first + blocks.len() as u64);
        for (idx, blk) in tree::present(&self.pm, node.root, node.height, range, usize::MAX) {
            if self.pm.first_bad(blk as usize * BLOCK, BLOCK).is_some() {
                return Err(Error::NotSupported("a bad block: read through the server"));
            }
            blocks[(idx - first) as usize] = blk;
        }
        debug_assert!(blocks.len() as u64 <= LAYOUT_BLOCKS);
        self.accessed(ino, &node);
        Ok(ReadLayout {
            start,
            blocks,
            size_at: (self.itable.off(ino) + crate::inode::SIZE) as u64,
            sealed: self.geo.checked_sizes(),
            epoch,
        })
    }
}
