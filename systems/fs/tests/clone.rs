//! Reflink in the library (`Fs::clone_range`): a clone shares blocks until either side writes,
//! truncates or punches there; a shared block is freed only when its last owner lets it go
//! (counted across a clean unmount's checkpoint and rebuilt by the walk after a crash);
//! Linux's FICLONERANGE rules; files that cannot share are refused (copy_file_range then
//! copies); a mapped range is never shared; and a crash at every fence of clones, writes into
//! shared blocks, truncates and unlinks leaves every image clean with each file old or new.
//! Contents against a byte model are `model.rs`'s (`Op::CloneRange`).

use pmkit_fs::{check, Error, Fs, MkfsOptions, MountOptions, SetAttr, ROOT};
use pmkit_media::crashsim::{check_every_fence_from, CrashOpts, CrashSim};
use pmkit_media::{Domain, Media};

const B: u64 = 4096;

mod common;
use common::{seeded as bytes, tiny_fs as mounted};

fn free<M: Media>(fs: &Fs<M>) -> u64 {
    fs.statfs().free_blocks
}

fn truncate<M: Media>(fs: &Fs<M>, ino: u64, size: u64) {
    let s = SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    fs.setattr(ino, &s).unwrap();
}

/// Free blocks of a tiny pool of `len` bytes whose root directory has held a file (its
/// directory block stays when the file goes).
fn empty(len: usize) -> u64 {
    let fs = mounted(len);
    fs.create(ROOT, b"x", 0o644).unwrap();
    fs.unlink(ROOT, b"x").unwrap();
    free(&fs)
}

/// The media offsets of a file's blocks, in file order.
fn where_is<M: Media>(fs: &Fs<M>, ino: u64) -> Vec<u64> {
    let size = fs.getattr(ino).unwrap().size;
    let mut out = Vec::new();
    for e in fs.extents(ino, 0, size).unwrap() {
        out.extend((0..e.len / B).map(|k| e.physical + k * B));
    }
    out
}

#[test]
fn a_clone_shares_blocks_until_either_side_changes_them() {
    let fs = mounted(8 << 20);
    let src = fs.create(ROOT, b"src", 0o644).unwrap().ino;
    let dst = fs.create(ROOT, b"dst", 0o644).unwrap().ino;
    let n = 64 * B as usize + 1000;
    let data = bytes(1, n);
    fs.write(src, 0, &data).unwrap();
    let before = free(&fs);
    assert_eq!(fs.clone_range(src, 0, dst, 0, 0).unwrap(), n as u64);
    // The destination's tree needs one node; no data block was taken.
    assert_eq!(before - free(&fs), 1, "a clone copies nothing");
    assert_eq!(fs.shared_blocks(), 65);
    assert_eq!(fs.read(dst, 0, n + 1).unwrap(), data);
    assert_eq!(where_is(&fs, dst), where_is(&fs, src));
    assert!(fs
        .extents(dst, 0, n as u64)
        .unwrap()
        .iter()
        .all(|e| e.shared));

    // A write into the destination: its block is its own now, the source unchanged.
    fs.write(dst, 3 * B + 10, b"new bytes").unwrap();
    let mut want = data.clone();
    want[3 * B as usize + 10..][..9].copy_from_slice(b"new bytes");
    assert_eq!(fs.read(dst, 0, n + 1).unwrap(), want);
    assert_eq!(fs.read(src, 0, n + 1).unwrap(), data);
    assert_eq!(fs.shared_blocks(), 64);
    // A write into the source: the same.
    fs.write(src, 10 * B, &[7u8; 100]).unwrap();
    let mut src_want = data.clone();
    src_want[10 * B as usize..][..100].fill(7);
    assert_eq!(fs.read(dst, 0, n + 1).unwrap(), want);
    assert_eq!(fs.read(src, 0, n + 1).unwrap(), src_want);
    // A shrink zeroes the rest of its last block: of its own copy only.
    truncate(&fs, dst, 20 * B + 100);
    assert_eq!(fs.read(src, 0, n + 1).unwrap(), src_want);
    truncate(&fs, dst, 21 * B);
    let got = fs.read(dst, 0, n).unwrap();
    assert_eq!(got[..20 * B as usize + 100], want[..20 * B as usize + 100]);
    assert!(got[20 * B as usize + 100..].iter().all(|&b| b == 0));
    // A punched hole: the source keeps its bytes.
    fs.fallocate_mode(dst, 5 * B + 1, 3 * B, pmkit_fs::Falloc::PunchHole)
        .unwrap();
    assert_eq!(fs.read(src, 0, n + 1).unwrap(), src_want);

    // The source goes: the destination keeps every block it still points at.
    fs.unlink(ROOT, b"src").unwrap();
    assert_eq!(fs.shared_blocks(), 0);
    let got = fs.read(dst, 0, n).unwrap();
    assert_eq!(got[..5 * B as usize + 1], want[..5 * B as usize + 1]);
    assert_eq!(
        got[8 * B as usize + 1..20 * B as usize + 100],
        want[8 * B as usize + 1..20 * B as usize + 100]
    );
    fs.unlink(ROOT, b"dst").unwrap();
    let media = fs.unmount();
    let rep = check(&media);
    assert!(rep.is_clean(), "{rep:?}");
    let (fs, _) = Fs::mount(media, &MountOptions::default()).unwrap();
    assert_eq!(
        free(&fs),
        empty(8 << 20),
        "every block came back, none twice"
    );
}

