//! `pmkit-bench`: pmkit's benchmarks, a tool beside the `pmkit` command (`pmkit bench ARGS` runs
//! `pmkit-bench ARGS`). The benchmarks are organised by the system they measure (`blk`, `obj`,
//! `fs`, `xmem`, `hmep`); this file only parses arguments and dispatches. [`report`] holds what they all do alike, [`pmdk`] the PMDK peers.

#![deny(unsafe_op_in_unsafe_fn)]

// By system, as the crates are; then what the benchmarks share.
mod blk;
mod fs;
mod hmep;
mod obj;
mod xmem;

mod host;
mod pmdk;
mod report;
mod workload;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "pmkit-bench",
    version,
    about = "pmkit's benchmarks: each prints a table, --json for machines, --plot FILE for people"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bandwidth of every protection mode (PMBD paper Fig. 3, 5, 6, 8).
    ///
    /// Rounds: 3 per cell. --quick: small devices, few cells, short runs, one round.
    Protection(blk::figures::FigArgs),
    /// Bandwidth of every write scheme, with write barriers (paper Fig. 9).
    ///
    /// Rounds: 3 per cell. --quick: small devices, few cells, short runs, one round.
    WriteScheme(blk::figures::FigArgs),
    /// The default configuration against unprotected write-back, the peak (paper Fig. 11).
    ///
    /// Rounds: 3 per cell. --quick: small devices, few cells, short runs, one round.
    Overview(blk::figures::FigArgs),
    /// A small-file workload on ext4 (through attach) as emulated PM slows down (paper Fig. 15).
    ///
    /// Needs root. Rounds: 3. --quick: fewer slowdowns and files, one round.
    Emulation(blk::figures::FigArgs),
    /// PostgreSQL pgbench, SQLite and fio file workloads on ext4 over `pmkit attach` vs over a /dev/shm
    /// loop device (the RAM-disk baseline), in the same run.
    ///
    /// Needs root, fio, sqlite3 and PostgreSQL (scripts/bench-attach.sh installs them). Rounds: 2.
    /// --quick: small scale, few transactions, short fio jobs, one round.
    Attach(blk::attach::Args),
    /// fio's nbd engine against `pmkit serve` and `nbdkit memory`, side by side.
    Nbd(blk::nbd::Args),
    /// PMO Sync against persist+barrier, undo log, full shadow copy and libpmemobj: N int
    /// stores into 4 KiB objects, one sync per object (PMO thesis Fig. 4.1, Table 4.2).
    ///
    /// Rounds: 5 per (N, variant). --quick: N = 1M only (or --max-n), one round.
    Pmo(obj::Args),
    /// Atomic PMBD against plain PMBD and libpmemblk: 4 KiB random writes and reads, 1 and 2
    /// threads, same run.
    ///
    /// Rounds: 5. --quick: 32 MiB devices, 2000 operations per thread, one round, no fio.
    Atomic(blk::atomic::Args),
    /// Writes through the kernel (pwrite, io_uring batches) into a read-only-mapped file
    /// against non-temporal stores: what the `kernel` protection mode costs and which call is
    /// cheapest, 1 and 2 threads.
    ///
    /// Rounds: 3. --quick: a 64 MiB file, short runs, one round.
    KernelPath(blk::kernel_path::Args),
    /// PMFS over FUSE (`pmkit fs mount`, each kernel cache mode) against ext4 on `pmkit attach`,
    /// ext4 on a /dev/shm loop device and tmpfs: 4 KiB append + fsync, create, stat, open+read,
    /// rename, unlink with 1 and 2 threads; then bytes written per metadata operation.
    ///
    /// Needs root, /dev/fuse, e2fsprogs. Rounds: 3. --quick: small counts, one round.
    Fs(fs::mount::Args),
    /// What protecting PM from stray stores costs PMFS (the library, no FUSE): none, kernel
    /// (pwrite), pt (mprotect around each store) and pkey where the CPU has it, on appends with
    /// fsync, overwrites, create, rename and stat, 1 and 2 threads (PMFS thesis Fig. 18).
    ///
    /// Rounds: 3. --quick: short runs, one round.
    FsProtect(fs::protect::Args),
    /// X-Mem's per-tag allocator against glibc malloc, jemalloc and mimalloc: small and large
    /// objects, batch and churn patterns, 1 and 2 threads.
    ///
    /// Rounds: 3. --quick: fewer cells, 20 ms runs, one round.
    XmemAlloc(xmem::alloc::Args),
    /// The figure of a calibration saved by `pmkit hmep calibrate --json` (`pmkit hmep
    /// calibrate --plot FILE` runs this).
    HmepPlotCalibration(hmep::calibrate::Args),
    /// HMEP's trace simulator (level 3) against wall clock on a real tier pair (huge pages
    /// against 4 KiB pages): xgraph's PageRank and BFS under every placement of its three
    /// X-Mem tags, measured and predicted from one traced run.
    ///
    /// Rounds: 3. --quick: a scale-12 graph, one round.
    HmepValidate(hmep::ValidateArgs),
    /// fio-style sequential and random reads and writes, 64 B to 256 KiB, 1 thread, fdatasync
    /// every 256 KiB written, on PMFS (library, LD_PRELOAD shim, FUSE), ext4 on `pmkit attach`,
    /// ext2/ext4 on a /dev/shm loop and tmpfs (PMFS thesis Fig. 13); then 64 B random writes
    /// with fdatasync after each (the goal: library and shim >= 10x ext4 on attach).
    ///
    /// Needs root, /dev/fuse, e2fsprogs, fio and libpmkit_preload.so beside this binary
    /// (`cargo build --release -p pmkit-preload`). Rounds: 2. --quick: 64 B and 4 KiB, 8 MiB
    /// file, 200 ms cells, one round.
    FsIo(fs::io::Args),
    /// Throughput as every persistence barrier takes longer (PMFS thesis Fig. 15c): 4 KiB and
    /// 64 B random writes and 256 KiB sequential writes with fdatasync each, create+unlink, on
    /// the PMFS library, the LD_PRELOAD shim and ext4 on `pmkit attach`, with barriers per second.
    ///
    /// Needs what fs-io needs. Rounds: 2. --quick: 8 MiB file, 100 ms per workload, one round.
    FsBarrier(fs::io::barrier::Args),
    /// What each layer costs per 4 KiB read, 4 KiB write, create, stat and 4 KiB append + fsync
    /// (Oikawa's layer-cost study; figure 6 of that study): the PMFS library (C ABI), the LD_PRELOAD
    /// shim, the FUSE mount, ext4 on attach, NBD (`pmkit serve` through libnbd), ext4 on a
    /// /dev/shm loop and tmpfs. Time and CPU (driver and daemon), system calls (strace) and
    /// user-space instructions (callgrind) per operation, and the stat and append goals.
    ///
    /// Needs root, /dev/fuse, cc, e2fsprogs, strace, valgrind, libnbd-dev, libpmfs.so and
    /// libpmkit_preload.so (`cargo build --release -p pmkit-libpmfs -p pmkit-preload`). Rounds: 3.
    /// --quick: 200 operations per timed run, 20 per strace run, 10 per callgrind run, one round.
    FsLayers(fs::layers::Args),
    /// PMFS thesis Fig. 14: cp, untar, find, grep -r, cp -r and rm -r of a Linux source tree
    /// (Debian's linux-source-6.1, part of it unless --full) through the LD_PRELOAD shim, the
    /// FUSE mount, ext4 on `pmkit attach`, ext2/ext4 on a /dev/shm loop device and tmpfs.
    ///
    /// Needs root, /dev/fuse, e2fsprogs, linux-source-6.1 and the shim (`cargo build --release
    /// -p pmkit-preload`). Rounds: 3. --quick: a generated tree of --files files, one round.
    FsTree(fs::apps::TreeArgs),
    /// Filebench-like loads on the same configurations: dbench, postmark, fs_mark, sqlite3
    /// with synchronous=FULL and pgbench, each with its own rate; N/A where a load forks.
    ///
    /// Needs root, /dev/fuse, e2fsprogs, the shim and the programs (scripts/bench-packages.txt).
    /// Rounds: 2. --quick: sqlite3, fs_mark and postmark (those installed), small counts, one round.
    FsApps(fs::apps::AppsArgs),
    /// Random reads and writes, 64 B to 256 KiB, 1 thread, through a memory mapping of one
    /// file (PMFS thesis Fig. 16): PMFS direct access (`Posix::map`, a file of 2 MiB blocks and
    /// one of 4 KiB blocks, writes persisted) against mmap(MAP_SHARED) + msync(MS_SYNC) on
    /// ext4 on `pmkit attach`, ext2/ext4 on a /dev/shm loop device and tmpfs.
    ///
    /// Needs root, /dev/fuse, e2fsprogs. Rounds: 3. --quick: 64 B and 4 KiB, 8 MiB file,
    /// 100 ms cells, one round.
    FsMap(fs::map::Args),
    /// X-Mem against fast-only, slow-only, first-touch, page hotness, memkind's static ratio and
    /// two oracles (thesis Fig. 24-30), per slow-memory preset and DRAM share of 1/32 to 1/2,
    /// for xgraph's PageRank and BFS and xkv's ETC requests: every time predicted by HMEP's trace simulator (level 3)
    /// from one traced pass and the measured fast-only time.
    ///
    /// Rounds: 3 (of 4 timed passes). --quick: a scale-12 graph, 16 KiB units, 2 presets.
    Xmem(xmem::tiers::Args),
    /// xkv, the MemC3-like key-value store (X-Mem tags: the cuckoo hash and eight slab
    /// classes), serving memcached's text protocol on 127.0.0.1 until killed.
    XkvServe(pmkit_xkv::server::ServeArgs),
    /// xkv in process on the real tier pair (huge pages against 4 KiB pages): an ETC-like
    /// dataset, the level-3 simulator's prediction against wall clock for all fast, all slow
    /// and each tag alone slow or fast, the per-tag benefit ranking, then memcaslap against
    /// xkv-serve on all fast and all slow.
    ///
    /// Rounds: 3. --quick: a 16 MiB dataset, 50000 requests, one round, 5000 memcaslap ops.
    Xkv(xmem::xkv::XkvArgs),
}

