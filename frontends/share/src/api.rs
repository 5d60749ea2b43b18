//! The calls a client makes: [`PoolApi`], served in place by a [`Posix`] session (the pool
//! mounted in this process) or through a [`Client`] by the pool's server, which runs the same
//! `Posix` method on the client's session. The simple calls are listed once in `calls!`, which
//! writes the trait, the request, both implementations and the server's dispatch; the rest
//! (data with buffers, mappings, credentials) are written out below.

use crate::wire::{Arg, Wire};
use pmkit_fs::posix::{Cred, Fd, FileFlag, Lock, MapView, Opened, Posix, Whence};
use pmkit_fs::{Attr, DirEntry, Error, Extent, Falloc, RenameFlags, Result, StatFs};
use pmkit_media::Media;
use serde::{Deserialize, Serialize};

/// A reply: the value, or the errno.
pub(crate) fn encode<T: Serialize>(r: Result<T>) -> Vec<u8> {
    let r: std::result::Result<T, i32> = r.map_err(|e| e.errno());
    postcard::to_allocvec(&r).expect("a reply encodes")
}

/// What carries a call to a server and its reply back (the client's connection).
pub trait Transport {
    fn call<T: serde::de::DeserializeOwned>(&self, m: &crate::Message) -> Result<T>;
}

macro_rules! calls {
    ($( fn $name:ident($($arg:ident: $aty:ty => $owned:ty),*) -> $ret:ty; )*) => {
        /// The calls that travel as they are (see the module docs); each is the [`Posix`]
        /// method of the same name.
        pub trait Calls {
            $( fn $name(&self, $($arg: $aty),*) -> Result<$ret>; )*
        }

        /// A call of [`Calls`] with its arguments.
        #[allow(non_camel_case_types)]
        #[derive(Debug, Serialize, Deserialize)]
        pub enum Request {
            $( $name { $($arg: $owned),* }, )*
        }

        impl<M: Media> Calls for Posix<M> {
            $( fn $name(&self, $($arg: $aty),*) -> Result<$ret> {
                Posix::$name(self, $($arg),*)
            } )*
        }

        impl<T: Transport> Calls for T {
            $( fn $name(&self, $($arg: $aty),*) -> Result<$ret> {
                self.call(&crate::Message::Call(Request::$name { $($arg: Wire::own($arg)),* }))
            } )*
        }

        /// The calls' names and types as written: a change to any changes
        /// [`crate::PROTOCOL`].
        pub(crate) const CALLS_TEXT: &str = stringify!($( $name($($arg: $aty => $owned),*) -> $ret; )*);

        /// Run `r` on session `p`; the encoded reply.
        pub(crate) fn dispatch<M: Media>(p: &Posix<M>, r: Request) -> Vec<u8> {
            match r {
                $( Request::$name { $($arg),* } => encode(Posix::$name(p, $(Arg::arg(&$arg)),*)), )*
            }
        }
    };
}

