//! Many threads allocate, write, check and free in several tags while another thread keeps
//! rebalancing with changing profiles and priorities (so regions move under them and new regions
//! displace old ones): no deadlock, no lost bytes, every invariant holds at the end.

mod common;
use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};

#[test]
fn allocators_and_rebalance_run_together() {
    let f = fixture(64, 64, 3);
    let x = &f.xmem;
    let tags: Vec<_> = (0..4).map(|i| x.tag(&format!("t{i}")).unwrap()).collect();
    let stop = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..3u64)
            .map(|w| {
                let (tags, started) = (&tags, &started);
                s.spawn(move || {
                    while !started.load(Ordering::Acquire) {
                        std::thread::yield_now(); // the mover is running before we start
                    }
                    let mut rng = SmallRng::seed_from_u64(w);
                    let mut live = Vec::new();
                    for n in 0..4000u32 {
                        if live.len() < 200 && rng.gen_bool(0.6) {
                            let t = tags[rng.gen_range(0..tags.len())];
                            let size = if rng.gen_bool(0.9) {
                                rng.gen_range(1..2048)
                            } else {
                                rng.gen_range(8193..200_000)
                            };
                            let p = x.alloc(t, size, 16).unwrap();
                            let seed = (n as u8) ^ (w as u8);
                            fill(p.as_ptr(), size, seed);
                            live.push((p, size, seed));
                        } else if !live.is_empty() {
                            let (p, size, seed) = live.swap_remove(rng.gen_range(0..live.len()));
                            assert!(holds(p.as_ptr(), size, seed), "bytes changed");
                            // SAFETY: a live object of this thread, freed once.
                            unsafe { x.free(p) }.unwrap();
                        }
                    }
                    // Hand the survivors back as addresses (raw pointers are not Send).
                    live.into_iter()
                        .map(|(p, size, seed)| (p.as_ptr() as usize, size, seed))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mover = s.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(99);
            let mut moved = 0;
            while !stop.load(Ordering::Relaxed) {
                let t = tags[rng.gen_range(0..tags.len())];
                x.set_profile(
                    t,
                    [rng.gen_range(0.0..100.0), rng.gen_range(0.0..100.0), 0.0],
                )
                .unwrap();
                x.set_priority(t, rng.gen_range(0..2)).unwrap();
                let r = x.rebalance().unwrap();
                moved += r.to_fast.len() + r.to_slow.len();
                started.store(true, Ordering::Release);
            }
            moved
        });
        let mut all = Vec::new();
        for h in workers {
            all.extend(h.join().unwrap());
        }
        stop.store(true, Ordering::Relaxed);
        let moved = mover.join().unwrap();
        assert!(moved > 0, "no region moved while the workers ran");
        eprintln!("regions moved during the run: {moved}");
        for (p, size, seed) in all {
            assert!(holds(p as *const u8, size, seed), "bytes changed");
        }
    });
    x.check_invariants();
    let (slots, used) = x.fast_slots();
    assert!(used <= slots);
}
