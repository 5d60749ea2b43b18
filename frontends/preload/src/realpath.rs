//! `realpath` (and `canonicalize_file_name`) of pool paths: glibc resolves with its own
//! internal `readlink` and `getcwd`, past this library, so pool paths are resolved here: every
//! component must exist, symbolic links are followed (at most 40, then ELOOP), and the answer is
//! the full path (the prefix and the pool path). Absolute link targets are the pool's, as the
//! library resolves them.

use crate::state::{config, en, enter, route, Route};
use std::ffi::c_char;

/// Most links one resolution follows (Linux's value).
const SYMLOOP_MAX: u32 = 40;

/// Resolve pool path `p` (normalized, from the pool's root); `Err`: errno is set.
fn resolve(p: Vec<u8>) -> Result<Vec<u8>, ()> {
    enter(Err(()), |fs| {
        let mut todo: Vec<Vec<u8>> = p
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .rev()
            .map(<[u8]>::to_vec)
            .collect();
        let mut done: Vec<Vec<u8>> = Vec::new();
        let mut links = 0;
        while let Some(c) = todo.pop() {
            if c == b"." {
                continue;
            }
            if c == b".." {
                done.pop();
                continue;
            }
            let mut here = Vec::new();
            for d in done.iter().chain(std::iter::once(&c)) {
                here.push(b'/');
                here.extend_from_slice(d);
            }
            let a = fs.lstat(&here).map_err(en)?;
            if a.kind != pmkit_fs::Kind::Symlink {
                if !todo.is_empty() && a.kind != pmkit_fs::Kind::Dir {
                    return Err(libc::ENOTDIR);
                }
                done.push(c);
                continue;
            }
            links += 1;
            if links > SYMLOOP_MAX {
                return Err(libc::ELOOP);
            }
            let target = fs.readlink(&here).map_err(en)?;
            follow(&target, &mut todo, &mut done);
        }
        let mut out = Vec::new();
        for d in &done {
            out.push(b'/');
            out.extend_from_slice(d);
        }
        if out.is_empty() {
            out.push(b'/');
        }
        Ok(Ok(out))
    })
}

/// Take link target `target` in place of the link: its components go first in `todo`; an
/// absolute target starts again from the pool's root (the shim stores a target under the prefix
/// as a pool path, and the library resolves absolute targets from the root).
fn follow(target: &[u8], todo: &mut Vec<Vec<u8>>, done: &mut Vec<Vec<u8>>) {
    if target.first() == Some(&b'/') {
        done.clear();
    }
    todo.extend(
        target
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .rev()
            .map(<[u8]>::to_vec),
    );
}

/// # Safety
/// realpath(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn realpath(path: *const c_char, out: *mut c_char) -> *mut c_char {
    // SAFETY: the caller's contract.
    let Route::Pool(p) = (unsafe { route(libc::AT_FDCWD, path) }) else {
        return real!(realpath(path, out) as fn(*const c_char, *mut c_char) -> *mut c_char);
    };
    let full = match resolve(p) {
        Err(()) => return std::ptr::null_mut(),
        Ok(p) => {
            let prefix = &config().expect("a pool path has a configuration").prefix;
            let mut f = prefix.clone();
            if p != b"/" {
                f.extend_from_slice(&p);
            }
            f
        }
    };
    if full.len() >= libc::PATH_MAX as usize {
        crate::state::set_errno(libc::ENAMETOOLONG);
        return std::ptr::null_mut();
    }
    let dst = if out.is_null() {
        // SAFETY: plain allocation; the caller frees it (realpath's contract for NULL).
        let m = unsafe { libc::malloc(full.len() + 1) }.cast::<c_char>();
        if m.is_null() {
            crate::state::set_errno(libc::ENOMEM);
            return m;
        }
        m
    } else {
        out
    };
    // SAFETY: `dst` holds PATH_MAX bytes (the caller's buffer, per the contract) or the
    // allocation above; `full` is shorter.
    unsafe {
        std::ptr::copy_nonoverlapping(full.as_ptr(), dst.cast::<u8>(), full.len());
        *dst.add(full.len()) = 0;
    }
    dst
}

/// # Safety
/// canonicalize_file_name(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: the caller's contract; NULL: allocated.
    unsafe { realpath(path, std::ptr::null_mut()) }
}

/// # Safety
/// realpath(3)'s contract (fortified: `out` holds `len` bytes).
#[no_mangle]
pub(crate) unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    out: *mut c_char,
    len: usize,
) -> *mut c_char {
    if len < libc::PATH_MAX as usize {
        // As glibc's fortified check: the buffer must hold PATH_MAX bytes.
        // SAFETY: abort is always safe.
        unsafe { libc::abort() };
    }
    // SAFETY: the caller's contract.
    unsafe { realpath(path, out) }
}
