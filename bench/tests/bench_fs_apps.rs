//! Smoke tests of `pmkit-bench fs-tree --quick` (a generated tree, not the kernel source) and
//! `pmkit-bench fs-apps --quick` (sqlite3 with a rollback journal and with a WAL, fs_mark and postmark; no PostgreSQL): every
//! configuration has a value in every cell the report lists (no failed or n/a cell), every
//! round's sample is there, the plots are drawn and nothing stays mounted or behind. Needs
//! root, /dev/fuse, e2fsprogs, losetup and the shim (`cargo build --release -p pmkit-preload`
//! beside the bench binary); skipped with a note without them outside CI, failing under
//! CI=true, where scripts/test.sh installs the tools (scripts/test-packages.txt) and builds the
//! shim. No timing assertions (the machine is shared).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The configurations in table order; the io_uring mount where the kernel offers it.
fn targets() -> Vec<&'static str> {
    let mut t = vec!["pmfs-shim", "pmfs-long"];
    if pmkit_fuse::uring::enabled() {
        t.push("pmfs-long-uring");
    }
    t.extend(["ext4-attach", "ext2-loop", "ext4-loop", "tmpfs"]);
    t
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn shim() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .parent()
        .unwrap()
        .join("libpmkit_preload.so")
}

/// Whether the host can run the benches; panics under CI when it cannot.
fn ready(tools: &[&str]) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !have(t)).collect();
    let ok = root && Path::new("/dev/fuse").exists() && missing.is_empty() && shim().is_file();
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root with /dev/fuse, the tools (missing: {missing:?}) and the shim {}",
            shim().display()
        );
        eprintln!(
            "skipping: needs root, /dev/fuse, {tools:?} (missing: {missing:?}) and {}",
            shim().display()
        );
    }
    ok
}

/// Run `pmkit-bench ARGS --quick --json --dir D --plot D/x.svg`: the report, after checking
/// the plot was drawn and nothing is left mounted or in D but the plot.
fn quick(cmd: &str, extra: &[&str]) -> Value {
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-fsa")
        .tempdir_in("/dev/shm")
        .unwrap();
    let svg = dir.path().join("x.svg");
    let child = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args([cmd, "--quick", "--json", "--dir"])
        .arg(dir.path())
        .arg("--plot")
        .arg(&svg)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pmkit-bench");
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "pmkit-bench {cmd} failed: {err}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "--json prints only JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    });
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.contains("<svg") && drawn.contains("pmfs-shim"),
        "plot"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    // (Its mount point; the other test may be running beside this one.)
    let mine = format!("pmkit-bench-fs-apps-{pid}");
    assert!(!mounts.contains(&mine), "left mounted: {mounts}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "left behind: {left:?}");
    v
}

/// Every configuration has a positive value for every item, and one sample per round.
fn every_cell(v: &Value, items: &[&str]) {
    let targets: Vec<&str> = v["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let want = self::targets();
    assert_eq!(targets, want);
    let rows = v["summary"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["item"].as_str().unwrap()).collect();
    assert_eq!(names, items);
    for r in rows {
        let cells = r["cells"].as_array().unwrap();
        assert_eq!(cells.len(), want.len());
        for (c, &t) in cells.iter().zip(&want) {
            assert_eq!(c["target"], t);
            assert!(c["failed"].is_null(), "{} on {t} failed: {c}", r["item"]);
            assert!(c["not_applicable"].is_null(), "{} on {t}: {c}", r["item"]);
            assert!(c["value"].as_f64().unwrap() > 0.0, "{}: {c}", r["item"]);
            assert!(c["vs_ext4_attach"].as_f64().unwrap() > 0.0, "{c}");
        }
    }
    let rounds = v["rounds"].as_u64().unwrap() as usize;
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), rounds * want.len() * items.len());
}

#[test]
fn fs_tree_quick_has_every_step_on_every_configuration() {
    if !ready(&["mkfs.ext4", "mkfs.ext2", "losetup", "tar"]) {
        return;
    }
    let v = quick("fs-tree", &["--files", "300"]);
    every_cell(
        &v,
        &[
            "start",
            "cp",
            "untar",
            "start, tree in",
            "find",
            "grep -r",
            "cp -r",
            "rm -r",
        ],
    );
    assert_eq!(v["source"]["files"], 300, "{}", v["source"]);
    // One in three generated files holds the pattern on two lines.
    assert_eq!(v["source"]["grep_lines"], 200, "{}", v["source"]);
    // The mount's FUSE requests in each timed step, for each mount configuration only: untar
    // makes every file with one MKNOD; rm -r unlinks each.
    let req = v["requests"].as_array().expect("requests");
    let mounts: Vec<&str> = targets()
        .into_iter()
        .filter(|t| t.starts_with("pmfs-long"))
        .collect();
    for t in &mounts {
        for step in ["cp", "untar", "find", "grep -r", "cp -r", "rm -r"] {
            let q = req
                .iter()
                .find(|q| q["target"] == *t && q["step"] == step)
                .unwrap_or_else(|| panic!("no requests for {t} {step}: {req:?}"));
            assert!(q["total"].as_u64().unwrap() > 0, "{q}");
        }
        let of = |step: &str, kind: &str| {
            req.iter()
                .find(|q| q["target"] == *t && q["step"] == step)
                .and_then(|q| q["by_kind"][kind].as_u64())
                .unwrap_or(0)
        };
        assert!(of("untar", "mknod") >= 300, "{t}: {req:?}");
        assert!(of("rm -r", "unlink") >= 2 * 300, "{t}: {req:?}");
    }
    assert_eq!(req.len(), 6 * mounts.len(), "only the mounts: {req:?}");
}

#[test]
fn fs_apps_quick_has_every_load_on_every_configuration() {
    if !ready(&[
        "mkfs.ext4",
        "mkfs.ext2",
        "losetup",
        "sqlite3",
        "fs_mark",
        "postmark",
    ]) {
        return;
    }
    let v = quick("fs-apps", &[]);
    let apps: Vec<&str> = v["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(apps, ["sqlite", "sqlite-wal", "fsmark", "postmark"], "{v}");
    assert!(v["skipped"].as_array().unwrap().is_empty(), "{v}");
    every_cell(
        &v,
        &[
            "sqlite FULL",
            "sqlite WAL FULL",
            "fs_mark 4K+fsync",
            "postmark",
        ],
    );
}
