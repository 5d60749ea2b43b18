//! `pmkit bench fs-io` (thesis Fig. 13 and the 64-byte goal): fio-style sequential
//! and random reads and writes of 64 B to 256 KiB, one thread, writes with an fdatasync every
//! 256 KiB written, on PMFS in process (the library), under the LD_PRELOAD shim and over FUSE,
//! and on ext4 on `pmkit attach` (ext4 on PMBD: the thesis's baseline and the ratio base), ext2
//! and ext4 on a /dev/shm loop device and tmpfs, in one run with rotated rounds. Then the goal
//! row: 64 B random writes with an fdatasync after each, where the library and the shim must
//! reach 10x ext4 on attach.
//!
//! I/O is buffered (no O_DIRECT), as the thesis ran fio: the kernel file systems keep the page
//! cache in the path, so their reads of the prefilled file come from DRAM copies and their
//! writes are copied into the page cache and again to the device at fdatasync; PMFS copies
//! straight between the buffer and (emulated) PM.
//!
//! `pmkit bench fs-barrier` ([`barrier`], thesis Fig. 15c) runs some of the same jobs while the
//! persistence barrier is made slower.

pub(crate) mod barrier;
mod job;
mod library;
mod output;
mod runner;

use crate::fs::targets::{self, Sizes, Target};
use crate::host::{cpu_label, need_root, need_tool, Scratch};
use crate::report::{median, rotated_rounds, BenchFlags};
use anyhow::{ensure, Context, Result};
use job::{Job, Pattern};
use pmkit::args::EngineArgs;
use pmkit_fuse::pmfs::cache::CacheMode;
use runner::Work;
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    flags: BenchFlags,
    /// Request sizes in bytes [default: 64,256,1024,4096,16384,65536,262144; quick: 64,4096]
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u64>,
    /// Milliseconds per cell per round (default 1500, quick 200).
    #[arg(long)]
    ms: Option<u64>,
    /// Size of the prefilled file every job works in, in MiB (default 64, quick 8).
    #[arg(long)]
    file_mib: Option<u64>,
    /// Size of the PMFS pool and of each ext2/ext4 device, in MiB.
    #[arg(long, default_value_t = 512)]
    size_mib: u64,
    /// Protection of PMFS (library, shim and mount: auto, none, kernel, pkey).
    #[arg(long, default_value = "auto")]
    pmfs_protect: pmkit::args::ProtectArg,
    #[command(flatten)]
    engine: EngineArgs,
}

/// The configurations of Fig. 13, in the table's order.
const TARGETS: [Target; 7] = [
    Target::Library,
    Target::Shim,
    Target::Pmfs(CacheMode::Long),
    Target::Ext4Attach,
    Target::Ext2Loop,
    Target::Ext4Loop,
    Target::Tmpfs,
];

/// The ratio base.
const BASE: &str = "ext4-attach";
/// The goal: library and shim at least this many times ext4 on attach on the goal row.
const GOAL: f64 = 10.0;

#[derive(Serialize, Clone)]
struct Sample {
    config: String,
    cell: String,
    iops: f64,
    mb_s: f64,
}

/// One cell (job) of the figure: per configuration, medians over rounds.
#[derive(Serialize)]
struct Row {
    cell: String,
    pattern: Pattern,
    bs: u64,
    /// fdatasync after this many writes (0: reads).
    sync_every: u64,
    cells: Vec<Cell>,
}

#[derive(Serialize)]
struct Cell {
    config: String,
    iops: f64,
    mb_s: f64,
    /// iops / ext4-attach's.
    vs_ext4_attach: f64,
}

/// The 64-byte goal.
#[derive(Serialize)]
struct Goal {
    cell: String,
    want: f64,
    lib_vs_ext4_attach: f64,
    shim_vs_ext4_attach: f64,
    met: bool,
}

#[derive(Serialize)]
struct Report {
    cpu: String,
    rounds: usize,
    configs: Vec<String>,
    ms: u64,
    file_bytes: u64,
    pmfs_protect: String,
    /// Whether fio and the library bypass the page cache (no: buffered, as the thesis).
    direct_io: bool,
    samples: Vec<Sample>,
    summary: Vec<Row>,
    goal: Goal,
}

/// Check root, FUSE and the tools the file-system benches need; fio and the shim.
fn preflight(what: &str) -> Result<()> {
    need_root(&format!("bench {what} mounts file systems"))?;
    for tool in ["mkfs.ext4", "mkfs.ext2", "losetup", "mount", "umount"] {
        need_tool(tool, "install e2fsprogs, mount and util-linux")?;
    }
    need_tool("fio", "install fio (scripts/bench-packages.txt)")?;
    ensure!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: load the fuse module (modprobe fuse)"
    );
    targets::shim_path()?;
    Ok(())
}

