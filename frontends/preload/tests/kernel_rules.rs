//! Rules the kernel keeps, kept through the shim, each checked against the kernel's own answers
//! on tmpfs: the set-user-ID and set-group-ID rules of chown and write (the script the mount's
//! test runs too, frontends/cli/tests/data/set_id.py; needs root to change ids), and relative
//! paths limited by their own length, not the current directory's.

mod common;

use common::*;
use std::process::Command;

/// Run `script` (in frontends/cli/tests/data, shared with the mount's tests) with a directory
/// argument on tmpfs, the model, and on the pool through the shim: both print the same.
fn same_as_the_kernel(script: &str) {
    let (script, model) = model_of(script);
    let s = Shim::new();
    let got = s.cmd("python3").args([&script, &s.m("")]).output().unwrap();
    assert_ok(&got, &format!("{script} through the shim"));
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&model.stdout)
    );
    s.assert_prefix_empty();
}

/// The script's path, and what it prints on tmpfs.
fn model_of(script: &str) -> (String, std::process::Output) {
    let script = format!("{}/../cli/tests/data/{script}", env!("CARGO_MANIFEST_DIR"));
    let model_dir = pmkit_testkit::scratch();
    let model = Command::new("python3")
        .args([&script, model_dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_ok(&model, &format!("{script} on tmpfs"));
    (script, model)
}

/// Whether python3 runs and this is root (changing ids, AT_EMPTY_PATH); skipped otherwise,
/// except in CI, where both must be there.
fn python_as_root() -> bool {
    // SAFETY: geteuid cannot fail.
    let ok = have("python3") && unsafe { libc::geteuid() } == 0;
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "needs python3 and root in CI"
        );
        eprintln!("skipped: needs python3 and root");
    }
    ok
}

#[test]
fn set_id_bits_follow_the_kernels_rules_through_the_shim() {
    if !python_as_root() {
        return;
    }
    same_as_the_kernel("set_id.py");
}

/// A relative path within PATH_MAX works however long the current directory is (the kernel
/// limits only the string passed): a 5,000-byte directory path, entered step by step, then a
/// file made, written and read by a relative name. Once ENAMETOOLONG through the shim.
#[test]
fn relative_paths_are_limited_by_their_own_length_not_the_directorys() {
    if !have("python3") {
        return;
    }
    let script = |root: &str| {
        format!(
            "import os\n\
             os.chdir('{root}')\n\
             for i in range(20):\n\
             \x20   n = chr(97 + i) * 250\n\
             \x20   os.mkdir(n)\n\
             \x20   os.chdir(n)\n\
             with open('f' * 200, 'w') as f: f.write('deep')\n\
             print(open('f' * 200).read(), len(os.listdir('.')), os.stat('f' * 200).st_size)\n"
        )
    };
    let model_dir = pmkit_testkit::scratch();
    let model = Command::new("python3")
        .args(["-c", &script(model_dir.path().to_str().unwrap())])
        .output()
        .unwrap();
    assert_ok(&model, "on tmpfs");
    let s = Shim::new();
    let got = s
        .cmd("python3")
        .args(["-c", &script(&s.m(""))])
        .output()
        .unwrap();
    assert_ok(&got, "through the shim");
    assert_eq!(String::from_utf8_lossy(&got.stdout), "deep 1 4\n");
    assert_eq!(got.stdout, model.stdout);
}

/// SEEK_DATA and SEEK_HOLE through the shim equal tmpfs's answers (the mount's test runs the
/// same script, frontends/cli/tests/data/seek.py). Once: data up to the size, no holes.
#[test]
fn seek_data_and_hole_match_the_kernels_through_the_shim() {
    if !have("python3") {
        return;
    }
    same_as_the_kernel("seek.py");
}

/// copy_file_range through the shim, both descriptors in the pool (`Posix::copy_range`), equal
/// to tmpfs's answers (the mount's test runs the same script, frontends/cli/tests/data/copy.py).
#[test]
fn copy_file_range_matches_the_kernels_through_the_shim() {
    if !have("python3") {
        return;
    }
    same_as_the_kernel("copy.py");
}

/// The last page of a shared mapping reads zeros past the end of the file, after a shrink and
/// after appends into blocks another file held (frontends/cli/tests/data/map_eof.py), as on
/// tmpfs.
#[test]
fn a_mapping_reads_zeros_past_the_end_of_the_file() {
    if !have("python3") {
        return;
    }
    same_as_the_kernel("map_eof.py");
}

/// The same through a shim served by `pmkit fs serve`'s server: one call to the server.
#[test]
fn copy_file_range_matches_the_kernels_through_a_served_shim() {
    if !have("python3") {
        return;
    }
    let (script, model) = model_of("copy.py");
    let s = common::served::served();
    let got = s
        .shim
        .cmd("python3")
        .args([&script, &s.shim.m("")])
        .output()
        .unwrap();
    assert_ok(&got, "copy.py through a served shim");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&model.stdout)
    );
    s.stop();
}

