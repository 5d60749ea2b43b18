//! Striped reader-writer locks over page-sized units of the media, like the original driver's
//! per-page spinlock but with a fixed memory cost. A request locks every stripe its pages map
//! to, in ascending stripe order (so two requests never deadlock), without allocating.

use parking_lot::lock_api::RawRwLock as _;
use parking_lot::RawRwLock;

/// Number of stripes: enough that random 4 KiB requests from tens of threads rarely collide.
pub const STRIPES: usize = 1024;
const WORDS: usize = STRIPES / 64;
/// Bytes covered by one lock unit (a page: two blocks in one page share a lock, so page-level
/// protection windows of `pt` never overlap between writers).
pub const UNIT: usize = 4096;

#[repr(align(64))]
struct Padded(RawRwLock);

pub struct Stripes {
    locks: Box<[Padded]>,
}

impl Default for Stripes {
    fn default() -> Self {
        Stripes {
            locks: (0..STRIPES).map(|_| Padded(RawRwLock::INIT)).collect(),
        }
    }
}

impl Stripes {
    /// Lock the stripes covering media bytes `[off, off+len)`, shared or exclusive.
    #[inline]
    pub fn lock(&self, off: usize, len: usize, exclusive: bool) -> StripeGuard<'_> {
        debug_assert!(len > 0);
        let (first, last) = (off / UNIT, (off + len - 1) / UNIT);
        let mut set = [0u64; WORDS];
        if last - first + 1 >= STRIPES {
            set = [u64::MAX; WORDS];
        } else {
            for u in first..=last {
                let s = u % STRIPES;
                set[s / 64] |= 1 << (s % 64);
            }
        }
        for (w, bits) in set.iter().enumerate() {
            let mut b = *bits;
            while b != 0 {
                let s = w * 64 + b.trailing_zeros() as usize;
                b &= b - 1;
                if exclusive {
                    self.locks[s].0.lock_exclusive();
                } else {
                    self.locks[s].0.lock_shared();
                }
            }
        }
        StripeGuard {
            stripes: self,
            set,
            exclusive,
        }
    }

    /// Wait until every request that holds a stripe now has finished (the write barrier's
    /// "wait for in-flight writes"): take and drop each stripe exclusively in turn.
    pub fn wait_idle(&self) {
        for l in self.locks.iter() {
            l.0.lock_exclusive();
            // SAFETY: locked exclusively just above by this thread.
            unsafe { l.0.unlock_exclusive() };
        }
    }
}

/// Held stripes; released on drop.
pub struct StripeGuard<'a> {
    stripes: &'a Stripes,
    set: [u64; WORDS],
    exclusive: bool,
}

impl Drop for StripeGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        for (w, bits) in self.set.iter().enumerate() {
            let mut b = *bits;
            while b != 0 {
                let s = w * 64 + b.trailing_zeros() as usize;
                b &= b - 1;
                // SAFETY: `lock` took exactly these stripes in this mode for this guard.
                unsafe {
                    if self.exclusive {
                        self.stripes.locks[s].0.unlock_exclusive();
                    } else {
                        self.stripes.locks[s].0.unlock_shared();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn exclusive_stripes_exclude_overlapping_requests() {
        let s = Stripes::default();
        let inside = AtomicU32::new(0);
        std::thread::scope(|sc| {
            for t in 0..4 {
                let (s, inside) = (&s, &inside);
                sc.spawn(move || {
                    for i in 0..2000usize {
                        // Requests of 1..3 pages that all map to stripe 5 (directly, by
                        // wrap-around, or starting one page before it).
                        let (off, pages) = match (i + t) % 3 {
                            0 => (5 * UNIT, 1 + i % 3),
                            1 => ((5 + STRIPES) * UNIT, 1 + i % 3),
                            _ => (4 * UNIT, 2 + i % 2),
                        };
                        let _g = s.lock(off, UNIT * pages, true);
                        assert_eq!(
                            inside.fetch_add(1, Ordering::SeqCst),
                            0,
                            "two holders of one stripe"
                        );
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
        // Shared holders coexist; wait_idle then still completes.
        let a = s.lock(0, UNIT, false);
        let b = s.lock(0, UNIT, false);
        drop((a, b));
        s.wait_idle();
        let _all = s.lock(0, UNIT * (STRIPES + 3), true);
    }
}
