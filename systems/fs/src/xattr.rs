//! User extended attributes: all of one inode's in one 4 KiB block (`xblock.rs`), replaced whole
//! by copy-on-write in a transaction. In format 3 the block ends in its checksum: attributes
//! changed behind the file system's back are found, not served.

use crate::attr::now;
use crate::error::{Error, Result};
use crate::layout::{BLOCK, NAME_MAX};
use crate::xblock::{decode, encode_block, Xattrs, SUM};
use crate::Fs;
use pmkit_media::Media;

/// How `setxattr` treats an existing attribute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XattrFlags {
    #[default]
    Either,
    /// Fail with `Exists` if it exists (XATTR_CREATE).
    Create,
    /// Fail with `NoAttr` unless it exists (XATTR_REPLACE).
    Replace,
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong {
            len: name.len(),
            max: NAME_MAX,
        });
    }
    // The namespaces Linux's disk file systems store as plain names. Who may use which (user.*
    // only on files and directories, trusted.* with CAP_SYS_ADMIN, security.* through the
    // LSMs) is the kernel's VFS check on the mount; system.* (ACLs) is not served.
    let stored = NAMESPACES
        .iter()
        .any(|ns| name.starts_with(ns) && name.len() > ns.len());
    if !stored {
        return Err(Error::NotSupported(
            "only user.*, trusted.* and security.* extended attributes",
        ));
    }
    Ok(())
}

/// The xattr namespaces stored.
const NAMESPACES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];

/// File capabilities: cleared with the set-ID bits (a write or truncate by a caller without
/// CAP_FSETID, a chown), as Linux's `cap_inode_killpriv` does; under FUSE's
/// `HANDLE_KILLPRIV_V2` that is the file system's work.
const CAPABILITY: &[u8] = b"security.capability";

impl<M: Media> Fs<M> {
    /// The attributes in `xblock`. Its checksum (format 3) was checked with the inode by `live`
    /// (the walk's checks, once per mount), so a damaged block is EIO before this reads it.
    fn xattrs(&self, xblock: u64) -> Result<Xattrs> {
        if xblock == 0 {
            return Ok(Xattrs::new());
        }
        let mut b = vec![0u8; BLOCK];
        let at = xblock as usize * BLOCK;
        if let Some(bad) = self.pm.first_bad(at, BLOCK) {
            return Err(Error::Media(bad));
        }
        self.pm.read(at, &mut b);
        decode(&b).map_err(|e| Error::Corrupt(format!("xattr block {xblock}: {e}")))
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        // A name of a namespace not stored, or a file with no xattrs (most; the kernel asks
        // for security.capability often), is answered without reading the block.
        if n.xattr == 0 || check_name(name).is_err() {
            return Err(Error::NoAttr);
        }
        self.xattrs(n.xattr)?.remove(name).ok_or(Error::NoAttr)
    }

    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        Ok(self.xattrs(n.xattr)?.into_keys().collect())
    }

    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        check_name(name)?;
        self.change_xattrs(ino, |x| {
            match (flags, x.contains_key(name)) {
                (XattrFlags::Create, true) => return Err(Error::Exists),
                (XattrFlags::Replace, false) => return Err(Error::NoAttr),
                _ => {}
            }
            x.insert(name.to_vec(), value.to_vec());
            Ok(())
        })
    }

    /// Remove `ino`'s file capabilities (`security.capability`) if it has any: before a write
    /// or truncate that clears set-ID bits, and before a chown (its own transaction, first, so
    /// a crash between the two never leaves a capability on a file already changed). A file
    /// without xattrs costs a read of its inode.
    pub(crate) fn kill_capability(&self, ino: u64) -> Result<()> {
        let has = {
            let _ns = self.ns.read();
            let _g = self.stripe(ino).lock();
            let n = self.live(ino)?;
            self.has_capability(&n)?
        };
        match has {
            true => match self.removexattr(ino, CAPABILITY) {
                Err(Error::NoAttr) => Ok(()), // removed meanwhile
                r => r,
            },
            false => Ok(()),
        }
    }

    /// Whether inode `n` (read under its lock) has file capabilities.
    pub(crate) fn has_capability(&self, n: &crate::inode::Inode) -> Result<bool> {
        Ok(n.xattr != 0 && self.xattrs(n.xattr)?.contains_key(CAPABILITY))
    }

    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.change_xattrs(ino, |x| x.remove(name).map(|_| ()).ok_or(Error::NoAttr))
    }

    fn change_xattrs(&self, ino: u64, f: impl FnOnce(&mut Xattrs) -> Result<()>) -> Result<()> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        let mut x = self.xattrs(n.xattr)?;
        f(&mut x)?;
        let mut tx = self.tx();
        let mut n = tx.inode(ino);
        if n.xattr != 0 {
            tx.free_after.push(n.xattr);
        }
        n.xattr = if x.is_empty() {
            0
        } else {
            let summed = self.geo.sums();
            let max = BLOCK - if summed { SUM } else { 0 };
            let b = encode_block(&x, ino, summed).ok_or(Error::TooBig {
                len: max as u64 + 1,
                max: max as u64,
            })?;
            tx.new_block(&b)?
        };
        n.ctime = now();
        tx.put_inode(ino, &n);
        self.commit(tx)
    }
}
