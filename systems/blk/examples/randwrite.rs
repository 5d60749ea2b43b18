//! 4 KiB random-write cost of each protection mode × write scheme on this machine.
//!
//! One thread writes 4 KiB blocks at random offsets of a 64 MiB device in /dev/shm (a tmpfs
//! file: emulated PM) while a second thread of the process spins, so page-table changes cost
//! what they cost in a multi-threaded server (TLB shootdowns). Each cell is the wall time of
//! the writes plus one final FLUSH, divided by the number of writes (median of 3 runs).
//!
//! cargo run --release -p pmkit-blk --example randwrite [-- --json] [-- --ops N]

use pmkit_blk::{CreateOptions, EngineOptions, Protect, WriteScheme};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let ops: u64 = args
        .iter()
        .position(|a| a == "--ops")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.parse().expect("--ops N"))
        .unwrap_or(20_000);
    let dir = tempfile::Builder::new()
        .prefix("pmkit-randwrite")
        .tempdir_in("/dev/shm")
        .expect("/dev/shm");
    let stop = AtomicBool::new(false);
    let modes: Vec<Protect> = Protect::ALL
        .into_iter()
        .filter(|p| *p != Protect::Pkey || pmkit_media::features().pku)
        .collect();
    let schemes: Vec<WriteScheme> = WriteScheme::ALL
        .into_iter()
        .filter(|w| w.available())
        .collect();
    let mut rows = vec![];
    let mut raw = 0.0;
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let mut r: Vec<f64> = (0..3).map(|r| raw_nt(&dir, ops, r)).collect();
        r.sort_by(f64::total_cmp);
        raw = r[1];
        for &protect in &modes {
            let mut row = vec![];
            for &write in &schemes {
                let mut runs: Vec<f64> =
                    (0..3).map(|r| one(&dir, protect, write, ops, r)).collect();
                runs.sort_by(f64::total_cmp);
                row.push(runs[1]);
            }
            rows.push((protect, row));
        }
        stop.store(true, Ordering::Relaxed);
    });
    if json {
        let mut v: Vec<_> = rows
            .iter()
            .flat_map(|(p, row)| {
                row.iter().zip(&schemes).map(move |(ns, w)| {
                    serde_json::json!({"protect": p.name(), "write": w.name(), "ns_per_write": ns})
                })
            })
            .collect();
        v.push(serde_json::json!({"protect": "raw-media", "write": "nt", "ns_per_write": raw}));
        println!("{}", serde_json::to_string_pretty(&v).unwrap());
        return;
    }
    println!("4 KiB random write, ns/op (1 writer + 1 spinning thread, {ops} writes, 64 MiB device in /dev/shm)");
    print!("{:<10}", "protect");
    for w in &schemes {
        print!("{:>11}", w.name());
    }
    println!();
    for (p, row) in &rows {
        print!("{:<10}", p.name());
        for ns in row {
            print!("{ns:>11.0}");
        }
        println!();
    }
    println!("baseline without the engine (Region::write_nt + sfence at random 4 KiB offsets): {raw:.0} ns/op");
}

/// The same writes straight to a mapped region, to separate the engine's cost from the machine's.
fn raw_nt(dir: &tempfile::TempDir, ops: u64, run: u32) -> f64 {
    use pmkit_media::{Fence, Media, Region, RegionOptions};
    let path = dir.path().join(format!("raw-{run}"));
    let r = Region::create(
        &path,
        64 << 20,
        &RegionOptions {
            populate: true,
            ..Default::default()
        },
    )
    .unwrap();
    let blocks = (64u64 << 20) / 4096;
    let buf = vec![0x5au8; 4096];
    let mut rng = SmallRng::seed_from_u64(run as u64);
    let t = Instant::now();
    for _ in 0..ops {
        r.write_nt((rng.gen_range(0..blocks) * 4096) as usize, &buf);
        r.fence(Fence::Sfence);
    }
    let ns = t.elapsed().as_nanos() as f64 / ops as f64;
    drop(r);
    std::fs::remove_file(&path).unwrap();
    ns
}

fn one(dir: &tempfile::TempDir, protect: Protect, write: WriteScheme, ops: u64, run: u32) -> f64 {
    let path = dir.path().join(format!("{protect}-{write}-{run}"));
    let engine = EngineOptions {
        protect: Some(protect),
        write,
        populate: true,
        ..Default::default()
    };
    let dev = pmkit_blk::create_path(&path, Some(64 << 20), &CreateOptions::default(), &engine)
        .expect("create");
    let blocks = dev.capacity() / 4096;
    let buf = vec![0x5au8; 4096];
    let mut rng = SmallRng::seed_from_u64(run as u64);
    for _ in 0..ops / 10 {
        dev.write(rng.gen_range(0..blocks) * 4096, &buf, false)
            .unwrap();
    }
    dev.flush().unwrap();
    let t = Instant::now();
    for _ in 0..ops {
        dev.write(rng.gen_range(0..blocks) * 4096, &buf, false)
            .unwrap();
    }
    dev.flush().unwrap();
    let ns = t.elapsed().as_nanos() as f64 / ops as f64;
    dev.close().unwrap();
    drop(dev);
    std::fs::remove_file(&path).unwrap();
    ns
}
