//! `pmkit serve`: export a PMBD block device over NBD (unix socket or TCP).
//!
//! `pmkit::adapters::PmbdBackend` adapts `pmkit_blk::Device` to the NBD server's `BlockBackend`;
//! this is choosing/creating the device, printing how to connect, and an orderly stop on SIGINT/SIGTERM
//! (stop accepting, finish received requests, flush, mark the device clean, exit 0).

use crate::serve_access::{Access, AccessArgs};
use anyhow::{bail, Context, Result};
use pmkit::adapters::PmbdBackend;
use pmkit::args::{human_size, parse_io_model, parse_size, CreateFlags, EngineArgs};
use pmkit::stats_file::StatsWriter;
use pmkit_blk::Device;
use pmkit_media::Region;
use pmkit_nbd::{IoModel, Listen, Server, ServerConfig};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// The device `pmkit serve` uses when given no path: emulated PM in /dev/shm, made on first use.
pub(crate) const DEFAULT_DEVICE: &str = "/dev/shm/pmkit-default.pmbd";
pub(crate) const DEFAULT_SIZE: u64 = 1 << 30;

#[derive(clap::Args, Debug)]
pub(crate) struct ServeArgs {
    /// Device to export (made by `pmkit create`, or created here with --size)
    /// [default: /dev/shm/pmkit-default.pmbd, 1 GiB, created on first use and reused]
    pub path: Option<PathBuf>,
    // How to create PATH when it does not exist (--size is then required, except for the default
    // device).
    #[command(flatten)]
    pub create: CreateFlags,
    /// Listen on this unix socket [default: /tmp/pmkit-nbd.sock]
    #[arg(long, value_name = "SOCKPATH", conflicts_with = "listen")]
    pub socket: Option<PathBuf>,
    /// Listen on TCP instead, e.g. 127.0.0.1:10809
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// Export read-only: PATH is opened read-only (a read-only file system or read permission
    /// suffices) and not a byte of it changes; writes, trims and zeroing fail with EPERM, flush
    /// does nothing. A PATH created here (--size) is made first, then opened read-only.
    #[arg(long)]
    pub read_only: bool,
    /// Export name clients may ask for (the empty default name is always accepted); see
    /// --export for several names
    #[arg(long, value_name = "NAME", default_value = "")]
    pub export_name: String,
    #[command(flatten)]
    pub access: AccessArgs,
    /// Most concurrent client connections (handshaking or connected); more are closed at once
    /// and logged. Each holds a thread (1 + N with threaded:N) and 2 file descriptors (4 threaded)
    #[arg(long, value_name = "N", default_value_t = pmkit_nbd::config::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Drop a client that has not finished the NBD handshake this many seconds after connecting
    /// (0 = never; as qemu-nbd's --handshake-limit)
    #[arg(long, value_name = "SECS", default_value_t = pmkit_nbd::config::DEFAULT_HANDSHAKE_TIMEOUT.as_secs())]
    pub handshake_timeout: u64,
    /// Close a connected client that sends no request for this many seconds (requests already
    /// sent are answered first) [default: never, as nbdkit and qemu-nbd; a mounted file system
    /// can be quiet for hours]
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<u64>,
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

/// Seconds from the command line; 0 means no limit.
fn secs(s: u64) -> Option<std::time::Duration> {
    (s > 0).then(|| std::time::Duration::from_secs(s))
}

/// Open PATH, or create it when it is missing and a size is known.
fn open_or_create(a: &ServeArgs) -> Result<(PathBuf, Device<Region>, bool)> {
    let mut engine = a.engine.to_options();
    engine.read_only = a.read_only;
    let (path, size) = match &a.path {
        Some(p) => (p.clone(), a.create.size),
        None => {
            // Tests point this elsewhere so they never touch a user's default device.
            let p = std::env::var_os("PMKIT_SERVE_DEFAULT_DEVICE")
                .map_or_else(|| PathBuf::from(DEFAULT_DEVICE), PathBuf::from);
            (p, Some(a.create.size.unwrap_or(DEFAULT_SIZE)))
        }
    };
    if path.exists() {
        crate::identify::expect_path(&path, crate::identify::Kind::Blk)?;
        let dev = pmkit_blk::open_path(&path, &engine).map_err(|e| {
            let denied = matches!(&e, pmkit_blk::BlkError::Media(m)
                if matches!(m.os_error(), Some(libc::EROFS | libc::EACCES | libc::EPERM)));
            let what = if denied && !a.read_only {
                format!(
                    "cannot open {} for writing; to export it read-only, add --read-only",
                    path.display()
                )
            } else {
                format!("cannot open {}", path.display())
            };
            anyhow::Error::new(e).context(what)
        })?;
        if let Some(want) = a.create.size {
            // A size names the device to create; an existing one keeps its own.
            if a.path.is_some() && dev.capacity() != want {
                pmkit::say_err!(
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
    let rw = pmkit_blk::EngineOptions {
        read_only: false,
        ..engine.clone()
    };
    let dev = pmkit_blk::create_path(&path, Some(size), &a.create.to_options(), &rw)
        .with_context(|| format!("cannot create a {size}-byte device at {}", path.display()))?;
    if !a.read_only {
        return Ok((path, dev, true));
    }
    // Made here to be served read-only: made read-write, closed cleanly, reopened read-only.
    dev.close().context("cannot close the new device")?;
    drop(dev);
    let dev = pmkit_blk::open_path(&path, &engine)
        .with_context(|| format!("cannot open {} read-only", path.display()))?;
    Ok((path, dev, true))
}

/// Block SIGINT and SIGTERM in this thread and every thread it starts, so they can be taken
/// synchronously with `sigwait` (serve and attach stop this way).
pub(crate) fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is a plain bit set, for which all zeroes is a valid (empty) value.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a sigset_t we own.
    unsafe { libc::sigemptyset(&mut set) };
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: set is a sigset_t we own; sig is a valid signal number.
        unsafe { libc::sigaddset(&mut set, sig) };
    }
    // SAFETY: set is initialised; a NULL old set is allowed.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    set
}

pub(crate) fn run(a: ServeArgs) -> Result<ExitCode> {
    // Before any thread exists, so every thread inherits the mask and only `sigwait` sees them.
    let set = block_signals();
    pmkit::entry::daemon();
    let listen = match (&a.listen, &a.socket) {
        (Some(addr), _) => Listen::Tcp(*addr),
        (None, Some(p)) => Listen::Unix(p.clone()),
        (None, None) => Listen::Unix(PathBuf::from("/tmp/pmkit-nbd.sock")),
    };
    // Before the device is touched: a refused or misconfigured server changes nothing.
    let access = a.access.resolve(a.listen.as_ref(), &a.export_name)?;
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
        exports: access.exports.clone(),
        description: format!("pmkit PMBD device {}", path.display()),
        read_only: a.read_only,
        tls_mode: access.tls_mode,
        tls: access.tls.clone(),
        write_identities: access.write_identities.clone(),
        socket_access: access.socket,
        max_payload,
        max_connections: a.max_connections,
        handshake_timeout: secs(a.handshake_timeout),
        idle_timeout: a.idle_timeout.and_then(secs),
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
    print_banner(
        &path,
        created,
        &info,
        &a,
        &uri,
        max_payload,
        &listen,
        &access,
    );
    pmkit::sd_notify::ready(&format!("serving {} at {uri}", path.display()));
    let stats_writer = match &a.stats {
        Some(p) => {
            let b = backend.clone();
            Some(StatsWriter::spawn(p.clone(), move || b.dev.stats())?)
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
            pmkit::say_err!("pmkit: signal {sig}: finishing requests, flushing, closing");
            pmkit::sd_notify::stopping();
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
    let mut dropped = Vec::new();
    for (n, what) in [
        (stats.refused, "refused at the limit"),
        (stats.handshake_timeouts, "handshake timed out"),
        (stats.idle_timeouts, "idle timed out"),
    ] {
        if n > 0 {
            dropped.push(format!("{n} {what}"));
        }
    }
    let dropped = if dropped.is_empty() {
        String::new()
    } else {
        format!(" ({})", dropped.join(", "))
    };
    pmkit::say_err!(
        "pmkit: served {} connection(s){dropped}, {} request(s) ({} errors), read {}, wrote {}; {} closed cleanly",
        stats.connections,
        stats.requests,
        stats.errors,
        human_size(stats.bytes_read),
        human_size(stats.bytes_written),
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::too_many_arguments)] // one line of output per argument; a struct would only rename them
fn print_banner(
    path: &Path,
    created: bool,
    info: &pmkit_blk::DeviceInfo,
    a: &ServeArgs,
    uri: &str,
    max_payload: u32,
    listen: &Listen,
    access: &Access,
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
    let _ = writeln!(o, "protection: {}", access.describe());
    if access.exports.len() > 1 || access.exports[0].read_only {
        let names: Vec<String> = access
            .exports
            .iter()
            .map(|e| {
                format!(
                    "{:?}{}",
                    e.name,
                    if e.read_only { " (read-only)" } else { "" }
                )
            })
            .collect();
        let _ = writeln!(o, "exports: {}", names.join(", "));
    }
    if let Listen::Unix(_) = listen {
        let _ = writeln!(
            o,
            "socket: mode {:o}{}",
            access.socket.mode,
            access
                .socket
                .group
                .map_or(String::new(), |g| format!(", group {g}"))
        );
    }
    if let (Some(psk), Some((scheme, rest))) = (&a.access.tls_psk, uri.split_once("://")) {
        let _ = writeln!(
            o,
            "TLS PSK clients: nbdinfo '{}://USER@{}{}tls-psk-file={}'   (USER: a name in the file)",
            scheme,
            rest,
            if rest.contains('?') { "&" } else { "?" },
            psk.display()
        );
    }
    let _ = writeln!(
        o,
        "limits: {} connections, {} bytes per request, {} requests read ahead per connection",
        a.max_connections, max_payload, a.max_inflight
    );
    let _ = writeln!(
        o,
        "timeouts: handshake {}, idle {}",
        match a.handshake_timeout {
            0 => "none".to_string(),
            s => format!("{s} s"),
        },
        match a.idle_timeout {
            None | Some(0) => "none".to_string(),
            Some(s) => format!("{s} s"),
        }
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
