//! A sparse pool file (made by `truncate`, or copied without its holes) would take its missing
//! blocks at the first store into each: on a full file system that store is a SIGBUS, which no
//! protection mode can turn into an error. A read-write open allocates the holes first, and
//! says plainly when the file system has no room.

use pmkit_media::Region;
use std::os::unix::fs::MetadataExt;
use std::process::Command;

#[test]
fn a_sparse_file_is_allocated_at_open() {
    let dir = pmkit_testkit::scratch();
    let p = dir.path().join("sparse");
    std::fs::File::create(&p).unwrap().set_len(1 << 20).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().blocks(), 0);
    // Read-only opens change nothing.
    drop(Region::open_read_only(&p).unwrap());
    assert_eq!(std::fs::metadata(&p).unwrap().blocks(), 0);
    drop(Region::open(&p, &Default::default()).unwrap());
    assert_eq!(std::fs::metadata(&p).unwrap().blocks() * 512, 1 << 20);
}

/// On a 1 MiB tmpfs a 4 MiB sparse file cannot be allocated: the open fails, naming the file
/// and what to do, and leaves the file as it was. Needs root (to mount the tmpfs); skipped
/// without it, except in CI, where it fails.
#[test]
fn a_sparse_file_on_a_full_file_system_is_refused_at_open() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "this test needs root in CI"
        );
        eprintln!("skipped: needs root to mount a small tmpfs");
        return;
    }
    let dir = pmkit_testkit::scratch();
    let mnt = dir.path();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1M", "pmkit-test"])
        .arg(mnt)
        .status()
        .unwrap();
    assert!(st.success());
    let p = mnt.join("pool");
    std::fs::File::create(&p).unwrap().set_len(4 << 20).unwrap();
    let e = Region::open(&p, &Default::default()).err();
    let len = std::fs::metadata(&p).unwrap().len();
    let _ = Command::new("umount").arg(mnt).status();
    let e = e.expect("a 4 MiB sparse file on a 1 MiB file system must be refused");
    let msg = e.to_string();
    assert!(
        msg.contains("pool") && msg.contains("sparse") && msg.contains("No space"),
        "{msg}"
    );
    assert_eq!(len, 4 << 20);
}
