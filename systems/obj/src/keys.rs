//! Protection keys for DRAM shadow buffers, shared by every pool of the process.
//!
//! A keyed buffer is tagged once with its own key and stays `PROT_READ|WRITE` for life; who may
//! touch it is then a per-thread PKRU bit, changed by WRPKRU (no syscall, no TLB flush) at
//! attach and detach. The rule that makes reuse safe: **a key is enabled only in threads that
//! hold an attachment of its buffer** (the attaching thread, and threads that asked for the
//! pointer). A buffer at rest therefore has its key disabled everywhere, and giving the key
//! back to [`give`] lets the next buffer use it. When a detach cannot restore that rule (another
//! thread still has the key enabled and only that thread can clear its own PKRU), the key is
//! [`retire`]d: never handed out or freed again. x86 has 15 keys; [`MAX_BUFFER_KEYS`] bounds
//! what buffers take, so pools' object-area keys and other users keep theirs. Without a key, a
//! buffer falls back to `mprotect` on every attach and detach.

use parking_lot::Mutex;
use pmkit_media::protect::Pkey;
use std::sync::atomic::{AtomicU64, Ordering};

/// Keys buffers may hold at once, process-wide (retired keys count until the process ends).
pub(crate) const MAX_BUFFER_KEYS: usize = 8;

struct Keys {
    free: Vec<Pkey>,
    /// Keys allocated from the kernel for buffers (free, in use or retired).
    issued: usize,
}

static KEYS: Mutex<Keys> = Mutex::new(Keys {
    free: Vec::new(),
    issued: 0,
});

/// A key for a new buffer, or `None` (no pku, the budget is spent, or the kernel has none left).
pub(crate) fn take() -> Option<Pkey> {
    if !pmkit_media::features().pku {
        return None;
    }
    let mut k = KEYS.lock();
    if let Some(key) = k.free.pop() {
        return Some(key);
    }
    if k.issued == MAX_BUFFER_KEYS {
        return None;
    }
    let key = Pkey::alloc().ok()?;
    k.issued += 1;
    Some(key)
}

/// Return the key of a buffer at rest: no thread has it enabled.
pub(crate) fn give(key: Pkey) {
    let mut k = KEYS.lock();
    assert!(k.free.len() < k.issued, "more keys given back than issued");
    k.free.push(key);
}

/// Give up a key some other thread may still have enabled: it is neither reused nor freed (a
/// later `pkey_alloc` could hand the same number to anyone), so it stays allocated for good.
pub(crate) fn retire(key: Pkey) {
    tracing::debug!(
        key = key.id(),
        "retiring a buffer key still enabled in another thread"
    );
    std::mem::forget(key);
}

/// A number naming the calling thread for the life of the process (never reused, unlike the
/// kernel's thread ids).
pub(crate) fn thread_tag() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TAG: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TAG.with(|t| *t)
}
