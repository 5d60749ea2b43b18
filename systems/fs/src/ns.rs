//! Namespace operations: create, mkdir, mknod, symlink, link, unlink, rmdir, rename. Each is one
//! journal transaction under the namespace lock; the DRAM directory indexes change after commit.

use crate::dir::{self, DirIndex, Dirs, Loc, SLOT};
use crate::error::{Error, Result};
use crate::inode::{Inode, Kind};
use crate::layout::{BLOCK, LINK_MAX, NAME_MAX, ROOT_INO, SYMLINK_MAX};
use crate::tree;
use crate::tx::Tx;
use crate::{attr::now, Attr, Fs, Owner, RenameFlags};
use pmkit_media::Media;

mod tmpfile;

/// DRAM changes to make once a transaction has committed.
enum Post {
    Insert(u64, Vec<u8>, Loc, bool),
    Remove(u64, Vec<u8>),
    Retarget(u64, Vec<u8>, u64, u8),
    NewDir(u64),
    DropDir(u64),
    Orphans(Vec<u64>),
}

/// A rename's source record (`name` in `dir`, at byte `off`), which the rename emptied, made
/// to name a whiteout instead: a new character device 0:0, mode 0, owned by root.
fn whiteout_at<M: Media>(
    tx: &mut Tx<'_, M>,
    (dir, name, off): (u64, &[u8], usize),
    t: i64,
    posts: &mut Vec<Post>,
) -> Result<()> {
    let ino = tx.alloc_inode()?;
    let node = Inode {
        kind: Kind::CharDev as u8,
        links: 1,
        mtime: t,
        ctime: t,
        atime: t,
        ..Default::default()
    };
    tx.put_inode(ino, &node);
    point(tx, (dir, off), name, ino, Kind::CharDev as u8);
    posts.retain(|p| !matches!(p, Post::Remove(d, n) if *d == dir && n == name));
    posts.push(Post::Retarget(dir, name.to_vec(), ino, Kind::CharDev as u8));
    Ok(())
}

/// Point the record at `off` in directory `d` (named `name`) at `ino` of `kind`, its checksum
/// and the directory's tally with it.
fn point<M: Media>(tx: &mut Tx<'_, M>, (d, off): (u64, usize), name: &[u8], ino: u64, kind: u8) {
    tx.tally_record(d, off, false);
    tx.write_u64(off + dir::H_INO, ino);
    tx.write(off + dir::H_KIND, &[kind]);
    let sum = dir::record_sum(name, ino, kind);
    tx.write(off + dir::H_SUM, &sum.to_le_bytes());
    tx.tally_record(d, off, true);
}

/// An inode reached by a name has at least one link: a count of 0 there is damage (a name
/// dropped from it would free an inode other names may still reach), refused before any change.
fn named_with_links(ino: u64, n: &Inode) -> Result<()> {
    if n.links == 0 {
        return Err(Error::Damaged {
            problems: vec![format!("inode {ino} has a name but a link count of 0")],
        });
    }
    Ok(())
}

pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong {
            len: name.len(),
            max: NAME_MAX,
        });
    }
    if name.is_empty() || name == b"." || name == b".." {
        return Err(Error::BadName("empty, \".\" or \"..\""));
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(Error::BadName("contains '/' or NUL"));
    }
    Ok(())
}

fn upd<M: Media>(tx: &mut Tx<'_, M>, ino: u64, f: impl FnOnce(&mut Inode)) {
    let mut n = tx.inode(ino);
    f(&mut n);
    tx.put_inode(ino, &n);
}

fn slot_off<M: Media>(tx: &Tx<'_, M>, dir: u64, loc: &Loc) -> usize {
    let d = tx.inode(dir);
    let b = tree::lookup(tx, d.root, d.height, loc.block);
    assert!(b != 0, "directory {dir} block {} is a hole", loc.block);
    b as usize * BLOCK + loc.slot * SLOT
}

/// What `make` creates.
struct New<'a> {
    kind: Kind,
    mode: u32,
    /// A symlink's target.
    target: Option<&'a [u8]>,
    owner: Owner,
    rdev: u32,
}

