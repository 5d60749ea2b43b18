//! Bad media: `check` names each problem, `mount` refuses with a clear error, nothing panics.

use pmkit_fs::layout::{Superblock, BLOCK, INODE, LINE, SB_LEN};
use pmkit_fs::{check, Error, Fs, MkfsOptions, MountOptions, ROOT};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Media;

mod older;

/// Where this pool's two superblock copies are (its format's layout).
fn offs(sim: &CrashSim) -> [usize; 2] {
    pmkit_fs::superblock(sim).unwrap().geo.sb_offs()
}

const LEN: usize = 256 << 10;

/// A small tree: /d (dir) holding f (two blocks), g; /s symlink.
fn image() -> (CrashSim, Superblock) {
    let sim = CrashSim::new(LEN);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap();
    let f = fs.create(d.ino, b"f", 0o644).unwrap();
    fs.write(f.ino, 0, &[5u8; 6000]).unwrap();
    fs.create(d.ino, b"g", 0o644).unwrap();
    fs.symlink(ROOT, b"s", b"d/f").unwrap();
    fs.unmount();
    let mut b = [0u8; SB_LEN];
    sim.read(0, &mut b);
    let sb = Superblock::decode(&b, LEN).unwrap();
    assert!(check(&sim).is_clean());
    (sim, sb)
}

fn inode_word(sim: &CrashSim, sb: &Superblock, ino: u64, field: usize) -> u64 {
    let mut b = [0u8; 8];
    sim.read(sb.geo.inode_off(ino) + field, &mut b);
    u64::from_le_bytes(b)
}

fn set_word(sim: &CrashSim, off: usize, v: u64) {
    sim.write(off, &v.to_le_bytes());
}

/// Store the checksums of inodes whose fields a test changed: damage a bug would store, which
/// the checks after the checksum's must catch.
fn reseal(sim: &CrashSim, inos: &[u64]) {
    for &i in inos {
        pmkit_fs::reseal_inode(sim, i).unwrap();
    }
}

/// Every name, attribute, link and byte reachable from the root, errors ignored (damage may
/// only show when used): what must never panic.
fn touch_everything<M: pmkit_media::Media>(fs: &Fs<M>, dir: u64, depth: usize) {
    for e in fs.readdir(dir).unwrap_or_default() {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let _ = fs.lookup(dir, &e.name);
        let _ = fs.getattr(e.ino);
        let _ = fs.read(e.ino, 0, 1 << 16);
        let _ = fs.readlink(e.ino);
        let _ = fs.listxattr(e.ino);
        if depth < 8 {
            touch_everything(fs, e.ino, depth + 1);
        }
    }
}

/// The image was unmounted clean, so a default mount loads the checkpoint and finds the damage
/// only where it is used (never panicking); `check` and a mount that walks refuse it. Damage the
/// lazy mount met answers EIO, says so accurately, and leaves the pool unclean: the next
/// default mount walks and refuses it too.
fn refused(sim: CrashSim, what: &str) -> String {
    let rep = check(&sim);
    assert!(!rep.is_clean(), "{what}: check found nothing");
    let text = rep.problems.join("\n");
    if let Ok((fs, rec)) = Fs::mount(CrashSim::from_image(sim.image()), &MountOptions::default()) {
        assert!(rec.from_checkpoint, "{what}: {rec:?}");
        touch_everything(&fs, ROOT, 0);
        let met = fs.damage_found();
        for line in &met {
            assert!(!line.contains("mount refused"), "{what}: {line}");
        }
        let lazy = CrashSim::from_image(fs.unmount().image());
        if !met.is_empty() {
            match Fs::mount(lazy, &MountOptions::default()) {
                Err(e @ Error::Damaged { .. }) => assert_eq!(e.errno(), 5),
                other => panic!("{what}: after damage met in use, a mount gave {other:?}"),
            }
        }
    }
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    match Fs::mount(sim, &walk) {
        Err(e @ (Error::Damaged { .. } | Error::NotFs(_))) => assert!(e.errno() == 5),
        other => panic!("{what}: mount gave {other:?}"),
    }
    text
}

