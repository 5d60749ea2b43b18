//! `pmkit bench xmem-alloc`: X-Mem's per-tag allocator against glibc malloc, jemalloc and
//! mimalloc, small (16-256 B) and large (64 KiB-1 MiB) objects, 1 and 2 threads, two patterns:
//! - `batch`: allocate a batch, then free it in allocation order, again and again;
//! - `churn`: a pool of live objects; each step frees a random one and allocates a new one in
//!   its place (sizes drawn again for the mixed cells).
//!
//! jemalloc (`tikv-jemallocator`) and mimalloc (`mimalloc`) are called as explicit allocator
//! objects through their `GlobalAlloc` impls; the process's global allocator stays glibc's.
//! Every object gets its first 8 bytes written (as a user would), nothing more, so the figures
//! are the allocators' own cost, not page faults of touched memory. With 2 threads, X-Mem's
//! threads share one tag (the harder case: one heap). `xmem` is X-Mem as configured by
//! default (per-thread caches of small objects, `Config::thread_cache`); `xmem-nocache` has
//! them off (every call takes the tag's heap lock).

use crate::report::{median, plot, rotated_rounds, BenchFlags};
use anyhow::{Context, Result};
use pmkit_xmem::{Config, Tag, XMem};
use serde::Serialize;
use std::alloc::{GlobalAlloc, Layout, System};
use std::process::ExitCode;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone)]
pub(crate) struct Args {
    #[command(flatten)]
    pub flags: BenchFlags,
    /// Milliseconds per configuration per cell per round (default: 300, quick: 20)
    #[arg(long)]
    pub ms: Option<u64>,
    /// Only the small-object cells (16-256 B) or only the large ones (64 KiB-1 MiB)
    #[arg(long, value_parser = ["small", "large"])]
    pub only: Option<String>,
    /// Run only this allocator (e.g. under `valgrind --tool=callgrind`, to count instructions
    /// per call of one allocator)
    #[arg(long, value_parser = PEERS)]
    pub peer: Option<String>,
    /// Run only the cells whose name (as printed, e.g. "16 churn x1") contains this
    #[arg(long)]
    pub cell: Option<String>,
}

/// An allocator under test: alloc and free by (size, align 16).
trait Peer: Sync {
    fn alloc(&self, size: usize) -> *mut u8;
    /// # Safety
    /// `p` came from `alloc(size)` of this peer and is freed once.
    unsafe fn free(&self, p: *mut u8, size: usize);
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 16).expect("sizes here are small and non-zero")
}

/// A `GlobalAlloc` used as an explicit object.
struct Global<A: GlobalAlloc + Sync>(A);

impl<A: GlobalAlloc + Sync> Peer for Global<A> {
    fn alloc(&self, size: usize) -> *mut u8 {
        // SAFETY: a non-zero size with alignment 16.
        let p = unsafe { self.0.alloc(layout(size)) };
        assert!(!p.is_null(), "out of memory");
        p
    }
    unsafe fn free(&self, p: *mut u8, size: usize) {
        // SAFETY: the caller passes what `alloc` returned for this size.
        unsafe { self.0.dealloc(p, layout(size)) }
    }
}

struct Xmem<'a>(&'a XMem, Tag);

impl Peer for Xmem<'_> {
    fn alloc(&self, size: usize) -> *mut u8 {
        self.0.alloc(self.1, size, 16).expect("xmem alloc").as_ptr()
    }
    unsafe fn free(&self, p: *mut u8, _size: usize) {
        let p = NonNull::new(p).expect("not null");
        // SAFETY: the caller frees an object of this XMem once.
        unsafe { self.0.free(p) }.expect("xmem free");
    }
}

const PEERS: [&str; 5] = ["glibc", "jemalloc", "mimalloc", "xmem", "xmem-nocache"];

#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
enum Pattern {
    Batch,
    Churn,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct Cell {
    /// Smallest and largest object size; sizes are drawn uniformly (16-byte steps) between.
    min: usize,
    max: usize,
    pattern: Pattern,
    threads: usize,
}

impl Cell {
    fn name(&self) -> String {
        let size = if self.min == self.max {
            human(self.min)
        } else {
            format!("{}-{}", human(self.min), human(self.max))
        };
        let p = match self.pattern {
            Pattern::Batch => "batch",
            Pattern::Churn => "churn",
        };
        format!("{size} {p} x{}", self.threads)
    }

