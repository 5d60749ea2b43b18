//! The fixed newstyle handshake: greeting, client flags, and option haggling until the client
//! enters transmission (EXPORT_NAME or GO) or leaves (ABORT, disconnect).
//!
//! The handshake reads exactly the bytes of each message and nothing more, so the transmission
//! phase starts on a clean stream. Every malformed option gets an error reply and haggling goes
//! on, as the spec asks; only a broken frame (bad magic, unknown client flags, an option too long
//! to be legitimate, endless options) ends the connection.

use crate::config::{Export, MAX_OPTIONS, MAX_OPTION_LEN};
use crate::proto::{self, *};
use crate::tls::TlsMode;
use std::io::{self, Read, Write};

/// What the client negotiated for the transmission phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    pub structured: bool,
    /// `base:allocation` was selected for this export (BLOCK_STATUS allowed).
    pub base_allocation: bool,
    /// The transmission flags that were sent.
    pub flags: u16,
}

#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("I/O during handshake: {0}")]
    Io(#[from] io::Error),
    #[error("client flags {0:#x} include bits this server did not offer")]
    BadClientFlags(u32),
    #[error("option frame has a bad magic number (not an NBD newstyle client?)")]
    BadOptionMagic,
    #[error("option {option} ({name}) is {len} bytes, more than the {MAX_OPTION_LEN}-byte limit")]
    OptionTooLong {
        option: u32,
        name: &'static str,
        len: u32,
    },
    #[error("client sent more than {MAX_OPTIONS} options without starting transmission")]
    TooManyOptions,
    #[error("client asked for unknown export {0:?} with NBD_OPT_EXPORT_NAME (which cannot report errors)")]
    UnknownExport(String),
    #[error(
        "client sent NBD_OPT_EXPORT_NAME without TLS, which this server requires (--tls require)"
    )]
    TlsRequired,
    #[error("TLS handshake failed: {0}")]
    Tls(String),
}

pub enum Outcome {
    /// Transmission starts on the export the client selected, as this client may use it.
    Transmission(Session, Export),
    /// The client sent NBD_OPT_ABORT (or closed cleanly between options).
    Closed,
    /// STARTTLS was acknowledged: the caller runs the TLS handshake on the socket and continues
    /// with [`negotiate`] over the TLS stream, passing this back.
    StartTls(Resume),
}

/// Where option haggling stands across the switch to TLS.
#[derive(Debug, Clone, Copy)]
pub struct Resume {
    no_zeroes: bool,
    options: u32,
}

/// What one connection may do in the handshake.
#[derive(Debug, Clone, Copy)]
pub struct Access {
    pub tls_mode: TlsMode,
    /// TLS is up on this stream.
    pub tls_active: bool,
    /// The client may write (its identity allows it); otherwise every export is read-only to it.
    pub may_write: bool,
}

/// Run the server side of the handshake on `s`: the greeting, then [`negotiate`]. `shutting_down`
/// makes every option but ABORT fail with `NBD_REP_ERR_SHUTDOWN`.
pub fn handshake<S: Read + Write>(
    s: &mut S,
    export: &Export,
    access: Access,
    shutting_down: &dyn Fn() -> bool,
) -> Result<Outcome, HandshakeError> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&INIT_MAGIC.to_be_bytes());
    out.extend_from_slice(&OPT_MAGIC.to_be_bytes());
    out.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&out)?;
    s.flush()?;

    let mut cf = [0u8; 4];
    s.read_exact(&mut cf)?;
    let client_flags = u32::from_be_bytes(cf);
    if client_flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(HandshakeError::BadClientFlags(client_flags));
    }
    let resume = Resume {
        no_zeroes: client_flags & FLAG_C_NO_ZEROES != 0,
        options: 0,
    };
    negotiate(s, export, access, resume, shutting_down)
}

