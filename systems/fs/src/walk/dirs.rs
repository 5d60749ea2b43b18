//! One directory's blocks: its records read with the one lenient reader (`dir::scan`), the
//! DRAM index built from the good ones, and each bad record, duplicate name or wrong size a
//! problem with its fix.

use super::inode::{Data, Visitor};
use super::{Problem, Sign};
use crate::dir::{self, DirIndex, Loc, Rec, SLOT};
use crate::inode::{self as field, Inode, Kind};
use crate::itable::Itable;
use crate::layout::{Geometry, BLOCK, INODE, META_INO};
use crate::pm::Pm;
use pmkit_media::Media;

/// What the caller decides about one record's target: `Ok(kind)` indexes it under that kind,
/// `Err(why)` removes the record.
pub(super) type Vet<'a> = dyn FnMut(&Rec, usize, &mut Vec<Problem>) -> Result<u8, String> + 'a;

impl<M: Media> Visitor<'_, M> {
    /// Directory `d`'s index from its data blocks (from [`Visitor::inode`], in file order).
    pub(super) fn directory(
        &self,
        d: u64,
        node: &Inode,
        data: &[Data],
        out: &mut Vec<Problem>,
        vet: &mut Vet<'_>,
    ) -> DirIndex {
        let first_problem = out.len();
        let blocks = (node.size / BLOCK as u64) as usize;
        let contiguous = data
            .iter()
            .enumerate()
            .take_while(|&(k, x)| x.file_block == k as u64)
            .count();
        if !node.size.is_multiple_of(BLOCK as u64) || data.len() != blocks {
            // Blocks past the first hole cannot be kept: their pointers are cut.
            let size = (contiguous * BLOCK) as u64;
            let at = self.it.off(d);
            // (the tail word is the directory's tally, format 7: the records' fixes set it)
            let mut writes = vec![(at + field::SIZE, size.to_le_bytes().to_vec())];
            let root = at + field::ROOT;
            let cuts = data[contiguous..].iter();
            writes.extend(cuts.flat_map(|x| super::tree::cut_store(self.geo, x.at, root)));
            out.push(Problem::stores(
                format!(
                    "directory {d}: size {} does not match {} blocks",
                    node.size,
                    data.len()
                ),
                format!("size set to {size}, blocks after the first hole cut"),
                Some(d),
                None,
                writes,
            ));
        }
        let kept = &data[..contiguous.min(blocks)];
        let mut idx = DirIndex {
            used: vec![0; kept.len()],
            ..Default::default()
        };
        let mut buf = vec![0u8; BLOCK];
        // Format 7: the checksums of the records found, and of those the index keeps (after the
        // fixes below), for the directory's tally.
        let (mut found, mut stay) = (Vec::new(), Vec::new());
        for x in kept {
            let (fb, b) = (x.file_block, x.block);
            self.pm.read(b as usize * BLOCK, &mut buf);
            let (recs, bad) = dir::scan(&buf);
            for (s, why) in bad {
                let at = b as usize * BLOCK + s * SLOT;
                out.push(Problem::stores(
                    format!("directory {d} block {fb} slot {s}: {why}"),
                    "record cleared".into(),
                    Some(d),
                    Some(b),
                    vec![(at + dir::H_INO, vec![0; 8])],
                ));
            }
            for r in recs {
                found.push(r.sum);
                let at = b as usize * BLOCK + r.slot * SLOT;
                let why = if idx.entries.contains_key(&r.name) {
                    Err("appears twice".to_string())
                } else if self.geo.sums() && !dir::sum_ok(&r) {
                    // Format 3 records carry a checksum: one that does not match names what was
                    // not written (its inode, if in use, is then relinked in lost+found).
                    Err(format!("(inode {}) does not match its checksum", r.ino))
                } else {
                    vet(&r, at, out)
                };
                match why {
                    Ok(kind) => {
                        stay.push(dir::record_sum(&r.name, r.ino, kind));
                        let loc = Loc {
                            ino: r.ino,
                            kind,
                            block: fb,
                            slot: r.slot,
                            nslots: r.nslots,
                        };
                        idx.insert(&r.name, loc);
                    }
                    Err(why) => {
                        let name = String::from_utf8_lossy(&r.name);
                        let mut p = Problem::stores(
                            format!("directory {d}: entry {name:?} {why}"),
                            "record removed".into(),
                            Some(d),
                            Some(b),
                            vec![(at + dir::H_INO, vec![0; 8])],
                        );
                        if r.ino == META_INO || !self.it.has(r.ino) {
                            p.sign = Some(Sign::InodeOutOfRange(r.ino));
                        }
                        out.push(p);
                    }
                }
            }
        }
        if self.geo.checked_dirs() {
            self.tally(d, node, (&found, &stay), &mut out[first_problem..]);
            if let Some(p) = self.tally_lost(d, node, (&found, &stay)) {
                out.push(p);
            }
        }
        idx
    }

    /// Format 7: when the fixes above remove or change records, the directory's tally follows
    /// them, in the last of those fixes.
    fn tally(&self, d: u64, node: &Inode, (found, stay): (&[u32], &[u32]), fixes: &mut [Problem]) {
        let (was, will) = (
            dir::tally_of(d, found.iter().copied()),
            dir::tally_of(d, stay.iter().copied()),
        );
        if was != node.tail || will == was {
            return;
        }
        let store = (self.it.off(d) + field::TAIL, will.to_le_bytes().to_vec());
        let last = fixes.iter_mut().rev().find_map(|p| match &mut p.remedy {
            super::Remedy::Stores(w) => Some(w),
            _ => None,
        });
        last.expect("a fix changed the records").push(store);
    }

    /// Format 7: records found that do not make the tally the directory's inode keeps: some
    /// were lost (a zeroed or overwritten block) or are not its own (another directory's
    /// block). The fix sets the tally to the records kept; inodes whose names were lost are
    /// then found again as lost inodes (lost+found).
    fn tally_lost(&self, d: u64, node: &Inode, (found, stay): (&[u32], &[u32])) -> Option<Problem> {
        let was = dir::tally_of(d, found.iter().copied());
        if was == node.tail {
            return None;
        }
        let will = dir::tally_of(d, stay.iter().copied());
        Some(Problem::stores(
            format!(
                "directory {d}: its records ({} found) do not match the count ({}) and digest its \
                 inode keeps: names were lost, or the records are another directory's",
                found.len(),
                node.tail >> 32
            ),
            "count and digest set to the records kept (inodes left without a name go to \
             lost+found)"
                .into(),
            Some(d),
            None,
            vec![(self.it.off(d) + field::TAIL, will.to_le_bytes().to_vec())],
        ))
    }
}

