//! Listening, accepting, connection limits and orderly shutdown.
//!
//! One thread accepts; each connection gets its own thread (plus workers in the threaded model).
//! At most `max_connections` exist at once; more are accepted and closed. The accepting thread
//! also drops clients that have not finished the handshake by their deadline, so clients that
//! connect and stall cannot hold the slots; idle connections in transmission are closed by their
//! own thread's receive timeout when `idle_timeout` is set.
//! Shutdown: stop accepting, make every connection's next read return end-of-file (requests
//! already received are finished and answered), wait up to the grace period, cut off whatever
//! is still running, flush the backend, return.

use crate::backend::BlockBackend;
use crate::config::{Export, IoModel, ServerConfig};
use crate::conn::{serve_inline, serve_threaded, ConnError, Transport};
use crate::exec::ConnStats;
use crate::handshake::{handshake, negotiate, Access, HandshakeError, Outcome, Session};
use crate::socket::{bind_unix, prepare_socket_path, SocketError};
use crate::tls::TlsMode;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where to listen.
#[derive(Debug, Clone)]
pub enum Listen {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot listen on {what}: {source}")]
    Listen { what: String, source: io::Error },
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error("accept/poll failed: {0}")]
    Accept(io::Error),
    #[error("final flush of the device failed: {0}")]
    Flush(String),
}

enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl Listener {
    fn fd(&self) -> RawFd {
        match self {
            Listener::Unix(l, _) => l.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
        }
    }
}

