//! Typed errors of the media layer. Each names the path and says what to do.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    #[error("{path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: size {size} is invalid: {why}")]
    BadSize {
        path: PathBuf,
        size: u64,
        why: String,
    },
    #[error("{path}: does not exist; pass a size (e.g. --size 1G) to create it")]
    Missing { path: PathBuf },
    #[error(
        "{path}: is not a device-dax character device ({why}); use a file path for file-backed PM"
    )]
    NotDevDax { path: PathBuf, why: String },
    #[error("{path}: {why}")]
    Unsupported { path: PathBuf, why: String },
    #[error("msync of bytes {offset}..{end}: {source}")]
    Sync {
        offset: usize,
        end: usize,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = MediaError> = std::result::Result<T, E>;

impl MediaError {
    pub(crate) fn io(path: impl Into<PathBuf>, what: &'static str, source: std::io::Error) -> Self {
        MediaError::Io {
            path: path.into(),
            what,
            source,
        }
    }
}
