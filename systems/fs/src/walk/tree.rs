//! One inode's tree descent for the walk: every pointer claimed or cut, and in format 7 every
//! pointer word held to its check (`ptr.rs`).

use super::Problem;
use crate::alloc::Bitmap;
use crate::layout::{tree_cap, Geometry, BLOCK};
use crate::pm::Pm;
use crate::ptr;
use crate::tree;
use pmkit_media::Media;
use std::collections::HashSet;

/// Who owns blocks so far: the whole tree's bitmap (the full walk) or one inode's own set (the
/// check on first use after a mount from the checkpoint).
pub(super) trait Owner {
    /// Claim block `b`: false when it is owned already.
    fn claim(&mut self, b: u64) -> bool;
    fn owned(&self, b: u64) -> bool;
    /// Claim `b` as a regular file's data block, which may be shared (format 8): true when it
    /// was free, or is owned as such a block already (one more pointer counted); false when
    /// something else owns it. An owner that knows no sharing claims it as any block.
    fn claim_shared(&mut self, b: u64) -> bool {
        self.claim(b)
    }
    /// Would [`Owner::claim_shared`] take `b`?
    fn can_share(&self, b: u64) -> bool {
        !self.owned(b)
    }
}

/// An owner that tells regular files' data blocks from every other block, so such a block may
/// be pointed at more than once (format 8: `share.rs`) while a block shared with a node, a
/// directory or anything else is still damage. Counts each shared block's extra pointers.
pub(crate) struct Claims<O> {
    pub own: O,
    /// The blocks claimed as regular files' data (their first pointer).
    pub leaves: O,
    /// Pointers beyond the first, by block.
    pub extra: std::collections::HashMap<u64, u32>,
}

impl<O: Owner> Owner for Claims<O> {
    fn claim(&mut self, b: u64) -> bool {
        self.own.claim(b)
    }
    fn owned(&self, b: u64) -> bool {
        self.own.owned(b)
    }
    fn claim_shared(&mut self, b: u64) -> bool {
        if self.own.claim(b) {
            self.leaves.claim(b);
            return true;
        }
        if !self.leaves.owned(b) {
            return false;
        }
        *self.extra.entry(b).or_default() += 1;
        true
    }
    fn can_share(&self, b: u64) -> bool {
        !self.own.owned(b) || self.leaves.owned(b)
    }
}

impl Owner for Bitmap {
    fn claim(&mut self, b: u64) -> bool {
        self.set(b)
    }
    fn owned(&self, b: u64) -> bool {
        self.is_used(b)
    }
}

impl Owner for HashSet<u64> {
    fn claim(&mut self, b: u64) -> bool {
        self.insert(b)
    }
    fn owned(&self, b: u64) -> bool {
        self.contains(&b)
    }
}

/// A data block an inode keeps: its file block, the block, and the byte offset of the pointer
/// to it (what a fix cuts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Data {
    pub file_block: u64,
    pub block: u64,
    pub at: usize,
}

/// The store that cuts the pointer at `at`, in a tree whose root pointer is at `root_at`: a zero
/// there (an inode's field), a hole with its check in a node of a format 7 pool.
pub(super) fn cut_store(geo: &Geometry, at: usize, root_at: usize) -> Vec<(usize, Vec<u8>)> {
    let hole = match at == root_at {
        true => 0,
        false => ptr::store(geo.checked_ptrs(), 0, at),
    };
    vec![(at, hole.to_le_bytes().to_vec())]
}

/// One inode's tree descent.
pub(super) struct Tree<'v, 'a, M> {
    pub pm: &'a Pm<M>,
    pub geo: &'a Geometry,
    pub ino: u64,
    pub owner: &'v mut dyn Owner,
    pub out: &'v mut Vec<Problem>,
    /// Keep the data blocks (not a regular file's: only directories and symlinks need them).
    pub keep: bool,
    pub data: &'v mut Vec<Data>,
    /// Where the root pointer is stored (an inode's field; every other pointer is in a node).
    pub root_at: usize,
    /// One past the last file block seen (kept or not).
    pub end: u64,
}

impl<M: Media> Tree<'_, '_, M> {
    /// One pointer (stored at byte `at`) to a subtree of `level` covering file blocks from
    /// `base`: a bad pointer is cut (that range of the file becomes a hole), a block owned
    /// already stays with its first owner.
    pub(super) fn pointer(&mut self, ptr: u64, level: u8, base: u64, at: usize) {
        if ptr == 0 {
            return;
        }
        let (ino, geo) = (self.ino, self.geo);
        let hole = format!(
            "cut (file blocks {base}..{} are a hole)",
            base.saturating_add(tree_cap(level))
        );
        // A regular file's data block may be shared (format 8); any other block has one owner.
        let shares = !self.keep && geo.shares();
        // A 2 MiB block: a flagged pointer where a level-1 node would be.
        if let (1, Some(run)) = (level, tree::huge(ptr)) {
            if let Err(why) = self.huge_run(run, base, at, shares) {
                let what = format!("inode {ino}: 2 MiB block at {run} {why}");
                let cut = self.cut(at);
                self.out
                    .push(Problem::stores(what, hole, Some(ino), Some(run), cut));
            }
            return;
        }
        let outside = !geo.is_data(ptr);
        let shares = level == 0 && shares;
        let why = if outside {
            "outside the data area"
        } else if !(match shares {
            true => self.owner.claim_shared(ptr),
            false => self.owner.claim(ptr),
        }) {
            "owned twice (a loop or a shared block)"
        } else {
            if level == 0 {
                self.keep(base, ptr, at);
            } else {
                let Some(slots) = self.node_ptrs(ptr, (level, base), at) else {
                    return;
                };
                if self.empty_node(ptr, &slots, (level, base), at) {
                    return;
                }
                let child = tree_cap(level - 1);
                for (slot, c) in slots.into_iter().enumerate() {
                    let at = ptr as usize * BLOCK + slot * 8;
                    self.pointer(c, level - 1, base + slot as u64 * child, at);
                }
            }
            return;
        };
        let what = format!("inode {ino}: pointer to block {ptr} {why}");
        let mut p = Problem::stores(what, hole, Some(ino), Some(ptr), self.cut(at));
        if outside {
            p.sign = Some(super::Sign::BlockOutside(ptr));
        }
        self.out.push(p);
    }

