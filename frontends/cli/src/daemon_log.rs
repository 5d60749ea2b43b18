//! Where a daemon's messages go once it runs on its own (`pmkit fs mount --log DEST`, which the
//! mount helper passes): the helper that started it has exited, so its stdout and stderr, pipes
//! to that helper, would be gone. Before that moment the messages reach whoever ran the command;
//! after it, [`redirect`] points descriptors 1 and 2 at syslog (so the journal keeps them) or
//! at a file.

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
            onto_stdout_and_stderr(f.as_raw_fd())
        }
        LogDest::Syslog => {
            let (read, write) = pipe()?;
            onto_stdout_and_stderr(write.as_raw_fd())?;
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

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened by pipe2 and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn onto_stdout_and_stderr(fd: RawFd) -> std::io::Result<()> {
    for target in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: dup2 of an open descriptor onto 1 and 2 (replacing whatever they were) touches
        // no memory; Rust's stdout and stderr write to the numbers, not to saved descriptors.
        if unsafe { libc::dup2(fd, target) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
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
