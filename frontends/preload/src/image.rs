//! exec of a program stored in the pool: the kernel cannot read it, so a script (`#!`) runs as
//! its interpreter with the script's path, which the interpreter opens through this library,
//! and any other program is copied into a sealed memory file that the kernel executes (its
//! argv\[0\] unchanged; `/proc/self/exe` names the memory file). Execute permission is the
//! pool's.

use crate::state::{en, enter, route, Route};
use std::ffi::{c_char, c_int, CString};
use std::os::fd::{FromRawFd, OwnedFd};

/// What exec of a path runs.
pub(crate) enum Image {
    /// Not the pool's: the kernel's path, as given.
    Kernel,
    /// A pool script: its interpreter and the interpreter's one optional argument.
    Script {
        interp: CString,
        arg: Option<CString>,
    },
    /// A pool program, copied into this memory file.
    Memory(OwnedFd),
}

/// Longest `#!` line read (Linux's BINPRM_BUF_SIZE).
const SHEBANG_MAX: usize = 256;

/// What exec of `path` runs; `Err` is the errno exec answers.
///
/// # Safety
/// `path` is NULL or a C string.
pub(crate) unsafe fn image_of(path: *const c_char, cloexec: bool) -> Result<Image, c_int> {
    // SAFETY: the caller's contract.
    let Route::Pool(p) = (unsafe { route(libc::AT_FDCWD, path) }) else {
        return Ok(Image::Kernel);
    };
    let r = enter(Err(-1), |fs| {
        let a = fs.stat(&p).map_err(en)?;
        if a.kind != pmkit_fs::Kind::File {
            return Ok(Err(libc::EACCES));
        }
        fs.access(&p, libc::X_OK as u32, true).map_err(en)?;
        let fd = fs.open(&p, libc::O_RDONLY, 0).map_err(en)?;
        let out = copy_out(fs, fd, a.size, cloexec);
        let _ = fs.close(fd);
        Ok(out)
    });
    match r {
        Err(-1) => Err(crate::state::errno()),
        r => r,
    }
}

/// The script's interpreter, or the program in a memory file.
fn copy_out(
    fs: &dyn pmkit_fs_share::PoolApi,
    fd: pmkit_fs::posix::Fd,
    size: u64,
    cloexec: bool,
) -> Result<Image, c_int> {
    let mut head = vec![0u8; SHEBANG_MAX];
    let n = fs.pread(fd, &mut head, 0).map_err(en)?;
    head.truncate(n);
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|&b| b == b'\n').next().unwrap_or(&[]);
        let mut words = line
            .split(|&b| b == b' ' || b == b'\t')
            .filter(|w| !w.is_empty());
        let interp = words.next().ok_or(libc::ENOEXEC)?;
        // As Linux: everything after the interpreter is one argument.
        let rest_at = line
            .windows(interp.len())
            .position(|w| w == interp)
            .map_or(line.len(), |i| i + interp.len());
        let rest = line[rest_at..].trim_ascii();
        return Ok(Image::Script {
            interp: CString::new(interp).map_err(|_| libc::ENOEXEC)?,
            arg: (!rest.is_empty())
                .then(|| CString::new(rest))
                .transpose()
                .map_err(|_| libc::ENOEXEC)?,
        });
    }
    let flags = libc::MFD_ALLOW_SEALING | if cloexec { libc::MFD_CLOEXEC } else { 0 };
    // SAFETY: a plain system call on a constant name.
    let m = unsafe { libc::memfd_create(c"pmkit-exec".as_ptr(), flags) };
    if m < 0 {
        return Err(crate::state::errno());
    }
    // SAFETY: `m` was just made and is owned by nothing else.
    let m = unsafe { OwnedFd::from_raw_fd(m) };
    let mut file = std::fs::File::from(m);
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < size {
        let got = fs.pread(fd, &mut buf, off).map_err(en)?;
        if got == 0 {
            break;
        }
        std::io::Write::write_all(&mut file, &buf[..got])
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        off += got as u64;
    }
    let m = OwnedFd::from(file);
    // SAFETY: F_ADD_SEALS on the memory file this function owns: no one may change the program
    // while it runs.
    unsafe {
        libc::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&m),
            libc::F_ADD_SEALS,
            libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL,
        )
    };
    Ok(Image::Memory(m))
}

/// `argv` with the script's interpreter (and its argument) and the script's path in front of
/// the program's own arguments: what Linux passes for a `#!` script.
///
/// # Safety
/// `argv` is a NULL-terminated array of C strings (or NULL).
pub(crate) unsafe fn script_argv(
    interp: &CString,
    arg: Option<&CString>,
    path: *const c_char,
    argv: *const *const c_char,
) -> Vec<*const c_char> {
    let mut v = vec![interp.as_ptr()];
    v.extend(arg.map(|a| a.as_ptr()));
    v.push(path);
    // SAFETY: the caller's contract: entries up to the NULL (argv[1] only after a non-NULL
    // argv[0]).
    if !argv.is_null() && !unsafe { *argv }.is_null() {
        let mut i = 1;
        loop {
            // SAFETY: as above.
            let a = unsafe { *argv.add(i) };
            if a.is_null() {
                break;
            }
            v.push(a);
            i += 1;
        }
    }
    v.push(std::ptr::null());
    v
}
