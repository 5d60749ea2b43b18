//! Protocol tests against a real server on a unix socket, speaking raw bytes: the handshake,
//! every command, the error cases of the spec, malformed input, limits and shutdown.

mod common;

use common::*;
use pmkit_nbd::proto::*;
use pmkit_nbd::{IoModel, ServerConfig};
use std::io::Write;
use std::time::{Duration, Instant};

#[test]
fn info_reports_export_and_block_sizes_and_unknown_options_continue() {
    let srv = TestServer::start(cfg(IoModel::Inline));
    let mut c = srv.connect();
    c.greet();
    // Unknown option: ERR_UNSUP, then haggling goes on.
    c.option(0x4242, b"whatever");
    let (opt, t, _) = c.option_reply();
    assert_eq!((opt, t), (0x4242, REP_ERR_UNSUP));
    // TLS is off: STARTTLS is refused by policy (tests/tls.rs covers the TLS modes).
    c.option(OPT_STARTTLS, &[]);
    assert_eq!(c.option_reply().1, REP_ERR_POLICY);
    // LIST: one server entry, then ACK; data is not allowed.
    c.option(OPT_LIST, &[]);
    let (_, t, d) = c.option_reply();
    assert_eq!(t, REP_SERVER);
    assert_eq!(u32::from_be_bytes(d[0..4].try_into().unwrap()), 0);
    assert_eq!(c.option_reply().1, REP_ACK);
    c.option(OPT_LIST, b"x");
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);
    // Meta contexts need structured replies first.
    c.option(OPT_LIST_META_CONTEXT, &meta_payload("", &[]));
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);
    c.option(OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(c.option_reply().1, REP_ACK);
    c.option(OPT_LIST_META_CONTEXT, &meta_payload("", &["base:"]));
    let (_, t, d) = c.option_reply();
    assert_eq!(t, REP_META_CONTEXT);
    assert_eq!(&d[4..], META_BASE_ALLOCATION.as_bytes());
    assert_eq!(c.option_reply().1, REP_ACK);
    // Unknown namespaces are ignored, not errors.
    c.option(
        OPT_LIST_META_CONTEXT,
        &meta_payload("", &["qemu:dirty-bitmap:a"]),
    );
    assert_eq!(c.option_reply().1, REP_ACK);
    // Malformed meta payload.
    c.option(OPT_SET_META_CONTEXT, &[0, 0, 0, 9]);
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);
    // INFO for an unknown export, then a malformed INFO, then a good one.
    c.option(OPT_INFO, &info_payload("nope", &[]));
    assert_eq!(c.option_reply().1, REP_ERR_UNKNOWN);
    c.option(OPT_INFO, &[0, 0, 0, 0, 0]);
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);
    c.option(
        OPT_INFO,
        &info_payload("", &[INFO_BLOCK_SIZE, INFO_NAME, INFO_DESCRIPTION]),
    );
    let mut seen = Vec::new();
    loop {
        let (_, t, d) = c.option_reply();
        if t == REP_ACK {
            break;
        }
        assert_eq!(t, REP_INFO);
        let info = u16::from_be_bytes([d[0], d[1]]);
        match info {
            INFO_EXPORT => {
                assert_eq!(u64::from_be_bytes(d[2..10].try_into().unwrap()), SIZE);
                let f = u16::from_be_bytes([d[10], d[11]]);
                for want in [
                    TF_HAS_FLAGS,
                    TF_SEND_FLUSH,
                    TF_SEND_FUA,
                    TF_SEND_TRIM,
                    TF_SEND_WRITE_ZEROES,
                    TF_SEND_FAST_ZERO,
                    TF_SEND_CACHE,
                    TF_CAN_MULTI_CONN,
                    TF_SEND_DF,
                ] {
                    assert!(f & want != 0, "flag {want:#x} missing from {f:#x}");
                }
                assert_eq!(f & TF_READ_ONLY, 0);
            }
            INFO_BLOCK_SIZE => {
                let v: Vec<u32> = d[2..]
                    .chunks(4)
                    .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
                    .collect();
                assert_eq!(v, vec![MIN, 4096, 1 << 20]);
            }
            _ => {}
        }
        seen.push(info);
    }
    assert!(
        seen.contains(&INFO_EXPORT) && seen.contains(&INFO_BLOCK_SIZE) && seen.contains(&INFO_NAME)
    );
    // ABORT is acknowledged and the server closes.
    c.option(OPT_ABORT, &[]);
    assert_eq!(c.option_reply().1, REP_ACK);
    assert!(c.is_closed());
}

