//! The path and descriptor layer (`pmkit_fs::posix`) against the kernel: the same random
//! sequence of open/read/write/lseek/ftruncate/close and namespace calls runs on a PMFS pool in
//! /dev/shm through `Posix` and on a tmpfs directory through libc, the kernel's own file system as
//! the model. Every call must give the same result (bytes read, offsets, sizes, link counts) or
//! the same errno, and the size and link count behind every open descriptor must agree after
//! each call; the trees must be equal at the end and after a remount.

use pmkit_fs::posix::{Fd, Posix, Whence};
use pmkit_fs::{Fs, Kind, MkfsOptions, MountOptions, RenameFlags};
use pmkit_media::{Region, RegionOptions};
use std::ffi::CString;
use std::path::Path;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len() as u64) as usize]
    }
}

const PATHS: &[&str] = &[
    "a",
    "b",
    "d",
    "d/a",
    "d/b",
    "d/e",
    "d/e/a",
    "l",
    "d/l",
    "a/x",
    "d/../b",
    "./d/e/../a",
    "l/a",
];
// Targets that cannot reach the root or above it: the model's root is a directory whose ".."
// (and any absolute path) leads outside it, where PMFS's root is its own parent. Links to
// "." and ".." are tested by `links_to_dot_and_dotdot_resolve_like_linux`.
const TARGETS: &[&str] = &["a", "d", "d/a", "nowhere", "l", "e/a", "d/e", "b"];

#[derive(Debug, Clone)]
enum Op {
    Open(String, i32, usize),
    Close(usize),
    Write(usize, usize, u8),
    Pwrite(usize, u64, usize, u8),
    Read(usize, usize),
    Pread(usize, u64, usize),
    Lseek(usize, i64, Whence),
    Ftruncate(usize, u64),
    Fsync(usize),
    Mkdir(String),
    Rmdir(String),
    Unlink(String),
    Rename(String, String),
    Symlink(String, String),
    Link(String, String),
    Stat(String),
    Lstat(String),
    Readlink(String),
    Truncate(String, u64),
}

/// What a call gave: a number, bytes, or an errno.
#[derive(PartialEq, Eq)]
enum Out {
    Ok,
    Num(u64),
    Bytes(Vec<u8>),
    /// kind, size (files only), link count
    Stat(u8, u64, u64),
    Err(i32),
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Out::Ok => write!(f, "Ok"),
            Out::Num(n) => write!(f, "Num({n})"),
            Out::Bytes(b) => {
                let sum = b
                    .iter()
                    .fold(0u64, |h, &x| h.wrapping_mul(31).wrapping_add(x as u64));
                write!(f, "Bytes(len {}, hash {sum:x})", b.len())
            }
            Out::Stat(k, s, n) => write!(f, "Stat(kind {k}, size {s}, links {n})"),
            Out::Err(e) => write!(f, "Err({e})"),
        }
    }
}

