//! libpmfs, the C ABI of PMFS (`include/pmfs.h`): a PMFS pool used in place by one process through POSIX-shaped
//! calls (`pmfs_open`, `pmfs_pwrite`, `pmfs_stat`, ...) over [`Posix`]. Calls answer as the
//! system calls they mirror: -1 (or NULL) with `errno` set, and a message for `pmfs_errmsg()`.
//! A bad descriptor is EBADF, never undefined behaviour; panics are caught at the boundary
//! (EIO, "internal error").
//!
//! The process holds the pool exclusively (`flock`, as `pmkit fs mount` does): a second
//! `pmfs_mount` of it, here or in another process, or a FUSE mount, gets EBUSY.

use pmkit_cabi::Failure;
use pmkit_fs::posix::{self, Fd, FileFlag, Posix, Whence};
use pmkit_fs::{Attr, Error, Fs, MkfsOptions, MountOptions, RenameFlags};
use pmkit_media::{Region, RegionOptions};
use std::ffi::{c_char, c_int, c_void, CString};

/// Opaque to C: a mounted pool.
pub struct PmfsHandle {
    fs: Posix<Region>,
}

fn fail(e: Error) -> Failure {
    (e.errno(), e.to_string())
}

fn inval(msg: &str) -> Failure {
    (libc::EINVAL, msg.to_string())
}

/// Run `f` at the boundary: `Ok(v)` gives `v`; an error sets errno and the message and gives
/// `err`; a panic is EIO.
fn guard<T>(err: T, f: impl FnOnce() -> Result<T, Failure>) -> T {
    pmkit_cabi::call("libpmfs", libc::EIO, f).unwrap_or_else(|code| {
        // An errno value: positive, and within what `strerror` knows.
        debug_assert!(code > 0 && code < 4096, "errno {code}");
        pmkit_cabi::set_errno(code);
        err
    })
}

/// # Safety
/// `s` must be NULL or a NUL-terminated string.
unsafe fn cstr<'a>(s: *const c_char, what: &str) -> Result<&'a [u8], Failure> {
    // SAFETY: the caller's contract.
    unsafe { pmkit_cabi::bytes(s) }.ok_or_else(|| (libc::EFAULT, format!("{what} is NULL")))
}

/// # Safety
/// `p` must be NULL or a handle from `pmfs_mount` not yet unmounted.
unsafe fn handle<'a>(p: *mut PmfsHandle) -> Result<&'a Posix<Region>, Failure> {
    if p.is_null() {
        return Err(inval("the file system handle is NULL"));
    }
    // SAFETY: not NULL (checked) and mounted (the caller's contract) until `pmfs_unmount`.
    Ok(unsafe { &(*p).fs })
}

fn fd(n: c_int) -> Result<Fd, Failure> {
    u32::try_from(n)
        .map(Fd)
        .map_err(|_| fail(Error::BadFd(u32::MAX)))
}

/// The message of the calling thread's last error (valid until its next failing call).
#[no_mangle]
pub extern "C" fn pmfs_errmsg() -> *const c_char {
    pmkit_cabi::message()
}

/// Make a file system on the file `path` (created with `size` bytes if missing; an existing
/// file keeps its size). `inodes` 0 takes the default.
///
/// # Safety
/// `path` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_mkfs(path: *const c_char, size: u64, inodes: u32) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let p = path_of(unsafe { cstr(path, "path") }?);
        let opts = RegionOptions::default();
        let region = if p.exists() {
            Region::open(p, &opts)
        } else {
            Region::create(p, size, &opts)
        }
        .map_err(|e| (libc::EIO, format!("{}: {e}", p.display())))?;
        let mut o = MkfsOptions::default();
        if inodes > 0 {
            o.inodes = inodes;
        }
        Fs::mkfs(&region, &o).map_err(fail)?;
        Ok(0)
    })
}

/// A path from C bytes (paths are bytes on Unix).
fn path_of(b: &[u8]) -> &std::path::Path {
    std::path::Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b))
}

