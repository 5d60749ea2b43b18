//! The clean-unmount checkpoint: what the mount walk rebuilds from every tree (the block and
//! inode bitmaps, and which inodes are directories), saved by a clean unmount so that the next
//! mount reads (blocks + inodes) / 8 bytes instead of the whole pool. Directory indexes are then
//! read when first used (`dir::Dirs`). The kernel's PMFS keeps its allocator across clean
//! unmounts the same way.
//!
//! On the media: the contents in free data blocks, and one record line in block 0 between the
//! two superblock copies that says where they are, for which mount generation, and their CRC.
//! Why this is crash-safe without the journal:
//! - the contents, then the record, are made durable before the superblock says clean, so a
//!   superblock that says clean names a complete checkpoint (or an older, stale record);
//! - a checkpoint counts only with a clean superblock of the same mount generation, and every
//!   mount writes the superblock unclean, with the next generation, before it changes anything:
//!   after a crash the superblock is unclean and the walk runs;
//! - the blocks the contents occupy are free in the bitmap they save, so loading them frees
//!   them, and no tree can point into them while they count.
//!
//! In format 8 the contents end with the shared blocks' counts (`share.rs`): how many, then
//! (block, extra pointers) pairs in block order.
//!
//! mkfs and repair clear the record. `check` loads the checkpoint beside its walk and reports
//! any difference as a problem.

use crate::alloc::{Alloc, Bitmap};
use crate::layout::{
    put, u32_at, u64_at, Geometry, BLOCK, LINE, META_INO, ROOT_INO, SB_LEN, SB_OFFS,
};
use crate::pm::Pm;
use pmkit_media::Media;

/// Byte offset of the record line: block 0, between the superblock copies.
pub(crate) const REC_OFF: usize = 1024;
const _: () = assert!(REC_OFF >= SB_OFFS[0] + SB_LEN && REC_OFF + LINE <= SB_OFFS[1]);
const REC_MAGIC: u64 = u64::from_le_bytes(*b"PMFSCKP1");
/// The header of the contents: blocks, inodes, directories (three u64).
const HEAD: usize = 24;

/// What a checkpoint holds.
#[derive(Debug)]
pub(crate) struct Saved {
    pub blocks: Bitmap,
    pub inodes: Bitmap,
    pub dirs: Vec<u64>,
    /// Format 8: the shared blocks and their extra pointers.
    pub shares: crate::shares::Shares,
}

// Where each field of the record line lies; the CRC32C of the line before it last.
const R_MAGIC: usize = 0;
const R_GEN: usize = 8;
const R_FIRST: usize = 16;
const R_LEN: usize = 24;
const R_CRC: usize = 32;
const R_LINE_CRC: usize = LINE - 4;
const _: () = assert!(
    R_MAGIC + 8 == R_GEN
        && R_GEN + 8 == R_FIRST
        && R_FIRST + 8 == R_LEN
        && R_LEN + 8 == R_CRC
        && R_CRC + 4 <= R_LINE_CRC
);

#[derive(Debug, PartialEq, Eq)]
struct Record {
    gen: u64,
    first: u64,
    len: u64,
    crc: u32,
}

impl Record {
    fn encode(&self) -> [u8; LINE] {
        let mut b = [0u8; LINE];
        put(&mut b, R_MAGIC, &REC_MAGIC.to_le_bytes());
        put(&mut b, R_GEN, &self.gen.to_le_bytes());
        put(&mut b, R_FIRST, &self.first.to_le_bytes());
        put(&mut b, R_LEN, &self.len.to_le_bytes());
        put(&mut b, R_CRC, &self.crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..R_LINE_CRC]);
        put(&mut b, R_LINE_CRC, &crc.to_le_bytes());
        debug_assert!(
            Record::decode(&b).is_ok_and(|r| r == *self),
            "decode after encode"
        );
        b
    }
    fn decode(b: &[u8; LINE]) -> Result<Record, String> {
        if u64_at(b, R_MAGIC) != REC_MAGIC {
            return Err("none saved".into());
        }
        if crc32c::crc32c(&b[..R_LINE_CRC]) != u32_at(b, R_LINE_CRC) {
            return Err("record checksum mismatch".into());
        }
        Ok(Record {
            gen: u64_at(b, R_GEN),
            first: u64_at(b, R_FIRST),
            len: u64_at(b, R_LEN),
            crc: u32_at(b, R_CRC),
        })
    }
}

