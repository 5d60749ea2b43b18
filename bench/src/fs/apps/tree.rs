//! `bench fs-tree` (PMFS thesis Fig. 14): the utilities over a source tree, each step timed on
//! every configuration: `cp` of the tar into the file system, `tar -xf` of it there, `find
//! -type f`, `grep -r`, `cp -r` of the tree beside itself and `rm -r` of both trees. Each
//! step's result is checked (files found, lines matched, the copy complete, nothing left), so a
//! tool that misbehaves (under the shim: a forked child's EIO, an unserved call) fails its
//! cell with what it said instead of giving a time.

use super::source::{self, Source, PATTERN};
use super::{check_host, each_target, output, summarize, target_names, Ctx, Item, Outcome};
use super::{Row, Sample, BASE};
use crate::fs::targets::Sizes;
use crate::host::{cpu_label, need_tool, Scratch};
use anyhow::Result;
use pmkit::args::EngineArgs;
use serde::Serialize;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    flags: crate::report::BenchFlags,
    /// The whole kernel tree (1.3 GB, 79,000 files) instead of its default part.
    #[arg(long)]
    full: bool,
    /// Files of the generated tree --quick uses instead of the kernel source.
    #[arg(long, default_value_t = 400)]
    files: u64,
    /// FUSE worker threads of the PMFS mount and of the attachment.
    #[arg(long, default_value_t = 4)]
    fuse_threads: usize,
    /// Protection of the PMFS configurations (shim, FUSE mount): auto, none, kernel, pkey
    /// (auto: `kernel` on a CPU without pku); `none` isolates what protection costs.
    #[arg(long, default_value = "auto")]
    pmfs_protect: pmkit::args::ProtectArg,
    #[command(flatten)]
    engine: EngineArgs,
}

/// The steps, in order; "start" is one `stat` of the mount point: what starting a program
/// costs on each configuration (for the shim: loading it and mounting the pool), on the empty
/// file system and again with the tree in it ("start, tree in": a shim start after a clean
/// exit loads the saved allocator; one that walks, `PMFS_FULL_WALK=1`, grows with the pool).
pub(super) const STEPS: [&str; 8] = [
    "start",
    "cp",
    "untar",
    "start, tree in",
    "find",
    "grep -r",
    "cp -r",
    "rm -r",
];

#[derive(Serialize)]
pub(super) struct Report {
    pub cpu: String,
    pub rounds: usize,
    pub source: Source,
    pub pattern: &'static str,
    pub targets: Vec<String>,
    pub pmfs_pool_bytes: u64,
    pub pmfs_inodes: u32,
    pub notes: Vec<&'static str>,
    pub samples: Vec<Sample>,
    pub summary: Vec<Row>,
    /// The PMFS mount's FUSE requests in each timed step of the first round (what bounds the
    /// mount's times: each is a round trip to the daemon).
    pub requests: Vec<StepRequests>,
}

/// FUSE requests the PMFS mount's daemon answered during one timed step, by kind (the names of
/// its statistics; all but INIT, FORGET, INTERRUPT and the requests it answers ENOSYS without
/// calling the library).
#[derive(Serialize, Clone)]
pub(super) struct StepRequests {
    pub target: String,
    pub step: &'static str,
    pub total: u64,
    pub by_kind: BTreeMap<String, u64>,
}

/// The daemon's counts around each timed command of one configuration (PMFS mounts only).
struct StepLog<'a> {
    up: &'a crate::fs::targets::Up,
    before: Option<BTreeMap<String, u64>>,
    got: Vec<StepRequests>,
}

impl StepLog<'_> {
    /// Just before a timed command.
    fn mark(&mut self) {
        self.before = self.up.fuse_requests_by_kind();
    }

    /// Just after it: the requests since [`StepLog::mark`].
    fn step(&mut self, step: &'static str) {
        let (Some(b), Some(a)) = (self.before.take(), self.up.fuse_requests_by_kind()) else {
            return;
        };
        let by_kind: BTreeMap<String, u64> = a
            .into_iter()
            .filter_map(|(k, v)| {
                let d = v.saturating_sub(b.get(&k).copied().unwrap_or(0));
                (d > 0).then_some((k, d))
            })
            .collect();
        self.got.push(StepRequests {
            target: String::new(),
            step,
            total: by_kind.values().sum(),
            by_kind,
        });
    }
}

