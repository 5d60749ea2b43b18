//! Media errors injected by the crash simulator: an object or a pool structure the media cannot
//! return is an EIO (`ObjError::BadMedia`) naming it, never data (the simulator's fill
//! pattern) and never a half-made attachment; the rest of the pool stays usable; a sync
//! rewrites the unreadable pages of the slot it publishes; a poisoned object is replaced by
//! delete + create.

mod common;

use common::{marker, media_off_of, put};
use pmkit_media::crashsim::CrashSim;
use pmkit_obj::layout::Geometry;
use pmkit_obj::{Access, ObjError, Pool, PoolOptions, Shadow, Tracking, PAGE};

const LEN: usize = 256 * 1024;
const SHADOWS: [Shadow; 2] = [Shadow::Dram, Shadow::Pm];

fn opts(shadow: Shadow) -> PoolOptions {
    PoolOptions {
        max_objects: 8,
        protect: false,
        shadow,
        ..PoolOptions::default()
    }
}

fn assert_bad_media(error: ObjError, what: &str, context: &str) {
    assert_eq!(error.os_errno(), Some(libc::EIO), "{context}: {error}");
    match &error {
        ObjError::BadMedia { what: named, .. } => {
            assert!(
                named.contains(what),
                "{context}: {error} should name {what}"
            )
        }
        _ => panic!("{context}: expected BadMedia, got {error}"),
    }
}

#[test]
fn a_poisoned_object_fails_every_attach_with_eio_and_the_pool_stays_usable() {
    for shadow in SHADOWS {
        let context = format!("{shadow:?}");
        let sim = CrashSim::new(LEN);
        let pool = Pool::format(&sim, &opts(shadow)).unwrap();
        pool.create("bad", 2 * PAGE as u64).unwrap();
        pool.create("good", PAGE as u64).unwrap();
        let data = marker(2 * PAGE, 3);
        put(&pool, "bad", 0, &data);
        let good = marker(PAGE, 9);
        put(&pool, "good", 0, &good);
        let at = media_off_of(&sim, &data);
        sim.poison(at + PAGE + 100, 1);

        for access in [Access::Read, Access::ReadWrite] {
            for tracking in [Tracking::Explicit, Tracking::Whole] {
                let error = pool
                    .attach_with("bad", access, tracking)
                    .err()
                    .expect("a poisoned object must not attach");
                assert_bad_media(error, "\"bad\"", &format!("{context} {access:?}"));
            }
        }
        // Nothing was left attached: a writer may still come (and fail the same way), and
        // the object can be deleted.
        let listed = pool.list();
        let bad = listed.iter().find(|o| o.name == "bad").unwrap();
        assert_eq!(bad.attached, None, "{context}");
        let error = pool.read_published("bad").expect_err("no copy of poison");
        assert_bad_media(error, "\"bad\"", &context);

        // The other object is unaffected: read-only and read-write attachments, a sync.
        let r = pool.attach("good", Access::Read).unwrap();
        let mut back = vec![0u8; PAGE];
        r.read(0, &mut back).unwrap();
        assert_eq!(back, good, "{context}");
        r.detach().unwrap();
        put(&pool, "good", 10, b"still usable");
        let mut expect = good.clone();
        expect[10..22].copy_from_slice(b"still usable");
        assert_eq!(pool.read_published("good").unwrap(), expect, "{context}");

        // Reopened, the data is still unreadable (media errors are not metadata: open and
        // check are clean) and the rest still reads.
        let sim = pool.into_media();
        assert!(Pool::check(&sim).is_clean(), "{context}");
        let (pool, _) = Pool::open(sim, &opts(shadow)).unwrap();
        let error = pool.attach("bad", Access::Read).err().unwrap();
        assert_bad_media(error, "\"bad\"", &format!("{context} reopened"));
        assert_eq!(pool.read_published("good").unwrap(), expect, "{context}");

        // Delete + create replaces it: create zeroes both slots with whole-line stores.
        pool.delete("bad").unwrap();
        pool.create("bad", 2 * PAGE as u64).unwrap();
        assert_eq!(
            sim.poisoned_lines(),
            0,
            "{context}: create rewrote the lines"
        );
        let h = pool.attach("bad", Access::ReadWrite).unwrap();
        let mut back = vec![0xFFu8; 2 * PAGE];
        h.read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0), "{context}");
        h.detach().unwrap();
        put(&pool, "bad", 0, &data);
        assert_eq!(pool.read_published("bad").unwrap(), data, "{context}");
    }
}

#[test]
fn a_read_of_pm_that_went_bad_while_attached_is_eio_and_no_data() {
    for shadow in SHADOWS {
        let context = format!("{shadow:?}");
        let sim = CrashSim::new(LEN);
        let pool = Pool::format(&sim, &opts(shadow)).unwrap();
        pool.create("obj", PAGE as u64).unwrap();
        let data = marker(PAGE, 5);
        put(&pool, "obj", 0, &data);
        let r = pool.attach("obj", Access::Read).unwrap();
        sim.poison(media_off_of(&sim, &data) + 64, 1);
        let mut back = vec![0x11u8; PAGE];
        let got = r.read(0, &mut back);
        match shadow {
            // The DRAM copy was made at attach, from good media: it is the data.
            Shadow::Dram => {
                got.unwrap();
                assert_eq!(back, data, "{context}");
            }
            // A PM reader reads the slot itself: an error, and nothing of the slot handed out.
            Shadow::Pm => {
                assert_bad_media(got.unwrap_err(), "\"obj\"", &context);
                assert!(back.iter().all(|&b| b == 0), "{context}: data leaked");
                // A read beside the bad line still works.
                let mut head = [0u8; 64];
                r.read(0, &mut head).unwrap();
                assert_eq!(head[..], data[..64], "{context}");
            }
        }
        r.detach().unwrap();
    }
}

