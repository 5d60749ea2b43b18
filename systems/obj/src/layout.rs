//! On-media layout of a PMO pool: header, Persistent Object Table, PMO Sync Table, object area.
//!
//! ```text
//! 0            header (one page; magic written last)
//! 4096         Persistent Object Table: max_objects entries of 128 bytes
//! sync_off     PMO Sync Table: one intent record (one page)
//! crc_off      page CRC table (checksummed pools only): a CRC32C per 4 KiB page of the area
//! area_off     object area: each object = two slots of `cap` bytes (A at `offset`, B right after)
//! ```
//!
//! All integers are little-endian. Every structure that is not published by a single 8-byte store
//! carries a CRC32C, so a torn or scribbled structure is detected instead of trusted.

use crate::error::{ObjError, Result};

pub const PAGE: usize = 4096;
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMKITOBJ");
pub const VERSION: u32 = 1;
/// Header feature flags (u32 at offset 12; 0 in every pool made before they existed).
/// Object pages carry a CRC32C in the page CRC table between the Sync Table and the area.
pub const FEATURE_CHECKSUM: u32 = 1;
/// Every feature flag this build understands; a pool with another one is refused.
pub const FEATURES_KNOWN: u32 = FEATURE_CHECKSUM;
/// Bytes of one page's entry in the page CRC table.
pub const CRC_ENTRY: usize = 4;

/// Header field offsets.
pub const H_MAGIC: usize = 0;
const H_BODY: std::ops::Range<usize> = 8..80;
const H_CRC: usize = 80;
pub const HEADER_LEN: usize = 88;

/// Object Table entry size and field offsets.
pub const ENTRY: usize = 128;
pub const E_STATE: usize = 0;
const E_BODY: std::ops::Range<usize> = 8..120;
const E_CRC: usize = 120;
/// Where the name starts (after the name length at 36).
const E_NAME: usize = 40;
/// Longest object name in bytes (UTF-8).
pub const MAX_NAME: usize = 80;

/// The published word of an entry: bit 0 live, bit 1 current slot, bits 2.. sync generation.
/// It is the only field that changes after creation, always by one persisted 8-byte store.
pub const LIVE: u64 = 1;
pub fn state_word(generation: u64, slot: u8) -> u64 {
    assert!(generation > 0 && generation < (1 << 62) && slot < 2);
    let word = (generation << 2) | ((slot as u64) << 1) | LIVE;
    debug_assert!(state_slot(word) == slot && state_generation(word) == generation);
    word
}
pub fn state_slot(state: u64) -> u8 {
    ((state >> 1) & 1) as u8
}
pub fn state_generation(state: u64) -> u64 {
    state >> 2
}
/// Whether a published word read from media is one a pool can hold: live, with a generation
/// that is at least 1 and that a later sync can still increment ([`state_word`] takes
/// generations below 2^62).
pub fn state_valid(state: u64) -> bool {
    state & LIVE != 0 && (1..(1 << 62) - 1).contains(&state_generation(state))
}

/// Sync Table: one intent record for multi-object syncs.
pub const SYNC_LEN: usize = PAGE;
/// Word that commits the record: 0 = no intent, else equal to the record's sequence number.
pub const S_COMMIT: usize = 0;
const S_SEQ: usize = 8;
const S_COUNT: usize = 16;
const S_CRC: usize = 20;
/// Where the intent's items start: bytes before it are the Sync Table's head.
pub const S_ITEMS: usize = 32;
/// Most objects one `sync` can publish together (one intent record of 16-byte items).
pub const MAX_SYNC: usize = (SYNC_LEN - S_ITEMS) / 16;

