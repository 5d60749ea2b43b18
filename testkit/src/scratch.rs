//! Scratch directories for test pools: in /dev/shm (memory, as PM is; keep pools small), or in
//! the directory a parent test handed its child ([`crate::child`]), which the parent removes
//! because a child killed by a fault cleans up nothing.

use std::path::PathBuf;

/// The variable through which a parent gives its child a directory it will remove.
pub const BASE_VAR: &str = "PMKIT_TEST_SHM_BASE";

/// Where scratch directories go: the parent's directory in a child, else /dev/shm, else the
/// system's temporary directory (a machine without /dev/shm).
pub fn base() -> PathBuf {
    if let Some(b) = std::env::var_os(BASE_VAR) {
        return b.into();
    }
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// A fresh directory under [`base`], removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    scratch_named("pmkit-test")
}

/// As [`scratch`], its name starting with `prefix` (to tell whose leftovers are whose).
pub fn scratch_named(prefix: &str) -> tempfile::TempDir {
    let base = base();
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&base)
        .unwrap_or_else(|e| panic!("cannot make a scratch directory in {}: {e}", base.display()))
}
