//! Write-fault dirty tracking: an attached shadow is mapped read-only; the first store to each
//! page faults, this handler records the page in the attachment's dirty set and makes the page
//! writable, and the store is retried. One fault per page per sync, no work per store, and it
//! works for raw pointers handed to C, which an explicit dirty API cannot guarantee.
//!
//! The handler runs in signal context: it touches only a fixed table of atomics and calls
//! `mprotect` (a plain syscall). A fault outside every registered range goes to the handler
//! that was installed before ours (Rust's stack-overflow guard) or, if none, to the default
//! action, so genuine protection faults (a write to a read-only or detached object) still kill.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Most shadows tracked at once in the process.
pub(crate) const MAX_TRACKED: usize = 1024;
use crate::layout::PAGE;

struct Slot {
    claimed: AtomicBool,
    start: AtomicUsize,
    len: AtomicUsize,
    words: AtomicPtr<AtomicU64>,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    claimed: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    words: AtomicPtr::new(std::ptr::null_mut()),
};
static TABLE: [Slot; MAX_TRACKED] = [EMPTY; MAX_TRACKED];
/// Our SIGSEGV handler and the action it replaced.
static OLD: pmkit_media::sigsegv::Chained = pmkit_media::sigsegv::Chained::new();

fn install() -> std::io::Result<()> {
    OLD.install(handler)
}

/// Track write faults in `[start, start+len)` (page aligned) into the bitset at `words`, which
/// must stay alive until [`unregister`]. `None` when [`MAX_TRACKED`] ranges are tracked already.
pub(crate) fn register(
    start: *mut u8,
    len: usize,
    words: *const AtomicU64,
) -> std::io::Result<Option<usize>> {
    assert!((start as usize).is_multiple_of(PAGE) && len.is_multiple_of(PAGE) && len > 0);
    install()?;
    for (i, s) in TABLE.iter().enumerate() {
        if s.claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            s.len.store(len, Ordering::Relaxed);
            s.words.store(words as *mut AtomicU64, Ordering::Relaxed);
            s.start.store(start as usize, Ordering::Release);
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Stop tracking slot `i`. The caller changes the range's rights only after this returns.
pub(crate) fn unregister(i: usize) {
    let s = &TABLE[i];
    s.start.store(0, Ordering::Release);
    s.words.store(std::ptr::null_mut(), Ordering::Relaxed);
    s.claimed.store(false, Ordering::Release);
}

/// `si_code` of a protection-key fault (linux/include/uapi/asm-generic/siginfo.h).
const SEGV_PKUERR: libc::c_int = 4;

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    // A key fault in a tracked buffer is a thread without the buffer's key (not a first
    // store): opening the page would not help, the store would fault forever.
    if code == SEGV_PKUERR {
        OLD.chain(sig, info, ctx);
        return;
    }
    for s in TABLE.iter() {
        let start = s.start.load(Ordering::Acquire);
        if start != 0 && addr >= start && addr < start + s.len.load(Ordering::Relaxed) {
            let words = s.words.load(Ordering::Relaxed);
            if words.is_null() {
                break;
            }
            let page = (addr - start) / PAGE;
            // SAFETY: `words` covers every page of the range (register's contract) and the
            // page is inside our own mapping.
            unsafe {
                (*words.add(page / 64)).fetch_or(1 << (page % 64), Ordering::Relaxed);
                let p = (start + page * PAGE) as *mut libc::c_void;
                if libc::mprotect(p, PAGE, libc::PROT_READ | libc::PROT_WRITE) == 0 {
                    return;
                }
            }
            break;
        }
    }
    OLD.chain(sig, info, ctx);
}