/// The target check every walk makes of a record: in range, in use, of the record's kind (a
/// kind that differs is set to the inode's). `Ok(child)` when the record stands.
pub(super) fn target(
    it: &Itable,
    r: &Rec,
    at: usize,
    child: Option<Inode>,
    d: u64,
    out: &mut Vec<Problem>,
) -> Result<Inode, String> {
    let child = match child {
        Some(c) if r.ino != META_INO && it.has(r.ino) => c,
        _ => return Err(format!("names inode {} out of range", r.ino)),
    };
    if child.is(Kind::Free) || child.kind().is_none() {
        return Err(format!("names free inode {} (kind {})", r.ino, child.kind));
    }
    if child.kind != r.kind {
        let name = String::from_utf8_lossy(&r.name);
        out.push(Problem::stores(
            format!(
                "directory {d}: entry {name:?} kind {} but inode {} has kind {}",
                r.kind, r.ino, child.kind
            ),
            "record kind set".into(),
            Some(d),
            Some(at as u64 / BLOCK as u64),
            vec![
                (at + dir::H_KIND, vec![child.kind]),
                (
                    at + dir::H_SUM,
                    dir::record_sum(&r.name, r.ino, child.kind)
                        .to_le_bytes()
                        .to_vec(),
                ),
            ],
        ));
    }
    Ok(child)
}

/// One directory's index, read when first used after a mount that loaded the clean-unmount
/// checkpoint instead of walking; `data` are its data blocks, from `verify_inode`. Checks what
/// the index itself needs (its blocks read, names are unique, entries name inodes in range,
/// in use and of the record's kind); the full cross-checks are the walk's, run by every mount
/// after a crash and by `check`.
pub(crate) fn dir_index<M: Media>(
    pm: &Pm<M>,
    geo: &Geometry,
    it: &Itable,
    d: u64,
    node: &Inode,
    data: &[(u64, u64)],
) -> Result<DirIndex, String> {
    if !node.is(Kind::Dir) {
        return Err(format!("directory {d}: inode has kind {}", node.kind));
    }
    let data: Vec<Data> = data
        .iter()
        .map(|&(file_block, block)| Data {
            file_block,
            block,
            at: 0,
        })
        .collect();
    let mut out = Vec::new();
    let mut vet = |r: &Rec, at: usize, out: &mut Vec<Problem>| {
        let child = it.has(r.ino).then(|| {
            let mut c = [0u8; INODE];
            pm.read(it.off(r.ino), &mut c);
            Inode::decode(&c)
        });
        target(it, r, at, child, d, out).map(|c| c.kind)
    };
    let idx = Visitor { pm, geo, it }.directory(d, node, &data, &mut out, &mut vet);
    match out.is_empty() {
        true => Ok(idx),
        false => Err(out
            .into_iter()
            .map(|p| p.what)
            .collect::<Vec<_>>()
            .join("; ")),
    }
}
