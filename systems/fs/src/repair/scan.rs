//! The repair scan: the mount walk's order and rules (`walk.rs`), but instead of naming each
//! problem it proposes the fix for it, as the word stores that make it. Read-only: the caller
//! applies the fixes (each in its own transaction) and scans again, until a scan finds nothing.
//!
//! Fixes come in three tiers, and a scan proposes only the first tier that has any, because the
//! later ones are only right once the earlier are done: *local* fixes (cut pointers, removed
//! records, fields set right), then *lost* inodes to link into lost+found, then *link counts*.

use super::Fix;
use crate::alloc::Bitmap;
use crate::dir::SLOT;
use crate::inode::{self as field, Inode, Kind};
use crate::layout::{
    tree_cap, Geometry, BLOCK, INODE, MAX_FILE_SIZE, MAX_HEIGHT, META_INO, ROOT_INO, SYMLINK_MAX,
};
use crate::pm::Pm;
use crate::tree::Reader;
use pmkit_media::Media;
use std::collections::{HashMap, HashSet, VecDeque};

/// One proposed fix: what it is, and the stores that make it (applied in one transaction).
pub(super) struct Found {
    pub fix: Fix,
    pub writes: Vec<(usize, Vec<u8>)>,
}

pub(super) struct Scan {
    /// Tier 1: fixes to apply now.
    pub local: Vec<Found>,
    /// Tier 2: lost inodes to link into lost+found now (only when `local` is empty).
    pub lost: Vec<u64>,
    /// Tier 3: (inode, links it has, links it should have) (only when the others are empty).
    pub links: Vec<(u64, u32, u32)>,
    /// Blocks the tree owns (a transaction's allocator starts from it).
    pub blocks: Bitmap,
    /// `lost+found` in the root, if it is there and a directory.
    pub lost_found: Option<u64>,
    /// Names in the root (to pick a free name for lost+found).
    pub root_names: HashSet<Vec<u8>>,
}

fn fix(what: String, ino: Option<u64>, block: Option<u64>, offset: Option<usize>) -> Fix {
    Fix {
        what,
        ino,
        block,
        offset: offset.map(|o| o as u64),
    }
}

struct State<'a, M> {
    pm: &'a Pm<M>,
    geo: &'a Geometry,
    nodes: Vec<Inode>,
    blocks: Bitmap,
    local: Vec<Found>,
    pruning: HashSet<u64>,
}

