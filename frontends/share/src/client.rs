//! A client of a pool's server: one connection per process, one call at a time on it (a
//! lock; a multi-threaded client's calls take turns), and the fork hand-off.

use crate::api::{PoolApi, Special, Transport};
use crate::conn::Conn;
use crate::link::Link;
use crate::Message;
use parking_lot::Mutex;
use pmkit_fs::posix::{Cred, Fd, MapView};
use pmkit_fs::{Attr, DirEntry, Error, Result, StatFs};
use serde::de::DeserializeOwned;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// A connection to the server of one pool.
pub struct Client {
    /// `None` once the connection is lost (every call then fails with EIO).
    conn: Mutex<Option<Link>>,
    /// Between `fork_prepare` and the fork: this end of the child's connection.
    pending: Mutex<Option<OwnedFd>>,
    /// The process whose connection `conn` is: a `vfork` child shares this memory but not the
    /// connection's session (see [`Client::session_for_exec`]).
    pid: std::sync::atomic::AtomicI32,
    /// The connection's descriptor number (-1: none), read without the lock by the shim's
    /// `close`, which must never close it for the program (see [`Client::socket`]).
    sock: std::sync::atomic::AtomicI32,
    /// Pool files mapped here (`views.rs`).
    views: crate::views::Views,
    /// Reads in place (`direct.rs`).
    direct: crate::direct::Direct,
    /// The session has taken a record lock, OFD lock or flock: its closes go at once (see
    /// "Closes" below).
    locked: std::sync::atomic::AtomicBool,
}

fn getpid() -> i32 {
    // SAFETY: getpid cannot fail (glibc does not cache it: a vfork child sees its own).
    unsafe { libc::getpid() }
}

/// A transport failure as the errno a caller sees.
fn lost(e: &io::Error) -> Error {
    tracing::warn!("the pool's server connection failed: {e}");
    Error::Remote(libc::EIO)
}

impl Client {
    /// Connect to the server of the pool file at `pool`, proving access with `pool_fd` (the
    /// pool file opened read-write by this process). `ConnectionRefused`/`NotFound`: no server
    /// serves it.
    pub fn connect(
        pool: &Path,
        pool_fd: RawFd,
        cred: Option<Cred>,
        path_max: usize,
    ) -> io::Result<Client> {
        let s = UnixStream::connect_addr(&crate::address(pool)?)?;
        let mut conn = Conn::new(crate::conn::out_of_the_way(s));
        let conn_fd = conn.raw();
        let hello = Message::Hello {
            protocol: crate::PROTOCOL,
            cred,
            path_max: path_max as u64,
        };
        conn.send(
            &postcard::to_allocvec(&hello).expect("encodes"),
            Some(pool_fd),
        )?;
        let reply = conn.recv()?.ok_or_else(|| {
            io::Error::new(io::ErrorKind::ConnectionReset, "the server closed at hello")
        })?;
        // The server's free epoch comes with the reply (none from a server without one).
        let epoch = reply.1.and_then(|fd| crate::epoch::Epoch::open(fd).ok());
        match postcard::from_bytes::<std::result::Result<(), i32>>(&reply.0) {
            Ok(Ok(())) => Ok(Client {
                conn: Mutex::new(Some(Link::new(conn))),
                pending: Mutex::new(None),
                pid: getpid().into(),
                sock: conn_fd.into(),
                views: crate::views::Views::new(pool),
                direct: crate::direct::Direct::new(pool, epoch),
                locked: false.into(),
            }),
            Ok(Err(n)) => Err(io::Error::from_raw_os_error(n)),
            Err(e) => Err(io::Error::other(format!("a bad hello reply: {e}"))),
        }
    }

