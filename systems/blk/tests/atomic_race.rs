//! Concurrency property of atomic devices: readers racing writers on the same blocks never see
//! a mix of two writes (or a block reused under them), in every protection mode.
//!
//! Two writers overwrite a few hot blocks (single and multi-block requests, some FUA) and some
//! cold ones (so free blocks cycle through every lane and get reused while readers run); two
//! readers read the hot blocks (single and multi-block). Every value carries (block, write
//! number, word index) in each 8-byte word: a read must decode to one write issued to that
//! block. At the end every block holds the last write of one of the writers, before and after
//! a reopen, the free lists are complete and `check` passes.

mod common;

use common::*;
use parking_lot::Mutex;
use pmkit_blk::{CreateOptions, WriteScheme};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const HOT: u64 = 4;
const BLOCKS: u64 = 64;
const WRITERS: u64 = 2;
const READERS: u64 = 2;

fn race(protect: pmkit_blk::Protect, write: WriteScheme, bs: u32, seed: u64, ops: u64) {
    let dir = shm_dir();
    let create = CreateOptions {
        block_size: bs,
        atomic: true,
        ..Default::default()
    };
    let eng = engine(protect, write);
    let (path, dev) = new_device(&dir, "race", 1 << 20, &create, &eng);
    let bsz = bs as usize;
    let spare = dev.info().superblock.layout.spare;
    // Per block: every write number issued to it (registered before the write starts).
    let issued: Vec<Mutex<HashSet<u64>>> = (0..BLOCKS)
        .map(|_| Mutex::new(HashSet::from([0])))
        .collect();
    // Per writer and block: its last completed write.
    let last: Vec<Vec<AtomicU64>> = (0..WRITERS)
        .map(|_| (0..BLOCKS).map(|_| AtomicU64::new(0)).collect())
        .collect();
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    std::thread::scope(|s| {
        let mut writers = vec![];
        for w in 0..WRITERS {
            let (dev, issued, last) = (&dev, &issued, &last);
            writers.push(s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 100 + w);
                for i in 0..ops {
                    let seq = (w + 1) << 20 | (i + 1);
                    let (b0, n) = if rng.gen_bool(0.7) {
                        let b0 = rng.gen_range(0..HOT);
                        (b0, rng.gen_range(1..=HOT - b0))
                    } else {
                        (rng.gen_range(HOT..BLOCKS), 1)
                    };
                    let mut data = Vec::with_capacity(n as usize * bsz);
                    for b in b0..b0 + n {
                        issued[b as usize].lock().insert(seq);
                        data.extend(stamp(b, seq, bsz));
                    }
                    dev.write(b0 * bs as u64, &data, rng.gen_bool(0.2)).unwrap();
                    for b in b0..b0 + n {
                        last[w as usize][b as usize].store(seq, Ordering::Relaxed);
                    }
                }
            }));
        }
        for r in 0..READERS {
            let (dev, issued, stop, reads) = (&dev, &issued, &stop, &reads);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 1000 + r);
                let mut buf = vec![0u8; HOT as usize * bsz];
                while !stop.load(Ordering::Relaxed) {
                    let b0 = rng.gen_range(0..HOT);
                    let n = rng.gen_range(1..=HOT - b0);
                    let out = &mut buf[..n as usize * bsz];
                    dev.read(b0 * bs as u64, out).unwrap();
                    for (k, blk) in out.chunks(bsz).enumerate() {
                        let b = b0 + k as u64;
                        let v = unstamp(b, blk).unwrap_or_else(|e| {
                            panic!("{protect} {write} bs={bs}: a read saw {e}")
                        });
                        assert!(
                            issued[b as usize].lock().contains(&v),
                            "{protect} {write}: block {b} read write {v}, never issued to it"
                        );
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for h in writers {
            h.join().unwrap();
        }
        // On a loaded machine the writers can finish before a reader is scheduled: let the
        // readers check at least one read of the final state rather than none.
        while reads.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        reads.load(Ordering::Relaxed) > 0,
        "the readers must have run"
    );
    let verify = |dev: &pmkit_blk::Device<pmkit_media::Region>, when: &str| {
        let mut buf = vec![0u8; bsz];
        for b in 0..BLOCKS {
            dev.read(b * bs as u64, &mut buf).unwrap();
            let v = unstamp(b, &buf).unwrap();
            let candidates: Vec<u64> = (0..WRITERS as usize)
                .map(|w| last[w][b as usize].load(Ordering::Relaxed))
                .collect();
            assert!(
                candidates.contains(&v),
                "{protect} {write} {when}: block {b} holds {v}, not a writer's last {candidates:?}"
            );
        }
        assert_eq!(
            dev.free_blocks().len() as u64,
            spare,
            "{protect} {write}: free lists"
        );
    };
    verify(&dev, "after the race");
    dev.close().unwrap();
    drop(dev);
    let rep = pmkit_blk::check_path(&path, false).unwrap();
    assert!(rep.is_clean(), "{protect} {write}: {rep:?}");
    let dev = pmkit_blk::open_path(&path, &eng).unwrap();
    verify(&dev, "after reopen");
    dev.close().unwrap();
}

#[test]
fn readers_racing_writers_never_see_a_mix_in_any_mode() {
    for (i, protect) in modes().into_iter().enumerate() {
        let ops = if protect.needs_region() && protect != pmkit_blk::Protect::Pkey {
            300 // a system call per window: keep it short on a shared machine
        } else {
            2000
        };
        race(protect, WriteScheme::Nt, 512, i as u64, ops);
    }
}

#[test]
fn readers_racing_writers_with_4k_blocks_and_deferred_schemes() {
    race(pmkit_blk::Protect::None, WriteScheme::Wb, 4096, 50, 2000);
    race(pmkit_blk::Protect::None, WriteScheme::Clwb, 4096, 51, 2000);
}
