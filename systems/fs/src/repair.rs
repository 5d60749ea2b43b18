//! `repair`: fix what `check` finds, in place, crash-safely. See `docs/fs.md`, "Repair".
//!
//! Order: superblocks, then the journal, then the tree in rounds (the mount walk names each
//! problem with its fix, the fixes of the first tier are applied, and the media is walked again
//! until a walk finds nothing), then `check` says what is left.
//!
//! Crash safety. Two kinds of store:
//! - *ordered stores* before the journal is usable: a superblock copy rewritten from the other
//!   (one 64-byte line, flushed and fenced; torn, it is still a bad copy and mount takes the
//!   good one), and a garbage lane reset (its entries zeroed and fenced first, then its header
//!   `gen << 32 | 0` in one 8-byte store: a prefix leaves the lane garbage or empty, never
//!   half-valid);
//! - *transactions* (`Tx`, the journal every operation uses) for everything in the tree: one
//!   transaction per fix (a cut pointer, a removed record, a field set, a lost inode linked with
//!   its record and counts, lost+found created with its record in the root). A crash leaves each
//!   fix whole or not begun; the next mount or repair rolls back the one in flight, and running
//!   repair again finishes the rest. A fix whose stores do not fit one lane is split into
//!   transactions whose every prefix is a state repair fixes further (a directory's size set
//!   first, its pointers past the size cut after).

use crate::alloc::{Alloc, Bitmap};
use crate::check::{check, CheckReport};
use crate::dir;
use crate::error::{Error, Result};
use crate::inode::{Inode, Kind};
use crate::itable::Itable;
use crate::journal::{self, Entry, Header, Journal};
use crate::layout::{Geometry, BLOCK, INODE, LINE, ROOT_INO};
use crate::overlay::Overlay;
use crate::pm::{Faults, Pm};
use crate::tree;
use crate::tx::Tx;
use crate::walk::{self, Remedy, Walked};
use parking_lot::Mutex;
use pmkit_media::Media;

/// Rounds of scan-and-fix before repair gives up (each round fixes at least one thing, or it
/// stops; a lost subtree takes one round per level).
const MAX_ROUNDS: usize = 1000;
/// Stores per transaction when a fix is split (each store is at most one inode: three entries).
const STORES_PER_TX: usize = 16;

/// One fix repair made: what, and where.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Fix {
    pub what: String,
    pub ino: Option<u64>,
    pub block: Option<u64>,
    /// Byte offset on the media of the first store.
    pub offset: Option<u64>,
}

/// The mkfs numbers of a pool, for a repair whose superblocks are both bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeometryHint {
    pub lanes: u32,
    pub lane_entries: u32,
    pub inodes: u32,
}

#[derive(Clone, Debug, Default)]
pub struct RepairOptions {
    /// The geometry to rebuild the superblocks from when both are bad (otherwise the mkfs
    /// defaults are tried).
    pub geometry: Option<GeometryHint>,
}

/// What `repair` found and did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RepairReport {
    /// `check`'s problems before the repair.
    pub problems: Vec<String>,
    /// Every fix, in the order made.
    pub fixes: Vec<Fix>,
    /// What is still wrong (empty: `check` is clean and mount works).
    pub unfixed: Vec<String>,
    /// `check` after the repair.
    pub after: CheckReport,
}

impl RepairReport {
    pub fn is_clean(&self) -> bool {
        self.unfixed.is_empty()
    }
}

/// Repair the file system on `media` (not mounted) with the default options.
pub fn repair<M: Media>(media: &M) -> Result<RepairReport> {
    repair_with(media, &RepairOptions::default())
}

