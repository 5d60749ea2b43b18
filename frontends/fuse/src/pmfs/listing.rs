//! Directory listings on the mount: what one open directory handle reads, taken from the
//! library at its first READDIR and again at a rewind.

use super::stats::Op;
use super::PmfsOps;
use crate::ops::R;
use pmkit_fs::DirEntry;
use pmkit_media::Media;
use std::sync::Arc;

/// A directory's entries as one open handle reads them: taken by its first READDIR (none
/// while the kernel answers from its directory cache), again at a rewind.
#[derive(Default)]
pub(super) struct Listing {
    pub(super) entries: Option<Arc<Vec<DirEntry>>>,
}

impl<M: Media> PmfsOps<M> {
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
