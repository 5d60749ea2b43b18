//! `repair`: each kind of damage made on purpose, repaired, then `check` clean, mount working,
//! undamaged files intact and lost inodes in lost+found; random damage never panics; a crash at
//! every fence of a repair leaves media that repairs and mounts.

use pmkit_fs::layout::{Superblock, BLOCK, INODE, LINE, SB_LEN};
use pmkit_fs::{
    check, repair, repair_with, Error, Fs, GeometryHint, MkfsOptions, MountOptions, RepairOptions,
    RepairReport, ROOT,
};
use pmkit_media::crashsim::{check_every_fence_from, CrashOpts, CrashSim};
use pmkit_media::Media;

/// Where this pool's two superblock copies are (its format's layout).
fn offs(sim: &CrashSim) -> [usize; 2] {
    pmkit_fs::superblock(sim).unwrap().geo.sb_offs()
}

const LEN: usize = 256 << 10;
const F_DATA: [u8; 6000] = [5u8; 6000];

/// /d (dir, inode 2) holding f (3: two blocks under a tree node) and g (4, empty); /s (5) a
/// symlink to d/f; /k (6) a one-block file.
fn image_with(o: &MkfsOptions) -> (CrashSim, Superblock) {
    let sim = CrashSim::new(LEN);
    Fs::mkfs(&sim, o).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap();
    let f = fs.create(d.ino, b"f", 0o644).unwrap();
    fs.write(f.ino, 0, &F_DATA).unwrap();
    let g = fs.create(d.ino, b"g", 0o644).unwrap();
    let s = fs.symlink(ROOT, b"s", b"d/f").unwrap();
    let k = fs.create(ROOT, b"k", 0o600).unwrap();
    fs.write(k.ino, 0, b"keep me").unwrap();
    assert_eq!((d.ino, f.ino, g.ino, s.ino, k.ino), (2, 3, 4, 5, 6));
    fs.unmount();
    let mut b = [0u8; SB_LEN];
    sim.read(0, &mut b);
    let sb = Superblock::decode(&b, LEN).unwrap();
    assert!(check(&sim).is_clean());
    (sim, sb)
}

fn image() -> (CrashSim, Superblock) {
    image_with(&MkfsOptions::tiny())
}

fn word(sim: &CrashSim, off: usize) -> u64 {
    let mut b = [0u8; 8];
    sim.read(off, &mut b);
    u64::from_le_bytes(b)
}

fn set_word(sim: &CrashSim, off: usize, v: u64) {
    sim.write(off, &v.to_le_bytes());
}

/// Store the checksums of inodes whose fields a test changed: damage a bug would store (the
/// checksum matches), which the checks after the checksum's must catch and repair fix.
fn reseal(sim: &CrashSim, inos: &[u64]) {
    for &i in inos {
        pmkit_fs::reseal_inode(sim, i).unwrap();
    }
}

/// Damage: g (inode 4) made a 4 KiB file whose one block is f's (inode 3) first data block,
/// which it returns.
fn share_fs_first_block(sim: &CrashSim, sb: &Superblock) -> u64 {
    let node = word(sim, sb.geo.inode_off(3) + 16);
    let first = word(sim, node as usize * BLOCK) & ((1 << 40) - 1); // less its check
    let g = sb.geo.inode_off(4);
    set_word(sim, g, 4096);
    set_word(sim, g + 16, first);
    reseal(sim, &[4]);
    first
}

/// Damage: g (inode 4) made a 4 KiB file whose one block is f's tree node (format 8 lets files
/// share data blocks, never a node), which it returns.
fn point_g_at_fs_node(sim: &CrashSim, sb: &Superblock) -> u64 {
    let node = word(sim, sb.geo.inode_off(3) + 16);
    let g = sb.geo.inode_off(4);
    set_word(sim, g, 4096);
    set_word(sim, g + 16, node);
    reseal(sim, &[4]);
    node
}

/// A directory record (one slot: names up to 48 bytes) written into slot `slot` of `block`.
fn put_record(sim: &CrashSim, block: u64, slot: usize, name: &[u8], ino: u64, kind: u8) {
    assert!(name.len() <= 48);
    let at = block as usize * BLOCK + slot * 64;
    assert_eq!(word(sim, at), 0, "slot {slot} is free");
    let mut r = [0u8; 64];
    r[0..8].copy_from_slice(&ino.to_le_bytes());
    (r[8], r[9], r[10]) = (name.len() as u8, kind, 1);
    r[16..16 + name.len()].copy_from_slice(name);
    // Its checksum as format 3 keeps it (so the check under test is the one that fires).
    let sum = crc32c::crc32c_append(
        crc32c::crc32c_append(crc32c::crc32c(&ino.to_le_bytes()), &[kind]),
        name,
    )
    .max(1);
    r[12..16].copy_from_slice(&sum.to_le_bytes());
    sim.write(at, &r);
}

