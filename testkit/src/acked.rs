//! Writers whose acknowledgements a crash test counts, and the shim a test preloads.
//!
//! [`Appender`] runs a python3 loop (under whatever environment the caller's command gives it:
//! the LD_PRELOAD shim, a mount's directory) that appends numbered lines to a file, fsyncs each
//! and only then prints its number: a printed number is acknowledged, and after any crash it
//! must be in the file.

use std::io::{BufRead, BufReader, Lines};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};

/// The LD_PRELOAD shim built beside the test binaries (`cargo build -p pmkit-preload` makes it;
/// `cargo test` alone does not).
pub fn preload_so() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let so = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/PROFILE/deps")
        .join("libpmkit_preload.so");
    assert!(
        so.exists(),
        "{} missing: build the cdylib first (cargo build -p pmkit-preload)",
        so.display()
    );
    so
}

/// A running appender and the last number it acknowledged.
pub struct Appender {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    acked: u64,
}

impl Appender {
    /// Start `python` (a `python3` command, its environment set) appending to `log`.
    pub fn start(mut python: Command, log: &str) -> Appender {
        assert!(
            !log.is_empty() && !log.contains(['\'', '\\', '\n']),
            "a path the script can quote: {log:?}"
        );
        let script = format!(
            "import os\n\
             fd = os.open('{log}', os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)\n\
             i = 0\n\
             while True:\n\
             \x20   os.write(fd, b'%d\\n' % i)\n\
             \x20   os.fsync(fd)\n\
             \x20   print(i, flush=True)\n\
             \x20   i += 1\n"
        );
        let mut child = python
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 starts");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        Appender {
            child,
            lines,
            acked: 0,
        }
    }

    /// Wait until `n` lines are acknowledged.
    pub fn wait_for(&mut self, n: u64) {
        assert!(n > 0, "wait for at least one line");
        while self.acked < n {
            let l = self
                .lines
                .next()
                .expect("the appender stopped early")
                .expect("its output");
            let i = l.parse::<u64>().expect("a number");
            assert_eq!(i, self.acked, "numbers printed in order");
            self.acked = i + 1;
        }
    }

    /// After the crash: every number it printed before its calls started to fail is
    /// acknowledged; it is killed and the count returned.
    pub fn finish(mut self) -> u64 {
        for l in self.lines.by_ref() {
            match l.ok().and_then(|l| l.parse::<u64>().ok()) {
                Some(i) => self.acked = i + 1,
                None => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.acked
    }
}
