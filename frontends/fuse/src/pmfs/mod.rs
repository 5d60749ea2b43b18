//! PMFS (`pmkit-fs`) as a FUSE file system: each FUSE low-level operation is one call of the
//! library, by inode number (FUSE's root, 1, is the library's `ROOT`). The library does the
//! work, the locking and the durability; this layer converts types and maps typed errors to
//! errno (`pmkit_fs::Error::errno`).
//!
//! [`PmfsOps`] holds the handlers, one per operation, with plain arguments and typed answers,
//! whatever carries the requests: `pmfs/dev.rs` drives them from fuser (/dev/fuse), and
//! `pmfs/uring.rs` from FUSE over io_uring's ring buffers, so both transports answer every
//! request with the same code. `pmfs/mount.rs` runs the session; `pmfs/xattrs.rs` holds the
//! xattr handlers and the per-file flags served as virtual xattrs.
//!
//! Kernel caching (see docs/fs.md, "The FUSE mount"): no writeback cache (a `write` reaches the
//! library, and so PM, before it returns); the page cache is used write-through for reads and
//! mmap; how long attributes, names and pages may be kept is the mount's [`CacheMode`] (every
//! change goes through this kernel, which invalidates what it changes).

pub mod cache;
mod copy;
mod gone;
mod listing;
pub mod mount;
pub mod peers;
mod refs;
pub mod stats;
mod xattrs;
pub use xattrs::{ATOMIC_XATTR, CHECKSUM_XATTR, HUGE_XATTR};

use crate::ops::{
    AddEntry, AddEntryPlus, CopyRange, Entry, Errno, Opened, Ops, Statfs, WriteHow, Xattr, R,
};
use cache::CacheMode;
use fuser::{FileAttr, FileType, FopenFlags, INodeNo, InitFlags, KernelConfig};
use listing::Listing;
use parking_lot::Mutex;
use pmkit_fs::{Attr, Fs, Kind, Owner, SetAttr};
use pmkit_media::{Media, Region};
use stats::{Op, OpStats};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Largest write request.
pub const MAX_WRITE: u32 = crate::abi::MAX_PAYLOAD;

/// The handlers over a mounted PMFS, shared by both transports. Generic over the media, so a
/// test drives them in process (no root, no /dev/fuse) on any `Media`.
pub struct PmfsOps<M: Media = Region> {
    fs: Arc<Fs<M>>,
    /// Generation of each inode slot created in this session: a slot freed and used again gets
    /// a new one, so the kernel never takes a new file for an old one it still remembers.
    gens: Mutex<HashMap<u64, u64>>,
    next_gen: AtomicU64,
    /// Directories removed while a process may hold them (`gone.rs`).
    gone: Mutex<gone::Gone>,
    /// Every change is EROFS (`--read-only`; the kernel refuses them first on a read-only
    /// mount, but a `mount -o remount,rw` does not ask the daemon).
    read_only: bool,
    /// Directory listings taken at opendir (and again at a rewind), by handle: a listing read
    /// in several calls neither skips nor repeats an entry that stays.
    listings: Mutex<HashMap<u64, Listing>>,
    next_fh: AtomicU64,
    stats: Arc<OpStats>,
    cache: CacheMode,
    /// `cache.ttl()`.
    ttl: Duration,
    /// The open flags every open and create replies with.
    fopen: FopenFlags,
    /// Opens without OPEN (`refs.rs`).
    refs: refs::Refs,
}

fn errno(e: pmkit_fs::Error) -> Errno {
    if e.errno() == libc::EIO {
        tracing::warn!("pmfs: {e}");
    }
    e.errno()
}

/// Test-only failpoint: a LOOKUP of the name in `PMKIT_FS_TEST_STALL` never returns, as a
/// handler stuck on a bug would not, so the tests can prove that a stop signal and `pmkit fs
/// umount` still end the mount and free the caller (the FUSE connection is aborted).
fn stall_if_asked(name: &[u8]) {
    static STALL: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
    let stall = STALL.get_or_init(|| {
        std::env::var_os("PMKIT_FS_TEST_STALL")
            .map(|v| std::os::unix::ffi::OsStrExt::as_bytes(v.as_os_str()).to_vec())
    });
    if stall.as_deref() == Some(name) {
        tracing::warn!("PMKIT_FS_TEST_STALL: this lookup never returns");
        loop {
            std::thread::park();
        }
    }
}

