//! The mount walk: from the root over directories, inodes, trees and xattr blocks, rebuilding the
//! DRAM state (allocators, directory indexes, orphans) and naming every inconsistency. Mount and
//! `check` both run it; mount refuses media with problems.

use crate::alloc::{Alloc, Bitmap};
use crate::dir::{self, DirIndex, Loc, Rec};
use crate::inode::{Inode, Kind, FLAGS_KNOWN};
use crate::layout::{Geometry, BLOCK, INODE, MAX_FILE_SIZE, META_INO, ROOT_INO, SYMLINK_MAX};
use crate::pm::Pm;
use crate::{tail, tree};
use pmkit_media::Media;
use std::collections::{HashMap, HashSet, VecDeque};

pub(crate) struct Walked {
    pub alloc: Alloc,
    pub dirs: HashMap<u64, DirIndex>,
    pub orphans: Vec<u64>,
    /// Files whose last one-fence append did not reach the media whole.
    pub cut: Vec<CutAppend>,
    pub problems: Vec<String>,
    pub files: u64,
    pub dirs_count: u64,
}

/// A file whose last append a crash cut: its size goes back from `from` to `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CutAppend {
    pub ino: u64,
    pub from: u64,
    pub to: u64,
}

impl CutAppend {
    pub(crate) fn describe(&self) -> String {
        format!(
            "inode {}: its last append ({} bytes) did not reach the media whole; the size goes back from {} to {}",
            self.ino,
            self.from - self.to,
            self.from,
            self.to
        )
    }
}

