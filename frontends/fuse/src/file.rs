//! The FUSE file system: a root directory with one regular file, `disk`, the size of the device.

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, WriteFlags,
};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Name of the device file inside the FUSE mount.
pub const DISK_NAME: &str = "disk";
pub(crate) const DISK_INO: u64 = 2;
/// Largest FUSE request we accept; the kernel splits bigger I/O. 1 MiB is also the kernel's
/// ceiling here (`/proc/sys/fs/fuse/max_pages_limit` = 256 pages); fuser asks for
/// `max_pages` = max_write / page size.
pub(crate) const MAX_IO: u32 = 1 << 20;
/// Background requests the kernel may have in flight to us at once. The loop driver's direct
/// I/O reaches FUSE as asynchronous requests (`FUSE_ASYNC_DIO`), which count as background
/// requests: at the kernel's default of 12 (fuser: 16) a queue-depth-32 workload through ext4
/// and loop would stall at the limit. 128 matches the loop device's `nr_requests`.
const MAX_BACKGROUND: u16 = 128;

/// A failure of the device, reported to the kernel as `errno`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DiskError {
    pub errno: i32,
    pub message: String,
}

/// What the FUSE file needs from a block device. Every range is inside `size()` and not empty.
/// `read`, `write` and `zero` take any byte offset and length: the device reads, patches and
/// writes back a partial block itself, under its own locks, so that two writers of different
/// bytes of one block never lose each other's bytes. `discard` gets whole blocks only.
pub trait Disk: Send + Sync + 'static {
    fn size(&self) -> u64;
    fn block_size(&self) -> u32;
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), DiskError>;
    /// Durable on return when `fua`.
    fn write(&self, off: u64, data: &[u8], fua: bool) -> Result<(), DiskError>;
    /// Make every completed write durable.
    fn flush(&self) -> Result<(), DiskError>;
    /// Forget whole blocks `[off, off+len)`; they read back as zeroes.
    fn discard(&self, off: u64, len: u64) -> Result<(), DiskError>;
    /// Make `[off, off+len)` read as zeroes.
    fn zero(&self, off: u64, len: u64) -> Result<(), DiskError>;
}

/// The device file's state and operations, whatever carries the requests (fuser over
/// /dev/fuse, or the io_uring queues): attributes, and reads, writes, flushes and
/// fallocate with their range checks. Errors are positive errno values.
pub(crate) struct Core<D: Disk> {
    disk: D,
    uid: u32,
    gid: u32,
    created: SystemTime,
}

/// A positive errno.
pub(crate) type Errno32 = i32;

impl<D: Disk> Core<D> {
    pub(crate) fn attr(&self, ino: u64) -> FileAttr {
        let (kind, perm, size, nlink) = if ino == DISK_INO {
            (FileType::RegularFile, 0o600, self.disk.size(), 1)
        } else {
            (FileType::Directory, 0o700, 0, 2)
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size / 512,
            atime: self.created,
            mtime: self.created,
            ctime: self.created,
            crtime: self.created,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            flags: 0,
            blksize: self.disk.block_size(),
        }
    }

    /// Clamp `[off, off+len)` to the device; `None` when it starts at or past the end.
    fn clamp(&self, off: u64, len: u64) -> Option<u64> {
        let size = self.disk.size();
        (off < size).then(|| len.min(size - off))
    }

    /// Read up to `size` bytes at `off` into `buf` (at least `size` long): the bytes read
    /// (0 at or past the end).
    pub(crate) fn read(&self, off: u64, size: u32, buf: &mut [u8]) -> Result<usize, Errno32> {
        let Some(len) = self.clamp(off, size as u64) else {
            return Ok(0);
        };
        let len = len as usize;
        if len > 0 {
            self.disk.read(off, &mut buf[..len]).map_err(errno)?;
        }
        Ok(len)
    }

    /// Write `data` at `off`, durable on return when `fua`: the bytes written.
    pub(crate) fn write(&self, off: u64, data: &[u8], fua: bool) -> Result<u32, Errno32> {
        let Some(len) = self.clamp(off, data.len() as u64) else {
            return Err(libc::ENOSPC);
        };
        if len > 0 {
            self.disk
                .write(off, &data[..len as usize], fua)
                .map_err(errno)?;
        }
        Ok(len as u32)
    }

    /// fsync: the device's FLUSH.
    pub(crate) fn fsync(&self) -> Result<(), Errno32> {
        self.disk.flush().map_err(errno)
    }

    /// `(blocks, block size)` for statfs.
    pub(crate) fn statfs(&self) -> (u64, u32) {
        let bs = self.disk.block_size();
        (self.disk.size() / bs as u64, bs)
    }

    /// fallocate: plain allocate is a no-op, PUNCH_HOLE discards, ZERO_RANGE zeroes.
    pub(crate) fn fallocate(&self, offset: u64, length: u64, mode: i32) -> Result<(), Errno32> {
        let bs = self.disk.block_size() as u64;
        let Some(len) = self.clamp(offset, length) else {
            return Err(libc::EINVAL);
        };
        // Only whole blocks can be discarded or zeroed in place; partial edges are zero-written.
        let start = offset.div_ceil(bs) * bs;
        let end = ((offset + len) / bs * bs).max(start);
        let r = if mode == 0 {
            Ok(()) // plain allocate: every byte of the device already exists
        } else if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
            self.zero_edges(offset, len, start, end).and_then(|_| {
                if end > start {
                    self.disk.discard(start, end - start)
                } else {
                    Ok(())
                }
            })
        } else if mode & libc::FALLOC_FL_ZERO_RANGE != 0 {
            self.zero_edges(offset, len, start, end).and_then(|_| {
                if end > start {
                    self.disk.zero(start, end - start)
                } else {
                    Ok(())
                }
            })
        } else {
            return Err(libc::EOPNOTSUPP);
        };
        r.map_err(errno)
    }

    /// Zero the partial blocks at either end of `[off, off+len)`, outside whole blocks
    /// `[start, end)`.
    fn zero_edges(&self, off: u64, len: u64, start: u64, end: u64) -> Result<(), DiskError> {
        let head = start.min(off + len) - off;
        if head > 0 {
            self.disk.zero(off, head)?;
        }
        let tail_start = end.max(off + head);
        if off + len > tail_start {
            self.disk.zero(tail_start, off + len - tail_start)?;
        }
        Ok(())
    }
}

