//! `pmkit fs mount` end to end, through the kernel: random POSIX operations (writes, truncates,
//! directories, every rename flag, symlinks, hard links, FIFOs, chmod, xattrs) run on the FUSE mount
//! and on a reference tree in tmpfs, the kernel's own file system as the model: each operation
//! must succeed or fail with the same errno on both, and the trees must be equal after every
//! step batch, after unmount + remount, and `pmkit fs check` clean. Then kill -9 of the daemon
//! while files are written and fsynced: the next `pmkit fs mount` detaches the stale mount,
//! `check` is clean and every fsynced file is intact. And SIGTERM: unmounts, marks clean. A
//! second mount, and `check --repair`, of a mounted pool are refused.
//!
//! Needs root and /dev/fuse; skipped without them, except in CI (CI set), where it fails.
//! `PMKIT_KILL_TRIALS=N` runs N kill -9 trials (default 2).

mod fs_mount_util;

use fs_mount_util::*;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::Duration;

fn check_clean(s: &Scratch) {
    let out = run_ok(&["fs", "check", s.pool.to_str().unwrap()]);
    assert!(out.contains("clean") && !out.contains("NOT clean"), "{out}");
}

#[test]
fn random_operations_match_tmpfs_across_a_remount() {
    if !can_run() {
        return;
    }
    let s = scratch("64M");
    let reference = s.dir.path().join("reference");
    std::fs::create_dir(&reference).unwrap();
    let d = Daemon::start(&s, &["--threads", "2"]);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut outcomes = [0usize; 2];
    for step in 0..600 {
        let op = random_op(&mut rng);
        let want = apply(&reference, &op);
        let got = apply(&s.mnt, &op);
        assert_eq!(got, want, "step {step}: {op:?}");
        outcomes[want.is_ok() as usize] += 1;
        if step % 50 == 49 {
            assert_eq!(snapshot(&s.mnt), snapshot(&reference), "after step {step}");
        }
    }
    assert!(
        outcomes[1] > 150 && outcomes[0] > 150,
        "a mix of successes and errors: {outcomes:?}"
    );
    let want = snapshot(&reference);
    assert!(want.len() > 3, "{want:?}");
    assert_eq!(snapshot(&s.mnt), want);
    let out = d.umount();
    assert!(out.contains("marked the pool clean"), "{out}");
    check_clean(&s);
    let info = run_ok(&["fs", "info", s.pool.to_str().unwrap()]);
    assert!(
        info.contains("clean") && !info.contains("not unmounted cleanly"),
        "{info}"
    );
    let d = Daemon::start(&s, &[]);
    assert!(d.log().contains("last unmount clean"), "{}", d.log());
    assert_eq!(snapshot(&s.mnt), want, "after remount");
    d.umount();
}

