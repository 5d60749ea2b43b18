//! pmkit-fs: PMFS in user space. A crash-consistent file system on persistent memory, generic
//! over [`pmkit_media::Media`] so it runs unchanged on a mapped region and on the crash simulator.
//! See `docs/fs.md` for the guarantees, the layout on the media and the journal.
//!
//! The API is a FUSE low-level file system's: everything by inode number ([`ROOT`] is the root).

mod alloc;
mod atime;
mod attr;
mod blockhash;
mod check;
mod ckpt;
mod clock;
mod clone;
mod copy;
mod costs;
mod damage;
mod data;
mod dir;
pub mod direct;
mod error;
mod falloc;
mod free_epoch;
mod grow;
mod inode;
mod itable;
mod itable_grow;
mod journal;
pub mod layout;
mod mount;
mod ns;
mod overlay;
mod pm;
pub mod posix;
mod preallocated;
mod ptr;
mod punch;
mod read;
mod reclaim;
mod repair;
mod seek;
mod share;
mod shares;
mod sums;
mod tail;
mod tally;
mod tree;
mod truncate;
mod tx;
mod walk;
pub mod watch;
mod xattr;
mod xblock;
pub mod xip;

pub use atime::Atime;
pub use attr::{killed_suidgid, ns_of_timespec, timespec_of};
pub use check::{check, CheckReport};
pub use costs::{op_costs, OpCost};

/// The decoders of on-media structures, for the fuzz targets: each takes any bytes and answers
/// Ok or a reason, never a panic.
#[doc(hidden)]
pub mod decoders {
    pub use crate::dir::parse as dir_block;
    pub use crate::inode::Inode;
    pub use crate::journal::Entry;
    pub use crate::xblock::decode as xattr_block;
}
pub use error::{damaged_text, Error, Result};
pub use falloc::Falloc;
pub use grow::{grow, Grown};
pub use inode::Kind;
pub use journal::Replay;
pub use layout::{MAX_FILE_SIZE, NAME_MAX, SYMLINK_MAX};
#[doc(hidden)]
pub use pm::Faults;
pub use pmkit_media::Protect;
pub use ptr::seal_pointer;
pub use repair::{
    repair, repair_with, reseal_inode, Fix, GeometryHint, RepairOptions, RepairReport,
};
pub use seek::{Extent, Seek};
pub use tally::{thread_counters, Counters};
pub use xattr::XattrFlags;

/// The superblock mount would use (the valid copy with the higher generation), read only.
pub fn superblock<M: Media>(media: &M) -> Result<layout::Superblock> {
    mount::pick_sb(media).map(|(sb, _)| sb)
}

use parking_lot::{Mutex, RwLock};
use pmkit_media::Media;
use std::collections::HashMap;

/// The root directory's inode number.
pub const ROOT: u64 = layout::ROOT_INO;

/// How writes reach the media (see `docs/fs.md`). Per file (the inode's atomic flag,
/// [`Fs::set_atomic`]); `MountOptions::data` is what new files get.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataMode {
    /// Overwrites in place (streaming stores); durable at return, not atomic.
    #[default]
    InPlace,
    /// Every write all-or-nothing: copy-on-write blocks plus a journaled pointer swap.
    Atomic,
}

#[derive(Clone, Debug)]
pub struct MkfsOptions {
    /// Inodes in the table (the root and the meta inode included); 0 scales them with the
    /// pool ([`MkfsOptions::resolved`]).
    pub inodes: u32,
    /// Journal lanes (independent transactions at once); 0 takes one per CPU, at least 8.
    pub lanes: u32,
    /// 64-byte entries per lane.
    pub lane_entries: u32,
}

impl Default for MkfsOptions {
    /// Inodes and lanes scaled with the pool and the machine.
    fn default() -> MkfsOptions {
        MkfsOptions {
            inodes: 0,
            lanes: 0,
            lane_entries: 256,
        }
    }
}

/// Pool bytes per inode when the inode count scales with the pool: ext4's default ratio.
pub const BYTES_PER_INODE: u64 = 16 << 10;
/// The fewest inodes a scaled table gets (a small pool still holds thousands of files).
pub const MIN_SCALED_INODES: u64 = 4096;
/// The most inodes a scaled table gets (a 128 MiB table): mkfs writes the table and a mount
/// after a crash reads it, so a huge sparse pool stays quick to make and to mount. More can be
/// asked for (`inodes`, up to 2^30).
pub const MAX_SCALED_INODES: u64 = 1 << 20;

