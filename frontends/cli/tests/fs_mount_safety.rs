//! What a user of a PMFS mount must never meet, through the kernel on both FUSE transports:
//! a mkfs, obj create or create of the mounted pool wiping the live file system (each is
//! refused, naming the mount's daemon; the files stay and the mount keeps serving; a check says
//! it reads a live file system), and a request the daemon never answers (a time before 1970, which once panicked an io_uring queue
//! thread and left the caller in uninterruptible sleep; times before 1970 and after 2038 are
//! kept, also across a remount), and an fsync that reports success for data the kernel dropped
//! (after the daemon died, the kernel drops dirty pages it cannot send without an error; only a
//! request of fsync's own reports the dead connection).
//!
//! Needs root and /dev/fuse; skipped without them, except in CI (CI set), where it fails.

mod fs_mount_util;

use fs_mount_util::*;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::process::Command;
use std::time::{Duration, Instant};

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
    // A check of the mounted pool runs (read-only) and says that it reads a live file system.
    let o = pmkit().args(["fs", "check", p]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("note: in use by pid") && out.contains("live file system"),
        "{out}"
    );
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

/// A request the daemon never answers (a handler stuck on a bug; here the test-only failpoint
/// `PMKIT_FS_TEST_STALL`) holds its caller in uninterruptible sleep. SIGTERM still ends the
/// mount: after its grace the daemon aborts the FUSE connection (the caller gets an error) and
/// exits without marking the pool clean; `pmkit fs umount` does the same from outside. The next
/// mount recovers, and the files are there.
#[test]
fn a_stuck_request_does_not_keep_stop_or_umount_from_finishing() {
    if !can_run() {
        return;
    }
    each_transport(a_stuck_request_does_not_keep_stop_or_umount_from_finishing_over);
}

fn a_stuck_request_does_not_keep_stop_or_umount_from_finishing_over(t: &str) {
    let s = scratch("16M");
    for by_umount in [false, true] {
        // A short grace (the default is 10 s) keeps the test short.
        let d = Daemon::start_with_env(
            &s,
            &["--transport", t, "--stop-grace", "1"],
            &[("PMKIT_FS_TEST_STALL", "stuck")],
        );
        std::fs::write(s.mnt.join("kept"), b"kept").unwrap();
        let mut caller = Command::new("stat")
            .arg(s.mnt.join("stuck"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        assert!(caller.try_wait().unwrap().is_none(), "the lookup is stuck");
        let t0 = Instant::now();
        if by_umount {
            // Busy with no holder but the stuck caller: umount asks the daemon to stop, which
            // aborts the request; the daemon exits unclean, and umount says so.
            let o = pmkit()
                .args(["fs", "umount", s.mnt.to_str().unwrap(), "--wait", "40"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                !o.status.success() && err.contains("WITHOUT marking the pool clean"),
                "{err}"
            );
        } else {
            // SAFETY: kill(2) of our own child.
            unsafe { libc::kill(d.child.id() as i32, libc::SIGTERM) };
        }
        // The caller is freed by the abort, with an error, not an answer.
        let freed = loop {
            if let Some(st) = caller.try_wait().unwrap() {
                break st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(40),
                "the caller was never freed"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(!freed.success());
        let log = d.log();
        let st = d.wait(Duration::from_secs(40));
        assert!(!st.success(), "a daemon that left a handler behind exits 2");
        assert!(log.is_empty() || !log.contains("marked clean"), "{log}");
    }
    // The next mount detaches what is left and recovers; the file written before is there.
    let d = Daemon::start(&s, &["--transport", t]);
    assert_eq!(std::fs::read(s.mnt.join("kept")).unwrap(), b"kept");
    d.umount();
    let check = run_ok(&["fs", "check", s.pool.to_str().unwrap()]);
    assert!(!check.contains("NOT clean"), "{check}");
}

/// Data the kernel holds dirty (a shared mapping; `--cache writeback`'s page cache) when the
/// daemon dies is dropped by the kernel without an error of its own (`fuse_send_writepage` on a
/// broken connection). An fsync after the death must fail, never report it durable: the mount
/// answers FSYNC (were it to answer ENOSYS once, the kernel would stop asking, and such an fsync
/// would succeed with the data gone).
#[test]
fn an_fsync_after_the_daemon_died_fails_and_never_acknowledges_lost_data() {
    if !can_run() {
        return;
    }
    each_transport(an_fsync_after_the_daemon_died_fails_over);
}

fn an_fsync_after_the_daemon_died_fails_over(t: &str) {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    for (cache, by_map) in [("none", true), ("writeback", false), ("writeback", true)] {
        let s = scratch("16M");
        let d = Daemon::start(&s, &["--transport", t, "--cache", cache]);
        let path = s.mnt.join("f");
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.write_all(&[1u8; 8192]).unwrap();
        // A first fsync: the one a mount that answered ENOSYS would answer last.
        f.sync_all().unwrap();
        // SAFETY: a shared mapping of our own 8 KiB file, unmapped below; only this test
        // touches it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert!(map != libc::MAP_FAILED, "mmap over {t}");
        let log = d.log();
        d.kill_9();
        let changed = if by_map {
            // SAFETY: inside the live 8 KiB mapping.
            unsafe { std::ptr::write_bytes(map.cast::<u8>(), 2, 8192) };
            true
        } else {
            f.write_all_at(&[2u8; 8192], 0).is_ok()
        };
        let synced = f.sync_all();
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(map, 8192) };
        drop(f);
        assert!(
            synced.is_err() || !changed,
            "over {t}, cache {cache}, {}: fsync reported data durable that the kernel \
             dropped with the daemon; the mount's log:\n{log}",
            if by_map { "mmap" } else { "write" }
        );
        // The next mount recovers what was durable: the first 8 KiB.
        let d = Daemon::start(&s, &["--transport", t]);
        assert_eq!(std::fs::read(&path).unwrap(), vec![1u8; 8192], "over {t}");
        d.umount();
    }
}
