//! The server and its clients in one test process: sessions share one file system, a fork's
//! session shares descriptors and offsets, an ended session closes what it held, closes ride
//! with the next call (but not where locks are held), and a client without write access to
//! the pool file is refused.

mod common;

use common::served;
use pmkit_fs::posix::{Fd, Lock, LockKind, LockScope, Whence};
use pmkit_fs_share::{Calls, Client, PoolApi};
use std::os::fd::AsRawFd;

const RW: i32 = libc::O_RDWR | libc::O_CREAT;

#[test]
fn clients_share_one_file_system() {
    let s = served();
    let (a, b) = (s.client(), s.client());
    a.mkdir(b"/d", 0o755).unwrap();
    let fa = a.open(b"/d/f", RW, 0o644).unwrap();
    assert_eq!(a.write(fa, b"from a").unwrap(), 6);
    // b sees a's file and bytes at once, and its own descriptor numbers are its own.
    let fb = b.open(b"/d/f", libc::O_RDWR, 0).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(b.pread(fb, &mut buf, 0).unwrap(), 6);
    assert_eq!(&buf[..6], b"from a");
    b.pwrite(fb, b"B", 0).unwrap();
    assert_eq!(a.pread(fa, &mut buf, 0).unwrap(), 6);
    assert_eq!(&buf[..6], b"Brom a");
    // A write longer than one frame's data arrives whole.
    let big: Vec<u8> = (0..pmkit_fs_share::MAX_IO + 12345)
        .map(|i| i as u8)
        .collect();
    assert_eq!(a.pwrite(fa, &big, 0).unwrap(), big.len());
    let mut back = vec![0u8; big.len()];
    assert_eq!(b.pread(fb, &mut back, 0).unwrap(), big.len());
    assert!(back == big);
    assert_eq!(
        b.readdir(b"/d").unwrap().len(),
        a.readdir(b"/d").unwrap().len()
    );
    // Errors come back as the library's errno.
    assert_eq!(b.stat(b"/none").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(b.fstat(Fd(999)).unwrap_err().errno(), libc::EBADF);
    // A close goes with the next call: of a number the session lacks it is harmless (the
    // shim's table never sends one).
    b.close(Fd(999)).unwrap();
    assert_eq!(b.stat(b"/d/f").unwrap().size as usize, big.len());
    drop((a, b));
    s.stop();
}

#[test]
fn a_fork_session_shares_descriptors_and_offsets() {
    let s = served();
    let a = s.client();
    let fd = a.open(b"/f", RW, 0o644).unwrap();
    a.write(fd, b"parent ").unwrap();
    // The client is its own parent and child here: prepare, then take the child's end.
    a.fork_prepare();
    a.fork_child();
    let child = a;
    // The child's descriptor continues at the shared offset.
    child.write(fd, b"child").unwrap();
    assert_eq!(child.lseek(fd, 0, Whence::Cur).unwrap(), 12);
    child.close(fd).unwrap();
    assert_eq!(child.fstat(fd).unwrap_err().errno(), libc::EBADF);
    let b = s.client();
    assert_eq!(b.stat(b"/f").unwrap().size, 12);
    drop((child, b));
    s.stop();
}

#[test]
fn an_ended_session_closes_what_it_held() {
    let s = served();
    let a = s.client();
    let fd = a.open(b"/gone", RW, 0o644).unwrap();
    a.pwrite(fd, &vec![7u8; 1 << 20], 0).unwrap();
    a.unlink(b"/gone").unwrap();
    let b = s.client();
    let before = b.statfs().unwrap().free_blocks;
    // The client goes away with the unlinked file open (as a killed process does): its session
    // ends and the file's blocks come back.
    drop(a);
    let mut after = before;
    for _ in 0..200 {
        after = b.statfs().unwrap().free_blocks;
        if after > before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(after >= before + 256, "{before} -> {after}");
    drop(b);
    s.stop();
}

#[test]
fn a_client_without_write_access_is_refused() {
    let s = served();
    let ro = std::fs::File::open(&s.pool).unwrap();
    let e = Client::connect(&s.pool, ro.as_raw_fd(), None, 4095)
        .err()
        .expect("refused");
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    let other = s._dir.path().join("other");
    std::fs::write(&other, b"x").unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&other)
        .unwrap();
    let e = Client::connect(&s.pool, f.as_raw_fd(), None, 4095)
        .err()
        .expect("refused");
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    s.stop();
}

/// A close costs no round trip: it goes with the session's next message, which the server runs
/// after it. A file unlinked while open is freed by that message (not before), a fork's session
/// never holds a number its parent closed, at most `MAX_DEFERRED` closes wait, and a session
/// that has taken a lock closes at once (another process must see the lock go at the close).
#[test]
fn closes_go_with_the_next_call() {
    let s = served();
    let (a, b) = (s.client(), s.client());
    let free = || b.statfs().unwrap().free_blocks;
    let fd = a.open(b"/gone", RW, 0o644).unwrap();
    a.pwrite(fd, &vec![7u8; 1 << 20], 0).unwrap();
    a.unlink(b"/gone").unwrap();
    let before = free();
    a.close(fd).unwrap();
    assert_eq!(free(), before, "the close waits for a's next call");
    assert_eq!(
        a.fstat(fd).unwrap_err().errno(),
        libc::EBADF,
        "closed before it"
    );
    assert!(free() >= before + 256, "freed by then");
    // Many closes in a row: every one is done by the next call, however many waited.
    let fds: Vec<_> = (0..200)
        .map(|i| a.open(format!("/f{i}").as_bytes(), RW, 0o644).unwrap())
        .collect();
    for &fd in &fds {
        a.close(fd).unwrap();
    }
    a.stat(b"/").unwrap();
    for &fd in &fds {
        assert_eq!(a.fstat(fd).unwrap_err().errno(), libc::EBADF);
    }
    // A fork's session starts after the closes.
    let fd = a.open(b"/f0", libc::O_RDWR, 0).unwrap();
    a.close(fd).unwrap();
    a.fork_prepare();
    a.fork_child();
    assert_eq!(
        a.fstat(fd).unwrap_err().errno(),
        libc::EBADF,
        "the child lacks it"
    );
    // With a lock taken, a close is a call of its own: the lock goes with it.
    let l = |kind| Lock {
        kind,
        scope: LockScope::Process,
        start: 0,
        end: u64::MAX,
        pid: 1,
    };
    let fa = a.open(b"/f1", libc::O_RDWR, 0).unwrap();
    a.lock(fa, l(LockKind::Write)).unwrap();
    let fb = b.open(b"/f1", libc::O_RDWR, 0).unwrap();
    assert!(b.test_lock(fb, l(LockKind::Write)).unwrap().is_some());
    a.close(fa).unwrap();
    assert!(
        b.test_lock(fb, l(LockKind::Write)).unwrap().is_none(),
        "released at once"
    );
    drop((a, b));
    s.stop();
}
