//! `pmkit serve`: export a PMBD block device over NBD (unix socket or TCP).
//!
//! [`PmbdBackend`] adapts `pmkit_blk::Device` to the NBD server's `BlockBackend`; the rest is
//! choosing/creating the device, printing how to connect, and an orderly stop on SIGINT/SIGTERM
//! (stop accepting, finish received requests, flush, mark the device clean, exit 0).

use crate::blk::{parse_size, EngineArgs};
use anyhow::{bail, Context, Result};
use pmkit_blk::{BlkError, CreateOptions, Device};
use pmkit_media::Region;
use pmkit_nbd::{
    BackendError, BackendResult, BlockBackend, BlockSizes, ErrorKind, IoModel, Listen, Server,
    ServerConfig,
};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// The device `pmkit serve` uses when given no path: emulated PM in /dev/shm, made on first use.
pub const DEFAULT_DEVICE: &str = "/dev/shm/pmkit-default.pmbd";
pub const DEFAULT_SIZE: u64 = 1 << 30;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Device to export (made by `pmkit create`, or created here with --size)
    /// [default: /dev/shm/pmkit-default.pmbd, 1 GiB, created on first use and reused]
    pub path: Option<PathBuf>,
    /// Create PATH with this size if it does not exist (K, M, G, T suffixes)
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Block size of a device created here: 512 or 4096
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub block_size: u32,
    /// Keep a CRC32C per block (for a device created here)
    #[arg(long)]
    pub checksum: bool,
    /// Listen on this unix socket [default: /tmp/pmkit-nbd.sock]
    #[arg(long, value_name = "SOCKPATH", conflicts_with = "listen")]
    pub socket: Option<PathBuf>,
    /// Listen on TCP instead, e.g. 127.0.0.1:10809
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// Export read-only (writes, trims and zeroing fail with EPERM)
    #[arg(long)]
    pub read_only: bool,
    /// Export name clients may ask for (the empty default name is always accepted)
    #[arg(long, value_name = "NAME", default_value = "")]
    pub export_name: String,
    /// Most concurrent client connections
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_connections: usize,
    /// Most requests read ahead of execution per connection (threaded model)
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_inflight: usize,
    /// Largest READ/WRITE payload advertised and accepted [default: the engine's --max-request]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_payload: Option<u64>,
    /// How requests are executed: `inline` (in the connection's thread) or `threaded:N`
    /// (a reader thread and N workers per connection); see docs/nbd.md
    #[arg(long, value_name = "MODEL", default_value = "inline", value_parser = parse_io_model)]
    pub io_model: IoModel,
    /// Inline model: microseconds a connection's thread polls its socket for the next request
    /// before it sleeps (0 = sleep at once; at most 1000). Polling spends CPU to save the
    /// sleep/wake-up on each side; see docs/nbd.md
    #[arg(long, value_name = "US", default_value_t = pmkit_nbd::config::DEFAULT_POLL.as_micros() as u64)]
    pub poll_us: u64,
    /// Write the device's statistics (counts, bytes, latency histograms) as JSON to this file,
    /// every second while serving and once more at exit.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn parse_io_model(s: &str) -> Result<IoModel, String> {
    if s == "inline" {
        return Ok(IoModel::Inline);
    }
    s.strip_prefix("threaded:")
        .and_then(|n| n.parse().ok())
        .map(|workers| IoModel::Threaded { workers })
        .ok_or_else(|| format!("{s:?}: expected `inline` or `threaded:N`"))
}

/// Sector size the export advertises as its minimum block size. The device's own block (usually
/// 4096) is advertised as the preferred size; smaller aligned requests are served by
/// read-modify-write here, because common clients (a loop device over nbdfuse, the kernel client
/// with its default block size) send 512-byte I/O and libnbd does not split it.
pub const SECTOR: u32 = 512;
/// Locks serializing read-modify-write of partial blocks (by block number).
const RMW_STRIPES: usize = 64;

/// A PMBD device as an NBD export.
pub struct PmbdBackend {
    pub dev: Device<Region>,
    bs: u64,
    rmw: Vec<std::sync::Mutex<()>>,
}

