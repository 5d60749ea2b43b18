//! `pmkit bench fs-protect`: what protecting PM from stray stores costs PMFS (the library called
//! directly, no FUSE), per protection mode, in the spirit of PMFS's Fig. 18 (write windows
//! against page-table toggling):
//! - `none`: PM mapped read-write, nothing to pay (the baseline);
//! - `kernel`: PM read-only, every store a `pwrite` (the default without pkeys);
//! - `pt`: PM read-only, each store's pages made writable around it with `mprotect` (page-table
//!   toggling: the thesis's costly alternative);
//! - `pkey`: a WRPKRU write window per store (the thesis's CR0.WP windows in user space), where
//!   the CPU has protection keys; elsewhere the report says it was not run.
//!
//! `--sums` runs each mode twice, the second time with data checksums on the data file
//! (`Fs::set_sums`: copy-on-write writes, every read checked), side by side: what sums cost.
//!
//! Workloads, per thread in its own directory: 4 KiB append + fsync (with the preallocation
//! past the end of the file that makes most appends skip the journal, and without it:
//! `MountOptions::no_prealloc`, every append that starts a block a transaction), 4 KiB random overwrite,
//! 64 B random overwrite (16 MiB files), create + unlink of an empty file, rename, and stat
//! (no store: what the read path pays); 1 and 2 threads. Every (mode, workload) runs on a fresh
//! pool in `--dir`, populated (`MAP_POPULATE`: the first touch of a tmpfs page, a page fault
//! and a page cleared, is no cost of PM and was a large part of the append figure).
//!
//! The reference the append is set against: a raw 4 KiB non-temporal write plus a fence
//! (`pmkit_media::Persister`, as `bench kernel-path`'s `nt store`) into a region in `--dir`, at
//! sequential offsets as an append's, measured in the same run; the report prints each mode's
//! append time over it.

use crate::report::{mean_over_threads, median, plot, rotated_rounds, BenchFlags};
use anyhow::{Context, Result};
use pmkit_fs::{Fs, MkfsOptions, MountOptions, Protect, RenameFlags, ROOT};
use pmkit_media::{Persister, Region, RegionOptions, WriteScheme};
use serde::Serialize;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone)]
pub(crate) struct Args {
    #[command(flatten)]
    pub flags: BenchFlags,
    /// Milliseconds per (mode, workload) per round (default: 300, quick: 30)
    #[arg(long)]
    pub ms: Option<u64>,
    /// Only the appends (with and without preallocation) and the raw reference: the
    /// append goal, measured in a fraction of the time
    #[arg(long)]
    pub append_only: bool,
    /// Protection modes to run, comma-separated (kernel, pt, pkey; `none`, the baseline, always
    /// runs); default: all of them, pkey where the CPU has protection keys
    #[arg(long, value_delimiter = ',')]
    pub modes: Vec<Protect>,
    /// Run each mode also with data checksums on the data file (`Fs::set_sums`), side by side
    #[arg(long)]
    pub sums: bool,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum Work {
    Append4kFsync,
    Append4kFsyncNoPrealloc,
    Overwrite4k,
    Overwrite64,
    Read4k,
    Read64,
    CreateUnlink,
    Rename,
    Stat,
}

const WORKS: [Work; 9] = [
    Work::Append4kFsync,
    Work::Append4kFsyncNoPrealloc,
    Work::Overwrite4k,
    Work::Overwrite64,
    Work::Read4k,
    Work::Read64,
    Work::CreateUnlink,
    Work::Rename,
    Work::Stat,
];

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Append4kFsync => "append 4K+fsync",
            Work::Append4kFsyncNoPrealloc => "  no prealloc",
            Work::Overwrite4k => "overwrite 4K",
            Work::Overwrite64 => "overwrite 64B",
            Work::Read4k => "read 4K",
            Work::Read64 => "read 64B",
            Work::CreateUnlink => "create+unlink",
            Work::Rename => "rename",
            Work::Stat => "stat",
        }
    }
}

/// Size of each thread's data file.
const FILE: u64 = 16 << 20;

#[derive(Serialize)]
struct CellResult {
    workload: Work,
    threads: usize,
    /// Median microseconds per operation (per thread), in `modes` order.
    us_per_op: Vec<f64>,
    /// Every round's value, per mode.
    rounds: Vec<Vec<f64>>,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    cpu: String,
    dir: String,
    ms: u64,
    rounds: usize,
    modes: Vec<String>,
    /// Modes this CPU cannot run (and why).
    not_run: Vec<String>,
    results: Vec<CellResult>,
    /// The reference: a raw 4 KiB non-temporal write + fence, per thread count.
    raw_nt_4k_fence: Vec<RawResult>,
}

