//! mkfs, mount (superblocks, journal recovery, the walk, orphans: one path, always run) and
//! unmount.

use crate::alloc::Alloc;
use crate::dir::Dirs;
use crate::error::{Error, Result};
use crate::inode::{size_word, Inode, Kind, SIZE_MTIME, TAIL};
use crate::itable::Itable;
use crate::journal::{self, Header, Journal};
use crate::layout::{
    far_copy_off, Geometry, Superblock, BLOCK, INODE, LINE, META_INO, OLDEST_VERSION, ROOT_INO,
    SB_A, SB_B_V2, SB_LEN, VERSION,
};
use crate::pm::{Faults, Pm};
use crate::tx::Tx;
use crate::{ckpt, walk, Fs, MkfsOptions, MountOptions, Recovery};
use parking_lot::{Mutex, RwLock};
use pmkit_media::Media;

fn write_sb<M: Media>(pm: &Pm<M>, sb: &Superblock) {
    let b = sb.encode();
    for off in sb.geo.sb_offs() {
        pm.write(off, &b);
        pm.flush(off, SB_LEN);
        pm.fence();
    }
}

/// Every place a superblock copy may be on media of `len` bytes: A, format 2's B (block 0),
/// format 3's B (the last block).
fn sb_slots(len: usize) -> Vec<usize> {
    let mut v = vec![SB_A, SB_B_V2];
    let blocks = (len / BLOCK) as u64;
    if blocks >= 2 {
        v.push(far_copy_off(blocks));
    }
    v
}

/// The copy at `off`, decoded (or why not); a copy of a layout that does not put its second
/// copy at `off` (B only) is not one.
fn read_at<M: Media>(m: &M, off: usize) -> std::result::Result<Superblock, String> {
    if m.len() < off + SB_LEN {
        return Err("media too small".into());
    }
    let mut b = [0u8; SB_LEN];
    m.read(off, &mut b);
    let s = Superblock::decode(&b, m.len())?;
    if off != SB_A && s.geo.sb_offs()[1] != off {
        return Err(format!(
            "a copy of format {} in the wrong place",
            s.geo.version()
        ));
    }
    Ok(s)
}

/// Where copy B is: where a good copy A puts it; without one, the last block if a format 3
/// copy is there, else format 2's place.
fn b_off<M: Media>(m: &M, a: &std::result::Result<Superblock, String>) -> usize {
    match a {
        Ok(s) => s.geo.sb_offs()[1],
        Err(_) => {
            let far = sb_slots(m.len()).get(2).copied();
            far.filter(|&o| read_at(m, o).is_ok()).unwrap_or(SB_B_V2)
        }
    }
}

/// Both superblock copies, decoded (or why not).
pub(crate) fn read_sbs<M: Media>(m: &M) -> [std::result::Result<Superblock, String>; 2] {
    let a = read_at(m, SB_A);
    let b = read_at(m, b_off(m, &a));
    [a, b]
}

/// A superblock copy whose magic and checksum hold but whose format version this build does
/// not read: nothing here may read or "repair" that layout. B's slots are asked only without a
/// good copy A (a format 2 pool's last block is file data, which may hold anything).
pub(crate) fn other_version<M: Media>(m: &M) -> Option<Error> {
    let version_at = |off: usize| {
        let mut b = [0u8; SB_LEN];
        (m.len() >= off + SB_LEN).then(|| m.read(off, &mut b))?;
        Superblock::version(&b)
    };
    let slots = match version_at(SB_A) {
        Some(_) => vec![SB_A],
        None => sb_slots(m.len()),
    };
    slots.into_iter().find_map(|off| match version_at(off) {
        Some(found) if !(OLDEST_VERSION..=VERSION).contains(&found) => Some(Error::Version {
            found,
            reads: VERSION,
        }),
        _ => None,
    })
}

/// The superblock mount uses: the valid copy with the higher generation.
pub(crate) fn pick_sb<M: Media>(m: &M) -> Result<(Superblock, bool)> {
    if let Some(e) = other_version(m) {
        return Err(e);
    }
    match read_sbs(m) {
        [Ok(a), Ok(b)] => Ok((if b.mount_gen > a.mount_gen { b } else { a }, a != b)),
        [Ok(s), Err(_)] | [Err(_), Ok(s)] => Ok((s, true)),
        [Err(a), Err(b)] => Err(Error::NotFs(format!(
            "superblock A: {a}; superblock B: {b}"
        ))),
    }
}

