//! `pmkit`: the command-line front end. Each subcommand lives in its own module; this file only
//! parses arguments and dispatches.

mod attach;
mod bench_atomic;
mod bench_attach;
mod bench_blk;
mod bench_nbd;
mod bench_pmo;
mod blk;
mod dl;
mod obj;
mod plot;
mod probe;
mod serve;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "pmkit",
    version,
    about = "A persistent-memory storage stack in user space"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a PMBD block device (a file of --size bytes, or format an existing one).
    Create(blk::CreateArgs),
    /// Describe a block device from its superblock (changes nothing).
    Info(blk::InfoArgs),
    /// Verify a block device (superblock, checksums): exit 0 when clean, 1 otherwise.
    Check(blk::CheckArgs),
    /// Persistent memory objects (PMO): create, list, inspect, dump and check pools.
    Obj(obj::Args),
    /// Show this machine's PM-relevant CPU features and measure each persistence primitive and
    /// protection window.
    Probe(probe::Args),
    /// Serve the device as a kernel block device (FUSE file + loop device), optionally with a
    /// file system made and mounted on it. Runs until `pmkit detach` or SIGINT/SIGTERM.
    Attach(attach::AttachArgs),
    /// Undo `pmkit attach`: unmount, remove the loop device, unmount FUSE, close the device.
    Detach(attach::DetachArgs),
    /// Export a block device over NBD (unix socket or TCP); with no PATH, a 1 GiB emulated PM
    /// device in /dev/shm. Runs until SIGINT/SIGTERM, then finishes requests and closes cleanly.
    Serve(serve::ServeArgs),
    /// Benchmarks (each prints a table, --json for machines, --plot FILE for people).
    #[command(subcommand)]
    Bench(BenchCmd),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Bandwidth of every protection mode (PMBD paper Fig. 3, 5, 6, 8).
    Protection(bench_blk::FigArgs),
    /// Bandwidth of every write scheme, with write barriers (paper Fig. 9).
    WriteScheme(bench_blk::FigArgs),
    /// The default configuration against unprotected write-back, the peak (paper Fig. 11).
    Overview(bench_blk::FigArgs),
    /// A small-file workload on ext4 (through attach) as emulated PM slows down (paper Fig. 15).
    Emulation(bench_blk::FigArgs),
    /// PostgreSQL pgbench and fio file workloads on ext4 over `pmkit attach` vs over a /dev/shm
    /// loop device (the RAM-disk baseline), in the same run.
    Attach(bench_attach::Args),
    /// fio's nbd engine against `pmkit serve` and `nbdkit memory`, side by side.
    Nbd(bench_nbd::Args),
    /// PMO Sync against persist+barrier, undo log, full shadow copy and libpmemobj: N int
    /// stores into 4 KiB objects, one sync per object (PMO thesis Fig. 4.1, Table 4.2).
    Pmo(bench_pmo::Args),
    /// Atomic PMBD against plain PMBD and libpmemblk: 4 KiB random writes and reads, 1 and 2
    /// threads, same run.
    Atomic(bench_atomic::Args),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PMKIT_LOG")
                .unwrap_or_else(|_| "warn,fuser=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Create(a) => blk::create(a),
        Cmd::Info(a) => blk::info(a),
        Cmd::Check(a) => blk::check(a),
        Cmd::Probe(a) => probe::run(a),
        Cmd::Attach(a) => attach::run_attach(a),
        Cmd::Detach(a) => attach::run_detach(a),
        Cmd::Bench(b) => match b {
            BenchCmd::Protection(a) => bench_blk::protection(a),
            BenchCmd::WriteScheme(a) => bench_blk::write_scheme(a),
            BenchCmd::Overview(a) => bench_blk::overview(a),
            BenchCmd::Emulation(a) => bench_blk::emulation(a),
            BenchCmd::Attach(a) => bench_attach::run(a),
            BenchCmd::Nbd(a) => bench_nbd::run(a),
            BenchCmd::Pmo(a) => bench_pmo::run(a),
            BenchCmd::Atomic(a) => bench_atomic::run(a),
        },
        Cmd::Obj(a) => obj::run(a),
        Cmd::Serve(a) => serve::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pmkit: error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
