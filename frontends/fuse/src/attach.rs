//! `attach`/`detach`: FUSE mount -> loop device -> (mkfs) -> mount, each step undone in reverse
//! when a later one fails, and all of them undone by `detach` (or by the attaching process on
//! SIGINT/SIGTERM). A state file per attachment in [`STATE_DIR`] lets `pmkit detach` find it by
//! mountpoint or loop device, and clean up after an attaching process that was killed.

use crate::file::{Disk, DiskFile, DISK_NAME};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where attachments are recorded.
pub const STATE_DIR: &str = "/run/pmkit/attach";

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("step '{step}' failed: {why}")]
    Step { step: &'static str, why: String },
    #[error("{0}")]
    Precondition(String),
}

type Result<T> = std::result::Result<T, AttachError>;

fn step(step: &'static str, why: impl std::fmt::Display) -> AttachError {
    AttachError::Step {
        step,
        why: why.to_string(),
    }
}

/// File systems `attach --mkfs` can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mkfs {
    Ext4,
    Ext2,
    Xfs,
}

impl Mkfs {
    fn command(self) -> (&'static str, &'static [&'static str]) {
        match self {
            // Initialize inode tables and the journal now: on PM that is cheap, and it keeps a
            // background ext4lazyinit thread from writing behind the user's back after mount.
            Mkfs::Ext4 => (
                "mkfs.ext4",
                &["-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"],
            ),
            Mkfs::Ext2 => ("mkfs.ext2", &["-F", "-q", "-E", "lazy_itable_init=0"]),
            Mkfs::Xfs => ("mkfs.xfs", &["-f", "-q"]),
        }
    }
}

impl std::str::FromStr for Mkfs {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "ext4" => Ok(Mkfs::Ext4),
            "ext2" => Ok(Mkfs::Ext2),
            "xfs" => Ok(Mkfs::Xfs),
            _ => Err(format!("unsupported file system {s:?} (ext4, ext2, xfs)")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// The PM file (recorded so detach and "already attached" checks can name it).
    pub pm_path: PathBuf,
    pub mountpoint: Option<PathBuf>,
    pub mkfs: Option<Mkfs>,
    /// FUSE worker threads.
    pub threads: usize,
    /// Mount options for the file system (`-o`).
    pub mount_options: Option<String>,
}

/// What an attachment consists of; also its state file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttachState {
    /// Unique among attachments: the attaching process and a counter within it.
    pub id: String,
    pub pid: u32,
    pub pm_path: PathBuf,
    pub fuse_dir: PathBuf,
    pub loop_dev: Option<PathBuf>,
    pub mountpoint: Option<PathBuf>,
    pub direct_io: bool,
}

impl AttachState {
    fn state_file(&self) -> PathBuf {
        Path::new(STATE_DIR).join(format!("{}.json", self.id))
    }
    fn save(&self) -> Result<()> {
        std::fs::create_dir_all(STATE_DIR)
            .map_err(|e| step("record state", format!("{STATE_DIR}: {e}")))?;
        let tmp = self.state_file().with_extension("tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec_pretty(self).expect("state serializes"),
        )
        .and_then(|_| std::fs::rename(&tmp, self.state_file()))
        .map_err(|e| {
            step(
                "record state",
                format!("{}: {e}", self.state_file().display()),
            )
        })
    }
    /// Every recorded attachment.
    pub fn all() -> Vec<AttachState> {
        let Ok(dir) = std::fs::read_dir(STATE_DIR) else {
            return vec![];
        };
        dir.flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
            .collect()
    }
    /// Whether the attaching process is still alive.
    pub fn alive(&self) -> bool {
        // A zombie (exited, not yet reaped by its parent) has finished: field 3 of stat is 'Z'.
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z')),
            Err(_) => false,
        }
    }
}

