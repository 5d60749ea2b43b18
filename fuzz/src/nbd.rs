//! Fuzz the NBD server's handshake and request parser: the input is everything a client sends.
//! The server must never panic, must stop at end of input, and must keep its replies well framed.
//!
//! Byte 0 picks a mode: bit 0 prepends a valid handshake (so most runs reach the transmission
//! parser), bit 1 asks for structured replies and `base:allocation` in it, bits 2-4 choose the
//! read chunk size (partial reads everywhere).
//!
//! Run: `cargo +nightly fuzz run nbd_server -- -max_len=4096` from fuzz/.

use pmkit_nbd::handshake::{handshake, negotiate, Access, Outcome};
use pmkit_nbd::proto::*;
use pmkit_nbd::{BlockSizes, Export, MemBackend, ServerConfig, TlsConfig, TlsMode};
use std::io::{self, Read, Write};
use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;

/// The client's bytes, handed out `chunk` at a time.
struct Script<'a> {
    data: &'a [u8],
    chunk: usize,
    /// Bytes the server wrote (checked for framing, then dropped).
    written: usize,
}

impl Read for Script<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.chunk).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

// Reads never block here: the default (read) is right.
impl pmkit_nbd::conn::ReadNowait for Script<'_> {}

impl Write for Script<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.written += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn option(out: &mut Vec<u8>, opt: u32, data: &[u8]) {
    out.extend_from_slice(&OPT_MAGIC.to_be_bytes());
    out.extend_from_slice(&opt.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

fn prelude(structured: bool) -> Vec<u8> {
    let mut p = (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
        .to_be_bytes()
        .to_vec();
    if structured {
        option(&mut p, OPT_STRUCTURED_REPLY, &[]);
        let mut m = Vec::new();
        m.extend_from_slice(&0u32.to_be_bytes());
        m.extend_from_slice(&1u32.to_be_bytes());
        m.extend_from_slice(&(META_BASE_ALLOCATION.len() as u32).to_be_bytes());
        m.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
        option(&mut p, OPT_SET_META_CONTEXT, &m);
    }
    option(&mut p, OPT_GO, &[0, 0, 0, 0, 0, 1, 0, 3]);
    p
}

struct World {
    backend: MemBackend,
    export: Export,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let backend = MemBackend::new(
            1 << 20,
            BlockSizes {
                minimum: 512,
                preferred: 4096,
            },
            false,
        );
        let cfg = ServerConfig {
            max_payload: 64 << 10,
            ..Default::default()
        };
        let export = Export::new(&backend, &cfg).unwrap();
        World { backend, export }
    })
}

/// One client session: `data` is everything the client sends.
pub fn nbd_server(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let w = world();
    let input = if mode & 1 != 0 {
        let mut v = prelude(mode & 2 != 0);
        v.extend_from_slice(rest);
        v
    } else {
        rest.to_vec()
    };
    let chunk = [1usize, 3, 7, 28, 64, 512, 4096, usize::MAX][((mode >> 2) & 7) as usize];
    let mut s = Script {
        data: &input,
        chunk,
        written: 0,
    };
    let not_stopping = || false;
    let stop = AtomicBool::new(false);
    let access = Access {
        tls_mode: TlsMode::Off,
        tls_active: false,
        may_write: true,
    };
    if let Ok(Outcome::Transmission(session, export)) =
        handshake(&mut s, &w.export, access, &not_stopping)
    {
        let _ = pmkit_nbd::conn::serve_inline(
            &mut s,
            &w.backend,
            &export,
            session,
            &stop,
            std::time::Duration::ZERO,
        );
    }
    // Everything was consumed or the server gave up on a protocol error; either way it returned.
    assert!(s.written > 0);
}

/// The TLS credentials for [`nbd_starttls`]: one PSK identity, from a file written once.
fn tls() -> &'static TlsConfig {
    static T: OnceLock<std::sync::Arc<TlsConfig>> = OnceLock::new();
    T.get_or_init(|| {
        let p = std::env::temp_dir().join(format!("pmkit-fuzz-{}.psk", std::process::id()));
        std::fs::write(&p, "alice:000102030405060708090a0b0c0d0e0f\n").unwrap();
        let t = TlsConfig::new(Some(&p), None, false).unwrap();
        let _ = std::fs::remove_file(&p);
        t
    })
}

/// The handshake with TLS offered (byte 0, bit 0: `on`, else `require`): option sequences before
/// STARTTLS (refused with TLS_REQD, or served), STARTTLS itself, and whatever follows it, which
/// goes to OpenSSL's TLS handshake (garbage there must end the connection, never panic). Bit 1
/// prepends a STARTTLS option so most runs reach the TLS handshake; bits 2-4 are the chunk size.
pub fn nbd_starttls(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let w = world();
    let mut input = (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
        .to_be_bytes()
        .to_vec();
    if mode & 2 != 0 {
        option(&mut input, OPT_STARTTLS, &[]);
    }
    input.extend_from_slice(rest);
    let chunk = [1usize, 3, 7, 28, 64, 512, 4096, usize::MAX][((mode >> 2) & 7) as usize];
    let mut s = Script {
        data: &input,
        chunk,
        written: 0,
    };
    let access = Access {
        tls_mode: if mode & 1 != 0 {
            TlsMode::On
        } else {
            TlsMode::Require
        },
        tls_active: false,
        may_write: false,
    };
    let not_stopping = || false;
    match handshake(&mut s, &w.export, access, &not_stopping) {
        Ok(Outcome::StartTls(resume)) => {
            let written = s.written;
            if let Ok((mut t, _peer)) = tls().accept(&mut s) {
                // Only a client holding the key gets here; then haggling goes on over TLS.
                let access = Access {
                    tls_active: true,
                    ..access
                };
                let _ = negotiate(&mut t, &w.export, access, resume, &not_stopping);
            }
            assert!(s.written >= written);
        }
        Ok(Outcome::Transmission(_, export)) => {
            // Only `on` lets a plain client in, and then read-only (no identity may write).
            assert_eq!(access.tls_mode, TlsMode::On);
            assert!(export.read_only);
        }
        Ok(Outcome::Closed) | Err(_) => {}
    }
    assert!(s.written > 0);
}
