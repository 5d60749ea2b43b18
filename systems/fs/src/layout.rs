//! What is on the media: sizes, the geometry, the superblock and its encoding. No I/O here.

use crate::error::{Error, Result};

pub const BLOCK: usize = 4096;
pub const LINE: usize = 64;
pub const INODE: usize = 128;
pub const FANOUT: u64 = 512;
pub const MAX_HEIGHT: u8 = 3;
pub const NAME_MAX: usize = 255;
pub const SYMLINK_MAX: usize = 4095;
pub const LINK_MAX: u32 = 65_000;
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMKITFS1");
/// 2: the inode's byte 56 holds the one-fence append's tail record and atime moved to 104.
/// 3: the second superblock copy moved from byte 2048 of block 0 to the pool's last block
/// (reserved), so one lost page never loses both; directory records, symlink targets and xattr
/// blocks carry checksums.
/// 4: no tree node a file reaches is empty (a truncate frees a node it empties), so a zeroed
/// node is damage the walk names instead of holes it serves; an inode in use carries a checksum
/// of the fields transactions store (byte 112).
/// 5: the inode table grows: the meta inode's tree holds table blocks beyond the fixed table
/// (`itable.rs`), and the meta inode carries a checksum too.
/// 6: files may carry data checksums (`sums.rs`): inode flag 4, and the meta inode's xattr and
/// rdev fields hold the root and height of the table of block checksums.
/// 7: every pointer word in a tree node carries a check of the pointer and its slot in its
/// unused high bits (`ptr.rs`), so a hole is a non-zero word and a zeroed, flipped or misplaced
/// node is damage the walk names; and an inode's size word carries a check of the size in its
/// high 24 bits (`inode::size_check`); and a directory's inode keeps a count and digest of its
/// records (`dir::tally`) in its `tail` word.
/// 8: a data block of a regular file may have several pointers (reflink, `clone.rs`): the walk
/// counts them instead of naming a block owned twice, and the clean-unmount checkpoint saves the
/// counts (`share.rs`). Nothing else moved, so older pools are read as before and never share.
/// Older pools are still read and written in their own format: a format 3 pool may hold empty
/// nodes that truncates of earlier builds left, so there an empty node is not damage; a format
/// 4 pool's table stays the size mkfs made it.
pub const VERSION: u32 = 8;
/// The oldest format this build reads (and keeps in its layout).
pub const OLDEST_VERSION: u32 = 2;
/// Byte offset of the first superblock copy, in every format.
pub const SB_A: usize = 0;
/// Byte offset of the second copy in format 2 (in block 0 beside the first); in format 3 the
/// slot stays zero.
pub const SB_B_V2: usize = 2048;
/// Byte offsets of the two superblock copies of format 2 (both in block 0).
pub const SB_OFFS: [usize; 2] = [SB_A, SB_B_V2];
pub const SB_LEN: usize = 64;
pub const ROOT_INO: u64 = 1;
/// Slot 0 of the inode table: the meta inode (orphan list head).
pub const META_INO: u64 = 0;
/// Most entries one lane may hold (the journal area stays small).
pub const MAX_LANE_ENTRIES: u32 = 1 << 16;
/// Fewest entries per lane: the largest namespace transaction (a rename over a directory across
/// parents, about 15 entries) with room to spare, and truncates pruning 24 pointers at a time.
pub const MIN_LANE_ENTRIES: u32 = 64;
pub const MAX_LANES: u32 = 64;

/// Where everything is. Derived from four numbers, so the superblock stores those and the
/// derived offsets, and decoding checks that they agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    pub blocks: u64,
    pub lanes: u32,
    pub lane_entries: u32,
    pub inodes: u32,
    pub inode_block: u64,
    pub data_block: u64,
    /// The format version this layout is (`OLDEST_VERSION..=VERSION`): what it keeps where,
    /// and which checks its records can be held to.
    pub format: u32,
}

