//! The FUSE file system: a root directory with one regular file, `disk`, the size of the device.

use crate::dev::Served;
use crate::ops::{AddEntry, Entry, Opened, Ops, Statfs, WriteHow, R};
use fuser::{FileAttr, FileType, FopenFlags, INodeNo, InitFlags, KernelConfig};
use pmkit_fs::SetAttr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Name of the device file inside the FUSE mount.
pub const DISK_NAME: &str = "disk";
pub(crate) const DISK_INO: u64 = 2;
/// Largest FUSE request we accept; the kernel splits bigger I/O. 1 MiB is also the kernel's
/// ceiling here (`/proc/sys/fs/fuse/max_pages_limit` = 256 pages); fuser asks for
/// `max_pages` = max_write / page size.
pub(crate) const MAX_IO: u32 = crate::abi::MAX_PAYLOAD;
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

/// The device file's state and its [`Ops`], whatever carries the requests (fuser over
/// /dev/fuse, or the io_uring queues): attributes, and reads, writes, flushes and fallocate
/// with their range checks.
pub struct Core<D: Disk> {
    disk: D,
    uid: u32,
    gid: u32,
    created: SystemTime,
}

/// A positive errno.
pub(crate) type Errno32 = i32;

impl<D: Disk> Core<D> {
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

    /// fallocate: plain allocate is a no-op, PUNCH_HOLE discards, ZERO_RANGE zeroes.
    fn allocate(&self, offset: u64, length: u64, mode: i32) -> R<()> {
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

/// The FUSE file system over a [`Disk`], served by fuser (the /dev/fuse transport, and the
/// INIT handshake of both transports).
pub type DiskFile<D> = Served<Core<D>>;

impl<D: Disk> Core<D> {
    pub fn new(disk: D) -> Core<D> {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Core {
            disk,
            uid,
            gid,
            created: SystemTime::now(),
        }
    }

    pub fn disk(&self) -> &D {
        &self.disk
    }
}

impl<D: Disk> DiskFile<D> {
    /// The device file over `disk`, over /dev/fuse only.
    pub fn over(disk: D) -> Self {
        Served::new(Arc::new(Core::new(disk)), false).0
    }
}

fn errno(e: DiskError) -> Errno32 {
    tracing::warn!("device error: {}", e.message);
    e.errno
}

pub(crate) const TTL: Duration = Duration::from_secs(60);

impl<D: Disk> Ops for Core<D> {
    fn ttl(&self) -> Duration {
        TTL
    }

    fn label(&self) -> &'static str {
        "device file"
    }

    fn init(&self, config: &mut KernelConfig) {
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
    }

    fn lookup(&self, parent: u64, name: &[u8]) -> R<Entry> {
        if parent == 1 && name == DISK_NAME.as_bytes() {
            Ok(Entry {
                attr: self.attr(DISK_INO),
                generation: 0,
            })
        } else {
            Err(libc::ENOENT)
        }
    }

    fn getattr(&self, ino: u64) -> R<FileAttr> {
        match ino {
            1 | DISK_INO => Ok(self.attr(ino)),
            _ => Err(libc::ENOENT),
        }
    }

    fn setattr(&self, ino: u64, s: &SetAttr, _truncate_kills: bool) -> R<FileAttr> {
        // A device has a fixed size: allow only "truncate" to the same size (O_TRUNC-free tools).
        if s.size.is_some_and(|n| n != self.disk.size()) {
            return Err(libc::EPERM);
        }
        self.getattr(ino)
    }

    fn open(&self, ino: u64) -> R<Opened> {
        if ino != DISK_INO {
            return Err(libc::EISDIR);
        }
        Ok(Opened {
            fh: 0,
            flags: FopenFlags::from_bits_retain(OPEN_FLAGS),
        })
    }

    fn read(&self, _ino: u64, offset: u64, buf: &mut [u8]) -> R<usize> {
        let Some(len) = self.clamp(offset, buf.len() as u64) else {
            return Ok(0);
        };
        let len = len as usize;
        if len > 0 {
            self.disk.read(offset, &mut buf[..len]).map_err(errno)?;
        }
        Ok(len)
    }

    fn write(&self, _ino: u64, offset: u64, data: &[u8], how: WriteHow) -> R<u32> {
        let Some(len) = self.clamp(offset, data.len() as u64) else {
            return Err(libc::ENOSPC);
        };
        if len > 0 {
            self.disk
                .write(offset, &data[..len as usize], how.fua)
                .map_err(errno)?;
        }
        Ok(len as u32)
    }

    /// fsync: the device's FLUSH (fsyncdir of the root too: harmless, and rare).
    fn fsync(&self, _ino: u64) -> R<()> {
        self.disk.flush().map_err(errno)
    }

    fn opendir(&self, ino: u64) -> R<Opened> {
        match ino {
            1 => Ok(Opened {
                fh: 0,
                flags: FopenFlags::empty(),
            }),
            _ => Err(libc::ENOTDIR),
        }
    }

    fn readdir(&self, ino: u64, _fh: u64, offset: u64, add: &mut AddEntry<'_>) -> R<()> {
        if ino != 1 {
            return Err(libc::ENOTDIR);
        }
        for (i, (ino, kind, name)) in ENTRIES.iter().enumerate().skip(offset as usize) {
            if add(*ino, (i + 1) as u64, *kind, name.as_bytes()) {
                break;
            }
        }
        Ok(())
    }

    fn statfs(&self) -> Statfs {
        let bs = self.disk.block_size();
        Statfs {
            blocks: self.disk.size() / bs as u64,
            files: 2,
            bsize: bs,
            namelen: 255,
            ..Statfs::default()
        }
    }

    fn fallocate(&self, _ino: u64, offset: u64, length: u64, mode: i32) -> R<()> {
        self.allocate(offset, length, mode)
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
