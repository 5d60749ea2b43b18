//! Smoke test of `pmkit-bench fs-protect`: a short run must measure every workload in every
//! protection mode this CPU has (1 and 2 threads), with positive times, draw its plot, and
//! name pkey as not run where the CPU lacks it, and measure the raw nt 4 KiB + fence reference.
//! With `--sums`, each mode also runs with data checksums, side by side. No timing assertions
//! (the machine is shared).

use serde_json::Value;
use std::process::Command;

#[test]
fn quick_json_has_every_mode_and_workload() {
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-fs-protect")
        .tempdir_in("/dev/shm")
        .unwrap();
    let svg = tempfile::Builder::new().suffix(".svg").tempfile().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(["fs-protect", "--quick", "--json", "--ms", "5", "--dir"])
        .arg(dir.path())
        .arg("--plot")
        .arg(svg.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let modes: Vec<&str> = v["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(&modes[..3], ["none", "kernel", "pt"]);
    let pku = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .split_whitespace()
        .any(|w| w == "pku");
    assert_eq!(modes.contains(&"pkey"), pku, "{modes:?}");
    assert_eq!(v["not_run"].as_array().unwrap().is_empty(), pku);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 18, "9 workloads x 1 and 2 threads");
    let raw = v["raw_nt_4k_fence"].as_array().unwrap();
    assert_eq!(raw.len(), 2, "the raw reference, 1 and 2 threads: {raw:?}");
    assert!(raw.iter().all(|r| r["us_per_op"].as_f64().unwrap() > 0.0));
    assert!(raw
        .iter()
        .all(|r| r["published_us_per_op"].as_f64().unwrap() > 0.0));
    for r in results {
        let us = r["us_per_op"].as_array().unwrap();
        assert_eq!(us.len(), modes.len(), "{r}");
        assert!(us.iter().all(|x| x.as_f64().unwrap() > 0.0), "{r}");
    }
    let plot = std::fs::read_to_string(svg.path()).unwrap();
    assert!(
        plot.contains("<svg") && plot.contains("rename"),
        "the plot names the workloads"
    );
}

#[test]
fn sums_run_each_mode_with_and_without_checksums() {
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-fs-sums")
        .tempdir_in("/dev/shm")
        .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(["fs-protect", "--quick", "--json", "--ms", "5", "--sums"])
        .args(["--modes", "kernel", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let modes: Vec<&str> = v["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(modes, ["none", "none+sums", "kernel", "kernel+sums"]);
    for r in v["results"].as_array().unwrap() {
        let us = r["us_per_op"].as_array().unwrap();
        assert_eq!(us.len(), 4, "{r}");
        assert!(us.iter().all(|x| x.as_f64().unwrap() > 0.0), "{r}");
    }
}
