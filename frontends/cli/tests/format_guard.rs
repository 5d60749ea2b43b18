//! A mistyped command never destroys data: `pmkit fs mkfs`, `pmkit obj create` and `pmkit
//! create` refuse a file another process holds (naming it) and a file that already holds a
//! pmkit format (saying what it holds) unless --force; a failed format leaves nothing behind;
//! commands of one kind refuse a file of another kind by name; the read-only commands work on a
//! file they may only read; a broken pipe ends a command quietly. The same refusals on a
//! mounted pool are in fs_mount.rs (they need root and /dev/fuse).

mod serve_util;

use serve_util::*;
use std::process::{Command, Stdio};

fn refused(o: &std::process::Output, says: &[&str]) {
    assert_eq!(o.status.code(), Some(2), "{}", text(o));
    for s in says {
        assert!(text(o).contains(s), "wanted {s:?} in: {}", text(o));
    }
}

/// A PMFS pool with one file in it, and its bytes, to prove it unchanged.
fn pool_with_a_file(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u8>) {
    let pool = dir.join("pool");
    let o = pmkit(&["fs", "mkfs", pool.to_str().unwrap(), "--size", "8M"]);
    assert!(o.status.success(), "{}", text(&o));
    let region = pmkit_media::Region::open(&pool, &Default::default()).unwrap();
    let (fs, _) = pmkit_fs::Fs::mount(region, &Default::default()).unwrap();
    let fs = pmkit_fs::posix::Posix::new(fs);
    let fd = fs
        .open(b"/precious", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    fs.pwrite(fd, b"do not lose me", 0).unwrap();
    fs.close(fd).unwrap();
    drop(fs.unmount());
    let bytes = std::fs::read(&pool).unwrap();
    (pool, bytes)
}

#[test]
fn an_existing_format_is_refused_without_force_and_named() {
    let dir = shm_dir("pmkit-guard");
    let (pool, bytes) = pool_with_a_file(dir.path());
    let p = pool.to_str().unwrap();
    let says = ["holds a PMFS pool of 8 MiB", "1 file", "--force"];
    refused(&pmkit(&["fs", "mkfs", p, "--size", "8M"]), &says);
    refused(&pmkit(&["fs", "mkfs", p]), &says);
    refused(&pmkit(&["obj", "create", p]), &says);
    refused(&pmkit(&["create", p]), &says);
    assert_eq!(
        std::fs::read(&pool).unwrap(),
        bytes,
        "the pool is untouched"
    );
    // A size other than the file's is refused, not silently ignored.
    refused(
        &pmkit(&["fs", "mkfs", p, "--size", "16M", "--force"]),
        &["not the 16 MiB"],
    );
    assert_eq!(std::fs::read(&pool).unwrap(), bytes);
    // --force formats, and says over what.
    let o = pmkit(&["obj", "create", p, "--force"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("formatting over a PMFS pool"),
        "{}",
        text(&o)
    );
    refused(
        &pmkit(&["fs", "mkfs", p]),
        &["holds a PMO object pool", "0 objects"],
    );
    // Commands of another kind name what the file is and the command that reads it.
    refused(
        &pmkit(&["fs", "info", p]),
        &[
            "is not a PMFS pool",
            "holds a PMO object pool",
            "pmkit obj info",
        ],
    );
    refused(
        &pmkit(&["info", p]),
        &["is not a PMBD block device", "pmkit obj info"],
    );
    refused(
        &pmkit(&["fs", "check", p, "--repair"]),
        &["is not a PMFS pool"],
    );
}

/// A file of other data (a disk image, say) is not formatted without --force; a file of zeros
/// (made by `truncate`) is.
#[test]
fn other_data_is_refused_and_zeros_are_not() {
    let dir = shm_dir("pmkit-guard-data");
    let img = dir.path().join("disk.img");
    let mut bytes = vec![0u8; 8 << 20];
    bytes[1080..1082].copy_from_slice(&[0x53, 0xef]); // where ext4 keeps its magic
    std::fs::write(&img, &bytes).unwrap();
    let p = img.to_str().unwrap();
    for args in [
        &["fs", "mkfs", p][..],
        &["obj", "create", p],
        &["create", p, "--size", "8M"],
    ] {
        refused(
            &pmkit(args),
            &["holds data that is not a pmkit format", "offset 1080"],
        );
    }
    assert_eq!(std::fs::read(&img).unwrap(), bytes);
    let zeros = dir.path().join("zeros");
    std::fs::File::create(&zeros)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let o = pmkit(&["fs", "mkfs", zeros.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn a_file_in_use_is_refused_with_its_holder_named() {
    let dir = shm_dir("pmkit-guard-held");
    let (pool, bytes) = pool_with_a_file(dir.path());
    let p = pool.to_str().unwrap();
    // Any holder of the lock: here flock(1), as a mount, a server or a program would hold it.
    let mut holder = Command::new("flock")
        .args([p, "sleep", "60"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = holder.id().to_string();
    let mut waited = 0;
    while !std::fs::read_to_string("/proc/locks")
        .unwrap()
        .contains(&format!(" {pid} "))
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
        waited += 1;
        assert!(waited < 500, "flock never took the lock");
    }
    for args in [
        &["fs", "mkfs", p, "--force"][..],
        &["obj", "create", p, "--force"],
        &["create", p, "--force"],
    ] {
        refused(&pmkit(args), &["in use by pid", &pid, "flock"]);
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(
        std::fs::read(&pool).unwrap(),
        bytes,
        "the pool is untouched"
    );
}

#[test]
fn a_served_device_is_not_formatted() {
    let dev = DevFile::new("pmkit-guard-served");
    let o = pmkit(&["create", dev.path(), "--size", "4M"]);
    assert!(o.status.success(), "{}", text(&o));
    let s = Serve::start(dev.path(), &[]);
    let before = std::fs::read(dev.path()).unwrap();
    for args in [
        &["fs", "mkfs", dev.path(), "--force"][..],
        &["obj", "create", dev.path(), "--force"],
        &["create", dev.path(), "--force"],
    ] {
        refused(&pmkit(args), &["in use by pid", &s.pid().to_string()]);
    }
    assert_eq!(std::fs::read(dev.path()).unwrap(), before);
    let (status, _) = s.stop();
    assert!(status.success());
}

#[test]
fn a_failed_format_leaves_nothing_behind() {
    let dir = shm_dir("pmkit-guard-fail");
    for (args, name) in [
        (&["fs", "mkfs"][..], "fs"),
        (&["obj", "create"], "obj"),
        (&["create"], "blk"),
    ] {
        let p = dir.path().join(name);
        let mut a = args.to_vec();
        a.extend([p.to_str().unwrap(), "--size", "8K"]);
        let o = pmkit(&a);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(!p.exists(), "{args:?} left {} behind", p.display());
    }
    // A missing file: the hint names an option the command has.
    let o = pmkit(&["fs", "info", dir.path().join("nope").to_str().unwrap()]);
    refused(&o, &["does not exist"]);
    assert!(!text(&o).contains("--size"), "{}", text(&o));
}

/// `pmkit` as a user who may only read `file` (mode 0444) in `dir` (which it may enter and
/// write): nobody when root, whom permission bits do not stop; this user otherwise.
fn read_only_for(dir: &std::path::Path, file: &std::path::Path) -> Command {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o444)).unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Command::new(PMKIT);
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", PMKIT]);
    c
}

/// `obj list/info/dump/check` need only read permission (run as nobody on a 0444 copy when
/// root, whom permission bits do not stop); the writing commands say what they lack.
#[test]
fn read_only_object_commands_work_on_a_file_they_may_only_read() {
    let dir = shm_dir("pmkit-guard-ro");
    let pool = dir.path().join("objs");
    let p = pool.to_str().unwrap();
    assert!(pmkit(&["obj", "create", p, "--size", "4M"])
        .status
        .success());
    assert!(pmkit(&["obj", "new", p, "a", "--size", "4K"])
        .status
        .success());
    let o = Command::new(PMKIT)
        .args(["obj", "put", p, "a"])
        .stdin(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"hello")?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let as_reader = |args: &[&str]| {
        read_only_for(dir.path(), &pool)
            .args(args)
            .output()
            .unwrap()
    };
    for args in [
        &["obj", "list", p][..],
        &["obj", "info", p],
        &["obj", "check", p],
    ] {
        let o = as_reader(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let o = as_reader(&["obj", "dump", p, "a"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(o.stdout.starts_with(b"hello"), "{}", text(&o));
    let o = as_reader(&["obj", "delete", p, "a"]);
    refused(&o, &["cannot open"]);
}

/// `pmkit info DEV | head -1`: the reader goes away; pmkit ends as Unix tools do (SIGPIPE),
/// without a panic message. The pipe's read end is closed before pmkit starts, so its first
/// write meets a closed pipe whatever the timing.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    use std::os::fd::FromRawFd;
    use std::os::unix::process::ExitStatusExt;
    let dev = DevFile::new("pmkit-guard-pipe");
    assert!(pmkit(&["create", dev.path(), "--size", "4M"])
        .status
        .success());
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are fresh from pipe(2) and owned here alone.
    let (read_end, write_end) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    drop(read_end);
    let o = Command::new(PMKIT)
        .args(["info", dev.path()])
        .stdout(Stdio::from(write_end))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{err}");
}

/// Hints name what the command has: serving a device this user may only read points to
/// --read-only (and --read-only serves it); a missing mount point is called missing.
#[test]
fn hints_name_options_the_command_has() {
    let dir = shm_dir("pmkit-guard-hints");
    let dev = dir.path().join("dev");
    let d = dev.to_str().unwrap();
    assert!(pmkit(&["create", d, "--size", "4M"]).status.success());
    let sock = dir.path().join("s.sock");
    let o = read_only_for(dir.path(), &dev)
        .args(["serve", d, "--socket", sock.to_str().unwrap()])
        .output()
        .unwrap();
    refused(&o, &["add --read-only"]);
    let pool = dir.path().join("pool");
    assert!(
        pmkit(&["fs", "mkfs", pool.to_str().unwrap(), "--size", "8M"])
            .status
            .success()
    );
    let o = pmkit(&[
        "fs",
        "mount",
        pool.to_str().unwrap(),
        dir.path().join("no-such-dir").to_str().unwrap(),
    ]);
    refused(&o, &["does not exist"]);
    assert!(!text(&o).contains("not a directory"), "{}", text(&o));
}
