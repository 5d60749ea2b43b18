//! Typed errors of the block device. Each says what failed, where, and what to do.

use pmkit_media::MediaError;

#[derive(Debug, thiserror::Error)]
pub enum BlkError {
    #[error(
        "request at byte {off} of {len} bytes is not aligned to the {block_size}-byte block size"
    )]
    Misaligned { off: u64, len: u64, block_size: u32 },
    #[error(
        "request at byte {off} of {len} bytes ends past the device capacity of {capacity} bytes"
    )]
    OutOfRange { off: u64, len: u64, capacity: u64 },
    #[error("zero-length request at byte {off}")]
    ZeroLength { off: u64 },
    #[error("request of {len} bytes is larger than the limit of {max} bytes; split it")]
    TooLarge { len: u64, max: u64 },
    #[error("block {block} (byte {off}): checksum mismatch (stored {stored:#010x}, computed {computed:#010x}); the block's data is corrupt")]
    Checksum {
        block: u64,
        off: u64,
        stored: u32,
        computed: u32,
    },
    #[error("block {block}: media error at byte {media_off} of the PM (poisoned or failed line); the block's data cannot be read. Rewrite the block to clear it, or restore it from a copy")]
    BadMedia { block: u64, media_off: u64 },
    #[error("block {block}: data read back after the write differs from what was written (--write-verify)")]
    VerifyFailed { block: u64 },
    #[error("not a pmkit block device: no PMBD superblock magic at byte 0 or 2048 (if it should be one, it is damaged beyond what `pmkit check` can read)")]
    BadMagic { found: [u8; 8] },
    #[error("superblock version {found} is not supported (this pmkit reads version {supported})")]
    BadVersion { found: u32, supported: u32 },
    #[error("the superblock uses feature bits {unknown:#x} (all: {found:#x}) that this pmkit does not know (it knows {known:#x}): the device was made by a newer pmkit; open it with that version")]
    UnknownFeatures {
        found: u64,
        unknown: u64,
        known: u64,
    },
    #[error("the block map of this atomic device is inconsistent ({why}); run `pmkit check` on it for the full list")]
    MapCorrupt { why: String },
    #[error("both superblock copies are corrupt ({why}); the device cannot be opened")]
    BadSuperblock { why: String },
    #[error("the superblock describes {expected} bytes of media but the region has {actual}; was the file truncated or resized?")]
    SizeMismatch { expected: u64, actual: u64 },
    #[error("invalid option: {0}")]
    BadOption(String),
    #[error("media of {len} bytes is too small for a device with {block_size}-byte blocks (need at least {min} bytes)")]
    TooSmall { len: u64, block_size: u32, min: u64 },
    #[error("protection `{mode}` is not available: {why}")]
    ProtectUnavailable { mode: &'static str, why: String },
    #[error("write scheme `{0}` is not available on this CPU")]
    SchemeUnavailable(&'static str),
    #[error(
        "{path}: the device is in use by {}; stop it first",
        pmkit_media::holders::describe(holders)
    )]
    Busy {
        path: std::path::PathBuf,
        /// Who holds it (pid and command), when `/proc/locks` says.
        holders: Vec<pmkit_media::Holder>,
    },
    #[error("the device is closed")]
    Closed,
    #[error("the device is open read-only: writes, trims and zeroing are refused")]
    ReadOnly,
    #[error(transparent)]
    Media(#[from] MediaError),
}

pub type Result<T, E = BlkError> = std::result::Result<T, E>;

impl BlkError {
    /// The `errno` a front end (NBD, FUSE) should report for this error.
    pub fn errno(&self) -> i32 {
        match self {
            BlkError::Misaligned { .. } | BlkError::ZeroLength { .. } | BlkError::BadOption(_) => {
                libc::EINVAL
            }
            BlkError::OutOfRange { .. } => libc::ENOSPC,
            BlkError::TooLarge { .. } => libc::EOVERFLOW,
            BlkError::Closed => libc::ESHUTDOWN,
            BlkError::ReadOnly => libc::EROFS,
            _ => libc::EIO,
        }
    }
}

/// The error of opening the media's protection: a mode that cannot run here keeps its own
/// variant, with what to do.
pub(crate) fn from_gate(e: MediaError) -> BlkError {
    match e {
        MediaError::ProtectUnavailable { mode, why } => BlkError::ProtectUnavailable {
            mode,
            why: format!("{why}; choose another protection mode (or a pkey fallback)"),
        },
        e => BlkError::Media(e),
    }
}
