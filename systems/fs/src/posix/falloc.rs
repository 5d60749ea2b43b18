//! fallocate(2) and posix_fallocate(3) on a descriptor.

use super::{Fd, Posix};
use crate::{Error, Falloc, Kind, Result};
use pmkit_media::Media;

impl<M: Media> Posix<M> {
    /// fallocate(2) mode 0 and posix_fallocate(3): allocate `[off, off + len)`, growing the
    /// file if it ends there.
    pub fn fallocate(&self, fd: Fd, off: u64, len: u64) -> Result<()> {
        self.fallocate_mode(fd, off, len, Falloc::Allocate)
    }

    /// fallocate(2) with a mode: keep the size, punch a hole, zero a range ([`Falloc`]).
    pub fn fallocate_mode(&self, fd: Fd, off: u64, len: u64, mode: Falloc) -> Result<()> {
        let d = self.writable(fd)?;
        if d.kind != Kind::File {
            return Err(Error::Invalid("fallocate of a non-regular file"));
        }
        self.fs.fallocate_mode(d.ino, off, len, mode)
    }
}
