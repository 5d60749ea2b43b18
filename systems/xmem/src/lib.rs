//! X-Mem: tiered DRAM/PM allocation by data structure (chapter 4 of Subramanya R. Dulloor,
//! *Systems and Applications for Persistent Memory*, PhD thesis, Georgia Tech, 2015; Dulloor et
//! al., *Data Tiering in Heterogeneous Memory Systems*, EuroSys 2016). See `docs/xmem.md`.
//!
//! Each data structure gets a [`Tag`]; its objects live in regions owned by that tag alone, in
//! one address-space reservation. [`XMem::rebalance`] ranks regions by the benefit of the fast
//! tier (the thesis's Eq. 3, from each tag's access profile and priority), fills the fast budget
//! greedily and moves regions between DRAM and PM keeping their virtual addresses.

pub mod boxed;
pub mod cache;
pub mod classes;
pub mod classify;
pub mod config;
pub mod error;
mod fast;
mod fault;
pub mod handle;
pub mod heap;
mod migrate;
pub mod place;
pub mod profiles;
mod profiling;
mod referenced;
mod sides;
pub mod slice;
mod space;
pub mod spec;
mod sys;
mod tcache;
pub mod tier;
pub mod trace;
pub mod untagged;

pub use allocator_api2;
pub use boxed::XBox;
pub use config::{Config, PmSpec, DEFAULT_REGION, MAX_REGIONS, MAX_TAGS, PAGE};
pub use error::{Result, XmemError};
pub use handle::XAlloc;
pub use place::{Latencies, Pattern, PerPattern, Profile};
pub use slice::XSlice;
pub use tier::Tier;

use heap::Heap;
use parking_lot::{Mutex, RwLock};
use sides::{Sides, Taken};
use space::Space;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tier::{Dram, Slow};

/// (instance, tag) pairs one thread caches objects for at once (the least recently added
/// gives its objects back to make room).
pub const THREAD_CACHE_SLOTS: usize = tcache::MAX_SLOTS;
/// Small objects a thread cache takes from its tag's heap in one refill (and gives back in one
/// spill), under one lock.
pub const THREAD_CACHE_BATCH: usize = tcache::BATCH;

/// Numbers of `XMem` instances, for the thread caches.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A number for a new `XMem` (the thread caches key their slots by it, with the tag, in one
/// word: below 2^32).
fn next_id() -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    assert!(
        id < 1 << 32,
        "more than 2^32 X-Mem instances made in this process"
    );
    id
}

/// How many writes in this process have faulted on a migrating region and waited for it.
pub fn parked_writes() -> u64 {
    fault::parked()
}

/// A data structure's tag (the thesis's `int tag`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(u32);

impl Tag {
    pub fn id(self) -> u32 {
        self.0
    }

    /// The tag numbered `id`, as a C caller holds it: a number no [`XMem::tag`] gave is
    /// refused by every call that takes it ([`XmemError::UnknownTag`]).
    pub fn from_id(id: u32) -> Tag {
        Tag(id)
    }
}

/// One region, as [`XMem::regions`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionInfo {
    pub index: usize,
    pub addr: usize,
    pub tag: Tag,
    pub tier: Tier,
    /// Bytes of live objects in the region.
    pub bytes: usize,
    /// Eq. 3 benefit of the region being in the fast tier.
    pub benefit: f64,
    pub priority: i32,
}

/// What a [`XMem::rebalance`] did.
#[derive(Debug, Clone, Default)]
pub struct Rebalance {
    pub to_fast: Vec<usize>,
    pub to_slow: Vec<usize>,
    /// Bytes copied and time spent moving them.
    pub bytes: u64,
    pub elapsed: Duration,
}

struct TagEntry {
    name: String,
    priority: i32,
    /// `F_i(p)` and `W_i` per region.
    profile: Profile,
}

struct Entry {
    tag: u32,
    tier: Tier,
    slot: Option<u32>,
    /// The region's own profile ([`XMem::apply_region_profiles`]); none: its tag's.
    profile: Option<Profile>,
}

struct Table {
    /// Regions below `next` have been handed out; those in `free` came back since.
    next: usize,
    free: std::collections::BTreeSet<usize>,
    entries: Vec<Option<Entry>>,
    dram: Dram,
    slow: Slow,
}

