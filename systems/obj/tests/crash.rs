//! Crash proof of PMO Sync: run a workload of creates, single- and multi-object syncs and a
//! delete on the crash simulator, crash it at every fence (every image while few lines are
//! pending, a seeded sample beyond), recover each image with `Pool::open`, and check that every
//! object equals its contents after the last completed operation, or, for the operation in
//! flight, after it: all objects of one sync together, never a mix. Images whose recovery has
//! work to do (a committed intent to roll forward) are crashed again during recovery. The
//! `checksum_*` runs do the same on a pool with page CRCs: every image's published pages must
//! match their CRCs (`read_published` compares them, `check` must report no mismatch).

use pmkit_media::crashsim::{check_every_fence, check_every_fence_from, CrashOpts, CrashSim};
use pmkit_obj::{Access, ObjError, Pool, PoolOptions, Shadow, Tracking};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const LEN: usize = 128 * 1024;
type State = Option<BTreeMap<String, Vec<u8>>>;

/// What may be on media: the state after the last completed operation and, while one runs, the
/// state after it.
#[derive(Default, Clone)]
struct Expect {
    done: State,
    next: Option<State>,
}

fn opts() -> PoolOptions {
    opts_with(Shadow::Dram, false)
}

fn opts_with(shadow: Shadow, checksum: bool) -> PoolOptions {
    PoolOptions {
        max_objects: 8,
        protect: false,
        shadow,
        checksum,
        ..PoolOptions::default()
    }
}

/// Recover `sim` and read every object's published contents (in a checksummed pool each page
/// is compared with its CRC: a mismatch fails the read, and `check` must find none).
fn recovered(sim: &CrashSim) -> Result<(State, bool), String> {
    let report = Pool::check(&sim);
    if let Some(found) = report
        .errors
        .iter()
        .find(|e| e.contains("checksum mismatch"))
    {
        return Err(format!("published data fails its CRC: {found}"));
    }
    // A reader that may not write sees the same pool, or is told to let a writer recover it.
    let read_only = Pool::open_read_only(sim).map(|p| {
        let names: Vec<String> = p.list().into_iter().map(|o| o.name).collect();
        names
            .iter()
            .map(|n| (n.clone(), p.read_published(n).map_err(|e| e.to_string())))
            .collect::<Vec<_>>()
    });
    match (&read_only, &report.pending_intent) {
        (Err(ObjError::NeedsRecovery { .. }), Some(_)) | (Ok(_), None) => {}
        (Err(ObjError::NotAPool(_)), _) => {}
        (r, pending) => {
            return Err(format!(
                "read-only open: {:?} with pending intent {pending:?}",
                r.as_ref().err()
            ))
        }
    }
    match Pool::open(sim, &opts()) {
        Ok((pool, rec)) => {
            if let Ok(seen) = &read_only {
                if seen.len() != pool.list().len() {
                    return Err("read-only open listed other objects".into());
                }
                for (name, data) in seen {
                    let want = pool.read_published(name).map_err(|e| e.to_string());
                    if *data != want {
                        return Err(format!("read-only open saw {name} differently"));
                    }
                }
            }
            let mut m = BTreeMap::new();
            for o in pool.list() {
                m.insert(
                    o.name.clone(),
                    pool.read_published(&o.name).map_err(|e| e.to_string())?,
                );
            }
            Ok((
                Some(m),
                !rec.rolled_forward.is_empty() || report.pending_intent.is_some(),
            ))
        }
        Err(ObjError::NotAPool(_)) => Ok((None, false)),
        Err(e) => Err(format!("recovery failed: {e}")),
    }
}

