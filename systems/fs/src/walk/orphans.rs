//! The orphan list, headed by the meta inode (which holds nothing else): files with no links
//! whose blocks mount frees, and files with a truncate in progress that mount finishes.

use super::inode::{Owner, Visitor};
use super::Problem;
use crate::inode::{self as field, Inode, Kind};
use crate::layout::META_INO;
use pmkit_media::Media;
use std::collections::HashSet;

/// The inodes on the list that hold links: a truncate is in progress, so they may own blocks
/// beyond their size. Read before the walk, bounded by the table (the list is checked later).
pub(super) fn pruning(nodes: &[Inode]) -> HashSet<u64> {
    let mut out = HashSet::new();
    let mut o = nodes[META_INO as usize].orphan_next;
    for _ in 0..nodes.len() {
        if o == 0 || o >= nodes.len() as u64 {
            break;
        }
        if nodes[o as usize].links > 0 {
            out.insert(o);
        }
        o = nodes[o as usize].orphan_next;
    }
    out
}

/// What walking the list found.
pub(super) struct Orphans {
    pub list: Vec<u64>,
    /// Orphans no directory names, visited here.
    pub visited: Vec<u64>,
}

impl<M: Media> Visitor<'_, M> {
    /// Walk the list, visiting each orphan no directory reached (`named`). Stops at the first
    /// link it has to change: a repair applies that, and the next round walks on from there.
    pub(super) fn orphans(
        &self,
        nodes: &[Inode],
        named: &HashSet<u64>,
        pruning: &HashSet<u64>,
        owner: &mut dyn Owner,
        out: &mut Vec<Problem>,
    ) -> Orphans {
        let n = nodes.len() as u64;
        let ioff = |ino: u64, f: usize| self.it.off(ino) + f;
        let meta = nodes[META_INO as usize];
        // From format 5 the meta inode also holds the grown inode table's tree (checked
        // before the walk, by `table::grown`) and its checksum; from format 6 the data
        // checksum table's root and height (also checked there).
        let sums = self.geo.data_sums();
        let only_head = match self.geo.grows() {
            true => Inode {
                orphan_next: meta.orphan_next,
                root: meta.root,
                height: meta.height,
                size: meta.size,
                size_check: meta.size_check, // checked by `table::grown` too (format 7)
                sum: meta.sum,
                xattr: if sums { meta.xattr } else { 0 },
                rdev: if sums { meta.rdev } else { 0 },
                ..Inode::default()
            },
            false => Inode {
                orphan_next: meta.orphan_next,
                ..Inode::default()
            },
        };
        if meta != only_head {
            out.push(Problem::stores(
                "meta inode 0: fields other than the orphan list head are set".into(),
                "cleared".into(),
                Some(META_INO),
                None,
                vec![(ioff(META_INO, 0), only_head.encode().to_vec())],
            ));
        }
        let mut got = Orphans {
            list: Vec::new(),
            visited: Vec::new(),
        };
        let mut seen = HashSet::new();
        let (mut pred, mut o) = (META_INO, meta.orphan_next);
        while o != 0 {
            let at = ioff(pred, field::ORPHAN);
            let bad_link = o >= n || !seen.insert(o);
            let node = if bad_link {
                Inode::default()
            } else {
                nodes[o as usize]
            };
            if bad_link || node.is(Kind::Dir) || node.is(Kind::Free) || node.kind().is_none() {
                out.push(Problem::stores(
                    format!(
                        "orphan list: bad link from inode {pred} to inode {o} (kind {})",
                        node.kind
                    ),
                    "list cut".into(),
                    Some(pred),
                    None,
                    vec![(at, vec![0; 8])],
                ));
                break;
            }
            // Not an orphan at all: taken off the list (its link count is set by a later round).
            let not_orphan = if node.links == 0 && named.contains(&o) {
                Some("has no links but a directory names it".to_string())
            } else if node.links > 0 && !node.is(Kind::File) {
                Some(format!("kind {} with links is not an orphan", node.kind))
            } else {
                None
            };
            if let Some(why) = not_orphan {
                out.push(Problem::stores(
                    format!("orphan {o}: {why}"),
                    "taken off the list".into(),
                    Some(o),
                    None,
                    vec![
                        (at, node.orphan_next.to_le_bytes().to_vec()),
                        (ioff(o, field::ORPHAN), vec![0; 8]),
                    ],
                ));
                break;
            }
            if node.links > 0 && node.trunc != node.size {
                out.push(Problem::stores(
                    format!(
                        "orphan {o}: a truncate to {} but size {}",
                        node.trunc, node.size
                    ),
                    "target set to the size".into(),
                    Some(o),
                    None,
                    vec![(ioff(o, field::TRUNC), node.size.to_le_bytes().to_vec())],
                ));
            }
            got.list.push(o);
            if !named.contains(&o) {
                got.visited.push(o);
                self.inode(o, &node, pruning.contains(&o), owner, out);
            }
            pred = o;
            o = node.orphan_next;
        }
        got
    }
}
