//! The inode table grows (format 5): no inode limit but space, every grown inode found again
//! after a clean unmount (from the checkpoint) and after a walk, `check` clean, and a crash at
//! every fence of a create that grows the table recovers to the tree before or after it.

mod common;

use common::crashcheck::crash_seq;
use common::{run_op, snap, Model, Op};
use pmkit_fs::{check, Fs, MkfsOptions, MountOptions, ROOT};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::{Domain, Media};

fn files(dir: &str, n: usize) -> Vec<Op> {
    (0..n).map(|i| Op::Create(format!("{dir}f{i}"))).collect()
}

#[test]
fn a_tiny_table_grows_until_space_runs_out_and_every_inode_stays() {
    let sim = CrashSim::new(1 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let before = fs.statfs();
    let mut model = Model::default();
    let mut ops = vec![Op::Mkdir("d".into())];
    ops.extend(files("", 100));
    ops.extend(files("d/", 100));
    ops.push(Op::Write("d/f7".into(), 0, 5000, 3));
    for op in &ops {
        model.apply(op).unwrap();
        run_op(&fs, op).unwrap();
    }
    let s = fs.statfs();
    assert!(s.inodes >= 201, "{s:?}");
    assert_eq!(
        s.inodes - s.free_inodes,
        202,
        "root, d and 200 files in use: {s:?}"
    );
    assert_eq!(
        before.inodes,
        31 + 32 * before.free_blocks,
        "32 per free block"
    );
    // a thousand more (32 blocks of table), then gone again: the table keeps its blocks
    for i in 0..1000 {
        fs.create(ROOT, format!("x{i}").as_bytes(), 0o644).unwrap();
    }
    for i in 0..1000 {
        fs.unlink(ROOT, format!("x{i}").as_bytes()).unwrap();
    }
    assert_eq!(snap(&fs).unwrap(), model.snap());
    fs.unmount();
    assert!(
        check(&sim).checkpoint.starts_with("matches"),
        "{:?}",
        check(&sim)
    );
    for full_walk in [false, true] {
        let (fs, rec) = Fs::mount(
            &sim,
            &MountOptions {
                full_walk,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(rec.from_checkpoint, !full_walk);
        assert_eq!(snap(&fs).unwrap(), model.snap(), "full walk {full_walk}");
        fs.unmount();
    }
    let r = check(&sim);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert!(r.inodes > 1200, "{r:?}");
}

#[test]
fn every_create_gets_an_inode_until_the_space_is_gone() {
    let sim = CrashSim::new(1 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let mut n = 0u64;
    let e = loop {
        match fs.create(ROOT, format!("y{n}").as_bytes(), 0o644) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(e.errno(), libc::ENOSPC, "{e}");
    assert!(n > 3000, "{n} files in a 1 MiB pool");
    assert_eq!((fs.statfs().free_blocks, fs.statfs().free_inodes), (0, 0));
    fs.unmount();
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert!(!rec.from_checkpoint, "no free block held a checkpoint");
    let names = fs.readdir(ROOT).unwrap().len() as u64;
    assert_eq!(names, 2 + n, ". and .. and every y");
    fs.unmount();
    let r = check(&sim);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}

/// Free blocks that hold old bytes (a file written and removed): a table block that joined
/// the table without its zeroes reaching the media would read them as inodes.
fn dirty_free_blocks(len: usize) -> Vec<Op> {
    let fill = len as u64 * 3 / 5;
    vec![
        Op::Create("old".into()),
        Op::Write("old".into(), 0, fill as usize, 0x5a),
        Op::Unlink("old".into()),
    ]
}

#[test]
fn a_crash_at_every_fence_of_a_create_that_grows_the_table() {
    // tiny: 32 slots, the meta inode and the root among them; 30 files fill it
    let mut setup = dirty_free_blocks(256 << 10);
    setup.extend(files("", 30));
    for domain in [Domain::Adr, Domain::Eadr] {
        let ops = vec![
            Op::Create("g".into()),
            Op::Mkdir("e".into()),
            Op::Create("e/h".into()),
        ];
        let rep = crash_seq(256 << 10, &setup, &ops, domain, &|_, _| {}, &|_, _| {});
        assert!(rep.fences > 0);
        assert!(rep.is_clean(), "{domain:?}:\n{rep}");
    }
}

#[test]
fn the_second_block_grows_the_tables_tree() {
    // 30 + 32 creates: the table's tree goes from one pointer to a node of pointers
    let mut setup = dirty_free_blocks(512 << 10);
    setup.extend(files("", 62));
    let ops = vec![Op::Create("g".into()), Op::Unlink("f3".into())];
    let rep = crash_seq(512 << 10, &setup, &ops, Domain::Adr, &|_, _| {}, &|_, _| {});
    assert!(rep.is_clean(), "{rep}");
}

/// A pool whose table grew (fixed slots 0..32, then two blocks), with files in both parts.
fn grown_pool() -> CrashSim {
    let sim = CrashSim::new(1 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    for i in 0..80 {
        let f = fs.create(ROOT, format!("f{i}").as_bytes(), 0o644).unwrap();
        fs.write(f.ino, 0, format!("file {i}").as_bytes()).unwrap();
    }
    fs.unmount();
    sim
}

/// The meta inode's byte offset (slot 0 of the fixed table).
fn meta_off(sim: &CrashSim) -> usize {
    pmkit_fs::superblock(sim).unwrap().geo.inode_off(0)
}

#[test]
fn a_lost_table_block_is_named_cut_and_repaired_to_a_pool_that_mounts() {
    let sim = grown_pool();
    // the meta inode's tree: a node of two pointers (height 1); zero the second
    let mut root = [0u8; 8];
    sim.read(meta_off(&sim) + 16, &mut root);
    let node = u64::from_le_bytes(root) as usize * 4096;
    sim.write(node + 8, &[0u8; 8]);
    let r = check(&sim);
    assert!(
        r.problems.iter().any(|p| p.contains("inode table")),
        "{:?}",
        r.problems
    );
    let rep = pmkit_fs::repair(&sim).unwrap();
    assert!(rep.is_clean(), "{:?}", rep.unfixed);
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    // the fixed table's files and the first grown block's are there, the rest lost
    let names: Vec<_> = fs.readdir(ROOT).unwrap();
    assert!(
        names.len() > 2 + 30 && names.len() < 2 + 80,
        "{}",
        names.len()
    );
    let f0 = fs.lookup(ROOT, b"f0").unwrap();
    assert_eq!(fs.read(f0.ino, 0, 6).unwrap(), b"file 0");
    fs.unmount();
    assert!(check(&sim).problems.is_empty());
}

#[test]
fn a_damaged_meta_inode_is_named_reset_and_repaired_to_a_pool_that_mounts() {
    let sim = grown_pool();
    // one byte of the table tree's root pointer changed: the meta inode's checksum fails
    let at = meta_off(&sim) + 16;
    let mut b = [0u8; 1];
    sim.read(at, &mut b);
    sim.write(at, &[b[0] ^ 1]);
    let r = check(&sim);
    assert!(
        r.problems.iter().any(|p| p.contains("meta inode 0")),
        "{:?}",
        r.problems
    );
    assert!(
        Fs::mount(&sim, &MountOptions::default()).is_err(),
        "refused"
    );
    let rep = pmkit_fs::repair(&sim).unwrap();
    assert!(rep.is_clean(), "{:?}", rep.unfixed);
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let f0 = fs.lookup(ROOT, b"f0").unwrap();
    assert_eq!(fs.read(f0.ino, 0, 6).unwrap(), b"file 0");
    // and the table grows again from its fixed part
    for i in 0..100 {
        fs.create(ROOT, format!("n{i}").as_bytes(), 0o644).unwrap();
    }
    fs.unmount();
    assert!(check(&sim).problems.is_empty());
}
