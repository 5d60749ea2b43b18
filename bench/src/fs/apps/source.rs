//! The tree `bench fs-tree` works on, as an uncompressed tar (tar then forks no decompressor:
//! the shim cannot follow a fork): part or all of the Linux source Debian's `linux-source-6.1`
//! ships, cached in the bench directory between runs, or for `--quick` a generated tree of
//! small files. Preparing it counts what the operations must find: regular files and the lines
//! `grep -r` matches.

use crate::host::{sh, Scratch};
use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's kernel source (package linux-source-6.1).
pub(super) const LINUX_TAR_XZ: &str = "/usr/src/linux-source-6.1.tar.xz";
/// The top directory inside it.
const LINUX_TOP: &str = "linux-source-6.1";
/// The default part of the tree: metadata-heavy (Documentation, include) and code directories,
/// about 230 MB in 23,000 files (the whole tree is 1.3 GB in 79,000).
pub(super) const SUBSET: [&str; 8] = [
    "fs",
    "include",
    "kernel",
    "mm",
    "net",
    "lib",
    "sound",
    "Documentation",
];
/// What `grep -r` looks for (fixed string): present in many files, so the count checks that
/// every configuration read every file.
pub(super) const PATTERN: &str = "EXPORT_SYMBOL_GPL";

/// The prepared tree.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(super) struct Source {
    /// What it is, for the report.
    pub what: String,
    /// The uncompressed tar.
    pub tar: PathBuf,
    pub tar_bytes: u64,
    /// The top directory the tar holds.
    pub top: String,
    /// Regular files, directories, symbolic links.
    pub files: u64,
    pub dirs: u64,
    pub links: u64,
    /// Bytes in regular files, and rounded up to 4 KiB blocks.
    pub bytes: u64,
    pub block_bytes: u64,
    /// Lines `grep -r -I -F PATTERN` prints over the tree.
    pub grep_lines: u64,
    /// Where it came from and its size and mtime (a cached tar is used while these match).
    pub from: String,
    pub from_stamp: String,
}

/// Counts of a tree on the kernel's file system (symbolic links not followed).
fn count(dir: &Path, s: &mut Source) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let m = e.path().symlink_metadata()?;
        if m.is_dir() {
            s.dirs += 1;
            count(&e.path(), s)?;
        } else if m.is_symlink() {
            s.links += 1;
        } else if m.is_file() {
            s.files += 1;
            s.bytes += m.len();
            s.block_bytes += m.len().div_ceil(4096) * 4096;
        }
    }
    Ok(())
}

/// Count `tree` (in `parent`), grep it and pack it into `s.tar`.
fn finish(parent: &Path, s: &mut Source) -> Result<()> {
    let tree = parent.join(&s.top);
    count(&tree, s)?;
    s.dirs += 1;
    let out = sh(Command::new("grep")
        .args(["-r", "-I", "-F", "-e", PATTERN])
        .arg(&tree))?;
    s.grep_lines = out.lines().count() as u64;
    ensure!(s.grep_lines > 0, "no {PATTERN} in {}", tree.display());
    let part = s.tar.with_extension("partial");
    sh(Command::new("tar")
        .arg("-cf")
        .arg(&part)
        .arg("-C")
        .arg(parent)
        .arg(&s.top))?;
    std::fs::rename(&part, &s.tar)?;
    s.tar_bytes = std::fs::metadata(&s.tar)?.len();
    Ok(())
}

/// The Linux tree (all of it with `full`, else [`SUBSET`]) as a tar in `dir`, made from
/// [`LINUX_TAR_XZ`] or reused from an earlier run.
pub(super) fn linux(dir: &Path, full: bool) -> Result<Source> {
    let src = Path::new(LINUX_TAR_XZ);
    let m = match std::fs::metadata(src) {
        Ok(m) => m,
        Err(e) => bail!(
            "{LINUX_TAR_XZ}: {e}: bench fs-tree works on Debian's kernel source: \
             apt-get install linux-source-6.1 (scripts/bench-packages.txt), or use --quick"
        ),
    };
    let mtime = m
        .modified()?
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let what = if full { "full" } else { "subset" };
    let tar = dir.join(format!("pmkit-bench-fs-tree-linux-6.1-{what}.tar"));
    let meta = tar.with_extension("json");
    let stamp = format!("{} bytes, mtime {mtime}", m.len());
    if let Ok(text) = std::fs::read_to_string(&meta) {
        if let Ok(s) = serde_json::from_str::<Source>(&text) {
            let ok = s.from_stamp == stamp
                && std::fs::metadata(&s.tar).is_ok_and(|t| t.len() == s.tar_bytes);
            if ok {
                return Ok(s);
            }
        }
    }
    let tmp = Scratch::dir(dir, "fs-tree-prep")?;
    let mut c = Command::new("tar");
    c.arg("-xJf").arg(src).arg("-C").arg(tmp.path());
    if !full {
        c.args(SUBSET.iter().map(|d| format!("{LINUX_TOP}/{d}")));
    }
    sh(&mut c).context("unpacking the kernel source")?;
    let mut s = Source {
        what: if full {
            "Linux 6.1 source, whole tree".into()
        } else {
            format!("Linux 6.1 source: {}", SUBSET.join(", "))
        },
        tar,
        tar_bytes: 0,
        top: LINUX_TOP.into(),
        files: 0,
        dirs: 0,
        links: 0,
        bytes: 0,
        block_bytes: 0,
        grep_lines: 0,
        from: LINUX_TAR_XZ.into(),
        from_stamp: stamp,
    };
    finish(tmp.path(), &mut s)?;
    std::fs::write(&meta, serde_json::to_string_pretty(&s)?)?;
    Ok(s)
}

/// A generated tree of `files` files (0.5-24 KiB, 16 to a directory, two levels), one in three
/// holding [`PATTERN`] on two lines, packed in `tar_dir` (a scratch folder the caller removes).
pub(super) fn generated(tar_dir: &Path, files: u64) -> Result<Source> {
    ensure!((1..=100_000).contains(&files), "--files: 1 to 100000");
    let top = "gen-tree";
    let root = tar_dir.join("tree");
    for i in 0..files {
        let d = root
            .join(top)
            .join(format!("d{}", i / 256))
            .join(format!("e{}", (i / 16) % 16));
        std::fs::create_dir_all(&d)?;
        let len = 512 + (i * 7919 % 24) as usize * 1024;
        let mut body = format!("/* generated file {i} */\n");
        if i % 3 == 0 {
            body.push_str(&format!(
                "{PATTERN}(one_{i});\nint x;\n{PATTERN}(two_{i});\n"
            ));
        }
        let fill = "abcdefghijklmnopqrstuvwxyz0123456789 int y = 0;\n";
        while body.len() < len {
            body.push_str(fill);
        }
        body.truncate(len);
        body.push('\n');
        std::fs::write(d.join(format!("f{i}.c")), body)?;
    }
    let mut s = Source {
        what: format!("generated: {files} files"),
        tar: tar_dir.join("gen-tree.tar"),
        tar_bytes: 0,
        top: top.into(),
        files: 0,
        dirs: 0,
        links: 0,
        bytes: 0,
        block_bytes: 0,
        grep_lines: 0,
        from: "generated".into(),
        from_stamp: String::new(),
    };
    finish(&root, &mut s)?;
    std::fs::remove_dir_all(&root)?;
    ensure!(
        s.files == files && s.grep_lines == files.div_ceil(3) * 2,
        "generated tree: {} files, {} grep lines",
        s.files,
        s.grep_lines
    );
    Ok(s)
}