// The relations the encoders and decoders rely on.
const _: () = assert!(HEADER_LEN <= PAGE, "the header fits in its page");
const _: () = assert!(H_BODY.end == H_CRC && H_CRC + 4 <= HEADER_LEN);
const _: () = assert!(
    E_BODY.end == E_CRC && E_CRC + 4 <= ENTRY,
    "the CRC follows the body"
);
const _: () = assert!(
    E_NAME + MAX_NAME == E_CRC,
    "the longest name ends at the CRC"
);
const _: () = assert!(
    ENTRY.is_multiple_of(8),
    "every state word is 8-byte aligned"
);
const _: () = assert!(PAGE.is_multiple_of(ENTRY), "entries never straddle a page");
const _: () = assert!(
    S_ITEMS + 16 * MAX_SYNC <= SYNC_LEN,
    "an intent fits in its page"
);
const _: () = assert!(MAX_SYNC == 254 && MAX_NAME == 80, "as include/pmo.h says");
const _: () = assert!(
    SYNC_LEN.is_multiple_of(PAGE),
    "the object area stays page aligned"
);

/// Limits of a pool.
pub const MAX_OBJECTS: u32 = 1 << 20;
pub const MIN_OBJECTS: u32 = 1;

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Where everything is. Derived from the pool size and table size at format time and stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    pub pool_len: u64,
    pub table_off: u64,
    pub max_objects: u32,
    pub sync_off: u64,
    pub area_off: u64,
    pub area_len: u64,
    pub pool_id: u64,
    /// Feature flags ([`FEATURE_CHECKSUM`]); 0 for a plain pool.
    pub features: u32,
}

impl Geometry {
    /// A plain pool (no feature flags).
    pub fn new(pool_len: usize, max_objects: u32, pool_id: u64) -> Result<Geometry> {
        Geometry::with_features(pool_len, max_objects, pool_id, 0)
    }

    /// A pool with feature flags `features`. With [`FEATURE_CHECKSUM`] the page CRC table
    /// takes whole pages between the Sync Table and the area: `c` pages for `a` area pages,
    /// with `c * PAGE / CRC_ENTRY >= a`.
    pub fn with_features(
        pool_len: usize,
        max_objects: u32,
        pool_id: u64,
        features: u32,
    ) -> Result<Geometry> {
        if features & !FEATURES_KNOWN != 0 {
            return Err(ObjError::BadArgument(format!(
                "unknown pool feature flags {features:#x}"
            )));
        }
        if !(MIN_OBJECTS..=MAX_OBJECTS).contains(&max_objects) {
            return Err(ObjError::BadArgument(format!(
                "max objects {max_objects} is outside {MIN_OBJECTS}..={MAX_OBJECTS}"
            )));
        }
        let table_off = PAGE;
        let sync_off = (table_off + max_objects as usize * ENTRY).next_multiple_of(PAGE);
        let mut area_off = sync_off + SYNC_LEN;
        if features & FEATURE_CHECKSUM != 0 {
            // R pages after the Sync Table: c = ceil(R / (1 + PAGE/CRC_ENTRY)) CRC pages cover
            // the R - c area pages, since c * (1 + PAGE/CRC_ENTRY) >= R.
            let rest = pool_len.saturating_sub(area_off) / PAGE;
            area_off += rest.div_ceil(1 + PAGE / CRC_ENTRY) * PAGE;
        }
        // At least one page-sized object (two slots) must fit.
        let need = area_off + 2 * PAGE;
        if pool_len < need {
            return Err(ObjError::BadArgument(format!(
                "pool of {pool_len} bytes is too small for {max_objects} objects: need at least {need} bytes"
            )));
        }
        let area_len = (pool_len - area_off) / PAGE * PAGE;
        Ok(Geometry {
            pool_len: pool_len as u64,
            table_off: table_off as u64,
            max_objects,
            sync_off: sync_off as u64,
            area_off: area_off as u64,
            area_len: area_len as u64,
            pool_id,
            features,
        })
    }

    /// Whether object pages carry CRCs.
    pub fn checksum(&self) -> bool {
        self.features & FEATURE_CHECKSUM != 0
    }

    /// Media offset of the page CRC table entry of the area page at media offset `page_off`.
    pub fn crc_entry_off(&self, page_off: usize) -> usize {
        debug_assert!(
            self.checksum(),
            "only checksummed pools have a page CRC table"
        );
        let area_off = self.area_off as usize;
        debug_assert!(page_off >= area_off && (page_off - area_off).is_multiple_of(PAGE));
        self.sync_off as usize + SYNC_LEN + (page_off - area_off) / PAGE * CRC_ENTRY
    }

