//! `pmkit bench kernel-path`: what a write through the kernel costs against a store, and which
//! way of calling the kernel is cheapest, on this machine's emulated PM. 4 KiB (and 512-byte)
//! random writes into a file of `--size` bytes:
//! - `nt store`: non-temporal stores into a writable mapping + sfence (protection `none`);
//! - `pwrite`: one `pwrite(2)` per write while the process maps the file read-only (what the
//!   `kernel` protection mode and PMO's kernel guard do);
//! - `io_uring xN`: N writes per submission (`io_uring_enter` once per N, registered file), the
//!   batching a server could do with several writes at hand.
//!
//! With `--threads 2` every configuration runs in two threads at once, on the same file: the
//! kernel's buffered write path takes the file's inode lock, so it shows whether writers scale.

use crate::report::{mean_over_threads, median, plot, rotated_rounds, BenchFlags};
use anyhow::{bail, Context, Result};
use io_uring::{opcode, types, IoUring};
use pmkit_media::protect::Access;
use pmkit_media::{KernelWriter, Persister, Region, RegionOptions, WriteScheme};
use serde::Serialize;
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone)]
pub(crate) struct Args {
    #[command(flatten)]
    pub flags: BenchFlags,
    /// Milliseconds per configuration per cell per round (default: 400, quick: 40)
    #[arg(long)]
    pub ms: Option<u64>,
    /// Size of the file in MiB (default: 1024, quick: 64)
    #[arg(long)]
    pub size_mib: Option<u64>,
}

/// Most writes one io_uring submission carries here.
const MAX_BATCH: usize = 32;

#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
enum Way {
    NtStore,
    Pwrite,
    Uring(usize),
}

