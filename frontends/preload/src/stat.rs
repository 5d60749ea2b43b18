//! Attributes as the kernel reports them: `struct stat` and `struct statx`.

use pmkit_fs::posix::{secs, stat_of, type_bits};
use pmkit_fs::Attr;
use std::ffi::c_int;

/// The device number pool files report (major 0, an unnamed-device minor no kernel file
/// system of this host is likely to hold): tools that compare `st_dev` (cp, find -xdev) see
/// a file system of its own.
pub(crate) const DEV_MINOR: u32 = 0xfe;

/// Fill `*st` (zeroed first).
///
/// # Safety
/// `st` must be NULL or valid for writing one `struct stat`.
pub(crate) unsafe fn fill_stat(a: &Attr, st: *mut libc::stat) -> Result<c_int, c_int> {
    if st.is_null() {
        return Err(libc::EFAULT);
    }
    crate::guarded::check(st.cast(), std::mem::size_of::<libc::stat>(), true)?;
    let mut s = stat_of(a);
    s.st_dev = libc::makedev(0, DEV_MINOR);
    // SAFETY: not NULL (checked), valid for one write (the caller's contract).
    unsafe { st.write(s) };
    Ok(0)
}

/// Fill `*stx` with the basic fields (`STATX_BASIC_STATS`).
///
/// # Safety
/// `stx` must be NULL or valid for writing one `struct statx`.
pub(crate) unsafe fn fill_statx(a: &Attr, stx: *mut libc::statx) -> Result<c_int, c_int> {
    if stx.is_null() {
        return Err(libc::EFAULT);
    }
    crate::guarded::check(stx.cast(), std::mem::size_of::<libc::statx>(), true)?;
    let ts = |ns: i64| {
        let (s, n) = secs(ns);
        // SAFETY: all-zero is a valid `struct statx_timestamp`.
        let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
        t.tv_sec = s;
        t.tv_nsec = n as u32;
        t
    };
    // SAFETY: all-zero is a valid `struct statx`.
    let mut x: libc::statx = unsafe { std::mem::zeroed() };
    x.stx_mask = libc::STATX_BASIC_STATS;
    x.stx_blksize = 4096;
    x.stx_nlink = a.links;
    x.stx_uid = a.uid;
    x.stx_gid = a.gid;
    x.stx_mode = (type_bits(a.kind) | (a.mode & 0o7777)) as u16;
    x.stx_ino = a.ino;
    x.stx_size = a.size;
    x.stx_blocks = a.blocks * 8;
    x.stx_atime = ts(a.atime);
    x.stx_ctime = ts(a.ctime);
    x.stx_mtime = ts(a.mtime);
    x.stx_rdev_major = libc::major(a.rdev as u64);
    x.stx_rdev_minor = libc::minor(a.rdev as u64);
    x.stx_dev_major = 0;
    x.stx_dev_minor = DEV_MINOR;
    // SAFETY: not NULL (checked), valid for one write (the caller's contract).
    unsafe { stx.write(x) };
    Ok(0)
}
