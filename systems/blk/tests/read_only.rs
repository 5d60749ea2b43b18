//! Read-only devices: opened `O_RDONLY` + `PROT_READ`, every block readable (an atomic device
//! rebuilds its map by a read-only scan), every write refused with `BlkError::ReadOnly`, and
//! the file's bytes exactly as they were after open, reads, refused writes and close; plain
//! and atomic, clean and unclean.

mod common;

use common::*;
use pmkit_blk::{BlkError, CreateOptions, EngineOptions, Protect};
use pmkit_media::WriteScheme;
use std::path::Path;

const SIZE: u64 = 2 << 20;

fn scheme() -> WriteScheme {
    schemes()[0]
}

fn ro() -> EngineOptions {
    EngineOptions {
        read_only: true,
        // Asked for, and ignored read-only (with a note).
        protect: Some(Protect::Pt),
        ..Default::default()
    }
}

/// A device with a known block pattern; `clean` closes it, else it is dropped (unclean).
fn made(dir: &tempfile::TempDir, name: &str, atomic: bool, clean: bool) -> std::path::PathBuf {
    let create = CreateOptions {
        atomic,
        checksum: true,
        ..Default::default()
    };
    let (path, dev) = new_device(dir, name, SIZE, &create, &engine(Protect::None, scheme()));
    let bs = dev.block_size() as usize;
    for b in 0..dev.capacity() / bs as u64 {
        dev.write(b * bs as u64, &pattern(7, b, bs), false).unwrap();
    }
    dev.flush().unwrap();
    if clean {
        dev.close().unwrap();
    }
    drop(dev);
    path
}

fn assert_read_only_open_changes_nothing(path: &Path, clean: bool) {
    let before = std::fs::read(path).unwrap();
    let dev = pmkit_blk::open_path(path, &ro()).unwrap();
    assert!(dev.is_read_only());
    assert_eq!(dev.protect(), Protect::None);
    assert_eq!(
        dev.was_clean(),
        clean,
        "the unclean flag is reported as found"
    );
    let info = dev.info();
    assert!(info.read_only);
    assert_eq!(info.superblock.clean, clean);
    assert!(
        info.notes.iter().any(|n| n.contains("read-only")),
        "{:?}",
        info.notes
    );
    let bs = dev.block_size() as usize;
    let mut all = vec![0u8; dev.capacity() as usize];
    for (b, chunk) in all.chunks_mut(64 << 10).enumerate() {
        dev.read((b * (64 << 10)) as u64, chunk).unwrap();
    }
    for (b, got) in all.chunks(bs).enumerate() {
        assert!(got == pattern(7, b as u64, bs), "block {b} differs");
    }
    let mut part = [0u8; 100];
    dev.read_bytes(10, &mut part).unwrap();
    assert_eq!(part[..], pattern(7, 0, bs)[10..110]);
    // Every kind of write is refused, typed, and maps to EROFS.
    let refused = [
        dev.write(0, &vec![1u8; bs], false),
        dev.write(0, &vec![1u8; bs], true),
        dev.write_bytes(5, &[1u8; 10], false),
        dev.trim(0, bs as u64),
        dev.write_zeroes(0, bs as u64, false),
        dev.write_zeroes_bytes(3, 7, true),
    ];
    for r in refused {
        let e = r.unwrap_err();
        assert!(matches!(e, BlkError::ReadOnly), "{e}");
        assert_eq!(e.errno(), libc::EROFS);
    }
    dev.flush().unwrap();
    assert!(dev.stats().rejected >= 6);
    // A second read-only open may share the file; a read-write one may not.
    let second = pmkit_blk::open_path(path, &ro()).unwrap();
    assert!(matches!(
        pmkit_blk::open_path(path, &engine(Protect::None, scheme())),
        Err(BlkError::Busy { .. })
    ));
    second.close().unwrap();
    dev.close().unwrap();
    drop(dev);
    // Dropped without close: still nothing written.
    drop(pmkit_blk::open_path(path, &ro()).unwrap());
    assert!(
        std::fs::read(path).unwrap() == before,
        "the file's bytes changed"
    );
    // inspect and check (no mark_clean) read only too.
    let (found, in_use) = pmkit_blk::inspect_path(path).unwrap();
    assert!(!in_use);
    assert_eq!(found.current.clean, clean);
    let report = pmkit_blk::check_path(path, false).unwrap();
    assert!(!report.marked_clean);
    assert!(
        std::fs::read(path).unwrap() == before,
        "the file's bytes changed"
    );
}

#[test]
fn plain_device_read_only() {
    let dir = shm_dir();
    let p = made(&dir, "plain", false, true);
    assert_read_only_open_changes_nothing(&p, true);
    let p = made(&dir, "plain-unclean", false, false);
    assert_read_only_open_changes_nothing(&p, false);
}

#[test]
fn atomic_device_read_only() {
    let dir = shm_dir();
    let p = made(&dir, "atomic", true, true);
    assert_read_only_open_changes_nothing(&p, true);
    let p = made(&dir, "atomic-unclean", true, false);
    assert_read_only_open_changes_nothing(&p, false);
}

#[test]
fn read_only_cannot_create() {
    let dir = shm_dir();
    let p = dir.path().join("new");
    let e = pmkit_blk::create_path(&p, Some(SIZE), &CreateOptions::default(), &ro());
    assert!(e.is_err());
    assert!(!p.exists());
}

/// A file the process may only read (mode 0444 and, as root, an O_RDONLY descriptor is all a
/// read-only open needs): open, read, close.
#[test]
fn read_only_open_of_a_read_only_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = shm_dir();
    let p = made(&dir, "ro-file", false, true);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).unwrap();
    let dev = pmkit_blk::open_path(&p, &ro()).unwrap();
    let mut b = vec![0u8; 4096];
    dev.read(4096, &mut b).unwrap();
    assert!(b == pattern(7, 1, 4096));
    dev.close().unwrap();
}