/// Option haggling, from the start or (with TLS up) after STARTTLS. Nothing negotiated before
/// TLS carries over: a man in the middle could have chosen it.
pub fn negotiate<S: Read + Write>(
    s: &mut S,
    export: &Export,
    access: Access,
    mut resume: Resume,
    shutting_down: &dyn Fn() -> bool,
) -> Result<Outcome, HandshakeError> {
    let mut st = State {
        structured: false,
        meta: false,
        access,
        no_zeroes: resume.no_zeroes,
    };
    let mut out = Vec::with_capacity(256);
    let mut data = Vec::new();
    while resume.options < MAX_OPTIONS {
        resume.options += 1;
        let mut h = [0u8; OPTION_HEADER_LEN];
        if !read_exact_or_eof(s, &mut h)? {
            return Ok(Outcome::Closed);
        }
        let hdr = parse_option_header(&h).ok_or(HandshakeError::BadOptionMagic)?;
        if hdr.len > MAX_OPTION_LEN {
            return Err(HandshakeError::OptionTooLong {
                option: hdr.option,
                name: opt_name(hdr.option),
                len: hdr.len,
            });
        }
        data.clear();
        data.resize(hdr.len as usize, 0);
        s.read_exact(&mut data)?;
        out.clear();
        tracing::debug!(option = opt_name(hdr.option), len = hdr.len, "nbd option");
        let step = if shutting_down() && hdr.option != OPT_ABORT {
            if hdr.option == OPT_EXPORT_NAME {
                // EXPORT_NAME cannot be answered with an error: the only way to refuse is to close.
                return Ok(Outcome::Closed);
            }
            put_error(
                &mut out,
                hdr.option,
                REP_ERR_SHUTDOWN,
                "server is shutting down",
            );
            Step::Continue
        } else {
            option(&mut out, hdr.option, &data, export, &mut st)?
        };
        s.write_all(&out)?;
        s.flush()?;
        match step {
            Step::Continue => {}
            Step::Abort => return Ok(Outcome::Closed),
            Step::StartTls => return Ok(Outcome::StartTls(resume)),
            Step::Go(e) => {
                return Ok(Outcome::Transmission(
                    Session {
                        structured: st.structured,
                        base_allocation: st.meta,
                        flags: e.transmission_flags(st.structured),
                    },
                    e,
                ))
            }
        }
    }
    Err(HandshakeError::TooManyOptions)
}

struct State {
    structured: bool,
    /// `base:allocation` is selected. (Every export name denotes the same device, so the name it
    /// was selected for and the name the client goes with have the same allocation.)
    meta: bool,
    access: Access,
    no_zeroes: bool,
}

enum Step {
    Continue,
    Abort,
    StartTls,
    Go(Export),
}

fn put_error(out: &mut Vec<u8>, option: u32, err: u32, msg: &str) {
    put_option_reply(out, option, err, msg.as_bytes());
}

fn put_info(out: &mut Vec<u8>, option: u32, info: u16, payload: &[u8]) {
    let mut p = Vec::with_capacity(2 + payload.len());
    p.extend_from_slice(&info.to_be_bytes());
    p.extend_from_slice(payload);
    put_option_reply(out, option, REP_INFO, &p);
}

