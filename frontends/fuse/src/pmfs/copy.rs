//! COPY_FILE_RANGE: the kernel's copy_file_range(2) on the mount (coreutils' `cp` uses it),
//! answered by the library's `Fs::copy_range` in one request, where the kernel would otherwise
//! copy through its page cache with a READ and a WRITE per piece.

use super::stats::Op;
use super::PmfsOps;
use crate::ops::{CopyRange, R};
use pmkit_fs::Owner;
use pmkit_media::Media;

/// The most one request copies: the reply's count is 32 bits, and the kernel asks no more
/// than this (`UINT_MAX & PAGE_MASK`).
const MOST: u64 = u32::MAX as u64 & !4095;

impl<M: Media> PmfsOps<M> {
    pub(super) fn copy(&self, o: Owner, c: &CopyRange) -> R<u32> {
        if c.flags != 0 {
            return Err(libc::EINVAL);
        }
        // As a write: the kernel leaves clearing set-user-ID and set-group-ID to us
        // (HANDLE_KILLPRIV_V2) and sends no flag for it here; root keeps them (CAP_FSETID).
        self.kill_privs(c.to.0, o.uid != 0)?;
        let (from, to) = (c.from, c.to);
        let n = self.lib(Op::CopyRange, |fs| {
            fs.copy_range(from.0, from.1, to.0, to.1, c.len.min(MOST))
        })?;
        debug_assert!(n <= MOST, "{n} bytes copied, {MOST} at most");
        Ok(n as u32)
    }
}
