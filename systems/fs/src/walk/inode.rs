//! One inode's fields and tree: every block it owns is claimed, and each bad field or pointer is
//! a problem with the stores that fix it (a pointer cut, a field set, the inode freed).

use super::tree::{cut_store, Tree};
pub(super) use super::tree::{Data, Owner};
use super::Problem;
use crate::inode::{self as field, Inode, Kind, FLAGS_KNOWN};
use crate::itable::Itable;
use crate::layout::{Geometry, BLOCK, INODE, MAX_FILE_SIZE, MAX_HEIGHT, SYMLINK_MAX};
use crate::pm::Pm;
use crate::tree::Reader;
use pmkit_media::Media;
use std::collections::HashSet;

/// Visits inodes of one media.
pub(super) struct Visitor<'a, M> {
    pub pm: &'a Pm<M>,
    pub geo: &'a Geometry,
    pub it: &'a Itable,
}

impl<M: Media> Visitor<'_, M> {
    /// Check one inode and walk its tree, claiming its blocks in `owner`; returns the data
    /// blocks it keeps, in file order, for all but regular files (a file's are not needed and
    /// may be many). `pruning`: a truncate is in progress, so blocks beyond the size are allowed.
    pub(super) fn inode(
        &self,
        ino: u64,
        node: &Inode,
        pruning: bool,
        owner: &mut dyn Owner,
        out: &mut Vec<Problem>,
    ) -> Vec<Data> {
        let off = |f: usize| self.it.off(ino) + f;
        let keep = !node.is(Kind::File);
        let mut data = Vec::new();
        let mut end = 0;
        if node.height > MAX_HEIGHT {
            out.push(Problem::stores(
                format!("inode {ino}: tree height {} over {MAX_HEIGHT}", node.height),
                "tree cut, the file is a hole".into(),
                Some(ino),
                None,
                vec![(off(field::ROOT), vec![0u8; 9])], // root (8 bytes) and height (1)
            ));
        } else {
            let mut t = Tree {
                pm: self.pm,
                geo: self.geo,
                ino,
                owner,
                out: &mut *out,
                keep,
                data: &mut data,
                root_at: off(field::ROOT),
                end: 0,
            };
            t.pointer(node.root, node.height, 0, off(field::ROOT));
            end = t.end;
        }
        if self.without_data(ino, node, out) {
            return Vec::new();
        }
        let size = self.fields(ino, node, end * BLOCK as u64, out);
        // A regular file may own blocks beyond its size (preallocation, an append cut by a
        // crash); nothing else may, but a file with a truncate in progress.
        let end = size.div_ceil(BLOCK as u64);
        if keep && !pruning {
            data.retain(|d| {
                let beyond = d.file_block >= end;
                if beyond {
                    out.push(Problem::stores(
                        format!(
                            "inode {ino}: file block {} (block {}) beyond its size {size}",
                            d.file_block, d.block
                        ),
                        "pointer cut".into(),
                        Some(ino),
                        Some(d.block),
                        cut_store(self.geo, d.at, off(field::ROOT)),
                    ));
                }
                !beyond
            });
        }
        self.xattr_block(ino, node, owner, out);
        data.sort_unstable();
        data
    }

    /// The inode's xattr block, claimed for it: one out of the data area, owned twice,
    /// unreadable or not matching its checksum is dropped (its attributes are lost).
    fn xattr_block(&self, ino: u64, node: &Inode, owner: &mut dyn Owner, out: &mut Vec<Problem>) {
        let bad = node.xattr != 0
            && (!self.geo.is_data(node.xattr)
                || !owner.claim(node.xattr)
                || !self.xattr_block_ok(ino, node.xattr));
        if bad {
            out.push(Problem::stores(
                format!(
                    "inode {ino}: bad or shared xattr block {} (out of the data area, owned \
                     twice, unreadable or not matching its checksum)",
                    node.xattr
                ),
                "dropped (its extended attributes are lost)".into(),
                Some(ino),
                Some(node.xattr),
                vec![(self.it.off(ino) + field::XATTR, vec![0u8; 8])],
            ));
        }
    }

    /// Format 7: a size word that fails its check is damage. The true size is unknown; the
    /// fix stands in the end of the inode's last data block (as e2fsck does), sealed. Returns
    /// the size the rest of the checks hold to, if damaged.
    fn size_damaged(
        &self,
        ino: u64,
        node: &Inode,
        last_end: u64,
        out: &mut Vec<Problem>,
    ) -> Option<u64> {
        if !self.geo.checked_sizes() || node.size_check == field::size_check(node.size) {
            return None;
        }
        let word = field::size_word(true, last_end);
        out.push(Problem::stores(
            format!(
                "inode {ino}: its size word fails its check (it reads {} bytes): the true size \
                 is lost",
                node.size
            ),
            format!(
                "size set to {last_end}, the end of its last block (bytes at its end may be \
                 zeros, or a block's old bytes past the true end)"
            ),
            Some(ino),
            None,
            [(self.it.off(ino) + field::SIZE, word.to_le_bytes().to_vec())]
                .into_iter()
                .chain(self.tail_reset(ino, node))
                .collect(),
        ));
        Some(last_end)
    }

    /// The store that drops a file's append record once its size is set (a record speaks for
    /// one size); none for other kinds, whose tail word holds something else (a symlink's target
    /// checksum, a directory's tally).
    fn tail_reset(&self, ino: u64, node: &Inode) -> Option<(usize, Vec<u8>)> {
        node.is(Kind::File)
            .then(|| (self.it.off(ino) + field::TAIL, vec![0u8; 8]))
    }

    /// Whether an inode's xattr block (in the data area) decodes and, in format 3, matches its
    /// checksum.
    fn xattr_block_ok(&self, ino: u64, b: u64) -> bool {
        let mut buf = vec![0u8; BLOCK];
        self.pm.read(b as usize * BLOCK, &mut buf);
        (!self.geo.sums() || crate::xblock::sum_ok(ino, &buf))
            && crate::xblock::decode(&buf).is_ok()
    }

    /// Whether a symlink's target matches the checksum format 3 keeps (always, in format 2;
    /// a target block outside the data area is the tree walk's problem, not this one's).
    fn target_matches(&self, ino: u64, node: &Inode) -> bool {
        if !self.geo.sums() || !self.geo.is_data(node.root) {
            return true;
        }
        let mut t = vec![0u8; node.size.min(SYMLINK_MAX as u64) as usize];
        self.pm.read(node.root as usize * BLOCK, &mut t);
        node.tail == crate::inode::symlink_sum(ino, &t)
    }

    /// A symlink whose target is unreadable or does not match its checksum (freed) or a
    /// special file with data (cleared):
    /// true when the inode keeps no data.
    fn without_data(&self, ino: u64, node: &Inode, out: &mut Vec<Problem>) -> bool {
        let off = |f: usize| self.it.off(ino) + f;
        let bad_target = node.is(Kind::Symlink).then(|| {
            if node.size == 0 || node.size > SYMLINK_MAX as u64 || node.height != 0 {
                Some(format!(
                    "inode {ino}: symlink of {} bytes at height {}",
                    node.size, node.height
                ))
            } else if !self.target_matches(ino, node) {
                Some(format!(
                    "inode {ino}: symlink target does not match its checksum"
                ))
            } else {
                None
            }
        });
        if let Some(Some(what)) = bad_target {
            // Its target is gone, unreadable or not what was written: nothing to keep (its
            // record goes with it when the directory walk sees the inode free).
            out.push(Problem::stores(
                what,
                "freed".into(),
                Some(ino),
                None,
                vec![(off(0), vec![0u8; INODE])],
            ));
            return true;
        }
        let special = node.kind().is_some_and(Kind::is_special);
        if special && (node.size != 0 || node.root != 0 || node.height != 0) {
            out.push(Problem::stores(
                format!(
                    "inode {ino}: special file (kind {}) with size {} or data",
                    node.kind, node.size
                ),
                "size and data cleared".into(),
                Some(ino),
                None,
                vec![
                    (off(field::SIZE), vec![0u8; 8]),
                    (off(field::ROOT), vec![0u8; 9]),
                    (off(field::TAIL), vec![0u8; 8]),
                ],
            ));
            return true;
        }
        false
    }

    /// Flags, device number and size; returns the size the rest of the checks hold to.
    /// `last_end`: where the inode's last data block ends (a damaged size's stand-in).
    fn fields(&self, ino: u64, node: &Inode, last_end: u64, out: &mut Vec<Problem>) -> u64 {
        let off = |f: usize| self.it.off(ino) + f;
        let special = node.kind().is_some_and(Kind::is_special);
        let known = match self.geo.data_sums() {
            true => FLAGS_KNOWN,
            false => FLAGS_KNOWN & !field::FLAG_SUMS,
        };
        if node.flags & !known != 0 || (node.flags != 0 && !node.is(Kind::File)) {
            let keep = if node.is(Kind::File) {
                node.flags & known
            } else {
                0
            };
            out.push(Problem::stores(
                format!("inode {ino}: flags {:#x} on kind {}", node.flags, node.kind),
                format!("set to {keep:#x}"),
                Some(ino),
                None,
                vec![(off(field::FLAGS), vec![keep])],
            ));
        }
        if !special && node.rdev != 0 {
            out.push(Problem::stores(
                format!("inode {ino}: device number on a non-device"),
                "cleared".into(),
                Some(ino),
                None,
                vec![(off(field::RDEV), vec![0u8; 4])],
            ));
        }
        if let Some(size) = self.size_damaged(ino, node, last_end, out) {
            return size;
        }
        // Before format 7 the size word's high bits are part of the size (over the limit).
        let mut size = match self.geo.checked_sizes() {
            true => node.size,
            false => node.size | (node.size_check as u64) << 40,
        };
        if size > MAX_FILE_SIZE {
            out.push(Problem::stores(
                format!("inode {ino}: size {size} over the limit"),
                format!("set to {MAX_FILE_SIZE}"),
                Some(ino),
                None,
                [(off(field::SIZE), MAX_FILE_SIZE.to_le_bytes().to_vec())]
                    .into_iter()
                    .chain(self.tail_reset(ino, node))
                    .collect(),
            ));
            size = MAX_FILE_SIZE;
        }
        size
    }

    /// Walk the tree of inode `ino` alone (no field checks), claiming its blocks in `owner`;
    /// its data blocks in file order (the meta inode's: the grown inode table).
    pub(super) fn tree_only(
        &self,
        ino: u64,
        node: &Inode,
        owner: &mut dyn Owner,
        out: &mut Vec<Problem>,
    ) -> Vec<Data> {
        let at = self.it.off(ino) + field::ROOT;
        self.tree_at(ino, (node.root, node.height), at, owner, out)
    }

    /// [`Visitor::tree_only`] of a tree whose root pointer is stored at byte `at` (its height
    /// in the byte after it): a file's, or the data checksum table's in the meta inode.
    pub(super) fn tree_at(
        &self,
        ino: u64,
        (root, height): (u64, u8),
        at: usize,
        owner: &mut dyn Owner,
        out: &mut Vec<Problem>,
    ) -> Vec<Data> {
        let mut data = Vec::new();
        if height > MAX_HEIGHT {
            out.push(Problem::stores(
                format!("inode {ino}: tree height {height} over {MAX_HEIGHT}"),
                "tree cut".into(),
                Some(ino),
                None,
                vec![(at, vec![0u8; 9])],
            ));
            return data;
        }
        let mut t = Tree {
            pm: self.pm,
            geo: self.geo,
            ino,
            owner,
            out,
            keep: true,
            data: &mut data,
            root_at: at,
            end: 0,
        };
        t.pointer(root, height, 0, at);
        data.sort_unstable();
        data
    }

    /// Claim the blocks of a tree nothing reaches (bad pointers skipped, shared blocks not
    /// followed twice): a lost inode's, which a repair must not hand out before it links it.
    pub(super) fn reserve(&self, ptr: u64, level: u8, owner: &mut dyn Owner) {
        if ptr == 0 || !self.geo.is_data(ptr) || !owner.claim(ptr) || level == 0 {
            return;
        }
        for c in self.pm.node(ptr) {
            self.reserve(c, level - 1, owner);
        }
    }
}

