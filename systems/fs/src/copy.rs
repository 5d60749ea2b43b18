//! copy_file_range(2) inside the file system: bytes of one regular file copied into another
//! (or elsewhere in the same one) without passing through the caller. The mount answers the
//! kernel's COPY_FILE_RANGE with it, so `cp` of a file through the mount is one request per
//! 4 GiB instead of a READ and a WRITE per megabyte.
//!
//! The data goes through the ordinary read and write paths in pieces of [`PIECE`] bytes (an
//! atomic destination's `max_atomic_write`), each a write durable on return: an atomic or
//! checksummed destination stays what it is, and a crash in the middle leaves a prefix copied,
//! as a crash in the middle of `cp` does (Linux's copy_file_range is not atomic either). Holes of the source are not read: inside the
//! destination's size they are punched, past it the size grows over them, so a sparse file stays
//! sparse.
//!
//! Where the two offsets lie at the same place in a block, the whole blocks of the range are
//! shared instead of copied (`clone.rs`), as XFS and Btrfs do: only the partial blocks at the
//! edges are copied. Where blocks cannot be shared (a pool before format 8, data checksums, a
//! mapped range) everything is copied.

use crate::error::{Error, Result};
use crate::falloc::Falloc;
use crate::seek::Seek;
use crate::{Fs, Kind, SetAttr};
use pmkit_media::Media;

/// The most one piece of a copy holds in memory (the daemon's buffer per request).
pub(crate) const PIECE: usize = 1 << 20;

impl<M: Media> Fs<M> {
    /// Copy up to `len` bytes of regular file `src` at `src_off` into regular file `dst` at
    /// `dst_off`; the bytes copied, short at the source's end (0 at or past it). Overlapping
    /// ranges of one file are `Invalid` (EINVAL), as Linux answers.
    pub fn copy_range(
        &self,
        src: u64,
        src_off: u64,
        dst: u64,
        dst_off: u64,
        len: u64,
    ) -> Result<u64> {
        let (size, _) = self.regular(src)?;
        self.regular(dst)?;
        let end = src_off.saturating_add(len).min(size);
        if src_off >= end {
            return Ok(0);
        }
        if src == dst && src_off < dst_off + (end - src_off) && dst_off < end {
            return Err(Error::Invalid("overlapping ranges of one file"));
        }
        let b = crate::layout::BLOCK as u64;
        if !self.geo.shares() || src_off % b != dst_off % b {
            return self.copy_bytes(src, src_off, dst, dst_off, len);
        }
        // The partial block at the start is copied, the whole blocks (up to the source's end, if
        // the range reaches it) shared, the partial block at the end copied.
        let head = src_off.next_multiple_of(b).min(end);
        let middle = match end == size {
            true => end,
            false => (end / b * b).max(head),
        };
        let mut at = src_off;
        for (stop, share) in [(head, false), (middle, true), (end, false)] {
            if stop <= at {
                continue;
            }
            let (n, to) = (stop - at, dst_off + (at - src_off));
            let got = match share {
                true => match self.clone_range(src, at, dst, to, n) {
                    Err(Error::NotSupported(_) | Error::Invalid(_) | Error::Busy(_)) => {
                        self.copy_bytes(src, at, dst, to, n)?
                    }
                    r => r?,
                },
                false => self.copy_bytes(src, at, dst, to, n)?,
            };
            at += got;
            if got < n {
                break;
            }
        }
        Ok(at - src_off)
    }

    /// [`Fs::copy_range`] by reading and writing the bytes.
    fn copy_bytes(&self, src: u64, src_off: u64, dst: u64, dst_off: u64, len: u64) -> Result<u64> {
        let (size, _) = self.regular(src)?;
        // An atomic file takes a write of at most `max_atomic_write`: each piece is one.
        let piece = match self.regular(dst)? {
            (_, true) => (self.max_atomic_write() as usize).min(PIECE),
            _ => PIECE,
        };
        let end = src_off.saturating_add(len).min(size);
        if src_off >= end {
            return Ok(0);
        }
        let total = end - src_off;
        if dst_off.checked_add(total).is_none() {
            return Err(Error::Invalid(
                "the destination range passes the largest offset",
            ));
        }
        if src == dst && src_off < dst_off + total && dst_off < end {
            return Err(Error::Invalid("overlapping ranges of one file"));
        }
        let mut buf = vec![0u8; (total as usize).min(piece)];
        let mut at = src_off;
        while at < end {
            let to = |o: u64| dst_off + (o - src_off);
            let data = match self.seek(src, at, Seek::Data) {
                Ok(d) => d.min(end),
                // No data after `at`, or the file shrank under us: the rest is a hole.
                Err(Error::NoDevice(_)) => end,
                Err(e) => return Err(e),
            };
            if data > at {
                self.copy_hole(dst, to(at), data - at)?;
                at = data;
                continue;
            }
            let hole = match self.seek(src, at, Seek::Hole) {
                Ok(h) => h.min(end),
                Err(Error::NoDevice(_)) => break,
                Err(e) => return Err(e),
            };
            while at < hole {
                let want = ((hole - at) as usize).min(buf.len());
                let got = self.read_into(src, at, &mut buf[..want])?;
                if got == 0 {
                    // Truncated by someone else meanwhile: what was copied stands.
                    return Ok(at - src_off);
                }
                let put = self.write(dst, to(at), &buf[..got])?;
                debug_assert!(put <= got, "a write takes at most what it is given");
                at += put as u64;
                if put < got {
                    return Ok(at - src_off);
                }
            }
        }
        debug_assert!(at >= src_off && at <= end, "{at} outside {src_off}..={end}");
        Ok(at - src_off)
    }

    /// A hole of the source lands in `dst` at `[off, off + len)`: punched where the destination
    /// has bytes, the size grown over the rest.
    fn copy_hole(&self, dst: u64, off: u64, len: u64) -> Result<()> {
        let (size, _) = self.regular(dst)?;
        if off < size {
            let inside = len.min(size - off);
            self.fallocate_mode(dst, off, inside, Falloc::PunchHole)?;
        }
        if off + len > size {
            let grow = SetAttr {
                size: Some(off + len),
                ..SetAttr::default()
            };
            self.setattr(dst, &grow)?;
        }
        Ok(())
    }

    /// The size of regular file `ino` and whether it is atomic (a directory is `IsDir`,
    /// anything else `Invalid`).
    fn regular(&self, ino: u64) -> Result<(u64, bool)> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        match n.kind() {
            Some(Kind::File) => Ok((n.size, n.atomic())),
            Some(Kind::Dir) => Err(Error::IsDir),
            _ => Err(Error::Invalid("copy_file_range of a non-regular file")),
        }
    }
}
