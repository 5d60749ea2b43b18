//! The /dev/fuse side of the PMFS mount: fuser's `Filesystem` calls, each handed to the shared
//! handler in [`PmfsOps`] and its answer turned into fuser's reply. The INIT handshake of both
//! transports happens here (it always comes over /dev/fuse); so do FORGET and INTERRUPT, which
//! the kernel never puts on an io_uring queue.

use crate::pmfs::{Entry, Opened, PmfsOps, Xattr, MAX_WRITE};
use fuser::{
    Errno, FileHandle, Filesystem, Generation, INodeNo, InitFlags, KernelConfig, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use pmkit_fs::{Owner, SetAttr};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// fuser's file system over the shared handlers.
pub struct PmFs {
    ops: Arc<PmfsOps>,
    /// Ask the kernel for FUSE over io_uring at INIT; set to whether it was granted.
    uring: Arc<AtomicBool>,
}

impl PmFs {
    /// A file system that asks for FUSE over io_uring at INIT when `want_uring`; the flag
    /// reads true after the handshake when the kernel granted it.
    pub fn new(ops: Arc<PmfsOps>, want_uring: bool) -> (PmFs, Arc<AtomicBool>) {
        let uring = Arc::new(AtomicBool::new(want_uring));
        (
            PmFs {
                ops,
                uring: Arc::clone(&uring),
            },
            uring,
        )
    }
}

fn fe(e: i32) -> Errno {
    Errno::from_i32(e)
}

fn owner(req: &Request) -> Owner {
    Owner {
        uid: req.uid(),
        gid: req.gid(),
    }
}

/// Nanoseconds since the epoch of a time a SETATTR asked for (`None`: now).
fn ns_asked(t: TimeOrNow) -> i64 {
    let TimeOrNow::SpecificTime(t) = t else {
        return crate::pmfs::ns_of(None);
    };
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(_) => crate::pmfs::ns_of(Some(t)),
        // fuser 0.18 turns the kernel's (seconds, nanoseconds) before the epoch, e.g.
        // (-2, 500000000) for -1.5 s, into the epoch minus 2.5 s (its time.rs leaves this as a
        // TODO): undo that, so the nanoseconds count forward from the seconds as the kernel
        // meant.
        Err(before) => {
            let d = before.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            pmkit_fs::ns_of_timespec(-secs, d.subsec_nanos() as i64)
        }
    }
}

fn entry(ops: &PmfsOps, r: Result<Entry, i32>, reply: ReplyEntry) {
    match r {
        Ok(e) => reply.entry(&ops.ttl(), &e.attr, Generation(e.generation)),
        Err(e) => reply.error(fe(e)),
    }
}

fn empty(r: Result<(), i32>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(fe(e)),
    }
}

fn opened(r: Result<Opened, i32>, reply: ReplyOpen) {
    match r {
        Ok(o) => reply.opened(FileHandle(o.fh), o.flags),
        Err(e) => reply.error(fe(e)),
    }
}

fn xattr(r: Result<Xattr, i32>, reply: ReplyXattr) {
    match r {
        Ok(Xattr::Size(n)) => reply.size(n),
        Ok(Xattr::Data(d)) => reply.data(&d),
        Err(e) => reply.error(fe(e)),
    }
}

/// Run a request's handler; a panic in it is logged and the worker thread goes on serving. The
/// reply the handler owned is dropped as the panic unwinds, and fuser answers a dropped reply
/// with EIO: the caller gets an error, never silence.
fn guard(op: &str, handler: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(handler)).is_err() {
        tracing::error!("pmfs: a {op} request panicked; answered EIO, serving on");
    }
}

