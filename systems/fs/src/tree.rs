//! The per-inode radix tree: 4 KiB nodes of 512 block pointers, height 0..=3 (height 0: the root
//! is the file's only block). Lookup, set (growing the tree), prune (truncate), and a validating
//! walk for mount and check.
//!
//! A pointer that stands for a level-1 subtree (512 file blocks, 2 MiB) may instead name a huge
//! block: bit 63 ([`HUGE`]) set, the low bits the first of 512 contiguous data blocks whose number
//! is a multiple of 512 (2 MiB-aligned on the media). Anywhere else the bit makes the pointer
//! invalid (the walk reports it).

use crate::error::{Error, Result};
use crate::inode::Inode;
use crate::layout::{tree_cap, BLOCK, FANOUT, MAX_FILE_SIZE, MAX_HEIGHT};
use crate::pm::Pm;
use crate::ptr;
use crate::tx::Tx;
use pmkit_media::Media;

/// Something 8-byte words can be read from: the media, or a transaction's view of it.
/// The pointers are the words' values (`ptr.rs`): the check bits are masked off here, and held
/// to by the walk.
pub(crate) trait Reader {
    /// The stored word at `off`, check bits and all.
    fn word(&self, off: usize) -> u64;
    /// The pointer stored at `off`.
    fn ptr(&self, off: usize) -> u64 {
        ptr::value(self.word(off))
    }
    fn node(&self, block: u64) -> Vec<u64> {
        self.slots(block, 0, FANOUT - 1)
    }
    /// The pointers in slots `first..=last` of a node.
    fn slots(&self, block: u64, first: u64, last: u64) -> Vec<u64> {
        (first..=last)
            .map(|s| self.ptr(block as usize * BLOCK + s as usize * 8))
            .collect()
    }
}

