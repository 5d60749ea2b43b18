//! Fig. 15 of the PMBD paper: a small-file workload on ext4 through `pmkit attach` as emulated PM
//! slows down.

use super::FigArgs;
use crate::host::{need_root, Scratch};
use crate::report::{median, plot, rotated_rounds};
use anyhow::Result;
use pmkit::adapters::BlkDisk;
use pmkit_blk::{CreateOptions, Device, EngineOptions};
use pmkit_fuse::attach::{self, AttachOptions, Mkfs};
use pmkit_media::Region;
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// One emulation setting's result. Two phases of one small-file workload: a write-heavy phase
/// (create, write, fsync each file; like the paper's tpcc, sensitive to write speed) and a
/// read-heavy one (read every file back with O_DIRECT, several passes; like tpch).
#[derive(Serialize)]
struct EmulationPoint {
    rdsx: u32,
    wrsx: u32,
    /// Median files per second of the write phase and of the read phase.
    write_files_per_s: f64,
    read_files_per_s: f64,
    write_rounds: Vec<f64>,
    read_rounds: Vec<f64>,
    /// Medians relative to rdsx=1, wrsx=1.
    write_relative: f64,
    read_relative: f64,
}

#[derive(Serialize)]
struct EmulationReport {
    figure: &'static str,
    paper_figure: &'static str,
    workload: String,
    rounds: usize,
    read_sweep: Vec<EmulationPoint>,
    write_sweep: Vec<EmulationPoint>,
}

/// Passes over the file set in the read phase.
const READ_PASSES: usize = 4;

/// Fig. 15: a small-file workload on ext4 through `pmkit attach` (FUSE + loop, in this process)
/// as the emulated read and write slowdowns grow.
pub(crate) fn emulation(a: FigArgs) -> Result<ExitCode> {
    need_root("bench emulation runs ext4 on the device through attach (FUSE + loop)")?;
    let (rd, wr, files): (&[u32], &[u32], usize) = if a.flags.quick {
        (&[1, 5, 10], &[1, 10, 50], 150)
    } else {
        (&[1, 2, 4, 6, 8, 10], &[1, 5, 10, 20, 30, 40, 50], 1000)
    };
    let rounds = a.rounds();
    let pm = Scratch::file(&a.flags.dir, "emu.pm");
    let mnt = Scratch::dir(&std::env::temp_dir(), "mnt")?;
    let (path, mnt) = (pm.path(), mnt.path());
    // Make the file system once, at full speed, with one unmeasured pass.
    let dev = pmkit_blk::create_path(
        path,
        Some(a.size().max(64 << 20)),
        &CreateOptions::default(),
        &EngineOptions::default(),
    )?;
    mounted(dev, path, mnt, true, || small_files(mnt, files))?;
    let points: Vec<(u32, u32)> = rd
        .iter()
        .map(|&r| (r, 1))
        .chain(wr.iter().skip(1).map(|&w| (1, w)))
        .collect();
    let bar = a.flags.progress(points.len() * rounds);
    let per = rotated_rounds(rounds, 1, points.len(), &bar, |_, _, i| {
        let (rdsx, wrsx) = points[i];
        bar.set_message(format!("rdsx={rdsx} wrsx={wrsx}"));
        let spec = format!("rdsx={rdsx},wrsx={wrsx}")
            .parse()
            .map_err(anyhow::Error::msg)?;
        let engine = EngineOptions {
            emulate: spec,
            ..Default::default()
        };
        let dev = pmkit_blk::open_path(path, &engine)?;
        // Unmeasured warm-up: the first operations after a mount load bitmaps and tables.
        mounted(dev, path, mnt, false, || {
            small_files(mnt, files / 5).and_then(|_| small_files(mnt, files))
        })
    })?;
    let per = &per[0];
    let col = |i: usize, w: bool| -> Vec<f64> {
        per[i].iter().map(|p| if w { p.0 } else { p.1 }).collect()
    };
    let (base_w, base_r) = (
        median(col(0, true)).max(1e-9),
        median(col(0, false)).max(1e-9),
    );
    let mk = |i: usize| {
        let (rdsx, wrsx) = points[i];
        let (w, r) = (median(col(i, true)), median(col(i, false)));
        EmulationPoint {
            rdsx,
            wrsx,
            write_files_per_s: w,
            read_files_per_s: r,
            write_rounds: col(i, true),
            read_rounds: col(i, false),
            write_relative: w / base_w,
            read_relative: r / base_r,
        }
    };
    let read_sweep: Vec<_> = (0..rd.len()).map(mk).collect();
    let write_sweep: Vec<_> = std::iter::once(0)
        .chain(rd.len()..points.len())
        .map(mk)
        .collect();
    let report = EmulationReport {
        figure: "emulation",
        paper_figure: "Fig. 15",
        workload: format!(
            "ext4 on the device through pmkit attach (FUSE + loop, in process), {files} files of 16 KiB: write \
             phase = create, write and fsync each file; read phase = {READ_PASSES} passes reading every file with O_DIRECT"
        ),
        rounds,
        read_sweep,
        write_sweep,
    };
    a.flags.emit(&report, draw, print_table)
}

