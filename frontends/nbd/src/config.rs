//! Server configuration and limits, and the export description derived from it and the backend.

use crate::backend::{BlockBackend, BlockSizes};
use crate::proto;
use crate::socket::SocketAccess;
use crate::tls::{TlsConfig, TlsMode};
use std::sync::Arc;
use std::time::Duration;

/// How a connection's requests are executed (see docs/nbd.md for the measurements behind the
/// default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoModel {
    /// One thread per connection reads a request, executes it, and queues the reply; replies are
    /// sent in one write just before the thread would block reading. No hand-offs.
    Inline,
    /// Per connection, one thread reads and parses requests (with their payloads) and `workers`
    /// threads execute them and send replies. `workers == 1` is a two-stage pipeline.
    Threaded { workers: usize },
}

/// Most worker threads per connection in [`IoModel::Threaded`].
pub const MAX_WORKERS: usize = 64;
/// Largest payload the server ever accepts (the spec says lengths below 32 MiB should not be
/// treated as denial of service; we allow up to twice that as an explicit opt-in).
pub const MAX_PAYLOAD_LIMIT: u32 = 64 << 20;
/// Largest option payload accepted during the handshake; longer options are a protocol abuse
/// (every legitimate option is a few strings of at most 4 KiB) and the client is disconnected.
pub const MAX_OPTION_LEN: u32 = 16 << 10;
/// Most options one connection may send before transmission; a client looping forever in the
/// handshake is disconnected.
pub const MAX_OPTIONS: u32 = 1024;
/// Most extents in one BLOCK_STATUS reply.
pub const MAX_EXTENTS: usize = 1024;

/// One name under which the device is exported, with its own read-only flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSpec {
    pub name: String,
    pub read_only: bool,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Names clients may ask for, each read-only or not; the first is the default export, which
    /// the empty name also selects. At least one.
    pub exports: Vec<ExportSpec>,
    /// Shown by `nbdinfo` (NBD_INFO_DESCRIPTION) and in NBD_OPT_LIST.
    pub description: String,
    /// Export read-only even when the backend is writable (every name).
    pub read_only: bool,
    /// Whether and how TLS is offered; anything but `Off` needs `tls`.
    pub tls_mode: TlsMode,
    pub tls: Option<Arc<TlsConfig>>,
    /// TLS identities (PSK usernames, verified certificate common names) that may write; every
    /// other client, plain ones included, gets every export read-only. `None`: all may write.
    pub write_identities: Option<Vec<String>>,
    /// Mode and group of a unix socket (default 0600, the owner only).
    pub socket_access: SocketAccess,
    /// Advertised maximum block size: READ/WRITE/CACHE (and WRITE_ZEROES without FAST_ZERO)
    /// longer than this fail with EINVAL.
    pub max_payload: u32,
    /// Concurrent connections (in the handshake or in transmission); more are accepted, closed at
    /// once and logged. Each holds one thread (1 + workers in the threaded model) and two file
    /// descriptors (four threaded); see "Limits" in docs/nbd.md.
    pub max_connections: usize,
    /// Requests read ahead of execution per connection (threaded model); the reader stops reading
    /// the socket when this many are queued.
    pub max_inflight: usize,
    /// A client must finish the handshake (reach transmission with GO or EXPORT_NAME, or leave)
    /// within this time of being accepted, however it trickles its bytes; otherwise it is
    /// dropped and its slot freed. `None`: no limit (for debugging clients only).
    pub handshake_timeout: Option<Duration>,
    /// A connection in transmission that sends nothing for this long is closed (requests it
    /// already sent are answered first). `None` (the default, as nbdkit and qemu-nbd): idle
    /// clients such as a mounted file system stay connected indefinitely.
    pub idle_timeout: Option<Duration>,
    /// A reply that cannot be sent within this time (client not reading) drops the connection.
    pub send_timeout: Duration,
    /// On shutdown, how long connections get to finish requests already received before their
    /// sockets are closed under them.
    pub shutdown_grace: Duration,
    pub io_model: IoModel,
    /// Inline model: how long a connection's thread polls its socket for the next request
    /// before it blocks (sleeping and being woken costs a context switch on each side; a client
    /// with requests in flight usually sends the next one within microseconds). Zero: block at
    /// once. At most [`MAX_POLL`].
    pub poll: Duration,
}

/// Default connection limit: well above what a host's clients normally open (qemu multi-conn,
/// nbdcopy and fio use a handful each), the same order as qemu's default of 100 for its NBD
/// server, and small enough that a full server's threads and descriptors stay modest.
pub const DEFAULT_MAX_CONNECTIONS: usize = 128;
/// Default handshake limit: qemu-nbd's (`--handshake-limit`, 10 s since CVE-2024-7409). Real
/// clients negotiate in milliseconds.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest busy-poll before blocking.
pub const MAX_POLL: Duration = Duration::from_millis(1);
/// Default busy-poll: none. On the 2-core development machine polling did not raise throughput
/// and cost server CPU (docs/nbd.md); it may pay on machines with idle cores.
pub const DEFAULT_POLL: Duration = Duration::ZERO;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            exports: vec![ExportSpec {
                name: String::new(),
                read_only: false,
            }],
            description: "pmkit persistent-memory block device".into(),
            read_only: false,
            tls_mode: TlsMode::Off,
            tls: None,
            write_identities: None,
            socket_access: SocketAccess::default(),
            max_payload: 32 << 20,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_inflight: 64,
            handshake_timeout: Some(DEFAULT_HANDSHAKE_TIMEOUT),
            idle_timeout: None,
            send_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(10),
            io_model: IoModel::Inline,
            poll: DEFAULT_POLL,
        }
    }
}

