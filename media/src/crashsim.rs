//! Crash simulator: a [`Media`] for tests that records every store, flush and fence per 64-byte
//! cache line and yields the images a power failure could leave.
//!
//! Model (ADR; the full statement and its reasons are in docs/crashsim.md):
//! - A *store* is the part of one `write`/`write_nt` call that falls in one line (or, with
//!   [`CrashSim::with_word_stores`], in one aligned 8-byte word); `store_u64`, a successful
//!   `cas_u64` and a successful `cas_u128` are one store each, never torn.
//! - Stores to one line persist in program order: a crash keeps any prefix of a line's pending
//!   stores, independently per line.
//! - `flush` marks the stores a line has so far to become durable at the next fence; a
//!   non-temporal store marks itself and the line's earlier stores the same way. Stores after
//!   the flush stay pending.
//! - eADR: every visible store is persistent, in program order: a crash keeps a prefix of all
//!   stores since the last fence.
//!
//! [`CrashSim::crash_point`] detaches what a crash now could leave; its [`CrashPoint::images`]
//! enumerates every distinct image while at most [`CrashOpts::k`] lines are pending and a seeded
//! sample beyond. [`check_every_fence`] crashes a workload at every fence and checks each image.

mod driver;
mod point;
mod state;

pub use driver::{check_every_fence, check_every_fence_from, replay, replay_from, CrashReport};
pub use point::{CrashImages, CrashKey, CrashOpts, CrashPoint, KeyParseError, ReplayError};
pub use state::MAX_LINE_STORES;

use crate::{Domain, Fence, Flush, Media, Result, LINE};
use parking_lot::Mutex;
use state::State;
use std::collections::BTreeSet;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Page granularity of [`Media::sync_pages`] (msync writes back whole pages).
const PAGE: usize = 4096;

/// Simulated persistent media. All state sits behind one mutex, so it is `Send + Sync` like a
/// real region; crash points are reproducible only if one thread issues the fences.
pub struct CrashSim {
    state: Mutex<State>,
    /// Injected faults (media errors, failing syncs); not part of any crash image.
    faults: Faults,
    /// The crash hook of a running driver, called at every fence before it takes effect. Held
    /// locked while it runs, so fences from several threads take their crash points one by one.
    hook: Mutex<Option<Hook>>,
}

impl CrashSim {
    /// All-zero media of `len` bytes, ADR domain.
    pub fn new(len: usize) -> CrashSim {
        Self::from_image(vec![0; len])
    }

    /// Media whose content (volatile and durable) is `img`: a post-crash image, to run recovery.
    pub fn from_image(img: Vec<u8>) -> CrashSim {
        CrashSim {
            state: Mutex::new(State::new(img)),
            faults: Faults::default(),
            hook: Mutex::new(None),
        }
    }

    /// Persistence domain. Under [`Domain::Eadr`] every visible store is persistent in program
    /// order; flushes do nothing and a fence only marks a crash point. Switching domains makes
    /// pending stores durable first (meant for set-up, before a workload runs).
    pub fn with_domain(self, d: Domain) -> CrashSim {
        self.state.lock().set_domain(d);
        self
    }

    /// Record write-back and non-temporal stores per aligned 8-byte word instead of per line
    /// piece, so a crash can tear a write at every word (slower; for small tests).
    pub fn with_word_stores(self, on: bool) -> CrashSim {
        self.state.lock().word_stores = on;
        self
    }

    /// Fences issued so far (including `sync_pages` calls).
    pub fn fences(&self) -> u64 {
        self.state.lock().fences
    }

    /// Stores recorded so far.
    pub fn stores(&self) -> u64 {
        self.state.lock().stores
    }

    /// Lines with stores that may or may not survive a crash.
    pub fn pending_lines(&self) -> usize {
        self.state.lock().pending_lines()
    }

    /// Snapshots dropped because a line had more than [`MAX_LINE_STORES`] pending stores.
    pub fn coarsened(&self) -> u64 {
        self.state.lock().coarsened
    }

    /// What reads return now.
    pub fn image(&self) -> Vec<u8> {
        self.state.lock().volatile.clone()
    }

    /// Bytes certainly persistent now (under eADR, the same as [`CrashSim::image`]).
    pub fn durable_image(&self) -> Vec<u8> {
        self.state.lock().durable()
    }

    /// What a crash now (or at any moment since the last fence) could leave, detached from the
    /// simulator; build images with [`CrashPoint::images`] or replay one with
    /// [`CrashPoint::image`].
    pub fn crash_point(&self) -> CrashPoint {
        self.state.lock().crash_point()
    }

    /// Every image a crash now could leave, with its key. Holds all images in memory at once:
    /// prefer `crash_point().images(opts)` for large media.
    pub fn crash_images(&self, opts: &CrashOpts) -> Vec<(CrashKey, Vec<u8>)> {
        self.crash_point().images(opts).collect()
    }

