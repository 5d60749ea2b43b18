//! Smoke test of `pmkit-bench xmem --quick --json --plot`: every policy at every point, and the
//! invariants the model guarantees: fast-only ≤ every policy ≤ slow-only, the oracle ≤ every
//! unit-granular policy, writes to the slow tier within slow-only's, the level named, the plot
//! drawn, the PM file gone. No timing assertions (the machine is shared).

#[allow(dead_code)] // have() is for the tests that need tools
mod common;

use std::process::Command;

const POLICIES: [&str; 11] = [
    "fast-only",
    "slow-only",
    "x-mem",
    "x-mem-reads",
    "x-mem-unfiltered",
    "x-mem-regions",
    "first-touch",
    "page-hotness",
    "memkind-ratio",
    "oracle-tag-order",
    "oracle",
];

#[test]
fn quick_json_has_every_policy_and_the_model_invariants() {
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-xmem-tiers")
        .tempdir_in("/dev/shm")
        .unwrap();
    let svg = dir.path().join("xmem.svg");
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(["xmem", "--quick", "--json", "--dir"])
        .arg(dir.path())
        .arg("--plot")
        .arg(&svg)
        .output()
        .expect("run pmkit-bench");
    assert!(
        o.status.success(),
        "pmkit-bench xmem failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = common::json_of(&o);
    assert!(v["level"].as_str().unwrap().starts_with("level 3"), "{v}");
    let names: Vec<&str> = v["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(names, POLICIES);
    let apps = v["apps"].as_array().unwrap();
    let app_names: Vec<&str> = apps.iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(app_names, ["pagerank", "bfs", "xkv"]);
    let eps = 1e-9;
    for a in apps {
        assert!(a["fast_only_ms"].as_f64().unwrap() > 0.0);
        let points = a["points"].as_array().unwrap();
        assert_eq!(points.len(), 2 * 5, "2 presets x 5 fractions");
        let mut slow_only_above_fast = false;
        for pt in points {
            let p = pt["policies"].as_array().unwrap();
            let got: Vec<&str> = p.iter().map(|x| x["policy"].as_str().unwrap()).collect();
            assert_eq!(got, POLICIES, "{pt}");
            let t = |name: &str| {
                p.iter().find(|x| x["policy"] == name).unwrap()["normalised"]
                    .as_f64()
                    .unwrap()
            };
            let w = |name: &str| {
                p.iter().find(|x| x["policy"] == name).unwrap()["slow_stores"]
                    .as_u64()
                    .unwrap()
            };
            let wb = |name: &str| {
                p.iter().find(|x| x["policy"] == name).unwrap()["slow_writebacks"]
                    .as_u64()
                    .unwrap()
            };
            assert!((t("fast-only") - 1.0).abs() < eps, "{pt}");
            assert_eq!(w("fast-only"), 0);
            assert_eq!(wb("fast-only"), 0);
            for name in POLICIES {
                assert!(
                    t(name) >= 1.0 - eps && t(name) <= t("slow-only") + eps,
                    "{name}: {pt}"
                );
                assert!(w(name) <= w("slow-only"), "{name}: {pt}");
                assert!(wb(name) <= wb("slow-only"), "{name}: {pt}");
            }
            for name in [
                "x-mem",
                "x-mem-reads",
                "x-mem-unfiltered",
                "x-mem-regions",
                "first-touch",
                "memkind-ratio",
                "oracle-tag-order",
            ] {
                assert!(t("oracle") <= t(name) + eps, "oracle above {name}: {pt}");
            }
            // First touch fills in allocation order, which is one order of the tags.
            assert!(t("oracle-tag-order") <= t("first-touch") + eps, "{pt}");
            let r = pt["xmem_over_oracle"].as_f64().unwrap();
            assert!((r - t("x-mem") / t("oracle")).abs() < eps, "{pt}");
            let r = pt["xmem_reads_over_oracle"].as_f64().unwrap();
            assert!((r - t("x-mem-reads") / t("oracle")).abs() < eps, "{pt}");
            slow_only_above_fast |= t("slow-only") > 1.0;
        }
        // The quick run's cache model is small enough that slow memory costs something.
        assert!(slow_only_above_fast, "{a}");
        // Every application stores, and the cache model writes some of it back.
        let tags = a["per_tag"].as_array().unwrap();
        let sum = |k: &str| tags.iter().map(|u| u[k].as_u64().unwrap()).sum::<u64>();
        assert!(
            sum("writebacks") > 0 && sum("writebacks") <= sum("stores"),
            "{a}"
        );
    }
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "xmem.svg")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
