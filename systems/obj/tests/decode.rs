//! No byte sequence panics the decoders: random images, and images of a real pool with bytes
//! flipped or with a structure replaced by an arbitrary one that carries a valid checksum (so
//! the checks behind the CRC are reached), are fed to `Pool::check` and `Pool::open`. Each must
//! return Ok or Err; a panic fails the test, and proptest's timeout catches a hang.

use pmkit_media::crashsim::CrashSim;
use pmkit_obj::layout::{Descriptor, Geometry, Intent, ENTRY};
use pmkit_obj::{Access, Pool, PoolOptions, MAX_SYNC};
use proptest::prelude::*;

const POOL_LEN: usize = 64 * 4096;
const MAX_OBJECTS: u32 = 8;

/// What a fuzz target does with its input; kept here so the public API keeps allowing it.
fn decode(bytes: &[u8]) {
    let sim = CrashSim::from_image(bytes.to_vec());
    let _ = Pool::check(&sim);
    let _ = Pool::open(&sim, &PoolOptions::default());
}

/// A pool with two objects, one synced twice, the other with a multi-object sync behind it.
fn pool_image() -> Vec<u8> {
    pool_image_with(false)
}

/// The same pool, with page CRCs or without.
fn pool_image_with(checksum: bool) -> Vec<u8> {
    let sim = CrashSim::new(POOL_LEN);
    let opts = PoolOptions {
        max_objects: MAX_OBJECTS,
        checksum,
        ..PoolOptions::default()
    };
    let pool = Pool::format(&sim, &opts).unwrap();
    pool.create("first", 5000).unwrap();
    pool.create("second", 100).unwrap();
    let first = pool.attach("first", Access::ReadWrite).unwrap();
    let second = pool.attach("second", Access::ReadWrite).unwrap();
    first.write(4096, b"page two").unwrap();
    first.sync().unwrap();
    second.write(0, b"both").unwrap();
    first.write(0, b"both").unwrap();
    pool.sync(&[&first, &second]).unwrap();
    drop((first, second));
    drop(pool);
    sim.image()
}

fn geometry() -> Geometry {
    Geometry::new(POOL_LEN, MAX_OBJECTS, 1).unwrap()
}

fn put(image: &mut [u8], off: usize, bytes: &[u8]) {
    image[off..off + bytes.len()].copy_from_slice(bytes);
}

fn descriptor() -> impl Strategy<Value = Descriptor> {
    let geometry = geometry();
    let near_area = geometry.area_off..geometry.area_off + geometry.area_len + 8192;
    (
        prop_oneof![near_area, any::<u64>()],
        prop_oneof![0u64..20_000, any::<u64>(), Just(u64::MAX)],
        prop_oneof![Just(4096u64), Just(8192), Just(0), any::<u64>()],
        any::<u32>(),
        "[a-z\\x00\\n]{0,80}",
    )
        .prop_map(|(offset, size, cap, flags, name)| Descriptor {
            offset,
            size,
            cap,
            flags,
            name,
        })
}

