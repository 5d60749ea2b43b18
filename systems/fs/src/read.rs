//! Reads of file data: from PM straight into the caller's buffer, holes zero-filled, a media
//! error answered as an error (never data).

use crate::error::{Error, Result};
use crate::inode::{Inode, Kind};
use crate::layout::BLOCK;
use crate::{tree, Fs};
use pmkit_media::Media;

impl<M: Media> Fs<M> {
    /// Read up to `len` bytes at `off` (short at the end of the file).
    pub fn read(&self, ino: u64, off: u64, len: usize) -> Result<Vec<u8>> {
        self.with_readable(ino, |node| self.read_data(ino, node, off, len))
    }

    /// Read into `buf` at `off`: the bytes read (short at the end of the file). The copy goes
    /// from PM straight into the caller's buffer; holes are zero-filled there.
    pub fn read_into(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
        self.with_readable(ino, |node| self.read_data_into(ino, node, off, buf))
    }

    /// Run `f` on `ino`'s inode under the locks a read holds; a directory is `IsDir`.
    fn with_readable<T>(&self, ino: u64, f: impl FnOnce(&Inode) -> Result<T>) -> Result<T> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let node = self.live(ino)?;
        if node.is(Kind::Dir) {
            return Err(Error::IsDir);
        }
        let r = f(&node)?;
        self.accessed(ino, &node);
        Ok(r)
    }

    pub(crate) fn read_data(
        &self,
        ino: u64,
        node: &Inode,
        off: u64,
        len: usize,
    ) -> Result<Vec<u8>> {
        // no more than the file holds past `off`: a large `len` allocates nothing extra
        let want = node.size.saturating_sub(off).min(len as u64) as usize;
        let mut out = vec![0u8; want];
        let n = self.read_data_into(ino, node, off, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// Read inode `ino` (`node`) into `buf` at `off`; a file with data checksums has every
    /// block it reads from checked (`sums.rs`).
    pub(crate) fn read_data_into(
        &self,
        ino: u64,
        node: &Inode,
        off: u64,
        buf: &mut [u8],
    ) -> Result<usize> {
        let end = node.size.min(off.saturating_add(buf.len() as u64));
        if off >= end {
            return Ok(0);
        }
        let mut pos = off;
        while pos < end {
            let idx = pos / BLOCK as u64;
            let in_blk = (pos % BLOCK as u64) as usize;
            let n = ((BLOCK - in_blk) as u64).min(end - pos) as usize;
            let o = (pos - off) as usize;
            let b = tree::lookup(&self.pm, node.root, node.height, idx);
            if b == 0 {
                buf[o..o + n].fill(0);
            } else {
                let at = b as usize * BLOCK + in_blk;
                if let Some(bad) = self.pm.first_bad(at, n) {
                    return Err(Error::Media(bad));
                }
                if node.sums() && n == BLOCK {
                    // a whole block asked for: read it in place and check it there
                    self.pm.read(at, &mut buf[o..o + n]);
                    if let Err(e) = self.verify_block(ino, node, idx, b, &buf[o..o + n]) {
                        buf[o..o + n].fill(0); // the damaged bytes never reach the caller
                        return Err(e);
                    }
                } else if node.sums() {
                    // the whole block is summed: read it all, check, then hand out the part
                    let mut whole = [0u8; BLOCK];
                    self.pm.read(b as usize * BLOCK, &mut whole);
                    self.verify_block(ino, node, idx, b, &whole)?;
                    buf[o..o + n].copy_from_slice(&whole[in_blk..in_blk + n]);
                } else {
                    self.pm.read(at, &mut buf[o..o + n]);
                }
            }
            pos += n as u64;
        }
        let done = (end - off) as usize;
        debug_assert!(done <= buf.len());
        Ok(done)
    }
}
