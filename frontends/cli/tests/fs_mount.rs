//! `pmkit fs mount` end to end, through the kernel: random POSIX operations (writes, truncates,
//! directories, every rename flag, symlinks, hard links, FIFOs, chmod, xattrs) run on the FUSE mount
//! and on a reference tree in tmpfs, the kernel's own file system as the model: each operation
//! must succeed or fail with the same errno on both, and the trees must be equal after every
//! step batch, after unmount + remount, and `pmkit fs check` clean. Then kill -9 of the daemon
//! while files are written and fsynced: the next `pmkit fs mount` detaches the stale mount,
//! `check` is clean and every fsynced file is intact. And SIGTERM: unmounts, marks clean. A
//! second mount, and `check --repair`, of a mounted pool are refused.
//!
//! Every test runs over both FUSE transports (`--transport dev`, then `uring` where the kernel
//! offers it; see `transports`). Needs root and /dev/fuse; skipped without them, except in CI
//! (CI set), where it fails. `PMKIT_KILL_TRIALS=N` runs N kill -9 trials (default 2).

mod fs_mount_util;

use fs_mount_util::*;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::Duration;

#[test]
fn random_operations_match_tmpfs_across_a_remount() {
    if !can_run() {
        return;
    }
    each_transport(random_operations_match_tmpfs_across_a_remount_over);
}

/// The same with the kernel's write-back cache (`--cache writeback`): writes land in the page
/// cache first; what the tree shows must not differ, nor what a remount finds after unmount.
#[test]
fn random_operations_match_tmpfs_with_the_writeback_cache() {
    if can_run() {
        each_transport(|t| random_operations_over(t, &["--cache", "writeback"]));
    }
}

fn random_operations_match_tmpfs_across_a_remount_over(t: &str) {
    random_operations_over(t, &[]);
}

fn random_operations_over(t: &str, extra: &[&str]) {
    let s = scratch("64M");
    let reference = s.dir.path().join("reference");
    std::fs::create_dir(&reference).unwrap();
    let mut args = vec!["--transport", t, "--threads", "2"];
    args.extend_from_slice(extra);
    let d = Daemon::start(&s, &args);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut outcomes = [0usize; 2];
    for step in 0..600 {
        let op = random_op(&mut rng);
        let want = apply(&reference, &op);
        let got = apply(&s.mnt, &op);
        assert_eq!(got, want, "step {step}: {op:?}");
        outcomes[want.is_ok() as usize] += 1;
        // Often: each walk lists every directory, which the kernel may answer from its
        // directory cache (`--cache long`), so a listing it failed to drop shows here.
        if step % 10 == 9 {
            assert_eq!(snapshot(&s.mnt), snapshot(&reference), "after step {step}");
        }
    }
    assert!(
        outcomes[1] > 150 && outcomes[0] > 150,
        "a mix of successes and errors: {outcomes:?}"
    );
    let want = snapshot(&reference);
    assert!(want.len() > 3, "{want:?}");
    assert_eq!(snapshot(&s.mnt), want);
    let out = d.umount();
    assert!(out.contains("marked the pool clean"), "{out}");
    check_clean(&s);
    let info = run_ok(&["fs", "info", s.pool.to_str().unwrap()]);
    assert!(
        info.contains("clean") && !info.contains("not unmounted cleanly"),
        "{info}"
    );
    let mut args = vec!["--transport", t];
    args.extend_from_slice(extra);
    let d = Daemon::start(&s, &args);
    assert!(d.log().contains("last unmount clean"), "{}", d.log());
    assert_eq!(snapshot(&s.mnt), want, "after remount");
    d.umount();
}

/// `user.pmkit.atomic` shows and sets a file's atomic flag: `--atomic` makes new files atomic,
/// the flag survives a remount, it cannot be removed; a fallocate of whole 2 MiB spans gets huge
/// blocks (st_blocks: 512 blocks of 4 KiB each, one node).
#[test]
fn the_atomic_flag_is_a_virtual_xattr_and_fallocate_gets_huge_blocks() {
    if !can_run() {
        return;
    }
    each_transport(the_atomic_flag_is_a_virtual_xattr_and_fallocate_gets_huge_blocks_over);
}

