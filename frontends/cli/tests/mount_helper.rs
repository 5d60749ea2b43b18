//! `mount.fuse.pmkit`, mount(8)'s helper (the `pmkit` executable under that name): it returns
//! once the file system is mounted, leaves the daemon serving with its messages in the log,
//! `umount` stops the daemon and the pool is clean; a failed mount exits 32 with the reason, a
//! wrong option 1. (`mount -t fuse.pmkit` and fstab lines through util-linux, which look for the
//! helper in /sbin, run in scripts/package-test.sh on the installed package.) Needs root and
//! /dev/fuse; skipped without them, except in CI.

mod fs_mount_util;

use fs_mount_util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn helper(s: &Scratch) -> PathBuf {
    let h = s.dir.path().join("mount.fuse.pmkit");
    if !h.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_pmkit"), &h).unwrap();
    }
    h
}

fn mount(s: &Scratch, args: &[&str]) -> Output {
    Command::new(helper(s))
        .arg(&s.pool)
        .arg(&s.mnt)
        .args(args)
        .output()
        .unwrap()
}

/// The daemon's pid, from the mount's source `pmkit-fs[PID]:POOL` in the mount table.
fn daemon_of(mnt: &Path) -> Option<i32> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (src, at) = (f.next()?, f.next()?);
        (Path::new(at) == mnt).then_some(())?;
        src.strip_prefix("pmkit-fs[")?
            .split_once(']')?
            .0
            .parse()
            .ok()
    })
}

fn gone(pid: i32, limit: Duration) -> bool {
    let t = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn mounts_in_the_background_and_umount_leaves_the_pool_clean() {
    if !can_run() {
        return;
    }
    let s = scratch("32M");
    let log = s.dir.path().join("daemon.log");
    let o = mount(
        &s,
        &[
            "-o",
            &format!("rw,noauto,threads=2,noatime,log={}", log.display()),
        ],
    );
    assert!(o.status.success(), "{o:?}");
    // A mount that works says nothing, as mount(8) expects of a helper.
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "{o:?}");
    let pid = daemon_of(&s.mnt).expect("mounted, with the daemon in the source");
    std::fs::write(s.mnt.join("f"), b"through the helper").unwrap();
    let u = Command::new("umount").arg(&s.mnt).output().unwrap();
    assert!(u.status.success(), "{u:?}");
    assert!(
        gone(pid, Duration::from_secs(30)),
        "daemon {pid} still runs"
    );
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("marked clean"), "{said}");
    check_clean(&s);
    // The same pool again, read-only: the file is there.
    let o = mount(&s, &["-o", "ro", "-o", &format!("log={}", log.display())]);
    assert!(o.status.success(), "{o:?}");
    let pid = daemon_of(&s.mnt).unwrap();
    assert_eq!(
        std::fs::read(s.mnt.join("f")).unwrap(),
        b"through the helper"
    );
    let e = std::fs::write(s.mnt.join("g"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    run_ok(&["fs", "umount", s.mnt.to_str().unwrap()]);
    assert!(gone(pid, Duration::from_secs(30)));
    check_clean(&s);
}

#[test]
fn a_failed_mount_exits_32_with_the_reason_and_a_wrong_option_1() {
    if !can_run() {
        return;
    }
    let s = scratch("32M");
    let o = mount(&s, &["-o", "bogus"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("bogus"));
    // -s (sloppy) ignores it; -f (fake) mounts nothing and shows the command.
    let o = mount(&s, &["-s", "-f", "-o", "bogus,cache=short"]);
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("fs mount") && err.contains("--cache short"),
        "{err}"
    );
    assert!(daemon_of(&s.mnt).is_none());
    std::fs::remove_file(&s.pool).unwrap();
    let o = mount(&s, &[]);
    assert_eq!(o.status.code(), Some(32), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("does not exist"), "{err}");
}