fn intent() -> impl Strategy<Value = Intent> {
    let word = prop_oneof![any::<u64>(), (0u64..8).prop_map(|g| (g << 2) | 1)];
    (
        1u64..4,
        proptest::collection::vec((prop_oneof![0u64..10, any::<u64>()], word), 1..=MAX_SYNC),
    )
        .prop_map(|(seq, items)| Intent { seq, items })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, timeout: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_do_not_panic(bytes in proptest::collection::vec(any::<u8>(), 0..3 * 4096)) {
        decode(&bytes);
    }

    #[test]
    fn random_headers_do_not_panic(
        pool_len in prop_oneof![Just(POOL_LEN as u64), any::<u64>()],
        table_off in prop_oneof![Just(4096u64), any::<u64>()],
        max_objects in prop_oneof![Just(MAX_OBJECTS), any::<u32>()],
        sync_off in any::<u64>(),
        area_off in any::<u64>(),
        area_len in any::<u64>(),
        features in prop_oneof![Just(0u32), Just(1), any::<u32>()],
    ) {
        let mut image = pool_image();
        let header = Geometry { pool_len, table_off, max_objects, sync_off, area_off, area_len, pool_id: 1, features };
        put(&mut image, 0, &header.encode());
        decode(&image);
    }

    #[test]
    fn flipped_bytes_of_a_checksummed_pool_do_not_panic(
        flips in proptest::collection::vec((0usize..POOL_LEN, any::<u8>()), 1..16),
    ) {
        let mut image = pool_image_with(true);
        for (at, bits) in flips {
            image[at] ^= bits.max(1);
        }
        decode(&image);
    }

    #[test]
    fn flipped_bytes_do_not_panic(
        flips in proptest::collection::vec((0usize..POOL_LEN, any::<u8>()), 1..16),
        in_metadata in any::<bool>(),
    ) {
        let mut image = pool_image();
        // Most flips land in the header, the table and the Sync Table, where decoding happens.
        let metadata = geometry().area_off as usize;
        for (at, bits) in flips {
            let at = if in_metadata { at % metadata } else { at };
            image[at] ^= bits.max(1);
        }
        decode(&image);
    }

    #[test]
    fn checksummed_entries_do_not_panic(
        index in 0usize..MAX_OBJECTS as usize,
        word in prop_oneof![any::<u64>(), (0u64..8).prop_map(|g| (g << 2) | 1)],
        descriptor in descriptor(),
    ) {
        let mut image = pool_image();
        let off = geometry().entry_off(index);
        put(&mut image, off, &word.to_le_bytes());
        put(&mut image, off + 8, &descriptor.encode());
        assert_eq!(descriptor.encode().len(), ENTRY - 8);
        decode(&image);
    }

    #[test]
    fn checksummed_intents_do_not_panic(intent in intent(), commit in prop_oneof![Just(None), any::<u64>().prop_map(Some)]) {
        let mut image = pool_image();
        let sync_off = geometry().sync_off as usize;
        put(&mut image, sync_off + 8, &intent.encode());
        put(&mut image, sync_off, &commit.unwrap_or(intent.seq).to_le_bytes());
        decode(&image);
    }
}

/// The defect this test found: an entry whose size is within a page of `u64::MAX` made the
/// capacity check overflow (a panic in debug builds; in release the capacity wrapped to 0 and
/// the object was accepted with a size far beyond its slots).
#[test]
fn an_entry_of_size_near_u64_max_is_corrupt() {
    let mut image = pool_image();
    let geometry = geometry();
    let huge = Descriptor {
        offset: geometry.area_off + 4 * 4096,
        size: u64::MAX - 5,
        cap: 0,
        flags: 0,
        name: "huge".into(),
    };
    let off = geometry.entry_off(5);
    put(&mut image, off, &((1u64 << 2) | 1).to_le_bytes());
    put(&mut image, off + 8, &huge.encode());
    let sim = CrashSim::from_image(image);
    let report = Pool::check(&sim);
    assert!(
        report.errors.iter().any(|e| e.contains("entry 5")),
        "{report:?}"
    );
    assert!(Pool::open(&sim, &PoolOptions::default()).is_err());
}

/// The defect the fuzz target found: a published word of the last generation (all bits set)
/// was accepted at open, directly or rolled forward from a committed intent, and the next sync
/// of the object panicked computing the following word. Such a word is corrupt.
#[test]
fn a_published_word_of_the_last_generation_is_corrupt() {
    let geometry = geometry();
    let mut direct = pool_image();
    put(&mut direct, geometry.entry_off(0), &u64::MAX.to_le_bytes());
    let mut rolled = pool_image();
    let intent = Intent {
        seq: 7,
        items: vec![(0, u64::MAX)],
    };
    let sync_off = geometry.sync_off as usize;
    put(&mut rolled, sync_off + 8, &intent.encode());
    put(&mut rolled, sync_off, &intent.seq.to_le_bytes());
    for image in [direct, rolled] {
        let sim = CrashSim::from_image(image);
        let report = Pool::check(&sim);
        assert!(
            report.errors.iter().any(|e| e.contains("entry 0")),
            "{report:?}"
        );
        assert!(Pool::open(&sim, &PoolOptions::default()).is_err());
    }
}
