//! `pmkit serve` connection limits, timeouts and totals with the real binary and raw clients:
//! clients that connect and do nothing must not lock others out, a full server refuses cleanly,
//! and the totals printed at exit count every connection however it ended.

mod serve_util;

use serve_util::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// A client stuck in the handshake: greeted, sends half of its flags, then nothing. The slot of
/// `Serve::start`'s readiness probe may not be free yet on a loaded machine (the server notices
/// the probe's end-of-file a moment later), so a refusal is retried for up to 5 s.
fn stuck(sock: &Path) -> UnixStream {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = UnixStream::connect(sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut g = [0u8; 18];
        match s.read_exact(&mut g) {
            Ok(()) => {
                s.write_all(&[0, 0]).unwrap();
                return s;
            }
            Err(e) if Instant::now() < deadline => {
                eprintln!("stuck client refused ({e}); retrying");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("a stuck client was never greeted: {e}"),
        }
    }
}

/// One 4 KiB write and read back on a fresh connection; `Err` when the server refused it.
fn serve_one(sock: &Path, off: u64) -> std::io::Result<()> {
    let mut s = nbd_connect(sock)?;
    let mut b = nbd_request(1, 1, off, 4096); // WRITE
    b.extend_from_slice(&[0x5a; 4096]);
    s.write_all(&b)?;
    assert_eq!(nbd_reply(&mut s)?, (0, 1));
    s.write_all(&nbd_request(0, 2, off, 4096))?; // READ
    assert_eq!(nbd_reply(&mut s)?, (0, 2));
    let mut d = vec![0u8; 4096];
    s.read_exact(&mut d)?;
    assert_eq!(d, vec![0x5a; 4096]);
    s.write_all(&nbd_request(2, 3, 0, 0)) // DISC
}

#[test]
fn idle_and_stalled_clients_do_not_lock_others_out() {
    let dev = DevFile::new("lockout");
    let s = Serve::start(dev.path(), &["--size", "16M"]);
    assert!(s.banner.contains("limits: 128 connections"), "{}", s.banner);
    assert!(
        s.banner.contains("timeouts: handshake 10 s, idle none"),
        "{}",
        s.banner
    );
    // More idle handshaken clients than the old limit (16), and as many stuck mid-handshake.
    let idle: Vec<UnixStream> = (0..20).map(|_| nbd_connect(&s.sock).unwrap()).collect();
    let stalled: Vec<UnixStream> = (0..20).map(|_| stuck(&s.sock)).collect();
    let t = Instant::now();
    serve_one(&s.sock, 0).expect("a new client must be served");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop((idle, stalled));
    let (st, err) = s.stop();
    assert!(st.success(), "exit {st}: {err}");
    // 40 + 1, and the probe with which Serve::start waits for the socket.
    assert!(
        err.contains("served 42 connection(s), 2 request(s)"),
        "{err}"
    );
}

#[test]
fn full_server_refuses_cleanly_and_stalled_handshakes_free_their_slots() {
    let dev = DevFile::new("full");
    let s = Serve::start(
        dev.path(),
        &[
            "--size",
            "16M",
            "--max-connections",
            "2",
            "--handshake-timeout",
            "1",
        ],
    );
    let t0 = Instant::now();
    let _stalled: Vec<UnixStream> = (0..2).map(|_| stuck(&s.sock)).collect();
    // At the limit: closed before the greeting (end-of-file or a reset), promptly, and logged.
    let mut c = UnixStream::connect(&s.sock).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    let mut b = [0u8; 18];
    match c.read(&mut b) {
        Ok(0) => {}
        Ok(n) => panic!("a client over the limit was greeted ({n} bytes)"),
        Err(e) => assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "refusal hung"),
    }
    assert!(t.elapsed() < Duration::from_secs(2));
    // The stalled clients are dropped after 1 s; then a client is served.
    loop {
        if serve_one(&s.sock, 8192).is_ok() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "locked out");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(t0.elapsed() >= Duration::from_millis(900));
    // One freed slot is enough for that client; the second stalled client (greeted later if
    // its first try met the start-up probe's slot) times out on its own clock: wait for it.
    let timed_out = |err: &str| -> u64 {
        err.lines()
            .filter(|l| l.contains("did not finish the handshake"))
            .filter_map(|l| {
                l.split(" n=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    };
    while timed_out(&s.stderr()) < 2 {
        assert!(t0.elapsed() < Duration::from_secs(15), "{}", s.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    let err = s.stderr();
    assert!(err.contains("connection limit reached"), "{err}");
    let (st, err) = s.stop();
    assert!(st.success(), "exit {st}: {err}");
    assert!(err.contains("2 handshake timed out"), "{err}");
    assert!(err.contains("refused at the limit"), "{err}");
}

#[test]
fn totals_count_clients_that_drop_the_socket_without_disc() {
    const CONNS: u64 = 8;
    const N: u64 = 16;
    const LEN: u32 = 64 << 10;
    let dev = DevFile::new("totals");
    let stats_dir = tempfile::tempdir().unwrap();
    let stats = stats_dir.path().join("stats.json");
    let s = Serve::start(
        dev.path(),
        &["--size", "16M", "--stats", stats.to_str().unwrap()],
    );
    for i in 0..CONNS {
        let mut c = nbd_connect(&s.sock).unwrap();
        let base = i * N * LEN as u64;
        // N writes in flight, then N + 1 reads one at a time.
        let mut b = Vec::new();
        for h in 0..N {
            b.extend_from_slice(&nbd_request(1, h, base + h * LEN as u64, LEN));
            b.extend(std::iter::repeat_n(i as u8, LEN as usize));
        }
        c.write_all(&b).unwrap();
        for _ in 0..N {
            assert_eq!(nbd_reply(&mut c).unwrap().0, 0);
        }
        let mut d = vec![0u8; LEN as usize];
        for h in 0..=N {
            c.write_all(&nbd_request(0, h, base + (h % N) * LEN as u64, LEN))
                .unwrap();
            assert_eq!(nbd_reply(&mut c).unwrap().0, 0);
            if h == N && i % 2 == 0 {
                break; // leave the last reply's data unread
            }
            c.read_exact(&mut d).unwrap();
            assert_eq!(d, vec![i as u8; LEN as usize]);
        }
        if i % 2 == 1 {
            c.write_all(&REQ_MAGIC.to_be_bytes()).unwrap(); // half a request header
        }
        drop(c); // no NBD_CMD_DISC
    }
    let (st, err) = s.stop();
    assert!(st.success(), "exit {st}: {err}");
    // 8 x (16 writes + 17 reads); 8 MiB written, 8.5 MiB read; 8 + Serve::start's probe.
    assert!(
        err.contains(
            "served 9 connection(s), 264 request(s) (0 errors), read 8.5 MiB, wrote 8.0 MiB"
        ),
        "{err}"
    );
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert!(
        j["write_bytes"].as_u64().unwrap() >= CONNS * N * LEN as u64,
        "{j}"
    );
    assert!(
        j["read_bytes"].as_u64().unwrap() >= CONNS * (N + 1) * LEN as u64,
        "{j}"
    );
}
