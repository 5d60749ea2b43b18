//! Smoke test of `pmkit-bench fs --quick --json --plot`: every target has every workload with
//! both thread counts and a positive rate, the append workload has latencies, the bytes-per-
//! operation table is filled, the plot is drawn and nothing stays mounted. Needs root,
//! /dev/fuse, mkfs.ext4 and losetup: skipped (with a note) without them, except under CI where
//! they are required. No timing assertions (the machine is shared).

mod common;

use common::{have, json_of};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

#[test]
fn quick_json_has_every_target_and_workload() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let ready = root && Path::new("/dev/fuse").exists() && have("mkfs.ext4") && have("losetup");
    if !ready {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root with /dev/fuse, e2fsprogs and util-linux"
        );
        eprintln!("skipping: bench fs needs root, /dev/fuse, mkfs.ext4 and losetup");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-fs")
        .tempdir_in("/dev/shm")
        .unwrap();
    let svg = dir.path().join("fs.svg");
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(["fs", "--quick", "--json", "--size-mib", "512", "--dir"])
        .arg(dir.path())
        .arg("--plot")
        .arg(&svg)
        .output()
        .expect("run pmkit-bench");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "pmkit-bench fs failed: {err}");
    let v: Value = json_of(&o);
    let targets: Vec<&str> = v["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for t in [
        "pmfs-none",
        "pmfs-short",
        "pmfs-long",
        "ext4-attach",
        "ext4-attach-dirsync",
        "ext4-loop",
        "ext4-loop-dirsync",
        "tmpfs",
    ] {
        assert!(targets.contains(&t), "target {t} missing: {targets:?}");
    }
    let workloads = [
        "append 4K+fsync",
        "create",
        "stat",
        "open+read 4K",
        "open+close",
        "pread 4K",
        "rename",
        "unlink",
    ];
    let rows = v["summary"].as_array().unwrap();
    assert_eq!(rows.len(), workloads.len() * 2, "{v}");
    for w in workloads {
        for th in [1, 2] {
            let row = rows
                .iter()
                .find(|r| r["workload"] == w && r["threads"] == th)
                .unwrap_or_else(|| panic!("no row {w} x{th}"));
            let cells = row["cells"].as_array().unwrap();
            assert_eq!(cells.len(), targets.len());
            for c in cells {
                assert!(c["ops_per_s"].as_f64().unwrap() > 0.0, "{w} x{th}: {c}");
                assert!(c["vs_ext4_attach"].as_f64().unwrap() > 0.0, "{c}");
                assert!(c["vs_ext4_dirsync"].as_f64().unwrap() > 0.0, "{c}");
                if w.starts_with("append") {
                    let p50 = c["p50_us"].as_f64().unwrap();
                    assert!(p50 > 0.0 && c["p99_us"].as_f64().unwrap() >= p50, "{c}");
                }
            }
        }
    }
    let per_op = v["bytes_per_op"].as_array().unwrap();
    assert_eq!(per_op.len(), 13, "{v}");
    for o in per_op {
        // Every call that reaches the daemon is counted; a create always does.
        let requests = o["pmfs_fuse_requests"].as_f64().unwrap();
        assert!(requests >= 0.0, "{o}");
        if o["op"] == "touch (create)" {
            assert!(requests >= 1.0, "{o}");
        }
        // stat and open + read write nothing (bar an access time): no bytes to check.
        if o["op"] == "stat" || o["op"] == "open+read 4K" {
            continue;
        }
        // Every operation stores to PM and makes ext4 commit; the thesis's five are journaled
        // on PMFS (the others may be single atomic stores).
        let journaled = [
            "touch (create)",
            "mkdir",
            "mv (rename)",
            "rm (unlink)",
            "append 4K+fsync",
        ];
        if journaled.contains(&o["op"].as_str().unwrap()) {
            assert!(o["pmfs_journal_bytes"].as_f64().unwrap() > 0.0, "{o}");
        }
        assert!(o["pmfs_pm_bytes"].as_f64().unwrap() > 0.0, "{o}");
        assert!(o["ext4_device_bytes"].as_f64().unwrap() > 0.0, "{o}");
    }
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.contains("<svg") && drawn.contains("pmfs-short"),
        "plot drawn"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains("pmkit-bench-fs"), "left mounted: {mounts}");
    // Nothing left in the bench directory but the plot.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
}
