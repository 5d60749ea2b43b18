//! `pmkit bench ...`: the benchmarks are their own binary, `pmkit-bench` (crate `bench/`), so the
//! product binary carries none of their code or dependencies (plots, fonts, PMDK loading). This
//! command replaces itself with `pmkit-bench` and the same arguments.

use anyhow::{bail, Result};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

/// Everything after `bench`, passed on unread (`--help` included).
#[derive(clap::Args)]
pub(crate) struct Args {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    /// The benchmark and its options, passed to pmkit-bench (`pmkit bench --help` lists them).
    args: Vec<OsString>,
}

pub(crate) const BENCH_BIN: &str = "pmkit-bench";

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    exec("pmkit bench", &a.args)
}

/// Replace this process with `pmkit-bench ARGS`, named `name` in its messages.
pub(crate) fn exec(name: &str, args: &[OsString]) -> Result<ExitCode> {
    let exe = find(name)?;
    let mut c = Command::new(&exe);
    c.arg0(name).args(args);
    // `bench nbd` starts this binary's `serve`.
    if let Ok(me) = std::env::current_exe() {
        c.env("PMKIT_BIN", me);
    }
    let e = c.exec();
    bail!("cannot run {}: {e}", exe.display())
}

/// Run `pmkit-bench ARGS` and wait for it (a command that needs one of its drawings),
/// named `name` in its messages.
pub(crate) fn run_child(name: &str, args: &[OsString]) -> Result<()> {
    let exe = find(name)?;
    let status = Command::new(&exe).arg0(name).args(args).status()?;
    if !status.success() {
        bail!("{} {args:?} failed ({status})", exe.display());
    }
    Ok(())
}

/// The `pmkit-bench` binary next to this pmkit or on PATH, or what to do to get one.
fn find(name: &str) -> Result<std::path::PathBuf> {
    match pmkit::sibling::find(BENCH_BIN) {
        Some(exe) => Ok(exe),
        None => bail!(
            "`{name}` runs the {BENCH_BIN} binary, which is neither next to this pmkit nor on \
             PATH: build it with `cargo build --release -p pmkit-bench`"
        ),
    }
}
