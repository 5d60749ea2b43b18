//! `pmkit serve` with TLS and its access rules, driven by real clients: libnbd's nbdinfo/nbdcopy
//! over `nbds://` and `nbds+unix://` (PSK and certificates), qemu-img with `tls-creds-psk`, a kill -9
//! under TLS, the refusals (no TLS, wrong key, unknown identity, expired or untrusted client
//! certificate), the non-loopback listen rule, and the unix socket's mode, group and stale file.
//!
//! Keys and certificates are made at test time with psktool and certtool (gnutls-bin).

mod serve_util;

use serve_util::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// keys.psk with alice and bob (psktool's format), and wrong.psk: alice with another key, and
/// mallory, whom the server does not know.
fn make_psk(dir: &Path) {
    for (user, file) in [
        ("alice", "keys.psk"),
        ("bob", "keys.psk"),
        ("alice", "wrong.psk"),
        ("mallory", "wrong.psk"),
    ] {
        let f = dir.join(file);
        ok(30, &["psktool", "-u", user, "-p", f.to_str().unwrap()]);
    }
}

fn certtool_template(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(format!("{name}.info"));
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

/// A CA and a server certificate in `dir/server` (nbdkit layout), client credentials signed by
/// the CA in `dir/client` (libnbd layout), an expired client in `dir/expired` and a client of
/// another CA in `dir/stranger`.
fn make_certs(dir: &Path) {
    let s = |p: &Path| p.to_str().unwrap().to_string();
    for d in ["server", "client", "expired", "stranger"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let key = |p: &Path| {
        ok(
            30,
            &[
                "certtool",
                "--generate-privkey",
                "--key-type=ecdsa",
                "--outfile",
                &s(p),
            ],
        )
    };
    let ca_key = dir.join("ca-key.pem");
    let ca = dir.join("server/ca-cert.pem");
    key(&ca_key);
    let t = certtool_template(
        dir,
        "ca",
        "cn = pmkit test CA\nca\ncert_signing_key\nexpiration_days = 30\n",
    );
    ok(
        30,
        &[
            "certtool",
            "--generate-self-signed",
            "--load-privkey",
            &s(&ca_key),
            "--template",
            &t,
            "--outfile",
            &s(&ca),
        ],
    );
    for d in ["client", "expired"] {
        std::fs::copy(&ca, dir.join(d).join("ca-cert.pem")).unwrap();
    }
    let sign =
        |who: &str, key_path: &Path, cert: &Path, tmpl: &str, ca_cert: &Path, ca_key: &Path| {
            key(key_path);
            let t = certtool_template(dir, who, tmpl);
            ok(
                30,
                &[
                    "certtool",
                    "--generate-certificate",
                    "--load-privkey",
                    &s(key_path),
                    "--load-ca-certificate",
                    &s(ca_cert),
                    "--load-ca-privkey",
                    &s(ca_key),
                    "--template",
                    &t,
                    "--outfile",
                    &s(cert),
                ],
            );
        };
    sign("server", &dir.join("server/server-key.pem"), &dir.join("server/server-cert.pem"),
        "cn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\nencryption_key\nsigning_key\nexpiration_days = 30\n", &ca, &ca_key);
    sign(
        "client",
        &dir.join("client/client-key.pem"),
        &dir.join("client/client-cert.pem"),
        "cn = alice\ntls_www_client\nencryption_key\nsigning_key\nexpiration_days = 30\n",
        &ca,
        &ca_key,
    );
    sign("expired", &dir.join("expired/client-key.pem"), &dir.join("expired/client-cert.pem"),
        "cn = alice\ntls_www_client\nencryption_key\nsigning_key\nactivation_date = \"2001-01-01 00:00:00 UTC\"\nexpiration_date = \"2002-01-01 00:00:00 UTC\"\n", &ca, &ca_key);
    // Another CA, which the server does not trust, signs the stranger; the stranger trusts the
    // server's CA so that only the server's check can fail.
    let other_key = dir.join("other-ca-key.pem");
    let other = dir.join("other-ca.pem");
    key(&other_key);
    let t = certtool_template(
        dir,
        "other",
        "cn = other CA\nca\ncert_signing_key\nexpiration_days = 30\n",
    );
    ok(
        30,
        &[
            "certtool",
            "--generate-self-signed",
            "--load-privkey",
            &s(&other_key),
            "--template",
            &t,
            "--outfile",
            &s(&other),
        ],
    );
    std::fs::copy(&ca, dir.join("stranger/ca-cert.pem")).unwrap();
    sign(
        "stranger",
        &dir.join("stranger/client-key.pem"),
        &dir.join("stranger/client-cert.pem"),
        "cn = alice\ntls_www_client\nencryption_key\nsigning_key\nexpiration_days = 30\n",
        &other,
        &other_key,
    );
}

/// nbdcopy `data` in through `uri`, back out, compare.
fn round_trip(dir: &Path, uri: &str, data: &[u8]) {
    let src = dir.join("src.img");
    let back = dir.join("back.img");
    std::fs::write(&src, data).unwrap();
    ok(60, &["nbdcopy", src.to_str().unwrap(), uri]);
    ok(
        60,
        &["nbdcopy", "--no-extents", uri, back.to_str().unwrap()],
    );
    let out = std::fs::read(&back).unwrap();
    assert!(
        out[..data.len()] == data[..],
        "data read back over TLS differs"
    );
}

/// The export's first `n` bytes, read over `uri`.
fn read_back(dir: &Path, uri: &str, n: usize) -> Vec<u8> {
    let back = dir.join("check.img");
    ok(
        60,
        &["nbdcopy", "--no-extents", uri, back.to_str().unwrap()],
    );
    let mut v = std::fs::read(&back).unwrap();
    v.truncate(n);
    v
}

fn refused(cmd: &[&str], what: &str) -> String {
    let o = run(30, cmd);
    let t = text(&o);
    assert!(
        !o.status.success(),
        "{what}: the client was not refused: {t}"
    );
    t
}

#[test]
fn psk_over_tcp_and_unix_with_refusals() {
    if !have(&["psktool", "nbdinfo", "nbdcopy"]) {
        return;
    }
    let keys = tempfile::tempdir().unwrap();
    make_psk(keys.path());
    let psk = keys.path().join("keys.psk");
    let wrong = keys.path().join("wrong.psk");
    let (psk, wrong) = (psk.to_str().unwrap(), wrong.to_str().unwrap());
    let dev = DevFile::new("tls-psk");
    let addr = free_addr();
    let s = Serve::start(
        dev.path(),
        &[
            "--size",
            "64M",
            "--listen",
            &addr,
            "--tls",
            "require",
            "--tls-psk",
            psk,
        ],
    );
    assert!(
        s.banner.contains(&format!("URI: nbds://{addr}/")),
        "{}",
        s.banner
    );
    assert!(
        s.banner.contains("TLS required: PSK (2 identities"),
        "{}",
        s.banner
    );
    let uri = format!("nbds://alice@{addr}/?tls-psk-file={psk}");
    let mut data = vec![0u8; 8 << 20];
    fill_random(&mut data, 21);
    round_trip(s.dir.path(), &uri, &data);
    // Refusals, each leaving the server serving and the data as it was.
    let t = refused(
        &[
            "env",
            "LIBNBD_DEBUG=1",
            "nbdinfo",
            &format!("nbd://{addr}/"),
        ],
        "plain client",
    );
    assert!(
        t.contains("this server requires TLS"),
        "no NBD_REP_ERR_TLS_REQD message: {t}"
    );
    refused(
        &[
            "nbdinfo",
            &format!("nbds://alice@{addr}/?tls-psk-file={wrong}"),
        ],
        "wrong key",
    );
    refused(
        &[
            "nbdinfo",
            &format!("nbds://mallory@{addr}/?tls-psk-file={wrong}"),
        ],
        "unknown identity",
    );
    refused(
        &[
            "nbdcopy",
            "/dev/zero",
            &format!("nbds://mallory@{addr}/?tls-psk-file={wrong}"),
        ],
        "unknown identity writing",
    );
    assert!(
        read_back(s.dir.path(), &uri, data.len()) == data,
        "a refused client changed data"
    );
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
    assert!(
        err.contains("TLSv1.3 PSK identity alice"),
        "per-connection protection not logged: {err}"
    );
    assert!(err.contains("TLS handshake failed"), "{err}");

    // Over the unix socket, with kill -9 in the middle: the data is there after a restart.
    let s = Serve::start(dev.path(), &["--tls", "require", "--tls-psk", psk]);
    let uri = format!(
        "nbds+unix://bob@/?socket={}&tls-psk-file={psk}",
        s.sock.display()
    );
    fill_random(&mut data, 22);
    round_trip(s.dir.path(), &uri, &data);
    s.kill9();
    let s = Serve::start(dev.path(), &["--tls", "require", "--tls-psk", psk]);
    let uri = format!(
        "nbds+unix://bob@/?socket={}&tls-psk-file={psk}",
        s.sock.display()
    );
    assert!(
        read_back(s.dir.path(), &uri, data.len()) == data,
        "data lost across kill -9 under TLS"
    );
}

#[test]
fn certificates_with_client_verification() {
    if !have(&["certtool", "nbdinfo", "nbdcopy"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    make_certs(d.path());
    let dir = |x: &str| d.path().join(x).to_str().unwrap().to_string();
    let dev = DevFile::new("tls-cert");
    let addr = free_addr();
    let server = dir("server");
    let s = Serve::start(
        dev.path(),
        &[
            "--size",
            "32M",
            "--listen",
            &addr,
            "--tls",
            "require",
            "--tls-certificates",
            &server,
            "--tls-verify-peer",
            "--tls-rw-identity",
            "alice",
        ],
    );
    let uri = |who: &str| format!("nbds://{addr}/?tls-certificates={}", dir(who));
    let mut data = vec![0u8; 4 << 20];
    fill_random(&mut data, 23);
    round_trip(d.path(), &uri("client"), &data);
    refused(&["nbdinfo", &uri("expired")], "expired client certificate");
    refused(
        &["nbdinfo", &uri("stranger")],
        "client certificate of an untrusted CA",
    );
    refused(
        &["nbdcopy", "/dev/zero", &uri("stranger")],
        "untrusted client writing",
    );
    assert!(read_back(d.path(), &uri("client"), data.len()) == data);
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
    assert!(
        err.contains("certificate, client alice verified; export \"\" read-write"),
        "{err}"
    );

    // Over the unix socket too.
    let s = Serve::start(
        dev.path(),
        &[
            "--tls",
            "require",
            "--tls-certificates",
            &server,
            "--tls-verify-peer",
        ],
    );
    let uri = format!(
        "nbds+unix:///?socket={}&tls-certificates={}",
        s.sock.display(),
        dir("client")
    );
    fill_random(&mut data, 24);
    round_trip(d.path(), &uri, &data);
}

#[test]
fn qemu_img_with_tls_creds_psk_and_identity_access() {
    if !have(&["psktool", "qemu-img", "nbdinfo"]) {
        return;
    }
    let keys = tempfile::tempdir().unwrap();
    make_psk(keys.path());
    let psk = keys.path().join("keys.psk");
    let dev = DevFile::new("tls-qemu");
    let addr = free_addr();
    let port = addr.rsplit_once(':').unwrap().1;
    let s = Serve::start(
        dev.path(),
        &[
            "--size",
            "32M",
            "--listen",
            &addr,
            "--tls",
            "require",
            "--tls-psk",
            psk.to_str().unwrap(),
            "--export",
            "pm0",
            "--export",
            "snap:ro",
            "--tls-rw-identity",
            "alice",
        ],
    );
    let obj = format!(
        "tls-creds-psk,id=tls0,endpoint=client,dir={},username=alice",
        keys.path().display()
    );
    let opts = |name: &str| {
        format!("driver=nbd,server.type=inet,server.host=127.0.0.1,server.port={port},export={name},tls-creds=tls0")
    };
    let mut data = vec![0u8; 4 << 20];
    fill_random(&mut data, 25);
    let src = s.dir.path().join("q.img");
    let back = s.dir.path().join("qback.img");
    std::fs::write(&src, &data).unwrap();
    ok(
        60,
        &[
            "qemu-img",
            "convert",
            "-n",
            "-f",
            "raw",
            &src.to_string_lossy(),
            "--object",
            &obj,
            "--target-image-opts",
            &opts("pm0"),
        ],
    );
    ok(
        60,
        &[
            "qemu-img",
            "convert",
            "--object",
            &obj,
            "--image-opts",
            &opts("snap"),
            "-O",
            "raw",
            &back.to_string_lossy(),
        ],
    );
    assert!(
        std::fs::read(&back).unwrap()[..data.len()] == data[..],
        "qemu-img round trip differs"
    );
    // snap is read-only even to alice; bob gets pm0 read-only.
    let info = |user: &str, name: &str| {
        ok(
            30,
            &[
                "nbdinfo",
                &format!("nbds://{user}@{addr}/{name}?tls-psk-file={}", psk.display()),
            ],
        )
    };
    assert!(info("alice", "snap").contains("is_read_only: true"));
    assert!(info("alice", "pm0").contains("is_read_only: false"));
    assert!(info("bob", "pm0").contains("is_read_only: true"));
    let bob = format!("nbds://bob@{addr}/pm0?tls-psk-file={}", psk.display());
    refused(
        &["nbdcopy", "/dev/zero", &bob],
        "read-only identity writing",
    );
    assert!(
        read_back(s.dir.path(), &bob, data.len()) == data,
        "bob changed data"
    );
}

#[test]
fn network_listen_needs_tls_or_an_explicit_trust() {
    let dev = DevFile::new("tls-listen");
    let o = pmkit(&[
        "serve",
        dev.path(),
        "--size",
        "16M",
        "--listen",
        "0.0.0.0:0",
    ]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("refusing to listen on 0.0.0.0:0 without TLS")
            && t.contains("--tls require")
            && t.contains("--trusted-network"),
        "{t}"
    );
    assert!(
        !Path::new(dev.path()).exists(),
        "a refused server created the device"
    );
    let o = pmkit(&["serve", dev.path(), "--size", "16M", "--tls", "require"]);
    assert!(text(&o).contains("needs credentials"), "{}", text(&o));
    // (The harness's readiness probe connects to 0.0.0.0:PORT, which Linux routes to this host.)
    let any = free_addr().replace("127.0.0.1", "0.0.0.0");
    let s = Serve::start(
        dev.path(),
        &["--size", "16M", "--listen", &any, "--trusted-network"],
    );
    assert!(s.banner.contains("no TLS: plain text"), "{}", s.banner);
    assert!(s.stop().0.success());
}

#[test]
fn socket_mode_group_and_stale_socket() {
    let dev = DevFile::new("tls-sock");
    let s = Serve::start(dev.path(), &["--size", "16M"]);
    let m = std::fs::symlink_metadata(&s.sock).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o600, "default socket mode");
    assert!(s.banner.contains("socket: mode 600"), "{}", s.banner);
    // Moved out of the server's temporary directory (which goes with it), then the server is
    // killed: its socket file stays, with nobody listening.
    let dir = tempfile::tempdir().unwrap();
    let sock2 = dir.path().join("nbd.sock");
    std::fs::rename(&s.sock, &sock2).unwrap();
    s.kill9();
    assert!(std::fs::symlink_metadata(&sock2).is_ok());
    // A new server replaces the stale socket, with the mode and group asked for.
    let gid = std::fs::metadata("/").unwrap().gid();
    let s = Serve::start_in(
        dir,
        sock2.clone(),
        dev.path(),
        &["--socket-mode", "660", "--socket-group", &gid.to_string()],
    );
    let m = std::fs::symlink_metadata(&sock2).unwrap();
    assert_eq!((m.permissions().mode() & 0o777, m.gid()), (0o660, gid));
    // In use: refused, and the socket is left alone.
    let other = DevFile::new("tls-sock-other");
    let o = pmkit(&[
        "serve",
        other.path(),
        "--size",
        "16M",
        "--socket",
        sock2.to_str().unwrap(),
    ]);
    assert!(text(&o).contains("already listening"), "{}", text(&o));
    assert!(sock2.exists());
    drop(s);
    // Not a socket (a file, a symlink to a socket): refused, never unlinked.
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("file");
    std::fs::write(&file, b"keep").unwrap();
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&sock2, &link).unwrap();
    for p in [&file, &link] {
        let o = pmkit(&["serve", dev.path(), "--socket", p.to_str().unwrap()]);
        assert!(text(&o).contains("is not a socket"), "{}", text(&o));
        assert!(
            std::fs::symlink_metadata(p).is_ok(),
            "{} was removed",
            p.display()
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
}
