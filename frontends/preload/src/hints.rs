//! Calls that ask the kernel to write back or read ahead, on shim descriptors: every write
//! through the shim is durable when it returns and reads come from PM, so there is nothing to
//! do; they succeed after checking their arguments as Linux does (PostgreSQL's checkpointer
//! panics when `sync_file_range` fails). On other descriptors, libc's.

use crate::state::{lookup, set_errno};
use std::ffi::{c_int, c_uint};

/// The flags `sync_file_range` knows.
const SYNC_FILE_RANGE_ALL: c_uint = libc::SYNC_FILE_RANGE_WAIT_BEFORE
    | libc::SYNC_FILE_RANGE_WRITE
    | libc::SYNC_FILE_RANGE_WAIT_AFTER;

#[no_mangle]
pub(crate) extern "C" fn sync_file_range(fd: c_int, off: i64, n: i64, flags: c_uint) -> c_int {
    if lookup(fd).is_some() {
        if off < 0 || n < 0 || flags & !SYNC_FILE_RANGE_ALL != 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        return 0;
    }
    real!(sync_file_range(fd, off, n, flags) as fn(c_int, i64, i64, c_uint) -> c_int)
}

#[no_mangle]
pub(crate) extern "C" fn syncfs(fd: c_int) -> c_int {
    if lookup(fd).is_some() {
        return 0;
    }
    real!(syncfs(fd) as fn(c_int) -> c_int)
}

/// posix_fadvise(2): an error number, not -1 and errno.
#[no_mangle]
pub(crate) extern "C" fn posix_fadvise(fd: c_int, off: i64, len: i64, advice: c_int) -> c_int {
    if lookup(fd).is_some() {
        let known = (libc::POSIX_FADV_NORMAL..=libc::POSIX_FADV_NOREUSE).contains(&advice);
        return if len < 0 || !known { libc::EINVAL } else { 0 };
    }
    real!(posix_fadvise(fd, off, len, advice) as fn(c_int, i64, i64, c_int) -> c_int)
}

#[no_mangle]
pub(crate) extern "C" fn posix_fadvise64(fd: c_int, off: i64, len: i64, advice: c_int) -> c_int {
    posix_fadvise(fd, off, len, advice)
}

#[no_mangle]
pub(crate) extern "C" fn readahead(fd: c_int, off: i64, count: usize) -> isize {
    if lookup(fd).is_some() {
        return 0;
    }
    real!(readahead(fd, off, count) as fn(c_int, i64, usize) -> isize)
}
