//! The file system used in place by one process, with paths and descriptors, no FUSE and no
//! kernel on the way (PMFS's library access; what the C ABI and an LD_PRELOAD shim serve).
//!
//! [`Posix`] wraps a mounted [`Fs`]: it resolves paths (from the pool's root; there is no
//! current directory: a relative path is taken from the root too), follows symbolic links (at
//! most [`SYMLOOP_MAX`] per resolution, then `ELOOP`), and keeps a table of descriptors with
//! their own offsets and access modes (at most [`MAX_FDS`]). Every call is durable when it
//! returns, as the library's are: `fsync` has nothing left to do.
//!
//! Permissions are checked only for a caller with credentials ([`Posix::set_cred`]; the
//! LD_PRELOAD shim gives the process's, see `access.rs`). Without them (the library and its C
//! ABI by default) nothing is checked: the process holds the pool exclusively (the caller locks
//! it, as `pmkit fs mount` does) and may do anything in it. New nodes belong to the caller's
//! effective user and group, as the kernel would make them.

mod access;
mod attrs;
mod copy;
mod falloc;
mod fiemap;
mod flags;
mod locks;
mod open;
mod pins;
mod session;
pub use session::MAX_SESSIONS;
mod stat;
mod tmpfile;
pub use access::{Cred, MAX_GROUPS};
use access::{R, W, X};
pub use flags::{FileFlag, OpenFlags};
pub use locks::{Lock, LockKind, LockScope, MAX_LOCKS};
pub use open::Opened;
pub use stat::{d_type, secs, stat_of, type_bits};

use crate::{Attr, DirEntry, Error, Fs, Kind, RenameFlags, Result, SetAttr, StatFs, ROOT};
use parking_lot::{Mutex, RwLock};
use pmkit_media::extent_map::ExtentMap;
use pmkit_media::{Media, Region};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Most descriptors open at once.
pub const MAX_FDS: usize = 1 << 16;
/// Most symbolic links one path resolution follows (Linux's value).
pub const SYMLOOP_MAX: u32 = 40;
/// Longest path accepted (Linux's `PATH_MAX`).
pub const PATH_MAX: usize = 4096;

/// A descriptor number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Fd(pub u32);

struct Desc {
    ino: u64,
    kind: Kind,
    flags: OpenFlags,
    /// A directory removed while open: its attributes at removal (links 0). The library frees
    /// a removed directory at once (only files wait for their last close), so the descriptor
    /// must stop reaching the inode, whose number a new file may take.
    removed: Mutex<Option<Attr>>,
    /// The file offset; its lock also orders `read`/`write` calls on one descriptor.
    off: Mutex<u64>,
}

/// Where `lseek` counts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Whence {
    Set,
    Cur,
    End,
    /// SEEK_DATA and SEEK_HOLE: the next data or hole at or after the offset (`Fs::seek`).
    Data,
    Hole,
}

/// A path resolved up to its last component.
struct Resolved {
    parent: u64,
    /// The parent directory's attributes.
    dir: Attr,
    name: Vec<u8>,
    /// The last component's attributes (after following it when asked), if it exists.
    attr: Option<Attr>,
}

/// A descriptor table: a slot per number.
type Table = Mutex<Vec<Option<Arc<Desc>>>>;

/// A mounted file system with paths and descriptors (see the module docs). Several may share
/// one [`Fs`] as sessions ([`Posix::session`], [`Posix::fork`]: a pool's server gives each
/// client process one), each with its own descriptor table and credentials.
pub struct Posix<M: Media> {
    fs: Arc<Fs<M>>,
    fds: Arc<Table>,
    /// What the sessions of one `Fs` share (`session.rs`).
    common: Arc<session::Common>,
    /// Ranges mapped for direct access, by address (see [`Posix::map`]).
    maps: Mutex<HashMap<usize, Mapped>>,
    /// Ranges pinned for another process's mappings, by number (`posix/pins.rs`).
    pins: Mutex<HashMap<u64, pins::Pinned>>,
    next_pin: std::sync::atomic::AtomicU64,
    /// Whose permissions to check; `None`: no checks.
    cred: RwLock<Option<Cred>>,
    /// The longest path a call takes ([`PATH_MAX`] - 1 unless [`Posix::set_path_max`]).
    path_max: std::sync::atomic::AtomicUsize,
}

