//! The on-media superblock and the device layout it describes.
//!
//! ```text
//! byte 0        superblock slot A (128 bytes)
//! byte 2048     superblock slot B (128 bytes)
//! byte 4096     CRC32C table, 4 bytes per block, rounded up to 4 KiB  (only with --checksum)
//! data_off      blocks 0..nblocks, block_size bytes each              (data_off is 4 KiB aligned)
//! ```
//!
//! The atomic layout (`--atomic`, feature bit 2; see atomic.rs) replaces the CRC table with a
//! block map and adds spare physical blocks:
//!
//! ```text
//! byte 4096     map: one 8-byte entry per logical block, rounded up to 4 KiB
//! data_off      physical blocks 0..nblocks+spare
//! ```
//!
//! Crash safety: an update never overwrites the slot holding the current superblock. It writes
//! the other slot with `seq + 1`, flushes and fences it; a reader takes the valid slot (magic,
//! version, CRC32C) with the higher `seq`. A crash mid-update leaves the torn slot invalid and
//! the older one in force.

use crate::error::{BlkError, Result};
use pmkit_media::Protect;
use pmkit_media::{Domain, Fence, Flush, Media, WriteScheme};
use serde::Serialize;

pub const MAGIC: [u8; 8] = *b"PMKITBLK";
pub const VERSION: u32 = 1;
pub const PAGE: u64 = 4096;
/// Bytes of one encoded slot (two cache lines).
pub const SLOT_LEN: usize = 128;
pub const SLOT_OFF: [u64; 2] = [0, 2048];
/// Smallest device: this many blocks.
pub const MIN_BLOCKS: u64 = 8;

pub const FEATURE_CHECKSUM: u64 = 1;
/// Logical blocks reach physical blocks through a map; every block write is all-or-nothing.
pub const FEATURE_ATOMIC: u64 = 2;
/// Every feature bit this version understands; open refuses a superblock with others.
pub const KNOWN_FEATURES: u64 = FEATURE_CHECKSUM | FEATURE_ATOMIC;
const CRC_AT: usize = SLOT_LEN - 4;

// The two slots are apart within the first page, and neither crosses into the other.
const _: () = assert!(SLOT_OFF[0] + SLOT_LEN as u64 <= SLOT_OFF[1]);
const _: () = assert!(SLOT_OFF[1] + SLOT_LEN as u64 <= PAGE);
// A slot is whole cache lines, so flushing it never flushes a neighbour's bytes half-written.
const _: () = assert!(SLOT_LEN.is_multiple_of(pmkit_media::LINE));
const _: () = assert!((SLOT_OFF[1] as usize).is_multiple_of(pmkit_media::LINE));
/// Slots with a generation (`seq`) this high are corrupt: no device makes 2^63 updates, and
/// below it every update can add one without overflowing.
pub const MAX_SEQ: u64 = 1 << 63;
/// Atomic layout: spare physical blocks are 1/32 of the device, within these bounds.
pub const MIN_SPARE: u64 = 8;
pub const MAX_SPARE: u64 = 256;
/// Atomic layout: bytes per map entry, and the most physical blocks an entry can name (its
/// low 32 bits are the physical block number; see atomic.rs).
pub const MAP_ENTRY: u64 = 8;
pub const MAX_PHYS_BLOCKS: u64 = u32::MAX as u64;

/// Where things are on the media.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub block_size: u32,
    pub nblocks: u64,
    /// Offset of the CRC table (0 when checksums are off).
    pub csum_off: u64,
    pub data_off: u64,
    pub region_len: u64,
    /// Feature bits ([`FEATURE_CHECKSUM`], [`FEATURE_ATOMIC`]).
    pub features: u64,
    /// Atomic layout: offset of the block map (0 on a plain device).
    pub map_off: u64,
    /// Atomic layout: physical blocks beyond `nblocks`, the free pool (0 on a plain device).
    pub spare: u64,
}

/// `TooSmall` when `short`: the region cannot hold the smallest device of this block size.
fn too_small(short: bool, len: u64, block_size: u32, min: u64) -> Result<()> {
    if short {
        return Err(BlkError::TooSmall {
            len,
            block_size,
            min,
        });
    }
    Ok(())
}

