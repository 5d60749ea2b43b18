//! How many pointers each shared data block has (reflink: `clone.rs`, `share.rs`): kept by the
//! allocator beside its bitmaps, never on the media. The walk counts them from the trees, the
//! clean-unmount checkpoint saves them, and `Tx::commit` adds what a clone gives and releases
//! what a transaction drops: a block is free only once its last pointer is gone.

use crate::blockhash::BlockMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The shared blocks: for each, how many pointers it has beyond the first.
#[derive(Debug, Default)]
pub(crate) struct Shares {
    extra: BlockMap<u32>,
    /// `extra.len()`, read without the allocator's lock by every write (`Fs::any_shared`).
    count: Arc<AtomicUsize>,
}

impl Shares {
    /// The counts of `extra` (pointers beyond the first, by block).
    pub(crate) fn from_extra(extra: HashMap<u64, u32>) -> Shares {
        debug_assert!(extra.values().all(|&n| n > 0));
        let s = Shares {
            count: Arc::new(AtomicUsize::new(extra.len())),
            extra: extra.into_iter().collect(),
        };
        s.check();
        s
    }
    /// The count readers without the lock see.
    pub(crate) fn counter(&self) -> Arc<AtomicUsize> {
        self.count.clone()
    }
    /// Pointers to `b` beyond the first (0: not shared).
    pub(crate) fn extra(&self, b: u64) -> u32 {
        self.extra.get(&b).copied().unwrap_or(0)
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.extra.is_empty()
    }
    pub(crate) fn len(&self) -> usize {
        self.extra.len()
    }
    /// Every shared block with its extra pointers, in block order (the checkpoint's).
    pub(crate) fn sorted(&self) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = self.extra.iter().map(|(&b, &n)| (b, n)).collect();
        v.sort_unstable();
        v
    }
    /// One more pointer to `b` (a block in use).
    pub(crate) fn add(&mut self, b: u64) {
        *self.extra.entry(b).or_default() += 1;
        self.check();
    }
    /// One pointer to `b` fewer: true when it was the last, so the block is free now.
    pub(crate) fn release(&mut self, b: u64) -> bool {
        let Some(n) = self.extra.get_mut(&b) else {
            return true;
        };
        *n -= 1;
        if *n == 0 {
            self.extra.remove(&b);
        }
        self.check();
        false
    }
    fn check(&self) {
        self.count.store(self.extra.len(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_release_frees() {
        let mut s = Shares::default();
        assert!(s.release(9), "an unshared block is freed at once");
        s.add(9);
        s.add(9);
        assert_eq!((s.extra(9), s.len()), (2, 1));
        assert!(!s.release(9));
        assert!(!s.release(9));
        assert!(s.is_empty() && s.counter().load(Ordering::Relaxed) == 0);
        assert!(s.release(9));
    }
}
