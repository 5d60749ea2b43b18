//! How a call's arguments travel: [`Wire`] turns a client's argument into the owned value a
//! request carries, [`Arg`] lends it back to the server's call in the type the method takes.
//! Spelled out per type (no blanket impls), so each argument type is a choice.

use pmkit_fs::posix::{Fd, FileFlag, Lock, Whence};
use pmkit_fs::{Falloc, RenameFlags};

/// A client argument as the owned value a request carries.
pub(crate) trait Wire {
    type Owned;
    fn own(self) -> Self::Owned;
}

/// A request's owned value as the argument the server's method takes.
pub(crate) trait Arg<'a, T> {
    fn arg(&'a self) -> T;
}

impl Wire for &[u8] {
    type Owned = Vec<u8>;
    fn own(self) -> Vec<u8> {
        self.to_vec()
    }
}

impl<'a> Arg<'a, &'a [u8]> for Vec<u8> {
    fn arg(&'a self) -> &'a [u8] {
        self
    }
}

/// utimensat's times: `libc::timespec` has no serde form, so (seconds, nanoseconds).
type Times = Option<[(i64, i64); 2]>;

impl Wire for Option<[libc::timespec; 2]> {
    type Owned = Times;
    fn own(self) -> Times {
        self.map(|t| t.map(|t| (t.tv_sec, t.tv_nsec)))
    }
}

impl<'a> Arg<'a, Option<[libc::timespec; 2]>> for Times {
    fn arg(&'a self) -> Option<[libc::timespec; 2]> {
        self.map(|t| {
            t.map(|(s, n)| libc::timespec {
                tv_sec: s,
                tv_nsec: n,
            })
        })
    }
}

macro_rules! copied {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            type Owned = $t;
            fn own(self) -> $t {
                self
            }
        }
        impl<'a> Arg<'a, $t> for $t {
            fn arg(&'a self) -> $t {
                *self
            }
        }
    )*};
}

copied!(
    i32,
    u32,
    i64,
    u64,
    bool,
    Fd,
    Whence,
    RenameFlags,
    Falloc,
    FileFlag,
    Lock,
    Option<u32>,
    Option<i64>,
    Option<u64>
);
