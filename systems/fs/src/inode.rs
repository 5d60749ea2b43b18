//! The 128-byte inode: its DRAM form and its encoding. Line 0 is hot (`{size, mtime}` and
//! `{root, height/kind}` each 16-aligned for one 16-byte store), line 1 cold.

use crate::layout::{u32_at, u64_at};
use crate::layout::{INODE, LINE};

// The byte offset of every field, in one place: `encode`/`decode` and every single-field store
// (the write fast paths, repair) use these names.
/// `{size, mtime}`: one 16-byte store (the append and write fast paths).
pub(crate) const SIZE_MTIME: usize = 0;
pub(crate) const SIZE: usize = 0;
pub(crate) const MTIME: usize = 8;
/// `{root, height, kind, flags}`: one 16-byte store (a tree that grows).
pub(crate) const ROOT: usize = 16;
pub(crate) const HEIGHT: usize = 24;
pub(crate) const KIND: usize = 25;
pub(crate) const FLAGS: usize = 26;
/// In line 0 with the size and mtime, so a write's fast path that stores it flushes no other
/// line.
pub(crate) const CTIME: usize = 32;
pub(crate) const LINKS: usize = 40;
pub(crate) const MODE: usize = 44;
pub(crate) const UID: usize = 48;
pub(crate) const GID: usize = 52;
/// The one-fence append's tail record (`tail.rs`), in the same line as the size.
pub(crate) const TAIL: usize = 56;
pub(crate) const XATTR: usize = 64;
pub(crate) const ORPHAN: usize = 72;
pub(crate) const PARENT: usize = 80;
pub(crate) const TRUNC: usize = 88;
pub(crate) const RDEV: usize = 96;
pub(crate) const ATIME: usize = 104;
/// Format 4: CRC32C of the fields only transactions store (`SUMMED`), seeded with the inode
/// number; 0 on a free inode and in older formats.
pub(crate) const SUM: usize = 112;
/// The size word's bits that hold the size; format 7 keeps a check above them.
const SIZE_BITS: u32 = 40;
const SIZE_MASK: u64 = (1 << SIZE_BITS) - 1;
const _: () = assert!(crate::layout::MAX_FILE_SIZE <= SIZE_MASK);
/// Set in every format 7 size check, so a zeroed size word fails.
const SIZE_MARK: u32 = 1 << 23;

/// The check format 7 keeps in a size word's high 24 bits: 23 bits of the CRC32C of the size,
/// and bit 63 set. The size is outside the inode's checksum (the fast paths store it alone), so
/// it carries its own, stored in the same 8-byte store: no extra line or fence. An inode moved
/// to another slot is caught by the inode's checksum, so the check need not name the slot.
pub(crate) fn size_check(size: u64) -> u32 {
    debug_assert!(size <= SIZE_MASK);
    SIZE_MARK | (crc32c::crc32c(&size.to_le_bytes()) & (SIZE_MARK - 1))
}

/// The size a size word holds (its check masked off).
pub(crate) fn size_of_word(word: u64) -> u64 {
    word & SIZE_MASK
}

/// The size word a pool stores for `size`: with its check (format 7) or bare.
pub(crate) fn size_word(checked: bool, size: u64) -> u64 {
    match checked {
        true => size | (size_check(size) as u64) << SIZE_BITS,
        false => size,
    }
}

/// What the sum covers: root, height, kind and flags (and their padding); links, mode, uid and
/// gid; xattr block, orphan link, parent, truncate target and rdev. Not the size, the times or
/// the tail word, which the write fast paths store alone (a sum over them would cost every
/// write a second line and could not change with them in one store).
const SUMMED: [(usize, usize); 3] = [(ROOT, CTIME), (LINKS, TAIL), (XATTR, RDEV + 4)];

// The layout's promises, checked by the compiler: the 16-byte pairs are aligned and adjacent,
// the hot fields share line 0, the fields follow each other without overlap, and the inode is
// two lines.
const _: () =
    assert!(SIZE_MTIME.is_multiple_of(16) && MTIME == SIZE + 8 && ROOT.is_multiple_of(16));
const _: () = assert!(HEIGHT == ROOT + 8 && KIND == HEIGHT + 1 && FLAGS == KIND + 1);
const _: () = assert!(CTIME / LINE == SIZE / LINE && TAIL / LINE == SIZE / LINE);
const _: () = assert!(FLAGS < CTIME && CTIME + 8 <= LINKS && LINKS + 4 <= MODE && MODE + 4 <= UID);
const _: () =
    assert!(UID + 4 <= GID && GID + 4 <= TAIL && TAIL + 8 <= XATTR && XATTR + 8 <= ORPHAN);
