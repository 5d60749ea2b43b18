//! The SIGSEGV plumbing shared by systems that resolve some faults themselves (the object store's
//! write-fault tracking, X-Mem's writers waiting out a migration): install a handler once,
//! keeping the action it replaced, and hand every fault that is not theirs to that action.

use std::sync::OnceLock;

/// A SIGSEGV handler with `SA_SIGINFO`.
pub type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// One system's SIGSEGV handler and the action it replaced. Keep it in a `static`.
pub struct Chained {
    /// Address of the replaced `sigaction` (leaked: a handler may read it at any time).
    old: OnceLock<usize>,
}

impl Chained {
    pub const fn new() -> Chained {
        Chained {
            old: OnceLock::new(),
        }
    }

    /// Install `handler` for SIGSEGV (`SA_SIGINFO | SA_NODEFER`), the first time only; the
    /// action it replaces is kept for [`Chained::chain`].
    pub fn install(&self, handler: Handler) -> std::io::Result<()> {
        let mut err = None;
        self.old.get_or_init(|| {
            // SAFETY: sigaction with a zeroed struct and our handler; the old action goes to a
            // leaked allocation that lives as long as the process.
            unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = handler as *const () as usize;
                new.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
                libc::sigemptyset(&mut new.sa_mask);
                let old: &'static mut libc::sigaction = Box::leak(Box::new(std::mem::zeroed()));
                if libc::sigaction(libc::SIGSEGV, &new, old) != 0 {
                    err = Some(std::io::Error::last_os_error());
                }
                old as *mut libc::sigaction as usize
            }
        });
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Not ours: hand the fault to the replaced action, or restore the default action and
    /// return, so the faulting access repeats and kills the process as it would have without
    /// us. Async-signal-safe (an atomic load and system calls only).
    pub fn chain(&self, sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let old = self.old.get().copied().unwrap_or(0) as *const libc::sigaction;
        // SAFETY: `old` was filled by sigaction at install and is never freed; a handler
        // address taken from it has the signature its `SA_SIGINFO` flag says.
        unsafe {
            if !old.is_null()
                && (*old).sa_sigaction != libc::SIG_DFL
                && (*old).sa_sigaction != libc::SIG_IGN
            {
                if (*old).sa_flags & libc::SA_SIGINFO != 0 {
                    let f: Handler = std::mem::transmute((*old).sa_sigaction);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute((*old).sa_sigaction);
                    f(sig);
                }
                return;
            }
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGSEGV, &dfl, std::ptr::null_mut());
        }
    }
}

impl Default for Chained {
    fn default() -> Self {
        Chained::new()
    }
}
