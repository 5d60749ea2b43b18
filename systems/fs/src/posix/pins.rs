//! File ranges pinned for a process that maps the pool file itself: a client of the pool's
//! server (the LD_PRELOAD shim in another process) serves `mmap(MAP_SHARED)` of a pool file by
//! mapping the pool file at the media extents this session pins for it, as [`Posix::map`] does
//! in process. The pin is the session's: it keeps the range's blocks in place (a truncate or a
//! hole that would free them is EBUSY) and the file open until [`Posix::unpin_range`], the
//! session's exec (the mappings are gone), or the session's end, which a killed client's is.

use super::{Fd, Posix};
use crate::error::{Error, Result};
use crate::inode::Kind;
use pmkit_media::Media;
use std::sync::atomic::Ordering;

/// One pinned range: the file and its bytes `[off, off + len)`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pinned {
    pub ino: u64,
    pub off: u64,
    pub len: u64,
}

impl<M: Media> Posix<M> {
    /// Allocate (with `alloc`), open and pin file bytes `[off, off + len)` of `fd` (opened
    /// read-write): its inode and the media extents holding the range, in file order.
    pub(super) fn pin_with(
        &self,
        fd: Fd,
        (off, len): (u64, u64),
        alloc: crate::Falloc,
    ) -> Result<(u64, Vec<(u64, u64)>)> {
        let d = self.desc(fd)?;
        if d.kind != Kind::File || !(d.flags.read && d.flags.write) {
            return Err(Error::BadFd(fd.0));
        }
        // an atomic or summed file is refused before the fallocate could grow it
        self.fs.check_mappable(d.ino)?;
        self.fs.fallocate_mode(d.ino, off, len, alloc)?;
        self.fs.zero_past_eof(d.ino)?;
        self.fs.open(d.ino)?;
        match self.fs.pin_extents(d.ino, off, len) {
            Ok(e) => Ok((d.ino, e)),
            Err(e) => {
                let _ = self.fs.release(d.ino);
                Err(e)
            }
        }
    }

    /// Pin file bytes `[off, off + len)` of `fd` for mmap(2)'s `MAP_SHARED` in another process,
    /// as [`Posix::map_keep_size`] does for a view in this one: the pin's number and the byte
    /// extents of the pool file holding the range, in file order, for that process to map.
    pub fn pin_range(&self, fd: Fd, off: u64, len: u64) -> Result<(u64, Vec<(u64, u64)>)> {
        let (ino, extents) = self.pin_with(fd, (off, len), crate::Falloc::KeepSize)?;
        let id = self.next_pin.fetch_add(1, Ordering::Relaxed);
        let old = self.pins.lock().insert(id, Pinned { ino, off, len });
        assert!(old.is_none(), "pin {id} numbered twice");
        Ok((id, extents))
    }

    /// The window of `fd` (open for reading) around `off` that another process reads in
    /// place (`direct.rs`).
    pub fn read_layout(&self, fd: Fd, off: u64) -> Result<crate::direct::ReadLayout> {
        let d = self.desc(fd)?;
        if !d.flags.read {
            return Err(Error::BadFd(fd.0));
        }
        if d.kind != Kind::File {
            return Err(Error::Invalid("only regular files are read in place"));
        }
        self.fs.read_layout(d.ino, off)
    }

    /// Drop pin `id` (its process unmapped the range).
    pub fn unpin_range(&self, id: u64) -> Result<()> {
        let p = self
            .pins
            .lock()
            .remove(&id)
            .ok_or(Error::Invalid("no such pinned range"))?;
        self.fs.unpin(p.ino, p.off, p.len);
        self.fs.release(p.ino)
    }

    /// Drop every pin of this session (its process exec'd or ended: its mappings are gone).
    pub fn unpin_all(&self) {
        let pins: Vec<Pinned> = self.pins.lock().drain().map(|(_, p)| p).collect();
        for p in pins {
            self.fs.unpin(p.ino, p.off, p.len);
            let _ = self.fs.release(p.ino);
        }
    }

    /// Give `child`, a fork of this session, the same pins under the same numbers: a child of
    /// fork keeps its parent's mappings.
    pub(super) fn fork_pins(&self, child: &Posix<M>) -> Result<()> {
        let pins: Vec<(u64, Pinned)> = self.pins.lock().iter().map(|(&i, &p)| (i, p)).collect();
        for (id, p) in pins {
            self.fs.open(p.ino)?;
            if let Err(e) = self.fs.pin_extents(p.ino, p.off, p.len) {
                let _ = self.fs.release(p.ino);
                return Err(e);
            }
            child.pins.lock().insert(id, p);
        }
        child
            .next_pin
            .store(self.next_pin.load(Ordering::Relaxed), Ordering::Relaxed);
        Ok(())
    }
}