#[test]
fn a_second_mount_is_refused_and_sigterm_unmounts_and_marks_clean() {
    if !can_run() {
        return;
    }
    let s = scratch("16M");
    let d = Daemon::start(&s, &[]);
    std::fs::write(s.mnt.join("f"), b"kept").unwrap();
    let o = pmkit()
        .args([
            "fs",
            "mount",
            s.pool.to_str().unwrap(),
            s.mnt.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("already mounted"),
        "{err}"
    );
    // repair refuses a mounted pool, naming the mount and the command that unmounts it
    let o = pmkit()
        .args(["fs", "check", s.pool.to_str().unwrap(), "--repair"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let mnt = std::fs::canonicalize(&s.mnt).unwrap();
    assert!(
        !o.status.success()
            && err.contains(&format!("not repaired: it is mounted on {}", mnt.display()))
            && err.contains(&format!("pid {}", d.child.id()))
            && err.contains(&format!("pmkit fs umount {}", mnt.display())),
        "{err}"
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(d.child.id() as i32, libc::SIGTERM) };
    let log_path = d.stderr.clone();
    let st = d.wait(Duration::from_secs(20));
    let log = std::fs::read_to_string(log_path).unwrap();
    assert!(st.success(), "{st:?}: {log}");
    assert!(
        log.contains("signal 15: unmounted") && log.contains("marked clean"),
        "{log}"
    );
    check_clean(&s);
    let info = run_ok(&["fs", "info", s.pool.to_str().unwrap()]);
    assert!(!info.contains("not unmounted cleanly"), "{info}");
    let d = Daemon::start(&s, &[]);
    assert_eq!(std::fs::read(s.mnt.join("f")).unwrap(), b"kept");
    d.umount();
}

#[test]
fn sigterm_with_a_file_open_detaches_and_serves_it_until_closed() {
    if !can_run() {
        return;
    }
    let s = scratch("16M");
    let d = Daemon::start(&s, &[]);
    let mut f = std::fs::File::create(s.mnt.join("held")).unwrap();
    f.write_all(b"before ").unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(d.child.id() as i32, libc::SIGTERM) };
    let t = std::time::Instant::now();
    while !d.log().contains("is busy: detaching") {
        assert!(t.elapsed() < Duration::from_secs(10), "{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        std::fs::read_dir(&s.mnt).unwrap().next().is_none(),
        "the directory is no longer the mount"
    );
    // The open file is still served, and its writes still reach PM.
    f.write_all(b"after").unwrap();
    f.sync_all().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut d = d;
    assert!(
        d.child.try_wait().unwrap().is_none(),
        "serving the open file"
    );
    drop(f);
    let log_path = d.stderr.clone();
    let st = d.wait(Duration::from_secs(20));
    let log = std::fs::read_to_string(log_path).unwrap();
    assert!(
        st.success() && log.contains("(lazily)") && log.contains("marked clean"),
        "{log}"
    );
    check_clean(&s);
    let d = Daemon::start(&s, &[]);
    assert_eq!(std::fs::read(s.mnt.join("held")).unwrap(), b"before after");
    d.umount();
}

fn content(i: usize, round: usize) -> Vec<u8> {
    (0..(i * 1499 + 700) % 20_000 + 1)
        .map(|j| (i * 31 + j * 7 + round) as u8)
        .collect()
}

#[test]
fn kill_9_of_the_daemon_while_writing_loses_no_fsynced_file() {
    if !can_run() {
        return;
    }
    let trials: usize = std::env::var("PMKIT_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let s = scratch("64M");
    // Files acknowledged by fsync, with their content (name -> (i, round)).
    let mut durable: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for trial in 0..trials {
        let d = Daemon::start(&s, &["--threads", "2"]);
        if trial > 0 {
            assert!(
                d.log().contains("detached a stale FUSE mount"),
                "the stale mount of the killed daemon: {}",
                d.log()
            );
            assert!(d.log().contains("NOT clean"), "{}", d.log());
        }
        for (name, &(i, round)) in &durable {
            assert_eq!(
                std::fs::read(s.mnt.join(name)).unwrap(),
                content(i, round),
                "trial {trial}: {name} was fsynced"
            );
        }
        let mnt = s.mnt.clone();
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let mnt = mnt.clone();
                std::thread::spawn(move || {
                    let mut acked = Vec::new();
                    for i in (w..).step_by(2) {
                        let name = format!("t{trial}-f{i}");
                        let r = (|| {
                            let mut f = std::fs::File::create(mnt.join(&name))?;
                            let data = content(i, trial);
                            f.write_all(&data[..data.len() / 2])?;
                            f.write_all_at(&data[data.len() / 2..], (data.len() / 2) as u64)?;
                            f.sync_all()
                        })();
                        match r {
                            Ok(()) => acked.push((name, (i, trial))),
                            Err(_) => return acked,
                        }
                    }
                    acked
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300 + 200 * trial as u64));
        d.kill_9();
        for w in writers {
            let acked = w.join().unwrap();
            assert!(!acked.is_empty() || trial > 0, "some files were written");
            durable.extend(acked);
        }
        check_clean(&s);
    }
    assert!(durable.len() > 10, "{}", durable.len());
    let d = Daemon::start(&s, &[]);
    for (name, &(i, round)) in &durable {
        assert_eq!(
            std::fs::read(s.mnt.join(name)).unwrap(),
            content(i, round),
            "{name}"
        );
    }
    d.umount();
    check_clean(&s);
}
