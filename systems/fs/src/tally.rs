//! Counters of PM traffic (fences, bytes journaled, transactions, bytes written): the mount's
//! and the calling thread's.
//!
//! No locked instruction counts anything. On x86 a locked add waits for the streamed
//! (non-temporal) lines before it, like a fence: counting the bytes of an append's streamed
//! data with one put a drain between the data and the size the append publishes, which is
//! what the one-fence append exists to avoid. So each thread counts into its own shard with
//! plain loads and stores (no other thread writes it), and a reading sums the shards.

use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Counters of PM traffic since mount.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub fences: u64,
    pub journal_bytes: u64,
    pub transactions: u64,
    pub bytes_written: u64,
}

impl Counters {
    fn plus(self, o: Counters) -> Counters {
        Counters {
            fences: self.fences + o.fences,
            journal_bytes: self.journal_bytes + o.journal_bytes,
            transactions: self.transactions + o.transactions,
            bytes_written: self.bytes_written + o.bytes_written,
        }
    }

    /// What was counted between `earlier` and `self` (two readings of the same counters).
    pub fn since(self, earlier: Counters) -> Counters {
        Counters {
            fences: self.fences - earlier.fences,
            journal_bytes: self.journal_bytes - earlier.journal_bytes,
            transactions: self.transactions - earlier.transactions,
            bytes_written: self.bytes_written - earlier.bytes_written,
        }
    }
}

/// One thread's counts for one mount. Only its thread writes it.
#[derive(Default)]
struct Shard([AtomicU64; 4]);

impl Shard {
    fn add(&self, c: Counters) {
        let n = [c.fences, c.journal_bytes, c.transactions, c.bytes_written];
        for (a, n) in self.0.iter().zip(n) {
            if n != 0 {
                // the owner is the only writer: a load and a store, no read-modify-write
                a.store(a.load(Relaxed) + n, Relaxed);
            }
        }
    }
    fn get(&self) -> Counters {
        let [f, j, t, b] = self.0.each_ref().map(|a| a.load(Relaxed));
        Counters {
            fences: f,
            journal_bytes: j,
            transactions: t,
            bytes_written: b,
        }
    }
}

/// Most threads one mount keeps a shard for; beyond them (and for a thread whose locals are
/// already gone) the counts go to one shared set under a lock (correct, only slower).
pub(crate) const MAX_SHARDS: usize = 1024;

/// A mount's counters.
pub(crate) struct Tally {
    id: u64,
    shards: Mutex<Vec<(libc::pid_t, Arc<Shard>)>>,
    /// For threads beyond `MAX_SHARDS`.
    shared: Mutex<Counters>,
}

thread_local! {
    /// The calling thread's share of every mount's counters: an operation runs in one thread,
    /// so the difference of two readings around it is exactly its own traffic, whatever other
    /// threads do meanwhile (the per-operation statistics of the FUSE mount).
    static MINE: std::cell::Cell<Counters> = const {
        std::cell::Cell::new(Counters {
            fences: 0,
            journal_bytes: 0,
            transactions: 0,
            bytes_written: 0,
        })
    };
    /// The shard of the mount this thread counted for last.
    static LAST: RefCell<Option<(u64, Arc<Shard>)>> = const { RefCell::new(None) };
}

/// The counters of PM traffic made by the calling thread (on any mount) since it started.
pub fn thread_counters() -> Counters {
    MINE.try_with(|m| m.get()).unwrap_or_default()
}

impl Default for Tally {
    fn default() -> Tally {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Tally {
            id: NEXT.fetch_add(1, Relaxed),
            shards: Mutex::new(Vec::new()),
            shared: Mutex::new(Counters::default()),
        }
    }
}

impl Tally {
    /// Add `c` to the mount's counters and to the calling thread's.
    #[inline]
    pub(crate) fn add(&self, c: Counters) {
        // `try_with`: a thread's locals are gone while it exits, and a process's last stores
        // (an LD_PRELOAD shim unmounting at exit) may come from such a thread.
        let _ = MINE.try_with(|m| m.set(m.get().plus(c)));
        let hit = LAST.try_with(|l| match &*l.borrow() {
            Some((id, s)) if *id == self.id => {
                s.add(c);
                true
            }
            _ => false,
        });
        match hit {
            Ok(true) => {}
            Ok(false) => self.add_slow(c),
            Err(_) => self.add_shared(c),
        }
    }

    /// Into the counters every thread without a shard shares, under their lock.
    fn add_shared(&self, c: Counters) {
        let mut sh = self.shared.lock();
        *sh = sh.plus(c);
    }

    #[cold]
    fn add_slow(&self, c: Counters) {
        // the kernel's thread id: `thread::current` may be gone while a thread exits. A tid
        // reused by a later thread takes over a shard whose writer has ended: still one writer.
        // SAFETY: gettid has no arguments and cannot fail.
        let me = unsafe { libc::gettid() };
        let mut shards = self.shards.lock();
        let s = match shards.iter().find(|(t, _)| *t == me) {
            Some((_, s)) => Arc::clone(s),
            None if shards.len() < MAX_SHARDS => {
                let s = Arc::new(Shard::default());
                shards.push((me, Arc::clone(&s)));
                s
            }
            None => {
                drop(shards);
                return self.add_shared(c);
            }
        };
        drop(shards);
        s.add(c);
        let _ = LAST.try_with(|l| *l.borrow_mut() = Some((self.id, s)));
    }

    /// The sum over every thread.
    pub(crate) fn get(&self) -> Counters {
        let shards = self.shards.lock();
        shards
            .iter()
            .fold(*self.shared.lock(), |acc, (_, s)| acc.plus(s.get()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_thread_and_keeps_each_threads_own() {
        let t = Arc::new(Tally::default());
        let other = Tally::default();
        let one = Counters {
            fences: 1,
            journal_bytes: 64,
            transactions: 1,
            bytes_written: 8,
        };
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let t = Arc::clone(&t);
                std::thread::spawn(move || {
                    let before = thread_counters();
                    for _ in 0..1000 {
                        t.add(one);
                    }
                    thread_counters().since(before)
                })
            })
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap().fences, 1000);
        }
        // a second mount used in between does not take the first one's counts
        other.add(one);
        t.add(one);
        let got = t.get();
        assert_eq!(got.fences, 4001);
        assert_eq!(got.journal_bytes, 4001 * 64);
        assert_eq!(other.get().fences, 1);
    }

    /// A count made while the thread's locals are being destroyed (a shim's unmount at exit)
    /// lands in the shared set instead of panicking.
    #[test]
    fn counts_from_a_thread_whose_locals_are_gone() {
        struct AtExit(Arc<Tally>);
        impl Drop for AtExit {
            fn drop(&mut self) {
                self.0.add(Counters {
                    fences: 1,
                    ..Counters::default()
                });
            }
        }
        thread_local! {
            static EXIT: RefCell<Option<AtExit>> = const { RefCell::new(None) };
        }
        let t = Arc::new(Tally::default());
        let t2 = Arc::clone(&t);
        std::thread::spawn(move || {
            // registered before the tally's own locals, so destroyed after them
            EXIT.with(|e| *e.borrow_mut() = Some(AtExit(Arc::clone(&t2))));
            t2.add(Counters {
                fences: 1,
                ..Counters::default()
            });
        })
        .join()
        .unwrap();
        assert_eq!(t.get().fences, 2);
    }
}
