//! Attribute changes and file system figures: `chmod`'s descriptor and *at forms, `utimensat`,
//! `futimens`, `statfs`, `fstatfs` for pool files and shim descriptors.

use crate::state::{en, enter, lookup, route, umasked, Route};
use std::ffi::{c_char, c_int, c_uint};

/// `f_type` of pool files in `statfs` ("PMFS").
pub(crate) const PMFS_MAGIC: i64 = 0x504d_4653;

#[no_mangle]
pub(crate) extern "C" fn fchmod(fd: c_int, mode: c_uint) -> c_int {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| p.fchmod(o.fd, mode).map(|_| 0).map_err(en));
    }
    real!(fchmod(fd, mode) as fn(c_int, c_uint) -> c_int)
}

/// # Safety
/// fchmodat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_uint,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        Route::Pool(p) => enter(-1, |fs| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            fs.chmod_at(&p, mode, follow).map(|_| 0).map_err(en)
        }),
        Route::Real => {
            real!(fchmodat(dirfd, path, mode, flags)
                as fn(c_int, *const c_char, c_uint, c_int) -> c_int)
        }
    }
}

/// utimensat's array, read (NULL: none).
///
/// # Safety
/// `t` NULL or valid for two `struct timespec`.
unsafe fn times(t: *const libc::timespec) -> Option<[libc::timespec; 2]> {
    // SAFETY: valid for two entries when not NULL (the caller's contract).
    (!t.is_null()).then(|| unsafe { [*t, *t.add(1)] })
}

/// # Safety
/// futimens(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn futimens(fd: c_int, t: *const libc::timespec) -> c_int {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| {
            // SAFETY: the caller's contract.
            p.futimens(o.fd, unsafe { times(t) }).map(|_| 0).map_err(en)
        });
    }
    real!(futimens(fd, t) as fn(c_int, *const libc::timespec) -> c_int)
}

/// # Safety
/// utimensat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    t: *const libc::timespec,
    flags: c_int,
) -> c_int {
    if path.is_null() && lookup(dirfd).is_some() {
        // SAFETY: the caller's contract (Linux's utimensat with a NULL path is futimens).
        return unsafe { futimens(dirfd, t) };
    }
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        Route::Pool(p) => enter(-1, |fs| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            // SAFETY: the caller's contract.
            fs.utimensat(&p, unsafe { times(t) }, follow)
                .map(|_| 0)
                .map_err(en)
        }),
        Route::Real => real!(utimensat(dirfd, path, t, flags)
            as fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int),
    }
}

/// # Safety
/// `out` NULL or valid for one `struct statfs`.
unsafe fn fill_statfs(
    p: &dyn pmkit_fs_share::PoolApi,
    out: *mut libc::statfs,
) -> Result<c_int, c_int> {
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    crate::guarded::check(out.cast(), std::mem::size_of::<libc::statfs>(), true)?;
    let s = p.statfs().map_err(en)?;
    // SAFETY: all-zero is a valid `struct statfs`.
    let mut f: libc::statfs = unsafe { std::mem::zeroed() };
    f.f_type = PMFS_MAGIC as _;
    f.f_bsize = s.block_size as _;
    f.f_frsize = s.block_size as _;
    f.f_blocks = s.blocks;
    f.f_bfree = s.free_blocks;
    f.f_bavail = s.free_blocks;
    f.f_files = s.inodes;
    f.f_ffree = s.free_inodes;
    f.f_namelen = s.name_max as _;
    // SAFETY: not NULL (checked), valid for one write (the caller's contract).
    unsafe { out.write(f) };
    Ok(0)
}

/// The pool's answer to pathconf(3) (glibc computes several from an internal statfs this
/// library does not see, and would ask the kernel about a path only the pool has).
fn pool_pathconf(name: c_int) -> Result<libc::c_long, c_int> {
    Ok(match name {
        libc::_PC_NAME_MAX => pmkit_fs::NAME_MAX as libc::c_long,
        libc::_PC_PATH_MAX => libc::PATH_MAX as libc::c_long,
        libc::_PC_LINK_MAX => 65_000,
        libc::_PC_SYMLINK_MAX => pmkit_fs::SYMLINK_MAX as libc::c_long,
        libc::_PC_NO_TRUNC | libc::_PC_CHOWN_RESTRICTED => 1,
        libc::_PC_PIPE_BUF => libc::PIPE_BUF as libc::c_long,
        libc::_PC_FILESIZEBITS => 64,
        libc::_PC_REC_XFER_ALIGN | libc::_PC_ALLOC_SIZE_MIN | libc::_PC_REC_MIN_XFER_SIZE => 4096,
        _ => return Err(libc::EINVAL),
    })
}