impl Layout {
    /// The largest device that fits in `region_len` bytes, plain or atomic.
    pub fn compute(
        region_len: u64,
        block_size: u32,
        checksum: bool,
        atomic: bool,
    ) -> Result<Layout> {
        if block_size != 512 && block_size != 4096 {
            return Err(BlkError::BadOption(format!(
                "block size must be 512 or 4096, got {block_size}"
            )));
        }
        if atomic {
            return Self::compute_atomic(region_len, block_size, checksum);
        }
        Self::compute_plain(region_len, block_size, checksum)
    }

    fn compute_plain(region_len: u64, block_size: u32, checksum: bool) -> Result<Layout> {
        let bs = block_size as u64;
        let min = PAGE + if checksum { PAGE } else { 0 } + MIN_BLOCKS * bs;
        too_small(region_len < min, region_len, block_size, min)?;
        let avail = region_len - PAGE;
        let (mut n, table) = if checksum {
            let mut n = avail / (bs + 4);
            // The table is rounded up to a page, which may cost a few blocks. Checked: a
            // region_len near u64::MAX (read from a slot) must not overflow.
            let fits = |n: u64| {
                PAGE.checked_add((n * 4).div_ceil(PAGE) * PAGE)
                    .and_then(|x| x.checked_add(n * bs))
                    .is_some_and(|need| need <= region_len)
            };
            while !fits(n) {
                n -= 1;
            }
            (n, (n * 4).div_ceil(PAGE) * PAGE)
        } else {
            (avail / bs, 0)
        };
        let data_off = PAGE + table;
        n = n.min((region_len - data_off) / bs);
        assert!(n >= MIN_BLOCKS && data_off + n * bs <= region_len);
        Ok(Layout {
            block_size,
            nblocks: n,
            csum_off: if checksum { PAGE } else { 0 },
            data_off,
            region_len,
            features: if checksum { FEATURE_CHECKSUM } else { 0 },
            map_off: 0,
            spare: 0,
        })
    }

    /// Atomic layout: superblock page, map (8 bytes per logical block, page-rounded), then
    /// `nblocks + spare` physical blocks. CRCs (with checksums on) live in the map entries.
    fn compute_atomic(region_len: u64, block_size: u32, checksum: bool) -> Result<Layout> {
        let bs = block_size as u64;
        let min = 2 * PAGE + (MIN_BLOCKS + MIN_SPARE) * bs;
        too_small(region_len < min, region_len, block_size, min)?;
        let avail = region_len - PAGE;
        // Depends on the region and block size only, so decode can recompute it.
        let spare = (avail / bs / 32).clamp(MIN_SPARE, MAX_SPARE);
        let mut n = (avail - spare * bs) / (bs + MAP_ENTRY);
        let map_bytes = |n: u64| (n * MAP_ENTRY).div_ceil(PAGE) * PAGE;
        // Checked, as in compute_plain.
        let fits = |n: u64| {
            PAGE.checked_add(map_bytes(n))
                .and_then(|x| x.checked_add((n + spare) * bs))
                .is_some_and(|need| need <= region_len)
        };
        while n > 0 && !fits(n) {
            n -= 1;
        }
        too_small(n < MIN_BLOCKS, region_len, block_size, min)?;
        if n + spare > MAX_PHYS_BLOCKS {
            return Err(BlkError::BadOption(format!(
                "an atomic device holds at most {MAX_PHYS_BLOCKS} physical blocks of {block_size} bytes; \
                 {region_len} bytes would need {}: use a smaller size or larger blocks",
                n + spare
            )));
        }
        let data_off = PAGE + map_bytes(n);
        assert!(data_off + (n + spare) * bs <= region_len);
        Ok(Layout {
            block_size,
            nblocks: n,
            csum_off: 0,
            data_off,
            region_len,
            features: FEATURE_ATOMIC | if checksum { FEATURE_CHECKSUM } else { 0 },
            map_off: PAGE,
            spare,
        })
    }

    pub fn checksum(&self) -> bool {
        self.features & FEATURE_CHECKSUM != 0
    }

    /// Whether blocks are reached through the map (atomic block writes).
    #[inline]
    pub fn atomic(&self) -> bool {
        self.features & FEATURE_ATOMIC != 0
    }

