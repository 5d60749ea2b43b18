//! `pmkit fs mount POOL DIR` (a foreground FUSE daemon) and `pmkit fs umount DIR`.

use anyhow::Result;
use pmkit_fs::{DataMode, Protect};
use pmkit_fuse::pmfs_cache::CacheMode;
use pmkit_fuse::pmfs_mount::{self, MountOptions};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// The line `mount` prints on stdout once the file system is mounted and served.
pub const READY: &str = "ready: serving";

pub fn mount(
    pool: &Path,
    dir: &Path,
    threads: usize,
    protect: Protect,
    atomic: bool,
    cache: CacheMode,
) -> Result<()> {
    // Before any thread starts: the session threads inherit the mask, and the main thread
    // takes the stop signals with sigtimedwait.
    pmfs_mount::block_signals();
    let o = MountOptions {
        threads,
        protect,
        data: if atomic {
            DataMode::Atomic
        } else {
            DataMode::InPlace
        },
        cache,
    };
    let served = pmfs_mount::mount(pool, dir, &o)?;
    for n in &served.notes {
        eprintln!("note: {n}");
    }
    let r = &served.recovery;
    eprintln!(
        "mounted {}: last unmount {}, journal: {:?}, orphans finished {}{}",
        pool.display(),
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
    eprintln!(
        "protection {}: {}",
        served.protection.0, served.protection.1
    );
    println!(
        "{READY} {} on {} with {threads} threads, cache {cache}; stop with `pmkit fs umount {}` or SIGTERM",
        pool.display(),
        served.dir.display(),
        served.dir.display()
    );
    std::io::stdout().flush()?;
    let ended = served.run(|m| eprintln!("{m}"))?;
    match ended.signal {
        Some(s) => eprintln!(
            "signal {s}: unmounted{}",
            if ended.lazy { " (lazily)" } else { "" }
        ),
        None => eprintln!("unmounted"),
    }
    eprintln!("{}: marked clean", pool.display());
    Ok(())
}

pub fn umount(dir: &Path, wait_s: u64) -> Result<()> {
    let msg = pmfs_mount::umount(dir, Duration::from_secs(wait_s))?;
    println!("{msg}");
    Ok(())
}
