//! libpmemblk: PMDK's pool of atomically written blocks (BTT-based), the peer of atomic PMBD.

use super::dl::Library;
use anyhow::{Context, Result};
use std::ffi::{c_char, c_int, c_longlong, c_void, CString};
use std::path::Path;

pub(crate) const SONAME: &str = "libpmemblk.so.1";
/// The block size of the pools made here.
pub(crate) const BS: usize = 4096;

type CreateFn = unsafe extern "C" fn(*const c_char, usize, usize, libc::mode_t) -> *mut c_void;
type WriteFn = unsafe extern "C" fn(*mut c_void, *const c_void, c_longlong) -> c_int;
type ReadFn = unsafe extern "C" fn(*mut c_void, *mut c_void, c_longlong) -> c_int;
type NblockFn = unsafe extern "C" fn(*mut c_void) -> usize;
type CloseFn = unsafe extern "C" fn(*mut c_void);
type ErrFn = unsafe extern "C" fn() -> *const c_char;

/// The entry points used (signatures from PMDK 1.12's libpmemblk.h).
#[derive(Clone, Copy)]
pub(crate) struct Lib {
    create: CreateFn,
    write: WriteFn,
    read: ReadFn,
    nblock: NblockFn,
    close: CloseFn,
    errormsg: ErrFn,
}

impl Lib {
    /// Load the library, or say why it cannot be used (see [`super::load`]).
    pub(crate) fn load() -> Result<Lib, String> {
        let lib = Library::open(SONAME)?;
        // SAFETY: PMEMblkpool *pmemblk_create(const char *path, size_t bsize, size_t poolsize,
        // mode_t mode), as CreateFn spells it.
        let create = unsafe { lib.func("pmemblk_create") }?;
        // SAFETY: int pmemblk_write(PMEMblkpool *pbp, const void *buf, long long blockno).
        let write = unsafe { lib.func("pmemblk_write") }?;
        // SAFETY: int pmemblk_read(PMEMblkpool *pbp, void *buf, long long blockno).
        let read = unsafe { lib.func("pmemblk_read") }?;
        // SAFETY: size_t pmemblk_nblock(PMEMblkpool *pbp).
        let nblock = unsafe { lib.func("pmemblk_nblock") }?;
        // SAFETY: void pmemblk_close(PMEMblkpool *pbp).
        let close = unsafe { lib.func("pmemblk_close") }?;
        // SAFETY: const char *pmemblk_errormsg(void).
        let errormsg = unsafe { lib.func("pmemblk_errormsg") }?;
        Ok(Lib {
            create,
            write,
            read,
            nblock,
            close,
            errormsg,
        })
    }

    fn error(&self, what: &str) -> anyhow::Error {
        super::error("libpmemblk", self.errormsg, what)
    }
}

/// An open pool of [`BS`]-byte blocks. libpmemblk is thread-safe (its own lanes).
pub(crate) struct Pool {
    lib: &'static Lib,
    pbp: *mut c_void,
}

// SAFETY: PMEMblkpool's calls are thread-safe (libpmemblk(7)); the pointer is only passed to
// them, and closed once in Drop.
unsafe impl Send for Pool {}
// SAFETY: as for Send: every call through &Pool is one of libpmemblk's thread-safe calls.
unsafe impl Sync for Pool {}

impl Pool {
    /// Create pool file `path` (must not exist) of `size` bytes with [`BS`]-byte blocks.
    pub(crate) fn create(lib: &Lib, path: &Path, size: u64) -> Result<Pool> {
        // The pool outlives nothing but the library, which is never unloaded.
        let lib: &'static Lib = Box::leak(Box::new(*lib));
        let p = CString::new(path.as_os_str().as_encoded_bytes()).context("pool path")?;
        // SAFETY: a valid C string; the library creates and maps the file.
        let pbp = unsafe { (lib.create)(p.as_ptr(), BS, size as usize, 0o600) };
        if pbp.is_null() {
            return Err(lib.error(&format!(
                "cannot create pool {} of {size} bytes",
                path.display()
            )));
        }
        Ok(Pool { lib, pbp })
    }

    pub(crate) fn nblock(&self) -> u64 {
        // SAFETY: an open pool.
        let n = unsafe { (self.lib.nblock)(self.pbp) };
        n as u64
    }

    pub(crate) fn write(&self, buf: &[u8], block: u64) -> Result<()> {
        assert_eq!(buf.len(), BS);
        // SAFETY: an open pool; buf holds one block; block < nblock (the callers' range).
        let r = unsafe { (self.lib.write)(self.pbp, buf.as_ptr().cast(), block as c_longlong) };
        if r != 0 {
            return Err(self.lib.error(&format!("pmemblk_write of block {block}")));
        }
        Ok(())
    }

    pub(crate) fn read(&self, buf: &mut [u8], block: u64) -> Result<()> {
        assert_eq!(buf.len(), BS);
        // SAFETY: as for write; buf is writable and one block long.
        let r = unsafe { (self.lib.read)(self.pbp, buf.as_mut_ptr().cast(), block as c_longlong) };
        if r != 0 {
            return Err(self.lib.error(&format!("pmemblk_read of block {block}")));
        }
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: open, closed once.
        unsafe { (self.lib.close)(self.pbp) };
    }
}
