//! `pmkit bench attach`: real applications on ext4 over the PM device (`pmkit attach`, in this
//! process) against ext4 over a loop device on a plain /dev/shm file (the RAM-disk baseline, like
//! the paper's tmpfs/ramfs comparison), in the same run: PostgreSQL's pgbench, SQLite
//! (synchronous FULL), and fio file workloads (4 KiB random writes at queue depth 16, 4 KiB
//! random writes with an fsync after each, 1 MiB sequential writes), the workloads of issue 17.
//!
//! Each round formats both targets afresh and runs every workload on each, in rotated order.
//! Needs root, /dev/fuse, e2fsprogs, fio and PostgreSQL (scripts/bench-attach.sh installs them).

mod apps;

use crate::host::{cpu_label, need_root, need_tool, sh, Scratch};
use crate::report::{median, plot, rotated_rounds, BenchFlags};
use anyhow::{Context, Result};
use apps::{fio, pg_bin, pgbench, sqlite};
use pmkit::adapters::BlkDisk;
use pmkit::args::EngineArgs;
use pmkit_blk::{CreateOptions, EngineOptions};
use serde::Serialize;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::sync::Arc;

// Rounds and --quick are described at the subcommand (main.rs).
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    flags: BenchFlags,
    /// pgbench scale factor (default 10, quick 2).
    #[arg(long)]
    scale: Option<u32>,
    /// pgbench transactions per client (default 2000, quick 200).
    #[arg(long)]
    transactions: Option<u32>,
    /// pgbench clients (threads: 2).
    #[arg(long, default_value_t = 4)]
    clients: u32,
    /// Seconds per fio job (default 10, quick 2).
    #[arg(long)]
    fio_seconds: Option<u32>,
    /// Size of each device in MiB.
    #[arg(long, default_value_t = 2048)]
    size_mib: u64,
    /// Skip PostgreSQL.
    #[arg(long)]
    no_pgbench: bool,
    /// SQLite transactions of 100 rows each (default 2000, quick 200; 0 skips SQLite).
    #[arg(long)]
    sqlite_tx: Option<u32>,
    /// FUSE worker threads of the attachment (0: one per CPU, as `pmkit attach`).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Serialize, Clone)]
struct Sample {
    target: &'static str,
    workload: &'static str,
    /// pgbench: transactions/s; fio randwrite: IOPS; fio seqwrite: MB/s.
    value: f64,
    unit: &'static str,
}

