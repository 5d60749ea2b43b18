//! Extended attributes on the mount: the library's, and the per-file flags served as virtual
//! xattrs (read and set by name, never listed or stored).

use super::stats::Op;
use super::PmfsOps;
use crate::ops::{Xattr, R};
use pmkit_fs::posix::FileFlag;
use pmkit_fs::XattrFlags;
use pmkit_media::Media;

/// A virtual xattr of regular files: `"1"` when writes to the file are all-or-nothing (its
/// inode's atomic flag, `Fs::set_atomic`), `"0"` when in place. Setting it sets the flag; it
/// is neither listed nor stored as an xattr, and cannot be removed (EPERM: set "0").
pub const ATOMIC_XATTR: &[u8] = FileFlag::Atomic.xattr();

/// A virtual xattr of regular files: `"1"` when the file asks for 2 MiB blocks (its inode's
/// huge flag, `Fs::set_huge`), `"0"` otherwise; the same rules as [`ATOMIC_XATTR`].
pub const HUGE_XATTR: &[u8] = FileFlag::Huge.xattr();

/// A virtual xattr of regular files: `"1"` when the file's data blocks carry checksums (its
/// inode's flag, `Fs::set_sums`), `"0"` otherwise; the same rules as [`ATOMIC_XATTR`].
pub const CHECKSUM_XATTR: &[u8] = FileFlag::Checksum.xattr();

/// Get or set a per-file flag of the library.
fn flag_get<M: pmkit_media::Media>(
    fs: &pmkit_fs::Fs<M>,
    ino: u64,
    f: FileFlag,
) -> pmkit_fs::Result<Option<bool>> {
    match f {
        FileFlag::Atomic => fs.atomic(ino),
        FileFlag::Huge => fs.huge(ino),
        FileFlag::Checksum => fs.sums(ino),
    }
}

fn flag_set<M: pmkit_media::Media>(
    fs: &pmkit_fs::Fs<M>,
    ino: u64,
    f: FileFlag,
    on: bool,
) -> pmkit_fs::Result<()> {
    match f {
        FileFlag::Atomic => fs.set_atomic(ino, on),
        FileFlag::Huge => fs.set_huge(ino, on),
        FileFlag::Checksum => fs.set_sums(ino, on),
    }
}

/// The answer to an xattr read of `data` into a buffer of `size` (0: just the size).
fn xattr_answer(data: Vec<u8>, size: u32) -> R<Xattr> {
    if size == 0 {
        Ok(Xattr::Size(data.len() as u32))
    } else if (size as usize) < data.len() {
        Err(libc::ERANGE)
    } else {
        Ok(Xattr::Data(data))
    }
}

impl<M: Media> PmfsOps<M> {
    pub(super) fn xattr_set(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
        pos: u32,
    ) -> R<()> {
        if self.read_only {
            return Err(libc::EROFS);
        }
        if pos != 0 {
            return Err(libc::EINVAL);
        }
        let f = match flags {
            0 => XattrFlags::Either,
            libc::XATTR_CREATE => XattrFlags::Create,
            libc::XATTR_REPLACE => XattrFlags::Replace,
            _ => return Err(libc::EINVAL),
        };
        if let Some(flag) = FileFlag::from_xattr(name) {
            let on = match value {
                b"1" => true,
                b"0" => false,
                _ => return Err(libc::EINVAL),
            };
            if f == XattrFlags::Create {
                return Err(libc::EEXIST); // every regular file has it
            }
            return self.lib(Op::Xattr, |fs| flag_set(fs, ino, flag, on));
        }
        self.lib(Op::Xattr, |fs| fs.setxattr(ino, name, value, f))
    }

    pub(super) fn xattr_get(&self, ino: u64, name: &[u8], size: u32) -> R<Xattr> {
        if let Some(flag) = FileFlag::from_xattr(name) {
            return match self.lib(Op::Xattr, |fs| flag_get(fs, ino, flag))? {
                Some(on) => xattr_answer(if on { b"1" } else { b"0" }.to_vec(), size),
                None => Err(libc::ENODATA),
            };
        }
        let v = self.lib(Op::Xattr, |fs| fs.getxattr(ino, name))?;
        xattr_answer(v, size)
    }

    pub(super) fn xattr_list(&self, ino: u64, size: u32) -> R<Xattr> {
        // The virtual flags (`ATOMIC_XATTR`, `HUGE_XATTR`) are read and set by name but never
        // listed: `cp -a`, `rsync -X` and `getfattr -d` copy every listed name to other file
        // systems, where these mean nothing.
        let names = self.lib(Op::Xattr, |fs| fs.listxattr(ino))?;
        let mut buf = Vec::new();
        for n in names {
            buf.extend_from_slice(&n);
            buf.push(0);
        }
        xattr_answer(buf, size)
    }

    pub(super) fn xattr_remove(&self, ino: u64, name: &[u8]) -> R<()> {
        if self.read_only {
            return Err(libc::EROFS);
        }
        if FileFlag::from_xattr(name).is_some() {
            return Err(libc::EPERM);
        }
        self.lib(Op::Xattr, |fs| fs.removexattr(ino, name))
    }
}
