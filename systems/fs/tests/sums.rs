//! Data checksums (`Fs::set_sums`, format 6): a summed file reads back what a byte model holds
//! through writes of every size and alignment, truncates, fallocate in each mode and remounts;
//! damage to its data is EIO and named by `check` (while the same damage to a file without
//! sums is read as data); turning sums on sums what the file holds; a summed file cannot be
//! mapped; and a crash at every fence of every data operation leaves sums that match (the
//! crash checker reads every file and fails on data damage in `check`).

mod common;
mod older;

use common::crashcheck::crash_seq;
use common::Op;
use pmkit_fs::{check, Error, Falloc, Fs, MkfsOptions, MountOptions, Owner, SetAttr, ROOT};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::{Domain, Media};
use rand::{Rng, SeedableRng};

const LEN: usize = 8 << 20;
const BLOCK: u64 = 4096;

fn fresh() -> CrashSim {
    let sim = CrashSim::new(LEN);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    sim
}

fn truncate(fs: &Fs<&CrashSim>, ino: u64, size: u64) {
    let s = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(ino, &s).unwrap();
}

fn whole(fs: &Fs<&CrashSim>, ino: u64) -> Result<Vec<u8>, Error> {
    let size = fs.getattr(ino)?.size;
    fs.read(ino, 0, size as usize)
}

/// One random data operation on `ino`, applied to the model too.
fn step(fs: &Fs<&CrashSim>, ino: u64, model: &mut Vec<u8>, r: &mut impl Rng) {
    let size = model.len() as u64;
    let off = r.gen_range(0..=size + 3 * BLOCK);
    let len = r.gen_range(1..3 * BLOCK + 300);
    match r.gen_range(0..6) {
        0 | 1 => {
            // every size and alignment, now and then more than one transaction holds
            let len = if r.gen_bool(0.1) {
                300 * BLOCK + 7
            } else {
                len
            };
            let data: Vec<u8> = (0..len).map(|_| r.gen()).collect();
            fs.write(ino, off, &data).unwrap();
            let end = (off + len) as usize;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
        }
        2 => {
            let to = r.gen_range(0..=size + 2 * BLOCK);
            truncate(fs, ino, to);
            model.resize(to as usize, 0);
        }
        3 => {
            fs.fallocate_mode(ino, off, len, Falloc::Allocate).unwrap();
            model.resize(model.len().max((off + len) as usize), 0);
        }
        4 => fs.fallocate_mode(ino, off, len, Falloc::KeepSize).unwrap(),
        _ => {
            fs.fallocate_mode(ino, off, len, Falloc::PunchHole).unwrap();
            let end = ((off + len) as usize).min(model.len());
            if (off as usize) < end {
                model[off as usize..end].fill(0);
            }
        }
    }
}

#[test]
fn a_summed_file_reads_back_what_a_model_holds() {
    let sim = fresh();
    let mut model = Vec::new();
    let ino = {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let ino = fs.create(ROOT, b"f", 0o644).unwrap().ino;
        fs.set_sums(ino, true).unwrap();
        assert_eq!(fs.sums(ino).unwrap(), Some(true));
        assert!(fs.getattr(ino).unwrap().sums);
        let mut r = rand::rngs::StdRng::seed_from_u64(7);
        for i in 0..300 {
            step(&fs, ino, &mut model, &mut r);
            assert_eq!(whole(&fs, ino).unwrap(), model, "after step {i}");
        }
        fs.unmount();
        ino
    };
    let rep = check(&sim);
    assert!(rep.is_clean() && rep.data_damage.is_empty(), "{rep:?}");
    // from the checkpoint, then with a full walk
    for full_walk in [false, true] {
        let o = MountOptions {
            full_walk,
            ..MountOptions::default()
        };
        let (fs, _) = Fs::mount(&sim, &o).unwrap();
        assert_eq!(whole(&fs, ino).unwrap(), model);
        fs.unmount();
    }
}

