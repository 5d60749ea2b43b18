//! Punching a hole in a file's radix tree: the pointers inside a range cleared, their subtrees
//! freed, huge blocks the range cuts in part split, and every node the cut empties freed too
//! (format 4: no node a file reaches is empty).

use crate::error::Result;
use crate::inode::Inode;
use crate::layout::{tree_cap, BLOCK, FANOUT};
use crate::tree::{free_subtree, huge, is_empty, split};
use crate::tx::Tx;
use pmkit_media::Media;

/// Clear the pointers to file blocks `from..to` (a punched hole), at most `budget` of them;
/// the freed blocks go to `tx.free_after`, and so does every node the cut empties (format 4's
/// rule). A huge block the range cuts in part is split first (one new block). Returns true when
/// nothing is left in the range.
pub(crate) fn punch<M: Media>(
    tx: &mut Tx<'_, M>,
    ino: &mut Inode,
    (from, to): (u64, u64),
    budget: usize,
) -> Result<bool> {
    let to = to.min(tree_cap(ino.height));
    if ino.root == 0 || from >= to {
        return Ok(true);
    }
    if from == 0 && to == tree_cap(ino.height) {
        free_subtree(tx, ino.root, ino.height);
        (ino.root, ino.height) = (0, 0);
        return Ok(true);
    }
    if ino.height == 1 && huge(ino.root).is_some() {
        ino.root = split(tx, ino.root)?;
    }
    let mut left = budget;
    punch_node(tx, ino.root, ino.height, 0, (from, to), &mut left)?;
    if is_empty(tx, ino.root) {
        tx.free_after.push(ino.root);
        (ino.root, ino.height) = (0, 0);
    }
    Ok(left > 0)
}

fn punch_node<M: Media>(
    tx: &mut Tx<'_, M>,
    node: u64,
    level: u8,
    base: u64,
    (from, to): (u64, u64),
    left: &mut usize,
) -> Result<()> {
    let span = tree_cap(level - 1);
    let first = from.saturating_sub(base) / span;
    let last = ((to - 1 - base) / span).min(FANOUT - 1);
    for slot in first..=last {
        let at = node as usize * BLOCK + slot as usize * 8;
        let mut ptr = tx.read_ptr(at);
        let child = base + slot * span;
        if ptr == 0 {
            continue;
        }
        if *left == 0 {
            return Ok(());
        }
        if from <= child && child + span <= to {
            free_subtree(tx, ptr, level - 1);
            tx.write_ptr(at, 0);
            *left -= 1;
            continue;
        }
        if level == 2 && huge(ptr).is_some() {
            // cut in part: its 512 blocks become a node whose pointers can go one by one
            ptr = split(tx, ptr)?;
            tx.write_ptr(at, ptr);
        }
        punch_node(tx, ptr, level - 1, child, (from, to), left)?;
        if is_empty(tx, ptr) {
            tx.free_after.push(ptr);
            tx.write_ptr(at, 0);
        }
    }
    Ok(())
}