#[test]
fn the_counts_survive_a_clean_unmount_and_a_walk() {
    let fs = mounted(8 << 20);
    let a = fs.create(ROOT, b"a", 0o644).unwrap().ino;
    let data = bytes(2, 40 * B as usize);
    fs.write(a, 0, &data).unwrap();
    // Three files share a's first 10 blocks, one of them twice (a file sharing with itself).
    let b = fs.create(ROOT, b"b", 0o644).unwrap().ino;
    let c = fs.create(ROOT, b"c", 0o644).unwrap().ino;
    fs.clone_range(a, 0, b, 0, 10 * B).unwrap();
    fs.clone_range(a, 0, c, 0, 10 * B).unwrap();
    fs.clone_range(c, 0, c, 20 * B, 10 * B).unwrap();
    assert_eq!(fs.shared_blocks(), 10);
    let media = fs.unmount();
    let rep = check(&media);
    assert!(
        rep.is_clean() && rep.checkpoint.starts_with("matches"),
        "{rep:?}"
    );
    let (fs, rec) = Fs::mount(media, &MountOptions::default()).unwrap();
    assert!(rec.from_checkpoint);
    assert_eq!(fs.shared_blocks(), 10, "from the checkpoint");
    fs.write(c, 20 * B, b"x").unwrap();
    assert_eq!(fs.read(a, 0, data.len()).unwrap(), data);
    assert_eq!(
        fs.read(c, 0, 10 * B as usize).unwrap(),
        data[..10 * B as usize]
    );
    let media = fs.unmount();
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    let (fs, rec) = Fs::mount(media, &walk).unwrap();
    assert!(!rec.from_checkpoint);
    assert_eq!(fs.shared_blocks(), 10, "counted by the walk");
    for name in [&b"a"[..], b"b", b"c"] {
        fs.unlink(ROOT, name).unwrap();
    }
    assert_eq!(fs.shared_blocks(), 0);
    let rep = check(&fs.unmount());
    assert!(rep.is_clean(), "{rep:?}");
}

