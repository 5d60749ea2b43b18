//! `pmkit`: the command-line front end. Each subcommand lives in its own module; this file only
//! parses arguments and dispatches.

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
