//! stdio streams on pool files: `fopen` of a pool path and `fdopen` of a shim descriptor give a
//! glibc stream made with `fopencookie`, whose reads, writes, seeks and close are this library's
//! calls on the descriptor, so `fread`, `fprintf`, `fgets`, `fflush`, `fclose` all reach the
//! pool. `fileno` of such a stream gives the descriptor (glibc keeps it at a fixed place of the
//! stream, checked once against a stream of its own; where it differs, `fileno` gives -1 as for
//! any cookie stream). Not served: a stream glibc makes from a descriptor itself (`popen`), and
//! `stdin`/`stdout` redirected to a pool file by the shell before exec, whose writes glibc makes
//! past this library, except in a program started by exec with them (see [`adopt_standard`]).

use crate::state::{lookup, route, Route};
use std::ffi::{c_char, c_int, c_void, CStr};

type ReadFn = unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> isize;
type WriteFn = unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> isize;
type SeekFn = unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int;
type CloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: ReadFn,
    write: WriteFn,
    seek: SeekFn,
    close: CloseFn,
}

extern "C" {
    static mut stdin: *mut libc::FILE;
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
}

/// The descriptor a cookie stands for (the cookie is the number itself, no allocation).
fn fd_of(cookie: *mut c_void) -> c_int {
    cookie as usize as c_int
}

unsafe extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, n: usize) -> isize {
    // SAFETY: glibc gives a buffer of `n` bytes.
    unsafe { crate::fd::read(fd_of(cookie), buf.cast(), n) }
}

unsafe extern "C" fn cookie_write(cookie: *mut c_void, buf: *const c_char, n: usize) -> isize {
    // SAFETY: glibc gives `n` bytes to write.
    unsafe { crate::fd::write(fd_of(cookie), buf.cast(), n) }
}

unsafe extern "C" fn cookie_seek(cookie: *mut c_void, off: *mut i64, whence: c_int) -> c_int {
    // SAFETY: glibc gives a valid offset to read and update.
    let at = crate::fd::lseek(fd_of(cookie), unsafe { *off }, whence);
    if at < 0 {
        return -1;
    }
    // SAFETY: as above.
    unsafe { *off = at };
    0
}

unsafe extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    crate::fd::close(fd_of(cookie))
}

