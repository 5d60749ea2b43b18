//! Crash proof of atomic block writes (`--atomic`) on `pmkit_media::crashsim`.
//!
//! Workload: random writes (each 8-byte word stamped with block, write number and word index,
//! so a block mixing two writes is detected), FUA writes, trims, write-zeroes and flushes. At
//! every fence (and at the end), every crash image is checked:
//! - `check` passes on the image as the crash left it (before any recovery);
//! - after recovery (open), each block holds exactly one value that was written to it, never a
//!   mix; every value acknowledged before a completed FLUSH, or written with FUA, is present or
//!   a later write is; and, stronger, for `wb`/`msync` (whose atomic writes publish at once, so
//!   are durable when they return) every block holds its last completed write or the write in
//!   flight (the other schemes publish lazily: a write is durable at the next FLUSH);
//! - the free lists hold exactly the spare blocks; `check` passes again after a clean close.
//!
//! Nested: for one image in `NEST_EVERY`, recovery itself (open, three writes, a flush, close)
//! is crashed at every fence and each of those images is checked the same way.
//!
//! K bound: `CrashOpts::k = 12` lines, `max_exhaustive = 65536` images. With 512-byte blocks a
//! single-block write leaves at most 8 pending data lines and the lane's previous map line at
//! its data fence (and 1 map line at a FUA or FLUSH fence), so every crash point is enumerated exhaustively (asserted:
//! `sampled_points == 0`). 4 KiB blocks (64 pending lines) and multi-block requests exceed K and
//! are sampled (64 seeded images plus the all-none and all-persisted ones per crash point).
//! Stores are torn per cache-line piece (the simulator's default), not per 8-byte word.
//!
//! Negative control: the plain device under the same workload must be caught tearing blocks.

mod common;

use common::{stamp, unstamp};
use parking_lot::Mutex;
use pmkit_blk::{CreateOptions, Device, EngineOptions, Protect, WriteScheme};
use pmkit_media::crashsim::{
    check_every_fence, check_every_fence_from, CrashOpts, CrashReport, CrashSim,
};
use pmkit_media::{Domain, Media};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const NBLOCKS: usize = 24;
/// Spare blocks of the test devices (the layout's minimum; checked).
const SPARE: u64 = 8;
/// Write numbers of the nested (recovery) workload start here, apart from the outer ones.
const INNER_SEQ: u64 = 1 << 27;

/// What the workload has been told, as of the crash point.
#[derive(Clone, Default)]
struct Model {
    created: bool,
    closed: bool,
    /// Per block: the value that must survive (acknowledged before a completed FLUSH, or the
    /// last FUA write) ...
    sure: Vec<u64>,
    /// ... and the writes issued to it since, in order (completed or in flight).
    later: Vec<Vec<u64>>,
    /// Per block: the last completed write.
    done: Vec<u64>,
    /// The request in flight: (block, value).
    inflight: Vec<(usize, u64)>,
}

impl Model {
    fn with(values: Vec<u64>) -> Model {
        Model {
            created: true,
            closed: false,
            later: vec![vec![]; values.len()],
            done: values.clone(),
            sure: values,
            inflight: vec![],
        }
    }

    fn start(&mut self, blocks: &[(usize, u64)]) {
        assert!(self.inflight.is_empty());
        for &(b, v) in blocks {
            self.later[b].push(v);
        }
        self.inflight = blocks.to_vec();
    }

    fn complete(&mut self, fua: bool) {
        for (b, v) in std::mem::take(&mut self.inflight) {
            self.done[b] = v;
            if fua {
                self.sure[b] = v;
                self.later[b].clear();
            }
        }
    }

    fn flushed(&mut self) {
        for b in 0..self.sure.len() {
            if let Some(&v) = self.later[b].last() {
                self.sure[b] = v;
                self.later[b].clear();
            }
        }
    }

    /// Whether block `b` may hold value `v` after a crash now.
    fn allows(&self, b: usize, v: u64, atomic: bool) -> Result<(), String> {
        if v != self.sure[b] && !self.later[b].contains(&v) {
            return Err(format!(
                "block {b} holds write {v}, but must hold {} (flushed or FUA) or a later write {:?}",
                self.sure[b], self.later[b]
            ));
        }
        if atomic && v != self.done[b] && !self.inflight.contains(&(b, v)) {
            return Err(format!(
                "block {b} holds write {v}, not its last completed write {} nor the one in flight {:?}",
                self.done[b], self.inflight
            ));
        }
        Ok(())
    }
}

