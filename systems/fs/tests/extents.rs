//! FIEMAP's extents (`Fs::extents`): random block writes into a sparse file, and the extents
//! must cover every block written and exactly what SEEK_DATA/SEEK_HOLE call data, in order, each run contiguous in the file and on the
//! media, merged where both are, the last flagged; a range asks only for what meets it.

use pmkit_fs::{Extent, Fs, MkfsOptions, MountOptions, Seek, ROOT};
use pmkit_media::crashsim::CrashSim;
use std::collections::BTreeSet;

const B: u64 = 4096;

#[test]
fn extents_cover_exactly_the_blocks_written() {
    let sim = CrashSim::new(4 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..20 {
        let f = fs
            .create(ROOT, format!("f{round}").as_bytes(), 0o644)
            .unwrap()
            .ino;
        let mut written = BTreeSet::new();
        for _ in 0..(round % 7 + 1) * 4 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let blk = seed % 200;
            fs.write(f, blk * B, &[1u8; B as usize]).unwrap();
            written.insert(blk);
        }
        let all = fs.extents(f, 0, u64::MAX).unwrap();
        let mut got = BTreeSet::new();
        for (k, e) in all.iter().enumerate() {
            assert!(e.len > 0 && e.len % B == 0 && e.logical % B == 0, "{e:?}");
            if let Some(p) = k.checked_sub(1).map(|p| all[p]) {
                assert!(p.logical + p.len <= e.logical, "in order: {p:?} {e:?}");
                let touching = p.logical + p.len == e.logical && p.physical + p.len == e.physical;
                assert!(!touching, "merged where contiguous: {p:?} {e:?}");
            }
            assert_eq!(e.last, k + 1 == all.len(), "{e:?}");
            got.extend((e.logical / B)..(e.logical + e.len) / B);
        }
        // every block written, and what SEEK_DATA and SEEK_HOLE call data (blocks allocated
        // ahead of the size and since covered by it count too: they read as zeros)
        assert!(got.is_superset(&written), "round {round}");
        let size = fs.getattr(f).unwrap().size;
        let mut data = BTreeSet::new();
        let mut at = 0;
        while let Ok(d) = fs.seek(f, at, Seek::Data) {
            let h = fs.seek(f, d, Seek::Hole).unwrap();
            data.extend(d / B..h.div_ceil(B));
            at = h;
            if at >= size {
                break;
            }
        }
        assert_eq!(got, data, "round {round}");
        // a range: the extents that meet it, cut to its blocks
        let first = *written.iter().next().unwrap();
        let part: Vec<Extent> = fs.extents(f, first * B, B).unwrap();
        assert_eq!(part.len(), 1);
        assert_eq!(part[0].logical, first * B);
    }
    // a hole only, and an empty file: no extents
    let h = fs.create(ROOT, b"hole", 0o644).unwrap().ino;
    assert!(fs.extents(h, 0, u64::MAX).unwrap().is_empty());
    fs.write(h, 10 * B, b"x").unwrap();
    assert!(fs.extents(h, 0, 10 * B).unwrap().is_empty());
    assert_eq!(fs.extents(h, 0, u64::MAX).unwrap().len(), 1);
}
