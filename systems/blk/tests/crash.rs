//! Crash tests on the simulator: random writes, FUA writes, trims, write-zeroes and flushes;
//! at every crash image of every fence, every block whose last write was acknowledged before
//! the last completed FLUSH, or was a completed FUA write, holds exactly its data. Blocks with
//! later unflushed writes hold, line by line, the durable data or one of those writes (plain
//! mode has no block atomicity), or fail their checksum when checksums are on.

mod common;

use parking_lot::Mutex;
use pmkit_blk::{BlkError, CreateOptions, Device, EngineOptions, Protect, WriteScheme};
use pmkit_media::crashsim::{check_every_fence, CrashOpts, CrashSim};
use pmkit_media::{Domain, Media, LINE};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// What the workload has been told, as of the crash point.
#[derive(Default)]
struct Acked {
    created: bool,
    closed: bool,
    /// Per block: the content that must survive ...
    sure: Vec<Vec<u8>>,
    /// ... and writes started since (completed but unflushed, or in flight).
    later: Vec<Vec<Vec<u8>>>,
}

fn check_image(after: &CrashSim, acked: &Acked, bs: usize, checksum: bool) -> Result<(), String> {
    let media = CrashSim::from_image(after.image()).with_domain(after.domain());
    let eng = EngineOptions {
        protect: Some(Protect::None),
        ..Default::default()
    };
    let dev = match Device::open(media, &eng) {
        Ok(d) => d,
        Err(e) if !acked.created => {
            let _ = e; // a crash during create may leave no device
            return Ok(());
        }
        Err(e) => return Err(format!("open after crash failed: {e}")),
    };
    if !acked.created {
        return Ok(()); // create's last fence may or may not have made it valid
    }
    if acked.closed && !dev.was_clean() {
        return Err("closed cleanly before the crash, but the device says it was not".into());
    }
    let mut buf = vec![0u8; bs];
    for (b, sure) in acked.sure.iter().enumerate() {
        let later = &acked.later[b];
        match dev.read((b * bs) as u64, &mut buf) {
            Ok(()) if later.is_empty() => {
                if buf != *sure {
                    return Err(format!("block {b}: acknowledged and flushed data lost"));
                }
            }
            Ok(()) => {
                for l in 0..bs / LINE {
                    let r = l * LINE..(l + 1) * LINE;
                    if buf[r.clone()] != sure[r.clone()]
                        && !later.iter().any(|w| buf[r.clone()] == w[r.clone()])
                    {
                        return Err(format!("block {b} line {l}: holds data no write put there"));
                    }
                }
            }
            Err(BlkError::Checksum { .. }) if checksum && !later.is_empty() => {}
            Err(e) => return Err(format!("block {b}: read failed: {e}")),
        }
    }
    drop(dev); // the copy is thrown away
    Ok(())
}

