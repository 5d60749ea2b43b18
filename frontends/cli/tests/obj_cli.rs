//! `pmkit obj` with page checksums, as a user runs it: a pool made with `--checksum` says so,
//! and a flipped byte in an object's published data makes `obj check` fail naming the object
//! and `obj dump` refuse the data instead of printing it.

mod serve_util;

use serve_util::*;

#[test]
fn a_checksummed_pool_refuses_a_damaged_page_and_check_names_it() {
    let dir = shm_dir("pmkit-cli-obj");
    let pool = dir.path().join("pool");
    let p = pool.to_str().unwrap();
    let data = dir.path().join("data");
    // A pattern that occurs nowhere else in the pool file.
    let pattern: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(131) % 251) as u8 | 1)
        .collect();
    std::fs::write(&data, &pattern).unwrap();
    let out = text(&pmkit(&["obj", "create", p, "--size", "8M", "--checksum"]));
    assert!(out.contains("page checksums"), "{out}");
    let info = text(&pmkit(&["obj", "info", p]));
    assert!(info.contains("page checksums: yes"), "{info}");
    for args in [
        vec!["obj", "new", p, "a", "--size", "8192"],
        vec!["obj", "new", p, "b", "--size", "4096"],
        vec!["obj", "put", p, "a", "--from", data.to_str().unwrap()],
    ] {
        let o = pmkit(&args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let o = pmkit(&["obj", "check", p]);
    assert!(o.status.success(), "{}", text(&o));
    // Flip one byte of object a's published page behind the library's back.
    let mut image = std::fs::read(&pool).unwrap();
    let at = image
        .windows(pattern.len())
        .position(|w| w == pattern.as_slice())
        .expect("the object's data is in the pool file");
    image[at + 100] ^= 0x40;
    std::fs::write(&pool, &image).unwrap();
    let o = pmkit(&["obj", "check", p]);
    let report = text(&o);
    assert!(!o.status.success(), "check must fail: {report}");
    assert!(
        report.contains("\"a\"") && report.contains("checksum"),
        "check must name the object and the checksum: {report}"
    );
    let o = pmkit(&["obj", "dump", p, "a"]);
    assert!(!o.status.success(), "dump must refuse damaged data");
    assert!(
        o.stdout.windows(64).all(|w| w != &pattern[..64]),
        "dump printed data from a page that failed its checksum"
    );
    // The undamaged object is still served.
    let o = pmkit(&["obj", "dump", p, "b"]);
    assert!(o.status.success(), "{}", text(&o));
}
