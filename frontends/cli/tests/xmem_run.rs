//! `pmkit xmem run` as a user runs it: a C program written against xmem.h with two structures
//! of two regions each and a one-region DRAM budget, run with the tiers chosen on the command
//! line; where the regions end up follows the saved profile, then a priority over it. A
//! program that never calls `xmem_init` gets a note, and exit codes pass through.
//!
//! Needs gcc (scripts/test-packages.txt) and libxmem.so (`cargo build --workspace`, which
//! scripts/test.sh runs first): skipped without gcc, failed in CI.

mod serve_util;

use serve_util::*;
use std::path::Path;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <string.h>
#include "xmem.h"
int main(int argc, char **argv) {
    (void)argv;
    if (xmem_init("budget=64M") != XMEM_OK) {
        fprintf(stderr, "xmem_init: %s\n", xmem_errmsg());
        return 2;
    }
    int cold = xmem_tag("cold"), hot = xmem_tag("hot");
    for (int i = 0; i < 2; i++) {
        void *c = xmalloc(cold, 1536 << 10), *h = xmalloc(hot, 1536 << 10);
        if (!c || !h) { fprintf(stderr, "xmalloc: %s\n", xmem_errmsg()); return 3; }
        memset(c, 1, 1536 << 10);
        memset(h, 2, 1536 << 10);
    }
    return argc > 1 ? 7 : 0;
}
"#;

fn build(dir: &Path) -> String {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../c/xmem/include");
    let (src, bin) = (dir.join("twotags.c"), dir.join("twotags"));
    std::fs::write(&src, PROGRAM).unwrap();
    pmkit_testkit::cexample::build(&src, &include, "xmem", &bin)
        .expect("gcc is needed (scripts/test-packages.txt)");
    bin.to_str().unwrap().to_owned()
}

/// Run the program under `pmkit xmem run --json` with the PM file `pm` and `extra` flags: the
/// tier of each region by structure name, and the exit code.
fn run(bin: &str, pm: &str, extra: &[&str]) -> (Vec<(String, String)>, i32) {
    let r = run_on(bin, &["--pm", pm], extra);
    assert!(!Path::new(pm).exists(), "the PM file is removed at exit");
    r
}

/// As [`run`], with the slow tier given by `slow` (`--pm F`, or NUMA nodes).
fn run_on(bin: &str, slow: &[&str], extra: &[&str]) -> (Vec<(String, String)>, i32) {
    let mut args = vec![
        "xmem",
        "run",
        "--json",
        "--fast-budget",
        "2M",
        "--region-size",
        "2M",
        "--pm-size",
        "64M",
    ];
    args.extend_from_slice(slow);
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", bin]);
    let o = pmkit(&args);
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    assert_eq!(v["fast_slots"], 1, "the budget from the command line: {v}");
    let regions = v["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["tier"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (regions, o.status.code().unwrap())
}

fn in_dram(regions: &[(String, String)]) -> Vec<&str> {
    regions
        .iter()
        .filter(|r| r.1 == "dram")
        .map(|r| r.0.as_str())
        .collect()
}

#[test]
fn the_command_line_places_an_x_mem_program() {
    if !have(&["gcc"]) {
        return;
    }
    let dir = pmkit_testkit::scratch();
    let d = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
    let bin = build(dir.path());
    let pm = d("pm.img");

    // No profile: the cold structure, allocated first, took the one DRAM region.
    let (r, rc) = run(&bin, &pm, &[]);
    assert_eq!(rc, 0);
    assert_eq!(r.len(), 4, "two regions per structure: {r:?}");
    assert_eq!(in_dram(&r), ["cold"], "{r:?}");

    // A saved profile (hot: pointer chasing and random; cold: streaming) moves hot in.
    let prof = d("p.prof");
    std::fs::write(
        &prof,
        "# pmkit-xmem profile v2: name, then accesses per region: chase random streaming, then regions\n\
         hot\t5000\t5000\t0\t2\ncold\t0\t10\t50000\t2\n",
    )
    .unwrap();
    let (r, _) = run(&bin, &pm, &["--profile", &prof]);
    assert_eq!(in_dram(&r), ["hot"], "{r:?}");

    // A priority comes before the profile's benefit.
    let (r, _) = run(&bin, &pm, &["--profile", &prof, "--priority", "cold=3"]);
    assert_eq!(in_dram(&r), ["cold"], "{r:?}");

    // The slow tier as a NUMA node (node 0 for both tiers: this machine has one node, so the
    // plumbing runs and nothing moves): no PM file, the same placement.
    let (r, rc) = run_on(&bin, &["--fast-node", "0", "--slow-node", "0"], &[]);
    assert_eq!(rc, 0);
    assert_eq!(r.len(), 4, "{r:?}");
    assert_eq!(in_dram(&r), ["cold"], "{r:?}");
    let o = pmkit(&["xmem", "run", "--slow-node", "0", "--", &bin]);
    assert!(!o.status.success(), "--slow-node needs --fast-node");

    // The program's exit code passes through.
    let o = pmkit(&["xmem", "run", "--pm", &pm, "--", &bin, "x"]);
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    assert!(text(&o).contains("structure"), "{}", text(&o));
}

#[test]
fn programs_and_profiles_that_cannot_run_are_explained() {
    let o = pmkit(&["xmem", "run", "--", "true"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o).contains("did not call xmem_init"), "{}", text(&o));
    let o = pmkit(&[
        "xmem",
        "run",
        "--profile",
        "/nonexistent.prof",
        "--",
        "true",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--profile /nonexistent.prof: cannot load it"),
        "{}",
        text(&o)
    );
    let o = pmkit(&["xmem", "run", "--pm", "/dev/shm/a,b", "--", "true"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("cannot be passed"), "{}", text(&o));
}