fn random_op(r: &mut Rng) -> Op {
    let p = |r: &mut Rng| r.pick(PATHS).to_string();
    let slot = |r: &mut Rng| r.below(4) as usize;
    match r.below(20) {
        0..=3 => {
            let acc = [libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR][r.below(3) as usize];
            let mut f = acc;
            for (bit, odds) in [
                (libc::O_CREAT, 2),
                (libc::O_EXCL, 5),
                (libc::O_APPEND, 4),
                (libc::O_DIRECTORY, 8),
                (libc::O_NOFOLLOW, 8),
            ] {
                if r.below(odds) == 0 {
                    f |= bit;
                }
            }
            // O_TRUNC only with write access: O_RDONLY|O_TRUNC is undefined in POSIX.
            if acc != libc::O_RDONLY && r.below(4) == 0 {
                f |= libc::O_TRUNC;
            }
            Op::Open(p(r), f, slot(r))
        }
        4 => Op::Close(slot(r)),
        5 | 6 => Op::Write(slot(r), r.below(9000) as usize, r.next() as u8),
        7 => Op::Pwrite(
            slot(r),
            r.below(20_000),
            r.below(5000) as usize,
            r.next() as u8,
        ),
        8 => Op::Read(slot(r), r.below(10_000) as usize),
        9 => Op::Pread(slot(r), r.below(20_000), r.below(10_000) as usize),
        10 => {
            let w = [Whence::Set, Whence::Cur, Whence::End][r.below(3) as usize];
            Op::Lseek(slot(r), r.below(12_000) as i64 - 4000, w)
        }
        11 => Op::Ftruncate(slot(r), r.below(15_000)),
        12 => Op::Fsync(slot(r)),
        13 => Op::Mkdir(p(r)),
        14 => [Op::Rmdir(p(r)), Op::Unlink(p(r))][r.below(2) as usize].clone(),
        15 => Op::Rename(p(r), p(r)),
        16 => Op::Symlink(r.pick(TARGETS).into(), p(r)),
        17 => Op::Link(p(r), p(r)),
        18 => [Op::Stat(p(r)), Op::Lstat(p(r)), Op::Readlink(p(r))][r.below(3) as usize].clone(),
        _ => Op::Truncate(p(r), r.below(15_000)),
    }
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i * 7) as u8)).collect()
}

fn kind_code(k: Kind) -> u8 {
    k as u8
}

/// The PMFS side.
fn on_pmfs(fs: &Posix<Region>, fds: &mut [Option<Fd>; 4], op: &Op) -> Out {
    fn e(err: pmkit_fs::Error) -> Out {
        Out::Err(err.errno())
    }
    let fd = |i: usize| fds[i].unwrap_or(Fd(9999));
    let stat = |a: pmkit_fs::Attr| {
        let size = if a.kind == Kind::File { a.size } else { 0 };
        Out::Stat(kind_code(a.kind), size, a.links as u64)
    };
    match op {
        Op::Open(p, f, i) => match fs.open(p.as_bytes(), *f, 0o644) {
            Ok(new) => {
                if let Some(old) = fds[*i].replace(new) {
                    fs.close(old).unwrap();
                }
                Out::Ok
            }
            Err(x) => e(x),
        },
        Op::Close(i) => match fds[*i].take() {
            Some(f) => fs.close(f).map_or_else(e, |()| Out::Ok),
            None => Out::Err(libc::EBADF),
        },
        Op::Write(i, len, s) => fs
            .write(fd(*i), &data(*len, *s))
            .map_or_else(e, |n| Out::Num(n as u64)),
        Op::Pwrite(i, off, len, s) => fs
            .pwrite(fd(*i), &data(*len, *s), *off)
            .map_or_else(e, |n| Out::Num(n as u64)),
        Op::Read(i, len) => {
            let mut b = vec![0; *len];
            fs.read(fd(*i), &mut b).map_or_else(e, |n| {
                b.truncate(n);
                Out::Bytes(b)
            })
        }
        Op::Pread(i, off, len) => {
            let mut b = vec![0; *len];
            fs.pread(fd(*i), &mut b, *off).map_or_else(e, |n| {
                b.truncate(n);
                Out::Bytes(b)
            })
        }
        Op::Lseek(i, d, w) => fs.lseek(fd(*i), *d, *w).map_or_else(e, Out::Num),
        Op::Ftruncate(i, len) => fs.ftruncate(fd(*i), *len).map_or_else(e, |()| Out::Ok),
        Op::Fsync(i) => fs.fsync(fd(*i)).map_or_else(e, |()| Out::Ok),
        Op::Mkdir(p) => fs.mkdir(p.as_bytes(), 0o755).map_or_else(e, |_| Out::Ok),
        Op::Rmdir(p) => fs.rmdir(p.as_bytes()).map_or_else(e, |()| Out::Ok),
        Op::Unlink(p) => fs.unlink(p.as_bytes()).map_or_else(e, |()| Out::Ok),
        Op::Rename(a, b) => fs
            .rename(a.as_bytes(), b.as_bytes(), RenameFlags::Replace)
            .map_or_else(e, |()| Out::Ok),
        Op::Symlink(t, p) => fs
            .symlink(t.as_bytes(), p.as_bytes())
            .map_or_else(e, |_| Out::Ok),
        Op::Link(a, b) => fs
            .link(a.as_bytes(), b.as_bytes())
            .map_or_else(e, |_| Out::Ok),
        Op::Stat(p) => fs.stat(p.as_bytes()).map_or_else(e, stat),
        Op::Lstat(p) => fs.lstat(p.as_bytes()).map_or_else(e, stat),
        Op::Readlink(p) => fs.readlink(p.as_bytes()).map_or_else(e, Out::Bytes),
        Op::Truncate(p, len) => fs.truncate(p.as_bytes(), *len).map_or_else(e, |()| Out::Ok),
    }
}

