//! Damaged copies of a populated pool, as media fails: bytes flipped, a page zeroed, a page
//! copied over another. For each: `check` and a mount (touching everything it serves) never
//! panic or hang; what the mount serves without an error is what the pool held (names, kinds,
//! modes, owners, link counts, sizes, xattrs, symlink targets, and the bytes of every file whose
//! data pages the damage missed: file data carries no checksum by default); `repair` either
//! leaves a pool that mounts with a full walk and checks clean, or says what it could not fix and
//! writes nothing, and then mount refuses it rather than serve it.
//!
//! `PMKIT_DAMAGE_TRIALS=N` runs more (CI: 200), `PMKIT_SEED=S` other damage (a failure prints
//! its seed).

use pmkit_fs::{check, repair, Error, Fs, Kind, MkfsOptions, MountOptions, XattrFlags, ROOT};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Media;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};

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

/// One kind of damage, chosen and placed by `r`: what it was, and the pages it changed.
fn damage(img: &mut [u8], r: &mut impl Rng) -> (String, Vec<usize>) {
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
            (format!("{n} bits flipped in page {p}"), vec![p])
        }
        1 => {
            let p = page(r);
            img[p * BLOCK..(p + 1) * BLOCK].fill(0);
            (format!("page {p} zeroed"), vec![p])
        }
        _ => {
            let (from, to) = (page(r), page(r));
            let src = img[from * BLOCK..(from + 1) * BLOCK].to_vec();
            img[to * BLOCK..(to + 1) * BLOCK].copy_from_slice(&src);
            (format!("page {from} copied over page {to}"), vec![to])
        }
    }
}

/// What a path serves: its attributes but the times (which carry no check), its xattrs, its
/// symlink target, its names (a directory's), its bytes (a file's) and its data pages.
#[derive(Debug, PartialEq)]
struct Served {
    kind: Kind,
    mode: u32,
    uid: u32,
    gid: u32,
    links: u32,
    size: u64,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    target: Vec<u8>,
    names: BTreeSet<Vec<u8>>,
    bytes: Vec<u8>,
}

/// Every path below `dir` as the pool serves it, with each file's data pages (its extents).
fn served_tree<M: Media>(
    fs: &Fs<M>,
    dir: u64,
    path: &str,
    out: &mut BTreeMap<String, (Served, Vec<usize>)>,
) {
    for e in fs.readdir(dir).unwrap() {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
        let s = serve(fs, e.ino).unwrap();
        let pages = match s.kind {
            Kind::File => fs
                .extents(e.ino, 0, u64::MAX)
                .unwrap()
                .iter()
                .flat_map(|x| {
                    x.physical / BLOCK as u64..(x.physical + x.len).div_ceil(BLOCK as u64)
                })
                .map(|b| b as usize)
                .collect(),
            _ => Vec::new(),
        };
        if s.kind == Kind::Dir {
            served_tree(fs, e.ino, &p, out);
        }
        out.insert(p, (s, pages));
    }
}

/// What inode `ino` serves, or the first error.
fn serve<M: Media>(fs: &Fs<M>, ino: u64) -> Result<Served, Error> {
    let a = fs.getattr(ino)?;
    let mut xattrs = BTreeMap::new();
    for n in fs.listxattr(ino)? {
        let v = fs.getxattr(ino, &n)?;
        xattrs.insert(n, v);
    }
    let target = match a.kind {
        Kind::Symlink => fs.readlink(ino)?,
        _ => Vec::new(),
    };
    let names = match a.kind {
        Kind::Dir => fs.readdir(ino)?.into_iter().map(|e| e.name).collect(),
        _ => BTreeSet::new(),
    };
    let bytes = match a.kind {
        Kind::File => fs.read(ino, 0, a.size as usize + 1)?,
        _ => Vec::new(),
    };
    Ok(Served {
        kind: a.kind,
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        links: a.links,
        size: a.size,
        xattrs,
        target,
        names,
        bytes,
    })
}

/// Each path the damaged pool serves without an error, held to what the pool held: anything
/// served differently is damage served silently. A file's bytes are held only when the damage
/// missed its data pages. Returns the differences.
fn served_wrong<M: Media>(
    fs: &Fs<M>,
    base: &BTreeMap<String, (Served, Vec<usize>)>,
    hit: &[usize],
) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut inos = BTreeMap::from([(String::new(), ROOT)]);
    for (path, (want, pages)) in base {
        let (parent, name) = path.rsplit_once('/').expect("a path");
        let Some(&dir) = inos.get(parent) else {
            continue; // its directory was not served
        };
        let ino = match fs.lookup(dir, name.as_bytes()) {
            Ok(a) => a.ino,
            Err(e) if e.errno() == libc::EIO => continue,
            Err(e) => {
                wrong.push(format!("{path}: {e}, served as if it were not there"));
                continue;
            }
        };
        inos.insert(path.clone(), ino);
        let Ok(mut got) = serve(fs, ino) else {
            continue;
        };
        if pages.iter().any(|p| hit.contains(p)) {
            got.bytes.clone_from(&want.bytes); // the damage hit its data: not metadata
        }
        if &got != want {
            let what = if got.bytes != want.bytes {
                format!("{} bytes against {}", got.bytes.len(), want.bytes.len())
            } else {
                format!("{got:?} against {want:?}")
            };
            wrong.push(format!("{path}: served {what}"));
        }
    }
    wrong
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
    let held = {
        let sim = CrashSim::from_image(base.clone());
        let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
        let mut t = BTreeMap::new();
        served_tree(&fs, ROOT, "", &mut t);
        t
    };
    let mut silent = Vec::new();
    let mut seeded = pmkit_testkit::Seeded::from_env_or("damage", 1);
    let walk = MountOptions {
        full_walk: true,
        ..MountOptions::default()
    };
    let (mut repaired, mut refused) = (0, 0);
    for t in 0..trials {
        let mut img = base.clone();
        let (what, hit) = damage(&mut img, &mut seeded.rng);
        let ctx = format!("trial {t} (seed {}): {what}", seeded.seed);
        let sim = CrashSim::from_image(img);
        let _ = check(&sim);
        if let Ok((fs, _)) = Fs::mount(CrashSim::from_image(sim.image()), &MountOptions::default())
        {
            touch_everything(&fs, ROOT, 0);
            for w in served_wrong(&fs, &held, &hit) {
                silent.push(format!("{ctx}: {w}"));
            }
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
    assert!(
        silent.is_empty(),
        "served wrong without an error:\n{}",
        silent.join("\n")
    );
}