/// open(2) flags for an fopen mode ("r", "w+", "ae", "wx", ...; after a comma, ignored).
fn mode_flags(mode: &[u8]) -> Option<c_int> {
    let (first, rest) = mode.split_first()?;
    let rest = rest.split(|&c| c == b',').next().unwrap_or(&[]);
    let plus = rest.contains(&b'+');
    let mut f = match (first, plus) {
        (b'r', false) => libc::O_RDONLY,
        (b'r', true) => libc::O_RDWR,
        (b'w', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        (b'w', true) => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        (b'a', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        (b'a', true) => libc::O_RDWR | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    if rest.contains(&b'x') {
        f |= libc::O_EXCL;
    }
    if rest.contains(&b'e') {
        f |= libc::O_CLOEXEC;
    }
    Some(f)
}

/// open(2) flags for the C string `mode`, if it is one (NULL or a bad mode: `None`).
///
/// # Safety
/// `mode` is NULL or a C string.
unsafe fn flags_of(mode: *const c_char) -> Option<c_int> {
    if mode.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    mode_flags(unsafe { CStr::from_ptr(mode) }.to_bytes())
}

/// Where glibc keeps a stream's descriptor (`_fileno` of `struct _IO_FILE`: after the flags and
/// thirteen pointers on LP64), if a stream of glibc's own shows it there.
fn fileno_at() -> Option<usize> {
    const AT: usize = 112;
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *OK.get_or_init(|| {
        let _b = crate::state::Busy::new();
        let f = real!(fopen(c"/dev/null".as_ptr(), c"r".as_ptr())
            as fn(*const c_char, *const c_char) -> *mut libc::FILE);
        if f.is_null() {
            return false;
        }
        // SAFETY: `f` is a live stream of glibc's; `_fileno` lies inside the structure (it is
        // larger than AT + 4 bytes on every glibc), read as the int it is.
        let (seen, fd) = unsafe {
            (
                std::ptr::read_unaligned(f.cast::<u8>().add(AT).cast::<c_int>()),
                libc::fileno(f),
            )
        };
        real!(fclose(f) as fn(*mut libc::FILE) -> c_int);
        fd >= 0 && seen == fd
    });
    ok.then_some(AT)
}

/// A stream over shim descriptor (or kernel FIFO) `fd` with `mode`; null (fd left open) if
/// glibc refuses.
///
/// # Safety
/// `mode` is a C string.
unsafe fn stream(fd: c_int, mode: *const c_char) -> *mut c_void {
    let io = CookieIo {
        read: cookie_read,
        write: cookie_write,
        seek: cookie_seek,
        close: cookie_close,
    };
    // SAFETY: the cookie is a number, never dereferenced; `mode` per the contract.
    let f = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if f.is_null() {
        return f.cast();
    }
    if let Some(at) = fileno_at() {
        // SAFETY: `f` is the live stream just made, `_fileno` at `at` (checked above); glibc's
        // cookie streams read and write only through the cookie, so the number is for fileno.
        unsafe { std::ptr::write_unaligned(f.cast::<u8>().add(at).cast::<c_int>(), fd) };
    }
    f.cast()
}

/// # Safety
/// fopen(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut c_void {
    // SAFETY: the caller's contract.
    let Route::Pool(p) = (unsafe { route(libc::AT_FDCWD, path) }) else {
        return real!(fopen(path, mode) as fn(*const c_char, *const c_char) -> *mut c_void);
    };
    // SAFETY: the caller's contract: `mode` is a C string.
    let flags = unsafe { flags_of(mode) };
    let Some(flags) = flags else {
        crate::state::set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    let fd = crate::open::open_pool(p, flags, 0o666);
    if fd < 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: `mode` is the caller's C string.
    let f = unsafe { stream(fd, mode) };
    if f.is_null() {
        let e = crate::state::errno();
        crate::fd::close(fd);
        crate::state::set_errno(e);
    }
    f
}

/// # Safety
/// fopen(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { fopen(path, mode) }
}

/// # Safety
/// fdopen(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut c_void {
    if lookup(fd).is_some() && !mode.is_null() {
        // SAFETY: the caller's contract: `mode` is a C string.
        return unsafe { stream(fd, mode) };
    }
    real!(fdopen(fd, mode) as fn(c_int, *const c_char) -> *mut c_void)
}

/// A program started by exec with standard descriptor `fd` (0, 1 or 2) standing for a pool file
/// (a shell's `prog > file`): its stdio stream becomes a stream over the shim descriptor, as
/// glibc's own stream would write past this library. Called before `main`, single-threaded.
pub(crate) fn adopt_standard(fd: c_int) {
    let mode = match fd {
        0 => c"r",
        1 | 2 => c"w",
        _ => return,
    };
    // SAFETY: `mode` is a C string; the stream is over the shim descriptor `fd`.
    let f = unsafe { stream(fd, mode.as_ptr()) }.cast::<libc::FILE>();
    if f.is_null() {
        return;
    }
    register_standard(f);
    // SAFETY: before main, one thread: nothing reads the globals meanwhile; glibc's stdio reads
    // `stdin`/`stdout`/`stderr` through these variables.
    unsafe {
        match fd {
            0 => stdin = f,
            1 => stdout = f,
            _ => {
                libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
                stderr = f;
            }
        }
    }
}

/// freopen(3) onto a pool path: the old stream is closed, the pool file opened on the old
/// stream's descriptor number (as glibc's freopen, which reopens on the number it closed), and a
/// new stream over it takes the old one's place (`stdin`, `stdout` or `stderr` is pointed at
/// it when it was the old one). The stream returned is a new one, not `old`: a caller that keeps
/// using `old` itself (not the return value, not the standard variable) is not served.
///
/// # Safety
/// freopen(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    old: *mut libc::FILE,
) -> *mut libc::FILE {
    // SAFETY: the caller's contract.
    let pool = match (path.is_null(), unsafe { route(libc::AT_FDCWD, path) }) {
        (false, Route::Pool(p)) => p,
        _ => {
            return real!(freopen(path, mode, old)
                as fn(
                    *const c_char,
                    *const c_char,
                    *mut libc::FILE,
                ) -> *mut libc::FILE)
        }
    };
    // SAFETY: the caller's contract: `mode` is a C string.
    let flags = unsafe { flags_of(mode) };
    // SAFETY: `old` is the caller's live stream, closed as freopen closes it.
    let n = unsafe {
        let n = libc::fileno(old);
        libc::fclose(old);
        n
    };
    let Some(flags) = flags else {
        crate::state::set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    let mut fd = crate::open::open_pool(pool, flags, 0o666);
    if fd < 0 {
        return std::ptr::null_mut();
    }
    if n >= 0 && fd != n && crate::fd::dup2(fd, n) == n {
        crate::fd::close(fd);
        fd = n;
    }
    // SAFETY: `mode` is the caller's C string.
    let f = unsafe { stream(fd, mode) }.cast::<libc::FILE>();
    if f.is_null() {
        crate::fd::close(fd);
        return f;
    }
    // SAFETY: the standard variables are read and written as glibc's stdio does (a program
    // that freopens its standard streams does so from one thread).
    let standard = unsafe {
        if old == stdin {
            stdin = f;
        } else if old == stdout {
            stdout = f;
        } else if old == stderr {
            stderr = f;
        }
        f == stdin || f == stdout || f == stderr
    };
    if standard {
        register_standard(f);
    }
    f
}

/// # Safety
/// freopen(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    old: *mut libc::FILE,
) -> *mut libc::FILE {
    // SAFETY: the caller's contract.
    unsafe { freopen(path, mode, old) }
}

