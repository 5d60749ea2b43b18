//! `pmkit fs serve POOL`: the pool's server, which mounts the pool once and serves it to every
//! process that uses it through the LD_PRELOAD shim (docs/fs-sharing.md).

use anyhow::{Context, Result};
use pmkit_fs::posix::Posix;
use pmkit_fs::{Fs, MountOptions};
use pmkit_fs_share::Server;
use pmkit_media::{Region, RegionOptions};
use std::path::Path;
use std::sync::Arc;

/// The line `serve` prints on stdout once clients may connect.
pub(crate) const READY: &str = "ready: serving";

pub(crate) fn serve(pool: &Path, o: &MountOptions) -> Result<()> {
    // Before any thread exists: every thread inherits the mask, and only sigwait takes them.
    let set = crate::serve::block_signals();
    pmkit::entry::daemon();
    let region = Region::open(pool, &RegionOptions::default())
        .with_context(|| format!("cannot open {}", pool.display()))?;
    region.claim(true).with_context(|| {
        format!(
            "{} is in use: a pool has one server (a mount or `pmkit fs serve`), which every \
             process then shares",
            pool.display()
        )
    })?;
    let (fs, r) =
        Fs::mount(region, o).with_context(|| format!("cannot mount {}", pool.display()))?;
    pmkit::say_err!(
        "mounted {}: last unmount {}, journal: {}",
        pool.display(),
        if r.was_clean {
            "clean"
        } else {
            "NOT clean (recovered)"
        },
        r.journal
    );
    let root = Arc::new(Posix::new(fs));
    let server = Server::start(Arc::clone(&root), pool)
        .with_context(|| format!("cannot listen for clients of {}", pool.display()))?;
    pmkit::say!(
        "{READY} {} to processes (run them with LD_PRELOAD=libpmkit_preload.so \
         PMKIT_PRELOAD_POOL={} PMKIT_PRELOAD_PREFIX=DIR); stop with SIGTERM",
        pool.display(),
        pool.display()
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    pmkit::sd_notify::ready(&format!("serving {}", pool.display()));
    let mut sig = 0;
    // SAFETY: waits for one of the signals blocked above.
    unsafe { libc::sigwait(&set, &mut sig) };
    pmkit::sd_notify::stopping();
    pmkit::say_err!(
        "signal {sig}: ending {} client session(s), then unmounting",
        server.clients()
    );
    drop(server.stop());
    let root = Arc::try_unwrap(root)
        .map_err(|_| anyhow::anyhow!("a session outlived the server (a bug): not unmounted"))?;
    drop(root.unmount());
    pmkit::say_err!("{}: marked clean", pool.display());
    Ok(())
}
