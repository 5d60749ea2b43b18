//! The poison state of one gate: the first store that failed, kept for good (see the rule in
//! the module docs of `guard`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The first store that failed (a `pwrite` in `kernel` mode, an `mprotect` or `mmap` that
/// opens a window): set once, never cleared.
#[derive(Default)]
pub struct Poison {
    set: AtomicBool,
    why: OnceLock<String>,
}

impl Poison {
    #[inline]
    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }
    /// Record the failure `why`; the first caller says so in the log.
    pub fn set(&self, why: String) {
        if self.why.set(why.clone()).is_ok() {
            self.set.store(true, Ordering::Release);
            tracing::error!(
                "a store to PM failed ({why}); every later store is dropped and writes fail \
                 until the media is opened again, which recovers it as after a crash"
            );
        }
    }
    pub fn why(&self) -> Option<&str> {
        self.why.get().map(String::as_str)
    }
}
