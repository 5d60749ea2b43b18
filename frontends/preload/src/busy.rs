//! The reentrancy guard: set while the shim's own code runs, so the libc calls it makes resolve
//! to libc and not to this library's exports again. Until the library's constructor has run,
//! every thread counts as busy: other libraries' constructors run first, and a program's
//! allocator may be initializing then (jemalloc reads `/etc/malloc.conf` with `readlink` under
//! its init lock), so the shim must not allocate or route anything yet.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the constructor ([`ready`]), once the configuration is read.
static READY: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set while the shim's own code runs: the libc calls it makes (std opening the pool,
    /// mmap, write to stderr) resolve to this library's exports too, and must go to libc.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn busy() -> bool {
    !READY.load(Ordering::Acquire) || BUSY.with(Cell::get)
}

/// The shim serves calls from here on (called by the constructor).
pub(crate) fn ready() {
    READY.store(true, Ordering::Release);
}

/// Marks the thread busy until dropped.
pub(crate) struct Busy(bool);

impl Busy {
    pub(crate) fn new() -> Busy {
        Busy(BUSY.with(|b| b.replace(true)))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let was = self.0;
        BUSY.with(|b| b.set(was));
    }
}
