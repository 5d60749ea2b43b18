//! The 128-byte inode: its DRAM form and its encoding. Line 0 is hot (`{size, mtime}` and
//! `{root, height/kind}` each 16-aligned for one 16-byte store), line 1 cold.

use crate::layout::INODE;

/// Offset of `{size, mtime}` inside an inode (one 16-byte store).
pub const SIZE_MTIME: usize = 0;
pub const MTIME: usize = 8;
/// Offset of ctime: in line 0 with the size and mtime, so a write's fast path that stores it
/// flushes no other line.
pub const CTIME: usize = 32;
const _: () = assert!(CTIME / crate::layout::LINE == SIZE_MTIME / crate::layout::LINE);
/// Offset of the one-fence append's tail record (`tail.rs`), in the same line as the size.
pub const TAIL: usize = 56;
/// Inode flag (byte 26): every write to this file is all-or-nothing (`DataMode::Atomic`).
pub const FLAG_ATOMIC: u8 = 1;
/// Inode flag (byte 26): the file asks for 2 MiB blocks: every allocation inside an empty
/// 2 MiB-aligned span of it takes a whole huge block when one is free (`Fs::set_huge`).
pub const FLAG_HUGE: u8 = 2;
/// The flags this version knows; the walk reports any other bit.
pub const FLAGS_KNOWN: u8 = FLAG_ATOMIC | FLAG_HUGE;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
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
    pub size: u64,
    /// Times are nanoseconds since the epoch, negative before it (1677 to 2262); the bytes
    /// are the same as the unsigned field of earlier builds for every time after 1970.
    pub mtime: i64,
    pub root: u64,
    pub height: u8,
    pub kind: u8,
    /// `FLAG_*` bits (byte 26, padding before format version 1 had it: always 0 there).
    pub flags: u8,
    pub ctime: i64,
    pub links: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: i64,
    /// The tail record of the last one-fence append (`tail::Tail`, 0: none). Transactions
    /// write it as 0 (`Tx::put_inode`): only the append fast path sets it.
    pub tail: u64,
    pub xattr: u64,
    pub orphan_next: u64,
    pub parent: u64,
    pub trunc: u64,
    /// Device number of a character or block device (0 otherwise).
    pub rdev: u32,
}

impl Inode {
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
    pub fn encode(&self) -> [u8; INODE] {
        let mut b = [0u8; INODE];
        let mut put = |o: usize, v: &[u8]| b[o..o + v.len()].copy_from_slice(v);
        put(0, &self.size.to_le_bytes());
        put(8, &self.mtime.to_le_bytes());
        put(16, &self.root.to_le_bytes());
        put(24, &[self.height, self.kind, self.flags]);
        put(CTIME, &self.ctime.to_le_bytes());
        put(40, &self.links.to_le_bytes());
        put(44, &self.mode.to_le_bytes());
        put(48, &self.uid.to_le_bytes());
        put(52, &self.gid.to_le_bytes());
        put(56, &self.tail.to_le_bytes());
        put(64, &self.xattr.to_le_bytes());
        put(72, &self.orphan_next.to_le_bytes());
        put(80, &self.parent.to_le_bytes());
        put(88, &self.trunc.to_le_bytes());
        put(96, &self.rdev.to_le_bytes());
        put(104, &self.atime.to_le_bytes());
        b
    }
    /// Decode any 128 bytes (validation is the walk's job).
    pub fn decode(b: &[u8; INODE]) -> Inode {
        let u64at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        Inode {
            size: u64at(0),
            mtime: u64at(8) as i64,
            root: u64at(16),
            height: b[24],
            kind: b[25],
            flags: b[26],
            ctime: u64at(CTIME) as i64,
            links: u32at(40),
            mode: u32at(44),
            uid: u32at(48),
            gid: u32at(52),
            atime: u64at(104) as i64,
            tail: u64at(56),
            xattr: u64at(64),
            orphan_next: u64at(72),
            parent: u64at(80),
            trunc: u64at(88),
            rdev: u32at(96),
        }
    }
}