    pub fn entry_off(&self, index: usize) -> usize {
        assert!(
            index < self.max_objects as usize,
            "entry {index} outside table"
        );
        self.table_off as usize + index * ENTRY
    }

    /// The header bytes (magic included; the caller persists the magic last).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        put64(&mut b, H_MAGIC, MAGIC);
        put32(&mut b, 8, VERSION);
        put32(&mut b, 12, self.features);
        put64(&mut b, 16, self.pool_len);
        put64(&mut b, 24, self.table_off);
        put32(&mut b, 32, self.max_objects);
        put64(&mut b, 40, self.sync_off);
        put64(&mut b, 48, self.area_off);
        put64(&mut b, 56, self.area_len);
        put64(&mut b, 64, self.pool_id);
        let crc = crc32c::crc32c(&b[H_BODY]);
        put32(&mut b, H_CRC, crc);
        b
    }

    /// Parse and validate a header read from media of `media_len` bytes.
    pub fn decode(b: &[u8; HEADER_LEN], media_len: usize) -> Result<Geometry> {
        let magic = le64(b, H_MAGIC);
        if magic != MAGIC {
            return Err(ObjError::NotAPool(
                "not a PMO object pool: no pool header at byte 0".into(),
            ));
        }
        let crc = crc32c::crc32c(&b[H_BODY]);
        if crc != le32(b, H_CRC) {
            return Err(ObjError::Corrupt(format!(
                "pool header checksum mismatch (stored {:#010x}, computed {crc:#010x})",
                le32(b, H_CRC)
            )));
        }
        let version = le32(b, 8);
        if version != VERSION {
            return Err(ObjError::NotAPool(format!(
                "pool format version {version}, this build reads {VERSION}"
            )));
        }
        let features = le32(b, 12);
        if features & !FEATURES_KNOWN != 0 {
            return Err(ObjError::NotAPool(format!(
                "pool uses feature flags {features:#x}, this build knows only {FEATURES_KNOWN:#x}"
            )));
        }
        let g = Geometry {
            pool_len: le64(b, 16),
            table_off: le64(b, 24),
            max_objects: le32(b, 32),
            sync_off: le64(b, 40),
            area_off: le64(b, 48),
            area_len: le64(b, 56),
            pool_id: le64(b, 64),
            features,
        };
        let expect =
            Geometry::with_features(g.pool_len as usize, g.max_objects, g.pool_id, features)
                .map_err(|e| {
                    ObjError::Corrupt(format!("pool header describes an impossible geometry: {e}"))
                })?;
        if expect != g {
            return Err(ObjError::Corrupt(format!(
                "pool header geometry is inconsistent: {g:?}"
            )));
        }
        if g.pool_len as usize > media_len {
            return Err(ObjError::Corrupt(format!(
                "pool header says {} bytes but the media has only {media_len}",
                g.pool_len
            )));
        }
        Ok(g)
    }
}

/// The descriptor of an object (everything in its entry but the published word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Slot A's offset from the start of the pool; slot B follows at `offset + cap`.
    pub offset: u64,
    pub size: u64,
    pub cap: u64,
    pub flags: u32,
    pub name: String,
}

impl Descriptor {
    /// Entry bytes 8..128 (the state word is not included).
    pub fn encode(&self) -> [u8; ENTRY - 8] {
        assert!(self.name.len() <= MAX_NAME);
        let mut e = [0u8; ENTRY];
        put64(&mut e, 8, self.offset);
        put64(&mut e, 16, self.size);
        put64(&mut e, 24, self.cap);
        put32(&mut e, 32, self.flags);
        put32(&mut e, 36, self.name.len() as u32);
        e[E_NAME..E_NAME + self.name.len()].copy_from_slice(self.name.as_bytes());
        let crc = crc32c::crc32c(&e[E_BODY]);
        put32(&mut e, E_CRC, crc);
        e[8..].try_into().expect("120 bytes")
    }