/// A file range mapped for direct access: its address and length. Loads and stores through
/// `ptr` go straight to PM; stores are durable after [`Posix::persist`] of their bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapView {
    pub ptr: *mut u8,
    pub len: usize,
    /// Bytes of the view that are whole 2 MiB blocks of the file placed at 2 MiB-aligned
    /// addresses (what the kernel can map with 2 MiB pages); the rest is 4 KiB blocks, mapped
    /// with 4 KiB pages. [`Posix::map_parts`] says which.
    pub huge_bytes: usize,
}

struct Mapped {
    ino: u64,
    off: u64,
    len: u64,
    view: ExtentMap,
}

/// Who new nodes belong to: the calling thread's effective user and group, as the kernel does.
fn caller() -> crate::Owner {
    // SAFETY: geteuid and getegid cannot fail.
    unsafe {
        crate::Owner {
            uid: libc::geteuid(),
            gid: libc::getegid(),
        }
    }
}

fn components(path: &[u8], max: usize) -> Result<Vec<Vec<u8>>> {
    if path.is_empty() {
        return Err(Error::NotFound);
    }
    if path.len() > max {
        return Err(Error::NameTooLong {
            len: path.len(),
            max,
        });
    }
    Ok(path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(<[u8]>::to_vec)
        .collect())
}

impl<M: Media> Posix<M> {
    pub fn new(fs: Fs<M>) -> Posix<M> {
        Posix::shared(Arc::new(fs))
    }

    /// A first session of `fs`, which others (the FUSE mount) may use too.
    pub fn shared(fs: Arc<Fs<M>>) -> Posix<M> {
        let fds = Arc::new(Table::default());
        Posix {
            fs,
            common: Arc::new(session::Common::new(&fds)),
            fds,
            maps: Mutex::new(HashMap::new()),
            pins: Mutex::new(HashMap::new()),
            next_pin: std::sync::atomic::AtomicU64::new(1),
            cred: RwLock::new(None),
            path_max: std::sync::atomic::AtomicUsize::new(PATH_MAX - 1),
        }
    }

    /// Take paths of up to `max` bytes. A caller that joins a relative path to its own
    /// current directory (the LD_PRELOAD shim) checks the string it was given against
    /// `PATH_MAX`, as the kernel does, and passes the longer joined path here.
    pub fn set_path_max(&self, max: usize) {
        assert!(max >= PATH_MAX - 1, "below PATH_MAX: {max}");
        self.path_max.store(max, Ordering::Relaxed);
    }

    /// Check every later call's permissions for `cred` (`None`: check nothing, the default).
    pub fn set_cred(&self, cred: Option<Cred>) {
        *self.cred.write() = cred;
    }

    /// The credentials checked, if any.
    pub fn cred(&self) -> Option<Cred> {
        self.cred.read().clone()
    }

    /// Who new nodes belong to: the credentials checked, else the calling thread's effective
    /// user and group.
    fn owner(&self) -> crate::Owner {
        match &*self.cred.read() {
            Some(c) => crate::Owner {
                uid: c.uid,
                gid: c.gid,
            },
            None => caller(),
        }
    }

    /// Run `f` with the credentials to check, if any.
    fn checking<T>(&self, f: impl FnOnce(&Cred) -> Result<T>) -> Result<Option<T>> {
        match &*self.cred.read() {
            Some(c) => f(c).map(Some),
            None => Ok(None),
        }
    }

    /// The inode API underneath.
    pub fn fs(&self) -> &Fs<M> {
        &self.fs
    }

    /// Unmap every mapped range, close every descriptor and unmount (marks the pool clean);
    /// the media back. Every other session of the file system must have ended first.
    pub fn unmount(self) -> M {
        let fs = self.end();
        match Arc::try_unwrap(fs) {
            Ok(fs) => fs.unmount(),
            Err(_) => panic!("Posix::unmount while other sessions or users hold the file system"),
        }
    }

