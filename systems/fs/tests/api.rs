//! The surface, one call at a time, on anonymous memory: results, errors and limits.

mod common;

use pmkit_fs::{
    Error, Fs, Kind, MkfsOptions, MountOptions, RenameFlags, SetAttr, XattrFlags, ROOT,
};
use pmkit_media::Region;

fn fresh(len: usize) -> Fs<Region> {
    let r = Region::anonymous(len).unwrap();
    Fs::mkfs(&r, &MkfsOptions::default()).unwrap();
    let (fs, rec) = Fs::mount(r, &MountOptions::default()).unwrap();
    assert!(rec.was_clean);
    fs
}

#[test]
fn create_write_read_rename_unlink() {
    let fs = fresh(8 << 20);
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap();
    let f = fs.create(d.ino, b"f", 0o600).unwrap();
    assert_eq!(f.kind, Kind::File);
    let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    assert_eq!(fs.write(f.ino, 100, &data).unwrap(), data.len());
    let back = fs.read(f.ino, 0, 20_000).unwrap();
    assert_eq!(back.len(), 10_100);
    assert!(back[..100].iter().all(|&b| b == 0));
    assert_eq!(&back[100..], &data[..]);
    fs.write(f.ino, 10_100, b"tail").unwrap(); // fast path (no new block)
    assert_eq!(fs.getattr(f.ino).unwrap().size, 10_104);
    fs.rename(d.ino, b"f", ROOT, b"g", RenameFlags::Replace)
        .unwrap();
    assert!(matches!(fs.lookup(d.ino, b"f"), Err(Error::NotFound)));
    assert_eq!(fs.lookup(ROOT, b"g").unwrap().ino, f.ino);
    assert_eq!(fs.getattr(ROOT).unwrap().links, 3);
    assert!(matches!(fs.rmdir(ROOT, b"g"), Err(Error::NotDir)));
    fs.unlink(ROOT, b"g").unwrap();
    fs.rmdir(ROOT, b"d").unwrap();
    assert_eq!(fs.readdir(ROOT).unwrap().len(), 2);
    assert_eq!(fs.getattr(ROOT).unwrap().links, 2);
    let st = fs.statfs();
    assert_eq!(st.free_inodes, st.inodes - 1);
}

#[test]
fn limits_and_errors() {
    let fs = fresh(4 << 20);
    let long = vec![b'x'; 256];
    assert!(matches!(
        fs.create(ROOT, &long, 0o644),
        Err(Error::NameTooLong { len: 256, max: 255 })
    ));
    assert_eq!(
        fs.create(ROOT, &long[..255], 0o644).unwrap().kind,
        Kind::File
    );
    assert!(fs.lookup(ROOT, &long[..255]).is_ok());
    assert!(matches!(
        fs.create(ROOT, b"a/b", 0o644),
        Err(Error::BadName(_))
    ));
    assert!(matches!(
        fs.create(ROOT, &long[..255], 0o644),
        Err(Error::Exists)
    ));
    let f = fs.create(ROOT, b"f", 0o644).unwrap();
    assert!(matches!(
        fs.write(f.ino, pmkit_fs::MAX_FILE_SIZE, b"x"),
        Err(Error::FileTooBig { .. })
    ));
    assert!(matches!(
        fs.mknod(ROOT, b"door", 0o170644, 0),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        fs.setxattr(f.ino, b"system.posix_acl_access", b"v", XattrFlags::Either),
        Err(Error::NotSupported(_))
    ));
    assert!(matches!(fs.link(ROOT, ROOT, b"l"), Err(Error::Perm(_))));
    let r = Region::anonymous(1 << 20).unwrap();
    let o = MkfsOptions {
        lane_entries: 63,
        ..MkfsOptions::default()
    };
    assert!(matches!(Fs::mkfs(&r, &o), Err(Error::Invalid(_))));
    let e = Error::NameTooLong { len: 256, max: 255 };
    assert_eq!(e.errno(), 36);
    // the inode table grows past the size mkfs gave it (tests/itable.rs fills a pool)
    let small = Region::anonymous(1 << 20).unwrap();
    Fs::mkfs(
        &small,
        &MkfsOptions {
            inodes: 8,
            ..MkfsOptions::default()
        },
    )
    .unwrap();
    let (fs, _) = Fs::mount(small, &MountOptions::default()).unwrap();
    for i in 0..6 {
        fs.create(ROOT, format!("f{i}").as_bytes(), 0o644).unwrap();
    }
    let more = fs.create(ROOT, b"one-more", 0o644).unwrap();
    assert!(more.ino >= 8, "inode {} beyond the first 8", more.ino);
    assert!(fs.statfs().inodes > 8);
}