/// The media byte offset of file block `idx` of `ino`.
fn media_off(fs: &Fs<&CrashSim>, ino: u64, idx: u64) -> usize {
    let e = fs.extents(ino, idx * BLOCK, BLOCK).unwrap();
    let e = e.iter().find(|e| e.logical <= idx * BLOCK).unwrap();
    (e.physical + idx * BLOCK - e.logical) as usize
}

#[test]
fn damaged_data_is_eio_and_check_names_it() {
    let sim = fresh();
    let (summed, plain, at) = {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let s = fs.create(ROOT, b"summed", 0o644).unwrap().ino;
        fs.set_sums(s, true).unwrap();
        let p = fs.create(ROOT, b"plain", 0o644).unwrap().ino;
        for f in [s, p] {
            fs.write(f, 0, &vec![0xA5; 3 * BLOCK as usize + 100])
                .unwrap();
        }
        let at = [media_off(&fs, s, 1), media_off(&fs, p, 1)];
        fs.unmount();
        (s, p, at)
    };
    // one byte of block 1 of each file changes on the media
    let mut img = sim.image();
    for a in at {
        img[a + 10] ^= 0x40;
    }
    let sim = CrashSim::from_image(img);
    let rep = check(&sim);
    assert!(rep.is_clean(), "the metadata is sound: {rep:?}");
    assert_eq!(rep.data_damage.len(), 1, "{:?}", rep.data_damage);
    assert!(
        rep.data_damage[0].starts_with(&format!("inode {summed}: the data at file offset 4096")),
        "{:?}",
        rep.data_damage
    );
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    // the other blocks read; the damaged one is EIO, never the changed bytes
    assert_eq!(fs.read(summed, 0, 4096).unwrap(), vec![0xA5; 4096]);
    assert_eq!(fs.read(summed, 2 * BLOCK, 100).unwrap(), vec![0xA5; 100]);
    match fs.read(summed, BLOCK + 2000, 10) {
        Err(e @ Error::DamagedInode { .. }) => assert_eq!(e.errno(), libc::EIO),
        other => panic!("damaged block read as {other:?}"),
    }
    // without sums the same damage is served as data
    assert_eq!(fs.read(plain, BLOCK + 10, 1).unwrap(), vec![0xA5 ^ 0x40]);
    // writing the range again heals it
    fs.write(summed, BLOCK, &[7; 4096]).unwrap();
    assert_eq!(fs.read(summed, BLOCK, 4096).unwrap(), vec![7; 4096]);
    fs.unmount();
}

