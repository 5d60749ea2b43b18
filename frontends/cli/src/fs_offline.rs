//! Work on a PMFS pool that must not be mounted: holding its lock (or saying who holds it) for
//! `check --repair` and `resize`, and growing it.

use anyhow::{Context, Result};
use pmkit_media::{Region, RegionOptions};
use std::path::Path;
use std::process::ExitCode;

/// Take `region`'s lock for offline work on `pool`, or fail naming who holds it (a mount's
/// directory and daemon, or another process) and what to do; `what` is the work refused.
pub(crate) fn lock(pool: &Path, region: &Region, what: &str) -> Result<()> {
    if region
        .try_lock(true)
        .with_context(|| format!("{}", pool.display()))?
    {
        return Ok(());
    }
    let mounts = pmkit_fuse::pmfs::mount::mounts_of(pool);
    let by = match mounts.first() {
        Some(m) => format!(
            "it is mounted on {} (`pmkit fs mount`, pid {}); unmount it first: pmkit fs umount {}",
            m.dir.display(),
            pmkit_fuse::pmfs::mount::daemon_pid(m).map_or("?".into(), |p| p.to_string()),
            m.dir.display()
        ),
        None => "another process holds its lock (a `pmkit fs mount`, a repair or a resize); \
                 stop it first"
            .into(),
    };
    anyhow::bail!("{}: not {what}: {by}", pool.display());
}

/// `pmkit fs resize POOL --size SIZE`: extend the pool file to `size` bytes and grow the file
/// system into it (offline; the inode table keeps its size; a format 2 pool becomes format 3).
pub(crate) fn resize(pool: &Path, size: u64) -> Result<ExitCode> {
    let meta = std::fs::metadata(pool).with_context(|| format!("{}", pool.display()))?;
    anyhow::ensure!(
        meta.is_file(),
        "{}: only a pool file can be resized (a device keeps its size)",
        pool.display()
    );
    let before = meta.len();
    anyhow::ensure!(
        size > before,
        "{}: {size} bytes is not larger than the pool's {before}: shrinking is not supported",
        pool.display()
    );
    let held = Region::open(pool, &RegionOptions::default())
        .with_context(|| format!("{}: cannot open", pool.display()))?;
    crate::identify::expect(pool, &held, crate::identify::Kind::Fs)?;
    lock(pool, &held, "resized")?;
    let grown = (|| -> Result<pmkit_fs::Grown> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(pool)?
            .set_len(size)?;
        // Mapped whole at the new length (its new blocks allocated, or a clear ENOSPC).
        let region = Region::open(pool, &RegionOptions::default())
            .with_context(|| format!("{}: cannot map at {size} bytes", pool.display()))?;
        let g = pmkit_fs::grow(&region)?;
        if region.needs_msync() {
            region
                .msync(0, region.len())
                .with_context(|| format!("{}: msync", pool.display()))?;
        }
        Ok(g)
    })();
    let g = match grown {
        Ok(g) => g,
        Err(e) => {
            // The file system was not grown: give the file its length back.
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .open(pool)
                .and_then(|f| f.set_len(before));
            return Err(e.context(format!("{}: not resized", pool.display())));
        }
    };
    held.unlock();
    println!(
        "{}: grown from {} to {} blocks of 4 KiB (format {} -> {}); the next mount walks the tree once",
        pool.display(),
        g.blocks_before,
        g.blocks_after,
        g.version_before,
        g.version_after
    );
    Ok(ExitCode::SUCCESS)
}
