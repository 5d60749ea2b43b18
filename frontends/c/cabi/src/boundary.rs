//! Errors at the boundary: the thread's last message (what `*_errmsg()` returns), `errno`, and
//! a panic turned into an error code instead of unwinding into C (undefined behaviour).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A failed call: the code the library returns (or puts in `errno`) and the message for its
/// `*_errmsg()`.
pub type Failure = (c_int, String);

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Keep `msg` as the calling thread's last message (a NUL inside it becomes a space).
pub fn set_message(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).expect("NULs replaced");
    LAST.with(|l| *l.borrow_mut() = c);
}

/// The calling thread's last message, valid until the thread's next failing call.
pub fn message() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// The calling thread's last message, as text (for a library that prints it itself).
pub fn message_text() -> String {
    LAST.with(|l| l.borrow().to_string_lossy().into_owned())
}

/// Run `f` for a C caller: its value, or the code of its failure with the message kept; a panic
/// is `panic_code` with a message naming `library`, so a bug never unwinds into C.
pub fn call<T>(
    library: &str,
    panic_code: c_int,
    f: impl FnOnce() -> Result<T, Failure>,
) -> Result<T, c_int> {
    let (code, msg) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => return Ok(v),
        Ok(Err(e)) => e,
        Err(_) => (
            panic_code,
            format!("internal error (a bug in {library}: it panicked)"),
        ),
    };
    set_message(&msg);
    Err(code)
}

/// The calling thread's `errno`.
pub fn errno() -> c_int {
    // SAFETY: `__errno_location` returns the calling thread's own errno variable.
    unsafe { *libc::__errno_location() }
}

/// Set the calling thread's `errno`.
pub fn set_errno(code: c_int) {
    // SAFETY: as in `errno`: the calling thread's own variable.
    unsafe { *libc::__errno_location() = code };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: `message` points at this thread's NUL-terminated message.
        let c = unsafe { CStr::from_ptr(message()) }
            .to_string_lossy()
            .into_owned();
        assert_eq!(c, message_text());
        c
    }

    #[test]
    fn a_failure_keeps_its_code_and_message_and_a_panic_becomes_the_panic_code() {
        assert_eq!(call("lib", -9, || Ok::<_, Failure>(7)), Ok(7));
        assert_eq!(
            call::<()>("lib", -9, || Err((-3, "bad\0arg".into()))),
            Err(-3)
        );
        assert_eq!(last(), "bad arg");
        assert_eq!(call::<()>("libx", -9, || panic!("boom")), Err(-9));
        assert_eq!(last(), "internal error (a bug in libx: it panicked)");
    }

    #[test]
    fn errno_round_trips() {
        set_errno(libc::EBUSY);
        assert_eq!(errno(), libc::EBUSY);
    }
}