calls! {
    fn lseek(fd: Fd => Fd, delta: i64 => i64, whence: Whence => Whence) -> u64;
    fn ftruncate(fd: Fd => Fd, len: u64 => u64) -> ();
    fn fstat(fd: Fd => Fd) -> Attr;
    fn stat(path: &[u8] => Vec<u8>) -> Attr;
    fn lstat(path: &[u8] => Vec<u8>) -> Attr;
    fn mkdir(path: &[u8] => Vec<u8>, mode: u32 => u32) -> Attr;
    fn mknod(path: &[u8] => Vec<u8>, mode: u32 => u32, rdev: u32 => u32) -> Attr;
    fn rmdir(path: &[u8] => Vec<u8>) -> ();
    fn unlink(path: &[u8] => Vec<u8>) -> ();
    fn rename(from: &[u8] => Vec<u8>, to: &[u8] => Vec<u8>, flags: RenameFlags => RenameFlags) -> ();
    fn link(old: &[u8] => Vec<u8>, new: &[u8] => Vec<u8>) -> Attr;
    fn symlink(target: &[u8] => Vec<u8>, path: &[u8] => Vec<u8>) -> Attr;
    fn readlink(path: &[u8] => Vec<u8>) -> Vec<u8>;
    fn readdir(path: &[u8] => Vec<u8>) -> Vec<DirEntry>;
    fn access(path: &[u8] => Vec<u8>, want: u32 => u32, follow: bool => bool) -> ();
    fn chmod(path: &[u8] => Vec<u8>, mode: u32 => u32) -> ();
    fn chmod_at(path: &[u8] => Vec<u8>, mode: u32 => u32, follow: bool => bool) -> ();
    fn fchmod(fd: Fd => Fd, mode: u32 => u32) -> ();
    fn chown(path: &[u8] => Vec<u8>, uid: Option<u32> => Option<u32>, gid: Option<u32> => Option<u32>, follow: bool => bool) -> ();
    fn fchown(fd: Fd => Fd, uid: Option<u32> => Option<u32>, gid: Option<u32> => Option<u32>) -> ();
    fn utimensat(path: &[u8] => Vec<u8>, times: Option<[libc::timespec; 2]> => Option<[(i64, i64); 2]>, follow: bool => bool) -> ();
    fn futimens(fd: Fd => Fd, times: Option<[libc::timespec; 2]> => Option<[(i64, i64); 2]>) -> ();
    fn truncate(path: &[u8] => Vec<u8>, len: u64 => u64) -> ();
    fn utimens(path: &[u8] => Vec<u8>, atime: Option<i64> => Option<i64>, mtime: Option<i64> => Option<i64>) -> ();
    fn fallocate(fd: Fd => Fd, off: u64 => u64, len: u64 => u64) -> ();
    fn fallocate_mode(fd: Fd => Fd, off: u64 => u64, len: u64 => u64, mode: Falloc => Falloc) -> ();
    fn extents(fd: Fd => Fd, off: u64 => u64, len: u64 => u64) -> Vec<Extent>;
    fn copy_range(fd_in: Fd => Fd, off_in: Option<u64> => Option<u64>, fd_out: Fd => Fd, off_out: Option<u64> => Option<u64>, len: u64 => u64) -> u64;
    fn clone_range(fd_in: Fd => Fd, off_in: u64 => u64, fd_out: Fd => Fd, off_out: u64 => u64, len: u64 => u64) -> u64;
    fn flag(path: &[u8] => Vec<u8>, follow: bool => bool, flag: FileFlag => FileFlag) -> Option<bool>;
    fn set_flag(path: &[u8] => Vec<u8>, follow: bool => bool, flag: FileFlag => FileFlag, on: bool => bool) -> ();
    fn fflag(fd: Fd => Fd, flag: FileFlag => FileFlag) -> Option<bool>;
    fn set_fflag(fd: Fd => Fd, flag: FileFlag => FileFlag, on: bool => bool) -> ();
    fn open(path: &[u8] => Vec<u8>, flags: i32 => i32, mode: u32 => u32) -> Fd;
    fn open_node(path: &[u8] => Vec<u8>, flags: i32 => i32, mode: u32 => u32) -> Opened;
    fn close(fd: Fd => Fd) -> ();
    fn link_fd(fd: Fd => Fd, new: &[u8] => Vec<u8>) -> Attr;
    fn lock(fd: Fd => Fd, l: Lock => Lock) -> ();
    fn test_lock(fd: Fd => Fd, l: Lock => Lock) -> Option<Lock>;
    fn pin_range(fd: Fd => Fd, off: u64 => u64, len: u64 => u64) -> (u64, Vec<(u64, u64)>);
    fn unpin_range(id: u64 => u64) -> ();
    fn read_layout(fd: Fd => Fd, off: u64 => u64) -> pmkit_fs::direct::ReadLayout;
}

/// Every call a client makes of a pool: [`Calls`] and the ones written out here.
pub trait PoolApi: Calls {
    fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize>;
    fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize>;
    fn pwrite(&self, fd: Fd, data: &[u8], off: u64) -> Result<usize>;
    fn write(&self, fd: Fd, data: &[u8]) -> Result<usize>;
    /// fsync(2): every write is durable when it returns, in process and through a server, so
    /// a client answers it without a round trip.
    fn fsync(&self, fd: Fd) -> Result<()>;
    fn statfs(&self) -> Result<StatFs>;
    /// An inode's attributes by number (a descriptor the shim recognises by its inode).
    fn getattr_ino(&self, ino: u64) -> Result<Attr>;
    /// A directory's entries by inode number.
    fn readdir_ino(&self, ino: u64) -> Result<Vec<DirEntry>>;
    fn set_cred(&self, cred: Option<Cred>) -> Result<()>;
    fn set_path_max(&self, max: usize) -> Result<()>;
    /// Direct access (`Posix::map_keep_size` and the rest): in process, a view of the pool this
    /// process mounted; in a client of a server, the pool file mapped by the client itself at
    /// the extents its session pins (`Posix::pin_range`).
    fn map_keep_size(&self, fd: Fd, off: u64, len: u64) -> Result<MapView>;
    fn persist(&self, ptr: *const u8, len: usize) -> Result<()>;
    fn unmap(&self, ptr: *mut u8) -> Result<()>;
}