/// Check what `attach` needs before touching anything.
pub fn preflight(opts: &AttachOptions) -> Result<()> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(AttachError::Precondition(
            "attach needs root (losetup and mount); run it with sudo".into(),
        ));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(AttachError::Precondition(
            "/dev/fuse is missing: load the fuse module (modprobe fuse) or give the container /dev/fuse".into(),
        ));
    }
    for tool in ["losetup", "mount", "umount"] {
        if which(tool).is_none() {
            return Err(AttachError::Precondition(format!(
                "{tool} not found: install util-linux/mount"
            )));
        }
    }
    if which("fusermount3").is_none() && which("fusermount").is_none() {
        return Err(AttachError::Precondition(
            "fusermount3 not found: install fuse3".into(),
        ));
    }
    if let Some(m) = opts.mkfs {
        let (tool, _) = m.command();
        if which(tool).is_none() {
            let pkg = if m == Mkfs::Xfs {
                "xfsprogs"
            } else {
                "e2fsprogs"
            };
            return Err(AttachError::Precondition(format!(
                "{tool} not found: install {pkg}"
            )));
        }
    }
    if let Some(mp) = &opts.mountpoint {
        if !mp.is_dir() {
            return Err(AttachError::Precondition(format!(
                "mountpoint {} is missing or not a directory",
                mp.display()
            )));
        }
        if is_mountpoint(mp) {
            return Err(AttachError::Precondition(format!(
                "mountpoint {} is busy: something is already mounted there",
                mp.display()
            )));
        }
    }
    let canon = std::fs::canonicalize(&opts.pm_path).unwrap_or(opts.pm_path.clone());
    if let Some(other) = AttachState::all()
        .into_iter()
        .find(|s| s.pm_path == canon && s.alive())
    {
        return Err(AttachError::Precondition(format!(
            "{} is already attached by pmkit process {} (loop {}); detach it first",
            canon.display(),
            other.pid,
            other
                .loop_dev
                .as_deref()
                .map_or("-".into(), |p| p.display().to_string())
        )));
    }
    Ok(())
}

/// A live attachment. Dropping it without [`Attachment::detach`] leaves the mounts in place.
pub struct Attachment {
    pub state: AttachState,
    session: Option<fuser::BackgroundSession>,
}

/// Run every step of `attach`. On failure, the steps already taken are undone.
pub fn attach<D: Disk>(disk: D, opts: &AttachOptions) -> Result<Attachment> {
    preflight(opts)?;
    let block_size = disk.block_size();
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let pid = std::process::id();
    let id = format!(
        "{pid}-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let fuse_dir = Path::new("/run/pmkit/fuse").join(&id);
    std::fs::create_dir_all(&fuse_dir).map_err(|e| {
        step(
            "create FUSE mountpoint",
            format!("{}: {e}", fuse_dir.display()),
        )
    })?;
    let pm_path = std::fs::canonicalize(&opts.pm_path).unwrap_or(opts.pm_path.clone());
    let mut a = Attachment {
        state: AttachState {
            id,
            pid,
            pm_path,
            fuse_dir: fuse_dir.clone(),
            loop_dev: None,
            mountpoint: None,
            direct_io: false,
        },
        session: None,
    };
    let r = (|| {
        let mut cfg = fuser::Config::default();
        cfg.mount_options = vec![
            fuser::MountOption::FSName("pmkit".into()),
            fuser::MountOption::Subtype("pmkit".into()),
            fuser::MountOption::NoExec,
            fuser::MountOption::NoSuid,
            fuser::MountOption::NoDev,
        ];
        cfg.n_threads = Some(opts.threads.clamp(1, 64));
        cfg.clone_fd = true;
        a.session = Some(
            fuser::spawn_mount(DiskFile::new(disk), &fuse_dir, &cfg)
                .map_err(|e| step("mount FUSE", format!("{}: {e}", fuse_dir.display())))?,
        );
        a.state.save()?;
        let file = fuse_dir.join(DISK_NAME);
        let (dev, dio) = losetup(&file, block_size)?;
        a.state.loop_dev = Some(dev.clone());
        a.state.direct_io = dio;
        a.state.save()?;
        if let Some(fs) = opts.mkfs {
            let (tool, args) = fs.command();
            run(Command::new(tool).args(args).arg(&dev)).map_err(|e| step("mkfs", e))?;
        }
        if let Some(mp) = &opts.mountpoint {
            let mut c = Command::new("mount");
            if let Some(o) = &opts.mount_options {
                c.arg("-o").arg(o);
            }
            run(c.arg(&dev).arg(mp)).map_err(|e| step("mount", e))?;
            a.state.mountpoint = Some(std::fs::canonicalize(mp).unwrap_or(mp.clone()));
            a.state.save()?;
        }
        Ok(())
    })();
    match r {
        Ok(()) => Ok(a),
        Err(e) => {
            let _ = a.detach();
            Err(e)
        }
    }
}

impl Attachment {
    /// Undo every step, newest first: unmount, remove the loop device, unmount FUSE (which ends
    /// the FUSE session; the caller then closes the device cleanly).
    pub fn detach(&mut self) -> Result<()> {
        teardown(&self.state, false)?;
        if let Some(s) = self.session.take() {
            // The FUSE mount is gone; the session thread ends on its own.
            let _ = s.join();
        }
        let _ = std::fs::remove_file(self.state.state_file());
        Ok(())
    }
}

/// Unmount, detach the loop device, unmount FUSE. With `stale` (the attaching process died),
/// unmounts are lazy because I/O to the dead FUSE file fails.
pub fn teardown(s: &AttachState, stale: bool) -> Result<()> {
    if let Some(mp) = &s.mountpoint {
        if is_mountpoint(mp) {
            let mut c = Command::new("umount");
            if stale {
                c.arg("-l");
            }
            run(c.arg(mp)).map_err(|e| step("unmount file system", e))?;
        }
    }
    if let Some(dev) = &s.loop_dev {
        if loop_backing(dev).is_some_and(|b| b.starts_with(&s.fuse_dir)) {
            run(Command::new("losetup").arg("-d").arg(dev))
                .map_err(|e| step("remove loop device", e))?;
        }
    }
    if is_mountpoint(&s.fuse_dir) {
        let tool = if which("fusermount3").is_some() {
            "fusermount3"
        } else {
            "fusermount"
        };
        let flag = if stale { "-uz" } else { "-u" };
        // The loop device lets go of the file asynchronously: retry "busy" for a moment.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match run(Command::new(tool).arg(flag).arg(&s.fuse_dir)) {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline && e.contains("busy") => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => return Err(step("unmount FUSE", e)),
            }
        }
    }
    let _ = std::fs::remove_dir(&s.fuse_dir);
    if stale {
        let _ = std::fs::remove_file(s.state_file());
    }
    Ok(())
}

