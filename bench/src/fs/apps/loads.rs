//! `bench fs-apps`: filebench-like loads by unmodified programs on every configuration, each
//! with its own metric (higher is better): dbench (MB/s, a few clients for a few seconds),
//! postmark (transactions/s over the whole run), fs_mark (4 KiB files/s, fsync before each
//! close, one thread), sqlite3 (rows/s, `synchronous=FULL`, rollback journal) and pgbench
//! (transactions/s). The sqlite and pgbench runs are `bench attach`'s. dbench and PostgreSQL
//! fork (a process per client, a backend per connection): not applicable to the shim, which
//! serves one process.

use super::{check_host, each_target, output, summarize, target_names, Ctx, Item, Outcome};
use super::{first_lines, Row, Sample, BASE};
use crate::blk::attach::apps as bench_apps;
use crate::fs::targets::Sizes;
use crate::host::{cpu_label, need_tool};
use anyhow::{Context, Result};
use pmkit::args::EngineArgs;
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::Instant;

/// A load.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum App {
    Sqlite,
    SqliteWal,
    Fsmark,
    Postmark,
    Dbench,
    Pgbench,
}

impl App {
    fn item(self) -> Item {
        let (name, unit) = match self {
            App::Sqlite => ("sqlite FULL", "rows/s"),
            App::SqliteWal => ("sqlite WAL FULL", "rows/s"),
            App::Fsmark => ("fs_mark 4K+fsync", "files/s"),
            App::Postmark => ("postmark", "tx/s"),
            App::Dbench => ("dbench", "MB/s"),
            App::Pgbench => ("pgbench", "tps"),
        };
        Item {
            name,
            unit,
            higher_is_better: true,
        }
    }

    /// The program it needs, and the Debian package that has it.
    fn tool(self) -> (&'static str, &'static str) {
        match self {
            App::Sqlite | App::SqliteWal => ("sqlite3", "sqlite3"),
            App::Fsmark => ("fs_mark", "fsmark"),
            App::Postmark => ("postmark", "postmark"),
            App::Dbench => ("dbench", "dbench"),
            App::Pgbench => ("runuser", "postgresql"),
        }
    }

    /// Why it cannot run through the shim, if it cannot.
    fn not_on_shim(self) -> Option<&'static str> {
        match self {
            App::Dbench => Some("dbench forks a process per client; the shim serves one process"),
            App::Pgbench => {
                Some("PostgreSQL forks a backend per connection; the shim serves one process")
            }
            _ => None,
        }
    }
}

const ALL: [App; 6] = [
    App::Sqlite,
    App::SqliteWal,
    App::Fsmark,
    App::Postmark,
    App::Dbench,
    App::Pgbench,
];

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    flags: crate::report::BenchFlags,
    /// Loads to run [default: all; --quick: sqlite, sqlite-wal, fsmark and postmark, those installed].
    #[arg(long, value_delimiter = ',')]
    apps: Option<Vec<App>>,
    /// sqlite3 transactions of 100 rows (default 500, quick 50).
    #[arg(long)]
    sqlite_tx: Option<u32>,
    /// fs_mark files of 4 KiB, each fsynced (default 2000, quick 200).
    #[arg(long)]
    fsmark_files: Option<u32>,
    /// postmark files and transactions (default 2000 and 20000, quick 200 and 2000).
    #[arg(long)]
    postmark_files: Option<u32>,
    #[arg(long)]
    postmark_tx: Option<u32>,
    /// dbench seconds and clients.
    #[arg(long, default_value_t = 10)]
    dbench_secs: u32,
    #[arg(long, default_value_t = 2)]
    dbench_clients: u32,
    /// pgbench scale, clients and transactions per client.
    #[arg(long, default_value_t = 1)]
    pgbench_scale: u32,
    #[arg(long, default_value_t = 2)]
    pgbench_clients: u32,
    #[arg(long, default_value_t = 500)]
    pgbench_tx: u32,
    /// Size of the PMFS pool and of each ext2/ext4 device, in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    /// FUSE worker threads of the PMFS mount and of the attachment.
    #[arg(long, default_value_t = 4)]
    fuse_threads: usize,
    #[command(flatten)]
    engine: EngineArgs,
}

/// The counts a run used.
#[derive(Serialize, Clone, Copy)]
pub(super) struct Counts {
    pub sqlite_tx: u32,
    pub fsmark_files: u32,
    pub postmark_files: u32,
    pub postmark_tx: u32,
    pub dbench_secs: u32,
    pub dbench_clients: u32,
    pub pgbench_scale: u32,
    pub pgbench_clients: u32,
    pub pgbench_tx: u32,
}

