//! `pmkit bench fs-layers` (Oikawa's layer-cost study, figure 6): what each layer between a program and PM
//! costs, in the manner of Oikawa's layer-cost study ("Revisiting the I/O stack for
//! memory-speed storage", Shuichi Oikawa). One C driver ([`probe`]) runs N operations of one
//! kind (4 KiB random read, 4 KiB random overwrite, create, stat with the path on the stack and
//! in mmap'd memory, 4 KiB append + fsync) through
//! each layer ([`layer`]): the PMFS library in process (C ABI), the LD_PRELOAD shim (alone, and
//! as a client of `pmkit fs serve`, the pool shared between processes), the FUSE
//! mount, ext4 on `pmkit attach`, `pmkit serve` over NBD (block requests through libnbd: no
//! create or stat there), and, as references, ext4 on a /dev/shm loop device and tmpfs.
//!
//! Three kinds of run, kept apart so that tracing never slows the timed one:
//! 1. timed, in rotated rounds: the driver's wall clock and CPU over its N operations, the
//!    daemon's CPU over the same span (/proc/PID/stat);
//! 2. traced: system calls per operation of the driver (`strace -f -c` from its start) and of
//!    the daemon (`strace -f -c -p`, attached for the N operations), each less the same run
//!    with N = 0 (the setup alone), over N;
//! 3. counted: user-space instructions per operation of the driver (under valgrind's callgrind,
//!    counting only its N operations: it zeroes and dumps the counts itself) and of the daemon (one daemon under callgrind per layer, its counts read
//!    from "go" to the driver's exit with `callgrind_control`), each less an N = 0 run, over N.
//!
//! Then the goals side by side: library and shim at least tmpfs's rate for 4 KiB
//! append + fsync and for stat, and the library's append + fsync within 2x a raw 4 KiB
//! non-temporal write + fence (`bench fs-protect`'s reference, measured in this run).

mod layer;
mod output;
mod probe;

use crate::fs::targets::Sizes;
use crate::host::{cpu_label, need_root, need_tool, Scratch};
use crate::report::{median, rotated_rounds, BenchFlags};
use anyhow::{Context, Result};
use layer::{Ctx, Layer, Running, OPS};
use pmkit::args::EngineArgs;
use probe::{Drivers, Outcome};
use serde::Serialize;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    flags: BenchFlags,
    /// Operations per timed run, every operation kind [default: read4k, write4k 20000; create
    /// 5000; stat and stat_mapped 50000; append4k_fsync 4000; quick: 200]
    #[arg(long)]
    n: Option<usize>,
    /// Operations per strace run [default: 5000; quick: 2000]. The count is the N-run's less an
    /// N=0 run's, both from the driver's start, and the set-up's system calls vary by a few
    /// hundred between runs (kernel protection makes every PM store a pwrite): N must be large
    /// for the per-operation figure to mean anything (at 200, ±1.5 per operation was seen).
    #[arg(long)]
    strace_n: Option<usize>,
    /// Operations per callgrind run [default: 1000; quick: 10]
    #[arg(long)]
    valgrind_n: Option<usize>,
    /// Layers to measure (library, shim, served, peer, fuse, ext4-attach, nbd, ext4-loop, tmpfs)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "library,shim,served,fuse,ext4-attach,nbd,ext4-loop,tmpfs"
    )]
    layers: Vec<String>,
    /// Skip the strace and callgrind runs (time and CPU only)
    #[arg(long)]
    no_trace: bool,
    /// Processes running each timed operation at once, each in a directory of its own on the
    /// same file system (1..=16). Above 1 only the layers several processes can share are
    /// timed (the served shim, the mounts, tmpfs); µs per operation is each process's, ops/s
    /// all of theirs together. The strace and callgrind runs keep one process.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    clients: u32,
    /// Protection of PMFS (library, shim, FUSE mount): auto, none, kernel, pkey
    #[arg(long, default_value = "auto")]
    pmfs_protect: pmkit::args::ProtectArg,
    /// FUSE worker threads of the PMFS mount and of the attachment
    #[arg(long, default_value_t = 4)]
    fuse_threads: usize,
    /// Size of each pool and device in MiB (timed runs; traced runs use 128)
    #[arg(long, default_value_t = 512)]
    size_mib: u64,
    #[command(flatten)]
    engine: EngineArgs,
}

/// Default operations per timed run.
fn default_n(op: &str) -> usize {
    match op {
        "create" => 5000,
        "stat" | "stat_mapped" => 50000,
        "append4k_fsync" => 4000,
        _ => 20000,
    }
}

