//! The file systems `bench fs` compares, each made afresh, mounted on one directory and torn
//! down (unmounted, loop device detached, files removed) after use, also when a workload fails.

use crate::attach::{mount_target, unmount_target, Mounted, PMKIT_DEV, RAMDISK};
use crate::host::sh;
use anyhow::{Context, Result};
use pmkit::args::EngineArgs;
use pmkit_fuse::pmfs_cache::CacheMode;
use pmkit_fuse::pmfs_mount::{self, MountOptions, Served};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One file system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// PMFS over FUSE (`pmkit fs mount`, in this process) with a cache mode.
    Pmfs(CacheMode),
    /// ext4 on `pmkit attach` (PMBD as a FUSE file + loop device): the thesis's baseline.
    Ext4Attach,
    /// ext4 on a loop device over a /dev/shm file.
    Ext4Loop,
    Tmpfs,
}

impl Target {
    pub fn name(self) -> String {
        match self {
            Target::Pmfs(c) => format!("pmfs-{c}"),
            Target::Ext4Attach => "ext4-attach".into(),
            Target::Ext4Loop => "ext4-loop".into(),
            Target::Tmpfs => "tmpfs".into(),
        }
    }
}

/// Sizes of what a target is made of.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Bytes of the PMFS pool and of each ext4 device.
    pub bytes: u64,
    /// PMFS inodes.
    pub inodes: u32,
    /// FUSE threads of the PMFS mount and of the attachment.
    pub fuse_threads: usize,
    /// Protection of the PMFS mount.
    pub pmfs_protect: pmkit_fs::Protect,
}

/// A mounted target.
pub enum Up {
    Pmfs { served: Served, pool: PathBuf },
    Ext4(Mounted, PathBuf),
    Tmpfs,
}

impl Up {
    /// The PMFS library's counters, for a PMFS mount.
    pub fn pmfs_counters(&self) -> Option<pmkit_fs::Counters> {
        match self {
            Up::Pmfs { served, .. } => Some(served.counters()),
            _ => None,
        }
    }

    /// Bytes the device under ext4 has written and flushes it took, for ext4 on attach.
    pub fn device_writes(&self) -> Option<(u64, u64)> {
        match self {
            Up::Ext4(Mounted::Pmkit { dev, .. }, _) => {
                let s = dev.stats();
                Some((s.write_bytes, s.flushes))
            }
            _ => None,
        }
    }
}

/// Make target `t` in `dir` (for its files) and mount it on `mnt`.
pub fn up(t: Target, dir: &Path, mnt: &Path, s: &Sizes, engine: &EngineArgs) -> Result<Up> {
    let file = dir.join(format!(
        "pmkit-bench-fs-{}-{}",
        t.name(),
        std::process::id()
    ));
    match t {
        Target::Pmfs(cache) => {
            let _ = std::fs::remove_file(&file);
            {
                let region = pmkit_media::Region::open_or_create(
                    &file,
                    s.bytes,
                    &pmkit_media::RegionOptions::default(),
                )
                .with_context(|| format!("creating the pool {}", file.display()))?;
                let o = pmkit_fs::MkfsOptions {
                    inodes: s.inodes,
                    lanes: 8,
                    lane_entries: 256,
                };
                pmkit_fs::Fs::mkfs(&region, &o).context("mkfs of the PMFS pool")?;
            }
            let o = MountOptions {
                threads: s.fuse_threads.max(1),
                cache,
                protect: s.pmfs_protect,
                ..Default::default()
            };
            let served = pmfs_mount::mount(&file, mnt, &o).map_err(|e| {
                let _ = std::fs::remove_file(&file);
                anyhow::anyhow!("mounting PMFS on {}: {e}", mnt.display())
            })?;
            Ok(Up::Pmfs { served, pool: file })
        }
        Target::Ext4Attach | Target::Ext4Loop => {
            let which = if t == Target::Ext4Attach {
                PMKIT_DEV
            } else {
                RAMDISK
            };
            let m = mount_target(
                which,
                &file,
                mnt,
                s.bytes,
                &engine.to_options(),
                s.fuse_threads,
            )?;
            Ok(Up::Ext4(m, file))
        }
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

/// Unmount and remove what [`up`] made.
pub fn down(u: Up, mnt: &Path) -> Result<()> {
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
        Up::Ext4(m, file) => unmount_target(m, mnt, &file)?,
        Up::Tmpfs => {
            sh(Command::new("umount").arg(mnt))?;
        }
    }
    Ok(())
}
