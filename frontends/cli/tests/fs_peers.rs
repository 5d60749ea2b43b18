//! The FUSE mount and shim processes on one pool at once (docs/fs-sharing.md): the
//! mount's daemon serves the shim's processes beside the kernel, and after each of their calls
//! tells the kernel to drop what it cached of what the call changed. Under `--cache long` (the
//! default) the kernel would otherwise answer from its caches for an hour: the mount reads every
//! file, name and listing first, so each stale answer would show.

mod fs_mount_util;

use fs_mount_util::*;
use pmkit_testkit::acked::{preload_so, Appender};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// Shim processes of the pool in `s`, under the prefix `px`.
struct Shim {
    so: PathBuf,
    pool: PathBuf,
    px: PathBuf,
}

impl Shim {
    fn new(s: &Scratch) -> Shim {
        let px = s.dir.path().join("px");
        std::fs::create_dir(&px).unwrap();
        Shim {
            so: preload_so(),
            pool: s.pool.clone(),
            px,
        }
    }

    fn cmd(&self, script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        self.env(c)
    }

    /// `c` with the shim preloaded ($P is the prefix).
    fn env(&self, mut c: Command) -> Command {
        c.env("LD_PRELOAD", &self.so)
            .env("PMKIT_PRELOAD_POOL", &self.pool)
            .env("PMKIT_PRELOAD_PREFIX", &self.px)
            .env("P", &self.px);
        c
    }