fn the_atomic_flag_is_a_virtual_xattr_and_fallocate_gets_huge_blocks_over(t: &str) {
    const X: &str = "user.pmkit.atomic";
    let s = scratch("32M");
    let d = Daemon::start(&s, &["--transport", t, "--atomic"]);
    let (a, b, dir) = (s.mnt.join("a"), s.mnt.join("b"), s.mnt.join("d"));
    std::fs::write(&a, b"x").unwrap();
    std::fs::create_dir(&dir).unwrap();
    assert_eq!(
        get_xattr(&a, X),
        Ok(b"1".to_vec()),
        "--atomic: new files are atomic"
    );
    // Read and set by name, never listed: `cp -a`, `rsync -X` and `getfattr -d` copy what
    // listxattr names to other file systems, where these names mean nothing.
    assert!(xattr_names(&a).is_empty(), "{:?}", xattr_names(&a));
    assert!(!xattr_names(&dir).contains(&X.to_string()));
    assert_eq!(get_xattr(&dir, X), Err(libc::ENODATA));
    assert_eq!(set_xattr(&a, X, Some(b"0")), Ok(()));
    assert_eq!(get_xattr(&a, X), Ok(b"0".to_vec()));
    assert_eq!(set_xattr(&a, X, Some(b"yes")), Err(libc::EINVAL));
    assert_eq!(set_xattr(&a, X, None), Err(libc::EPERM));
    d.umount();
    let d = Daemon::start(&s, &["--transport", t]);
    assert_eq!(get_xattr(&a, X), Ok(b"0".to_vec()), "kept across a remount");
    std::fs::write(&b, vec![7u8; 8192]).unwrap();
    assert_eq!(get_xattr(&b, X), Ok(b"0".to_vec()));
    assert_eq!(set_xattr(&b, X, Some(b"1")), Ok(()));
    let f = std::fs::OpenOptions::new().write(true).open(&b).unwrap();
    f.write_all_at(b"atomic", 100).unwrap();
    let h = std::fs::File::create(s.mnt.join("h")).unwrap();
    // SAFETY: fallocate on an open file of ours.
    let r = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&h), 0, 0, 4 << 20) };
    assert_eq!(r, 0, "fallocate: {}", std::io::Error::last_os_error());
    let m = std::os::unix::fs::MetadataExt::blocks(&h.metadata().unwrap());
    assert_eq!(
        m,
        (2 * 512 + 1) * 8,
        "two huge blocks and a node, in 512-byte units"
    );
    drop((f, h));
    d.umount();
    check_clean(&s);
    let d = Daemon::start(&s, &["--transport", t]);
    assert_eq!(get_xattr(&b, X), Ok(b"1".to_vec()));
    let got = std::fs::read(&b).unwrap();
    assert_eq!(&got[100..106], b"atomic");
    d.umount();
}

/// `user.pmkit.huge` shows and sets a file's huge flag: once set, 4 KiB writes through the mount
/// (FUSE requests) take whole 2 MiB blocks; kept across a remount; not removable.
#[test]
fn the_huge_flag_is_a_virtual_xattr_and_hinted_writes_get_huge_blocks() {
    if !can_run() {
        return;
    }
    each_transport(the_huge_flag_over);
}

