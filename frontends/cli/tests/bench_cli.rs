//! `pmkit bench ...` hands its arguments to the `pmkit-bench` binary next to `pmkit`, or says
//! how to build it when it is missing.

use std::path::Path;
use std::process::Command;

const PMKIT: &str = env!("CARGO_BIN_EXE_pmkit");

#[test]
fn bench_runs_pmkit_bench_or_says_how_to_build_it() {
    let o = Command::new(PMKIT)
        .args(["bench", "--help"])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    if Path::new(PMKIT).with_file_name("pmkit-bench").exists() {
        assert!(o.status.success(), "{err}");
        assert!(out.contains("Usage: pmkit bench"), "{out}");
        for sub in [
            "protection",
            "write-scheme",
            "emulation",
            "nbd",
            "pmo",
            "atomic",
            "fs",
        ] {
            assert!(out.contains(sub), "{sub} missing from {out}");
        }
        // Flags after the subcommand reach it verbatim.
        let o = Command::new(PMKIT)
            .args(["bench", "pmo", "--quick", "--max-n", "0", "--json"])
            .output()
            .unwrap();
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("--max-n must be"), "{err}");
    } else {
        assert!(!o.status.success());
        assert!(
            err.contains("cargo build --release -p pmkit-bench"),
            "{err}"
        );
    }
}
