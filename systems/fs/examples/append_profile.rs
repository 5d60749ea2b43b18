//! A profiling loop, not a benchmark of record (that is `pmkit bench fs-protect`): 4 KiB appends
//! plus fsync into one file on a populated pool in /dev/shm, protection `none`, for `perf`.
//!
//! `cargo run --release -p pmkit-fs --example append_profile [-- SECONDS]` (default 3).

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
        protect: Protect::None,
        ..Default::default()
    };
    let (fs, _) = Fs::mount(r, &mo).expect("mount");
    let f = fs.create(ROOT, b"f", 0o644).expect("create").ino;
    let buf = vec![0x5au8; 4096];
    let (t0, mut n, mut size) = (Instant::now(), 0u64, 0u64);
    while t0.elapsed() < Duration::from_secs(secs) {
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