/// The kernel side, in directory `root`.
fn on_kernel(root: &Path, fds: &mut [Option<i32>; 4], op: &Op) -> Out {
    let c = |p: &str| CString::new(root.join(p).into_os_string().into_encoded_bytes()).unwrap();
    let errno = || Out::Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    let fd = |i: usize| fds[i].unwrap_or(9999);
    let num = |r: i64| if r < 0 { errno() } else { Out::Num(r as u64) };
    let unit = |r: i32| if r < 0 { errno() } else { Out::Ok };
    // SAFETY: plain system calls on paths and buffers this function owns, each valid for the
    // length passed.
    unsafe {
        match op {
            Op::Open(p, f, i) => {
                let r = libc::open(c(p).as_ptr(), *f, 0o644);
                if r < 0 {
                    return errno();
                }
                if let Some(old) = fds[*i].replace(r) {
                    libc::close(old);
                }
                Out::Ok
            }
            Op::Close(i) => match fds[*i].take() {
                Some(f) => unit(libc::close(f)),
                None => Out::Err(libc::EBADF),
            },
            Op::Write(i, len, s) => {
                let d = data(*len, *s);
                num(libc::write(fd(*i), d.as_ptr().cast(), d.len()) as i64)
            }
            Op::Pwrite(i, off, len, s) => {
                let d = data(*len, *s);
                num(libc::pwrite(fd(*i), d.as_ptr().cast(), d.len(), *off as i64) as i64)
            }
            Op::Read(i, len) | Op::Pread(i, _, len) => {
                let mut b = vec![0u8; *len];
                let r = match op {
                    Op::Pread(_, off, _) => {
                        libc::pread(fd(*i), b.as_mut_ptr().cast(), b.len(), *off as i64)
                    }
                    _ => libc::read(fd(*i), b.as_mut_ptr().cast(), b.len()),
                };
                if r < 0 {
                    return errno();
                }
                b.truncate(r as usize);
                Out::Bytes(b)
            }
            Op::Lseek(i, d, w) => {
                let w = match w {
                    Whence::Set => libc::SEEK_SET,
                    Whence::Cur => libc::SEEK_CUR,
                    Whence::End => libc::SEEK_END,
                    // Not drawn: appends allocate ahead, which SEEK_HOLE reports as data
                    // (tests/api.rs and the mount's kernel-rules test check them).
                    Whence::Data => libc::SEEK_DATA,
                    Whence::Hole => libc::SEEK_HOLE,
                };
                num(libc::lseek(fd(*i), *d, w))
            }
            Op::Ftruncate(i, len) => unit(libc::ftruncate(fd(*i), *len as i64)),
            Op::Fsync(i) => unit(libc::fsync(fd(*i))),
            Op::Mkdir(p) => unit(libc::mkdir(c(p).as_ptr(), 0o755)),
            Op::Rmdir(p) => unit(libc::rmdir(c(p).as_ptr())),
            Op::Unlink(p) => unit(libc::unlink(c(p).as_ptr())),
            Op::Rename(a, b) => unit(libc::rename(c(a).as_ptr(), c(b).as_ptr())),
            Op::Symlink(t, p) => {
                let t = CString::new(t.as_str()).unwrap();
                unit(libc::symlink(t.as_ptr(), c(p).as_ptr()))
            }
            Op::Link(a, b) => unit(libc::link(c(a).as_ptr(), c(b).as_ptr())),
            Op::Stat(p) | Op::Lstat(p) => {
                let mut st: libc::stat = std::mem::zeroed();
                let r = match op {
                    Op::Stat(_) => libc::stat(c(p).as_ptr(), &mut st),
                    _ => libc::lstat(c(p).as_ptr(), &mut st),
                };
                if r < 0 {
                    return errno();
                }
                let kind = match st.st_mode & libc::S_IFMT {
                    libc::S_IFDIR => Kind::Dir,
                    libc::S_IFLNK => Kind::Symlink,
                    _ => Kind::File,
                };
                let size = if kind == Kind::File {
                    st.st_size as u64
                } else {
                    0
                };
                // tmpfs counts a directory's links as 2 + subdirectories, as PMFS does.
                Out::Stat(kind_code(kind), size, st.st_nlink)
            }
            Op::Readlink(p) => {
                let mut b = vec![0u8; 4096];
                let r = libc::readlink(c(p).as_ptr(), b.as_mut_ptr().cast(), b.len());
                if r < 0 {
                    return errno();
                }
                b.truncate(r as usize);
                Out::Bytes(b)
            }
            Op::Truncate(p, len) => unit(libc::truncate(c(p).as_ptr(), *len as i64)),
        }
    }
}

