//! The one typed set of FUSE operations, whatever carries the requests: `answer.rs` decodes a
//! request once, from /dev/fuse (`dev.rs`) or FUSE over io_uring (`uring/`), and calls the
//! method here. PMFS (`pmfs::PmfsOps`) and the block device file (`file::Core`) implement it;
//! what a file system does not serve answers ENOSYS (the kernel remembers that for optional
//! operations).

use fuser::{FileAttr, FileType, FopenFlags, KernelConfig};
use pmkit_fs::{Owner, SetAttr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A positive errno.
pub type Errno = i32;
pub type R<T> = std::result::Result<T, Errno>;

/// A name the kernel now knows: its attributes and generation (`fuse_entry_out`).
pub struct Entry {
    pub attr: FileAttr,
    pub generation: u64,
}

/// An open handle and the `FOPEN_*` flags to answer with (`fuse_open_out`).
#[derive(Clone, Copy)]
pub struct Opened {
    pub fh: u64,
    pub flags: FopenFlags,
}

/// An xattr answer: the size when asked with size 0, else the bytes.
pub enum Xattr {
    Size(u32),
    Data(Vec<u8>),
}

/// How a WRITE asks to be done.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteHow {
    /// The kernel asks the write to clear set-user-ID and set-group-ID (`HANDLE_KILLPRIV_V2`).
    pub kill_suidgid: bool,
    /// The file was opened `O_SYNC` or `O_DSYNC`: durable on return (FUA).
    pub fua: bool,
}

impl WriteHow {
    /// From the request's kill flag (`FUSE_WRITE_KILL_SUIDGID`, which each transport reads
    /// from its own form of the write flags) and the open flags of its file.
    pub fn of(kill_suidgid: bool, open_flags: i32) -> WriteHow {
        WriteHow {
            kill_suidgid,
            fua: open_flags & (libc::O_SYNC | libc::O_DSYNC) != 0,
        }
    }
}

/// `statfs`'s answer (`fuse_kstatfs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Statfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
}

/// Called by `readdir` for each entry with (inode, offset of the next, type, name); returns
/// true when the reply is full.
pub type AddEntry<'a> = dyn FnMut(u64, u64, FileType, &[u8]) -> bool + 'a;

/// Called by `readdirplus` for each entry with (its entry, offset of the next, name); returns
/// true when the reply is full, and the entry was then not added.
pub type AddEntryPlus<'a> = dyn FnMut(PlusEntry<'_>, u64, &[u8]) -> bool + 'a;

/// One entry of a READDIRPLUS reply.
#[derive(Clone, Copy)]
pub enum PlusEntry<'e> {
    /// With its attributes and generation: the kernel takes it as a lookup (FORGET gives it
    /// back) and caches the attributes.
    Full(&'e Entry),
    /// The name alone (node 0 in its `fuse_entry_out`): the kernel lists it and takes no
    /// reference, as from a READDIR.
    Bare { ino: u64, kind: FileType },
}

impl PlusEntry<'_> {
    /// The entry's inode number.
    pub fn ino(&self) -> u64 {
        match self {
            PlusEntry::Full(e) => e.attr.ino.into(),
            PlusEntry::Bare { ino, .. } => *ino,
        }
    }
}