/// The time `ns` nanoseconds after the epoch (before it, when negative).
fn time(ns: i64) -> SystemTime {
    let d = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

pub use crate::ops::ns_of;

pub fn file_type(k: Kind) -> FileType {
    match k {
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDev => FileType::CharDevice,
        Kind::BlockDev => FileType::BlockDevice,
        Kind::File | Kind::Free => FileType::RegularFile,
    }
}

/// The kernel's view of `a`.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks * 8,
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind: file_type(a.kind),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.links,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 4096,
        flags: 0,
    }
}

impl<M: Media> PmfsOps<M> {
    pub fn new(fs: Arc<Fs<M>>, cache: CacheMode, stats: Arc<OpStats>) -> PmfsOps<M> {
        PmfsOps {
            stats,
            fs,
            gens: Mutex::new(HashMap::new()),
            next_gen: AtomicU64::new(1),
            gone: Mutex::new(gone::Gone::default()),
            read_only: false,
            listings: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            cache,
            ttl: cache.ttl(),
            // No FLUSH at close: a returned write is already durable, so `flush` has nothing
            // to do, and skipping it saves a round trip per close.
            fopen: if cache.keep_pages() {
                FopenFlags::FOPEN_NOFLUSH | FopenFlags::FOPEN_KEEP_CACHE
            } else {
                FopenFlags::FOPEN_NOFLUSH
            },
            refs: refs::Refs::new(cache.keep_pages()),
        }
    }

    /// One call of the library, counted in the statistics as a request of kind `op`.
    /// These handlers refuse every change with EROFS.
    pub fn with_read_only(self, read_only: bool) -> PmfsOps<M> {
        PmfsOps { read_only, ..self }
    }

    fn lib<T>(&self, op: Op, f: impl FnOnce(&Fs<M>) -> pmkit_fs::Result<T>) -> R<T> {
        if self.read_only && op.modifies() {
            return Err(libc::EROFS);
        }
        let t = self.stats.start(op);
        let r = f(&self.fs);
        t.done(r.is_ok());
        r.map_err(errno)
    }

    fn gen(&self, ino: u64) -> u64 {
        self.gens.lock().get(&ino).copied().unwrap_or(0)
    }

    /// The entry of a call that made a new inode: a new generation.
    fn created(&self, a: Attr) -> Entry {
        self.refs.hold(&self.fs, &a);
        let g = self.next_gen.fetch_add(1, Ordering::Relaxed);
        self.gens.lock().insert(a.ino, g);
        self.gone.lock().reused(a.ino);
        Entry {
            attr: file_attr(&a),
            generation: g,
        }
    }

    fn entry(&self, a: Attr) -> Entry {
        Entry {
            attr: file_attr(&a),
            generation: self.gen(a.ino),
        }
    }

    /// What the kernel does for other file systems when a regular file is written, truncated or
    /// chowned, and leaves to us under `HANDLE_KILLPRIV_V2`: with `suidgid`, clear set-user-ID,
    /// and set-group-ID where group execute is set (without it the bit means mandatory locking,
    /// not privilege). File capabilities (`security.capability`) are dropped by the library
    /// itself at every write, truncate and chown, whoever makes it, as Linux drops them.
    pub fn kill_privs(&self, ino: u64, suidgid: bool) -> R<()> {
        if !suidgid {
            return Ok(());
        }
        if self.read_only {
            return Err(libc::EROFS);
        }
        // Part of the write's work, not a request of its own: not counted in the statistics.
        self.fs.kill_suidgid(ino).map_err(errno)
    }
}

