//! PMFS (`pmkit-fs`) as a FUSE file system: each FUSE low-level operation is one call of the
//! library, by inode number (FUSE's root, 1, is the library's `ROOT`). The library does the
//! work, the locking and the durability; this layer converts types and maps typed errors to
//! errno (`pmkit_fs::Error::errno`). `pmfs_mount.rs` runs the session.
//!
//! Kernel caching (see docs/fs.md, "The FUSE mount"): no writeback cache (a `write` reaches the
//! library, and so PM, before it returns); the page cache is used write-through for reads and
//! mmap; how long attributes, names and pages may be kept is the mount's [`CacheMode`] (every
//! change goes through this kernel, which invalidates what it changes).

use crate::pmfs_cache::CacheMode;
use crate::pmfs_stats::{Op, OpStats};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use pmkit_fs::{Attr, DirEntry, Fs, Kind, Owner, SetAttr, XattrFlags};
use pmkit_media::Region;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Largest write request.
const MAX_WRITE: u32 = 1 << 20;

/// A virtual xattr of regular files: `"1"` when writes to the file are all-or-nothing (its
/// inode's atomic flag, `Fs::set_atomic`), `"0"` when in place. Setting it sets the flag; it
/// is listed but never stored as an xattr, and cannot be removed (EPERM: set "0").
pub const ATOMIC_XATTR: &[u8] = b"user.pmkit.atomic";

/// The FUSE file system over a mounted PMFS.
pub struct PmFs {
    fs: Arc<Fs<Region>>,
    /// Generation of each inode slot created in this session: a slot freed and used again gets
    /// a new one, so the kernel never takes a new file for an old one it still remembers.
    gens: Mutex<HashMap<u64, u64>>,
    next_gen: AtomicU64,
    /// Directory listings taken at opendir (and again at a rewind), by handle: a listing read
    /// in several calls neither skips nor repeats an entry that stays.
    listings: Mutex<HashMap<u64, Arc<Vec<DirEntry>>>>,
    next_fh: AtomicU64,
    stats: Arc<OpStats>,
    cache: CacheMode,
    /// `cache.ttl()`.
    ttl: Duration,
    /// The open flags every open and create replies with.
    fopen: FopenFlags,
}

fn errno(e: pmkit_fs::Error) -> Errno {
    if e.errno() == libc::EIO {
        tracing::warn!("pmfs: {e}");
    }
    Errno::from_i32(e.errno())
}