#[test]
fn export_name_path_with_and_without_zeroes() {
    let srv = TestServer::start(ServerConfig {
        exports: vec![pmkit_nbd::ExportSpec {
            name: "pm0".into(),
            read_only: false,
        }],
        ..cfg(IoModel::Inline)
    });
    // NO_ZEROES negotiated: 10 bytes.
    let mut c = srv.connect();
    c.greet();
    c.option(OPT_EXPORT_NAME, b"pm0");
    let r = c.read_n(10);
    assert_eq!(u64::from_be_bytes(r[0..8].try_into().unwrap()), SIZE);
    c.structured = false;
    assert_eq!(c.write(0, &[7u8; 512]), 0);
    assert_eq!(c.read(0, 512).unwrap(), vec![7u8; 512]);
    // Without NO_ZEROES: 124 zero bytes follow.
    let mut c = srv.connect();
    let _ = c.read_n(18);
    c.s.write_all(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes()).unwrap();
    c.option(OPT_EXPORT_NAME, b"");
    let r = c.read_n(10 + 124);
    assert!(r[10..].iter().all(|&b| b == 0));
    assert_eq!(c.read(0, 512).unwrap(), vec![7u8; 512]);
    // An unknown name cannot be refused politely with EXPORT_NAME: the server closes.
    let mut c = srv.connect();
    c.greet();
    c.option(OPT_EXPORT_NAME, b"other");
    assert!(c.is_closed());
}

#[test]
fn commands_roundtrip_in_every_model() {
    for model in models() {
        for structured in [false, true] {
            let srv = TestServer::start(cfg(model));
            let mut c = srv.go(structured, structured);
            assert_eq!(c.size, SIZE);
            let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
            assert_eq!(c.write(4096, &data), 0);
            assert_eq!(c.read(4096, 8192).unwrap(), data);
            // FUA write, FLUSH.
            assert_eq!(
                c.call(CMD_WRITE, CMD_FLAG_FUA, 0, 512, &[1u8; 512]).error(),
                0
            );
            let before = srv.backend.flush_count();
            assert_eq!(c.call(CMD_FLUSH, 0, 0, 0, &[]).error(), 0);
            assert_eq!(srv.backend.flush_count(), before + 1);
            // WRITE_ZEROES (plain, NO_HOLE, FAST_ZERO), TRIM, CACHE.
            assert_eq!(c.call(CMD_WRITE_ZEROES, 0, 4096, 1024, &[]).error(), 0);
            assert_eq!(c.read(4096, 1024).unwrap(), vec![0u8; 1024]);
            assert_eq!(
                c.call(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 5120, 512, &[])
                    .error(),
                0
            );
            assert_eq!(
                c.call(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 4 << 20, &[])
                    .error(),
                0
            );
            assert_eq!(c.read(0, 512).unwrap(), vec![0u8; 512]);
            assert_eq!(c.call(CMD_TRIM, 0, 0, 4096, &[]).error(), 0);
            assert_eq!(c.call(CMD_CACHE, 0, 0, 4096, &[]).error(), 0);
            // Zero-length requests are harmless.
            assert_eq!(c.call(CMD_WRITE, 0, 0, 0, &[]).error(), 0);
            assert_eq!(c.read(0, 0).unwrap(), Vec::<u8>::new());
            // DISC: the server closes without a reply.
            c.request(CMD_DISC, 0, 1, 0, 0, &[]);
            assert!(c.is_closed());
            let st = srv.stop();
            assert!(st.requests >= 12, "{st:?}");
        }
    }
}

