//! [`PmbdBackend`]: a PMBD block device (`pmkit_blk::Device`) as an NBD export
//! (`pmkit_nbd::BlockBackend`), what `pmkit serve` serves.

use pmkit_blk::{BlkError, Device};
use pmkit_media::Region;
use pmkit_nbd::{BackendError, BackendResult, BlockBackend, BlockSizes, ErrorKind};
use std::sync::Arc;

/// Sector size the export advertises as its minimum block size. The device's own block (usually
/// 4096) is advertised as the preferred size; smaller aligned requests are read-modify-written by
/// the device itself (`Device::write_bytes`, under the block's stripe lock), because common
/// clients (a loop device over nbdfuse, the kernel client with its default block size) send
/// 512-byte I/O and libnbd does not split it.
pub const SECTOR: u32 = 512;

/// A PMBD device as an NBD export.
pub struct PmbdBackend {
    pub dev: Arc<Device<Region>>,
    bs: u64,
}

impl PmbdBackend {
    pub fn new(dev: impl Into<Arc<Device<Region>>>) -> Self {
        let dev = dev.into();
        let bs = dev.block_size() as u64;
        assert!(bs >= SECTOR as u64 && bs.is_power_of_two());
        PmbdBackend { dev, bs }
    }
}

fn map_err(e: BlkError) -> BackendError {
    let kind = match e.errno() {
        libc::EINVAL | libc::EOVERFLOW => ErrorKind::Invalid,
        libc::ENOSPC => ErrorKind::NoSpace,
        libc::ESHUTDOWN => ErrorKind::Shutdown,
        libc::EROFS => ErrorKind::ReadOnly,
        _ => ErrorKind::Io,
    };
    BackendError::new(kind, e.to_string())
}

impl BlockBackend for PmbdBackend {
    fn size(&self) -> u64 {
        self.dev.capacity()
    }
    fn block_sizes(&self) -> BlockSizes {
        BlockSizes {
            minimum: SECTOR,
            preferred: (self.bs as u32).max(4096),
        }
    }
    fn is_read_only(&self) -> bool {
        // A device opened read-only (`pmkit serve --read-only`) is advertised so: clients see
        // NBD_FLAG_READ_ONLY, and the server answers writes EPERM before they get here.
        self.dev.is_read_only()
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> BackendResult<()> {
        if buf.is_empty() {
            return Ok(());
        }
        self.dev.read_bytes(off, buf).map_err(map_err)
    }
    fn write(&self, off: u64, data: &[u8], fua: bool) -> BackendResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.dev.write_bytes(off, data, fua).map_err(map_err)
    }
    fn flush(&self) -> BackendResult<()> {
        // Read-only, the device's flush succeeds at once (nothing was written).
        self.dev.flush().map_err(map_err)
    }
    fn trim(&self, off: u64, len: u64, fua: bool) -> BackendResult<()> {
        // A trim is a hint: discard only the whole blocks inside the range.
        let start = off.div_ceil(self.bs) * self.bs;
        let end = (off + len) / self.bs * self.bs;
        if end > start {
            self.dev.trim(start, end - start).map_err(map_err)?;
            if fua {
                self.dev.flush().map_err(map_err)?;
            }
        }
        Ok(())
    }
    fn write_zeroes(&self, off: u64, len: u64, fua: bool, _may_trim: bool) -> BackendResult<()> {
        // Trimmed and zeroed blocks are the same thing on PMBD (zeroes in place), so NO_HOLE is
        // always honoured.
        if len == 0 {
            return Ok(());
        }
        self.dev.write_zeroes_bytes(off, len, fua).map_err(map_err)
    }
    fn fast_zero(&self) -> bool {
        // Zeroing PM runs at memory bandwidth in the server; writing zeroes would also carry
        // them over the socket.
        true
    }
}
