//! The layers `bench fs-layers` measures, each brought up afresh and torn down after use. The
//! in-process ones (library, shim) and the kernel references (ext4 on a loop device, tmpfs) are
//! `bench fs`'s targets; the three with a daemon (the FUSE mount, ext4 on `pmkit attach`, NBD)
//! run `pmkit` as a process of its own here, so that its CPU time can be read from /proc and its
//! instructions counted by running it under valgrind.

use crate::fs::targets::{self, Sizes, Target, Up};
use crate::host::sh;
use anyhow::{bail, Context, Result};
use pmkit::args::EngineArgs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layer {
    /// The PMFS C ABI in the driver's process (`libpmfs.so`).
    Library,
    /// The unmodified POSIX driver under `LD_PRELOAD=libpmkit_preload.so`.
    Shim,
    /// The shim as a client of `pmkit fs serve` (the pool shared by processes): every call a
    /// round trip to the server.
    Served,
    /// The shim as a client of the FUSE mount's daemon (`pmkit fs mount`, the prefix its mount
    /// point): the mount's peer, every call a round trip to the daemon, which then drops what
    /// the call changed from the kernel's caches.
    Peer,
    /// `pmkit fs mount` (FUSE, cache mode long).
    Fuse,
    /// ext4 on `pmkit attach` (PMBD as a FUSE file + loop device): the thesis's baseline.
    Ext4Attach,
    /// `pmkit serve` (PMBD over NBD, a unix socket), driven by libnbd: block requests only.
    Nbd,
    Ext4Loop,
    Tmpfs,
}

pub(super) const LAYERS: [Layer; 9] = [
    Layer::Library,
    Layer::Shim,
    Layer::Served,
    Layer::Peer,
    Layer::Fuse,
    Layer::Ext4Attach,
    Layer::Nbd,
    Layer::Ext4Loop,
    Layer::Tmpfs,
];

/// The operations of the drivers (their first argument).
pub(super) const OPS: [&str; 6] = [
    "read4k",
    "write4k",
    "create",
    "stat",
    "stat_mapped",
    "append4k_fsync",
];

impl Layer {
    pub(super) fn name(self) -> &'static str {
        match self {
            Layer::Library => "library",
            Layer::Shim => "shim",
            Layer::Served => "served",
            Layer::Peer => "peer",
            Layer::Fuse => "fuse",
            Layer::Ext4Attach => "ext4-attach",
            Layer::Nbd => "nbd",
            Layer::Ext4Loop => "ext4-loop",
            Layer::Tmpfs => "tmpfs",
        }
    }

    pub(super) fn parse(s: &str) -> Result<Layer> {
        LAYERS.into_iter().find(|l| l.name() == s).with_context(|| {
            let names: Vec<_> = LAYERS.iter().map(|l| l.name()).collect();
            format!("unknown layer {s:?}: one of {}", names.join(", "))
        })
    }

    /// Whether `op` means something on this layer: NBD has no names (no create, no stat).
    pub(super) fn has(self, op: &str) -> bool {
        self != Layer::Nbd || !matches!(op, "create" | "stat" | "stat_mapped")
    }

    /// Whether several processes can use the layer at once (`--clients`): not the library or
    /// the shim alone (one process per pool), nor NBD (one connection's driver).
    pub(super) fn shared(self) -> bool {
        !matches!(self, Layer::Library | Layer::Shim | Layer::Nbd)
    }

    pub(super) fn has_daemon(self) -> bool {
        matches!(
            self,
            Layer::Served | Layer::Peer | Layer::Fuse | Layer::Ext4Attach | Layer::Nbd
        )
    }
}

/// What the bench needs to bring layers up.
pub(super) struct Ctx<'a> {
    /// Where pools and devices go (`--dir`).
    pub dir: &'a Path,
    /// Mount point (and the shim's prefix).
    pub mnt: &'a Path,
    /// Scratch folder (sockets).
    pub scratch: &'a Path,
    pub sizes: Sizes,
    pub engine: &'a EngineArgs,
    pub pmkit: PathBuf,
}

/// A layer that is up: where the driver works, its environment, and the daemon if any.
pub(super) struct Running {
    pub layer: Layer,
    /// The driver's PLACE: a directory, the pool (library) or an NBD URI.
    pub place: String,
    pub env: Vec<(String, String)>,
    pub daemon: Option<Child>,
    up: Option<Up>,
    /// The daemon's pool or device file, removed at `down`.
    file: Option<PathBuf>,
}

