//! Calls on descriptors: served when the descriptor is one the shim handed out, libc's
//! otherwise. `dup`/`dup2`/`dup3`/`fcntl(F_DUPFD*)` give a second kernel number sharing the
//! pool descriptor (and its offset). `mmap` is `mmap.rs`'s.

use crate::stat::fill_stat;
use crate::state::{self, en, enter, lookup, Open};
use pmkit_fs::posix::{Fd as PoolFd, Whence};
use std::ffi::{c_int, c_long, c_uint, c_void};
use std::sync::Arc;

/// # Safety
/// `buf` NULL with `n` 0, or valid for `n` bytes of writes (the caller's buffer, never PM) and
/// used by no one else during the call (read(2)'s contract).
pub(crate) unsafe fn out_buf<'a>(buf: *mut c_void, n: usize) -> Result<&'a mut [u8], c_int> {
    if n > 0 {
        // A bad pointer is EFAULT, as the kernel answers, not a fault in the shim.
        crate::guarded::check(buf.cast(), n, true)?;
    }
    // SAFETY: writable now (checked) and the caller's contract.
    unsafe { pmkit_cabi::slice_mut(buf.cast::<u8>(), n) }.ok_or(libc::EFAULT)
}

/// # Safety
/// As [`out_buf`], for reads of the buffer (write(2)'s contract).
pub(crate) unsafe fn in_buf<'a>(buf: *const c_void, n: usize) -> Result<&'a [u8], c_int> {
    if n > 0 {
        crate::guarded::check(buf.cast(), n, false)?;
    }
    // SAFETY: readable now (checked) and the caller's contract.
    unsafe { pmkit_cabi::slice(buf.cast::<u8>(), n) }.ok_or(libc::EFAULT)
}

pub(crate) fn offset(off: i64) -> Result<u64, c_int> {
    u64::try_from(off).map_err(|_| libc::EINVAL)
}

/// Forget `fd` and close its kernel number.
fn close_shim(fd: c_int) -> c_int {
    let o = state::remove(fd);
    let r = real!(close(fd) as fn(c_int) -> c_int);
    drop(o); // the last number of a description closes the pool descriptor
    r
}

#[no_mangle]
pub(crate) extern "C" fn close(fd: c_int) -> c_int {
    if lookup(fd).is_some() {
        return close_shim(fd);
    }
    if !state::busy() && state::is_own(fd) {
        return 0; // the shim's connection to the pool's server stays (see state::is_own)
    }
    real!(close(fd) as fn(c_int) -> c_int)
}

/// # Safety
/// read(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| {
            // SAFETY: the caller's contract.
            let b = unsafe { out_buf(buf, n) }?;
            Ok(p.read(o.fd, b).map_err(en)? as isize)
        });
    }
    real!(read(fd, buf, n) as fn(c_int, *mut c_void, usize) -> isize)
}

/// # Safety
/// read(2)'s contract (fortified: `buflen` is the buffer's size).
#[no_mangle]
pub(crate) unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    buflen: usize,
) -> isize {
    if lookup(fd).is_some() {
        // SAFETY: the caller's contract, at most `buflen` bytes.
        return unsafe { read(fd, buf, n.min(buflen)) };
    }
    real!(__read_chk(fd, buf, n, buflen) as fn(c_int, *mut c_void, usize, usize) -> isize)
}

/// # Safety
/// write(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| {
            // SAFETY: the caller's contract.
            let b = unsafe { in_buf(buf, n) }?;
            Ok(p.write(o.fd, b).map_err(en)? as isize)
        });
    }
    real!(write(fd, buf, n) as fn(c_int, *const c_void, usize) -> isize)
}

/// # Safety
/// pread(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: usize, off: i64) -> isize {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| {
            // SAFETY: the caller's contract.
            let b = unsafe { out_buf(buf, n) }?;
            Ok(p.pread(o.fd, b, offset(off)?).map_err(en)? as isize)
        });
    }
    real!(pread(fd, buf, n, off) as fn(c_int, *mut c_void, usize, i64) -> isize)
}

/// # Safety
/// pread(2)'s contract (fortified: `buflen` is the buffer's size).
#[no_mangle]
pub(crate) unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    off: i64,
    buflen: usize,
) -> isize {
    if lookup(fd).is_some() {
        // SAFETY: the caller's contract, at most `buflen` bytes.
        return unsafe { pread(fd, buf, n.min(buflen), off) };
    }
    real!(__pread_chk(fd, buf, n, off, buflen) as fn(c_int, *mut c_void, usize, i64, usize) -> isize)
}

