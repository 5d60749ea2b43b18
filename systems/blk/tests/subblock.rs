//! Sub-block requests (`read_bytes`/`write_bytes`/`write_zeroes_bytes`): byte-exact against a
//! model, and no lost update when writers patch different bytes of one block at once.

mod common;

use common::*;
use pmkit_blk::{CreateOptions, Device, Protect, WriteScheme};
use pmkit_media::Region;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::{Arc, Barrier};

const SIZE: u64 = 4 << 20;
const SECTOR: usize = 512;

fn device(dir: &tempfile::TempDir, name: &str, create: &CreateOptions) -> Device<Region> {
    new_device(
        dir,
        name,
        SIZE,
        create,
        &engine(Protect::None, WriteScheme::Nt),
    )
    .1
}

/// Every configuration a partial block goes through differently: plain, checksummed, atomic,
/// and pt-batch (whose reads may come from a DRAM buffer).
fn configurations() -> Vec<(&'static str, CreateOptions, pmkit_blk::EngineOptions)> {
    let plain = CreateOptions::default();
    let checksum = CreateOptions {
        checksum: true,
        ..Default::default()
    };
    let atomic = CreateOptions {
        atomic: true,
        checksum: true,
        ..Default::default()
    };
    let none = engine(Protect::None, WriteScheme::Nt);
    let batch = engine(Protect::PtBatch, WriteScheme::Nt);
    vec![
        ("plain", plain, none.clone()),
        ("checksum", checksum, none.clone()),
        ("atomic", atomic, none),
        ("pt-batch", plain, batch),
    ]
}

#[test]
fn byte_requests_match_a_model() {
    let dir = shm_dir();
    for (name, create, eng) in configurations() {
        let (_, dev) = new_device(&dir, name, SIZE, &create, &eng);
        let mut model = vec![0u8; 1 << 20];
        let mut rng = SmallRng::seed_from_u64(0x5eb_b10c + name.len() as u64);
        for step in 0..400 {
            let off = rng.gen_range(0..model.len() - 1);
            let len = rng.gen_range(1..=(model.len() - off).min(3 * 4096 + 700));
            match step % 4 {
                0 | 1 => {
                    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    dev.write_bytes(off as u64, &data, step % 8 == 1).unwrap();
                    model[off..off + len].copy_from_slice(&data);
                }
                2 => {
                    dev.write_zeroes_bytes(off as u64, len as u64, false)
                        .unwrap();
                    model[off..off + len].fill(0);
                }
                _ => {
                    let mut got = vec![0xAAu8; len];
                    dev.read_bytes(off as u64, &mut got).unwrap();
                    assert!(
                        got == model[off..off + len],
                        "{name}: step {step}: read of {len} bytes at {off} differs from the model"
                    );
                }
            }
        }
        let mut all = vec![0u8; model.len()];
        dev.read(0, &mut all).unwrap();
        assert!(
            all == model,
            "{name}: whole-device read differs from the model"
        );
        assert!(
            dev.stats().partial_blocks > 0,
            "{name}: no block was patched"
        );
        dev.close().unwrap();
    }
}

#[test]
fn byte_requests_are_checked() {
    let dir = shm_dir();
    let dev = device(&dir, "bounds", &CreateOptions::default());
    let cap = dev.capacity();
    let mut b = [0u8; 10];
    assert!(matches!(
        dev.read_bytes(cap - 5, &mut b),
        Err(pmkit_blk::BlkError::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.write_bytes(7, &[], false),
        Err(pmkit_blk::BlkError::ZeroLength { .. })
    ));
    assert!(dev.write_bytes(cap - 10, &b, false).is_ok());
    dev.close().unwrap();
}

const WRITERS: usize = 4;
const ROUNDS: usize = 300;

/// After `round`, every sector holds the value its writer stored in that round.
fn check_round(dev: &Device<Region>, round: usize) -> Result<(), String> {
    let value = |w: usize| (round * WRITERS + w) as u8 | 1;
    let mut block = vec![0u8; 4096];
    dev.read(3 * 4096, &mut block).unwrap();
    for w in 0..WRITERS {
        if !block[w * SECTOR..(w + 1) * SECTOR]
            .iter()
            .all(|&x| x == value(w))
        {
            return Err(format!("sector {w} of block 3 lost its write"));
        }
    }
    let mut two = vec![0u8; 8192];
    dev.read(5 * 4096, &mut two).unwrap();
    if !two[4096 - 256..4096 + 256].iter().all(|&x| x == value(0)) {
        return Err("the write straddling blocks 5 and 6 lost bytes".into());
    }
    for w in 1..WRITERS {
        let at = 4096 + w * SECTOR;
        if !two[at..at + SECTOR].iter().all(|&x| x == value(w)) {
            return Err(format!("sector {w} of block 6 lost its write"));
        }
    }
    Ok(())
}

/// Threads write different 512-byte sectors of the same 4 KiB blocks, many times, each with a
/// value that names the round: after every round each sector must hold its own writer's
/// value. A read-modify-write outside the device's locks loses sectors here.
#[test]
fn concurrent_sector_writes_to_one_block_all_survive() {
    let dir = shm_dir();
    for (name, create, eng) in configurations() {
        let (_, dev) = new_device(&dir, name, SIZE, &create, &eng);
        let dev = Arc::new(dev);
        let barrier = Arc::new(Barrier::new(WRITERS));
        let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (dev, barrier) = (Arc::clone(&dev), Arc::clone(&barrier));
                let failures = Arc::clone(&failures);
                std::thread::spawn(move || {
                    for round in 0..ROUNDS {
                        barrier.wait();
                        let value = [(round * WRITERS + w) as u8 | 1; SECTOR];
                        // Sector w of block 3, and a piece straddling blocks 5 and 6 (writer 0
                        // spans the boundary, the others patch inside block 6).
                        dev.write_bytes((3 * 4096 + w * SECTOR) as u64, &value, false)
                            .unwrap();
                        let straddle = if w == 0 {
                            6 * 4096 - 256
                        } else {
                            6 * 4096 + w * SECTOR
                        };
                        dev.write_bytes(straddle as u64, &value, false).unwrap();
                        barrier.wait();
                        // Writer 0 checks while the others wait at the next round's barrier; a
                        // failure is recorded, not panicked, so no writer is left waiting.
                        if w == 0 {
                            if let Err(e) = check_round(&dev, round) {
                                failures.lock().unwrap().push(format!("round {round}: {e}"));
                            }
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join()
                .unwrap_or_else(|_| panic!("{name}: a writer failed"));
        }
        let failures = failures.lock().unwrap();
        assert!(
            failures.is_empty(),
            "{name}: {} of {ROUNDS} rounds lost a concurrent sub-block write, first: {}",
            failures.len(),
            failures[0]
        );
        Arc::try_unwrap(dev).ok().unwrap().close().unwrap();
    }
}
