//! `pmkit`: the command-line front end. Each subcommand lives in its own module; this file only
//! parses arguments and dispatches.

mod blk;
mod obj;
mod probe;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "pmkit", version, about = "A persistent-memory storage stack in user space")]
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
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PMKIT_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Create(a) => blk::create(a),
        Cmd::Info(a) => blk::info(a),
        Cmd::Check(a) => blk::check(a),
        Cmd::Probe(a) => probe::run(a),
        Cmd::Obj(a) => obj::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pmkit: error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
