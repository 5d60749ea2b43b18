//! Atomic block writes (`--atomic`, BTT-class): a logical block reaches its data through a map
//! entry in PM, a write lands in a free physical block and is published by one persisted 8-byte
//! map store. A crash leaves each block's map entry either old or new, never between, so every
//! block holds one whole write.
//!
//! **Map entry** (8 bytes, little-endian): bits 0..32 the physical block number, bits 32..64 the
//! CRC32C of the block's data with `--checksum` (else zero). Data and CRC change together in the
//! one atomic store, so checksums cost no extra persisted line.
//!
//! **No log.** The map is the only persistent metadata. The free physical blocks are exactly
//! those no map entry names; `open` rebuilds them by one scan of the map (8 bytes per block,
//! read-only). A write interrupted before its map store persisted is discarded (its block was
//! free and stays free); one whose map store persisted is complete (its data was durable
//! before the store was issued). So recovery writes nothing and a crash during recovery is
//! harmless. BTT's flog buys an O(lanes) open for one more persisted line and fence per write;
//! this design spends O(map) at open instead (docs/blk.md has the numbers).
//!
//! **Ordering of a write** of blocks `b..b+k` (one lane held): pop `k` free blocks; copy the
//! data into them and make it durable (the write scheme's stores + fence; persist now for the
//! deferred schemes); store the new map entries. Then either
//! - *now* (FUA, the deferred schemes `wb`/`msync`, or a lane with no free block left): flush the
//!   entries' lines, fence, and push the old physical blocks onto the lane's free list; or
//! - *lazily* (the common case): leave the entries' lines and the old blocks *pending* on the
//!   lane. The lane's next write flushes those lines before its own data fence, so one fence
//!   makes its data and the previous write's map entries durable; only then are the previous
//!   old blocks pushed. A FLUSH settles every lane's pending entries the same way.
//!
//! Either way a physical block is reused only after the map store that unmapped it is durable,
//! so a crash can never expose a reused block; and a map store is issued only after its data is
//! durable, so a crash leaves each entry naming a whole old or a whole new block. A write without
//! FUA is durable at the next FLUSH (or earlier), as on any block device; it costs one fence, like
//! a plain write, instead of two.
//!
//! **Readers never see a block reused under them.** A reader holds its logical blocks' stripe
//! locks shared (as on a plain device) from the map load to the end of the copy; a writer to
//! the same logical block holds them exclusively, and only a writer to that logical block can
//! unmap (and so free) the physical block the reader is copying. The pt-batch drain, which
//! does not take stripes, holds the block's buffer mutex, which its readers hold too.
//!
//! **DRAM copy of the map**: the map is also kept in DRAM (8 bytes per block, 0.2 % of the
//! capacity at 4 KiB blocks), read and updated under the same locks as the PM map, so a read
//! finds its physical block and a write its old one without a PM load (a cache miss each on a
//! random access). PM stays the truth: open rebuilds the copy from it.
//!
//! **Lanes**: free physical blocks are split over up to [`MAX_LANES`] lanes of a few blocks
//! each. A thread uses its own lane (round-robin by thread), or any free one, and holds it for
//! one request; a write pops and pushes as many blocks, so a lane never runs dry.

use crate::data_path::{is_zeroes, DataPath, MAX_BLOCK};
use crate::error::{BlkError, Result};
use crate::map::{entry, entry_crc, entry_pba, MapScan};
use crate::stats::Ctr;
use crate::superblock::MAP_ENTRY;
use parking_lot::{Mutex, MutexGuard};
use pmkit_media::{Domain, Fence, Flush, Media, WriteScheme};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Most lanes (free lists) of a device.
pub const MAX_LANES: usize = 64;
/// Free blocks a lane gets (the spares are split evenly; a lane has at least one).
pub const FREE_PER_LANE: usize = 4;
/// Blocks of one request published together (one fence for their data, one for their map
/// entries); bounded by the lane's free blocks.
const MAX_CHUNK: usize = 8;
// A chunk's map entries are contiguous 8-byte words; one chunk's entries fit in two lines at
// most, and a lane holds at least one block per chunk slot it may pop.
const _: () = assert!(MAX_CHUNK * MAP_ENTRY as usize <= 2 * pmkit_media::LINE);
const _: () = assert!(
    MAX_CHUNK <= pmkit_media::guard::MAX_WORDS,
    "a chunk's entries go in one call"
);
const _: () = assert!(FREE_PER_LANE >= 1 && MAX_LANES >= 1);

/// The DRAM copy of the map. Entry `b` is read and written only under block `b`'s stripe
/// (shared / exclusive) or, in pt-batch, its buffer mutex, so `Relaxed` suffices.
pub(crate) struct MapCache {
    map: Box<[AtomicU64]>,
}

