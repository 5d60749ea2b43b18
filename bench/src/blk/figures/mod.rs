//! `pmkit bench protection|write-scheme|overview|emulation`: the design-space study of the PMBD
//! paper (Chen, Mesnier, Hahn, *A Protected Block Device for Persistent Memory*, MSST 2014;
//! Fig. 3/5/6/8, 9, 11, 15) rerun on this machine, in process.
//!
//! Every configuration of a figure gets its own device (a file in `--dir`, default /dev/shm),
//! all opened at once; each cell of the figure runs every configuration in turn, in a rotated
//! order per round, so drift on a shared machine hits all of them alike, and the reported value
//! is the median over rounds. Results: a table, `--json`, and an SVG plot (`--plot`).

mod emulation;

pub(crate) use emulation::emulation;

use crate::report::{median, plot, rotated_rounds, BenchFlags};
use anyhow::{Context, Result};
use pmkit_blk::{BatchOptions, CreateOptions, Device, EngineOptions, Protect, WriteScheme};
use pmkit_media::Region;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

// Rounds and --quick are described at the subcommand (main.rs).
#[derive(clap::Args, Clone)]
pub(crate) struct FigArgs {
    #[command(flatten)]
    pub flags: BenchFlags,
    /// Milliseconds per configuration per cell per round (default: 400, quick: 40).
    #[arg(long)]
    pub ms: Option<u64>,
    /// Threads for the "many outstanding requests" cells (default: the number of CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Size of each device in MiB (default: 1024, quick: 128).
    #[arg(long)]
    pub size_mib: Option<u64>,
}

impl FigArgs {
    fn ms(&self) -> u64 {
        self.ms.unwrap_or(if self.flags.quick { 40 } else { 400 })
    }
    fn rounds(&self) -> usize {
        self.flags.rounds(3)
    }
    fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
            .clamp(1, 64)
    }
    fn size(&self) -> u64 {
        self.size_mib
            .unwrap_or(if self.flags.quick { 128 } else { 1024 })
            .max(16)
            << 20
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Rw {
    Read,
    Write,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Pattern {
    Seq,
    Rnd,
}

/// One workload of a figure.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Cell {
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
pub(crate) struct Config {
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
            .flags
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
    let bar = a.flags.progress(cells.len() * rounds * configs.len());
    let samples = rotated_rounds(rounds, cells.len(), configs.len(), &bar, |r, ci, i| {
        let cell = &cells[ci];
        bar.set_message(format!("{} {}", cell.label(), configs[i].name));
        run_cell(&devs[i].dev, cell, dur, (ci * 1000 + r) as u64)
            .with_context(|| format!("{} on {}", cell.label(), configs[i].name))
    })?;
    let mut results = vec![];
    for (cell, per_config) in cells.iter().zip(samples) {
        let med: Vec<f64> = per_config
            .iter()
            .map(|v| median(v.iter().copied()))
            .collect();
        let ratio = med.iter().map(|m| m / med[0].max(1e-9)).collect();
        let per_round = (0..rounds)
            .map(|r| per_config.iter().map(|v| v[r]).collect())
            .collect();
        results.push(CellResult {
            cell: *cell,
            label: cell.label(),
            mb_per_s: med,
            rounds: per_round,
            ratio_to_baseline: ratio,
        });
    }
    if a.flags.quick {
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
        dir: a.flags.dir.clone(),
        notes,
        cells: results,
    };
    drop(devs);
    a.flags.emit(&report, plot_figure, print_figure)
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
pub(crate) fn protection(a: FigArgs) -> Result<ExitCode> {
    let mut configs = vec![
        cfg("none", Protect::None, WriteScheme::Nt, 1),
        cfg("pt", Protect::Pt, WriteScheme::Nt, 1),
        cfg("pt-batch/1", Protect::PtBatch, WriteScheme::Nt, 1),
        cfg("pt-batch/16", Protect::PtBatch, WriteScheme::Nt, 16),
        cfg("private", Protect::Private, WriteScheme::Nt, 1),
        cfg("kernel", Protect::Kernel, WriteScheme::Nt, 1),
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
pub(crate) fn write_scheme(a: FigArgs) -> Result<ExitCode> {
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
    .chain([cfg("kernel (pwrite)", Protect::Kernel, WriteScheme::Nt, 1)])
    .collect();
    let every = 16 << 20;
    let notes = vec![
        "protection none (to isolate the write scheme); baseline: nt; \"kernel (pwrite)\": the kernel \
         protection mode, where the kernel does the copy and nt's fences and flushes follow"
            .to_string(),
        format!(
            "writers issue a FLUSH (write barrier) every {} MiB per thread, for every scheme",
            every >> 20
        ),
    ];
    let cells = matrix(&a, &[4096, 256 << 10], every);
    run_figure(&a, "write-scheme", "Fig. 9", configs, cells, notes)
}

/// Fig. 11: the default configuration against unprotected write-back (the peak).
pub(crate) fn overview(a: FigArgs) -> Result<ExitCode> {
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
    let sizes: &[usize] = if a.flags.quick {
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
