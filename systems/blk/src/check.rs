//! `check`: verify a device that is not open: its superblock, its layout against the media, and
//! (with checksums on) every block against its CRC. Read-only unless asked to mark it clean.

use crate::error::{BlkError, Result};
use crate::map::{self, MapScan};
use crate::superblock::{self, Superblock};
use pmkit_media::Media;
use serde::Serialize;

/// Blocks listed by name in a report (the count is always exact).
pub const MAX_LISTED: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The device is damaged or needs attention: `check` fails.
    Error,
    /// Worth knowing, harmless (e.g. the spare superblock slot torn by an interrupted update).
    Warning,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub what: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub superblock: Option<Superblock>,
    pub slot_in_force: Option<char>,
    pub findings: Vec<Finding>,
    pub blocks_checked: u64,
    pub bad_blocks: u64,
    pub bad_block_list: Vec<u64>,
    pub marked_clean: bool,
    /// Atomic devices: what the scan of the map found (entries, free blocks, problems).
    pub map: Option<MapScan>,
}

impl CheckReport {
    /// No errors (warnings allowed).
    pub fn is_clean(&self) -> bool {
        self.findings.iter().all(|f| f.severity != Severity::Error)
    }

    fn error(&mut self, what: String) {
        self.findings.push(Finding {
            severity: Severity::Error,
            what,
        });
    }
}

/// Check the device on `m`. Problems are findings in the report; `Err` only when the media
/// itself cannot be read.
pub fn check<M: Media>(m: &M, mark_clean: bool) -> Result<CheckReport> {
    let mut r = CheckReport {
        superblock: None,
        slot_in_force: None,
        findings: vec![],
        blocks_checked: 0,
        bad_blocks: 0,
        bad_block_list: vec![],
        marked_clean: false,
        map: None,
    };
    let found = match superblock::read(m) {
        Ok(f) => f,
        Err(
            e @ (BlkError::BadMagic { .. }
            | BlkError::BadVersion { .. }
            | BlkError::BadSuperblock { .. }
            | BlkError::SizeMismatch { .. }
            | BlkError::UnknownFeatures { .. }
            | BlkError::TooSmall { .. }),
        ) => {
            r.error(e.to_string());
            return Ok(r);
        }
        Err(e) => return Err(e),
    };
    let sb = found.current.clone();
    r.slot_in_force = Some(['A', 'B'][found.slot]);
    if let Some(e) = &found.slot_errors[1 - found.slot] {
        r.findings.push(Finding {
            severity: Severity::Warning,
            what: format!(
                "spare superblock slot is unusable ({e}); an interrupted update leaves this"
            ),
        });
    }
    let l = sb.layout;
    if l.atomic() {
        check_map(m, &l, &mut r);
    } else if l.checksum() {
        let bs = l.block_size as usize;
        let chunk_blocks = (1 << 20) / bs;
        let mut data = vec![0u8; chunk_blocks * bs];
        let mut crcs = vec![0u8; chunk_blocks * 4];
        let mut b = 0u64;
        while b < l.nblocks {
            let n = ((l.nblocks - b) as usize).min(chunk_blocks);
            m.read(l.block_off(b), &mut data[..n * bs]);
            m.read(l.crc_off(b), &mut crcs[..n * 4]);
            for k in 0..n {
                let stored = u32::from_le_bytes(crcs[k * 4..k * 4 + 4].try_into().unwrap());
                if crc32c::crc32c(&data[k * bs..(k + 1) * bs]) != stored {
                    r.bad_blocks += 1;
                    if r.bad_block_list.len() < MAX_LISTED {
                        r.bad_block_list.push(b + k as u64);
                    }
                }
            }
            r.blocks_checked += n as u64;
            b += n as u64;
        }
        if r.bad_blocks > 0 {
            r.error(format!(
                "{} block(s) fail their checksum (first: {:?}); reads of them return I/O errors until rewritten",
                r.bad_blocks,
                &r.bad_block_list[..r.bad_block_list.len().min(10)]
            ));
        }
    }
    if !sb.clean && l.atomic() && r.is_clean() && !mark_clean {
        // Nothing to accept: no block can be torn, and the map is consistent.
        r.findings.push(Finding {
            severity: Severity::Warning,
            what:
                "the device was not shut down cleanly; harmless on an atomic device: every block \
                   holds one whole write and the map is consistent (the next open marks it in use)"
                    .into(),
        });
    } else if !sb.clean {
        let others_ok = r.is_clean();
        if mark_clean && others_ok {
            let mut next = sb.clone();
            next.clean = true;
            next.seq += 1;
            superblock::write_slot(m, 1 - found.slot, &next);
            r.marked_clean = true;
            r.findings.push(Finding {
                severity: Severity::Warning,
                what: "the device had not been shut down cleanly; marked clean as asked".into(),
            });
            r.superblock = Some(next);
            return Ok(r);
        }
        r.error(if l.checksum() {
            "the device was not shut down cleanly (every block's checksum was verified; run with --mark-clean to clear this)".into()
        } else {
            "the device was not shut down cleanly: blocks being written at the crash may be torn, and without \
             --checksum that cannot be detected (run with --mark-clean to accept it)"
                .into()
        });
    }
    r.superblock = Some(sb);
    Ok(r)
}

/// Atomic layout: every map entry names a distinct physical block in range, the free blocks
/// (those named by none) are exactly the spares, and (with checksums) every mapped block
/// matches the CRC in its entry.
fn check_map<M: Media>(m: &M, l: &crate::superblock::Layout, r: &mut CheckReport) {
    let scan = map::scan_map(m, l);
    if scan.problems > 0 {
        r.error(format!(
            "the block map has {} problem(s): {}",
            scan.problems,
            scan.examples.join("; ")
        ));
    } else if scan.free_blocks != l.spare {
        r.error(format!(
            "free blocks are not complete: {} physical blocks are unmapped, the layout has {} spares",
            scan.free_blocks, l.spare
        ));
    }
    if l.checksum() && scan.problems == 0 {
        let bs = l.block_size as usize;
        let mut data = vec![0u8; bs];
        let mut entry = [0u8; 8];
        for b in 0..l.nblocks {
            m.read(l.map_entry_off(b), &mut entry);
            let e = u64::from_le_bytes(entry);
            m.read(l.phys_off(map::entry_pba(e)), &mut data);
            if crc32c::crc32c(&data) != map::entry_crc(e) {
                r.bad_blocks += 1;
                if r.bad_block_list.len() < MAX_LISTED {
                    r.bad_block_list.push(b);
                }
            }
            r.blocks_checked += 1;
        }
        if r.bad_blocks > 0 {
            r.error(format!(
                "{} block(s) fail the checksum in their map entry (first: {:?}); reads of them return I/O errors until rewritten",
                r.bad_blocks,
                &r.bad_block_list[..r.bad_block_list.len().min(10)]
            ));
        }
    }
    r.map = Some(scan);
}
