//! `pmkit serve` with real NBD clients: libnbd's tools (nbdinfo, nbdcopy, nbdfuse), qemu-img and
//! qemu-io, fio's nbd engine, and ext4 on a loop device over nbdfuse. Also the orderly stop on
//! SIGTERM, TCP, read-only exports and the embedded default device.
//!
//! Tools come from scripts/test-packages.txt; in CI a missing tool fails the test.

mod serve_util;

use serve_util::*;
use std::time::Duration;

#[test]
fn nbdinfo_json_shows_size_block_sizes_and_flags() {
    if !have(&["nbdinfo"]) {
        return;
    }
    let dev = DevFile::new("info");
    let s = Serve::start(dev.path(), &["--size", "64M", "--export-name", "pm0"]);
    assert!(
        s.banner.contains("URI: nbd+unix:///pm0?socket="),
        "{}",
        s.banner
    );
    assert!(
        s.banner.contains("nbdfuse") && s.banner.contains("qemu"),
        "banner says how to connect"
    );
    let uri = format!("nbd+unix:///pm0?socket={}", s.sock.display());
    let j: serde_json::Value = serde_json::from_str(&ok(30, &["nbdinfo", "--json", &uri])).unwrap();
    assert_eq!(j["protocol"], "newstyle-fixed");
    assert_eq!(j["structured"], true);
    let e = &j["exports"][0];
    assert_eq!(e["export-name"], "pm0");
    // 64 MiB of media less the 4 KiB superblock.
    assert_eq!(e["export-size"], (64u64 << 20) - 4096);
    assert_eq!(e["block_size_minimum"], 512);
    assert_eq!(e["block_size_preferred"], 4096);
    assert_eq!(e["block_size_maximum"], 32u64 << 20);
    for f in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_fast_zero",
        "can_cache",
        "can_multi_conn",
        "can_df",
    ] {
        assert_eq!(e[f], true, "{f}");
    }
    assert_eq!(e["is_read_only"], false);
    assert_eq!(e["contexts"][0], "base:allocation");
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
}

#[test]
fn nbdcopy_256mib_in_and_out() {
    if !have(&["nbdcopy"]) {
        return;
    }
    let dev = DevFile::new("copy");
    let s = Serve::start(dev.path(), &["--size", "260M"]);
    let mut data = vec![0u8; 256 << 20];
    fill_random(&mut data, 0x5eed);
    // The export is slightly larger: the copy out is compared over the 256 MiB written.
    nbdcopy_round_trip(&s, &data, 120);
    drop(data);
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
}

#[test]
fn qemu_img_convert_and_qemu_io_patterns() {
    if !have(&["qemu-img", "qemu-io"]) {
        return;
    }
    let dev = DevFile::new("qemu");
    let s = Serve::start(dev.path(), &["--size", "32M"]);
    let img = s.dir.path().join("in.raw");
    let out = s.dir.path().join("out.raw");
    let mut data = vec![0u8; 16 << 20];
    fill_random(&mut data, 77);
    std::fs::write(&img, &data).unwrap();
    ok(
        60,
        &[
            "qemu-img",
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            img.to_str().unwrap(),
            &s.uri,
        ],
    );
    ok(
        60,
        &[
            "qemu-img",
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &s.uri,
            out.to_str().unwrap(),
        ],
    );
    let back = std::fs::read(&out).unwrap();
    assert_eq!(back.len() as u64, (32u64 << 20) - 4096);
    assert!(back[..data.len()] == data[..]);
    assert!(back[data.len()..].iter().all(|&b| b == 0));
    // Patterns at aligned and sub-block (512-byte) offsets, written then verified with -P.
    let io = |cmds: &[&str]| {
        let mut a = vec!["qemu-io", "-f", "raw"];
        for c in cmds {
            a.extend(["-c", c]);
        }
        a.push(&s.uri);
        let o = ok(60, &a);
        assert!(!o.contains("Pattern verification failed"), "{o}");
        o
    };
    io(&[
        "write -P 0xa5 0 64k",
        "write -P 0x5a 1m 4k",
        "write -P 0x3c 3584 1024",
        "write -z 2m 8k",
    ]);
    io(&[
        "read -P 0xa5 0 3584",
        "read -P 0x3c 3584 1024",
        "read -P 0xa5 4608 60928",
        "read -P 0x5a 1m 4k",
        "read -P 0 2m 8k",
    ]);
    io(&["flush"]);
    // A wrong expectation must be reported (the check can fail).
    let o = run(
        60,
        &["qemu-io", "-f", "raw", "-c", "read -P 0x11 0 4k", &s.uri],
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("Pattern verification failed"));
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
}

