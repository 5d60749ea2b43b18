//! The parts of the FUSE wire format (`include/uapi/linux/fuse.h`, ABI 7.42+) both transports
//! read and write themselves: the request header, the per-opcode structs the block device and
//! PMFS get, and the replies; and for io_uring, the ring entry's header buffer. Everything is
//! native-endian bytes at fixed offsets, so parsing needs no `unsafe`.

use fuser::{FileAttr, FileType};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `FUSE_IO_URING_CMD_REGISTER`: hand the kernel a ring entry (header + payload buffers); it
/// completes when the first request for the entry arrives.
pub(crate) const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: the reply for the entry's request is in its buffers;
/// complete it and wait for the next request.
pub(crate) const CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`: `in_out` (128: `fuse_in_header` on fetch,
/// `fuse_out_header` on commit), `op_in` (128: the opcode's fixed in-struct),
/// `ring_ent_in_out` (32: flags, commit_id, payload_sz, padding, reserved).
pub(crate) const HEADER_LEN: usize = 288;
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;

/// `struct fuse_uring_cmd_req` in the SQE's 80-byte command area: flags, commit_id, qid.
pub(crate) fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    c[16..18].copy_from_slice(&qid.to_ne_bytes());
    c
}

pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}
fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}
fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

/// What the kernel put in an entry's header buffer.
pub(crate) struct InHeader {
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    /// The caller's credentials (`fuse_in_header.uid`, `.gid`).
    pub uid: u32,
    pub gid: u32,
    /// Bytes of the request in the payload buffer (names, WRITE data).
    pub payload_sz: u32,
    /// The id to echo in COMMIT_AND_FETCH.
    pub commit_id: u64,
}

impl InHeader {
    pub(crate) fn parse(h: &[u8]) -> InHeader {
        InHeader {
            opcode: u32_at(h, 4),
            unique: u64_at(h, 8),
            nodeid: u64_at(h, 16),
            uid: u32_at(h, 24),
            gid: u32_at(h, 28),
            commit_id: u64_at(h, ENT_IN_OUT + 8),
            payload_sz: u32_at(h, ENT_IN_OUT + 16),
        }
    }
}

/// The opcode's fixed in-struct (`fuse_read_in`, `fuse_write_in`, ...).
pub(crate) fn op_in(h: &[u8]) -> &[u8] {
    &h[OP_IN..OP_IN + 128]
}

/// Write the reply header: `fuse_out_header` (len, -errno, unique) and the payload size.
pub(crate) fn set_reply(h: &mut [u8], unique: u64, errno: i32, payload_len: u32) {
    put32(h, 0, 16 + payload_len);
    put32(h, 4, (-errno) as u32);
    put64(h, 8, unique);
    put32(h, ENT_IN_OUT + 16, payload_len);
}

/// Opcodes (`enum fuse_opcode`).
pub(crate) mod op {
    pub(crate) const LOOKUP: u32 = 1;
    pub(crate) const FORGET: u32 = 2;
    pub(crate) const GETATTR: u32 = 3;
    pub(crate) const SETATTR: u32 = 4;
    pub(crate) const READLINK: u32 = 5;
    pub(crate) const SYMLINK: u32 = 6;
    pub(crate) const MKNOD: u32 = 8;
    pub(crate) const MKDIR: u32 = 9;
    pub(crate) const UNLINK: u32 = 10;
    pub(crate) const RMDIR: u32 = 11;
    pub(crate) const RENAME: u32 = 12;
    pub(crate) const LINK: u32 = 13;
    pub(crate) const OPEN: u32 = 14;
    pub(crate) const READ: u32 = 15;
    pub(crate) const WRITE: u32 = 16;
    pub(crate) const STATFS: u32 = 17;
    pub(crate) const RELEASE: u32 = 18;
    pub(crate) const FSYNC: u32 = 20;
    pub(crate) const SETXATTR: u32 = 21;
    pub(crate) const GETXATTR: u32 = 22;
    pub(crate) const LISTXATTR: u32 = 23;
    pub(crate) const REMOVEXATTR: u32 = 24;
    pub(crate) const FLUSH: u32 = 25;
    pub(crate) const OPENDIR: u32 = 27;
    pub(crate) const READDIR: u32 = 28;
    pub(crate) const RELEASEDIR: u32 = 29;
    pub(crate) const FSYNCDIR: u32 = 30;
    pub(crate) const CREATE: u32 = 35;
    pub(crate) const DESTROY: u32 = 38;
    pub(crate) const BATCH_FORGET: u32 = 42;
    pub(crate) const FALLOCATE: u32 = 43;
    pub(crate) const READDIRPLUS: u32 = 44;
    pub(crate) const RENAME2: u32 = 45;
    pub(crate) const LSEEK: u32 = 46;
    pub(crate) const COPY_FILE_RANGE: u32 = 47;
    pub(crate) const TMPFILE: u32 = 51;
    /// Take no reply (the /dev/fuse workers skip them).
    pub(crate) const INTERRUPT: u32 = 36;
    pub(crate) const NOTIFY_REPLY: u32 = 41;
    /// Not served (ENOSYS); named for the sizes of their in-structs.
    pub(crate) const GETLK: u32 = 31;
    pub(crate) const SETLKW: u32 = 33;
    pub(crate) const ACCESS: u32 = 34;
    pub(crate) const BMAP: u32 = 37;
    pub(crate) const IOCTL: u32 = 39;
    pub(crate) const POLL: u32 = 40;
    pub(crate) const SYNCFS: u32 = 50;
    pub(crate) const STATX: u32 = 52;
}

/// Over /dev/fuse, the bytes of an opcode's fixed in-struct (its first argument) between the
/// request header and the payload (`fuse_*_in` as of ABI 7.42); 0 for an opcode with none or
/// one not served (answered ENOSYS whatever follows the header).
pub(crate) fn op_in_len(opcode: u32) -> usize {
    match opcode {
        op::FORGET | op::MKDIR | op::RENAME | op::LINK | op::OPEN | op::SETXATTR => 8,
        op::GETXATTR | op::LISTXATTR | op::OPENDIR | op::BATCH_FORGET => 8,
        op::ACCESS | op::INTERRUPT | op::SYNCFS => 8,
        op::GETATTR | op::MKNOD | op::FSYNC | op::FSYNCDIR | op::CREATE | op::TMPFILE => 16,
        op::RENAME2 | op::BMAP => 16,
        op::RELEASE | op::RELEASEDIR | op::FLUSH | op::LSEEK | op::POLL | op::STATX => 24,
        op::IOCTL | op::FALLOCATE => 32,
        op::READ | op::WRITE | op::READDIR | op::READDIRPLUS => 40,
        // GETLK, SETLK, SETLKW
        op::GETLK..=op::SETLKW => 48,
        op::COPY_FILE_RANGE => 56,
        op::SETATTR => 88,
        _ => 0,
    }
}

/// The largest payload either file system asks for at INIT (`max_write`, and so the READ size
/// the kernel asks): the device file's `MAX_IO`, PMFS's `MAX_WRITE`, and what a worker's or a
/// ring entry's buffer holds.
pub(crate) const MAX_PAYLOAD: u32 = 1 << 20;

/// `struct fuse_in_header`: len, opcode, unique, nodeid, uid, gid, pid, total_extlen, padding.
pub(crate) const IN_HEADER_LEN: usize = 40;

impl InHeader {
    /// The header of a request read from /dev/fuse, `payload_sz` bytes of payload after its
    /// in-struct.
    pub(crate) fn from_dev(b: &[u8], payload_sz: u32) -> InHeader {
        InHeader {
            opcode: u32_at(b, 4),
            unique: u64_at(b, 8),
            nodeid: u64_at(b, 16),
            uid: u32_at(b, 24),
            gid: u32_at(b, 28),
            commit_id: 0,
            payload_sz,
        }
    }
}

/// A `fuse_out_header` (len, -errno, unique) for a reply of `payload_len` bytes.
pub(crate) fn out_header(unique: u64, errno: i32, payload_len: u32) -> [u8; 16] {
    let mut h = [0u8; 16];
    put32(&mut h, 0, 16 + payload_len);
    put32(&mut h, 4, (-errno) as u32);
    put64(&mut h, 8, unique);
    h
}

/// `fuse_setattr_in.valid` bits.
pub(crate) const FATTR_MODE: u32 = 1 << 0;
pub(crate) const FATTR_UID: u32 = 1 << 1;
pub(crate) const FATTR_GID: u32 = 1 << 2;
pub(crate) const FATTR_SIZE: u32 = 1 << 3;
pub(crate) const FATTR_ATIME: u32 = 1 << 4;
pub(crate) const FATTR_MTIME: u32 = 1 << 5;
pub(crate) const FATTR_ATIME_NOW: u32 = 1 << 7;
pub(crate) const FATTR_MTIME_NOW: u32 = 1 << 8;
/// A truncate by a caller without CAP_FSETID: clear set-user-ID/set-group-ID (HANDLE_KILLPRIV_V2).
pub(crate) const FATTR_KILL_SUIDGID: u32 = 1 << 11;
/// `fuse_write_in.write_flags`: the write must clear set-user-ID/set-group-ID.
pub(crate) const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;

/// The `S_IF*` bits of a file type.
fn type_bits(kind: FileType) -> u32 {
    match kind {
        FileType::Directory => libc::S_IFDIR,
        FileType::RegularFile => libc::S_IFREG,
        FileType::Symlink => libc::S_IFLNK,
        FileType::NamedPipe => libc::S_IFIFO,
        FileType::CharDevice => libc::S_IFCHR,
        FileType::BlockDevice => libc::S_IFBLK,
        FileType::Socket => libc::S_IFSOCK,
    }
}

/// `struct fuse_attr`'s seconds (signed, in an unsigned field) and nanoseconds (`0..1e9`,
/// counted forward from the seconds) of `t`, before the epoch too.
fn secs_nsecs(t: SystemTime) -> (u64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos()),
        Err(before) => {
            let d = before.duration();
            let secs = -i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            match d.subsec_nanos() {
                0 => (secs as u64, 0),
                n => ((secs - 1) as u64, 1_000_000_000 - n),
            }
        }
    }
}

/// `struct fuse_attr` (88 bytes) at `b[0..88]`.
fn put_attr(b: &mut [u8], a: &FileAttr) {
    let kind = type_bits(a.kind);
    put64(b, 0, a.ino.into());
    put64(b, 8, a.size);
    put64(b, 16, a.blocks);
    let (at, atn) = secs_nsecs(a.atime);
    let (mt, mtn) = secs_nsecs(a.mtime);
    let (ct, ctn) = secs_nsecs(a.ctime);
    put64(b, 24, at);
    put64(b, 32, mt);
    put64(b, 40, ct);
    put32(b, 48, atn);
    put32(b, 52, mtn);
    put32(b, 56, ctn);
    put32(b, 60, kind | u32::from(a.perm));
    put32(b, 64, a.nlink);
    put32(b, 68, a.uid);
    put32(b, 72, a.gid);
    put32(b, 76, a.rdev);
    put32(b, 80, a.blksize);
    put32(b, 84, a.flags);
}

/// `struct fuse_entry_out` (128 bytes): the reply to LOOKUP and to the calls that make a name.
pub(crate) fn entry_out(b: &mut [u8], a: &FileAttr, generation: u64, ttl: Duration) -> u32 {
    b[..128].fill(0);
    put64(b, 0, a.ino.into());
    put64(b, 8, generation);
    put64(b, 16, ttl.as_secs());
    put64(b, 24, ttl.as_secs());
    put32(b, 32, ttl.subsec_nanos());
    put32(b, 36, ttl.subsec_nanos());
    put_attr(&mut b[40..128], a);
    128
}

/// `struct fuse_attr_out` (104 bytes): the reply to GETATTR and SETATTR.
pub(crate) fn attr_out(b: &mut [u8], a: &FileAttr, ttl: Duration) -> u32 {
    b[..104].fill(0);
    put64(b, 0, ttl.as_secs());
    put32(b, 8, ttl.subsec_nanos());
    put_attr(&mut b[16..104], a);
    104
}

/// `struct fuse_open_out` (16 bytes): a handle and the open flags.
pub(crate) fn open_out(b: &mut [u8], fh: u64, open_flags: u32) -> u32 {
    b[..16].fill(0);
    put64(b, 0, fh);
    put32(b, 8, open_flags);
    16
}

/// `struct fuse_getxattr_out` (8 bytes): the size of a value or list, for a request of size 0.
pub(crate) fn getxattr_out(b: &mut [u8], size: u32) -> u32 {
    put32(b, 0, size);
    put32(b, 4, 0);
    8
}

/// `struct fuse_kstatfs` inside `fuse_statfs_out` (80 bytes).
pub(crate) fn statfs_out(b: &mut [u8], s: &crate::ops::Statfs) -> u32 {
    b[..80].fill(0);
    put64(b, 0, s.blocks);
    put64(b, 8, s.bfree);
    put64(b, 16, s.bavail);
    put64(b, 24, s.files);
    put64(b, 32, s.ffree);
    put32(b, 40, s.bsize);
    put32(b, 44, s.namelen);
    put32(b, 48, s.bsize); // frsize
    80
}

/// `struct fuse_write_out` (8 bytes).
pub(crate) fn write_out(b: &mut [u8], size: u32) -> u32 {
    put32(b, 0, size);
    put32(b, 4, 0);
    8
}

/// One `struct fuse_direntplus` at `b[at..]`: the entry's `fuse_entry_out` (all zeros for a
/// bare entry: node 0, which the kernel lists without taking a reference), then its
/// `fuse_dirent`. The new end, or `None` when it does not fit in `limit`.
pub(crate) fn direntplus(
    b: &mut [u8],
    at: usize,
    limit: usize,
    e: crate::ops::PlusEntry<'_>,
    ttl: Duration,
    off: u64,
    name: &[u8],
) -> Option<usize> {
    let len = 128 + (24 + name.len()).div_ceil(8) * 8;
    if at + len > limit {
        return None;
    }
    let kind = match e {
        crate::ops::PlusEntry::Full(e) => {
            entry_out(&mut b[at..at + 128], &e.attr, e.generation, ttl);
            e.attr.kind
        }
        crate::ops::PlusEntry::Bare { kind, .. } => {
            b[at..at + 128].fill(0);
            kind
        }
    };
    dirent(b, at + 128, limit, e.ino(), off, kind, name)
}

/// One `struct fuse_dirent` at `b[at..]`: the new end, or `None` when it does not fit in
/// `limit`.
pub(crate) fn dirent(
    b: &mut [u8],
    at: usize,
    limit: usize,
    ino: u64,
    off: u64,
    kind: FileType,
    name: &[u8],
) -> Option<usize> {
    let len = (24 + name.len()).div_ceil(8) * 8;
    if at + len > limit {
        return None;
    }
    let d = &mut b[at..at + len];
    d.fill(0);
    put64(d, 0, ino);
    put64(d, 8, off);
    put32(d, 16, name.len() as u32);
    put32(d, 20, type_bits(kind) >> 12); // DT_* is S_IF* >> 12
    d[24..24 + name.len()].copy_from_slice(name);
    Some(at + len)
}
