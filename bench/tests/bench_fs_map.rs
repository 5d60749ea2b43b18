//! Smoke test of `pmkit-bench fs-map` (`--quick --json --plot`, tiny cells): every
//! configuration has every cell with positive MB/s, the backing of every mapping is recorded
//! (the 2 MiB-block PMFS file in 2 MiB-aligned extents), the plot is drawn and nothing stays
//! mounted. Needs root, /dev/fuse, mkfs.ext4/mkfs.ext2 and losetup: skipped (with a note)
//! without them, except under CI where they are required. No timing assertions.

mod common;

use common::{have, json_of};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Whether the machine can run the bench; under CI it must.
fn ready() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let tools = ["mkfs.ext4", "mkfs.ext2", "losetup"];
    let ok = root && Path::new("/dev/fuse").exists() && tools.iter().all(|t| have(t));
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root with /dev/fuse, e2fsprogs and util-linux"
        );
        eprintln!("skipping: bench fs-map needs root, /dev/fuse, mkfs.ext4, mkfs.ext2, losetup");
    }
    ok
}

fn pos(v: &Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {v}"));
    assert!(x > 0.0 && x.is_finite(), "{what}: {x}");
    x
}

#[test]
fn fs_map_quick_has_every_configuration_and_cell() {
    if !ready() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-fsmap")
        .tempdir_in("/dev/shm")
        .unwrap();
    let svg = dir.path().join("plot.svg");
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(["fs-map", "--quick", "--json", "--ms", "20"])
        .args(["--file-mib", "4", "--size-mib", "256", "--dir"])
        .arg(dir.path())
        .arg("--plot")
        .arg(&svg)
        .output()
        .expect("run pmkit-bench");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "pmkit-bench fs-map failed: {err}");
    let v: Value = json_of(&o);
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    // The bench mounts every target on /tmp/pmkit-bench-fs-map-PID/mnt.
    assert!(
        !mounts.contains("pmkit-bench-fs-map-"),
        "left mounted: {mounts}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "only the plot is left: {left:?}");

    let configs: Vec<&str> = v["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let want = [
        "pmfs-map-2m",
        "pmfs-map-4k",
        "ext4-attach",
        "ext2-loop",
        "ext4-loop",
        "tmpfs",
    ];
    assert_eq!(configs, want);
    let rows = v["summary"].as_array().unwrap();
    let cells: Vec<&str> = rows.iter().map(|r| r["cell"].as_str().unwrap()).collect();
    assert_eq!(
        cells,
        [
            "randread-64",
            "randread-4096",
            "randwrite-64",
            "randwrite-4096"
        ]
    );
    for r in rows {
        let cs = r["cells"].as_array().unwrap();
        assert_eq!(cs.len(), want.len(), "{r}");
        for (c, name) in cs.iter().zip(want) {
            assert_eq!(c["config"], name);
            let what = format!("{} on {name}", r["cell"]);
            pos(&c["mb_s"], &what);
            pos(&c["vs_ext4_attach"], &what);
        }
    }
    assert_eq!(
        v["samples"].as_array().unwrap().len(),
        want.len() * cells.len()
    );
    // Every mapping's backing is recorded; the fallocated PMFS file is all 2 MiB-shaped.
    let backing = v["backing"].as_array().unwrap();
    assert_eq!(backing.len(), want.len());
    let b2m = backing
        .iter()
        .find(|b| b["config"] == "pmfs-map-2m")
        .unwrap();
    assert_eq!(b2m["bytes_in_2m_extents"], 4u64 << 20, "{b2m}");
    assert_eq!(b2m["addr_2m_aligned"], true, "{b2m}");
    for b in backing {
        assert!(b["vmas"].as_u64().unwrap() >= 1, "{b}");
    }
    assert!(v["shmem_thp"].as_str().is_some_and(|s| !s.is_empty()));
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("<svg") && drawn.contains("pmfs-map-2m") && drawn.contains("tmpfs"));
}