pub(crate) fn walk<M: Media>(pm: &Pm<M>, geo: &Geometry) -> Walked {
    let mut problems = Vec::new();
    let Alloc {
        mut blocks,
        mut inodes,
        ..
    } = Alloc::base(geo);
    let n = geo.inodes as usize;
    let mut table = vec![0u8; n * INODE];
    pm.read(geo.inode_off(0), &mut table);
    let ino_at = |i: u64| {
        Inode::decode(
            table[i as usize * INODE..][..INODE]
                .try_into()
                .expect("128"),
        )
    };
    let mut refs = vec![0u32; n];
    let mut dirs: HashMap<u64, DirIndex> = HashMap::new();
    let mut visited: HashSet<u64> = HashSet::new();
    let mut queue = VecDeque::new();
    let root = ino_at(ROOT_INO);
    if !root.is(Kind::Dir) {
        problems.push(format!(
            "root inode {ROOT_INO} is not a directory (kind {})",
            root.kind
        ));
    } else {
        queue.push_back(ROOT_INO);
    }
    let (mut files, mut ndirs) = (0u64, 0u64);
    // Inodes with a truncate in progress (on the orphan list with links): they may still hold
    // blocks beyond their size until mount finishes the pruning. The list is validated below.
    let mut pruning = HashSet::new();
    let mut o = ino_at(META_INO).orphan_next;
    for _ in 0..n {
        if o == 0 || o >= geo.inodes as u64 {
            break;
        }
        if ino_at(o).links > 0 {
            pruning.insert(o);
        }
        o = ino_at(o).orphan_next;
    }
    // Visit one inode's blocks; for a directory, also return its records by file block.
    let visit = |ino: u64, node: &Inode, problems: &mut Vec<String>, blocks: &mut Bitmap| {
        let mut claim = |b: u64| match blocks.set(b) {
            true => Ok(()),
            false => Err(format!(
                "block {b} is owned twice (a loop or a shared block)"
            )),
        };
        let pruning = pruning.contains(&ino);
        visit_inode(pm, geo, ino, node, pruning, &mut claim, problems)
    };
    while let Some(d) = queue.pop_front() {
        visited.insert(d);
        inodes.set(d);
        ndirs += 1;
        let node = ino_at(d);
        let data = visit(d, &node, &mut problems, &mut blocks);
        let mut vet = |r: &Rec, problems: &mut Vec<String>| {
            let name = String::from_utf8_lossy(&r.name).into_owned();
            if r.ino == META_INO || r.ino >= geo.inodes as u64 {
                problems.push(format!(
                    "directory {d}: entry {name:?} names inode {} out of range",
                    r.ino
                ));
                return false;
            }
            let child = ino_at(r.ino);
            if child.is(Kind::Free) {
                problems.push(format!(
                    "directory {d}: entry {name:?} names free inode {}",
                    r.ino
                ));
                return false;
            }
            if child.kind != r.kind || child.kind().is_none() {
                problems.push(format!(
                    "directory {d}: entry {name:?} kind {} but inode {} has kind {}",
                    r.kind, r.ino, child.kind
                ));
                return false;
            }
            refs[r.ino as usize] += 1;
            if child.is(Kind::Dir) {
                if visited.contains(&r.ino) || queue.contains(&r.ino) || r.ino == ROOT_INO {
                    problems.push(format!(
                        "directory {}: reachable twice (from {d} as {name:?})",
                        r.ino
                    ));
                    return false;
                }
                if child.parent != d {
                    problems.push(format!(
                        "directory {}: parent says {}, found in {d}",
                        r.ino, child.parent
                    ));
                }
                queue.push_back(r.ino);
            } else if visited.insert(r.ino) {
                inodes.set(r.ino);
                files += 1;
                visit(r.ino, &child, problems, &mut blocks);
            }
            true
        };
        let idx = index_blocks(pm, d, node.size, &data, &mut problems, &mut vet);
        dirs.insert(d, idx);
    }
    // The orphan list, headed by the meta inode (which holds nothing else).
    let meta = ino_at(META_INO);
    if meta
        != (Inode {
            orphan_next: meta.orphan_next,
            ..Inode::default()
        })
    {
        problems.push("meta inode 0: fields other than the orphan list head are set".into());
    }
    let mut orphans = Vec::new();
    let mut o = meta.orphan_next;
    while o != 0 {
        if o >= geo.inodes as u64 || orphans.contains(&o) || orphans.len() >= n {
            problems.push(format!("orphan list: bad or looping link to inode {o}"));
            break;
        }
        let node = ino_at(o);
        if node.is(Kind::Dir) || node.is(Kind::Free) || node.kind().is_none() {
            problems.push(format!(
                "orphan list: inode {o} is not a file (kind {})",
                node.kind
            ));
            break;
        }
        if node.links > 0 && (!node.is(Kind::File) || node.trunc != node.size) {
            problems.push(format!(
                "orphan {o}: a truncate to {} but size {}",
                node.trunc, node.size
            ));
        }
        orphans.push(o);
        if node.links == 0 && visited.contains(&o) {
            problems.push(format!("orphan {o}: has no links but a directory names it"));
        }
        if visited.insert(o) {
            inodes.set(o);
            visit(o, &node, &mut problems, &mut blocks);
        }
        o = node.orphan_next;
    }
    for i in 1..geo.inodes as u64 {
        let node = ino_at(i);
        if node.kind().is_none() {
            problems.push(format!("inode {i}: unknown kind {}", node.kind));
        } else if !node.is(Kind::Free) && !visited.contains(&i) {
            problems.push(format!("inode {i}: in use but nothing names it"));
        } else if visited.contains(&i) {
            let want = match dirs.get(&i) {
                Some(d) => 2 + d.subdirs,
                None => refs[i as usize],
            };
            if node.links != want {
                problems.push(format!(
                    "inode {i}: link count {} but {want} names",
                    node.links
                ));
            }
        }
    }
    // Appends a crash cut (`tail.rs`): looked for only in a sound tree, which the reads need.
    let mut cut = Vec::new();
    if problems.is_empty() {
        for i in 1..geo.inodes as u64 {
            let node = ino_at(i);
            if node.is(Kind::File) && node.tail != 0 {
                if let Some(size) =
                    tail::cut_append(pm, node.root, node.height, node.size, node.tail)
                {
                    cut.push(CutAppend {
                        ino: i,
                        from: node.size,
                        to: size,
                    });
                }
            }
        }
    }
    let alloc = Alloc::new(blocks, inodes);
    Walked {
        alloc,
        dirs,
        orphans,
        cut,
        problems,
        files,
        dirs_count: ndirs,
    }
}

