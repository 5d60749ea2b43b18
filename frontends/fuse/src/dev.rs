//! The /dev/fuse transport. fuser mounts the file system and answers the INIT handshake
//! (`fuser::Session::new`, through [`Served`]'s `init`); from then on this module's workers
//! read the requests themselves, a worker per descriptor (the session's, and clones made with
//! `FUSE_DEV_IOC_CLONE` so each has its own queue of requests in processing), and answer each
//! through the decoder the io_uring queues use (`answer.rs`): one reading of the protocol for
//! both transports, and every request the kernel sends reaches the file system (fuser's own
//! dispatcher has no TMPFILE, for one). FORGET and BATCH_FORGET, which take no reply, are
//! handed to [`Ops::forget`] here; INTERRUPT is not acted on (a request runs to its end).
//! Under io_uring the workers still serve what the kernel sends over /dev/fuse (forgets,
//! interrupts).

use crate::abi::{self, op, u32_at, u64_at, InHeader, IN_HEADER_LEN};
use crate::answer::answer_caught;
use crate::ops::Ops;
use fuser::{Filesystem, InitFlags, KernelConfig, Request};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// fuser's file system over `O`: only INIT goes through fuser.
pub struct Served<O: Ops + 'static> {
    ops: Arc<O>,
    /// Ask the kernel for FUSE over io_uring at INIT; set to whether it was granted.
    uring: Arc<AtomicBool>,
}

impl<O: Ops + 'static> Served<O> {
    /// A file system that asks for FUSE over io_uring at INIT when `want_uring`; the flag
    /// reads true after the handshake when the kernel granted it.
    pub fn new(ops: Arc<O>, want_uring: bool) -> (Served<O>, Arc<AtomicBool>) {
        let uring = Arc::new(AtomicBool::new(want_uring));
        (
            Served {
                ops,
                uring: Arc::clone(&uring),
            },
            uring,
        )
    }

    pub fn ops(&self) -> &Arc<O> {
        &self.ops
    }
}

impl<O: Ops + 'static> Filesystem for Served<O> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        self.ops.init(config);
        // FUSE over io_uring: the kernel offers it only where it is built in and enabled
        // (/sys/module/fuse/parameters/enable_uring); whether it was granted decides the
        // transport.
        if self.uring.load(Ordering::Relaxed) {
            let granted = config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok();
            self.uring.store(granted, Ordering::Release);
        }
        Ok(())
    }
}

/// A worker's buffer: the largest request (a WRITE of the largest `max_write` either file
/// system asks at INIT, with its headers) and the largest reply (a READ as large); the kernel
/// refuses a read of /dev/fuse into less than its `max_write` plus headers.
const BUF: usize = abi::MAX_PAYLOAD as usize + 64 * 1024;

/// The most workers one mount runs.
pub const MAX_WORKERS: usize = 64;

/// `FUSE_DEV_IOC_CLONE` (`_IOR(229, 0, uint32_t)`): a new /dev/fuse descriptor on the same
/// connection, with its own queue of requests in processing.
const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;

/// The /dev/fuse workers of a mounted session, and the session (dropping it unmounts).
pub struct Workers {
    threads: Vec<JoinHandle<()>>,
    /// fuser's session, held for its mount: dropped (unmounting, if still mounted) after the
    /// workers are joined.
    session: Option<Box<dyn Send>>,
}

impl Workers {
    /// Serve `session`'s connection with `n` workers (1 to [`MAX_WORKERS`]) answering through
    /// `ops`.
    pub fn start<O: Ops + 'static>(
        session: fuser::Session<Served<O>>,
        ops: Arc<O>,
        n: usize,
    ) -> io::Result<Workers> {
        let n = n.clamp(1, MAX_WORKERS);
        let mut fds = vec![session.as_fd().try_clone_to_owned()?];
        for _ in 1..n {
            fds.push(clone_fd(&fds[0])?);
        }
        let mut threads = Vec::with_capacity(n);
        for (i, fd) in fds.into_iter().enumerate() {
            let ops = Arc::clone(&ops);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fuse-dev-{i}"))
                    .spawn(move || serve(fd, &*ops))?,
            );
        }
        Ok(Workers {
            threads,
            session: Some(Box::new(session)),
        })
    }

    /// Every worker has ended (the connection is gone: unmounted or aborted).
    pub fn is_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Wait for the workers to end (after the unmount), then let the session go.
    pub fn join(mut self) -> io::Result<()> {
        let mut r = Ok(());
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                r = Err(io::Error::other("a /dev/fuse worker panicked"));
            }
        }
        drop(self.session.take());
        r
    }
}

