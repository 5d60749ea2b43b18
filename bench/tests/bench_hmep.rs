//! `pmkit-bench hmep-validate --quick --json`: levels 3 and 2 against wall clock on the real tier
//! pair, every placement of xgraph's tags, and level 2's dependent-chase check.

#[allow(dead_code)] // shared helpers this test does not need (tool checks)
mod common;

use common::json_of;
use std::process::Command;

#[test]
fn validate_quick_reports_both_levels() {
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-hmep")
        .tempdir_in("/dev/shm")
        .unwrap();
    let svg = dir.path().join("val.svg");
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(["hmep-validate", "--quick", "--json", "--plot"])
        .arg(&svg)
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json_of(&o);
    assert!(v["level"].as_str().unwrap().contains("level 2"), "{v}");
    // Five pairs before the rounds, then one per round; both sets of prices reported.
    let rounds = v["rounds"].as_u64().unwrap();
    assert_eq!(
        v["paired"]["runs"].as_u64().unwrap(),
        5 + rounds,
        "{}",
        v["paired"]
    );
    assert_eq!(
        v["paired"]["differences"].as_array().unwrap().len() as u64,
        5 + rounds
    );
    assert_eq!(v["delta_up_front_ns"].as_array().unwrap().len(), 3);
    let apps = v["apps"].as_array().unwrap();
    assert_eq!(apps.len(), 2);
    for a in apps {
        // Every placement has a figure per round (that round's median iteration).
        let per_round = a["measured_rounds_ms"].as_array().unwrap();
        assert_eq!(per_round.len(), 8);
        assert!(per_round
            .iter()
            .all(|r| r.as_array().unwrap().len() as u64 == rounds));
        assert!(a["max_abs_error_up_front_pct"].as_f64().unwrap() >= 0.0);
        let rows = a["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 8, "every placement of three tags");
        for r in rows {
            for k in ["measured_ms", "predicted_ms", "emulated_ms"] {
                assert!(r[k].as_f64().unwrap() > 0.0, "{k}: {r}");
            }
            assert!(r["unpaid_ms"].as_f64().unwrap() >= 0.0, "{r}");
        }
        assert!(a["emulator_overhead_ns"].as_f64().unwrap() >= 0.0);
        assert_eq!(a["benefit_emulated_ms"].as_array().unwrap().len(), 3);
    }
    let c = &v["chase"];
    for k in ["fast_ns", "slow_ns", "emulated_ns", "predicted_ns"] {
        assert!(c[k].as_f64().unwrap() > 0.0, "{k}: {c}");
    }
    // X-Mem's files are gone with the run.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".pm"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}
