//! `pmkit bench atomic`: 4 KiB random writes and reads, 1 and 2 threads, on an atomic PMBD
//! device, a plain PMBD device and libpmemblk (PMDK's BTT-based atomic block pool), all on
//! files of the same size in `--dir` (/dev/shm: emulated PM), in one process run.
//!
//! - pmkit devices are driven in process (`Device::write`/`read`, protection `--protect`,
//!   default none, since libpmemblk has none; write scheme `--write`, default nt).
//! - libpmemblk is loaded with `dlopen("libpmemblk.so.1")` (so the binary neither links nor
//!   needs it) and driven by the same Rust loop, threads and timer: the fairest comparison.
//!   `PMEM_IS_PMEM_FORCE=1` is set before loading, so libpmem flushes the /dev/shm pool like PM
//!   (clwb/NT stores + sfence) instead of msync.
//! - fio's `pmemblk` engine (the same library under fio's I/O loop) runs too when fio lists it,
//!   as the reference the issue names; fio's own per-I/O overhead is included in its numbers.
//!
//! Method: every configuration is created once and filled (every block written once, untimed);
//! each round runs every (threads, op) cell for each configuration, rotating the order of the
//! configurations per round; each cell reports the median IOPS over rounds. Blocks are chosen
//! uniformly at random (seeded per thread) from the block range all configurations share.

use crate::host::Scratch;
use crate::pmdk::{self, blk as pmemblk};
use crate::report::{median, plot, rotated_rounds, BenchFlags};
use anyhow::{bail, Context, Result};
use pmkit::args::parse_size;
use pmkit_blk::{CreateOptions, EngineOptions, Protect, WriteScheme};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Barrier;
use std::time::Instant;

use pmemblk::BS;
const THREADS: [usize; 2] = [1, 2];
/// Largest device accepted (the fill pass writes all of it).
const MAX_SIZE: u64 = 16 << 30;

// Rounds and --quick are described at the subcommand (main.rs).
#[derive(clap::Args, Clone)]
pub(crate) struct Args {
    #[command(flatten)]
    pub flags: BenchFlags,
    /// Bytes of every device and pool file (default 256M; quick 32M).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Operations per thread per cell (default 50000; quick 2000).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Protection of the pmkit devices (libpmemblk has none).
    #[arg(long, default_value = "none")]
    pub protect: Protect,
    /// Write scheme of the pmkit devices.
    #[arg(long = "write", default_value = "nt")]
    pub write: WriteScheme,
    /// Leave out fio's pmemblk engine (it is always left out with --quick).
    #[arg(long)]
    pub no_fio: bool,
}

