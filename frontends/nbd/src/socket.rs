//! The unix socket path: replacing a stale socket left by a killed server (and nothing else), and
//! binding with the permissions asked for before any client can connect.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

/// Who may connect to the socket: its file mode and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketAccess {
    /// Permission bits (e.g. 0o600: the owner only; 0o660 with `group`: also that group).
    pub mode: u32,
    pub group: Option<u32>,
}

impl Default for SocketAccess {
    fn default() -> Self {
        SocketAccess {
            mode: 0o600,
            group: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("cannot listen on {what}: {source}")]
    Listen { what: String, source: io::Error },
    #[error("{0} exists and is not a socket; choose another --socket path or remove it")]
    NotASocket(std::path::PathBuf),
    #[error("another server is already listening on {0}")]
    InUse(std::path::PathBuf),
    #[error("socket mode {0:o} has bits beyond the permission bits (0777)")]
    BadMode(u32),
}

fn listen_err(p: &Path, e: io::Error) -> SocketError {
    SocketError::Listen {
        what: p.display().to_string(),
        source: e,
    }
}

/// Make `p` free for a new socket: nothing there, or a socket nobody listens on (removed). A file
/// that is not a socket (a symlink included: `lstat`) is never touched.
pub fn prepare_socket_path(p: &Path) -> Result<(), SocketError> {
    let m = match std::fs::symlink_metadata(p) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(listen_err(p, e)),
        Ok(m) => m,
    };
    if !m.file_type().is_socket() {
        return Err(SocketError::NotASocket(p.to_path_buf()));
    }
    if UnixStream::connect(p).is_ok() {
        return Err(SocketError::InUse(p.to_path_buf()));
    }
    // Nobody listening: a stale socket from a server that was killed. Remove it only if it is
    // still the very socket inspected above (not something swapped in meanwhile).
    match std::fs::symlink_metadata(p) {
        Ok(n) if n.file_type().is_socket() && n.dev() == m.dev() && n.ino() == m.ino() => {
            std::fs::remove_file(p).map_err(|e| listen_err(p, e))
        }
        Ok(_) => Err(SocketError::NotASocket(p.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(listen_err(p, e)),
    }
}

/// socket + bind + chmod/chown + listen: the permissions are in place before `listen`, so no
/// client can connect through the wider mode the umask gave the new file.
pub fn bind_unix(p: &Path, access: SocketAccess) -> Result<UnixListener, SocketError> {
    if access.mode & !0o777 != 0 {
        return Err(SocketError::BadMode(access.mode));
    }
    let err = |e| listen_err(p, e);
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(err(io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain data, for which all zeroes is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = p.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path is empty, too long (at most 107 bytes) or contains NUL",
        )));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: `addr` is a valid sockaddr_un and `len` does not exceed its size.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(err(io::Error::last_os_error()));
    }
    let set = (|| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(access.mode))?;
        if let Some(gid) = access.group {
            std::os::unix::fs::lchown(p, None, Some(gid))?;
        }
        // SAFETY: listen(2) on a bound socket we own.
        if unsafe { libc::listen(fd.as_raw_fd(), 1024) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    })();
    if let Err(e) = set {
        let _ = std::fs::remove_file(p);
        return Err(err(e));
    }
    Ok(UnixListener::from(fd))
}
