//! fallocate's modes in the library (`Fs::fallocate_mode`): blocks freed by a punched hole,
//! huge blocks cut in part, sizes kept, mapped ranges refused, the mode bits Linux gives, and a
//! crash at every fence of a punch leaving each byte old or zero and the pool clean. Contents
//! against a byte model are `model.rs`'s (`Op::FallocMode`).

use pmkit_fs::{check, Error, Falloc, Fs, MkfsOptions, MountOptions, ROOT};
use pmkit_media::crashsim::{check_every_fence_from, CrashOpts, CrashSim};

const B: u64 = 4096;
const MIB: u64 = 1 << 20;

mod common;
use common::{seeded as bytes, tiny_fs as mounted};

#[test]
fn a_punched_hole_frees_its_blocks_and_reads_zeros() {
    let fs = mounted(4 << 20);
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    let data = bytes(1, 40 * B as usize);
    fs.write(f, 0, &data).unwrap();
    let before = fs.getattr(f).unwrap();
    // 100 bytes into block 2 to 100 bytes into block 30: blocks 3..=29 go, 2 and 30 are zeroed
    // in part.
    let (off, end) = (2 * B + 100, 30 * B + 100);
    fs.fallocate_mode(f, off, end - off, Falloc::PunchHole)
        .unwrap();
    let after = fs.getattr(f).unwrap();
    assert_eq!(after.size, before.size, "the size is kept");
    assert_eq!(before.blocks - after.blocks, 27, "27 blocks freed");
    assert!(after.mtime >= before.mtime && after.ctime >= before.ctime);
    let mut want = data.clone();
    want[off as usize..end as usize].fill(0);
    assert_eq!(fs.read(f, 0, data.len()).unwrap(), want);
    // A punch past the end (the appends' preallocation too) leaves no block, and no empty
    // tree node (check below).
    fs.fallocate_mode(f, 0, MIB, Falloc::PunchHole).unwrap();
    assert_eq!(fs.getattr(f).unwrap().blocks, 0);
    let sim = fs.unmount();
    let rep = check(&sim);
    assert!(rep.is_clean(), "{rep:?}");
}

#[test]
fn a_huge_block_cut_in_part_keeps_the_rest() {
    let fs = mounted(12 << 20);
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    fs.set_huge(f, true).unwrap();
    let data = bytes(2, 2 * MIB as usize);
    fs.write(f, 0, &data).unwrap();
    assert_eq!(fs.getattr(f).unwrap().blocks, 512, "one huge block");
    fs.fallocate_mode(f, MIB, 4 * B, Falloc::PunchHole).unwrap();
    let mut want = data.clone();
    want[MIB as usize..(MIB + 4 * B) as usize].fill(0);
    assert_eq!(fs.read(f, 0, data.len()).unwrap(), want);
    // split: 508 data blocks and the node that names them
    assert_eq!(fs.getattr(f).unwrap().blocks, 508 + 1);
    let sim = fs.unmount();
    assert!(check(&sim).is_clean());
}

#[test]
fn keep_size_and_zero_range_sizes() {
    let fs = mounted(4 << 20);
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    fs.write(f, 0, &bytes(3, 10_000)).unwrap();
    fs.fallocate_mode(f, 8000, 20_000, Falloc::KeepSize)
        .unwrap();
    let a = fs.getattr(f).unwrap();
    assert_eq!(a.size, 10_000, "KEEP_SIZE keeps it");
    assert_eq!(
        a.blocks,
        7 + 1,
        "7 blocks to 28,000 allocated, and the tree node"
    );
    fs.fallocate_mode(f, 5000, 100, Falloc::ZeroRange { keep_size: true })
        .unwrap();
    fs.fallocate_mode(f, 9000, 6000, Falloc::ZeroRange { keep_size: false })
        .unwrap();
    let mut want = bytes(3, 10_000);
    want[5000..5100].fill(0);
    want[9000..].fill(0);
    want.resize(15_000, 0);
    assert_eq!(fs.getattr(f).unwrap().size, 15_000);
    assert_eq!(fs.read(f, 0, 20_000).unwrap(), want);
    // The blocks KEEP_SIZE put past the size read as zeros once the size covers them.
    fs.fallocate(f, 0, 28_000).unwrap();
    want.resize(28_000, 0);
    assert_eq!(fs.read(f, 0, 30_000).unwrap(), want);
    let sim = fs.unmount();
    assert!(check(&sim).is_clean());
}

