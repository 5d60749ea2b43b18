//! TLS for the NBD server: the `--tls` mode, PSK key files (psktool's `username:hexkey` lines, the
//! format nbdkit and qemu read), X.509 credentials in the nbdkit/qemu directory layout, and the
//! server side of the TLS handshake that follows `NBD_OPT_STARTTLS`.
//!
//! OpenSSL, because the clients people run (libnbd, qemu, nbd-client: all GnuTLS) authenticate with
//! external pre-shared keys, which rustls does not implement; see docs/nbd.md.

use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::nid::Nid;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslFiletype, SslMethod, SslOptions, SslStream,
    SslVerifyMode, SslVersion,
};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// When TLS is offered (the NBD spec's NOTLS, SELECTIVETLS with no TLS-only export, FORCEDTLS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// No TLS: `NBD_OPT_STARTTLS` is refused with `NBD_REP_ERR_POLICY`.
    #[default]
    Off,
    /// Clients may upgrade with `NBD_OPT_STARTTLS`, or stay in plain text.
    On,
    /// Every option but STARTTLS and ABORT gets `NBD_REP_ERR_TLS_REQD` until TLS is up.
    Require,
}

impl std::str::FromStr for TlsMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" | "no" => Ok(TlsMode::Off),
            "on" | "yes" => Ok(TlsMode::On),
            "require" => Ok(TlsMode::Require),
            _ => Err(format!("unknown TLS mode {s:?}: use off, on or require")),
        }
    }
}

/// File names inside a `--tls-certificates` directory (as nbdkit and qemu expect them).
pub const CA_CERT: &str = "ca-cert.pem";
pub const SERVER_CERT: &str = "server-cert.pem";
pub const SERVER_KEY: &str = "server-key.pem";

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the PSK file {path}: {source}")]
    PskRead {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}, line {line}: {why} (each line must be `username:hexkey`, as psktool writes)")]
    PskSyntax {
        path: PathBuf,
        line: usize,
        why: &'static str,
    },
    #[error("the PSK file {0} holds no keys (make one with: psktool -u alice -p FILE)")]
    PskEmpty(PathBuf),
    #[error("{what} {path}: {source}")]
    Credentials {
        what: &'static str,
        path: PathBuf,
        source: ErrorStack,
    },
    #[error("TLS needs credentials: give a PSK file or a certificate directory")]
    NoCredentials,
    #[error("verifying client certificates needs a certificate directory (with {CA_CERT})")]
    VerifyWithoutCa,
    #[error("setting up OpenSSL: {0}")]
    Setup(#[from] ErrorStack),
}

/// Keys of a PSK file by identity (username).
type Keys = HashMap<String, Vec<u8>>;

/// Parse psktool's format: one `username:hexkey` per line; blank lines are skipped.
pub fn parse_psk_file(path: &Path, text: &str) -> Result<Keys, TlsError> {
    let mut keys = Keys::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let err = |why| TlsError::PskSyntax {
            path: path.to_path_buf(),
            line: i + 1,
            why,
        };
        let (user, hex) = line.rsplit_once(':').ok_or_else(|| err("no ':'"))?;
        if user.is_empty() {
            return Err(err("empty username"));
        }
        let key =
            decode_hex(hex).ok_or_else(|| err("the key is not an even number of hex digits"))?;
        if key.is_empty() {
            return Err(err("empty key"));
        }
        keys.insert(user.to_string(), key);
    }
    if keys.is_empty() {
        return Err(TlsError::PskEmpty(path.to_path_buf()));
    }
    Ok(keys)
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The PSK identity whose key the callback handed out, attached to the connection.
struct PskIdentity(String);

/// The connection slot for [`PskIdentity`], allocated once per process.
fn identity_index() -> Result<Index<Ssl, PskIdentity>, ErrorStack> {
    static INDEX: OnceLock<Index<Ssl, PskIdentity>> = OnceLock::new();
    if let Some(i) = INDEX.get() {
        return Ok(*i);
    }
    let i = Ssl::new_ex_index()?;
    Ok(*INDEX.get_or_init(|| i))
}