/// Nanoseconds since the epoch of `t` (`None`: now), negative before it, clamped to what an
/// inode holds.
pub fn ns_of(t: Option<SystemTime>) -> i64 {
    match t.unwrap_or_else(SystemTime::now).duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

fn nosys<T>() -> R<T> {
    Err(libc::ENOSYS)
}

/// The operations of a FUSE file system, by inode number (FUSE's root is 1), with plain
/// arguments and typed answers. Errors are positive errno values.
#[allow(unused_variables)] // the defaults ignore their arguments
pub trait Ops: Send + Sync {
    /// How long the kernel may keep names and attributes.
    fn ttl(&self) -> Duration;
    /// Limits and capabilities to ask for at INIT (the transport adds FUSE over io_uring).
    fn init(&self, config: &mut KernelConfig) {}
    /// What the log calls this file system.
    fn label(&self) -> &'static str;

    fn lookup(&self, parent: u64, name: &[u8]) -> R<Entry>;
    fn getattr(&self, ino: u64) -> R<FileAttr>;
    /// `truncate_kills`: the kernel says a truncate clears set-user-ID and set-group-ID.
    fn setattr(&self, ino: u64, s: &SetAttr, truncate_kills: bool) -> R<FileAttr> {
        nosys()
    }
    fn readlink(&self, ino: u64) -> R<Vec<u8>> {
        nosys()
    }
    fn mknod(&self, o: Owner, parent: u64, name: &[u8], mode: u32, rdev: u32) -> R<Entry> {
        nosys()
    }
    fn mkdir(&self, o: Owner, parent: u64, name: &[u8], mode: u32) -> R<Entry> {
        nosys()
    }
    fn unlink(&self, parent: u64, name: &[u8]) -> R<()> {
        nosys()
    }
    fn rmdir(&self, parent: u64, name: &[u8]) -> R<()> {
        nosys()
    }
    fn symlink(&self, o: Owner, parent: u64, name: &[u8], target: &[u8]) -> R<Entry> {
        nosys()
    }
    fn rename(&self, parent: u64, name: &[u8], to: u64, to_name: &[u8], flags: u32) -> R<()> {
        nosys()
    }
    fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> R<Entry> {
        nosys()
    }
    fn open(&self, ino: u64) -> R<Opened>;
    /// Up to `buf.len()` bytes at `offset` into `buf` (the transport's reply buffer): the
    /// bytes read, 0 at or past the end.
    fn read(&self, ino: u64, offset: u64, buf: &mut [u8]) -> R<usize>;
    /// The bytes written.
    fn write(&self, ino: u64, offset: u64, data: &[u8], how: WriteHow) -> R<u32>;
    /// close(): nothing buffered by default (durability is fsync's job).
    fn flush(&self) -> R<()> {
        Ok(())
    }
    /// The last close of a handle `fh` that OPEN or CREATE gave.
    fn release(&self, ino: u64, fh: u64) -> R<()> {
        Ok(())
    }
    /// The kernel drops `nlookup` references to `ino` (FORGET, BATCH_FORGET: no reply).
    fn forget(&self, ino: u64, nlookup: u64) {}
    /// fsync (and fsyncdir, unless `fsyncdir` says otherwise).
    fn fsync(&self, ino: u64) -> R<()>;
    /// fsyncdir: `fsync` unless a file system answers it otherwise.
    fn fsyncdir(&self, ino: u64) -> R<()> {
        self.fsync(ino)
    }
    fn opendir(&self, ino: u64) -> R<Opened>;
    /// The entries of directory `ino` (handle `fh`) from `offset` on, each given to `add`.
    fn readdir(&self, ino: u64, fh: u64, offset: u64, add: &mut AddEntry<'_>) -> R<()>;
    /// READDIRPLUS: `readdir` with each entry's attributes, which the kernel takes as a lookup
    /// of every entry but `.` and `..` (each later given back by FORGET). ENOSYS: not served
    /// (the kernel is asked for it only by a file system that says so at INIT).
    fn readdirplus(&self, ino: u64, fh: u64, offset: u64, add: &mut AddEntryPlus<'_>) -> R<()> {
        let _ = (ino, fh, offset, add);
        Err(libc::ENOSYS)
    }
    fn releasedir(&self, fh: u64) -> R<()> {
        Ok(())
    }
    fn statfs(&self) -> Statfs;
    fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32, pos: u32) -> R<()> {
        nosys()
    }
    fn getxattr(&self, ino: u64, name: &[u8], size: u32) -> R<Xattr> {
        nosys()
    }
    fn listxattr(&self, ino: u64, size: u32) -> R<Xattr> {
        nosys()
    }
    fn removexattr(&self, ino: u64, name: &[u8]) -> R<()> {
        nosys()
    }
    fn create(&self, o: Owner, parent: u64, name: &[u8], mode: u32) -> R<(Entry, Opened)> {
        nosys()
    }
    /// TMPFILE (`open(dir, O_TMPFILE)`): a regular file with no name in `parent`, opened; LINK
    /// names it later.
    fn tmpfile(&self, o: Owner, parent: u64, mode: u32) -> R<(Entry, Opened)> {
        nosys()
    }
    fn lseek(&self, ino: u64, offset: i64, whence: i32) -> R<u64> {
        nosys()
    }
    fn fallocate(&self, ino: u64, offset: u64, length: u64, mode: i32) -> R<()> {
        nosys()
    }
    /// COPY_FILE_RANGE: up to `c.len` bytes of `c.from` into `c.to`, copied by the file
    /// system; the bytes copied. ENOSYS: the kernel copies through the page cache instead.
    fn copy_file_range(&self, o: Owner, c: &CopyRange) -> R<u32> {
        nosys()
    }
}

/// What a COPY_FILE_RANGE asks: `len` bytes from (inode, offset) `from` to `to`, with
/// copy_file_range(2)'s `flags` (none defined: non-zero is EINVAL).
#[derive(Clone, Copy, Debug)]
pub struct CopyRange {
    pub from: (u64, u64),
    pub to: (u64, u64),
    pub len: u64,
    pub flags: u64,
}