#[test]
fn errors_keep_the_connection_and_drain_payloads() {
    for model in models() {
        let srv = TestServer::start(cfg(model));
        for structured in [false, true] {
            let mut c = srv.go(structured, false);
            assert_eq!(c.read(1, 512), Err(EINVAL), "misaligned offset");
            assert_eq!(c.read(0, 100), Err(EINVAL), "misaligned length");
            assert_eq!(c.read(SIZE - 512, 1024), Err(EINVAL), "read past the end");
            assert_eq!(c.read(u64::MAX - 511, 1024), Err(EINVAL), "offset overflow");
            assert_eq!(c.read(0, 2 << 20), Err(EINVAL), "longer than max payload");
            // Rejected writes: the payload is skipped and the stream stays in sync.
            assert_eq!(c.write(SIZE - 512, &[9u8; 1024]), ENOSPC);
            assert_eq!(c.write(3, &[9u8; 512]), EINVAL);
            assert_eq!(
                c.write(0, &vec![9u8; 2 << 20]),
                EINVAL,
                "write longer than max payload"
            );
            assert_eq!(c.call(CMD_WRITE_ZEROES, 0, SIZE, 512, &[]).error(), ENOSPC);
            assert_eq!(c.call(CMD_TRIM, 0, SIZE, 512, &[]).error(), EINVAL);
            assert_eq!(c.call(77, 0, 0, 0, &[]).error(), EINVAL, "unknown command");
            assert_eq!(
                c.call(CMD_WRITE, CMD_FLAG_REQ_ONE, 0, 512, &[5u8; 512])
                    .error(),
                EINVAL,
                "bad flag"
            );
            assert_eq!(c.call(CMD_FLUSH, 0, 512, 0, &[]).error(), EINVAL);
            assert_eq!(
                c.call(CMD_BLOCK_STATUS, 0, 0, 512, &[]).error(),
                EINVAL,
                "no meta context"
            );
            // Nothing above touched the data.
            assert_eq!(c.read(SIZE - 512, 512).unwrap(), vec![0u8; 512]);
            assert_eq!(c.read(0, 512).unwrap(), vec![0u8; 512]);
            // Structured errors carry a message.
            if structured {
                match c.call(CMD_READ, 0, 1, 512, &[]) {
                    Reply::Structured { chunks, .. } => {
                        let p = &chunks.last().unwrap().1;
                        let ml = u16::from_be_bytes([p[4], p[5]]) as usize;
                        let msg = std::str::from_utf8(&p[6..6 + ml]).unwrap();
                        assert!(msg.contains("multiples"), "{msg}");
                    }
                    r => panic!("structured client got {r:?}"),
                }
            }
            assert_eq!(c.write(0, &[1u8; 512]), 0, "connection still works");
            assert_eq!(c.write(0, &[0u8; 512]), 0);
        }
    }
}

#[test]
fn read_only_export_refuses_writes() {
    for ro_backend in [false, true] {
        let cfg = ServerConfig {
            read_only: !ro_backend,
            ..cfg(IoModel::Inline)
        };
        let srv = TestServer::start_with(cfg, ro_backend);
        let mut c = srv.go(true, false);
        assert!(c.flags & TF_READ_ONLY != 0);
        assert_eq!(
            c.flags & (TF_SEND_TRIM | TF_SEND_WRITE_ZEROES | TF_SEND_FUA),
            0
        );
        assert_eq!(c.write(0, &[1u8; 512]), EPERM);
        assert_eq!(c.call(CMD_TRIM, 0, 0, 512, &[]).error(), EPERM);
        assert_eq!(c.call(CMD_WRITE_ZEROES, 0, 0, 512, &[]).error(), EPERM);
        assert_eq!(c.read(0, 512).unwrap(), vec![0u8; 512]);
        assert_eq!(c.call(CMD_FLUSH, 0, 0, 0, &[]).error(), 0);
    }
}