fn fd_size_pmfs(fs: &Posix<Region>, fds: &[Option<Fd>; 4], i: usize) -> Option<(u64, u64)> {
    let a = fs.fstat(fds[i]?).unwrap();
    (a.kind == Kind::File).then_some((a.size, a.links as u64))
}

fn fd_size_kernel(fds: &[Option<i32>; 4], i: usize) -> Option<(u64, u64)> {
    // SAFETY: fstat into a zeroed struct on our own descriptor.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        assert_eq!(libc::fstat(fds[i]?, &mut st), 0);
        st
    };
    (st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some((st.st_size as u64, st.st_nlink))
}

/// A fresh 64 MiB pool in `dir`; its path.
fn made(dir: &Path) -> std::path::PathBuf {
    let pool = dir.join("pool");
    let region = Region::create(&pool, 64 << 20, &RegionOptions::default()).unwrap();
    Fs::mkfs(&region, &MkfsOptions::default()).unwrap();
    pool
}

fn mounted(pool: &Path) -> Posix<Region> {
    let region = Region::open(pool, &RegionOptions::default()).unwrap();
    let (fs, _) = Fs::mount(region, &MountOptions::default()).unwrap();
    Posix::new(fs)
}

/// Every path under the root with its kind, size and contents, read through each side.
fn tree_pmfs(fs: &Posix<Region>, dir: &str, out: &mut Vec<(String, Vec<u8>)>) {
    let here = if dir.is_empty() { "/" } else { dir };
    for e in fs.readdir(here.as_bytes()).unwrap() {
        let name = String::from_utf8(e.name).unwrap();
        if name == "." || name == ".." {
            continue;
        }
        let path = format!("{dir}/{name}");
        match e.kind {
            Kind::Dir => {
                out.push((path.clone(), b"dir".to_vec()));
                tree_pmfs(fs, &path, out);
            }
            Kind::Symlink => out.push((path.clone(), fs.readlink(path.as_bytes()).unwrap())),
            _ => {
                let a = fs.lstat(path.as_bytes()).unwrap();
                let f = fs.open(path.as_bytes(), libc::O_RDONLY, 0).unwrap();
                let mut b = vec![0; a.size as usize];
                assert_eq!(fs.pread(f, &mut b, 0).unwrap(), b.len());
                fs.close(f).unwrap();
                out.push((path, b));
            }
        }
    }
}

