//! The pool's server: a listening socket, a thread per client connection running its session,
//! and a stop that ends every session before the pool is unmounted.

use crate::api::{dispatch, dispatch_special, encode};
use crate::channel::Channel;
use crate::conn::{access_mode, Conn};
use crate::epoch::Epoch;
use crate::Message;
use parking_lot::Mutex;
use pmkit_fs::posix::Posix;
use pmkit_fs::watch::Change;
use pmkit_fs::Error;
use pmkit_media::Media;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The pool file's identity: a client's descriptor must be of this file.
#[derive(Clone, Copy)]
struct Pool {
    dev: u64,
    ino: u64,
}

/// A live connection: its socket and its thread (taken by the stop that joins it).
type Live = (UnixStream, Option<JoinHandle<()>>);

/// Told what each client call changed, before the client has its answer: the FUSE mount whose
/// daemon serves the clients drops those inodes and names from the kernel's caches.
pub type Peer = Arc<dyn Fn(&[Change]) + Send + Sync>;

struct Shared<M: Media> {
    root: Arc<Posix<M>>,
    pool: Pool,
    peer: Option<Peer>,
    /// The free epoch clients check their reads in place against (`None`: they read through
    /// calls).
    epoch: Option<Arc<Epoch>>,
    stopping: AtomicBool,
    next: AtomicU64,
    /// Each live connection's socket (shut down at stop) and thread.
    conns: Mutex<HashMap<u64, Live>>,
}

/// A running server of one pool; [`Server::stop`] ends it.
pub struct Server<M: Media> {
    shared: Arc<Shared<M>>,
    addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl<M: Media + Send + Sync + 'static> Server<M> {
    /// Serve `root`'s file system, mounted from the pool file at `pool`, to clients.
    pub fn start(root: Arc<Posix<M>>, pool: &Path) -> io::Result<Server<M>> {
        Server::start_with_peer(root, pool, None)
    }

    /// [`Server::start`] beside a user of the same file system that caches it (the FUSE mount):
    /// `peer` is told what each client call changed.
    pub fn start_with_peer(
        root: Arc<Posix<M>>,
        pool: &Path,
        peer: Option<Peer>,
    ) -> io::Result<Server<M>> {
        let m = std::fs::metadata(pool)?;
        let addr = SocketAddr::from_abstract_name(crate::name(m.dev(), m.ino()))?;
        let listener = UnixListener::bind_addr(&addr)?;
        let epoch = match Epoch::create() {
            Ok(e) => {
                let e = Arc::new(e);
                root.fs()
                    .set_free_epoch(Arc::clone(&e) as Arc<dyn pmkit_fs::direct::FreeEpoch>);
                Some(e)
            }
            Err(e) => {
                tracing::warn!("no free epoch ({e}): clients read through calls");
                None
            }
        };
        let shared = Arc::new(Shared {
            root,
            pool: Pool {
                dev: m.dev(),
                ino: m.ino(),
            },
            peer,
            epoch,
            stopping: AtomicBool::new(false),
            next: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("pmfs-accept".into())
            .spawn(move || accept_loop(&s, &listener))?;
        Ok(Server {
            shared,
            addr,
            accept: Some(accept),
        })
    }

    /// Clients connected now.
    pub fn clients(&self) -> usize {
        self.shared.conns.lock().len()
    }

    /// Stop accepting, cut every client's connection and wait for their sessions to end (each
    /// closes what its client held). The root session is given back.
    pub fn stop(mut self) -> Arc<Posix<M>> {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loop: it sees `stopping` and leaves.
        drop(UnixStream::connect_addr(&self.addr));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        loop {
            let live: Vec<Live> = {
                let mut g = self.shared.conns.lock();
                g.values_mut()
                    .map(|(s, t)| (s.try_clone().expect("a socket handle"), t.take()))
                    .collect()
            };
            if live.is_empty() {
                break;
            }
            for (s, t) in live {
                let _ = s.shutdown(std::net::Shutdown::Both);
                if let Some(t) = t {
                    let _ = t.join();
                }
            }
        }
        Arc::clone(&self.shared.root)
    }
}

fn accept_loop<M: Media + Send + Sync + 'static>(s: &Arc<Shared<M>>, l: &UnixListener) {
    for stream in l.incoming() {
        if s.stopping.load(Ordering::SeqCst) {
            return;
        }
        match stream {
            Ok(stream) => {
                let s2 = Arc::clone(s);
                // The hello is read on the connection's own thread: a slow client never holds
                // up the others.
                spawn(s, Conn::new(stream), move |conn| hello(&s2, conn));
            }
            Err(e) => tracing::warn!("accept failed: {e}"),
        }
    }
}

/// Run `f` on a thread of its own for connection `conn`, registered for [`Server::stop`].
fn spawn<M: Media + Send + Sync + 'static>(
    s: &Arc<Shared<M>>,
    conn: Conn,
    f: impl FnOnce(Conn) -> Option<(Conn, Posix<M>)> + Send + 'static,
) {
    let Ok(handle) = conn.handle() else { return };
    let id = s.next.fetch_add(1, Ordering::Relaxed);
    let mut conns = s.conns.lock();
    let s2 = Arc::clone(s);
    let t = std::thread::Builder::new()
        .name("pmfs-client".into())
        .spawn(move || {
            if let Some((conn, session)) = f(conn) {
                serve(&s2, conn, session);
            }
            s2.conns.lock().remove(&id);
        });
    match t {
        Ok(t) => {
            conns.insert(id, (handle, Some(t)));
        }
        Err(e) => tracing::warn!("no thread for a client: {e}"),
    }
}