/// # Safety
/// pread(2)'s contract (fortified).
#[no_mangle]
pub(crate) unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    off: i64,
    buflen: usize,
) -> isize {
    // SAFETY: the caller's contract.
    unsafe { __pread_chk(fd, buf, n, off, buflen) }
}

/// # Safety
/// pread(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: usize, off: i64) -> isize {
    // SAFETY: the caller's contract (off_t is 64 bits here).
    unsafe { pread(fd, buf, n, off) }
}

/// # Safety
/// pwrite(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: usize, off: i64) -> isize {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| {
            // SAFETY: the caller's contract.
            let b = unsafe { in_buf(buf, n) }?;
            Ok(p.pwrite(o.fd, b, offset(off)?).map_err(en)? as isize)
        });
    }
    real!(pwrite(fd, buf, n, off) as fn(c_int, *const c_void, usize, i64) -> isize)
}

/// # Safety
/// pwrite(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    off: i64,
) -> isize {
    // SAFETY: the caller's contract.
    unsafe { pwrite(fd, buf, n, off) }
}

/// One `struct iovec` of the caller's array.
///
/// # Safety
/// `iov` valid for `cnt` entries.
pub(crate) unsafe fn iovecs(
    iov: *const libc::iovec,
    cnt: c_int,
) -> Result<Vec<libc::iovec>, c_int> {
    if !(0..=1024).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    if cnt > 0 && iov.is_null() {
        return Err(libc::EFAULT);
    }
    crate::guarded::check(
        iov.cast(),
        cnt as usize * std::mem::size_of::<libc::iovec>(),
        false,
    )?;
    // SAFETY: valid for `cnt` entries (readv(2)'s contract); copied out.
    Ok((0..cnt as usize).map(|i| unsafe { *iov.add(i) }).collect())
}

/// # Safety
/// readv(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| {
            let mut total = 0usize;
            // SAFETY: the caller's contract.
            for v in unsafe { iovecs(iov, cnt) }? {
                // SAFETY: each entry is a buffer of the caller's.
                let b = unsafe { out_buf(v.iov_base, v.iov_len) }?;
                let k = p.read(o.fd, b).map_err(en)?;
                total += k;
                if k < v.iov_len {
                    break;
                }
            }
            Ok(total as isize)
        });
    }
    real!(readv(fd, iov, cnt) as fn(c_int, *const libc::iovec, c_int) -> isize)
}

/// # Safety
/// writev(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| {
            let mut total = 0usize;
            // SAFETY: the caller's contract.
            for v in unsafe { iovecs(iov, cnt) }? {
                // SAFETY: each entry is a buffer of the caller's.
                let b = unsafe { in_buf(v.iov_base, v.iov_len) }?;
                total += p.write(o.fd, b).map_err(en)?;
            }
            Ok(total as isize)
        });
    }
    real!(writev(fd, iov, cnt) as fn(c_int, *const libc::iovec, c_int) -> isize)
}

#[no_mangle]
pub(crate) extern "C" fn lseek(fd: c_int, off: i64, whence: c_int) -> i64 {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| {
            let w = match whence {
                libc::SEEK_SET => Whence::Set,
                libc::SEEK_CUR => Whence::Cur,
                libc::SEEK_END => Whence::End,
                libc::SEEK_DATA => Whence::Data,
                libc::SEEK_HOLE => Whence::Hole,
                _ => return Err(libc::EINVAL),
            };
            Ok(p.lseek(o.fd, off, w).map_err(en)? as i64)
        });
    }
    real!(lseek(fd, off, whence) as fn(c_int, i64, c_int) -> i64)
}

#[no_mangle]
pub(crate) extern "C" fn lseek64(fd: c_int, off: i64, whence: c_int) -> i64 {
    lseek(fd, off, whence)
}

#[no_mangle]
pub(crate) extern "C" fn fsync(fd: c_int) -> c_int {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| p.fsync(o.fd).map(|_| 0).map_err(en));
    }
    real!(fsync(fd) as fn(c_int) -> c_int)
}

#[no_mangle]
pub(crate) extern "C" fn fdatasync(fd: c_int) -> c_int {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| p.fsync(o.fd).map(|_| 0).map_err(en));
    }
    real!(fdatasync(fd) as fn(c_int) -> c_int)
}

