//! No command panics on a closed output. A command whose reader leaves (`pmkit info DEV |
//! head`) ends quietly by SIGPIPE, as every Unix tool does; a daemon whose reader leaves
//! (`pmkit serve 2>&1 | head -1`, a terminal that hangs up) keeps serving and, when stopped,
//! still finishes, marks its device or pool clean and exits 0.

mod fs_mount_util;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

fn pmkit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pmkit"))
}

#[test]
fn a_command_whose_reader_left_ends_by_sigpipe_without_a_word() {
    let dir = pmkit_testkit::scratch();
    let dev = dir.path().join("d.pmbd");
    let o = pmkit()
        .args(["create", dev.to_str().unwrap(), "--size", "16M"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    // The reader is gone before the command starts (its end closed before the spawn, so no
    // race with the command's first print): that print meets a closed pipe.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = pmkit()
        .args(["info", dev.to_str().unwrap()])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{o:?}");
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_server_whose_output_reader_left_still_closes_cleanly() {
    let dir = pmkit_testkit::scratch();
    let dev = dir.path().join("d.pmbd");
    let sock = dir.path().join("s.sock");
    let mut c = pmkit()
        .args(["serve", dev.to_str().unwrap(), "--size", "16M", "--socket"])
        .arg(&sock)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("serving"), "{first}");
    // The reader is dropped: the banner's other lines and the stop messages meet a closed pipe.
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) of our child.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    let st = c.wait().unwrap();
    assert!(st.success(), "{st:?}");
    let o = pmkit()
        .args(["check", dev.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
}

#[test]
fn a_mount_whose_output_reader_left_still_unmounts_clean() {
    use fs_mount_util::*;
    if !can_run() {
        return;
    }
    let s = scratch("32M");
    let mut c = pmkit()
        .args([
            "fs",
            "mount",
            s.pool.to_str().unwrap(),
            s.mnt.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert!(ready.starts_with("ready"), "{ready}");
    drop(c.stderr.take());
    std::fs::write(s.mnt.join("f"), b"x").unwrap();
    run_ok(&["fs", "umount", s.mnt.to_str().unwrap()]);
    let st = c.wait().unwrap();
    assert!(st.success(), "{st:?}");
    check_clean(&s);
}
