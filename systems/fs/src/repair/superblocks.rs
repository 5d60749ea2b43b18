//! Repair's superblocks: a bad copy rewritten from the good one, or both rebuilt for the
//! geometry the pool was made with (given, or found among mkfs's defaults) when the journal and
//! the root directory sit where that geometry puts them and the tree fits it.

use super::{note, GeometryHint, RepairOptions, RepairReport};
use crate::inode::{Inode, Kind};
use crate::journal::{self, Header};
use crate::layout::{Geometry, Superblock, BLOCK, INODE, ROOT_INO, SB_B_V2, SB_LEN};
use crate::mount::read_sbs;
use crate::overlay::Overlay;
use crate::pm::{Faults, Pm};
use crate::walk::{self, Sign};
use crate::MkfsOptions;
use pmkit_media::Media;

/// The geometry to repair with: from a good superblock (rewriting a bad copy from it), or
/// rebuilt when both are bad; None (and why in `unfixed`) when it cannot be found.
pub(super) fn superblocks<M: Media>(
    pm: &Pm<M>,
    o: &RepairOptions,
    rep: &mut RepairReport,
) -> Option<Geometry> {
    let sbs = read_sbs(pm.media());
    let (good, bad) = match &sbs {
        [Ok(a), Ok(b)] => return Some(if b.mount_gen > a.mount_gen { b } else { a }.geo),
        [Ok(s), Err(why)] => (*s, Some((1, why))),
        [Err(why), Ok(s)] => (*s, Some((0, why))),
        [Err(a), Err(b)] => return rebuild_sb(pm, o, rep, a, b),
    };
    if let Some((i, why)) = bad {
        // One line, flushed and fenced: torn, it is still a bad copy (CRC) and the good one
        // stays what mount reads. Where the good copy's layout puts it.
        let name = ["A", "B"];
        let off = good.geo.sb_offs()[i];
        pm.write(off, &good.encode());
        pm.flush(off, SB_LEN);
        pm.fence();
        let what = format!(
            "superblock {} ({why}): rewritten from superblock {}",
            name[i],
            name[1 - i]
        );
        note(rep, what, off);
    }
    Some(good.geo)
}

/// The geometries mkfs's defaults may have given a pool of `bytes`: the inodes scale with the
/// size alone, the lanes with the CPUs of the machine that made it (any of 8..=64); then the
/// fixed defaults of older versions (4096 inodes, 8 lanes) and the tiny geometry.
fn default_geometries(bytes: u64, hint: impl Fn(MkfsOptions) -> GeometryHint) -> Vec<GeometryHint> {
    let here = MkfsOptions::default().resolved(bytes);
    let mut lanes = vec![here.lanes];
    lanes.extend((8..=crate::layout::MAX_LANES).filter(|&l| l != here.lanes));
    let mut v: Vec<GeometryHint> = lanes
        .into_iter()
        .map(|l| {
            hint(MkfsOptions {
                lanes: l,
                ..here.clone()
            })
        })
        .collect();
    let old = MkfsOptions {
        inodes: 4096,
        lanes: 8,
        ..MkfsOptions::default()
    };
    v.push(hint(old));
    v.push(hint(MkfsOptions::tiny()));
    debug_assert!(v.iter().all(|h| h.inodes > 0 && h.lanes > 0));
    v
}

/// Whether format 2's copy B slot (byte 2048) holds anything: format 3 keeps it zero.
fn v2_slot_used<M: Media>(pm: &Pm<M>) -> bool {
    let mut b = [0u8; SB_LEN];
    pm.read(SB_B_V2, &mut b);
    b.iter().any(|&x| x != 0)
}

/// The format of a pool whose superblocks are both lost, as `geo` (any format) places its
/// inodes. Format 3 and later leave format 2's copy-B slot zero: bytes there mean format 2.
/// Formats 3 to 5 share their layout; a root inode that carries format 4's checksum means 4
/// (format 3 leaves the word zero, and a CRC32C that happens to be zero reads as 3, which
/// checks less but never calls a format 3 pool's empty nodes damage), and a sealed meta inode
/// beside it means 5, or 6 when it roots a data checksum table (a format 6 pool that never had
/// one holds nothing format 5 does not, so it is rebuilt as 5). A root directory whose size
/// word carries its check means 7.
fn lost_format<M: Media>(pm: &Pm<M>, geo: &Geometry) -> u32 {
    if v2_slot_used(pm) {
        return 2;
    }
    let mut b = [0u8; INODE];
    pm.read(geo.inode_off(ROOT_INO), &mut b);
    let root = Inode::decode(&b);
    if root.sum == 0 || !root.sum_ok(ROOT_INO) {
        return 3;
    }
    // Format 5 seals the meta inode too (format 4 leaves its word zero).
    pm.read(geo.inode_off(crate::layout::META_INO), &mut b);
    let meta = Inode::decode(&b);
    let v5 = geo.at_format(5);
    match meta.sum != 0 && meta.sum_ok_in(&v5, crate::layout::META_INO) {
        // Format 7 seals every size in use, the root directory's too; no earlier format sets
        // the size word's bit 63. Format 8 differs from 7 only in that files may share data
        // blocks, which nothing in one inode shows: taken as 8, so shared blocks are not cut.
        true if root.size_check != 0 && root.size_check == crate::inode::size_check(root.size) => {
            crate::layout::VERSION
        }
        true if meta.xattr != 0 => 6,
        true => 5,
        false => 4,
    }
}

