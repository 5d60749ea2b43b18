//! Fuzz the block device's on-media decoders: the superblock slots and the layout they
//! describe ([`blk_superblock`]), and whole device images with bytes changed ([`blk_image`]).

use crate::input::{mutate, Input};
use pmkit_blk::superblock::{
    self, Layout, Superblock, FEATURE_ATOMIC, FEATURE_CHECKSUM, KNOWN_FEATURES, MAGIC, PAGE,
    SLOT_LEN, SLOT_OFF,
};
use pmkit_blk::{CreateOptions, Device, EngineOptions, Protect, WriteScheme};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Media;
use std::sync::{Arc, OnceLock};

/// Image sizes the superblock target tries (the reader needs at least a page).
const SB_IMAGE_LEN: [usize; 4] = [PAGE as usize, 2 * PAGE as usize, 64 << 10, 300 << 10];

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Recompute a slot's CRC (its last 4 bytes) so the checks behind it are reached.
fn seal(b: &mut [u8]) {
    let crc = crc32c::crc32c(&b[..SLOT_LEN - 4]);
    put32(b, SLOT_LEN - 4, crc);
}

/// Whatever a layout returned by `Layout::compute` promises: everything fits in the region.
fn assert_layout_fits(l: &Layout, region_len: u64) {
    let bs = l.block_size as u64;
    let end = l
        .phys_blocks()
        .checked_mul(bs)
        .and_then(|d| d.checked_add(l.data_off));
    assert!(
        end.is_some_and(|end| end <= region_len),
        "layout past its region: {l:?}"
    );
    assert!(l.nblocks >= superblock::MIN_BLOCKS, "{l:?}");
    assert_eq!(l.data_off % PAGE, 0, "{l:?}");
    assert_eq!(l.region_len, region_len);
}

/// Decode arbitrary bytes as superblock slots, alone and as the pair `read` picks from.
///
/// Byte 0 picks what is repaired in each 128-byte slot read from the input, so the checks
/// behind each one are reached: bit 0 the magic, bit 1 the version, bit 2 unknown feature bits
/// cleared, bit 3 the layout fields made consistent with the image size, bit 4 the CRC; bits
/// 5-6 the image size. Then 12 bytes of arguments for `Layout::compute`, then the two slots.
pub fn blk_superblock(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let len = SB_IMAGE_LEN[(mode >> 5) as usize % SB_IMAGE_LEN.len()];

    // The geometry on its own, with any arguments.
    let region_len = input.interesting_u64();
    let args = input.u32();
    let block_size = match args % 4 {
        0 => 512,
        1 => 4096,
        _ => args,
    };
    let (checksum, atomic) = (args & 1 << 8 != 0, args & 1 << 9 != 0);
    if let Ok(l) = Layout::compute(region_len, block_size, checksum, atomic) {
        assert_layout_fits(&l, region_len);
        assert_eq!((l.checksum(), l.atomic()), (checksum, atomic));
    }

    let mut image = vec![0u8; len];
    for off in SLOT_OFF {
        let mut b: [u8; SLOT_LEN] = input.array();
        if mode & 1 != 0 {
            b[..8].copy_from_slice(&MAGIC);
        }
        if mode & 2 != 0 {
            put32(&mut b, 8, superblock::VERSION);
        }
        let features = u64::from_le_bytes(b[64..72].try_into().unwrap());
        if mode & 4 != 0 {
            put64(&mut b, 64, features & KNOWN_FEATURES);
        }
        if mode & 8 != 0 {
            let bs = if b[12] & 1 != 0 { 4096 } else { 512 };
            let (ck, at) = (
                features & FEATURE_CHECKSUM != 0,
                features & FEATURE_ATOMIC != 0,
            );
            if let Ok(l) = Layout::compute(len as u64, bs, ck, at) {
                put32(&mut b, 12, l.block_size);
                put64(&mut b, 32, l.region_len);
                put64(&mut b, 40, l.nblocks);
                put64(&mut b, 48, l.data_off);
                put64(&mut b, 56, l.csum_off);
                put64(&mut b, 64, l.features);
                put64(&mut b, 104, l.map_off);
                put64(&mut b, 112, l.spare);
            }
            // One field nudged after the repair, from the slot's own spare bytes.
            if b[86] & 1 != 0 {
                let at = 12 + (b[87] as usize % 100);
                b[at] ^= b[86] | 1;
            }
        }
        if mode & 16 != 0 {
            seal(&mut b);
        }
        if let Ok(sb) = Superblock::decode(&b) {
            // The pair property: what was decoded encodes to a slot that decodes to it again.
            let again = Superblock::decode(&sb.encode());
            assert_eq!(again.as_ref(), Ok(&sb), "re-decode of an encoded slot");
            assert_layout_fits(&sb.layout, sb.layout.region_len);
        }
        let off = off as usize;
        if off + SLOT_LEN <= len {
            image[off..off + SLOT_LEN].copy_from_slice(&b);
        }
    }
    let sim = CrashSim::from_image(image);
    if let Ok(found) = superblock::read(&sim) {
        assert!(found.slot < 2);
        assert_eq!(found.current.layout.region_len, len as u64);
        assert!(found.slot_errors[found.slot].is_none());
        let mut b = [0u8; SLOT_LEN];
        sim.read(SLOT_OFF[found.slot] as usize, &mut b);
        assert_eq!(Superblock::decode(&b).as_ref(), Ok(&found.current));
        if found.current.layout.atomic() {
            let scan = pmkit_blk::map::scan_map(&sim, &found.current.layout);
            assert_eq!(scan.entries, found.current.layout.nblocks);
        }
    }
    let _ = pmkit_blk::check(&sim, false);
}

