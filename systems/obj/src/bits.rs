//! Page bitsets: which pages of an object are dirty (written since attach or the last sync) or
//! stale (differ between the two slots). Atomic words so the write-fault handler can set bits.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub(crate) struct PageSet {
    words: Words,
    pages: usize,
}

/// Sets of up to 64 pages (objects up to 256 KiB) keep their word inline: no allocation per
/// attach, and no extra cache miss per object touched by a sync.
#[derive(Debug)]
enum Words {
    Inline(AtomicU64),
    Heap(Box<[AtomicU64]>),
}

impl PageSet {
    pub(crate) fn new(pages: usize) -> PageSet {
        if pages <= 64 {
            return PageSet {
                words: Words::Inline(AtomicU64::new(0)),
                pages,
            };
        }
        PageSet::tracked(pages)
    }
    /// A set whose words stay at one address however the set moves, for the fault handler
    /// ([`Self::words_ptr`]).
    pub(crate) fn tracked(pages: usize) -> PageSet {
        PageSet {
            words: Words::Heap((0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()),
            pages,
        }
    }
    fn words(&self) -> &[AtomicU64] {
        match &self.words {
            Words::Inline(w) => std::slice::from_ref(w),
            Words::Heap(b) => b,
        }
    }
    pub(crate) fn full(pages: usize) -> PageSet {
        let s = PageSet::new(pages);
        s.set_range(0, pages);
        s
    }
    #[cfg(test)]
    pub(crate) fn set(&self, p: usize) {
        assert!(p < self.pages, "page {p} outside set of {}", self.pages);
        self.words()[p / 64].fetch_or(1 << (p % 64), Ordering::Relaxed);
    }
    pub(crate) fn set_range(&self, first: usize, n: usize) {
        assert!(
            first + n <= self.pages,
            "pages {first}+{n} outside set of {}",
            self.pages
        );
        // A word at a time: one atomic OR per 64 pages.
        let mut p = first;
        while p < first + n {
            let k = (first + n - p).min(64 - p % 64);
            let mask = if k == 64 {
                !0
            } else {
                ((1u64 << k) - 1) << (p % 64)
            };
            self.words()[p / 64].fetch_or(mask, Ordering::Relaxed);
            p += k;
        }
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.words().iter().all(|w| w.load(Ordering::Relaxed) == 0)
    }
    pub(crate) fn contains(&self, p: usize) -> bool {
        debug_assert!(p < self.pages, "page {p} outside set of {}", self.pages);
        self.words()[p / 64].load(Ordering::Relaxed) & (1 << (p % 64)) != 0
    }
    pub(crate) fn clear(&self) {
        for w in self.words().iter() {
            w.store(0, Ordering::Relaxed);
        }
    }
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.words()
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }
    /// Add every page of `other` to `self`.
    pub(crate) fn union(&self, other: &PageSet) {
        assert_eq!(self.pages, other.pages);
        for (a, b) in self.words().iter().zip(other.words().iter()) {
            let b = b.load(Ordering::Relaxed);
            if b != 0 {
                a.fetch_or(b, Ordering::Relaxed);
            }
        }
    }
    /// Runs of consecutive set pages as (first, count), so flushes and copies go in long strides.
    /// Reads the bits as it goes (no allocation: this runs on every sync).
    pub(crate) fn runs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut p = 0;
        std::iter::from_fn(move || {
            while p < self.pages && !self.contains(p) {
                // Skip empty words whole.
                if p.is_multiple_of(64) && self.words()[p / 64].load(Ordering::Relaxed) == 0 {
                    p += 64;
                } else {
                    p += 1;
                }
            }
            if p >= self.pages {
                return None;
            }
            let s = p;
            while p < self.pages && self.contains(p) {
                p += 1;
            }
            Some((s, p - s))
        })
    }
    /// The raw words, for the fault handler: only of a [`Self::tracked`] set (an inline word
    /// moves with the set).
    pub(crate) fn words_ptr(&self) -> *const AtomicU64 {
        match &self.words {
            Words::Heap(b) => b.as_ptr(),
            Words::Inline(_) => panic!("an inline page set has no fixed address: use tracked()"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn runs_and_counts() {
        let s = PageSet::new(130);
        s.set_range(3, 2);
        s.set(64);
        s.set(65);
        s.set(129);
        assert_eq!(
            s.runs().collect::<Vec<_>>(),
            vec![(3, 2), (64, 2), (129, 1)]
        );
        assert_eq!(s.count(), 5);
        assert!(!s.is_empty());
        s.clear();
        assert!(s.is_empty());
        assert_eq!(s.runs().count(), 0);
        s.set_range(60, 70);
        assert_eq!(s.runs().collect::<Vec<_>>(), vec![(60, 70)]);
        assert_eq!(s.count(), 70);
        let f = PageSet::full(128);
        assert_eq!(f.runs().collect::<Vec<_>>(), vec![(0, 128)]);
    }
}
