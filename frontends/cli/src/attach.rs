//! `pmkit attach` / `pmkit detach`: the device as a kernel block device, through the kernel's
//! ublk driver or NBD client (`attach_kernel.rs`) or through a FUSE file and a loop device,
//! optionally with a file system made and mounted on it.

use anyhow::{Context, Result};
use pmkit::adapters::BlkDisk;
use pmkit::args::{parse_size, EngineArgs};
use pmkit::stats_file::StatsWriter;
use pmkit_fuse::attach::{self, AttachOptions, Detached, Mkfs, Route, Transport};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

// Print without panicking: once attached, a closed stdout/stderr (the terminal or the parent
// that read them went away) must not kill the process that serves a mounted file system.
use pmkit::{say, say_err};

#[derive(clap::Args)]
pub(crate) struct AttachArgs {
    /// The PM device file (made by `pmkit create`, or created here with --size).
    path: PathBuf,
    /// Mount the file system here (without it, attach stops at the loop device).
    #[arg(long)]
    mountpoint: Option<PathBuf>,
    /// Make this file system on the device first (destroys its contents).
    #[arg(long, value_name = "ext4|ext2|xfs")]
    mkfs: Option<Mkfs>,
    /// Create the device with this size if PATH does not exist (e.g. 1G).
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// FUSE worker threads, each on its own cloned /dev/fuse descriptor (0: one per CPU). The
    /// io_uring transport always has one queue per CPU.
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// How FUSE requests reach pmkit: uring (FUSE over io_uring, a queue per CPU; needs the
    /// kernel's /sys/module/fuse/parameters/enable_uring = Y), dev (/dev/fuse, a worker per
    /// CPU), auto (uring where the kernel offers it, else dev).
    #[arg(long, value_name = "auto|dev|uring", default_value_t = Transport::Auto)]
    transport: Transport,
    /// How the kernel gets the block device: ublk (the kernel's ublk driver, /dev/ublkbN, served
    /// by this process over io_uring, a queue per CPU; needs Linux 6.0+ and the ublk_drv
    /// module), nbd (the kernel's NBD client, /dev/nbdN, served by this process over socket
    /// pairs, a connection per CPU; needs the nbd module), fuse (a loop device over a FUSE
    /// file), auto (ublk where its driver is loaded, else nbd where that is, else fuse).
    #[arg(long, value_name = "auto|ublk|nbd|fuse", default_value = "auto", value_parser = parse_via)]
    via: Via,
    /// Options for mounting the file system (mount -o).
    #[arg(long, short = 'o')]
    mount_options: Option<String>,
    /// Write the device's statistics (counts, bytes, latency histograms) as JSON to this file,
    /// every second while attached and once more at exit.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

/// `--via`: a route, or the best the running kernel offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    Auto,
    Route(Route),
}

fn parse_via(s: &str) -> Result<Via, String> {
    match s {
        "auto" => Ok(Via::Auto),
        "ublk" => Ok(Via::Route(Route::Ublk)),
        "nbd" => Ok(Via::Route(Route::Nbd)),
        "fuse" => Ok(Via::Route(Route::Fuse)),
        _ => Err(format!("{s}: not a route (auto, ublk, nbd, fuse)")),
    }
}