#[no_mangle]
pub(crate) extern "C" fn ftruncate(fd: c_int, len: i64) -> c_int {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| {
            p.ftruncate(o.fd, offset(len)?).map_err(en)?;
            Ok(0)
        });
    }
    real!(ftruncate(fd, len) as fn(c_int, i64) -> c_int)
}

#[no_mangle]
pub(crate) extern "C" fn ftruncate64(fd: c_int, len: i64) -> c_int {
    ftruncate(fd, len)
}

/// fallocate(2) on a shim descriptor: allocate, keep the size, punch a hole, zero a range
/// (`pmkit_fs::Falloc`); collapse and insert are EOPNOTSUPP.
#[no_mangle]
pub(crate) extern "C" fn fallocate(fd: c_int, mode: c_int, off: i64, len: i64) -> c_int {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| {
            let m = pmkit_fs::Falloc::from_mode(mode).map_err(en)?;
            p.fallocate_mode(o.fd, offset(off)?, offset(len)?, m)
                .map_err(en)?;
            Ok(0)
        });
    }
    real!(fallocate(fd, mode, off, len) as fn(c_int, c_int, i64, i64) -> c_int)
}

#[no_mangle]
pub(crate) extern "C" fn fallocate64(fd: c_int, mode: c_int, off: i64, len: i64) -> c_int {
    fallocate(fd, mode, off, len)
}

/// posix_fallocate(3): the error number as its result, errno untouched, as glibc does.
#[no_mangle]
pub(crate) extern "C" fn posix_fallocate(fd: c_int, off: i64, len: i64) -> c_int {
    if let Some(o) = lookup(fd) {
        if off < 0 || len <= 0 {
            return libc::EINVAL;
        }
        let saved = crate::state::errno();
        let r = enter(-1, |p| {
            p.fallocate(o.fd, off as u64, len as u64).map_err(en)?;
            Ok(0)
        });
        let code = if r == 0 { 0 } else { crate::state::errno() };
        crate::state::set_errno(saved);
        return code;
    }
    real!(posix_fallocate(fd, off, len) as fn(c_int, i64, i64) -> c_int)
}

#[no_mangle]
pub(crate) extern "C" fn posix_fallocate64(fd: c_int, off: i64, len: i64) -> c_int {
    posix_fallocate(fd, off, len)
}

/// fstat of a shim descriptor.
///
/// # Safety
/// `st` valid for one `struct stat`.
pub(crate) unsafe fn fstat_shim(o: &Open, st: *mut libc::stat) -> c_int {
    enter(-1, |p| {
        let a = p.fstat(o.fd).map_err(en)?;
        // SAFETY: the caller's contract.
        unsafe { fill_stat(&a, st) }
    })
}

/// # Safety
/// fstat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fstat(fd: c_int, st: *mut libc::stat) -> c_int {
    if let Some(o) = lookup(fd) {
        // SAFETY: the caller's contract.
        return unsafe { fstat_shim(&o, st) };
    }
    let r = real!(fstat(fd, st) as fn(c_int, *mut libc::stat) -> c_int);
    if r == 0 {
        // SAFETY: the kernel just filled it.
        unsafe { crate::fifo::fix_stat(st) };
    }
    r
}

/// # Safety
/// fstat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fstat64(fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's contract (stat64 is stat here).
    unsafe { fstat(fd, st) }
}

/// The pre-2.33 entry point older binaries call.
///
/// # Safety
/// fstat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __fxstat(ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int {
    if let Some(o) = lookup(fd) {
        // SAFETY: the caller's contract.
        return unsafe { fstat_shim(&o, st) };
    }
    let r = real!(__fxstat(ver, fd, st) as fn(c_int, c_int, *mut libc::stat) -> c_int);
    if r == 0 {
        // SAFETY: the kernel just filled it.
        unsafe { crate::fifo::fix_stat(st) };
    }
    r
}

/// # Safety
/// fstat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __fxstat64(ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { __fxstat(ver, fd, st) }
}

/// After the kernel made `new` a copy of `old` (or closed `new` under it): the table follows.
fn duplicated(old: Option<Arc<Open>>, new: c_int) {
    let gone = match old {
        Some(o) => state::insert(new, o),
        None => state::remove(new),
    };
    drop(gone);
}