impl MapCache {
    pub(crate) fn new(entries: &[u64]) -> MapCache {
        MapCache {
            map: entries.iter().map(|&e| AtomicU64::new(e)).collect(),
        }
    }

    #[inline]
    fn get(&self, b: u64) -> u64 {
        self.map[b as usize].load(Ordering::Relaxed)
    }

    #[inline]
    fn set(&self, b: u64, e: u64) {
        self.map[b as usize].store(e, Ordering::Relaxed)
    }
}

/// The free physical blocks, split over lanes.
pub(crate) struct Lanes {
    lanes: Box<[Lane]>,
}

#[repr(align(128))]
struct Lane {
    state: Mutex<LaneState>,
}

/// A lane's blocks: free ones, and the old blocks of its last lazily published write, which
/// become free once that write's map entries are durable.
pub(crate) struct LaneState {
    free: Vec<u32>,
    pending: Option<Pending>,
}

/// The last lazily published write of a lane: its map entries are stored but maybe not durable.
#[derive(Clone, Copy)]
struct Pending {
    /// Media range of the map entries (within one chunk: contiguous).
    map_off: usize,
    map_len: usize,
    olds: [u32; MAX_CHUNK],
    k: usize,
}

impl LaneState {
    fn blocks(&self) -> impl Iterator<Item = u32> + '_ {
        let pend = self
            .pending
            .iter()
            .flat_map(|p| p.olds[..p.k].iter().copied());
        self.free.iter().copied().chain(pend)
    }
}

fn thread_hint() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HINT: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    HINT.with(|h| {
        if h.get() == usize::MAX {
            h.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        h.get()
    })
}

impl Lanes {
    pub(crate) fn new(free: &[u32]) -> Lanes {
        assert!(!free.is_empty(), "an atomic device has spare blocks");
        let n = (free.len() / FREE_PER_LANE).clamp(1, MAX_LANES);
        let mut lists: Vec<Vec<u32>> = (0..n)
            .map(|_| Vec::with_capacity(free.len().div_ceil(n)))
            .collect();
        for (i, &p) in free.iter().enumerate() {
            lists[i % n].push(p);
        }
        Lanes {
            lanes: lists
                .into_iter()
                .map(|l| Lane {
                    state: Mutex::new(LaneState {
                        free: l,
                        pending: None,
                    }),
                })
                .collect(),
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.lanes.len()
    }

    /// This thread's lane if it is free, else any free lane, else wait for this thread's.
    #[inline]
    fn acquire(&self) -> MutexGuard<'_, LaneState> {
        let n = self.lanes.len();
        let mine = thread_hint() % n;
        for i in 0..n {
            if let Some(g) = self.lanes[(mine + i) % n].state.try_lock() {
                return g;
            }
        }
        self.lanes[mine].state.lock()
    }

    /// Every physical block no DRAM map entry names (free, or pending until the map entries
    /// that unmapped it are durable), sorted (for tests and `check` of a live device).
    pub(crate) fn free_blocks(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .lanes
            .iter()
            .flat_map(|l| l.state.lock().blocks().collect::<Vec<_>>())
            .collect();
        v.sort_unstable();
        v
    }
}

/// The atomic personality of a device: the DRAM copy of the map and the lanes of free blocks.
/// It reaches PM only through the [`DataPath`] it is handed.
pub(crate) struct AtomicMap {
    lanes: Lanes,
    map: MapCache,
}

impl AtomicMap {
    /// Recovery: the free blocks are those no map entry names (see the module comment).
    pub(crate) fn new(scan: &MapScan) -> AtomicMap {
        debug_assert_eq!(
            scan.problems, 0,
            "a map with problems is refused before this"
        );
        AtomicMap {
            lanes: Lanes::new(&scan.free),
            map: MapCache::new(&scan.map),
        }
    }

    /// Lanes (free lists).
    pub(crate) fn lanes(&self) -> usize {
        self.lanes.count()
    }

    /// Every free physical block now, sorted.
    pub(crate) fn free_blocks(&self) -> Vec<u32> {
        self.lanes.free_blocks()
    }

