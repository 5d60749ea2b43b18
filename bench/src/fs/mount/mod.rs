//! `pmkit bench fs`: PMFS over FUSE (`pmkit fs mount`, one target per kernel cache
//! mode) against ext4 on `pmkit attach` (ext4 on PMBD, the thesis's baseline), ext4 on a loop
//! device over a /dev/shm file, each also mounted `-o dirsync` (directory changes durable on
//! return, as PMFS's: the peer of equal durability for metadata), ext2 on a loop, and tmpfs, in
//! the same run with rotated rounds. The workloads
//! ([`load`]) are 4 KiB append + fsync (latency and rate), create, stat, open + 4 KiB read,
//! rename and unlink, with 1 and 2 threads, each thread in its own directory. Then, once, the
//! bytes each metadata operation writes on PMFS and on ext4 on attach ([`journal`]).
//! Needs root, /dev/fuse, losetup and mkfs.ext4.

mod journal;
mod load;
mod output;

use crate::fs::targets::{self, Sizes, Target};
use crate::host::{cpu_label, need_root, need_tool, Scratch};
use crate::report::{median, rotated_rounds, BenchFlags};
use anyhow::{ensure, Context, Result};
use pmkit::args::EngineArgs;
use pmkit_fuse::pmfs::cache::CacheMode;
use serde::Serialize;
use std::process::ExitCode;

// Rounds and --quick are described at the subcommand (main.rs).
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    flags: BenchFlags,
    /// 4 KiB appends (each with fsync) per thread (default 4000, quick 200).
    #[arg(long)]
    appends: Option<usize>,
    /// Files each thread creates, stats, renames and unlinks (default 2000, quick 200).
    #[arg(long)]
    files: Option<usize>,
    /// open + 4 KiB read + close per thread (default 20000, quick 500).
    #[arg(long)]
    reads: Option<usize>,
    /// Cache modes of the PMFS mount to measure, each a target (none, short, long, writeback).
    #[arg(long, value_delimiter = ',', default_value = "none,short,long")]
    cache: Vec<CacheMode>,
    /// FUSE transports of the PMFS mount, each a target per cache mode: dev (/dev/fuse, named
    /// pmfs-CACHE), uring (FUSE over io_uring, pmfs-CACHE-uring; needs enable_uring = Y).
    #[arg(long, value_delimiter = ',', default_value = "dev")]
    pmfs_transports: Vec<pmkit_fuse::uring::Transport>,
    /// Protection of the PMFS mount (`pmkit fs mount --protect`: auto, none, kernel, pkey).
    #[arg(long, default_value = "auto")]
    pmfs_protect: pmkit::args::ProtectArg,
    /// FUSE worker threads of the PMFS mount and of the attachment (`pmkit fs mount`'s default).
    #[arg(long, default_value_t = 4)]
    fuse_threads: usize,
    /// Calls per operation for the bytes-per-operation table (default 200, quick 20).
    #[arg(long)]
    journal_calls: Option<usize>,
    /// Size of the PMFS pool and of each ext4 device, in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    #[command(flatten)]
    engine: EngineArgs,
}

/// Thread counts measured.
const THREADS: [usize; 2] = [1, 2];

#[derive(Serialize, Clone)]
struct Sample {
    target: String,
    threads: usize,
    workload: &'static str,
    ops_per_s: f64,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
}

/// One (workload, threads) cell: per target, medians and the ratio to ext4 on attach.
#[derive(Serialize)]
struct Row {
    workload: &'static str,
    threads: usize,
    /// Per target, in `Report::targets` order.
    cells: Vec<Cell>,
}

