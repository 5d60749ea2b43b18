//! Format 4's two rules. No tree node a file reaches is empty: a truncate frees every node it
//! empties, so a zeroed node is damage (the mount serves EIO for that file instead of holes
//! where its data was, `check` names it, and repair says which file blocks lost their data).
//! An inode in use carries a checksum of the fields transactions store: a changed mode, owner,
//! link count or pointer is EIO and named, never served.

use pmkit_fs::layout::{Superblock, BLOCK, SB_LEN};
use pmkit_fs::{check, Error, Fs, MkfsOptions, MountOptions, SetAttr, ROOT};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Media;

mod older;

const LEN: usize = 256 << 10;
/// The inode's root pointer (`inode.rs`: ROOT).
const ROOT_AT: usize = 16;

fn pool() -> CrashSim {
    let sim = CrashSim::new(LEN);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    sim
}

fn sb(sim: &CrashSim) -> Superblock {
    let mut b = [0u8; SB_LEN];
    sim.read(0, &mut b);
    Superblock::decode(&b, LEN).unwrap()
}

fn word(sim: &CrashSim, off: usize) -> u64 {
    let mut b = [0u8; 8];
    sim.read(off, &mut b);
    u64::from_le_bytes(b)
}

fn size_to(fs: &Fs<&CrashSim>, ino: u64, size: u64) {
    let s = SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    fs.setattr(ino, &s).unwrap();
}

/// A truncate that cuts a node straddling the new size, below which the file has only holes,
/// frees that node; one that leaves the root node empty frees it too. Either left behind would
/// be a node `check` calls damage.
#[test]
fn truncates_leave_no_empty_node() {
    let sim = pool();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let b = BLOCK as u64;
    // Blocks 0 and 600: a height-2 tree whose second level-1 node (512..1023) holds only 600.
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    fs.write(f, 0, &[1u8; 100]).unwrap();
    fs.write(f, 600 * b, &[2u8; 100]).unwrap();
    size_to(&fs, f, 550 * b);
    // Only block 600: the root's one child goes, and the root with it.
    let g = fs.create(ROOT, b"g", 0o644).unwrap().ino;
    fs.write(g, 600 * b, &[3u8; 100]).unwrap();
    size_to(&fs, g, 100 * b);
    assert_eq!(fs.read(f, 0, 100).unwrap(), vec![1u8; 100]);
    assert_eq!(fs.read(g, 0, 100).unwrap(), vec![0u8; 100]);
    assert_eq!(fs.getattr(g).unwrap().blocks, 0, "g holds no block");
    fs.unmount();
    let rep = check(&sim);
    assert!(rep.is_clean(), "{rep:?}");
}

/// A file's tree node zeroed on the media: a mount from the checkpoint answers EIO for the
/// file (not zeros), `check` names the node and the file blocks, and repair cuts it and says
/// what was lost; the pool then mounts with the file a hole there.
#[test]
fn a_zeroed_node_is_eio_named_and_repaired_with_what_was_lost() {
    let sim = pool();
    let f = {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
        fs.write(f, 0, &[7u8; 3 * BLOCK]).unwrap();
        fs.create(ROOT, b"other", 0o644).unwrap();
        fs.unmount();
        f
    };
    assert!(check(&sim).is_clean());
    let sb = sb(&sim);
    // three blocks: height 1, the root a node of pointers
    let node = word(&sim, sb.geo.inode_off(f) + ROOT_AT);
    assert!(sb.geo.is_data(node));
    sim.write(node as usize * BLOCK, &[0u8; BLOCK]);

    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(rec.from_checkpoint);
    match fs.read(f, 0, 100) {
        Err(e @ Error::DamagedInode { .. }) => assert_eq!(e.errno(), 5),
        other => panic!("a zeroed node must not read as holes: {other:?}"),
    }
    assert!(fs.lookup(ROOT, b"other").is_ok(), "the rest is served");
    fs.unmount();

    let rep = check(&sim);
    let named = format!("inode {f}: tree node at block {node} fails the check of every pointer");
    assert!(
        rep.problems
            .iter()
            .any(|p| p.contains(&named) && p.contains("0..512")),
        "{rep:?}"
    );
    let r = pmkit_fs::repair(&sim).unwrap();
    assert!(r.is_clean(), "{r:?}");
    assert!(
        r.fixes
            .iter()
            .any(|x| x.ino == Some(f) && x.what.contains("is lost")),
        "the repair says the data is lost: {:?}",
        r.fixes
    );
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let a = fs.getattr(f).unwrap();
    assert_eq!((a.size, a.blocks), (3 * BLOCK as u64, 0));
    assert_eq!(fs.read(f, 0, 100).unwrap(), vec![0u8; 100]);
}

