//! One connection's transmission phase, in the two execution models of [`crate::IoModel`].
//!
//! Both read the socket through [`InBuf`], a large buffer that one `read` fills with every request
//! the client has sent so far, so a client with many requests in flight costs one syscall per batch
//! rather than per request. Write payloads are used in place when they are in the buffer.

use crate::backend::BlockBackend;
use crate::config::Export;
use crate::exec::{plan, put_error, ConnStats, Executor, OutBuf, Plan};
use crate::handshake::Session;
use crate::proto::{parse_request, Request, CMD_WRITE, REQUEST_LEN};
use parking_lot::Mutex;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Input buffer size: big enough that a read picks up a deep queue of 4 KiB writes or several
/// 256 KiB ones; larger write payloads go through a separate buffer.
pub const IN_BUF: usize = 1 << 20;
/// Replies are sent when this many bytes are queued, or earlier when there is no more input.
pub const OUT_FLUSH: usize = 256 << 10;
/// Bytes skipped per read when draining a rejected write's payload.
const DRAIN_CHUNK: usize = 64 << 10;

#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("I/O: {0}")]
    Io(#[from] io::Error),
    #[error("request has a bad magic number; framing is lost")]
    BadMagic,
    #[error("client disconnected in the middle of a request")]
    Truncated,
    #[error("protocol violation: {0}")]
    Fatal(String),
    #[error("the client sent nothing for the idle timeout")]
    IdleTimeout,
}

/// A read that failed: a receive timeout (`SO_RCVTIMEO`, set to the idle timeout in the
/// transmission phase) is the client being idle, anything else an I/O error.
fn read_error(e: io::Error) -> ConnError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ConnError::IdleTimeout,
        _ => ConnError::Io(e),
    }
}

/// A byte stream that can also be read without blocking.
pub trait ReadNowait: Read {
    /// Read what is waiting, without blocking: `Ok(None)` when nothing is (yet). Streams that
    /// cannot do that block like `read` (the default).
    fn read_nowait(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.read(buf).map(Some)
    }
}

/// `recv(2)` with `MSG_DONTWAIT` on a stream socket.
fn recv_nowait(fd: std::os::fd::RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration of the call.
    let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if r >= 0 {
        return Ok(Some(r as usize));
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::WouldBlock => Ok(None),
        io::ErrorKind::Interrupted => Ok(None),
        _ => Err(e),
    }
}

impl ReadNowait for std::os::unix::net::UnixStream {
    fn read_nowait(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        recv_nowait(std::os::fd::AsRawFd::as_raw_fd(self), buf)
    }
}

impl ReadNowait for std::net::TcpStream {
    fn read_nowait(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        recv_nowait(std::os::fd::AsRawFd::as_raw_fd(self), buf)
    }
}

/// A TLS stream holds records the socket no longer shows, so it cannot be polled with `recv`: it
/// blocks like `read`. (Busy-polling is off by default.)
impl<S: Read + Write> ReadNowait for openssl::ssl::SslStream<S> {}

/// A byte stream the server can split between threads and shut down from outside.
pub trait Transport: Read + Write + ReadNowait + Send + Sync + 'static {
    fn try_clone(&self) -> io::Result<Self>
    where
        Self: Sized;
    fn shutdown(&self, how: Shutdown) -> io::Result<()>;
    fn set_read_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()>;
}

impl Transport for std::os::unix::net::UnixStream {
    fn try_clone(&self) -> io::Result<Self> {
        std::os::unix::net::UnixStream::try_clone(self)
    }
    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        std::os::unix::net::UnixStream::shutdown(self, how)
    }
    fn set_read_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_write_timeout(self, t)
    }
}

impl Transport for std::net::TcpStream {
    fn try_clone(&self) -> io::Result<Self> {
        std::net::TcpStream::try_clone(self)
    }
    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        std::net::TcpStream::shutdown(self, how)
    }
    fn set_read_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        std::net::TcpStream::set_write_timeout(self, t)
    }
}

