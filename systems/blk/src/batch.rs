//! `pt-batch`: DRAM staging buffers in front of read-only PM (the PMBD paper, §IV.B,
//! Optimizations 1 and 2). A write lands in the buffer its block maps to (`(block / stride) % buffers`, so a
//! block lives in one buffer only and reads find it). Each buffer has a syncer thread that, from
//! the high watermark (or after an idle spell, from the low one), takes the oldest dirty blocks,
//! sorts them and writes each contiguous run to PM inside one `mprotect` write window.
//!
//! Locking: a request holds its blocks' stripes (device.rs), then each block's buffer mutex.
//! A drain holds the buffer mutex while it writes to PM, so a reader (which also takes the
//! buffer mutex) sees either the buffered copy or the drained one, never a half-written block.
//! Between batches a drain lets waiting writers in (`MutexGuard::bump`).
//!
//! Durability: buffered data is volatile, like a disk's write cache. FLUSH drains every buffer
//! before the scheme's barrier; FUA writes its blocks through to PM (dropping any buffered copy)
//! before it returns.

use crate::blocks::Blocks;
use crate::error::Result;
use crate::options::BatchOptions;
use crate::stats::BatchStats;
use parking_lot::{Condvar, Mutex, MutexGuard};
use pmkit_media::Media;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct Batch {
    bufs: Box<[Buf]>,
    opts: BatchOptions,
    bs: usize,
    /// Watermarks, in slots.
    high: usize,
    low: usize,
    stop: AtomicBool,
    ctr: Counters,
}

#[derive(Default)]
struct Counters {
    buffered: AtomicU64,
    absorbed: AtomicU64,
    reads_from_buffer: AtomicU64,
    drained: AtomicU64,
    runs: AtomicU64,
    writer_drains: AtomicU64,
}

struct Buf {
    st: Mutex<State>,
    wake: Condvar,
}

struct State {
    /// Buffered block -> (slot, insertion sequence for oldest-first draining).
    map: HashMap<u64, (u32, u64)>,
    free: Vec<u32>,
    data: Box<[u8]>,
    next_seq: u64,
    last_write: Instant,
    /// Reused by drains: the blocks chosen, and one run's bytes made contiguous.
    picked: Vec<(u64, u64)>,
    run: Box<[u8]>,
}

impl Batch {
    pub(crate) fn new(o: &BatchOptions, block_size: u32) -> Batch {
        let bs = block_size as usize;
        let slots = o.buffer_bytes / bs;
        assert!(slots >= 4 && slots <= u32::MAX as usize);
        let run_blocks = o.batch_blocks.min(slots);
        let bufs = (0..o.buffers)
            .map(|_| Buf {
                st: Mutex::new(State {
                    map: HashMap::with_capacity(slots),
                    free: (0..slots as u32).rev().collect(),
                    data: vec![0u8; slots * bs].into_boxed_slice(),
                    next_seq: 0,
                    last_write: Instant::now(),
                    picked: Vec::with_capacity(slots),
                    run: vec![0u8; run_blocks * bs].into_boxed_slice(),
                }),
                wake: Condvar::new(),
            })
            .collect();
        let high = (slots * o.high_pct as usize / 100).clamp(1, slots);
        let low = (slots * o.low_pct as usize / 100).min(high - 1);
        Batch {
            bufs,
            opts: *o,
            bs,
            high,
            low,
            stop: AtomicBool::new(false),
            ctr: Counters::default(),
        }
    }

    #[inline]
    fn buf_of(&self, block: u64) -> &Buf {
        &self.bufs[((block / self.opts.stride_blocks) % self.bufs.len() as u64) as usize]
    }

    /// Buffers (one syncer thread each).
    pub(crate) fn buffers(&self) -> usize {
        self.bufs.len()
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for b in self.bufs.iter() {
            let _g = b.st.lock();
            b.wake.notify_all();
        }
    }

    /// Stage blocks `b0..` (or, with `fua`, write them through).
    pub(crate) fn write<M: Media>(
        &self,
        dev: &Blocks<M>,
        b0: u64,
        src: &[u8],
        fua: bool,
    ) -> Result<()> {
        for (k, chunk) in src.chunks(self.bs).enumerate() {
            let block = b0 + k as u64;
            let buf = self.buf_of(block);
            let mut st = buf.st.lock();
            if fua {
                // The buffered copy (if any) is superseded; the new data goes straight to PM.
                if let Some((slot, _)) = st.map.remove(&block) {
                    st.free.push(slot);
                }
                dev.write(block, chunk, true)?;
                continue;
            }
            let slot = match st.map.get(&block) {
                Some(&(slot, _)) => {
                    self.ctr.absorbed.fetch_add(1, Ordering::Relaxed);
                    slot
                }
                None => {
                    if st.free.is_empty() {
                        // Full: this writer drains a batch itself rather than wait.
                        self.ctr.writer_drains.fetch_add(1, Ordering::Relaxed);
                        self.drain(dev, &mut st, self.low)?;
                    }
                    let slot = st.free.pop().expect("a drain frees slots");
                    let seq = st.next_seq;
                    st.next_seq += 1;
                    st.map.insert(block, (slot, seq));
                    slot
                }
            };
            let at = slot as usize * self.bs;
            st.data[at..at + self.bs].copy_from_slice(chunk);
            st.last_write = Instant::now();
            self.ctr.buffered.fetch_add(1, Ordering::Relaxed);
            if st.map.len() >= self.high {
                buf.wake.notify_one();
            }
        }
        Ok(())
    }