#[test]
fn a_sync_rewrites_the_unreadable_pages_of_the_slot_it_publishes() {
    for shadow in SHADOWS {
        let context = format!("{shadow:?}");
        let sim = CrashSim::new(LEN);
        let pool = Pool::format(&sim, &opts(shadow)).unwrap();
        pool.create("obj", 3 * PAGE as u64).unwrap();
        let mut data = marker(3 * PAGE, 7);
        put(&pool, "obj", 0, &data);
        // A second sync of page 0 only: afterwards both slots hold the data and differ on page
        // 0 at most, so the next sync's own work would not touch page 2 of its target.
        data[..4].copy_from_slice(b"two!");
        put(&pool, "obj", 0, &data[..4]);
        let info = pool.list().into_iter().find(|o| o.name == "obj").unwrap();
        let target = info.offset as usize + (info.slot ^ 1) as usize * info.capacity as usize;
        sim.poison(target + 2 * PAGE + 10, 1);
        // The published slot is fine: attach works; the sync rewrites page 2 of its target.
        data[..4].copy_from_slice(b"3rd!");
        put(&pool, "obj", 0, &data[..4]);
        assert_eq!(sim.poisoned_lines(), 0, "{context}: the sync cleared it");
        assert_eq!(pool.read_published("obj").unwrap(), data, "{context}");
        let sim = pool.into_media();
        let (pool, _) = Pool::open(sim, &opts(shadow)).unwrap();
        assert_eq!(pool.read_published("obj").unwrap(), data, "{context}");
    }
}

/// Where to poison a pool, from its geometry and the table entry of object "b".
type Spot = fn(&Geometry, usize) -> usize;

/// A pool with objects "a" and "b" (published); its geometry and the table entry of "b".
fn two_objects(sim: &CrashSim) -> (Geometry, usize) {
    let pool = Pool::format(sim, &opts(Shadow::Dram)).unwrap();
    pool.create("a", PAGE as u64).unwrap();
    pool.create("b", PAGE as u64).unwrap();
    put(&pool, "a", 0, b"aaaa");
    put(&pool, "b", 0, b"bbbb");
    let index = pool.list().iter().find(|o| o.name == "b").unwrap().index;
    (pool.geometry(), index)
}

#[test]
fn a_poisoned_pool_structure_fails_open_clearly_and_is_a_finding_of_check() {
    // (what to poison, what open and check must name)
    let cases: [(&str, Spot, &str); 4] = [
        ("header", |_, _| 20, "pool header"),
        (
            "live table entry",
            |g, b| g.table_off as usize + b * 128 + 50,
            "object table entry",
        ),
        (
            "free table entry",
            |g, _| g.table_off as usize + 7 * 128,
            "object table entry 7",
        ),
        (
            "Sync Table head",
            |g, _| g.sync_off as usize,
            "PMO Sync Table",
        ),
    ];
    for (case, at, names) in cases {
        let sim = CrashSim::new(LEN);
        let (geometry, b) = two_objects(&sim);
        let off = at(&geometry, b);
        sim.poison(off, 1);
        let error = Pool::open(&sim, &opts(Shadow::Dram))
            .err()
            .expect("open must fail");
        assert_bad_media(error, names, case);
        let report = Pool::check(&&sim);
        assert!(!report.is_clean(), "{case}");
        assert!(
            report
                .errors
                .iter()
                .any(|e| e.contains(names)
                    && (e.contains("unreadable") || e.contains("cannot be read"))),
            "{case}: {:?}",
            report.errors
        );
    }
}

#[test]
fn a_media_error_in_unused_sync_table_bytes_does_not_stop_open() {
    let sim = CrashSim::new(LEN);
    let (geometry, _) = two_objects(&sim);
    // Past the head and any intent of two objects: never read unless a committed intent
    // reaches it.
    sim.poison(geometry.sync_off as usize + 2048, 1);
    assert!(Pool::check(&&sim).is_clean());
    let (pool, _) = Pool::open(&sim, &opts(Shadow::Dram)).unwrap();
    assert_eq!(&pool.read_published("a").unwrap()[..4], b"aaaa");
    // A multi-object sync (an intent record) still works and publishes both.
    let a = pool
        .attach_with("a", Access::ReadWrite, Tracking::Explicit)
        .unwrap();
    let b = pool
        .attach_with("b", Access::ReadWrite, Tracking::Explicit)
        .unwrap();
    a.write(0, b"AAAA").unwrap();
    b.write(0, b"BBBB").unwrap();
    pool.sync(&[&a, &b]).unwrap();
    a.detach().unwrap();
    b.detach().unwrap();
    let sim = pool.into_media();
    let (pool, _) = Pool::open(sim, &opts(Shadow::Dram)).unwrap();
    assert_eq!(&pool.read_published("b").unwrap()[..4], b"BBBB");
}

/// PMO Sync makes data durable with flushes and fences, never `msync`: a failing msync does
/// not concern it, and the published state is intact on reopen. (If a sync ever calls
/// `sync_pages`, this test fails and the error path needs a test of its own.)
#[test]
fn pmo_sync_does_not_depend_on_msync() {
    for shadow in SHADOWS {
        let sim = CrashSim::new(LEN);
        let pool = Pool::format(&sim, &opts(shadow)).unwrap();
        pool.create("obj", PAGE as u64).unwrap();
        sim.fail_syncs_after(0);
        put(&pool, "obj", 0, b"durable");
        let sim = pool.into_media();
        let (pool, _) = Pool::open(sim, &opts(shadow)).unwrap();
        assert_eq!(&pool.read_published("obj").unwrap()[..7], b"durable");
    }
}
