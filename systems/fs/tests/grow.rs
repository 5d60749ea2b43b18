//! Growing a pool offline (`pmkit_fs::grow`, `pmkit fs resize`): files kept, the new space
//! usable, a format 2 pool made format 3, a crash at every fence leaving the old pool or the new
//! one, and what cannot be grown refused.

use pmkit_fs::layout::{Superblock, BLOCK, VERSION};
use pmkit_fs::{check, grow, Error, Fs, MkfsOptions, MountOptions, ROOT};
use pmkit_media::crashsim::{check_every_fence_from, CrashOpts, CrashSim};
use pmkit_media::Media;

mod older;

const OLD: usize = 1 << 20;
const NEW: usize = 3 << 20;

/// A 1 MiB pool holding /d/f (6000 bytes) and /k, unmounted clean, in media of `len` bytes.
fn pool(len: usize) -> CrashSim {
    let sim = CrashSim::new(OLD);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap().ino;
    let f = fs.create(d, b"f", 0o644).unwrap().ino;
    fs.write(f, 0, &[5u8; 6000]).unwrap();
    let k = fs.create(ROOT, b"k", 0o600).unwrap().ino;
    fs.write(k, 0, b"keep me").unwrap();
    fs.unmount();
    let mut img = sim.image();
    img.resize(len, 0);
    CrashSim::from_image(img)
}

fn intact<M: Media>(fs: &Fs<M>) -> Result<(), String> {
    let d = fs.lookup(ROOT, b"d").map_err(|e| e.to_string())?.ino;
    let f = fs.lookup(d, b"f").map_err(|e| e.to_string())?.ino;
    if fs.read(f, 0, 10_000).map_err(|e| e.to_string())? != [5u8; 6000] {
        return Err("d/f changed".into());
    }
    let k = fs.lookup(ROOT, b"k").map_err(|e| e.to_string())?.ino;
    if fs.read(k, 0, 100).map_err(|e| e.to_string())? != b"keep me" {
        return Err("k changed".into());
    }
    Ok(())
}

#[test]
fn a_grown_pool_keeps_its_files_and_uses_the_new_space() {
    let sim = pool(NEW);
    let before = {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let st = fs.statfs();
        fs.unmount();
        st
    };
    let g = grow(&sim).unwrap();
    assert_eq!((g.blocks_before, g.blocks_after), (256, 768));
    assert_eq!((g.version_before, g.version_after), (VERSION, VERSION));
    let rep = check(&sim);
    assert!(rep.is_clean() && rep.notes.is_empty(), "{rep:?}");
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(!rec.from_checkpoint, "the next mount walks: {rec:?}");
    intact(&fs).unwrap();
    let st = fs.statfs();
    assert_eq!(st.blocks, before.blocks + 512, "{st:?}");
    // the table keeps the blocks it has; room for 32 more inodes in each new free block
    assert_eq!(
        st.inodes - 32 * st.free_blocks,
        before.inodes - 32 * before.free_blocks
    );
    // Fill it: the new blocks (and the old last block, the old copy B) are handed out.
    let big = fs.create(ROOT, b"big", 0o644).unwrap().ino;
    let mut off = 0u64;
    while fs.write(big, off, &[7u8; BLOCK]).is_ok() {
        off += BLOCK as u64;
    }
    assert!(off > 2 << 20, "{off} bytes fit");
    assert_eq!(fs.statfs().free_blocks, 0);
    fs.unmount();
    assert!(check(&sim).is_clean());
}

#[test]
fn a_format_2_pool_grows_into_format_3() {
    let sim = pool(NEW);
    let sb = pmkit_fs::superblock(&sim).unwrap();
    let v2 = Superblock {
        geo: sb.geo.at_format(2),
        ..sb
    };
    for off in v2.geo.sb_offs() {
        sim.write(off, &v2.encode());
    }
    // the meta inode's checksum as the older format keeps it (none: format 5 seals it)
    pmkit_fs::reseal_inode(&sim, 0).unwrap();
    older::unseal(&sim, &sb.geo);
    sim.write((sb.geo.blocks as usize - 1) * BLOCK, &[0u8; BLOCK]);
    // A walking mount and a clean unmount: a checkpoint of format 2's allocator.
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    Fs::mount(&sim, &walk).unwrap().0.unmount();
    assert!(check(&sim).is_clean());
    let g = grow(&sim).unwrap();
    assert_eq!((g.version_before, g.version_after), (2, 3));
    let after = pmkit_fs::superblock(&sim).unwrap();
    assert!(after.geo.far_copy());
    let mut slot = [0u8; 64];
    sim.read(2048, &mut slot);
    assert_eq!(slot, [0u8; 64], "format 2's copy B slot cleared");
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    intact(&fs).unwrap();
}

#[test]
fn a_crash_at_every_fence_of_a_grow_leaves_the_old_pool_or_the_new() {
    let sim = pool(NEW);
    let opts = CrashOpts {
        k: 6,
        random_images: 16,
        ..Default::default()
    };
    let rep = check_every_fence_from(
        sim.image(),
        &opts,
        |s| {
            grow(&**s).unwrap();
        },
        |s| {
            let sb = pmkit_fs::superblock(&**s).map_err(|e| e.to_string())?;
            if sb.geo.blocks != 256 && sb.geo.blocks != 768 {
                return Err(format!("{} blocks", sb.geo.blocks));
            }
            let (fs, _) = Fs::mount(&**s, &MountOptions::default()).map_err(|e| e.to_string())?;
            intact(&fs)?;
            fs.unmount();
            let rep = check(&**s);
            if !rep.is_clean() {
                return Err(format!("{:?}", rep.problems));
            }
            Ok(())
        },
    );
    assert!(rep.fences >= 3, "{rep}");
    assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
}

#[test]
fn what_cannot_be_grown_is_refused_untouched() {
    // Not longer than its file system.
    let sim = pool(OLD);
    let img = sim.image();
    assert!(matches!(grow(&sim), Err(Error::Invalid(_))));
    assert!(sim.image() == img);
    // Not unmounted clean.
    let sim = pool(NEW);
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    drop(fs);
    let img = sim.image();
    assert!(matches!(grow(&sim), Err(Error::Invalid(_))));
    assert!(sim.image() == img);
}
