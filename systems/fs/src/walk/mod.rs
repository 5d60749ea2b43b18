//! The one walk of PMFS's tree: from the root over directories, inodes, trees, xattr blocks and
//! the orphan list. It rebuilds the DRAM state (allocators, directory indexes, orphans) and
//! yields every inconsistency as a [`Problem`] with its fix. Mount refuses media with problems,
//! `check` reports them, and `repair` applies their fixes, round by round.

mod dirs;
mod inode;
mod orphans;
mod table;
mod tree;

pub(crate) use dirs::dir_index;
pub(crate) use inode::verify_inode;

use crate::alloc::{Alloc, Bitmap};
use crate::dir::DirIndex;
use crate::inode::{self as field, Inode, Kind};
use crate::itable::{Itable, PER_BLOCK};
use crate::layout::{Geometry, BLOCK, INODE, MAX_HEIGHT, META_INO, ROOT_INO};
use crate::pm::Pm;
use crate::tail;
use inode::Visitor;
use pmkit_media::Media;
use std::collections::{HashMap, HashSet, VecDeque};

/// One inconsistency: what is wrong, and what repair does about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    /// What is wrong, as mount and `check` name it.
    pub what: String,
    /// What repair does, as its report says after `what`.
    pub fix: String,
    pub ino: Option<u64>,
    pub block: Option<u64>,
    pub remedy: Remedy,
    /// A sign a wrong geometry leaves (repair's geometry search reads it).
    pub sign: Option<Sign>,
}

/// How repair fixes a problem. Repair applies the first tier that has any, then walks again:
/// the later tiers are right only once the earlier are done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Remedy {
    /// Tier 1: stores `(offset, bytes)`, applied in one transaction (a pointer cut, a record
    /// removed, a field set).
    Stores(Vec<(usize, Vec<u8>)>),
    /// Tier 2: an inode in use that nothing names, linked into lost+found.
    Relink,
    /// Tier 3: a link count set to the names the walk counted.
    Links(u32),
}

impl Remedy {
    pub(crate) fn tier(&self) -> u8 {
        match self {
            Remedy::Stores(_) => 1,
            Remedy::Relink => 2,
            Remedy::Links(_) => 3,
        }
    }
}

/// Problems a geometry that is not the media's causes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sign {
    /// A tree pointer to this block, outside the data area.
    BlockOutside(u64),
    /// A directory record naming this inode, past the table.
    InodeOutOfRange(u64),
}

impl Problem {
    fn stores(
        what: String,
        fix: String,
        ino: Option<u64>,
        block: Option<u64>,
        writes: Vec<(usize, Vec<u8>)>,
    ) -> Problem {
        assert!(!writes.is_empty(), "a fix stores something: {what}");
        Problem {
            what,
            fix,
            ino,
            block,
            remedy: Remedy::Stores(writes),
            sign: None,
        }
    }
    /// The problem and its fix, as repair reports it.
    pub(crate) fn fixed(&self) -> String {
        format!("{}: {}", self.what, self.fix)
    }
}

pub(crate) struct Walked {
    pub alloc: Alloc,
    /// Where the inodes are, the grown table's blocks as the walk took them.
    pub itable: Itable,
    pub dirs: HashMap<u64, DirIndex>,
    pub orphans: Vec<u64>,
    /// Files whose last one-fence append did not reach the media whole.
    pub cut: Vec<CutAppend>,
    pub problems: Vec<Problem>,
    pub files: u64,
    pub dirs_count: u64,
    /// `lost+found` in the root, if it is there and a directory.
    pub lost_found: Option<u64>,
}

