//! Extended attributes: only the library's virtual ones, `user.pmkit.atomic` and
//! `user.pmkit.huge` (the per-file flags, as through the FUSE mount: `"1"`/`"0"` on regular
//! files, read and set by name but not listed, not removable); every other name is ENOTSUP for pool paths and shim
//! descriptors, which ls and cp -a take as "no xattrs".

use crate::state::{copy_c_string, en, enter, lookup, route, Route};
use pmkit_fs::posix::FileFlag;
use std::ffi::{c_char, c_int, c_void};

/// Which file a call is about.
enum Target {
    Path(Vec<u8>, bool),
    Fd(pmkit_fs::posix::Fd),
}

fn flag(p: &dyn pmkit_fs_share::PoolApi, t: &Target, f: FileFlag) -> Result<Option<bool>, c_int> {
    match t {
        Target::Path(path, follow) => p.flag(path, *follow, f),
        Target::Fd(fd) => p.fflag(*fd, f),
    }
    .map_err(en)
}

/// The flag a name stands for; ENOTSUP for any other name, EFAULT for an unreadable one.
fn name_flag(name: *const c_char) -> Result<FileFlag, c_int> {
    let n = copy_c_string(name).ok_or(libc::EFAULT)?;
    FileFlag::from_xattr(&n).ok_or(libc::ENOTSUP)
}

/// Copy `v` out as getxattr(2) does: its length for a size of 0, ERANGE when it does not fit.
fn answer(v: &[u8], out: *mut c_void, size: usize) -> Result<isize, c_int> {
    if size == 0 {
        return Ok(v.len() as isize);
    }
    if size < v.len() {
        return Err(libc::ERANGE);
    }
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    crate::guarded::check(out.cast(), v.len(), true)?;
    // SAFETY: the caller's buffer holds `size` >= `v.len()` bytes (getxattr(2)'s contract),
    // writable now (checked).
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out.cast::<u8>(), v.len()) };
    Ok(v.len() as isize)
}

fn get(t: Target, name: *const c_char, out: *mut c_void, size: usize) -> isize {
    enter(-1, |p| {
        let f = name_flag(name)?;
        match flag(p, &t, f)? {
            Some(on) => answer(if on { b"1" } else { b"0" }, out, size),
            None => Err(libc::ENODATA),
        }
    })
}

fn set(t: Target, name: *const c_char, v: *const c_void, n: usize, flags: c_int) -> c_int {
    enter(-1, |p| {
        let f = name_flag(name)?;
        if n != 1 || v.is_null() {
            return Err(libc::EINVAL);
        }
        crate::guarded::check(v.cast(), 1, false)?;
        // SAFETY: the caller's buffer holds `n` = 1 byte (setxattr(2)'s contract).
        let on = match unsafe { *v.cast::<u8>() } {
            b'1' => true,
            b'0' => false,
            _ => return Err(libc::EINVAL),
        };
        if flags & libc::XATTR_CREATE != 0 {
            return Err(libc::EEXIST); // every regular file has it
        }
        match t {
            Target::Path(path, follow) => p.set_flag(&path, follow, f, on),
            Target::Fd(fd) => p.set_fflag(fd, f, on),
        }
        .map_err(en)?;
        Ok(0)
    })
}

fn list(t: Target, out: *mut c_char, size: usize) -> isize {
    enter(-1, |p| {
        // The node must exist; the flags are read and set by name, never listed (copy tools
        // would carry every listed name to other file systems, as the mount answers too).
        flag(p, &t, FileFlag::Atomic)?;
        answer(&[], out.cast(), size)
    })
}

fn remove(name: *const c_char) -> c_int {
    enter(-1, |_| {
        name_flag(name)?;
        Err(libc::EPERM) // set "0" instead
    })
}

