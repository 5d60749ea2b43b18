//! The object area's allocator: a first-fit list of free page extents, kept in DRAM only.
//!
//! It is never persisted: the Object Table is the single source of truth (an extent is allocated
//! exactly when a live entry names it), so `open` rebuilds the free list from the table and a
//! crash can neither leak nor double-allocate space.

use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub(crate) struct Extents {
    /// start -> length, non-overlapping, non-adjacent (merged), page multiples.
    free: BTreeMap<u64, u64>,
}

impl Extents {
    /// Everything in `[start, start+len)` free.
    pub(crate) fn new(start: u64, len: u64) -> Extents {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(start, len);
        }
        Extents { free }
    }

    /// First-fit allocation of `len` bytes.
    pub(crate) fn alloc(&mut self, len: u64) -> Option<u64> {
        assert!(len > 0);
        let (&start, &have) = self.free.iter().find(|(_, &l)| l >= len)?;
        self.free.remove(&start);
        if have > len {
            self.free.insert(start + len, have - len);
        }
        Some(start)
    }

    /// Mark `[start, start+len)` used (rebuild from the table). False if any byte is not free,
    /// which means two table entries overlap.
    pub(crate) fn take(&mut self, start: u64, len: u64) -> bool {
        let Some((&fs, &fl)) = self.free.range(..=start).next_back() else {
            return false;
        };
        if start + len > fs + fl {
            return false;
        }
        self.free.remove(&fs);
        if start > fs {
            self.free.insert(fs, start - fs);
        }
        if fs + fl > start + len {
            self.free.insert(start + len, fs + fl - start - len);
        }
        true
    }

    /// Return `[start, start+len)`, merging with neighbours.
    pub(crate) fn release(&mut self, start: u64, len: u64) {
        let (mut s, mut l) = (start, len);
        if let Some((&ps, &pl)) = self.free.range(..start).next_back() {
            assert!(ps + pl <= start, "double free of {start:#x}+{len}");
            if ps + pl == start {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some((&ns, &nl)) = self.free.range(start..).next() {
            assert!(start + len <= ns, "double free of {start:#x}+{len}");
            if start + len == ns {
                self.free.remove(&ns);
                l += nl;
            }
        }
        self.free.insert(s, l);
    }

    pub(crate) fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }
    pub(crate) fn largest(&self) -> u64 {
        self.free.values().copied().max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Against a model: a byte map of used pages.
        #[test]
        fn matches_page_model(ops in proptest::collection::vec((any::<bool>(), 1u64..6, any::<u8>()), 1..80)) {
            const PAGES: u64 = 64;
            let mut ex = Extents::new(0, PAGES);
            let mut used = vec![false; PAGES as usize];
            let mut live: Vec<(u64, u64)> = vec![];
            for (is_alloc, len, pick) in ops {
                if is_alloc || live.is_empty() {
                    match ex.alloc(len) {
                        Some(s) => {
                            for p in s..s + len { prop_assert!(!used[p as usize]); used[p as usize] = true; }
                            live.push((s, len));
                        }
                        None => {
                            // No run of `len` free pages may exist in the model.
                            let run = used.split(|u| *u).map(|r| r.len() as u64).max().unwrap_or(0);
                            prop_assert!(run < len);
                        }
                    }
                } else {
                    let (s, l) = live.swap_remove(pick as usize % live.len());
                    ex.release(s, l);
                    for p in s..s + l { used[p as usize] = false; }
                }
                prop_assert_eq!(ex.free_bytes(), used.iter().filter(|u| !**u).count() as u64);
            }
        }
    }

    #[test]
    fn take_detects_overlap() {
        let mut ex = Extents::new(0, 10);
        assert!(ex.take(2, 3));
        assert!(!ex.take(4, 2));
        assert!(ex.take(5, 5));
        assert_eq!(ex.largest(), 2);
    }
}