/// Check one inode's fields and walk its tree, claiming every block it owns (`claim`: Err when
/// the block may not be this inode's); returns its data blocks as (file block, block).
/// `pruning`: a truncate is in progress, so blocks beyond the size are allowed.
fn visit_inode<M: Media>(
    pm: &Pm<M>,
    geo: &Geometry,
    ino: u64,
    node: &Inode,
    pruning: bool,
    claim: &mut dyn FnMut(u64) -> Result<(), String>,
    problems: &mut Vec<String>,
) -> Vec<(u64, u64)> {
    let mut data: Vec<(u64, u64)> = Vec::new();
    let mut mark = |b: u64, is_node: bool, idx: u64| {
        claim(b)?;
        if !is_node {
            data.push((idx, b));
        }
        Ok(())
    };
    if let Err(e) = tree::walk(pm, geo, node.root, node.height, &mut mark) {
        problems.push(format!("inode {ino}: {e}"));
    }
    if node.is(Kind::Symlink)
        && (node.size == 0 || node.size > SYMLINK_MAX as u64 || node.height != 0)
    {
        problems.push(format!(
            "inode {ino}: symlink of {} bytes at height {}",
            node.size, node.height
        ));
    }
    let special = node.kind().is_some_and(Kind::is_special);
    if special && (node.size != 0 || node.root != 0 || node.height != 0) {
        problems.push(format!(
            "inode {ino}: special file (kind {}) with size {} or data",
            node.kind, node.size
        ));
    }
    if node.flags & !FLAGS_KNOWN != 0 || (node.flags != 0 && !node.is(Kind::File)) {
        problems.push(format!(
            "inode {ino}: flags {:#x} on kind {}",
            node.flags, node.kind
        ));
    }
    if !special && node.rdev != 0 {
        problems.push(format!("inode {ino}: device number on a non-device"));
    }
    if node.size > MAX_FILE_SIZE {
        problems.push(format!("inode {ino}: size {} over the limit", node.size));
    }
    let end = node.size.div_ceil(BLOCK as u64);
    // A regular file may own blocks beyond its size (preallocation, an append cut by a
    // crash); nothing else may, but a file with a truncate in progress.
    let prealloc = node.is(Kind::File);
    if !prealloc && !pruning && data.iter().any(|&(i, _)| i >= end) {
        problems.push(format!("inode {ino}: blocks beyond its size {}", node.size));
    }
    if node.xattr != 0 && (!geo.is_data(node.xattr) || claim(node.xattr).is_err()) {
        problems.push(format!("inode {ino}: bad xattr block {}", node.xattr));
    }
    data
}

/// The walk's checks of one inode, for a mount that loaded the clean-unmount checkpoint: run
/// on the inode's first use, so no pointer of a tree the walk has not seen reaches the data
/// path. Every block must be in the data area, owned once within this inode, and used in the
/// checkpoint's bitmap (`used`): a free block would be handed out again. What only the whole
/// walk sees (a block shared by two inodes, link counts, unreachable inodes) is left to
/// `check` and to the full walk of every mount after a crash. Returns the data blocks.
pub(crate) fn verify_inode<M: Media>(
    pm: &Pm<M>,
    geo: &Geometry,
    ino: u64,
    node: &Inode,
    used: &dyn Fn(&[u64]) -> Option<u64>,
) -> Result<Vec<(u64, u64)>, String> {
    let mut mine = HashSet::new();
    let mut claim = |b: u64| match mine.insert(b) {
        true => Ok(()),
        false => Err(format!("block {b} is owned twice (a loop)")),
    };
    let mut problems = Vec::new();
    let data = visit_inode(pm, geo, ino, node, false, &mut claim, &mut problems);
    let owned: Vec<u64> = mine.into_iter().collect();
    if let Some(b) = used(&owned) {
        problems.push(format!(
            "inode {ino}: owns block {b}, which the allocator has free"
        ));
    }
    match problems.is_empty() {
        true => Ok(data),
        false => Err(problems.join("; ")),
    }
}