impl Way {
    fn name(self) -> String {
        match self {
            Way::NtStore => "nt store".into(),
            Way::Pwrite => "pwrite".into(),
            Way::Uring(n) => format!("io_uring x{n}"),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
struct Cell {
    bytes: usize,
    threads: usize,
}

#[derive(Serialize)]
struct CellResult {
    #[serde(flatten)]
    cell: Cell,
    /// Median nanoseconds per write (per thread) for each way, in `ways` order.
    ns_per_write: Vec<f64>,
    /// Every round's value, per way.
    rounds: Vec<Vec<f64>>,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    cpu: String,
    file: String,
    size: u64,
    ms: u64,
    rounds: usize,
    ways: Vec<String>,
    results: Vec<CellResult>,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let quick = a.flags.quick;
    let ms = a.ms.unwrap_or(if quick { 40 } else { 400 });
    let size = a.size_mib.unwrap_or(if quick { 64 } else { 1024 }).max(16) << 20;
    let rounds = a.flags.rounds(3);
    let path = a
        .flags
        .dir
        .join(format!("pmkit-bench-kernel-path-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let opts = RegionOptions {
        populate: true,
        ..Default::default()
    };
    let region = Region::create(&path, size, &opts)
        .with_context(|| format!("creating the scratch file {}", path.display()))?;
    // The mapping keeps the file; it goes when the region drops.
    std::fs::remove_file(&path).ok();
    let writer = KernelWriter::new(&region)?;
    let ways = [
        Way::NtStore,
        Way::Pwrite,
        Way::Uring(1),
        Way::Uring(8),
        Way::Uring(MAX_BATCH),
    ];
    let cells: Vec<Cell> = [4096, 512]
        .into_iter()
        .flat_map(|bytes| [1, 2].map(|threads| Cell { bytes, threads }))
        .collect();
    let bar = a.flags.progress(rounds * cells.len() * ways.len());
    let raw = rotated_rounds(rounds, cells.len(), ways.len(), &bar, |r, ci, wi| {
        let cell = cells[ci];
        measure(
            &region,
            &writer,
            ways[wi],
            cell,
            ms,
            (r * 7 + ci * 3 + wi) as u64,
        )
    })?;
    let results = cells
        .iter()
        .zip(raw)
        .map(|(&cell, per_way)| CellResult {
            cell,
            ns_per_write: per_way.iter().map(|v| median(v.iter().copied())).collect(),
            rounds: per_way,
        })
        .collect();
    let report = Report {
        benchmark: "kernel-path",
        cpu: crate::host::cpu_label(),
        file: a.flags.dir.display().to_string(),
        size,
        ms,
        rounds,
        ways: ways.iter().map(|w| w.name()).collect(),
        results,
    };
    a.flags.emit(&report, draw, print)
}

/// Nanoseconds per write of one thread, `cell.threads` threads writing at once.
fn measure(
    region: &Region,
    writer: &KernelWriter,
    way: Way,
    cell: Cell,
    ms: u64,
    seed: u64,
) -> Result<f64> {
    // Stores need a writable mapping; the kernel ways run with the mapping read-only, as the
    // protection modes do.
    let access = if way == Way::NtStore {
        Access::ReadWrite
    } else {
        Access::Read
    };
    region.set_access(0, region.len(), access)?;
    let ns = mean_over_threads(cell.threads, |t| {
        one_thread(region, writer, way, cell.bytes, ms, seed * 31 + t as u64)
    });
    region.set_access(0, region.len(), Access::ReadWrite)?;
    ns
}

fn one_thread(
    region: &Region,
    writer: &KernelWriter,
    way: Way,
    bytes: usize,
    ms: u64,
    seed: u64,
) -> Result<f64> {
    let slots = (region.len() / bytes) as u64;
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        // xorshift64: spread offsets without a random-number crate in the hot loop.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % slots) as usize * bytes
    };
    let buf = vec![0xA5u8; bytes * MAX_BATCH];
    let nt = Persister::new(WriteScheme::Nt, region.len(), region.domain());
    let mut ring = match way {
        Way::Uring(_) => {
            let ring = IoUring::new(MAX_BATCH as u32 * 2).context("io_uring_setup")?;
            ring.submitter()
                .register_files(&[writer_fd(writer)])
                .context("registering the file with io_uring")?;
            Some(ring)
        }
        _ => None,
    };
    let batch = match way {
        Way::Uring(n) => n,
        _ => 8,
    };
    let dur = Duration::from_millis(ms);
    let t0 = Instant::now();
    let mut writes = 0u64;
    while t0.elapsed() < dur {
        match way {
            Way::NtStore => {
                for _ in 0..batch {
                    let off = next();
                    nt.write(region, off, &buf[..bytes]);
                    nt.fence(region);
                }
            }
            Way::Pwrite => {
                for _ in 0..batch {
                    writer.write(next(), &buf[..bytes])?;
                }
            }
            Way::Uring(n) => submit_batch(
                ring.as_mut().expect("made above"),
                &buf,
                bytes,
                n,
                &mut next,
            )?,
        }
        writes += batch as u64;
    }
    Ok(t0.elapsed().as_nanos() as f64 / writes as f64)
}

fn writer_fd(writer: &KernelWriter) -> i32 {
    writer.file().as_raw_fd()
}

/// `n` writes of `bytes` from `buf` at offsets from `next`, one submission, wait for all.
fn submit_batch(
    ring: &mut IoUring,
    buf: &[u8],
    bytes: usize,
    n: usize,
    next: &mut impl FnMut() -> usize,
) -> Result<()> {
    for k in 0..n {
        let src = &buf[k * bytes..(k + 1) * bytes];
        let sqe = opcode::Write::new(types::Fixed(0), src.as_ptr(), bytes as u32)
            .offset(next() as u64)
            .build()
            .user_data(k as u64);
        // SAFETY: `src` lives in `buf`, which outlives the wait below; every entry is
        // completed before this function returns.
        unsafe { ring.submission().push(&sqe) }.context("io_uring queue full")?;
    }
    ring.submit_and_wait(n).context("io_uring_enter")?;
    let mut done = 0;
    for cqe in ring.completion() {
        if cqe.result() != bytes as i32 {
            bail!(
                "io_uring write returned {} (expected {bytes})",
                cqe.result()
            );
        }
        done += 1;
    }
    if done != n {
        bail!("io_uring completed {done} of {n} writes");
    }
    Ok(())
}

fn print(r: &Report) {
    println!(
        "writes into a read-only-mapped file in {} ({} MiB), ns per write per thread, median of {} round(s) of {} ms; CPU: {}",
        r.file,
        r.size >> 20,
        r.rounds,
        r.ms,
        r.cpu
    );
    print!("{:<14}", "workload");
    for w in &r.ways {
        print!(" {w:>18}");
    }
    println!();
    for c in &r.results {
        print!("{:<14}", format!("{} B x{}", c.cell.bytes, c.cell.threads));
        let base = c.ns_per_write[0].max(1e-9);
        for v in &c.ns_per_write {
            print!(" {:>10.0} ({:>4.2}x)", v, base / v);
        }
        println!();
    }
    println!("(ratio: nt store time / this way's time; 1.00x = as cheap as a store)");
}

fn draw(path: &std::path::Path, r: &Report) -> Result<()> {
    let panels: Vec<plot::BarPanel> = r
        .results
        .iter()
        .map(|c| plot::BarPanel {
            title: format!("{} B x{}", c.cell.bytes, c.cell.threads),
            groups: vec!["ns/write".into()],
            series: r
                .ways
                .iter()
                .zip(&c.ns_per_write)
                .map(|(w, v)| (w.clone(), vec![*v]))
                .collect(),
        })
        .collect();
    plot::bars(
        path,
        &format!("writes through the kernel vs stores ({})", r.cpu),
        "ns per write (lower is better)",
        &panels,
        2,
    )
}
