//! A minimal raw NBD client for protocol tests: it speaks bytes, so tests can also send garbage.
#![allow(dead_code)]

use pmkit_nbd::proto::*;
use pmkit_nbd::{
    BlockSizes, IoModel, Listen, MemBackend, Server, ServerConfig, ServerStats, ShutdownHandle,
};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub(crate) const SIZE: u64 = 8 << 20;
pub(crate) const MIN: u32 = 512;

pub(crate) struct TestServer {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub backend: Arc<MemBackend>,
    pub stop: ShutdownHandle,
    pub thread: Option<JoinHandle<ServerStats>>,
}

impl TestServer {
    pub(crate) fn start(cfg: ServerConfig) -> Self {
        Self::start_with(cfg, false)
    }
    pub(crate) fn start_with(cfg: ServerConfig, read_only: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nbd.sock");
        let backend = Arc::new(MemBackend::new(
            SIZE,
            BlockSizes {
                minimum: MIN,
                preferred: 4096,
            },
            read_only,
        ));
        let server = Server::bind(&Listen::Unix(path.clone()), backend.clone(), cfg).unwrap();
        let stop = server.shutdown_handle();
        let thread = Some(std::thread::spawn(move || server.run().unwrap()));
        TestServer {
            dir,
            path,
            backend,
            stop,
            thread,
        }
    }
    pub(crate) fn connect(&self) -> Client {
        let s = UnixStream::connect(&self.path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        Client {
            s,
            structured: false,
            size: 0,
            flags: 0,
        }
    }
    /// A client that has completed the handshake with GO.
    pub(crate) fn go(&self, structured: bool, meta: bool) -> Client {
        let mut c = self.connect();
        c.greet();
        if structured {
            c.option(OPT_STRUCTURED_REPLY, &[]);
            assert_eq!(c.option_reply().1, REP_ACK);
            c.structured = true;
        }
        if meta {
            c.option(
                OPT_SET_META_CONTEXT,
                &meta_payload("", &[META_BASE_ALLOCATION]),
            );
            let (_, t, d) = c.option_reply();
            assert_eq!(t, REP_META_CONTEXT);
            assert_eq!(&d[4..], META_BASE_ALLOCATION.as_bytes());
            assert_eq!(c.option_reply().1, REP_ACK);
        }
        c.option(OPT_GO, &info_payload("", &[INFO_BLOCK_SIZE]));
        loop {
            let (_, t, d) = c.option_reply();
            match t {
                REP_INFO => {
                    if u16::from_be_bytes([d[0], d[1]]) == INFO_EXPORT {
                        c.size = u64::from_be_bytes(d[2..10].try_into().unwrap());
                        c.flags = u16::from_be_bytes([d[10], d[11]]);
                    }
                }
                REP_ACK => break,
                other => panic!("unexpected GO reply {other:#x}"),
            }
        }
        c
    }
    pub(crate) fn stop(mut self) -> ServerStats {
        self.stop.shutdown();
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.stop.shutdown();
            let _ = t.join();
        }
    }
}

pub(crate) fn models() -> Vec<IoModel> {
    vec![
        IoModel::Inline,
        IoModel::Threaded { workers: 1 },
        IoModel::Threaded { workers: 3 },
    ]
}

pub(crate) fn cfg(model: IoModel) -> ServerConfig {
    ServerConfig {
        io_model: model,
        // Exercise the busy-poll path here (the CLI tests run the default, no polling).
        poll: Duration::from_micros(20),
        max_payload: 1 << 20,
        shutdown_grace: Duration::from_secs(2),
        handshake_timeout: Some(Duration::from_secs(5)),
        ..Default::default()
    }
}

pub(crate) fn info_payload(name: &str, reqs: &[u16]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(name.len() as u32).to_be_bytes());
    p.extend_from_slice(name.as_bytes());
    p.extend_from_slice(&(reqs.len() as u16).to_be_bytes());
    for r in reqs {
        p.extend_from_slice(&r.to_be_bytes());
    }
    p
}

pub(crate) fn meta_payload(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(name.len() as u32).to_be_bytes());
    p.extend_from_slice(name.as_bytes());
    p.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        p.extend_from_slice(&(q.len() as u32).to_be_bytes());
        p.extend_from_slice(q.as_bytes());
    }
    p
}

pub(crate) struct Client {
    pub s: UnixStream,
    pub structured: bool,
    pub size: u64,
    pub flags: u16,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Simple {
        error: u32,
        handle: u64,
        data: Vec<u8>,
    },
    /// All chunks of one structured reply: (type, payload) pairs; `error` from an error chunk.
    Structured {
        handle: u64,
        error: u32,
        data: Vec<u8>,
        chunks: Vec<(u16, Vec<u8>)>,
    },
}