impl<M: Media> Reader for Pm<M> {
    fn word(&self, off: usize) -> u64 {
        self.read_u64(off)
    }
    /// One copy out of PM into the stack, one allocation.
    fn slots(&self, block: u64, first: u64, last: u64) -> Vec<u64> {
        assert!(first <= last && last < FANOUT);
        let mut b = [0u8; BLOCK];
        let n = (last - first + 1) as usize * 8;
        self.read(block as usize * BLOCK + first as usize * 8, &mut b[..n]);
        b[..n]
            .chunks_exact(8)
            .map(|c| ptr::value(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
            .collect()
    }
}

impl<M: Media> Reader for Tx<'_, M> {
    fn word(&self, off: usize) -> u64 {
        self.read_u64(off)
    }
}

pub(crate) use crate::ptr::HUGE;
/// File blocks in a huge block.
pub(crate) const HUGE_BLOCKS: u64 = FANOUT;
// the allocator's chunks are the huge blocks
const _: () = assert!(HUGE_BLOCKS == crate::alloc::CHUNK);

/// The first block of the huge block `ptr` names, if it names one.
pub(crate) fn huge(ptr: u64) -> Option<u64> {
    (ptr & HUGE != 0).then_some(ptr & !HUGE)
}

/// The block holding file block `idx`, or 0 for a hole.
pub(crate) fn lookup(r: &impl Reader, root: u64, height: u8, idx: u64) -> u64 {
    if idx >= tree_cap(height) {
        return 0;
    }
    let mut node = root;
    for level in (1..=height).rev() {
        if node == 0 {
            return 0;
        }
        if level == 1 {
            if let Some(run) = huge(node) {
                return run + idx % FANOUT;
            }
        }
        let slot = (idx / tree_cap(level - 1)) % FANOUT;
        node = r.ptr(node as usize * BLOCK + slot as usize * 8);
    }
    node
}

/// Point file block `idx` at `ptr` (not 0: nothing clears a pointer through here), growing the
/// tree as needed; returns the old pointer. On an error no node it made stays linked: a node a
/// file reaches is never empty (format 4 holds the walk to that), and a caller may commit the
/// transaction after a failed `set` (`prealloc`).
pub(crate) fn set<M: Media>(
    tx: &mut Tx<'_, M>,
    ino: &mut Inode,
    idx: u64,
    ptr: u64,
) -> Result<u64> {
    assert_ne!(ptr, 0, "set clears no pointer");
    let mut made = Vec::new();
    let r = set_in(tx, ino, idx, ptr, &mut made);
    if r.is_err() {
        // Unlink the fresh nodes, deepest first (the link to each is in its parent or the
        // inode), and give their blocks back.
        for &(at, b) in made.iter().rev() {
            match at {
                Some(at) => tx.write_ptr(at, 0),
                None => ino.root = 0,
            }
            tx.free_after.push(b);
        }
    }
    r
}

/// `set`'s work; every fresh empty node it links is pushed to `made` with where its link is
/// (`None`: the inode's root).
fn set_in<M: Media>(
    tx: &mut Tx<'_, M>,
    ino: &mut Inode,
    idx: u64,
    ptr: u64,
    made: &mut Vec<(Option<usize>, u64)>,
) -> Result<u64> {
    while idx >= tree_cap(ino.height) {
        if ino.height >= MAX_HEIGHT {
            return Err(Error::FileTooBig { max: MAX_FILE_SIZE });
        }
        if ino.root != 0 {
            ino.root = tx.new_node(&[ino.root])?;
        }
        ino.height += 1;
    }
    if ino.height == 0 {
        let old = ino.root;
        ino.root = ptr;
        return Ok(old);
    }
    if ino.root == 0 {
        ino.root = tx.new_node(&[])?;
        made.push((None, ino.root));
    }
    if ino.height == 1 && huge(ino.root).is_some() {
        ino.root = split(tx, ino.root)?;
    }
    let mut node = ino.root;
    for level in (1..=ino.height).rev() {
        let slot = (idx / tree_cap(level - 1)) % FANOUT;
        let off = node as usize * BLOCK + slot as usize * 8;
        let cur = tx.read_ptr(off);
        if level == 1 {
            tx.write_ptr(off, ptr);
            return Ok(cur);
        }
        node = if cur == 0 {
            let b = tx.new_node(&[])?;
            tx.write_ptr(off, b);
            made.push((Some(off), b));
            b
        } else if level == 2 && huge(cur).is_some() {
            let b = split(tx, cur)?;
            tx.write_ptr(off, b);
            b
        } else {
            cur
        };
    }
    unreachable!("height {} loop returns at level 1", ino.height)
}

/// A fresh level-1 node naming the 512 blocks of the huge block `ptr`: the same data, now
/// 4 KiB blocks that can be replaced or freed one by one. The caller swaps the pointer in.
pub(crate) fn split<M: Media>(tx: &mut Tx<'_, M>, ptr: u64) -> Result<u64> {
    let run = huge(ptr).expect("split of a huge pointer");
    let ptrs: Vec<u64> = (run..run + HUGE_BLOCKS).collect();
    tx.new_node(&ptrs)
}

/// The byte offset of the pointer to file block `idx` in its level-1 node, if the path to that
/// node exists (height 1 or more, no huge block on the way).
pub(crate) fn leaf_slot(r: &impl Reader, root: u64, height: u8, idx: u64) -> Option<usize> {
    if height == 0 || idx >= tree_cap(height) {
        return None;
    }
    let mut node = root;
    for level in (1..=height).rev() {
        if node == 0 || (level == 1 && huge(node).is_some()) {
            return None;
        }
        let slot = (idx / tree_cap(level - 1)) % FANOUT;
        let off = node as usize * BLOCK + slot as usize * 8;
        if level == 1 {
            return Some(off);
        }
        node = r.ptr(off);
    }
    None
}

/// Is there no block at all in the 2 MiB-aligned range of file blocks from `idx`?
pub(crate) fn span_empty(r: &impl Reader, root: u64, height: u8, idx: u64) -> bool {
    debug_assert_eq!(idx % HUGE_BLOCKS, 0);
    if root == 0 || idx >= tree_cap(height) {
        return true;
    }
    if height <= 1 {
        return false; // idx is 0 and the root holds block 0 (height 0) or the span (height 1)
    }
    let mut node = root;
    for level in (2..=height).rev() {
        let slot = (idx / tree_cap(level - 1)) % FANOUT;
        node = r.ptr(node as usize * BLOCK + slot as usize * 8);
        if node == 0 {
            return true;
        }
    }
    false
}

/// Point the 2 MiB-aligned span of file blocks from `idx` at the huge block `run` (its first
/// block), growing the tree; the span must be empty (`span_empty`).
pub(crate) fn set_huge<M: Media>(
    tx: &mut Tx<'_, M>,
    ino: &mut Inode,
    idx: u64,
    run: u64,
) -> Result<()> {
    assert!(idx.is_multiple_of(HUGE_BLOCKS) && run.is_multiple_of(HUGE_BLOCKS));
    while idx >= tree_cap(ino.height) || ino.height == 0 {
        if ino.height >= MAX_HEIGHT {
            return Err(Error::FileTooBig { max: MAX_FILE_SIZE });
        }
        if ino.root != 0 {
            ino.root = tx.new_node(&[ino.root])?;
        }
        ino.height += 1;
    }
    if ino.height == 1 {
        assert_eq!(ino.root, 0, "huge block over a non-empty span");
        ino.root = run | HUGE;
        return Ok(());
    }
    if ino.root == 0 {
        ino.root = tx.new_node(&[])?;
    }
    let mut node = ino.root;
    for level in (2..=ino.height).rev() {
        let slot = (idx / tree_cap(level - 1)) % FANOUT;
        let off = node as usize * BLOCK + slot as usize * 8;
        let cur = tx.read_ptr(off);
        if level == 2 {
            assert_eq!(cur, 0, "huge block over a non-empty span");
            tx.write_ptr(off, run | HUGE);
            return Ok(());
        }
        node = if cur == 0 {
            let b = tx.new_node(&[])?;
            tx.write_ptr(off, b);
            b
        } else {
            cur
        };
    }
    unreachable!("height {} loop returns at level 2", ino.height)
}

/// Every block of the subtree at `node` (of `level`; 0 = a data block), nodes included.
pub(crate) fn collect(r: &impl Reader, node: u64, level: u8, out: &mut Vec<u64>) {
    if node == 0 {
        return;
    }
    if level == 1 {
        if let Some(run) = huge(node) {
            out.extend(run..run + HUGE_BLOCKS);
            return;
        }
    }
    out.push(node);
    if level > 0 {
        for c in r.node(node) {
            collect(r, c, level - 1, out);
        }
    }
}

/// Free every block of the subtree at `node` (of `level`), nodes included, once `tx` commits:
/// what a truncate, a punched hole and a freed inode give back.
pub(crate) fn free_subtree<M: Media>(tx: &mut Tx<'_, M>, node: u64, level: u8) {
    let mut blocks = Vec::new();
    collect(tx, node, level, &mut blocks);
    tx.free_after.extend(blocks);
}

/// How many blocks the subtree at `node` (of `level`) holds, nodes included: `collect`'s count
/// without the list (stat's block count).
pub(crate) fn count(r: &impl Reader, node: u64, level: u8) -> u64 {
    match (node, level) {
        (0, _) => 0,
        (_, 0) => 1,
        (_, 1) if huge(node).is_some() => HUGE_BLOCKS,
        // The children of a level-1 node are data blocks: count them in place.
        (_, 1) => 1 + r.node(node).iter().filter(|&&c| c != 0).count() as u64,
        _ => {
            1 + r
                .node(node)
                .into_iter()
                .map(|c| count(r, c, level - 1))
                .sum::<u64>()
        }
    }
}

/// Clear the pointers to file blocks `keep..`, at most `budget` of them; the freed blocks go to
/// `tx.free_after`. Returns true when nothing beyond `keep` is left. Cutting a huge block takes
/// one new block (its split node): with none free, `NoSpace`, unless `spare_tail` (the size is
/// already committed at or below `keep`, so the cut tail is invisible): then the tail's last
/// block becomes the node.
pub(crate) fn prune<M: Media>(
    tx: &mut Tx<'_, M>,
    ino: &mut Inode,
    keep: u64,
    budget: usize,
    spare_tail: bool,
) -> Result<bool> {
    if ino.root == 0 {
        return Ok(true);
    }
    if keep == 0 {
        free_subtree(tx, ino.root, ino.height);
        (ino.root, ino.height) = (0, 0);
        return Ok(true);
    }
    if ino.height == 0 {
        return Ok(true);
    }
    if ino.height == 1 && huge(ino.root).is_some() {
        if keep < HUGE_BLOCKS {
            ino.root = split_cut(tx, ino.root, 0, keep, spare_tail)?;
        }
        return Ok(true);
    }
    let mut left = budget;
    prune_node(tx, ino.root, ino.height, 0, (keep, spare_tail), &mut left)?;
    if is_empty(tx, ino.root) {
        // every block below `keep` was a hole: no node is left empty (format 4's rule)
        tx.free_after.push(ino.root);
        (ino.root, ino.height) = (0, 0);
    }
    Ok(left > 0)
}

/// Whether the node at `block` holds no pointer.
pub(crate) fn is_empty(r: &impl Reader, block: u64) -> bool {
    r.node(block).iter().all(|&p| p == 0)
}

/// Cut the huge block `ptr` (file blocks from `base`) at `keep`: a fresh node naming the blocks
/// below `keep`; the rest go to `tx.free_after`. Nothing is logged but the caller's swap.
fn split_cut<M: Media>(
    tx: &mut Tx<'_, M>,
    ptr: u64,
    base: u64,
    keep: u64,
    spare_tail: bool,
) -> Result<u64> {
    let run = huge(ptr).expect("huge pointer");
    let kept = keep.saturating_sub(base).min(HUGE_BLOCKS - 1);
    let ptrs: Vec<u64> = (run..run + kept).collect();
    let last = run + HUGE_BLOCKS - 1;
    let node = match tx.new_node(&ptrs) {
        Ok(b) => b,
        Err(Error::NoSpace) if spare_tail => {
            // Beyond the committed size: a crash before the commit leaves bytes no one reads.
            // Not a block another file shares (reflink): its bytes are that file's.
            let spare = (run + kept..=last).rev().find(|&b| !tx.is_shared(b));
            let Some(spare) = spare else {
                return Err(Error::NoSpace);
            };
            let b = tx.node_image(spare, &ptrs);
            tx.write_fresh(spare as usize * BLOCK, &b);
            tx.free_after
                .extend((run + kept..=last).filter(|&b| b != spare));
            return Ok(spare);
        }
        Err(e) => return Err(e),
    };
    tx.free_after.extend(run + kept..run + HUGE_BLOCKS);
    Ok(node)
}

fn prune_node<M: Media>(
    tx: &mut Tx<'_, M>,
    node: u64,
    level: u8,
    base: u64,
    (keep, spare_tail): (u64, bool),
    left: &mut usize,
) -> Result<()> {
    let span = tree_cap(level - 1);
    let ptrs = tx.node(node);
    for (slot, &ptr) in ptrs.iter().enumerate() {
        let child = base + slot as u64 * span;
        if ptr == 0 || child + span <= keep {
            continue;
        }
        if *left == 0 {
            return Ok(());
        }
        if child >= keep {
            free_subtree(tx, ptr, level - 1);
            tx.write_ptr(node as usize * BLOCK + slot * 8, 0);
            *left -= 1;
        } else if level == 2 && huge(ptr).is_some() {
            // a huge block cut by the new size: split it, freeing the blocks beyond `keep`
            let b = split_cut(tx, ptr, child, keep, spare_tail)?;
            tx.write_ptr(node as usize * BLOCK + slot * 8, b);
            *left -= 1;
        } else {
            prune_node(tx, ptr, level - 1, child, (keep, spare_tail), left)?;
            if level > 1 && is_empty(tx, ptr) {
                // the child straddled `keep` and held only holes below it: free it too
                tx.free_after.push(ptr);
                tx.write_ptr(node as usize * BLOCK + slot * 8, 0);
            }
        }
    }
    Ok(())
}

/// The data blocks that exist for file blocks `from..to`, as (file block, block) in order; at
/// most `limit` of them. Holes cost nothing: only subtrees that exist are read.
pub(crate) fn present(
    r: &impl Reader,
    root: u64,
    height: u8,
    (from, to): (u64, u64),
    limit: usize,
) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let to = to.min(tree_cap(height));
    if from < to && height <= MAX_HEIGHT {
        present_node(r, root, height, 0, (from, to), limit, &mut out);
    }
    out
}