    /// Resolve `path`: every component but the last must be a directory (symbolic links on
    /// the way are followed); the last is followed too when `follow`.
    fn resolve(&self, path: &[u8], follow: bool) -> Result<Resolved> {
        let cred = self.cred.read();
        let mut todo = components(path, self.path_max.load(Ordering::Relaxed))?;
        todo.reverse(); // a stack: the next component last
        let root = self.fs.getattr(ROOT)?;
        let mut cur = root;
        let mut links = 0u32;
        let mut last = Resolved {
            parent: ROOT,
            dir: root,
            name: b".".to_vec(),
            attr: Some(root),
        };
        while let Some(name) = todo.pop() {
            let is_last = todo.is_empty();
            if let Some(c) = cred.as_ref() {
                c.check(&cur, X, "no search permission on a directory of the path")?;
            }
            let attr = match self.fs.lookup(cur.ino, &name) {
                Ok(a) => Some(a),
                Err(Error::NotFound) if is_last => None,
                Err(e) => return Err(e),
            };
            if let Some(a) = attr.filter(|a| a.kind == Kind::Symlink && (follow || !is_last)) {
                links += 1;
                if links > SYMLOOP_MAX {
                    return Err(Error::Loop);
                }
                let target = self.fs.readlink(a.ino)?;
                if target.first() == Some(&b'/') {
                    cur = root;
                }
                let mut more = components(&target, PATH_MAX - 1)?;
                more.reverse();
                todo.extend(more);
                if todo.is_empty() {
                    // A link to "/" (or to ".").
                    last = Resolved {
                        parent: cur.ino,
                        dir: cur,
                        name: b".".to_vec(),
                        attr: Some(self.fs.getattr(cur.ino)?),
                    };
                }
                continue;
            }
            if is_last {
                last = Resolved {
                    parent: cur.ino,
                    dir: cur,
                    name,
                    attr,
                };
            } else {
                let a = attr.expect("only the last component may be missing");
                if a.kind != Kind::Dir {
                    return Err(Error::NotDir);
                }
                cur = a;
            }
        }
        Ok(last)
    }

    /// The parent directory and name of a path whose last component is made or removed.
    fn parent_of(&self, path: &[u8]) -> Result<Resolved> {
        // "dir/." resolves to dir, but removing or renaming it by that name is EINVAL.
        let last = path.split(|&b| b == b'/').rfind(|c| !c.is_empty());
        if matches!(last, Some(b"." | b"..")) {
            return Err(Error::BadName("the last component is . or .."));
        }
        let r = self.resolve(path, false)?;
        if r.name == b"." || r.name == b".." {
            return Err(Error::BadName("the last component is . or .."));
        }
        Ok(r)
    }

    /// As [`Posix::parent_of`] for a path to be made: one that exists (the root, `.`, `..`
    /// included) is EEXIST first, as Linux answers `mkdir("/")`; then the directory must be
    /// writable.
    fn new_name(&self, path: &[u8]) -> Result<(u64, Vec<u8>)> {
        let r = self.resolve(path, false)?;
        if r.attr.is_some() {
            return Err(Error::Exists);
        }
        self.checking(|c| c.check(&r.dir, W, "no write permission on the directory"))?;
        Ok((r.parent, r.name))
    }

    fn desc(&self, fd: Fd) -> Result<Arc<Desc>> {
        self.fds
            .lock()
            .get(fd.0 as usize)
            .and_then(Option::clone)
            .ok_or(Error::BadFd(fd.0))
    }

    /// Run `remove`, which may remove directory `gone` (when it is one); if it succeeds, every
    /// descriptor of that directory is marked removed (see [`Desc::removed`]).
    fn removing_dir<T>(&self, gone: Option<Attr>, remove: impl FnOnce() -> Result<T>) -> Result<T> {
        let out = remove()?;
        if let Some(a) = gone.filter(|a| a.kind == Kind::Dir) {
            for d in self.common.open_dirs(a.ino) {
                *d.removed.lock() = Some(Attr {
                    links: 0,
                    size: 0,
                    ..a
                });
            }
        }
        Ok(out)
    }

    fn readable(&self, fd: Fd) -> Result<Arc<Desc>> {
        let d = self.desc(fd)?;
        match (d.kind, d.flags.read) {
            (Kind::Dir, _) => Err(Error::IsDir),
            (_, false) => Err(Error::BadFd(fd.0)),
            _ => Ok(d),
        }
    }

    fn writable(&self, fd: Fd) -> Result<Arc<Desc>> {
        let d = self.desc(fd)?;
        if !d.flags.write {
            return Err(Error::BadFd(fd.0));
        }
        Ok(d)
    }

    /// pread(2): up to `buf.len()` bytes at `off`; 0 at or past the end.
    pub fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize> {
        let d = self.readable(fd)?;
        self.fs.read_into(d.ino, off, buf)
    }