    /// Physical blocks (logical blocks plus spares; equal to `nblocks` on a plain device).
    pub fn phys_blocks(&self) -> u64 {
        self.nblocks + self.spare
    }

    /// Media offset of physical block `p` (atomic layout).
    #[inline]
    pub fn phys_off(&self, p: u64) -> usize {
        debug_assert!(self.atomic() && p < self.phys_blocks());
        (self.data_off + p * self.block_size as u64) as usize
    }

    /// Media offset of logical block `b`'s map entry (atomic layout).
    #[inline]
    pub fn map_entry_off(&self, b: u64) -> usize {
        debug_assert!(self.atomic() && b < self.nblocks);
        (self.map_off + b * MAP_ENTRY) as usize
    }

    /// Offset the striped request locks are keyed by: where the block lives on a plain device,
    /// its logical offset on an atomic one (it has no fixed place there).
    #[inline]
    pub fn lock_off(&self, b: u64) -> usize {
        if self.atomic() {
            (b * self.block_size as u64) as usize
        } else {
            self.block_off(b)
        }
    }

    pub fn capacity(&self) -> u64 {
        self.nblocks * self.block_size as u64
    }

    /// Media offset of block `b` (plain layout).
    #[inline]
    pub fn block_off(&self, b: u64) -> usize {
        debug_assert!(!self.atomic() && b < self.nblocks);
        (self.data_off + b * self.block_size as u64) as usize
    }

    /// Media offset of block `b`'s CRC.
    #[inline]
    pub fn crc_off(&self, b: u64) -> usize {
        debug_assert!(self.checksum() && b < self.nblocks);
        (self.csum_off + 4 * b) as usize
    }
}

/// The decoded superblock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Superblock {
    pub version: u32,
    #[serde(serialize_with = "ser_uuid")]
    pub uuid: [u8; 16],
    pub layout: Layout,
    /// Generation: bumped by every update.
    pub seq: u64,
    /// Set by a clean close, cleared while the device is open.
    pub clean: bool,
    /// Protection and write scheme of the last open (information only).
    pub last_protect: Option<Protect>,
    pub last_write: Option<WriteScheme>,
    pub created_unix: u64,
    /// How many times the device has been opened read-write.
    pub opens: u64,
}

fn ser_uuid<S: serde::Serializer>(u: &[u8; 16], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&uuid::Uuid::from_bytes(*u).to_string())
}

impl Superblock {
    pub fn new(layout: Layout) -> Superblock {
        let created_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Superblock {
            version: VERSION,
            uuid: *uuid::Uuid::new_v4().as_bytes(),
            layout,
            seq: 1,
            clean: true,
            last_protect: None,
            last_write: None,
            created_unix,
            opens: 0,
        }
    }

    pub fn uuid_string(&self) -> String {
        uuid::Uuid::from_bytes(self.uuid).to_string()
    }

