//! The process's credentials for the pool's permission checks (`pmkit_fs::posix::Cred`): read
//! once when the pool is mounted, and again after each successful call that changes them
//! (`setuid` and the rest of the family below, which wrap libc's), so a served call makes no
//! system call to learn who is asking. A program that changes its ids with the raw system
//! call, past libc, is not seen (as with `rt_sigaction`, docs/fs.md).

use crate::ids::current;
use crate::state;
use std::ffi::c_int;

/// After a change of ids: give the mounted pool the new credentials (a pool mounted later
/// reads them itself).
fn changed(r: c_int) -> c_int {
    if r == 0 && !state::busy() {
        state::with_mounted(|p| {
            let _ = p.set_cred(Some(current()));
        });
    }
    r
}

macro_rules! wrap {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[no_mangle]
                pub(crate) extern "C" fn $name($($a: $t),*) -> c_int {
            changed(real!($name($($a),*) as fn($($t),*) -> c_int))
        }
    )*};
}

wrap! {
    setuid(u: libc::uid_t);
    seteuid(u: libc::uid_t);
    setreuid(r: libc::uid_t, e: libc::uid_t);
    setresuid(r: libc::uid_t, e: libc::uid_t, s: libc::uid_t);
    setgid(g: libc::gid_t);
    setegid(g: libc::gid_t);
    setregid(r: libc::gid_t, e: libc::gid_t);
    setresgid(r: libc::gid_t, e: libc::gid_t, s: libc::gid_t);
}

/// # Safety
/// setgroups(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn setgroups(n: usize, list: *const libc::gid_t) -> c_int {
    changed(real!(
        setgroups(n, list) as fn(usize, *const libc::gid_t) -> c_int
    ))
}
