//! Reading a string through a pointer the program passed, and checking a buffer it passed, without
//! trusting the pointer and without a system call. The load that may fault is one instruction of a small routine; the
//! shim's SIGSEGV and SIGBUS handler turns a fault at that instruction into an error return,
//! as the kernel's exception table does for its own `copy_from_user`. Before this, a pointer
//! the shim could not prove readable (anything but the thread's stack, the brk heap and the
//! program's image: every `mmap`'d heap, so most multi-threaded, Python, C++ and Rust programs)
//! cost one `process_vm_readv`, about as much as the `stat` it served. Buffers (`read`/`write`
//! data, a `struct stat` to fill) are probed the same way, one touch per page, so a bad one is
//! EFAULT as the kernel would answer, not a crash in the shim.
//!
//! **Keeping the handler first.** It is installed at the first copy. After that the shim's
//! `sigaction`, `signal`, `sysv_signal` and `bsd_signal` keep it installed for these two
//! signals: what the program asks for is recorded as the next handler (and reported back as
//! the old action), and every fault that is not the routine's is handed to it, or to the
//! default action. A program that sets these handlers with the raw `rt_sigaction` system call
//! goes around this (docs/fs.md, the shim's limits): its handler would then see a bad path
//! pointer's fault.
//!
//! x86_64 only; elsewhere [`copy`] answers `None` and the caller reads with `process_vm_readv`.

// Elsewhere the handler is never installed.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Mutex;

/// The two signals a bad pointer raises (SIGBUS: a mapping past the end of its file).
const SIGNALS: [libc::c_int; 2] = [libc::SIGSEGV, libc::SIGBUS];

/// Whether our handler is installed for both signals.
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Per signal (index in [`SIGNALS`]), the program's action: leaked, never freed (a handler may
/// be reading an old one while the program sets a new one); null is the default action.
static NEXT: [AtomicPtr<libc::sigaction>; 2] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];
/// Serialises installation with the program's own `sigaction` calls for these signals.
static LOCK: Mutex<()> = Mutex::new(());

#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    // pmkit_guarded_strcpy(dst rdi, src rsi, max rdx) -> rax: the length of the string at src
    // (copied to dst with its NUL), `max` when no NUL comes within `max` bytes, or -1 when a
    // load faulted (the handler resumes at the fixup).
    ".pushsection .text.pmkit_guarded,\"ax\",@progbits",
    ".p2align 4",
    ".globl pmkit_guarded_strcpy",
    ".hidden pmkit_guarded_strcpy",
    ".type pmkit_guarded_strcpy,@function",
    "pmkit_guarded_strcpy:",
    "    xor eax, eax",
    "2:",
    "    cmp rax, rdx",
    "    jae 3f",
    ".globl pmkit_guarded_load",
    ".hidden pmkit_guarded_load",
    "pmkit_guarded_load:",
    "    movzx ecx, byte ptr [rsi + rax]",
    "    mov byte ptr [rdi + rax], cl",
    "    test cl, cl",
    "    jz 3f",
    "    inc rax",
    "    jmp 2b",
    "3:",
    "    ret",
    ".globl pmkit_guarded_fixup",
    ".hidden pmkit_guarded_fixup",
    "pmkit_guarded_fixup:",
    "    mov rax, -1",
    "    ret",
    ".size pmkit_guarded_strcpy, . - pmkit_guarded_strcpy",
    // pmkit_guarded_probe_read(p rdi, end rsi) / _write: touch one byte of every page of
    // [p, end) (end > p) with a load, or with `lock or byte [x], 0`, an atomic store of the
    // value already there, which needs write permission and changes nothing; rax 0, or -1 when
    // a touch faulted.
    ".p2align 4",
    ".globl pmkit_guarded_probe_read",
    ".hidden pmkit_guarded_probe_read",
    ".type pmkit_guarded_probe_read,@function",
    "pmkit_guarded_probe_read:",
    "4:",
    ".globl pmkit_guarded_touch_read",
    ".hidden pmkit_guarded_touch_read",
    "pmkit_guarded_touch_read:",
    "    movzx eax, byte ptr [rdi]",
    "    and rdi, -4096",
    "    add rdi, 4096",
    "    cmp rdi, rsi",
    "    jb 4b",
    "    xor eax, eax",
    "    ret",
    ".size pmkit_guarded_probe_read, . - pmkit_guarded_probe_read",
    ".p2align 4",
    ".globl pmkit_guarded_probe_write",
    ".hidden pmkit_guarded_probe_write",
    ".type pmkit_guarded_probe_write,@function",
    "pmkit_guarded_probe_write:",
    "5:",
    ".globl pmkit_guarded_touch_write",
    ".hidden pmkit_guarded_touch_write",
    "pmkit_guarded_touch_write:",
    "    lock or byte ptr [rdi], 0",
    "    and rdi, -4096",
    "    add rdi, 4096",
    "    cmp rdi, rsi",
    "    jb 5b",
    "    xor eax, eax",
    "    ret",
    ".size pmkit_guarded_probe_write, . - pmkit_guarded_probe_write",
    ".popsection",
);