#[test]
fn linux_rules_for_ranges() {
    let fs = mounted(4 << 20);
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    let g = fs.create(ROOT, b"g", 0o644).unwrap().ino;
    fs.write(f, 0, &bytes(3, 10 * B as usize + 5)).unwrap();
    fs.write(g, 0, &bytes(4, 20 * B as usize)).unwrap();
    let invalid = |r: Result<u64, Error>| assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    invalid(fs.clone_range(f, 1, g, 0, B));
    invalid(fs.clone_range(f, 0, g, 1, B));
    invalid(fs.clone_range(f, 0, g, 0, B + 1)); // not at the source's end
    invalid(fs.clone_range(f, 11 * B, g, 0, B)); // past the source's end
                                                 // ends at the source's end inside the destination: its tail would show
    invalid(fs.clone_range(f, 0, g, 0, 0));
    invalid(fs.clone_range(f, 0, f, 2 * B, 4 * B)); // overlapping
                                                    // at the end of g or past it, the partial last block may go
    assert_eq!(fs.clone_range(f, 8 * B, g, 19 * B, 0).unwrap(), 2 * B + 5);
    assert_eq!(fs.getattr(g).unwrap().size, 21 * B + 5);
    // at the source's end with length 0: nothing
    assert_eq!(fs.clone_range(f, 10 * B + 5, g, 0, 0).unwrap_or(1), 1);
    // disjoint ranges of one file
    assert_eq!(fs.clone_range(f, 0, f, 12 * B, 2 * B).unwrap(), 2 * B);
    assert_eq!(fs.getattr(f).unwrap().size, 14 * B);
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap().ino;
    assert!(matches!(fs.clone_range(d, 0, f, 0, 0), Err(Error::IsDir)));
    assert!(matches!(fs.clone_range(f, 0, d, 0, 0), Err(Error::IsDir)));
    let rep = check(&fs.unmount());
    assert!(rep.is_clean(), "{rep:?}");
}

#[test]
fn files_that_cannot_share_are_copied_by_copy_file_range() {
    let fs = mounted(4 << 20);
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    let g = fs.create(ROOT, b"g", 0o644).unwrap().ino;
    let data = bytes(5, 8 * B as usize);
    fs.write(f, 0, &data).unwrap();
    fs.set_sums(g, true).unwrap();
    assert!(matches!(
        fs.clone_range(f, 0, g, 0, 0),
        Err(Error::NotSupported(_))
    ));
    assert_eq!(fs.copy_range(f, 0, g, 0, 8 * B).unwrap(), 8 * B);
    assert_eq!(fs.shared_blocks(), 0);
    assert_eq!(fs.read(g, 0, data.len()).unwrap(), data);
    // Aligned alike, between files that can share: shared, the partial edges copied.
    let h = fs.create(ROOT, b"h", 0o644).unwrap().ino;
    assert_eq!(fs.copy_range(f, 100, h, 100, 6 * B).unwrap(), 6 * B);
    assert_eq!(fs.shared_blocks(), 5);
    assert_eq!(
        fs.read(h, 100, 6 * B as usize).unwrap(),
        data[100..][..6 * B as usize]
    );
    let rep = check(&fs.unmount());
    assert!(rep.is_clean(), "{rep:?}");
}

#[test]
fn a_mapped_range_is_never_shared() {
    let fs = mounted(4 << 20);
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    let g = fs.create(ROOT, b"g", 0o644).unwrap().ino;
    fs.write(f, 0, &bytes(6, 8 * B as usize)).unwrap();
    fs.clone_range(f, 0, g, 0, 0).unwrap();
    // Pinning g's range for a mapping gives it its own blocks first.
    let ext = fs.pin_extents(g, 0, 4 * B).unwrap();
    let fs_blocks = where_is(&fs, f);
    for (at, len) in ext {
        for k in 0..len / B {
            assert!(
                !fs_blocks.contains(&(at + k * B)),
                "a mapped block is shared"
            );
        }
    }
    assert_eq!(fs.shared_blocks(), 4);
    // A pinned range is neither source nor destination of a clone.
    let h = fs.create(ROOT, b"h", 0o644).unwrap().ino;
    assert!(matches!(fs.clone_range(g, 0, h, 0, 0), Err(Error::Busy(_))));
    assert!(matches!(fs.clone_range(f, 0, g, 0, 0), Err(Error::Busy(_))));
    fs.unpin(g, 0, 4 * B);
    assert_eq!(fs.clone_range(g, 0, h, 0, 0).unwrap(), 8 * B);
}