/// Totals over the server's life. Every accepted connection's requests and bytes count, however
/// it ended (DISC, end-of-file, reset, timeout, protocol error).
#[derive(Debug, Default, Clone, Copy)]
pub struct ServerStats {
    pub connections: u64,
    /// Connections closed at once because `max_connections` were open.
    pub refused: u64,
    /// Clients dropped for not finishing the handshake in time.
    pub handshake_timeouts: u64,
    /// Connections closed for sending nothing for the idle timeout.
    pub idle_timeouts: u64,
    pub requests: u64,
    pub errors: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

type Closer = Box<dyn Fn(Shutdown) + Send>;

struct ConnEntry {
    close: Closer,
    /// Set while the connection is in the handshake: when it must have finished.
    handshake_deadline: Option<Instant>,
}

struct Shared {
    stopping: AtomicBool,
    /// Written once at shutdown; the accept loop polls the read end.
    wake_rd: OwnedFd,
    wake_wr: OwnedFd,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    conns_cv: Condvar,
    stats: Mutex<ServerStats>,
    next_id: AtomicU64,
}

/// Stops a running server from any thread (a signal-handling thread, a test).
#[derive(Clone)]
pub struct ShutdownHandle(Arc<Shared>);

impl ShutdownHandle {
    pub fn shutdown(&self) {
        let sh = &self.0;
        if sh.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        // SAFETY: writing one byte from a valid buffer to a pipe fd we own.
        let _ = unsafe { libc::write(sh.wake_wr.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        // Blocked reads return end-of-file; data already queued is still read first.
        for c in sh.conns.lock().values() {
            (c.close)(Shutdown::Read);
        }
    }
    pub fn is_stopping(&self) -> bool {
        self.0.stopping.load(Ordering::Acquire)
    }
}

/// An NBD server for one export.
pub struct Server<B: BlockBackend> {
    listener: Listener,
    backend: Arc<B>,
    export: Arc<Export>,
    cfg: ServerConfig,
    shared: Arc<Shared>,
}

impl<B: BlockBackend> Server<B> {
    /// Validate the configuration against the backend and bind the listening socket.
    pub fn bind(listen: &Listen, backend: Arc<B>, cfg: ServerConfig) -> Result<Self, ServerError> {
        let export = Export::new(&*backend, &cfg).map_err(ServerError::Config)?;
        let listener = match listen {
            Listen::Unix(p) => {
                prepare_socket_path(p)?;
                Listener::Unix(bind_unix(p, cfg.socket_access)?, p.clone())
            }
            Listen::Tcp(a) => {
                let l = TcpListener::bind(a).map_err(|e| ServerError::Listen {
                    what: a.to_string(),
                    source: e,
                })?;
                Listener::Tcp(l)
            }
        };
        match &listener {
            Listener::Unix(l, _) => l.set_nonblocking(true),
            Listener::Tcp(l) => l.set_nonblocking(true),
        }
        .map_err(ServerError::Accept)?;
        let (rd, wr) = pipe().map_err(ServerError::Accept)?;
        Ok(Server {
            listener,
            backend,
            export: Arc::new(export),
            cfg,
            shared: Arc::new(Shared {
                stopping: AtomicBool::new(false),
                wake_rd: rd,
                wake_wr: wr,
                conns: Mutex::new(HashMap::new()),
                conns_cv: Condvar::new(),
                stats: Mutex::new(ServerStats::default()),
                next_id: AtomicU64::new(0),
            }),
        })
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shared.clone())
    }

    pub fn export(&self) -> &Export {
        &self.export
    }

    /// The NBD URI clients use (`nbd+unix:///NAME?socket=PATH` or `nbd://HOST:PORT/NAME`;
    /// `nbds...` with TLS).
    pub fn uri(&self) -> String {
        let name = uri_escape(&self.export.name);
        // With TLS on, the nbds schemes: a client asked to use TLS insists on it.
        let s = if self.cfg.tls_mode == TlsMode::Off {
            ""
        } else {
            "s"
        };
        match &self.listener {
            Listener::Unix(_, p) => format!(
                "nbd{s}+unix:///{name}?socket={}",
                uri_escape(&p.display().to_string())
            ),
            Listener::Tcp(l) => match l.local_addr() {
                Ok(SocketAddr::V6(a)) => format!("nbd{s}://[{}]:{}/{name}", a.ip(), a.port()),
                Ok(a) => format!("nbd{s}://{a}/{name}"),
                Err(_) => "nbd://?".into(),
            },
        }
    }

    /// The bound TCP address (useful with port 0), if listening on TCP.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match &self.listener {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }

    /// Serve until [`ShutdownHandle::shutdown`]; then finish, flush the backend and return totals.
    pub fn run(self) -> Result<ServerStats, ServerError> {
        let mut threads = Vec::new();
        let res = self.accept_loop(&mut threads);
        // Stop (also when the accept loop failed), then give connections the grace period.
        self.shutdown_handle().shutdown();
        if let Listener::Unix(_, p) = &self.listener {
            let _ = std::fs::remove_file(p);
        }
        let deadline = Instant::now() + self.cfg.shutdown_grace;
        {
            let mut conns = self.shared.conns.lock();
            while !conns.is_empty() && Instant::now() < deadline {
                self.shared.conns_cv.wait_until(&mut conns, deadline);
            }
            if !conns.is_empty() {
                tracing::warn!(
                    n = conns.len(),
                    "nbd: connections still busy after the grace period; closing them"
                );
                for c in conns.values() {
                    (c.close)(Shutdown::Both);
                }
            }
        }
        for t in threads {
            let _ = t.join();
        }
        res?;
        self.backend
            .flush()
            .map_err(|e| ServerError::Flush(e.to_string()))?;
        Ok(*self.shared.stats.lock())
    }

    fn accept_loop(
        &self,
        threads: &mut Vec<std::thread::JoinHandle<()>>,
    ) -> Result<(), ServerError> {
        let mut fds = [
            libc::pollfd {
                fd: self.listener.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.shared.wake_rd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // When the last refusal was logged (refusals are logged at most once a second).
        let mut refusal_logged: Option<Instant> = None;
        loop {
            if self.shared.stopping.load(Ordering::Acquire) {
                return Ok(());
            }
            let timeout = self.expire_handshakes();
            // SAFETY: `fds` is a valid array of two pollfd structs for the duration of the call.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(ServerError::Accept(e));
            }
            if fds[1].revents != 0 {
                return Ok(());
            }
            // Reap finished connection threads so the handle list stays bounded.
            threads.retain(|t| !t.is_finished());
            loop {
                let accepted = match &self.listener {
                    Listener::Unix(l, _) => l.accept().map(|(s, _)| Conn::Unix(s)),
                    Listener::Tcp(l) => l.accept().map(|(s, _)| Conn::Tcp(s)),
                };
                match accepted {
                    Ok(c) => {
                        if let Some(t) = self.start(c, &mut refusal_logged) {
                            threads.push(t);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        // Out of fds or similar: log and back off rather than spin or die.
                        tracing::warn!(error = %e, "nbd: accept failed");
                        std::thread::sleep(Duration::from_millis(50));
                        break;
                    }
                }
            }
        }
    }

    /// Drop the clients whose handshake deadline has passed; return the `poll` timeout (ms) until
    /// the next deadline, or -1 (none).
    fn expire_handshakes(&self) -> libc::c_int {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut expired = 0u64;
        for c in self.shared.conns.lock().values_mut() {
            match c.handshake_deadline {
                Some(d) if d <= now => {
                    // Its thread's blocked read or write returns and the thread ends.
                    (c.close)(Shutdown::Both);
                    c.handshake_deadline = None;
                    expired += 1;
                }
                Some(d) => next = Some(next.map_or(d, |n| n.min(d))),
                None => {}
            }
        }
        if expired > 0 {
            self.shared.stats.lock().handshake_timeouts += expired;
            tracing::warn!(
                n = expired,
                timeout = ?self.cfg.handshake_timeout.unwrap_or_default(),
                "nbd: dropped client(s) that did not finish the handshake in time"
            );
        }
        next.map_or(-1, |d| {
            // Round up, so the wake-up is at or after the deadline.
            let ms = (d - now).as_micros().div_ceil(1000);
            libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
        })
    }

    fn start(
        &self,
        c: Conn,
        refusal_logged: &mut Option<Instant>,
    ) -> Option<std::thread::JoinHandle<()>> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut conns = self.shared.conns.lock();
            if conns.len() >= self.cfg.max_connections {
                let refused = {
                    let mut st = self.shared.stats.lock();
                    st.refused += 1;
                    st.refused
                };
                // A client retrying in a loop must not flood the log: at most a line a second.
                if refusal_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    *refusal_logged = Some(Instant::now());
                    tracing::warn!(
                        max = self.cfg.max_connections,
                        refused_so_far = refused,
                        "nbd: connection limit reached; refusing a client (see --max-connections)"
                    );
                }
                return None; // dropping `c` closes it: the client sees the connection close
            }
            let closer: Closer = match c.clone_closer() {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(error = %e, "nbd: cannot set up connection");
                    return None;
                }
            };
            conns.insert(
                id,
                ConnEntry {
                    close: closer,
                    handshake_deadline: self.cfg.handshake_timeout.map(|t| Instant::now() + t),
                },
            );
            self.shared.stats.lock().connections += 1;
        }
        let (backend, export, cfg, shared) = (
            self.backend.clone(),
            self.export.clone(),
            self.cfg.clone(),
            self.shared.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("nbd-conn-{id}"))
            .spawn(move || {
                let (st, r) = match c {
                    // (Linux does not pass the listener's O_NONBLOCK on to accepted sockets; be explicit.)
                    Conn::Unix(mut s) => {
                        let _ = s.set_nonblocking(false);
                        connection(
                            &mut s,
                            "on the unix socket",
                            &*backend,
                            &export,
                            &cfg,
                            &shared,
                            id,
                        )
                    }
                    Conn::Tcp(mut s) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_nodelay(true);
                        let from = s.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                        connection(&mut s, &from, &*backend, &export, &cfg, &shared, id)
                    }
                };
                {
                    // Counted however the connection ended: a client that drops the socket
                    // without DISC (or is cut off) still did this work.
                    let mut t = shared.stats.lock();
                    t.requests += st.requests;
                    t.errors += st.errors;
                    t.bytes_read += st.bytes_read;
                    t.bytes_written += st.bytes_written;
                    if matches!(
                        r,
                        Err(ConnectionError::Transmission(ConnError::IdleTimeout))
                    ) {
                        t.idle_timeouts += 1;
                    }
                }
                match r {
                    Ok(()) => {}
                    Err(ConnectionError::Transmission(ConnError::IdleTimeout)) => tracing::info!(
                        conn = id,
                        timeout = ?cfg.idle_timeout.unwrap_or_default(),
                        "nbd: closing a connection idle for the idle timeout"
                    ),
                    Err(e) => tracing::info!(conn = id, error = %e, "nbd: connection closed"),
                }
                let mut conns = shared.conns.lock();
                conns.remove(&id);
                shared.conns_cv.notify_all();
            });
        match spawned {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "nbd: cannot spawn a connection thread");
                self.shared.conns.lock().remove(&id);
                None
            }
        }
    }
}

enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    fn clone_closer(&self) -> io::Result<Closer> {
        Ok(match self {
            Conn::Unix(s) => {
                let c = s.try_clone()?;
                Box::new(move |how| {
                    let _ = c.shutdown(how);
                })
            }
            Conn::Tcp(s) => {
                let c = s.try_clone()?;
                Box::new(move |how| {
                    let _ = c.shutdown(how);
                })
            }
        })
    }
}

#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("handshake: {0}")]
    Handshake(#[from] HandshakeError),
    #[error("transmission: {0}")]
    Transmission(#[from] ConnError),
    #[error("socket setup: {0}")]
    Setup(#[from] io::Error),
}

/// One connection from greeting to close: the statistics (however it ended) and how it ended.
/// `from` names the client for the log.
fn connection<T: Transport, B: BlockBackend>(
    s: &mut T,
    from: &str,
    backend: &B,
    export: &Export,
    cfg: &ServerConfig,
    shared: &Shared,
    id: u64,
) -> (ConnStats, Result<(), ConnectionError>) {
    let none = ConnStats::default();
    // The handshake's time limit is a deadline enforced by the accept loop
    // (`expire_handshakes`), so a client trickling a byte at a time (in the TLS handshake too)
    // cannot stretch it.
    if let Err(e) = s.set_write_timeout(Some(cfg.send_timeout)) {
        return (none, Err(e.into()));
    }
    let stopping = || shared.stopping.load(Ordering::Acquire);
    let access = Access {
        tls_mode: cfg.tls_mode,
        tls_active: false,
        may_write: cfg.may_write(None),
    };
    let resume = match handshake(s, export, access, &stopping) {
        Ok(Outcome::Transmission(sess, e)) => {
            log_client(id, from, "plain (no TLS)", &e);
            if let Err(err) = enter_transmission(s, cfg, shared, id, &sess) {
                return (none, Err(err.into()));
            }
            let stop = &shared.stopping;
            let (st, r) = match cfg.io_model {
                IoModel::Inline => serve_inline(s, backend, &e, sess, stop, cfg.poll),
                IoModel::Threaded { workers } => {
                    serve_threaded(s, backend, &e, sess, stop, workers, cfg.max_inflight)
                }
            };
            return (st, r.map_err(Into::into));
        }
        Ok(Outcome::Closed) => return (none, Ok(())),
        Ok(Outcome::StartTls(r)) => r,
        Err(e) => return (none, Err(e.into())),
    };
    // Export::new checked that credentials exist whenever TLS is not off.
    let Some(tls) = cfg.tls.as_ref().filter(|_| cfg.tls_mode != TlsMode::Off) else {
        return (
            none,
            Err(HandshakeError::Tls("TLS is not configured".into()).into()),
        );
    };
    let (mut ts, peer) = match tls.accept(&mut *s) {
        Ok(x) => x,
        Err(e) => return (none, Err(HandshakeError::Tls(e).into())),
    };
    let access = Access {
        tls_active: true,
        may_write: cfg.may_write(peer.identity.as_deref()),
        ..access
    };
    match negotiate(&mut ts, export, access, resume, &stopping) {
        Ok(Outcome::Transmission(sess, e)) => {
            log_client(id, from, &peer.protection, &e);
            if let Err(err) = enter_transmission(&**ts.get_ref(), cfg, shared, id, &sess) {
                return (none, Err(err.into()));
            }
            // One thread owns the TLS stream: a TLS session cannot be read and written from two
            // threads at once, so TLS connections always use the inline model (docs/nbd.md).
            let (st, r) = serve_inline(&mut ts, backend, &e, sess, &shared.stopping, cfg.poll);
            (st, r.map_err(Into::into))
        }
        // (STARTTLS is refused once TLS is up, so negotiate never asks for it twice.)
        Ok(Outcome::Closed | Outcome::StartTls(_)) => (none, Ok(())),
        Err(e) => (none, Err(e.into())),
    }
}

fn log_client(id: u64, from: &str, protection: &str, e: &Export) {
    tracing::info!(
        conn = id,
        "nbd: client {from}: {protection}; export {:?} {}",
        e.name,
        if e.read_only {
            "read-only"
        } else {
            "read-write"
        }
    );
}

/// Leave the handshake: its deadline no longer applies, the idle timeout (if any) does.
fn enter_transmission<T: Transport>(
    sock: &T,
    cfg: &ServerConfig,
    shared: &Shared,
    id: u64,
    session: &Session,
) -> io::Result<()> {
    if let Some(c) = shared.conns.lock().get_mut(&id) {
        c.handshake_deadline = None;
    }
    tracing::debug!(?session, "nbd: transmission phase");
    // Idle clients (a mounted file system) may be quiet for hours: by default no read timeout.
    sock.set_read_timeout(cfg.idle_timeout)
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid 2-element array; on success both fds are new and owned by us.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are open fds nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Percent-encode everything but RFC 3986 unreserved characters and '/'.
fn uri_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}