impl<M: Media> Fs<M> {
    /// Make an empty file system on `media` (everything on it is lost).
    pub fn mkfs(media: &M, o: &MkfsOptions) -> Result<()> {
        let o = &o.resolved(media.len() as u64);
        let geo = Geometry::new(
            (media.len() / BLOCK) as u64,
            o.lanes,
            o.lane_entries,
            o.inodes,
        )?;
        let pm = Pm::new(media, Faults::default());
        // Invalidate any old file system first (every place a copy of any format may be), so a
        // cut mkfs leaves no mountable half.
        for off in sb_slots(media.len()) {
            pm.write(off, &[0u8; SB_LEN]);
            pm.flush(off, SB_LEN);
        }
        pm.fence();
        let jlen = geo.lanes as usize * (geo.lane_entries as usize + 1) * LINE;
        crate::ckpt::clear(&pm);
        pm.write(BLOCK, &vec![0u8; jlen]);
        for l in 0..geo.lanes {
            pm.store_u64(geo.lane_off(l), Header { gen: 1, head: 0 }.word());
        }
        pm.flush(BLOCK, jlen);
        let tlen = geo.inodes as usize * INODE;
        pm.write(geo.inode_off(0), &vec![0u8; tlen]);
        debug_assert!(geo.inode_sums(), "mkfs makes this build's format");
        let root = Inode::empty_dir(0o755, ROOT_INO, crate::clock::now()).seal_in(&geo, ROOT_INO);
        pm.write(geo.inode_off(ROOT_INO), &root.encode());
        let meta = Inode::default().seal_in(&geo, META_INO);
        pm.write(geo.inode_off(META_INO), &meta.encode());
        pm.flush(geo.inode_off(0), tlen);
        pm.fence();
        // The empty file system's checkpoint, so that even the first mount reads no inode table.
        let mut alloc = Alloc::base(&geo);
        assert!(alloc.inodes.set(ROOT_INO));
        ckpt::save(&pm, &geo, 0, &alloc, &[ROOT_INO]);
        debug_assert!(geo.grows(), "mkfs makes a table that grows");
        write_sb(
            &pm,
            &Superblock {
                geo,
                mount_gen: 0,
                clean: true,
            },
        );
        Ok(())
    }

