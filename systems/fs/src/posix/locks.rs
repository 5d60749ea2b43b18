//! Record locks (fcntl's `F_SETLK`/`F_GETLK`, open file description locks) and `flock` locks,
//! one table per `Fs` shared by every session (`session.rs`). The pool's server gives each
//! client process a session, so locks taken by different processes conflict as the kernel's do.
//!
//! - A process lock (`LockScope::Process`) belongs to the session. It goes when the session
//!   closes any descriptor of the file, or ends. A fork's session does not inherit it.
//! - A description lock (`Description`: OFD; `Flock`) belongs to the open file description,
//!   which a fork's session shares. It goes when the description's last descriptor closes
//!   (noticed through a weak reference at the next lock call on the file).
//! - Process and description locks conflict with each other; `flock` locks only with
//!   `flock` locks, as in Linux.
//! - No call waits here: `F_SETLKW` is the caller's loop around `WouldBlock` (the shim sleeps
//!   between tries), so no session's thread is ever held by another's lock. There is no
//!   deadlock detection (EDEADLK).

use super::{Desc, Fd, Posix, Table};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use pmkit_media::Media;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// Most locks held at once over one file system (`NoLocks`, ENOLCK, past it).
pub const MAX_LOCKS: usize = 1 << 16;

/// What a lock request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LockKind {
    Read,
    Write,
    Unlock,
}

/// Whose lock it is (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LockScope {
    Process,
    Description,
    Flock,
}

/// A lock request, or the lock `test_lock` found: bytes `[start, end)` (`end` `u64::MAX`: to
/// any end of the file), and the process id `F_GETLK` reports (-1 for a description's lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lock {
    pub kind: LockKind,
    pub scope: LockScope,
    pub start: u64,
    pub end: u64,
    pub pid: i32,
}

/// What a lock lives as long as: its session's descriptor table (a process lock) or its open
/// file description. A session dropped without `end` leaves no lock behind either.
#[derive(Clone)]
enum Life {
    Session(Weak<Table>),
    Desc(Weak<Desc>),
}

/// A lock held.
struct Held {
    /// The session's table's address (process locks) or the description's.
    owner: usize,
    life: Life,
    flock: bool,
    write: bool,
    start: u64,
    end: u64,
    pid: i32,
}

impl Held {
    fn live(&self) -> bool {
        match &self.life {
            Life::Session(w) => w.strong_count() > 0,
            Life::Desc(w) => w.strong_count() > 0,
        }
    }
    fn process(&self) -> bool {
        matches!(self.life, Life::Session(_))
    }
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start < end && start < self.end
    }
}

/// Every lock of one file system, by inode.
#[derive(Default)]
pub(super) struct Locks {
    by_ino: Mutex<HashMap<u64, Vec<Held>>>,
    /// Locks in `by_ino` (counted under its lock, read without it): a close skips the table
    /// while no lock is held, and no call counts the table by walking it.
    held: AtomicUsize,
}

impl Locks {
    /// Take, change or drop (`Unlock`) `owner`'s lock on `[l.start, l.end)` of `ino`.
    fn set(&self, ino: u64, owner: usize, life: Life, l: &Lock) -> Result<()> {
        let flock = l.scope == LockScope::Flock;
        let mut m = self.by_ino.lock();
        let v = m.entry(ino).or_default();
        let before = v.len();
        v.retain(Held::live);
        // the dead (descriptions closed since) leave the count with the table
        self.held.fetch_sub(before - v.len(), Ordering::Relaxed);
        let live = v.len();
        let write = l.kind == LockKind::Write;
        if l.kind != LockKind::Unlock {
            let blocked = v.iter().any(|h| {
                h.owner != owner
                    && h.flock == flock
                    && h.overlaps(l.start, l.end)
                    && (h.write || write)
            });
            if blocked {
                return Err(Error::WouldBlock);
            }
            if self.held.load(Ordering::Relaxed) + 2 > MAX_LOCKS {
                return Err(Error::NoLocks { max: MAX_LOCKS });
            }
        }
        // The owner's locks over the range are cut out (what lies outside it stays), then the
        // new one goes in: POSIX's replace-and-split.
        let mut out = Vec::with_capacity(v.len() + 2);
        for h in v.drain(..) {
            if h.owner != owner || h.flock != flock || !h.overlaps(l.start, l.end) {
                out.push(h);
                continue;
            }
            if h.start < l.start {
                out.push(Held {
                    end: l.start,
                    life: h.life.clone(),
                    ..h
                });
            }
            if h.end > l.end {
                out.push(Held { start: l.end, ..h });
            }
        }
        if l.kind != LockKind::Unlock {
            out.push(Held {
                owner,
                life,
                flock,
                write,
                start: l.start,
                end: l.end,
                pid: l.pid,
            });
        }
        self.held.fetch_add(out.len(), Ordering::Relaxed);
        self.held.fetch_sub(live, Ordering::Relaxed);
        *v = out;
        if v.is_empty() {
            m.remove(&ino);
        }
        assert!(self.held.load(Ordering::Relaxed) <= MAX_LOCKS, "lock count");
        Ok(())
    }