    /// Write blocks `b0..` atomically each. The caller holds their stripes exclusively (or,
    /// in pt-batch, their buffer mutexes). With `fua` every block is durable when this returns;
    /// without, at the next FLUSH (see the module comment: lazy publish).
    pub(crate) fn write<M: Media>(
        &self,
        dp: &DataPath<M>,
        b0: u64,
        src: &[u8],
        fua: bool,
    ) -> Result<()> {
        let bs = dp.layout.block_size as usize;
        let lanes = &self.lanes;
        // The deferred schemes keep no per-thread order of flushes and fences to piggyback on.
        let lazy_ok = !dp.persister.scheme().deferred();
        let mut lane = lanes.acquire();
        let n = src.len() / bs;
        let mut done = 0;
        while done < n {
            if lane.free.is_empty() {
                // Everything spare is pending: make it free (one flush + fence).
                self.settle(dp, &mut lane)?;
            }
            assert!(!lane.free.is_empty(), "a settled lane has free blocks");
            let k = (n - done).min(lane.free.len()).min(MAX_CHUNK);
            let mut new = [0u64; MAX_CHUNK];
            for slot in new.iter_mut().take(k) {
                *slot = lane.free.pop().expect("k <= free blocks") as u64;
            }
            let b = b0 + done as u64;
            let data = &src[done * bs..(done + k) * bs];
            let last = done + k == n;
            // The last chunk of a FUA write, or with nothing to piggyback on, publishes now.
            let now = !lazy_ok || (fua && last);
            let prev = lane.pending.take();
            let staged = self.stage(dp, &new[..k], data, prev.as_ref());
            // The data fence made the previous write's map entries durable (or failed before
            // any fence, and they stay pending).
            let entries = match staged {
                Ok(entries) => {
                    if let Some(p) = prev {
                        lane.free.extend_from_slice(&p.olds[..p.k]);
                    }
                    entries
                }
                Err(e) => {
                    lane.pending = prev;
                    lane.free.extend(new[..k].iter().map(|&p| p as u32));
                    return Err(e);
                }
            };
            match self.publish(dp, b, &entries[..k], now) {
                Ok(olds) => {
                    let mut p = Pending {
                        map_off: dp.layout.map_entry_off(b),
                        map_len: k * MAP_ENTRY as usize,
                        olds: [0; MAX_CHUNK],
                        k,
                    };
                    for (o, &old) in p.olds.iter_mut().zip(&olds[..k]) {
                        *o = old as u32;
                    }
                    if now {
                        lane.free.extend_from_slice(&p.olds[..k]);
                    } else {
                        lane.pending = Some(p);
                    }
                }
                Err(e) => {
                    // Nothing was published: the blocks are still free.
                    lane.free.extend(new[..k].iter().map(|&p| p as u32));
                    return Err(e);
                }
            }
            dp.stats.add(Ctr::AtomicBlocks, k as u64);
            done += k;
        }
        Ok(())
    }

    /// Make a lane's pending map entries durable (flush their lines, fence) and free their old
    /// blocks.
    fn settle<M: Media>(&self, dp: &DataPath<M>, lane: &mut LaneState) -> Result<()> {
        let Some(p) = lane.pending else {
            return Ok(());
        };
        let adr = dp.media.domain() == Domain::Adr;
        // A flush is permission-checked like a load: a read window suffices.
        dp.media.with_read(p.map_off, p.map_len, |v| {
            if adr {
                v.flush(p.map_off, p.map_len, Flush::best());
            }
            dp.persister.fence(v);
        })?;
        lane.pending = None;
        lane.free.extend_from_slice(&p.olds[..p.k]);
        Ok(())
    }

    /// Settle every lane (a FLUSH: every completed write becomes durable).
    pub(crate) fn settle_all<M: Media>(&self, dp: &DataPath<M>) -> Result<()> {
        for l in self.lanes.lanes.iter() {
            let mut g = l.state.lock();
            self.settle(dp, &mut g)?;
        }
        Ok(())
    }

    /// Copy `data` into the free physical blocks `pbas` and make it durable; returns the map
    /// entries that will publish them. The lines of `prev` (the lane's pending map entries)
    /// are flushed before the data's fence, so that fence makes them durable too.
    fn stage<M: Media>(
        &self,
        dp: &DataPath<M>,
        pbas: &[u64],
        data: &[u8],
        prev: Option<&Pending>,
    ) -> Result<[u64; MAX_CHUNK]> {
        let bs = dp.layout.block_size as usize;
        let p = &dp.persister;
        let deferred = p.scheme().deferred();
        if let Some(prev) = prev {
            assert!(!deferred, "the deferred schemes publish at once");
            if dp.media.domain() == Domain::Adr {
                dp.media.with_read(prev.map_off, prev.map_len, |v| {
                    v.flush(prev.map_off, prev.map_len, Flush::best())
                })?;
            }
        }
        let mut entries = [0u64; MAX_CHUNK];
        for (j, (&pba, blk)) in pbas.iter().zip(data.chunks(bs)).enumerate() {
            let off = dp.layout.phys_off(pba);
            let last = j + 1 == pbas.len();
            dp.media.with_write(off, bs, |v| {
                dp.emu.write(bs, || {
                    if deferred {
                        // The map store must not become durable before the data: persist
                        // now instead of at the next barrier.
                        v.write(off, blk);
                        p.persist_now(v, off, bs)
                    } else {
                        p.write(v, off, blk);
                        if last {
                            p.fence(v); // one fence for the chunk's data
                        }
                        Ok(())
                    }
                })
            })??;
            let crc = if !dp.layout.checksum() {
                0
            } else if is_zeroes(blk) {
                dp.zero_crc
            } else {
                crc32c::crc32c(blk)
            };
            entries[j] = entry(pba, crc);
            debug_assert_eq!((entry_pba(entries[j]), entry_crc(entries[j])), (pba, crc));
        }
        if dp.write_verify {
            let mut back = [0u8; MAX_BLOCK];
            for (j, &pba) in pbas.iter().enumerate() {
                let off = dp.layout.phys_off(pba);
                dp.media
                    .with_read(off, bs, |v| v.read(off, &mut back[..bs]))?;
                if back[..bs] != data[j * bs..(j + 1) * bs] {
                    dp.stats.add(Ctr::VerifyFailures, 1);
                    return Err(BlkError::VerifyFailed {
                        block: pba, // physical; the logical block keeps its old data
                    });
                }
            }
        }
        Ok(entries)
    }

