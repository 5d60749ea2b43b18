//! The FUSE file system: a root directory with one regular file, `disk`, the size of the device.

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, WriteFlags,
};
use std::ffi::OsStr;
use std::time::{Duration, SystemTime};

/// Name of the device file inside the FUSE mount.
pub const DISK_NAME: &str = "disk";
const DISK_INO: u64 = 2;
/// Largest FUSE request we accept; the kernel splits bigger I/O. 1 MiB is also the kernel's
/// ceiling here (`/proc/sys/fs/fuse/max_pages_limit` = 256 pages); fuser asks for
/// `max_pages` = max_write / page size.
const MAX_IO: u32 = 1 << 20;
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

/// The FUSE file system over a [`Disk`].
pub struct DiskFile<D: Disk> {
    disk: D,
    uid: u32,
    gid: u32,
    created: SystemTime,
}

impl<D: Disk> DiskFile<D> {
    pub fn new(disk: D) -> Self {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        DiskFile {
            disk,
            uid,
            gid,
            created: SystemTime::now(),
        }
    }

    pub fn disk(&self) -> &D {
        &self.disk
    }

    fn attr(&self, ino: u64) -> FileAttr {
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

    /// Read into this worker thread's reply buffer and hand the bytes to `reply` (one writev
    /// of header + these bytes): no allocation and no zeroing per request.
    fn read_at<R>(
        &self,
        off: u64,
        len: usize,
        reply: impl FnOnce(Result<&[u8], DiskError>) -> R,
    ) -> R {
        thread_local! {
            // Grows to the largest read this worker has served (at most MAX_IO).
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with_borrow_mut(|buf| {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            let b = &mut buf[..len];
            match self.disk.read(off, b) {
                Ok(()) => reply(Ok(b)),
                Err(e) => reply(Err(e)),
            }
        })
    }

    fn write_at(&self, off: u64, data: &[u8], fua: bool) -> Result<(), DiskError> {
        if data.is_empty() {
            return Ok(());
        }
        self.disk.write(off, data, fua)
    }
}

fn errno(e: &DiskError) -> Errno {
    tracing::warn!("device error: {}", e.message);
    Errno::from_i32(e.errno)
}

const TTL: Duration = Duration::from_secs(60);

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
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if u64::from(parent) == 1 && name == DISK_NAME {
            reply.entry(&TTL, &self.attr(DISK_INO), fuser::Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match u64::from(ino) {
            1 | DISK_INO => reply.attr(&TTL, &self.attr(ino.into())),
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
        if size.is_some_and(|s| s != self.disk.size()) {
            return reply.error(Errno::EPERM);
        }
        reply.attr(&TTL, &self.attr(ino.into()))
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if u64::from(ino) != DISK_INO {
            return reply.error(Errno::EISDIR);
        }
        // No page cache for the device file: every read and write reaches the device, so a
        // completed write is in PM (and fsync is the only barrier needed).
        reply.opened(
            FileHandle(0),
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES,
        );
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
        let Some(len) = self.clamp(offset, size as u64) else {
            return reply.data(&[]);
        };
        if len == 0 {
            return reply.data(&[]);
        }
        self.read_at(offset, len as usize, |r| match r {
            Ok(b) => reply.data(b),
            Err(e) => reply.error(errno(&e)),
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
        let Some(len) = self.clamp(offset, data.len() as u64) else {
            return reply.error(Errno::ENOSPC);
        };
        if len == 0 {
            return reply.written(0);
        }
        // O_SYNC/O_DSYNC writers get FUA.
        let fua = flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0;
        match self.write_at(offset, &data[..len as usize], fua) {
            Ok(()) => reply.written(len as u32),
            Err(e) => reply.error(errno(&e)),
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
        match self.disk.flush() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
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
        let bs = self.disk.block_size() as u64;
        let Some(len) = self.clamp(offset, length) else {
            return reply.error(Errno::EINVAL);
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
            return reply.error(Errno::EOPNOTSUPP);
        };
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
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
        let entries = [
            (1, FileType::Directory, "."),
            (1, FileType::Directory, ".."),
            (DISK_INO, FileType::RegularFile, DISK_NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let bs = self.disk.block_size() as u64;
        let blocks = self.disk.size() / bs;
        reply.statfs(blocks, 0, 0, 2, 0, bs as u32, 255, bs as u32);
    }
}

impl<D: Disk> DiskFile<D> {
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