#[derive(Serialize)]
pub(super) struct Report {
    pub cpu: String,
    pub rounds: usize,
    pub targets: Vec<String>,
    pub apps: Vec<App>,
    /// Loads --quick left out, and why (not installed).
    pub skipped: Vec<String>,
    pub counts: Counts,
    pub notes: Vec<&'static str>,
    pub samples: Vec<Sample>,
    pub summary: Vec<Row>,
}

const NOTES: [&str; 3] = [
    "pmfs-shim runs each program with LD_PRELOAD=libpmkit_preload.so: PMFS in the program's own \
     process (the library for unmodified programs; no separate pmfs-lib row)",
    "postmark's own timer counts whole seconds: its rate here is its transactions over the \
     wall-clock time of the whole run (creating, transactions, deleting), then syncfs",
    "dbench and fs_mark runs end with syncfs on the kernel file systems (counted); sqlite and \
     fs_mark fsync themselves",
];

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    check_host("bench fs-apps mounts file systems")?;
    let quick = a.flags.quick;
    let rounds = a.flags.rounds(2);
    let q = |v: Option<u32>, full: u32, small: u32| v.unwrap_or(if quick { small } else { full });
    let counts = Counts {
        sqlite_tx: q(a.sqlite_tx, 500, 50),
        fsmark_files: q(a.fsmark_files, 2000, 200),
        postmark_files: q(a.postmark_files, 2000, 200),
        postmark_tx: q(a.postmark_tx, 20000, 2000),
        dbench_secs: a.dbench_secs.clamp(1, 600),
        dbench_clients: a.dbench_clients.clamp(1, 64),
        pgbench_scale: a.pgbench_scale.clamp(1, 100),
        pgbench_clients: a.pgbench_clients.clamp(1, 64),
        pgbench_tx: a.pgbench_tx.clamp(1, 1_000_000),
    };
    let mut skipped = vec![];
    let apps: Vec<App> = match &a.apps {
        Some(v) => v.clone(),
        None if quick => [App::Sqlite, App::SqliteWal, App::Fsmark, App::Postmark]
            .into_iter()
            .filter(|&app| {
                let (tool, pkg) = app.tool();
                let ok = need_tool(tool, "").is_ok();
                if !ok {
                    skipped.push(format!(
                        "{app:?}: {tool} not installed (apt-get install {pkg})"
                    ));
                }
                ok
            })
            .collect(),
        None => ALL.to_vec(),
    };
    for app in &apps {
        let (tool, pkg) = app.tool();
        need_tool(
            tool,
            &format!(
                "apt-get install {pkg} (scripts/bench-packages.txt), or leave it out with --apps"
            ),
        )?;
        if *app == App::Pgbench {
            bench_apps::pg_bin("pgbench")?;
        }
    }
    let sizes = Sizes {
        bytes: a.size_mib.max(512) << 20,
        inodes: 65536,
        fuse_threads: a.fuse_threads.clamp(1, 64),
        pmfs_protect: pmkit::args::ProtectArg(None),
        barrier_ns: 0,
    };
    let samples = each_target(&a.flags, rounds, &sizes, &a.engine, |_, ctx| {
        apps.iter()
            .map(|&app| {
                let o = match app.not_on_shim() {
                    Some(why) if ctx.is_shim() => Outcome::NotApplicable(why.into()),
                    _ => match one(ctx, app, &counts) {
                        Ok(v) => Outcome::Value(v),
                        Err(e) => Outcome::Failed(format!("{e:#}")),
                    },
                };
                (app.item().name.to_string(), o)
            })
            .collect()
    })?;
    let items: Vec<Item> = apps.iter().map(|a| a.item()).collect();
    let report = Report {
        cpu: cpu_label(),
        rounds,
        summary: summarize(&samples, &items),
        targets: target_names(),
        apps,
        skipped,
        counts,
        notes: NOTES.to_vec(),
        samples,
    };
    a.flags.emit(&report, draw_apps, print_apps)
}

/// `why` as an error.
fn fail(why: String) -> anyhow::Error {
    anyhow::anyhow!(why)
}