    pub fn encode(&self) -> [u8; SLOT_LEN] {
        let mut b = [0u8; SLOT_LEN];
        let l = &self.layout;
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&l.block_size.to_le_bytes());
        b[16..32].copy_from_slice(&self.uuid);
        b[32..40].copy_from_slice(&l.region_len.to_le_bytes());
        b[40..48].copy_from_slice(&l.nblocks.to_le_bytes());
        b[48..56].copy_from_slice(&l.data_off.to_le_bytes());
        b[56..64].copy_from_slice(&l.csum_off.to_le_bytes());
        b[64..72].copy_from_slice(&l.features.to_le_bytes());
        b[72..80].copy_from_slice(&self.seq.to_le_bytes());
        b[80..84].copy_from_slice(&(self.clean as u32).to_le_bytes());
        b[84] = self.last_protect.map_or(0xff, |p| p.code());
        b[85] = self.last_write.map_or(0xff, |w| {
            WriteScheme::ALL.iter().position(|x| *x == w).unwrap() as u8
        });
        b[88..96].copy_from_slice(&self.created_unix.to_le_bytes());
        b[96..104].copy_from_slice(&self.opens.to_le_bytes());
        b[104..112].copy_from_slice(&l.map_off.to_le_bytes());
        b[112..120].copy_from_slice(&l.spare.to_le_bytes());
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode one slot, checking magic, version, checksum and the layout's internal consistency.
    pub fn decode(b: &[u8; SLOT_LEN]) -> std::result::Result<Superblock, SlotError> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        if b[0..8] != MAGIC {
            return Err(SlotError::Magic(b[0..8].try_into().unwrap()));
        }
        let stored = u32_at(CRC_AT);
        let computed = crc32c::crc32c(&b[..CRC_AT]);
        if stored != computed {
            return Err(SlotError::Crc { stored, computed });
        }
        let version = u32_at(8);
        if version != VERSION {
            return Err(SlotError::Version(version));
        }
        let features = u64_at(64);
        if features & !KNOWN_FEATURES != 0 {
            return Err(SlotError::Features(features));
        }
        let seq = u64_at(72);
        if seq >= MAX_SEQ {
            return Err(SlotError::Seq(seq));
        }
        let layout = Layout {
            block_size: u32_at(12),
            region_len: u64_at(32),
            nblocks: u64_at(40),
            data_off: u64_at(48),
            csum_off: u64_at(56),
            features,
            map_off: u64_at(104),
            spare: u64_at(112),
        };
        let expect = Layout::compute(
            layout.region_len,
            layout.block_size,
            features & FEATURE_CHECKSUM != 0,
            features & FEATURE_ATOMIC != 0,
        )
        .map_err(|e| SlotError::Layout(e.to_string()))?;
        if expect != layout {
            return Err(SlotError::Layout(format!(
                "fields disagree with each other: {layout:?}, features {features:#x}"
            )));
        }
        Ok(Superblock {
            version,
            uuid: b[16..32].try_into().unwrap(),
            layout,
            seq,
            clean: u32_at(80) == 1,
            last_protect: Protect::from_code(b[84]),
            last_write: WriteScheme::ALL.get(b[85] as usize).copied(),
            created_unix: u64_at(88),
            opens: u64_at(96),
        })
    }
}

/// Why one superblock slot is unusable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum SlotError {
    Magic([u8; 8]),
    Crc {
        stored: u32,
        computed: u32,
    },
    Version(u32),
    /// Feature bits this version does not know (a device made by a newer pmkit).
    Features(u64),
    Layout(String),
    /// A generation no device reaches ([`MAX_SEQ`] or more): the next update could not count on.
    Seq(u64),
}

impl std::fmt::Display for SlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotError::Magic(m) => write!(f, "wrong magic {m:02x?}"),
            SlotError::Crc { stored, computed } => {
                write!(
                    f,
                    "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
                )
            }
            SlotError::Version(v) => write!(f, "unsupported version {v}"),
            SlotError::Features(x) => write!(
                f,
                "unknown feature bits {:#x} (this pmkit knows {KNOWN_FEATURES:#x})",
                x & !KNOWN_FEATURES
            ),
            SlotError::Layout(s) => write!(f, "inconsistent layout: {s}"),
            SlotError::Seq(s) => write!(f, "generation {s} is past any a device reaches"),
        }
    }
}

/// Both slots as found on media, and the one in force.
#[derive(Debug, Clone, Serialize)]
pub struct Found {
    pub current: Superblock,
    /// Index (0 = A, 1 = B) of the slot in force.
    pub slot: usize,
    /// What was wrong with each slot, if anything.
    pub slot_errors: [Option<SlotError>; 2],
}