    fn small(&self) -> bool {
        self.max <= 8192
    }

    /// Objects per batch (or live in the churn pool) per thread.
    fn count(&self) -> usize {
        if self.small() {
            10_000
        } else {
            48
        }
    }
}

fn human(b: usize) -> String {
    match b {
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

#[derive(Serialize)]
struct CellResult {
    #[serde(flatten)]
    cell: Cell,
    /// Median million alloc+free pairs per second (all threads), in `peers` order.
    mops: Vec<f64>,
    /// X-Mem's throughput (default configuration) over jemalloc's.
    xmem_vs_jemalloc: f64,
    rounds: Vec<Vec<f64>>,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    cpu: String,
    ms: u64,
    rounds: usize,
    peers: Vec<&'static str>,
    results: Vec<CellResult>,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let quick = a.flags.quick;
    let ms = a.ms.unwrap_or(if quick { 20 } else { 300 });
    let rounds = a.flags.rounds(3);
    let path = a
        .flags
        .dir
        .join(format!("pmkit-bench-xmem-alloc-{}", std::process::id()));
    // Everything fits the DRAM budget: this measures the allocator, not a tier.
    let make = |name: &str, thread_cache: bool| -> Result<XMem> {
        let path = path.with_extension(name);
        let mut cfg = Config::new(&path, 256 << 20, 1 << 30);
        cfg.reserve = 16 << 30;
        cfg.thread_cache = thread_cache;
        XMem::new(cfg).with_context(|| format!("X-Mem with its PM file {}", path.display()))
    };
    let (x, xn) = (make("cached", true)?, make("nocache", false)?);
    let (tag, tag_n) = (x.tag("bench")?, xn.tag("bench")?);
    let sys = Global(System);
    let je = Global(tikv_jemallocator::Jemalloc);
    let mi = Global(mimalloc::MiMalloc);
    let xm = Xmem(&x, tag);
    let xmn = Xmem(&xn, tag_n);
    let all: [&dyn Peer; 5] = [&sys, &je, &mi, &xm, &xmn];
    let names: Vec<&'static str> = PEERS
        .into_iter()
        .filter(|p| a.peer.as_deref().is_none_or(|q| q == *p))
        .collect();
    let peers: Vec<&dyn Peer> = (0..PEERS.len())
        .filter(|&i| names.contains(&PEERS[i]))
        .map(|i| all[i])
        .collect();
    let mut cells = Vec::new();
    for (min, max) in [
        (16, 16),
        (64, 64),
        (256, 256),
        (16, 256),
        (64 << 10, 64 << 10),
        (1 << 20, 1 << 20),
        (64 << 10, 1 << 20),
    ] {
        if quick && min != max && min < 1024 {
            continue;
        }
        match a.only.as_deref() {
            Some("small") if max > 8192 => continue,
            Some("large") if max <= 8192 => continue,
            _ => {}
        }
        for pattern in [Pattern::Batch, Pattern::Churn] {
            for threads in [1, 2] {
                let cell = Cell {
                    min,
                    max,
                    pattern,
                    threads,
                };
                if a.cell.as_deref().is_none_or(|n| cell.name().contains(n)) {
                    cells.push(cell);
                }
            }
        }
    }
    anyhow::ensure!(!cells.is_empty(), "no cell matches --cell");
    let bar = a.flags.progress(rounds * cells.len() * peers.len());
    let raw = rotated_rounds(rounds, cells.len(), peers.len(), &bar, |r, ci, pi| {
        Ok(measure(peers[pi], cells[ci], ms, (r * 131 + ci * 7) as u64))
    })?;
    x.check_invariants();
    xn.check_invariants();
    let results = cells
        .iter()
        .zip(raw)
        .map(|(&cell, per_peer)| {
            let mops: Vec<f64> = per_peer.iter().map(|v| median(v.iter().copied())).collect();
            let of = |n: &str| names.iter().position(|p| *p == n).map(|i| mops[i]);
            let ratio = match (of("xmem"), of("jemalloc")) {
                (Some(x), Some(j)) => x / j.max(1e-12),
                _ => f64::NAN,
            };
            CellResult {
                cell,
                xmem_vs_jemalloc: ratio,
                mops,
                rounds: per_peer,
            }
        })
        .collect();
    let report = Report {
        benchmark: "xmem-alloc",
        cpu: crate::host::cpu_label(),
        ms,
        rounds,
        peers: names.clone(),
        results,
    };
    a.flags.emit(&report, draw, print)
}

/// Million alloc+free pairs per second of `cell.threads` threads running at once.
fn measure(peer: &dyn Peer, cell: Cell, ms: u64, seed: u64) -> f64 {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..cell.threads)
            .map(|t| s.spawn(move || one_thread(peer, cell, ms, seed * 17 + t as u64)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("bench thread"))
            .sum()
    })
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64: cheap enough not to show in the figures.
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn size(&mut self, c: &Cell) -> usize {
        if c.min == c.max {
            return c.min;
        }
        let steps = ((c.max - c.min) / 16 + 1) as u64;
        c.min + (self.next() % steps) as usize * 16
    }
}

fn touch(p: *mut u8) {
    // SAFETY: every object is at least 16 bytes and 16-byte aligned.
    unsafe { p.cast::<u64>().write_volatile(0x5EED) }
}

fn one_thread(peer: &dyn Peer, c: Cell, ms: u64, seed: u64) -> f64 {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let n = c.count();
    let mut live: Vec<(*mut u8, usize)> = Vec::with_capacity(n);
    let dur = Duration::from_millis(ms);
    let mut pairs = 0u64;
    let t0 = Instant::now();
    match c.pattern {
        Pattern::Batch => {
            // One warm-up batch, then timed ones.
            while pairs == 0 || t0.elapsed() < dur {
                for _ in 0..n {
                    let size = rng.size(&c);
                    let p = peer.alloc(size);
                    touch(p);
                    live.push((p, size));
                }
                for (p, size) in live.drain(..) {
                    // SAFETY: allocated above by this peer, freed once.
                    unsafe { peer.free(p, size) };
                }
                pairs += n as u64;
            }
        }
        Pattern::Churn => {
            for _ in 0..n {
                let size = rng.size(&c);
                let p = peer.alloc(size);
                touch(p);
                live.push((p, size));
            }
            while pairs == 0 || t0.elapsed() < dur {
                for _ in 0..256 {
                    let i = (rng.next() % n as u64) as usize;
                    let (p, size) = live[i];
                    // SAFETY: a live object of this peer, replaced right after.
                    unsafe { peer.free(p, size) };
                    let size = rng.size(&c);
                    let p = peer.alloc(size);
                    touch(p);
                    live[i] = (p, size);
                }
                pairs += 256;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    for (p, size) in live {
        // SAFETY: the pool's live objects, freed once.
        unsafe { peer.free(p, size) };
    }
    pairs as f64 / secs / 1e6
}

fn print(r: &Report) {
    println!(
        "million alloc+free pairs per second (all threads), median of {} round(s) of {} ms; CPU: {}",
        r.rounds, r.ms, r.cpu
    );
    print!("{:<20}", "cell");
    for p in &r.peers {
        print!(" {p:>12}");
    }
    println!(" {:>12}", "xmem/jemalloc");
    for c in &r.results {
        print!("{:<20}", c.cell.name());
        for v in &c.mops {
            print!(" {v:>12.2}");
        }
        println!(" {:>12.2}x", c.xmem_vs_jemalloc);
    }
}

fn draw(path: &std::path::Path, r: &Report) -> Result<()> {
    let panels: Vec<plot::BarPanel> = [true, false]
        .into_iter()
        .map(|small| {
            let cells: Vec<&CellResult> = r
                .results
                .iter()
                .filter(|c| c.cell.small() == small)
                .collect();
            plot::BarPanel {
                title: if small {
                    "small objects"
                } else {
                    "large objects"
                }
                .into(),
                groups: cells.iter().map(|c| c.cell.name()).collect(),
                series: r
                    .peers
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (p.to_string(), cells.iter().map(|c| c.mops[i]).collect()))
                    .collect(),
            }
        })
        .collect();
    plot::bars(
        path,
        &format!("allocation throughput ({})", r.cpu),
        "million alloc+free pairs/s (higher is better)",
        &panels,
        1,
    )
}
