//! `attach`/`detach`: FUSE mount -> loop device -> (mkfs) -> mount, each step undone in reverse
//! when a later one fails, and all of them undone by `detach` (or by the attaching process on
//! SIGINT/SIGTERM). The other route, the kernel's NBD client (`Route::Nbd`), brings its own
//! block device (`pmkit_nbd::kernel`) and shares the rest: the state file, mkfs, mount, and the
//! unmount and busy checks of detach ([`Attachment::adopt`]). A state file per attachment in [`STATE_DIR`] lets `pmkit detach` find it by
//! mountpoint or loop device, and clean up after an attaching process that was killed.
//!
//! Detaching never forces anything: a busy file system (a process's working directory, open
//! file or mapping under the mountpoint) or a busy loop device stops [`Attachment::detach`] with
//! [`Detached::Busy`], naming the holders, and the device keeps being served. Only
//! [`Attachment::detach_lazy`] unmounts lazily; it then keeps serving until the file system has
//! released the loop device (see there).

use crate::file::{Core, Disk, DiskFile, DISK_NAME};
use crate::holders;
use crate::uring;
mod state;
use serde::{Deserialize, Serialize};
pub use state::AttachState;
use std::os::fd::AsFd;
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

pub(crate) type Result<T> = std::result::Result<T, AttachError>;

pub(crate) fn step(step: &'static str, why: impl std::fmt::Display) -> AttachError {
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

pub use crate::uring::Transport;

#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// The PM file (recorded so detach and "already attached" checks can name it).
    pub pm_path: PathBuf,
    pub mountpoint: Option<PathBuf>,
    pub mkfs: Option<Mkfs>,
    /// FUSE worker threads, each on its own cloned /dev/fuse descriptor; 0: one per CPU.
    pub threads: usize,
    /// Mount options for the file system (`-o`).
    pub mount_options: Option<String>,
    pub transport: Transport,
    /// How the device reaches the kernel.
    pub route: Route,
}

/// How an attachment gives the device to the kernel as a block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Route {
    /// A loop device over a file served by FUSE.
    #[default]
    Fuse,
    /// The kernel's NBD client, served by the attaching process over socket pairs.
    Nbd,
    /// The kernel's ublk driver (`/dev/ublkbN`), served by the attaching process over io_uring.
    Ublk,
}

