//! systemd's readiness protocol (`Type=notify` units, sd_notify(3)): a daemon started by systemd
//! finds a datagram socket in `NOTIFY_SOCKET` and sends `READY=1` once it serves, `STOPPING=1`
//! when it begins to stop. Without `NOTIFY_SOCKET` (not under systemd) both do nothing.
//!
//! Written here rather than taken from a crate: the protocol is one datagram, and the crates
//! that wrap it (sd-notify, libsystemd) bring more than that.

use std::os::unix::net::UnixDatagram;

/// The daemon serves: systemd starts the units ordered after this one.
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={status}"));
}

/// The daemon is stopping (a signal or an unmount arrived).
pub fn stopping() {
    send("STOPPING=1");
}

fn send(msg: &str) {
    // One datagram; systemd reads up to its page-sized buffer.
    debug_assert!(msg.len() < 4096 && !msg.is_empty());
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = UnixDatagram::unbound() else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    // A leading '@' names an abstract socket (Linux only).
    let sent = match path.to_str().and_then(|s| s.strip_prefix('@')) {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name)
                .and_then(|a| sock.send_to_addr(msg.as_bytes(), &a))
        }
        None => sock.send_to(msg.as_bytes(), &path),
    };
    if let Err(e) = sent {
        tracing::warn!("cannot tell systemd ({}): {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_reaches_the_notify_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        // No other test reads NOTIFY_SOCKET.
        std::env::set_var("NOTIFY_SOCKET", &path);
        ready("serving x");
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 256];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving x");
    }
}
