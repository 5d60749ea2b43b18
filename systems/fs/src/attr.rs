//! Attributes and lookups: getattr, setattr, lookup, readdir, readlink, statfs, open/release,
//! fsync; the inode helpers every operation uses.

use crate::dir::{DirIndex, Dirs};
use crate::error::{Error, Result};
use crate::inode::{Inode, Kind};
use crate::layout::{BLOCK, INODE, NAME_MAX, ROOT_INO, SYMLINK_MAX};
use crate::{tree, walk};
use crate::{Attr, DirEntry, Fs, SetAttr, StatFs};
use pmkit_media::Media;

pub(crate) use crate::clock::now;
pub use crate::clock::{ns_of_timespec, timespec_of};

/// `mode` without set-user-ID, and without set-group-ID where group execute is set.
pub fn killed_suidgid(mode: u32) -> u32 {
    let mut m = mode & !libc::S_ISUID;
    if m & libc::S_IXGRP != 0 {
        m &= !libc::S_ISGID;
    }
    m
}

impl<M: Media> Fs<M> {
    /// The index of directory `d` (None: not a directory), read from PM on its first use
    /// after a mount from the clean-unmount checkpoint.
    pub(crate) fn dir_index<'d>(&self, dirs: &'d Dirs, d: u64) -> Option<Result<&'d DirIndex>> {
        let r = dirs.get(d, || {
            let node = self.inode(d);
            let data = self.verify_now(d, &node)?;
            walk::dir_index(&self.pm, &self.geo, &self.itable, d, &node, &data)
        })?;
        Some(r.map_err(|e| self.damaged(d, e.to_string())))
    }
    /// Run the walk's checks of one inode once per mount (all are done at a mount that walks;
    /// after one from the checkpoint, on each inode's first use: `walk::verify_inode`).
    pub(crate) fn verified(&self, ino: u64, node: &Inode) -> Result<()> {
        if self.itable.checked(ino) {
            return Ok(());
        }
        self.verify_now(ino, node)
            .map(|_| ())
            .map_err(|e| self.damaged(ino, e))
    }
    /// Record damage met in use (see `damage.rs`): the error the inode answers with.
    pub(crate) fn damaged(&self, ino: u64, problem: String) -> Error {
        if self.damage.lock().record(ino, &problem) {
            tracing::error!(
                "damage found in inode {ino}: {problem}; it answers EIO, the rest is served, \
                 and the pool will not be marked clean (after unmount: pmkit fs check POOL \
                 --repair)"
            );
        }
        Error::DamagedInode { ino, problem }
    }
    /// The checks of [`Fs::verified`], run now; the inode's data blocks.
    fn verify_now(&self, ino: u64, node: &Inode) -> std::result::Result<Vec<(u64, u64)>, String> {
        // The allocator lock alone, after the tree walk (never nested in another lock).
        let used = |owned: &[u64]| {
            let a = self.alloc.lock();
            owned.iter().copied().find(|&b| !a.blocks.is_used(b))
        };
        let data = walk::verify_inode(&self.pm, &self.geo, &self.itable, ino, node, &used)?;
        self.itable.set_checked(ino);
        Ok(data)
    }
    pub(crate) fn valid_ino(&self, ino: u64) -> bool {
        ino >= ROOT_INO && self.itable.has(ino)
    }
    pub(crate) fn inode(&self, ino: u64) -> Inode {
        let mut b = [0u8; INODE];
        self.pm.read(self.itable.off(ino), &mut b);
        Inode::decode(&b)
    }
    /// The inode, if `ino` is in range and in use.
    pub(crate) fn live(&self, ino: u64) -> Result<Inode> {
        if !self.valid_ino(ino) {
            return Err(Error::BadInode(ino));
        }
        let n = self.inode(ino);
        if n.is(Kind::Free) {
            return Err(Error::BadInode(ino));
        }
        self.verified(ino, &n)?;
        Ok(n)
    }
    pub(crate) fn stripe(&self, ino: u64) -> &parking_lot::Mutex<()> {
        &self.stripes[ino as usize % self.stripes.len()].0
    }

    fn attr_of(&self, ino: u64, n: &Inode) -> Attr {
        Attr {
            ino,
            kind: n.kind().unwrap_or(Kind::Free),
            size: n.size,
            links: n.links,
            mode: n.mode,
            uid: n.uid,
            gid: n.gid,
            atime: n.atime,
            mtime: n.mtime,
            ctime: n.ctime,
            blocks: tree::count(&self.pm, n.root, n.height),
            atomic: n.atomic(),
            huge: n.huge(),
            sums: n.sums(),
            rdev: n.rdev,
        }
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        Ok(self.attr_of(ino, &n))
    }

    /// Before a write or truncate by a caller without CAP_FSETID: clear `ino`'s set-ID bits
    /// ([`SetAttr::kill_suidgid`]) if it has any. The common file without them costs a read
    /// of its inode: no transaction, and no walk of its tree as [`Fs::getattr`] makes.
    pub fn kill_suidgid(&self, ino: u64) -> Result<()> {
        self.kill_capability(ino)?;
        {
            let _ns = self.ns.read();
            let _g = self.stripe(ino).lock();
            let n = self.live(ino)?;
            if n.kind() == Some(Kind::Dir) || killed_suidgid(n.mode) == n.mode {
                return Ok(());
            }
        }
        let s = SetAttr {
            kill_suidgid: true,
            ..SetAttr::default()
        };
        self.setattr(ino, &s).map(drop)
    }

    /// Change mode, owner, size or times; one transaction (a truncate of a big file, several:
    /// see the orphan list in `docs/fs.md`).
    pub fn setattr(&self, ino: u64, s: &SetAttr) -> Result<Attr> {
        // As Linux: a chown or a truncate by anyone drops file capabilities.
        if s.uid.is_some() || s.gid.is_some() || s.size.is_some() || s.kill_suidgid {
            self.kill_capability(ino)?;
        }
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        if let Some(size) = s.size {
            match n.kind() {
                Some(Kind::File) => {
                    self.check_pins_for_size(ino, size)?;
                    self.truncate(ino, size)?
                }
                Some(Kind::Dir) => return Err(Error::IsDir),
                _ => return Err(Error::Invalid("size of a non-regular file")),
            }
        }
        let rest = SetAttr { size: None, ..*s };
        if rest != SetAttr::default() {
            let mut tx = self.tx();
            let mut n = tx.inode(ino);
            n.mode = s.mode.map(|m| m & 0o7777).unwrap_or(n.mode);
            if s.kill_suidgid && n.kind() != Some(Kind::Dir) {
                n.mode = killed_suidgid(n.mode);
            }
            n.uid = s.uid.unwrap_or(n.uid);
            n.gid = s.gid.unwrap_or(n.gid);
            n.atime = s.atime.unwrap_or(n.atime);
            n.mtime = s.mtime.unwrap_or(n.mtime);
            n.ctime = now();
            tx.put_inode(ino, &n);
            self.commit(tx)?;
        }
        let n = self.live(ino)?;
        Ok(self.attr_of(ino, &n))
    }

    /// The atomic flag of a regular file; `None` for other kinds. Cheap (no tree walk, unlike
    /// `getattr`'s block count).
    pub fn atomic(&self, ino: u64) -> Result<Option<bool>> {
        self.file_flag(ino, crate::inode::FLAG_ATOMIC)
    }

    /// Inode flag `flag` of a regular file; `None` for other kinds.
    pub(crate) fn file_flag(&self, ino: u64, flag: u8) -> Result<Option<bool>> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        Ok(n.is(Kind::File).then_some(n.flags & flag != 0))
    }

    /// Make every later write to the regular file `ino` all-or-nothing (`true`: copy-on-write
    /// and a journaled pointer swap) or in place (`false`). Persistent (an inode flag), one
    /// transaction; allowed any time, since each write reads the flag under the inode's lock.
    pub fn set_atomic(&self, ino: u64, on: bool) -> Result<()> {
        self.set_flag(
            ino,
            crate::inode::FLAG_ATOMIC,
            on,
            "atomic mode of a non-regular file",
        )
    }

    /// The huge flag of a regular file; `None` for other kinds. Cheap (no tree walk).
    pub fn huge(&self, ino: u64) -> Result<Option<bool>> {
        self.file_flag(ino, crate::inode::FLAG_HUGE)
    }

    /// Ask for 2 MiB blocks (`true`) for the regular file `ino`, or stop asking: while the flag
    /// is set, a write or fallocate that allocates inside an empty 2 MiB-aligned span of the
    /// file takes a whole huge block for the span (4 KiB blocks when no whole 2 MiB chunk is
    /// free), and a truncate or the last close keeps the span its new size ends in whole.
    /// Persistent (an inode flag), one transaction, allowed any time (it moves no block, so a
    /// mapped file may change it too); blocks already allocated stay as they are.
    pub fn set_huge(&self, ino: u64, on: bool) -> Result<()> {
        self.set_flag(
            ino,
            crate::inode::FLAG_HUGE,
            on,
            "huge blocks for a non-regular file",
        )
    }

    fn set_flag(&self, ino: u64, flag: u8, on: bool, what: &'static str) -> Result<()> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        match n.kind() {
            Some(Kind::File) => {}
            Some(Kind::Dir) => return Err(Error::IsDir),
            _ => return Err(Error::Invalid(what)),
        }
        if (n.flags & flag != 0) == on {
            return Ok(());
        }
        if on && flag == crate::inode::FLAG_ATOMIC {
            self.check_unpinned(ino)?;
        }
        let mut tx = self.tx();
        let mut n = tx.inode(ino);
        n.flags ^= flag;
        n.ctime = now();
        tx.put_inode(ino, &n);
        self.commit(tx)
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        if name.len() > NAME_MAX {
            return Err(Error::NameTooLong {
                len: name.len(),
                max: NAME_MAX,
            });
        }
        let dirs = self.ns.read();
        let ino = match self.dir_index(&dirs, parent) {
            None => {
                self.live(parent)?;
                return Err(Error::NotDir);
            }
            Some(d) if name == b"." => {
                d?;
                parent
            }
            Some(d) if name == b".." => {
                d?;
                self.inode(parent).parent
            }
            Some(d) => d?.entries.get(name).ok_or(Error::NotFound)?.ino,
        };
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        Ok(self.attr_of(ino, &n))
    }

    /// Directory `ino`'s index and inode, its read recorded (the access time, relatime):
    /// NotDir if it is not a directory. What opening and listing a directory share.
    fn read_dir<'d>(&self, dirs: &'d Dirs, ino: u64) -> Result<(&'d DirIndex, Inode)> {
        let d = match self.dir_index(dirs, ino) {
            Some(d) => d?,
            None => {
                self.live(ino)?;
                return Err(Error::NotDir);
            }
        };
        let _g = self.stripe(ino).lock();
        let node = self.inode(ino);
        debug_assert_eq!(
            node.kind(),
            Some(Kind::Dir),
            "inode {ino} has a directory index"
        );
        self.accessed(ino, &node);
        Ok((d, node))
    }

    /// Open directory `ino` for listing: NotDir if it is not one. The open counts as a read
    /// of the directory (its access time, as [`Fs::readdir`]): a listing the kernel then
    /// serves from its own cache still reads it.
    pub fn opendir(&self, ino: u64) -> Result<()> {
        self.read_dir(&self.ns.read(), ino).map(drop)
    }

    /// Every entry of a directory, `.` and `..` first, then in slot order.
    pub fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let dirs = self.ns.read();
        let (d, node) = self.read_dir(&dirs, ino)?;
        let parent = node.parent;
        let mut out = vec![
            DirEntry {
                ino,
                kind: Kind::Dir,
                name: b".".to_vec(),
            },
            DirEntry {
                ino: parent,
                kind: Kind::Dir,
                name: b"..".to_vec(),
            },
        ];
        let mut es: Vec<_> = d.entries.iter().collect();
        es.sort_by_key(|(_, l)| (l.block, l.slot));
        for (name, l) in es {
            let kind = Kind::from_u8(l.kind).unwrap_or(Kind::Free);
            out.push(DirEntry {
                ino: l.ino,
                kind,
                name: name.clone(),
            });
        }
        Ok(out)
    }

    /// Up to `max` entries of a directory from position `pos` on, each with its position, in
    /// position order. An entry's position is where its record lives (`.` is 0, `..` 1), so it
    /// stays the same while the entry does: a listing resumed from a position neither skips nor
    /// repeats an entry that stays, however the directory changed meanwhile, with no state kept
    /// between calls (the mount's listings without OPENDIR). O(entries) per call.
    pub fn readdir_at(&self, ino: u64, pos: u64, max: usize) -> Result<Vec<(u64, DirEntry)>> {
        let dirs = self.ns.read();
        let (d, node) = self.read_dir(&dirs, ino)?;
        let dots = [
            (0, ino, b".".as_slice()),
            (1, node.parent, b"..".as_slice()),
        ];
        let mut out: Vec<_> = dots
            .into_iter()
            .filter(|&(p, ..)| p >= pos)
            .map(|(p, ino, name)| (p, ino, Kind::Dir as u8, name))
            .collect();
        out.extend(d.entries.iter().filter_map(|(name, l)| {
            let p = Self::dir_pos(l);
            (p >= pos).then_some((p, l.ino, l.kind, name.as_slice()))
        }));
        if out.len() > max && max > 0 {
            out.select_nth_unstable_by_key(max - 1, |e| e.0);
        }
        out.truncate(max);
        out.sort_unstable_by_key(|e| e.0);
        Ok(out
            .into_iter()
            .map(|(p, ino, kind, name)| {
                let kind = Kind::from_u8(kind).unwrap_or(Kind::Free);
                let name = name.to_vec();
                (p, DirEntry { ino, kind, name })
            })
            .collect())
    }

    /// The position of the entry recorded at `l` (`readdir_at`): after `.` and `..`, by block
    /// and slot, so `readdir`'s order too.
    fn dir_pos(l: &crate::dir::Loc) -> u64 {
        2 + l.block * crate::dir::SLOTS as u64 + l.slot as u64
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let _ns = self.ns.read();
        let _g = self.stripe(ino).lock();
        let n = self.live(ino)?;
        if !n.is(Kind::Symlink) {
            return Err(Error::Invalid("not a symlink"));
        }
        // The target's checksum (format 3) was checked with the inode by `live` (the walk's
        // checks, once per mount): a damaged target is EIO there, never another path.
        self.read_data(ino, &n, 0, n.size.min(SYMLINK_MAX as u64) as usize)
    }

    pub fn statfs(&self) -> StatFs {
        let a = self.alloc.lock();
        // A table that grows has room for 32 more inodes in every free block (as XFS counts
        // them): the only inode limit is space.
        let grow_room = match self.geo.grows() {
            true => a.blocks.free() * crate::itable::PER_BLOCK,
            false => 0,
        };
        StatFs {
            block_size: BLOCK as u32,
            blocks: self.geo.data_blocks(),
            free_blocks: a.blocks.free(),
            free_huge_blocks: a.blocks.free_chunks(),
            inodes: self.itable.count() - 1 + grow_room,
            free_inodes: a.inodes.free() + grow_room,
            name_max: NAME_MAX as u32,
        }
    }

    /// Count an open handle: an unlinked file stays until its last `release`.
    pub fn open(&self, ino: u64) -> Result<()> {
        let _ns = self.ns.read();
        self.live(ino)?;
        *self.alloc.lock().open.entry(ino).or_insert(0) += 1;
        Ok(())
    }

    /// Drop an open handle; the last one of an unlinked file frees it, the last one of a linked
    /// file gives back its preallocation. Closes take the namespace lock for reading, so they
    /// run in parallel; only freeing an unlinked file takes it for writing.
    pub fn release(&self, ino: u64) -> Result<()> {
        {
            let _ns = self.ns.read();
            let mut a = self.alloc.lock();
            let c = a
                .open
                .get_mut(&ino)
                .ok_or(Error::Invalid("release without open"))?;
            *c -= 1;
            if *c > 0 {
                return Ok(());
            }
            a.open.remove(&ino);
            drop(a);
            // Links only change under the write lock, which this read lock holds off: a file
            // linked now stays linked until the trim is done (under its stripe, as a write).
            if self.live(ino)?.links > 0 {
                return self.trim_prealloc(ino);
            }
        }
        let _ns = self.ns.write();
        // Between the two locks another handle may have been opened (by number) on the
        // unlinked file, and even closed, freeing it (its slot may be a new inode now): free
        // only an orphan without links that nobody holds. Each lock alone (alloc, orphans),
        // never nested, so the order `orphans, lane, allocator` of truncates stands.
        let held = self.alloc.lock().open.contains_key(&ino);
        let orphan = self.orphans.lock().contains(&ino);
        if !held && orphan && self.live(ino).is_ok_and(|n| n.links == 0) {
            self.free_orphan(ino)?;
        }
        Ok(())
    }

    /// fsync and fdatasync: nothing to do. Every operation is durable when it returns (each
    /// ends with a fence after its last flushed store: the commit entry, the append's size
    /// store, the overwrite's mtime), so no store of this file is left unflushed or unfenced
    /// for fsync to order. Stores through a direct-access view are not the library's: they
    /// are durable after `persist` (as before, when this was a fence that flushed nothing).
    pub fn fsync(&self, ino: u64) -> Result<()> {
        self.live(ino)?;
        Ok(())
    }
}
