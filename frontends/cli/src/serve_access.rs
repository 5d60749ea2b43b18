//! Who may use `pmkit serve`: TLS (`--tls`, PSK file, certificates), the refusal to listen on a
//! network without TLS, unix socket permissions, and export names with their read-only flags and
//! the TLS identities that may write.

use anyhow::{bail, Context, Result};
use pmkit_nbd::{ExportSpec, SocketAccess, TlsConfig, TlsMode};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub(crate) struct AccessArgs {
    /// TLS: `off`, `on` (clients may upgrade with STARTTLS) or `require` (nothing but STARTTLS
    /// before TLS is up). Needs --tls-psk and/or --tls-certificates
    #[arg(long, value_name = "off|on|require", default_value = "off")]
    pub tls: TlsMode,
    /// TLS pre-shared keys: a file of `username:hexkey` lines, as made by `psktool -u NAME -p
    /// FILE` (the same file nbdkit --tls-psk and qemu's tls-creds-psk read)
    #[arg(long, value_name = "FILE")]
    pub tls_psk: Option<PathBuf>,
    /// TLS certificates: a directory with server-cert.pem, server-key.pem and (for
    /// --tls-verify-peer) ca-cert.pem, the layout nbdkit and qemu use
    #[arg(long, value_name = "DIR")]
    pub tls_certificates: Option<PathBuf>,
    /// Require a client certificate signed by DIR/ca-cert.pem (and valid now); its common name
    /// is the client's identity
    #[arg(long, requires = "tls_certificates")]
    pub tls_verify_peer: bool,
    /// Only these TLS identities (PSK usernames, verified certificate common names) may write;
    /// every other client gets every export read-only. Repeatable [default: all clients may write]
    #[arg(long = "tls-rw-identity", value_name = "NAME")]
    pub rw_identities: Vec<String>,
    /// Export this name; `NAME:ro` exports it read-only. Repeatable; the first is also the
    /// default export (the empty name). Replaces --export-name
    #[arg(
        long = "export",
        value_name = "NAME[:ro]",
        conflicts_with = "export_name"
    )]
    pub exports: Vec<String>,
    /// Allow --listen on a non-loopback address without --tls require: anyone who can reach the
    /// port can then read and overwrite the device. Only for networks you trust entirely
    #[arg(long)]
    pub trusted_network: bool,
    /// Permissions of the unix socket, in octal: who may connect [default: 600, the owner only]
    #[arg(long, value_name = "OCTAL", value_parser = parse_mode, default_value = "600")]
    pub socket_mode: u32,
    /// Group of the unix socket, by name or number (give --socket-mode 660 to let it connect)
    #[arg(long, value_name = "NAME|GID", value_parser = parse_group)]
    pub socket_group: Option<u32>,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    let m = u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .map_err(|_| format!("{s:?} is not an octal mode such as 600 or 660"))?;
    if m > 0o777 {
        return Err(format!(
            "{s}: only permission bits (at most 777) can be given"
        ));
    }
    Ok(m)
}

fn parse_group(s: &str) -> Result<u32, String> {
    if let Ok(gid) = s.parse::<u32>() {
        return Ok(gid);
    }
    // /etc/group: name:password:gid:members (getgrnam without its thread-safety caveats).
    let groups = std::fs::read_to_string("/etc/group")
        .map_err(|e| format!("cannot read /etc/group to look up {s:?}: {e}"))?;
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            Some((f.next()?, f.nth(1)?))
        })
        .find(|(name, _)| *name == s)
        .and_then(|(_, gid)| gid.parse().ok())
        .ok_or_else(|| format!("no group named {s:?} in /etc/group; give a name or a number"))
}

/// What the server is to do about access, derived from the arguments.
pub(crate) struct Access {
    pub tls_mode: TlsMode,
    pub tls: Option<Arc<TlsConfig>>,
    pub exports: Vec<ExportSpec>,
    pub write_identities: Option<Vec<String>>,
    pub socket: SocketAccess,
}

