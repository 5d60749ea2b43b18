//! libpmemobj: PMDK's transactional object store, the peer of PMO Sync. Transactions are begun
//! without the setjmp macros: `pmemobj_tx_begin(pop, NULL, TX_PARAM_NONE)` with a NULL jmp_buf
//! makes failures return error codes instead of longjmp'ing (libpmemobj/tx_base.h and
//! pool_base.h).

use super::dl::Library;
use crate::workload::value;
use anyhow::{bail, Context, Result};
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;

/// `PMEMoid` (libpmemobj/base.h): passed and returned by value.
#[repr(C)]
#[derive(Clone, Copy)]
struct Oid {
    pool_uuid_lo: u64,
    off: u64,
}

/// `TX_PARAM_NONE` of `enum pobj_tx_param`: ends pmemobj_tx_begin's variadic parameter list.
const TX_PARAM_NONE: c_int = 0;

type CreateFn =
    unsafe extern "C" fn(*const c_char, *const c_char, usize, libc::mode_t) -> *mut c_void;
type RootFn = unsafe extern "C" fn(*mut c_void, usize) -> Oid;
type DirectFn = unsafe extern "C" fn(Oid) -> *mut c_void;
type CloseFn = unsafe extern "C" fn(*mut c_void);
type ErrFn = unsafe extern "C" fn() -> *const c_char;
type TxBeginFn = unsafe extern "C" fn(*mut c_void, *mut c_void, ...) -> c_int;
type TxAddRangeFn = unsafe extern "C" fn(Oid, u64, usize) -> c_int;
type TxCommitFn = unsafe extern "C" fn();
type TxEndFn = unsafe extern "C" fn() -> c_int;

/// The library's entry points the benchmark uses.
pub(crate) struct Lib {
    create: CreateFn,
    root: RootFn,
    direct: DirectFn,
    close: CloseFn,
    errormsg: ErrFn,
    tx_begin: TxBeginFn,
    tx_add_range: TxAddRangeFn,
    tx_commit: TxCommitFn,
    tx_end: TxEndFn,
}

pub(crate) const SONAME: &str = "libpmemobj.so.1";

impl Lib {
    /// Load the library, or say why it cannot be used (see [`super::load`]).
    pub(crate) fn load() -> Result<Lib, String> {
        let lib = Library::open(SONAME)?;
        // SAFETY: PMEMobjpool *pmemobj_create(const char *path, const char *layout,
        // size_t poolsize, mode_t mode), as CreateFn spells it.
        let create = unsafe { lib.func("pmemobj_create") }?;
        // SAFETY: PMEMoid pmemobj_root(PMEMobjpool *pop, size_t size).
        let root = unsafe { lib.func("pmemobj_root") }?;
        // SAFETY: void *pmemobj_direct(PMEMoid oid).
        let direct = unsafe { lib.func("pmemobj_direct") }?;
        // SAFETY: void pmemobj_close(PMEMobjpool *pop).
        let close = unsafe { lib.func("pmemobj_close") }?;
        // SAFETY: const char *pmemobj_errormsg(void).
        let errormsg = unsafe { lib.func("pmemobj_errormsg") }?;
        // SAFETY: int pmemobj_tx_begin(PMEMobjpool *pop, jmp_buf env, ...).
        let tx_begin = unsafe { lib.func("pmemobj_tx_begin") }?;
        // SAFETY: int pmemobj_tx_add_range(PMEMoid oid, uint64_t off, size_t size).
        let tx_add_range = unsafe { lib.func("pmemobj_tx_add_range") }?;
        // SAFETY: void pmemobj_tx_commit(void).
        let tx_commit = unsafe { lib.func("pmemobj_tx_commit") }?;
        // SAFETY: int pmemobj_tx_end(void).
        let tx_end = unsafe { lib.func("pmemobj_tx_end") }?;
        Ok(Lib {
            create,
            root,
            direct,
            close,
            errormsg,
            tx_begin,
            tx_add_range,
            tx_commit,
            tx_end,
        })
    }

    fn error(&self, what: &str) -> anyhow::Error {
        super::error("libpmemobj", self.errormsg, what)
    }
}

/// A pool with a root object of `objs` 4 KiB objects back to back (contiguous, as in the thesis).
pub(crate) struct ObjPool<'l> {
    lib: &'l Lib,
    pop: *mut c_void,
    root: Oid,
    base: *mut u32,
    objs: usize,
}