    fn check_range(&self, st: &State, off: usize, len: usize) {
        assert!(
            off <= st.len() && len <= st.len() - off,
            "crashsim: access {off}+{len} outside media of {} bytes",
            st.len()
        );
    }

    /// One atomic store of `src` (8 or 16 bytes, aligned to its size).
    fn store_atomic(&self, st: &mut State, off: usize, src: &[u8]) {
        self.check_range(st, off, src.len());
        assert_eq!(
            off % src.len(),
            0,
            "crashsim: {}-byte atomic access at {off} is not aligned",
            src.len()
        );
        st.store_unit(off, src, false);
    }

    fn load<const N: usize>(&self, st: &State, off: usize) -> [u8; N] {
        self.check_range(st, off, N);
        assert_eq!(
            off % N,
            0,
            "crashsim: {N}-byte atomic access at {off} is not aligned"
        );
        st.volatile[off..off + N].try_into().expect("N bytes")
    }

    /// Install `f` as the crash hook for the lifetime of the returned guard.
    fn install_hook<'a>(&'a self, f: &'a mut (dyn FnMut(&CrashSim) + Send + 'a)) -> HookGuard<'a> {
        let p: NonNull<dyn FnMut(&CrashSim) + Send + 'a> = NonNull::from(f);
        // SAFETY: only the lifetime bound of the trait object changes (same layout). The guard
        // borrows `f` for 'a and empties the slot when dropped, and the slot is only read under
        // its lock by `fence` while the guard lives, so the pointer is never used after 'a.
        let p: NonNull<dyn FnMut(&CrashSim) + Send + 'static> = unsafe { std::mem::transmute(p) };
        let mut slot = self.hook.lock();
        assert!(
            slot.is_none(),
            "crashsim: a crash driver is already running on this media"
        );
        *slot = Some(Hook(p));
        HookGuard {
            sim: self,
            _f: std::marker::PhantomData,
        }
    }
}

/// Lifetime-erased pointer to a driver's crash hook (see [`CrashSim::install_hook`]).
struct Hook(NonNull<dyn FnMut(&CrashSim) + Send + 'static>);

// SAFETY: the pointee is `Send`, and calls are serialized by the `hook` mutex.
unsafe impl Send for Hook {}

struct HookGuard<'a> {
    sim: &'a CrashSim,
    _f: std::marker::PhantomData<&'a mut ()>,
}

impl Drop for HookGuard<'_> {
    fn drop(&mut self) {
        *self.sim.hook.lock() = None;
    }
}

impl std::fmt::Debug for CrashSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("CrashSim")
            .field("len", &st.len())
            .field("domain", &st.domain)
            .field("fences", &st.fences)
            .field("pending_lines", &st.pending_lines())
            .finish()
    }
}

/// Faults a test injects, in the spirit of redb's countdown backend and TigerBeetle's faulty
/// storage: poisoned lines (a load of one is a media error, as on real PM with an
/// uncorrectable error) and `sync_pages` calls that fail.
struct Faults {
    /// Poisoned lines (line index); `any` lets reads skip the set when it is empty.
    poisoned: Mutex<BTreeSet<usize>>,
    any: AtomicBool,
    /// `sync_pages` calls left before they start failing (`u64::MAX`: never).
    syncs_left: AtomicU64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            poisoned: Mutex::new(BTreeSet::new()),
            any: AtomicBool::new(false),
            syncs_left: AtomicU64::new(u64::MAX),
        }
    }
}

/// What a read of a poisoned line hands out where a real load would fault: a pattern that is
/// wrong data for any test, so a system that skips [`Media::first_bad`] is caught.
pub const POISON_FILL: u8 = 0xBD;

impl CrashSim {
    /// Poison the lines covering `[off, off+len)`: [`Media::first_bad`] reports them and reads
    /// return [`POISON_FILL`] there until a store covers a whole line again (as writing a
    /// poisoned sector on real PM clears it).
    pub fn poison(&self, off: usize, len: usize) {
        assert!(
            len > 0 && off + len <= self.len(),
            "poison outside the media"
        );
        let mut set = self.faults.poisoned.lock();
        set.extend(off / LINE..(off + len).div_ceil(LINE));
        self.faults.any.store(true, Ordering::Release);
    }

    /// Lines poisoned now.
    pub fn poisoned_lines(&self) -> usize {
        self.faults.poisoned.lock().len()
    }

    /// Let `n` more `sync_pages` calls succeed, then fail every later one with an I/O error
    /// (as `msync` does when the file system cannot write back).
    pub fn fail_syncs_after(&self, n: u64) {
        self.faults.syncs_left.store(n, Ordering::Release);
    }

