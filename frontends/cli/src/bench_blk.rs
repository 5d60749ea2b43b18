//! `pmkit bench protection|write-scheme|overview|emulation`: the PMBD paper's design-space
//! study (seed 000, Fig. 3/5/6/8, 9, 11, 15) rerun on this machine, in process.
//!
//! Every configuration of a figure gets its own device (a file in `--dir`, default /dev/shm),
//! all opened at once; each cell of the figure runs every configuration in turn, in a rotated
//! order per round, so drift on a shared machine hits all of them alike, and the reported value
//! is the median over rounds. Results: a table, `--json`, and an SVG plot (`--plot`).

use crate::plot;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use pmkit_blk::{BatchOptions, CreateOptions, Device, EngineOptions, Protect, WriteScheme};
use pmkit_media::Region;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone)]
pub struct FigArgs {
    /// Short run (CI smoke test): small devices, few cells, short runs.
    #[arg(long)]
    pub quick: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Draw the figure to this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Where the devices live (emulated PM).
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Milliseconds per configuration per cell per round (default: 400, quick: 40).
    #[arg(long)]
    pub ms: Option<u64>,
    /// Rounds per cell (default: 3, quick: 1).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Threads for the "many outstanding requests" cells (default: the number of CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Size of each device in MiB (default: 1024, quick: 128).
    #[arg(long)]
    pub size_mib: Option<u64>,
}

impl FigArgs {
    fn ms(&self) -> u64 {
        self.ms.unwrap_or(if self.quick { 40 } else { 400 })
    }
    fn rounds(&self) -> usize {
        self.rounds.unwrap_or(if self.quick { 1 } else { 3 }).max(1)
    }
    fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
            .clamp(1, 64)
    }
    fn size(&self) -> u64 {
        self.size_mib
            .unwrap_or(if self.quick { 128 } else { 1024 })
            .max(16)
            << 20
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    Read,
    Write,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Seq,
    Rnd,
}

/// One workload of a figure.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Cell {
    pub rw: Rw,
    pub pattern: Pattern,
    pub size: usize,
    pub threads: usize,
    /// Issue a FLUSH after this many bytes written per thread (0: never).
    pub barrier_every: u64,
}

impl Cell {
    fn label(&self) -> String {
        let rw = if self.rw == Rw::Read { "RD" } else { "WR" };
        let p = if self.pattern == Pattern::Seq {
            "SEQ"
        } else {
            "RND"
        };
        format!("{rw}-{p} {} x{}", size_label(self.size), self.threads)
    }
}

fn size_label(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{}M", n >> 20)
    } else {
        format!("{}K", n >> 10)
    }
}

/// A device configuration being compared.
pub struct Config {
    pub name: String,
    pub engine: EngineOptions,
}

#[derive(Serialize)]
struct CellResult {
    #[serde(flatten)]
    cell: Cell,
    label: String,
    /// Median MB/s per configuration, in `configs` order.
    mb_per_s: Vec<f64>,
    /// Every round's MB/s per configuration.
    rounds: Vec<Vec<f64>>,
    /// Each configuration's median divided by the baseline's (the first configuration).
    ratio_to_baseline: Vec<f64>,
}

#[derive(Serialize)]
struct FigureReport {
    figure: &'static str,
    paper_figure: &'static str,
    configs: Vec<String>,
    baseline: String,
    threads_many: usize,
    cpus: usize,
    ms_per_run: u64,
    rounds: usize,
    device_mib: u64,
    dir: PathBuf,
    notes: Vec<String>,
    cells: Vec<CellResult>,
}

/// A device made for one configuration; removed on drop.
struct BenchDev {
    dev: Device<Region>,
    path: PathBuf,
}