impl Geometry {
    pub fn new(blocks: u64, lanes: u32, lane_entries: u32, inodes: u32) -> Result<Geometry> {
        if !(1..=MAX_LANES).contains(&lanes) {
            return Err(Error::Invalid("lanes must be 1..=64"));
        }
        if !(MIN_LANE_ENTRIES..=MAX_LANE_ENTRIES).contains(&lane_entries) {
            return Err(Error::Invalid("lane entries must be 64..=65536"));
        }
        if !(2..=1 << 30).contains(&inodes) {
            return Err(Error::Invalid("inodes must be 2..=2^30"));
        }
        let journal = lanes as u64 * (lane_entries as u64 + 1) * LINE as u64;
        let inode_block = 1 + journal.div_ceil(BLOCK as u64);
        let data_block = inode_block + (inodes as u64 * INODE as u64).div_ceil(BLOCK as u64);
        if blocks < data_block + 4 || blocks > 1 << 40 {
            return Err(Error::Invalid("media too small for this geometry"));
        }
        Ok(Geometry {
            blocks,
            lanes,
            lane_entries,
            inodes,
            inode_block,
            data_block,
            format: VERSION,
        })
    }
    /// The same geometry in an older format's layout.
    pub fn at_format(self, format: u32) -> Geometry {
        assert!(
            (OLDEST_VERSION..=VERSION).contains(&format),
            "format {format}"
        );
        Geometry { format, ..self }
    }
    /// The format version this layout is.
    pub fn version(&self) -> u32 {
        self.format
    }
    /// Format 3 and later: the second superblock copy in the last block, which is then not data.
    pub fn far_copy(&self) -> bool {
        self.format >= 3
    }
    /// Format 3 and later: directory records, symlink targets and xattr blocks carry checksums.
    pub fn sums(&self) -> bool {
        self.format >= 3
    }
    /// Format 4 and later: every tree node a file reaches holds a pointer.
    pub fn full_nodes(&self) -> bool {
        self.format >= 4
    }
    /// Format 4 and later: an inode in use carries the checksum of its fields
    /// (`Inode::sealed`).
    pub fn inode_sums(&self) -> bool {
        self.format >= 4
    }
    /// Format 5 and later: the inode table grows (`itable.rs`), and the meta inode is sealed.
    pub fn grows(&self) -> bool {
        self.format >= 5
    }
    /// Format 6 and later: files may carry data checksums (`sums.rs`).
    pub fn data_sums(&self) -> bool {
        self.format >= 6
    }
    /// Format 7 and later: every pointer word in a tree node carries a check (`ptr.rs`).
    pub fn checked_ptrs(&self) -> bool {
        self.format >= 7
    }
    /// Format 7 and later: an inode's size word carries its own check (`inode::size_check`).
    pub fn checked_sizes(&self) -> bool {
        self.format >= 7
    }
    /// Format 7 and later: a directory's inode keeps a count and digest of its records
    /// (`dir::tally`).
    pub fn checked_dirs(&self) -> bool {
        self.format >= 7
    }
    /// Format 8 and later: a regular file's data block may be shared (`share.rs`).
    pub fn shares(&self) -> bool {
        self.format >= 8
    }
    /// Byte offsets of the two superblock copies: block 0 and the last block (format 3), or
    /// both in block 0 (format 2).
    pub fn sb_offs(&self) -> [usize; 2] {
        if self.far_copy() {
            [SB_A, far_copy_off(self.blocks)]
        } else {
            SB_OFFS
        }
    }
    /// The first block past the data area.
    pub fn data_end(&self) -> u64 {
        self.blocks - self.far_copy() as u64
    }
    /// Offset of lane `l`'s header line; its entries follow.
    pub fn lane_off(&self, l: u32) -> usize {
        assert!(l < self.lanes);
        BLOCK + l as usize * (self.lane_entries as usize + 1) * LINE
    }
    /// Byte offset of inode `ino` of the fixed table (`itable::Itable::off` finds every inode).
    pub fn inode_off(&self, ino: u64) -> usize {
        assert!(
            ino < self.inodes as u64,
            "inode {ino} out of the fixed table"
        );
        self.inode_block as usize * BLOCK + ino as usize * INODE
    }
    pub fn is_data(&self, b: u64) -> bool {
        b >= self.data_block && b < self.data_end()
    }
    pub fn data_blocks(&self) -> u64 {
        self.data_end() - self.data_block
    }
}

/// Byte offset of format 3's second superblock copy on media of `blocks` blocks: its last block.
pub fn far_copy_off(blocks: u64) -> usize {
    debug_assert!(blocks >= 2);
    (blocks as usize - 1) * BLOCK
}

/// Where each field of a superblock copy lies: one line, the CRC32C of the rest last.
mod sb {
    pub(super) const MAGIC_AT: usize = 0;
    pub(super) const VERSION_AT: usize = 8;
    pub(super) const LANES: usize = 12;
    pub(super) const BLOCKS: usize = 16;
    pub(super) const LANE_ENTRIES: usize = 24;
    pub(super) const INODES: usize = 28;
    pub(super) const INODE_BLOCK: usize = 32;
    pub(super) const DATA_BLOCK: usize = 40;
    pub(super) const MOUNT_GEN: usize = 48;
    pub(super) const CLEAN: usize = 56;
    pub(super) const CRC: usize = 60;
}
const _: () = assert!(
    sb::VERSION_AT + 4 == sb::LANES
        && sb::LANES + 4 == sb::BLOCKS
        && sb::BLOCKS + 8 == sb::LANE_ENTRIES
        && sb::LANE_ENTRIES + 4 == sb::INODES
        && sb::INODES + 4 == sb::INODE_BLOCK
        && sb::INODE_BLOCK + 8 == sb::DATA_BLOCK
        && sb::DATA_BLOCK + 8 == sb::MOUNT_GEN
        && sb::MOUNT_GEN + 8 == sb::CLEAN
        && sb::CLEAN + 4 == sb::CRC
        && sb::CRC + 4 == SB_LEN
        && SB_LEN == LINE
);