/// Run `app` once on `ctx`: its metric.
fn one(ctx: &Ctx, app: App, n: &Counts) -> Result<f64> {
    match app {
        App::Sqlite | App::SqliteWal => {
            let env = ctx.up.env()?;
            let wal = app == App::SqliteWal;
            let v = bench_apps::sqlite(ctx.mnt, n.sqlite_tx, wal, &env)?;
            // Under the shim the database lives in the pool, out of sqlite()'s reach.
            for f in ["bench.db", "bench.db-wal", "bench.db-shm"] {
                ctx.remove(f).map_err(fail)?;
            }
            Ok(v)
        }
        App::Fsmark => {
            // fs_mark takes directory names under 40 bytes: a relative one, from the folder
            // holding the mount, where its log (written with stdio) goes too.
            let parent = ctx.mnt.parent().context("the mount point has no parent")?;
            let rel = ctx.mnt.file_name().context("the mount point has no name")?;
            let mut c = ctx.cmd("fs_mark")?;
            c.current_dir(parent)
                .arg("-d")
                .arg(Path::new(rel).join("fsmark"));
            c.args(["-s", "4096", "-t", "1", "-S", "1", "-L", "1", "-n"]);
            c.arg(n.fsmark_files.to_string());
            let (_, out) = ctx.timed(&mut c, true).map_err(fail)?;
            ctx.remove("fsmark").map_err(fail)?;
            // The last line of its table: FSUse% Count Size Files/sec App-Overhead.
            let row = out
                .lines()
                .rfind(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .context("fs_mark printed no result")?;
            let f: Vec<&str> = row.split_whitespace().collect();
            anyhow::ensure!(
                f.len() == 5 && f[1] == n.fsmark_files.to_string(),
                "fs_mark: unexpected result line {row:?}"
            );
            Ok(f[3].parse()?)
        }
        App::Postmark => postmark(ctx, n),
        App::Dbench => {
            ctx.mkdir("dbench").map_err(fail)?;
            let mut c = ctx.cmd("dbench")?;
            c.arg("-D").arg(ctx.path("dbench"));
            c.arg("-t").arg(n.dbench_secs.to_string());
            c.arg(n.dbench_clients.to_string());
            let (_, out) = ctx.timed(&mut c, true).map_err(fail)?;
            ctx.remove("dbench").map_err(fail)?;
            out.lines()
                .find_map(|l| l.strip_prefix("Throughput "))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("no throughput in dbench's output: {}", first_lines(&out)))
        }
        App::Pgbench => {
            let v = bench_apps::pgbench(ctx.mnt, n.pgbench_scale, n.pgbench_clients, n.pgbench_tx);
            ctx.remove("pg").map_err(fail)?;
            v
        }
    }
}

/// postmark, driven by its command script on stdin, unbuffered (stdio on a pool path is not
/// served by the shim): transactions per second over the whole run. postmark exits 0 after
/// errors, so its output is searched for them; it also divides by its run time in whole
/// seconds, so a run under a second dies of SIGFPE after finishing, which counts as done.
fn postmark(ctx: &Ctx, n: &Counts) -> Result<f64> {
    ctx.mkdir("postmark").map_err(fail)?;
    let script = format!(
        "set location {}\nset number {}\nset transactions {}\nset subdirectories 10\n\
         set size 500 16384\nset buffering false\nset seed 42\nrun\nquit\n",
        ctx.path("postmark").display(),
        n.postmark_files,
        n.postmark_tx
    );
    let t = Instant::now();
    let mut child = ctx
        .cmd("postmark")?
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running postmark")?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(script.as_bytes())?;
    let o = child.wait_with_output()?;
    ctx.sync().map_err(fail)?;
    let secs = t.elapsed().as_secs_f64();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let errors: String = out
        .lines()
        .chain(err.lines())
        .filter(|l| l.contains("Error"))
        .take(2)
        .collect::<Vec<_>>()
        .join(" | ");
    anyhow::ensure!(errors.is_empty(), "postmark: {errors}");
    use std::os::unix::process::ExitStatusExt;
    let sigfpe_at_report = o.status.signal() == Some(libc::SIGFPE);
    anyhow::ensure!(
        (o.status.success() || sigfpe_at_report) && out.contains("Deleting files...Done"),
        "postmark: {} {}",
        o.status,
        first_lines(&err)
    );
    ctx.remove("postmark").map_err(fail)?;
    Ok(f64::from(n.postmark_tx) / secs)
}

fn print_apps(r: &Report) {
    let n = &r.counts;
    println!(
        "bench fs-apps: median of {} round(s); {}; sqlite {} tx of 100 rows; fs_mark {} files; \
         postmark {} files, {} tx; dbench {} clients, {} s; pgbench scale {}, {} clients x {} tx",
        r.rounds,
        r.cpu,
        n.sqlite_tx,
        n.fsmark_files,
        n.postmark_files,
        n.postmark_tx,
        n.dbench_clients,
        n.dbench_secs,
        n.pgbench_scale,
        n.pgbench_clients,
        n.pgbench_tx
    );
    println!("rate (ratio to {BASE}); higher is better");
    output::print_rows(&r.summary, &r.targets);
    for s in &r.skipped {
        println!("skipped: {s}");
    }
    output::print_notes(&r.notes);
}

fn draw_apps(p: &Path, r: &Report) -> Result<()> {
    let rows = &r.summary;
    crate::report::plot::bars(
        p,
        &format!(
            "Filebench-like loads, {}; missing bar: failed or n/a",
            r.cpu
        ),
        "ratio to ext4 on attach",
        &[output::panel(
            format!("rate / {BASE}'s (higher is better)"),
            rows,
            &r.targets,
            true,
        )],
        1,
    )
}
