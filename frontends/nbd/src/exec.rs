//! Transmission phase, independent of threading: checking a request header against the export
//! and the negotiated session, and executing a checked request into reply bytes.

use crate::backend::{BlockBackend, Extent};
use crate::config::{Export, MAX_EXTENTS, MAX_PAYLOAD_LIMIT};
use crate::handshake::Session;
use crate::proto::{self, *};

/// A request the server refuses without touching the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    pub errno: u32,
    pub msg: String,
}

/// What the connection must do after reading a request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Execute it (for WRITE, after reading its `len`-byte payload).
    Execute,
    /// Reply with an error. A WRITE's payload (`drain` bytes) must still be read and discarded to
    /// keep the stream framed.
    Reject { reject: Reject, drain: u32 },
    /// NBD_CMD_DISC: finish outstanding requests and close.
    Disconnect,
    /// The client broke the protocol beyond recovery (a write payload too large to drain):
    /// reply with this error, then close.
    Fatal(Reject),
}

fn reject(errno: u32, msg: String) -> Reject {
    Reject { errno, msg }
}

/// Check a request header. Pure: the fuzz target and the unit tests call it directly.
pub fn plan(req: &Request, export: &Export, session: &Session) -> Plan {
    let payload = if req.typ == CMD_WRITE { req.len } else { 0 };
    match check(req, export, session) {
        Ok(()) if req.typ == CMD_DISC => Plan::Disconnect,
        Ok(()) => Plan::Execute,
        Err(r) if payload > MAX_PAYLOAD_LIMIT => Plan::Fatal(Reject {
            errno: r.errno,
            msg: format!(
                "{}; a {payload}-byte write payload is too large to skip, closing",
                r.msg
            ),
        }),
        Err(r) => Plan::Reject {
            reject: r,
            drain: payload,
        },
    }
}

