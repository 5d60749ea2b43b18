//! One tag's allocator over the regions it owns. Every piece of metadata lives here, in DRAM:
//! the page map, the slabs and their free stacks, the free page runs. Nothing is ever written
//! into a region, so a region can be copied and remapped (migration) without the heap noticing.
//!
//! Addresses are handled as numbers: page `pg` is `[base + pg·PAGE, base + (pg+1)·PAGE)` and
//! lies in region `pg / pages_per_region`. Small objects come from slabs of a size class; large
//! objects are runs of whole pages, best fit, coalesced on free inside their region.

use crate::classes::{self, SLAB_PAGES};
use crate::config::PAGE;
use crate::sides::Sides;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What a page of a region is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageUse {
    Free,
    /// Part of slab `id`.
    Slab(u32),
    /// First page of a large object of this many pages.
    LargeHead(u32),
    LargeTail,
}

struct RegionPages {
    pages: Vec<PageUse>,
    /// Bytes of live objects in the region.
    live: usize,
}

struct Slab {
    first_pg: usize,
    class: usize,
    /// One bit per object: set while it is free (bits past the last object are clear).
    free_bits: Vec<u64>,
    /// Free objects, and the lowest word of `free_bits` that may have a set bit.
    nfree: usize,
    hint: usize,
    in_partial: bool,
}

impl Slab {
    fn new(first_pg: usize, class: usize) -> Slab {
        let n = classes::per_slab(class);
        let mut free_bits = vec![!0u64; n.div_ceil(64)];
        if !n.is_multiple_of(64) {
            *free_bits.last_mut().expect("at least one word") = (1u64 << (n % 64)) - 1;
        }
        Slab {
            first_pg,
            class,
            free_bits,
            nfree: n,
            hint: 0,
            in_partial: true,
        }
    }

    fn used(&self) -> usize {
        classes::per_slab(self.class) - self.nfree
    }

    fn is_used(&self, k: usize) -> bool {
        self.free_bits[k / 64] & (1 << (k % 64)) == 0
    }

    /// Take the lowest free object (the slab has one).
    #[inline]
    fn take(&mut self) -> usize {
        debug_assert!(self.nfree > 0);
        while self.free_bits[self.hint] == 0 {
            self.hint += 1;
        }
        let w = &mut self.free_bits[self.hint];
        let b = w.trailing_zeros() as usize;
        *w &= *w - 1;
        self.nfree -= 1;
        self.hint * 64 + b
    }

    #[inline]
    fn put(&mut self, k: usize) {
        self.free_bits[k / 64] |= 1 << (k % 64);
        self.nfree += 1;
        self.hint = self.hint.min(k / 64);
    }
}

/// Why a free was refused: the pointer is not a live object of this heap.
#[derive(Debug, PartialEq, Eq)]
pub struct NotOurs;

pub struct Heap {
    base: usize,
    pages_per_region: usize,
    /// log2(pages_per_region): page -> region is a shift, not a division.
    ppr_shift: u32,
    /// Page maps by region index (`None`: not this heap's region). Regions are handed out in
    /// address order, so this grows to the highest index the tag owns, 8 bytes per region.
    regions: Vec<Option<Box<RegionPages>>>,
    /// Free runs as (pages, first page) for best fit, and first page -> pages for coalescing.
    runs_by_len: BTreeSet<(usize, usize)>,
    runs_by_start: BTreeMap<usize, usize>,
    slabs: Vec<Option<Slab>>,
    free_slab_ids: Vec<u32>,
    /// Per class, the slabs with at least one free object.
    partial: Vec<Vec<u32>>,
    /// The lock-free page -> (class, tag) map `free` reads (kept in step with the slabs here).
    sides: Arc<Sides>,
    /// The tag this heap serves (recorded with each slab page).
    tag: u32,
}

