//! libpmo, the C ABI of PMO (`include/pmo.h`): a pool on a file or device-dax device, objects by name, handles
//! as numbers. Every function returns 0 or a negative `PMO_E*` code and leaves a message for
//! `pmo_errmsg()`; a stale handle gives `PMO_EBADF`, never undefined behaviour. Panics are
//! caught at the boundary (they become `PMO_EINTERNAL`).

use pmkit_cabi::Failure;
use pmkit_media::{Region, RegionOptions};
use pmkit_obj::{Access, ObjError, Pool, PoolOptions, Shadow, Tracking};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

pub const PMO_OK: c_int = 0;
pub const PMO_EINVAL: c_int = -1;
pub const PMO_ENAMETOOLONG: c_int = -2;
pub const PMO_EEXIST: c_int = -3;
pub const PMO_ENOENT: c_int = -4;
pub const PMO_ENOSPC: c_int = -5;
pub const PMO_EBUSY: c_int = -6;
pub const PMO_EBADF: c_int = -7;
pub const PMO_EROFS: c_int = -8;
pub const PMO_ECORRUPT: c_int = -9;
pub const PMO_ENOTPOOL: c_int = -10;
pub const PMO_EIO: c_int = -11;
pub const PMO_EINTERNAL: c_int = -12;

pub const PMO_READ: c_int = 1;
pub const PMO_RDWR: c_int = 2;
/// Flag for `pmo_attach`'s mode: track writes through the pointer by `pmo_mark_dirty` instead
/// of page faults.
pub const PMO_EXPLICIT: c_int = 4;

/// Opaque to C.
pub struct PmoPool {
    pool: Pool<Region>,
}

fn code(e: &ObjError) -> c_int {
    match e {
        // The C ABI has no PMO_ENOMEM: a refused mapping is reported like media that cannot
        // be mapped, with the OS's reason in the message.
        // A media error (poisoned PM) is EIO too: the message names what cannot be read.
        // So is a data checksum mismatch: the media returned the wrong bytes.
        ObjError::Media(_)
        | ObjError::Resource { .. }
        | ObjError::BadMedia { .. }
        | ObjError::Checksum { .. } => PMO_EIO,
        ObjError::NotAPool(_) => PMO_ENOTPOOL,
        ObjError::Corrupt(_) => PMO_ECORRUPT,
        ObjError::BadArgument(_)
        | ObjError::BadName { .. }
        | ObjError::OutOfBounds { .. }
        | ObjError::TooMany { .. }
        | ObjError::Duplicate { .. } => PMO_EINVAL,
        ObjError::NameTooLong { .. } => PMO_ENAMETOOLONG,
        ObjError::Exists { .. } => PMO_EEXIST,
        ObjError::NotFound { .. } => PMO_ENOENT,
        ObjError::PoolFull { .. }
        | ObjError::TableFull { .. }
        | ObjError::TooManyHandles { .. } => PMO_ENOSPC,
        ObjError::Busy { .. } => PMO_EBUSY,
        ObjError::NotAttached { .. } => PMO_EBADF,
        ObjError::ReadOnly { .. } | ObjError::NeedsRecovery { .. } => PMO_EROFS,
    }
}

/// Run `f` at the boundary: errors become codes + message, panics become `PMO_EINTERNAL`.
fn guard(f: impl FnOnce() -> Result<(), Failure>) -> c_int {
    pmkit_cabi::call("libpmo", PMO_EINTERNAL, f).map_or_else(
        |code| {
            // pmo.h's codes: every failure is one of the negative PMO_E* values.
            debug_assert!((PMO_EINTERNAL..PMO_OK).contains(&code), "code {code}");
            code
        },
        |()| PMO_OK,
    )
}

fn obj(e: ObjError) -> Failure {
    (code(&e), e.to_string())
}

fn inval(msg: &str) -> Failure {
    (PMO_EINVAL, msg.to_string())
}