fn run(seed: u64, protect: Protect, write: WriteScheme, bs: u32, checksum: bool, domain: Domain) {
    let nblocks = 24usize;
    let bsz = bs as usize;
    let table = if checksum { 4096 } else { 0 };
    let len = 4096 + table + nblocks * bsz;
    let acked = Arc::new(Mutex::new(Acked::default()));
    let opts = CrashOpts {
        k: 8,
        random_images: 48,
        domain,
        seed,
        ..Default::default()
    };
    let a2 = Arc::clone(&acked);
    let report = check_every_fence(
        len,
        &opts,
        |sim| {
            let mut rng = SmallRng::seed_from_u64(seed);
            let eng = EngineOptions {
                protect: Some(protect),
                write,
                ..Default::default()
            };
            let create = CreateOptions {
                block_size: bs,
                checksum,
                zero_data: true,
                atomic: false,
            };
            let dev =
                Device::create(Arc::clone(sim), &create, &eng).expect("create on the simulator");
            assert_eq!(dev.capacity() as usize, nblocks * bsz, "test sizing");
            {
                let mut a = a2.lock();
                a.created = true;
                a.sure = vec![vec![0u8; bsz]; nblocks];
                a.later = vec![vec![]; nblocks];
            }
            let settle = |a: &mut Acked, b: usize, data: &[u8]| {
                a.sure[b] = data.to_vec();
                a.later[b].clear();
            };
            for op in 0..28u64 {
                let b0 = rng.gen_range(0..nblocks);
                let n = rng.gen_range(1..=3).min(nblocks - b0);
                let pick = rng.gen_range(0..100);
                if pick < 15 {
                    dev.flush().unwrap();
                    let mut a = a2.lock();
                    for b in 0..nblocks {
                        if let Some(last) = a.later[b].last().cloned() {
                            settle(&mut a, b, &last);
                        }
                    }
                    continue;
                }
                let fua = rng.gen_bool(0.25);
                let zero = pick >= 85;
                let data: Vec<Vec<u8>> = (0..n)
                    .map(|k| {
                        if zero {
                            vec![0u8; bsz]
                        } else {
                            common::pattern(op + 1, (b0 + k) as u64, bsz)
                        }
                    })
                    .collect();
                {
                    let mut a = a2.lock();
                    for (k, d) in data.iter().enumerate() {
                        a.later[b0 + k].push(d.clone());
                    }
                }
                let (off, bytes) = ((b0 * bsz) as u64, (n * bsz) as u64);
                if zero && pick >= 93 {
                    dev.trim(off, bytes).unwrap();
                } else if zero {
                    dev.write_zeroes(off, bytes, fua).unwrap();
                } else {
                    dev.write(off, &data.concat(), fua).unwrap();
                }
                if fua && !(zero && pick >= 93) {
                    let mut a = a2.lock();
                    for (k, d) in data.iter().enumerate() {
                        settle(&mut a, b0 + k, d);
                    }
                }
            }
            dev.close().unwrap();
            let mut a = a2.lock();
            a.closed = true;
            for b in 0..nblocks {
                if let Some(last) = a.later[b].last().cloned() {
                    settle(&mut a, b, &last);
                }
            }
        },
        |after| check_image(after, &acked.lock(), bsz, checksum),
    );
    eprintln!("{protect} {write} bs={bs} checksum={checksum} {domain:?}: {report}");
    assert!(report.fences >= 8, "the workload must fence");
    report.assert_clean();
}

#[test]
fn acknowledged_data_survives_every_crash_for_every_write_scheme() {
    for (i, write) in WriteScheme::ALL.into_iter().enumerate() {
        run(
            100 + i as u64,
            Protect::None,
            write,
            4096,
            false,
            Domain::Adr,
        );
        run(200 + i as u64, Protect::None, write, 512, true, Domain::Adr);
    }
    run(300, Protect::None, WriteScheme::Nt, 512, true, Domain::Eadr);
    run(
        301,
        Protect::None,
        WriteScheme::Wb,
        4096,
        false,
        Domain::Eadr,
    );
}

/// The kernel write path as the simulator models it (the kernel's DAX copy: non-temporal and
/// durable at return), under the schemes' own barriers.
#[test]
fn acknowledged_data_survives_every_crash_with_writes_through_the_kernel() {
    for (i, write) in [WriteScheme::Nt, WriteScheme::Clwb, WriteScheme::Msync]
        .into_iter()
        .enumerate()
    {
        run(
            400 + i as u64,
            Protect::Kernel,
            write,
            4096,
            true,
            Domain::Adr,
        );
    }
    run(
        410,
        Protect::Kernel,
        WriteScheme::Nt,
        512,
        false,
        Domain::Eadr,
    );
}

/// The checker must catch a device that loses acknowledged data: a workload that "forgets" the
/// flush (acknowledges data as flushed without flushing) is reported.
#[test]
fn the_crash_check_catches_a_missing_flush() {
    let bsz = 4096usize;
    let nblocks = 8;
    let len = 4096 + nblocks * bsz;
    let acked = Arc::new(Mutex::new(Acked::default()));
    let a2 = Arc::clone(&acked);
    let report = check_every_fence(
        len,
        &CrashOpts {
            k: 6,
            random_images: 16,
            ..Default::default()
        },
        |sim| {
            let eng = EngineOptions {
                protect: Some(Protect::None),
                write: WriteScheme::Wb,
                ..Default::default()
            };
            let dev = Device::create(Arc::clone(sim), &CreateOptions::default(), &eng).unwrap();
            {
                let mut a = a2.lock();
                a.created = true;
                a.sure = vec![vec![0u8; bsz]; nblocks];
                a.later = vec![vec![]; nblocks];
            }
            let d = common::pattern(1, 2, bsz);
            dev.write(2 * bsz as u64, &d, false).unwrap();
            a2.lock().sure[2] = d; // wrong: not flushed
                                   // Fences happen later (superblock update at close) with the data still unflushed.
            dev.close().unwrap();
        },
        |after| check_image(after, &acked.lock(), bsz, false),
    );
    assert!(
        !report.is_clean(),
        "unflushed wb data must be lost in some image: {report}"
    );
}
