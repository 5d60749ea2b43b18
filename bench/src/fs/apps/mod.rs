//! `pmkit bench fs-tree` (PMFS thesis Fig. 14: cp, untar, find, grep, cp -r, rm -r over a Linux
//! source tree) and `pmkit bench fs-apps` (filebench-like loads: dbench, postmark, fs_mark,
//! sqlite3 with `synchronous=FULL`, pgbench): unmodified programs on every configuration in
//! the same run with rotated rounds. What both share lives here: the configurations, the
//! outcome of one measurement (a value, not applicable, or failed, always with the reason),
//! running a program on a configuration, and the summary against ext4 on attach.
//!
//! Configurations: PMFS through the LD_PRELOAD shim (`pmfs-shim`: the library in the program's
//! own process, so there is no separate `pmfs-lib` row for external programs), PMFS over FUSE
//! (`pmfs-long`), ext4 on `pmkit attach` (ext4 on PMBD, the thesis's baseline and the ratio
//! base), ext2 and ext4 on a loop device over /dev/shm, tmpfs.

mod loads;
mod output;
mod source;
mod tree;

pub(crate) use loads::{run as run_apps, Args as AppsArgs};
pub(crate) use tree::{run as run_tree, Args as TreeArgs};

use crate::fs::targets::{self, Sizes, Target, Up};
use crate::host::{need_root, need_tool, Scratch};
use crate::report::{median, rotated_rounds, BenchFlags};
use anyhow::{ensure, Context, Result};
use pmkit::args::EngineArgs;
use pmkit_fuse::pmfs::cache::CacheMode;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The configurations, in table order: the PMFS mount over /dev/fuse, and over FUSE io_uring
/// too where the kernel offers it (what `pmkit fs mount` picks by default there).
fn targets() -> &'static [Target] {
    static T: std::sync::OnceLock<Vec<Target>> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let mut t = vec![Target::Shim, Target::Pmfs(CacheMode::Long)];
        if pmkit_fuse::uring::enabled() {
            t.push(Target::PmfsUring(CacheMode::Long));
        }
        t.extend([
            Target::Ext4Attach,
            Target::Ext2Loop,
            Target::Ext4Loop,
            Target::Tmpfs,
        ]);
        t
    })
}

/// The ratio base.
const BASE: &str = "ext4-attach";

/// What one measurement gave.
#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    Value(f64),
    /// The load cannot run on this configuration, and why.
    NotApplicable(String),
    /// It ran and failed: what the program said.
    Failed(String),
}

/// One measurement of one item (an operation or a load) on one configuration in one round.
#[derive(Serialize, Clone)]
struct Sample {
    target: String,
    round: usize,
    item: String,
    outcome: Outcome,
}

/// An item of the summary: what is measured, in which unit, which way is better.
#[derive(Clone, Copy)]
struct Item {
    name: &'static str,
    unit: &'static str,
    higher_is_better: bool,
}

#[derive(Serialize, Clone)]
struct Row {
    item: String,
    unit: String,
    higher_is_better: bool,
    /// Per configuration, in `targets` order.
    cells: Vec<Cell>,
}

#[derive(Serialize, Clone)]
struct Cell {
    target: String,
    /// Median over rounds.
    value: Option<f64>,
    /// How many times better than ext4 on attach (its time / this time, or this rate / its
    /// rate): above 1 is better, whichever the unit.
    vs_ext4_attach: Option<f64>,
    not_applicable: Option<String>,
    failed: Option<String>,
}

/// One configuration, set up, as a program sees it.
struct Ctx<'a> {
    target: Target,
    up: &'a Up,
    mnt: &'a Path,
}

impl Ctx<'_> {
    fn is_shim(&self) -> bool {
        self.target == Target::Shim
    }

    /// `prog` set up to work on this configuration: with the shim's variables for the shim.
    fn cmd(&self, prog: &str) -> Result<Command> {
        let mut c = Command::new(prog);
        c.envs(self.up.env()?).stdin(Stdio::null());
        Ok(c)
    }

    /// `mnt/rel`.
    fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Make everything the kernel file systems hold in their caches durable (`syncfs` through
    /// `sync -f`), so their times include what the PMFS configurations do at each call. The
    /// shim's calls are durable when they return: nothing to do.
    fn sync(&self) -> std::result::Result<(), String> {
        if self.is_shim() {
            return Ok(());
        }
        let mut c = Command::new("sync");
        c.arg("-f").arg(self.mnt);
        run_tool(&mut c).map(|_| ())
    }

    /// Run `c` (made by [`Ctx::cmd`]) and then [`Ctx::sync`] when `durable`: the seconds both
    /// took and the program's stdout, or why it failed.
    fn timed(&self, c: &mut Command, durable: bool) -> std::result::Result<(f64, String), String> {
        let t = Instant::now();
        let out = run_tool(c)?;
        if durable {
            self.sync()?;
        }
        Ok((t.elapsed().as_secs_f64(), out))
    }

    /// `rm -rf` of `rel` through the configuration (the bench process cannot see the shim's
    /// pool).
    fn remove(&self, rel: &str) -> std::result::Result<(), String> {
        let mut c = self.cmd("rm").map_err(|e| e.to_string())?;
        c.arg("-rf").arg(self.path(rel));
        run_tool(&mut c).map(|_| ())
    }

    /// `mkdir -p` of `rel` through the configuration.
    fn mkdir(&self, rel: &str) -> std::result::Result<(), String> {
        let mut c = self.cmd("mkdir").map_err(|e| e.to_string())?;
        c.arg("-p").arg(self.path(rel));
        run_tool(&mut c).map(|_| ())
    }
}

