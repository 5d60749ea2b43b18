//! open(2) and its family on paths: served when the path is under the prefix (see
//! [`state::route`]), libc's otherwise.

use crate::state::{self, en, enter, route, Open, Route};
use pmkit_fs::posix::Opened;
use std::ffi::{c_char, c_int, c_uint};
use std::sync::Arc;

/// open(2) of a pool path: a pool descriptor behind a new kernel number.
pub(crate) fn open_pool(path: Vec<u8>, flags: c_int, mode: c_uint) -> c_int {
    // A stale entry the new number replaces is dropped after `enter` (its drop closes a pool
    // descriptor, which takes the pool's lock again).
    let mut gone = None;
    let mut fifo = None;
    let r = enter(-1, |p| {
        let fd = match p
            .open_node(&path, flags, state::umasked(mode))
            .map_err(en)?
        {
            Opened::Fd(fd) => fd,
            Opened::Fifo(a) => {
                fifo = Some(a.ino);
                return Ok(-1);
            }
        };
        let cloexec = if flags & libc::O_CLOEXEC != 0 {
            libc::EPOLL_CLOEXEC
        } else {
            0
        };
        // The kernel number: an epoll instance answers read, write, mmap, getdents... with
        // an error, so a call the shim does not serve fails rather than reaching some file.
        // SAFETY: a plain system call.
        let k = unsafe { libc::epoll_create1(cloexec) };
        if k < 0 {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE);
            let _ = p.close(fd);
            return Err(e);
        }
        let path = state::kept_path(path);
        let o = Open { fd, flags, path };
        gone = state::insert(k, Arc::new(o));
        Ok(k)
    });
    drop(gone);
    match fifo {
        // Opened outside the pool's lock: it may wait for the other end.
        Some(ino) => crate::fifo::open(ino, flags),
        None => r,
    }
}

/// # Safety
/// open(2)'s contract; `mode` is read only with O_CREAT or O_TMPFILE.
#[no_mangle]
pub(crate) unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        Route::Pool(p) => {
            let mode = if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
                mode
            } else {
                0
            };
            open_pool(p, flags, mode)
        }
        Route::Real => {
            let r = real!(openat(dirfd, path, flags, mode)
                as fn(c_int, *const c_char, c_int, c_uint) -> c_int);
            if r >= 0 && !state::busy() {
                // The kernel gave out a number the table still holds: the shim descriptor
                // was closed past this library (see `fd::stale`); forget it.
                drop(state::remove(r));
            }
            r
        }
    }
}

/// # Safety
/// open(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { openat(dirfd, path, flags, mode) }
}

/// # Safety
/// open(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { openat(libc::AT_FDCWD, path, flags, mode) }
}

/// # Safety
/// open(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { openat(libc::AT_FDCWD, path, flags, mode) }
}

/// Fortified open (flags not known at compile time; no O_CREAT).
///
/// # Safety
/// open(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { openat(libc::AT_FDCWD, path, flags, 0) }
}

/// # Safety
/// open(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { openat(libc::AT_FDCWD, path, flags, 0) }
}

/// # Safety
/// openat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __openat_2(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { openat(dirfd, path, flags, 0) }
}

/// # Safety
/// openat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __openat64_2(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { openat(dirfd, path, flags, 0) }
}

/// # Safety
/// creat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn creat(path: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        openat(
            libc::AT_FDCWD,
            path,
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            mode,
        )
    }
}

/// # Safety
/// creat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn creat64(path: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { creat(path, mode) }
}
