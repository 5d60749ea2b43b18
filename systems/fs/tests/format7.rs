//! Format 7's two checks, each in the word it checks, so neither costs a store or a fence.
//!
//! Every pointer word in a tree node carries a check of the pointer and of the slot that holds
//! it. A pointer flipped to another file's block, a node copied over another, and a partly
//! zeroed node are each named by `check`, answered with EIO by a mount (from the checkpoint
//! too, on the file's first use), and cut by repair to holes it names: never served as another
//! file's bytes or as holes. Before format 7 the first two were served silently by a mount from
//! the checkpoint (the per-inode check on first use cannot see a block another file owns).
//!
//! A directory's inode keeps a count and digest of its records. A zeroed directory block or
//! another directory's block copied over one is EIO and named, where before a mount from the
//! checkpoint served the directory empty, or with the other directory's names.
//!
//! An inode's size word carries a check of the size (the size is outside the inode's checksum:
//! the write fast paths store it alone). A flipped size bit is EIO and named, where before it
//! was a file silently shorter or longer.

use pmkit_fs::layout::{Superblock, BLOCK, SB_LEN, VERSION};
use pmkit_fs::{check, repair, Error, Fs, MkfsOptions, MountOptions, RenameFlags, SetAttr, ROOT};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Media;

const LEN: usize = 512 << 10;
/// The inode's root pointer (`inode.rs`: ROOT).
const ROOT_AT: usize = 16;
/// The pointer's bits of a word (block number and huge flag).
const VALUE: u64 = ((1 << 40) - 1) | (1 << 63);

/// A pool with files `a` and `b` of three blocks each (a tree node apiece; `a`'s bytes 0xaa,
/// `b`'s 0xbb) and a small file `c`; inode numbers returned.
fn pool() -> (CrashSim, [u64; 3]) {
    let sim = CrashSim::new(LEN);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let mut inos = [0; 3];
    for (i, (name, byte, len)) in [
        (b"a", 0xaa, 3 * BLOCK),
        (b"b", 0xbb, 3 * BLOCK),
        (b"c", 0xcc, 10),
    ]
    .into_iter()
    .enumerate()
    {
        inos[i] = fs.create(ROOT, name, 0o644).unwrap().ino;
        fs.write(inos[i], 0, &vec![byte; len]).unwrap();
    }
    fs.unmount();
    assert!(check(&sim).is_clean());
    (sim, inos)
}

fn size(n: u64) -> SetAttr {
    SetAttr {
        size: Some(n),
        ..SetAttr::default()
    }
}

fn geo(sim: &CrashSim) -> pmkit_fs::layout::Geometry {
    let mut b = [0u8; SB_LEN];
    sim.read(0, &mut b);
    Superblock::decode(&b, LEN).unwrap().geo
}

fn word(sim: &CrashSim, off: usize) -> u64 {
    let mut b = [0u8; 8];
    sim.read(off, &mut b);
    u64::from_le_bytes(b)
}

/// The byte offset of inode `ino`'s tree node (its root: height 1).
fn node_of(sim: &CrashSim, ino: u64) -> usize {
    let node = word(sim, geo(sim).inode_off(ino) + ROOT_AT);
    assert!(geo(sim).is_data(node));
    node as usize * BLOCK
}

/// A mount from the clean-unmount checkpoint serves EIO for `bad` and the other files' bytes.
fn lazily_refused(sim: &CrashSim, bad: u64, fine: &[(u64, u8)]) {
    let (fs, rec) = Fs::mount(sim, &MountOptions::default()).unwrap();
    assert!(rec.from_checkpoint);
    match fs.read(bad, 0, 3 * BLOCK) {
        Err(e @ Error::DamagedInode { .. }) => assert_eq!(e.errno(), libc::EIO),
        other => panic!("a damaged tree must not be served: {other:?}"),
    }
    for &(ino, byte) in fine {
        let got = fs.read(ino, 0, 3 * BLOCK).unwrap();
        assert!(
            !got.is_empty() && got.iter().all(|&x| x == byte),
            "inode {ino}"
        );
    }
    fs.unmount();
}

