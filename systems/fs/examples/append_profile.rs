//! A profiling loop, not a benchmark of record (that is `pmkit bench fs-protect`): 4 KiB appends
//! plus fsync into one file on a populated pool in /dev/shm, protection `none`, for `perf`.
//!
//! `cargo run --release -p pmkit-fs --example append_profile [-- SECONDS [COUNT]]` (default 3
//! seconds; with COUNT, exactly COUNT appends after 1,000 to warm up: for
//! `valgrind --tool=callgrind`, instructions per append).

use pmkit_fs::{Fs, MkfsOptions, MountOptions, Protect, SetAttr, ROOT};
use pmkit_media::{Region, RegionOptions};
use std::time::{Duration, Instant};

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .map_or(3, |a| a.parse().expect("SECONDS"));
    let dir = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm");
    let opts = RegionOptions {
        populate: true,
        ..Default::default()
    };
    let r = Region::create(&dir.path().join("pool"), 64 << 20, &opts).expect("pool");
    Fs::mkfs(&r, &MkfsOptions::default()).expect("mkfs");
    let mo = MountOptions {
        protect: Some(Protect::None),
        ..Default::default()
    };
    let (fs, _) = Fs::mount(r, &mo).expect("mount");
    let count: Option<u64> = std::env::args().nth(2).map(|a| a.parse().expect("COUNT"));
    let f = fs.create(ROOT, b"f", 0o644).expect("create").ino;
    // open, as a writer would be: the last close trims the preallocation
    fs.open(f).expect("open");
    let buf = vec![0x5au8; 4096];
    let (t0, mut n, mut size) = (Instant::now(), 0u64, 0u64);
    let more = |n: u64| match count {
        Some(c) => n < c + 1000,
        None => t0.elapsed() < Duration::from_secs(secs),
    };
    while more(n) {
        if size >= 16 << 20 {
            let cut = SetAttr {
                size: Some(0),
                ..Default::default()
            };
            fs.setattr(f, &cut).expect("truncate");
            size = 0;
        }
        fs.write(f, size, &buf).expect("write");
        fs.fsync(f).expect("fsync");
        size += 4096;
        n += 1;
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("{n} appends, {us:.2} µs each (truncates included)");
}
