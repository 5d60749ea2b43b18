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
        self.with_readable(ino, |node| self.read_data(node, off, len))
    }

    /// Read into `buf` at `off`: the bytes read (short at the end of the file). The copy goes
    /// from PM straight into the caller's buffer; holes are zero-filled there.
    pub fn read_into(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
        self.with_readable(ino, |node| self.read_data_into(node, off, buf))
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

    pub(crate) fn read_data(&self, node: &Inode, off: u64, len: usize) -> Result<Vec<u8>> {
        // no more than the file holds past `off`: a large `len` allocates nothing extra
        let want = node.size.saturating_sub(off).min(len as u64) as usize;
        let mut out = vec![0u8; want];
        let n = self.read_data_into(node, off, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    pub(crate) fn read_data_into(&self, node: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
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
                self.pm.read(at, &mut buf[o..o + n]);
            }
            pos += n as u64;
        }
        let done = (end - off) as usize;
        debug_assert!(done <= buf.len());
        Ok(done)
    }
}