impl Via {
    fn route(self) -> Route {
        match self {
            Via::Route(r) => r,
            Via::Auto if pmkit_ublk::available() => Route::Ublk,
            Via::Auto if pmkit_nbd::kernel::available() => Route::Nbd,
            Via::Auto => Route::Fuse,
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct DetachArgs {
    /// The mountpoint, loop device or PM file of the attachment.
    target: PathBuf,
    /// Seconds to wait for the attaching process to answer.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Unmount lazily (umount -l) even if the file system is busy: it leaves the mountpoint at
    /// once and lives on until its last user leaves; the attaching process keeps serving the
    /// device until then, and then removes the loop device and closes the device cleanly.
    #[arg(long)]
    lazy: bool,
}

pub(crate) fn run_attach(a: AttachArgs) -> Result<ExitCode> {
    let mut set = crate::serve::block_signals();
    // SIGUSR1 asks for a lazy detach (`pmkit detach --lazy`); blocked before any thread exists.
    // SAFETY: set is an initialised sigset_t we own; SIGUSR1 is a valid signal; NULL old set.
    unsafe {
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    // After the mask: its threads must not take the stop signals.
    pmkit::entry::daemon();
    let opts = AttachOptions {
        pm_path: a.path.clone(),
        mountpoint: a.mountpoint.clone(),
        mkfs: a.mkfs,
        threads: a.threads,
        mount_options: a.mount_options.clone(),
        transport: a.transport,
        route: a.via.route(),
    };
    // Check root, /dev/fuse, tools and the mountpoint before opening (or creating) anything.
    attach::preflight(&opts)?;
    match opts.route {
        Route::Ublk if !pmkit_ublk::available() => anyhow::bail!(
            "--via ublk: the kernel's ublk driver is not loaded (no /dev/ublk-control): it needs \
             Linux 6.0 or later built with CONFIG_BLK_DEV_UBLK; load it with `modprobe ublk_drv`, \
             or use --via nbd or --via fuse"
        ),
        Route::Nbd if !pmkit_nbd::kernel::available() => anyhow::bail!(
            "--via nbd: the kernel's NBD driver is not loaded: load it with `modprobe nbd`, or \
             use --via fuse"
        ),
        _ => {}
    }
    let engine = a.engine.to_options();
    if a.path.exists() {
        crate::identify::expect_path(&a.path, crate::identify::Kind::Blk)?;
    } else if a.size.is_none() {
        anyhow::bail!(
            "{}: does not exist; give --size (e.g. --size 1G) to create it",
            a.path.display()
        );
    }
    let dev = if !a.path.exists() && a.size.is_some() {
        pmkit_blk::create_path(&a.path, a.size, &Default::default(), &engine)
    } else {
        pmkit_blk::open_path(&a.path, &engine)
    }
    .with_context(|| format!("opening {}", a.path.display()))?;
    let dev = Arc::new(dev);
    let attached = match opts.route {
        Route::Fuse => attach::attach(BlkDisk(dev.clone()), &opts)
            .map(|a| (a, None))
            .map_err(anyhow::Error::from),
        Route::Nbd | Route::Ublk => {
            pmkit::attach_kernel::attach(dev.clone(), &opts).map(|(a, k)| (a, Some(k)))
        }
    };
    let (mut att, mut kernel) = match attached {
        Ok(x) => x,
        Err(e) => {
            let _ = dev.close();
            return Err(e).with_context(|| format!("attaching {}", a.path.display()));
        }
    };
    let s = &att.state;
    let loopdev = s
        .loop_dev
        .as_deref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    say!("attached {}", a.path.display());
    say!("  protection:   {}", dev.protect());
    for n in dev.notes() {
        say!("  note: {n}");
    }
    match &kernel {
        Some(k) => say!(
            "  block device: {loopdev} ({}{})",
            k.describe(),
            if a.via == Via::Auto {
                "; chosen by --via auto"
            } else {
                ""
            }
        ),
        None => say!(
            "  block device: {loopdev} (loop over FUSE, direct I/O {}{})",
            if s.direct_io { "on" } else { "off" },
            if a.via == Via::Auto {
                "; --via auto: neither the ublk_drv nor the nbd module is loaded"
            } else {
                ""
            }
        ),
    }
    if let Some(m) = &s.mountpoint {
        say!("  mounted on:   {}", m.display());
    }
    if kernel.is_none() {
        say!(
            "  FUSE file:    {} (transport {})",
            s.fuse_dir.join(pmkit_fuse::DISK_NAME).display(),
            s.transport.unwrap_or_default()
        );
    }
    let target = s
        .mountpoint
        .as_deref()
        .map(|p| p.display().to_string())
        .unwrap_or(loopdev);
    say!(
        "detach with `pmkit detach {target}` or Ctrl-C here (refused while the file system is busy)"
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();

    let stats_writer = match &a.stats {
        Some(p) => {
            let d = dev.clone();
            Some(StatsWriter::spawn(p.clone(), move || d.stats())?)
        }
        None => None,
    };
    loop {
        let mut sig = 0;
        // SAFETY: waits for one of the blocked signals; set is initialised.
        unsafe { libc::sigwait(&set, &mut sig) };
        if sig == libc::SIGUSR1 {
            say_err!("pmkit: lazy detach requested");
            let s = att.state.clone();
            match att.detach_lazy(|note| {
                say_err!("pmkit: {note}");
                s.reply(true, note);
            }) {
                Ok(()) => {
                    pmkit::attach_kernel::disconnect(&mut kernel)?;
                    break;
                }
                Err(e) => {
                    let msg = format!("lazy detach failed, still attached: {e}");
                    say_err!("pmkit: {msg}");
                    att.state.reply(false, &msg);
                    continue;
                }
            }
        }
        say_err!("pmkit: signal {sig}: detaching");
        // Never close the device while the FUSE file is still served: a file system on the loop
        // device may still be mounted and writing to it.
        let why = match att.detach() {
            Ok(Detached::Done) => {
                pmkit::attach_kernel::disconnect(&mut kernel)?;
                break;
            }
            Ok(Detached::Busy(why)) => why,
            Err(e) => e.to_string(),
        };
        let msg = format!(
            "not detached: {why}; the device stays attached and served. Stop those, then run \
             `pmkit detach {target}` again, or `pmkit detach --lazy {target}` to unmount lazily"
        );
        say_err!("pmkit: {msg}");
        att.state.reply(false, &msg);
    }
    let closed = dev.close();
    if let Some(w) = stats_writer {
        w.finish(&dev.stats())?;
    }
    closed.context("closing the device")?;
    say!("detached {}; device closed cleanly", a.path.display());
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn run_detach(a: DetachArgs) -> Result<ExitCode> {
    let Some(state) = attach::find(&a.target) else {
        anyhow::bail!(
            "{}: no pmkit attachment found (looked in {}); `mount` and `losetup -l` show what is attached",
            a.target.display(),
            attach::STATE_DIR
        );
    };
    if state.alive() {
        // The attaching process owns the device: ask it to detach (SIGTERM) or to detach lazily
        // (SIGUSR1). It exits once detached, or answers in its reply file why it did not.
        let _ = state.take_reply();
        let sig = if a.lazy { libc::SIGUSR1 } else { libc::SIGTERM };
        // SAFETY: sending a signal to a process id we recorded.
        unsafe { libc::kill(state.pid as i32, sig) };
        let deadline = Instant::now() + Duration::from_secs(a.timeout);
        loop {
            if !state.alive() {
                say!("detached {}", a.target.display());
                break;
            }
            if let Some((ok, msg)) = state.take_reply() {
                if !ok {
                    say_err!("pmkit: {}: {msg}", a.target.display());
                    return Ok(ExitCode::FAILURE);
                }
                say!(
                    "detaching {} lazily: {msg}; pmkit process {} exits when done",
                    a.target.display(),
                    state.pid
                );
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "pmkit process {} did not answer within {} s",
                state.pid,
                a.timeout
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    } else {
        // The attaching process died (kill -9, crash): clean up after it.
        attach::teardown_stale(&state).context("cleaning up a stale attachment")?;
        pmkit::attach_kernel::teardown_stale(&state)?;
        // Say what the device's superblock says, not what a dead process suggests.
        let shutdown = match pmkit_blk::inspect_path(&state.pm_path) {
            Ok((f, _)) if f.current.clean => "the device had been closed cleanly",
            Ok(_) => "the device was not shut down cleanly: the next open recovers it",
            Err(_) => "the device could not be read to tell whether it was closed cleanly",
        };
        say!(
            "cleaned up a stale attachment of {} (process {} had died); {shutdown}",
            state.pm_path.display(),
            state.pid
        );
    }
    Ok(ExitCode::SUCCESS)
}
