//! O_TMPFILE: a regular file made in no directory. It is on the orphan list from its first
//! transaction, so the last close or a crash frees it like any unlinked file; `link_tmpfile`
//! names it later (`linkat` of its descriptor), taking it off the list in the same
//! transaction.

use super::{check_name, upd, Post};
use crate::error::{Error, Result};
use crate::inode::{Inode, Kind};
use crate::{attr::now, Attr, Fs, Owner};
use pmkit_media::Media;

impl<M: Media> Fs<M> {
    /// A new regular file in no directory, owned by `owner`, already open once (give it back
    /// with [`Fs::release`], as any open): O_TMPFILE. `dir` must be a directory; the caller
    /// checks the permissions on it.
    pub fn tmpfile_as(&self, owner: Owner, dir: u64, mode: u32) -> Result<Attr> {
        let dirs = self.ns.write();
        self.dir_of(&dirs, dir)?;
        self.inode_room()?;
        // The list's lock over the transaction that changes its head (`orphans, lane`).
        let mut list = self.orphans.lock();
        let mut tx = self.tx();
        let ino = tx.alloc_inode()?;
        let t = now();
        let mut node = Inode {
            kind: Kind::File as u8,
            links: 0,
            mode: mode & 0o7777,
            uid: owner.uid,
            gid: owner.gid,
            mtime: t,
            ctime: t,
            atime: t,
            ..Default::default()
        };
        node.flags = self.new_file_flags();
        let new = self.orphan_add(&mut tx, &list, ino, &mut node);
        tx.put_inode(ino, &node);
        self.commit(tx)?;
        *list = new;
        drop(list);
        // Nobody else knows the number yet: counted open before anyone could release it.
        *self.alloc.lock().open.entry(ino).or_insert(0) += 1;
        drop(dirs);
        self.getattr(ino)
    }

    /// Name `ino`, a file [`Fs::tmpfile_as`] made and nothing has named yet, `name` in
    /// `parent`. `NotFound` for any other file without links (as Linux answers a `linkat` of
    /// a descriptor whose file was unlinked).
    pub fn link_tmpfile(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Attr> {
        check_name(name)?;
        let mut dirs = self.ns.write();
        let idx = self.dir_of(&dirs, parent)?;
        if idx.entries.contains_key(name) {
            return Err(Error::Exists);
        }
        let node = self.live(ino)?;
        let mut list = self.orphans.lock();
        if !node.is(Kind::File) || node.links != 0 || node.trunc != 0 || !list.contains(&ino) {
            return Err(Error::NotFound);
        }
        let mut tx = self.tx();
        let mut n = tx.inode(ino);
        let new = self.orphan_remove(&mut tx, &list, ino, &mut n);
        let t = now();
        (n.links, n.ctime) = (1, t);
        tx.put_inode(ino, &n);
        let (loc, grown) = self.dir_add(&mut tx, idx, parent, name, ino, Kind::File)?;
        upd(&mut tx, parent, |p| (p.mtime, p.ctime) = (t, t));
        self.commit(tx)?;
        *list = new;
        drop(list);
        self.post(
            &mut dirs,
            vec![Post::Insert(parent, name.to_vec(), loc, grown)],
        );
        drop(dirs);
        self.getattr(ino)
    }
}
