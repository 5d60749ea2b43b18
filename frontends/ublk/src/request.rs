//! One request: a descriptor the driver wrote, served by the block device. Pure: no ring, no
//! kernel, so the tests run it on any machine.

use crate::abi::{self, IoDesc};
use pmkit_nbd::{BackendError, BlockBackend, ErrorKind};

/// Serve the request `d` with `buf` as its data buffer (the driver copied a write's data into it
/// before handing the request over, and copies a read's out of it after the commit). Returns
/// what the commit reports: the bytes done, or a negative errno.
pub fn serve<B: BlockBackend + ?Sized>(backend: &B, d: &IoDesc, buf: &mut [u8]) -> i32 {
    let off = d.start_sector << 9;
    let len = (d.nr_sectors as u64) << 9;
    let flags = d.op_flags >> 8;
    let fua = flags & abi::IO_F_FUA != 0;
    let in_range = off
        .checked_add(len)
        .is_some_and(|end| end <= backend.size());
    let done = match d.op() {
        abi::OP_FLUSH => return errno(backend.flush()),
        _ if !in_range => return -libc::EINVAL,
        _ if backend.is_read_only() && d.op() != abi::OP_READ => return -libc::EROFS,
        abi::OP_READ | abi::OP_WRITE if len as usize > buf.len() => {
            // The driver never sends more than max_io_buf_bytes, the buffer's size.
            return -libc::EINVAL;
        }
        abi::OP_READ => backend.read(off, &mut buf[..len as usize]),
        abi::OP_WRITE => backend.write(off, &buf[..len as usize], fua),
        abi::OP_DISCARD => backend.trim(off, len, fua),
        abi::OP_WRITE_ZEROES => backend.write_zeroes(off, len, fua, flags & abi::IO_F_NOUNMAP == 0),
        _ => return -libc::EOPNOTSUPP,
    };
    match done {
        Ok(()) => len.min(i32::MAX as u64) as i32,
        Err(e) => errno(Err(e)),
    }
}

fn errno(r: Result<(), BackendError>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => -match e.kind {
            ErrorKind::Io => libc::EIO,
            ErrorKind::NoSpace => libc::ENOSPC,
            ErrorKind::Invalid => libc::EINVAL,
            ErrorKind::ReadOnly => libc::EROFS,
            ErrorKind::NotSupported => libc::EOPNOTSUPP,
            ErrorKind::Shutdown => libc::ESHUTDOWN,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmkit_nbd::{BlockSizes, MemBackend};

    fn desc(op: u8, flags: u32, sector: u64, sectors: u32) -> IoDesc {
        IoDesc {
            op_flags: op as u32 | flags << 8,
            nr_sectors: sectors,
            start_sector: sector,
            addr: 0,
        }
    }

    fn mem(read_only: bool) -> MemBackend {
        let sizes = BlockSizes {
            minimum: 512,
            preferred: 4096,
        };
        MemBackend::new(1 << 20, sizes, read_only)
    }

    #[test]
    fn writes_read_back_and_zeroes_and_discards_clear() {
        let b = mem(false);
        let mut buf = vec![0xabu8; 8192];
        assert_eq!(serve(&b, &desc(abi::OP_WRITE, 0, 8, 16), &mut buf), 8192);
        let mut back = vec![0u8; 8192];
        assert_eq!(serve(&b, &desc(abi::OP_READ, 0, 8, 16), &mut back), 8192);
        assert_eq!(back, buf);
        let zero = desc(abi::OP_WRITE_ZEROES, abi::IO_F_NOUNMAP, 8, 8);
        assert_eq!(serve(&b, &zero, &mut []), 4096);
        assert_eq!(serve(&b, &desc(abi::OP_DISCARD, 0, 16, 8), &mut []), 4096);
        serve(&b, &desc(abi::OP_READ, 0, 8, 16), &mut back);
        assert!(back[..4096].iter().all(|&x| x == 0));
        assert_eq!(serve(&b, &desc(abi::OP_FLUSH, 0, 0, 0), &mut []), 0);
        let fua = desc(abi::OP_WRITE, abi::IO_F_FUA >> 8, 0, 1);
        assert_eq!(serve(&b, &fua, &mut buf), 512);
    }

    #[test]
    fn bad_requests_fail_without_touching_the_device() {
        let b = mem(false);
        let mut buf = vec![1u8; 4096];
        // Past the end, sector arithmetic that overflows, more than the buffer, unknown op.
        assert_eq!(
            serve(&b, &desc(abi::OP_WRITE, 0, 2048, 8), &mut buf),
            -libc::EINVAL
        );
        assert_eq!(
            serve(&b, &desc(abi::OP_READ, 0, u64::MAX >> 9, 8), &mut buf),
            -libc::EINVAL
        );
        assert_eq!(
            serve(&b, &desc(abi::OP_WRITE, 0, 0, 16), &mut buf),
            -libc::EINVAL
        );
        assert_eq!(serve(&b, &desc(18, 0, 0, 1), &mut buf), -libc::EOPNOTSUPP);
        let mut back = vec![9u8; 4096];
        serve(&b, &desc(abi::OP_READ, 0, 0, 8), &mut back);
        assert!(back.iter().all(|&x| x == 0));
        let ro = mem(true);
        assert_eq!(
            serve(&ro, &desc(abi::OP_WRITE, 0, 0, 8), &mut buf),
            -libc::EROFS
        );
        assert_eq!(serve(&ro, &desc(abi::OP_READ, 0, 0, 8), &mut buf), 4096);
    }
}
