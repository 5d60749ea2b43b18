//! The C ABI end to end: compile examples/pmfs_example.c against include/pmfs.h and the cdylib
//! this build produced (`cargo build` makes libpmfs.so; `cargo test` alone does not), run it
//! on a pool in /dev/shm and check what it printed; then `pmkit fs check` semantics through the
//! library: the pool it left is clean and holds the renamed log.

use pmkit_fs::{Fs, Kind, MountOptions};
use pmkit_media::{Region, RegionOptions};
use std::path::PathBuf;
use std::process::Command;

fn build(dir: &std::path::Path) -> Option<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    pmkit_testkit::cexample::build(
        &manifest.join("examples/pmfs_example.c"),
        &manifest.join("include"),
        "pmfs",
        &dir.join("pmfs_example"),
    )
}

#[test]
fn c_example_builds_and_runs() {
    let dir = pmkit_testkit::scratch();
    let Some(bin) = build(dir.path()) else {
        return;
    };
    let pool = dir.path().join("pool");
    let run = Command::new(&bin).arg(&pool).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{:?}\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    for want in [
        "second mount: refused (EBUSY)",
        "size after remount: 1100 bytes, links 1",
        "record 42 reads: record 042",
        "latest -> app.log.1",
        "through the map: direct store",
        "huge flag of a new file: 0",
        "huge flag after pmfs_set_huge: 1",
        "one byte written: 2097152 bytes allocated",
        "4 MiB mapped: 4194304 bytes in 2 MiB blocks, 2 MiB-aligned",
        "huge flag of a directory: EINVAL",
        "checksummed: 1, first bytes read back: yes",
        "map of a checksummed file: EINVAL",
        "entries in /logs: 4",
        "  latest@",
        "after chmod and utimens: mode 600, mtime 2000",
        "user 54321 opens a 0600 file it does not own: EACCES",
        "user 54321 chmods it: EPERM",
        "after chown to user 54321, read and write: allowed",
        "read of a closed descriptor: EBADF",
        "open of a missing file: ENOENT",
        "rmdir of a non-empty directory: ENOTEMPTY",
    ] {
        assert!(stdout.contains(want), "{want:?} missing:\n{stdout}");
    }
    assert!(stdout.trim_end().ends_with("ok"), "{stdout}");
    // The pool is clean, checks clean, and holds what the program left.
    let region = Region::open(&pool, &RegionOptions::default()).unwrap();
    let report = pmkit_fs::check(&region);
    assert!(report.problems.is_empty(), "{report:?}");
    let (fs, rec) = Fs::mount(region, &MountOptions::default()).unwrap();
    assert!(rec.was_clean, "pmfs_unmount marked the pool clean");
    let logs = fs.lookup(pmkit_fs::ROOT, b"logs").unwrap();
    let log = fs.lookup(logs.ino, b"app.log.1").unwrap();
    assert_eq!((log.kind, log.size), (Kind::File, 1100));
    assert_eq!(
        (log.mode, log.uid, log.mtime),
        (0o600, 54321, 2_000_000_000_000)
    );
    assert_eq!(fs.read(log.ino, 0, 11).unwrap(), b"record 000\n");
    let huge = fs.lookup(pmkit_fs::ROOT, b"huge").unwrap();
    assert!(huge.huge, "the flag survives the unmount");
    assert_eq!(
        (huge.size, huge.blocks),
        (4 << 20, 1025),
        "two huge blocks and a node"
    );
}