impl Walked {
    /// What is wrong, as mount and `check` name it.
    pub(crate) fn described(&self) -> Vec<String> {
        self.problems.iter().map(|p| p.what.clone()).collect()
    }
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
    let Alloc {
        mut blocks,
        mut inodes,
        ..
    } = Alloc::base(geo);
    let mut problems = Vec::new();
    let (meta, grown) = table::grown(pm, geo, &mut blocks, &mut problems);
    inodes.grow(grown.len() as u64 * PER_BLOCK);
    let mut w = Walked {
        alloc: Alloc::new(Bitmap::new(0), Bitmap::new(0)),
        itable: Itable::new(geo, &grown, true),
        dirs: HashMap::new(),
        orphans: Vec::new(),
        cut: Vec::new(),
        problems: Vec::new(),
        files: 0,
        dirs_count: 0,
        lost_found: None,
    };
    let it = &w.itable;
    let mut nodes = table(pm, geo, it);
    nodes[META_INO as usize] = meta;
    let nodes = sealed(geo, it, nodes, &mut problems);
    let v = Visitor { pm, geo, it };
    let root = nodes[ROOT_INO as usize];
    if !root.is(Kind::Dir) {
        // Without a root nothing is reachable: repair makes it an empty directory and walks
        // again (everything else then goes to lost+found).
        w.problems = problems;
        w.problems.push(root_fix(geo, &root));
        w.alloc = Alloc::new(blocks, inodes);
        return w;
    }
    // From here every block is claimed through `claims`, which lets regular files share data
    // blocks in format 8 and counts the pointers each shared block has.
    let mut blocks = tree::Claims {
        own: blocks,
        leaves: Bitmap::new(geo.blocks),
        extra: HashMap::new(),
    };
    let pruning = orphans::pruning(&nodes);
    let mut refs = vec![0u32; nodes.len()];
    let mut visited: HashSet<u64> = HashSet::from([ROOT_INO]);
    let mut queue = VecDeque::from([ROOT_INO]);
    while let Some(d) = queue.pop_front() {
        inodes.set(d);
        w.dirs_count += 1;
        let node = nodes[d as usize];
        let data = v.inode(d, &node, pruning.contains(&d), &mut blocks, &mut problems);
        // A directory is marked visited when queued, so a second record naming it is seen
        // at once (and the root is visited from the start).
        let mut vet = |r: &crate::dir::Rec, at: usize, out: &mut Vec<Problem>| {
            let child = nodes.get(r.ino as usize).copied();
            let child = dirs::target(it, r, at, child, d, out)?;
            if child.is(Kind::Dir) {
                if !visited.insert(r.ino) {
                    return Err(format!("names directory {}, reachable twice", r.ino));
                }
                if child.parent != d {
                    out.push(parent_fix(it, r.ino, child.parent, d));
                }
                if d == ROOT_INO && r.name == b"lost+found" {
                    w.lost_found = Some(r.ino);
                }
                queue.push_back(r.ino);
            } else if visited.insert(r.ino) {
                inodes.set(r.ino);
                w.files += 1;
                v.inode(r.ino, &child, pruning.contains(&r.ino), &mut blocks, out);
            }
            refs[r.ino as usize] += 1;
            Ok(child.kind)
        };
        let idx = v.directory(d, &node, &data, &mut problems, &mut vet);
        w.dirs.insert(d, idx);
    }
    let o = v.orphans(&nodes, &visited, &pruning, &mut blocks, &mut problems);
    for &i in &o.visited {
        visited.insert(i);
        inodes.set(i);
    }
    w.orphans = o.list;
    let lost = sweep(it, &nodes, &visited, &w.dirs, &refs, &mut problems);
    // A lost inode's blocks are its own, not free: a repair that links it must not hand them
    // out (its tree is checked once it is reachable again).
    for &i in &lost {
        let node = nodes[i as usize];
        if node.height <= MAX_HEIGHT {
            v.reserve(node.root, node.height, &mut blocks);
        }
        if geo.is_data(node.xattr) {
            blocks.own.set(node.xattr);
        }
    }
    // Appends a crash cut (`tail.rs`): looked for only in a sound tree, which the reads need.
    if problems.is_empty() {
        w.cut = cut_appends(pm, &nodes);
    }
    assert_eq!(w.dirs.len() as u64, w.dirs_count, "one index per directory");
    w.problems = problems;
    w.alloc = Alloc::new(blocks.own, inodes);
    w.alloc.shares = crate::shares::Shares::from_extra(blocks.extra);
    w
}

/// The inode table as the walk would take it (its inodes counted unchecked), for a mount that
/// loads the clean-unmount checkpoint instead of walking; `Err`: what the walk would name.
pub(crate) fn grown_table<M: Media>(pm: &Pm<M>, geo: &Geometry) -> Result<Itable, Vec<String>> {
    let mut scratch = Bitmap::new(geo.blocks);
    let mut out = Vec::new();
    let (_, grown) = table::grown(pm, geo, &mut scratch, &mut out);
    match out.is_empty() {
        true => Ok(Itable::new(geo, &grown, false)),
        false => Err(out.into_iter().map(|p| p.what).collect()),
    }
}

