//! The typed errors of X-Mem. Every refusal leaves the allocator as it was.

use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, XmemError>;

#[derive(Debug, thiserror::Error)]
pub enum XmemError {
    #[error("unknown tag {0} (tags come from XMem::tag)")]
    UnknownTag(u32),
    #[error("too many tags: the limit is {limit}")]
    TooManyTags { limit: usize },
    #[error("fast-tier budget of {budget} bytes is larger than {what} ({limit} bytes)")]
    BudgetTooLarge {
        budget: u64,
        what: &'static str,
        limit: u64,
    },
    #[error("pointer {0:#x} was not handed out by this XMem (or is already free)")]
    ForeignPointer(usize),
    #[error("the address-space reservation is exhausted: all {regions} regions are in use")]
    ReservationExhausted { regions: usize },
    #[error("the PM tier is full: all {slots} region slots of {path} are in use")]
    PmFull { slots: usize, path: PathBuf },
    #[error("the fast tier is full: its budget is {slots} regions")]
    FastTierFull { slots: usize },
    #[error("object of {size} bytes (align {align}) not supported: {why}")]
    BadLayout {
        size: usize,
        align: usize,
        why: &'static str,
    },
    #[error("bad configuration: {0}")]
    BadConfig(String),
    #[error("{what}: {source}")]
    Os {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("PM tier: {0}")]
    Media(#[from] pmkit_media::MediaError),
}

impl XmemError {
    /// The last OS error, named by the call that failed.
    pub(crate) fn os(what: &'static str) -> XmemError {
        XmemError::Os {
            what,
            source: std::io::Error::last_os_error(),
        }
    }
}
