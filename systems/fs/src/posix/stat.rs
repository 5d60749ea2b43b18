//! A node's attributes as the kernel's `struct stat` gives them.

use crate::{Attr, Kind};

/// The `d_type` (`DT_*`) of a directory entry of a kind of inode.
pub fn d_type(k: Kind) -> u8 {
    match k {
        Kind::Dir => libc::DT_DIR,
        Kind::Symlink => libc::DT_LNK,
        Kind::File => libc::DT_REG,
        Kind::Fifo => libc::DT_FIFO,
        Kind::Socket => libc::DT_SOCK,
        Kind::CharDev => libc::DT_CHR,
        Kind::BlockDev => libc::DT_BLK,
        Kind::Free => libc::DT_UNKNOWN,
    }
}

/// The `S_IFMT` bits of a kind of inode.
pub fn type_bits(k: Kind) -> u32 {
    match k {
        Kind::Dir => libc::S_IFDIR,
        Kind::Symlink => libc::S_IFLNK,
        Kind::Fifo => libc::S_IFIFO,
        Kind::Socket => libc::S_IFSOCK,
        Kind::CharDev => libc::S_IFCHR,
        Kind::BlockDev => libc::S_IFBLK,
        Kind::File | Kind::Free => libc::S_IFREG,
    }
}

/// Seconds and nanoseconds of a time in nanoseconds since the epoch.
pub fn secs(ns: i64) -> (i64, i64) {
    crate::attr::timespec_of(ns)
}

/// `a` as the kernel's `struct stat` (`st_dev` 0: the caller picks the device it reports).
pub fn stat_of(a: &Attr) -> libc::stat {
    // SAFETY: all-zero is a valid `struct stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_ino = a.ino;
    st.st_mode = type_bits(a.kind) | (a.mode & 0o7777);
    st.st_nlink = a.links as _;
    st.st_uid = a.uid;
    st.st_gid = a.gid;
    st.st_rdev = a.rdev as u64;
    st.st_size = a.size as i64;
    st.st_blksize = 4096;
    st.st_blocks = (a.blocks * 8) as i64;
    (st.st_atime, st.st_atime_nsec) = secs(a.atime);
    (st.st_mtime, st.st_mtime_nsec) = secs(a.mtime);
    (st.st_ctime, st.st_ctime_nsec) = secs(a.ctime);
    st
}
