//! This process's id without a system call per ask.

use std::sync::atomic::Ordering;

/// This process's id, asked once (glibc's `getpid` is a system call) and forgotten in the child
/// of a fork (a `pthread_atfork` handler), so the copy below reads this process and no other.
/// A `vfork` child (or `posix_spawn`'s) shares the parent's memory, so the parent's id reads the
/// same bytes; a raw `clone` without `CLONE_VM` is outside what the shim supports (docs/fs.md).
pub(crate) fn own_pid() -> libc::pid_t {
    static PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn forget() {
        PID.store(0, Ordering::Relaxed);
    }
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: registers a handler that only stores an atomic; this library is never unloaded.
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(forget));
    });
    // SAFETY: getpid cannot fail.
    let p = unsafe { libc::getpid() };
    PID.store(p, Ordering::Relaxed);
    p
}