#[derive(Serialize)]
struct Report {
    targets: [&'static str; 2],
    cpu: String,
    rounds: usize,
    pgbench: Option<String>,
    sqlite: Option<String>,
    fio: String,
    engine: String,
    samples: Vec<Sample>,
    /// workload -> (pmkit median, ramdisk median, ratio)
    summary: Vec<(String, f64, f64, f64, &'static str)>,
}

const PMKIT: &str = "pmkit-attach";
const RAMDISK: &str = "shm-loop";

/// A mounted ext4 on one of the two targets.
enum Mounted {
    Pmkit {
        dev: Arc<pmkit_blk::Device<pmkit_media::Region>>,
        att: pmkit_fuse::attach::Attachment,
    },
    Loop {
        dev: String,
    },
}

fn mount_target(
    which: &'static str,
    file: &Path,
    mnt: &Path,
    size: u64,
    engine: &EngineOptions,
    threads: usize,
) -> Result<Mounted> {
    let _ = std::fs::remove_file(file);
    if which == PMKIT {
        let dev = Arc::new(pmkit_blk::create_path(
            file,
            Some(size),
            &CreateOptions {
                zero_data: false,
                ..Default::default()
            },
            engine,
        )?);
        let opts = pmkit_fuse::attach::AttachOptions {
            pm_path: file.into(),
            mountpoint: Some(mnt.into()),
            mkfs: Some(pmkit_fuse::attach::Mkfs::Ext4),
            threads,
            mount_options: None,
            transport: Default::default(),
        };
        let att = pmkit_fuse::attach::attach(BlkDisk(dev.clone()), &opts)?;
        Ok(Mounted::Pmkit { dev, att })
    } else {
        let f = std::fs::File::create(file)?;
        f.set_len(size)?;
        drop(f);
        let dev = sh(Command::new("losetup").args(["--find", "--show"]).arg(file))?
            .trim()
            .to_string();
        let r = sh(Command::new("mkfs.ext4")
            .args(["-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(&dev))
        .and_then(|_| sh(Command::new("mount").arg(&dev).arg(mnt)));
        if let Err(e) = r {
            let _ = sh(Command::new("losetup").arg("-d").arg(&dev));
            return Err(e);
        }
        Ok(Mounted::Loop { dev })
    }
}

fn unmount_target(m: Mounted, mnt: &Path, file: &Path) -> Result<()> {
    match m {
        Mounted::Pmkit { dev, mut att } => {
            att.detach()?;
            dev.close()?;
        }
        Mounted::Loop { dev } => {
            sh(Command::new("umount").arg(mnt))?;
            sh(Command::new("losetup").arg("-d").arg(&dev))?;
        }
    }
    let _ = std::fs::remove_file(file);
    Ok(())
}

pub fn run(a: Args) -> Result<ExitCode> {
    need_root("bench attach mounts file systems")?;
    let sqlite_tx = a
        .sqlite_tx
        .unwrap_or(if a.flags.quick { 200 } else { 2000 });
    let mut tools = vec!["fio", "mkfs.ext4", "losetup", "runuser"];
    if sqlite_tx > 0 {
        tools.push("sqlite3");
    }
    for tool in tools {
        need_tool(
            tool,
            "run scripts/bench-attach.sh, which installs what this benchmark needs",
        )?;
    }
    let pg = !a.no_pgbench;
    if pg {
        pg_bin("pgbench")?;
    }
    let quick = a.flags.quick;
    let rounds = a.flags.rounds(2);
    let scale = a.scale.unwrap_or(if quick { 2 } else { 10 });
    let tx = a.transactions.unwrap_or(if quick { 200 } else { 2000 });
    let secs = a.fio_seconds.unwrap_or(if quick { 2 } else { 10 });
    let engine = a.engine.to_options();
    let size = a.size_mib.max(512) << 20;
    let base = Scratch::dir(&std::env::temp_dir(), "attach")?;
    let mnt = base.path().join("mnt");
    std::fs::create_dir_all(&mnt)?;
    let targets = [PMKIT, RAMDISK];
    let bar = a.flags.progress(rounds * targets.len());
    let samples = rotated_rounds(rounds, 1, targets.len(), &bar, |r, _, i| {
        let t = targets[i];
        let file = Scratch::file(&a.flags.dir, &format!("attach-{t}"));
        bar.set_message(format!("round {}/{rounds}: {t}", r + 1));
        let m = mount_target(t, file.path(), &mnt, size, &engine, a.threads)
            .with_context(|| format!("setting up {t}"))?;
        let res = workloads(
            t,
            &mnt,
            pg.then_some((scale, a.clients, tx)),
            sqlite_tx,
            secs,
        );
        let un = unmount_target(m, &mnt, file.path());
        let res = res.with_context(|| format!("workload on {t}"))?;
        un?;
        Ok(res)
    })?;
    let samples: Vec<Sample> = samples.into_iter().flatten().flatten().flatten().collect();
    let mut summary = vec![];
    let mut workloads: Vec<(&str, &str)> = samples.iter().map(|s| (s.workload, s.unit)).collect();
    workloads.dedup();
    workloads.sort();
    workloads.dedup();
    for (w, unit) in workloads {
        let med = |t: &str| {
            median(
                samples
                    .iter()
                    .filter(|s| s.workload == w && s.target == t)
                    .map(|s| s.value),
            )
        };
        let (p, b) = (med(PMKIT), med(RAMDISK));
        summary.push((w.to_string(), p, b, p / b.max(1e-9), unit));
    }
    let report = Report {
        targets,
        cpu: cpu_label(),
        rounds,
        pgbench: pg.then(|| {
            format!(
                "scale {scale}, {} clients, 2 threads, {tx} transactions per client",
                a.clients
            )
        }),
        sqlite: (sqlite_tx > 0).then(|| {
            format!(
                "{sqlite_tx} transactions of {} rows, journal DELETE, synchronous FULL",
                apps::SQLITE_ROWS_PER_TX
            )
        }),
        fio: format!(
            "256 MiB file, {secs} s per job; qd16: libaio direct iodepth 16; fsync: psync, \
             fsync after every write; 1M seq: libaio direct iodepth 4, fsync at the end"
        ),
        engine: format!(
            "protect {}, write {}",
            engine
                .protect
                .map_or("default (pkey where the CPU has it)".to_string(), |p| p
                    .to_string()),
            engine.write
        ),
        samples,
        summary,
    };
    a.flags.emit(&report, draw, print_table)
}

/// Every workload on the file system mounted on `mnt` (pgbench with (scale, clients,
/// transactions) when given, SQLite when `sqlite_tx` > 0), as samples of target `t`.
fn workloads(
    t: &'static str,
    mnt: &Path,
    pg: Option<(u32, u32, u32)>,
    sqlite_tx: u32,
    secs: u32,
) -> Result<Vec<Sample>> {
    let mut samples = vec![];
    let mut add = |workload, value, unit| {
        samples.push(Sample {
            target: t,
            workload,
            value,
            unit,
        })
    };
    if let Some((scale, clients, tx)) = pg {
        add("pgbench", pgbench(mnt, scale, clients, tx)?, "tps");
    }
    if sqlite_tx > 0 {
        add("sqlite sync FULL", sqlite(mnt, sqlite_tx)?, "rows/s");
    }
    let direct = ["--ioengine=libaio", "--direct=1"];
    let (iops, _) = fio(
        mnt,
        "randwrite-qd16",
        &[&direct[..], &["--rw=randwrite", "--bs=4k", "--iodepth=16"]].concat(),
        secs,
    )?;
    add("fio 4k randwrite qd16", iops, "IOPS");
    let (iops, _) = fio(
        mnt,
        "randwrite-fsync",
        &["--ioengine=psync", "--rw=randwrite", "--bs=4k", "--fsync=1"],
        secs,
    )?;
    add("fio 4k randwrite qd1+fsync", iops, "IOPS");
    let (_, mbs) = fio(
        mnt,
        "seqwrite",
        &[
            &direct[..],
            &["--rw=write", "--bs=1M", "--iodepth=4", "--end_fsync=1"],
        ]
        .concat(),
        secs,
    )?;
    add("fio 1M seqwrite", mbs, "MB/s");
    Ok(samples)
}

fn draw(p: &Path, report: &Report) -> Result<()> {
    let panel = plot::BarPanel {
        title: "pmkit attach / RAM disk (higher is better)".into(),
        groups: report.summary.iter().map(|s| s.0.clone()).collect(),
        series: vec![("ratio".into(), report.summary.iter().map(|s| s.3).collect())],
    };
    plot::bars(
        p,
        "ext4 on pmkit attach vs ext4 on a /dev/shm loop device",
        "ratio",
        &[panel],
        1,
    )
}

fn print_table(report: &Report) {
    println!(
        "ext4 on pmkit attach (FUSE + loop over PM) vs ext4 on a loop device over a /dev/shm file; median of {} round(s); {}",
        report.rounds, report.cpu
    );
    if let Some(p) = &report.pgbench {
        println!("pgbench: {p}");
    }
    if let Some(s) = &report.sqlite {
        println!("sqlite: {s}");
    }
    println!("fio: {}", report.fio);
    println!(
        "{:<26} {:>14} {:>14} {:>8}",
        "workload", PMKIT, RAMDISK, "ratio"
    );
    for (w, p, b, r, unit) in &report.summary {
        println!(
            "{:<26} {:>9.0} {:<4} {:>9.0} {:<4} {:>8.2}",
            w, p, unit, b, unit, r
        );
    }
}