/// # Safety
/// `s` must be NULL or a NUL-terminated string.
unsafe fn cstr<'a>(s: *const c_char, what: &str) -> Result<&'a str, Failure> {
    // SAFETY: the caller's contract.
    let b = unsafe { pmkit_cabi::bytes(s) }.ok_or_else(|| inval(&format!("{what} is NULL")))?;
    std::str::from_utf8(b).map_err(|_| inval(&format!("{what} is not UTF-8")))
}

/// # Safety
/// `p` must be NULL or a pool from `pmo_pool_create`/`pmo_pool_open` not yet closed.
unsafe fn pool<'a>(p: *mut PmoPool) -> Result<&'a Pool<Region>, Failure> {
    if p.is_null() {
        return Err(inval("pool is NULL"));
    }
    // SAFETY: `p` is not NULL (checked) and an open pool (the caller's contract), which lives
    // until `pmo_pool_close`, after which the caller may not pass it.
    Ok(unsafe { &(*p).pool })
}

/// The message of the calling thread's last error (valid until its next failing call).
#[no_mangle]
pub extern "C" fn pmo_errmsg() -> *const c_char {
    pmkit_cabi::message()
}

/// Pool options from the environment: `PMO_SHADOW=dram` (default) or `pm` (the thesis's
/// shadow slot in PM) picks where shadows live (the on-media layout is the same either way);
/// `PMO_PKEY=on` (default) or `off` picks protection keys or not (`PoolOptions::pkey`);
/// `PMO_KERNEL=on` (default) or `off`: without keys, PM read-only and synced through the kernel,
/// or page rights (`PoolOptions::kernel`); `PMO_CHECKSUM=on` or `off` (default) gives a pool being
/// created a CRC32C per page (`PoolOptions::checksum`; an existing pool keeps what its header says).
fn options_from_env() -> Result<PoolOptions, Failure> {
    let shadow = match std::env::var("PMO_SHADOW").as_deref() {
        Err(_) | Ok("") | Ok("dram") => Shadow::Dram,
        Ok("pm") => Shadow::Pm,
        Ok(other) => {
            return Err(inval(&format!(
                "PMO_SHADOW={other:?}: expected \"dram\" or \"pm\""
            )))
        }
    };
    let pkey = match std::env::var("PMO_PKEY").as_deref() {
        Err(_) | Ok("") | Ok("on") => true,
        Ok("off") => false,
        Ok(other) => {
            return Err(inval(&format!(
                "PMO_PKEY={other:?}: expected \"on\" or \"off\""
            )))
        }
    };
    let kernel = match std::env::var("PMO_KERNEL").as_deref() {
        Err(_) | Ok("") | Ok("on") => true,
        Ok("off") => false,
        Ok(other) => {
            return Err(inval(&format!(
                "PMO_KERNEL={other:?}: expected \"on\" or \"off\""
            )))
        }
    };
    let checksum = match std::env::var("PMO_CHECKSUM").as_deref() {
        Err(_) | Ok("") | Ok("off") => false,
        Ok("on") => true,
        Ok(other) => {
            return Err(inval(&format!(
                "PMO_CHECKSUM={other:?}: expected \"on\" or \"off\""
            )))
        }
    };
    Ok(PoolOptions {
        shadow,
        pkey,
        kernel,
        checksum,
        ..PoolOptions::default()
    })
}

fn open_pool(path: *const c_char, create: Option<(u64, u32)>, out: *mut *mut PmoPool) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(inval("out is NULL"));
        }
        // SAFETY: the C caller passes a NUL-terminated path (checked for NULL).
        let path = Path::new(unsafe { cstr(path, "path")? });
        let ro = RegionOptions::default();
        let env = options_from_env()?;
        let pool = match create {
            Some((size, max_objects)) => {
                let region = Region::open_or_create(path, size, &ro)
                    .map_err(|e| (PMO_EIO, format!("{}: {e}", path.display())))?;
                let opts = PoolOptions { max_objects, ..env };
                Pool::format(region, &opts).map_err(obj)?
            }
            None => {
                let region = Region::open(path, &ro)
                    .map_err(|e| (PMO_EIO, format!("{}: {e}", path.display())))?;
                Pool::open(region, &env).map_err(obj)?.0
            }
        };
        // SAFETY: out checked for NULL above.
        unsafe { *out = Box::into_raw(Box::new(PmoPool { pool })) };
        Ok(())
    })
}