    /// The first lock of another owner that would block `l` on `ino`.
    fn test(&self, ino: u64, owner: usize, l: &Lock) -> Option<Lock> {
        let flock = l.scope == LockScope::Flock;
        let write = l.kind == LockKind::Write;
        let m = self.by_ino.lock();
        let h = m.get(&ino)?.iter().find(|h| {
            h.live()
                && h.owner != owner
                && h.flock == flock
                && h.overlaps(l.start, l.end)
                && (h.write || write)
        })?;
        Some(Lock {
            kind: if h.write {
                LockKind::Write
            } else {
                LockKind::Read
            },
            scope: match (h.flock, h.process()) {
                (true, _) => LockScope::Flock,
                (false, false) => LockScope::Description,
                (false, true) => LockScope::Process,
            },
            start: h.start,
            end: h.end,
            pid: h.pid,
        })
    }

    /// Drop session `owner`'s process locks: on `ino` (a close of one of its descriptors of
    /// it), or on every file (`None`: the session ends).
    pub(super) fn release(&self, owner: usize, ino: Option<u64>) {
        if self.held.load(Ordering::Relaxed) == 0 {
            return; // the common close: no lock anywhere, no lock taken
        }
        let mut m = self.by_ino.lock();
        let mut dropped = 0;
        m.retain(|&i, v| {
            if ino.is_none_or(|x| x == i) {
                let before = v.len();
                v.retain(|h| h.live() && !(h.owner == owner && h.process()));
                dropped += before - v.len();
            }
            !v.is_empty()
        });
        self.held.fetch_sub(dropped, Ordering::Relaxed);
    }
}

impl<M: Media> Posix<M> {
    /// Take, change or drop a lock on the file open as `fd` (fcntl `F_SETLK`, `F_OFD_SETLK`,
    /// `flock`): `WouldBlock` (EAGAIN) when another owner's lock is in the way. A read lock
    /// needs `fd` open for reading and a write lock for writing (EBADF), except for `flock`.
    pub fn lock(&self, fd: Fd, l: Lock) -> Result<()> {
        let d = self.desc(fd)?;
        check_range(&l)?;
        if l.scope != LockScope::Flock {
            let ok = match l.kind {
                LockKind::Read => d.flags.read,
                LockKind::Write => d.flags.write,
                LockKind::Unlock => true,
            };
            if !ok {
                return Err(Error::BadFd(fd.0));
            }
        }
        let (owner, life) = self.lock_owner(&d, l.scope);
        self.common.locks.set(d.ino, owner, life, &l)
    }

    /// The lock that would block `l` on the file open as `fd` (fcntl `F_GETLK`), if any.
    pub fn test_lock(&self, fd: Fd, l: Lock) -> Result<Option<Lock>> {
        let d = self.desc(fd)?;
        check_range(&l)?;
        let (owner, _) = self.lock_owner(&d, l.scope);
        Ok(self.common.locks.test(d.ino, owner, &l))
    }

    /// This session's id: the address of its descriptor table, unique while it lives.
    pub(super) fn session_id(&self) -> usize {
        Arc::as_ptr(&self.fds) as usize
    }

    /// Who owns a lock of `scope` taken through `d`.
    fn lock_owner(&self, d: &Arc<Desc>, scope: LockScope) -> (usize, Life) {
        match scope {
            LockScope::Process => (self.session_id(), Life::Session(Arc::downgrade(&self.fds))),
            LockScope::Description | LockScope::Flock => {
                (Arc::as_ptr(d) as usize, Life::Desc(Arc::downgrade(d)))
            }
        }
    }
}

fn check_range(l: &Lock) -> Result<()> {
    if l.start >= l.end {
        return Err(Error::Invalid("a lock's range is empty or reversed"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(kind: LockKind, start: u64, end: u64) -> Lock {
        Lock {
            kind,
            scope: LockScope::Process,
            start,
            end,
            pid: 7,
        }
    }

    #[test]
    fn a_range_is_split_and_other_owners_conflict() {
        let t = Locks::default();
        let (s10, s20): (Arc<Table>, Arc<Table>) = (Default::default(), Default::default());
        let life = |s: &Arc<Table>| Life::Session(Arc::downgrade(s));
        t.set(1, 10, life(&s10), &lock(LockKind::Write, 0, 100))
            .unwrap();
        // the owner's own lock never blocks it; another's does where they overlap
        t.set(1, 10, life(&s10), &lock(LockKind::Read, 0, 50))
            .unwrap();
        assert!(t.test(1, 20, &lock(LockKind::Read, 10, 20)).is_none());
        let w = t.test(1, 20, &lock(LockKind::Read, 60, 70)).unwrap();
        assert_eq!(
            (w.kind, w.start, w.end, w.pid),
            (LockKind::Write, 50, 100, 7)
        );
        assert!(matches!(
            t.set(1, 20, life(&s20), &lock(LockKind::Write, 40, 60)),
            Err(Error::WouldBlock)
        ));
        // an unlock in the middle leaves both ends
        t.set(1, 10, life(&s10), &lock(LockKind::Unlock, 20, 80))
            .unwrap();
        t.set(1, 20, life(&s20), &lock(LockKind::Write, 20, 80))
            .unwrap();
        assert!(t.test(1, 30, &lock(LockKind::Read, 85, 90)).is_some());
        // the session's end drops its locks
        t.release(10, None);
        assert!(t.test(1, 30, &lock(LockKind::Read, 0, 20)).is_none());
        t.release(20, Some(1));
        assert!(t.by_ino.lock().is_empty());
    }
}