impl ServerConfig {
    /// Whether a client with this TLS identity (`None`: plain, or TLS without one) may write.
    pub fn may_write(&self, identity: Option<&str>) -> bool {
        match &self.write_identities {
            None => true,
            Some(ids) => identity.is_some_and(|id| ids.iter().any(|w| w == id)),
        }
    }
}

/// Everything the protocol code needs to know about the export, computed once. The server's
/// `Export` describes the default export and lists all; each connection gets its own copy for the
/// name it selected, with the access its client has ([`Export::select`]).
#[derive(Debug, Clone)]
pub struct Export {
    pub name: String,
    /// Every export name and whether it is read-only (the server-wide flag already applied).
    pub exports: Arc<[ExportSpec]>,
    pub description: String,
    pub size: u64,
    pub sizes: BlockSizes,
    pub max_payload: u32,
    pub read_only: bool,
    pub fast_zero: bool,
}

impl Export {
    pub fn new<B: BlockBackend>(backend: &B, cfg: &ServerConfig) -> Result<Self, String> {
        let sizes = backend.block_sizes();
        sizes.validate()?;
        let size = backend.size();
        if !size.is_multiple_of(sizes.minimum as u64) {
            return Err(format!(
                "device size {size} is not a multiple of its block size {}",
                sizes.minimum
            ));
        }
        let mp = cfg.max_payload;
        if mp == 0
            || mp > MAX_PAYLOAD_LIMIT
            || !mp.is_multiple_of(sizes.minimum)
            || mp < sizes.preferred
        {
            return Err(format!(
                "max payload {mp} must be a multiple of the block size {}, at least the preferred size {}, \
                 and at most {MAX_PAYLOAD_LIMIT}",
                sizes.minimum, sizes.preferred
            ));
        }
        if cfg.exports.iter().any(|e| e.name.len() > proto::MAX_STRING)
            || cfg.description.len() > proto::MAX_STRING
        {
            return Err("export names and description must be at most 4096 bytes".into());
        }
        let Some(first) = cfg.exports.first() else {
            return Err("there must be at least one export".into());
        };
        for (i, e) in cfg.exports.iter().enumerate() {
            if cfg.exports[..i].iter().any(|o| o.name == e.name) {
                return Err(format!("export name {:?} is given twice", e.name));
            }
        }
        if (cfg.tls_mode == TlsMode::Off) != cfg.tls.is_none() {
            return Err("TLS credentials are needed exactly when TLS is on or required".into());
        }
        let read_only = cfg.read_only || backend.is_read_only();
        if cfg.max_connections == 0 || cfg.max_inflight == 0 {
            return Err("max connections and max in-flight requests must be at least 1".into());
        }
        if [cfg.handshake_timeout, cfg.idle_timeout]
            .iter()
            .any(|t| t.is_some_and(|t| t.is_zero()))
        {
            return Err("a timeout must be longer than zero (None means no timeout)".into());
        }
        if cfg.poll > MAX_POLL {
            return Err(format!(
                "busy-poll time {:?} is longer than the limit {MAX_POLL:?}",
                cfg.poll
            ));
        }
        if let IoModel::Threaded { workers } = cfg.io_model {
            if workers == 0 || workers > MAX_WORKERS {
                return Err(format!("workers per connection must be 1..={MAX_WORKERS}"));
            }
        }
        let exports = cfg
            .exports
            .iter()
            .map(|e| ExportSpec {
                name: e.name.clone(),
                read_only: e.read_only || read_only,
            })
            .collect::<Vec<_>>();
        Ok(Export {
            name: first.name.clone(),
            read_only: read_only || first.read_only,
            exports: exports.into(),
            description: cfg.description.clone(),
            size,
            sizes,
            max_payload: mp,
            fast_zero: backend.fast_zero(),
        })
    }

    /// The export a client-supplied name selects ("" is the default, the first).
    pub fn find(&self, name: &str) -> Option<&ExportSpec> {
        if name.is_empty() {
            return self.exports.first();
        }
        self.exports.iter().find(|e| e.name == name)
    }

    /// The export `name` selects as one client sees it: read-only when the export is, or when
    /// the client may not write.
    pub fn select(&self, name: &str, may_write: bool) -> Option<Export> {
        let spec = self.find(name)?;
        Some(Export {
            name: spec.name.clone(),
            read_only: spec.read_only || !may_write,
            ..self.clone()
        })
    }

    /// Transmission flags; `NBD_FLAG_SEND_DF` only once structured replies are negotiated.
    pub fn transmission_flags(&self, structured: bool) -> u16 {
        use proto::*;
        let mut f = TF_HAS_FLAGS | TF_SEND_FLUSH | TF_SEND_CACHE | TF_CAN_MULTI_CONN;
        if self.read_only {
            f |= TF_READ_ONLY;
        } else {
            f |= TF_SEND_FUA | TF_SEND_TRIM | TF_SEND_WRITE_ZEROES | TF_SEND_FAST_ZERO;
        }
        if structured {
            f |= TF_SEND_DF;
        }
        f
    }

    /// The `NBD_INFO_BLOCK_SIZE` triple.
    pub fn block_size_info(&self) -> (u32, u32, u32) {
        (self.sizes.minimum, self.sizes.preferred, self.max_payload)
    }
}
