//! syscall(2), libc's call of a system call by number, which programs use for calls libc wraps
//! late or not at all (fsx calls copy_file_range so). The numbers the shim serves as functions
//! go to those functions (copy_file_range, which leaves descriptors outside the pool to libc);
//! every other number is one jump to libc's `syscall`, with the caller's registers and stack
//! as they were: no frame of ours stands between a `vfork` or `clone` by number and its
//! caller.

use std::ffi::{c_int, c_long, c_uint};
use std::sync::atomic::{AtomicUsize, Ordering};

/// libc's `syscall`, found when the library loads (so no call, a vfork child's say, looks it
/// up), or at the first call that comes before that (another library's constructor, or this
/// library's own code run from one).
static REAL: AtomicUsize = AtomicUsize::new(0);

extern "C" fn find_real() -> usize {
    let p = crate::real::lookup("syscall\0");
    REAL.store(p, Ordering::Relaxed);
    p
}

extern "C" fn find_real_at_load() {
    find_real();
}

#[used]
#[link_section = ".init_array"]
static FIND_REAL: extern "C" fn() = find_real_at_load;

/// A call before [`REAL`] was set: find libc's `syscall` and call it (this one call has a
/// frame of ours).
///
/// # Safety
/// syscall(2)'s contract.
unsafe extern "C" fn first_call(
    n: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    // SAFETY: libc's `syscall` (non-NULL, checked by `lookup`), of this C prototype.
    let real: unsafe extern "C" fn(c_long, ...) -> c_long =
        unsafe { std::mem::transmute(find_real()) };
    // SAFETY: the caller's arguments, forwarded unchanged under the caller's contract.
    unsafe { real(n, a, b, c, d, e, f) }
}

/// syscall(SYS_copy_file_range, ...): the number, then the call's six arguments, where the
/// variadic call put them (registers, as for a plain call).
///
/// # Safety
/// copy_file_range(2)'s contract.
unsafe extern "C" fn copy_by_number(
    _nr: c_long,
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: usize,
    flags: c_uint,
) -> c_long {
    // SAFETY: the caller's contract.
    unsafe { crate::fd::copy_file_range(fd_in, off_in, fd_out, off_out, len, flags) as c_long }
}

/// # Safety
/// syscall(2)'s contract; the body only compares the number and jumps.
#[unsafe(naked)]
#[no_mangle]
pub(crate) unsafe extern "C" fn syscall() {
    #[cfg(target_arch = "x86_64")]
    core::arch::naked_asm!(
        "cmp rdi, {nr}",
        "je {copy}",
        // r11: scratch in the calling convention, never an argument.
        "mov r11, qword ptr [rip + {real}]",
        "test r11, r11",
        "jz {first}",
        "jmp r11",
        nr = const libc::SYS_copy_file_range,
        copy = sym copy_by_number,
        real = sym REAL,
        first = sym first_call,
    );
    #[cfg(target_arch = "aarch64")]
    core::arch::naked_asm!(
        "cmp x0, #{nr}",
        "b.eq {copy}",
        // x16: the intra-procedure-call scratch register, never an argument.
        "adrp x16, {real}",
        "ldr x16, [x16, :lo12:{real}]",
        "cbz x16, {first}",
        "br x16",
        nr = const libc::SYS_copy_file_range,
        copy = sym copy_by_number,
        real = sym REAL,
        first = sym first_call,
    );
}