/// A format 3 pool may hold empty nodes that truncates of earlier builds left: there an empty
/// node is not damage (the rule is format 4's).
#[test]
fn format_3_pools_are_not_held_to_the_rule() {
    let sim = pool();
    let sb = sb(&sim);
    let old = Superblock {
        geo: sb.geo.at_format(3),
        ..sb
    };
    for off in sb.geo.sb_offs() {
        sim.write(off, &old.encode());
    }
    // the meta inode's checksum as the older format keeps it (none: format 5 seals it)
    pmkit_fs::reseal_inode(&sim, 0).unwrap();
    older::unseal(&sim, &sb.geo);
    let f = {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
        fs.write(f, 0, &[7u8; 3 * BLOCK]).unwrap();
        fs.unmount();
        f
    };
    let node = word(&sim, sb.geo.inode_off(f) + ROOT_AT);
    sim.write(node as usize * BLOCK, &[0u8; BLOCK]);
    let rep = check(&sim);
    assert!(
        !rep.problems.iter().any(|p| p.contains("holds no pointer")),
        "{rep:?}"
    );
    assert_eq!(pmkit_fs::superblock(&sim).unwrap().geo.version(), 3);
}

/// Bytes of an inode changed on the media (a set-user-ID bit appears in the mode), and an
/// inode copied into a free slot: a mount from the checkpoint answers EIO for the first instead
/// of serving the mode, `check` names both, and repair frees both (which field is wrong cannot
/// be known) and keeps the rest.
#[test]
fn a_changed_inode_is_eio_named_and_freed() {
    let sim = pool();
    let (f, g) = {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let f = fs.create(ROOT, b"f", 0o755).unwrap().ino;
        fs.write(f, 0, b"#!/bin/sh\n").unwrap();
        let g = fs.create(ROOT, b"g", 0o644).unwrap().ino;
        fs.write(g, 0, b"kept").unwrap();
        fs.unmount();
        (f, g)
    };
    let sb = sb(&sim);
    // mode at byte 44: 0o100755 becomes 0o104755
    let mode_at = sb.geo.inode_off(f) + 44;
    let mut m = [0u8; 4];
    sim.read(mode_at, &mut m);
    let mode = u32::from_le_bytes(m);
    assert_eq!(mode & 0o7777, 0o755);
    sim.write(mode_at, &(mode | 0o4000).to_le_bytes());
    // g's inode copied into a free slot: in use there, but not sealed for that slot
    let copy = 20;
    let mut b = vec![0u8; 128];
    sim.read(sb.geo.inode_off(g), &mut b);
    sim.write(sb.geo.inode_off(copy), &b);

    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(rec.from_checkpoint);
    match fs.getattr(f) {
        Err(e @ Error::DamagedInode { .. }) => assert_eq!(e.errno(), 5),
        other => panic!("a changed mode must not be served: {other:?}"),
    }
    assert_eq!(fs.read(g, 0, 10).unwrap(), b"kept");
    fs.unmount();

    let rep = check(&sim);
    for ino in [f, copy] {
        let named = format!("inode {ino}: its fields do not match their checksum");
        assert!(
            rep.problems.iter().any(|p| p.contains(&named)),
            "{ino}: {rep:?}"
        );
    }
    let r = pmkit_fs::repair(&sim).unwrap();
    assert!(r.is_clean(), "{r:?}");
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(matches!(fs.lookup(ROOT, b"f"), Err(Error::NotFound)));
    assert_eq!(fs.read(g, 0, 10).unwrap(), b"kept");
    assert!(
        fs.lookup(ROOT, b"lost+found").is_err(),
        "the copy is not relinked"
    );
}