/// Handle one option, appending its replies to `out`.
fn option(
    out: &mut Vec<u8>,
    opt: u32,
    data: &[u8],
    export: &Export,
    st: &mut State,
) -> Result<Step, HandshakeError> {
    let a = st.access;
    if opt == OPT_STARTTLS {
        let (err, msg) = if a.tls_mode == TlsMode::Off {
            (REP_ERR_POLICY, "TLS is off on this server")
        } else if a.tls_active {
            (REP_ERR_INVALID, "TLS is already on")
        } else if !data.is_empty() {
            (REP_ERR_INVALID, "NBD_OPT_STARTTLS takes no data")
        } else {
            put_option_reply(out, opt, REP_ACK, &[]);
            return Ok(Step::StartTls);
        };
        put_error(out, opt, err, msg);
        return Ok(Step::Continue);
    }
    if a.tls_mode == TlsMode::Require && !a.tls_active && opt != OPT_ABORT {
        if opt == OPT_EXPORT_NAME {
            return Err(HandshakeError::TlsRequired);
        }
        put_error(
            out,
            opt,
            REP_ERR_TLS_REQD,
            "this server requires TLS: send NBD_OPT_STARTTLS first",
        );
        return Ok(Step::Continue);
    }
    match opt {
        OPT_EXPORT_NAME => {
            let name = std::str::from_utf8(data).unwrap_or("\u{fffd}");
            let Some(e) = export.select(name, a.may_write) else {
                return Err(HandshakeError::UnknownExport(name.to_string()));
            };
            out.extend_from_slice(&e.size.to_be_bytes());
            out.extend_from_slice(&e.transmission_flags(st.structured).to_be_bytes());
            if !st.no_zeroes {
                out.extend_from_slice(&[0u8; 124]);
            }
            Ok(Step::Go(e))
        }
        OPT_ABORT => {
            put_option_reply(out, opt, REP_ACK, &[]);
            Ok(Step::Abort)
        }
        OPT_LIST => {
            if !data.is_empty() {
                put_error(out, opt, REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
                return Ok(Step::Continue);
            }
            for e in export.exports.iter() {
                let mut p = Vec::new();
                p.extend_from_slice(&(e.name.len() as u32).to_be_bytes());
                p.extend_from_slice(e.name.as_bytes());
                p.extend_from_slice(export.description.as_bytes());
                put_option_reply(out, opt, REP_SERVER, &p);
            }
            put_option_reply(out, opt, REP_ACK, &[]);
            Ok(Step::Continue)
        }
        OPT_STRUCTURED_REPLY => {
            if !data.is_empty() {
                put_error(
                    out,
                    opt,
                    REP_ERR_INVALID,
                    "NBD_OPT_STRUCTURED_REPLY takes no data",
                );
            } else {
                st.structured = true;
                put_option_reply(out, opt, REP_ACK, &[]);
            }
            Ok(Step::Continue)
        }
        OPT_INFO | OPT_GO => {
            let Some(req) = parse_info_request(data) else {
                put_error(
                    out,
                    opt,
                    REP_ERR_INVALID,
                    "malformed NBD_OPT_INFO/GO payload",
                );
                return Ok(Step::Continue);
            };
            let Some(export) = export.select(req.name, a.may_write) else {
                let names: Vec<&str> = export.exports.iter().map(|e| e.name.as_str()).collect();
                let msg = format!("no export named {:?} (this server has {names:?})", req.name);
                put_error(out, opt, REP_ERR_UNKNOWN, &msg);
                return Ok(Step::Continue);
            };
            let mut e = Vec::with_capacity(10);
            e.extend_from_slice(&export.size.to_be_bytes());
            e.extend_from_slice(&export.transmission_flags(st.structured).to_be_bytes());
            put_info(out, opt, INFO_EXPORT, &e);
            // Sent even when not requested: we enforce non-default constraints, and clients
            // ignore information they did not ask for.
            let (min, pref, max) = export.block_size_info();
            let mut b = Vec::with_capacity(12);
            for v in [min, pref, max] {
                b.extend_from_slice(&v.to_be_bytes());
            }
            put_info(out, opt, INFO_BLOCK_SIZE, &b);
            if req.requests.contains(&INFO_NAME) {
                put_info(out, opt, INFO_NAME, export.name.as_bytes());
            }
            if req.requests.contains(&INFO_DESCRIPTION) && !export.description.is_empty() {
                put_info(out, opt, INFO_DESCRIPTION, export.description.as_bytes());
            }
            put_option_reply(out, opt, REP_ACK, &[]);
            if opt == OPT_GO {
                Ok(Step::Go(export))
            } else {
                Ok(Step::Continue)
            }
        }
        OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
            let set = opt == OPT_SET_META_CONTEXT;
            if set {
                // Replaces the previous selection even if this one fails.
                st.meta = false;
            }
            if !st.structured {
                put_error(
                    out,
                    opt,
                    REP_ERR_INVALID,
                    "negotiate NBD_OPT_STRUCTURED_REPLY before meta contexts",
                );
                return Ok(Step::Continue);
            }
            let req = match parse_meta_request(data) {
                None => {
                    put_error(out, opt, REP_ERR_INVALID, "malformed meta context payload");
                    return Ok(Step::Continue);
                }
                Some(Err(())) => {
                    put_error(out, opt, REP_ERR_TOO_BIG, "too many meta context queries");
                    return Ok(Step::Continue);
                }
                Some(Ok(r)) => r,
            };
            if export.find(req.export).is_none() {
                put_error(
                    out,
                    opt,
                    REP_ERR_UNKNOWN,
                    &format!("no export named {:?}", req.export),
                );
                return Ok(Step::Continue);
            }
            let selected = if req.queries.is_empty() {
                !set // LIST with no query lists everything; SET with none selects nothing.
            } else {
                req.queries
                    .iter()
                    .any(|q| query_selects_base_allocation(q, !set))
            };
            if selected {
                let id = if set { META_ID_BASE_ALLOCATION } else { 0 };
                let mut p = Vec::new();
                p.extend_from_slice(&id.to_be_bytes());
                p.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
                put_option_reply(out, opt, REP_META_CONTEXT, &p);
                if set {
                    st.meta = true;
                }
            }
            put_option_reply(out, opt, REP_ACK, &[]);
            Ok(Step::Continue)
        }
        _ => {
            let msg = format!(
                "option {opt} ({}) is not supported by this server",
                proto::opt_name(opt)
            );
            put_error(out, opt, REP_ERR_UNSUP, &msg);
            Ok(Step::Continue)
        }
    }
}

/// `read_exact`, except that EOF before the first byte returns `Ok(false)` (a clean close).
fn read_exact_or_eof<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