const _: () = assert!(ORPHAN + 8 <= PARENT && PARENT + 8 <= TRUNC && TRUNC + 8 <= RDEV);
const _: () =
    assert!(RDEV + 4 <= ATIME && ATIME + 8 <= SUM && SUM + 4 <= INODE && INODE == 2 * LINE);
/// Inode flag (in `FLAGS`): every write to this file is all-or-nothing (`DataMode::Atomic`).
pub(crate) const FLAG_ATOMIC: u8 = 1;
/// Inode flag (in `FLAGS`): the file asks for 2 MiB blocks: every allocation inside an empty
/// 2 MiB-aligned span of it takes a whole huge block when one is free (`Fs::set_huge`).
pub(crate) const FLAG_HUGE: u8 = 2;
/// Inode flag (in `FLAGS`, format 6): the file's data blocks carry checksums (`sums.rs`):
/// every write to it is copy-on-write, and a read checks what it returns.
pub(crate) const FLAG_SUMS: u8 = 4;
/// The flags this version knows; the walk reports any other bit (and `FLAG_SUMS` on a pool
/// of a format before 6).
pub(crate) const FLAGS_KNOWN: u8 = FLAG_ATOMIC | FLAG_HUGE | FLAG_SUMS;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum Kind {
    #[default]
    Free = 0,
    File = 1,
    Dir = 2,
    Symlink = 3,
    /// Special files: no data, only attributes (`rdev` for the devices).
    Fifo = 4,
    Socket = 5,
    CharDev = 6,
    BlockDev = 7,
}

impl Kind {
    /// A FIFO, socket or device: an inode with attributes and no data.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev
        )
    }
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            0 => Kind::Free,
            1 => Kind::File,
            2 => Kind::Dir,
            3 => Kind::Symlink,
            4 => Kind::Fifo,
            5 => Kind::Socket,
            6 => Kind::CharDev,
            7 => Kind::BlockDev,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Inode {
    /// Bytes (below 2^40: `MAX_FILE_SIZE` is 2^39); the word's high bits are `size_check`.
    pub size: u64,
    /// Times are nanoseconds since the epoch, negative before it (1677 to 2262); the bytes
    /// are the same as the unsigned field of earlier builds for every time after 1970.
    pub mtime: i64,
    pub root: u64,
    pub height: u8,
    pub kind: u8,
    /// `FLAG_*` bits (padding before format version 1 had it: always 0 there).
    pub flags: u8,
    pub ctime: i64,
    pub links: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: i64,
    /// A file's: the tail record of the last one-fence append (`tail::Tail`, 0: none);
    /// transactions write it as 0 (`Tx::put_inode`): only the append fast path sets it. A
    /// symlink's (format 3): its target's checksum (`symlink_sum`), which transactions keep; a
    /// directory's (format 7): the count and digest of its records (`dir::tally`), kept too.
    pub tail: u64,
    pub xattr: u64,
    pub orphan_next: u64,
    pub parent: u64,
    pub trunc: u64,
    /// Device number of a character or block device (0 otherwise).
    pub rdev: u32,
    /// Format 4: the checksum of the fields transactions store (`Inode::sealed`).
    pub sum: u32,
    /// Format 7: the size's own check, in the size word's high 24 bits (`size_check`); 0 in
    /// earlier formats and on a free inode.
    pub size_check: u32,
}

