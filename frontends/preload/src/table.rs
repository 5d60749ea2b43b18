//! The table of descriptors the shim handed out: kernel numbers standing for pool
//! descriptors. A `vfork` child shares this memory with its parent, so the changes it makes
//! (a shell's `dup2` before exec) go to an overlay of its own, seen only by it, and never close
//! the parent's descriptors.

use crate::busy::busy;
use crate::pid::own_pid;
use crate::pool::close_pool_fd;
use pmkit_fs::posix::Fd;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A descriptor the shim handed out: a kernel descriptor number (an epoll instance, so that
/// the kernel answers any call the shim does not serve with an error, never with data or a
/// change elsewhere) stands for a pool descriptor. dup'd numbers share one `Open`, as they
/// share one open file description in the kernel.
pub(crate) struct Open {
    pub fd: Fd,
    /// open(2)'s flags.
    pub flags: c_int,
    /// The pool path it was opened by (for *at calls relative to a directory).
    pub path: Vec<u8>,
}

impl Drop for Open {
    fn drop(&mut self) {
        close_pool_fd(self.fd);
    }
}

static FDS: Mutex<Option<HashMap<c_int, Arc<Open>>>> = Mutex::new(None);
/// Entries in `FDS`: calls on descriptors skip the lock while it is 0.
static NFDS: AtomicUsize = AtomicUsize::new(0);

/// Changes made by `vfork` children, per child: `Some` a number it made stand for a pool
/// descriptor (`dup2`), `None` one it closed. At most [`MAX_VFORKED`] children are kept (the
/// oldest goes: a child that has exec'd or exited needs none).
type Overlay = (libc::pid_t, HashMap<c_int, Option<Arc<Open>>>);
static VFORKED: Mutex<Vec<Overlay>> = Mutex::new(Vec::new());
/// Entries in `VFORKED`: lookups skip it (and the `getpid` it takes) while it is 0.
static NVFORKED: AtomicUsize = AtomicUsize::new(0);
const MAX_VFORKED: usize = 8;

/// This process's id if it is a `vfork` child (it shares the parent's memory, where the
/// shim's remembered id is the parent's).
fn vfork_child() -> Option<libc::pid_t> {
    // SAFETY: getpid cannot fail (glibc does not cache it).
    let me = unsafe { libc::getpid() };
    (me != own_pid()).then_some(me)
}

/// Record a vfork child's change of `fd`; what it replaces is dropped by the caller unlocked.
fn overlay(me: libc::pid_t, fd: c_int, o: Option<Arc<Open>>) -> Option<Option<Arc<Open>>> {
    let mut v = VFORKED.lock().unwrap_or_else(|e| e.into_inner());
    let i = match v.iter().position(|(p, _)| *p == me) {
        Some(i) => i,
        None => {
            if v.len() == MAX_VFORKED {
                v.remove(0);
            }
            v.push((me, HashMap::new()));
            v.len() - 1
        }
    };
    NVFORKED.store(v.len(), Ordering::Release);
    v[i].1.insert(fd, o)
}

/// The vfork child's own entry for `fd`, if it changed it: `Some(None)` closed.
fn overlaid(fd: c_int) -> Option<Option<Arc<Open>>> {
    if NVFORKED.load(Ordering::Acquire) == 0 {
        return None;
    }
    let me = vfork_child()?;
    let v = VFORKED.lock().ok()?;
    v.iter().find(|(p, _)| *p == me)?.1.get(&fd).cloned()
}

/// The shim's descriptor `fd`, if it is one (never while the shim's own code runs).
pub(crate) fn lookup(fd: c_int) -> Option<Arc<Open>> {
    if busy() {
        return None;
    }
    if let Some(o) = overlaid(fd) {
        return o;
    }
    if NFDS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let g = FDS.lock().ok()?;
    g.as_ref()?.get(&fd).cloned()
}

/// Record `fd` as standing for `o`; an entry it replaces is returned (to drop unlocked).
pub(crate) fn insert(fd: c_int, o: Arc<Open>) -> Option<Arc<Open>> {
    if let Some(me) = vfork_child() {
        drop(overlay(me, fd, Some(o)));
        return None;
    }
    let mut g = FDS.lock().unwrap_or_else(|e| e.into_inner());
    let old = g.get_or_insert_with(HashMap::new).insert(fd, o);
    if old.is_none() {
        NFDS.fetch_add(1, Ordering::AcqRel);
    }
    old
}

/// Every entry of the table, as this process sees it (a vfork child: with its own changes).
pub(crate) fn entries() -> Vec<(c_int, Arc<Open>)> {
    let mut m: HashMap<c_int, Arc<Open>> = {
        let g = FDS.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().cloned().unwrap_or_default()
    };
    if let Some(me) = vfork_child() {
        let v = VFORKED.lock().unwrap_or_else(|e| e.into_inner());
        for (k, o) in v.iter().filter(|(p, _)| *p == me).flat_map(|(_, c)| c) {
            match o {
                Some(o) => m.insert(*k, Arc::clone(o)),
                None => m.remove(k),
            };
        }
    }
    m.into_iter().collect()
}

/// The numbers in the table.
pub(crate) fn numbers() -> Vec<c_int> {
    if NFDS.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    let g = FDS.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()
        .map(|m| m.keys().copied().collect())
        .unwrap_or_default()
}

/// Forget `fd`; its entry is returned (dropping the last one closes the pool descriptor).
pub(crate) fn remove(fd: c_int) -> Option<Arc<Open>> {
    if let Some(me) = vfork_child() {
        drop(overlay(me, fd, None));
        return None;
    }
    if NFDS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut g = FDS.lock().unwrap_or_else(|e| e.into_inner());
    let old = g.as_mut()?.remove(&fd);
    if old.is_some() {
        NFDS.fetch_sub(1, Ordering::AcqRel);
    }
    old
}