impl Heap {
    pub fn new(base: usize, region_size: usize, sides: Arc<Sides>, tag: u32) -> Heap {
        assert!(region_size.is_multiple_of(SLAB_PAGES * PAGE));
        assert!(region_size.is_power_of_two());
        Heap {
            base,
            pages_per_region: region_size / PAGE,
            ppr_shift: (region_size / PAGE).trailing_zeros(),
            regions: Vec::new(),
            runs_by_len: BTreeSet::new(),
            runs_by_start: BTreeMap::new(),
            slabs: Vec::new(),
            free_slab_ids: Vec::new(),
            partial: vec![Vec::new(); classes::COUNT],
            sides,
            tag,
        }
    }

    /// Give the heap region `r` (all of it free).
    pub fn add_region(&mut self, r: usize) {
        let n = self.pages_per_region;
        if self.regions.len() <= r {
            self.regions.resize_with(r + 1, || None);
        }
        assert!(self.regions[r].is_none(), "region {r} added twice");
        self.regions[r] = Some(Box::new(RegionPages {
            pages: vec![PageUse::Free; n],
            live: 0,
        }));
        self.insert_run(r * n, n);
    }

    /// Whether region `r` is ours and wholly free (no object, no slab: one run of every page).
    pub fn region_is_empty(&self, r: usize) -> bool {
        let n = self.pages_per_region;
        self.pages(r).is_some_and(|p| p.live == 0) && self.runs_by_start.get(&(r * n)) == Some(&n)
    }

    /// How many regions the heap has.
    pub fn region_count(&self) -> usize {
        self.regions.iter().filter(|r| r.is_some()).count()
    }

    /// The regions of the heap, lowest first.
    pub fn region_ids(&self) -> Vec<usize> {
        (0..self.regions.len())
            .filter(|&r| self.regions[r].is_some())
            .collect()
    }

    /// Take back wholly free region `r` (it goes back to the reservation).
    pub fn remove_region(&mut self, r: usize) {
        assert!(self.region_is_empty(r), "region {r} is not empty");
        let n = self.pages_per_region;
        self.runs_by_start.remove(&(r * n));
        self.runs_by_len.remove(&(n, r * n));
        self.regions[r] = None;
    }

    /// Bytes of live objects in region `r` (0 if not ours).
    pub fn live_bytes(&self, r: usize) -> usize {
        self.pages(r).map_or(0, |p| p.live)
    }

    /// Allocate; `None` when no region of the heap has room (the caller adds one and retries).
    /// `size` must be at most a region and `align` a power of two ≤ a page (checked by `XMem`).
    pub fn alloc(&mut self, size: usize, align: usize) -> Option<usize> {
        match classes::class_of(size, align) {
            Some(c) => self.alloc_small(c),
            None => self.alloc_large(size.div_ceil(PAGE)),
        }
    }

    /// Allocate one object of class `c` (`None`: no room, as for [`Heap::alloc`]).
    pub fn alloc_small(&mut self, c: usize) -> Option<usize> {
        let id = match self.partial[c].last() {
            Some(&id) => id,
            None => self.new_slab(c)?,
        };
        let slab = self.slabs[id as usize]
            .as_mut()
            .expect("partial slab exists");
        let k = slab.take();
        let addr = self.base + slab.first_pg * PAGE + k * classes::SIZES[c];
        let (first_pg, full) = (slab.first_pg, slab.nfree == 0);
        if full {
            slab.in_partial = false;
            let popped = self.partial[c].pop();
            debug_assert_eq!(popped, Some(id));
        }
        self.region_pages(first_pg).live += classes::SIZES[c];
        Some(addr)
    }