impl Drop for BenchDev {
    fn drop(&mut self) {
        let _ = self.dev.close();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn make_devices(a: &FigArgs, configs: &[Config]) -> Result<Vec<BenchDev>> {
    let mut out = vec![];
    for (i, c) in configs.iter().enumerate() {
        let path = a
            .dir
            .join(format!("pmkit-bench-{}-{i}.pm", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut engine = c.engine.clone();
        engine.populate = true;
        let create = CreateOptions {
            zero_data: false,
            ..Default::default()
        };
        let dev = pmkit_blk::create_path(&path, Some(a.size()), &create, &engine)
            .with_context(|| format!("creating bench device {} ({})", path.display(), c.name))?;
        out.push(BenchDev { dev, path });
    }
    Ok(out)
}

/// Run `cell` on `dev` for `dur`; MB/s.
fn run_cell(dev: &Device<Region>, cell: &Cell, dur: Duration, seed: u64) -> Result<f64> {
    let cap = dev.capacity();
    let size = cell.size as u64;
    let slots = cap / size;
    anyhow::ensure!(
        slots >= cell.threads as u64 * 2,
        "device too small for {} requests",
        size_label(cell.size)
    );
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let bytes: Vec<Result<u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..cell.threads)
            .map(|t| {
                let stop = &stop;
                s.spawn(move || -> Result<u64> {
                    let mut rng = SmallRng::seed_from_u64(seed ^ (t as u64 * 0x9E37_79B9));
                    let mut buf = vec![0x5Au8; cell.size];
                    // Sequential threads each stream through their own slice of the device.
                    let per = slots / cell.threads as u64;
                    let mut next = per * t as u64;
                    let (mut done, mut since_barrier) = (0u64, 0u64);
                    // At least one batch per thread, even if it starts after the deadline.
                    loop {
                        for _ in 0..8 {
                            let slot = match cell.pattern {
                                Pattern::Rnd => rng.gen_range(0..slots),
                                Pattern::Seq => {
                                    let s = next;
                                    next = if next + 1 >= per * (t as u64 + 1) {
                                        per * t as u64
                                    } else {
                                        next + 1
                                    };
                                    s
                                }
                            };
                            match cell.rw {
                                Rw::Read => dev.read(slot * size, &mut buf)?,
                                Rw::Write => {
                                    buf[0] = buf[0].wrapping_add(1);
                                    dev.write(slot * size, &buf, false)?;
                                    since_barrier += size;
                                    if cell.barrier_every > 0 && since_barrier >= cell.barrier_every
                                    {
                                        dev.flush()?;
                                        since_barrier = 0;
                                    }
                                }
                            }
                            done += size;
                        }
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    Ok(done)
                })
            })
            .collect();
        std::thread::sleep(dur);
        stop.store(true, Ordering::Relaxed);
        hs.into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect()
    });
    // Written data counts once it is durable: the final FLUSH (which drains pt-batch buffers)
    // is part of the run, so no configuration leaves work behind for the next one to pay for.
    if cell.rw == Rw::Write {
        dev.flush()?;
    }
    let secs = t0.elapsed().as_secs_f64();
    let mut total = 0;
    for b in bytes {
        total += b?;
    }
    Ok(total as f64 / secs / 1e6)
}

fn run_figure(
    a: &FigArgs,
    figure: &'static str,
    paper_figure: &'static str,
    configs: Vec<Config>,
    cells: Vec<Cell>,
    mut notes: Vec<String>,
) -> Result<ExitCode> {
    let devs = make_devices(a, &configs)?;
    let rounds = a.rounds();
    let dur = Duration::from_millis(a.ms());
    let bar = progress(a.json, (cells.len() * rounds * configs.len()) as u64);
    let mut results = vec![];
    for (ci, cell) in cells.iter().enumerate() {
        let mut per_round = vec![vec![0.0; configs.len()]; rounds];
        for (r, row) in per_round.iter_mut().enumerate() {
            // Rotate the order each round so no configuration always runs first or last.
            for k in 0..configs.len() {
                let i = (k + r + ci) % configs.len();
                bar.set_message(format!("{} {}", cell.label(), configs[i].name));
                row[i] = run_cell(&devs[i].dev, cell, dur, (ci * 1000 + r) as u64)
                    .with_context(|| format!("{} on {}", cell.label(), configs[i].name))?;
                bar.inc(1);
            }
        }
        let med: Vec<f64> = (0..configs.len())
            .map(|i| median(per_round.iter().map(|r| r[i]).collect()))
            .collect();
        let ratio = med.iter().map(|m| m / med[0].max(1e-9)).collect();
        results.push(CellResult {
            cell: *cell,
            label: cell.label(),
            mb_per_s: med,
            rounds: per_round,
            ratio_to_baseline: ratio,
        });
    }
    bar.finish_and_clear();
    if a.quick {
        notes.push(
            "quick mode: short runs on small devices; use the full mode for figures to compare"
                .into(),
        );
    }
    let report = FigureReport {
        figure,
        paper_figure,
        configs: configs.iter().map(|c| c.name.clone()).collect(),
        baseline: configs[0].name.clone(),
        threads_many: a.threads(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        ms_per_run: a.ms(),
        rounds,
        device_mib: a.size() >> 20,
        dir: a.dir.clone(),
        notes,
        cells: results,
    };
    drop(devs);
    if let Some(p) = &a.plot {
        plot_figure(p, &report)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_figure(&report);
        if let Some(p) = &a.plot {
            println!("plot: {}", p.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn progress(hidden: bool, n: u64) -> ProgressBar {
    if hidden || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(n);
    b.set_style(
        ProgressStyle::with_template("{spinner} {msg:36} [{bar:30}] {pos}/{len} {eta}").unwrap(),
    );
    b
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn print_figure(r: &FigureReport) {
    println!(
        "{} (paper {}): MB/s, median of {} round(s) of {} ms; many = {} threads on {} CPUs; {} MiB devices in {}",
        r.figure,
        r.paper_figure,
        r.rounds,
        r.ms_per_run,
        r.threads_many,
        r.cpus,
        r.device_mib,
        r.dir.display()
    );
    print!("{:<18}", "workload");
    for c in &r.configs {
        print!(" {:>12}", c);
    }
    println!();
    for cell in &r.cells {
        print!("{:<18}", cell.label);
        for (v, ratio) in cell.mb_per_s.iter().zip(&cell.ratio_to_baseline) {
            print!(" {:>7.0} {:>4.2}", v, ratio);
        }
        println!();
    }
    println!("(each value: MB/s and ratio to {})", r.baseline);
    for n in &r.notes {
        println!("note: {n}");
    }
}

fn plot_figure(p: &Path, r: &FigureReport) -> Result<()> {
    // One panel per access kind (RD-SEQ, RD-RND, WR-SEQ, WR-RND); groups are size x threads.
    let mut panels: Vec<plot::BarPanel> = vec![];
    for cell in &r.cells {
        let kind = cell.label.split(' ').next().unwrap_or("").to_string();
        let group = cell.label[kind.len()..].trim().to_string();
        let idx = match panels.iter().position(|p| p.title == kind) {
            Some(i) => i,
            None => {
                panels.push(plot::BarPanel {
                    title: kind.clone(),
                    groups: vec![],
                    series: r.configs.iter().map(|c| (c.clone(), vec![])).collect(),
                });
                panels.len() - 1
            }
        };
        panels[idx].groups.push(group);
        for (s, v) in panels[idx].series.iter_mut().zip(&cell.mb_per_s) {
            s.1.push(*v);
        }
    }
    let title = format!("pmkit bench {} (paper {}), MB/s", r.figure, r.paper_figure);
    plot::bars(p, &title, "MB/s", &panels, 2)
}

fn matrix(a: &FigArgs, sizes: &[usize], barrier_every: u64) -> Vec<Cell> {
    let many = a.threads();
    let mut thread_counts = vec![1];
    if many > 1 {
        thread_counts.push(many);
    }
    let mut cells = vec![];
    for rw in [Rw::Read, Rw::Write] {
        for pattern in [Pattern::Seq, Pattern::Rnd] {
            for &size in sizes {
                for &threads in &thread_counts {
                    cells.push(Cell {
                        rw,
                        pattern,
                        size,
                        threads,
                        barrier_every,
                    });
                }
            }
        }
    }
    cells
}

fn cfg(name: &str, protect: Protect, write: WriteScheme, buffers: usize) -> Config {
    let batch = BatchOptions {
        buffers,
        ..Default::default()
    };
    Config {
        name: name.into(),
        engine: EngineOptions {
            protect: Some(protect),
            write,
            batch,
            ..Default::default()
        },
    }
}

/// Fig. 3, 5, 6, 8: every protection mode, nt stores.
pub fn protection(a: FigArgs) -> Result<ExitCode> {
    let mut configs = vec![
        cfg("none", Protect::None, WriteScheme::Nt, 1),
        cfg("pt", Protect::Pt, WriteScheme::Nt, 1),
        cfg("pt-batch/1", Protect::PtBatch, WriteScheme::Nt, 1),
        cfg("pt-batch/16", Protect::PtBatch, WriteScheme::Nt, 16),
        cfg("private", Protect::Private, WriteScheme::Nt, 1),
    ];
    let mut notes =
        vec!["write scheme nt for every mode; baseline: none (no protection)".to_string()];
    if pmkit_media::features().pku {
        configs.push(cfg("pkey", Protect::Pkey, WriteScheme::Nt, 1));
    } else {
        notes.push("this CPU has no memory protection keys: pkey not measured".into());
    }
    let cells = matrix(&a, &[4096, 256 << 10], 0);
    run_figure(&a, "protection", "Fig. 3, 5, 6, 8", configs, cells, notes)
}

/// Fig. 9: every write scheme, with barriers, protection off to isolate the scheme.
pub fn write_scheme(a: FigArgs) -> Result<ExitCode> {
    let configs: Vec<Config> = [
        WriteScheme::Nt,
        WriteScheme::Clwb,
        WriteScheme::Clflushopt,
        WriteScheme::Clflush,
        WriteScheme::Wb,
    ]
    .into_iter()
    .filter(|s| s.available())
    .map(|s| cfg(s.name(), Protect::None, s, 1))
    .collect();
    let every = 16 << 20;
    let notes = vec![
        "protection none (to isolate the write scheme); baseline: nt".to_string(),
        format!(
            "writers issue a FLUSH (write barrier) every {} MiB per thread, for every scheme",
            every >> 20
        ),
    ];
    let cells = matrix(&a, &[4096, 256 << 10], every);
    run_figure(&a, "write-scheme", "Fig. 9", configs, cells, notes)
}

/// Fig. 11: the default configuration against unprotected write-back (the peak).
pub fn overview(a: FigArgs) -> Result<ExitCode> {
    let default = EngineOptions::default();
    let configs = vec![
        Config {
            name: "peak (none+wb)".into(),
            engine: cfg("", Protect::None, WriteScheme::Wb, 1).engine,
        },
        Config {
            name: "default".into(),
            engine: default,
        },
    ];
    let sizes: &[usize] = if a.quick {
        &[4096, 256 << 10]
    } else {
        &[4096, 16 << 10, 64 << 10, 256 << 10]
    };
    let notes = vec![
        "default = pmkit's defaults (pkey protection where the CPU has it, nt stores); baseline: the peak, \
         unprotected plain write-back stores with no flushes"
            .to_string(),
    ];
    let cells = matrix(&a, sizes, 0);
    run_figure(&a, "overview", "Fig. 11", configs, cells, notes)
}

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
pub fn emulation(a: FigArgs) -> Result<ExitCode> {
    // SAFETY: geteuid cannot fail.
    anyhow::ensure!(
        unsafe { libc::geteuid() } == 0,
        "bench emulation runs ext4 on the device through attach (FUSE + loop) and needs root"
    );
    let (rd, wr, files): (&[u32], &[u32], usize) = if a.quick {
        (&[1, 5, 10], &[1, 10, 50], 150)
    } else {
        (&[1, 2, 4, 6, 8, 10], &[1, 5, 10, 20, 30, 40, 50], 1000)
    };
    let rounds = a.rounds();
    let path = a
        .dir
        .join(format!("pmkit-bench-emu-{}.pm", std::process::id()));
    let mnt = tempfile_dir()?;
    let _cleanup = RemoveOnDrop(path.clone());
    // Make the file system once, at full speed, with one unmeasured pass.
    {
        let dev = pmkit_blk::create_path(
            &path,
            Some(a.size().max(64 << 20)),
            &CreateOptions::default(),
            &EngineOptions::default(),
        )?;
        let dev = std::sync::Arc::new(dev);
        let mut att = pmkit_fuse::attach::attach(
            pmkit::adapters::BlkDisk(dev.clone()),
            &attach_opts(&path, Some(&mnt), true),
        )?;
        let warm = small_files(&mnt, files);
        att.detach()?;
        warm?;
        dev.close()?;
    }
    let points: Vec<(u32, u32)> = rd
        .iter()
        .map(|&r| (r, 1))
        .chain(wr.iter().skip(1).map(|&w| (1, w)))
        .collect();
    let bar = progress(a.json, (points.len() * rounds) as u64);
    let mut per: Vec<Vec<(f64, f64)>> = vec![vec![]; points.len()];
    for r in 0..rounds {
        for k in 0..points.len() {
            let i = (k + r) % points.len();
            let (rdsx, wrsx) = points[i];
            bar.set_message(format!("rdsx={rdsx} wrsx={wrsx}"));
            let spec = format!("rdsx={rdsx},wrsx={wrsx}")
                .parse()
                .map_err(anyhow::Error::msg)?;
            let engine = EngineOptions {
                emulate: spec,
                ..Default::default()
            };
            let dev = std::sync::Arc::new(pmkit_blk::open_path(&path, &engine)?);
            let mut att = pmkit_fuse::attach::attach(
                pmkit::adapters::BlkDisk(dev.clone()),
                &attach_opts(&path, Some(&mnt), false),
            )?;
            // Unmeasured warm-up: the first operations after a mount load bitmaps and tables.
            let res = small_files(&mnt, files / 5).and_then(|_| small_files(&mnt, files));
            att.detach()?;
            dev.close()?;
            per[i].push(res?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let _ = std::fs::remove_dir(&mnt);
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
    if let Some(p) = &a.plot {
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
        )?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "emulation (paper Fig. 15): {}; median of {rounds} round(s)",
            report.workload
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
        if let Some(p) = &a.plot {
            println!("plot: {}", p.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

struct RemoveOnDrop(PathBuf);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tempfile_dir() -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("pmkit-bench-mnt-{}", std::process::id()));
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

fn attach_opts(pm: &Path, mnt: Option<&Path>, mkfs: bool) -> pmkit_fuse::attach::AttachOptions {
    pmkit_fuse::attach::AttachOptions {
        pm_path: pm.into(),
        mountpoint: mnt.map(Into::into),
        mkfs: mkfs.then_some(pmkit_fuse::attach::Mkfs::Ext4),
        threads: 2,
        mount_options: None,
    }
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