#[derive(Serialize)]
struct RawResult {
    threads: usize,
    /// Median microseconds per write + fence (per thread).
    us_per_op: f64,
    rounds: Vec<f64>,
    /// The same write, then a 16-byte store to one line flushed and fenced: the floor of an
    /// append that is durable before the size that publishes it is (two fences).
    published_us_per_op: f64,
    published_rounds: Vec<f64>,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let ms = a.ms.unwrap_or(if a.flags.quick { 30 } else { 300 });
    let rounds = a.flags.rounds(3);
    let pku = pmkit_media::features().pku;
    let mut modes = match a.modes.is_empty() {
        true => vec![Protect::None, Protect::Kernel, Protect::Pt, Protect::Pkey],
        false => a.modes.clone(),
    };
    // `none` is the baseline every other mode is reported against: always run, first
    modes.retain(|m| *m != Protect::None);
    modes.dedup();
    modes.insert(0, Protect::None);
    let mut not_run = vec![];
    if !pku && modes.contains(&Protect::Pkey) {
        modes.retain(|m| *m != Protect::Pkey);
        not_run.push("pkey: this CPU has no memory protection keys (pku)".to_string());
    }
    let cells: Vec<(Work, usize)> = WORKS
        .iter()
        .filter(|&&w| {
            !a.append_only || matches!(w, Work::Append4kFsync | Work::Append4kFsyncNoPrealloc)
        })
        .flat_map(|&w| [(w, 1), (w, 2)])
        .collect();
    // each mode, and with `--sums` each mode again with data checksums
    let configs: Vec<(Protect, bool)> = modes
        .iter()
        .flat_map(|&m| [(m, false), (m, true)])
        .filter(|&(_, s)| a.sums || !s)
        .collect();
    let bar = a.flags.progress(rounds * (cells.len() * configs.len() + 4));
    let raw = rotated_rounds(rounds, cells.len(), configs.len(), &bar, |r, ci, mi| {
        let (work, threads) = cells[ci];
        let (mode, sums) = configs[mi];
        let seed = (r * 7 + ci) as u64;
        measure(&a.flags.dir, (mode, sums), work, threads, ms, seed)
    })?;
    let results = cells
        .iter()
        .zip(raw)
        .map(|(&(workload, threads), per_mode)| CellResult {
            workload,
            threads,
            us_per_op: per_mode.iter().map(|v| median(v.iter().copied())).collect(),
            rounds: per_mode,
        })
        .collect();
    let raw_nt_4k_fence = raw_results(&a.flags.dir, rounds, ms, &bar)?;
    let report = Report {
        benchmark: "fs-protect",
        cpu: crate::host::cpu_label(),
        dir: a.flags.dir.display().to_string(),
        ms,
        rounds,
        modes: configs
            .iter()
            .map(|&(m, s)| format!("{}{}", m.name(), if s { "+sums" } else { "" }))
            .collect(),
        not_run,
        results,
        raw_nt_4k_fence,
    };
    a.flags.emit(&report, draw, print)
}

/// Per thread count: the raw write, and the raw write then its publishing store.
fn raw_results(
    dir: &std::path::Path,
    rounds: usize,
    ms: u64,
    bar: &pmkit::progress::Progress,
) -> Result<Vec<RawResult>> {
    let raw = rotated_rounds(rounds, 2, 2, bar, |_, ci, mi| {
        raw_nt(dir, ci + 1, ms, mi == 1)
    })?;
    Ok(raw
        .into_iter()
        .enumerate()
        .map(|(ci, mut v)| {
            let rounds = v.remove(0);
            let published = v.remove(0);
            RawResult {
                threads: ci + 1,
                us_per_op: median(rounds.iter().copied()),
                rounds,
                published_us_per_op: median(published.iter().copied()),
                published_rounds: published,
            }
        })
        .collect())
}

