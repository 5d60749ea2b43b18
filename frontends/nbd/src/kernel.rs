//! The kernel's NBD client driven from this process: a `/dev/nbdN` served over socket pairs
//! handed to the driver through its netlink interface (as `nbd-client` and `qemu-nbd --connect`
//! do), with no handshake and no TCP. Each pair is one of the driver's connections (a hardware
//! queue): the kernel writes requests into its end, a thread here serves the other end in the
//! transmission phase with simple replies, as the driver expects.

use crate::backend::BlockBackend;
use crate::config::{Export, DEFAULT_POLL};
use crate::conn::serve_inline;
use crate::genl::{parse, Attrs, Genl};
use crate::handshake::Session;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const FAMILY: &str = "nbd";
const VERSION: u8 = 1;
const CMD_CONNECT: u8 = 1;
const CMD_DISCONNECT: u8 = 2;
const ATTR_INDEX: u16 = 1;
const ATTR_SIZE_BYTES: u16 = 2;
const ATTR_BLOCK_SIZE_BYTES: u16 = 3;
const ATTR_TIMEOUT: u16 = 4;
const ATTR_SERVER_FLAGS: u16 = 5;
const ATTR_SOCKETS: u16 = 7;
const SOCK_ITEM: u16 = 1;
const SOCK_FD: u16 = 1;
/// Most connections (the driver makes a hardware queue of each).
pub const MAX_CONNECTIONS: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(
        "the kernel's NBD driver is not available ({0}): load it with `modprobe nbd` (package \
         linux-image-*: CONFIG_BLK_DEV_NBD)"
    )]
    NoDriver(io::Error),
    #[error("the NBD driver refused to connect: {0}")]
    Connect(io::Error),
    #[error("the NBD driver refused to disconnect /dev/nbd{index}: {source}")]
    Disconnect { index: u32, source: io::Error },
    #[error("socket pair: {0}")]
    Socket(io::Error),
}

/// Whether this kernel has the NBD driver loaded (its netlink family exists).
pub fn available() -> bool {
    Genl::open(FAMILY).is_ok()
}

/// A `/dev/nbdN` connected to this process.
pub struct KernelDevice {
    pub index: u32,
    threads: Vec<JoinHandle<()>>,
}

