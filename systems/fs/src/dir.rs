//! Directory blocks: 64-byte slots. A record is a head slot `{ino, name_len, kind, nslots, pad,
//! sum u32, name[48]}` plus continuation slots `{0u64, name[56]}`; a slot whose first word is 0
//! is free. `sum` (format 3; 0 in format 2's records) is the record's checksum
//! ([`record_sum`]): a name or inode number changed behind the file system's back is found, not
//! followed.
//! The DRAM index of one directory (name -> entry, slot bitmaps) is built by the mount walk, or
//! read when first used after a mount from the clean-unmount checkpoint ([`Dirs`]).

use crate::layout::{BLOCK, NAME_MAX};
use std::collections::HashMap;
use std::sync::OnceLock;

pub(crate) const SLOT: usize = 64;
pub(crate) const SLOTS: usize = BLOCK / SLOT;
// A head slot: `ino` (8 bytes, 0 = free), name length, kind, slots used, then the name's start.
pub(crate) const H_INO: usize = 0;
const H_LEN: usize = 8;
pub(crate) const H_KIND: usize = 9;
const H_NSLOTS: usize = 10;
/// The record's checksum (format 3).
pub(crate) const H_SUM: usize = 12;
const H_NAME: usize = 16;
const HEAD_NAME: usize = SLOT - H_NAME;
// A continuation slot: a 0 word (so it never reads as a head), then the name's next bytes.
const C_NAME: usize = 8;
const CONT_NAME: usize = SLOT - C_NAME;
const _: () = assert!(
    H_INO + 8 <= H_LEN
        && H_NSLOTS < H_SUM
        && H_SUM + 4 == H_NAME
        && HEAD_NAME == 48
        && CONT_NAME == 56
);

/// A record's checksum: CRC32C of its inode number, kind and name; never 0 (0 is a format 2
/// record, which has none).
pub(crate) fn record_sum(name: &[u8], ino: u64, kind: u8) -> u32 {
    let c = crc32c::crc32c_append(crc32c::crc32c(&ino.to_le_bytes()), &[kind]);
    crc32c::crc32c_append(c, name).max(1)
}

/// Whether a record read back matches its checksum.
pub(crate) fn sum_ok(r: &Rec) -> bool {
    r.sum == record_sum(&r.name, r.ino, r.kind)
}
/// Format 7: a directory's count of records and their digest, kept in its inode's `tail` word
/// (which no directory uses otherwise: it is a file's append record and a symlink's target
/// checksum): the count in the high 32 bits, and in the low the XOR of one term per record, the
/// CRC32C of the record's checksum seeded with the directory's number. Adding a record and
/// taking it away are the same XOR, so a transaction keeps the tally in one word of the line it
/// stores anyway (the directory's times are beside it); a zeroed block, a lost record, or a
/// block of another directory's records does not match it. The word needs no cover by the
/// inode's checksum: a damaged tally is itself a mismatch.
pub(crate) fn tally(word: u64, d: u64, sum: u32, add: bool) -> u64 {
    let term = crc32c::crc32c_append(crc32c::crc32c(&d.to_le_bytes()), &sum.to_le_bytes());
    let count = (word >> 32) as u32;
    let count = if add {
        count.wrapping_add(1)
    } else {
        count.wrapping_sub(1)
    };
    (count as u64) << 32 | ((word as u32) ^ term) as u64
}

/// The tally (`tally`) of directory `d` holding records with checksums `sums`.
pub(crate) fn tally_of(d: u64, sums: impl IntoIterator<Item = u32>) -> u64 {
    sums.into_iter().fold(0, |w, s| tally(w, d, s, true))
}

// The longest name fits the slots a block has.
const _: () = assert!((NAME_MAX - HEAD_NAME).div_ceil(CONT_NAME) < SLOTS);

pub(crate) fn slots_for(name_len: usize) -> usize {
    1 + name_len.saturating_sub(HEAD_NAME).div_ceil(CONT_NAME)
}

/// One record as found in a block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub slot: usize,
    pub ino: u64,
    pub kind: u8,
    pub name: Vec<u8>,
    pub nslots: usize,
    /// The stored checksum (0: a format 2 record).
    pub sum: u32,
}

