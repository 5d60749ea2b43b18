//! One FUSE request, from either transport: decode the opcode's in-struct and names, call the
//! operation of [`Ops`], and encode its answer in the payload buffer, for any file system that
//! implements [`Ops`]. What it does not serve gets ENOSYS (the kernel remembers that for
//! optional operations).
//!
//! Layout: the opcode's first argument (its fixed struct, empty for LOOKUP, UNLINK, RMDIR,
//! SYMLINK, READLINK and REMOVEXATTR) is `op_in` (over io_uring the kernel puts it in the
//! entry's header; over /dev/fuse it follows the request header, `abi::op_in_len` long); the
//! remaining arguments (names, each NUL-terminated, then a SYMLINK target, a SETXATTR value,
//! WRITE data) are concatenated in the payload, `payload_sz` bytes.

use crate::abi::{self, op, u32_at, u64_at, InHeader};
use crate::ops::{CopyRange, Entry, Opened, Ops, WriteHow, Xattr};
use pmkit_fs::{Owner, SetAttr};
use std::time::Duration;

type R = Result<u32, i32>;

/// What answers the requests of a connection, whichever transport brings them.
pub(crate) trait Handler: Send + Sync + 'static {
    /// Answer request `h` (its fixed in-struct `op_in`, its names or data in `payload`) by
    /// writing the reply's bytes into `payload`: their count, or a positive errno.
    fn answer(&self, h: &InHeader, op_in: &[u8], payload: &mut [u8]) -> Result<u32, i32>;
}

/// Answer `h` with `handler`: (errno, reply bytes in `payload`). Every request gets an answer:
/// a handler that panics (a bug, or a request no one foresaw) answers EIO and the transport
/// goes on serving, for a request left unanswered holds its caller in uninterruptible sleep
/// until the connection is aborted.
pub(crate) fn answer_caught<H: Handler>(
    handler: &H,
    h: &InHeader,
    op_in: &[u8],
    payload: &mut [u8],
) -> (i32, u32) {
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        handler.answer(h, op_in, payload)
    }));
    match answered {
        Ok(Ok(len)) => (0, len),
        Ok(Err(e)) => (e, 0),
        Err(_) => {
            tracing::error!(
                "FUSE request {} (opcode {}) panicked; answered EIO, serving on",
                h.unique,
                h.opcode
            );
            (libc::EIO, 0)
        }
    }
}

/// The request's payload, split at NULs: `names::<N>(p)` gives the first `N` NUL-terminated
/// strings and what follows them.
fn names<const N: usize>(p: &[u8]) -> Result<([&[u8]; N], &[u8]), i32> {
    let mut out = [&[][..]; N];
    let mut rest = p;
    for slot in out.iter_mut() {
        let end = rest.iter().position(|&c| c == 0).ok_or(libc::EINVAL)?;
        *slot = &rest[..end];
        rest = &rest[end + 1..];
    }
    Ok((out, rest))
}

/// `secs`/`nsecs` of a `fuse_setattr_in` time, or now.
/// A time a SETATTR asked for, in nanoseconds since the epoch: now when the request says so,
/// else its seconds, which the kernel sends as a signed number in an unsigned field (a time
/// before 1970 is negative), and nanoseconds (below 10^9 from any sane kernel; a larger value
/// is clamped rather than trusted).
fn when(valid: u32, now_bit: u32, secs: u64, nsecs: u32) -> i64 {
    if valid & now_bit != 0 {
        return crate::ops::ns_of(None);
    }
    pmkit_fs::ns_of_timespec(secs as i64, nsecs.min(999_999_999) as i64)
}

fn entry(p: &mut [u8], r: Result<Entry, i32>, ttl: Duration) -> R {
    r.map(|e| abi::entry_out(p, &e.attr, e.generation, ttl))
}

fn opened(p: &mut [u8], r: Result<Opened, i32>) -> R {
    r.map(|o| abi::open_out(p, o.fh, o.flags.bits()))
}

fn empty(r: Result<(), i32>) -> R {
    r.map(|()| 0)
}

/// Bytes into the payload buffer (the handler keeps to the request's size).
fn data(p: &mut [u8], d: &[u8]) -> R {
    let n = d.len().min(p.len());
    p[..n].copy_from_slice(&d[..n]);
    Ok(n as u32)
}

fn xattr(p: &mut [u8], r: Result<Xattr, i32>) -> R {
    match r? {
        Xattr::Size(n) => Ok(abi::getxattr_out(p, n)),
        Xattr::Data(d) => data(p, &d),
    }
}