fn engine(protect: Protect, write: WriteScheme) -> EngineOptions {
    EngineOptions {
        protect: Some(protect),
        write,
        ..Default::default()
    }
}

#[derive(Clone, Copy)]
struct Cfg {
    atomic: bool,
    /// `none`, or `kernel` as the simulator models it.
    protect: Protect,
    write: WriteScheme,
    bs: usize,
    checksum: bool,
    domain: Domain,
    /// Most blocks per request (1: the single-block workload of the proof).
    max_blocks: usize,
    ops: u64,
    /// Nest a recovery crash run on one image in this many (0: never).
    nest_every: u64,
    seed: u64,
}

impl Cfg {
    fn len(&self) -> usize {
        if self.atomic {
            2 * 4096 + (NBLOCKS + SPARE as usize) * self.bs
        } else {
            4096 + if self.checksum { 4096 } else { 0 } + NBLOCKS * self.bs
        }
    }

    fn opts(&self) -> CrashOpts {
        CrashOpts {
            k: 12,
            max_exhaustive: 1 << 16,
            random_images: 64,
            domain: self.domain,
            seed: self.seed,
            ..Default::default()
        }
    }
}

/// Everything checked on one crash image; returns the value of every block after recovery.
fn check_image(img: &CrashSim, m: &Model, cfg: &Cfg) -> Result<Vec<u64>, String> {
    // Recovery and reads first: a torn block is the finding that matters most.
    let media = CrashSim::from_image(img.image()).with_domain(img.domain());
    let dev = match Device::open(media, &engine(cfg.protect, cfg.write)) {
        Ok(d) => d,
        Err(_) if !m.created => return Ok(vec![]), // a crash during create
        Err(e) => return Err(format!("open (recovery) after the crash failed: {e}")),
    };
    if m.closed && !dev.was_clean() {
        return Err("closed cleanly before the crash, but the device says it was not".into());
    }
    let mut buf = vec![0u8; cfg.bs];
    let mut values = Vec::with_capacity(NBLOCKS);
    for b in 0..NBLOCKS {
        dev.read((b * cfg.bs) as u64, &mut buf)
            .map_err(|e| format!("block {b}: read after recovery failed: {e}"))?;
        let v = unstamp(b as u64, &buf)?;
        if m.created {
            m.allows(b, v, cfg.atomic && cfg.write.deferred())?;
        }
        values.push(v);
    }
    if !cfg.atomic {
        return Ok(values); // the plain device's own crash test is tests/crash.rs
    }
    let free = dev.free_blocks();
    if free.len() as u64 != SPARE {
        return Err(format!(
            "free lists after recovery: {} blocks, want {SPARE}",
            free.len()
        ));
    }
    let r = pmkit_blk::check(img, false).map_err(|e| format!("check failed to run: {e}"))?;
    if !r.is_clean() {
        return Err(format!("check of the crash image fails: {:?}", r.findings));
    }
    dev.close()
        .map_err(|e| format!("close after recovery: {e}"))?;
    let r = pmkit_blk::check(dev.media(), false).map_err(|e| format!("check: {e}"))?;
    if !r.is_clean() || !r.findings.is_empty() {
        return Err(format!("check after recovery and close: {:?}", r.findings));
    }
    Ok(values)
}

/// Crash recovery itself: from `image`, open, write three blocks (one FUA), flush, close; at
/// every fence of that, check every image against a model starting from `values`.
fn crash_recovery(image: Vec<u8>, values: Vec<u64>, cfg: &Cfg) -> CrashReport {
    let model = Arc::new(Mutex::new(Model::with(values)));
    let m2 = Arc::clone(&model);
    let bs = cfg.bs;
    let write = cfg.write;
    check_every_fence_from(
        image,
        &cfg.opts(),
        move |sim| {
            let dev = Device::open(Arc::clone(sim), &engine(cfg.protect, write))
                .expect("reopen for the nested run");
            for j in 0..3u64 {
                let b = (j as usize * 7 + 3) % NBLOCKS;
                let v = INNER_SEQ + j;
                m2.lock().start(&[(b, v)]);
                dev.write((b * bs) as u64, &stamp(b as u64, v, bs), j == 1)
                    .unwrap();
                m2.lock().complete(j == 1);
            }
            dev.flush().unwrap();
            m2.lock().flushed();
            dev.close().unwrap();
            m2.lock().closed = true;
        },
        |img| check_image(img, &model.lock(), cfg).map(|_| ()),
    )
}

