//! The crash tests' checking: what a workload acknowledged, and whether a recovered image is
//! the tree before or after the operation in flight (in-place writes: each byte old or new).

use super::{data_of, diff, run_op, snap, Model, Op, Snap};
use parking_lot::Mutex;
use pmkit_fs::{DataMode, Fs, MkfsOptions, MountOptions};
use pmkit_media::crashsim::{check_every_fence_from, CrashOpts, CrashReport, CrashSim};
use pmkit_media::Domain;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

#[derive(Default)]
pub(crate) struct Acked {
    pub before: Option<Snap>,
    pub after: Option<Snap>,
    /// An in-place write in flight: (path, offset, data).
    pub torn: Option<(String, u64, Vec<u8>)>,
}

pub(crate) fn torn_ok(
    got: &Snap,
    before: &Snap,
    after: &Snap,
    path: &str,
    off: u64,
    data: &[u8],
) -> bool {
    // every name of the written inode (hard links) shows the same bytes
    let Some(group) = before.0.get(path).map(|e| e.group.clone()) else {
        return false;
    };
    let (Some(be), Some(ae), Some(ge)) = (before.0.get(path), after.0.get(path), got.0.get(path))
    else {
        return false;
    };
    let side = if ge.data.len() == ae.data.len() {
        after
    } else if ge.data.len() == be.data.len() {
        before
    } else {
        return false;
    };
    for (i, &new) in data.iter().enumerate() {
        let at = off as usize + i;
        if at < ge.data.len() {
            let old = be.data.get(at).copied().unwrap_or(0);
            if ge.data[at] != old && ge.data[at] != new {
                return false;
            }
        }
    }
    let mut o = side.clone();
    for (p, e) in o.0.iter_mut() {
        if e.group == group {
            e.data = ge.data.clone();
            if got.0.get(p).map(|g| &g.data) != Some(&ge.data) {
                return false;
            }
        }
    }
    *got == o
}

/// Appends cut by a crash that recovery rolled back, over every image verified in this test
/// binary (a test that counts them runs alone in its binary).
pub(crate) static CUT_APPENDS: AtomicU64 = AtomicU64::new(0);

pub(crate) fn verify(m: &Arc<CrashSim>, a: &Acked, mode: DataMode) -> Result<Snap, String> {
    let rep = pmkit_fs::check(m);
    if !rep.is_clean() || !rep.data_damage.is_empty() {
        return Err(format!(
            "check before mount: {:?} {:?}",
            rep.problems, rep.data_damage
        ));
    }
    let (fs, rec) = Fs::mount(
        Arc::clone(m),
        &MountOptions {
            data: mode,
            ..Default::default()
        },
    )
    .map_err(|e| format!("mount failed: {e}"))?;
    CUT_APPENDS.fetch_add(rec.cut_appends as u64, Relaxed);
    let got = snap(&fs)?;
    let before = a.before.as_ref().expect("model state");
    let ok = got == *before
        || a.after.as_ref() == Some(&got)
        || matches!((&a.torn, &a.after), (Some((p, off, d)), Some(after)) if torn_ok(&got, before, after, p, *off, d));
    if !ok {
        let after = a.after.as_ref().map(|s| diff(&got, s)).unwrap_or_default();
        return Err(format!("tree after recovery is neither before nor after the op in flight: vs before: {}; vs after: {after}", diff(&got, before)));
    }
    let media = fs.unmount();
    let rep = pmkit_fs::check(&media);
    if !rep.is_clean() || !rep.clean || !rep.data_damage.is_empty() {
        return Err(format!(
            "check after mount and unmount: {:?} {:?}",
            rep.problems, rep.data_damage
        ));
    }
    Ok(got)
}

/// A workload on a mounted simulator that records what it acknowledged.
pub(crate) type Work<'a> = dyn Fn(&Fs<Arc<CrashSim>>, &Mutex<Acked>) + Sync + 'a;

