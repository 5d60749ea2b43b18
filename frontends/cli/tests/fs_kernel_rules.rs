//! The set-user-ID and set-group-ID rules of chown and write on the PMFS mount, over both FUSE
//! transports, against the kernel's own answers on tmpfs (`tests/data/set_id.py` prints them):
//! chown clears the bits on every non-directory (FIFOs too), set-group-ID without group execute
//! stays, a write by another user clears them, `chown(path, -1, -1)` by a non-owner succeeds
//! unless it would have to clear bits (on the mount the kernel's FUSE code answers that one
//! itself: see the test). The shim runs the same script, every line equal to the kernel's
//! (frontends/preload/tests/kernel_rules.rs; SEEK_DATA and SEEK_HOLE too, `tests/data/seek.py`).
//!
//! Needs root, /dev/fuse and python3; skipped without them, except in CI, where it fails.

mod fs_mount_util;

use fs_mount_util::*;
use std::path::Path;
use std::process::Command;

fn script() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/set_id.py").to_string()
}

fn run_in(dir: &Path) -> String {
    let o = Command::new("python3")
        .arg(script())
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "set_id.py in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What `tests/data/<script>` prints in `dir`.
fn python(script: &str, dir: &Path) -> String {
    let path = format!("{}/tests/data/{script}", env!("CARGO_MANIFEST_DIR"));
    let o = Command::new("python3")
        .arg(&path)
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Run `script` on tmpfs (the model; its output must contain `ran`, a sign the model did what
/// the script is about) and on the mount over each transport: the same output, and the pool
/// checks clean after.
fn same_as_tmpfs_on_the_mount(script: &str, ran: &str) {
    let model_dir = pmkit_testkit::scratch();
    let want = python(script, model_dir.path());
    assert!(want.contains(ran), "the model: {want}");
    for t in transports() {
        let s = scratch("16M");
        let d = Daemon::start(&s, &["--transport", t]);
        assert_eq!(python(script, &s.mnt), want, "{script} over {t}");
        d.umount();
        check_clean(&s);
    }
}

#[test]
fn set_id_bits_follow_the_kernels_rules_on_the_mount() {
    if !can_run() {
        return;
    }
    let model_dir = pmkit_testkit::scratch();
    let want = run_in(model_dir.path());
    assert!(want.contains("EPERM"), "the model ran: {want}");
    for t in transports() {
        let s = scratch("16M");
        let d = Daemon::start(&s, &["--transport", t]);
        let got = run_in(&s.mnt);
        // One line differs by the kernel's FUSE code, not the daemon: under HANDLE_KILLPRIV_V2
        // the kernel leaves clearing set-ID bits to the file system and drops the mode check
        // that makes a non-owner's chown(-1, -1) of a set-ID file EPERM on ext4 or tmpfs. The
        // daemon keeps the bits (the line's mode matches); only the status differs.
        let relaxed = |out: &str| -> Vec<String> {
            out.lines()
                .map(|l| match l.strip_prefix("chown -1 -1 not owner, set-ID ") {
                    Some(rest) => rest.rsplit(' ').next().unwrap().to_string(),
                    None => l.to_string(),
                })
                .collect()
        };
        assert_eq!(relaxed(&got), relaxed(&want), "over {t}: {got}");
        d.umount();
    }
}

/// SEEK_DATA and SEEK_HOLE on the mount (the kernel sends LSEEK for them), over both transports,
/// equal to tmpfs's answers (`tests/data/seek.py`).
#[test]
fn seek_data_and_hole_match_the_kernels_on_the_mount() {
    if can_run() {
        same_as_tmpfs_on_the_mount("seek.py", "holes 4096 1048576 4096");
    }
}

/// copy_file_range on the mount (the kernel sends COPY_FILE_RANGE), over both transports, equal
/// to tmpfs's answers (`tests/data/copy.py`): offsets given and the descriptors' own, a copy
/// past the end, one file's overlapping and disjoint ranges, the errors, a sparse source.
#[test]
fn copy_file_range_matches_the_kernels_on_the_mount() {
    if can_run() {
        same_as_tmpfs_on_the_mount("copy.py", "dst as copied True");
    }
}

/// What `tests/data/reflink.py` prints on PMFS through the mount (the shim's test adds the
/// ioctls' lines): copy_file_range shares the blocks, and either side then changes alone.
pub const REFLINK_WANT: &str = "copy_file_range shares True\nthe copy reads back True\n\
    a write to the copy leaves the source True\nthe copy has the write True\n\
    a shrink of the copy leaves the source True\na write to the source leaves the copy True\n\
    the copy outlives the source True\n";

/// Reflink on the mount, over both transports: the kernel's COPY_FILE_RANGE shares whole
/// blocks (`Fs::copy_range`), the copy and its source change apart, the pool checks clean.
#[test]
fn copy_file_range_shares_blocks_on_the_mount() {
    if !can_run() {
        return;
    }
    let path = format!("{}/tests/data/reflink.py", env!("CARGO_MANIFEST_DIR"));
    for t in transports() {
        let s = scratch("16M");
        let d = Daemon::start(&s, &["--transport", t]);
        let o = Command::new("python3")
            .args([&path, s.mnt.to_str().unwrap(), "mount"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "reflink.py over {t}: {err}");
        assert_eq!(String::from_utf8_lossy(&o.stdout), REFLINK_WANT, "over {t}");
        d.umount();
        check_clean(&s);
    }
}

/// What `tests/data/falloc.py` prints on PMFS, through the mount or the shim: every mode served
/// (keep size, punch, zero range) checked by the script against Linux's rules; a punch without
/// KEEP_SIZE, collapse and insert refused with EOPNOTSUPP as Linux's VFS or PMFS answers them.
const FALLOC_WANT: &str = "allocate-past-end ok\nkeep-size ok\npunch-middle ok\n\
    punch-aligned ok\npunch-in-one-block ok\npunch-past-end ok\npunch-without-keep-size ENOTSUP\n\
    zero-range ok\nzero-range-past-end ok\nzero-range-keep-size ok\ncollapse ENOTSUP\n\
    insert ENOTSUP\n";

/// fallocate's modes on the mount, over both transports (the kernel's FUSE code passes keep
/// size, punch and zero range on), and the pool checks clean after.
#[test]
fn fallocate_modes_on_the_mount() {
    if !can_run() {
        return;
    }
    for t in transports() {
        let s = scratch("16M");
        let d = Daemon::start(&s, &["--transport", t]);
        assert_eq!(python("falloc.py", &s.mnt), FALLOC_WANT, "over {t}");
        d.umount();
        check_clean(&s);
    }
}

/// Directories removed while a process holds them (renamed over, rmdir'd, the working
/// directory): `fstat` and `stat(".")` succeed with no links on the mount, over both
/// transports, as on tmpfs (`tests/data/gone_dirs.py`; they were ENOENT once).
#[test]
fn held_directories_stat_with_no_links_after_removal() {
    if can_run() {
        same_as_tmpfs_on_the_mount("gone_dirs.py", "held open: 0");
    }
}

/// renameat2's RENAME_WHITEOUT on the mount, over both transports, as tmpfs answers it
/// (`tests/data/whiteout.py`): the source name then names a character device 0:0, mode 0.
#[test]
fn rename_whiteout_matches_the_kernels_on_the_mount() {
    if can_run() {
        same_as_tmpfs_on_the_mount("whiteout.py", "a: chr 0:0 mode 0");
    }
}

/// With the default cache the kernel stops sending OPEN and RELEASE (its references to a file
/// stand in for opens): a file unlinked while a process holds it open is still read and
/// written through that descriptor, and its blocks come back once it is closed and the kernel
/// lets go of it; files opened, read and closed many times read their data each time.
#[test]
fn an_unlinked_file_held_open_lives_until_closed_without_opens() {
    if can_run() {
        each_transport(unlinked_held_open_over);
    }
}

fn unlinked_held_open_over(t: &str) {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::MetadataExt;
    let s = scratch("32M");
    let d = Daemon::start(&s, &["--transport", t]);
    let free = || nix_free_blocks(&s.mnt);
    let p = s.mnt.join("f");
    std::fs::write(&p, vec![7u8; 4 << 20]).unwrap();
    for _ in 0..50 {
        assert_eq!(std::fs::read(&p).unwrap().len(), 4 << 20);
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    let before = free();
    std::fs::remove_file(&p).unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    f.seek(std::io::SeekFrom::End(0)).unwrap();
    f.write_all(b"tail").unwrap();
    f.seek(std::io::SeekFrom::Start(0)).unwrap();
    let mut all = Vec::new();
    f.read_to_end(&mut all).unwrap();
    assert_eq!(all.len(), (4 << 20) + 4);
    assert!(all[..4 << 20].iter().all(|&b| b == 7) && all.ends_with(b"tail"));
    assert!(free() <= before, "held: not freed");
    drop(f);
    // the kernel's FORGET comes when it evicts the inode, soon after the last close
    let t0 = std::time::Instant::now();
    while free() < before + 1000 && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        free() >= before + 1000,
        "freed after the close: {} -> {}",
        before,
        free()
    );
    let out = d.umount();
    assert!(out.contains("marked the pool clean"), "{out}");
    check_clean(&s);
}

/// Free blocks of the file system at `p` (statvfs).
fn nix_free_blocks(p: &Path) -> u64 {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs is plain data, valid all zero.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs we own.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut v) };
    assert_eq!(r, 0);
    v.f_bfree
}

/// O_TMPFILE on the mount, over both transports: `tests/data/tmpfile.py` gives tmpfs's answers
/// line for line (named by `linkat` through /proc/self/fd and by AT_EMPTY_PATH, EEXIST, O_EXCL's
/// ENOENT, an unnamed file gone at close), and the pool checks clean after (no orphan left).
#[test]
fn o_tmpfile_on_the_mount() {
    if can_run() {
        same_as_tmpfs_on_the_mount("tmpfile.py", "named: 1 made with no name");
    }
}

/// Extended attributes of every kind of file on the mount, over both transports, as tmpfs
/// answers them (`tests/data/special_xattrs.py`): `user.*` on regular files and directories only
/// (the kernel's VFS refuses the rest), `trusted.*` and `security.*` stored on every kind and
/// kept by rename and link, file capabilities dropped by a write, a truncate and a chown (by
/// root too) but kept by a chmod, `system.*` refused.
#[test]
fn xattrs_of_every_kind_of_file_match_the_kernels_on_the_mount() {
    if can_run() {
        same_as_tmpfs_on_the_mount("special_xattrs.py", "capability after write ENODATA");
    }
}