fn tree_kernel(root: &Path, dir: &str, out: &mut Vec<(String, Vec<u8>)>) {
    let mut names: Vec<_> = std::fs::read_dir(root.join(dir.trim_start_matches('/')))
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    // PMFS lists in slot order; compare as sets.
    names.sort_by_key(|e| e.file_name());
    for e in names {
        let path = format!("{dir}/{}", e.file_name().to_str().unwrap());
        let real = root.join(path.trim_start_matches('/'));
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.push((path.clone(), b"dir".to_vec()));
            tree_kernel(root, &path, out);
        } else if t.is_symlink() {
            let l = std::fs::read_link(&real).unwrap();
            out.push((path, l.into_os_string().into_encoded_bytes()));
        } else {
            out.push((path, std::fs::read(&real).unwrap()));
        }
    }
}

fn sorted(mut v: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    v.sort();
    v
}

#[test]
fn random_calls_match_the_kernel_and_survive_a_remount() {
    let dir = pmkit_testkit::scratch();
    let pool = made(dir.path());
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    // PMKIT_POSIX_SEEDS=N for a longer run (40 seeds pass); POSIX_TRACE=1 prints each call.
    let seeds: u64 = std::env::var("PMKIT_POSIX_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    for seed in 1..=seeds {
        let fs = mounted(&pool);
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let (mut ours, mut theirs) = ([None; 4], [None; 4]);
        let mut seen = [0usize; 2];
        for step in 0..2000 {
            let op = random_op(&mut rng);
            let want = on_kernel(&model, &mut theirs, &op);
            let got = on_pmfs(&fs, &mut ours, &op);
            if std::env::var_os("POSIX_TRACE").is_some() {
                eprintln!("{seed}/{step}: {op:?} -> {want:?}");
            }
            assert_eq!(got, want, "seed {seed} step {step}: {op:?}");
            seen[matches!(want, Out::Err(_)) as usize] += 1;
            for i in 0..4 {
                let (a, b) = (fd_size_pmfs(&fs, &ours, i), fd_size_kernel(&theirs, i));
                assert_eq!(
                    a, b,
                    "seed {seed} step {step} ({op:?}): size behind slot {i}"
                );
            }
        }
        assert!(seen[0] > 150 && seen[1] > 150, "a mix: {seen:?}");
        for (o, t) in ours.iter().zip(theirs) {
            if let Some(f) = o {
                fs.close(*f).unwrap();
            }
            if let Some(t) = t {
                // SAFETY: our own descriptor.
                unsafe { libc::close(t) };
            }
        }
        let (mut a, mut b) = (vec![], vec![]);
        tree_pmfs(&fs, "", &mut a);
        tree_kernel(&model, "", &mut b);
        assert_eq!(sorted(a.clone()), sorted(b), "seed {seed}: the trees");
        drop(fs.unmount());
        // The next seed starts from this tree, remounted.
        let fs = mounted(&pool);
        let mut again = vec![];
        tree_pmfs(&fs, "", &mut again);
        assert_eq!(sorted(again), sorted(a), "seed {seed}: after a remount");
        drop(fs.unmount());
    }
}

#[test]
fn an_unlinked_open_file_keeps_its_inode_and_data() {
    let dir = pmkit_testkit::scratch();
    let pool = made(dir.path());
    let fs = mounted(&pool);
    let old = fs.open(b"b", libc::O_RDWR | libc::O_CREAT, 0o644).unwrap();
    fs.write(old, &[7; 5000]).unwrap();
    fs.unlink(b"b").unwrap();
    let new = fs
        .open(b"b", libc::O_RDONLY | libc::O_CREAT | libc::O_APPEND, 0o644)
        .unwrap();
    let (a, b) = (fs.fstat(old).unwrap(), fs.fstat(new).unwrap());
    assert_ne!(a.ino, b.ino, "{a:?} {b:?}");
    assert_eq!((a.size, a.links, b.size, b.links), (5000, 0, 0, 1));
    fs.close(old).unwrap();
    assert_eq!(fs.fstat(new).unwrap().size, 0);
}