/// One timed run.
#[derive(Serialize, Clone)]
struct Sample {
    layer: &'static str,
    op: &'static str,
    round: usize,
    us_per_op: f64,
    app_user_us: f64,
    app_sys_us: f64,
    daemon_user_us: Option<f64>,
    daemon_sys_us: Option<f64>,
}

/// One (layer, operation): medians of the timed runs, and the traced and counted figures.
#[derive(Serialize, Clone, Default)]
struct Cell {
    layer: &'static str,
    op: &'static str,
    /// Median wall time per operation (the driver's clock), µs.
    us_per_op: f64,
    ops_per_s: f64,
    /// Every round's µs per operation.
    rounds_us: Vec<f64>,
    /// CPU per operation, µs (medians): the driver's user and kernel time, the daemon's.
    app_user_us: f64,
    app_sys_us: f64,
    daemon_user_us: Option<f64>,
    daemon_sys_us: Option<f64>,
    /// System calls per operation (strace -c, baseline subtracted).
    syscalls_app: Option<f64>,
    syscalls_daemon: Option<f64>,
    /// The driver's and daemon's most frequent calls per operation.
    top_syscalls_app: Vec<(String, f64)>,
    top_syscalls_daemon: Vec<(String, f64)>,
    /// User-space instructions per operation (callgrind Ir, baseline subtracted).
    instr_app: Option<f64>,
    instr_daemon: Option<f64>,
}

