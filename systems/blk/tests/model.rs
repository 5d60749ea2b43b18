//! Property tests against an in-memory model, for every protection mode and write scheme:
//! threads issue random reads, writes (some FUA), trims, write-zeroes and flushes at once, each
//! on blocks it owns (blocks of different threads share pages, so locks and protection windows
//! are shared); every read must match the model, and so must the whole device at the end and
//! after a reopen. A second property has threads overwrite the same blocks with multi-block
//! writes while others read: no read may see a torn block.

mod common;

use common::*;
use pmkit_blk::{CreateOptions, Device, WriteScheme};
use pmkit_media::Region;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const THREADS: usize = 3;
/// Blocks per ownership chunk: chunk c belongs to thread c % THREADS.
const CHUNK: usize = 4;
const CHUNKS_PER_THREAD: usize = 3;
const NBLOCKS: usize = THREADS * CHUNK * CHUNKS_PER_THREAD;

#[derive(Debug, Clone)]
enum Op {
    Write {
        chunk: usize,
        first: usize,
        n: usize,
        tag: u64,
        fua: bool,
    },
    Read {
        chunk: usize,
        first: usize,
        n: usize,
    },
    Trim {
        chunk: usize,
        first: usize,
        n: usize,
    },
    Zero {
        chunk: usize,
        first: usize,
        n: usize,
        fua: bool,
    },
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    let span =
        (0..CHUNKS_PER_THREAD, 0..CHUNK).prop_flat_map(|(c, f)| (Just(c), Just(f), 1..=CHUNK - f));
    prop_oneof![
        6 => (span.clone(), any::<u64>(), prop::bool::weighted(0.2))
            .prop_map(|((chunk, first, n), tag, fua)| Op::Write { chunk, first, n, tag, fua }),
        4 => span.clone().prop_map(|(chunk, first, n)| Op::Read { chunk, first, n }),
        1 => span.clone().prop_map(|(chunk, first, n)| Op::Trim { chunk, first, n }),
        1 => (span, any::<bool>()).prop_map(|((chunk, first, n), fua)| Op::Zero { chunk, first, n, fua }),
        1 => Just(Op::Flush),
    ]
}

/// Run one thread's ops on blocks it owns, checking each read against its own model.
fn run_thread(
    dev: &Device<Region>,
    t: usize,
    ops: &[Op],
    model: &mut [Vec<u8>],
) -> Result<(), String> {
    let bs = dev.block_size() as usize;
    let block = |chunk: usize, first: usize| (chunk * THREADS + t) * CHUNK + first;
    for op in ops {
        match *op {
            Op::Write {
                chunk,
                first,
                n,
                tag,
                fua,
            } => {
                let b0 = block(chunk, first);
                let data: Vec<u8> = (b0..b0 + n)
                    .flat_map(|b| pattern(tag, b as u64, bs))
                    .collect();
                dev.write((b0 * bs) as u64, &data, fua)
                    .map_err(|e| e.to_string())?;
                for (k, c) in data.chunks(bs).enumerate() {
                    model[b0 + k] = c.to_vec();
                }
            }
            Op::Read { chunk, first, n } => {
                let b0 = block(chunk, first);
                let mut buf = vec![0u8; n * bs];
                dev.read((b0 * bs) as u64, &mut buf)
                    .map_err(|e| e.to_string())?;
                for (k, c) in buf.chunks(bs).enumerate() {
                    if c != model[b0 + k] {
                        return Err(format!(
                            "thread {t}: block {} differs from the model",
                            b0 + k
                        ));
                    }
                }
            }
            Op::Trim { chunk, first, n }
            | Op::Zero {
                chunk, first, n, ..
            } => {
                let b0 = block(chunk, first);
                let (off, len) = ((b0 * bs) as u64, (n * bs) as u64);
                match op {
                    Op::Trim { .. } => dev.trim(off, len),
                    Op::Zero { fua, .. } => dev.write_zeroes(off, len, *fua),
                    _ => unreachable!(),
                }
                .map_err(|e| e.to_string())?;
                for m in &mut model[b0..b0 + n] {
                    m.fill(0);
                }
            }
            Op::Flush => dev.flush().map_err(|e| e.to_string())?,
        }
    }
    Ok(())
}