/// Repair the file system on `media` (not mounted). `Err` only when a store to the media fails;
/// everything repair cannot fix is in `unfixed`. Repair runs first on a copy-on-write overlay:
/// when it would not finish (something left unfixed), nothing is written and `fixes` is empty,
/// so a pool is either repaired to one that mounts or left exactly as it was.
pub fn repair_with<M: Media>(media: &M, o: &RepairOptions) -> Result<RepairReport> {
    // Another format's layout is not damage: rebuilding its superblocks would misread it.
    if let Some(e) = crate::mount::other_version(media) {
        return Err(e);
    }
    let dry = Overlay::new(media);
    let mut trial = repair_on(&dry, o)?;
    if !trial.is_clean() {
        if !trial.fixes.is_empty() {
            trial.unfixed.push(format!(
                "nothing was changed: repair could not finish, so none of its {} fixes was \
                 written (the pool is as it was; `pmkit fs check POOL` lists its problems)",
                trial.fixes.len()
            ));
        }
        trial.fixes.clear();
        trial.after = check(media);
        return Ok(trial);
    }
    repair_on(media, o)
}

/// Repair `media` in place (the whole of [`repair_with`] but the dry run).
fn repair_on<M: Media>(media: &M, o: &RepairOptions) -> Result<RepairReport> {
    let mut rep = RepairReport {
        problems: check(media).problems,
        ..Default::default()
    };
    let pm = Pm::new(media, Faults::default());
    let Some(geo) = superblocks(&pm, o, &mut rep) else {
        rep.after = check(media);
        return Ok(rep);
    };
    if !rep.problems.is_empty() {
        // Fixes change the tree without updating any saved allocator: the next mount walks.
        crate::ckpt::clear(&pm);
        note(
            &mut rep,
            "clean-unmount checkpoint cleared (the next mount walks the tree)".into(),
            crate::ckpt::REC_OFF,
        );
    }
    reset_bad_lanes(&pm, &geo, &mut rep);
    match journal::recover(&pm, &geo) {
        Ok((gens, replay)) => {
            if replay.rolled_back > 0 {
                rep.fixes.push(Fix {
                    what: format!(
                        "journal: {} uncommitted transactions rolled back ({} entries), as mount does",
                        replay.rolled_back, replay.entries
                    ),
                    ino: None,
                    block: None,
                    offset: None,
                });
            }
            if let Err(e) = rounds(&pm, &geo, &Journal::new(&gens), &mut rep) {
                rep.unfixed.push(format!("repair stopped: {e}"));
            }
        }
        Err(p) => rep
            .unfixed
            .extend(p.into_iter().map(|p| format!("{p} (left as it is)"))),
    }
    pm.check()?;
    rep.after = check(media);
    rep.unfixed.extend(rep.after.problems.iter().cloned());
    Ok(rep)
}

mod superblocks;

use superblocks::superblocks;

fn note(rep: &mut RepairReport, what: String, offset: usize) {
    rep.fixes.push(Fix {
        what,
        ino: None,
        block: None,
        offset: Some(offset as u64),
    });
}

/// Lanes recovery would call garbage: report what they held and reset them (entries zeroed and
/// fenced, then a new generation at head 0).
fn reset_bad_lanes<M: Media>(pm: &Pm<M>, geo: &Geometry, rep: &mut RepairReport) {
    let entries = geo.lane_entries;
    for l in 0..geo.lanes {
        let off = geo.lane_off(l);
        let Header { gen, head } = Header::read(pm, geo, l);
        let mut why = None;
        let mut run = 0;
        // An entry of a later generation than the header's: the header went back (damage), and
        // a later transaction's head could walk into that stale entry and roll it back.
        let gens: Vec<u32> = (0..entries)
            .map(|i| journal::entry_gen(pm, geo, l, i))
            .collect();
        let ahead = gens.iter().filter(|&&g| g > gen).count();
        if head > entries {
            why = Some(format!("head {head} beyond its {entries} entries"));
        } else if ahead > 0 {
            let g = gens.iter().max().copied().unwrap_or(0);
            why = Some(format!(
                "entries of generation up to {g}, ahead of the header's {gen}"
            ));
            run = ahead;
        } else {
            for i in head..entries {
                let mut b = [0u8; LINE];
                pm.read(journal::entry_off(geo, l, i), &mut b);
                let e = Entry::decode(&b);
                if e.gen != gen || gen == 0 {
                    break;
                }
                if why.is_none() {
                    why = e.invalid(geo).map(|w| format!("entry {i}: {w}"));
                }
                run += 1;
            }
        }
        let Some(why) = why else { continue };
        let len = entries as usize * LINE;
        pm.write(off + LINE, &vec![0u8; len]);
        pm.flush(off + LINE, len);
        pm.fence();
        let next = if gen >= u32::MAX - 1 { 1 } else { gen + 1 };
        pm.store_u64(off, Header { gen: next, head: 0 }.word());
        pm.flush(off, 8);
        pm.fence();
        let what = format!(
            "journal lane {l}: garbage ({why}): {run} entries dropped, not rolled back; lane \
             reset (generation {next}, head 0)"
        );
        note(rep, what, off);
    }
}

