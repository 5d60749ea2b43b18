//! Where one attach / 1024 int stores / sync / detach cycle of a 4 KiB object spends its time
//! (the `pmkit bench pmo` workload), per shadow, protection setting and page CRCs ("crc":
//! `PoolOptions::checksum`): pass 1 on fresh objects
//! (never synced, so a DRAM shadow is zero-filled instead of copied from PM), pass 2 over the
//! same objects again (the attach copies the object out of PM).
//! Run: cargo run --release -p pmkit-obj --example cycle_cost
//!          [POOL_FILE [LABEL_PART [REPEAT [OBJECTS]]]]
//! (LABEL_PART: only the settings whose label contains it, e.g. "unprotected"; REPEAT: run the
//! passes that many times, for a profiler; OBJECTS: default 4000).

use pmkit_media::{Region, RegionOptions};
use pmkit_obj::{Access, Pool, PoolOptions, Shadow, Tracking};
use std::time::Instant;

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| format!("/dev/shm/pmo-cycle-{}", std::process::id()));
    let path = std::path::Path::new(&path);
    let only = std::env::args().nth(2).unwrap_or_default();
    let repeat: usize = std::env::args()
        .nth(3)
        .map_or(1, |r| r.parse().expect("REPEAT is a number"));
    let objs: usize = std::env::args()
        .nth(4)
        .map_or(4000, |r| r.parse().expect("OBJECTS is a number"));
    for (label, shadow, protect, pkey, checksum) in [
        ("dram, protected, default", Shadow::Dram, true, true, false),
        (
            "dram, protected, default, crc",
            Shadow::Dram,
            true,
            true,
            true,
        ),
        (
            "dram, protected, mprotect",
            Shadow::Dram,
            true,
            false,
            false,
        ),
        ("dram, unprotected", Shadow::Dram, false, true, false),
        ("dram, unprotected, crc", Shadow::Dram, false, true, true),
        ("pm, protected", Shadow::Pm, true, true, false),
        ("pm, unprotected", Shadow::Pm, false, true, false),
        ("pm, unprotected, crc", Shadow::Pm, false, true, true),
    ] {
        if !label.contains(only.as_str()) {
            continue;
        }
        let _ = std::fs::remove_file(path);
        let ro = RegionOptions {
            populate: true,
            ..RegionOptions::default()
        };
        let region = Region::create(
            path,
            (2 * objs as u64) * 4096 + objs as u64 * 128 + (1 << 20),
            &ro,
        )
        .unwrap();
        let opts = PoolOptions {
            max_objects: objs as u32,
            protect,
            shadow,
            pkey,
            // "mprotect" is the page-rights guard; "default" is pkey, else the kernel path.
            kernel: !label.contains("mprotect"),
            checksum,
        };

        let pool = Pool::format(region, &opts).unwrap();
        println!("{label}: object area protection {}", pool.protection());
        let names: Vec<String> = (0..objs).map(|o| format!("o{o}")).collect();
        for n in &names {
            pool.create(n, 4096).unwrap();
        }
        for pass in (0..repeat).flat_map(|_| 1..=2) {
            let mut t = [0f64; 4];
            for (o, n) in names.iter().enumerate() {
                let t0 = Instant::now();
                let h = pool
                    .attach_with(n, Access::ReadWrite, Tracking::Explicit)
                    .unwrap();
                let p = h.as_ptr().unwrap().unwrap().cast::<u32>();
                let t1 = Instant::now();
                for i in 0..1024 {
                    // SAFETY: inside the 4 KiB shadow of a read-write handle, before its sync.
                    unsafe { p.add(i).write_volatile((2 * (o * 1024 + i)) as u32) };
                }
                h.mark_dirty(0, 4096).unwrap();
                let t2 = Instant::now();
                h.sync().unwrap();
                let t3 = Instant::now();
                h.detach().unwrap();
                let t4 = Instant::now();
                for (k, (a, b)) in [(t0, t1), (t1, t2), (t2, t3), (t3, t4)].iter().enumerate() {
                    t[k] += (*b - *a).as_secs_f64();
                }
            }
            let us = |x: f64| x * 1e6 / objs as f64;
            println!(
            "{label:<27} pass {pass}  attach {:5.2} us  stores {:5.2} us  sync {:5.2} us  detach {:5.2} us  total {:5.2} us/object",
            us(t[0]),
            us(t[1]),
            us(t[2]),
            us(t[3]),
            us(t.iter().sum())
        );
        }
        drop(pool);
    }
    let _ = std::fs::remove_file(path);
}