/// Both superblocks bad: try the geometry given, or the mkfs defaults; accept one only if the
/// journal lane headers and the root directory are where it puts them.
fn rebuild_sb<M: Media>(
    pm: &Pm<M>,
    o: &RepairOptions,
    rep: &mut RepairReport,
    a: &str,
    b: &str,
) -> Option<Geometry> {
    let blocks = (pm.media().len() / BLOCK) as u64;
    let hint = |m: MkfsOptions| GeometryHint {
        lanes: m.lanes,
        lane_entries: m.lane_entries,
        inodes: m.inodes,
    };
    let tries = match o.geometry {
        Some(g) => vec![g],
        None => default_geometries(pm.media().len() as u64, hint),
    };
    let mut why_not = Vec::new();
    for h in tries {
        let what = format!(
            "{} lanes of {} entries, {} inodes",
            h.lanes, h.lane_entries, h.inodes
        );
        let geo = match Geometry::new(blocks, h.lanes, h.lane_entries, h.inodes) {
            Ok(g) => g.at_format(lost_format(pm, &g)),
            Err(e) => {
                why_not.push(format!("{what}: {e}"));
                continue;
            }
        };
        if let Err(e) = plausible(pm, &geo).and_then(|()| fits(pm.media(), &geo)) {
            why_not.push(format!("{what}: {e}"));
            continue;
        }
        let sb = Superblock {
            geo,
            mount_gen: 1,
            clean: false,
        };
        // A then B, each fenced: a crash between leaves A good, which mount takes.
        for off in geo.sb_offs() {
            pm.write(off, &sb.encode());
            pm.flush(off, SB_LEN);
            pm.fence();
        }
        let what = format!(
            "both superblocks were bad (A: {a}; B: {b}): rebuilt for {what} (the journal lanes and the root directory are where that geometry puts them)"
        );
        note(rep, what, geo.sb_offs()[0]);
        return Some(geo);
    }
    rep.unfixed.push(format!(
        "both superblocks are bad (A: {a}; B: {b}) and the geometry could not be found ({}); \
         nothing was changed. Repair needs the numbers the pool was made with: run again with \
         --geometry LANES,ENTRIES,INODES (the --lanes, --lane-entries and --inodes given to \
         `pmkit fs mkfs`)",
        why_not.join("; ")
    ));
    None
}

/// Does the media look like a file system of `geo`: most lane headers a generation and a head
/// in range (a damaged one is reset later), and a root directory in inode slot 1?
fn plausible<M: Media>(pm: &Pm<M>, geo: &Geometry) -> std::result::Result<(), String> {
    let headers = (0..geo.lanes)
        .filter(|&l| {
            let h = Header::read(pm, geo, l);
            h.gen != 0 && h.head <= geo.lane_entries
        })
        .count() as u32;
    if headers * 2 < geo.lanes {
        return Err(format!(
            "only {headers} of {} journal lane headers where it puts them",
            geo.lanes
        ));
    }
    let mut b = [0u8; INODE];
    pm.read(geo.inode_off(ROOT_INO), &mut b);
    let root = Inode::decode(&b);
    if !root.is(Kind::Dir)
        || root.parent != ROOT_INO
        || root.links < 2
        || !root.size.is_multiple_of(BLOCK as u64)
    {
        return Err("no root directory in inode slot 1".into());
    }
    Ok(())
}

/// The signs of a wrong geometry, from the mount walk run on a copy-on-write overlay with
/// `geo`: a pointer into its journal or inode table (too many inodes: data blocks inside the
/// table) or a record naming an inode past its table that the media could hold (too few).
/// Repair would cut those apart, so a geometry that shows them is refused. (Pointers past the
/// media and inode numbers no media could hold are plain damage, not signs.)
fn fits<M: Media>(media: &M, geo: &Geometry) -> std::result::Result<(), String> {
    let over = Overlay::new(media);
    let pm = Pm::new(&over, Faults::default());
    let _ = journal::recover(&pm, geo); // rolled back on the overlay when the journal allows
    let w = walk::walk(&pm, geo);
    let most_inodes = (media.len() / INODE) as u64;
    let sign = w.problems.iter().find(|p| match p.sign {
        Some(Sign::BlockOutside(b)) => b > 0 && b < geo.data_block,
        Some(Sign::InodeOutOfRange(i)) => i < most_inodes,
        None => false,
    });
    match sign {
        Some(p) => Err(format!("the tree does not fit it ({})", p.what)),
        None => Ok(()),
    }
}
