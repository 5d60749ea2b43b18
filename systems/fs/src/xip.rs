//! Direct access (XIP) support in the library: which media extents hold a file range, and pins
//! that keep those extents where they are while someone maps them. The mapping itself is the
//! caller's (`pmkit_media::extent_map::ExtentMap`, used by `posix::Posix::map`).
//!
//! While a range is pinned, everything that would move or free its blocks is refused with
//! `Busy` (EBUSY): a truncate below the pinned end, and turning the file's atomic mode on (an
//! atomic write copies blocks). An atomic file cannot be pinned. In-place writes, appends and
//! growing truncates keep the blocks, so they stay allowed; the caller keeps the file open, so
//! an unlink frees nothing until the last unpin and close.

use crate::error::{Error, Result};
use crate::inode::Kind;
use crate::layout::BLOCK;
use crate::{tree, Fs};
use pmkit_media::Media;

/// Most ranges pinned at once in one mount.
pub const MAX_PINS: usize = 4096;

impl<M: Media> Fs<M> {
    /// Refuse a view of `ino` its flags forbid (`mappable`), before anything is changed.
    pub(crate) fn check_mappable(&self, ino: u64) -> Result<()> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        mappable(&self.live(ino)?)
    }

    /// The media byte extents `(offset, length)` holding file bytes `[off, off + len)`, in
    /// file order, adjacent blocks merged; and the range pinned (see the module docs).
    /// `off` and `len` must be multiples of 4 KiB, the range inside the file and allocated
    /// (no holes: `fallocate` it first).
    pub fn pin_extents(&self, ino: u64, off: u64, len: u64) -> Result<Vec<(u64, u64)>> {
        let b = BLOCK as u64;
        if !off.is_multiple_of(b) || !len.is_multiple_of(b) || len == 0 {
            return Err(Error::Invalid(
                "a mapped range must be 4 KiB-aligned and not empty",
            ));
        }
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        if !n.is(Kind::File) {
            return Err(Error::Invalid("only regular files can be mapped"));
        }
        mappable(&n)?;
        let end = off
            .checked_add(len)
            .ok_or(Error::Invalid("range overflows"))?;
        // The last page may pass the size (mmap of a file that is not a whole number of
        // pages); no page past it.
        if end > n.size.next_multiple_of(b) {
            return Err(Error::Invalid(
                "the mapped range goes past the end of the file",
            ));
        }
        // Stores through the mapping go to the blocks in place: none of them may be shared.
        self.unshare(ino, off, end)?;
        let n = self.inode(ino);
        if n.tail != 0 {
            // Stores through the mapping change bytes the append's record may vouch for, and
            // no record follows them: it goes now (`tail.rs`). Appends while mapped land past
            // every pinned range but the size's last page, which a pin may hold: a store there
            // through the mapping after an append may make the mount after a crash take that
            // append for torn and give its bytes back (never wrong bytes).
            self.pm
                .persist_u64(self.itable.off(ino) + crate::inode::TAIL, 0);
        }
        let mut out: Vec<(u64, u64)> = Vec::new();
        for idx in off / b..end / b {
            let blk = tree::lookup(&self.pm, n.root, n.height, idx);
            if blk == 0 {
                return Err(Error::Invalid(
                    "the mapped range has a hole: fallocate it first",
                ));
            }
            let at = blk * b;
            match out.last_mut() {
                Some((o, l)) if *o + *l == at => *l += b,
                _ => out.push((at, b)),
            }
        }
        let mut pins = self.pins.lock();
        if pins.values().map(Vec::len).sum::<usize>() >= MAX_PINS {
            return Err(Error::Busy("too many mapped ranges (4096)"));
        }
        pins.entry(ino).or_default().push((off, len));
        Ok(out)
    }

    /// Drop one pin of `[off, off + len)` taken by [`Fs::pin_extents`].
    pub fn unpin(&self, ino: u64, off: u64, len: u64) {
        let mut pins = self.pins.lock();
        if let Some(v) = pins.get_mut(&ino) {
            if let Some(i) = v.iter().position(|&r| r == (off, len)) {
                v.swap_remove(i);
            }
            if v.is_empty() {
                pins.remove(&ino);
            }
        }
    }

    /// The media under the file system (direct access maps its file).
    pub fn media(&self) -> &pmkit_media::Guarded<M> {
        self.pm.media()
    }

    /// `Busy` if a truncate to `size` would cut a pinned range of `ino`.
    pub(crate) fn check_pins_for_size(&self, ino: u64, size: u64) -> Result<()> {
        match self.pins.lock().get(&ino) {
            Some(v) if v.iter().any(|&(o, l)| o + l > size) => {
                Err(Error::Busy("a mapped range would be cut: unmap it first"))
            }
            _ => Ok(()),
        }
    }

    /// `Busy` if a hole punched in `[from, to)` would free blocks of a pinned range of `ino`.
    pub(crate) fn check_pins_for_range(&self, ino: u64, (from, to): (u64, u64)) -> Result<()> {
        match self.pins.lock().get(&ino) {
            Some(v) if v.iter().any(|&(o, l)| o < to && from < o + l) => Err(Error::Busy(
                "a mapped range would lose blocks: unmap it first",
            )),
            _ => Ok(()),
        }
    }

    /// `Busy` if `ino` has a pinned range.
    pub(crate) fn check_unpinned(&self, ino: u64) -> Result<()> {
        if self.pins.lock().contains_key(&ino) {
            return Err(Error::Busy("the file is mapped: unmap it first"));
        }
        Ok(())
    }
}

/// Whether a regular file's flags allow a direct-access view: an atomic file's writes move
/// its blocks, and stores through a view would pass a summed file's checksums.
pub(crate) fn mappable(n: &crate::inode::Inode) -> Result<()> {
    if n.atomic() {
        return Err(Error::Invalid(
            "an atomic file's writes move its blocks: turn atomic mode off to map it",
        ));
    }
    if n.sums() {
        return Err(Error::Invalid(
            "a file with data checksums cannot be mapped (stores through a mapping would \
             pass its sums): turn its checksums off to map it",
        ));
    }
    Ok(())
}