/// Walk, fix, walk again, until a walk finds nothing or a round changes nothing. Each round
/// applies the fixes of the first tier that has any (see [`Remedy`]).
fn rounds<M: Media>(pm: &Pm<M>, geo: &Geometry, j: &Journal, rep: &mut RepairReport) -> Result<()> {
    for _ in 0..MAX_ROUNDS {
        let w = walk::walk(pm, geo);
        let Some(tier) = w.problems.iter().map(|p| p.remedy.tier()).min() else {
            return Ok(());
        };
        let it = &w.itable;
        let mut alloc = Alloc::new(w.alloc.blocks.clone(), inode_bitmap(pm, it));
        alloc.shares =
            crate::shares::Shares::from_extra(w.alloc.shares.sorted().into_iter().collect());
        let alloc = Mutex::new(alloc);
        let before = pm.counters().bytes_written;
        let now = w.problems.iter().filter(|p| p.remedy.tier() == tier);
        match tier {
            2 => {
                let lost: Vec<u64> = now.filter_map(|p| p.ino).collect();
                relink_lost(pm, (geo, it), &alloc, j, &w, &lost_order(pm, it, lost), rep)?;
            }
            _ => {
                for p in now {
                    let writes = match &p.remedy {
                        Remedy::Stores(writes) => writes.clone(),
                        Remedy::Links(want) => {
                            let ino = p.ino.expect("a link count is an inode's");
                            let off = it.off(ino) + crate::inode::LINKS;
                            vec![(off, want.to_le_bytes().to_vec())]
                        }
                        Remedy::Relink => unreachable!("tier 2 is handled above"),
                    };
                    apply(pm, (geo, it), &alloc, j, &writes)?;
                    rep.fixes.push(Fix {
                        what: p.fixed(),
                        ino: p.ino,
                        block: p.block,
                        offset: Some(writes[0].0 as u64),
                    });
                }
            }
        }
        if pm.counters().bytes_written == before {
            return Ok(()); // no progress: check names what is left
        }
    }
    Ok(())
}

/// The order to link lost inodes in: lost directories before lost files (a lost directory may
/// name them), and of the directories only those whose parent is not lost itself (a lost
/// subtree moves whole; the next round finds the rest named).
fn lost_order<M: Media>(pm: &Pm<M>, it: &Itable, lost: Vec<u64>) -> Vec<u64> {
    let node = |i: u64| {
        let mut b = [0u8; INODE];
        pm.read(it.off(i), &mut b);
        Inode::decode(&b)
    };
    let dirs: Vec<u64> = lost
        .iter()
        .copied()
        .filter(|&i| node(i).is(Kind::Dir))
        .collect();
    if dirs.is_empty() {
        return lost;
    }
    let tops: Vec<u64> = dirs
        .iter()
        .copied()
        .filter(|&i| {
            let p = node(i).parent;
            p == i || !dirs.contains(&p)
        })
        .collect();
    // all in a cycle of parents: break it at the lowest
    match tops.is_empty() {
        true => vec![dirs[0]],
        false => tops,
    }
}

/// Every inode slot that is not free (and the meta inode): a transaction's new inodes come from
/// the others.
fn inode_bitmap<M: Media>(pm: &Pm<M>, it: &Itable) -> Bitmap {
    let mut bits = Bitmap::new(it.count());
    bits.set(crate::layout::META_INO);
    for i in 1..it.count() {
        let mut kind = [0u8; 1];
        pm.read(it.off(i) + crate::inode::KIND, &mut kind);
        if kind[0] != Kind::Free as u8 {
            bits.set(i);
        }
    }
    bits
}