impl Reply {
    pub(crate) fn handle(&self) -> u64 {
        match self {
            Reply::Simple { handle, .. } | Reply::Structured { handle, .. } => *handle,
        }
    }
    pub(crate) fn error(&self) -> u32 {
        match self {
            Reply::Simple { error, .. } | Reply::Structured { error, .. } => *error,
        }
    }
    pub(crate) fn data(&self) -> &[u8] {
        match self {
            Reply::Simple { data, .. } | Reply::Structured { data, .. } => data,
        }
    }
}

impl Client {
    pub(crate) fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0; n];
        self.s.read_exact(&mut b).unwrap();
        b
    }
    pub(crate) fn greet(&mut self) {
        let g = self.read_n(18);
        assert_eq!(u64::from_be_bytes(g[0..8].try_into().unwrap()), INIT_MAGIC);
        assert_eq!(u64::from_be_bytes(g[8..16].try_into().unwrap()), OPT_MAGIC);
        let hf = u16::from_be_bytes([g[16], g[17]]);
        assert_eq!(hf, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        self.s
            .write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
            .unwrap();
    }
    pub(crate) fn option(&mut self, opt: u32, data: &[u8]) {
        let mut b = Vec::new();
        b.extend_from_slice(&OPT_MAGIC.to_be_bytes());
        b.extend_from_slice(&opt.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.s.write_all(&b).unwrap();
    }
    /// (option, reply type, data)
    pub(crate) fn option_reply(&mut self) -> (u32, u32, Vec<u8>) {
        let h = self.read_n(20);
        assert_eq!(u64::from_be_bytes(h[0..8].try_into().unwrap()), REP_MAGIC);
        let opt = u32::from_be_bytes(h[8..12].try_into().unwrap());
        let typ = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        (opt, typ, self.read_n(len as usize))
    }
    pub(crate) fn request(
        &mut self,
        typ: u16,
        flags: u16,
        handle: u64,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) {
        let mut b = encode_request(&Request {
            flags,
            typ,
            handle,
            offset,
            len,
        })
        .to_vec();
        b.extend_from_slice(payload);
        self.s.write_all(&b).unwrap();
    }
    /// Read one complete reply. Reads need `read_len` to parse a simple reply's data.
    pub(crate) fn reply(&mut self, read_len: impl Fn(u64) -> usize) -> Reply {
        let m = self.read_n(4);
        let magic = u32::from_be_bytes(m[..4].try_into().unwrap());
        if magic == SIMPLE_REPLY_MAGIC {
            let h = self.read_n(12);
            let error = u32::from_be_bytes(h[0..4].try_into().unwrap());
            let handle = u64::from_be_bytes(h[4..12].try_into().unwrap());
            let data = if error == 0 {
                self.read_n(read_len(handle))
            } else {
                Vec::new()
            };
            return Reply::Simple {
                error,
                handle,
                data,
            };
        }
        assert_eq!(magic, STRUCTURED_REPLY_MAGIC, "bad reply magic");
        let mut chunks = Vec::new();
        let mut data = Vec::new();
        let mut error = 0;
        let mut magic_read = true;
        loop {
            if !magic_read {
                let m = self.read_n(4);
                assert_eq!(
                    u32::from_be_bytes(m[..4].try_into().unwrap()),
                    STRUCTURED_REPLY_MAGIC
                );
            }
            magic_read = false;
            let h = self.read_n(16);
            let flags = u16::from_be_bytes([h[0], h[1]]);
            let typ = u16::from_be_bytes([h[2], h[3]]);
            let handle = u64::from_be_bytes(h[4..12].try_into().unwrap());
            let len = u32::from_be_bytes(h[12..16].try_into().unwrap());
            let p = self.read_n(len as usize);
            if typ == REPLY_TYPE_OFFSET_DATA {
                data.extend_from_slice(&p[8..]);
            }
            if typ & 0x8000 != 0 {
                error = u32::from_be_bytes(p[0..4].try_into().unwrap());
                let ml = u16::from_be_bytes([p[4], p[5]]) as usize;
                assert!(ml + 6 <= p.len());
            }
            chunks.push((typ, p));
            if flags & REPLY_FLAG_DONE != 0 {
                return Reply::Structured {
                    handle,
                    error,
                    data,
                    chunks,
                };
            }
        }
    }
    /// Send a request and wait for its reply (one outstanding).
    pub(crate) fn call(
        &mut self,
        typ: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> Reply {
        self.request(typ, flags, 42, offset, len, payload);
        let r = self.reply(|_| if typ == CMD_READ { len as usize } else { 0 });
        assert_eq!(r.handle(), 42);
        r
    }
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) -> u32 {
        self.call(CMD_WRITE, 0, offset, data.len() as u32, data)
            .error()
    }
    pub(crate) fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
        let r = self.call(CMD_READ, 0, offset, len, &[]);
        match r.error() {
            0 => Ok(r.data().to_vec()),
            e => Err(e),
        }
    }
    /// True once the server has closed the connection (reads EOF or a reset).
    pub(crate) fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.s.read(&mut b) {
            Ok(0) => true,
            Ok(_) => panic!("server sent unexpected data instead of closing"),
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }
}