#[test]
fn linux_mode_bits() {
    use libc::{
        FALLOC_FL_COLLAPSE_RANGE as COLLAPSE, FALLOC_FL_INSERT_RANGE as INSERT,
        FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO,
    };
    assert_eq!(Falloc::from_mode(0).unwrap(), Falloc::Allocate);
    assert_eq!(Falloc::from_mode(KEEP).unwrap(), Falloc::KeepSize);
    assert_eq!(Falloc::from_mode(PUNCH | KEEP).unwrap(), Falloc::PunchHole);
    assert_eq!(
        Falloc::from_mode(ZERO | KEEP).unwrap(),
        Falloc::ZeroRange { keep_size: true }
    );
    for m in [PUNCH, COLLAPSE, INSERT, 0x40] {
        assert_eq!(Falloc::from_mode(m).unwrap_err().errno(), libc::EOPNOTSUPP);
    }
}

#[test]
fn a_punch_over_a_mapped_range_is_refused() {
    let fs = mounted(4 << 20);
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    fs.write(f, 0, &bytes(4, 8 * B as usize)).unwrap();
    fs.pin_extents(f, 4 * B, 2 * B).unwrap();
    match fs.fallocate_mode(f, 5 * B, 10, Falloc::PunchHole) {
        Err(Error::Busy(_)) => {}
        other => panic!("{other:?}"),
    }
    fs.fallocate_mode(f, 0, 4 * B, Falloc::PunchHole).unwrap();
}

/// A crash at every fence of a punch through two levels of the tree, in transactions of a few
/// pointers (the tiny geometry's lanes): every image mounts, checks clean, and holds each byte
/// of the range as it was or zero, and the rest as it was.
#[test]
fn a_crash_at_every_fence_of_a_punch() {
    let sim = CrashSim::new(4 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let data = bytes(5, 600 * B as usize);
    let (off, end) = (3 * B + 7, 590 * B);
    {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
        fs.write(f, 0, &data).unwrap();
        fs.unmount();
    }
    let opts = CrashOpts {
        k: 4,
        random_images: 8,
        ..Default::default()
    };
    let rep = check_every_fence_from(
        sim.image(),
        &opts,
        |s| {
            let (fs, _) = Fs::mount(&**s, &MountOptions::default()).unwrap();
            let f = fs.lookup(ROOT, b"f").unwrap().ino;
            fs.fallocate_mode(f, off, end - off, Falloc::PunchHole)
                .unwrap();
        },
        |s| {
            let (fs, _) = Fs::mount(&**s, &MountOptions::default()).map_err(|e| e.to_string())?;
            let f = fs.lookup(ROOT, b"f").map_err(|e| e.to_string())?.ino;
            let got = fs.read(f, 0, data.len() + 1).map_err(|e| e.to_string())?;
            if got.len() != data.len() {
                return Err(format!("size {}", got.len()));
            }
            for (i, (&g, &w)) in got.iter().zip(&data).enumerate() {
                let punched = (off..end).contains(&(i as u64));
                if g != w && !(punched && g == 0) {
                    return Err(format!("byte {i}: {g} (was {w})"));
                }
            }
            fs.unmount();
            let rep = check(&**s);
            match rep.is_clean() {
                true => Ok(()),
                false => Err(format!("{:?}", rep.problems)),
            }
        },
    );
    assert!(rep.fences >= 4, "{rep}");
    assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
}