/// A directory's index from its data blocks (`(file block, block)`, as the tree walk gives
/// them) and its size. `vet` checks each record's target (false: it pushed a problem and the
/// record is left out); names that appear twice and blocks that do not parse are problems here.
fn index_blocks<M: Media>(
    pm: &Pm<M>,
    d: u64,
    size: u64,
    data: &[(u64, u64)],
    problems: &mut Vec<String>,
    vet: &mut dyn FnMut(&Rec, &mut Vec<String>) -> bool,
) -> DirIndex {
    if !size.is_multiple_of(BLOCK as u64) || data.len() as u64 != size / BLOCK as u64 {
        problems.push(format!(
            "directory {d}: size {size} does not match {} blocks",
            data.len()
        ));
    }
    let nblocks = (size / BLOCK as u64).min(data.len() as u64) as usize;
    let mut idx = DirIndex {
        used: vec![0; nblocks],
        ..Default::default()
    };
    let mut buf = vec![0u8; BLOCK];
    for &(fb, b) in data {
        if fb as usize >= idx.used.len() {
            continue;
        }
        pm.read(b as usize * BLOCK, &mut buf);
        let recs = match dir::parse(&buf) {
            Ok(r) => r,
            Err(e) => {
                problems.push(format!("directory {d} block {fb}: {e}"));
                continue;
            }
        };
        for r in recs {
            if idx.entries.contains_key(&r.name) {
                let name = String::from_utf8_lossy(&r.name);
                problems.push(format!("directory {d}: name {name:?} appears twice"));
                continue;
            }
            if !vet(&r, problems) {
                continue;
            }
            let loc = Loc {
                ino: r.ino,
                kind: r.kind,
                block: fb,
                slot: r.slot,
                nslots: r.nslots,
            };
            idx.insert(&r.name, loc);
        }
    }
    idx
}

/// One directory's index, read when first used after a mount that loaded the clean-unmount
/// checkpoint instead of walking; `data` are its data blocks, from [`verify_inode`]. Checks what
/// the index itself needs (its blocks parse, names are unique, entries name inodes in range
/// whose kind matches); the full cross-checks are the walk's, run by every mount after a crash
/// and by `check`.
pub(crate) fn dir_index<M: Media>(
    pm: &Pm<M>,
    geo: &Geometry,
    d: u64,
    node: &Inode,
    data: &[(u64, u64)],
) -> Result<DirIndex, String> {
    if !node.is(Kind::Dir) {
        return Err(format!("directory {d}: inode has kind {}", node.kind));
    }
    let mut problems = Vec::new();
    let mut vet = |r: &Rec, problems: &mut Vec<String>| {
        let mut c = [0u8; INODE];
        let ok = r.ino != META_INO && r.ino < geo.inodes as u64 && {
            pm.read(geo.inode_off(r.ino), &mut c);
            let child = Inode::decode(&c);
            !child.is(Kind::Free) && child.kind == r.kind
        };
        if !ok {
            problems.push(format!(
                "directory {d}: entry {:?} names inode {}, which is out of range, free or of \
                 another kind",
                String::from_utf8_lossy(&r.name),
                r.ino
            ));
        }
        ok
    };
    let idx = index_blocks(pm, d, node.size, data, &mut problems, &mut vet);
    match problems.is_empty() {
        true => Ok(idx),
        false => Err(problems.join("; ")),
    }
}