/// An inode in use whose fields do not match their checksum (format 4; any inode of an older
/// format passes): the problem that frees it.
pub(super) fn unsealed(geo: &Geometry, it: &Itable, ino: u64, node: &Inode) -> Option<Problem> {
    if node.sum_ok_in(geo, ino) {
        return None;
    }
    Some(Problem::stores(
        format!(
            "inode {ino}: its fields do not match their checksum (kind {}, mode {:o}, {} links)",
            node.kind, node.mode, node.links
        ),
        "freed (which field is wrong cannot be known: the file and its data are lost)".into(),
        Some(ino),
        None,
        vec![(it.off(ino), vec![0u8; INODE])],
    ))
}

/// The walk's checks of one inode, for a mount that loaded the clean-unmount checkpoint: run
/// on the inode's first use, so no pointer of a tree the walk has not seen reaches the data
/// path. Every block must be in the data area, owned once within this inode, and used in the
/// checkpoint's bitmap (`used`: the first of `owned` it has free): a free block would be handed
/// out again. What only the whole walk sees (a block shared by two inodes, link counts,
/// unreachable inodes) is left to `check` and to the full walk of every mount after a crash.
/// Returns the data blocks (none for a regular file) as (file block, block).
pub(crate) fn verify_inode<M: Media>(
    pm: &Pm<M>,
    geo: &Geometry,
    it: &Itable,
    ino: u64,
    node: &Inode,
    used: &dyn Fn(&[u64]) -> Option<u64>,
) -> Result<Vec<(u64, u64)>, String> {
    if let Some(p) = unsealed(geo, it, ino, node) {
        return Err(p.what);
    }
    // A file may share a block with itself (format 8): its blocks are claimed as the walk does.
    let mut mine = super::tree::Claims {
        own: HashSet::new(),
        leaves: HashSet::new(),
        extra: Default::default(),
    };
    let mut out = Vec::new();
    let data = Visitor { pm, geo, it }.inode(ino, node, false, &mut mine, &mut out);
    let owned: Vec<u64> = mine.own.into_iter().collect();
    let mut problems: Vec<String> = out.into_iter().map(|p| p.what).collect();
    if let Some(b) = used(&owned) {
        problems.push(format!(
            "inode {ino}: owns block {b}, which the allocator has free"
        ));
    }
    match problems.is_empty() {
        true => Ok(data.iter().map(|d| (d.file_block, d.block)).collect()),
        false => Err(problems.join("; ")),
    }
}
