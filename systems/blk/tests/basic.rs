//! Functional tests of the block device on real (tmpfs-backed) regions: every protection mode
//! and write scheme, bad input, damaged superblocks, unclean shutdown, checksums.

mod common;

use common::*;
use pmkit_blk::superblock::{SLOT_LEN, SLOT_OFF};
use pmkit_blk::{BlkError, CreateOptions, Device, EngineOptions, Protect, WriteScheme};
use pmkit_media::{Media, Region, RegionOptions};

#[test]
fn every_mode_and_scheme_reads_back_what_it_wrote_and_keeps_it_across_reopen() {
    let dir = shm_dir();
    for protect in modes() {
        for write in schemes() {
            for (bs, checksum) in [(4096, false), (512, true)] {
                let eng = engine(protect, write);
                let create = CreateOptions {
                    block_size: bs,
                    checksum,
                    ..Default::default()
                };
                let name = format!("{protect}-{write}-{bs}");
                let (path, dev) = new_device(&dir, &name, 1 << 20, &create, &eng);
                assert_eq!(dev.protect(), protect);
                assert_eq!(dev.write_scheme(), write);
                let bsz = bs as usize;
                // Single blocks, a multi-block request, a FUA write, a trim, write-zeroes.
                let mix = Mix { multi: 4, fua: 20 };
                let multi = mix.write(&dev);
                dev.flush().unwrap();
                let check = |dev: &Device<Region>| mix.check(dev, &multi, &name);
                check(&dev);
                let s = dev.stats();
                assert_eq!(
                    (s.writes, s.fua_writes, s.trims, s.write_zeroes),
                    (8, 1, 1, 1),
                    "{name}"
                );
                assert!(s.flushes >= 1 && s.reads == 9, "{name}: {s:?}");
                if matches!(protect, Protect::Pt | Protect::PtBatch | Protect::Private) {
                    assert!(
                        s.windows_opened > 0,
                        "{name}: protection windows must be counted"
                    );
                }
                dev.close().unwrap();
                assert!(matches!(
                    dev.read(0, &mut [0u8; 4096][..bsz]),
                    Err(BlkError::Closed)
                ));
                drop(dev);
                let dev = pmkit_blk::open_path(&path, &eng).unwrap();
                assert!(dev.was_clean(), "{name}: closed cleanly");
                check(&dev);
                assert_eq!(dev.stats().reads, 9);
                dev.close().unwrap();
                let report = pmkit_blk::check_path(&path, false).unwrap();
                assert!(report.is_clean(), "{name}: {:?}", report.findings);
                std::fs::remove_file(&path).unwrap();
            }
        }
    }
}

