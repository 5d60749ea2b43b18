//! A ublk device served by this process: added and configured through the control device,
//! a thread per queue, started, and stopped and deleted on [`UblkDevice::stop`].

use crate::abi::{self, DevInfo, ParamBasic, ParamDiscard, Params};
use crate::ctrl::{Control, CONTROL};
use crate::queue;
use pmkit_nbd::BlockBackend;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most queues (the driver's limit is 4096; a queue per CPU is the point).
pub const MAX_QUEUES: usize = 64;
/// Requests in flight per queue by default: as deep as the kernel's block layer usually
/// queues, with a buffer each.
pub const DEFAULT_DEPTH: u16 = 128;
/// The largest request (and each tag's buffer): 512 KiB, the block layer's usual largest.
pub const DEFAULT_MAX_IO: u32 = 512 << 10;
/// How long the driver gets to make `/dev/ublkcN` and `/dev/ublkbN` appear.
const APPEAR: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum UblkError {
    #[error(
        "the kernel's ublk driver is not available ({0}): it needs Linux 6.0 or later built with \
         CONFIG_BLK_DEV_UBLK; load it with `modprobe ublk_drv`"
    )]
    NoDriver(io::Error),
    #[error("ublk: {step}: {source}")]
    Step {
        step: &'static str,
        source: io::Error,
    },
}

fn step(step: &'static str) -> impl FnOnce(io::Error) -> UblkError {
    move |source| UblkError::Step { step, source }
}

/// Whether this kernel offers ublk (the control device exists; loading the module makes it).
pub fn available() -> bool {
    Path::new(CONTROL).exists()
}

/// The shape of a device.
#[derive(Clone, Copy, Debug)]
pub struct UblkOptions {
    /// Hardware queues, each served by a thread (1..=[`MAX_QUEUES`]; the driver caps it at the
    /// CPU count).
    pub queues: usize,
    /// Requests in flight per queue (1..=4096).
    pub depth: u16,
    /// The largest request in bytes (a multiple of the page size).
    pub max_io: u32,
    /// The device number N of `/dev/ublkbN` (`None`: the driver picks). A number in use fails
    /// the start with EEXIST.
    pub id: Option<u32>,
}

impl Default for UblkOptions {
    fn default() -> UblkOptions {
        UblkOptions {
            queues: std::thread::available_parallelism().map_or(1, |n| n.get()),
            depth: DEFAULT_DEPTH,
            max_io: DEFAULT_MAX_IO,
            id: None,
        }
    }
}

/// A started `/dev/ublkbN`.
pub struct UblkDevice {
    pub id: u32,
    ctrl: Control,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<io::Result<()>>>,
    /// Shared with the queue threads; None once closed.
    char_dev: Option<Arc<File>>,
}

