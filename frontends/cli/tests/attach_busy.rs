//! Detaching a busy attachment: a process's working directory or open file under the
//! mountpoint makes `pmkit detach` (and SIGTERM to `pmkit attach`) change nothing, name the
//! holder and keep the device served; `detach --lazy` unmounts lazily and the attaching process
//! serves the device until the file system released it; stale attachments (kill -9) are named
//! with how to clear them.
//!
//! Needs root, /dev/fuse, losetup and e2fsprogs. In CI (CI set) their absence fails the test.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod attach_util;
use attach_util::*;

const T: Duration = Duration::from_secs(30);

/// `sleep 60` with its working directory in `dir`.
fn holder_in(dir: &Path) -> Child {
    Command::new("sleep")
        .arg("60")
        .current_dir(dir)
        .spawn()
        .expect("spawn sleep")
}

fn end(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// Write and fsync a file under `mnt`, read it back: the mount still works.
fn write_fsynced(mnt: &Path, name: &str, data: &[u8]) {
    let p = mnt.join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(std::fs::read(&p).unwrap(), data, "{name} read back");
}

fn still_running(a: &mut Attached) {
    assert!(
        a.child.try_wait().unwrap().is_none(),
        "pmkit attach exited while the file system was busy: {}",
        a.stderr()
    );
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// Reattach and check `name` holds `want`, then detach and fsck.
fn reattached_intact(s: &Scratch, name: &str, want: &[u8]) {
    let mnt = s.mnt.to_str().unwrap();
    let a = attach(&s.pm, &["--mountpoint", mnt]);
    let got = std::fs::read(s.mnt.join(name)).unwrap();
    assert!(
        got == want,
        "{name}: {} bytes, want {}",
        got.len(),
        want.len()
    );
    a.detach(mnt);
    fsck_clean(&s.pm);
    let info = ok(&["info", s.pm.to_str().unwrap()]);
    assert!(info.contains("clean") && !info.contains("NOT"), "{info}");
}

#[test]
fn busy_detach_changes_nothing_and_names_the_holder() {
    if !can_run() {
        return;
    }
    let s = scratch("128M");
    let mnt = s.mnt.to_str().unwrap();
    let mut a = attach(&s.pm, &["--mountpoint", mnt, "--mkfs", "ext4"]);
    let h = holder_in(&s.mnt);
    let pid = h.id();
    let o = pmkit(&["detach", mnt]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        !o.status.success(),
        "a busy detach must fail: {}{err}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        err.contains("busy") && err.contains(&format!("PID {pid} (sleep)")) && err.contains("cwd"),
        "the holder must be named: {err}"
    );
    assert!(is_mounted(&s.mnt), "a busy detach must not unmount");
    still_running(&mut a);
    let want = data(3 << 20, 7);
    write_fsynced(&s.mnt, "after-busy", &want);
    end(h);
    a.detach(mnt);
    reattached_intact(&s, "after-busy", &want);
}

#[test]
fn sigterm_while_busy_keeps_serving() {
    if !can_run() {
        return;
    }
    let s = scratch("128M");
    let mnt = s.mnt.to_str().unwrap();
    let mut a = attach(&s.pm, &["--mountpoint", mnt, "--mkfs", "ext4"]);
    let h = holder_in(&s.mnt);
    let pid = h.id();
    for n in 1..=2 {
        // SAFETY: signalling the child we spawned.
        unsafe { libc::kill(a.child.id() as i32, libc::SIGTERM) };
        wait_until("attach to refuse the busy detach", T, || {
            a.stderr().matches("not detached").count() >= n
        });
        let err = a.stderr();
        assert!(err.contains(&format!("PID {pid} (sleep)")), "{err}");
        std::thread::sleep(Duration::from_millis(300));
        still_running(&mut a);
        assert!(is_mounted(&s.mnt));
    }
    let want = data(2 << 20, 9);
    write_fsynced(&s.mnt, "after-sigterm", &want);
    end(h);
    // SAFETY: signalling the child we spawned.
    unsafe { libc::kill(a.child.id() as i32, libc::SIGTERM) };
    let st = wait_timeout(&mut a.child, T);
    assert!(st.success(), "attach exited with {st}: {}", a.stderr());
    reattached_intact(&s, "after-sigterm", &want);
}

#[test]
fn lazy_detach_serves_until_the_file_system_lets_go() {
    if !can_run() {
        return;
    }
    let s = scratch("128M");
    let mnt = s.mnt.to_str().unwrap();
    let mut a = attach(&s.pm, &["--mountpoint", mnt, "--mkfs", "ext4"]);
    // The holder waits (cwd in the mount) for a line, then writes 20 MiB and fsyncs it.
    let mut h = Command::new("sh")
        .args([
            "-c",
            "read go && head -c 20971520 /dev/zero | tr '\\0' x > big && sync big && echo done",
        ])
        .current_dir(&s.mnt)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = ok(&["detach", "--lazy", mnt]);
    assert!(
        out.contains("lazily") && out.contains(&format!("PID {}", h.id())),
        "{out}"
    );
    assert!(!is_mounted(&s.mnt), "the lazy unmount must be done");
    std::thread::sleep(Duration::from_millis(500));
    still_running(&mut a);
    h.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let st = wait_timeout(&mut h, T);
    let mut said = String::new();
    std::io::Read::read_to_string(&mut h.stdout.take().unwrap(), &mut said).unwrap();
    assert!(
        st.success() && said.contains("done"),
        "the holder must finish writing: {st} {said}"
    );
    // The file system goes with its last user; then the loop device, FUSE and the device.
    let st = wait_timeout(&mut a.child, T);
    assert!(st.success(), "attach exited with {st}: {}", a.stderr());
    reattached_intact(&s, "big", &vec![b'x'; 20 << 20]);
}

#[test]
fn stale_attachments_are_named_with_how_to_clear_them() {
    if !can_run() {
        return;
    }
    let s = scratch("64M");
    let mnt = s.mnt.to_str().unwrap();
    let canon = std::fs::canonicalize(&s.mnt).unwrap();
    let mut a = attach(&s.pm, &["--mountpoint", mnt, "--mkfs", "ext4"]);
    a.child.kill().unwrap(); // SIGKILL: leaves a stale attachment
    a.child.wait().unwrap();
    let clear = format!("pmkit detach {}", canon.display());
    let o = pmkit(&["attach", s.pm.to_str().unwrap(), "--mountpoint", mnt]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success());
    assert!(err.contains("stale") && err.contains(&clear), "{err}");
    let other = tempfile::tempdir().unwrap();
    let o = pmkit(&[
        "attach",
        s.pm.to_str().unwrap(),
        "--mountpoint",
        other.path().to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "a second attach of a held device");
    assert!(
        err.contains("stale") && err.contains(&clear) && err.contains("mounted on"),
        "{err}"
    );
    let out = ok(&["detach", mnt]);
    assert!(
        out.contains("stale") && out.contains("not shut down cleanly"),
        "{out}"
    );
    let info = ok(&["info", s.pm.to_str().unwrap()]);
    assert!(info.contains("NOT shut down cleanly"), "{info}");
    let a = attach(&s.pm, &["--mountpoint", other.path().to_str().unwrap()]);
    a.detach(other.path().to_str().unwrap());
}
