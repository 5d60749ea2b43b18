//! PMDK, the peer the atomic-sector and PMO benchmarks are measured against: libpmemblk
//! ([`blk`]) and libpmemobj ([`obj`]), each loaded at run time by the one loader in [`dl`], so
//! pmkit-bench neither links PMDK nor needs it installed to run (a missing library is reported
//! and its column skipped).
//!
//! Why dlopen and not a C helper compiled at bench time: no compiler or headers are needed where
//! the benchmark runs (only the runtime package), and the workload loop is the same Rust code,
//! threads and timer as the other configurations'. Signatures are PMDK 1.12's (libpmemblk.h,
//! libpmemobj/*.h); the ABI is fixed by the soname.

pub(crate) mod blk;
mod dl;
pub(crate) mod obj;

use std::ffi::{c_char, CStr};

/// Load a PMDK library with `load`, after setting `PMEM_IS_PMEM_FORCE=1`: libpmem decides once,
/// when it is loaded, whether a mapping is PM, and with this it flushes a /dev/shm pool like PM
/// (clwb or non-temporal stores + sfence) instead of calling msync. Call it before starting any
/// other thread. Returns the library, if it loaded, and a line saying what happened.
pub(crate) fn load<L>(
    soname: &str,
    load: impl FnOnce() -> Result<L, String>,
) -> (Option<L>, String) {
    std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
    match load() {
        Ok(l) => (
            Some(l),
            format!("{soname} loaded with PMEM_IS_PMEM_FORCE=1"),
        ),
        Err(e) => (None, e),
    }
}

/// The error of a failed PMDK call: `lib: what: ` and the library's message for this thread.
fn error(
    lib: &str,
    errormsg: unsafe extern "C" fn() -> *const c_char,
    what: &str,
) -> anyhow::Error {
    // SAFETY: pmem*_errormsg takes no arguments and returns this thread's last message, a
    // NUL-terminated string owned by the library (never NULL).
    let msg = unsafe { CStr::from_ptr(errormsg()) };
    anyhow::anyhow!("{lib}: {what}: {}", msg.to_string_lossy())
}