fn draw(p: &Path, report: &EmulationReport) -> Result<()> {
    type Pick = fn(&EmulationPoint) -> (f64, f64);
    let line = |v: &[EmulationPoint], f: Pick| v.iter().map(f).collect::<Vec<_>>();
    let rd_w: Pick = |e| (e.rdsx as f64, e.write_relative);
    let rd_r: Pick = |e| (e.rdsx as f64, e.read_relative);
    let wr_w: Pick = |e| (e.wrsx as f64, e.write_relative);
    let wr_r: Pick = |e| (e.wrsx as f64, e.read_relative);
    plot::lines(
        p,
        "pmkit bench emulation (paper Fig. 15): throughput vs PM slowdown",
        "slowdown factor (rdsx 1-10 or wrsx 1-50)",
        "files/s relative to no slowdown",
        &[
            ("read phase vs rdsx".into(), line(&report.read_sweep, rd_r)),
            ("write phase vs rdsx".into(), line(&report.read_sweep, rd_w)),
            ("read phase vs wrsx".into(), line(&report.write_sweep, wr_r)),
            (
                "write phase vs wrsx".into(),
                line(&report.write_sweep, wr_w),
            ),
        ],
    )
}

fn print_table(report: &EmulationReport) {
    println!(
        "emulation (paper Fig. 15): {}; median of {} round(s)",
        report.workload, report.rounds
    );
    println!(
        "{:>6} {:>6} {:>14} {:>9} {:>14} {:>9}",
        "rdsx", "wrsx", "write files/s", "relative", "read files/s", "relative"
    );
    for e in report
        .read_sweep
        .iter()
        .chain(report.write_sweep.iter().skip(1))
    {
        println!(
            "{:>6} {:>6} {:>14.0} {:>9.2} {:>14.0} {:>9.2}",
            e.rdsx,
            e.wrsx,
            e.write_files_per_s,
            e.write_relative,
            e.read_files_per_s,
            e.read_relative
        );
    }
}

/// Attach `dev` (its file `pm`) through FUSE + loop, make ext4 first when `mkfs`, mount it on
/// `mnt`, run `work` there, then detach and close, whatever `work` returned.
fn mounted<T>(
    dev: Device<Region>,
    pm: &Path,
    mnt: &Path,
    mkfs: bool,
    work: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let dev = Arc::new(dev);
    let opts = AttachOptions {
        pm_path: pm.into(),
        mountpoint: Some(mnt.into()),
        mkfs: mkfs.then_some(Mkfs::Ext4),
        threads: 2,
        mount_options: None,
        route: Default::default(),
        transport: Default::default(),
    };
    let mut att = attach::attach(BlkDisk(dev.clone()), &opts)?;
    let res = work();
    att.detach()?;
    dev.close()?;
    res
}

/// The small-file workload: write `n` 16 KiB files with fsync each (write phase), then read them
/// all back with O_DIRECT [`READ_PASSES`] times (read phase), then delete them. Files/s of each.
fn small_files(dir: &Path, n: usize) -> Result<(f64, f64)> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    const FILE: usize = 16 << 10;
    let work = dir.join("w");
    std::fs::create_dir_all(&work)?;
    let data = vec![0xC3u8; FILE];
    // O_DIRECT needs an aligned buffer.
    let mut rbuf = AlignedBuf::new(FILE);
    let t0 = Instant::now();
    for i in 0..n {
        let mut f = std::fs::File::create(work.join(format!("f{i}")))?;
        f.write_all(&data)?;
        f.sync_all()?;
    }
    let write_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for _ in 0..READ_PASSES {
        for i in 0..n {
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(work.join(format!("f{i}")))?;
            f.read_exact(rbuf.as_mut())?;
            anyhow::ensure!(rbuf.as_mut()[FILE - 1] == 0xC3, "file f{i} read back wrong");
        }
    }
    let read_s = t1.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&work)?;
    Ok((n as f64 / write_s, (n * READ_PASSES) as f64 / read_s))
}

/// A heap buffer aligned to 4 KiB for O_DIRECT.
struct AlignedBuf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let v = vec![0u8; len + 4096];
        let off = (4096 - (v.as_ptr() as usize % 4096)) % 4096;
        AlignedBuf { v, off, len }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
}