#[no_mangle]
pub(crate) extern "C" fn dup(fd: c_int) -> c_int {
    let o = lookup(fd);
    let r = real!(dup(fd) as fn(c_int) -> c_int);
    if r >= 0 && o.is_some() {
        duplicated(o, r);
    }
    r
}

#[no_mangle]
pub(crate) extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new && !state::busy() {
        state::make_room(new);
    }
    let o = lookup(old);
    let r = real!(dup2(old, new) as fn(c_int, c_int) -> c_int);
    if r >= 0 && old != new && !state::busy() {
        duplicated(o, r);
    }
    r
}

#[no_mangle]
pub(crate) extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new && !state::busy() {
        state::make_room(new);
    }
    let o = lookup(old);
    let r = real!(dup3(old, new, flags) as fn(c_int, c_int, c_int) -> c_int);
    if r >= 0 && !state::busy() {
        duplicated(o, r);
    }
    r
}

/// fcntl: on a shim descriptor, F_DUPFD/F_DUPFD_CLOEXEC share it, F_GETFL gives its open
/// flags, F_SETFL accepts only flags that change nothing here (it may not turn O_APPEND on or
/// off: EINVAL); F_GETFD/F_SETFD and record locks act on the kernel number (one process holds
/// the pool, so its locks never conflict).
///
/// # Safety
/// fcntl(2)'s contract (`arg` is read only by commands that take one).
#[no_mangle]
pub(crate) unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    if let Some(r) = crate::locks::fcntl(fd, cmd, arg) {
        return r;
    }
    if let Some(o) = lookup(fd) {
        match cmd {
            libc::F_GETFL => {
                // As the kernel: the open-time flags are not kept.
                let gone = libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_NOCTTY;
                return o.flags & !(gone | libc::O_CLOEXEC);
            }
            libc::F_SETFL => {
                if (arg as c_int ^ o.flags) & libc::O_APPEND != 0 {
                    state::set_errno(libc::EINVAL);
                    return -1;
                }
                return 0;
            }
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
                let r = real!(fcntl(fd, cmd, arg) as fn(c_int, c_int, c_long) -> c_int);
                if r >= 0 {
                    duplicated(Some(o), r);
                }
                return r;
            }
            _ => {}
        }
    }
    real!(fcntl(fd, cmd, arg) as fn(c_int, c_int, c_long) -> c_int)
}

/// # Safety
/// fcntl(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { fcntl(fd, cmd, arg) }
}

/// copy_file_range with shim descriptors on both sides: the pool copies (`Posix::copy_range`:
/// one call, holes kept). With a kernel descriptor on one side: copied through the shim's read
/// and write (at most 1 MiB a call, as the kernel may copy less than asked).
///
/// # Safety
/// copy_file_range(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: usize,
    flags: c_uint,
) -> isize {
    if lookup(fd_in).is_none() && lookup(fd_out).is_none() {
        return real!(copy_file_range(fd_in, off_in, fd_out, off_out, len, flags)
            as fn(c_int, *mut i64, c_int, *mut i64, usize, c_uint) -> isize);
    }
    if flags != 0 {
        state::set_errno(libc::EINVAL);
        return -1;
    }
    if let (Some(i), Some(o)) = (lookup(fd_in), lookup(fd_out)) {
        // SAFETY: the offsets are null or valid (copy_file_range(2)'s contract).
        return unsafe { copy_in_pool((i.fd, off_in), (o.fd, off_out), len) };
    }
    COPY_BUF.with(|b| {
        let mut b = b.borrow_mut();
        if b.is_empty() {
            // Once per thread: `cp` calls this at least twice per file, and a fresh zeroed
            // 1 MiB per call cost a fifth of a `cp -r` in memset.
            b.resize(COPY_CHUNK, 0);
        }
        // SAFETY: the buffer is this thread's and holds COPY_CHUNK bytes; the offsets are the
        // caller's (copy_file_range(2)'s contract).
        unsafe {
            copy_through(
                fd_in,
                off_in,
                fd_out,
                off_out,
                &mut b[..len.min(COPY_CHUNK)],
            )
        }
    })
}