/// Bring `layer` up; a daemon is started as `wrap + pmkit ...` (e.g. under valgrind).
pub(super) fn up(layer: Layer, c: &Ctx, wrap: &[String]) -> Result<Running> {
    let target = match layer {
        Layer::Library => Some(Target::Library),
        Layer::Shim => Some(Target::Shim),
        Layer::Ext4Loop => Some(Target::Ext4Loop),
        Layer::Tmpfs => Some(Target::Tmpfs),
        _ => None,
    };
    if let Some(t) = target {
        let up = targets::up(t, c.dir, c.mnt, &c.sizes, c.engine)?;
        let place = match up.library() {
            Some((pool, _, _)) => pool.display().to_string(),
            None => c.mnt.display().to_string(),
        };
        return Ok(Running {
            layer,
            place,
            env: up.env()?,
            daemon: None,
            up: Some(up),
            file: None,
        });
    }
    let file = c.dir.join(format!(
        "pmkit-bench-layers-{}-{}",
        layer.name(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&file);
    let s = &c.sizes;
    let mut cmd = match wrap.split_first() {
        Some((w, rest)) => {
            let mut cmd = Command::new(w);
            cmd.args(rest).arg(&c.pmkit);
            cmd
        }
        None => Command::new(&c.pmkit),
    };
    let log = c.scratch.join(format!("{}.log", layer.name()));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?);
    let sock = c.scratch.join("nbd.sock");
    match layer {
        Layer::Served => {
            mkfs(c, &file)?;
            cmd.args(["fs", "serve", "--protect"])
                .arg(s.pmfs_protect.to_string())
                .arg(&file);
        }
        Layer::Fuse | Layer::Peer => {
            mkfs(c, &file)?;
            // /dev/fuse, not io_uring: valgrind runs the daemon for the instruction counts, and
            // it cannot follow io_uring (the mount hung under it).
            cmd.args([
                "fs",
                "mount",
                "--transport",
                "dev",
                "--cache",
                "long",
                "--threads",
            ])
            .arg(s.fuse_threads.to_string())
            .arg("--protect")
            .arg(s.pmfs_protect.to_string())
            .arg(&file)
            .arg(c.mnt);
        }
        Layer::Ext4Attach => {
            // /dev/fuse, not io_uring: valgrind runs the daemon for the instruction counts.
            cmd.arg("attach")
                .arg(&file)
                .arg("--size")
                .arg(s.bytes.to_string())
                .args(["--mkfs", "ext4", "--transport", "dev", "--threads"])
                .arg(s.fuse_threads.to_string())
                .arg("--mountpoint")
                .arg(c.mnt)
                .args(c.engine_args());
        }
        _ => {
            let _ = std::fs::remove_file(&sock);
            cmd.arg("serve")
                .arg(&file)
                .arg("--size")
                .arg(s.bytes.to_string())
                .arg("--socket")
                .arg(&sock)
                .args(c.engine_args());
        }
    }
    let mut child = cmd.spawn().with_context(|| format!("starting {:?}", cmd))?;
    // Under valgrind the daemon starts slowly.
    let limit = Duration::from_secs(if wrap.is_empty() { 60 } else { 300 });
    let ready = if layer == Layer::Nbd {
        crate::blk::nbd::wait_for_socket(&sock, &mut child, "pmkit serve")
    } else if layer == Layer::Served {
        wait_served(&file, &mut child, limit)
    } else {
        wait_mounted(c.mnt, &mut child, limit)
    };
    let mut r = Running {
        layer,
        place: if layer == Layer::Nbd {
            format!("nbd+unix:///?socket={}", sock.display())
        } else {
            c.mnt.display().to_string()
        },
        env: if matches!(layer, Layer::Served | Layer::Peer) {
            served_env(&file, c)?
        } else {
            vec![]
        },
        daemon: Some(child),
        up: None,
        file: Some(file),
    };
    if let Err(e) = ready {
        let why = stderr_of(&mut r, &log);
        let _ = down(r, c.mnt);
        return Err(e.context(why));
    }
    Ok(r)
}

fn mkfs(c: &Ctx, file: &Path) -> Result<()> {
    assert!(c.sizes.bytes > 0, "a pool of no bytes");
    sh(Command::new(&c.pmkit)
        .args(["fs", "mkfs", "--size"])
        .arg(c.sizes.bytes.to_string())
        .arg("--inodes")
        .arg(c.sizes.inodes.to_string())
        .arg(file))?;
    Ok(())
}

/// The shim's environment for a pool `pmkit fs serve` serves.
fn served_env(pool: &Path, c: &Ctx) -> Result<Vec<(String, String)>> {
    // The shim serves nothing under a relative prefix.
    assert!(
        c.mnt.is_absolute(),
        "prefix {} is relative",
        c.mnt.display()
    );
    Ok(vec![
        (
            "LD_PRELOAD".into(),
            targets::shim_path()?.display().to_string(),
        ),
        ("PMKIT_PRELOAD_POOL".into(), pool.display().to_string()),
        ("PMKIT_PRELOAD_PREFIX".into(), c.mnt.display().to_string()),
    ])
}

/// Wait until the server of `pool` listens (its abstract socket in /proc/net/unix) or `child`
/// exits.
fn wait_served(pool: &Path, child: &mut Child, limit: Duration) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(pool)?;
    let needle = format!("@pmkit-pool/{:x}/{:x}", m.dev(), m.ino());
    assert!(!limit.is_zero(), "a zero wait for the server");
    let t = Instant::now();
    while t.elapsed() < limit {
        if std::fs::read_to_string("/proc/net/unix")?.contains(&needle) {
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            bail!("pmkit fs serve exited before serving ({st})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("pmkit fs serve did not listen within {limit:?}")
}

impl Ctx<'_> {
    /// `pmkit attach`/`serve` engine flags from `--protect` etc. of the bench.
    fn engine_args(&self) -> Vec<String> {
        match self.engine.to_options().protect {
            Some(p) => vec!["--protect".into(), p.to_string()],
            None => vec![],
        }
    }
}

fn stderr_of(r: &mut Running, log: &Path) -> String {
    if let Some(d) = r.daemon.as_mut() {
        let _ = d.kill();
        let _ = d.wait();
    }
    let s = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = s.lines().rev().take(20).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    format!("the daemon said: {}", tail.join("\n"))
}

/// Wait until something is mounted on `mnt` (a line of /proc/self/mountinfo) or `child` exits.
fn wait_mounted(mnt: &Path, child: &mut Child, limit: Duration) -> Result<()> {
    let t = Instant::now();
    let needle = format!(" {} ", mnt.display());
    while t.elapsed() < limit {
        let m = std::fs::read_to_string("/proc/self/mountinfo")?;
        if m.lines().any(|l| l.contains(&needle)) {
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            bail!("the daemon exited before mounting {} ({st})", mnt.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("nothing mounted on {} within {limit:?}", mnt.display())
}

/// Tear down what [`up`] made: unmount, stop the daemon (and wait for it: under valgrind it
/// writes its counts as it exits), remove its files.
pub(super) fn down(r: Running, mnt: &Path) -> Result<()> {
    if let Some(up) = r.up {
        return targets::down(up, mnt);
    }
    let Some(mut d) = r.daemon else {
        return Ok(());
    };
    let res = (|| -> Result<()> {
        match r.layer {
            // Unmounted from outside, `pmkit fs mount` ends and marks the pool clean.
            Layer::Fuse => {
                sh(Command::new("umount").arg(mnt))?;
            }
            // `pmkit attach` and `pmkit serve` end cleanly on SIGTERM.
            _ => {
                // SAFETY: kill with a valid signal on our own child's pid.
                let rc = unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
                anyhow::ensure!(rc == 0, "kill: {}", std::io::Error::last_os_error());
            }
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(300) {
            if let Some(st) = d.try_wait()? {
                anyhow::ensure!(
                    st.success(),
                    "the {} daemon exited with {st}",
                    r.layer.name()
                );
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("the {} daemon did not exit within 300 s", r.layer.name())
    })();
    if res.is_err() {
        let _ = d.kill();
        let _ = d.wait();
        let _ = Command::new("umount").arg("-l").arg(mnt).status();
    }
    if let Some(f) = r.file {
        let _ = std::fs::remove_file(f);
    }
    res
}