    /// Allocate up to `out.len()` objects of class `c` into `out`, taking whole runs of a
    /// slab's free stack at once (one partial-list and live-bytes update per slab, not per
    /// object). Returns how many; fewer when no region has room (the caller adds one). The
    /// last one written has the lowest address (a stack popping from the end hands them out
    /// in address order).
    pub fn alloc_batch(&mut self, c: usize, out: &mut [usize]) -> usize {
        let size = classes::SIZES[c];
        let mut got = 0;
        while got < out.len() {
            let id = match self.partial[c].last() {
                Some(&id) => id,
                None => match self.new_slab(c) {
                    Some(id) => id,
                    None => break,
                },
            };
            let slab = self.slabs[id as usize]
                .as_mut()
                .expect("partial slab exists");
            let base = self.base + slab.first_pg * PAGE;
            let take = (out.len() - got).min(slab.nfree);
            for o in &mut out[got..got + take] {
                *o = base + slab.take() * size;
            }
            got += take;
            let first_pg = slab.first_pg;
            if slab.nfree == 0 {
                slab.in_partial = false;
                let popped = self.partial[c].pop();
                debug_assert_eq!(popped, Some(id));
            }
            self.region_pages(first_pg).live += take * size;
        }
        out[..got].reverse();
        got
    }

    fn new_slab(&mut self, c: usize) -> Option<u32> {
        let first_pg = self.take_run(SLAB_PAGES)?;
        let slab = Slab::new(first_pg, c);
        let id = match self.free_slab_ids.pop() {
            Some(id) => {
                self.slabs[id as usize] = Some(slab);
                id
            }
            None => {
                self.slabs.push(Some(slab));
                (self.slabs.len() - 1) as u32
            }
        };
        self.mark(first_pg, SLAB_PAGES, PageUse::Slab(id), PageUse::Slab(id));
        self.sides
            .set_class(first_pg * PAGE, SLAB_PAGES, Some((c, self.tag)));
        self.partial[c].push(id);
        Some(id)
    }

    fn alloc_large(&mut self, pages: usize) -> Option<usize> {
        assert!(
            pages <= self.pages_per_region,
            "object larger than a region"
        );
        let pg = self.take_run(pages)?;
        self.mark(
            pg,
            pages,
            PageUse::LargeHead(pages as u32),
            PageUse::LargeTail,
        );
        self.region_pages(pg).live += pages * PAGE;
        Some(self.base + pg * PAGE)
    }

    /// Usable size of the live object starting at `addr` (its class size, or its whole pages).
    pub fn usable_size(&self, addr: usize) -> Option<usize> {
        let off = addr.checked_sub(self.base)?;
        let pg = off / PAGE;
        let pages = self.pages(pg / self.pages_per_region)?;
        match pages.pages[pg % self.pages_per_region] {
            PageUse::LargeHead(n) if off.is_multiple_of(PAGE) => Some(n as usize * PAGE),
            PageUse::Slab(id) => {
                let slab = self.slabs[id as usize].as_ref()?;
                let size = classes::SIZES[slab.class];
                let rel = off - slab.first_pg * PAGE;
                let k = rel / size;
                let live = rel.is_multiple_of(size)
                    && k < classes::per_slab(slab.class)
                    && slab.is_used(k);
                live.then_some(size)
            }
            _ => None,
        }
    }

    /// Free the object at `addr`. Anything but the start of a live object of this heap is
    /// refused and changes nothing.
    pub fn free(&mut self, addr: usize) -> Result<(), NotOurs> {
        let off = addr.checked_sub(self.base).ok_or(NotOurs)?;
        let pg = off / PAGE;
        let pages = self.pages(pg >> self.ppr_shift).ok_or(NotOurs)?;
        match pages.pages[pg & (self.pages_per_region - 1)] {
            PageUse::Free | PageUse::LargeTail => Err(NotOurs),
            PageUse::LargeHead(n) => {
                if !off.is_multiple_of(PAGE) {
                    return Err(NotOurs);
                }
                let n = n as usize;
                self.mark(pg, n, PageUse::Free, PageUse::Free);
                self.region_pages(pg).live -= n * PAGE;
                self.insert_run(pg, n);
                Ok(())
            }
            PageUse::Slab(id) => self.free_small(id, off),
        }
    }

