//! Access times as Linux keeps them: `relatime` (the default) stores a read's time only when the
//! last access is not after the last change or is a day old, `noatime` never, `strictatime` at
//! every read. The time is one 8-byte store outside any transaction and outside the inode's
//! checksum, not flushed (no fence on a read; as Linux's lazytime): a crash leaves the old time
//! or the new, both valid, and the line reaches the media with the next flush of it or eviction.

use crate::inode::{Inode, ATIME};
use crate::Fs;
use pmkit_media::Media;

/// When a read stores the file's access time (the mount options of the same names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Atime {
    /// When the stored access time is not after the last modification or change, or is at
    /// least a day old (Linux's default).
    #[default]
    Relatime,
    /// Never: reads store nothing.
    Noatime,
    /// At every read.
    Strictatime,
}

/// A day in nanoseconds: relatime's longest wait.
const DAY_NS: i64 = 24 * 3600 * 1_000_000_000;

impl Atime {
    /// `relatime`, `noatime` or `strictatime` (mount's and `PMFS_ATIME`'s words).
    pub fn parse(s: &str) -> Option<Atime> {
        Some(match s {
            "relatime" => Atime::Relatime,
            "noatime" => Atime::Noatime,
            "strictatime" => Atime::Strictatime,
            _ => return None,
        })
    }

    /// Whether a read at `now` of `node` stores `now` as its access time.
    pub(crate) fn due(self, node: &Inode, now: i64) -> bool {
        match self {
            Atime::Noatime => false,
            Atime::Strictatime => true,
            Atime::Relatime => {
                node.atime <= node.mtime
                    || node.atime <= node.ctime
                    || now.saturating_sub(node.atime) >= DAY_NS
            }
        }
    }
}

impl<M: Media> Fs<M> {
    /// A read of `ino` (whose inode is `node`) happened: store its access time if the mount's
    /// rule says so. Caller holds the inode's stripe.
    pub(crate) fn accessed(&self, ino: u64, node: &Inode) {
        if self.opts.atime == Atime::Noatime {
            return; // not even the clock
        }
        let now = crate::clock::now();
        if self.opts.atime.due(node, now) {
            self.pm.store_u64(self.itable.off(ino) + ATIME, now as u64);
        }
    }
}