/// The stores of one fix, in one transaction (split when they cannot fit one lane).
fn apply<M: Media>(
    pm: &Pm<M>,
    (geo, it): (&Geometry, &Itable),
    alloc: &Mutex<Alloc>,
    j: &Journal,
    writes: &[(usize, Vec<u8>)],
) -> Result<()> {
    for chunk in writes.chunks(STORES_PER_TX) {
        let mut tx = Tx::new(pm, geo, it, alloc);
        for (off, b) in chunk {
            tx.write(*off, b);
        }
        reseal(&mut tx, geo, chunk);
        tx.commit(&mut j.take())?;
        pm.check()?;
    }
    Ok(())
}

/// Format 4: the checksum of every inode in use whose bytes a fix stores, in the fix's
/// transaction (a fix sets the fields it decides on; the checksum follows them); format 7: the
/// size word's check too.
fn reseal<M: Media>(tx: &mut Tx<'_, M>, geo: &Geometry, writes: &[(usize, Vec<u8>)]) {
    if !geo.inode_sums() {
        return;
    }
    let it = tx.itable();
    // Every inode slot a store reaches: its first byte, each slot after, its last byte.
    let mut touched: Vec<u64> = writes
        .iter()
        .filter(|(_, b)| !b.is_empty())
        .flat_map(|(off, b)| {
            let last = off + b.len() - 1;
            let at = (*off..=last).step_by(INODE).chain([last]);
            at.filter_map(|o| it.ino_at(o)).collect::<Vec<u64>>()
        })
        .collect();
    touched.sort_unstable();
    touched.dedup();
    for ino in touched {
        let n = tx.inode(ino).seal_in(geo, ino);
        tx.write(it.off(ino) + crate::inode::SUM, &n.sum.to_le_bytes());
        if geo.checked_sizes() {
            // format 7: the size word's check follows a size a fix set
            let size = crate::inode::SIZE;
            tx.write(it.off(ino) + size, &n.encode()[size..size + 8]);
        }
    }
}

/// Store the checksum of inode `ino` for its fields as they are on `media` (format 4; 0 on
/// older formats, which keep none), and in format 7 its size word's check: what a tool that edits an inode by hand must do after (as debugfs's
/// `set_inode_field` does for ext4), and how tests make damage a checksum does not catch (a
/// wrong field stored by a bug, not changed by the media).
pub fn reseal_inode<M: Media>(media: &M, ino: u64) -> Result<()> {
    let geo = crate::superblock(media)?.geo;
    let pm = Pm::new(media, Faults::default());
    let it = walk::grown_table(&pm, &geo).map_err(|problems| Error::Damaged { problems })?;
    if !it.has(ino) {
        return Ok(());
    }
    let at = it.off(ino);
    let mut b = [0u8; INODE];
    pm.read(at, &mut b);
    let n = Inode::decode(&b).seal_in(&geo, ino);
    pm.write(at + crate::inode::SUM, &n.sum.to_le_bytes());
    pm.flush(at + crate::inode::SUM, 4);
    if geo.checked_sizes() {
        let size = crate::inode::SIZE;
        pm.write(at + size, &n.encode()[size..size + 8]);
        pm.flush(at + size, 8);
    }
    pm.fence();
    pm.check()
}

