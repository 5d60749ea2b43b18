//! Functional tests of the pool API on real mappings: objects, attach/detach, sync, reopen,
//! bad input, and dirty tracking (only written pages are flushed).

use pmkit_media::{Region, RegionOptions};
use pmkit_obj::{Access, ObjError, Pool, PoolOptions, Shadow, Tracking, MAX_NAME};

/// Every test runs with the DRAM shadow (the default) and the thesis's PM shadow.
const SHADOWS: [Shadow; 2] = [Shadow::Dram, Shadow::Pm];

fn opts(shadow: Shadow) -> PoolOptions {
    PoolOptions {
        max_objects: 16,
        protect: true,
        shadow,
        ..PoolOptions::default()
    }
}

fn new_pool(shadow: Shadow, len: usize) -> Pool<Region> {
    Pool::format(Region::anonymous(len).unwrap(), &opts(shadow)).unwrap()
}

#[test]
fn create_write_sync_reopen_on_a_file() {
    for shadow in SHADOWS {
        create_write_sync_reopen_on_a_file_with(shadow);
    }
}

fn create_write_sync_reopen_on_a_file_with(shadow: Shadow) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    let ro = RegionOptions::default();
    {
        let pool =
            Pool::format(Region::create(&path, 1 << 20, &ro).unwrap(), &opts(shadow)).unwrap();
        pool.create("a", 10_000).unwrap();
        pool.create("b", 100).unwrap();
        let a = pool.attach("a", Access::ReadWrite).unwrap();
        a.write(9_000, b"hello").unwrap();
        a.sync().unwrap();
        a.write(0, b"unsynced").unwrap();
        pool.detach(a).unwrap();
    }
    let (pool, rec) = Pool::open(Region::open(&path, &ro).unwrap(), &opts(shadow)).unwrap();
    assert_eq!(rec.objects, 2);
    let a = pool.read_published("a").unwrap();
    assert_eq!(&a[9_000..9_005], b"hello");
    assert_eq!(&a[0..8], &[0u8; 8], "unsynced writes must not be published");
    let names: Vec<_> = pool
        .list()
        .into_iter()
        .map(|o| (o.name, o.size, o.generation))
        .collect();
    assert_eq!(names, vec![("a".into(), 10_000, 2), ("b".into(), 100, 1)]);
    // A second attach after reopen sees the published contents in its shadow (catch-up).
    let h = pool.attach("a", Access::ReadWrite).unwrap();
    let mut buf = [0u8; 5];
    h.read(9_000, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
}

#[test]
fn repeated_syncs_keep_unwritten_pages() {
    for shadow in SHADOWS {
        repeated_syncs_keep_unwritten_pages_with(shadow);
    }
}

fn repeated_syncs_keep_unwritten_pages_with(shadow: Shadow) {
    // After a sync the old slot becomes the shadow; pages written in the previous sync must be
    // brought over before the next one, or they would roll back.
    let pool = new_pool(shadow, 1 << 20);
    pool.create("x", 3 * 4096).unwrap();
    for tracking in [Tracking::Explicit, Tracking::Faults, Tracking::Whole] {
        let h = pool.attach_with("x", Access::ReadWrite, tracking).unwrap();
        for round in 0u8..4 {
            h.write(round as u64 % 3 * 4096, &[round + 1; 16]).unwrap();
            h.sync().unwrap();
        }
        pool.detach(h).unwrap();
        let x = pool.read_published("x").unwrap();
        assert_eq!(x[0], 4, "{tracking:?}");
        assert_eq!(x[4096], 2, "{tracking:?}");
        assert_eq!(x[8192], 3, "{tracking:?}");
    }
}

#[test]
fn multi_object_sync_publishes_all() {
    for shadow in SHADOWS {
        multi_object_sync_publishes_all_with(shadow);
    }
}

fn multi_object_sync_publishes_all_with(shadow: Shadow) {
    let pool = new_pool(shadow, 1 << 20);
    for n in ["a", "b", "c"] {
        pool.create(n, 4096).unwrap();
    }
    let hs: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| pool.attach(n, Access::ReadWrite).unwrap())
        .collect();
    for (i, h) in hs.iter().enumerate() {
        h.write(0, &[i as u8 + 1; 8]).unwrap();
    }
    pool.sync(&hs.iter().collect::<Vec<_>>()).unwrap();
    assert_eq!(pool.stats().intents, 1);
    drop(hs);
    for (i, n) in ["a", "b", "c"].iter().enumerate() {
        assert_eq!(pool.read_published(n).unwrap()[0], i as u8 + 1);
    }
}

#[test]
fn only_written_pages_are_flushed() {
    for shadow in SHADOWS {
        only_written_pages_are_flushed_with(shadow);
    }
}

fn only_written_pages_are_flushed_with(shadow: Shadow) {
    let pool = new_pool(shadow, 4 << 20);
    pool.create("big", 64 * 4096).unwrap();
    for tracking in [Tracking::Explicit, Tracking::Faults] {
        let before = pool.stats().bytes_synced;
        let h = pool
            .attach_with("big", Access::ReadWrite, tracking)
            .unwrap();
        if tracking == Tracking::Faults {
            // Raw stores, as a C caller makes them: the fault handler records the pages.
            let p = h.as_ptr().unwrap().unwrap();
            // SAFETY: inside the attached object (64 pages), read-write handle, no sync between.
            unsafe {
                p.add(5 * 4096 + 7).write(1);
                p.add(40 * 4096).write(2);
                p.add(40 * 4096 + 100).write(3);
            }
        } else {
            h.write(5 * 4096 + 7, &[1]).unwrap();
            h.write(40 * 4096, &[2]).unwrap();
            h.write(40 * 4096 + 100, &[3]).unwrap();
        }
        h.sync().unwrap();
        assert_eq!(pool.stats().bytes_synced - before, 2 * 4096, "{tracking:?}");
        pool.detach(h).unwrap();
        let big = pool.read_published("big").unwrap();
        assert_eq!(
            (big[5 * 4096 + 7], big[40 * 4096], big[40 * 4096 + 100]),
            (1, 2, 3)
        );
    }
}

