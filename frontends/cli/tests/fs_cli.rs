//! `pmkit fs` as a user runs it: mkfs, info (text and JSON with the journal costs), check clean;
//! then both superblocks damaged: check names it and exits 1.

mod serve_util;

use serve_util::*;

#[test]
fn mkfs_info_check_and_a_damaged_pool() {
    let dir = shm_dir("pmkit-cli-fs");
    let pool = dir.path().join("pool");
    let p = pool.to_str().unwrap();
    let out = text(&pmkit(&[
        "fs", "mkfs", p, "--size", "8M", "--inodes", "128",
    ]));
    assert!(out.contains("127 inodes"), "{out}");
    let info = text(&pmkit(&["fs", "info", p]));
    assert!(
        info.contains("create (touch)") && info.contains("clean"),
        "{info}"
    );
    let json = pmkit(&["fs", "info", p, "--json"]);
    assert!(json.status.success());
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["superblock"]["geo"]["inodes"], 128);
    let costs = v["op_costs"].as_array().unwrap();
    assert!(
        costs.iter().any(|c| c["op"] == "mkdir" && c["fences"] == 3),
        "{costs:?}"
    );
    let o = pmkit(&["fs", "check", p]);
    assert!(o.status.success(), "{}", text(&o));
    let mut image = std::fs::read(&pool).unwrap();
    image[0] ^= 1;
    image[2048] ^= 1;
    std::fs::write(&pool, &image).unwrap();
    let o = pmkit(&["fs", "check", p]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("both superblocks are bad"),
        "{}",
        text(&o)
    );
}