/// Read both slots from `m` and pick the valid one with the higher generation.
pub fn read<M: Media>(m: &M) -> Result<Found> {
    if (m.len() as u64) < PAGE {
        return Err(BlkError::TooSmall {
            len: m.len() as u64,
            block_size: 0,
            min: PAGE,
        });
    }
    let mut found: [Option<Superblock>; 2] = [None, None];
    let mut errs: [Option<SlotError>; 2] = [None, None];
    for i in 0..2 {
        let mut b = [0u8; SLOT_LEN];
        m.read(SLOT_OFF[i] as usize, &mut b);
        match Superblock::decode(&b) {
            Ok(s) => found[i] = Some(s),
            // Never fall back to the other slot past a feature we do not understand: the
            // device's format may have changed under it.
            Err(SlotError::Features(f)) => {
                return Err(BlkError::UnknownFeatures {
                    found: f,
                    unknown: f & !KNOWN_FEATURES,
                    known: KNOWN_FEATURES,
                })
            }
            Err(e) => errs[i] = Some(e),
        }
    }
    let slot = match (&found[0], &found[1]) {
        (Some(a), Some(b)) => {
            if a.seq >= b.seq {
                0
            } else {
                1
            }
        }
        (Some(_), None) => 0,
        (None, Some(_)) => 1,
        (None, None) => {
            let (e0, e1) = (errs[0].clone().unwrap(), errs[1].clone().unwrap());
            return Err(match (&e0, &e1) {
                (SlotError::Magic(m), SlotError::Magic(_)) => BlkError::BadMagic { found: *m },
                (SlotError::Version(v), _) | (_, SlotError::Version(v)) => BlkError::BadVersion {
                    found: *v,
                    supported: VERSION,
                },
                _ => BlkError::BadSuperblock {
                    why: format!("slot A: {e0}; slot B: {e1}"),
                },
            });
        }
    };
    let current = found[slot].take().unwrap();
    if current.layout.region_len != m.len() as u64 {
        return Err(BlkError::SizeMismatch {
            expected: current.layout.region_len,
            actual: m.len() as u64,
        });
    }
    Ok(Found {
        current,
        slot,
        slot_errors: errs,
    })
}

