//! A pool, a prefix directory and the shim for running unmodified programs under LD_PRELOAD.

#![allow(dead_code)]

pub(crate) mod served;

use pmkit_fs::posix::Posix;
use pmkit_fs::{Fs, MkfsOptions, MountOptions};
use pmkit_media::{Region, RegionOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) struct Shim {
    pub dir: tempfile::TempDir,
    pub pool: PathBuf,
    /// The prefix: a real, empty directory the shim serves from the pool.
    pub mnt: PathBuf,
    pub so: PathBuf,
}

/// Whether `tool` runs; outside CI a missing tool skips the test, in CI it fails.
pub(crate) fn have(tool: &str) -> bool {
    pmkit_testkit::need_tool(&[tool])
}

impl Shim {
    pub(crate) fn new() -> Shim {
        let dir = pmkit_testkit::scratch();
        let pool = dir.path().join("pool");
        let region = Region::create(&pool, 64 << 20, &RegionOptions::default()).unwrap();
        Fs::mkfs(&region, &MkfsOptions::default()).unwrap();
        drop(region);
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        Shim {
            dir,
            pool,
            mnt,
            so: pmkit_testkit::acked::preload_so(),
        }
    }

    /// `p` under the prefix, as a string for command lines.
    pub(crate) fn m(&self, p: &str) -> String {
        format!("{}/{p}", self.mnt.display())
    }

    /// A command with the shim preloaded and configured.
    pub(crate) fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        c.env("LD_PRELOAD", &self.so)
            .env("PMKIT_PRELOAD_POOL", &self.pool)
            .env("PMKIT_PRELOAD_PREFIX", &self.mnt)
            .current_dir(self.dir.path());
        c
    }

    /// Start `python3 -c script` under the shim and wait for its first line of output, which
    /// must be `ready` (the script prints it once it holds what the test needs); the child.
    pub(crate) fn python_ready(&self, script: &str, ready: &str) -> std::process::Child {
        let mut child = self
            .cmd("python3")
            .args(["-c", script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line, format!("{ready}\n"));
        child
    }

    /// Run `prog args` under the shim; panics unless it succeeds. Its stdout.
    pub(crate) fn ok(&self, prog: &str, args: &[&str]) -> String {
        let out = self.cmd(prog).args(args).output().unwrap();
        assert_ok(&out, &format!("{prog} {args:?}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pool, checked clean (no problems) and mounted by this test process.
    pub(crate) fn mount(&self) -> (Posix<Region>, pmkit_fs::Recovery) {
        let region = Region::open(&self.pool, &RegionOptions::default()).unwrap();
        let report = pmkit_fs::check(&region);
        assert!(report.problems.is_empty(), "{report:?}");
        let (fs, rec) = Fs::mount(region, &MountOptions::default()).unwrap();
        (Posix::new(fs), rec)
    }

    /// Nothing reached the kernel's tree under the prefix.
    pub(crate) fn assert_prefix_empty(&self) {
        let left: Vec<_> = std::fs::read_dir(&self.mnt).unwrap().collect();
        assert!(left.is_empty(), "leaked into the kernel's tree: {left:?}");
    }

    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }
}

pub(crate) fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Build the test program `tests/c/NAME.c` into `dir/NAME` (`cc -O1 -w`); its path.
pub(crate) fn build_c(dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    let src = format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("cc")
        .args(["-O1", "-w", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert_ok(&out, &format!("cc {src}"));
    exe
}

/// A whole file of the pool.
pub(crate) fn read_all(p: &Posix<Region>, path: &[u8]) -> Vec<u8> {
    let a = p
        .stat(path)
        .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(path)));
    p.fs().read(a.ino, 0, a.size as usize).unwrap()
}

/// Deterministic bytes (xorshift).
pub(crate) fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