/// The targets' sizes: a pool or device of `size_mib` MiB, at least 3 times the job file and
/// 256 MiB.
fn sizes_for(
    size_mib: u64,
    file_bytes: u64,
    protect: pmkit::args::ProtectArg,
    barrier_ns: u64,
) -> Sizes {
    Sizes {
        bytes: size_mib.max((file_bytes * 3) >> 20).max(256) << 20,
        inodes: 4096,
        fuse_threads: 4,
        pmfs_protect: protect,
        barrier_ns,
    }
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    preflight("fs-io")?;
    let quick = a.flags.quick;
    let rounds = a.flags.rounds(2);
    let ms = a.ms.unwrap_or(if quick { 200 } else { 1500 }).max(10);
    let file_bytes = a.file_mib.unwrap_or(if quick { 8 } else { 64 }).max(1) << 20;
    let mut sizes = if a.sizes.is_empty() {
        if quick {
            vec![64, 4096]
        } else {
            vec![64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10]
        }
    } else {
        a.sizes.clone()
    };
    sizes.sort_unstable();
    sizes.dedup();
    for &s in &sizes {
        ensure!(
            (1..=file_bytes).contains(&s) && s <= 16 << 20,
            "--sizes: {s} must be 1 byte to the file size (and at most 16 MiB)"
        );
    }
    let mut jobs: Vec<Job> = Pattern::ALL
        .iter()
        .flat_map(|&p| {
            sizes
                .iter()
                .map(move |&bs| Job::fig13(p, bs, file_bytes, ms))
        })
        .collect();
    let goal_job = Job::synced(Pattern::RandWrite, 64, file_bytes, ms);
    jobs.push(goal_job);
    let works: Vec<Work> = jobs.iter().map(|&j| Work::Io(j)).collect();
    let s = sizes_for(a.size_mib, file_bytes, a.pmfs_protect, 0);
    let base = Scratch::dir(&std::env::temp_dir(), "fs-io")?;
    let mnt = base.path().join("mnt");
    std::fs::create_dir_all(&mnt)?;
    let bar = a.flags.progress(rounds * TARGETS.len());
    let runs = rotated_rounds(rounds, 1, TARGETS.len(), &bar, |r, _, i| {
        let t = TARGETS[i];
        bar.set_message(format!("round {}/{rounds}: {}", r + 1, t.name()));
        let up = targets::up(t, &a.flags.dir, &mnt, &s, &a.engine)
            .with_context(|| format!("setting up {}", t.name()))?;
        let res = runner::run(t, &up, &mnt, file_bytes, &works);
        let down = targets::down(up, &mnt);
        let res = res.with_context(|| format!("fs-io on {}", t.name()))?;
        down.with_context(|| format!("tearing down {}", t.name()))?;
        Ok(res
            .into_iter()
            .zip(&jobs)
            .map(|(d, j)| Sample {
                config: t.name(),
                cell: j.label(),
                iops: d.m.iops,
                mb_s: d.m.mb_s,
            })
            .collect::<Vec<_>>())
    })?;
    let samples: Vec<Sample> = runs.into_iter().flatten().flatten().flatten().collect();
    let configs: Vec<String> = TARGETS.iter().map(|t| t.name()).collect();
    let summary = summarize(&samples, &configs, &jobs);
    let goal = goal(&summary, &goal_job.label());
    let report = Report {
        cpu: cpu_label(),
        rounds,
        configs,
        ms,
        file_bytes,
        pmfs_protect: a.pmfs_protect.to_string(),
        direct_io: false,
        samples,
        summary,
        goal,
    };
    a.flags.emit(&report, output::draw, output::print_table)
}

fn summarize(samples: &[Sample], configs: &[String], jobs: &[Job]) -> Vec<Row> {
    jobs.iter()
        .map(|j| {
            let label = j.label();
            let of = |c: &str| -> Vec<&Sample> {
                samples
                    .iter()
                    .filter(|s| s.cell == label && s.config == c)
                    .collect()
            };
            let iops = |c: &str| median(of(c).iter().map(|s| s.iops));
            let base = iops(BASE).max(1e-9);
            Row {
                cells: configs
                    .iter()
                    .map(|c| Cell {
                        config: c.clone(),
                        iops: iops(c),
                        mb_s: median(of(c).iter().map(|s| s.mb_s)),
                        vs_ext4_attach: iops(c) / base,
                    })
                    .collect(),
                cell: label,
                pattern: j.pattern,
                bs: j.bs,
                sync_every: j.sync_every,
            }
        })
        .collect()
}

fn goal(summary: &[Row], cell: &str) -> Goal {
    let row = summary.iter().find(|r| r.cell == cell);
    let ratio = |c: &str| {
        row.and_then(|r| r.cells.iter().find(|x| x.config == c))
            .map_or(0.0, |x| x.vs_ext4_attach)
    };
    let (lib, shim) = (ratio("pmfs-lib"), ratio("pmfs-shim"));
    Goal {
        cell: cell.to_string(),
        want: GOAL,
        lib_vs_ext4_attach: lib,
        shim_vs_ext4_attach: shim,
        met: lib >= GOAL && shim >= GOAL,
    }
}
