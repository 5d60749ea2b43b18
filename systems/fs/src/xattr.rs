//! User extended attributes: all of one inode's in one 4 KiB block `{count u16, then records
//! {name_len u8, value_len u16, name, value}}`, replaced whole by copy-on-write in a transaction.
//! In format 3 the block's last 4 bytes are its checksum ([`block_sum`]): attributes changed
//! behind the file system's back are found, not served.

use crate::attr::now;
use crate::error::{Error, Result};
use crate::layout::{BLOCK, NAME_MAX};
use crate::Fs;
use pmkit_media::Media;
use std::collections::BTreeMap;

pub(crate) type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

/// The block's head: the record count (u16).
const COUNT: usize = 2;
/// A record's head: name length (u8), value length (u16); then the name and the value.
const REC_HEAD: usize = 3;
const _: () = assert!(
    COUNT + 255 * (REC_HEAD + 1) <= BLOCK,
    "255 empty values fit a block"
);

/// Bytes at the end of a format 3 block that hold its checksum.
pub(crate) const SUM: usize = 4;

/// A format 3 block's checksum: CRC32C of all but its last 4 bytes, seeded with the inode
/// number (a block copied over another inode's does not match).
pub(crate) fn block_sum(ino: u64, b: &[u8]) -> u32 {
    assert_eq!(b.len(), BLOCK);
    crc32c::crc32c_append(crc32c::crc32c(&ino.to_le_bytes()), &b[..BLOCK - SUM])
}

/// Whether a format 3 block of `ino` matches its checksum.
pub(crate) fn sum_ok(ino: u64, b: &[u8]) -> bool {
    b[BLOCK - SUM..] == block_sum(ino, b).to_le_bytes()
}

/// `x` as the block of inode `ino`: in format 3 (`summed`) padded to a block that ends in its
/// checksum. `None` when it does not fit.
pub(crate) fn encode_block(x: &Xattrs, ino: u64, summed: bool) -> Option<Vec<u8>> {
    let mut b = encode(x)?;
    if !summed {
        return Some(b);
    }
    if b.len() > BLOCK - SUM {
        return None;
    }
    b.resize(BLOCK, 0);
    let s = block_sum(ino, &b);
    b[BLOCK - SUM..].copy_from_slice(&s.to_le_bytes());
    debug_assert!(sum_ok(ino, &b));
    Some(b)
}

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

/// Decode an xattr block. Never panics on any bytes.
pub fn decode(b: &[u8]) -> std::result::Result<Xattrs, String> {
    let mut out = Xattrs::new();
    if b.len() < COUNT {
        return Err("short block".into());
    }
    let n = u16::from_le_bytes([b[0], b[1]]) as usize;
    let mut at = COUNT;
    for i in 0..n {
        let hdr = b
            .get(at..at + REC_HEAD)
            .ok_or(format!("record {i}: header past the block"))?;
        let (nl, vl) = (
            hdr[0] as usize,
            u16::from_le_bytes([hdr[1], hdr[2]]) as usize,
        );
        at += REC_HEAD;
        let name = b
            .get(at..at + nl)
            .ok_or(format!("record {i}: name past the block"))?;
        let value = b
            .get(at + nl..at + nl + vl)
            .ok_or(format!("record {i}: value past the block"))?;
        if nl == 0 || out.insert(name.to_vec(), value.to_vec()).is_some() {
            return Err(format!("record {i}: empty or repeated name"));
        }
        at += nl + vl;
    }
    Ok(out)
}

pub(crate) fn encode(x: &Xattrs) -> Option<Vec<u8>> {
    let mut b = (x.len() as u16).to_le_bytes().to_vec();
    for (k, v) in x {
        b.push(k.len() as u8);
        b.extend_from_slice(&(v.len() as u16).to_le_bytes());
        b.extend_from_slice(k);
        b.extend_from_slice(v);
    }
    if b.len() > BLOCK {
        return None;
    }
    debug_assert!(decode(&b).is_ok_and(|d| d == *x), "decode after encode");
    Some(b)
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong {
            len: name.len(),
            max: NAME_MAX,
        });
    }
    if !name.starts_with(b"user.") || name.len() == 5 {
        return Err(Error::NotSupported("only user.* extended attributes"));
    }
    Ok(())
}

impl<M: Media> Fs<M> {
    fn xattrs(&self, ino: u64, xblock: u64) -> Result<Xattrs> {
        if xblock == 0 {
            return Ok(Xattrs::new());
        }
        let mut b = vec![0u8; BLOCK];
        let at = xblock as usize * BLOCK;
        if let Some(bad) = self.pm.first_bad(at, BLOCK) {
            return Err(Error::Media(bad));
        }
        self.pm.read(at, &mut b);
        if self.geo.far_copy && !sum_ok(ino, &b) {
            let problem = format!("its xattr block {xblock} does not match its checksum");
            return Err(self.damaged(ino, problem));
        }
        decode(&b).map_err(|e| Error::Corrupt(format!("xattr block {xblock}: {e}")))
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        self.xattrs(ino, n.xattr)?.remove(name).ok_or(Error::NoAttr)
    }

    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        Ok(self.xattrs(ino, n.xattr)?.into_keys().collect())
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

    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.change_xattrs(ino, |x| x.remove(name).map(|_| ()).ok_or(Error::NoAttr))
    }

    fn change_xattrs(&self, ino: u64, f: impl FnOnce(&mut Xattrs) -> Result<()>) -> Result<()> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        let mut x = self.xattrs(ino, n.xattr)?;
        f(&mut x)?;
        let mut tx = self.tx();
        let mut n = tx.inode(ino);
        if n.xattr != 0 {
            tx.free_after.push(n.xattr);
        }
        n.xattr = if x.is_empty() {
            0
        } else {
            let summed = self.geo.far_copy;
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
