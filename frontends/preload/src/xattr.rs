//! Extended attributes are not served: ENOTSUP for pool paths and shim descriptors.

use crate::state::{self, enter, route, Route};
use std::ffi::{c_char, c_int, c_void};

/// Extended attributes are not served (ls -l and cp -a ask for ACLs and security labels):
/// ENOTSUP for pool paths, which those tools take as "none".
macro_rules! no_xattr_path {
    ($name:ident($($a:ident: $t:ty),*)) => {
        /// # Safety
        /// The xattr(7) call's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, $($a: $t),*) -> isize {
            // SAFETY: the caller's contract.
            match unsafe { route(libc::AT_FDCWD, path) } {
                Route::Pool(_) => enter(-1, |_| Err(libc::ENOTSUP)),
                Route::Real => real!($name(path, $($a),*) as fn(*const c_char, $($t),*) -> isize),
            }
        }
    };
}

no_xattr_path!(getxattr(name: *const c_char, v: *mut c_void, n: usize));
no_xattr_path!(lgetxattr(name: *const c_char, v: *mut c_void, n: usize));
no_xattr_path!(listxattr(list: *mut c_char, n: usize));
no_xattr_path!(llistxattr(list: *mut c_char, n: usize));

/// As [`getxattr`], for descriptors.
macro_rules! no_xattr_fd {
    ($name:ident($($a:ident: $t:ty),*)) => {
        /// # Safety
        /// The xattr(7) call's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, $($a: $t),*) -> isize {
            if state::lookup(fd).is_some() {
                return enter(-1, |_| Err(libc::ENOTSUP));
            }
            real!($name(fd, $($a),*) as fn(c_int, $($t),*) -> isize)
        }
    };
}

no_xattr_fd!(fgetxattr(name: *const c_char, v: *mut c_void, n: usize));
no_xattr_fd!(flistxattr(list: *mut c_char, n: usize));