/// `check` names `want`; repair cuts it and says so; the repaired pool mounts with a full walk,
/// checks clean, and `ino` reads `expect` (its size kept, the cut blocks holes).
fn repaired(sim: &CrashSim, want: &str, ino: u64, expect: &[u8]) {
    let rep = check(sim);
    assert!(rep.problems.iter().any(|p| p.contains(want)), "{rep:?}");
    let r = repair(sim).unwrap();
    assert!(r.is_clean(), "{r:?}");
    assert!(
        r.fixes
            .iter()
            .any(|f| f.ino == Some(ino) && f.what.contains("is lost")),
        "repair says what was lost: {:?}",
        r.fixes
    );
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    let (fs, _) = Fs::mount(sim, &walk).unwrap();
    assert_eq!(fs.read(ino, 0, 4 * BLOCK).unwrap(), expect);
    fs.unmount();
    assert!(check(sim).is_clean());
}

#[test]
fn new_pools_are_format_8_and_their_holes_are_not_zero() {
    let (sim, [a, ..]) = pool();
    assert_eq!((VERSION, geo(&sim).version()), (8, 8));
    let node = node_of(&sim, a);
    for s in 0..BLOCK / 8 {
        let at = node + s * 8;
        let w = word(&sim, at);
        assert_ne!(w, 0, "slot {s}: a hole carries its check");
        assert_eq!(w, pmkit_fs::seal_pointer(w & VALUE, at), "slot {s}");
    }
}

/// A bit flip that turns `a`'s second pointer into `b`'s second block: before format 7, a
/// mount from the checkpoint served `b`'s bytes as `a`'s.
#[test]
fn a_pointer_flipped_to_another_files_block_is_eio_and_cut() {
    let (sim, [a, b, c]) = pool();
    let (na, nb) = (node_of(&sim, a), node_of(&sim, b));
    let stolen = word(&sim, nb + 8) & VALUE;
    let old = word(&sim, na + 8);
    // the pointer's bits changed, its check left as it was
    sim.write(na + 8, &(old & !VALUE | stolen).to_le_bytes());
    lazily_refused(&sim, a, &[(b, 0xbb), (c, 0xcc)]);
    let mut expect = vec![0xaa; 3 * BLOCK];
    expect[BLOCK..2 * BLOCK].fill(0);
    let want = format!(
        "inode {a}: 1 pointer words in tree node at block {}",
        na / BLOCK
    );
    repaired(&sim, &want, a, &expect);
}

/// A page copied over another: `b`'s node over `a`'s. Every word fails (its check names `b`'s
/// node's offsets), so `a` is not served `b`'s blocks, and repair does not hand them to `a`.
#[test]
fn a_node_copied_over_another_is_eio_not_the_other_files_data() {
    let (sim, [a, b, c]) = pool();
    let (na, nb) = (node_of(&sim, a), node_of(&sim, b));
    let mut page = vec![0u8; BLOCK];
    sim.read(nb, &mut page);
    sim.write(na, &page);
    lazily_refused(&sim, a, &[(b, 0xbb), (c, 0xcc)]);
    let want = format!(
        "inode {a}: tree node at block {} fails the check of every pointer word",
        na / BLOCK
    );
    repaired(&sim, &want, a, &vec![0u8; 3 * BLOCK]);
    // b keeps its blocks: the copy gave a none of them
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert_eq!(fs.read(b, 0, 4 * BLOCK).unwrap(), vec![0xbb; 3 * BLOCK]);
}

/// 64 bytes of a node zeroed: the three pointers and five holes fail their checks. Each is
/// cut; the node, then empty, is cut too (format 4's rule).
#[test]
fn a_partly_zeroed_node_is_eio_and_cut() {
    let (sim, [a, b, c]) = pool();
    let na = node_of(&sim, a);
    sim.write(na, &[0u8; 64]);
    lazily_refused(&sim, a, &[(b, 0xbb), (c, 0xcc)]);
    let want = format!(
        "inode {a}: 8 pointer words in tree node at block {}",
        na / BLOCK
    );
    repaired(&sim, &want, a, &vec![0u8; 3 * BLOCK]);
}

