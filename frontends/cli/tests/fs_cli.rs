//! `pmkit fs` as a user runs it: mkfs, info (text and JSON with the journal costs), check clean;
//! then both superblocks damaged: check names it and exits 1.

mod serve_util;

use serve_util::*;

#[test]
fn mkfs_info_check_and_a_damaged_pool() {
    let dir = shm_dir("pmkit-cli-fs");
    let pool = dir.path().join("pool");
    let p = pool.to_str().unwrap();
    let out = text(&pmkit(&[
        "fs", "mkfs", p, "--size", "8M", "--inodes", "128",
    ]));
    assert!(out.contains("127 inodes"), "{out}");
    let info = text(&pmkit(&["fs", "info", p]));
    assert!(
        info.contains("create (touch)") && info.contains("clean"),
        "{info}"
    );
    let json = pmkit(&["fs", "info", p, "--json"]);
    assert!(json.status.success());
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["superblock"]["geo"]["inodes"], 128);
    let costs = v["op_costs"].as_array().unwrap();
    assert!(
        costs.iter().any(|c| c["op"] == "mkdir" && c["fences"] == 3),
        "{costs:?}"
    );
    let o = pmkit(&["fs", "check", p]);
    assert!(o.status.success(), "{}", text(&o));
    let mut image = std::fs::read(&pool).unwrap();
    // Superblock A (byte 0) and B (the last block, format 3).
    let far = image.len() - 4096;
    image[0] ^= 1;
    image[far] ^= 1;
    std::fs::write(&pool, &image).unwrap();
    let o = pmkit(&["fs", "check", p]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("both superblocks are bad"),
        "{}",
        text(&o)
    );
}

