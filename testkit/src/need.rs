//! What a test needs from the machine: root, a tool on `PATH`. Outside CI a missing need skips
//! with a note; under CI it fails the test, naming what to install.

use std::process::{Command, Stdio};

/// Whether this run is CI's (`CI` set, as every CI service sets it).
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Whether `tool` is on `PATH` (no message either way).
pub fn have(tool: &str) -> bool {
    assert!(
        !tool.is_empty() && !tool.contains(char::is_whitespace),
        "a tool name: {tool:?}"
    );
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether every tool of `tools` is there; if not: a note and `false` outside CI, a failure in
/// CI naming the packages file that installs it.
pub fn need_tool(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !have(t)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        !in_ci(),
        "{missing:?} missing in CI: scripts/test.sh installs them (scripts/test-packages.txt)"
    );
    eprintln!("note: skipping: {missing:?} missing");
    false
}

/// Whether `path` exists (a device such as /dev/fuse); if not: a note and `false` outside CI, a
/// failure in CI.
pub fn need_file(path: &str, why: &str) -> bool {
    if std::path::Path::new(path).exists() {
        return true;
    }
    assert!(!in_ci(), "{path} is missing in CI: {why}");
    eprintln!("note: skipping: no {path} ({why})");
    false
}

/// Whether this process runs as root; if not: a note and `false` outside CI, a failure in CI
/// (CI runs the tests as root).
pub fn need_root(why: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(!in_ci(), "CI must run this test as root: {why}");
    eprintln!("note: skipping: needs root ({why})");
    false
}
