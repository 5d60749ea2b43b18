//! The current directory when it is inside the pool (the kernel cannot change into a pool
//! directory): the value `cwd`'s calls keep and `state::route` resolves relative paths against.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static VCWD: Mutex<Option<Vec<u8>>> = Mutex::new(None);
static HAS: AtomicBool = AtomicBool::new(false);

/// The current directory when it is inside the pool: its full (prefix-included) path.
pub(crate) fn get() -> Option<Vec<u8>> {
    if !HAS.load(Ordering::Acquire) {
        return None;
    }
    VCWD.lock().ok()?.clone()
}

pub(crate) fn set(v: Option<Vec<u8>>) {
    let mut g = VCWD.lock().unwrap_or_else(|e| e.into_inner());
    HAS.store(v.is_some(), Ordering::Release);
    *g = v;
}