const NOTES: [&str; 4] = [
    "pmfs-shim runs each program with LD_PRELOAD=libpmkit_preload.so: PMFS in the program's own \
     process, no system call on the data path; it is the library (pmfs-lib) for unmodified \
     programs, so there is no separate library row",
    "each write step (cp, untar, cp -r, rm -r) ends with syncfs on the kernel file systems \
     (counted): PMFS calls are durable when they return",
    "every step starts one process (shim: loading the library and mounting the pool); 'start' \
     times that alone",
    "caches stay warm between steps (no drop_caches: the machine is shared)",
];

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    check_host("bench fs-tree mounts file systems")?;
    for t in ["tar", "cp", "find", "grep", "rm", "sync", "stat"] {
        need_tool(t, "install tar, coreutils, findutils and grep")?;
    }
    let rounds = a.flags.rounds(3);
    let gen_dir = Scratch::dir(&a.flags.dir, "fs-tree-gen")?;
    let src = if a.flags.quick {
        source::generated(gen_dir.path(), a.files)?
    } else {
        eprintln!("preparing the tree (cached in {})", a.flags.dir.display());
        source::linux(&a.flags.dir, a.full)?
    };
    // The tar, two trees and their inodes, with a quarter to spare; inodes for two trees.
    let need = src.tar_bytes + 2 * (src.block_bytes + (src.dirs + src.links) * 4096);
    let bytes = ((need + need / 4) >> 20).max(512) << 20;
    let entries = 2 * (src.files + src.dirs + src.links);
    let inodes = u32::try_from(entries + entries / 5 + 1024)?;
    let sizes = Sizes {
        bytes,
        inodes,
        fuse_threads: a.fuse_threads.clamp(1, 64),
        pmfs_protect: a.pmfs_protect,
        barrier_ns: 0,
    };
    let requests = RefCell::new(Vec::new());
    let samples = each_target(&a.flags, rounds, &sizes, &a.engine, |r, ctx| {
        let mut log = StepLog {
            up: ctx.up,
            before: None,
            got: vec![],
        };
        let got = steps(ctx, &src, &mut log);
        if r == 0 {
            let name = ctx.target.name();
            requests
                .borrow_mut()
                .extend(log.got.into_iter().map(|s| StepRequests {
                    target: name.clone(),
                    ..s
                }));
        }
        got
    })?;
    let items: Vec<Item> = STEPS
        .iter()
        .map(|&name| Item {
            name,
            unit: "s",
            higher_is_better: false,
        })
        .collect();
    let report = Report {
        cpu: cpu_label(),
        rounds,
        summary: summarize(&samples, &items),
        source: src,
        pattern: PATTERN,
        targets: target_names(),
        pmfs_pool_bytes: bytes,
        pmfs_inodes: inodes,
        notes: NOTES.to_vec(),
        samples,
        requests: requests.into_inner(),
    };
    a.flags.emit(&report, draw_tree, print_tree)
}

/// `find MNT` arguments for what is left at the top but lost+found (ext2/ext4 make it).
const LEFT: [&str; 7] = [
    "-mindepth",
    "1",
    "-maxdepth",
    "1",
    "!",
    "-name",
    "lost+found",
];

/// Count the lines of `out`.
fn lines(out: &str) -> u64 {
    out.lines().count() as u64
}