#[derive(Serialize)]
struct Goal {
    goal: String,
    measured: String,
    met: bool,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    cpu: String,
    rounds: usize,
    /// Processes per timed run (`--clients`).
    clients: usize,
    layers: Vec<&'static str>,
    ops: Vec<&'static str>,
    /// Operations per timed run, per op.
    n: Vec<(&'static str, usize)>,
    strace_n: usize,
    valgrind_n: usize,
    pmfs_protect: String,
    fuse_threads: usize,
    not_applicable: Vec<String>,
    cells: Vec<Cell>,
    /// Raw 4 KiB non-temporal write + fence, µs (bench fs-protect's reference), per round.
    raw_nt_4k_fence_us: f64,
    raw_nt_rounds: Vec<f64>,
    goals: Vec<Goal>,
    samples: Vec<Sample>,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    need_root("bench fs-layers mounts file systems")?;
    for tool in ["cc", "mkfs.ext4", "losetup", "mount", "umount"] {
        need_tool(tool, "install gcc, e2fsprogs, mount and util-linux")?;
    }
    if !a.no_trace {
        need_tool("strace", "install strace, or pass --no-trace")?;
        need_tool("valgrind", "install valgrind, or pass --no-trace")?;
    }
    let clients = a.clients as usize;
    let layers: Vec<Layer> = a
        .layers
        .iter()
        .map(|s| Layer::parse(s))
        .filter(|l| l.as_ref().map_or(true, |l| clients == 1 || l.shared()))
        .collect::<Result<_>>()?;
    anyhow::ensure!(
        !layers.is_empty(),
        "no layer given can be shared by {clients} processes (the served shim, the mounts and \
         tmpfs can)"
    );
    let quick = a.flags.quick;
    let rounds = a.flags.rounds(3);
    let n_of = |op: &str| a.n.unwrap_or(if quick { 200 } else { default_n(op) });
    let strace_n = a.strace_n.unwrap_or(if quick { 2000 } else { 5000 }).max(1);
    let valgrind_n = a.valgrind_n.unwrap_or(if quick { 10 } else { 1000 }).max(1);
    let scratch = Scratch::dir(&std::env::temp_dir(), "fs-layers")?;
    let mnt = scratch.path().join("mnt");
    std::fs::create_dir_all(&mnt)?;
    let drivers = probe::build(scratch.path(), layers.contains(&Layer::Nbd))?;
    let pmkit = crate::blk::nbd::pmkit_exe()?;
    let max_n = OPS.iter().map(|op| n_of(op)).max().unwrap_or(1);
    let sizes = |mib: u64| Sizes {
        bytes: mib.max(64) << 20,
        inodes: (max_n as u32).saturating_mul(2).clamp(4096, 1 << 20),
        fuse_threads: a.fuse_threads.clamp(1, 64),
        pmfs_protect: a.pmfs_protect,
        barrier_ns: 0,
    };
    let ctx = |s: Sizes| Ctx {
        dir: &a.flags.dir,
        mnt: &mnt,
        scratch: scratch.path(),
        sizes: s,
        engine: &a.engine,
        pmkit: pmkit.clone(),
    };
    let timed_ctx = ctx(sizes(a.size_mib));
    let traced_ctx = ctx(sizes(128));
    let traced = if a.no_trace { 0 } else { 1 };
    let bar = a
        .flags
        .progress(rounds * (layers.len() + 1) + traced * layers.len() * 2);

    // 1. Timed runs.
    let runs = rotated_rounds(rounds, 1, layers.len(), &bar, |r, _, i| {
        let l = layers[i];
        bar.set_message(format!("round {}/{rounds}: {}", r + 1, l.name()));
        on_layer(l, &timed_ctx, &[], |run| {
            let mut v = vec![];
            for op in OPS.into_iter().filter(|op| l.has(op)) {
                let os = drive(
                    &drivers,
                    run,
                    (op, n_of(op)),
                    &timed_ctx,
                    None,
                    &[],
                    clients,
                )?;
                v.push(sample(l, op, r, &os, n_of(op)));
            }
            Ok(v)
        })
    })?;
    let samples: Vec<Sample> = runs.into_iter().flatten().flatten().flatten().collect();
    let ms = if quick { 30 } else { 300 };
    let raw_nt_rounds = (0..rounds)
        .map(|_| {
            bar.inc();
            crate::fs::protect::raw_nt(&a.flags.dir, 1, ms, false)
        })
        .collect::<Result<Vec<f64>>>()?;

    let mut cells = summarize(&samples, &layers, clients);
    // 2. and 3. Traced and counted runs.
    if !a.no_trace {
        for &l in &layers {
            bar.set_message(format!("strace: {}", l.name()));
            trace(l, &drivers, &traced_ctx, strace_n, &mut cells)
                .with_context(|| format!("strace runs on {}", l.name()))?;
            bar.inc();
            bar.set_message(format!("callgrind: {}", l.name()));
            count(l, &drivers, &traced_ctx, valgrind_n, &mut cells)
                .with_context(|| format!("callgrind runs on {}", l.name()))?;
            bar.inc();
        }
    }
    bar.finish();
    let raw = median(raw_nt_rounds.iter().copied());
    let report = Report {
        benchmark: "fs-layers",
        cpu: cpu_label(),
        rounds,
        clients,
        layers: layers.iter().map(|l| l.name()).collect(),
        ops: OPS.to_vec(),
        n: OPS.iter().map(|&op| (op, n_of(op))).collect(),
        strace_n,
        valgrind_n,
        pmfs_protect: a.pmfs_protect.to_string(),
        fuse_threads: timed_ctx.sizes.fuse_threads,
        not_applicable: layers
            .iter()
            .flat_map(|l| OPS.iter().filter(|op| !l.has(op)).map(move |op| (l, op)))
            .map(|(l, op)| format!("{op} on {}: a block device has no names", l.name()))
            .collect(),
        goals: goals(&cells, raw),
        cells,
        raw_nt_4k_fence_us: raw,
        raw_nt_rounds,
        samples,
    };
    a.flags.emit(&report, output::draw, output::print_table)
}

/// Bring `l` up (its daemon under `wrap`), run `f`, tear it down (also when `f` fails).
fn on_layer<T>(
    l: Layer,
    c: &Ctx,
    wrap: &[String],
    f: impl FnOnce(&Running) -> Result<T>,
) -> Result<T> {
    let run = layer::up(l, c, wrap).with_context(|| format!("setting up {}", l.name()))?;
    let res = f(&run);
    let down = layer::down(run, c.mnt);
    let res = res.with_context(|| format!("running on {}", l.name()))?;
    down.with_context(|| format!("tearing down {}", l.name()))?;
    Ok(res)
}

/// One timed run's sample from its drivers' outcomes (one per client): each client's time and
/// CPU per operation, averaged; the daemon's CPU over every client's operations.
fn sample(l: Layer, op: &'static str, round: usize, os: &[Outcome], n: usize) -> Sample {
    let (k, n) = (os.len() as f64, n.max(1) as f64);
    let mean = |f: fn(&Outcome) -> f64| os.iter().map(f).sum::<f64>() / k / n;
    let daemon = os[0].daemon_us.map(|d| (d.0 / n / k, d.1 / n / k));
    Sample {
        layer: l.name(),
        op,
        round,
        us_per_op: mean(|o| o.ns) / 1e3,
        app_user_us: mean(|o| o.user_us),
        app_sys_us: mean(|o| o.sys_us),
        daemon_user_us: daemon.map(|d| d.0),
        daemon_sys_us: daemon.map(|d| d.1),
    }
}

/// Run the layer's driver for `op` x `n` (under `wrap`) in `clients` processes at once (each
/// in a directory of its own), `at_go` called once all are ready; one outcome per process.
fn drive(
    d: &Drivers,
    run: &Running,
    (op, n): (&str, usize),
    c: &Ctx,
    at_go: Option<&dyn Fn() -> Result<()>>,
    wrap: &[String],
    clients: usize,
) -> Result<Vec<Outcome>> {
    let exe = match run.layer {
        Layer::Library => &d.pmfs,
        Layer::Nbd => d.nbd.as_ref().context("nbdops was not built")?,
        _ => &d.posix,
    };
    let mut cmds: Vec<Command> = (0..clients)
        .map(|k| {
            let mut cmd = match wrap.split_first() {
                Some((w, rest)) => {
                    let mut cmd = Command::new(w);
                    cmd.args(rest).arg(exe);
                    cmd
                }
                None => Command::new(exe),
            };
            cmd.arg(op)
                .arg(n.to_string())
                .arg(&run.place)
                .envs(run.env.iter().map(|(k, v)| (k, v)));
            if clients > 1 {
                cmd.env("FSOPS_TAG", format!("-c{k}"));
            }
            if run.layer == Layer::Library {
                // The C ABI reads its protection from the environment.
                cmd.env("PMFS_PROTECT", c.sizes.pmfs_protect.to_string());
            }
            cmd
        })
        .collect();
    let pid = run.daemon.as_ref().map(|d| d.id());
    let logs = (0..clients).map(|k| c.scratch.join(format!("driver-{k}.log")));
    let go = || at_go.map_or(Ok(()), |f| f());
    probe::run_drivers(cmds.iter_mut().zip(logs).collect(), pid, go)
}

fn cell<'a>(cells: &'a mut [Cell], l: Layer, op: &str) -> Option<&'a mut Cell> {
    cells.iter_mut().find(|c| c.layer == l.name() && c.op == op)
}