/// The first message: the client's credentials and its read-write descriptor of the pool file.
fn hello<M: Media>(s: &Shared<M>, mut conn: Conn) -> Option<(Conn, Posix<M>)> {
    let (frame, fd) = conn.recv().ok()??;
    let check = || -> pmkit_fs::Result<Posix<M>> {
        let Ok(Message::Hello {
            protocol,
            cred,
            path_max,
        }) = postcard::from_bytes(&frame)
        else {
            return Err(Error::Invalid("the first message must be a hello"));
        };
        if protocol != crate::PROTOCOL {
            // A shim and a server from different builds: refused, never misread.
            return Err(Error::Remote(libc::EPROTO));
        }
        let fd = fd.ok_or(Error::Access("no pool descriptor came with the hello"))?;
        same_pool(s.pool, fd)?;
        let session = s.root.session()?;
        session.set_cred(cred);
        let max = usize::try_from(path_max).unwrap_or(usize::MAX);
        if max >= pmkit_fs::posix::PATH_MAX - 1 {
            session.set_path_max(max);
        }
        Ok(session)
    };
    match check() {
        Ok(session) => {
            // The free epoch travels with the reply: the client reads in place from its first
            // call.
            let pass = s.epoch.as_ref().map(|e| e.fd().as_raw_fd());
            conn.send(&encode(Ok(())), pass).ok()?;
            Some((conn, session))
        }
        Err(e) => {
            tracing::info!("a client refused: {e}");
            let _ = conn.send(&encode::<()>(Err(e)), None);
            None
        }
    }
}

/// The client opened this pool's file for reading and writing: it is trusted with the pool.
fn same_pool(pool: Pool, fd: OwnedFd) -> pmkit_fs::Result<()> {
    let mode = access_mode(&fd).map_err(|_| Error::Access("an unusable pool descriptor"))?;
    let m = std::fs::File::from(fd)
        .metadata()
        .map_err(|_| Error::Access("an unusable pool descriptor"))?;
    if (m.dev(), m.ino()) != (pool.dev, pool.ino) {
        return Err(Error::Access("the descriptor is not of this server's pool"));
    }
    if mode != libc::O_RDWR {
        return Err(Error::Access(
            "the pool file must be open for reading and writing",
        ));
    }
    Ok(())
}

/// A client's calls, one at a time, until it closes or is cut; then its session ends. They
/// come over the socket, or through the session's shared-memory channel once the client made
/// one (`Message::Channel`).
fn serve<M: Media + Send + Sync + 'static>(s: &Arc<Shared<M>>, mut conn: Conn, session: Posix<M>) {
    let mut chan: Option<Channel> = None;
    let mut last = 0u32;
    loop {
        // The next request: its bytes, a descriptor sent with it, and its channel sequence.
        let (frame, fd, seq) = match &chan {
            Some(ch) => {
                let c = &conn;
                match ch.next(last, &|| !c.peer_gone()) {
                    Ok((seq, bytes)) => (bytes, None, Some(seq)),
                    Err(_) => break,
                }
            }
            None => match conn.recv() {
                Ok(Some((frame, fd))) => (frame, fd, None),
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!("a client's connection ended: {e}");
                    break;
                }
            },
        };
        let msg = match postcard::from_bytes::<Message>(&frame) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("a client sent a bad message ({e}); its session ends");
                break;
            }
        };
        let pass = match (&msg, &s.epoch, seq) {
            (Message::Epoch, Some(e), None) => Some(e.fd().as_raw_fd()),
            _ => None,
        };
        let (reply, switch) = handle(s, &session, &mut conn, msg, fd, seq.is_some());
        let sent = match (&chan, seq) {
            (Some(ch), Some(seq)) => {
                last = seq;
                ch.reply(seq, &reply).is_ok()
            }
            _ => conn.send(&reply, pass).is_ok(),
        };
        if !sent {
            break;
        }
        if let Some(next) = switch {
            (chan, last) = match next {
                Some((ch, start)) => (Some(ch), start),
                None => (None, 0),
            };
        }
    }
    session.end();
}