#[cfg(target_arch = "x86_64")]
extern "C" {
    fn pmkit_guarded_strcpy(dst: *mut u8, src: *const u8, max: usize) -> isize;
    fn pmkit_guarded_probe_read(p: *const u8, end: *const u8) -> isize;
    fn pmkit_guarded_probe_write(p: *mut u8, end: *const u8) -> isize;
    static pmkit_guarded_load: u8;
    static pmkit_guarded_touch_read: u8;
    static pmkit_guarded_touch_write: u8;
    static pmkit_guarded_fixup: u8;
}

/// EFAULT when `[p, p + len)` cannot be read (`write`: written), as the kernel answers for a bad
/// buffer; `Ok` where it can, or where this cannot be asked (the caller's contract is trusted).
pub(crate) fn check(p: *const u8, len: usize, write: bool) -> Result<(), std::ffi::c_int> {
    match accessible(p, len, write) {
        Some(false) => Err(libc::EFAULT),
        _ => Ok(()),
    }
}

/// Whether every byte of `[p, p + len)` can be read (`write`: also written) now, where a plain
/// access might fault: `Some(true)` or `Some(false)` (unmapped, not permitted, or a range that
/// wraps around the address space); `None` when this cannot be asked here (read it another way,
/// or trust the caller). One touch per page.
pub(crate) fn accessible(p: *const u8, len: usize, write: bool) -> Option<bool> {
    #[cfg(target_arch = "x86_64")]
    {
        if len == 0 {
            return Some(true);
        }
        let Some(end) = (p as usize).checked_add(len) else {
            return Some(false);
        };
        if !install() {
            return None;
        }
        // SAFETY: the routines only touch bytes of `[p, end)`, the write one with an atomic
        // store of the value already there; a fault resumes at the fixup (-1).
        let r = unsafe {
            if write {
                pmkit_guarded_probe_write(p.cast_mut(), end as *const u8)
            } else {
                pmkit_guarded_probe_read(p, end as *const u8)
            }
        };
        Some(r == 0)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (p, len, write);
        None
    }
}

/// The NUL-terminated string at `ptr`, fewer than `max` bytes before its NUL: `Some(Ok(bytes))`;
/// `Some(Err(EFAULT))` when memory on the way is not readable, `Some(Err(ENAMETOOLONG))` when
/// no NUL comes within `max` bytes; `None` when this cannot be done here (not x86_64, or the
/// handler could not be installed): read it another way.
pub(crate) fn copy(ptr: *const libc::c_char, max: usize) -> Option<Result<Vec<u8>, libc::c_int>> {
    #[cfg(target_arch = "x86_64")]
    {
        if !install() {
            return None;
        }
        // Not zeroed: the routine writes what is kept (zeroing PATH_MAX bytes cost a sixth of a
        // stat).
        let mut buf: Vec<u8> = Vec::with_capacity(max + 1);
        // SAFETY: `buf` has room for `max + 1` bytes, so every store of the routine (at most
        // `max` bytes and a NUL) stays inside it; its loads from `ptr` may fault, and the
        // handler (installed above, kept first by the wrappers below) resumes at the fixup, -1.
        let n = unsafe { pmkit_guarded_strcpy(buf.as_mut_ptr(), ptr.cast(), max) };
        if n < 0 {
            return Some(Err(libc::EFAULT));
        }
        if n as usize >= max {
            return Some(Err(libc::ENAMETOOLONG));
        }
        // SAFETY: the routine wrote the `n` bytes before the NUL.
        unsafe { buf.set_len(n as usize) };
        Some(Ok(buf))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (ptr, max);
        None
    }
}