/// # Safety
/// pathconf(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn pathconf(path: *const c_char, name: c_int) -> libc::c_long {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(p) => enter(-1, |fs| {
            fs.stat(&p).map_err(en)?;
            pool_pathconf(name)
        }),
        Route::Real => {
            real!(pathconf(path, name) as fn(*const c_char, c_int) -> libc::c_long)
        }
    }
}

/// # Safety
/// fpathconf(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fpathconf(fd: c_int, name: c_int) -> libc::c_long {
    match lookup(fd) {
        Some(_) => enter(-1, |_| pool_pathconf(name)),
        None => real!(fpathconf(fd, name) as fn(c_int, c_int) -> libc::c_long),
    }
}

/// # Safety
/// statfs(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn statfs(path: *const c_char, out: *mut libc::statfs) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(p) => enter(-1, |fs| {
            fs.stat(&p).map_err(en)?;
            // SAFETY: the caller's contract.
            unsafe { fill_statfs(fs, out) }
        }),
        Route::Real => real!(statfs(path, out) as fn(*const c_char, *mut libc::statfs) -> c_int),
    }
}

/// # Safety
/// statfs(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn statfs64(path: *const c_char, out: *mut libc::statfs) -> c_int {
    // SAFETY: the caller's contract (statfs64 is statfs here).
    unsafe { statfs(path, out) }
}

/// # Safety
/// fstatfs(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fstatfs(fd: c_int, out: *mut libc::statfs) -> c_int {
    if lookup(fd).is_some() {
        // SAFETY: the caller's contract.
        return enter(-1, |fs| unsafe { fill_statfs(fs, out) });
    }
    real!(fstatfs(fd, out) as fn(c_int, *mut libc::statfs) -> c_int)
}

/// # Safety
/// fstatfs(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fstatfs64(fd: c_int, out: *mut libc::statfs) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { fstatfs(fd, out) }
}

/// A `struct statvfs` from the `struct statfs` of the same file system (glibc's statvfs calls
/// the kernel past this library, so df and Python's os.statvfs would see the file system below
/// the prefix).
fn statvfs_of(f: &libc::statfs) -> libc::statvfs {
    // SAFETY: an all-zero statvfs is a valid value (integers and padding).
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    v.f_bsize = f.f_bsize as _;
    v.f_frsize = if f.f_frsize != 0 {
        f.f_frsize
    } else {
        f.f_bsize
    } as _;
    v.f_blocks = f.f_blocks;
    v.f_bfree = f.f_bfree;
    v.f_bavail = f.f_bavail;
    v.f_files = f.f_files;
    v.f_ffree = f.f_ffree;
    v.f_favail = f.f_ffree;
    v.f_namemax = f.f_namelen as _;
    v
}

/// Write the pool's `struct statvfs` to `out`.
///
/// # Safety
/// `out` is NULL or the caller's pointer to a `struct statvfs`.
unsafe fn fill_statvfs(
    p: &dyn pmkit_fs_share::PoolApi,
    out: *mut libc::statvfs,
) -> Result<c_int, c_int> {
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    crate::guarded::check(out.cast(), std::mem::size_of::<libc::statvfs>(), true)?;
    // SAFETY: all-zero is a valid `struct statfs`; `fill_statfs` writes our local.
    let mut f: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `f` is ours and valid; `out` checked writable above.
    unsafe {
        fill_statfs(p, &mut f)?;
        out.write(statvfs_of(&f));
    }
    Ok(0)
}

/// statvfs of pool paths: the pool's numbers, as [`statfs`] gives.
///
/// # Safety
/// statvfs(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn statvfs(path: *const c_char, out: *mut libc::statvfs) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(p) => enter(-1, |fs| {
            fs.stat(&p).map_err(en)?;
            // SAFETY: the caller's contract.
            unsafe { fill_statvfs(fs, out) }
        }),
        Route::Real => real!(statvfs(path, out) as fn(*const c_char, *mut libc::statvfs) -> c_int),
    }
}

/// # Safety
/// statvfs(3)'s contract (statvfs64 is statvfs here).
#[no_mangle]
pub(crate) unsafe extern "C" fn statvfs64(path: *const c_char, out: *mut libc::statvfs) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { statvfs(path, out) }
}

/// # Safety
/// fstatvfs(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fstatvfs(fd: c_int, out: *mut libc::statvfs) -> c_int {
    if lookup(fd).is_some() {
        // SAFETY: the caller's contract.
        return enter(-1, |fs| unsafe { fill_statvfs(fs, out) });
    }
    real!(fstatvfs(fd, out) as fn(c_int, *mut libc::statvfs) -> c_int)
}

/// # Safety
/// fstatvfs(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fstatvfs64(fd: c_int, out: *mut libc::statvfs) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { fstatvfs(fd, out) }
}

/// chown's ids: `u32::MAX` (-1) leaves one unchanged.
fn ids(uid: c_uint, gid: c_uint) -> (Option<u32>, Option<u32>) {
    (
        (uid != u32::MAX).then_some(uid),
        (gid != u32::MAX).then_some(gid),
    )
}

