//! Who the process is: the credentials the pool's permission checks use, read with libc's
//! calls (`creds` keeps the mounted pool's copy current when they change).

use crate::busy::Busy;
use pmkit_fs::posix::Cred;
use std::ffi::c_int;

/// Who this process is now: effective user and group, supplementary groups.
pub(crate) fn current() -> Cred {
    let _b = Busy::new();
    // SAFETY: geteuid and getegid cannot fail; getgroups writes at most `n` ids into a buffer
    // of `n` (asked first with 0).
    unsafe {
        let n = libc::getgroups(0, std::ptr::null_mut()).max(0) as usize;
        let mut g = vec![0 as libc::gid_t; n];
        let got = libc::getgroups(n as c_int, g.as_mut_ptr()).max(0) as usize;
        g.truncate(got);
        Cred::new(libc::geteuid(), libc::getegid(), g)
    }
}