#[test]
fn both_superblocks_corrupt() {
    let (sim, _) = image();
    sim.write(offs(&sim)[0] + 20, &[0xff]);
    let rep = check(&sim);
    assert!(rep.is_clean(), "one bad copy is repaired by mount: {rep:?}");
    assert!(
        rep.notes
            .iter()
            .any(|n| n.contains("superblock A: checksum")),
        "{rep:?}"
    );
    sim.write(offs(&sim)[1], &[0u8; 8]);
    let text = refused(sim, "superblocks");
    assert!(
        text.contains("both superblocks are bad") && text.contains("bad magic"),
        "{text}"
    );
}

#[test]
fn one_bad_superblock_is_rewritten_by_mount() {
    let (sim, _) = image();
    sim.write(offs(&sim)[1] + 60, &[1, 2, 3, 4]);
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(rec.superblock_repaired);
    fs.unmount();
    assert!(check(&sim).notes.is_empty());
}

#[test]
fn journal_full_of_garbage() {
    let (sim, sb) = image();
    let lane = sb.geo.lane_off(0);
    let mut b = [0u8; 8];
    sim.read(lane, &mut b);
    let word = u64::from_le_bytes(b);
    let (gen, head) = (word >> 32, word as u32 as usize);
    // at the lane's head, an entry with its generation but a target in the superblock and a
    // bad length
    let mut e = [0xa5u8; LINE];
    e[0..8].copy_from_slice(&0u64.to_le_bytes());
    e[56..64].copy_from_slice(&(gen << 32 | 200 << 8 | 1).to_le_bytes());
    sim.write(lane + LINE * (1 + head), &e);
    let text = refused(sim, "journal");
    assert!(
        text.contains(&format!("journal lane 0 entry {head}: garbage")),
        "{text}"
    );
}

#[test]
fn tree_pointer_out_of_range() {
    let (sim, sb) = image();
    // inode 3 is d/f (root 1, d 2, f 3): its root is a tree node; point it past the media
    assert_eq!(inode_word(&sim, &sb, 3, 24) as u8, 1, "height 1");
    set_word(&sim, sb.geo.inode_off(3) + 16, sb.geo.blocks + 7);
    // as a bug would store it: the inode's checksum matches (the media's damage is below)
    reseal(&sim, &[3]);
    let text = refused(sim, "pointer");
    assert!(text.contains("outside the data area"), "{text}");
}

