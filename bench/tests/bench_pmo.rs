//! Smoke test of `pmkit-bench pmo`: a tiny run must produce every variant with positive times
//! and PM byte counts, and PMO Sync must write less to PM than a full shadow copy. No timing
//! assertions (the machine is shared).

use serde_json::Value;
use std::process::Command;

const PMO_VARIANTS: [&str; 8] = [
    "pmo-write",
    "pmo-dram",
    "pmo-dram-checksum",
    "pmo-dram-faults",
    "pmo-dram-mprotect",
    "pmo-dram-unprotected",
    "pmo-pm",
    "pmo-pm-unprotected",
];
const PMKIT_VARIANTS: [&str; 10] = [
    "persist-barrier",
    "undo-log",
    "full-shadow",
    PMO_VARIANTS[0],
    PMO_VARIANTS[1],
    PMO_VARIANTS[2],
    PMO_VARIANTS[3],
    PMO_VARIANTS[4],
    PMO_VARIANTS[5],
    PMO_VARIANTS[6],
];

fn run(args: &[&str]) -> (Value, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(args)
        .output()
        .expect("run pmkit-bench");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "pmkit-bench {args:?} failed: {err}");
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "--json prints only JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    });
    (v, err)
}

#[test]
fn quick_json_has_every_variant_and_pmo_writes_less_than_shadow_copy() {
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-pmo")
        .tempdir_in("/dev/shm")
        .unwrap();
    let d = dir.path().to_str().unwrap();
    let svg = tempfile::Builder::new().suffix(".svg").tempfile().unwrap();
    let s = svg.path().to_str().unwrap();
    // 20 objects (the last one partly written), one round.
    let (v, err) = run(&[
        "pmo", "--quick", "--json", "--max-n", "20000", "--dir", d, "--plot", s,
    ]);
    assert!(err.is_empty(), "--json prints nothing on stderr: {err}");
    assert_eq!(v["ns"], serde_json::json!([20000]));
    let rows = v["rows"].as_array().expect("rows");
    let row = |name: &str| rows.iter().find(|r| r["variant"] == name);
    let bytes = |name: &str| row(name).unwrap()["pm_bytes"].as_u64().unwrap();
    for name in PMKIT_VARIANTS {
        let r = row(name).unwrap_or_else(|| panic!("variant {name} missing: {v}"));
        assert_eq!(r["objects"], 20, "{r}");
        assert!(r["median_secs"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["pm_bytes"].as_u64().unwrap() > 0, "{r}");
        assert!(r["fences_per_object"].as_f64().unwrap() >= 1.0, "{r}");
    }
    // 19 whole objects and one of 544 ints: the data alone is 20000 * 4 bytes.
    assert!(bytes("persist-barrier") >= 80_000, "{v}");
    for pmo in PMO_VARIANTS {
        assert!(
            bytes(pmo) < bytes("full-shadow"),
            "{pmo} vs full-shadow: {v}"
        );
        assert!(
            bytes(pmo) >= bytes("persist-barrier"),
            "{pmo} vs persist-barrier: {v}"
        );
    }
    assert!(bytes("undo-log") > bytes("full-shadow"), "{v}");

    let lib = v["libpmemobj"].as_str().unwrap();
    match row("libpmemobj") {
        Some(r) => {
            assert!(lib.contains("loaded"), "{lib}");
            assert!(r["median_secs"].as_f64().unwrap() > 0.0, "{r}");
            assert!(
                r["pm_bytes"].is_null(),
                "libpmemobj's bytes are not measured: {r}"
            );
            for name in PMKIT_VARIANTS {
                let s = row(name).unwrap()["speedup_vs_libpmemobj"]
                    .as_f64()
                    .unwrap();
                assert!(s > 0.0, "{name}: {s}");
            }
        }
        None => {
            assert!(lib.starts_with("libpmemobj not installed"), "{lib}");
            eprintln!(
                "note: {lib}; the libpmemobj column was skipped (scripts/bench-packages.txt)"
            );
        }
    }
    let drawn = std::fs::read_to_string(svg.path()).unwrap();
    assert!(
        drawn.contains("<svg") && drawn.contains("pmo-dram-unprotected"),
        "plot drawn"
    );
    // Nothing is left in the pool directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn bad_arguments_are_refused() {
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(["pmo", "--quick", "--max-n", "0", "--json"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--max-n"));
}
