//! The one protection layer: every mode gives each access its rights, a failed store poisons
//! the gate the same way in every mode, and `kernel` runs on the crash simulator as the
//! kernel's DAX copy.

use pmkit_media::crashsim::CrashSim;
use pmkit_media::guard::Guarded;
use pmkit_media::{Media, MediaError, Protect, Region, RegionOptions};

/// The modes this CPU can run on a file in /dev/shm.
fn modes() -> Vec<Protect> {
    let mut m = vec![
        Protect::None,
        Protect::Pt,
        Protect::PtBatch,
        Protect::Private,
        Protect::Kernel,
    ];
    if pmkit_media::features().pku {
        m.push(Protect::Pkey);
    }
    m
}

#[test]
fn every_mode_reads_and_writes_through_its_windows_and_gives_the_mapping_back() {
    let dir = pmkit_testkit::scratch();
    for (i, mode) in modes().into_iter().enumerate() {
        let path = dir.path().join(format!("r{i}"));
        let r = Region::create(&path, 1 << 20, &RegionOptions::default()).unwrap();
        let g = Guarded::open(r, Some(mode), None).unwrap();
        assert_eq!(g.mode(), mode);
        let data: Vec<u8> = (0..9000u32).map(|k| (k * 13) as u8).collect();
        g.write(4093, &data);
        g.write_nt(20_000, &data);
        g.store_u64(64 * 1024, 0xdead_beef);
        g.write_then_word(128 * 1024, &[7u8; 56], 0x1122);
        g.store_words(256 * 1024, &[1, 2, 3]);
        g.flush(0, 1 << 20, pmkit_media::Flush::best());
        g.fence(pmkit_media::Fence::Sfence);
        g.check().unwrap();
        let mut back = vec![0u8; data.len()];
        g.read(4093, &mut back);
        assert_eq!(back, data, "{mode}");
        g.read(20_000, &mut back);
        assert_eq!(back, data, "{mode}");
        assert_eq!(g.load_u64(64 * 1024), 0xdead_beef, "{mode}");
        assert_eq!(g.load_u64(128 * 1024 + 56), 0x1122, "{mode}");
        assert_eq!(g.load_u64(256 * 1024 + 16), 3, "{mode}");
        let r = g.into_inner();
        // The owner's own store lands again: it would fault if the rights had stayed.
        r.store_u64(8, 5);
        assert_eq!(r.load_u64(8), 5);
    }
}

#[test]
fn a_failed_store_poisons_every_mode_alike() {
    let dir = pmkit_testkit::scratch();
    for (i, mode) in modes().into_iter().enumerate() {
        let path = dir.path().join(format!("r{i}"));
        let r = Region::create(&path, 1 << 20, &RegionOptions::default()).unwrap();
        let g = Guarded::open(r, Some(mode), None).unwrap();
        g.write(0, b"before");
        g.gate().inject_failure("injected EIO");
        // Every later store is dropped, every write window refused; reads go on.
        g.write(0, b"AFTER!");
        g.store_u64(64, 9);
        let e = g.with_write(0, 8, |v| v.write(0, b"window")).unwrap_err();
        assert!(matches!(e, MediaError::Poisoned { .. }), "{mode}: {e}");
        assert!(e.to_string().contains("injected EIO"), "{e}");
        let mut b = [0u8; 6];
        g.read(0, &mut b);
        assert_eq!(&b, b"before", "{mode}");
        assert_eq!(g.load_u64(64), 0, "{mode}");
        assert!(g.check().is_err());
    }
}

#[test]
fn auto_is_one_policy_for_every_media() {
    let dir = pmkit_testkit::scratch();
    let pku = pmkit_media::features().pku;
    let file = Region::create(&dir.path().join("f"), 1 << 20, &RegionOptions::default()).unwrap();
    let g = Guarded::open(file, None, None).unwrap();
    let want = if pku { Protect::Pkey } else { Protect::Kernel };
    assert_eq!(g.mode(), want, "{}", g.why());
    let anon = Region::anonymous(1 << 20).unwrap();
    let g = Guarded::open(anon, None, None).unwrap();
    let want = if pku { Protect::Pkey } else { Protect::Pt };
    assert_eq!(g.mode(), want, "{}", g.why());
    let g = Guarded::open(CrashSim::new(1 << 16), None, None).unwrap();
    assert_eq!(g.mode(), Protect::None);
    drop(g);
    let p = dir.path().join("ro");
    drop(Region::create(&p, 1 << 20, &RegionOptions::default()).unwrap());
    let ro = Region::open_read_only(&p).unwrap();
    let g = Guarded::open(ro, None, None).unwrap();
    assert_eq!(g.mode(), Protect::None, "{}", g.why());
}

#[test]
fn modes_that_cannot_run_say_why_and_pkey_falls_back_when_asked() {
    for mode in [Protect::Pt, Protect::Private, Protect::Pkey] {
        let e = Guarded::open(CrashSim::new(1 << 16), Some(mode), None)
            .err()
            .unwrap();
        assert!(
            matches!(e, MediaError::ProtectUnavailable { .. }),
            "{mode}: {e}"
        );
        assert!(e.to_string().contains("simulator"), "{e}");
    }
    if !pmkit_media::features().pku {
        let anon = Region::anonymous(1 << 20).unwrap();
        let g = Guarded::open(anon, Some(Protect::Pkey), Some(Protect::Pt)).unwrap();
        assert_eq!(g.mode(), Protect::Pt);
        assert!(g.why().contains("falling back to pt"), "{}", g.why());
    }
}

/// On the simulator `kernel` is the kernel's DAX copy: a store is durable when it returns,
/// with no flush or fence from the caller.
#[test]
fn kernel_on_the_simulator_is_durable_at_return() {
    let g = Guarded::open(CrashSim::new(1 << 16), Some(Protect::Kernel), None).unwrap();
    assert_eq!(g.mode(), Protect::Kernel);
    g.write(4096, b"durable");
    g.store_u64(8192, 77);
    let img = g.inner().durable_image();
    assert_eq!(&img[4096..4103], b"durable");
    assert_eq!(u64::from_le_bytes(img[8192..8200].try_into().unwrap()), 77);
}