impl<M: Media> State<'_, M> {
    fn ioff(&self, ino: u64, field: usize) -> usize {
        self.geo.inode_off(ino) + field
    }
    fn push(&mut self, fix: Fix, writes: Vec<(usize, Vec<u8>)>) {
        self.local.push(Found { fix, writes });
    }

    /// The blocks of one inode's tree (and its xattr block), proposing fixes for what the walk
    /// would refuse; returns the data blocks it keeps as (file block, block, byte offset of the
    /// pointer).
    fn visit(&mut self, ino: u64) -> Vec<(u64, u64, usize)> {
        let node = self.nodes[ino as usize];
        let mut data: Vec<(u64, u64, usize)> = Vec::new();
        if node.height > MAX_HEIGHT {
            let w = vec![0u8; 9]; // root (8 bytes) and height (1)
            let what = format!(
                "inode {ino}: tree height {} over {MAX_HEIGHT}: tree cut, the file is a hole",
                node.height
            );
            let off = self.ioff(ino, field::ROOT);
            self.push(fix(what, Some(ino), None, Some(off)), vec![(off, w)]);
        } else {
            let off = self.ioff(ino, field::ROOT);
            self.tree(ino, node.root, node.height, 0, off, &mut data);
        }
        if node.is(Kind::Symlink)
            && (node.size == 0 || node.size > SYMLINK_MAX as u64 || node.height != 0)
        {
            // Its target is gone or unreadable: nothing to keep. Freed (its record goes with it
            // when the directory scan sees the inode free).
            let what = format!(
                "inode {ino}: symlink of {} bytes at height {}: freed",
                node.size, node.height
            );
            let off = self.ioff(ino, 0);
            self.push(
                fix(what, Some(ino), None, Some(off)),
                vec![(off, vec![0u8; INODE])],
            );
            return Vec::new();
        }
        let special = node.kind().is_some_and(Kind::is_special);
        if special && (node.size != 0 || node.root != 0 || node.height != 0) {
            let what = format!(
                "inode {ino}: special file (kind {}) with size {} or data: size and data cleared",
                node.kind, node.size
            );
            let (s, r) = (self.ioff(ino, field::SIZE), self.ioff(ino, field::ROOT));
            let t = self.ioff(ino, field::TAIL);
            self.push(
                fix(what, Some(ino), None, Some(s)),
                vec![(s, vec![0u8; 8]), (r, vec![0u8; 9]), (t, vec![0u8; 8])],
            );
            return Vec::new();
        }
        if !special && node.rdev != 0 {
            let what = format!("inode {ino}: device number on a non-device: cleared");
            let off = self.ioff(ino, field::RDEV);
            self.push(
                fix(what, Some(ino), None, Some(off)),
                vec![(off, vec![0u8; 4])],
            );
        }
        let mut size = node.size;
        if size > MAX_FILE_SIZE {
            let what = format!("inode {ino}: size {size} over the limit: set to {MAX_FILE_SIZE}");
            let off = self.ioff(ino, field::SIZE);
            let t = self.ioff(ino, field::TAIL);
            self.push(
                fix(what, Some(ino), None, Some(off)),
                vec![
                    (off, MAX_FILE_SIZE.to_le_bytes().to_vec()),
                    (t, vec![0u8; 8]),
                ],
            );
            size = MAX_FILE_SIZE;
        }
        let end = size.div_ceil(BLOCK as u64);
        // as the walk: a regular file may own blocks beyond its size (preallocation)
        if !node.is(Kind::File) && !self.pruning.contains(&ino) {
            let mut keep = Vec::new();
            for (i, b, at) in data {
                if i >= end {
                    let what = format!(
                        "inode {ino}: file block {i} (block {b}) beyond its size {size}: pointer cut"
                    );
                    self.push(
                        fix(what, Some(ino), Some(b), Some(at)),
                        vec![(at, vec![0; 8])],
                    );
                } else {
                    keep.push((i, b, at));
                }
            }
            data = keep;
        }
        if node.xattr != 0 && (!self.geo.is_data(node.xattr) || !self.blocks.set(node.xattr)) {
            let what = format!(
                "inode {ino}: bad or shared xattr block {}: dropped (its extended attributes are lost)",
                node.xattr
            );
            let off = self.ioff(ino, field::XATTR);
            self.push(
                fix(what, Some(ino), Some(node.xattr), Some(off)),
                vec![(off, vec![0u8; 8])],
            );
        }
        data
    }

    /// One pointer (stored at byte `at`) to a subtree of `level`: a bad pointer is cut (that
    /// range of the file becomes a hole), a block owned already stays with its first owner.
    fn tree(
        &mut self,
        ino: u64,
        ptr: u64,
        level: u8,
        base: u64,
        at: usize,
        data: &mut Vec<(u64, u64, usize)>,
    ) {
        if ptr == 0 {
            return;
        }
        let span = tree_cap(level);
        // A 2 MiB block (a flagged pointer where a level-1 node would be): the walk's rules.
        if let (1, Some(run)) = (level, crate::tree::huge(ptr)) {
            let n = crate::tree::HUGE_BLOCKS;
            let why = if run % n != 0 || !self.geo.is_data(run) || !self.geo.is_data(run + n - 1) {
                Some("not 2 MiB-aligned or not inside the data area")
            } else if (0..n).any(|i| self.blocks.is_used(run + i)) {
                Some("owned already in part (a shared block)")
            } else {
                None
            };
            match why {
                None => {
                    for i in 0..n {
                        self.blocks.set(run + i);
                        data.push((base + i, run + i, at));
                    }
                }
                Some(why) => {
                    let what = format!(
                        "inode {ino}: 2 MiB block at {run} {why}: cut (file blocks {base}..{} are a hole)",
                        base.saturating_add(span)
                    );
                    self.push(
                        fix(what, Some(ino), Some(run), Some(at)),
                        vec![(at, vec![0u8; 8])],
                    );
                }
            }
            return;
        }
        let why = if !self.geo.is_data(ptr) {
            "outside the data area"
        } else if !self.blocks.set(ptr) {
            "owned already (a loop or a shared block)"
        } else {
            if level == 0 {
                data.push((base, ptr, at));
            } else {
                let child = tree_cap(level - 1);
                for (slot, c) in self.pm.node(ptr).into_iter().enumerate() {
                    let at = ptr as usize * BLOCK + slot * 8;
                    self.tree(ino, c, level - 1, base + slot as u64 * child, at, data);
                }
            }
            return;
        };
        let what = format!(
            "inode {ino}: pointer to block {ptr} {why}: cut (file blocks {base}..{} are a hole)",
            base.saturating_add(span)
        );
        self.push(
            fix(what, Some(ino), Some(ptr), Some(at)),
            vec![(at, vec![0u8; 8])],
        );
    }
}

