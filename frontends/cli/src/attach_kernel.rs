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
pub fn attach(dev: Arc<Device<Region>>, opts: &AttachOptions) -> Result<(Attachment, KernelDev)> {
    attach::preflight(opts)?;
    let block_size = dev.block_size();
    let backend = Arc::new(PmbdBackend::new(dev));
    // A connection or queue (a hardware queue of the driver) per CPU, as the FUSE route has a
    // worker per CPU.
    let queues = attach::workers(opts.threads);
    let mut state = AttachState::new(&opts.pm_path);
    let k = match opts.route {
        Route::Nbd => {
            let export =
                Export::new(&*backend, &ServerConfig::default()).map_err(|e| anyhow!(e))?;
            let k = KernelDevice::connect(backend, export, queues, block_size, None)?;
            state.loop_dev = Some(k.path());
            state.nbd_index = Some(k.index);
            KernelDev::Nbd(k)
        }
        Route::Ublk => {
            let o = UblkOptions {
                queues,
                ..Default::default()
            };
            let u = UblkDevice::start(backend, o)?;
            state.loop_dev = Some(u.path());
            state.ublk_id = Some(u.id);
            KernelDev::Ublk(Box::new(u))
        }
        Route::Fuse => unreachable!("the FUSE route is pmkit_fuse::attach::attach"),
    };
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
