//! `pmkit bench pmo`: the PMO Sync benchmark of the PMO thesis (Wahiduddin, *Evaluating PMO Sync
//! Implementation for Persistent Memory Object*, UCF 2021; Fig. 4.1 and Table 4.2), with
//! libpmemobj beside it, in one process run.
//!
//! Workload (thesis §"Microbenchmark", Fig. 3.19): N sequential 4-byte int stores, element i
//! getting the value 2i, into N/1024 (rounded up) contiguous 4 KiB objects of 1024 ints each.
//! Object o receives stores 1024·o .. 1024·o+1023 (the last object may get fewer); its
//! transaction opens at its first store (PMO: `attach`) and ends with one sync after its last
//! store (PMO: `sync`, then `detach`). One *store* is one 4-byte store instruction of the new
//! value; one *sync* is the point after which that object's stores are durable (and, for the
//! atomic variants, durable all together or not at all).
//!
//! Every variant runs on a fresh file of the same size in `--dir` (/dev/shm: emulated PM) with
//! the same primitives (stores, clwb, sfence, non-temporal copies); see docs/obj.md "Benchmark".

pub(crate) mod baselines;
mod counted;

use crate::host::Scratch;
use crate::pmdk::{self, obj as pmemobj};
use crate::report::{median, plot, rotated_rounds, BenchFlags};
use anyhow::{bail, Context, Result};
use baselines::Layout;
use counted::Counted;
use pmkit_media::{Region, RegionOptions};
use pmkit_obj::{Access, Pool, PoolOptions, Shadow, Tracking};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Ints per 4 KiB object.
const INTS: usize = 1024;
/// The thesis's store counts (1, 2, 4, 8, 16 million).
const FULL_NS: [usize; 5] = [1_000_000, 2_000_000, 4_000_000, 8_000_000, 16_000_000];
/// Stores of the untimed warm-up run of each variant.
const WARMUP_N: usize = 100_000;
/// Largest N accepted (64 MiB of data, 128 MiB pools).
const MAX_N: usize = 64_000_000;

// Rounds and --quick are described at the subcommand (main.rs).
#[derive(clap::Args, Clone)]
pub(crate) struct Args {
    #[command(flatten)]
    pub flags: BenchFlags,
    /// Leave out store counts above this; if none is left, run N = max-n alone.
    #[arg(long)]
    pub max_n: Option<usize>,
    /// Run only these variants, comma-separated (default: all); libpmemobj, the reference of
    /// every ratio, always runs when it can be loaded.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<Variant>,
}

