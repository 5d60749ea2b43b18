//! `pmkit create`, `info`, `check` as a user runs them.

mod serve_util;

use serve_util::*;

#[test]
fn create_info_check_and_the_problems_check_reports() {
    let dir = shm_dir("pmkit-cli-blk");
    let p = dir.path().join("dev");
    let ps = p.to_str().unwrap();
    let o = pmkit(&[
        "create",
        ps,
        "--size",
        "4M",
        "--block-size",
        "512",
        "--checksum",
        "--protect",
        "pt",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("blocks of 512 bytes"), "{}", text(&o));

    let v = info_json(&p);
    let sb = &v["found"]["current"];
    assert_eq!(sb["layout"]["block_size"], 512);
    assert_eq!(sb["clean"], true);
    assert_eq!(sb["last_protect"], "pt");
    let o = pmkit(&["info", ps]);
    assert!(text(&o).contains("state         clean"), "{}", text(&o));

    let o = pmkit(&["check", ps]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // Creating over an existing device is refused (it says what the file holds) and leaves it
    // alone, with or without --size.
    for args in [&["create", ps, "--size", "4M"][..], &["create", ps]] {
        let o = pmkit(args);
        assert_eq!(o.status.code(), Some(2));
        assert!(
            text(&o).contains("holds a PMBD block device") && text(&o).contains("--force"),
            "{}",
            text(&o)
        );
    }
    assert_eq!(pmkit(&["check", ps]).status.code(), Some(0));

    // Corrupt one block's data: check names it and fails.
    let data_off = sb["layout"]["data_off"].as_u64().unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[(data_off + 3 * 512 + 7) as usize] ^= 0xff;
    std::fs::write(&p, &bytes).unwrap();
    let o = pmkit(&["check", ps, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["clean"], false);
    assert_eq!(r["report"]["bad_block_list"], serde_json::json!([3]));
    bytes[(data_off + 3 * 512 + 7) as usize] ^= 0xff;
    std::fs::write(&p, &bytes).unwrap();

    // An open that never closed: info and check say so; --mark-clean accepts it.
    let dev = pmkit_blk::open_path(&p, &pmkit_blk::EngineOptions::default()).unwrap();
    let o = pmkit(&["info", ps]);
    assert!(
        text(&o).contains("in use by another process"),
        "{}",
        text(&o)
    );
    assert_eq!(
        pmkit(&["check", ps]).status.code(),
        Some(2),
        "check refuses a device in use"
    );
    drop(dev);
    let o = pmkit(&["check", ps]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("not shut down cleanly"), "{}", text(&o));
    assert_eq!(pmkit(&["check", ps, "--mark-clean"]).status.code(), Some(0));
    assert_eq!(pmkit(&["check", ps]).status.code(), Some(0));

    // Not a device at all.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![7u8; 1 << 16]).unwrap();
    let o = pmkit(&["check", junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("not a pmkit block device"),
        "{}",
        text(&o)
    );
    let o = pmkit(&["info", junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("not a pmkit block device"),
        "{}",
        text(&o)
    );
}
