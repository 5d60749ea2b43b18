//! Typed errors of the media layer. Each names the path and says what to do.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    // The OS error is part of the message and deliberately not `source()`: a chain printer
    // (anyhow's `{:#}`) would otherwise print it twice.
    #[error("{path}: {what}: {err}")]
    Io {
        path: PathBuf,
        what: &'static str,
        err: std::io::Error,
    },
    #[error("{path}: size {size} is invalid: {why}")]
    BadSize {
        path: PathBuf,
        size: u64,
        why: String,
    },
    #[error("{path}: does not exist")]
    Missing { path: PathBuf },
    #[error(
        "{path}: is not a device-dax character device ({why}); use a file path for file-backed PM"
    )]
    NotDevDax { path: PathBuf, why: String },
    #[error("{path}: {why}")]
    Unsupported { path: PathBuf, why: String },
    #[error("{path}: write through the kernel at offset {offset} failed: {err}")]
    Write {
        path: PathBuf,
        offset: u64,
        err: std::io::Error,
    },
    /// Another process holds the file's lock: a mount, a server, a program using the pool.
    #[error("{path}: in use by {}; stop it first (for a mount: pmkit fs umount DIR; for a server: SIGTERM)", crate::holders::describe(holders))]
    InUse {
        path: PathBuf,
        holders: Vec<crate::holders::Holder>,
    },
    /// A protection mode cannot run on this CPU or media.
    #[error("protection {mode} is not available: {why}")]
    ProtectUnavailable { mode: &'static str, why: String },
    /// A store to the media failed earlier (see `guard`): writes fail until it is opened again.
    #[error("{path}: an earlier store failed ({why}); writes are refused until the media is opened again, which recovers it as after a crash")]
    Poisoned { path: PathBuf, why: String },
    #[error("msync of bytes {offset}..{end}: {err}")]
    Sync {
        offset: usize,
        end: usize,
        err: std::io::Error,
    },
}

pub type Result<T, E = MediaError> = std::result::Result<T, E>;

impl MediaError {
    pub(crate) fn io(path: impl Into<PathBuf>, what: &'static str, err: std::io::Error) -> Self {
        MediaError::Io {
            path: path.into(),
            what,
            err,
        }
    }

    /// The OS error number behind this error, if an OS call failed (`EROFS`, `EACCES`, ...).
    pub fn os_error(&self) -> Option<i32> {
        match self {
            MediaError::Io { err, .. }
            | MediaError::Sync { err, .. }
            | MediaError::Write { err, .. } => err.raw_os_error(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    /// Printed with its causes (anyhow's `{:#}`), an OS error appears once.
    #[test]
    fn os_error_is_said_once() {
        let e = MediaError::io(
            "/x",
            "cannot open read-write",
            std::io::Error::from_raw_os_error(libc::EROFS),
        );
        let mut all = e.to_string();
        let mut src = e.source();
        while let Some(s) = src {
            all.push_str(&format!(": {s}"));
            src = s.source();
        }
        assert_eq!(all.matches("os error 30").count(), 1, "{all}");
        assert_eq!(e.os_error(), Some(libc::EROFS));
    }
}