impl PmbdBackend {
    pub fn new(dev: Device<Region>) -> Self {
        let bs = dev.block_size() as u64;
        assert!(bs >= SECTOR as u64 && bs.is_power_of_two());
        PmbdBackend {
            dev,
            bs,
            rmw: (0..RMW_STRIPES)
                .map(|_| std::sync::Mutex::new(()))
                .collect(),
        }
    }

    /// Replace bytes `[at, at+len)` inside block `blk` with `data` (or zeroes when `None`).
    /// Two partial writes to different sectors of one block must both survive, so the
    /// read-modify-write holds the block's stripe lock. (A whole-block write racing with it is an
    /// overlapping write, whose order NBD leaves undefined.)
    fn patch(
        &self,
        blk: u64,
        at: usize,
        len: usize,
        data: Option<&[u8]>,
        fua: bool,
    ) -> BackendResult<()> {
        let _g = self.rmw[(blk as usize) % RMW_STRIPES]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut b = vec![0u8; self.bs as usize];
        let off = blk * self.bs;
        self.dev.read(off, &mut b).map_err(map_err)?;
        match data {
            Some(d) => b[at..at + len].copy_from_slice(d),
            None => b[at..at + len].fill(0),
        }
        self.dev.write(off, &b, fua).map_err(map_err)
    }

    /// Split `[off, off+len)` into a partial head block, whole middle blocks and a partial tail,
    /// calling `part(block, offset in block, length, offset in request)` for partial pieces and
    /// `whole(offset, length, offset in request)` for the aligned middle.
    fn split(
        &self,
        off: u64,
        len: u64,
        mut part: impl FnMut(u64, usize, usize, usize) -> BackendResult<()>,
        mut whole: impl FnMut(u64, u64, usize) -> BackendResult<()>,
    ) -> BackendResult<()> {
        let bs = self.bs;
        let end = off + len;
        let mut pos = off;
        while pos < end {
            let blk = pos / bs;
            let in_blk = pos % bs;
            if in_blk != 0 || end - pos < bs {
                let n = (bs - in_blk).min(end - pos);
                part(blk, in_blk as usize, n as usize, (pos - off) as usize)?;
                pos += n;
            } else {
                let n = (end - pos) / bs * bs;
                whole(pos, n, (pos - off) as usize)?;
                pos += n;
            }
        }
        Ok(())
    }
}

fn map_err(e: BlkError) -> BackendError {
    let kind = match e.errno() {
        libc::EINVAL | libc::EOVERFLOW => ErrorKind::Invalid,
        libc::ENOSPC => ErrorKind::NoSpace,
        libc::ESHUTDOWN => ErrorKind::Shutdown,
        _ => ErrorKind::Io,
    };
    BackendError::new(kind, e.to_string())
}

impl BlockBackend for PmbdBackend {
    fn size(&self) -> u64 {
        self.dev.capacity()
    }
    fn block_sizes(&self) -> BlockSizes {
        BlockSizes {
            minimum: SECTOR,
            preferred: (self.bs as u32).max(4096),
        }
    }
    fn is_read_only(&self) -> bool {
        false
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> BackendResult<()> {
        if buf.is_empty() {
            return Ok(());
        }
        if off.is_multiple_of(self.bs) && (buf.len() as u64).is_multiple_of(self.bs) {
            return self.dev.read(off, buf).map_err(map_err);
        }
        let len = buf.len() as u64;
        let cell = std::cell::RefCell::new(buf);
        self.split(
            off,
            len,
            |blk, at, n, dst| {
                let mut b = vec![0u8; self.bs as usize];
                self.dev.read(blk * self.bs, &mut b).map_err(map_err)?;
                cell.borrow_mut()[dst..dst + n].copy_from_slice(&b[at..at + n]);
                Ok(())
            },
            |o, n, dst| {
                self.dev
                    .read(o, &mut cell.borrow_mut()[dst..dst + n as usize])
                    .map_err(map_err)
            },
        )
    }
    fn write(&self, off: u64, data: &[u8], fua: bool) -> BackendResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        if off.is_multiple_of(self.bs) && (data.len() as u64).is_multiple_of(self.bs) {
            return self.dev.write(off, data, fua).map_err(map_err);
        }
        self.split(
            off,
            data.len() as u64,
            |blk, at, n, src| self.patch(blk, at, n, Some(&data[src..src + n]), fua),
            |o, n, src| {
                self.dev
                    .write(o, &data[src..src + n as usize], fua)
                    .map_err(map_err)
            },
        )
    }
    fn flush(&self) -> BackendResult<()> {
        self.dev.flush().map_err(map_err)
    }
    fn trim(&self, off: u64, len: u64, fua: bool) -> BackendResult<()> {
        // A trim is a hint: discard only the whole blocks inside the range.
        let start = off.div_ceil(self.bs) * self.bs;
        let end = (off + len) / self.bs * self.bs;
        if end > start {
            self.dev.trim(start, end - start).map_err(map_err)?;
            if fua {
                self.dev.flush().map_err(map_err)?;
            }
        }
        Ok(())
    }
    fn write_zeroes(&self, off: u64, len: u64, fua: bool, _may_trim: bool) -> BackendResult<()> {
        // Trimmed and zeroed blocks are the same thing on PMBD (zeroes in place), so NO_HOLE is
        // always honoured.
        self.split(
            off,
            len,
            |blk, at, n, _| self.patch(blk, at, n, None, fua),
            |o, n, _| self.dev.write_zeroes(o, n, fua).map_err(map_err),
        )
    }
    fn fast_zero(&self) -> bool {
        // Zeroing PM runs at memory bandwidth in the server; writing zeroes would also carry
        // them over the socket.
        true
    }
}

