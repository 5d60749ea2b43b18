//! 2 MiB blocks and the per-file atomic flag, one call at a time: what gets a huge block, reads,
//! overwrites, truncates that cut one, stat and statfs, the fallback when no 2 MiB chunk is free,
//! the flag's inheritance and persistence, and `check` on bad huge pointers and flags.

mod common;

use common::data_of;
use pmkit_fs::layout::{Superblock, BLOCK, SB_LEN};
use pmkit_fs::{check, DataMode, Error, Fs, MkfsOptions, MountOptions, SetAttr, ROOT};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Media;

const MIB: u64 = 1 << 20;
const HUGE: u64 = 2 * MIB;

fn mount<M: Media>(m: M, o: &MountOptions) -> Fs<M> {
    let (fs, _) = Fs::mount(m, o).unwrap();
    fs
}

fn fresh(len: usize, o: &MountOptions) -> Fs<CrashSim> {
    let sim = CrashSim::new(len);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    mount(sim, o)
}

fn remount(fs: Fs<CrashSim>, o: &MountOptions) -> Fs<CrashSim> {
    let m = fs.unmount();
    let rep = check(&m);
    assert!(rep.is_clean() && rep.clean, "{:?}", rep.problems);
    mount(m, o)
}

fn truncate<M: Media>(fs: &Fs<M>, ino: u64, size: u64) {
    let s = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(ino, &s).unwrap();
}

#[test]
fn an_aligned_2mib_write_gets_one_huge_block() {
    // exact block counts: no preallocation past the end (tests/crash_prealloc.rs covers it)
    let o = MountOptions {
        no_prealloc: true,
        ..MountOptions::default()
    };
    let fs = fresh(12 << 20, &o);
    let whole = fs.statfs().free_huge_blocks;
    assert!(whole >= 4, "{:?}", fs.statfs());
    let f = fs.create(ROOT, b"f", 0o644).unwrap();
    let d = data_of(0, HUGE as usize, 7);
    fs.write(f.ino, 0, &d).unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.size, a.blocks), (HUGE, 512), "a huge block at the root");
    assert_eq!(fs.statfs().free_huge_blocks, whole - 1);
    assert_eq!(fs.read(f.ino, 0, HUGE as usize).unwrap(), d);
    // not aligned: 4 KiB blocks (511 of the span [2 MiB, 4 MiB) and 2 of the next one)
    let d2 = data_of(HUGE + 4096, HUGE as usize, 3);
    fs.write(f.ino, HUGE + 4096, &d2).unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!(
        a.blocks,
        512 + 512 + 3,
        "the huge block, 512 small ones, three nodes"
    );
    // in-place overwrite inside the huge block
    fs.write(f.ino, 5000, b"hello").unwrap();
    let fs = remount(fs, &o);
    let back = fs.read(f.ino, 0, 3 * HUGE as usize).unwrap();
    assert_eq!(back.len() as u64, 2 * HUGE + 4096);
    assert_eq!(&back[5000..5005], b"hello");
    assert_eq!(&back[..5000], &d[..5000]);
    assert_eq!(&back[5005..HUGE as usize], &d[5005..]);
    assert_eq!(&back[HUGE as usize + 4096..], &d2[..]);
    // fallocate of whole spans: huge blocks of zeros
    let g = fs.create(ROOT, b"g", 0o644).unwrap();
    fs.fallocate(g.ino, HUGE, 2 * HUGE).unwrap();
    let a = fs.getattr(g.ino).unwrap();
    assert_eq!(a.size, 3 * HUGE);
    assert_eq!(a.blocks, 2 * 512 + 1, "two huge blocks under one node");
    assert!(fs
        .read(g.ino, 0, 3 * HUGE as usize)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
    remount(fs, &o);
}