    /// Free small objects known to be allocated here (cached ones: their live bytes were
    /// checked). A run of objects in one slab costs a bit each; the slab's lists and its
    /// region's live bytes are updated once per run. Stops after a run that leaves its region
    /// without live objects: returns how many were freed and that region.
    pub fn free_batch(&mut self, addrs: &[usize]) -> (usize, Option<usize>) {
        let mut i = 0;
        while i < addrs.len() {
            let off = addrs[i] - self.base;
            let (r, pg) = (
                (off / PAGE) >> self.ppr_shift,
                (off / PAGE) & (self.pages_per_region - 1),
            );
            let pages = self
                .pages(r)
                .expect("a cached object is in a region of its heap");
            let PageUse::Slab(id) = pages.pages[pg] else {
                panic!("a cached object at {:#x} is not on a slab page", addrs[i]);
            };
            let slab = self.slabs[id as usize].as_mut().expect("a live slab");
            let (c, start) = (slab.class, self.base + slab.first_pg * PAGE);
            let size = classes::SIZES[c];
            let mut n = 0;
            while let Some(rel) = addrs.get(i).and_then(|a| a.checked_sub(start)) {
                if rel >= SLAB_PAGES * PAGE {
                    break;
                }
                let k = classes::index_in_slab(rel, c);
                assert!(
                    k * size == rel && k < classes::per_slab(c) && slab.is_used(k),
                    "a cached object is allocated in its slab"
                );
                slab.put(k);
                n += 1;
                i += 1;
            }
            self.freed(id, n);
            if self.pages(r).is_some_and(|p| p.live == 0) {
                return (i, Some(r));
            }
        }
        (i, None)
    }

    fn free_small(&mut self, id: u32, off: usize) -> Result<(), NotOurs> {
        let slab = self.slabs[id as usize]
            .as_mut()
            .expect("page names a live slab");
        let size = classes::SIZES[slab.class];
        let rel = off - slab.first_pg * PAGE;
        let k = classes::index_in_slab(rel, slab.class);
        if k * size != rel || k >= classes::per_slab(slab.class) || !slab.is_used(k) {
            return Err(NotOurs);
        }
        slab.put(k);
        self.freed(id, 1);
        Ok(())
    }

    /// Bookkeeping after `n` objects of slab `id` were put back: its partial-list entry, its
    /// region's live bytes, and the slab itself when empty.
    fn freed(&mut self, id: u32, n: usize) {
        let slab = self.slabs[id as usize].as_mut().expect("a live slab");
        let (c, first_pg, empty) = (slab.class, slab.first_pg, slab.used() == 0);
        if !slab.in_partial {
            slab.in_partial = true;
            self.partial[c].push(id);
        }
        self.region_pages(first_pg).live -= n * classes::SIZES[c];
        // An empty slab goes back to the page runs unless it is its class's only partial slab
        // (keeps one warm slab per class, so alloc/free of one object does not churn pages).
        if empty && self.partial[c].len() > 1 {
            self.partial[c].retain(|&s| s != id);
            self.slabs[id as usize] = None;
            self.free_slab_ids.push(id);
            self.mark(first_pg, SLAB_PAGES, PageUse::Free, PageUse::Free);
            self.sides.set_class(first_pg * PAGE, SLAB_PAGES, None);
            self.insert_run(first_pg, SLAB_PAGES);
        }
    }

    fn pages(&self, r: usize) -> Option<&RegionPages> {
        self.regions.get(r).and_then(|p| p.as_deref())
    }

    fn region_pages(&mut self, pg: usize) -> &mut RegionPages {
        self.regions
            .get_mut(pg >> self.ppr_shift)
            .and_then(|p| p.as_deref_mut())
            .expect("page in a region of this heap")
    }

    fn mark(&mut self, pg: usize, n: usize, head: PageUse, tail: PageUse) {
        let ppr = self.pages_per_region;
        let at = pg % ppr;
        assert!(at + n <= ppr, "page run crosses a region boundary");
        let pages = &mut self.region_pages(pg).pages;
        pages[at] = head;
        for p in &mut pages[at + 1..at + n] {
            *p = tail;
        }
    }