/// Scan the (recovered) media and propose the next fixes.
pub(super) fn scan<M: Media>(pm: &Pm<M>, geo: &Geometry) -> Scan {
    let n = geo.inodes as usize;
    let mut table = vec![0u8; n * INODE];
    pm.read(geo.inode_off(0), &mut table);
    let nodes: Vec<Inode> = table
        .chunks(INODE)
        .map(|c| Inode::decode(c.try_into().expect("128 bytes")))
        .collect();
    let mut blocks = Bitmap::new(geo.blocks);
    for b in 0..geo.data_block {
        blocks.set(b);
    }
    let mut st = State {
        pm,
        geo,
        nodes,
        blocks,
        local: Vec::new(),
        pruning: HashSet::new(),
    };
    let mut out = Scan {
        local: Vec::new(),
        lost: Vec::new(),
        links: Vec::new(),
        blocks: Bitmap::new(1),
        lost_found: None,
        root_names: HashSet::new(),
    };
    let root = st.nodes[ROOT_INO as usize];
    if !root.is(Kind::Dir) {
        // Without a root nothing is reachable: make it an empty directory; everything else
        // then goes to lost+found.
        let now = crate::attr::now();
        let fresh = Inode {
            kind: Kind::Dir as u8,
            links: 2,
            mode: 0o755,
            parent: ROOT_INO,
            mtime: now,
            ctime: now,
            orphan_next: root.orphan_next,
            ..Default::default()
        };
        let off = geo.inode_off(ROOT_INO);
        let what = format!(
            "root inode {ROOT_INO} was not a directory (kind {}): made an empty directory",
            root.kind
        );
        out.local.push(Found {
            fix: fix(what, Some(ROOT_INO), None, Some(off)),
            writes: vec![(off, fresh.encode().to_vec())],
        });
        out.blocks = st.blocks;
        return out;
    }
    let mut o = st.nodes[META_INO as usize].orphan_next;
    for _ in 0..n {
        if o == 0 || o >= n as u64 {
            break;
        }
        if st.nodes[o as usize].links > 0 {
            st.pruning.insert(o);
        }
        o = st.nodes[o as usize].orphan_next;
    }
    let mut refs = vec![0u32; n];
    let mut subdirs: HashMap<u64, u32> = HashMap::new();
    let mut visited: HashSet<u64> = HashSet::new();
    let mut queue = VecDeque::from([ROOT_INO]);
    while let Some(d) = queue.pop_front() {
        visited.insert(d);
        let node = st.nodes[d as usize];
        let mut data = st.visit(d);
        data.sort();
        let contiguous = data
            .iter()
            .enumerate()
            .take_while(|&(k, &(i, _, _))| i == k as u64)
            .count();
        if !node.size.is_multiple_of(BLOCK as u64) || data.len() as u64 != node.size / BLOCK as u64
        {
            let size = (contiguous * BLOCK) as u64;
            let off = st.ioff(d, field::SIZE);
            let t = st.ioff(d, field::TAIL);
            let mut writes = vec![(off, size.to_le_bytes().to_vec()), (t, vec![0u8; 8])];
            // blocks past the first hole cannot be kept: their pointers are cut
            for &(i, _, a) in &data {
                if i >= contiguous as u64 {
                    writes.push((a, vec![0u8; 8]));
                }
            }
            let what = format!(
                "directory {d}: size {} but {} blocks: size set to {size}, blocks after the first hole cut",
                node.size,
                data.len()
            );
            st.push(fix(what, Some(d), None, Some(off)), writes);
        }
        data.truncate(contiguous.min((node.size / BLOCK as u64) as usize));
        let mut names: HashSet<Vec<u8>> = HashSet::new();
        let mut subs = 0u32;
        for (fb, b, _) in data {
            let mut buf = vec![0u8; BLOCK];
            pm.read(b as usize * BLOCK, &mut buf);
            let (recs, bad) = crate::dir::scan(&buf);
            let bad: Vec<usize> = bad.into_iter().map(|(slot, _)| slot).collect();
            for s in bad {
                let at = b as usize * BLOCK + s * SLOT;
                let what = format!("directory {d} block {fb} slot {s}: unreadable record cleared");
                st.push(
                    fix(what, Some(d), Some(b), Some(at)),
                    vec![(at, vec![0; 8])],
                );
            }
            for r in recs {
                let at = b as usize * BLOCK + r.slot * SLOT;
                let name = String::from_utf8_lossy(&r.name).into_owned();
                let remove = |st: &mut State<'_, M>, why: String| {
                    let what = format!("directory {d}: entry {name:?} {why}: record removed");
                    st.push(
                        fix(what, Some(d), Some(b), Some(at)),
                        vec![(at, vec![0; 8])],
                    );
                };
                if r.ino == META_INO || r.ino >= n as u64 {
                    remove(&mut st, format!("names inode {} out of range", r.ino));
                    continue;
                }
                let child = st.nodes[r.ino as usize];
                if child.is(Kind::Free) || child.kind().is_none() {
                    let why = format!("names free inode {} (kind {})", r.ino, child.kind);
                    remove(&mut st, why);
                    continue;
                }
                if names.contains(&r.name) {
                    remove(&mut st, "appears twice".into());
                    continue;
                }
                if child.kind != r.kind {
                    let what = format!(
                        "directory {d}: entry {name:?} kind {} but inode {} has kind {}: record kind set",
                        r.kind, r.ino, child.kind
                    );
                    st.push(
                        fix(what, Some(d), Some(b), Some(at + 9)),
                        vec![(at + 9, vec![child.kind])],
                    );
                }
                if child.is(Kind::Dir) {
                    if visited.contains(&r.ino) || queue.contains(&r.ino) || r.ino == ROOT_INO {
                        let why = format!("names directory {}, reachable already", r.ino);
                        remove(&mut st, why);
                        continue;
                    }
                    if child.parent != d {
                        let off = st.ioff(r.ino, field::PARENT);
                        let what = format!(
                            "directory {}: parent says {}, found in {d}: parent set",
                            r.ino, child.parent
                        );
                        st.push(
                            fix(what, Some(r.ino), None, Some(off)),
                            vec![(off, d.to_le_bytes().to_vec())],
                        );
                    }
                    subs += 1;
                    queue.push_back(r.ino);
                    if d == ROOT_INO && r.name == b"lost+found" {
                        out.lost_found = Some(r.ino);
                    }
                } else if visited.insert(r.ino) {
                    st.visit(r.ino);
                }
                refs[r.ino as usize] += 1;
                names.insert(r.name);
            }
        }
        if d == ROOT_INO {
            out.root_names = names;
        }
        subdirs.insert(d, subs);
    }
    orphans(&mut st, &mut visited);
    for i in 1..n as u64 {
        let node = st.nodes[i as usize];
        if node.kind().is_none() {
            let off = st.ioff(i, 0);
            let what = format!("inode {i}: unknown kind {}: freed", node.kind);
            st.push(
                fix(what, Some(i), None, Some(off)),
                vec![(off, vec![0u8; INODE])],
            );
        } else if !node.is(Kind::Free) && !visited.contains(&i) {
            out.lost.push(i);
        } else if visited.contains(&i) {
            let want = match subdirs.get(&i) {
                Some(s) => 2 + s,
                None => refs[i as usize],
            };
            if node.links != want {
                out.links.push((i, node.links, want));
            }
        }
    }
    // Blocks of lost inodes are theirs, not free: a transaction that links them must not hand
    // them out (their trees are checked once they are reachable again).
    for &i in &out.lost {
        let node = st.nodes[i as usize];
        if node.height <= MAX_HEIGHT {
            reserve(&mut st, node.root, node.height);
        }
        if st.geo.is_data(node.xattr) {
            st.blocks.set(node.xattr);
        }
    }
    out.local = std::mem::take(&mut st.local);
    if !out.local.is_empty() {
        out.lost.clear();
    }
    if !out.local.is_empty() || !out.lost.is_empty() {
        out.links.clear();
    }
    // Link lost directories before lost files (a lost directory may name them), and of the
    // directories those whose parent is not lost itself (a lost subtree moves whole).
    let lost_dirs: Vec<u64> = out
        .lost
        .iter()
        .copied()
        .filter(|&i| st.nodes[i as usize].is(Kind::Dir))
        .collect();
    if !lost_dirs.is_empty() {
        let tops: Vec<u64> = lost_dirs
            .iter()
            .copied()
            .filter(|&i| {
                let p = st.nodes[i as usize].parent;
                p == i || !lost_dirs.contains(&p)
            })
            .collect();
        // all in a cycle of parents: break it at the lowest
        out.lost = if tops.is_empty() {
            vec![lost_dirs[0]]
        } else {
            tops
        };
    }
    out.blocks = st.blocks;
    out
}

