//! Damaged copies of a populated pool, as media fails: bytes flipped, a page zeroed, a page
//! copied over another. For each: `check` and a mount (touching everything it serves) never
//! panic or hang; `repair` either leaves a pool that mounts with a full walk and checks clean, or
//! says what it could not fix and writes nothing, and then mount refuses it rather than serve it.
//!
//! `PMKIT_DAMAGE_TRIALS=N` runs more (CI: 200), `PMKIT_SEED=S` other damage (a failure prints
//! its seed).

use pmkit_fs::{check, repair, Error, Fs, MkfsOptions, MountOptions, XattrFlags, ROOT};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Media;
use rand::Rng;

const LEN: usize = 4 << 20;
const BLOCK: usize = 4096;

/// A pool with a bit of everything: nested directories, small and multi-block files (a tree of
/// height 2), a symlink, hard links, xattrs, an unlinked-but-kept file is not possible across an
/// unmount, so none.
fn populated() -> Vec<u8> {
    let sim = CrashSim::new(LEN);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    let a = fs.mkdir(ROOT, b"a", 0o755).unwrap().ino;
    let b = fs.mkdir(a, b"b", 0o700).unwrap().ino;
    for (i, d) in [ROOT, a, b].into_iter().enumerate() {
        let f = fs.create(d, format!("f{i}").as_bytes(), 0o644).unwrap().ino;
        fs.write(f, 0, &vec![i as u8 + 1; 1000 + i * 5000]).unwrap();
        fs.setxattr(f, b"user.k", b"v", XattrFlags::Either).unwrap();
    }
    let big = fs.create(b, b"big", 0o644).unwrap().ino;
    fs.write(big, 0, &vec![9u8; 300 * BLOCK]).unwrap();
    fs.symlink(a, b"s", b"b/big").unwrap();
    fs.link(big, ROOT, b"hard").unwrap();
    fs.unmount();
    sim.image()
}

/// One kind of damage, chosen and placed by `r`.
fn damage(img: &mut [u8], r: &mut impl Rng) -> String {
    let pages = img.len() / BLOCK;
    // Mostly the metadata (the first pages and the far copy), sometimes anywhere.
    let page = |r: &mut dyn rand::RngCore| -> usize {
        if r.gen_bool(0.7) {
            r.gen_range(0..24)
        } else {
            r.gen_range(0..pages)
        }
    };
    match r.gen_range(0..3) {
        0 => {
            let n = r.gen_range(1..=16);
            let p = page(r);
            for _ in 0..n {
                let at = p * BLOCK + r.gen_range(0..BLOCK);
                img[at] ^= 1 << r.gen_range(0..8);
            }
            format!("{n} bits flipped in page {p}")
        }
        1 => {
            let p = page(r);
            img[p * BLOCK..(p + 1) * BLOCK].fill(0);
            format!("page {p} zeroed")
        }
        _ => {
            let (from, to) = (page(r), page(r));
            let src = img[from * BLOCK..(from + 1) * BLOCK].to_vec();
            img[to * BLOCK..(to + 1) * BLOCK].copy_from_slice(&src);
            format!("page {from} copied over page {to}")
        }
    }
}

fn touch_everything<M: Media>(fs: &Fs<M>, dir: u64, depth: usize) {
    for e in fs.readdir(dir).unwrap_or_default() {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let _ = fs.getattr(e.ino);
        let _ = fs.read(e.ino, 0, 1 << 20);
        let _ = fs.readlink(e.ino);
        let _ = fs.listxattr(e.ino);
        if depth < 8 {
            touch_everything(fs, e.ino, depth + 1);
        }
    }
}

#[test]
fn damaged_pools_never_panic_and_repair_leaves_them_mountable_or_says_why() {
    let trials: usize = std::env::var("PMKIT_DAMAGE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // A hang fails the test rather than CI's clock.
    std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_secs(600));
        eprintln!("damage trials still running after 600 s: a hang");
        std::process::abort();
    });
    let base = populated();
    let mut seeded = pmkit_testkit::Seeded::from_env_or("damage", 1);
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    let (mut repaired, mut refused) = (0, 0);
    for t in 0..trials {
        let mut img = base.clone();
        let what = damage(&mut img, &mut seeded.rng);
        let ctx = format!("trial {t} (seed {}): {what}", seeded.seed);
        let sim = CrashSim::from_image(img);
        let _ = check(&sim);
        if let Ok((fs, _)) = Fs::mount(CrashSim::from_image(sim.image()), &MountOptions::default())
        {
            touch_everything(&fs, ROOT, 0);
        }
        let before = sim.image();
        match repair(&sim) {
            Ok(rep) if rep.is_clean() => {
                let (fs, _) = Fs::mount(&sim, &walk)
                    .unwrap_or_else(|e| panic!("{ctx}: repaired, then mount refused: {e}"));
                touch_everything(&fs, ROOT, 0);
                fs.unmount();
                let after = check(&sim);
                assert!(after.is_clean(), "{ctx}: repaired, then check: {after:?}");
                repaired += 1;
            }
            Ok(rep) => {
                // Not fixed: said why; and the pool is not served as if it were fine.
                assert!(!rep.unfixed.is_empty(), "{ctx}");
                eprintln!("{ctx}: not repaired: {:?}", rep.unfixed);
                assert!(
                    sim.image() == before && rep.fixes.is_empty(),
                    "{ctx}: repair could not finish, yet wrote"
                );
                match Fs::mount(&sim, &walk) {
                    Err(_) => {}
                    Ok(_) => panic!("{ctx}: repair left {:?}, yet the pool mounts", rep.unfixed),
                }
                refused += 1;
            }
            Err(e @ (Error::Version { .. } | Error::NotFs(_))) => {
                assert!(sim.image() == before, "{ctx}: {e}, yet repair wrote");
                eprintln!("{ctx}: refused: {e}");
                refused += 1;
            }
            Err(e) => panic!("{ctx}: repair failed: {e}"),
        }
    }
    eprintln!(
        "{trials} damaged pools: {repaired} repaired and mounted, {refused} refused with a reason"
    );
}
