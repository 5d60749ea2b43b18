//! Vectored reads and writes at an offset on shim descriptors: preadv, pwritev and their `2`
//! forms with flags (fsx and databases use them), libc's otherwise. A write gathers its buffers
//! into one write, so an atomic file takes it whole; a read fills them in order and stops at
//! the end of the file.

use crate::fd::{in_buf, iovecs, offset, out_buf};
use crate::state::{en, enter, lookup};
use pmkit_fs::posix::Whence;
use std::ffi::c_int;

/// The `RWF_*` flags a pool descriptor honours: every write is durable when it returns
/// (`DSYNC`, `SYNC`), and nothing waits on a device (`HIPRI`, `NOWAIT`). Others (`APPEND`,
/// `DONTCACHE`, unknown bits) are EOPNOTSUPP, as Linux answers unknown ones.
const RWF_SERVED: c_int = libc::RWF_HIPRI | libc::RWF_DSYNC | libc::RWF_SYNC | libc::RWF_NOWAIT;

/// Read into the caller's buffers from `off` (`None`: the descriptor's position, which moves).
///
/// # Safety
/// preadv(2)'s contract.
unsafe fn read_vec(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Option<i64>) -> isize {
    let Some(o) = lookup(fd) else {
        unreachable!("a shim descriptor")
    };
    enter(-1, |p| {
        // SAFETY: the caller's contract.
        let vs = unsafe { iovecs(iov, cnt) }?;
        let mut at = match off {
            Some(off) => offset(off)?,
            None => p.lseek(o.fd, 0, Whence::Cur).map_err(en)?,
        };
        let mut total = 0usize;
        for v in vs {
            // SAFETY: each entry is a buffer of the caller's.
            let b = unsafe { out_buf(v.iov_base, v.iov_len) }?;
            let k = p.pread(o.fd, b, at).map_err(en)?;
            total += k;
            at += k as u64;
            if k < v.iov_len {
                break;
            }
        }
        if off.is_none() {
            p.lseek(o.fd, at as i64, Whence::Set).map_err(en)?;
        }
        Ok(total as isize)
    })
}

/// Write the caller's buffers, gathered, at `off` (`None`: at the descriptor's position, which
/// moves, or its end under O_APPEND: `write`).
///
/// # Safety
/// pwritev(2)'s contract.
unsafe fn write_vec(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Option<i64>) -> isize {
    let Some(o) = lookup(fd) else {
        unreachable!("a shim descriptor")
    };
    enter(-1, |p| {
        let mut all = Vec::new();
        // SAFETY: the caller's contract.
        for v in unsafe { iovecs(iov, cnt) }? {
            // SAFETY: each entry is a buffer of the caller's.
            all.extend_from_slice(unsafe { in_buf(v.iov_base, v.iov_len) }?);
        }
        let n = match off {
            Some(off) => p.pwrite(o.fd, &all, offset(off)?),
            None => p.write(o.fd, &all),
        };
        Ok(n.map_err(en)? as isize)
    })
}

/// preadv2/pwritev2's flags on a pool descriptor.
fn flags_ok(flags: c_int) -> Result<(), c_int> {
    match flags & !RWF_SERVED {
        0 => Ok(()),
        _ => Err(libc::EOPNOTSUPP),
    }
}

/// The offset of a `2` call: -1 is the descriptor's position.
fn at(off: i64) -> Option<i64> {
    (off != -1).then_some(off)
}

/// # Safety
/// preadv(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn preadv(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
) -> isize {
    if lookup(fd).is_some() {
        // SAFETY: the caller's contract.
        return unsafe { read_vec(fd, iov, cnt, Some(off)) };
    }
    real!(preadv(fd, iov, cnt, off) as fn(c_int, *const libc::iovec, c_int, i64) -> isize)
}

/// # Safety
/// preadv(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
) -> isize {
    // SAFETY: the caller's contract (off_t is 64 bits here).
    unsafe { preadv(fd, iov, cnt, off) }
}

/// # Safety
/// pwritev(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
) -> isize {
    if lookup(fd).is_some() {
        // SAFETY: the caller's contract.
        return unsafe { write_vec(fd, iov, cnt, Some(off)) };
    }
    real!(pwritev(fd, iov, cnt, off) as fn(c_int, *const libc::iovec, c_int, i64) -> isize)
}

/// # Safety
/// pwritev(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
) -> isize {
    // SAFETY: the caller's contract.
    unsafe { pwritev(fd, iov, cnt, off) }
}

/// # Safety
/// preadv2(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
    flags: c_int,
) -> isize {
    if lookup(fd).is_some() {
        if let Err(e) = flags_ok(flags) {
            return enter(-1, |_| Err(e));
        }
        // SAFETY: the caller's contract.
        return unsafe { read_vec(fd, iov, cnt, at(off)) };
    }
    real!(preadv2(fd, iov, cnt, off, flags)
        as fn(c_int, *const libc::iovec, c_int, i64, c_int) -> isize)
}

/// # Safety
/// preadv2(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
    flags: c_int,
) -> isize {
    // SAFETY: the caller's contract.
    unsafe { preadv2(fd, iov, cnt, off, flags) }
}

/// # Safety
/// pwritev2(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
    flags: c_int,
) -> isize {
    if lookup(fd).is_some() {
        if let Err(e) = flags_ok(flags) {
            return enter(-1, |_| Err(e));
        }
        // SAFETY: the caller's contract.
        return unsafe { write_vec(fd, iov, cnt, at(off)) };
    }
    real!(pwritev2(fd, iov, cnt, off, flags)
        as fn(c_int, *const libc::iovec, c_int, i64, c_int) -> isize)
}

/// # Safety
/// pwritev2(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
    flags: c_int,
) -> isize {
    // SAFETY: the caller's contract.
    unsafe { pwritev2(fd, iov, cnt, off, flags) }
}
