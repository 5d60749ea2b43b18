//! Writers wait during a migration: the region being moved is read-only, a store to it faults,
//! and this SIGSEGV handler parks the thread on the region's state word (futex) until the
//! migration has put the new read-write pages in place; then it returns and the store runs again.
//!
//! The handler runs in signal context: it reads a fixed table of atomics and makes the futex
//! system call, nothing else. A fault it does not own (a read, an unmapped address, a region not
//! in use, an address outside every reservation) goes to the handler installed before ours or to
//! the default action, so genuine bugs still crash (the same chaining as `pmkit-obj`'s faults).

use crate::config::MAX_REGIONS;
use crate::sys;
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Most `XMem` instances alive at once in a process.
pub(crate) const MAX_INSTANCES: usize = 64;

/// `si_code` of a fault on a mapped page without the right (linux/include/uapi/asm-generic/siginfo.h).
const SEGV_ACCERR: libc::c_int = 2;

/// Region states, as the handler reads them.
pub(crate) const UNUSED: u32 = 0;
pub(crate) const MAPPED: u32 = 1;
pub(crate) const MIGRATING: u32 = 2;

struct Slot {
    claimed: AtomicU32,
    start: AtomicUsize,
    len: AtomicUsize,
    shift: AtomicUsize,
    /// The slot's state array (leaked, `MAX_REGIONS` long, set once).
    states: AtomicPtr<AtomicU32>,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    claimed: AtomicU32::new(0),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    shift: AtomicUsize::new(0),
    states: AtomicPtr::new(std::ptr::null_mut()),
};
static TABLE: [Slot; MAX_INSTANCES] = [EMPTY; MAX_INSTANCES];
/// Our SIGSEGV handler and the action it replaced.
static OLD: pmkit_media::sigsegv::Chained = pmkit_media::sigsegv::Chained::new();
/// Writes that faulted on a migrating region and waited (process-wide, for tests and stats).
static PARKED: AtomicU64 = AtomicU64::new(0);

/// Migrations begun in this process (see the `MAPPED` case of the handler).
static BEGUN: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// The last fault this thread retried without waiting: (address, `BEGUN` then).
    static RETRIED: Cell<(usize, u64)> = const { Cell::new((0, 0)) };
}

/// A migration is about to write-protect a region (called before the `mprotect`).
pub(crate) fn note_begin() {
    BEGUN.fetch_add(1, Ordering::AcqRel);
}

/// Count `n` writes that waited for a migration outside the handler (userfaultfd).
pub(crate) fn note_parked(n: u64) {
    PARKED.fetch_add(n, Ordering::Relaxed);
}

/// How many writes have waited for a migration in this process.
pub(crate) fn parked() -> u64 {
    PARKED.load(Ordering::Relaxed)
}
/// The leaked state arrays by slot (the handler reads them through `Slot::states`).
type Pool = [Option<&'static [AtomicU32]>; MAX_INSTANCES];
static POOL: parking_lot::Mutex<Pool> = parking_lot::const_mutex([None; MAX_INSTANCES]);

fn install() -> std::io::Result<()> {
    OLD.install(handler)
}

/// A registered reservation: its slot and its region state words (all `UNUSED` at first).
pub(crate) struct Registration {
    slot: usize,
    pub states: &'static [AtomicU32],
}

/// Register the reservation `[start, start+len)` cut into regions of `1 << shift` bytes. `None`
/// when [`MAX_INSTANCES`] reservations are registered already.
pub(crate) fn register(
    start: usize,
    len: usize,
    shift: u32,
) -> std::io::Result<Option<Registration>> {
    install()?;
    let n = len >> shift;
    for (i, s) in TABLE.iter().enumerate() {
        if s.claimed
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            // Each slot's state array is leaked once, at the largest size any reservation can
            // have (MAX_REGIONS), and reused by every later owner of the slot: a handler that
            // read the pointer just before an unregister never touches freed memory, and every
            // index it computes from a registered range is in bounds.
            assert!(
                n <= MAX_REGIONS,
                "reservation of {n} regions over the limit"
            );
            let mut pool = POOL.lock();
            let all: &'static [AtomicU32] = match pool[i] {
                Some(a) => a,
                None => {
                    let v: Vec<AtomicU32> =
                        (0..MAX_REGIONS).map(|_| AtomicU32::new(UNUSED)).collect();
                    let a: &'static [AtomicU32] = Box::leak(v.into_boxed_slice());
                    pool[i] = Some(a);
                    s.states
                        .store(a.as_ptr() as *mut AtomicU32, Ordering::Release);
                    a
                }
            };
            let states = &all[..n];
            for w in states {
                w.store(UNUSED, Ordering::Relaxed);
            }
            s.len.store(len, Ordering::Relaxed);
            s.shift.store(shift as usize, Ordering::Relaxed);
            s.start.store(start, Ordering::Release);
            return Ok(Some(Registration { slot: i, states }));
        }
    }
    Ok(None)
}

/// Stop owning faults in the registration's range (before it is unmapped).
pub(crate) fn unregister(r: &Registration) {
    let s = &TABLE[r.slot];
    s.start.store(0, Ordering::Release);
    s.claimed.store(0, Ordering::Release);
}

/// Whether the faulting access was a write (x86-64: bit 1 of the page-fault error code).
fn is_write(ctx: *mut libc::c_void) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let uc = ctx as *const libc::ucontext_t;
        // SAFETY: the kernel passes a valid ucontext for SA_SIGINFO handlers.
        let err = unsafe { (*uc).uc_mcontext.gregs[libc::REG_ERR as usize] };
        err & 2 != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ctx;
        true
    }
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    if code == SEGV_ACCERR && is_write(ctx) {
        for s in TABLE.iter() {
            let start = s.start.load(Ordering::Acquire);
            if start == 0 || addr < start || addr >= start + s.len.load(Ordering::Relaxed) {
                continue;
            }
            let i = (addr - start) >> s.shift.load(Ordering::Relaxed);
            let ptr = s.states.load(Ordering::Acquire);
            if ptr.is_null() || i >= MAX_REGIONS {
                break;
            }
            // SAFETY: `ptr` is a leaked array of MAX_REGIONS > i atomics, never freed.
            let word = unsafe { &*ptr.add(i) };
            match word.load(Ordering::Acquire) {
                MIGRATING => {
                    PARKED.fetch_add(1, Ordering::Relaxed);
                    while word.load(Ordering::Acquire) == MIGRATING {
                        sys::futex_wait(word, MIGRATING);
                    }
                    return; // the store runs again, against the new read-write pages
                }
                // The migration ended between the fault and this check: retry the store, once.
                // A region is write-protected only by a migration, so a second fault at the same
                // address with no migration begun since is genuine (someone else took the write
                // right away): hand it on instead of retrying forever.
                MAPPED => {
                    let now = (addr, BEGUN.load(Ordering::Acquire));
                    if RETRIED.with(|r| r.replace(now)) != now {
                        return;
                    }
                    break;
                }
                _ => break,
            }
        }
    }
    OLD.chain(sig, info, ctx);
}
