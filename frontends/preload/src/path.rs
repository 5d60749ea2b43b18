//! Calls on paths: served when the path is under the prefix (see [`state::route`]), libc's
//! otherwise. A call naming one path under the prefix and one outside (rename, link) is
//! EXDEV, as between two file systems.

use crate::stat::{fill_stat, fill_statx};
use crate::state::{self, en, enter, route, Route};
use pmkit_fs::RenameFlags;
use std::ffi::{c_char, c_int, c_uint};

/// AT_SYMLINK_NOFOLLOW, unless a trailing slash asks for the directory a link names.
fn nofollow(flags: c_int, p: &[u8]) -> bool {
    flags & libc::AT_SYMLINK_NOFOLLOW != 0 && !p.ends_with(b"/")
}

/// The attributes fstatat/statx report; "name/" of a non-directory is ENOTDIR.
fn attr_at(
    fs: &dyn pmkit_fs_share::PoolApi,
    p: &[u8],
    flags: c_int,
) -> Result<pmkit_fs::Attr, c_int> {
    let a = if nofollow(flags, p) {
        fs.lstat(p)
    } else {
        fs.stat(p)
    }
    .map_err(en)?;
    if p.ends_with(b"/") && a.kind != pmkit_fs::Kind::Dir {
        return Err(libc::ENOTDIR);
    }
    Ok(a)
}

/// fstatat(2): stat/lstat of a pool path, fstat of a shim descriptor with AT_EMPTY_PATH.
///
/// # Safety
/// fstatat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    if flags & libc::AT_EMPTY_PATH != 0 && !path.is_null() {
        // An unreadable pointer is not "": routed below, where it is EFAULT. (Not
        // `copy_c_string`: std's own `statx` with AT_EMPTY_PATH comes here from inside it.)
        // SAFETY: not NULL, and readable (checked where it can be; the caller's contract).
        if crate::guarded::accessible(path.cast(), 1, false) != Some(false) && unsafe { *path } == 0
        {
            if let Some(o) = state::lookup(dirfd) {
                // SAFETY: the caller's contract.
                return unsafe { crate::fd::fstat_shim(&o, st) };
            }
        }
    }
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(p) => unsafe { stat_pool(&p, st, flags) },
        Route::Real => {
            let r = real!(fstatat(dirfd, path, st, flags)
                as fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int);
            if r == 0 && flags & libc::AT_EMPTY_PATH != 0 {
                // SAFETY: the kernel just filled it.
                unsafe { crate::fifo::fix_stat(st) };
            }
            r
        }
    }
}

/// stat or lstat (`AT_SYMLINK_NOFOLLOW` in `flags`) of a routed pool path: the path is copied
/// once per call (one `process_vm_readv`), never routed twice.
///
/// # Safety
/// `st` as fstatat(2)'s contract.
unsafe fn stat_pool(p: &[u8], st: *mut libc::stat, flags: c_int) -> c_int {
    enter(-1, |fs| {
        let a = attr_at(fs, p, flags)?;
        // SAFETY: the caller's contract.
        unsafe { fill_stat(&a, st) }
    })
}

/// # Safety
/// fstatat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { fstatat(dirfd, path, st, flags) }
}

/// # Safety
/// stat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn stat(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(p) => unsafe { stat_pool(&p, st, 0) },
        Route::Real => real!(stat(path, st) as fn(*const c_char, *mut libc::stat) -> c_int),
    }
}

/// # Safety
/// stat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn stat64(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { stat(path, st) }
}

/// # Safety
/// lstat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn lstat(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(p) => unsafe { stat_pool(&p, st, libc::AT_SYMLINK_NOFOLLOW) },
        Route::Real => real!(lstat(path, st) as fn(*const c_char, *mut libc::stat) -> c_int),
    }
}

/// # Safety
/// lstat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn lstat64(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { lstat(path, st) }
}

/// Pre-2.33 entry points older binaries call.
///
/// # Safety
/// stat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __xstat(
    ver: c_int,
    path: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(p) => unsafe { stat_pool(&p, st, 0) },
        Route::Real => {
            real!(__xstat(ver, path, st) as fn(c_int, *const c_char, *mut libc::stat) -> c_int)
        }
    }
}

/// # Safety
/// stat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __xstat64(
    ver: c_int,
    path: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { __xstat(ver, path, st) }
}

/// # Safety
/// lstat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __lxstat(
    ver: c_int,
    path: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(p) => unsafe { stat_pool(&p, st, libc::AT_SYMLINK_NOFOLLOW) },
        Route::Real => {
            real!(__lxstat(ver, path, st) as fn(c_int, *const c_char, *mut libc::stat) -> c_int)
        }
    }
}

