//! The caller's memory: C strings and buffers borrowed for the length of one call. This is the
//! one place a C front end forms a Rust slice over memory it did not allocate. The caller's
//! memory is never PM: PM is reached only through `pmkit-media`'s copy functions.

use std::ffi::{c_char, CStr};

/// The bytes of the NUL-terminated string at `s` (without the NUL); `None` when `s` is NULL.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string that stays unchanged while the borrow lives.
pub unsafe fn bytes<'a>(s: *const c_char) -> Option<&'a [u8]> {
    if s.is_null() {
        return None;
    }
    // SAFETY: not NULL (checked), NUL-terminated and unchanged (the caller's contract).
    Some(unsafe { CStr::from_ptr(s) }.to_bytes())
}

/// The caller's `n` items at `p` for reading: empty when `n` is 0 (whatever `p`), `None` when
/// `p` is NULL and `n` is not 0.
///
/// # Safety
/// With `n > 0`, `p` is NULL or valid for `n` reads of `T`, aligned, and not written by anyone
/// while the borrow lives (the contract of every C call that takes a buffer).
#[allow(clippy::disallowed_methods)] // forms a slice over the caller's buffer
pub unsafe fn slice<'a, T>(p: *const T, n: usize) -> Option<&'a [T]> {
    if n == 0 {
        return Some(&[]);
    }
    if p.is_null() {
        return None;
    }
    debug_assert!(p.is_aligned(), "a misaligned buffer from C");
    // SAFETY: not NULL (checked), valid, aligned and unchanged for `n` items (the contract).
    Some(unsafe { std::slice::from_raw_parts(p, n) })
}

/// As [`slice()`], for writing: the caller's buffer, used by no one else during the call.
///
/// # Safety
/// With `n > 0`, `p` is NULL or valid for `n` writes of `T`, aligned, and not read or written
/// by anyone else while the borrow lives.
#[allow(clippy::disallowed_methods)] // forms a slice over the caller's buffer
pub unsafe fn slice_mut<'a, T>(p: *mut T, n: usize) -> Option<&'a mut [T]> {
    if n == 0 {
        return Some(&mut []);
    }
    if p.is_null() {
        return None;
    }
    debug_assert!(p.is_aligned(), "a misaligned buffer from C");
    // SAFETY: not NULL (checked), valid, aligned and exclusive for `n` items (the contract).
    Some(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_is_none_unless_empty_and_strings_drop_their_nul() {
        // SAFETY: NULL, or this test's own live string and buffers.
        unsafe {
            assert_eq!(bytes(std::ptr::null()), None);
            assert_eq!(bytes(c"abc".as_ptr()), Some(&b"abc"[..]));
            assert_eq!(slice::<u8>(std::ptr::null(), 0), Some(&[][..]));
            assert_eq!(slice::<u8>(std::ptr::null(), 1), None);
            let mut buf = [1u64, 2];
            assert_eq!(slice(buf.as_ptr(), 2), Some(&[1u64, 2][..]));
            slice_mut(buf.as_mut_ptr(), 1).unwrap()[0] = 9;
            assert_eq!(buf, [9, 2]);
            assert!(slice_mut::<u8>(std::ptr::null_mut(), 3).is_none());
        }
    }
}
