//! Atomic devices (`--atomic`) on real (tmpfs-backed) regions: every protection mode and write
//! scheme, reopen, FUA/trim/write-zeroes, requests larger than a lane, checksums in the map,
//! damaged maps, unknown feature bits, unclean shutdown, refused options.

mod common;

use common::*;
use pmkit_blk::superblock::{Superblock, FEATURE_ATOMIC, SLOT_OFF};
use pmkit_blk::{BlkError, CreateOptions, Device, EngineOptions, Protect, WriteScheme};
use pmkit_media::{Media, Region, RegionOptions};

fn atomic(block_size: u32, checksum: bool) -> CreateOptions {
    CreateOptions {
        block_size,
        checksum,
        atomic: true,
        ..Default::default()
    }
}

/// Write `data` behind the engine's back (the device must be closed).
fn poke(path: &std::path::Path, off: usize, data: &[u8]) {
    let r = Region::open(path, &RegionOptions::default()).unwrap();
    r.write(off, data);
    r.flush(off, data.len(), pmkit_media::Flush::best());
    r.fence(pmkit_media::Fence::Sfence);
}

fn peek_u64(path: &std::path::Path, off: usize) -> u64 {
    let r = Region::open(path, &RegionOptions::default()).unwrap();
    r.load_u64(off)
}

#[test]
fn every_mode_and_scheme_reads_back_what_it_wrote_and_keeps_it_across_reopen() {
    let dir = shm_dir();
    for protect in modes() {
        for write in schemes() {
            for (bs, checksum) in [(4096u32, false), (512, true)] {
                let eng = engine(protect, write);
                let name = format!("{protect}-{write}-{bs}");
                let (path, dev) = new_device(&dir, &name, 1 << 20, &atomic(bs, checksum), &eng);
                let info = dev.info();
                assert!(info.atomic && info.lanes >= 1, "{name}: {info:?}");
                let spare = info.superblock.layout.spare;
                assert_eq!(info.free_blocks, spare, "{name}");
                let bsz = bs as usize;
                let blocks = dev.capacity() / bs as u64;
                // Larger than a lane's free blocks and than one publish chunk.
                let mix = Mix { multi: 20, fua: 40 };
                let multi = mix.write(&dev);
                // Overwrite many times: free blocks cycle through every lane.
                for round in 0..3 * spare {
                    dev.write(7 * bs as u64, &pattern(100 + round, 7, bsz), false)
                        .unwrap();
                }
                dev.write(7 * bs as u64, &pattern(1, 7, bsz), false)
                    .unwrap();
                dev.flush().unwrap();
                let check = |dev: &Device<Region>| {
                    mix.check(dev, &multi, &name);
                    assert_eq!(dev.free_blocks().len() as u64, spare, "{name}: free lists");
                };
                check(&dev);
                let s = dev.stats();
                if protect != Protect::PtBatch {
                    // pt-batch absorbs overwrites in DRAM before they reach the map.
                    assert!(s.atomic_blocks >= 4 + 20 + 3 + 3 * spare, "{name}: {s:?}");
                }
                dev.close().unwrap();
                drop(dev);
                let rep = pmkit_blk::check_path(&path, false).unwrap();
                assert!(rep.is_clean() && rep.findings.is_empty(), "{name}: {rep:?}");
                let map = rep.map.as_ref().unwrap();
                assert_eq!(
                    (map.entries, map.free_blocks, map.problems),
                    (blocks, spare, 0)
                );
                if checksum {
                    assert_eq!((rep.blocks_checked, rep.bad_blocks), (blocks, 0), "{name}");
                }
                let dev = pmkit_blk::open_path(&path, &eng).unwrap();
                assert!(dev.was_clean());
                check(&dev);
                dev.close().unwrap();
            }
        }
    }
}