/// # Safety
/// lstat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __lxstat64(
    ver: c_int,
    path: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { __lxstat(ver, path, st) }
}

/// # Safety
/// fstatat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __fxstatat(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(_) => unsafe { fstatat(dirfd, path, st, flags) },
        Route::Real => real!(__fxstatat(ver, dirfd, path, st, flags)
            as fn(c_int, c_int, *const c_char, *mut libc::stat, c_int) -> c_int),
    }
}

/// # Safety
/// fstatat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn __fxstatat64(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { __fxstatat(ver, dirfd, path, st, flags) }
}

/// statx(2) (ls uses it): the basic fields.
///
/// # Safety
/// statx(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    stx: *mut libc::statx,
) -> c_int {
    let shim_fd = if flags & libc::AT_EMPTY_PATH != 0 && !path.is_null() {
        // An unreadable pointer is not "": routed below, where it is EFAULT. (Not
        // `copy_c_string`: std's own `statx` with AT_EMPTY_PATH comes here from inside it.)
        // SAFETY: not NULL, and readable (checked where it can be; the caller's contract).
        if crate::guarded::accessible(path.cast(), 1, false) != Some(false) && unsafe { *path } == 0
        {
            state::lookup(dirfd)
        } else {
            None
        }
    } else {
        None
    };
    if let Some(o) = shim_fd {
        return enter(-1, |p| {
            let a = p.fstat(o.fd).map_err(en)?;
            // SAFETY: the caller's contract.
            unsafe { fill_statx(&a, stx) }
        });
    }
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        Route::Pool(p) => enter(-1, |fs| {
            let a = attr_at(fs, &p, flags)?;
            // SAFETY: the caller's contract.
            unsafe { fill_statx(&a, stx) }
        }),
        Route::Real => {
            let r = real!(statx(dirfd, path, flags, mask, stx)
                as fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int);
            if r == 0 && flags & libc::AT_EMPTY_PATH != 0 {
                // SAFETY: the kernel just filled it.
                unsafe { crate::fifo::fix_statx(stx) };
            }
            r
        }
    }
}

/// access: the pool's permission check for the process's effective ids (as `AT_EACCESS`; the
/// real ids are not kept apart).
///
/// # Safety
/// faccessat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        Route::Pool(p) => enter(-1, |fs| {
            if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
                return Err(libc::EINVAL);
            }
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            fs.access(&p, mode as u32, follow).map(|_| 0).map_err(en)
        }),
        Route::Real => {
            real!(faccessat(dirfd, path, mode, flags)
                as fn(c_int, *const c_char, c_int, c_int) -> c_int)
        }
    }
}

/// euidaccess(3) and eaccess(3): the effective ids, which the pool's checks use anyway (glibc
/// reaches the kernel with its internal faccessat, past this library: gnulib's
/// `find_in_given_path`, which make uses before it runs a program, asks this).
///
/// # Safety
/// euidaccess(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(_) => unsafe { faccessat(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) },
        Route::Real => real!(euidaccess(path, mode) as fn(*const c_char, c_int) -> c_int),
    }
}

/// # Safety
/// eaccess(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { euidaccess(path, mode) }
}

/// # Safety
/// access(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(_) => unsafe { faccessat(libc::AT_FDCWD, path, mode, 0) },
        Route::Real => real!(access(path, mode) as fn(*const c_char, c_int) -> c_int),
    }
}

/// One path, one call of the library.
fn on_pool(
    p: Vec<u8>,
    f: impl FnOnce(&dyn pmkit_fs_share::PoolApi, &[u8]) -> pmkit_fs::Result<()>,
) -> c_int {
    enter(-1, |fs| f(fs, &p).map(|_| 0).map_err(en))
}

/// # Safety
/// unlinkat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        Route::Pool(p) if flags & libc::AT_REMOVEDIR != 0 => remove_dir(path, p),
        Route::Pool(p) => on_pool(p, |fs, p| fs.unlink(p)),
        Route::Real => {
            real!(unlinkat(dirfd, path, flags) as fn(c_int, *const c_char, c_int) -> c_int)
        }
    }
}

/// # Safety
/// unlink(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(p) => on_pool(p, |fs, p| fs.unlink(p)),
        Route::Real => real!(unlink(path) as fn(*const c_char) -> c_int),
    }
}