/// The bytes of a record's slots, the head's `ino` word included (the caller stores it last).
pub(crate) fn encode(name: &[u8], ino: u64, kind: u8) -> Vec<u8> {
    assert!(!name.is_empty() && name.len() <= NAME_MAX);
    let n = slots_for(name.len());
    let mut b = vec![0u8; n * SLOT];
    b[H_INO..H_INO + 8].copy_from_slice(&ino.to_le_bytes());
    b[H_LEN] = name.len() as u8;
    b[H_KIND] = kind;
    b[H_NSLOTS] = n as u8;
    b[H_SUM..H_SUM + 4].copy_from_slice(&record_sum(name, ino, kind).to_le_bytes());
    let head = name.len().min(HEAD_NAME);
    b[H_NAME..H_NAME + head].copy_from_slice(&name[..head]);
    for (k, chunk) in name[head..].chunks(CONT_NAME).enumerate() {
        let at = (k + 1) * SLOT + C_NAME;
        b[at..at + chunk.len()].copy_from_slice(chunk);
    }
    if cfg!(debug_assertions) && ino != 0 {
        // decode after encode: the record reads back as itself
        let mut block = vec![0u8; BLOCK];
        block[..b.len()].copy_from_slice(&b);
        let (recs, bad) = scan(&block);
        debug_assert!(
            bad.is_empty()
                || name.contains(&b'/')
                || name.contains(&0)
                || name == b"."
                || name == b".."
        );
        debug_assert!(
            !bad.is_empty()
                || (recs.len() == 1
                    && recs[0].name == name
                    && recs[0].ino == ino
                    && recs[0].kind == kind)
        );
    }
    b
}

/// The records of one directory block, or the first bad one. Never panics on any bytes.
pub fn parse(b: &[u8]) -> Result<Vec<Rec>, String> {
    match scan(b) {
        (recs, bad) if bad.is_empty() => Ok(recs),
        (_, bad) => Err(bad.into_iter().next().expect("not empty").1),
    }
}

/// The one reader of directory records: every good record, and the head slot of every bad one
/// with what is wrong with it, going on past each bad head at the next slot (what repair needs;
/// once those heads are cleared, `parse` reads the same records). Never panics on any bytes.
pub(crate) fn scan(b: &[u8]) -> (Vec<Rec>, Vec<(usize, String)>) {
    assert_eq!(b.len(), BLOCK);
    let word =
        |s: usize| u64::from_le_bytes(b[s * SLOT..s * SLOT + 8].try_into().expect("8 bytes"));
    let (mut out, mut bad) = (Vec::new(), Vec::new());
    let mut s = 0;
    while s < SLOTS {
        let ino = word(s);
        if ino == 0 {
            s += 1;
            continue;
        }
        match record_at(b, s, &word) {
            Ok(rec) => {
                s += rec.nslots;
                out.push(rec);
            }
            Err(why) => {
                bad.push((s, why));
                s += 1;
            }
        }
    }
    (out, bad)
}

/// The record whose head is slot `s` (its first word not 0), or why it is not one.
fn record_at(b: &[u8], s: usize, word: &dyn Fn(usize) -> u64) -> Result<Rec, String> {
    let h = &b[s * SLOT..];
    let (len, kind, nslots) = (h[H_LEN] as usize, h[H_KIND], h[H_NSLOTS] as usize);
    if len == 0 || nslots != slots_for(len) || s + nslots > SLOTS {
        return Err(format!(
            "slot {s}: bad record (name length {len}, {nslots} slots)"
        ));
    }
    let mut name = h[H_NAME..H_NAME + len.min(HEAD_NAME)].to_vec();
    for k in 1..nslots {
        if word(s + k) != 0 {
            return Err(format!(
                "slot {s}: continuation slot {} is not marked",
                s + k
            ));
        }
        let rest = len - name.len();
        let at = (s + k) * SLOT + C_NAME;
        name.extend_from_slice(&b[at..at + rest.min(CONT_NAME)]);
    }
    if name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
        return Err(format!(
            "slot {s}: invalid name {:?}",
            String::from_utf8_lossy(&name)
        ));
    }
    Ok(Rec {
        slot: s,
        ino: word(s),
        kind,
        name,
        nslots,
        sum: u32::from_le_bytes(h[H_SUM..H_SUM + 4].try_into().expect("4 bytes")),
    })
}

/// Where an entry lives and what it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub ino: u64,
    pub kind: u8,
    /// File block of the directory.
    pub block: u64,
    pub slot: usize,
    pub nslots: usize,
}