    /// Swap the map entries of blocks `b..b+k` to `entries`; with `now`, persist them (one
    /// flush of their lines, one fence). Returns the physical blocks they named before.
    fn publish<M: Media>(
        &self,
        dp: &DataPath<M>,
        b: u64,
        entries: &[u64],
        now: bool,
    ) -> Result<[u64; MAX_CHUNK]> {
        let k = entries.len();
        let off = dp.layout.map_entry_off(b);
        let len = k * MAP_ENTRY as usize;
        let nphys = dp.layout.phys_blocks();
        let msync = dp.persister.scheme() == WriteScheme::Msync;
        let cache = &self.map;
        let mut olds = [0u64; MAX_CHUNK];
        for (j, old) in olds.iter_mut().take(k).enumerate() {
            *old = entry_pba(cache.get(b + j as u64));
            assert!(*old < nphys, "the DRAM map holds only in-range entries");
        }
        dp.media.with_write(off, len, |v| {
            v.store_words(off, entries);
            if !now {
                // Lazy: the lane's next write or a FLUSH makes them durable.
            } else if msync {
                v.sync_pages(off, len)?;
            } else {
                if v.domain() == Domain::Adr {
                    v.flush(off, len, Flush::best());
                }
                v.fence(Fence::Sfence);
            }
            Ok::<_, BlkError>(())
        })??;
        for (j, &e) in entries.iter().enumerate() {
            cache.set(b + j as u64, e);
        }
        Ok(olds)
    }

    /// Read blocks `b0..` through the map. The caller holds their stripes shared (or their
    /// buffer mutexes), so no writer can free the physical blocks during the copy.
    pub(crate) fn read<M: Media>(&self, dp: &DataPath<M>, b0: u64, dst: &mut [u8]) -> Result<()> {
        let r = self.read_blocks(dp, b0, dst);
        if r.is_err() {
            dst.fill(0); // never hand out part of a failed read
        }
        r
    }

    fn read_blocks<M: Media>(&self, dp: &DataPath<M>, b0: u64, dst: &mut [u8]) -> Result<()> {
        let bs = dp.layout.block_size as usize;
        let nphys = dp.layout.phys_blocks();
        let cache = &self.map;
        for (j, out) in dst.chunks_mut(bs).enumerate() {
            let block = b0 + j as u64;
            let e = cache.get(block);
            let pba = entry_pba(e);
            assert!(pba < nphys, "the DRAM map holds only in-range entries");
            let off = dp.layout.phys_off(pba);
            let bad = dp
                .media
                .with_read(off, bs, |v| match v.first_bad(off, bs) {
                    Some(at) => Some(at),
                    None => {
                        dp.emu.read(bs, || v.read(off, out));
                        None
                    }
                })?;
            if bad.is_some() {
                dp.stats.add(Ctr::MediaErrors, 1);
                return Err(BlkError::BadMedia {
                    block,
                    media_off: off as u64,
                });
            }
            if dp.layout.checksum() {
                let computed = crc32c::crc32c(out);
                if computed != entry_crc(e) {
                    dp.stats.add(Ctr::ChecksumErrors, 1);
                    return Err(BlkError::Checksum {
                        block,
                        off: block * bs as u64,
                        stored: entry_crc(e),
                        computed,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_split_the_free_blocks_and_hand_out_distinct_lanes() {
        let free: Vec<u32> = (100..110).collect();
        let lanes = Lanes::new(&free);
        assert_eq!(lanes.count(), 2);
        assert_eq!(lanes.free_blocks(), free);
        let a = lanes.acquire();
        let b = lanes.acquire(); // the other lane: try_lock skips the held one
        assert_eq!(a.free.len() + b.free.len(), 10);
        drop((a, b));
        let one = Lanes::new(&[5]);
        assert_eq!(one.count(), 1);
        let big: Vec<u32> = (0..1000).collect();
        assert_eq!(Lanes::new(&big).count(), MAX_LANES);
    }
}
