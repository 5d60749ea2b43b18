//! Helpers for the `pmkit attach` tests: run `pmkit attach` (as root, with /dev/fuse and
//! e2fsprogs; in CI their absence fails the test), wait for it, detach, fsck.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
pub(crate) const PMKIT: &str = env!("CARGO_BIN_EXE_pmkit");

pub(crate) fn can_run() -> bool {
    pmkit_testkit::need_root("pmkit attach")
        && pmkit_testkit::need_file("/dev/fuse", "pmkit attach")
        && pmkit_testkit::need_tool(&["mkfs.ext4"])
}

pub(crate) fn pmkit(args: &[&str]) -> std::process::Output {
    Command::new(PMKIT).args(args).output().expect("run pmkit")
}

pub(crate) fn ok(args: &[&str]) -> String {
    let o = pmkit(args);
    assert!(
        o.status.success(),
        "pmkit {args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// A running `pmkit attach`, up once it printed its detach hint.
pub(crate) struct Attached {
    pub child: Child,
    pub out: String,
    /// Everything `pmkit attach` wrote to stderr so far.
    pub err: Arc<Mutex<String>>,
}

/// `pmkit attach PM EXTRA...`, with `--transport $PMKIT_ATTACH_TRANSPORT` when that is set
/// (so the same tests run over each FUSE transport) and EXTRA names none.
pub(crate) fn attach(pm: &Path, extra: &[&str]) -> Attached {
    let transport: Vec<String> = std::env::var("PMKIT_ATTACH_TRANSPORT")
        .ok()
        .filter(|_| !extra.contains(&"--transport"))
        .map(|t| vec!["--transport".into(), t])
        .unwrap_or_default();
    let mut child = Command::new(PMKIT)
        .arg("attach")
        .arg(pm)
        .args(transport)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pmkit attach");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let err = Arc::new(Mutex::new(String::new()));
    let e2 = err.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut e = e2.lock().unwrap();
            e.push_str(&line);
            e.push('\n');
        }
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            if line.starts_with("detach with") {
                let _ = tx.send(all.clone());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => Attached { child, out, err },
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(100));
            panic!("pmkit attach did not come up: {}", err.lock().unwrap());
        }
    }
}

impl Attached {
    pub(crate) fn loop_dev(&self) -> String {
        let l = self
            .out
            .lines()
            .find(|l| l.contains("block device:"))
            .expect("loop device line");
        l.split_whitespace().nth(2).unwrap().to_string()
    }
    /// What `pmkit attach` wrote to stderr so far.
    pub(crate) fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }
    pub(crate) fn detach(mut self, target: &str) {
        ok(&["detach", target]);
        let st = wait_timeout(&mut self.child, Duration::from_secs(60));
        assert!(st.success(), "pmkit attach exited with {st}");
    }
}

pub(crate) fn wait_timeout(c: &mut Child, d: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        assert!(t.elapsed() < d, "process did not exit in time");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn fsck_clean(pm: &Path) {
    let a = attach(pm, &[]);
    let dev = a.loop_dev();
    let o = Command::new("fsck.ext4")
        .arg("-fn")
        .arg(&dev)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "fsck.ext4 -fn {dev}: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    a.detach(&dev);
}

pub(crate) struct Scratch {
    pub _dir: tempfile::TempDir,
    pub pm: PathBuf,
    pub mnt: PathBuf,
}

pub(crate) fn scratch(size: &str) -> Scratch {
    let dir = tempfile::Builder::new()
        .prefix("pmkit-attach")
        .tempdir_in("/dev/shm")
        .unwrap();
    let pm = dir.path().join("dev.pm");
    let mnt = tempfile::tempdir().unwrap().keep();
    ok(&["create", pm.to_str().unwrap(), "--size", size]);
    Scratch { _dir: dir, pm, mnt }
}

/// Whether `p` is a mountpoint in this namespace.
pub(crate) fn is_mounted(p: &Path) -> bool {
    let canon = std::fs::canonicalize(p).unwrap_or(p.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == canon.to_str())
}

/// Wait (at most `d`) until `f` holds.
pub(crate) fn wait_until(what: &str, d: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < d, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