/// The server's TLS credentials, ready to accept connections.
#[derive(Clone)]
pub struct TlsConfig {
    ctx: SslContext,
    summary: String,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("summary", &self.summary)
            .finish()
    }
}

/// Who is on the other end of an accepted TLS connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The PSK username, or the verified client certificate's common name.
    pub identity: Option<String>,
    /// What protects the connection, for the log ("TLSv1.3 PSK identity alice").
    pub protection: String,
}

impl TlsConfig {
    /// Load a PSK file and/or a certificate directory (`ca-cert.pem`, `server-cert.pem`,
    /// `server-key.pem`); with `verify_peer`, clients must present a certificate signed by
    /// `ca-cert.pem` (and valid now).
    pub fn new(
        psk: Option<&Path>,
        certs: Option<&Path>,
        verify_peer: bool,
    ) -> Result<Arc<Self>, TlsError> {
        if psk.is_none() && certs.is_none() {
            return Err(TlsError::NoCredentials);
        }
        if verify_peer && certs.is_none() {
            return Err(TlsError::VerifyWithoutCa);
        }
        let mut b = SslContextBuilder::new(SslMethod::tls_server())?;
        // TLS 1.3 is negotiated whenever the client offers it; 1.2 for older clients.
        b.set_min_proto_version(Some(SslVersion::TLS1_2))?;
        // TLS 1.3 external PSKs are SHA-256 (OpenSSL's PSK callback and GnuTLS's default), so
        // TLS_AES_128_GCM_SHA256 must stay; the others serve certificate clients.
        b.set_ciphersuites(
            "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256",
        )?;
        // TLS 1.2: forward-secret AEAD suites, with (EC)DHE-PSK and plain PSK for PSK clients.
        b.set_cipher_list(
            "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:\
             ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:\
             DHE-PSK-AES128-GCM-SHA256:DHE-PSK-AES256-GCM-SHA384:ECDHE-PSK-CHACHA20-POLY1305:\
             PSK-AES128-GCM-SHA256:PSK-AES256-GCM-SHA384",
        )?;
        // A client that closes without close_notify is an ordinary end of file for NBD (its
        // framing detects truncation); session tickets are useless for one long connection.
        // The server's order of suites wins: AES-128-GCM (a TLS 1.3 mandatory suite) costs about
        // two thirds of AES-256-GCM's cipher work, which is most of TLS's cost per large I/O.
        b.set_options(
            SslOptions::IGNORE_UNEXPECTED_EOF
                | SslOptions::NO_RENEGOTIATION
                | SslOptions::CIPHER_SERVER_PREFERENCE,
        );
        b.set_num_tickets(0)?;
        // Read whole batches of records per syscall, as the plain path reads batches of requests.
        b.set_read_ahead(true);
        let mut parts = Vec::new();
        if let Some(path) = psk {
            let text = std::fs::read_to_string(path).map_err(|e| TlsError::PskRead {
                path: path.to_path_buf(),
                source: e,
            })?;
            let keys = parse_psk_file(path, &text)?;
            parts.push(format!(
                "PSK ({} identit{} from {})",
                keys.len(),
                if keys.len() == 1 { "y" } else { "ies" },
                path.display()
            ));
            let index = identity_index()?;
            b.set_psk_server_callback(move |ssl, identity, out| {
                let Some((id, key)) = identity
                    .and_then(|id| std::str::from_utf8(id).ok())
                    .and_then(|id| keys.get_key_value(id))
                else {
                    return Ok(0); // unknown identity: the handshake fails
                };
                if key.len() > out.len() {
                    return Ok(0);
                }
                out[..key.len()].copy_from_slice(key);
                // OpenSSL does not report the PSK identity of a TLS 1.3 session
                // (SSL_get_psk_identity is NULL there), so it is kept here. The handshake only
                // succeeds if the client proves it holds this identity's key.
                ssl.set_ex_data(index, PskIdentity(id.clone()));
                Ok(key.len())
            });
        }
        if let Some(dir) = certs {
            let cred = |what, name: &str, r: Result<(), ErrorStack>| {
                r.map_err(|e| TlsError::Credentials {
                    what,
                    path: dir.join(name),
                    source: e,
                })
            };
            let cert = dir.join(SERVER_CERT);
            cred(
                "server certificate",
                SERVER_CERT,
                b.set_certificate_chain_file(&cert),
            )?;
            cred(
                "server key",
                SERVER_KEY,
                b.set_private_key_file(dir.join(SERVER_KEY), SslFiletype::PEM),
            )?;
            cred("server key", SERVER_KEY, b.check_private_key())?;
            let mut what = format!("X.509 certificate {}", cert.display());
            if verify_peer {
                cred("CA certificate", CA_CERT, b.set_ca_file(dir.join(CA_CERT)))?;
                b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
                what.push_str(&format!(
                    ", client certificates verified against {}",
                    dir.join(CA_CERT).display()
                ));
            }
            parts.push(what);
        }
        Ok(Arc::new(TlsConfig {
            ctx: b.build(),
            summary: parts.join(" and "),
        }))
    }