fn check(req: &Request, ex: &Export, s: &Session) -> Result<(), Reject> {
    let name = proto::cmd_name(req.typ);
    // Command flags each command accepts. FUA is valid on every command once advertised.
    let fua = if s.flags & TF_SEND_FUA != 0 {
        CMD_FLAG_FUA
    } else {
        0
    };
    let allowed = match req.typ {
        CMD_READ => fua | if s.structured { CMD_FLAG_DF } else { 0 },
        CMD_WRITE | CMD_TRIM | CMD_FLUSH | CMD_CACHE | CMD_DISC => fua,
        CMD_WRITE_ZEROES => {
            fua | CMD_FLAG_NO_HOLE | if ex.read_only { 0 } else { CMD_FLAG_FAST_ZERO }
        }
        CMD_BLOCK_STATUS => fua | CMD_FLAG_REQ_ONE,
        t => return Err(reject(EINVAL, format!("unknown command type {t}"))),
    };
    if req.flags & !allowed != 0 {
        return Err(reject(
            EINVAL,
            format!(
                "{name}: command flags {:#x} are not valid for this command",
                req.flags
            ),
        ));
    }
    let writes = matches!(req.typ, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if writes && ex.read_only {
        return Err(reject(EPERM, format!("{name}: the export is read-only")));
    }
    match req.typ {
        CMD_DISC | CMD_FLUSH => {
            if req.offset != 0 || req.len != 0 {
                return Err(reject(
                    EINVAL,
                    format!("{name}: offset and length must be zero"),
                ));
            }
            return Ok(());
        }
        CMD_BLOCK_STATUS if !s.base_allocation => {
            return Err(reject(
                EINVAL,
                "BLOCK_STATUS: no metadata context was negotiated".into(),
            ));
        }
        _ => {}
    }
    let len = req.len as u64;
    let end = req.offset.checked_add(len);
    if end.is_none_or(|e| e > ex.size) {
        // Writes past the end are "no space"; everything else is an invalid argument.
        let errno = if matches!(req.typ, CMD_WRITE | CMD_WRITE_ZEROES) {
            ENOSPC
        } else {
            EINVAL
        };
        return Err(reject(
            errno,
            format!(
                "{name}: range {}+{} is past the end of the {}-byte export",
                req.offset, req.len, ex.size
            ),
        ));
    }
    let m = ex.sizes.minimum as u64;
    if !req.offset.is_multiple_of(m) || !len.is_multiple_of(m) {
        return Err(reject(
            EINVAL,
            format!(
                "{name}: offset {} and length {} must be multiples of the {m}-byte block size",
                req.offset, req.len
            ),
        ));
    }
    let limited = match req.typ {
        CMD_READ | CMD_WRITE | CMD_CACHE => true,
        CMD_WRITE_ZEROES => req.flags & CMD_FLAG_FAST_ZERO == 0,
        _ => false,
    };
    if limited && req.len > ex.max_payload {
        return Err(reject(
            EINVAL,
            format!(
                "{name}: length {} exceeds the advertised maximum of {} bytes",
                req.len, ex.max_payload
            ),
        ));
    }
    if req.typ == CMD_BLOCK_STATUS && req.len == 0 {
        return Err(reject(
            EINVAL,
            "BLOCK_STATUS: length must not be zero".into(),
        ));
    }
    Ok(())
}

/// A growable reply buffer that keeps its bytes initialized across uses, so appending a read's
/// data needs no zero-fill once the buffer has grown (a 256 KiB memset per read is not free).
#[derive(Default)]
pub struct OutBuf {
    buf: Vec<u8>,
    len: usize,
}

impl OutBuf {
    pub fn with_capacity(n: usize) -> Self {
        OutBuf {
            buf: vec![0; n],
            len: 0,
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    pub fn clear(&mut self) {
        self.len = 0;
    }
    pub fn truncate(&mut self, len: usize) {
        assert!(len <= self.len);
        self.len = len;
    }
    pub fn put(&mut self, b: &[u8]) {
        self.tail(b.len()).copy_from_slice(b);
    }
    /// Append `n` bytes and return them for the caller to fill.
    pub fn tail(&mut self, n: usize) -> &mut [u8] {
        let end = self.len + n;
        if self.buf.len() < end {
            self.buf.resize(end.max(self.buf.len() * 2), 0);
        }
        let start = self.len;
        self.len = end;
        &mut self.buf[start..end]
    }
}

/// Per-connection counters.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConnStats {
    pub requests: u64,
    pub errors: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// Append the error reply for `handle` to `out`.
pub fn put_error(out: &mut OutBuf, session: &Session, handle: u64, errno: u32, msg: &str) {
    if session.structured {
        out.put(&structured_error(handle, errno, msg));
    } else {
        out.put(&simple_reply(errno, handle));
    }
}

/// Executes checked requests against the backend for one connection (or one worker of it).
pub struct Executor<'a, B> {
    pub backend: &'a B,
    pub export: &'a Export,
    pub session: Session,
    pub stats: ConnStats,
    extents: Vec<Extent>,
}

impl<'a, B: BlockBackend> Executor<'a, B> {
    pub fn new(backend: &'a B, export: &'a Export, session: Session) -> Self {
        Executor {
            backend,
            export,
            session,
            stats: ConnStats::default(),
            extents: Vec::new(),
        }
    }

    /// Execute a request that [`plan`] accepted (not DISC) and append its reply to `out`.
    /// `payload` is the WRITE data (empty for other commands).
    pub fn execute(&mut self, req: &Request, payload: &[u8], out: &mut OutBuf) {
        execute(
            self.backend,
            self.export,
            &self.session,
            req,
            payload,
            out,
            &mut self.stats,
            &mut self.extents,
        )
    }
}

#[allow(clippy::too_many_arguments)]
fn execute<B: BlockBackend>(
    backend: &B,
    export: &Export,
    session: &Session,
    req: &Request,
    payload: &[u8],
    out: &mut OutBuf,
    stats: &mut ConnStats,
    extents: &mut Vec<Extent>,
) {
    stats.requests += 1;
    let fua = req.flags & CMD_FLAG_FUA != 0;
    let off = req.offset;
    let len = req.len as u64;
    let res = match req.typ {
        CMD_READ => {
            let start = out.len();
            let data = if session.structured {
                // One OFFSET_DATA chunk, final. (A zero-length read has no data to carry: NONE.)
                if req.len == 0 {
                    out.put(&structured_header(
                        REPLY_FLAG_DONE,
                        REPLY_TYPE_NONE,
                        req.handle,
                        0,
                    ));
                    return;
                }
                out.put(&structured_header(
                    REPLY_FLAG_DONE,
                    REPLY_TYPE_OFFSET_DATA,
                    req.handle,
                    req.len + 8,
                ));
                out.put(&off.to_be_bytes());
                out.tail(req.len as usize)
            } else {
                out.put(&simple_reply(0, req.handle));
                out.tail(req.len as usize)
            };
            match backend.read(off, data) {
                Ok(()) => {
                    stats.bytes_read += len;
                    return;
                }
                Err(e) => {
                    out.truncate(start);
                    Err(e)
                }
            }
        }
        CMD_WRITE => {
            debug_assert_eq!(payload.len(), req.len as usize);
            let r = backend.write(off, payload, fua);
            if r.is_ok() {
                stats.bytes_written += len;
            }
            r
        }
        CMD_FLUSH => backend.flush(),
        CMD_TRIM => {
            if len == 0 {
                Ok(())
            } else {
                backend.trim(off, len, fua)
            }
        }
        CMD_WRITE_ZEROES => {
            if req.flags & CMD_FLAG_FAST_ZERO != 0 && !export.fast_zero {
                Err(crate::backend::BackendError::new(
                    crate::backend::ErrorKind::NotSupported,
                    "WRITE_ZEROES: zeroing is not faster than writing on this device",
                ))
            } else if len == 0 {
                Ok(())
            } else {
                backend.write_zeroes(off, len, fua, req.flags & CMD_FLAG_NO_HOLE == 0)
            }
        }
        CMD_CACHE => backend.cache(off, len),
        CMD_BLOCK_STATUS => {
            debug_assert!(session.structured && session.base_allocation);
            let max = if req.flags & CMD_FLAG_REQ_ONE != 0 {
                1
            } else {
                MAX_EXTENTS
            };
            extents.clear();
            match backend.block_status(off, req.len, max, extents) {
                Ok(()) => {
                    // Guard the reply's invariants whatever the backend did.
                    let mut total = 0u64;
                    extents.retain(|e| e.len > 0);
                    extents.truncate(max);
                    for e in extents.iter() {
                        total += e.len as u64;
                    }
                    if extents.is_empty() || total > len {
                        extents.clear();
                        extents.push(Extent {
                            len: req.len,
                            flags: 0,
                        });
                    }
                    let plen = 4 + 8 * extents.len() as u32;
                    out.put(&structured_header(
                        REPLY_FLAG_DONE,
                        REPLY_TYPE_BLOCK_STATUS,
                        req.handle,
                        plen,
                    ));
                    out.put(&META_ID_BASE_ALLOCATION.to_be_bytes());
                    for e in extents.iter() {
                        out.put(&e.len.to_be_bytes());
                        out.put(&e.flags.to_be_bytes());
                    }
                    return;
                }
                Err(e) => Err(e),
            }
        }
        t => unreachable!("plan() accepted command {t}"),
    };
    match res {
        Ok(()) => out.put(&simple_reply(0, req.handle)),
        Err(e) => {
            stats.errors += 1;
            tracing::warn!(cmd = proto::cmd_name(req.typ), offset = off, len, error = %e, "nbd request failed");
            put_error(out, session, req.handle, e.kind.nbd_errno(), &e.message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BlockSizes, MemBackend};
    use crate::config::ServerConfig;

    fn setup(ro: bool) -> (Export, Session) {
        let b = MemBackend::new(
            1 << 20,
            BlockSizes {
                minimum: 512,
                preferred: 4096,
            },
            ro,
        );
        let ex = Export::new(
            &b,
            &ServerConfig {
                max_payload: 64 << 10,
                ..Default::default()
            },
        )
        .unwrap();
        let s = Session {
            structured: true,
            base_allocation: true,
            flags: ex.transmission_flags(true),
        };
        (ex, s)
    }
    fn req(typ: u16, flags: u16, offset: u64, len: u32) -> Request {
        Request {
            flags,
            typ,
            handle: 7,
            offset,
            len,
        }
    }
    fn errno(p: Plan) -> u32 {
        match p {
            Plan::Reject { reject, .. } | Plan::Fatal(reject) => reject.errno,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn errors_follow_the_spec() {
        let (ex, s) = setup(false);
        assert_eq!(plan(&req(CMD_READ, 0, 0, 4096), &ex, &s), Plan::Execute);
        assert_eq!(errno(plan(&req(CMD_READ, 0, 1, 512), &ex, &s)), EINVAL);
        assert_eq!(
            errno(plan(&req(CMD_READ, 0, (1 << 20) - 512, 1024), &ex, &s)),
            EINVAL
        );
        assert_eq!(
            errno(plan(&req(CMD_WRITE, 0, (1 << 20) - 512, 1024), &ex, &s)),
            ENOSPC
        );
        assert_eq!(
            errno(plan(&req(CMD_WRITE_ZEROES, 0, 1 << 20, 512), &ex, &s)),
            ENOSPC
        );
        assert_eq!(
            errno(plan(&req(CMD_TRIM, 0, 1 << 20, 512), &ex, &s)),
            EINVAL
        );
        assert_eq!(
            errno(plan(&req(CMD_READ, 0, u64::MAX - 511, 1024), &ex, &s)),
            EINVAL
        );
        assert_eq!(
            errno(plan(&req(CMD_READ, 0, 0, 128 << 10), &ex, &s)),
            EINVAL
        );
        assert_eq!(errno(plan(&req(99, 0, 0, 0), &ex, &s)), EINVAL);
        assert_eq!(
            errno(plan(&req(CMD_READ, CMD_FLAG_NO_HOLE, 0, 512), &ex, &s)),
            EINVAL
        );
        assert_eq!(errno(plan(&req(CMD_FLUSH, 0, 512, 0), &ex, &s)), EINVAL);
        assert_eq!(plan(&req(CMD_DISC, 0, 0, 0), &ex, &s), Plan::Disconnect);
        // A fast zero may exceed the payload limit; a plain one may not.
        assert_eq!(
            plan(
                &req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 1 << 20),
                &ex,
                &s
            ),
            Plan::Execute
        );
        assert_eq!(
            errno(plan(&req(CMD_WRITE_ZEROES, 0, 0, 1 << 20), &ex, &s)),
            EINVAL
        );
        // A rejected write still owes its payload; an absurd one is fatal.
        match plan(&req(CMD_WRITE, 0, 1, 4096), &ex, &s) {
            Plan::Reject { drain, .. } => assert_eq!(drain, 4096),
            p => panic!("{p:?}"),
        }
        assert!(matches!(
            plan(&req(CMD_WRITE, 0, 0, u32::MAX), &ex, &s),
            Plan::Fatal(_)
        ));
        let (ex, s) = setup(true);
        assert_eq!(errno(plan(&req(CMD_WRITE, 0, 0, 512), &ex, &s)), EPERM);
        assert_eq!(errno(plan(&req(CMD_TRIM, 0, 0, 512), &ex, &s)), EPERM);
        assert_eq!(plan(&req(CMD_READ, 0, 0, 512), &ex, &s), Plan::Execute);
    }

    #[test]
    fn block_status_needs_context() {
        let (ex, mut s) = setup(false);
        s.base_allocation = false;
        assert_eq!(
            errno(plan(&req(CMD_BLOCK_STATUS, 0, 0, 512), &ex, &s)),
            EINVAL
        );
    }

    #[test]
    fn outbuf_reuses_memory() {
        let mut o = OutBuf::with_capacity(4);
        o.put(b"abcdef");
        o.tail(3).copy_from_slice(b"xyz");
        assert_eq!(o.as_slice(), b"abcdefxyz");
        o.truncate(2);
        assert_eq!(o.as_slice(), b"ab");
        o.clear();
        assert!(o.is_empty());
    }
}
