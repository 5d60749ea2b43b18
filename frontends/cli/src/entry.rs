//! The `main` of every pmkit executable (`pmkit`, `pmkit-bench`): logging to stderr filtered by
//! `PMKIT_LOG` (default: warnings, and the NBD server's per-connection lines; colour only on a
//! terminal), then the command; an error is printed as `NAME: error: ...` with its causes and
//! exits with status 2.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

/// Set up logging, run `command`, and turn its result into the exit status.
pub fn main(name: &str, command: impl FnOnce() -> anyhow::Result<ExitCode>) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PMKIT_LOG")
                .unwrap_or_else(|_| "warn,fuser=error,pmkit_nbd=info".into()),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    // A command whose reader went away (`pmkit info DEV | head`) ends quietly, as every Unix
    // tool does, instead of panicking in `println!`; the daemons ignore SIGPIPE again
    // ([`daemon`]), so a client that hangs up costs them one EPIPE, not their life.
    set_sigpipe(libc::SIG_DFL);
    match command() {
        Ok(code) => code,
        Err(e) => {
            // Not eprintln!: a daemon's stderr may be gone by now, and that is no reason to panic.
            let _ = writeln!(std::io::stderr(), "{name}: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// For the daemons (`serve`, `attach`, `fs mount`): SIGPIPE ignored ([`ignore_sigpipe`]), so
/// neither a client nor a reader of the output that goes away stops them before they close
/// cleanly; they print with [`crate::say`] and [`crate::say_err`], which drop what a closed
/// output does not take.
pub fn daemon() {
    ignore_sigpipe();
}

/// For servers and daemons: a write to a socket whose peer has gone fails with EPIPE instead
/// of killing the process.
pub fn ignore_sigpipe() {
    set_sigpipe(libc::SIG_IGN);
}

fn set_sigpipe(action: libc::sighandler_t) {
    // SAFETY: SIG_DFL and SIG_IGN are not handlers; setting them runs no code of ours in a
    // signal context.
    unsafe { libc::signal(libc::SIGPIPE, action) };
}
