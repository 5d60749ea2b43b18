//! A sanity measurement, not a benchmark of record: sequential 2 MiB writes into fresh files
//! on a pool in /dev/shm, with 2 MiB blocks (the default) and with 4 KiB blocks only
//! (`MountOptions::small_blocks`), alternating rounds, median MiB/s of each.
//!
//! `cargo run --release -p pmkit-fs --example huge_write [-- FILE_MIB ROUNDS PROTECT]`
//! (defaults 256, 5, auto; PROTECT: auto, none, kernel).

use pmkit_fs::{Fs, MkfsOptions, MountOptions, Protect, ROOT};
use pmkit_media::{Region, RegionOptions};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let file_mib: u64 = args.first().map_or(256, |a| a.parse().expect("FILE_MIB"));
    let rounds: usize = args.get(1).map_or(5, |a| a.parse().expect("ROUNDS"));
    let protect = Protect::parse_choice(args.get(2).map_or("auto", |s| s.as_str()))
        .expect("PROTECT: auto or a mode");
    let dir = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm");
    let pool = dir.path().join("pool");
    let len = (file_mib + 64) << 20;
    let chunk = vec![0x5au8; 2 << 20];
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut mode = String::new();
    for round in 0..rounds * 2 {
        let small = round % 2 == 1;
        let r = Region::create(&pool, len, &RegionOptions::default()).expect("pool");
        Fs::mkfs(&r, &MkfsOptions::default()).expect("mkfs");
        let o = MountOptions {
            small_blocks: small,
            protect,
            ..MountOptions::default()
        };
        let (fs, _) = Fs::mount(r, &o).expect("mount");
        mode = format!("{:?}", fs.protection().0);
        let f = fs.create(ROOT, b"f", 0o644).expect("create");
        let t = Instant::now();
        for i in 0..file_mib / 2 {
            fs.write(f.ino, i * (2 << 20), &chunk).expect("write");
        }
        let s = t.elapsed().as_secs_f64();
        let blocks = fs.getattr(f.ino).expect("getattr").blocks;
        let want = file_mib * 256 + if small { file_mib / 2 + 1 } else { 1 };
        assert!(
            file_mib < 4 || blocks == want,
            "small {small}: {blocks} blocks"
        );
        rates[small as usize].push(file_mib as f64 / s);
        drop(fs.unmount());
        std::fs::remove_file(&pool).expect("remove pool");
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (h, s) = (median(&mut rates[0]), median(&mut rates[1]));
    println!("protect {mode}, {file_mib} MiB per file, {rounds} rounds each, median:");
    println!("  2 MiB blocks: {h:8.0} MiB/s");
    println!("  4 KiB blocks: {s:8.0} MiB/s");
    println!("  ratio:        {:8.2}x", h / s);
}
