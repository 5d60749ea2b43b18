//! The file systems the `bench fs*` commands compare, each made afresh, mounted on one directory
//! and torn down (unmounted, loop device detached, files removed) after use, also when a workload
//! fails. PMFS comes three ways: over FUSE, in process through the library ([`Target::Library`],
//! for workloads written against `pmkit_fs::posix`) and through the LD_PRELOAD shim
//! ([`Target::Shim`], for unmodified programs, started with [`Up::env`]); the last two make the
//! pool and leave the directory empty: the shim serves it as its prefix.

use crate::blk::attach::{mount_loop, mount_target, unmount_target, Mounted, PMKIT_DEV};
use crate::host::sh;
use anyhow::{ensure, Context, Result};
use pmkit::args::EngineArgs;
use pmkit_fuse::pmfs::cache::CacheMode;
use pmkit_fuse::pmfs::mount::{self, MountOptions, Served};
use pmkit_fuse::uring::Transport;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One file system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// PMFS over FUSE (`pmkit fs mount`, in this process) with a cache mode, over /dev/fuse.
    Pmfs(CacheMode),
    /// The same over FUSE's io_uring transport (`pmkit fs mount --transport uring`).
    PmfsUring(CacheMode),
    /// PMFS through the library in the measuring process (`pmkit_fs::posix::Posix`).
    Library,
    /// PMFS through `libpmkit_preload.so` in a child program.
    Shim,
    /// ext4 on `pmkit attach` (PMBD as a FUSE file + loop device): the thesis's baseline.
    Ext4Attach,
    /// The same mounted `-o dirsync`: a directory change is durable when its call returns, as
    /// on PMFS (default ext4 makes it durable at the next journal commit, seconds later).
    Ext4AttachDirsync,
    /// ext4 on a loop device over a /dev/shm file.
    Ext4Loop,
    /// The same, `-o dirsync`.
    Ext4LoopDirsync,
    /// ext2 (no journal) on a loop device over a /dev/shm file.
    Ext2Loop,
    Tmpfs,
}

impl Target {
    /// PMFS over FUSE with cache mode `c`, over transport `t` (`Auto`: io_uring where the
    /// kernel offers it).
    pub(crate) fn pmfs(c: CacheMode, t: Transport) -> Target {
        let uring = match t {
            Transport::Auto => pmkit_fuse::uring::enabled(),
            t => t == Transport::Uring,
        };
        if uring {
            Target::PmfsUring(c)
        } else {
            Target::Pmfs(c)
        }
    }

    pub(crate) fn name(self) -> String {
        match self {
            Target::Pmfs(c) => format!("pmfs-{c}"),
            Target::PmfsUring(c) => format!("pmfs-{c}-uring"),
            Target::Library => "pmfs-lib".into(),
            Target::Shim => "pmfs-shim".into(),
            Target::Ext4Attach => "ext4-attach".into(),
            Target::Ext4AttachDirsync => "ext4-attach-dirsync".into(),
            Target::Ext4Loop => "ext4-loop".into(),
            Target::Ext4LoopDirsync => "ext4-loop-dirsync".into(),
            Target::Ext2Loop => "ext2-loop".into(),
            Target::Tmpfs => "tmpfs".into(),
        }
    }
}

/// Sizes of what a target is made of.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes {
    /// Bytes of the PMFS pool and of each ext4 device.
    pub bytes: u64,
    /// PMFS inodes.
    pub inodes: u32,
    /// FUSE threads of the PMFS mount and of the attachment.
    pub fuse_threads: usize,
    /// Protection of PMFS (mount, library and shim).
    pub pmfs_protect: pmkit::args::ProtectArg,
    /// Extra ns per persistence fence of PMFS (thesis Fig. 15c; 0: none).
    pub barrier_ns: u64,
}

/// A mounted target.
pub(crate) enum Up {
    Pmfs {
        served: Box<Served>,
        pool: PathBuf,
    },
    /// A made, unmounted pool for [`Target::Library`] or [`Target::Shim`].
    Pool {
        pool: PathBuf,
        prefix: PathBuf,
        protect: pmkit::args::ProtectArg,
        barrier_ns: u64,
        shim: bool,
    },
    /// ext2 or ext4 on attach or a loop device, and its file.
    Disk(Mounted, PathBuf),
    Tmpfs,
}

impl Up {
    /// The PMFS library's counters, for a PMFS mount.
    pub(crate) fn pmfs_counters(&self) -> Option<pmkit_fs::Counters> {
        match self {
            Up::Pmfs { served, .. } => Some(served.counters()),
            _ => None,
        }
    }