#[test]
fn turning_sums_on_sums_what_the_file_holds() {
    let sim = fresh();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let ino = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    // appends leave preallocation past the size, which turning sums on gives back
    let mut model = Vec::new();
    for i in 0..40u8 {
        let piece = vec![i; 3000];
        fs.write(ino, model.len() as u64, &piece).unwrap();
        model.extend_from_slice(&piece);
    }
    fs.set_sums(ino, true).unwrap();
    assert_eq!(whole(&fs, ino).unwrap(), model);
    // growing into what was preallocated: zeros, summed
    truncate(&fs, ino, model.len() as u64 + 3 * BLOCK);
    model.resize(model.len() + 3 * BLOCK as usize, 0);
    assert_eq!(whole(&fs, ino).unwrap(), model);
    // off and on again
    fs.set_sums(ino, false).unwrap();
    fs.write(ino, 5, b"in place").unwrap();
    model[5..13].copy_from_slice(b"in place");
    fs.set_sums(ino, true).unwrap();
    assert_eq!(whole(&fs, ino).unwrap(), model);
    // a summed file is not mapped; directories have no sums
    assert!(matches!(
        fs.pin_extents(ino, 0, BLOCK),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(fs.set_sums(ROOT, true), Err(Error::IsDir)));
    fs.unmount();
    let rep = check(&sim);
    assert!(rep.is_clean() && rep.data_damage.is_empty(), "{rep:?}");
}

fn s(x: &str) -> String {
    x.to_string()
}

#[test]
fn summed_writes_crash_anywhere() {
    let setup = [
        Op::Create(s("f")),
        Op::Write(s("f"), 0, 3 * 4096 + 100, 1),
        Op::SetSums(s("f"), true),
        Op::Create(s("g")),
        Op::Write(s("g"), 0, 5000, 2),
    ];
    let ops = [
        // an overwrite inside a block, across blocks, an append that grows the last block
        Op::Write(s("f"), 100, 50, 3),
        Op::Write(s("f"), 4000, 5000, 4),
        Op::Write(s("f"), 3 * 4096 + 100, 3000, 5),
        // a write past the end leaving a hole, then a size that shrinks into a block
        Op::Write(s("f"), 9 * 4096 + 5, 10, 6),
        Op::Truncate(s("f"), 2 * 4096 + 1),
        Op::Truncate(s("f"), 5 * 4096),
        Op::Fallocate(s("f"), 6 * 4096, 3 * 4096),
        // a punch inside a block (its edge, copied), then of a whole block (one transaction
        // each: a punch that does both takes two, and a crash between shows the first done)
        Op::FallocMode(s("f"), 1000, 2000, Falloc::PunchHole),
        Op::FallocMode(s("f"), 4096, 4096, Falloc::PunchHole),
        // sums turned on for a file holding data
        Op::SetSums(s("g"), true),
        Op::Write(s("g"), 10, 20, 7),
    ];
    for domain in [Domain::Adr, Domain::Eadr] {
        let rep = crash_seq(LEN, &setup, &ops, domain, &|_, _| {}, &|_, _| {});
        assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
        assert!(rep.fences >= 20, "{rep}");
        eprintln!("{domain:?}: {rep}");
    }
}

/// A mount with `checksum` (`pmkit fs mount --checksum`, `PMFS_CHECKSUM=1`) sums every regular
/// file it creates, named or not; files made before keep theirs off; a pool of a format before
/// 6 refuses such a mount.
#[test]
fn a_checksum_mount_sums_the_files_it_creates() {
    let sim = fresh();
    let old = {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let o = fs.create(ROOT, b"old", 0o644).unwrap().ino;
        fs.unmount();
        o
    };
    let summed = MountOptions {
        checksum: true,
        ..MountOptions::default()
    };
    let (fs, _) = Fs::mount(&sim, &summed).unwrap();
    let new = fs.create(ROOT, b"new", 0o644).unwrap().ino;
    let anon = fs.tmpfile_as(Owner::default(), ROOT, 0o600).unwrap().ino;
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap().ino;
    assert_eq!(fs.sums(new).unwrap(), Some(true));
    assert_eq!(fs.sums(anon).unwrap(), Some(true));
    assert_eq!(fs.sums(old).unwrap(), Some(false), "made before: unchanged");
    assert!(!fs.getattr(d).unwrap().sums);
    fs.write(new, 0, &vec![0xA5; 2 * BLOCK as usize]).unwrap();
    let at = media_off(&fs, new, 1);
    fs.unmount();
    sim.write(at + 7, &[0x5A]);
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert_eq!(fs.read(new, 0, 10).unwrap(), vec![0xA5; 10]);
    assert_eq!(fs.read(new, BLOCK, 10).unwrap_err().errno(), libc::EIO);
    fs.unmount();
    // a format 5 pool (no table can be rooted there) refuses the mount
    let sb = pmkit_fs::superblock(&sim).unwrap();
    let v5 = pmkit_fs::layout::Superblock {
        geo: sb.geo.at_format(5),
        ..sb
    };
    let sim = fresh();
    for off in v5.geo.sb_offs() {
        sim.write(off, &v5.encode());
    }
    older::unseal(&sim, &v5.geo);
    match Fs::mount(&sim, &summed) {
        Err(Error::NotSupported(why)) => assert!(why.contains("format"), "{why}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}
