//! `mkstemp` and its family, and `mkdtemp`, on templates under the prefix: glibc makes the file
//! or directory with its own internal `open`/`mkdir`, past this library, so they are made here
//! (the same rules: the last six characters before the suffix must be "XXXXXX", they are
//! replaced in the caller's buffer, the file is made with O_EXCL and mode 0600, the directory
//! with 0700, and a name taken is tried again with other characters).

use crate::state::{route, Route};
use std::ffi::{c_char, c_int};

/// Names tried before giving up with EEXIST (glibc tries 62^3).
const TRIES: u32 = 1000;
const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Six characters from a counter mixed with the time, the process id and the address.
fn letters(seed: u64) -> [u8; 6] {
    let mut x = seed | 1;
    let mut out = [0u8; 6];
    for c in &mut out {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *c = CHARS[(x % CHARS.len() as u64) as usize];
    }
    out
}

fn seed(template: *mut c_char) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // SAFETY: getpid cannot fail.
    t ^ (u64::from(unsafe { libc::getpid() } as u32) << 32) ^ template as u64
}

/// Try names from `template` (its `suffix` last bytes kept) with `make` until one is made:
/// `Some(result)` when the template is the pool's, `None` to hand it to libc.
///
/// # Safety
/// `template` is a writable C string (the family's contract).
unsafe fn with_names(
    template: *mut c_char,
    suffix: c_int,
    make: impl Fn(*const c_char) -> c_int,
) -> Option<c_int> {
    // SAFETY: the caller's contract.
    let Route::Pool(_) = (unsafe { route(libc::AT_FDCWD, template) }) else {
        return None;
    };
    // SAFETY: as above.
    let len = unsafe { libc::strlen(template) };
    let suffix = usize::try_from(suffix).unwrap_or(usize::MAX);
    if suffix > len || len - suffix < 6 {
        crate::state::set_errno(libc::EINVAL);
        return Some(-1);
    }
    let at = len - suffix - 6;
    let mut xs = [0u8; 6];
    // SAFETY: `at + 6 <= len`: the six bytes lie inside the string; copied out.
    unsafe { std::ptr::copy_nonoverlapping(template.cast::<u8>().add(at), xs.as_mut_ptr(), 6) };
    if &xs != b"XXXXXX" {
        crate::state::set_errno(libc::EINVAL);
        return Some(-1);
    }
    let base = seed(template);
    for i in 0..TRIES {
        let l = letters(base.wrapping_add(u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        // SAFETY: the same six bytes inside the caller's writable string.
        unsafe { std::ptr::copy_nonoverlapping(l.as_ptr(), template.cast::<u8>().add(at), 6) };
        let r = make(template);
        if r >= 0 || crate::state::errno() != libc::EEXIST {
            return Some(r);
        }
    }
    crate::state::set_errno(libc::EEXIST);
    Some(-1)
}

/// A file from `template` opened with `flags` (besides O_RDWR|O_CREAT|O_EXCL).
///
/// # Safety
/// As [`with_names`].
unsafe fn temp_file(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    let flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    // SAFETY: the caller's contract; `open` gets the template's current name.
    let made = unsafe { with_names(template, suffix, |t| crate::open::open(t, flags, 0o600)) };
    match made {
        Some(r) => r,
        None => real!(mkostemps(
            template,
            suffix,
            flags & !(libc::O_RDWR | libc::O_CREAT | libc::O_EXCL)
        ) as fn(*mut c_char, c_int, c_int) -> c_int),
    }
}

/// # Safety
/// mkstemp(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mkstemp(template: *mut c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { temp_file(template, 0, 0) }
}

/// # Safety
/// mkstemp(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mkstemp64(template: *mut c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { temp_file(template, 0, 0) }
}

/// # Safety
/// mkostemp(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mkostemp(template: *mut c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { temp_file(template, 0, flags) }
}

/// # Safety
/// mkstemps(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mkstemps(template: *mut c_char, suffix: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { temp_file(template, suffix, 0) }
}

/// # Safety
/// mkostemps(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mkostemps(
    template: *mut c_char,
    suffix: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { temp_file(template, suffix, flags) }
}

/// # Safety
/// mkdtemp(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    // SAFETY: the caller's contract; `mkdir` gets the template's current name.
    match unsafe { with_names(template, 0, |t| crate::path::mkdir(t, 0o700)) } {
        Some(0) => template,
        Some(_) => std::ptr::null_mut(),
        None => real!(mkdtemp(template) as fn(*mut c_char) -> *mut c_char),
    }
}