/// Size of the device images [`blk_image`] starts from.
const IMAGE_LEN: usize = 256 << 10;
/// Kinds of base image: plain, checksum, atomic, atomic + checksum; x 512/4096-byte blocks;
/// x closed cleanly or taken while open (recovery runs at open).
const KINDS: usize = 16;

fn scheme() -> WriteScheme {
    WriteScheme::ALL
        .into_iter()
        .find(|w| w.available())
        .expect("some write scheme runs on this CPU")
}

fn engine() -> EngineOptions {
    EngineOptions {
        protect: Some(Protect::None),
        write: scheme(),
        ..EngineOptions::default()
    }
}

/// A block's worth of a pattern unique to `(block, tag)`.
fn pattern(block: u64, tag: u8, bs: usize) -> Vec<u8> {
    (0..bs)
        .map(|i| (block as usize * 31 + i * 7 + tag as usize) as u8)
        .collect()
}

/// A formatted device with a few blocks written, some twice (so the atomic map is shuffled).
fn base_image(kind: usize) -> &'static [u8] {
    static IMAGES: [OnceLock<Vec<u8>>; KINDS] = [const { OnceLock::new() }; KINDS];
    IMAGES[kind].get_or_init(|| {
        let create = CreateOptions {
            block_size: if kind & 4 != 0 { 4096 } else { 512 },
            checksum: kind & 1 != 0,
            atomic: kind & 2 != 0,
            zero_data: true,
        };
        let dev = Device::create(Arc::new(CrashSim::new(IMAGE_LEN)), &create, &engine())
            .expect("format a fuzz base image");
        let bs = create.block_size as usize;
        let nblocks = dev.capacity() / bs as u64;
        for (tag, block) in [(1, 0), (1, 1), (1, 5), (2, 1), (1, nblocks - 1), (3, 5)] {
            dev.write(block * bs as u64, &pattern(block, tag, bs), false)
                .unwrap();
        }
        dev.trim(3 * bs as u64, bs as u64).unwrap();
        if kind & 8 == 0 {
            dev.close().unwrap();
        } else {
            dev.flush().unwrap();
        }
        dev.media().image()
    })
}

/// A small device image built from the input, through `check`, the map scan, `open` and a
/// read of every block: each must return Ok or a typed error.
///
/// Byte 0: bits 0-3 the base image (bit 0 checksums, bit 1 atomic, bit 2 4 KiB blocks, bit 3
/// taken while open), bit 4 re-seal both superblock slots' CRCs after the edits. The rest is
/// a list of edits (see `mutate`), most of them in the metadata before the first block.
pub fn blk_image(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let mut image = base_image(mode as usize % KINDS).to_vec();
    let hot = superblock::read(&CrashSim::from_image(image.clone()))
        .map(|f| f.current.layout.data_off as usize)
        .unwrap_or(PAGE as usize);
    mutate(&mut image, hot, &mut input);
    if mode & 16 != 0 {
        for off in SLOT_OFF {
            seal(&mut image[off as usize..off as usize + SLOT_LEN]);
        }
    }
    let sim = CrashSim::from_image(image);
    let _ = pmkit_blk::check(&sim, false);
    if let Ok(found) = superblock::read(&sim) {
        if found.current.layout.atomic() {
            let scan = pmkit_blk::map::scan_map(&sim, &found.current.layout);
            assert_eq!(scan.entries, found.current.layout.nblocks);
            if scan.problems == 0 {
                assert_eq!(scan.free_blocks, found.current.layout.spare);
            }
        }
    }
    let Ok(dev) = Device::open(Arc::new(sim), &engine()) else {
        return;
    };
    let bs = dev.block_size() as u64;
    let mut buf = vec![0u8; bs as usize];
    for b in 0..dev.capacity() / bs {
        // A block whose checksum fails is an error, never a panic nor other data.
        let _ = dev.read(b * bs, &mut buf);
    }
    let mut all = vec![0u8; dev.capacity().min(64 << 10) as usize];
    let _ = dev.read(0, &mut all);
    // An opened device keeps what is written to it.
    let last = dev.capacity() / bs - 1;
    for b in [0, last] {
        let want = pattern(b, 9, bs as usize);
        if dev.write(b * bs, &want, false).is_ok() {
            dev.read(b * bs, &mut buf)
                .expect("read back a block just written");
            assert!(buf == want, "block {b} reads back other data than written");
        }
    }
    let _ = dev.close();
    let _ = pmkit_blk::check(dev.media().as_ref(), false);
}