impl AccessArgs {
    /// Check the combination and load the credentials. `export_name` is the older single-name
    /// option, used when no --export is given.
    pub(crate) fn resolve(&self, listen: Option<&SocketAddr>, export_name: &str) -> Result<Access> {
        if let Some(addr) = listen {
            if !addr.ip().is_loopback() && self.tls != TlsMode::Require && !self.trusted_network {
                bail!(
                    "refusing to listen on {addr} without TLS: anyone who can reach it could read \
                     and overwrite the device. Give --tls require with --tls-psk FILE (make one \
                     with `psktool -u alice -p FILE`) or --tls-certificates DIR; or listen on \
                     127.0.0.1; or, on a network you trust entirely, add --trusted-network"
                );
            }
        }
        let creds = self.tls_psk.is_some() || self.tls_certificates.is_some();
        let tls = match (self.tls, creds) {
            (TlsMode::Off, true) => bail!(
                "--tls-psk/--tls-certificates were given but TLS is off; add --tls require (or on)"
            ),
            (TlsMode::Off, false) => None,
            (_, false) => bail!(
                "--tls {} needs credentials: --tls-psk FILE (make one with `psktool -u alice -p \
                 FILE`) and/or --tls-certificates DIR (server-cert.pem, server-key.pem, ca-cert.pem)",
                if self.tls == TlsMode::Require { "require" } else { "on" }
            ),
            (_, true) => Some(
                TlsConfig::new(
                    self.tls_psk.as_deref(),
                    self.tls_certificates.as_deref(),
                    self.tls_verify_peer,
                )
                .context("cannot set up TLS")?,
            ),
        };
        if !self.rw_identities.is_empty() && tls.is_none() {
            bail!("--tls-rw-identity names TLS identities: it needs --tls require (or on)");
        }
        let exports = if self.exports.is_empty() {
            vec![ExportSpec {
                name: export_name.to_string(),
                read_only: false,
            }]
        } else {
            self.exports.iter().map(|e| parse_export(e)).collect()
        };
        Ok(Access {
            tls_mode: self.tls,
            tls,
            exports,
            write_identities: (!self.rw_identities.is_empty()).then(|| self.rw_identities.clone()),
            socket: SocketAccess {
                mode: self.socket_mode,
                group: self.socket_group,
            },
        })
    }
}

/// `NAME`, `NAME:ro` or `NAME:rw`.
fn parse_export(s: &str) -> ExportSpec {
    match s.rsplit_once(':') {
        Some((name, "ro")) => ExportSpec {
            name: name.into(),
            read_only: true,
        },
        Some((name, "rw")) => ExportSpec {
            name: name.into(),
            read_only: false,
        },
        _ => ExportSpec {
            name: s.into(),
            read_only: false,
        },
    }
}

impl Access {
    /// The protection in words, for the banner.
    pub(crate) fn describe(&self) -> String {
        let tls = match (&self.tls, self.tls_mode) {
            (Some(t), TlsMode::Require) => format!("TLS required: {}", t.summary()),
            (Some(t), _) => format!("TLS offered (plain clients allowed): {}", t.summary()),
            (None, _) => "no TLS: plain text, no client authentication".into(),
        };
        let writers = match &self.write_identities {
            None => "every client may write (unless an export is read-only)".into(),
            Some(ids) => format!("only {} may write; others read-only", ids.join(", ")),
        };
        format!("{tls}; {writers}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_groups_exports() {
        assert_eq!(parse_mode("600"), Ok(0o600));
        assert_eq!(parse_mode("0o660"), Ok(0o660));
        assert!(parse_mode("800").is_err() && parse_mode("1777").is_err());
        assert_eq!(parse_group("0"), Ok(0));
        assert_eq!(parse_group("root"), Ok(0));
        assert!(parse_group("no-such-group-pmkit").is_err());
        assert_eq!(
            parse_export("pm0:ro"),
            ExportSpec {
                name: "pm0".into(),
                read_only: true
            }
        );
        assert_eq!(
            parse_export("a:b"),
            ExportSpec {
                name: "a:b".into(),
                read_only: false
            }
        );
    }
}