#[test]
fn an_older_pool_refuses_and_copy_file_range_copies() {
    // format 7 is what the last build made: written by hand as the superblock's version.
    let sim = CrashSim::new(4 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let sb = pmkit_fs::layout::Superblock::decode(
        &{
            let mut b = [0u8; pmkit_fs::layout::SB_LEN];
            sim.read(0, &mut b);
            b
        },
        sim.len(),
    )
    .unwrap();
    let old = pmkit_fs::layout::Superblock {
        geo: sb.geo.at_format(7),
        ..sb
    };
    for off in old.geo.sb_offs() {
        sim.write(off, &old.encode());
    }
    let (fs, _) = Fs::mount(sim, &MountOptions::default()).unwrap();
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    let g = fs.create(ROOT, b"g", 0o644).unwrap().ino;
    fs.write(f, 0, &bytes(7, 4 * B as usize)).unwrap();
    assert!(matches!(
        fs.clone_range(f, 0, g, 0, 0),
        Err(Error::NotSupported(_))
    ));
    assert_eq!(fs.copy_range(f, 0, g, 0, 4 * B).unwrap(), 4 * B);
    assert_eq!(fs.shared_blocks(), 0);
    let rep = check(&fs.unmount());
    assert!(rep.is_clean(), "{rep:?}");
}

/// A crash at every fence of: a clone of 40 blocks over a file of older bytes, a write into a
/// shared block, a shrink into one, the source unlinked. Every image mounts (walking), checks
/// clean, holds each file as one of its states, and once both files are removed every block is
/// free again (a count gone wrong would keep one or free one twice).
#[test]
fn a_crash_at_every_fence_of_clones_writes_truncates_and_unlinks() {
    let sim = CrashSim::new(4 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (src, old) = (bytes(8, 40 * B as usize), bytes(9, 30 * B as usize));
    let empty = empty(4 << 20);
    {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let s = fs.create(ROOT, b"s", 0o644).unwrap().ino;
        fs.write(s, 0, &src).unwrap();
        let d = fs.create(ROOT, b"d", 0o644).unwrap().ino;
        fs.write(d, 0, &old).unwrap();
        fs.unmount();
    }
    // The destination's states, in order.
    let cloned = src.clone();
    let mut written = cloned.clone();
    written[5 * B as usize..][..10].copy_from_slice(b"0123456789");
    let cut = written[..12 * B as usize + 7].to_vec();
    let states = [old.clone(), cloned, written, cut];
    for domain in [Domain::Adr, Domain::Eadr] {
        let opts = CrashOpts {
            k: 4,
            random_images: 8,
            domain,
            ..Default::default()
        };
        crash_check_clone(&sim, &opts, (&src, &states), empty);
    }
}

/// `a_crash_at_every_fence_of_clones_writes_truncates_and_unlinks` in one domain: the
/// workload on `sim`'s image, each image held to `states` (the destination's), the source's
/// bytes and the free count of an `empty` pool.
fn crash_check_clone(
    sim: &CrashSim,
    opts: &CrashOpts,
    (src, states): (&[u8], &[Vec<u8>]),
    empty: u64,
) {
    let rep = check_every_fence_from(
        sim.image(),
        opts,
        |s| {
            let (fs, _) = Fs::mount(&**s, &MountOptions::default()).unwrap();
            let (s_ino, d) = (
                fs.lookup(ROOT, b"s").unwrap().ino,
                fs.lookup(ROOT, b"d").unwrap().ino,
            );
            fs.clone_range(s_ino, 0, d, 0, 0).unwrap();
            fs.write(d, 5 * B, b"0123456789").unwrap();
            truncate(&fs, d, 12 * B + 7);
            fs.unlink(ROOT, b"s").unwrap();
        },
        |s| {
            let (fs, _) = Fs::mount(&**s, &MountOptions::default()).map_err(|e| e.to_string())?;
            let d = fs.lookup(ROOT, b"d").map_err(|e| e.to_string())?.ino;
            let got = fs.read(d, 0, src.len() + 1).map_err(|e| e.to_string())?;
            if !states.contains(&got) {
                return Err(format!("d is none of its states ({} bytes)", got.len()));
            }
            if let Ok(e) = fs.lookup(ROOT, b"s") {
                let s_got = fs
                    .read(e.ino, 0, src.len() + 1)
                    .map_err(|e| e.to_string())?;
                if s_got != src {
                    return Err("the source changed".into());
                }
                fs.unlink(ROOT, b"s").map_err(|e| e.to_string())?;
            }
            fs.unlink(ROOT, b"d").map_err(|e| e.to_string())?;
            if free(&fs) != empty || fs.shared_blocks() != 0 {
                return Err(format!("{} blocks free of {empty} once empty", free(&fs)));
            }
            fs.unmount();
            let rep = check(&**s);
            match rep.is_clean() {
                true => Ok(()),
                false => Err(format!("{:?}", rep.problems)),
            }
        },
    );
    assert!(rep.fences >= 8, "{rep}");
    assert!(
        rep.is_clean(),
        "{:?}: {rep}\n{:?}",
        opts.domain,
        rep.violations.first()
    );
}

/// Both superblocks lost on a pool whose files share blocks: the rebuilt superblock is format 8
/// (format 7 would read every shared block as owned twice and cut it), repair leaves the
/// shares, and every file reads as before.
#[test]
fn lost_superblocks_of_a_pool_with_shared_blocks_keep_them() {
    let sim = CrashSim::new(4 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let data = bytes(10, 12 * B as usize + 9);
    {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let a = fs.create(ROOT, b"a", 0o644).unwrap().ino;
        fs.write(a, 0, &data).unwrap();
        let b = fs.create(ROOT, b"b", 0o644).unwrap().ino;
        fs.clone_range(a, 0, b, 0, 0).unwrap();
        fs.unmount();
    }
    let offs = pmkit_fs::superblock(&sim).unwrap().geo.sb_offs();
    sim.write(offs[0] + 20, &[0xff]);
    sim.write(offs[1], &[0u8; 8]);
    let rep = pmkit_fs::repair(&sim).unwrap();
    assert!(rep.is_clean(), "{rep:?}");
    assert_eq!(pmkit_fs::superblock(&sim).unwrap().geo.version(), 8);
    let after = check(&sim);
    assert!(after.is_clean() && after.shared_blocks == 13, "{after:?}");
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    for name in [&b"a"[..], b"b"] {
        let ino = fs.lookup(ROOT, name).unwrap().ino;
        assert_eq!(fs.read(ino, 0, data.len() + 1).unwrap(), data);
    }
}

/// A source written in 2 MiB blocks shares them block by block; a write into the source's span
/// then splits its pointer, copying the one block; the counts hold across a walk.
#[test]
fn a_2mib_block_is_shared_block_by_block() {
    let fs = mounted(24 << 20);
    let src = fs.create(ROOT, b"src", 0o644).unwrap().ino;
    let dst = fs.create(ROOT, b"dst", 0o644).unwrap().ino;
    fs.set_huge(src, true).unwrap();
    let data = bytes(11, 4 << 20);
    fs.write(src, 0, &data).unwrap();
    let before = free(&fs);
    fs.clone_range(src, 0, dst, 0, 0).unwrap();
    assert!(
        before - free(&fs) < 8,
        "{} blocks taken",
        before - free(&fs)
    );
    assert_eq!(fs.shared_blocks(), 1024);
    fs.write(src, 4096 * 7, b"changed").unwrap();
    assert_eq!(fs.read(dst, 0, data.len() + 1).unwrap(), data);
    assert_eq!(fs.shared_blocks(), 1023);
    let media = fs.unmount();
    let rep = check(&media);
    assert!(rep.is_clean() && rep.shared_blocks == 1023, "{rep:?}");
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    let (fs, _) = Fs::mount(media, &walk).unwrap();
    assert_eq!(fs.shared_blocks(), 1023);
    fs.unlink(ROOT, b"src").unwrap();
    assert_eq!(fs.read(dst, 0, data.len() + 1).unwrap(), data);
    fs.unlink(ROOT, b"dst").unwrap();
    assert_eq!(free(&fs), empty(24 << 20));
}

/// A hole of the source lands past the destination's size on blocks the destination owns
/// there (preallocated for its appends, holding what they held before): they read zeros, not
/// their old bytes. Found by xfstests' fsx through the shim (`fsx -S 1`, a CLONE after a COPY
/// that preallocated).
#[test]
fn a_hole_cloned_past_the_end_hides_the_blocks_owned_there() {
    let fs = mounted(4 << 20);
    // Freed blocks that hold bytes: what preallocation hands out next.
    let z = fs.create(ROOT, b"z", 0o644).unwrap().ino;
    fs.write(z, 0, &[0xaa; 64 * B as usize]).unwrap();
    fs.unlink(ROOT, b"z").unwrap();
    let dst = fs.create(ROOT, b"dst", 0o644).unwrap().ino;
    fs.write(dst, 0, &[1; B as usize]).unwrap();
    fs.write(dst, B, &[2; B as usize]).unwrap(); // a second append: a preallocation window
    assert!(
        fs.getattr(dst).unwrap().blocks > 2,
        "no preallocation to test with"
    );
    let src = fs.create(ROOT, b"src", 0o644).unwrap().ino;
    fs.write(src, 0, &bytes(12, 8 * B as usize)).unwrap();
    fs.fallocate_mode(src, 5 * B, B, pmkit_fs::Falloc::PunchHole)
        .unwrap();
    assert_eq!(fs.clone_range(src, 0, dst, 2 * B, 0).unwrap(), 8 * B);
    let got = fs.read(dst, 0, 10 * B as usize + 1).unwrap();
    let mut want = [
        vec![1; B as usize],
        vec![2; B as usize],
        bytes(12, 8 * B as usize),
    ]
    .concat();
    want[7 * B as usize..8 * B as usize].fill(0);
    assert_eq!(got.len(), want.len());
    let first = got.iter().zip(&want).position(|(a, b)| a != b);
    assert_eq!(first, None, "first wrong byte");
}

/// Clones of a file while another thread writes it, truncates it and reads the clones: no
/// deadlock, every cloned block whole (each block of the source holds one byte value, so a
/// torn copy would show two), and once everything is removed every block is free again.
#[test]
fn clones_race_writes_to_their_source() {
    let fs = std::sync::Arc::new(mounted(16 << 20));
    let src = fs.create(ROOT, b"src", 0o644).unwrap().ino;
    fs.write(src, 0, &[0u8; 32 * B as usize]).unwrap();
    let writer = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            for round in 1..=3000u32 {
                let block = (round * 7 % 32) as u64;
                fs.write(src, block * B, &[round as u8; B as usize])
                    .unwrap();
                if round % 50 == 0 {
                    let s = SetAttr {
                        size: Some(32 * B),
                        ..SetAttr::default()
                    };
                    fs.setattr(src, &s).unwrap();
                }
            }
        })
    };
    for i in 0..300u32 {
        let name = format!("c{}", i % 4);
        let dst = match fs.lookup(ROOT, name.as_bytes()) {
            Ok(e) => e.ino,
            Err(_) => fs.create(ROOT, name.as_bytes(), 0o644).unwrap().ino,
        };
        fs.clone_range(src, 0, dst, 0, 32 * B).unwrap();
        let got = fs.read(dst, 0, 32 * B as usize).unwrap();
        for (k, blk) in got.chunks(B as usize).enumerate() {
            assert!(
                blk.iter().all(|&b| b == blk[0]),
                "clone {i}: block {k} torn"
            );
        }
        fs.write(dst, (i as u64 % 32) * B, b"own").unwrap();
    }
    writer.join().unwrap();
    let fs = std::sync::Arc::into_inner(fs).unwrap();
    for name in ["src", "c0", "c1", "c2", "c3"] {
        fs.unlink(ROOT, name.as_bytes()).unwrap();
    }
    assert_eq!(fs.shared_blocks(), 0);
    assert_eq!(free(&fs), empty(16 << 20));
    let rep = check(&fs.unmount());
    assert!(rep.is_clean(), "{rep:?}");
}

