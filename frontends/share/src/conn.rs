//! One end of a client's connection: length-prefixed frames over a Unix stream socket, and a
//! descriptor passed beside a frame (`SCM_RIGHTS`: the pool file as proof of access, the other
//! end of a forked child's connection). The crate's system calls sit here, each `unsafe` block with its
//! argument (the only others: `client.rs`'s lock held across fork).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Longest frame: a data call carries at most [`crate::MAX_IO`] bytes, plus its header.
pub(crate) const MAX_FRAME: usize = crate::MAX_IO + 64 * 1024;

/// Bytes asked of the kernel per read when a frame's size is not known yet.
const READ_CHUNK: usize = 64 * 1024;

pub(crate) struct Conn {
    fd: UnixStream,
    /// Bytes read past the frames taken so far.
    buf: Vec<u8>,
    /// Descriptors received and not yet taken with a frame.
    fds: Vec<OwnedFd>,
    /// How long a read polls (non-blocking) before it sleeps in the kernel: a reply or the
    /// next request often comes within microseconds, and a wake-up from sleep costs tens of
    /// microseconds on a virtual machine.
    spin: std::time::Duration,
}

impl Conn {
    pub(crate) fn new(fd: UnixStream) -> Conn {
        Conn {
            fd,
            buf: Vec::new(),
            fds: Vec::new(),
            spin: spin_default(),
        }
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Put the socket on another high number (see [`out_of_the_way`]), closing this one; the
    /// new number.
    pub(crate) fn move_out_of_the_way(&mut self) -> io::Result<RawFd> {
        let moved = out_of_the_way(self.fd.try_clone()?);
        if moved.as_raw_fd() == self.fd.as_raw_fd() {
            return Err(io::Error::other("no free descriptor number to move to"));
        }
        self.fd = moved;
        Ok(self.fd.as_raw_fd())
    }

    /// Whether the other end closed (no wait).
    pub(crate) fn peer_gone(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: poll of one descriptor this connection owns, no timeout.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }

    /// Another handle of the socket (to shut it down from another thread).
    pub(crate) fn handle(&self) -> std::io::Result<UnixStream> {
        self.fd.try_clone()
    }

    /// Send `payload` as one frame, with `pass` beside it.
    pub(crate) fn send(&self, payload: &[u8], pass: Option<RawFd>) -> io::Result<()> {
        if payload.len() > MAX_FRAME {
            return Err(io::Error::other(format!(
                "a frame of {} bytes is over the limit of {MAX_FRAME}",
                payload.len()
            )));
        }
        let mut out = Vec::with_capacity(4 + payload.len());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(payload);
        let mut sent = send_with(self.raw(), &out, pass)?;
        while sent < out.len() {
            sent += send_with(self.raw(), &out[sent..], None)?;
        }
        Ok(())
    }

    /// The next frame and the descriptor passed with it; `None` at a clean end of stream.
    pub(crate) fn recv(&mut self) -> io::Result<Option<(Vec<u8>, Option<OwnedFd>)>> {
        loop {
            if self.buf.len() >= 4 {
                let n = u32::from_le_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
                if n > MAX_FRAME {
                    return Err(io::Error::other(format!(
                        "a frame of {n} bytes is over the limit of {MAX_FRAME}"
                    )));
                }
                if self.buf.len() >= 4 + n {
                    let rest = self.buf.split_off(4 + n);
                    let mut frame = std::mem::replace(&mut self.buf, rest);
                    frame.drain(..4);
                    return Ok(Some((frame, self.fds.pop())));
                }
                let want = (4 + n - self.buf.len()).max(READ_CHUNK);
                if !self.fill(want)? {
                    return Err(cut());
                }
            } else if !self.fill(READ_CHUNK)? {
                return match self.buf.is_empty() {
                    true => Ok(None),
                    false => Err(cut()),
                };
            }
        }
    }

    /// Read up to `want` more bytes into the buffer; false at the end of the stream.
    fn fill(&mut self, want: usize) -> io::Result<bool> {
        self.buf.reserve(want);
        let spare = self.buf.spare_capacity_mut().as_mut_ptr().cast();
        let sock = self.fd.as_raw_fd();
        let t = std::time::Instant::now();
        let (n, fd) = loop {
            if t.elapsed() >= self.spin {
                break recv_with(sock, spare, want, 0)?;
            }
            match recv_with(sock, spare, want, libc::MSG_DONTWAIT) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                r => break r?,
            }
        };
        // SAFETY: recvmsg wrote `n` <= `want` bytes into the spare capacity reserved above.
        unsafe { self.buf.set_len(self.buf.len() + n) };
        self.fds.extend(fd);
        Ok(n > 0)
    }
}

