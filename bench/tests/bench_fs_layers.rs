//! Smoke tests of `pmkit-bench fs-layers --quick --json --plot`: every layer has every operation
//! it can do (NBD: no create or stat, and the report says so) with a positive time; on the
//! daemon layers, system calls counted for the driver and the daemon, instructions for both;
//! the goals are evaluated, the plot is drawn and nothing stays mounted. Needs root, /dev/fuse,
//! cc, mkfs.ext4, losetup, strace, valgrind, libnbd's header, and libpmfs.so and
//! libpmkit_preload.so beside the bench binary: skipped (with a note) without them, except under
//! CI where they are required. No timing assertions (the machine is shared).

mod common;

use common::{have, json_of};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// target/release (or debug), where cargo put the bench and the two shared libraries.
fn bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pmkit-bench"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn missing() -> Vec<String> {
    let mut m: Vec<String> = vec![];
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        m.push("root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        m.push("/dev/fuse".into());
    }
    for t in ["cc", "mkfs.ext4", "losetup", "strace", "valgrind"] {
        if !have(t) {
            m.push(t.into());
        }
    }
    if !Path::new("/usr/include/libnbd.h").exists() {
        m.push("libnbd-dev".into());
    }
    for so in ["libpmfs.so", "libpmkit_preload.so"] {
        if !bin_dir().join(so).exists() {
            m.push(format!(
                "{so} (cargo build -p pmkit-libpmfs -p pmkit-preload)"
            ));
        }
    }
    m
}

/// Run `pmkit-bench fs-layers --quick --json --size-mib 128 ARGS` in a scratch directory of
/// its own (the plot drawn there); the report and what is left in the directory.
fn bench(args: &[&str]) -> (Value, Vec<std::ffi::OsString>) {
    // One run at a time: two benches at once would compete for the loop devices and mounts
    // their layers set up.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-fs-layers")
        .tempdir_in("/dev/shm")
        .unwrap();
    let svg = dir.path().join("layers.svg");
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args([
            "fs-layers",
            "--quick",
            "--json",
            "--size-mib",
            "128",
            "--dir",
        ])
        .arg(dir.path())
        .arg("--plot")
        .arg(&svg)
        .args(args)
        .output()
        .expect("run pmkit-bench");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "pmkit-bench fs-layers failed: {err}");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("<svg"), "plot drawn");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains("pmkit-bench-fs-layers"),
        "left mounted: {mounts}"
    );
    let left = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    (json_of(&o), left)
}

fn skipped() -> bool {
    let m = missing();
    if !m.is_empty() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have everything bench fs-layers needs; missing: {m:?}"
        );
        eprintln!("skipping: bench fs-layers needs {m:?}");
    }
    !m.is_empty()
}

const OPS: [&str; 6] = [
    "read4k",
    "write4k",
    "create",
    "stat",
    "stat_mapped",
    "append4k_fsync",
];
const DAEMONS: [&str; 3] = ["fuse", "ext4-attach", "nbd"];

fn cell<'a>(v: &'a Value, l: &str, op: &str) -> Option<&'a Value> {
    v["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["layer"] == l && c["op"] == op)
}