/// Mount the pool at `path` for this process: NULL and errno on failure (EBUSY: in use by
/// another process or mount). The environment sets the mount options
/// ([`MountOptions::from_env`]: `PMFS_PROTECT`, `PMFS_BARRIER_NS`, `PMFS_FULL_WALK`).
///
/// # Safety
/// `path` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_mount(path: *const c_char) -> *mut PmfsHandle {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let p = path_of(unsafe { cstr(path, "path") }?);
        let o = MountOptions::from_env().map_err(|e| inval(&e))?;
        let region = Region::open(p, &RegionOptions::default())
            .map_err(|e| (libc::EIO, format!("{}: {e}", p.display())))?;
        region.claim(true).map_err(|e| match e {
            pmkit_media::MediaError::InUse { .. } => (libc::EBUSY, e.to_string()),
            e => (libc::EIO, e.to_string()),
        })?;
        let (fs, _) = Fs::mount(region, &o).map_err(fail)?;
        Ok(Box::into_raw(Box::new(PmfsHandle { fs: Posix::new(fs) })))
    })
}

/// Close every descriptor, unmount (the pool is marked clean) and free the handle.
///
/// # Safety
/// `fs` must be NULL or a handle from `pmfs_mount`, not used again after this call.
#[no_mangle]
pub unsafe extern "C" fn pmfs_unmount(fs: *mut PmfsHandle) -> c_int {
    guard(-1, || {
        if fs.is_null() {
            return Err(inval("the file system handle is NULL"));
        }
        // SAFETY: a handle from `pmfs_mount` (the caller's contract), given back once.
        let h = unsafe { Box::from_raw(fs) };
        drop(h.fs.unmount());
        Ok(0)
    })
}

/// open(2) on the pool: a descriptor of this pool (not a kernel one), or -1.
///
/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_open(
    fs: *mut PmfsHandle,
    path: *const c_char,
    flags: c_int,
    mode: u32,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, p) = unsafe { (handle(fs)?, cstr(path, "path")?) };
        let f = h.open(p, flags, mode).map_err(fail)?;
        Ok(f.0 as c_int)
    })
}

/// # Safety
/// `fs` a mounted handle.
#[no_mangle]
pub unsafe extern "C" fn pmfs_close(fs: *mut PmfsHandle, d: c_int) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        unsafe { handle(fs) }?.close(fd(d)?).map_err(fail)?;
        Ok(0)
    })
}

/// # Safety
/// `buf` must be NULL with `n` 0, or valid for `n` bytes, owned by the caller (never PM) and
/// used by no one else during the call.
unsafe fn out_buf<'a>(buf: *mut c_void, n: usize) -> Result<&'a mut [u8], Failure> {
    // SAFETY: the caller's contract.
    unsafe { pmkit_cabi::slice_mut(buf.cast::<u8>(), n) }
        .ok_or_else(|| (libc::EFAULT, "buf is NULL".into()))
}

/// # Safety
/// As [`out_buf`], for reads: not written during the call.
unsafe fn in_buf<'a>(buf: *const c_void, n: usize) -> Result<&'a [u8], Failure> {
    // SAFETY: the caller's contract.
    unsafe { pmkit_cabi::slice(buf.cast::<u8>(), n) }
        .ok_or_else(|| (libc::EFAULT, "buf is NULL".into()))
}

/// # Safety
/// `fs` a mounted handle; `buf` valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn pmfs_read(
    fs: *mut PmfsHandle,
    d: c_int,
    buf: *mut c_void,
    n: usize,
) -> isize {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, b) = unsafe { (handle(fs)?, out_buf(buf, n)?) };
        Ok(h.read(fd(d)?, b).map_err(fail)? as isize)
    })
}

/// # Safety
/// `fs` a mounted handle; `buf` valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn pmfs_pread(
    fs: *mut PmfsHandle,
    d: c_int,
    buf: *mut c_void,
    n: usize,
    off: i64,
) -> isize {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, b) = unsafe { (handle(fs)?, out_buf(buf, n)?) };
        let off = u64::try_from(off).map_err(|_| inval("negative offset"))?;
        Ok(h.pread(fd(d)?, b, off).map_err(fail)? as isize)
    })
}

