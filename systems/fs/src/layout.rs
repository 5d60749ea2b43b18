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
pub const VERSION: u32 = 2;
/// Byte offsets of the two superblock copies (both in block 0).
pub const SB_OFFS: [usize; 2] = [0, 2048];
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
        })
    }
    /// Offset of lane `l`'s header line; its entries follow.
    pub fn lane_off(&self, l: u32) -> usize {
        assert!(l < self.lanes);
        BLOCK + l as usize * (self.lane_entries as usize + 1) * LINE
    }
    pub fn inode_off(&self, ino: u64) -> usize {
        assert!(ino < self.inodes as u64, "inode {ino} out of range");
        self.inode_block as usize * BLOCK + ino as usize * INODE
    }
    pub fn is_data(&self, b: u64) -> bool {
        b >= self.data_block && b < self.blocks
    }
    pub fn data_blocks(&self) -> u64 {
        self.blocks - self.data_block
    }
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
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&g.lanes.to_le_bytes());
        b[16..24].copy_from_slice(&g.blocks.to_le_bytes());
        b[24..28].copy_from_slice(&g.lane_entries.to_le_bytes());
        b[28..32].copy_from_slice(&g.inodes.to_le_bytes());
        b[32..40].copy_from_slice(&g.inode_block.to_le_bytes());
        b[40..48].copy_from_slice(&g.data_block.to_le_bytes());
        b[48..56].copy_from_slice(&self.mount_gen.to_le_bytes());
        b[56..60].copy_from_slice(&(self.clean as u32).to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode one copy; `Err` says why it is not valid. Never panics on any bytes.
    /// The format version of a copy whose magic and checksum hold (`None`: not a valid copy).
    pub fn version(b: &[u8; SB_LEN]) -> Option<u32> {
        let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let ok = b[..8] == MAGIC.to_le_bytes() && crc32c::crc32c(&b[..60]) == u32at(60);
        ok.then(|| u32at(8))
    }

    pub fn decode(b: &[u8; SB_LEN], media_len: usize) -> std::result::Result<Superblock, String> {
        let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if u64at(0) != MAGIC {
            return Err("bad magic".into());
        }
        if crc32c::crc32c(&b[..60]) != u32at(60) {
            return Err("checksum mismatch".into());
        }
        if u32at(8) != VERSION {
            return Err(format!("version {} (this build reads {VERSION})", u32at(8)));
        }
        let geo = Geometry::new(u64at(16), u32at(12), u32at(24), u32at(28))
            .map_err(|e| format!("bad geometry: {e}"))?;
        if geo.inode_block != u64at(32) || geo.data_block != u64at(40) {
            return Err("geometry offsets disagree with its sizes".into());
        }
        if geo.blocks.saturating_mul(BLOCK as u64) > media_len as u64 {
            return Err(format!(
                "{} blocks do not fit in {media_len} bytes",
                geo.blocks
            ));
        }
        let clean = match u32at(56) {
            0 => false,
            1 => true,
            v => return Err(format!("bad clean flag {v}")),
        };
        Ok(Superblock {
            geo,
            mount_gen: u64at(48),
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
