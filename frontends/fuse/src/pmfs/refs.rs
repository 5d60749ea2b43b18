//! Opens without OPEN (`--cache long`): the first OPEN is answered ENOSYS, after which the
//! kernel sends no OPEN, RELEASE or FLUSH for regular files and keeps their pages across opens
//! (its `no_open`), so an open and a close cost no round trip. The daemon then cannot count
//! opens, which keep an unlinked file alive in the library; the kernel's references to a file
//! stand in for them: every entry of a regular file it is given counts as an open, and its
//! FORGET (sent when it evicts the inode, soon after the last close of an unlinked file) gives
//! them back, so the last one frees a file unlinked meanwhile.
//!
//! Every mode also counts the kernel's references by inode (`known`): the inodes the kernel may
//! cache, which are all that a peer's change needs to be told of (`peers.rs`).

use parking_lot::Mutex;
use pmkit_fs::{Attr, Fs, Kind};
use pmkit_media::Media;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

/// The handle of a CREATE whose open the library counts (RELEASE gives it back).
pub(crate) const COUNTED: u64 = 1;

pub(crate) struct Refs {
    /// Whether opens go without OPEN at all (`--cache long`; the other modes want theirs).
    pub(crate) no_open: bool,
    /// An OPEN has been answered ENOSYS: the kernel sends no RELEASE for files it opens from
    /// then on, those it creates included.
    refused: AtomicBool,
    /// The kernel's lookup count of each inode it was given an entry of (the root, which it
    /// never forgets, is not counted).
    known: Mutex<HashMap<u64, u64>>,
    /// Known inodes whose attributes the kernel has dropped since it was last given them (its
    /// own write, fallocate or copy drops size, times and blocks; so does a peer's change):
    /// a listing gives them again (`PmfsOps::readdirplus`).
    stale: Mutex<HashSet<u64>>,
}

impl Refs {
    pub(crate) fn new(no_open: bool) -> Refs {
        Refs {
            no_open,
            refused: AtomicBool::new(false),
            known: Mutex::new(HashMap::new()),
            stale: Mutex::new(HashSet::new()),
        }
    }

    /// Count the kernel's new reference to `a` (an entry it is given) as an open of a regular
    /// file. Other kinds are never read through a handle the library must keep alive.
    pub(crate) fn hold<M: Media>(&self, fs: &Fs<M>, a: &Attr) {
        *self.known.lock().entry(a.ino).or_insert(0) += 1;
        self.attrs_sent(a.ino);
        if self.no_open && a.kind == Kind::File {
            // A file removed since the call that named it: the kernel's reference is to an
            // inode the library no longer has, and its FORGET finds nothing to give back.
            let _ = fs.open(a.ino);
        }
    }

    /// The kernel lets go of `nlookup` references to `ino`.
    pub(crate) fn forget<M: Media>(&self, fs: &Fs<M>, ino: u64, nlookup: u64) {
        {
            let mut known = self.known.lock();
            if let Some(n) = known.get_mut(&ino) {
                *n = n.saturating_sub(nlookup);
                if *n == 0 {
                    known.remove(&ino);
                    self.stale.lock().remove(&ino);
                }
            }
        }
        if !self.no_open {
            return;
        }
        for _ in 0..nlookup {
            // Not a file counted here (a directory, a link, an inode since freed): no count
            // to give back, and nothing else to do.
            if fs.release(ino).is_err() {
                break;
            }
        }
    }

    /// Whether the kernel may hold inode `ino` (and so cache its attributes, pages, and names
    /// in it when a directory).
    pub(crate) fn known(&self, ino: u64) -> bool {
        ino == pmkit_fs::ROOT || self.known.lock().contains_key(&ino)
    }

    /// Whether the kernel holds `ino` with its attributes as it was last given them (so a
    /// listing can leave them out).
    pub(crate) fn fresh(&self, ino: u64) -> bool {
        self.known(ino) && !self.stale.lock().contains(&ino)
    }

    /// The kernel was given `ino`'s attributes (a GETATTR or SETATTR reply, an entry).
    pub(crate) fn attrs_sent(&self, ino: u64) {
        self.stale.lock().remove(&ino);
    }

    /// The kernel dropped `ino`'s attributes, or will on this reply (a write's size, times and
    /// blocks). Only inodes it holds are remembered.
    pub(crate) fn attrs_dropped(&self, ino: u64) {
        if self.known(ino) {
            self.stale.lock().insert(ino);
        }
    }

    /// Whether to answer this OPEN ENOSYS (the first, or the few racing it). It gets no
    /// RELEASE; the kernel's reference, counted by `hold`, keeps the file. The flag is set
    /// before the reply, so a CREATE the kernel sends once it has read it sees it.
    pub(crate) fn refuse_open(&self) -> bool {
        if self.no_open {
            self.refused.store(true, Ordering::SeqCst);
        }
        self.no_open
    }

    /// Whether a CREATE's handle is an open to count: while the kernel still sends RELEASE.
    /// Before any OPEN was refused it decided so when it sent the CREATE; a refusal answered
    /// since makes the count skipped, and a RELEASE that may still come has handle 0.
    pub(crate) fn count_create(&self) -> bool {
        !(self.no_open && self.refused.load(Ordering::SeqCst))
    }

    /// Whether a RELEASE of handle `fh` gives an open back.
    pub(crate) fn counted(&self, fh: u64) -> bool {
        !self.no_open || fh == COUNTED
    }
}
