//! The calls that change or check a node's attributes by path or descriptor: chmod, chown,
//! times, truncate and access, with their permission rules (`access.rs`).

use super::access::W;
use super::{Fd, Posix};
use crate::{Attr, Error, Kind, Result, SetAttr};
use pmkit_media::Media;

impl<M: Media> Posix<M> {
    /// access(2) and faccessat(2): whether `want` (a mix of `R_OK`, `W_OK`, `X_OK`; 0 for
    /// existence) is allowed, for the credentials checked (their effective ids: `AT_EACCESS`).
    pub fn access(&self, path: &[u8], want: u32, follow: bool) -> Result<()> {
        let a = self.existing(path, follow)?;
        self.checking(|c| c.check(&a, want & 7, "the mode refuses this access"))?;
        Ok(())
    }

    /// chmod(2) of an existing node: its owner (or root) only; set-group-ID is dropped for a
    /// caller outside the file's group.
    fn set_mode(&self, a: &Attr, mode: u32) -> Result<()> {
        let mode = self
            .checking(|c| match c.owns(a) {
                true => Ok(c.chmod_mode(a, mode)),
                false => Err(Error::Perm("only the owner may change the mode")),
            })?
            .unwrap_or(mode & 0o7777);
        let s = SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        self.fs.setattr(a.ino, &s).map(drop)
    }

    pub fn chmod(&self, path: &[u8], mode: u32) -> Result<()> {
        self.set_mode(&self.existing(path, true)?, mode)
    }

    /// fchmodat(2): `follow` false changes a final symbolic link itself.
    pub fn chmod_at(&self, path: &[u8], mode: u32, follow: bool) -> Result<()> {
        self.set_mode(&self.existing(path, follow)?, mode)
    }

    pub fn fchmod(&self, fd: Fd, mode: u32) -> Result<()> {
        self.set_mode(&self.fstat(fd)?, mode)
    }

    fn set_owner(&self, a: &Attr, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.checking(|c| c.may_chown(a, uid, gid))?;
        // As chown(2) on Linux, whoever calls it: a non-directory loses its set-ID bits, in
        // the chown's own transaction.
        let s = SetAttr {
            uid,
            gid,
            kill_suidgid: true,
            ..SetAttr::default()
        };
        self.fs.setattr(a.ino, &s).map(drop)
    }

    /// chown(2) and lchown(2) (`follow` false): `None` leaves an id unchanged.
    pub fn chown(
        &self,
        path: &[u8],
        uid: Option<u32>,
        gid: Option<u32>,
        follow: bool,
    ) -> Result<()> {
        self.set_owner(&self.existing(path, follow)?, uid, gid)
    }

    pub fn fchown(&self, fd: Fd, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.set_owner(&self.fstat(fd)?, uid, gid)
    }

    /// Set times (`None`: unchanged); `now_only`: every time given is the current time
    /// (utimensat's NULL or `UTIME_NOW`), which write permission allows as well as ownership.
    fn set_times(
        &self,
        a: &Attr,
        atime: Option<i64>,
        mtime: Option<i64>,
        now_only: bool,
    ) -> Result<()> {
        if atime.is_none() && mtime.is_none() {
            return Ok(());
        }
        self.checking(|c| c.may_set_times(a, now_only))?;
        let s = SetAttr {
            atime,
            mtime,
            ..SetAttr::default()
        };
        self.fs.setattr(a.ino, &s).map(drop)
    }

    /// utimensat(2): `times` as its array (`None`: NULL, both now; `UTIME_NOW` and
    /// `UTIME_OMIT` per entry); `follow` false: `AT_SYMLINK_NOFOLLOW`.
    pub fn utimensat(
        &self,
        path: &[u8],
        times: Option<[libc::timespec; 2]>,
        follow: bool,
    ) -> Result<()> {
        let (atime, mtime, now_only) = utimensat_times(times)?;
        self.set_times(&self.existing(path, follow)?, atime, mtime, now_only)
    }

    /// futimens(3), `times` as for [`Posix::utimensat`].
    pub fn futimens(&self, fd: Fd, times: Option<[libc::timespec; 2]>) -> Result<()> {
        let (atime, mtime, now_only) = utimensat_times(times)?;
        self.set_times(&self.fstat(fd)?, atime, mtime, now_only)
    }

    pub fn truncate(&self, path: &[u8], len: u64) -> Result<()> {
        let a = self.existing(path, true)?;
        if a.kind == Kind::Dir {
            return Err(Error::IsDir);
        }
        self.checking(|c| c.check(&a, W, "no write permission on the file"))?;
        let s = SetAttr {
            size: Some(len),
            kill_suidgid: self.kills_privs(),
            ..SetAttr::default()
        };
        self.fs.setattr(a.ino, &s).map(drop)
    }

    /// Whether a write or truncate by this process clears set-ID bits: Linux does unless the
    /// caller has CAP_FSETID (here: is root). Without credentials (the library used directly,
    /// not as a process's file system) nothing is cleared.
    pub(super) fn kills_privs(&self) -> bool {
        matches!(self.checking(|c| Ok(!c.is_root())), Ok(Some(true)))
    }

    /// Before a write by a caller without CAP_FSETID: clear the file's set-ID bits if it has
    /// any ([`crate::Fs::kill_suidgid`]).
    pub(super) fn kill_privs_for_write(&self, ino: u64) -> Result<()> {
        match self.kills_privs() {
            true => self.fs.kill_suidgid(ino),
            false => Ok(()),
        }
    }

    /// utimensat(2) with explicit times (nanoseconds since the epoch; `None`: unchanged).
    pub fn utimens(&self, path: &[u8], atime: Option<i64>, mtime: Option<i64>) -> Result<()> {
        self.set_times(&self.existing(path, true)?, atime, mtime, false)
    }
}

/// utimensat(2)'s array as (access time, modification time) in nanoseconds (`None`:
/// unchanged), and whether no time is explicit (all now or omitted: write permission is
/// enough, not only ownership). "Now" is the coarse clock the inode times use.
fn utimensat_times(times: Option<[libc::timespec; 2]>) -> Result<(Option<i64>, Option<i64>, bool)> {
    let now = crate::attr::now();
    let Some([a, m]) = times else {
        return Ok((Some(now), Some(now), true));
    };
    let one = |t: libc::timespec| match t.tv_nsec {
        libc::UTIME_NOW => Ok((Some(now), false)),
        libc::UTIME_OMIT => Ok((None, false)),
        n if (0..1_000_000_000).contains(&n) => {
            Ok((Some(crate::attr::ns_of_timespec(t.tv_sec, n)), true))
        }
        _ => Err(Error::Invalid("a time out of range")),
    };
    let ((atime, a_explicit), (mtime, m_explicit)) = (one(a)?, one(m)?);
    Ok((atime, mtime, !a_explicit && !m_explicit))
}