    /// Mount: recover the journal, walk the tree, finish the orphans. Refuses corrupt media.
    pub fn mount(media: M, opts: &MountOptions) -> Result<(Fs<M>, Recovery)> {
        if opts.barrier_ns > pmkit_media::emulate::MAX_BARRIER_NS {
            return Err(Error::Invalid("barrier_ns is over 1 ms"));
        }
        let (sb, repaired) = pick_sb(&media).map_err(|e| {
            // A copy with the magic: a damaged pmkit file system (repair can rebuild the
            // superblocks), not some other content.
            let ours = read_sbs(&media)
                .iter()
                .any(|s| matches!(s, Err(w) if w != "bad magic" && w != "media too small"));
            match e {
                e @ Error::NotFs(_) if ours => Error::Damaged {
                    problems: vec![format!("both superblocks are bad: {e}")],
                },
                e => e,
            }
        })?;
        let geo = sb.geo;
        let pm = Pm::protected(media, opts.faults, opts.protect)?.with_barrier_ns(opts.barrier_ns);
        let (gens, replay) =
            journal::recover(&pm, &geo).map_err(|problems| Error::Damaged { problems })?;
        let was_clean = !repaired && sb_clean(&pm);
        // After a clean unmount, with nothing in the journal, the checkpoint stands in for the
        // walk; any other mount (or one that asks) walks the whole tree and checks it.
        let saved = match sb.clean && replay == Default::default() && !opts.full_walk {
            true => checkpoint(&pm, &geo, sb.mount_gen),
            false => None,
        };
        let from_checkpoint = saved.is_some();
        let (alloc, dirs, orphans, cut, itable) = match saved {
            Some((s, itable)) => {
                let orphans = orphan_list(&pm, &itable)?;
                let d = Dirs::lazy(s.dirs);
                let mut alloc = Alloc::new(s.blocks, s.inodes);
                alloc.shares = s.shares;
                (alloc, d, orphans, Vec::new(), itable)
            }
            None => {
                let w = walk::walk(&pm, &geo);
                if !w.problems.is_empty() {
                    return Err(Error::Damaged {
                        problems: w.described(),
                    });
                }
                (w.alloc, Dirs::built(w.dirs), w.orphans, w.cut, w.itable)
            }
        };
        for c in &cut {
            // The size first: the record no longer applies to it, so a crash in between
            // leaves nothing to undo twice. Then the record, which a later size could match.
            let at = itable.off(c.ino);
            pm.store_u64(at + SIZE_MTIME, size_word(geo.checked_sizes(), c.to));
            pm.store_u64(at + TAIL, 0);
            pm.flush(at, LINE);
            pm.fence();
        }
        let sb = Superblock {
            geo,
            mount_gen: sb.mount_gen + 1,
            clean: false,
        };
        let mut rec = Recovery {
            was_clean,
            journal: replay,
            orphans: 0,
            superblock_repaired: repaired,
            from_checkpoint,
            cut_appends: cut.len() as u32,
        };
        write_sb(&pm, &sb);
        let sums = {
            let mut b = [0u8; INODE];
            pm.read(itable.off(META_INO), &mut b);
            crate::sums::Table::new(&Inode::decode(&b))
        };
        let shared_count = alloc.shares.counter();
        let fs = Fs {
            shared_count,
            pm,
            geo,
            opts: opts.clone(),
            sb,
            ns: crate::Line(RwLock::new(dirs)),
            stripes: (0..64).map(|_| crate::Stripe::default()).collect(),
            orphans: Mutex::new(orphans.clone()),
            journal: Journal::new(&gens),
            alloc: Mutex::new(alloc),
            prealloc_files: crate::Line(Default::default()),
            pins: Mutex::new(std::collections::HashMap::new()),
            damage: Mutex::new(crate::damage::Damage::default()),
            itable,
            sums,
        };
        if fs.sums.get().0 != 0 || opts.checksum {
            // a pool grown since the table was made: the new blocks get their leaves; or the
            // mount's new files will carry sums (refused before format 6)
            fs.ensure_sums()?;
        }
        for o in orphans {
            fs.finish_orphan(o)?;
            rec.orphans += 1;
        }
        Ok((fs, rec))
    }

    /// Mark the file system clean and give the media back. Unlinked files still open stay on
    /// the orphan list; the next mount frees them.
    pub fn unmount(self) -> M {
        // A poisoned mount stopped changing the media where a write failed: marking it clean
        // would tell the next mount to trust a state nothing finished (whatever the
        // protection mode, so not left to the stores being dropped).
        if self.pm.check().is_err() {
            return self.pm.into_media();
        }
        // Damage met in use: the next mount must walk everything (and refuse until repaired),
        // so neither the checkpoint nor the clean flag is written.
        let damage = self.damage.lock().lines();
        if !damage.is_empty() {
            tracing::error!(
                "not marked clean: {} damaged inode(s) met in use; the next mount walks the \
                 pool; repair it with pmkit fs check POOL --repair",
                damage.len()
            );
            return self.pm.into_media();
        }
        // The checkpoint first: the clean superblock is what makes it count.
        let dirs: Vec<u64> = self.ns.read().inos().collect();
        ckpt::save(
            &self.pm,
            &self.geo,
            self.sb.mount_gen,
            &self.alloc.lock(),
            &dirs,
        );
        write_sb(
            &self.pm,
            &Superblock {
                clean: true,
                ..self.sb
            },
        );
        self.pm.into_media()
    }

    /// Damage met in use since the mount, one line per inode (empty: none). Such inodes answer
    /// EIO, and [`Fs::unmount`] leaves the pool unclean.
    pub fn damage_found(&self) -> Vec<String> {
        self.damage.lock().lines()
    }

    /// The protection mode in force (`Auto` resolved), and why it was chosen.
    pub fn protection(&self) -> (crate::Protect, &str) {
        self.pm.protection()
    }

