//! Sessions: several [`Posix`] over one [`Fs`], each with its own descriptor table, credentials
//! and mappings, as a pool's server gives one to each client process (docs/fs-sharing.md).
//! A fork's session shares the parent's open file descriptions (offsets and flags), as the
//! kernel's fork does.

use super::{Desc, Posix, Table};
use crate::{Fs, Kind};
use parking_lot::{Mutex, RwLock};
use pmkit_media::Media;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// Most sessions of one file system at once (a server refuses clients past it).
pub const MAX_SESSIONS: usize = 4096;

/// What the sessions of one file system share.
pub(super) struct Common {
    /// Serializes appends (find the end, write there) across descriptors and sessions.
    pub(super) append: Mutex<()>,
    /// Every session's table, to mark a removed directory in all of them.
    tables: Mutex<Vec<Weak<Table>>>,
    /// Record and flock locks (`locks.rs`).
    pub(super) locks: super::locks::Locks,
}

impl Common {
    pub(super) fn new(first: &Arc<Table>) -> Common {
        Common {
            append: Mutex::new(()),
            tables: Mutex::new(vec![Arc::downgrade(first)]),
            locks: Default::default(),
        }
    }

    /// Add a session's table (ended sessions' entries are dropped on the way).
    fn join(&self, t: &Arc<Table>) -> crate::Result<()> {
        let mut ts = self.tables.lock();
        ts.retain(|w| w.strong_count() > 0);
        if ts.len() >= MAX_SESSIONS {
            return Err(crate::Error::Busy("the file system has its most sessions"));
        }
        ts.push(Arc::downgrade(t));
        assert!(ts.len() <= MAX_SESSIONS, "{} sessions", ts.len());
        Ok(())
    }

    /// The open descriptors of directory `ino` in every session.
    pub(super) fn open_dirs(&self, ino: u64) -> Vec<Arc<Desc>> {
        let tables: Vec<Arc<Table>> = self
            .tables
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let mut out = Vec::new();
        for t in tables {
            out.extend(
                t.lock()
                    .iter()
                    .flatten()
                    .filter(|d| d.ino == ino && d.kind == Kind::Dir)
                    .cloned(),
            );
        }
        out
    }
}

impl<M: Media> Posix<M> {
    /// A new session of the same file system: no descriptors, no credentials (checks nothing
    /// until [`Posix::set_cred`]), this session's path limit.
    pub fn session(&self) -> crate::Result<Posix<M>> {
        self.new_session(Vec::new())
    }

    /// A session for a child of fork: the same descriptors, sharing their offsets and flags
    /// with this one (each regular file's open counted again, so either session's close leaves
    /// the other's open), the same credentials, and the same pins of ranges another process
    /// maps (`pins.rs`: the child process keeps the mappings). Views mapped in this process
    /// are not inherited.
    pub fn fork(&self) -> crate::Result<Posix<M>> {
        let fds = self.fds.lock().clone();
        let mut counted = Vec::new();
        for d in fds.iter().flatten().filter(|d| d.kind == Kind::File) {
            if let Err(e) = self.fs.open(d.ino) {
                for ino in counted {
                    let _ = self.fs.release(ino);
                }
                return Err(e);
            }
            counted.push(d.ino);
        }
        let s = self.new_session(fds)?;
        assert_eq!(
            s.open_count(),
            self.open_count(),
            "the child has the parent's descriptors"
        );
        s.set_cred(self.cred());
        // A child of fork keeps its parent's mappings of pool files, so their pins too.
        if let Err(e) = self.fork_pins(&s) {
            drop(s.end());
            return Err(e);
        }
        Ok(s)
    }

    fn new_session(&self, fds: Vec<Option<Arc<Desc>>>) -> crate::Result<Posix<M>> {
        let counted: Vec<u64> = fds
            .iter()
            .flatten()
            .filter(|d| d.kind == Kind::File)
            .map(|d| d.ino)
            .collect();
        assert!(
            fds.len() <= super::MAX_FDS,
            "a table of {} slots",
            fds.len()
        );
        let table = Arc::new(Mutex::new(fds));
        if let Err(e) = self.common.join(&table) {
            for ino in counted {
                let _ = self.fs.release(ino);
            }
            return Err(e);
        }
        Ok(Posix {
            fs: Arc::clone(&self.fs),
            fds: table,
            common: Arc::clone(&self.common),
            maps: Mutex::new(HashMap::new()),
            pins: Mutex::new(HashMap::new()),
            next_pin: std::sync::atomic::AtomicU64::new(1),
            cred: RwLock::new(None),
            path_max: AtomicUsize::new(self.path_max.load(Ordering::Relaxed)),
        })
    }

    /// End this session: unmap its mappings and close its descriptors (what a client that
    /// exits or is killed held). The file system stays mounted for the others; it is given
    /// back.
    pub fn end(self) -> Arc<Fs<M>> {
        self.common.locks.release(self.session_id(), None);
        self.unpin_all();
        for (_, m) in self.maps.into_inner() {
            drop(m.view);
            self.fs.unpin(m.ino, m.off, m.len);
            let _ = self.fs.release(m.ino);
        }
        let fds = std::mem::take(&mut *self.fds.lock());
        assert!(
            self.fds.lock().is_empty(),
            "an ended session holds no descriptor"
        );
        for d in fds.into_iter().flatten() {
            if d.kind != Kind::Dir {
                let _ = self.fs.release(d.ino);
            }
        }
        self.fs
    }

    /// Close every descriptor but those in `keep` (a client that ran exec keeps the ones without
    /// close-on-exec).
    pub fn retain(&self, keep: &[super::Fd]) {
        let gone: Vec<Arc<Desc>> = {
            let mut fds = self.fds.lock();
            let mut gone = Vec::new();
            for (i, slot) in fds.iter_mut().enumerate() {
                if slot.is_some() && !keep.contains(&super::Fd(i as u32)) {
                    gone.extend(slot.take());
                }
            }
            gone
        };
        assert!(
            self.fds
                .lock()
                .iter()
                .enumerate()
                .all(|(i, d)| d.is_none() || keep.contains(&super::Fd(i as u32))),
            "a descriptor outside `keep` is still open"
        );
        for d in gone {
            if d.kind != Kind::Dir {
                let _ = self.fs.release(d.ino);
            }
        }
    }

    /// How many descriptors this session holds.
    pub fn open_count(&self) -> usize {
        self.fds.lock().iter().flatten().count()
    }
}
