//! Page CRCs of object data (`PoolOptions::checksum`): a byte that changed in a published
//! page is an EIO-class `ObjError::Checksum` naming the object and the page, never data; every
//! attach (either shadow, either access) and `read_published` fail, `Pool::check` lists the
//! page, the other objects stay usable, and delete + create + a sync of the whole object
//! replaces it. A pool made without checksums is what it was before they existed, and a pool
//! with a feature flag this build does not know is refused.

mod common;

use common::{marker, media_off_of, put};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Media;
use pmkit_obj::layout::{Geometry, HEADER_LEN};
use pmkit_obj::{Access, ObjError, Pool, PoolOptions, Shadow, Tracking, PAGE};

const LEN: usize = 256 * 1024;

fn opts(shadow: Shadow, checksum: bool) -> PoolOptions {
    PoolOptions {
        max_objects: 8,
        protect: false,
        shadow,
        checksum,
        ..PoolOptions::default()
    }
}

fn assert_checksum(error: ObjError, name: &str, want_page: u64, context: &str) {
    assert_eq!(error.os_errno(), Some(libc::EIO), "{context}: {error}");
    match &error {
        ObjError::Checksum {
            object,
            page,
            stored,
            computed,
            ..
        } => {
            assert_eq!(object, name, "{context}");
            assert_eq!(*page, want_page, "{context}");
            assert_ne!(stored, computed, "{context}");
        }
        _ => panic!("{context}: expected a checksum error, got {error}"),
    }
    assert!(
        error.to_string().contains(&format!("page {want_page}")),
        "{error}"
    );
}

/// Attach `name` with `access`, and for a read-write PM shadow (caught up at the first access)
/// read a byte: the first point where the object's data is handed out.
fn first_access(pool: &Pool<&CrashSim>, name: &str, access: Access) -> Result<(), ObjError> {
    let h = pool.attach_with(name, access, Tracking::Explicit)?;
    let mut byte = [0u8; 1];
    let read = h.read(0, &mut byte);
    h.detach()?;
    read
}

#[test]
fn a_flipped_byte_in_a_published_page_is_a_checksum_error_until_the_object_is_replaced() {
    for shadow in [Shadow::Dram, Shadow::Pm] {
        let context = format!("{shadow:?}");
        let sim = CrashSim::new(LEN);
        let pool = Pool::format(&sim, &opts(shadow, true)).unwrap();
        assert!(pool.checksum());
        pool.create("bad", 3 * PAGE as u64).unwrap();
        pool.create("good", PAGE as u64).unwrap();
        let data = marker(3 * PAGE, 3);
        put(&pool, "bad", 0, &data);
        let good = marker(PAGE, 9);
        put(&pool, "good", 0, &good);
        assert_eq!(pool.read_published("bad").unwrap(), data, "{context}");
        assert!(Pool::check(&&sim).is_clean(), "{context}");

        // One byte of page 1 of the published slot changes (no media error: the media returns it).
        let at = media_off_of(&sim, &data) + PAGE + 100;
        let mut byte = [0u8; 1];
        sim.read(at, &mut byte);
        sim.write(at, &[byte[0] ^ 0x10]);

        for access in [Access::Read, Access::ReadWrite] {
            let error = first_access(&pool, "bad", access).expect_err("no corrupt data");
            assert_checksum(error, "bad", 1, &format!("{context} {access:?}"));
        }
        let listed = pool.list();
        assert_eq!(
            listed.iter().find(|o| o.name == "bad").unwrap().attached,
            None,
            "{context}: nothing stays attached"
        );
        let error = pool.read_published("bad").expect_err("no copy of bad data");
        assert_checksum(error, "bad", 1, &context);
        let report = Pool::check(&&sim);
        assert_eq!(report.errors.len(), 1, "{context}: {:?}", report.errors);
        let finding = &report.errors[0];
        assert!(
            finding.contains("\"bad\"")
                && finding.contains("page 1")
                && finding.contains("checksum"),
            "{context}: {finding}"
        );

        // The other object is unaffected.
        let r = pool.attach("good", Access::Read).unwrap();
        let mut back = vec![0u8; PAGE];
        r.read(0, &mut back).unwrap();
        assert_eq!(back, good, "{context}");
        r.detach().unwrap();
        put(&pool, "good", 10, b"still usable");

        // Reopened (open does not read data), the damage is still found, then replaced.
        let sim = pool.into_media();
        let (pool, _) = Pool::open(sim, &opts(shadow, false)).unwrap();
        assert!(
            pool.checksum(),
            "{context}: the header says so, not the options"
        );
        let error = first_access(&pool, "bad", Access::Read).unwrap_err();
        assert_checksum(error, "bad", 1, &context);
        pool.delete("bad").unwrap();
        pool.create("bad", 3 * PAGE as u64).unwrap();
        let fresh = marker(3 * PAGE, 5);
        put(&pool, "bad", 0, &fresh);
        assert_eq!(pool.read_published("bad").unwrap(), fresh, "{context}");
        first_access(&pool, "bad", Access::Read).unwrap();
        first_access(&pool, "bad", Access::ReadWrite).unwrap();
        assert!(Pool::check(&sim).is_clean(), "{context}");
    }
}