#[test]
fn bad_requests_get_typed_errors_and_change_nothing() {
    let dir = shm_dir();
    let (_p, dev) = new_device(
        &dir,
        "bad",
        1 << 20,
        &CreateOptions::default(),
        &engine(Protect::None, WriteScheme::Nt),
    );
    let cap = dev.capacity();
    dev.write(0, &pattern(9, 0, 4096), false).unwrap();
    let blk = vec![0xAAu8; 4096];
    assert!(matches!(
        dev.write(100, &blk, false),
        Err(BlkError::Misaligned { .. })
    ));
    assert!(matches!(
        dev.write(0, &blk[..1000], false),
        Err(BlkError::Misaligned { .. })
    ));
    assert!(matches!(
        dev.write(cap, &blk, false),
        Err(BlkError::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.write(cap - 4096, &[0u8; 8192], false),
        Err(BlkError::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.write(u64::MAX - 4095, &blk, false),
        Err(BlkError::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.write(0, &[], false),
        Err(BlkError::ZeroLength { .. })
    ));
    let big = vec![0u8; dev.max_request() + 4096];
    assert!(matches!(
        dev.write(0, &big, false),
        Err(BlkError::TooLarge { .. })
    ));
    assert!(matches!(
        dev.read(cap, &mut [0u8; 4096]),
        Err(BlkError::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.read(0, &mut [0u8; 0]),
        Err(BlkError::ZeroLength { .. })
    ));
    assert!(matches!(dev.trim(0, 0), Err(BlkError::ZeroLength { .. })));
    assert!(matches!(
        dev.trim(0, 4097),
        Err(BlkError::Misaligned { .. })
    ));
    assert!(matches!(
        dev.write_zeroes(cap - 4096, 8192, false),
        Err(BlkError::OutOfRange { .. })
    ));
    assert_eq!(
        BlkError::Misaligned {
            off: 1,
            len: 1,
            block_size: 512
        }
        .errno(),
        libc::EINVAL
    );
    let mut buf = vec![0u8; 4096];
    dev.read(0, &mut buf).unwrap();
    assert_eq!(
        buf,
        pattern(9, 0, 4096),
        "refused requests must not change data"
    );
    dev.read(4096, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    assert_eq!(dev.stats().rejected, 12);
    dev.close().unwrap();
}

#[test]
fn bad_options_are_refused() {
    let dir = shm_dir();
    let path = dir.path().join("x");
    let bad_bs = CreateOptions {
        block_size: 1024,
        ..Default::default()
    };
    assert!(matches!(
        pmkit_blk::create_path(&path, Some(1 << 20), &bad_bs, &EngineOptions::default()),
        Err(BlkError::BadOption(_))
    ));
    assert!(!path.exists(), "a refused create leaves nothing behind");
    let mut e = engine(Protect::PtBatch, WriteScheme::Nt);
    e.batch.low_pct = 90;
    assert!(matches!(
        pmkit_blk::create_path(&path, Some(1 << 20), &CreateOptions::default(), &e),
        Err(BlkError::BadOption(_))
    ));
    assert!(matches!(
        pmkit_blk::create_path(
            &path,
            Some(16 << 10),
            &CreateOptions::default(),
            &EngineOptions::default()
        ),
        Err(BlkError::TooSmall { .. })
    ));
}

fn corrupt(path: &std::path::Path, f: impl Fn(&mut [u8; SLOT_LEN])) {
    let r = Region::open(path, &RegionOptions::default()).unwrap();
    for off in SLOT_OFF {
        let mut b = [0u8; SLOT_LEN];
        r.read(off as usize, &mut b);
        f(&mut b);
        r.write(off as usize, &b);
    }
}

fn reseal(b: &mut [u8; SLOT_LEN]) {
    let crc = crc32c::crc32c(&b[..SLOT_LEN - 4]);
    b[SLOT_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn damaged_superblocks_give_clear_errors() {
    let dir = shm_dir();
    let e = engine(Protect::None, WriteScheme::Nt);
    let make = |n: &str| {
        let (p, d) = new_device(&dir, n, 1 << 20, &CreateOptions::default(), &e);
        d.close().unwrap();
        p
    };
    let p = make("magic");
    corrupt(&p, |b| b[0] = b'X');
    let err = pmkit_blk::open_path(&p, &e)
        .err()
        .expect("wrong magic must fail");
    assert!(matches!(err, BlkError::BadMagic { .. }), "{err}");
    assert!(err.to_string().contains("not a pmkit block device"));
    let rep = pmkit_blk::check_path(&p, false).unwrap();
    assert!(!rep.is_clean() && rep.findings[0].what.contains("magic"));

    let p = make("version");
    corrupt(&p, |b| {
        b[8] = 99;
        reseal(b)
    });
    let err = pmkit_blk::open_path(&p, &e).err().unwrap();
    assert!(
        matches!(err, BlkError::BadVersion { found: 99, .. }),
        "{err}"
    );

    let p = make("crc");
    corrupt(&p, |b| b[40] ^= 1);
    let err = pmkit_blk::open_path(&p, &e).err().unwrap();
    assert!(matches!(err, BlkError::BadSuperblock { .. }), "{err}");
    assert!(err.to_string().contains("checksum mismatch"), "{err}");

    // One torn slot: the other is used, and the open says so.
    let p = make("one-slot");
    let (found, _) = pmkit_blk::inspect_path(&p).unwrap();
    let r = Region::open(&p, &RegionOptions::default()).unwrap();
    r.write(SLOT_OFF[found.slot] as usize + 50, &[0xff; 4]);
    drop(r);
    let dev = pmkit_blk::open_path(&p, &e).unwrap();
    assert!(
        dev.notes().iter().any(|n| n.contains("unusable")),
        "{:?}",
        dev.notes()
    );
    dev.close().unwrap();

    // A file resized behind the device's back.
    let p = make("resized");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    assert!(matches!(
        pmkit_blk::open_path(&p, &e),
        Err(BlkError::SizeMismatch { .. })
    ));
}

#[test]
fn unclean_shutdown_is_reported_by_open_inspect_and_check() {
    let dir = shm_dir();
    let e = engine(Protect::None, WriteScheme::Nt);
    let (p, dev) = new_device(&dir, "unclean", 1 << 20, &CreateOptions::default(), &e);
    assert!(dev.was_clean());
    let (found, in_use) = pmkit_blk::inspect_path(&p).unwrap();
    assert!(
        !found.current.clean && in_use,
        "an open device is marked in use"
    );
    assert!(
        matches!(pmkit_blk::open_path(&p, &e), Err(BlkError::Busy { .. })),
        "a second opener is refused"
    );
    dev.write(0, &pattern(1, 0, 4096), false).unwrap();
    drop(dev); // no close(): as after a crash
    let (found, in_use) = pmkit_blk::inspect_path(&p).unwrap();
    assert!(!found.current.clean && !in_use);
    let rep = pmkit_blk::check_path(&p, false).unwrap();
    assert!(
        !rep.is_clean()
            && rep
                .findings
                .iter()
                .any(|f| f.what.contains("not shut down cleanly"))
    );
    let dev = pmkit_blk::open_path(&p, &e).unwrap();
    assert!(!dev.was_clean());
    assert!(dev
        .notes()
        .iter()
        .any(|n| n.contains("not shut down cleanly")));
    let mut buf = vec![0u8; 4096];
    dev.read(0, &mut buf).unwrap();
    assert_eq!(
        buf,
        pattern(1, 0, 4096),
        "drop without close still keeps acknowledged data"
    );
    drop(dev);
    let rep = pmkit_blk::check_path(&p, true).unwrap();
    assert!(rep.is_clean() && rep.marked_clean);
    assert!(pmkit_blk::check_path(&p, false).unwrap().is_clean());
    let (found, _) = pmkit_blk::inspect_path(&p).unwrap();
    assert!(found.current.clean && found.current.opens == 2);
}

#[test]
fn checksums_catch_corruption_and_never_return_corrupt_data() {
    let dir = shm_dir();
    for protect in modes() {
        let e = engine(protect, WriteScheme::Nt);
        let create = CreateOptions {
            block_size: 512,
            checksum: true,
            ..Default::default()
        };
        let (p, dev) = new_device(&dir, protect.name(), 1 << 20, &create, &e);
        for b in 0..16 {
            dev.write(b * 512, &pattern(7, b, 512), false).unwrap();
        }
        dev.close().unwrap();
        drop(dev);
        // Flip one byte of block 5's data behind the engine's back.
        let (found, _) = pmkit_blk::inspect_path(&p).unwrap();
        let at = found.current.layout.block_off(5) + 100;
        let r = Region::open(&p, &RegionOptions::default()).unwrap();
        let mut x = [0u8; 1];
        r.read(at, &mut x);
        r.write(at, &[x[0] ^ 0x40]);
        drop(r);
        let rep = pmkit_blk::check_path(&p, false).unwrap();
        assert!(!rep.is_clean());
        assert_eq!((rep.bad_blocks, rep.bad_block_list.clone()), (1, vec![5]));
        let dev = pmkit_blk::open_path(&p, &e).unwrap();
        let mut buf = vec![0x55u8; 4 * 512];
        match dev.read(4 * 512, &mut buf) {
            Err(BlkError::Checksum { block: 5, .. }) => {}
            other => panic!("{protect}: expected a checksum error on block 5, got {other:?}"),
        }
        assert!(
            buf.iter().all(|&b| b == 0),
            "{protect}: corrupt data must not be handed out"
        );
        let mut one = vec![0u8; 512];
        dev.read(4 * 512, &mut one).unwrap();
        assert_eq!(one, pattern(7, 4, 512), "neighbours stay readable");
        // Rewriting the block repairs it.
        dev.write(5 * 512, &pattern(8, 5, 512), false).unwrap();
        dev.read(5 * 512, &mut one).unwrap();
        assert_eq!(one, pattern(8, 5, 512));
        assert_eq!(dev.stats().checksum_errors, 1);
        dev.close().unwrap();
        drop(dev); // releases the file lock
        assert!(pmkit_blk::check_path(&p, false).unwrap().is_clean());
    }
}

#[test]
fn subpage_writes_only_changed_lines_and_write_verify_passes() {
    let dir = shm_dir();
    for protect in modes() {
        let mut e = engine(protect, WriteScheme::Clwb);
        e.subpage = true;
        e.write_verify = true;
        let (_p, dev) = new_device(
            &dir,
            protect.name(),
            1 << 20,
            &CreateOptions {
                checksum: true,
                ..Default::default()
            },
            &e,
        );
        let mut blk = pattern(1, 3, 4096);
        dev.write(3 * 4096, &blk, false).unwrap();
        dev.flush().unwrap(); // pt-batch: reach PM, so the next write compares against it
        blk[64 * 10 + 5] ^= 1;
        blk[64 * 11] ^= 1;
        blk[64 * 40] ^= 1;
        dev.write(3 * 4096, &blk, false).unwrap();
        dev.flush().unwrap();
        let mut back = vec![0u8; 4096];
        dev.read(3 * 4096, &mut back).unwrap();
        assert_eq!(back, blk, "{protect}");
        let s = dev.stats();
        assert_eq!(
            s.subpage_lines_written,
            64 + 3,
            "{protect}: first write all lines, then 3"
        );
        assert_eq!(s.subpage_lines_skipped, 61, "{protect}");
        assert_eq!(s.verify_failures, 0);
        dev.close().unwrap();
    }
}

#[test]
fn speed_emulation_slows_writes_down() {
    let dir = shm_dir();
    let mut e = engine(Protect::None, WriteScheme::Nt);
    e.emulate = "wrlat=300000".parse().unwrap();
    let (_p, dev) = new_device(&dir, "emu", 1 << 20, &CreateOptions::default(), &e);
    let t = std::time::Instant::now();
    for b in 0..5 {
        dev.write(b * 4096, &pattern(1, b, 4096), false).unwrap();
    }
    assert!(
        t.elapsed().as_micros() >= 1500,
        "5 writes at a 300 us floor"
    );
    let s = dev.stats();
    assert!(
        s.write_latency.samples == 5 && s.write_latency.p50_ns >= 250_000.0,
        "{:?}",
        s.write_latency
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["writes"], 5);
    dev.close().unwrap();
}

#[test]
fn unavailable_protection_is_refused_or_falls_back_as_asked() {
    // The crash simulator has no mapping, so no page rights and no keys.
    let mem = || pmkit_media::crashsim::CrashSim::new(1 << 20);
    let c = CreateOptions::default();
    let e = EngineOptions {
        protect: Some(Protect::Pkey),
        ..Default::default()
    };
    let err = Device::create(mem(), &c, &e)
        .err()
        .expect("pkey without a region must be refused");
    assert!(
        matches!(err, BlkError::ProtectUnavailable { mode: "pkey", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("fallback"), "{err}");
    let e = EngineOptions {
        protect: Some(Protect::Pkey),
        pkey_fallback: Some(Protect::None),
        ..Default::default()
    };
    let dev = Device::create(mem(), &c, &e).unwrap();
    assert_eq!(dev.protect(), Protect::None);
    assert!(
        dev.notes()
            .iter()
            .any(|n| n.contains("falling back to none")),
        "{:?}",
        dev.notes()
    );
    dev.close().unwrap();
    // The default picks what exists and says so.
    let dev = Device::create(mem(), &c, &EngineOptions::default()).unwrap();
    assert_eq!(dev.protect(), Protect::None);
    assert!(!dev.notes().is_empty());
    dev.close().unwrap();
    // Private needs a file: anonymous memory is refused.
    let e = EngineOptions {
        protect: Some(Protect::Private),
        ..Default::default()
    };
    assert!(matches!(
        Device::create(Region::anonymous(1 << 20).unwrap(), &c, &e),
        Err(BlkError::ProtectUnavailable {
            mode: "private",
            ..
        })
    ));
    if pmkit_media::features().pku {
        let dev = Device::create(
            Region::anonymous(1 << 20).unwrap(),
            &c,
            &EngineOptions::default(),
        )
        .unwrap();
        assert_eq!(
            dev.protect(),
            Protect::Pkey,
            "pkey is the default where the CPU has it"
        );
        dev.close().unwrap();
    }
}