#[test]
fn a_damaged_map_is_refused_at_open_and_reported_by_check() {
    let dir = shm_dir();
    let e = engine(Protect::None, WriteScheme::Nt);
    let (p, dev) = new_device(&dir, "dup", 1 << 20, &atomic(4096, false), &e);
    let l = dev.info().superblock.layout;
    dev.close().unwrap();
    drop(dev);
    // Block 3 now names block 5's physical block: mapped twice, and one block leaks.
    let e5 = peek_u64(&p, l.map_entry_off(5));
    poke(&p, l.map_entry_off(3), &e5.to_le_bytes());
    let rep = pmkit_blk::check_path(&p, false).unwrap();
    assert!(!rep.is_clean(), "{rep:?}");
    let map = rep.map.as_ref().unwrap();
    assert_eq!(map.problems, 1, "{map:?}");
    assert!(
        map.examples[0].contains("mapped twice: by blocks 3 and 5"),
        "{map:?}"
    );
    assert_eq!(
        map.free_blocks,
        l.spare + 1,
        "the block 3 used to name is lost"
    );
    match pmkit_blk::open_path(&p, &e) {
        Err(BlkError::MapCorrupt { why }) => assert!(why.contains("mapped twice"), "{why}"),
        other => panic!("expected MapCorrupt, got {:?}", other.map(|_| ())),
    }
    // Out of range.
    poke(&p, l.map_entry_off(3), &(l.phys_blocks() + 7).to_le_bytes());
    let rep = pmkit_blk::check_path(&p, false).unwrap();
    assert!(
        rep.map.as_ref().unwrap().examples[0].contains("past the last"),
        "{rep:?}"
    );
    assert!(pmkit_blk::open_path(&p, &e).is_err());
    // CRC bits on a device without checksums.
    poke(&p, l.map_entry_off(3), &(3u64 | 1 << 40).to_le_bytes());
    let rep = pmkit_blk::check_path(&p, false).unwrap();
    assert!(!rep.is_clean());
    assert!(
        rep.map.as_ref().unwrap().examples[0].contains("CRC bits"),
        "{rep:?}"
    );
    // Repaired: clean again.
    poke(&p, l.map_entry_off(3), &3u64.to_le_bytes());
    assert!(pmkit_blk::check_path(&p, false).unwrap().is_clean());
}

#[test]
fn checksums_live_in_the_map_and_catch_corruption() {
    let dir = shm_dir();
    for protect in modes() {
        let e = engine(protect, WriteScheme::Nt);
        let (p, dev) = new_device(&dir, protect.name(), 1 << 20, &atomic(512, true), &e);
        for b in 0..16 {
            dev.write(b * 512, &pattern(7, b, 512), false).unwrap();
        }
        let l = dev.info().superblock.layout;
        dev.close().unwrap();
        drop(dev);
        let pba = peek_u64(&p, l.map_entry_off(5)) & 0xffff_ffff;
        let at = l.phys_off(pba) + 100;
        poke(&p, at, &[0xee]);
        let rep = pmkit_blk::check_path(&p, false).unwrap();
        assert!(!rep.is_clean());
        assert_eq!(
            (rep.bad_blocks, rep.bad_block_list.clone()),
            (1, vec![5]),
            "{protect}"
        );
        let dev = pmkit_blk::open_path(&p, &e).unwrap();
        let mut buf = vec![0x55u8; 4 * 512];
        match dev.read(4 * 512, &mut buf) {
            Err(BlkError::Checksum { block: 5, .. }) => {}
            other => panic!("{protect}: expected a checksum error on block 5, got {other:?}"),
        }
        assert!(
            buf.iter().all(|&b| b == 0),
            "{protect}: no corrupt data handed out"
        );
        dev.write(5 * 512, &pattern(8, 5, 512), false).unwrap();
        let mut one = vec![0u8; 512];
        dev.read(5 * 512, &mut one).unwrap();
        assert_eq!(one, pattern(8, 5, 512));
        dev.close().unwrap();
        drop(dev);
        assert!(pmkit_blk::check_path(&p, false).unwrap().is_clean());
    }
}