/// The poll before a read sleeps: `PMKIT_SHARE_SPIN_US` microseconds (0: none), else 100.
pub(crate) fn spin_default() -> std::time::Duration {
    static US: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let us = *US.get_or_init(|| {
        std::env::var("PMKIT_SHARE_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100)
            .min(10_000)
    });
    std::time::Duration::from_micros(us)
}

fn cut() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the other end closed the connection inside a frame",
    )
}

/// Room for one descriptor's control message.
#[repr(C, align(8))]
struct Cmsg([u8; 64]);

fn send_with(sock: RawFd, data: &[u8], pass: Option<RawFd>) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    let mut cbuf = Cmsg([0; 64]);
    // SAFETY: a zeroed msghdr is valid (no name, no control) before the fields set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = pass {
        // SAFETY: CMSG_SPACE/LEN are pure arithmetic; the buffer holds CMSG_SPACE(4) < 64 bytes,
        // aligned for cmsghdr, and CMSG_FIRSTHDR of a msghdr whose control is that buffer points
        // inside it.
        unsafe {
            msg.msg_control = cbuf.0.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as usize;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        }
    }
    loop {
        // SAFETY: msg points at live buffers (iov over `data`, control in `cbuf`) for the call.
        let r = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn recv_with(
    sock: RawFd,
    into: *mut u8,
    len: usize,
    flags: i32,
) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: into.cast(),
        iov_len: len,
    };
    let mut cbuf = Cmsg([0; 64]);
    // SAFETY: as in send_with.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.0.len();
    let n = loop {
        // SAFETY: `into` has room for `len` bytes (the caller reserved them); control is cbuf.
        let r = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC | flags) };
        if r >= 0 {
            break r as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut got = None;
    // SAFETY: walking the control messages recvmsg wrote into cbuf with the CMSG macros, which
    // stay inside msg_controllen; SCM_RIGHTS data holds descriptors now owned by this process.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count =
                    ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>().add(i));
                    let owned = OwnedFd::from_raw_fd(fd);
                    // One descriptor per frame is the protocol; extra ones are closed.
                    if got.is_none() {
                        got = Some(owned);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n, got))
}

/// The access mode (`O_RDONLY`, `O_WRONLY`, `O_RDWR`) `fd` was opened with.
pub(crate) fn access_mode(fd: &OwnedFd) -> io::Result<i32> {
    // SAFETY: F_GETFL on a descriptor this process owns reads its flags and touches no memory.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r & libc::O_ACCMODE)
}

/// Set or clear close-on-exec on `fd`.
pub(crate) fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD change only the descriptor's flags; no memory is touched.
    let r = unsafe {
        let f = libc::fcntl(fd, libc::F_GETFD);
        if f < 0 {
            f
        } else {
            let f = if on {
                f | libc::FD_CLOEXEC
            } else {
                f & !libc::FD_CLOEXEC
            };
            libc::fcntl(fd, libc::F_SETFD, f)
        }
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Move `s` to a high descriptor number (close-on-exec), out of the way of the low numbers
/// programs choose themselves (a shell's `exec 3<file`, `dup2(fd, 4)`): the lowest free number
/// at or above three quarters of the process's descriptor limit (at most 4096). Where none is
/// free there, `s` stays where it is.
pub(crate) fn out_of_the_way(s: UnixStream) -> UnixStream {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    let low = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        (lim.rlim_cur.min(4096) as i32 * 3 / 4).max(3)
    } else {
        3
    };
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor of a socket this process owns; the new
    // one is owned by the returned stream.
    let fd = unsafe { libc::fcntl(s.as_raw_fd(), libc::F_DUPFD_CLOEXEC, low) };
    if fd < 0 {
        return s;
    }
    // SAFETY: `fd` was just made and is owned by nothing else.
    unsafe { UnixStream::from_raw_fd(fd) }
}