/// Bytes of the contents for `inodes` (the table's count, grown or not), `dirs` and `shared`
/// blocks (format 8).
fn contents_len(geo: &Geometry, inodes: u64, dirs: usize, shared: usize) -> usize {
    let shares = match geo.shares() {
        true => 8 + 16 * shared,
        false => 0,
    };
    HEAD + 8 * (geo.blocks.div_ceil(64) + inodes.div_ceil(64)) as usize + 8 * dirs + shares
}

/// Save the checkpoint of generation `gen` (the superblock about to be written clean). Returns
/// false, having written nothing, when no run of free blocks can hold it: the next mount walks.
pub(crate) fn save<M: Media>(
    pm: &Pm<M>,
    geo: &Geometry,
    gen: u64,
    alloc: &Alloc,
    dirs: &[u64],
) -> bool {
    let inodes = alloc.inodes.len();
    assert!(
        geo.shares() || alloc.shares.is_empty(),
        "shared blocks before format 8"
    );
    let shared = alloc.shares.sorted();
    let len = contents_len(geo, inodes, dirs.len(), shared.len());
    let nblocks = len.div_ceil(BLOCK) as u64;
    let Some(first) = alloc.blocks.find_run(nblocks) else {
        return false;
    };
    assert!(geo.is_data(first) && geo.is_data(first + nblocks - 1));
    let mut b = Vec::with_capacity(len);
    for v in [geo.blocks, inodes, dirs.len() as u64] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for w in alloc.blocks.words().iter().chain(alloc.inodes.words()) {
        b.extend_from_slice(&w.to_le_bytes());
    }
    for d in dirs {
        b.extend_from_slice(&d.to_le_bytes());
    }
    if geo.shares() {
        b.extend_from_slice(&(shared.len() as u64).to_le_bytes());
        for (blk, n) in shared {
            b.extend_from_slice(&blk.to_le_bytes());
            b.extend_from_slice(&(n as u64).to_le_bytes());
        }
    }
    assert_eq!(b.len(), len);
    let off = first as usize * BLOCK;
    pm.write(off, &b);
    pm.flush(off, len);
    let rec = Record {
        gen,
        first,
        len: len as u64,
        crc: crc32c::crc32c(&b),
    };
    pm.write(REC_OFF, &rec.encode());
    pm.flush(REC_OFF, LINE);
    pm.fence();
    true
}

/// Forget any checkpoint (mkfs, repair).
pub(crate) fn clear<M: Media>(pm: &Pm<M>) {
    pm.write(REC_OFF, &[0u8; LINE]);
    pm.flush(REC_OFF, LINE);
    pm.fence();
}