/// # Safety
/// `fs` a mounted handle; `buf` valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn pmfs_write(
    fs: *mut PmfsHandle,
    d: c_int,
    buf: *const c_void,
    n: usize,
) -> isize {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, b) = unsafe { (handle(fs)?, in_buf(buf, n)?) };
        Ok(h.write(fd(d)?, b).map_err(fail)? as isize)
    })
}

/// # Safety
/// `fs` a mounted handle; `buf` valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn pmfs_pwrite(
    fs: *mut PmfsHandle,
    d: c_int,
    buf: *const c_void,
    n: usize,
    off: i64,
) -> isize {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, b) = unsafe { (handle(fs)?, in_buf(buf, n)?) };
        let off = u64::try_from(off).map_err(|_| inval("negative offset"))?;
        Ok(h.pwrite(fd(d)?, b, off).map_err(fail)? as isize)
    })
}

/// # Safety
/// `fs` a mounted handle.
#[no_mangle]
pub unsafe extern "C" fn pmfs_lseek(fs: *mut PmfsHandle, d: c_int, off: i64, whence: c_int) -> i64 {
    guard(-1, || {
        let w = match whence {
            libc::SEEK_SET => Whence::Set,
            libc::SEEK_CUR => Whence::Cur,
            libc::SEEK_END => Whence::End,
            _ => return Err(inval("whence is not SEEK_SET, SEEK_CUR or SEEK_END")),
        };
        // SAFETY: the caller's contract.
        let h = unsafe { handle(fs) }?;
        Ok(h.lseek(fd(d)?, off, w).map_err(fail)? as i64)
    })
}

/// fsync(2) and fdatasync(2): writes are durable when they return; nothing left to do.
///
/// # Safety
/// `fs` a mounted handle.
#[no_mangle]
pub unsafe extern "C" fn pmfs_fsync(fs: *mut PmfsHandle, d: c_int) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        unsafe { handle(fs) }?.fsync(fd(d)?).map_err(fail)?;
        Ok(0)
    })
}

/// # Safety
/// `fs` a mounted handle.
#[no_mangle]
pub unsafe extern "C" fn pmfs_ftruncate(fs: *mut PmfsHandle, d: c_int, len: i64) -> c_int {
    guard(-1, || {
        let len = u64::try_from(len).map_err(|_| inval("negative length"))?;
        // SAFETY: the caller's contract.
        unsafe { handle(fs) }?
            .ftruncate(fd(d)?, len)
            .map_err(fail)?;
        Ok(0)
    })
}

/// # Safety
/// `st` must be NULL or valid for writing one `struct stat`.
unsafe fn stat_out(a: Attr, st: *mut libc::stat) -> Result<c_int, Failure> {
    if st.is_null() {
        return Err((libc::EFAULT, "st is NULL".into()));
    }
    // SAFETY: not NULL (checked) and valid for one write (the caller's contract).
    unsafe { st.write(posix::stat_of(&a)) };
    Ok(0)
}

/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string; `st` valid for one `struct stat`.
#[no_mangle]
pub unsafe extern "C" fn pmfs_stat(
    fs: *mut PmfsHandle,
    path: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, p) = unsafe { (handle(fs)?, cstr(path, "path")?) };
        let a = h.stat(p).map_err(fail)?;
        // SAFETY: the caller's contract.
        unsafe { stat_out(a, st) }
    })
}

/// # Safety
/// As [`pmfs_stat`].
#[no_mangle]
pub unsafe extern "C" fn pmfs_lstat(
    fs: *mut PmfsHandle,
    path: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, p) = unsafe { (handle(fs)?, cstr(path, "path")?) };
        let a = h.lstat(p).map_err(fail)?;
        // SAFETY: the caller's contract.
        unsafe { stat_out(a, st) }
    })
}

/// # Safety
/// `fs` a mounted handle; `st` valid for one `struct stat`.
#[no_mangle]
pub unsafe extern "C" fn pmfs_fstat(fs: *mut PmfsHandle, d: c_int, st: *mut libc::stat) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let a = unsafe { handle(fs) }?.fstat(fd(d)?).map_err(fail)?;
        // SAFETY: the caller's contract.
        unsafe { stat_out(a, st) }
    })
}