    /// Read blocks `b0..`, from the buffers where they are staged, else from PM.
    pub(crate) fn read<M: Media>(&self, dev: &Blocks<M>, b0: u64, dst: &mut [u8]) -> Result<()> {
        let r = self.read_blocks(dev, b0, dst);
        if r.is_err() {
            dst.fill(0); // never hand out part of a request that failed
        }
        r
    }

    fn read_blocks<M: Media>(&self, dev: &Blocks<M>, b0: u64, dst: &mut [u8]) -> Result<()> {
        for (k, chunk) in dst.chunks_mut(self.bs).enumerate() {
            let block = b0 + k as u64;
            {
                let st = self.buf_of(block).st.lock();
                if let Some(&(slot, _)) = st.map.get(&block) {
                    let at = slot as usize * self.bs;
                    chunk.copy_from_slice(&st.data[at..at + self.bs]);
                    self.ctr.reads_from_buffer.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
            // Not buffered. The caller holds this block's stripe shared, so no writer can buffer
            // it until we are done, and drains write only buffered blocks (removing them from the
            // map under the lock after their PM write): PM holds the block's latest data and
            // nobody writes it now. Read it without the buffer lock, so readers do not
            // serialize on the buffer.
            dev.read(block, chunk)?;
        }
        Ok(())
    }

    /// Drain every buffer completely (FLUSH and close).
    pub(crate) fn drain_all<M: Media>(&self, dev: &Blocks<M>) -> Result<()> {
        for b in self.bufs.iter() {
            let mut st = b.st.lock();
            self.drain(dev, &mut st, 0)?;
        }
        Ok(())
    }

    /// Write the oldest dirty blocks to PM until at most `target` remain: sorted by block, in
    /// batches of `batch_blocks`, one write window per contiguous run.
    fn drain<M: Media>(
        &self,
        dev: &Blocks<M>,
        st: &mut MutexGuard<'_, State>,
        target: usize,
    ) -> Result<()> {
        if st.map.len() <= target {
            return Ok(());
        }
        let mut picked = std::mem::take(&mut st.picked);
        picked.clear();
        picked.extend(st.map.iter().map(|(&b, &(_, seq))| (seq, b)));
        let take = st.map.len() - target;
        if take < picked.len() {
            picked.select_nth_unstable(take);
            picked.truncate(take);
        }
        // Now sort the chosen blocks by address so runs are contiguous.
        for p in picked.iter_mut() {
            *p = (p.1, 0);
        }
        picked.sort_unstable();
        let result = self.write_runs(dev, st, &picked);
        picked.clear();
        st.picked = picked;
        result
    }

    fn write_runs<M: Media>(
        &self,
        dev: &Blocks<M>,
        st: &mut MutexGuard<'_, State>,
        picked: &[(u64, u64)],
    ) -> Result<()> {
        let run_cap = st.run.len() / self.bs;
        for batch in picked.chunks(self.opts.batch_blocks) {
            let mut i = 0;
            while i < batch.len() {
                // Gather one contiguous run of blocks still buffered (a FUA write may have
                // taken some while the lock was released between batches).
                let start = batch[i].0;
                let mut n = 0usize;
                while i < batch.len() && batch[i].0 == start + n as u64 && n < run_cap {
                    let Some(&(slot, _)) = st.map.get(&batch[i].0) else {
                        break;
                    };
                    let (from, to) = (slot as usize * self.bs, n * self.bs);
                    let State { data, run, .. } = &mut **st;
                    run[to..to + self.bs].copy_from_slice(&data[from..from + self.bs]);
                    n += 1;
                    i += 1;
                }
                if n == 0 {
                    i += 1; // a block no longer buffered
                    continue;
                }
                dev.write(start, &st.run[..n * self.bs], false)?;
                for b in start..start + n as u64 {
                    let (slot, _) = st
                        .map
                        .remove(&b)
                        .expect("buffered block vanished under the lock");
                    st.free.push(slot);
                }
                self.ctr.runs.fetch_add(1, Ordering::Relaxed);
                self.ctr.drained.fetch_add(n as u64, Ordering::Relaxed);
            }
            // Let writers waiting on this buffer in between batches.
            MutexGuard::bump(st);
        }
        Ok(())
    }

    pub(crate) fn stats(&self) -> BatchStats {
        let c = &self.ctr;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BatchStats {
            buffered_writes: l(&c.buffered),
            overwrites_absorbed: l(&c.absorbed),
            reads_from_buffer: l(&c.reads_from_buffer),
            blocks_drained: l(&c.drained),
            runs: l(&c.runs),
            writer_drains: l(&c.writer_drains),
            dirty_blocks_now: self.bufs.iter().map(|b| b.st.lock().map.len() as u64).sum(),
        }
    }

    /// Buffer `i`'s syncer (runs in a thread of its own until [`Batch::stop`]): wake at the
    /// high watermark (writers notify) or every idle period; drain to the low watermark when
    /// over the high one, or when idle and over the low one.
    pub(crate) fn run_syncer<M: Media>(&self, dev: &Blocks<M>, i: usize) {
        let b = self;
        let buf = &b.bufs[i];
        let idle = Duration::from_millis(b.opts.idle_ms.max(1));
        let mut st = buf.st.lock();
        while !b.stop.load(Ordering::SeqCst) {
            let timed_out = buf.wake.wait_for(&mut st, idle).timed_out();
            let n = st.map.len();
            let idle_now = timed_out && st.last_write.elapsed() >= idle;
            if n >= b.high || (idle_now && n > b.low) {
                if let Err(e) = b.drain(dev, &mut st, b.low) {
                    // The blocks stay buffered; the next FLUSH retries and reports the error.
                    tracing::error!("pmbd syncer {i}: draining to PM failed: {e}");
                }
            }
        }
    }
}
