//! `pmkit fs mount POOL DIR` (a foreground FUSE daemon) and `pmkit fs umount DIR`.

use anyhow::Result;
use pmkit::stats_file::StatsWriter;
use pmkit_fs::{DataMode, Protect};
use pmkit_fuse::pmfs::cache::CacheMode;
use pmkit_fuse::pmfs::mount::{self as session, MountOptions};
use pmkit_fuse::pmfs::stats::MountStats;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The line `mount` prints on stdout once the file system is mounted and served.
pub(crate) const READY: &str = "ready: serving";

/// What `pmkit fs mount` was asked for.
pub(crate) struct Opts<'a> {
    pub threads: usize,
    pub protect: Option<Protect>,
    pub atomic: bool,
    pub checksum: bool,
    pub stats: Option<&'a Path>,
    pub barrier_ns: u64,
    pub cache: CacheMode,
    pub transport: pmkit_fuse::uring::Transport,
    pub full_walk: bool,
    pub atime: pmkit_fs::Atime,
    pub read_only: bool,
    pub stop_grace: std::time::Duration,
    pub log: pmkit::daemon_log::LogDest,
}

pub(crate) fn mount(pool: &Path, dir: &Path, a: &Opts<'_>) -> Result<()> {
    let (threads, stats) = (a.threads, a.stats);
    // Before any thread starts: the session threads inherit the mask, and the main thread
    // takes the stop signals with sigtimedwait.
    session::block_signals();
    pmkit::entry::daemon();
    let o = MountOptions {
        threads,
        protect: a.protect,
        barrier_ns: a.barrier_ns,
        data: if a.atomic {
            DataMode::Atomic
        } else {
            DataMode::InPlace
        },
        checksum: a.checksum,
        cache: a.cache,
        transport: a.transport,
        full_walk: a.full_walk,
        atime: a.atime,
        read_only: a.read_only,
        stop_grace: a.stop_grace,
    };
    let served = session::mount(pool, dir, &o)?;
    for n in &served.notes {
        pmkit::say_err!("note: {n}");
    }
    let r = &served.recovery;
    pmkit::say_err!(
        "mounted {}{}: last unmount {}, journal: {}, orphans finished {}{}",
        pool.display(),
        if r.from_checkpoint {
            " from the clean-unmount checkpoint"
        } else {
            " after a full walk"
        },
        if r.was_clean {
            "clean"
        } else {
            "NOT clean (recovered)"
        },
        r.journal,
        r.orphans,
        if r.superblock_repaired {
            ", a bad superblock copy rewritten"
        } else {
            ""
        }
    );
    if r.cut_appends > 0 {
        pmkit::say_err!(
            "{} file(s) had their last append cut by the crash: their size went back to before it",
            r.cut_appends
        );
    }
    pmkit::say_err!(
        "protection {}: {}",
        served.protection.0,
        served.protection.1
    );
    if served.serves_peers() {
        pmkit::say_err!(
            "processes may use the pool beside the mount through the shim: \
             LD_PRELOAD=libpmkit_preload.so PMKIT_PRELOAD_POOL={} PMKIT_PRELOAD_PREFIX={}",
            pool.display(),
            served.dir.display()
        );
    }
    pmkit::say!(
        "{READY} {} on {} over {}, cache {}; stop with `pmkit fs umount {}` or SIGTERM",
        pool.display(),
        served.dir.display(),
        match served.transport {
            pmkit_fuse::uring::Transport::Uring => "FUSE io_uring (a queue per CPU)".to_string(),
            _ => format!("/dev/fuse with {threads} threads"),
        },
        a.cache,
        served.dir.display()
    );
    let _ = std::io::stdout().flush();
    pmkit::sd_notify::ready(&format!("serving {}", served.dir.display()));
    // From here on the daemon runs on its own (under the mount helper, that has exited).
    pmkit::daemon_log::redirect(&a.log, "pmkit-fs")?;
    let table = served.op_stats();
    let writer = match stats {
        Some(p) => {
            let t = Arc::clone(&table);
            Some(StatsWriter::spawn(p.to_path_buf(), move || {
                MountStats::new(&t)
            })?)
        }
        None => None,
    };
    let ended = served.run(|m| pmkit::say_err!("{m}"))?;
    pmkit::sd_notify::stopping();
    if let Some(w) = writer {
        w.finish(&MountStats::new(&table))?;
    }
    match ended.signal {
        Some(s) => pmkit::say_err!(
            "signal {s}: unmounted{}",
            if ended.lazy { " (lazily)" } else { "" }
        ),
        None => pmkit::say_err!("unmounted"),
    }
    if let Some(why) = ended.not_clean {
        anyhow::bail!(
            "{}: NOT marked clean: {why}; the next mount recovers it (`pmkit fs check {}` tells \
             its state)",
            pool.display(),
            pool.display()
        );
    }
    pmkit::say_err!("{}: marked clean", pool.display());
    Ok(())
}

pub(crate) fn umount(dir: &Path, wait_s: u64) -> Result<()> {
    let msg = session::umount(dir, Duration::from_secs(wait_s))?;
    pmkit::say!("{msg}");
    Ok(())
}