/// The DRAM index of one directory.
#[derive(Clone, Debug, Default)]
pub(crate) struct DirIndex {
    pub entries: HashMap<Vec<u8>, Loc>,
    /// Per directory block, a bit per used slot.
    pub used: Vec<u64>,
    pub subdirs: u32,
}

impl DirIndex {
    pub(crate) fn mark(&mut self, block: u64, slot: usize, n: usize, used: bool) {
        let mask = if n == 64 {
            u64::MAX
        } else {
            ((1u64 << n) - 1) << slot
        };
        let w = &mut self.used[block as usize];
        if used {
            assert_eq!(*w & mask, 0, "slots {slot}+{n} of dir block {block} in use");
            *w |= mask;
        } else {
            *w &= !mask;
        }
    }
    /// A run of `n` free slots: (block, slot), or None (the caller adds a block).
    pub(crate) fn find_free(&self, n: usize) -> Option<(u64, usize)> {
        for (b, &w) in self.used.iter().enumerate() {
            // A block with fewer free slots than asked for (most of a big directory's) holds
            // no run: skip it without trying every position.
            if ((!w).count_ones() as usize) < n {
                continue;
            }
            for s in 0..=SLOTS - n {
                let mask = if n == 64 {
                    u64::MAX
                } else {
                    ((1u64 << n) - 1) << s
                };
                if w & mask == 0 {
                    return Some((b as u64, s));
                }
            }
        }
        None
    }
    pub(crate) fn insert(&mut self, name: &[u8], loc: Loc) {
        self.mark(loc.block, loc.slot, loc.nslots, true);
        if loc.kind == crate::inode::Kind::Dir as u8 {
            self.subdirs += 1;
        }
        self.entries.insert(name.to_vec(), loc);
    }
    pub(crate) fn remove(&mut self, name: &[u8]) -> Option<Loc> {
        let loc = self.entries.remove(name)?;
        self.mark(loc.block, loc.slot, loc.nslots, false);
        if loc.kind == crate::inode::Kind::Dir as u8 {
            self.subdirs -= 1;
        }
        Some(loc)
    }
}

/// The indexes of every directory, by inode. After a walk every index is built; after a mount
/// from the clean-unmount checkpoint only the set of directories is known, and each index is
/// read from PM the first time it is used (a failure to read it is kept and given again).
#[derive(Debug, Default)]
pub(crate) struct Dirs {
    map: HashMap<u64, OnceLock<Result<DirIndex, String>>>,
}

impl Dirs {
    /// Every index built (the walk's).
    pub(crate) fn built(map: HashMap<u64, DirIndex>) -> Dirs {
        Dirs {
            map: map
                .into_iter()
                .map(|(d, idx)| (d, OnceLock::from(Ok(idx))))
                .collect(),
        }
    }
    /// These directories, each index read when first used.
    pub(crate) fn lazy(dirs: impl IntoIterator<Item = u64>) -> Dirs {
        Dirs {
            map: dirs.into_iter().map(|d| (d, OnceLock::new())).collect(),
        }
    }
    /// Every directory's inode number, in no order.
    pub(crate) fn inos(&self) -> impl Iterator<Item = u64> + '_ {
        self.map.keys().copied()
    }
    /// The index of `d`, built by `load` if this is its first use; None when `d` is not a
    /// directory. Two readers may both load a missing index; the first to finish keeps its.
    pub(crate) fn get(
        &self,
        d: u64,
        load: impl FnOnce() -> Result<DirIndex, String>,
    ) -> Option<Result<&DirIndex, &str>> {
        let cell = self.map.get(&d)?;
        let r = match cell.get() {
            Some(r) => r,
            None => {
                let v = load();
                cell.get_or_init(|| v)
            }
        };
        Some(r.as_ref().map_err(String::as_str))
    }
    /// The index of `d` to change, which must have been used (so built, without error) since
    /// the namespace lock was taken for writing.
    pub(crate) fn get_mut(&mut self, d: u64) -> &mut DirIndex {
        match self.map.get_mut(&d).and_then(OnceLock::get_mut) {
            Some(Ok(idx)) => idx,
            _ => panic!("directory {d}: index changed before it was read"),
        }
    }
    /// A new, empty directory.
    pub(crate) fn insert_new(&mut self, d: u64) {
        let old = self.map.insert(d, OnceLock::from(Ok(DirIndex::default())));
        assert!(old.is_none(), "directory {d} added twice");
    }
    pub(crate) fn remove(&mut self, d: u64) {
        self.map.remove(&d).expect("directory removed twice");
    }
}