#[test]
fn fio_randwrite_then_verify_crc32c() {
    if !have(&["fio"]) {
        return;
    }
    let dev = DevFile::new("fio");
    let s = Serve::start(dev.path(), &["--size", "72M"]);
    let uri = format!("--uri={}", s.uri);
    // Two jobs (two connections), each on its own 32 MiB, 16 requests in flight each.
    let o = ok(
        180,
        &[
            "fio",
            "--name=verify",
            "--ioengine=nbd",
            &uri,
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            "--numjobs=2",
            "--size=32m",
            "--offset_increment=32m",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
            "--output-format=json",
        ],
    );
    let j: serde_json::Value = serde_json::from_str(&o[o.find('{').unwrap()..]).unwrap();
    for job in j["jobs"].as_array().unwrap() {
        assert_eq!(job["error"], 0);
        assert_eq!(job["write"]["io_bytes"], 32u64 << 20);
        // The verify pass reads back everything written.
        assert_eq!(job["read"]["io_bytes"], 32u64 << 20);
    }
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
}

#[test]
fn ext4_on_loop_over_nbdfuse_is_fsck_clean() {
    if !have(&[
        "nbdfuse",
        "losetup",
        "mkfs.ext4",
        "fsck.ext4",
        "fusermount3",
    ]) || !have_fuse_and_loop()
    {
        return;
    }
    let dev = DevFile::new("ext4");
    let s = Serve::start(dev.path(), &["--size", "96M"]);
    let fusedir = s.dir.path().join("fuse");
    let mnt = s.dir.path().join("mnt");
    std::fs::create_dir(&fusedir).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let fuse = fusedir.to_str().unwrap().to_string();
    let mut nbdfuse = std::process::Command::new("nbdfuse")
        .args([&fuse, &s.uri])
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Everything below is undone in reverse order, even on failure.
    struct Undo(Vec<Vec<String>>);
    impl Drop for Undo {
        fn drop(&mut self) {
            for c in self.0.iter().rev() {
                let a: Vec<&str> = c.iter().map(String::as_str).collect();
                let _ = run(30, &a);
            }
        }
    }
    let mut undo = Undo(vec![vec!["fusermount3".into(), "-u".into(), fuse.clone()]]);
    let file = fusedir.join("nbd");
    let t = std::time::Instant::now();
    while !file.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "nbdfuse did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let lo = ok(30, &["losetup", "-f", "--show", file.to_str().unwrap()])
        .trim()
        .to_string();
    undo.0.push(vec!["losetup".into(), "-d".into(), lo.clone()]);
    ok(60, &["mkfs.ext4", "-q", "-F", &lo]);
    let m = mnt.to_str().unwrap().to_string();
    ok(30, &["mount", &lo, &m]);
    undo.0.push(vec!["umount".into(), m.clone()]);
    let mut expect = Vec::new();
    for i in 0..24u64 {
        let mut d = vec![0u8; 4096 * (i as usize + 1) + 123];
        fill_random(&mut d, i + 1);
        std::fs::write(mnt.join(format!("f{i}")), &d).unwrap();
        expect.push(d);
    }
    ok(30, &["sync"]);
    ok(30, &["umount", &m]);
    undo.0.pop();
    let fsck = run(60, &["fsck.ext4", "-fn", &lo]);
    assert!(
        fsck.status.success(),
        "fsck.ext4 -fn: {}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
    // Mount again and compare the files.
    ok(30, &["mount", "-o", "ro", &lo, &m]);
    undo.0.push(vec!["umount".into(), m.clone()]);
    for (i, d) in expect.iter().enumerate() {
        assert!(
            std::fs::read(mnt.join(format!("f{i}"))).unwrap() == *d,
            "file f{i} differs"
        );
    }
    drop(undo);
    let _ = nbdfuse.wait();
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
}

#[test]
fn sigterm_flushes_and_marks_clean_then_data_survives_restart() {
    if !have(&["qemu-io"]) {
        return;
    }
    let dev = DevFile::new("term");
    let stats_dir = tempfile::tempdir().unwrap();
    let stats = stats_dir.path().join("stats.json");
    let s = Serve::start(
        dev.path(),
        &["--size", "16M", "--stats", stats.to_str().unwrap()],
    );
    ok(
        30,
        &["qemu-io", "-f", "raw", "-c", "write -P 0x77 8k 16k", &s.uri],
    );
    let (st, err) = s.stop();
    assert!(st.success(), "exit {st}: {err}");
    assert!(err.contains("closed cleanly"), "{err}");
    // --stats: the device's statistics as JSON, written again after close.
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert!(j["writes"].as_u64().unwrap() >= 1, "{j}");
    assert!(j["write_bytes"].as_u64().unwrap() >= 16 << 10, "{j}");
    assert!(j["flushes"].as_u64().unwrap() >= 1, "close flushes: {j}");
    assert!(j["write_latency"].is_object(), "{j}");
    let info = ok(30, &[PMKIT, "info", dev.path(), "--json"]);
    let j: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(j["found"]["current"]["clean"], true, "{info}");
    // Reopened (not created) and the data is there.
    let s = Serve::start(dev.path(), &[]);
    assert!(!s.banner.contains("created now"), "{}", s.banner);
    let o = ok(
        30,
        &["qemu-io", "-f", "raw", "-c", "read -P 0x77 8k 16k", &s.uri],
    );
    assert!(!o.contains("verification failed"));
    let (st, _) = s.stop();
    assert!(st.success());
}

#[test]
fn tcp_and_read_only() {
    if !have(&["nbdinfo", "qemu-io"]) {
        return;
    }
    let dev = DevFile::new("tcp");
    // Find a free port, then let the server bind it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let s = Serve::start(
        dev.path(),
        &["--size", "16M", "--listen", &addr, "--read-only"],
    );
    let uri = format!("nbd://{addr}/");
    assert!(s.banner.contains(&format!("URI: {uri}")), "{}", s.banner);
    let j: serde_json::Value = serde_json::from_str(&ok(30, &["nbdinfo", "--json", &uri])).unwrap();
    assert_eq!(j["exports"][0]["is_read_only"], true);
    let o = run(30, &["qemu-io", "-f", "raw", "-c", "write -P 1 0 4k", &uri]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !o.status.success()
            || text.contains("ermission")
            || text.contains("read-only")
            || text.contains("Read-only"),
        "{text}"
    );
    ok(
        30,
        &["qemu-io", "-f", "raw", "-r", "-c", "read -P 0 0 4k", &uri],
    );
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
}

