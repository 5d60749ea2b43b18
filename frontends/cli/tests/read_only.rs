//! `pmkit info`, `pmkit check` and `pmkit serve --read-only` open the device read-only: they
//! work on a read-only bind mount and for a user with read permission only, and leave every
//! byte of the file as it was (sha256 before, during and after). `check --mark-clean` needs
//! write access and says so, with the OS error said once.
//!
//! Needs root (bind mounts, switching to `nobody`): skipped elsewhere, required in CI.

mod serve_util;

use serve_util::*;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIZE: &str = "4M";
const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
const EPERM: u32 = 1;

/// Root, and `mount` works here (a container may refuse it). In CI both are required.
fn have_root(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let ok = unsafe { libc::geteuid() } == 0;
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run {what} as root"
        );
        eprintln!("skipping: {what} needs root");
    }
    ok
}

fn sha256(p: &Path) -> String {
    ok(30, &["sha256sum", p.to_str().unwrap()])
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// A directory bind-mounted read-only over a scratch directory; unmounted on drop.
struct RoBind {
    rw: tempfile::TempDir,
    ro: PathBuf,
}

impl RoBind {
    /// `None` (after a note; a failure in CI) when this machine cannot mount.
    fn new() -> Option<RoBind> {
        let rw = shm_dir("pmkit-ro-rw");
        let ro = PathBuf::from(format!("{}-ro", rw.path().display()));
        std::fs::create_dir(&ro).unwrap();
        let bind = run(
            30,
            &[
                "mount",
                "--bind",
                rw.path().to_str().unwrap(),
                ro.to_str().unwrap(),
            ],
        );
        let b = RoBind { rw, ro };
        if !bind.status.success() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must allow bind mounts: {}",
                text(&bind)
            );
            eprintln!("skipping: cannot bind-mount here: {}", text(&bind));
            return None;
        }
        ok(
            30,
            &["mount", "-o", "remount,bind,ro", b.ro.to_str().unwrap()],
        );
        Some(b)
    }
}

impl Drop for RoBind {
    fn drop(&mut self) {
        let _ = run(30, &["umount", self.ro.to_str().unwrap()]);
        let _ = std::fs::remove_dir(&self.ro);
    }
}

/// The handshake of `serve_util::nbd_connect`, keeping the transmission flags of the export.
fn connect_flags(sock: &Path) -> (UnixStream, u16) {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    s.write_all(&3u32.to_be_bytes()).unwrap();
    let mut opt = Vec::new();
    opt.extend_from_slice(&0x4948_4156_454f_5054u64.to_be_bytes());
    opt.extend_from_slice(&7u32.to_be_bytes()); // GO
    opt.extend_from_slice(&6u32.to_be_bytes());
    opt.extend_from_slice(&0u32.to_be_bytes()); // default export
    opt.extend_from_slice(&0u16.to_be_bytes());
    s.write_all(&opt).unwrap();
    let mut flags = None;
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        let typ = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut d = vec![0u8; len as usize];
        s.read_exact(&mut d).unwrap();
        match typ {
            1 => return (s, flags.expect("NBD_INFO_EXPORT before ACK")),
            3 if u16::from_be_bytes([d[0], d[1]]) == 0 => {
                flags = Some(u16::from_be_bytes([d[10], d[11]]));
            }
            3 => {}
            t => panic!("GO failed: reply {t:#x}"),
        }
    }
}

/// Against a read-only export: advertised read-only, reads return the device's blocks, writes
/// and trims fail with EPERM, flush succeeds; the file's hash holds throughout.
fn exercise_read_only_export(sock: &Path, dev: &Path, hash: &str) {
    let (mut s, flags) = connect_flags(sock);
    assert_ne!(
        flags & NBD_FLAG_READ_ONLY,
        0,
        "export not advertised read-only"
    );
    // READ of 64 KiB at 0.
    s.write_all(&nbd_request(0, 1, 0, 65536)).unwrap();
    assert_eq!(nbd_reply(&mut s).unwrap(), (0, 1));
    let mut data = vec![0u8; 65536];
    s.read_exact(&mut data).unwrap();
    assert!(data.iter().all(|&b| b == 0x5a), "reads the data written");
    // WRITE: refused.
    let mut w = nbd_request(1, 2, 0, 4096);
    w.extend_from_slice(&[0xffu8; 4096]);
    s.write_all(&w).unwrap();
    assert_eq!(nbd_reply(&mut s).unwrap(), (EPERM, 2));
    // TRIM and WRITE_ZEROES: refused.
    s.write_all(&nbd_request(4, 3, 0, 4096)).unwrap();
    assert_eq!(nbd_reply(&mut s).unwrap(), (EPERM, 3));
    s.write_all(&nbd_request(6, 4, 0, 4096)).unwrap();
    assert_eq!(nbd_reply(&mut s).unwrap(), (EPERM, 4));
    // FLUSH: a no-op success.
    s.write_all(&nbd_request(3, 5, 0, 0)).unwrap();
    assert_eq!(nbd_reply(&mut s).unwrap(), (0, 5));
    assert_eq!(sha256(dev), hash, "the device file changed while served");
    s.write_all(&nbd_request(2, 6, 0, 0)).unwrap(); // DISC
}