#[no_mangle]
pub(crate) extern "C" fn fchown(fd: c_int, uid: c_uint, gid: c_uint) -> c_int {
    if let Some(o) = lookup(fd) {
        return enter(-1, |p| {
            let (u, g) = ids(uid, gid);
            p.fchown(o.fd, u, g).map(|_| 0).map_err(en)
        });
    }
    real!(fchown(fd, uid, gid) as fn(c_int, c_uint, c_uint) -> c_int)
}

/// # Safety
/// fchownat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: c_uint,
    gid: c_uint,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        Route::Pool(p) => enter(-1, |fs| {
            let (u, g) = ids(uid, gid);
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            fs.chown(&p, u, g, follow).map(|_| 0).map_err(en)
        }),
        Route::Real => real!(fchownat(dirfd, path, uid, gid, flags)
            as fn(c_int, *const c_char, c_uint, c_uint, c_int) -> c_int),
    }
}

/// # Safety
/// chown(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn chown(path: *const c_char, uid: c_uint, gid: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(_) => unsafe { fchownat(libc::AT_FDCWD, path, uid, gid, 0) },
        Route::Real => real!(chown(path, uid, gid) as fn(*const c_char, c_uint, c_uint) -> c_int),
    }
}

/// # Safety
/// lchown(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn lchown(path: *const c_char, uid: c_uint, gid: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(_) => unsafe {
            fchownat(libc::AT_FDCWD, path, uid, gid, libc::AT_SYMLINK_NOFOLLOW)
        },
        Route::Real => real!(lchown(path, uid, gid) as fn(*const c_char, c_uint, c_uint) -> c_int),
    }
}

/// Special files (FIFOs, sockets, device nodes) are made in the pool as nodes with no data: a
/// program can list, stat, rename and remove them; opening one is EOPNOTSUPP (nothing in the
/// process serves a FIFO or a device). The device number is kept in the kernel's 32-bit
/// encoding (the same as for majors under 4096). glibc's mkfifo calls mknodat past this
/// library, so both are caught here.
///
/// # Safety
/// mknodat(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_uint,
    dev: u64,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        Route::Pool(p) => enter(-1, |fs| {
            let mode = (mode & libc::S_IFMT) | umasked(mode & 0o7777);
            fs.mknod(&p, mode, dev as u32).map(|_| 0).map_err(en)
        }),
        Route::Real => {
            real!(mknodat(dirfd, path, mode, dev) as fn(c_int, *const c_char, c_uint, u64) -> c_int)
        }
    }
}

/// # Safety
/// mknod(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mknod(path: *const c_char, mode: c_uint, dev: u64) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(_) => unsafe { mknodat(libc::AT_FDCWD, path, mode, dev) },
        Route::Real => real!(mknod(path, mode, dev) as fn(*const c_char, c_uint, u64) -> c_int),
    }
}

/// # Safety
/// mkfifo(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(dirfd, path) } {
        // SAFETY: the caller's contract.
        Route::Pool(_) => unsafe { mknodat(dirfd, path, libc::S_IFIFO | (mode & 0o7777), 0) },
        Route::Real => {
            real!(mkfifoat(dirfd, path, mode) as fn(c_int, *const c_char, c_uint) -> c_int)
        }
    }
}

/// # Safety
/// mkfifo(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mkfifo(path: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { mkfifoat(libc::AT_FDCWD, path, mode) }
}

/// # Safety
/// utimes(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn utimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(_) => {
            let ts = (!tv.is_null()).then(|| {
                // SAFETY: valid for two entries (the caller's contract).
                let (a, m) = unsafe { (*tv, *tv.add(1)) };
                [a, m].map(|t| libc::timespec {
                    tv_sec: t.tv_sec,
                    tv_nsec: t.tv_usec * 1000,
                })
            });
            let p = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
            // SAFETY: the caller's contract; `p` NULL or two entries.
            unsafe { utimensat(libc::AT_FDCWD, path, p, 0) }
        }
        Route::Real => real!(utimes(path, tv) as fn(*const c_char, *const libc::timeval) -> c_int),
    }
}

/// # Safety
/// utime(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn utime(path: *const c_char, t: *const libc::utimbuf) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(_) => {
            let ts = (!t.is_null()).then(|| {
                // SAFETY: valid for one entry (the caller's contract).
                let u = unsafe { *t };
                [u.actime, u.modtime].map(|s| libc::timespec {
                    tv_sec: s,
                    tv_nsec: 0,
                })
            });
            let p = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
            // SAFETY: the caller's contract; `p` NULL or two entries.
            unsafe { utimensat(libc::AT_FDCWD, path, p, 0) }
        }
        Route::Real => real!(utime(path, t) as fn(*const c_char, *const libc::utimbuf) -> c_int),
    }
}
