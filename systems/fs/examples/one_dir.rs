//! N files in one directory through the library, on a pool made with mkfs's defaults: the time
//! to create, stat, list and unlink them, the mount walk after a crash, and the process's peak
//! memory. A measurement for docs/fs.md, not a benchmark of record.
//!
//! `cargo run --release -p pmkit-fs --example one_dir [-- FILES POOL_GIB DIR]`
//! (defaults 1000000, 16, /var/tmp: the pool is a file of POOL_GIB there, removed at the end;
//! mkfs's defaults lay out one inode per 16 KiB, and the table grows past that: 1,000,000 files
//! fit a 1 GiB pool).

use pmkit_fs::{Fs, MkfsOptions, MountOptions, ROOT};
use pmkit_media::{Region, RegionOptions};
use std::time::Instant;

/// The process's peak resident memory in KiB (VmHWM).
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args
        .first()
        .map_or(1_000_000, |a| a.parse().expect("FILES"));
    let gib: u64 = args.get(1).map_or(16, |a| a.parse().expect("POOL_GIB"));
    let dir = args.get(2).map_or("/var/tmp", |s| s.as_str());
    let tmp = tempfile::tempdir_in(dir).expect("a directory for the pool");
    let pool = tmp.path().join("pool");
    let r = Region::create(&pool, gib << 30, &RegionOptions::default()).expect("pool");
    Fs::mkfs(&r, &MkfsOptions::default()).expect("mkfs");
    let (fs, _) = Fs::mount(r, &MountOptions::default()).expect("mount");
    println!("pool {gib} GiB in {dir}: {} inodes", fs.statfs().inodes);
    let d = fs.mkdir(ROOT, b"d", 0o755).expect("mkdir").ino;
    let name = |i: u64| format!("file-{i:08}").into_bytes();
    let step = |what: &str, t: Instant| {
        let s = t.elapsed().as_secs_f64();
        println!(
            "{what}: {s:.2} s ({:.2} us per file), peak RSS {} MiB",
            s * 1e6 / n as f64,
            peak_kib() / 1024
        );
    };
    let t = Instant::now();
    for i in 0..n {
        fs.create(d, &name(i), 0o644).expect("create");
    }
    step("create", t);
    let t = Instant::now();
    for i in 0..n {
        let a = fs.lookup(d, &name(i)).expect("lookup");
        fs.getattr(a.ino).expect("stat");
    }
    step("lookup + stat", t);
    let t = Instant::now();
    let listed = fs.readdir(d).expect("readdir").len() as u64;
    assert_eq!(listed, n + 2, "every file listed, with . and ..");
    step("readdir", t);
    // A crash here (no unmount): the next mount walks everything.
    let media = {
        let m = fs;
        let t = Instant::now();
        drop(m);
        let r = Region::open(&pool, &RegionOptions::default()).expect("reopen");
        let (fs, rec) = Fs::mount(r, &MountOptions::default()).expect("mount after a crash");
        assert!(!rec.from_checkpoint);
        step("mount after a crash (full walk)", t);
        fs
    };
    let t = Instant::now();
    for i in 0..n {
        media.unlink(d, &name(i)).expect("unlink");
    }
    step("unlink", t);
    media.unmount();
}