/// Install the handler for both signals (once); whether it is in place.
fn install() -> bool {
    if INSTALLED.load(Ordering::Acquire) {
        return true;
    }
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if INSTALLED.load(Ordering::Acquire) {
        return true;
    }
    for (i, &sig) in SIGNALS.iter().enumerate() {
        // SAFETY: zeroed sigactions are valid; the mask is ours to fill.
        let new = unsafe {
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_fault as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            new
        };
        // The replaced action goes to a leaked allocation that lives as long as the process.
        // SAFETY: an all-zero sigaction is valid.
        let old: &'static mut libc::sigaction = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
        let old: *mut libc::sigaction = old;
        let r = real!(sigaction(sig, &new, old)
            as fn(
                libc::c_int,
                *const libc::sigaction,
                *mut libc::sigaction,
            ) -> libc::c_int);
        NEXT[i].store(old, Ordering::Release);
        if r != 0 {
            return false;
        }
    }
    INSTALLED.store(true, Ordering::Release);
    true
}

/// The shim's SIGSEGV/SIGBUS handler: a fault of the guarded load resumes at the fixup; any other
/// goes to the program's handler, or to the default action. Async-signal-safe (atomics, the
/// context's registers, and system calls).
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: with SA_SIGINFO the kernel passes the interrupted context as a `ucontext_t`; the
    // two labels are addresses in the routine above (never read through).
    unsafe {
        let uc = ctx.cast::<libc::ucontext_t>();
        let rip = &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize];
        let guarded = [
            std::ptr::addr_of!(pmkit_guarded_load),
            std::ptr::addr_of!(pmkit_guarded_touch_read),
            std::ptr::addr_of!(pmkit_guarded_touch_write),
        ];
        if guarded.iter().any(|&g| *rip as usize == g as usize) {
            *rip = std::ptr::addr_of!(pmkit_guarded_fixup) as i64;
            return;
        }
    }
    chain(sig, info, ctx)
}

/// Not ours: the program's handler for `sig`, as it asked for it; with none (or SIG_IGN, which a
/// fault ignores anyway), the default action: restored, then the fault repeats on return or a
/// sent signal is sent again, and it ends the process as it would have without the shim.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let i = SIGNALS.iter().position(|&s| s == sig).unwrap_or(0);
    let next = NEXT[i].load(Ordering::Acquire);
    // SAFETY: `next` is null or a leaked action, never freed; a handler address in it has the
    // signature its SA_SIGINFO flag says (the program set it so).
    unsafe {
        if !next.is_null()
            && (*next).sa_sigaction != libc::SIG_DFL
            && (*next).sa_sigaction != libc::SIG_IGN
        {
            let a = *next;
            if a.sa_flags & libc::SA_RESETHAND != 0 {
                // Null is the default action (no allocation in a handler).
                NEXT[i].store(std::ptr::null_mut(), Ordering::Release);
            }
            // Block what the kernel would have blocked for the program's handler.
            let mut mask = a.sa_mask;
            if a.sa_flags & libc::SA_NODEFER == 0 {
                libc::sigaddset(&mut mask, sig);
            }
            let mut was: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &mask, &mut was);
            if a.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(a.sa_sigaction);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(a.sa_sigaction);
                f(sig);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &was, std::ptr::null_mut());
            return;
        }
        INSTALLED.store(false, Ordering::Release);
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            &dfl as *const libc::sigaction,
            std::ptr::null_mut::<libc::sigaction>(),
            8usize,
        );
        // A fault (si_code > 0) repeats when we return; a signal sent by kill or raise does not.
        if info.is_null() || (*info).si_code <= 0 {
            libc::raise(sig);
        }
    }
}