    /// `script` under sh with the shim ($P is the prefix); its stdout, or a panic.
    fn sh(&self, script: &str) -> String {
        let out: Output = self.cmd(script).output().unwrap();
        assert!(
            out.status.success(),
            "{script}: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn one_file_system(transport: &str) {
    let s = scratch("64M");
    let d = Daemon::start(&s, &["--transport", transport]);
    assert!(
        d.log()
            .contains("processes may use the pool beside the mount"),
        "{}",
        d.log()
    );
    let m = |p: &str| s.mnt.join(p);
    let shim = Shim::new(&s);

    // The mount makes files and reads them: now cached (attributes, names, pages, a miss).
    std::fs::create_dir(m("d")).unwrap();
    std::fs::write(m("a"), "one\n").unwrap();
    std::fs::write(m("d/keep"), "kept\n").unwrap();
    assert_eq!(read(&m("a")), "one\n");
    assert!(!m("b").exists());
    assert_eq!(names(&m("d")), ["keep"]);
    let ino_a = std::fs::metadata(m("a")).unwrap().ino();

    // The shim sees the mount's writes at once.
    assert_eq!(shim.sh("cat $P/a $P/d/keep"), "one\nkept\n");

    // The shim's changes: an overwrite of the same size, a new name where the mount saw none,
    // a listing changed, a mode, a truncate, an append.
    shim.sh(
        "set -e; printf two > $P/a.new; echo two > $P/a; echo bee > $P/b; echo x > $P/d/new; \
         chmod 600 $P/d/keep; echo more >> $P/d/keep; rm $P/a.new",
    );
    assert_eq!(
        read(&m("a")),
        "two\n",
        "the page cache of an overwritten file"
    );
    assert_eq!(std::fs::metadata(m("a")).unwrap().ino(), ino_a);
    assert_eq!(
        read(&m("b")),
        "bee\n",
        "a name the kernel had cached as missing"
    );
    assert_eq!(names(&m("d")), ["keep", "new"], "a cached listing");
    let keep = std::fs::metadata(m("d/keep")).unwrap();
    assert_eq!(keep.permissions().mode() & 0o777, 0o600);
    assert_eq!(read(&m("d/keep")), "kept\nmore\n");

    // Renames, removals and a directory replaced: the old names go from the kernel's caches.
    shim.sh("set -e; mv $P/b $P/d/b2; rm $P/a; mkdir $P/e; mv $P/d/new $P/e/n");
    assert!(!m("a").exists(), "a name removed by a peer");
    assert!(!m("b").exists());
    assert_eq!(read(&m("d/b2")), "bee\n");
    assert_eq!(names(&m("")), ["d", "e"]);
    assert_eq!(read(&m("e/n")), "x\n");

    // A file the mount holds open: a peer's writes reach its reads, and its writes the peer.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m("e/n"))
        .unwrap();
    shim.sh("printf 'abcdefgh' > $P/e/n");
    let mut got = String::new();
    std::io::Read::read_to_string(&mut &f, &mut got).unwrap();
    assert_eq!(got, "abcdefgh");
    std::os::unix::fs::FileExt::write_all_at(&f, b"XY", 2).unwrap();
    assert_eq!(shim.sh("cat $P/e/n"), "abXYefgh");
    drop(f);

    // The prefix may be the mount point itself: the same paths, served by the shim in shim
    // processes and by the kernel in the others.
    let same = Shim {
        so: preload_so(),
        pool: s.pool.clone(),
        px: s.mnt.clone(),
    };
    assert_eq!(same.sh("echo z > $P/z; cat $P/d/b2 $P/z"), "bee\nz\n");
    assert_eq!(read(&m("z")), "z\n");

    // A peer killed with files open: the mount and other peers go on.
    let mut child = shim
        .cmd("exec 3>$P/held; echo start >&3; sleep 30")
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(read(&m("held")), "start\n");
    assert_eq!(shim.sh("cat $P/held"), "start\n");

    d.umount();
    check_clean(&s);
}

#[test]
fn shim_processes_and_the_mount_see_one_file_system_at_once() {
    if !can_run() {
        return;
    }
    each_transport(one_file_system);
}

#[test]
fn unmounting_ends_the_peers_sessions_and_leaves_the_pool_clean() {
    if !can_run() {
        return;
    }
    let s = scratch("64M");
    let d = Daemon::start(&s, &[]);
    let shim = Shim::new(&s);
    let out = s.dir.path().join("client.out");
    let client = shim
        .cmd(&format!(
            "exec 3>$P/f; echo before >&3; sleep 2; echo after >&3 2>>{o} || echo cut >> {o}",
            o = out.display()
        ))
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let log = d.umount();
    assert!(log.contains("marked the pool clean"), "{log}");
    let st = wait_for(client);
    assert!(st.success());
    assert!(
        read(&out).contains("cut"),
        "the peer's call after the unmount failed"
    );
    check_clean(&s);
    // The pool holds what the peer wrote before.
    let d = Daemon::start(&s, &[]);
    assert_eq!(read(&s.mnt.join("f")), "before\n");
    d.umount();
}

#[test]
fn a_read_only_mount_serves_no_peer() {
    if !can_run() {
        return;
    }
    let s = scratch("64M");
    let d = Daemon::start(&s, &["--read-only"]);
    assert!(
        !d.log().contains("processes may use the pool"),
        "{}",
        d.log()
    );
    let shim = Shim::new(&s);
    let out = shim.cmd("echo x > $P/f").output().unwrap();
    assert!(!out.status.success(), "a write beside a read-only mount");
    d.umount();
}

fn wait_for(mut c: std::process::Child) -> std::process::ExitStatus {
    for _ in 0..200 {
        if let Some(st) = c.try_wait().unwrap() {
            return st;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    panic!("a shim process did not end");
}

/// The mount's daemon killed (SIGKILL) while a shim process appends and fsyncs beside the
/// kernel: the next mount recovers the pool with every line the shim process had acknowledged,
/// and `check` is clean.
#[test]
fn a_killed_mount_loses_nothing_a_peer_acknowledged() {
    if !can_run() || !pmkit_testkit::need_tool(&["python3"]) {
        return;
    }
    let s = scratch("64M");
    let d = Daemon::start(&s, &[]);
    let shim = Shim::new(&s);
    let log = shim.px.join("log");
    let mut client = Appender::start(shim.env(Command::new("python3")), log.to_str().unwrap());
    client.wait_for(300);
    d.kill_9();
    // The client's next calls fail; whatever it printed before it stops was acknowledged.
    let acked = client.finish();
    let d = Daemon::start(&s, &[]);
    assert!(d.log().contains("NOT clean"), "{}", d.log());
    let text = read(&s.mnt.join("log"));
    let got: Vec<u64> = text.lines().map(|l| l.parse().unwrap()).collect();
    assert!(
        got.len() as u64 >= acked,
        "{} lines, {acked} acknowledged",
        got.len()
    );
    assert!(
        got.iter().enumerate().all(|(i, &v)| v == i as u64),
        "lines in order, none torn"
    );
    d.umount();
    check_clean(&s);
}
