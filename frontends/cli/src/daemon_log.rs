//! Where a daemon's messages go. A daemon must outlive whatever reads its output: `pmkit serve
//! 2>&1 | head -1`, a terminal that hangs up, a mount helper that has exited. [`shield`] puts a
//! pipe of its own in front of stdout and stderr, drained by a thread that drops what the real
//! output no longer takes, so a print never fails (Rust's `eprintln!` panics when it does) and
//! the daemon still stops cleanly, as a C daemon's `fprintf` fails quietly.
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

/// Output that cannot fail, until dropped: then the real stdout and stderr are back (for the
/// command's last words) and everything printed before has been passed on.
pub struct Shield {
    /// (descriptor, its original open file) for 1 and 2.
    saved: Vec<(RawFd, OwnedFd)>,
    drains: Vec<std::thread::JoinHandle<()>>,
}

impl Shield {
    /// A guard that shields nothing (where the pipes could not be made).
    pub fn none() -> Shield {
        Shield {
            saved: Vec::new(),
            drains: Vec::new(),
        }
    }
}

/// Shield stdout and stderr (see the module's text).
pub fn shield() -> std::io::Result<Shield> {
    let mut s = Shield {
        saved: Vec::with_capacity(2),
        drains: Vec::with_capacity(2),
    };
    for target in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: dup of descriptor 1 or 2; the copy is owned by the OwnedFd made from it.
        let orig = unsafe { libc::fcntl(target, libc::F_DUPFD_CLOEXEC, 3) };
        if orig < 0 {
            continue; // closed already: Rust's stdout and stderr ignore EBADF
        }
        // SAFETY: just opened by fcntl, owned by nothing else.
        let orig = unsafe { OwnedFd::from_raw_fd(orig) };
        let (read, write) = pipe()?;
        let out = File::from(orig.try_clone()?);
        onto(write.as_raw_fd(), target)?;
        s.saved.push((target, orig));
        s.drains.push(
            std::thread::Builder::new()
                .name("pmkit-output".into())
                .spawn(move || drain(File::from(read), out))?,
        );
    }
    debug_assert_eq!(s.saved.len(), s.drains.len());
    Ok(s)
}

/// Pass `from` on to `to` until every writer of `from` is gone; after `to` fails once (its
/// reader left), drop the rest.
fn drain(mut from: File, mut to: File) {
    use std::io::{Read, Write};
    let mut buf = [0u8; 4096];
    let mut open = true;
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            return;
        }
        open = open && to.write_all(&buf[..n]).is_ok();
    }
}

impl Drop for Shield {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // Putting the originals back closes the pipes' last writers: the drains end.
        for (target, orig) in &self.saved {
            let _ = onto(orig.as_raw_fd(), *target);
        }
        for d in self.drains.drain(..) {
            let _ = d.join();
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