/// Every layer times every operation it can do; the goals are evaluated and the plot drawn.
/// (The traced runs, slow under strace and valgrind, are the next test's, on fewer layers.)
#[test]
fn quick_json_has_every_layer_and_operation() {
    if skipped() {
        return;
    }
    let (v, left) = bench(&["--no-trace"]);
    let layers = [
        "library",
        "shim",
        "fuse",
        "ext4-attach",
        "nbd",
        "ext4-loop",
        "tmpfs",
    ];
    for l in layers {
        for op in OPS {
            if l == "nbd" && (op == "create" || op == "stat" || op == "stat_mapped") {
                assert!(cell(&v, l, op).is_none(), "nbd has no {op}: {v}");
                let na = v["not_applicable"].to_string();
                assert!(na.contains(op), "n/a {op} on nbd not said: {na}");
                continue;
            }
            let c = cell(&v, l, op).unwrap_or_else(|| panic!("no cell {l} {op}"));
            let pos = |k: &str| c[k].as_f64().is_some_and(|x| x > 0.0);
            assert!(pos("us_per_op") && pos("ops_per_s"), "{c}");
            assert!(c["rounds_us"].as_array().unwrap().len() == 1, "{c}");
            let app_cpu = c["app_user_us"].as_f64().unwrap() + c["app_sys_us"].as_f64().unwrap();
            assert!(app_cpu >= 0.0, "{c}");
            assert_eq!(
                c["daemon_user_us"].as_f64().is_some(),
                DAEMONS.contains(&l),
                "{c}"
            );
            assert!(
                c["instr_app"].is_null(),
                "nothing counted under --no-trace: {c}"
            );
        }
    }
    assert!(v["raw_nt_4k_fence_us"].as_f64().unwrap() > 0.0);
    let goals = v["goals"].as_array().unwrap();
    // library and shim against tmpfs for append, stat and stat_mapped, and the latency goal.
    assert_eq!(goals.len(), 7, "{goals:?}");
    // Nothing left in the bench directory but the plot.
    assert_eq!(left.len(), 1, "{left:?}");
}

/// Two processes at once (`--clients 2`): the layers several processes can share are timed,
/// each with every operation, each process in a directory of its own; the library (one
/// process per pool) is left out; ops/s counts both processes' operations.
#[test]
fn two_clients_time_the_shared_layers() {
    if skipped() {
        return;
    }
    let (v, left) = bench(&[
        "--no-trace",
        "--clients",
        "2",
        "--layers",
        "library,served,tmpfs",
    ]);
    assert_eq!(v["clients"], 2, "{v}");
    assert_eq!(v["layers"], serde_json::json!(["served", "tmpfs"]), "{v}");
    for l in ["served", "tmpfs"] {
        for op in OPS {
            let c = cell(&v, l, op).unwrap_or_else(|| panic!("no cell {l} {op}"));
            let us = c["us_per_op"].as_f64().unwrap();
            let rate = c["ops_per_s"].as_f64().unwrap();
            assert!(us > 0.0 && (rate * us / 2e6 - 1.0).abs() < 1e-6, "{c}");
        }
    }
    assert!(cell(&v, "library", "read4k").is_none());
    assert_eq!(left.len(), 1, "{left:?}");
}

/// System calls (strace) and instructions (callgrind) counted for the driver and, where there
/// is one, the daemon: on the two daemon layers whose counting differs (FUSE, NBD).
#[test]
fn traced_runs_count_calls_and_instructions() {
    if skipped() {
        return;
    }
    let (v, left) = bench(&["--layers", "fuse,nbd", "--strace-n", "50"]);
    for l in ["fuse", "nbd"] {
        for op in OPS {
            let Some(c) = cell(&v, l, op) else {
                assert!(l == "nbd", "no cell {l} {op}");
                continue;
            };
            // Every path through a daemon crosses into the kernel at least once per operation.
            assert!(c["syscalls_app"].as_f64().unwrap() >= 0.99, "{c}");
            assert!(c["instr_app"].as_f64().is_some_and(|x| x > 0.0), "{c}");
            assert!(c["syscalls_daemon"].as_f64().is_some(), "{c}");
            assert!(c["instr_daemon"].as_f64().is_some(), "{c}");
        }
    }
    // Requests that must reach a daemon do: a FUSE create, an NBD read.
    let get = |l: &str, op: &str, k: &str| cell(&v, l, op).and_then(|c| c[k].as_f64()).unwrap();
    assert!(get("fuse", "create", "syscalls_daemon") >= 1.0);
    assert!(get("fuse", "create", "instr_daemon") > 0.0);
    assert!(get("nbd", "read4k", "syscalls_daemon") >= 1.0);
    assert!(get("nbd", "read4k", "instr_daemon") > 0.0);
    assert_eq!(left.len(), 1, "{left:?}");
}