impl<O: Ops + 'static> Handler for O {
    fn answer(&self, h: &InHeader, oi: &[u8], buf: &mut [u8]) -> R {
        let ino = h.nodeid;
        let who = Owner {
            uid: h.uid,
            gid: h.gid,
        };
        let ttl = self.ttl();
        // The request's bytes in the payload buffer; the reply overwrites them once the
        // handler has returned (its answer owns what it needs).
        let n = (h.payload_sz as usize).min(buf.len());
        match h.opcode {
            op::WRITE => {
                // fuse_write_in: offset @8, size @16, write_flags @20, open flags @32; the data
                // is the payload.
                let size = (u32_at(oi, 16) as usize).min(n);
                let kill = u32_at(oi, 20) & abi::FUSE_WRITE_KILL_SUIDGID != 0;
                let how = WriteHow::of(kill, u32_at(oi, 32) as i32);
                let w = self.write(ino, u64_at(oi, 8), &buf[..size], how)?;
                assert!(
                    w as usize <= size,
                    "a write takes at most what it was given"
                );
                Ok(abi::write_out(buf, w))
            }
            op::READ => {
                // fuse_read_in: offset @8, size @16. The data goes straight into the payload
                // buffer the kernel copies from: no buffer of our own, no copy.
                let size = (u32_at(oi, 16) as usize).min(buf.len());
                let got = self.read(ino, u64_at(oi, 8), &mut buf[..size])?;
                assert!(got <= size, "a read answers at most what was asked");
                Ok(got as u32)
            }
            op::LOOKUP => {
                let ([name], _) = names(&buf[..n])?;
                let r = self.lookup(ino, name);
                entry(buf, r, ttl)
            }
            op::GETATTR => self.getattr(ino).map(|a| abi::attr_out(buf, &a, ttl)),
            op::SETATTR => {
                // fuse_setattr_in: valid @0, size @16, atime @32, mtime @40, atimensec @56,
                // mtimensec @60, mode @68, uid @76, gid @80.
                let v = u32_at(oi, 0);
                let has = |bit: u32| v & bit != 0;
                let s = SetAttr {
                    mode: has(abi::FATTR_MODE).then(|| u32_at(oi, 68)),
                    uid: has(abi::FATTR_UID).then(|| u32_at(oi, 76)),
                    gid: has(abi::FATTR_GID).then(|| u32_at(oi, 80)),
                    size: has(abi::FATTR_SIZE).then(|| u64_at(oi, 16)),
                    atime: has(abi::FATTR_ATIME)
                        .then(|| when(v, abi::FATTR_ATIME_NOW, u64_at(oi, 32), u32_at(oi, 56))),
                    mtime: has(abi::FATTR_MTIME)
                        .then(|| when(v, abi::FATTR_MTIME_NOW, u64_at(oi, 40), u32_at(oi, 60))),
                    kill_suidgid: false,
                };
                // HANDLE_KILLPRIV_V2: the kernel says when a truncate clears the bits.
                let kills = has(abi::FATTR_KILL_SUIDGID);
                self.setattr(ino, &s, kills)
                    .map(|a| abi::attr_out(buf, &a, ttl))
            }
            op::READLINK => {
                let t = self.readlink(ino)?;
                data(buf, &t)
            }
            op::SYMLINK => {
                let ([name, target], _) = names(&buf[..n])?;
                let r = self.symlink(who, ino, name, target);
                entry(buf, r, ttl)
            }
            op::MKNOD => {
                // fuse_mknod_in: mode @0, rdev @4.
                let ([name], _) = names(&buf[..n])?;
                let r = self.mknod(who, ino, name, u32_at(oi, 0), u32_at(oi, 4));
                entry(buf, r, ttl)
            }
            op::MKDIR => {
                // fuse_mkdir_in: mode @0.
                let ([name], _) = names(&buf[..n])?;
                let r = self.mkdir(who, ino, name, u32_at(oi, 0));
                entry(buf, r, ttl)
            }
            op::UNLINK => empty(self.unlink(ino, names::<1>(&buf[..n])?.0[0])),
            op::RMDIR => empty(self.rmdir(ino, names::<1>(&buf[..n])?.0[0])),
            op::RENAME | op::RENAME2 => {
                // fuse_rename_in: newdir @0; fuse_rename2_in adds flags @8.
                let flags = if h.opcode == op::RENAME2 {
                    u32_at(oi, 8)
                } else {
                    0
                };
                let ([from, to], _) = names(&buf[..n])?;
                empty(self.rename(ino, from, u64_at(oi, 0), to, flags))
            }
            op::LINK => {
                // fuse_link_in: oldnodeid @0; the node is the new parent.
                let ([name], _) = names(&buf[..n])?;
                let r = self.link(u64_at(oi, 0), ino, name);
                entry(buf, r, ttl)
            }
            op::OPEN => opened(buf, self.open(ino)),
            op::FLUSH => empty(self.flush()),
            // fuse_release_in: fh @0.
            op::RELEASE => empty(self.release(ino, u64_at(oi, 0))),
            op::FSYNC => empty(self.fsync(ino)),
            op::FSYNCDIR => empty(self.fsyncdir(ino)),
            op::OPENDIR => opened(buf, self.opendir(ino)),
            op::READDIR => {
                // fuse_read_in: fh @0, offset @8, size @16.
                let limit = (u32_at(oi, 16) as usize).min(buf.len());
                let mut at = 0;
                self.readdir(
                    ino,
                    u64_at(oi, 0),
                    u64_at(oi, 8),
                    &mut |ino, off, kind, name| match abi::dirent(
                        buf, at, limit, ino, off, kind, name,
                    ) {
                        Some(end) => {
                            at = end;
                            false
                        }
                        None => true,
                    },
                )?;
                Ok(at as u32)
            }
            op::READDIRPLUS => {
                // fuse_read_in, as READDIR.
                let limit = (u32_at(oi, 16) as usize).min(buf.len());
                let ttl = self.ttl();
                let mut at = 0;
                self.readdirplus(ino, u64_at(oi, 0), u64_at(oi, 8), &mut |e, off, name| {
                    match abi::direntplus(buf, at, limit, e, ttl, off, name) {
                        Some(end) => {
                            at = end;
                            false
                        }
                        None => true,
                    }
                })?;
                Ok(at as u32)
            }
            op::RELEASEDIR => empty(self.releasedir(u64_at(oi, 0))),
            op::STATFS => Ok(abi::statfs_out(buf, &self.statfs())),
            op::SETXATTR => {
                // fuse_setxattr_in: size @0, flags @4 (8 bytes: fuser does not ask for
                // FUSE_SETXATTR_EXT); the payload is the name, then the value.
                let ([name], rest) = names(&buf[..n])?;
                let value = &rest[..(u32_at(oi, 0) as usize).min(rest.len())];
                empty(self.setxattr(ino, name, value, u32_at(oi, 4) as i32, 0))
            }
            op::GETXATTR => {
                // fuse_getxattr_in: size @0.
                let ([name], _) = names(&buf[..n])?;
                let r = self.getxattr(ino, name, u32_at(oi, 0));
                xattr(buf, r)
            }
            op::LISTXATTR => xattr(buf, self.listxattr(ino, u32_at(oi, 0))),
            op::REMOVEXATTR => empty(self.removexattr(ino, names::<1>(&buf[..n])?.0[0])),
            op::CREATE => {
                // fuse_create_in: flags @0, mode @4; the reply is fuse_entry_out then
                // fuse_open_out.
                let ([name], _) = names(&buf[..n])?;
                let (e, o) = self.create(who, ino, name, u32_at(oi, 4))?;
                let len = abi::entry_out(buf, &e.attr, e.generation, ttl);
                Ok(len + abi::open_out(&mut buf[len as usize..], o.fh, o.flags.bits()))
            }
            op::TMPFILE => {
                // As CREATE (fuse_create_in, the same reply); its name ("/") means nothing.
                let (e, o) = self.tmpfile(who, ino, u32_at(oi, 4))?;
                let len = abi::entry_out(buf, &e.attr, e.generation, ttl);
                Ok(len + abi::open_out(&mut buf[len as usize..], o.fh, o.flags.bits()))
            }
            op::FALLOCATE => {
                // fuse_fallocate_in: offset @8, length @16, mode @24.
                let r = self.fallocate(ino, u64_at(oi, 8), u64_at(oi, 16), u32_at(oi, 24) as i32);
                empty(r)
            }
            op::LSEEK => {
                // fuse_lseek_in: fh @0, offset @8, whence @16; fuse_lseek_out: offset.
                let at = self.lseek(ino, u64_at(oi, 8) as i64, u32_at(oi, 16) as i32)?;
                buf[..8].copy_from_slice(&at.to_le_bytes());
                Ok(8)
            }
            op::COPY_FILE_RANGE => {
                // fuse_copy_file_range_in: fh_in @0, off_in @8, nodeid_out @16, fh_out @24,
                // off_out @32, len @40, flags @48; the reply is a fuse_write_out.
                let c = CopyRange {
                    from: (ino, u64_at(oi, 8)),
                    to: (u64_at(oi, 16), u64_at(oi, 32)),
                    len: u64_at(oi, 40),
                    flags: u64_at(oi, 48),
                };
                let n = self.copy_file_range(who, &c)?;
                Ok(abi::write_out(buf, n))
            }
            // FORGET and BATCH_FORGET take no reply: the /dev/fuse workers handle them before
            // this (`dev.rs`), and the kernel never puts them on a ring.
            op::DESTROY => Ok(0),
            // ACCESS (permissions are checked by the kernel: default_permissions), and the rest:
            // ENOSYS, so the kernel stops asking for what can stop.
            _ => Err(libc::ENOSYS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's signed seconds in the unsigned field, before 1970 and far out, and
    /// nanoseconds no kernel sends: a time, never a panic.
    #[test]
    fn setattr_times_are_signed_and_never_panic() {
        let t = |secs: i64, nsecs: u32| when(0, abi::FATTR_ATIME_NOW, secs as u64, nsecs);
        assert_eq!(t(-315_615_510, 0), -315_615_510_000_000_000);
        assert_eq!(t(-2, 500_000_000), -1_500_000_000);
        assert_eq!(t(4_102_444_800, 250_000_000), 4_102_444_800_250_000_000);
        assert!(t(i64::MIN, u32::MAX) < i64::MIN + 1_000_000_000);
        assert_eq!(t(i64::MAX, u32::MAX), i64::MAX);
        assert_eq!(t(-1, u32::MAX), -1);
    }
}
