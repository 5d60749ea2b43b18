//! One request of the block device from a ring entry, answered in place: the opcodes a
//! single-file device gets
//! (the same answers as the fuser file system in `file.rs`, through the shared `Core`).
//! Anything else gets ENOSYS, which the kernel remembers for optional operations.

use super::abi::{self, op, u32_at, u64_at, InHeader};
use super::Handler;
use crate::file::{is_fua, Core, Disk, DISK_INO, DISK_NAME, ENTRIES, OPEN_FLAGS, TTL};

impl<D: Disk> Handler for Core<D> {
    fn answer(&self, h: &InHeader, op_in: &[u8], p: &mut [u8]) -> Result<u32, i32> {
        answer(self, h, op_in, p)
    }
}

/// The reply's payload length, or a positive errno.
fn answer<D: Disk>(core: &Core<D>, h: &InHeader, op_in: &[u8], p: &mut [u8]) -> Result<u32, i32> {
    let ino = h.nodeid;
    match h.opcode {
        op::LOOKUP => {
            // The name, NUL-terminated, is the payload.
            let name = &p[..(h.payload_sz as usize).min(p.len())];
            let name = name.split(|&c| c == 0).next().unwrap_or(&[]);
            if ino == 1 && name == DISK_NAME.as_bytes() {
                Ok(abi::entry_out(p, &core.attr(DISK_INO), 0, TTL))
            } else {
                Err(libc::ENOENT)
            }
        }
        op::GETATTR => match ino {
            1 | DISK_INO => Ok(abi::attr_out(p, &core.attr(ino), TTL)),
            _ => Err(libc::ENOENT),
        },
        op::SETATTR => {
            // fuse_setattr_in: valid @0, size @16. A device has a fixed size.
            let size = u64_at(op_in, 16);
            if u32_at(op_in, 0) & abi::FATTR_SIZE != 0 && size != core.attr(DISK_INO).size {
                return Err(libc::EPERM);
            }
            Ok(abi::attr_out(p, &core.attr(ino), TTL))
        }
        op::OPEN if ino == DISK_INO => Ok(abi::open_out(p, 0, OPEN_FLAGS)),
        op::OPEN => Err(libc::EISDIR),
        op::OPENDIR if ino == 1 => Ok(abi::open_out(p, 0, 0)),
        op::OPENDIR => Err(libc::ENOTDIR),
        op::READ => {
            // fuse_read_in: offset @8, size @16. The data goes straight into the payload
            // buffer the kernel copies from: no buffer of our own, no copy.
            let size = u32_at(op_in, 16).min(p.len() as u32);
            core.read(u64_at(op_in, 8), size, p).map(|n| n as u32)
        }
        op::WRITE => {
            // fuse_write_in: offset @8, size @16, open flags @32; the data is the payload.
            let size = (u32_at(op_in, 16) as usize).min(h.payload_sz as usize);
            let fua = is_fua(u32_at(op_in, 32) as i32);
            let n = core.write(u64_at(op_in, 8), &p[..size], fua)?;
            Ok(abi::write_out(p, n))
        }
        op::STATFS => {
            let (blocks, bsize) = core.statfs();
            let s = abi::Statfs {
                blocks,
                bfree: 0,
                bavail: 0,
                files: 2,
                ffree: 0,
                bsize,
                namelen: 255,
            };
            Ok(abi::statfs_out(p, &s))
        }
        // The device's FLUSH: fsync must make every completed write durable.
        op::FSYNC => core.fsync().map(|_| 0),
        // close() and directories: nothing buffered here; durability is fsync's job.
        op::RELEASE | op::RELEASEDIR | op::FLUSH | op::FSYNCDIR | op::ACCESS | op::DESTROY => Ok(0),
        op::FALLOCATE => {
            // fuse_fallocate_in: offset @8, length @16, mode @24.
            core.fallocate(
                u64_at(op_in, 8),
                u64_at(op_in, 16),
                u32_at(op_in, 24) as i32,
            )
            .map(|_| 0)
        }
        op::READDIR if ino == 1 => {
            // fuse_read_in: offset @8 (entries already returned), size @16.
            let limit = (u32_at(op_in, 16) as usize).min(p.len());
            let mut at = 0;
            for (i, (ino, kind, name)) in ENTRIES.iter().enumerate().skip(u64_at(op_in, 8) as usize)
            {
                match abi::dirent(p, at, limit, *ino, (i + 1) as u64, *kind, name.as_bytes()) {
                    Some(end) => at = end,
                    None => break,
                }
            }
            Ok(at as u32)
        }
        op::READDIR => Err(libc::ENOTDIR),
        _ => Err(libc::ENOSYS),
    }
}
