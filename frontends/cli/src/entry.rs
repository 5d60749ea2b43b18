//! The `main` of every pmkit executable (`pmkit`, `pmkit-bench`): logging to stderr filtered by
//! `PMKIT_LOG` (default: warnings, and the NBD server's per-connection lines), then the command;
//! an error is printed as `NAME: error: ...` with its causes and exits with status 2.

use std::process::ExitCode;

/// Set up logging, run `command`, and turn its result into the exit status.
pub fn main(name: &str, command: impl FnOnce() -> anyhow::Result<ExitCode>) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PMKIT_LOG")
                .unwrap_or_else(|_| "warn,fuser=error,pmkit_nbd=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match command() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{name}: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
