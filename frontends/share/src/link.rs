//! A client's link to its session: the socket, and the shared-memory channel set up over it on
//! first use (`channel.rs`). Calls go through the channel when there is one, else over the
//! socket; a descriptor passed with a call always travels on the socket.

use crate::channel::Channel;
use crate::conn::Conn;
use crate::Message;
use pmkit_fs::posix::Fd;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

pub(crate) struct Link {
    pub(crate) conn: Conn,
    chan: Option<Channel>,
    /// A channel was tried (made or refused): not again until it is let go.
    tried: bool,
    /// Descriptors closed by the client and not yet by the server: they go with the next
    /// message (`Message::After`), at most [`MAX_DEFERRED`].
    closed: Vec<Fd>,
}

/// Most closes that wait for the next message; one more goes at once, with them.
pub(crate) const MAX_DEFERRED: usize = 64;

impl Link {
    pub(crate) fn new(conn: Conn) -> Link {
        Link {
            conn,
            chan: None,
            tried: false,
            closed: Vec::new(),
        }
    }

    /// Close `fd` with the next message instead of now: false when [`MAX_DEFERRED`] already
    /// wait (the caller then sends this close, and they go with it).
    pub(crate) fn defer_close(&mut self, fd: Fd) -> bool {
        if self.closed.len() >= MAX_DEFERRED {
            return false;
        }
        self.closed.push(fd);
        true
    }

    /// Send `req` (with `pass` beside it) and take the reply.
    pub(crate) fn round_trip(&mut self, req: &[u8], pass: Option<RawFd>) -> io::Result<Vec<u8>> {
        let after;
        let req = match self.closed.is_empty() {
            true => req,
            false => {
                let closed = std::mem::take(&mut self.closed);
                let then = req.to_vec();
                after = postcard::to_allocvec(&Message::After { closed, then }).expect("encodes");
                &after[..]
            }
        };
        if !self.tried {
            self.tried = true;
            // No channel (no memory file, an old server): the socket serves.
            self.chan = self.open_channel().ok();
        }
        match &self.chan {
            Some(ch) => {
                if let Some(fd) = pass {
                    // The descriptor goes on the socket; the server takes it for this call.
                    self.conn.send(&[], Some(fd))?;
                }
                let conn = &self.conn;
                ch.call(req, &|| !conn.peer_gone())
            }
            None => {
                self.conn.send(req, pass)?;
                match self.conn.recv()? {
                    Some((frame, _)) => Ok(frame),
                    None => Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "the server went away",
                    )),
                }
            }
        }
    }

    fn open_channel(&mut self) -> io::Result<Channel> {
        let ch = Channel::create(crate::conn::spin_default())?;
        let m = postcard::to_allocvec(&Message::Channel).expect("encodes");
        self.conn.send(&m, Some(ch.fd().as_raw_fd()))?;
        let (frame, _) = self.conn.recv()?.ok_or_else(|| {
            io::Error::new(io::ErrorKind::ConnectionReset, "the server went away")
        })?;
        match postcard::from_bytes::<Result<(), i32>>(&frame) {
            Ok(Ok(())) => Ok(ch),
            Ok(Err(n)) => Err(io::Error::from_raw_os_error(n)),
            Err(e) => Err(io::Error::other(format!("a bad reply: {e}"))),
        }
    }

    /// Go back to the socket (before exec: the next program adopts the session through it and
    /// makes its own channel). A failed exec makes a new channel on the next call.
    pub(crate) fn close_channel(&mut self) {
        if self.chan.is_some() {
            let m = postcard::to_allocvec(&Message::Unchannel).expect("encodes");
            let _ = self.round_trip(&m, None);
            self.chan = None;
        }
        self.tried = false;
    }
}