/// A clone of `fd`, the session's /dev/fuse descriptor.
fn clone_fd(fd: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: open(2) of a constant path; the descriptor is owned below.
    let raw = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor of ours.
    let new = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut old = fd.as_raw_fd() as u32;
    // SAFETY: the ioctl reads one u32 (the descriptor to clone) from a live local.
    if unsafe { libc::ioctl(new.as_raw_fd(), FUSE_DEV_IOC_CLONE, &mut old) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(new)
}

/// Read and answer requests on `fd` until the connection ends.
fn serve<O: Ops + 'static>(fd: OwnedFd, ops: &O) {
    let mut buf = vec![0u8; BUF];
    loop {
        // SAFETY: a read into our own buffer of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                // Interrupted, or a request withdrawn before we took it: read again.
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                // Unmounted, or the connection aborted.
                Some(libc::ENODEV) => return,
                e => {
                    tracing::error!("reading /dev/fuse failed ({e:?}): this worker stops");
                    return;
                }
            }
        }
        let n = n as usize;
        if n < IN_HEADER_LEN {
            tracing::error!("a FUSE request of {n} bytes: ignored");
            continue;
        }
        if let Some((unique, errno, at, len)) = one(ops, &mut buf, n) {
            reply(&fd, unique, errno, &buf[at..at + len]);
        }
    }
}

/// Answer the request in `buf[..n]`; the reply (its id, errno, and where its bytes lie in
/// `buf`: offset and length), or `None` for a request that takes none.
fn one<O: Ops + 'static>(ops: &O, buf: &mut [u8], n: usize) -> Option<(u64, i32, usize, usize)> {
    let opcode = u32_at(buf, 4);
    let nodeid = u64_at(buf, 16);
    match opcode {
        // fuse_forget_in: nlookup.
        op::FORGET => {
            forget(ops, &[(nodeid, u64_at(buf, IN_HEADER_LEN))]);
            return None;
        }
        // fuse_batch_forget_in: count; then count fuse_forget_one (nodeid, nlookup).
        op::BATCH_FORGET => {
            let count = u32_at(buf, IN_HEADER_LEN) as usize;
            let at = IN_HEADER_LEN + 8;
            let count = count.min(n.saturating_sub(at) / 16);
            let all: Vec<(u64, u64)> = (0..count)
                .map(|i| (u64_at(buf, at + 16 * i), u64_at(buf, at + 16 * i + 8)))
                .collect();
            forget(ops, &all);
            return None;
        }
        op::INTERRUPT | op::NOTIFY_REPLY => return None,
        _ => {}
    }
    let op_len = abi::op_in_len(opcode).min(n - IN_HEADER_LEN);
    // The in-struct, zero-padded as a ring entry's (a handler may read fields a shorter,
    // older struct lacks). The payload stays where it was read (a WRITE's data is not moved),
    // and the reply is written over it.
    let mut op_in = [0u8; 128];
    op_in[..op_len].copy_from_slice(&buf[IN_HEADER_LEN..IN_HEADER_LEN + op_len]);
    let at = IN_HEADER_LEN + op_len;
    let h = InHeader::from_dev(buf, (n - at) as u32);
    let (errno, len) = answer_caught(ops, &h, &op_in, &mut buf[at..]);
    Some((h.unique, errno, at, len as usize))
}

fn forget<O: Ops>(ops: &O, all: &[(u64, u64)]) {
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for &(ino, n) in all {
            ops.forget(ino, n);
        }
    }));
    if done.is_err() {
        tracing::error!("FUSE FORGET panicked; serving on");
    }
}

/// Write the reply: `fuse_out_header`, then `data` (none for an error).
fn reply(fd: &OwnedFd, unique: u64, errno: i32, data: &[u8]) {
    let data = if errno == 0 { data } else { &[][..] };
    let head = abi::out_header(unique, errno, data.len() as u32);
    let iov = [
        libc::iovec {
            iov_base: head.as_ptr() as *mut libc::c_void,
            iov_len: head.len(),
        },
        libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        },
    ];
    // SAFETY: both slices outlive the call; writev only reads them.
    let r = unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), 2) };
    if r < 0 {
        let e = io::Error::last_os_error();
        // ENOENT: the request was interrupted and is gone. ENODEV: the connection ended.
        if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV)) {
            tracing::warn!("replying to FUSE request {unique} failed: {e}");
        }
    }
}