/// Open PATH, or create it when it is missing and a size is known.
fn open_or_create(a: &ServeArgs) -> Result<(PathBuf, Device<Region>, bool)> {
    let engine = a.engine.to_options();
    let (path, size) = match &a.path {
        Some(p) => (p.clone(), a.size),
        None => {
            // Tests point this elsewhere so they never touch a user's default device.
            let p = std::env::var_os("PMKIT_SERVE_DEFAULT_DEVICE")
                .map_or_else(|| PathBuf::from(DEFAULT_DEVICE), PathBuf::from);
            (p, Some(a.size.unwrap_or(DEFAULT_SIZE)))
        }
    };
    if path.exists() {
        let dev = pmkit_blk::open_path(&path, &engine)
            .with_context(|| format!("cannot open {}", path.display()))?;
        if let Some(want) = a.size {
            // A size names the device to create; an existing one keeps its own.
            if a.path.is_some() && dev.capacity() != want {
                eprintln!(
                    "pmkit: note: {} exists with {} bytes; --size {want} is ignored",
                    path.display(),
                    dev.capacity()
                );
            }
        }
        return Ok((path, dev, false));
    }
    let Some(size) = size else {
        bail!(
            "{} does not exist; give --size to create it (or run `pmkit create`)",
            path.display()
        );
    };
    let create = CreateOptions {
        block_size: a.block_size,
        checksum: a.checksum,
        zero_data: true,
        ..CreateOptions::default()
    };
    let dev = pmkit_blk::create_path(&path, Some(size), &create, &engine)
        .with_context(|| format!("cannot create a {size}-byte device at {}", path.display()))?;
    Ok((path, dev, true))
}

/// Block SIGINT and SIGTERM in this thread and every thread it starts, so they can be taken
/// synchronously with `sigwait` (serve and attach stop this way).
pub(crate) fn block_signals() -> libc::sigset_t {
    // SAFETY: plain signal-mask calls on a set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

pub(crate) fn human_size(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n => format!("{n} bytes"),
    }
}