/// A read buffer: `buf[start..end]` holds received, unconsumed bytes.
pub struct InBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl InBuf {
    pub fn new(cap: usize) -> Self {
        InBuf {
            buf: vec![0; cap],
            start: 0,
            end: 0,
        }
    }
    pub fn available(&self) -> usize {
        self.end - self.start
    }
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }
    pub fn peek(&self, n: usize) -> &[u8] {
        &self.buf[self.start..self.start + n]
    }
    pub fn consume(&mut self, n: usize) {
        assert!(n <= self.available());
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
    /// One read into the free space (moving pending bytes to the front first if the tail is
    /// short). Returns the bytes read; 0 is EOF. When nothing is waiting, the socket is polled
    /// for up to `poll` before the read blocks: sleeping and being woken costs a context switch
    /// on each side, and a client with requests in flight usually sends the next one within
    /// microseconds.
    fn read_once<R: ReadNowait>(&mut self, r: &mut R, poll: Duration) -> io::Result<usize> {
        if self.buf.len() - self.end < REQUEST_LEN.max(self.buf.len() / 4) && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        debug_assert!(self.end < self.buf.len());
        if !poll.is_zero() {
            let t0 = Instant::now();
            loop {
                if let Some(n) = r.read_nowait(&mut self.buf[self.end..])? {
                    self.end += n;
                    return Ok(n);
                }
                if t0.elapsed() >= poll {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        loop {
            match r.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Why a fill stopped short.
enum Fill {
    Ready,
    /// Clean EOF (nothing partial pending) or the server is stopping.
    End,
}

/// Make at least `need` bytes (<= capacity) available. Before every read, queued replies in
/// `pending` are sent: the thread is about to wait for the client, which may be waiting for them.
/// `mid_message` says the bytes wanted belong to a request already started: EOF there is an error.
fn fill<S: Read + Write + ReadNowait>(
    s: &mut S,
    inb: &mut InBuf,
    need: usize,
    stop: &AtomicBool,
    mid_message: bool,
    pending: &mut OutBuf,
    poll: Duration,
) -> Result<Fill, ConnError> {
    assert!(need <= inb.capacity());
    while inb.available() < need {
        // Once the server stops, requests not yet received are not started (they get no reply;
        // the client sees the connection close).
        if stop.load(Ordering::Acquire) {
            return Ok(Fill::End);
        }
        send(s, pending)?;
        if inb.read_once(s, poll).map_err(read_error)? == 0 {
            return if mid_message || inb.available() > 0 {
                Err(ConnError::Truncated)
            } else {
                Ok(Fill::End)
            };
        }
    }
    Ok(Fill::Ready)
}

fn send<W: Write>(w: &mut W, out: &mut OutBuf) -> io::Result<()> {
    if !out.is_empty() {
        w.write_all(out.as_slice())?;
        out.clear();
    }
    Ok(())
}

/// Read and discard `n` payload bytes (the buffered ones first).
fn drain<R: Read>(r: &mut R, inb: &mut InBuf, mut n: usize) -> Result<(), ConnError> {
    let have = inb.available().min(n);
    inb.consume(have);
    n -= have;
    let mut junk = [0u8; DRAIN_CHUNK];
    while n > 0 {
        let want = n.min(DRAIN_CHUNK);
        match r.read(&mut junk[..want]) {
            Ok(0) => return Err(ConnError::Truncated),
            Ok(k) => n -= k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(read_error(e)),
        }
    }
    Ok(())
}

/// Copy a payload larger than the input buffer into `dst`: the buffered part, then the rest
/// straight from the socket.
fn read_big_payload<R: Read>(
    r: &mut R,
    inb: &mut InBuf,
    dst: &mut Vec<u8>,
    n: usize,
) -> Result<(), ConnError> {
    dst.clear();
    dst.resize(n, 0);
    let have = inb.available().min(n);
    dst[..have].copy_from_slice(inb.peek(have));
    inb.consume(have);
    r.read_exact(&mut dst[have..]).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ConnError::Truncated
        } else {
            read_error(e)
        }
    })
}

fn next_request<S: Read + Write + ReadNowait>(
    s: &mut S,
    inb: &mut InBuf,
    stop: &AtomicBool,
    pending: &mut OutBuf,
    poll: Duration,
) -> Result<Option<Request>, ConnError> {
    if let Fill::End = fill(s, inb, REQUEST_LEN, stop, false, pending, poll)? {
        return Ok(None);
    }
    let req = parse_request(inb.peek(REQUEST_LEN)).ok_or(ConnError::BadMagic)?;
    inb.consume(REQUEST_LEN);
    Ok(Some(req))
}

/// The inline model: this thread reads, executes and replies. Replies are queued in `out` and
/// sent when the thread is about to wait for input (or when `OUT_FLUSH` bytes are queued); then
/// it polls the socket for up to `poll` before it blocks.
///
/// Returns the connection's statistics however it ended (DISC, end-of-file, a reset, a timeout,
/// a protocol error) together with how it ended: a client that drops the socket without
/// `NBD_CMD_DISC` did real work that the server's totals must count.
pub fn serve_inline<S: Read + Write + ReadNowait, B: BlockBackend>(
    s: &mut S,
    backend: &B,
    export: &Export,
    session: Session,
    stop: &AtomicBool,
    poll: Duration,
) -> (ConnStats, Result<(), ConnError>) {
    let mut inb = InBuf::new(IN_BUF);
    let mut out = OutBuf::with_capacity(OUT_FLUSH + (64 << 10));
    let mut big = Vec::new();
    let mut ex = Executor::new(backend, export, session);
    let result = (|| -> Result<(), ConnError> {
        loop {
            let Some(req) = next_request(s, &mut inb, stop, &mut out, poll)? else {
                return Ok(());
            };
            match plan(&req, export, &ex.session) {
                Plan::Execute if req.typ == CMD_WRITE => {
                    let n = req.len as usize;
                    if n <= inb.capacity() {
                        if let Fill::End = fill(s, &mut inb, n, stop, true, &mut out, poll)? {
                            return Ok(());
                        }
                        ex.execute(&req, inb.peek(n), &mut out);
                        inb.consume(n);
                    } else {
                        send(s, &mut out)?;
                        read_big_payload(s, &mut inb, &mut big, n)?;
                        ex.execute(&req, &big, &mut out);
                    }
                }
                Plan::Execute => ex.execute(&req, &[], &mut out),
                Plan::Reject { reject, drain: n } => {
                    if n > 0 {
                        send(s, &mut out)?;
                        drain(s, &mut inb, n as usize)?;
                    }
                    ex.stats.requests += 1;
                    ex.stats.errors += 1;
                    tracing::debug!(handle = req.handle, error = %reject.msg, "nbd request rejected");
                    put_error(&mut out, &ex.session, req.handle, reject.errno, &reject.msg);
                }
                Plan::Disconnect => return Ok(()),
                Plan::Fatal(reject) => {
                    put_error(&mut out, &ex.session, req.handle, reject.errno, &reject.msg);
                    return Err(ConnError::Fatal(reject.msg));
                }
            }
            if out.len() >= OUT_FLUSH {
                send(s, &mut out)?;
            }
        }
    })();
    // Replies to everything executed go out even when the loop ended on an error.
    let flushed = send(s, &mut out);
    (ex.stats, result.and(flushed.map_err(ConnError::from)))
}

/// A unit of work handed from the reader to the workers.
enum Job {
    Run {
        req: Request,
        payload: Vec<u8>,
    },
    Reject {
        handle: u64,
        errno: u32,
        msg: String,
    },
}

/// The threaded model: this thread reads and parses; `workers` threads execute and reply.
/// At most `max_inflight` requests wait between the two (the reader blocks when the queue is full).
/// Like [`serve_inline`], the statistics come back however the connection ended.
pub fn serve_threaded<T: Transport, B: BlockBackend>(
    s: &mut T,
    backend: &B,
    export: &Export,
    session: Session,
    stop: &AtomicBool,
    workers: usize,
    max_inflight: usize,
) -> (ConnStats, Result<(), ConnError>) {
    assert!(workers >= 1 && max_inflight >= 1);
    let clones = s.try_clone().and_then(|w| Ok((w, s.try_clone()?)));
    let (writer, shutdown_handle) = match clones {
        Ok((w, h)) => (Mutex::new(w), h),
        Err(e) => return (ConnStats::default(), Err(e.into())),
    };
    let (tx, rx) = mpsc::sync_channel::<Job>(max_inflight);
    let rx = Mutex::new(rx);
    // Recycled payload buffers, so a steady write load allocates nothing.
    let pool: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
    let dead = AtomicBool::new(false);

    std::thread::scope(|sc| {
        let mut handles = Vec::with_capacity(workers);
        for i in 0..workers {
            let (rx, writer, pool, dead, shutdown_handle) =
                (&rx, &writer, &pool, &dead, &shutdown_handle);
            let h = std::thread::Builder::new()
                .name(format!("nbd-worker-{i}"))
                .spawn_scoped(sc, move || {
                    let mut ex = Executor::new(backend, export, session);
                    let mut out = OutBuf::with_capacity(OUT_FLUSH + (64 << 10));
                    let run = |job: Job, out: &mut OutBuf, ex: &mut Executor<B>| match job {
                        Job::Run { req, payload } => {
                            ex.execute(&req, &payload, out);
                            if payload.capacity() > 0 {
                                let mut p = pool.lock();
                                if p.len() < max_inflight {
                                    p.push(payload);
                                }
                            }
                        }
                        Job::Reject { handle, errno, msg } => {
                            ex.stats.requests += 1;
                            ex.stats.errors += 1;
                            put_error(out, &ex.session, handle, errno, &msg);
                        }
                    };
                    loop {
                        let job = rx.lock().recv();
                        let Ok(job) = job else { break };
                        run(job, &mut out, &mut ex);
                        // Coalesce replies while more work is already queued. try_lock: if
                        // another worker holds the queue it is waiting for work, so there is none
                        // (and blocking here would hold our replies back until the client sends).
                        while out.len() < OUT_FLUSH {
                            let next = match rx.try_lock() {
                                Some(q) => q.try_recv(),
                                None => break,
                            };
                            match next {
                                Ok(j) => run(j, &mut out, &mut ex),
                                Err(_) => break,
                            }
                        }
                        if dead.load(Ordering::Relaxed) {
                            out.clear();
                            continue; // keep draining the queue so the reader never blocks forever
                        }
                        if let Err(e) = writer.lock().write_all(out.as_slice()) {
                            tracing::debug!(error = %e, "nbd: sending replies failed; closing connection");
                            dead.store(true, Ordering::Relaxed);
                            let _ = shutdown_handle.shutdown(Shutdown::Both);
                        }
                        out.clear();
                    }
                    ex.stats
                })
                .expect("spawn nbd worker thread");
            handles.push(h);
        }

        let read_result = (|| -> Result<(), ConnError> {
            let mut inb = InBuf::new(IN_BUF);
            // The reader never has replies of its own to send.
            let mut nothing = OutBuf::default();
            loop {
                if dead.load(Ordering::Relaxed) {
                    return Ok(());
                }
                let Some(req) = next_request(s, &mut inb, stop, &mut nothing, Duration::ZERO)?
                else {
                    return Ok(());
                };
                let job = match plan(&req, export, &session) {
                    Plan::Execute if req.typ == CMD_WRITE => {
                        let n = req.len as usize;
                        let mut payload = pool.lock().pop().unwrap_or_default();
                        if n <= inb.capacity() {
                            if let Fill::End =
                                fill(s, &mut inb, n, stop, true, &mut nothing, Duration::ZERO)?
                            {
                                return Ok(());
                            }
                            payload.clear();
                            payload.extend_from_slice(inb.peek(n));
                            inb.consume(n);
                        } else {
                            read_big_payload(s, &mut inb, &mut payload, n)?;
                        }
                        Job::Run { req, payload }
                    }
                    Plan::Execute => Job::Run {
                        req,
                        payload: Vec::new(),
                    },
                    Plan::Reject { reject, drain: n } => {
                        drain(s, &mut inb, n as usize)?;
                        Job::Reject {
                            handle: req.handle,
                            errno: reject.errno,
                            msg: reject.msg,
                        }
                    }
                    Plan::Disconnect => return Ok(()),
                    Plan::Fatal(reject) => {
                        let _ = tx.send(Job::Reject {
                            handle: req.handle,
                            errno: reject.errno,
                            msg: reject.msg.clone(),
                        });
                        return Err(ConnError::Fatal(reject.msg));
                    }
                };
                if tx.send(job).is_err() {
                    return Ok(());
                }
            }
        })();
        drop(tx); // workers finish what is queued, send the replies, and exit
        let mut stats = ConnStats::default();
        for h in handles {
            let w = h.join().expect("nbd worker panicked");
            stats.requests += w.requests;
            stats.errors += w.errors;
            stats.bytes_read += w.bytes_read;
            stats.bytes_written += w.bytes_written;
        }
        (stats, read_result)
    })
}