/// The checkpoint of generation `gen` for a table of `inodes`, or why there is none to use.
pub(crate) fn load<M: Media>(
    pm: &Pm<M>,
    geo: &Geometry,
    gen: u64,
    inodes: u64,
) -> Result<Saved, String> {
    let (rec, b) = contents(pm, geo, gen, inodes)?;
    let (len, nblocks) = (b.len(), (b.len() as u64).div_ceil(BLOCK as u64));
    let mut words = b
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8")));
    let mut next = || words.next().expect("length checked");
    let (nb, ni, nd) = (next(), next(), next());
    // The shared count lies after the directories: read where it would be, if the length
    // holds it, before the length is held to everything.
    let before = contents_len(geo, inodes, nd.min(inodes) as usize, 0);
    let ns = match geo.shares() && before <= len {
        true => u64_at(&b, before - 8),
        false => 0,
    };
    let fits = ns <= geo.data_blocks()
        && len == contents_len(geo, inodes, nd.min(inodes) as usize, ns as usize);
    if nb != geo.blocks || ni != inodes || nd > inodes || !fits {
        let (b, n) = (geo.blocks, inodes);
        return Err(format!(
            "contents for {nb} blocks, {ni} inodes, {nd} directories do not \
             match the geometry ({b} blocks, {n} inodes) or the record's length {len}"
        ));
    }
    let mut take = |n: u64| (0..n.div_ceil(64)).map(|_| next()).collect::<Vec<u64>>();
    let (bw, iw) = (take(nb), take(ni));
    let dirs: Vec<u64> = (0..nd).map(|_| next()).collect();
    let pairs: Vec<(u64, u64)> = match geo.shares() {
        true => {
            assert_eq!(next(), ns, "read above");
            (0..ns).map(|_| (next(), next())).collect()
        }
        false => Vec::new(),
    };
    let bad = |what: &str| Err(format!("contents disagree with the layout: {what}"));
    let Some(blocks) = Bitmap::from_words(nb, bw) else {
        return bad("block bits beyond the end");
    };
    let Some(inodes) = Bitmap::from_words(ni, iw) else {
        return bad("inode bits beyond the end");
    };
    if (0..geo.data_block).any(|b| !blocks.is_used(b)) {
        return bad("a metadata block is marked free");
    }
    if (rec.first..rec.first + nblocks).any(|b| blocks.is_used(b)) {
        return bad("its own blocks are marked used");
    }
    if !inodes.is_used(META_INO) || !inodes.is_used(ROOT_INO) || !dirs.contains(&ROOT_INO) {
        return bad("the meta or root inode is missing");
    }
    if dirs.iter().any(|&d| d >= ni || !inodes.is_used(d)) {
        return bad("a directory names a free or out-of-range inode");
    }
    let Some(shares) = shares_of(geo, &blocks, pairs) else {
        return bad("a shared block is repeated, free, outside the data area or counted 0");
    };
    Ok(Saved {
        blocks,
        inodes,
        dirs,
        shares,
    })
}

/// The record of generation `gen` and the contents it names, of a length a table of `inodes`
/// can have, their checksum held.
fn contents<M: Media>(
    pm: &Pm<M>,
    geo: &Geometry,
    gen: u64,
    inodes: u64,
) -> Result<(Record, Vec<u8>), String> {
    let mut line = [0u8; LINE];
    pm.read(REC_OFF, &mut line);
    let rec = Record::decode(&line)?;
    if rec.gen != gen {
        return Err(format!("stale (generation {}, superblock {gen})", rec.gen));
    }
    let len = rec.len as usize;
    let end = rec.first.checked_add((len as u64).div_ceil(BLOCK as u64));
    let most = contents_len(geo, inodes, inodes as usize, geo.data_blocks() as usize);
    let fits = (contents_len(geo, inodes, 1, 0)..=most).contains(&len)
        && geo.is_data(rec.first)
        && end.is_some_and(|e| e <= geo.data_end());
    if !fits {
        return Err(format!(
            "record names {len} bytes at block {}, which this geometry cannot hold",
            rec.first
        ));
    }
    let mut b = vec![0u8; len];
    pm.read(rec.first as usize * BLOCK, &mut b);
    if crc32c::crc32c(&b) != rec.crc {
        return Err("contents checksum mismatch".into());
    }
    Ok((rec, b))
}

/// The counts of the saved (block, extra pointers) pairs, if each names a different data block
/// in use with a count of at least 1.
fn shares_of(
    geo: &Geometry,
    blocks: &Bitmap,
    pairs: Vec<(u64, u64)>,
) -> Option<crate::shares::Shares> {
    let mut extra = std::collections::HashMap::with_capacity(pairs.len());
    for (blk, n) in pairs {
        let ok = geo.is_data(blk) && blocks.is_used(blk) && (1..=u32::MAX as u64).contains(&n);
        if !ok || extra.insert(blk, n as u32).is_some() {
            return None;
        }
    }
    Some(crate::shares::Shares::from_extra(extra))
}