/// Find the attachment for a mountpoint or loop device.
pub fn find(target: &Path) -> Option<AttachState> {
    let canon = std::fs::canonicalize(target).unwrap_or(target.to_path_buf());
    AttachState::all().into_iter().find(|s| {
        s.mountpoint.as_deref() == Some(canon.as_path())
            || s.loop_dev.as_deref() == Some(canon.as_path())
            || s.pm_path == canon
    })
}

/// `losetup --find --show`, with direct I/O where the kernel allows it.
fn losetup(file: &Path, block_size: u32) -> Result<(PathBuf, bool)> {
    let bs = block_size.to_string();
    let attempt = |dio: bool| {
        let mut c = Command::new("losetup");
        c.args(["--find", "--show", "--sector-size", &bs]);
        if dio {
            c.arg("--direct-io=on");
        }
        run(c.arg(file))
    };
    let out = attempt(true).map_err(|e| step("losetup", e))?;
    let dev = PathBuf::from(out.trim());
    // losetup may accept --direct-io=on and still run buffered; sysfs says what is in force.
    let name = dev
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let dio = std::fs::read_to_string(format!("/sys/block/{name}/loop/dio"))
        .is_ok_and(|s| s.trim() == "1");
    Ok((dev, dio))
}

fn loop_backing(dev: &Path) -> Option<PathBuf> {
    let name = dev.file_name()?.to_string_lossy().to_string();
    let s = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).ok()?;
    Some(PathBuf::from(s.trim()))
}

/// Whether `p` is a mountpoint (per /proc/self/mountinfo).
pub fn is_mountpoint(p: &Path) -> bool {
    let canon = std::fs::canonicalize(p).unwrap_or(p.to_path_buf());
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|m| Path::new(&unescape(m)) == canon)
    })
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Run a command; `Ok(stdout)` or `Err("tool args: stderr")`.
fn run(c: &mut Command) -> std::result::Result<String, String> {
    let what = format!(
        "{} {}",
        c.get_program().to_string_lossy(),
        c.get_args()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let out = c.output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}