impl MkfsOptions {
    /// These options for a pool of `bytes`: inodes 0 becomes one per [`BYTES_PER_INODE`] within
    /// [`MIN_SCALED_INODES`]..=[`MAX_SCALED_INODES`] (and never more than an eighth of the pool);
    /// lanes 0 become one per CPU within 8..=64 (and a journal of at most a sixteenth of it).
    pub fn resolved(&self, bytes: u64) -> MkfsOptions {
        let mut o = self.clone();
        if o.inodes == 0 {
            let by_size = (bytes / BYTES_PER_INODE).clamp(MIN_SCALED_INODES, MAX_SCALED_INODES);
            let eighth = bytes / 8 / layout::INODE as u64;
            o.inodes = by_size.min(eighth).max(64) as u32;
        }
        if o.lanes == 0 {
            let cpus = std::thread::available_parallelism().map_or(8, |n| n.get() as u64);
            let lane_bytes = (o.lane_entries.max(1) as u64 + 1) * layout::LINE as u64;
            let fit = (bytes / 16 / lane_bytes).max(1);
            o.lanes = cpus.clamp(8, layout::MAX_LANES as u64).min(fit) as u32;
        }
        debug_assert!(o.inodes > 0 && o.lanes > 0);
        o
    }

    /// The smallest useful geometry, for crash tests.
    /// The smallest useful geometry, for crash tests.
    pub fn tiny() -> MkfsOptions {
        MkfsOptions {
            inodes: 32,
            lanes: 2,
            lane_entries: 64,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct MountOptions {
    /// The data mode of files created by this mount (each file keeps its own: `Fs::set_atomic`).
    pub data: DataMode,
    /// Files created by this mount carry data checksums (each file keeps its own:
    /// `Fs::set_sums`). Needs a pool of format 6 or later: the mount is refused otherwise.
    pub checksum: bool,
    /// Never allocate 2 MiB blocks (4 KiB only): for comparisons.
    pub small_blocks: bool,
    /// Never preallocate blocks beyond the end of a file on append: for comparisons (every
    /// append that starts a block is then a transaction).
    pub no_prealloc: bool,
    /// How PM is protected from stray stores (see `docs/fs.md`, Protection).
    pub protect: Option<Protect>,
    /// Emulated persistence-barrier latency: every fence takes at least this many more
    /// nanoseconds (PMFS's Fig. 15c; at most `pmkit_media::emulate::MAX_BARRIER_NS`).
    pub barrier_ns: u64,
    /// Walk and check the whole tree even after a clean unmount, instead of loading the
    /// allocator from the checkpoint that unmount saved (mounts after a crash always walk).
    pub full_walk: bool,
    /// When reads store access times (relatime by default).
    pub atime: Atime,
    #[doc(hidden)]
    pub faults: Faults,
}

impl MountOptions {
    /// The defaults, changed by the environment as the C ABI and the LD_PRELOAD shim read it:
    /// `PMFS_PROTECT=auto|none|kernel|pkey|pt`, `PMFS_BARRIER_NS=N` (an emulated slower
    /// persistence barrier: every fence at least N ns more), `PMFS_ATIME=relatime|noatime|strictatime` and `PMFS_FULL_WALK=1` (walk and
    /// check the whole pool even after a clean unmount) and `PMFS_CHECKSUM=1` (new files carry data
    /// checksums). Err names the variable that is wrong.
    pub fn from_env() -> std::result::Result<MountOptions, String> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let mut o = MountOptions::default();
        if let Some(v) = var("PMFS_PROTECT") {
            o.protect = Protect::parse_choice(&v).map_err(|e| format!("PMFS_PROTECT: {e}"))?;
        }
        if let Some(v) = var("PMFS_BARRIER_NS") {
            o.barrier_ns = v
                .parse()
                .map_err(|_| format!("PMFS_BARRIER_NS={v:?} is not a number of nanoseconds"))?;
        }
        if let Some(v) = var("PMFS_ATIME") {
            o.atime = Atime::parse(&v)
                .ok_or_else(|| format!("PMFS_ATIME={v:?}: relatime, noatime or strictatime"))?;
        }
        if let Some(v) = var("PMFS_CHECKSUM") {
            o.checksum = match v.as_str() {
                "1" => true,
                "0" => false,
                _ => return Err(format!("PMFS_CHECKSUM={v:?}: 1 or 0")),
            };
        }
        if let Some(v) = var("PMFS_FULL_WALK") {
            o.full_walk = match v.as_str() {
                "1" => true,
                "0" => false,
                _ => return Err(format!("PMFS_FULL_WALK={v:?}: 1 or 0")),
            };
        }
        Ok(o)
    }
}

/// What a mount found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The superblock said the last unmount was clean.
    pub was_clean: bool,
    pub journal: Replay,
    /// Orphans finished (freed, or truncated to their target).
    pub orphans: u32,
    /// A superblock copy was bad and has been rewritten.
    pub superblock_repaired: bool,
    /// The allocator came from the clean-unmount checkpoint: nothing was walked (directory
    /// indexes are read when first used).
    pub from_checkpoint: bool,
    /// Files whose last append a crash cut (its bytes not all on the media): their size went
    /// back to what it was before that append (`tail.rs`).
    pub cut_appends: u32,
}

/// Attributes of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub links: u32,
    /// Permission bits (`0o7777`); the type is `kind`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Nanoseconds since the epoch, negative before it.
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    /// 4 KiB blocks the file uses: data (a huge block counts 512) and radix tree nodes (counted
    /// by a walk of its tree).
    pub blocks: u64,
    /// Writes to this file are all-or-nothing (its inode's atomic flag).
    pub atomic: bool,
    /// The file asks for 2 MiB blocks (its inode's huge flag, `Fs::set_huge`).
    pub huge: bool,
    /// The file's data blocks carry checksums (`Fs::set_sums`).
    pub sums: bool,
    /// Device number (character and block devices; 0 otherwise).
    pub rdev: u32,
}