impl Args {
    fn size(&self) -> Result<u64> {
        let s = self.size.unwrap_or(if self.flags.quick {
            32 << 20
        } else {
            256 << 20
        });
        if !(8 << 20..=MAX_SIZE).contains(&s) {
            bail!("--size must be 8M..=16G, got {s}");
        }
        Ok(s)
    }
    fn ops(&self) -> Result<u64> {
        let o = self
            .ops
            .unwrap_or(if self.flags.quick { 2000 } else { 50_000 });
        if o == 0 || o > 100_000_000 {
            bail!("--ops must be 1..=100000000");
        }
        Ok(o)
    }
    fn rounds(&self) -> usize {
        self.flags.rounds(5)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Config {
    Atomic,
    Plain,
    Libpmemblk,
    FioPmemblk,
}

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::Atomic => "atomic",
            Config::Plain => "plain",
            Config::Libpmemblk => "libpmemblk",
            Config::FioPmemblk => "fio-pmemblk",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Op {
    Write,
    Read,
}

/// One configuration, ready to run.
enum Target {
    Pmkit(pmkit_blk::Device<pmkit_media::Region>),
    Lib(pmemblk::Pool),
    Fio(PathBuf),
}

impl Target {
    fn blocks(&self) -> u64 {
        match self {
            Target::Pmkit(d) => d.capacity() / BS as u64,
            Target::Lib(p) => p.nblock(),
            Target::Fio(_) => u64::MAX, // fio picks within its own pool
        }
    }
}

#[derive(Serialize)]
struct Cell {
    config: Config,
    threads: usize,
    op: Op,
    median_iops: f64,
    rounds_iops: Vec<f64>,
}

#[derive(Serialize)]
struct Ratios {
    threads: usize,
    /// Atomic write IOPS / libpmemblk write IOPS (goal >= 2.5).
    atomic_vs_libpmemblk_write: Option<f64>,
    /// Atomic write IOPS / plain PMBD write IOPS (goal >= 0.7).
    atomic_vs_plain_write: f64,
    atomic_vs_libpmemblk_read: Option<f64>,
    atomic_vs_plain_read: f64,
    atomic_vs_fio_pmemblk_write: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    dir: PathBuf,
    size_bytes: u64,
    block_size: usize,
    blocks_addressed: u64,
    ops_per_thread: u64,
    rounds: usize,
    protect: Protect,
    write: WriteScheme,
    libpmemblk: String,
    fio_pmemblk: String,
    cells: Vec<Cell>,
    ratios: Vec<Ratios>,
    notes: Vec<String>,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let (size, ops, rounds) = (a.size()?, a.ops()?, a.rounds());
    let (lib, lib_status) = pmdk::load(pmemblk::SONAME, pmemblk::Lib::load);
    let fio_status = if a.flags.quick || a.no_fio {
        "not run (--quick or --no-fio)".to_string()
    } else {
        fio::available()
    };
    let fio_ok = fio_status.starts_with("fio");
    let engine = EngineOptions {
        protect: Some(a.protect),
        write: a.write,
        populate: true,
        ..Default::default()
    };
    let mut files = vec![];
    let mut targets: Vec<(Config, Target)> = vec![];
    for c in [
        Config::Atomic,
        Config::Plain,
        Config::Libpmemblk,
        Config::FioPmemblk,
    ] {
        let f = Scratch::file(&a.flags.dir, &format!("atomic-{}", c.name()));
        let t = match c {
            Config::Atomic | Config::Plain => {
                let create = CreateOptions {
                    atomic: c == Config::Atomic,
                    zero_data: false,
                    ..Default::default()
                };
                let d = pmkit_blk::create_path(&f.0, Some(size), &create, &engine)
                    .with_context(|| format!("creating {}", f.0.display()))?;
                Target::Pmkit(d)
            }
            Config::Libpmemblk => match &lib {
                Some(l) => Target::Lib(pmemblk::Pool::create(l, &f.0, size)?),
                None => continue,
            },
            Config::FioPmemblk if fio_ok => Target::Fio(f.0.clone()),
            Config::FioPmemblk => continue,
        };
        files.push(f);
        targets.push((c, t));
    }
    let blocks = targets
        .iter()
        .map(|(_, t)| t.blocks())
        .min()
        .expect("pmkit targets");
    let progress = !a.flags.json;
    for (c, t) in &targets {
        if progress {
            eprintln!("filling {} ({blocks} blocks) ...", c.name());
        }
        fill(t, blocks, size)?;
    }
    let cells_spec: Vec<(usize, Op)> = THREADS
        .iter()
        .flat_map(|&t| [(t, Op::Write), (t, Op::Read)])
        .collect();
    let bar = a.flags.progress(rounds * cells_spec.len() * targets.len());
    let samples = rotated_rounds(
        rounds,
        cells_spec.len(),
        targets.len(),
        &bar,
        |r, ci, ti| {
            let (threads, op) = cells_spec[ci];
            let (c, t) = &targets[ti];
            bar.set_message(format!("{} {threads} thread(s) {op:?}", c.name()));
            measure(t, threads, op, ops, blocks, (r * 100 + ci) as u64, size)
        },
    )?;
    let mut cells = vec![];
    for (ti, (c, _)) in targets.iter().enumerate() {
        for (ci, &(threads, op)) in cells_spec.iter().enumerate() {
            let v = samples[ci][ti].clone();
            cells.push(Cell {
                config: *c,
                threads,
                op,
                median_iops: median(v.iter().copied()),
                rounds_iops: v,
            });
        }
    }
    for (_, t) in targets.drain(..) {
        match t {
            Target::Pmkit(d) => d.close()?,
            Target::Lib(p) => drop(p),
            Target::Fio(_) => {}
        }
    }
    drop(files);
    let get = |c: Config, th: usize, op: Op| {
        cells
            .iter()
            .find(|x| x.config == c && x.threads == th && x.op == op)
            .map(|x| x.median_iops)
    };
    let ratios: Vec<Ratios> = THREADS
        .iter()
        .map(|&th| {
            let aw = get(Config::Atomic, th, Op::Write).expect("atomic ran");
            let ar = get(Config::Atomic, th, Op::Read).expect("atomic ran");
            Ratios {
                threads: th,
                atomic_vs_libpmemblk_write: get(Config::Libpmemblk, th, Op::Write).map(|x| aw / x),
                atomic_vs_plain_write: aw / get(Config::Plain, th, Op::Write).expect("plain ran"),
                atomic_vs_libpmemblk_read: get(Config::Libpmemblk, th, Op::Read).map(|x| ar / x),
                atomic_vs_plain_read: ar / get(Config::Plain, th, Op::Read).expect("plain ran"),
                atomic_vs_fio_pmemblk_write: get(Config::FioPmemblk, th, Op::Write).map(|x| aw / x),
            }
        })
        .collect();
    let report = Report {
        benchmark: "atomic",
        dir: a.flags.dir.clone(),
        size_bytes: size,
        block_size: BS,
        blocks_addressed: blocks,
        ops_per_thread: ops,
        rounds,
        protect: a.protect,
        write: a.write,
        libpmemblk: lib_status,
        fio_pmemblk: fio_status,
        cells,
        ratios,
        notes: vec![
            "IOPS = operations of all threads / wall time of the cell; median over rounds".into(),
            "fio-pmemblk (when run) includes fio's own per-I/O overhead; libpmemblk is the same library in this process".into(),
        ],
    };
    a.flags.emit(&report, draw, print_table)
}

/// Write every addressed block once (untimed), so reads see real data and maps are populated.
fn fill(t: &Target, blocks: u64, size: u64) -> Result<()> {
    let buf = vec![0x5au8; BS];
    match t {
        Target::Pmkit(d) => {
            for b in 0..blocks {
                d.write(b * BS as u64, &buf, false)?;
            }
            d.flush()?;
        }
        Target::Lib(p) => {
            for b in 0..blocks {
                p.write(&buf, b)?;
            }
        }
        Target::Fio(path) => fio::run(path, size, "write", 1, None)
            .map(|_| ())
            .context("fio pmemblk fill")?,
    }
    Ok(())
}

/// One cell: `threads` threads, `ops` random 4 KiB operations each; returns total IOPS.
fn measure(
    t: &Target,
    threads: usize,
    op: Op,
    ops: u64,
    blocks: u64,
    seed: u64,
    size: u64,
) -> Result<f64> {
    if let Target::Fio(path) = t {
        let rw = match op {
            Op::Write => "randwrite",
            Op::Read => "randread",
        };
        return fio::run(path, size, rw, threads, Some(ops));
    }
    let start = Barrier::new(threads);
    // Each thread times itself: the cell's wall time runs from the first start to the last end
    // (a coordinating thread could be descheduled past the whole run on a loaded machine).
    let res: Vec<Result<(Instant, Instant)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                let start = &start;
                s.spawn(move || -> Result<(Instant, Instant)> {
                    let mut rng = SmallRng::seed_from_u64(seed * 16 + i as u64);
                    let offs: Vec<u64> = (0..ops).map(|_| rng.gen_range(0..blocks)).collect();
                    let mut buf = vec![i as u8 + 1; BS];
                    start.wait();
                    let t0 = Instant::now();
                    for &b in &offs {
                        match (t, op) {
                            (Target::Pmkit(d), Op::Write) => d.write(b * BS as u64, &buf, false)?,
                            (Target::Pmkit(d), Op::Read) => d.read(b * BS as u64, &mut buf)?,
                            (Target::Lib(p), Op::Write) => p.write(&buf, b)?,
                            (Target::Lib(p), Op::Read) => p.read(&mut buf, b)?,
                            (Target::Fio(_), _) => unreachable!("fio runs in its own process"),
                        }
                    }
                    Ok((t0, Instant::now()))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let mut spans = vec![];
    for r in res {
        spans.push(r?);
    }
    let first = spans.iter().map(|s| s.0).min().expect("a thread");
    let last = spans.iter().map(|s| s.1).max().expect("a thread");
    let secs = last.duration_since(first).as_secs_f64();
    Ok((threads as u64 * ops) as f64 / secs.max(1e-9))
}

fn print_table(r: &Report) {
    println!(
        "4 KiB random I/O, IOPS (median of {} rounds, {} ops/thread, {} blocks, {} MiB files in {}; protect {}, write {})",
        r.rounds,
        r.ops_per_thread,
        r.blocks_addressed,
        r.size_bytes >> 20,
        r.dir.display(),
        r.protect,
        r.write
    );
    println!("libpmemblk: {}", r.libpmemblk);
    println!("fio pmemblk: {}", r.fio_pmemblk);
    println!(
        "{:<14}{:>8}{:>14}{:>14}",
        "config", "threads", "write", "read"
    );
    let mut configs: Vec<Config> = vec![];
    for c in &r.cells {
        if !configs.contains(&c.config) {
            configs.push(c.config);
        }
    }
    for c in configs {
        for th in THREADS {
            let v = |op| {
                r.cells
                    .iter()
                    .find(|x| x.config == c && x.threads == th && x.op == op)
                    .map_or(0.0, |x| x.median_iops)
            };
            println!(
                "{:<14}{:>8}{:>14.0}{:>14.0}",
                c.name(),
                th,
                v(Op::Write),
                v(Op::Read)
            );
        }
    }
    let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}x"));
    for q in &r.ratios {
        println!(
            "{} thread(s): atomic/libpmemblk write {} (goal >= 2.5x), atomic/plain write {:.2}x (goal >= 0.70x); \
             reads: atomic/libpmemblk {}, atomic/plain {:.2}x; atomic/fio-pmemblk write {}",
            q.threads,
            f(q.atomic_vs_libpmemblk_write),
            q.atomic_vs_plain_write,
            f(q.atomic_vs_libpmemblk_read),
            q.atomic_vs_plain_read,
            f(q.atomic_vs_fio_pmemblk_write)
        );
    }
}

fn draw(path: &Path, r: &Report) -> Result<()> {
    let mut panels = vec![];
    for op in [Op::Write, Op::Read] {
        let mut series: Vec<(String, Vec<f64>)> = vec![];
        for c in &r.cells {
            if c.op != op || series.iter().any(|(n, _)| n == c.config.name()) {
                continue;
            }
            let vals = THREADS
                .iter()
                .map(|&th| {
                    r.cells
                        .iter()
                        .find(|x| x.config == c.config && x.threads == th && x.op == op)
                        .map_or(0.0, |x| x.median_iops / 1000.0)
                })
                .collect();
            series.push((c.config.name().to_string(), vals));
        }
        panels.push(plot::BarPanel {
            title: format!(
                "4 KiB random {}",
                if op == Op::Write { "writes" } else { "reads" }
            ),
            groups: THREADS.iter().map(|t| format!("{t} thread(s)")).collect(),
            series,
        });
    }
    plot::bars(
        path,
        "Atomic PMBD vs plain PMBD vs libpmemblk (same run, /dev/shm)",
        "kIOPS (median)",
        &panels,
        2,
    )
}

/// libpmemblk (PMDK), loaded at run time.
/// libpmemblk (PMDK), loaded at run time.
/// fio's `pmemblk` engine, run as a child process.
mod fio {
    use super::*;
    use crate::host::fio_json;
    use std::process::Command;

    /// "fio ... with the pmemblk engine", or why it cannot run.
    pub(super) fn available() -> String {
        match Command::new("fio").arg("--enghelp").output() {
            Ok(o)
                if String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.trim() == "pmemblk") =>
            {
                let v = Command::new("fio").arg("--version").output().ok();
                let v = v.map_or(String::new(), |o| {
                    String::from_utf8_lossy(&o.stdout).trim().to_string()
                });
                format!("fio ({v}) with the pmemblk engine, PMEM_IS_PMEM_FORCE=1")
            }
            Ok(_) => "not run: this fio has no pmemblk engine".into(),
            Err(e) => format!(
                "not run: fio not found ({e}); install the packages in scripts/bench-packages.txt"
            ),
        }
    }

    /// Run one fio job on the pool at `path`; returns its IOPS (all jobs together).
    pub(super) fn run(
        path: &Path,
        size: u64,
        rw: &str,
        jobs: usize,
        ops: Option<u64>,
    ) -> Result<f64> {
        let mut c = Command::new("fio");
        c.env("PMEM_IS_PMEM_FORCE", "1")
            .arg("--name=pmkit-atomic")
            .arg("--ioengine=pmemblk")
            .arg(format!("--filename={},{BS},{}", path.display(), size >> 20))
            .arg(format!("--rw={rw}"))
            .arg(format!("--bs={BS}"))
            .arg(format!("--numjobs={jobs}"))
            .arg("--thread")
            .arg("--group_reporting")
            .arg("--norandommap")
            .arg("--randrepeat=0")
            .arg("--output-format=json");
        // fio's pmemblk pool holds a little less than the file (BTT metadata).
        c.arg(format!("--size={}", ((size >> 20) * 9 / 10) << 20));
        if let Some(n) = ops {
            c.arg(format!("--number_ios={n}"));
        }
        let v = fio_json(&mut c)?;
        let job = &v["jobs"][0];
        let key = if rw.contains("read") { "read" } else { "write" };
        job[key]["iops"]
            .as_f64()
            .filter(|x| *x > 0.0)
            .with_context(|| format!("fio reported no {key} IOPS: {job}"))
    }
}
