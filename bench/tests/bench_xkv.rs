//! xkv over real sockets: `pmkit-bench xkv-serve` answers memcached's text protocol (a raw
//! client here), memccp/memccat (libmemcached-tools) store and read back through it, a short
//! memcaslap run verifies values, and `pmkit-bench xkv --quick --json` reports every placement.
//! The libmemcached-tools parts skip outside CI when the tools are missing and fail under CI=true.

mod common;

use common::{have, json_of};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Server(Child, u16);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server(extra: &[&str]) -> Server {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(["xkv-serve", "--port", "0", "--memory-mib", "16"])
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start xkv-serve");
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().rsplit(':').next().unwrap().parse().unwrap();
    Server(c, port)
}

/// Send `input`, then read until the server closes (every input ends with quit).
fn talk(port: u16, input: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(input).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

fn need(tool: &str) -> bool {
    if have(tool) {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{tool} is missing (libmemcached-tools, scripts/test-packages.txt)"
    );
    eprintln!("skipping: {tool} is not installed (apt-get install libmemcached-tools)");
    false
}

#[test]
fn protocol_over_a_socket() {
    let dir = tempfile::Builder::new()
        .prefix("pmkit-xkv-proto")
        .tempdir_in("/dev/shm")
        .unwrap();
    let srv = server(&["--dir", dir.path().to_str().unwrap()]);
    let mut input = b"set a 5 0 3\r\nabc\r\nset b 7 0 2 noreply\r\nxy\r\n\
        get a b missing\r\ngets a\r\nadd a 0 0 1\r\nz\r\nreplace nope 0 0 1\r\nz\r\n\
        append a 0 0 1\r\nz\r\nget\r\nset bad x 0 1\r\n"
        .to_vec();
    input.extend_from_slice(b"delete b\r\ndelete b\r\ndelete b noreply\r\nversion\r\n");
    // A value over 1 MiB is swallowed and refused; one over the largest class too.
    input.extend_from_slice(b"set big 0 0 1100000\r\n");
    input.extend(std::iter::repeat_n(b'q', 1_100_000));
    input.extend_from_slice(b"\r\nset mid 0 0 9000\r\n");
    input.extend(std::iter::repeat_n(b'q', 9000));
    input.extend_from_slice(b"\r\nget mid\r\nflush_all\r\nget a\r\nstats\r\nquit\r\n");
    let out = talk(srv.1, &input);
    let lines: Vec<&str> = out.split("\r\n").collect();
    let want = ["STORED", "VALUE a 5 3", "abc", "VALUE b 7 2", "xy", "END"];
    assert_eq!(&lines[..6], &want, "{out}");
    assert!(lines[6].starts_with("VALUE a 5 3 "), "{out}");
    let rest = [
        "abc",
        "END",
        "NOT_STORED",
        "NOT_STORED",
        "ERROR",
        "ERROR",
        "CLIENT_ERROR bad command line format",
        "CLIENT_ERROR bad command line format",
        "DELETED",
        "NOT_FOUND",
        "VERSION pmkit-xkv 0.1.0",
        "SERVER_ERROR object too large for cache",
        "SERVER_ERROR object too large for cache",
        "END",
        "OK",
        "END",
    ];
    // "append" is not spoken (ERROR, and its data line "z" is read as a command: ERROR); a get
    // without keys and a set with bad flags are malformed.
    assert_eq!(&lines[7..7 + rest.len()], &rest[..], "{out}");
    assert!(out.contains("STAT curr_items 0\r\n"), "{out}");
    assert!(out.ends_with("END\r\n"), "{out}");

    // A line over the limit closes the connection with an error.
    let long = format!("get {}\r\n", "k ".repeat(5000));
    let out = talk(srv.1, long.as_bytes());
    assert_eq!(out, "CLIENT_ERROR line too long\r\n");
    // Killed, the server leaves no PM file behind (it unlinked it at start).
    drop(srv);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn memccp_and_memccat_read_back() {
    if !need("memccp") || !need("memccat") {
        return;
    }
    let srv = server(&[]);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("xkv-file.bin");
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&f, &data).unwrap();
    let servers = format!("--servers=127.0.0.1:{}", srv.1);
    let o = Command::new("memccp")
        .arg(&servers)
        .arg(&f)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let o = Command::new("memccat")
        .arg(&servers)
        .arg("xkv-file.bin")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    // memccat ends each value with a newline.
    assert_eq!(o.stdout.len(), data.len() + 1);
    assert!(
        o.stdout[..data.len()] == data[..],
        "memccat read back other bytes"
    );
}

#[test]
fn memcaslap_smoke_verifies_values() {
    if !need("memcaslap") {
        return;
    }
    let srv = server(&["--slow"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("etc.cfg");
    std::fs::write(
        &cfg,
        "key\n16 16 1\nvalue\n16 512 0.9\n513 8000 0.1\ncmd\n0 0.1\n1 0.9\n",
    )
    .unwrap();
    let o = Command::new("memcaslap")
        .arg(format!("--servers=127.0.0.1:{}", srv.1))
        .arg(format!("--cfg_cmd={}", cfg.display()))
        .args([
            "--execute_number=4000",
            "--threads=1",
            "--concurrency=4",
            "--verify=0.5",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("TPS: "), "{out}");
    assert!(out.contains("verify_failed: 0"), "{out}");
    assert!(
        !out.contains("CLIENT_ERROR") && !out.contains("SERVER_ERROR"),
        "{out}"
    );
    let stats = talk(srv.1, b"stats\r\nquit\r\n");
    let stat = |k: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {k} ")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(stat("cmd_get") + stat("cmd_set"), 4000, "{stats}");
    assert!(stat("get_hits") > 0, "{stats}");
}

#[test]
fn bench_quick_json_reports_every_placement() {
    let dir = tempfile::Builder::new()
        .prefix("pmkit-bench-xkv")
        .tempdir_in("/dev/shm")
        .unwrap();
    let svg = dir.path().join("xkv.svg");
    let caslap = have("memcaslap");
    let o = Command::new(env!("CARGO_BIN_EXE_pmkit-bench"))
        .args(["xkv", "--quick", "--json", "--dataset-mib", "8"])
        .args(["--memcaslap-ops", if caslap { "2000" } else { "0" }])
        .arg("--plot")
        .arg(&svg)
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json_of(&o);
    assert_eq!(v["tags"].as_array().unwrap().len(), 9);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 + 2 * 9, "{v}");
    assert_eq!(rows[0]["placement"], "all fast");
    assert_eq!(rows[1]["placement"], "all slow");
    for r in rows {
        assert!(r["measured_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["predicted_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["emulated_ms"].as_f64().unwrap() > 0.0, "level 2: {r}");
    }
    assert!(v["emulator_overhead_ns"].as_f64().unwrap() >= 0.0, "{v}");
    assert_eq!(v["stats"]["hits"], v["stats"]["gets"], "{v}");
    for k in [
        "benefit_measured_ms",
        "benefit_predicted_ms",
        "cost_measured_ms",
        "cost_predicted_ms",
        "cost_emulated_ms",
    ] {
        assert_eq!(v[k].as_array().unwrap().len(), 9, "{k}: {v}");
    }
    let misses = v["traced"]["accesses"].as_array().unwrap();
    assert!(
        misses.iter().all(|m| m.as_u64().unwrap() > 0),
        "every tag traced: {v}"
    );
    if caslap {
        let runs = v["memcaslap"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{v}");
        assert!(runs.iter().all(|r| r["ops_per_s"].as_f64().unwrap() > 0.0));
    }
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}
