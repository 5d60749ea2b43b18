//! What a user of a PMFS mount must never meet, through the kernel on both FUSE transports:
//! a mkfs, obj create or create of the mounted pool wiping the live file system (each is
//! refused, naming the mount's daemon; the files stay and the mount keeps serving), and a
//! request the daemon never answers (a time before 1970, which once panicked an io_uring queue
//! thread and left the caller in uninterruptible sleep; times before 1970 and after 2038 are
//! kept, also across a remount).
//!
//! Needs root and /dev/fuse; skipped without them, except in CI (CI set), where it fails.

mod fs_mount_util;

use fs_mount_util::*;
use std::os::unix::fs::MetadataExt;
use std::process::Command;

#[test]
fn formatting_a_mounted_pool_is_refused_and_the_mount_serves_on() {
    if !can_run() {
        return;
    }
    each_transport(formatting_a_mounted_pool_is_refused_over);
}

fn formatting_a_mounted_pool_is_refused_over(t: &str) {
    let s = scratch("16M");
    let d = Daemon::start(&s, &["--transport", t]);
    std::fs::write(s.mnt.join("kept"), b"still here").unwrap();
    let p = s.pool.to_str().unwrap();
    for args in [
        &["fs", "mkfs", p][..],
        &["fs", "mkfs", p, "--force"],
        &["obj", "create", p, "--force"],
        &["create", p, "--force"],
    ] {
        let o = pmkit().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?} was not refused: {err}");
        assert!(
            err.contains("in use by pid") && err.contains("fs mount"),
            "{args:?}: {err}"
        );
    }
    // The mount serves on: old files read back, new ones are made.
    assert_eq!(std::fs::read(s.mnt.join("kept")).unwrap(), b"still here");
    std::fs::write(s.mnt.join("new"), b"after").unwrap();
    assert_eq!(std::fs::read(s.mnt.join("new")).unwrap(), b"after");
    let out = d.umount();
    assert!(out.contains("marked the pool clean"), "{out}");
    let check = run_ok(&["fs", "check", p]);
    assert!(
        check.contains("2 files") && !check.contains("NOT clean"),
        "{check}"
    );
}

#[test]
fn times_before_1970_and_after_2038_are_kept() {
    if !can_run() {
        return;
    }
    each_transport(times_before_1970_and_after_2038_are_kept_over);
}

fn times_before_1970_and_after_2038_are_kept_over(t: &str) {
    let s = scratch("16M");
    // (touch -d argument, seconds and nanoseconds stat must show)
    let cases = [
        ("1960-01-01 01:01:30 UTC", -315_615_510i64, 0i64),
        ("1969-12-31 23:59:58.5 UTC", -2, 500_000_000),
        ("1901-12-13 20:45:52 UTC", -2_147_483_648, 0),
        ("2100-01-01 00:00:00.25 UTC", 4_102_444_800, 250_000_000),
    ];
    let d = Daemon::start(&s, &["--transport", t]);
    for (i, (when, _, _)) in cases.iter().enumerate() {
        let f = s.mnt.join(format!("f{i}"));
        std::fs::write(&f, b"x").unwrap();
        // A bounded wait: an unanswered request would hang here for good.
        let st = Command::new("timeout")
            .args(["20", "touch", "-d", when])
            .arg(&f)
            .status()
            .unwrap();
        assert!(st.success(), "touch -d {when:?} over {t}: {st}");
    }
    let seen = |d: &std::path::Path| -> Vec<(i64, i64, i64, i64)> {
        (0..cases.len())
            .map(|i| {
                let m = std::fs::metadata(d.join(format!("f{i}"))).unwrap();
                (m.mtime(), m.mtime_nsec(), m.atime(), m.atime_nsec())
            })
            .collect()
    };
    let want: Vec<_> = cases.iter().map(|&(_, s, n)| (s, n, s, n)).collect();
    assert_eq!(seen(&s.mnt), want, "over {t}");
    // The mount still serves after them.
    std::fs::write(s.mnt.join("after"), b"ok").unwrap();
    d.umount();
    let d = Daemon::start(&s, &["--transport", t]);
    assert_eq!(seen(&s.mnt), want, "after a remount, over {t}");
    d.umount();
}
