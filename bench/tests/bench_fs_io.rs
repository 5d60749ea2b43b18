//! Smoke test of `pmkit-bench fs-io` and `fs-barrier` (`--quick --json --plot`, tiny cells):
//! every configuration has every cell with positive IOPS and MB/s, the goal row is there, the
//! barrier sweep has every (configuration, workload, barrier) point with the library's fences
//! counted, the plots are drawn and nothing stays mounted. Needs root, /dev/fuse, mkfs.ext4,
//! losetup, fio and the LD_PRELOAD shim (`cargo build --release -p pmkit-preload`, beside the
//! bench binary): skipped (with a note) without them, except under CI where they are required.
//! No timing assertions (the machine is shared).

mod common;

use common::{have, json_of};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn shim() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_pmkit-bench")).with_file_name("libpmkit_preload.so")
}

/// Whether the machine can run the benches; under CI it must.
fn ready() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let tools = ["mkfs.ext4", "mkfs.ext2", "losetup", "fio"];
    let ok = root
        && Path::new("/dev/fuse").exists()
        && tools.iter().all(|t| have(t))
        && shim().is_file();
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root with /dev/fuse, e2fsprogs, util-linux, fio and the shim built \
             ({} missing?)",
            shim().display()
        );
        eprintln!(
            "skipping: bench fs-io needs root, /dev/fuse, mkfs.ext4, losetup, fio and {}",
            shim().display()
        );
    }
    ok
}

/// One bench at a time: a mount of one would look like a leak of the other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Run `pmkit-bench ARGS --quick --json --dir DIR --plot DIR/plot.svg`; its JSON and the SVG.
fn bench(args: &[&str], tag: &str) -> (Value, String) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::Builder::new()
        .prefix(&format!("pmkit-bench-{tag}"))
        .tempdir_in("/dev/shm")
        .unwrap();
    let svg = dir.path().join("plot.svg");
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(args)
        .args([
            "--quick",
            "--json",
            "--file-mib",
            "2",
            "--size-mib",
            "256",
            "--dir",
        ])
        .arg(dir.path())
        .arg("--plot")
        .arg(&svg)
        .output()
        .expect("run pmkit-bench");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "pmkit-bench {args:?} failed: {err}");
    let v: Value = json_of(&o);
    let drawn = std::fs::read_to_string(&svg).unwrap();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains("pmkit-bench-fs"), "left mounted: {mounts}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "only the plot is left: {left:?}");
    (v, drawn)
}

fn pos(v: &Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {v}"));
    assert!(x > 0.0 && x.is_finite(), "{what}: {x}");
    x
}

#[test]
fn fs_io_quick_has_every_configuration_and_cell() {
    if !ready() {
        return;
    }
    let (v, svg) = bench(&["fs-io", "--ms", "40", "--sizes", "64,4096"], "fsio");
    let configs: Vec<&str> = v["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        configs,
        [
            "pmfs-lib",
            "pmfs-shim",
            "pmfs-long",
            "ext4-attach",
            "ext2-loop",
            "ext4-loop",
            "tmpfs"
        ]
    );
    let rows = v["summary"].as_array().unwrap();
    let mut want = vec![];
    for rw in ["read", "randread", "write", "randwrite"] {
        for bs in ["64B", "4K"] {
            want.push(format!("{rw} {bs}"));
        }
    }
    want.push("randwrite 64B+fdatasync".into());
    let cells: Vec<&str> = rows.iter().map(|r| r["cell"].as_str().unwrap()).collect();
    assert_eq!(cells, want);
    for r in rows {
        let cs = r["cells"].as_array().unwrap();
        assert_eq!(cs.len(), configs.len(), "{r}");
        for (c, name) in cs.iter().zip(&configs) {
            assert_eq!(c["config"], *name);
            let what = format!("{} on {name}", r["cell"]);
            pos(&c["iops"], &what);
            pos(&c["mb_s"], &what);
            pos(&c["vs_ext4_attach"], &what);
        }
        // Writes sync every 256 KiB written; the goal row after each write; reads never.
        let (bs, sync) = (r["bs"].as_u64().unwrap(), r["sync_every"].as_u64().unwrap());
        let cell = r["cell"].as_str().unwrap();
        let want_sync = match (cell.contains("write"), cell.ends_with("+fdatasync")) {
            (_, true) => 1,
            (true, false) => (256 << 10) / bs,
            (false, false) => 0,
        };
        assert_eq!(sync, want_sync, "{cell}");
    }
    // Each configuration ran every cell once (one round).
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), configs.len() * want.len());
    let g = &v["goal"];
    assert_eq!(g["cell"], "randwrite 64B+fdatasync");
    pos(&g["lib_vs_ext4_attach"], "goal, library");
    pos(&g["shim_vs_ext4_attach"], "goal, shim");
    assert!(svg.contains("<svg") && svg.contains("pmfs-shim") && svg.contains("tmpfs"));
}

#[test]
fn fs_barrier_quick_has_every_point() {
    if !ready() {
        return;
    }
    let (v, svg) = bench(
        &["fs-barrier", "--ms", "40", "--barrier-ns", "0,1000"],
        "fsbar",
    );
    let lines = v["lines"].as_array().unwrap();
    let works = [
        "randwrite 4K+fdatasync",
        "randwrite 64B+fdatasync",
        "write 256K+fdatasync",
        "create+unlink",
    ];
    assert_eq!(lines.len(), works.len() * 3, "{v}");
    for w in works {
        for c in ["pmfs-lib", "pmfs-shim", "ext4-attach"] {
            let l = lines
                .iter()
                .find(|l| l["work"] == w && l["config"] == c)
                .unwrap_or_else(|| panic!("no line {w} on {c}"));
            let pts = l["points"].as_array().unwrap();
            assert_eq!(pts.len(), 2, "{l}");
            assert_eq!(pts[0]["barrier_ns"], 0);
            assert_eq!(pts[1]["barrier_ns"], 1000);
            assert_eq!(pts[0]["normalised"].as_f64(), Some(1.0), "{l}");
            for p in pts {
                pos(&p["ops_per_s"], &format!("{w} on {c}"));
                pos(&p["normalised"], &format!("{w} on {c}"));
                // The library counts its fences: every one of these workloads fences.
                if c == "pmfs-lib" {
                    pos(&p["fences_per_s"], &format!("fences of {w} on {c}"));
                }
            }
        }
    }
    assert!(svg.contains("<svg") && svg.contains("create+unlink"));
}
