//! One PMFS pool served to many processes (docs/fs-sharing.md).
//!
//! The pool's server (`pmkit fs serve`) mounts the pool once and gives every client process a
//! session ([`pmkit_fs::posix::Posix::session`]): its own descriptors and credentials over the
//! one file system. A client (the LD_PRELOAD shim, in a process that finds the pool served)
//! sends each call as one frame over a Unix socket and gets the reply; the server runs the same
//! `Posix` method the in-process library would. A forked child gets a session that shares the
//! parent's descriptors ([`Client::fork_prepare`]); a client that exits or is killed ends its
//! session, which closes what it held.
//!
//! The socket is an abstract one named after the pool file's device and inode, so every
//! process that opens the pool finds it. Access is the pool file's: a client passes its own
//! read-write descriptor of the pool file with its first message, and the server serves only
//! clients that could open the pool for writing (as the trust model in docs/fs-sharing.md
//! says, each such process is trusted with the pool).

mod api;
mod channel;
mod client;
mod conn;
mod direct;
mod epoch;
mod link;
mod server;
mod shm;
mod views;
mod wire;

pub use api::{Calls, PoolApi, Request, Special, Transport};
pub use client::Client;
pub use server::{Peer, Server};

use serde::{Deserialize, Serialize};
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::SocketAddr;
use std::path::Path;

/// Most data bytes one frame carries; a longer read or write is several calls.
pub const MAX_IO: usize = 1 << 20;

/// Bumped by hand when a message other than the listed calls changes (`Message`, `Special`,
/// the channel's layout).
const PROTOCOL_EDITION: u64 = 3;

/// The protocol a client and its server must share: the edition and a hash of the calls as
/// written, so that a shim and a server from different builds refuse each other (EPROTO)
/// instead of misreading requests.
pub const PROTOCOL: u64 = fnv1a(api::CALLS_TEXT.as_bytes()) ^ PROTOCOL_EDITION;

const fn fnv1a(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

/// A session's answer to [`Special::Ping`].
pub const HELLO: &str = "pmkit-pool";

/// What a client sends.
#[derive(Debug, Serialize, Deserialize)]
pub enum Message {
    /// The first message, with the client's read-write descriptor of the pool file beside it.
    Hello {
        /// [`PROTOCOL`] of the client's build.
        protocol: u64,
        cred: Option<pmkit_fs::posix::Cred>,
        path_max: u64,
    },
    Call(Request),
    Special(Special),
    /// Give the connection passed beside this message a session that shares this one's
    /// descriptors (a child of fork will use it).
    Fork,
    /// From now on, calls come through the shared-memory channel whose memory file is passed
    /// beside this message (sent on the socket).
    Channel,
    /// Back to the socket (sent through the channel).
    Unchannel,
    /// The server's free epoch (`pmkit_fs::direct`), passed beside the reply (sent on the
    /// socket, before a channel: a session adopted across exec asks; a new one has it with
    /// its hello's reply).
    Epoch,
    /// The descriptors the client closed since its last message, to close first, then the
    /// message `then` (encoded, never itself an `After`): a close rides with the next call
    /// instead of costing a round trip of its own (`client.rs`, "Closes").
    After {
        closed: Vec<pmkit_fs::posix::Fd>,
        #[serde(with = "serde_bytes")]
        then: Vec<u8>,
    },
}

/// The server's address for the pool file at `pool`: an abstract Unix socket named after the
/// file's device and inode numbers (the same file under any path, no file to clean up).
pub fn address(pool: &Path) -> io::Result<SocketAddr> {
    let m = std::fs::metadata(pool)?;
    SocketAddr::from_abstract_name(name(m.dev(), m.ino()))
}

fn name(dev: u64, ino: u64) -> Vec<u8> {
    format!("pmkit-pool/{dev:x}/{ino:x}").into_bytes()
}