#[derive(Serialize)]
struct Cell {
    target: String,
    ops_per_s: f64,
    /// ops_per_s / ext4-attach's.
    vs_ext4_attach: f64,
    /// ops_per_s / ext4-attach-dirsync's: against a peer whose directory changes are durable
    /// on return, as PMFS's are.
    vs_ext4_dirsync: f64,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    cpu: String,
    rounds: usize,
    targets: Vec<String>,
    counts: load::Counts,
    fuse_threads: usize,
    default_cache: String,
    engine: String,
    samples: Vec<Sample>,
    summary: Vec<Row>,
    bytes_per_op: Vec<journal::PerOp>,
    journal_calls: usize,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    need_root("bench fs mounts file systems")?;
    for tool in ["mkfs.ext4", "losetup", "mount", "umount"] {
        need_tool(tool, "install e2fsprogs, mount and util-linux")?;
    }
    ensure!(
        std::path::Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: load the fuse module (modprobe fuse)"
    );
    let quick = a.flags.quick;
    let rounds = a.flags.rounds(3);
    let q =
        |v: Option<usize>, full: usize, small: usize| v.unwrap_or(if quick { small } else { full });
    let counts = load::Counts {
        appends: q(a.appends, 4000, 200),
        files: q(a.files, 2000, 200),
        stat_passes: 2,
        reads: q(a.reads, 20000, 500),
    };
    let journal_calls = q(a.journal_calls, 200, 20);
    let mut cache = a.cache.clone();
    cache.dedup();
    let mut targets: Vec<Target> = cache
        .iter()
        .flat_map(|&c| a.pmfs_transports.iter().map(move |&t| Target::pmfs(c, t)))
        .collect();
    targets.dedup();
    targets.extend([
        Target::Ext4Attach,
        Target::Ext4AttachDirsync,
        Target::Ext4Loop,
        Target::Ext4LoopDirsync,
        Target::Ext2Loop,
        Target::Tmpfs,
    ]);
    let files_all = counts.files * THREADS.iter().sum::<usize>() + load::READ_FILES * 2 + 64;
    let sizes = Sizes {
        bytes: a.size_mib.max(512) << 20,
        inodes: (files_all as u32)
            .max(journal_calls as u32 * 3)
            .saturating_add(1024),
        fuse_threads: a.fuse_threads.clamp(1, 64),
        pmfs_protect: a.pmfs_protect,
        barrier_ns: 0,
    };
    let base = Scratch::dir(&std::env::temp_dir(), "fs")?;
    let mnt = base.path().join("mnt");
    std::fs::create_dir_all(&mnt)?;
    let bar = a.flags.progress(rounds * targets.len() + 1);
    let runs = rotated_rounds(rounds, 1, targets.len(), &bar, |r, _, i| {
        let t = targets[i];
        bar.set_message(format!("round {}/{rounds}: {}", r + 1, t.name()));
        let up = targets::up(t, &a.flags.dir, &mnt, &sizes, &a.engine)
            .with_context(|| format!("setting up {}", t.name()))?;
        let res: Result<Vec<Sample>> = THREADS
            .iter()
            .map(|&th| {
                let m = load::run(&mnt, th, counts)?;
                Ok(m.into_iter().map(move |m| Sample {
                    target: t.name(),
                    threads: th,
                    workload: m.workload,
                    ops_per_s: m.ops_per_s,
                    p50_us: m.latency_us.map(|l| l.0),
                    p99_us: m.latency_us.map(|l| l.1),
                }))
            })
            .collect::<Result<Vec<_>>>()
            .map(|v| v.into_iter().flatten().collect());
        let down = targets::down(up, &mnt);
        let res = res.with_context(|| format!("workload on {}", t.name()))?;
        down.with_context(|| format!("tearing down {}", t.name()))?;
        Ok(res)
    })?;
    let samples: Vec<Sample> = runs.into_iter().flatten().flatten().flatten().collect();

    // Bytes per operation: once, on the default cache mode's PMFS and on ext4 on attach.
    bar.set_message("bytes per operation");
    let bytes_per_op = bytes_per_op(&a, &sizes, &mnt, &base, journal_calls)?;
    bar.inc();
    bar.finish();

    let names: Vec<String> = targets.iter().map(|t| t.name()).collect();
    let report = Report {
        cpu: cpu_label(),
        rounds,
        summary: summarize(&samples, &names),
        targets: names,
        counts,
        fuse_threads: sizes.fuse_threads,
        default_cache: CacheMode::default().to_string(),
        engine: format!(
            "attach: protect {}",
            a.engine
                .to_options()
                .protect
                .map_or("default".into(), |p| p.to_string())
        ),
        samples,
        bytes_per_op,
        journal_calls,
    };
    a.flags.emit(&report, output::draw, output::print_table)
}

fn bytes_per_op(
    a: &Args,
    sizes: &Sizes,
    mnt: &std::path::Path,
    base: &Scratch,
    n: usize,
) -> Result<Vec<journal::PerOp>> {
    let emnt = base.path().join("mnt-ext4");
    std::fs::create_dir_all(&emnt)?;
    let p = targets::up(
        Target::Pmfs(CacheMode::default()),
        &a.flags.dir,
        mnt,
        sizes,
        &a.engine,
    )?;
    let e = match targets::up(Target::Ext4Attach, &a.flags.dir, &emnt, sizes, &a.engine) {
        Ok(e) => e,
        Err(err) => {
            let _ = targets::down(p, mnt);
            return Err(err);
        }
    };
    let r = journal::per_op((&p, mnt), (&e, &emnt), n);
    let d1 = targets::down(p, mnt);
    let d2 = targets::down(e, &emnt);
    let r = r?;
    d1?;
    d2?;
    Ok(r)
}

fn summarize(samples: &[Sample], targets: &[String]) -> Vec<Row> {
    let mut rows = vec![];
    for &threads in &THREADS {
        for &workload in &load::WORKLOADS {
            let of = |t: &str| -> Vec<&Sample> {
                samples
                    .iter()
                    .filter(|s| s.workload == workload && s.threads == threads && s.target == t)
                    .collect()
            };
            let base = median(of("ext4-attach").iter().map(|s| s.ops_per_s));
            let dirsync = median(of("ext4-attach-dirsync").iter().map(|s| s.ops_per_s));
            let cells = targets
                .iter()
                .map(|t| {
                    let ops = median(of(t).iter().map(|s| s.ops_per_s));
                    let lat = |f: fn(&Sample) -> Option<f64>| {
                        let v: Vec<f64> = of(t).into_iter().filter_map(f).collect();
                        (!v.is_empty()).then(|| median(v))
                    };
                    Cell {
                        target: t.clone(),
                        ops_per_s: ops,
                        vs_ext4_attach: ops / base.max(1e-9),
                        vs_ext4_dirsync: ops / dirsync.max(1e-9),
                        p50_us: lat(|s| s.p50_us),
                        p99_us: lat(|s| s.p99_us),
                    }
                })
                .collect();
            rows.push(Row {
                workload,
                threads,
                cells,
            });
        }
    }
    rows
}