/// A flipped check bit alone (the pointer right) is damage too: the word cannot be trusted.
#[test]
fn a_flipped_check_bit_is_named() {
    let (sim, [a, ..]) = pool();
    let na = node_of(&sim, a);
    let w = word(&sim, na + 16);
    sim.write(na + 16, &(w ^ 1 << 45).to_le_bytes());
    let rep = check(&sim);
    let want = format!(
        "inode {a}: 1 pointer words in tree node at block {}",
        na / BLOCK
    );
    assert!(rep.problems.iter().any(|p| p.contains(&want)), "{rep:?}");
}

/// A size bit flipped: before format 7 the file was served 4 KiB longer, silently.
#[test]
fn a_flipped_size_bit_is_eio_and_repaired_to_the_last_block() {
    let (sim, [a, b, c]) = pool();
    {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        fs.setattr(a, &size(10_000)).unwrap();
        fs.unmount();
    }
    let at = geo(&sim).inode_off(a);
    let w = word(&sim, at);
    assert_eq!(w & ((1 << 40) - 1), 10_000);
    sim.write(at, &(w ^ 1 << 12).to_le_bytes()); // 10,000 + 4,096
    lazily_refused(&sim, a, &[(b, 0xbb), (c, 0xcc)]);
    let rep = check(&sim);
    let want = format!("inode {a}: its size word fails its check (it reads 14096 bytes)");
    assert!(rep.problems.iter().any(|p| p.contains(&want)), "{rep:?}");
    let r = repair(&sim).unwrap();
    assert!(r.is_clean(), "{r:?}");
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    let (fs, _) = Fs::mount(&sim, &walk).unwrap();
    assert_eq!(
        fs.getattr(a).unwrap().size,
        3 * BLOCK as u64,
        "the end of its last block"
    );
    assert_eq!(fs.read(a, 0, 10_000).unwrap(), vec![0xaa; 10_000]);
    fs.unmount();
    assert!(check(&sim).is_clean());
}

/// Sizes stored by every path carry their checks: the transaction, the one-fence append and
/// the grow-in-place write; a walking mount after each finds nothing.
#[test]
fn every_path_that_stores_a_size_seals_it() {
    let (sim, [a, b, c]) = pool();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    fs.write(c, 10, b"appended").unwrap(); // an append into its block
    fs.write(b, 3 * BLOCK as u64, &[1u8; 100]).unwrap(); // a write that grows the file
    fs.setattr(a, &size(5)).unwrap(); // a transaction
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap().ino;
    fs.unmount();
    for ino in [a, b, c, d] {
        let w = word(&sim, geo(&sim).inode_off(ino));
        assert_ne!(w >> 40, 0, "inode {ino}: its size word carries a check");
    }
    assert!(check(&sim).is_clean(), "{:?}", check(&sim));
}

/// A directory `d` holding `x`, `y` and `z` (small files), and its one data block's offset.
fn dir_pool() -> (CrashSim, u64, usize) {
    let (sim, _) = pool();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap().ino;
    for n in [b"x", b"y", b"z"] {
        let f = fs.create(d, n, 0o644).unwrap().ino;
        fs.write(f, 0, n).unwrap();
    }
    fs.unmount();
    assert!(check(&sim).is_clean());
    let block = word(&sim, geo(&sim).inode_off(d) + ROOT_AT);
    (sim, d, block as usize * BLOCK)
}

/// A directory block zeroed: before format 7 a mount from the checkpoint served the directory
/// empty (the names gone without an error); now the directory is EIO, `check` names it, and
/// repair finds the files again in lost+found.
#[test]
fn a_zeroed_directory_block_is_eio_not_an_empty_directory() {
    let (sim, d, block) = dir_pool();
    sim.write(block, &[0u8; BLOCK]);
    {
        let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        assert!(rec.from_checkpoint);
        match fs.lookup(d, b"x") {
            Err(e) => assert_eq!(e.errno(), libc::EIO, "{e}"),
            Ok(a) => panic!("served {a:?}"),
        }
        assert!(fs.readdir(d).is_err(), "no empty listing");
        assert!(fs.lookup(ROOT, b"a").is_ok(), "the rest is served");
        fs.unmount();
    }
    let rep = check(&sim);
    let want = format!("directory {d}: its records (0 found) do not match the count (3)");
    assert!(rep.problems.iter().any(|p| p.contains(&want)), "{rep:?}");
    let r = repair(&sim).unwrap();
    assert!(r.is_clean(), "{r:?}");
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let lf = fs.lookup(ROOT, b"lost+found").unwrap().ino;
    let found = fs.readdir(lf).unwrap().len() - 2; // less . and ..
    assert_eq!((found, fs.readdir(d).unwrap().len()), (3, 2));
    fs.unmount();
    assert!(check(&sim).is_clean());
}