/// The inode table, decoded: the fixed table, then each grown block.
fn table<M: Media>(pm: &Pm<M>, geo: &Geometry, it: &Itable) -> Vec<Inode> {
    let mut table = vec![0u8; geo.inodes as usize * INODE];
    pm.read(geo.inode_off(0), &mut table);
    let mut block = vec![0u8; BLOCK];
    for b in it.blocks() {
        pm.read(b as usize * BLOCK, &mut block);
        table.extend_from_slice(&block);
    }
    assert_eq!(table.len() as u64, it.count() * INODE as u64);
    table
        .chunks_exact(INODE)
        .map(|c| Inode::decode(c.try_into().expect("one inode")))
        .collect()
}

/// The table with every inode whose fields do not match their checksum (format 4) taken as
/// free for this walk, and a problem for each that frees it: which field is wrong cannot be
/// known, and a wrong mode, owner or pointer served is worse than a file lost (the records
/// naming it go with it; its blocks become free).
/// The meta inode is checked before (`table::grown`).
fn sealed(
    geo: &Geometry,
    it: &Itable,
    mut nodes: Vec<Inode>,
    out: &mut Vec<Problem>,
) -> Vec<Inode> {
    if !geo.inode_sums() {
        return nodes;
    }
    for (ino, n) in nodes.iter_mut().enumerate().skip(1) {
        let ino = ino as u64;
        if let Some(p) = inode::unsealed(geo, it, ino, n) {
            out.push(p);
            *n = Inode::default();
        }
    }
    nodes
}

/// A root that is not a directory: made an empty one (its orphan list kept).
fn root_fix(geo: &Geometry, root: &Inode) -> Problem {
    let fresh = Inode {
        orphan_next: root.orphan_next,
        ..Inode::empty_dir(0o755, ROOT_INO, crate::clock::now())
    };
    Problem::stores(
        format!(
            "root inode {ROOT_INO} is not a directory (kind {})",
            root.kind
        ),
        "made an empty directory".into(),
        Some(ROOT_INO),
        None,
        vec![(geo.inode_off(ROOT_INO), fresh.encode().to_vec())],
    )
}

/// Directory `ino`, found in `d`, whose `..` says `says`.
fn parent_fix(it: &Itable, ino: u64, says: u64, d: u64) -> Problem {
    Problem::stores(
        format!("directory {ino}: parent says {says}, found in {d}"),
        "parent set".into(),
        Some(ino),
        None,
        vec![(it.off(ino) + field::PARENT, d.to_le_bytes().to_vec())],
    )
}

/// Every inode slot: unknown kinds, inodes in use that nothing names (returned: lost), and
/// link counts against the names the walk counted (`refs`; a directory's are its subdirectories
/// and two).
fn sweep(
    it: &Itable,
    nodes: &[Inode],
    visited: &HashSet<u64>,
    dirs: &HashMap<u64, DirIndex>,
    refs: &[u32],
    problems: &mut Vec<Problem>,
) -> Vec<u64> {
    let mut lost = Vec::new();
    for i in 1..nodes.len() as u64 {
        let node = nodes[i as usize];
        let at = it.off(i);
        if node.kind().is_none() {
            problems.push(Problem::stores(
                format!("inode {i}: unknown kind {}", node.kind),
                "freed".into(),
                Some(i),
                None,
                vec![(at, vec![0u8; INODE])],
            ));
        } else if !node.is(Kind::Free) && !visited.contains(&i) {
            lost.push(i);
            problems.push(Problem {
                what: format!("inode {i}: in use but nothing names it"),
                fix: "linked into lost+found".into(),
                ino: Some(i),
                block: None,
                remedy: Remedy::Relink,
                sign: None,
            });
        } else if visited.contains(&i) {
            let want = match dirs.get(&i) {
                Some(d) => 2 + d.subdirs,
                None => refs[i as usize],
            };
            if node.links != want {
                problems.push(Problem {
                    what: format!("inode {i}: link count {} but {want} names", node.links),
                    fix: format!("set to {want}"),
                    ino: Some(i),
                    block: None,
                    remedy: Remedy::Links(want),
                    sign: None,
                });
            }
        }
    }
    lost
}

/// Files whose last one-fence append a crash cut (`tail.rs`).
fn cut_appends<M: Media>(pm: &Pm<M>, nodes: &[Inode]) -> Vec<CutAppend> {
    let mut cut = Vec::new();
    for (i, node) in nodes.iter().enumerate().skip(1) {
        if node.is(Kind::File) && node.tail != 0 {
            if let Some(size) = tail::cut_append(pm, node.root, node.height, node.size, node.tail) {
                cut.push(CutAppend {
                    ino: i as u64,
                    from: node.size,
                    to: size,
                });
            }
        }
    }
    cut
}