/// # Safety
/// remove(3)'s contract. glibc's `remove` calls its own `unlink` and `rmdir` inside libc, past
/// this library, so it is caught here (postmark deletes with it).
#[no_mangle]
pub(crate) unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(p) => on_pool(p, |fs, p| match fs.unlink(p) {
            Err(e) if e.errno() == libc::EISDIR => fs.rmdir(p),
            r => r,
        }),
        Route::Real => real!(remove(path) as fn(*const c_char) -> c_int),
    }
}

/// # Safety
/// rmdir(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(p) => remove_dir(path, p),
        Route::Real => real!(rmdir(path) as fn(*const c_char) -> c_int),
    }
}

/// rmdir of pool path `p`, routed from `path`: a final ".." (which `route` resolves away) is
/// ENOTEMPTY, as Linux answers; a final "." reaches the pool, which refuses it (EINVAL).
fn remove_dir(path: *const c_char, p: Vec<u8>) -> c_int {
    let dotdot = state::copy_path(path).is_ok_and(|raw| state::last_component(&raw) == b"..");
    match dotdot {
        true => enter(-1, |_| Err(libc::ENOTEMPTY)),
        false => on_pool(p, |fs, p| fs.rmdir(p)),
    }
}

/// # Safety
/// mkdirat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        Route::Pool(p) => on_pool(p, |fs, p| fs.mkdir(p, state::umasked(mode)).map(drop)),
        Route::Real => {
            real!(mkdirat(dirfd, path, mode) as fn(c_int, *const c_char, c_uint) -> c_int)
        }
    }
}

/// # Safety
/// mkdir(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mkdir(path: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(p) => on_pool(p, |fs, p| fs.mkdir(p, state::umasked(mode)).map(drop)),
        Route::Real => real!(mkdir(path, mode) as fn(*const c_char, c_uint) -> c_int),
    }
}

/// # Safety
/// truncate(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn truncate(path: *const c_char, len: i64) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(_) if len < 0 => enter(-1, |_| Err(libc::EINVAL)),
        Route::Pool(p) => on_pool(p, |fs, p| fs.truncate(p, len as u64)),
        Route::Real => real!(truncate(path, len) as fn(*const c_char, i64) -> c_int),
    }
}

/// # Safety
/// truncate(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn truncate64(path: *const c_char, len: i64) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { truncate(path, len) }
}

/// # Safety
/// chmod(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn chmod(path: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(p) => on_pool(p, |fs, p| fs.chmod(p, mode)),
        Route::Real => real!(chmod(path, mode) as fn(*const c_char, c_uint) -> c_int),
    }
}

/// Two pool paths.
type PathPair = (Vec<u8>, Vec<u8>);

/// Two routes: both in the pool, both outside (None), or EXDEV.
///
/// # Safety
/// `a`, `b` NULL or NUL-terminated.
unsafe fn two(
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
) -> Option<Result<PathPair, c_int>> {
    // SAFETY: the caller's contract.
    match unsafe { (route(da, a), route(db, b)) } {
        (Route::Real, Route::Real) => None,
        (Route::Pool(x), Route::Pool(y)) => Some(Ok((x, y))),
        // One in the pool: the other is a bad path (as the kernel checks names before mounts)
        // or on another file system.
        (Route::Pool(_), Route::Real) => {
            Some(Err(state::copy_path(b).err().unwrap_or(libc::EXDEV)))
        }
        (Route::Real, Route::Pool(_)) => {
            Some(Err(state::copy_path(a).err().unwrap_or(libc::EXDEV)))
        }
    }
}

/// # Safety
/// renameat2(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn renameat2(
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { two(da, a, db, b) } {
        None => real!(renameat2(da, a, db, b, flags)
            as fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int),
        Some(r) => enter(-1, |fs| {
            let (x, y) = r?;
            let f = RenameFlags::from_linux(flags).map_err(en)?;
            fs.rename(&x, &y, f).map(|_| 0).map_err(en)
        }),
    }
}

/// # Safety
/// renameat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn renameat(
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { renameat2(da, a, db, b, 0) }
}

/// # Safety
/// rename(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn rename(a: *const c_char, b: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { renameat2(libc::AT_FDCWD, a, libc::AT_FDCWD, b, 0) }
}