/// What `setattr` changes (`None`: leave it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    /// Nanoseconds since the epoch, negative before it.
    pub atime: Option<i64>,
    pub mtime: Option<i64>,
    /// On a non-directory, clear set-user-ID, and set-group-ID where group execute is set
    /// (without it the bit means mandatory locking, not privilege), in the same transaction:
    /// what Linux does at chown, and at a write or truncate by a caller without CAP_FSETID.
    pub kill_suidgid: bool,
}

/// Who a new node belongs to (the `*_as` constructors; the plain ones give root).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// `rename` flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RenameFlags {
    #[default]
    Replace,
    NoReplace,
    Exchange,
    /// `RENAME_WHITEOUT` (overlayfs): as `Replace`, and the source name then names a whiteout,
    /// a new character device 0:0 with mode 0, owned by root, in the same transaction.
    Whiteout,
    /// `RENAME_WHITEOUT | RENAME_NOREPLACE`.
    WhiteoutNoReplace,
}

impl RenameFlags {
    /// The flags of renameat2(2); `Invalid` (EINVAL) for a combination Linux refuses.
    pub fn from_linux(flags: u32) -> Result<RenameFlags> {
        const NOREPLACE: u32 = libc::RENAME_NOREPLACE;
        const WHITEOUT: u32 = libc::RENAME_WHITEOUT;
        Ok(match flags {
            0 => RenameFlags::Replace,
            NOREPLACE => RenameFlags::NoReplace,
            libc::RENAME_EXCHANGE => RenameFlags::Exchange,
            WHITEOUT => RenameFlags::Whiteout,
            f if f == WHITEOUT | NOREPLACE => RenameFlags::WhiteoutNoReplace,
            _ => return Err(Error::Invalid("renameat2 flags")),
        })
    }
}

/// One `readdir` entry.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DirEntry {
    pub ino: u64,
    pub kind: Kind,
    pub name: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub free_blocks: u64,
    /// Whole free 2 MiB-aligned chunks: huge blocks a write could get now.
    pub free_huge_blocks: u64,
    pub inodes: u64,
    pub free_inodes: u64,
    pub name_max: u32,
}

/// A mounted file system.
pub struct Fs<M: Media> {
    pm: pm::Pm<M>,
    geo: layout::Geometry,
    opts: MountOptions,
    sb: layout::Superblock,
    /// Directory indexes; namespace operations hold it for writing, the rest for reading. In a
    /// cache line of its own: every reader writes the lock's count, and the read-mostly fields
    /// beside it (the media, the geometry) would otherwise bounce between CPUs with it.
    ns: Line<RwLock<dir::Dirs>>,
    stripes: Vec<Stripe>,
    /// The orphan list, in DRAM order (head first); its lock serializes changes to it.
    orphans: Mutex<Vec<u64>>,
    journal: journal::Journal,
    alloc: Mutex<alloc::Alloc>,
    /// How many blocks are shared (`alloc.shares`' count, stored under its lock): every write
    /// reads it without the lock, and looks for shared blocks only when it is not 0.
    shared_count: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// How many files hold preallocation (`alloc.preallocated`'s count, stored under its lock),
    /// read by every write without the lock: `reclaim.rs` trims only past its bound.
    prealloc_files: Line<std::sync::atomic::AtomicUsize>,
    /// Where every inode lies, and a bit per inode whose tree has been checked this mount
    /// (`Fs::verified`): all of them after a walk, none after a mount from the clean-unmount
    /// checkpoint.
    itable: itable::Itable,
    /// File ranges mapped for direct access, by inode (see `xip.rs`).
    pins: Mutex<HashMap<u64, Vec<(u64, u64)>>>,
    /// Damage met on first use after a mount from the checkpoint (`attr.rs`): those inodes
    /// answer EIO, and unmount leaves the pool unclean so the next mount walks it all.
    damage: Mutex<damage::Damage>,
    /// Where the data checksum table is (`sums.rs`).
    sums: sums::Table,
}

impl<M: Media> std::fmt::Debug for Fs<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fs")
            .field("geometry", &self.geo)
            .finish_non_exhaustive()
    }
}

/// A value alone in its cache line (two lines: the adjacent-line prefetcher pairs them).
#[repr(align(128))]
pub(crate) struct Line<T>(pub(crate) T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// One inode lock stripe, alone in its cache line: two threads on two files would otherwise
/// pass the line holding both stripes back and forth on every lock and unlock.
#[repr(align(64))]
#[derive(Default)]
pub(crate) struct Stripe(pub(crate) Mutex<()>);
