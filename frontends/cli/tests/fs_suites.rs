//! External suites against `pmkit fs mount`: stress-ng's file stressors with `--verify`, fio with
//! `verify=crc32c`, and kill -9 of the daemon under fio and under a large untar. After every run
//! the pool is unmounted (or restarted after the kill) and `pmkit fs check` must be clean.
//!
//! The kill tests rely on PMFS's guarantee that a `write` is durable when it returns (the mount
//! has no writeback cache): fio saves which of its writes completed (`verify_state_save`) and
//! verifies exactly those after the restart; for tar, every file must be a prefix of its source
//! (tar writes each file front to back), and a second extraction must then give the whole tree.
//!
//! Needs root, /dev/fuse, fio, stress-ng and tar; skipped without them, except in CI (CI set),
//! where it fails. `PMKIT_KILL_TRIALS=N` runs N kill trials of each kind (default 2).

mod fs_mount_util;

use fs_mount_util::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{tool} is missing (scripts/test.sh installs it)"
        );
        eprintln!("skipped: {tool} is missing");
    }
    found
}

fn can_run_with(tools: &[&str]) -> bool {
    can_run() && tools.iter().all(|t| have(t))
}

fn trials() -> usize {
    std::env::var("PMKIT_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// Run a command; its combined output, and whether it succeeded.
fn run(cmd: &mut Command) -> (bool, String) {
    let o = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

#[test]
fn stress_ng_file_stressors_verify() {
    if !can_run_with(&["stress-ng"]) {
        return;
    }
    // The link and symlink stressors make up to 8192 names per round (symlinks take inodes): a
    // default 256 MiB pool has 16383.
    let s = scratch("256M");
    let d = Daemon::start(&s, &["--threads", "2"]);
    let tmp = s.mnt.join("stress");
    std::fs::create_dir(&tmp).unwrap();
    // Bounded by operation counts (and a timeout as a backstop), all stressors at once; the ones
    // that can check what they read back do so under --verify.
    let stressors: &[(&str, &[&str])] = &[
        ("hdd", &["--hdd-bytes", "4M", "--hdd-ops", "2000"]),
        ("iomix", &["--iomix-bytes", "8M", "--iomix-ops", "2000"]),
        ("seek", &["--seek-size", "8M", "--seek-ops", "2000"]),
        (
            "readahead",
            &["--readahead-bytes", "8M", "--readahead-ops", "100"],
        ),
        (
            "sync-file",
            &["--sync-file-bytes", "8M", "--sync-file-ops", "10"],
        ),
        (
            "fallocate",
            &["--fallocate-bytes", "8M", "--fallocate-ops", "20"],
        ),
        (
            "mmap",
            &["--mmap-file", "--mmap-bytes", "4M", "--mmap-ops", "4"],
        ),
        ("dir", &["--dir-ops", "200"]),
        ("dentry", &["--dentry-ops", "100"]),
        ("rename", &["--rename-ops", "2000"]),
        ("link", &["--link-ops", "1"]),
        ("symlink", &["--symlink-ops", "1"]),
        ("filename", &["--filename-ops", "100"]),
        ("getdent", &["--getdent-ops", "100"]),
        ("chmod", &["--chmod-ops", "100"]),
        ("utime", &["--utime-ops", "1000"]),
        ("fstat", &["--fstat-ops", "100"]),
        ("xattr", &["--xattr-ops", "10"]),
        ("flock", &["--flock-ops", "2000"]),
        ("lockf", &["--lockf-ops", "2000"]),
    ];
    let mut cmd = Command::new("stress-ng");
    cmd.arg("--temp-path")
        .arg(&tmp)
        .args(["--verify", "--timeout", "120s", "--metrics-brief"]);
    for (name, opts) in stressors {
        cmd.args([format!("--{name}"), "1".into()]).args(*opts);
    }
    let (ok, out) = run(&mut cmd);
    assert!(ok, "stress-ng failed:\n{out}\ndaemon: {}", d.log());
    assert!(out.contains("successful run completed"), "{out}");
    for (name, _) in stressors {
        assert!(
            out.contains(&format!("] {name} ")),
            "stressor {name} did not run:\n{out}"
        );
    }
    d.umount();
    check_clean(&s);
}

fn fio(dir: &Path, cwd: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new("fio");
    c.current_dir(cwd)
        .arg(format!("--directory={}", dir.display()))
        .args([
            "--name=pmkit",
            "--rw=randwrite",
            "--bs=4k",
            "--size=16M",
            "--numjobs=2",
            "--ioengine=psync",
            "--verify=crc32c",
            "--verify_fatal=1",
        ])
        .args(extra);
    c
}

#[test]
fn fio_verify_crc32c_then_a_corrupted_block_is_caught() {
    if !can_run_with(&["fio"]) {
        return;
    }
    let s = scratch("128M");
    let d = Daemon::start(&s, &["--threads", "2"]);
    let dir = s.mnt.join("fio");
    std::fs::create_dir(&dir).unwrap();
    let cwd = s.dir.path();
    let (ok, out) = run(&mut fio(&dir, cwd, &["--do_verify=1"]));
    assert!(ok, "fio write+verify failed:\n{out}");
    // After a remount, verify again (reads only): the data is the media's, not a cache's.
    d.umount();
    check_clean(&s);
    let d = Daemon::start(&s, &[]);
    let (ok, out) = run(&mut fio(&dir, cwd, &["--verify_only"]));
    assert!(ok, "fio verify after remount failed:\n{out}");
    // The control: one block changed behind fio's back must fail its verify.
    let victim = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0x5a; 4096], 4096 * 1000).unwrap();
    drop(f);
    let (ok, out) = run(&mut fio(&dir, cwd, &["--verify_only"]));
    assert!(!ok, "fio's verify must catch a changed block:\n{out}");
    d.umount();
    check_clean(&s);
}

#[test]
fn kill_9_under_fio_loses_no_completed_write() {
    if !can_run_with(&["fio"]) {
        return;
    }
    let s = scratch("128M");
    let dir = s.mnt.join("fio");
    for trial in 0..trials() {
        // One fio state directory per trial: fio saves which writes completed when it stops.
        let state = s.dir.path().join(format!("state-{trial}"));
        std::fs::create_dir(&state).unwrap();
        let d = Daemon::start(&s, &["--threads", "2"]);
        if trial == 0 {
            std::fs::create_dir(&dir).unwrap();
        }
        let mut writer = fio(
            &dir,
            &state,
            &[
                "--do_verify=0",
                "--verify_state_save=1",
                "--time_based",
                "--runtime=60",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        // Kill while both jobs write: after their files exist (a loaded machine can take
        // longer than the sleep to start fio; killed before its jobs run, fio saves no state).
        let t0 = std::time::Instant::now();
        while (0..2).any(|j| {
            std::fs::metadata(dir.join(format!("pmkit.{j}.0"))).map_or(true, |m| m.len() == 0)
        }) {
            assert!(t0.elapsed() < Duration::from_secs(30), "fio did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(800 + 400 * trial as u64));
        d.kill_9();
        // fio sees the mount go away, stops with errors and writes its state files.
        let st = writer.wait().unwrap();
        assert!(!st.success(), "fio cannot have finished a 60 s run");
        let states = std::fs::read_dir(&state).unwrap().count();
        assert_eq!(states, 2, "one verify state per fio job");
        check_clean(&s);
        let d = Daemon::start(&s, &[]);
        assert!(
            d.log().contains("detached a stale FUSE mount"),
            "{}",
            d.log()
        );
        let (ok, out) = run(&mut fio(
            &dir,
            &state,
            &["--verify_only", "--verify_state_load=1"],
        ));
        assert!(ok, "trial {trial}: a completed write was lost:\n{out}");
        println!("pmfs kill trial {trial} (fio): every completed write verified");
        d.umount();
        check_clean(&s);
    }
}

/// A deterministic tree of `files` files (sizes 0-96 KiB, some empty, a few large) in `dirs`
/// directories, with a symlink and a hard link here and there.
fn make_tree(root: &Path, dirs: usize, files: usize) {
    let mut rng = Rng(0x5eed_f7a2);
    for d in 0..dirs {
        std::fs::create_dir_all(root.join(format!("d{:03}/sub{}", d, d % 3))).unwrap();
    }
    for i in 0..files {
        let d = i % dirs;
        let p = root.join(format!("d{:03}/sub{}/f{i}.dat", d, d % 3));
        let len = match rng.below(20) {
            0 => 0,
            1 => 512 * 1024 + rng.below(512 * 1024) as usize,
            _ => rng.below(96 * 1024) as usize,
        };
        let seed = rng.next();
        let data: Vec<u8> = (0..len)
            .map(|j| (seed.wrapping_mul(j as u64 + 1) >> 29) as u8)
            .collect();
        std::fs::write(&p, data).unwrap();
        if i % 97 == 0 {
            std::os::unix::fs::symlink(format!("f{i}.dat"), p.with_extension("lnk")).unwrap();
        }
        if i % 101 == 0 {
            std::fs::hard_link(&p, p.with_extension("hard")).unwrap();
        }
    }
}

/// Every regular file under `got` is a prefix of the same file under `want`; the count checked.
fn files_are_prefixes(got: &Path, want: &Path) -> usize {
    let mut n = 0;
    for (rel, snap) in snapshot(got) {
        if let Snap::File { data, .. } = snap {
            let src = std::fs::read(want.join(&rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
            assert!(
                src.starts_with(&data),
                "{rel}: {} bytes on the mount are not a prefix of the source's {}",
                data.len(),
                src.len()
            );
            n += 1;
        }
    }
    n
}

#[test]
fn kill_9_under_a_large_untar_leaves_prefixes_and_a_clean_pool() {
    if !can_run_with(&["tar"]) {
        return;
    }
    let s = scratch("512M");
    let src = s.dir.path().join("src");
    make_tree(&src, 40, 1500);
    let tarball = s.dir.path().join("tree.tar");
    let (ok, out) = run(Command::new("tar")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(&src)
        .arg("."));
    assert!(ok, "{out}");
    let size = std::fs::metadata(&tarball).unwrap().len();
    assert!(size > 60 << 20, "a large tarball: {size} bytes");
    for trial in 0..trials() {
        let d = Daemon::start(&s, &["--threads", "2"]);
        let dest = s.mnt.join(format!("x{trial}"));
        std::fs::create_dir(&dest).unwrap();
        let mut tar = Command::new("tar")
            .arg("-xf")
            .arg(&tarball)
            .arg("-C")
            .arg(&dest)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300 + 300 * trial as u64));
        let finished = tar.try_wait().unwrap().is_some();
        d.kill_9();
        let _ = tar.wait();
        check_clean(&s);
        let d = Daemon::start(&s, &[]);
        let n = files_are_prefixes(&dest, &src);
        assert!(
            finished || n > 0,
            "trial {trial}: tar made no file before the kill"
        );
        // Extract again over what survived: the result is the whole tree.
        let (ok, out) = run(Command::new("tar")
            .arg("-xf")
            .arg(&tarball)
            .arg("-C")
            .arg(&dest));
        assert!(ok, "{out}");
        assert_eq!(snapshot(&dest), snapshot(&src), "trial {trial}");
        println!("pmfs kill trial {trial} (untar): {n} files were prefixes of their source");
        std::fs::remove_dir_all(&dest).unwrap();
        d.umount();
        check_clean(&s);
    }
}
