//! libc's own functions, found once with `dlsym(RTLD_NEXT, name)` and kept.

/// Call libc's `name` with the arguments, typed as the C prototype `fn(types) -> ret`.
macro_rules! real {
    ($name:ident($($arg:expr),* $(,)?) as fn($($t:ty),* $(,)?) -> $r:ty) => {{
        static P: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut p = P.load(std::sync::atomic::Ordering::Relaxed);
        if p == 0 {
            p = $crate::real::lookup(concat!(stringify!($name), "\0"));
            P.store(p, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: `p` is libc's (non-NULL, checked by `lookup`) function of this C prototype.
        let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(p) };
        // SAFETY: the caller's arguments, forwarded unchanged under the caller's contract.
        unsafe { f($($arg),*) }
    }};
}

/// Export C function `$name` as one jump to `$target`, a C definition of a variadic call
/// (`execl.c`: stable Rust cannot define one), so the caller's registers and stack
/// arrive at it as they were.
macro_rules! variadic {
    ($name:ident => $target:ident) => {
        /// # Safety
        /// The C function's contract; the body is one jump to its C implementation.
        #[unsafe(naked)]
        #[no_mangle]
        pub(crate) unsafe extern "C" fn $name() {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!("jmp {}", sym $target);
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!("b {}", sym $target);
        }
    };
}

/// The next definition of `name` (NUL-terminated) after this library; aborts when missing (a
/// program can only call a function its libc has, so this is a broken installation).
pub(crate) fn lookup(name: &'static str) -> usize {
    // SAFETY: `name` is NUL-terminated (the macro appends it).
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) };
    if p.is_null() {
        let msg = format!(
            "pmkit-preload: libc has no {}\n",
            name.trim_end_matches('\0')
        );
        // SAFETY: a write of our own buffer to stderr, then abort.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    p as usize
}