    /// Parse entry `index` (all 128 bytes) and check it against the geometry.
    pub fn decode(index: usize, e: &[u8; ENTRY], g: &Geometry) -> Result<Descriptor> {
        let bad = |why: String| ObjError::Corrupt(format!("object table entry {index}: {why}"));
        let crc = crc32c::crc32c(&e[E_BODY]);
        if crc != le32(e, E_CRC) {
            return Err(bad(format!(
                "checksum mismatch (stored {:#010x}, computed {crc:#010x})",
                le32(e, E_CRC)
            )));
        }
        let name_len = le32(e, 36) as usize;
        if name_len == 0 || name_len > MAX_NAME {
            return Err(bad(format!(
                "name length {name_len} outside 1..={MAX_NAME}"
            )));
        }
        let name = std::str::from_utf8(&e[E_NAME..E_NAME + name_len])
            .map_err(|_| bad("name is not UTF-8".into()))?;
        let d = Descriptor {
            offset: le64(e, 8),
            size: le64(e, 16),
            cap: le64(e, 24),
            flags: le32(e, 32),
            name: name.to_string(),
        };
        let end = d.offset.checked_add(d.cap.saturating_mul(2));
        if d.size == 0
            // Checked: a size within a page of u64::MAX has no capacity (it would overflow).
            || d.size.checked_next_multiple_of(PAGE as u64) != Some(d.cap)
            || !d.offset.is_multiple_of(PAGE as u64)
            || d.offset < g.area_off
            || end.is_none_or(|end| end > g.area_off + g.area_len)
        {
            return Err(bad(format!(
                "extent offset {:#x} size {} capacity {} lies outside the object area {:#x}+{}",
                d.offset, d.size, d.cap, g.area_off, g.area_len
            )));
        }
        Ok(d)
    }

    pub fn slot_off(&self, slot: u8) -> usize {
        (self.offset + slot as u64 * self.cap) as usize
    }
}

/// Check a name for `create`.
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(ObjError::BadName {
            name: name.into(),
            why: "empty".into(),
        });
    }
    if name.len() > MAX_NAME {
        return Err(ObjError::NameTooLong {
            name: name.into(),
            len: name.len(),
            max: MAX_NAME,
        });
    }
    if name.bytes().any(|c| c == 0 || c.is_ascii_control()) {
        return Err(ObjError::BadName {
            name: name.into(),
            why: "contains a NUL or control character".into(),
        });
    }
    Ok(())
}

/// One multi-object sync: (table entry, new published word) for each object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub seq: u64,
    pub items: Vec<(u64, u64)>,
}

impl Intent {
    /// Record bytes from offset 8 of the Sync Table (commit word excluded).
    pub fn encode(&self) -> Vec<u8> {
        assert!(!self.items.is_empty() && self.items.len() <= MAX_SYNC && self.seq != 0);
        let mut b = vec![0u8; S_ITEMS + 16 * self.items.len()];
        put64(&mut b, S_SEQ, self.seq);
        put32(&mut b, S_COUNT, self.items.len() as u32);
        for (i, (entry, word)) in self.items.iter().enumerate() {
            put64(&mut b, S_ITEMS + 16 * i, *entry);
            put64(&mut b, S_ITEMS + 16 * i + 8, *word);
        }
        let crc = intent_crc(&b);
        put32(&mut b, S_CRC, crc);
        b[8..].to_vec()
    }

    /// Parse the whole Sync Table page (commit word included).
    pub fn decode(b: &[u8]) -> Result<Intent> {
        assert_eq!(b.len(), SYNC_LEN);
        let bad = |why: String| ObjError::Corrupt(format!("PMO Sync Table: {why}"));
        let count = le32(b, S_COUNT) as usize;
        if count == 0 || count > MAX_SYNC {
            return Err(bad(format!(
                "committed intent has {count} items (allowed 1..={MAX_SYNC})"
            )));
        }
        let body = &b[..S_ITEMS + 16 * count];
        let crc = intent_crc(body);
        if crc != le32(b, S_CRC) {
            return Err(bad(format!(
                "committed intent checksum mismatch (stored {:#010x}, computed {crc:#010x})",
                le32(b, S_CRC)
            )));
        }
        let items = (0..count)
            .map(|i| (le64(b, S_ITEMS + 16 * i), le64(b, S_ITEMS + 16 * i + 8)))
            .collect();
        Ok(Intent {
            seq: le64(b, S_SEQ),
            items,
        })
    }
}