    /// The credentials in words, for the server's banner.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// Run the server side of the TLS handshake on `s` (right after `NBD_REP_ACK` to STARTTLS).
    pub fn accept<S: Read + Write>(&self, s: S) -> Result<(SslStream<S>, Peer), String> {
        let ssl = Ssl::new(&self.ctx).map_err(|e| e.to_string())?;
        let stream = ssl.accept(s).map_err(|e| match e {
            openssl::ssl::HandshakeError::SetupFailure(e) => e.to_string(),
            openssl::ssl::HandshakeError::Failure(m)
            | openssl::ssl::HandshakeError::WouldBlock(m) => {
                let e = m.error();
                match e.ssl_error() {
                    Some(stack) => stack.to_string(),
                    None => e.to_string(),
                }
            }
        })?;
        let ssl = stream.ssl();
        let version = ssl.version_str();
        let psk = identity_index()
            .ok()
            .and_then(|i| ssl.ex_data(i))
            .map(|p| p.0.clone());
        let peer = if let Some(id) = psk {
            Peer {
                protection: format!("{version} PSK identity {id}"),
                identity: Some(id),
            }
        } else if let Some(cert) = ssl.peer_certificate() {
            // Only verified certificates get here when verification is on; without it the name
            // is informational and grants nothing.
            let cn = cert
                .subject_name()
                .entries_by_nid(Nid::COMMONNAME)
                .next()
                .and_then(|e| e.data().to_string().ok())
                // A name with a NUL or invalid UTF-8 could impersonate another; it names no one.
                .filter(|s| !s.contains(['\0', '\u{fffd}']));
            let verified = ssl.verify_mode().contains(SslVerifyMode::PEER);
            Peer {
                protection: format!(
                    "{version} certificate, client {} {}",
                    cn.as_deref().unwrap_or("(no common name)"),
                    if verified { "verified" } else { "not verified" }
                ),
                identity: if verified { cn } else { None },
            }
        } else {
            Peer {
                protection: format!("{version} certificate, client anonymous"),
                identity: None,
            }
        };
        Ok((stream, peer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_file_format() {
        let p = Path::new("k.psk");
        let keys = parse_psk_file(p, "alice:00ff10\n\nbob:ABCD\r\n").unwrap();
        assert_eq!(keys["alice"], vec![0, 0xff, 0x10]);
        assert_eq!(keys["bob"], vec![0xab, 0xcd]);
        for bad in ["alice", "alice:abc", ":00", "alice:zz", "alice:", ""] {
            assert!(parse_psk_file(p, bad).is_err(), "{bad:?} accepted");
        }
        assert!(matches!(
            parse_psk_file(p, "x:00\ny"),
            Err(TlsError::PskSyntax { line: 2, .. })
        ));
    }

    #[test]
    fn modes_parse() {
        assert_eq!("require".parse::<TlsMode>(), Ok(TlsMode::Require));
        assert_eq!("on".parse::<TlsMode>(), Ok(TlsMode::On));
        assert_eq!("off".parse::<TlsMode>(), Ok(TlsMode::Off));
        assert!("maybe".parse::<TlsMode>().is_err());
        assert!(matches!(
            TlsConfig::new(None, None, false),
            Err(TlsError::NoCredentials)
        ));
    }
}
