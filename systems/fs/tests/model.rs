//! Model-based property tests: random operation sequences against a plain in-memory model
//! (`common::Model`, BTreeMaps), on a region in /dev/shm and on the crash simulator. After every
//! step the file system and the model agree on success or failure and on the whole tree; at
//! random points the file system is unmounted, checked (the clean-unmount checkpoint must match
//! the walk) and mounted again from that checkpoint.

mod common;

use common::{diff, run_op, snap, Model, Op};
use pmkit_fs::{check, DataMode, Falloc, Fs, MkfsOptions, MountOptions, RenameFlags};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::{Media, Region, RegionOptions};
use proptest::prelude::*;

const PATHS: [&str; 10] = [
    "a", "b", "c", "a/a", "a/b", "b/a", "b/c", "a/a/x", "c/d", "a/b/y",
];

#[derive(Clone, Debug)]
enum Step {
    Op(Op),
    Remount,
}

fn path() -> impl Strategy<Value = String> {
    prop::sample::select(&PATHS[..]).prop_map(|s| s.to_string())
}

fn falloc() -> impl Strategy<Value = Falloc> {
    prop_oneof![
        Just(Falloc::Allocate),
        Just(Falloc::KeepSize),
        Just(Falloc::PunchHole),
        Just(Falloc::ZeroRange { keep_size: false }),
        Just(Falloc::ZeroRange { keep_size: true }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let flags = prop_oneof![
        Just(RenameFlags::Replace),
        Just(RenameFlags::NoReplace),
        Just(RenameFlags::Exchange),
        Just(RenameFlags::Whiteout),
        Just(RenameFlags::WhiteoutNoReplace)
    ];
    prop_oneof![
        3 => path().prop_map(|p| Step::Op(Op::Create(p))),
        3 => path().prop_map(|p| Step::Op(Op::Mkdir(p))),
        4 => (path(), 0u64..20_000, 1usize..9000, any::<u8>()).prop_map(|(p, o, l, s)| Step::Op(Op::Write(p, o, l, s))),
        2 => (path(), 0u64..20_000).prop_map(|(p, s)| Step::Op(Op::Truncate(p, s))),
        1 => (path(), 0u64..20_000, 1u64..10_000).prop_map(|(p, o, l)| Step::Op(Op::Fallocate(p, o, l))),
        2 => (path(), 0u64..20_000, 1u64..10_000, falloc()).prop_map(|(p, o, l, m)| Step::Op(Op::FallocMode(p, o, l, m))),
        2 => (path(), 0u64..20_000, path(), 0u64..20_000, 1u64..12_000).prop_map(|(a, o, b, p, l)| Step::Op(Op::CopyRange(a, o, b, p, l))),
        2 => (path(), 0u64..5, path(), 0u64..5, prop_oneof![Just(0u64), (1u64..4).prop_map(|k| k * 4096), 1u64..20_000]).prop_map(|(a, o, b, p, l)| Step::Op(Op::CloneRange(a, o * 4096, b, p * 4096, l))),
        2 => (path(), path()).prop_map(|(a, b)| Step::Op(Op::Link(a, b))),
        2 => path().prop_map(|p| Step::Op(Op::Unlink(p))),
        2 => path().prop_map(|p| Step::Op(Op::Rmdir(p))),
        3 => (path(), path(), flags).prop_map(|(a, b, f)| Step::Op(Op::Rename(a, b, f))),
        1 => path().prop_map(|p| Step::Op(Op::Symlink(p, "t/x".into()))),
        1 => (path(), 0u32..0o7777).prop_map(|(p, m)| Step::Op(Op::Chmod(p, m))),
        1 => (path(), any::<u8>()).prop_map(|(p, v)| Step::Op(Op::SetXattr(p, "user.a".into(), v))),
        1 => path().prop_map(|p| Step::Op(Op::RemoveXattr(p, "user.a".into()))),
        1 => (path(), any::<bool>()).prop_map(|(p, on)| Step::Op(Op::SetAtomic(p, on))),
        1 => (path(), any::<bool>()).prop_map(|(p, on)| Step::Op(Op::SetHuge(p, on))),
        1 => Just(Step::Remount),
    ]
}

const MIB: u64 = 1 << 20;

/// Offsets and lengths around 2 MiB boundaries: whole aligned spans (huge blocks), spans off by
/// a block or a byte, small writes into them.
fn big_off() -> impl Strategy<Value = u64> {
    (0u64..4, prop_oneof![Just(0u64), Just(4096), 1u64..3 * MIB]).prop_map(|(k, d)| k * 2 * MIB + d)
}

fn big_len() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(2 * MIB),
        Just(4 * MIB),
        Just(2 * MIB + 4096),
        1u64..20_000
    ]
}