    /// Requests the PMFS mount's daemon has answered (every kind its statistics count: all but
    /// INIT, FORGET and INTERRUPT), for a PMFS mount.
    pub(crate) fn fuse_requests(&self) -> Option<u64> {
        match self {
            Up::Pmfs { served, .. } => Some(served.op_stats().progress().1),
            _ => None,
        }
    }

    /// Requests the PMFS mount's daemon has answered so far, by kind (the statistics' names),
    /// for a PMFS mount.
    pub(crate) fn fuse_requests_by_kind(&self) -> Option<std::collections::BTreeMap<String, u64>> {
        match self {
            Up::Pmfs { served, .. } => Some(
                served
                    .op_stats()
                    .snapshot()
                    .into_iter()
                    .map(|r| (r.op.to_string(), r.ops))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Bytes the device under ext4 has written and flushes it took, for ext4 on attach.
    pub(crate) fn device_writes(&self) -> Option<(u64, u64)> {
        match self {
            Up::Disk(Mounted::Pmkit { dev, .. }, _) => {
                let s = dev.stats();
                Some((s.write_bytes, s.flushes))
            }
            _ => None,
        }
    }

    /// The pool [`Target::Library`] opens (`pmkit_fs::posix`), with its protection and barrier.
    pub(crate) fn library(&self) -> Option<(&Path, pmkit::args::ProtectArg, u64)> {
        match self {
            Up::Pool {
                pool,
                protect,
                barrier_ns,
                shim: false,
                ..
            } => Some((pool, *protect, *barrier_ns)),
            _ => None,
        }
    }

    /// Mount the pool of [`Target::Library`] in this process, held exclusively as the C ABI and
    /// the shim hold it. Unmount it (`Posix::unmount`) before [`down`].
    pub(crate) fn open_library(&self) -> Result<pmkit_fs::posix::Posix<pmkit_media::Region>> {
        let (pool, protect, barrier_ns) = self
            .library()
            .context("open_library: this target is not the PMFS library")?;
        let region = pmkit_media::Region::open(pool, &pmkit_media::RegionOptions::default())
            .with_context(|| format!("opening the pool {}", pool.display()))?;
        ensure!(
            region.try_lock(true)?,
            "{}: in use by another process",
            pool.display()
        );
        let o = pmkit_fs::MountOptions {
            protect: protect.0,
            barrier_ns,
            ..Default::default()
        };
        let (fs, _) = pmkit_fs::Fs::mount(region, &o)
            .with_context(|| format!("mounting {} with {protect}", pool.display()))?;
        Ok(pmkit_fs::posix::Posix::new(fs))
    }

    /// Environment for a child program that works in the mounted directory: the shim's variables
    /// for [`Target::Shim`], nothing for the others.
    pub(crate) fn env(&self) -> Result<Vec<(String, String)>> {
        let Up::Pool {
            pool,
            prefix,
            protect,
            barrier_ns,
            shim: true,
        } = self
        else {
            return Ok(vec![]);
        };
        let lib = shim_path()?;
        Ok(vec![
            ("LD_PRELOAD".into(), lib.display().to_string()),
            ("PMKIT_PRELOAD_POOL".into(), pool.display().to_string()),
            ("PMKIT_PRELOAD_PREFIX".into(), prefix.display().to_string()),
            ("PMFS_PROTECT".into(), protect.to_string()),
            ("PMFS_BARRIER_NS".into(), barrier_ns.to_string()),
        ])
    }
}

/// `libpmkit_preload.so`: `$PMKIT_PRELOAD_LIB`, or beside this binary (cargo puts both in
/// target/release).
pub(crate) fn shim_path() -> Result<PathBuf> {
    let p = match std::env::var_os("PMKIT_PRELOAD_LIB") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()?
            .parent()
            .context("the bench binary has no directory")?
            .join("libpmkit_preload.so"),
    };
    ensure!(
        p.is_file(),
        "the LD_PRELOAD shim {} is missing: build it (`cargo build --release -p pmkit-preload`) \
         or name it in PMKIT_PRELOAD_LIB",
        p.display()
    );
    Ok(p)
}

/// Make a PMFS pool of `s.bytes` at `file`.
fn make_pool(file: &Path, s: &Sizes) -> Result<()> {
    let _ = std::fs::remove_file(file);
    let region =
        pmkit_media::Region::open_or_create(file, s.bytes, &pmkit_media::RegionOptions::default())
            .with_context(|| format!("creating the pool {}", file.display()))?;
    let o = pmkit_fs::MkfsOptions {
        inodes: s.inodes,
        lanes: 8,
        lane_entries: 256,
    };
    pmkit_fs::Fs::mkfs(&region, &o).context("mkfs of the PMFS pool")?;
    Ok(())
}

/// Make target `t` in `dir` (for its files) and mount it on `mnt`.
pub(crate) fn up(t: Target, dir: &Path, mnt: &Path, s: &Sizes, engine: &EngineArgs) -> Result<Up> {
    let file = dir.join(format!(
        "pmkit-bench-fs-{}-{}",
        t.name(),
        std::process::id()
    ));
    match t {
        Target::Pmfs(cache) | Target::PmfsUring(cache) => {
            make_pool(&file, s)?;
            let o = MountOptions {
                threads: s.fuse_threads.max(1),
                cache,
                transport: if matches!(t, Target::PmfsUring(_)) {
                    Transport::Uring
                } else {
                    Transport::Dev
                },
                protect: s.pmfs_protect.0,
                barrier_ns: s.barrier_ns,
                ..Default::default()
            };
            let served = mount::mount(&file, mnt, &o).map_err(|e| {
                let _ = std::fs::remove_file(&file);
                anyhow::anyhow!("mounting PMFS on {}: {e}", mnt.display())
            })?;
            Ok(Up::Pmfs {
                served: Box::new(served),
                pool: file,
            })
        }
        Target::Library | Target::Shim => {
            make_pool(&file, s)?;
            Ok(Up::Pool {
                pool: file,
                prefix: mnt.to_path_buf(),
                protect: s.pmfs_protect,
                barrier_ns: s.barrier_ns,
                shim: t == Target::Shim,
            })
        }
        Target::Ext4Attach
        | Target::Ext4AttachDirsync
        | Target::Ext4Loop
        | Target::Ext4LoopDirsync => ext4(t, file, mnt, s, engine),
        Target::Ext2Loop => Ok(Up::Disk(
            mount_loop(&file, mnt, s.bytes, "ext2", None)?,
            file,
        )),
        Target::Tmpfs => {
            sh(Command::new("mount")
                .args(["-t", "tmpfs", "-o"])
                .arg(format!("size={}", s.bytes))
                .arg("pmkit-bench-fs")
                .arg(mnt))?;
            Ok(Up::Tmpfs)
        }
    }
}

/// ext4 on attach or on a loop device, `-o dirsync` for the dirsync targets.
fn ext4(t: Target, file: PathBuf, mnt: &Path, s: &Sizes, engine: &EngineArgs) -> Result<Up> {
    let dirsync = matches!(t, Target::Ext4AttachDirsync | Target::Ext4LoopDirsync);
    let options = dirsync.then_some("dirsync");
    let m = if matches!(t, Target::Ext4Attach | Target::Ext4AttachDirsync) {
        mount_target(
            PMKIT_DEV,
            &file,
            mnt,
            s.bytes,
            &engine.to_options(),
            s.fuse_threads,
            options,
        )?
    } else {
        mount_loop(&file, mnt, s.bytes, "ext4", options)?
    };
    checked_dirsync(dirsync, Up::Disk(m, file), mnt)
}

/// When `dirsync`, make sure the kernel shows `mnt` mounted with it (a remount does not set
/// it: ext4 then commits directory changes seconds later, and the peer would be a different
/// one); on failure, tear `u` down.
fn checked_dirsync(dirsync: bool, u: Up, mnt: &Path) -> Result<Up> {
    if !dirsync {
        return Ok(u);
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts")?;
    let at = mnt.to_string_lossy();
    let on = mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1] == at && f[3].split(',').any(|o| o == "dirsync")
    });
    if !on {
        let _ = down(u, mnt);
        anyhow::bail!("{at} is not mounted with dirsync");
    }
    Ok(u)
}

/// Unmount and remove what [`up`] made.
pub(crate) fn down(u: Up, mnt: &Path) -> Result<()> {
    match u {
        Up::Pmfs { served, pool } => {
            // Unmounted from outside, the session ends; `run` then joins it and marks the
            // pool clean.
            let r = sh(Command::new("umount").arg(mnt));
            if r.is_err() {
                // Busy: detach it, or `run` would wait for ever.
                let _ = sh(Command::new("umount").arg("-l").arg(mnt));
            }
            let ended = served.run(|_| {});
            let _ = std::fs::remove_file(&pool);
            r?;
            ended.map_err(|e| anyhow::anyhow!("unmounting PMFS: {e}"))?;
        }
        Up::Pool { pool, .. } => {
            std::fs::remove_file(&pool)
                .with_context(|| format!("removing the pool {}", pool.display()))?;
            // What a program left under the prefix went to the pool, never here.
            ensure!(
                std::fs::read_dir(mnt)?.next().is_none(),
                "{} is not empty: the shim let files through to the kernel",
                mnt.display()
            );
        }
        Up::Disk(m, file) => unmount_target(m, mnt, &file)?,
        Up::Tmpfs => {
            sh(Command::new("umount").arg(mnt))?;
        }
    }
    Ok(())
}
