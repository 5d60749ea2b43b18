//! NBD wire format: constants, and pure encoders/decoders for the messages the server reads and
//! writes. No I/O here, so the fuzz target and the unit tests exercise exactly the parsing code the
//! server runs. All integers are big-endian on the wire.

/// `NBDMAGIC`, first 8 bytes the server sends.
pub const INIT_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle magic, also prefixes every client option.
pub const OPT_MAGIC: u64 = 0x4948_4156_454f_5054;
/// Prefix of every option reply.
pub const REP_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags.
pub const TF_HAS_FLAGS: u16 = 1 << 0;
pub const TF_READ_ONLY: u16 = 1 << 1;
pub const TF_SEND_FLUSH: u16 = 1 << 2;
pub const TF_SEND_FUA: u16 = 1 << 3;
pub const TF_ROTATIONAL: u16 = 1 << 4;
pub const TF_SEND_TRIM: u16 = 1 << 5;
pub const TF_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TF_SEND_DF: u16 = 1 << 7;
pub const TF_CAN_MULTI_CONN: u16 = 1 << 8;
pub const TF_SEND_CACHE: u16 = 1 << 10;
pub const TF_SEND_FAST_ZERO: u16 = 1 << 11;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

// Option replies.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = 0x8000_0001;
pub const REP_ERR_POLICY: u32 = 0x8000_0002;
pub const REP_ERR_INVALID: u32 = 0x8000_0003;
pub const REP_ERR_TLS_REQD: u32 = 0x8000_0005;
pub const REP_ERR_UNKNOWN: u32 = 0x8000_0006;
pub const REP_ERR_SHUTDOWN: u32 = 0x8000_0007;
pub const REP_ERR_TOO_BIG: u32 = 0x8000_0009;

// NBD_INFO_* types.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply flags and types.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

// base:allocation status flags.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

/// The only metadata context this server knows.
pub const META_BASE_ALLOCATION: &str = "base:allocation";
/// The id the server hands out for `base:allocation` (any nonzero value would do).
pub const META_ID_BASE_ALLOCATION: u32 = 1;

/// NBD error values (a fixed subset of errno values, by the spec's numbering).
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const ENOMEM: u32 = 12;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// Longest string (export name, query, message) the spec allows.
pub const MAX_STRING: usize = 4096;

pub const OPTION_HEADER_LEN: usize = 16;
pub const REQUEST_LEN: usize = 28;
pub const SIMPLE_REPLY_LEN: usize = 16;
pub const STRUCTURED_HEADER_LEN: usize = 20;

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// The fixed part of a client option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub len: u32,
}

/// Parse the 16-byte option header; `None` if the magic is wrong (the client is not speaking
/// newstyle NBD and must be disconnected).
pub fn parse_option_header(b: &[u8; OPTION_HEADER_LEN]) -> Option<OptionHeader> {
    if be64(&b[0..8]) != OPT_MAGIC {
        return None;
    }
    Some(OptionHeader {
        option: be32(&b[8..12]),
        len: be32(&b[12..16]),
    })
}

/// A transmission-phase request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub typ: u16,
    pub handle: u64,
    pub offset: u64,
    pub len: u32,
}

/// Parse the 28-byte request header; `None` on a bad magic (framing is lost: disconnect).
pub fn parse_request(b: &[u8]) -> Option<Request> {
    debug_assert!(b.len() >= REQUEST_LEN);
    if be32(&b[0..4]) != REQUEST_MAGIC {
        return None;
    }
    Some(Request {
        flags: be16(&b[4..6]),
        typ: be16(&b[6..8]),
        handle: be64(&b[8..16]),
        offset: be64(&b[16..24]),
        len: be32(&b[24..28]),
    })
}

/// Encode a request (used by tests and the fuzz target to build client traffic).
pub fn encode_request(r: &Request) -> [u8; REQUEST_LEN] {
    let mut b = [0u8; REQUEST_LEN];
    b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&r.flags.to_be_bytes());
    b[6..8].copy_from_slice(&r.typ.to_be_bytes());
    b[8..16].copy_from_slice(&r.handle.to_be_bytes());
    b[16..24].copy_from_slice(&r.offset.to_be_bytes());
    b[24..28].copy_from_slice(&r.len.to_be_bytes());
    b
}

