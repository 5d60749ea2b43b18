//! Loading a C library at run time: the one loader of the PMDK libraries.

use std::ffi::{c_void, CStr, CString};

/// A library opened with `dlopen`; it stays loaded for the life of the process (PMDK keeps
/// per-process state that must not be unloaded).
pub(super) struct Library {
    handle: *mut c_void,
    soname: &'static str,
}

impl Library {
    /// Open `soname`, or say that it is not installed and where to get it.
    pub(super) fn open(soname: &'static str) -> Result<Library, String> {
        let name = CString::new(soname).expect("soname has no NUL");
        // SAFETY: dlopen with a valid C string; the handle is never closed.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            // SAFETY: dlerror takes no arguments; it returns NULL or a NUL-terminated string.
            let e = unsafe { libc::dlerror() };
            let why = if e.is_null() {
                String::new()
            } else {
                // SAFETY: a non-NULL dlerror result is a NUL-terminated string.
                unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
            };
            return Err(format!(
                "{soname} not installed ({why}); install the packages in scripts/bench-packages.txt"
            ));
        }
        Ok(Library { handle, soname })
    }

    /// The address of symbol `name`.
    pub(super) fn sym(&self, name: &str) -> Result<*mut c_void, String> {
        let c = CString::new(name).expect("symbol has no NUL");
        // SAFETY: a valid handle and C string.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        if p.is_null() {
            Err(format!("{} has no symbol {name}", self.soname))
        } else {
            Ok(p)
        }
    }

    /// Symbol `name` as a function pointer of type `F`.
    ///
    /// # Safety
    /// `F` must be an `extern "C" fn` type with the symbol's real C signature.
    pub(super) unsafe fn func<F: Copy>(&self, name: &str) -> Result<F, String> {
        assert_eq!(
            std::mem::size_of::<F>(),
            std::mem::size_of::<*mut c_void>(),
            "F is a function pointer"
        );
        let p = self.sym(name)?;
        // SAFETY: F is pointer-sized (asserted above) and, by this function's contract, the
        // function pointer type of the symbol p points to.
        Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }
}