impl<M: Media> Ops for PmfsOps<M> {
    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn label(&self) -> &'static str {
        "pmfs"
    }

    fn init(&self, config: &mut KernelConfig) {
        let _ = config.set_max_write(MAX_WRITE);
        // The file system clears set-user-ID/set-group-ID bits and file capabilities on write,
        // truncate and chown (`PmfsOps::kill_privs`). Without this the kernel asks for
        // `security.capability` before every write: a second round trip per write.
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // Listings with attributes where the kernel may keep them: a pass over a directory
        // then also refreshes its entries (no LOOKUP per entry after). AUTO: the kernel asks
        // for them at a listing's start and where lookups followed one, plain READDIR else.
        if self.ttl > Duration::ZERO {
            let _ = config.add_capabilities(
                InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO,
            );
        }
        if self.cache.writeback() {
            // Writes land in the page cache; the kernel writes them back at fsync and close.
            if config
                .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
                .is_err()
            {
                tracing::warn!(
                    "the kernel refused the write-back cache: writes stay durable on return"
                );
            }
        }
    }

    fn lookup(&self, parent: u64, name: &[u8]) -> R<Entry> {
        let found = self.lib(Op::Lookup, |fs| {
            stall_if_asked(name);
            fs.lookup(parent, name)
        });
        match found {
            // A negative entry (inode 0): the kernel remembers the name is missing until it
            // makes it itself or the TTL ends.
            Err(libc::ENOENT) if self.cache.negative() => Ok(Entry {
                attr: FileAttr {
                    ino: INodeNo(0),
                    size: 0,
                    blocks: 0,
                    atime: UNIX_EPOCH,
                    mtime: UNIX_EPOCH,
                    ctime: UNIX_EPOCH,
                    crtime: UNIX_EPOCH,
                    kind: FileType::RegularFile,
                    perm: 0,
                    nlink: 0,
                    uid: 0,
                    gid: 0,
                    rdev: 0,
                    blksize: 4096,
                    flags: 0,
                },
                generation: 0,
            }),
            r => r.map(|a| {
                self.refs.hold(&self.fs, &a);
                self.entry(a)
            }),
        }
    }

    /// Under `--cache long` the kernel's references to files were opens (`refs.rs`).
    fn forget(&self, ino: u64, nlookup: u64) {
        self.refs.forget(&self.fs, ino, nlookup)
    }

    /// A directory removed while held answers with no links, as Linux's does (`gone.rs`).
    fn getattr(&self, ino: u64) -> R<FileAttr> {
        let r = self.lib(Op::Getattr, |fs| fs.getattr(ino));
        let r = r.or_else(|e| self.gone.lock().get(ino, self.gen(ino)).ok_or(e));
        self.refs.attrs_sent(ino);
        r.map(|a| file_attr(&a))
    }

    /// `truncate_kills`: a truncate in `s` must clear set-user-ID/set-group-ID (the caller lacks
    /// CAP_FSETID). Under `HANDLE_KILLPRIV_V2` a chown clears them whoever calls it, on every
    /// non-directory, as chown(2) does; in the chown's own transaction (`SetAttr::kill_suidgid`).
    fn setattr(&self, ino: u64, s: &SetAttr, truncate_kills: bool) -> R<FileAttr> {
        let chown = s.uid.is_some() || s.gid.is_some();
        let s = SetAttr {
            kill_suidgid: s.mode.is_none() && (chown || (s.size.is_some() && truncate_kills)),
            ..*s
        };
        let a = self.lib(Op::Setattr, |fs| fs.setattr(ino, &s))?;
        self.refs.attrs_sent(ino);
        Ok(file_attr(&a))
    }

    fn readlink(&self, ino: u64) -> R<Vec<u8>> {
        self.lib(Op::Readlink, |fs| fs.readlink(ino))
    }

    fn mknod(&self, o: Owner, parent: u64, name: &[u8], mode: u32, rdev: u32) -> R<Entry> {
        self.lib(Op::Mknod, |fs| fs.mknod_as(o, parent, name, mode, rdev))
            .map(|a| self.created(a))
    }

    fn mkdir(&self, o: Owner, parent: u64, name: &[u8], mode: u32) -> R<Entry> {
        self.lib(Op::Mkdir, |fs| fs.mkdir_as(o, parent, name, mode))
            .map(|a| self.created(a))
    }

    fn unlink(&self, parent: u64, name: &[u8]) -> R<()> {
        self.lib(Op::Unlink, |fs| fs.unlink(parent, name))
    }

    fn rmdir(&self, parent: u64, name: &[u8]) -> R<()> {
        self.removing(parent, name, || {
            self.lib(Op::Rmdir, |fs| fs.rmdir(parent, name))
        })
    }

    fn symlink(&self, o: Owner, parent: u64, name: &[u8], target: &[u8]) -> R<Entry> {
        self.lib(Op::Symlink, |fs| fs.symlink_as(o, parent, name, target))
            .map(|a| self.created(a))
    }

    /// `flags`: the `RENAME_*` bits of rename(2).
    fn rename(&self, parent: u64, name: &[u8], to: u64, to_name: &[u8], flags: u32) -> R<()> {
        let f = pmkit_fs::RenameFlags::from_linux(flags).map_err(errno)?;
        let rename = || self.lib(Op::Rename, |fs| fs.rename(parent, name, to, to_name, f));
        match f {
            pmkit_fs::RenameFlags::Replace | pmkit_fs::RenameFlags::Whiteout => {
                self.removing(to, to_name, rename)
            }
            _ => rename(),
        }
    }

    fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> R<Entry> {
        // A file with no links (`link`'s NotFound) the kernel asks to name is an O_TMPFILE's:
        // the kernel links no other unlinked file (I_LINKABLE), and `link_tmpfile` refuses any
        // other. Tried second, so a plain link costs nothing more.
        self.lib(Op::Link, |fs| match fs.link(ino, newparent, newname) {
            Err(pmkit_fs::Error::NotFound) => fs.link_tmpfile(ino, newparent, newname),
            r => r,
        })
        .map(|a| {
            self.refs.hold(&self.fs, &a);
            self.entry(a)
        })
    }

    fn open(&self, ino: u64) -> R<Opened> {
        // O_TRUNC arrives as a setattr before the open (no atomic_o_trunc).
        if self.refs.refuse_open() {
            return Err(libc::ENOSYS); // no OPEN from now on (`refs.rs`)
        }
        self.lib(Op::Open, |fs| fs.open(ino))?;
        Ok(Opened {
            fh: 0,
            flags: self.fopen,
        })
    }

    fn read(&self, ino: u64, offset: u64, buf: &mut [u8]) -> R<usize> {
        self.lib(Op::Read, |fs| fs.read_into(ino, offset, buf))
    }

    /// Durable when it returns (PM written and persisted), so FUA asks nothing more.
    /// `kill_suidgid`: clear set-user-ID and set-group-ID ([`PmfsOps::kill_privs`]).
    fn write(&self, ino: u64, offset: u64, data: &[u8], how: WriteHow) -> R<u32> {
        self.kill_privs(ino, how.kill_suidgid)?;
        self.refs.attrs_dropped(ino); // the kernel drops size, times and blocks after a write
        self.lib(Op::Write, |fs| fs.write(ino, offset, data))
            .map(|n| n as u32)
    }

    /// Every write is durable when it returned: nothing is buffered to flush at close. Files
    /// opened without OPEN carry no `FOPEN_NOFLUSH`: ENOSYS makes the kernel stop asking.
    fn flush(&self) -> R<()> {
        if self.refs.no_open {
            return Err(libc::ENOSYS);
        }
        Ok(())
    }

    /// Without OPEN only a counted CREATE's handle was an open (`refs.rs`).
    fn release(&self, ino: u64, fh: u64) -> R<()> {
        if !self.refs.counted(fh) {
            return Ok(());
        }
        self.lib(Op::Release, |fs| fs.release(ino))
    }

    /// Nothing to do (every change was durable when its request returned), but answered, never
    /// ENOSYS: after the daemon dies the kernel drops dirty pages (mappings, `--cache writeback`)
    /// silently, and only this request failing then fails the fsync (docs/fs.md).
    fn fsync(&self, ino: u64) -> R<()> {
        self.lib(Op::Fsync, |fs| fs.fsync(ino))
    }

    /// No pages to write back: ENOSYS, and the kernel sends no more (`no_fsyncdir`).
    fn fsyncdir(&self, ino: u64) -> R<()> {
        self.lib(Op::Fsync, |fs| fs.fsync(ino))
            .and(Err(libc::ENOSYS))
    }

    /// Under `--cache long` and `writeback` the kernel may keep the listing in the directory's
    /// page cache across opens: it drops it itself whenever the directory changes through this
    /// mount (and when a peer changes it, `peers.rs`). There OPENDIR is answered ENOSYS (after
    /// the checks: a missing directory is still ENOENT), so the kernel opens directories
    /// without a request, no RELEASEDIR follows, and it keeps the listing as if
    /// `FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE` were answered (`listing.rs`): a pass over a cached
    /// directory costs no request at all.
    fn opendir(&self, ino: u64) -> R<Opened> {
        self.lib(Op::Opendir, |fs| fs.opendir(ino))?;
        if self.no_opendir() {
            return Err(libc::ENOSYS);
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.listings.lock().insert(fh, Listing::default());
        Ok(Opened {
            fh,
            flags: FopenFlags::empty(),
        })
    }

    /// The entries of directory `ino` (handle `fh`, or none) from `offset` on, each given to
    /// `add` with the offset of the next; `add` returns true when the reply is full.
    fn readdir(&self, ino: u64, fh: u64, offset: u64, add: &mut AddEntry<'_>) -> R<()> {
        self.entries(ino, fh, offset, &mut |e, next| match add(
            e.ino,
            next,
            file_type(e.kind),
            &e.name,
        ) {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        })
    }

    /// Each entry with its attributes where the kernel lacks them (`listing.rs`).
    fn readdirplus(&self, ino: u64, fh: u64, offset: u64, add: &mut AddEntryPlus<'_>) -> R<()> {
        self.listing_plus(ino, fh, offset, add)
    }

    fn releasedir(&self, fh: u64) -> R<()> {
        self.listings.lock().remove(&fh);
        Ok(())
    }

    fn statfs(&self) -> Statfs {
        let t = self.stats.start(Op::Statfs);
        let s = self.fs.statfs();
        t.done(true);
        Statfs {
            blocks: s.blocks,
            bfree: s.free_blocks,
            bavail: s.free_blocks,
            files: s.inodes,
            ffree: s.free_inodes,
            bsize: s.block_size,
            namelen: s.name_max,
        }
    }

    fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32, pos: u32) -> R<()> {
        self.xattr_set(ino, name, value, flags, pos)
    }

    fn getxattr(&self, ino: u64, name: &[u8], size: u32) -> R<Xattr> {
        self.xattr_get(ino, name, size)
    }

    fn listxattr(&self, ino: u64, size: u32) -> R<Xattr> {
        self.xattr_list(ino, size)
    }

    fn removexattr(&self, ino: u64, name: &[u8]) -> R<()> {
        self.xattr_remove(ino, name)
    }

    /// Where opens cost no request (`refs.no_open`), CREATE is answered ENOSYS: the kernel then
    /// makes every file with MKNOD and opens it without asking (its `no_create`), so a create
    /// is three requests (LOOKUP, MKNOD, the directory's GETATTR) instead of four: a CREATE's
    /// handle would bring a RELEASE at its close, which nothing else needs.
    fn create(&self, o: Owner, parent: u64, name: &[u8], mode: u32) -> R<(Entry, Opened)> {
        if self.refs.no_open {
            return Err(libc::ENOSYS);
        }
        let counted = self.refs.count_create();
        let a = self.lib(Op::Create, |fs| {
            fs.create_as(o, parent, name, mode)
                .and_then(|a| if counted { fs.open(a.ino) } else { Ok(()) }.map(|()| a))
        })?;
        let opened = Opened {
            fh: if counted { refs::COUNTED } else { 0 },
            flags: self.fopen,
        };
        Ok((self.created(a), opened))
    }

    fn tmpfile(&self, o: Owner, parent: u64, mode: u32) -> R<(Entry, Opened)> {
        let counted = self.refs.count_create();
        // `tmpfile_as` counts one open: the handle's, while RELEASE still comes (as CREATE's).
        let a = self.lib(Op::Create, |fs| fs.tmpfile_as(o, parent, mode))?;
        // The kernel's reference first (`hold`), so giving the handle's count back below
        // cannot free the file.
        let ino = a.ino;
        let entry = self.created(a);
        if !counted {
            let _ = self.fs.release(ino);
        }
        let opened = Opened {
            fh: if counted { refs::COUNTED } else { 0 },
            flags: self.fopen,
        };
        Ok((entry, opened))
    }

    /// LSEEK: the kernel asks only for SEEK_DATA and SEEK_HOLE (it answers the others from its
    /// own offset and the size it knows).
    fn lseek(&self, ino: u64, offset: i64, whence: i32) -> R<u64> {
        let to = match whence {
            libc::SEEK_DATA => pmkit_fs::Seek::Data,
            libc::SEEK_HOLE => pmkit_fs::Seek::Hole,
            _ => return Err(libc::EINVAL),
        };
        let off = u64::try_from(offset).map_err(|_| libc::ENXIO)?;
        self.lib(Op::Lseek, |fs| fs.seek(ino, off, to))
    }

    fn fallocate(&self, ino: u64, offset: u64, length: u64, mode: i32) -> R<()> {
        // COLLAPSE/INSERT_RANGE: EOPNOTSUPP (the library shifts no blocks)
        let m = pmkit_fs::Falloc::from_mode(mode).map_err(errno)?;
        self.refs.attrs_dropped(ino);
        self.lib(Op::Fallocate, |fs| {
            fs.fallocate_mode(ino, offset, length, m)
        })
    }

    fn copy_file_range(&self, o: Owner, c: &CopyRange) -> R<u32> {
        self.refs.attrs_dropped(c.to.0);
        self.copy(o, c)
    }
}