/// Another directory's block copied over this one's: its records are sound, each matching its
/// own checksum, but they are not this directory's. Before format 7 a mount from the
/// checkpoint served the other directory's names here.
#[test]
fn another_directorys_block_is_not_served_as_this_ones() {
    let (sim, d, block) = dir_pool();
    let e = {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let e = fs.mkdir(ROOT, b"e", 0o755).unwrap().ino;
        for n in [b"p", b"q", b"r"] {
            fs.create(e, n, 0o644).unwrap();
        }
        fs.unmount();
        e
    };
    let other = word(&sim, geo(&sim).inode_off(e) + ROOT_AT) as usize * BLOCK;
    let mut page = vec![0u8; BLOCK];
    sim.read(other, &mut page);
    sim.write(block, &page);
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert_eq!(fs.lookup(d, b"p").unwrap_err().errno(), libc::EIO);
    fs.unmount();
    let rep = check(&sim);
    let want = format!("directory {d}: its records (3 found) do not match");
    assert!(rep.problems.iter().any(|p| p.contains(&want)), "{rep:?}");
}

/// Every namespace change keeps a directory's tally: created, linked, renamed over, exchanged,
/// whited out, removed; a full walk after each finds nothing.
#[test]
fn every_namespace_change_keeps_the_tally() {
    let (sim, d, _) = dir_pool();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let x = fs.lookup(d, b"x").unwrap().ino;
    for i in 0..6 {
        match i {
            0 => _ = fs.link(x, ROOT, b"x2").unwrap(),
            1 => fs
                .rename(d, b"y", ROOT, b"x2", RenameFlags::Replace)
                .unwrap(),
            2 => fs
                .rename(d, b"z", ROOT, b"c", RenameFlags::Exchange)
                .unwrap(),
            3 => fs
                .rename(d, b"x", ROOT, b"w", RenameFlags::Whiteout)
                .unwrap(),
            4 => fs.unlink(ROOT, b"w").unwrap(),
            _ => fs
                .rename(ROOT, b"x2", d, b"n", RenameFlags::Replace)
                .unwrap(),
        }
        let img = CrashSim::from_image(sim.image());
        let rep = check(&img);
        assert!(rep.problems.is_empty(), "after step {i}: {rep:?}");
    }
}

/// Both superblocks lost on a pool with no tree node at all (small files only): the root
/// directory's sealed size says format 7 or later, so the rebuilt pool is not held to format
/// 6's rules, which would read every sealed size as one over the limit and cut it. It is
/// rebuilt as format 8, whose shared blocks one inode cannot show (format 7 would cut them).
#[test]
fn lost_superblocks_of_a_pool_without_tree_nodes_are_rebuilt_as_format_8() {
    let sim = CrashSim::new(LEN);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let f = {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let f = fs.create(ROOT, b"small", 0o644).unwrap().ino;
        fs.write(f, 0, b"kept").unwrap();
        fs.unmount();
        f
    };
    let offs = geo(&sim).sb_offs();
    sim.write(offs[0] + 20, &[0xff]);
    sim.write(offs[1], &[0u8; 8]);
    let r = repair(&sim).unwrap();
    assert!(r.is_clean(), "{r:?}");
    assert_eq!(pmkit_fs::superblock(&sim).unwrap().geo.version(), 8);
    assert!(check(&sim).is_clean());
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert_eq!(fs.read(f, 0, 10).unwrap(), b"kept");
}
