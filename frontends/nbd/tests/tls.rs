//! STARTTLS and option ordering under each `--tls` mode, per-identity access and per-name
//! read-only exports, against `MemBackend`, with an OpenSSL PSK client.

mod common;

use common::*;
use openssl::ssl::{SslConnector, SslMethod, SslStream, SslVerifyMode, SslVersion};
use pmkit_nbd::proto::*;
use pmkit_nbd::{BlockBackend, ExportSpec, IoModel, ServerConfig, TlsConfig, TlsMode};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

const KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const BOB_KEY: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

fn tls_cfg(mode: TlsMode, dir: &std::path::Path) -> ServerConfig {
    let psk = dir.join("keys.psk");
    std::fs::write(&psk, format!("alice:{KEY}\nbob:{BOB_KEY}\n")).unwrap();
    ServerConfig {
        tls_mode: mode,
        tls: Some(TlsConfig::new(Some(&psk), None, false).unwrap()),
        ..cfg(IoModel::Inline)
    }
}

fn option<S: Write>(s: &mut S, opt: u32, data: &[u8]) {
    let mut b = Vec::new();
    b.extend_from_slice(&OPT_MAGIC.to_be_bytes());
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).unwrap();
}

/// (reply type, data) of one option reply to `opt`.
fn reply<S: Read>(s: &mut S, opt: u32) -> (u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    assert_eq!(u64::from_be_bytes(h[0..8].try_into().unwrap()), REP_MAGIC);
    assert_eq!(u32::from_be_bytes(h[8..12].try_into().unwrap()), opt);
    let mut d = vec![0; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
    s.read_exact(&mut d).unwrap();
    (u32::from_be_bytes(h[12..16].try_into().unwrap()), d)
}

/// GO on `name`: the transmission flags, or the error reply type.
fn go<S: Read + Write>(s: &mut S, name: &str) -> Result<u16, u32> {
    option(s, OPT_GO, &info_payload(name, &[]));
    let mut flags = 0;
    loop {
        match reply(s, OPT_GO) {
            (REP_INFO, d) if u16::from_be_bytes([d[0], d[1]]) == INFO_EXPORT => {
                flags = u16::from_be_bytes([d[10], d[11]])
            }
            (REP_INFO, _) => {}
            (REP_ACK, _) => return Ok(flags),
            (e, _) => return Err(e),
        }
    }
}

/// Send STARTTLS on a greeted connection and run the client side of TLS with PSK `identity`.
fn starttls(
    mut c: Client,
    identity: &'static str,
    key: &'static str,
) -> Result<SslStream<UnixStream>, String> {
    option(&mut c.s, OPT_STARTTLS, &[]);
    assert_eq!(reply(&mut c.s, OPT_STARTTLS).0, REP_ACK);
    let mut b = SslConnector::builder(SslMethod::tls_client()).unwrap();
    b.set_min_proto_version(Some(SslVersion::TLS1_3)).unwrap();
    b.set_ciphersuites("TLS_AES_128_GCM_SHA256").unwrap();
    b.set_verify(SslVerifyMode::NONE);
    b.set_psk_client_callback(move |_, _hint, id, psk| {
        let k: Vec<u8> = (0..key.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&key[i..i + 2], 16).unwrap())
            .collect();
        id[..identity.len()].copy_from_slice(identity.as_bytes());
        id[identity.len()] = 0;
        psk[..k.len()].copy_from_slice(&k);
        Ok(k.len())
    });
    let conn = b
        .build()
        .configure()
        .unwrap()
        .verify_hostname(false)
        .use_server_name_indication(false);
    conn.connect("pmkit", c.s).map_err(|e| e.to_string())
}

#[test]
fn off_refuses_starttls_by_policy() {
    let srv = TestServer::start(cfg(IoModel::Inline));
    let mut c = srv.connect();
    c.greet();
    option(&mut c.s, OPT_STARTTLS, &[]);
    assert_eq!(reply(&mut c.s, OPT_STARTTLS).0, REP_ERR_POLICY);
    assert!(go(&mut c.s, "").is_ok());
}

#[test]
fn require_refuses_everything_but_starttls_and_abort_before_tls() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(tls_cfg(TlsMode::Require, dir.path()));
    let mut c = srv.connect();
    c.greet();
    for opt in [OPT_LIST, OPT_STRUCTURED_REPLY, OPT_INFO, 0x4242] {
        option(
            &mut c.s,
            opt,
            if opt == OPT_INFO {
                &[0, 0, 0, 0, 0, 0]
            } else {
                &[]
            },
        );
        assert_eq!(reply(&mut c.s, opt).0, REP_ERR_TLS_REQD, "option {opt}");
    }
    assert_eq!(go(&mut c.s, ""), Err(REP_ERR_TLS_REQD));
    option(&mut c.s, OPT_STARTTLS, b"x");
    assert_eq!(reply(&mut c.s, OPT_STARTTLS).0, REP_ERR_INVALID);
    option(&mut c.s, OPT_ABORT, &[]);
    assert_eq!(reply(&mut c.s, OPT_ABORT).0, REP_ACK);
    assert!(c.is_closed());
    // EXPORT_NAME cannot be refused with an error: the connection is closed.
    let mut c = srv.connect();
    c.greet();
    option(&mut c.s, OPT_EXPORT_NAME, b"");
    assert!(c.is_closed());
    // Through STARTTLS: haggling and transmission over TLS; a second STARTTLS is invalid.
    let mut c = srv.connect();
    c.greet();
    let mut t = starttls(c, "alice", KEY).unwrap();
    option(&mut t, OPT_STARTTLS, &[]);
    assert_eq!(reply(&mut t, OPT_STARTTLS).0, REP_ERR_INVALID);
    let flags = go(&mut t, "").unwrap();
    assert_eq!(flags & TF_READ_ONLY, 0);
    let data = vec![0x5au8; 4096];
    t.write_all(&encode_request(&Request {
        flags: 0,
        typ: CMD_WRITE,
        handle: 1,
        offset: 8192,
        len: 4096,
    }))
    .unwrap();
    t.write_all(&data).unwrap();
    let mut r = [0u8; 16];
    t.read_exact(&mut r).unwrap();
    assert_eq!(
        u32::from_be_bytes(r[4..8].try_into().unwrap()),
        0,
        "write failed"
    );
    let mut got = vec![0u8; 4096];
    srv.backend.read(8192, &mut got).unwrap();
    assert_eq!(got, data);
    drop(t);
    assert_eq!(srv.stop().connections, 3);
}