#[test]
fn a_truncate_cutting_a_huge_block_keeps_the_head() {
    let o = MountOptions::default();
    for height2 in [false, true] {
        let fs = fresh(12 << 20, &o);
        let whole = fs.statfs().free_huge_blocks;
        let f = fs.create(ROOT, b"f", 0o644).unwrap();
        let base = if height2 { HUGE } else { 0 };
        let d = data_of(base, HUGE as usize, 1);
        fs.write(f.ino, base, &d).unwrap();
        let free0 = fs.statfs().free_blocks;
        let cut = base + MIB + 100;
        truncate(&fs, f.ino, cut);
        let a = fs.getattr(f.ino).unwrap();
        let nodes = if height2 { 2 } else { 1 };
        assert_eq!(a.blocks, 257 + nodes, "257 data blocks kept, a split node");
        assert_eq!(fs.statfs().free_blocks, free0 + 255 - 1);
        let fs = remount(fs, &o);
        // grow again: the cut tail reads as zeros
        fs.write(f.ino, base + HUGE - 10, b"end").unwrap();
        let back = fs.read(f.ino, base, HUGE as usize).unwrap();
        assert_eq!(&back[..(MIB + 100) as usize], &d[..(MIB + 100) as usize]);
        assert!(back[(MIB + 100) as usize..HUGE as usize - 10]
            .iter()
            .all(|&b| b == 0));
        // cut on the boundary and to zero
        truncate(&fs, f.ino, base);
        truncate(&fs, f.ino, 0);
        assert_eq!(fs.getattr(f.ino).unwrap().blocks, 0);
        let fs = remount(fs, &o);
        assert_eq!(
            fs.statfs().free_huge_blocks,
            whole,
            "every chunk whole again"
        );
    }
}

#[test]
fn no_free_chunk_falls_back_to_4k_blocks() {
    // 7 MiB: chunk 0 holds the metadata, chunks 1 and 2 are whole, chunk 3 is half there
    let o = MountOptions::default();
    let fs = fresh(7 << 20, &o);
    assert_eq!(fs.statfs().free_huge_blocks, 2);
    for n in [b"a", b"b"] {
        let f = fs.create(ROOT, n, 0o644).unwrap();
        fs.write(f.ino, 0, &data_of(0, HUGE as usize, 2)).unwrap();
        assert_eq!(fs.getattr(f.ino).unwrap().blocks, 512);
    }
    assert_eq!(fs.statfs().free_huge_blocks, 0);
    let c = fs.create(ROOT, b"c", 0o644).unwrap();
    let d = data_of(0, HUGE as usize, 4);
    fs.write(c.ino, 0, &d).unwrap();
    assert_eq!(
        fs.getattr(c.ino).unwrap().blocks,
        513,
        "4 KiB blocks and a node"
    );
    let fs = remount(fs, &o);
    assert_eq!(fs.read(c.ino, 0, HUGE as usize).unwrap(), d);
    // the small-blocks option never takes a chunk
    let o = MountOptions {
        small_blocks: true,
        ..MountOptions::default()
    };
    let fs = fresh(12 << 20, &o);
    let f = fs.create(ROOT, b"f", 0o644).unwrap();
    fs.write(f.ino, 0, &d).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().blocks, 513);
}

#[test]
fn an_atomic_write_into_a_huge_block_splits_it() {
    let o = MountOptions::default();
    let fs = fresh(12 << 20, &o);
    let f = fs.create(ROOT, b"f", 0o644).unwrap();
    let mut d = data_of(0, HUGE as usize, 9);
    fs.write(f.ino, 0, &d).unwrap();
    fs.set_atomic(f.ino, true).unwrap();
    fs.write(f.ino, 4 * 4096 + 10, b"atomic").unwrap();
    d[4 * 4096 + 10..4 * 4096 + 16].copy_from_slice(b"atomic");
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!(a.blocks, 513, "the huge block is now a node of 512 blocks");
    let fs = remount(fs, &o);
    assert_eq!(fs.read(f.ino, 0, HUGE as usize).unwrap(), d);
}