/// Write `sb` into slot `slot` and make it durable (write, flush, fence). The caller opens
/// whatever write window the protection mode needs around this.
pub fn write_slot<M: Media>(m: &M, slot: usize, sb: &Superblock) {
    let off = SLOT_OFF[slot] as usize;
    let bytes = sb.encode();
    // Pair assertion (assert what is written decodes to what was meant, right before it is
    // made durable): a slot that would not read back must never reach the media.
    debug_assert!(
        Superblock::decode(&bytes).is_ok_and(|back| back.seq == sb.seq && back.layout == sb.layout),
        "superblock slot {slot} does not decode to what was encoded"
    );
    m.write(off, &bytes);
    if m.domain() == Domain::Adr {
        m.flush(off, SLOT_LEN, Flush::best());
    }
    m.fence(Fence::Sfence);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_fit_their_region() {
        for len in [64 << 10, (1 << 20) + 4096, 1 << 30, 3 << 20] {
            for bs in [512, 4096] {
                for ck in [false, true] {
                    let l = Layout::compute(len, bs, ck, false).unwrap();
                    assert!(l.data_off + l.capacity() <= len);
                    assert_eq!(l.data_off % PAGE, 0);
                    if ck {
                        assert!(l.csum_off + 4 * l.nblocks <= l.data_off);
                    }
                    // Not wasteful: one more block would not fit.
                    let more = Layout {
                        nblocks: l.nblocks + 1,
                        ..l
                    };
                    let table = if ck {
                        (more.nblocks * 4).div_ceil(PAGE) * PAGE
                    } else {
                        0
                    };
                    assert!(PAGE + table + more.capacity() > len, "{len} {bs} {ck}");
                }
            }
        }
        assert!(matches!(
            Layout::compute(8192, 4096, false, false),
            Err(BlkError::TooSmall { .. })
        ));
    }

    #[test]
    fn encode_decode_round_trip_and_corruption_is_caught() {
        let sb = Superblock::new(Layout::compute(1 << 20, 512, true, false).unwrap());
        let enc = sb.encode();
        assert_eq!(Superblock::decode(&enc).unwrap(), sb);
        for i in [0usize, 9, 40, 72, 100, 125] {
            let mut bad = enc;
            bad[i] ^= 0x10;
            assert!(
                Superblock::decode(&bad).is_err(),
                "flip at {i} must be caught"
            );
        }
    }

    #[test]
    fn atomic_layouts_fit_and_round_trip() {
        for len in [28 << 10, 64 << 10, (1 << 20) + 4096, 1 << 30, 3 << 20] {
            for bs in [512u32, 4096] {
                for ck in [false, true] {
                    let Ok(l) = Layout::compute(len, bs, ck, true) else {
                        let min = 2 * PAGE + (MIN_BLOCKS + MIN_SPARE) * bs as u64;
                        assert!(len < min, "{len} {bs}");
                        continue;
                    };
                    let b = bs as u64;
                    assert!(l.atomic() && l.checksum() == ck && l.csum_off == 0);
                    assert!((MIN_SPARE..=MAX_SPARE).contains(&l.spare));
                    assert!(l.map_off + l.nblocks * MAP_ENTRY <= l.data_off);
                    assert_eq!(l.data_off % PAGE, 0);
                    assert!(l.data_off + l.phys_blocks() * b <= len);
                    // Not wasteful: one more logical block (and its map entry) would not fit.
                    let more = l.nblocks + 1;
                    assert!(
                        PAGE + (more * MAP_ENTRY).div_ceil(PAGE) * PAGE + (more + l.spare) * b
                            > len,
                        "{len} {bs} {ck}"
                    );
                    let sb = Superblock::new(l);
                    assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
                }
            }
        }
    }

    /// Found by fuzzing: a slot with a valid CRC and a region length near u64::MAX made the
    /// layout arithmetic overflow (a panic in debug builds) instead of a typed error.
    #[test]
    fn a_region_length_near_u64_max_is_refused_not_overflowed() {
        for len in [u64::MAX, u64::MAX - 4096, u64::MAX / 2 + 1] {
            for (bs, ck, at) in [(512, true, false), (4096, false, true), (512, true, true)] {
                if let Ok(l) = Layout::compute(len, bs, ck, at) {
                    let end = l.phys_blocks() * bs as u64 + l.data_off;
                    assert!(end <= len, "{l:?}");
                }
            }
        }
        let mut sb = Superblock::new(Layout::compute(1 << 20, 512, true, true).unwrap());
        sb.layout.region_len = u64::MAX;
        assert!(matches!(
            Superblock::decode(&sb.encode()),
            Err(SlotError::Layout(_))
        ));
    }

    /// Found by fuzzing: a CRC-valid slot with seq u64::MAX was accepted and opening the
    /// device overflowed computing the next generation (and `opens` likewise).
    #[test]
    fn a_generation_no_device_reaches_is_refused() {
        let mut sb = Superblock::new(Layout::compute(1 << 20, 512, false, false).unwrap());
        sb.seq = u64::MAX;
        assert_eq!(
            Superblock::decode(&sb.encode()),
            Err(SlotError::Seq(u64::MAX))
        );
        sb.seq = MAX_SEQ - 1;
        sb.opens = u64::MAX;
        assert_eq!(Superblock::decode(&sb.encode()), Ok(sb.clone()));
        let m = std::sync::Arc::new(pmkit_media::crashsim::CrashSim::new(1 << 20));
        m.write(0, &sb.encode());
        let engine = crate::EngineOptions {
            protect: Some(Protect::None),
            write: WriteScheme::ALL
                .into_iter()
                .find(|w| w.available())
                .unwrap(),
            ..Default::default()
        };
        // Opening writes the next generation: the last one a slot may hold is refused, never
        // written as a slot that would read back as corrupt.
        let err = crate::Device::open(std::sync::Arc::clone(&m), &engine).err();
        assert!(
            matches!(err, Some(BlkError::BadSuperblock { .. })),
            "{err:?}"
        );
        sb.seq = MAX_SEQ - 2;
        m.write(0, &sb.encode());
        let dev = crate::Device::open(m, &engine).unwrap();
        assert_eq!(dev.info().superblock.seq, MAX_SEQ - 1);
        assert_eq!(dev.info().superblock.opens, u64::MAX);
    }

    #[test]
    fn unknown_feature_bits_are_refused() {
        let mut sb = Superblock::new(Layout::compute(1 << 20, 4096, false, true).unwrap());
        sb.layout.features |= 1 << 9;
        let enc = sb.encode();
        assert_eq!(
            Superblock::decode(&enc),
            Err(SlotError::Features(FEATURE_ATOMIC | 1 << 9))
        );
        let m = pmkit_media::crashsim::CrashSim::new(1 << 20);
        m.write(0, &enc);
        let e = read(&m).unwrap_err();
        assert!(
            matches!(e, BlkError::UnknownFeatures { unknown: 0x200, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("newer pmkit"), "{e}");
    }
}
