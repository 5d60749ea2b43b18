//! Page bitsets: which pages of an object are dirty (written since attach or the last sync) or
//! stale (differ between the two slots). Atomic words so the write-fault handler can set bits.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub struct PageSet {
    words: Box<[AtomicU64]>,
    pages: usize,
}

impl PageSet {
    pub fn new(pages: usize) -> PageSet {
        PageSet {
            words: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            pages,
        }
    }
    pub fn full(pages: usize) -> PageSet {
        let s = PageSet::new(pages);
        s.set_range(0, pages);
        s
    }
    pub fn set(&self, p: usize) {
        assert!(p < self.pages, "page {p} outside set of {}", self.pages);
        self.words[p / 64].fetch_or(1 << (p % 64), Ordering::Relaxed);
    }
    pub fn set_range(&self, first: usize, n: usize) {
        for p in first..first + n {
            self.set(p);
        }
    }
    pub fn contains(&self, p: usize) -> bool {
        self.words[p / 64].load(Ordering::Relaxed) & (1 << (p % 64)) != 0
    }
    pub fn clear(&self) {
        for w in self.words.iter() {
            w.store(0, Ordering::Relaxed);
        }
    }
    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.words
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }
    /// Add every page of `other` to `self`.
    pub fn union(&self, other: &PageSet) {
        assert_eq!(self.pages, other.pages);
        for (a, b) in self.words.iter().zip(other.words.iter()) {
            a.fetch_or(b.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
    /// Runs of consecutive set pages as (first, count), so flushes and copies go in long strides.
    pub fn runs(&self) -> Vec<(usize, usize)> {
        let mut out = vec![];
        let mut p = 0;
        while p < self.pages {
            if self.contains(p) {
                let s = p;
                while p < self.pages && self.contains(p) {
                    p += 1;
                }
                out.push((s, p - s));
            } else {
                p += 1;
            }
        }
        out
    }
    /// The raw words, for the fault handler.
    pub fn words_ptr(&self) -> *const AtomicU64 {
        self.words.as_ptr()
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
        assert_eq!(s.runs(), vec![(3, 2), (64, 2), (129, 1)]);
        assert_eq!(s.count(), 5);
        s.clear();
        assert!(s.runs().is_empty());
    }
}
