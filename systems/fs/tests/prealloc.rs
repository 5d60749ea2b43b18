//! Preallocation held by files that are never closed (the FUSE mount under `--cache long`
//! holds every file the kernel caches open) is space other files may use: a write that finds
//! none trims it and goes on, and no more than 512 files hold it at once.

use pmkit_fs::{Error, Fs, MkfsOptions, MountOptions, ROOT};
use pmkit_media::Region;

fn fresh(len: usize) -> Fs<Region> {
    let r = Region::anonymous(len).unwrap();
    Fs::mkfs(&r, &MkfsOptions::default()).unwrap();
    Fs::mount(r, &MountOptions::default()).unwrap().0
}

/// Files given preallocation (two appends each that need a block), kept open.
fn held_files(fs: &Fs<Region>, n: usize) {
    for i in 0..n {
        let f = fs
            .create(ROOT, format!("held{i}").as_bytes(), 0o644)
            .unwrap();
        fs.open(f.ino).unwrap();
        fs.write(f.ino, 0, &[1u8; 4096]).unwrap();
        fs.write(f.ino, 4096, &[2u8; 4096]).unwrap();
    }
}

/// Append 64 KiB pieces to a new file until the space runs out: the bytes written.
fn fill(fs: &Fs<Region>) -> u64 {
    let f = fs.create(ROOT, b"big", 0o644).unwrap();
    let piece = vec![7u8; 64 << 10];
    let mut off = 0u64;
    loop {
        match fs.write(f.ino, off, &piece) {
            Ok(_) => off += piece.len() as u64,
            Err(Error::NoSpace) => return off,
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn preallocation_of_open_files_gives_way_to_a_write() {
    // The same 200 small files, closed in one pool and held open in the other.
    let closed = fresh(32 << 20);
    held_files(&closed, 200);
    for i in 0..200 {
        let ino = closed
            .lookup(ROOT, format!("held{i}").as_bytes())
            .unwrap()
            .ino;
        closed.release(ino).unwrap();
    }
    let held = fresh(32 << 20);
    held_files(&held, 200);
    let (a, b) = (fill(&closed), fill(&held));
    // Without the trim, the held files' windows (16 blocks each) took most of the pool.
    assert!(
        b + (1 << 20) >= a,
        "held open: {b} bytes written, closed: {a}"
    );
    for i in 0..200 {
        let ino = held
            .lookup(ROOT, format!("held{i}").as_bytes())
            .unwrap()
            .ino;
        let buf = held.read(ino, 0, 8192).unwrap();
        assert_eq!(buf.len(), 8192);
        assert!(buf[..4096].iter().all(|&x| x == 1) && buf[4096..].iter().all(|&x| x == 2));
    }
}

#[test]
fn at_most_512_files_hold_preallocation() {
    let fs = fresh(256 << 20);
    held_files(&fs, 600);
    let free = fs.statfs().free_blocks;
    // 600 files of 2 blocks, each with a window of 16: at most 512 windows stay.
    let used_by_files = 600 * 2 + 512 * 14;
    let fresh_free = fresh(256 << 20).statfs().free_blocks;
    assert!(
        fresh_free - free <= used_by_files as u64 + 700,
        "{} blocks in use for 600 files",
        fresh_free - free
    );
}
