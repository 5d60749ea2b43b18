//! The tail record of the one-fence append (docs/fs.md, "The one-fence append").
//!
//! An append into blocks the file already owns streams its bytes in and publishes the new size
//! with no fence between the two: the record (inode byte 56, one 8-byte word) names how many
//! bytes the last such append added and their CRC32C, and is stored before the size, in the
//! same line. So one fence makes both durable, and after a crash the mount finds out whether
//! the bytes made it:
//!
//! - stores to one line persist in program order (the x86 persistency model; the crash
//!   simulator's), so the size is never new while the record is old;
//! - the record holds the low 16 bits of the size it was written with, and an append it covers
//!   adds fewer than 65,536 bytes, so a new record next to the old size never applies;
//! - a record that applies and whose CRC does not match the bytes means the append was cut:
//!   mount sets the size back by `len` (docs/fs.md lists who clears the record and why).

use crate::layout::BLOCK;
use crate::tree;
use pmkit_media::Media;

use crate::pm::Pm;

/// The most bytes one record covers: fewer than the 16-bit tag's period.
pub(crate) const MAX_LEN: u64 = u16::MAX as u64;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tail {
    /// CRC32C of the appended bytes.
    pub crc: u32,
    /// How many bytes the append added (0: no record).
    pub len: u16,
    /// The low 16 bits of the size the append published.
    pub tag: u16,
}

impl Tail {
    /// The record of an append that ends the file at `end`, adding `len` bytes with `crc`.
    pub(crate) fn new(end: u64, len: u64, crc: u32) -> Tail {
        assert!(
            len > 0 && len <= MAX_LEN && len <= end,
            "tail of {len} bytes at {end}"
        );
        Tail {
            crc,
            len: len as u16,
            tag: end as u16,
        }
    }
    pub(crate) fn encode(self) -> u64 {
        (self.crc as u64) << 32 | (self.len as u64) << 16 | self.tag as u64
    }
    pub(crate) fn decode(w: u64) -> Tail {
        Tail {
            crc: (w >> 32) as u32,
            len: (w >> 16) as u16,
            tag: w as u16,
        }
    }
    /// Whether the record describes the append that published `size`.
    pub(crate) fn applies(self, size: u64) -> bool {
        self.len != 0 && self.tag == size as u16 && self.len as u64 <= size
    }
}

/// Where a file whose size is `size` and whose record is `w` must go back to because its last
/// append did not reach the media whole; `None` when nothing is to be undone. Reads the
/// covered bytes through the file's tree (`root`, `height`), which must be sound (walked).
pub(crate) fn cut_append<M: Media>(
    pm: &Pm<M>,
    root: u64,
    height: u8,
    size: u64,
    w: u64,
) -> Option<u64> {
    let t = Tail::decode(w);
    if !t.applies(size) {
        return None;
    }
    let start = size - t.len as u64;
    let mut crc = 0u32;
    let mut buf = [0u8; BLOCK];
    let mut pos = start;
    while pos < size {
        let idx = pos / BLOCK as u64;
        let in_blk = (pos % BLOCK as u64) as usize;
        let n = ((BLOCK - in_blk) as u64).min(size - pos) as usize;
        let b = tree::lookup(pm, root, height, idx);
        if b == 0 {
            // an append of this kind wrote into blocks it owned; a hole is a cut one
            return Some(start);
        }
        pm.read(b as usize * BLOCK + in_blk, &mut buf[..n]);
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        pos += n as u64;
    }
    (crc != t.crc).then_some(start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn encodes_and_applies(end in 1u64..1 << 40, len in 1u64..=MAX_LEN, crc: u32) {
            prop_assume!(len <= end);
            let t = Tail::new(end, len, crc);
            prop_assert_eq!(Tail::decode(t.encode()), t);
            prop_assert!(t.applies(end));
            // the size before the append never matches: a new record beside an old size is
            // ignored
            prop_assert!(!t.applies(end - len));
            prop_assert!(!Tail::decode(0).applies(end));
        }
    }
}
