//! The per-file flags (inode flags) by path and by descriptor, and their virtual xattr names;
//! open(2)'s flags.

use super::{Fd, Posix};
use crate::error::{Error, Result};
use pmkit_media::Media;

impl<M: Media> Posix<M> {
    /// A per-file flag of the file at `path` (`follow`: through a final symbolic link); `None`
    /// when it is not a regular file (only those have the flags).
    pub fn flag(&self, path: &[u8], follow: bool, flag: FileFlag) -> Result<Option<bool>> {
        let a = self.existing(path, follow)?;
        self.flag_of(a.ino, flag)
    }

    /// Set or clear a per-file flag (`Fs::set_atomic`, `Fs::set_huge`, `Fs::set_sums`): one
    /// transaction.
    pub fn set_flag(&self, path: &[u8], follow: bool, flag: FileFlag, on: bool) -> Result<()> {
        let a = self.existing(path, follow)?;
        self.set_flag_of(a.ino, flag, on)
    }

    /// [`Posix::flag`] of an open descriptor's file.
    pub fn fflag(&self, fd: Fd, flag: FileFlag) -> Result<Option<bool>> {
        let d = self.desc(fd)?;
        self.flag_of(d.ino, flag)
    }

    /// [`Posix::set_flag`] of an open descriptor's file.
    pub fn set_fflag(&self, fd: Fd, flag: FileFlag, on: bool) -> Result<()> {
        let d = self.desc(fd)?;
        self.set_flag_of(d.ino, flag, on)
    }

    fn flag_of(&self, ino: u64, flag: FileFlag) -> Result<Option<bool>> {
        match flag {
            FileFlag::Atomic => self.fs.atomic(ino),
            FileFlag::Huge => self.fs.huge(ino),
            FileFlag::Checksum => self.fs.sums(ino),
        }
    }

    fn set_flag_of(&self, ino: u64, flag: FileFlag, on: bool) -> Result<()> {
        match flag {
            FileFlag::Atomic => self.fs.set_atomic(ino, on),
            FileFlag::Huge => self.fs.set_huge(ino, on),
            FileFlag::Checksum => self.fs.set_sums(ino, on),
        }
    }
}

/// The per-file flags (inode flags), each one transaction to change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FileFlag {
    /// Every write all-or-nothing (`Fs::set_atomic`).
    Atomic,
    /// Ask for 2 MiB blocks (`Fs::set_huge`).
    Huge,
    /// Data checksums: every read checked (`Fs::set_sums`).
    Checksum,
}

impl FileFlag {
    /// The virtual extended attribute that shows and sets the flag (FUSE, the LD_PRELOAD shim).
    pub const fn xattr(self) -> &'static [u8] {
        match self {
            FileFlag::Atomic => b"user.pmkit.atomic",
            FileFlag::Huge => b"user.pmkit.huge",
            FileFlag::Checksum => b"user.pmkit.checksum",
        }
    }

    /// The flag whose virtual extended attribute is `name`.
    pub fn from_xattr(name: &[u8]) -> Option<FileFlag> {
        [FileFlag::Atomic, FileFlag::Huge, FileFlag::Checksum]
            .into_iter()
            .find(|f| f.xattr() == name)
    }
}

/// How a file is opened: the `O_*` flags of open(2) this layer honours. Others (`O_CLOEXEC`,
/// `O_SYNC`, `O_DSYNC`, `O_DIRECT`, `O_NOATIME`, ...) are accepted and change nothing here:
/// every write is already durable when it returns and nothing is cached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenFlags {
    pub read: bool,
    pub write: bool,
    pub append: bool,
    pub create: bool,
    pub excl: bool,
    pub trunc: bool,
    pub directory: bool,
    pub nofollow: bool,
    pub nonblock: bool,
    /// O_TMPFILE: a file with no name in the directory the path names (linkable later unless
    /// `excl`).
    pub tmpfile: bool,
}

impl OpenFlags {
    /// From open(2)'s flag word.
    pub fn from_bits(f: i32) -> Result<OpenFlags> {
        let (read, write) = match f & libc::O_ACCMODE {
            libc::O_RDONLY => (true, false),
            libc::O_WRONLY => (false, true),
            libc::O_RDWR => (true, true),
            _ => return Err(Error::Invalid("access mode (O_ACCMODE) is 3")),
        };
        let tmpfile = f & libc::O_TMPFILE == libc::O_TMPFILE;
        if tmpfile && (!write || f & libc::O_CREAT != 0) {
            // As Linux: an unnamed file must be writable, and O_CREAT does not go with it.
            return Err(Error::Invalid(
                "O_TMPFILE without write access, or with O_CREAT",
            ));
        }
        let has = |b: i32| f & b != 0;
        Ok(OpenFlags {
            read,
            write,
            append: has(libc::O_APPEND),
            create: has(libc::O_CREAT),
            excl: has(libc::O_EXCL),
            trunc: has(libc::O_TRUNC),
            directory: has(libc::O_DIRECTORY),
            nofollow: has(libc::O_NOFOLLOW),
            nonblock: has(libc::O_NONBLOCK),
            tmpfile,
        })
    }
}