    /// read(2) at the descriptor's offset, which advances.
    pub fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        let d = self.readable(fd)?;
        let mut off = d.off.lock();
        let n = self.fs.read_into(d.ino, *off, buf)?;
        *off += n as u64;
        Ok(n)
    }

    /// Write at the end of the file, whatever other descriptors do; the new end.
    fn append_write(&self, d: &Desc, data: &[u8]) -> Result<u64> {
        let _g = self.common.append.lock();
        let end = self.fs.getattr(d.ino)?.size;
        let n = self.fs.write(d.ino, end, data)?;
        Ok(end + n as u64)
    }

    /// pwrite(2). As on Linux, a descriptor opened with `O_APPEND` appends whatever `off` says.
    pub fn pwrite(&self, fd: Fd, data: &[u8], off: u64) -> Result<usize> {
        let d = self.writable(fd)?;
        self.kill_privs_for_write(d.ino)?;
        if d.flags.append {
            self.append_write(&d, data)?;
            return Ok(data.len());
        }
        self.fs.write(d.ino, off, data)
    }

    /// write(2) at the descriptor's offset (or at the end with `O_APPEND`), which advances.
    pub fn write(&self, fd: Fd, data: &[u8]) -> Result<usize> {
        let d = self.writable(fd)?;
        self.kill_privs_for_write(d.ino)?;
        let mut off = d.off.lock();
        if d.flags.append {
            *off = self.append_write(&d, data)?;
            return Ok(data.len());
        }
        let n = self.fs.write(d.ino, *off, data)?;
        *off += n as u64;
        Ok(n)
    }

    /// lseek(2); the new offset. Seeking past the end is allowed (a later write makes a hole).
    pub fn lseek(&self, fd: Fd, delta: i64, whence: Whence) -> Result<u64> {
        let d = self.desc(fd)?;
        let mut off = d.off.lock();
        let base = match whence {
            Whence::Set => 0,
            Whence::Cur => *off,
            // A directory has no end to seek from (as tmpfs and ext4 answer).
            Whence::End if d.kind == Kind::Dir => {
                return Err(Error::Invalid("SEEK_END on a directory"))
            }
            Whence::End => self.fs.getattr(d.ino)?.size,
            Whence::Data | Whence::Hole => {
                let to = [crate::Seek::Hole, crate::Seek::Data][(whence == Whence::Data) as usize];
                let at = u64::try_from(delta).map_err(|_| Error::NoDevice("a negative offset"))?;
                *off = self.fs.seek(d.ino, at, to)?;
                return Ok(*off);
            }
        };
        let new = base
            .checked_add_signed(delta)
            .ok_or(Error::Invalid("offset before the start of the file"))?;
        *off = new;
        Ok(new)
    }

    /// fsync(2) and fdatasync(2): every write was durable at return; nothing left to do.
    pub fn fsync(&self, fd: Fd) -> Result<()> {
        let d = self.desc(fd)?;
        if d.removed.lock().is_some() {
            return Ok(());
        }
        self.fs.fsync(d.ino)
    }

    pub fn ftruncate(&self, fd: Fd, len: u64) -> Result<()> {
        let d = self.desc(fd)?;
        if !d.flags.write || d.kind != Kind::File {
            // Linux: EINVAL for a descriptor not open for writing (EBADF is for no descriptor).
            return Err(Error::Invalid("the descriptor is not open for writing"));
        }
        self.fs
            .setattr(
                d.ino,
                &SetAttr {
                    size: Some(len),
                    kill_suidgid: self.kills_privs(),
                    ..SetAttr::default()
                },
            )
            .map(drop)
    }

    pub fn fstat(&self, fd: Fd) -> Result<Attr> {
        let d = self.desc(fd)?;
        if let Some(a) = *d.removed.lock() {
            return Ok(a);
        }
        self.fs.getattr(d.ino)
    }

    fn existing(&self, path: &[u8], follow: bool) -> Result<Attr> {
        self.resolve(path, follow)?.attr.ok_or(Error::NotFound)
    }

    /// stat(2): follows a final symbolic link.
    pub fn stat(&self, path: &[u8]) -> Result<Attr> {
        self.existing(path, true)
    }

    /// lstat(2): a final symbolic link itself.
    pub fn lstat(&self, path: &[u8]) -> Result<Attr> {
        self.existing(path, false)
    }

    pub fn mkdir(&self, path: &[u8], mode: u32) -> Result<Attr> {
        let (p, n) = self.new_name(path)?;
        self.fs.mkdir_as(self.owner(), p, &n, mode & 0o7777)
    }

    /// mknod(2): a FIFO, socket or device node (`mode` carries the type bits; `rdev` the
    /// device number in the kernel's 32-bit encoding), or an empty regular file.
    pub fn mknod(&self, path: &[u8], mode: u32, rdev: u32) -> Result<Attr> {
        let (p, n) = self.new_name(path)?;
        let fmt = mode & libc::S_IFMT;
        if fmt == 0 || fmt == libc::S_IFREG {
            return self.fs.create_as(self.owner(), p, &n, mode & 0o7777);
        }
        self.fs.mknod_as(self.owner(), p, &n, mode, rdev)
    }

    pub fn rmdir(&self, path: &[u8]) -> Result<()> {
        let r = self.parent_of(path)?;
        let (p, n) = (r.parent, &r.name);
        let gone = self.fs.lookup(p, n).ok();
        if let Some(v) = gone {
            self.checking(|c| c.may_delete(&r.dir, &v))?;
        }
        self.removing_dir(gone, || self.fs.rmdir(p, n))
    }

    pub fn unlink(&self, path: &[u8]) -> Result<()> {
        let r = self.parent_of(path)?;
        self.checking(|c| match self.fs.lookup(r.parent, &r.name) {
            Ok(v) => c.may_delete(&r.dir, &v),
            Err(_) => Ok(()), // the unlink below says what is wrong
        })?;
        self.fs.unlink(r.parent, &r.name)
    }

    /// rename(2) and renameat2(2)'s `RENAME_NOREPLACE` / `RENAME_EXCHANGE`.
    pub fn rename(&self, from: &[u8], to: &[u8], flags: RenameFlags) -> Result<()> {
        let r1 = self.parent_of(from)?;
        let r2 = self.parent_of(to)?;
        let (p1, n1, p2, n2) = (r1.parent, &r1.name, r2.parent, &r2.name);
        let source = self.fs.lookup(p1, n1)?;
        let target = self.fs.lookup(p2, n2).ok();
        self.checking(|c| {
            c.may_delete(&r1.dir, &source)?;
            match target {
                Some(t) => c.may_delete(&r2.dir, &t)?,
                None => c.check(&r2.dir, W | X, "no write permission on the directory")?,
            }
            // A directory that changes parent has its ".." rewritten: it must be writable
            // (and, exchanged, so must the other).
            let moves = |a: &Attr| a.kind == Kind::Dir && p1 != p2 && !c.is_root();
            if moves(&source) {
                c.check(&source, W, "no write permission on the directory moved")?;
            }
            if let Some(t) = target.filter(|t| flags == RenameFlags::Exchange && moves(t)) {
                c.check(&t, W, "no write permission on the directory moved")?;
            }
            Ok(())
        })?;
        // As Linux (before any type check): a target that is an ancestor of the source's
        // directory is ENOTEMPTY (the FUSE mount gets this from the kernel's VFS).
        if let Some(t) = target.filter(|t| t.kind == Kind::Dir) {
            let mut cur = p1;
            // Bounded: no chain of parents is longer than the inode table.
            for _ in 0..=self.fs.statfs().inodes {
                if cur == t.ino {
                    return Err(Error::NotEmpty);
                }
                if cur == ROOT {
                    break;
                }
                cur = self.fs.lookup(cur, b"..")?.ino;
            }
        }
        // A directory renamed over another removes that one (EXCHANGE removes nothing).
        let gone = match flags {
            RenameFlags::Exchange => None,
            _ => target,
        };
        self.removing_dir(gone, || self.fs.rename(p1, n1, p2, n2, flags))
    }

    /// link(2): a new name `new` for the file `old` (not followed if a symbolic link, as Linux).
    pub fn link(&self, old: &[u8], new: &[u8]) -> Result<Attr> {
        let a = self.existing(old, false)?;
        let r = self.parent_of(new)?;
        // Linux looks the new name up first: an existing one is EEXIST even for a directory.
        if self.fs.lookup(r.parent, &r.name).is_ok() {
            return Err(Error::Exists);
        }
        self.checking(|c| c.check(&r.dir, W, "no write permission on the directory"))?;
        self.fs.link(a.ino, r.parent, &r.name)
    }

    pub fn symlink(&self, target: &[u8], path: &[u8]) -> Result<Attr> {
        let (p, n) = self.new_name(path)?;
        self.fs.symlink_as(self.owner(), p, &n, target)
    }

    pub fn readlink(&self, path: &[u8]) -> Result<Vec<u8>> {
        let a = self.existing(path, false)?;
        if a.kind != Kind::Symlink {
            return Err(Error::Invalid("not a symbolic link"));
        }
        self.fs.readlink(a.ino)
    }

    /// The entries of a directory, `.` and `..` first.
    pub fn readdir(&self, path: &[u8]) -> Result<Vec<DirEntry>> {
        let a = self.existing(path, true)?;
        self.checking(|c| c.check(&a, R, "no read permission on the directory"))?;
        self.fs.readdir(a.ino)
    }

    pub fn statfs(&self) -> StatFs {
        self.fs.statfs()
    }
}