#[test]
fn on_serves_plain_and_tls_clients() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(tls_cfg(TlsMode::On, dir.path()));
    let mut c = srv.connect();
    c.greet();
    assert!(go(&mut c.s, "").is_ok());
    let mut c = srv.connect();
    c.greet();
    let mut t = starttls(c, "alice", KEY).unwrap();
    assert!(go(&mut t, "").is_ok());
}

#[test]
fn wrong_key_unknown_identity_and_plain_bytes_after_starttls_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(tls_cfg(TlsMode::Require, dir.path()));
    let wrong = "ff23456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let mut c = srv.connect();
    c.greet();
    assert!(starttls(c, "alice", wrong).is_err());
    let mut c = srv.connect();
    c.greet();
    assert!(starttls(c, "mallory", KEY).is_err());
    // STARTTLS agreed, then a plain GO: not a TLS ClientHello, so the server drops the client.
    let mut c = srv.connect();
    c.greet();
    option(&mut c.s, OPT_STARTTLS, &[]);
    assert_eq!(reply(&mut c.s, OPT_STARTTLS).0, REP_ACK);
    option(&mut c.s, OPT_GO, &info_payload("", &[]));
    let mut b = [0u8; 64];
    // Whatever the server sends (a TLS alert at most), no option reply, then end of file.
    let mut all = Vec::new();
    loop {
        match c.s.read(&mut b) {
            Ok(0) | Err(_) => break,
            Ok(n) => all.extend_from_slice(&b[..n]),
        }
    }
    assert!(all.len() < 20 || u64::from_be_bytes(all[0..8].try_into().unwrap()) != REP_MAGIC);
    // Others are still served, and nothing was written.
    let mut c = srv.connect();
    c.greet();
    let mut t = starttls(c, "alice", KEY).unwrap();
    assert!(go(&mut t, "").is_ok());
    let mut got = vec![1u8; SIZE as usize];
    srv.backend.read(0, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0));
}

#[test]
fn identities_and_read_only_export_names() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(ServerConfig {
        exports: vec![
            ExportSpec {
                name: "pm0".into(),
                read_only: false,
            },
            ExportSpec {
                name: "snap".into(),
                read_only: true,
            },
        ],
        write_identities: Some(vec!["alice".into()]),
        ..tls_cfg(TlsMode::On, dir.path())
    });
    // Plain client (no identity): read-only everywhere.
    let mut c = srv.connect();
    c.greet();
    assert_ne!(go(&mut c.s, "pm0").unwrap() & TF_READ_ONLY, 0);
    // alice writes pm0 (and the default ""), but snap stays read-only.
    for (name, ro) in [("pm0", false), ("", false), ("snap", true)] {
        let mut c = srv.connect();
        c.greet();
        let mut t = starttls(c, "alice", KEY).unwrap();
        assert_eq!(
            go(&mut t, name).unwrap() & TF_READ_ONLY != 0,
            ro,
            "alice on {name:?}"
        );
    }
    let mut c = srv.connect();
    c.greet();
    let mut t = starttls(c, "bob", BOB_KEY).unwrap();
    let flags = go(&mut t, "pm0").unwrap();
    assert_ne!(flags & TF_READ_ONLY, 0);
    // bob's write is refused with EPERM and changes nothing.
    t.write_all(&encode_request(&Request {
        flags: 0,
        typ: CMD_WRITE,
        handle: 7,
        offset: 0,
        len: 512,
    }))
    .unwrap();
    t.write_all(&[9u8; 512]).unwrap();
    let mut r = [0u8; 16];
    t.read_exact(&mut r).unwrap();
    assert_eq!(u32::from_be_bytes(r[4..8].try_into().unwrap()), EPERM);
    let mut got = vec![1u8; 512];
    srv.backend.read(0, &mut got).unwrap();
    assert_eq!(got, vec![0u8; 512]);
    // Unknown names are unknown.
    let mut c = srv.connect();
    c.greet();
    let mut t = starttls(c, "alice", KEY).unwrap();
    assert_eq!(go(&mut t, "nope"), Err(REP_ERR_UNKNOWN));
}
