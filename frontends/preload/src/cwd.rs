//! A current directory inside the pool: the kernel cannot change into a pool directory, so
//! `chdir`/`fchdir` there keep it here (the kernel's stays at the prefix directory when that
//! exists) and `getcwd` answers it; relative paths are resolved against it (see
//! [`crate::state::route`]).

use crate::state::{self, config, en, enter, lookup, route, Route};
use crate::vcwd::{get, set};
use std::ffi::{c_char, c_int};

/// Enter pool directory `p` (a path from the pool's root).
fn enter_pool(p: Vec<u8>) -> c_int {
    let p = state::kept_path(p);
    enter(-1, |fs| {
        let a = fs.stat(&p).map_err(en)?;
        if a.kind != pmkit_fs::Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        // As the kernel's chdir: search permission on the directory itself.
        fs.access(&p, libc::X_OK as u32, true).map_err(en)?;
        let prefix = &config().ok_or(libc::EIO)?.prefix;
        let mut full = prefix.clone();
        if p != b"/" {
            full.extend_from_slice(&p);
        }
        // The kernel's current directory: the prefix directory, if it exists (so that paths
        // leaving the pool by `..` start near where they should; see docs/fs.md).
        if let Ok(c) = std::ffi::CString::new(prefix.clone()) {
            real!(chdir(c.as_ptr()) as fn(*const c_char) -> c_int);
        }
        set(Some(full));
        Ok(0)
    })
}

/// # Safety
/// chdir(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(p) => enter_pool(p),
        Route::Real => {
            let r = real!(chdir(path) as fn(*const c_char) -> c_int);
            if r == 0 && !state::busy() {
                set(None);
            }
            r
        }
    }
}

#[no_mangle]
pub(crate) extern "C" fn fchdir(fd: c_int) -> c_int {
    if let Some(o) = lookup(fd) {
        return enter_pool(o.path.clone());
    }
    let r = real!(fchdir(fd) as fn(c_int) -> c_int);
    if r == 0 && !state::busy() {
        set(None);
    }
    r
}

/// # Safety
/// getcwd(3)'s contract (a NULL `buf` is allocated with malloc, as glibc does).
#[no_mangle]
pub(crate) unsafe extern "C" fn getcwd(buf: *mut c_char, size: usize) -> *mut c_char {
    let v = if state::busy() { None } else { get() };
    let Some(v) = v else {
        return real!(getcwd(buf, size) as fn(*mut c_char, usize) -> *mut c_char);
    };
    let need = v.len() + 1;
    let out = if buf.is_null() {
        let n = if size == 0 { need } else { size };
        if n < need {
            state::set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        // SAFETY: plain allocation; the caller frees it (glibc's contract for NULL).
        let p = unsafe { libc::malloc(n) }.cast::<c_char>();
        if p.is_null() {
            state::set_errno(libc::ENOMEM);
            return p;
        }
        p
    } else if size < need {
        state::set_errno(libc::ERANGE);
        return std::ptr::null_mut();
    } else if crate::guarded::check(buf.cast(), need, true).is_err() {
        state::set_errno(libc::EFAULT);
        return std::ptr::null_mut();
    } else {
        buf
    };
    // SAFETY: `out` holds at least `need` bytes (checked or allocated).
    unsafe {
        std::ptr::copy_nonoverlapping(v.as_ptr(), out.cast::<u8>(), v.len());
        *out.add(v.len()) = 0;
    }
    out
}