fn big_step() -> impl Strategy<Value = Step> {
    let p = || prop::sample::select(&["f", "g", "d/h"][..]).prop_map(|s| s.to_string());
    prop_oneof![
        2 => p().prop_map(|p| Step::Op(Op::Create(p))),
        6 => (p(), big_off(), big_len(), any::<u8>()).prop_map(|(p, o, l, s)| Step::Op(Op::Write(p, o, l as usize, s))),
        3 => (p(), big_off()).prop_map(|(p, s)| Step::Op(Op::Truncate(p, s))),
        2 => (p(), big_off(), big_len()).prop_map(|(p, o, l)| Step::Op(Op::Fallocate(p, o, l))),
        3 => (p(), big_off(), big_len(), falloc()).prop_map(|(p, o, l, m)| Step::Op(Op::FallocMode(p, o, l, m))),
        2 => (p(), any::<bool>()).prop_map(|(p, on)| Step::Op(Op::SetAtomic(p, on))),
        3 => (p(), any::<bool>()).prop_map(|(p, on)| Step::Op(Op::SetHuge(p, on))),
        2 => (p(), big_off(), p(), big_off(), big_len()).prop_map(|(a, o, b, q, l)| Step::Op(Op::CopyRange(a, o, b, q, l))),
        2 => (p(), big_off(), p(), big_off(), prop_oneof![Just(0u64), big_len()]).prop_map(|(a, o, b, q, l)| Step::Op(Op::CloneRange(a, o / 4096 * 4096, b, q / 4096 * 4096, l))),
        1 => p().prop_map(|p| Step::Op(Op::Unlink(p))),
        1 => (p(), p()).prop_map(|(a, b)| Step::Op(Op::Rename(a, b, RenameFlags::Replace))),
        1 => Just(Step::Remount),
    ]
}

fn opts() -> MkfsOptions {
    MkfsOptions {
        inodes: 128,
        lanes: 2,
        lane_entries: 128,
    }
}

fn run<M: Media>(media: M, steps: &[Step], mode: DataMode) -> Result<(), TestCaseError> {
    Fs::mkfs(&media, &opts()).unwrap();
    run_mounted(media, steps, mode)
}

fn run_mounted<M: Media>(media: M, steps: &[Step], mode: DataMode) -> Result<(), TestCaseError> {
    let mo = MountOptions {
        data: mode,
        ..Default::default()
    };
    let (mut fs, _) = Fs::mount(media, &mo).unwrap();
    let mut model = Model {
        atomic_default: mode == DataMode::Atomic,
        max_atomic: Some(fs.max_atomic_write()),
        ..Model::default()
    };
    for (i, s) in steps.iter().enumerate() {
        match s {
            Step::Op(op) => {
                let want = model.apply(op).is_ok();
                let got = run_op(&fs, op);
                prop_assert_eq!(got.is_ok(), want, "step {} {:?}: fs {:?}", i, op, got);
            }
            Step::Remount => {
                let media = fs.unmount();
                let rep = check(&media);
                prop_assert!(
                    rep.is_clean() && rep.clean,
                    "step {}: {:?}",
                    i,
                    rep.problems
                );
                prop_assert!(rep.checkpoint.starts_with("matches"), "{}", rep.checkpoint);
                let (f, rec) = Fs::mount(media, &mo).unwrap();
                prop_assert!(rec.was_clean && rec.from_checkpoint, "{:?}", rec);
                fs = f;
                // No snapshot now: the next step runs on directory indexes not yet read.
                continue;
            }
        }
        let got = snap(&fs).map_err(TestCaseError::fail)?;
        let want = model.snap();
        prop_assert!(got == want, "step {} {:?}: {}", i, s, diff(&got, &want));
    }
    let media = fs.unmount();
    let rep = check(&media);
    prop_assert!(rep.is_clean(), "{:?}", rep.problems);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn model_on_the_simulator(steps in prop::collection::vec(step(), 1..40), atomic in any::<bool>()) {
        let mode = if atomic { DataMode::Atomic } else { DataMode::InPlace };
        run(CrashSim::new(2 << 20), &steps, mode)?;
    }

    #[test]
    fn model_on_a_region_in_dev_shm(steps in prop::collection::vec(step(), 1..40), atomic in any::<bool>()) {
        let dir = pmkit_testkit::scratch();
        let r = Region::create(&dir.path().join("pool"), 2 << 20, &RegionOptions::default()).unwrap();
        let mode = if atomic { DataMode::Atomic } else { DataMode::InPlace };
        run(r, &steps, mode)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// 2 MiB blocks on 24 MiB (some huge spans fall back to 4 KiB blocks when the chunks run
    /// out), files atomic or not, directory `d` made first.
    #[test]
    fn model_with_2mib_blocks(steps in prop::collection::vec(big_step(), 1..24), atomic in any::<bool>()) {
        let mode = if atomic { DataMode::Atomic } else { DataMode::InPlace };
        let sim = CrashSim::new(24 << 20);
        Fs::mkfs(&sim, &opts()).unwrap();
        let mut all = vec![Step::Op(Op::Mkdir("d".into()))];
        all.extend(steps);
        run_mounted(sim, &all, mode)?;
    }
}
