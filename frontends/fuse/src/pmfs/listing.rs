//! Directory listings on the mount. Where the kernel keeps listings (`--cache long` and
//! `writeback`), OPENDIR is answered ENOSYS: the kernel then opens directories with no request
//! and no RELEASEDIR (its `no_opendir`), and each READDIR comes with no handle and is answered
//! by position (`Fs::readdir_at`: where each record lives, so a listing resumed after the
//! directory changed neither skips nor repeats an entry that stays). In the other modes a
//! handle reads the listing taken at its first READDIR and again at a rewind.

use super::file_type;
use super::stats::Op;
use super::PmfsOps;
use crate::ops::{AddEntryPlus, PlusEntry, R};
use pmkit_fs::DirEntry;
use pmkit_fs::Kind;
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

    /// Each entry with its attributes, but for files and links whose inodes the kernel already
    /// holds with their attributes as last given (`refs.fresh`: not dropped since by a write of
    /// its own or a peer's change): those go bare, so
    /// a walk over a tree the kernel knows (made or looked up through this mount) pays for no
    /// attributes it has, while a cold `ls -l` still gets every entry's attributes in the
    /// listing. Subdirectories always get theirs: a walk goes into them, and the kernel drops
    /// a directory's entry when its mode changes (as tar's last step does), so a bare one
    /// would cost a LOOKUP on the way in. Under `--cache writeback` every entry gets its
    /// attributes: there the kernel owns sizes and times and drops them where the daemon cannot
    /// follow (measured: without them, `grep -r` after an untar took a GETATTR per file and
    /// twice the time). Every entry given
    /// with attributes but `.` and `..` is a lookup the kernel will give back by FORGET, so it
    /// is held as `lookup` holds one (`refs.rs`), and let go again if it did not fit. An entry
    /// removed since the listing was taken is left out.
    pub(super) fn listing_plus(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        add: &mut AddEntryPlus<'_>,
    ) -> R<()> {
        self.entries(ino, fh, offset, &mut |e, next| {
            let dot = e.name == b"." || e.name == b"..";
            let bare = e.kind != Kind::Dir && !self.cache.writeback() && self.refs.fresh(e.ino);
            if dot || bare {
                let bare = PlusEntry::Bare {
                    ino: e.ino,
                    kind: file_type(e.kind),
                };
                return match add(bare, next, &e.name) {
                    true => ControlFlow::Break(()),
                    false => ControlFlow::Continue(()),
                };
            }
            // The listing may be older than the names: the kernel takes each entry as a
            // lookup, so only a name that still leads to the same inode is handed out.
            let Some(a) = self.fs.lookup(ino, &e.name).ok().filter(|a| a.ino == e.ino) else {
                return ControlFlow::Continue(());
            };
            self.refs.hold(&self.fs, &a);
            let held = a.ino;
            if add(PlusEntry::Full(&self.entry(a)), next, &e.name) {
                self.refs.forget(&self.fs, held, 1);
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })
    }
}