/// One path argument, one call of `Posix`.
///
/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
unsafe fn on_path(
    fs: *mut PmfsHandle,
    path: *const c_char,
    f: impl FnOnce(&Posix<Region>, &[u8]) -> pmkit_fs::Result<()>,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, p) = unsafe { (handle(fs)?, cstr(path, "path")?) };
        f(h, p).map_err(fail)?;
        Ok(0)
    })
}

/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_mkdir(fs: *mut PmfsHandle, path: *const c_char, mode: u32) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { on_path(fs, path, |h, p| h.mkdir(p, mode).map(drop)) }
}

/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_rmdir(fs: *mut PmfsHandle, path: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { on_path(fs, path, |h, p| h.rmdir(p)) }
}

/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_unlink(fs: *mut PmfsHandle, path: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { on_path(fs, path, |h, p| h.unlink(p)) }
}

/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_truncate(
    fs: *mut PmfsHandle,
    path: *const c_char,
    len: i64,
) -> c_int {
    let Ok(len) = u64::try_from(len) else {
        return guard(-1, || Err(inval("negative length")));
    };
    // SAFETY: the caller's contract.
    unsafe { on_path(fs, path, |h, p| h.truncate(p, len)) }
}

/// Two path arguments, one call of `Posix`.
///
/// # Safety
/// `fs` a mounted handle; `a` and `b` NUL-terminated strings.
unsafe fn on_paths(
    fs: *mut PmfsHandle,
    a: *const c_char,
    b: *const c_char,
    f: impl FnOnce(&Posix<Region>, &[u8], &[u8]) -> pmkit_fs::Result<()>,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, a, b) = unsafe { (handle(fs)?, cstr(a, "path")?, cstr(b, "path")?) };
        f(h, a, b).map_err(fail)?;
        Ok(0)
    })
}

/// # Safety
/// `fs` a mounted handle; `from` and `to` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pmfs_rename(
    fs: *mut PmfsHandle,
    from: *const c_char,
    to: *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { on_paths(fs, from, to, |h, a, b| h.rename(a, b, RenameFlags::Replace)) }
}

/// # Safety
/// `fs` a mounted handle; `old` and `new` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pmfs_link(
    fs: *mut PmfsHandle,
    old: *const c_char,
    new: *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { on_paths(fs, old, new, |h, a, b| h.link(a, b).map(drop)) }
}

/// # Safety
/// `fs` a mounted handle; `target` and `path` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pmfs_symlink(
    fs: *mut PmfsHandle,
    target: *const c_char,
    path: *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { on_paths(fs, target, path, |h, t, p| h.symlink(t, p).map(drop)) }
}

/// A directory entry's callback: `name` NUL-terminated, valid during the call; a non-zero
/// return stops the listing.
pub type PmfsDirCallback =
    unsafe extern "C" fn(ctx: *mut c_void, name: *const c_char, ino: u64, d_type: u8) -> c_int;

/// readdir: `cb` for every entry of the directory at `path` (`.` and `..` first), until it
/// returns non-zero. 0, or -1 and errno.
///
/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string; `cb` callable with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn pmfs_readdir(
    fs: *mut PmfsHandle,
    path: *const c_char,
    cb: Option<PmfsDirCallback>,
    ctx: *mut c_void,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, p) = unsafe { (handle(fs)?, cstr(path, "path")?) };
        let cb = cb.ok_or_else(|| inval("the callback is NULL"))?;
        for e in h.readdir(p).map_err(fail)? {
            let name = CString::new(e.name).map_err(|_| inval("a name holds NUL"))?;
            // SAFETY: the caller's callback and context; `name` lives across the call.
            if unsafe { cb(ctx, name.as_ptr(), e.ino, posix::d_type(e.kind)) } != 0 {
                break;
            }
        }
        Ok(0)
    })
}

/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_chmod(fs: *mut PmfsHandle, path: *const c_char, mode: u32) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { on_path(fs, path, |h, p| h.chmod(p, mode)) }
}

