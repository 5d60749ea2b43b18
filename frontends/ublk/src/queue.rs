//! One hardware queue of a ublk device, served by one thread (the driver takes a queue's
//! commands from one task only): a fetch command per tag waits in the driver; each completion
//! is a request, served from the mapped descriptor and the tag's buffer, then committed with
//! the next fetch in the same command.

use crate::abi::{self, IoCmd, IoDesc};
use crate::request;
use io_uring::{opcode, types, IoUring};
use pmkit_nbd::BlockBackend;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a queue with nothing to do looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// An anonymous or device mapping, unmapped on drop.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> io::Result<Mapping> {
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL); failure is checked.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, off) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            base: NonNull::new(p.cast()).expect("mmap returned a non-null address"),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned; nothing refers to it after drop
        // (the ring whose commands name the buffers is dropped first: see `serve`).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Serve queue `q` of the device whose char device is `dev` until the driver aborts every tag
/// or `stop` is set. `ready` is called once every tag's fetch is with the driver (or with the
/// error that prevented it): the device may be started only after every queue is ready.
pub(crate) fn serve<B: BlockBackend + ?Sized>(
    backend: &B,
    dev: &File,
    q: u16,
    depth: u16,
    buf_bytes: usize,
    stop: &AtomicBool,
    ready: impl FnOnce(io::Result<()>),
) -> io::Result<()> {
    let setup = Setup::new(dev, q, depth, buf_bytes);
    let mut s = match setup {
        Ok(s) => s,
        Err(e) => {
            ready(Err(io::Error::new(e.kind(), format!("queue {q}: {e}"))));
            return Ok(());
        }
    };
    for tag in 0..depth {
        s.push(abi::IO_FETCH_REQ, tag, 0);
    }
    if let Err(e) = s.ring.submit() {
        ready(Err(io::Error::new(
            e.kind(),
            format!("queue {q}: fetch: {e}"),
        )));
        return Ok(());
    }
    ready(Ok(()));
    let mut live = depth as usize;
    // At most one completion per tag is outstanding.
    let mut done: Vec<(u16, i32)> = Vec::with_capacity(depth as usize);
    let ts = types::Timespec::from(STOP_POLL);
    let args = types::SubmitArgs::new().timespec(&ts);
    while live > 0 && !stop.load(Ordering::Acquire) {
        match s.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        // Taken out of the ring first (its completion and submission sides are both borrowed
        // from it), into a buffer kept across rounds: no allocation per wake-up.
        done.clear();
        done.extend(
            s.ring
                .completion()
                .map(|c| (c.user_data() as u16, c.result())),
        );
        for &(tag, res) in &done {
            debug_assert!(res == abi::IO_RES_OK || res == abi::IO_RES_ABORT || res < 0);
            if res != abi::IO_RES_OK {
                // ABORT: the device is going away; anything else: the driver refused the
                // command. Either way this tag is not fetched again.
                live -= 1;
                continue;
            }
            let d = s.descriptor(tag);
            // SAFETY: the driver has handed this tag's request to us (its fetch completed) and
            // touches the tag's buffer again only after the commit pushed below.
            let buf = unsafe { s.buffer(tag) };
            let result = request::serve(backend, &d, buf);
            s.push(abi::IO_COMMIT_AND_FETCH_REQ, tag, result);
        }
    }
    Ok(())
}

struct Setup<'a> {
    dev: &'a File,
    q: u16,
    depth: u16,
    buf_bytes: usize,
    // Dropped before the mappings (fields drop in order): the ring's teardown cancels the
    // commands that name the buffers.
    ring: IoUring,
    descs: Mapping,
    bufs: Mapping,
}

impl<'a> Setup<'a> {
    fn new(dev: &'a File, q: u16, depth: u16, buf_bytes: usize) -> io::Result<Setup<'a>> {
        assert!(depth > 0 && depth as usize <= abi::MAX_QUEUE_DEPTH);
        assert!(buf_bytes > 0 && buf_bytes.is_multiple_of(abi::page_size()));
        let desc_len = (depth as usize * size_of::<IoDesc>()).next_multiple_of(abi::page_size());
        let descs = Mapping::new(
            desc_len,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            dev.as_raw_fd(),
            abi::descriptors_offset(q),
        )?;
        // Not populated: a tag's buffer takes memory as far as its largest request reached
        // (depth x max_io is 64 MiB a queue by default, most of it never touched by 4 KiB I/O).
        let bufs = Mapping::new(
            depth as usize * buf_bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )?;
        // Cooperative task work: completions reach this thread when it enters the ring (it
        // always is, waiting), with no interrupt. Deferred task work (single issuer) measured
        // the same in the guest (docs/RESULTS.md), and needs 6.1+.
        let ring = IoUring::builder()
            .setup_coop_taskrun()
            .build(depth as u32)
            .or_else(|_| IoUring::new(depth as u32))?;
        Ok(Setup {
            dev,
            q,
            depth,
            buf_bytes,
            ring,
            descs,
            bufs,
        })
    }

    fn push(&mut self, op: u32, tag: u16, result: i32) {
        let cmd = IoCmd {
            q_id: self.q,
            tag,
            result,
            addr: self.bufs.base.as_ptr() as u64 + tag as u64 * self.buf_bytes as u64,
        };
        let sqe = opcode::UringCmd16::new(types::Fd(self.dev.as_raw_fd()), op)
            .cmd(abi::bytes_of::<IoCmd, 16>(&cmd))
            .build()
            .user_data(tag as u64);
        // SAFETY: the buffer `addr` names lives in `bufs`, which outlives the ring.
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        // One command per tag is outstanding at a time and the ring has a slot per tag.
        pushed.expect("a submission slot per tag");
    }

    fn descriptor(&self, tag: u16) -> IoDesc {
        assert!(tag < self.depth);
        // SAFETY: in bounds (tag < depth, the array has depth entries); the driver wrote this
        // entry before completing the tag's fetch, and a volatile read takes it as it is.
        unsafe {
            self.descs
                .base
                .as_ptr()
                .cast::<IoDesc>()
                .add(tag as usize)
                .read_volatile()
        }
    }

    /// The tag's data buffer.
    ///
    /// # Safety
    /// Only between the completion of the tag's fetch and the push of its commit: the driver
    /// reads or writes the buffer at other times.
    // A slice over a tag's buffer only while the driver cannot touch it (the caller's window).
    #[allow(clippy::disallowed_methods)]
    unsafe fn buffer(&mut self, tag: u16) -> &mut [u8] {
        assert!(tag < self.depth);
        // SAFETY: in bounds of `bufs` (depth buffers of buf_bytes); the caller guarantees the
        // driver is not using it, and &mut self makes this the only reference.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.bufs.base.as_ptr().add(tag as usize * self.buf_bytes),
                self.buf_bytes,
            )
        }
    }
}