#[test]
fn damage_met_in_use_is_eio_for_that_file_only_and_keeps_the_pool_unclean() {
    let (sim, sb) = image();
    set_word(&sim, sb.geo.inode_off(3) + 16, sb.geo.blocks + 7);
    reseal(&sim, &[3]);
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(rec.from_checkpoint, "{rec:?}");
    let d = fs.lookup(ROOT, b"d").unwrap().ino;
    let f = fs.lookup(d, b"f");
    let e = match f {
        Ok(a) => fs.read(a.ino, 0, 10).unwrap_err(),
        Err(e) => e,
    };
    assert!(
        matches!(e, Error::DamagedInode { ino: 3, .. }),
        "the damaged file answers with its own error: {e:?}"
    );
    assert_eq!(e.errno(), 5);
    let msg = e.to_string();
    assert!(
        !msg.contains("mount refused") && msg.contains("--repair"),
        "{msg}"
    );
    // The rest is served: its sibling, the symlink, the root.
    let g = fs.lookup(d, b"g").unwrap().ino;
    assert_eq!(fs.read(g, 0, 10).unwrap(), b"");
    assert_eq!(
        fs.readlink(fs.lookup(ROOT, b"s").unwrap().ino).unwrap(),
        b"d/f"
    );
    let met = fs.damage_found();
    assert_eq!(met.len(), 1, "{met:?}");
    assert!(met[0].starts_with("inode 3:"), "{met:?}");
    fs.unmount();
    // Not marked clean: the next default mount walks everything and refuses.
    match Fs::mount(&sim, &MountOptions::default()) {
        Err(Error::Damaged { problems }) => {
            assert!(
                problems.iter().any(|p| p.contains("outside the data area")),
                "{problems:?}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn tree_pointer_loop() {
    let (sim, sb) = image();
    let node = inode_word(&sim, &sb, 3, 16);
    // the node's second pointer points back at the node itself
    let at = node as usize * BLOCK + 8;
    set_word(&sim, at, pmkit_fs::seal_pointer(node, at));
    let text = refused(sim, "loop");
    assert!(text.contains("owned twice"), "{text}");
}

/// Format 8 lets files share data blocks (reflink), and only those: a file's data pointer to a
/// directory's block is still a block owned twice.
#[test]
fn a_data_pointer_to_a_directory_block_is_damage() {
    let (sim, sb) = image();
    assert!(sb.geo.shares());
    let node = inode_word(&sim, &sb, 3, 16);
    let dir_block = inode_word(&sim, &sb, 2, 16);
    assert!(sb.geo.is_data(dir_block), "d's block");
    let at = node as usize * BLOCK + 8;
    set_word(&sim, at, pmkit_fs::seal_pointer(dir_block, at));
    let text = refused(sim, "data pointer to a directory block");
    assert!(text.contains("owned twice"), "{text}");
}

#[test]
fn entry_naming_a_free_inode() {
    let (sim, sb) = image();
    // free inode 4 (d/g) behind the directory's back
    sim.write(sb.geo.inode_off(4), &[0u8; INODE]);
    let text = refused(sim, "free inode");
    assert!(text.contains("names free inode 4"), "{text}");
}

#[test]
fn wrong_link_count_and_unreachable_inode() {
    let (sim, sb) = image();
    sim.write(sb.geo.inode_off(3) + 40, &7u32.to_le_bytes());
    let mut orphan = [0u8; INODE];
    sim.read(sb.geo.inode_off(4), &mut orphan);
    sim.write(sb.geo.inode_off(20), &orphan);
    reseal(&sim, &[3, 20]);
    let text = refused(sim, "links");
    assert!(text.contains("inode 3: link count 7 but 1 names"), "{text}");
    assert!(
        text.contains("inode 20: in use but nothing names it"),
        "{text}"
    );
}

#[test]
fn random_bytes_never_panic() {
    let (sim, _) = image();
    let base = sim.image();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..300 {
        let mut img = base.clone();
        for _ in 0..1 + round % 16 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (x as usize) % (6 * BLOCK + (round % 2) * (LEN - 6 * BLOCK));
            img[at] = (x >> 40) as u8;
        }
        let m = CrashSim::from_image(img);
        let _ = check(&m);
        if let Ok((fs, _)) = Fs::mount(m, &MountOptions::default()) {
            touch_everything(&fs, ROOT, 0);
        }
    }
}

/// A transaction whose commit entry fills its lane to the last entry leaves head == entries:
/// a full lane, not garbage (found by the two-thread crash test).
#[test]
fn a_lane_filled_to_its_last_entry_is_valid() {
    let sim = CrashSim::new(LEN);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let f = fs.create(ROOT, b"f", 0o644).unwrap();
    for i in 0..100u32 {
        let s = pmkit_fs::SetAttr {
            mode: Some(i),
            ..Default::default()
        };
        fs.setattr(f.ino, &s).unwrap();
        let rep = check(&sim);
        assert!(rep.is_clean(), "after {i} changes: {:?}", rep.problems);
    }
}

#[test]
fn special_files_with_data_or_stray_device_numbers() {
    let sim = CrashSim::new(LEN);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let p = fs.mknod(ROOT, b"p", 0o010644, 0).unwrap();
    let f = fs.create(ROOT, b"f", 0o644).unwrap();
    fs.unmount();
    let mut b = [0u8; SB_LEN];
    sim.read(0, &mut b);
    let sb = Superblock::decode(&b, LEN).unwrap();
    assert!(check(&sim).is_clean());
    let clean = sim.image();
    set_word(&sim, sb.geo.inode_off(p.ino), 100); // size of a FIFO
    let text = refused(sim, "FIFO with a size");
    assert!(
        text.contains("special file (kind 4) with size 100"),
        "{text}"
    );
    let sim = CrashSim::from_image(clean);
    set_word(&sim, sb.geo.inode_off(f.ino) + 96, 0x0801); // rdev on a regular file
    reseal(&sim, &[f.ino]);
    let text = refused(sim, "device number on a file");
    assert!(text.contains("device number on a non-device"), "{text}");
}

/// When a mount loads the clean-unmount checkpoint and when it walks: after mkfs and every
/// clean unmount it loads; after a crash, with a stale or damaged record, or when asked, it
/// walks; repair of damage forgets the checkpoint.
#[test]
fn the_checkpoint_is_used_only_after_a_clean_unmount() {
    const REC: usize = 1024; // ckpt::REC_OFF: block 0, between the superblock copies
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    let sim = CrashSim::new(LEN);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    assert!(check(&sim).checkpoint.starts_with("matches"), "after mkfs");
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(rec.from_checkpoint, "{rec:?}");
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap();
    let f = fs.create(d.ino, b"f", 0o644).unwrap();
    fs.write(f.ino, 0, &[7u8; 9000]).unwrap();
    // A crash (the image as it is, mounted): the superblock is unclean, mount walks.
    let crashed = CrashSim::from_image(sim.image());
    let c = check(&crashed);
    assert!(c.is_clean() && c.checkpoint.contains("not clean"), "{c:?}");
    let (fs2, rec) = Fs::mount(&crashed, &MountOptions::default()).unwrap();
    assert!(!rec.was_clean && !rec.from_checkpoint, "{rec:?}");
    assert_eq!(fs2.read(f.ino, 0, 9000).unwrap(), vec![7u8; 9000]);
    fs2.unmount();
    // A clean unmount: the next mount loads, and finds the file through a lazily read index.
    fs.unmount();
    assert!(check(&sim).checkpoint.starts_with("matches"));
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(rec.from_checkpoint, "{rec:?}");
    let got = fs.lookup(d.ino, b"f").unwrap();
    assert_eq!((got.ino, got.size, got.blocks), (f.ino, 9000, 4)); // 3 data, 1 node
    fs.unmount();
    // Asked to walk: walks (and saves a new checkpoint at unmount).
    let (fs, rec) = Fs::mount(&sim, &walk).unwrap();
    assert!(rec.was_clean && !rec.from_checkpoint, "{rec:?}");
    fs.unmount();
    // A record of another generation, or a damaged one: walks.
    let mut line = [0u8; 64];
    sim.read(REC, &mut line);
    let mut stale = line;
    stale[8] ^= 1; // the generation (its CRC now fails too: either way, no checkpoint)
    sim.write(REC, &stale);
    let c = check(&sim);
    assert!(
        c.is_clean() && c.checkpoint.starts_with("not used"),
        "{c:?}"
    );
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(!rec.from_checkpoint, "{rec:?}");
    fs.unmount();
    // Contents that disagree with the tree (a used block saved as free): check names it,
    // repair forgets the checkpoint, and the next mount walks.
    sim.read(REC, &mut line);
    let first = u64::from_le_bytes(line[16..24].try_into().unwrap()) as usize;
    // The last used block (a data block: allocation starts after the metadata), saved as free.
    let words = first * BLOCK + 24; // the block bitmap, after the three-word header
    let nwords = sb_of(&sim).geo.blocks.div_ceil(64) as usize;
    let mut b = [0u8; 8];
    let at = (0..nwords)
        .rev()
        .map(|i| words + 8 * i)
        .find(|&at| {
            sim.read(at, &mut b);
            u64::from_le_bytes(b) != 0
        })
        .unwrap();
    sim.read(at, &mut b);
    let w = u64::from_le_bytes(b);
    sim.write(at, &(w & !(1 << (63 - w.leading_zeros()))).to_le_bytes());
    // (its CRC no longer holds: rewrite the record's contents CRC as unmount would)
    let mut contents = vec![0u8; u64::from_le_bytes(line[24..32].try_into().unwrap()) as usize];
    sim.read(first * BLOCK, &mut contents);
    line[32..36].copy_from_slice(&crc32c::crc32c(&contents).to_le_bytes());
    let crc = crc32c::crc32c(&line[..60]);
    line[60..64].copy_from_slice(&crc.to_le_bytes());
    sim.write(REC, &line);
    let c = check(&sim);
    assert!(
        !c.is_clean() && c.problems.iter().any(|p| p.contains("checkpoint")),
        "{c:?}"
    );
    let rep = pmkit_fs::repair(&sim).unwrap();
    assert!(rep.is_clean(), "{rep:?}");
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(!rec.from_checkpoint, "{rec:?}");
    fs.unmount();
}

fn sb_of(sim: &CrashSim) -> Superblock {
    let mut b = [0u8; SB_LEN];
    sim.read(offs(sim)[0], &mut b);
    Superblock::decode(&b, LEN).unwrap()
}

/// Format 3 keeps its second superblock copy in the pool's last block: a zeroed first page
/// (copy A and the checkpoint record) loses one copy, and mount rebuilds it from the other.
#[test]
fn a_zeroed_first_page_leaves_the_far_copy() {
    let (sim, sb) = image();
    assert!(sb.geo.far_copy(), "mkfs puts copy B far");
    assert_eq!(offs(&sim)[1], (sb.geo.blocks as usize - 1) * BLOCK);
    sim.write(0, &[0u8; BLOCK]);
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(rec.superblock_repaired && !rec.from_checkpoint, "{rec:?}");
    let d = fs.lookup(ROOT, b"d").unwrap().ino;
    let f = fs.lookup(d, b"f").unwrap().ino;
    assert_eq!(fs.read(f, 0, 6000).unwrap(), vec![5u8; 6000]);
    fs.unmount();
    let rep = check(&sim);
    assert!(rep.is_clean() && rep.notes.is_empty(), "{rep:?}");
}

/// A format 2 pool (both copies in block 0, the last block data) is read and written in its
/// own layout: its last block holds file data, and it stays format 2.
#[test]
fn a_format_2_pool_keeps_its_layout_and_its_last_block() {
    let (sim, sb) = image();
    let v2 = Superblock {
        geo: sb.geo.at_format(2),
        ..sb
    };
    assert_eq!(v2.geo.version(), 2);
    for off in v2.geo.sb_offs() {
        sim.write(off, &v2.encode());
    }
    // the meta inode's checksum as the older format keeps it (none: format 5 seals it)
    pmkit_fs::reseal_inode(&sim, 0).unwrap();
    older::unseal(&sim, &sb.geo);
    sim.write((sb.geo.blocks as usize - 1) * BLOCK, &[0u8; BLOCK]);
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let st = fs.statfs();
    assert_eq!(
        st.blocks,
        sb.geo.blocks - sb.geo.data_block,
        "the last block is data"
    );
    // Fill the pool: the last block is handed out like any other.
    let big = fs.create(ROOT, b"big", 0o644).unwrap().ino;
    let mut off = 0u64;
    while fs.write(big, off, &[7u8; BLOCK]).is_ok() {
        off += BLOCK as u64;
    }
    assert_eq!(fs.statfs().free_blocks, 0);
    let got = fs.read(big, 0, off as usize).unwrap();
    assert!(got.iter().all(|&b| b == 7));
    fs.unmount();
    let rep = check(&sim);
    assert!(rep.is_clean(), "{rep:?}");
    let after = pmkit_fs::superblock(&sim).unwrap();
    assert!(
        !after.geo.far_copy() && offs(&sim) == [0, 2048],
        "{after:?}"
    );
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert_eq!(fs.read(big, 0, off as usize).unwrap(), got);
}

/// A symlink's target changed behind the file system's back (format 3 keeps its checksum):
/// `readlink` answers EIO, never the other path; `check` names it; repair frees the link.
#[test]
fn a_changed_symlink_target_is_eio_and_named_never_followed() {
    let (sim, sb) = image();
    let s = {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let s = fs.lookup(ROOT, b"s").unwrap().ino;
        assert_eq!(fs.readlink(s).unwrap(), b"d/f");
        fs.unmount();
        s
    };
    let block = inode_word(&sim, &sb, s, 16);
    sim.write(block as usize * BLOCK, b"d/g");
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(rec.from_checkpoint);
    match fs.readlink(s) {
        Err(e @ Error::DamagedInode { .. }) => assert_eq!(e.errno(), 5),
        other => panic!("a changed target must not be served: {other:?}"),
    }
    fs.unmount();
    let rep = check(&sim);
    assert!(
        rep.problems
            .iter()
            .any(|p| p.contains("symlink target does not match its checksum")),
        "{rep:?}"
    );
    let r = pmkit_fs::repair(&sim).unwrap();
    assert!(r.is_clean(), "{r:?}");
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(matches!(fs.lookup(ROOT, b"s"), Err(Error::NotFound)));
    let d = fs.lookup(ROOT, b"d").unwrap().ino;
    assert!(fs.lookup(d, b"f").is_ok(), "the rest is kept");
}

/// A directory record changed behind the file system's back (format 3 records carry a
/// checksum): a name that was never written is found, not served; `check` names it and repair
/// removes the record and relinks its inode in lost+found, data intact.
#[test]
fn a_changed_directory_record_is_found_not_followed() {
    let (sim, sb) = image();
    // d (inode 2) is one block; its record "f" has the name's byte at slot offset 16.
    let block = inode_word(&sim, &sb, 2, 16) as usize;
    let mut b = vec![0u8; BLOCK];
    sim.read(block * BLOCK, &mut b);
    let slot = (0..BLOCK / 64)
        .find(|s| b[s * 64 + 8] == 1 && b[s * 64 + 16] == b'f')
        .expect("the record of f");
    sim.write(block * BLOCK + slot * 64 + 16, b"h");
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(rec.from_checkpoint);
    match fs.lookup(ROOT, b"d").and_then(|d| fs.lookup(d.ino, b"h")) {
        Err(Error::DamagedInode { ino: 2, .. }) => {}
        other => panic!("a record nobody wrote must not be served: {other:?}"),
    }
    fs.unmount();
    let rep = check(&sim);
    assert!(
        rep.problems
            .iter()
            .any(|p| p.contains("\"h\"") && p.contains("does not match its checksum")),
        "{rep:?}"
    );
    let r = pmkit_fs::repair(&sim).unwrap();
    assert!(r.is_clean(), "{r:?}");
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let d = fs.lookup(ROOT, b"d").unwrap().ino;
    assert!(matches!(fs.lookup(d, b"h"), Err(Error::NotFound)));
    let lf = fs.lookup(ROOT, b"lost+found").unwrap().ino;
    let f = fs.lookup(lf, b"#3").unwrap().ino;
    assert_eq!(
        fs.read(f, 0, 6000).unwrap(),
        vec![5u8; 6000],
        "the file is kept"
    );
}

/// An xattr block changed behind the file system's back (format 3 blocks end in a checksum):
/// the attributes are EIO, never other values; `check` names it; repair drops them and keeps
/// the file.
#[test]
fn a_changed_xattr_block_is_eio_and_dropped_by_repair() {
    let (sim, sb) = image();
    let f = {
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let d = fs.lookup(ROOT, b"d").unwrap().ino;
        let f = fs.lookup(d, b"f").unwrap().ino;
        fs.setxattr(f, b"user.k", b"value", pmkit_fs::XattrFlags::Either)
            .unwrap();
        fs.unmount();
        f
    };
    let xblock = inode_word(&sim, &sb, f, 64) as usize;
    assert!(xblock > 0);
    let mut b = vec![0u8; BLOCK];
    sim.read(xblock * BLOCK, &mut b);
    let at = b.windows(5).position(|w| w == b"value").unwrap();
    sim.write(xblock * BLOCK + at, b"VALUE");
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    match fs.getxattr(f, b"user.k") {
        Err(e @ Error::DamagedInode { .. }) => assert_eq!(e.errno(), 5),
        other => panic!("a changed attribute must not be served: {other:?}"),
    }
    fs.unmount();
    let rep = check(&sim);
    assert!(
        rep.problems
            .iter()
            .any(|p| p.contains("xattr block") && p.contains("checksum")),
        "{rep:?}"
    );
    let r = pmkit_fs::repair(&sim).unwrap();
    assert!(r.is_clean(), "{r:?}");
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(matches!(fs.getxattr(f, b"user.k"), Err(Error::NoAttr)));
    assert_eq!(fs.read(f, 0, 6000).unwrap(), vec![5u8; 6000]);
}
