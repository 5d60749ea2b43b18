//! The reentrancy guard: set while the shim's own code runs, so the libc calls it makes resolve
//! to libc and not to this library's exports again.

use std::cell::Cell;

thread_local! {
    /// Set while the shim's own code runs: the libc calls it makes (std opening the pool,
    /// mmap, write to stderr) resolve to this library's exports too, and must go to libc.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn busy() -> bool {
    BUSY.with(Cell::get)
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