/// Direct access (XIP): needs the mapping's file, so a `Region`.
impl Posix<Region> {
    /// Map file bytes `[off, off + len)` of `fd` (opened read-write) for direct access: holes
    /// in the range are allocated and the file grows to `off + len` if shorter (as
    /// `posix_fallocate`), and the range's PM is mapped at one address, in file order (2 MiB
    /// blocks at 2 MiB-aligned addresses). `off` and `len` are multiples of 4 KiB.
    ///
    /// While mapped, the file stays open (an unlink frees nothing until [`Posix::unmap`]) and
    /// its blocks stay put: a truncate that would cut the range, or turning the file atomic,
    /// fails with EBUSY; an atomic file cannot be mapped (EINVAL). Stores through the view
    /// bypass the protection mode (that is what direct access is for) and the journal: they
    /// are durable after [`Posix::persist`], with no atomicity beyond 8 aligned bytes.
    pub fn map(&self, fd: Fd, off: u64, len: u64) -> Result<MapView> {
        self.map_with(fd, (off, len), crate::Falloc::Allocate)
    }

    /// [`Posix::map`] for mmap(2)'s `MAP_SHARED`: the file keeps its size (holes in the range
    /// are allocated past it with `KEEP_SIZE`; bytes past the size read as zeros and stay
    /// invisible to reads, where the kernel would raise SIGBUS).
    pub fn map_keep_size(&self, fd: Fd, off: u64, len: u64) -> Result<MapView> {
        self.map_with(fd, (off, len), crate::Falloc::KeepSize)
    }