#[test]
fn bad_input_gets_clear_errors_and_loses_nothing() {
    for shadow in SHADOWS {
        bad_input_gets_clear_errors_and_loses_nothing_with(shadow);
    }
}

fn bad_input_gets_clear_errors_and_loses_nothing_with(shadow: Shadow) {
    let pool = new_pool(shadow, 256 * 1024);
    pool.create("keep", 4096).unwrap();
    let h = pool.attach("keep", Access::ReadWrite).unwrap();
    h.write(0, b"precious").unwrap();
    h.sync().unwrap();

    assert!(matches!(
        pool.create("keep", 10),
        Err(ObjError::Exists { .. })
    ));
    let long = "n".repeat(MAX_NAME + 1);
    let e = pool.create(&long, 10).unwrap_err();
    assert!(matches!(e, ObjError::NameTooLong { .. }), "{e}");
    assert!(matches!(pool.create("", 10), Err(ObjError::BadName { .. })));
    assert!(matches!(pool.create("z", 0), Err(ObjError::BadArgument(_))));
    let e = pool.create("huge", 120 * 1024).unwrap_err();
    assert!(matches!(e, ObjError::PoolFull { .. }), "{e}");
    assert!(e.to_string().contains("largest free extent"), "{e}");
    assert!(matches!(
        pool.attach("nope", Access::Read),
        Err(ObjError::NotFound { .. })
    ));
    assert!(matches!(
        pool.delete("nope"),
        Err(ObjError::NotFound { .. })
    ));
    let e = pool.attach("keep", Access::ReadWrite).err().unwrap();
    assert!(
        matches!(e, ObjError::Busy { .. }) && e.to_string().contains("read-write"),
        "{e}"
    );
    assert!(matches!(pool.delete("keep"), Err(ObjError::Busy { .. })));
    assert!(matches!(
        h.write(4090, b"too long"),
        Err(ObjError::OutOfBounds { .. })
    ));
    assert!(matches!(
        pool.sync(&[&h, &h]),
        Err(ObjError::Duplicate { .. })
    ));
    let id = h.id();
    pool.detach(h).unwrap();
    // Access after detach (the C ABI holds ids): refused.
    let e = pool.write_id(id, 0, b"x").unwrap_err();
    assert!(matches!(e, ObjError::NotAttached { .. }), "{e}");

    let r = pool.attach("keep", Access::Read).unwrap();
    assert!(matches!(r.write(0, b"x"), Err(ObjError::ReadOnly { .. })));
    assert!(matches!(r.sync(), Err(ObjError::ReadOnly { .. })));
    let mut buf = [0u8; 8];
    r.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"precious");

    // Table full.
    let small = Pool::format(
        Region::anonymous(256 * 1024).unwrap(),
        &PoolOptions {
            max_objects: 2,
            ..opts(shadow)
        },
    )
    .unwrap();
    small.create("1", 1).unwrap();
    small.create("2", 1).unwrap();
    assert!(matches!(
        small.create("3", 1),
        Err(ObjError::TableFull { .. })
    ));
    small.delete("1").unwrap();
    small.create("3", 1).unwrap();
}

#[test]
fn corrupt_table_is_reported_and_nothing_is_written() {
    for shadow in SHADOWS {
        corrupt_table_is_reported_and_nothing_is_written_with(shadow);
    }
}

fn corrupt_table_is_reported_and_nothing_is_written_with(shadow: Shadow) {
    use pmkit_media::Media;
    let pool = new_pool(shadow, 256 * 1024);
    pool.create("a", 4096).unwrap();
    pool.create("b", 4096).unwrap();
    let g = pool.geometry();
    let m = pool.into_media();
    // Scribble on b's name.
    let off = g.table_off as usize + 128 + 41;
    m.write(off, b"Q");
    let snapshot = |m: &Region| {
        let mut v = vec![0u8; g.area_off as usize];
        m.read(0, &mut v);
        v
    };
    let before = snapshot(&m);
    let report = Pool::check(&m);
    assert!(!report.is_clean());
    assert!(
        report.errors[0].contains("entry 1") && report.errors[0].contains("checksum"),
        "{:?}",
        report.errors
    );
    let e = Pool::open(&m, &opts(shadow)).err().unwrap();
    assert!(matches!(e, ObjError::Corrupt(_)), "{e}");
    assert!(e.to_string().contains("entry 1"), "{e}");
    assert!(before == snapshot(&m), "a failed open must not write");
}

#[test]
fn not_a_pool() {
    for shadow in SHADOWS {
        not_a_pool_with(shadow);
    }
}

fn not_a_pool_with(shadow: Shadow) {
    let e = Pool::open(Region::anonymous(64 * 1024).unwrap(), &opts(shadow))
        .err()
        .unwrap();
    assert!(matches!(e, ObjError::NotAPool(_)), "{e}");
}