/// Check what `attach` needs before touching anything.
pub fn preflight(opts: &AttachOptions) -> Result<()> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(AttachError::Precondition(
            "attach needs root (losetup and mount); run it with sudo".into(),
        ));
    }
    if opts.route == Route::Fuse && !Path::new("/dev/fuse").exists() {
        return Err(AttachError::Precondition(
            "/dev/fuse is missing: load the fuse module (modprobe fuse) or give the container /dev/fuse".into(),
        ));
    }
    let tools: &[&str] = match opts.route {
        Route::Fuse => &["losetup", "mount", "umount"],
        Route::Nbd | Route::Ublk => &["mount", "umount"],
    };
    for tool in tools {
        if which(tool).is_none() {
            return Err(AttachError::Precondition(format!(
                "{tool} not found: install util-linux/mount"
            )));
        }
    }
    if opts.route == Route::Fuse && which("fusermount3").is_none() && which("fusermount").is_none()
    {
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
            let canon = std::fs::canonicalize(mp).unwrap_or(mp.clone());
            let owner = AttachState::all()
                .into_iter()
                .find(|s| s.mountpoint.as_deref() == Some(canon.as_path()));
            return Err(AttachError::Precondition(match owner {
                Some(s) if s.alive() => format!(
                    "mountpoint {} is busy: pmkit process {} has {} attached there; `pmkit detach {}` detaches it",
                    mp.display(),
                    s.pid,
                    s.pm_path.display(),
                    canon.display()
                ),
                Some(s) => format!(
                    "mountpoint {} is busy: a stale pmkit attachment of {} is still mounted there \
                     (process {} died without detaching); `pmkit detach {}` clears it",
                    mp.display(),
                    s.pm_path.display(),
                    s.pid,
                    canon.display()
                ),
                None => format!(
                    "mountpoint {} is busy: something is already mounted there",
                    mp.display()
                ),
            }));
        }
    }
    let canon = std::fs::canonicalize(&opts.pm_path).unwrap_or(opts.pm_path.clone());
    for s in AttachState::all()
        .into_iter()
        .filter(|s| s.pm_path == canon)
    {
        if s.alive() {
            continue;
        }
        if !s.leftovers() {
            // Nothing of it is left (cleaned by hand): forget it.
            let _ = std::fs::remove_file(s.state_file());
            continue;
        }
        return Err(AttachError::Precondition(format!(
            "{} is still held by a stale attachment (process {} died without detaching; {}{}); \
             clear it with `pmkit detach {}` first",
            canon.display(),
            s.pid,
            s.mountpoint
                .as_deref()
                .map_or(String::new(), |m| format!("mounted on {}, ", m.display())),
            s.loop_dev
                .as_deref()
                .map_or("no block device".into(), |l| format!(
                    "block device {}",
                    l.display()
                )),
            s.target()
        )));
    }
    if let Some(other) = AttachState::all()
        .into_iter()
        .find(|s| s.pm_path == canon && s.alive())
    {
        return Err(AttachError::Precondition(format!(
            "{} is already attached by pmkit process {} (block device {}); detach it first",
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
    session: Option<crate::dev::Workers>,
    uring: Option<uring::Queues>,
}

/// Run every step of `attach`. On failure, the steps already taken are undone.
pub fn attach<D: Disk>(disk: D, opts: &AttachOptions) -> Result<Attachment> {
    assert_eq!(opts.route, Route::Fuse, "attach() is the FUSE route");
    preflight(opts)?;
    let block_size = disk.block_size();
    let state = AttachState::new(&opts.pm_path);
    let fuse_dir = state.fuse_dir.clone();
    std::fs::create_dir_all(&fuse_dir).map_err(|e| {
        step(
            "create FUSE mountpoint",
            format!("{}: {e}", fuse_dir.display()),
        )
    })?;
    let mut a = Attachment::adopt(state);
    let r = (|| {
        let mut cfg = fuser::Config::default();
        cfg.mount_options = vec![
            fuser::MountOption::FSName("pmkit".into()),
            fuser::MountOption::Subtype("pmkit".into()),
            fuser::MountOption::NoExec,
            fuser::MountOption::NoSuid,
            fuser::MountOption::NoDev,
        ];
        let want_uring = match opts.transport {
            Transport::Dev => false,
            Transport::Uring => true,
            Transport::Auto => uring::enabled(),
        };
        let (fs, granted) = DiskFile::new(std::sync::Arc::new(Core::new(disk)), want_uring);
        let core = std::sync::Arc::clone(fs.ops());
        let core_ops = std::sync::Arc::clone(&core);
        // Session::new mounts and completes INIT, which says whether io_uring was granted;
        // the queues register before the /dev/fuse workers start (`dev::Workers`).
        let session = fuser::Session::new(fs, &fuse_dir, &cfg)
            .map_err(|e| step("mount FUSE", format!("{}: {e}", fuse_dir.display())))?;
        let mut transport = Transport::Dev;
        if granted.load(std::sync::atomic::Ordering::Acquire) {
            match uring::start(session.as_fd(), core) {
                Ok(q) => {
                    a.uring = Some(q);
                    transport = Transport::Uring;
                }
                Err(e) if opts.transport == Transport::Uring => {
                    return Err(step("start FUSE io_uring queues", e));
                }
                Err(e) => tracing::warn!("{e}; serving /dev/fuse instead"),
            }
        } else if opts.transport == Transport::Uring {
            return Err(AttachError::Precondition(
                "the kernel does not offer FUSE over io_uring (needs CONFIG_FUSE_IO_URING and \
                 `echo Y > /sys/module/fuse/parameters/enable_uring`); use --transport dev or auto"
                    .into(),
            ));
        }
        a.state.transport = Some(transport);
        let n = workers(opts.threads);
        a.session = Some(
            crate::dev::Workers::start(session, core_ops, n)
                .map_err(|e| step("mount FUSE", format!("{}: {e}", fuse_dir.display())))?,
        );
        a.state.save()?;
        let file = fuse_dir.join(DISK_NAME);
        let (dev, dio) = losetup(&file, block_size)?;
        a.state.loop_dev = Some(dev.clone());
        a.state.direct_io = dio;
        a.state.save()?;
        a.make_and_mount(opts)
    })();
    match r {
        Ok(()) => Ok(a),
        Err(e) => {
            // A failed attach has no users yet: nothing of it can be busy.
            let _ = a.detach();
            Err(e)
        }
    }
}

/// Most FUSE worker threads (each holds a request buffer of a little over 1 MiB).
pub const MAX_WORKERS: usize = crate::dev::MAX_WORKERS;

/// FUSE worker threads for `threads` (0: one per CPU, so every CPU can serve a request while
/// the others are busy, with no worker sharing a descriptor or a lock with another).
pub fn workers(threads: usize) -> usize {
    let n = if threads == 0 {
        std::thread::available_parallelism().map_or(2, |n| n.get())
    } else {
        threads
    };
    n.clamp(1, MAX_WORKERS)
}

/// What a detach attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detached {
    /// Every step undone; the FUSE session has ended and the device may be closed.
    Done,
    /// Something still uses the file system or the loop device (the message names it); the
    /// steps before it may have been undone, the FUSE file is still served.
    Busy(String),
}

impl Attachment {
    /// An attachment of `state`'s block device brought by another route (no FUSE session of
    /// its own): [`Attachment::detach`] unmounts and checks the device is unused; the caller
    /// then takes the device away.
    pub fn adopt(state: AttachState) -> Attachment {
        Attachment {
            state,
            session: None,
            uring: None,
        }
    }

    /// The steps once the block device (`state.loop_dev`) exists: mkfs and mount, as asked,
    /// each recorded in the state file.
    pub fn make_and_mount(&mut self, opts: &AttachOptions) -> Result<()> {
        let dev = self
            .state
            .loop_dev
            .clone()
            .expect("the block device exists before mkfs and mount");
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
            self.state.mountpoint = Some(std::fs::canonicalize(mp).unwrap_or(mp.clone()));
            self.state.save()?;
        }
        Ok(())
    }

    /// Undo every step, newest first: unmount, remove the loop device, unmount FUSE (which ends
    /// the FUSE session; the caller then closes the device cleanly). Nothing is forced: a busy
    /// file system or loop device gives [`Detached::Busy`] and the device stays served.
    pub fn detach(&mut self) -> Result<Detached> {
        let s = &self.state;
        if let Some(mp) = s.mountpoint.as_deref().filter(|m| is_mountpoint(m)) {
            if let Err(e) = run(Command::new("umount").arg(mp)) {
                if !e.contains("busy") {
                    return Err(step("unmount file system", e));
                }
                return Ok(Detached::Busy(format!(
                    "{} is busy (held by {})",
                    mp.display(),
                    holders::describe(&holders::of_mount(mp))
                )));
            }
        }
        if let Some(dev) = s.loop_dev.as_deref().filter(|d| s.owns_loop(d)) {
            // Tools open loop devices for a moment (losetup --find, blkid, udev): give a
            // short-lived opener time to go before calling the device busy.
            let deadline = Instant::now() + Duration::from_secs(3);
            while let Some(why) = loop_in_use(dev) {
                if Instant::now() >= deadline {
                    return Ok(Detached::Busy(why));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            run(Command::new("losetup").arg("-d").arg(dev))
                .map_err(|e| step("remove loop device", e))?;
        }
        if let (Some(dev), true) = (s.loop_dev.as_deref(), s.kernel_route()) {
            // The caller disconnects the device next: nothing may hold it then.
            let deadline = Instant::now() + Duration::from_secs(3);
            while let Some(why) = loop_in_use(dev) {
                if Instant::now() >= deadline {
                    return Ok(Detached::Busy(why));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if let Some(why) = unmount_fuse(&s.fuse_dir, false)? {
            return Ok(Detached::Busy(why));
        }
        self.finish();
        Ok(Detached::Done)
    }

    /// Detach lazily: `umount -l` the file system (it leaves the namespace at once, and lives
    /// on until its last user leaves), then `losetup -d`, which for a loop device still held
    /// by that file system only sets autoclear: the kernel detaches the loop device when the
    /// file system releases it, and only then lets go of the FUSE file. This waits (without a
    /// time limit, serving the FUSE file meanwhile) until the loop device's backing file is no
    /// longer ours, then unmounts FUSE. `started` is called once the lazy unmount is done,
    /// with a line naming who still holds the file system.
    pub fn detach_lazy(&mut self, started: impl FnOnce(&str)) -> Result<()> {
        let s = &self.state;
        let mut note = String::new();
        if let Some(mp) = s.mountpoint.as_deref().filter(|m| is_mountpoint(m)) {
            let held = holders::of_mount(mp);
            run(Command::new("umount").arg("-l").arg(mp))
                .map_err(|e| step("unmount file system lazily", e))?;
            note = if held.is_empty() {
                format!("{} unmounted lazily; no process held it", mp.display())
            } else {
                format!(
                    "{} unmounted lazily; the file system lives on until these leave it: {}",
                    mp.display(),
                    holders::describe(&held)
                )
            };
        }
        if let Some(dev) = s.loop_dev.as_deref().filter(|d| s.owns_loop(d)) {
            run(Command::new("losetup").arg("-d").arg(dev))
                .map_err(|e| step("remove loop device", e))?;
            started(&format!(
                "{note}{}the device stays served until {} is released, then detaches",
                if note.is_empty() { "" } else { "; " },
                dev.display()
            ));
            while s.owns_loop(dev) {
                std::thread::sleep(Duration::from_millis(100));
            }
        } else if let (Some(dev), true) = (s.loop_dev.as_deref(), s.kernel_route()) {
            // The NBD and ublk routes: the caller disconnects once the file system has let go.
            started(&format!(
                "{note}{}the device stays served until {} is released, then detaches",
                if note.is_empty() { "" } else { "; " },
                dev.display()
            ));
            while holders::claimed(dev) {
                std::thread::sleep(Duration::from_millis(100));
            }
        } else {
            started(&note);
        }
        if let Some(why) = unmount_fuse(&s.fuse_dir, false)? {
            return Err(step("unmount FUSE", why));
        }
        self.finish();
        Ok(())
    }

    fn finish(&mut self) {
        if let Some(s) = self.session.take() {
            // The FUSE mount is gone; the session thread ends on its own.
            let _ = s.join();
        }
        if let Some(q) = self.uring.take() {
            // The kernel ends the queues' commands when the connection goes; if one lingers,
            // its thread holds nothing that detaching needs.
            if !q.join(Duration::from_secs(5)) {
                tracing::warn!("a FUSE io_uring queue did not end with the connection");
            }
        }
        if !self.state.kernel_route() {
            let _ = std::fs::remove_dir(&self.state.fuse_dir);
        }
        self.state.forget();
    }
}

/// Why the loop device `dev` cannot be removed now, if it cannot: a file system (or another
/// exclusive user) has claimed it, or a process has it open. (`losetup -d` would "succeed" on
/// a busy loop device by only setting autoclear.)
fn loop_in_use(dev: &Path) -> Option<String> {
    if holders::claimed(dev) {
        let at = holders::mounts_of(dev);
        return Some(if at.is_empty() {
            format!(
                "{} is in use by a file system (lazily unmounted or in another mount namespace) \
                 or another exclusive user",
                dev.display()
            )
        } else {
            format!(
                "{} is mounted on {} (umount it first)",
                dev.display(),
                at.join(", ")
            )
        });
    }
    let h = holders::of_device(dev);
    (!h.is_empty()).then(|| format!("{} is open (by {})", dev.display(), holders::describe(&h)))
}

/// `fusermount -u` (`-uz` when `lazy`), retrying "busy" for a while: the loop driver lets go of
/// the FUSE file asynchronously. `Ok(Some(why))` when it stayed busy.
fn unmount_fuse(dir: &Path, lazy: bool) -> Result<Option<String>> {
    if !is_mountpoint(dir) {
        return Ok(None);
    }
    let tool = if which("fusermount3").is_some() {
        "fusermount3"
    } else {
        "fusermount"
    };
    let flag = if lazy { "-uz" } else { "-u" };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match run(Command::new(tool).arg(flag).arg(dir)) {
            Ok(_) => return Ok(None),
            Err(e) if e.contains("busy") => {
                if Instant::now() >= deadline {
                    return Ok(Some(format!(
                        "the FUSE file in {} is still in use (by {})",
                        dir.display(),
                        holders::describe(&holders::of_mount(dir))
                    )));
                }
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => return Err(step("unmount FUSE", e)),
        }
    }
}

/// Clean up after an attaching process that died (kill -9, crash): unmount lazily (I/O to the
/// dead FUSE file fails, so nothing could be flushed anyway), detach the loop device, unmount
/// the dead FUSE mount, forget the attachment.
pub fn teardown_stale(s: &AttachState) -> Result<()> {
    if let Some(mp) = s.mountpoint.as_deref().filter(|m| is_mountpoint(m)) {
        run(Command::new("umount").arg("-l").arg(mp))
            .map_err(|e| step("unmount file system", e))?;
    }
    if let Some(dev) = s.loop_dev.as_deref().filter(|d| s.owns_loop(d)) {
        run(Command::new("losetup").arg("-d").arg(dev))
            .map_err(|e| step("remove loop device", e))?;
    }
    if s.kernel_route() {
        // The caller disconnects the NBD or ublk device, then forgets the attachment.
        return Ok(());
    }
    if let Some(why) = unmount_fuse(&s.fuse_dir, true)? {
        return Err(step("unmount FUSE", why));
    }
    let _ = std::fs::remove_dir(&s.fuse_dir);
    s.forget();
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

pub(crate) fn loop_backing(dev: &Path) -> Option<PathBuf> {
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
