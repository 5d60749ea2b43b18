//! The set-user-ID and set-group-ID rules of chown and write through the shim, against the
//! kernel's own answers on tmpfs: the script the mount's test runs too
//! (frontends/cli/tests/data/set_id.py). Needs root (to change ids) and python3.

mod common;

use common::*;
use std::process::Command;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../cli/tests/data/set_id.py");

#[test]
fn set_id_bits_follow_the_kernels_rules_through_the_shim() {
    // SAFETY: geteuid cannot fail.
    if !have("python3") || unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "needs python3 and root in CI"
        );
        eprintln!("skipped: needs python3 and root");
        return;
    }
    let model_dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let model = Command::new("python3")
        .args([SCRIPT, model_dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_ok(&model, "set_id.py on tmpfs");
    let s = Shim::new();
    let got = s.cmd("python3").args([SCRIPT, &s.m("")]).output().unwrap();
    assert_ok(&got, "set_id.py through the shim");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&model.stdout)
    );
    s.assert_prefix_empty();
}