#[test]
fn two_servers_cannot_share_a_device_or_socket() {
    let dev = DevFile::new("busy");
    let s = Serve::start(dev.path(), &["--size", "8M"]);
    // Same device, other socket: the device lock refuses.
    let o = run(
        30,
        &[
            PMKIT,
            "serve",
            dev.path(),
            "--socket",
            s.dir.path().join("b.sock").to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    // The first server is named as the holder.
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("in use by pid"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Same socket, other device: the live socket is not stolen.
    let dev2 = DevFile::new("busy2");
    let o = run(
        30,
        &[
            PMKIT,
            "serve",
            dev2.path(),
            "--size",
            "8M",
            "--socket",
            s.sock.to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already listening"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
}

#[test]
fn embedded_default_device_is_created_once_then_reused() {
    if !have(&["nbdinfo"]) {
        return;
    }
    let dev = DevFile::new("default");
    // The default path is overridable for tests only, so they never touch a user's device.
    std::env::set_var("PMKIT_SERVE_DEFAULT_DEVICE", dev.path());
    let s = Serve::start("", &["--size", "16M"]);
    assert!(s.banner.contains("created now"), "{}", s.banner);
    let (st, _) = s.stop();
    assert!(st.success());
    let s = Serve::start("", &[]);
    assert!(!s.banner.contains("created now"), "{}", s.banner);
    let j: serde_json::Value =
        serde_json::from_str(&ok(30, &["nbdinfo", "--json", &s.uri])).unwrap();
    assert_eq!(j["exports"][0]["export-size"], (16u64 << 20) - 4096);
    let (st, _) = s.stop();
    assert!(st.success());
}