/// A channel to switch to after a reply (`None`: back to the socket), with the request
/// sequence it starts after (read before the reply: the client may send through it as soon as
/// it has the reply).
type Switch = Option<Option<(Channel, u32)>>;

/// Run one message of a session: the encoded reply, and a change of channel. `fd` came with
/// it on the socket; `via_channel`: it came through the channel (a descriptor for it then
/// follows on the socket).
fn handle<M: Media + Send + Sync + 'static>(
    s: &Arc<Shared<M>>,
    session: &Posix<M>,
    conn: &mut Conn,
    msg: Message,
    fd: Option<OwnedFd>,
    via_channel: bool,
) -> (Vec<u8>, Switch) {
    let mut switch: Switch = None;
    let run = || match closes_first(session, msg) {
        Err(reply) => reply,
        Ok(Message::Call(r)) => dispatch(session, r),
        Ok(Message::Special(sp)) => dispatch_special(session, sp),
        Ok(Message::Fork) if via_channel => {
            let fd = conn.recv().ok().flatten().and_then(|(_, fd)| fd);
            encode(fork(s, session, fd))
        }
        Ok(Message::Fork) => encode(fork(s, session, fd)),
        Ok(Message::Channel) => match fd.map(|fd| Channel::open(fd, crate::conn::spin_default())) {
            Some(Ok(ch)) => {
                let start = ch.request_seq();
                switch = Some(Some((ch, start)));
                encode(Ok(()))
            }
            _ => encode::<()>(Err(Error::Invalid("an unusable channel"))),
        },
        Ok(Message::Unchannel) => {
            switch = Some(None);
            encode(Ok(()))
        }
        Ok(Message::Hello { .. }) => encode::<()>(Err(Error::Invalid("a second hello"))),
        Ok(Message::After { .. }) => encode::<()>(Err(Error::Invalid("closes within closes"))),
        Ok(Message::Epoch) => encode(match (&s.epoch, via_channel) {
            (Some(_), false) => Ok(()),
            _ => Err(Error::NotSupported("no free epoch on this connection")),
        }),
    };
    // A panic in a call (a bug) answers EIO and the session goes on, as the mount does.
    let guarded = || {
        catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|_| {
            tracing::error!("a call panicked (a bug): EIO");
            encode::<()>(Err(Error::Remote(libc::EIO)))
        })
    };
    let reply = match &s.peer {
        None => guarded(),
        Some(peer) => {
            let (reply, changes) = pmkit_fs::watch::watching(guarded);
            if !changes.is_empty() {
                peer(&changes);
            }
            reply
        }
    };
    (reply, switch)
}

/// The message to run once the descriptors an [`Message::After`] names are closed (a close
/// that fails, as for a number already gone, is the client's to have seen: it was told it
/// succeeded, as Linux's close succeeds); a bad inner message is the reply's error.
fn closes_first<M: Media>(
    session: &Posix<M>,
    msg: Message,
) -> std::result::Result<Message, Vec<u8>> {
    let Message::After { closed, then } = msg else {
        return Ok(msg);
    };
    for fd in closed {
        if let Err(e) = session.close(fd) {
            tracing::debug!("a deferred close of {fd:?}: {e}");
        }
    }
    match postcard::from_bytes::<Message>(&then) {
        Ok(Message::After { .. }) | Err(_) => Err(encode::<()>(Err(Error::Invalid(
            "a bad message after closes",
        )))),
        Ok(m) => Ok(m),
    }
}

/// A session for a child of fork on the connection passed in `fd`.
fn fork<M: Media + Send + Sync + 'static>(
    s: &Arc<Shared<M>>,
    session: &Posix<M>,
    fd: Option<OwnedFd>,
) -> pmkit_fs::Result<()> {
    let fd = fd.ok_or(Error::Invalid("a fork without its connection"))?;
    let child = session.fork()?;
    let conn = Conn::new(UnixStream::from(fd));
    spawn(s, conn, move |conn| Some((conn, child)));
    Ok(())
}
