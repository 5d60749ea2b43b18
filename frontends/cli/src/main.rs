//! `pmkit`: the command-line front end. Each subcommand lives in its own module; this file only
//! parses arguments and dispatches. What the commands share with `pmkit-bench` is the `pmkit`
//! library (src/lib.rs); `pmkit bench` runs the `pmkit-bench` binary.

#![deny(unsafe_op_in_unsafe_fn)]

mod attach;
mod bench;
mod blk;
mod format_target;
mod fs;
mod fs_mount;
mod fs_offline;
mod fs_serve;
mod generate;
mod hmep;
mod identify;
mod mount_helper;
mod obj;
mod probe;
mod serve;
mod serve_access;
mod xmem;
mod xmem_profile;
mod xmem_run;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "pmkit",
    version,
    long_version = long_version(),
    after_long_help = generate::EXIT_STATUS,
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
    /// Describe a block device from its superblock (opens it read-only, changes nothing).
    Info(blk::InfoArgs),
    /// Verify a block device (superblock, checksums): exit 0 when clean, 1 otherwise. Opens it
    /// read-only unless --mark-clean.
    Check(blk::CheckArgs),
    /// Persistent memory objects (PMO): create pools; list, inspect, dump and check them
    /// (read-only); make, write and delete objects.
    Obj(obj::Args),
    /// PMFS, a crash-consistent file system on PM: mkfs, mount, umount, info, check and repair
    /// (docs/fs.md).
    Fs(fs::Args),
    /// X-Mem (docs/xmem.md): profile a program's accesses per data structure (valgrind
    /// lackey), plan a fast-tier budget from the profile, describe a profile.
    Xmem(xmem::Args),
    /// HMEP (docs/hmep.md): slower memory emulated by a model on machines without it: the
    /// presets and their sources, this machine's calibration, a preset's ns per access.
    Hmep(hmep::Args),
    /// Show this machine's PM-relevant CPU features and measure each persistence primitive and
    /// protection window.
    Probe(probe::Args),
    /// Serve the device as a kernel block device (FUSE file + loop device), optionally with a
    /// file system made and mounted on it. Runs until `pmkit detach` or SIGINT/SIGTERM; while
    /// the file system is busy, a signal changes nothing (the holders are named on stderr) and
    /// the device stays served.
    Attach(attach::AttachArgs),
    /// Undo `pmkit attach`: unmount, remove the loop device, unmount FUSE, close the device.
    /// Nothing is forced: if a process still uses the file system (working directory, open
    /// file or mapping under the mountpoint) or the loop device, detach changes nothing, names
    /// those processes (PID and command), exits 1, and the device stays attached; --lazy
    /// unmounts lazily instead. After a dead `pmkit attach` (kill -9) it clears the leftovers.
    Detach(attach::DetachArgs),
    /// Export a block device over NBD (unix socket or TCP); with no PATH, a 1 GiB emulated PM
    /// device in /dev/shm. Runs until SIGINT/SIGTERM, then finishes requests and closes cleanly.
    Serve(Box<serve::ServeArgs>),
    /// Benchmarks: protection, write-scheme, overview, emulation, attach, nbd, pmo, atomic (each
    /// prints a table, --json for machines, --plot FILE for people). Runs the pmkit-bench binary
    /// with these arguments; `pmkit bench --help` lists them.
    #[command(disable_help_flag = true)]
    Bench(bench::Args),
    /// Write the man pages (`generate man DIR`) or print a shell's completions (`generate
    /// completions bash`), made from these command definitions; install scripts run it.
    Generate(generate::Args),
}

/// `--version`: the release and the on-media format versions it reads and writes (made once,
/// at parse; clap keeps a `&'static str`).
fn long_version() -> &'static str {
    let s = format!(
        "{}\non-media formats: PMBD device {}, PMFS {} (reads {} and up), PMO pool {}",
        env!("CARGO_PKG_VERSION"),
        pmkit_blk::superblock::VERSION,
        pmkit_fs::layout::VERSION,
        pmkit_fs::layout::OLDEST_VERSION,
        pmkit_obj::layout::VERSION
    );
    Box::leak(s.into_boxed_str())
}

fn main() -> std::process::ExitCode {
    // Installed as /sbin/mount.fuse.pmkit too (a link), mount(8)'s helper.
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = std::path::Path::new(&argv0).file_name().unwrap_or_default();
    if mount_helper::NAMES.iter().any(|n| name == *n) {
        return mount_helper::main();
    }
    pmkit::entry::main("pmkit", || match Cli::parse().cmd {
        Cmd::Create(a) => blk::create(a),
        Cmd::Info(a) => blk::info(a),
        Cmd::Check(a) => blk::check(a),
        Cmd::Probe(a) => probe::run(a),
        Cmd::Attach(a) => attach::run_attach(a),
        Cmd::Detach(a) => attach::run_detach(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Obj(a) => obj::run(a),
        Cmd::Fs(a) => fs::run(a),
        Cmd::Xmem(a) => xmem::run(a),
        Cmd::Hmep(a) => hmep::run(a),
        Cmd::Serve(a) => serve::run(*a),
        Cmd::Generate(a) => generate::run(a, Cli::command()),
    })
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every argument and option of every command says what it is in `--help` (and so in the
    /// man pages made from these definitions).
    #[test]
    fn every_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if id == "help" || id == "version" || a.is_hide_set() {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "pmkit", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }

    #[test]
    fn version_names_the_on_media_formats() {
        let v = Cli::command().render_long_version();
        assert!(
            v.contains("PMBD device 1")
                && v.contains("PMFS 8 (reads 2 and up)")
                && v.contains("PMO pool 1"),
            "{v}"
        );
    }
}
