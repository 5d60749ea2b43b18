//! `pmkit bench attach`: real applications on ext4 over the PM device (`pmkit attach`, in this
//! process) against ext4 over a loop device on a plain /dev/shm file (the RAM-disk baseline, like
//! the paper's tmpfs/ramfs comparison), in the same run: PostgreSQL's pgbench, SQLite
//! (synchronous FULL), and fio file workloads (4 KiB random writes at queue depth 16, 4 KiB
//! random writes with an fsync after each, 1 MiB sequential writes), the workloads the attach goals name.
//!
//! Targets: `pmkit attach` over each FUSE transport (/dev/fuse, and io_uring where the kernel
//! offers it), over the kernel's NBD client (`--via nbd`, where the nbd module is loaded), over
//! the kernel's ublk driver (`--via ublk`, where ublk_drv is loaded) and the loop device. Each round formats every target afresh and runs every
//! workload on each, in rotated order.
//! Needs root, /dev/fuse, e2fsprogs, fio and PostgreSQL (scripts/bench-attach.sh installs them).

pub(crate) mod apps;

use crate::host::{cpu_label, need_root, need_tool, sh, Scratch};
use crate::report::{median, plot, rotated_rounds, BenchFlags};
use anyhow::{Context, Result};
use apps::{fio, pg_bin, pgbench, sqlite};
use pmkit::adapters::BlkDisk;
use pmkit::args::EngineArgs;
use pmkit_blk::{CreateOptions, EngineOptions};
use pmkit_fuse::attach::Transport;
use serde::Serialize;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::sync::Arc;