#[test]
fn the_atomic_flag_is_per_file_inherited_and_persistent() {
    let atomic = MountOptions {
        data: DataMode::Atomic,
        ..MountOptions::default()
    };
    let plain = MountOptions::default();
    let fs = fresh(4 << 20, &atomic);
    let a = fs.create(ROOT, b"a", 0o644).unwrap();
    assert!(a.atomic, "new files take the mount's default");
    let dir = fs.mkdir(ROOT, b"d", 0o755).unwrap();
    assert!(!dir.atomic);
    let fs = remount(fs, &plain);
    let b = fs.create(ROOT, b"b", 0o644).unwrap();
    assert!(!b.atomic);
    assert!(fs.getattr(a.ino).unwrap().atomic, "kept across a remount");
    assert_eq!(fs.atomic(a.ino).unwrap(), Some(true));
    assert_eq!(fs.atomic(dir.ino).unwrap(), None);
    let max = fs.max_atomic_write();
    let big = vec![1u8; max as usize + 1];
    assert!(matches!(
        fs.write(a.ino, 0, &big),
        Err(Error::TooBig { .. })
    ));
    fs.write(b.ino, 0, &big).unwrap();
    fs.set_atomic(a.ino, false).unwrap();
    fs.write(a.ino, 0, &big).unwrap();
    fs.set_atomic(b.ino, true).unwrap();
    assert!(matches!(
        fs.write(b.ino, 0, &big),
        Err(Error::TooBig { .. })
    ));
    assert!(matches!(fs.set_atomic(dir.ino, true), Err(Error::IsDir)));
    let s = fs.symlink(ROOT, b"s", b"a").unwrap();
    assert!(matches!(fs.set_atomic(s.ino, true), Err(Error::Invalid(_))));
    let fs = remount(fs, &plain);
    assert!(!fs.getattr(a.ino).unwrap().atomic);
    assert!(fs.getattr(b.ino).unwrap().atomic);
}

fn sb_of(sim: &CrashSim) -> Superblock {
    let mut b = [0u8; SB_LEN];
    sim.read(0, &mut b);
    Superblock::decode(&b, sim.len()).unwrap()
}

#[test]
fn check_names_bad_huge_pointers_and_flags() {
    let fs = fresh(8 << 20, &MountOptions::default());
    let f = fs.create(ROOT, b"f", 0o644).unwrap();
    fs.write(f.ino, 0, &data_of(0, HUGE as usize, 1)).unwrap();
    let sim = fs.unmount();
    let sb = sb_of(&sim);
    let root_at = sb.geo.inode_off(f.ino) + 16;
    let mut w = [0u8; 8];
    sim.read(root_at, &mut w);
    let root = u64::from_le_bytes(w);
    assert_eq!(root >> 63, 1, "the root is a huge pointer");
    let bad = |v: u64, at: usize, what: &str| {
        let m = CrashSim::new(sim.len());
        m.write(0, &sim.image());
        m.write(at, &v.to_le_bytes());
        // as a bug would store it: the inode's checksum matches
        let ino = (at - sb.geo.inode_off(0)) / pmkit_fs::layout::INODE;
        pmkit_fs::reseal_inode(&m, ino as u64).unwrap();
        let rep = check(&m);
        assert!(!rep.is_clean(), "{what}: check found nothing");
        rep.problems.join("\n")
    };
    let t = bad(root + 1, root_at, "misaligned");
    assert!(t.contains("not 2 MiB-aligned"), "{t}");
    let t = bad(
        (1 << 63) | (sb.geo.blocks / 512 * 512),
        root_at,
        "past the end",
    );
    assert!(t.contains("2 MiB block at"), "{t}");
    // the flag at the wrong level: height 2 with the huge pointer as the root
    let t = bad(2 | 1 << 8, root_at + 8, "wrong level");
    assert!(t.contains("outside the data area"), "{t}");
    // an unknown inode flag; the atomic flag on a directory
    let t = bad(1 | 1 << 8 | 0x80 << 16, root_at + 8, "unknown flag");
    assert!(t.contains("flags 0x80"), "{t}");
    let t = bad(
        1 << 16 | 2 << 8,
        sb.geo.inode_off(ROOT) + 24,
        "flag on a dir",
    );
    assert!(t.contains("flags 0x1"), "{t}");
    let _ = BLOCK;
}

