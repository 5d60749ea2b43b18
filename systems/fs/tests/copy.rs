//! copy_file_range in the library (`Fs::copy_range`): holes stay holes, a copy stops at the
//! source's end, overlapping ranges of one file are refused and disjoint ones copied, an atomic
//! destination takes pieces it can hold, and a crash at every fence of a copy leaves each byte
//! of the destination old or copied and the pool clean. Contents against a byte model are
//! `model.rs`'s (`Op::CopyRange`).

use pmkit_fs::{check, Error, Fs, MkfsOptions, MountOptions, ROOT};
use pmkit_media::crashsim::{check_every_fence_from, CrashOpts, CrashSim};

const B: u64 = 4096;
const MIB: u64 = 1 << 20;

mod common;
use common::{seeded as bytes, tiny_fs as mounted};

#[test]
fn a_sparse_file_is_copied_sparse_and_stops_at_the_end() {
    let fs = mounted(16 << 20);
    let src = fs.create(ROOT, b"src", 0o644).unwrap().ino;
    let dst = fs.create(ROOT, b"dst", 0o644).unwrap().ino;
    // 8 KiB of data, a 6 MiB hole, 8 KiB of data, then a hole to the size.
    let (a, b) = (bytes(1, 2 * B as usize), bytes(2, 2 * B as usize));
    fs.write(src, 0, &a).unwrap();
    fs.write(src, 6 * MIB, &b).unwrap();
    let size = 7 * MIB;
    fs.setattr(
        src,
        &pmkit_fs::SetAttr {
            size: Some(size),
            ..Default::default()
        },
    )
    .unwrap();
    // Asked for more than there is: the copy ends at the source's size.
    assert_eq!(fs.copy_range(src, 0, dst, 0, 100 * MIB).unwrap(), size);
    let (s, d) = (fs.getattr(src).unwrap(), fs.getattr(dst).unwrap());
    assert_eq!(d.size, size);
    assert_eq!(d.blocks, s.blocks, "the holes stayed holes");
    assert_eq!(
        fs.read(dst, 0, size as usize + 1).unwrap(),
        fs.read(src, 0, size as usize + 1).unwrap()
    );
    // At or past the end: nothing.
    assert_eq!(fs.copy_range(src, size, dst, 0, 10).unwrap(), 0);
    // A hole copied over data punches it.
    let full = fs.create(ROOT, b"full", 0o644).unwrap().ino;
    fs.write(full, 0, &bytes(3, 16 * B as usize)).unwrap();
    let before = fs.getattr(full).unwrap().blocks;
    assert_eq!(fs.copy_range(src, 4 * B, full, 0, 8 * B).unwrap(), 8 * B);
    let got = fs.read(full, 0, 16 * B as usize).unwrap();
    assert!(got[..8 * B as usize].iter().all(|&x| x == 0));
    assert_eq!(
        got[8 * B as usize..],
        bytes(3, 16 * B as usize)[8 * B as usize..]
    );
    let after = fs.getattr(full).unwrap().blocks;
    assert_eq!(before - after, 8, "the punched blocks were freed");
    let rep = check(&fs.unmount());
    assert!(rep.is_clean(), "{rep:?}");
}

#[test]
fn one_file_copies_disjoint_ranges_and_refuses_overlapping_ones() {
    let fs = mounted(4 << 20);
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    let data = bytes(4, 40 * B as usize);
    fs.write(f, 0, &data).unwrap();
    assert!(matches!(
        fs.copy_range(f, 0, f, 10 * B, 20 * B),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        fs.copy_range(f, 10 * B, f, 0, 20 * B),
        Err(Error::Invalid(_))
    ));
    assert_eq!(fs.copy_range(f, 0, f, 30 * B, 10 * B).unwrap(), 10 * B);
    let mut want = data.clone();
    want.copy_within(..10 * B as usize, 30 * B as usize);
    assert_eq!(fs.read(f, 0, want.len()).unwrap(), want);
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap().ino;
    assert!(matches!(fs.copy_range(d, 0, f, 0, 1), Err(Error::IsDir)));
    assert!(matches!(fs.copy_range(f, 0, d, 0, 1), Err(Error::IsDir)));
}

#[test]
fn an_atomic_destination_takes_pieces_it_can_hold() {
    let fs = mounted(16 << 20);
    let src = fs.create(ROOT, b"src", 0o644).unwrap().ino;
    let dst = fs.create(ROOT, b"dst", 0o644).unwrap().ino;
    fs.set_atomic(dst, true).unwrap();
    let n = (fs.max_atomic_write() * 3 + 123) as usize;
    let data = bytes(5, n);
    fs.write(src, 0, &data).unwrap();
    assert_eq!(fs.copy_range(src, 0, dst, 0, n as u64).unwrap(), n as u64);
    assert_eq!(fs.read(dst, 0, n + 1).unwrap(), data);
}

/// A crash at every fence of a copy of 300 blocks over a file of older bytes: every image
/// mounts, checks clean, and holds each byte as it was or as copied.
#[test]
fn a_crash_at_every_fence_of_a_copy() {
    let sim = CrashSim::new(4 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (old, new) = (bytes(6, 200 * B as usize), bytes(7, 300 * B as usize));
    {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let s = fs.create(ROOT, b"s", 0o644).unwrap().ino;
        fs.write(s, 0, &new).unwrap();
        let d = fs.create(ROOT, b"d", 0o644).unwrap().ino;
        fs.write(d, 0, &old).unwrap();
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
            let src = fs.lookup(ROOT, b"s").unwrap().ino;
            let dst = fs.lookup(ROOT, b"d").unwrap().ino;
            fs.copy_range(src, 0, dst, 0, 300 * B).unwrap();
        },
        |s| {
            let (fs, _) = Fs::mount(&**s, &MountOptions::default()).map_err(|e| e.to_string())?;
            let d = fs.lookup(ROOT, b"d").map_err(|e| e.to_string())?.ino;
            let got = fs.read(d, 0, new.len() + 1).map_err(|e| e.to_string())?;
            if got.len() < old.len() || got.len() > new.len() {
                return Err(format!("size {}", got.len()));
            }
            for (i, &g) in got.iter().enumerate() {
                if g != new[i] && old.get(i) != Some(&g) {
                    return Err(format!("byte {i}: {g}"));
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