/// The calls of [`PoolApi`] that are not [`Calls`].
#[derive(Debug, Serialize, Deserialize)]
pub enum Special {
    Pread {
        fd: Fd,
        len: u64,
        off: u64,
    },
    Read {
        fd: Fd,
        len: u64,
    },
    Pwrite {
        fd: Fd,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        off: u64,
    },
    Write {
        fd: Fd,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    Statfs,
    GetattrIno(u64),
    ReaddirIno(u64),
    SetCred(Option<Cred>),
    SetPathMax(u64),
    /// Close every descriptor of the session but these (after exec).
    Keep(Vec<Fd>),
    /// Is this a pool server's session, of this protocol? Answers [`crate::HELLO`] and
    /// [`crate::PROTOCOL`].
    Ping,
}

/// Run special call `s` on session `p`; the encoded reply.
pub(crate) fn dispatch_special<M: Media>(p: &Posix<M>, s: Special) -> Vec<u8> {
    match s {
        Special::Pread { fd, len, off } => {
            let mut buf = vec![0; len.min(crate::MAX_IO as u64) as usize];
            encode(p.pread(fd, &mut buf, off).map(|n| {
                buf.truncate(n);
                serde_bytes::ByteBuf::from(buf)
            }))
        }
        Special::Read { fd, len } => {
            let mut buf = vec![0; len.min(crate::MAX_IO as u64) as usize];
            encode(p.read(fd, &mut buf).map(|n| {
                buf.truncate(n);
                serde_bytes::ByteBuf::from(buf)
            }))
        }
        Special::Pwrite { fd, data, off } => encode(p.pwrite(fd, &data, off)),
        Special::Write { fd, data } => encode(p.write(fd, &data)),
        Special::Statfs => encode(Ok(p.statfs())),
        Special::GetattrIno(ino) => encode(p.fs().getattr(ino)),
        Special::ReaddirIno(ino) => encode(p.fs().readdir(ino)),
        Special::SetCred(c) => {
            p.set_cred(c);
            encode(Ok(()))
        }
        Special::Keep(fds) => {
            // After exec: the descriptors that survived, and no mapping.
            p.retain(&fds);
            p.unpin_all();
            encode(Ok(()))
        }
        Special::Ping => encode(Ok((crate::HELLO.to_string(), crate::PROTOCOL))),
        Special::SetPathMax(max) => encode(match usize::try_from(max) {
            Ok(m) if m >= pmkit_fs::posix::PATH_MAX - 1 => {
                p.set_path_max(m);
                Ok(())
            }
            _ => Err(Error::Invalid("a path limit below PATH_MAX")),
        }),
    }
}

/// In place: the pool mounted in this process (direct access needs a `Region`).
impl PoolApi for Posix<pmkit_media::Region> {
    fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize> {
        Posix::pread(self, fd, buf, off)
    }
    fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        Posix::read(self, fd, buf)
    }
    fn pwrite(&self, fd: Fd, data: &[u8], off: u64) -> Result<usize> {
        Posix::pwrite(self, fd, data, off)
    }
    fn write(&self, fd: Fd, data: &[u8]) -> Result<usize> {
        Posix::write(self, fd, data)
    }
    fn fsync(&self, fd: Fd) -> Result<()> {
        Posix::fsync(self, fd)
    }
    fn statfs(&self) -> Result<StatFs> {
        Ok(Posix::statfs(self))
    }
    fn getattr_ino(&self, ino: u64) -> Result<Attr> {
        self.fs().getattr(ino)
    }
    fn readdir_ino(&self, ino: u64) -> Result<Vec<DirEntry>> {
        self.fs().readdir(ino)
    }
    fn set_cred(&self, cred: Option<Cred>) -> Result<()> {
        Posix::set_cred(self, cred);
        Ok(())
    }
    fn set_path_max(&self, max: usize) -> Result<()> {
        Posix::set_path_max(self, max);
        Ok(())
    }
    fn map_keep_size(&self, fd: Fd, off: u64, len: u64) -> Result<MapView> {
        Posix::map_keep_size(self, fd, off, len)
    }
    fn persist(&self, ptr: *const u8, len: usize) -> Result<()> {
        Posix::persist(self, ptr, len)
    }
    fn unmap(&self, ptr: *mut u8) -> Result<()> {
        Posix::unmap(self, ptr)
    }
}
