//! An attachment's record: what it consists of (the PM file, the FUSE directory, the loop or
//! kernel device, the mountpoint), kept as a state file in [`STATE_DIR`] so `pmkit detach` finds
//! it and can clean up after an attaching process that died.

use super::{is_mountpoint, loop_backing, step, Result, Transport, STATE_DIR};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
    /// The transport in use: `dev` or `uring` (absent in state files of older versions).
    #[serde(default)]
    pub transport: Option<Transport>,
    /// On the NBD route: the `/dev/nbdN` the attaching process serves (then `loop_dev` is that
    /// device and `fuse_dir` is unused).
    #[serde(default)]
    pub nbd_index: Option<u32>,
    /// On the ublk route: the device number N of `/dev/ublkbN` (then `loop_dev` is that device
    /// and `fuse_dir` is unused).
    #[serde(default)]
    pub ublk_id: Option<u32>,
}

impl AttachState {
    pub(crate) fn state_file(&self) -> PathBuf {
        Path::new(STATE_DIR).join(format!("{}.json", self.id))
    }
    /// Where the attaching process answers a detach request it did not (fully) carry out.
    pub fn reply_file(&self) -> PathBuf {
        Path::new(STATE_DIR).join(format!("{}.reply", self.id))
    }
    /// Record the answer to a detach request for `pmkit detach` (`ok`: done as asked, e.g. a
    /// lazy unmount; not `ok`: refused, nothing forced).
    pub fn reply(&self, ok: bool, msg: &str) {
        let tmp = self.reply_file().with_extension("reply.tmp");
        let body = serde_json::json!({ "ok": ok, "msg": msg }).to_string();
        let _ = std::fs::write(&tmp, body).and_then(|_| std::fs::rename(&tmp, self.reply_file()));
    }
    /// Read (and consume) the answer recorded by [`AttachState::reply`].
    pub fn take_reply(&self) -> Option<(bool, String)> {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.reply_file()).ok()?).ok()?;
        let _ = std::fs::remove_file(self.reply_file());
        Some((v["ok"].as_bool()?, v["msg"].as_str()?.to_string()))
    }
    /// Whether anything of this attachment is still in place (file system mounted, our loop
    /// device, FUSE mount).
    pub fn leftovers(&self) -> bool {
        self.mountpoint.as_deref().is_some_and(is_mountpoint)
            || self.loop_dev.as_deref().is_some_and(|d| self.owns_loop(d))
            || is_mountpoint(&self.fuse_dir)
            // A connected NBD device keeps its sysfs `pid` until it is disconnected, also when
            // its server died.
            || self
                .nbd_index
                .is_some_and(|i| Path::new(&format!("/sys/block/nbd{i}/pid")).exists())
            // A ublk device stays registered until it is deleted, also when its server died.
            || self
                .ublk_id
                .is_some_and(|i| Path::new(&format!("/sys/class/ublk-char/ublkc{i}")).exists())
    }
    /// Whether the kernel's own block driver (NBD or ublk) serves the device: then there is no
    /// FUSE file and no loop device of ours.
    pub fn kernel_route(&self) -> bool {
        self.nbd_index.is_some() || self.ublk_id.is_some()
    }
    pub(crate) fn owns_loop(&self, dev: &Path) -> bool {
        loop_backing(dev).is_some_and(|b| b.starts_with(&self.fuse_dir))
    }
    /// How to name this attachment to `pmkit detach`.
    pub fn target(&self) -> String {
        self.mountpoint
            .as_deref()
            .or(self.loop_dev.as_deref())
            .unwrap_or(&self.pm_path)
            .display()
            .to_string()
    }
    /// Write the state file (atomically: a reader sees the old one or this one).
    pub fn save(&self) -> Result<()> {
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
    /// Remove the state file and any reply.
    pub fn forget(&self) {
        let _ = std::fs::remove_file(self.state_file());
        let _ = std::fs::remove_file(self.reply_file());
    }
    /// A new attachment's state, before any step: this process, a fresh id.
    pub fn new(pm_path: &Path) -> AttachState {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let pid = std::process::id();
        let id = format!(
            "{pid}-{}",
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        AttachState {
            fuse_dir: Path::new("/run/pmkit/fuse").join(&id),
            id,
            pid,
            pm_path: std::fs::canonicalize(pm_path).unwrap_or(pm_path.to_path_buf()),
            loop_dev: None,
            mountpoint: None,
            direct_io: false,
            transport: None,
            nbd_index: None,
            ublk_id: None,
        }
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