/// chown(2): `(uint32_t)-1` leaves an id unchanged.
///
/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_chown(
    fs: *mut PmfsHandle,
    path: *const c_char,
    uid: u32,
    gid: u32,
) -> c_int {
    let id = |v: u32| (v != u32::MAX).then_some(v);
    // SAFETY: the caller's contract.
    unsafe { on_path(fs, path, |h, p| h.chown(p, id(uid), id(gid), true)) }
}

/// utimensat(2)'s times: NULL sets both to now; `UTIME_NOW` and `UTIME_OMIT` per entry.
///
/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string; `times` NULL or two timespecs.
#[no_mangle]
pub unsafe extern "C" fn pmfs_utimens(
    fs: *mut PmfsHandle,
    path: *const c_char,
    times: *const libc::timespec,
) -> c_int {
    // SAFETY: NULL, or two timespecs (the caller's contract).
    let times = (!times.is_null()).then(|| unsafe { [*times, *times.add(1)] });
    // SAFETY: the caller's contract.
    unsafe { on_path(fs, path, |h, p| h.utimensat(p, times, true)) }
}

/// access(2): `mode` a mix of `R_OK`, `W_OK`, `X_OK`, or `F_OK`; checked against the
/// credentials given to `pmfs_set_cred` (with none, only existence).
///
/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_access(
    fs: *mut PmfsHandle,
    path: *const c_char,
    mode: c_int,
) -> c_int {
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return guard(-1, || Err(inval("mode is not a mix of R_OK, W_OK, X_OK")));
    }
    // SAFETY: the caller's contract.
    unsafe { on_path(fs, path, |h, p| h.access(p, mode as u32, true)) }
}

/// Check every later call's permissions for this user, group and supplementary groups, as the
/// kernel would for a process with them (`groups` NULL when `n` is 0). Until called, or after
/// `pmfs_clear_cred`, nothing is checked.
///
/// # Safety
/// `fs` a mounted handle; `groups` valid for `n` ids.
#[no_mangle]
pub unsafe extern "C" fn pmfs_set_cred(
    fs: *mut PmfsHandle,
    uid: u32,
    gid: u32,
    groups: *const u32,
    n: usize,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(fs)? };
        if n > posix::MAX_GROUPS || (n > 0 && groups.is_null()) {
            return Err(inval("groups: NULL, or more than 65536"));
        }
        let mut g = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: `i < n` ids are readable (the caller's contract).
            g.push(unsafe { groups.add(i).read_unaligned() });
        }
        h.set_cred(Some(posix::Cred::new(uid, gid, g)));
        Ok(0)
    })
}

/// Stop checking permissions (the default).
///
/// # Safety
/// `fs` a mounted handle.
#[no_mangle]
pub unsafe extern "C" fn pmfs_clear_cred(fs: *mut PmfsHandle) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        unsafe { handle(fs)? }.set_cred(None);
        Ok(0)
    })
}

/// readlink(2): the target's bytes (not NUL-terminated, cut at `n`), their count, or -1.
///
/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string; `buf` valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn pmfs_readlink(
    fs: *mut PmfsHandle,
    path: *const c_char,
    buf: *mut c_char,
    n: usize,
) -> isize {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, p, b) = unsafe { (handle(fs)?, cstr(path, "path")?, out_buf(buf.cast(), n)?) };
        let t = h.readlink(p).map_err(fail)?;
        let k = t.len().min(b.len());
        b[..k].copy_from_slice(&t[..k]);
        Ok(k as isize)
    })
}

/// Map file bytes `[off, off + len)` of `fd` (open read-write) for direct access (XIP): the
/// address of a view of the file's PM, or NULL and errno. See `Posix::map` for the rules.
///
/// # Safety
/// `fs` a mounted handle.
#[no_mangle]
pub unsafe extern "C" fn pmfs_map(
    fs: *mut PmfsHandle,
    d: c_int,
    off: i64,
    len: usize,
) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        let off = u64::try_from(off).map_err(|_| inval("negative offset"))?;
        // SAFETY: the caller's contract.
        let v = unsafe { handle(fs) }?
            .map(fd(d)?, off, len as u64)
            .map_err(fail)?;
        Ok(v.ptr.cast())
    })
}

