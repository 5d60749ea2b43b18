//! Crash tests for the one-fence append (`tail.rs`, docs/fs.md): the streamed bytes, the tail
//! record and the size are made durable by one fence, so a crash can leave the size new and
//! some bytes missing; mount must find that and set the size back. Every image must show the
//! tree before or after the operation in flight, appends whole or absent. And the record must
//! never undo an append that completed: whatever later changes the bytes it covers (an
//! overwrite, a truncate, a store through a direct mapping) clears it first.
//!
//! One test per binary: it reads the count of rolled-back appends the checker keeps.

mod common;

use common::crashcheck::{crash_seq_mount, CUT_APPENDS};
use common::Op;
use pmkit_fs::{Faults, Fs, MkfsOptions, MountOptions, ROOT};
use pmkit_media::{Domain, Fence, Flush, Media, Region};
use std::sync::atomic::Ordering::Relaxed;

fn s(x: &str) -> String {
    x.to_string()
}

#[test]
fn one_fence_appends_are_whole_or_absent_and_never_undone_once_done() {
    let setup = [
        Op::Create(s("f")),
        // a second append that needs a block preallocates: the ops below find blocks
        Op::Write(s("f"), 0, 5000, 1),
        Op::Write(s("f"), 5000, 100, 2),
    ];
    let ops = [
        // one-fence appends: inside a block, across a block boundary, a whole block
        Op::Write(s("f"), 5100, 900, 3),
        Op::Write(s("f"), 6000, 4096, 4),
        Op::Write(s("f"), 10_096, 4096, 5),
        // an overwrite inside the last append's bytes: the record goes first, so a crash
        // after it must not roll the append back
        Op::Write(s("f"), 12_000, 500, 6),
        Op::Chmod(s("f"), 0o600),
        // a truncate (a transaction: the record goes with it), then appends again
        Op::Truncate(s("f"), 9000),
        Op::Write(s("f"), 9000, 3000, 7),
        // an overwrite outside the record's bytes keeps it; the next crash still trusts it
        Op::Write(s("f"), 10, 20, 8),
        Op::Chmod(s("f"), 0o644),
    ];
    let no_probe = |_: &Fs<_>, _: &Op| {};
    for domain in [Domain::Adr, Domain::Eadr] {
        let before = CUT_APPENDS.load(Relaxed);
        let rep = crash_seq_mount(
            1 << 20,
            &setup,
            &ops,
            domain,
            &no_probe,
            &|_, _| {},
            &MountOptions::default(),
        );
        let cut = CUT_APPENDS.load(Relaxed) - before;
        eprintln!("{domain:?}: {rep}; {cut} images had an append rolled back");
        assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
        // ADR persists lines in any order: some images must have needed the rollback (else
        // this would not test it). eADR keeps program order and the size is stored after
        // the data (`Fs::write_fast`), so none do.
        match domain {
            Domain::Adr => assert!(cut > 0, "no image had a cut append"),
            Domain::Eadr => assert_eq!(cut, 0),
        }
    }
    // Without the record, a cut append shows a new size over missing bytes: caught.
    let faulty = MountOptions {
        faults: Faults {
            skip_tail_record: true,
            ..Faults::default()
        },
        ..MountOptions::default()
    };
    let rep = crash_seq_mount(
        1 << 20,
        &setup,
        &ops[..3],
        Domain::Adr,
        &no_probe,
        &|_, _| {},
        &faulty,
    );
    eprintln!("without the tail record: {rep}");
    assert!(rep.violation_count > 0, "a missing record went unnoticed");
}

