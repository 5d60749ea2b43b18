//! Smoke test of `pmkit-bench atomic --quick --json`: every cell present with positive IOPS and
//! the ratios computed; libpmemblk is required in CI and skipped (with a note) elsewhere when
//! it is not installed. No timing assertions (the machine is shared).

use serde_json::Value;
use std::process::Command;

#[test]
fn quick_json_has_every_cell_positive() {
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-atomic")
        .tempdir_in("/dev/shm")
        .unwrap();
    let svg = dir.path().join("atomic.svg");
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(["atomic", "--quick", "--json", "--ops", "500", "--dir"])
        .arg(dir.path())
        .arg("--plot")
        .arg(&svg)
        .output()
        .expect("run pmkit-bench");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "pmkit-bench atomic failed: {err}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "--json prints only JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    });
    let lib = v["libpmemblk"].as_str().unwrap();
    let have_lib = lib.contains("loaded");
    if !have_lib {
        assert!(
            std::env::var_os("CI").is_none(),
            "libpmemblk is required in CI (scripts/bench-packages.txt): {lib}"
        );
        eprintln!("note: libpmemblk skipped: {lib}");
    }
    let cells = v["cells"].as_array().unwrap();
    let mut configs = vec!["atomic", "plain"];
    if have_lib {
        configs.push("libpmemblk");
    }
    for c in &configs {
        for th in [1, 2] {
            for op in ["write", "read"] {
                let cell = cells
                    .iter()
                    .find(|x| x["config"] == *c && x["threads"] == th && x["op"] == op)
                    .unwrap_or_else(|| panic!("missing cell {c} {th} {op}: {v}"));
                assert!(cell["median_iops"].as_f64().unwrap() > 0.0, "{cell}");
            }
        }
    }
    assert_eq!(cells.len(), configs.len() * 4, "no fio with --quick: {v}");
    for r in v["ratios"].as_array().unwrap() {
        assert!(r["atomic_vs_plain_write"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["atomic_vs_plain_read"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(
            r["atomic_vs_libpmemblk_write"].as_f64().is_some(),
            have_lib,
            "{r}"
        );
    }
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.starts_with("<svg") && drawn.contains("libpmemblk") == have_lib,
        "plot drawn"
    );
    // Nothing left behind in the bench directory but the plot.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
}