/// What `reflink.py` prints through the shim: the mount's lines, then the ioctls'.
const REFLINK_WANT: &str = "copy_file_range shares True\nthe copy reads back True\n\
    a write to the copy leaves the source True\nthe copy has the write True\n\
    a shrink of the copy leaves the source True\na write to the source leaves the copy True\n\
    the copy outlives the source True\nFICLONE ok\nFICLONE bytes True\n\
    FIEMAP shared True True\nFICLONERANGE ok\nFICLONERANGE bytes True\nunaligned EINVAL\n\
    read-only destination EBADF\noutside the pool EXDEV\n";

/// Reflink through the shim, in process and served by `pmkit fs serve`
/// (frontends/cli/tests/data/reflink.py): copy_file_range shares blocks, FICLONE and
/// FICLONERANGE share them under Linux's rules, FIEMAP flags them shared.
#[test]
fn reflink_through_the_shim() {
    if !have("python3") {
        assert!(std::env::var_os("CI").is_none(), "needs python3 in CI");
        return;
    }
    let script = format!(
        "{}/../cli/tests/data/reflink.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let s = Shim::new();
    let got = s
        .cmd("python3")
        .args([&script, &s.m(""), "shim"])
        .output()
        .unwrap();
    assert_ok(&got, "reflink.py through the shim");
    assert_eq!(String::from_utf8_lossy(&got.stdout), REFLINK_WANT);
    let s = common::served::served();
    let got = s
        .shim
        .cmd("python3")
        .args([&script, &s.shim.m(""), "shim"])
        .output()
        .unwrap();
    assert_ok(&got, "reflink.py through a served shim");
    assert_eq!(String::from_utf8_lossy(&got.stdout), REFLINK_WANT);
    s.stop();
}

/// fallocate's modes through the shim: the script the mount's test runs
/// (frontends/cli/tests/data/falloc.py), every line as on the mount.
#[test]
fn fallocate_modes_through_the_shim() {
    if !have("python3") {
        assert!(std::env::var_os("CI").is_none(), "needs python3 in CI");
        return;
    }
    let script = format!("{}/../cli/tests/data/falloc.py", env!("CARGO_MANIFEST_DIR"));
    let s = Shim::new();
    let got = s.cmd("python3").args([&script, &s.m("")]).output().unwrap();
    assert_ok(&got, "falloc.py through the shim");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        "allocate-past-end ok\nkeep-size ok\npunch-middle ok\npunch-aligned ok\n\
         punch-in-one-block ok\npunch-past-end ok\npunch-without-keep-size ENOTSUP\n\
         zero-range ok\nzero-range-past-end ok\nzero-range-keep-size ok\ncollapse ENOTSUP\n\
         insert ENOTSUP\n"
    );
    s.assert_prefix_empty();
}

/// Directories removed while held open: `fstat` as tmpfs answers (the script the mount's test
/// runs). Not yet as Linux: the shim's working directory is a path, so `stat(".")` in a
/// removed one is ENOENT where Linux gives no links (docs/fs.md says so).
#[test]
fn held_directories_stat_with_no_links_through_the_shim() {
    if !have("python3") {
        assert!(std::env::var_os("CI").is_none(), "needs python3 in CI");
        return;
    }
    let script = format!(
        "{}/../cli/tests/data/gone_dirs.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let s = Shim::new();
    let got = s.cmd("python3").args([&script, &s.m("")]).output().unwrap();
    assert_ok(&got, "gone_dirs.py through the shim");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        "renamed over, held open: 0\nremoved, held open: 0\n\
         removed, the working directory: ENOENT\nthe rest: ['b']\n"
    );
    s.assert_prefix_empty();
}

/// renameat2's RENAME_WHITEOUT through the shim, as tmpfs answers it.
#[test]
fn rename_whiteout_matches_the_kernels_through_the_shim() {
    // SAFETY: geteuid cannot fail.
    if !have("python3") || unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "needs python3 and root in CI (a whiteout on tmpfs needs CAP_MKNOD)"
        );
        return;
    }
    same_as_the_kernel("whiteout.py");
}

/// preadv, pwritev, preadv2 and pwritev2 (flags, offset -1) through the shim, as tmpfs answers
/// them (`frontends/cli/tests/data/vec.py`). Once not served: they reached the kernel with the
/// shim's placeholder descriptor.
#[test]
fn vectored_calls_at_an_offset_match_the_kernels_through_the_shim() {
    if !have("python3") {
        assert!(std::env::var_os("CI").is_none(), "needs python3 in CI");
        return;
    }
    same_as_the_kernel("vec.py");
}

/// mmap of pool files, MAP_SHARED (the file's own blocks) and MAP_PRIVATE (a copy), as tmpfs
/// answers (`frontends/cli/tests/data/mapped.py`). Once ENODEV.
#[test]
fn mmap_shared_and_private_match_the_kernels_through_the_shim() {
    if !have("python3") {
        assert!(std::env::var_os("CI").is_none(), "needs python3 in CI");
        return;
    }
    same_as_the_kernel("mapped.py");
}

/// O_TMPFILE through the shim: a file made with no name, named by linkat of its descriptor
/// (`/proc/self/fd/N` with AT_SYMLINK_FOLLOW, and AT_EMPTY_PATH), O_EXCL's refusal and the
/// open errors, line for line as the kernel answers on tmpfs (`tests/data/tmpfile.py`).
#[test]
fn o_tmpfile_is_the_kernels_through_the_shim() {
    if !python_as_root() {
        return;
    }
    same_as_the_kernel("tmpfile.py");
}
