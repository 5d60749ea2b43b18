//! Who keeps a mount or a block device busy, read from /proc the way `fuser -m` does: a process
//! holds a file system when its working directory, root, executable, an open file or a mapping
//! lies on it; it holds a block device when it has the device node open.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// One process and how it holds the mount or device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub comm: String,
    /// "cwd", "root", "exe", "open file", "mmap", "open device".
    pub how: Vec<&'static str>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PID {} ({}): {}",
            self.pid,
            self.comm,
            self.how.join(", ")
        )
    }
}

/// Format holders as "PID 12 (sh): cwd; PID 40 (dd): open file".
pub fn describe(h: &[Holder]) -> String {
    if h.is_empty() {
        return "no process found in /proc (a lazily unmounted file system, a bind mount or \
                another mount namespace may hold it)"
            .into();
    }
    h.iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Linux's `dev_t` split (glibc's `gnu_dev_major`/`gnu_dev_minor`).
fn major_minor(dev: u64) -> (u64, u64) {
    (
        ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff),
        ((dev >> 12) & 0xffff_ff00) | (dev & 0xff),
    )
}

fn pids() -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter(|&p| p != me)
                .collect()
        })
        .unwrap_or_default()
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Processes using the file system mounted at `mountpoint`. Nothing here asks that file system
/// (a FUSE daemon that cannot answer would hold the question, and the command asking, for
/// good): the mount is found in mountinfo, open files by the mount id in their `fdinfo`, the
/// working directory, root and executable by the path their link names, mappings by the
/// device in `maps`.
pub fn of_mount(mountpoint: &Path) -> Vec<Holder> {
    let Some((mnt_id, (maj, min))) = mount_of(mountpoint) else {
        return vec![];
    };
    let map_dev = format!("{maj:02x}:{min:02x}");
    let under = |link: String| std::fs::read_link(link).is_ok_and(|p| p.starts_with(mountpoint));
    let mut out = vec![];
    for pid in pids() {
        let base = format!("/proc/{pid}");
        let mut how = vec![];
        for (link, what) in [("cwd", "cwd"), ("root", "root"), ("exe", "exe")] {
            if under(format!("{base}/{link}")) {
                how.push(what);
            }
        }
        if let Ok(fds) = std::fs::read_dir(format!("{base}/fdinfo")) {
            let on_it = |e: std::fs::DirEntry| {
                std::fs::read_to_string(e.path()).is_ok_and(|info| {
                    info.lines()
                        .any(|l| l.strip_prefix("mnt_id:").map(str::trim) == Some(&mnt_id))
                })
            };
            if fds.flatten().any(on_it) {
                how.push("open file");
            }
        }
        if let Ok(maps) = std::fs::read_to_string(format!("{base}/maps")) {
            if maps
                .lines()
                .any(|l| l.split_whitespace().nth(3) == Some(map_dev.as_str()))
            {
                how.push("mmap");
            }
        }
        if !how.is_empty() {
            out.push(Holder {
                pid,
                comm: comm(pid),
                how,
            });
        }
    }
    out
}

/// The mount at `mountpoint` in this namespace (the last one, if several are stacked): its
/// mount id, and its device's major and minor numbers.
fn mount_of(mountpoint: &Path) -> Option<(String, (u64, u64))> {
    let info = std::fs::read("/proc/self/mountinfo").ok()?;
    let want = escape(mountpoint);
    let line = info
        .split(|&b| b == b'\n')
        .rfind(|l| l.split(|&b| b == b' ').nth(4) == Some(want.as_slice()))?;
    let line = String::from_utf8_lossy(line);
    let f: Vec<&str> = line.split(' ').collect();
    let (maj, min) = f.get(2)?.split_once(':')?;
    Some((
        f.first()?.to_string(),
        (maj.parse().ok()?, min.parse().ok()?),
    ))
}

/// A path as mountinfo writes it: space, tab, newline and backslash as `\ooo`.
fn escape(p: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    for &b in p.as_os_str().as_bytes() {
        match b {
            b' ' | b'\t' | b'\n' | b'\\' => out.extend(format!("\\{b:03o}").bytes()),
            _ => out.push(b),
        }
    }
    out
}

/// Processes with the block device `dev` (e.g. /dev/loop3) open.
pub fn of_device(dev: &Path) -> Vec<Holder> {
    let Ok(rdev) = std::fs::metadata(dev).map(|m| m.rdev()) else {
        return vec![];
    };
    let is_it = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_block_device() && m.rdev() == rdev
        })
    };
    pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .is_ok_and(|fds| fds.flatten().any(|e| is_it(&e.path())))
        })
        .map(|pid| Holder {
            pid,
            comm: comm(pid),
            how: vec!["open device"],
        })
        .collect()
}

/// Whether a file system (or another exclusive user) has claimed the block device: an
/// `O_EXCL` open of a block device fails with EBUSY exactly then.
pub fn claimed(dev: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    matches!(
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(dev),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY)
    )
}

/// Where the block device `dev` is mounted in this namespace (per /proc/self/mountinfo).
pub fn mounts_of(dev: &Path) -> Vec<String> {
    let Ok(rdev) = std::fs::metadata(dev).map(|m| m.rdev()) else {
        return vec![];
    };
    let (maj, min) = major_minor(rdev);
    let want = format!("{maj}:{min}");
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(2) == Some(want.as_str()))
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .collect()
}