impl Args {
    fn rounds(&self) -> usize {
        self.flags.rounds(5)
    }
    fn ns(&self) -> Result<Vec<usize>> {
        let cap = self
            .max_n
            .unwrap_or(if self.flags.quick { 1_000_000 } else { MAX_N });
        if cap == 0 || cap > MAX_N {
            bail!("--max-n must be 1..={MAX_N}");
        }
        let ns: Vec<usize> = FULL_NS.into_iter().filter(|&n| n <= cap).collect();
        Ok(if self.flags.quick {
            vec![*ns.last().unwrap_or(&cap)]
        } else if ns.is_empty() {
            vec![cap]
        } else {
            ns
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Variant {
    PersistBarrier,
    UndoLog,
    FullShadow,
    PmoWrite,
    PmoDram,
    PmoDramChecksum,
    PmoDramFaults,
    PmoDramMprotect,
    PmoDramKernel,
    PmoDramUnprotected,
    PmoPm,
    PmoPmUnprotected,
    Libpmemobj,
}

impl Variant {
    const ALL: [Variant; 13] = [
        Variant::PersistBarrier,
        Variant::UndoLog,
        Variant::FullShadow,
        Variant::PmoWrite,
        Variant::PmoDram,
        Variant::PmoDramChecksum,
        Variant::PmoDramFaults,
        Variant::PmoDramMprotect,
        Variant::PmoDramKernel,
        Variant::PmoDramUnprotected,
        Variant::PmoPm,
        Variant::PmoPmUnprotected,
        Variant::Libpmemobj,
    ];
    fn name(self) -> &'static str {
        match self {
            Variant::PersistBarrier => "persist-barrier",
            Variant::UndoLog => "undo-log",
            Variant::FullShadow => "full-shadow",
            Variant::PmoWrite => "pmo-write",
            Variant::PmoDram => "pmo-dram",
            Variant::PmoDramChecksum => "pmo-dram-checksum",
            Variant::PmoDramFaults => "pmo-dram-faults",
            Variant::PmoDramMprotect => "pmo-dram-mprotect",
            Variant::PmoDramKernel => "pmo-dram-kernel",
            Variant::PmoDramUnprotected => "pmo-dram-unprotected",
            Variant::PmoPm => "pmo-pm",
            Variant::PmoPmUnprotected => "pmo-pm-unprotected",
            Variant::Libpmemobj => "libpmemobj",
        }
    }
    fn about(self) -> &'static str {
        match self {
            Variant::PersistBarrier => "stores in place, clwb + sfence per object (NOT atomic)",
            Variant::UndoLog => "per-store undo entry, clwb + sfence per store (thesis Fig. 3.9)",
            Variant::FullShadow => "copy to shadow, store, persist, mark, copy back (Fig. 3.10)",
            Variant::PmoWrite => "PMO Sync, pool default, Handle::write per int (Explicit)",
            Variant::PmoDram => {
                "PMO Sync, pool default: DRAM shadow, protected (keys, else the kernel write \
                 path), pointer + mark_dirty"
            }
            Variant::PmoDramChecksum => "pmo-dram on a pool with page CRCs (checksum: true)",
            Variant::PmoDramFaults => "pmo-dram with write-fault tracking (what C callers get)",
            Variant::PmoDramMprotect => {
                "pmo-dram with page rights (mprotect windows; pkey: false, kernel: false)"
            }
            Variant::PmoDramKernel => {
                "pmo-dram with PM read-only, synced by pwrite (pkey: false, kernel: true)"
            }
            Variant::PmoDramUnprotected => "pmo-dram with protection off (protect: false)",
            Variant::PmoPm => "PMO Sync, thesis PM shadow (clwb), protected, pointer + mark_dirty",
            Variant::PmoPmUnprotected => "pmo-pm with protection off (the thesis's prototype)",
            Variant::Libpmemobj => "pmemobj_tx_add_range of the object in a transaction",
        }
    }
    fn atomic(self) -> bool {
        self != Variant::PersistBarrier
    }
    /// Pool options and dirty tracking of a PMO variant.
    fn pmo(self, objs: usize) -> Option<(PoolOptions, Tracking)> {
        let (shadow, protect, pkey, tracking) = match self {
            Variant::PmoWrite | Variant::PmoDram | Variant::PmoDramChecksum => {
                (Shadow::Dram, true, true, Tracking::Explicit)
            }
            Variant::PmoDramFaults => (Shadow::Dram, true, true, Tracking::Faults),
            Variant::PmoDramMprotect | Variant::PmoDramKernel => {
                (Shadow::Dram, true, false, Tracking::Explicit)
            }
            Variant::PmoDramUnprotected => (Shadow::Dram, false, true, Tracking::Explicit),
            Variant::PmoPm => (Shadow::Pm, true, true, Tracking::Explicit),
            Variant::PmoPmUnprotected => (Shadow::Pm, false, true, Tracking::Explicit),
            _ => return None,
        };
        let opts = PoolOptions {
            max_objects: objs as u32,
            protect,
            shadow,
            pkey,
            kernel: self != Variant::PmoDramMprotect,
            checksum: self == Variant::PmoDramChecksum,
        };
        Some((opts, tracking))
    }
}

/// One timed run.
#[derive(Debug, Clone, Copy, Serialize)]
struct Sample {
    secs: f64,
    /// Bytes written back to PM (lines flushed + non-temporal bytes); None: not measured.
    pm_bytes: Option<u64>,
    fences: Option<u64>,
}

#[derive(Serialize)]
struct Row {
    n: usize,
    objects: usize,
    variant: Variant,
    atomic: bool,
    median_secs: f64,
    rounds_secs: Vec<f64>,
    us_per_object: f64,
    /// libpmemobj's median time divided by this variant's (> 1: faster than libpmemobj).
    speedup_vs_libpmemobj: Option<f64>,
    pm_bytes: Option<u64>,
    pm_bytes_per_object: Option<f64>,
    fences_per_object: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    workload: &'static str,
    dir: PathBuf,
    pool_bytes: Vec<(usize, usize)>,
    rounds: usize,
    ns: Vec<usize>,
    variants: Vec<(Variant, &'static str)>,
    libpmemobj: String,
    libpmemobj_pm_bytes_per_object_at_least: u64,
    notes: Vec<String>,
    rows: Vec<Row>,
}

/// Bytes of every variant's file for `objs` objects: what the PMO pool needs (header, table of
/// `objs` entries, sync page, two 4 KiB slots per object), plus 16 MiB so that libpmemobj fits
/// its lanes (about 3 MiB), heap metadata and undo-log extensions beside a root object of the
/// same data (at 8 MiB for 1M stores its `tx_add_range` runs out of space).
fn pool_bytes(objs: usize) -> usize {
    let table = (4096 + objs * 128).next_multiple_of(4096);
    table + 4096 + 2 * 4096 * objs + 4096 + (16 << 20)
}

fn region(path: &Path, size: usize) -> Result<Counted<Region>> {
    let opts = RegionOptions {
        populate: true,
        ..RegionOptions::default()
    };
    let r = Region::create(path, size as u64, &opts)
        .with_context(|| format!("creating {}", path.display()))?;
    Ok(Counted::new(r))
}

fn run_one(v: Variant, n: usize, dir: &Path, lib: Option<&pmemobj::Lib>) -> Result<Sample> {
    let objs = Layout::objs_for(n, INTS);
    let size = pool_bytes(objs);
    let file = Scratch::file(dir, &format!("pmo-{}", v.name()));
    match v {
        Variant::PersistBarrier | Variant::UndoLog | Variant::FullShadow => {
            let l = Layout::new(objs, INTS);
            assert!(l.len() <= size, "baseline layout fits the common pool size");
            let m = region(&file.0, size)?;
            let seq = baselines::undo_next_seq(&m, &l);
            let (w0, f0) = m.counts();
            let t = Instant::now();
            match v {
                Variant::PersistBarrier => baselines::persist_barrier(&m, &l, n, |_| {}),
                Variant::UndoLog => baselines::undo_log(&m, &l, n, seq, |_| {}),
                _ => baselines::full_shadow(&m, &l, n, |_| {}),
            }
            let secs = t.elapsed().as_secs_f64();
            let (w1, f1) = m.counts();
            baselines::verify(&m, &l, n).map_err(|e| anyhow::anyhow!("{}: {e}", v.name()))?;
            Ok(Sample {
                secs,
                pm_bytes: Some(w1 - w0),
                fences: Some(f1 - f0),
            })
        }
        Variant::PmoWrite
        | Variant::PmoDram
        | Variant::PmoDramChecksum
        | Variant::PmoDramFaults
        | Variant::PmoDramMprotect
        | Variant::PmoDramKernel
        | Variant::PmoDramUnprotected
        | Variant::PmoPm
        | Variant::PmoPmUnprotected => {
            let m = region(&file.0, size)?;
            let (opts, tracking) = v.pmo(objs).expect("a PMO variant");
            let pool = Pool::format(m, &opts).context("formatting the PMO pool")?;
            let want_key = opts.shadow == Shadow::Dram
                && opts.protect
                && opts.pkey
                && pmkit_media::features().pku;
            if pool.uses_pkey() != want_key {
                bail!("{}: protection key expected: {want_key}", v.name());
            }
            let names: Vec<String> = (0..objs).map(|o| format!("o{o}")).collect();
            for name in &names {
                pool.create(name, 4096)?;
            }
            let (w0, f0) = pool.media().counts();
            let synced0 = pool.stats().bytes_synced;
            let t = Instant::now();
            pmo_workload(&pool, &names, n, v, tracking)?;
            let secs = t.elapsed().as_secs_f64();
            let (mut w1, f1) = pool.media().counts();
            if pool.protection() == "kernel" {
                // Written through the kernel, past the counting media.
                w1 += pool.stats().bytes_synced - synced0;
            }
            // What the variant claims: with keys, every attach flipped PKRU, none called mprotect.
            let keyed = pool.stats().keyed_attaches as usize;
            let want = if want_key { objs } else { 0 };
            if keyed != want {
                bail!(
                    "{}: {keyed} of {objs} attaches had keyed buffers, expected {want}",
                    v.name()
                );
            }
            for (o, name) in names.iter().enumerate() {
                let data = pool.read_published(name)?;
                let end = n.min((o + 1) * INTS);
                for i in o * INTS..end {
                    let k = 4 * (i - o * INTS);
                    let got = u32::from_le_bytes(data[k..k + 4].try_into().expect("4 bytes"));
                    if got != baselines::value(i) {
                        bail!("{}: object {o} int {}: found {got}", v.name(), i - o * INTS);
                    }
                }
            }
            Ok(Sample {
                secs,
                pm_bytes: Some(w1 - w0),
                fences: Some(f1 - f0),
            })
        }
        Variant::Libpmemobj => {
            let lib = lib.expect("only run when loaded");
            let mut pool = pmemobj::ObjPool::create(lib, &file.0, size, objs)?;
            let t = Instant::now();
            pool.run(n, INTS)?;
            let secs = t.elapsed().as_secs_f64();
            pool.verify(n, INTS).map_err(|e| anyhow::anyhow!(e))?;
            Ok(Sample {
                secs,
                pm_bytes: None,
                fences: None,
            })
        }
    }
}

/// The PMO side of the workload: per object attach, the stores, sync, detach.
fn pmo_workload(
    pool: &Pool<Counted<Region>>,
    names: &[String],
    n: usize,
    v: Variant,
    tracking: Tracking,
) -> Result<()> {
    for (o, name) in names.iter().enumerate() {
        let (first, end) = (o * INTS, n.min((o + 1) * INTS));
        let h = pool.attach_with(name, Access::ReadWrite, tracking)?;
        if v == Variant::PmoWrite {
            for i in first..end {
                h.write((4 * (i - first)) as u64, &baselines::value(i).to_le_bytes())?;
            }
        } else {
            let p = h.as_ptr()?.context("a Region has addresses")?.cast::<u32>();
            for i in first..end {
                // SAFETY: p is the page-aligned shadow of this read-write handle (4096 bytes,
                // writable or fault-tracked: a DRAM buffer or the PM shadow slot), valid until
                // the sync below; i - first < 1024.
                unsafe { p.add(i - first).write_volatile(baselines::value(i)) };
            }
            if tracking == Tracking::Explicit {
                h.mark_dirty(0, (4 * (end - first)) as u64)?;
            }
        }
        h.sync()?;
        h.detach()?;
    }
    Ok(())
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let ns = a.ns()?;
    let rounds = a.rounds();
    let dir = &a.flags.dir;
    if !dir.is_dir() {
        bail!("--dir {} is not a directory", dir.display());
    }
    // Before any other thread exists.
    let (lib, lib_status) = pmdk::load(pmemobj::SONAME, pmemobj::Lib::load);
    if lib.is_none() && !a.flags.json {
        eprintln!("pmkit-bench: {lib_status}: skipping the libpmemobj column");
    }
    let variants: Vec<Variant> = Variant::ALL
        .into_iter()
        .filter(|&v| {
            if v == Variant::Libpmemobj {
                lib.is_some()
            } else {
                a.only.is_empty() || a.only.contains(&v)
            }
        })
        .collect();
    let bar = a.flags.progress(rounds * ns.len() * variants.len());
    // One untimed pass of every variant first: faults in the code, the library's lazily set-up
    // state and the CPU's frequency, which otherwise land on whichever variant runs first.
    bar.set_message("warm-up");
    for &v in &variants {
        run_one(v, ns[0].min(WARMUP_N), dir, lib.as_ref())
            .with_context(|| format!("{} (warm-up)", v.name()))?;
    }
    // samples[ni][vi] = one Sample per round
    let samples = rotated_rounds(rounds, ns.len(), variants.len(), &bar, |_, ni, vi| {
        let (n, v) = (ns[ni], variants[vi]);
        bar.set_message(format!("N={} {}", n_label(n), v.name()));
        run_one(v, n, dir, lib.as_ref()).with_context(|| format!("{} at N={n}", v.name()))
    })?;

    let mut rows = vec![];
    for (ni, &n) in ns.iter().enumerate() {
        let objs = Layout::objs_for(n, INTS);
        let med: Vec<f64> = samples[ni]
            .iter()
            .map(|s| median(s.iter().map(|x| x.secs)))
            .collect();
        let lib_med = variants
            .iter()
            .position(|&v| v == Variant::Libpmemobj)
            .map(|i| med[i]);
        for (vi, &v) in variants.iter().enumerate() {
            let first = samples[ni][vi][0];
            rows.push(Row {
                n,
                objects: objs,
                variant: v,
                atomic: v.atomic(),
                median_secs: med[vi],
                rounds_secs: samples[ni][vi].iter().map(|x| x.secs).collect(),
                us_per_object: med[vi] * 1e6 / objs as f64,
                speedup_vs_libpmemobj: lib_med.map(|l| l / med[vi]),
                pm_bytes: first.pm_bytes,
                pm_bytes_per_object: first.pm_bytes.map(|b| b as f64 / objs as f64),
                fences_per_object: first.fences.map(|f| f as f64 / objs as f64),
            });
        }
    }
    let report = Report {
        benchmark: "pmo (PMO thesis, Fig. 4.1 / Table 4.2)",
        workload: "N sequential int stores (element i = 2i) into ceil(N/1024) contiguous 4 KiB \
                   objects; per object: open at its first store, one sync after its last",
        dir: dir.clone(),
        pool_bytes: ns
            .iter()
            .map(|&n| (n, pool_bytes(Layout::objs_for(n, INTS))))
            .collect(),
        rounds,
        ns: ns.clone(),
        variants: variants.iter().map(|&v| (v, v.about())).collect(),
        libpmemobj: lib_status,
        libpmemobj_pm_bytes_per_object_at_least: 2 * 4096,
        notes: vec![
            "pm_bytes: cache lines written back (64 B each) + non-temporal bytes, counted by a \
             Media wrapper; the same for every pmkit variant"
                .into(),
            "libpmemobj's PM traffic is not measured: at least the 4 KiB undo snapshot plus the \
             4 KiB object per transaction, plus log metadata lines"
                .into(),
            "times are medians over rounds of one process run; the machine may be shared".into(),
        ],
        rows,
    };
    a.flags.emit(&report, draw, print_report)
}

fn n_label(n: usize) -> String {
    if n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

fn print_report(r: &Report) {
    println!(
        "PMO Sync benchmark ({}), {} round(s), median; pools in {}",
        r.benchmark,
        r.rounds,
        r.dir.display()
    );
    println!("workload: {}", r.workload);
    println!("{}", r.libpmemobj);
    println!();
    for (v, about) in &r.variants {
        println!("  {:<21} {about}", v.name());
    }
    println!();
    println!(
        "{:>5} {:>6}  {:<21} {:>10} {:>10} {:>10} {:>12} {:>10} {:>9}",
        "N", "objs", "variant", "ms", "us/object", "vs pmemobj", "PM MiB", "PM B/obj", "fence/obj"
    );
    for row in &r.rows {
        let fences = row
            .fences_per_object
            .map_or("-".into(), |f| format!("{f:.1}"));
        let speedup = row
            .speedup_vs_libpmemobj
            .map_or("n/a".into(), |x| format!("{x:.2}x"));
        let pm = match (row.variant, row.pm_bytes) {
            (_, Some(b)) => format!("{:.1}", b as f64 / (1 << 20) as f64),
            (Variant::Libpmemobj, None) => format!(
                ">={:.1}",
                (r.libpmemobj_pm_bytes_per_object_at_least * row.objects as u64) as f64
                    / (1 << 20) as f64
            ),
            _ => "-".into(),
        };
        let per = match (row.variant, row.pm_bytes_per_object) {
            (_, Some(b)) => format!("{b:.0}"),
            (Variant::Libpmemobj, None) => {
                format!(">={}", r.libpmemobj_pm_bytes_per_object_at_least)
            }
            _ => "-".into(),
        };
        println!(
            "{:>5} {:>6}  {:<21} {:>10.1} {:>10.2} {:>10} {:>12} {:>10} {:>9}",
            n_label(row.n),
            row.objects,
            row.variant.name(),
            row.median_secs * 1e3,
            row.us_per_object,
            speedup,
            pm,
            per,
            fences,
        );
    }
    println!();
    println!("vs pmemobj: libpmemobj's time / the variant's (2.00x = twice as fast). persist-barrier is not atomic.");
    for note in &r.notes {
        println!("note: {note}");
    }
}

/// Two panels of bars (time per N): the variants near libpmemobj, and the two that are two
/// orders of magnitude slower (with libpmemobj again for scale), so neither hides the other.
fn draw(path: &Path, r: &Report) -> Result<()> {
    let slow = [Variant::UndoLog, Variant::PmoWrite];
    let panel = |title: &str, keep: &dyn Fn(Variant) -> bool| plot::BarPanel {
        title: title.into(),
        groups: r
            .ns
            .iter()
            .map(|&n| format!("{} stores", n_label(n)))
            .collect(),
        series: r
            .variants
            .iter()
            .filter(|(v, _)| keep(*v))
            .map(|(v, _)| {
                let ms =
                    r.ns.iter()
                        .map(|&n| {
                            r.rows
                                .iter()
                                .find(|row| row.n == n && row.variant == *v)
                                .map_or(0.0, |row| row.median_secs * 1e3)
                        })
                        .collect();
                (v.name().to_string(), ms)
            })
            .collect(),
    };
    let panels = [
        panel("PMO Sync, shadow copy, persist+barrier, libpmemobj", &|v| {
            !slow.contains(&v)
        }),
        panel("per-store undo log and per-int Handle::write", &|v| {
            slow.contains(&v) || v == Variant::Libpmemobj
        }),
    ];
    plot::bars(
        path,
        "PMO benchmark (thesis Fig. 4.1): time for N int stores, one sync per 4 KiB object",
        "time (ms, median)",
        &panels,
        2,
    )
}