    /// Take up a session this process inherited across exec: `fd` is the connection the
    /// program before exec used (named in its environment), `keep` the descriptors that
    /// survived exec (the rest are closed in the session). Fails, changing nothing in the
    /// session, when `fd` is not a live connection to a pool's server.
    pub fn adopt(fd: OwnedFd, keep: &[Fd], pool: &Path) -> io::Result<Client> {
        let s = UnixStream::from(fd);
        crate::conn::set_cloexec(s.as_raw_fd(), true)?;
        let sock = s.as_raw_fd();
        let mut conn = Conn::new(s);
        let epoch = epoch_of(&mut conn)?;
        let c = Client {
            sock: sock.into(),
            conn: Mutex::new(Some(Link::new(conn))),
            pending: Mutex::new(None),
            pid: getpid().into(),
            views: crate::views::Views::new(pool),
            direct: crate::direct::Direct::new(pool, epoch),
            locked: false.into(),
        };
        match c.special::<(String, u64)>(Special::Ping) {
            Ok((h, p)) if h == crate::HELLO && p == crate::PROTOCOL => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the inherited descriptor is not a pool server's connection",
                ))
            }
        }
        c.special::<()>(Special::Keep(keep.to_vec()))
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
        Ok(c)
    }

    /// The connection the program that this process is about to exec should adopt (see
    /// [`Client::adopt`]), and whether it is a new one (to close if exec fails). This
    /// process's own, unless this is a `vfork` child: that shares its parent's memory and so
    /// this client, but must not take the parent's session, so it gets a new connection with
    /// a fork of it. `spawn`: always a new one (for `posix_spawn`, whose child this process is
    /// not). `None` once the connection is lost.
    pub fn session_for_exec(&self, spawn: bool) -> Option<(RawFd, Option<OwnedFd>)> {
        if !spawn && getpid() == self.pid.load(std::sync::atomic::Ordering::Relaxed) {
            // The next program takes the session over the socket and makes its own channel.
            let mut g = self.conn.lock();
            let link = g.as_mut()?;
            link.close_channel();
            return Some((link.conn.raw(), None));
        }
        let fd = self.fork_session()?;
        Some((std::os::fd::AsRawFd::as_raw_fd(&fd), Some(fd)))
    }

    /// Whether the session has taken a lock (its closes then go at once; see "Closes").
    /// Passed across exec, where the next program takes the session and its locks over.
    pub fn holds_locks(&self) -> bool {
        self.locked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The session holds locks taken before exec: close at once from now on.
    pub fn took_locks(&self) {
        self.locked
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many `pread`s this process answered in place (from PM, checked against the server's
    /// free epoch) rather than by a call.
    pub fn reads_in_place(&self) -> u64 {
        self.direct.hits()
    }

    /// The connection's descriptor number, or -1. A program must not close it (the shim's
    /// `close` of it succeeds and closes nothing) nor take its number (the shim moves it
    /// first: [`Client::move_socket`]).
    pub fn socket(&self) -> RawFd {
        self.sock.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Move the connection to another descriptor number (the program is about to `dup2` onto
    /// this one).
    pub fn move_socket(&self) {
        let mut g = self.conn.lock();
        if let Some(c) = g.as_mut() {
            if let Ok(fd) = c.conn.move_out_of_the_way() {
                self.sock.store(fd, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// A new connection whose session is a fork of this one's.
    fn fork_session(&self) -> Option<OwnedFd> {
        let mut g = self.conn.lock();
        let link = g.as_mut()?;
        let (ours, theirs) = UnixStream::pair().ok()?;
        let ours = crate::conn::out_of_the_way(ours);
        let m = postcard::to_allocvec(&Message::Fork).expect("encodes");
        let frame = link.round_trip(&m, Some(theirs.as_raw_fd())).ok()?;
        drop(theirs);
        match postcard::from_bytes::<std::result::Result<(), i32>>(&frame) {
            Ok(Ok(())) => Some(OwnedFd::from(ours)),
            _ => None,
        }
    }

    fn special<T: DeserializeOwned>(&self, s: Special) -> Result<T> {
        self.call(&Message::Special(s))
    }

    /// Before fork, in the parent: hold the connection (no call half done when the child is
    /// made) and ask the server for the child's session on a new connection, whose other end
    /// this process keeps until [`Client::fork_parent`] or [`Client::fork_child`].
    pub fn fork_prepare(&self) {
        let pending = self.fork_session();
        *self.pending.lock() = pending;
        // Held across the fork (no call half done in the child): released by fork_parent /
        // fork_child.
        std::mem::forget(self.conn.lock());
    }

    /// After fork, in the parent: the child's end is the child's alone.
    pub fn fork_parent(&self) {
        drop(self.pending.lock().take());
        // SAFETY: fork_prepare left the lock held by this thread (the one that forked).
        unsafe { self.conn.force_unlock() };
    }

    /// After fork, in the child: use the new connection (none: every call fails with EIO,
    /// never a call on the parent's connection).
    pub fn fork_child(&self) {
        let next = self
            .pending
            .lock()
            .take()
            .map(|fd| Link::new(Conn::new(UnixStream::from(fd))));
        // SAFETY: the forking thread held the lock in the parent (fork_prepare); in the child
        // that thread is this one, and no other thread exists.
        unsafe { self.conn.force_unlock() };
        let fd = next.as_ref().map_or(-1, |l| l.conn.raw());
        let old = std::mem::replace(&mut *self.conn.lock(), next);
        drop(old); // the child's copy of the parent's connection
        self.sock.store(fd, std::sync::atomic::Ordering::Relaxed);
        self.pid
            .store(getpid(), std::sync::atomic::Ordering::Relaxed);
    }
}

/// Ask for the server's free epoch on the socket of a session taken over across exec (before
/// it has a channel). `Ok(None)`: the server has none; an error: not a pool server's answer.
fn epoch_of(conn: &mut Conn) -> io::Result<Option<crate::epoch::Epoch>> {
    conn.send(
        &postcard::to_allocvec(&Message::Epoch).expect("encodes"),
        None,
    )?;
    let (frame, fd) = conn
        .recv()?
        .ok_or_else(|| io::Error::new(io::ErrorKind::ConnectionReset, "the server went away"))?;
    match postcard::from_bytes::<std::result::Result<(), i32>>(&frame) {
        Ok(Ok(())) => Ok(fd.and_then(|fd| crate::epoch::Epoch::open(fd).ok())),
        Ok(Err(_)) => Ok(None),
        Err(e) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a pool server: {e}"),
        )),
    }
}

// Closes. A close of a pool descriptor succeeds at once and is sent with the session's next
// message (`Link::defer_close`, `Message::After`), so opening and closing a file is one round
// trip, not two. The server still closes before it runs anything else of the session, so the
// session's order is kept, and a fork's session or exec's `Keep` never sees a number the
// program closed. What waits: freeing a file unlinked while open, until the process's next
// call, its exit or exec (at most `MAX_DEFERRED` closes wait). What never waits: closes in a
// session that has taken a lock (POSIX releases a process's record locks at any close of the
// file; another process must see that at once), so there every close is a call of its own.
impl Transport for Client {
    /// Send `m` and decode the reply.
    fn call<T: DeserializeOwned>(&self, m: &Message) -> Result<T> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut close = None;
        match m {
            Message::Call(crate::api::Request::close { fd }) => {
                // The number may name another file next: its reads in place start over.
                self.direct.forget(*fd);
                close = Some(*fd);
            }
            Message::Call(crate::api::Request::lock { .. }) => self.locked.store(true, Relaxed),
            _ => {}
        }
        let mut g = self.conn.lock();
        let Some(link) = g.as_mut() else {
            return Err(Error::Remote(libc::EIO));
        };
        if let Some(fd) = close.filter(|_| !self.locked.load(Relaxed)) {
            if link.defer_close(fd) {
                let done = postcard::to_allocvec(&Ok::<(), i32>(())).expect("encodes");
                return postcard::from_bytes::<std::result::Result<T, i32>>(&done)
                    .expect("a close answers ()")
                    .map_err(Error::Remote);
            }
        }
        let bytes = postcard::to_allocvec(m).expect("a request encodes");
        let reply = match link.round_trip(&bytes, None) {
            Ok(frame) => frame,
            Err(e) => {
                *g = None;
                return Err(lost(&e));
            }
        };
        match postcard::from_bytes::<std::result::Result<T, i32>>(&reply) {
            Ok(r) => r.map_err(Error::Remote),
            Err(e) => {
                *g = None;
                Err(lost(&io::Error::other(format!("a bad reply: {e}"))))
            }
        }
    }
}

impl PoolApi for Client {
    fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize> {
        if let Some(n) = self.direct.pread(self, fd, buf, off) {
            return Ok(n);
        }
        let mut done = 0;
        while done < buf.len() {
            let len = (buf.len() - done).min(crate::MAX_IO) as u64;
            let off = off + done as u64;
            let got: serde_bytes::ByteBuf = self.special(Special::Pread { fd, len, off })?;
            buf[done..done + got.len()].copy_from_slice(&got);
            done += got.len();
            if (got.len() as u64) < len {
                break;
            }
        }
        Ok(done)
    }

    fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        let len = buf.len().min(crate::MAX_IO) as u64;
        let got: serde_bytes::ByteBuf = self.special(Special::Read { fd, len })?;
        buf[..got.len()].copy_from_slice(&got);
        Ok(got.len())
    }

    fn pwrite(&self, fd: Fd, data: &[u8], off: u64) -> Result<usize> {
        let mut done = 0;
        for chunk in data.chunks(crate::MAX_IO) {
            let off = off + done as u64;
            let data = chunk.to_vec();
            let n: usize = self.special(Special::Pwrite { fd, data, off })?;
            done += n;
            if n < chunk.len() {
                break;
            }
        }
        Ok(done)
    }

    fn write(&self, fd: Fd, data: &[u8]) -> Result<usize> {
        let mut done = 0;
        for chunk in data.chunks(crate::MAX_IO) {
            let data = chunk.to_vec();
            let n: usize = self.special(Special::Write { fd, data })?;
            done += n;
            if n < chunk.len() {
                break;
            }
        }
        Ok(done)
    }

    fn fsync(&self, _fd: Fd) -> Result<()> {
        // The server made every acknowledged write durable before answering it; the shim's
        // table has already told a closed number from an open one.
        Ok(())
    }
    fn statfs(&self) -> Result<StatFs> {
        self.special(Special::Statfs)
    }
    fn getattr_ino(&self, ino: u64) -> Result<Attr> {
        self.special(Special::GetattrIno(ino))
    }
    fn readdir_ino(&self, ino: u64) -> Result<Vec<DirEntry>> {
        self.special(Special::ReaddirIno(ino))
    }
    fn set_cred(&self, cred: Option<Cred>) -> Result<()> {
        self.special(Special::SetCred(cred))
    }
    fn set_path_max(&self, max: usize) -> Result<()> {
        self.special(Special::SetPathMax(max as u64))
    }
    fn map_keep_size(&self, fd: Fd, off: u64, len: u64) -> Result<MapView> {
        self.views.map(self, fd, off, len)
    }
    fn persist(&self, ptr: *const u8, len: usize) -> Result<()> {
        self.views.persist(ptr, len)
    }
    fn unmap(&self, ptr: *mut u8) -> Result<()> {
        self.views.unmap(self, ptr)
    }
}
