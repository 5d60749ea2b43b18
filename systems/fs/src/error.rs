//! Typed errors of the file system, each with the errno a FUSE front end answers.

/// What went wrong. `errno()` gives the POSIX error number.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("operation not permitted: {0}")]
    Perm(&'static str),
    #[error("permission denied: {0}")]
    Access(&'static str),
    #[error("no such device or address: {0}")]
    NoDevice(&'static str),
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("name is {len} bytes long; the limit is {max}")]
    NameTooLong { len: usize, max: usize },
    #[error("invalid name: {0}")]
    BadName(&'static str),
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("file would exceed the size limit of {max} bytes")]
    FileTooBig { max: u64 },
    #[error("no free data blocks")]
    NoSpace,
    #[error("no free inodes ({max} exist; make the file system with more)")]
    NoInodes { max: u32 },
    #[error("too many links (the limit is {max})")]
    TooManyLinks { max: u32 },
    #[error("request of {len} bytes is over the limit of {max}")]
    TooBig { len: u64, max: u64 },
    #[error("inode {0} is not in use or out of range")]
    BadInode(u64),
    #[error("operation not supported: {0}")]
    NotSupported(&'static str),
    #[error("no such extended attribute")]
    NoAttr,
    #[error("media error at byte {0}: the data cannot be read")]
    Media(usize),
    #[error("protection {mode} is not available: {why}")]
    ProtectUnavailable { mode: &'static str, why: String },
    #[error("a write to the media failed ({0}); the mount stopped writing there, as a crash would: unmount and mount again to recover")]
    WriteFailed(String),
    #[error("not a pmkit file system: {0}")]
    NotFs(String),
    #[error(
        "the file system is format version {found}; this build reads versions 2 to {reads} \
        (version 2 put the append tail record where version 1 kept atime): copy the files out \
        with the pmkit that made it, then make the file system again"
    )]
    Version { found: u32, reads: u32 },
    #[error("corrupt file system: {0}")]
    Corrupt(String),
    /// Mount found problems (`check` names the same ones); `pmkit fs check POOL --repair`
    /// fixes them.
    #[error("{}", damaged_text(problems, "POOL"))]
    Damaged { problems: Vec<String> },
    /// An inode found damaged when first used after a mount from the checkpoint: it answers
    /// EIO; the rest of the pool is served.
    #[error(
        "inode {ino} is damaged ({problem}); it answers EIO and the pool stays marked unclean; \
         after unmount, `pmkit fs check POOL --repair` repairs it"
    )]
    DamagedInode { ino: u64, problem: String },
    #[error("descriptor {0} is not open (or not open for this)")]
    BadFd(u32),
    #[error("too many levels of symbolic links")]
    Loop,
    #[error("too many open descriptors (the limit is {max})")]
    TooManyFds { max: usize },
    #[error("busy: {0}")]
    Busy(&'static str),
    /// A lock another owner holds is in the way (`Posix::lock`).
    #[error("a conflicting lock is held")]
    WouldBlock,
    #[error("too many locks held (the limit is {max})")]
    NoLocks { max: usize },
    /// An error a pool's server answered for a client (its errno; the server's log has the
    /// rest).
    #[error("the pool's server answered errno {0}")]
    Remote(i32),
}

/// The message for damaged media: the first problems, how many more, and the one command that
/// repairs `pool`.
pub fn damaged_text(problems: &[String], pool: &str) -> String {
    const SHOWN: usize = 5;
    let mut s = format!(
        "the file system is damaged; mount refused ({} problem{}):",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    for p in problems.iter().take(SHOWN) {
        s += &format!("\n  {p}");
    }
    if problems.len() > SHOWN {
        s += &format!(
            "\n  ... and {} more (`pmkit fs check {pool}` lists them)",
            problems.len() - SHOWN
        );
    }
    s += &format!("\nto repair it (not mounted): pmkit fs check {pool} --repair");
    s
}

impl Error {
    /// The errno for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound | Error::BadInode(_) => 2,     // ENOENT
            Error::Exists => 17,                           // EEXIST
            Error::NotDir => 20,                           // ENOTDIR
            Error::Perm(_) => 1,                           // EPERM
            Error::Access(_) => 13,                        // EACCES
            Error::NoDevice(_) => 6,                       // ENXIO
            Error::IsDir => 21,                            // EISDIR
            Error::NotEmpty => 39,                         // ENOTEMPTY
            Error::NameTooLong { .. } => 36,               // ENAMETOOLONG
            Error::BadName(_) | Error::Invalid(_) => 22,   // EINVAL
            Error::FileTooBig { .. } => 27,                // EFBIG
            Error::NoSpace | Error::NoInodes { .. } => 28, // ENOSPC
            Error::TooManyLinks { .. } => 31,              // EMLINK
            Error::TooBig { .. } => 7,                     // E2BIG
            Error::NotSupported(_) | Error::ProtectUnavailable { .. } => 95, // EOPNOTSUPP
            Error::NoAttr => 61,                           // ENODATA
            Error::Media(_)
            | Error::NotFs(_)
            | Error::Version { .. }
            | Error::Corrupt(_)
            | Error::Damaged { .. }
            | Error::DamagedInode { .. }
            | Error::WriteFailed(_) => 5, // EIO
            Error::BadFd(_) => 9,                          // EBADF
            Error::Loop => 40,                             // ELOOP
            Error::TooManyFds { .. } => 24,                // EMFILE
            Error::Busy(_) => 16,                          // EBUSY
            Error::WouldBlock => 11,                       // EAGAIN
            Error::NoLocks { .. } => 37,                   // ENOLCK
            Error::Remote(n) => *n,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
