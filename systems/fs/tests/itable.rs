//! The inode table grows (format 5): no inode limit but space, every grown inode found again
//! after a clean unmount (from the checkpoint) and after a walk, `check` clean, and a crash at
//! every fence of a create that grows the table recovers to the tree before or after it.

mod common;

use common::crashcheck::crash_seq;
use common::{run_op, snap, Model, Op};
use pmkit_fs::{check, Fs, MkfsOptions, MountOptions, ROOT};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Domain;

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

#[test]
fn a_crash_at_every_fence_of_a_create_that_grows_the_table() {
    // tiny: 32 slots, the meta inode and the root among them; 30 files fill it
    let setup: Vec<Op> = files("", 30);
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
    let setup: Vec<Op> = files("", 62);
    let ops = vec![Op::Create("g".into()), Op::Unlink("f3".into())];
    let rep = crash_seq(512 << 10, &setup, &ops, Domain::Adr, &|_, _| {}, &|_, _| {});
    assert!(rep.is_clean(), "{rep}");
}
