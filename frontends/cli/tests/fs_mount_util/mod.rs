//! Helpers of the FUSE mount tests: the daemon as a child process, a canonical snapshot of a
//! directory tree (names, kinds, modes, sizes, contents, link counts, xattrs), and random POSIX
//! operations run the same way on two trees.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn pmkit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pmkit"))
}

pub(crate) fn run_ok(args: &[&str]) -> String {
    let o = pmkit().args(args).output().unwrap();
    let t = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "pmkit {args:?}: {t}");
    t
}

/// Root and /dev/fuse: what a FUSE mount needs. Missing, the test is skipped, except in CI
/// (CI set), where it fails saying why.
pub(crate) fn can_run() -> bool {
    pmkit_testkit::need_root("a FUSE mount")
        && pmkit_testkit::need_file("/dev/fuse", "a FUSE mount")
}

/// The FUSE transports a mount test runs over: `dev` (/dev/fuse), and `uring` (FUSE over
/// io_uring) where the kernel offers it (/sys/module/fuse/parameters/enable_uring = Y; in CI,
/// where scripts/test.sh turns it on, its absence fails the test). `PMKIT_FS_TRANSPORT=dev` or
/// `uring` runs one only (and is the transport of the tests that name none).
pub(crate) fn transports() -> Vec<&'static str> {
    let uring = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|s| s.trim() == "Y");
    match std::env::var("PMKIT_FS_TRANSPORT").as_deref() {
        Ok("dev") => return vec!["dev"],
        Ok("uring") => return vec!["uring"],
        _ => {}
    }
    if uring {
        return vec!["dev", "uring"];
    }
    let why = "FUSE over io_uring is off (echo Y > /sys/module/fuse/parameters/enable_uring)";
    assert!(std::env::var_os("CI").is_none(), "{why}");
    eprintln!("the uring transport skipped: {why}");
    vec!["dev"]
}

/// Run `test` once over each of [`transports`], naming the transport in the output first.
pub(crate) fn each_transport(test: fn(&str)) {
    for t in transports() {
        eprintln!("transport {t}");
        test(t);
    }
}

/// A scratch pool in /dev/shm and a mount point.
pub(crate) struct Scratch {
    pub dir: tempfile::TempDir,
    pub pool: PathBuf,
    pub mnt: PathBuf,
}

/// A scratch pool of `size` made with mkfs's defaults, as a user makes one.
pub(crate) fn scratch(size: &str) -> Scratch {
    let dir = pmkit_testkit::scratch_named("pmkit-fsmount");
    let pool = dir.path().join("pool");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    run_ok(&["fs", "mkfs", pool.to_str().unwrap(), "--size", size]);
    Scratch { dir, pool, mnt }
}

/// A running `pmkit fs mount`.
pub(crate) struct Daemon {
    pub child: Child,
    pub mnt: PathBuf,
    pub stderr: PathBuf,
    /// Detach the mount when dropped (not after a kill -9 whose stale mount is the point).
    detach: bool,
}

impl Daemon {
    pub(crate) fn start(s: &Scratch, extra: &[&str]) -> Daemon {
        Daemon::start_with_env(s, extra, &[])
    }

    /// [`Daemon::start`] with variables added to the daemon's environment.
    pub(crate) fn start_with_env(s: &Scratch, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let stderr = s
            .dir
            .path()
            .join(format!("daemon-{}.err", rand_u64() % 1_000_000));
        // Tests that name no transport get PMKIT_FS_TRANSPORT's, if set (else auto).
        let env_t = std::env::var("PMKIT_FS_TRANSPORT").ok();
        let mut extra: Vec<&str> = extra.to_vec();
        if let Some(t) = env_t.as_deref().filter(|_| !extra.contains(&"--transport")) {
            extra.extend(["--transport", t]);
        }
        let mut child = pmkit()
            .args([
                "fs",
                "mount",
                s.pool.to_str().unwrap(),
                s.mnt.to_str().unwrap(),
            ])
            .args(&extra)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) if l.starts_with("ready: serving") => {
                // The transport asked for is the one serving.
                let asked = extra.windows(2).find(|w| w[0] == "--transport");
                match asked.map(|w| w[1]) {
                    Some("uring") => assert!(l.contains("over FUSE io_uring"), "{l}"),
                    Some("dev") => assert!(l.contains("over /dev/fuse"), "{l}"),
                    _ => {}
                }
            }
            r => panic!(
                "daemon not ready ({r:?}): {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            ),
        }
        Daemon {
            child,
            mnt: s.mnt.clone(),
            stderr,
            detach: true,
        }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// `pmkit fs umount`, then the daemon must have exited 0.
    pub(crate) fn umount(mut self) -> String {
        let out = run_ok(&["fs", "umount", self.mnt.to_str().unwrap()]);
        let st = self.child.wait().unwrap();
        assert!(st.success(), "daemon exit {st:?}: {}", self.log());
        out
    }

