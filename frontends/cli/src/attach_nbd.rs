//! `pmkit attach --via nbd`: the device as `/dev/nbdN`, the kernel's NBD client connected to
//! this process over socket pairs (`pmkit_nbd::kernel`), with the NBD server's request path and
//! the same mkfs, mount and detach as the FUSE route (`pmkit_fuse::attach`).

use crate::adapters::PmbdBackend;
use anyhow::{anyhow, Context, Result};
use pmkit_blk::Device;
use pmkit_fuse::attach::{self, AttachOptions, AttachState, Attachment};
use pmkit_media::Region;
use pmkit_nbd::kernel::{self, KernelDevice};
use pmkit_nbd::{Export, ServerConfig};
use std::sync::Arc;

/// Connect a `/dev/nbdN` to `dev`, then make and mount the file system as asked. On failure
/// every step taken is undone.
pub fn attach(
    dev: Arc<Device<Region>>,
    opts: &AttachOptions,
) -> Result<(Attachment, KernelDevice)> {
    attach::preflight(opts)?;
    let block_size = dev.block_size();
    let backend = Arc::new(PmbdBackend::new(dev));
    let export = Export::new(&*backend, &ServerConfig::default()).map_err(|e| anyhow!(e))?;
    // A connection (a hardware queue of the driver) per CPU, as the FUSE route has a worker
    // per CPU.
    let conns = attach::workers(opts.threads);
    let k = KernelDevice::connect(backend, export, conns, block_size, None)?;
    let mut state = AttachState::new(&opts.pm_path);
    state.loop_dev = Some(k.path());
    state.nbd_index = Some(k.index);
    let mut att = Attachment::adopt(state);
    let r = att
        .state
        .save()
        .and_then(|()| att.make_and_mount(opts))
        .map_err(anyhow::Error::from);
    if let Err(e) = r {
        // Nothing uses a device that was never mounted: undo without asking.
        let _ = att.detach();
        let _ = k.disconnect();
        return Err(e);
    }
    Ok((att, k))
}

/// After a detach: disconnect the device (on the NBD route) and wait for its connections.
pub fn disconnect(k: &mut Option<KernelDevice>) -> Result<()> {
    match k.take() {
        Some(k) => {
            let name = k.path();
            k.disconnect()
                .with_context(|| format!("disconnecting {}", name.display()))
        }
        None => Ok(()),
    }
}

/// Clean up after a dead attaching process of the NBD route: its device's sockets are closed,
/// so I/O to it fails; disconnect it (once `teardown_stale` unmounted lazily) and forget it.
pub fn teardown_stale(s: &AttachState) -> Result<()> {
    let Some(i) = s.nbd_index else {
        return Ok(());
    };
    if kernel::connected_by(i).is_some() {
        kernel::disconnect(i).with_context(|| format!("disconnecting /dev/nbd{i}"))?;
    }
    s.forget();
    Ok(())
}
