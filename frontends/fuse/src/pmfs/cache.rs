//! How much the kernel may cache for a PMFS mount (`pmkit fs mount --cache MODE`). In all but
//! `writeback` a `write` reaches the library, and so PM, before it returns; `writeback` is the
//! kernel's write-back cache, where writes land in the page cache and reach PM when the kernel
//! writes them back: at fsync, at close, under memory pressure, or on its own timer. Otherwise
//! the modes differ in how long the kernel may answer `stat` and name lookups by itself, and
//! whether a file's pages survive a close and reopen. All of it is safe because
//! every change to the pool comes through this one kernel mount (the pool is locked while
//! mounted), which updates or invalidates what it changes; the timeouts only bound how long a
//! request may be skipped. docs/fs.md ("The FUSE mount") has the measurements behind the default.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A cache mode of the mount.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// Nothing cached: every `stat` and every path component is a request to the daemon.
    None,
    /// Attributes and names for 1 s; pages dropped at each open (the first mount's choice).
    Short,
    /// Attributes and names for an hour, missing names too (negative entries, so a `create`
    /// skips its failing `lookup` next time), and pages kept across opens (`FOPEN_KEEP_CACHE`).
    /// The default: measured by `pmkit bench fs` (docs/fs.md).
    #[default]
    Long,
    /// `Long`, and the kernel's write-back cache: a `write` returns once it is in the page
    /// cache; `fsync`, `fdatasync` and `close` make it durable (the kernel writes the file's
    /// dirty pages back first), as on a disk file system. Opt-in.
    Writeback,
}

impl CacheMode {
    pub const ALL: [CacheMode; 4] = [
        CacheMode::None,
        CacheMode::Short,
        CacheMode::Long,
        CacheMode::Writeback,
    ];

    /// How long the kernel may trust attributes and names.
    pub fn ttl(self) -> Duration {
        match self {
            CacheMode::None => Duration::ZERO,
            CacheMode::Short => Duration::from_secs(1),
            CacheMode::Long | CacheMode::Writeback => Duration::from_secs(3600),
        }
    }

    /// Whether a missing name is answered as a negative entry the kernel may cache for
    /// [`Self::ttl`] (else a plain ENOENT, asked again each time).
    pub fn negative(self) -> bool {
        self.ttl() == CacheMode::Long.ttl()
    }

    /// Whether a file's page cache is kept across opens.
    pub fn keep_pages(self) -> bool {
        matches!(self, CacheMode::Long | CacheMode::Writeback)
    }

    /// Whether writes are cached by the kernel and written back later (FUSE_WRITEBACK_CACHE).
    pub fn writeback(self) -> bool {
        self == CacheMode::Writeback
    }

    pub fn name(self) -> &'static str {
        match self {
            CacheMode::None => "none",
            CacheMode::Short => "short",
            CacheMode::Long => "long",
            CacheMode::Writeback => "writeback",
        }
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CacheMode {
    type Err = String;
    fn from_str(s: &str) -> Result<CacheMode, String> {
        CacheMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown cache mode `{s}`: none, short, long or writeback"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_modes_differ() {
        for m in CacheMode::ALL {
            assert_eq!(m.name().parse::<CacheMode>(), Ok(m));
        }
        assert!("write-back".parse::<CacheMode>().is_err());
        assert!(CacheMode::Writeback.keep_pages() && CacheMode::Writeback.negative());
        assert!(CacheMode::ALL.iter().filter(|m| m.writeback()).count() == 1);
        assert_eq!(CacheMode::None.ttl(), Duration::ZERO);
        assert!(CacheMode::Short.ttl() < CacheMode::Long.ttl());
        assert!(!CacheMode::Short.negative() && CacheMode::Long.negative());
    }
}
