//! Fuzz the file system's on-media decoders: the structure decoders on raw bytes, and whole
//! images (a real small file system with bytes changed) through `check`, then `mount` (once
//! as it comes, loading a clean image's checkpoint, and once walking), a walk of everything, a
//! few operations, unmount and, after the walking mount, `check` again.

use crate::input::{mutate, Input};
use pmkit_fs::decoders::{dir_block, xattr_block, Entry, Inode};
use pmkit_fs::layout::{Superblock, BLOCK, INODE, LINE, SB_LEN};
use pmkit_fs::{check, repair, Fs, MkfsOptions, MountOptions, RenameFlags, XattrFlags, ROOT};
use pmkit_media::crashsim::CrashSim;
use std::sync::OnceLock;

const LEN: usize = 160 << 10;

/// A small tree: /d/f (two blocks, the last append's tail record, an xattr), /d/g, /s (symlink), /e/h (a hard link of f);
/// kind 1: the same with a file unlinked while open (an orphan).
fn base_image(kind: usize) -> &'static [u8] {
    static IMAGES: [OnceLock<Vec<u8>>; 2] = [const { OnceLock::new() }; 2];
    IMAGES[kind].get_or_init(|| {
        let sim = CrashSim::new(LEN);
        Fs::mkfs(&sim, &MkfsOptions::tiny()).expect("mkfs a fuzz base image");
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let d = fs.mkdir(ROOT, b"d", 0o755).unwrap();
        let f = fs.create(d.ino, b"f", 0o644).unwrap();
        fs.write(f.ino, 0, &[7u8; 6000]).unwrap();
        // into the block it owns: a one-fence append, so the image has a tail record
        fs.write(f.ino, 6000, &[8u8; 100]).unwrap();
        fs.setxattr(f.ino, b"user.x", b"value", XattrFlags::Either)
            .unwrap();
        fs.create(d.ino, b"g", 0o644).unwrap();
        fs.symlink(ROOT, b"s", b"d/f").unwrap();
        let e = fs.mkdir(ROOT, b"e", 0o700).unwrap();
        fs.link(
            f.ino,
            e.ino,
            b"a-rather-long-name-that-needs-a-second-directory-slot-h",
        )
        .unwrap();
        if kind == 1 {
            let o = fs.create(ROOT, b"o", 0o644).unwrap();
            fs.write(o.ino, 0, b"orphan").unwrap();
            fs.open(o.ino).unwrap();
            fs.unlink(ROOT, b"o").unwrap();
        }
        fs.unmount();
        sim.image()
    })
}

/// Metadata (superblocks, journal, inode table) lies in the first blocks of the tiny geometry.
const HOT: usize = 8 * BLOCK;

fn raw_decoders(input: &mut Input<'_>) {
    let mut block = vec![0u8; BLOCK];
    let b = input.bytes(BLOCK);
    block[..b.len()].copy_from_slice(b);
    let _ = dir_block(&block);
    let _ = xattr_block(&block);
    let _ = Entry::decode(block[..LINE].try_into().expect("64 bytes"));
    let _ = Superblock::decode(block[..SB_LEN].try_into().expect("64 bytes"), LEN);
    let _ = Inode::decode(block[..INODE].try_into().expect("128 bytes"));
}

/// The image an input describes (see [`fs_image`]), or None for the raw decoders.
fn image_of(input: &mut Input<'_>, mode: u8) -> Option<Vec<u8>> {
    match mode & 3 {
        0 => None,
        3 => {
            let mut v = input.rest().to_vec();
            v.truncate(LEN);
            Some(v)
        }
        k => {
            let mut image = base_image(k as usize - 1).to_vec();
            mutate(&mut image, HOT, input);
            Some(image)
        }
    }
}

/// `repair` on any image (byte 0 as in [`fs_image`]; 0 takes the base image with the rest of
/// the input as edits): it never panics, and either leaves a file system that `check` calls
/// clean and mount takes (and that works), or says what is left, which `check` still finds.
pub fn fs_repair(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let image = image_of(&mut input, mode | (mode & 3 == 0) as u8).expect("an image");
    let sim = CrashSim::from_image(image);
    let Ok(rep) = repair(&sim) else {
        return; // a store failed: not on the simulator
    };
    let after = check(&sim);
    if !rep.is_clean() {
        assert!(
            !after.is_clean(),
            "repair reported problems check does not see"
        );
        return;
    }
    assert!(
        after.is_clean(),
        "repaired clean but check: {:?}",
        after.problems
    );
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).expect("repaired clean, mount fails");
    if let Ok(n) = fs.create(ROOT, b"after-repair", 0o644) {
        let _ = fs.write(n.ino, 0, b"repaired");
    }
    let _ = fs.mkdir(ROOT, b"nd", 0o755);
    fs.unmount();
    let used = check(&sim);
    assert!(
        used.is_clean(),
        "a repaired image failed check after use: {:?}\nrepair: {:#?}",
        used.problems,
        rep.fixes.iter().map(|f| &f.what).collect::<Vec<_>>()
    );
    assert!(
        repair(&sim).expect("repair").fixes.is_empty(),
        "a second repair found more to fix"
    );
}

/// Byte 0: bit 0-1: 0 the raw decoders on the rest of the input; 1 the base image, 2 the base
/// image with an orphan, 3 arbitrary bytes as the image; the rest edits the image (see
/// `input::mutate`).
pub fn fs_image(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let Some(image) = image_of(&mut input, mode) else {
        return raw_decoders(&mut input);
    };
    let _ = check(&CrashSim::from_image(image.clone()));
    // A mount that may load the clean-unmount checkpoint (no walk): damage only a whole walk
    // sees may stay, but nothing may panic.
    let sim = CrashSim::from_image(image.clone());
    if let Ok((fs, _)) = Fs::mount(&sim, &MountOptions::default()) {
        exercise(&fs);
        fs.unmount();
    }
    // A mount that walks: an image it takes passed every check, so operations on it must not
    // trip over anything and it checks clean after.
    let sim = CrashSim::from_image(image);
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    let Ok((fs, _)) = Fs::mount(&sim, &walk) else {
        return;
    };
    exercise(&fs);
    fs.unmount();
    assert!(
        check(&sim).is_clean(),
        "a mounted image failed check after unmount"
    );
}

/// Read everything reachable (64 entries at most), then change a few things.
fn exercise<M: pmkit_media::Media>(fs: &Fs<M>) {
    let mut stack = vec![ROOT];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        for e in fs.readdir(dir).unwrap_or_default().into_iter().skip(2) {
            seen += 1;
            if seen > 64 {
                break;
            }
            let _ = fs.getattr(e.ino);
            let _ = fs.read(e.ino, 0, 1 << 16);
            let _ = fs.readlink(e.ino);
            if let Ok(names) = fs.listxattr(e.ino) {
                for n in names {
                    let _ = fs.getxattr(e.ino, &n);
                }
            }
            if fs.readdir(e.ino).is_ok() {
                stack.push(e.ino);
            }
        }
    }
    if let Ok(n) = fs.create(ROOT, b"new", 0o644) {
        let _ = fs.write(n.ino, 4000, b"fuzz");
        let _ = fs.rename(ROOT, b"new", ROOT, b"d", RenameFlags::Exchange);
    }
    let _ = fs.mkdir(ROOT, b"nd", 0o755);
    let _ = fs.unlink(ROOT, b"s");
    let _ = fs.rmdir(ROOT, b"e");
}
