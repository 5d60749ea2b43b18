//! This process's id without a system call per ask.

use std::sync::atomic::{AtomicI32, Ordering};

/// This process's id, set by the library's constructor ([`init`]) and again in the child of a
/// fork (a `pthread_atfork` handler), so it is never unset when a `vfork` child runs. A `vfork`
/// child (or `posix_spawn`'s) shares the parent's memory: were the id asked for the first time
/// there, the child's id would stay behind for the parent, which would then take itself for a
/// vfork child (a shell's redirections after its first command were lost). A raw `clone`
/// without `CLONE_VM` is outside what the shim supports (docs/fs.md).
static PID: AtomicI32 = AtomicI32::new(0);

extern "C" fn refresh() {
    // SAFETY: getpid cannot fail and is async-signal-safe (a fork child handler may run where
    // only such calls are allowed).
    PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
}

/// Remember this process's id, and refresh it in every fork child (the constructor).
pub(crate) fn init() {
    refresh();
    // SAFETY: registers a handler that only stores an atomic; this library is never unloaded.
    unsafe { libc::pthread_atfork(None, None, Some(refresh)) };
}

/// This process's id (before the constructor: asked each time, never stored).
pub(crate) fn own_pid() -> libc::pid_t {
    match PID.load(Ordering::Relaxed) {
        // SAFETY: getpid cannot fail.
        0 => unsafe { libc::getpid() },
        p => p,
    }
}