    /// Why the mount is poisoned (a write to PM failed; every write since is refused and
    /// [`Fs::unmount`] cannot mark the pool clean: the next mount recovers it), or `None`.
    pub fn write_failure(&self) -> Option<String> {
        self.pm.check().err().map(|e| e.to_string())
    }

    /// Test-only: act as if a write to PM had just failed with `why` (a full or failing disk
    /// under a kernel-mode mount), to prove what the mount and its front ends do then.
    #[doc(hidden)]
    pub fn inject_write_failure(&self, why: &str) {
        self.pm.poison(why.to_string());
    }

    /// PM traffic since mount.
    pub fn counters(&self) -> crate::Counters {
        self.pm.counters()
    }

    pub(crate) fn tx(&self) -> Tx<'_, M> {
        Tx::new(&self.pm, &self.geo, &self.itable, &self.alloc)
    }

    pub(crate) fn commit(&self, tx: Tx<'_, M>) -> Result<()> {
        self.pm.check()?;
        let mut lane = self.journal.take();
        tx.commit(&mut lane)?;
        self.pm.check()
    }

    /// Link `ino` at the head of the orphan list (in `tx`); returns the new list.
    pub(crate) fn orphan_add(
        &self,
        tx: &mut Tx<'_, M>,
        list: &[u64],
        ino: u64,
        node: &mut Inode,
    ) -> Vec<u64> {
        node.orphan_next = list.first().copied().unwrap_or(0);
        let mut meta = tx.inode(META_INO);
        meta.orphan_next = ino;
        tx.put_inode(META_INO, &meta);
        let mut out = vec![ino];
        out.extend_from_slice(list);
        out
    }

    /// Unlink `ino` from the orphan list (in `tx`); `node` is its inode, updated by the caller.
    pub(crate) fn orphan_remove(
        &self,
        tx: &mut Tx<'_, M>,
        list: &[u64],
        ino: u64,
        node: &mut Inode,
    ) -> Vec<u64> {
        let pos = list
            .iter()
            .position(|&o| o == ino)
            .expect("inode is on the orphan list");
        let pred = if pos == 0 { META_INO } else { list[pos - 1] };
        let mut p = tx.inode(pred);
        p.orphan_next = node.orphan_next;
        tx.put_inode(pred, &p);
        node.orphan_next = 0;
        let mut out = list.to_vec();
        out.remove(pos);
        out
    }

    /// An orphan found at mount: free it (no links) or finish its truncate.
    fn finish_orphan(&self, ino: u64) -> Result<()> {
        let node = self.inode(ino);
        self.verified(ino, &node)?;
        if node.links == 0 {
            self.free_orphan(ino)
        } else {
            self.finish_truncate(ino, node.trunc)
        }
    }
}

/// The clean-unmount checkpoint of generation `gen` and the inode table it counts (`None`:
/// the mount walks, and names whatever kept them from loading).
fn checkpoint<M: Media>(pm: &Pm<M>, geo: &Geometry, gen: u64) -> Option<(ckpt::Saved, Itable)> {
    let it = walk::grown_table(pm, geo).ok()?;
    let s = ckpt::load(pm, geo, gen, it.count()).ok()?;
    // a table block the checkpoint has free would be handed out as data
    it.blocks()
        .into_iter()
        .all(|b| s.blocks.is_used(b))
        .then_some((s, it))
}

/// The orphan list as the meta inode heads it, for a mount that does not walk (the walk checks
/// it): a link out of range, to a free inode or back into the list is damage.
fn orphan_list<M: Media>(pm: &Pm<M>, it: &Itable) -> Result<Vec<u64>> {
    let inode = |i: u64| {
        let mut b = [0u8; INODE];
        pm.read(it.off(i), &mut b);
        Inode::decode(&b)
    };
    let mut out = Vec::new();
    let mut o = inode(META_INO).orphan_next;
    while o != 0 {
        if !it.has(o) || out.contains(&o) || inode(o).is(Kind::Free) {
            return Err(Error::Damaged {
                problems: vec![format!("orphan list: bad or looping link to inode {o}")],
            });
        }
        out.push(o);
        o = inode(o).orphan_next;
    }
    Ok(out)
}

fn sb_clean<M: Media>(pm: &Pm<M>) -> bool {
    read_sbs(pm.media())
        .iter()
        .all(|s| matches!(s, Ok(s) if s.clean))
}