/// Make `[p, p + len)` of a mapped range durable (flush and fence).
///
/// # Safety
/// `fs` a mounted handle.
#[no_mangle]
pub unsafe extern "C" fn pmfs_persist(fs: *mut PmfsHandle, p: *const c_void, len: usize) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        unsafe { handle(fs) }?
            .persist(p.cast(), len)
            .map_err(fail)?;
        Ok(0)
    })
}

/// Unmap the range `pmfs_map` returned at `p`.
///
/// # Safety
/// `fs` a mounted handle; no pointer into the range is used afterwards.
#[no_mangle]
pub unsafe extern "C" fn pmfs_unmap(fs: *mut PmfsHandle, p: *mut c_void) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        unsafe { handle(fs) }?.unmap(p.cast()).map_err(fail)?;
        Ok(0)
    })
}

/// The bytes of the range `pmfs_map` returned at `p` that are whole 2 MiB blocks at 2 MiB-
/// aligned addresses (the kernel may map them with 2 MiB pages; the rest takes 4 KiB pages),
/// or -1.
///
/// # Safety
/// `fs` a mounted handle.
#[no_mangle]
pub unsafe extern "C" fn pmfs_map_huge_bytes(fs: *mut PmfsHandle, p: *const c_void) -> i64 {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let parts = unsafe { handle(fs) }?.map_parts(p.cast()).map_err(fail)?;
        Ok(parts.iter().map(|&(_, l)| l as i64).sum())
    })
}

/// Ask for 2 MiB blocks for the regular file at `path` (`on` non-zero) or stop asking (see
/// `Fs::set_huge`): 0, or -1 and errno (EISDIR, EINVAL for other kinds).
///
/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_set_huge(
    fs: *mut PmfsHandle,
    path: *const c_char,
    on: c_int,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, p) = unsafe { (handle(fs)?, cstr(path, "path")?) };
        set_file_flag(h, p, FileFlag::Huge, on)
    })
}

/// Set or clear per-file flag `f` of the regular file at `path` (a symlink followed).
fn set_file_flag(h: &Posix<Region>, path: &[u8], f: FileFlag, on: c_int) -> Result<c_int, Failure> {
    h.set_flag(path, true, f, on != 0).map_err(fail)?;
    // the flag reads back as set (one transaction, under the inode's lock)
    debug_assert_eq!(h.flag(path, true, f).ok().flatten(), Some(on != 0));
    Ok(0)
}

/// Per-file flag `f` of the regular file at `path`: 1 or 0; EINVAL for other kinds.
fn file_flag(h: &Posix<Region>, path: &[u8], f: FileFlag) -> Result<c_int, Failure> {
    match h.flag(path, true, f).map_err(fail)? {
        Some(on) => Ok(on as c_int),
        None => Err(inval("only regular files have per-file flags")),
    }
}

/// Give the regular file at `path` data checksums (`on` non-zero) or drop them (see
/// `Fs::set_sums`): 0, or -1 and errno (EISDIR, EINVAL for other kinds and for a mapped file,
/// EOPNOTSUPP on a pool made before format 6).
///
/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_set_checksum(
    fs: *mut PmfsHandle,
    path: *const c_char,
    on: c_int,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, p) = unsafe { (handle(fs)?, cstr(path, "path")?) };
        set_file_flag(h, p, FileFlag::Checksum, on)
    })
}

/// Whether the regular file at `path` has data checksums: 1, 0, or -1 and errno (EINVAL for a
/// file of another kind).
///
/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_checksum(fs: *mut PmfsHandle, path: *const c_char) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, p) = unsafe { (handle(fs)?, cstr(path, "path")?) };
        file_flag(h, p, FileFlag::Checksum)
    })
}

/// Whether the regular file at `path` asks for 2 MiB blocks: 1, 0, or -1 and errno (EINVAL
/// for a file of another kind).
///
/// # Safety
/// `fs` a mounted handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmfs_huge(fs: *mut PmfsHandle, path: *const c_char) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract.
        let (h, p) = unsafe { (handle(fs)?, cstr(path, "path")?) };
        file_flag(h, p, FileFlag::Huge)
    })
}