    /// Wait for the daemon to exit (after a signal); its status.
    pub(crate) fn wait(mut self, limit: Duration) -> std::process::ExitStatus {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(t.elapsed() < limit, "daemon did not exit: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Daemon {
    /// kill -9 the daemon and reap it, leaving its (now stale) mount in place.
    pub(crate) fn kill_9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.detach = false;
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if !self.detach {
            return;
        }
        let c = CString::new(self.mnt.as_os_str().as_bytes()).unwrap();
        // SAFETY: detaching our own test mount (if still there) so no mount outlives the test.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Snap {
    Dir {
        mode: u32,
    },
    File {
        mode: u32,
        nlink: u64,
        data: Vec<u8>,
        xattrs: BTreeMap<String, Vec<u8>>,
    },
    Symlink(PathBuf),
    /// A FIFO (the only special file the operations make).
    Fifo {
        mode: u32,
        nlink: u64,
    },
}

fn xattrs(p: &Path) -> BTreeMap<String, Vec<u8>> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 4096];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(
        n >= 0,
        "listxattr {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    names.truncate(n as usize);
    let mut out = BTreeMap::new();
    // the virtual `user.pmkit.*` xattrs (the atomic flag) have no counterpart in tmpfs
    let real = |n: &&[u8]| !n.is_empty() && !n.starts_with(b"user.pmkit.");
    for name in names.split(|&b| b == 0).filter(real) {
        let cn = CString::new(name).unwrap();
        let mut v = vec![0u8; 4096];
        // SAFETY: as above.
        let m = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(m >= 0, "getxattr: {}", std::io::Error::last_os_error());
        v.truncate(m as usize);
        out.insert(String::from_utf8_lossy(name).into_owned(), v);
    }
    out
}

/// Every path under `root` (relative), with what it is.
/// Every xattr name `p` lists, virtual ones included.
pub(crate) fn xattr_names(p: &Path) -> Vec<String> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 4096];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "listxattr: {}", std::io::Error::last_os_error());
    names.truncate(n as usize);
    let names = names.split(|&b| b == 0).filter(|n| !n.is_empty());
    names
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}

/// One xattr's value, or the errno.
pub(crate) fn get_xattr(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let (c, cn) = (
        CString::new(p.as_os_str().as_bytes()).unwrap(),
        CString::new(name).unwrap(),
    );
    let mut v = vec![0u8; 256];
    // SAFETY: the buffer is valid for its length.
    let m = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
    errno_of(m.min(0) as i32)?;
    v.truncate(m as usize);
    Ok(v)
}

/// Set (`Some`) or remove (`None`) an xattr; the errno on failure.
pub(crate) fn set_xattr(p: &Path, name: &str, value: Option<&[u8]>) -> Result<(), i32> {
    let (c, cn) = (
        CString::new(p.as_os_str().as_bytes()).unwrap(),
        CString::new(name).unwrap(),
    );
    // SAFETY: valid C strings and a valid value buffer.
    errno_of(unsafe {
        match value {
            Some(v) => libc::lsetxattr(c.as_ptr(), cn.as_ptr(), v.as_ptr().cast(), v.len(), 0),
            None => libc::lremovexattr(c.as_ptr(), cn.as_ptr()),
        }
    })
}

pub(crate) fn snapshot(root: &Path) -> BTreeMap<String, Snap> {
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            let p = root.join(&r);
            let m = std::fs::symlink_metadata(&p).unwrap();
            let s = if m.is_dir() {
                todo.push(r.clone());
                Snap::Dir {
                    mode: m.mode() & 0o7777,
                }
            } else if m.file_type().is_symlink() {
                Snap::Symlink(std::fs::read_link(&p).unwrap())
            } else if std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()) {
                Snap::Fifo {
                    mode: m.mode() & 0o7777,
                    nlink: m.nlink(),
                }
            } else {
                Snap::File {
                    mode: m.mode() & 0o7777,
                    nlink: m.nlink(),
                    data: std::fs::read(&p).unwrap(),
                    xattrs: xattrs(&p),
                }
            };
            out.insert(r.to_string_lossy().into_owned(), s);
        }
    }
    out
}

/// A small deterministic generator (xorshift64*).
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Write(String, u64, usize, u8),
    Truncate(String, u64),
    Mkdir(String),
    Rmdir(String),
    Unlink(String),
    Rename(String, String, u32),
    Symlink(String, String),
    Link(String, String),
    Chmod(String, u32),
    SetXattr(String, String, u8),
    RemoveXattr(String, String),
    Mkfifo(String),
    /// copy_file_range(2): from (path, offset) to (path, offset), length.
    Copy(String, u64, String, u64, usize),
}

const NAMES: [&str; 8] = ["a", "b", "c", "d0", "d1", "d0/e", "d0/f", "d1/g"];

