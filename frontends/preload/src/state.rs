//! The shim's state: the string and path helpers every served call uses, and (re-exported)
//! the configuration, the pool and the boundary [`enter`] (`config`, `pool`), the table of
//! descriptors it handed out (`table`) and the reentrancy guard.

use std::ffi::c_int;

pub(crate) use crate::busy::{busy, Busy};
pub(crate) use crate::config::{config, kept_path, last_component, normalize, warn};
pub(crate) use crate::pid::own_pid;
pub(crate) use crate::pool::{
    adopt, enter, exec_locked, exec_socket, is_own, make_room, own_socket, with_mounted,
};
pub(crate) use crate::table::{entries, insert, lookup, numbers, remove, Open};

pub(crate) use pmkit_cabi::{errno, set_errno};

/// `mode` less the process's umask, as the kernel applies it to a file or directory it
/// creates.
pub(crate) fn umasked(mode: u32) -> u32 {
    // Nothing to clear (every open without O_CREAT): no need for the two system calls that
    // read the mask.
    if mode == 0 {
        return 0;
    }
    // SAFETY: umask only swaps the process's mask; the old one is put back at once.
    let old = unsafe {
        let old = libc::umask(0);
        libc::umask(old);
        old
    };
    mode & !old
}

/// errno of a library error.
pub(crate) fn en(e: pmkit_fs::Error) -> c_int {
    e.errno()
}

thread_local! {
    /// The calling thread's stack `(low, high)` from `pthread_getattr_np`, asked once per
    /// thread (`(0, 0)`: unknown, do not use).
    static STACK: std::cell::Cell<Option<(usize, usize)>> = const { std::cell::Cell::new(None) };
}

fn thread_stack() -> (usize, usize) {
    if let Some(r) = STACK.with(|c| c.get()) {
        return r;
    }
    let _b = Busy::new(); // glibc reads /proc/self/maps for the main thread
                          // SAFETY: a zeroed attr filled by pthread_getattr_np for the calling thread, read, destroyed.
    let r = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        let mut r = (0, 0);
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) == 0 {
            let (mut addr, mut size) = (std::ptr::null_mut(), 0usize);
            if libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0 && size > 0 {
                r = (addr as usize, addr as usize + size);
            }
            libc::pthread_attr_destroy(&mut attr);
        }
        r
    };
    STACK.with(|c| c.set(Some(r)));
    r
}

/// The string at `ptr` with no system call, when it lies on the calling thread's live stack:
/// between this frame (a local's address: at or above the stack pointer) and the top of the
/// thread's stack, memory the thread is running on, so mapped and readable. A pointer anywhere
/// else (heap, data, another thread's stack, a signal or coroutine stack outside the thread's
/// own, unmapped memory) gets `None`, and the caller reads it with `process_vm_readv`. C
/// programs often build paths in stack buffers (`char path[PATH_MAX]`). The one case this does
/// not cover: a pointer into part of the thread's own live stack that the program made
/// unreadable itself (`mprotect` of its stack to `PROT_NONE`), where a load faults.
fn copy_from_stack(ptr: *const libc::c_char) -> Option<Vec<u8>> {
    let here = 0u8;
    let sp = std::hint::black_box(&here) as *const u8 as usize;
    let (lo, hi) = thread_stack();
    let p = ptr as usize;
    if !(lo <= sp && sp <= p && p < hi) {
        return None;
    }
    // SAFETY: `[p, hi)` lies between the current frame and the top of the running thread's stack
    // (checked above), which is mapped and readable while the thread runs on it; `hi` is a page
    // boundary.
    unsafe { copy_before(ptr, hi) }
}

/// The NUL-terminated string at `ptr` if it ends before `hi` and within `PATH_MAX` bytes.
///
/// # Safety
/// `[ptr, hi)` must be mapped and readable, `hi` a page boundary (libc's vector loads stay
/// inside the pages of the range).
unsafe fn copy_before(ptr: *const libc::c_char, hi: usize) -> Option<Vec<u8>> {
    let len = (hi - ptr as usize).min(libc::PATH_MAX as usize);
    // SAFETY: the caller's contract.
    let n = unsafe { libc::strnlen(ptr, len) };
    if n == len {
        return None;
    }
    let mut out = vec![0u8; n];
    // SAFETY: `n` < `len` bytes of the readable range, into our own buffer of `n` bytes.
    unsafe { std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), out.as_mut_ptr(), n) };
    Some(out)
}

