//! open(2) and close(2): flags to a descriptor in the table (O_TMPFILE in `tmpfile.rs`).

use super::access::{R, W};
use super::flags::OpenFlags;
use super::{Desc, Fd, Posix, MAX_FDS};
use crate::{Attr, Error, Kind, Result, SetAttr};
use parking_lot::Mutex;
use pmkit_media::Media;
use std::sync::Arc;

impl Desc {
    /// A new descriptor of `attr` opened with `flags`, at offset 0.
    pub(super) fn new(attr: &Attr, flags: OpenFlags) -> Desc {
        Desc {
            ino: attr.ino,
            kind: attr.kind,
            flags,
            removed: Mutex::new(None),
            off: Mutex::new(0),
        }
    }
}

/// What [`Posix::open_node`] opened.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum Opened {
    /// A descriptor in the table: a regular file or a directory.
    Fd(Fd),
    /// A FIFO the caller may open with these flags (permission checked). Its data never
    /// reaches the pool: whoever serves the caller's process gives it a kernel pipe.
    Fifo(Attr),
}

impl<M: Media> Posix<M> {
    /// open(2): `mode` is used when the file is created. A FIFO cannot be opened in the
    /// library (nothing in it carries a pipe's data): see [`Posix::open_node`].
    pub fn open(&self, path: &[u8], flags: i32, mode: u32) -> Result<Fd> {
        match self.open_node(path, flags, mode)? {
            Opened::Fd(fd) => Ok(fd),
            Opened::Fifo(_) => {
                let f = OpenFlags::from_bits(flags)?;
                if f.write && !f.read && f.nonblock {
                    // As Linux with no reader: nothing in the library ever reads one.
                    Err(Error::NoDevice("a FIFO with no reader"))
                } else {
                    Err(Error::NotSupported("opening a FIFO in the library"))
                }
            }
        }
    }

    /// open(2) that also names a FIFO, for a front end that serves FIFOs with kernel pipes
    /// (the LD_PRELOAD shim).
    pub fn open_node(&self, path: &[u8], flags: i32, mode: u32) -> Result<Opened> {
        let f = OpenFlags::from_bits(flags)?;
        if f.tmpfile {
            return self.open_tmpfile(path, f, mode).map(Opened::Fd);
        }
        if f.create && f.directory {
            // As Linux since 6.4, whether or not the path exists.
            return Err(Error::Invalid("O_CREAT with O_DIRECTORY"));
        }
        // O_CREAT|O_EXCL never follows a final link (it must create the name itself).
        let follow = !(f.nofollow || (f.create && f.excl));
        let r = self.resolve(path, follow)?;
        let attr = match r.attr {
            Some(_) if f.create && f.excl => return Err(Error::Exists),
            Some(a) => {
                let want = match (f.read, f.write || f.trunc) {
                    (true, true) => R | W,
                    (true, false) => R,
                    (false, _) => W,
                };
                // A link (O_NOFOLLOW) is ELOOP and a directory opened for writing EISDIR below,
                // before any permission, as Linux answers.
                let dir_write = a.kind == Kind::Dir && want & W != 0;
                if a.kind != Kind::Symlink && !dir_write {
                    self.checking(|c| c.check(&a, want, "the file's mode refuses this access"))?;
                }
                a
            }
            None if f.create => {
                self.checking(|c| c.check(&r.dir, W, "no write permission on the directory"))?;
                match self
                    .fs
                    .create_as(self.owner(), r.parent, &r.name, mode & 0o7777)
                {
                    Ok(a) => a,
                    // Another thread made the name since the lookup: without O_EXCL, open
                    // what it made, as the kernel's atomic O_CREAT would.
                    Err(Error::Exists) if !f.excl => self.fs.lookup(r.parent, &r.name)?,
                    Err(e) => return Err(e),
                }
            }
            None => return Err(Error::NotFound),
        };
        match attr.kind {
            // Linux refuses O_CREAT on an existing directory too, whatever the access mode.
            Kind::Dir if f.write || f.trunc || f.create => return Err(Error::IsDir),
            Kind::Dir => {}
            // O_DIRECTORY first: Linux answers ENOTDIR for a final link under O_NOFOLLOW too.
            _ if f.directory => return Err(Error::NotDir),
            Kind::Symlink => return Err(Error::Loop), // O_NOFOLLOW on a link
            Kind::File => {}
            // As Linux: a socket is not opened.
            Kind::Socket => return Err(Error::NoDevice("a socket is not opened")),
            Kind::Fifo => return Ok(Opened::Fifo(attr)),
            _ => return Err(Error::NotSupported("opening a special file in place")),
        }
        if attr.kind == Kind::File {
            self.fs.open(attr.ino)?;
            if f.trunc && f.write && attr.size > 0 {
                let cut = SetAttr {
                    size: Some(0),
                    ..SetAttr::default()
                };
                if let Err(e) = self.fs.setattr(attr.ino, &cut) {
                    let _ = self.fs.release(attr.ino);
                    return Err(e);
                }
            }
        }
        self.install(Desc::new(&attr, f)).map(Opened::Fd)
    }

    /// A slot for `d`, whose file (a regular file's open counted) is released if none is left.
    pub(super) fn install(&self, d: Desc) -> Result<Fd> {
        let (ino, kind) = (d.ino, d.kind);
        let d = Arc::new(d);
        let mut fds = self.fds.lock();
        let slot = match fds.iter().position(Option::is_none) {
            Some(i) => i,
            None if fds.len() < MAX_FDS => {
                fds.push(None);
                fds.len() - 1
            }
            None => {
                drop(fds);
                if kind == Kind::File {
                    let _ = self.fs.release(ino);
                }
                return Err(Error::TooManyFds { max: MAX_FDS });
            }
        };
        fds[slot] = Some(d);
        Ok(Fd(slot as u32))
    }

    pub fn close(&self, fd: Fd) -> Result<()> {
        let d = self
            .fds
            .lock()
            .get_mut(fd.0 as usize)
            .and_then(Option::take)
            .ok_or(Error::BadFd(fd.0))?;
        // POSIX: closing any descriptor of a file drops the process's record locks on it
        self.common.locks.release(self.session_id(), Some(d.ino));
        if d.kind == Kind::File {
            self.fs.release(d.ino)?;
        }
        Ok(())
    }
}