#[test]
fn unknown_feature_bits_are_refused_with_a_clear_error() {
    let dir = shm_dir();
    let e = engine(Protect::None, WriteScheme::Nt);
    let (p, dev) = new_device(&dir, "feat", 1 << 20, &atomic(4096, false), &e);
    dev.close().unwrap();
    drop(dev);
    let (found, _) = pmkit_blk::inspect_path(&p).unwrap();
    let mut sb: Superblock = found.current.clone();
    assert_eq!(sb.layout.features, FEATURE_ATOMIC);
    sb.layout.features |= 1 << 7;
    sb.seq += 1;
    poke(&p, SLOT_OFF[1 - found.slot] as usize, &sb.encode());
    for err in [
        pmkit_blk::open_path(&p, &e).map(|_| ()).unwrap_err(),
        pmkit_blk::inspect_path(&p).map(|_| ()).unwrap_err(),
    ] {
        assert!(
            matches!(err, BlkError::UnknownFeatures { unknown: 0x80, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("newer pmkit"), "{err}");
    }
    let rep = pmkit_blk::check_path(&p, false).unwrap();
    assert!(
        !rep.is_clean() && rep.findings[0].what.contains("feature"),
        "{rep:?}"
    );
}

#[test]
fn unclean_shutdown_is_harmless_and_only_a_warning() {
    let dir = shm_dir();
    let e = engine(Protect::None, WriteScheme::Nt);
    let (p, dev) = new_device(&dir, "unclean", 1 << 20, &atomic(4096, false), &e);
    dev.write(0, &pattern(1, 0, 4096), false).unwrap();
    drop(dev); // no close: stays marked unclean, like a crash
    let rep = pmkit_blk::check_path(&p, false).unwrap();
    assert!(rep.is_clean(), "{rep:?}");
    assert!(
        rep.findings.iter().any(|f| f.what.contains("harmless")),
        "{rep:?}"
    );
    let dev = pmkit_blk::open_path(&p, &e).unwrap();
    assert!(!dev.was_clean());
    assert!(
        dev.notes().iter().any(|n| n.contains("atomic")),
        "{:?}",
        dev.notes()
    );
    let mut buf = vec![0u8; 4096];
    dev.read(0, &mut buf).unwrap();
    assert_eq!(buf, pattern(1, 0, 4096));
    dev.close().unwrap();
}

#[test]
fn options_that_do_not_apply_are_refused_and_write_verify_works() {
    let dir = shm_dir();
    let mut e = engine(Protect::None, WriteScheme::Nt);
    e.subpage = true;
    let media = Region::anonymous(1 << 20).unwrap();
    match Device::create(media, &atomic(4096, false), &e) {
        Err(BlkError::BadOption(m)) => assert!(m.contains("subpage"), "{m}"),
        other => panic!("expected BadOption, got {:?}", other.map(|_| ())),
    }
    let e = EngineOptions {
        write_verify: true,
        ..engine(Protect::None, WriteScheme::Clwb)
    };
    let (_p, dev) = new_device(&dir, "verify", 1 << 20, &atomic(512, true), &e);
    dev.write(0, &pattern(1, 0, 512 * 9), false).unwrap();
    let mut back = vec![0u8; 512 * 9];
    dev.read(0, &mut back).unwrap();
    assert_eq!(back, pattern(1, 0, 512 * 9));
    assert_eq!(dev.stats().verify_failures, 0);
    // Too small for an atomic layout: a clear error, nothing created.
    let small = Region::anonymous(64 << 10).unwrap();
    assert!(matches!(
        Device::create(
            small,
            &atomic(4096, false),
            &engine(Protect::None, WriteScheme::Nt)
        ),
        Err(BlkError::TooSmall { .. })
    ));
}