#[test]
fn links_to_dot_and_dotdot_resolve_like_linux() {
    let dir = pmkit_testkit::scratch();
    let pool = made(dir.path());
    let fs = mounted(&pool);
    fs.mkdir(b"/d", 0o755).unwrap();
    fs.mkdir(b"/d/e", 0o755).unwrap();
    let f = fs
        .open(b"/d/f", libc::O_WRONLY | libc::O_CREAT, 0o644)
        .unwrap();
    fs.write(f, b"hello").unwrap();
    fs.close(f).unwrap();
    fs.symlink(b"..", b"/d/e/up").unwrap();
    fs.symlink(b".", b"/d/here").unwrap();
    fs.symlink(b"/d/f", b"/abs").unwrap();
    fs.symlink(b"loop", b"/loop").unwrap();
    let size = |p: &[u8]| fs.stat(p).map(|a| a.size);
    assert_eq!(size(b"/d/e/up/f").unwrap(), 5, "d/e/.. is d");
    assert_eq!(
        size(b"d/here/here/f").unwrap(),
        5,
        "d/. is d, relative from the root"
    );
    assert_eq!(
        size(b"/abs").unwrap(),
        5,
        "an absolute target starts at the root"
    );
    assert_eq!(
        size(b"/d/e/up/../d/f").unwrap(),
        5,
        ".. after a link is the target's parent"
    );
    assert_eq!(
        fs.stat(b"/..").unwrap().ino,
        pmkit_fs::ROOT,
        "the root is its own parent"
    );
    assert_eq!(fs.stat(b"/loop").unwrap_err().errno(), libc::ELOOP);
    assert_eq!(fs.lstat(b"/loop").unwrap().kind, Kind::Symlink);
    assert_eq!(fs.stat(b"/d/f/x").unwrap_err().errno(), libc::ENOTDIR);
    assert_eq!(fs.stat(b"").unwrap_err().errno(), libc::ENOENT);
    let nofollow = libc::O_RDONLY | libc::O_NOFOLLOW;
    assert_eq!(
        fs.open(b"/abs", nofollow, 0).unwrap_err().errno(),
        libc::ELOOP
    );
    // O_CREAT through a dangling link creates its target, as Linux does.
    fs.symlink(b"/d/new", b"/dangling").unwrap();
    let n = fs
        .open(b"/dangling", libc::O_WRONLY | libc::O_CREAT, 0o600)
        .unwrap();
    fs.close(n).unwrap();
    assert_eq!(fs.lstat(b"/d/new").unwrap().kind, Kind::File);
}

