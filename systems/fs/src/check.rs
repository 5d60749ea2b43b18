//! `check`: the mount's recovery and walk on a copy-on-write overlay; names every problem and
//! never writes the media.

use crate::mount::{pick_sb, read_sbs};
use crate::overlay::Overlay;
use crate::pm::{Faults, Pm};
use crate::walk;
use crate::{ckpt, journal};
use pmkit_media::Media;

/// What `check` found.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CheckReport {
    /// Problems that make mount refuse the media.
    pub problems: Vec<String>,
    /// Things mount fixes by itself (a bad superblock copy, a transaction to roll back).
    pub notes: Vec<String>,
    /// Blocks of files with data checksums whose data does not match (format 6, `sums.rs`):
    /// the pool mounts, and reads there answer EIO. Nothing repair can recover.
    pub data_damage: Vec<String>,
    pub mount_gen: u64,
    pub clean: bool,
    pub files: u64,
    pub dirs: u64,
    pub blocks: u64,
    pub free_blocks: u64,
    /// Whole free 2 MiB chunks (room for that many huge blocks).
    pub free_huge_blocks: u64,
    /// Data blocks more than one file block points at (reflink: `Fs::clone_range`), and how
    /// many pointers they have beyond the first (blocks a copy of each would take).
    pub shared_blocks: u64,
    pub shared_extra: u64,
    pub inodes: u64,
    pub free_inodes: u64,
    pub orphans: u64,
    /// The clean-unmount checkpoint the next mount would load instead of walking: "matches the
    /// walk", or why the next mount walks. One that disagrees with the walk is a problem.
    pub checkpoint: String,
}

impl CheckReport {
    /// No problem that keeps mount from the media (data damage may still be listed).
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Check the file system on `media` without changing it.
pub fn check<M: Media>(media: &M) -> CheckReport {
    let mut r = CheckReport::default();
    let sbs = read_sbs(media);
    for (name, s) in ["A", "B"].iter().zip(&sbs) {
        if let Err(e) = s {
            r.notes.push(format!("superblock {name}: {e}"));
        }
    }
    let sb = match pick_sb(media) {
        Ok((sb, _)) => sb,
        Err(e @ crate::Error::Version { .. }) => {
            r.problems.push(e.to_string());
            return r;
        }
        Err(e) => {
            r.problems.push(format!("both superblocks are bad: {e}"));
            return r;
        }
    };
    (r.mount_gen, r.clean) = (sb.mount_gen, sb.clean);
    let over = Overlay::new(media);
    let pm = Pm::new(&over, Faults::default());
    match journal::recover(&pm, &sb.geo) {
        Ok((_, rep)) if rep.rolled_back > 0 => {
            r.notes.push(format!(
                "journal: {} uncommitted transactions to roll back ({} entries)",
                rep.rolled_back, rep.entries
            ));
        }
        Ok(_) => {}
        Err(p) => {
            r.problems.extend(p);
            return r;
        }
    }
    let w = walk::walk(&pm, &sb.geo);
    r.problems.extend(w.described());
    // After a crash a cut append is expected and the mount's walk undoes it. After a clean
    // unmount every append had finished, so a record that disagrees is damage to the bytes;
    // a walking mount still sets the size back, one from the checkpoint does not look.
    let how = match sb.clean {
        false => " (mount does it)",
        true => " (after a clean unmount this is damage: `pmkit fs mount --full-walk` does it)",
    };
    r.notes.extend(w.cut.iter().map(|c| c.describe() + how));
    if w.problems.is_empty() && sb.geo.data_sums() {
        // the sums are read through trees the walk found sound
        r.data_damage = crate::sums::scan(&pm, &w.itable, |i| w.alloc.inodes.is_used(i));
    }
    r.files = w.files;
    r.dirs = w.dirs_count;
    r.blocks = sb.geo.data_blocks();
    r.free_blocks = w.alloc.blocks.free();
    r.free_huge_blocks = w.alloc.blocks.free_chunks();
    let shared = w.alloc.shares.sorted();
    r.shared_blocks = shared.len() as u64;
    r.shared_extra = shared.iter().map(|&(_, n)| n as u64).sum();
    r.inodes = w.itable.count() - 1;
    r.free_inodes = w.alloc.inodes.free();
    r.orphans = w.orphans.len() as u64;
    r.checkpoint = match sb.clean {
        false => "not used: the last unmount was not clean (the next mount walks)".into(),
        true => match ckpt::load(&pm, &sb.geo, sb.mount_gen, w.itable.count()) {
            Err(e) => format!("not used: {e} (the next mount walks)"),
            Ok(s) => {
                let dirs: Vec<u64> = w.dirs.keys().copied().collect();
                let d = ckpt::diff(&s, &w.alloc, &dirs);
                let ok = d.is_empty();
                r.problems.extend(d);
                match ok {
                    true => "matches the walk (the next mount loads it)".into(),
                    false => "disagrees with the walk: mount with a full walk".into(),
                }
            }
        },
    };
    r
}