/// Streams of this library that took the place of `stdin`, `stdout` or `stderr`, and whether
/// each was closed. glibc's own standard streams are static: its `fclose` of one closes the
/// descriptor but never frees the stream, so programs `fclose(stdout)` and then read
/// `ferror(stdout)` or close it again (flex does). These streams are made to behave the same.
static STANDARD: std::sync::Mutex<Vec<(usize, bool)>> = std::sync::Mutex::new(Vec::new());

/// glibc's stream flags: reading and writing refused (a closed standard stream's state).
const IO_NO_READS: c_int = 0x0004;
const IO_NO_WRITES: c_int = 0x0008;

fn register_standard(f: *mut libc::FILE) {
    let mut v = STANDARD.lock().unwrap_or_else(|e| e.into_inner());
    v.retain(|(p, _)| *p != f as usize);
    v.push((f as usize, false));
}

/// `fclose` of a stream in [`STANDARD`], as glibc closes its static standard streams: flushed,
/// its descriptor closed, reads and writes refused from then on, the stream itself kept (a
/// second close is EOF, EBADF). `None` for any other stream.
pub(crate) fn fclose_standard(f: *mut libc::FILE) -> Option<c_int> {
    let mut v = STANDARD.lock().unwrap_or_else(|e| e.into_inner());
    let entry = v.iter_mut().find(|(p, _)| *p == f as usize)?;
    if entry.1 {
        crate::state::set_errno(libc::EBADF);
        return Some(libc::EOF);
    }
    entry.1 = true;
    drop(v);
    // SAFETY: `f` is a live stream of this library's (registered, not closed).
    let (flushed, fd) = unsafe { (libc::fflush(f), libc::fileno(f)) };
    let closed = if fd >= 0 { crate::fd::close(fd) } else { 0 };
    // SAFETY: `_flags`, the first int of the live stream, read and written as glibc's fclose
    // does for its static streams.
    unsafe {
        let flags = f.cast::<c_int>();
        *flags |= IO_NO_READS | IO_NO_WRITES;
    }
    Some(if flushed == 0 && closed == 0 {
        0
    } else {
        libc::EOF
    })
}

/// # Safety
/// fclose(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn fclose(f: *mut libc::FILE) -> c_int {
    if let Some(r) = fclose_standard(f) {
        return r;
    }
    if let Some(status) = crate::popens::close(f) {
        return status;
    }
    let fd = if f.is_null() {
        -1
    } else {
        // SAFETY: a live stream (the caller's contract).
        unsafe { libc::fileno(f) }
    };
    let r = real!(fclose(f) as fn(*mut libc::FILE) -> c_int);
    if fd >= 0 {
        crate::fd::stale(fd, fd);
    }
    r
}