fn present_node(
    r: &impl Reader,
    node: u64,
    level: u8,
    base: u64,
    (from, to): (u64, u64),
    limit: usize,
    out: &mut Vec<(u64, u64)>,
) {
    if node == 0 || out.len() >= limit {
        return;
    }
    if level == 0 {
        out.push((base, node));
        return;
    }
    if let (1, Some(run)) = (level, huge(node)) {
        for i in from.max(base)..to.min(base + HUGE_BLOCKS) {
            if out.len() >= limit {
                return;
            }
            out.push((i, run + (i - base)));
        }
        return;
    }
    let span = tree_cap(level - 1);
    let first = from.saturating_sub(base) / span;
    let last = ((to - 1 - base) / span).min(FANOUT - 1);
    // Only the slots in range: a small read or a close reads a few words, not the node.
    let ptrs = r.slots(node, first, last);
    for (slot, &p) in (first..=last).zip(&ptrs) {
        if p != 0 {
            present_node(r, p, level - 1, base + slot * span, (from, to), limit, out);
        }
    }
}

/// The file blocks a file of `size` bytes keeps (a truncate or trim frees those from here on):
/// the blocks the size covers; for a file that asks for huge blocks, up to the end of the
/// 2 MiB span the size ends in, so its huge block stays whole.
pub(crate) fn keep_blocks(node: &Inode, size: u64) -> u64 {
    let keep = size.div_ceil(BLOCK as u64);
    if node.huge() {
        keep.next_multiple_of(HUGE_BLOCKS)
    } else {
        keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Words by byte offset; absent words read 0.
    struct Words(HashMap<usize, u64>);

    impl Reader for Words {
        fn word(&self, off: usize) -> u64 {
            self.0.get(&off).copied().unwrap_or(0)
        }
    }

    #[test]
    fn count_is_collects_length() {
        // A height-3 tree: root 100 -> level-2 node 101 (slots 0, 7) -> level-1 nodes 102
        // (data 200, 201 in slots 0 and 511) and a huge run at 1024; slot 3 of the root is a
        // second level-2 node 103 with one level-1 node 104 holding one block.
        let mut w = HashMap::new();
        let at = |b: u64, s: usize| b as usize * BLOCK + s * 8;
        w.insert(at(100, 0), 101);
        w.insert(at(100, 3), 103);
        w.insert(at(101, 0), 102);
        w.insert(at(101, 7), 1024 | HUGE);
        w.insert(at(102, 0), 200);
        w.insert(at(102, 511), 201);
        w.insert(at(103, 1), 104);
        w.insert(at(104, 9), 300);
        let r = Words(w);
        for (root, level) in [
            (100, 3),
            (101, 2),
            (102, 1),
            (1024 | HUGE, 1),
            (200, 0),
            (0, 2),
        ] {
            let mut all = Vec::new();
            collect(&r, root, level, &mut all);
            assert_eq!(
                count(&r, root, level),
                all.len() as u64,
                "{root:#x} at {level}"
            );
        }
        assert_eq!(count(&r, 100, 3), 1 + (1 + 3 + 512) + (1 + 2));
    }
}