/// `v` into `b` at byte `at` (a record's encoder).
pub(crate) fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

/// The little-endian u64 at byte `at` of `b` (a record's decoder).
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The little-endian u32 at byte `at` of `b`.
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The superblock: geometry plus mount state, one line, CRC32C last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Superblock {
    pub geo: Geometry,
    pub mount_gen: u64,
    pub clean: bool,
}

impl Superblock {
    pub fn encode(&self) -> [u8; SB_LEN] {
        let g = &self.geo;
        let mut b = [0u8; SB_LEN];
        put(&mut b, sb::MAGIC_AT, &MAGIC.to_le_bytes());
        put(&mut b, sb::VERSION_AT, &g.version().to_le_bytes());
        put(&mut b, sb::LANES, &g.lanes.to_le_bytes());
        put(&mut b, sb::BLOCKS, &g.blocks.to_le_bytes());
        put(&mut b, sb::LANE_ENTRIES, &g.lane_entries.to_le_bytes());
        put(&mut b, sb::INODES, &g.inodes.to_le_bytes());
        put(&mut b, sb::INODE_BLOCK, &g.inode_block.to_le_bytes());
        put(&mut b, sb::DATA_BLOCK, &g.data_block.to_le_bytes());
        put(&mut b, sb::MOUNT_GEN, &self.mount_gen.to_le_bytes());
        put(&mut b, sb::CLEAN, &(self.clean as u32).to_le_bytes());
        let crc = crc32c::crc32c(&b[..sb::CRC]);
        put(&mut b, sb::CRC, &crc.to_le_bytes());
        // decode after encode: a copy reads back as itself on media that holds its blocks
        debug_assert!(Superblock::decode(&b, usize::MAX).is_ok_and(|d| d == *self));
        b
    }

    /// Decode one copy; `Err` says why it is not valid. Never panics on any bytes.
    /// The format version of a copy whose magic and checksum hold (`None`: not a valid copy).
    pub fn version(b: &[u8; SB_LEN]) -> Option<u32> {
        let ok =
            u64_at(b, sb::MAGIC_AT) == MAGIC && crc32c::crc32c(&b[..sb::CRC]) == u32_at(b, sb::CRC);
        ok.then(|| u32_at(b, sb::VERSION_AT))
    }

    pub fn decode(b: &[u8; SB_LEN], media_len: usize) -> std::result::Result<Superblock, String> {
        let (u32at, u64at) = (|o| u32_at(b, o), |o| u64_at(b, o));
        if u64at(sb::MAGIC_AT) != MAGIC {
            return Err("bad magic".into());
        }
        if crc32c::crc32c(&b[..sb::CRC]) != u32at(sb::CRC) {
            return Err("checksum mismatch".into());
        }
        let version = u32at(sb::VERSION_AT);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(format!(
                "version {version} (this build reads {OLDEST_VERSION} to {VERSION})"
            ));
        }
        let geo = Geometry::new(
            u64at(sb::BLOCKS),
            u32at(sb::LANES),
            u32at(sb::LANE_ENTRIES),
            u32at(sb::INODES),
        )
        .map_err(|e| format!("bad geometry: {e}"))?;
        let geo = geo.at_format(version);
        if geo.inode_block != u64at(sb::INODE_BLOCK) || geo.data_block != u64at(sb::DATA_BLOCK) {
            return Err("geometry offsets disagree with its sizes".into());
        }
        if geo.blocks.saturating_mul(BLOCK as u64) > media_len as u64 {
            return Err(format!(
                "{} blocks do not fit in {media_len} bytes",
                geo.blocks
            ));
        }
        let clean = match u32at(sb::CLEAN) {
            0 => false,
            1 => true,
            v => return Err(format!("bad clean flag {v}")),
        };
        Ok(Superblock {
            geo,
            mount_gen: u64at(sb::MOUNT_GEN),
            clean,
        })
    }
}

/// Blocks a radix tree of `height` covers.
pub fn tree_cap(height: u8) -> u64 {
    FANOUT.pow(height as u32)
}

/// The largest file size in bytes.
pub const MAX_FILE_SIZE: u64 = FANOUT * FANOUT * FANOUT * BLOCK as u64;