/// Link each lost inode into lost+found (made first if missing) as `#<ino>`: one transaction
/// each, holding the record, the inode's link count (files) or parent (directories) and
/// lost+found's own count.
fn relink_lost<M: Media>(
    pm: &Pm<M>,
    (geo, it): (&Geometry, &Itable),
    alloc: &Mutex<Alloc>,
    j: &Journal,
    w: &Walked,
    lost: &[u64],
    rep: &mut RepairReport,
) -> Result<()> {
    let (lf, lf_name) = match w.lost_found {
        Some(i) => (i, "lost+found".to_string()),
        None => make_lost_found(pm, (geo, it), alloc, j, w, rep)?,
    };
    for &ino in lost {
        let mut tx = Tx::new(pm, geo, it, alloc);
        let mut node = tx.inode(ino);
        let mut name = format!("#{ino}");
        let mut k = 0;
        loop {
            match add_record(&mut tx, lf, name.as_bytes(), ino, node.kind) {
                Err(Error::Exists) if k < 100 => {
                    k += 1;
                    name = format!("#{ino}.{k}");
                }
                r => break r?,
            }
        }
        let mut dir = tx.inode(lf);
        if node.is(Kind::Dir) {
            node.parent = lf;
            dir.links = dir.links.saturating_add(1);
        } else {
            node.links = 1;
        }
        tx.put_inode(ino, &node);
        tx.put_inode(lf, &dir);
        tx.commit(&mut j.take())?;
        pm.check()?;
        let kind = Kind::from_u8(node.kind).map_or("inode".into(), |k| format!("{k:?}"));
        rep.fixes.push(Fix {
            what: format!(
                "inode {ino} ({kind}) was in use but nothing named it: linked as /{lf_name}/{name}"
            ),
            ino: Some(ino),
            block: None,
            offset: Some(it.off(ino) as u64),
        });
    }
    Ok(())
}

/// A new `/lost+found` (or `lost+found.N` when a non-directory holds the name).
fn make_lost_found<M: Media>(
    pm: &Pm<M>,
    (geo, it): (&Geometry, &Itable),
    alloc: &Mutex<Alloc>,
    j: &Journal,
    w: &Walked,
    rep: &mut RepairReport,
) -> Result<(u64, String)> {
    let root = w.dirs.get(&ROOT_INO);
    let name = (0..)
        .map(|k| match k {
            0 => "lost+found".to_string(),
            k => format!("lost+found.{k}"),
        })
        .find(|n| root.is_none_or(|r| !r.entries.contains_key(n.as_bytes())))
        .expect("a free name");
    let mut tx = Tx::new(pm, geo, it, alloc);
    let ino = tx.alloc_inode()?;
    let node = Inode::empty_dir(0o700, ROOT_INO, crate::clock::now());
    tx.put_inode(ino, &node);
    add_record(&mut tx, ROOT_INO, name.as_bytes(), ino, Kind::Dir as u8)?;
    let mut root = tx.inode(ROOT_INO);
    root.links = root.links.saturating_add(1); // garbage counts are set right later
    tx.put_inode(ROOT_INO, &root);
    tx.commit(&mut j.take())?;
    pm.check()?;
    rep.fixes.push(Fix {
        what: format!("created /{name} (inode {ino}) for inodes nothing named"),
        ino: Some(ino),
        block: None,
        offset: Some(it.off(ino) as u64),
    });
    Ok((ino, name))
}

/// Add a record `name -> ino` to directory `d` in `tx`: in free slots of its blocks, or in a
/// new block at its end. `Exists` if the name is taken.
fn add_record<M: Media>(tx: &mut Tx<'_, M>, d: u64, name: &[u8], ino: u64, kind: u8) -> Result<()> {
    let need = dir::slots_for(name.len());
    let mut node = tx.inode(d);
    let nblocks = node.size / BLOCK as u64;
    let mut at = None;
    for fb in 0..nblocks {
        let b = tree::lookup(tx, node.root, node.height, fb);
        if b == 0 {
            continue;
        }
        let mut buf = vec![0u8; BLOCK];
        tx.read(b as usize * BLOCK, &mut buf);
        let Ok(recs) = dir::parse(&buf) else { continue };
        if recs.iter().any(|r| r.name == name) {
            return Err(Error::Exists);
        }
        let mut used = [false; dir::SLOTS];
        for r in &recs {
            used[r.slot..r.slot + r.nslots].fill(true);
        }
        if at.is_none() {
            at = (0..=dir::SLOTS - need)
                .find(|&s| used[s..s + need].iter().all(|u| !u))
                .map(|s| b as usize * BLOCK + s * dir::SLOT);
        }
    }
    let at = match at {
        Some(at) => at,
        None => {
            let b = tx.new_block(&[])?;
            tree::set(tx, &mut node, nblocks, b)?;
            node.size += BLOCK as u64;
            tx.put_inode(d, &node);
            b as usize * BLOCK
        }
    };
    tx.write(at, &dir::encode(name, ino, kind));
    tx.tally_record(d, at, true);
    Ok(())
}
