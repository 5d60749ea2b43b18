//! FIEMAP on a descriptor: where a regular file's data lies (`Fs::extents`).

use super::{Fd, Posix};
use crate::{Error, Extent, Kind, Result};
use pmkit_media::Media;

impl<M: Media> Posix<M> {
    /// The extents of the file open on `fd` that meet `[off, off + len)` (FS_IOC_FIEMAP).
    pub fn extents(&self, fd: Fd, off: u64, len: u64) -> Result<Vec<Extent>> {
        let d = self.desc(fd)?;
        if d.kind != Kind::File {
            return Err(Error::Invalid("FIEMAP of a non-regular file"));
        }
        self.fs.extents(d.ino, off, len)
    }
}