/// The FUSE file system over a [`Disk`], for fuser (the /dev/fuse transport, and the INIT
/// handshake of both transports).
pub struct DiskFile<D: Disk> {
    core: Arc<Core<D>>,
    /// Ask the kernel for FUSE over io_uring at INIT; set to whether it was granted.
    uring: Arc<AtomicBool>,
}

impl<D: Disk> DiskFile<D> {
    pub fn new(disk: D) -> Self {
        Self::with_uring(disk, false).0
    }

    /// A file system that asks for FUSE over io_uring at INIT when `want_uring`; the flag
    /// reads true after the handshake when the kernel granted it.
    pub(crate) fn with_uring(disk: D, want_uring: bool) -> (Self, Arc<AtomicBool>) {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let uring = Arc::new(AtomicBool::new(want_uring));
        let f = DiskFile {
            core: Arc::new(Core {
                disk,
                uid,
                gid,
                created: SystemTime::now(),
            }),
            uring: uring.clone(),
        };
        (f, uring)
    }

    pub(crate) fn core(&self) -> Arc<Core<D>> {
        self.core.clone()
    }

    pub fn disk(&self) -> &D {
        &self.core.disk
    }
}

fn errno(e: DiskError) -> Errno32 {
    tracing::warn!("device error: {}", e.message);
    e.errno
}

pub(crate) const TTL: Duration = Duration::from_secs(60);

fn fe(e: Errno32) -> Errno {
    Errno::from_i32(e)
}

impl<D: Disk> Filesystem for DiskFile<D> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_IO);
        let _ = config.set_max_readahead(MAX_IO);
        // Let the loop driver's async direct I/O stay asynchronous: without FUSE_ASYNC_DIO the
        // kernel turns each of its requests into a synchronous FUSE round trip, so the loop
        // worker waits for one request before it sends the next (queue depth 1 to us whatever
        // the application's depth). Older kernels without it keep working, only slower.
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO) {
            tracing::info!("kernel lacks {missing:?}: loop I/O reaches FUSE one request at a time");
        }
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND / 4 * 3);
        // FUSE over io_uring: the kernel offers it only where it is built in and enabled
        // (/sys/module/fuse/parameters/enable_uring); whether it was granted decides the
        // transport.
        if self.uring.load(Ordering::Relaxed) {
            let granted = config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok();
            self.uring.store(granted, Ordering::Release);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if u64::from(parent) == 1 && name == DISK_NAME {
            reply.entry(&TTL, &self.core.attr(DISK_INO), fuser::Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match u64::from(ino) {
            1 | DISK_INO => reply.attr(&TTL, &self.core.attr(ino.into())),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A device has a fixed size: allow only "truncate" to the same size (O_TRUNC-free tools).
        if size.is_some_and(|s| s != self.core.disk.size()) {
            return reply.error(Errno::EPERM);
        }
        reply.attr(&TTL, &self.core.attr(ino.into()))
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if u64::from(ino) != DISK_INO {
            return reply.error(Errno::EISDIR);
        }
        reply.opened(FileHandle(0), FopenFlags::from_bits_retain(OPEN_FLAGS));
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        thread_local! {
            // This worker's reply buffer: grows to the largest read it served (at most
            // MAX_IO), so a READ costs no allocation and no zeroing; the reply is one writev
            // of header + these bytes.
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with_borrow_mut(|buf| {
            if buf.len() < size as usize {
                buf.resize(size as usize, 0);
            }
            match self.core.read(offset, size, buf) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(fe(e)),
            }
        })
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.core.write(offset, data, is_fua(flags.0)) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.core.fsync() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(): nothing buffered here; durability is fsync's job.
        reply.ok()
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.core.fallocate(offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if u64::from(ino) != 1 {
            return reply.error(Errno::ENOTDIR);
        }
        for (i, (ino, kind, name)) in ENTRIES.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let (blocks, bs) = self.core.statfs();
        reply.statfs(blocks, 0, 0, 2, 0, bs, 255, bs);
    }
}

/// The root directory's entries: (inode, type, name).
pub(crate) const ENTRIES: [(u64, FileType, &str); 3] = [
    (1, FileType::Directory, "."),
    (1, FileType::Directory, ".."),
    (DISK_INO, FileType::RegularFile, DISK_NAME),
];

/// How the device file is opened: no page cache (every read and write reaches the device, so a
/// completed write is in PM and fsync is the only barrier needed), and writers in parallel.
pub(crate) const OPEN_FLAGS: u32 =
    FopenFlags::FOPEN_DIRECT_IO.bits() | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES.bits();

/// O_SYNC/O_DSYNC writers get FUA.
pub(crate) fn is_fua(open_flags: i32) -> bool {
    open_flags & (libc::O_SYNC | libc::O_DSYNC) != 0
}
