//! mmap(2) of pool files. `MAP_SHARED` maps the file's blocks on PM themselves (direct access,
//! `Posix::map_keep_size`; in a process a pool's server serves, the pool file mapped here at the
//! extents the session pins, `pmkit_fs_share`'s `views.rs`): stores through the mapping are the
//! file's bytes, so programs that share state through a mapped file (SQLite's WAL index, the
//! `-shm` file) work, in one process or several; the range's blocks stay put until `munmap` (a
//! truncate that would cut them is EBUSY). `MAP_PRIVATE` is a
//! private copy of the range, read when mapped, as the kernel gives for a file nobody changes
//! meanwhile. `MAP_FIXED` of a pool file is not served (EINVAL). Everything else is libc's.

use crate::state::{en, enter, lookup};
use pmkit_fs::posix::Fd;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Shared mappings of pool files alive: `munmap` and `msync` ask the pool only when there are
/// some (malloc unmaps often; it should not take the pool's lock each time).
static SHARED: AtomicUsize = AtomicUsize::new(0);

const PAGE: usize = 4096;

/// # Safety
/// mmap(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS == 0 {
        if let Some(o) = lookup(fd) {
            return enter(libc::MAP_FAILED, |p| {
                map_pool(p, o.fd, (len, prot, flags, off))
            });
        }
    }
    real!(mmap(addr, len, prot, flags, fd, off)
        as fn(
            *mut c_void,
            usize,
            c_int,
            c_int,
            c_int,
            i64,
        ) -> *mut c_void)
}

/// # Safety
/// mmap(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

fn map_pool(
    p: &dyn pmkit_fs_share::PoolApi,
    fd: Fd,
    (len, prot, flags, off): (usize, c_int, c_int, i64),
) -> Result<*mut c_void, c_int> {
    if len == 0 || off < 0 || !(off as usize).is_multiple_of(PAGE) || flags & libc::MAP_FIXED != 0 {
        return Err(libc::EINVAL);
    }
    let span = len.next_multiple_of(PAGE);
    match flags & libc::MAP_SHARED_VALIDATE {
        libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE => {
            let v = p.map_keep_size(fd, off as u64, span as u64).map_err(en)?;
            SHARED.fetch_add(1, Ordering::Relaxed);
            let ptr = v.ptr as *mut c_void;
            if prot & libc::PROT_WRITE == 0 {
                // SAFETY: the view is ours, `span` bytes long.
                unsafe { libc::mprotect(ptr, span, prot) };
            }
            Ok(ptr)
        }
        libc::MAP_PRIVATE => {
            let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            let rw = libc::PROT_READ | libc::PROT_WRITE;
            let m = real!(mmap(std::ptr::null_mut(), span, rw, anon, -1, 0)
                as fn(*mut c_void, usize, c_int, c_int, c_int, i64) -> *mut c_void);
            if m == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::ENOMEM));
            }
            // SAFETY: a fresh private mapping of `span` bytes, ours alone until returned.
            let buf = unsafe { pmkit_cabi::slice_mut(m.cast::<u8>(), span) };
            if let Err(e) = buf
                .ok_or(libc::EFAULT)
                .and_then(|b| p.pread(fd, b, off as u64).map_err(en))
            {
                // (libc's: our own `munmap` would take the pool again)
                real!(munmap(m, span) as fn(*mut c_void, usize) -> c_int);
                return Err(e);
            }
            // SAFETY: the same mapping.
            unsafe { libc::mprotect(m, span, prot) };
            Ok(m)
        }
        _ => Err(libc::EINVAL),
    }
}

/// # Safety
/// munmap(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    if SHARED.load(Ordering::Relaxed) > 0 {
        let ours = enter(false, |p| Ok(p.unmap(addr.cast()).is_ok()));
        if ours {
            SHARED.fetch_sub(1, Ordering::Relaxed);
            return 0;
        }
    }
    real!(munmap(addr, len) as fn(*mut c_void, usize) -> c_int)
}

/// # Safety
/// msync(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn msync(addr: *mut c_void, len: usize, flags: c_int) -> c_int {
    if SHARED.load(Ordering::Relaxed) > 0 {
        let ours = enter(false, |p| Ok(p.persist(addr.cast(), len).is_ok()));
        if ours {
            return 0;
        }
    }
    real!(msync(addr, len, flags) as fn(*mut c_void, usize, c_int) -> c_int)
}