#[test]
fn a_final_dot_or_dotdot_is_never_removed_or_renamed() {
    let dir = pmkit_testkit::scratch();
    let pool = made(dir.path());
    let fs = mounted(&pool);
    fs.mkdir(b"/d", 0o755).unwrap();
    fs.mkdir(b"/d/e", 0o755).unwrap();
    // "d/." resolves to d, but the name "." is not d's entry: Linux refuses these (EINVAL),
    // where a lexical reading would remove or move d itself.
    for p in [&b"/d/e/."[..], b"/d/e/..", b"/d/e/./", b"/."] {
        assert_eq!(fs.rmdir(p).unwrap_err().errno(), libc::EINVAL, "{p:?}");
        assert_eq!(
            fs.rename(p, b"/x", RenameFlags::Replace)
                .unwrap_err()
                .errno(),
            libc::EINVAL,
            "{p:?}"
        );
        assert_eq!(fs.unlink(p).unwrap_err().errno(), libc::EINVAL, "{p:?}");
    }
    assert_eq!(
        fs.rename(b"/d/e", b"/d/.", RenameFlags::Replace)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(fs.stat(b"/d/e").unwrap().kind, Kind::Dir);
    assert_eq!(
        fs.stat(b"/d/e/.").unwrap().kind,
        Kind::Dir,
        "lookups still pass"
    );
    assert!(fs.stat(b"/x").is_err());
    fs.rmdir(b"/d/e").unwrap();
}

#[test]
fn with_credentials_the_mode_bits_are_checked_as_linux_does() {
    use pmkit_fs::posix::Cred;
    let dir = pmkit_testkit::scratch();
    let pool = made(dir.path());
    let fs = mounted(&pool);
    let rw = libc::O_RDWR;
    // As root: make a tree owned by uid 0.
    fs.set_cred(Some(Cred::new(0, 0, vec![])));
    fs.mkdir(b"/d", 0o755).unwrap();
    fs.mkdir(b"/t", 0o1777).unwrap();
    fs.mkdir(b"/closed", 0o700).unwrap();
    for p in [&b"/d/f"[..], b"/t/f", b"/closed/f", b"/d/shared"] {
        let f = fs.open(p, rw | libc::O_CREAT, 0o644).unwrap();
        fs.close(f).unwrap();
    }
    fs.chmod(b"/d/shared", 0o666).unwrap();
    let other = Cred::new(1000, 1000, vec![]);
    fs.set_cred(Some(other.clone()));
    let e = |r: pmkit_fs::Result<()>| r.unwrap_err().errno();
    let eo = |r: pmkit_fs::Result<Fd>| r.unwrap_err().errno();
    assert_eq!(eo(fs.open(b"/d/f", rw, 0)), libc::EACCES, "0644 of root");
    let f = fs.open(b"/d/f", libc::O_RDONLY, 0).unwrap();
    fs.close(f).unwrap();
    assert_eq!(
        eo(fs.open(b"/closed/f", libc::O_RDONLY, 0)),
        libc::EACCES,
        "no search"
    );
    assert_eq!(e(fs.stat(b"/closed/f").map(drop)), libc::EACCES);
    assert_eq!(
        eo(fs.open(b"/d/new", rw | libc::O_CREAT, 0o600)),
        libc::EACCES
    );
    assert_eq!(e(fs.unlink(b"/d/f")), libc::EACCES);
    assert_eq!(e(fs.chmod(b"/d/f", 0o777)), libc::EPERM);
    assert_eq!(e(fs.chown(b"/d/f", Some(1000), None, true)), libc::EPERM);
    assert_eq!(e(fs.utimens(b"/d/f", Some(1), Some(1))), libc::EPERM);
    assert_eq!(e(fs.utimensat(b"/d/f", None, true)), libc::EACCES);
    fs.utimensat(b"/d/shared", None, true).unwrap();
    assert_eq!(e(fs.truncate(b"/d/f", 0)), libc::EACCES);
    // A sticky, world-writable directory: new names yes, others' entries no.
    let mine = fs.open(b"/t/mine", rw | libc::O_CREAT, 0o600).unwrap();
    fs.close(mine).unwrap();
    assert_eq!(
        fs.stat(b"/t/mine").unwrap().uid,
        1000,
        "made by the credentials' user"
    );
    assert_eq!(e(fs.unlink(b"/t/f")), libc::EPERM);
    assert_eq!(
        e(fs.rename(b"/t/f", b"/t/g", RenameFlags::Replace)),
        libc::EPERM
    );
    fs.rename(b"/t/mine", b"/t/g", RenameFlags::Replace)
        .unwrap();
    assert_eq!(e(fs.access(b"/d/f", libc::W_OK as u32, true)), libc::EACCES);
    fs.access(b"/d/f", libc::R_OK as u32, true).unwrap();
    // Nothing refused changed anything.
    assert_eq!(fs.stat(b"/d/f").unwrap().mode, 0o644);
    // Without credentials (the library's default) nothing is checked.
    fs.set_cred(None);
    fs.unlink(b"/t/f").unwrap();
    fs.chmod(b"/d/f", 0o600).unwrap();
}