/// The path forms: `$follow` false for the `l` ones.
macro_rules! path_forms {
    ($get:ident, $set:ident, $list:ident, $remove:ident, $follow:expr) => {
        /// # Safety
        /// getxattr(2)'s contract.
        #[no_mangle]
        pub(crate) unsafe extern "C" fn $get(
            path: *const c_char,
            name: *const c_char,
            v: *mut c_void,
            n: usize,
        ) -> isize {
            // SAFETY: the caller's contract.
            match unsafe { route(libc::AT_FDCWD, path) } {
                Route::Pool(p) => get(Target::Path(p, $follow), name, v, n),
                Route::Real => real!($get(path, name, v, n)
                    as fn(*const c_char, *const c_char, *mut c_void, usize) -> isize),
            }
        }

        /// # Safety
        /// setxattr(2)'s contract.
        #[no_mangle]
        pub(crate) unsafe extern "C" fn $set(
            path: *const c_char,
            name: *const c_char,
            v: *const c_void,
            n: usize,
            flags: c_int,
        ) -> c_int {
            // SAFETY: the caller's contract.
            match unsafe { route(libc::AT_FDCWD, path) } {
                Route::Pool(p) => set(Target::Path(p, $follow), name, v, n, flags),
                Route::Real => real!($set(path, name, v, n, flags)
                    as fn(*const c_char, *const c_char, *const c_void, usize, c_int) -> c_int),
            }
        }

        /// # Safety
        /// listxattr(2)'s contract.
        #[no_mangle]
        pub(crate) unsafe extern "C" fn $list(
            path: *const c_char,
            out: *mut c_char,
            n: usize,
        ) -> isize {
            // SAFETY: the caller's contract.
            match unsafe { route(libc::AT_FDCWD, path) } {
                Route::Pool(p) => list(Target::Path(p, $follow), out, n),
                Route::Real => {
                    real!($list(path, out, n) as fn(*const c_char, *mut c_char, usize) -> isize)
                }
            }
        }

        /// # Safety
        /// removexattr(2)'s contract.
        #[no_mangle]
        pub(crate) unsafe extern "C" fn $remove(path: *const c_char, name: *const c_char) -> c_int {
            // SAFETY: the caller's contract.
            match unsafe { route(libc::AT_FDCWD, path) } {
                Route::Pool(_) => remove(name),
                Route::Real => {
                    real!($remove(path, name) as fn(*const c_char, *const c_char) -> c_int)
                }
            }
        }
    };
}

path_forms!(getxattr, setxattr, listxattr, removexattr, true);
path_forms!(lgetxattr, lsetxattr, llistxattr, lremovexattr, false);

/// # Safety
/// fgetxattr(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fgetxattr(
    fd: c_int,
    name: *const c_char,
    v: *mut c_void,
    n: usize,
) -> isize {
    match lookup(fd) {
        Some(o) => get(Target::Fd(o.fd), name, v, n),
        None => {
            real!(fgetxattr(fd, name, v, n) as fn(c_int, *const c_char, *mut c_void, usize) -> isize)
        }
    }
}

/// # Safety
/// fsetxattr(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fsetxattr(
    fd: c_int,
    name: *const c_char,
    v: *const c_void,
    n: usize,
    flags: c_int,
) -> c_int {
    match lookup(fd) {
        Some(o) => set(Target::Fd(o.fd), name, v, n, flags),
        None => real!(fsetxattr(fd, name, v, n, flags)
            as fn(c_int, *const c_char, *const c_void, usize, c_int) -> c_int),
    }
}

/// # Safety
/// flistxattr(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn flistxattr(fd: c_int, out: *mut c_char, n: usize) -> isize {
    match lookup(fd) {
        Some(o) => list(Target::Fd(o.fd), out, n),
        None => real!(flistxattr(fd, out, n) as fn(c_int, *mut c_char, usize) -> isize),
    }
}

/// # Safety
/// fremovexattr(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fremovexattr(fd: c_int, name: *const c_char) -> c_int {
    match lookup(fd) {
        Some(_) => remove(name),
        None => real!(fremovexattr(fd, name) as fn(c_int, *const c_char) -> c_int),
    }
}