#[test]
fn rename_flags_links_symlinks_xattrs() {
    let fs = fresh(4 << 20);
    let a = fs.create(ROOT, b"a", 0o644).unwrap();
    let b = fs.mkdir(ROOT, b"b", 0o755).unwrap();
    assert!(matches!(
        fs.rename(ROOT, b"a", ROOT, b"b", RenameFlags::NoReplace),
        Err(Error::Exists)
    ));
    assert!(matches!(
        fs.rename(ROOT, b"a", ROOT, b"b", RenameFlags::Replace),
        Err(Error::IsDir)
    ));
    fs.rename(ROOT, b"a", ROOT, b"b", RenameFlags::Exchange)
        .unwrap();
    assert_eq!(fs.lookup(ROOT, b"a").unwrap().ino, b.ino);
    assert_eq!(fs.lookup(ROOT, b"b").unwrap().ino, a.ino);
    assert!(matches!(
        fs.rename(ROOT, b"a", a.ino, b"x", RenameFlags::Replace),
        Err(Error::NotDir)
    ));
    assert!(matches!(
        fs.rename(ROOT, b"a", b.ino, b"x", RenameFlags::Replace),
        Err(Error::Invalid(_))
    ));
    let l = fs.link(a.ino, b.ino, b"hard").unwrap();
    assert_eq!(l.links, 2);
    let s = fs.symlink(ROOT, b"s", b"../target").unwrap();
    assert_eq!(fs.readlink(s.ino).unwrap(), b"../target");
    fs.setxattr(a.ino, b"user.k", b"v1", XattrFlags::Create)
        .unwrap();
    assert!(matches!(
        fs.setxattr(a.ino, b"user.k", b"v", XattrFlags::Create),
        Err(Error::Exists)
    ));
    fs.setxattr(a.ino, b"user.k", b"v2", XattrFlags::Replace)
        .unwrap();
    assert_eq!(fs.getxattr(a.ino, b"user.k").unwrap(), b"v2");
    assert_eq!(fs.listxattr(a.ino).unwrap(), vec![b"user.k".to_vec()]);
    fs.removexattr(a.ino, b"user.k").unwrap();
    assert!(matches!(fs.getxattr(a.ino, b"user.k"), Err(Error::NoAttr)));
    let at = fs
        .setattr(
            a.ino,
            &SetAttr {
                mode: Some(0o600),
                uid: Some(7),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((at.mode, at.uid), (0o600, 7));
}

#[test]
fn unlinked_but_open_survives_until_release_and_remount() {
    let r = Region::anonymous(4 << 20).unwrap();
    Fs::mkfs(&r, &MkfsOptions::default()).unwrap();
    // exact block counts: no preallocation (tests/crash_prealloc.rs covers it)
    let exact = MountOptions {
        no_prealloc: true,
        ..MountOptions::default()
    };
    let (fs, _) = Fs::mount(r, &exact).unwrap();
    let f = fs.create(ROOT, b"f", 0o644).unwrap();
    fs.write(f.ino, 0, &[7u8; 9000]).unwrap();
    let free0 = fs.statfs().free_blocks;
    fs.open(f.ino).unwrap();
    fs.unlink(ROOT, b"f").unwrap();
    assert_eq!(fs.read(f.ino, 0, 9000).unwrap(), vec![7u8; 9000]);
    assert_eq!(fs.statfs().free_blocks, free0);
    let g = fs.create(ROOT, b"g", 0o644).unwrap();
    fs.open(g.ino).unwrap();
    fs.unlink(ROOT, b"g").unwrap();
    fs.release(f.ino).unwrap();
    assert!(fs.getattr(f.ino).is_err());
    assert_eq!(fs.statfs().free_blocks, free0 + 4); // three data blocks and the tree node
    let media = fs.unmount(); // g is still open: it stays an orphan
    assert!(pmkit_fs::check(&media).is_clean());
    assert_eq!(pmkit_fs::check(&media).orphans, 1);
    let (fs, rec) = Fs::mount(media, &MountOptions::default()).unwrap();
    assert_eq!(rec.orphans, 1);
    assert!(fs.getattr(g.ino).is_err());
}

#[test]
fn big_truncate_goes_through_the_orphan_list() {
    let r = Region::anonymous(32 << 20).unwrap();
    let o = MkfsOptions {
        lane_entries: 64,
        ..MkfsOptions::default()
    };
    Fs::mkfs(&r, &o).unwrap();
    let (fs, _) = Fs::mount(r, &MountOptions::default()).unwrap();
    let f = fs.create(ROOT, b"big", 0o644).unwrap();
    let free0 = fs.statfs().free_blocks;
    fs.fallocate(f.ino, 0, 600 * 4096).unwrap(); // height 2: two leaves
    assert!(fs.statfs().free_blocks < free0 - 600);
    fs.write(f.ino, 4096 * 3, b"keep").unwrap();
    fs.setattr(
        f.ino,
        &SetAttr {
            size: Some(4096 * 3 + 2),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.read(f.ino, 4096 * 3, 100).unwrap(), b"ke");
    fs.setattr(
        f.ino,
        &SetAttr {
            size: Some(4096 * 4),
            ..Default::default()
        },
    )
    .unwrap();
    let back = fs.read(f.ino, 4096 * 3, 4096).unwrap();
    assert_eq!(&back[..4], b"ke\0\0");
    let media = fs.unmount();
    let rep = pmkit_fs::check(&media);
    assert!(rep.is_clean(), "{rep:?}");
    assert_eq!(rep.orphans, 0);
}

#[test]
fn threads_write_their_own_files() {
    let fs = std::sync::Arc::new(fresh(16 << 20));
    let hs: Vec<_> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let f = fs.create(ROOT, format!("t{t}").as_bytes(), 0o644).unwrap();
                for i in 0..50u64 {
                    fs.write(f.ino, i * 1000, &[t as u8 + 1; 1000]).unwrap();
                    fs.mkdir(ROOT, format!("d{t}-{i}").as_bytes(), 0o755)
                        .unwrap();
                }
                f.ino
            })
        })
        .collect();
    for (t, h) in hs.into_iter().enumerate() {
        let ino = h.join().unwrap();
        assert_eq!(fs.read(ino, 0, 50_000).unwrap(), vec![t as u8 + 1; 50_000]);
    }
    assert_eq!(fs.readdir(ROOT).unwrap().len(), 2 + 4 + 200);
    let fs = std::sync::Arc::try_unwrap(fs).unwrap();
    assert!(pmkit_fs::check(&fs.unmount()).is_clean());
}