/// Repair damaged media: check must have seen it, a mount that walks must refuse it with the
/// repair hint (the images were unmounted clean: a default mount would load the checkpoint),
/// and after repair check is clean and mount works. Returns the report's fixes as text.
fn repaired(sim: &CrashSim, what: &str) -> (RepairReport, String) {
    let before = check(sim);
    assert!(!before.is_clean(), "{what}: check found nothing");
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    match Fs::mount(sim, &walk) {
        Err(e @ Error::Damaged { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("pmkit fs check POOL --repair") && text.contains(&before.problems[0]),
                "{what}: {text}"
            );
        }
        other => panic!("{what}: mount gave {:?}", other.map(|_| ())),
    }
    let rep = repair(sim).unwrap();
    assert!(rep.is_clean(), "{what}: {rep:#?}");
    assert_eq!(rep.problems, before.problems);
    let after = check(sim);
    assert!(
        after.is_clean(),
        "{what}: after repair {:?}",
        after.problems
    );
    let text = rep
        .fixes
        .iter()
        .map(|f| f.what.clone())
        .collect::<Vec<_>>()
        .join("\n");
    // A second repair finds nothing to do.
    let again = repair(sim).unwrap();
    assert!(again.fixes.is_empty(), "{what}: again {:?}", again.fixes);
    (rep, text)
}

fn mount(sim: &CrashSim) -> Fs<&CrashSim> {
    Fs::mount(sim, &MountOptions::default()).unwrap().0
}

/// The files the damage did not touch.
fn intact_k(fs: &Fs<&CrashSim>) {
    let k = fs.lookup(ROOT, b"k").unwrap();
    assert_eq!(fs.read(k.ino, 0, 100).unwrap(), b"keep me");
}

fn intact_f(fs: &Fs<&CrashSim>) {
    let d = fs.lookup(ROOT, b"d").unwrap();
    let f = fs.lookup(d.ino, b"f").unwrap();
    assert_eq!(fs.read(f.ino, 0, 10_000).unwrap(), F_DATA);
    assert_eq!(fs.readlink(5).unwrap(), b"d/f");
}

