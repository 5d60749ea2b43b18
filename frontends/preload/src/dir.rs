//! Directory streams of pool directories: `opendir`/`fdopendir` give a stream of the shim's
//! own (not glibc's `DIR`), which `readdir`, `readdir_r`, `rewinddir`, `telldir`, `seekdir`,
//! `dirfd` and `closedir` recognize by address. The entries are read at open (a snapshot, as
//! a stream whose buffer holds the whole directory); `scandir` under the prefix is ENOTSUP.

use crate::state::{self, en, enter, lookup, route, Route};
use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_long, c_void};
use std::sync::Mutex;

struct Stream {
    /// The shim descriptor it reads (closed with the stream).
    fd: c_int,
    entries: Vec<pmkit_fs::DirEntry>,
    pos: usize,
    ent: libc::dirent64,
}

/// Addresses of live streams.
static STREAMS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn ours(d: *mut c_void) -> bool {
    if d.is_null() || state::busy() {
        return false;
    }
    let g = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref().is_some_and(|s| s.contains(&(d as usize)))
}

/// A stream over shim descriptor `fd` (owned by the stream from now on).
fn open_stream(fd: c_int) -> *mut c_void {
    let Some(o) = lookup(fd) else {
        state::set_errno(libc::EBADF);
        return std::ptr::null_mut();
    };
    let entries = enter(None, |p| {
        let a = p.fstat(o.fd).map_err(en)?;
        if a.kind != pmkit_fs::Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        Ok(Some(p.readdir_ino(a.ino).map_err(en)?))
    });
    let Some(entries) = entries else {
        return std::ptr::null_mut();
    };
    let s = Box::new(Stream {
        fd,
        entries,
        pos: 0,
        // SAFETY: all-zero is a valid `struct dirent64`.
        ent: unsafe { std::mem::zeroed() },
    });
    let p = Box::into_raw(s).cast::<c_void>();
    let mut g = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashSet::new).insert(p as usize);
    p
}

/// # Safety
/// opendir(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn opendir(path: *const c_char) -> *mut c_void {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(_) => {
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
            // SAFETY: the caller's contract.
            let fd = unsafe { crate::open::open(path, flags, 0) };
            if fd < 0 {
                return std::ptr::null_mut();
            }
            let d = open_stream(fd);
            if d.is_null() {
                crate::fd::close(fd);
            }
            d
        }
        Route::Real => real!(opendir(path) as fn(*const c_char) -> *mut c_void),
    }
}

/// # Safety
/// fdopendir(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fdopendir(fd: c_int) -> *mut c_void {
    if lookup(fd).is_some() {
        return open_stream(fd);
    }
    real!(fdopendir(fd) as fn(c_int) -> *mut c_void)
}

/// # Safety
/// `d` one of ours (checked by the caller).
unsafe fn stream<'a>(d: *mut c_void) -> &'a mut Stream {
    // SAFETY: a live `Box<Stream>` (in STREAMS); a stream is used by one thread at a time
    // (readdir(3)'s contract).
    unsafe { &mut *d.cast::<Stream>() }
}

/// # Safety
/// readdir(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn readdir64(d: *mut c_void) -> *mut libc::dirent64 {
    if !ours(d) {
        return real!(readdir64(d) as fn(*mut c_void) -> *mut libc::dirent64);
    }
    // SAFETY: ours (checked).
    let s = unsafe { stream(d) };
    let Some(e) = s.entries.get(s.pos) else {
        return std::ptr::null_mut(); // the end: errno unchanged
    };
    s.pos += 1;
    let n = e.name.len().min(255);
    s.ent.d_ino = e.ino;
    s.ent.d_off = s.pos as i64;
    s.ent.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    s.ent.d_type = pmkit_fs::posix::d_type(e.kind);
    for (i, b) in e.name[..n].iter().enumerate() {
        s.ent.d_name[i] = *b as c_char;
    }
    s.ent.d_name[n] = 0;
    &mut s.ent
}

/// # Safety
/// readdir(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn readdir(d: *mut c_void) -> *mut libc::dirent64 {
    // SAFETY: the caller's contract (dirent is dirent64 here).
    unsafe { readdir64(d) }
}

/// # Safety
/// readdir_r(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn readdir64_r(
    d: *mut c_void,
    entry: *mut libc::dirent64,
    result: *mut *mut libc::dirent64,
) -> c_int {
    if !ours(d) {
        return real!(readdir64_r(d, entry, result)
            as fn(
                *mut c_void,
                *mut libc::dirent64,
                *mut *mut libc::dirent64,
            ) -> c_int);
    }
    // SAFETY: ours (checked); `entry` and `result` valid (the caller's contract).
    unsafe {
        let e = readdir64(d);
        if e.is_null() {
            *result = std::ptr::null_mut();
        } else {
            *entry = *e;
            *result = entry;
        }
    }
    0
}

/// # Safety
/// readdir_r(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn readdir_r(
    d: *mut c_void,
    entry: *mut libc::dirent64,
    result: *mut *mut libc::dirent64,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { readdir64_r(d, entry, result) }
}

/// # Safety
/// closedir(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn closedir(d: *mut c_void) -> c_int {
    if !ours(d) {
        return real!(closedir(d) as fn(*mut c_void) -> c_int);
    }
    let mut g = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    g.as_mut().map(|s| s.remove(&(d as usize)));
    drop(g);
    // SAFETY: ours (checked), removed from the set: given back once.
    let s = unsafe { Box::from_raw(d.cast::<Stream>()) };
    crate::fd::close(s.fd)
}

/// # Safety
/// dirfd(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn dirfd(d: *mut c_void) -> c_int {
    if !ours(d) {
        return real!(dirfd(d) as fn(*mut c_void) -> c_int);
    }
    // SAFETY: ours (checked).
    unsafe { stream(d) }.fd
}

/// # Safety
/// rewinddir(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn rewinddir(d: *mut c_void) {
    if !ours(d) {
        return real!(rewinddir(d) as fn(*mut c_void) -> ());
    }
    // SAFETY: ours (checked).
    unsafe { stream(d) }.pos = 0;
}

/// # Safety
/// telldir(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn telldir(d: *mut c_void) -> c_long {
    if !ours(d) {
        return real!(telldir(d) as fn(*mut c_void) -> c_long);
    }
    // SAFETY: ours (checked).
    unsafe { stream(d) }.pos as c_long
}

/// # Safety
/// seekdir(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn seekdir(d: *mut c_void, pos: c_long) {
    if !ours(d) {
        return real!(seekdir(d, pos) as fn(*mut c_void, c_long) -> ());
    }
    // SAFETY: ours (checked).
    unsafe { stream(d) }.pos = pos.max(0) as usize;
}

/// scandir reads through glibc's own opendir, past this library: ENOTSUP under the prefix.
///
/// # Safety
/// scandir(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn scandir(
    path: *const c_char,
    list: *mut c_void,
    filter: *mut c_void,
    cmp: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(_) => enter(-1, |_| Err(libc::ENOTSUP)),
        Route::Real => real!(scandir(path, list, filter, cmp)
            as fn(*const c_char, *mut c_void, *mut c_void, *mut c_void) -> c_int),
    }
}

/// # Safety
/// scandir(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn scandir64(
    path: *const c_char,
    list: *mut c_void,
    filter: *mut c_void,
    cmp: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { route(libc::AT_FDCWD, path) } {
        Route::Pool(_) => enter(-1, |_| Err(libc::ENOTSUP)),
        Route::Real => real!(scandir64(path, list, filter, cmp)
            as fn(*const c_char, *mut c_void, *mut c_void, *mut c_void) -> c_int),
    }
}
