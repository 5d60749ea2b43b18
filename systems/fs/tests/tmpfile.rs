//! O_TMPFILE in the library's POSIX layer: a file with no name, written, then named by
//! linkat of its descriptor (and kept across a remount), or freed at its last close, or by
//! the next mount after a crash; O_EXCL makes it unlinkable; the errors Linux gives.

mod common;

use pmkit_fs::posix::Posix;
use pmkit_fs::{Fs, MkfsOptions, MountOptions};
use pmkit_media::crashsim::CrashSim;

const TMP: i32 = libc::O_TMPFILE | libc::O_RDWR;

fn fresh(sim: &CrashSim) -> Posix<&CrashSim> {
    Fs::mkfs(sim, &MkfsOptions::tiny()).unwrap();
    Posix::new(Fs::mount(sim, &MountOptions::default()).unwrap().0)
}

#[test]
fn a_tmpfile_is_named_by_linking_its_descriptor_and_stays() {
    let sim = CrashSim::new(1 << 20);
    let p = fresh(&sim);
    p.mkdir(b"/d", 0o755).unwrap();
    let fd = p.open(b"/d", TMP, 0o640).unwrap();
    assert_eq!(p.pwrite(fd, b"not yet named", 0).unwrap(), 13);
    let st = p.fstat(fd).unwrap();
    assert_eq!((st.links, st.mode & 0o7777), (0, 0o640));
    assert!(
        p.readdir(b"/d").unwrap().len() == 2,
        "no name in the directory"
    );
    let named = p.link_fd(fd, b"/d/named").unwrap();
    assert_eq!((named.ino, named.links), (st.ino, 1));
    assert_eq!(
        p.link_fd(fd, b"/d/named").unwrap_err().errno(),
        libc::EEXIST
    );
    // a second name, as for any file with links
    assert_eq!(p.link_fd(fd, b"/again").unwrap().links, 2);
    p.close(fd).unwrap();
    let sim = p.unmount();
    let p = Posix::new(Fs::mount(sim, &MountOptions::default()).unwrap().0);
    let fd = p.open(b"/d/named", libc::O_RDONLY, 0).unwrap();
    let mut b = [0u8; 13];
    p.pread(fd, &mut b, 0).unwrap();
    assert_eq!(&b, b"not yet named");
    p.close(fd).unwrap();
    assert!(pmkit_fs::check(p.unmount()).problems.is_empty());
}

#[test]
fn an_unnamed_tmpfile_is_freed_at_its_last_close_or_by_the_mount_after_a_crash() {
    let sim = CrashSim::new(1 << 20);
    let p = fresh(&sim);
    let free = p.fs().statfs().free_blocks;
    let fd = p.open(b"/", TMP, 0o600).unwrap();
    p.pwrite(fd, &[1u8; 40_000], 0).unwrap();
    assert!(p.fs().statfs().free_blocks < free);
    p.close(fd).unwrap();
    assert_eq!(p.fs().statfs().free_blocks, free, "freed at the close");
    // open when the process dies: on the orphan list, freed by the next mount
    let fd = p.open(b"/", TMP, 0o600).unwrap();
    p.pwrite(fd, &[2u8; 40_000], 0).unwrap();
    drop(p); // no unmount: a crash
    let (fs, rec) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert_eq!(rec.orphans, 1);
    assert_eq!(fs.statfs().free_blocks, free);
    fs.unmount();
    assert!(pmkit_fs::check(&sim).problems.is_empty());
}

#[test]
fn o_excl_and_the_other_errors_are_linuxs() {
    let sim = CrashSim::new(1 << 20);
    let p = fresh(&sim);
    let e = |r: pmkit_fs::Result<_>| r.map(|_: pmkit_fs::posix::Fd| ()).unwrap_err().errno();
    let fd = p.open(b"/", TMP | libc::O_EXCL, 0o600).unwrap();
    assert_eq!(p.link_fd(fd, b"/x").unwrap_err().errno(), libc::ENOENT);
    p.close(fd).unwrap();
    let f = p.open(b"/f", libc::O_CREAT | libc::O_RDWR, 0o600).unwrap();
    assert_eq!(e(p.open(b"/f", TMP, 0o600)), libc::ENOTDIR);
    assert_eq!(e(p.open(b"/nope", TMP, 0o600)), libc::ENOENT);
    assert_eq!(
        e(p.open(b"/", libc::O_TMPFILE | libc::O_RDONLY, 0)),
        libc::EINVAL
    );
    // an unlinked file's descriptor cannot be linked again
    p.unlink(b"/f").unwrap();
    assert_eq!(p.link_fd(f, b"/g").unwrap_err().errno(), libc::ENOENT);
    p.close(f).unwrap();
    assert!(pmkit_fs::check(p.unmount()).problems.is_empty());
}

/// A crash at every fence of an O_TMPFILE's life (made, written, named, closed), both domains
/// (the workload's operations all succeed: a taken name is the test above's):
/// every image shows the tree without the name or with the named file whole, `check` clean.
#[test]
fn a_crash_anywhere_in_a_tmpfiles_life_leaves_it_unnamed_or_named_whole() {
    use common::crashcheck::crash_seq;
    use common::Op;
    let s = |x: &str| x.to_string();
    let setup = [Op::Mkdir(s("d")), Op::Create(s("d/f"))];
    let ops = [
        Op::TmpLink(s("d/t"), 9000, 1),
        Op::Unlink(s("d/t")),
        Op::TmpLink(s("u"), 5000, 3),
    ];
    for domain in [pmkit_media::Domain::Adr, pmkit_media::Domain::Eadr] {
        let rep = crash_seq(512 << 10, &setup, &ops, domain, &|_, _| {}, &|_, _| {});
        assert!(rep.fences > 0);
        assert!(rep.is_clean(), "{domain:?}:\n{rep}");
    }
}
