//! Fuzz the object pool's on-media decoders: whole pool images, arbitrary or a real pool with
//! bytes or structures changed, through `Pool::check`, `Pool::open` and a read of every object.

use crate::input::{mutate, Input};
use pmkit_media::crashsim::CrashSim;
use pmkit_obj::layout::{Descriptor, Geometry, Intent, ENTRY, MAX_NAME};
use pmkit_obj::{Access, Pool, PoolOptions, MAX_SYNC};
use std::sync::OnceLock;

const POOL_LEN: usize = 64 * 4096;
const MAX_OBJECTS: u32 = 8;
/// Largest arbitrary image tried as a pool.
const MAX_RAW: usize = 1 << 20;

fn options() -> PoolOptions {
    PoolOptions {
        max_objects: MAX_OBJECTS,
        ..PoolOptions::default()
    }
}

/// A pool with three objects: one synced twice, one published by a multi-object sync with
/// it, one never written; and (kind 1) the same with writes attached but not synced.
fn base_image(kind: usize) -> &'static [u8] {
    static IMAGES: [OnceLock<Vec<u8>>; 2] = [const { OnceLock::new() }; 2];
    IMAGES[kind].get_or_init(|| {
        let sim = CrashSim::new(POOL_LEN);
        let pool = Pool::format(&sim, &options()).expect("format a fuzz base pool");
        pool.create("alpha", 5000).unwrap();
        pool.create("beta", 100).unwrap();
        pool.create("gamma", 4096).unwrap();
        let alpha = pool.attach("alpha", Access::ReadWrite).unwrap();
        let beta = pool.attach("beta", Access::ReadWrite).unwrap();
        alpha.write(4096, b"second page").unwrap();
        alpha.sync().unwrap();
        alpha.write(0, b"together").unwrap();
        beta.write(0, b"together").unwrap();
        pool.sync(&[&alpha, &beta]).unwrap();
        if kind == 1 {
            alpha.write(10, b"unsynced").unwrap();
            return sim.image();
        }
        drop((alpha, beta));
        drop(pool);
        sim.image()
    })
}

fn geometry() -> Geometry {
    Geometry::new(POOL_LEN, MAX_OBJECTS, 1).unwrap()
}

fn put(image: &mut [u8], off: usize, bytes: &[u8]) {
    image[off..off + bytes.len()].copy_from_slice(bytes);
}

/// Replace one structure with one built from the input that carries a valid checksum, so the
/// checks behind the CRC are reached: the header, a table entry, or the Sync Table's intent.
fn structure(image: &mut [u8], input: &mut Input<'_>) {
    let g = geometry();
    match input.u8() % 3 {
        0 => {
            let header = Geometry {
                pool_len: pick(input, g.pool_len),
                table_off: pick(input, g.table_off),
                max_objects: pick(input, g.max_objects as u64) as u32,
                sync_off: pick(input, g.sync_off),
                area_off: pick(input, g.area_off),
                area_len: pick(input, g.area_len),
                pool_id: input.u64(),
                features: (input.u8() % 4) as u32,
            };
            put(image, 0, &header.encode());
        }
        1 => {
            let index = input.u8() as usize % MAX_OBJECTS as usize;
            let word = match input.u8() % 3 {
                0 => input.u64(),
                g => (input.u8() as u64 % 8) << 2 | (g as u64 - 1) << 1 | 1,
            };
            let name_len = input.u8() as usize % (MAX_NAME + 1);
            let name = String::from_utf8_lossy(input.bytes(name_len)).into_owned();
            let mut name = name;
            while name.len() > MAX_NAME {
                name.pop();
            }
            let (page, size, pages) = (input.u8() as u64 % 64, input.u16() as u64, input.u8() % 4);
            let d = Descriptor {
                offset: pick(input, g.area_off + 4096 * page),
                size: pick(input, size),
                cap: pick(input, 4096 * pages as u64),
                flags: input.u32(),
                name,
            };
            let off = g.entry_off(index);
            put(image, off, &word.to_le_bytes());
            let e = d.encode();
            assert_eq!(e.len(), ENTRY - 8);
            put(image, off + 8, &e);
        }
        _ => {
            let n = 1 + input.u8() as usize % 4;
            let n = if input.u8() == 255 { MAX_SYNC } else { n };
            let items = (0..n)
                .map(|_| {
                    let (entry, generation) = (input.u8() as u64 % 10, input.u8() as u64 % 8);
                    let entry = pick(input, entry);
                    let word = pick(input, generation << 2 | 1);
                    (entry, word)
                })
                .collect();
            let seq = input.u64().max(1);
            let intent = Intent { seq, items };
            let commit = if input.u8() & 1 == 0 {
                seq
            } else {
                input.u64()
            };
            put(image, g.sync_off as usize + 8, &intent.encode());
            put(image, g.sync_off as usize, &commit.to_le_bytes());
        }
    }
}

/// Mostly `near` (a sane value), sometimes an arbitrary or extreme one.
fn pick(input: &mut Input<'_>, near: u64) -> u64 {
    match input.u8() % 4 {
        0 | 1 => near,
        2 => near.wrapping_add(input.u8() as u64).wrapping_sub(128),
        _ => input.interesting_u64(),
    }
}

/// A pool image built from the input, through `Pool::check` and `Pool::open`, then every
/// object listed, read as published and read through a read-only attachment, then written and
/// synced once.
///
/// Byte 0: bit 0-1: 0 arbitrary bytes as the image (the rest of the input, at most 1 MiB),
/// 1 the clean base pool, 2 the base pool with unsynced writes, 3 the clean one; bits 2-4 how
/// many checksummed structures to replace (see `structure`) before the byte edits.
pub fn obj_pool(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let image = if mode & 3 == 0 {
        let raw = input.rest();
        raw[..raw.len().min(MAX_RAW)].to_vec()
    } else {
        let mut image = base_image(usize::from(mode & 3 == 2)).to_vec();
        for _ in 0..(mode >> 2) & 7 {
            structure(&mut image, &mut input);
        }
        mutate(&mut image, geometry().area_off as usize, &mut input);
        image
    };
    let sim = CrashSim::from_image(image);
    let _ = Pool::check(&sim);
    let Ok((pool, _recovery)) = Pool::open(&sim, &PoolOptions::default()) else {
        return;
    };
    for info in pool.list() {
        let Ok(published) = pool.read_published(&info.name) else {
            continue;
        };
        assert_eq!(published.len() as u64, info.size, "{info:?}");
        if let Ok(h) = pool.attach(&info.name, Access::Read) {
            let mut copy = vec![0u8; published.len()];
            h.read(0, &mut copy).expect("read a whole attached object");
            // A never-synced object attaches as zeroes without reading PM (its slots hold
            // create's zeroes unless the image was edited there): compare synced ones only.
            if info.generation > 1 {
                assert!(copy == published, "{}: attached read differs", info.name);
            }
            let _ = h.detach();
        }
    }
    // A pool that opened takes a new generation of each object: publishing must not trip
    // over a published word it accepted.
    for info in pool.list() {
        if let Ok(h) = pool.attach(&info.name, Access::ReadWrite) {
            let _ = h.write(0, b"fuzz");
            let _ = h.sync();
            let _ = h.detach();
        }
    }
    drop(pool);
    let _ = Pool::check(&sim);
}