/// The program's `sigaction` for SIGSEGV or SIGBUS while our handler is installed: recorded
/// (and the previous one reported), ours kept. `None`: not ours to answer, call libc's.
///
/// # Safety
/// `act` and `old` are null or valid, as for `sigaction(2)`.
unsafe fn program_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> Option<libc::c_int> {
    let i = SIGNALS.iter().position(|&s| s == sig)?;
    if !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    let prev = NEXT[i].load(Ordering::Acquire);
    // SAFETY: the caller's contract for `act`/`old`; `prev` is null or a leaked action.
    unsafe {
        if !old.is_null() {
            *old = if prev.is_null() {
                std::mem::zeroed()
            } else {
                *prev
            };
        }
        if !act.is_null() {
            NEXT[i].store(Box::leak(Box::new(*act)), Ordering::Release);
        }
    }
    Some(0)
}

/// `sigaction(2)`: SIGSEGV and SIGBUS are recorded while the shim's handler is installed
/// ([`program_sigaction`]); everything else is libc's.
///
/// # Safety
/// As `sigaction(2)`.
#[no_mangle]
pub(crate) unsafe extern "C" fn sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    // SAFETY: the caller's contract, forwarded.
    if let Some(r) = unsafe { program_sigaction(sig, act, old) } {
        return r;
    }
    real!(sigaction(sig, act, old)
        as fn(
            libc::c_int,
            *const libc::sigaction,
            *mut libc::sigaction,
        ) -> libc::c_int)
}

/// `signal(3)` as glibc defines it (BSD semantics: SA_RESTART, the handler stays), through the
/// shim's [`sigaction`] for SIGSEGV and SIGBUS; libc's otherwise.
///
/// # Safety
/// As `signal(3)`.
#[no_mangle]
pub(crate) unsafe extern "C" fn signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    // SAFETY: as `signal(3)`.
    unsafe { via_sigaction(sig, handler, libc::SA_RESTART) }.unwrap_or_else(|| {
        real!(signal(sig, handler) as fn(libc::c_int, libc::sighandler_t) -> libc::sighandler_t)
    })
}

/// `bsd_signal(3)`: `signal` under another name.
///
/// # Safety
/// As `signal(3)`.
#[no_mangle]
pub(crate) unsafe extern "C" fn bsd_signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    // SAFETY: as `signal(3)`.
    unsafe { via_sigaction(sig, handler, libc::SA_RESTART) }.unwrap_or_else(|| {
        real!(bsd_signal(sig, handler) as fn(libc::c_int, libc::sighandler_t) -> libc::sighandler_t)
    })
}

/// `sysv_signal(3)`: System V semantics (the handler is reset on delivery, not blocked).
///
/// # Safety
/// As `sysv_signal(3)`.
#[no_mangle]
pub(crate) unsafe extern "C" fn sysv_signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    // SAFETY: as `signal(3)`.
    unsafe { via_sigaction(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER) }.unwrap_or_else(
        || {
            real!(sysv_signal(sig, handler)
                as fn(libc::c_int, libc::sighandler_t) -> libc::sighandler_t)
        },
    )
}

/// A `signal`-style call for SIGSEGV or SIGBUS while the handler is installed, as a `sigaction`
/// with `flags`; `None` otherwise.
///
/// # Safety
/// As `signal(3)`.
unsafe fn via_sigaction(
    sig: libc::c_int,
    handler: libc::sighandler_t,
    flags: libc::c_int,
) -> Option<libc::sighandler_t> {
    // SAFETY: zeroed sigactions are valid; `program_sigaction` gets valid pointers.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler;
        act.sa_flags = flags;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        program_sigaction(sig, &act, &mut old)?;
        Some(old.sa_sigaction)
    }
}
