//! The per-inode radix tree: 4 KiB nodes of 512 block pointers, height 0..=3 (height 0: the root
//! is the file's only block). Lookup, set (growing the tree), prune (truncate), and a validating
//! walk for mount and check.

use crate::error::{Error, Result};
use crate::inode::Inode;
use crate::layout::{tree_cap, Geometry, BLOCK, FANOUT, MAX_FILE_SIZE, MAX_HEIGHT};
use crate::pm::Pm;
use crate::tx::Tx;
use pmkit_media::Media;

/// Something 8-byte words can be read from: the media, or a transaction's view of it.
pub trait Reader {
    fn word(&self, off: usize) -> u64;
    fn node(&self, block: u64) -> Vec<u64> {
        (0..FANOUT as usize)
            .map(|s| self.word(block as usize * BLOCK + s * 8))
            .collect()
    }
}

impl<M: Media> Reader for Pm<M> {
    fn word(&self, off: usize) -> u64 {
        self.read_u64(off)
    }
    fn node(&self, block: u64) -> Vec<u64> {
        let mut b = vec![0u8; BLOCK];
        self.read(block as usize * BLOCK, &mut b);
        b.chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect()
    }
}

impl<M: Media> Reader for Tx<'_, M> {
    fn word(&self, off: usize) -> u64 {
        self.read_u64(off)
    }
}

/// The block holding file block `idx`, or 0 for a hole.
pub fn lookup(r: &impl Reader, root: u64, height: u8, idx: u64) -> u64 {
    if idx >= tree_cap(height) {
        return 0;
    }
    let mut node = root;
    for level in (1..=height).rev() {
        if node == 0 {
            return 0;
        }
        let slot = (idx / tree_cap(level - 1)) % FANOUT;
        node = r.word(node as usize * BLOCK + slot as usize * 8);
    }
    node
}

/// Point file block `idx` at `ptr`, growing the tree as needed; returns the old pointer.
pub fn set<M: Media>(tx: &mut Tx<'_, M>, ino: &mut Inode, idx: u64, ptr: u64) -> Result<u64> {
    while idx >= tree_cap(ino.height) {
        if ino.height >= MAX_HEIGHT {
            return Err(Error::FileTooBig { max: MAX_FILE_SIZE });
        }
        if ino.root != 0 {
            ino.root = tx.new_block(&ino.root.to_le_bytes())?;
        }
        ino.height += 1;
    }
    if ino.height == 0 {
        let old = ino.root;
        ino.root = ptr;
        return Ok(old);
    }
    if ino.root == 0 {
        ino.root = tx.new_block(&[])?;
    }
    let mut node = ino.root;
    for level in (1..=ino.height).rev() {
        let slot = (idx / tree_cap(level - 1)) % FANOUT;
        let off = node as usize * BLOCK + slot as usize * 8;
        let cur = tx.read_u64(off);
        if level == 1 {
            tx.write_u64(off, ptr);
            return Ok(cur);
        }
        node = if cur == 0 {
            let b = tx.new_block(&[])?;
            tx.write_u64(off, b);
            b
        } else {
            cur
        };
    }
    unreachable!("height {} loop returns at level 1", ino.height)
}

/// Every block of the subtree at `node` (of `level`; 0 = a data block), nodes included.
pub fn collect(r: &impl Reader, node: u64, level: u8, out: &mut Vec<u64>) {
    if node == 0 {
        return;
    }
    out.push(node);
    if level > 0 {
        for c in r.node(node) {
            collect(r, c, level - 1, out);
        }
    }
}

/// Clear the pointers to file blocks `keep..`, at most `budget` of them; the freed blocks go to
/// `tx.free_after`. Returns true when nothing beyond `keep` is left.
pub fn prune<M: Media>(tx: &mut Tx<'_, M>, ino: &mut Inode, keep: u64, budget: usize) -> bool {
    if ino.root == 0 {
        return true;
    }
    if keep == 0 {
        let mut blocks = Vec::new();
        collect(tx, ino.root, ino.height, &mut blocks);
        tx.free_after.extend(blocks);
        ino.root = 0;
        ino.height = 0;
        return true;
    }
    if ino.height == 0 {
        return true;
    }
    let mut left = budget;
    prune_node(tx, ino.root, ino.height, 0, keep, &mut left);
    left > 0
}

fn prune_node<M: Media>(
    tx: &mut Tx<'_, M>,
    node: u64,
    level: u8,
    base: u64,
    keep: u64,
    left: &mut usize,
) {
    let span = tree_cap(level - 1);
    let ptrs = tx.node(node);
    for (slot, &ptr) in ptrs.iter().enumerate() {
        let child = base + slot as u64 * span;
        if ptr == 0 || child + span <= keep {
            continue;
        }
        if *left == 0 {
            return;
        }
        if child >= keep {
            let mut blocks = Vec::new();
            collect(tx, ptr, level - 1, &mut blocks);
            tx.free_after.extend(blocks);
            tx.write_u64(node as usize * BLOCK + slot * 8, 0);
            *left -= 1;
        } else {
            prune_node(tx, ptr, level - 1, child, keep, left);
        }
    }
}

/// Walk a tree read from the media, checking every pointer, calling `visit(block, is_node,
/// file_block)` for each block. Stops at the first problem.
pub fn walk(
    r: &impl Reader,
    geo: &Geometry,
    root: u64,
    height: u8,
    visit: &mut dyn FnMut(u64, bool, u64) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    if height > MAX_HEIGHT {
        return Err(format!("tree height {height} over {MAX_HEIGHT}"));
    }
    walk_node(r, geo, root, height, 0, visit)
}

fn walk_node(
    r: &impl Reader,
    geo: &Geometry,
    node: u64,
    level: u8,
    base: u64,
    visit: &mut dyn FnMut(u64, bool, u64) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    if node == 0 {
        return Ok(());
    }
    if !geo.is_data(node) {
        return Err(format!("pointer to block {node}, outside the data area"));
    }
    visit(node, level > 0, base)?;
    if level > 0 {
        let span = tree_cap(level - 1);
        for (slot, c) in r.node(node).into_iter().enumerate() {
            walk_node(r, geo, c, level - 1, base + slot as u64 * span, visit)?;
        }
    }
    Ok(())
}