#[test]
fn block_status_reports_holes_and_data() {
    let srv = TestServer::start(cfg(IoModel::Inline));
    let mut c = srv.go(true, true);
    assert_eq!(c.write(8192, &[1u8; 4096]), 0);
    let r = c.call(CMD_BLOCK_STATUS, 0, 0, 65536, &[]);
    let Reply::Structured {
        error: 0, chunks, ..
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(chunks.len(), 1);
    let (t, p) = &chunks[0];
    assert_eq!(*t, REPLY_TYPE_BLOCK_STATUS);
    assert_eq!(
        u32::from_be_bytes(p[0..4].try_into().unwrap()),
        META_ID_BASE_ALLOCATION
    );
    let ext: Vec<(u32, u32)> = p[4..]
        .chunks(8)
        .map(|e| {
            (
                u32::from_be_bytes(e[0..4].try_into().unwrap()),
                u32::from_be_bytes(e[4..8].try_into().unwrap()),
            )
        })
        .collect();
    assert_eq!(
        ext,
        vec![
            (8192, STATE_HOLE | STATE_ZERO),
            (4096, 0),
            (65536 - 12288, STATE_HOLE | STATE_ZERO)
        ]
    );
    let r = c.call(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 0, 65536, &[]);
    let Reply::Structured { chunks, .. } = r else {
        panic!()
    };
    assert_eq!(chunks[0].1.len(), 4 + 8);
    assert_eq!(
        c.call(CMD_BLOCK_STATUS, 0, SIZE - 512, 1024, &[]).error(),
        EINVAL
    );
}

#[test]
fn many_requests_in_flight() {
    for model in models() {
        let srv = TestServer::start(cfg(model));
        let mut c = srv.go(true, false);
        let n = 200u64;
        // Writes with distinct contents, all sent before any reply is read.
        let mut batch = Vec::new();
        for h in 0..n {
            let payload = vec![h as u8 + 1; 4096];
            batch.extend_from_slice(&encode_request(&Request {
                flags: if h % 7 == 0 { CMD_FLAG_FUA } else { 0 },
                typ: CMD_WRITE,
                handle: h,
                offset: h * 4096,
                len: 4096,
            }));
            batch.extend_from_slice(&payload);
        }
        let mut w = c.s.try_clone().unwrap();
        let sender = std::thread::spawn(move || w.write_all(&batch).unwrap());
        let mut seen = std::collections::HashSet::new();
        for _ in 0..n {
            let r = c.reply(|_| 0);
            assert_eq!(r.error(), 0);
            assert!(seen.insert(r.handle()), "duplicate reply");
        }
        sender.join().unwrap();
        for h in 0..n {
            c.request(CMD_READ, 0, 1000 + h, h * 4096, 4096, &[]);
        }
        for _ in 0..n {
            let r = c.reply(|_| 4096);
            let h = r.handle() - 1000;
            assert_eq!(
                r.data(),
                &vec![h as u8 + 1; 4096][..],
                "model {model:?} handle {h}"
            );
        }
    }
}

#[test]
fn garbage_disconnects_only_that_client() {
    for model in models() {
        let srv = TestServer::start(cfg(model));
        let mut good = srv.go(false, false);
        assert_eq!(good.write(0, &[3u8; 512]), 0);

        // Bad option magic.
        let mut c = srv.connect();
        c.greet();
        c.s.write_all(&[0xffu8; 16]).unwrap();
        assert!(c.is_closed());
        // Unknown client flags.
        let mut c = srv.connect();
        let _ = c.read_n(18);
        c.s.write_all(&0x8000_0000u32.to_be_bytes()).unwrap();
        assert!(c.is_closed());
        // An option longer than any legitimate one.
        let mut c = srv.connect();
        c.greet();
        let mut h = OPT_MAGIC.to_be_bytes().to_vec();
        h.extend_from_slice(&OPT_GO.to_be_bytes());
        h.extend_from_slice(&u32::MAX.to_be_bytes());
        c.s.write_all(&h).unwrap();
        assert!(c.is_closed());
        // Bad request magic in transmission.
        let mut c = srv.go(true, false);
        c.s.write_all(&[0x55u8; 28]).unwrap();
        assert!(c.is_closed());
        // A write too large to skip: error reply, then close.
        let mut c = srv.go(false, false);
        c.request(CMD_WRITE, 0, 9, 0, u32::MAX, &[]);
        assert_eq!(c.reply(|_| 0).error(), ENOSPC);
        assert!(c.is_closed());
        // Disconnect in the middle of a write payload: nothing is written.
        let mut c = srv.go(false, false);
        c.request(CMD_WRITE, 0, 1, 65536, 4096, &[0xaau8; 1000]);
        drop(c);
        // Disconnect in the middle of a request header.
        let mut c = srv.go(false, false);
        c.s.write_all(
            &encode_request(&Request {
                flags: 0,
                typ: CMD_READ,
                handle: 1,
                offset: 0,
                len: 512,
            })[..10],
        )
        .unwrap();
        drop(c);

        // The good client is unaffected, and the partial write left no trace.
        assert_eq!(good.read(0, 512).unwrap(), vec![3u8; 512]);
        assert_eq!(good.read(65536, 4096).unwrap(), vec![0u8; 4096]);
        let st = srv.stop();
        assert!(st.connections >= 8);
    }
}

#[test]
fn handshake_must_finish_in_time() {
    let srv = TestServer::start(ServerConfig {
        handshake_timeout: Some(Duration::from_millis(300)),
        ..cfg(IoModel::Inline)
    });
    let mut c = srv.connect();
    let t = Instant::now();
    let _ = c.read_n(18);
    assert!(c.is_closed());
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn connection_limit_is_enforced() {
    let srv = TestServer::start(ServerConfig {
        max_connections: 2,
        ..cfg(IoModel::Inline)
    });
    let mut a = srv.go(false, false);
    let b = srv.go(false, false);
    let mut c = srv.connect();
    assert!(c.is_closed(), "third connection should be refused");
    assert_eq!(a.write(0, &[1u8; 512]), 0);
    drop(b.s.shutdown(std::net::Shutdown::Both));
    // Once one leaves, a new client fits (the slot is freed asynchronously).
    let t = Instant::now();
    loop {
        let mut d = srv.connect();
        let mut g = [0u8; 18];
        d.s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        if std::io::Read::read_exact(&mut d.s, &mut g).is_ok() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "slot never freed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = srv.stop();
    assert!(st.refused >= 1);
}

#[test]
fn shutdown_finishes_received_requests_and_unblocks_idle_clients() {
    for model in models() {
        let srv = TestServer::start(cfg(model));
        let mut busy = srv.go(true, false);
        let _idle = srv.go(false, false); // in transmission, sending nothing
        let mut stalled = srv.connect(); // never finishes the handshake
        let _ = stalled.read_n(18);
        let mut half = srv.go(false, false); // stops in the middle of a request header
        half.s.write_all(&[0x25, 0x60]).unwrap();
        for h in 0..16u64 {
            busy.request(CMD_WRITE, 0, h, h * 512, 512, &[h as u8; 512]);
        }
        for _ in 0..16 {
            assert_eq!(busy.reply(|_| 0).error(), 0);
        }
        let t = Instant::now();
        let stats = srv.stop();
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "shutdown took {:?}",
            t.elapsed()
        );
        assert_eq!(stats.requests, 16);
        assert!(busy.is_closed());
    }
}

#[test]
fn tcp_listener_works() {
    let backend = std::sync::Arc::new(pmkit_nbd::MemBackend::new(
        SIZE,
        pmkit_nbd::BlockSizes {
            minimum: MIN,
            preferred: 4096,
        },
        false,
    ));
    let server = pmkit_nbd::Server::bind(
        &pmkit_nbd::Listen::Tcp("127.0.0.1:0".parse().unwrap()),
        backend,
        cfg(IoModel::Inline),
    )
    .unwrap();
    let addr = server.tcp_addr().unwrap();
    assert_eq!(server.uri(), format!("nbd://{addr}/"));
    let stop = server.shutdown_handle();
    let t = std::thread::spawn(move || server.run().unwrap());
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut g = [0u8; 18];
    std::io::Read::read_exact(&mut s, &mut g).unwrap();
    assert_eq!(&g[..8], &INIT_MAGIC.to_be_bytes());
    drop(s);
    stop.shutdown();
    t.join().unwrap();
}