#[test]
fn journal_costs_per_operation() {
    let costs = pmkit_fs::op_costs();
    for c in &costs {
        eprintln!(
            "{:<36} {:>5} B journaled {:>2} fences {} tx",
            c.op, c.journal_bytes, c.fences, c.transactions
        );
    }
    let get = |op: &str| costs.iter().find(|c| c.op == op).unwrap().clone();
    // metadata operations: one transaction, three fences, within the thesis's Table 3 budget
    for (op, max) in [
        ("create (touch)", 512),
        ("mkdir", 512),
        ("rename (mv)", 512),
    ] {
        let c = get(op);
        assert_eq!((c.transactions, c.fences), (1, 3), "{op}");
        assert!(c.journal_bytes <= max, "{op}: {} bytes", c.journal_bytes);
    }
    // the append fast path: no journal, one fence (data, tail record and size together)
    let c = get("append 100 B in an allocated block");
    assert_eq!((c.journal_bytes, c.fences, c.transactions), (0, 1, 0));
}

#[test]
fn a_sparse_file_grows_to_height_three_and_shrinks() {
    let r = Region::anonymous(8 << 20).unwrap();
    let o = MkfsOptions {
        lane_entries: 64,
        ..MkfsOptions::default()
    };
    Fs::mkfs(&r, &o).unwrap();
    // exact block counts: no preallocation (tests/crash_prealloc.rs covers it)
    let exact = MountOptions {
        no_prealloc: true,
        ..MountOptions::default()
    };
    let (fs, _) = Fs::mount(r, &exact).unwrap();
    let f = fs.create(ROOT, b"sparse", 0o644).unwrap();
    let far = 3u64 << 30; // past the 1 GiB a height-2 tree covers
    fs.write(f.ino, 10, b"near").unwrap();
    fs.write(f.ino, far, b"far away").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().size, far + 8);
    assert_eq!(fs.read(f.ino, far, 100).unwrap(), b"far away");
    assert_eq!(fs.read(f.ino, 8, 6).unwrap(), b"\0\0near");
    assert!(fs
        .read(f.ino, 1 << 30, 4096)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
    let used = fs.getattr(f.ino).unwrap().blocks;
    assert_eq!(
        used,
        2 + 1 + 2 + 2,
        "two data blocks, the root, two nodes per path"
    );
    let media = fs.unmount();
    assert!(pmkit_fs::check(&media).is_clean());
    let (fs, _) = Fs::mount(media, &MountOptions::default()).unwrap();
    fs.setattr(
        f.ino,
        &SetAttr {
            size: Some(12),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        fs.getattr(f.ino).unwrap().blocks,
        1 + 1 + 1 + 1,
        "one data block and its path"
    );
    assert_eq!(fs.read(f.ino, 0, 100).unwrap(), b"\0\0\0\0\0\0\0\0\0\0ne");
    let media = fs.unmount();
    assert!(pmkit_fs::check(&media).is_clean());
}

#[test]
fn atomic_writes_up_to_their_bound() {
    let r = Region::anonymous(8 << 20).unwrap();
    Fs::mkfs(&r, &MkfsOptions::tiny()).unwrap();
    let mo = MountOptions {
        data: pmkit_fs::DataMode::Atomic,
        ..Default::default()
    };
    let (fs, _) = Fs::mount(r, &mo).unwrap();
    let f = fs.create(ROOT, b"a", 0o644).unwrap();
    let max = fs.max_atomic_write() as usize;
    let big: Vec<u8> = (0..max).map(|i| (i % 253) as u8).collect();
    fs.write(f.ino, 1000, &big).unwrap(); // unaligned: one more block than max / 4096
    fs.write(f.ino, 1000, &big).unwrap(); // again: every block copied on write
    assert_eq!(fs.read(f.ino, 1000, max).unwrap(), big);
    let over = vec![1u8; max + 1];
    assert!(matches!(
        fs.write(f.ino, 0, &over),
        Err(Error::TooBig { .. })
    ));
    let media = fs.unmount();
    assert!(pmkit_fs::check(&media).is_clean());
    let (fs, _) = Fs::mount(media, &MountOptions::default()).unwrap();
    let mib = vec![9u8; 1 << 20];
    assert!(fs.getattr(f.ino).unwrap().atomic, "the file keeps its mode");
    assert!(matches!(
        fs.write(f.ino, 0, &mib),
        Err(Error::TooBig { .. })
    ));
    fs.set_atomic(f.ino, false).unwrap();
    fs.write(f.ino, 0, &mib).unwrap(); // in place: cut into transactions
    assert_eq!(fs.read(f.ino, 0, 1 << 20).unwrap(), mib);
    assert!(pmkit_fs::check(&fs.unmount()).is_clean());
}

#[test]
fn special_files_keep_kind_and_device_number_across_a_remount() {
    let fs = fresh(4 << 20);
    let fifo = fs.mknod(ROOT, b"fifo", 0o010640, 0).unwrap();
    let sock = fs.mknod(ROOT, b"sock", 0o140600, 0).unwrap();
    let chr = fs.mknod(ROOT, b"chr", 0o020600, 0x0501).unwrap();
    let blk = fs.mknod(ROOT, b"blk", 0o060600, 0x0803).unwrap();
    let reg = fs.mknod(ROOT, b"reg", 0o100600, 77).unwrap();
    let kinds = [
        (fifo, Kind::Fifo, 0),
        (sock, Kind::Socket, 0),
        (chr, Kind::CharDev, 0x0501),
        (blk, Kind::BlockDev, 0x0803),
        (reg, Kind::File, 0),
    ];
    for (a, kind, rdev) in kinds {
        assert_eq!(
            (a.kind, a.rdev, a.size, a.links),
            (kind, rdev, 0, 1),
            "{a:?}"
        );
    }
    assert_eq!(fifo.mode, 0o640);
    assert!(matches!(
        fs.write(fifo.ino, 0, b"x"),
        Err(Error::Invalid(_))
    ));
    let trunc = SetAttr {
        size: Some(10),
        ..SetAttr::default()
    };
    assert!(matches!(
        fs.setattr(chr.ino, &trunc),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        fs.fallocate(blk.ino, 0, 10),
        Err(Error::Invalid(_))
    ));
    fs.link(chr.ino, ROOT, b"chr2").unwrap();
    fs.rename(ROOT, b"sock", ROOT, b"sock2", RenameFlags::Replace)
        .unwrap();
    fs.unlink(ROOT, b"fifo").unwrap();
    let r = fs.unmount();
    assert!(pmkit_fs::check(&r).is_clean());
    let (fs, _) = Fs::mount(r, &MountOptions::default()).unwrap();
    assert!(matches!(fs.lookup(ROOT, b"fifo"), Err(Error::NotFound)));
    let c = fs.lookup(ROOT, b"chr2").unwrap();
    assert_eq!(
        (c.ino, c.kind, c.rdev, c.links),
        (chr.ino, Kind::CharDev, 0x0501, 2)
    );
    assert_eq!(fs.lookup(ROOT, b"sock2").unwrap().kind, Kind::Socket);
    assert_eq!(fs.lookup(ROOT, b"blk").unwrap().rdev, 0x0803);
    let names: Vec<_> = fs
        .readdir(ROOT)
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert!(
        names.contains(&(b"blk".to_vec(), Kind::BlockDev)),
        "{names:?}"
    );
}

/// Preallocated blocks are not zeroed when allocated: whatever a freed file left in them must
/// read as zeros once the size covers them (a write past the end, a truncate or fallocate that
/// grows), and the last close gives them back.
#[test]
fn preallocated_blocks_read_as_zeros_once_the_size_covers_them() {
    for grow in ["write", "truncate", "fallocate"] {
        let fs = fresh(4 << 20);
        // a file of 0xff fills blocks and is freed: the lowest free blocks are reused first
        let x = fs.create(ROOT, b"x", 0o644).unwrap();
        fs.write(x.ino, 0, &[0xffu8; 60 << 10]).unwrap();
        fs.unlink(ROOT, b"x").unwrap();
        let f = fs.create(ROOT, b"f", 0o644).unwrap();
        fs.open(f.ino).unwrap();
        // A file's first write preallocates nothing; the next append that needs a block does.
        fs.write(f.ino, 0, &[1u8; 100]).unwrap();
        assert_eq!(fs.getattr(f.ino).unwrap().blocks, 1, "{grow}: first write");
        fs.write(f.ino, 100, &[1u8; 4000]).unwrap();
        let a = fs.getattr(f.ino).unwrap();
        assert!(
            a.blocks > 3,
            "{grow}: no preallocation ({} blocks)",
            a.blocks
        );
        let end = 40_000u64;
        match grow {
            "write" => {
                fs.write(f.ino, end - 10, &[2u8; 10]).unwrap();
            }
            "truncate" => {
                fs.setattr(
                    f.ino,
                    &SetAttr {
                        size: Some(end),
                        ..Default::default()
                    },
                )
                .unwrap();
            }
            _ => fs.fallocate(f.ino, 100, end - 100).unwrap(),
        };
        let back = fs.read(f.ino, 0, end as usize).unwrap();
        assert_eq!(back.len() as u64, end, "{grow}");
        assert!(back[..4100].iter().all(|&b| b == 1), "{grow}");
        let stale = back[4100..end as usize - 10].iter().position(|&b| b != 0);
        assert_eq!(stale, None, "{grow}: bytes beyond the old size not zeroed");
        let before = fs.getattr(f.ino).unwrap().blocks;
        fs.release(f.ino).unwrap();
        let after = fs.getattr(f.ino).unwrap().blocks;
        // 10 data blocks and the level-1 node stay
        assert_eq!(
            after, 11,
            "{grow}: trimmed at the last close (had {before})"
        );
        assert!(
            before > after,
            "{grow}: nothing was preallocated past {end}"
        );
        let media = fs.unmount();
        let rep = pmkit_fs::check(&media);
        assert!(rep.is_clean(), "{grow}: {rep:?}");
    }
}

/// After a write to PM fails the mount refuses every write (EIO), says why, and cannot be
/// unmounted clean: the next mount recovers, and what was committed before the failure is there.
#[test]
fn a_failed_write_leaves_the_pool_unclean_and_recoverable() {
    let fs = fresh(4 << 20);
    let f = fs.create(ROOT, b"before", 0o644).unwrap();
    fs.write(f.ino, 0, b"kept").unwrap();
    assert_eq!(fs.write_failure(), None);
    fs.inject_write_failure("pwrite: No space left on device");
    let why = fs.write_failure().expect("poisoned");
    assert!(why.contains("No space left"), "{why}");
    let e = fs.create(ROOT, b"after", 0o644).unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert_eq!(fs.read(f.ino, 0, 4).unwrap(), b"kept");
    let media = fs.unmount();
    let sb = pmkit_fs::superblock(&media).unwrap();
    assert!(!sb.clean, "a poisoned mount must not mark the pool clean");
    let (fs, rec) = Fs::mount(media, &MountOptions::default()).unwrap();
    assert!(!rec.was_clean);
    let f = fs.lookup(ROOT, b"before").unwrap();
    assert_eq!(fs.read(f.ino, 0, 4).unwrap(), b"kept");
    assert!(fs.lookup(ROOT, b"after").is_err());
}

/// POSIX: every write changes mtime and ctime, on each of the write paths (an overwrite in
/// place, a small append, a large one, through a transaction), and both are stored.
#[test]
fn every_write_changes_mtime_and_ctime() {
    let fs = fresh(8 << 20);
    let f = fs.create(ROOT, b"f", 0o644).unwrap();
    fs.write(f.ino, 0, &[1u8; 8192]).unwrap();
    let later = |fs: &Fs<Region>, what: &str, op: &dyn Fn(&Fs<Region>)| {
        let before = fs.getattr(f.ino).unwrap();
        // past the coarse clock's tick
        std::thread::sleep(std::time::Duration::from_millis(20));
        op(fs);
        let after = fs.getattr(f.ino).unwrap();
        assert!(after.mtime > before.mtime, "{what}: mtime");
        assert!(after.ctime > before.ctime, "{what}: ctime");
        assert_eq!(after.mtime, after.ctime, "{what}");
    };
    later(&fs, "overwrite", &|fs| {
        fs.write(f.ino, 100, b"over").unwrap();
    });
    later(&fs, "small append", &|fs| {
        fs.write(f.ino, 8192, b"tail").unwrap();
    });
    later(&fs, "large append", &|fs| {
        fs.write(f.ino, 8196, &[2u8; 100_000]).unwrap();
    });
    later(&fs, "write into a hole", &|fs| {
        fs.write(f.ino, 1 << 20, b"far").unwrap();
    });
    let want = fs.getattr(f.ino).unwrap();
    let media = fs.unmount();
    let (fs, _) = Fs::mount(media, &MountOptions::default()).unwrap();
    let got = fs.getattr(f.ino).unwrap();
    assert_eq!((got.mtime, got.ctime), (want.mtime, want.ctime), "stored");
}

/// SEEK_DATA and SEEK_HOLE from the tree: data and holes at block granularity, the size as the
/// last hole, ENXIO past it or with no data after the offset; a huge block is data throughout.
#[test]
fn seek_finds_data_and_holes() {
    use pmkit_fs::Seek::{Data, Hole};
    let fs = fresh(16 << 20);
    let (k, m) = (4096u64, 1u64 << 20);
    let f = fs.create(ROOT, b"f", 0o644).unwrap();
    fs.write(f.ino, 0, &[1u8; 4096]).unwrap();
    let grow = SetAttr {
        size: Some(3 * m),
        ..SetAttr::default()
    };
    fs.setattr(f.ino, &grow).unwrap();
    fs.write(f.ino, m, &[2u8; 4096]).unwrap();
    let seek = |off, to| fs.seek(f.ino, off, to).map_err(|e| e.errno());
    assert_eq!(seek(0, Data), Ok(0));
    assert_eq!(seek(0, Hole), Ok(k));
    assert_eq!(seek(k, Data), Ok(m));
    assert_eq!(seek(m + 7, Data), Ok(m + 7));
    assert_eq!(seek(m, Hole), Ok(m + k));
    assert_eq!(seek(m + k, Data), Err(libc::ENXIO));
    assert_eq!(seek(2 * m, Hole), Ok(2 * m));
    assert_eq!(seek(3 * m, Hole), Err(libc::ENXIO));
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap();
    assert_eq!(
        fs.seek(d.ino, 0, Data).map_err(|e| e.errno()),
        Err(libc::EINVAL)
    );
    // A huge block: 2 MiB of data, however little was written; the size ends it.
    let h = fs.create(ROOT, b"h", 0o644).unwrap();
    fs.set_huge(h.ino, true).unwrap();
    fs.write(h.ino, 0, &[3u8; 4096]).unwrap();
    fs.setattr(
        h.ino,
        &SetAttr {
            size: Some(4 * m),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!(fs.seek(h.ino, 0, Hole).map_err(|e| e.errno()), Ok(2 * m));
    assert_eq!(
        fs.seek(h.ino, 2 * m, Data).map_err(|e| e.errno()),
        Err(libc::ENXIO)
    );
}

/// The xattr namespaces stored (`user.`, `trusted.`, `security.`; not `system.`), and file
/// capabilities dropped as Linux drops them: by a write (in place and atomic), a truncate, a
/// fallocate and a chown, each by anyone; kept by a chmod and by a change of times.
#[test]
fn capabilities_go_at_a_write_truncate_or_chown() {
    let fs = fresh(8 << 20);
    let f = fs.create(ROOT, b"f", 0o755).unwrap();
    let cap = b"\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
    let name: &[u8] = b"security.capability";
    let gone = |what: &str| {
        assert!(
            matches!(fs.getxattr(f.ino, name), Err(Error::NoAttr)),
            "kept after {what}"
        );
    };
    let set = || fs.setxattr(f.ino, name, cap, XattrFlags::Either).unwrap();
    for ns in [&b"user.a"[..], b"trusted.a", b"security.selinux"] {
        fs.setxattr(f.ino, ns, b"v", XattrFlags::Either).unwrap();
        assert_eq!(fs.getxattr(f.ino, ns).unwrap(), b"v");
    }
    set();
    fs.write(f.ino, 0, b"data").unwrap();
    gone("a write");
    fs.set_atomic(f.ino, true).unwrap();
    set();
    fs.write(f.ino, 1, b"x").unwrap();
    gone("an atomic write");
    set();
    let size = SetAttr {
        size: Some(2),
        ..SetAttr::default()
    };
    fs.setattr(f.ino, &size).unwrap();
    gone("a truncate");
    set();
    fs.fallocate_mode(f.ino, 0, 8192, pmkit_fs::Falloc::KeepSize)
        .unwrap();
    gone("a fallocate");
    set();
    let chown = SetAttr {
        uid: Some(0),
        ..SetAttr::default()
    };
    fs.setattr(f.ino, &chown).unwrap();
    gone("a chown");
    set();
    let keep = SetAttr {
        mode: Some(0o700),
        mtime: Some(1),
        ..SetAttr::default()
    };
    fs.setattr(f.ino, &keep).unwrap();
    assert_eq!(fs.getxattr(f.ino, name).unwrap(), cap);
    // The other names stay through all of it.
    assert_eq!(fs.getxattr(f.ino, b"trusted.a").unwrap(), b"v");
    assert_eq!(fs.read(f.ino, 0, 8).unwrap(), b"dx");
}

/// `readdir_at` in pieces of any size lists what `readdir` does, in its order, and each
/// position stays the entry's while it stays: entries removed and added in the middle of a
/// listing move no other entry.
#[test]
fn readdir_at_resumes_at_stable_positions() {
    let fs = fresh(8 << 20);
    for i in 0..150 {
        // names long enough to take several slots now and then
        let name = format!("{i}-{}", "x".repeat(i % 70));
        fs.create(ROOT, name.as_bytes(), 0o644).unwrap();
    }
    let all: Vec<_> = fs.readdir(ROOT).unwrap();
    for step in [1, 2, 7, 64, 1000] {
        let (mut got, mut pos) = (vec![], 0);
        loop {
            let batch = fs.readdir_at(ROOT, pos, step).unwrap();
            assert!(batch.len() <= step);
            got.extend(batch.iter().map(|(_, e)| e.clone()));
            match batch.last() {
                Some(&(p, _)) => pos = p + 1,
                None => break,
            }
        }
        assert_eq!(got, all, "pieces of {step}");
    }
    let before = fs.readdir_at(ROOT, 0, usize::MAX).unwrap();
    for (i, (_, e)) in before.iter().enumerate().skip(2).step_by(3) {
        fs.unlink(ROOT, &e.name).unwrap();
        fs.create(ROOT, format!("new{i}").as_bytes(), 0o644)
            .unwrap();
    }
    let after = fs.readdir_at(ROOT, 0, usize::MAX).unwrap();
    for (p, e) in &before {
        if let Some((q, _)) = after.iter().find(|(_, f)| f.name == e.name) {
            assert_eq!(p, q, "{:?} moved", String::from_utf8_lossy(&e.name));
        }
    }
    assert!(fs.readdir_at(ROOT, u64::MAX, 10).unwrap().is_empty());
}