impl Inode {
    /// A new, empty directory in `parent` (itself for the root), stamped `now`.
    pub(crate) fn empty_dir(mode: u32, parent: u64, now: i64) -> Inode {
        Inode {
            kind: Kind::Dir as u8,
            links: 2,
            mode,
            parent,
            mtime: now,
            ctime: now,
            ..Default::default()
        }
    }
    pub fn kind(&self) -> Option<Kind> {
        Kind::from_u8(self.kind)
    }
    pub fn is(&self, k: Kind) -> bool {
        self.kind == k as u8
    }
    pub fn atomic(&self) -> bool {
        self.flags & FLAG_ATOMIC != 0
    }
    pub fn huge(&self) -> bool {
        self.flags & FLAG_HUGE != 0
    }
    /// The file's data blocks carry checksums (`sums.rs`).
    pub fn sums(&self) -> bool {
        self.flags & FLAG_SUMS != 0
    }
    pub fn encode(&self) -> [u8; INODE] {
        let mut b = [0u8; INODE];
        let mut put = |o: usize, v: &[u8]| crate::layout::put(&mut b, o, v);
        put(
            SIZE,
            &(self.size | (self.size_check as u64) << SIZE_BITS).to_le_bytes(),
        );
        put(MTIME, &self.mtime.to_le_bytes());
        put(ROOT, &self.root.to_le_bytes());
        put(HEIGHT, &[self.height]);
        put(KIND, &[self.kind]);
        put(FLAGS, &[self.flags]);
        put(CTIME, &self.ctime.to_le_bytes());
        put(LINKS, &self.links.to_le_bytes());
        put(MODE, &self.mode.to_le_bytes());
        put(UID, &self.uid.to_le_bytes());
        put(GID, &self.gid.to_le_bytes());
        put(TAIL, &self.tail.to_le_bytes());
        put(XATTR, &self.xattr.to_le_bytes());
        put(ORPHAN, &self.orphan_next.to_le_bytes());
        put(PARENT, &self.parent.to_le_bytes());
        put(TRUNC, &self.trunc.to_le_bytes());
        put(RDEV, &self.rdev.to_le_bytes());
        put(ATIME, &self.atime.to_le_bytes());
        put(SUM, &self.sum.to_le_bytes());
        debug_assert_eq!(Inode::decode(&b), *self, "decode after encode");
        b
    }
    /// Decode any 128 bytes (validation is the walk's job).
    pub fn decode(b: &[u8; INODE]) -> Inode {
        let (u64at, u32at) = (|o| u64_at(b, o), |o| u32_at(b, o));
        Inode {
            size: u64at(SIZE) & SIZE_MASK,
            mtime: u64at(MTIME) as i64,
            root: u64at(ROOT),
            height: b[HEIGHT],
            kind: b[KIND],
            flags: b[FLAGS],
            ctime: u64at(CTIME) as i64,
            links: u32at(LINKS),
            mode: u32at(MODE),
            uid: u32at(UID),
            gid: u32at(GID),
            atime: u64at(ATIME) as i64,
            tail: u64at(TAIL),
            xattr: u64at(XATTR),
            orphan_next: u64at(ORPHAN),
            parent: u64at(PARENT),
            trunc: u64at(TRUNC),
            rdev: u32at(RDEV),
            sum: u32at(SUM),
            size_check: (u64at(SIZE) >> SIZE_BITS) as u32,
        }
    }
    /// This inode with its checksum as format 4 stores it for inode number `ino`: CRC32C of the
    /// `SUMMED` bytes seeded with `ino` (an inode copied to another slot does not match), 0 for
    /// a free inode.
    pub(crate) fn sealed(self, ino: u64) -> Inode {
        let sum = if self.is(Kind::Free) {
            0
        } else {
            let b = self.encode();
            SUMMED
                .iter()
                .fold(crc32c::crc32c(&ino.to_le_bytes()), |c, &(a, z)| {
                    crc32c::crc32c_append(c, &b[a..z])
                })
        };
        Inode { sum, ..self }
    }
    /// Whether the stored checksum is the one `sealed` gives (a free inode's is 0).
    pub(crate) fn sum_ok(&self, ino: u64) -> bool {
        self.sealed(ino).sum == self.sum
    }
    /// This inode with the checksum the format of `geo` stores for slot `ino`: none before
    /// format 4; from format 5 the meta inode too (free in kind, it holds the table's tree).
    pub(crate) fn seal_in(self, geo: &crate::layout::Geometry, ino: u64) -> Inode {
        let meta = ino == crate::layout::META_INO && geo.grows();
        let checked = geo.checked_sizes() && (meta || !self.is(Kind::Free));
        let size_check = if checked { size_check(self.size) } else { 0 };
        let this = Inode { size_check, ..self };
        this.sum_in(geo, ino)
    }
    /// `seal_in`'s checksum part.
    fn sum_in(self, geo: &crate::layout::Geometry, ino: u64) -> Inode {
        if !geo.inode_sums() {
            return Inode { sum: 0, ..self };
        }
        if ino == crate::layout::META_INO && geo.grows() {
            // sealed as if in use: the kind byte is covered, so a free-looking meta inode
            // holding a table is not mistaken for a zeroed one
            let k = Inode {
                kind: u8::MAX,
                ..self
            };
            return Inode {
                sum: k.sealed(ino).sum,
                ..self
            };
        }
        self.sealed(ino)
    }
    /// Whether the stored checksum is the one `seal_in` gives (always, before format 4).
    pub(crate) fn sum_ok_in(&self, geo: &crate::layout::Geometry, ino: u64) -> bool {
        !geo.inode_sums() || self.seal_in(geo, ino).sum == self.sum
    }
}

/// A symlink target's checksum as format 3 keeps it in the inode's tail word: CRC32C of the
/// target, seeded with the inode number (a target block copied over another symlink's does not
/// match), with bit 63 set so a zeroed word never matches.
pub(crate) fn symlink_sum(ino: u64, target: &[u8]) -> u64 {
    let crc = crc32c::crc32c_append(crc32c::crc32c(&ino.to_le_bytes()), target);
    1 << 63 | crc as u64
}