/// A write over a file whose shared blocks are scattered (every fourth block still shared
/// after writes into the others) unshares them in transactions the journal holds: each
/// pointer far from the next takes a log entry of its own, so a batch is bounded by the file
/// blocks it spans, not by its count.
#[test]
fn scattered_shared_blocks_are_unshared_in_transactions_that_fit() {
    let fs = mounted(16 << 20);
    let src = fs.create(ROOT, b"src", 0o644).unwrap().ino;
    let dst = fs.create(ROOT, b"dst", 0o644).unwrap().ino;
    let n = 1024 * B as usize;
    for k in 0..4 {
        // 1 MiB writes: 4 KiB blocks (a 2 MiB block needs a write covering its span)
        fs.write(src, k * (n as u64 / 4), &bytes(13, n / 4))
            .unwrap();
    }
    fs.clone_range(src, 0, dst, 0, 0).unwrap();
    for blk in (0..1024u64).filter(|b| b % 4 != 3) {
        fs.write(dst, blk * B, &[9; B as usize]).unwrap();
    }
    assert_eq!(fs.shared_blocks(), 256);
    fs.write(dst, 0, &vec![7; n]).unwrap();
    assert_eq!(fs.shared_blocks(), 0);
    assert_eq!(fs.read(dst, 0, n + 1).unwrap(), vec![7; n]);
    let rep = check(&fs.unmount());
    assert!(rep.is_clean(), "{rep:?}");
}