fn time(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

fn ns_of(t: TimeOrNow) -> u64 {
    let t = match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    };
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn file_type(k: Kind) -> FileType {
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

fn owner(req: &Request) -> Owner {
    Owner {
        uid: req.uid(),
        gid: req.gid(),
    }
}

impl PmFs {
    pub fn new(fs: Arc<Fs<Region>>, cache: CacheMode, stats: Arc<OpStats>) -> PmFs {
        PmFs {
            stats,
            fs,
            gens: Mutex::new(HashMap::new()),
            next_gen: AtomicU64::new(1),
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
        }
    }

    /// One call of the library, counted in the statistics as a request of kind `op`.
    fn lib<T>(
        &self,
        op: Op,
        f: impl FnOnce(&Fs<Region>) -> pmkit_fs::Result<T>,
    ) -> pmkit_fs::Result<T> {
        let t = self.stats.start(op);
        let r = f(&self.fs);
        t.done(r.is_ok());
        r
    }

    fn gen(&self, ino: u64) -> Generation {
        Generation(self.gens.lock().get(&ino).copied().unwrap_or(0))
    }

    /// Reply to a call that made a new inode.
    fn created(&self, r: pmkit_fs::Result<Attr>, reply: ReplyEntry) {
        match r {
            Ok(a) => {
                let g = self.next_gen.fetch_add(1, Ordering::Relaxed);
                self.gens.lock().insert(a.ino, g);
                reply.entry(&self.ttl, &file_attr(&a), Generation(g))
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn entry(&self, r: pmkit_fs::Result<Attr>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry(&self.ttl, &file_attr(&a), self.gen(a.ino)),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// A directory's entries, `.` and `..` first (the library lists them).
    fn listing(&self, ino: u64) -> pmkit_fs::Result<Arc<Vec<DirEntry>>> {
        self.lib(Op::Readdir, |fs| fs.readdir(ino)).map(Arc::new)
    }
}

fn empty(r: pmkit_fs::Result<()>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

/// An xattr reply: the size when asked with size 0, ERANGE when the buffer is too small.
fn xattr_reply(data: &[u8], size: u32, reply: ReplyXattr) {
    if size == 0 {
        reply.size(data.len() as u32)
    } else if (size as usize) < data.len() {
        reply.error(Errno::ERANGE)
    } else {
        reply.data(data)
    }
}

impl Filesystem for PmFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.lib(Op::Lookup, |fs| fs.lookup(parent.into(), name.as_bytes())) {
            // A negative entry (inode 0): the kernel remembers the name is missing until it
            // makes it itself or the TTL ends.
            Err(e) if self.cache.negative() && e.errno() == libc::ENOENT => {
                let missing = FileAttr {
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
                };
                reply.entry(&self.ttl, &missing, Generation(0))
            }
            r => self.entry(r, reply),
        }
    }

    // `forget`: nothing to do. An inode lives while it has links or open handles (the
    // library's open counts and orphan list); the kernel's lookup counts add nothing to that.

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.lib(Op::Getattr, |fs| fs.getattr(ino.into())) {
            Ok(a) => reply.attr(&self.ttl, &file_attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let s = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(ns_of),
            mtime: mtime.map(ns_of),
        };
        match self.lib(Op::Setattr, |fs| fs.setattr(ino.into(), &s)) {
            Ok(a) => reply.attr(&self.ttl, &file_attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.lib(Op::Readlink, |fs| fs.readlink(ino.into())) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = self.lib(Op::Mknod, |fs| {
            fs.mknod_as(owner(req), parent.into(), name.as_bytes(), mode, rdev)
        });
        self.created(r, reply)
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.lib(Op::Mkdir, |fs| {
            fs.mkdir_as(owner(req), parent.into(), name.as_bytes(), mode)
        });
        self.created(r, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            self.lib(Op::Unlink, |fs| fs.unlink(parent.into(), name.as_bytes())),
            reply,
        )
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            self.lib(Op::Rmdir, |fs| fs.rmdir(parent.into(), name.as_bytes())),
            reply,
        )
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.lib(Op::Symlink, |fs| {
            fs.symlink_as(
                owner(req),
                parent.into(),
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
            )
        });
        self.created(r, reply)
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let f = if flags.is_empty() {
            pmkit_fs::RenameFlags::Replace
        } else if flags == RenameFlags::RENAME_NOREPLACE {
            pmkit_fs::RenameFlags::NoReplace
        } else if flags == RenameFlags::RENAME_EXCHANGE {
            pmkit_fs::RenameFlags::Exchange
        } else {
            // RENAME_WHITEOUT (overlayfs) or a combination: not supported.
            return reply.error(Errno::EINVAL);
        };
        let r = self.lib(Op::Rename, |fs| {
            fs.rename(
                parent.into(),
                name.as_bytes(),
                newparent.into(),
                newname.as_bytes(),
                f,
            )
        });
        empty(r, reply)
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.lib(Op::Link, |fs| {
            fs.link(ino.into(), newparent.into(), newname.as_bytes())
        });
        self.entry(r, reply)
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // O_TRUNC arrives as a setattr before the open (no atomic_o_trunc).
        match self.lib(Op::Open, |fs| fs.open(ino.into())) {
            Ok(()) => reply.opened(FileHandle(0), self.fopen),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.lib(Op::Read, |fs| fs.read(ino.into(), offset, size as usize)) {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.lib(Op::Write, |fs| fs.write(ino.into(), offset, data)) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Every write is durable when it returned: nothing is buffered to flush at close.
        reply.ok()
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        empty(self.lib(Op::Release, |fs| fs.release(ino.into())), reply)
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(self.lib(Op::Fsync, |fs| fs.fsync(ino.into())), reply)
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.listing(ino.into()) {
            Ok(l) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.listings.lock().insert(fh, l);
                reply.opened(FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let fh = u64::from(fh);
        let cached = self.listings.lock().get(&fh).cloned();
        let list = match cached {
            // A rewind (offset 0) lists again.
            Some(l) if offset > 0 => l,
            _ => match self.listing(ino.into()) {
                Ok(l) => {
                    self.listings.lock().insert(fh, Arc::clone(&l));
                    l
                }
                Err(e) => return reply.error(errno(e)),
            },
        };
        for (i, e) in list.iter().enumerate().skip(offset as usize) {
            let name = OsStr::from_bytes(&e.name);
            if reply.add(INodeNo(e.ino), i as u64 + 1, file_type(e.kind), name) {
                break;
            }
        }
        reply.ok()
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.listings.lock().remove(&u64::from(fh));
        reply.ok()
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(self.lib(Op::Fsync, |fs| fs.fsync(ino.into())), reply)
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let t = self.stats.start(Op::Statfs);
        let s = self.fs.statfs();
        t.done(true);
        reply.statfs(
            s.blocks,
            s.free_blocks,
            s.free_blocks,
            s.inodes,
            s.free_inodes,
            s.block_size,
            s.name_max,
            s.block_size,
        )
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        if position != 0 {
            return reply.error(Errno::EINVAL);
        }
        let f = match flags {
            0 => XattrFlags::Either,
            libc::XATTR_CREATE => XattrFlags::Create,
            libc::XATTR_REPLACE => XattrFlags::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        if name.as_bytes() == ATOMIC_XATTR {
            let on = match value {
                b"1" => true,
                b"0" => false,
                _ => return reply.error(Errno::EINVAL),
            };
            if f == XattrFlags::Create {
                return reply.error(Errno::EEXIST); // every regular file has it
            }
            return empty(
                self.lib(Op::Xattr, |fs| fs.set_atomic(ino.into(), on)),
                reply,
            );
        }
        empty(
            self.lib(Op::Xattr, |fs| {
                fs.setxattr(ino.into(), name.as_bytes(), value, f)
            }),
            reply,
        )
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if name.as_bytes() == ATOMIC_XATTR {
            return match self.lib(Op::Xattr, |fs| fs.atomic(ino.into())) {
                Ok(Some(on)) => xattr_reply(if on { b"1" } else { b"0" }, size, reply),
                Ok(None) => reply.error(Errno::NO_XATTR),
                Err(e) => reply.error(errno(e)),
            };
        }
        match self.lib(Op::Xattr, |fs| fs.getxattr(ino.into(), name.as_bytes())) {
            Ok(v) => xattr_reply(&v, size, reply),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.lib(Op::Xattr, |fs| fs.listxattr(ino.into())) {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names {
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                if matches!(self.fs.atomic(ino.into()), Ok(Some(_))) {
                    buf.extend_from_slice(ATOMIC_XATTR);
                    buf.push(0);
                }
                xattr_reply(&buf, size, reply)
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if name.as_bytes() == ATOMIC_XATTR {
            return reply.error(Errno::EPERM);
        }
        empty(
            self.lib(Op::Xattr, |fs| fs.removexattr(ino.into(), name.as_bytes())),
            reply,
        )
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.lib(Op::Create, |fs| {
            fs.create_as(owner(req), parent.into(), name.as_bytes(), mode)
                .and_then(|a| fs.open(a.ino).map(|()| a))
        });
        match r {
            Ok(a) => {
                let g = self.next_gen.fetch_add(1, Ordering::Relaxed);
                self.gens.lock().insert(a.ino, g);
                reply.created(
                    &self.ttl,
                    &file_attr(&a),
                    Generation(g),
                    FileHandle(0),
                    self.fopen,
                )
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode != 0 {
            // KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE, COLLAPSE/INSERT_RANGE: not in the library.
            return reply.error(Errno::EOPNOTSUPP);
        }
        empty(
            self.lib(Op::Fallocate, |fs| fs.fallocate(ino.into(), offset, length)),
            reply,
        )
    }
}