impl UblkDevice {
    /// Add, configure and start a device served by `backend`. On failure every step taken is
    /// undone.
    pub fn start<B: BlockBackend>(
        backend: Arc<B>,
        o: UblkOptions,
    ) -> Result<UblkDevice, UblkError> {
        let queues = o.queues.clamp(1, MAX_QUEUES) as u16;
        assert!(o.depth > 0 && o.depth as usize <= abi::MAX_QUEUE_DEPTH);
        assert!(o.max_io > 0 && (o.max_io as usize).is_multiple_of(abi::page_size()));
        let mut ctrl = Control::open().map_err(UblkError::NoDriver)?;
        let mut info = DevInfo {
            nr_hw_queues: queues,
            queue_depth: o.depth,
            max_io_buf_bytes: o.max_io,
            dev_id: o.id.unwrap_or(u32::MAX),
            ublksrv_pid: std::process::id() as i32,
            flags: abi::F_CMD_IOCTL_ENCODE,
            ..Default::default()
        };
        ctrl.add(&mut info).map_err(step("add device"))?;
        let id = info.dev_id;
        let undo = |ctrl: &mut Control, e: UblkError| {
            let _ = ctrl.delete(id);
            e
        };
        if let Err(e) = ctrl.set_params(id, &params(&*backend, info.max_io_buf_bytes)) {
            return Err(undo(&mut ctrl, step("set parameters")(e)));
        }
        let char_dev = match open_appearing(&char_path(id)) {
            Ok(f) => Arc::new(f),
            Err(e) => return Err(undo(&mut ctrl, step("open the char device")(e))),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        // The driver may have given fewer queues than asked (one per CPU at most).
        let threads: Vec<_> = (0..info.nr_hw_queues)
            .map(|q| {
                let (b, dev, stop, tx) =
                    (backend.clone(), char_dev.clone(), stop.clone(), tx.clone());
                let (depth, buf) = (info.queue_depth, info.max_io_buf_bytes as usize);
                std::thread::Builder::new()
                    .name(format!("ublk{id}q{q}"))
                    .spawn(move || {
                        queue::serve(&*b, &dev, q, depth, buf, &stop, |r| {
                            let _ = tx.send(r);
                        })
                    })
                    .expect("spawn a ublk queue thread")
            })
            .collect();
        drop(tx);
        let mut dev = UblkDevice {
            id,
            ctrl,
            stop,
            threads,
            char_dev: Some(char_dev),
        };
        // One answer per queue (a thread that died before answering drops its sender).
        let ready: io::Result<()> = (0..dev.threads.len()).try_for_each(|_| {
            rx.recv()
                .unwrap_or_else(|_| Err(io::Error::other("a queue thread died")))
        });
        if let Err(e) = ready.and_then(|()| dev.ctrl.start(id)) {
            let _ = dev.shut_down(false);
            return Err(step("start")(e));
        }
        // Only waited for, not opened: closing a block device opened for writing makes udev
        // probe it again.
        if let Err(e) = appeared(&dev.path()) {
            let _ = dev.shut_down(true);
            return Err(step("wait for the block device")(e));
        }
        Ok(dev)
    }

    /// The block device.
    pub fn path(&self) -> PathBuf {
        block_path(self.id)
    }

    pub fn queues(&self) -> usize {
        self.threads.len()
    }

    /// Remove the block device (the driver lets requests in flight finish), stop the queues,
    /// delete the device.
    pub fn stop(mut self) -> Result<(), UblkError> {
        let stopped = self.ctrl.stop(self.id).map_err(step("stop"));
        let rest = self.shut_down(false);
        stopped.and(rest)
    }

    fn shut_down(&mut self, started: bool) -> Result<(), UblkError> {
        if started {
            let _ = self.ctrl.stop(self.id);
        }
        self.stop.store(true, Ordering::Release);
        let mut failed = None;
        for t in self.threads.drain(..) {
            if let Ok(Err(e)) = t.join() {
                failed.get_or_insert(e);
            }
        }
        // The driver deletes only once the char device is closed: every queue thread has
        // dropped its reference, this is the last.
        self.char_dev = None;
        let deleted = self.ctrl.delete(self.id).map_err(step("delete"));
        match failed {
            Some(e) => Err(step("serve a queue")(e)),
            None => deleted,
        }
    }
}

/// `/dev/ublkbN`.
pub fn block_path(id: u32) -> PathBuf {
    PathBuf::from(format!("/dev/ublkb{id}"))
}

fn char_path(id: u32) -> PathBuf {
    PathBuf::from(format!("/dev/ublkc{id}"))
}

/// The lowest device number no ublk device has now (a caller that records it before starting
/// races other users of the driver: a start that loses fails with EEXIST).
pub fn free_id() -> u32 {
    (0..)
        .find(|&i| !exists(i))
        .expect("a free ublk device number")
}

/// Whether device `id` still exists in the driver (its char device is registered), also when
/// the process serving it died.
pub fn exists(id: u32) -> bool {
    Path::new(&format!("/sys/class/ublk-char/ublkc{id}")).exists()
}

/// Stop and delete device `id` whose server died (its char device closed with it): I/O to it
/// fails until then.
pub fn remove_stale(id: u32) -> Result<(), UblkError> {
    let mut ctrl = Control::open().map_err(UblkError::NoDriver)?;
    // Stopping a device that was never started, or is stopped, is refused: delete anyway.
    let _ = ctrl.stop(id);
    ctrl.delete(id).map_err(step("delete a stale device"))
}

fn params<B: BlockBackend + ?Sized>(b: &B, max_io: u32) -> Params {
    let sizes = b.block_sizes();
    let logical = sizes.minimum.max(512);
    assert!(logical.is_power_of_two() && sizes.preferred.is_power_of_two());
    assert!(
        b.size().is_multiple_of(logical as u64),
        "the device is whole logical blocks"
    );
    let shift = |v: u32| v.trailing_zeros() as u8;
    let page = abi::page_size() as u32;
    let mut attrs = abi::ATTR_VOLATILE_CACHE | abi::ATTR_FUA;
    if b.is_read_only() {
        attrs |= abi::ATTR_READ_ONLY;
    }
    Params {
        len: abi::PARAMS_LEN,
        types: abi::PARAM_TYPE_BASIC | abi::PARAM_TYPE_DISCARD,
        basic: ParamBasic {
            attrs,
            logical_bs_shift: shift(logical.min(page)),
            physical_bs_shift: shift(sizes.preferred.clamp(logical, page)),
            io_opt_shift: shift(sizes.preferred),
            io_min_shift: shift(sizes.preferred),
            max_sectors: max_io >> 9,
            dev_sectors: b.size() >> 9,
            ..Default::default()
        },
        discard: ParamDiscard {
            discard_granularity: sizes.preferred,
            max_discard_sectors: u32::MAX >> 9,
            max_write_zeroes_sectors: u32::MAX >> 9,
            max_discard_segments: 1,
            ..Default::default()
        },
    }
}

/// Open a device node the driver has just registered (devtmpfs makes it; give it a moment).
fn open_appearing(p: &Path) -> io::Result<File> {
    retry_missing(p, || OpenOptions::new().read(true).write(true).open(p))
}

/// Wait until a device node the driver has just registered exists.
fn appeared(p: &Path) -> io::Result<()> {
    retry_missing(p, || std::fs::metadata(p).map(drop))
}

/// `f` until it does not fail with NotFound, for at most [`APPEAR`].
fn retry_missing<T>(p: &Path, mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let until = Instant::now() + APPEAR;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if e.kind() == io::ErrorKind::NotFound && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", p.display()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmkit_nbd::{BlockSizes, MemBackend};

    #[test]
    fn parameters_describe_the_device() {
        let sizes = BlockSizes {
            minimum: 512,
            preferred: 4096,
        };
        let p = params(&MemBackend::new(64 << 20, sizes, false), DEFAULT_MAX_IO);
        assert_eq!(p.basic.dev_sectors, (64 << 20) >> 9);
        assert_eq!(p.basic.logical_bs_shift, 9);
        assert_eq!(p.basic.physical_bs_shift, 12);
        assert_eq!(p.basic.max_sectors, 1024);
        assert_eq!(p.basic.attrs & abi::ATTR_READ_ONLY, 0);
        assert_eq!(p.discard.max_discard_segments, 1);
        let ro = params(&MemBackend::new(1 << 20, sizes, true), DEFAULT_MAX_IO);
        assert_ne!(ro.basic.attrs & abi::ATTR_READ_ONLY, 0);
    }
}