/// # Safety
/// linkat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn linkat(
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
    flags: c_int,
) -> c_int {
    // The descriptor itself names the file (how an O_TMPFILE file gets its name).
    if let Some(o) = linked_descriptor(da, a, flags) {
        // SAFETY: the caller's contract.
        return match unsafe { route(db, b) } {
            Route::Pool(y) => enter(-1, |fs| fs.link_fd(o.fd, &y).map(|_| 0).map_err(en)),
            Route::Real => enter(-1, |_| {
                Err(state::copy_path(b).err().unwrap_or(libc::EXDEV))
            }),
        };
    }
    // SAFETY: the caller's contract.
    match unsafe { two(da, a, db, b) } {
        None => real!(linkat(da, a, db, b, flags)
            as fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int),
        Some(r) => enter(-1, |fs| {
            let (x, y) = r?;
            fs.link(&x, &y).map(|_| 0).map_err(en)
        }),
    }
}

/// The shim descriptor a linkat(2) source names by itself: `da` with an empty path and
/// `AT_EMPTY_PATH`, or `/proc/self/fd/N` (or this process's pid) with `AT_SYMLINK_FOLLOW`.
fn linked_descriptor(
    da: c_int,
    a: *const c_char,
    flags: c_int,
) -> Option<std::sync::Arc<state::Open>> {
    let p = state::copy_c_string(a)?;
    if p.is_empty() {
        return (flags & libc::AT_EMPTY_PATH != 0)
            .then(|| state::lookup(da))
            .flatten();
    }
    if flags & libc::AT_SYMLINK_FOLLOW == 0 {
        return None;
    }
    let pid = std::process::id().to_string();
    let rest = p
        .strip_prefix(b"/proc/self/fd/")
        .or_else(|| p.strip_prefix(format!("/proc/{pid}/fd/").as_bytes()))?;
    let n: c_int = std::str::from_utf8(rest).ok()?.parse().ok()?;
    state::lookup(n)
}

/// # Safety
/// link(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn link(a: *const c_char, b: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { linkat(libc::AT_FDCWD, a, libc::AT_FDCWD, b, 0) }
}

/// symlinkat: the link is made in the pool; an absolute target under the prefix is stored
/// from the pool's root (links resolve inside the pool); other targets are stored as given.
///
/// # Safety
/// symlinkat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    path: *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        Route::Real => {
            real!(symlinkat(target, dirfd, path) as fn(*const c_char, c_int, *const c_char) -> c_int)
        }
        Route::Pool(p) => {
            let t = match state::copy_path(target) {
                Ok(t) => t,
                Err(e) => {
                    state::set_errno(e);
                    return -1;
                }
            };
            // SAFETY: as above.
            let t = match unsafe { route(libc::AT_FDCWD, target) } {
                Route::Pool(inner) if t.first() == Some(&b'/') => inner,
                _ => t,
            };
            on_pool(p, |fs, p| fs.symlink(&t, p).map(drop))
        }
    }
}

/// # Safety
/// symlink(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { symlinkat(target, libc::AT_FDCWD, path) }
}

/// # Safety
/// readlinkat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: usize,
) -> isize {
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        Route::Real => real!(readlinkat(dirfd, path, buf, n)
            as fn(c_int, *const c_char, *mut c_char, usize) -> isize),
        Route::Pool(p) => enter(-1, |fs| {
            let mut t = fs.readlink(&p).map_err(en)?;
            // symlinkat stored a target under the prefix as a pool path: the program gets back
            // the string it gave.
            if t.first() == Some(&b'/') {
                let prefix = &state::config().ok_or(libc::EIO)?.prefix;
                t = if t == b"/" {
                    prefix.clone()
                } else {
                    [&prefix[..], &t[..]].concat()
                };
            }
            if n == 0 || buf.is_null() {
                return Err(if n == 0 { libc::EINVAL } else { libc::EFAULT });
            }
            let k = t.len().min(n);
            crate::guarded::check(buf.cast(), k, true)?;
            // SAFETY: `buf` valid for `n` bytes (the caller's contract, and writable now:
            // checked); `k <= n`.
            unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), buf.cast::<u8>(), k) };
            Ok(k as isize)
        }),
    }
}

/// # Safety
/// readlink(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, n: usize) -> isize {
    // SAFETY: the caller's contract.
    unsafe { readlinkat(libc::AT_FDCWD, path, buf, n) }
}

/// # Safety
/// readlink(2)'s contract (fortified).
#[no_mangle]
pub(crate) unsafe extern "C" fn __readlink_chk(
    path: *const c_char,
    buf: *mut c_char,
    n: usize,
    buflen: usize,
) -> isize {
    // SAFETY: the caller's contract, at most `buflen` bytes.
    unsafe { readlinkat(libc::AT_FDCWD, path, buf, n.min(buflen)) }
}
