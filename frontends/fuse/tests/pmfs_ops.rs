//! The PMFS request handlers driven in process, with no root, no /dev/fuse and no kernel: the
//! same `PmfsOps` both transports call, here over anonymous memory and over the crash simulator.
//! What a FUSE request does is what these calls do; the kernel's side is tested by the mount
//! tests (frontends/cli/tests/fs_mount*.rs).

use pmkit_fs::{Fs, MkfsOptions, MountOptions, Owner};
use pmkit_fuse::ops::{Ops, PlusEntry, WriteHow, Xattr};
use pmkit_fuse::pmfs::cache::CacheMode;
use pmkit_fuse::pmfs::stats::OpStats;
use pmkit_fuse::pmfs::PmfsOps;
use pmkit_media::crashsim::CrashSim;
use pmkit_media::{Media, Region};
use std::sync::Arc;

const ROOT: u64 = 1;
const ME: Owner = Owner { uid: 0, gid: 0 };

/// READ as a transport does it: into a buffer of the request's size.
fn read<O: Ops>(o: &O, ino: u64, offset: u64, size: usize) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; size];
    let n = o.read(ino, offset, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

fn ops<M: Media>(m: M) -> PmfsOps<M> {
    Fs::mkfs(&m, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(m, &MountOptions::default()).unwrap();
    PmfsOps::new(Arc::new(fs), CacheMode::None, Arc::new(OpStats::default()))
}

/// The names in `dir`, sorted, `.` and `..` left out (with no handle where OPENDIR is ENOSYS).
fn names<M: Media>(o: &PmfsOps<M>, dir: u64) -> Vec<Vec<u8>> {
    let h = o
        .opendir(dir)
        .map_or_else(|e| (e == libc::ENOSYS).then_some(0).unwrap(), |o| o.fh);
    let mut out = vec![];
    o.readdir(dir, h, 0, &mut |_, _, _, name| {
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
    assert_eq!(
        o.write(f, 4090, b"hello, pmfs", WriteHow::default())
            .unwrap(),
        11
    );
    assert_eq!(o.getattr(f).unwrap().size, 4101);
    assert_eq!(read(o, f, 4090, 100).unwrap(), b"hello, pmfs");
    // a hole reads as zeroes, a read past the end as nothing
    assert_eq!(read(o, f, 0, 8).unwrap(), [0u8; 8]);
    assert!(read(o, f, 1 << 20, 8).unwrap().is_empty());
    // every change is durable when it returns, and FSYNC is answered (never ENOSYS): after the
    // daemon died, only its failure tells an fsync that the kernel dropped dirty pages
    assert_eq!(o.fsync(f), Ok(()));
    // a directory has no pages to write back: FSYNCDIR costs nothing after the first
    assert_eq!(o.fsyncdir(d).err(), Some(libc::ENOSYS));
    o.release(f, 0).unwrap();
    assert_eq!(o.lookup(d, b"f").unwrap().attr.ino.0, f);
    assert_eq!(o.lookup(d, b"nope").err(), Some(libc::ENOENT));
    assert_eq!(o.mkdir(ME, d, b"f", 0o755).err(), Some(libc::EEXIST));
    assert_eq!(o.rmdir(ROOT, b"d").err(), Some(libc::ENOTEMPTY));
    assert_eq!(read(o, d, 0, 1).err(), Some(libc::EISDIR));
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

/// A device in memory, for the device file's operations.
struct MemDisk(parking_lot::Mutex<Vec<u8>>);

impl pmkit_fuse::Disk for MemDisk {
    fn size(&self) -> u64 {
        self.0.lock().len() as u64
    }
    fn block_size(&self) -> u32 {
        4096
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), pmkit_fuse::DiskError> {
        buf.copy_from_slice(&self.0.lock()[off as usize..][..buf.len()]);
        Ok(())
    }
    fn write(&self, off: u64, data: &[u8], _fua: bool) -> Result<(), pmkit_fuse::DiskError> {
        self.0.lock()[off as usize..][..data.len()].copy_from_slice(data);
        Ok(())
    }
    fn flush(&self) -> Result<(), pmkit_fuse::DiskError> {
        Ok(())
    }
    fn discard(&self, off: u64, len: u64) -> Result<(), pmkit_fuse::DiskError> {
        self.zero(off, len)
    }
    fn zero(&self, off: u64, len: u64) -> Result<(), pmkit_fuse::DiskError> {
        self.0.lock()[off as usize..(off + len) as usize].fill(0);
        Ok(())
    }
}

/// The block device file answers through the same trait: one file, `disk`, of the device's
/// size; reads and writes clamped to it; a write at the end is ENOSPC; the size fixed; the
/// root lists `.`, `..` and `disk`; punching a hole zeroes the range, edges included.
#[test]
fn the_device_file_serves_the_same_operations() {
    let core = pmkit_fuse::Core::new(MemDisk(parking_lot::Mutex::new(vec![7u8; 1 << 20])));
    let disk = core.lookup(1, b"disk").unwrap().attr;
    assert_eq!((disk.size, disk.ino.0), (1 << 20, 2));
    assert_eq!(core.lookup(1, b"other").err(), Some(libc::ENOENT));
    assert_eq!(core.open(1).err(), Some(libc::EISDIR));
    core.open(2).unwrap();
    let how = WriteHow::default();
    assert_eq!(core.write(2, (1 << 20) - 3, b"abcdef", how).unwrap(), 3);
    assert_eq!(core.write(2, 1 << 20, b"x", how).err(), Some(libc::ENOSPC));
    assert_eq!(read(&core, 2, (1 << 20) - 4, 100).unwrap(), b"\x07abc");
    assert!(read(&core, 2, 1 << 20, 8).unwrap().is_empty());
    core.fallocate(
        2,
        100,
        10_000,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    let back = read(&core, 2, 0, 12_000).unwrap();
    assert!(back[..100].iter().all(|&b| b == 7) && back[10_100..].iter().all(|&b| b == 7));
    assert!(
        back[100..10_100].iter().all(|&b| b == 0),
        "the hole, edges included"
    );
    let shrink = pmkit_fs::SetAttr {
        size: Some(4096),
        ..Default::default()
    };
    assert_eq!(core.setattr(2, &shrink, false).err(), Some(libc::EPERM));
    let mut names = Vec::new();
    core.readdir(1, 0, 0, &mut |_, _, _, n| {
        names.push(n.to_vec());
        false
    })
    .unwrap();
    assert_eq!(names, [&b"."[..], b"..", b"disk"]);
    assert_eq!(core.statfs().blocks, 256);
    assert_eq!(core.mkdir(ME, 1, b"d", 0o755).err(), Some(libc::ENOSYS));
}

/// `--read-only`: every change is EROFS from the handlers themselves (a `mount -o remount,rw`
/// lifts the kernel's refusal without asking the daemon); reads and listings are served.
#[test]
fn read_only_handlers_refuse_every_change() {
    let rw = ops(CrashSim::new(1 << 20));
    let f = rw
        .mknod(ME, ROOT, b"f", libc::S_IFREG | 0o644, 0)
        .unwrap()
        .attr
        .ino
        .0;
    rw.write(f, 0, b"kept", WriteHow::default()).unwrap();
    let o = rw.with_read_only(true);
    let how = WriteHow::default();
    assert_eq!(o.write(f, 0, b"x", how).err(), Some(libc::EROFS));
    assert_eq!(o.mkdir(ME, ROOT, b"d", 0o755).err(), Some(libc::EROFS));
    assert_eq!(o.unlink(ROOT, b"f").err(), Some(libc::EROFS));
    assert_eq!(o.rename(ROOT, b"f", ROOT, b"g", 0).err(), Some(libc::EROFS));
    assert_eq!(o.fallocate(f, 0, 4096, 0).err(), Some(libc::EROFS));
    assert_eq!(
        o.setxattr(f, b"user.a", b"1", 0, 0).err(),
        Some(libc::EROFS)
    );
    assert_eq!(o.removexattr(f, b"user.a").err(), Some(libc::EROFS));
    let s = pmkit_fs::SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    assert_eq!(o.setattr(f, &s, false).err(), Some(libc::EROFS));
    assert_eq!(read(&o, f, 0, 100).unwrap(), b"kept");
    assert_eq!(names(&o, ROOT), vec![b"f".to_vec()]);
}

/// With `--cache long` the kernel's references stand in for opens (no OPEN, RELEASE or FLUSH
/// once the first OPEN is answered ENOSYS, and files made with MKNOD once CREATE is): a file
/// unlinked while the kernel holds it stays readable until the kernel's FORGET gives the last
/// reference back, then it is freed.
#[test]
fn without_opens_the_kernels_references_keep_an_unlinked_file() {
    let m = pmkit_media::Region::anonymous(4 << 20).unwrap();
    Fs::mkfs(&m, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(m, &MountOptions::default()).unwrap();
    let fs = Arc::new(fs);
    let o = PmfsOps::new(
        Arc::clone(&fs),
        CacheMode::Long,
        Arc::new(OpStats::default()),
    );
    let file = libc::S_IFREG | 0o644;
    assert_eq!(
        o.create(ME, ROOT, b"f", 0o644).err(),
        Some(libc::ENOSYS),
        "files are made with MKNOD: no CREATE handle, so no RELEASE"
    );
    let f = o.mknod(ME, ROOT, b"f", file, 0).unwrap().attr.ino.0;
    o.write(f, 0, &[7u8; 10_000], WriteHow::default()).unwrap();
    assert_eq!(o.open(f).err(), Some(libc::ENOSYS), "no OPEN from now on");
    o.release(f, 0).unwrap(); // an older kernel's RELEASE after it gives nothing back
    assert_eq!(o.flush().err(), Some(libc::ENOSYS), "no FLUSH either");
    o.lookup(ROOT, b"f").unwrap();
    let free = fs.statfs().free_blocks;
    o.unlink(ROOT, b"f").unwrap();
    assert_eq!(read(&o, f, 0, 3).unwrap(), [7u8; 3], "held by the kernel");
    assert_eq!(fs.statfs().free_blocks, free, "not freed yet");
    // the MKNOD's entry and the lookup's
    o.forget(f, 1);
    assert_eq!(read(&o, f, 0, 3).unwrap(), [7u8; 3], "one reference left");
    o.forget(f, 1);
    assert!(read(&o, f, 0, 3).is_err(), "freed with the last reference");
    assert!(fs.statfs().free_blocks > free, "its blocks are free");
    // a directory's and a link's FORGET give nothing back and harm nothing
    let d = o.mkdir(ME, ROOT, b"d", 0o755).unwrap().attr.ino.0;
    o.forget(d, 5);
    assert_eq!(o.getattr(d).unwrap().nlink, 2);
}

/// A listing with attributes (READDIRPLUS) that goes on after its names changed never hands the
/// kernel another file under a name it no longer has: the handle's listing was taken at its
/// first READDIRPLUS, the entry's inode was freed and given to a new file since, and the kernel
/// takes every entry as a lookup (it would cache the old name for the new file, and a generation
/// that is not the one it holds for that inode marks its inode bad: EIO to whoever has it open).
#[test]
fn a_listing_that_goes_on_skips_entries_whose_names_changed() {
    let o = ops(Region::anonymous(4 << 20).unwrap());
    let file = libc::S_IFREG | 0o644;
    let d = o.mkdir(ME, ROOT, b"d", 0o755).unwrap().attr.ino.0;
    let a = o.mknod(ME, d, b"a", file, 0).unwrap().attr.ino.0;
    let b = o.mknod(ME, d, b"b", file, 0).unwrap().attr.ino.0;
    let h = o.opendir(d).unwrap().fh;
    // The first READDIRPLUS takes the listing; its reply holds one entry (".").
    let mut first = vec![];
    o.readdirplus(d, h, 0, &mut |_, off, name| {
        first.push((name.to_vec(), off));
        first.len() > 1
    })
    .unwrap();
    assert_eq!(first.len(), 2, "the second entry did not fit");
    let next = first[0].1;
    // Both files go; a new one takes one of their inodes.
    o.unlink(d, b"a").unwrap();
    o.unlink(d, b"b").unwrap();
    o.forget(a, 1);
    o.forget(b, 1);
    let c = o.mknod(ME, d, b"c", file, 0).unwrap();
    assert!(
        [a, b].contains(&c.attr.ino.0),
        "the new file reuses a freed inode"
    );
    // Only entries with attributes are lookups: a bare one (an inode the kernel holds) is a
    // name as READDIR gives it, which a stale listing may give.
    let mut rest = vec![];
    o.readdirplus(d, h, next, &mut |e, _, name| {
        if let PlusEntry::Full(e) = e {
            rest.push((name.to_vec(), e.attr.ino.0));
        }
        false
    })
    .unwrap();
    o.releasedir(h).unwrap();
    for (name, ino) in &rest {
        assert!(
            !(ino == &c.attr.ino.0 && name.as_slice() != b"c"),
            "{} handed out as inode {ino}, now `c`'s: {rest:?}",
            String::from_utf8_lossy(name)
        );
    }
}

/// Where the kernel keeps listings (`--cache long`), OPENDIR is answered ENOSYS after its
/// checks, and READDIR comes with no handle (0) and is answered by position: a listing read a
/// few entries per reply while names come and go lists every name that stays exactly once.
#[test]
fn listings_without_opendir_resume_by_position() {
    let m = Region::anonymous(8 << 20).unwrap();
    Fs::mkfs(&m, &MkfsOptions::tiny()).unwrap();
    let (fs, _) = Fs::mount(m, &MountOptions::default()).unwrap();
    let o = PmfsOps::new(Arc::new(fs), CacheMode::Long, Arc::new(OpStats::default()));
    let file = libc::S_IFREG | 0o644;
    let d = o.mkdir(ME, ROOT, b"d", 0o755).unwrap().attr.ino.0;
    let f = o.mknod(ME, d, b"f0", file, 0).unwrap().attr.ino.0;
    assert_eq!(o.opendir(d).err(), Some(libc::ENOSYS), "no OPENDIR");
    assert_eq!(o.opendir(f).err(), Some(libc::ENOTDIR), "checked first");
    assert_eq!(o.opendir(9_999).err(), Some(libc::ENOENT));
    for i in 1..300 {
        o.mknod(ME, d, format!("f{i}").as_bytes(), file, 0).unwrap();
    }
    let (mut seen, mut offset, mut replies) = (Vec::new(), 0, 0);
    loop {
        let mut got = 0;
        o.readdir(d, 0, offset, &mut |_, off, _, name| {
            if got == 7 {
                return true; // the reply is full
            }
            got += 1;
            seen.push(name.to_vec());
            offset = off;
            false
        })
        .unwrap();
        if got == 0 {
            break;
        }
        replies += 1;
        // Between replies: one name goes (from the end, not listed yet) and one comes.
        o.unlink(d, format!("f{}", 299 - replies).as_bytes())
            .unwrap();
        o.mknod(ME, d, format!("new{replies}").as_bytes(), file, 0)
            .unwrap();
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "no entry listed twice");
    let now = names(&o, d);
    for name in now.iter().filter(|n| n.starts_with(b"f")) {
        assert!(seen.contains(name), "{name:?} stayed but was skipped");
    }
    assert!(
        replies > 30,
        "{replies} replies: the listing went on across changes"
    );
    // READDIRPLUS the same way, and a removed directory lists nothing.
    let mut plus = 0;
    o.readdirplus(d, 0, 0, &mut |_, _, _| {
        plus += 1;
        false
    })
    .unwrap();
    assert_eq!(plus, now.len() + 2);
    let e = o.mkdir(ME, ROOT, b"e", 0o755).unwrap().attr.ino.0;
    o.rmdir(ROOT, b"e").unwrap();
    assert!(o.readdir(e, 0, 0, &mut |_, _, _, _| false).is_err());
}

/// READDIRPLUS gives attributes only for inodes the kernel does not hold as it was last told: a
/// name whose inode it holds (made or looked up through the mount, not forgotten since) goes
/// bare, taking no reference; once the kernel forgets it, or drops its attributes after a
/// write, its next listing gives attributes again.
#[test]
fn listings_give_attributes_only_for_inodes_the_kernel_lacks() {
    let o = ops(Region::anonymous(4 << 20).unwrap());
    let file = libc::S_IFREG | 0o644;
    let d = o.mkdir(ME, ROOT, b"d", 0o755).unwrap().attr.ino.0;
    let f = o.mknod(ME, d, b"f", file, 0).unwrap().attr.ino.0; // held by the kernel
    let list = |o: &PmfsOps<Region>| {
        let h = o.opendir(d).unwrap().fh;
        let mut out = vec![];
        o.readdirplus(d, h, 0, &mut |e, _, name| {
            out.push((name.to_vec(), e.ino(), matches!(e, PlusEntry::Full(_))));
            false
        })
        .unwrap();
        o.releasedir(h).unwrap();
        out
    };
    let bare = list(&o);
    assert_eq!(bare.len(), 3);
    assert!(bare.iter().all(|(_, _, full)| !full), "{bare:?}");
    assert_eq!(bare[2], (b"f".to_vec(), f, false));
    o.forget(f, 1);
    let full = list(&o);
    assert_eq!(
        full[2],
        (b"f".to_vec(), f, true),
        "given again, as a lookup"
    );
    // That listing's reference is the kernel's now: one FORGET gives it back.
    assert!(!list(&o)[2].2, "held again, so bare");
    o.forget(f, 1);
    assert!(list(&o)[2].2);
    // A write makes the kernel drop the file's size and times: the next listing gives them,
    // and once given (there, or by a GETATTR) the entry goes bare again.
    assert!(!list(&o)[2].2);
    o.write(f, 0, b"x", WriteHow::default()).unwrap();
    assert!(list(&o)[2].2, "given again after the write");
    assert!(!list(&o)[2].2);
    o.write(f, 1, b"y", WriteHow::default()).unwrap();
    o.getattr(f).unwrap();
    assert!(!list(&o)[2].2, "the GETATTR gave them");
}
