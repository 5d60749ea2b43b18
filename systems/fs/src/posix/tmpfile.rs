//! open(2)'s O_TMPFILE and linkat(2) of a descriptor (`AT_EMPTY_PATH`, or `/proc/self/fd/N`
//! followed): the library's `Fs::tmpfile_as` and `Fs::link_tmpfile` with the permission checks
//! and the answers Linux gives.

use super::access::{W, X};
use super::flags::OpenFlags;
use super::{Desc, Fd, Posix};
use crate::{Attr, Error, Kind, Result};
use pmkit_media::Media;

impl<M: Media> Posix<M> {
    /// O_TMPFILE on the directory `path`: a regular file with no name, open on the descriptor
    /// returned, freed at its last close unless linked first (not at all with O_EXCL).
    pub(super) fn open_tmpfile(&self, path: &[u8], f: OpenFlags, mode: u32) -> Result<Fd> {
        let dir = self.existing(path, true)?;
        if dir.kind != Kind::Dir {
            return Err(Error::NotDir);
        }
        self.checking(|c| c.check(&dir, W | X, "no write permission on the directory"))?;
        let attr = self.fs.tmpfile_as(self.owner(), dir.ino, mode)?;
        self.install(Desc::new(&attr, f))
    }

    /// linkat(2) of the descriptor `fd` itself to `new`: a file made by O_TMPFILE without
    /// O_EXCL gets its first name; a file with links gets one more; any other is ENOENT (an
    /// unlinked file, or O_TMPFILE with O_EXCL), and a directory EPERM, as Linux answers.
    pub fn link_fd(&self, fd: Fd, new: &[u8]) -> Result<Attr> {
        let d = self.desc(fd)?;
        if d.kind == Kind::Dir {
            return Err(Error::Perm("hard link to a directory"));
        }
        let r = self.parent_of(new)?;
        if self.fs.lookup(r.parent, &r.name).is_ok() {
            return Err(Error::Exists);
        }
        self.checking(|c| c.check(&r.dir, W, "no write permission on the directory"))?;
        let now = self.fs.getattr(d.ino)?;
        match (now.links, d.flags.tmpfile && !d.flags.excl) {
            (0, true) => self.fs.link_tmpfile(d.ino, r.parent, &r.name),
            (0, false) => Err(Error::NotFound),
            _ => self.fs.link(d.ino, r.parent, &r.name),
        }
    }
}
