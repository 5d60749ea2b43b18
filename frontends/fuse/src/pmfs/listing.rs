//! Directory listings on the mount. Where the kernel keeps listings (`--cache long` and
//! `writeback`), OPENDIR is answered ENOSYS: the kernel then opens directories with no request
//! and no RELEASEDIR (its `no_opendir`), and each READDIR comes with no handle and is answered
//! by position (`Fs::readdir_at`: where each record lives, so a listing resumed after the
//! directory changed neither skips nor repeats an entry that stays). In the other modes a
//! handle reads the listing taken at its first READDIR and again at a rewind.

use super::stats::Op;
use super::PmfsOps;
use crate::ops::R;
use pmkit_fs::DirEntry;
use pmkit_media::Media;
use std::ops::ControlFlow;
use std::sync::Arc;

/// A directory's entries as one open handle reads them: taken by its first READDIR (none
/// while the kernel answers from its directory cache), again at a rewind.
#[derive(Default)]
pub(super) struct Listing {
    pub(super) entries: Option<Arc<Vec<DirEntry>>>,
}

/// The handle of a directory opened without OPENDIR.
const NO_HANDLE: u64 = 0;

/// Entries a READDIR without a handle takes from the library at a time: about what one reply
/// holds, so a reply usually costs one pass over the directory's index.
const BATCH: usize = 128;

impl<M: Media> PmfsOps<M> {
    /// Whether directories open without OPENDIR: where the kernel keeps their listings.
    pub(super) fn no_opendir(&self) -> bool {
        self.cache.keep_pages()
    }

    /// The entries of directory `ino` from `offset` on, each given to `each` with the offset
    /// of the next entry, until `each` breaks (the reply is full): by position without a
    /// handle, else from handle `fh`'s listing.
    pub(super) fn entries(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        each: &mut dyn FnMut(&DirEntry, u64) -> ControlFlow<()>,
    ) -> R<()> {
        if fh != NO_HANDLE {
            let list = self.handle_listing(ino, fh, offset)?;
            for (i, e) in list.iter().enumerate().skip(offset as usize) {
                if each(e, i as u64 + 1).is_break() {
                    break;
                }
            }
            return Ok(());
        }
        let mut pos = offset;
        loop {
            // The statistics count listings: a pass from the start, not each piece of one.
            let batch = match pos {
                0 => self.lib(Op::Readdir, |fs| fs.readdir_at(ino, pos, BATCH))?,
                _ => self.fs.readdir_at(ino, pos, BATCH).map_err(super::errno)?,
            };
            for (p, e) in &batch {
                if each(e, p + 1).is_break() {
                    return Ok(());
                }
            }
            match batch.last() {
                Some((p, _)) if batch.len() == BATCH => pos = p + 1,
                _ => return Ok(()),
            }
        }
    }

    /// A directory's entries, `.` and `..` first (the library lists them).
    fn listing(&self, ino: u64) -> R<Arc<Vec<DirEntry>>> {
        self.lib(Op::Readdir, |fs| fs.readdir(ino)).map(Arc::new)
    }

    /// The listing handle `fh` of directory `ino` reads from `offset`: taken by the first
    /// READDIR (at 0) and again at a rewind (a later one at 0).
    pub(super) fn handle_listing(&self, ino: u64, fh: u64, offset: u64) -> R<Arc<Vec<DirEntry>>> {
        let cached = self
            .listings
            .lock()
            .get(&fh)
            .and_then(|l| l.entries.clone());
        match cached {
            Some(l) if offset > 0 => Ok(l),
            _ => {
                let l = self.listing(ino)?;
                let entries = Some(Arc::clone(&l));
                self.listings.lock().insert(fh, Listing { entries });
                Ok(l)
            }
        }
    }
}