/// The first lines of a program's complaint, for a failed cell.
fn first_lines(s: &str) -> String {
    let v: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).take(3).collect();
    v.join(" | ")
}

/// Run `c` to completion: its stdout, or why it failed (exit status and the first lines of its
/// stderr). A program that exits 0 but wrote to stderr failed too: under the shim a forked
/// child's EIO, or an unserved call, shows there first.
fn run_tool(c: &mut Command) -> std::result::Result<String, String> {
    let prog = c.get_program().to_string_lossy().into_owned();
    let o = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("{prog}: cannot run: {e}"))?;
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() || !err.trim().is_empty() {
        return Err(format!("{prog}: {} {}", o.status, first_lines(&err)));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// What both benches need of the host: root, /dev/fuse, the file system tools, the shim.
fn check_host(why: &str) -> Result<()> {
    need_root(why)?;
    for tool in ["mkfs.ext4", "mkfs.ext2", "losetup", "mount", "umount"] {
        need_tool(tool, "install e2fsprogs, mount and util-linux")?;
    }
    ensure!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: load the fuse module (modprobe fuse)"
    );
    targets::shim_path()?;
    Ok(())
}

/// Per round and configuration (rotated): make the configuration, run `f` on it, tear it down.
/// `f` gives (item, outcome) pairs; a configuration that cannot be made or torn down fails the
/// run (its error names it).
fn each_target(
    flags: &BenchFlags,
    rounds: usize,
    sizes: &Sizes,
    engine: &EngineArgs,
    mut f: impl FnMut(usize, &Ctx) -> Vec<(String, Outcome)>,
) -> Result<Vec<Sample>> {
    let base = Scratch::dir(&std::env::temp_dir(), "fs-apps")?;
    let mnt = base.path().join("mnt");
    std::fs::create_dir_all(&mnt)?;
    let bar = flags.progress(rounds * targets().len());
    let runs = rotated_rounds(rounds, 1, targets().len(), &bar, |r, _, i| {
        let t = targets()[i];
        bar.set_message(format!("round {}/{rounds}: {}", r + 1, t.name()));
        let up = targets::up(t, &flags.dir, &mnt, sizes, engine)
            .with_context(|| format!("setting up {}", t.name()))?;
        let ctx = Ctx {
            target: t,
            up: &up,
            mnt: &mnt,
        };
        let got = f(r, &ctx);
        targets::down(up, &mnt).with_context(|| format!("tearing down {}", t.name()))?;
        Ok(got
            .into_iter()
            .map(|(item, outcome)| Sample {
                target: t.name(),
                round: r,
                item,
                outcome,
            })
            .collect::<Vec<_>>())
    })?;
    Ok(runs.into_iter().flatten().flatten().flatten().collect())
}

/// Medians per (item, configuration) and the ratio to ext4 on attach. A cell with a failed
/// round is failed; one with no value in any round is not applicable.
fn summarize(samples: &[Sample], items: &[Item]) -> Vec<Row> {
    let cell_of = |item: &str, target: &str| -> (Option<f64>, Option<String>, Option<String>) {
        let of: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.item == item && s.target == target)
            .collect();
        let failed = of.iter().find_map(|s| match &s.outcome {
            Outcome::Failed(w) => Some(format!("round {}: {w}", s.round + 1)),
            _ => None,
        });
        let na = of.iter().find_map(|s| match &s.outcome {
            Outcome::NotApplicable(w) => Some(w.clone()),
            _ => None,
        });
        let vals: Vec<f64> = of
            .iter()
            .filter_map(|s| match s.outcome {
                Outcome::Value(v) => Some(v),
                _ => None,
            })
            .collect();
        let value = (failed.is_none() && !vals.is_empty()).then(|| median(vals));
        (value, na, failed)
    };
    items
        .iter()
        .map(|it| {
            let base = cell_of(it.name, BASE).0;
            let cells = targets()
                .iter()
                .map(|t| {
                    let (value, not_applicable, failed) = cell_of(it.name, &t.name());
                    let vs_ext4_attach = match (value, base) {
                        (Some(v), Some(b)) if v > 0.0 && b > 0.0 => {
                            Some(if it.higher_is_better { v / b } else { b / v })
                        }
                        _ => None,
                    };
                    Cell {
                        target: t.name(),
                        value,
                        vs_ext4_attach,
                        not_applicable,
                        failed,
                    }
                })
                .collect();
            Row {
                item: it.name.into(),
                unit: it.unit.into(),
                higher_is_better: it.higher_is_better,
                cells,
            }
        })
        .collect()
}

/// The configurations' names, in table order.
fn target_names() -> Vec<String> {
    targets().iter().map(|t| t.name()).collect()
}
