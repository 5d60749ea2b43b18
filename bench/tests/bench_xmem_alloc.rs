//! Smoke test of `pmkit-bench xmem-alloc --quick --json --plot`: every cell present, every
//! allocator with a positive rate, the ratio computed, the plot drawn; `--only` and `--peer`
//! select. No timing assertions (the machine is shared).

use serde_json::Value;
use std::process::Command;

fn run(args: &[&str], dir: &std::path::Path) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(["xmem-alloc", "--quick", "--json", "--ms", "5", "--dir"])
        .arg(dir)
        .args(args)
        .output()
        .expect("run pmkit-bench");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "pmkit-bench xmem-alloc failed: {err}");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "--json prints only JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

#[test]
fn quick_json_has_every_cell_and_allocator() {
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-xmem")
        .tempdir_in("/dev/shm")
        .unwrap();
    let svg = dir.path().join("xmem.svg");
    let v = run(&["--plot", svg.to_str().unwrap()], dir.path());
    let peers: Vec<&str> = v["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        peers,
        ["glibc", "jemalloc", "mimalloc", "xmem", "xmem-nocache"]
    );
    let cells = v["results"].as_array().unwrap();
    // 6 sizes (the quick run drops the small mixed one) x 2 patterns x 2 thread counts.
    assert_eq!(cells.len(), 24, "{v}");
    for c in cells {
        let mops = c["mops"].as_array().unwrap();
        assert_eq!(mops.len(), 5);
        assert!(mops.iter().all(|m| m.as_f64().unwrap() > 0.0), "{c}");
        let r = c["xmem_vs_jemalloc"].as_f64().unwrap();
        let want = mops[3].as_f64().unwrap() / mops[1].as_f64().unwrap();
        assert!((r - want).abs() < 1e-9 * want.max(1.0), "{c}");
    }
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    // The PM files of both X-Mem instances are gone.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "xmem.svg")
        .collect();
    assert!(left.is_empty(), "{left:?}");

    let v = run(&["--only", "large", "--peer", "xmem"], dir.path());
    assert_eq!(v["peers"].as_array().unwrap().len(), 1);
    let cells = v["results"].as_array().unwrap();
    assert_eq!(cells.len(), 12);
    assert!(cells.iter().all(|c| c["max"].as_u64().unwrap() >= 65536));
}
