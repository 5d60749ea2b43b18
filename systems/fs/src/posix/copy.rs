//! copy_file_range(2) between two descriptors of the pool: `Fs::copy_range` under the
//! descriptors' rules (a readable source, a writable destination not open for appending, both
//! regular files), at the given offsets or at the descriptors' own, which advance.

use super::{Desc, Fd, Posix};
use crate::{Error, Kind, Result};
use pmkit_media::Media;
use std::sync::Arc;

/// The most one call copies: Linux's `MAX_RW_COUNT` (`INT_MAX & PAGE_MASK`).
pub(crate) const MAX_COPY: u64 = 0x7fff_f000;

impl<M: Media> Posix<M> {
    /// Copy up to `len` bytes from `fd_in` at `off_in` (`None`: its offset, which advances) to
    /// `fd_out` at `off_out` (likewise); the bytes copied, short at the source's end.
    pub fn copy_range(
        &self,
        fd_in: Fd,
        off_in: Option<u64>,
        fd_out: Fd,
        off_out: Option<u64>,
        len: u64,
    ) -> Result<u64> {
        let (src, dst) = self.ends(fd_in, fd_out)?;
        match (src.kind, dst.kind) {
            (Kind::File, Kind::File) => {}
            (_, Kind::Dir) => return Err(Error::IsDir),
            _ => return Err(Error::Invalid("copy_file_range of a non-regular file")),
        }
        self.kill_privs_for_write(dst.ino)?;
        let from = off_in.unwrap_or_else(|| *src.off.lock());
        let to = off_out.unwrap_or_else(|| *dst.off.lock());
        let n = self
            .fs
            .copy_range(src.ino, from, dst.ino, to, len.min(MAX_COPY))?;
        debug_assert!(n <= len.min(MAX_COPY), "{n} bytes copied of {len}");
        if off_in.is_none() {
            *src.off.lock() = from + n;
        }
        if off_out.is_none() {
            *dst.off.lock() = to + n;
        }
        Ok(n)
    }
}

impl<M: Media> Posix<M> {
    /// FICLONE (`len` 0 from offset 0 to 0) and FICLONERANGE: `fd_out`'s bytes at `off_out`
    /// share `fd_in`'s blocks at `off_in` (`Fs::clone_range`, its rules), under the descriptors'
    /// rules as Linux's ioctls have them: a readable source, a writable destination not open
    /// for appending (EBADF), regular files. Offsets of the descriptors do not move.
    pub fn clone_range(
        &self,
        fd_in: Fd,
        off_in: u64,
        fd_out: Fd,
        off_out: u64,
        len: u64,
    ) -> Result<u64> {
        let (src, dst) = self.ends(fd_in, fd_out)?;
        match (src.kind, dst.kind) {
            (Kind::File, Kind::File) => {}
            // Linux's remap checks name a directory on either side EISDIR.
            (Kind::Dir, _) | (_, Kind::Dir) => return Err(Error::IsDir),
            _ => return Err(Error::Invalid("a clone of a non-regular file")),
        }
        self.kill_privs_for_write(dst.ino)?;
        self.fs.clone_range(src.ino, off_in, dst.ino, off_out, len)
    }

    /// The source and destination descriptors of a copy or a clone: a readable one, and a
    /// writable one not open for appending (EBADF, as Linux answers).
    fn ends(&self, fd_in: Fd, fd_out: Fd) -> Result<(Arc<Desc>, Arc<Desc>)> {
        let src = self.readable(fd_in)?;
        let dst = self.writable(fd_out)?;
        if dst.flags.append {
            return Err(Error::BadFd(fd_out.0));
        }
        Ok((src, dst))
    }
}
