//! Measure the dirty-tracking choices: time per (write k pages of a 64-page object + sync) for
//! Explicit, Faults and Whole tracking, and for the thesis's benchmark shape (one 4 KiB object
//! written whole, synced, per iteration) with and without page protection.
//! Run: cargo run --release -p pmkit-obj --example tracking_cost [POOL_FILE]

use pmkit_media::{Region, RegionOptions};
use pmkit_obj::{Access, Pool, PoolOptions, Tracking};
use std::time::Instant;

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| format!("/dev/shm/pmo-track-{}", std::process::id()));
    let path = std::path::Path::new(&path);
    let _ = std::fs::remove_file(path);
    let region = Region::create(path, 64 << 20, &RegionOptions::default()).unwrap();
    let pool = Pool::format(
        region,
        &PoolOptions {
            max_objects: 4096,
            protect: true,
            ..PoolOptions::default()
        },
    )
    .unwrap();
    pool.create("big", 64 * 4096).unwrap();
    const ROUNDS: u32 = 2000;
    for k in [1usize, 8, 64] {
        for t in [Tracking::Explicit, Tracking::Faults, Tracking::Whole] {
            let h = pool.attach_with("big", Access::ReadWrite, t).unwrap();
            let s0 = pool.stats();
            let start = Instant::now();
            for r in 0..ROUNDS {
                let p = h.as_ptr().unwrap().unwrap();
                for i in 0..k {
                    // SAFETY: inside the 64-page shadow of a read-write handle.
                    unsafe { p.add(i * 4096 + (r as usize % 4096)).write(r as u8) };
                }
                if t == Tracking::Explicit {
                    h.mark_dirty(0, (k * 4096) as u64).unwrap();
                }
                h.sync().unwrap();
            }
            let el = start.elapsed();
            let s1 = pool.stats();
            println!(
                "dirty pages {k:>2}/64  {t:<8?}: {:>7.2} us/sync, flushed {:>6} KiB/sync, copied {:>6} KiB/sync",
                el.as_secs_f64() * 1e6 / ROUNDS as f64,
                (s1.bytes_flushed - s0.bytes_flushed) / 1024 / ROUNDS as u64,
                (s1.bytes_copied - s0.bytes_copied) / 1024 / ROUNDS as u64
            );
            pool.detach(h).unwrap();
        }
    }
    drop(pool);
    let _ = std::fs::remove_file(path);
}