    /// The 512 blocks of the 2 MiB block at `run` (covering file blocks from `base`; linked at
    /// `at`) claimed, each a data block like any other (`shares`: another file may point at some
    /// of them); or why not, with nothing claimed.
    fn huge_run(
        &mut self,
        run: u64,
        base: u64,
        at: usize,
        shares: bool,
    ) -> Result<(), &'static str> {
        let (n, geo) = (tree::HUGE_BLOCKS, self.geo);
        if !run.is_multiple_of(n) || !geo.is_data(run) || !geo.is_data(run + n - 1) {
            return Err("not 2 MiB-aligned or not inside the data area");
        }
        let free = |o: &dyn Owner, b: u64| match shares {
            true => o.can_share(b),
            false => !o.owned(b),
        };
        if (0..n).any(|i| !free(&*self.owner, run + i)) {
            return Err("owned twice in part (a shared block)");
        }
        for i in 0..n {
            let took = match shares {
                true => self.owner.claim_shared(run + i),
                false => self.owner.claim(run + i),
            };
            debug_assert!(took, "block {} checked above", run + i);
            self.keep(base + i, run + i, at);
        }
        Ok(())
    }

    /// A node of `level` covering file blocks from `base` that holds no pointer, in format 4
    /// (which frees a node it empties): zeroed, or emptied by repair's cuts below it. Serving
    /// it would read holes for data, so it is a problem whose fix says what was lost.
    fn empty_node(&mut self, ptr: u64, slots: &[u64], (level, base): (u8, u64), at: usize) -> bool {
        if !self.geo.full_nodes() || slots.iter().any(|&c| c != 0) {
            return false;
        }
        let (ino, end) = (self.ino, base.saturating_add(tree_cap(level)));
        self.out.push(Problem::stores(
            format!(
                "inode {ino}: tree node at block {ptr} holds no pointer (zeroed?): file blocks \
                 {base}..{end} read as holes, whatever data they held is lost"
            ),
            format!("cut (file blocks {base}..{end} are a hole)"),
            Some(ino),
            Some(ptr),
            self.cut(at),
        ));
        true
    }

    /// The store that cuts the pointer at `at`: a zero in the inode's root field, a hole (with
    /// its check in format 7) in a node.
    fn cut(&self, at: usize) -> Vec<(usize, Vec<u8>)> {
        cut_store(self.geo, at, self.root_at)
    }

    /// The pointers in the node at block `node` (of `level`, covering file blocks from `base`;
    /// linked at `at`). In format 7 each word is held to its check: the words that fail are a
    /// problem whose fix makes them holes; a node whose every word fails is no node at all
    /// (zeroed, or some other block's bytes): None, and its link is cut.
    fn node_ptrs(&mut self, node: u64, (level, base): (u8, u64), at: usize) -> Option<Vec<u64>> {
        let mut raw = [0u8; BLOCK];
        self.pm.read(node as usize * BLOCK, &mut raw);
        let words = raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")));
        if !self.geo.checked_ptrs() {
            return Some(words.collect());
        }
        let first = node as usize * BLOCK;
        let opened: Vec<Option<u64>> = words
            .enumerate()
            .map(|(s, w)| ptr::open(w, first + s * 8))
            .collect();
        let bad: Vec<usize> = (0..opened.len()).filter(|&s| opened[s].is_none()).collect();
        if bad.is_empty() {
            return Some(opened.into_iter().map(|p| p.expect("checked")).collect());
        }
        let (ino, span) = (self.ino, tree_cap(level - 1));
        if bad.len() == opened.len() {
            let end = base.saturating_add(tree_cap(level));
            self.out.push(Problem::stores(
                format!(
                    "inode {ino}: tree node at block {node} fails the check of every pointer \
                     word (zeroed, or another block's bytes): whatever data file blocks \
                     {base}..{end} held is lost"
                ),
                format!("cut (file blocks {base}..{end} are a hole)"),
                Some(ino),
                Some(node),
                self.cut(at),
            ));
            return None;
        }
        let ranges: Vec<String> = bad
            .iter()
            .take(4)
            .map(|&s| {
                let from = base + s as u64 * span;
                format!("{from}..{}", from.saturating_add(span))
            })
            .collect();
        let more = if bad.len() > 4 { ", ..." } else { "" };
        self.out.push(Problem::stores(
            format!(
                "inode {ino}: {} pointer words in tree node at block {node} fail their check: \
                 whatever data file blocks {}{more} held is lost",
                bad.len(),
                ranges.join(", ")
            ),
            "cut (those file blocks are holes)".into(),
            Some(ino),
            Some(node),
            bad.iter().flat_map(|&s| self.cut(first + s * 8)).collect(),
        ));
        Some(opened.into_iter().map(|p| p.unwrap_or(0)).collect())
    }

    fn keep(&mut self, file_block: u64, block: u64, at: usize) {
        self.end = self.end.max(file_block + 1);
        if self.keep {
            self.data.push(Data {
                file_block,
                block,
                at,
            });
        }
    }
}
