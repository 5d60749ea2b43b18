//! The PMFS request handlers driven in process, with no root, no /dev/fuse and no kernel: the
//! same `PmfsOps` both transports call, here over anonymous memory and over the crash simulator.
//! What a FUSE request does is what these calls do; the kernel's side is tested by the mount
//! tests (frontends/cli/tests/fs_mount*.rs).

use pmkit_fs::{Fs, MkfsOptions, MountOptions, Owner};
use pmkit_fuse::pmfs::cache::CacheMode;
use pmkit_fuse::pmfs::stats::OpStats;
use pmkit_fuse::pmfs::{PmfsOps, Xattr};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::{Media, Region};
use std::sync::Arc;

const ROOT: u64 = 1;
const ME: Owner = Owner { uid: 0, gid: 0 };

fn ops<M: Media>(m: M) -> PmfsOps<M> {
    Fs::mkfs(&m, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(m, &MountOptions::default()).unwrap();
    PmfsOps::new(Arc::new(fs), CacheMode::None, Arc::new(OpStats::default()))
}

/// The names in `dir`, sorted, `.` and `..` left out.
fn names<M: Media>(o: &PmfsOps<M>, dir: u64) -> Vec<Vec<u8>> {
    let h = o.opendir(dir).unwrap().fh;
    let mut out = vec![];
    o.readdir(dir, h, 0, |_, _, _, name| {
        if name != b"." && name != b".." {
            out.push(name.to_vec());
        }
        false
    })
    .unwrap();
    o.releasedir(h).unwrap();
    out.sort();
    out
}

/// A session's worth of requests: create, write, read back, rename, link, xattrs, unlink,
/// and the errno of each mistake a program makes.
fn session<M: Media>(o: &PmfsOps<M>) {
    let d = o.mkdir(ME, ROOT, b"d", 0o755).unwrap().attr.ino.0;
    let (e, _opened) = o.create(ME, d, b"f", 0o644).unwrap();
    let f = e.attr.ino.0;
    assert_eq!(o.write(f, 4090, b"hello, pmfs", false).unwrap(), 11);
    assert_eq!(o.getattr(f).unwrap().size, 4101);
    assert_eq!(o.read(f, 4090, 100).unwrap(), b"hello, pmfs");
    // a hole reads as zeroes, a read past the end as nothing
    assert_eq!(o.read(f, 0, 8).unwrap(), [0u8; 8]);
    assert!(o.read(f, 1 << 20, 8).unwrap().is_empty());
    o.fsync(f).unwrap();
    o.release(f).unwrap();
    assert_eq!(o.lookup(d, b"f").unwrap().attr.ino.0, f);
    assert_eq!(o.lookup(d, b"nope").err(), Some(libc::ENOENT));
    assert_eq!(o.mkdir(ME, d, b"f", 0o755).err(), Some(libc::EEXIST));
    assert_eq!(o.rmdir(ROOT, b"d").err(), Some(libc::ENOTEMPTY));
    assert_eq!(o.read(d, 0, 1).err(), Some(libc::EISDIR));
    o.rename(d, b"f", ROOT, b"g", 0).unwrap();
    assert_eq!(o.link(f, d, b"h").unwrap().attr.nlink, 2);
    assert_eq!(names(o, ROOT), [b"d".to_vec(), b"g".to_vec()]);
    assert_eq!(names(o, d), [b"h".to_vec()]);
    o.setxattr(f, b"user.k", b"v1", 0, 0).unwrap();
    match o.getxattr(f, b"user.k", 0).unwrap() {
        Xattr::Size(n) => assert_eq!(n, 2),
        Xattr::Data(_) => panic!("size 0 asks for the size"),
    }
    match o.getxattr(f, b"user.k", 16).unwrap() {
        Xattr::Data(v) => assert_eq!(v, b"v1"),
        Xattr::Size(_) => panic!("a buffer asks for the bytes"),
    }
    assert_eq!(o.getxattr(f, b"user.k", 1).err(), Some(libc::ERANGE));
    o.removexattr(f, b"user.k").unwrap();
    assert_eq!(o.getxattr(f, b"user.k", 16).err(), Some(libc::ENODATA));
    let s = o.symlink(ME, ROOT, b"s", b"d/h").unwrap().attr.ino.0;
    assert_eq!(o.readlink(s).unwrap(), b"d/h");
    o.unlink(ROOT, b"g").unwrap();
    o.unlink(d, b"h").unwrap();
    o.rmdir(ROOT, b"d").unwrap();
    assert_eq!(names(o, ROOT), [b"s".to_vec()]);
    assert!(o.statfs().blocks > 0);
}

#[test]
fn the_handlers_answer_a_session_on_memory() {
    session(&ops(Region::anonymous(8 << 20).unwrap()));
}

#[test]
fn the_handlers_answer_a_session_on_the_crash_simulator() {
    let sim = Arc::new(CrashSim::new(4 << 20));
    session(&ops(Arc::clone(&sim)));
    assert!(sim.image().iter().any(|&b| b != 0));
}