pub(crate) fn random_op(r: &mut Rng) -> Op {
    let mut name = || NAMES[r.below(NAMES.len() as u64) as usize].to_string();
    let (a, b) = (name(), name());
    match r.below(14) {
        12 => Op::Mkfifo(a),
        13 => Op::Copy(
            a,
            r.below(9000),
            b,
            r.below(9000),
            r.below(12_000) as usize + 1,
        ),
        0..=2 => Op::Write(
            a,
            r.below(9000),
            r.below(6000) as usize + 1,
            r.below(250) as u8,
        ),
        3 => Op::Truncate(a, r.below(10_000)),
        4 => Op::Mkdir(a),
        5 => Op::Rmdir(a),
        6 => Op::Unlink(a),
        7 => {
            let flags = [0, 0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE][r.below(4) as usize];
            Op::Rename(a, b, flags)
        }
        8 => Op::Symlink(a, b),
        9 => Op::Link(a, b),
        10 => Op::Chmod(a, [0o600, 0o644, 0o755, 0o1777][r.below(4) as usize]),
        _ => {
            let x = format!("user.x{}", r.below(3));
            if r.below(3) == 0 {
                Op::RemoveXattr(a, x)
            } else {
                Op::SetXattr(a, x, r.below(250) as u8)
            }
        }
    }
}

fn c(root: &Path, rel: &str) -> CString {
    CString::new(root.join(rel).as_os_str().as_bytes()).unwrap()
}

fn errno_of(r: i32) -> Result<(), i32> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    }
}

fn io(r: std::io::Result<()>) -> Result<(), i32> {
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// Run `op` on the tree at `root`: Ok, or the errno.
pub(crate) fn apply(root: &Path, op: &Op) -> Result<(), i32> {
    match op {
        Op::Write(p, off, len, seed) => io((|| {
            // O_NONBLOCK: opening a FIFO for writing fails (ENXIO, no reader) instead of
            // waiting for a reader; regular files ignore it.
            let f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(false)
                .custom_flags(libc::O_NONBLOCK)
                .open(root.join(p))?;
            let data: Vec<u8> = (0..*len).map(|i| seed.wrapping_add(i as u8) | 1).collect();
            f.write_all_at(&data, *off)
        })()),
        Op::Truncate(p, n) => io(std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(root.join(p))
            .and_then(|f| f.set_len(*n))),
        Op::Mkdir(p) => io(std::fs::create_dir(root.join(p))),
        Op::Rmdir(p) => io(std::fs::remove_dir(root.join(p))),
        Op::Unlink(p) => io(std::fs::remove_file(root.join(p))),
        Op::Rename(a, b, flags) => {
            let (a, b) = (c(root, a), c(root, b));
            // SAFETY: valid NUL-terminated paths.
            errno_of(unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    *flags,
                )
            })
        }
        Op::Symlink(p, target) => io(std::os::unix::fs::symlink(target, root.join(p))),
        Op::Link(a, b) => io(std::fs::hard_link(root.join(a), root.join(b))),
        Op::Chmod(p, mode) => {
            let p = c(root, p);
            // SAFETY: a valid path; fchmodat without following a final symlink is refused on
            // Linux, so plain chmod (following) on both trees alike.
            errno_of(unsafe { libc::chmod(p.as_ptr(), *mode) })
        }
        Op::SetXattr(p, name, v) => {
            let (p, n) = (c(root, p), CString::new(name.as_str()).unwrap());
            let val = vec![*v; 1 + *v as usize % 40];
            // SAFETY: valid path, name and value buffer.
            errno_of(unsafe {
                libc::lsetxattr(p.as_ptr(), n.as_ptr(), val.as_ptr().cast(), val.len(), 0)
            })
        }
        Op::Mkfifo(p) => {
            let p = c(root, p);
            // SAFETY: a valid path.
            errno_of(unsafe { libc::mkfifo(p.as_ptr(), 0o640) })
        }
        Op::RemoveXattr(p, name) => {
            let (p, n) = (c(root, p), CString::new(name.as_str()).unwrap());
            // SAFETY: valid path and name.
            errno_of(unsafe { libc::lremovexattr(p.as_ptr(), n.as_ptr()) })
        }
        Op::Copy(a, from, b, to, len) => io((|| {
            let open = |p: &str, write: bool| {
                std::fs::OpenOptions::new()
                    .read(!write)
                    .write(write)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(root.join(p))
            };
            let (src, dst) = (open(a, false)?, open(b, true)?);
            let (mut i, mut o) = (*from as i64, *to as i64);
            // SAFETY: open descriptors and offsets of our own.
            let r = unsafe {
                libc::copy_file_range(src.as_raw_fd(), &mut i, dst.as_raw_fd(), &mut o, *len, 0)
            };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })()),
    }
}

/// `pmkit fs check` on the scratch pool (not mounted) says it is clean.
pub(crate) fn check_clean(s: &Scratch) {
    let out = run_ok(&["fs", "check", s.pool.to_str().unwrap()]);
    assert!(out.contains("clean") && !out.contains("NOT clean"), "{out}");
}

/// How many requests of kind `op` (the statistics' name) the daemon answered, from the file
/// `--stats` wrote at unmount; 0 when it answered none.
pub(crate) fn requests(stats: &Path, op: &str) -> u64 {
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(stats).unwrap()).unwrap();
    j["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["op"] == op)
        .map_or(0, |r| r["ops"].as_u64().unwrap())
}