/// Where the saved state and the walk's differ (nothing: they agree).
pub(crate) fn diff(s: &Saved, alloc: &Alloc, walk_dirs: &[u64]) -> Vec<String> {
    let mut out = Vec::new();
    let first_diff = |a: &Bitmap, b: &Bitmap| (0..a.len()).find(|&i| a.is_used(i) != b.is_used(i));
    if let Some(b) = first_diff(&s.blocks, &alloc.blocks) {
        out.push(format!(
            "clean-unmount checkpoint: block {b} is {} there but {} by the walk ({} against {} \
             free)",
            if s.blocks.is_used(b) { "used" } else { "free" },
            if alloc.blocks.is_used(b) {
                "used"
            } else {
                "free"
            },
            s.blocks.free(),
            alloc.blocks.free()
        ));
    }
    if let Some(i) = first_diff(&s.inodes, &alloc.inodes) {
        out.push(format!(
            "clean-unmount checkpoint: inode {i} is {} there but {} by the walk",
            if s.inodes.is_used(i) { "used" } else { "free" },
            if alloc.inodes.is_used(i) {
                "used"
            } else {
                "free"
            }
        ));
    }
    let (sa, sb) = (s.shares.sorted(), alloc.shares.sorted());
    if sa != sb {
        let first = sa.iter().zip(&sb).find(|(x, y)| x != y);
        out.push(format!(
            "clean-unmount checkpoint: {} shared blocks there, {} counted by the walk{}",
            sa.len(),
            sb.len(),
            match first {
                Some((x, y)) => format!(" (first difference: {x:?} against {y:?})"),
                None => String::new(),
            }
        ));
    }
    let (mut a, mut b) = (s.dirs.clone(), walk_dirs.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    if a != b {
        out.push(format!(
            "clean-unmount checkpoint: {} directories there, {} found by the walk",
            a.len(),
            b.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pm::Faults;
    use pmkit_media::crashsim::CrashSim;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// What is saved loads back equal; another generation or any flipped byte of the
        /// contents or the record loads nothing.
        #[test]
        fn saved_state_loads_back_and_damage_is_refused(
            blocks in 300u64..2000,
            inodes in 2u32..700,
            used_b in prop::collection::vec(0.0f64..1.0, 0..120),
            used_i in prop::collection::vec(0.0f64..1.0, 0..60),
            gen in 1u64..1000,
            flip in 0.0f64..1.0,
        ) {
            let geo = Geometry::new(blocks, 1, 64, inodes).unwrap();
            let sim = CrashSim::new(blocks as usize * BLOCK);
            let pm = Pm::new(&sim, Faults::default());
            let mut a = Alloc::base(&geo);
            // Used blocks in the lower half of the data area, so a run stays free for the
            // checkpoint itself.
            let span = (geo.blocks - geo.data_block) / 2;
            for f in used_b {
                a.blocks.set(geo.data_block + (f * span as f64) as u64);
            }
            a.inodes.set(ROOT_INO);
            let mut dirs = vec![ROOT_INO];
            for (k, f) in used_i.iter().enumerate() {
                let i = (f * geo.inodes as f64) as u64;
                if a.inodes.set(i) && k % 3 == 0 {
                    dirs.push(i);
                }
            }
            prop_assert!(save(&pm, &geo, gen, &a, &dirs));
            let n = geo.inodes as u64;
            let s = load(&pm, &geo, gen, n).unwrap();
            prop_assert!(diff(&s, &a, &dirs).is_empty(), "{:?}", diff(&s, &a, &dirs));
            prop_assert_eq!((s.blocks.free(), s.inodes.free()), (a.blocks.free(), a.inodes.free()));
            prop_assert_eq!(s.blocks.free_chunks(), a.blocks.free_chunks());
            prop_assert!(load(&pm, &geo, gen + 1, n).unwrap_err().starts_with("stale"));
            // One flipped byte, in the record or in the contents.
            let mut line = [0u8; LINE];
            pm.read(REC_OFF, &mut line);
            let rec = Record::decode(&line).unwrap();
            let (first, len) = (rec.first as usize, rec.len as usize);
            let at = if flip < 0.2 {
                REC_OFF + (flip / 0.2 * LINE as f64) as usize
            } else {
                first * BLOCK + ((flip - 0.2) / 0.8 * len as f64) as usize
            };
            let mut b = [0u8; 1];
            sim.read(at, &mut b);
            sim.write(at, &[b[0] ^ 0x10]);
            prop_assert!(load(&pm, &geo, gen, n).is_err(), "byte {} flipped", at);
        }
    }
}
