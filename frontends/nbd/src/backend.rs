//! What the server needs from a block device. The NBD crate depends on nothing below it: the CLI
//! adapts pmkit's PMBD device to [`BlockBackend`], and the tests use [`MemBackend`].
//!
//! The server validates every request (range, alignment, size limits, read-only) before calling the
//! backend, so a backend may treat an invalid request as a bug; it still returns errors for
//! failures of its own (I/O, media, checksum), which are sent to the client as NBD errors.

use crate::proto;
use parking_lot::RwLock;

/// Block size constraints, as advertised in `NBD_INFO_BLOCK_SIZE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSizes {
    /// Smallest addressable unit; every offset and length must be a multiple. Power of two,
    /// 1..=65536.
    pub minimum: u32,
    /// Size at which I/O is efficient (no read-modify-write). Power of two, >= max(minimum, 512).
    pub preferred: u32,
}

impl BlockSizes {
    pub fn validate(&self) -> Result<(), String> {
        let m = self.minimum;
        if !m.is_power_of_two() || m > 65536 {
            return Err(format!(
                "minimum block size {m} must be a power of two <= 65536"
            ));
        }
        let p = self.preferred;
        if !p.is_power_of_two() || p < m.max(512) {
            return Err(format!(
                "preferred block size {p} must be a power of two >= max({m}, 512)"
            ));
        }
        Ok(())
    }
}

/// What kind of failure a backend reports; each maps to one NBD error value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Media or I/O failure (`NBD_EIO`).
    Io,
    /// No space (`NBD_ENOSPC`).
    NoSpace,
    /// Bad argument (`NBD_EINVAL`).
    Invalid,
    /// Write to a read-only device (`NBD_EPERM`).
    ReadOnly,
    /// Operation not supported, e.g. a fast zero that would not be fast (`NBD_ENOTSUP`).
    NotSupported,
    /// The device is shutting down (`NBD_ESHUTDOWN`).
    Shutdown,
}

impl ErrorKind {
    pub fn nbd_errno(self) -> u32 {
        match self {
            ErrorKind::Io => proto::EIO,
            ErrorKind::NoSpace => proto::ENOSPC,
            ErrorKind::Invalid => proto::EINVAL,
            ErrorKind::ReadOnly => proto::EPERM,
            ErrorKind::NotSupported => proto::ENOTSUP,
            ErrorKind::Shutdown => proto::ESHUTDOWN,
        }
    }
}

/// A backend failure: its kind (for the NBD error value) and a message for the client and log.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    pub kind: ErrorKind,
    pub message: String,
}

impl BackendError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        BackendError {
            kind,
            message: message.into(),
        }
    }
}

pub type BackendResult<T> = Result<T, BackendError>;

/// One `base:allocation` extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub len: u32,
    /// `proto::STATE_HOLE` / `proto::STATE_ZERO` bits.
    pub flags: u32,
}

/// A block device the server exports. Implementations are shared by every connection (and by
/// every worker thread of a connection), so all methods take `&self`.
///
/// Durability contract: [`BlockBackend::flush`] makes every write that has *completed* (returned)
/// on any thread durable before it returns; that is what lets the server advertise
/// `NBD_FLAG_CAN_MULTI_CONN`. A write with `fua` is durable when it returns.
pub trait BlockBackend: Send + Sync + 'static {
    /// Size in bytes (a multiple of `block_sizes().minimum`).
    fn size(&self) -> u64;
    fn block_sizes(&self) -> BlockSizes;
    fn is_read_only(&self) -> bool;
    /// Fill `buf` from `off`.
    fn read(&self, off: u64, buf: &mut [u8]) -> BackendResult<()>;
    /// Store `data` at `off`; durable on return when `fua`.
    fn write(&self, off: u64, data: &[u8], fua: bool) -> BackendResult<()>;
    /// Make every completed write durable.
    fn flush(&self) -> BackendResult<()>;
    /// The client no longer needs `[off, off+len)`; contents afterwards are unspecified.
    fn trim(&self, off: u64, len: u64, fua: bool) -> BackendResult<()>;
    /// Make `[off, off+len)` read as zeroes. `may_trim` is false when the client sent
    /// `NBD_CMD_FLAG_NO_HOLE`.
    fn write_zeroes(&self, off: u64, len: u64, fua: bool, may_trim: bool) -> BackendResult<()>;
    /// Whether `write_zeroes` is faster than writing the same zeroes over the network; when false
    /// the server fails `NBD_CMD_FLAG_FAST_ZERO` requests with `NBD_ENOTSUP` without touching data.
    fn fast_zero(&self) -> bool {
        false
    }
    /// A hint that `[off, off+len)` will be accessed soon.
    fn cache(&self, _off: u64, _len: u64) -> BackendResult<()> {
        Ok(())
    }
    /// Append `base:allocation` extents describing `[off, off+len)` to `out`, at most
    /// `max_extents` of them; they may stop short of `len` (never past it). The default says
    /// "allocated, contents unknown" for the whole range, which the spec always allows.
    fn block_status(
        &self,
        _off: u64,
        len: u32,
        _max_extents: usize,
        out: &mut Vec<Extent>,
    ) -> BackendResult<()> {
        out.push(Extent { len, flags: 0 });
        Ok(())
    }
}

