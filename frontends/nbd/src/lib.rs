//! An NBD server (fixed newstyle handshake, structured replies, `base:allocation`) for pmkit
//! block devices, written against the [`BlockBackend`] trait so it depends on no particular
//! device. See docs/nbd.md for the design, limits and measurements.
//!
//! ```no_run
//! use pmkit_nbd::{BlockSizes, Listen, MemBackend, Server, ServerConfig};
//! use std::sync::Arc;
//! let dev = Arc::new(MemBackend::new(64 << 20, BlockSizes { minimum: 512, preferred: 4096 }, false));
//! let server = Server::bind(&Listen::Unix("/tmp/pm.sock".into()), dev, ServerConfig::default()).unwrap();
//! println!("{}", server.uri());
//! server.run().unwrap();
//! ```

pub mod backend;
pub mod config;
pub mod conn;
pub mod exec;
pub mod genl;
pub mod handshake;
pub mod kernel;
pub mod proto;
pub mod server;
pub mod socket;
pub mod tls;

pub use backend::{
    BackendError, BackendResult, BlockBackend, BlockSizes, ErrorKind, Extent, MemBackend,
};
pub use config::{Export, ExportSpec, IoModel, ServerConfig};
pub use server::{Listen, Server, ServerError, ServerStats, ShutdownHandle};
pub use socket::SocketAccess;
pub use tls::{TlsConfig, TlsMode};