pub fn run(a: ServeArgs) -> Result<ExitCode> {
    // Before any thread exists, so every thread inherits the mask and only `sigwait` sees them.
    let set = block_signals();
    let listen = match (&a.listen, &a.socket) {
        (Some(addr), _) => Listen::Tcp(*addr),
        (None, Some(p)) => Listen::Unix(p.clone()),
        (None, None) => Listen::Unix(PathBuf::from("/tmp/pmkit-nbd.sock")),
    };
    let (path, dev, created) = open_or_create(&a)?;
    let max_payload = a
        .max_payload
        .unwrap_or(dev.max_request() as u64)
        .min(32 << 20);
    let bs = dev.block_size() as u64;
    let max_payload =
        u32::try_from(max_payload - max_payload % bs).context("--max-payload is too large")?;
    let info = dev.info();
    let backend = Arc::new(PmbdBackend::new(dev));
    let cfg = ServerConfig {
        export_name: a.export_name.clone(),
        description: format!("pmkit PMBD device {}", path.display()),
        read_only: a.read_only,
        max_payload,
        max_connections: a.max_connections,
        max_inflight: a.max_inflight,
        io_model: a.io_model,
        poll: std::time::Duration::from_micros(a.poll_us),
        ..Default::default()
    };
    let server = match Server::bind(&listen, backend.clone(), cfg) {
        Ok(s) => s,
        Err(e) => {
            let _ = backend.dev.close();
            return Err(e).context("cannot start the NBD server");
        }
    };
    let uri = server.uri();
    print_banner(&path, created, &info, &a, &uri, max_payload, &listen);
    let stats_writer = match &a.stats {
        Some(p) => {
            let b = backend.clone();
            Some(crate::blk::StatsWriter::spawn(p.clone(), move || {
                b.dev.stats()
            })?)
        }
        None => None,
    };

    let stop = server.shutdown_handle();
    std::thread::Builder::new()
        .name("pmkit-signals".into())
        .spawn(move || {
            let mut sig = 0;
            // SAFETY: waits for one of the signals blocked above.
            unsafe { libc::sigwait(&set, &mut sig) };
            eprintln!("pmkit: signal {sig}: finishing requests, flushing, closing");
            stop.shutdown();
        })
        .context("cannot start the signal thread")?;

    let served = server.run();
    // Mark clean only after every connection is done (run() joined them) and the flush passed.
    let closed = backend.dev.close();
    if let Some(w) = stats_writer {
        w.finish(&backend.dev.stats())?;
    }
    let stats = served.context("NBD server failed")?;
    closed.context("closing the device")?;
    eprintln!(
        "pmkit: served {} connection(s), {} request(s) ({} errors), read {}, wrote {}; {} closed cleanly",
        stats.connections,
        stats.requests,
        stats.errors,
        human_size(stats.bytes_read),
        human_size(stats.bytes_written),
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn print_banner(
    path: &Path,
    created: bool,
    info: &pmkit_blk::DeviceInfo,
    a: &ServeArgs,
    uri: &str,
    max_payload: u32,
    listen: &Listen,
) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(
        o,
        "pmkit: serving {} ({}{}, {}-byte blocks, protect {}, write {}{}{})",
        path.display(),
        human_size(info.capacity),
        if created { ", created now" } else { "" },
        info.block_size,
        info.protect.name(),
        info.write,
        if info.checksum { ", checksums" } else { "" },
        if a.read_only { ", read-only" } else { "" },
    );
    for n in &info.notes {
        let _ = writeln!(o, "  note: {n}");
    }
    let _ = writeln!(o, "URI: {uri}");
    let _ = writeln!(
        o,
        "limits: {} connections, {} bytes per request, {} requests read ahead per connection",
        a.max_connections, max_payload, a.max_inflight
    );
    let _ = writeln!(o, "use it with:");
    let _ = writeln!(o, "  nbdinfo '{uri}'");
    let _ = writeln!(o, "  nbdcopy disk.img '{uri}'              # copy an image in (or swap the arguments to copy out)");
    let _ = writeln!(o, "  mkdir -p /mnt/pmnbd && nbdfuse /mnt/pmnbd '{uri}' &   # then: losetup -f --show /mnt/pmnbd/nbd");
    match listen {
        Listen::Unix(p) => {
            let _ = writeln!(
                o,
                "  nbd-client -unix {} /dev/nbd0     # kernel client (modprobe nbd)",
                p.display()
            );
        }
        Listen::Tcp(addr) => {
            let _ = writeln!(
                o,
                "  nbd-client {} {} /dev/nbd0 -N '{}'   # kernel client (modprobe nbd)",
                addr.ip(),
                addr.port(),
                a.export_name
            );
        }
    }
    let _ = writeln!(
        o,
        "  qemu-system-x86_64 ... -drive file='{uri}',format=raw,if=virtio"
    );
    let _ = writeln!(o, "stop with Ctrl-C or SIGTERM: received requests finish, the device is flushed and marked clean");
    let _ = o.flush();
}
