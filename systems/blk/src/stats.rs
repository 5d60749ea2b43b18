//! Statistics: operation counts, bytes, latency histograms. Recorded in per-thread shards so
//! threads never share a counter's cache line; a histogram sample is skipped rather than waited
//! for when its shard is busy (two threads hashed to one shard), so stats never serialize I/O.

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

const SHARDS: usize = 16;

#[derive(Debug, Clone, Copy)]
#[repr(usize)]
pub enum Ctr {
    Reads,
    ReadBytes,
    Writes,
    WriteBytes,
    FuaWrites,
    Flushes,
    Trims,
    TrimBytes,
    WriteZeroes,
    WriteZeroBytes,
    ChecksumErrors,
    VerifyFailures,
    SubpageLinesWritten,
    SubpageLinesSkipped,
    Rejected,
    AtomicBlocks,
    PartialBlocks,
    MediaErrors,
}
const NCTR: usize = Ctr::MediaErrors as usize + 1;

#[derive(Debug, Clone, Copy)]
pub enum Op {
    Read,
    Write,
    Flush,
}

struct Hists {
    read: Histogram<u64>,
    write: Histogram<u64>,
    flush: Histogram<u64>,
}

#[repr(align(128))]
struct Shard {
    ctr: [AtomicU64; NCTR],
    /// Allocated at the shard's first sample: three histograms are ~130 KiB, and a device
    /// opened for a short check (crash tests open thousands) should not pay for 16 shards.
    hist: Mutex<Option<Box<Hists>>>,
}

pub struct Recorder {
    shards: Box<[Shard]>,
}

fn hist() -> Histogram<u64> {
    // TSC cycles from 1 to ~10^12 (minutes), 2 significant digits: a few KiB each.
    Histogram::new_with_bounds(1, 1_000_000_000_000, 2).expect("static histogram bounds are valid")
}

impl Default for Recorder {
    fn default() -> Self {
        let shards = (0..SHARDS)
            .map(|_| Shard {
                ctr: std::array::from_fn(|_| AtomicU64::new(0)),
                hist: Mutex::new(None),
            })
            .collect();
        Recorder { shards }
    }
}

fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static IDX: Cell<usize> = const { Cell::new(usize::MAX) });
    IDX.with(|c| {
        if c.get() == usize::MAX {
            c.set(NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS);
        }
        c.get()
    })
}

impl Recorder {
    #[inline]
    pub fn add(&self, c: Ctr, n: u64) {
        self.shards[shard_index()].ctr[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Record one operation's latency in TSC cycles (skipped if the shard is busy).
    #[inline]
    pub fn latency(&self, op: Op, cycles: u64) {
        if let Some(mut h) = self.shards[shard_index()].hist.try_lock() {
            let h = h.get_or_insert_with(|| {
                Box::new(Hists {
                    read: hist(),
                    write: hist(),
                    flush: hist(),
                })
            });
            let h = match op {
                Op::Read => &mut h.read,
                Op::Write => &mut h.write,
                Op::Flush => &mut h.flush,
            };
            h.saturating_record(cycles.max(1));
        }
    }

    fn total(&self, c: Ctr) -> u64 {
        self.shards
            .iter()
            .map(|s| s.ctr[c as usize].load(Ordering::Relaxed))
            .sum()
    }

    pub fn snapshot(&self, windows_opened: u64, batch: Option<BatchStats>) -> Stats {
        let (mut r, mut w, mut f) = (hist(), hist(), hist());
        for s in self.shards.iter() {
            if let Some(h) = &*s.hist.lock() {
                r.add(&h.read).expect("same bounds");
                w.add(&h.write).expect("same bounds");
                f.add(&h.flush).expect("same bounds");
            }
        }
        let t = |c| self.total(c);
        Stats {
            reads: t(Ctr::Reads),
            read_bytes: t(Ctr::ReadBytes),
            writes: t(Ctr::Writes),
            write_bytes: t(Ctr::WriteBytes),
            fua_writes: t(Ctr::FuaWrites),
            flushes: t(Ctr::Flushes),
            trims: t(Ctr::Trims),
            trim_bytes: t(Ctr::TrimBytes),
            write_zeroes: t(Ctr::WriteZeroes),
            write_zero_bytes: t(Ctr::WriteZeroBytes),
            checksum_errors: t(Ctr::ChecksumErrors),
            verify_failures: t(Ctr::VerifyFailures),
            subpage_lines_written: t(Ctr::SubpageLinesWritten),
            subpage_lines_skipped: t(Ctr::SubpageLinesSkipped),
            rejected: t(Ctr::Rejected),
            atomic_blocks: t(Ctr::AtomicBlocks),
            partial_blocks: t(Ctr::PartialBlocks),
            media_errors: t(Ctr::MediaErrors),
            windows_opened,
            read_latency: Latency::of(&r),
            write_latency: Latency::of(&w),
            flush_latency: Latency::of(&f),
            batch,
        }
    }
}

/// A snapshot of the device's statistics (serializable as JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub fua_writes: u64,
    pub flushes: u64,
    pub trims: u64,
    pub trim_bytes: u64,
    pub write_zeroes: u64,
    pub write_zero_bytes: u64,
    pub checksum_errors: u64,
    pub verify_failures: u64,
    pub subpage_lines_written: u64,
    pub subpage_lines_skipped: u64,
    /// Requests refused as invalid (misaligned, out of range, ...).
    pub rejected: u64,
    /// Blocks written through the map of an atomic device (each published by one map store).
    pub atomic_blocks: u64,
    /// Blocks read, patched and written back for sub-block requests (`write_bytes`).
    pub partial_blocks: u64,
    /// Reads refused because the media reported an error (poison) in their range.
    pub media_errors: u64,
    /// Protection windows that cost a system call (pt, pt-batch, private).
    pub windows_opened: u64,
    pub read_latency: Latency,
    pub write_latency: Latency,
    pub flush_latency: Latency,
    pub batch: Option<BatchStats>,
}

/// Staging-buffer activity (pt-batch).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct BatchStats {
    pub buffered_writes: u64,
    /// Writes that found their block already buffered (absorbed in DRAM).
    pub overwrites_absorbed: u64,
    pub reads_from_buffer: u64,
    pub blocks_drained: u64,
    /// Contiguous runs written, each with one write window.
    pub runs: u64,
    /// Drains done by a writer because its buffer was full.
    pub writer_drains: u64,
    pub dirty_blocks_now: u64,
}

/// Latency summary in nanoseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Operations sampled (a sample is dropped when its shard is busy).
    pub samples: u64,
    pub mean_ns: f64,
    pub p50_ns: f64,
    pub p99_ns: f64,
    pub p999_ns: f64,
    pub max_ns: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let k = ns_per_cycle();
        Latency {
            samples: h.len(),
            mean_ns: h.mean() * k,
            p50_ns: h.value_at_quantile(0.5) as f64 * k,
            p99_ns: h.value_at_quantile(0.99) as f64 * k,
            p999_ns: h.value_at_quantile(0.999) as f64 * k,
            max_ns: h.max() as f64 * k,
        }
    }
}

/// Nanoseconds per TSC cycle, measured once against the monotonic clock.
pub fn ns_per_cycle() -> f64 {
    static K: OnceLock<f64> = OnceLock::new();
    *K.get_or_init(|| {
        let (t0, c0) = (std::time::Instant::now(), pmkit_media::emulate::cycles());
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (ns, c) = (
            t0.elapsed().as_nanos() as f64,
            pmkit_media::emulate::cycles().wrapping_sub(c0),
        );
        if c == 0 {
            1.0
        } else {
            ns / c as f64
        }
    })
}