/// A store through a direct mapping changes bytes with no record after it: mapping the range
/// clears the record, so a crash later keeps what was stored there.
#[test]
fn a_mapped_range_is_not_rolled_back() {
    let dir = pmkit_testkit::scratch();
    let path = dir.path().join("pool");
    let r = Region::create(&path, 4 << 20, &Default::default()).unwrap();
    Fs::mkfs(&r, &MkfsOptions::default()).unwrap();
    // `none`: the one-fence path (`kernel` mode publishes with two fences and no record),
    // and this test's own stores reach the mapping
    let o = MountOptions {
        protect: Some(pmkit_fs::Protect::None),
        ..MountOptions::default()
    };
    let (fs, _) = Fs::mount(&r, &o).unwrap();
    let f = fs.create(ROOT, b"m", 0o644).unwrap().ino;
    fs.open(f).unwrap();
    fs.write(f, 0, &[1u8; 8192]).unwrap();
    // preallocates, then one-fence appends
    fs.write(f, 8192, &[2u8; 100]).unwrap();
    fs.write(f, 8292, &[3u8; 3996]).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 12_288);
    let ext = fs.pin_extents(f, 8192, 4096).unwrap();
    assert_eq!(ext.len(), 1);
    let (at, len) = ext[0];
    // what a user's store through the mapping and `persist` do
    r.write(at as usize, &vec![9u8; len as usize]);
    r.flush(at as usize, len as usize, Flush::best());
    r.fence(Fence::Sfence);
    fs.unpin(f, 8192, 4096);
    drop(fs); // a crash: no unmount
    let (fs, rec) = Fs::mount(&r, &o).unwrap();
    assert!(!rec.was_clean);
    assert_eq!(rec.cut_appends, 0);
    assert_eq!(fs.getattr(f).unwrap().size, 12_288);
    assert_eq!(fs.read(f, 8192, 4096).unwrap(), vec![9u8; 4096]);
}

/// After a clean unmount every append had finished: a record that disagrees with its bytes is
/// damage, named so by `check`; a walking mount still sets the size back.
#[test]
fn a_record_that_disagrees_after_a_clean_unmount_is_damage() {
    use pmkit_media::crashsim::CrashSim;
    let sim = CrashSim::new(1 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    fs.write(f, 0, &[1u8; 5000]).unwrap();
    fs.write(f, 5000, &[2u8; 100]).unwrap(); // into the block it owns: one fence, a record
    fs.unmount();
    assert!(pmkit_fs::check(&sim).notes.is_empty());
    let img = sim.image();
    let at = img.windows(100).position(|w| w == [2u8; 100]).unwrap();
    sim.write(at + 50, &[3]);
    let rep = pmkit_fs::check(&sim);
    assert!(rep.is_clean(), "{rep:?}");
    assert!(
        rep.notes
            .iter()
            .any(|n| n.contains("inode") && n.contains("damage")),
        "{rep:?}"
    );
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    let (fs, rec) = Fs::mount(&sim, &walk).unwrap();
    assert_eq!(rec.cut_appends, 1);
    assert_eq!(fs.getattr(f).unwrap().size, 5000);
}

/// The mount's own undo of a cut append, crashed at every point and mounted again: the append
/// is undone exactly once (the size goes back before the record is cleared, so no crash leaves
/// the new size without the record that proves it cut), and the file reads as before it.
#[test]
fn a_crash_while_the_mount_undoes_a_cut_append_is_undone_again() {
    use pmkit_fs::layout::Superblock;
    use pmkit_media::crashsim::{check_every_fence_from, CrashOpts, CrashSim};
    let sim = CrashSim::new(1 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    fs.write(f, 0, &[1u8; 5000]).unwrap();
    fs.write(f, 5000, &[2u8; 100]).unwrap(); // into the block it owns: one fence, a record
    fs.unmount();
    // The append's bytes lost (one changed) and the pool not clean: as a crash leaves it.
    let img = sim.image();
    let at = img.windows(100).position(|w| w == [2u8; 100]).unwrap();
    sim.write(at + 50, &[3]);
    let sb = pmkit_fs::superblock(&sim).unwrap();
    let unclean = Superblock { clean: false, ..sb };
    for off in sb.geo.sb_offs() {
        sim.write(off, &unclean.encode());
    }
    let opts = CrashOpts {
        k: 6,
        random_images: 16,
        ..Default::default()
    };
    let rep = check_every_fence_from(
        sim.image(),
        &opts,
        |s| {
            let (fs, rec) = Fs::mount(&**s, &MountOptions::default()).unwrap();
            assert_eq!(rec.cut_appends, 1);
            drop(fs); // a crash: no unmount
        },
        |s| {
            let (fs, _) = Fs::mount(&**s, &MountOptions::default()).map_err(|e| e.to_string())?;
            let size = fs.getattr(f).map_err(|e| e.to_string())?.size;
            if size != 5000 {
                return Err(format!("size {size} after the mount's undo was cut"));
            }
            let data = fs.read(f, 0, 6000).map_err(|e| e.to_string())?;
            if data != [1u8; 5000] {
                return Err("the file's bytes changed".into());
            }
            Ok(())
        },
    );
    assert!(rep.fences >= 2, "{rep}");
    assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
}