/// Where the process's brk heap starts (`/proc/self/stat` field 47, read once; 0: unknown).
fn start_brk() -> usize {
    static START: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        let _b = Busy::new(); // the read below must not come back through the shim
        std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| {
                // Fields after the command name (which may hold spaces) start at field 3.
                let rest = &s[s.rfind(')')? + 1..];
                rest.split_whitespace().nth(47 - 3)?.parse().ok()
            })
            .unwrap_or(0)
    })
}

/// The string at `ptr` with no system call, when it lies in the brk heap (where malloc puts a
/// single-threaded program's small strings: `find` and `grep` build their paths there): from
/// the heap's start to the current break, memory the kernel keeps mapped and writable (the
/// break is page-aligned in the mapping). `None` elsewhere. Not covered, as for the stack: a
/// pointer into heap memory the program itself made unreadable with `mprotect`, or freed and
/// trimmed away by another thread during the call (a use after free in the program).
fn copy_from_brk(ptr: *const libc::c_char) -> Option<Vec<u8>> {
    let lo = start_brk();
    // SAFETY: sbrk(0) only reads glibc's cached break (no system call after the first).
    let brk = unsafe { libc::sbrk(0) } as usize;
    let p = ptr as usize;
    if lo == 0 || brk == usize::MAX || !(lo <= p && p < brk) {
        return None;
    }
    // SAFETY: `[p, page_align(brk))` lies in the heap the kernel keeps mapped (checked above).
    unsafe { copy_before(ptr, (brk + 4095) & !4095) }
}

/// The main program's readable loaded segments (ELF `PT_LOAD` with `PF_R`), rounded out to
/// pages: its string literals, globals and static buffers. The loader maps them for the life of
/// the process (a program is never unloaded), so they stay readable. Read once.
fn image_segments() -> &'static [(usize, usize)] {
    static SEGS: std::sync::OnceLock<Vec<(usize, usize)>> = std::sync::OnceLock::new();
    unsafe extern "C" fn first_object(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        out: *mut libc::c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid `info` for the call; `out` is the Vec we passed.
        let (info, out) = unsafe { (&*info, &mut *out.cast::<Vec<(usize, usize)>>()) };
        for k in 0..info.dlpi_phnum as usize {
            // SAFETY: `dlpi_phdr` holds `dlpi_phnum` program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(k) };
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_R != 0 && ph.p_memsz > 0 {
                let lo = info.dlpi_addr as usize + ph.p_vaddr as usize;
                let hi = lo + ph.p_memsz as usize;
                out.push((lo & !4095, (hi + 4095) & !4095));
            }
        }
        1 // the first object is the main program: stop
    }
    SEGS.get_or_init(|| {
        let _b = Busy::new();
        let mut v: Vec<(usize, usize)> = Vec::new();
        // SAFETY: the callback only reads the headers the loader hands it and pushes to `v`,
        // which outlives the call.
        unsafe { libc::dl_iterate_phdr(Some(first_object), (&mut v as *mut Vec<_>).cast()) };
        v
    })
}

/// The string at `ptr` with no system call, when it lies in the main program's loaded image
/// (a literal, a global, a static buffer: postmark builds its paths in one).
fn copy_from_image(ptr: *const libc::c_char) -> Option<Vec<u8>> {
    let p = ptr as usize;
    let &(_, hi) = image_segments()
        .iter()
        .find(|&&(lo, hi)| lo <= p && p < hi)?;
    // SAFETY: `[p, hi)` lies in a readable segment of the main program, mapped for the life
    // of the process; `hi` is a page boundary.
    unsafe { copy_before(ptr, hi) }
}

/// Copy the NUL-terminated string at `ptr` (at most `PATH_MAX` bytes) without trusting the
/// pointer: in place where it is provably readable (the stack, the brk heap, the program's
/// image), else by the guarded routine (`guarded`: a fault is an error, not a crash), else (no
/// guarded routine here) with `process_vm_readv` on this process, one page at a time, which
/// answers EFAULT for memory that is not readable. `None`: unreadable, or no NUL within
/// `PATH_MAX` bytes.
pub(crate) fn copy_c_string(ptr: *const libc::c_char) -> Option<Vec<u8>> {
    copy_path(ptr).ok()
}