/// A file system of another format version (version 1 kept atime where version 2 keeps the
/// append's tail record) is refused by mount, named by check and left alone by repair: none
/// of them may read its inodes with this layout.
#[test]
fn another_format_version_is_refused_not_repaired() {
    let (sim, _) = image();
    for off in offs(&sim) {
        let mut b = [0u8; SB_LEN];
        sim.read(off, &mut b);
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        sim.write(off, &b);
    }
    let before = sim.image();
    let Err(err) = Fs::mount(&sim, &MountOptions::default()) else {
        panic!("a version-1 file system mounted");
    };
    assert!(
        matches!(
            err,
            Error::Version {
                found: 1,
                reads: pmkit_fs::layout::VERSION
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("format version 1"), "{err}");
    let rep = check(&sim);
    assert!(
        rep.problems.iter().any(|p| p.contains("format version 1")),
        "{rep:?}"
    );
    assert!(matches!(repair(&sim), Err(Error::Version { .. })));
    assert!(
        sim.image() == before,
        "something wrote to a version-1 file system"
    );
}

#[test]
fn one_bad_superblock_is_rewritten() {
    let (sim, _) = image();
    sim.write(offs(&sim)[1] + 60, &[1, 2, 3, 4]);
    let rep = repair(&sim).unwrap();
    assert!(rep.is_clean(), "{rep:?}");
    assert!(
        rep.fixes[0]
            .what
            .contains("superblock B (checksum mismatch): rewritten from superblock A"),
        "{rep:?}"
    );
    assert_eq!(rep.fixes[0].offset, Some(offs(&sim)[1] as u64));
    assert!(check(&sim).notes.is_empty());
}

#[test]
fn both_superblocks_bad_are_rebuilt_for_the_mkfs_geometry() {
    let (sim, _) = image();
    sim.write(offs(&sim)[0] + 20, &[0xff]);
    sim.write(offs(&sim)[1], &[0u8; 8]);
    let (_, text) = repaired(&sim, "superblocks");
    assert!(text.contains("both superblocks were bad"), "{text}");
    let v = pmkit_fs::superblock(&sim).unwrap().geo.version();
    // format 8: f's tree node holds pointer words with their checks, and files may share
    assert_eq!(v, 8, "f's tree node holds pointer words with their checks");
    let fs = mount(&sim);
    intact_f(&fs);
    intact_k(&fs);
}

#[test]
fn both_superblocks_bad_on_a_pool_with_data_checksums_are_rebuilt_as_format_8() {
    let (sim, _) = image();
    {
        let fs = mount(&sim);
        fs.set_sums(3, true).unwrap();
        fs.unmount();
    }
    sim.write(offs(&sim)[0] + 20, &[0xff]);
    sim.write(offs(&sim)[1], &[0u8; 8]);
    let (_, text) = repaired(&sim, "superblocks");
    assert!(text.contains("both superblocks were bad"), "{text}");
    let v = pmkit_fs::superblock(&sim).unwrap().geo.version();
    assert_eq!(v, 8, "a format 8 pool with data checksums");
    let fs = mount(&sim);
    assert_eq!(fs.sums(3).unwrap(), Some(true));
    intact_f(&fs);
    intact_k(&fs);
}

#[test]
fn both_superblocks_bad_with_an_unusual_geometry_needs_the_numbers() {
    let o = MkfsOptions {
        inodes: 48,
        lanes: 3,
        lane_entries: 80,
    };
    let (sim, _) = image_with(&o);
    sim.write(offs(&sim)[0], &[0u8; SB_LEN]);
    sim.write(offs(&sim)[1], &[0u8; SB_LEN]);
    let img = sim.image();
    let rep = repair(&sim).unwrap();
    assert!(!rep.is_clean());
    assert!(rep.fixes.is_empty(), "{rep:?}");
    assert!(
        rep.unfixed[0].contains("--geometry LANES,ENTRIES,INODES"),
        "{rep:?}"
    );
    assert!(sim.image() == img, "a refused repair changed the media");
    // wrong numbers are refused too
    let wrong = RepairOptions {
        geometry: Some(GeometryHint {
            lanes: 2,
            lane_entries: 80,
            inodes: 48,
        }),
    };
    assert!(!repair_with(&sim, &wrong).unwrap().is_clean());
    assert!(sim.image() == img, "a refused repair changed the media");
    // the root is where these put it, but the tree does not fit the inode count: too few
    // (records name inodes past the table) or too many (data blocks inside the table)
    for inodes in [4, 100] {
        let wrong = RepairOptions {
            geometry: Some(GeometryHint {
                lanes: 3,
                lane_entries: 80,
                inodes,
            }),
        };
        let rep = repair_with(&sim, &wrong).unwrap();
        assert!(
            rep.unfixed
                .first()
                .is_some_and(|u| u.contains("does not fit")),
            "{inodes}: {rep:?}"
        );
        assert!(sim.image() == img, "a refused repair changed the media");
    }
    let right = RepairOptions {
        geometry: Some(GeometryHint {
            lanes: 3,
            lane_entries: 80,
            inodes: 48,
        }),
    };
    let rep = repair_with(&sim, &right).unwrap();
    assert!(rep.is_clean(), "{rep:?}");
    let fs = mount(&sim);
    intact_f(&fs);
    intact_k(&fs);
}

#[test]
fn journal_full_of_garbage_is_reset() {
    let (sim, sb) = image();
    let lane = sb.geo.lane_off(0);
    let w = word(&sim, lane);
    let (gen, head) = (w >> 32, w as u32 as usize);
    for i in 0..3 {
        let mut e = [0xa5u8; LINE];
        e[0..8].copy_from_slice(&0u64.to_le_bytes());
        e[56..64].copy_from_slice(&(gen << 32 | 200 << 8 | 1).to_le_bytes());
        sim.write(lane + LINE * (1 + head + i), &e);
    }
    let (rep, text) = repaired(&sim, "journal");
    assert!(
        text.contains(&format!(
            "journal lane 0: garbage (entry {head}: length 200): 3 entries dropped"
        )),
        "{text}"
    );
    // The first fix forgets the clean-unmount checkpoint; the lane's is next.
    assert!(rep.fixes[0].what.contains("checkpoint cleared"), "{text}");
    assert_eq!(rep.fixes[1].offset, Some(lane as u64));
    let fs = mount(&sim);
    intact_f(&fs);
    intact_k(&fs);
}

/// A lane header whose generation went back (found by the fs_repair fuzz target): entries of a
/// later generation are stale, and a later transaction's head walking into them would roll
/// back an old operation. `check` names it, mount refuses it, repair resets the lane.
#[test]
fn a_lane_generation_that_went_back_is_reset() {
    let (sim, sb) = image();
    let lanes: Vec<usize> = (0..sb.geo.lanes).map(|l| sb.geo.lane_off(l)).collect();
    let (l, lane) = lanes
        .iter()
        .enumerate()
        .find(|(_, &o)| word(&sim, o + LINE + 56) >> 32 > 1)
        .map(|(l, &o)| (l, o))
        .expect("a lane the workload used");
    let gen = word(&sim, lane + LINE + 56) >> 32;
    set_word(&sim, lane, (gen - 1) << 32);
    assert!(
        check(&sim).problems[0].contains(&format!(
            "journal lane {l}: entries of generation {gen}, ahead of its header's {}",
            gen - 1
        )),
        "{:?}",
        check(&sim).problems
    );
    let (_, text) = repaired(&sim, "generation went back");
    let want = format!(
        "journal lane {l}: garbage (entries of generation up to {gen}, ahead of the header's {}",
        gen - 1
    );
    assert!(text.contains(&want), "{text}");
    // operations after it leave a clean file system
    let fs = mount(&sim);
    for i in 0..20u32 {
        fs.mkdir(ROOT, format!("n{i}").as_bytes(), 0o755).unwrap();
        assert!(
            check(&sim).is_clean(),
            "after {i}: {:?}",
            check(&sim).problems
        );
    }
    intact_f(&fs);
}

#[test]
fn a_pointer_out_of_range_is_cut_to_a_hole() {
    let (sim, sb) = image();
    let node = word(&sim, sb.geo.inode_off(3) + 16);
    // f's second data block pointer points past the media
    let at = node as usize * BLOCK + 8;
    set_word(&sim, at, pmkit_fs::seal_pointer(sb.geo.blocks + 7, at));
    let (rep, text) = repaired(&sim, "pointer");
    assert!(text.contains("outside the data area: cut"), "{text}");
    let f = rep
        .fixes
        .iter()
        .find(|f| f.what.contains("outside"))
        .unwrap();
    assert_eq!(
        (f.ino, f.offset),
        (Some(3), Some((node as usize * BLOCK + 8) as u64))
    );
    let fs = mount(&sim);
    let data = fs.read(3, 0, 10_000).unwrap();
    assert_eq!(data.len(), 6000, "the file keeps its size");
    assert_eq!(&data[..BLOCK], &F_DATA[..BLOCK], "and its first block");
    assert!(
        data[BLOCK..].iter().all(|&b| b == 0),
        "the cut range is a hole"
    );
    intact_k(&fs);
}

#[test]
fn a_loop_is_cut() {
    let (sim, sb) = image();
    let node = word(&sim, sb.geo.inode_off(3) + 16);
    let at = node as usize * BLOCK + 8;
    set_word(&sim, at, pmkit_fs::seal_pointer(node, at));
    let (_, text) = repaired(&sim, "loop");
    assert!(
        text.contains(&format!("pointer to block {node} owned twice")),
        "{text}"
    );
    let fs = mount(&sim);
    let data = fs.read(3, 0, 10_000).unwrap();
    assert_eq!(&data[..BLOCK], &F_DATA[..BLOCK]);
    assert!(data[BLOCK..].iter().all(|&b| b == 0));
    intact_k(&fs);
}

#[test]
fn a_doubly_owned_block_stays_with_its_first_owner() {
    let (sim, sb) = image();
    // g (after f in d, so walked second) claims f's tree node as its data
    let first = point_g_at_fs_node(&sim, &sb);
    let (rep, text) = repaired(&sim, "shared block");
    let f = rep
        .fixes
        .iter()
        .find(|f| f.what.contains("owned twice"))
        .unwrap();
    assert_eq!((f.ino, f.block), (Some(4), Some(first)), "{text}");
    let fs = mount(&sim);
    intact_f(&fs);
    assert_eq!(
        fs.read(4, 0, 10_000).unwrap(),
        vec![0u8; 4096],
        "g lost it: a hole"
    );
    intact_k(&fs);
}

#[test]
fn records_naming_free_or_out_of_range_inodes_are_removed() {
    let (sim, sb) = image();
    sim.write(sb.geo.inode_off(4), &[0u8; INODE]); // g freed behind d's back
    let root_block = word(&sim, sb.geo.inode_off(ROOT) + 16);
    put_record(&sim, root_block, 20, b"far", 999, 1);
    let (_, text) = repaired(&sim, "records");
    assert!(text.contains("entry \"g\" names free inode 4"), "{text}");
    assert!(
        text.contains("entry \"far\" names inode 999 out of range"),
        "{text}"
    );
    let fs = mount(&sim);
    let d = fs.lookup(ROOT, b"d").unwrap();
    assert!(matches!(fs.lookup(d.ino, b"g"), Err(Error::NotFound)));
    intact_f(&fs);
    intact_k(&fs);
}

#[test]
fn a_directory_reachable_twice_keeps_its_first_link() {
    let (sim, sb) = image();
    let root_block = word(&sim, sb.geo.inode_off(ROOT) + 16);
    put_record(&sim, root_block, 30, b"again", 2, 2);
    let (_, text) = repaired(&sim, "reachable twice");
    assert!(
        text.contains("entry \"again\" names directory 2, reachable twice"),
        "{text}"
    );
    let fs = mount(&sim);
    assert!(fs.lookup(ROOT, b"d").is_ok());
    assert!(matches!(fs.lookup(ROOT, b"again"), Err(Error::NotFound)));
    intact_f(&fs);
}

#[test]
fn wrong_link_counts_are_set() {
    let (sim, sb) = image();
    sim.write(sb.geo.inode_off(3) + 40, &7u32.to_le_bytes());
    sim.write(sb.geo.inode_off(ROOT) + 40, &9u32.to_le_bytes());
    reseal(&sim, &[3, ROOT]);
    let (_, text) = repaired(&sim, "links");
    assert!(
        text.contains("inode 3: link count 7 but 1 names: set to 1"),
        "{text}"
    );
    assert!(
        text.contains("inode 1: link count 9 but 3 names: set to 3"),
        "{text}"
    );
    let fs = mount(&sim);
    assert_eq!(fs.getattr(3).unwrap().links, 1);
    intact_f(&fs);
}

#[test]
fn lost_inodes_go_to_lost_and_found() {
    let (sim, sb) = image();
    // a copy of k's inode in a free slot: in use, nothing names it (its block stays k's)
    let mut node = [0u8; INODE];
    sim.read(sb.geo.inode_off(4), &mut node);
    sim.write(sb.geo.inode_off(20), &node);
    // and d's record removed from the root: the directory and everything in it is lost
    let root_block = word(&sim, sb.geo.inode_off(ROOT) + 16);
    assert_eq!(
        word(&sim, root_block as usize * BLOCK),
        2,
        "d is the first record"
    );
    set_word(&sim, root_block as usize * BLOCK, 0);
    reseal(&sim, &[20]);
    let (rep, text) = repaired(&sim, "lost");
    eprintln!("{text}");
    assert!(text.contains("created /lost+found"), "{text}");
    assert!(
        text.contains("inode 2 (Dir) was in use but nothing named it: linked as /lost+found/#2"),
        "{text}"
    );
    assert!(
        text.contains("inode 20 (File) was in use but nothing named it: linked as /lost+found/#20"),
        "{text}"
    );
    assert!(rep.fixes.iter().any(|f| f.ino == Some(20)));
    let fs = mount(&sim);
    let lf = fs.lookup(ROOT, b"lost+found").unwrap();
    let d = fs.lookup(lf.ino, b"#2").unwrap();
    assert_eq!(d.ino, 2);
    assert_eq!(fs.lookup(lf.ino, b"#20").unwrap().ino, 20);
    let f = fs.lookup(d.ino, b"f").unwrap();
    assert_eq!(
        fs.read(f.ino, 0, 10_000).unwrap(),
        F_DATA,
        "the lost subtree is whole"
    );
    assert_eq!(fs.getattr(lf.ino).unwrap().links, 3);
    intact_k(&fs);
    // lost+found is reused the next time
    fs.unmount();
    let mut node = [0u8; INODE];
    sim.read(sb.geo.inode_off(6), &mut node);
    node[16..24].fill(0); // no data: k keeps its block
    node[0..8].fill(0);
    sim.write(sb.geo.inode_off(21), &node);
    reseal(&sim, &[21]);
    let (_, text) = repaired(&sim, "lost again");
    assert!(!text.contains("created"), "{text}");
    assert!(text.contains("linked as /lost+found/#21"), "{text}");
}

#[test]
fn many_kinds_of_damage_at_once() {
    let (sim, sb) = image();
    sim.write(offs(&sim)[0] + 20, &[0xff]);
    sim.write(sb.geo.inode_off(3) + 40, &7u32.to_le_bytes());
    sim.write(sb.geo.inode_off(4), &[0u8; INODE]);
    let node = word(&sim, sb.geo.inode_off(3) + 16);
    set_word(&sim, node as usize * BLOCK + 8, node);
    let mut k = [0u8; INODE];
    sim.read(sb.geo.inode_off(6), &mut k);
    k[16..24].fill(0);
    sim.write(sb.geo.inode_off(25), &k);
    sim.write(sb.geo.inode_off(5) + 96, &0x801u32.to_le_bytes()); // rdev on the symlink
    reseal(&sim, &[3, 25, 5]);
    let (rep, _) = repaired(&sim, "many");
    assert!(rep.fixes.len() >= 6, "{:#?}", rep.fixes);
    let fs = mount(&sim);
    intact_k(&fs);
    assert_eq!(fs.readlink(5).unwrap(), b"d/f");
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Random bytes changed in the metadata that is in use (superblocks, lane headers and the first
/// entries, the used inode slots, the directory blocks and the tree node): repair never panics,
/// and leaves either a clean file system that mounts and works or a list of what it could not
/// fix, which is exactly what `check` still finds.
#[test]
fn random_damage_is_repaired_or_reported() {
    let (sim, sb) = image();
    let base = sim.image();
    let g = sb.geo;
    let ptr = |ino: u64| word(&sim, g.inode_off(ino) + 16) as usize * BLOCK;
    let mut areas = vec![(offs(&sim)[0], SB_LEN), (offs(&sim)[1], SB_LEN)];
    for l in 0..g.lanes {
        areas.push((g.lane_off(l), 4 * LINE));
    }
    areas.push((g.inode_off(0), 8 * INODE));
    areas.push((ptr(ROOT), 4 * 64)); // root's records
    areas.push((ptr(2), 2 * 64)); // d's records
    areas.push((ptr(3), 16)); // f's tree node
    let (mut damaged, mut clean, mut left) = (0, 0, 0);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for round in 0..600 {
        let mut img = base.clone();
        for _ in 0..1 + round % 6 {
            let (off, len) = areas[xorshift(&mut x) as usize % areas.len()];
            let at = off + xorshift(&mut x) as usize % len;
            img[at] ^= 1 << (xorshift(&mut x) % 8);
        }
        let m = CrashSim::from_image(img);
        let rep = repair(&m).unwrap();
        damaged += !rep.problems.is_empty() as u32;
        if rep.is_clean() {
            clean += 1;
            assert!(check(&m).is_clean(), "round {round}");
            let (fs, _) = Fs::mount(&m, &MountOptions::default())
                .unwrap_or_else(|e| panic!("round {round}: clean after repair, mount: {e}"));
            for e in fs.readdir(ROOT).unwrap() {
                let _ = fs.read(e.ino, 0, 1 << 16);
                let _ = fs.readdir(e.ino);
            }
            // it works: a file can be made and written
            let n = fs.create(ROOT, b"after-repair", 0o644).unwrap();
            fs.write(n.ino, 0, b"x").unwrap();
            fs.unmount();
            assert!(check(&m).is_clean(), "round {round}: after use");
        } else {
            left += 1;
            let after = check(&m);
            assert!(!after.is_clean(), "round {round}: {rep:?}");
            assert!(
                after.problems.iter().all(|p| rep.unfixed.contains(p))
                    || rep.unfixed[0].contains("--geometry"),
                "round {round}: {rep:?}"
            );
        }
    }
    eprintln!(
        "random damage: {damaged} of 600 images damaged; {clean} repaired clean, {left} with \
         problems left"
    );
    assert!(damaged >= 300, "the damage missed: {damaged}");
    assert!(clean >= 540, "only {clean} of 600 repaired clean");
}

/// Heavier: random bytes (not bit flips) anywhere in the first blocks, up to 40 at once.
/// Never a panic; clean after repair means mount works.
#[test]
fn random_bytes_anywhere_never_panic() {
    let (sim, sb) = image();
    let base = sim.image();
    let span = (sb.geo.data_block as usize + 8) * BLOCK;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut clean = 0;
    for round in 0..1000 {
        let mut img = base.clone();
        for _ in 0..1 + round % 40 {
            let at = xorshift(&mut x) as usize % span;
            img[at] = xorshift(&mut x) as u8;
        }
        let m = CrashSim::from_image(img);
        let rep = repair(&m).unwrap();
        if rep.is_clean() {
            clean += 1;
            let (fs, _) = Fs::mount(&m, &MountOptions::default())
                .unwrap_or_else(|e| panic!("round {round}: clean after repair, mount: {e}"));
            fs.unmount();
        } else {
            assert!(!check(&m).is_clean(), "round {round}");
        }
    }
    eprintln!("random bytes anywhere: {clean} of 1000 repaired clean");
    assert!(clean >= 900, "only {clean} of 1000 repaired clean");
}

/// A crash at every fence of a repair that makes lost+found, links a lost directory and a
/// lost file into it and sets link counts: every crash image repairs clean, and then mounts
/// with the lost inodes in lost+found and the other files whole.
#[test]
fn a_crash_at_every_fence_of_a_repair() {
    let (sim, sb) = image();
    let mut k = [0u8; INODE];
    sim.read(sb.geo.inode_off(6), &mut k);
    k[16..24].fill(0);
    k[0..8].fill(0);
    sim.write(sb.geo.inode_off(20), &k);
    let root_block = word(&sim, sb.geo.inode_off(ROOT) + 16);
    set_word(&sim, root_block as usize * BLOCK, 0);
    sim.write(sb.geo.inode_off(6) + 40, &4u32.to_le_bytes());
    reseal(&sim, &[20, 6]);
    let opts = CrashOpts {
        k: 6,
        random_images: 16,
        ..Default::default()
    };
    let rep = check_every_fence_from(
        sim.image(),
        &opts,
        |s| {
            let rep = repair(&**s).unwrap();
            assert!(rep.is_clean(), "{rep:?}");
        },
        |s| {
            let rep = repair(&**s).map_err(|e| e.to_string())?;
            if !rep.is_clean() {
                return Err(format!("repair after a crash left {:?}", rep.unfixed));
            }
            let (fs, _) = Fs::mount(&**s, &MountOptions::default()).map_err(|e| e.to_string())?;
            let lf = fs.lookup(ROOT, b"lost+found").map_err(|e| e.to_string())?;
            let d = fs.lookup(lf.ino, b"#2").map_err(|e| format!("#2: {e}"))?;
            fs.lookup(lf.ino, b"#20").map_err(|e| format!("#20: {e}"))?;
            let f = fs.lookup(d.ino, b"f").map_err(|e| e.to_string())?;
            if fs.read(f.ino, 0, 10_000).map_err(|e| e.to_string())? != F_DATA {
                return Err("f changed".into());
            }
            if fs.getattr(6).map_err(|e| e.to_string())?.links != 1 {
                return Err("k's link count".into());
            }
            Ok(())
        },
    );
    eprintln!("{rep}");
    assert!(rep.fences > 10, "{rep}");
    assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
}

/// A crash at every fence of a repair made of ordered stores (a superblock copy rewritten, a
/// garbage lane reset) and transactions (a loop cut, a record removed, a link count set), with
/// stores whole and torn into 8-byte words: every crash image repairs clean and mounts, with the
/// undamaged files whole.
#[test]
fn a_crash_at_every_fence_of_ordered_stores_and_cuts() {
    let (sim, sb) = image();
    sim.write(offs(&sim)[1] + 60, &[1, 2, 3, 4]);
    let lane = sb.geo.lane_off(1);
    let w = word(&sim, lane);
    let (gen, head) = (w >> 32, w as u32 as usize);
    let mut e = [0x5au8; LINE];
    e[56..64].copy_from_slice(&(gen << 32 | 9 << 8 | 7).to_le_bytes()); // kind 7: garbage
    sim.write(lane + LINE * (1 + head), &e);
    let node = word(&sim, sb.geo.inode_off(3) + 16);
    set_word(&sim, node as usize * BLOCK + 8, node);
    sim.write(sb.geo.inode_off(4), &[0u8; INODE]);
    sim.write(sb.geo.inode_off(6) + 40, &3u32.to_le_bytes());
    reseal(&sim, &[6]);
    for word_stores in [false, true] {
        let opts = CrashOpts {
            k: 6,
            random_images: 16,
            word_stores,
            ..Default::default()
        };
        let rep = check_every_fence_from(
            sim.image(),
            &opts,
            |s| {
                let rep = repair(&**s).unwrap();
                assert!(rep.is_clean(), "{rep:?}");
                assert!(rep.fixes.len() >= 5, "{:?}", rep.fixes);
            },
            |s| {
                let rep = repair(&**s).map_err(|e| e.to_string())?;
                if !rep.is_clean() {
                    return Err(format!("repair after a crash left {:?}", rep.unfixed));
                }
                let (fs, _) =
                    Fs::mount(&**s, &MountOptions::default()).map_err(|e| e.to_string())?;
                let k = fs.lookup(ROOT, b"k").map_err(|e| e.to_string())?;
                if fs.read(k.ino, 0, 100).map_err(|e| e.to_string())? != b"keep me" {
                    return Err("k changed".into());
                }
                let d = fs.lookup(ROOT, b"d").map_err(|e| e.to_string())?;
                let f = fs.lookup(d.ino, b"f").map_err(|e| e.to_string())?;
                let data = fs.read(f.ino, 0, 10_000).map_err(|e| e.to_string())?;
                if data[..BLOCK] != F_DATA[..BLOCK] || data.len() != F_DATA.len() {
                    return Err("f's first block or size changed".into());
                }
                Ok(())
            },
        );
        eprintln!("{rep}");
        assert!(rep.fences > 10, "{rep}");
        assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
    }
}

/// Repair of a clean pool of every kind of thing the file system makes (a file under a tree of
/// height 3, 3 MiB of it written, xattrs, hard links, special files, symlinks, an unlinked open file on the orphan
/// list, nested directories, both data modes) makes no fix. Its scan keeps the walk's rules:
/// where they part (a new on-media feature the scan does not know), this fails first.
#[test]
fn a_clean_pool_of_every_kind_gets_no_fix() {
    use pmkit_fs::{DataMode, XattrFlags};
    for data in [DataMode::InPlace, DataMode::Atomic] {
        let sim = CrashSim::new(16 << 20);
        Fs::mkfs(&sim, &MkfsOptions::default()).unwrap();
        let mo = MountOptions {
            data,
            ..Default::default()
        };
        let (fs, _) = Fs::mount(&sim, &mo).unwrap();
        let d = fs.mkdir(ROOT, b"d", 0o755).unwrap();
        let e = fs.mkdir(d.ino, b"e", 0o700).unwrap();
        let big = fs.create(e.ino, b"big", 0o644).unwrap();
        for i in 0..12u64 {
            fs.write(big.ino, i * (1 << 18) + 7, &vec![i as u8 + 1; 1 << 18])
                .unwrap();
        }
        fs.write(big.ino, 3 << 30, b"sparse tail far away").unwrap();
        // 2 MiB blocks (a huge pointer at height 1 and in a height-2 node) and the per-file
        // atomic flag: valid media the scan must leave alone.
        let huge = fs.create(ROOT, b"huge", 0o644).unwrap();
        fs.fallocate(huge.ino, 0, 4 << 20).unwrap();
        let flagged = fs.create(ROOT, b"flagged", 0o644).unwrap();
        fs.set_atomic(flagged.ino, data == DataMode::InPlace)
            .unwrap();
        fs.write(flagged.ino, 0, b"atomic or not").unwrap();
        // blocks preallocated past the end of a file (appends of an in-place file)
        let pre = fs.create(ROOT, b"prealloc", 0o644).unwrap();
        fs.set_atomic(pre.ino, false).unwrap();
        fs.write(pre.ino, 0, &[3u8; 5000]).unwrap();
        fs.write(pre.ino, 5000, &[4u8; 4000]).unwrap(); // needs block 2: the window starts
        let a = fs.getattr(pre.ino).unwrap();
        assert!(
            a.blocks > a.size.div_ceil(4096) + 1,
            "no preallocation: {a:?}"
        );
        fs.setxattr(big.ino, b"user.a", b"1", XattrFlags::Either)
            .unwrap();
        fs.link(big.ino, ROOT, b"big-link").unwrap();
        fs.symlink(d.ino, b"s", b"e/big").unwrap();
        fs.mknod(ROOT, b"fifo", 0o010644, 0).unwrap();
        fs.mknod(ROOT, b"chr", 0o020644, 0x0801).unwrap();
        let o = fs.create(ROOT, b"open", 0o644).unwrap();
        fs.write(o.ino, 0, b"unlinked but open").unwrap();
        fs.open(o.ino).unwrap();
        fs.unlink(ROOT, b"open").unwrap();
        for i in 0..80u32 {
            fs.create(
                d.ino,
                format!("many-{i:03}-a-long-enough-name-for-two-slots-xxxxxxxxxxxxxx").as_bytes(),
                0o600,
            )
            .unwrap();
        }
        // the orphan stays on the list: no unmount
        let img = sim.image();
        let m = CrashSim::from_image(img);
        let c = check(&m);
        assert!(c.is_clean() && c.orphans == 1, "{c:?}");
        let rep = repair(&m).unwrap();
        assert!(
            rep.is_clean() && rep.fixes.is_empty(),
            "{data:?}: {:?}",
            rep.fixes
        );
        drop(fs);
    }
}

/// A block two files share, on a pool mounted from its clean-unmount checkpoint (which checks
/// each file on first use, not blocks across files): with both files checked while each
/// looked whole, removing the first frees the block, and removing the second is refused as
/// damage (EIO, naming the block and the repair), where
/// it used to free the block twice (a panic in the allocator). Found by the fs_image fuzz target.
#[test]
fn a_shared_block_is_not_freed_twice_by_a_lazily_checked_mount() {
    let (sim, sb) = image();
    let first = share_fs_first_block(&sim, &sb);
    let fs = mount(&sim);
    // g checked on first use while f still owns the block too: each alone looks whole.
    assert_eq!(fs.getattr(4).unwrap().size, 4096);
    fs.unlink(2, b"f").unwrap();
    let e = fs.unlink(2, b"g").unwrap_err();
    assert_eq!(e.errno(), libc::EIO);
    let text = e.to_string();
    assert!(
        text.contains(&format!("block {first} would be freed twice")) && text.contains("--repair"),
        "{text}"
    );
    assert!(fs.lookup(2, b"g").is_ok(), "nothing changed");
    intact_k(&fs);
}

/// Flags check refuses (unknown bits; any flag on a directory) are cleared by repair, where the
/// walk that refuses them lives: mount and repair agree on every problem.
#[test]
fn unknown_inode_flags_are_cleared() {
    let (sim, sb) = image();
    sim.write(sb.geo.inode_off(3) + 26, &[0x80 | 1]); // f: an unknown bit beside atomic
    sim.write(sb.geo.inode_off(2) + 26, &[1]); // d: the atomic flag on a directory
    reseal(&sim, &[3, 2]);
    let (rep, text) = repaired(&sim, "flags");
    assert!(
        text.contains("inode 3: flags 0x81 on kind 1: set to 0x1"),
        "{text}"
    );
    assert!(
        text.contains("inode 2: flags 0x1 on kind 2: set to 0x0"),
        "{text}"
    );
    assert_eq!(
        rep.fixes
            .iter()
            .filter(|f| f.what.contains("flags"))
            .count(),
        2,
        "{text}"
    );
    let fs = mount(&sim);
    intact_f(&fs);
    intact_k(&fs);
}
