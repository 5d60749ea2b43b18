//! The atomic map's on-media format: one 8-byte little-endian entry per logical block, bits
//! 0..32 the physical block number, bits 32..64 the CRC32C of the block's data with
//! `--checksum` (else zero), and the read-only scan that derives the free blocks from it. A
//! leaf: the write path (`atomic.rs`), recovery at open and `check` all read the map through it.

use crate::superblock::{Layout, MAP_ENTRY};
use pmkit_media::Media;
use serde::Serialize;

/// Map entries read at once by a scan.
const SCAN_CHUNK: usize = 4096;
/// Problems a scan describes in words (all are counted).
const MAX_EXAMPLES: usize = 10;

const _: () = assert!(MAP_ENTRY == 8, "a map entry is one atomic 8-byte word");

#[inline]
pub fn entry(pba: u64, crc: u32) -> u64 {
    debug_assert!(pba <= u32::MAX as u64);
    pba | (crc as u64) << 32
}

#[inline]
pub fn entry_pba(e: u64) -> u64 {
    e & u32::MAX as u64
}

#[inline]
pub fn entry_crc(e: u64) -> u32 {
    (e >> 32) as u32
}

/// What a scan of the map found: the free blocks (unmapped) and any inconsistency.
#[derive(Debug, Clone, Serialize)]
pub struct MapScan {
    /// Map entries read (= logical blocks).
    pub entries: u64,
    /// Physical blocks named by no entry. Complete and exact when `problems == 0`: then it
    /// holds exactly `spare` blocks.
    #[serde(skip)]
    pub free: Vec<u32>,
    /// Every entry as read (for the DRAM copy of the map).
    #[serde(skip)]
    pub map: Vec<u64>,
    pub free_blocks: u64,
    /// Entries naming a block past the end, a block another entry names too, or (without
    /// checksums) with CRC bits set.
    pub problems: u64,
    pub examples: Vec<String>,
}

impl MapScan {
    fn problem(&mut self, what: String) {
        self.problems += 1;
        if self.examples.len() < MAX_EXAMPLES {
            self.examples.push(what);
        }
    }
}

/// Read the whole map and derive the free blocks. Read-only. Used by open (recovery) and check.
pub fn scan_map<M: Media>(m: &M, l: &Layout) -> MapScan {
    assert!(l.atomic());
    let nphys = l.phys_blocks();
    // The logical block naming each physical one (u32::MAX: none yet).
    let mut owner = vec![u32::MAX; nphys as usize];
    let mut s = MapScan {
        entries: 0,
        free: vec![],
        map: Vec::with_capacity(l.nblocks as usize),
        free_blocks: 0,
        problems: 0,
        examples: vec![],
    };
    let mut buf = vec![0u8; SCAN_CHUNK * MAP_ENTRY as usize];
    let mut b = 0u64;
    while b < l.nblocks {
        let n = ((l.nblocks - b) as usize).min(SCAN_CHUNK);
        m.read(l.map_entry_off(b), &mut buf[..n * 8]);
        for k in 0..n {
            let e = u64::from_le_bytes(buf[k * 8..k * 8 + 8].try_into().unwrap());
            s.map.push(e);
            let lb = b + k as u64;
            let p = entry_pba(e);
            if p >= nphys {
                s.problem(format!(
                    "block {lb}: map entry {e:#018x} names physical block {p}, past the last ({})",
                    nphys - 1
                ));
                continue;
            }
            if !l.checksum() && entry_crc(e) != 0 {
                s.problem(format!(
                    "block {lb}: map entry {e:#018x} has CRC bits set on a device without checksums"
                ));
            }
            let o = &mut owner[p as usize];
            if *o != u32::MAX {
                let first = *o;
                s.problem(format!(
                    "physical block {p} is mapped twice: by blocks {first} and {lb}"
                ));
            } else {
                *o = lb as u32;
            }
        }
        s.entries += n as u64;
        b += n as u64;
    }
    s.free = (0..nphys as u32)
        .filter(|&p| owner[p as usize] == u32::MAX)
        .collect();
    s.free_blocks = s.free.len() as u64;
    if s.problems == 0 {
        // n distinct in-range entries leave exactly the spares.
        assert_eq!(s.free_blocks, l.spare, "map scan arithmetic");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let e = entry(0xdead_beef, 0x1234_5678);
        assert_eq!((entry_pba(e), entry_crc(e)), (0xdead_beef, 0x1234_5678));
        assert_eq!(entry(7, 0), 7);
    }
}
