//! `pmkit hmep`: presets as JSON, a quick calibration in the product binary (its plot through
//! `pmkit-bench`), and a model from that calibration, with the errors a user meets.

use std::path::Path;
use std::process::Command;

const PMKIT: &str = env!("CARGO_BIN_EXE_pmkit");

fn run(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(PMKIT).args(args).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn presets_name_their_sources() {
    let (ok, out, err) = run(&["hmep", "presets", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for n in ["thesis-450-10", "optane-1dimm", "cxl-direct"] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    let (ok, out, _) = run(&["hmep", "presets"]);
    assert!(ok && out.contains("Izraelevitz"), "{out}");
}

#[test]
fn a_calibration_feeds_the_model() {
    let dir = std::env::temp_dir().join(format!("pmkit-hmep-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    // The measurement is the product's; only the plot needs the benchmarks' binary.
    let svg = dir.join("cal.svg");
    let (ok, out, err) = run(&[
        "hmep",
        "calibrate",
        "--quick",
        "--size-mib",
        "8",
        "--dir",
        d,
        "--plot",
        svg.to_str().unwrap(),
    ]);
    if Path::new(PMKIT).with_file_name("pmkit-bench").exists() {
        assert!(ok, "{err}");
        assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
        assert!(
            out.contains("pointer chase") || out.contains("chase ns"),
            "{out}"
        );
    } else {
        assert!(
            !ok && err.contains("cargo build --release -p pmkit-bench"),
            "{err}"
        );
    }
    let (ok, out, err) = run(&[
        "hmep",
        "calibrate",
        "--quick",
        "--json",
        "--size-mib",
        "8",
        "--dir",
        d,
    ]);
    assert!(ok, "{err}");
    let cal = dir.join("cal.json");
    std::fs::write(&cal, &out).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tiers"].as_array().unwrap().len(), 3, "{out}");
    assert!(
        v["models"].as_array().unwrap().len() >= 10,
        "a model per preset"
    );
    assert!(v["level"].as_str().unwrap().starts_with("model"));
    let c = cal.to_str().unwrap();
    let (ok, out, err) = run(&[
        "hmep",
        "model",
        "thesis-600-5",
        "--calibration",
        c,
        "--json",
    ]);
    assert!(ok, "{err}");
    let m: serde_json::Value = serde_json::from_str(&out).unwrap();
    let slow = m["slow"].as_array().unwrap();
    let fast = m["fast"].as_array().unwrap();
    for i in 0..3 {
        assert!(slow[i].as_f64().unwrap() >= fast[i].as_f64().unwrap());
    }
    let (ok, out, _) = run(&["hmep", "model", "cxl-direct", "--calibration", c]);
    assert!(ok && out.contains("--slow-latency"), "{out}");
    // What a user gets wrong.
    let (ok, _, err) = run(&["hmep", "model", "nope", "--calibration", c]);
    assert!(!ok && err.contains("pmkit hmep presets"), "{err}");
    let (ok, _, err) = run(&[
        "hmep",
        "model",
        "cxl-direct",
        "--calibration",
        c,
        "--fast",
        "x",
    ]);
    assert!(!ok && err.contains("no backing"), "{err}");
    let (ok, _, err) = run(&[
        "hmep",
        "model",
        "cxl-direct",
        "--calibration",
        "/nonexistent",
    ]);
    assert!(!ok && err.contains("/nonexistent"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