    /// Best fit: the shortest free run of at least `n` pages (lowest address among equals).
    fn take_run(&mut self, n: usize) -> Option<usize> {
        let &(len, pg) = self.runs_by_len.range((n, 0)..).next()?;
        self.runs_by_len.remove(&(len, pg));
        self.runs_by_start.remove(&pg);
        if len > n {
            self.runs_by_len.insert((len - n, pg + n));
            self.runs_by_start.insert(pg + n, len - n);
        }
        Some(pg)
    }

    /// Return a free run, merged with free neighbours in the same region.
    fn insert_run(&mut self, mut pg: usize, mut n: usize) {
        let region = pg / self.pages_per_region;
        if let Some((&p, &l)) = self.runs_by_start.range(..pg).next_back() {
            if p + l == pg && p / self.pages_per_region == region {
                self.runs_by_start.remove(&p);
                self.runs_by_len.remove(&(l, p));
                pg = p;
                n += l;
            }
        }
        if let Some(&l) = self.runs_by_start.get(&(pg + n)) {
            if (pg + n) / self.pages_per_region == region {
                self.runs_by_start.remove(&(pg + n));
                self.runs_by_len.remove(&(l, pg + n));
                n += l;
            }
        }
        debug_assert!((pg + n - 1) / self.pages_per_region == region);
        self.runs_by_start.insert(pg, n);
        self.runs_by_len.insert((n, pg));
    }

    /// Check every invariant (tests): runs and page map agree, no overlaps, live bytes add up.
    pub fn check(&self) {
        let ppr = self.pages_per_region;
        assert_eq!(self.runs_by_len.len(), self.runs_by_start.len());
        for (&pg, &n) in &self.runs_by_start {
            assert!(self.runs_by_len.contains(&(n, pg)));
            let rp = self.pages(pg / ppr).expect("run in a region of this heap");
            assert!(pg % ppr + n <= ppr);
            assert!(rp.pages[pg % ppr..pg % ppr + n]
                .iter()
                .all(|p| *p == PageUse::Free));
        }
        for (r, rp) in self.regions.iter().enumerate() {
            let Some(rp) = rp else { continue };
            let mut live = 0;
            let mut i = 0;
            while i < ppr {
                match rp.pages[i] {
                    PageUse::Free => {
                        // Every free page is in exactly one run, and no slab's.
                        let pg = r * ppr + i;
                        assert_eq!(self.sides.class_at(pg * PAGE), None, "free page class");
                        let (&s, &n) = self.runs_by_start.range(..=pg).next_back().expect("run");
                        assert!(s <= pg && pg < s + n, "free page {pg} in no run");
                        i += 1;
                    }
                    PageUse::LargeHead(n) => {
                        live += n as usize * PAGE;
                        i += n as usize;
                    }
                    PageUse::LargeTail => panic!("tail page without a head"),
                    PageUse::Slab(id) => {
                        let s = self.slabs[id as usize].as_ref().expect("live slab");
                        assert_eq!(s.first_pg, r * ppr + i);
                        for p in 0..SLAB_PAGES {
                            let at = (r * ppr + i + p) * PAGE;
                            assert_eq!(self.sides.class_at(at), Some(s.class), "page class");
                        }
                        live += s.used() * classes::SIZES[s.class];
                        let free: u32 = s.free_bits.iter().map(|w| w.count_ones()).sum();
                        assert_eq!(free as usize, s.nfree, "free count");
                        let n = classes::per_slab(s.class);
                        assert!(
                            (n..s.free_bits.len() * 64).all(|k| s.is_used(k)),
                            "tail bits"
                        );
                        assert!(s.free_bits[..s.hint].iter().all(|&w| w == 0), "hint");
                        i += SLAB_PAGES;
                    }
                }
            }
            assert_eq!(live, rp.live, "live bytes of region {r}");
        }
    }
}
