//! Who holds a region's file: the processes with a `flock` on it, read from `/proc/locks`, with
//! the command line of each, so a refusal can say "in use by pid 4242 (pmkit fs mount ...)"
//! instead of only "in use".
//!
//! `/proc/locks` names a lock's file as `MAJOR:MINOR:INODE` (major and minor in hex, the inode in
//! decimal) and the process that took it. A lock inherited across `fork` keeps the taker's pid,
//! which is the daemon itself for every pmkit command; a taker that has exited while a child
//! keeps the descriptor is reported without a command.

use serde::Serialize;
use std::fs::File;
use std::os::unix::fs::MetadataExt;

/// The most holders listed: a refusal names a few, never a screenful.
pub const MAX_HOLDERS: usize = 8;
/// Characters of a holder's command line kept.
const MAX_COMMAND: usize = 160;

/// A process that holds a lock on a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub pid: u32,
    /// Its command line, arguments joined by spaces; empty when it cannot be read.
    pub command: String,
    /// Whether the lock is exclusive (a writer) or shared (a reader).
    pub exclusive: bool,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}", self.pid)?;
        if !self.command.is_empty() {
            write!(f, " ({})", self.command)?;
        }
        Ok(())
    }
}

/// Say a list of holders in one phrase: "pid 1 (a), pid 2 (b)", or "another process" when
/// `/proc/locks` named none (another mount namespace, or the lock was just dropped).
pub fn describe(holders: &[Holder]) -> String {
    if holders.is_empty() {
        return "another process".into();
    }
    holders
        .iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The processes other than this one holding a `flock` on `file`, at most [`MAX_HOLDERS`].
pub fn of_file(file: &File) -> Vec<Holder> {
    let Ok(meta) = file.metadata() else {
        return vec![];
    };
    let Ok(table) = std::fs::read_to_string("/proc/locks") else {
        return vec![];
    };
    let me = std::process::id();
    let mut out: Vec<Holder> = Vec::new();
    for line in table.lines() {
        let Some((pid, exclusive)) = parse_line(line, meta.dev(), meta.ino()) else {
            continue;
        };
        if pid == me || out.iter().any(|h| h.pid == pid) {
            continue;
        }
        out.push(Holder {
            pid,
            command: command_of(pid),
            exclusive,
        });
        if out.len() == MAX_HOLDERS {
            break;
        }
    }
    out
}

/// One line of `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 1911 fe:00:5310428 0 EOF`; a lock
/// someone waits for has `->` before its kind): the pid and whether the lock is exclusive,
/// when it is a granted `flock` on the file `dev`/`ino`.
fn parse_line(line: &str, dev: u64, ino: u64) -> Option<(u32, bool)> {
    let mut f = line.split_whitespace().skip(1);
    let mut kind = f.next()?;
    if kind == "->" {
        return None;
    }
    if kind.ends_with(':') {
        kind = f.next()?;
    }
    if kind != "FLOCK" {
        return None;
    }
    let _advisory = f.next()?;
    let exclusive = f.next()? == "WRITE";
    let pid: u32 = f.next()?.parse().ok()?;
    let mut id = f.next()?.split(':');
    let major = u64::from_str_radix(id.next()?, 16).ok()?;
    let minor = u64::from_str_radix(id.next()?, 16).ok()?;
    let inode: u64 = id.next()?.parse().ok()?;
    (inode == ino && major == dev_major(dev) && minor == dev_minor(dev)).then_some((pid, exclusive))
}

fn dev_major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)
}

fn dev_minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0xff)
}

fn command_of(pid: u32) -> String {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return String::new();
    };
    let mut s: String = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    if s.chars().count() > MAX_COMMAND {
        s = s.chars().take(MAX_COMMAND - 3).collect::<String>() + "...";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_proc_locks_are_read() {
        let dev = (0xfe << 8) | 0x01; // major 0xfe, minor 1 in the old encoding
        assert_eq!(
            parse_line(
                "1: FLOCK  ADVISORY  WRITE 1911 fe:01:5310428 0 EOF",
                dev,
                5310428
            ),
            Some((1911, true))
        );
        assert_eq!(
            parse_line(
                "2: FLOCK  ADVISORY  READ 7 fe:01:5310428 0 EOF",
                dev,
                5310428
            ),
            Some((7, false))
        );
        // another inode, a POSIX lock, a waiter
        assert_eq!(
            parse_line(
                "1: FLOCK  ADVISORY  WRITE 1911 fe:01:5310429 0 EOF",
                dev,
                5310428
            ),
            None
        );
        assert_eq!(
            parse_line(
                "1: POSIX  ADVISORY  WRITE 1911 fe:01:5310428 0 EOF",
                dev,
                5310428
            ),
            None
        );
        assert_eq!(
            parse_line(
                "1: -> FLOCK  ADVISORY  WRITE 9 fe:01:5310428 0 EOF",
                dev,
                5310428
            ),
            None
        );
        assert_eq!(parse_line("garbage", dev, 1), None);
    }

    /// A lock taken by a child process is found and named with its command line.
    #[test]
    fn a_child_holding_the_lock_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let mut child = std::process::Command::new("flock")
            .arg(&path)
            .args(["sleep", "30"])
            .spawn()
            .unwrap();
        let file = File::open(&path).unwrap();
        let mut found = vec![];
        for _ in 0..200 {
            found = of_file(&file);
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, child.id());
        assert!(found[0].exclusive);
        assert!(found[0].command.contains("flock"), "{found:?}");
        assert!(describe(&found).starts_with(&format!("pid {} (flock", child.id())));
    }
}