/// Crash at every fence of `work` run on the tree `setup` builds (media of `len` bytes); the
/// check is `verify` against `before` / `after` as the workload sets them.
pub(crate) fn crash_custom(
    len: usize,
    setup: &dyn Fn(&Fs<&CrashSim>),
    work: &Work<'_>,
    domain: Domain,
) -> CrashReport {
    let mount = MountOptions::default();
    crash_custom_with(len, setup, work, domain, &|_, _| {}, &mount)
}

/// `crash_custom`, calling `seen(recovered tree, acknowledged)` for every image that passed,
/// the workload's mount made with `mount` (faults, protection).
pub(crate) fn crash_custom_with(
    len: usize,
    setup: &dyn Fn(&Fs<&CrashSim>),
    work: &Work<'_>,
    domain: Domain,
    seen: &(dyn Fn(&Snap, &Acked) + Sync + '_),
    mount: &MountOptions,
) -> CrashReport {
    let sim = CrashSim::new(len);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    setup(&fs);
    let before = snap(&fs).unwrap();
    fs.unmount();
    let acked = Arc::new(Mutex::new(Acked {
        before: Some(before),
        ..Default::default()
    }));
    let a2 = Arc::clone(&acked);
    let opts = CrashOpts {
        domain,
        k: 8,
        random_images: 32,
        // a 2 MiB write is 32768 lines: sample its prefixes in eADR rather than take them all
        max_exhaustive: 4096,
        ..Default::default()
    };
    check_every_fence_from(
        sim.image(),
        &opts,
        |sim| {
            let (fs, _) = Fs::mount(Arc::clone(sim), mount).unwrap();
            work(&fs, &a2);
            fs.unmount();
        },
        |m| {
            let a = acked.lock();
            let got = verify(m, &a, DataMode::InPlace)?;
            seen(&got, &a);
            Ok(())
        },
    )
}

/// Crash at every fence of `ops` run after `setup` (both on a fresh tiny file system of `len`
/// bytes mounted in place); `check(fs)` runs after each op of the workload.
pub(crate) fn crash_seq(
    len: usize,
    setup: &[Op],
    ops: &[Op],
    domain: Domain,
    probe: &(dyn Fn(&Fs<Arc<CrashSim>>, &Op) + Sync),
    seen: &(dyn Fn(&Snap, &Acked) + Sync),
) -> CrashReport {
    let mount = MountOptions::default();
    crash_seq_mount(len, setup, ops, domain, probe, seen, &mount)
}

/// `crash_seq`, the workload's mount made with `mount`.
pub(crate) fn crash_seq_mount(
    len: usize,
    setup: &[Op],
    ops: &[Op],
    domain: Domain,
    probe: &(dyn Fn(&Fs<Arc<CrashSim>>, &Op) + Sync),
    seen: &(dyn Fn(&Snap, &Acked) + Sync),
    mount: &MountOptions,
) -> CrashReport {
    let mut model = Model::default();
    for op in setup {
        model.apply(op).unwrap();
    }
    let setup_fs = |fs: &Fs<&CrashSim>| {
        for op in setup {
            run_op(fs, op).unwrap();
        }
        assert!(snap(fs).unwrap() == model.snap(), "setup matches its model");
    };
    let work = |fs: &Fs<Arc<CrashSim>>, a: &Mutex<Acked>| {
        let mut model = model.clone();
        for op in ops {
            let mut next = model.clone();
            next.apply(op).unwrap();
            {
                let mut g = a.lock();
                g.after = Some(next.snap());
                g.torn = match op {
                    // An append of under 64 KiB is all or nothing too: the size moves only
                    // when every byte it covers is there (docs/fs.md, the one-fence append).
                    Op::Write(p, off, len, _)
                        if model.size_of(p).is_some_and(|s| *off >= s) && *len < 65_536 =>
                    {
                        None
                    }
                    Op::Write(p, off, len, seed) if !model.is_atomic(p) => {
                        Some((p.clone(), *off, data_of(*off, *len, *seed)))
                    }
                    _ => None,
                };
            }
            run_op(fs, op).unwrap();
            probe(fs, op);
            model = next;
            let mut g = a.lock();
            (g.before, g.after, g.torn) = (Some(model.snap()), None, None);
        }
    };
    crash_custom_with(len, &setup_fs, &work, domain, seen, mount)
}