impl<M: Media> Fs<M> {
    fn dir_of<'d>(&self, dirs: &'d Dirs, ino: u64) -> Result<&'d DirIndex> {
        match self.dir_index(dirs, ino) {
            Some(d) => d,
            None if self.valid_ino(ino) && !self.inode(ino).is(Kind::Free) => Err(Error::NotDir),
            None => Err(Error::NotFound),
        }
    }

    /// Stage a new record in `parent` (growing it by a block if full).
    fn dir_add(
        &self,
        tx: &mut Tx<'_, M>,
        idx: &DirIndex,
        parent: u64,
        name: &[u8],
        ino: u64,
        kind: Kind,
    ) -> Result<(Loc, bool)> {
        let n = dir::slots_for(name.len());
        let (block, slot, grown) = match idx.find_free(n) {
            Some((b, s)) => (b, s, false),
            None => {
                let b = tx.new_block(&[])?;
                let mut p = tx.inode(parent);
                let fb = p.size / BLOCK as u64;
                tree::set(tx, &mut p, fb, b)?;
                p.size += BLOCK as u64;
                tx.put_inode(parent, &p);
                (fb, 0, true)
            }
        };
        let loc = Loc {
            ino,
            kind: kind as u8,
            block,
            slot,
            nslots: n,
        };
        let off = slot_off(tx, parent, &loc);
        let rec = dir::encode(name, ino, kind as u8);
        tx.write_fresh(off + 8, &rec[8..]);
        tx.write_u64(off, ino); // the publish: one 8-byte store, journaled with the rest
        tx.tally_record(parent, off, true);
        Ok((loc, grown))
    }

    fn post(&self, dirs: &mut Dirs, posts: Vec<Post>) {
        for p in posts {
            if let Post::Insert(d, name, ..) | Post::Remove(d, name) | Post::Retarget(d, name, ..) =
                &p
            {
                crate::watch::note(|| crate::watch::Change::Entry(*d, name.clone()));
            }
            match p {
                Post::Insert(d, name, loc, grown) => {
                    let idx = dirs.get_mut(d);
                    if grown {
                        idx.used.push(0);
                    }
                    idx.insert(&name, loc);
                }
                Post::Remove(d, name) => {
                    dirs.get_mut(d).remove(&name).expect("entry");
                }
                Post::Retarget(d, name, ino, kind) => {
                    let idx = dirs.get_mut(d);
                    let mut loc = idx.remove(&name).expect("entry");
                    loc.ino = ino;
                    loc.kind = kind;
                    idx.insert(&name, loc);
                }
                Post::NewDir(ino) => {
                    dirs.insert_new(ino);
                }
                Post::DropDir(ino) => {
                    dirs.remove(ino);
                }
                Post::Orphans(list) => *self.orphans.lock() = list,
            }
        }
    }

    /// Stage freeing `ino` entirely: its blocks, xattr block and the inode.
    pub(crate) fn free_inode_tx(&self, tx: &mut Tx<'_, M>, ino: u64) {
        let n = tx.inode(ino);
        tree::free_subtree(tx, n.root, n.height);
        if n.xattr != 0 {
            tx.free_after.push(n.xattr);
        }
        tx.put_inode(ino, &Inode::default());
        tx.free_inodes_after.push(ino);
    }

    /// Stage dropping one name of `ino` (a file or symlink): free it, or orphan it while open.
    /// Its link count is at least 1 (`named_with_links`, checked by the callers).
    fn drop_name(&self, tx: &mut Tx<'_, M>, ino: u64, posts: &mut Vec<Post>) {
        let mut n = tx.inode(ino);
        debug_assert!(n.links > 0, "inode {ino}: a name dropped at link count 0");
        n.links = n.links.saturating_sub(1);
        n.ctime = now();
        if n.links > 0 {
            tx.put_inode(ino, &n);
        } else if self.alloc.lock().open.get(&ino).copied().unwrap_or(0) > 0 {
            let list = self.orphans.lock().clone();
            let list = self.orphan_add(tx, &list, ino, &mut n);
            tx.put_inode(ino, &n);
            posts.push(Post::Orphans(list));
        } else {
            self.free_inode_tx(tx, ino);
        }
    }

    fn make(&self, parent: u64, name: &[u8], new: New<'_>) -> Result<Attr> {
        let New {
            kind,
            mode,
            target,
            owner,
            rdev,
        } = new;
        check_name(name)?;
        let mut dirs = self.ns.write();
        let idx = self.dir_of(&dirs, parent)?;
        if idx.entries.contains_key(name) {
            return Err(Error::Exists);
        }
        self.inode_room()?;
        let mut tx = self.tx();
        let ino = tx.alloc_inode()?;
        let t = now();
        let mut node = Inode {
            kind: kind as u8,
            links: 1,
            mode: mode & 0o7777,
            uid: owner.uid,
            gid: owner.gid,
            rdev,
            mtime: t,
            ctime: t,
            atime: t,
            ..Default::default()
        };
        if kind == Kind::File {
            node.flags = self.new_file_flags(); // new files take the mount's defaults
        }
        let mut posts = Vec::new();
        if kind == Kind::Dir {
            node.links = 2;
            node.parent = parent;
            let p = tx.inode(parent);
            if p.links >= LINK_MAX {
                return Err(Error::TooManyLinks { max: LINK_MAX });
            }
            upd(&mut tx, parent, |p| p.links += 1);
            posts.push(Post::NewDir(ino));
        }
        if let Some(target) = target {
            node.root = tx.new_block(target)?;
            node.size = target.len() as u64;
            if self.geo.sums() {
                node.tail = crate::inode::symlink_sum(ino, target);
            }
        }
        tx.put_inode(ino, &node);
        let (loc, grown) = self.dir_add(&mut tx, idx, parent, name, ino, kind)?;
        upd(&mut tx, parent, |p| (p.mtime, p.ctime) = (t, t));
        self.commit(tx)?;
        posts.push(Post::Insert(parent, name.to_vec(), loc, grown));
        self.post(&mut dirs, posts);
        drop(dirs);
        self.getattr(ino)
    }

    /// Create a regular file (owned by root: see [`Fs::create_as`]).
    pub fn create(&self, parent: u64, name: &[u8], mode: u32) -> Result<Attr> {
        self.create_as(Owner::default(), parent, name, mode)
    }

    /// Create a regular file owned by `owner`.
    pub fn create_as(&self, owner: Owner, parent: u64, name: &[u8], mode: u32) -> Result<Attr> {
        self.make(
            parent,
            name,
            New {
                kind: Kind::File,
                mode,
                target: None,
                owner,
                rdev: 0,
            },
        )
    }

    /// `mknod`: a regular file (`mode`'s type bits 0 or `S_IFREG`), a FIFO, a socket, or a
    /// character or block device numbered `rdev`.
    pub fn mknod(&self, parent: u64, name: &[u8], mode: u32, rdev: u32) -> Result<Attr> {
        self.mknod_as(Owner::default(), parent, name, mode, rdev)
    }

    pub fn mknod_as(
        &self,
        owner: Owner,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
    ) -> Result<Attr> {
        let (kind, rdev) = match mode & 0o170000 {
            0 | 0o100000 => (Kind::File, 0),
            0o010000 => (Kind::Fifo, 0),
            0o140000 => (Kind::Socket, 0),
            0o020000 => (Kind::CharDev, rdev),
            0o060000 => (Kind::BlockDev, rdev),
            _ => return Err(Error::Invalid("mknod of an unknown file type")),
        };
        self.make(
            parent,
            name,
            New {
                kind,
                mode,
                target: None,
                owner,
                rdev,
            },
        )
    }

    pub fn mkdir(&self, parent: u64, name: &[u8], mode: u32) -> Result<Attr> {
        self.mkdir_as(Owner::default(), parent, name, mode)
    }

    pub fn mkdir_as(&self, owner: Owner, parent: u64, name: &[u8], mode: u32) -> Result<Attr> {
        self.make(
            parent,
            name,
            New {
                kind: Kind::Dir,
                mode,
                target: None,
                owner,
                rdev: 0,
            },
        )
    }

    pub fn symlink(&self, parent: u64, name: &[u8], target: &[u8]) -> Result<Attr> {
        self.symlink_as(Owner::default(), parent, name, target)
    }

    pub fn symlink_as(
        &self,
        owner: Owner,
        parent: u64,
        name: &[u8],
        target: &[u8],
    ) -> Result<Attr> {
        if target.len() > SYMLINK_MAX {
            return Err(Error::NameTooLong {
                len: target.len(),
                max: SYMLINK_MAX,
            });
        }
        if target.is_empty() {
            return Err(Error::Invalid("empty symlink target"));
        }
        self.make(
            parent,
            name,
            New {
                kind: Kind::Symlink,
                mode: 0o777,
                target: Some(target),
                owner,
                rdev: 0,
            },
        )
    }

    /// A new name `newname` in `newparent` for `ino` (not a directory).
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Attr> {
        check_name(newname)?;
        let mut dirs = self.ns.write();
        let idx = self.dir_of(&dirs, newparent)?;
        let node = self.live(ino)?;
        if node.is(Kind::Dir) {
            return Err(Error::Perm("hard link to a directory"));
        }
        if node.links == 0 {
            return Err(Error::NotFound);
        }
        if node.links >= LINK_MAX {
            return Err(Error::TooManyLinks { max: LINK_MAX });
        }
        if idx.entries.contains_key(newname) {
            return Err(Error::Exists);
        }
        let mut tx = self.tx();
        let t = now();
        upd(&mut tx, ino, |n| (n.links, n.ctime) = (n.links + 1, t));
        let kind = node.kind().expect("live inode kind");
        let (loc, grown) = self.dir_add(&mut tx, idx, newparent, newname, ino, kind)?;
        upd(&mut tx, newparent, |p| (p.mtime, p.ctime) = (t, t));
        self.commit(tx)?;
        self.post(
            &mut dirs,
            vec![Post::Insert(newparent, newname.to_vec(), loc, grown)],
        );
        drop(dirs);
        self.getattr(ino)
    }

    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.remove(parent, name, false)
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.remove(parent, name, true)
    }

    fn remove(&self, parent: u64, name: &[u8], want_dir: bool) -> Result<()> {
        let mut dirs = self.ns.write();
        let idx = self.dir_of(&dirs, parent)?;
        let loc = *idx.entries.get(name).ok_or(Error::NotFound)?;
        let victim = self.live(loc.ino)?; // its tree is checked before anything frees it
        let is_dir = loc.kind == Kind::Dir as u8;
        named_with_links(loc.ino, &victim)?;
        match (want_dir, is_dir) {
            (true, false) => return Err(Error::NotDir),
            (false, true) => return Err(Error::IsDir),
            (true, true) if !self.dir_of(&dirs, loc.ino)?.entries.is_empty() => {
                return Err(Error::NotEmpty)
            }
            _ => {}
        }
        let mut tx = self.tx();
        let off = slot_off(&tx, parent, &loc);
        tx.tally_record(parent, off, false);
        tx.write_u64(off, 0);
        let mut posts = vec![Post::Remove(parent, name.to_vec())];
        let t = now();
        if is_dir {
            self.free_inode_tx(&mut tx, loc.ino);
            upd(&mut tx, parent, |p| p.links = p.links.saturating_sub(1));
            posts.push(Post::DropDir(loc.ino));
        } else {
            self.drop_name(&mut tx, loc.ino, &mut posts);
        }
        upd(&mut tx, parent, |p| (p.mtime, p.ctime) = (t, t));
        self.commit(tx)?;
        self.post(&mut dirs, posts);
        Ok(())
    }

    /// Whether `dir` is `anc` or lies below it.
    fn is_under(&self, dir: u64, anc: u64) -> bool {
        let mut d = dir;
        for _ in 0..self.geo.inodes {
            if d == anc {
                return true;
            }
            if d == ROOT_INO {
                return false;
            }
            d = self.inode(d).parent;
        }
        false
    }

    pub fn rename(&self, p1: u64, n1: &[u8], p2: u64, n2: &[u8], flags: RenameFlags) -> Result<()> {
        check_name(n2)?;
        let (flags, whiteout) = match flags {
            RenameFlags::Whiteout => (RenameFlags::Replace, true),
            RenameFlags::WhiteoutNoReplace => (RenameFlags::NoReplace, true),
            f => (f, false),
        };
        let mut dirs = self.ns.write();
        if whiteout {
            self.inode_room()?;
        }
        let src = *self
            .dir_of(&dirs, p1)?
            .entries
            .get(n1)
            .ok_or(Error::NotFound)?;
        let dst = self.dir_of(&dirs, p2)?.entries.get(n2).copied();
        // Both trees are checked before anything frees or moves them.
        named_with_links(src.ino, &self.live(src.ino)?)?;
        if let Some(d) = dst {
            named_with_links(d.ino, &self.live(d.ino)?)?;
        }
        let dirk = Kind::Dir as u8;
        if src.kind == dirk && self.is_under(p2, src.ino) {
            return Err(Error::Invalid("cannot move a directory below itself"));
        }
        if p1 == p2 && n1 == n2 {
            return Ok(());
        }
        let mut tx = self.tx();
        let t = now();
        let mut posts = Vec::new();
        let src_off = slot_off(&tx, p1, &src);
        // a directory moving from `from` to `to`: its `..` and the link counts
        let moved = |tx: &mut Tx<'_, M>, ino: u64, from: u64, to: u64| {
            if from != to {
                upd(tx, ino, |n| (n.parent, n.ctime) = (to, t));
                upd(tx, from, |p| p.links = p.links.saturating_sub(1));
                upd(tx, to, |p| p.links += 1);
            }
        };
        match (flags, dst) {
            (RenameFlags::Exchange, None) => return Err(Error::NotFound),
            (RenameFlags::Exchange, Some(d)) => {
                if d.kind == dirk && self.is_under(p1, d.ino) {
                    return Err(Error::Invalid("cannot move a directory below itself"));
                }
                let dst_off = slot_off(&tx, p2, &d);
                point(&mut tx, (p1, src_off), n1, d.ino, d.kind);
                point(&mut tx, (p2, dst_off), n2, src.ino, src.kind);
                if src.kind == dirk {
                    moved(&mut tx, src.ino, p1, p2);
                }
                if d.kind == dirk {
                    moved(&mut tx, d.ino, p2, p1);
                }
                posts.push(Post::Retarget(p1, n1.to_vec(), d.ino, d.kind));
                posts.push(Post::Retarget(p2, n2.to_vec(), src.ino, src.kind));
            }
            (RenameFlags::NoReplace, Some(_)) => return Err(Error::Exists),
            (_, Some(d)) => {
                if d.ino == src.ino {
                    return Ok(());
                }
                match (src.kind == dirk, d.kind == dirk) {
                    (true, false) => return Err(Error::NotDir),
                    (false, true) => return Err(Error::IsDir),
                    (true, true) if !self.dir_of(&dirs, d.ino)?.entries.is_empty() => {
                        return Err(Error::NotEmpty)
                    }
                    _ => {}
                }
                let dst_off = slot_off(&tx, p2, &d);
                if d.kind == dirk {
                    self.free_inode_tx(&mut tx, d.ino);
                    upd(&mut tx, p2, |p| p.links = p.links.saturating_sub(1));
                    posts.push(Post::DropDir(d.ino));
                } else {
                    self.drop_name(&mut tx, d.ino, &mut posts);
                }
                point(&mut tx, (p2, dst_off), n2, src.ino, src.kind);
                tx.tally_record(p1, src_off, false);
                tx.write_u64(src_off, 0);
                if src.kind == dirk {
                    moved(&mut tx, src.ino, p1, p2);
                }
                posts.push(Post::Remove(p1, n1.to_vec()));
                posts.push(Post::Retarget(p2, n2.to_vec(), src.ino, src.kind));
            }
            (_, None) => {
                let kind = Kind::from_u8(src.kind).expect("entry kind");
                let (loc, grown) =
                    self.dir_add(&mut tx, self.dir_of(&dirs, p2)?, p2, n2, src.ino, kind)?;
                tx.tally_record(p1, src_off, false);
                tx.write_u64(src_off, 0);
                if src.kind == dirk {
                    moved(&mut tx, src.ino, p1, p2);
                }
                posts.push(Post::Remove(p1, n1.to_vec()));
                posts.push(Post::Insert(p2, n2.to_vec(), loc, grown));
            }
        }
        if whiteout {
            whiteout_at(&mut tx, (p1, n1, src_off), t, &mut posts)?;
        }
        upd(&mut tx, src.ino, |n| n.ctime = t);
        for p in [p1, p2] {
            upd(&mut tx, p, |p| (p.mtime, p.ctime) = (t, t));
        }
        self.commit(tx)?;
        self.post(&mut dirs, posts);
        Ok(())
    }
}
