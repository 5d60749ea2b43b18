//! Where a daemon's messages go. A daemon must outlive whatever reads its output: `pmkit serve
//! 2>&1 | head -1`, a terminal that hangs up, a mount helper that has exited. Its messages are
//! printed with [`crate::say`] and [`crate::say_err`], which drop what the output no longer
//! takes instead of panicking as `println!` and `eprintln!` do, so the daemon still stops
//! cleanly, as a C daemon's `fprintf` fails quietly; they print in order, at once.
//! `pmkit fs mount --log DEST` (which the mount helper passes) goes further once it serves:
//! [`redirect`] points descriptors 1 and 2 at syslog (so the journal keeps them) or a file.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// `--log`: where the daemon's stdout and stderr go once it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogDest {
    /// Unchanged: the terminal or pipe the command was started with (the default).
    Stderr,
    /// syslog(3), facility daemon, one message per line (the journal keeps them under systemd).
    Syslog,
    /// A file, appended to.
    File(PathBuf),
}

impl std::str::FromStr for LogDest {
    type Err = String;
    fn from_str(s: &str) -> Result<LogDest, String> {
        Ok(match s {
            "stderr" => LogDest::Stderr,
            "syslog" => LogDest::Syslog,
            "" => return Err("stderr, syslog or a file's path".into()),
            p => LogDest::File(PathBuf::from(p)),
        })
    }
}

impl std::fmt::Display for LogDest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogDest::Stderr => f.write_str("stderr"),
            LogDest::Syslog => f.write_str("syslog"),
            LogDest::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Point stdout and stderr at `dest`; `ident` names the lines in syslog.
pub fn redirect(dest: &LogDest, ident: &str) -> std::io::Result<()> {
    match dest {
        LogDest::Stderr => Ok(()),
        LogDest::File(p) => {
            let f = OpenOptions::new().create(true).append(true).open(p)?;
            onto(f.as_raw_fd(), libc::STDOUT_FILENO)?;
            onto(f.as_raw_fd(), libc::STDERR_FILENO)
        }
        LogDest::Syslog => {
            let (read, write) = pipe()?;
            onto(write.as_raw_fd(), libc::STDOUT_FILENO)?;
            onto(write.as_raw_fd(), libc::STDERR_FILENO)?;
            drop(write);
            let ident = CString::new(ident).unwrap_or_default();
            std::thread::Builder::new()
                .name("pmkit-syslog".into())
                .spawn(move || forward_to_syslog(File::from(read), ident))?;
            Ok(())
        }
    }
}

fn forward_to_syslog(from: File, ident: CString) {
    // openlog keeps the pointer: the string lives as long as this thread, which lives as long
    // as the process (it ends only when every writer of the pipe is gone).
    // SAFETY: ident is a valid C string kept alive for every later syslog call (above).
    unsafe { libc::openlog(ident.as_ptr(), libc::LOG_PID, libc::LOG_DAEMON) };
    for line in BufReader::new(from).lines().map_while(Result::ok) {
        let Ok(msg) = CString::new(line) else {
            continue;
        };
        // SAFETY: a constant format with one %s and a valid C string for it.
        unsafe { libc::syslog(libc::LOG_INFO, c"%s".as_ptr(), msg.as_ptr()) };
    }
}

/// Print a line on stdout; a closed output is not an error (see the module's text).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Print a line on stderr; a closed output is not an error (see the module's text).
#[macro_export]
macro_rules! say_err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened by pipe2 and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Make descriptor `target` (1 or 2) refer to `fd`'s open file.
fn onto(fd: RawFd, target: RawFd) -> std::io::Result<()> {
    debug_assert!(target == libc::STDOUT_FILENO || target == libc::STDERR_FILENO);
    // SAFETY: dup2 of an open descriptor onto 1 or 2 (replacing whatever it was) touches no
    // memory; Rust's stdout and stderr write to the numbers, not to saved descriptors.
    if unsafe { libc::dup2(fd, target) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::LogDest;

    #[test]
    fn parses_each_destination() {
        assert_eq!("syslog".parse::<LogDest>(), Ok(LogDest::Syslog));
        assert_eq!("stderr".parse::<LogDest>(), Ok(LogDest::Stderr));
        assert_eq!(
            "/var/log/x".parse::<LogDest>(),
            Ok(LogDest::File("/var/log/x".into()))
        );
        assert!("".parse::<LogDest>().is_err());
    }
}