/// A truncate on a full pool that cuts a 2 MiB block, whose split node then takes a block of
/// the cut tail: never a block another file shares (its bytes would become pointer words).
#[test]
fn a_truncate_on_a_full_pool_never_takes_a_shared_block_for_its_node() {
    let fs = mounted(24 << 20);
    let a = fs.create(ROOT, b"a", 0o644).unwrap().ino;
    // a 2 MiB block (one write covering its span), without the huge flag that would keep it
    // whole at a truncate
    let data = bytes(14, 2 << 20);
    fs.write(a, 0, &data).unwrap();
    let b = fs.create(ROOT, b"b", 0o644).unwrap().ino;
    fs.clone_range(a, 0, b, 0, 0).unwrap();
    // Every other block taken.
    let fill = fs.create(ROOT, b"fill", 0o644).unwrap().ino;
    let mut at = 0;
    while fs.write(fill, at, &[1; B as usize]).is_ok() {
        at += B;
    }
    // What a new leaf node left: files of one block each (the inode's root points at it).
    for i in 0.. {
        let f = fs.create(ROOT, format!("one{i}").as_bytes(), 0o644);
        let wrote = f.and_then(|f| fs.write(f.ino, 0, &[1; B as usize]));
        if wrote.is_err() || fs.statfs().free_blocks == 0 {
            break;
        }
    }
    assert_eq!(fs.statfs().free_blocks, 0);
    let cut = SetAttr {
        size: Some(B + 10),
        ..SetAttr::default()
    };
    let _ = fs.setattr(a, &cut); // may be ENOSPC: nothing free for the split node
    assert_eq!(fs.getattr(a).unwrap().size, B + 10);
    let first_wrong = |got: Vec<u8>| (got.len(), got.iter().zip(&data).position(|(x, y)| x != y));
    let whole = (data.len(), None);
    let got = fs.read(b, 0, data.len() + 1).unwrap();
    assert_eq!(first_wrong(got), whole, "b's bytes changed");
    fs.unlink(ROOT, b"fill").unwrap();
    let media = fs.unmount();
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    let (fs, _) = Fs::mount(media, &walk).unwrap();
    assert_eq!(first_wrong(fs.read(b, 0, data.len() + 1).unwrap()), whole);
    let rep = check(&fs.unmount());
    assert!(rep.is_clean(), "{rep:?}");
}
