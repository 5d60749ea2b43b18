//! `pmkit create --atomic`, `info`, `check` and `serve` on an atomic device, as a user runs them.

mod serve_util;

use serve_util::*;

#[test]
fn create_atomic_info_shows_the_layout_and_check_verifies_the_map() {
    let dir = shm_dir("pmkit-cli-atomic");
    let p = dir.path().join("dev");
    let ps = p.to_str().unwrap();
    let o = pmkit(&[
        "create",
        ps,
        "--size",
        "8M",
        "--atomic",
        "--checksum",
        "--protect",
        "none",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("atomic block writes"), "{}", text(&o));

    let v = info_json(&p);
    let l = &v["found"]["current"]["layout"];
    assert_eq!(l["features"], 3, "checksum + atomic: {l}");
    assert_eq!(l["map_off"], 4096);
    assert!(l["spare"].as_u64().unwrap() >= 8, "{l}");
    let o = pmkit(&["info", ps]);
    let t = text(&o);
    assert!(t.contains("atomic        yes"), "{t}");
    assert!(t.contains("map 4096.."), "{t}");
    assert!(t.contains("in its map entry"), "{t}");

    let o = pmkit(&["check", ps]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("0 problems"), "{}", text(&o));

    // Map entry 3 := entry 5: one physical block mapped twice, one lost.
    let mut bytes = std::fs::read(&p).unwrap();
    let at = |b: usize| 4096 + 8 * b;
    let e5: [u8; 8] = bytes[at(5)..at(5) + 8].try_into().unwrap();
    let e3: [u8; 8] = bytes[at(3)..at(3) + 8].try_into().unwrap();
    bytes[at(3)..at(3) + 8].copy_from_slice(&e5);
    std::fs::write(&p, &bytes).unwrap();
    let o = pmkit(&["check", ps, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["report"]["map"]["problems"], 1, "{r}");
    assert!(
        r["report"]["map"]["examples"][0]
            .as_str()
            .unwrap()
            .contains("mapped twice"),
        "{r}"
    );
    let o = pmkit(&["check", ps]);
    assert!(
        text(&o).contains("mapped twice: by blocks 3 and 5"),
        "{}",
        text(&o)
    );
    let o = pmkit(&[
        "serve",
        ps,
        "--socket",
        dir.path().join("s").to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a damaged map is refused: {}",
        text(&o)
    );
    assert!(text(&o).contains("block map"), "{}", text(&o));
    bytes[at(3)..at(3) + 8].copy_from_slice(&e3);
    std::fs::write(&p, &bytes).unwrap();
    assert_eq!(pmkit(&["check", ps]).status.code(), Some(0));
}

#[test]
fn serve_exports_an_atomic_device_and_nbdcopy_round_trips() {
    if !have(&["nbdcopy"]) {
        return;
    }
    let dev = DevFile::new("atomic");
    let o = pmkit(&[
        "create",
        dev.path(),
        "--size",
        "24M",
        "--atomic",
        "--protect",
        "none",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s = Serve::start(dev.path(), &[]);
    let mut data = vec![0u8; 16 << 20];
    fill_random(&mut data, 0x243f_6a88_85a3_08d3);
    nbdcopy_round_trip(&s, &data, 60);
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
    let o = pmkit(&["check", dev.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
