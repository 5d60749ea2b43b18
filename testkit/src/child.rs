//! Cases that may die by a fault (a stray store, a forbidden access) run in a child process: the
//! test binary re-runs itself with one test selected and a variable naming the case, so the
//! fault kills the child, and the parent reads how it ended. A child that hangs (a fault handler
//! retrying forever) is killed at a time limit and fails the test.

use crate::scratch;
use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a child may run before it counts as hung.
pub const LIMIT: Duration = Duration::from_secs(120);

/// In the child: the case the parent named in `var`; `None` in the parent (the entry test then
/// returns at once). The child's scratch directories go to the parent's ([`scratch::base`]).
pub fn case(var: &str) -> Option<String> {
    std::env::var(var).ok()
}

/// Run this binary's test `entry` in a child with `var=case` and a scratch base the parent
/// removes afterwards; its output and how it ended. Panics if it runs past [`LIMIT`].
pub fn run(entry: &str, var: &str, case: &str) -> Output {
    run_with(entry, &[(var, case)], LIMIT)
}

/// As [`run`], with several variables and a time limit of the caller's.
pub fn run_with(entry: &str, vars: &[(&str, &str)], limit: Duration) -> Output {
    assert!(!vars.is_empty(), "a child needs a variable naming its case");
    let base = scratch::scratch_named("pmkit-child");
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args(["--exact", entry, "--nocapture", "--test-threads=1"])
        .env(scratch::BASE_VAR, base.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn the test binary");
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for the child") {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{entry} {vars:?}: the child still ran after {limit:?} (hung?)");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}