/// [`copy_c_string`], or why not, as the kernel would answer: EFAULT (not readable, or NULL),
/// ENAMETOOLONG (no NUL within `PATH_MAX` bytes).
pub(crate) fn copy_path(ptr: *const libc::c_char) -> Result<Vec<u8>, libc::c_int> {
    if ptr.is_null() {
        return Err(libc::EFAULT);
    }
    if let Some(v) = copy_from_stack(ptr)
        .or_else(|| copy_from_brk(ptr))
        .or_else(|| copy_from_image(ptr))
    {
        return Ok(v);
    }
    if let Some(r) = crate::guarded::copy(ptr, libc::PATH_MAX as usize) {
        return r;
    }
    const PAGE: usize = 4096;
    let mut out = Vec::new();
    let mut at = ptr as usize;
    while out.len() < libc::PATH_MAX as usize {
        let chunk = PAGE - at % PAGE;
        let mut buf = vec![0u8; chunk];
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: chunk,
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: chunk,
        };
        // SAFETY: the kernel copies from our own address space into `buf`, which is ours and
        // `chunk` bytes long; an unreadable source is an error return, never a fault.
        let n = unsafe { libc::process_vm_readv(own_pid(), &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(libc::EFAULT);
        }
        let n = n as usize;
        if let Some(z) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..z]);
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
        at += n;
    }
    Err(libc::ENAMETOOLONG)
}

/// Where a path argument goes.
pub(crate) enum Route {
    /// To libc (not under the prefix, the shim inert or busy).
    Real,
    /// To the pool, by this path from its root.
    Pool(Vec<u8>),
}

/// Decide where `path`, relative to `dirfd` when not absolute, goes: under the prefix (after
/// lexical normalization against the current directory, a shim directory descriptor, or a
/// kernel directory descriptor's path from /proc) it is the pool's, elsewhere libc's.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
pub(crate) unsafe fn route(dirfd: c_int, path: *const libc::c_char) -> Route {
    if path.is_null() || busy() {
        return Route::Real;
    }
    let Some(c) = config() else {
        return Route::Real;
    };
    // A bad pointer goes to libc, whose system call answers EFAULT as the kernel would; reading
    // it here would crash the program instead.
    let Some(owned) = copy_c_string(path) else {
        return Route::Real;
    };
    let p = &owned[..];
    if p.is_empty() {
        return Route::Real;
    }
    let full = if p[0] == b'/' {
        p.to_vec()
    } else if dirfd == libc::AT_FDCWD {
        let mut v = match crate::vcwd::get() {
            Some(v) => v,
            None => {
                let _b = Busy::new();
                let Ok(cwd) = std::env::current_dir() else {
                    return Route::Real;
                };
                std::os::unix::ffi::OsStrExt::as_bytes(cwd.as_os_str()).to_vec()
            }
        };
        v.push(b'/');
        v.extend_from_slice(p);
        v
    } else if let Some(o) = lookup(dirfd) {
        // Relative to a shim directory: inside the pool whatever `..` says at its root.
        let mut v = o.path.clone();
        v.push(b'/');
        v.extend_from_slice(p);
        let mut n = normalize(&v);
        if p.ends_with(b"/") {
            n.push(b'/');
        }
        return Route::Pool(n);
    } else {
        // A kernel directory descriptor: its path, from /proc (a directory above the prefix,
        // as find and rm -r open them, leads into the pool).
        let _b = Busy::new();
        let Ok(dir) = std::fs::read_link(format!("/proc/self/fd/{dirfd}")) else {
            return Route::Real;
        };
        let mut v = std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()).to_vec();
        if v.first() != Some(&b'/') {
            return Route::Real; // not a directory ("pipe:[...]", "anon_inode:...")
        }
        v.push(b'/');
        v.extend_from_slice(p);
        v
    };
    let n = normalize(&full);
    let rest = if n == c.prefix {
        b"/".to_vec()
    } else if n.starts_with(&c.prefix) && n[c.prefix.len()] == b'/' {
        n[c.prefix.len()..].to_vec()
    } else {
        return Route::Real;
    };
    let mut rest = rest;
    if matches!(last_component(p), b"." | b"..") {
        // "dir/." names dir lexically, but rmdir, unlink and rename refuse it (EINVAL): the
        // pool sees the dot.
        if rest != b"/" {
            rest.push(b'/');
        }
        rest.push(b'.');
    } else if p.ends_with(b"/") && rest != b"/" {
        rest.push(b'/'); // "file/" is ENOTDIR, as the kernel says
    }
    Route::Pool(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_dot_is_seen_and_not_kept() {
        assert_eq!(last_component(b"/a/b/."), b".");
        assert_eq!(last_component(b"a/..//"), b"..");
        assert_eq!(last_component(b"/"), b"");
        assert_eq!(last_component(b"a."), b"a.");
        assert_eq!(kept_path(b"/x/.".to_vec()), b"/x");
        assert_eq!(kept_path(b"/.".to_vec()), b"/");
        assert_eq!(kept_path(b"/x/a.".to_vec()), b"/x/a.");
        assert_eq!(kept_path(b"/x//".to_vec()), b"/x");
        assert_eq!(kept_path(b"/".to_vec()), b"/");
    }
}