/// CRC over seq, count and items (bytes 8..20 and 32..), not the commit word nor the CRC itself.
fn intent_crc(b: &[u8]) -> u32 {
    let c = crc32c::crc32c(&b[S_SEQ..S_CRC]);
    crc32c::crc32c_append(c, &b[S_ITEMS..])
}

pub fn intent_seq(b: &[u8]) -> u64 {
    le64(b, S_SEQ)
}

/// The item count of the intent record in Sync Table bytes `b` (not validated).
pub fn intent_count(b: &[u8]) -> usize {
    le32(b, S_COUNT) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_corruption() {
        let g = Geometry::new(1 << 20, 16, 7).unwrap();
        let mut b = g.encode();
        assert_eq!(Geometry::decode(&b, 1 << 20).unwrap(), g);
        b[20] ^= 1;
        assert!(matches!(
            Geometry::decode(&b, 1 << 20),
            Err(ObjError::Corrupt(_))
        ));
        b[0] ^= 1;
        assert!(matches!(
            Geometry::decode(&b, 1 << 20),
            Err(ObjError::NotAPool(_))
        ));
    }

    #[test]
    fn checksum_header_roundtrip_and_unknown_features() {
        let plain = Geometry::new(1 << 20, 16, 7).unwrap();
        let g = Geometry::with_features(1 << 20, 16, 7, FEATURE_CHECKSUM).unwrap();
        assert_eq!(Geometry::decode(&g.encode(), 1 << 20).unwrap(), g);
        // The CRC table sits after the Sync Table and covers every area page.
        let crc_pages = (g.area_off - plain.area_off) as usize / PAGE;
        assert!(crc_pages >= 1);
        assert!(crc_pages * PAGE / CRC_ENTRY >= g.area_len as usize / PAGE);
        let last = g.area_off as usize + g.area_len as usize - PAGE;
        assert!(g.crc_entry_off(last) + CRC_ENTRY <= g.area_off as usize);
        // A plain header is what it was before feature flags existed: bytes 12..16 are zero.
        assert_eq!(plain.encode()[12..16], [0; 4]);
        let mut b = g.encode();
        put32(&mut b, 12, FEATURE_CHECKSUM | 2);
        let crc = crc32c::crc32c(&b[H_BODY]);
        put32(&mut b, H_CRC, crc);
        let err = Geometry::decode(&b, 1 << 20).unwrap_err();
        assert!(matches!(err, ObjError::NotAPool(_)), "{err}");
        assert!(Geometry::with_features(1 << 20, 16, 7, 2).is_err());
    }

    #[test]
    fn entry_roundtrip_and_corruption() {
        let g = Geometry::new(1 << 20, 16, 7).unwrap();
        let d = Descriptor {
            offset: g.area_off,
            size: 100,
            cap: 4096,
            flags: 0,
            name: "x".into(),
        };
        let mut e = [0u8; ENTRY];
        e[8..].copy_from_slice(&d.encode());
        assert_eq!(Descriptor::decode(3, &e, &g).unwrap(), d);
        e[41] = b'y';
        let err = Descriptor::decode(3, &e, &g).unwrap_err().to_string();
        assert!(err.contains("entry 3") && err.contains("checksum"), "{err}");
    }

    #[test]
    fn intent_roundtrip() {
        let i = Intent {
            seq: 5,
            items: vec![(1, 9), (4, 13)],
        };
        let mut page = vec![0u8; SYNC_LEN];
        page[8..8 + i.encode().len()].copy_from_slice(&i.encode());
        assert_eq!(Intent::decode(&page).unwrap(), i);
        page[40] ^= 1;
        assert!(Intent::decode(&page).is_err());
    }
}