impl<B: BlockBackend> BlockBackend for std::sync::Arc<B> {
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn block_sizes(&self) -> BlockSizes {
        (**self).block_sizes()
    }
    fn is_read_only(&self) -> bool {
        (**self).is_read_only()
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> BackendResult<()> {
        (**self).read(off, buf)
    }
    fn write(&self, off: u64, data: &[u8], fua: bool) -> BackendResult<()> {
        (**self).write(off, data, fua)
    }
    fn flush(&self) -> BackendResult<()> {
        (**self).flush()
    }
    fn trim(&self, off: u64, len: u64, fua: bool) -> BackendResult<()> {
        (**self).trim(off, len, fua)
    }
    fn write_zeroes(&self, off: u64, len: u64, fua: bool, may_trim: bool) -> BackendResult<()> {
        (**self).write_zeroes(off, len, fua, may_trim)
    }
    fn fast_zero(&self) -> bool {
        (**self).fast_zero()
    }
    fn cache(&self, off: u64, len: u64) -> BackendResult<()> {
        (**self).cache(off, len)
    }
    fn block_status(
        &self,
        off: u64,
        len: u32,
        max_extents: usize,
        out: &mut Vec<Extent>,
    ) -> BackendResult<()> {
        (**self).block_status(off, len, max_extents, out)
    }
}

/// An in-memory backend for tests and protocol benchmarks: DRAM behind a lock, with a per-block
/// "trimmed" bit so `base:allocation` has something real to report. Counts flushes so tests can
/// check that FLUSH and FUA reach the backend.
pub struct MemBackend {
    data: RwLock<Vec<u8>>,
    /// One bit per minimum block: set when the block was trimmed or zeroed with holes allowed.
    hole: RwLock<Vec<bool>>,
    sizes: BlockSizes,
    read_only: bool,
    flushes: std::sync::atomic::AtomicU64,
}

impl MemBackend {
    pub fn new(size: u64, sizes: BlockSizes, read_only: bool) -> Self {
        sizes.validate().expect("valid block sizes");
        assert!(
            size.is_multiple_of(sizes.minimum as u64),
            "size must be a multiple of the minimum block size"
        );
        let blocks = (size / sizes.minimum as u64) as usize;
        MemBackend {
            data: RwLock::new(vec![0; size as usize]),
            hole: RwLock::new(vec![true; blocks]),
            sizes,
            read_only,
            flushes: std::sync::atomic::AtomicU64::new(0),
        }
    }
    pub fn flush_count(&self) -> u64 {
        self.flushes.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// A copy of the contents, for test assertions.
    pub fn snapshot(&self, off: u64, len: usize) -> Vec<u8> {
        self.data.read()[off as usize..off as usize + len].to_vec()
    }
    fn mark(&self, off: u64, len: u64, hole: bool) {
        let m = self.sizes.minimum as u64;
        let mut h = self.hole.write();
        for b in off / m..(off + len).div_ceil(m) {
            h[b as usize] = hole;
        }
    }
    fn check(&self, off: u64, len: u64) {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.size()),
            "server passed an out-of-range request"
        );
    }
}

impl BlockBackend for MemBackend {
    fn size(&self) -> u64 {
        self.data.read().len() as u64
    }
    fn block_sizes(&self) -> BlockSizes {
        self.sizes
    }
    fn is_read_only(&self) -> bool {
        self.read_only
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> BackendResult<()> {
        self.check(off, buf.len() as u64);
        buf.copy_from_slice(&self.data.read()[off as usize..off as usize + buf.len()]);
        Ok(())
    }
    fn write(&self, off: u64, data: &[u8], _fua: bool) -> BackendResult<()> {
        self.check(off, data.len() as u64);
        assert!(
            !self.read_only,
            "server passed a write to a read-only backend"
        );
        self.data.write()[off as usize..off as usize + data.len()].copy_from_slice(data);
        self.mark(off, data.len() as u64, false);
        Ok(())
    }
    fn flush(&self) -> BackendResult<()> {
        self.flushes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn trim(&self, off: u64, len: u64, _fua: bool) -> BackendResult<()> {
        self.write_zeroes(off, len, false, true)
    }
    fn write_zeroes(&self, off: u64, len: u64, _fua: bool, may_trim: bool) -> BackendResult<()> {
        self.check(off, len);
        assert!(
            !self.read_only,
            "server passed a write to a read-only backend"
        );
        self.data.write()[off as usize..(off + len) as usize].fill(0);
        self.mark(off, len, may_trim);
        Ok(())
    }
    fn fast_zero(&self) -> bool {
        true
    }
    fn block_status(
        &self,
        off: u64,
        len: u32,
        max_extents: usize,
        out: &mut Vec<Extent>,
    ) -> BackendResult<()> {
        self.check(off, len as u64);
        let m = self.sizes.minimum as u64;
        let h = self.hole.read();
        let end = off + len as u64;
        let mut pos = off;
        let mut n = 0;
        while pos < end && n < max_extents {
            let hole = h[(pos / m) as usize];
            let mut next = (pos / m + 1) * m;
            while next < end && h[(next / m) as usize] == hole {
                next += m;
            }
            let next = next.min(end);
            let flags = if hole {
                proto::STATE_HOLE | proto::STATE_ZERO
            } else {
                0
            };
            out.push(Extent {
                len: (next - pos) as u32,
                flags,
            });
            pos = next;
            n += 1;
        }
        Ok(())
    }
}