fn the_huge_flag_over(t: &str) {
    const X: &str = "user.pmkit.huge";
    let s = scratch("32M");
    let d = Daemon::start(&s, &["--transport", t]);
    let (h, dir) = (s.mnt.join("h"), s.mnt.join("d"));
    std::fs::write(&h, b"").unwrap();
    std::fs::create_dir(&dir).unwrap();
    assert_eq!(get_xattr(&h, X), Ok(b"0".to_vec()), "new files do not ask");
    assert!(xattr_names(&h).is_empty(), "{:?}", xattr_names(&h));
    assert_eq!(get_xattr(&dir, X), Err(libc::ENODATA));
    assert_eq!(set_xattr(&h, X, Some(b"2")), Err(libc::EINVAL));
    assert_eq!(set_xattr(&h, X, None), Err(libc::EPERM));
    assert_eq!(set_xattr(&h, X, Some(b"1")), Ok(()));
    let f = std::fs::OpenOptions::new().append(true).open(&h).unwrap();
    for i in 0..3u8 {
        f.write_all_at(&[i; 4096], u64::from(i) * 4096).unwrap();
    }
    let m = std::os::unix::fs::MetadataExt::blocks(&f.metadata().unwrap());
    assert_eq!(
        m,
        512 * 8,
        "12 KiB written, one 2 MiB block, in 512-byte units"
    );
    drop(f);
    d.umount();
    check_clean(&s);
    let d = Daemon::start(&s, &["--transport", t]);
    assert_eq!(get_xattr(&h, X), Ok(b"1".to_vec()), "kept across a remount");
    let got = std::fs::read(&h).unwrap();
    assert_eq!((got.len(), got[8192]), (12288, 2));
    d.umount();
}

/// `user.pmkit.checksum` shows and sets a file's data checksums; a byte of a summed file changed
/// on the media is EIO through the mount (the rest of the file reads), and `pmkit fs check`
/// names it and exits 4.
#[test]
fn the_checksum_flag_is_a_virtual_xattr_and_damage_is_eio() {
    if !can_run() {
        return;
    }
    each_transport(the_checksum_flag_over);
}