impl Filesystem for PmFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        // The file system clears set-user-ID/set-group-ID bits and file capabilities on write,
        // truncate and chown (`PmfsOps::kill_privs`). Without this the kernel asks for
        // `security.capability` before every write: a second round trip per write.
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // FUSE over io_uring: the kernel offers it only where it is built in and enabled
        // (/sys/module/fuse/parameters/enable_uring); whether it was granted decides the
        // transport.
        if self.uring.load(Ordering::Relaxed) {
            let granted = config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok();
            self.uring.store(granted, Ordering::Release);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        guard("lookup", || {
            entry(
                &self.ops,
                self.ops.lookup(parent.into(), name.as_bytes()),
                reply,
            )
        })
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        guard("getattr", || match self.ops.getattr(ino.into()) {
            Ok(a) => reply.attr(&self.ops.ttl(), &a),
            Err(e) => reply.error(fe(e)),
        })
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        guard("setattr", || {
            let s = SetAttr {
                mode,
                uid,
                gid,
                size,
                atime: atime.map(ns_asked),
                mtime: mtime.map(ns_asked),
                kill_suidgid: false,
            };
            // The kernel's FATTR_KILL_SUIDGID ("not CAP_FSETID"), which fuser does not pass on,
            // approximated by the caller not being root (see `init`).
            let truncate_kills = req.uid() != 0;
            match self.ops.setattr(ino.into(), &s, truncate_kills) {
                Ok(a) => reply.attr(&self.ops.ttl(), &a),
                Err(e) => reply.error(fe(e)),
            }
        })
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        guard("readlink", || match self.ops.readlink(ino.into()) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(fe(e)),
        })
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        guard("mknod", || {
            let r = self
                .ops
                .mknod(owner(req), parent.into(), name.as_bytes(), mode, rdev);
            entry(&self.ops, r, reply)
        })
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        guard("mkdir", || {
            let r = self
                .ops
                .mkdir(owner(req), parent.into(), name.as_bytes(), mode);
            entry(&self.ops, r, reply)
        })
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard("unlink", || {
            empty(self.ops.unlink(parent.into(), name.as_bytes()), reply)
        })
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard("rmdir", || {
            empty(self.ops.rmdir(parent.into(), name.as_bytes()), reply)
        })
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        guard("symlink", || {
            let r = self.ops.symlink(
                owner(req),
                parent.into(),
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
            );
            entry(&self.ops, r, reply)
        })
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        guard("rename", || {
            let r = self.ops.rename(
                parent.into(),
                name.as_bytes(),
                newparent.into(),
                newname.as_bytes(),
                flags.bits(),
            );
            empty(r, reply)
        })
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        guard("link", || {
            let r = self
                .ops
                .link(ino.into(), newparent.into(), newname.as_bytes());
            entry(&self.ops, r, reply)
        })
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        guard("open", || opened(self.ops.open(ino.into()), reply))
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        guard("read", || match self.ops.read(ino.into(), offset, size) {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(fe(e)),
        })
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        guard("write", || {
            let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
            match self.ops.write(ino.into(), offset, data, kill) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(fe(e)),
            }
        })
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        guard("flush", || empty(self.ops.flush(), reply))
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        guard("release", || empty(self.ops.release(ino.into()), reply))
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        guard("fsync", || empty(self.ops.fsync(ino.into()), reply))
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        guard("opendir", || opened(self.ops.opendir(ino.into()), reply))
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        guard("readdir", || {
            let r = self
                .ops
                .readdir(ino.into(), fh.into(), offset, |ino, off, kind, name| {
                    reply.add(INodeNo(ino), off, kind, OsStr::from_bytes(name))
                });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(fe(e)),
            }
        })
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        guard("releasedir", || {
            empty(self.ops.releasedir(fh.into()), reply)
        })
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        guard("fsyncdir", || empty(self.ops.fsync(ino.into()), reply))
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        guard("statfs", || {
            let s = self.ops.statfs();
            reply.statfs(
                s.blocks,
                s.free_blocks,
                s.free_blocks,
                s.inodes,
                s.free_inodes,
                s.block_size,
                s.name_max,
                s.block_size,
            )
        })
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        guard("setxattr", || {
            let r = self
                .ops
                .setxattr(ino.into(), name.as_bytes(), value, flags, position);
            empty(r, reply)
        })
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        guard("getxattr", || {
            xattr(self.ops.getxattr(ino.into(), name.as_bytes(), size), reply)
        })
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        guard("listxattr", || {
            xattr(self.ops.listxattr(ino.into(), size), reply)
        })
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard("removexattr", || {
            empty(self.ops.removexattr(ino.into(), name.as_bytes()), reply)
        })
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        guard("create", || {
            match self
                .ops
                .create(owner(req), parent.into(), name.as_bytes(), mode)
            {
                Ok((e, o)) => reply.created(
                    &self.ops.ttl(),
                    &e.attr,
                    Generation(e.generation),
                    FileHandle(o.fh),
                    o.flags,
                ),
                Err(e) => reply.error(fe(e)),
            }
        })
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        guard("lseek", || {
            match self.ops.lseek(ino.into(), offset, whence) {
                Ok(at) => reply.offset(at as i64),
                Err(e) => reply.error(fe(e)),
            }
        })
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        guard("fallocate", || {
            empty(self.ops.fallocate(ino.into(), offset, length, mode), reply)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// fuser 0.18 gives the kernel's (-2 s, 500,000,000 ns) as the epoch minus 2.5 s; the
    /// time stored is -1.5 s. Times after the epoch pass unchanged.
    #[test]
    fn times_before_the_epoch_are_read_as_the_kernel_meant() {
        let fuser_gives = UNIX_EPOCH - Duration::new(2, 500_000_000);
        assert_eq!(
            ns_asked(TimeOrNow::SpecificTime(fuser_gives)),
            -1_500_000_000
        );
        let whole = UNIX_EPOCH - Duration::from_secs(315_615_510);
        assert_eq!(
            ns_asked(TimeOrNow::SpecificTime(whole)),
            -315_615_510_000_000_000
        );
        let later = UNIX_EPOCH + Duration::new(4_102_444_800, 250_000_000);
        assert_eq!(
            ns_asked(TimeOrNow::SpecificTime(later)),
            4_102_444_800_250_000_000
        );
    }

    #[test]
    fn a_panicking_handler_is_contained() {
        let mut after = false;
        guard("test", || panic!("a handler bug"));
        guard("test", || after = true);
        assert!(after);
    }
}
