//! `pmkit attach --via nbd|ublk`: the device as a block device of the kernel's own drivers,
//! served by this process: `/dev/nbdN`, the NBD client connected over socket pairs
//! (`pmkit_nbd::kernel`, with the NBD server's request path), or `/dev/ublkbN`, the ublk driver
//! over io_uring (`pmkit_ublk`). Both share the FUSE route's mkfs, mount and detach
//! (`pmkit_fuse::attach`).

use crate::adapters::PmbdBackend;
use anyhow::{anyhow, Context, Result};
use pmkit_blk::Device;
use pmkit_fuse::attach::{self, AttachOptions, AttachState, Attachment, Route};
use pmkit_media::Region;
use pmkit_nbd::kernel::{self, KernelDevice};
use pmkit_nbd::{Export, ServerConfig};
use pmkit_ublk::{UblkDevice, UblkOptions};
use std::sync::Arc;

/// The kernel's block device of an attachment.
pub enum KernelDev {
    Nbd(KernelDevice),
    Ublk(Box<UblkDevice>),
}

impl KernelDev {
    /// What the attach output says about it.
    pub fn describe(&self) -> String {
        match self {
            KernelDev::Nbd(k) => {
                format!("the kernel's NBD client, {} connections", k.connections())
            }
            KernelDev::Ublk(u) => format!("the kernel's ublk driver, {} queues", u.queues()),
        }
    }

    fn stop(self) -> Result<()> {
        match self {
            KernelDev::Nbd(k) => {
                let name = k.path();
                k.disconnect()
                    .with_context(|| format!("disconnecting {}", name.display()))
            }
            KernelDev::Ublk(u) => {
                let name = u.path();
                u.stop()
                    .with_context(|| format!("removing {}", name.display()))
            }
        }
    }
}

/// Give `dev` to the kernel on `opts.route` (NBD or ublk), then make and mount the file system
/// as asked. On failure every step taken is undone.
///
/// The device number is chosen and recorded in the state file before the kernel makes the
/// device, so a kill at any moment leaves nothing that `pmkit detach` cannot find: a recorded
/// number the kernel never used is forgotten as having no leftovers.
pub fn attach(dev: Arc<Device<Region>>, opts: &AttachOptions) -> Result<(Attachment, KernelDev)> {
    attach::preflight(opts)?;
    let block_size = dev.block_size();
    let backend = Arc::new(PmbdBackend::new(dev));
    // A connection or queue (a hardware queue of the driver) per CPU, as the FUSE route has a
    // worker per CPU.
    let queues = attach::workers(opts.threads);
    let mut state = AttachState::new(&opts.pm_path);
    let k = start(opts.route, backend, queues, block_size, &mut state)?;
    assert!(state.kernel_route(), "the device's number is recorded");
    // The driver picked the NBD device when none was free to choose.
    if let KernelDev::Nbd(n) = &k {
        state.nbd_index = Some(n.index);
        state.loop_dev = Some(n.path());
    }
    let mut att = Attachment::adopt(state);
    let r = att
        .state
        .save()
        .and_then(|()| att.make_and_mount(opts))
        .map_err(anyhow::Error::from);
    if let Err(e) = r {
        // Nothing uses a device that was never mounted: undo without asking.
        let _ = att.detach();
        let _ = k.stop();
        return Err(e);
    }
    Ok((att, k))
}

/// Make the kernel's device on `route`, its number recorded in `state` (saved) first; on failure
/// the state is forgotten.
fn start(
    route: Route,
    backend: Arc<PmbdBackend>,
    queues: usize,
    block_size: u32,
    state: &mut AttachState,
) -> Result<KernelDev> {
    assert_ne!(
        route,
        Route::Fuse,
        "the FUSE route is pmkit_fuse::attach::attach"
    );
    // Another user of the driver may take the number between the choice and the start: the
    // start then fails as busy, and the next free number is tried.
    const TRIES: usize = 8;
    let mut tries = 0;
    loop {
        tries += 1;
        let started = match route {
            Route::Nbd => {
                let export =
                    Export::new(&*backend, &ServerConfig::default()).map_err(|e| anyhow!(e))?;
                let index = kernel::free_index();
                state.nbd_index = index;
                state.loop_dev = index.map(kernel::device_path);
                state.save()?;
                KernelDevice::connect(backend.clone(), export, queues, block_size, None, index)
                    .map(KernelDev::Nbd)
                    .map_err(|e| {
                        let busy = matches!(&e, kernel::KernelError::Connect(io)
                            if io.raw_os_error() == Some(libc::EBUSY));
                        (busy && index.is_some(), anyhow::Error::from(e))
                    })
            }
            Route::Ublk => {
                let id = pmkit_ublk::free_id();
                state.ublk_id = Some(id);
                state.loop_dev = Some(pmkit_ublk::block_path(id));
                state.save()?;
                let o = UblkOptions {
                    queues,
                    id: Some(id),
                    ..Default::default()
                };
                UblkDevice::start(backend.clone(), o)
                    .map(|u| KernelDev::Ublk(Box::new(u)))
                    .map_err(|e| {
                        let busy = matches!(&e, pmkit_ublk::UblkError::Step { source, .. }
                            if source.raw_os_error() == Some(libc::EEXIST));
                        (busy, anyhow::Error::from(e))
                    })
            }
            Route::Fuse => unreachable!(),
        };
        match started {
            Ok(k) => return Ok(k),
            Err((true, _)) if tries < TRIES => continue,
            Err((_, e)) => {
                state.forget();
                return Err(e);
            }
        }
    }
}

/// After a detach: disconnect or remove the device (on the NBD and ublk routes) and wait for
/// its threads.
pub fn disconnect(k: &mut Option<KernelDev>) -> Result<()> {
    match k.take() {
        Some(k) => k.stop(),
        None => Ok(()),
    }
}

/// Clean up after a dead attaching process of the NBD or ublk route: its device's sockets or
/// rings are closed, so I/O to it fails; disconnect or delete it (once `teardown_stale`
/// unmounted lazily) and forget it.
pub fn teardown_stale(s: &AttachState) -> Result<()> {
    if let Some(i) = s.nbd_index {
        if kernel::connected_by(i).is_some() {
            kernel::disconnect(i).with_context(|| format!("disconnecting /dev/nbd{i}"))?;
        }
    }
    if let Some(i) = s.ublk_id {
        if pmkit_ublk::exists(i) {
            pmkit_ublk::remove_stale(i).with_context(|| format!("removing /dev/ublkb{i}"))?;
        }
    }
    if s.kernel_route() {
        s.forget();
    }
    Ok(())
}
