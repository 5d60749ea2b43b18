//! Typed errors of the object store. Each says which object or structure, what failed, and what
//! to do about it.

use pmkit_media::MediaError;

#[derive(Debug, thiserror::Error)]
pub enum ObjError {
    #[error(transparent)]
    Media(#[from] MediaError),
    #[error("not a PMO pool: {0}")]
    NotAPool(String),
    #[error("corrupt pool: {0}; nothing was changed (run `pmkit obj check` for a full report)")]
    Corrupt(String),
    #[error("invalid argument: {0}")]
    BadArgument(String),
    #[error("object name {name:?} is invalid: {why}")]
    BadName { name: String, why: String },
    #[error("object name {name:?} is {len} bytes long; the limit is {max}")]
    NameTooLong {
        name: String,
        len: usize,
        max: usize,
    },
    #[error("object {name:?} already exists; delete it first or pick another name")]
    Exists { name: String },
    #[error("no object named {name:?} in this pool (see `pmkit obj list`)")]
    NotFound { name: String },
    #[error("pool full: object {name:?} needs {need} bytes (two slots) but the largest free extent is {largest} bytes")]
    PoolFull {
        name: String,
        need: u64,
        largest: u64,
    },
    #[error(
        "object table full: {max} objects exist; delete one or create a pool with more entries"
    )]
    TableFull { max: u32 },
    #[error("object {name:?} is busy: {why}")]
    Busy { name: String, why: &'static str },
    #[error("handle {handle} is not attached (detached, or from another pool)")]
    NotAttached { handle: u64 },
    #[error("object {name:?} is attached read-only: {what} needs a read-write attach")]
    ReadOnly { name: String, what: &'static str },
    #[error("access {off}+{len} is outside object {name:?} of {size} bytes")]
    OutOfBounds {
        name: String,
        off: u64,
        len: u64,
        size: u64,
    },
    #[error("one sync can publish at most {max} objects atomically, {n} were given")]
    TooMany { n: usize, max: usize },
    #[error("object {name:?} appears twice in one sync")]
    Duplicate { name: String },
    #[error("too many attachments: at most {max} handles may be attached at once")]
    TooManyHandles { max: usize },
    /// [`crate::Pool::open_read_only`] met a committed sync a crash left to roll forward.
    #[error(
        "a committed sync of {objects} objects, interrupted by a crash, must be rolled forward \
         before the pool is read; that needs write access (open it read-write once)"
    )]
    NeedsRecovery { objects: usize },
    /// The media cannot return bytes an operation needs (poison on real PM, an injected media
    /// error on the crash simulator): `what` names them (an object and slot, a table entry, the
    /// header), `media_off` is the first bad byte. Nothing read from there was handed out.
    #[error(
        "media error: {what} cannot be read (first bad byte at media offset {media_off:#x}); \
         none of it was returned"
    )]
    BadMedia { what: String, media_off: u64 },
    /// A page of an object's published slot does not match its CRC (checksummed pools): the
    /// media returned bytes, but not the ones written. None of them was handed out.
    #[error(
        "data checksum mismatch: object {object:?} slot {slot} page {page} (stored {stored:#010x}, \
         computed {computed:#010x}); none of it was returned (replace the object: delete, \
         create and sync it again)"
    )]
    Checksum {
        object: String,
        slot: u8,
        page: u64,
        stored: u32,
        computed: u32,
    },
    /// The operating system refused a resource: a mapping, a change of page rights, or the
    /// fault handler. Not the caller's argument: retry later, or free memory or mappings.
    #[error("cannot {what}: {source} (out of memory, or the process's map count limit?)")]
    Resource {
        what: &'static str,
        source: std::io::Error,
    },
}

impl ObjError {
    /// The operating system's error number behind a [`ObjError::Resource`] error (ENOMEM when
    /// the OS gave none), or EIO for [`ObjError::BadMedia`] and [`ObjError::Checksum`], for callers that report errno
    /// values.
    pub fn os_errno(&self) -> Option<i32> {
        match self {
            ObjError::Resource { source, .. } => {
                Some(source.raw_os_error().unwrap_or(libc::ENOMEM))
            }
            ObjError::BadMedia { .. } | ObjError::Checksum { .. } => Some(libc::EIO),
            _ => None,
        }
    }
}

pub type Result<T, E = ObjError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_errors_carry_the_os_errno() {
        let refused = ObjError::Resource {
            what: "map a DRAM shadow buffer",
            source: std::io::Error::from_raw_os_error(libc::EAGAIN),
        };
        assert_eq!(refused.os_errno(), Some(libc::EAGAIN));
        assert!(refused
            .to_string()
            .starts_with("cannot map a DRAM shadow buffer: "));
        let no_number = ObjError::Resource {
            what: "install the write-fault handler",
            source: std::io::Error::other("refused"),
        };
        assert_eq!(no_number.os_errno(), Some(libc::ENOMEM));
        assert_eq!(ObjError::BadArgument("x".into()).os_errno(), None);
        let bad = ObjError::BadMedia {
            what: "object \"a\" (slot 1)".into(),
            media_off: 0x3040,
        };
        assert_eq!(bad.os_errno(), Some(libc::EIO));
        assert!(bad
            .to_string()
            .contains("object \"a\" (slot 1) cannot be read"));
        assert!(bad.to_string().contains("0x3040"));
    }
}