    fn map_with(&self, fd: Fd, (off, len): (u64, u64), alloc: crate::Falloc) -> Result<MapView> {
        let (ino, extents) = self.pin_with(fd, (off, len), alloc)?;
        let view = match ExtentMap::new(self.fs.media().inner(), &extents) {
            Ok(v) => v,
            Err(e) => {
                self.fs.unpin(ino, off, len);
                let _ = self.fs.release(ino);
                return Err(Error::NotSupported(match e.os_error() {
                    Some(libc::ENOMEM) => "direct access: out of address space or map count",
                    _ => "direct access: the pool cannot be mapped here",
                }));
            }
        };
        let out = MapView {
            ptr: view.as_ptr(),
            len: view.len(),
            huge_bytes: view.huge_parts().iter().map(|p| p.1).sum(),
        };
        self.maps.lock().insert(
            out.ptr as usize,
            Mapped {
                ino,
                off,
                len,
                view,
            },
        );
        Ok(out)
    }

    /// The parts of the view [`Posix::map`] returned at `ptr` that can take 2 MiB pages, as
    /// `(offset in the view, length)`: whole 2 MiB blocks (a file asks for them with
    /// [`Posix::set_flag`] with [`FileFlag::Huge`], or writes a whole aligned 2 MiB span) at 2 MiB-aligned addresses.
    pub fn map_parts(&self, ptr: *const u8) -> Result<Vec<(usize, usize)>> {
        let maps = self.maps.lock();
        let m = maps
            .get(&(ptr as usize))
            .ok_or(Error::Invalid("not the address of a mapped range"))?;
        Ok(m.view.huge_parts().to_vec())
    }

    /// Make `[ptr, ptr + len)`, inside one mapped range, durable (flush and fence).
    pub fn persist(&self, ptr: *const u8, len: usize) -> Result<()> {
        let maps = self.maps.lock();
        let m = maps
            .values()
            .find(|m| m.view.contains(ptr, len))
            .ok_or(Error::Invalid(
                "persist of bytes outside every mapped range",
            ))?;
        let off = ptr as usize - m.view.as_ptr() as usize;
        m.view
            .persist(off, len)
            .map_err(|_| Error::WriteFailed("msync of a mapped range failed".into()))
    }

    /// Unmap the range [`Posix::map`] returned at `ptr`; its pointers must not be used again.
    pub fn unmap(&self, ptr: *mut u8) -> Result<()> {
        let m = self
            .maps
            .lock()
            .remove(&(ptr as usize))
            .ok_or(Error::Invalid("not the address of a mapped range"))?;
        drop(m.view);
        self.fs.unpin(m.ino, m.off, m.len);
        self.fs.release(m.ino)
    }
}