/// A clean device of SIZE bytes at `path` whose first 64 KiB hold 0x5a, readable by all.
fn make_device(path: &Path) {
    let o = pmkit(&["create", path.to_str().unwrap(), "--size", SIZE]);
    assert!(o.status.success(), "{}", text(&o));
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    // The data area of a plain 4 KiB-block device starts at byte 4096.
    use std::io::Seek;
    f.seek(std::io::SeekFrom::Start(4096)).unwrap();
    f.write_all(&[0x5au8; 65536]).unwrap();
    drop(f);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// `info`, `info --json`, `check` succeed through `cmd` (a command prefix); `check
/// --mark-clean` fails, names the flag to drop and says the OS error once.
fn info_and_check(prefix: &[&str], dev: &Path, errno_text: &str) {
    let d = dev.to_str().unwrap();
    let pm = |args: &[&str]| {
        let mut all: Vec<&str> = prefix.to_vec();
        all.push(PMKIT);
        all.extend(args);
        run(60, &all)
    };
    let o = pm(&["info", d]);
    assert!(o.status.success(), "info: {}", text(&o));
    assert!(text(&o).contains("clean"), "{}", text(&o));
    let o = pm(&["info", d, "--json"]);
    assert!(o.status.success(), "info --json: {}", text(&o));
    let o = pm(&["check", d]);
    assert!(o.status.success(), "check: {}", text(&o));
    let o = pm(&["check", d, "--mark-clean"]);
    assert_eq!(o.status.code(), Some(2), "check --mark-clean: {}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("drop --mark-clean") && e.contains(d), "{e}");
    assert_eq!(e.matches(errno_text).count(), 1, "OS error said once: {e}");
}

#[test]
fn read_only_bind_mount() {
    if !have_root("the read-only bind mount test") || !have(&["sha256sum", "mount"]) {
        return;
    }
    let Some(m) = RoBind::new() else { return };
    make_device(&m.rw.path().join("dev.pmbd"));
    let dev = m.ro.join("dev.pmbd");
    let hash = sha256(&dev);
    info_and_check(&[], &dev, "os error 30");
    // The read-write paths still fail, with the OS error once.
    let o = pmkit(&["serve", dev.to_str().unwrap(), "--socket", "/nonexistent/x"]);
    assert!(!o.status.success());
    assert_eq!(text(&o).matches("os error 30").count(), 1, "{}", text(&o));

    let s = Serve::start(dev.to_str().unwrap(), &["--read-only"]);
    assert!(s.banner.contains("read-only"), "{}", s.banner);
    exercise_read_only_export(&s.sock, &dev, &hash);
    // `info` sees the read-only server (it holds a shared lock, not the exclusive one).
    let o = pmkit(&["info", dev.to_str().unwrap()]);
    assert!(
        text(&o).contains("open read-only by another process"),
        "{}",
        text(&o)
    );
    let (st, err) = s.stop();
    assert!(st.success(), "serve --read-only: {err}");
    assert_eq!(sha256(&dev), hash, "the device file changed");
    let o = pmkit(&["info", dev.to_str().unwrap()]);
    assert!(text(&o).contains("state         clean"), "{}", text(&o));
}

/// `pmkit serve --read-only PATH` as `nobody` (a pid of pmkit itself: setpriv execs).
fn serve_as_nobody(dev: &Path, dir: &Path) -> (Child, PathBuf) {
    let sock = dir.join("nbd.sock");
    let log = std::fs::File::create(dir.join("stderr.log")).unwrap();
    let mut child = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            PMKIT,
            "serve",
        ])
        .arg(dev)
        .arg("--socket")
        .arg(&sock)
        .arg("--read-only")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let t = Instant::now();
    while UnixStream::connect(&sock).is_err() {
        if let Some(st) = child.try_wait().unwrap() {
            let e = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
            panic!("serve as nobody exited early ({st}): {e}");
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "serve did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, sock)
}

#[test]
fn read_permission_only() {
    if !have_root("the read-permission-only test") || !have(&["setpriv", "sha256sum"]) {
        return;
    }
    let dir = shm_dir("pmkit-ro-user");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dev = dir.path().join("dev.pmbd");
    make_device(&dev);
    let hash = sha256(&dev);
    let nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    info_and_check(&nobody, &dev, "os error 13");

    let sockdir = shm_dir("pmkit-ro-sock");
    std::fs::set_permissions(sockdir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (mut child, sock) = serve_as_nobody(&dev, sockdir.path());
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let guard = Kill(&mut child);
    exercise_read_only_export(&sock, &dev, &hash);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(guard.0.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    let st = loop {
        if let Some(st) = guard.0.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "serve did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(sockdir.path().join("stderr.log")).unwrap_or_default();
    assert!(st.success(), "serve --read-only as nobody: {err}");
    assert_eq!(sha256(&dev), hash, "the device file changed");
}
