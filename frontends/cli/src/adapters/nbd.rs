//! [`PmbdBackend`]: a PMBD block device (`pmkit_blk::Device`) as an NBD export
//! (`pmkit_nbd::BlockBackend`), what `pmkit serve` serves.

use pmkit_blk::{BlkError, Device};
use pmkit_media::Region;
use pmkit_nbd::{BackendError, BackendResult, BlockBackend, BlockSizes, ErrorKind};

/// Sector size the export advertises as its minimum block size. The device's own block (usually
/// 4096) is advertised as the preferred size; smaller aligned requests are served by
/// read-modify-write here, because common clients (a loop device over nbdfuse, the kernel client
/// with its default block size) send 512-byte I/O and libnbd does not split it.
pub const SECTOR: u32 = 512;
/// Locks serializing read-modify-write of partial blocks (by block number).
const RMW_STRIPES: usize = 64;

/// A PMBD device as an NBD export.
pub struct PmbdBackend {
    pub dev: Device<Region>,
    bs: u64,
    rmw: Vec<std::sync::Mutex<()>>,
}

impl PmbdBackend {
    pub fn new(dev: Device<Region>) -> Self {
        let bs = dev.block_size() as u64;
        assert!(bs >= SECTOR as u64 && bs.is_power_of_two());
        PmbdBackend {
            dev,
            bs,
            rmw: (0..RMW_STRIPES)
                .map(|_| std::sync::Mutex::new(()))
                .collect(),
        }
    }

    /// Replace bytes `[at, at+len)` inside block `blk` with `data` (or zeroes when `None`).
    /// Two partial writes to different sectors of one block must both survive, so the
    /// read-modify-write holds the block's stripe lock. (A whole-block write racing with it is an
    /// overlapping write, whose order NBD leaves undefined.)
    fn patch(
        &self,
        blk: u64,
        at: usize,
        len: usize,
        data: Option<&[u8]>,
        fua: bool,
    ) -> BackendResult<()> {
        let _g = self.rmw[(blk as usize) % RMW_STRIPES]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut b = vec![0u8; self.bs as usize];
        let off = blk * self.bs;
        self.dev.read(off, &mut b).map_err(map_err)?;
        match data {
            Some(d) => b[at..at + len].copy_from_slice(d),
            None => b[at..at + len].fill(0),
        }
        self.dev.write(off, &b, fua).map_err(map_err)
    }

    /// Split `[off, off+len)` into a partial head block, whole middle blocks and a partial tail,
    /// calling `part(block, offset in block, length, offset in request)` for partial pieces and
    /// `whole(offset, length, offset in request)` for the aligned middle.
    fn split(
        &self,
        off: u64,
        len: u64,
        mut part: impl FnMut(u64, usize, usize, usize) -> BackendResult<()>,
        mut whole: impl FnMut(u64, u64, usize) -> BackendResult<()>,
    ) -> BackendResult<()> {
        let bs = self.bs;
        let end = off + len;
        let mut pos = off;
        while pos < end {
            let blk = pos / bs;
            let in_blk = pos % bs;
            if in_blk != 0 || end - pos < bs {
                let n = (bs - in_blk).min(end - pos);
                part(blk, in_blk as usize, n as usize, (pos - off) as usize)?;
                pos += n;
            } else {
                let n = (end - pos) / bs * bs;
                whole(pos, n, (pos - off) as usize)?;
                pos += n;
            }
        }
        Ok(())
    }
}

fn map_err(e: BlkError) -> BackendError {
    let kind = match e.errno() {
        libc::EINVAL | libc::EOVERFLOW => ErrorKind::Invalid,
        libc::ENOSPC => ErrorKind::NoSpace,
        libc::ESHUTDOWN => ErrorKind::Shutdown,
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
        false
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> BackendResult<()> {
        if buf.is_empty() {
            return Ok(());
        }
        if off.is_multiple_of(self.bs) && (buf.len() as u64).is_multiple_of(self.bs) {
            return self.dev.read(off, buf).map_err(map_err);
        }
        let len = buf.len() as u64;
        let cell = std::cell::RefCell::new(buf);
        self.split(
            off,
            len,
            |blk, at, n, dst| {
                let mut b = vec![0u8; self.bs as usize];
                self.dev.read(blk * self.bs, &mut b).map_err(map_err)?;
                cell.borrow_mut()[dst..dst + n].copy_from_slice(&b[at..at + n]);
                Ok(())
            },
            |o, n, dst| {
                self.dev
                    .read(o, &mut cell.borrow_mut()[dst..dst + n as usize])
                    .map_err(map_err)
            },
        )
    }
    fn write(&self, off: u64, data: &[u8], fua: bool) -> BackendResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        if off.is_multiple_of(self.bs) && (data.len() as u64).is_multiple_of(self.bs) {
            return self.dev.write(off, data, fua).map_err(map_err);
        }
        self.split(
            off,
            data.len() as u64,
            |blk, at, n, src| self.patch(blk, at, n, Some(&data[src..src + n]), fua),
            |o, n, src| {
                self.dev
                    .write(o, &data[src..src + n as usize], fua)
                    .map_err(map_err)
            },
        )
    }
    fn flush(&self) -> BackendResult<()> {
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
        self.split(
            off,
            len,
            |blk, at, n, _| self.patch(blk, at, n, None, fua),
            |o, n, _| self.dev.write_zeroes(o, n, fua).map_err(map_err),
        )
    }
    fn fast_zero(&self) -> bool {
        // Zeroing PM runs at memory bandwidth in the server; writing zeroes would also carry
        // them over the socket.
        true
    }
}
