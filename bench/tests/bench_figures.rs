//! Smoke test of the design-space benchmarks: every figure runs in --quick mode, writes JSON with
//! a positive value for every configuration of every cell, and draws its SVG plot. No timing
//! assertions: performance is compared by running the benchmarks, not by tests.

use std::path::Path;
use std::process::Command;

const BENCH: &str = env!("CARGO_BIN_EXE_pmkit-bench");

fn run(fig: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join(format!("{fig}.svg"));
    let o = Command::new(BENCH)
        .args([fig, "--quick", "--json", "--plot"])
        .arg(&svg)
        .args(extra)
        .output()
        .expect("run pmkit-bench");
    assert!(
        o.status.success(),
        "bench {fig}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("bench --json prints JSON");
    let plot = std::fs::read_to_string(&svg).expect("--plot writes the SVG");
    assert!(
        plot.starts_with("<svg") || plot.contains("<svg"),
        "not an SVG"
    );
    (v, plot)
}

fn check_matrix(fig: &str, min_configs: usize) {
    let (v, plot) = run(fig, &["--ms", "15", "--size-mib", "64"]);
    let configs = v["configs"].as_array().unwrap();
    assert!(configs.len() >= min_configs, "{fig}: configs {configs:?}");
    let cells = v["cells"].as_array().unwrap();
    assert!(cells.len() >= 8, "{fig}: only {} cells", cells.len());
    for c in cells {
        let vals = c["mb_per_s"].as_array().unwrap();
        assert_eq!(vals.len(), configs.len());
        for (cfg, x) in configs.iter().zip(vals) {
            let x = x.as_f64().unwrap();
            assert!(
                x.is_finite() && x > 0.0,
                "{fig} {} {cfg}: {x} MB/s",
                c["label"]
            );
        }
        let r0 = c["ratio_to_baseline"][0].as_f64().unwrap();
        assert!(
            (r0 - 1.0).abs() < 1e-9,
            "the baseline's ratio to itself is 1"
        );
    }
    for cfg in configs {
        assert!(
            plot.contains(cfg.as_str().unwrap()),
            "{fig}: plot lacks a legend entry for {cfg}"
        );
    }
}

#[test]
fn protection_figure() {
    check_matrix("protection", 5);
}

#[test]
fn write_scheme_figure() {
    check_matrix("write-scheme", 2);
}

#[test]
fn overview_figure() {
    check_matrix("overview", 2);
}

#[test]
fn emulation_figure() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let root = euid == 0 && Path::new("/dev/fuse").exists();
    if !root {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root with /dev/fuse"
        );
        eprintln!("skipping: bench emulation needs root and /dev/fuse");
        return;
    }
    let (v, _) = run("emulation", &["--size-mib", "64"]);
    let rd = v["read_sweep"].as_array().unwrap();
    let wr = v["write_sweep"].as_array().unwrap();
    assert!(rd.len() >= 3 && wr.len() >= 3);
    assert_eq!(rd[0]["rdsx"], 1);
    assert_eq!(wr.last().unwrap()["wrsx"], 50);
    for p in rd.iter().chain(wr) {
        assert!(p["write_files_per_s"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["read_files_per_s"].as_f64().unwrap() > 0.0, "{p}");
    }
}
