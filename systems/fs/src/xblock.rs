//! The xattr block as stored: one inode's user attributes `{count u16, then records
//! {name_len u8, value_len u16, name, value}}`, and in format 3 a checksum in the block's last
//! 4 bytes ([`block_sum`]). Decoding never panics; encoding checks decode-after-encode. No I/O.

use crate::layout::BLOCK;
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
