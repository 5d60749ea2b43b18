//! [`BlkDisk`]: a PMBD block device (`pmkit_blk::Device`) as the disk behind the FUSE file of
//! `pmkit attach` (`pmkit_fuse::Disk`).

use pmkit_blk::{BlkError, Device};
use pmkit_fuse::{Disk, DiskError};
use pmkit_media::Region;
use std::sync::Arc;

/// The PMBD device as the FUSE file's disk.
pub struct BlkDisk(pub Arc<Device<Region>>);

fn disk_err(e: BlkError) -> DiskError {
    DiskError {
        errno: e.errno(),
        message: e.to_string(),
    }
}

impl Disk for BlkDisk {
    fn size(&self) -> u64 {
        self.0.capacity()
    }
    fn block_size(&self) -> u32 {
        self.0.block_size()
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.0.read_bytes(off, buf).map_err(disk_err)
    }
    fn write(&self, off: u64, data: &[u8], fua: bool) -> Result<(), DiskError> {
        self.0.write_bytes(off, data, fua).map_err(disk_err)
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.0.flush().map_err(disk_err)
    }
    fn discard(&self, off: u64, len: u64) -> Result<(), DiskError> {
        self.0.trim(off, len).map_err(disk_err)
    }
    fn zero(&self, off: u64, len: u64) -> Result<(), DiskError> {
        self.0.write_zeroes_bytes(off, len, false).map_err(disk_err)
    }
}