/// Create (format) a pool of `size` bytes at `path` with room for `max_objects` objects.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn pmo_pool_create(
    path: *const c_char,
    size: u64,
    max_objects: u32,
    out: *mut *mut PmoPool,
) -> c_int {
    open_pool(path, Some((size, max_objects)), out)
}

/// Open a pool (running recovery).
///
/// # Safety
/// As for [`pmo_pool_create`].
#[no_mangle]
pub unsafe extern "C" fn pmo_pool_open(path: *const c_char, out: *mut *mut PmoPool) -> c_int {
    open_pool(path, None, out)
}

/// Close a pool; attached handles are detached (unsynced writes dropped).
///
/// # Safety
/// `p` is NULL or an open pool; it must not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn pmo_pool_close(p: *mut PmoPool) {
    if !p.is_null() {
        // SAFETY: `p` came from `Box::into_raw` in `open_pool` and is closed once (the caller's
        // contract), so the box is reclaimed exactly once.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(p) })));
    }
}

/// # Safety
/// `p` an open pool, `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmo_create(p: *mut PmoPool, name: *const c_char, size: u64) -> c_int {
    guard(|| {
        // SAFETY: `p` is an open pool and `name` a C string (the caller's contract).
        let (pool, name) = unsafe { (pool(p)?, cstr(name, "name")?) };
        pool.create(name, size).map_err(obj)
    })
}

/// # Safety
/// As for [`pmo_create`].
#[no_mangle]
pub unsafe extern "C" fn pmo_delete(p: *mut PmoPool, name: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: `p` is an open pool and `name` a C string (the caller's contract).
        let (pool, name) = unsafe { (pool(p)?, cstr(name, "name")?) };
        pool.delete(name).map_err(obj)
    })
}

/// Attach `name` with `mode` `PMO_READ` or `PMO_RDWR`; the handle goes to `*out`. Writes
/// through `pmo_ptr` are tracked by page faults (no need to declare them), or, with
/// `PMO_RDWR | PMO_EXPLICIT`, only as declared with `pmo_mark_dirty` (no fault per page).
///
/// # Safety
/// `p` an open pool, `name` a NUL-terminated string, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn pmo_attach(
    p: *mut PmoPool,
    name: *const c_char,
    mode: c_int,
    out: *mut u64,
) -> c_int {
    guard(|| {
        let (access, tracking) = match mode {
            PMO_READ => (Access::Read, Tracking::Auto),
            PMO_RDWR => (Access::ReadWrite, Tracking::Auto),
            m if m == PMO_RDWR | PMO_EXPLICIT => (Access::ReadWrite, Tracking::Explicit),
            m => {
                return Err(inval(&format!(
                    "mode {m} is none of PMO_READ (1), PMO_RDWR (2), PMO_RDWR | PMO_EXPLICIT (6)"
                )))
            }
        };
        if out.is_null() {
            return Err(inval("out is NULL"));
        }
        // SAFETY: `p` is an open pool and `name` a C string (the caller's contract).
        let (pool, name) = unsafe { (pool(p)?, cstr(name, "name")?) };
        let id = pool.attach_id(name, access, tracking).map_err(obj)?;
        // SAFETY: `out` is not NULL (checked) and writable (the caller's contract).
        unsafe { *out = id };
        Ok(())
    })
}

/// Address of the handle's view (the shadow for `PMO_RDWR`), valid until the handle's next
/// `pmo_sync` or `pmo_detach`; NULL on error.
///
/// # Safety
/// `p` an open pool.
#[no_mangle]
pub unsafe extern "C" fn pmo_ptr(p: *mut PmoPool, h: u64) -> *mut c_void {
    let mut r = std::ptr::null_mut();
    guard(|| {
        // SAFETY: `p` is an open pool (the caller's contract).
        r = unsafe { pool(p)? }
            .ptr_id(h)
            .map_err(obj)?
            .ok_or_else(|| inval("media has no addresses"))?
            .cast();
        Ok(())
    });
    r
}

