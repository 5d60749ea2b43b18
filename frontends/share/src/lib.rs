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
mod client;
mod conn;
mod server;
mod wire;

pub use api::{Calls, PoolApi, Request, Special, Transport};
pub use client::Client;
pub use server::Server;

use serde::{Deserialize, Serialize};
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::SocketAddr;
use std::path::Path;

/// Most data bytes one frame carries; a longer read or write is several calls.
pub const MAX_IO: usize = 4 << 20;

/// A session's answer to [`Special::Ping`].
pub const HELLO: &str = "pmkit-pool 1";

/// What a client sends.
#[derive(Debug, Serialize, Deserialize)]
pub enum Message {
    /// The first message, with the client's read-write descriptor of the pool file beside it.
    Hello {
        cred: Option<pmkit_fs::posix::Cred>,
        path_max: u64,
    },
    Call(Request),
    Special(Special),
    /// Give the connection passed beside this message a session that shares this one's
    /// descriptors (a child of fork will use it).
    Fork,
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