#[test]
fn a_truncate_cutting_a_huge_block_on_a_full_disk_reuses_its_tail() {
    let o = MountOptions::default();
    let fs = fresh(7 << 20, &o);
    let a = fs.create(ROOT, b"a", 0o644).unwrap();
    let d = data_of(0, HUGE as usize, 6);
    fs.write(a.ino, 0, &d).unwrap();
    // fill every other block
    let c = fs.create(ROOT, b"c", 0o644).unwrap();
    let mut off = 0;
    loop {
        match fs.fallocate(c.ino, off, 4096) {
            Ok(()) => off += 4096,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(fs.statfs().free_blocks <= 1, "{:?}", fs.statfs());
    while fs.statfs().free_blocks > 0 {
        // what the last fallocate could not use (a node and a block need two)
        let e = fs.create(ROOT, b"e", 0o644).unwrap();
        fs.write(e.ino, 0, b"x").unwrap();
    }
    let cut = MIB + 100;
    truncate(&fs, a.ino, cut);
    let at = fs.getattr(a.ino).unwrap();
    assert_eq!(
        at.blocks,
        257 + 1,
        "257 data blocks and the node (the tail's last block)"
    );
    let fs = remount(fs, &o);
    assert_eq!(
        fs.read(a.ino, 0, HUGE as usize).unwrap(),
        &d[..cut as usize]
    );
    assert_eq!(fs.statfs().free_blocks, 512 - 257 - 1);
}

/// A hinted file: small writes take whole huge blocks; what the size covers around them reads
/// as zeros even where the chunk held another file's bytes (mutation check: zero nothing but the
/// written bytes and this fails); truncates keep the span the size ends in; with no whole chunk
/// free, 4 KiB blocks (the flag still set, `blocks` says which).
#[test]
fn a_hinted_file_takes_huge_blocks_zeroed_where_visible() {
    let o = MountOptions {
        no_prealloc: true,
        ..MountOptions::default()
    };
    // 7 MiB: chunks 1 and 2 whole
    let fs = fresh(7 << 20, &o);
    // leave 0xff bytes in both whole chunks, then free them
    let junk = fs.create(ROOT, b"junk", 0o644).unwrap();
    fs.write(junk.ino, 0, &vec![0xff; 2 * HUGE as usize])
        .unwrap();
    fs.unlink(ROOT, b"junk").unwrap();
    assert_eq!(fs.statfs().free_huge_blocks, 2);
    let f = fs.create(ROOT, b"f", 0o644).unwrap();
    assert_eq!(fs.huge(f.ino).unwrap(), Some(false));
    fs.set_huge(f.ino, true).unwrap();
    assert!(fs.getattr(f.ino).unwrap().huge);
    // 10 bytes at 100: one huge block; [0, 100) must read as zeros
    fs.write(f.ino, 100, b"0123456789").unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.size, a.blocks), (110, 512));
    assert_eq!(fs.statfs().free_huge_blocks, 1);
    let mut want = vec![0u8; 110];
    want[100..].copy_from_slice(b"0123456789");
    assert_eq!(fs.read(f.ino, 0, 200).unwrap(), want);
    // growing over the undefined tail reads zeros (the gap rule)
    truncate(&fs, f.ino, HUGE);
    want.resize(HUGE as usize, 0);
    assert_eq!(fs.read(f.ino, 0, HUGE as usize).unwrap(), want);
    // a shrink keeps the span whole
    truncate(&fs, f.ino, 5000);
    assert_eq!(fs.getattr(f.ino).unwrap().blocks, 512);
    // a directory and a symlink have no flag
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap();
    assert_eq!(fs.huge(d.ino).unwrap(), None);
    assert!(matches!(fs.set_huge(d.ino, true), Err(Error::IsDir)));
    // the flag persists
    let fs = remount(fs, &o);
    assert_eq!(fs.huge(f.ino).unwrap(), Some(true));
    // the last chunk goes to another file; the next span of f falls back to 4 KiB blocks
    let g = fs.create(ROOT, b"g", 0o644).unwrap();
    fs.write(g.ino, 0, &data_of(0, HUGE as usize, 9)).unwrap();
    assert_eq!(fs.statfs().free_huge_blocks, 0);
    fs.write(f.ino, HUGE + 4096, b"abc").unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!(
        a.blocks,
        512 + 1 + 2,
        "the huge block, one 4 KiB block, two nodes"
    );
    assert!(a.huge, "still asking");
    let back = fs.read(f.ino, 0, a.size as usize).unwrap();
    assert_eq!(&back[(HUGE + 4096) as usize..], b"abc");
    assert!(back[5000..(HUGE + 4096) as usize].iter().all(|&b| b == 0));
    // clearing the flag: a truncate cuts the huge block again
    fs.set_huge(f.ino, false).unwrap();
    truncate(&fs, f.ino, 4096);
    assert_eq!(
        fs.getattr(f.ino).unwrap().blocks,
        1 + 1 + 1,
        "split: one block, two nodes"
    );
    let fs = remount(fs, &o);
    drop(fs);
}