fn main() -> std::process::ExitCode {
    pmkit::entry::main("pmkit-bench", || {
        // The benchmarks run servers in process: a client that hangs up must not kill them.
        pmkit::entry::ignore_sigpipe();
        run(Cli::parse().cmd)
    })
}

fn run(cmd: Cmd) -> anyhow::Result<std::process::ExitCode> {
    match cmd {
        Cmd::Protection(a) => blk::figures::protection(a),
        Cmd::WriteScheme(a) => blk::figures::write_scheme(a),
        Cmd::Overview(a) => blk::figures::overview(a),
        Cmd::Emulation(a) => blk::figures::emulation(a),
        Cmd::Attach(a) => blk::attach::run(a),
        Cmd::Nbd(a) => blk::nbd::run(a),
        Cmd::Pmo(a) => obj::run(a),
        Cmd::Atomic(a) => blk::atomic::run(a),
        Cmd::KernelPath(a) => blk::kernel_path::run(a),
        Cmd::Fs(a) => fs::mount::run(a),
        Cmd::FsProtect(a) => fs::protect::run(a),
        Cmd::XmemAlloc(a) => xmem::alloc::run(a),
        Cmd::HmepPlotCalibration(a) => hmep::calibrate::run(a),
        Cmd::HmepValidate(a) => hmep::validate(a),
        Cmd::FsIo(a) => fs::io::run(a),
        Cmd::FsBarrier(a) => fs::io::barrier::run(a),
        Cmd::FsLayers(a) => fs::layers::run(a),
        Cmd::FsTree(a) => fs::apps::run_tree(a),
        Cmd::FsApps(a) => fs::apps::run_apps(a),
        Cmd::FsMap(a) => fs::map::run(a),
        Cmd::Xmem(a) => xmem::tiers::run(a),
        Cmd::XkvServe(a) => pmkit_xkv::server::serve(a),
        Cmd::Xkv(a) => xmem::xkv::bench(a),
    }
}
