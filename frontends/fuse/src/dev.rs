//! The /dev/fuse transport: fuser's `Filesystem` calls, each handed to the one typed operation of
//! [`Ops`] and its answer turned into fuser's reply, for any file system that implements it (PMFS,
//! the block device file). The INIT handshake of both transports is here (it always comes over
//! /dev/fuse), and so are FORGET and INTERRUPT, which the kernel never puts on an io_uring queue.

use crate::dev_reply::{empty, entry, fe, guard, opened, xattr};
use crate::dev_request::{ns_asked, owner};
use crate::ops::{Ops, WriteHow};
use fuser::{
    FileHandle, Filesystem, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use pmkit_fs::SetAttr;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// fuser's file system over the operations of `O`.
pub struct Served<O: Ops + 'static> {
    ops: Arc<O>,
    /// Ask the kernel for FUSE over io_uring at INIT; set to whether it was granted.
    uring: Arc<AtomicBool>,
}

impl<O: Ops + 'static> Served<O> {
    /// A file system that asks for FUSE over io_uring at INIT when `want_uring`; the flag
    /// reads true after the handshake when the kernel granted it.
    pub fn new(ops: Arc<O>, want_uring: bool) -> (Served<O>, Arc<AtomicBool>) {
        let uring = Arc::new(AtomicBool::new(want_uring));
        (
            Served {
                ops,
                uring: Arc::clone(&uring),
            },
            uring,
        )
    }

    pub fn ops(&self) -> &Arc<O> {
        &self.ops
    }
}

impl<O: Ops + 'static> Filesystem for Served<O> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.ops.init(config);
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
        guard(self.ops.label(), "lookup", || {
            entry(
                self.ops.as_ref(),
                self.ops.lookup(parent.into(), name.as_bytes()),
                reply,
            )
        })
    }

    fn forget(&self, _req: &Request, ino: INodeNo, n: u64) {
        guard(self.ops.label(), "forget", || {
            self.ops.forget(ino.into(), n)
        })
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        guard(self.ops.label(), "getattr", || {
            match self.ops.getattr(ino.into()) {
                Ok(a) => reply.attr(&self.ops.ttl(), &a),
                Err(e) => reply.error(fe(e)),
            }
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
        guard(self.ops.label(), "setattr", || {
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
        guard(self.ops.label(), "readlink", || {
            match self.ops.readlink(ino.into()) {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(fe(e)),
            }
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
        guard(self.ops.label(), "mknod", || {
            let r = self
                .ops
                .mknod(owner(req), parent.into(), name.as_bytes(), mode, rdev);
            entry(self.ops.as_ref(), r, reply)
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
        guard(self.ops.label(), "mkdir", || {
            let r = self
                .ops
                .mkdir(owner(req), parent.into(), name.as_bytes(), mode);
            entry(self.ops.as_ref(), r, reply)
        })
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard(self.ops.label(), "unlink", || {
            empty(self.ops.unlink(parent.into(), name.as_bytes()), reply)
        })
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard(self.ops.label(), "rmdir", || {
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
        guard(self.ops.label(), "symlink", || {
            let r = self.ops.symlink(
                owner(req),
                parent.into(),
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
            );
            entry(self.ops.as_ref(), r, reply)
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
        guard(self.ops.label(), "rename", || {
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
        guard(self.ops.label(), "link", || {
            let r = self
                .ops
                .link(ino.into(), newparent.into(), newname.as_bytes());
            entry(self.ops.as_ref(), r, reply)
        })
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        guard(self.ops.label(), "open", || {
            opened(self.ops.open(ino.into()), reply)
        })
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
        thread_local! {
            // This worker's reply buffer: grows to the largest read it served (at most the
            // mount's max_read), so a READ costs no allocation and no zeroing; the reply is one
            // writev of header + these bytes.
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        guard(self.ops.label(), "read", || {
            BUF.with_borrow_mut(|buf| {
                if buf.len() < size as usize {
                    buf.resize(size as usize, 0);
                }
                match self.ops.read(ino.into(), offset, &mut buf[..size as usize]) {
                    Ok(n) => {
                        assert!(n <= size as usize, "a read answers at most what was asked");
                        reply.data(&buf[..n])
                    }
                    Err(e) => reply.error(fe(e)),
                }
            })
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
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        guard(self.ops.label(), "write", || {
            let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
            let how = WriteHow::of(kill, flags.0);
            match self.ops.write(ino.into(), offset, data, how) {
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
        guard(self.ops.label(), "flush", || empty(self.ops.flush(), reply))
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        guard(self.ops.label(), "release", || {
            empty(self.ops.release(ino.into(), fh.into()), reply)
        })
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        guard(self.ops.label(), "fsync", || {
            empty(self.ops.fsync(ino.into()), reply)
        })
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        guard(self.ops.label(), "opendir", || {
            opened(self.ops.opendir(ino.into()), reply)
        })
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        guard(self.ops.label(), "readdir", || {
            let r = self.ops.readdir(
                ino.into(),
                fh.into(),
                offset,
                &mut |ino, off, kind, name| {
                    reply.add(INodeNo(ino), off, kind, OsStr::from_bytes(name))
                },
            );
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(fe(e)),
            }
        })
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        guard(self.ops.label(), "readdirplus", || {
            let ttl = self.ops.ttl();
            let r = self
                .ops
                .readdirplus(ino.into(), fh.into(), offset, &mut |e, off, name| {
                    let generation = Generation(e.generation);
                    let name = OsStr::from_bytes(name);
                    reply.add(e.attr.ino, off, name, &ttl, &e.attr, generation)
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
        guard(self.ops.label(), "releasedir", || {
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
        guard(self.ops.label(), "fsyncdir", || {
            empty(self.ops.fsyncdir(ino.into()), reply)
        })
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        guard(self.ops.label(), "statfs", || {
            let s = self.ops.statfs();
            reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
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
        guard(self.ops.label(), "setxattr", || {
            let r = self
                .ops
                .setxattr(ino.into(), name.as_bytes(), value, flags, position);
            empty(r, reply)
        })
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        guard(self.ops.label(), "getxattr", || {
            xattr(self.ops.getxattr(ino.into(), name.as_bytes(), size), reply)
        })
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        guard(self.ops.label(), "listxattr", || {
            xattr(self.ops.listxattr(ino.into(), size), reply)
        })
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guard(self.ops.label(), "removexattr", || {
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
        guard(self.ops.label(), "create", || {
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
        guard(self.ops.label(), "lseek", || {
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
        guard(self.ops.label(), "fallocate", || {
            empty(self.ops.fallocate(ino.into(), offset, length, mode), reply)
        })
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: fuser::CopyFileRangeFlags,
        reply: fuser::ReplyWrite,
    ) {
        guard(self.ops.label(), "copy_file_range", || {
            let c = crate::ops::CopyRange {
                from: (ino_in.into(), offset_in),
                to: (ino_out.into(), offset_out),
                len,
                flags: flags.bits(),
            };
            match self.ops.copy_file_range(owner(req), &c) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(fe(e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_handler_is_contained() {
        let mut after = false;
        guard("pmfs", "test", || panic!("a handler bug"));
        guard("pmfs", "test", || after = true);
        assert!(after);
    }
}