fn check_all(dev: &Device<Region>, model: &[Vec<u8>], when: &str) -> Result<(), TestCaseError> {
    let bs = dev.block_size() as usize;
    let mut buf = vec![0u8; bs];
    for (b, m) in model.iter().enumerate() {
        dev.read((b * bs) as u64, &mut buf)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&buf, m, "{}: block {}", when, b);
    }
    Ok(())
}

#[test]
fn concurrent_ops_match_the_model_for_every_mode_and_scheme() {
    let dir = shm_dir();
    let case = std::sync::atomic::AtomicU32::new(0);
    for protect in modes() {
        for write in schemes() {
            let mut runner = TestRunner::new(Config {
                cases: 16,
                failure_persistence: None,
                ..Config::default()
            });
            let strat = (
                prop::bool::ANY,
                prop::collection::vec(prop::collection::vec(op(), 1..40), THREADS..=THREADS),
            );
            runner
                .run(&strat, |(small, per_thread)| {
                    let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let (bs, checksum) = if small {
                        (512u32, true)
                    } else {
                        (4096u32, false)
                    };
                    let e = engine(protect, write);
                    let create = CreateOptions {
                        block_size: bs,
                        checksum,
                        ..Default::default()
                    };
                    let size = 4096 * 2 + NBLOCKS as u64 * bs as u64 + 8192;
                    let (path, dev) = new_device(
                        &dir,
                        &format!("c{case}"),
                        size.div_ceil(4096) * 4096,
                        &create,
                        &e,
                    );
                    let mut models: Vec<Vec<Vec<u8>>> =
                        vec![vec![vec![0u8; bs as usize]; NBLOCKS]; THREADS];
                    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
                        let hs: Vec<_> = per_thread
                            .iter()
                            .zip(models.iter_mut())
                            .enumerate()
                            .map(|(t, (ops, m))| {
                                let dev = &dev;
                                s.spawn(move || run_thread(dev, t, ops, m))
                            })
                            .collect();
                        hs.into_iter().map(|h| h.join().unwrap()).collect()
                    });
                    for r in results {
                        r.map_err(|e| TestCaseError::fail(format!("{protect}/{write}: {e}")))?;
                    }
                    // Merge: each block from the thread that owns it.
                    let model: Vec<Vec<u8>> = (0..NBLOCKS)
                        .map(|b| models[(b / CHUNK) % THREADS][b].clone())
                        .collect();
                    check_all(&dev, &model, "after the run")?;
                    dev.close().unwrap();
                    drop(dev);
                    let dev = pmkit_blk::open_path(&path, &e).unwrap();
                    check_all(&dev, &model, "after reopen")?;
                    dev.close().unwrap();
                    drop(dev);
                    std::fs::remove_file(&path).unwrap();
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("{protect}/{write}: {e}"));
        }
    }
}

/// A block filled with one 64-bit word naming the write (tag) and the block.
fn stamp(tag: u64, block: u64, bs: usize) -> Vec<u8> {
    (tag << 32 | block).to_le_bytes().repeat(bs / 8)
}

#[test]
fn overlapping_writes_are_serialized_and_never_torn() {
    let dir = shm_dir();
    for protect in modes() {
        let e = engine(protect, WriteScheme::Nt);
        let (_p, dev) = new_device(
            &dir,
            protect.name(),
            1 << 20,
            &CreateOptions {
                block_size: 512,
                ..Default::default()
            },
            &e,
        );
        const HOT: u64 = 6;
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let dev = &dev;
                s.spawn(move || {
                    for i in 0..300u64 {
                        let tag = (t + 1) << 16 | i;
                        let first = (i * 7 + t) % (HOT - 2);
                        let n = 1 + (i + t) % 3;
                        let data: Vec<u8> = (first..first + n)
                            .flat_map(|b| stamp(tag, b, 512))
                            .collect();
                        dev.write(first * 512, &data, i % 17 == 0).unwrap();
                        let mut back = vec![0u8; (HOT * 512) as usize];
                        dev.read(0, &mut back).unwrap();
                        for (b, blk) in back.chunks(512).enumerate() {
                            let w = &blk[..8];
                            assert!(
                                blk.chunks(8).all(|c| c == w),
                                "{protect}: block {b} is torn"
                            );
                            let v = u64::from_le_bytes(w.try_into().unwrap());
                            assert!(
                                v == 0 || v & 0xffff_ffff == b as u64,
                                "{protect}: block {b} holds another block's data"
                            );
                        }
                    }
                });
            }
        });
        dev.close().unwrap();
    }
}