/// `pmkit fs check POOL --repair`: a wrong link count and an unnamed inode fixed (text and
/// JSON), refused while another process holds the pool's lock, and both superblocks rebuilt
/// once given the mkfs numbers.
#[test]
fn check_repair() {
    use pmkit_fs::{Fs, MountOptions, ROOT};
    use pmkit_media::{Region, RegionOptions};
    let dir = shm_dir("pmkit-cli-fsrepair");
    let pool = dir.path().join("pool");
    let p = pool.to_str().unwrap();
    let o = pmkit(&["fs", "mkfs", p, "--size", "8M", "--inodes", "128"]);
    assert!(o.status.success(), "{}", text(&o));
    let geo = {
        let region = Region::open(&pool, &RegionOptions::default()).unwrap();
        let (fs, _) = Fs::mount(&region, &MountOptions::default()).unwrap();
        let f = fs.create(ROOT, b"f", 0o644).unwrap();
        fs.write(f.ino, 0, b"hello").unwrap();
        fs.unmount();
        pmkit_fs::superblock(&region).unwrap().geo
    };
    let damage = || {
        let mut image = std::fs::read(&pool).unwrap();
        let f = geo.inode_off(2);
        image[f + 40..f + 44].copy_from_slice(&5u32.to_le_bytes()); // f's link count
        let (a, b) = (geo.inode_off(2), geo.inode_off(9));
        image.copy_within(a..a + 16, b); // size, mtime: a file nothing names
        image[b + 25] = 1;
        std::fs::write(&pool, &image).unwrap();
        // As a bug would store them (the checksums match): the link count and the lost inode
        // are the damage this test is about, not the checksums'.
        let region = Region::open(&pool, &RegionOptions::default()).unwrap();
        for ino in [2, 9] {
            pmkit_fs::reseal_inode(&region, ino).unwrap();
        }
    };
    damage();
    let o = pmkit(&["fs", "check", p]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // A mount that walks refuses it (before any FUSE work) naming the problems and the one
    // command to run. (A default mount loads the checkpoint the clean unmount saved and would
    // serve: a wrong link count and an inode nothing names are only seen by a whole walk.)
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let o = pmkit(&["fs", "mount", "--full-walk", p, mnt.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", text(&o));
    let msg = text(&o);
    assert!(
        msg.contains("mount refused (2 problems)")
            && msg.contains("inode 2: link count 5 but 1 names")
            && msg.contains(&format!("pmkit fs check {p} --repair")),
        "{msg}"
    );
    // a holder of the lock (as a mount holds it) makes repair refuse; `-o`: the lock stays
    // with flock itself, not the sleep it runs, so killing flock releases it
    let mut holder = std::process::Command::new("flock")
        .args(["-n", "-o", p, "sleep", "30"])
        .spawn()
        .expect("flock(1) from util-linux");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let o = pmkit(&["fs", "check", p, "--repair"]);
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("not repaired: another process holds its lock"),
        "{}",
        text(&o)
    );
    let o = pmkit(&["fs", "check", p, "--repair"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("problem: inode 2: link count 5 but 1 names"),
        "{out}"
    );
    assert!(
        out.contains(
            "fixed: inode 9 (File) was in use but nothing named it: linked as /lost+found/#9"
        ),
        "{out}"
    );
    assert!(out.contains("clean after repair"), "{out}");
    let o = pmkit(&["fs", "check", p]);
    assert!(o.status.success(), "{}", text(&o));
    // JSON
    damage();
    let o = pmkit(&["fs", "check", p, "--repair", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let fixes = v["fixes"].as_array().unwrap();
    assert!(
        fixes
            .iter()
            .any(|f| f["ino"] == 2 && f["what"].as_str().unwrap().contains("link count")),
        "{fixes:?}"
    );
    assert_eq!(v["unfixed"].as_array().unwrap().len(), 0);
    // both superblocks bad, a geometry that is not the default: the numbers are needed
    let mut image = std::fs::read(&pool).unwrap();
    // Superblock A (byte 0) and B (the last block, format 3).
    let far = image.len() - 4096;
    image[0] ^= 1;
    image[far] ^= 1;
    std::fs::write(&pool, &image).unwrap();
    let o = pmkit(&["fs", "check", p, "--repair"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("--geometry LANES,ENTRIES,INODES"),
        "{}",
        text(&o)
    );
    let o = pmkit(&["fs", "check", p, "--repair", "--geometry", "8,256,128"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("both superblocks were bad"),
        "{}",
        text(&o)
    );
    let o = pmkit(&["fs", "check", p]);
    assert!(o.status.success(), "{}", text(&o));
}

/// `pmkit fs resize`: a pool grown offline keeps its files, checks clean and has the new
/// space; shrinking and a device are refused.
#[test]
fn resize_grows_a_pool_offline() {
    use pmkit_fs::{Fs, MountOptions, ROOT};
    use pmkit_media::{Region, RegionOptions};
    let dir = shm_dir("pmkit-cli-fs");
    let pool = dir.path().join("pool");
    let p = pool.to_str().unwrap();
    assert!(pmkit(&["fs", "mkfs", p, "--size", "8M"]).status.success());
    {
        let r = Region::open(&pool, &RegionOptions::default()).unwrap();
        let (fs, _) = Fs::mount(r, &MountOptions::default()).unwrap();
        let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
        fs.write(f, 0, b"kept").unwrap();
        fs.unmount();
    }
    let o = pmkit(&["fs", "resize", p, "--size", "16M"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("grown from 2048 to 4096 blocks"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::metadata(&pool).unwrap().len(), 16 << 20);
    let o = pmkit(&["fs", "check", p]);
    assert!(o.status.success(), "{}", text(&o));
    let r = Region::open(&pool, &RegionOptions::default()).unwrap();
    let (fs, _) = Fs::mount(r, &MountOptions::default()).unwrap();
    let f = fs.lookup(ROOT, b"f").unwrap().ino;
    assert_eq!(fs.read(f, 0, 10).unwrap(), b"kept");
    assert!(fs.statfs().blocks > 3500, "{:?}", fs.statfs());
    fs.unmount();
    let o = pmkit(&["fs", "resize", p, "--size", "8M"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("shrinking is not supported"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::metadata(&pool).unwrap().len(), 16 << 20);
}