fn the_checksum_flag_over(t: &str) {
    const X: &str = "user.pmkit.checksum";
    let s = scratch("32M");
    let d = Daemon::start(&s, &["--transport", t]);
    let c = s.mnt.join("c");
    // block 1 holds a pattern found nowhere else on the media
    let marker: Vec<u8> = b"pmkit-sums-marker-"
        .iter()
        .copied()
        .cycle()
        .take(4096)
        .collect();
    let mut data = vec![0xA5u8; 3 * 4096];
    data[4096..8192].copy_from_slice(&marker);
    std::fs::write(&c, &data).unwrap();
    assert_eq!(get_xattr(&c, X), Ok(b"0".to_vec()), "off by default");
    assert_eq!(set_xattr(&c, X, Some(b"1")), Ok(()));
    assert_eq!(get_xattr(&c, X), Ok(b"1".to_vec()));
    assert!(xattr_names(&c).is_empty(), "{:?}", xattr_names(&c));
    assert_eq!(set_xattr(&c, X, None), Err(libc::EPERM));
    let f = std::fs::OpenOptions::new().write(true).open(&c).unwrap();
    f.write_all_at(b"tail", 3 * 4096).unwrap();
    drop(f);
    data.extend_from_slice(b"tail");
    assert_eq!(std::fs::read(&c).unwrap(), data);
    d.umount();
    check_clean(&s);
    // one byte of the marker block changes on the media
    let mut img = std::fs::read(&s.pool).unwrap();
    let at: Vec<usize> = img
        .windows(marker.len())
        .enumerate()
        .filter(|(_, w)| *w == &marker[..])
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the marker block is on the media once");
    img[at[0] + 100] ^= 1;
    std::fs::write(&s.pool, &img).unwrap();
    let out = pmkit()
        .args(["fs", "check", s.pool.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(
        text.contains("data damage: inode") && text.contains("file offset 4096"),
        "{text}"
    );
    // a mount with --checksum sums the files it creates
    let d = Daemon::start(&s, &["--transport", t, "--checksum"]);
    let n = s.mnt.join("n");
    std::fs::write(&n, b"new").unwrap();
    assert_eq!(
        get_xattr(&n, X),
        Ok(b"1".to_vec()),
        "--checksum: new files are summed"
    );
    let f = std::fs::File::open(&c).unwrap();
    let mut b = vec![0u8; 4096];
    f.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(b, vec![0xA5u8; 4096], "the blocks around it read");
    let e = f.read_exact_at(&mut b, 4096).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    drop(f);
    // damage met in use: the pool is not marked clean, so the next mount walks it all
    let out = pmkit()
        .args(["fs", "umount", s.mnt.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("WITHOUT marking the pool clean"), "{text}");
    let log = d.log();
    assert!(
        log.contains("data checksum mismatch at file offset 4096"),
        "{log}"
    );
    drop(d);
}

#[test]
fn a_second_mount_is_refused_and_sigterm_unmounts_and_marks_clean() {
    if !can_run() {
        return;
    }
    each_transport(a_second_mount_is_refused_and_sigterm_unmounts_and_marks_clean_over);
}

fn a_second_mount_is_refused_and_sigterm_unmounts_and_marks_clean_over(t: &str) {
    let s = scratch("16M");
    let d = Daemon::start(&s, &["--transport", t]);
    std::fs::write(s.mnt.join("f"), b"kept").unwrap();
    let o = pmkit()
        .args([
            "fs",
            "mount",
            s.pool.to_str().unwrap(),
            s.mnt.to_str().unwrap(),
            "--transport",
            t,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("already mounted"),
        "{err}"
    );
    // repair refuses a mounted pool, naming the mount and the command that unmounts it
    let o = pmkit()
        .args(["fs", "check", s.pool.to_str().unwrap(), "--repair"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let mnt = std::fs::canonicalize(&s.mnt).unwrap();
    assert!(
        !o.status.success()
            && err.contains(&format!("not repaired: it is mounted on {}", mnt.display()))
            && err.contains(&format!("pid {}", d.child.id()))
            && err.contains(&format!("pmkit fs umount {}", mnt.display())),
        "{err}"
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(d.child.id() as i32, libc::SIGTERM) };
    let log_path = d.stderr.clone();
    let st = d.wait(Duration::from_secs(20));
    let log = std::fs::read_to_string(log_path).unwrap();
    assert!(st.success(), "{st:?}: {log}");
    assert!(
        log.contains("signal 15: unmounted") && log.contains("marked clean"),
        "{log}"
    );
    check_clean(&s);
    let info = run_ok(&["fs", "info", s.pool.to_str().unwrap()]);
    assert!(!info.contains("not unmounted cleanly"), "{info}");
    let d = Daemon::start(&s, &["--transport", t]);
    assert_eq!(std::fs::read(s.mnt.join("f")).unwrap(), b"kept");
    d.umount();
}

#[test]
fn sigterm_with_a_file_open_detaches_and_serves_it_until_closed() {
    if !can_run() {
        return;
    }
    each_transport(sigterm_with_a_file_open_detaches_and_serves_it_until_closed_over);
}

fn sigterm_with_a_file_open_detaches_and_serves_it_until_closed_over(t: &str) {
    let s = scratch("16M");
    let d = Daemon::start(&s, &["--transport", t]);
    let mut f = std::fs::File::create(s.mnt.join("held")).unwrap();
    f.write_all(b"before ").unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(d.child.id() as i32, libc::SIGTERM) };
    let t0 = std::time::Instant::now();
    while !d.log().contains("is busy: detaching") {
        assert!(t0.elapsed() < Duration::from_secs(10), "{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        std::fs::read_dir(&s.mnt).unwrap().next().is_none(),
        "the directory is no longer the mount"
    );
    // The open file is still served, and its writes still reach PM.
    f.write_all(b"after").unwrap();
    f.sync_all().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut d = d;
    assert!(
        d.child.try_wait().unwrap().is_none(),
        "serving the open file"
    );
    drop(f);
    let log_path = d.stderr.clone();
    let st = d.wait(Duration::from_secs(20));
    let log = std::fs::read_to_string(log_path).unwrap();
    assert!(
        st.success() && log.contains("(lazily)") && log.contains("marked clean"),
        "{log}"
    );
    check_clean(&s);
    let d = Daemon::start(&s, &["--transport", t]);
    assert_eq!(std::fs::read(s.mnt.join("held")).unwrap(), b"before after");
    d.umount();
}

fn content(i: usize, round: usize) -> Vec<u8> {
    (0..(i * 1499 + 700) % 20_000 + 1)
        .map(|j| (i * 31 + j * 7 + round) as u8)
        .collect()
}

#[test]
fn kill_9_of_the_daemon_while_writing_loses_no_fsynced_file() {
    if !can_run() {
        return;
    }
    each_transport(kill_9_of_the_daemon_while_writing_loses_no_fsynced_file_over);
}

/// The same with the kernel's write-back cache: a write returns from the page cache, and fsync
/// is what makes it durable, so what fsync acknowledged survives the kill.
#[test]
fn kill_9_loses_no_fsynced_file_with_the_writeback_cache() {
    if can_run() {
        each_transport(|t| kill_9_over(t, &["--cache", "writeback"]));
    }
}

fn kill_9_of_the_daemon_while_writing_loses_no_fsynced_file_over(t: &str) {
    kill_9_over(t, &[]);
}

fn kill_9_over(t: &str, extra: &[&str]) {
    let trials: usize = std::env::var("PMKIT_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let s = scratch("64M");
    // Files acknowledged by fsync, with their content (name -> (i, round)).
    let mut durable: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for trial in 0..trials {
        let mut args = vec!["--transport", t, "--threads", "2"];
        args.extend_from_slice(extra);
        let d = Daemon::start(&s, &args);
        if trial > 0 {
            assert!(
                d.log().contains("detached a stale FUSE mount"),
                "the stale mount of the killed daemon: {}",
                d.log()
            );
            assert!(d.log().contains("NOT clean"), "{}", d.log());
        }
        for (name, &(i, round)) in &durable {
            let got = std::fs::read(s.mnt.join(name)).unwrap();
            assert!(
                got == content(i, round),
                "trial {trial}: {name} was fsynced; read {} bytes of {}; the mount's log:\n{}",
                got.len(),
                content(i, round).len(),
                d.log()
            );
        }
        let mnt = s.mnt.clone();
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let mnt = mnt.clone();
                std::thread::spawn(move || {
                    let mut acked = Vec::new();
                    for i in (w..).step_by(2) {
                        let name = format!("t{trial}-f{i}");
                        let r = (|| {
                            let mut f = std::fs::File::create(mnt.join(&name))?;
                            let data = content(i, trial);
                            f.write_all(&data[..data.len() / 2])?;
                            f.write_all_at(&data[data.len() / 2..], (data.len() / 2) as u64)?;
                            f.sync_all()
                        })();
                        match r {
                            Ok(()) => acked.push((name, (i, trial))),
                            Err(_) => return acked,
                        }
                    }
                    acked
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300 + 200 * trial as u64));
        d.kill_9();
        for w in writers {
            let acked = w.join().unwrap();
            assert!(!acked.is_empty() || trial > 0, "some files were written");
            durable.extend(acked);
        }
        check_clean(&s);
        println!(
            "pmfs kill trial {trial} (fsync): {} fsynced files so far",
            durable.len()
        );
    }
    assert!(durable.len() > 10, "{}", durable.len());
    let d = Daemon::start(&s, &["--transport", t]);
    for (name, &(i, round)) in &durable {
        assert_eq!(
            std::fs::read(s.mnt.join(name)).unwrap(),
            content(i, round),
            "{name}"
        );
    }
    d.umount();
    check_clean(&s);
}

#[test]
fn stats_give_the_journal_bytes_and_fences_of_each_request() {
    if !can_run() {
        return;
    }
    each_transport(stats_give_the_journal_bytes_and_fences_of_each_request_over);
}

fn stats_give_the_journal_bytes_and_fences_of_each_request_over(t: &str) {
    let s = scratch("64M");
    let stats = s.dir.path().join("stats.json");
    let d = Daemon::start(&s, &["--transport", t, "--stats", stats.to_str().unwrap()]);
    for i in 0..20 {
        std::fs::File::create(s.mnt.join(format!("f{i}"))).unwrap();
        std::fs::create_dir(s.mnt.join(format!("d{i}"))).unwrap();
        std::fs::rename(
            s.mnt.join(format!("f{i}")),
            s.mnt.join(format!("d{i}/f{i}")),
        )
        .unwrap();
    }
    d.umount();
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let row = |op: &str| {
        j["ops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["op"] == op)
            .unwrap_or_else(|| panic!("no {op} row: {j}"))
            .clone()
    };
    // Under the default cache the kernel makes files with MKNOD (CREATE is answered ENOSYS).
    assert!(
        j["ops"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["op"] != "create"),
        "{j}"
    );
    for op in ["mknod", "mkdir", "rename"] {
        let r = row(op);
        assert_eq!(r["ops"], 20, "{r}");
        assert_eq!(r["errors"], 0, "{r}");
        // One transaction each: undo entries plus a commit entry, 64 bytes apiece, 3 fences
        // (4 when the lane wraps).
        let jb = r["journal_bytes_per_op"].as_f64().unwrap();
        let fences = r["fences_per_op"].as_f64().unwrap();
        assert!(
            (128.0..=1024.0).contains(&jb),
            "{op}: {jb} journal bytes per op"
        );
        assert!(
            (3.0..=4.0).contains(&fences),
            "{op}: {fences} fences per op"
        );
    }
    // Lookups change nothing on PM.
    assert_eq!(row("lookup")["journal_bytes"], 0);
    assert!(j["journal_bytes"].as_u64().unwrap() >= 60 * 128, "{j}");
}

/// Under the default cache the kernel keeps directory listings (`FOPEN_CACHE_DIR`): a listing
/// after every kind of change to a directory shows the change, and listing an unchanged
/// directory again asks the daemon for no listing (counted by `--stats`). Directories open
/// without OPENDIR: the first is answered ENOSYS, and the kernel sends no more.
#[test]
fn listings_follow_every_change_and_come_from_the_kernels_cache_otherwise() {
    if can_run() {
        each_transport(listings_over);
    }
}

fn listings_over(t: &str) {
    use std::collections::BTreeSet;
    let s = scratch("64M");
    let stats = s.dir.path().join("stats.json");
    let d = Daemon::start(&s, &["--transport", t, "--stats", stats.to_str().unwrap()]);
    let (a, b) = (s.mnt.join("a"), s.mnt.join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let ls = |p: &std::path::Path| -> Vec<String> {
        let names: BTreeSet<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.into_iter().collect()
    };
    // Each step: the change, what a and b hold after it, and how many of them it changed.
    let steps: [(&str, [&[&str]; 2], u64); 9] = [
        ("create", [&["x"], &[]], 1),
        ("mkdir", [&["d", "x"], &[]], 1),
        ("rename within", [&["d", "y"], &[]], 1),
        ("rename across", [&["d"], &["y"]], 2),
        ("link", [&["d", "l"], &["y"]], 1),
        ("symlink", [&["d", "l", "s"], &["y"]], 1),
        ("unlink", [&["d", "s"], &["y"]], 1),
        ("rmdir", [&["s"], &["y"]], 1),
        ("rename over", [&[], &["y"]], 2),
    ];
    // The first listing of each directory fills the kernel's cache.
    assert!(ls(&a).is_empty() && ls(&b).is_empty());
    let mut listings = 2;
    for (name, after, changed) in steps {
        match name {
            "create" => drop(std::fs::File::create(a.join("x")).unwrap()),
            "mkdir" => std::fs::create_dir(a.join("d")).unwrap(),
            "rename within" => std::fs::rename(a.join("x"), a.join("y")).unwrap(),
            "rename across" => std::fs::rename(a.join("y"), b.join("y")).unwrap(),
            "link" => std::fs::hard_link(b.join("y"), a.join("l")).unwrap(),
            "symlink" => std::os::unix::fs::symlink("y", a.join("s")).unwrap(),
            "unlink" => std::fs::remove_file(a.join("l")).unwrap(),
            "rmdir" => std::fs::remove_dir(a.join("d")).unwrap(),
            "rename over" => std::fs::rename(a.join("s"), b.join("y")).unwrap(),
            _ => unreachable!(),
        }
        // Twice: the second pass over unchanged directories comes from the kernel's cache.
        for pass in 0..2 {
            assert_eq!(ls(&a), after[0], "a after {name}, pass {pass} over {t}");
            assert_eq!(ls(&b), after[1], "b after {name}, pass {pass} over {t}");
        }
        listings += changed;
    }
    d.umount();
    let (built, j) = (
        requests(&stats, "readdir"),
        std::fs::read_to_string(&stats).unwrap(),
    );
    // At most one listing per changed directory (the kernel may drop its cache, never keep a
    // stale one: the contents above are checked either way).
    assert!(
        built <= listings,
        "{built} listings built for {listings} changed directories over {t}: {j}"
    );
    let opendirs = requests(&stats, "opendir");
    assert!(
        opendirs == 1,
        "{opendirs} OPENDIRs over {t}, 1 expected: {j}"
    );
}

/// Listings carry attributes (READDIRPLUS): `ls -l` of a large directory on a fresh mount asks
/// no LOOKUP or GETATTR per entry, and every entry the kernel took a reference to through a
/// listing is given back: after the files are removed and the mount is gone, no orphan is left
/// (`check` clean). Several replies' worth of entries, so some do not fit a reply and are let go.
#[test]
fn listings_with_attributes_hold_and_give_back_every_entry() {
    if can_run() {
        each_transport(listings_with_attributes_over);
    }
}

fn listings_with_attributes_over(t: &str) {
    let s = scratch("64M");
    let stats = s.dir.path().join("stats.json");
    let names: Vec<String> = (0..1500)
        .map(|i| format!("a-name-long-enough-to-fill-replies-quickly-{i:05}"))
        .collect();
    {
        let d = Daemon::start(&s, &["--transport", t]);
        let dir = s.mnt.join("big");
        std::fs::create_dir(&dir).unwrap();
        for (i, n) in names.iter().enumerate() {
            std::fs::write(dir.join(n), i.to_string()).unwrap();
        }
        d.umount();
    }
    let d = Daemon::start(&s, &["--transport", t, "--stats", stats.to_str().unwrap()]);
    // Inodes in use: total less free (`df -i`'s IUsed).
    let used_inodes = || {
        let out = std::process::Command::new("stat")
            .args(["-f", "-c", "%c %d"])
            .arg(&s.mnt)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        let v: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
        v[0] - v[1]
    };
    let used_before = used_inodes();
    let dir = s.mnt.join("big");
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        let i: usize = e.file_name().to_str().unwrap()[43..].parse().unwrap();
        assert_eq!(m.len(), i.to_string().len() as u64, "{:?}", e.file_name());
        seen += 1;
    }
    assert_eq!(seen, names.len());
    // Remove them while the kernel still holds the listing's references.
    for n in &names {
        std::fs::remove_file(dir.join(n)).unwrap();
    }
    // Every removed file is freed once the kernel gives its references back (FORGET, soon
    // after the unlink): a reference held for the listing and never given back would keep one.
    let mut waited = 0;
    while used_inodes() > used_before - names.len() as u64 && waited < 50 {
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    }
    assert_eq!(used_inodes(), used_before - names.len() as u64, "over {t}");
    d.umount();
    let count = |op: &str| requests(&stats, op);
    // No LOOKUP per entry, and no GETATTR per entry beyond the directory's own, which each
    // unlink makes the kernel ask for again (its permission check after the change). Slack
    // of a reply's worth, should one be a plain READDIR.
    let (lookups, getattrs) = (count("lookup"), count("getattr"));
    assert!(
        lookups < 100 && getattrs < names.len() as u64 + 100,
        "{lookups} lookups and {getattrs} getattrs for {} entries over {t}",
        names.len()
    );
    check_clean(&s);
}

/// The file system clears privileges itself (FUSE's HANDLE_KILLPRIV_V2, which spares every
/// write a `security.capability` round trip): a write or truncate by another user clears
/// set-user-ID, and set-group-ID where group execute is set (not where it is not); root's
/// write keeps them (CAP_FSETID); a chown clears them whoever calls it. As the kernel does for
/// its own file systems. File capabilities are stored (`tests/data/special_xattrs.py` checks
/// that a write, truncate or chown drops them).
#[test]
fn writes_truncates_and_chowns_clear_privileges_as_the_kernel_does() {
    if !can_run()
        || std::process::Command::new("python3")
            .arg("-V")
            .output()
            .is_err()
    {
        assert!(std::env::var_os("CI").is_none(), "python3 missing in CI");
        return;
    }
    each_transport(privileges_over);
}

fn privileges_over(t: &str) {
    let s = scratch("32M");
    let d = Daemon::start(&s, &["--transport", t]);
    let m = s.mnt.to_str().unwrap();
    let script = format!(
        "import os, struct\n\
         def as_nobody(f):\n\
         \x20   pid = os.fork()\n\
         \x20   if pid == 0:\n\
         \x20       os.setgid(65534); os.setuid(65534); f(); os._exit(0)\n\
         \x20   assert os.waitpid(pid, 0)[1] == 0\n\
         def mode(p):\n\
         \x20   return oct(os.stat(p).st_mode & 0o7777)\n\
         def fresh(name, m):\n\
         \x20   p = '{m}/' + name\n\
         \x20   with open(p, 'wb') as f: f.write(b'abc')\n\
         \x20   os.chmod(p, m)\n\
         \x20   return p\n\
         def write(p):\n\
         \x20   fd = os.open(p, os.O_WRONLY); os.pwrite(fd, b'x', 1); os.close(fd)\n\
         r = []\n\
         p = fresh('w', 0o6777); as_nobody(lambda: write(p)); r.append(mode(p))\n\
         p = fresh('g', 0o2666); as_nobody(lambda: write(p)); r.append(mode(p))\n\
         p = fresh('root', 0o6777); write(p); r.append(mode(p))\n\
         p = fresh('t', 0o6777); as_nobody(lambda: os.truncate(p, 1)); r.append(mode(p))\n\
         p = fresh('c', 0o6755); os.chown(p, 1000, 1000); r.append(mode(p))\n\
         p = fresh('cap', 0o755)\n\
         try:\n\
         \x20   os.setxattr(p, 'security.capability', struct.pack('<IIIII', 0x02000001, 1 << 10, 0, 0, 0))\n\
         \x20   r.append('set')\n\
         except OSError as e:\n\
         \x20   r.append(e.errno == 95)\n\
         print(*r)\n"
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "0o777 0o2666 0o6777 0o777 0o755 set\n",
        "{}",
        d.log()
    );
    d.umount();
    check_clean(&s);
}

/// `pmkit fs mount --read-only`: the mount is `ro` (changes are EROFS from the kernel), files
/// read as written, and the pool stays clean.
#[test]
fn a_read_only_mount_serves_reads_and_refuses_changes() {
    if !can_run() {
        return;
    }
    each_transport(|t| {
        let s = scratch("16M");
        let d = Daemon::start(&s, &["--transport", t]);
        std::fs::write(s.mnt.join("f"), b"written").unwrap();
        d.umount();
        let d = Daemon::start(&s, &["--transport", t, "--read-only"]);
        assert_eq!(std::fs::read(s.mnt.join("f")).unwrap(), b"written");
        let e = std::fs::write(s.mnt.join("g"), b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
        let e = std::fs::remove_file(s.mnt.join("f")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let line = mounts
            .lines()
            .find(|l| l.contains(s.mnt.to_str().unwrap()))
            .unwrap();
        assert!(line.contains(" ro,"), "{line}");
        d.umount();
        check_clean(&s);
    });
}