/// System calls per operation of `l`'s driver and daemon.
fn trace(l: Layer, d: &Drivers, c: &Ctx, n: usize, cells: &mut [Cell]) -> Result<()> {
    on_layer(l, c, &[], |run| {
        for op in OPS.into_iter().filter(|op| l.has(op)) {
            let mut got = vec![];
            for k in [0, n] {
                let app = c.scratch.join(format!("strace-app-{op}-{k}"));
                let dmn = c.scratch.join(format!("strace-daemon-{op}-{k}"));
                let wrap: Vec<String> = ["strace", "-f", "-c", "-o"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain([app.display().to_string()])
                    .collect();
                let tracer = std::cell::RefCell::new(None);
                let pid = run.daemon.as_ref().map(|d| d.id());
                let attach = || -> Result<()> {
                    if let Some(pid) = pid {
                        *tracer.borrow_mut() = Some(probe::Strace::attach(pid, &dmn)?);
                    }
                    Ok(())
                };
                drive(d, run, (op, k), c, Some(&attach), &wrap, 1)?;
                let daemon = tracer.into_inner().map(|t| t.stop()).transpose()?;
                got.push((probe::strace_counts(&app)?, daemon));
            }
            let per = |a: &probe::Counts, b: &probe::Counts| {
                let total = (b.total as f64 - a.total as f64) / n as f64;
                let mut top: Vec<(String, f64)> = b
                    .by_name
                    .iter()
                    .map(|(k, &v)| {
                        let base = a.by_name.get(k).copied().unwrap_or(0);
                        (k.clone(), (v as f64 - base as f64) / n as f64)
                    })
                    .filter(|(_, v)| *v >= 0.01)
                    .collect();
                top.sort_by(|x, y| y.1.total_cmp(&x.1));
                top.truncate(5);
                (total, top)
            };
            let Some(cl) = cell(cells, l, op) else {
                continue;
            };
            let (t, top) = per(&got[0].0, &got[1].0);
            cl.syscalls_app = Some(t);
            cl.top_syscalls_app = top;
            if let (Some(a), Some(b)) = (&got[0].1, &got[1].1) {
                let (t, top) = per(a, b);
                cl.syscalls_daemon = Some(t);
                cl.top_syscalls_daemon = top;
            }
        }
        Ok(())
    })
}

/// User-space instructions per operation of `l`'s driver (the window of its N operations, less
/// an N = 0 run) and of its daemon (one daemon under callgrind for every operation, counted from
/// "go" to the driver's exit, less the same window of an N = 0 run).
fn count(l: Layer, d: &Drivers, c: &Ctx, n: usize, cells: &mut [Cell]) -> Result<()> {
    let dmn = c.scratch.join(format!("cg-daemon-{}", l.name()));
    let wrap = if l.has_daemon() {
        probe::callgrind(&dmn)
    } else {
        vec![]
    };
    on_layer(l, c, &wrap, |run| {
        let mut window = run
            .daemon
            .as_ref()
            .map(|p| probe::Window::new(p.id(), &dmn));
        for op in OPS.into_iter().filter(|op| l.has(op)) {
            let mut got = vec![];
            for k in [0, n] {
                let app = c.scratch.join(format!("cg-app-{op}-{k}"));
                let zero = || window.as_ref().map_or(Ok(()), |w| w.zero());
                drive(d, run, (op, k), c, Some(&zero), &probe::callgrind(&app), 1)?;
                let daemon = window.as_mut().map(|w| w.dump()).transpose()?;
                // The driver dumped its count of the N operations to APP.1.
                let ops = PathBuf::from(format!("{}.1", app.display()));
                got.push((probe::callgrind_ir(&ops)?, daemon));
            }
            let per = |a: u64, b: u64| (b as f64 - a as f64) / n as f64;
            if let Some(cl) = cell(cells, l, op) {
                cl.instr_app = Some(per(got[0].0, got[1].0));
                if let (Some(a), Some(b)) = (got[0].1, got[1].1) {
                    cl.instr_daemon = Some(per(a, b));
                }
            }
        }
        Ok(())
    })
}

/// Each (layer, operation)'s medians; ops/s counts every client's operations.
fn summarize(samples: &[Sample], layers: &[Layer], clients: usize) -> Vec<Cell> {
    let mut cells = vec![];
    for &l in layers {
        for op in OPS.into_iter().filter(|op| l.has(op)) {
            let of: Vec<&Sample> = samples
                .iter()
                .filter(|s| s.layer == l.name() && s.op == op)
                .collect();
            let med = |f: fn(&Sample) -> f64| median(of.iter().map(|s| f(s)));
            let opt = |f: fn(&Sample) -> Option<f64>| {
                let v: Vec<f64> = of.iter().filter_map(|s| f(s)).collect();
                (!v.is_empty()).then(|| median(v))
            };
            let us = med(|s| s.us_per_op);
            cells.push(Cell {
                layer: l.name(),
                op,
                us_per_op: us,
                ops_per_s: clients as f64 * 1e6 / us.max(1e-9),
                rounds_us: of.iter().map(|s| s.us_per_op).collect(),
                app_user_us: med(|s| s.app_user_us),
                app_sys_us: med(|s| s.app_sys_us),
                daemon_user_us: opt(|s| s.daemon_user_us),
                daemon_sys_us: opt(|s| s.daemon_sys_us),
                ..Default::default()
            });
        }
    }
    cells
}

/// The goals that this run measures.
fn goals(cells: &[Cell], raw_us: f64) -> Vec<Goal> {
    let get = |l: &str, op: &str| cells.iter().find(|c| c.layer == l && c.op == op);
    let mut v = vec![];
    for op in ["append4k_fsync", "stat", "stat_mapped"] {
        let Some(tmpfs) = get("tmpfs", op) else {
            continue;
        };
        for l in ["library", "shim"] {
            if let Some(c) = get(l, op) {
                v.push(Goal {
                    goal: format!("{l} >= tmpfs for {op} (ops/s)"),
                    measured: format!(
                        "{:.0} vs {:.0} ops/s ({:.2}x)",
                        c.ops_per_s,
                        tmpfs.ops_per_s,
                        c.ops_per_s / tmpfs.ops_per_s.max(1e-9)
                    ),
                    met: c.ops_per_s >= tmpfs.ops_per_s,
                });
            }
        }
    }
    if let Some(c) = get("library", "append4k_fsync") {
        v.push(Goal {
            goal: "library append4k_fsync latency <= 2x raw 4 KiB NT write + fence".into(),
            measured: format!(
                "{:.2} µs vs raw {:.2} µs ({:.2}x)",
                c.us_per_op,
                raw_us,
                c.us_per_op / raw_us.max(1e-9)
            ),
            met: c.us_per_op <= 2.0 * raw_us,
        });
    }
    v
}
