//! Read-only regions: `O_RDONLY` + `PROT_READ`, every byte readable, no store possible (a
//! clear panic instead of a fault), and the file's bytes exactly as they were.

use pmkit_media::protect::Access;
use pmkit_media::{Media, Region, RegionOptions};
use std::os::unix::io::AsRawFd;

const LEN: usize = 1 << 20;

fn pattern() -> Vec<u8> {
    (0..LEN).map(|i| (i * 7 + i / 4096) as u8).collect()
}

/// A file in /dev/shm holding [`pattern`], made through an ordinary read-write region.
fn made() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::Builder::new()
        .prefix("pmkit-media-ro")
        .tempdir_in("/dev/shm")
        .unwrap();
    let p = d.path().join("pm");
    let r = Region::create(&p, LEN as u64, &RegionOptions::default()).unwrap();
    r.write(0, &pattern());
    drop(r);
    (d, p)
}

#[test]
fn read_only_region_reads_and_never_writes() {
    let (_d, p) = made();
    let before = std::fs::read(&p).unwrap();
    let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
    let r = Region::open_read_only(&p).unwrap();
    assert!(r.is_read_only());
    assert_eq!(r.len(), LEN);
    // The descriptor is O_RDONLY.
    let fd = r.file().unwrap().as_raw_fd();
    // SAFETY: F_GETFL on a descriptor the region owns.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    assert_eq!(fl & libc::O_ACCMODE, libc::O_RDONLY);
    let mut all = vec![0u8; LEN];
    r.read(0, &mut all);
    assert_eq!(all, pattern());
    assert_eq!(
        r.load_u64(8),
        u64::from_le_bytes(all[8..16].try_into().unwrap())
    );
    // A shared lock works on a read-only descriptor.
    assert!(r.try_lock(false).unwrap());
    // Stores are refused with a message, not a fault.
    for store in [
        Box::new(|r: &Region| r.write(0, &[1])) as Box<dyn Fn(&Region)>,
        Box::new(|r: &Region| r.write_nt(64, &[1; 64])),
        Box::new(|r: &Region| r.store_u64(0, 1)),
        Box::new(|r: &Region| {
            let _ = r.cas_u64(0, 0, 1);
        }),
        Box::new(|r: &Region| r.zero(0, 4096)),
    ] {
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store(&r)))
            .expect_err("a store into a read-only region must panic");
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("read-only"), "{msg}");
    }
    // Write rights cannot be had on a PROT_READ mapping of an O_RDONLY file.
    assert!(r.set_access(0, 4096, Access::ReadWrite).is_err());
    r.msync(0, LEN).unwrap();
    drop(r);
    assert!(std::fs::read(&p).unwrap() == before, "bytes changed");
    assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), mtime);
}

#[test]
fn read_only_cannot_create() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("new");
    let o = RegionOptions {
        read_only: true,
        ..Default::default()
    };
    let e = Region::create(&p, LEN as u64, &o).unwrap_err().to_string();
    assert!(e.contains("read-only"), "{e}");
    assert!(!p.exists());
}