fn run(cfg: Cfg) -> CrashReport {
    let model = Arc::new(Mutex::new(Model::default()));
    let m2 = Arc::clone(&model);
    let nested = Arc::new(Mutex::new((0u64, 0u64, 0u64))); // (images seen, nested runs, images)
    let n2 = Arc::clone(&nested);
    let report = check_every_fence(
        cfg.len(),
        &cfg.opts(),
        |sim| {
            let mut rng = SmallRng::seed_from_u64(cfg.seed);
            let create = CreateOptions {
                block_size: cfg.bs as u32,
                checksum: cfg.checksum,
                zero_data: true,
                atomic: cfg.atomic,
            };
            let dev = Device::create(Arc::clone(sim), &create, &engine(cfg.protect, cfg.write))
                .expect("create on the simulator");
            assert_eq!(dev.capacity() as usize, NBLOCKS * cfg.bs, "test sizing");
            if cfg.atomic {
                assert_eq!(dev.free_blocks().len() as u64, SPARE, "test sizing");
            }
            *m2.lock() = Model::with(vec![0; NBLOCKS]);
            for op in 0..cfg.ops {
                let pick = rng.gen_range(0..100);
                if pick < 12 {
                    dev.flush().unwrap();
                    m2.lock().flushed();
                    continue;
                }
                let b0 = rng.gen_range(0..NBLOCKS);
                let n = rng.gen_range(1..=cfg.max_blocks).min(NBLOCKS - b0);
                let fua = rng.gen_bool(0.3);
                let zero = pick < 22;
                let v = if zero { 0 } else { op + 1 };
                let blocks: Vec<(usize, u64)> = (b0..b0 + n).map(|b| (b, v)).collect();
                m2.lock().start(&blocks);
                let (off, len) = ((b0 * cfg.bs) as u64, (n * cfg.bs) as u64);
                if zero && pick < 17 {
                    dev.trim(off, len).unwrap();
                } else if zero {
                    dev.write_zeroes(off, len, fua).unwrap();
                } else {
                    let data: Vec<u8> = blocks
                        .iter()
                        .flat_map(|&(b, v)| stamp(b as u64, v, cfg.bs))
                        .collect();
                    dev.write(off, &data, fua).unwrap();
                }
                // Trim promises nothing until the next flush, like a write without FUA.
                m2.lock().complete(fua && !(zero && pick < 17));
            }
            dev.close().unwrap();
            let mut m = m2.lock();
            m.flushed();
            m.closed = true;
        },
        |img| {
            let m = model.lock().clone();
            let values = check_image(img, &m, &cfg)?;
            let mut n = nested.lock();
            n.0 += 1;
            if cfg.nest_every > 0 && m.created && !values.is_empty() && n.0 % cfg.nest_every == 0 {
                let inner = crash_recovery(img.image(), values, &cfg);
                n.1 += 1;
                n.2 += inner.images;
                if let Some((key, msg)) = inner.violations.first() {
                    return Err(format!(
                        "crash during recovery, inner key {key}: {msg} ({} inner violations)",
                        inner.violation_count
                    ));
                }
            }
            Ok(())
        },
    );
    let n = n2.lock();
    eprintln!(
        "atomic={} {} bs={} checksum={} {:?} max_blocks={}: {report}; nested: {} recovery runs, {} images",
        cfg.atomic, cfg.write, cfg.bs, cfg.checksum, cfg.domain, cfg.max_blocks, n.1, n.2
    );
    assert!(report.fences >= 20, "the workload must fence");
    report
}