/// Mark the blocks of a tree nothing reaches (bad pointers skipped, shared blocks not
/// followed twice).
fn reserve<M: Media>(st: &mut State<'_, M>, ptr: u64, level: u8) {
    if ptr == 0 || !st.geo.is_data(ptr) || !st.blocks.set(ptr) || level == 0 {
        return;
    }
    for c in st.pm.node(ptr) {
        reserve(st, c, level - 1);
    }
}

/// The orphan list: fields of the meta inode, bad links, inodes that cannot be orphans.
fn orphans<M: Media>(st: &mut State<'_, M>, visited: &mut HashSet<u64>) {
    let n = st.geo.inodes as u64;
    let meta = st.nodes[META_INO as usize];
    let only_head = Inode {
        orphan_next: meta.orphan_next,
        ..Inode::default()
    };
    if meta != only_head {
        let off = st.ioff(META_INO, 0);
        let what = "meta inode 0: fields other than the orphan list head cleared".to_string();
        st.push(
            fix(what, Some(META_INO), None, Some(off)),
            vec![(off, only_head.encode().to_vec())],
        );
    }
    let mut list: Vec<u64> = Vec::new();
    let (mut pred, mut o) = (META_INO, meta.orphan_next);
    while o != 0 {
        let at = st.ioff(pred, field::ORPHAN);
        let bad_link = o >= n || list.contains(&o) || list.len() as u64 >= n;
        let node = if bad_link {
            Inode::default()
        } else {
            st.nodes[o as usize]
        };
        if bad_link || node.is(Kind::Dir) || node.is(Kind::Free) || node.kind().is_none() {
            let what = format!("orphan list: bad link from inode {pred} to inode {o}: list cut");
            st.push(
                fix(what, Some(pred), None, Some(at)),
                vec![(at, vec![0; 8])],
            );
            return;
        }
        let named_unlinked = node.links == 0 && visited.contains(&o);
        if (node.links > 0 && !node.is(Kind::File)) || named_unlinked {
            // Not an orphan at all: take it off the list (its link count is set later).
            let what = format!("orphan list: inode {o} is not an orphan: taken off the list");
            let next = node.orphan_next.to_le_bytes().to_vec();
            let own = st.ioff(o, field::ORPHAN);
            st.push(
                fix(what, Some(o), None, Some(at)),
                vec![(at, next), (own, vec![0; 8])],
            );
            return;
        }
        if node.links > 0 && node.trunc != node.size {
            let off = st.ioff(o, field::TRUNC);
            let what = format!(
                "orphan {o}: a truncate to {} but size {}: target set to the size",
                node.trunc, node.size
            );
            st.push(
                fix(what, Some(o), None, Some(off)),
                vec![(off, node.size.to_le_bytes().to_vec())],
            );
        }
        list.push(o);
        if visited.insert(o) {
            st.visit(o);
        }
        pred = o;
        o = node.orphan_next;
    }
}