#[test]
fn a_flipped_byte_in_the_unpublished_slot_is_rewritten_not_served() {
    for shadow in [Shadow::Dram, Shadow::Pm] {
        let context = format!("{shadow:?}");
        let sim = CrashSim::new(LEN);
        let pool = Pool::format(&sim, &opts(shadow, true)).unwrap();
        pool.create("o", 2 * PAGE as u64).unwrap();
        let first = marker(2 * PAGE, 1);
        put(&pool, "o", 0, &first);
        let second = marker(2 * PAGE, 2);
        put(&pool, "o", 0, &second);
        // `first` is now the other (target) slot: damage it, then sync one page only.
        let at = media_off_of(&sim, &first) + PAGE + 7;
        sim.write(at, &[0]);
        put(&pool, "o", 0, b"x");
        let mut want = second.clone();
        want[0] = b'x';
        assert_eq!(pool.read_published("o").unwrap(), want, "{context}");
        assert!(Pool::check(&&sim).is_clean(), "{context}");
    }
}

#[test]
fn a_plain_pool_has_no_feature_flags_and_unknown_flags_are_refused() {
    let sim = CrashSim::new(LEN);
    let pool = Pool::format(&sim, &opts(Shadow::Dram, false)).unwrap();
    assert!(!pool.checksum());
    let plain = pool.geometry();
    assert_eq!(plain.features, 0);
    assert_eq!(plain, Geometry::new(LEN, 8, plain.pool_id).unwrap());
    drop(pool);
    let mut header = [0u8; HEADER_LEN];
    sim.read(0, &mut header);
    assert_eq!(
        header[12..16],
        [0; 4],
        "a plain header is as before feature flags"
    );

    let sim = CrashSim::new(LEN);
    let pool = Pool::format(&sim, &opts(Shadow::Dram, true)).unwrap();
    let g = pool.geometry();
    assert!(g.checksum() && g.area_off > plain.area_off);
    drop(pool);
    // The same header with one more (unknown) flag and a valid CRC: refused, nothing written.
    let mut unknown = g;
    unknown.features |= 1 << 7;
    let encoded = unknown.encode();
    sim.write(8, &encoded[8..]);
    let before = sim.image();
    let error = Pool::open(&sim, &opts(Shadow::Dram, true)).err().unwrap();
    assert!(matches!(error, ObjError::NotAPool(_)), "{error}");
    assert!(error.to_string().contains("feature"), "{error}");
    assert_eq!(sim.image(), before);
    assert!(!Pool::check(&&sim).is_clean());
}