/// The steps on one configuration: (step, seconds or why not). After a failed step the rest
/// are failed too, naming it.
fn steps(ctx: &Ctx, src: &Source, log: &mut StepLog) -> Vec<(String, Outcome)> {
    let mut got: Vec<(String, Outcome)> = vec![];
    let r = (|| -> Result<(), (&'static str, String)> {
        let e = |step: &'static str| move |w: String| (step, w);
        let cmd = |step: &'static str, prog: &str| ctx.cmd(prog).map_err(|w| (step, w.to_string()));
        let tar = ctx.path("tree.tar");
        let a = ctx.path("a");
        let b = ctx.path("b");
        let top_a = a.join(&src.top);

        let (t, _) = ctx
            .timed(cmd("start", "stat")?.arg(ctx.mnt), false)
            .map_err(e("start"))?;
        got.push(("start".into(), Outcome::Value(t)));

        log.mark();
        let (t, _) = ctx
            .timed(cmd("cp", "cp")?.arg(&src.tar).arg(&tar), true)
            .map_err(e("cp"))?;
        log.step("cp");
        let mut size = cmd("cp", "stat")?;
        let size = super::run_tool(size.args(["-c", "%s"]).arg(&tar)).map_err(e("cp"))?;
        if size.trim() != src.tar_bytes.to_string() {
            return Err((
                "cp",
                format!("the copy has {} bytes, not {}", size.trim(), src.tar_bytes),
            ));
        }
        got.push(("cp".into(), Outcome::Value(t)));

        ctx.mkdir("a").map_err(e("untar"))?;
        log.mark();
        let (t, _) = ctx
            .timed(
                cmd("untar", "tar")?.arg("-xf").arg(&tar).arg("-C").arg(&a),
                true,
            )
            .map_err(e("untar"))?;
        log.step("untar");
        got.push(("untar".into(), Outcome::Value(t)));

        let (t, _) = ctx
            .timed(cmd("start, tree in", "stat")?.arg(ctx.mnt), false)
            .map_err(e("start, tree in"))?;
        got.push(("start, tree in".into(), Outcome::Value(t)));

        log.mark();
        let (t, out) = ctx
            .timed(cmd("find", "find")?.arg(&top_a).args(["-type", "f"]), false)
            .map_err(e("find"))?;
        log.step("find");
        if lines(&out) != src.files {
            return Err((
                "find",
                format!("found {} files, not {}", lines(&out), src.files),
            ));
        }
        got.push(("find".into(), Outcome::Value(t)));

        log.mark();
        let (t, out) = ctx
            .timed(
                cmd("grep -r", "grep")?
                    .args(["-r", "-I", "-F", "-e", PATTERN])
                    .arg(&top_a),
                false,
            )
            .map_err(e("grep -r"))?;
        log.step("grep -r");
        if lines(&out) != src.grep_lines {
            let w = format!("{} lines matched, not {}", lines(&out), src.grep_lines);
            return Err(("grep -r", w));
        }
        got.push(("grep -r".into(), Outcome::Value(t)));

        log.mark();
        let (t, _) = ctx
            .timed(cmd("cp -r", "cp")?.arg("-r").arg(&a).arg(&b), true)
            .map_err(e("cp -r"))?;
        log.step("cp -r");
        let (_, out) = ctx
            .timed(cmd("cp -r", "find")?.arg(&b).args(["-type", "f"]), false)
            .map_err(e("cp -r"))?;
        if lines(&out) != src.files {
            return Err((
                "cp -r",
                format!("the copy has {} files, not {}", lines(&out), src.files),
            ));
        }
        got.push(("cp -r".into(), Outcome::Value(t)));

        log.mark();
        let (t, _) = ctx
            .timed(cmd("rm -r", "rm")?.arg("-r").arg(&a).arg(&b), true)
            .map_err(e("rm -r"))?;
        log.step("rm -r");
        let (_, out) = ctx
            .timed(cmd("rm -r", "find")?.arg(ctx.mnt).args(LEFT), false)
            .map_err(e("rm -r"))?;
        if out.trim() != tar.display().to_string() {
            return Err((
                "rm -r",
                format!("left behind: {}", super::first_lines(&out)),
            ));
        }
        got.push(("rm -r".into(), Outcome::Value(t)));
        ctx.remove("tree.tar").map_err(e("rm -r"))?;
        Ok(())
    })();
    if let Err((step, why)) = r {
        let mut failed = false;
        for s in STEPS {
            if s == step {
                failed = true;
                got.retain(|(n, _)| n != s);
                got.push((s.into(), Outcome::Failed(why.clone())));
            } else if failed {
                got.push((s.into(), Outcome::Failed(format!("not run: {step} failed"))));
            }
        }
    }
    got
}

fn print_tree(r: &Report) {
    let s = &r.source;
    println!(
        "bench fs-tree: median of {} round(s); {}; tree: {} ({} files, {} directories, {} \
         links, {:.1} MB in files, tar {:.1} MB); grep -r -I -F {} matches {} lines; PMFS pool \
         {} MiB, {} inodes",
        r.rounds,
        r.cpu,
        s.what,
        s.files,
        s.dirs,
        s.links,
        s.bytes as f64 / 1e6,
        s.tar_bytes as f64 / 1e6,
        r.pattern,
        s.grep_lines,
        r.pmfs_pool_bytes >> 20,
        r.pmfs_inodes
    );
    println!("seconds per step (how many times faster than {BASE}); lower seconds are better");
    output::print_rows(&r.summary, &r.targets);
    if !r.requests.is_empty() {
        println!("FUSE requests the PMFS mount's daemon answered in each step (round 1): total, most frequent kinds");
        for q in &r.requests {
            let mut kinds: Vec<(&String, &u64)> = q.by_kind.iter().collect();
            kinds.sort_by(|x, y| y.1.cmp(x.1));
            let top: Vec<String> = kinds
                .iter()
                .take(5)
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            println!(
                "  {:<18} {:<8} {:>9}  {}",
                q.target,
                q.step,
                q.total,
                top.join(", ")
            );
        }
    }
    output::print_notes(&r.notes);
}

fn draw_tree(p: &Path, r: &Report) -> Result<()> {
    let rows: Vec<Row> = r
        .summary
        .iter()
        .filter(|x| !x.item.starts_with("start"))
        .cloned()
        .collect();
    crate::report::plot::bars(
        p,
        &format!(
            "Thesis Fig. 14 steps over {} ({} files), {}; missing bar: failed or n/a",
            r.source.what, r.source.files, r.cpu
        ),
        "seconds / times faster",
        &[
            output::panel("seconds (lower is better)".into(), &rows, &r.targets, false),
            output::panel(
                format!("times faster than {BASE} (higher is better)"),
                &rows,
                &r.targets,
                true,
            ),
        ],
        1,
    )
}