/// Microseconds per operation of one thread, `threads` threads at once, on a fresh pool.
fn measure(
    dir: &std::path::Path,
    (mode, sums): (Protect, bool),
    work: Work,
    threads: usize,
    ms: u64,
    seed: u64,
) -> Result<f64> {
    let path = dir.join(format!("pmkit-bench-fs-protect-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let region = Region::create(
        &path,
        256 << 20,
        &RegionOptions {
            populate: true,
            ..Default::default()
        },
    )
    .with_context(|| format!("creating the scratch pool {}", path.display()))?;
    // The mapping keeps the file alive; the name goes now so nothing is left behind.
    std::fs::remove_file(&path).ok();
    Fs::mkfs(&region, &MkfsOptions::default())?;
    let o = MountOptions {
        protect: Some(mode),
        no_prealloc: work == Work::Append4kFsyncNoPrealloc,
        ..MountOptions::default()
    };
    let (fs, _) = Fs::mount(region, &o).with_context(|| format!("mounting with {mode}"))?;
    let us = mean_over_threads(threads, |t| {
        one_thread(&fs, (work, sums), t, ms, seed * 31 + t as u64)
    });
    drop(fs.unmount());
    us
}

fn one_thread(
    fs: &Fs<Region>,
    (work, sums): (Work, bool),
    t: usize,
    ms: u64,
    seed: u64,
) -> Result<f64> {
    let home = fs.mkdir(ROOT, format!("t{t}").as_bytes(), 0o755)?.ino;
    let file = fs.create(home, b"data", 0o644)?.ino;
    fs.open(file)?;
    if sums {
        fs.set_sums(file, true)?;
    }
    if matches!(
        work,
        Work::Overwrite4k | Work::Overwrite64 | Work::Read4k | Work::Read64
    ) {
        fs.fallocate(file, 0, FILE)?;
    }
    let mut out = vec![0u8; 4096];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let buf = vec![0x5au8; 4096];
    let dur = Duration::from_millis(ms);
    let (mut ops, mut busy) = (0u64, Duration::ZERO);
    let mut size = 0u64;
    while busy < dur {
        // 64 operations per timed batch; resets (truncating a full file) stay outside it.
        let append = matches!(work, Work::Append4kFsync | Work::Append4kFsyncNoPrealloc);
        if append && size + 64 * 4096 > FILE {
            fs.setattr(
                file,
                &pmkit_fs::SetAttr {
                    size: Some(0),
                    ..Default::default()
                },
            )?;
            size = 0;
        }
        let t0 = Instant::now();
        for i in 0..64u64 {
            match work {
                Work::Append4kFsync | Work::Append4kFsyncNoPrealloc => {
                    fs.write(file, size, &buf)?;
                    fs.fsync(file)?;
                    size += 4096;
                }
                Work::Overwrite4k => {
                    fs.write(file, next(FILE / 4096) * 4096, &buf)?;
                }
                Work::Overwrite64 => {
                    fs.write(file, next(FILE / 64) * 64, &buf[..64])?;
                }
                Work::Read4k => {
                    fs.read_into(file, next(FILE / 4096) * 4096, &mut out)?;
                }
                Work::Read64 => {
                    fs.read_into(file, next(FILE / 64) * 64, &mut out[..64])?;
                }
                Work::CreateUnlink => {
                    fs.create(home, b"tmp", 0o644)?;
                    fs.unlink(home, b"tmp")?;
                }
                Work::Rename => {
                    let (a, b): (&[u8], &[u8]) = if i % 2 == 0 {
                        (b"data", b"moved")
                    } else {
                        (b"moved", b"data")
                    };
                    fs.rename(home, a, home, b, RenameFlags::Replace)?;
                }
                Work::Stat => {
                    fs.getattr(file)?;
                }
            }
        }
        busy += t0.elapsed();
        ops += 64;
    }
    // A rename batch is an even count: the file is back at "data".
    fs.release(file)?;
    Ok(busy.as_secs_f64() * 1e6 / ops as f64)
}

/// Microseconds per raw 4 KiB non-temporal write + fence, per thread, `threads` threads at once,
/// each writing its own 16 MiB at sequential offsets (as an append does) in a fresh region.
/// With `publish`, each write is followed by what publishes an append in PMFS's design: a
/// 16-byte store to one line, flushed (clwb) and fenced: the floor of an append made durable
/// data first, then the size that makes it visible.
pub(crate) fn raw_nt(dir: &std::path::Path, threads: usize, ms: u64, publish: bool) -> Result<f64> {
    let path = dir.join(format!("pmkit-bench-fs-protect-raw-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    // populated: the page faults of a first touch are not part of a raw write
    let opts = RegionOptions {
        populate: true,
        ..Default::default()
    };
    let region = Region::create(&path, threads as u64 * FILE, &opts)
        .with_context(|| format!("creating the scratch file {}", path.display()))?;
    std::fs::remove_file(&path).ok();
    let nt = Persister::new(WriteScheme::Nt, region.len(), region.domain());
    let clwb = Persister::new(WriteScheme::Clwb, region.len(), region.domain());
    let (region, nt, clwb) = (&region, &nt, &clwb);
    mean_over_threads(threads, |t| {
        let buf = vec![0x5au8; 4096];
        let base = t * FILE as usize;
        let dur = Duration::from_millis(ms);
        let (mut ops, mut busy, mut off) = (0u64, Duration::ZERO, 0usize);
        // The last 64 bytes of the thread's area play the inode's hot line.
        let meta = base + FILE as usize - 64;
        while busy < dur {
            let t0 = Instant::now();
            for i in 0..64u64 {
                nt.write(region, base + off, &buf);
                nt.fence(region);
                if publish {
                    // then the 16 bytes that publish it: stored, flushed, fenced
                    let v = (i as u128) << 64 | (off as u128);
                    clwb.write(region, meta, &v.to_le_bytes());
                    clwb.fence(region);
                }
                off = (off + 4096) % (FILE as usize - 4096);
            }
            busy += t0.elapsed();
            ops += 64;
        }
        Ok(busy.as_secs_f64() * 1e6 / ops as f64)
    })
}

fn print(r: &Report) {
    println!(
        "PMFS library, µs per operation per thread, median of {} round(s) of {} ms, pools in {}; CPU: {}",
        r.rounds, r.ms, r.dir, r.cpu
    );
    print!("{:<20}", "workload");
    for m in &r.modes {
        print!(" {m:>16}");
    }
    println!();
    for c in &r.results {
        print!("{:<20}", format!("{} x{}", c.workload.name(), c.threads));
        let base = c.us_per_op[0].max(1e-9);
        for v in &c.us_per_op {
            print!(" {:>8.2} ({:>4.2}x)", v, v / base);
        }
        println!();
    }
    println!("(in brackets: time relative to `none`; 1.00x = protection is free)");
    print_sums(r);
    for raw in &r.raw_nt_4k_fence {
        println!(
            "{:<20} {:>8.2} µs; then a 16 B store + clwb + fence (two-fence floor): {:.2} µs ({:.2}x raw)",
            format!("raw nt 4K+fence x{}", raw.threads),
            raw.us_per_op,
            raw.published_us_per_op,
            raw.published_us_per_op / raw.us_per_op.max(1e-9)
        );
        print!("{:<20} append 4K+fsync / raw:", "");
        let append = r
            .results
            .iter()
            .find(|c| c.workload == Work::Append4kFsync && c.threads == raw.threads);
        for (m, v) in r
            .modes
            .iter()
            .zip(append.map(|c| &c.us_per_op[..]).unwrap_or(&[]))
        {
            print!(" {m} {:.2}x", v / raw.us_per_op.max(1e-9));
        }
        println!();
    }
    for n in &r.not_run {
        println!("not run: {n}");
    }
}

/// With `--sums`: each mode's time with data checksums over its time without.
fn print_sums(r: &Report) {
    let pairs: Vec<(usize, usize)> = (0..r.modes.len())
        .filter_map(|i| {
            let base = r.modes[i].strip_suffix("+sums")?;
            Some((r.modes.iter().position(|m| m == base)?, i))
        })
        .collect();
    if pairs.is_empty() {
        return;
    }
    println!("data checksums: time with sums / without (1.00x = free)");
    for c in &r.results {
        print!("{:<20}", format!("{} x{}", c.workload.name(), c.threads));
        for &(off, on) in &pairs {
            let x = c.us_per_op[on] / c.us_per_op[off].max(1e-9);
            print!(" {:>10} {x:>5.2}x", r.modes[off]);
        }
        println!();
    }
}

fn draw(path: &std::path::Path, r: &Report) -> Result<()> {
    let panels: Vec<plot::BarPanel> = [1, 2]
        .into_iter()
        .map(|threads| {
            let cells: Vec<&CellResult> =
                r.results.iter().filter(|c| c.threads == threads).collect();
            plot::BarPanel {
                title: format!("{threads} thread(s): time relative to none"),
                groups: cells.iter().map(|c| c.workload.name().into()).collect(),
                series: r
                    .modes
                    .iter()
                    .enumerate()
                    .map(|(mi, m)| {
                        let v = cells
                            .iter()
                            .map(|c| c.us_per_op[mi] / c.us_per_op[0].max(1e-9))
                            .collect();
                        (m.clone(), v)
                    })
                    .collect(),
            }
        })
        .collect();
    plot::bars(
        path,
        &format!("PMFS: the cost of protection ({})", r.cpu),
        "time per op / none's (lower is better)",
        &panels,
        1,
    )
}