/// Both ends in the pool: one call, the offsets given (and moved) or the descriptors' own.
///
/// # Safety
/// The offsets are null or valid (copy_file_range(2)'s contract).
unsafe fn copy_in_pool(from: (PoolFd, *mut i64), to: (PoolFd, *mut i64), len: usize) -> isize {
    // SAFETY: the caller's contract.
    let at = |p: *mut i64| unsafe { p.as_ref() }.map(|&o| offset(o)).transpose();
    enter(-1, |p| {
        let (off_in, off_out) = (at(from.1)?, at(to.1)?);
        let n = p
            .copy_range(from.0, off_in, to.0, off_out, len as u64)
            .map_err(en)?;
        for (ptr, off) in [(from.1, off_in), (to.1, off_out)] {
            if let Some(o) = off {
                // SAFETY: non-null (an offset was read through it), valid by the contract.
                unsafe { *ptr = (o + n) as i64 };
            }
        }
        Ok(n as isize)
    })
}

/// The most one copy_file_range moves through the shim.
const COPY_CHUNK: usize = 1 << 20;

thread_local! {
    static COPY_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One read into `buf` and one write of what it got, moving the offsets as copy_file_range does.
///
/// # Safety
/// The offsets are null or valid (copy_file_range(2)'s contract).
unsafe fn copy_through(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    buf: &mut [u8],
) -> isize {
    let p = buf.as_mut_ptr().cast::<c_void>();
    // SAFETY: `buf` is ours; the offsets as the caller promised.
    unsafe {
        let got = if off_in.is_null() {
            read(fd_in, p, buf.len())
        } else {
            pread(fd_in, p, buf.len(), *off_in)
        };
        if got <= 0 {
            return got;
        }
        let put = if off_out.is_null() {
            write(fd_out, p, got as usize)
        } else {
            pwrite(fd_out, p, got as usize, *off_out)
        };
        if put < 0 {
            return put;
        }
        if !off_in.is_null() {
            *off_in += put as i64;
        } else if put < got {
            // Give back what was read and not written.
            lseek(fd_in, put as i64 - got as i64, libc::SEEK_CUR);
        }
        if !off_out.is_null() {
            *off_out += put as i64;
        }
        put
    }
}

/// sendfile from or to a shim descriptor: EINVAL, which callers take as "copy by hand".
///
/// # Safety
/// sendfile(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn sendfile(out: c_int, inp: c_int, off: *mut i64, n: usize) -> isize {
    if lookup(out).is_some() || lookup(inp).is_some() {
        state::set_errno(libc::EINVAL);
        return -1;
    }
    real!(sendfile(out, inp, off, n) as fn(c_int, c_int, *mut i64, usize) -> isize)
}

/// Descriptors closed past this library's `close`: by `close_range`/`closefrom`, or by glibc
/// inside `fclose` of a stream `fdopen` made over a shim descriptor. The table forgets them,
/// so a number the kernel gives out again is never taken for a pool file.
pub(crate) fn stale(lo: c_int, hi: c_int) {
    if state::busy() {
        return;
    }
    for fd in state::numbers() {
        if fd >= lo && fd <= hi {
            drop(state::remove(fd));
        }
    }
}

#[no_mangle]
pub(crate) extern "C" fn close_range(lo: c_uint, hi: c_uint, flags: c_int) -> c_int {
    // The shim's connection to the pool's server is not the program's to close: the range is
    // closed around it.
    let own = if state::busy() { None } else { own_in(lo, hi) };
    if let Some(own) = own {
        let below = match own.checked_sub(1) {
            Some(b) if b >= lo => close_range(lo, b, flags),
            _ => 0,
        };
        let above = match own.checked_add(1) {
            Some(a) if a <= hi => close_range(a, hi, flags),
            _ => 0,
        };
        return if below < 0 { below } else { above };
    }
    let r = real!(close_range(lo, hi, flags) as fn(c_uint, c_uint, c_int) -> c_int);
    if r == 0 && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        stale(
            lo.min(c_int::MAX as c_uint) as c_int,
            hi.min(c_int::MAX as c_uint) as c_int,
        );
    }
    r
}

#[no_mangle]
pub(crate) extern "C" fn closefrom(lo: c_int) {
    if lo >= 0 && !state::busy() && own_in(lo as c_uint, c_uint::MAX).is_some() {
        close_range(lo as c_uint, c_uint::MAX, 0);
        return;
    }
    real!(closefrom(lo) as fn(c_int) -> ());
    stale(lo, c_int::MAX);
}

/// The shim's server connection's number, if it lies in `[lo, hi]`.
fn own_in(lo: c_uint, hi: c_uint) -> Option<c_uint> {
    let own = c_uint::try_from(state::own_socket()).ok()?;
    (lo <= own && own <= hi).then_some(own)
}
