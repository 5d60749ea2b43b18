//! Connection limits and timeouts (clients that connect and do nothing must not lock others out)
//! and the server's totals (every connection counts, however it ends).

mod common;

use common::*;
use pmkit_nbd::proto::*;
use pmkit_nbd::{IoModel, ServerConfig};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// A client that is greeted, finishes the handshake and reads back what it wrote; `None` when
/// the server closed the connection at once (refused at the limit).
fn try_serve(srv: &TestServer) -> Option<Client> {
    let mut c = srv.connect();
    c.s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut g = [0u8; 18];
    if c.s.read_exact(&mut g).is_err() {
        return None;
    }
    drop(c);
    let mut c = srv.go(false, false);
    assert_eq!(c.write(4096, &[7u8; 512]), 0);
    assert_eq!(c.read(4096, 512).unwrap(), vec![7u8; 512]);
    Some(c)
}

/// A client stuck in the handshake: greeted, sends half of its flags and then nothing.
fn stuck(srv: &TestServer) -> Client {
    let mut c = srv.connect();
    let _ = c.read_n(18);
    c.s.write_all(&[0, 0]).unwrap();
    c
}

/// Wait (bounded) until a new client is served; return how long it took.
fn wait_served(srv: &TestServer, limit: Duration) -> (Client, Duration) {
    let t = Instant::now();
    loop {
        if let Some(c) = try_serve(srv) {
            return (c, t.elapsed());
        }
        assert!(
            t.elapsed() < limit,
            "no client served within {limit:?}: locked out"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn idle_and_stalled_clients_do_not_lock_others_out_by_default() {
    // More idle handshaken clients than the old limit of 16, plus as many stuck mid-handshake:
    // with the defaults a new client is served at once.
    let srv = TestServer::start(ServerConfig {
        handshake_timeout: ServerConfig::default().handshake_timeout,
        max_connections: ServerConfig::default().max_connections,
        ..cfg(IoModel::Inline)
    });
    let idle: Vec<Client> = (0..20).map(|_| srv.go(false, false)).collect();
    let stalled: Vec<Client> = (0..20).map(|_| stuck(&srv)).collect();
    let (_c, took) = wait_served(&srv, Duration::from_secs(5));
    assert!(took < Duration::from_secs(2), "took {took:?}");
    drop((idle, stalled));
    assert_eq!(srv.stop().refused, 0);
}

#[test]
fn stalled_handshakes_are_dropped_and_a_full_server_refuses_cleanly() {
    let srv = TestServer::start(ServerConfig {
        max_connections: 3,
        handshake_timeout: Some(Duration::from_millis(800)),
        ..cfg(IoModel::Inline)
    });
    let t0 = Instant::now();
    let mut stalled: Vec<Client> = (0..3).map(|_| stuck(&srv)).collect();
    // At the limit: the next client's connection is closed before any greeting, not left hanging.
    let mut refused = srv.connect();
    let t = Instant::now();
    assert!(
        refused.is_closed(),
        "a client over the limit must be closed"
    );
    assert!(t.elapsed() < Duration::from_secs(1));
    // The stalled ones are dropped at their deadline, and then a new client is served.
    let (_c, _) = wait_served(&srv, Duration::from_secs(5));
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(5),
        "{took:?}"
    );
    for c in &mut stalled {
        assert!(c.is_closed());
    }
    let st = srv.stop();
    assert!(st.refused >= 1);
    assert_eq!(st.handshake_timeouts, 3);
}

#[test]
fn handshake_deadline_is_total_not_per_read() {
    // A client trickling a byte every 100 ms never waits long on any one read, but must still be
    // gone at the deadline.
    let srv = TestServer::start(ServerConfig {
        handshake_timeout: Some(Duration::from_millis(600)),
        ..cfg(IoModel::Inline)
    });
    let mut c = srv.connect();
    c.greet();
    c.s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let option = {
        let mut b = OPT_MAGIC.to_be_bytes().to_vec();
        b.extend_from_slice(&OPT_GO.to_be_bytes());
        b.extend_from_slice(&1000u32.to_be_bytes());
        b.resize(16 + 1000, 0);
        b
    };
    let t = Instant::now();
    for byte in &option {
        assert!(t.elapsed() < Duration::from_secs(5), "never dropped");
        if c.s.write_all(&[*byte]).is_err() {
            break;
        }
        let mut b = [0u8; 1];
        match c.s.read(&mut b) {
            Ok(0) => break,
            Ok(_) => panic!("unexpected reply to half an option"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "dropped after {took:?}"
    );
    assert_eq!(srv.stop().handshake_timeouts, 1);
}

#[test]
fn idle_timeout_closes_silent_connections_only() {
    for model in models() {
        let srv = TestServer::start(ServerConfig {
            max_connections: 3,
            idle_timeout: Some(Duration::from_millis(700)),
            ..cfg(model)
        });
        let mut idle: Vec<Client> = (0..2).map(|_| srv.go(false, false)).collect();
        let mut busy = srv.go(true, false);
        assert!(try_serve(&srv).is_none(), "{model:?}: limit not enforced");
        // A client sending a request every 200 ms for 1.6 s is never idle for 700 ms.
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed() < Duration::from_millis(1600) {
            assert_eq!(busy.write(n * 512, &[n as u8; 512]), 0, "{model:?}");
            n += 1;
            std::thread::sleep(Duration::from_millis(200));
        }
        for c in &mut idle {
            assert!(c.is_closed(), "{model:?}: idle client not closed");
        }
        let (_c, took) = wait_served(&srv, Duration::from_secs(3));
        assert!(took < Duration::from_secs(1), "{model:?}: {took:?}");
        assert_eq!(busy.read(0, 512).unwrap(), vec![0u8; 512]);
        let st = srv.stop();
        assert_eq!(st.idle_timeouts, 2, "{model:?}");
        assert!(st.refused >= 1);
    }
}

/// How a client leaves after its requests.
#[derive(Debug, Clone, Copy)]
enum Leave {
    /// Closes the socket between requests (end-of-file).
    Eof,
    /// Closes with a reply it has not read (the server sees a reset or a failed send).
    UnreadReply,
    /// Closes in the middle of a request header.
    MidHeader,
}

#[test]
fn totals_count_connections_that_close_without_disc() {
    const WRITES: u64 = 8;
    const READS: u64 = 5;
    const LEN: u32 = 4096;
    let leaves = [Leave::Eof, Leave::UnreadReply, Leave::MidHeader];
    for model in models() {
        let srv = TestServer::start(cfg(model));
        let per_round = leaves.len() as u64;
        let rounds = 3u64;
        for i in 0..rounds * per_round {
            let leave = leaves[(i % per_round) as usize];
            let mut c = srv.go(i % 2 == 0, false);
            let base = i * WRITES * LEN as u64;
            for w in 0..WRITES {
                c.request(
                    CMD_WRITE,
                    0,
                    w,
                    base + w * LEN as u64,
                    LEN,
                    &[i as u8; 4096],
                );
            }
            for _ in 0..WRITES {
                assert_eq!(c.reply(|_| 0).error(), 0);
            }
            for r in 0..READS {
                assert_eq!(
                    c.read(base + r * LEN as u64, LEN).unwrap(),
                    vec![i as u8; 4096]
                );
            }
            match leave {
                Leave::Eof => {}
                Leave::UnreadReply => {
                    // One more read: wait for the start of its reply, leave the rest unread.
                    c.request(CMD_READ, 0, 99, base, LEN, &[]);
                    let _ = c.read_n(4);
                }
                Leave::MidHeader => c.s.write_all(&REQUEST_MAGIC.to_be_bytes()).unwrap(),
            }
            drop(c); // no NBD_CMD_DISC
        }
        let st = srv.stop();
        let extra = rounds; // the UnreadReply clients' last read
        let n = rounds * per_round;
        assert_eq!(st.connections, n, "{model:?}");
        assert_eq!(
            st.requests,
            n * (WRITES + READS) + extra,
            "{model:?}: {st:?}"
        );
        assert_eq!(st.bytes_written, n * WRITES * LEN as u64, "{model:?}");
        assert_eq!(st.bytes_read, (n * READS + extra) * LEN as u64, "{model:?}");
        assert_eq!(st.errors, 0, "{model:?}");
    }
}