/// Append an option reply header plus payload.
pub fn put_option_reply(out: &mut Vec<u8>, option: u32, reply: u32, payload: &[u8]) {
    out.extend_from_slice(&REP_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
}

/// A simple reply header (for READ, followed by the data).
pub fn simple_reply(error: u32, handle: u64) -> [u8; SIMPLE_REPLY_LEN] {
    let mut b = [0u8; SIMPLE_REPLY_LEN];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&handle.to_be_bytes());
    b
}

/// A structured reply chunk header; `len` payload bytes follow.
pub fn structured_header(
    flags: u16,
    typ: u16,
    handle: u64,
    len: u32,
) -> [u8; STRUCTURED_HEADER_LEN] {
    let mut b = [0u8; STRUCTURED_HEADER_LEN];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&typ.to_be_bytes());
    b[8..16].copy_from_slice(&handle.to_be_bytes());
    b[16..20].copy_from_slice(&len.to_be_bytes());
    b
}

/// A final `NBD_REPLY_TYPE_ERROR` chunk (header and payload) with a human-readable message.
pub fn structured_error(handle: u64, error: u32, msg: &str) -> Vec<u8> {
    debug_assert!(error != 0);
    let mut m = msg.as_bytes();
    if m.len() > MAX_STRING {
        m = &m[..MAX_STRING];
    }
    let mut b = Vec::with_capacity(STRUCTURED_HEADER_LEN + 6 + m.len());
    b.extend_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        handle,
        6 + m.len() as u32,
    ));
    b.extend_from_slice(&error.to_be_bytes());
    b.extend_from_slice(&(m.len() as u16).to_be_bytes());
    b.extend_from_slice(m);
    b
}

/// A cursor over an option's payload that never panics: every accessor returns `None` when the
/// payload is too short, which the handshake turns into `NBD_REP_ERR_INVALID`.
pub struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Cursor { b }
    }
    pub fn remaining(&self) -> usize {
        self.b.len()
    }
    pub fn u16(&mut self) -> Option<u16> {
        let v = self.bytes(2)?;
        Some(be16(v))
    }
    pub fn u32(&mut self) -> Option<u32> {
        let v = self.bytes(4)?;
        Some(be32(v))
    }
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.b.len() {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    /// A length-prefixed (u32) UTF-8 string no longer than [`MAX_STRING`] and without NUL.
    pub fn string32(&mut self) -> Option<&'a str> {
        let n = self.u32()? as usize;
        if n > MAX_STRING {
            return None;
        }
        let s = std::str::from_utf8(self.bytes(n)?).ok()?;
        (!s.contains('\0')).then_some(s)
    }
}

/// The payload of `NBD_OPT_INFO` / `NBD_OPT_GO`.
#[derive(Debug, PartialEq, Eq)]
pub struct InfoRequest<'a> {
    pub name: &'a str,
    pub requests: Vec<u16>,
}

/// Parse an INFO/GO payload; `None` when it is malformed (lengths disagree, bad UTF-8, ...).
pub fn parse_info_request(data: &[u8]) -> Option<InfoRequest<'_>> {
    let mut c = Cursor::new(data);
    let name = c.string32()?;
    let n = c.u16()? as usize;
    if c.remaining() != n * 2 {
        return None;
    }
    let mut requests = Vec::with_capacity(n);
    for _ in 0..n {
        requests.push(c.u16()?);
    }
    Some(InfoRequest { name, requests })
}

/// The payload of `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`.
#[derive(Debug, PartialEq, Eq)]
pub struct MetaRequest<'a> {
    pub export: &'a str,
    pub queries: Vec<&'a str>,
}

/// Most queries accepted in one meta-context option (each is at least 4 bytes on the wire, so
/// this only bounds work for a payload already bounded by the option length limit).
pub const MAX_META_QUERIES: usize = 64;

/// Parse a meta-context payload; `None` when malformed (the reply is `NBD_REP_ERR_INVALID`), or
/// `Some(Err(()))` when it asks for more than [`MAX_META_QUERIES`] (`NBD_REP_ERR_TOO_BIG`).
pub fn parse_meta_request(data: &[u8]) -> Option<Result<MetaRequest<'_>, ()>> {
    let mut c = Cursor::new(data);
    let export = c.string32()?;
    let n = c.u32()? as usize;
    if n > MAX_META_QUERIES {
        return Some(Err(()));
    }
    let mut queries = Vec::with_capacity(n);
    for _ in 0..n {
        queries.push(c.string32()?);
    }
    if c.remaining() != 0 {
        return None;
    }
    Some(Ok(MetaRequest { export, queries }))
}