    /// Whole lines a store to `[off, off+len)` covers are no longer poisoned.
    fn clear_poison(&self, off: usize, len: usize) {
        if !self.faults.any.load(Ordering::Acquire) || len == 0 {
            return;
        }
        let (first, end) = (off.div_ceil(LINE), (off + len) / LINE);
        if first < end {
            let mut set = self.faults.poisoned.lock();
            let cleared: Vec<usize> = set.range(first..end).copied().collect();
            for line in cleared {
                set.remove(&line);
            }
        }
    }

    /// Overwrite the poisoned parts of a read of `[off, off+dst.len())` with [`POISON_FILL`].
    fn spoil(&self, off: usize, dst: &mut [u8]) {
        if !self.faults.any.load(Ordering::Acquire) || dst.is_empty() {
            return;
        }
        let set = self.faults.poisoned.lock();
        for &line in set.range(off / LINE..(off + dst.len()).div_ceil(LINE)) {
            let start = (line * LINE).max(off) - off;
            let end = ((line + 1) * LINE).min(off + dst.len()) - off;
            dst[start..end].fill(POISON_FILL);
        }
    }
}

impl Media for CrashSim {
    fn len(&self) -> usize {
        self.state.lock().len()
    }

    fn first_bad(&self, off: usize, len: usize) -> Option<usize> {
        if !self.faults.any.load(Ordering::Acquire) || len == 0 {
            return None;
        }
        let set = self.faults.poisoned.lock();
        let line = *set.range(off / LINE..(off + len).div_ceil(LINE)).next()?;
        Some((line * LINE).max(off))
    }

    fn domain(&self) -> Domain {
        self.state.lock().domain
    }

    fn read(&self, off: usize, dst: &mut [u8]) {
        let st = self.state.lock();
        self.check_range(&st, off, dst.len());
        dst.copy_from_slice(&st.volatile[off..off + dst.len()]);
        drop(st);
        self.spoil(off, dst);
    }

    fn write(&self, off: usize, src: &[u8]) {
        let mut st = self.state.lock();
        self.check_range(&st, off, src.len());
        st.store(off, src, false);
        drop(st);
        self.clear_poison(off, src.len());
    }

    fn write_nt(&self, off: usize, src: &[u8]) {
        let mut st = self.state.lock();
        self.check_range(&st, off, src.len());
        st.store(off, src, true);
        drop(st);
        self.clear_poison(off, src.len());
    }

    fn flush(&self, off: usize, len: usize, _how: Flush) {
        let mut st = self.state.lock();
        self.check_range(&st, off, len);
        st.flush(off, len);
    }

    /// The crash point of a running driver is taken here, before the fence takes effect.
    fn fence(&self, _kind: Fence) {
        let mut hook = self.hook.lock();
        if let Some(Hook(f)) = hook.as_mut() {
            // SAFETY: the pointee lives while the slot is set (HookGuard), and holding the lock
            // makes this the only call in progress. The hook reads this media through `&self`
            // methods, which take `state` (not held here).
            unsafe { f.as_mut()(self) };
        }
        self.state.lock().fence();
    }

    /// Flush the pages covering the range, then fence.
    fn sync_pages(&self, off: usize, len: usize) -> Result<()> {
        let left = self.faults.syncs_left.load(Ordering::Acquire);
        if left == 0 {
            return Err(crate::MediaError::io(
                "crashsim",
                "injected sync failure (msync)",
                std::io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        if left != u64::MAX {
            self.faults.syncs_left.store(left - 1, Ordering::Release);
        }
        {
            let mut st = self.state.lock();
            self.check_range(&st, off, len);
            if len > 0 {
                let start = off / PAGE * PAGE;
                let end = (off + len).div_ceil(PAGE) * PAGE;
                let end = end.min(st.len());
                st.flush(start, end - start);
            }
        }
        self.fence(Fence::Sfence);
        Ok(())
    }

    fn load_u64(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.load::<8>(&self.state.lock(), off))
    }

    fn store_u64(&self, off: usize, v: u64) {
        let mut st = self.state.lock();
        self.store_atomic(&mut st, off, &v.to_le_bytes());
    }

    fn cas_u64(&self, off: usize, current: u64, new: u64) -> std::result::Result<u64, u64> {
        let mut st = self.state.lock();
        let actual = u64::from_le_bytes(self.load::<8>(&st, off));
        if actual != current {
            return Err(actual);
        }
        self.store_atomic(&mut st, off, &new.to_le_bytes());
        Ok(actual)
    }

    fn cas_u128(&self, off: usize, current: u128, new: u128) -> std::result::Result<u128, u128> {
        let mut st = self.state.lock();
        let actual = u128::from_le_bytes(self.load::<16>(&st, off));
        if actual != current {
            return Err(actual);
        }
        self.store_atomic(&mut st, off, &new.to_le_bytes());
        Ok(actual)
    }
}

const _: () = assert!(LINE & 15 == 0, "16-byte atomics must not straddle a line");