// Rounds and --quick are described at the subcommand (main.rs).
#[derive(clap::Args)]
pub(crate) struct Args {
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
    /// The routes of `pmkit attach` to measure, comma-separated (fuse, ublk, nbd; fuse covers
    /// both FUSE transports); by default every route this kernel offers. A route named here
    /// that the kernel lacks is an error. The loop device is always measured beside them.
    #[arg(long, value_delimiter = ',', value_name = "ROUTES")]
    via: Vec<String>,
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

/// One workload's medians: per target, and its ratio to the loop device.
#[derive(Serialize)]
struct Row {
    workload: String,
    unit: &'static str,
    /// (target, median, median / shm-loop median), the attach targets first.
    medians: Vec<(&'static str, f64, f64)>,
}

#[derive(Serialize)]
struct Report {
    targets: Vec<&'static str>,
    cpu: String,
    rounds: usize,
    pgbench: Option<String>,
    sqlite: Option<String>,
    fio: String,
    engine: String,
    samples: Vec<Sample>,
    summary: Vec<Row>,
}

/// `pmkit attach` over /dev/fuse.
pub(crate) const PMKIT_DEV: &str = "attach-dev";
/// `pmkit attach` over FUSE io_uring.
const PMKIT_URING: &str = "attach-uring";
/// `pmkit attach --via nbd`: the kernel's NBD client.
const PMKIT_NBD: &str = "attach-nbd";
/// `pmkit attach --via ublk`: the kernel's ublk driver.
const PMKIT_UBLK: &str = "attach-ublk";
pub(crate) const RAMDISK: &str = "shm-loop";

/// A mounted ext4 on one of the targets (also `bench fs`'s ext4 targets).
pub(crate) enum Mounted {
    Pmkit {
        dev: Arc<pmkit_blk::Device<pmkit_media::Region>>,
        att: Box<pmkit_fuse::attach::Attachment>,
        /// On the NBD and ublk routes: the device to disconnect after the detach.
        nbd: Option<pmkit::attach_kernel::KernelDev>,
    },
    Loop {
        dev: String,
    },
}

/// Make `which` (a device file `file` of `size` bytes, or a loop device over it for
/// [`RAMDISK`]), format it ext4 and mount it on `mnt` (with mount options `options`).
pub(crate) fn mount_target(
    which: &'static str,
    file: &Path,
    mnt: &Path,
    size: u64,
    engine: &EngineOptions,
    threads: usize,
    options: Option<&str>,
) -> Result<Mounted> {
    let _ = std::fs::remove_file(file);
    if which != RAMDISK {
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
            mount_options: options.map(str::to_string),
            route: match which {
                PMKIT_NBD => pmkit_fuse::attach::Route::Nbd,
                PMKIT_UBLK => pmkit_fuse::attach::Route::Ublk,
                _ => pmkit_fuse::attach::Route::Fuse,
            },
            transport: if which == PMKIT_URING {
                Transport::Uring
            } else {
                Transport::Dev
            },
        };
        let attached = if which == PMKIT_NBD || which == PMKIT_UBLK {
            pmkit::attach_kernel::attach(dev.clone(), &opts).map(|(a, k)| (a, Some(k)))
        } else {
            pmkit_fuse::attach::attach(BlkDisk(dev.clone()), &opts)
                .map(|a| (a, None))
                .map_err(Into::into)
        };
        let (att, nbd) = match attached {
            Ok(x) => x,
            Err(e) => {
                let _ = dev.close();
                return Err(e);
            }
        };
        Ok(Mounted::Pmkit {
            dev,
            att: Box::new(att),
            nbd,
        })
    } else {
        mount_loop(file, mnt, size, "ext4", options)
    }
}

/// Make a `size`-byte file `file`, a loop device over it, a `fstype` file system (`mkfs.FSTYPE`:
/// ext2, ext4) on that, and mount it on `mnt` (with mount options `options`).
pub(crate) fn mount_loop(
    file: &Path,
    mnt: &Path,
    size: u64,
    fstype: &str,
    options: Option<&str>,
) -> Result<Mounted> {
    let f = std::fs::File::create(file)?;
    f.set_len(size)?;
    drop(f);
    let dev = sh(Command::new("losetup").args(["--find", "--show"]).arg(file))?
        .trim()
        .to_string();
    let mut mkfs = Command::new(format!("mkfs.{fstype}"));
    mkfs.args(["-F", "-q"]);
    if fstype == "ext4" {
        mkfs.args(["-E", "lazy_itable_init=0,lazy_journal_init=0"]);
    }
    let mut mount = Command::new("mount");
    if let Some(o) = options {
        mount.args(["-o", o]);
    }
    let r = sh(mkfs.arg(&dev)).and_then(|_| sh(mount.arg(&dev).arg(mnt)));
    if let Err(e) = r {
        let _ = sh(Command::new("losetup").arg("-d").arg(&dev));
        return Err(e);
    }
    Ok(Mounted::Loop { dev })
}

/// Unmount what [`mount_target`] mounted and remove its file.
pub(crate) fn unmount_target(m: Mounted, mnt: &Path, file: &Path) -> Result<()> {
    match m {
        Mounted::Pmkit { dev, mut att, nbd } => {
            att.detach()?;
            pmkit::attach_kernel::disconnect(&mut { nbd })?;
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

/// The targets for `--via` (empty: every route this kernel offers), the loop device last.
fn routes(via: &[String]) -> Result<Vec<&'static str>> {
    for v in via {
        anyhow::ensure!(
            ["fuse", "ublk", "nbd"].contains(&v.as_str()),
            "--via {v}: not a route (fuse, ublk, nbd)"
        );
    }
    let asked = |r: &str| via.is_empty() || via.iter().any(|v| v == r);
    let mut targets: Vec<&'static str> = vec![];
    if asked("fuse") {
        targets.push(PMKIT_DEV);
        // io_uring only where the kernel offers it (root enables it with
        // `echo Y > /sys/module/fuse/parameters/enable_uring`).
        if pmkit_fuse::uring::enabled() {
            targets.push(PMKIT_URING);
        } else {
            eprintln!(
                "FUSE over io_uring is not enabled (/sys/module/fuse/parameters/enable_uring): \
                 measuring the /dev/fuse transport only"
            );
        }
    }
    for (route, target, there, how) in [
        (
            "nbd",
            PMKIT_NBD,
            pmkit_nbd::kernel::available(),
            "modprobe nbd",
        ),
        (
            "ublk",
            PMKIT_UBLK,
            pmkit_ublk::available(),
            "modprobe ublk_drv, Linux 6.0+",
        ),
    ] {
        match (asked(route), there) {
            (true, true) => targets.push(target),
            (false, _) => {}
            (true, false) if via.is_empty() => {
                eprintln!("the {route} driver is not loaded ({how}): no {target} target")
            }
            (true, false) => anyhow::bail!("--via {route}: the driver is not loaded ({how})"),
        }
    }
    targets.push(RAMDISK);
    Ok(targets)
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
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
    let targets = routes(&a.via)?;
    let bar = a.flags.progress(rounds * targets.len());
    let samples = rotated_rounds(rounds, 1, targets.len(), &bar, |r, _, i| {
        let t = targets[i];
        let file = Scratch::file(&a.flags.dir, &format!("attach-{t}"));
        bar.set_message(format!("round {}/{rounds}: {t}", r + 1));
        let m = mount_target(t, file.path(), &mnt, size, &engine, a.threads, None)
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
        let base = med(RAMDISK);
        summary.push(Row {
            workload: w.to_string(),
            unit,
            medians: targets
                .iter()
                .map(|&t| (t, med(t), med(t) / base.max(1e-9)))
                .collect(),
        });
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
        add(
            "sqlite sync FULL",
            sqlite(mnt, sqlite_tx, false, &[])?,
            "rows/s",
        );
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
    let attach = report.targets.iter().filter(|&&t| t != RAMDISK);
    let panel = plot::BarPanel {
        title: "pmkit attach / RAM disk (higher is better)".into(),
        groups: report.summary.iter().map(|s| s.workload.clone()).collect(),
        series: attach
            .enumerate()
            .map(|(i, t)| {
                let ratios = report.summary.iter().map(|s| s.medians[i].2).collect();
                (t.to_string(), ratios)
            })
            .collect(),
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
    print!("{:<28} {:>7}", "workload", "unit");
    for t in &report.targets {
        print!(" {t:>12}");
    }
    for t in report.targets.iter().filter(|&&t| t != RAMDISK) {
        print!(
            " {:>12}",
            format!("{}/loop", t.trim_start_matches("attach-"))
        );
    }
    println!();
    for r in &report.summary {
        print!("{:<28} {:>7}", r.workload, r.unit);
        for (_, m, _) in &r.medians {
            print!(" {m:>12.0}");
        }
        for (t, _, ratio) in &r.medians {
            if *t != RAMDISK {
                print!(" {ratio:>12.2}");
            }
        }
        println!();
    }
}