/// Size in bytes of the attached object (0 on error).
///
/// # Safety
/// `p` an open pool.
#[no_mangle]
pub unsafe extern "C" fn pmo_size(p: *mut PmoPool, h: u64) -> u64 {
    let mut n = 0;
    guard(|| {
        // SAFETY: `p` is an open pool (the caller's contract).
        n = unsafe { pool(p)? }.info_id(h).map_err(obj)?.1;
        Ok(())
    });
    n
}

/// Copy out of the handle's view.
///
/// # Safety
/// `p` an open pool; `buf` valid for `len` bytes of writes, and not read or written by anyone
/// else during the call.
#[no_mangle]
pub unsafe extern "C" fn pmo_read(
    p: *mut PmoPool,
    h: u64,
    off: u64,
    buf: *mut c_void,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: `buf` is valid for `len` bytes of writes and not accessed by anyone else
        // during the call (the caller's contract); the caller's own memory, never PM.
        let dst = unsafe { pmkit_cabi::slice_mut(buf.cast::<u8>(), len) }
            .ok_or_else(|| inval("buf is NULL"))?;
        // SAFETY: `p` is an open pool (the caller's contract).
        unsafe { pool(p)? }.read_id(h, off, dst).map_err(obj)
    })
}

/// Copy into the handle's shadow.
///
/// # Safety
/// `p` an open pool; `buf` valid for `len` bytes of reads, and not written concurrently
/// during the call.
#[no_mangle]
pub unsafe extern "C" fn pmo_write(
    p: *mut PmoPool,
    h: u64,
    off: u64,
    buf: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: `buf` is valid for `len` bytes of reads and not written during the call
        // (the caller's contract).
        let src = unsafe { pmkit_cabi::slice(buf.cast::<u8>(), len) }
            .ok_or_else(|| inval("buf is NULL"))?;
        // SAFETY: `p` is an open pool (the caller's contract).
        unsafe { pool(p)? }.write_id(h, off, src).map_err(obj)
    })
}

/// Declare `[off, off+len)` written through the pointer (a `PMO_EXPLICIT` attachment syncs only
/// declared pages; with fault tracking this is harmless).
///
/// # Safety
/// `p` an open pool.
#[no_mangle]
pub unsafe extern "C" fn pmo_mark_dirty(p: *mut PmoPool, h: u64, off: u64, len: u64) -> c_int {
    // SAFETY: `p` is an open pool (the caller's contract).
    guard(|| unsafe { pool(p)? }.mark_dirty_id(h, off, len).map_err(obj))
}

/// Publish the writes of `n` handles atomically.
///
/// # Safety
/// `p` an open pool; `hs` valid for `n` handles, and not written concurrently during the
/// call.
#[no_mangle]
pub unsafe extern "C" fn pmo_sync(p: *mut PmoPool, hs: *const u64, n: usize) -> c_int {
    guard(|| {
        // SAFETY: `hs` is valid for `n` handles and not written during the call (the
        // caller's contract).
        let ids = unsafe { pmkit_cabi::slice(hs, n) }.ok_or_else(|| inval("handles is NULL"))?;
        // SAFETY: `p` is an open pool (the caller's contract).
        unsafe { pool(p)? }.sync_ids(ids).map_err(obj)
    })
}

/// Detach (unsynced writes are dropped; the view becomes inaccessible).
///
/// # Safety
/// `p` an open pool.
#[no_mangle]
pub unsafe extern "C" fn pmo_detach(p: *mut PmoPool, h: u64) -> c_int {
    // SAFETY: `p` is an open pool (the caller's contract).
    guard(|| unsafe { pool(p)? }.detach_id(h).map_err(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_media_error_is_pmo_eio() {
        let bad = ObjError::BadMedia {
            what: "object \"a\" (slot 0)".into(),
            media_off: 0x2000,
        };
        assert_eq!(code(&bad), PMO_EIO);
        let sum = ObjError::Checksum {
            object: "a".into(),
            slot: 1,
            page: 3,
            stored: 1,
            computed: 2,
        };
        assert_eq!(code(&sum), PMO_EIO);
    }
}
