//! Directories removed (rmdir, or replaced by a rename) that a process may still hold, as a
//! working directory or an open handle: Linux's `fstat` of one succeeds with no links, so the
//! kernel's GETATTR for it is answered from here once the library has freed the inode. The
//! kernel asks by inode number alone; the generation (`PmfsOps::gens`) tells a removed
//! directory from a new inode in its slot, whose creation drops the record.

use super::PmfsOps;
use crate::ops::R;
use pmkit_fs::{Attr, Kind};
use pmkit_media::Media;
use std::collections::{HashMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

/// Most removed directories remembered; the oldest is forgotten first (its holders' `fstat`
/// then fails with ENOENT, as every one did before this record existed).
pub(super) const MAX_GONE: usize = 4096;

#[derive(Default)]
pub(super) struct Gone {
    attrs: HashMap<u64, (u64, Attr)>,
    order: VecDeque<u64>,
}

impl Gone {
    /// Remember directory `a` (of generation `gen`) as removed at `now`: no links.
    pub(super) fn record(&mut self, gen: u64, a: Attr, now: i64) {
        if self.attrs.len() >= MAX_GONE {
            if let Some(old) = self.order.pop_front() {
                self.attrs.remove(&old);
            }
        }
        let a = Attr {
            links: 0,
            ctime: now,
            ..a
        };
        if self.attrs.insert(a.ino, (gen, a)).is_none() {
            self.order.push_back(a.ino);
        }
        debug_assert!(self.attrs.len() <= MAX_GONE);
    }

    /// The removed directory in slot `ino`, if the slot still holds generation `gen`.
    pub(super) fn get(&self, ino: u64, gen: u64) -> Option<Attr> {
        self.attrs
            .get(&ino)
            .filter(|(g, _)| *g == gen)
            .map(|&(_, a)| a)
    }

    /// Slot `ino` holds a new inode: forget the removed one.
    pub(super) fn reused(&mut self, ino: u64) {
        if self.attrs.remove(&ino).is_some() {
            self.order.retain(|&i| i != ino);
        }
    }
}

impl<M: Media> PmfsOps<M> {
    /// Run `remove` (an rmdir, or a rename that may replace `name` in `parent`); if it took
    /// away a directory there, remember it for its holders' GETATTR.
    pub(super) fn removing(
        &self,
        parent: u64,
        name: &[u8],
        remove: impl FnOnce() -> R<()>,
    ) -> R<()> {
        let before = self
            .fs
            .lookup(parent, name)
            .ok()
            .filter(|a| a.kind == Kind::Dir);
        remove()?;
        if let Some(a) = before {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i64);
            self.gone.lock().record(self.gen(a.ino), a, now);
        }
        Ok(())
    }
}