fn matches(got: &State, e: &Expect) -> Result<(), String> {
    if *got == e.done || e.next.as_ref() == Some(got) {
        return Ok(());
    }
    let show = |s: &State| match s {
        None => "no pool".to_string(),
        Some(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={:?}..", &v[..v.len().min(4)]))
            .collect::<Vec<_>>()
            .join(" "),
    };
    Err(format!(
        "recovered [{}] but expected [{}] or [{}]",
        show(got),
        show(&e.done),
        e.next.as_ref().map(show).unwrap_or_default()
    ))
}

/// The workload: every operation announces its outcome before it starts and confirms it after.
fn workload(sim: &CrashSim, expect: &Arc<Mutex<Expect>>, shadow: Shadow, checksum: bool) {
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let step = |model: &BTreeMap<String, Vec<u8>>, f: &mut dyn FnMut()| {
        expect.lock().unwrap().next = Some(Some(model.clone()));
        f();
        let mut e = expect.lock().unwrap();
        e.done = Some(model.clone());
        e.next = None;
    };
    expect.lock().unwrap().next = Some(Some(model.clone()));
    let pool = Pool::format(sim, &opts_with(shadow, checksum)).unwrap();
    assert_eq!(pool.checksum(), checksum);
    *expect.lock().unwrap() = Expect {
        done: Some(model.clone()),
        next: None,
    };
    // The DRAM shadow has addresses even on the simulator: track one object by write faults.
    let tracked = match shadow {
        Shadow::Dram => Tracking::Faults,
        Shadow::Pm => Tracking::Explicit,
    };
    for (name, size) in [("a", 5000usize), ("b", 100), ("c", 8192)] {
        model.insert(name.into(), vec![0; size]);
        step(&model, &mut || pool.create(name, size as u64).unwrap());
    }
    let a = pool.attach_with("a", Access::ReadWrite, tracked).unwrap();
    let b = pool
        .attach_with("b", Access::ReadWrite, Tracking::Explicit)
        .unwrap();
    let c = pool
        .attach_with("c", Access::ReadWrite, Tracking::Whole)
        .unwrap();
    let put = |model: &mut BTreeMap<String, Vec<u8>>,
               h: &pmkit_obj::Handle<'_, &CrashSim>,
               name: &str,
               off: usize,
               v: &[u8]| {
        h.write(off as u64, v).unwrap();
        model.get_mut(name).unwrap()[off..off + v.len()].copy_from_slice(v);
    };
    // 1. One object, two pages.
    put(&mut model, &a, "a", 4000, &[1; 200]);
    step(&model, &mut || a.sync().unwrap());
    // 2. Three objects at once (intent in the Sync Table).
    put(&mut model, &a, "a", 10, &[2; 30]);
    put(&mut model, &b, "b", 0, &[3; 100]);
    put(&mut model, &c, "c", 4090, &[4; 20]);
    step(&model, &mut || pool.sync(&[&a, &b, &c]).unwrap());
    // 3. The previous sync's pages must survive a sync that does not write them (DRAM shadow:
    //    a raw store through the pointer, recorded by the fault handler).
    if shadow == Shadow::Dram {
        let p = a.as_ptr().unwrap().unwrap();
        // SAFETY: byte 4999 of the 5000-byte object, read-write handle, its own DRAM buffer.
        unsafe { p.add(4999).write_volatile(5) };
        model.get_mut("a").unwrap()[4999] = 5;
    } else {
        put(&mut model, &a, "a", 4999, &[5]);
    }
    step(&model, &mut || a.sync().unwrap());
    // 4. Two objects again.
    put(&mut model, &b, "b", 50, &[6; 10]);
    put(&mut model, &c, "c", 0, &[7; 8]);
    step(&model, &mut || pool.sync(&[&b, &c]).unwrap());
    // 5. Unsynced writes vanish with detach; a delete; a re-attach catches up its shadow.
    b.write(0, &[9; 100]).unwrap();
    pool.detach(b).unwrap();
    model.remove("b");
    step(&model, &mut || pool.delete("b").unwrap());
    pool.detach(a).unwrap();
    let a = pool
        .attach_with("a", Access::ReadWrite, Tracking::Explicit)
        .unwrap();
    put(&mut model, &a, "a", 0, &[8; 4]);
    put(&mut model, &c, "c", 8000, &[10; 192]);
    step(&model, &mut || pool.sync(&[&a, &c]).unwrap());
}

fn crash_opts() -> CrashOpts {
    CrashOpts {
        k: 8,
        random_images: 48,
        ..CrashOpts::default()
    }
}

#[test]
fn every_crash_image_recovers_to_a_completed_sync() {
    run(crash_opts(), Shadow::Dram);
}

#[test]
fn every_crash_image_recovers_with_torn_words() {
    run(
        CrashOpts {
            word_stores: true,
            ..crash_opts()
        },
        Shadow::Dram,
    );
}

#[test]
fn every_crash_image_recovers_under_eadr() {
    run(
        CrashOpts {
            domain: pmkit_media::Domain::Eadr,
            ..crash_opts()
        },
        Shadow::Dram,
    );
}

#[test]
fn checksum_every_crash_image_recovers_to_a_completed_sync() {
    run_with(crash_opts(), Shadow::Dram, true);
}

#[test]
fn checksum_every_crash_image_recovers_with_torn_words() {
    run_with(
        CrashOpts {
            word_stores: true,
            ..crash_opts()
        },
        Shadow::Dram,
        true,
    );
}

#[test]
fn checksum_pm_shadow_every_crash_image_recovers_to_a_completed_sync() {
    run_with(crash_opts(), Shadow::Pm, true);
}

#[test]
fn pm_shadow_every_crash_image_recovers_to_a_completed_sync() {
    run(crash_opts(), Shadow::Pm);
}

#[test]
fn pm_shadow_every_crash_image_recovers_with_torn_words() {
    run(
        CrashOpts {
            word_stores: true,
            ..crash_opts()
        },
        Shadow::Pm,
    );
}

#[test]
fn pm_shadow_every_crash_image_recovers_under_eadr() {
    run(
        CrashOpts {
            domain: pmkit_media::Domain::Eadr,
            ..crash_opts()
        },
        Shadow::Pm,
    );
}

fn run(copts: CrashOpts, shadow: Shadow) {
    run_with(copts, shadow, false);
}

fn run_with(copts: CrashOpts, shadow: Shadow, checksum: bool) {
    let expect = Arc::new(Mutex::new(Expect::default()));
    let e2 = expect.clone();
    let mut nested = 0u64;
    let report = check_every_fence(
        LEN,
        &copts,
        |sim| workload(sim, &expect, shadow, checksum),
        |sim| {
            let want = e2.lock().unwrap().clone();
            let (got, had_work) = recovered(sim)?;
            matches(&got, &want)?;
            if had_work && nested < 40 {
                // Crash again, at every fence of recovery itself: the result must not change.
                nested += 1;
                let mut img = vec![0u8; LEN];
                pmkit_media::Media::read(sim, 0, &mut img);
                let inner_want = Expect {
                    done: got.clone(),
                    next: None,
                };
                let r = check_every_fence_from(
                    img,
                    &copts,
                    |s| {
                        let _ = Pool::open(s, &opts());
                    },
                    |s| matches(&recovered(s)?.0, &inner_want),
                );
                if !r.is_clean() {
                    return Err(format!("crash during recovery: {r}"));
                }
            }
            Ok(())
        },
    );
    println!("{report}");
    report.assert_clean();
    assert!(
        report.crash_points > 20,
        "the workload must cross many fences: {report}"
    );
    assert!(
        nested > 0,
        "some images must need recovery work (a committed intent)"
    );
}

/// The check must be able to fail: a pool whose sync skips the fence before publishing would be
/// caught. We simulate the bug by publishing a new word without persisting the shadow: for the
/// PM shadow (stores + clwb) and for the DRAM shadow (the target slot written with streaming
/// stores, as its sync does).
#[test]
fn checker_catches_a_torn_publication() {
    for nt in [false, true] {
        torn_publication_is_caught(nt);
    }
}

fn torn_publication_is_caught(nt: bool) {
    use pmkit_media::Media;
    let expect = Arc::new(Mutex::new(Expect::default()));
    let e2 = expect.clone();
    let report = check_every_fence(
        LEN,
        &crash_opts(),
        |sim| {
            let pool = Pool::format(sim, &opts()).unwrap();
            pool.create("a", 4096).unwrap();
            let mut model = BTreeMap::new();
            model.insert("a".to_string(), vec![0u8; 4096]);
            *expect.lock().unwrap() = Expect {
                done: Some(model.clone()),
                next: None,
            };
            let g = pool.geometry();
            let info = pool.list().remove(0);
            drop(pool);
            // Buggy sync: write the shadow (slot 1), publish at once, fence only at the end.
            if nt {
                sim.write_nt(info.offset as usize + 4096, &[1; 4096]);
            } else {
                sim.write(info.offset as usize + 4096, &[1; 4096]);
            }
            sim.store_u64(g.table_off as usize, (2 << 2) | (1 << 1) | 1);
            sim.flush(g.table_off as usize, 8, pmkit_media::Flush::Clwb);
            sim.flush(info.offset as usize + 4096, 4096, pmkit_media::Flush::Clwb);
            model.get_mut("a").unwrap().fill(1);
            expect.lock().unwrap().next = Some(Some(model));
            sim.fence(pmkit_media::Fence::Sfence);
        },
        |sim| matches(&recovered(sim)?.0, &e2.lock().unwrap()),
    );
    assert!(
        !report.is_clean(),
        "a publication before the data is durable must be caught (nt: {nt}): {report}"
    );
}