impl<'l> ObjPool<'l> {
    /// Create the pool file `path` of `size` bytes (must not exist) with the root object.
    pub(crate) fn create(
        lib: &'l Lib,
        path: &Path,
        size: usize,
        objs: usize,
    ) -> Result<ObjPool<'l>> {
        let p = CString::new(path.as_os_str().as_encoded_bytes()).context("pool path")?;
        let layout = CString::new("pmkit-bench-pmo").expect("no NUL");
        // SAFETY: valid C strings; the library creates and maps the file.
        let pop = unsafe { (lib.create)(p.as_ptr(), layout.as_ptr(), size, 0o600) };
        if pop.is_null() {
            return Err(lib.error(&format!(
                "cannot create pool {} of {size} bytes",
                path.display()
            )));
        }
        // SAFETY: pop is an open pool; the root object is allocated zeroed (this touches every
        // page of it, so the timed loop takes no first-touch faults).
        let root = unsafe { (lib.root)(pop, objs * 4096) };
        if root.off == 0 {
            let e = lib.error(&format!(
                "cannot allocate a root object of {} bytes",
                objs * 4096
            ));
            // SAFETY: pop is open and closed once.
            unsafe { (lib.close)(pop) };
            return Err(e);
        }
        // SAFETY: root is a valid oid of this pool.
        let base = unsafe { (lib.direct)(root) }.cast::<u32>();
        Ok(ObjPool {
            lib,
            pop,
            root,
            base,
            objs,
        })
    }

    /// The workload: for each object, one transaction: begin, `pmemobj_tx_add_range` of the
    /// whole object (undo snapshot), the int stores in place, commit, end.
    pub(crate) fn run(&mut self, n: usize, ints: usize) -> Result<()> {
        let lib = self.lib;
        assert!(n.div_ceil(ints) <= self.objs && ints * 4 <= 4096);
        for o in 0..n.div_ceil(ints) {
            let (first, end) = (o * ints, n.min((o + 1) * ints));
            // SAFETY: FFI into libpmemobj on an open pool from this one thread; NULL jmp_buf
            // (errors are returned), parameter list ended by TX_PARAM_NONE.
            let r = unsafe { (lib.tx_begin)(self.pop, std::ptr::null_mut(), TX_PARAM_NONE) };
            if r != 0 {
                // SAFETY: tx_end must follow every tx_begin, even a failed one.
                unsafe { (lib.tx_end)() };
                bail!(lib.error(&format!("pmemobj_tx_begin for object {o}")));
            }
            // SAFETY: inside a transaction; the range is inside the root object.
            let r = unsafe { (lib.tx_add_range)(self.root, (o * 4096) as u64, 4096) };
            if r != 0 {
                // SAFETY: a failed add_range aborted the transaction (stage ONABORT): end it.
                unsafe { (lib.tx_end)() };
                bail!(lib.error(&format!("pmemobj_tx_add_range for object {o}")));
            }
            for i in first..end {
                // SAFETY: element i of the root object (objs * 1024 ints), snapshotted above.
                let p = unsafe { self.base.add(o * 1024 + (i - first)) };
                // SAFETY: p is in the root object, aligned, and no other reference to it exists.
                unsafe { p.write_volatile(value(i)) };
            }
            // SAFETY: in stage WORK; commit then end, as the TX_BEGIN macro does.
            unsafe { (lib.tx_commit)() };
            // SAFETY: after commit.
            let r = unsafe { (lib.tx_end)() };
            if r != 0 {
                bail!(lib.error(&format!("transaction of object {o} ended with {r}")));
            }
        }
        Ok(())
    }

    /// Check the stores are in place.
    pub(crate) fn verify(&self, n: usize, ints: usize) -> Result<(), String> {
        for i in 0..n {
            let (o, k) = (i / ints, i % ints);
            // SAFETY: inside the root object (objs * 1024 ints).
            let p = unsafe { self.base.add(o * 1024 + k) };
            // SAFETY: p is in the root object, aligned; no transaction runs.
            let got = unsafe { p.read_volatile() };
            if got != value(i) {
                return Err(format!("libpmemobj object {o} int {k}: found {got}"));
            }
        }
        Ok(())
    }
}

impl Drop for ObjPool<'_> {
    fn drop(&mut self) {
        // SAFETY: the pool is open and closed once; no pointer into it outlives self.
        unsafe { (self.lib.close)(self.pop) };
    }
}