fn base(write: WriteScheme, seed: u64) -> Cfg {
    Cfg {
        atomic: true,
        protect: Protect::None,
        write,
        bs: 512,
        checksum: false,
        domain: Domain::Adr,
        max_blocks: 1,
        ops: 40,
        nest_every: 128,
        seed,
    }
}

/// The proof: single-block writes, every distinct image at every fence (exhaustive under
/// K = 12), every write scheme, with crashes during recovery.
#[test]
fn every_crash_image_holds_whole_blocks_for_every_write_scheme() {
    for (i, write) in WriteScheme::ALL.into_iter().enumerate() {
        if !write.available() {
            continue;
        }
        let r = run(base(write, 10 + i as u64));
        r.assert_clean();
        assert_eq!(
            r.sampled_points, 0,
            "every crash point must be exhaustive: {r}"
        );
    }
}

#[test]
fn checksums_large_blocks_and_eadr() {
    let r = run(Cfg {
        checksum: true,
        ..base(WriteScheme::Nt, 20)
    });
    r.assert_clean();
    assert_eq!(r.sampled_points, 0, "{r}");
    // 4 KiB blocks: 64 pending lines at a data fence, sampled.
    run(Cfg {
        bs: 4096,
        checksum: true,
        nest_every: 16,
        ops: 30,
        ..base(WriteScheme::Clwb, 21)
    })
    .assert_clean();
    run(Cfg {
        domain: Domain::Eadr,
        ..base(WriteScheme::Nt, 22)
    })
    .assert_clean();
    run(Cfg {
        domain: Domain::Eadr,
        ..base(WriteScheme::Wb, 23)
    })
    .assert_clean();
}

/// Multi-block requests are atomic per block (not as a whole): each block is old or new.
/// Map entries and data written through the kernel (as the simulator models it).
#[test]
fn writes_through_the_kernel_stay_whole_blocks() {
    for (i, write) in [WriteScheme::Nt, WriteScheme::Clwb].into_iter().enumerate() {
        run(Cfg {
            protect: Protect::Kernel,
            checksum: i == 0,
            max_blocks: 3,
            ..base(write, 60 + i as u64)
        })
        .assert_clean();
    }
}

#[test]
fn multi_block_requests_are_atomic_per_block() {
    run(Cfg {
        max_blocks: 4,
        nest_every: 0,
        ..base(WriteScheme::Nt, 30)
    })
    .assert_clean();
    run(Cfg {
        max_blocks: 12,
        nest_every: 0,
        ..base(WriteScheme::Msync, 31)
    })
    .assert_clean();
}

/// Negative control: the plain device under the same workload tears blocks, and the checker
/// says so (so the checks above can fail).
#[test]
fn the_checker_catches_torn_blocks_on_the_plain_device() {
    let r = run(Cfg {
        atomic: false,
        nest_every: 0,
        ..base(WriteScheme::Nt, 40)
    });
    assert!(!r.is_clean(), "the plain device must tear some block: {r}");
    assert!(
        r.violations.iter().any(|(_, m)| m.contains("is a mix of")),
        "expected a torn (mixed) block among: {r}"
    );
}

/// The media image the crash test starts from is what `pmkit create --atomic` makes: the
/// superblock records the feature and the map region, and check passes.
#[test]
fn created_image_checks_clean() {
    let cfg = base(WriteScheme::Nt, 1);
    let sim = Arc::new(CrashSim::new(cfg.len()));
    let create = CreateOptions {
        block_size: 512,
        atomic: true,
        ..Default::default()
    };
    let dev = Device::create(
        Arc::clone(&sim),
        &create,
        &engine(Protect::None, WriteScheme::Nt),
    )
    .unwrap();
    let info = dev.info();
    assert!(
        info.atomic && info.lanes == 2 && info.free_blocks == SPARE,
        "{info:?}"
    );
    dev.close().unwrap();
    drop(dev);
    let r = pmkit_blk::check(&sim, false).unwrap();
    assert!(r.is_clean() && r.findings.is_empty(), "{r:?}");
    let map = r.map.unwrap();
    assert_eq!(
        (map.entries, map.free_blocks, map.problems),
        (NBLOCKS as u64, SPARE, 0)
    );
    assert!(sim.len() > 0);
}
