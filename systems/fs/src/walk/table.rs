//! The inode table's grown part (format 5): the meta inode's tree, checked before anything else
//! (every later check reads inodes through it). Its blocks are claimed like a file's; a table
//! block the tree no longer reaches ends the table there, and the inodes past it are lost
//! (records naming them are then out of range, which the walk names in turn).

use super::inode::{Data, Visitor};
use super::Problem;
use crate::alloc::Bitmap;
use crate::inode::{self as field, Inode};
use crate::itable::{Itable, PER_BLOCK};
use crate::layout::{Geometry, BLOCK, INODE, META_INO};
use crate::pm::Pm;
use pmkit_media::Media;

/// The meta inode as the walk takes it, and the grown table's blocks in order; their blocks
/// (and tree nodes) claimed in `blocks`.
pub(super) fn grown<M: Media>(
    pm: &Pm<M>,
    geo: &Geometry,
    blocks: &mut Bitmap,
    out: &mut Vec<Problem>,
) -> (Inode, Vec<u64>) {
    let mut b = [0u8; INODE];
    pm.read(geo.inode_off(META_INO), &mut b);
    let meta = Inode::decode(&b);
    if !geo.grows() {
        return (meta, Vec::new());
    }
    let at = geo.inode_off(META_INO);
    if !meta.sum_ok_in(geo, META_INO) {
        let fresh = Inode::default().seal_in(geo, META_INO);
        out.push(Problem::stores(
            "meta inode 0 (the grown inode table's tree and the orphan list head) does not \
             match its checksum"
                .into(),
            format!(
                "reset: the inode table keeps its first {} inodes, those past them are lost, \
                 and orphans are linked into lost+found",
                geo.inodes
            ),
            Some(META_INO),
            None,
            vec![(at, fresh.encode().to_vec())],
        ));
        return (Inode::default(), Vec::new());
    }
    let it = Itable::new(geo, &[], true);
    let v = Visitor { pm, geo, it: &it };
    sums_table(&v, &meta, at, blocks, out);
    let data = v.tree_only(META_INO, &meta, blocks, out);
    let keep = table_length(geo, &meta, &data, out);
    (meta, data[..keep].iter().map(|d| d.block).collect())
}

/// The data checksum table's tree (format 6, `sums.rs`), rooted in the meta inode: its blocks
/// claimed. A bad height, or a pointer the walk cuts, costs the sums of the blocks it covered:
/// the mount makes missing leaves again (zeroed), and summed files there then answer EIO,
/// never unchecked data.
fn sums_table<M: Media>(
    v: &Visitor<'_, M>,
    meta: &Inode,
    at: usize,
    blocks: &mut Bitmap,
    out: &mut Vec<Problem>,
) {
    if !v.geo.data_sums() || meta.xattr == 0 {
        return;
    }
    if meta.rdev > crate::layout::MAX_HEIGHT as u32 {
        out.push(Problem::stores(
            format!(
                "meta inode 0: data checksum table height {} over {}",
                meta.rdev,
                crate::layout::MAX_HEIGHT
            ),
            "table dropped: summed files answer EIO until their checksums are set again".into(),
            Some(META_INO),
            None,
            vec![
                (at + field::XATTR, vec![0u8; 8]),
                (at + field::RDEV, vec![0u8; 4]),
            ],
        ));
        return;
    }
    let table = crate::sums::table_of(meta);
    v.tree_at(META_INO, table, at + field::XATTR, blocks, out);
}

/// How many grown blocks the table keeps: those before the first gap in the meta inode's tree,
/// and no more than its size says (unless the size fails its check, format 7). A disagreement
/// is a problem whose fix cuts the table there.
fn table_length(geo: &Geometry, meta: &Inode, data: &[Data], out: &mut Vec<Problem>) -> usize {
    let at = geo.inode_off(META_INO);
    let whole = data
        .iter()
        .enumerate()
        .take_while(|&(k, d)| d.file_block == k as u64)
        .count();
    let said = meta.size / BLOCK as u64;
    // Format 7: a size that fails its check is no count at all.
    let unsure = geo.checked_sizes() && meta.size_check != field::size_check(meta.size);
    let uneven = !meta.size.is_multiple_of(BLOCK as u64);
    if unsure || uneven || data.len() as u64 != said || whole < data.len() {
        let size = (whole * BLOCK) as u64;
        let word = field::size_word(geo.checked_sizes(), size);
        let mut writes = vec![(at + field::SIZE, word.to_le_bytes().to_vec())];
        let root = at + field::ROOT;
        writes.extend(
            data[whole..]
                .iter()
                .flat_map(|d| super::tree::cut_store(geo, d.at, root)),
        );
        let first_lost = geo.inodes as u64 + whole as u64 * PER_BLOCK;
        out.push(Problem::stores(
            format!(
                "inode table: the meta inode says {said} grown blocks{}, its tree reaches {} \
                 ({whole} before the first gap)",
                if unsure {
                    " (its size word fails its check)"
                } else {
                    ""
                },
                data.len()
            ),
            format!(
                "table cut to {whole} grown blocks: inodes from {first_lost} on are lost \
                 (records naming them are removed)"
            ),
            Some(META_INO),
            None,
            writes,
        ));
    }
    if unsure {
        whole
    } else {
        whole.min(said as usize)
    }
}