/// The allocator. `Send + Sync`; share it by reference or `Arc`.
pub struct XMem {
    cfg: Config,
    space: Space,
    /// Tag id + 1 of each region's owner (0 = unused), read without locks by `free`.
    owner: Box<[AtomicU32]>,
    tags: RwLock<Vec<TagEntry>>,
    /// Each tag's heap, by tag id (set once when the tag is made; no lock to find one). Thread
    /// caches hold a `Weak` to give their objects back at thread exit.
    heaps: Box<[OnceLock<Arc<Mutex<Heap>>>]>,
    /// Page classes and live bytes, read by `free` without a heap lock (see `tcache`).
    sides: Arc<Sides>,
    /// This instance's number in the thread caches (never reused in a process).
    id: u64,
    table: Mutex<Table>,
    /// One migration (or rebalance) at a time.
    moving: Mutex<()>,
}

impl XMem {
    /// Validate `cfg`, reserve the address space and open the PM tier.
    pub fn new(cfg: Config) -> Result<XMem> {
        cfg.validate()?;
        let space = Space::new(cfg.reserve, cfg.region_size, cfg.uffd)?;
        let slow = Slow::open(&cfg)?;
        let n = space.regions();
        let dram = Dram::new((cfg.fast_budget / cfg.region_size as u64) as usize);
        Ok(XMem {
            owner: (0..n).map(|_| AtomicU32::new(0)).collect(),
            table: Mutex::new(Table {
                next: 0,
                free: Default::default(),
                entries: (0..n).map(|_| None).collect(),
                dram,
                slow,
            }),
            tags: RwLock::new(Vec::new()),
            heaps: (0..MAX_TAGS).map(|_| OnceLock::new()).collect(),
            sides: Arc::new(Sides::new(n, cfg.region_size)?),
            id: next_id(),
            moving: Mutex::new(()),
            space,
            cfg,
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// How a migration holds off the region's writers: `"userfaultfd"` (every writer waits in
    /// the kernel, system calls included) or `"page rights"` (the program's writes wait in
    /// X-Mem's SIGSEGV handler; a system call writing into the region fails with `EFAULT`),
    /// with the reason userfaultfd is not used. A region on a DAX file falls back to page
    /// rights even when userfaultfd is available. (A NUMA slow tier's moves are the kernel's.)
    pub fn write_protection(&self) -> (&'static str, Option<&str>) {
        match self.space.uffd_unavailable() {
            None => ("userfaultfd", None),
            Some(why) => ("page rights", Some(why)),
        }
    }

    /// Remove the PM file now if X-Mem created it (its mappings stay valid until the `XMem` is
    /// dropped); a device-dax device or a NUMA slow tier is left alone. For a process-wide
    /// instance that is never dropped (the C ABI).
    pub fn unlink_pm_file(&self) {
        if let Slow::File(pm) = &mut self.table.lock().slow {
            pm.unlink();
        }
    }

    /// The tag named `name`, made on first use (names key profiles).
    pub fn tag(&self, name: &str) -> Result<Tag> {
        if !profiles::valid_name(name) {
            return Err(XmemError::BadConfig(format!(
                "tag name {name:?}: must be non-empty without control characters"
            )));
        }
        let mut tags = self.tags.write();
        if let Some(i) = tags.iter().position(|t| t.name == name) {
            return Ok(Tag(i as u32));
        }
        if tags.len() >= MAX_TAGS {
            return Err(XmemError::TooManyTags { limit: MAX_TAGS });
        }
        tags.push(TagEntry {
            name: name.to_owned(),
            priority: 0,
            profile: Profile::default(),
        });
        let id = tags.len() - 1;
        let fresh = Heap::new(
            self.space.base(),
            self.cfg.region_size,
            self.sides.clone(),
            id as u32,
        );
        assert!(self.heaps[id].set(Arc::new(Mutex::new(fresh))).is_ok());
        Ok(Tag(id as u32))
    }

    pub fn tag_name(&self, t: Tag) -> Result<String> {
        self.with_tag(t, |e| e.name.clone())
    }

    // `ok_or` would build (and drop) an error on every call of this hot path.
    #[allow(clippy::unnecessary_lazy_evaluations)]
    fn heap(&self, t: Tag) -> Result<&Mutex<Heap>> {
        self.heaps
            .get(t.0 as usize)
            .and_then(|h| h.get())
            .map(|h| &**h)
            .ok_or_else(|| XmemError::UnknownTag(t.0))
    }

    fn with_tag<R>(&self, t: Tag, f: impl FnOnce(&mut TagEntry) -> R) -> Result<R> {
        let mut tags = self.tags.write();
        let e = tags
            .get_mut(t.0 as usize)
            .ok_or(XmemError::UnknownTag(t.0))?;
        Ok(f(e))
    }

    /// `xmem_priority`: higher priorities are placed in the fast tier first.
    pub fn set_priority(&self, t: Tag, priority: i32) -> Result<()> {
        self.with_tag(t, |e| e.priority = priority)
    }

    /// Allocate `size` bytes aligned to `align` (a power of two, at most a page) in tag `t`'s
    /// regions. Not zeroed.
    #[inline(always)]
    pub fn alloc(&self, t: Tag, size: usize, align: usize) -> Result<NonNull<u8>> {
        // The fast path (a pop from the thread's cache, no call), else everything else.
        match self.alloc_fast(t, size, align) {
            Some(p) => Ok(p),
            None => self.alloc_slow(t, size, align),
        }
    }

    /// A small object with at most 16-byte alignment from the thread cache's stack for (tag,
    /// class) if the slot used last is `t`'s and the stack is not empty.
    #[inline(always)]
    fn alloc_fast(&self, t: Tag, size: usize, align: usize) -> Option<NonNull<u8>> {
        if !(self.cfg.thread_cache
            && size <= classes::MAX_SMALL
            && align <= 16
            && align.is_power_of_two())
        {
            return None;
        }
        let a = tcache::pop(self.id, t.0, classes::class_of(size, align)?)?;
        self.sides.set_live(a - self.space.base());
        NonNull::new(a as *mut u8)
    }

    #[inline(never)]
    fn alloc_slow(&self, t: Tag, size: usize, align: usize) -> Result<NonNull<u8>> {
        if !align.is_power_of_two() || align > PAGE || size > self.cfg.region_size {
            return Err(XmemError::BadLayout {
                size,
                align,
                why: "align must be a power of two <= 4096 and size at most one region",
            });
        }
        if let Some(c) = classes::class_of(size, align).filter(|_| self.cfg.thread_cache) {
            if let Some(a) = self.alloc_cached(t, c) {
                return a.map(|a| NonNull::new(a as *mut u8).expect("not null"));
            }
        }
        let mut h = self.heap(t)?.lock();
        loop {
            if let Some(a) = h.alloc(size, align) {
                debug_assert_eq!(self.owner_of(a), Some(t.0));
                return Ok(NonNull::new(a as *mut u8).expect("region addresses are not null"));
            }
            let r = self.new_region(t)?;
            h.add_region(r);
        }
    }

    /// `xfree`: give back an object. A pointer this `XMem` did not hand out (or already took
    /// back) is refused with [`XmemError::ForeignPointer`] and nothing changes.
    ///
    /// # Safety
    /// No reference into the object may be used after the call.
    #[inline(always)]
    pub unsafe fn free(&self, p: NonNull<u8>) -> Result<()> {
        let addr = p.as_ptr() as usize;
        // The fast path: a live small object pushed onto the thread's cache slot used last.
        if self.cfg.thread_cache {
            // (An address below the base wraps to beyond every region.)
            let off = addr.wrapping_sub(self.space.base());
            if let Some((word, live)) = self.sides.peek(off) {
                if tcache::push(self.id, sides::tag_of(word), sides::class_of(word), addr) {
                    live.store(0, Ordering::Relaxed);
                    return Ok(());
                }
            }
        }
        self.free_slow(addr)
    }

    // `ok_or` would build (and drop) an error on every call.
    #[allow(clippy::unnecessary_lazy_evaluations)]
    #[inline(never)]
    fn free_slow(&self, addr: usize) -> Result<()> {
        if self.cfg.thread_cache {
            // A slab page: the live byte says whether the program holds an object starting here.
            match self.sides.take(addr.wrapping_sub(self.space.base())) {
                Taken::Live { class, tag } => {
                    self.free_cached_slow(tag, addr, class);
                    return Ok(());
                }
                Taken::NotLive => return Err(XmemError::ForeignPointer(addr)),
                Taken::NotSlab => {}
            }
        }
        let tag = self.owner_of(addr).ok_or(XmemError::ForeignPointer(addr))?;
        let mut h = self.heap(Tag(tag))?.lock();
        h.free(addr).map_err(|_| XmemError::ForeignPointer(addr))?;
        // A region left wholly free goes back to the reservation (the thesis's root allocator),
        // unless it is the tag's last one (so one object allocated and freed in a loop does not
        // map and unmap a region each time).
        let r = self
            .space
            .region_of(addr)
            .expect("a live object is in the reservation");
        if h.region_is_empty(r) && h.region_count() > 1 && self.release_region(r).is_ok() {
            h.remove_region(r);
        }
        Ok(())
    }

    /// Give unused region `r` back: its pages and tier slot are released, its address range is
    /// `PROT_NONE` again and a later region may reuse it. Called with the owner's heap locked.
    fn release_region(&self, r: usize) -> Result<()> {
        let _one = self.moving.lock();
        let mut tb = self.table.lock();
        let e = tb.entries[r]
            .as_ref()
            .expect("a region in a heap is in use");
        let (tier, slot) = (e.tier, e.slot);
        self.space.unmap_region(r)?;
        match tier {
            Tier::Fast => tb.dram.give(),
            Tier::Slow => tb.slow.give(slot.expect("a slow region has a slot")),
        }
        tb.entries[r] = None;
        tb.free.insert(r);
        self.owner[r].store(0, Ordering::Release);
        Ok(())
    }

    /// The usable size of a live object (at least what was asked for), and its tag.
    pub fn usable_size(&self, p: NonNull<u8>) -> Result<(usize, Tag)> {
        let addr = p.as_ptr() as usize;
        let tag = self.owner_of(addr).ok_or(XmemError::ForeignPointer(addr))?;
        let off = addr - self.space.base();
        if let Some(c) = self.cached_class(off) {
            // Cached objects are allocated in the heap but not held: the live byte decides.
            return match self.sides.is_live(off) {
                true => Ok((classes::SIZES[c], Tag(tag))),
                false => Err(XmemError::ForeignPointer(addr)),
            };
        }
        let size = self.heap(Tag(tag))?.lock().usable_size(addr);
        size.map(|s| (s, Tag(tag)))
            .ok_or(XmemError::ForeignPointer(addr))
    }

    fn owner_of(&self, addr: usize) -> Option<u32> {
        let i = self.space.region_of(addr)?;
        self.owner[i].load(Ordering::Acquire).checked_sub(1)
    }

    /// A fresh region for tag `t`: DRAM while the budget has a slot; with the budget spent, DRAM
    /// too if the tag beats the weakest DRAM region (priority, then Eq. 3 benefit, strictly),
    /// which moves to PM first (the thesis's displacement at region allocation); else PM.
    ///
    /// Lock order: the caller's heap, then `moving`, then the table; nothing that holds `moving`
    /// takes a heap lock.
    fn new_region(&self, t: Tag) -> Result<usize> {
        let _one = self.moving.lock();
        let (slots, used) = self.fast_slots();
        if slots > 0 && used == slots {
            let view = self.placement_view();
            let me = self.candidate(t)?;
            let weakest = view
                .iter()
                .filter(|v| v.1 == Tier::Fast)
                .min_by(|a, b| {
                    (a.2.priority.cmp(&b.2.priority))
                        .then(a.2.benefit.total_cmp(&b.2.benefit))
                        .then(b.0.cmp(&a.0))
                })
                .copied();
            if let Some((index, _, w, _)) = weakest {
                let better = me.priority > w.priority
                    || (me.priority == w.priority && me.benefit > w.benefit);
                if better {
                    self.move_locked(index, Tier::Slow)?;
                }
            }
        }
        let mut tb = self.table.lock();
        let i = tb.free.first().copied().unwrap_or(tb.next);
        if i >= self.space.regions() {
            return Err(XmemError::ReservationExhausted {
                regions: self.space.regions(),
            });
        }
        self.sides.prepare(i)?;
        let (tier, slot) = if tb.dram.take() {
            if let Err(e) = self.space.map_fast(i, self.cfg.thp, self.cfg.fast_node) {
                tb.dram.give();
                return Err(e);
            }
            (Tier::Fast, None)
        } else {
            let slot = tb.slow.take()?;
            let mapped = match &tb.slow {
                Slow::File(pm) => self.space.map_slow(i, pm.fd(), pm.offset(slot)),
                // Fresh anonymous pages bound to the slow node.
                Slow::Node(n) => self.space.map_fast(i, self.cfg.thp, Some(n.node)),
            };
            if let Err(e) = mapped {
                tb.slow.give(slot);
                return Err(e);
            }
            (Tier::Slow, Some(slot))
        };
        tb.entries[i] = Some(Entry {
            tag: t.0,
            tier,
            slot,
            profile: None,
        });
        if !tb.free.remove(&i) {
            tb.next += 1;
        }
        self.owner[i].store(t.0 + 1, Ordering::Release);
        Ok(i)
    }

    /// Every region in use, with its tag, tier, live bytes and benefit.
    pub fn regions(&self) -> Vec<RegionInfo> {
        // Placement first (table and tags, no heap lock), then each heap alone for live bytes:
        // no heap lock is ever taken while the tags lock is held.
        self.placement_view()
            .into_iter()
            .map(|(i, tier, c, tag)| RegionInfo {
                index: i,
                addr: self.space.addr(i),
                tag,
                tier,
                bytes: self.heaps[tag.0 as usize]
                    .get()
                    .map_or(0, |h| h.lock().live_bytes(i)),
                benefit: c.benefit,
                priority: c.priority,
            })
            .collect()
    }

    /// The placement's view of tag `t`: its priority and Eq. 3 benefit.
    fn candidate(&self, t: Tag) -> Result<place::Candidate> {
        let tags = self.tags.read();
        let e = tags.get(t.0 as usize).ok_or(XmemError::UnknownTag(t.0))?;
        Ok(place::Candidate {
            priority: e.priority,
            benefit: self.cfg.latencies.benefit(&e.profile),
        })
    }

    /// (index, tier, candidate, tag) of every region in use, in index order. Takes the table and tag
    /// locks only, never a heap lock, so it may run while `moving` is held.
    fn placement_view(&self) -> Vec<(usize, Tier, place::Candidate, Tag)> {
        let used: Vec<(usize, u32, Tier, Option<Profile>)> = {
            let tb = self.table.lock();
            (0..tb.next)
                .filter_map(|i| {
                    let e = tb.entries[i].as_ref()?;
                    Some((i, e.tag, e.tier, e.profile))
                })
                .collect()
        };
        let tags = self.tags.read();
        used.into_iter()
            .map(|(i, tag, tier, own)| {
                let e = &tags[tag as usize];
                let c = place::Candidate {
                    priority: e.priority,
                    benefit: self.cfg.latencies.benefit(&own.unwrap_or(e.profile)),
                };
                (i, tier, c, Tag(tag))
            })
            .collect()
    }

    /// Start a window of the online access signal (an extension beyond the thesis): clear the
    /// referenced bits of every page of the process (`/proc/self/clear_refs`). The kernel's
    /// page aging sees those pages as not recently used afterwards.
    pub fn clear_referenced(&self) -> Result<()> {
        referenced::clear()
    }

    /// Bytes of each region in use touched (read or written) since [`XMem::clear_referenced`],
    /// from `/proc/self/smaps`: (region index, bytes), every region in use listed. A coarse
    /// signal (pages, not patterns) a caller can turn into priorities between profiles.
    pub fn referenced(&self) -> Result<Vec<(usize, u64)>> {
        let shift = self.cfg.region_size.trailing_zeros();
        let base = self.space.base();
        let len = self.space.regions() << shift;
        let m = referenced::read(base, len, shift)?;
        Ok(self
            .placement_view()
            .into_iter()
            .map(|(i, ..)| (i, m.get(&i).copied().unwrap_or(0)))
            .collect())
    }

    /// Fast-tier slots in the budget and in use.
    pub fn fast_slots(&self) -> (usize, usize) {
        let tb = self.table.lock();
        (tb.dram.slots(), tb.dram.used())
    }

    /// Re-run the placement (priorities, then Eq. 3 benefit, greedy over the fast slots) and
    /// move every region whose tier changes, demotions first so the budget always holds.
    pub fn rebalance(&self) -> Result<Rebalance> {
        let _one = self.moving.lock();
        let view = self.placement_view();
        let cands: Vec<place::Candidate> = view.iter().map(|v| v.2).collect();
        let slots = self.fast_slots().0;
        let fast = place::greedy(&cands, slots);
        let mut out = Rebalance::default();
        let start = Instant::now();
        for (&(index, tier, _, _), &f) in view.iter().zip(&fast) {
            if !f && tier == Tier::Fast {
                self.move_locked(index, Tier::Slow)?;
                out.to_slow.push(index);
            }
        }
        for (&(index, tier, _, _), &f) in view.iter().zip(&fast) {
            if f && tier == Tier::Slow {
                self.move_locked(index, Tier::Fast)?;
                out.to_fast.push(index);
            }
        }
        out.elapsed = start.elapsed();
        out.bytes = ((out.to_fast.len() + out.to_slow.len()) * self.cfg.region_size) as u64;
        Ok(out)
    }

    /// Move region `index` to tier `to` at the same virtual address (writers wait meanwhile).
    /// Moving a region to the tier it is in does nothing.
    pub fn move_region(&self, index: usize, to: Tier) -> Result<()> {
        let _one = self.moving.lock();
        self.move_locked(index, to)
    }

    fn move_locked(&self, index: usize, to: Tier) -> Result<()> {
        let mut tb = self.table.lock();
        let tb = &mut *tb;
        let e = tb
            .entries
            .get_mut(index)
            .and_then(|e| e.as_mut())
            .ok_or_else(|| XmemError::BadConfig(format!("region {index} is not in use")))?;
        if e.tier == to {
            return Ok(());
        }
        match to {
            Tier::Slow => {
                let slot = tb.slow.take()?;
                let moved = match &tb.slow {
                    Slow::File(pm) => migrate::to_slow(&self.space, index, pm, slot),
                    Slow::Node(n) => self.space.rebind(index, n.node),
                };
                if let Err(err) = moved {
                    tb.slow.give(slot);
                    return Err(err);
                }
                tb.dram.give();
                e.slot = Some(slot);
            }
            Tier::Fast => {
                if !tb.dram.take() {
                    return Err(XmemError::FastTierFull {
                        slots: tb.dram.slots(),
                    });
                }
                let moved = match (&tb.slow, self.cfg.fast_node) {
                    (Slow::Node(_), Some(fast)) => self.space.rebind(index, fast),
                    _ => migrate::to_fast(&self.space, index, self.cfg.thp, self.cfg.fast_node),
                };
                if let Err(err) = moved {
                    tb.dram.give();
                    return Err(err);
                }
                tb.slow
                    .give(e.slot.take().expect("a slow region has a slot"));
            }
        }
        e.tier = to;
        Ok(())
    }

    /// Check every allocator invariant (page maps, runs, slabs, live bytes) and that the DRAM
    /// budget holds; panics on a broken one. For tests: it locks every heap in turn.
    pub fn check_invariants(&self) {
        for h in self.heaps.iter().filter_map(|h| h.get()) {
            h.lock().check();
        }
        let tb = self.table.lock();
        let fast = tb
            .entries
            .iter()
            .flatten()
            .filter(|e| e.tier == Tier::Fast)
            .count();
        let slow = tb
            .entries
            .iter()
            .flatten()
            .filter(|e| e.tier == Tier::Slow)
            .count();
        assert_eq!(fast, tb.dram.used());
        assert!(fast <= tb.dram.slots());
        assert_eq!(slow, tb.slow.used());
        assert!(slow <= tb.slow.slots());
    }

    /// The NUMA node holding the page at `p` (which must be touched), from `get_mempolicy`.
    pub fn node_of(&self, p: NonNull<u8>) -> Result<u32> {
        self.region_of(p.as_ptr() as usize)
            .ok_or(XmemError::ForeignPointer(p.as_ptr() as usize))?;
        sys::node_of(p.as_ptr() as usize)
    }

    /// The memory policy of the mapping holding `p`: (mode, nodes); `MPOL_BIND` (2) with
    /// `[node]` for DRAM regions when `Config::fast_node` is set, the default (0) otherwise.
    pub fn policy_of(&self, p: NonNull<u8>) -> Result<(i32, Vec<u32>)> {
        self.region_of(p.as_ptr() as usize)
            .ok_or(XmemError::ForeignPointer(p.as_ptr() as usize))?;
        sys::policy_of(p.as_ptr() as usize)
    }

    /// The region holding `addr`, if it is one of ours and in use.
    pub fn region_of(&self, addr: usize) -> Option<usize> {
        self.owner_of(addr)?;
        self.space.region_of(addr)
    }
}