impl KernelDevice {
    /// Connect `/dev/nbd{index}` (`None`: a free one the driver picks, or makes) to `backend`
    /// over `connections` socket pairs, each served by its own thread, with logical blocks of
    /// `block_size` bytes. `timeout`: how long the driver waits for an answer before it fails
    /// the request (`None`: forever; a server that dies fails them at once, its sockets
    /// closing). A device in use answers [`KernelError::Connect`] with EBUSY.
    pub fn connect<B: BlockBackend + 'static>(
        backend: Arc<B>,
        export: Export,
        connections: usize,
        block_size: u32,
        timeout: Option<Duration>,
        index: Option<u32>,
    ) -> Result<KernelDevice, KernelError> {
        assert!(block_size.is_power_of_two() && (512..=65536).contains(&block_size));
        let n = connections.clamp(1, MAX_CONNECTIONS);
        let mut nl = Genl::open(FAMILY).map_err(KernelError::NoDriver)?;
        let mut kernel_ends = Vec::with_capacity(n);
        let mut ours = Vec::with_capacity(n);
        for _ in 0..n {
            let (k, o) = UnixStream::pair().map_err(KernelError::Socket)?;
            // A 1 MiB write in one go rather than in the default buffer's ~200 KiB pieces,
            // each a wake-up of this side (best effort: only root may pass `wmem_max`).
            set_sndbuf(&k, SOCKET_BUF);
            set_sndbuf(&o, SOCKET_BUF);
            kernel_ends.push(k);
            ours.push(o);
        }
        let flags = export.transmission_flags(false);
        let mut socks = Attrs::default();
        for k in &kernel_ends {
            let mut item = Attrs::default();
            item.u32(SOCK_FD, k.as_raw_fd() as u32);
            socks.nested(SOCK_ITEM, &item);
        }
        let mut a = Attrs::default();
        a.u64(ATTR_SIZE_BYTES, export.size)
            .u64(ATTR_BLOCK_SIZE_BYTES, block_size as u64)
            .u64(ATTR_SERVER_FLAGS, flags as u64)
            .nested(ATTR_SOCKETS, &socks);
        if let Some(t) = timeout {
            a.u64(ATTR_TIMEOUT, t.as_secs().max(1));
        }
        if let Some(i) = index {
            a.u32(ATTR_INDEX, i);
        }
        // The serving threads start first: the driver may read the partition table (a READ)
        // before CONNECT returns.
        let export = Arc::new(export);
        let threads = ours
            .into_iter()
            .enumerate()
            .map(|(i, s)| serve_pair(i, s, backend.clone(), export.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(KernelError::Socket)?;
        let answer = nl
            .request(CMD_CONNECT, VERSION, &a)
            .map_err(KernelError::Connect)?;
        // The driver holds its own references to the sockets now.
        drop(kernel_ends);
        let index = answer
            .iter()
            .flat_map(|m| parse(m))
            .find(|(t, p)| *t == ATTR_INDEX && p.len() == 4)
            .map(|(_, p)| u32::from_ne_bytes(p.try_into().unwrap()))
            .ok_or_else(|| KernelError::Connect(io::Error::other("no device index answered")))?;
        Ok(KernelDevice { index, threads })
    }

    /// The driver's connections (each a hardware queue), each served by one thread.
    pub fn connections(&self) -> usize {
        self.threads.len()
    }

    pub fn path(&self) -> PathBuf {
        device_path(self.index)
    }

    /// Disconnect the device (the driver sends NBD_CMD_DISC and closes its ends) and wait for
    /// the serving threads to finish what they were given.
    pub fn disconnect(self) -> Result<(), KernelError> {
        disconnect(self.index)?;
        for t in self.threads {
            let _ = t.join();
        }
        Ok(())
    }
}

/// Send buffer of each end of a connection: a largest request (the driver's are at most a few
/// MiB) and its header.
const SOCKET_BUF: usize = 4 << 20;

/// `SO_SNDBUFFORCE` (root), else `SO_SNDBUF` (capped by `net.core.wmem_max`); failures are
/// ignored: the default buffer works, in more pieces.
fn set_sndbuf(s: &UnixStream, bytes: usize) {
    let v = bytes as libc::c_int;
    for opt in [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF] {
        // SAFETY: setsockopt on an open socket with a pointer to a live c_int and its size.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return;
        }
    }
}

/// Serve our end `s` of connection `i` in a thread of its own, in the transmission phase with
/// simple replies (what the driver speaks), until the driver sends DISC or closes its end.
fn serve_pair<B: BlockBackend + 'static>(
    i: usize,
    mut s: UnixStream,
    backend: Arc<B>,
    export: Arc<Export>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("nbd-kernel-{i}"))
        .spawn(move || {
            let session = Session {
                structured: false,
                base_allocation: false,
                flags: export.transmission_flags(false),
            };
            let stop = AtomicBool::new(false);
            let (stats, r) = serve_inline(&mut s, &*backend, &export, session, &stop, DEFAULT_POLL);
            tracing::debug!(conn = i, ?stats, ended = ?r, "nbd kernel connection ended");
        })
}

pub fn device_path(index: u32) -> PathBuf {
    PathBuf::from(format!("/dev/nbd{index}"))
}

/// Disconnect `/dev/nbd{index}` (also one whose server died: its sockets are dead).
pub fn disconnect(index: u32) -> Result<(), KernelError> {
    let mut nl = Genl::open(FAMILY).map_err(KernelError::NoDriver)?;
    let mut a = Attrs::default();
    a.u32(ATTR_INDEX, index);
    nl.request(CMD_DISCONNECT, VERSION, &a)
        .map(|_| ())
        .map_err(|source| KernelError::Disconnect { index, source })
}

/// The lowest-numbered `/dev/nbdN` the driver has made and nobody has connected, if any (a
/// caller that records N before connecting races other users of the driver: a connect that
/// loses answers EBUSY).
pub fn free_index() -> Option<u32> {
    let mut free: Vec<u32> = std::fs::read_dir("/sys/block")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("nbd")?.parse().ok())
        .filter(|&i| connected_by(i).is_none())
        .collect();
    free.sort_unstable();
    free.first().copied()
}

/// The process that connected `/dev/nbd{index}` (sysfs `pid`), while it is connected.
pub fn connected_by(index: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/block/nbd{index}/pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}
