//! Growing a pool offline: the media has been made longer (the pool file extended); the
//! superblocks are rewritten for the new block count and the new blocks become free data. The
//! inode table keeps its size. A format 2 pool becomes format 3 on the way: the new last block
//! takes superblock B, and format 2's slot in block 0 is cleared.
//!
//! Crash safety, in order, each step fenced: the checkpoint is cleared (the next mount walks
//! and sizes its allocator from the superblock); copy B is written in the new last block; copy A
//! is rewritten (mount reads A first and finds B where A's geometry puts it, so until A changes
//! the old pool is whole, and after, the new one is); then the old copy B is cleared.

use crate::ckpt;
use crate::error::{Error, Result};
use crate::layout::{Geometry, Superblock, BLOCK, SB_A, SB_B_V2, SB_LEN};
use crate::mount::pick_sb;
use crate::pm::{Faults, Pm};
use pmkit_media::Media;

/// What [`grow`] did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Grown {
    pub blocks_before: u64,
    pub blocks_after: u64,
    pub version_before: u32,
    pub version_after: u32,
}

/// Grow the file system on `media` (not mounted, unmounted clean) to all of its length.
pub fn grow<M: Media>(media: &M) -> Result<Grown> {
    let (sb, repaired) = pick_sb(media)?;
    if repaired || !sb.clean {
        return Err(Error::Invalid(
            "the pool was not unmounted clean (or a superblock copy is bad): mount and unmount \
             it, or run `pmkit fs check POOL --repair`, before growing it",
        ));
    }
    let old = sb.geo;
    let blocks = (media.len() / BLOCK) as u64;
    if blocks <= old.blocks {
        return Err(Error::Invalid(
            "the pool is not longer than its file system: grow the file first (shrinking is \
             not supported)",
        ));
    }
    // Format 2 moves its copy B to the new last block and so becomes format 3; a later format
    // stays as it is (what it holds was written to its rules, not to this build's).
    let geo = Geometry::new(blocks, old.lanes, old.lane_entries, old.inodes)?
        .at_format(old.version().max(3));
    debug_assert!(geo.far_copy() && geo.inode_block == old.inode_block);
    debug_assert!(geo.data_block == old.data_block);
    let pm = Pm::new(media, Faults::default());
    ckpt::clear(&pm);
    let new = Superblock { geo, ..sb };
    let [a, b] = geo.sb_offs();
    for off in [b, a] {
        pm.write(off, &new.encode());
        pm.flush(off, SB_LEN);
        pm.fence();
    }
    // The old copy B: format 3's old last block (now free data), or format 2's slot.
    let old_b = old.sb_offs()[1];
    debug_assert!(old_b == SB_B_V2 || old_b != b);
    assert!(old_b != SB_A);
    pm.write(old_b, &[0u8; SB_LEN]);
    pm.flush(old_b, SB_LEN);
    pm.fence();
    pm.check()?;
    Ok(Grown {
        blocks_before: old.blocks,
        blocks_after: geo.blocks,
        version_before: old.version(),
        version_after: geo.version(),
    })
}