/// Which of our contexts a query names. `list` is true for `NBD_OPT_LIST_META_CONTEXT`, where the
/// bare namespace `base:` is a wildcard; in SET it selects nothing (the spec says to ignore it).
pub fn query_selects_base_allocation(query: &str, list: bool) -> bool {
    query == META_BASE_ALLOCATION || (list && query == "base:")
}

/// Short name of a command, for messages and logs.
pub fn cmd_name(typ: u16) -> &'static str {
    match typ {
        CMD_READ => "READ",
        CMD_WRITE => "WRITE",
        CMD_DISC => "DISC",
        CMD_FLUSH => "FLUSH",
        CMD_TRIM => "TRIM",
        CMD_CACHE => "CACHE",
        CMD_WRITE_ZEROES => "WRITE_ZEROES",
        CMD_BLOCK_STATUS => "BLOCK_STATUS",
        _ => "unknown command",
    }
}

/// Short name of an option, for logs.
pub fn opt_name(opt: u32) -> &'static str {
    match opt {
        OPT_EXPORT_NAME => "EXPORT_NAME",
        OPT_ABORT => "ABORT",
        OPT_LIST => "LIST",
        OPT_STARTTLS => "STARTTLS",
        OPT_INFO => "INFO",
        OPT_GO => "GO",
        OPT_STRUCTURED_REPLY => "STRUCTURED_REPLY",
        OPT_LIST_META_CONTEXT => "LIST_META_CONTEXT",
        OPT_SET_META_CONTEXT => "SET_META_CONTEXT",
        _ => "unknown option",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_roundtrip() {
        let r = Request {
            flags: 3,
            typ: CMD_WRITE,
            handle: 0xdead_beef_0102,
            offset: 1 << 40,
            len: 4096,
        };
        assert_eq!(parse_request(&encode_request(&r)), Some(r));
        let mut bad = encode_request(&r);
        bad[0] ^= 1;
        assert_eq!(parse_request(&bad), None);
    }

    #[test]
    fn info_request_lengths_must_agree() {
        let mut d = Vec::new();
        d.extend_from_slice(&3u32.to_be_bytes());
        d.extend_from_slice(b"abc");
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        d.extend_from_slice(&INFO_NAME.to_be_bytes());
        assert_eq!(
            parse_info_request(&d),
            Some(InfoRequest {
                name: "abc",
                requests: vec![INFO_BLOCK_SIZE, INFO_NAME]
            })
        );
        assert_eq!(parse_info_request(&d[..d.len() - 1]), None);
        let mut extra = d.clone();
        extra.push(0);
        assert_eq!(parse_info_request(&extra), None);
        // Name length pointing past the end.
        let mut long = d.clone();
        long[3] = 200;
        assert_eq!(parse_info_request(&long), None);
    }

    #[test]
    fn meta_request_parses_and_bounds() {
        let mut d = Vec::new();
        d.extend_from_slice(&0u32.to_be_bytes());
        d.extend_from_slice(&1u32.to_be_bytes());
        d.extend_from_slice(&(META_BASE_ALLOCATION.len() as u32).to_be_bytes());
        d.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
        let m = parse_meta_request(&d).unwrap().unwrap();
        assert_eq!(m.export, "");
        assert_eq!(m.queries, vec![META_BASE_ALLOCATION]);
        assert!(parse_meta_request(&d[..d.len() - 2]).is_none());
        let mut many = Vec::new();
        many.extend_from_slice(&0u32.to_be_bytes());
        many.extend_from_slice(&1000u32.to_be_bytes());
        assert_eq!(parse_meta_request(&many), Some(Err(())));
    }

    #[test]
    fn wildcard_only_lists() {
        assert!(query_selects_base_allocation("base:", true));
        assert!(!query_selects_base_allocation("base:", false));
        assert!(query_selects_base_allocation("base:allocation", false));
        assert!(!query_selects_base_allocation("qemu:dirty-bitmap:x", true));
    }
}
